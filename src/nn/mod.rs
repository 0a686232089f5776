//! Building blocks shared by every model family: checkpoint loading, layers (linear
//! projections, norms, attention projections, feed-forward) and the Mistral-style decoder
//! with its slot KV pool, each with the keys a checkpoint stores it under; token sampling as
//! Hugging Face `generate` does it.

pub mod checkpoint;
pub mod config_json;
pub mod decoder;
mod error;
pub mod kv_pool;
pub mod layer_probe;
pub mod layers;
pub mod mask;
pub mod mistral_params;
pub mod pth;
pub mod quantized_keys;
pub mod safetensors_writer;
pub mod sampling;

pub use error::LoadError;
