//! The x86-64 variants. Each implements [`Lanes`] for one instruction set and element type;
//! its `dot` is [`dot`] compiled with that set enabled, so the intrinsics inline into the loop.
//!
//! bf16 without AVX512-BF16 is widened in registers: a bf16 is the top half of an f32, so the
//! even values of a 32-bit lane pair become f32 by a left shift and the odd ones by masking off
//! the low half. Each lane then takes two FMAs per pair, as `vdpbf16ps` does in one. Only the
//! weights are split in the loop: the few input rows are widened once per product, in the same
//! even-then-odd order (`widen_inputs`), which leaves the loop two integer operations per
//! weight load instead of two per weight and input load.

use super::{dot, Lanes};
use half::bf16;
use std::arch::x86_64::*;

macro_rules! dot_with_features {
    ($features:literal) => {
        #[target_feature(enable = $features)]
        unsafe fn dot<const R: usize, const M: usize>(
            w: *const Self::E,
            x: *const Self::X,
            x_stride: usize,
            k: usize,
            y: *mut Self::E,
            y_stride: usize,
        ) {
            dot::<Self, R, M>(w, x, x_stride, k, y, y_stride)
        }
    };
}

/// Adds up 8 lanes: halves, then quarters, then the last pair.
#[inline(always)]
pub(crate) unsafe fn sum256(v: __m256) -> f32 {
    let half = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    let quarter = _mm_add_ps(half, _mm_movehl_ps(half, half));
    _mm_cvtss_f32(_mm_add_ss(quarter, _mm_movehdup_ps(quarter)))
}

/// AVX2 + FMA, f32: 4 weight rows x 2 inputs = 8 accumulators of the 16 registers.
pub struct Avx2F32;

impl Lanes for Avx2F32 {
    type E = f32;
    type X = f32;
    type Acc = __m256;
    type Vals = __m256;
    const LANES: usize = 8;
    const INPUTS: usize = 2;

    #[inline(always)]
    unsafe fn zero() -> __m256 {
        _mm256_setzero_ps()
    }

    #[inline(always)]
    unsafe fn zero_vals() -> __m256 {
        _mm256_setzero_ps()
    }

    #[inline(always)]
    unsafe fn load(ptr: *const f32) -> __m256 {
        _mm256_loadu_ps(ptr)
    }

    #[inline(always)]
    unsafe fn load_input(ptr: *const f32) -> __m256 {
        _mm256_loadu_ps(ptr)
    }

    #[inline(always)]
    unsafe fn multiply_add(acc: __m256, w: __m256, x: __m256) -> __m256 {
        _mm256_fmadd_ps(w, x, acc)
    }

    #[inline(always)]
    unsafe fn sum(acc: __m256) -> f32 {
        sum256(acc)
    }

    dot_with_features!("avx2,fma");
}

/// AVX2 + FMA, bf16 widened: each load of 16 weights is an (even, odd) pair of 8 f32; 4 x 2
/// accumulators, 4 input and 2 weight registers.
pub struct Avx2Bf16;

impl Lanes for Avx2Bf16 {
    type E = bf16;
    type X = f32;
    type Acc = __m256;
    type Vals = (__m256, __m256);
    const WIDENED: bool = true;
    const LANES: usize = 16;
    const INPUTS: usize = 2;

    #[inline(always)]
    unsafe fn zero() -> __m256 {
        _mm256_setzero_ps()
    }

    #[inline(always)]
    unsafe fn zero_vals() -> (__m256, __m256) {
        (_mm256_setzero_ps(), _mm256_setzero_ps())
    }

    #[inline(always)]
    unsafe fn load(ptr: *const bf16) -> (__m256, __m256) {
        let v = _mm256_loadu_si256(ptr.cast());
        let even = _mm256_slli_epi32::<16>(v);
        let odd = _mm256_and_si256(v, _mm256_set1_epi32(0xFFFF_0000_u32 as i32));
        (_mm256_castsi256_ps(even), _mm256_castsi256_ps(odd))
    }

    #[inline(always)]
    unsafe fn load_input(ptr: *const f32) -> (__m256, __m256) {
        (_mm256_loadu_ps(ptr), _mm256_loadu_ps(ptr.add(8)))
    }

    #[inline(always)]
    unsafe fn multiply_add(acc: __m256, w: (__m256, __m256), x: (__m256, __m256)) -> __m256 {
        _mm256_fmadd_ps(w.1, x.1, _mm256_fmadd_ps(w.0, x.0, acc))
    }

    #[inline(always)]
    unsafe fn sum(acc: __m256) -> f32 {
        sum256(acc)
    }

    dot_with_features!("avx2,fma");
}

/// AVX-512F, f32: 4 weight rows x 6 inputs = 24 accumulators of the 32 registers.
pub struct Avx512F32;

impl Lanes for Avx512F32 {
    type E = f32;
    type X = f32;
    type Acc = __m512;
    type Vals = __m512;
    const LANES: usize = 16;
    const INPUTS: usize = 6;

    #[inline(always)]
    unsafe fn zero() -> __m512 {
        _mm512_setzero_ps()
    }

    #[inline(always)]
    unsafe fn zero_vals() -> __m512 {
        _mm512_setzero_ps()
    }

    #[inline(always)]
    unsafe fn load(ptr: *const f32) -> __m512 {
        _mm512_loadu_ps(ptr)
    }

    #[inline(always)]
    unsafe fn load_input(ptr: *const f32) -> __m512 {
        _mm512_loadu_ps(ptr)
    }

