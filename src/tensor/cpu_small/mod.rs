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

/// `sum(a[i] * b[i])` in f32, over [`LANES`] partial sums.
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
