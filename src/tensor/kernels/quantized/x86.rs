//! The x86-64 kernels: a block's 32 weight bytes times the input row's 32 bytes, summed in
//! fours into eight 32-bit lanes, exactly; then converted and multiplied into f32 lanes with
//! the two blocks' scales, as the portable kernel does.
//!
//! - AVX2: `vpmaddubsw` (unsigned bytes times signed ones, pairs summed in 16 bits) then
//!   `vpmaddwd` by ones. Eight-bit weights go in as their magnitudes and the inputs take their
//!   signs, so no pair nears the 16-bit limit. Four-bit weights go in as their stored nibbles
//!   (`q + 8`, 0 to 15), and each lane then adds minus eight times its inputs' sum
//!   (`Job::x_offsets`): the same integers, with no signs to take per block.
//! - AVX-512 VNNI: `vpdpbusd` does both steps in one (starting from the offsets for one row;
//!   several rows take the signed weights).
//!
//! A tile is `R` outputs by `M` input rows: each weight block is unpacked once for the tile's
//! rows. A decode step (one row) takes eight outputs at a time, so that eight independent
//! sums keep the multiply-adds busy. With more rows, four-bit weights take one output by up
//! to [`MAX_TILE_ROWS`] rows, which shares the unpacking of the nibbles most; eight-bit ones,
//! which need no unpacking, take eight outputs by two rows (which measured faster for them).

use super::{Job, GROUP, OUTPUT_BLOCK};
use crate::tensor::cpu_gemv::x86::sum256;
use crate::tensor::quantized::QuantFormat;
use std::arch::x86_64::*;
use std::ops::Range;

/// Input rows of a one-output tile: eight sums, and registers left for the block's weights.
const MAX_TILE_ROWS: usize = 8;

/// A block's 32 weights from its stored values: the nibbles (0 to 15) for `q4`, the signed
/// values for `q8`.
#[inline(always)]
unsafe fn weights<const Q4: bool>(values: *const u8) -> __m256i {
    if Q4 {
        // The 16 bytes in both halves, the upper half's shifted down to its high nibbles.
        let both = _mm256_broadcastsi128_si256(_mm_loadu_si128(values.cast()));
        let high_up = _mm256_srlv_epi64(both, _mm256_setr_epi64x(0, 0, 4, 4));
        _mm256_and_si256(high_up, _mm256_set1_epi8(0x0F))
    } else {
        _mm256_loadu_si256(values.cast())
    }
}

/// The 32 products of a weight block by an input block `x`, lane `j` the sum of products
/// `4j..4j + 4`: of `q4`'s `nibbles` (from [`weights`]) plus the lanes' `offsets`, or of
/// signed weights `w` (their `magnitudes` times `x` with their signs).
#[inline(always)]
unsafe fn block_products<const VNNI: bool>(
    w: __m256i,
    magnitudes: __m256i,
    x: *const i8,
    offsets: *const i32,
    nibbles: bool,
) -> __m256i {
    let x = _mm256_loadu_si256(x.cast());
    let (unsigned, signed) = if nibbles {
        (w, x)
    } else {
        (magnitudes, _mm256_sign_epi8(x, w))
    };
    let start = if nibbles {
        _mm256_loadu_si256(offsets.cast())
    } else {
        _mm256_setzero_si256()
    };
    if VNNI {
        _mm256_dpbusd_epi32(start, unsigned, signed)
    } else {
        let lanes = _mm256_madd_epi16(_mm256_maddubs_epi16(unsigned, signed), _mm256_set1_epi16(1));
        if nibbles {
            _mm256_add_epi32(lanes, start)
        } else {
            lanes
        }
    }
}

/// A weight block's scale (bf16, its first two bytes) in every f32 lane: the 16 bits in both
/// halves of each lane, shifted into the upper one.
#[inline(always)]
unsafe fn weight_scale(block: *const u8) -> __m256 {
    let bits = _mm256_set1_epi16(block.cast::<i16>().read_unaligned());
    _mm256_castsi256_ps(_mm256_slli_epi32(bits, 16))
}

