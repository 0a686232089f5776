//! `q4` weights multiplied on a CUDA device by libtorch's own int4 product,
//! `_weight_int4pack_mm` (tinygemm: bf16 inputs on tensor cores, Ampere or newer).
//!
//! The values are [`QuantFormat::Q4`]'s, block for block: tinygemm dequantizes a weight as
//! `(q - 8) x scale + zero` per group of 32 inputs, so our scale with a zero of 0 gives the same
//! weight, rounded once to bf16 by its fused multiply-add.
//!
//! A weight `[out, k]` in this form is one `Int` tensor `[5, out, k / 32]` on the device:
//! - its first four planes are libtorch's packed int4 tensor
//!   `[out / 8, k / (inner * 16), 32, inner / 2]` (`inner` k-tiles, 8, 4 or 2: the most `k`
//!   allows), written by `_convert_weight_to_int4pack`;
//! - its fifth plane is the bf16 scales and zeros `[k / 32, out, 2]`.
//!
//! Both parts are views of it, so a product reads the weight in place. Rows go in tiles of 8
//! (`out` a multiple of 8): weights stacked by rows (`cat`) and whole tiles of rows (`narrow`)
//! stay in form; a product of other rows multiplies the tiles that hold them.

use super::quantized::{QuantFormat, GROUP};
use crate::tensor::tch_backend::TchTensor;
use tch::{Device, Kind};

/// Output rows per tile of the packed layout.
const ROW_TILE: i64 = 8;
/// Planes of the form: four of packed values, one of scales.
const PLANES: i64 = 5;

/// Whether this device multiplies int4 weights: CUDA with compute capability 8.0 or more
/// (the product's tensor-core kernel exists only there).
pub(in crate::tensor) fn multiplies_on(device: Device) -> bool {
    let Device::Cuda(index) = device else {
        return false;
    };
    matches!(crate::tensor::cuda_graph::compute_capability(index), Ok((major, _)) if major >= 8)
}

/// `[out, k]` weights that fit the form: whole tiles of rows and of inputs.
fn fits(out: usize, k: usize) -> bool {
    out > 0 && out as i64 % ROW_TILE == 0 && QuantFormat::fits(k)
}

/// The k-tiles of 16 inputs packed together: the widest load `k` allows.
fn inner_k_tiles(k: i64) -> i64 {
    [8, 4, 2]
        .into_iter()
        .find(|tiles| k % (tiles * 16) == 0)
        .expect("k is a multiple of 32")
}

/// The `[out, k]` weight of `q4` `blocks` in this form on `device`, or `None` where the device
/// or the shape does not take it.
pub(in crate::tensor) fn from_blocks(
    device: Device,
    blocks: &[u8],
    format: QuantFormat,
    [out, k]: [usize; 2],
) -> Option<TchTensor> {
    if format != QuantFormat::Q4 || !fits(out, k) || !multiplies_on(device) {
        return None;
    }
    let groups = k / GROUP;
    let block = format.block_bytes();
    assert_eq!(
        blocks.len(),
        out * groups * block,
        "q4 blocks of [{out}, {k}]"
    );
    // libtorch's unpacked int4 rows: input 2i in the high nibble of byte i, 2i + 1 in its low.
    let mut nibbles = vec![0u8; out * k / 2];
    // Scale and zero of every group and row, `[k / 32, out, 2]`, as bf16 bits.
    let mut scales = vec![0i16; groups * out * 2];
    for (row, row_blocks) in blocks.chunks_exact(groups * block).enumerate() {
        for (g, b) in row_blocks.chunks_exact(block).enumerate() {
            scales[(g * out + row) * 2] = i16::from_le_bytes([b[0], b[1]]);
            let q = |i: usize| {
                let byte = b[2 + i % 16];
                if i < 16 {
                    byte & 0x0f
                } else {
                    byte >> 4
                }
            };
            let dst = &mut nibbles[row * k / 2 + g * GROUP / 2..][..GROUP / 2];
            for (i, d) in dst.iter_mut().enumerate() {
                *d = (q(2 * i) << 4) | q(2 * i + 1);
            }
        }
    }
    let (out, k) = (out as i64, k as i64);
    let packed = tch::Tensor::from_slice(&nibbles)
        .reshape([out, k / 2])
        .to_device(device)
        .internal_convert_weight_to_int4pack(inner_k_tiles(k));
    let scales = tch::Tensor::from_slice(&scales).to_device(device);
    Some(TchTensor(join(&packed, &scales, out, k)))
}

