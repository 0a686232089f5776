//! The checkpoint's key names (`model.safetensors`) that this family spells at its top level:
//! its loaders read them, and its test checkpoint (`testkit/`) writes them. The keys inside a
//! GPT-2 block, a conditioning attention block and a perceiver layer are defined once next to
//! their loaders (`gpt::BlockKeys`, `conditioning::AttentionBlockKeys`,
//! `conditioning::PerceiverLayerKeys`), which the writer uses too.

/// The GPT's prefix.
pub const GPT: &str = "gpt";
/// The GPT's code head (`.weight`, `.bias`), under its prefix: the stop code's row ends a
/// session.
pub const MEL_HEAD: &str = "mel_head";
/// The conditioning encoder's prefix.
pub const CONDITIONING_ENCODER: &str = "gpt.conditioning_encoder";
/// The perceiver's prefix.
pub const PERCEIVER: &str = "gpt.conditioning_perceiver";
/// HiFi-GAN's and the speaker encoder's prefix.
pub const HIFIGAN_DECODER: &str = "hifigan_decoder";

/// `prefix.`: what a loader scoped at `prefix` reads under.
pub fn scope(prefix: &str) -> String {
    format!("{prefix}.")
}
