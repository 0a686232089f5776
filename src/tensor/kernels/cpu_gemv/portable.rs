//! The portable variant: eight independent partial sums per output in plain Rust, which the
//! compiler turns into vector code of whatever width the target has. The reference the SIMD
//! variants are tested against, and the kernel on CPUs that are not x86-64.

use super::{dot, Element, Lanes};
use std::marker::PhantomData;

pub struct Lanes8<E>(PhantomData<E>);

impl<E: Element> Lanes for Lanes8<E> {
    type E = E;
    type X = E;
    type Acc = [f32; 8];
    type Vals = [f32; 8];
    const LANES: usize = 8;
    const INPUTS: usize = 4;

    #[inline(always)]
    unsafe fn zero() -> Self::Acc {
        [0.0; 8]
    }

    #[inline(always)]
    unsafe fn zero_vals() -> Self::Vals {
        [0.0; 8]
    }

    #[inline(always)]
    unsafe fn load(ptr: *const E) -> Self::Vals {
        std::array::from_fn(|i| (*ptr.add(i)).to_f32())
    }

    #[inline(always)]
    unsafe fn load_input(ptr: *const E) -> Self::Vals {
        Self::load(ptr)
    }

    #[inline(always)]
    unsafe fn multiply_add(acc: Self::Acc, w: Self::Vals, x: Self::Vals) -> Self::Acc {
        std::array::from_fn(|i| acc[i] + w[i] * x[i])
    }

    #[inline(always)]
    unsafe fn sum(acc: Self::Acc) -> f32 {
        ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]))
    }

    unsafe fn dot<const R: usize, const M: usize>(
        w: *const E,
        x: *const E,
        x_stride: usize,
        k: usize,
        y: *mut E,
        y_stride: usize,
    ) {
        dot::<Self, R, M>(w, x, x_stride, k, y, y_stride)
    }
}
