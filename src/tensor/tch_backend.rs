//! libtorch backend (`tch`). Conv layouts are PyTorch's own, so NLC sequences are transposed to
//! NCL around each convolution here, inside the backend.

use super::quantized::QuantFormat;
use super::{
    cuda_graph::{CudaGraph, GraphError},
    pool_attention_by_row, pool_keys_read, ConvKind, DType, Fused, PadMode, PoolRows, Products,
    RawTensor, Tensor,
};
use tch::{Device, Kind};

/// A libtorch tensor; cloning is a shallow (shared-storage) clone.
pub struct TchTensor(pub tch::Tensor);

impl Clone for TchTensor {
    fn clone(&self) -> Self {
        TchTensor(self.0.shallow_clone())
    }
}

impl std::fmt::Debug for TchTensor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "TchTensor({:?}, {:?})", self.0.size(), self.0.kind())
    }
}

fn kind(dtype: DType) -> Kind {
    match dtype {
        DType::F32 => Kind::Float,
        DType::BF16 => Kind::BFloat16,
    }
}

fn dims(shape: &[usize]) -> Vec<i64> {
    shape.iter().map(|&d| d as i64).collect()
}

impl TchTensor {
    fn wrap(t: tch::Tensor) -> Self {
        TchTensor(t)
    }
}

/// The vector-math functions libtorch's CPU build hands to oneMKL (`vmsSin`, `vmsExp`, ...)
/// for f32 and f64 tensors.
const MKL_VECTOR_MATH: [fn(&tch::Tensor) -> tch::Tensor; 16] = [
    tch::Tensor::acos,
    tch::Tensor::asin,
    tch::Tensor::atan,
    tch::Tensor::cos,
    tch::Tensor::erf,
    tch::Tensor::erfc,
    tch::Tensor::erfinv,
    tch::Tensor::exp,
    tch::Tensor::log,
    tch::Tensor::log10,
    tch::Tensor::log2,
    tch::Tensor::sin,
    tch::Tensor::sqrt,
    tch::Tensor::tan,
    tch::Tensor::tanh,
    tch::Tensor::trunc,
];

/// oneMKL picks its vector-math kernels on the first call in a process, and when libtorch's
/// threads make that call together (an operation of 2048 values or more, split between them)
/// one of them can run a low-accuracy kernel for it (pytorch/pytorch#188792). With libtorch's
/// oneMKL 2024.0 here, about one process in twenty had a first `sin` thousands of ulps off
/// after a matrix product: a server's first request, decoded by the Qwen3 codec, gave other
/// audio than the same request after it. One call of each function on a single value, on
/// one thread, before a model's first tensor exists, settles the kernels.
fn settle_vector_math() {
    static SETTLED: std::sync::Once = std::sync::Once::new();
    SETTLED.call_once(|| {
        for kind in [Kind::Float, Kind::Double] {
            let one = tch::Tensor::from_slice(&[0.5f32]).to_kind(kind);
            for function in MKL_VECTOR_MATH {
                let _ = function(&one);
            }
        }
    });
}

/// `x @ w.T` through [`super::cpu_gemv`] when it applies: bf16 or f32 on the CPU, a
/// contiguous `[out, in]` weight and at most `MAX_ROWS` input rows (a decode step, not a
/// prefill).
fn few_rows_linear(x: &tch::Tensor, w: &tch::Tensor) -> Option<tch::Tensor> {
    use super::cpu_gemv::{self, Element};
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

/// The outputs of a weight packed by [`cpu_gemv::packed`] (a bf16 CPU tensor
/// `[out / PANEL, k, PANEL]`, made by `pack_for_few_rows`), or `None` for any other weight.
fn packed_outputs(w: &tch::Tensor) -> Option<i64> {
    use super::cpu_gemv::packed::PANEL;
    match w.size().as_slice() {
        &[panels, _, panel] if panel == PANEL as i64 => Some(panels * panel),
        _ => None,
    }
}

/// `x @ w.T` for a weight packed by [`cpu_gemv::packed`], with `fused`'s work in its passes;
/// `None` for any other weight, and for gated f32 rows or a residual not of the output's kind
/// and shape (done apart). bf16 rows give bf16, f32 rows f32 (the product with the weight
/// widened to f32).
fn packed_linear(
    x: &tch::Tensor,
    w: &tch::Tensor,
    fused: Fused<'_, TchTensor>,
) -> Option<tch::Tensor> {
    use super::cpu_gemv::packed::{self, Product, Rows};
    use super::cpu_gemv::Element;
    use half::bf16;

    let out = packed_outputs(w)?;
    let k = w.size()[1];
    let kind = x.kind();
    if fused.gated && kind != Kind::BFloat16 {
        return None;
    }
    let width = if fused.gated { 2 * k } else { k };
    assert!(
        x.device() == Device::Cpu
            && matches!(kind, Kind::BFloat16 | Kind::Float)
            && x.size().last() == Some(&width),
        "a packed weight multiplies bf16 or f32 rows of {width} values on the CPU, not {:?} {:?} on {:?}",
        kind,
        x.size(),
        x.device()
    );
    let x = x.contiguous();
    let mut shape = x.size();
    *shape.last_mut().expect("at least one axis") = out;
    let residual = match fused.residual {
        Some(r) if r.0.kind() != kind || r.0.size() != shape || r.0.device() != Device::Cpu => {
            return None
        }
        r => r.map(|r| r.0.contiguous()),
    };
    let y = tch::Tensor::empty(&shape, (kind, Device::Cpu));
    let threads = usize::try_from(tch::get_num_threads()).unwrap_or(1);

    /// # Safety
    /// `x`, `residual` and `y` are contiguous CPU tensors of `E`'s kind, `y` new and not
    /// shared; `w` is a packed weight.
    unsafe fn run<E: Element>(
        x: &tch::Tensor,
        gated: bool,
        w: &tch::Tensor,
        residual: Option<&tch::Tensor>,
        y: &tch::Tensor,
        threads: usize,
    ) {
        let values =
            |t: &tch::Tensor| std::slice::from_raw_parts(t.data_ptr() as *const E, t.numel());
        let rows = match gated {
            // Gated rows are bf16 (checked above).
            true => Rows::Gated {
                values: std::slice::from_raw_parts(x.data_ptr() as *const bf16, x.numel()),
                silu: silu_table(),
            },
            false => Rows::Plain(values(x)),
        };
        let product = Product {
            rows,
            residual: residual.map(values),
        };
        let packed = std::slice::from_raw_parts(w.data_ptr() as *const bf16, w.numel());
        let k = w.size()[1] as usize;
        let y = std::slice::from_raw_parts_mut(y.data_ptr() as *mut E, y.numel());
        packed::linear(product, packed, k, y, threads)
    }
    // SAFETY: as `run` asks: `x` and `residual` were made contiguous, of `kind` (checked), and
    // `y` is new; `pack_for_few_rows` made `w`.
    unsafe {
        match kind {
            Kind::BFloat16 => run::<bf16>(&x, fused.gated, w, residual.as_ref(), &y, threads),
            _ => run::<f32>(&x, fused.gated, w, residual.as_ref(), &y, threads),
        }
    }
    Some(y)
}

/// libtorch's SiLU of every bf16 value, indexed by its bits and widened to f32 (256 KB, made
/// once): what a gated product's rows read, so that they hold the bits of libtorch's `silu`
/// (tested).
fn silu_table() -> &'static super::cpu_gemv::packed::SiluTable {
    use half::bf16;
    static TABLE: std::sync::OnceLock<Box<super::cpu_gemv::packed::SiluTable>> =
        std::sync::OnceLock::new();
    TABLE.get_or_init(|| {
        let bits: Vec<i16> = (0..=u16::MAX).map(|b| b as i16).collect();
        let silu = tch::Tensor::from_slice(&bits)
            .view_dtype(Kind::BFloat16)
            .silu()
            .contiguous();
        let mut table = Box::new([0.0; 1 << 16]);
        // SAFETY: `silu` is a contiguous CPU tensor of 65,536 bf16 values.
        let values = unsafe { std::slice::from_raw_parts(silu.data_ptr() as *const bf16, 1 << 16) };
        for (entry, value) in table.iter_mut().zip(values) {
            *entry = value.to_f32();
        }
        table
    })
}

