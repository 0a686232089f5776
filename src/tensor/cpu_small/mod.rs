//! Operations on a decode step's few rows, on the CPU, where libtorch's dispatch and
//! allocations around little arithmetic cost more than the arithmetic: in the decode step they
//! run on one thread while the others wait.

pub mod attention;
pub mod norm;

use half::bf16;

/// A value these operations read and write: converted with integer operations, so that the loops
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

/// Partial sums kept apart, as a vectorised reduction keeps them (and as libtorch's does): the
/// compiler can vectorise the loops, and the sums' rounding error stays small.
const LANES: usize = 16;

/// `sum(a[i] * b[i])` in f32, over [`LANES`] partial sums.
fn dot<E: Value>(a: &[E], b: &[E]) -> f32 {
    let mut partial = [0.0f32; LANES];
    let (a_chunks, b_chunks) = (a.chunks_exact(LANES), b.chunks_exact(LANES));
    let (a_tail, b_tail) = (a_chunks.remainder(), b_chunks.remainder());
    for (a, b) in a_chunks.zip(b_chunks) {
        for ((sum, a), b) in partial.iter_mut().zip(a).zip(b) {
            *sum += a.widen() * b.widen();
        }
    }
    for ((sum, a), b) in partial.iter_mut().zip(a_tail).zip(b_tail) {
        *sum += a.widen() * b.widen();
    }
    partial.iter().sum()
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
}
