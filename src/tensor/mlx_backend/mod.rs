//! MLX backend (`mlx-rs`), cargo feature `mlx`. Apple Silicon with Metal is its target; on Linux
//! it runs on the CPU (scripts/setup-mlx.sh).
//!
//! - Layouts: MLX convolutions are channels-last, so NLC sequences go in as they are. Conv
//!   weights are converted from PyTorch layout in `prepare_conv_weight` (conv `[out, in, k]` and
//!   transposed conv `[in, out, k]` both to MLX's `[out, k, in]`); the tensor records that it was
//!   converted, which makes a second conversion a no-op.
//! - Fused kernels: `fast::rms_norm`, `fast::rope` (traditional = interleaved pairs) and
//!   `fast::scaled_dot_product_attention` (GQA without repeating kv heads).
//! - Evaluation: MLX is lazy. Only `TensorData::eval` and host reads of unevaluated arrays run a
//!   graph, and the model calls them at its outer loop boundaries only: once per backbone pass
//!   (hidden states and KV cache), once per flow-head frame (both heads, every Euler step), once
//!   per codec decode (its waveform read). KV cache writes (`write_at`) are lazy slice updates
//!   that the backbone's evaluation materializes. `evaluations()` counts them per thread (tests
//!   check the boundaries with it).
//! - Device: MLX arrays live in unified memory and are not bound to a device; operations run on
//!   MLX's default device. The constructors (`from_*`, `zeros`), which the model calls with its
//!   device, make that device the default.

mod quantized;

use super::quantized::QuantFormat;
use super::{
    ConvKind, DType, Elementwise, Layout, NetworkOps, PadMode, RawTensor, Tensor, TensorData,
};
use mlx_rs::error::Exception;
use mlx_rs::{fast, ops, Array, Dtype};
use std::cell::Cell;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Once;

thread_local! {
    /// Graph evaluations run on this thread (see `evaluations`).
    static EVALUATIONS: Cell<u64> = const { Cell::new(0) };
}

/// How many graph evaluations this thread has run: `TensorData::eval` calls with something left
/// to compute, and host reads (`to_vec_*`) of arrays not evaluated yet.
pub fn evaluations() -> u64 {
    EVALUATIONS.with(Cell::get)
}

/// Whether MLX has computed `a` already.
fn is_evaluated(a: &Array) -> bool {
    let mut available = false;
    // SAFETY: reads a flag of a valid array handle into a valid bool.
    let status = unsafe { mlx_sys::_mlx_array_is_available(&mut available, a.as_ptr()) };
    status == 0 && available
}

/// Evaluates `arrays` together (one graph run), counted when there was anything to compute.
fn evaluate(arrays: &[&Array]) {
    if arrays.iter().all(|a| is_evaluated(a)) {
        return;
    }
    EVALUATIONS.with(|n| n.set(n.get() + 1));
    mlx_rs::transforms::eval(arrays.iter().copied())
        .unwrap_or_else(|e| panic!("MLX evaluation failed: {e}"));
}

/// Where MLX runs the model's operations.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MlxDevice {
    Cpu,
    /// Metal (Apple Silicon).
    Gpu,
}

/// The device last made the default (0: none yet, else `1 + MlxDevice as u8`).
static DEFAULT_DEVICE: AtomicU8 = AtomicU8::new(0);

impl MlxDevice {
    /// Whether this MLX build can run on the device (Metal for `Gpu`).
    pub fn is_available(self) -> bool {
        match self {
            MlxDevice::Cpu => true,
            MlxDevice::Gpu => {
                let mut available = false;
                // SAFETY: writes one bool through a valid pointer.
                let status = unsafe { mlx_sys::mlx_metal_is_available(&mut available) };
                status == 0 && available
            }
        }
    }

    /// Makes this device MLX's default (where operations run).
    pub fn make_default(self) {
        let tag = 1 + self as u8;
        if DEFAULT_DEVICE.swap(tag, Ordering::Relaxed) != tag {
            mlx_rs::Device::set_default(&match self {
                MlxDevice::Cpu => mlx_rs::Device::cpu(),
                MlxDevice::Gpu => mlx_rs::Device::gpu(),
            });
        }
    }
}

/// An MLX array. `conv` records a conv weight already in MLX layout (and for which kind);
/// `quantized`, a linear weight in MLX's quantized form, whose packed values `array` holds.
/// Cloning shares the arrays (MLX arrays are immutable; `write_at` replaces it).
#[derive(Clone)]
pub struct MlxTensor {
    array: Array,
    conv: Option<ConvKind>,
    quantized: Option<quantized::Affine>,
}

