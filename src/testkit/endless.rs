//! Test checkpoints whose stop token can never be picked, made by rewriting a random
//! checkpoint's output head in place (each family's `cached_endless_test_model`): every
//! request then runs to its frame limit, whatever the CPU's numerics. For the tests whose
//! control flow needs a long request or an exact length; the parity tests keep the
//! checkpoints that stop on their own.
//!
//! The trick for a head without a bias: the stop row is zero (a logit of exactly 0), and the
//! rows of the codes come in pairs of opposite sign, so one logit of each pair is above 0
//! unless the hidden state is orthogonal to both; it would have to be orthogonal to every
//! row, and they span the hidden space. Negating a value flips its sign bit, so the two logits
//! of a pair are the same sum with opposite signs. With the stop row after the codes a tie
//! goes to a code (the first maximum wins); before them, a tie would need every logit 0.

use anyhow::{ensure, Context, Result};
use safetensors::Dtype;
use std::ops::Range;
use std::path::Path;

/// A tensor's bytes seen as rows of its last axis (a vector is one value per row).
pub struct Rows<'a> {
    data: &'a mut [u8],
    dtype: Dtype,
    /// Bytes per value.
    size: usize,
    row_bytes: usize,
    pub rows: usize,
}

impl Rows<'_> {
    fn row(&mut self, row: usize) -> &mut [u8] {
        &mut self.data[row * self.row_bytes..(row + 1) * self.row_bytes]
    }

    pub fn zero(&mut self, row: usize) {
        self.row(row).fill(0);
    }

    /// Each odd row of `rows` (counted from its start) the negation of the row before it.
    pub fn mirror(&mut self, rows: Range<usize>) {
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
    pub fn set(&mut self, index: usize, value: f32) {
        assert_eq!(self.dtype, Dtype::F32, "set writes f32 values");
        self.row(index).copy_from_slice(&value.to_le_bytes());
    }
}

/// Rewrites the tensor `key` of the safetensors file `path` in place.
pub fn edit_rows(path: &Path, key: &str, edit: impl FnOnce(&mut Rows)) -> Result<()> {
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
