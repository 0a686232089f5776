//! XTTS-v2 (coqui-tts; reference code MPL-2.0, weights under the non-commercial Coqui Public
//! Model License): reading its published checkpoints without executing their pickles,
//! converting them to safetensors, and opening the converted folder without any pickle
//! (docs/xtts-v2-spec.md §1, §8); the GPT side: the cloning mel, the conditioning encoder and
//! perceiver (`conditioning`), and the GPT's code generation and latents (`gpt`), §3-§5.

pub mod checkpoint;
pub mod cloning_mel;
pub mod conditioning;
pub mod convert;
pub mod folder;
pub mod gpt;
pub mod gpt_config;
mod layers;
pub mod reference_audio;