impl std::fmt::Debug for MlxTensor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "MlxTensor({:?}, {:?}{}{})",
            self.array.shape(),
            self.array.dtype(),
            match self.conv {
                Some(kind) => format!(", {kind:?} weight in MLX layout"),
                None => String::new(),
            },
            match &self.quantized {
                Some(q) => format!(", packed {}-bit weight", q.bits),
                None => String::new(),
            }
        )
    }
}

fn mlx_dtype(dtype: DType) -> Dtype {
    match dtype {
        DType::F32 => Dtype::Float32,
        DType::BF16 => Dtype::Bfloat16,
    }
}

fn dims(shape: &[usize]) -> Vec<i32> {
    shape
        .iter()
        .map(|&d| i32::try_from(d).expect("dimension fits in i32"))
        .collect()
}

fn axis(a: usize) -> i32 {
    i32::try_from(a).expect("axis fits in i32")
}

/// Operations are infallible by contract (shapes are checked at load): an MLX error is a bug.
fn check(r: Result<Array, Exception>) -> Array {
    r.unwrap_or_else(|e| panic!("MLX operation failed: {e}"))
}

/// Runs an mlx-c operation that mlx-rs does not expose publicly (slices).
fn raw_op(op: impl FnOnce(*mut mlx_sys::mlx_array, mlx_sys::mlx_stream) -> i32) -> Array {
    // Any mlx-rs operation installs its error handler (errors become return codes, not exits).
    static HANDLER: Once = Once::new();
    HANDLER.call_once(|| {
        check(ops::zeros::<f32>(&[1]));
    });
    let stream = mlx_rs::Stream::thread_local_or_default();
    // SAFETY: `res` is a fresh handle the operation fills in; ownership passes to the Array.
    unsafe {
        let mut res = mlx_sys::mlx_array_new();
        let status = op(&mut res, stream.as_ptr());
        let array = Array::from_ptr(res);
        assert_eq!(status, 0, "MLX slice operation failed");
        array
    }
}

/// `[start, stop)` bounds of a slice that is `len` long from `start` along `dim`.
fn slice_bounds(shape: &[i32], dim: usize, start: usize, len: usize) -> (Vec<i32>, Vec<i32>) {
    let mut lo = vec![0; shape.len()];
    let mut hi = shape.to_vec();
    lo[dim] = axis(start);
    hi[dim] = axis(start + len);
    (lo, hi)
}

/// `a`'s `len` entries from `start` along `dim` (a view).
fn slice(a: &Array, dim: usize, start: usize, len: usize) -> Array {
    let (lo, hi) = slice_bounds(a.shape(), dim, start, len);
    let strides = vec![1; lo.len()];
    // SAFETY: the bounds vectors live across the call and have the array's rank.
    raw_op(|res, stream| unsafe {
        mlx_sys::mlx_slice(
            res,
            a.as_ptr(),
            lo.as_ptr(),
            lo.len(),
            hi.as_ptr(),
            hi.len(),
            strides.as_ptr(),
            strides.len(),
            stream,
        )
    })
}

/// `bytes` (little-endian, as a checkpoint stores them) as `T`s: borrowed when aligned.
fn cast_le<T: Copy>(bytes: &[u8], decode: impl Fn(&[u8]) -> T) -> std::borrow::Cow<'_, [T]> {
    let size = std::mem::size_of::<T>();
    // SAFETY: f32/bf16 are plain 4/2-byte values for which every bit pattern is valid, and the
    // host is little-endian (asserted below), so an aligned byte slice reads as them directly.
    let (head, body, tail) = unsafe { bytes.align_to::<T>() };
    if cfg!(target_endian = "little") && head.is_empty() && tail.is_empty() {
        std::borrow::Cow::Borrowed(body)
    } else {
        std::borrow::Cow::Owned(bytes.chunks_exact(size).map(decode).collect())
    }
}

impl MlxTensor {
    fn wrap(array: Array) -> Self {
        MlxTensor {
            array,
            conv: None,
            quantized: None,
        }
    }

    fn op(r: Result<Array, Exception>) -> Self {
        Self::wrap(check(r))
    }

    /// The `[out, k]` linear weight that `blocks` stand for, in MLX's quantized form.
    fn packed(blocks: &[u8], format: QuantFormat, shape: [usize; 2]) -> Self {
        let (array, affine) = quantized::from_blocks(blocks, format, shape);
        MlxTensor {
            array,
            conv: None,
            quantized: Some(affine),
        }
    }

    /// The MLX array (for callers that need MLX directly).
    pub fn array(&self) -> &Array {
        &self.array
    }

    /// A scalar of this tensor's dtype (so it does not promote bf16 to f32).
    fn scalar(&self, value: f32) -> Array {
        check(Array::from_f32(value).as_dtype(self.array.dtype()))
    }

