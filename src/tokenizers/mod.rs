//! Tokenizers shared by model families: Mistral's Tekken (tekken.json).

pub mod tekken;
