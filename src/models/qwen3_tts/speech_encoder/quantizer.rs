//! The split residual vector quantizer's encode half (transformers `MimiSplitResidualVector
//! Quantizer.encode`): the semantic and the acoustic quantizer each project the latents with
//! their own bias-free 1×1 conv, then pick, codebook after codebook, the entry nearest to the
//! residual and subtract it.

use crate::models::qwen3_tts::config::SpeechEncoderConfig;
use crate::models::qwen3_tts::speech_decoder::quantizer::codebook_entries;
use crate::nn::layers::Loader;
use crate::nn::LoadError;
use crate::tensor::{DType, Tensor};

struct Codebook<T> {
    /// `[size, dim]`.
    entries: T,
    /// `|e|² / 2` per entry, `[size]`.
    half_norms: T,
}

pub(super) struct ResidualQuantizer<T> {
    /// `[dim, hidden]`; absent when the codebooks are as wide as the latents.
    input_proj: Option<T>,
    codebooks: Vec<Codebook<T>>,
}

impl<T: Tensor> ResidualQuantizer<T> {
    /// The first `count` codebooks under `encoder.quantizer.{name}.`.
    pub fn load(l: &Loader<T>, c: &SpeechEncoderConfig, count: usize) -> Result<Self, LoadError> {
        let (size, dim) = (c.codebook_size, c.codebook_dim);
        let input_proj = if c.vector_quantization_hidden_dimension != c.hidden_size {
            let shape = [c.vector_quantization_hidden_dimension, c.hidden_size];
            Some(
                l.tensor("input_proj.weight", &[shape[0], shape[1], 1])?
                    .reshape(&shape),
            )
        } else {
            None
        };
        let codebooks = (0..count)
            .map(|i| {
                let p = format!("layers.{i}.codebook");
                let entries = codebook_entries(
                    l,
                    &format!("{p}.embed_sum"),
                    &format!("{p}.cluster_usage"),
                    size,
                    dim,
                )?;
                let half_norms: Vec<f32> = entries
                    .chunks(dim)
                    .map(|e| e.iter().map(|x| x * x).sum::<f32>() / 2.0)
                    .collect();
                Ok(Codebook {
                    entries: T::from_f32(l.device, &entries, &[size, dim], DType::F32),
                    half_norms: T::from_f32(l.device, &half_norms, &[size], DType::F32),
                })
            })
            .collect::<Result<Vec<_>, LoadError>>()?;
        Ok(ResidualQuantizer {
            input_proj,
            codebooks,
        })
    }

    /// `[frames, hidden]` f32 latents -> one code per frame for each codebook, codebook-major.
    pub fn encode(&self, latents: &T) -> Vec<Vec<i64>> {
        let mut residual = match &self.input_proj {
            Some(proj) => latents.linear(proj),
            None => latents.clone(),
        };
        let mut codes = Vec::with_capacity(self.codebooks.len());
        for book in &self.codebooks {
            // The nearest entry: the largest `r·e - |e|²/2` (`|r|²` is the same for all).
            let ids = residual
                .linear(&book.entries)
                .sub(&book.half_norms)
                .argmax_last();
            residual = residual.sub(&book.entries.embedding(&ids));
            codes.push(ids.to_vec_i64());
        }
        codes
    }
}