/// A dense `[out, k]` weight on a CUDA device quantized to `q4` blocks (the same blocks as on
/// the CPU) in this form; `None` where the format, device or shape does not take it.
pub(in crate::tensor) fn quantize(w: &tch::Tensor, format: QuantFormat) -> Option<TchTensor> {
    let &[out, k] = w.size().as_slice() else {
        return None;
    };
    let (out, k) = (out as usize, k as usize);
    if format != QuantFormat::Q4 || !fits(out, k) || !multiplies_on(w.device()) {
        return None;
    }
    let host = w.to_device(Device::Cpu).to_kind(Kind::Float).flatten(0, -1);
    let values = Vec::<f32>::try_from(host).ok()?;
    let blocks = super::quantized::quantize(format, &values, k);
    from_blocks(w.device(), &blocks, format, [out, k])
}

/// The form from its packed values and its scales (any tensor of their bytes).
fn join(packed: &tch::Tensor, scales: &tch::Tensor, out: i64, k: i64) -> tch::Tensor {
    let plane = [1, out, k / GROUP as i64];
    let scales = scales.contiguous().view_dtype(Kind::Int).reshape(plane);
    tch::Tensor::cat(
        &[packed.reshape([PLANES - 1, plane[1], plane[2]]), scales],
        0,
    )
}

/// `(out, k / 32)` of a weight in this form, or `None` for any other tensor: no tensor made
/// (every product on CUDA, and every `narrow` and `cat` of dimension 0, asks).
fn form_size(w: &tch::Tensor) -> Option<(i64, i64)> {
    // The cheap checks first.
    if w.kind() != Kind::Int || w.dim() != 3 || w.device() == Device::Cpu {
        return None;
    }
    match w.size().as_slice() {
        &[PLANES, out, groups] => Some((out, groups)),
        _ => None,
    }
}

/// The packed values and the scales of a weight in this form: views, nothing copied.
fn parts(w: &tch::Tensor) -> Option<(tch::Tensor, tch::Tensor)> {
    let (out, groups) = form_size(w)?;
    let k = groups * GROUP as i64;
    let inner = inner_k_tiles(k);
    let packed =
        w.narrow(0, 0, PLANES - 1)
            .reshape([out / ROW_TILE, k / (inner * 16), 32, inner / 2]);
    let scales = w
        .select(0, PLANES - 1)
        .view_dtype(Kind::BFloat16)
        .reshape([groups, out, 2]);
    Some((packed, scales))
}

/// A weight's output rows, where it is in this form.
pub(in crate::tensor) fn outputs(w: &tch::Tensor) -> Option<i64> {
    form_size(w).map(|(out, _)| out)
}

/// `x · wᵀ` where `w` is in this form: `x`'s rows in bf16 (the product's input type), the
/// result in `x`'s kind.
pub(in crate::tensor) fn linear(x: &tch::Tensor, w: &tch::Tensor) -> Option<tch::Tensor> {
    let (packed, scales) = parts(w)?;
    Some(product(x, &packed, &scales))
}

