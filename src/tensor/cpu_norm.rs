//! RMSNorm of a few rows on the CPU in one pass. libtorch takes eight operations for it (widen,
//! square, mean, add, rsqrt, multiply, round, multiply by the weight), each a dispatch and an
//! allocation around little arithmetic, and in the decode step they run on one thread while
//! the others wait. The arithmetic is the reference's: the mean of squares in f32, its
//! reciprocal square root, the normalised value rounded to the input's type, then times the
//! weight in f32 and rounded again.

use half::bf16;

/// A value the norm reads and writes: converted with integer operations, so that the loops
/// vectorise (the `half` crate's conversions branch on NaN).
pub trait Value: Copy {
    fn widen(self) -> f32;
    /// Rounded to nearest even.
    fn narrow(value: f32) -> Self;
}

impl Value for f32 {
    fn widen(self) -> f32 {
        self
    }

    fn narrow(value: f32) -> Self {
        value
    }
}

impl Value for bf16 {
    fn widen(self) -> f32 {
        // A bf16 is the top half of an f32.
        f32::from_bits(u32::from(self.to_bits()) << 16)
    }

    fn narrow(value: f32) -> Self {
        let bits = value.to_bits();
        let rounded = if value.is_nan() {
            (bits >> 16) | 0x40
        } else {
            // Adding just under half a unit of the kept bits, plus the kept part's lowest bit,
            // carries exactly when rounding to nearest even goes up.
            (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
        };
        bf16::from_bits(rounded as u16)
    }
}

/// Partial sums of squares kept apart, as a vectorised reduction keeps them (and as libtorch's
/// does): the compiler can vectorise the loop, and the sum's rounding error stays small.
const LANES: usize = 16;

/// `y = x / sqrt(mean(x², last axis) + eps) * weight` over rows of `weight.len()` values.
///
/// # Panics
/// When `x` is not whole rows, or `y` is not `x`'s length.
pub fn rms_norm<E: Value>(x: &[E], weight: &[E], eps: f32, y: &mut [E]) {
    let dim = weight.len();
    assert!(
        dim > 0 && x.len().is_multiple_of(dim) && y.len() == x.len(),
        "rms_norm: {} values are not rows of {dim}",
        x.len()
    );
    for (row, out) in x.chunks_exact(dim).zip(y.chunks_exact_mut(dim)) {
        let mut partial = [0.0f32; LANES];
        let chunks = row.chunks_exact(LANES);
        let tail = chunks.remainder();
        for chunk in chunks {
            for (sum, v) in partial.iter_mut().zip(chunk) {
                let v = v.widen();
                *sum += v * v;
            }
        }
        for (sum, v) in partial.iter_mut().zip(tail) {
            let v = v.widen();
            *sum += v * v;
        }
        let mean = partial.iter().sum::<f32>() / dim as f32;
        let inverse = 1.0 / (mean + eps).sqrt();
        for ((o, v), w) in out.iter_mut().zip(row).zip(weight) {
            let normed = E::narrow(v.widen() * inverse);
            *o = E::narrow(normed.widen() * w.widen());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The integer conversions give the `half` crate's bits, ties and infinities included.
    #[test]
    fn bf16_conversions_match_the_half_crates() {
        let specials = [
            0.0f32,
            -0.0,
            1.0,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::MAX,
            f32::MIN_POSITIVE,
            1e-40,
        ];
        let ties = (0..64u32).map(|i| f32::from_bits(0x3F80_8000 + (i << 16)));
        let spread = (0..100_000u32).map(|i| f32::from_bits(i.wrapping_mul(2_654_435_761)));
        for value in specials
            .into_iter()
            .chain(ties)
            .chain(spread)
            .filter(|v| !v.is_nan())
        {
            assert_eq!(
                bf16::narrow(value).to_bits(),
                bf16::from_f32(value).to_bits(),
                "{value:e}"
            );
            let b = bf16::from_f32(value);
            assert_eq!(b.widen().to_bits(), b.to_f32().to_bits());
        }
        assert!(bf16::narrow(f32::NAN).is_nan());
    }

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
