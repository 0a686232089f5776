//! One folder per model family, each loading its published folder and implementing the
//! engine interface (`crate::engine`), and the registry that lists them ([`registry`]): which
//! family a folder holds, and its loaders.
//!
//! Adding a family: a folder here with its config structs, its model written against
//! `crate::tensor::Tensor` from the layers in `crate::nn`, an implementation of the engine
//! interface (`TextToSpeech` and `SpeechPreparer`, or `SpeechToText`), a `family.rs` that
//! exports it as a `registry::ModelFamily`, and one line in the registry
//! (docs/architecture.md).

pub mod quantize;
pub mod qwen3_tts;
pub mod registry;
pub mod voxtral_realtime;
pub mod voxtral_tts;
pub mod xtts;
