//! An OpenAI-compatible speech server: Voxtral-4B-TTS, Qwen3-TTS and XTTS-v2 speak, Voxtral
//! Realtime transcribes, on libtorch (or MLX).
//!
//! A request's path, by module:
//! - `server`: the HTTP API (`voxtral-tts serve`) and Wyoming; settings in `config`.
//! - `scheduler`: the bounded job queues and the worker threads that own the models.
//! - `engine`: the interfaces every family implements: text to speech (prepare, sessions,
//!   steps), speech to text (`engine::stt`: uploads and live streams in batched steps), voice
//!   encoders.
//! - `models`: one folder per family, each loading its published folder, and the registry
//!   that lists them (`models::registry`: detection, loaders, bench hooks, test checkpoints).
//! - `nn`: layers, checkpoints and sampling shared by the families.
//! - `tensor`: the small tensor interface the models are written against, its backends and
//!   the CPU kernels.
//! - `text`, `tokenizers`: input normalization and splitting, and the families' tokenizers.
//! - `audio`: decoding uploads, and PCM -> wav, pcm, mp3, flac, opus, aac.
//! - `device`: the backend and device a command runs on.
//! - `cli`: the `voxtral-tts` command; `bench`: its `bench` command's settings and measures.
//! - `testkit`: random checkpoints in the published layouts (feature `testkit`, off by
//!   default) for the tests, the benchmarks and the `make-test-model` binary; each family's
//!   writer is its folder's `testkit.rs`.

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
#[cfg(feature = "testkit")]
pub mod testkit;
pub mod text;
pub mod tokenizers;
