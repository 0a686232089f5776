//! The Mistral-style decoder: pre-norm layers with RoPE, GQA, SwiGLU and a slot KV pool
//! ([`KvPool`]). Returns the final-normed hidden states. Voxtral TTS's backbone is one; Voxtral
//! Realtime's text decoder has the same shape, plus a sliding attention window
//! ([`Decoder::with_window`]) and a fixed per-layer scale of the feed-forward norm's output (its
//! delay conditioning, [`Decoder::with_ffn_norm_scales`]); Qwen3's ([`DecoderStyle::Qwen3`])
//! adds per-head query and key norms (Qwen3-TTS's talker and code predictor). A layer's keys
//! ([`LayerKeys`], per [`DecoderStyle`]) are defined here once, for the loaders and the
//! test-checkpoint writers of every pre-norm layer in those names.

use super::kv_pool::{KvPool, KvSlot};
use super::layer_probe;
use super::layers::{
    join, weight, AttentionDims, AttentionKeys, AttentionProj, FeedForward, FeedForwardKeys,
    Loader, RmsNorm,
};
use super::mask::sliding_window_mask;
use super::LoadError;
use crate::tensor::{DType, PoolRows, Tensor};

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
    /// Positions the rotary table covers: at least a KV slot's.
    pub max_positions: usize,
}

impl DecoderDims {
    /// Each layer's attention widths.
    pub fn attention(&self) -> AttentionDims {
        AttentionDims {
            dim: self.dim,
            n_heads: self.n_heads,
            n_kv_heads: self.n_kv_heads,
            head_dim: self.head_dim,
        }
    }

    /// Bytes one position takes in a KV pool, keys and values of every layer.
    pub fn kv_bytes_per_position(&self, dtype: DType) -> usize {
        2 * self.n_layers * self.n_kv_heads * self.head_dim * dtype.size()
    }
}

/// How a checkpoint names a decoder's tensors, and what Qwen3 adds to the layers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DecoderStyle {
    /// Mistral's consolidated names ([`LayerKeys::mistral`]); RoPE rotates interleaved pairs
    /// `(2i, 2i + 1)`.
    Mistral,
    /// Hugging Face Qwen3 names ([`LayerKeys::hugging_face`]), an RMSNorm of each query and
    /// key head before RoPE, and RoPE on the pairs `(i, i + head_dim / 2)` (`rotate_half`).
    Qwen3,
}

impl DecoderStyle {
    /// Layer `i`'s keys in this style, under the decoder's `prefix` (`layers.{i}`).
    pub fn layer_keys(self, prefix: &str, i: usize) -> LayerKeys {
        let p = format!("{prefix}layers.{i}");
        match self {
            DecoderStyle::Mistral => LayerKeys::mistral(&p),
            DecoderStyle::Qwen3 => LayerKeys {
                head_norms: true,
                ..LayerKeys::hugging_face(&p)
            },
        }
    }
}

/// The decoder's final norm, under its prefix.
pub const FINAL_NORM: &str = "norm.weight";

/// Where a pre-norm transformer layer's tensors are stored: its norms' modules (each holds a
/// `.weight`), its attention's and its feed-forward's.
#[derive(Clone, Debug)]
pub struct LayerKeys {
    pub attention_norm: String,
    pub attention: AttentionKeys,
    /// Whether the attention normalises each query and key head (`attention.q_norm`,
    /// `attention.k_norm`, `[head_dim]`), as Qwen3's does.
    pub head_norms: bool,
    pub ffn_norm: String,
    pub feed_forward: FeedForwardKeys,
}

impl LayerKeys {
    /// Mistral's consolidated names: `{prefix}.attention_norm`, `.attention.wq` (and `wk`,
    /// `wv`, `wo`), `.ffn_norm`, `.feed_forward.w1` (and `w2`, `w3`).
    pub fn mistral(prefix: &str) -> Self {
        LayerKeys {
            attention_norm: join(prefix, "attention_norm"),
            attention: AttentionKeys::mistral(&join(prefix, "attention")),
            head_norms: false,
            ffn_norm: join(prefix, "ffn_norm"),
            feed_forward: FeedForwardKeys::mistral(&join(prefix, "feed_forward")),
        }
    }

    /// Hugging Face's names: `{prefix}.input_layernorm`, `.self_attn.q_proj` (and `k_proj`,
    /// `v_proj`, `o_proj`), `.post_attention_layernorm`, `.mlp.gate_proj` (and `up_proj`,
    /// `down_proj`).
    pub fn hugging_face(prefix: &str) -> Self {
        LayerKeys {
            attention_norm: join(prefix, "input_layernorm"),
            attention: AttentionKeys::hugging_face(&join(prefix, "self_attn")),
            head_norms: false,
            ffn_norm: join(prefix, "post_attention_layernorm"),
            feed_forward: FeedForwardKeys::hugging_face(&join(prefix, "mlp")),
        }
    }
}

