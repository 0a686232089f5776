//! Attention of a few queries (the flow head's three tokens, a decode step's one per stream),
//! where libtorch's flash kernel spends ~55 µs a call on setup and threads around a few
//! thousand multiply-adds. The arithmetic follows that kernel's: scores in f32 times the
//! scale, probabilities `exp(score - max)` summed in f32, rounded to the inputs' type before
//! they multiply the values (as its reduced-precision path does); keys in blocks of
//! [`KEY_BLOCK`], the sums so far rescaled when a block raises the maximum; the weighted sum
//! times the reciprocal of the probabilities' sum, rounded once.

use super::dot;
use crate::tensor::cpu_gemv::Element;

/// Most queries a call takes: more are a prompt's, for libtorch's kernel and its threads.
pub const MAX_QUERIES: usize = 8;

/// Keys up to which this loop is faster than libtorch's kernel whatever its build: the flow
/// head's three. Beyond, one thread here is slower than libtorch's AVX-512 kernel and faster
/// than its AVX2 one (`kernels::cpu::attention`).
pub const FEW_KEYS: usize = 8;

/// Keys per block, as libtorch's flash kernel splits them from 512 keys on.
pub const KEY_BLOCK: usize = 512;

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
/// `out` as `[batch, queries, heads, dim]`. Compiled for 256-bit vectors where the CPU has
/// them ([`super::has_avx2`]), with the same bits.
///
/// # Safety
/// The three describe live tensors; `k` and `v` have the same shape, with `batch` and `dim`
/// those of `q`, at least one key, and a number of heads dividing `q`'s.
pub unsafe fn attention<E: Element>(
    q: &Strided<E>,
    k: &Strided<E>,
    v: &Strided<E>,
    scale: f32,
    out: &mut [E],
) {
    #[cfg(target_arch = "x86_64")]
    if super::has_avx2() {
        return attention_avx2(q, k, v, scale, out);
    }
    attention_here(q, k, v, scale, out)
}

/// [`attention`] with AVX2's 256-bit vectors.
///
/// # Safety
/// As [`attention`]'s, on a CPU with AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn attention_avx2<E: Element>(
    q: &Strided<E>,
    k: &Strided<E>,
    v: &Strided<E>,
    scale: f32,
    out: &mut [E],
) {
    attention_here(q, k, v, scale, out)
}

/// [`attention`]'s loop, compiled for the instructions of the function it is inlined into.
///
/// # Safety
/// As [`attention`]'s.
#[inline(always)]
pub(super) unsafe fn attention_here<E: Element>(
    q: &Strided<E>,
    k: &Strided<E>,
    v: &Strided<E>,
    scale: f32,
    out: &mut [E],
) {
    let [batch, heads, queries, dim] = q.shape;
    let (kv_heads, keys) = (k.shape[1], k.shape[2]);
    assert!(keys > 0 && out.len() == batch * queries * heads * dim);
    let group = heads / kv_heads;
    let mut sums = vec![0.0f32; dim];
    let mut scores = vec![0.0f32; keys.min(KEY_BLOCK)];
    for b in 0..batch {
        for h in 0..heads {
            let (keys_of, values_of) = (|j| k.row(b, h / group, j), |j| v.row(b, h / group, j));
            for i in 0..queries {
                let query = q.row(b, h, i);
                let (mut max, mut total) = (f32::NEG_INFINITY, 0.0f32);
                sums.fill(0.0);
                for first in (0..keys).step_by(KEY_BLOCK) {
                    let block = &mut scores[..(keys - first).min(KEY_BLOCK)];
                    for (j, score) in block.iter_mut().enumerate() {
                        *score = dot(query, keys_of(first + j)) * scale;
                    }
                    let block_max = block.iter().copied().fold(max, f32::max);
                    if first > 0 && block_max > max {
                        let factor = (max - block_max).exp();
                        total *= factor;
                        sums.iter_mut().for_each(|sum| *sum *= factor);
                    }
                    max = block_max;
                    let mut block_total = 0.0f32;
                    for (j, score) in block.iter().enumerate() {
                        let probability = (score - max).exp();
                        block_total += probability;
                        let weight = E::from_sum(probability).to_f32();
                        for (sum, value) in sums.iter_mut().zip(values_of(first + j)) {
                            *sum += weight * value.to_f32();
                        }
                    }
                    total += block_total;
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
