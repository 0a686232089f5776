//! Attention over a few tokens (the flow head's three), where libtorch's flash kernel spends
//! ~55 µs a call on setup around a few thousand multiply-adds. The arithmetic follows that
//! kernel's: scores in f32 times the scale, probabilities `exp(score - max)` summed in f32,
//! rounded to the inputs' type before they multiply the values (as its reduced-precision
//! path does), and the weighted sum times the reciprocal of the probabilities' sum, rounded once.

use super::dot;
use crate::tensor::cpu_gemv::Element;

/// Most keys a call takes: the probabilities live on the stack.
pub const MAX_KEYS: usize = 8;

/// A `[batch, heads, tokens, dim]` tensor's values with `dim` contiguous: the strides of the
/// first three axes, in values.
#[derive(Clone, Copy)]
pub struct Strided<E> {
    pub values: *const E,
    pub shape: [usize; 4],
    pub strides: [usize; 3],
}

impl<E: Element> Strided<E> {
    /// The `dim` values of one token.
    ///
    /// # Safety
    /// `values` and the strides address a live tensor of `shape`.
    unsafe fn row(&self, batch: usize, head: usize, token: usize) -> &[E] {
        let [s0, s1, s2] = self.strides;
        std::slice::from_raw_parts(
            self.values.add(batch * s0 + head * s1 + token * s2),
            self.shape[3],
        )
    }
}

/// `softmax(q kᵀ · scale) v`, every query attending to every key; `k` and `v` may have fewer
/// heads than `q` (grouped queries: head `h` reads key head `h / (heads / kv_heads)`). Writes
/// `out` as `[batch, queries, heads, dim]`.
///
/// # Safety
/// The three describe live tensors; `k` and `v` have the same shape, with `batch` and `dim`
/// those of `q`, at most [`MAX_KEYS`] keys, and a number of heads dividing `q`'s.
pub unsafe fn attention<E: Element>(
    q: &Strided<E>,
    k: &Strided<E>,
    v: &Strided<E>,
    scale: f32,
    out: &mut [E],
) {
    let [batch, heads, queries, dim] = q.shape;
    let (kv_heads, keys) = (k.shape[1], k.shape[2]);
    assert!(keys <= MAX_KEYS && out.len() == batch * queries * heads * dim);
    let group = heads / kv_heads;
    let mut sums = vec![0.0f32; dim];
    for b in 0..batch {
        for h in 0..heads {
            for i in 0..queries {
                let query = q.row(b, h, i);
                let mut scores = [0.0f32; MAX_KEYS];
                for (j, score) in scores[..keys].iter_mut().enumerate() {
                    *score = dot(query, k.row(b, h / group, j)) * scale;
                }
                let max = scores[..keys]
                    .iter()
                    .copied()
                    .fold(f32::NEG_INFINITY, f32::max);
                let mut total = 0.0f32;
                sums.fill(0.0);
                for (j, score) in scores[..keys].iter().enumerate() {
                    let probability = (score - max).exp();
                    total += probability;
                    let weight = E::from_sum(probability).to_f32();
                    for (sum, value) in sums.iter_mut().zip(v.row(b, h / group, j)) {
                        *sum += weight * value.to_f32();
                    }
                }
                let reciprocal = 1.0 / total;
                let row = &mut out[((b * queries + i) * heads + h) * dim..][..dim];
                for (o, sum) in row.iter_mut().zip(&sums) {
                    *o = E::from_sum(sum * reciprocal);
                }
            }
        }
    }
}