struct Layer<T> {
    attention_norm: RmsNorm<T>,
    attention: AttentionProj<T>,
    /// Qwen3's query and key norms.
    qk_norm: Option<[RmsNorm<T>; 2]>,
    ffn_norm: RmsNorm<T>,
    feed_forward: FeedForward<T>,
}

pub struct Decoder<T: Tensor> {
    layers: Vec<Layer<T>>,
    norm: RmsNorm<T>,
    /// Built once on the model's device for every position.
    rope: T::Rope,
    style: DecoderStyle,
    device: T::Device,
    /// Positions a query attends to, itself included; `None`: every earlier one.
    window: Option<usize>,
    /// Per layer, `[1, 1, dim]`: multiplies the feed-forward norm's output.
    ffn_norm_scales: Option<Vec<T>>,
    /// Prefill chunks are padded to a multiple of this many tokens (accelerators only).
    prefill_bucket: Option<usize>,
}

/// Tokens a prefill chunk is rounded up to on an accelerator: prompts of any length then
/// run in a few shapes, and on CUDA the first run at a new shape costs tens of milliseconds
/// (as the pooled attention's key length did, `tensor::POOL_KEYS_BUCKET`).
const PREFILL_BUCKET: usize = 64;

impl<T: Tensor> Decoder<T> {
    /// Loads `{prefix}layers.{i}.*` and `{prefix}norm.weight` in Mistral's names.
    pub fn load(l: &Loader<T>, prefix: &str, a: &DecoderDims) -> Result<Self, LoadError> {
        Self::load_style(l, prefix, a, DecoderStyle::Mistral)
    }

    /// Loads `{prefix}layers.{i}.*` and `{prefix}norm.weight` in `style`'s names.
    pub fn load_style(
        l: &Loader<T>,
        prefix: &str,
        a: &DecoderDims,
        style: DecoderStyle,
    ) -> Result<Self, LoadError> {
        let l = &l.scoped(prefix);
        let layers = (0..a.n_layers)
            .map(|i| Layer::load(l, &style.layer_keys("", i), a))
            .collect::<Result<Vec<_>, LoadError>>()?;
        Ok(Decoder {
            layers,
            norm: RmsNorm::load(l, FINAL_NORM, a.dim, a.norm_eps)?,
            rope: T::rope_table(l.device, a.max_positions, a.head_dim, a.rope_theta),
            style,
            device: l.device.clone(),
            window: None,
            ffn_norm_scales: None,
            prefill_bucket: (!T::is_cpu(l.device)).then_some(PREFILL_BUCKET),
        })
    }

    /// Queries and keys `[b, l, heads * head_dim]` as heads `[b, heads, l, head_dim]` ready for
    /// interleaved RoPE. Qwen3's: normed, then each head's halves `(i, i + head_dim / 2)`
    /// brought next to each other, so interleaved RoPE rotates the pairs `rotate_half` does;
    /// queries and keys are permuted alike, which leaves every score as it was.
    fn heads(&self, layer: &Layer<T>, q: &T, k: &T) -> (T, T) {
        let a = &layer.attention;
        let (mut q, mut k) = (a.split_heads(q, a.n_heads), a.split_heads(k, a.n_kv_heads));
        if let Some([q_norm, k_norm]) = &layer.qk_norm {
            q = q_norm.forward(&q);
            k = k_norm.forward(&k);
        }
        if self.style == DecoderStyle::Qwen3 {
            (pair_halves(&q), pair_halves(&k))
        } else {
            (q, k)
        }
    }

    /// The same decoder attending to the last `window` positions only, itself included.
    pub fn with_window(self, window: Option<usize>) -> Self {
        assert_ne!(window, Some(0), "a window holds at least the query itself");
        Decoder { window, ..self }
    }

    /// The same decoder with each layer's feed-forward norm output multiplied by
    /// `scales[layer]` (`[1, 1, dim]`).
    pub fn with_ffn_norm_scales(self, scales: Vec<T>) -> Self {
        assert_eq!(scales.len(), self.layers.len(), "one scale per layer");
        Decoder {
            ffn_norm_scales: Some(scales),
            ..self
        }
    }

    pub fn n_layers(&self) -> usize {
        self.layers.len()
    }

    /// Layer `i`'s feed-forward block on `h`, added to it.
    fn feed_forward(&self, i: usize, h: &T) -> T {
        let layer = &self.layers[i];
        let normed = layer.ffn_norm.forward(h);
        let normed = match &self.ffn_norm_scales {
            Some(scales) => normed.mul(&scales[i]),
            None => normed,
        };
        layer.feed_forward.forward_add(&normed, h)
    }

