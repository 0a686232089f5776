//! Operations the encoder needs that `crate::tensor::Tensor` does not have, as free functions
//! over its existing ones.

use crate::tensor::Tensor;

/// Exact (erf) GELU, as `torch.nn.functional.gelu` computes it: `x/2 · (1 + erf(x/√2))`.
///
/// The trait has no erf, so the values go through the host: a copy each way, right for the
/// tiny test model and the CPU, a stall on an accelerator. A `Tensor::gelu` op in the backends
/// (libtorch `gelu("none")`, MLX `gelu`) removes it.
pub fn gelu_erf<T: Tensor>(x: &T, device: &T::Device) -> T {
    let values: Vec<f32> = x
        .to_vec_f32()
        .into_iter()
        .map(|v| 0.5 * v * (1.0 + libm::erff(v * std::f32::consts::FRAC_1_SQRT_2)))
        .collect();
    T::from_f32(device, &values, &x.shape(), x.dtype())
}

/// Additive attention bias `[1, 1, len, len]` for queries and keys at positions
/// `start..start + len`: 0 where key `j` is visible from query `i` (`0 ≤ i − j < window`,
/// self included), −∞ elsewhere.
pub fn sliding_window_bias<T: Tensor>(
    device: &T::Device,
    len: usize,
    window: Option<usize>,
    dtype: crate::tensor::DType,
) -> T {
    let window = window.unwrap_or(usize::MAX);
    let mut bias = vec![f32::NEG_INFINITY; len * len];
    for i in 0..len {
        for j in i.saturating_sub(window - 1)..=i {
            bias[i * len + j] = 0.0;
        }
    }
    T::from_f32(device, &bias, &[1, 1, len, len], dtype)
}
