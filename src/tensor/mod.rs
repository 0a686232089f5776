//! The small tensor interface the model is written against.
//!
//! The model code (`crate::models`) only uses these operations, so a backend (libtorch, and MLX
//! behind the `mlx` feature) implements them once: four small core traits ([`TensorData`],
//! [`Elementwise`], [`Layout`], [`NetworkOps`]) and [`Tensor`], their sum, whose fused
//! operations it may override with faster paths. Layout conventions are fixed here, and
//! a backend converts internally: sequences are `[batch, time, channels]` (NLC) everywhere,
//! attention tensors are `[batch, heads, time, head_dim]`, linear weights are `[out, in]`, and
//! conv weights are handed over in PyTorch layout once, through `prepare_conv_weight`.
//!
//! `kernels` holds the CPU kernels and which of them a libtorch CPU tensor runs; `profile` the
//! counters `bench` reads.

#[cfg(test)]
pub(crate) mod conformance;
pub mod cuda_graph;
pub mod kernels;
#[cfg(feature = "mlx")]
pub mod mlx_backend;
pub mod profile;
pub mod tch_backend;

// What code outside the backends uses of the kernels and of the counters.
pub use kernels::{cpu_gemv, quantized};
pub use profile::{linear_multiply_adds, timed_products, ROW_CLASSES};

use cuda_graph::{CudaGraph, GraphError};
use quantized::QuantFormat;
use std::cell::OnceCell;
use std::fmt;

/// The products a packed weight takes (`Tensor::pack_for_few_rows`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Products {
    /// A few rows at a time, many times over: the flow head's.
    FewRows,
    /// Those, and many rows at once too: a backbone's steps and its prompt.
    AlsoManyRows,
    /// A few f32 rows at a time by a bf16 weight (the semantic head's): packed, it is read at
    /// half the bytes of its f32 copy.
    FloatRows,
}

/// Work beside a product `x @ weight.T` that a backend may do in the product's own passes
/// ([`Tensor::fused_linear`]), with the bits of the operations apart.
#[derive(Clone, Copy)]
pub struct Fused<'a, T> {
    /// `x` is `[.., 2 in]`, a feed-forward's gate then its up projection: the product takes
    /// `silu(gate) · up`.
    pub gated: bool,
    /// Added to the product: a residual connection.
    pub residual: Option<&'a T>,
}

/// Element types the engine computes in.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DType {
    F32,
    BF16,
}

impl DType {
    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            DType::F32 => 4,
            DType::BF16 => 2,
        }
    }

    /// Rounds an f32 scalar to what this dtype can hold, so scalar constants mix with tensors
    /// the way a 0-dim tensor of this dtype would in the reference.
    pub fn round_scalar(self, x: f32) -> f32 {
        match self {
            DType::F32 => x,
            DType::BF16 => half::bf16::from_f32(x).to_f32(),
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            DType::F32 => "f32",
            DType::BF16 => "bf16",
        })
    }
}

/// Tensor bytes as stored in a checkpoint (little-endian), borrowed from a memory map.
pub struct RawTensor<'a> {
    pub dtype: DType,
    pub shape: Vec<usize>,
    pub data: &'a [u8],
}

/// How `pad_time` fills the new samples.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PadMode {
    /// Repeat the edge sample.
    Replicate,
    /// Mirror around the edge sample (without repeating it).
    Reflect,
    /// Zeros.
    Zero,
}

/// Which kind of convolution a weight is prepared for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConvKind {
    /// PyTorch `Conv1d` weight `[out, in, k]`.
    Conv,
    /// PyTorch `ConvTranspose1d` weight `[in, out, k]`.
    Transpose,
}

