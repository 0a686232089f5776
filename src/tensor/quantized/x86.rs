//! The x86-64 kernels. A block's 32 weights widen in registers to f32 (sign- or zero-extended
//! bytes, converted, times the block's scale: exactly the dequantized values) and multiply-add
//! into four accumulators of eight lanes per input row, whose sums are added up in the order
//! of the portable kernel, so every variant gives the same bits. AVX-512 holds two of those
//! accumulators per register and splits them again at the end.

use super::{Job, GROUP};
use std::arch::x86_64::*;
use std::ops::Range;

/// How one instruction set holds a block: `PARTS` vectors of `LANES` f32.
trait Block {
    type V: Copy;
    const LANES: usize;
    const PARTS: usize;
    /// Input rows per register tile: `PARTS x ROWS` accumulators, the block's `PARTS` weights
    /// and a few temporaries fill the registers.
    const ROWS: usize;
    unsafe fn zero() -> Self::V;
    /// The 32 weights of a `Q8` block's values, times `d`.
    unsafe fn q8(values: *const u8, d: f32) -> [Self::V; 4];
    /// The 32 weights of a `Q4` block's values, times `d`.
    unsafe fn q4(values: *const u8, d: f32) -> [Self::V; 4];
    /// `acc + w * x[..LANES]`, fused.
    unsafe fn multiply_add(acc: Self::V, w: Self::V, x: *const f32) -> Self::V;
    /// One input row's accumulators added up, in the portable kernel's order.
    unsafe fn sum(acc: &[Self::V; 4]) -> f32;
}

/// Adds up 8 lanes: halves, then quarters, then the last pair.
#[inline(always)]
unsafe fn sum256(v: __m256) -> f32 {
    let half = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    let quarter = _mm_add_ps(half, _mm_movehl_ps(half, half));
    _mm_cvtss_f32(_mm_add_ss(quarter, _mm_movehdup_ps(quarter)))
}

#[inline(always)]
unsafe fn widen8(bytes: __m128i, d: __m256) -> __m256 {
    _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(bytes)), d)
}

/// A `Q4` block's 16 bytes as two vectors of 16 signed values: weights 0-15, then 16-31.
#[inline(always)]
unsafe fn q4_signed(values: *const u8) -> (__m128i, __m128i) {
    let packed = _mm_loadu_si128(values.cast());
    let (mask, eight) = (_mm_set1_epi8(0x0F), _mm_set1_epi8(8));
    let low = _mm_sub_epi8(_mm_and_si128(packed, mask), eight);
    let high = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(packed, 4), mask), eight);
    (low, high)
}

struct Avx2;

impl Block for Avx2 {
    type V = __m256;
    const LANES: usize = 8;
    const PARTS: usize = 4;
    const ROWS: usize = 2;

    #[inline(always)]
    unsafe fn zero() -> __m256 {
        _mm256_setzero_ps()
    }

    #[inline(always)]
    unsafe fn q8(values: *const u8, d: f32) -> [__m256; 4] {
        let d = _mm256_set1_ps(d);
        std::array::from_fn(|p| widen8(_mm_loadl_epi64(values.add(p * 8).cast()), d))
    }

    #[inline(always)]
    unsafe fn q4(values: *const u8, d: f32) -> [__m256; 4] {
        let d = _mm256_set1_ps(d);
        let (low, high) = q4_signed(values);
        [
            widen8(low, d),
            widen8(_mm_unpackhi_epi64(low, low), d),
            widen8(high, d),
            widen8(_mm_unpackhi_epi64(high, high), d),
        ]
    }

    #[inline(always)]
    unsafe fn multiply_add(acc: __m256, w: __m256, x: *const f32) -> __m256 {
        _mm256_fmadd_ps(w, _mm256_loadu_ps(x), acc)
    }

    #[inline(always)]
    unsafe fn sum(acc: &[__m256; 4]) -> f32 {
        let v = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), acc[2]), acc[3]);
        sum256(v)
    }
}

struct Avx512;

impl Block for Avx512 {
    type V = __m512;
    const LANES: usize = 16;
    const PARTS: usize = 2;
    const ROWS: usize = 6;

    #[inline(always)]
    unsafe fn zero() -> __m512 {
        _mm512_setzero_ps()
    }

