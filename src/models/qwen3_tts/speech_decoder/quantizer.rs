//! The split residual vector quantizer's decode half: codebook 0 (semantic) and codebooks
//! 1.. (acoustic) are looked up, the acoustic rows summed, and each part projected by its own
//! bias-free 1×1 conv to the codebook dimension, then added.

use crate::models::qwen3_tts::config::SpeechDecoderConfig;
use crate::nn::layers::Loader;
use crate::nn::LoadError;
use crate::tensor::{DType, Tensor};

/// Floor of a codebook entry's usage count (`EuclideanCodebook.epsilon`).
const USAGE_FLOOR: f32 = 1e-5;

pub(super) struct SplitQuantizer<T: Tensor> {
    /// Every codebook's entries, `embedding_sum / max(cluster_usage, 1e-5)`, stacked:
    /// `[codebooks · size, dim / 2]`.
    tables: T,
    /// `[dim, dim / 2]` each.
    semantic_proj: T,
    acoustic_proj: T,
    codebooks: usize,
    size: usize,
    half: usize,
    device: T::Device,
}

/// A codebook's `[size, dim]` entries, the running sums divided by their usage counts
/// floored at 1e-5 (`EuclideanCodebook.embed`), computed in f32 on the host.
pub(in crate::models::qwen3_tts) fn codebook_entries<T: Tensor>(
    l: &Loader<T>,
    sum_key: &str,
    usage_key: &str,
    size: usize,
    dim: usize,
) -> Result<Vec<f32>, LoadError> {
    let sum = l.host_f32(sum_key, &[size, dim])?;
    let usage = l.host_f32(usage_key, &[size])?;
    Ok(sum
        .chunks(dim)
        .zip(usage)
        .flat_map(|(row, u)| row.iter().map(move |x| x / u.max(USAGE_FLOOR)))
        .collect())
}

impl<T: Tensor> SplitQuantizer<T> {
    /// Keys under `decoder.quantizer.`. The official decoder fixes one semantic codebook.
    pub fn load(l: &Loader<T>, c: &SpeechDecoderConfig) -> Result<Self, LoadError> {
        let (size, half) = (c.codebook_size, c.codebook_dim / 2);
        let mut tables = Vec::with_capacity(c.num_quantizers * size * half);
        for book in 0..c.num_quantizers {
            let (part, layer) = match book {
                0 => ("rvq_first", 0),
                k => ("rvq_rest", k - 1),
            };
            let p = format!("{part}.vq.layers.{layer}._codebook");
            tables.extend(codebook_entries(
                l,
                &format!("{p}.embedding_sum"),
                &format!("{p}.cluster_usage"),
                size,
                half,
            )?);
        }
        let proj = |part: &str| -> Result<T, LoadError> {
            let key = format!("{part}.output_proj.weight");
            Ok(l.tensor(&key, &[c.codebook_dim, half, 1])?
                .reshape(&[c.codebook_dim, half]))
        };
        Ok(SplitQuantizer {
            tables: T::from_f32(
                l.device,
                &tables,
                &[c.num_quantizers * size, half],
                DType::F32,
            ),
            semantic_proj: proj("rvq_first")?,
            acoustic_proj: proj("rvq_rest")?,
            codebooks: c.num_quantizers,
            size,
            half,
            device: l.device.clone(),
        })
    }

    /// Frames of `codebooks` valid codes -> `[1, frames, dim]` in `dtype`.
    pub fn decode(&self, codes: &[Vec<u32>], dtype: DType) -> T {
        let frames = codes.len();
        let ids: Vec<i64> = codes
            .iter()
            .flat_map(|frame| {
                frame
                    .iter()
                    .enumerate()
                    .map(|(book, &code)| (book * self.size) as i64 + i64::from(code))
            })
            .collect();
        let rows = self
            .tables
            .embedding(&T::from_i64(&self.device, &ids, &[frames, self.codebooks]))
            .to_dtype(dtype);
        let book = |k: usize| rows.narrow(1, k, 1).reshape(&[frames, self.half]);
        // Summed one codebook after the other, as the official loop adds them.
        let acoustic = (2..self.codebooks).fold(book(1), |sum, k| sum.add(&book(k)));
        let semantic = book(0).linear(&self.semantic_proj);
        let dim = self.semantic_proj.shape()[0];
        semantic
            .add(&acoustic.linear(&self.acoustic_proj))
            .reshape(&[1, frames, dim])
    }
}