/// A tensor of one backend. Operations are infallible: shapes are validated when weights load,
/// so a shape error here is a bug, and the inference worker turns the panic into a failed
/// request.
///
/// A backend implements the core, four small traits grouped by purpose: [`TensorData`] (the
/// device, construction, host copies and dtype), [`Elementwise`] (arithmetic and
/// activations), [`Layout`] (shape, slicing, indexing) and [`NetworkOps`] (products, norms,
/// rotary embeddings, attention and convolutions). `Tensor` is their sum plus methods made of
/// them: fused operations, which a backend overrides where it has a faster path for them
/// (libtorch's CPU kernels, `kernels::cpu`), forms of a weight that only some backends have,
/// and what a device can be asked (waits, timings, CUDA graphs). Generic code bounded by
/// `T: Tensor` sees every method; code on a concrete backend type imports the traits whose
/// methods it calls.
pub trait TensorData: Clone + Sized + 'static {
    type Device: Clone + fmt::Debug + Send + Sync + 'static;
    /// The backend's name (logs).
    const BACKEND: &'static str;

    fn from_f32(device: &Self::Device, data: &[f32], shape: &[usize], dtype: DType) -> Self;
    fn from_i64(device: &Self::Device, data: &[i64], shape: &[usize]) -> Self;
    /// Checkpoint bytes as a tensor of `dtype`; shares the bytes where the backend allows.
    ///
    /// # Safety
    /// When it shares, the tensor points into `raw.data`: the caller keeps that memory alive
    /// and unchanged for as long as the tensor (and any view of it) lives.
    unsafe fn from_raw(device: &Self::Device, raw: &RawTensor<'_>, dtype: DType) -> Self;
    fn zeros(device: &Self::Device, shape: &[usize], dtype: DType) -> Self;
    /// Whether `device` is the host CPU.
    fn is_cpu(device: &Self::Device) -> bool;
    fn shape(&self) -> Vec<usize>;
    fn dtype(&self) -> DType;
    fn to_dtype(&self, dtype: DType) -> Self;
    /// Host copies. On a lazy backend (MLX) these evaluate what is not evaluated yet; the
    /// model only reads tensors it has passed to `eval`, or at the very end of a graph.
    fn to_vec_f32(&self) -> Vec<f32>;
    fn to_vec_i64(&self) -> Vec<i64>;
    /// Computes `tensors` (and what they depend on) now. Eager backends (libtorch) have
    /// nothing to do; a lazy one (MLX) runs the graph built since the last evaluation. The
    /// model calls it at its outer loop boundaries only: once per backbone pass (the hidden
    /// states and the KV cache), once per flow-head frame (semantic and acoustic codes
    /// together); a codec decode is evaluated once by its final host copy.
    fn eval(tensors: &[&Self]);
}

/// Element-wise operations: arithmetic (broadcasting over axes of size 1) and activations.
pub trait Elementwise: TensorData {
    fn add(&self, rhs: &Self) -> Self;
    fn sub(&self, rhs: &Self) -> Self;
    fn mul(&self, rhs: &Self) -> Self;
    fn div(&self, rhs: &Self) -> Self;
    fn scale(&self, factor: f32) -> Self;
    fn add_scalar(&self, value: f32) -> Self;
    fn silu(&self) -> Self;
    /// Exact (erf) GELU, `x/2 · (1 + erf(x/√2))`, as `torch.nn.functional.gelu` computes it.
    fn gelu(&self) -> Self;
    fn clamp(&self, lo: f32, hi: f32) -> Self;
    /// Elementwise sine (SnakeBeta activations).
    fn sin(&self) -> Self;
    /// Elementwise hyperbolic tangent (GPT-2's tanh-approximated GELU).
    fn tanh(&self) -> Self;
    /// ELU with α = 1, `x` for `x > 0` and `e^x - 1` below (the Mimi encoder's activation).
    fn elu(&self) -> Self;
    /// Round to nearest, ties to even (what `torch.round` does).
    fn round(&self) -> Self;
}

