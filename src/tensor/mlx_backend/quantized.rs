//! Linear weights in 8 or 4 bits ([`quantized`]) in MLX's own affine form, multiplied by
//! MLX's `quantized_matmul` (Metal's quantized kernels on Apple Silicon).
//!
//! MLX stores a weight `[out, k]` as unsigned values packed into `u32` words along `k`, the
//! first value in the lowest bits, with one scale and one bias per group: weight = scale x `u`
//! + bias. Our blocks map onto it value for value, with groups of [`GROUP`]:
//! - `q8`: `u` = `q` + 128, bias = -128 x scale;
//! - `q4`: `u` = the nibble, bias = -8 x scale.
//!
//! Scales and biases stay bf16 (our scales are bf16, and 8 or 128 times one is exact). In an
//! f32 product MLX widens them: each weight is then exactly the value our blocks stand for.

use crate::tensor::kernels::quantized::{QuantFormat, GROUP};
use mlx_rs::{ops, Array};

/// The per-group scales and biases of a packed weight (the tensor's array holds its values).
#[derive(Clone)]
pub(super) struct Affine {
    pub scales: Array,
    pub biases: Array,
    pub bits: i32,
}

impl Affine {
    /// `part` of the scales and of the biases (the rows of a narrowed weight).
    pub fn map(&self, part: impl Fn(&Array) -> Array) -> Affine {
        Affine {
            scales: part(&self.scales),
            biases: part(&self.biases),
            bits: self.bits,
        }
    }
}

fn bits(format: QuantFormat) -> i32 {
    match format {
        QuantFormat::Q8 => 8,
        QuantFormat::Q4 => 4,
    }
}

/// The weight `[out, k]` that `blocks` (`format`'s layout) stand for, as MLX's packed values
/// `[out, k * bits / 32]` and its scales and biases `[out, k / GROUP]`.
pub(super) fn from_blocks(
    blocks: &[u8],
    format: QuantFormat,
    [out, k]: [usize; 2],
) -> (Array, Affine) {
    let groups = out * k / GROUP;
    assert_eq!(
        blocks.len(),
        groups * format.block_bytes(),
        "a [{out}, {k}] weight in {format}"
    );
    let bits = bits(format);
    let zero = match format {
        QuantFormat::Q8 => -128.0,
        QuantFormat::Q4 => -8.0,
    };
    let mut scales = Vec::with_capacity(groups);
    let mut biases = Vec::with_capacity(groups);
    let mut words = Vec::with_capacity(groups * GROUP * bits as usize / 32);
    for block in blocks.chunks_exact(format.block_bytes()) {
        let scale = half::bf16::from_bits(u16::from_le_bytes([block[0], block[1]]));
        scales.push(scale);
        biases.push(half::bf16::from_f32(zero * scale.to_f32()));
        let values = &block[2..];
        match format {
            QuantFormat::Q8 => words.extend(values.chunks_exact(4).map(|q| {
                u32::from_le_bytes([q[0], q[1], q[2], q[3]].map(|b| (b as i8 as i16 + 128) as u8))
            })),
            QuantFormat::Q4 => {
                let nibble = |i: usize| {
                    let byte = values[i % (GROUP / 2)];
                    u32::from(if i < GROUP / 2 {
                        byte & 0x0F
                    } else {
                        byte >> 4
                    })
                };
                words.extend(
                    (0..GROUP / 8)
                        .map(|w| (0..8).fold(0u32, |word, i| word | nibble(8 * w + i) << (4 * i))),
                );
            }
        }
    }
    let dims = |cols: usize| [out as i32, cols as i32];
    let packed = Array::from_slice(&words, &dims(k * bits as usize / 32));
    let affine = Affine {
        scales: Array::from_slice(&scales, &dims(k / GROUP)),
        biases: Array::from_slice(&biases, &dims(k / GROUP)),
        bits,
    };
    (packed, affine)
}

/// `x · wᵀ` for the packed weight `w`.
pub(super) fn linear(
    x: &Array,
    w: &Array,
    affine: &Affine,
) -> Result<Array, mlx_rs::error::Exception> {
    ops::quantized_matmul(
        x,
        w,
        &affine.scales,
        &affine.biases,
        true,
        GROUP as i32,
        affine.bits,
    )
}

/// The weight's values, in the scales' dtype.
pub(super) fn dequantize(w: &Array, affine: &Affine) -> Result<Array, mlx_rs::error::Exception> {
    ops::dequantize(w, &affine.scales, &affine.biases, GROUP as i32, affine.bits)
}