/// The format of a weight stored by `quantize_weight` or `from_quantized` (bytes
/// `[out, in / GROUP, block]`), or `None` for any other weight.
fn quantized_format(w: &tch::Tensor) -> Option<QuantFormat> {
    match w.size().as_slice() {
        &[_, _, block] if w.kind() == Kind::Uint8 => QuantFormat::of_block_bytes(block as usize),
        _ => None,
    }
}

/// `x · wᵀ` for a quantized weight `w` on the CPU: the quantized kernel for a few rows, in f32
/// and rounded once to `x`'s kind; for more (a prompt), libtorch's product with the weight
/// dequantized, which is then bound by its multiply-adds rather than by the weight's bytes.
fn quantized_linear(x: &tch::Tensor, w: &tch::Tensor, format: QuantFormat) -> tch::Tensor {
    use super::quantized::{self, GROUP};
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

/// `x · wᵀ` on the CPU: a quantized or packed weight's kernel, the few-row kernel, widened
/// bf16, or libtorch's product, the first that takes it.
fn cpu_linear(x: &tch::Tensor, w: &tch::Tensor) -> tch::Tensor {
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
fn multiply_adds(inputs: usize, weight: &TchTensor) -> u64 {
    let out = packed_outputs(&weight.0)
        .or_else(|| weight.0.size().first().copied())
        .unwrap_or(0);
    inputs as u64 * out.max(0) as u64
}

/// The inputs of each output of `weight` (packed, quantized or not).
fn weight_columns(weight: &tch::Tensor) -> i64 {
    let size = weight.size();
    match quantized_format(weight) {
        Some(_) => size[1] * super::quantized::GROUP as i64,
        None => size.get(1).copied().unwrap_or(1),
    }
}

/// `product`, a CPU product of `inputs` values by `weight`, where it is made: its multiply-adds
/// counted, and it timed by its rows.
fn timed_cpu_product(
    inputs: usize,
    weight: &TchTensor,
    product: impl FnOnce() -> Option<tch::Tensor>,
) -> Option<TchTensor> {
    let started = std::time::Instant::now();
    let y = product()?;
    let multiply_adds = multiply_adds(inputs, weight);
    super::count_multiply_adds(multiply_adds);
    let k = weight_columns(&weight.0).max(1);
    super::count_timed_product(inputs / k as usize, multiply_adds, started.elapsed());
    Some(TchTensor::wrap(y))
}

/// Whether libtorch's attention of one query over many keys is slower than `cpu_small`'s loop:
/// where it runs its AVX2 build, as it chooses (x86-64 without AVX-512 F, BW, VL and DQ, or
/// `ATEN_CPU_CAPABILITY` asking for less). Its AVX2 build is 1.7 to 1.9 times slower than the
/// loop on one thread, its AVX-512 build 3 to 6 times faster (bf16, 170 to 2000 keys,
/// docs/performance.md); on other architectures it was not measured, so libtorch keeps them.
fn libtorch_attention_is_slower() -> bool {
    static SLOWER: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *SLOWER.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        {
            let avx512 = std::arch::is_x86_feature_detected!("avx512f")
                && std::arch::is_x86_feature_detected!("avx512bw")
                && std::arch::is_x86_feature_detected!("avx512vl")
                && std::arch::is_x86_feature_detected!("avx512dq");
            let capped = std::env::var("ATEN_CPU_CAPABILITY")
                .is_ok_and(|c| matches!(c.to_lowercase().as_str(), "avx2" | "default"));
            !avx512 || capped
        }
        #[cfg(not(target_arch = "x86_64"))]
        false
    })
}

/// Attention without mask of a few queries on the CPU, in one pass where that is faster than
/// libtorch's SDPA: over a few keys (the flow head's three tokens), and over a decode step's
/// keys where [`libtorch_attention_is_slower`]. `None` for the rest.
fn cpu_attention(
    q: &tch::Tensor,
    k: &tch::Tensor,
    v: &tch::Tensor,
    scale: f64,
) -> Option<tch::Tensor> {
    use super::cpu_small::attention::FEW_KEYS;
    let few_keys = k.size().get(2).is_some_and(|&n| n as usize <= FEW_KEYS);
    if few_keys || libtorch_attention_is_slower() {
        one_pass_attention(q, k, v, scale)
    } else {
        None
    }
}

/// Attention without mask of a few queries on the CPU (`cpu_small::attention`), bf16 or f32,
/// `[batch, heads, tokens, dim]` with `dim` contiguous; `None` for the rest (a prompt's many
/// queries, other types), which go to libtorch's SDPA. The result is `[batch, tokens, heads,
/// dim]` in memory, returned transposed, so that merging the heads back is a view.
fn one_pass_attention(
    q: &tch::Tensor,
    k: &tch::Tensor,
    v: &tch::Tensor,
    scale: f64,
) -> Option<tch::Tensor> {
    use super::cpu_gemv::Element;
    use super::cpu_small::attention::{attention, Strided, MAX_QUERIES};
    use half::bf16;

    let kind = q.kind();
    let fits = |t: &tch::Tensor| {
        t.device() == Device::Cpu && t.kind() == kind && t.dim() == 4 && t.stride()[3] == 1
    };
    let (qs, ks) = (q.size(), k.size());
    let plain = matches!(kind, Kind::BFloat16 | Kind::Float)
        && fits(q)
        && qs[2] as usize <= MAX_QUERIES
        && fits(k)
        && fits(v)
        && v.size() == ks
        && ks[0] == qs[0]
        && ks[3] == qs[3]
        && ks[1] > 0
        && ks[2] > 0
        && qs[1] % ks[1] == 0;
    if !plain {
        return None;
    }
    let out = tch::Tensor::empty([qs[0], qs[2], qs[1], qs[3]], (kind, Device::Cpu));
    /// # Safety
    /// As `attention`'s, and `out` a contiguous tensor of `E`'s kind not otherwise shared.
    unsafe fn run<E: Element>([q, k, v]: [&tch::Tensor; 3], scale: f32, out: &tch::Tensor) {
        let view = |t: &tch::Tensor| {
            let (size, stride) = (t.size(), t.stride());
            Strided {
                values: t.data_ptr() as *const E,
                shape: [0, 1, 2, 3].map(|i| size[i] as usize),
                strides: [0, 1, 2].map(|i| stride[i] as usize),
            }
        };
        let y = std::slice::from_raw_parts_mut(out.data_ptr() as *mut E, out.numel());
        attention(&view(q), &view(k), &view(v), scale, y)
    }
    // SAFETY: the three are live CPU tensors of `kind` whose shapes and strides were checked
    // above; `out` is new, contiguous and of `kind`.
    unsafe {
        match kind {
            Kind::BFloat16 => run::<bf16>([q, k, v], scale as f32, &out),
            _ => run::<f32>([q, k, v], scale as f32, &out),
        }
    }
    Some(out.transpose(1, 2))
}

/// The reference's RMSNorm in libtorch's operations: in f32, the normalised value rounded to
/// `x`'s type before the weight multiplies it.
fn libtorch_rms_norm(x: &tch::Tensor, weight: &tch::Tensor, eps: f64) -> tch::Tensor {
    let x32 = x.to_kind(Kind::Float);
    let inverse = (x32.square().mean_dim(-1, true, Kind::Float) + eps).rsqrt();
    (x32 * inverse).to_kind(x.kind()) * weight
}

/// Values up to which [`cpu_rms_norm`] runs on one thread: a decode step's rows; a prompt's
/// go to libtorch's threads.
const CPU_RMS_NORM_MAX_VALUES: i64 = 1 << 18;