    /// A pool of `slots` sequences of up to `positions` positions each, for these layers.
    pub fn new_pool(&self, dtype: DType, slots: usize, positions: usize) -> KvPool<T> {
        KvPool::new(&self.device, dtype, &self.kv_shapes(), slots, positions)
    }

    /// Each layer's `(kv_heads, head_dim)`.
    fn kv_shapes(&self) -> Vec<(usize, usize)> {
        self.layers
            .iter()
            .map(|l| (l.attention.n_kv_heads, l.attention.head_dim))
            .collect()
    }

    /// Runs `x` `[rows, len, dim]`, row `r` at the positions after those `slots[r]` holds in
    /// `pool`, appending to each slot. Either one token per sequence (a decode step, batched:
    /// the projections and feed-forward read each weight once for all rows, and each layer
    /// runs one attention over every row's slot) or a prefill of any length, whole or in
    /// chunks (a chunk after the first attends to the slot and causally within itself), of
    /// one sequence or of several at the same position (the projections batched, the
    /// attention row by row, so each row has the bits it has alone).
    pub fn forward(&self, x: &T, pool: &mut KvPool<T>, slots: &mut [&mut KvSlot]) -> T {
        let shape = x.shape();
        let (rows, len) = (shape[0], shape[1]);
        assert_eq!(rows, slots.len(), "one slot per row");
        assert!(
            len == 1 || slots.iter().all(|s| s.len == slots[0].len),
            "rows prefilled together start at the same position"
        );
        for s in slots.iter() {
            assert!(
                s.len + len <= pool.positions(),
                "KV slot overflow: {} + {len} > {}",
                s.len,
                pool.positions()
            );
        }
        let out = if len == 1 {
            self.step(x, pool, slots)
        } else {
            self.prefill(x, pool, slots)
        };
        for s in slots.iter_mut() {
            s.len += len;
        }
        // One evaluation per pass (lazy backends): the output and every pool write.
        let mut done: Vec<&T> = vec![&out];
        done.extend(pool.keys.iter().chain(&pool.values));
        T::eval(&done);
        out
    }

    /// One new token per row.
    fn step(&self, x: &T, pool: &mut KvPool<T>, slots: &[&mut KvSlot]) -> T {
        let rows = PoolRows::windowed(
            &self.device,
            slots.iter().map(|s| s.index).collect(),
            slots.iter().map(|s| s.len).collect(),
            self.window,
        );
        self.step_rows(x, pool, &rows)
    }

    /// A decode step of `x` `[rows, 1, dim]` at `rows`, with no host work: what a captured
    /// graph of the step records. The caller keeps the slots' lengths.
    pub fn step_rows(&self, x: &T, pool: &mut KvPool<T>, rows: &PoolRows<T>) -> T {
        let mut h = x.clone();
        for (i, layer) in self.layers.iter().enumerate() {
            let a = &layer.attention;
            let (q, k, v) = a.qkv(&layer.attention_norm.forward(&h));
            let (q, k) = self.heads(layer, &q, &k);
            let q = q.rope_rows(&self.rope, rows);
            let k = k.rope_rows(&self.rope, rows);
            pool.keys[i].write_rows(rows, &k);
            pool.values[i].write_rows(rows, &a.split_heads(&v, a.n_kv_heads));
            let out = T::pool_attention(&q, &pool.keys[i], &pool.values[i], rows, a.scale());
            h = self.feed_forward(i, &a.merge_heads_add(&out, &h));
            layer_probe::record(i, &h);
        }
        self.norm.forward(&h)
    }

