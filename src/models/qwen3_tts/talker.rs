//! The talker's weights (spec sections 3 and 6): the text embedding and its two-layer
//! projection `P`, the codec embedding `E`, the Qwen3 decoder (its interleaved MRoPE is plain
//! 1-D RoPE: the official code gives all three axes the same positions) and the codec head.

use super::config::TalkerConfig;
use super::keys;
use crate::nn::decoder::{Decoder, DecoderDims, DecoderStyle};
use crate::nn::layers::{Linear, Loader};
use crate::nn::LoadError;
use crate::tensor::quantized::QuantFormat;
use crate::tensor::{DType, Tensor};

pub struct Talker<T: Tensor> {
    /// In its stored dtype (151,936 rows): rows are converted after lookup.
    text_embedding: T,
    text_fc1: Linear<T>,
    text_fc2: Linear<T>,
    codec_embedding: T,
    pub decoder: Decoder<T>,
    codec_head: T,
    dtype: DType,
    device: T::Device,
}

/// The decoder's sizes in `DecoderDims`' terms, its rotary table covering `max_positions`.
pub fn decoder_dims(
    hidden: usize,
    intermediate: usize,
    layers: usize,
    heads: (usize, usize, usize),
    eps: f64,
    theta: f64,
    max_positions: usize,
) -> DecoderDims {
    DecoderDims {
        dim: hidden,
        n_layers: layers,
        n_heads: heads.0,
        n_kv_heads: heads.1,
        head_dim: heads.2,
        hidden_dim: intermediate,
        norm_eps: eps,
        rope_theta: theta,
        max_positions,
    }
}

impl<T: Tensor> Talker<T> {
    /// Loads the `talker.` tensors but the code predictor's (`l` is scoped at `talker.`).
    /// The decoder layers' linear weights are stored in `quantize` where the backend
    /// multiplies it; embeddings, projections of the text and the head stay as stored.
    pub fn load(
        l: &Loader<T>,
        c: &TalkerConfig,
        max_positions: usize,
        quantize: Option<QuantFormat>,
    ) -> Result<Self, LoadError> {
        let (h, text) = (c.hidden_size, c.text_hidden_size);
        let dims = decoder_dims(
            h,
            c.intermediate_size,
            c.num_hidden_layers,
            (c.num_attention_heads, c.num_key_value_heads, c.head_dim),
            c.rms_norm_eps,
            c.rope_theta,
            max_positions,
        );
        Ok(Talker {
            text_embedding: l
                .tensor_as_stored("model.text_embedding.weight", &[c.text_vocab_size, text])?,
            text_fc1: Linear::load(l, "text_projection.linear_fc1", text, text, true)?,
            text_fc2: Linear::load(l, "text_projection.linear_fc2", h, text, true)?,
            codec_embedding: l.tensor("model.codec_embedding.weight", &[c.vocab_size, h])?,
            decoder: Decoder::load_style(
                &l.quantizing(quantize),
                "model.",
                &dims,
                DecoderStyle::Qwen3,
            )?,
            codec_head: l.tensor(keys::CODEC_HEAD, &[c.vocab_size, h])?,
            dtype: l.dtype,
            device: l.device.clone(),
        })
    }

    fn ids(&self, ids: &[u32]) -> T {
        let ids: Vec<i64> = ids.iter().map(|&i| i64::from(i)).collect();
        T::from_i64(&self.device, &ids, &[ids.len()])
    }

    /// `P(ids)`: `text_projection(text_embedding(ids))`, `[n, hidden]`.
    pub fn text(&self, ids: &[u32]) -> T {
        let rows = self
            .text_embedding
            .embedding(&self.ids(ids))
            .to_dtype(self.dtype);
        self.text_fc2.forward(&self.text_fc1.forward(&rows).silu())
    }

    /// `E(ids)`: codec embedding rows, `[n, hidden]`.
    pub fn codec(&self, ids: &[u32]) -> T {
        self.codec_embedding.embedding(&self.ids(ids))
    }

    /// Codec logits of normed hidden states `[.., hidden]`.
    pub fn logits(&self, hidden: &T) -> T {
        hidden.linear(&self.codec_head)
    }
}
