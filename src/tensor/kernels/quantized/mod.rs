//! Linear weights stored in 8 or 4 bits, and the CPU's products of a few rows by them.
//!
//! A decode step reads every weight once per step, so on a CPU its time is the weights' bytes
//! over the memory bandwidth: bf16 is 2 bytes per weight, [`QuantFormat::Q8`] 1.06 and
//! [`QuantFormat::Q4`] 0.56. The layouts are llama.cpp's `Q8_0` and `Q4_0` in spirit (blocks
//! of 32 weights along the input axis, each with one scale, symmetric), with a bf16 scale
//! rounded up in magnitude so that no value clips. Products quantize their input rows the same
//! way (signed bytes, an f32 scale per block of 32), so that each block's 32 products are
//! integers: exact in any order, at any vector width. Each output is then summed over the
//! blocks in f32 in one fixed order, so every variant gives the same bits, and a request's
//! result does not depend on its batch.
//!
//! Layout of a weight `[out, k]` (`k` a multiple of [`GROUP`]): `[out, k / 32, block]` bytes,
//! each block its scale (bf16, little-endian) then its values:
//! - `Q8` (34 bytes): 32 signed bytes, weight `i` = scale x `q[i]`.
//! - `Q4` (18 bytes): 16 bytes; byte `j` holds weight `j` in its low nibble and weight `j + 16`
//!   in its high one, each `q` in 0..=15, weight = scale x (`q` - 8).

#[cfg(test)]
mod tests;
#[cfg(target_arch = "x86_64")]
mod x86;

use super::cpu_gemv::Variant;
use std::fmt;
use std::ops::Range;
use std::str::FromStr;

/// Weights per block (and per scale).
pub const GROUP: usize = 32;

/// How a model's large linear weights are stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum QuantFormat {
    /// 8-bit integers, one bf16 scale per 32: 8.5 bits per weight.
    Q8,
    /// 4-bit integers, one bf16 scale per 32: 4.5 bits per weight.
    Q4,
}

impl QuantFormat {
    pub const ALL: [QuantFormat; 2] = [QuantFormat::Q8, QuantFormat::Q4];

    /// The name the CLI, the config, `/v1/models` and a quantized checkpoint's metadata use.
    pub fn name(self) -> &'static str {
        match self {
            QuantFormat::Q8 => "q8",
            QuantFormat::Q4 => "q4",
        }
    }

    /// Bytes of one block of [`GROUP`] weights.
    pub fn block_bytes(self) -> usize {
        match self {
            QuantFormat::Q8 => 2 + GROUP,
            QuantFormat::Q4 => 2 + GROUP / 2,
        }
    }

    /// The format whose blocks take `bytes`.
    pub fn of_block_bytes(bytes: usize) -> Option<QuantFormat> {
        QuantFormat::ALL
            .into_iter()
            .find(|f| f.block_bytes() == bytes)
    }

    /// Bytes of a `[out, k]` weight.
    pub fn bytes(self, out: usize, k: usize) -> usize {
        out * k / GROUP * self.block_bytes()
    }

    /// The stored shape of a `[out, k]` weight.
    pub fn stored_shape(self, out: usize, k: usize) -> [usize; 3] {
        [out, k / GROUP, self.block_bytes()]
    }

    /// Whether a `[out, k]` weight can be stored in this format.
    pub fn fits(k: usize) -> bool {
        k > 0 && k.is_multiple_of(GROUP)
    }
}

impl fmt::Display for QuantFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for QuantFormat {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        QuantFormat::ALL
            .into_iter()
            .find(|f| f.name() == s)
            .ok_or_else(|| format!("unknown weight format {s:?} (none, q8, q4)"))
    }
}

/// `none`, `q8` or `q4`: what `--quantize` and the config's `quantize` take.
pub fn parse_quantize(s: &str) -> Result<Option<QuantFormat>, String> {
    match s {
        "none" => Ok(None),
        other => other.parse().map(Some),
    }
}

