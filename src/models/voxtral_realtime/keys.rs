//! The checkpoint's key names (`consolidated.safetensors`) that this family spells: its
//! loaders read them, and its test checkpoint (`testkit.rs`) writes them. The keys inside a
//! layer, an attention or a feed-forward block (the encoder's and the text decoder's), and
//! the text decoder's `layers.N` and `norm`, are defined once in `crate::nn`
//! (`LayerKeys::mistral`, `DecoderStyle::layer_keys`, `FINAL_NORM`); loaders and writers both
//! read them there.

/// The audio side's prefix: the encoder, the adapter and the token embeddings.
pub const EMBEDDING_MODULE: &str = "mm_streams_embeddings.embedding_module.";
/// The encoder, under [`EMBEDDING_MODULE`].
pub const ENCODER: &str = "whisper_encoder.";
/// The conv stem's two convolutions, under the encoder.
pub const CONV_STEM: [&str; 2] = ["conv_layers.0.conv", "conv_layers.1.conv"];
/// The encoder's final norm, under the encoder.
pub const ENCODER_NORM: &str = "transformer.norm.weight";
/// The adapter's projections in and out, under [`EMBEDDING_MODULE`].
pub const ADAPTER_IN: &str = "audio_language_projection.0.weight";
pub const ADAPTER_OUT: &str = "audio_language_projection.2.weight";
/// The token embeddings, also the head (tied), from the root.
pub const TOKEN_EMBEDDINGS: &str = "mm_streams_embeddings.embedding_module.tok_embeddings.weight";

/// Encoder layer `i`'s prefix, under the encoder: a Mistral layer
/// (`crate::nn::decoder::LayerKeys::mistral`) with biases on its q, v and o projections and
/// its feed-forward's down projection (the published checkpoint has no `wk` bias).
pub fn encoder_layer(i: usize) -> String {
    format!("transformer.layers.{i}")
}

/// Text decoder layer `i`'s delay conditioning (`.0.weight` down, `.2.weight` up), from the
/// root.
pub fn delay_conditioning(i: usize) -> String {
    format!("layers.{i}.ada_rms_norm_t_cond")
}
