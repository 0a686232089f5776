//! Tensors the encoder builds from its own rules, over `crate::tensor::Tensor`'s operations.

use crate::tensor::Tensor;

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