/// `x` times rows `start..start + len` of `w`, where `w` is in this form: the whole tiles of
/// rows that hold them multiplied (their packed values read in place, their scales copied),
/// the other outputs dropped.
pub(in crate::tensor) fn linear_rows(
    x: &tch::Tensor,
    w: &tch::Tensor,
    start: i64,
    len: i64,
) -> Option<tch::Tensor> {
    let (packed, scales) = parts(w)?;
    let first = start / ROW_TILE * ROW_TILE;
    let end = (start + len + ROW_TILE - 1) / ROW_TILE * ROW_TILE;
    let packed = packed.narrow(0, first / ROW_TILE, (end - first) / ROW_TILE);
    let scales = scales.narrow(1, first, end - first).contiguous();
    let y = product(x, &packed, &scales);
    Some(if (first, end) == (start, start + len) {
        y
    } else {
        y.narrow(-1, start - first, len)
    })
}

fn product(x: &tch::Tensor, packed: &tch::Tensor, scales: &tch::Tensor) -> tch::Tensor {
    let [groups, out, _] = scales.size()[..] else {
        unreachable!("scales are [k / 32, out, 2]")
    };
    let k = groups * GROUP as i64;
    assert_eq!(
        x.size().last(),
        Some(&k),
        "a product's inputs are the weight's columns"
    );
    let rows = x.reshape([-1, k]).to_kind(Kind::BFloat16).contiguous();
    let y = rows.internal_weight_int4pack_mm(packed, GROUP as i64, scales);
    let mut shape = x.size();
    *shape.last_mut().expect("at least one axis") = out;
    y.reshape(shape).to_kind(x.kind())
}

/// Rows `start..start + len` of a weight in this form, in form: whole tiles of 8 rows (a
/// product of other rows goes through [`linear_rows`]).
pub(in crate::tensor) fn narrow_rows(w: &tch::Tensor, start: i64, len: i64) -> Option<tch::Tensor> {
    let (packed, scales) = parts(w)?;
    assert!(
        start % ROW_TILE == 0 && len % ROW_TILE == 0,
        "rows {start}..{} of an int4 CUDA weight: whole tiles of {ROW_TILE} rows only",
        start + len
    );
    let k = w.size()[2] * GROUP as i64;
    let packed = packed.narrow(0, start / ROW_TILE, len / ROW_TILE);
    Some(join(&packed, &scales.narrow(1, start, len), len, k))
}