    /// Host copy in row-major order, each element converted by `f` from the array's own type
    /// (no conversion op, so reading an evaluated array runs no graph).
    fn host<U>(&self, f32s: impl Fn(f32) -> U, ints: impl Fn(i64) -> U) -> Vec<U> {
        if self.array.size() == 0 {
            return Vec::new();
        }
        evaluate(&[&self.array]);
        let mut row_major = false;
        // SAFETY: reads a flag of a valid (evaluated) array handle into a valid bool.
        let status =
            unsafe { mlx_sys::_mlx_array_is_row_contiguous(&mut row_major, self.array.as_ptr()) };
        let copy;
        let a = if status == 0 && row_major {
            &self.array
        } else {
            // A strided view: copy it into row-major order first.
            copy = check(self.array.contiguous());
            &copy
        };
        fn read<T: mlx_rs::ArrayElement + Copy, U>(a: &Array, f: impl Fn(T) -> U) -> Vec<U> {
            let slice = a
                .try_as_slice::<T>()
                .unwrap_or_else(|e| panic!("MLX array to host: {e}"));
            slice.iter().map(|&x| f(x)).collect()
        }
        match a.dtype() {
            Dtype::Float32 => read::<f32, U>(a, f32s),
            Dtype::Bfloat16 => read::<half::bf16, U>(a, |x| f32s(x.to_f32())),
            Dtype::Int64 => read::<i64, U>(a, ints),
            Dtype::Int32 => read::<i32, U>(a, |x| ints(x.into())),
            Dtype::Uint32 => read::<u32, U>(a, |x| ints(x.into())),
            other => panic!("MLX array to host: unexpected dtype {other:?}"),
        }
    }
}

impl TensorData for MlxTensor {
    type Device = MlxDevice;
    const BACKEND: &'static str = "mlx";

    fn from_f32(device: &MlxDevice, data: &[f32], shape: &[usize], dtype: DType) -> Self {
        device.make_default();
        let a = Array::from_slice(data, &dims(shape));
        Self::op(a.as_dtype(mlx_dtype(dtype)))
    }

    fn from_i64(device: &MlxDevice, data: &[i64], shape: &[usize]) -> Self {
        device.make_default();
        Self::wrap(Array::from_slice(data, &dims(shape)))
    }

    /// Copies the bytes into an MLX array (no sharing).
    unsafe fn from_raw(device: &MlxDevice, raw: &RawTensor<'_>, dtype: DType) -> Self {
        device.make_default();
        let shape = dims(&raw.shape);
        let a = match raw.dtype {
            DType::F32 => Array::from_slice(
                &cast_le(raw.data, |b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])),
                &shape,
            ),
            DType::BF16 => Array::from_slice(
                &cast_le(raw.data, |b| {
                    half::bf16::from_bits(u16::from_le_bytes([b[0], b[1]]))
                }),
                &shape,
            ),
        };
        if raw.dtype == dtype {
            Self::wrap(a)
        } else {
            Self::op(a.as_dtype(mlx_dtype(dtype)))
        }
    }

    fn is_cpu(device: &MlxDevice) -> bool {
        *device == MlxDevice::Cpu
    }

    fn zeros(device: &MlxDevice, shape: &[usize], dtype: DType) -> Self {
        device.make_default();
        Self::op(ops::zeros_dtype(&dims(shape), mlx_dtype(dtype)))
    }

    fn shape(&self) -> Vec<usize> {
        self.array.shape().iter().map(|&d| d as usize).collect()
    }

    fn dtype(&self) -> DType {
        match self.array.dtype() {
            Dtype::Bfloat16 => DType::BF16,
            _ => DType::F32,
        }
    }

    fn to_dtype(&self, dtype: DType) -> Self {
        Self::op(self.array.as_dtype(mlx_dtype(dtype)))
    }

    fn to_vec_f32(&self) -> Vec<f32> {
        self.host(|x| x, |x| x as f32)
    }

    fn to_vec_i64(&self) -> Vec<i64> {
        self.host(|x| x as i64, |x| x)
    }

    fn eval(tensors: &[&Self]) {
        evaluate(&tensors.iter().map(|t| &t.array).collect::<Vec<_>>());
    }
}

impl Elementwise for MlxTensor {
    fn add(&self, rhs: &Self) -> Self {
        Self::op(ops::add(&self.array, &rhs.array))
    }

    fn sub(&self, rhs: &Self) -> Self {
        Self::op(ops::subtract(&self.array, &rhs.array))
    }

    fn mul(&self, rhs: &Self) -> Self {
        Self::op(ops::multiply(&self.array, &rhs.array))
    }

    fn div(&self, rhs: &Self) -> Self {
        Self::op(ops::divide(&self.array, &rhs.array))
    }