/// Shape, layout and indexing: views, copies between positions, reductions to an index.
pub trait Layout: TensorData {
    /// Rows of `self` (`[rows, dim]`) picked by the i64 tensor `ids`, shaped `ids.shape + [dim]`.
    fn embedding(&self, ids: &Self) -> Self;
    fn reshape(&self, shape: &[usize]) -> Self;
    fn transpose(&self, a: usize, b: usize) -> Self;
    fn narrow(&self, dim: usize, start: usize, len: usize) -> Self;
    /// `self` repeated along its axes of size 1 to `shape` (of the same rank).
    fn broadcast_to(&self, shape: &[usize]) -> Self;
    fn cat(parts: &[&Self], dim: usize) -> Self;
    fn sum_dim(&self, dim: usize) -> Self;
    /// Index of the maximum along the last axis, as an i64 tensor.
    fn argmax_last(&self) -> Self;
    /// Copies `src` into `self` at offsets `starts`, one per dimension (KV pool writes).
    fn write_at(&mut self, starts: &[usize], src: &Self);
}

/// The network's primitives: products, normalisation, rotary embeddings, attention and
/// convolutions.
pub trait NetworkOps: TensorData {
    /// Rotary-embedding state of a model (see `rope_table`).
    type Rope;

    /// `x @ weight.T` for `weight` `[out, in]`, or as packed by `pack_for_few_rows`.
    fn linear(&self, weight: &Self) -> Self;
    /// RMSNorm over the last axis, computed in f32, returned in the input dtype.
    fn rms_norm(&self, weight: &Self, eps: f64) -> Self;
    /// What `rope_interleaved` reads for positions `0..positions` (e.g. cos/sin tables),
    /// built once per model on its device.
    fn rope_table(
        device: &Self::Device,
        positions: usize,
        head_dim: usize,
        theta: f64,
    ) -> Self::Rope;
    /// Rotary embedding on interleaved pairs `(x[2i], x[2i+1])` (Mistral's native layout) for
    /// `x` `[batch, heads, time, head_dim]` at positions `start..start + time`.
    fn rope_interleaved(&self, rope: &Self::Rope, start: usize) -> Self;
    /// Scaled dot-product attention. `q` `[b, hq, l, d]`, `k`/`v` `[b, hkv, s, d]` with `hq` a
    /// multiple of `hkv` (query head `h` reads kv head `h / (hq / hkv)`). `bias` is added to the
    /// scores (`-inf` masks); `causal` masks keys after the query when `l == s`.
    fn attention(
        q: &Self,
        k: &Self,
        v: &Self,
        bias: Option<&Self>,
        causal: bool,
        scale: f64,
    ) -> Self;

    /// Converts a conv weight from PyTorch layout into the backend's own. Idempotent: a weight
    /// already converted is returned unchanged.
    fn prepare_conv_weight(weight: &Self, kind: ConvKind) -> Self;
    /// Conv1d without padding on NLC input, with a weight from `prepare_conv_weight`.
    fn conv1d(&self, weight: &Self, stride: usize) -> Self;
    /// Conv1d without padding, stride 1, with `dilation` between taps and the channels split
    /// into `groups` independent convolutions (depthwise when `groups` equals the channels),
    /// on NLC input, with a weight from `prepare_conv_weight` (PyTorch `[out, in / groups, k]`).
    fn conv1d_dilated(&self, weight: &Self, dilation: usize, groups: usize) -> Self;
    /// ConvTranspose1d without padding on NLC input, with a weight from `prepare_conv_weight`.
    fn conv_transpose1d(&self, weight: &Self, stride: usize) -> Self;
    /// Pads the time axis of NLC input.
    fn pad_time(&self, left: usize, right: usize, mode: PadMode) -> Self;
}

