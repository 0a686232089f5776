//! Test checkpoints whose stop token can never be picked, made by rewriting a random
//! checkpoint's output head in place: every request then runs to its frame limit, whatever the
//! CPU's numerics. For the tests whose control flow needs a long request or an exact length;
//! the parity tests keep the checkpoints that stop on their own.
//!
//! The trick for a head without a bias: the stop row is zero (a logit of exactly 0), and the
//! rows of the codes come in pairs of opposite sign, so one logit of each pair is above 0
//! unless the hidden state is orthogonal to both; it would have to be orthogonal to every
//! row, and they span the hidden space. Negating a value flips its sign bit, so the two logits
//! of a pair are the same sum with opposite signs. With the stop row after the codes a tie
//! goes to a code (the first maximum wins); before them, a tie would need every logit 0.

use crate::models::voxtral_tts::params::END_AUDIO_CODE;
use anyhow::{ensure, Context, Result};
use safetensors::Dtype;
use std::ops::Range;
use std::path::Path;

/// Voxtral TTS: END_AUDIO's row of the semantic head zero, the codes after it in opposite
/// pairs.
pub fn never_end_audio(weights: &Path) -> Result<()> {
    edit_rows(
        weights,
        "acoustic_transformer.semantic_codebook_output.weight",
        |head| {
            let end = END_AUDIO_CODE as usize;
            head.zero(end);
            head.mirror(end + 1..head.rows);
        },
    )
}

/// Qwen3-TTS: the talker's EOS row zero and the 2048 codes in opposite pairs, so that at most
/// half the codes have a logit below EOS's: greedy never picks it, nor does top-k sampling
/// with k up to 1024.
pub fn never_end_codec(weights: &Path, eos: usize, codes: usize) -> Result<()> {
    edit_rows(weights, "talker.codec_head.weight", |head| {
        head.zero(eos);
        head.mirror(0..codes);
    })
}

/// Voxtral Realtime: `</s>`'s row of the tied embedding (the head) zero, and the rows after it
/// in opposite pairs. Decoding stays bounded: one token per audio position.
pub fn never_end_transcript(weights: &Path, eos: usize) -> Result<()> {
    edit_rows(
        weights,
        "mm_streams_embeddings.embedding_module.tok_embeddings.weight",
        |embeddings| {
            embeddings.zero(eos);
            embeddings.mirror(eos + 1..embeddings.rows);
        },
    )
}

/// XTTS-v2: the stop code's `mel_head` row zero and its bias -10⁴, a logit far below every
/// other code's, so neither greedy decoding nor top-k/top-p sampling picks it.
pub fn never_stop_audio(weights: &Path, stop: usize) -> Result<()> {
    edit_rows(weights, "gpt.mel_head.weight", |head| head.zero(stop))?;
    edit_rows(weights, "gpt.mel_head.bias", |bias| {
        bias.set(stop, -1e4);
    })
}

/// A tensor's bytes seen as rows of its last axis (a vector is one value per row).
struct Rows<'a> {
    data: &'a mut [u8],
    dtype: Dtype,
    /// Bytes per value.
    size: usize,
    row_bytes: usize,
    rows: usize,
}

impl Rows<'_> {
    fn row(&mut self, row: usize) -> &mut [u8] {
        &mut self.data[row * self.row_bytes..(row + 1) * self.row_bytes]
    }

    fn zero(&mut self, row: usize) {
        self.row(row).fill(0);
    }

    /// Each odd row of `rows` (counted from its start) the negation of the row before it.
    fn mirror(&mut self, rows: Range<usize>) {
        let size = self.size;
        let span = &mut self.data[rows.start * self.row_bytes..rows.end * self.row_bytes];
        for pair in span.chunks_exact_mut(2 * self.row_bytes) {
            let (first, second) = pair.split_at_mut(self.row_bytes);
            second.copy_from_slice(first);
            // Little-endian: the sign bit is the top bit of each value's last byte.
            for value in second.chunks_exact_mut(size) {
                value[size - 1] ^= 0x80;
            }
        }
    }

    /// One value of a vector (`f32` only).
    fn set(&mut self, index: usize, value: f32) {
        assert_eq!(self.dtype, Dtype::F32, "set writes f32 values");
        self.row(index).copy_from_slice(&value.to_le_bytes());
    }
}

/// Rewrites the tensor `key` of the safetensors file `path` in place.
fn edit_rows(path: &Path, key: &str, edit: impl FnOnce(&mut Rows)) -> Result<()> {
    let mut bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let (header, metadata) = safetensors::SafeTensors::read_metadata(&bytes)?;
    let info = metadata
        .info(key)
        .with_context(|| format!("{} has no {key}", path.display()))?;
    ensure!(
        matches!(info.dtype, Dtype::BF16 | Dtype::F32),
        "{key} is {:?}, not bf16 or f32",
        info.dtype
    );
    let (dtype, size) = (info.dtype, info.dtype.bitsize() / 8);
    let start = 8 + header + info.data_offsets.0;
    let end = 8 + header + info.data_offsets.1;
    // A vector is one value per row.
    let row_bytes = match info.shape.as_slice() {
        [_] => size,
        shape => shape[shape.len() - 1] * size,
    };
    let data = &mut bytes[start..end];
    let rows = data.len() / row_bytes;
    edit(&mut Rows {
        data,
        dtype,
        size,
        row_bytes,
        rows,
    });
    std::fs::write(path, &bytes).with_context(|| format!("writing {}", path.display()))
}