    fn scale(&self, factor: f32) -> Self {
        Self::op(ops::multiply(&self.array, self.scalar(factor)))
    }

    fn add_scalar(&self, value: f32) -> Self {
        Self::op(ops::add(&self.array, self.scalar(value)))
    }

    fn silu(&self) -> Self {
        Self::op(mlx_rs::nn::silu(&self.array))
    }

    fn gelu(&self) -> Self {
        Self::op(mlx_rs::nn::gelu(&self.array))
    }

    fn clamp(&self, lo: f32, hi: f32) -> Self {
        let upper = check(ops::minimum(&self.array, self.scalar(hi)));
        Self::op(ops::maximum(&upper, self.scalar(lo)))
    }

    fn sin(&self) -> Self {
        Self::op(ops::sin(&self.array))
    }

    fn tanh(&self) -> Self {
        Self::op(ops::tanh(&self.array))
    }

    fn elu(&self) -> Self {
        let negative = check(ops::minimum(&self.array, self.scalar(0.0)));
        let decay = check(ops::subtract(check(ops::exp(&negative)), self.scalar(1.0)));
        let positive = check(ops::maximum(&self.array, self.scalar(0.0)));
        Self::op(ops::add(&positive, &decay))
    }

    fn round(&self) -> Self {
        // MLX rounds half to even, as torch.round does.
        Self::op(ops::round(&self.array, None))
    }
}

impl Layout for MlxTensor {
    /// A quantized table's rows come dequantized, in f32 (exact, as on libtorch).
    fn embedding(&self, ids: &Self) -> Self {
        let take = |a: &Array| check(a.take_axis(&ids.array, 0));
        match &self.quantized {
            Some(affine) => {
                let wide = affine.map(|a| check(take(a).as_dtype(Dtype::Float32)));
                Self::op(quantized::dequantize(&take(&self.array), &wide))
            }
            None => Self::wrap(take(&self.array)),
        }
    }

    fn reshape(&self, shape: &[usize]) -> Self {
        Self::op(self.array.reshape(&dims(shape)))
    }

    fn transpose(&self, a: usize, b: usize) -> Self {
        Self::op(self.array.swap_axes(axis(a), axis(b)))
    }

    fn broadcast_to(&self, shape: &[usize]) -> Self {
        Self::op(ops::broadcast_to(&self.array, &dims(shape)))
    }

    /// A quantized weight narrows by output rows only (`linear_rows`).
    fn narrow(&self, dim: usize, start: usize, len: usize) -> Self {
        let Some(affine) = &self.quantized else {
            return Self::wrap(slice(&self.array, dim, start, len));
        };
        assert_eq!(dim, 0, "a quantized weight narrows by output rows");
        MlxTensor {
            array: slice(&self.array, 0, start, len),
            conv: None,
            quantized: Some(affine.map(|a| slice(a, 0, start, len))),
        }
    }

    /// Quantized weights concatenate by output rows only (fused products).
    fn cat(parts: &[&Self], dim: usize) -> Self {
        let arrays: Vec<&Array> = parts.iter().map(|p| &p.array).collect();
        let array = check(ops::concatenate(&arrays, axis(dim)));
        let Some(first) = parts.first().and_then(|p| p.quantized.as_ref()) else {
            return Self::wrap(array);
        };
        let affines: Vec<&quantized::Affine> =
            parts.iter().filter_map(|p| p.quantized.as_ref()).collect();
        assert!(
            dim == 0
                && affines.len() == parts.len()
                && affines.iter().all(|q| q.bits == first.bits),
            "quantized weights concatenate by output rows, with weights of their format"
        );
        let stack = |part: fn(&quantized::Affine) -> &Array| {
            let arrays: Vec<&Array> = affines.iter().map(|&q| part(q)).collect();
            check(ops::concatenate(&arrays, 0))
        };
        MlxTensor {
            array,
            conv: None,
            quantized: Some(quantized::Affine {
                scales: stack(|q| &q.scales),
                biases: stack(|q| &q.biases),
                bits: first.bits,
            }),
        }
    }

    fn sum_dim(&self, dim: usize) -> Self {
        Self::op(self.array.sum_axis(axis(dim), false))
    }

    fn argmax_last(&self) -> Self {
        Self::op(ops::indexing::argmax_axis(&self.array, -1, false))
    }

    fn write_at(&mut self, starts: &[usize], src: &Self) {
        let lo: Vec<i32> = starts.iter().map(|&s| axis(s)).collect();
        let hi: Vec<i32> = lo
            .iter()
            .zip(src.array.shape())
            .map(|(s, n)| s + n)
            .collect();
        let strides = vec![1; lo.len()];
        let (a, update) = (&self.array, &src.array);
        // SAFETY: as in `narrow`. The result replaces `self`; MLX updates in place when the old
        // array has no other user.
        let updated = raw_op(|res, stream| unsafe {
            mlx_sys::mlx_slice_update(
                res,
                a.as_ptr(),
                update.as_ptr(),
                lo.as_ptr(),
                lo.len(),
                hi.as_ptr(),
                hi.len(),
                strides.as_ptr(),
                strides.len(),
                stream,
            )
        });
        self.array = updated;
    }
}

