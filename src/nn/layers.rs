//! Building blocks shared by the backbone, the flow head and the codec.

use super::checkpoint::Checkpoint;
use super::quantized_keys;
use super::LoadError;
use crate::tensor::quantized::QuantFormat;
use crate::tensor::{DType, Products, Tensor};
use std::ops::Range;

/// Sinusoidal embedding of a scalar `t` (Voxtral TTS's flow-matching time, Voxtral Realtime's
/// transcription delay): `[cos(t·f₀), …, cos(t·f_{d/2−1}), sin(t·f₀), …]` with
/// `f_i = 10000^(−i / (d/2))`, computed in f32 as the references do.
pub fn time_embedding(t: f32, dim: usize) -> Vec<f32> {
    let half = dim / 2;
    let log_theta = 10_000f64.ln() as f32;
    let angles: Vec<f32> = (0..half)
        .map(|i| t * (-log_theta * i as f32 / half as f32).exp())
        .collect();
    angles
        .iter()
        .map(|a| a.cos())
        .chain(angles.iter().map(|a| a.sin()))
        .collect()
}

/// What every loader needs: the checkpoint, the device and the compute dtype, and the key
/// prefix of the part being loaded (a family's sub-model, e.g. `talker.`).
pub struct Loader<'a, T: Tensor> {
    ckpt: &'a Checkpoint,
    pub device: &'a T::Device,
    pub dtype: DType,
    prefix: String,
    /// Concatenate the weights of products that read the same input (q/k/v, gate/up) into
    /// one: on accelerators one product launches once instead of three times. Off on a CPU,
    /// where each weight is read in place from the memory map (packed weights are fused
    /// anyway: `Stacked::load`).
    fuse: bool,
    /// Matrices (linear weights only) in the backend's form for products of a few rows made
    /// many times over (`Tensor::pack_for_few_rows`), taking these products.
    pack: Option<Products>,
    /// Matrices (linear weights only) stored in this format where the backend multiplies it
    /// (`Tensor::quantize_weight`), before any packing.
    quantize: Option<QuantFormat>,
}

impl<'a, T: Tensor> Loader<'a, T> {
    pub fn new(ckpt: &'a Checkpoint, device: &'a T::Device, dtype: DType) -> Self {
        Loader {
            ckpt,
            device,
            dtype,
            prefix: String::new(),
            fuse: !T::is_cpu(device),
            pack: None,
            quantize: None,
        }
    }

    /// The same loader, its matrices packed for products of a few rows (`Loader::pack`) that
    /// take `products`: for a part whose every matrix is a linear weight.
    pub fn packing(&self, products: Products) -> Self {
        Loader {
            pack: Some(products),
            ..self.with_dtype(self.dtype)
        }
    }

    /// The same loader, its matrices stored in `format` (`Loader::quantize`): for a part
    /// whose every matrix is a linear weight.
    pub fn quantizing(&self, format: Option<QuantFormat>) -> Self {
        Loader {
            quantize: format,
            ..self.with_dtype(self.dtype)
        }
    }

    /// The same loader, fusing products or not, whatever the device.
    pub fn fusing(&self, fuse: bool) -> Self {
        Loader {
            fuse,
            ..self.with_dtype(self.dtype)
        }
    }

    /// The same loader, its keys under `prefix` too.
    pub fn scoped(&self, prefix: &str) -> Self {
        Loader {
            prefix: format!("{}{prefix}", self.prefix),
            ..self.with_dtype(self.dtype)
        }
    }

    /// The same loader computing in `dtype`.
    pub fn with_dtype(&self, dtype: DType) -> Self {
        Loader {
            ckpt: self.ckpt,
            device: self.device,
            dtype,
            prefix: self.prefix.clone(),
            fuse: self.fuse,
            pack: self.pack,
            quantize: self.quantize,
        }
    }

    fn key(&self, key: &str) -> String {
        format!("{}{key}", self.prefix)
    }

    /// The shape stored at `key` (a model whose widths are not in its config reads them here).
    pub fn shape(&self, key: &str) -> Result<Vec<usize>, LoadError> {
        self.ckpt.shape(&self.key(key))
    }