    /// A prompt, or its next chunk, for each row's sequence, every slot at the same position.
    fn prefill(&self, x: &T, pool: &mut KvPool<T>, slots: &[&mut KvSlot]) -> T {
        let shape = x.shape();
        let (rows, tokens, start) = (shape[0], shape[1], slots[0].len);
        // Padding goes after the chunk's tokens: causal attention keeps it out of them, and
        // its keys and values land past the slot's length, where the next chunk or step
        // writes before any query may read.
        let len = self.prefill_bucket.map_or(tokens, |bucket| {
            tokens
                .next_multiple_of(bucket)
                .min(pool.positions() - start)
        });
        let x = if len > tokens {
            let padding = T::zeros(&self.device, &[rows, len - tokens, shape[2]], x.dtype());
            T::cat(&[x, &padding], 1)
        } else {
            x.clone()
        };
        // After the first chunk, or where the window cuts into the chunk, a mask (the same in
        // every layer and row). A prompt from 0 within the window is plainly causal.
        let windowed = self.window.is_some_and(|w| start + len > w);
        let mask = (start > 0 || windowed).then(|| self.chunk_mask(start, len, x.dtype()));
        let mut h = x.clone();
        for (i, layer) in self.layers.iter().enumerate() {
            let a = &layer.attention;
            let (q, k, v) = a.qkv(&layer.attention_norm.forward(&h));
            let (q, k) = self.heads(layer, &q, &k);
            let q = q.rope_interleaved(&self.rope, start);
            let k = k.rope_interleaved(&self.rope, start);
            let v = a.split_heads(&v, a.n_kv_heads);
            let row = |t: &T, r: usize| {
                if rows == 1 {
                    t.clone()
                } else {
                    t.narrow(0, r, 1)
                }
            };
            let outs: Vec<T> = slots
                .iter()
                .enumerate()
                .map(|(r, slot)| {
                    let at = [slot.index, 0, start, 0];
                    pool.keys[i].write_at(&at, &row(&k, r));
                    pool.values[i].write_at(&at, &row(&v, r));
                    let seen = |p: &T| p.narrow(0, slot.index, 1).narrow(2, 0, start + len);
                    let (keys, values) = (seen(&pool.keys[i]), seen(&pool.values[i]));
                    let q = row(&q, r);
                    T::attention(&q, &keys, &values, mask.as_ref(), mask.is_none(), a.scale())
                })
                .collect();
            let out = match outs.as_slice() {
                [one] => one.clone(),
                _ => T::cat(&outs.iter().collect::<Vec<_>>(), 0),
            };
            h = self.feed_forward(i, &a.merge_heads_add(&out, &h));
            layer_probe::record(i, &h);
        }
        let out = self.norm.forward(&h);
        if len > tokens {
            out.narrow(1, 0, tokens)
        } else {
            out
        }
    }

    /// `[1, 1, len, start + len]`: 0 where query `i` (at position `start + i`) may see the key,
    /// -inf after it and before its window.
    fn chunk_mask(&self, start: usize, len: usize, dtype: DType) -> T {
        sliding_window_mask(
            &self.device,
            dtype,
            (start, len),
            (0, start + len),
            self.window,
        )
    }
}

impl<T: Tensor> Layer<T> {
    fn load(l: &Loader<T>, keys: &LayerKeys, a: &DecoderDims) -> Result<Self, LoadError> {
        let norm = |module: &str, dim: usize| RmsNorm::load(l, &weight(module), dim, a.norm_eps);
        let k = &keys.attention;
        Ok(Layer {
            attention_norm: norm(&keys.attention_norm, a.dim)?,
            attention: AttentionProj::load(l, k, &a.attention())?,
            qk_norm: match keys.head_norms {
                true => Some([norm(&k.q_norm, a.head_dim)?, norm(&k.k_norm, a.head_dim)?]),
                false => None,
            },
            ffn_norm: norm(&keys.ffn_norm, a.dim)?,
            feed_forward: FeedForward::load(l, &keys.feed_forward, a.dim, a.hidden_dim)?,
        })
    }
}

