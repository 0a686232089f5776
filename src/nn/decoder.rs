//! The Mistral-style decoder: pre-norm layers with interleaved RoPE, GQA, SwiGLU and a
//! preallocated KV cache. Returns the final-normed hidden states. Voxtral TTS's backbone is
//! one; Voxtral Realtime's text decoder has the same shape.

use super::layers::{AttentionProj, FeedForward, Loader, RmsNorm};
use super::LoadError;
use crate::tensor::{DType, Tensor};

/// The decoder's sizes, as Mistral's params.json names them.
#[derive(Clone, Copy, Debug)]
pub struct DecoderDims {
    pub dim: usize,
    pub n_layers: usize,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
    pub hidden_dim: usize,
    pub norm_eps: f64,
    pub rope_theta: f64,
    /// Positions the KV cache and the rotary table cover.
    pub max_positions: usize,
}

struct Layer<T> {
    attention_norm: RmsNorm<T>,
    attention: AttentionProj<T>,
    ffn_norm: RmsNorm<T>,
    feed_forward: FeedForward<T>,
}

pub struct Decoder<T: Tensor> {
    layers: Vec<Layer<T>>,
    norm: RmsNorm<T>,
    /// Built once on the model's device for every position.
    rope: T::Rope,
}

/// Keys and values of every layer for one sequence, allocated once for its whole length.
pub struct KvCache<T> {
    keys: Vec<T>,
    values: Vec<T>,
    len: usize,
    capacity: usize,
}

impl<T: Tensor> Decoder<T> {
    /// Loads `{prefix}layers.{i}.*` and `{prefix}norm.weight`.
    pub fn load(l: &Loader<T>, prefix: &str, a: &DecoderDims) -> Result<Self, LoadError> {
        let layers = (0..a.n_layers)
            .map(|i| {
                let p = format!("{prefix}layers.{i}");
                Ok(Layer {
                    attention_norm: RmsNorm::load(
                        l,
                        &format!("{p}.attention_norm.weight"),
                        a.dim,
                        a.norm_eps,
                    )?,
                    attention: AttentionProj::load(
                        l,
                        &format!("{p}.attention"),
                        a.dim,
                        a.n_heads,
                        a.n_kv_heads,
                        a.head_dim,
                    )?,
                    ffn_norm: RmsNorm::load(l, &format!("{p}.ffn_norm.weight"), a.dim, a.norm_eps)?,
                    feed_forward: FeedForward::load(
                        l,
                        &format!("{p}.feed_forward"),
                        a.dim,
                        a.hidden_dim,
                    )?,
                })
            })
            .collect::<Result<Vec<_>, LoadError>>()?;
        Ok(Decoder {
            layers,
            norm: RmsNorm::load(l, &format!("{prefix}norm.weight"), a.dim, a.norm_eps)?,
            rope: T::rope_table(l.device, a.max_positions, a.head_dim, a.rope_theta),
        })
    }

    pub fn new_cache(&self, device: &T::Device, dtype: DType, capacity: usize) -> KvCache<T> {
        let shape = |l: &Layer<T>| [1, l.attention.n_kv_heads, capacity, l.attention.head_dim];
        KvCache {
            keys: self
                .layers
                .iter()
                .map(|l| T::zeros(device, &shape(l), dtype))
                .collect(),
            values: self
                .layers
                .iter()
                .map(|l| T::zeros(device, &shape(l), dtype))
                .collect(),
            len: 0,
            capacity,
        }
    }

    /// Runs `x` `[b, l, dim]`, row `r` at the positions after those `caches[r]` holds,
    /// appending to each cache. Either one sequence of any length (prefill) or one new token per sequence
    /// (a decode step, batched: the projections and feed-forward read each weight once for
    /// all rows; attention runs per row against that row's cache).
    pub fn forward(&self, x: &T, caches: &mut [&mut KvCache<T>]) -> T {
        let shape = x.shape();
        let (rows, len) = (shape[0], shape[1]);
        assert_eq!(rows, caches.len(), "one cache per row");
        assert!(rows == 1 || len == 1, "batched rows take one token each");
        for c in caches.iter() {
            assert!(
                c.len + len <= c.capacity,
                "KV cache overflow: {} + {len} > {}",
                c.len,
                c.capacity
            );
            // A prompt starts at 0 and needs the causal mask; a single new token sees all.
            assert!(c.len == 0 || len == 1, "chunked prefill is not supported");
        }
        let mut h = x.clone();
        for (i, layer) in self.layers.iter().enumerate() {
            let a = &layer.attention;
            let normed = layer.attention_norm.forward(&h);
            let q = a.split_heads(&normed.linear(&a.wq), a.n_heads);
            let k = a.split_heads(&normed.linear(&a.wk), a.n_kv_heads);
            let v = a.split_heads(&normed.linear(&a.wv), a.n_kv_heads);
            let outs: Vec<T> = caches
                .iter_mut()
                .enumerate()
                .map(|(r, cache)| {
                    let start = cache.len;
                    let q = q.narrow(0, r, 1).rope_interleaved(&self.rope, start);
                    let k = k.narrow(0, r, 1).rope_interleaved(&self.rope, start);
                    cache.keys[i].write_at(2, start, &k);
                    cache.values[i].write_at(2, start, &v.narrow(0, r, 1));
                    let keys = cache.keys[i].narrow(2, 0, start + len);
                    let values = cache.values[i].narrow(2, 0, start + len);
                    T::attention(&q, &keys, &values, None, len > 1, a.scale())
                })
                .collect();
            let out = if rows == 1 {
                outs[0].clone()
            } else {
                T::cat(&outs.iter().collect::<Vec<_>>(), 0)
            };
            h = h.add(&a.merge_heads(&out));
            h = h.add(&layer.feed_forward.forward(&layer.ffn_norm.forward(&h)));
        }
        for c in caches.iter_mut() {
            c.len += len;
        }
        let out = self.norm.forward(&h);
        // One evaluation per pass (lazy backends): the output and every cache write.
        let mut done: Vec<&T> = vec![&out];
        for c in caches.iter() {
            done.extend(c.keys.iter().chain(&c.values));
        }
        T::eval(&done);
        out
    }
}