    /// The tensor at `key`; a matrix quantized, or packed, as this loader says; a matrix a
    /// quantized checkpoint stores in blocks, read as such.
    pub fn tensor(&self, key: &str, shape: &[usize]) -> Result<T, LoadError> {
        if let &[out, k] = shape {
            if let Some(weight) = self.stored_quantized(key, [out, k])? {
                return Ok(weight);
            }
        }
        let t = match self.quantize.filter(|_| shape.len() == 2) {
            Some(format) => {
                // From the stored values, as `voxtral-tts quantize` does: the same blocks.
                let stored = self.tensor_as_stored(key, shape)?;
                if let Some(quantized) = stored.quantize_weight(format) {
                    quantized_keys::record(&self.key(key), format, false);
                    return Ok(quantized);
                }
                stored.to_dtype(self.dtype)
            }
            None => self
                .ckpt
                .load::<T>(self.device, &self.key(key), shape, self.dtype)?,
        };
        Ok(match self.pack.filter(|_| shape.len() == 2) {
            Some(products) => T::pack_for_few_rows(&[&t], products).unwrap_or(t),
            None => t,
        })
    }

    /// The `[out, k]` weight at `key` where a quantized checkpoint stores it in blocks.
    pub fn stored_quantized(&self, key: &str, shape: [usize; 2]) -> Result<Option<T>, LoadError> {
        let Some((format, blocks)) = self.ckpt.quantized(&self.key(key), shape)? else {
            return Ok(None);
        };
        // SAFETY: `blocks` point into a shard's map, which the model holds (`mmaps()`) for as
        // long as its tensors live, and which is never written.
        Ok(Some(unsafe {
            T::from_quantized(self.device, blocks, format, shape, self.dtype)
        }))
    }

    /// The linear weight `[out, k]` of `values`, the one stored at `key` transposed (`[k, out]`,
    /// as GPT-2's `Conv1D` stores it), quantized as this loader says.
    pub fn transposed_weight(&self, key: &str, values: &[f32], shape: [usize; 2]) -> T {
        if let Some(format) = self.quantize {
            // From the f32 values, as `voxtral-tts quantize` does: the same blocks.
            let exact = T::from_f32(self.device, values, &shape, DType::F32);
            if let Some(quantized) = exact.quantize_weight(format) {
                quantized_keys::record(&self.key(key), format, true);
                return quantized;
            }
        }
        self.from_f32(values, &shape)
    }

    pub fn tensor_as(&self, key: &str, shape: &[usize], dtype: DType) -> Result<T, LoadError> {
        self.ckpt
            .load::<T>(self.device, &self.key(key), shape, dtype)
    }

    /// The dtype the tensor is stored in (its shape checked).
    pub fn stored_dtype(&self, key: &str, shape: &[usize]) -> Result<DType, LoadError> {
        Ok(self.ckpt.raw(&self.key(key), shape)?.dtype)
    }

    /// The tensor in the dtype it is stored in.
    pub fn tensor_as_stored(&self, key: &str, shape: &[usize]) -> Result<T, LoadError> {
        self.tensor_as(key, shape, self.stored_dtype(key, shape)?)
    }

    /// The tensor's values as f32 on the host.
    pub fn host_f32(&self, key: &str, shape: &[usize]) -> Result<Vec<f32>, LoadError> {
        self.ckpt.load_f32(&self.key(key), shape)
    }

    pub fn from_f32(&self, data: &[f32], shape: &[usize]) -> T {
        T::from_f32(self.device, data, shape, self.dtype)
    }
}

pub struct RmsNorm<T> {
    weight: T,
    eps: f64,
}

impl<T: Tensor> RmsNorm<T> {
    pub fn load(l: &Loader<T>, key: &str, dim: usize, eps: f64) -> Result<Self, LoadError> {
        Ok(RmsNorm {
            weight: l.tensor(key, &[dim])?,
            eps,
        })
    }

    pub fn forward(&self, x: &T) -> T {
        x.rms_norm(&self.weight, self.eps)
    }
}

/// `x @ weight.T + bias`, the bias optional.
pub struct Linear<T> {
    weight: T,
    bias: Option<T>,
}

impl<T: Tensor> Linear<T> {
    /// `{prefix}.weight` `[out, in]`, and `{prefix}.bias` `[out]` when `bias`.
    pub fn load(
        l: &Loader<T>,
        prefix: &str,
        out: usize,
        input: usize,
        bias: bool,
    ) -> Result<Self, LoadError> {
        Ok(Linear {
            weight: l.tensor(&format!("{prefix}.weight"), &[out, input])?,
            bias: if bias {
                Some(l.tensor(&format!("{prefix}.bias"), &[out])?)
            } else {
                None
            },
        })
    }

    pub fn forward(&self, x: &T) -> T {
        let y = x.linear(&self.weight);
        match &self.bias {
            Some(b) => y.add(b),
            None => y,
        }
    }
}

