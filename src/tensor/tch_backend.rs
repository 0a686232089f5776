//! libtorch backend (`tch`). Conv weights keep PyTorch's shapes; f32 convs on the CPU run as
//! products on the NLC rows (`kernels/cpu/conv.rs`), others through libtorch's convolutions,
//! with NLC sequences transposed to NCL around them here, inside the backend.

use super::kernels::cpu::{self, settle_vector_math};
use super::kernels::cuda_int4;
use super::quantized::QuantFormat;
use super::{
    cuda_graph::{CudaGraph, GraphError},
    pool_attention_by_row, pool_keys_read, profile, ConvKind, DType, Elementwise, Fused, Layout,
    NetworkOps, PadMode, PoolRows, Products, RawTensor, Tensor, TensorData,
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

pub(super) fn kind(dtype: DType) -> Kind {
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

/// The reference's RMSNorm in libtorch's operations: in f32, the normalised value rounded to
/// `x`'s type before the weight multiplies it.
pub(super) fn libtorch_rms_norm(x: &tch::Tensor, weight: &tch::Tensor, eps: f64) -> tch::Tensor {
    let x32 = x.to_kind(Kind::Float);
    let inverse = (x32.square().mean_dim(-1, true, Kind::Float) + eps).rsqrt();
    (x32 * inverse).to_kind(x.kind()) * weight
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

impl TensorData for TchTensor {
    type Device = Device;
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

    fn is_cpu(device: &Device) -> bool {
        *device == Device::Cpu
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
}

impl Elementwise for TchTensor {
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

    fn elu(&self) -> Self {
        Self::wrap(self.0.elu())
    }

    fn tanh(&self) -> Self {
        Self::wrap(self.0.tanh())
    }
}

impl Layout for TchTensor {
    /// A quantized table's rows come dequantized, in f32.
    fn embedding(&self, ids: &Self) -> Self {
        if let Some(rows) = cpu::quantized_embedding(&self.0, &ids.0) {
            return rows;
        }
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

    /// An int4 CUDA weight's rows (`dim` 0) stay in its form.
    fn narrow(&self, dim: usize, start: usize, len: usize) -> Self {
        let (start, len) = (start as i64, len as i64);
        if dim == 0 {
            if let Some(rows) = cuda_int4::narrow_rows(&self.0, start, len) {
                return Self::wrap(rows);
            }
        }
        Self::wrap(self.0.narrow(dim as i64, start, len))
    }

    /// Int4 CUDA weights stacked by rows (`dim` 0) stay in their form.
    fn cat(parts: &[&Self], dim: usize) -> Self {
        let ts: Vec<&tch::Tensor> = parts.iter().map(|p| &p.0).collect();
        if dim == 0 {
            if let Some(stacked) = cuda_int4::cat_rows(&ts) {
                return Self::wrap(stacked);
            }
        }
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
}

impl NetworkOps for TchTensor {
    type Rope = TchRope;

    fn linear(&self, weight: &Self) -> Self {
        if self.0.device() != Device::Cpu {
            profile::count_multiply_adds(cpu::multiply_adds(self.0.numel(), weight));
            return Self::wrap(
                cuda_int4::linear(&self.0, &weight.0)
                    .unwrap_or_else(|| self.0.linear::<tch::Tensor>(&weight.0, None)),
            );
        }
        cpu::linear(self, weight)
    }

    fn rms_norm(&self, weight: &Self, eps: f64) -> Self {
        Self::wrap(
            cpu::rms_norm(&self.0, &weight.0, eps)
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
            if let Some(out) = cpu::attention(&q.0, &k.0, &v.0, scale) {
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

    fn prepare_conv_weight(weight: &Self, kind: ConvKind) -> Self {
        Self::wrap(cpu::prepare_conv_weight(
            &weight.0,
            kind == ConvKind::Transpose,
        ))
    }

    fn conv1d(&self, weight: &Self, stride: usize) -> Self {
        if let Some(y) = cpu::conv1d(&self.0, &weight.0, stride, 1, 1) {
            return Self::wrap(y);
        }
        let x = self.0.transpose(1, 2);
        let y = x.conv1d::<tch::Tensor>(&weight.0, None, [stride as i64], [0], [1], 1);
        Self::wrap(y.transpose(1, 2))
    }

    fn conv1d_dilated(&self, weight: &Self, dilation: usize, groups: usize) -> Self {
        if let Some(y) = cpu::conv1d(&self.0, &weight.0, 1, dilation, groups) {
            return Self::wrap(y);
        }
        let x = self.0.transpose(1, 2);
        let y =
            x.conv1d::<tch::Tensor>(&weight.0, None, [1], [0], [dilation as i64], groups as i64);
        Self::wrap(y.transpose(1, 2))
    }

    fn conv_transpose1d(&self, weight: &Self, stride: usize) -> Self {
        if let Some(y) = cpu::conv_transpose1d(&self.0, &weight.0, stride) {
            return Self::wrap(y);
        }
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

impl Tensor for TchTensor {
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

    fn relu(&self) -> Self {
        Self::wrap(self.0.relu())
    }

    fn leaky_relu(&self, slope: f32) -> Self {
        // tch's `leaky_relu` has no slope argument; for slope ≤ 1 the larger of x and
        // slope · x is the same value.
        Self::wrap(self.0.maximum(&(&self.0 * f64::from(slope))))
    }

    fn fused_linear(&self, weight: &Self, fused: Fused<'_, Self>) -> Option<Self> {
        if self.0.device() != Device::Cpu {
            return None;
        }
        cpu::fused_linear(self, weight, fused)
    }

    fn linear_rows(&self, weight: &Self, start: usize, len: usize) -> Self {
        if let Some(y) = cuda_int4::linear_rows(&self.0, &weight.0, start as i64, len as i64) {
            return Self::wrap(y);
        }
        cpu::linear_rows(self, weight, start, len)
            .unwrap_or_else(|| self.linear(&weight.narrow(0, start, len)))
    }

    /// On the CPU, [`cpu::pack_for_few_rows`]'s packed panels; elsewhere nothing.
    fn pack_for_few_rows(parts: &[&Self], products: Products) -> Option<Self> {
        cpu::pack_for_few_rows(parts, products)
    }

    /// On the CPU (`cpu::quantized_linear`); `q4` on CUDA devices that run libtorch's int4
    /// product (`cuda_int4`).
    fn multiplies_quantized(device: &Device, format: QuantFormat) -> bool {
        *device == Device::Cpu || (format == QuantFormat::Q4 && cuda_int4::multiplies_on(*device))
    }

    fn quantize_weight(&self, format: QuantFormat) -> Option<Self> {
        if self.0.device() != Device::Cpu {
            return cuda_int4::quantize(&self.0, format);
        }
        cpu::quantize_weight(self, format)
    }

    unsafe fn from_quantized(
        device: &Device,
        blocks: &[u8],
        format: QuantFormat,
        shape: [usize; 2],
        dtype: DType,
    ) -> Self {
        if *device != Device::Cpu {
            if let Some(weight) = cuda_int4::from_blocks(*device, blocks, format, shape) {
                return weight;
            }
            let values = super::quantized::dequantize(format, blocks);
            return Self::from_f32(device, &values, &shape, dtype);
        }
        settle_vector_math();
        cpu::from_blocks(blocks, format, shape)
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
}

#[cfg(test)]
mod tests {
    use super::*;

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
