//! Products on the CPU: which kernel multiplies, and the counts `bench` reads.

use super::packed_linear::{packed_linear, packed_outputs};
use super::quantized_linear::{quantized_format, quantized_linear};
use crate::tensor::kernels::{cpu_gemv, quantized};
use crate::tensor::profile;
use crate::tensor::tch_backend::TchTensor;
use crate::tensor::Fused;
use tch::{Device, Kind};

/// `x @ weight.T` for CPU tensors, its multiply-adds counted and its time filed by its rows.
pub(in crate::tensor) fn linear(x: &TchTensor, weight: &TchTensor) -> TchTensor {
    timed_cpu_product(x.0.numel(), weight, || Some(cpu_linear(&x.0, &weight.0)))
        .expect("a CPU product")
}

/// `x @ w.T` through [`cpu_gemv`] when it applies: bf16 or f32 on the CPU, a
/// contiguous `[out, in]` weight and at most `MAX_ROWS` input rows (a decode step, not a
/// prefill).
fn few_rows_linear(x: &tch::Tensor, w: &tch::Tensor) -> Option<tch::Tensor> {
    use cpu_gemv::Element;
    use half::bf16;

    fn run<E: Element>(x: &tch::Tensor, w: &tch::Tensor, kind: Kind) -> Option<tch::Tensor> {
        let on_cpu = |t: &tch::Tensor| t.device() == Device::Cpu && t.kind() == kind;
        if !(on_cpu(x) && on_cpu(w) && w.is_contiguous()) {
            return None;
        }
        let (shape, w_shape) = (x.size(), w.size());
        let k = *shape.last()?;
        let &[out, w_in] = w_shape.as_slice() else {
            return None;
        };
        let rows = x.numel() / usize::try_from(k).ok()?.max(1);
        if w_in != k || k == 0 || out == 0 || rows == 0 || rows > cpu_gemv::MAX_ROWS {
            return None;
        }
        // SAFETY: `w` is a contiguous CPU tensor of `E`'s kind with `out * k` values.
        Some(unsafe { few_rows_product::<E>(x, w, out as usize, kind) })
    }

    match x.kind() {
        Kind::BFloat16 => run::<bf16>(x, w, Kind::BFloat16),
        Kind::Float => run::<f32>(x, w, Kind::Float),
        _ => None,
    }
}

/// `x · wᵀ` on the CPU: a quantized or packed weight's kernel, the few-row kernel, widened
/// bf16, or libtorch's product, the first that takes it.
pub(super) fn cpu_linear(x: &tch::Tensor, w: &tch::Tensor) -> tch::Tensor {
    if let Some(format) = quantized_format(w) {
        return quantized_linear(x, w, format);
    }
    let plain = Fused {
        gated: false,
        residual: None,
    };
    packed_linear(x, w, plain)
        .or_else(|| few_rows_linear(x, w))
        .or_else(|| widens_bf16_gemm().then(|| widened_linear(x, w)).flatten())
        .unwrap_or_else(|| x.linear::<tch::Tensor>(w, None))
}

/// The multiply-adds of a product of `inputs` values by `weight` (packed, quantized or not).
pub(in crate::tensor) fn multiply_adds(inputs: usize, weight: &TchTensor) -> u64 {
    let out = packed_outputs(&weight.0)
        .or_else(|| super::super::cuda_int4::outputs(&weight.0))
        .or_else(|| weight.0.size().first().copied())
        .unwrap_or(0);
    inputs as u64 * out.max(0) as u64
}

/// The inputs of each output of `weight` (packed, quantized or not).
fn weight_columns(weight: &tch::Tensor) -> i64 {
    let size = weight.size();
    match quantized_format(weight) {
        Some(_) => size[1] * quantized::GROUP as i64,
        None => size.get(1).copied().unwrap_or(1),
    }
}

/// `product`, a CPU product of `inputs` values by `weight`, where it is made: its multiply-adds
/// counted, and it timed by its rows.
pub(super) fn timed_cpu_product(
    inputs: usize,
    weight: &TchTensor,
    product: impl FnOnce() -> Option<tch::Tensor>,
) -> Option<TchTensor> {
    let started = std::time::Instant::now();
    let y = product()?;
    let multiply_adds = multiply_adds(inputs, weight);
    profile::count_multiply_adds(multiply_adds);
    let k = weight_columns(&weight.0).max(1);
    profile::count_timed_product(inputs / k as usize, multiply_adds, started.elapsed());
    Some(TchTensor(y))
}