/// RMSNorm in one pass (`cpu_small::norm`) for a CPU tensor of a few rows with a weight of its
/// kind, bf16 or f32; `None` for the rest, which libtorch normalises.
fn cpu_rms_norm(x: &tch::Tensor, weight: &tch::Tensor, eps: f64) -> Option<tch::Tensor> {
    use super::cpu_gemv::Element;
    use half::bf16;

    let kind = x.kind();
    let dim = *weight.size().first()?;
    let plain = matches!(kind, Kind::BFloat16 | Kind::Float)
        && dim > 0
        && x.device() == Device::Cpu
        && weight.device() == Device::Cpu
        && weight.kind() == kind
        && weight.size().len() == 1
        && x.size().last() == Some(&dim)
        && x.numel() <= CPU_RMS_NORM_MAX_VALUES as usize;
    if !plain {
        return None;
    }
    let (x, weight) = (x.contiguous(), weight.contiguous());
    let y = tch::Tensor::empty(x.size(), (kind, Device::Cpu));
    /// # Safety
    /// `x`, `weight` and `y` are contiguous CPU tensors of `E`'s kind, `y` not otherwise
    /// shared and of `x`'s length.
    unsafe fn run<E: Element>(x: &tch::Tensor, weight: &tch::Tensor, eps: f32, y: &tch::Tensor) {
        let values =
            |t: &tch::Tensor| std::slice::from_raw_parts(t.data_ptr() as *const E, t.numel());
        let y = std::slice::from_raw_parts_mut(y.data_ptr() as *mut E, y.numel());
        super::cpu_small::norm::rms_norm(values(x), values(weight), eps, y)
    }
    // SAFETY: `x`, `weight` and the new `y` are contiguous CPU tensors of `kind`, `y` of `x`'s
    // shape; `y` is not shared, and `x` and `weight` outlive the call.
    unsafe {
        match kind {
            Kind::BFloat16 => run::<bf16>(&x, &weight, eps as f32, &y),
            _ => run::<f32>(&x, &weight, eps as f32, &y),
        }
    }
    Some(y)
}

/// [`super::cpu_gemv::linear`] on the values of CPU tensors: `x` `[.., k]` of `kind` (made
/// contiguous here), the result `y` of `x`'s shape with `out` last, on libtorch's thread
/// count.
///
/// # Safety
/// `w` is a contiguous CPU tensor of `E`'s kind holding `out * k` values, and `x` is a CPU
/// tensor of `E`'s kind (`kind`).
unsafe fn few_rows_product<E: super::cpu_gemv::Element>(
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
    super::cpu_gemv::linear(x, w, k, y_values, threads);
    y
}

/// The bf16 CPU weights `parts` `[out_i, k]`, stacked and packed in panels for
/// [`cpu_gemv::packed`] (`[out / PANEL, k, PANEL]`), or `None` when they are not bf16 CPU
/// weights of whole panels.
fn packed_panels(parts: &[&TchTensor]) -> Option<TchTensor> {
    use super::cpu_gemv::packed::{self, PANEL};
    use half::bf16;

    let k = parts.first()?.0.size().get(1).copied()?;
    let packable = |w: &tch::Tensor| match w.size().as_slice() {
        &[out, cols] => {
            w.device() == Device::Cpu
                && w.kind() == Kind::BFloat16
                && cols == k
                && out > 0
                && (out as usize).is_multiple_of(PANEL)
        }
        _ => false,
    };
    if !parts.iter().all(|p| packable(&p.0)) {
        return None;
    }
    let k = k as usize;
    let out: usize = parts.iter().map(|p| p.0.size()[0] as usize).sum();
    let shape = [(out / PANEL) as i64, k as i64, PANEL as i64];
    let panels = tch::Tensor::empty(shape, (Kind::BFloat16, Device::Cpu));
    // SAFETY: a new contiguous bf16 CPU tensor of `out * k` values, written only here.
    let mut into =
        unsafe { std::slice::from_raw_parts_mut(panels.data_ptr() as *mut bf16, out * k) };
    for part in parts {
        let w = part.0.contiguous();
        let rows = w.size()[0] as usize;
        // SAFETY: a contiguous bf16 CPU tensor of `rows * k` values, alive for the call.
        let values = unsafe { std::slice::from_raw_parts(w.data_ptr() as *const bf16, rows * k) };
        let (this, rest) = into.split_at_mut(rows * k);
        packed::pack_into(values, rows, k, this);
        into = rest;
    }
    Some(TchTensor::wrap(panels))
}

/// Weight values widened to f32 at a time by [`widened_linear`] (4 MiB of f32).
const WIDEN_TILE_VALUES: usize = 1 << 20;

/// Whether bf16 GEMMs of many rows go through [`widened_linear`]: on CPUs without
/// AVX512-BF16 (as the kernel variant in use says), where libtorch's bf16 GEMM takes a path
/// tens of times slower than its f32 one.
fn widens_bf16_gemm() -> bool {
    use super::cpu_gemv::Variant;
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
    let x = x.reshape([-1, k]).to_kind(Kind::Float);
    let y = tch::Tensor::empty([x.size()[0], out], (Kind::Float, Device::Cpu));
    let tile = (WIDEN_TILE_VALUES as i64 / k).max(1);
    let mut start = 0;
    while start < out {
        let rows = tile.min(out - start);
        let w = w.narrow(0, start, rows).to_kind(Kind::Float);
        y.narrow(1, start, rows).copy_(&x.matmul(&w.tr()));
        start += rows;
    }
    let mut y_shape = shape;
    *y_shape.last_mut()? = out;
    Some(y.to_kind(Kind::BFloat16).reshape(y_shape))
}

/// Cos and sin of every position's angles, `[positions, head_dim]` f32 on the model's
/// device, laid out for [`rotate_pairs`]: each pair's cos twice, its sin as (-sin, sin). A
/// step slices or gathers its rows; nothing is computed or copied from the host.
pub struct TchRope {
    cos: tch::Tensor,
    sin: tch::Tensor,
}

/// Rotates the interleaved pairs `(e, o)` of `x` `[b, h, l, d]` by tables from [`TchRope`]
/// that broadcast to it: `x * cos + swapped(x) * sin`, in f32, returned in `x`'s kind. These
/// are the products and sums of `(e cos - o sin, o cos + e sin)`, so the same bits, in fewer
/// kernels (each one a launch on an accelerator).
fn rotate_pairs(x: &tch::Tensor, cos: &tch::Tensor, sin: &tch::Tensor) -> tch::Tensor {
    let size = x.size();
    let x32 = x.to_kind(Kind::Float);
    let swapped = x32
        .reshape([size[0], size[1], size[2], size[3] / 2, 2])
        .flip([-1])
        .reshape(&size[..]);
    (x32 * cos + swapped * sin).to_kind(x.kind())
}

/// [`Tensor::pool_attention`] as one scaled-dot-product attention over every row's slot,
/// keys beyond a row's own length (or before its window) masked: the path for accelerators,
/// where one launch for all rows beats a loop of small ones. The mask is made once per step.
pub fn masked_pool_attention(
    q: &TchTensor,
    keys: &TchTensor,
    values: &TchTensor,
    rows: &PoolRows<TchTensor>,
    scale: f64,
) -> TchTensor {
    let pool_positions = keys.0.size()[2] as usize;
    let longest = rows.positions.iter().max().map_or(0, |p| p + 1);
    let longest = pool_keys_read(longest, pool_positions) as i64;
    let gather = |pool: &TchTensor| {
        pool.0
            .narrow(2, 0, longest)
            .index_select(0, &rows.slot_ids.0)
    };
    let (k, v) = (gather(keys), gather(values));
    let mask = rows.attention_mask.get_or_init(|| {
        // True where a row may attend: positions up to its own, from its window's first.
        let positions = tch::Tensor::arange(longest, (Kind::Int64, q.0.device())).unsqueeze(0);
        let mut mask = positions.le_tensor(&rows.position_ids.0.unsqueeze(1));
        if let Some(first) = &rows.first_ids {
            mask = mask.logical_and(&positions.ge_tensor(&first.0.unsqueeze(1)));
        }
        TchTensor::wrap(mask.reshape([rows.len() as i64, 1, 1, longest]))
    });
    let gqa = q.0.size()[1] != k.size()[1];
    TchTensor::wrap(tch::Tensor::scaled_dot_product_attention(
        &q.0,
        &k,
        &v,
        Some(&mask.0),
        0.0,
        false,
        scale,
        gqa,
    ))
}