/// Weights of products that read the same input: apart, or concatenated (rows of the first,
/// then of the next...) so that one product computes them all (see `Loader::fuse`).
struct Stacked<T> {
    weights: Weights<T>,
    /// Each weight's output rows (a packed weight's shape does not say).
    rows: Vec<usize>,
}

enum Weights<T> {
    Apart(Vec<T>),
    Fused(T),
}

impl<T: Tensor> Stacked<T> {
    fn load(l: &Loader<T>, keys: &[String], shapes: &[[usize; 2]]) -> Result<Self, LoadError> {
        let plain = Loader {
            pack: None,
            ..l.with_dtype(l.dtype)
        };
        let parts = keys
            .iter()
            .zip(shapes)
            .map(|(key, shape)| plain.tensor(key, shape))
            .collect::<Result<Vec<T>, _>>()?;
        let rows = shapes.iter().map(|s| s[0]).collect();
        let all: Vec<&T> = parts.iter().collect();
        // A packed weight is a copy anyway: packed whole, its products take their input once.
        let weights = if let Some(weight) = l.pack.and_then(|p| T::pack_for_few_rows(&all, p)) {
            Weights::Fused(weight)
        } else if l.fuse {
            Weights::Fused(T::cat(&all, 0))
        } else {
            Weights::Apart(match l.pack {
                Some(products) => parts
                    .iter()
                    .map(|p| T::pack_for_few_rows(&[p], products).unwrap_or_else(|| p.clone()))
                    .collect(),
                None => parts,
            })
        };
        Ok(Stacked { weights, rows })
    }

    /// `x @ w.T` for every weight, in order.
    fn products(&self, x: &T) -> Vec<T> {
        self.products_of(x, 0..self.rows.len())
    }

    /// `x @ w.T` for the weights `parts`, in order: one product where fused.
    fn products_of(&self, x: &T, parts: Range<usize>) -> Vec<T> {
        let rows = &self.rows[parts.clone()];
        match &self.weights {
            Weights::Apart(weights) => weights[parts].iter().map(|w| x.linear(w)).collect(),
            Weights::Fused(weight) if parts == (0..self.rows.len()) => {
                split(&x.linear(weight), rows)
            }
            Weights::Fused(weight) => {
                let start = self.rows[..parts.start].iter().sum();
                split(&x.linear_rows(weight, start, rows.iter().sum()), rows)
            }
        }
    }

    /// All the products side by side in the last dimension, as one tensor.
    fn joined(&self, x: &T) -> T {
        match &self.weights {
            Weights::Apart(_) => {
                let all = self.products(x);
                T::cat(&all.iter().collect::<Vec<_>>(), x.shape().len() - 1)
            }
            Weights::Fused(weight) => x.linear(weight),
        }
    }

    /// The products in a tensor from [`Stacked::joined`].
    fn split(&self, joined: &T) -> Vec<T> {
        split(joined, &self.rows)
    }

    /// `x @ w.T` for weight `i` alone (a view of the fused weight's rows).
    fn product(&self, x: &T, i: usize) -> T {
        self.products_of(x, i..i + 1).swap_remove(0)
    }
}

/// `all`'s last dimension cut into parts of `sizes`, in order.
fn split<T: Tensor>(all: &T, sizes: &[usize]) -> Vec<T> {
    let last = all.shape().len() - 1;
    let mut start = 0;
    sizes
        .iter()
        .map(|&n| {
            start += n;
            all.narrow(last, start - n, n)
        })
        .collect()
}

/// SwiGLU feed-forward: `w2(silu(w1 x) * w3 x)`.
pub struct FeedForward<T> {
    /// w1 (gate) and w3 (up).
    gate_up: Stacked<T>,
    w2: T,
}

impl<T: Tensor> FeedForward<T> {
    /// Mistral's names: `{prefix}.w1` (gate), `.w3` (up), `.w2` (down).
    pub fn load(l: &Loader<T>, prefix: &str, dim: usize, hidden: usize) -> Result<Self, LoadError> {
        let [gate, up, down] = ["w1", "w3", "w2"].map(|w| format!("{prefix}.{w}.weight"));
        Self::load_named(l, [&gate, &up, &down], dim, hidden)
    }

    /// The weights at the keys `[gate, up, down]`.
    pub fn load_named(
        l: &Loader<T>,
        [gate, up, down]: [&str; 3],
        dim: usize,
        hidden: usize,
    ) -> Result<Self, LoadError> {
        Ok(FeedForward {
            gate_up: Stacked::load(
                l,
                &[gate.to_string(), up.to_string()],
                &[[hidden, dim], [hidden, dim]],
            )?,
            w2: l.tensor(down, &[dim, hidden])?,
        })
    }