    #[inline(always)]
    unsafe fn multiply_add(acc: __m512, w: __m512, x: __m512) -> __m512 {
        _mm512_fmadd_ps(w, x, acc)
    }

    #[inline(always)]
    unsafe fn sum(acc: __m512) -> f32 {
        _mm512_reduce_add_ps(acc)
    }

    dot_with_features!("avx512f");
}

/// AVX-512F without AVX512-BF16, bf16 widened: 4 x 4 accumulators, each input two registers.
pub struct Avx512WidenedBf16;

impl Lanes for Avx512WidenedBf16 {
    type E = bf16;
    type X = f32;
    type Acc = __m512;
    type Vals = (__m512, __m512);
    const WIDENED: bool = true;
    const LANES: usize = 32;
    const INPUTS: usize = 4;

    #[inline(always)]
    unsafe fn zero() -> __m512 {
        _mm512_setzero_ps()
    }

    #[inline(always)]
    unsafe fn zero_vals() -> (__m512, __m512) {
        (_mm512_setzero_ps(), _mm512_setzero_ps())
    }

    #[inline(always)]
    unsafe fn load(ptr: *const bf16) -> (__m512, __m512) {
        let v = _mm512_loadu_si512(ptr.cast());
        let even = _mm512_slli_epi32::<16>(v);
        let odd = _mm512_and_si512(v, _mm512_set1_epi32(0xFFFF_0000_u32 as i32));
        (_mm512_castsi512_ps(even), _mm512_castsi512_ps(odd))
    }

    #[inline(always)]
    unsafe fn load_input(ptr: *const f32) -> (__m512, __m512) {
        (_mm512_loadu_ps(ptr), _mm512_loadu_ps(ptr.add(16)))
    }

    #[inline(always)]
    unsafe fn multiply_add(acc: __m512, w: (__m512, __m512), x: (__m512, __m512)) -> __m512 {
        _mm512_fmadd_ps(w.1, x.1, _mm512_fmadd_ps(w.0, x.0, acc))
    }

    #[inline(always)]
    unsafe fn sum(acc: __m512) -> f32 {
        _mm512_reduce_add_ps(acc)
    }

    dot_with_features!("avx512f");
}

/// AVX512-BF16: `vdpbf16ps` multiplies 32 bf16 pairs into 16 f32 lanes; 4 x 6 accumulators.
pub struct Avx512DotBf16;

impl Lanes for Avx512DotBf16 {
    type E = bf16;
    type X = bf16;
    type Acc = __m512;
    type Vals = __m512i;
    const LANES: usize = 32;
    const INPUTS: usize = 6;

    #[inline(always)]
    unsafe fn zero() -> __m512 {
        _mm512_setzero_ps()
    }

    #[inline(always)]
    unsafe fn zero_vals() -> __m512i {
        _mm512_setzero_si512()
    }

    #[inline(always)]
    unsafe fn load(ptr: *const bf16) -> __m512i {
        _mm512_loadu_si512(ptr.cast())
    }

    #[inline(always)]
    unsafe fn load_input(ptr: *const bf16) -> __m512i {
        Self::load(ptr)
    }

    #[inline(always)]
    unsafe fn multiply_add(acc: __m512, w: __m512i, x: __m512i) -> __m512 {
        // SAFETY: both are 512-bit vectors; every bit pattern is valid for either.
        let pairs = |v: __m512i| std::mem::transmute::<__m512i, __m512bh>(v);
        _mm512_dpbf16_ps(acc, pairs(w), pairs(x))
    }

    #[inline(always)]
    unsafe fn sum(acc: __m512) -> f32 {
        _mm512_reduce_add_ps(acc)
    }

    dot_with_features!("avx512f,avx512bf16");
}

/// Independent accumulators of the peak loop: enough to cover an FMA's latency times the
/// FMAs a core starts per cycle (4 x 2 on current cores) with room to spare.
const PEAK_CHAINS: usize = 12;

/// `iterations` rounds of [`PEAK_CHAINS`] independent FMAs on 8 lanes; returns a value that
/// depends on all of them, so none is optimised away.
#[target_feature(enable = "avx2,fma")]
pub unsafe fn fma_loop_256(iterations: usize) -> f32 {
    let (a, b) = (_mm256_set1_ps(0.999_999), _mm256_set1_ps(1e-7));
    let mut acc = [_mm256_set1_ps(1.0); PEAK_CHAINS];
    for _ in 0..iterations {
        for v in acc.iter_mut() {
            *v = _mm256_fmadd_ps(*v, a, b);
        }
    }
    acc.iter().map(|&v| sum256(v)).sum()
}

/// As [`fma_loop_256`], on 16 lanes.
#[target_feature(enable = "avx512f")]
pub unsafe fn fma_loop_512(iterations: usize) -> f32 {
    let (a, b) = (_mm512_set1_ps(0.999_999), _mm512_set1_ps(1e-7));
    let mut acc = [_mm512_set1_ps(1.0); PEAK_CHAINS];
    for _ in 0..iterations {
        for v in acc.iter_mut() {
            *v = _mm512_fmadd_ps(*v, a, b);
        }
    }
    acc.iter().map(|&v| _mm512_reduce_add_ps(v)).sum()
}

/// f32 multiply-adds one call of the loop of `lanes` lanes does per iteration.
pub const fn fma_per_iteration(lanes: usize) -> usize {
    PEAK_CHAINS * lanes
}