/// `host` on `device`. On an accelerator the bytes go through page-locked memory and an
/// asynchronous copy, so the host queues the copy and goes on: a copy from ordinary (pageable)
/// memory would first wait for everything already queued on the device. libtorch's pinned
/// allocator keeps the page-locked block until the copy has run. Where pinning fails, the copy
/// waits, as before, and says so once.
fn upload(host: tch::Tensor, device: Device) -> tch::Tensor {
    if device == Device::Cpu {
        return host;
    }
    match host.f_internal_pin_memory(device) {
        Ok(pinned) => pinned.to_device_(device, pinned.kind(), true, false),
        Err(error) => {
            static WARNED: std::sync::Once = std::sync::Once::new();
            WARNED.call_once(|| {
                tracing::warn!(%error, "page-locked uploads unavailable; each upload waits for the device")
            });
            host.to_device(device)
        }
    }
}

impl Tensor for TchTensor {
    type Device = Device;
    type Rope = TchRope;
    const BACKEND: &'static str = "libtorch";

    fn from_f32(device: &Device, data: &[f32], shape: &[usize], dtype: DType) -> Self {
        settle_vector_math();
        let t = tch::Tensor::from_slice(data).reshape(dims(shape));
        Self::wrap(upload(t, *device).to_kind(kind(dtype)))
    }

    fn from_i64(device: &Device, data: &[i64], shape: &[usize]) -> Self {
        settle_vector_math();
        Self::wrap(upload(
            tch::Tensor::from_slice(data).reshape(dims(shape)),
            *device,
        ))
    }

    unsafe fn from_raw(device: &Device, raw: &RawTensor<'_>, dtype: DType) -> Self {
        settle_vector_math();
        let stored = kind(raw.dtype);
        let elem = stored.elt_size_in_bytes();
        let aligned = (raw.data.as_ptr() as usize).is_multiple_of(elem);
        let t = if aligned && *device == Device::Cpu && raw.dtype == dtype {
            // Zero-copy: the tensor reads the memory-mapped checkpoint directly.
            tch::Tensor::from_blob(
                raw.data.as_ptr(),
                &dims(&raw.shape),
                &[],
                stored,
                Device::Cpu,
            )
        } else {
            tch::Tensor::from_data_size(raw.data, &dims(&raw.shape), stored)
                .to_device(*device)
                .to_kind(kind(dtype))
        };
        Self::wrap(t)
    }

    fn zeros(device: &Device, shape: &[usize], dtype: DType) -> Self {
        settle_vector_math();
        Self::wrap(tch::Tensor::zeros(dims(shape), (kind(dtype), *device)))
    }

    /// Uninitialized on the CPU, so that the OS commits a pool's pages only as they are
    /// written; zeros on accelerators, whose masked attention reads past each row's length
    /// (weights 0, but 0 x NaN would not be 0).
    fn uninit(device: &Device, shape: &[usize], dtype: DType) -> Self {
        if *device == Device::Cpu {
            settle_vector_math();
            Self::wrap(tch::Tensor::empty(dims(shape), (kind(dtype), *device)))
        } else {
            Self::zeros(device, shape, dtype)
        }
    }

    fn is_cpu(device: &Device) -> bool {
        *device == Device::Cpu
    }

    fn synchronize(device: &Device) {
        if let Device::Cuda(index) = *device {
            tch::Cuda::synchronize(index as i64);
        }
    }

    fn capture_graph(
        device: &Device,
        share: Option<&CudaGraph>,
        warmups: usize,
        body: &mut dyn FnMut(),
    ) -> Result<CudaGraph, GraphError> {
        match *device {
            Device::Cuda(index) => CudaGraph::capture(index, share, warmups, body),
            other => Err(GraphError::NotCuda(format!("{other:?}"))),
        }
    }

    fn reserved_device_bytes(device: &Device) -> Option<u64> {
        match *device {
            Device::Cuda(index) => super::cuda_graph::reserved_bytes(index).ok(),
            _ => None,
        }
    }