/// [`cpu_gemv::linear`] on the values of CPU tensors: `x` `[.., k]` of `kind` (made
/// contiguous here), the result `y` of `x`'s shape with `out` last, on libtorch's thread
/// count.
///
/// # Safety
/// `w` is a contiguous CPU tensor of `E`'s kind holding `out * k` values, and `x` is a CPU
/// tensor of `E`'s kind (`kind`).
unsafe fn few_rows_product<E: cpu_gemv::Element>(
    x: &tch::Tensor,
    w: &tch::Tensor,
    out: usize,
    kind: Kind,
) -> tch::Tensor {
    let x = x.contiguous();
    let mut shape = x.size();
    let k = shape.last().map_or(0, |&k| k as usize);
    let rows = x.numel() / k.max(1);
    *shape.last_mut().expect("at least one axis") = out as i64;
    let y = tch::Tensor::empty(&shape, (kind, Device::Cpu));
    // `x` and `y` are contiguous CPU tensors of exactly these lengths, `y` is new and not
    // shared, and `x` and `w` outlive the call.
    let x = std::slice::from_raw_parts(x.data_ptr() as *const E, rows * k);
    let w = std::slice::from_raw_parts(w.data_ptr() as *const E, out * k);
    let y_values = std::slice::from_raw_parts_mut(y.data_ptr() as *mut E, rows * out);
    let threads = usize::try_from(tch::get_num_threads()).unwrap_or(1);
    cpu_gemv::linear(x, w, k, y_values, threads);
    y
}

/// Weight values widened to f32 at a time by [`widened_linear`] (4 MiB of f32).
pub(super) const WIDEN_TILE_VALUES: usize = 1 << 20;

/// Whether bf16 GEMMs of many rows go through [`widened_linear`]: on CPUs without
/// AVX512-BF16 (as the kernel variant in use says), where libtorch's bf16 GEMM takes a path
/// tens of times slower than its f32 one.
pub(super) fn widens_bf16_gemm() -> bool {
    use cpu_gemv::Variant;
    !matches!(Variant::active(), Variant::Avx512Bf16 | Variant::Amx)
}

/// bf16 `x @ w.T` on the CPU through libtorch's f32 GEMM, which runs at the CPU's FMA rate:
/// the weight is widened to f32 a tile of rows at a time. The result is what a bf16 GEMM
/// computes (bf16 products summed in f32, rounded once to bf16), up to summation order.
fn widened_linear(x: &tch::Tensor, w: &tch::Tensor) -> Option<tch::Tensor> {
    let bf16_on_cpu = |t: &tch::Tensor| t.device() == Device::Cpu && t.kind() == Kind::BFloat16;
    if !(bf16_on_cpu(x) && bf16_on_cpu(w)) {
        return None;
    }
    let &[out, k] = w.size().as_slice() else {
        return None;
    };
    let shape = x.size();
    if shape.last() != Some(&k) || k == 0 {
        return None;
    }
    let y = tiled_product(&x.to_kind(Kind::Float), out, |start, rows| {
        w.narrow(0, start, rows).to_kind(Kind::Float)
    });
    Some(y.to_kind(Kind::BFloat16))
}