/// The whole interface the model code uses: the core traits, and what is made of them.
pub trait Tensor: TensorData + Elementwise + Layout + NetworkOps {
    // Fused operations, made of the core unless a backend has a faster path for them.
    /// `max(x, 0)` in every dtype. Bounds are infinite, never `f32::MAX`, which a bf16
    /// tensor's clamp refuses as an overflow.
    fn relu(&self) -> Self {
        self.clamp(0.0, f32::INFINITY)
    }
    /// `x` where positive, `slope · x` elsewhere (HiFi-GAN), for `0 ≤ slope ≤ 1`. The default
    /// sums the two clamped halves, which gives exactly `x` or `slope · x` per element.
    fn leaky_relu(&self, slope: f32) -> Self {
        self.relu()
            .add(&self.clamp(f32::NEG_INFINITY, 0.0).scale(slope))
    }
    /// `x @ weight[start..start + len].T`: the products of some of a weight's outputs, for a
    /// weight as `linear` takes it (packed or not).
    fn linear_rows(&self, weight: &Self, start: usize, len: usize) -> Self {
        self.linear(&weight.narrow(0, start, len))
    }
    /// `residual + x @ weight.T`, rounded as the product and the add apart are: a residual
    /// connection around an output projection.
    fn linear_add(&self, weight: &Self, residual: &Self) -> Self {
        let fused = Fused {
            gated: false,
            residual: Some(residual),
        };
        self.fused_linear(weight, fused)
            .unwrap_or_else(|| residual.add(&self.linear(weight)))
    }
    /// `(silu(gate) · up) @ weight.T` for `self` `[.., 2 hidden]`, the gate then the up
    /// projection (a feed-forward's, from one product), plus `residual` where given; rounded
    /// as those operations apart are.
    fn gated_linear(&self, weight: &Self, residual: Option<&Self>) -> Self {
        let fused = Fused {
            gated: true,
            residual,
        };
        if let Some(y) = self.fused_linear(weight, fused) {
            return y;
        }
        let last = self.shape().len() - 1;
        let hidden = self.shape()[last] / 2;
        let gated = self
            .narrow(last, 0, hidden)
            .silu()
            .mul(&self.narrow(last, hidden, hidden));
        match residual {
            Some(residual) => gated.linear_add(weight, residual),
            None => gated.linear(weight),
        }
    }
    /// Rotary embedding of one token per row, `self` `[rows, heads, 1, head_dim]`, row `r` at
    /// position `rows.positions[r]` (see `rope_interleaved`).
    fn rope_rows(&self, rope: &Self::Rope, rows: &PoolRows<Self>) -> Self {
        let parts: Vec<Self> = (0..rows.len())
            .map(|r| {
                self.narrow(0, r, 1)
                    .rope_interleaved(rope, rows.positions[r])
            })
            .collect();
        Self::cat(&parts.iter().collect::<Vec<_>>(), 0)
    }
    /// Writes `src` `[rows, kv_heads, 1, head_dim]` into the pool `self`
    /// `[slots, kv_heads, positions, head_dim]`, row `r` at slot `rows.slots[r]`, position
    /// `rows.positions[r]`.
    fn write_rows(&mut self, rows: &PoolRows<Self>, src: &Self) {
        for r in 0..rows.len() {
            self.write_at(
                &[rows.slots[r], 0, rows.positions[r], 0],
                &src.narrow(0, r, 1),
            );
        }
    }
    /// Attention of one new token per row, `q` `[rows, hq, 1, d]`, over the keys and values
    /// of its slot in the pools `keys`/`values` `[slots, hkv, positions, d]`: row `r` sees
    /// positions `rows.first[r]..=rows.positions[r]`. One call per layer for the whole batch; this default
    /// runs `attention` row by row.
    fn pool_attention(
        q: &Self,
        keys: &Self,
        values: &Self,
        rows: &PoolRows<Self>,
        scale: f64,
    ) -> Self {
        pool_attention_by_row(q, keys, values, rows, scale)
    }

