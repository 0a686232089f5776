//! Qwen3-TTS-12Hz (0.6B and 1.7B; Base, CustomVoice, VoiceDesign): its configuration files,
//! the special ids of its text tokenizer, the talker and code predictor that turn a prompt
//! into frames of 16 codes, the speaker encoder (x-vector of a reference clip) and the
//! speech-tokenizer decoder (codes to waveform) and encoder (a reference clip to codes, for
//! in-context cloning); `engine` serves them behind the engine interface.
//! Spec: `shared/docs/qwen3-tts-spec.md`.

pub mod bench;
pub mod catalog;
mod code_predictor;
mod codec_transformer;
pub mod config;
pub mod engine;
pub mod family;
pub mod keys;
pub mod model;
pub mod prompt;
pub mod sampling;
pub mod speaker_encoder;
pub mod speaker_mel;
pub mod speech_decoder;
pub mod speech_encoder;
mod talker;
#[cfg(feature = "testkit")]
pub mod testkit;
pub mod tokens;
pub mod voice_encoder;

pub use engine::{Qwen3Engine, Qwen3Prompter};
pub use model::{GenerateError, Qwen3Tts, Session, TalkerOptions};
pub use prompt::{ClonedVoice, PromptInput, Reference, TextLayout, Voice};
pub use sampling::{GenerationParams, Sampling, Uniforms};