    pub fn forward(&self, x: &T) -> T {
        self.down(x, None)
    }

    /// `residual + forward(x)`, the add done in the last product where the backend can.
    pub fn forward_add(&self, x: &T, residual: &T) -> T {
        self.down(x, Some(residual))
    }

    fn down(&self, x: &T, residual: Option<&T>) -> T {
        if let Weights::Fused(gate_up) = &self.gate_up.weights {
            // The gate and up halves side by side, as the last product can read them.
            return x.linear(gate_up).gated_linear(&self.w2, residual);
        }
        let [gate, up]: [T; 2] = self
            .gate_up
            .products(x)
            .try_into()
            .unwrap_or_else(|_| unreachable!("two weights"));
        let gated = gate.silu().mul(&up);
        match residual {
            Some(residual) => gated.linear_add(&self.w2, residual),
            None => gated.linear(&self.w2),
        }
    }
}

/// Query/key/value/output projections of one attention layer.
pub struct AttentionProj<T> {
    /// wq, wk, wv.
    qkv: Stacked<T>,
    pub wo: T,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
}

impl<T: Tensor> AttentionProj<T> {
    /// Mistral's names: `{prefix}.wq`, `.wk`, `.wv`, `.wo`.
    pub fn load(
        l: &Loader<T>,
        prefix: &str,
        dim: usize,
        n_heads: usize,
        n_kv_heads: usize,
        head_dim: usize,
    ) -> Result<Self, LoadError> {
        let [q, k, v, o] = ["wq", "wk", "wv", "wo"].map(|w| format!("{prefix}.{w}.weight"));
        Self::load_named(l, [&q, &k, &v, &o], dim, n_heads, n_kv_heads, head_dim)
    }

    /// The weights at the keys `[q, k, v, o]`.
    pub fn load_named(
        l: &Loader<T>,
        [wq, wk, wv, wo]: [&str; 4],
        dim: usize,
        n_heads: usize,
        n_kv_heads: usize,
        head_dim: usize,
    ) -> Result<Self, LoadError> {
        let (q, kv) = (n_heads * head_dim, n_kv_heads * head_dim);
        Ok(AttentionProj {
            qkv: Stacked::load(
                l,
                &[wq, wk, wv].map(str::to_string),
                &[[q, dim], [kv, dim], [kv, dim]],
            )?,
            wo: l.tensor(wo, &[dim, q])?,
            n_heads,
            n_kv_heads,
            head_dim,
        })
    }

    /// The query, key and value projections of `x` (one product where fused).
    pub fn qkv(&self, x: &T) -> (T, T, T) {
        self.split_qkv(&self.qkv_joined(x))
    }

    /// The query, key and value projections of `x` side by side in its last dimension.
    pub fn qkv_joined(&self, x: &T) -> T {
        self.qkv.joined(x)
    }

    /// The query, key and value in a tensor from [`AttentionProj::qkv_joined`].
    pub fn split_qkv(&self, joined: &T) -> (T, T, T) {
        let [q, k, v]: [T; 3] = self
            .qkv
            .split(joined)
            .try_into()
            .unwrap_or_else(|_| unreachable!("three weights"));
        (q, k, v)
    }

    pub fn q(&self, x: &T) -> T {
        self.qkv.product(x, 0)
    }

    /// The key and value projections of `x` (one product where fused).
    pub fn kv(&self, x: &T) -> (T, T) {
        let [k, v]: [T; 2] = self
            .qkv
            .products_of(x, 1..3)
            .try_into()
            .unwrap_or_else(|_| unreachable!("two weights"));
        (k, v)
    }

    /// `[b, l, heads * head_dim]` -> `[b, heads, l, head_dim]`.
    pub fn split_heads(&self, x: &T, heads: usize) -> T {
        let s = x.shape();
        x.reshape(&[s[0], s[1], heads, self.head_dim])
            .transpose(1, 2)
    }

    /// `[b, heads, l, head_dim]` -> `[b, l, dim]` through `wo`.
    pub fn merge_heads(&self, x: &T) -> T {
        Self::merged(x).linear(&self.wo)
    }

    /// `residual + merge_heads(x)`, the add done in the product where the backend can.
    pub fn merge_heads_add(&self, x: &T, residual: &T) -> T {
        Self::merged(x).linear_add(&self.wo, residual)
    }

    fn merged(x: &T) -> T {
        let s = x.shape();
        x.transpose(1, 2).reshape(&[s[0], s[2], s[1] * s[3]])
    }

    pub fn scale(&self) -> f64 {
        1.0 / (self.head_dim as f64).sqrt()
    }
}