/// `[b, heads, l, d]` with each head's element `i` and `i + d / 2` moved to `2i` and `2i + 1`.
fn pair_halves<T: Tensor>(x: &T) -> T {
    let s = x.shape();
    x.reshape(&[s[0], s[1], s[2], 2, s[3] / 2])
        .transpose(3, 4)
        .reshape(&s)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nn::checkpoint::{random_f32_checkpoint, Checkpoint};
    use crate::tensor::tch_backend::TchTensor;
    use crate::tensor::{Elementwise, Layout, NetworkOps, TensorData};
    use rand::{Rng, SeedableRng};

    const DIMS: DecoderDims = DecoderDims {
        dim: 16,
        n_layers: 2,
        n_heads: 4,
        n_kv_heads: 2,
        head_dim: 4,
        // A multiple of 32, as every real model's: libtorch computes what an elementwise
        // kernel (SiLU) has past its last whole pair of vectors (32 f32 values with AVX-512)
        // with scalar code, whose rounding differs, so a row straddling that would not have
        // the bits it has alone.
        hidden_dim: 32,
        norm_eps: 1e-5,
        rope_theta: 10_000.0,
        max_positions: 32,
    };

    /// A random f32 checkpoint of `DIMS` under `prefix`.
    fn checkpoint(dir: &std::path::Path, prefix: &str) -> Checkpoint {
        let d = DIMS;
        let mut shapes = vec![(format!("{prefix}{FINAL_NORM}"), vec![d.dim])];
        for i in 0..d.n_layers {
            let keys = DecoderStyle::Mistral.layer_keys(prefix, i);
            let [q, k, v, o] = keys.attention.weights(&d.attention());
            let [gate, up, down] = keys.feed_forward.weights(d.dim, d.hidden_dim);
            shapes.push((weight(&keys.attention_norm), vec![d.dim]));
            shapes.push((weight(&keys.ffn_norm), vec![d.dim]));
            // The feed-forward's in Mistral's file order: w1, w2, w3.
            let matrices = [q, k, v, o, gate, down, up];
            shapes.extend(matrices.map(|(key, shape)| (key, shape.to_vec())));
        }
        random_f32_checkpoint(&dir.join("decoder.safetensors"), &shapes, 7)
    }

    /// The keys are those of the published checkpoints: Voxtral's `consolidated.safetensors`
    /// and Qwen3-TTS's `model.safetensors`.
    #[test]
    fn layer_keys_are_the_published_names() {
        let names = |k: &LayerKeys| {
            let (a, f) = (&k.attention, &k.feed_forward);
            [
                &k.attention_norm,
                &a.q,
                &a.k,
                &a.v,
                &a.o,
                &a.q_norm,
                &a.k_norm,
                &k.ffn_norm,
                &f.gate,
                &f.up,
                &f.down,
            ]
            .map(|module| weight(module))
        };
        let mistral = DecoderStyle::Mistral.layer_keys("", 3);
        assert!(!mistral.head_norms);
        assert_eq!(
            names(&mistral),
            [
                "layers.3.attention_norm.weight",
                "layers.3.attention.wq.weight",
                "layers.3.attention.wk.weight",
                "layers.3.attention.wv.weight",
                "layers.3.attention.wo.weight",
                "layers.3.attention.q_norm.weight",
                "layers.3.attention.k_norm.weight",
                "layers.3.ffn_norm.weight",
                "layers.3.feed_forward.w1.weight",
                "layers.3.feed_forward.w3.weight",
                "layers.3.feed_forward.w2.weight",
            ]
        );
        let qwen3 = DecoderStyle::Qwen3.layer_keys("talker.model.", 0);
        assert!(qwen3.head_norms);
        assert_eq!(
            names(&qwen3),
            [
                "talker.model.layers.0.input_layernorm.weight",
                "talker.model.layers.0.self_attn.q_proj.weight",
                "talker.model.layers.0.self_attn.k_proj.weight",
                "talker.model.layers.0.self_attn.v_proj.weight",
                "talker.model.layers.0.self_attn.o_proj.weight",
                "talker.model.layers.0.self_attn.q_norm.weight",
                "talker.model.layers.0.self_attn.k_norm.weight",
                "talker.model.layers.0.post_attention_layernorm.weight",
                "talker.model.layers.0.mlp.gate_proj.weight",
                "talker.model.layers.0.mlp.up_proj.weight",
                "talker.model.layers.0.mlp.down_proj.weight",
            ]
        );
    }

    /// `[1, tokens, dim]` f32 input, uniform in [-0.5, 0.5) from `seed`.
    fn random_prompt(seed: u64, tokens: usize) -> TchTensor {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
        let values: Vec<f32> = (0..tokens * DIMS.dim)
            .map(|_| rng.random::<f32>() - 0.5)
            .collect();
        TchTensor::from_f32(
            &tch::Device::Cpu,
            &values,
            &[1, tokens, DIMS.dim],
            DType::F32,
        )
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
        let x = random_prompt(1, 11);
        let prompt = x.narrow(1, 0, 10);

        let mut pool = decoder.new_pool(DType::F32, 2, 16);
        let mut whole = pool.acquire().unwrap();
        let at_once = decoder.forward(&prompt, &mut pool, &mut [&mut whole]);
        let mut chunked = pool.acquire().unwrap();
        let parts: Vec<TchTensor> = [(0, 4), (4, 3), (7, 3)]
            .iter()
            .map(|&(start, len)| {
                decoder.forward(
                    &prompt.narrow(1, start, len),
                    &mut pool,
                    &mut [&mut chunked],
                )
            })
            .collect();
        close(
            &TchTensor::cat(&parts.iter().collect::<Vec<_>>(), 1),
            &at_once,
        );

        // The next token sees the same keys and values either way.
        let next = x.narrow(1, 10, 1);
        close(
            &decoder.forward(&next, &mut pool, &mut [&mut chunked]),
            &decoder.forward(&next, &mut pool, &mut [&mut whole]),
        );
    }

    /// Chunks padded to a bucket (as on accelerators) give the unpadded outputs, and the
    /// steps after them see the same keys and values, windowed or not, also where the pool's
    /// end cuts a bucket short.
    #[test]
    fn prefill_chunks_padded_to_a_bucket_equal_unpadded_ones() {
        let _guard = tch::no_grad_guard();
        let dir = tempfile::tempdir().unwrap();
        let ckpt = checkpoint(dir.path(), "");
        let l = Loader::<TchTensor>::new(&ckpt, &tch::Device::Cpu, DType::F32);
        let x = random_prompt(3, 14);
        for window in [None, Some(5)] {
            let plain = Decoder::load(&l, "", &DIMS).unwrap().with_window(window);
            assert_eq!(plain.prefill_bucket, None, "no padding on the CPU");
            let padded = Decoder {
                prefill_bucket: Some(8),
                ..Decoder::load(&l, "", &DIMS).unwrap().with_window(window)
            };
            // Chunks of 5, 6 and 2 tokens, then a step; 16 positions cut the third chunk's
            // bucket of 8 to 5.
            let run = |d: &Decoder<TchTensor>| {
                let mut pool = d.new_pool(DType::F32, 1, 16);
                let mut slot = pool.acquire().unwrap();
                let parts: Vec<TchTensor> = [(0, 5), (5, 6), (11, 2), (13, 1)]
                    .iter()
                    .map(|&(start, len)| {
                        d.forward(&x.narrow(1, start, len), &mut pool, &mut [&mut slot])
                    })
                    .collect();
                assert_eq!(slot.len, 14, "the slot counts real tokens only");
                TchTensor::cat(&parts.iter().collect::<Vec<_>>(), 1)
            };
            close(&run(&padded), &run(&plain));
        }
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
        let x = random_prompt(2, 7);
        let run = |d: &Decoder<TchTensor>| {
            let mut pool = d.new_pool(DType::F32, 1, 8);
            let mut slot = pool.acquire().unwrap();
            let prefill = d.forward(&x.narrow(1, 0, 6), &mut pool, &mut [&mut slot]);
            let step = d.forward(&x.narrow(1, 6, 1), &mut pool, &mut [&mut slot]);
            TchTensor::cat(&[&prefill, &step], 1)
        };
        close(&run(&apart), &run(&fused));
    }

    /// Projections joined in one tensor then split (the flow head's first layer), and the
    /// keys and values from one product (its last layer), equal each weight's own product,
    /// with the weights apart and fused.
    #[test]
    fn joined_and_partial_projections_equal_each_product() {
        let _guard = tch::no_grad_guard();
        let dir = tempfile::tempdir().unwrap();
        let ckpt = checkpoint(dir.path(), "");
        let l = Loader::<TchTensor>::new(&ckpt, &tch::Device::Cpu, DType::F32);
        let d = DIMS;
        let x = random_prompt(4, 5);
        for fuse in [false, true] {
            let keys = DecoderStyle::Mistral.layer_keys("", 0).attention;
            let a = AttentionProj::load(&l.fusing(fuse), &keys, &d.attention()).unwrap();
            let joined = a.qkv_joined(&x);
            let width = (d.n_heads + 2 * d.n_kv_heads) * d.head_dim;
            assert_eq!(joined.shape(), [1, 5, width]);
            let (q, k, v) = a.split_qkv(&joined);
            let (only_k, only_v) = a.kv(&x);
            let [wq, wk, wv, _] = keys
                .weights(&d.attention())
                .map(|(key, shape)| l.tensor(&key, &shape).unwrap());
            for (got, w) in [
                (&q, &wq),
                (&k, &wk),
                (&v, &wv),
                (&only_k, &wk),
                (&only_v, &wv),
            ] {
                close(got, &x.linear(w));
            }
            close(&a.q(&x), &q);
        }
    }

    /// Prompts of different lengths prefilled into slots, then decoded: every row of a
    /// batched step has the bits it has when its sequence steps alone, in f32 and bf16, and
    /// a slot given back and taken again starts clean.
    #[test]
    fn a_batched_step_over_the_pool_equals_each_row_alone() {
        let _guard = tch::no_grad_guard();
        let dir = tempfile::tempdir().unwrap();
        let ckpt = checkpoint(dir.path(), "");
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(3);
        let values: Vec<f32> = (0..30 * DIMS.dim)
            .map(|_| rng.random::<f32>() - 0.5)
            .collect();
        for dtype in [DType::F32, DType::BF16] {
            let l = Loader::<TchTensor>::new(&ckpt, &tch::Device::Cpu, dtype);
            let decoder = Decoder::load(&l, "", &DIMS).unwrap();
            let x = TchTensor::from_f32(&tch::Device::Cpu, &values, &[3, 10, DIMS.dim], dtype);
            let prompts = [3, 7, 5];
            // Runs sequences `which` together for 3 steps after their prompts; the outputs of
            // each step, row by row. A used slot (0) is released first, so reuse is covered.
            let run = |which: &[usize]| {
                let mut pool = decoder.new_pool(dtype, 4, 16);
                let mut used = pool.acquire().unwrap();
                decoder.forward(&x.narrow(0, 1, 1), &mut pool, &mut [&mut used]);
                pool.release(&used);
                let mut slots: Vec<KvSlot> = which
                    .iter()
                    .map(|&s| {
                        let mut slot = pool.acquire().unwrap();
                        let prompt = x.narrow(0, s, 1).narrow(1, 0, prompts[s]);
                        decoder.forward(&prompt, &mut pool, &mut [&mut slot]);
                        slot
                    })
                    .collect();
                (0..3)
                    .map(|step| {
                        let rows: Vec<TchTensor> = which
                            .iter()
                            .map(|&s| x.narrow(0, s, 1).narrow(1, prompts[s] + step, 1))
                            .collect();
                        let input = TchTensor::cat(&rows.iter().collect::<Vec<_>>(), 0);
                        let mut refs: Vec<&mut KvSlot> = slots.iter_mut().collect();
                        let out = decoder.forward(&input, &mut pool, &mut refs);
                        (0..which.len())
                            .map(|r| out.narrow(0, r, 1).to_vec_f32())
                            .collect::<Vec<_>>()
                    })
                    .collect::<Vec<_>>()
            };
            let together = run(&[0, 1, 2]);
            for s in 0..3 {
                let alone = run(&[s]);
                for (step, (batched, alone)) in together.iter().zip(&alone).enumerate() {
                    assert_eq!(batched[s], alone[0], "{dtype}: sequence {s}, step {step}");
                }
            }
        }
    }

    /// Sequences prefilled together, chunk by chunk at the same positions, then stepped: each
    /// row's outputs have the bits they have when its sequence runs alone, in f32 and bf16.
    #[test]
    fn a_batched_prefill_equals_each_row_alone() {
        let _guard = tch::no_grad_guard();
        let dir = tempfile::tempdir().unwrap();
        let ckpt = checkpoint(dir.path(), "");
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(6);
        let values: Vec<f32> = (0..3 * 8 * DIMS.dim)
            .map(|_| rng.random::<f32>() - 0.5)
            .collect();
        for dtype in [DType::F32, DType::BF16] {
            let l = Loader::<TchTensor>::new(&ckpt, &tch::Device::Cpu, dtype);
            let decoder = Decoder::load(&l, "", &DIMS).unwrap();
            let x = TchTensor::from_f32(&tch::Device::Cpu, &values, &[3, 8, DIMS.dim], dtype);
            // Chunks of 4 and 3 positions, then a step, for sequences `which` together; each
            // pass's outputs, row by row.
            let run = |which: &[usize]| {
                let mut pool = decoder.new_pool(dtype, 3, 8);
                let mut slots: Vec<KvSlot> =
                    which.iter().map(|_| pool.acquire().unwrap()).collect();
                let parts: Vec<TchTensor> = which.iter().map(|&s| x.narrow(0, s, 1)).collect();
                let input = TchTensor::cat(&parts.iter().collect::<Vec<_>>(), 0);
                [(0, 4), (4, 3), (7, 1)]
                    .iter()
                    .map(|&(start, len)| {
                        let mut refs: Vec<&mut KvSlot> = slots.iter_mut().collect();
                        let out =
                            decoder.forward(&input.narrow(1, start, len), &mut pool, &mut refs);
                        (0..which.len())
                            .map(|r| out.narrow(0, r, 1).to_vec_f32())
                            .collect::<Vec<_>>()
                    })
                    .collect::<Vec<_>>()
            };
            let together = run(&[0, 1, 2]);
            for s in 0..3 {
                let alone = run(&[s]);
                for (pass, (batched, alone)) in together.iter().zip(&alone).enumerate() {
                    assert_eq!(batched[s], alone[0], "{dtype}: sequence {s}, pass {pass}");
                }
            }
        }
    }

    /// The one-call masked attention accelerators run gives what the row-by-row CPU path
    /// gives, over slots of different lengths (GQA 2), also where it reads a bucket of keys
    /// beyond the longest row (a pool of 300 positions) or a bucket cut at the pool's end.
    #[test]
    fn masked_pool_attention_equals_attention_row_by_row() {
        use crate::tensor::tch_backend::masked_pool_attention;
        let _guard = tch::no_grad_guard();
        let dev = tch::Device::Cpu;
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(4);
        let mut random = |shape: &[usize]| {
            let n = shape.iter().product();
            let v: Vec<f32> = (0..n).map(|_| rng.random::<f32>() - 0.5).collect();
            TchTensor::from_f32(&dev, &v, shape, DType::F32)
        };
        let q = random(&[3, 4, 1, 8]);
        for (pool, positions) in [(12, [5, 11, 0]), (300, [5, 11, 0]), (300, [270, 11, 0])] {
            let (keys, values) = (random(&[4, 2, pool, 8]), random(&[4, 2, pool, 8]));
            for window in [None, Some(4)] {
                let rows = PoolRows::windowed(&dev, vec![2, 0, 3], positions.to_vec(), window);
                let masked = masked_pool_attention(&q, &keys, &values, &rows, 0.3);
                let by_row = TchTensor::pool_attention(&q, &keys, &values, &rows, 0.3);
                assert_eq!(masked.shape(), vec![3, 4, 1, 8]);
                close(&masked, &by_row);
            }
        }
    }

    /// With a sliding window, token-by-token steps (windowed pool rows) give what one
    /// prefill gives (a windowed mask), and a chunked prefill too; the window does cut:
    /// without it the late positions differ.
    #[test]
    fn a_sliding_window_steps_as_it_prefills() {
        let _guard = tch::no_grad_guard();
        let dir = tempfile::tempdir().unwrap();
        let ckpt = checkpoint(dir.path(), "");
        let l = Loader::<TchTensor>::new(&ckpt, &tch::Device::Cpu, DType::F32);
        let x = random_prompt(5, 12);
        let windowed = Decoder::load(&l, "", &DIMS).unwrap().with_window(Some(5));
        let run = |d: &Decoder<TchTensor>, chunks: &[usize]| {
            let mut pool = d.new_pool(DType::F32, 1, 16);
            let mut slot = pool.acquire().unwrap();
            let mut start = 0;
            let parts: Vec<TchTensor> = chunks
                .iter()
                .map(|&len| {
                    start += len;
                    d.forward(&x.narrow(1, start - len, len), &mut pool, &mut [&mut slot])
                })
                .collect();
            TchTensor::cat(&parts.iter().collect::<Vec<_>>(), 1)
        };
        let whole = run(&windowed, &[12]);
        close(&run(&windowed, &[1; 12]), &whole);
        close(&run(&windowed, &[3, 1, 6, 1, 1]), &whole);
        let unwindowed = run(&Decoder::load(&l, "", &DIMS).unwrap(), &[12]);
        // Positions 0..5 see the same keys either way; later ones do not.
        close(&whole.narrow(1, 0, 5), &unwindowed.narrow(1, 0, 5));
        let late = |t: &TchTensor| t.narrow(1, 5, 7).to_vec_f32();
        let moved = late(&whole)
            .iter()
            .zip(late(&unwindowed))
            .map(|(a, b)| (a - b).abs())
            .fold(0.0, f32::max);
        assert!(moved > 1e-3, "the window changed nothing ({moved})");
    }

    /// The feed-forward norm's scales multiply its output: scales of one change no bit, a
    /// scale of two on one layer changes the output.
    #[test]
    fn ffn_norm_scales_multiply_the_norm_output() {
        let _guard = tch::no_grad_guard();
        let dir = tempfile::tempdir().unwrap();
        let ckpt = checkpoint(dir.path(), "");
        let l = Loader::<TchTensor>::new(&ckpt, &tch::Device::Cpu, DType::F32);
        let dev = tch::Device::Cpu;
        let ones = TchTensor::from_f32(&dev, &[1.0; DIMS.dim], &[1, 1, DIMS.dim], DType::F32);
        let x = TchTensor::from_f32(&dev, &[0.25; 3 * DIMS.dim], &[1, 3, DIMS.dim], DType::F32);
        let run = |scales: Option<Vec<TchTensor>>| {
            let mut d = Decoder::load(&l, "", &DIMS).unwrap();
            if let Some(scales) = scales {
                d = d.with_ffn_norm_scales(scales);
            }
            let mut pool = d.new_pool(DType::F32, 1, 4);
            let mut slot = pool.acquire().unwrap();
            d.forward(&x, &mut pool, &mut [&mut slot]).to_vec_f32()
        };
        let plain = run(None);
        assert_eq!(run(Some(vec![ones.clone(), ones.clone()])), plain);
        assert_ne!(run(Some(vec![ones.clone(), ones.scale(2.0)])), plain);
    }

    /// Rotations and pool writes of a step's rows, each at its own slot and position, equal
    /// the row-at-a-time operations (the trait's defaults, which MLX uses).
    #[test]
    fn rows_rotate_and_land_at_their_own_slot_and_position() {
        let dev = tch::Device::Cpu;
        let rope = TchTensor::rope_table(&dev, 16, 8, 10_000.0);
        let v: Vec<f32> = (0..3 * 2 * 8).map(|i| i as f32 / 7.0 - 3.0).collect();
        let x = TchTensor::from_f32(&dev, &v, &[3, 2, 1, 8], DType::F32);
        let rows = PoolRows::new(&dev, vec![1, 3, 0], vec![4, 0, 9]);
        let rotated = x.rope_rows(&rope, &rows);
        let mut pool = TchTensor::zeros(&dev, &[4, 2, 16, 8], DType::F32);
        pool.write_rows(&rows, &rotated);
        let mut by_row = TchTensor::zeros(&dev, &[4, 2, 16, 8], DType::F32);
        for r in 0..3 {
            let one = x.narrow(0, r, 1).rope_interleaved(&rope, rows.positions[r]);
            assert_eq!(one.to_vec_f32(), rotated.narrow(0, r, 1).to_vec_f32());
            by_row.write_at(&[rows.slots[r], 0, rows.positions[r], 0], &one);
        }
        assert_eq!(pool.to_vec_f32(), by_row.to_vec_f32());
    }
}
