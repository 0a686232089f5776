//! The Mistral decoder backbone: pre-norm layers with interleaved RoPE, GQA and a
//! preallocated KV cache. Returns the final-normed hidden states.

use super::error::LoadError;
use super::layers::{AttentionProj, FeedForward, Loader, RmsNorm};
use super::params::Config;
use crate::tensor::{DType, Tensor};

struct Layer<T> {
    attention_norm: RmsNorm<T>,
    attention: AttentionProj<T>,
    ffn_norm: RmsNorm<T>,
    feed_forward: FeedForward<T>,
}

pub struct Backbone<T> {
    layers: Vec<Layer<T>>,
    norm: RmsNorm<T>,
    rope_theta: f64,
}

/// Keys and values of every layer for one sequence, allocated once for its whole length.
pub struct KvCache<T> {
    keys: Vec<T>,
    values: Vec<T>,
    len: usize,
    capacity: usize,
}

impl<T: Tensor> KvCache<T> {
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn capacity(&self) -> usize {
        self.capacity
    }
}

impl<T: Tensor> Backbone<T> {
    pub fn load(l: &Loader<T>, cfg: &Config) -> Result<Self, LoadError> {
        let a = &cfg.args;
        let layers = (0..a.n_layers)
            .map(|i| {
                let p = format!("layers.{i}");
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
        Ok(Backbone {
            layers,
            norm: RmsNorm::load(l, "norm.weight", a.dim, a.norm_eps)?,
            rope_theta: a.rope_theta,
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

    /// Runs `x` `[1, l, dim]` at positions `cache.len()..` and appends to the cache.
    pub fn forward(&self, x: &T, cache: &mut KvCache<T>) -> T {
        let len = x.shape()[1];
        let start = cache.len;
        assert!(
            start + len <= cache.capacity,
            "KV cache overflow: {} + {len} > {}",
            start,
            cache.capacity
        );
        let mut h = x.clone();
        for (i, layer) in self.layers.iter().enumerate() {
            let a = &layer.attention;
            let normed = layer.attention_norm.forward(&h);
            let q = a
                .split_heads(&normed.linear(&a.wq), a.n_heads)
                .rope_interleaved(start, self.rope_theta);
            let k = a
                .split_heads(&normed.linear(&a.wk), a.n_kv_heads)
                .rope_interleaved(start, self.rope_theta);
            let v = a.split_heads(&normed.linear(&a.wv), a.n_kv_heads);
            cache.keys[i].write_at(2, start, &k);
            cache.values[i].write_at(2, start, &v);
            let keys = cache.keys[i].narrow(2, 0, start + len);
            let values = cache.values[i].narrow(2, 0, start + len);
            // A prompt starting at 0 needs the causal mask; a single new token sees everything.
            assert!(start == 0 || len == 1, "chunked prefill is not supported");
            let out = T::attention(&q, &keys, &values, None, len > 1, a.scale());
            h = h.add(&a.merge_heads(&out));
            h = h.add(&layer.feed_forward.forward(&layer.ffn_norm.forward(&h)));
        }
        cache.len += len;
        self.norm.forward(&h)
    }
}
