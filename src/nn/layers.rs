//! Building blocks shared by the backbone, the flow head and the codec.

use super::checkpoint::Checkpoint;
use super::LoadError;
use crate::tensor::{DType, Tensor};

/// What every loader needs: the checkpoint, the device and the compute dtype, and the key
/// prefix of the part being loaded (a family's sub-model, e.g. `talker.`).
pub struct Loader<'a, T: Tensor> {
    ckpt: &'a Checkpoint,
    pub device: &'a T::Device,
    pub dtype: DType,
    prefix: String,
}

impl<'a, T: Tensor> Loader<'a, T> {
    pub fn new(ckpt: &'a Checkpoint, device: &'a T::Device, dtype: DType) -> Self {
        Loader {
            ckpt,
            device,
            dtype,
            prefix: String::new(),
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
        }
    }

    fn key(&self, key: &str) -> String {
        format!("{}{key}", self.prefix)
    }

    pub fn tensor(&self, key: &str, shape: &[usize]) -> Result<T, LoadError> {
        self.ckpt
            .load::<T>(self.device, &self.key(key), shape, self.dtype)
    }

    pub fn tensor_as(&self, key: &str, shape: &[usize], dtype: DType) -> Result<T, LoadError> {
        self.ckpt
            .load::<T>(self.device, &self.key(key), shape, dtype)
    }

    /// The tensor in the dtype it is stored in.
    pub fn tensor_as_stored(&self, key: &str, shape: &[usize]) -> Result<T, LoadError> {
        let stored = self.ckpt.raw(&self.key(key), shape)?.dtype;
        self.tensor_as(key, shape, stored)
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

/// SwiGLU feed-forward: `w2(silu(w1 x) * w3 x)`.
pub struct FeedForward<T> {
    w1: T,
    w2: T,
    w3: T,
}

impl<T: Tensor> FeedForward<T> {
    pub fn load(l: &Loader<T>, prefix: &str, dim: usize, hidden: usize) -> Result<Self, LoadError> {
        Ok(FeedForward {
            w1: l.tensor(&format!("{prefix}.w1.weight"), &[hidden, dim])?,
            w2: l.tensor(&format!("{prefix}.w2.weight"), &[dim, hidden])?,
            w3: l.tensor(&format!("{prefix}.w3.weight"), &[hidden, dim])?,
        })
    }

    pub fn forward(&self, x: &T) -> T {
        x.linear(&self.w1)
            .silu()
            .mul(&x.linear(&self.w3))
            .linear(&self.w2)
    }
}

/// Query/key/value/output projections of one attention layer.
pub struct AttentionProj<T> {
    pub wq: T,
    pub wk: T,
    pub wv: T,
    pub wo: T,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub head_dim: usize,
}

impl<T: Tensor> AttentionProj<T> {
    pub fn load(
        l: &Loader<T>,
        prefix: &str,
        dim: usize,
        n_heads: usize,
        n_kv_heads: usize,
        head_dim: usize,
    ) -> Result<Self, LoadError> {
        let (q, kv) = (n_heads * head_dim, n_kv_heads * head_dim);
        Ok(AttentionProj {
            wq: l.tensor(&format!("{prefix}.wq.weight"), &[q, dim])?,
            wk: l.tensor(&format!("{prefix}.wk.weight"), &[kv, dim])?,
            wv: l.tensor(&format!("{prefix}.wv.weight"), &[kv, dim])?,
            wo: l.tensor(&format!("{prefix}.wo.weight"), &[dim, q])?,
            n_heads,
            n_kv_heads,
            head_dim,
        })
    }

    /// `[b, l, heads * head_dim]` -> `[b, heads, l, head_dim]`.
    pub fn split_heads(&self, x: &T, heads: usize) -> T {
        let s = x.shape();
        x.reshape(&[s[0], s[1], heads, self.head_dim])
            .transpose(1, 2)
    }

    /// `[b, heads, l, head_dim]` -> `[b, l, dim]` through `wo`.
    pub fn merge_heads(&self, x: &T) -> T {
        let s = x.shape();
        x.transpose(1, 2)
            .reshape(&[s[0], s[2], s[1] * s[3]])
            .linear(&self.wo)
    }

    pub fn scale(&self) -> f64 {
        1.0 / (self.head_dim as f64).sqrt()
    }
}
