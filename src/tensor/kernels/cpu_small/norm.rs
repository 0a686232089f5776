//! RMSNorm of a few rows in one pass, where libtorch takes eight operations (widen, square,
//! mean, add, rsqrt, multiply, round, multiply by the weight). The arithmetic is the
//! reference's: the mean of squares in f32, its reciprocal square root, the normalised value
//! rounded to the input's type, then times the weight in f32 and rounded again.

use super::dot;
use crate::tensor::cpu_gemv::Element;

/// `y = x / sqrt(mean(x², last axis) + eps) * weight` over rows of `weight.len()` values.
/// Compiled for 256-bit vectors where the CPU has them ([`super::has_avx2`]), with the same bits.
///
/// # Panics
/// When `x` is not whole rows, or `y` is not `x`'s length.
pub fn rms_norm<E: Element>(x: &[E], weight: &[E], eps: f32, y: &mut [E]) {
    let dim = weight.len();
    assert!(
        dim > 0 && x.len().is_multiple_of(dim) && y.len() == x.len(),
        "rms_norm: {} values are not rows of {dim}",
        x.len()
    );
    #[cfg(target_arch = "x86_64")]
    if super::has_avx2() {
        // SAFETY: this CPU has AVX2.
        return unsafe { rms_norm_avx2(x, weight, eps, y) };
    }
    rms_norm_here(x, weight, eps, y)
}

/// [`rms_norm`] with AVX2's 256-bit vectors.
///
/// # Safety
/// The CPU has AVX2.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn rms_norm_avx2<E: Element>(x: &[E], weight: &[E], eps: f32, y: &mut [E]) {
    rms_norm_here(x, weight, eps, y)
}

/// [`rms_norm`]'s loop on checked lengths, compiled for the instructions of the function it is
/// inlined into.
#[inline(always)]
pub(super) fn rms_norm_here<E: Element>(x: &[E], weight: &[E], eps: f32, y: &mut [E]) {
    let dim = weight.len();
    for (row, out) in x.chunks_exact(dim).zip(y.chunks_exact_mut(dim)) {
        let mean = dot(row, row) / dim as f32;
        let inverse = 1.0 / (mean + eps).sqrt();
        for ((o, v), w) in out.iter_mut().zip(row).zip(weight) {
            let normed = E::from_sum(v.to_f32() * inverse);
            *o = E::from_sum(normed.to_f32() * w.to_f32());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use half::bf16;

    /// Against the same formula in f64, rounded once where the reference rounds.
    #[test]
    fn matches_the_formula_within_an_f32_rounding() {
        let dim = 37;
        let x: Vec<f32> = (0..3 * dim)
            .map(|i| ((i * 7919) % 101) as f32 / 50.0 - 1.0)
            .collect();
        let w: Vec<f32> = (0..dim).map(|i| 0.5 + i as f32 / dim as f32).collect();
        let mut y = vec![0.0f32; x.len()];
        rms_norm(&x, &w, 1e-5, &mut y);
        for (row, out) in x.chunks(dim).zip(y.chunks(dim)) {
            let mean = row.iter().map(|&v| f64::from(v).powi(2)).sum::<f64>() / dim as f64;
            let inverse = 1.0 / (mean + 1e-5).sqrt();
            for ((&v, &w), &o) in row.iter().zip(&w).zip(out) {
                let want = f64::from(v) * inverse * f64::from(w);
                assert!(
                    (f64::from(o) - want).abs()
                        <= 4.0 * f64::from(f32::EPSILON) * want.abs().max(1e-3)
                );
            }
        }
    }

    /// In bf16 the normalised value is rounded before the weight multiplies it, as the
    /// reference's `.type_as(x) * weight` does.
    #[test]
    fn bf16_rounds_before_the_weight() {
        let dim = 16;
        let x: Vec<bf16> = (0..dim).map(|i| bf16::from_f32(i as f32 - 7.3)).collect();
        let w: Vec<bf16> = (0..dim)
            .map(|i| bf16::from_f32(1.0 + i as f32 / 7.0))
            .collect();
        let mut y = vec![bf16::ZERO; dim];
        rms_norm(&x, &w, 1e-6, &mut y);
        let mean = x.iter().map(|v| v.to_f32().powi(2)).sum::<f32>() / dim as f32;
        let inverse = 1.0 / (mean + 1e-6).sqrt();
        for ((v, w), o) in x.iter().zip(&w).zip(&y) {
            let normed = bf16::from_f32(v.to_f32() * inverse);
            assert_eq!(*o, bf16::from_f32(normed.to_f32() * w.to_f32()));
        }
    }
}