    // Forms of a weight or a tensor that only some backends have; by default, none.
    /// The product with `fused`'s work done in its own passes, where this backend can for
    /// these tensors (`linear_add` and `gated_linear` do the operations apart elsewhere).
    fn fused_linear(&self, _weight: &Self, _fused: Fused<'_, Self>) -> Option<Self> {
        None
    }
    /// The weight `[out, in]` made of `parts` (their rows one after another: one part, or a
    /// fused weight's) in the form `linear` multiplies fastest when only a few rows come at a
    /// time, many times over (a decode step's), for a weight used by `linear` and
    /// `linear_rows` alone; `None` where the backend has no such form for it, or where, for
    /// [`Products::AlsoManyRows`], its products of many rows would be slower packed. A packed
    /// bf16 weight multiplies f32 rows too, into f32: the product of the weight widened to f32.
    fn pack_for_few_rows(_parts: &[&Self], _products: Products) -> Option<Self> {
        None
    }
    /// Whether `linear` multiplies the weights of `quantize_weight` and `from_quantized` in
    /// `format`'s own bits on `device` (elsewhere they are dequantized at load).
    fn multiplies_quantized(_device: &Self::Device, _format: QuantFormat) -> bool {
        false
    }
    /// The linear weight `[out, in]` stored in `format` for `linear` and `linear_rows`
    /// (`quantized`), or `None` where this backend multiplies only its own dtypes (the weight
    /// then stays as it is).
    fn quantize_weight(&self, _format: QuantFormat) -> Option<Self> {
        None
    }
    /// The linear weight `[out, in]` that `blocks` (`format`'s layout, as a quantized
    /// checkpoint stores it) stand for: kept in that form where this backend multiplies it,
    /// read in place from the memory map; elsewhere dequantized to `dtype`.
    ///
    /// # Safety
    /// As [`TensorData::from_raw`]: `blocks` outlive the tensor and are never written.
    unsafe fn from_quantized(
        device: &Self::Device,
        blocks: &[u8],
        format: QuantFormat,
        shape: [usize; 2],
        dtype: DType,
    ) -> Self {
        Self::from_f32(
            device,
            &quantized::dequantize(format, blocks),
            &shape,
            dtype,
        )
    }
    /// A tensor whose contents are unspecified: only what is written into it may be read
    /// (KV pools, so that memory is committed as positions are used). Zeros by default.
    fn uninit(device: &Self::Device, shape: &[usize], dtype: DType) -> Self {
        Self::zeros(device, shape, dtype)
    }

    // The device: nothing to wait for, time or capture by default.
    /// Waits until `device` has run everything queued on it: stage timings on devices that
    /// run operations asynchronously (CUDA). A no-op where operations finish as they return.
    fn synchronize(_device: &Self::Device) {}
    /// An accelerator's own large-copy bandwidth (bytes read + written per second), for
    /// benchmarks; `None` on the host CPU, or where the backend cannot time its device.
    fn device_copy_bandwidth(_device: &Self::Device) -> Option<f64> {
        None
    }
    /// Device memory the backend's allocator holds, graph pools included, where it can say.
    fn reserved_device_bytes(_device: &Self::Device) -> Option<u64> {
        None
    }
    /// Captures what `body` queues on `device` as a CUDA graph ([`CudaGraph::capture`]: after
    /// `warmups` runs, sharing `share`'s memory pool). Err where the backend or the device
    /// has no graphs.
    fn capture_graph(
        _device: &Self::Device,
        _share: Option<&CudaGraph>,
        _warmups: usize,
        _body: &mut dyn FnMut(),
    ) -> Result<CudaGraph, GraphError> {
        Err(GraphError::NotCuda(format!(
            "the {} backend",
            Self::BACKEND
        )))
    }
    /// Starts a thread that runs model code as the calling thread does (libtorch keeps its
    /// autograd switch and its CPU thread count per thread).
    fn spawn_model_thread<F: FnOnce() + Send + 'static>(
        name: String,
        body: F,
    ) -> std::io::Result<std::thread::JoinHandle<()>> {
        std::thread::Builder::new().name(name).spawn(body)
    }
}

/// The rows of one decode step over a slot KV pool: row `r` is the next token of the sequence
/// in slot `slots[r]`, at position `positions[r]`, attending to positions
/// `first[r]..=positions[r]` of its slot (from 0, or a sliding window's start). Built once per
/// step; the same indices as i64 tensors on the model's device let an accelerator gather and
/// scatter every layer's rows without host work.
pub struct PoolRows<T> {
    pub slots: Vec<usize>,
    pub positions: Vec<usize>,
    pub first: Vec<usize>,
    /// `slots`, `[rows]` i64 on the device.
    pub slot_ids: T,
    /// `positions`, `[rows]` i64 on the device.
    pub position_ids: T,
    /// `first`, `[rows]` i64 on the device, where a window makes it other than 0.
    pub first_ids: Option<T>,
    /// What a backend derives from the rows and reuses in every layer of the step, made at
    /// first use: its attention mask, and the rows' RoPE table entries (of the one decoder
    /// that runs the step).
    pub attention_mask: OnceCell<T>,
    pub rope_tables: OnceCell<(T, T)>,
}

