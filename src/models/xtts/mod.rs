//! XTTS-v2 (coqui-tts; reference code MPL-2.0, weights under the non-commercial Coqui Public
//! Model License): reading its published checkpoints without executing their pickles,
//! converting them to safetensors, and opening the converted folder without any pickle
//! (docs/xtts-v2-spec.md §1, §8); the GPT side: the cloning mel, the conditioning encoder and
//! perceiver (`conditioning`), and the GPT's code generation and latents (`gpt`), §3-§5; the
//! speaker encoder (`speaker_encoder`, §3.3) and the HiFi-GAN waveform decoder (`hifigan`, §6)
//! with a bounded-window stream (`hifigan_stream`, §7), run on a thread of its own
//! (`vocoder`, as the spec's Auralis table advises); the text front end (`text`, `tokenizer`,
//! §4; what is exact and what is refused: docs/xtts-text.md).

pub mod catalog;
pub mod checkpoint;
pub mod cloning_mel;
pub mod conditioning;
pub mod convert;
pub mod engine;
pub mod family;
pub mod folder;
pub mod gpt;
pub mod gpt_config;
pub mod hifigan;
pub mod hifigan_stream;
pub mod keys;
mod layers;
pub mod reference_audio;
pub mod speaker_encoder;
#[cfg(feature = "testkit")]
pub mod testkit;
pub mod text;
pub mod tokenizer;
mod vocoder;
pub mod voice_encoder;

pub use engine::XttsEngine;
