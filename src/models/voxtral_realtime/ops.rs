//! Tensors the encoder builds from its own rules, over `crate::tensor::Tensor`'s operations.

use crate::tensor::Tensor;

/// Additive attention bias `[1, 1, len, past + len]` for `len` queries that follow `past`
/// cached keys, the keys being the cached ones then the queries' own: 0 where key `j` is
/// visible from query `i` (`0 ≤ (past + i) − j < window`, self included), −∞ elsewhere.
pub fn sliding_window_bias<T: Tensor>(
    device: &T::Device,
    past: usize,
    len: usize,
    window: Option<usize>,
    dtype: crate::tensor::DType,
) -> T {
    let window = window.unwrap_or(usize::MAX);
    let keys = past + len;
    let mut bias = vec![f32::NEG_INFINITY; len * keys];
    for i in 0..len {
        let query = past + i;
        for j in query.saturating_sub(window - 1)..=query {
            bias[i * keys + j] = 0.0;
        }
    }
    T::from_f32(device, &bias, &[1, 1, len, keys], dtype)
}