    /// The new thread runs with autograd off and this thread's CPU thread count.
    fn spawn_model_thread<F: FnOnce() + Send + 'static>(
        name: String,
        body: F,
    ) -> std::io::Result<std::thread::JoinHandle<()>> {
        let threads = tch::get_num_threads();
        std::thread::Builder::new().name(name).spawn(move || {
            let _no_grad = tch::no_grad_guard();
            tch::set_num_threads(threads);
            body()
        })
    }

    /// A 1 GiB copy on a CUDA device, timed between synchronizations; the best of 5.
    fn device_copy_bandwidth(device: &Device) -> Option<f64> {
        let Device::Cuda(index) = *device else {
            return None;
        };
        let sync = || tch::Cuda::synchronize(index as i64);
        let bytes = 1i64 << 30;
        let src = tch::Tensor::ones([bytes], (Kind::Uint8, *device));
        let mut dst = tch::Tensor::empty([bytes], (Kind::Uint8, *device));
        dst.copy_(&src);
        sync();
        let best = (0..5)
            .map(|_| {
                let started = std::time::Instant::now();
                dst.copy_(&src);
                sync();
                started.elapsed()
            })
            .min()?;
        Some(2.0 * bytes as f64 / best.as_secs_f64())
    }

    fn shape(&self) -> Vec<usize> {
        self.0.size().iter().map(|&d| d as usize).collect()
    }

    fn dtype(&self) -> DType {
        match self.0.kind() {
            Kind::BFloat16 => DType::BF16,
            _ => DType::F32,
        }
    }

    fn to_dtype(&self, dtype: DType) -> Self {
        Self::wrap(self.0.to_kind(kind(dtype)))
    }

    fn to_vec_f32(&self) -> Vec<f32> {
        let t = self
            .0
            .to_kind(Kind::Float)
            .to_device(Device::Cpu)
            .flatten(0, -1);
        Vec::<f32>::try_from(&t).expect("f32 tensor converts to Vec<f32>")
    }

    fn to_vec_i64(&self) -> Vec<i64> {
        let t = self
            .0
            .to_kind(Kind::Int64)
            .to_device(Device::Cpu)
            .flatten(0, -1);
        Vec::<i64>::try_from(&t).expect("i64 tensor converts to Vec<i64>")
    }

    fn eval(_tensors: &[&Self]) {
        // Eager: every operation has already run.
    }

    fn add(&self, rhs: &Self) -> Self {
        Self::wrap(&self.0 + &rhs.0)
    }

    fn sub(&self, rhs: &Self) -> Self {
        Self::wrap(&self.0 - &rhs.0)
    }

    fn mul(&self, rhs: &Self) -> Self {
        Self::wrap(&self.0 * &rhs.0)
    }

    fn div(&self, rhs: &Self) -> Self {
        Self::wrap(&self.0 / &rhs.0)
    }

    fn scale(&self, factor: f32) -> Self {
        Self::wrap(&self.0 * f64::from(factor))
    }

    fn add_scalar(&self, value: f32) -> Self {
        Self::wrap(&self.0 + f64::from(value))
    }

    fn silu(&self) -> Self {
        Self::wrap(self.0.silu())
    }

    fn gelu(&self) -> Self {
        Self::wrap(self.0.gelu("none"))
    }

    fn clamp(&self, lo: f32, hi: f32) -> Self {
        Self::wrap(self.0.clamp(f64::from(lo), f64::from(hi)))
    }

    fn round(&self) -> Self {
        Self::wrap(self.0.round())
    }

    fn sin(&self) -> Self {
        Self::wrap(self.0.sin())
    }

    fn relu(&self) -> Self {
        Self::wrap(self.0.relu())
    }

    fn leaky_relu(&self, slope: f32) -> Self {
        // tch's `leaky_relu` has no slope argument; for slope ≤ 1 the larger of x and
        // slope · x is the same value.
        Self::wrap(self.0.maximum(&(&self.0 * f64::from(slope))))
    }

    fn elu(&self) -> Self {
        Self::wrap(self.0.elu())
    }

    fn tanh(&self) -> Self {
        Self::wrap(self.0.tanh())
    }

    fn linear(&self, weight: &Self) -> Self {
        if self.0.device() != Device::Cpu {
            super::count_multiply_adds(multiply_adds(self.0.numel(), weight));
            return Self::wrap(self.0.linear::<tch::Tensor>(&weight.0, None));
        }
        timed_cpu_product(self.0.numel(), weight, || {
            Some(cpu_linear(&self.0, &weight.0))
        })
        .expect("a CPU product")
    }

    fn fused_linear(&self, weight: &Self, fused: Fused<'_, Self>) -> Option<Self> {
        if self.0.device() != Device::Cpu {
            return None;
        }
        let inputs = self.0.numel() / if fused.gated { 2 } else { 1 };
        timed_cpu_product(inputs, weight, || packed_linear(&self.0, &weight.0, fused))
    }

    fn linear_rows(&self, weight: &Self, start: usize, len: usize) -> Self {
        use super::cpu_gemv::packed::PANEL;
        if packed_outputs(&weight.0).is_none() {
            return self.linear(&weight.narrow(0, start, len));
        }
        // Packed: whole panels are a packed weight of their own; otherwise all outputs, cut.
        if start.is_multiple_of(PANEL) && len.is_multiple_of(PANEL) {
            let panels = weight
                .0
                .narrow(0, (start / PANEL) as i64, (len / PANEL) as i64);
            return self.linear(&Self::wrap(panels));
        }
        let y = self.linear(weight);
        y.narrow(y.shape().len() - 1, start, len)
    }

    /// On the CPU, a bf16 weight of whole panels is packed for [`cpu_gemv::packed`], whose
    /// products of a few dozen rows run nearer the FMA peak than the few-row kernel's
    /// (docs/performance.md), and f32 rows read it at half an f32 copy's bytes; with the `amx`
    /// kernel (except for f32 rows), elsewhere, or for an f32 weight, nothing.
    fn pack_for_few_rows(parts: &[&Self], products: Products) -> Option<Self> {
        use super::cpu_gemv::Variant;
        // With AVX512-BF16 libtorch's bf16 GEMM of a prompt outruns the packed kernel (AMX);
        // elsewhere bf16 GEMMs are widened, and the packed kernel outruns those too. The AMX
        // variant reads weights as stored, faster than the packed kernel at any row count.
        let packs = match (products, Variant::active()) {
            // No other kernel multiplies f32 rows by bf16 weights.
            (Products::FloatRows, _) => true,
            (_, Variant::Amx) => false,
            (Products::FewRows, _) => true,
            (Products::AlsoManyRows, _) => widens_bf16_gemm(),
        };
        if !packs {
            return None;
        }
        packed_panels(parts)
    }

    /// On the CPU, a 2-D weight whose rows are whole blocks; elsewhere nothing (libtorch has
    /// no CPU or CUDA product of these layouts).
    fn quantize_weight(&self, format: QuantFormat) -> Option<Self> {
        use super::quantized::{self, GROUP};
        let &[out, k] = self.0.size().as_slice() else {
            return None;
        };
        if self.0.device() != Device::Cpu || !QuantFormat::fits(k as usize) {
            return None;
        }
        let values = Vec::<f32>::try_from(self.0.to_kind(Kind::Float).flatten(0, -1)).ok()?;
        let blocks = quantized::quantize(format, &values, k as usize);
        let shape = [out, k / GROUP as i64, format.block_bytes() as i64];
        Some(Self::wrap(tch::Tensor::from_slice(&blocks).reshape(shape)))
    }

    unsafe fn from_quantized(
        device: &Device,
        blocks: &[u8],
        format: QuantFormat,
        shape: [usize; 2],
        dtype: DType,
    ) -> Self {
        if *device != Device::Cpu {
            let values = super::quantized::dequantize(format, blocks);
            return Self::from_f32(device, &values, &shape, dtype);
        }
        settle_vector_math();
        let stored = format.stored_shape(shape[0], shape[1]);
        // Zero-copy: the products read the memory-mapped checkpoint directly.
        Self::wrap(tch::Tensor::from_blob(
            blocks.as_ptr(),
            &dims(&stored),
            &[],
            Kind::Uint8,
            Device::Cpu,
        ))
    }

    fn rms_norm(&self, weight: &Self, eps: f64) -> Self {
        Self::wrap(
            cpu_rms_norm(&self.0, &weight.0, eps)
                .unwrap_or_else(|| libtorch_rms_norm(&self.0, &weight.0, eps)),
        )
    }

    fn rope_table(device: &Device, positions: usize, head_dim: usize, theta: f64) -> TchRope {
        let half = head_dim / 2;
        // Frequencies in f64 then rounded once, as the reference builds its f32 table; angles
        // and their cos/sin in f32.
        let inv_freq: Vec<f32> = (0..half)
            .map(|i| 1.0 / theta.powf((2 * i) as f64 / head_dim as f64) as f32)
            .collect();
        let mut cos = Vec::with_capacity(positions * head_dim);
        let mut sin = Vec::with_capacity(positions * head_dim);
        for p in 0..positions {
            for &f in &inv_freq {
                let angle = p as f32 * f;
                cos.extend([angle.cos(); 2]);
                sin.extend([-angle.sin(), angle.sin()]);
            }
        }
        let table = |v: &[f32]| {
            tch::Tensor::from_slice(v)
                .reshape([positions as i64, head_dim as i64])
                .to_device(*device)
        };
        TchRope {
            cos: table(&cos),
            sin: table(&sin),
        }
    }

    fn rope_interleaved(&self, rope: &TchRope, start: usize) -> Self {
        let size = self.0.size();
        let (len, width) = (size[2], size[3]);
        let table = |t: &tch::Tensor| t.narrow(0, start as i64, len).reshape([1, 1, len, width]);
        Self::wrap(rotate_pairs(&self.0, &table(&rope.cos), &table(&rope.sin)))
    }

    fn attention(
        q: &Self,
        k: &Self,
        v: &Self,
        bias: Option<&Self>,
        causal: bool,
        scale: f64,
    ) -> Self {
        if bias.is_none() && !causal {
            if let Some(out) = cpu_attention(&q.0, &k.0, &v.0, scale) {
                return Self::wrap(out);
            }
        }
        let gqa = q.0.size()[1] != k.0.size()[1];
        let out = tch::Tensor::scaled_dot_product_attention(
            &q.0,
            &k.0,
            &v.0,
            bias.map(|b| &b.0),
            0.0,
            causal,
            scale,
            gqa,
        );
        Self::wrap(out)
    }

    fn embedding(&self, ids: &Self) -> Self {
        let flat = ids.0.flatten(0, -1);
        let rows = self.0.index_select(0, &flat);
        let mut shape = ids.0.size();
        shape.push(self.0.size()[1]);
        Self::wrap(rows.reshape(shape))
    }

    fn reshape(&self, shape: &[usize]) -> Self {
        Self::wrap(self.0.reshape(dims(shape)))
    }

    fn transpose(&self, a: usize, b: usize) -> Self {
        Self::wrap(self.0.transpose(a as i64, b as i64))
    }

    /// A view: nothing is copied until something reads it.
    fn broadcast_to(&self, shape: &[usize]) -> Self {
        Self::wrap(self.0.expand(dims(shape), false))
    }

    fn narrow(&self, dim: usize, start: usize, len: usize) -> Self {
        Self::wrap(self.0.narrow(dim as i64, start as i64, len as i64))
    }

    fn cat(parts: &[&Self], dim: usize) -> Self {
        let ts: Vec<&tch::Tensor> = parts.iter().map(|p| &p.0).collect();
        Self::wrap(tch::Tensor::cat(&ts, dim as i64))
    }

    fn sum_dim(&self, dim: usize) -> Self {
        Self::wrap(self.0.sum_dim_intlist(dim as i64, false, self.0.kind()))
    }

    fn argmax_last(&self) -> Self {
        Self::wrap(self.0.argmax(-1, false))
    }

    fn write_at(&mut self, starts: &[usize], src: &Self) {
        let mut region = self.0.shallow_clone();
        for (dim, (&start, len)) in starts.iter().zip(src.0.size()).enumerate() {
            region = region.narrow(dim as i64, start as i64, len);
        }
        region.copy_(&src.0);
    }

    fn rope_rows(&self, rope: &TchRope, rows: &PoolRows<Self>) -> Self {
        let size = self.0.size();
        // Each row's table entries gathered on the device once per step (every layer rotates
        // at the same positions): the values `rope_interleaved` reads, so the same bits.
        let (cos, sin) = rows.rope_tables.get_or_init(|| {
            let table = |t: &tch::Tensor| {
                Self::wrap(
                    t.index_select(0, &rows.position_ids.0)
                        .reshape([size[0], 1, 1, size[3]]),
                )
            };
            (table(&rope.cos), table(&rope.sin))
        });
        Self::wrap(rotate_pairs(&self.0, &cos.0, &sin.0))
    }

    fn write_rows(&mut self, rows: &PoolRows<Self>, src: &Self) {
        // Advanced indices on dims 0 and 2 around a slice index `[rows, kv_heads, head_dim]`.
        let s = src.0.size();
        let src = src.0.reshape([s[0], s[1], s[3]]);
        let index = [
            Some(rows.slot_ids.0.shallow_clone()),
            None,
            Some(rows.position_ids.0.shallow_clone()),
        ];
        let _ = self.0.index_put_(&index, &src, false);
    }

    /// On the CPU, row by row (each row's bits as when it runs alone: libtorch's attention
    /// kernels pick their blocking from the shapes); elsewhere, one masked attention over
    /// every row's slot ([`masked_pool_attention`]).
    fn pool_attention(
        q: &Self,
        keys: &Self,
        values: &Self,
        rows: &PoolRows<Self>,
        scale: f64,
    ) -> Self {
        if q.0.device() == Device::Cpu {
            pool_attention_by_row(q, keys, values, rows, scale)
        } else {
            masked_pool_attention(q, keys, values, rows, scale)
        }
    }

    fn prepare_conv_weight(weight: &Self, _kind: ConvKind) -> Self {
        // libtorch convolutions take PyTorch layouts as they are.
        weight.clone()
    }

    fn conv1d(&self, weight: &Self, stride: usize) -> Self {
        let x = self.0.transpose(1, 2);
        let y = x.conv1d::<tch::Tensor>(&weight.0, None, [stride as i64], [0], [1], 1);
        Self::wrap(y.transpose(1, 2))
    }

    fn conv1d_dilated(&self, weight: &Self, dilation: usize, groups: usize) -> Self {
        let x = self.0.transpose(1, 2);
        let y =
            x.conv1d::<tch::Tensor>(&weight.0, None, [1], [0], [dilation as i64], groups as i64);
        Self::wrap(y.transpose(1, 2))
    }

    fn conv_transpose1d(&self, weight: &Self, stride: usize) -> Self {
        let x = self.0.transpose(1, 2);
        let y =
            x.conv_transpose1d::<tch::Tensor>(&weight.0, None, [stride as i64], [0], [0], 1, [1]);
        Self::wrap(y.transpose(1, 2))
    }

    fn pad_time(&self, left: usize, right: usize, mode: PadMode) -> Self {
        let x = self.0.transpose(1, 2);
        let (mode, value) = match mode {
            PadMode::Replicate => ("replicate", None),
            PadMode::Reflect => ("reflect", None),
            PadMode::Zero => ("constant", Some(0.0)),
        };
        let y = x.pad([left as i64, right as i64], mode, value);
        Self::wrap(y.transpose(1, 2))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Values in [-2, 2) from a fixed sequence, as a tensor of `kind`: unlike `randn`, other
    /// tests running at the same time cannot change them through libtorch's global generator.
    fn seeded(shape: &[i64], seed: u64, kind: Kind) -> tch::Tensor {
        let mut state = seed;
        let n = shape.iter().product::<i64>() as usize;
        let values: Vec<f32> = (0..n)
            .map(|_| {
                state = state
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                (state >> 40) as f32 / (1u64 << 22) as f32 - 2.0
            })
            .collect();
        tch::Tensor::from_slice(&values)
            .reshape(shape)
            .to_kind(kind)
    }

    /// Set in the child processes of [`first_vector_math_call_gives_what_later_calls_give`].
    const VECTOR_MATH_CHILD: &str = "VECTOR_MATH_CHILD";

    /// After a model's first tensor, the process's first vector-math call, made by libtorch's
    /// threads together over 8192 values after a matrix product, gives what the next call
    /// gives. The race it guards against can happen once per process, in one process of 20 to
    /// 70 here, so the test runs itself again as 96 processes (this binary, this test alone).
    /// Without `settle_vector_math` it failed in 5 of 8 runs (1 to 4 processes each): it can
    /// miss a regression, but it never fails with the warm-up. Where libtorch runs on one
    /// thread there is no race to see.
    #[test]
    fn first_vector_math_call_gives_what_later_calls_give() {
        const PROCESSES: usize = 96;
        const NAME: &str =
            "tensor::tch_backend::tests::first_vector_math_call_gives_what_later_calls_give";
        if std::env::var_os(VECTOR_MATH_CHILD).is_some() {
            let _ = TchTensor::from_f32(&Device::Cpu, &[0.0], &[1], DType::F32);
            let (a, w) = (
                seeded(&[27, 512], 1, Kind::Float),
                seeded(&[512, 512], 2, Kind::Float),
            );
            for _ in 0..3 {
                let _ = a.matmul(&w);
            }
            let x = seeded(&[8192], 3, Kind::Float);
            let (first, second) = (x.sin(), x.sin());
            assert!(
                first.equal(&second),
                "the first sin differs from the second"
            );
            return;
        }
        let exe = std::env::current_exe().expect("the test binary");
        let at_once = std::thread::available_parallelism().map_or(1, |n| n.get().min(4));
        let mut failures = Vec::new();
        for batch in (0..PROCESSES).collect::<Vec<_>>().chunks(at_once) {
            let children: Vec<_> = batch
                .iter()
                .map(|_| {
                    std::process::Command::new(&exe)
                        .args([NAME, "--exact", "--test-threads=1"])
                        .env(VECTOR_MATH_CHILD, "1")
                        .stdout(std::process::Stdio::piped())
                        .stderr(std::process::Stdio::piped())
                        .spawn()
                        .expect("start the test binary")
                })
                .collect();
            for child in children {
                let output = child.wait_with_output().expect("run the test binary");
                let stdout = String::from_utf8_lossy(&output.stdout);
                if !(output.status.success() && stdout.contains("1 passed")) {
                    failures.push(format!(
                        "{stdout}{}",
                        String::from_utf8_lossy(&output.stderr)
                    ));
                }
            }
        }
        assert!(
            failures.is_empty(),
            "{} of {PROCESSES} processes failed; the first:\n{}",
            failures.len(),
            failures[0]
        );
    }

    /// The one-pass attention against libtorch's SDPA, grouped queries and transposed
    /// (strided) inputs as the flow head passes them, and one query over hundreds of keys as a
    /// decode step's (past 512, in two blocks). In f32 both must lie within the rounding bound
    /// of the exact result ([`attention_bound`]), whatever order either sums in (it differs
    /// between libtorch's AVX2 and AVX-512 builds); in bf16 within a rounding or two of the
    /// result.
    #[test]
    fn one_pass_attention_matches_libtorchs() {
        for kind in [Kind::Float, Kind::BFloat16] {
            for (queries, keys) in [(3, 3), (1, 3), (2, 5), (1, 300), (1, 1100)] {
                let heads = |n: i64, tokens: i64, seed: u64| {
                    seeded(&[8, tokens, n, 64], seed, kind).transpose(1, 2)
                };
                let (q, k, v) = (heads(8, queries, 1), heads(2, keys, 2), heads(2, keys, 3));
                let fast = one_pass_attention(&q, &k, &v, 0.125).expect("a few CPU queries");
                let slow = tch::Tensor::scaled_dot_product_attention(
                    &q,
                    &k,
                    &v,
                    None::<&tch::Tensor>,
                    0.0,
                    false,
                    0.125,
                    true,
                );
                assert_eq!(fast.size(), slow.size());
                let values = |t: &tch::Tensor| {
                    Vec::<f32>::try_from(t.to_kind(Kind::Float).flatten(0, -1)).unwrap()
                };
                let (fast, slow) = (values(&fast), values(&slow));
                let case = format!("{kind:?}, {queries} queries, {keys} keys");
                if kind == Kind::Float {
                    let (exact, bound) = attention_bound(
                        &values(&q),
                        &values(&k),
                        &values(&v),
                        [8, 8, 2],
                        64,
                        0.125,
                    );
                    for (i, (f, s)) in fast.iter().zip(&slow).enumerate() {
                        let (f, s) = (f64::from(*f), f64::from(*s));
                        assert!(
                            (f - exact[i]).abs() <= bound[i],
                            "{case}: {f} against exact {}, bound {}",
                            exact[i],
                            bound[i]
                        );
                        assert!(
                            (s - exact[i]).abs() <= bound[i],
                            "{case}: libtorch {s} against exact {}, bound {}",
                            exact[i],
                            bound[i]
                        );
                    }
                } else {
                    let ulp = 1.0 / 128.0;
                    for (f, s) in fast.iter().zip(&slow) {
                        assert!(
                            (f - s).abs() <= 2.0 * ulp * s.abs().max(0.25),
                            "{case}: {f} against {s}"
                        );
                    }
                }
            }
        }
    }

    /// The exact attention (in f64) of f32 `q` `[batch, heads, queries, dim]` over `k`, `v`
    /// `[batch, kv_heads, keys, dim]` (`shape` = batch, heads, kv heads), and for each output
    /// the most that any f32 evaluation can differ from it, whatever its order of sums. With
    /// `u` = 2⁻²⁴ and `γ(n)` = nu/(1 - nu): each score `s_j` is a dot product, off by at
    /// most `E_j = γ(dim)·scale·Σ|q·k_j|`; moving every score by up to `E = max E_j` moves each
    /// weight `p_j` by a factor within `e^{±2E}`; a one-pass softmax rescales a weight and
    /// the running sums by up to `k` factors `e^{m_old - m_new}` (an exponential and a product
    /// each: `4k·u`), the sum of the `k` weights and the weighted sum of the `k` values add
    /// `γ(k)` each, and the exponentials and the division a few `u`. So the bound is
    /// `Σ_j p_j|v_j| · ((e^{2E} - 1) + (6k + 16)·u)`, to first order in `u`.
    fn attention_bound(
        q: &[f32],
        k: &[f32],
        v: &[f32],
        [batch, heads, kv_heads]: [usize; 3],
        dim: usize,
        scale: f64,
    ) -> (Vec<f64>, Vec<f64>) {
        let u = f64::from(f32::EPSILON) / 2.0;
        let gamma = |n: usize| n as f64 * u / (1.0 - n as f64 * u);
        let queries = q.len() / (batch * heads * dim);
        let keys = k.len() / (batch * kv_heads * dim);
        let (mut exact, mut bound) = (Vec::new(), Vec::new());
        for b in 0..batch {
            for h in 0..heads {
                let kv = h / (heads / kv_heads);
                let row = |t: &'_ [f32], heads: usize, head: usize, tokens: usize, i: usize| {
                    let start = ((b * heads + head) * tokens + i) * dim;
                    t[start..start + dim]
                        .iter()
                        .map(|&x| f64::from(x))
                        .collect::<Vec<f64>>()
                };
                for i in 0..queries {
                    let query = row(q, heads, h, queries, i);
                    let (mut scores, mut error) = (Vec::with_capacity(keys), 0f64);
                    for j in 0..keys {
                        let key = row(k, kv_heads, kv, keys, j);
                        let dot: f64 = query.iter().zip(&key).map(|(a, b)| a * b).sum();
                        let magnitude: f64 =
                            query.iter().zip(&key).map(|(a, b)| (a * b).abs()).sum();
                        scores.push(scale * dot);
                        error = error.max(gamma(dim) * scale * magnitude);
                    }
                    let top = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                    let weights: Vec<f64> = scores.iter().map(|s| (s - top).exp()).collect();
                    let total: f64 = weights.iter().sum();
                    let relative = (2.0 * error).exp_m1() + (6 * keys + 16) as f64 * u;
                    for d in 0..dim {
                        let (mut value, mut magnitude) = (0f64, 0f64);
                        for (j, w) in weights.iter().enumerate() {
                            let x = f64::from(v[((b * kv_heads + kv) * keys + j) * dim + d]);
                            value += w / total * x;
                            magnitude += w / total * x.abs();
                        }
                        exact.push(value);
                        bound.push(magnitude * relative);
                    }
                }
            }
        }
        (exact, bound)
    }

    /// The one-pass RMSNorm against libtorch's operations, on a decode step's rows: f32 within
    /// a few roundings (the sums of squares are added in another order), bf16 within one
    /// rounding of the result, and in bf16 mostly the same bits (all of them here). How many
    /// f32 values share their bits depends on the data and on the order of libtorch's
    /// reduction: 68% to 92% in the runs here, so it is not asserted.
    #[test]
    fn one_pass_rms_norm_matches_libtorchs_operations() {
        for kind in [Kind::Float, Kind::BFloat16] {
            let x = seeded(&[8, 3, 1024], 7, kind);
            let weight = seeded(&[1024], 8, kind).abs() + 0.5;
            let fast = cpu_rms_norm(&x, &weight, 1e-5).expect("a few CPU rows take the one pass");
            let slow = libtorch_rms_norm(&x, &weight, 1e-5);
            let values = |t: &tch::Tensor| {
                Vec::<f32>::try_from(t.to_kind(Kind::Float).flatten(0, -1)).unwrap()
            };
            let (fast, slow) = (values(&fast), values(&slow));
            let ulp = if kind == Kind::Float {
                f32::EPSILON
            } else {
                1.0 / 128.0
            };
            let mut same = 0;
            for (f, s) in fast.iter().zip(&slow) {
                assert!(
                    (f - s).abs() <= 4.0 * ulp * s.abs(),
                    "{kind:?}: {f} against {s}"
                );
                same += usize::from(f == s);
            }
            if kind == Kind::BFloat16 {
                assert!(
                    same * 10 >= fast.len() * 9,
                    "{kind:?}: {same} of {} equal",
                    fast.len()
                );
            }
        }
    }

    /// Rotations read from the table at an offset: one head, head_dim 4, pairs (x0, x1) and
    /// (x2, x3) at positions 1 and 2.
    #[test]
    fn rope_reads_the_table_at_the_positions_asked() {
        let rope = TchTensor::rope_table(&Device::Cpu, 8, 4, 10_000.0);
        let x = TchTensor::from_f32(
            &Device::Cpu,
            &[1.0, 0.0, 1.0, 0.0].repeat(2),
            &[1, 1, 2, 4],
            DType::F32,
        );
        let y = x.rope_interleaved(&rope, 1).to_vec_f32();
        let inv1 = 1.0 / 10_000f32.powf(0.5);
        let want = [
            1f32.cos(),
            1f32.sin(),
            inv1.cos(),
            inv1.sin(),
            2f32.cos(),
            2f32.sin(),
            (2.0 * inv1).cos(),
            (2.0 * inv1).sin(),
        ];
        for (g, w) in y.iter().zip(want) {
            assert!((g - w).abs() < 1e-6, "{y:?} vs {want:?}");
        }
    }

    /// The few-rows kernels and libtorch's GEMM (many rows) agree with an f64 product, in
    /// bf16 (within a bf16 rounding step) and f32, for a 3-D input and a weight big enough to
    /// be split over threads.
    #[test]
    fn linear_matches_f64_product_for_few_and_many_rows() {
        let _guard = tch::no_grad_guard();
        let w = tch::Tensor::randn([1030, 256], (Kind::Float, Device::Cpu));
        for (dtype, relative) in [(DType::BF16, 1.0 / 128.0), (DType::F32, 1e-5)] {
            let w = TchTensor(w.to_kind(kind(dtype)));
            for rows in [1, 6, super::super::cpu_gemv::MAX_ROWS as i64 + 1] {
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

    /// A packed weight's outputs `start..start + len`, as a fused weight's parts are taken:
    /// whole panels alone, or a cut of every output; both as the whole product has them, and
    /// near the plain f32 product of those rows.
    #[test]
    fn linear_rows_of_a_packed_weight_are_those_of_the_whole_product() {
        let _guard = tch::no_grad_guard();
        let w = tch::Tensor::randn([160, 64], (Kind::Float, Device::Cpu)).to_kind(Kind::BFloat16);
        let x = tch::Tensor::randn([2, 3, 64], (Kind::Float, Device::Cpu)).to_kind(Kind::BFloat16);
        let (w, x) = (TchTensor(w), TchTensor(x));
        let packed = packed_panels(&[&w]).expect("bf16 whole panels pack");
        let whole = x.linear(&packed);
        // Packed from parts, as a fused weight is: the same panels.
        let parts = [w.narrow(0, 0, 96), w.narrow(0, 96, 64)];
        let from_parts =
            packed_panels(&[&parts[0], &parts[1]]).expect("parts of whole panels pack");
        assert!(from_parts.0.equal(&packed.0));
        for (start, len) in [(0, 160), (32, 64), (128, 32), (40, 50), (0, 8)] {
            let got = x.linear_rows(&packed, start, len);
            assert!(got.0.equal(&whole.narrow(2, start, len).0), "{start}+{len}");
            let plain = x.0.to_kind(Kind::Float).linear::<tch::Tensor>(
                &w.0.narrow(0, start as i64, len as i64).to_kind(Kind::Float),
                None,
            );
            let err = (got.0.to_kind(Kind::Float) - &plain)
                .abs()
                .max()
                .double_value(&[]);
            let scale = plain.abs().max().double_value(&[]);
            assert!(err <= scale / 64.0, "{start}+{len}: {err} off");
        }
    }

    /// The SiLU table holds libtorch's bits for every bf16 value, from its vectorised loop
    /// (all the values, in reverse order) and from its scalar one (each value alone, as a
    /// width's tail runs), so a gated product's rows are libtorch's `silu` at any position.
    #[test]
    fn the_silu_table_is_libtorchs_silu_of_every_bf16_value() {
        let _guard = tch::no_grad_guard();
        let table = silu_table();
        let bits: Vec<i16> = (0..=u16::MAX).map(|b| b as i16).collect();
        let all = tch::Tensor::from_slice(&bits).view_dtype(Kind::BFloat16);
        let vectorised = all.flip([0]).silu().flip([0]).view_dtype(Kind::Int16);
        let vectorised = Vec::<i16>::try_from(&vectorised).expect("i16 values");
        let same = |i: usize, libtorch: i16| {
            let (ours, theirs) = (table[i], half::bf16::from_bits(libtorch as u16).to_f32());
            ours.to_bits() == theirs.to_bits() || (ours.is_nan() && theirs.is_nan())
        };
        for (i, &silu) in vectorised.iter().enumerate() {
            assert!(same(i, silu), "value {i:#06x}, vectorised");
        }
        for i in 0..bits.len() {
            let alone = all.narrow(0, i as i64, 1).silu().view_dtype(Kind::Int16);
            assert!(
                same(i, alone.int64_value(&[0]) as i16),
                "value {i:#06x}, alone"
            );
        }
    }

    /// A packed product with a feed-forward's gating and a residual done in its passes gives
    /// the bits of libtorch's operations apart around the packed product (SiLU, product, add),
    /// for widths with and without the vectorised loop's tails; f32 gated rows and an add
    /// that broadcasts are done apart.
    #[test]
    fn fused_products_equal_the_operations_apart() {
        let _guard = tch::no_grad_guard();
        let randn = |shape: &[i64], kind: Kind, scale: f64| {
            TchTensor((tch::Tensor::randn(shape, (Kind::Float, Device::Cpu)) * scale).to_kind(kind))
        };
        for (k, rows, kind) in [
            (64, 1, Kind::BFloat16),
            (37, 7, Kind::BFloat16),
            (3072, 24, Kind::BFloat16),
            (40, 6, Kind::Float),
        ] {
            let w = randn(&[96, k], Kind::BFloat16, 1.0);
            let packed = packed_panels(&[&w]).expect("bf16 whole panels pack");
            let gate_up = randn(&[rows, 2 * k], kind, 4.0);
            let x = randn(&[rows, k], kind, 1.0);
            let residual = randn(&[rows, 96], kind, 8.0);
            let (gate, up) = (
                gate_up.narrow(1, 0, k as usize),
                gate_up.narrow(1, k as usize, k as usize),
            );
            let gated = gate.silu().mul(&up).linear(&packed);
            let cases = [
                (
                    gate_up.gated_linear(&packed, Some(&residual)),
                    residual.add(&gated),
                ),
                (gate_up.gated_linear(&packed, None), gated),
                (
                    x.linear_add(&packed, &residual),
                    residual.add(&x.linear(&packed)),
                ),
            ];
            for (i, (fused, apart)) in cases.iter().enumerate() {
                assert!(
                    fused.0.equal(&apart.0),
                    "{k} wide, {rows} rows, {kind:?}, case {i}"
                );
            }
            // A residual that broadcasts.
            let row = residual.narrow(0, 0, 1);
            let fused = x.linear_add(&packed, &row);
            assert!(fused.0.equal(&row.add(&x.linear(&packed)).0));
        }
    }

    /// f32 rows times a packed bf16 weight (the semantic head's product) come out in f32,
    /// within f32 roundings of libtorch's f32 product with the weight widened.
    #[test]
    fn f32_rows_times_a_packed_weight_are_f32_products() {
        let _guard = tch::no_grad_guard();
        let w = tch::Tensor::randn([96, 300], (Kind::Float, Device::Cpu)).to_kind(Kind::BFloat16);
        let packed = packed_panels(&[&TchTensor(w.shallow_clone())]).expect("whole panels pack");
        for rows in [1, 4] {
            let x = tch::Tensor::randn([rows, 300], (Kind::Float, Device::Cpu));
            let got = TchTensor(x.shallow_clone()).linear(&packed);
            assert_eq!(got.dtype(), DType::F32);
            let widened = w.to_kind(Kind::Float);
            let want = x.linear::<tch::Tensor>(&widened, None);
            // Any order of the 300 sums is within 300 roundings of the products' magnitudes.
            let bound = x.abs().linear::<tch::Tensor>(&widened.abs(), None) * (300.0 * 6e-8);
            let worst = ((&got.0 - &want).abs() - bound).max().double_value(&[]);
            assert!(worst <= 0.0, "{rows} rows: {worst} beyond f32 roundings");
        }
    }

    #[test]
    fn conv_layouts_and_idempotent_weight_conversion() {
        super::super::conformance::conv_layouts_and_idempotent_weight_conversion::<TchTensor>(
            &Device::Cpu,
        );
    }

    #[test]
    fn windowed_pool_attention_sees_only_its_window() {
        super::super::conformance::windowed_pool_attention_sees_only_its_window::<TchTensor>(
            &Device::Cpu,
        );
    }

    #[test]
    fn gelu_is_the_exact_erf_form() {
        super::super::conformance::gelu_is_the_exact_erf_form::<TchTensor>(&Device::Cpu);
    }

    #[test]
    fn dilated_grouped_conv_matches_reference() {
        super::super::conformance::dilated_grouped_conv_matches_reference::<TchTensor>(
            &Device::Cpu,
        );
    }

    #[test]
    fn sin_matches_f64() {
        super::super::conformance::sin_matches_f64::<TchTensor>(&Device::Cpu);
    }

    #[test]
    fn elu_matches_f64() {
        super::super::conformance::elu_matches_f64::<TchTensor>(&Device::Cpu);
    }

    #[test]
    fn tanh_matches_f64() {
        super::super::conformance::tanh_matches_f64::<TchTensor>(&Device::Cpu);
    }

    #[test]
    fn leaky_relu_is_exact() {
        super::super::conformance::leaky_relu_is_exact::<TchTensor>(&Device::Cpu);
    }
}
