//! Operations on a decode step's few rows, on the CPU, where libtorch's dispatch and
//! allocations around little arithmetic cost more than the arithmetic: in the decode step they
//! run on one thread while the others wait. Values are widened and rounded with the kernel's
//! [`Element`] conversions.

pub mod attention;
pub mod norm;

use super::cpu_gemv::Element;

/// Partial sums kept apart, as a vectorised reduction keeps them (and as libtorch's does): the
/// compiler can vectorise the loops, and the sums' rounding error stays small.
const LANES: usize = 16;

/// Whether this CPU has AVX2, for which the loops here are also compiled: the same operations
/// in the same order (Rust fuses no multiply and add), so the same bits, in 256-bit vectors
/// where the x86-64 baseline has 128.
#[cfg(target_arch = "x86_64")]
fn has_avx2() -> bool {
    std::arch::is_x86_feature_detected!("avx2")
}

/// `sum(a[i] * b[i])` in f32, over [`LANES`] partial sums.
#[inline(always)]
fn dot<E: Element>(a: &[E], b: &[E]) -> f32 {
    let mut partial = [0.0f32; LANES];
    let (a_chunks, b_chunks) = (a.chunks_exact(LANES), b.chunks_exact(LANES));
    let (a_tail, b_tail) = (a_chunks.remainder(), b_chunks.remainder());
    for (a, b) in a_chunks.zip(b_chunks) {
        for ((sum, a), b) in partial.iter_mut().zip(a).zip(b) {
            *sum += a.to_f32() * b.to_f32();
        }
    }
    for ((sum, a), b) in partial.iter_mut().zip(a_tail).zip(b_tail) {
        *sum += a.to_f32() * b.to_f32();
    }
    partial.iter().sum()
}

#[cfg(test)]
mod tests {
    use super::attention::{attention, attention_here, Strided};
    use super::norm::{rms_norm, rms_norm_here};
    use crate::tensor::cpu_gemv::Element;
    use half::bf16;

    fn values<E: Element>(n: usize, seed: u32) -> Vec<E> {
        (0..n as u32)
            .map(|i| {
                let x = (i.wrapping_mul(2_654_435_761) ^ seed.wrapping_mul(40_503)) % 2001;
                E::from_sum(x as f32 / 1000.0 - 1.0)
            })
            .collect()
    }

    /// Built for AVX2 (where this CPU has it, as the dispatch chooses) and for the x86-64
    /// baseline, the loops give the same bits: a multiply and add fused, or sums reordered, in
    /// either build would fail this.
    fn same_bits_in_both_builds<E: Element + PartialEq + std::fmt::Debug>() {
        let (batch, heads, kv_heads, dim) = (2, 8, 2, 72);
        for (queries, keys) in [(3, 3), (1, 700)] {
            let q = values::<E>(batch * heads * queries * dim, 1);
            let k = values::<E>(batch * kv_heads * keys * dim, 2);
            let v = values::<E>(batch * kv_heads * keys * dim, 3);
            let strided = |t: &[E], n: usize, tokens: usize| Strided {
                values: t.as_ptr(),
                shape: [batch, n, tokens, dim],
                strides: [n * tokens * dim, tokens * dim, dim],
            };
            let (qs, ks, vs) = (
                strided(&q, heads, queries),
                strided(&k, kv_heads, keys),
                strided(&v, kv_heads, keys),
            );
            let mut dispatched = vec![E::ZERO; q.len()];
            let mut baseline = vec![E::ZERO; q.len()];
            // SAFETY: the three describe the vectors above, which outlive the calls.
            unsafe {
                attention(&qs, &ks, &vs, 0.1, &mut dispatched);
                attention_here(&qs, &ks, &vs, 0.1, &mut baseline);
            }
            assert_eq!(dispatched, baseline, "attention, {keys} keys");
        }
        let (x, w) = (values::<E>(6 * 1000, 4), values::<E>(1000, 5));
        let (mut dispatched, mut baseline) = (vec![E::ZERO; x.len()], vec![E::ZERO; x.len()]);
        rms_norm(&x, &w, 1e-5, &mut dispatched);
        rms_norm_here(&x, &w, 1e-5, &mut baseline);
        assert_eq!(dispatched, baseline, "rms_norm");
    }

    #[test]
    fn avx2_and_baseline_builds_give_the_same_bits() {
        same_bits_in_both_builds::<f32>();
        same_bits_in_both_builds::<bf16>();
    }
}
