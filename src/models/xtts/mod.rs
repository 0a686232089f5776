//! XTTS-v2 (coqui-tts; reference code MPL-2.0, weights under the non-commercial Coqui Public
//! Model License): so far, reading its published checkpoints without executing their pickles,
//! converting them to safetensors, and opening the converted folder without any pickle
//! (docs/xtts-v2-spec.md §1, §8); the speaker encoder (`speaker_encoder`, §3.3) and the
//! HiFi-GAN waveform decoder (`hifigan`, §6) with a bounded-window stream (`hifigan_stream`,
//! §7); the text front end (`text`, `tokenizer`, §4; what is exact and what is refused:
//! docs/xtts-text.md).

pub mod checkpoint;
pub mod convert;
pub mod folder;
pub mod hifigan;
pub mod hifigan_stream;
pub mod speaker_encoder;
pub mod text;
pub mod tokenizer;
