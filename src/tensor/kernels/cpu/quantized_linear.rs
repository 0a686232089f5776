//! Products by weights stored in 8 or 4 bits ([`quantized`]).

use super::linear::{tiled_product, widens_bf16_gemm};
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

/// The rows `ids` (any shape) of a quantized table `[vocab, dim]` (an embedding that is also
/// a tied head), dequantized to f32: `ids`' shape then `dim`. `None` for any other table.
pub(in crate::tensor) fn quantized_embedding(
    table: &tch::Tensor,
    ids: &tch::Tensor,
) -> Option<TchTensor> {
    let format = quantized_format(table)?;
    let rows = table.index_select(0, &ids.flatten(0, -1)).contiguous();
    let values = quantized::dequantize(format, bytes(&rows));
    let mut shape = ids.size();
    shape.push(table.size()[1] * quantized::GROUP as i64);
    Some(TchTensor(tch::Tensor::from_slice(&values).reshape(shape)))
}

/// The bytes of a contiguous CPU tensor of `Uint8`, borrowed for as long as the tensor.
fn bytes(t: &tch::Tensor) -> &[u8] {
    assert!(
        t.is_contiguous() && t.kind() == Kind::Uint8 && t.device() == Device::Cpu,
        "a contiguous CPU tensor of bytes"
    );
    // SAFETY: checked above: `numel` bytes from `data_ptr`, which `t` keeps alive.
    unsafe { std::slice::from_raw_parts(t.data_ptr() as *const u8, t.numel()) }
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
/// and rounded once to `x`'s kind; for more (a prompt), [`prompt_product`].
pub(super) fn quantized_linear(
    x: &tch::Tensor,
    w: &tch::Tensor,
    format: QuantFormat,
) -> tch::Tensor {
    use quantized::GROUP;
    let size = w.size();
    let (out, k) = (size[0], size[1] * GROUP as i64);
    let w = w.contiguous();
    let blocks = bytes(&w);
    let rows = x.numel() / k as usize;
    assert_eq!(
        x.size().last(),
        Some(&k),
        "a product's inputs are the weight's columns"
    );
    let threads = usize::try_from(tch::get_num_threads()).unwrap_or(1);
    if rows > quantized::MAX_ROWS {
        return prompt_product(x, blocks, format, out, threads);
    }
    let inputs = x.to_kind(Kind::Float).contiguous();
    let mut shape = x.size();
    *shape.last_mut().expect("at least one axis") = out;
    let y = tch::Tensor::empty(&shape, (Kind::Float, Device::Cpu));
    // SAFETY: `inputs` and `y` are contiguous f32 CPU tensors of their `numel`, `y` new.
    unsafe {
        let x = std::slice::from_raw_parts(inputs.data_ptr() as *const f32, inputs.numel());
        let y = std::slice::from_raw_parts_mut(y.data_ptr() as *mut f32, y.numel());
        quantized::linear(format, x, blocks, k as usize, y, threads);
    }
    y.to_kind(x.kind())
}

/// A prompt's `x · wᵀ`: bound by its multiply-adds rather than by the weight's bytes, so
/// libtorch's GEMM multiplies, with the weight dequantized (to `x`'s kind, then widened to f32
/// where bf16 GEMMs widen) a tile at a time on all threads. The products are those of the
/// dequantized weight in `x`'s kind, as in
/// [`cpu_linear`](super::linear::cpu_linear) of it.
fn prompt_product(
    x: &tch::Tensor,
    blocks: &[u8],
    format: QuantFormat,
    out: i64,
    threads: usize,
) -> tch::Tensor {
    let k = *x.size().last().expect("at least one axis");
    let bf16 = x.kind() == Kind::BFloat16;
    let gemm_kind = if bf16 && !widens_bf16_gemm() {
        Kind::BFloat16
    } else {
        Kind::Float
    };
    let y = tiled_product(&x.to_kind(gemm_kind), out, |start, rows| {
        let tile = tch::Tensor::empty([rows, k], (Kind::Float, Device::Cpu));
        // SAFETY: `tile` is a new contiguous f32 CPU tensor of `rows * k` values.
        let values =
            unsafe { std::slice::from_raw_parts_mut(tile.data_ptr() as *mut f32, tile.numel()) };
        let range = start as usize..(start + rows) as usize;
        quantized::dequantize_rows(format, blocks, k as usize, range, values, bf16, threads);
        tile.to_kind(gemm_kind)
    });
    y.to_kind(x.kind())
}

#[cfg(test)]
mod tests {
    use super::super::linear::{cpu_linear, WIDEN_TILE_VALUES};
    use super::*;

    /// A prompt (more rows than the kernel takes) gets the product of the dequantized weight
    /// in its own kind, over several tiles and a ragged last one, in bf16 and f32.
    #[test]
    fn prompts_multiply_the_dequantized_weight() {
        let _guard = tch::no_grad_guard();
        let k = 512;
        let out = 2 * (WIDEN_TILE_VALUES / k) as i64 + 5;
        let w = tch::Tensor::randn([out, k as i64], (Kind::Float, Device::Cpu));
        let rows = quantized::MAX_ROWS as i64 + 16;
        for format in QuantFormat::ALL {
            let stored = quantize_weight(&TchTensor(w.shallow_clone()), format).expect("fits");
            let blocks = Vec::<u8>::try_from(stored.0.flatten(0, -1)).expect("bytes");
            let dequantized = tch::Tensor::from_slice(&quantized::dequantize(format, &blocks))
                .reshape([out, k as i64]);
            for (kind, relative) in [(Kind::BFloat16, 1.0 / 128.0), (Kind::Float, 1e-5)] {
                let x = tch::Tensor::randn([2, rows / 2, k as i64], (Kind::Float, Device::Cpu))
                    .to_kind(kind);
                let got = cpu_linear(&x, &stored.0);
                assert_eq!(got.size(), vec![2, rows / 2, out]);
                assert_eq!(got.kind(), kind);
                let weight = dequantized.to_kind(kind).to_kind(Kind::Double);
                let want = x.to_kind(Kind::Double).linear::<tch::Tensor>(&weight, None);
                let err = (got.to_kind(Kind::Double) - &want).abs();
                let worst = (err - (want.abs() * relative + 1e-3))
                    .max()
                    .double_value(&[]);
                assert!(worst <= 0.0, "{format} {kind:?}: {worst} beyond tolerance");
            }
        }
    }

    /// A quantized table's rows, gathered by ids of any shape, are its dequantized values.
    #[test]
    fn a_quantized_table_embeds_its_dequantized_rows() {
        let (vocab, dim) = (10, 64);
        let w = tch::Tensor::randn([vocab, dim], (Kind::Float, Device::Cpu));
        let ids = tch::Tensor::from_slice(&[3i64, 0, 9, 3, 7, 1]).reshape([2, 3]);
        for format in QuantFormat::ALL {
            let table = quantize_weight(&TchTensor(w.shallow_clone()), format).expect("fits");
            let blocks = Vec::<u8>::try_from(table.0.flatten(0, -1)).expect("bytes");
            let values = tch::Tensor::from_slice(&quantized::dequantize(format, &blocks))
                .reshape([vocab, dim]);
            let rows = quantized_embedding(&table.0, &ids).expect("a quantized table");
            assert_eq!(rows.0.size(), vec![2, 3, dim]);
            let want = values
                .index_select(0, &ids.flatten(0, -1))
                .reshape([2, 3, dim]);
            assert!(rows.0.equal(&want), "{format}");
        }
        assert!(quantized_embedding(&w, &ids).is_none(), "a plain table");
    }
}
