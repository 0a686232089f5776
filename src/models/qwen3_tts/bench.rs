//! `voxtral-tts bench`'s hook for Qwen3-TTS folders, timed through the engine interface: the
//! weight bytes a frame reads, for the floor of its time.

use crate::nn::quantized_keys::{loaded_bytes, Quantized};
use crate::tensor::DType;
use anyhow::Result;
use std::path::Path;

/// Bytes of weights a Qwen3-TTS frame reads, computing in `dtype` with the weights stored in
/// blocks or quantized at load (`at_load`) at their format's size: the talker's layers and
/// codec head once, the code predictor's layers (and its input projection) once per codebook
/// pass (15), and one of its 15 heads per pass. Embedding tables are gathered, not read.
/// `None` for a folder without them (sharded weights).
pub fn weight_bytes_per_frame(
    dir: &Path,
    dtype: DType,
    at_load: &[Quantized],
) -> Result<Option<f64>> {
    let path = dir.join("model.safetensors");
    if !dir.join("speech_tokenizer").is_dir() || !path.exists() {
        return Ok(None);
    }
    let (mut once, mut per_pass, mut heads) = (0usize, 0usize, 0usize);
    for (name, bytes) in loaded_bytes(&path, dtype, at_load)? {
        if name.starts_with("talker.code_predictor.lm_head.") {
            heads += bytes;
        } else if name.starts_with("talker.code_predictor.model.layers.")
            || name.starts_with("talker.code_predictor.small_to_mtp_projection.")
        {
            per_pass += bytes;
        } else if name.starts_with("talker.model.layers.") || name.starts_with("talker.codec_head.")
        {
            once += bytes;
        }
    }
    // 15 passes, each reading one head.
    Ok(Some((once + 15 * per_pass + heads) as f64))
}
