//! Tokenizers shared by model families: Mistral's Tekken (tekken.json) and Qwen2's byte-level
//! BPE (vocab.json + merges.txt), used by Qwen3-TTS.

pub mod qwen2;
pub mod tekken;