impl NetworkOps for MlxTensor {
    type Rope = f64;

    fn linear(&self, weight: &Self) -> Self {
        match &weight.quantized {
            Some(affine) => Self::op(quantized::linear(&self.array, &weight.array, affine)),
            None => Self::op(ops::matmul(&self.array, weight.array.t())),
        }
    }

    fn rms_norm(&self, weight: &Self, eps: f64) -> Self {
        // Fused; accumulates in f32 and returns the input dtype.
        Self::op(fast::rms_norm(&self.array, Some(&weight.array), eps as f32))
    }

    /// MLX's fused kernel computes the angles on the device: only theta is kept.
    fn rope_table(_: &Self::Device, _positions: usize, _head_dim: usize, theta: f64) -> f64 {
        theta
    }

    fn rope_interleaved(&self, theta: &f64, start: usize) -> Self {
        let theta = *theta;
        let head_dim = *self.array.shape().last().expect("rank >= 1");
        // traditional = true: rotates the pairs (x[2i], x[2i + 1]); positions along axis -2.
        Self::op(fast::rope(
            &self.array,
            head_dim,
            true,
            theta as f32,
            1.0,
            axis(start),
            None,
        ))
    }

    fn attention(
        q: &Self,
        k: &Self,
        v: &Self,
        bias: Option<&Self>,
        causal: bool,
        scale: f64,
    ) -> Self {
        use fast::ScaledDotProductAttentionMask as Mask;
        let (l, s) = (q.array.shape()[2], k.array.shape()[2]);
        let mask = match bias {
            Some(b) => Some(Mask::Array(&b.array)),
            None if causal && l == s => Some(Mask::Causal),
            None => None,
        };
        Self::op(fast::scaled_dot_product_attention(
            &q.array,
            &k.array,
            &v.array,
            scale as f32,
            mask,
            None,
        ))
    }

    fn prepare_conv_weight(weight: &Self, kind: ConvKind) -> Self {
        match weight.conv {
            Some(done) if done == kind => return weight.clone(),
            Some(done) => panic!("conv weight prepared for {done:?}, used as {kind:?}"),
            None => {}
        }
        // PyTorch conv [out, in, k] and conv-transpose [in, out, k] -> MLX [out, k, in].
        let axes: &[i32] = match kind {
            ConvKind::Conv => &[0, 2, 1],
            ConvKind::Transpose => &[1, 2, 0],
        };
        let array = check(check(weight.array.transpose_axes(axes)).contiguous());
        check(array.eval().map(|()| array.clone()));
        MlxTensor {
            array,
            conv: Some(kind),
            quantized: None,
        }
    }

    fn conv1d(&self, weight: &Self, stride: usize) -> Self {
        assert_eq!(
            weight.conv,
            Some(ConvKind::Conv),
            "conv1d needs a weight from prepare_conv_weight(.., Conv)"
        );
        Self::op(ops::conv1d(
            &self.array,
            &weight.array,
            axis(stride),
            0,
            1,
            1,
        ))
    }

    fn conv1d_dilated(&self, weight: &Self, dilation: usize, groups: usize) -> Self {
        assert_eq!(
            weight.conv,
            Some(ConvKind::Conv),
            "conv1d_dilated needs a weight from prepare_conv_weight(.., Conv)"
        );
        Self::op(ops::conv1d(
            &self.array,
            &weight.array,
            1,
            0,
            axis(dilation),
            axis(groups),
        ))
    }

    fn conv_transpose1d(&self, weight: &Self, stride: usize) -> Self {
        assert_eq!(
            weight.conv,
            Some(ConvKind::Transpose),
            "conv_transpose1d needs a weight from prepare_conv_weight(.., Transpose)"
        );
        Self::op(ops::conv_transpose1d(
            &self.array,
            &weight.array,
            axis(stride),
            0,
            1,
            0,
            1,
        ))
    }

