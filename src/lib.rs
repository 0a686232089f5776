//! Voxtral TTS: an OpenAI-compatible speech server for Voxtral-4B-TTS on libtorch.
//!
//! - `audio`: PCM -> wav, pcm, mp3, flac, opus, aac (one-shot and streaming).
//! - `tensor`: the small tensor interface the model is written against, and its backends.
//! - `model`: loading the published model folder and running text -> codes -> PCM.
//! - `text`: input normalization and sentence splitting before tokenization.
//! - `testmodel`: random checkpoints in the published layout (feature `testmodel`, on by
//!   default).
//! - `infer`: the inference worker thread that owns the model, and its bounded job queue.
//! - `server`: the OpenAI-compatible HTTP API (`voxtral-tts serve`), settings in `config`.
//! - `cli`: the `voxtral-tts` command.

pub mod audio;
pub mod cli;
pub mod config;
pub mod device;
pub mod engine;
pub mod models;
pub mod nn;
pub mod scheduler;
pub mod server;
pub mod tensor;
#[cfg(feature = "testmodel")]
pub mod testmodel;
pub mod text;
pub mod tokenizers;
