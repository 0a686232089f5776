//! Every integration test, in one binary: one build and one link against libtorch instead of
//! one per file. It needs the random checkpoints (the feature `testkit`). Each file is a module
//! named as it is: `cargo test --features testkit --test it server::` runs the server's tests,
//! `cargo test --features testkit --test it -- --skip parity` all but the parity ones.

mod common;
mod parity_common;

mod audio_formats;
mod audio_input;
mod batching;
mod cli;
mod clients;
mod kubernetes;
mod loading;
mod mistral_sdk;
mod parity;
mod parity_mlx;
mod parity_qwen3_codec;
mod parity_qwen3_tts;
mod parity_qwen3_voice;
mod parity_realtime;
mod parity_xtts;
mod parity_xtts_vocoder;
mod playground;
mod quantization;
mod qwen3_serving;
mod qwen3_tts_goldens;
mod realtime;
mod reliability;
mod server;
mod server_mlx;
mod server_openapi;
mod speech_socket;
mod streaming_codec;
mod transcription;
mod voices;
mod wyoming;
mod xtts_loading;
mod xtts_serving;
mod xtts_tokenizer;