/// Outputs `first_o..first_o + R` of input rows `first_m..first_m + M`.
#[inline(always)]
unsafe fn tile<const Q4: bool, const VNNI: bool, const R: usize, const M: usize>(
    job: &Job,
    first_o: usize,
    first_m: usize,
) {
    // No closures here: they would not inherit the caller's target features, and each
    // intrinsic in one would become a call.
    let (k, blocks, bytes) = (job.k, job.blocks(), job.format.block_bytes());
    let mut rows = [std::ptr::null::<u8>(); R];
    for (r, row) in rows.iter_mut().enumerate() {
        *row = job.weight_row(first_o + r);
    }
    let x = job.x.add(first_m * k);
    let x_scales = job.x_scales.add(first_m * blocks);
    // Eight lanes per block; `q8` has none (never read).
    let x_offsets = job.x_offsets.wrapping_add(first_m * k / 4);
    let mut acc = [[_mm256_setzero_ps(); M]; R];
    // `avx2` with more than two rows: one multiply gives a block's scale times every row's,
    // read back per row (measured 5 to 10% faster than a multiply per row).
    let shared_scales = !VNNI && M > 2;
    let mut combined = [0f32; 8];
    for b in 0..blocks {
        for (row, sums) in rows.iter().zip(acc.iter_mut()) {
            let block = row.add(b * bytes);
            // The same block of the next tile's outputs (the rows after these): a decode
            // step's eight interleaved rows defeat the hardware's prefetcher, and its loads
            // waited on memory; one output by several rows gained too.
            _mm_prefetch::<_MM_HINT_T0>(block.wrapping_add(R * blocks * bytes).cast());
            let w = weights::<Q4>(block.add(2));
            // VNNI multiplies several rows by signed weights: starting its sums from each
            // row's offsets measured 20% slower there.
            let nibbles = Q4 && !(VNNI && M > 1);
            let w = if Q4 && !nibbles {
                _mm256_sub_epi8(w, _mm256_set1_epi8(8))
            } else {
                w
            };
            let magnitudes = if nibbles { w } else { _mm256_sign_epi8(w, w) };
            let d = weight_scale(block);
            if shared_scales {
                let row_scales = _mm256_loadu_ps(job.x_scales_by_block.add(b * job.rows + first_m));
                _mm256_storeu_ps(combined.as_mut_ptr(), _mm256_mul_ps(d, row_scales));
            }
            for (m, sum) in sums.iter_mut().enumerate() {
                let at = m * k + b * GROUP;
                let offsets = x_offsets.wrapping_add(at / 4);
                let lanes = block_products::<VNNI>(w, magnitudes, x.add(at), offsets, nibbles);
                let products = _mm256_cvtepi32_ps(lanes);
                let scale = if shared_scales {
                    _mm256_broadcast_ss(&combined[m])
                } else {
                    _mm256_mul_ps(d, _mm256_broadcast_ss(&*x_scales.add(m * blocks + b)))
                };
                *sum = _mm256_fmadd_ps(products, scale, *sum);
            }
        }
    }
    for (r, sums) in acc.iter().enumerate() {
        for (m, sum) in sums.iter().enumerate() {
            *job.y.add((first_m + m) * job.out + first_o + r) = sum256(*sum);
        }
    }
}

/// `outputs` of input rows `first_m..first_m + M`, `R` outputs at a time.
#[inline(always)]
unsafe fn outputs_by<const Q4: bool, const VNNI: bool, const R: usize, const M: usize>(
    job: &Job,
    outputs: Range<usize>,
    first_m: usize,
) {
    let mut o = outputs.start;
    while o + R <= outputs.end {
        tile::<Q4, VNNI, R, M>(job, o, first_m);
        o += R;
    }
    for o in o..outputs.end {
        tile::<Q4, VNNI, 1, M>(job, o, first_m);
    }
}

#[inline(always)]
unsafe fn run<const Q4: bool, const VNNI: bool>(job: &Job, outputs: Range<usize>) {
    debug_assert_eq!(GROUP, 32, "a block is one 256-bit vector of bytes");
    if job.rows == 1 {
        return outputs_by::<Q4, VNNI, OUTPUT_BLOCK, 1>(job, outputs, 0);
    }
    if !Q4 {
        // Eight-bit weights need no unpacking, so the tile shares each input block between
        // eight outputs instead: rows in pairs.
        let mut o = outputs.start;
        while o < outputs.end {
            let tile_outputs = o..(o + OUTPUT_BLOCK).min(outputs.end);
            let mut m = 0;
            while m < job.rows {
                match job.rows - m {
                    1 => outputs_by::<Q4, VNNI, OUTPUT_BLOCK, 1>(job, tile_outputs.clone(), m),
                    _ => outputs_by::<Q4, VNNI, OUTPUT_BLOCK, 2>(job, tile_outputs.clone(), m),
                }
                m += 2;
            }
            o = tile_outputs.end;
        }
        return;
    }
    // One output at a time, each block unpacked once for up to eight rows.
    for o in outputs {
        let mut m = 0;
        while m < job.rows {
            let rows = (job.rows - m).min(MAX_TILE_ROWS);
            match rows {
                1 => tile::<Q4, VNNI, 1, 1>(job, o, m),
                2 => tile::<Q4, VNNI, 1, 2>(job, o, m),
                3 => tile::<Q4, VNNI, 1, 3>(job, o, m),
                4 => tile::<Q4, VNNI, 1, 4>(job, o, m),
                5 => tile::<Q4, VNNI, 1, 5>(job, o, m),
                6 => tile::<Q4, VNNI, 1, 6>(job, o, m),
                7 => tile::<Q4, VNNI, 1, 7>(job, o, m),
                _ => tile::<Q4, VNNI, 1, MAX_TILE_ROWS>(job, o, m),
            }
            m += rows;
        }
    }
}

/// # Safety
/// As `Kernel`, and the CPU has AVX2 and FMA.
#[target_feature(enable = "avx2,fma")]
pub unsafe fn avx2_run(job: &Job, outputs: Range<usize>) {
    match job.format {
        QuantFormat::Q8 => run::<false, false>(job, outputs),
        QuantFormat::Q4 => run::<true, false>(job, outputs),
    }
}

/// Whether this CPU has what [`avx512_vnni_run`] needs.
pub fn has_vnni() -> bool {
    is_x86_feature_detected!("avx2")
        && is_x86_feature_detected!("fma")
        && is_x86_feature_detected!("avx512vl")
        && is_x86_feature_detected!("avx512vnni")
}

/// # Safety
/// As `Kernel`, and [`has_vnni`].
#[target_feature(enable = "avx2,fma,avx512vl,avx512vnni")]
pub unsafe fn avx512_vnni_run(job: &Job, outputs: Range<usize>) {
    match job.format {
        QuantFormat::Q8 => run::<false, true>(job, outputs),
        QuantFormat::Q4 => run::<true, true>(job, outputs),
    }
}
