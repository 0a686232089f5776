//! The layers XTTS-v2's GPT side needs beyond `crate::nn::layers`: LayerNorm, GroupNorm (the
//! conditioning encoder's), GPT-2's `Conv1D` (a linear layer stored `[in, out]`), kernel-1
//! convolutions used as linear layers, and GPT-2's tanh GELU.

use crate::nn::layers::Loader;
use crate::nn::LoadError;
use crate::tensor::Tensor;

/// LayerNorm over the last axis (eps 1e-5): the centred input through RMSNorm (which then
/// divides by the standard deviation), plus the bias.
pub struct LayerNorm<T> {
    weight: T,
    bias: T,
}

pub const NORM_EPS: f64 = 1e-5;

impl<T: Tensor> LayerNorm<T> {
    /// `{prefix}.weight` and `{prefix}.bias`, both `[dim]`.
    pub fn load(l: &Loader<T>, prefix: &str, dim: usize) -> Result<Self, LoadError> {
        Ok(LayerNorm {
            weight: l.tensor(&format!("{prefix}.weight"), &[dim])?,
            bias: l.tensor(&format!("{prefix}.bias"), &[dim])?,
        })
    }

    /// `[batch, len, dim]` -> the same shape.
    pub fn forward(&self, x: &T) -> T {
        let s = x.shape();
        let mean = x
            .sum_dim(2)
            .scale(1.0 / s[2] as f32)
            .reshape(&[s[0], s[1], 1]);
        x.sub(&mean)
            .rms_norm(&self.weight, NORM_EPS)
            .add(&self.bias)
    }
}

/// `nn.GroupNorm` (eps 1e-5) over NLC input: statistics per group of channels over every
/// frame, then a per-channel scale and shift.
pub struct GroupNorm<T: Tensor> {
    weight: T,
    bias: T,
    groups: usize,
    device: T::Device,
}

impl<T: Tensor> GroupNorm<T> {
    pub fn load(
        l: &Loader<T>,
        prefix: &str,
        channels: usize,
        groups: usize,
    ) -> Result<Self, LoadError> {
        Ok(GroupNorm {
            weight: l.tensor(&format!("{prefix}.weight"), &[channels])?,
            bias: l.tensor(&format!("{prefix}.bias"), &[channels])?,
            groups,
            device: l.device.clone(),
        })
    }

    /// `[1, len, channels]` -> the same shape.
    pub fn forward(&self, x: &T) -> T {
        let s = x.shape();
        let (len, channels) = (s[1], s[2]);
        let per_group = channels / self.groups * len;
        let grouped = x.transpose(1, 2).reshape(&[1, self.groups, per_group]);
        let mean = grouped
            .sum_dim(2)
            .scale(1.0 / per_group as f32)
            .reshape(&[1, self.groups, 1]);
        let ones = T::from_f32(&self.device, &vec![1.0; per_group], &[per_group], x.dtype());
        grouped
            .sub(&mean)
            .rms_norm(&ones, NORM_EPS)
            .reshape(&[1, channels, len])
            .transpose(1, 2)
            .mul(&self.weight)
            .add(&self.bias)
    }
}

/// `x @ weight.T + bias` from a weight stored `[in, out]` (GPT-2's `Conv1D`), transposed once
/// at load.
pub struct Projection<T> {
    weight: T,
    bias: T,
}

impl<T: Tensor> Projection<T> {
    /// GPT-2's `Conv1D`: `{prefix}.weight` `[input, out]`, `{prefix}.bias` `[out]`.
    pub fn conv1d_hf(
        l: &Loader<T>,
        prefix: &str,
        input: usize,
        out: usize,
    ) -> Result<Self, LoadError> {
        let key = format!("{prefix}.weight");
        let weight = match l.stored_quantized(&key, [out, input])? {
            Some(weight) => weight,
            None => {
                let stored = l.host_f32(&key, &[input, out])?;
                let mut transposed = vec![0f32; stored.len()];
                for i in 0..input {
                    for o in 0..out {
                        transposed[o * input + i] = stored[i * out + o];
                    }
                }
                l.transposed_weight(&key, &transposed, [out, input])
            }
        };
        Ok(Projection {
            weight,
            bias: l.tensor(&format!("{prefix}.bias"), &[out])?,
        })
    }

    /// A kernel-1 `nn.Conv1d`: `{prefix}.weight` `[out, input, 1]`, `{prefix}.bias` `[out]`.
    pub fn pointwise_conv(
        l: &Loader<T>,
        prefix: &str,
        input: usize,
        out: usize,
    ) -> Result<Self, LoadError> {
        Ok(Projection {
            weight: l
                .tensor(&format!("{prefix}.weight"), &[out, input, 1])?
                .reshape(&[out, input]),
            bias: l.tensor(&format!("{prefix}.bias"), &[out])?,
        })
    }

    pub fn forward(&self, x: &T) -> T {
        x.linear(&self.weight).add(&self.bias)
    }
}

/// GPT-2's `gelu_new`: `0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))`.
pub fn gelu_tanh<T: Tensor>(x: &T) -> T {
    let inner = x
        .mul(x)
        .mul(x)
        .scale(0.044_715)
        .add(x)
        .scale((2.0 / std::f64::consts::PI).sqrt() as f32);
    x.scale(0.5).mul(&inner.tanh().add_scalar(1.0))
}