    fn pad_time(&self, left: usize, right: usize, mode: PadMode) -> Self {
        if left == 0 && right == 0 {
            return self.clone();
        }
        let widths = [(0, 0), (axis(left), axis(right)), (0, 0)];
        match mode {
            PadMode::Zero => Self::op(ops::pad(
                &self.array,
                &widths,
                self.scalar(0.0),
                ops::PadMode::Constant,
            )),
            PadMode::Replicate => Self::op(ops::pad(
                &self.array,
                &widths,
                self.scalar(0.0),
                ops::PadMode::Edge,
            )),
            PadMode::Reflect => {
                // MLX has no reflect mode: gather the mirrored time indices.
                let len = self.array.shape()[1] as i64;
                assert!(
                    (left as i64) < len && (right as i64) < len,
                    "reflect padding of {left}/{right} needs more than {len} samples"
                );
                let idx: Vec<i32> = (-(left as i64)..len + right as i64)
                    .map(|i| {
                        let r = if i < 0 {
                            -i
                        } else if i >= len {
                            2 * (len - 1) - i
                        } else {
                            i
                        };
                        r as i32
                    })
                    .collect();
                let n = idx.len() as i32;
                Self::op(self.array.take_axis(Array::from_slice(&idx, &[n]), 1))
            }
        }
    }
}

/// Quantized weights are multiplied by MLX's `quantized_matmul` on every device.
impl Tensor for MlxTensor {
    fn multiplies_quantized(_device: &MlxDevice, _format: QuantFormat) -> bool {
        true
    }

    fn quantize_weight(&self, format: QuantFormat) -> Option<Self> {
        let &[out, k] = self.shape().as_slice() else {
            return None;
        };
        if !QuantFormat::fits(k) || self.quantized.is_some() {
            return None;
        }
        // Our blocks, so that a folder quantized at load multiplies the weights a stored one
        // holds.
        let blocks = super::quantized::quantize(format, &self.to_vec_f32(), k);
        Some(Self::packed(&blocks, format, [out, k]))
    }