impl<T: Tensor> PoolRows<T> {
    /// Rows that see every earlier position of their slot.
    pub fn new(device: &T::Device, slots: Vec<usize>, positions: Vec<usize>) -> Self {
        Self::windowed(device, slots, positions, None)
    }

    /// Rows that see the last `window` positions of their slot, themselves included (all of
    /// them when `None`).
    pub fn windowed(
        device: &T::Device,
        slots: Vec<usize>,
        positions: Vec<usize>,
        window: Option<usize>,
    ) -> Self {
        assert_eq!(slots.len(), positions.len(), "one position per slot");
        assert_ne!(window, Some(0), "a window holds at least the row itself");
        let ids = |v: &[usize]| {
            let v: Vec<i64> = v.iter().map(|&i| i as i64).collect();
            T::from_i64(device, &v, &[v.len()])
        };
        let first: Vec<usize> = match window {
            Some(w) => positions
                .iter()
                .map(|&p| (p + 1).saturating_sub(w))
                .collect(),
            None => vec![0; positions.len()],
        };
        PoolRows {
            slot_ids: ids(&slots),
            position_ids: ids(&positions),
            first_ids: window.map(|_| ids(&first)),
            attention_mask: OnceCell::new(),
            rope_tables: OnceCell::new(),
            slots,
            positions,
            first,
        }
    }

    /// Rows whose indices are already on the device (`slot_ids`, `position_ids`, `[rows]`
    /// i64) and may change between uses, as a captured graph's inputs do: the host knows only
    /// the shapes, so every row counts as in slot 0 attending to `keys` positions, which is
    /// what sizes an accelerator's pooled attention ([`pool_keys_read`]). No window.
    /// Accelerators only: the CPU's pooled attention reads the host indices.
    pub fn on_device(slot_ids: T, position_ids: T, rows: usize, keys: usize) -> Self {
        assert!(keys > 0, "a row attends to at least itself");
        PoolRows {
            slots: vec![0; rows],
            positions: vec![keys - 1; rows],
            first: vec![0; rows],
            slot_ids,
            position_ids,
            first_ids: None,
            attention_mask: OnceCell::new(),
            rope_tables: OnceCell::new(),
        }
    }

    pub fn len(&self) -> usize {
        self.slots.len()
    }

    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }
}

/// Keys an accelerator's pooled attention reads per row, rounded up to a multiple of this: the
/// attention then sees a few shapes instead of a new one at each step, and on CUDA each new
/// shape costs tens of milliseconds the first time (measured: a step of 8 streams took 69 ms
/// the first time through its lengths, 23 ms the second).
pub const POOL_KEYS_BUCKET: usize = 256;

/// The keys a pooled attention reads per row when its longest row attends to `longest`
/// positions of a pool of `pool_positions`: `longest` rounded up to [`POOL_KEYS_BUCKET`].
pub fn pool_keys_read(longest: usize, pool_positions: usize) -> usize {
    longest
        .next_multiple_of(POOL_KEYS_BUCKET)
        .min(pool_positions)
}

/// [`Tensor::pool_attention`] as one `attention` call per row over its slot's keys and values:
/// the trait's default, and what libtorch runs on the CPU.
pub fn pool_attention_by_row<T: Tensor>(
    q: &T,
    keys: &T,
    values: &T,
    rows: &PoolRows<T>,
    scale: f64,
) -> T {
    let parts: Vec<T> = (0..rows.len())
        .map(|r| {
            let (slot, first) = (rows.slots[r], rows.first[r]);
            let len = rows.positions[r] + 1 - first;
            let keys = keys.narrow(0, slot, 1).narrow(2, first, len);
            let values = values.narrow(0, slot, 1).narrow(2, first, len);
            T::attention(&q.narrow(0, r, 1), &keys, &values, None, false, scale)
        })
        .collect();
    T::cat(&parts.iter().collect::<Vec<_>>(), 0)
}
