//! Qwen3-TTS-12Hz (0.6B and 1.7B; Base, CustomVoice, VoiceDesign): so far its configuration
//! files, the special ids of its text tokenizer and the speech-tokenizer decoder (codes to
//! waveform). Spec: `shared/docs/qwen3-tts-spec.md`.

pub mod config;
pub mod speech_decoder;
pub mod tokens;