/// The bf16 whose magnitude is the nearest at or above `|x|`, with `x`'s sign: a scale that
/// never makes a block's largest value clip.
fn bf16_up(x: f32) -> u16 {
    let bits = x.to_bits();
    let kept = bits >> 16;
    // Any dropped bit rounds the magnitude up (the sign is in the kept half).
    let rounded = if bits & 0xFFFF != 0 { kept + 1 } else { kept };
    rounded as u16
}

fn bf16_to_f32(bits: u16) -> f32 {
    f32::from_bits(u32::from(bits) << 16)
}

/// One block of [`GROUP`] weights in `format`, written to `block`.
fn quantize_block(format: QuantFormat, w: &[f32], block: &mut [u8]) {
    let (scale_bytes, values) = block.split_at_mut(2);
    match format {
        QuantFormat::Q8 => {
            let max = w.iter().fold(0f32, |m, v| m.max(v.abs()));
            let scale = bf16_up(max / 127.0);
            let d = bf16_to_f32(scale);
            let inverse = if d == 0.0 { 0.0 } else { 1.0 / d };
            scale_bytes.copy_from_slice(&scale.to_le_bytes());
            for (q, v) in values.iter_mut().zip(w) {
                *q = (v * inverse).round().clamp(-127.0, 127.0) as i8 as u8;
            }
        }
        QuantFormat::Q4 => {
            // The value of largest magnitude maps to -8, so the others fall in -8..=8 (8 only
            // for its opposite, clipped to 7).
            let extreme = w
                .iter()
                .fold(0f32, |m, &v| if v.abs() > m.abs() { v } else { m });
            let scale = bf16_up(extreme / -8.0);
            let d = bf16_to_f32(scale);
            let inverse = if d == 0.0 { 0.0 } else { 1.0 / d };
            scale_bytes.copy_from_slice(&scale.to_le_bytes());
            let q = |v: f32| ((v * inverse).round() + 8.0).clamp(0.0, 15.0) as u8;
            let half = GROUP / 2;
            for (j, byte) in values.iter_mut().enumerate() {
                *byte = q(w[j]) | (q(w[j + half]) << 4);
            }
        }
    }
}

/// A `[out, k]` weight (row-major) in `format`'s layout.
///
/// # Panics
/// When `k` is not a multiple of [`GROUP`] or the length is not `out * k`.
pub fn quantize(format: QuantFormat, w: &[f32], k: usize) -> Vec<u8> {
    assert!(
        QuantFormat::fits(k) && w.len().is_multiple_of(k),
        "a quantized weight's rows are whole blocks of {GROUP}"
    );
    let blocks = w.len() / GROUP;
    let mut out = vec![0u8; blocks * format.block_bytes()];
    for (values, block) in w
        .chunks_exact(GROUP)
        .zip(out.chunks_exact_mut(format.block_bytes()))
    {
        quantize_block(format, values, block);
    }
    out
}

/// The weights `blocks` (whole blocks of `format`) stand for, in order.
pub fn dequantize(format: QuantFormat, blocks: &[u8]) -> Vec<f32> {
    let mut out = vec![0f32; blocks.len() / format.block_bytes() * GROUP];
    dequantize_blocks(format, blocks, &mut out, false);
    out
}

/// `blocks` dequantized into `out` (`GROUP` values per block), each value rounded to the
/// nearest bf16 when `to_bf16`. A block's values `scale x q` are exact in f32.
fn dequantize_blocks(format: QuantFormat, blocks: &[u8], out: &mut [f32], to_bf16: bool) {
    let round = |v: f32| if to_bf16 { round_to_bf16(v) } else { v };
    for (block, out) in blocks
        .chunks_exact(format.block_bytes())
        .zip(out.chunks_exact_mut(GROUP))
    {
        let d = bf16_to_f32(u16::from_le_bytes([block[0], block[1]]));
        let values = &block[2..];
        match format {
            QuantFormat::Q8 => {
                for (v, &q) in out.iter_mut().zip(values) {
                    *v = round(d * f32::from(q as i8));
                }
            }
            QuantFormat::Q4 => {
                let (low, high) = out.split_at_mut(GROUP / 2);
                for ((lo, hi), &b) in low.iter_mut().zip(high).zip(values) {
                    *lo = round(d * (f32::from(b & 0x0F) - 8.0));
                    *hi = round(d * (f32::from(b >> 4) - 8.0));
                }
            }
        }
    }
}

