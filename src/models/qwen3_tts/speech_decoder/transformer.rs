//! The decoder's pre-transformer (`Qwen3TTSTokenizerV2DecoderTransformerModel`): Linear in,
//! pre-norm layers with LayerScale, RMSNorm, Linear out. Attention has no q/k norm, RoPE on
//! rotated halves (θ 10000) and a sliding causal window: a query at position `i` sees keys
//! `i - window < j ≤ i`.

use super::convs::Affine;
use super::stream::{DecoderStream, KvWindow};
use crate::models::qwen3_tts::config::SpeechDecoderConfig;
use crate::nn::layers::{Loader, RmsNorm};
use crate::nn::mask::sliding_window_mask;
use crate::nn::LoadError;
use crate::tensor::{DType, Tensor};

/// Queries per attention call: each sees at most `window` keys, so a long utterance costs
/// blocks of `ATTENTION_BLOCK × (ATTENTION_BLOCK + window)` scores, not `len²`.
const ATTENTION_BLOCK: usize = 256;

struct Layer<T> {
    input_norm: RmsNorm<T>,
    q: T,
    k: T,
    v: T,
    o: T,
    attention_scale: T,
    post_attention_norm: RmsNorm<T>,
    gate: T,
    up: T,
    down: T,
    mlp_scale: T,
}

/// The official RoPE rotates the pairs `(x[i], x[i + d/2])`; the backends rotate `(x[2i],
/// x[2i+1])`. Reordering the rows of each head of the q and k projections the same way turns
/// one into the other without changing any score (a dot product does not see the order).
/// The Mimi encoder's attention rotates halves too.
pub(in crate::models::qwen3_tts) fn interleave_heads(
    weight: &[f32],
    head_dim: usize,
    width: usize,
) -> Vec<f32> {
    let half = head_dim / 2;
    let mut out = Vec::with_capacity(weight.len());
    for head in weight.chunks(head_dim * width) {
        for i in 0..half {
            out.extend_from_slice(&head[i * width..(i + 1) * width]);
            out.extend_from_slice(&head[(i + half) * width..(i + half + 1) * width]);
        }
    }
    out
}

/// One block of queries and the keys it may see, with the mask as an additive bias.
struct Block<T> {
    query_start: usize,
    queries: usize,
    key_start: usize,
    keys: usize,
    bias: T,
}

pub(super) struct PreTransformer<T: Tensor> {
    input_proj: Affine<T>,
    layers: Vec<Layer<T>>,
    norm: RmsNorm<T>,
    output_proj: Affine<T>,
    heads: usize,
    kv_heads: usize,
    head_dim: usize,
    window: usize,
    theta: f64,
    device: T::Device,
    dtype: DType,
}

impl<T: Tensor> PreTransformer<T> {
    /// Keys under `decoder.pre_transformer.`.
    pub fn load(l: &Loader<T>, c: &SpeechDecoderConfig) -> Result<Self, LoadError> {
        let (hidden, head_dim) = (c.hidden_size, c.head_dim);
        let (q_width, kv_width) = (
            c.num_attention_heads * head_dim,
            c.num_key_value_heads * head_dim,
        );
        let rotated = |key: &str, rows: usize| -> Result<T, LoadError> {
            let w = l.host_f32(key, &[rows, hidden])?;
            Ok(l.from_f32(&interleave_heads(&w, head_dim, hidden), &[rows, hidden]))
        };
        let layers = (0..c.num_hidden_layers)
            .map(|i| {
                let p = format!("layers.{i}");
                let norm = |name: &str| {
                    RmsNorm::load(l, &format!("{p}.{name}.weight"), hidden, c.rms_norm_eps)
                };
                let weight =
                    |name: &str, shape: [usize; 2]| l.tensor(&format!("{p}.{name}"), &shape);
                Ok(Layer {
                    input_norm: norm("input_layernorm")?,
                    q: rotated(&format!("{p}.self_attn.q_proj.weight"), q_width)?,
                    k: rotated(&format!("{p}.self_attn.k_proj.weight"), kv_width)?,
                    v: weight("self_attn.v_proj.weight", [kv_width, hidden])?,
                    o: weight("self_attn.o_proj.weight", [hidden, q_width])?,
                    attention_scale: l
                        .tensor(&format!("{p}.self_attn_layer_scale.scale"), &[hidden])?,
                    post_attention_norm: norm("post_attention_layernorm")?,
                    gate: weight("mlp.gate_proj.weight", [c.intermediate_size, hidden])?,
                    up: weight("mlp.up_proj.weight", [c.intermediate_size, hidden])?,
                    down: weight("mlp.down_proj.weight", [hidden, c.intermediate_size])?,
                    mlp_scale: l.tensor(&format!("{p}.mlp_layer_scale.scale"), &[hidden])?,
                })
            })
            .collect::<Result<Vec<_>, LoadError>>()?;
        Ok(PreTransformer {
            input_proj: Affine::load(l, "input_proj", hidden, c.latent_dim)?,
            layers,
            norm: RmsNorm::load(l, "norm.weight", hidden, c.rms_norm_eps)?,
            output_proj: Affine::load(l, "output_proj", c.latent_dim, hidden)?,
            heads: c.num_attention_heads,
            kv_heads: c.num_key_value_heads,
            head_dim,
            window: c.sliding_window,
            theta: c.rope_theta,
            device: l.device.clone(),
            dtype: l.dtype,
        })
    }

