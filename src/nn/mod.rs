//! Building blocks shared by every model family: checkpoint loading, layers (linear
//! projections, norms, attention projections, feed-forward) and the Mistral-style decoder
//! with its KV cache.

pub mod checkpoint;
pub mod decoder;
mod error;
pub mod layers;

pub use error::LoadError;
