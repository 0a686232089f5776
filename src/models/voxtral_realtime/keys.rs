//! The checkpoint's key names (`consolidated.safetensors`) that this family spells: its
//! loaders read them, and its test checkpoint (`testkit.rs`) writes them. The keys inside a
//! norm, an attention or a feed-forward block are the shared layers' (`crate::nn`).

/// The audio side's prefix: the encoder, the adapter and the token embeddings.
pub const EMBEDDING_MODULE: &str = "mm_streams_embeddings.embedding_module.";
/// The encoder, under [`EMBEDDING_MODULE`].
pub const ENCODER: &str = "whisper_encoder.";
/// The conv stem's two convolutions, under the encoder.
pub const CONV_STEM: [&str; 2] = ["conv_layers.0.conv", "conv_layers.1.conv"];
/// The encoder's final norm, under the encoder.
pub const ENCODER_NORM: &str = "transformer.norm.weight";
/// An encoder layer's biases, under its prefix (the published checkpoint has no `wk` bias).
pub const QUERY_BIAS: &str = "attention.wq.bias";
pub const VALUE_BIAS: &str = "attention.wv.bias";
pub const OUTPUT_BIAS: &str = "attention.wo.bias";
pub const DOWN_BIAS: &str = "feed_forward.w2.bias";
/// The adapter's projections in and out, under [`EMBEDDING_MODULE`].
pub const ADAPTER_IN: &str = "audio_language_projection.0.weight";
pub const ADAPTER_OUT: &str = "audio_language_projection.2.weight";
/// The token embeddings, also the head (tied), from the root.
pub const TOKEN_EMBEDDINGS: &str = "mm_streams_embeddings.embedding_module.tok_embeddings.weight";

/// Encoder layer `i`'s prefix, under the encoder.
pub fn encoder_layer(i: usize) -> String {
    format!("transformer.layers.{i}.")
}

/// Text decoder layer `i`'s delay conditioning (`.0.weight` down, `.2.weight` up), from the
/// root.
pub fn delay_conditioning(i: usize) -> String {
    format!("layers.{i}.ada_rms_norm_t_cond")
}
