//! The x86-64 kernel (AVX2): a block's 32 weight bytes times the input row's 32 bytes with
//! `vpmaddubsw` (the weights' magnitudes times the inputs with the weights' signs, no pair
//! near the 16-bit limit) and `vpmaddwd`, summed in fours into eight 32-bit lanes, exactly;
//! then converted and multiplied into f32 lanes with the two blocks' scales, as the portable
//! kernel does. Four outputs by two input rows per tile: eight independent sums.

use super::{block_scale, Job, GROUP, OUTPUT_BLOCK, ROW_BLOCK};
use crate::tensor::cpu_gemv::x86::sum256;
use crate::tensor::quantized::QuantFormat;
use std::arch::x86_64::*;
use std::ops::Range;

/// A block's 32 weights as signed bytes, from its stored values.
#[inline(always)]
unsafe fn weights<const Q4: bool>(values: *const u8) -> __m256i {
    if Q4 {
        let packed = _mm_loadu_si128(values.cast());
        let mask = _mm_set1_epi8(0x0F);
        let low = _mm_and_si128(packed, mask);
        let high = _mm_and_si128(_mm_srli_epi16(packed, 4), mask);
        _mm256_sub_epi8(_mm256_set_m128i(high, low), _mm256_set1_epi8(8))
    } else {
        _mm256_loadu_si256(values.cast())
    }
}

/// The 32 products of a block, lane `j` the sum of products `4j..4j + 4`, as f32 (exact).
#[inline(always)]
unsafe fn products(magnitudes: __m256i, w: __m256i, x: __m256i) -> __m256 {
    let pairs = _mm256_maddubs_epi16(magnitudes, _mm256_sign_epi8(x, w));
    _mm256_cvtepi32_ps(_mm256_madd_epi16(pairs, _mm256_set1_epi16(1)))
}

/// Outputs `first_o..first_o + R` of input rows `first_m..first_m + M`.
#[inline(always)]
unsafe fn tile<const Q4: bool, const R: usize, const M: usize>(
    job: &Job,
    first_o: usize,
    first_m: usize,
) {
    // No closures here: they would not inherit the caller's target features, and each
    // intrinsic in one would become a call.
    let bytes = job.format.block_bytes();
    let mut rows = [std::ptr::null::<u8>(); R];
    for (r, row) in rows.iter_mut().enumerate() {
        *row = job.weight_row(first_o + r);
    }
    let mut acc = [[_mm256_setzero_ps(); M]; R];
    for b in 0..job.blocks() {
        let mut inputs = [(_mm256_setzero_si256(), 0f32); M];
        for (m, input) in inputs.iter_mut().enumerate() {
            let (x, scale) = job.input_block(first_m + m, b);
            *input = (_mm256_loadu_si256(x.cast()), scale);
        }
        for (row, sums) in rows.iter().zip(acc.iter_mut()) {
            let block = row.add(b * bytes);
            let w = weights::<Q4>(block.add(2));
            let magnitudes = _mm256_sign_epi8(w, w);
            let d = block_scale(block);
            for ((x, x_scale), sum) in inputs.iter().zip(sums.iter_mut()) {
                let scale = _mm256_set1_ps(d * x_scale);
                *sum = _mm256_fmadd_ps(products(magnitudes, w, *x), scale, *sum);
            }
        }
    }
    for (r, sums) in acc.iter().enumerate() {
        for (m, sum) in sums.iter().enumerate() {
            *job.y.add((first_m + m) * job.out + first_o + r) = sum256(*sum);
        }
    }
}

#[inline(always)]
unsafe fn run<const Q4: bool>(job: &Job, outputs: Range<usize>) {
    debug_assert_eq!(GROUP, 32, "a block is one 256-bit vector of bytes");
    let mut o = outputs.start;
    while o < outputs.end {
        let full = outputs.end - o >= OUTPUT_BLOCK;
        let mut m = 0;
        while m < job.rows {
            let rows = (job.rows - m).min(ROW_BLOCK);
            match (full, rows) {
                (true, 1) => tile::<Q4, OUTPUT_BLOCK, 1>(job, o, m),
                (true, _) => tile::<Q4, OUTPUT_BLOCK, ROW_BLOCK>(job, o, m),
                (false, 1) => tile::<Q4, 1, 1>(job, o, m),
                (false, _) => tile::<Q4, 1, ROW_BLOCK>(job, o, m),
            }
            m += rows;
        }
        o += if full { OUTPUT_BLOCK } else { 1 };
    }
}

/// # Safety
/// As `Kernel`, and the CPU has AVX2 and FMA.
#[target_feature(enable = "avx2,fma")]
pub unsafe fn avx2_run(job: &Job, outputs: Range<usize>) {
    match job.format {
        QuantFormat::Q8 => run::<false>(job, outputs),
        QuantFormat::Q4 => run::<true>(job, outputs),
    }
}