/// `x` rounded to the nearest bf16, ties to even, kept in f32 (as libtorch rounds a finite
/// value); integer operations only, so that the loops above vectorize.
#[inline(always)]
fn round_to_bf16(x: f32) -> f32 {
    let bits = x.to_bits();
    let rounded = bits.wrapping_add(0x7FFF + ((bits >> 16) & 1));
    f32::from_bits(rounded & 0xFFFF_0000)
}

/// Weight rows `rows` of `blocks` (a `[out, k]` weight in `format`) dequantized into `tile`
/// (`rows.len() * k` f32, row-major), each value rounded to the nearest bf16 when `to_bf16`,
/// on `threads` OpenMP threads: a prompt's product widens its weight a tile at a time.
///
/// # Panics
/// When `tile` is not `rows.len() * k` long or the rows are not within `blocks`.
pub fn dequantize_rows(
    format: QuantFormat,
    blocks: &[u8],
    k: usize,
    rows: Range<usize>,
    tile: &mut [f32],
    to_bf16: bool,
    threads: usize,
) {
    let row_bytes = format.bytes(1, k);
    let blocks = &blocks[rows.start * row_bytes..rows.end * row_bytes];
    assert_eq!(tile.len(), rows.len() * k, "tile length");
    let tile = tile.as_mut_ptr();
    let threads = if blocks.len() >= PARALLEL_MIN_BYTES {
        threads
    } else {
        1
    };
    // SAFETY: each thread reads its own rows of `blocks` and writes the same rows of `tile`,
    // which `share` keeps within `0..rows.len()` and is borrowed mutably for the call.
    unsafe {
        super::cpu_gemv::openmp::run_shares(rows.len(), 1, threads, &|share| {
            let values = std::slice::from_raw_parts_mut(tile.add(share.start * k), share.len() * k);
            let share_blocks = &blocks[share.start * row_bytes..share.end * row_bytes];
            dequantize_blocks(format, share_blocks, values, to_bf16);
        })
    }
}

/// Input rows one call of a variant's kernel takes at most.
pub const MAX_ROWS: usize = 64;

/// Weights smaller than this run on the calling thread.
const PARALLEL_MIN_BYTES: usize = 256 << 10;

/// Outputs per thread's share are a multiple of this: the x86 kernel's tile of one row.
const OUTPUT_BLOCK: usize = 8;

/// One variant's kernel: outputs `outputs` of every input row.
type Kernel = unsafe fn(&Job, Range<usize>);

/// The kernel for `variant`: the AVX-512 variants multiply bytes with VNNI where the CPU has
/// it. The byte products are the same integers whatever the instructions.
fn kernel(variant: Variant) -> Kernel {
    match variant {
        Variant::Portable => portable_run,
        #[cfg(target_arch = "x86_64")]
        Variant::Avx2Fma => x86::avx2_run,
        #[cfg(target_arch = "x86_64")]
        _ if x86::has_vnni() => x86::avx512_vnni_run,
        #[cfg(target_arch = "x86_64")]
        _ => x86::avx2_run,
        #[cfg(not(target_arch = "x86_64"))]
        _ => unreachable!("only the portable variant is supported here"),
    }
}

/// The input rows as the kernels read them: each block of 32 values as signed bytes with one
/// f32 scale (llama.cpp's `Q8_0` activations), so that a block's products are integers,
/// exact in any order.
struct Inputs {
    values: Vec<i8>,
    scales: Vec<f32>,
}

impl Inputs {
    /// The scales `[blocks][rows]`, and 8 zeros after, so that a tile reads eight rows'
    /// scales of a block at once from any row.
    fn scales_by_block(&self, blocks: usize, rows: usize) -> Vec<f32> {
        let mut by_block = vec![0f32; blocks * rows + 8];
        for (i, &scale) in self.scales.iter().enumerate() {
            by_block[(i % blocks) * rows + i / blocks] = scale;
        }
        by_block
    }

