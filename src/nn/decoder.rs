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
    device: T::Device,
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
        let l = &l.scoped(prefix);
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
        Ok(Decoder {
            layers,
            norm: RmsNorm::load(l, "norm.weight", a.dim, a.norm_eps)?,
            rope: T::rope_table(l.device, a.max_positions, a.head_dim, a.rope_theta),
            device: l.device.clone(),
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
    /// appending to each cache. Either one sequence of any length (a prefill, whole or in
    /// chunks: a chunk after the first attends to the cache and causally within itself) or
    /// one new token per sequence (a decode step, batched: the projections and feed-forward
    /// read each weight once for all rows; attention runs per row against that row's cache).
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
        }
        // A chunk after the first (one row) needs an offset causal mask: the same in every layer.
        let start = caches[0].len;
        let mask = (start > 0 && len > 1).then(|| self.chunk_mask(start, len, x.dtype()));
        let mut h = x.clone();
        for (i, layer) in self.layers.iter().enumerate() {
            let a = &layer.attention;
            let normed = layer.attention_norm.forward(&h);
            let (q, k, v) = a.qkv(&normed);
            let q = a.split_heads(&q, a.n_heads);
            let k = a.split_heads(&k, a.n_kv_heads);
            let v = a.split_heads(&v, a.n_kv_heads);
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
                    // A single new token sees all; a prompt from 0 is plainly causal.
                    let causal = mask.is_none() && len > 1;
                    T::attention(&q, &keys, &values, mask.as_ref(), causal, a.scale())
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

impl<T: Tensor> Decoder<T> {
    /// `[1, 1, len, start + len]`: 0 where query `i` (at position `start + i`) may see the key,
    /// -inf after it.
    fn chunk_mask(&self, start: usize, len: usize, dtype: DType) -> T {
        let keys = start + len;
        let mask: Vec<f32> = (0..len)
            .flat_map(|i| {
                (0..keys).map(move |j| {
                    if j <= start + i {
                        0.0
                    } else {
                        f32::NEG_INFINITY
                    }
                })
            })
            .collect();
        T::from_f32(&self.device, &mask, &[1, 1, len, keys], dtype)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nn::checkpoint::Checkpoint;
    use crate::tensor::tch_backend::TchTensor;
    use rand::{Rng, SeedableRng};

    const DIMS: DecoderDims = DecoderDims {
        dim: 16,
        n_layers: 2,
        n_heads: 4,
        n_kv_heads: 2,
        head_dim: 4,
        hidden_dim: 24,
        norm_eps: 1e-5,
        rope_theta: 10_000.0,
        max_positions: 32,
    };

    /// A random f32 checkpoint of `DIMS` under `prefix`.
    fn checkpoint(dir: &std::path::Path, prefix: &str) -> Checkpoint {
        let d = DIMS;
        let (q, kv) = (d.n_heads * d.head_dim, d.n_kv_heads * d.head_dim);
        let mut shapes = vec![(format!("{prefix}norm.weight"), vec![d.dim])];
        for i in 0..d.n_layers {
            let p = format!("{prefix}layers.{i}");
            shapes.extend([
                (format!("{p}.attention_norm.weight"), vec![d.dim]),
                (format!("{p}.ffn_norm.weight"), vec![d.dim]),
                (format!("{p}.attention.wq.weight"), vec![q, d.dim]),
                (format!("{p}.attention.wk.weight"), vec![kv, d.dim]),
                (format!("{p}.attention.wv.weight"), vec![kv, d.dim]),
                (format!("{p}.attention.wo.weight"), vec![d.dim, q]),
                (
                    format!("{p}.feed_forward.w1.weight"),
                    vec![d.hidden_dim, d.dim],
                ),
                (
                    format!("{p}.feed_forward.w2.weight"),
                    vec![d.dim, d.hidden_dim],
                ),
                (
                    format!("{p}.feed_forward.w3.weight"),
                    vec![d.hidden_dim, d.dim],
                ),
            ]);
        }
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(7);
        let data: Vec<Vec<u8>> = shapes
            .iter()
            .map(|(_, shape)| {
                (0..shape.iter().product::<usize>())
                    .flat_map(|_| (rng.random::<f32>() - 0.5).to_le_bytes())
                    .collect()
            })
            .collect();
        let views: Vec<_> = shapes
            .iter()
            .zip(&data)
            .map(|((key, shape), bytes)| {
                let view = safetensors::tensor::TensorView::new(
                    safetensors::Dtype::F32,
                    shape.clone(),
                    bytes,
                )
                .unwrap();
                (key.clone(), view)
            })
            .collect();
        let path = dir.join("decoder.safetensors");
        safetensors::serialize_to_file(views, None, &path).unwrap();
        Checkpoint::open(&path).unwrap()
    }

    fn close(a: &TchTensor, b: &TchTensor) {
        let (a, b) = (a.to_vec_f32(), b.to_vec_f32());
        assert_eq!(a.len(), b.len());
        let worst = a
            .iter()
            .zip(&b)
            .map(|(x, y)| (x - y).abs())
            .fold(0.0, f32::max);
        assert!(worst < 1e-5, "differs by {worst}");
    }

    #[test]
    fn a_prompt_prefilled_in_chunks_equals_one_prefill() {
        let _guard = tch::no_grad_guard();
        let dir = tempfile::tempdir().unwrap();
        let ckpt = checkpoint(dir.path(), "text.");
        let l = Loader::<TchTensor>::new(&ckpt, &tch::Device::Cpu, DType::F32);
        let decoder = Decoder::load(&l, "text.", &DIMS).unwrap();
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(1);
        let values: Vec<f32> = (0..11 * DIMS.dim)
            .map(|_| rng.random::<f32>() - 0.5)
            .collect();
        let x = TchTensor::from_f32(&tch::Device::Cpu, &values, &[1, 11, DIMS.dim], DType::F32);
        let prompt = x.narrow(1, 0, 10);

        let mut whole = decoder.new_cache(&tch::Device::Cpu, DType::F32, 16);
        let at_once = decoder.forward(&prompt, &mut [&mut whole]);
        let mut chunked = decoder.new_cache(&tch::Device::Cpu, DType::F32, 16);
        let parts: Vec<TchTensor> = [(0, 4), (4, 3), (7, 3)]
            .iter()
            .map(|&(start, len)| {
                decoder.forward(&prompt.narrow(1, start, len), &mut [&mut chunked])
            })
            .collect();
        close(
            &TchTensor::cat(&parts.iter().collect::<Vec<_>>(), 1),
            &at_once,
        );

        // The next token sees the same cache either way.
        let next = x.narrow(1, 10, 1);
        close(
            &decoder.forward(&next, &mut [&mut chunked]),
            &decoder.forward(&next, &mut [&mut whole]),
        );
    }

    /// Fused q/k/v and gate/up products (what accelerators run) give what the separate
    /// products give, up to rounding (a product of another shape may sum in another order).
    #[test]
    fn fused_products_equal_separate_ones() {
        let _guard = tch::no_grad_guard();
        let dir = tempfile::tempdir().unwrap();
        let ckpt = checkpoint(dir.path(), "");
        let l = Loader::<TchTensor>::new(&ckpt, &tch::Device::Cpu, DType::F32);
        let (apart, fused) = (
            Decoder::load(&l.fusing(false), "", &DIMS).unwrap(),
            Decoder::load(&l.fusing(true), "", &DIMS).unwrap(),
        );
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(2);
        let values: Vec<f32> = (0..7 * DIMS.dim)
            .map(|_| rng.random::<f32>() - 0.5)
            .collect();
        let x = TchTensor::from_f32(&tch::Device::Cpu, &values, &[1, 7, DIMS.dim], DType::F32);
        let run = |d: &Decoder<TchTensor>| {
            let mut cache = d.new_cache(&tch::Device::Cpu, DType::F32, 8);
            let prefill = d.forward(&x.narrow(1, 0, 6), &mut [&mut cache]);
            let step = d.forward(&x.narrow(1, 6, 1), &mut [&mut cache]);
            TchTensor::cat(&[&prefill, &step], 1)
        };
        close(&run(&apart), &run(&fused));
    }
}