    /// Repacked into MLX's form: a copy (MLX does not read our blocks in place).
    unsafe fn from_quantized(
        device: &MlxDevice,
        blocks: &[u8],
        format: QuantFormat,
        shape: [usize; 2],
        _dtype: DType,
    ) -> Self {
        device.make_default();
        Self::packed(blocks, format, shape)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DEV: MlxDevice = MlxDevice::Cpu;

    fn t(data: &[f32], shape: &[usize]) -> MlxTensor {
        MlxTensor::from_f32(&DEV, data, shape, DType::F32)
    }

    fn close(a: &[f32], b: &[f32]) {
        assert_eq!(a.len(), b.len());
        for (x, y) in a.iter().zip(b) {
            assert!((x - y).abs() < 1e-5, "{a:?} vs {b:?}");
        }
    }

    #[test]
    fn conv_layouts_and_idempotent_weight_conversion() {
        super::super::conformance::conv_layouts_and_idempotent_weight_conversion::<MlxTensor>(&DEV);
    }

    #[test]
    fn windowed_pool_attention_sees_only_its_window() {
        super::super::conformance::windowed_pool_attention_sees_only_its_window::<MlxTensor>(&DEV);
    }

    #[test]
    fn gelu_is_the_exact_erf_form() {
        super::super::conformance::gelu_is_the_exact_erf_form::<MlxTensor>(&DEV);
    }

    #[test]
    fn dilated_grouped_conv_matches_reference() {
        super::super::conformance::dilated_grouped_conv_matches_reference::<MlxTensor>(&DEV);
    }

    #[test]
    fn sin_matches_f64() {
        super::super::conformance::sin_matches_f64::<MlxTensor>(&DEV);
    }

    #[test]
    fn elu_matches_f64() {
        super::super::conformance::elu_matches_f64::<MlxTensor>(&DEV);
    }

    #[test]
    fn tanh_matches_f64() {
        super::super::conformance::tanh_matches_f64::<MlxTensor>(&DEV);
    }

    #[test]
    fn conv_weight_conversion_is_idempotent() {
        // PyTorch conv weight [out=2, in=3, k=2].
        let w = t(&(0..12).map(|i| i as f32).collect::<Vec<_>>(), &[2, 3, 2]);
        let once = MlxTensor::prepare_conv_weight(&w, ConvKind::Conv);
        let twice = MlxTensor::prepare_conv_weight(&once, ConvKind::Conv);
        assert_eq!(once.shape(), vec![2, 2, 3]);
        assert_eq!(twice.shape(), vec![2, 2, 3]);
        assert_eq!(once.to_vec_f32(), twice.to_vec_f32());
        // w[o, i, k] lands at [o, k, i].
        assert_eq!(once.to_vec_f32()[..6], [0.0, 2.0, 4.0, 1.0, 3.0, 5.0]);
        let tw = t(&(0..12).map(|i| i as f32).collect::<Vec<_>>(), &[3, 2, 2]);
        let once = MlxTensor::prepare_conv_weight(&tw, ConvKind::Transpose);
        let twice = MlxTensor::prepare_conv_weight(&once, ConvKind::Transpose);
        assert_eq!(twice.shape(), vec![2, 2, 3]);
        assert_eq!(once.to_vec_f32(), twice.to_vec_f32());
    }

    #[test]
    fn conv_and_transposed_conv_match_pytorch_semantics() {
        // x NLC [1, 4, 2]; conv weight [out=1, in=2, k=2].
        let x = t(&[1.0, 10.0, 2.0, 20.0, 3.0, 30.0, 4.0, 40.0], &[1, 4, 2]);
        let w =
            MlxTensor::prepare_conv_weight(&t(&[1.0, 2.0, 3.0, 4.0], &[1, 2, 2]), ConvKind::Conv);
        // y[t] = 1*x0[t] + 2*x0[t+1] + 3*x1[t] + 4*x1[t+1]
        let y = x.conv1d(&w, 1);
        assert_eq!(y.shape(), vec![1, 3, 1]);
        close(&y.to_vec_f32(), &[115.0, 188.0, 261.0]);
        let y2 = x.conv1d(&w, 2);
        close(&y2.to_vec_f32(), &[115.0, 261.0]);
        // Transposed: weight [in=2, out=1, k=2]; y[s*t + j] += sum_i x_i[t] w[i, 0, j].
        let tw = MlxTensor::prepare_conv_weight(
            &t(&[1.0, 2.0, 3.0, 4.0], &[2, 1, 2]),
            ConvKind::Transpose,
        );
        let x = t(&[1.0, 10.0, 2.0, 20.0], &[1, 2, 2]);
        let y = x.conv_transpose1d(&tw, 2);
        assert_eq!(y.shape(), vec![1, 4, 1]);
        close(&y.to_vec_f32(), &[31.0, 42.0, 62.0, 84.0]);
    }

    #[test]
    fn padding_modes() {
        let x = t(&[1.0, 2.0, 3.0, 4.0], &[1, 4, 1]);
        close(
            &x.pad_time(2, 1, PadMode::Reflect).to_vec_f32(),
            &[3.0, 2.0, 1.0, 2.0, 3.0, 4.0, 3.0],
        );
        close(
            &x.pad_time(2, 1, PadMode::Replicate).to_vec_f32(),
            &[1.0, 1.0, 1.0, 2.0, 3.0, 4.0, 4.0],
        );
        close(
            &x.pad_time(1, 2, PadMode::Zero).to_vec_f32(),
            &[0.0, 1.0, 2.0, 3.0, 4.0, 0.0, 0.0],
        );
    }

    #[test]
    fn slices_and_cache_writes() {
        let mut cache = MlxTensor::zeros(&DEV, &[1, 1, 4, 2], DType::F32);
        cache.write_at(&[0, 0, 1, 0], &t(&[1.0, 2.0, 3.0, 4.0], &[1, 1, 2, 2]));
        close(
            &cache.to_vec_f32(),
            &[0.0, 0.0, 1.0, 2.0, 3.0, 4.0, 0.0, 0.0],
        );
        close(&cache.narrow(2, 1, 2).to_vec_f32(), &[1.0, 2.0, 3.0, 4.0]);
        close(&cache.narrow(3, 1, 1).to_vec_f32(), &[0.0, 2.0, 4.0, 0.0]);
    }

    #[test]
    fn rope_pairs_are_interleaved() {
        // One head, position 1, head_dim 4: pairs (x0, x1) and (x2, x3).
        let x = t(&[1.0, 0.0, 1.0, 0.0], &[1, 1, 1, 4]);
        let rope = MlxTensor::rope_table(&DEV, 4, 4, 10_000.0);
        let y = x.rope_interleaved(&rope, 1).to_vec_f32();
        let inv1 = 1.0 / 10_000f32.powf(0.5);
        close(&y, &[1f32.cos(), 1f32.sin(), inv1.cos(), inv1.sin()]);
    }

    #[test]
    fn scalars_keep_bf16() {
        let x = MlxTensor::from_f32(&DEV, &[1.0, 2.5], &[2], DType::BF16);
        assert_eq!(x.scale(0.5).dtype(), DType::BF16);
        assert_eq!(x.add_scalar(1.0).clamp(0.0, 3.0).dtype(), DType::BF16);
        close(&x.add_scalar(1.0).clamp(0.0, 3.0).to_vec_f32(), &[2.0, 3.0]);
        close(
            &t(&[0.5, 1.5, 2.5, -0.5], &[4]).round().to_vec_f32(),
            &[0.0, 2.0, 2.0, -0.0],
        );
    }

    #[test]
    fn gqa_attention_with_bias_and_causal_mask() {
        // 2 query heads share 1 kv head; the bias masks the second key for every query.
        let q = t(&[1.0; 8], &[1, 2, 2, 2]);
        let k = t(&[1.0, 0.0, 0.0, 1.0], &[1, 1, 2, 2]);
        let v = t(&[1.0, 2.0, 3.0, 4.0], &[1, 1, 2, 2]);
        let inf = f32::NEG_INFINITY;
        let bias = t(&[0.0, inf, 0.0, inf, 0.0, inf, 0.0, inf], &[1, 2, 2, 2]);
        let out = MlxTensor::attention(&q, &k, &v, Some(&bias), false, 1.0);
        close(&out.to_vec_f32(), &[1.0, 2.0, 1.0, 2.0, 1.0, 2.0, 1.0, 2.0]);
        let causal = MlxTensor::attention(&q, &k, &v, None, true, 1.0).to_vec_f32();
        // Query 0 sees key 0 only; query 1 sees both (equal scores).
        close(&causal[..4], &[1.0, 2.0, 2.0, 3.0]);
    }

    #[test]
    fn raw_bytes_and_embedding() {
        let bytes: Vec<u8> = [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0]
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect();
        // Unaligned on purpose: copied element by element.
        let mut shifted = vec![0u8];
        shifted.extend(&bytes);
        let raw = RawTensor {
            dtype: DType::F32,
            shape: vec![3, 2],
            data: &shifted[1..],
        };
        let table = unsafe { MlxTensor::from_raw(&DEV, &raw, DType::BF16) };
        assert_eq!(table.dtype(), DType::BF16);
        let ids = MlxTensor::from_i64(&DEV, &[2, 0], &[2]);
        let rows = table.embedding(&ids);
        assert_eq!(rows.shape(), vec![2, 2]);
        close(&rows.to_vec_f32(), &[5.0, 6.0, 1.0, 2.0]);
        assert_eq!(rows.sum_dim(0).argmax_last().to_vec_i64(), vec![1]);
    }

    /// Our q8 and q4 blocks repacked into MLX's form stand for the same weights, bit for bit
    /// (a folder quantized at load and a stored one too); `quantized_matmul` then multiplies
    /// them as the dequantized weight, also a narrowed one (`linear_rows`) and two
    /// concatenated (fused products).
    #[test]
    fn quantized_weights_are_our_values_and_multiply_as_them() {
        use crate::tensor::quantized::{dequantize, quantize};
        let (out, k) = (24, 96);
        // Values of both signs and many magnitudes, so that blocks use their whole range.
        let w: Vec<f32> = (0..out * k)
            .map(|i| ((i * 7919 % 1009) as f32 / 504.5 - 1.0) * (1 + i % 7) as f32)
            .collect();
        let x: Vec<f32> = (0..3 * k)
            .map(|i| (i * 31 % 97) as f32 / 48.5 - 1.0)
            .collect();
        let x = t(&x, &[3, k]);
        let near = |a: &MlxTensor, b: &MlxTensor| {
            let (a, b) = (a.to_vec_f32(), b.to_vec_f32());
            assert_eq!(a.len(), b.len());
            for (p, q) in a.iter().zip(&b) {
                assert!((p - q).abs() <= 1e-4 * q.abs().max(1.0), "{p} vs {q}");
            }
        };
        for format in QuantFormat::ALL {
            let blocks = quantize(format, &w, k);
            let ours = dequantize(format, &blocks);
            // SAFETY: `blocks` outlive the tensor (which copies them anyway).
            let stored =
                unsafe { MlxTensor::from_quantized(&DEV, &blocks, format, [out, k], DType::F32) };
            let ids = MlxTensor::from_i64(&DEV, &(0..out as i64).collect::<Vec<_>>(), &[out]);
            let theirs = stored.embedding(&ids);
            assert_eq!(theirs.to_vec_f32(), ours, "{format}: MLX's values");
            let at_load = t(&w, &[out, k])
                .quantize_weight(format)
                .expect("quantizable");
            assert_eq!(
                at_load.to_vec_i64(),
                stored.to_vec_i64(),
                "{format}: packed values"
            );

            let dense = t(&ours, &[out, k]);
            near(&x.linear(&stored), &x.linear(&dense));
            near(
                &x.linear_rows(&stored, 8, 10),
                &x.linear(&dense.narrow(0, 8, 10)),
            );
            let fused = MlxTensor::cat(&[&stored, &at_load.narrow(0, 0, 4)], 0);
            let fused_dense = MlxTensor::cat(&[&dense, &dense.narrow(0, 0, 4)], 0);
            near(&x.linear(&fused), &x.linear(&fused_dense));
            let bf16 = x.to_dtype(DType::BF16).linear(&stored);
            assert_eq!(
                bf16.dtype(),
                DType::BF16,
                "{format}: a bf16 product stays bf16"
            );
        }
    }
}
