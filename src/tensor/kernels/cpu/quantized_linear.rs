//! Products by weights stored in 8 or 4 bits ([`quantized`]).

use super::linear::cpu_linear;
use crate::tensor::kernels::quantized::{self, QuantFormat};
use crate::tensor::tch_backend::TchTensor;
use tch::{Device, Kind};

/// On the CPU, a 2-D weight whose rows are whole blocks; elsewhere nothing (libtorch has
/// no CPU or CUDA product of these layouts).
pub(in crate::tensor) fn quantize_weight(w: &TchTensor, format: QuantFormat) -> Option<TchTensor> {
    use quantized::GROUP;
    let &[out, k] = w.0.size().as_slice() else {
        return None;
    };
    if w.0.device() != Device::Cpu || !QuantFormat::fits(k as usize) {
        return None;
    }
    let values = Vec::<f32>::try_from(w.0.to_kind(Kind::Float).flatten(0, -1)).ok()?;
    let blocks = quantized::quantize(format, &values, k as usize);
    let shape = [out, k / GROUP as i64, format.block_bytes() as i64];
    Some(TchTensor(tch::Tensor::from_slice(&blocks).reshape(shape)))
}

/// The CPU weight `[out, in]` (`shape`) that `blocks` in `format` stand for, kept as they are.
///
/// # Safety
/// As [`Tensor::from_quantized`](crate::tensor::Tensor::from_quantized): the tensor reads
/// `blocks` in place, so they outlive it and are never written.
pub(in crate::tensor) unsafe fn from_blocks(
    blocks: &[u8],
    format: QuantFormat,
    shape: [usize; 2],
) -> TchTensor {
    let stored = format.stored_shape(shape[0], shape[1]);
    let stored: Vec<i64> = stored.iter().map(|&d| d as i64).collect();
    // Zero-copy: the products read the memory-mapped checkpoint directly.
    TchTensor(tch::Tensor::from_blob(
        blocks.as_ptr(),
        &stored,
        &[],
        Kind::Uint8,
        Device::Cpu,
    ))
}

/// The format of a weight stored by `quantize_weight` or `from_quantized` (bytes
/// `[out, in / GROUP, block]`), or `None` for any other weight.
pub(super) fn quantized_format(w: &tch::Tensor) -> Option<QuantFormat> {
    match w.size().as_slice() {
        &[_, _, block] if w.kind() == Kind::Uint8 => QuantFormat::of_block_bytes(block as usize),
        _ => None,
    }
}

/// `x · wᵀ` for a quantized weight `w` on the CPU: the quantized kernel for a few rows, in f32
/// and rounded once to `x`'s kind; for more (a prompt), libtorch's product with the weight
/// dequantized, which is then bound by its multiply-adds rather than by the weight's bytes.
pub(super) fn quantized_linear(
    x: &tch::Tensor,
    w: &tch::Tensor,
    format: QuantFormat,
) -> tch::Tensor {
    use quantized::GROUP;
    let size = w.size();
    let (out, k) = (size[0], size[1] * GROUP as i64);
    let w = w.contiguous();
    // SAFETY: `w` is a contiguous CPU tensor of bytes, `numel` of them.
    let blocks = unsafe { std::slice::from_raw_parts(w.data_ptr() as *const u8, w.numel()) };
    let rows = x.numel() / k as usize;
    assert_eq!(
        x.size().last(),
        Some(&k),
        "a product's inputs are the weight's columns"
    );
    if rows > quantized::MAX_ROWS {
        let dequantized = tch::Tensor::from_slice(&quantized::dequantize(format, blocks))
            .reshape([out, k])
            .to_kind(x.kind());
        return cpu_linear(x, &dequantized);
    }
    let inputs = x.to_kind(Kind::Float).contiguous();
    let mut shape = x.size();
    *shape.last_mut().expect("at least one axis") = out;
    let y = tch::Tensor::empty(&shape, (Kind::Float, Device::Cpu));
    let threads = usize::try_from(tch::get_num_threads()).unwrap_or(1);
    // SAFETY: `inputs` and `y` are contiguous f32 CPU tensors of their `numel`, `y` new.
    unsafe {
        let x = std::slice::from_raw_parts(inputs.data_ptr() as *const f32, inputs.numel());
        let y = std::slice::from_raw_parts_mut(y.data_ptr() as *mut f32, y.numel());
        quantized::linear(format, x, blocks, k as usize, y, threads);
    }
    y.to_kind(x.kind())
}
