//! The checkpoint's key names (`consolidated.safetensors`) that this family spells: its
//! loaders read them, and its test checkpoint (`testkit.rs`) writes them. The keys inside a
//! layer, an attention or a feed-forward block, and the backbone's (`layers.N`, `norm`), are
//! defined once in `crate::nn` (`LayerKeys::mistral`, `DecoderStyle::layer_keys`,
//! `FINAL_NORM`); a codec layer's scales in `codec.rs` (`layer_scales`); loaders and writers
//! both read them there.

/// The text token embeddings (the backbone's tied head).
pub const TOKEN_EMBEDDINGS: &str = "mm_audio_embeddings.tok_embeddings.weight";
/// The audio codes' embeddings, fed back after each frame.
pub const AUDIO_EMBEDDINGS: &str =
    "mm_audio_embeddings.audio_codebook_embeddings.embeddings.weight";
/// The flow head's prefix.
pub const FLOW_HEAD: &str = "acoustic_transformer";
/// The flow head's semantic head: END_AUDIO's row is the one that stops a session.
pub const SEMANTIC_HEAD: &str = "acoustic_transformer.semantic_codebook_output.weight";
/// The codec's prefix.
pub const CODEC: &str = "audio_tokenizer";