    /// For each block of `values`, minus eight times the sum of each lane's four values:
    /// what multiplying by `q4`'s stored nibbles (`q + 8`) adds to each lane of the products,
    /// negated, so that a kernel may multiply the nibbles as they are and add this.
    fn nibble_offsets(&self) -> Vec<i32> {
        self.values
            .chunks_exact(4)
            .map(|four| -8 * four.iter().map(|&v| i32::from(v)).sum::<i32>())
            .collect()
    }
}

fn quantize_inputs(x: &[f32]) -> Inputs {
    let mut values = vec![0i8; x.len()];
    let scales = x
        .chunks_exact(GROUP)
        .zip(values.chunks_exact_mut(GROUP))
        .map(|(block, q)| {
            let max = block.iter().fold(0f32, |m, v| m.max(v.abs()));
            let scale = max / 127.0;
            let inverse = if scale == 0.0 { 0.0 } else { 1.0 / scale };
            for (q, v) in q.iter_mut().zip(block) {
                *q = (v * inverse).round().clamp(-127.0, 127.0) as i8;
            }
            scale
        })
        .collect();
    Inputs { values, scales }
}

/// One product, shared by the threads that compute it.
pub struct Job {
    format: QuantFormat,
    /// `rows * k` signed bytes.
    x: *const i8,
    /// `rows * k / 32` scales.
    x_scales: *const f32,
    /// The scales again ([`Inputs::scales_by_block`]) when more than two rows come (only
    /// tiles of more than two rows read them); else empty.
    x_scales_by_block: *const f32,
    /// `rows * k / 4` lanes' offsets for `q4` ([`Inputs::nibble_offsets`]); empty for `q8`.
    x_offsets: *const i32,
    w: *const u8,
    y: *mut f32,
    k: usize,
    rows: usize,
    out: usize,
    run: Kernel,
}

impl Job {
    fn blocks(&self) -> usize {
        self.k / GROUP
    }

    /// The first byte of output `o`'s blocks.
    ///
    /// # Safety
    /// `o < out`.
    unsafe fn weight_row(&self, o: usize) -> *const u8 {
        self.w.add(o * self.blocks() * self.format.block_bytes())
    }

    /// Block `b` of input row `m`: its 32 bytes and its scale.
    ///
    /// # Safety
    /// `m < rows`, `b < blocks`.
    unsafe fn input_block(&self, m: usize, b: usize) -> (*const i8, f32) {
        let at = m * self.blocks() + b;
        (self.x.add(at * GROUP), *self.x_scales.add(at))
    }
}

/// The scale of a weight block (bf16, little-endian, its first two bytes).
///
/// # Safety
/// `block` points to a block.
#[inline(always)]
unsafe fn block_scale(block: *const u8) -> f32 {
    bf16_to_f32(u16::from_le_bytes([*block, *block.add(1)]))
}

/// `y[m][o] = sum_k x[m][k] * w[o][k]` with `w` in `format`'s layout (`out * k / 32` blocks),
/// `x` f32 (`rows * k`), `y` f32 (`rows * out`), with the active variant on `threads` OpenMP
/// threads. The inputs are quantized per block of 32 to signed bytes with an f32 scale, each
/// block's 32 products summed as integers (exact), and each output summed over the blocks in
/// f32, in eight lanes (four products each) then across them, in the same order in every
/// variant: the same bits whatever the variant, the rows or the threads.
///
/// # Panics
/// When the lengths disagree or `rows` exceeds [`MAX_ROWS`].
pub fn linear(format: QuantFormat, x: &[f32], w: &[u8], k: usize, y: &mut [f32], threads: usize) {
    linear_with(Variant::active(), format, x, w, k, y, threads)
}

