//! The checkpoint's key names (`model.safetensors`) that this family spells at its top level:
//! its loaders read them, and its test checkpoint (`testkit.rs`) writes them. The keys inside
//! a decoder layer, an attention or a feed-forward block are defined once in `crate::nn`
//! (`LayerKeys`, `AttentionKeys`, `FeedForwardKeys`, Hugging Face's names); those the codec
//! transformer adds (its GELU MLP, its LayerScales) in `codec_transformer.rs`; loaders and
//! writers both read them there.

/// The talker's prefix.
pub const TALKER: &str = "talker";
/// The code predictor's prefix.
pub const CODE_PREDICTOR: &str = "talker.code_predictor";
/// The speaker encoder's prefix (Base).
pub const SPEAKER_ENCODER: &str = "speaker_encoder";
/// The talker's head, under its prefix: the EOS row is the one that stops a session.
pub const CODEC_HEAD: &str = "codec_head.weight";

/// `prefix.`: what a loader scoped at `prefix` reads under.
pub fn scope(prefix: &str) -> String {
    format!("{prefix}.")
}
