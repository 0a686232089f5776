//! An OpenAI-compatible speech server: Voxtral-4B-TTS, Qwen3-TTS and XTTS-v2 speak, Voxtral
//! Realtime transcribes, on libtorch (or MLX).
//!
//! A request's path, by module:
//! - `server`: the HTTP API (`voxtral-tts serve`) and Wyoming; settings in `config`.
//! - `scheduler`: the bounded job queues and the worker threads that own the models.
//! - `engine`: the interfaces every speaking family implements (prepare, sessions, steps).
//! - `models`: one folder per family, each loading its published folder.
//! - `nn`: layers, checkpoints and sampling shared by the families.
//! - `tensor`: the small tensor interface the models are written against, its backends and
//!   the CPU kernels.
//! - `text`, `tokenizers`: input normalization and splitting, and the families' tokenizers.
//! - `audio`: decoding uploads, and PCM -> wav, pcm, mp3, flac, opus, aac.
//! - `device`: the backend and device a command runs on.
//! - `cli`: the `voxtral-tts` command.
//! - `testmodel`: random checkpoints in the published layouts (feature `testmodel`, on by
//!   default), for the tests and benchmarks.

pub mod audio;
pub mod bench;
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
