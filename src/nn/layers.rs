//! Building blocks shared by the backbone, the flow head and the codec, and the keys an
//! attention and a feed-forward block are stored under ([`AttentionKeys`],
//! [`FeedForwardKeys`], in Mistral's and Hugging Face's names): the one definition the
//! loaders read and the test-checkpoint writers write.

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
            weight: l.tensor(&weight(prefix), &[out, input])?,
            bias: if bias {
                Some(l.tensor(&self::bias(prefix), &[out])?)
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

/// `prefix.name`, or `name` alone under an empty prefix (a loader scoped at the block).
pub fn join(prefix: &str, name: &str) -> String {
    if prefix.is_empty() {
        name.to_string()
    } else {
        format!("{prefix}.{name}")
    }
}

/// `module.weight`: where a module's weight is stored.
pub fn weight(module: &str) -> String {
    format!("{module}.weight")
}

/// `module.bias`: where a module's bias is stored (in the checkpoints that have one).
pub fn bias(module: &str) -> String {
    format!("{module}.bias")
}

/// Where a SwiGLU feed-forward block's projections are stored: each one's module.
#[derive(Clone, Debug)]
pub struct FeedForwardKeys {
    pub gate: String,
    pub up: String,
    pub down: String,
}

impl FeedForwardKeys {
    /// Mistral's names: `{prefix}.w1` (gate), `.w3` (up), `.w2` (down).
    pub fn mistral(prefix: &str) -> Self {
        let [gate, up, down] = ["w1", "w3", "w2"].map(|name| join(prefix, name));
        FeedForwardKeys { gate, up, down }
    }

    /// Hugging Face's names: `{prefix}.gate_proj`, `.up_proj`, `.down_proj`.
    pub fn hugging_face(prefix: &str) -> Self {
        let [gate, up, down] = ["gate_proj", "up_proj", "down_proj"].map(|name| join(prefix, name));
        FeedForwardKeys { gate, up, down }
    }

    /// The weights' keys and `[out, in]` shapes, gate, up then down, for a block from `dim`
    /// to `hidden` and back.
    pub fn weights(&self, dim: usize, hidden: usize) -> [(String, [usize; 2]); 3] {
        [
            (weight(&self.gate), [hidden, dim]),
            (weight(&self.up), [hidden, dim]),
            (weight(&self.down), [dim, hidden]),
        ]
    }
}

/// SwiGLU feed-forward: `w2(silu(w1 x) * w3 x)`.
pub struct FeedForward<T> {
    /// w1 (gate) and w3 (up).
    gate_up: Stacked<T>,
    w2: T,
}

impl<T: Tensor> FeedForward<T> {
    /// The weights at `keys`, for a block from `dim` to `hidden` and back.
    pub fn load(
        l: &Loader<T>,
        keys: &FeedForwardKeys,
        dim: usize,
        hidden: usize,
    ) -> Result<Self, LoadError> {
        let [(gate, gate_shape), (up, up_shape), (down, down_shape)] = keys.weights(dim, hidden);
        Ok(FeedForward {
            gate_up: Stacked::load(l, &[gate, up], &[gate_shape, up_shape])?,
            w2: l.tensor(&down, &down_shape)?,
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

/// An attention block's widths: its input and output `dim`, and its heads.
#[derive(Clone, Copy, Debug)]
pub struct AttentionDims {
    pub dim: usize,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
}

/// Where an attention block's tensors are stored: each projection's module, and the modules
/// of the query and key norms of a block that has them.
#[derive(Clone, Debug)]
pub struct AttentionKeys {
    pub q: String,
    pub k: String,
    pub v: String,
    pub o: String,
    pub q_norm: String,
    pub k_norm: String,
}

impl AttentionKeys {
    /// Mistral's names: `{prefix}.wq`, `.wk`, `.wv`, `.wo`, `.q_norm`, `.k_norm`.
    pub fn mistral(prefix: &str) -> Self {
        Self::named(prefix, ["wq", "wk", "wv", "wo"])
    }

    /// Hugging Face's names: `{prefix}.q_proj`, `.k_proj`, `.v_proj`, `.o_proj`, `.q_norm`,
    /// `.k_norm`.
    pub fn hugging_face(prefix: &str) -> Self {
        Self::named(prefix, ["q_proj", "k_proj", "v_proj", "o_proj"])
    }

    fn named(prefix: &str, projections: [&str; 4]) -> Self {
        let [q, k, v, o] = projections.map(|name| join(prefix, name));
        let [q_norm, k_norm] = ["q_norm", "k_norm"].map(|name| join(prefix, name));
        AttentionKeys {
            q,
            k,
            v,
            o,
            q_norm,
            k_norm,
        }
    }

    /// The projections' weight keys and `[out, in]` shapes, q, k, v then o.
    pub fn weights(&self, d: &AttentionDims) -> [(String, [usize; 2]); 4] {
        let (q, kv) = (d.n_heads * d.head_dim, d.n_kv_heads * d.head_dim);
        [
            (weight(&self.q), [q, d.dim]),
            (weight(&self.k), [kv, d.dim]),
            (weight(&self.v), [kv, d.dim]),
            (weight(&self.o), [d.dim, q]),
        ]
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
    /// The projections at `keys`, of widths `d`.
    pub fn load(l: &Loader<T>, keys: &AttentionKeys, d: &AttentionDims) -> Result<Self, LoadError> {
        let [(q, q_shape), (k, k_shape), (v, v_shape), (o, o_shape)] = keys.weights(d);
        Ok(AttentionProj {
            qkv: Stacked::load(l, &[q, k, v], &[q_shape, k_shape, v_shape])?,
            wo: l.tensor(&o, &o_shape)?,
            n_heads: d.n_heads,
            n_kv_heads: d.n_kv_heads,
            head_dim: d.head_dim,
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