    pub fn layers(&self) -> usize {
        self.layers.len()
    }

    /// `[1, len, latent]` -> `[1, len, latent]`, continuing the positions `stream` holds.
    pub fn forward(&self, x: &T, stream: &mut DecoderStream<T>) -> T {
        let len = x.shape()[1];
        let past = stream.past_positions();
        // Positions count from the oldest key kept (see `KvWindow`).
        let rope = T::rope_table(&self.device, past + len, self.head_dim, self.theta);
        let blocks = self.blocks(past, len);
        let mut h = self.input_proj.forward(x);
        for (i, layer) in self.layers.iter().enumerate() {
            h = self.layer_forward(layer, i, &h, &rope, &blocks, stream);
        }
        self.output_proj.forward(&self.norm.forward(&h))
    }

    /// Query blocks over `len` new positions after `past` kept ones.
    fn blocks(&self, past: usize, len: usize) -> Vec<Block<T>> {
        let window = self.window;
        (0..len)
            .step_by(ATTENTION_BLOCK)
            .map(|query_start| {
                let queries = ATTENTION_BLOCK.min(len - query_start);
                let first = past + query_start;
                let key_start = (first + 1).saturating_sub(window);
                let keys = first + queries - key_start;
                Block {
                    query_start,
                    queries,
                    key_start,
                    keys,
                    bias: sliding_window_mask(
                        &self.device,
                        self.dtype,
                        (first, queries),
                        (key_start, keys),
                        Some(window),
                    ),
                }
            })
            .collect()
    }

    fn split_heads(&self, x: &T, heads: usize) -> T {
        let len = x.shape()[1];
        x.reshape(&[1, len, heads, self.head_dim]).transpose(1, 2)
    }

    fn layer_forward(
        &self,
        layer: &Layer<T>,
        index: usize,
        h: &T,
        rope: &T::Rope,
        blocks: &[Block<T>],
        stream: &mut DecoderStream<T>,
    ) -> T {
        let len = h.shape()[1];
        let n = layer.input_norm.forward(h);
        let q = self.split_heads(&n.linear(&layer.q), self.heads);
        let k = self.split_heads(&n.linear(&layer.k), self.kv_heads);
        let v = self.split_heads(&n.linear(&layer.v), self.kv_heads);
        let (keys, values) = match stream.take_window(index) {
            Some(w) => (T::cat(&[&w.keys, &k], 2), T::cat(&[&w.values, &v], 2)),
            None => (k, v),
        };
        let total = keys.shape()[2];
        let past = total - len;
        let kept = total.min(self.window - 1);
        stream.keep_window(index, || KvWindow {
            keys: keys.narrow(2, total - kept, kept),
            values: values.narrow(2, total - kept, kept),
        });
        let q = q.rope_interleaved(rope, past);
        let keys = keys.rope_interleaved(rope, 0);
        let scale = 1.0 / (self.head_dim as f64).sqrt();
        let outs: Vec<T> = blocks
            .iter()
            .map(|b| {
                T::attention(
                    &q.narrow(2, b.query_start, b.queries),
                    &keys.narrow(2, b.key_start, b.keys),
                    &values.narrow(2, b.key_start, b.keys),
                    Some(&b.bias),
                    false,
                    scale,
                )
            })
            .collect();
        let attended = T::cat(&outs.iter().collect::<Vec<_>>(), 2)
            .transpose(1, 2)
            .reshape(&[1, len, self.heads * self.head_dim])
            .linear(&layer.o);
        let h = h.add(&attended.mul(&layer.attention_scale));
        let n = layer.post_attention_norm.forward(&h);
        let mlp = n
            .linear(&layer.gate)
            .silu()
            .mul(&n.linear(&layer.up))
            .linear(&layer.down);
        h.add(&mlp.mul(&layer.mlp_scale))
    }
}
