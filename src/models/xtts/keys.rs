//! The checkpoint's key names (`model.safetensors`) that this family spells at its top level:
//! its loaders read them, and its test checkpoint (`testkit/`) writes them.

/// The GPT's prefix.
pub const GPT: &str = "gpt";
/// The GPT's code head (`.weight`, `.bias`), under its prefix: the stop code's row ends a
/// session.
pub const MEL_HEAD: &str = "mel_head";
/// HiFi-GAN's and the speaker encoder's prefix.
pub const HIFIGAN_DECODER: &str = "hifigan_decoder";

/// `prefix.`: what a loader scoped at `prefix` reads under.
pub fn scope(prefix: &str) -> String {
    format!("{prefix}.")
}