/// `x @ w.T` for a weight `[out, k]` that `tile(start, rows)` gives a tile of rows at a time
/// (about [`WIDEN_TILE_VALUES`] values, in `x`'s kind), through libtorch's GEMM per tile: the
/// weight is never whole in that kind. The result has `x`'s shape with `out` last.
pub(super) fn tiled_product(
    x: &tch::Tensor,
    out: i64,
    mut tile: impl FnMut(i64, i64) -> tch::Tensor,
) -> tch::Tensor {
    let mut shape = x.size();
    let k = *shape.last().expect("at least one axis");
    let x = x.reshape([-1, k]);
    let y = tch::Tensor::empty([x.size()[0], out], (x.kind(), Device::Cpu));
    let tile_rows = (WIDEN_TILE_VALUES as i64 / k).max(1);
    let mut start = 0;
    while start < out {
        let rows = tile_rows.min(out - start);
        y.narrow(1, start, rows)
            .copy_(&x.matmul(&tile(start, rows).tr()));
        start += rows;
    }
    *shape.last_mut().expect("at least one axis") = out;
    y.reshape(shape)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tensor::tch_backend::kind;
    use crate::tensor::{DType, NetworkOps, TensorData};

    /// The few-rows kernels and libtorch's GEMM (many rows) agree with an f64 product, in
    /// bf16 (within a bf16 rounding step) and f32, for a 3-D input and a weight big enough to
    /// be split over threads.
    #[test]
    fn linear_matches_f64_product_for_few_and_many_rows() {
        let _guard = tch::no_grad_guard();
        let w = tch::Tensor::randn([1030, 256], (Kind::Float, Device::Cpu));
        for (dtype, relative) in [(DType::BF16, 1.0 / 128.0), (DType::F32, 1e-5)] {
            let w = TchTensor(w.to_kind(kind(dtype)));
            for rows in [1, 6, cpu_gemv::MAX_ROWS as i64 + 1] {
                let x = tch::Tensor::randn([1, rows, 256], (Kind::Float, Device::Cpu));
                let x = TchTensor(x.to_kind(kind(dtype)));
                let got = x.linear(&w);
                assert_eq!(got.shape(), vec![1, rows as usize, 1030]);
                assert_eq!(got.dtype(), dtype);
                let want =
                    x.0.to_kind(Kind::Double)
                        .linear::<tch::Tensor>(&w.0.to_kind(Kind::Double), None);
                let err = (got.0.to_kind(Kind::Double) - &want).abs();
                let tolerance = want.abs() * relative + 1e-4;
                let worst = (err - tolerance).max().double_value(&[]);
                assert!(
                    worst <= 0.0,
                    "{dtype} {rows} rows: {worst} beyond tolerance"
                );
            }
        }
    }

    /// The widened bf16 GEMM (prefill on CPUs without AVX512-BF16) agrees with an f64
    /// product within a bf16 rounding step, for a weight of several tiles and a ragged last one.
    #[test]
    fn widened_bf16_gemm_matches_f64_product() {
        let _guard = tch::no_grad_guard();
        let k = 1000;
        let out = 3 * (WIDEN_TILE_VALUES / k) as i64 + 7;
        let w =
            tch::Tensor::randn([out, k as i64], (Kind::Float, Device::Cpu)).to_kind(Kind::BFloat16);
        let x = tch::Tensor::randn([2, 80, k as i64], (Kind::Float, Device::Cpu))
            .to_kind(Kind::BFloat16);
        let got = widened_linear(&x, &w).expect("bf16 CPU tensors");
        assert_eq!(got.size(), vec![2, 80, out]);
        assert_eq!(got.kind(), Kind::BFloat16);
        let want = x
            .to_kind(Kind::Double)
            .linear::<tch::Tensor>(&w.to_kind(Kind::Double), None);
        let err = (got.to_kind(Kind::Double) - &want).abs();
        let worst = (err - (want.abs() / 128.0 + 1e-3)).max().double_value(&[]);
        assert!(worst <= 0.0, "{worst} beyond a bf16 rounding step");
        assert!(widened_linear(&x.to_kind(Kind::Float), &w).is_none());
    }

    /// Decode steps (the kernel, which on AMX CPUs releases the tile unit after each call)
    /// and prompts (libtorch's bf16 GEMM, itself on AMX there) alternate on the same threads:
    /// each must leave the other working.
    #[test]
    fn few_row_products_and_libtorch_gemms_alternate() {
        let _guard = tch::no_grad_guard();
        let bf16 = |shape: [i64; 2]| {
            tch::Tensor::randn(shape, (Kind::Float, Device::Cpu)).to_kind(Kind::BFloat16)
        };
        let w = bf16([256, 512]);
        let near_f32 = |x: &tch::Tensor, y: &tch::Tensor| {
            let want = x
                .to_kind(Kind::Float)
                .linear::<tch::Tensor>(&w.to_kind(Kind::Float), None);
            let err = (y.to_kind(Kind::Float) - &want)
                .abs()
                .max()
                .double_value(&[]);
            err <= want.abs().max().double_value(&[]) / 64.0
        };
        for round in 0..3 {
            let step = bf16([4, 512]);
            let y = TchTensor(step.shallow_clone()).linear(&TchTensor(w.shallow_clone()));
            assert!(near_f32(&step, &y.0), "decode step, round {round}");
            let prompt = bf16([256, 512]);
            let y = prompt.linear::<tch::Tensor>(&w, None);
            assert!(near_f32(&prompt, &y), "prompt, round {round}");
        }
    }
}