    #[inline(always)]
    unsafe fn q8(values: *const u8, d: f32) -> [__m512; 4] {
        let d = _mm512_set1_ps(d);
        let widen = |at: usize| {
            let bytes = _mm_loadu_si128(values.add(at).cast());
            _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(bytes)), d)
        };
        [
            widen(0),
            widen(16),
            _mm512_setzero_ps(),
            _mm512_setzero_ps(),
        ]
    }

    #[inline(always)]
    unsafe fn q4(values: *const u8, d: f32) -> [__m512; 4] {
        let d = _mm512_set1_ps(d);
        let (low, high) = q4_signed(values);
        let widen = |bytes| _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(bytes)), d);
        [
            widen(low),
            widen(high),
            _mm512_setzero_ps(),
            _mm512_setzero_ps(),
        ]
    }

    #[inline(always)]
    unsafe fn multiply_add(acc: __m512, w: __m512, x: *const f32) -> __m512 {
        _mm512_fmadd_ps(w, _mm512_loadu_ps(x), acc)
    }

    #[inline(always)]
    unsafe fn sum(acc: &[__m512; 4]) -> f32 {
        // Each register holds two of the portable kernel's eight-lane accumulators.
        let half = |v: __m512, upper: bool| {
            let bits = _mm512_castps_si512(v);
            let part = if upper {
                _mm512_extracti64x4_epi64(bits, 1)
            } else {
                _mm512_castsi512_si256(bits)
            };
            _mm256_castsi256_ps(part)
        };
        let v = _mm256_add_ps(half(acc[0], false), half(acc[0], true));
        let v = _mm256_add_ps(_mm256_add_ps(v, half(acc[1], false)), half(acc[1], true));
        sum256(v)
    }
}

/// The outputs `outputs` of every input row of `job`, `Q4` blocks or `Q8`.
#[inline(always)]
unsafe fn run<B: Block, const Q4: bool>(job: &Job, outputs: Range<usize>) {
    for o in outputs {
        let mut m = 0;
        while m < job.rows {
            let rows = (job.rows - m).min(B::ROWS);
            match rows {
                1 => tile::<B, Q4, 1>(job, o, m),
                2 => tile::<B, Q4, 2>(job, o, m),
                3 => tile::<B, Q4, 3>(job, o, m),
                4 => tile::<B, Q4, 4>(job, o, m),
                5 => tile::<B, Q4, 5>(job, o, m),
                6 => tile::<B, Q4, 6>(job, o, m),
                _ => unreachable!("at most 6 rows per tile"),
            }
            m += rows;
        }
    }
}

/// Output `o` of input rows `first..first + M`.
#[inline(always)]
unsafe fn tile<B: Block, const Q4: bool, const M: usize>(job: &Job, o: usize, first: usize) {
    let bytes = job.format.block_bytes();
    let row = job.weight_row(o);
    let mut acc = [[B::zero(); 4]; M];
    for b in 0..job.blocks() {
        let block = row.add(b * bytes);
        let d = f32::from_bits(u32::from(u16::from_le_bytes([*block, *block.add(1)])) << 16);
        let w = if Q4 {
            B::q4(block.add(2), d)
        } else {
            B::q8(block.add(2), d)
        };
        for (m, sums) in acc.iter_mut().enumerate() {
            let x = job.x.add((first + m) * job.k + b * GROUP);
            for p in 0..B::PARTS {
                sums[p] = B::multiply_add(sums[p], w[p], x.add(p * B::LANES));
            }
        }
    }
    for (m, sums) in acc.iter().enumerate() {
        *job.y.add((first + m) * job.out + o) = B::sum(sums);
    }
}

macro_rules! kernel {
    ($name:ident, $block:ty, $q4:literal, $features:literal) => {
        /// # Safety
        /// As `Kernel`, and the CPU has the instructions.
        #[target_feature(enable = $features)]
        pub unsafe fn $name(job: &Job, outputs: Range<usize>) {
            run::<$block, $q4>(job, outputs)
        }
    };
}

kernel!(avx2_q8, Avx2, false, "avx2,fma");
kernel!(avx2_q4, Avx2, true, "avx2,fma");
kernel!(avx512_q8, Avx512, false, "avx512f,avx512bw,avx2,fma");
kernel!(avx512_q4, Avx512, true, "avx512f,avx512bw,avx2,fma");