/// The weights `parts` stacked by rows (`cat` on dimension 0), in form, where all are in it.
pub(in crate::tensor) fn cat_rows(weights: &[&tch::Tensor]) -> Option<tch::Tensor> {
    let split: Vec<_> = weights.iter().map(|w| parts(w)).collect::<Option<_>>()?;
    let k = weights[0].size()[2] * GROUP as i64;
    let out = weights.iter().map(|w| w.size()[1]).sum();
    let packed: Vec<&tch::Tensor> = split.iter().map(|(p, _)| p).collect();
    let scales: Vec<&tch::Tensor> = split.iter().map(|(_, s)| s).collect();
    Some(join(
        &tch::Tensor::cat(&packed, 0),
        &tch::Tensor::cat(&scales, 1),
        out,
        k,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tensor::kernels::quantized;

    /// A `[out, k]` weight's q4 blocks and its dequantized values `[out, k]` (f64, CPU).
    fn q4_weight(out: i64, k: i64, seed: i64) -> (Vec<u8>, tch::Tensor) {
        tch::manual_seed(seed);
        let w = tch::Tensor::randn([out, k], (Kind::Float, Device::Cpu));
        let values = Vec::<f32>::try_from(w.flatten(0, -1)).unwrap();
        let blocks = quantized::quantize(QuantFormat::Q4, &values, k as usize);
        let dequantized = quantized::dequantize(QuantFormat::Q4, &blocks);
        let dense = tch::Tensor::from_slice(&dequantized).reshape([out, k]);
        (blocks, dense.to_kind(Kind::Double))
    }

    /// `got` (a product on the device) against `x · wᵀ` in f64 on the CPU, within what bf16
    /// inputs and weights allow.
    fn assert_product(got: &tch::Tensor, x: &tch::Tensor, w: &tch::Tensor, what: &str) {
        let x = x
            .to_device(Device::Cpu)
            .to_kind(Kind::BFloat16)
            .to_kind(Kind::Double);
        let want = x.matmul(&w.tr());
        let got = got.to_device(Device::Cpu).to_kind(Kind::Double);
        assert_eq!(got.size(), want.size(), "{what}");
        // Each weight rounded once to bf16, each output rounded to bf16: a relative 2^-8 of
        // the sum of the products' magnitudes, and of the output.
        let bound = x.abs().matmul(&w.abs().tr()) / 128.0 + want.abs() / 128.0;
        let worst = ((got - &want).abs() - bound).max().double_value(&[]);
        assert!(worst <= 0.0, "{what}: {worst} beyond bf16's rounding");
    }

    /// On a CUDA device: q4 blocks in the int4 form multiply as the q4 weight's values, for
    /// every inner tiling of `k`; their rows (`linear_rows`, `narrow`) and a weight stacked
    /// from parts (`cat`) are the same weights' products; a dense weight quantized on the
    /// device is the form of the CPU's blocks.
    #[test]
    #[ignore = "needs a CUDA device of compute capability 8.0 or more (make test-cuda)"]
    fn int4_products_on_cuda_are_the_q4_weights_products() {
        let _guard = tch::no_grad_guard();
        let device = Device::Cuda(0);
        assert!(multiplies_on(device), "this device runs no int4 products");
        // k = 256, 64, 96: 8, 4 and 2 k-tiles packed together.
        for (out, k) in [(48, 256), (24, 64), (16, 96)] {
            let (blocks, w) = q4_weight(out, k, out + k);
            let stored = from_blocks(device, &blocks, QuantFormat::Q4, [out as usize, k as usize])
                .expect("a weight that fits the form");
            assert_eq!(outputs(&stored.0), Some(out));
            for rows in [1, 5, 17] {
                let x = tch::Tensor::randn([rows, k], (Kind::Float, device));
                let what = format!("[{out}, {k}] by {rows} rows");
                assert_product(&linear(&x, &stored.0).unwrap(), &x, &w, &what);
                for (start, len) in [(8, 8), (3, 11)] {
                    let y = linear_rows(&x, &stored.0, start, len).unwrap();
                    let part = w.narrow(0, start, len);
                    assert_product(&y, &x, &part, &format!("{what}, rows {start} + {len}"));
                }
                let narrowed = narrow_rows(&stored.0, 8, out - 8).unwrap();
                let y = linear(&x, &narrowed).unwrap();
                assert_product(
                    &y,
                    &x,
                    &w.narrow(0, 8, out - 8),
                    &format!("{what}, narrowed"),
                );
            }
            let batch = tch::Tensor::randn([2, 3, k], (Kind::BFloat16, device));
            let y = linear(&batch, &stored.0).unwrap();
            assert_eq!((y.size(), y.kind()), (vec![2, 3, out], Kind::BFloat16));
            assert_product(&y.reshape([6, out]), &batch.reshape([6, k]), &w, "a batch");
            let (other_blocks, other) = q4_weight(16, k, 7);
            let second = from_blocks(device, &other_blocks, QuantFormat::Q4, [16, k as usize]);
            let stacked = cat_rows(&[&stored.0, &second.unwrap().0]).unwrap();
            let x = tch::Tensor::randn([3, k], (Kind::Float, device));
            let both = tch::Tensor::cat(&[&w, &other], 0);
            assert_product(&linear(&x, &stacked).unwrap(), &x, &both, "stacked");
            let dense = w.to_kind(Kind::Float).to_device(device);
            let quantized = quantize(&dense, QuantFormat::Q4).expect("fits");
            assert!(
                quantized.0.equal(&stored.0),
                "[{out}, {k}] quantized on the device"
            );
        }
        let (blocks, _) = q4_weight(12, 64, 1);
        let shape = [12, 64];
        assert!(
            from_blocks(device, &blocks, QuantFormat::Q4, shape).is_none(),
            "12 rows"
        );
        assert!(
            from_blocks(Device::Cpu, &blocks, QuantFormat::Q4, shape).is_none(),
            "CPU"
        );
    }
}