/// [`linear`] with a given variant.
///
/// # Panics
/// As [`linear`], and when the CPU lacks the variant's instructions.
pub fn linear_with(
    variant: Variant,
    format: QuantFormat,
    x: &[f32],
    w: &[u8],
    k: usize,
    y: &mut [f32],
    threads: usize,
) {
    variant.assert_supported();
    let row_bytes = format.bytes(1, k);
    assert!(
        QuantFormat::fits(k) && x.len().is_multiple_of(k) && w.len().is_multiple_of(row_bytes),
        "shapes disagree"
    );
    let (rows, out) = (x.len() / k, w.len() / row_bytes);
    assert!(rows <= MAX_ROWS, "{rows} rows: more than {MAX_ROWS}");
    assert_eq!(y.len(), rows * out, "output length");
    let inputs = quantize_inputs(x);
    let by_block = if rows > 2 {
        inputs.scales_by_block(k / GROUP, rows)
    } else {
        Vec::new()
    };
    let offsets = match format {
        QuantFormat::Q4 => inputs.nibble_offsets(),
        QuantFormat::Q8 => Vec::new(),
    };
    let job = Job {
        format,
        x: inputs.values.as_ptr(),
        x_scales: inputs.scales.as_ptr(),
        x_offsets: offsets.as_ptr(),
        x_scales_by_block: by_block.as_ptr(),
        w: w.as_ptr(),
        y: y.as_mut_ptr(),
        k,
        rows,
        out,
        run: kernel(variant),
    };
    let parallel = threads > 1 && w.len() >= PARALLEL_MIN_BYTES;
    // SAFETY: the lengths were checked above, `y` is borrowed mutably for the call, the
    // variant is supported, and each thread computes a different range of outputs, so no
    // output is written twice.
    unsafe {
        super::cpu_gemv::openmp::run_shares(
            out,
            OUTPUT_BLOCK,
            if parallel { threads } else { 1 },
            &|outputs| (job.run)(&job, outputs),
        )
    }
}

/// Lanes of the f32 sums: lane `j` of a block takes its products `4j..4j + 4`.
const LANES: usize = 8;

/// The portable kernel: plain Rust in the x86 kernel's order.
///
/// # Safety
/// As [`Kernel`]: the job's pointers cover its lengths and `outputs` is within `0..out`.
unsafe fn portable_run(job: &Job, outputs: Range<usize>) {
    let bytes = job.format.block_bytes();
    let mut weights = [0i8; GROUP];
    for o in outputs {
        let row = job.weight_row(o);
        for m in 0..job.rows {
            let mut acc = [0f32; LANES];
            for b in 0..job.blocks() {
                let block = row.add(b * bytes);
                block_values(job.format, block, &mut weights);
                let (x, x_scale) = job.input_block(m, b);
                let x = std::slice::from_raw_parts(x, GROUP);
                let scale = block_scale(block) * x_scale;
                for (lane, sum) in acc.iter_mut().enumerate() {
                    let products: i32 = (4 * lane..4 * lane + 4)
                        .map(|i| i32::from(weights[i]) * i32::from(x[i]))
                        .sum();
                    *sum = (products as f32).mul_add(scale, *sum);
                }
            }
            *job.y.add(m * job.out + o) = sum_lanes(&acc);
        }
    }
}

/// A weight block's 32 values as signed integers.
///
/// # Safety
/// `block` points to a block of `format`.
unsafe fn block_values(format: QuantFormat, block: *const u8, values: &mut [i8; GROUP]) {
    let stored = std::slice::from_raw_parts(block.add(2), format.block_bytes() - 2);
    match format {
        QuantFormat::Q8 => {
            for (v, &q) in values.iter_mut().zip(stored) {
                *v = q as i8;
            }
        }
        QuantFormat::Q4 => {
            let (low, high) = values.split_at_mut(GROUP / 2);
            for ((lo, hi), &b) in low.iter_mut().zip(high).zip(stored) {
                *lo = (b & 0x0F) as i8 - 8;
                *hi = (b >> 4) as i8 - 8;
            }
        }
    }
}

/// The eight lanes added as the x86 kernel adds them: halves, quarters, the last pair.
fn sum_lanes(v: &[f32; LANES]) -> f32 {
    let half: [f32; 4] = std::array::from_fn(|i| v[i] + v[i + 4]);
    let quarter = [half[0] + half[2], half[1] + half[3]];
    quarter[0] + quarter[1]
}
