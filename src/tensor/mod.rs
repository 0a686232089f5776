//! The small tensor interface the model is written against.
//!
//! The model code (`crate::models::voxtral_tts`) only uses these operations, so a backend (libtorch, and MLX
//! behind the `mlx` feature) implements this trait once. Layout conventions are fixed here, and
//! a backend converts internally: sequences are `[batch, time, channels]` (NLC) everywhere,
//! attention tensors are `[batch, heads, time, head_dim]`, linear weights are `[out, in]`, and
//! conv weights are handed over in PyTorch layout once, through `prepare_conv_weight`.

pub mod cpu_gemv;
mod cpu_small;
pub mod cuda_graph;
#[cfg(feature = "mlx")]
pub mod mlx_backend;
pub mod quantized;
pub mod tch_backend;

use cuda_graph::{CudaGraph, GraphError};
use quantized::QuantFormat;
use std::cell::OnceCell;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};

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

static LINEAR_MULTIPLY_ADDS: AtomicU64 = AtomicU64::new(0);

/// Multiply-adds of every `linear` product so far of the backends that count them (libtorch's,
/// on any device): `bench` divides them by time to report arithmetic rates.
pub fn linear_multiply_adds() -> u64 {
    LINEAR_MULTIPLY_ADDS.load(Ordering::Relaxed)
}

fn count_multiply_adds(n: u64) {
    LINEAR_MULTIPLY_ADDS.fetch_add(n, Ordering::Relaxed);
}

/// The classes of rows per weight read that [`timed_products`] files CPU products under, by
/// their largest row count: a decode step's products differ in kind by their rows (a stream's
/// one, the flow head's six per stream), and so do their bounds, reading or arithmetic.
pub const ROW_CLASSES: [(usize, &str); 5] = [
    (1, "1 row"),
    (4, "2-4 rows"),
    (8, "5-8 rows"),
    (24, "9-24 rows"),
    (usize::MAX, "25+ rows"),
];

/// Multiply-adds and nanoseconds of the timed products of each [`ROW_CLASSES`] class.
static TIMED_PRODUCTS: [[AtomicU64; 2]; ROW_CLASSES.len()] =
    [const { [AtomicU64::new(0), AtomicU64::new(0)] }; ROW_CLASSES.len()];

/// Multiply-adds and time so far of the CPU products of each of [`ROW_CLASSES`] (libtorch's
/// backend; products on an accelerator run asynchronously and are not timed).
pub fn timed_products() -> [(u64, std::time::Duration); ROW_CLASSES.len()] {
    std::array::from_fn(|i| {
        let [multiply_adds, nanos] = &TIMED_PRODUCTS[i];
        (
            multiply_adds.load(Ordering::Relaxed),
            std::time::Duration::from_nanos(nanos.load(Ordering::Relaxed)),
        )
    })
}

fn count_timed_product(rows: usize, multiply_adds: u64, time: std::time::Duration) {
    let class = ROW_CLASSES
        .iter()
        .position(|&(most, _)| rows <= most)
        .expect("the last class takes any count");
    let [counted, nanos] = &TIMED_PRODUCTS[class];
    counted.fetch_add(multiply_adds, Ordering::Relaxed);
    nanos.fetch_add(time.as_nanos() as u64, Ordering::Relaxed);
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
pub trait Tensor: Clone + Sized + 'static {
    type Device: Clone + fmt::Debug + Send + Sync + 'static;
    /// Rotary-embedding state of a model (see `rope_table`).
    type Rope;
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
    /// A tensor whose contents are unspecified: only what is written into it may be read
    /// (KV pools, so that memory is committed as positions are used). Zeros by default.
    fn uninit(device: &Self::Device, shape: &[usize], dtype: DType) -> Self {
        Self::zeros(device, shape, dtype)
    }
    /// Whether `device` is the host CPU.
    fn is_cpu(device: &Self::Device) -> bool;
    /// An accelerator's own large-copy bandwidth (bytes read + written per second), for
    /// benchmarks; `None` on the host CPU, or where the backend cannot time its device.
    fn device_copy_bandwidth(_device: &Self::Device) -> Option<f64> {
        None
    }
    /// Waits until `device` has run everything queued on it: stage timings on devices that
    /// run operations asynchronously (CUDA). A no-op where operations finish as they return.
    fn synchronize(_device: &Self::Device) {}
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
    /// Device memory the backend's allocator holds, graph pools included, where it can say.
    fn reserved_device_bytes(_device: &Self::Device) -> Option<u64> {
        None
    }
    /// Starts a thread that runs model code as the calling thread does (libtorch keeps its
    /// autograd switch and its CPU thread count per thread).
    fn spawn_model_thread<F: FnOnce() + Send + 'static>(
        name: String,
        body: F,
    ) -> std::io::Result<std::thread::JoinHandle<()>> {
        std::thread::Builder::new().name(name).spawn(body)
    }

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

    /// `x @ weight.T` for `weight` `[out, in]`, or as packed by `pack_for_few_rows`.
    fn linear(&self, weight: &Self) -> Self;
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
    /// As [`Tensor::from_raw`]: `blocks` outlive the tensor and are never written.
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

/// Backend-independent checks, run by each backend's tests on its own device.
#[cfg(test)]
pub(crate) mod conformance {
    use super::{ConvKind, DType, PoolRows, Tensor};

    /// PyTorch `Conv1d` (no padding) of NLC `x` `[1, len, cin]` with a PyTorch weight
    /// `[cout, cin, k]`, as NLC `[1, out_len, cout]` values.
    fn conv_reference(
        x: &[f32],
        cin: usize,
        w: &[f32],
        cout: usize,
        k: usize,
        stride: usize,
    ) -> Vec<f32> {
        let len = x.len() / cin;
        let out_len = (len - k) / stride + 1;
        let mut y = vec![0.0; out_len * cout];
        for t in 0..out_len {
            for o in 0..cout {
                for i in 0..cin {
                    for j in 0..k {
                        y[t * cout + o] += x[(t * stride + j) * cin + i] * w[(o * cin + i) * k + j];
                    }
                }
            }
        }
        y
    }

    /// PyTorch `ConvTranspose1d` (no padding) of NLC `x` with a PyTorch weight `[cin, cout, k]`.
    fn conv_transpose_reference(
        x: &[f32],
        cin: usize,
        w: &[f32],
        cout: usize,
        k: usize,
        stride: usize,
    ) -> Vec<f32> {
        let len = x.len() / cin;
        let out_len = (len - 1) * stride + k;
        let mut y = vec![0.0; out_len * cout];
        for t in 0..len {
            for i in 0..cin {
                for o in 0..cout {
                    for j in 0..k {
                        y[(t * stride + j) * cout + o] +=
                            x[t * cin + i] * w[(i * cout + o) * k + j];
                    }
                }
            }
        }
        y
    }

    /// PyTorch `Conv1d` (stride 1, no padding) with `dilation` and `groups`, NLC in and out,
    /// weight `[cout, cin / groups, k]`.
    fn dilated_conv_reference(
        x: &[f32],
        cin: usize,
        w: &[f32],
        cout: usize,
        k: usize,
        dilation: usize,
        groups: usize,
    ) -> Vec<f32> {
        let len = x.len() / cin;
        let out_len = len - (k - 1) * dilation;
        let (gin, gout) = (cin / groups, cout / groups);
        let mut y = vec![0.0; out_len * cout];
        for t in 0..out_len {
            for o in 0..cout {
                let g = o / gout;
                for i in 0..gin {
                    for j in 0..k {
                        y[t * cout + o] +=
                            x[(t + j * dilation) * cin + g * gin + i] * w[(o * gin + i) * k + j];
                    }
                }
            }
        }
        y
    }

    fn values(n: usize, seed: usize) -> Vec<f32> {
        (0..n).map(|i| ((i * 7 + seed) % 11) as f32 - 5.0).collect()
    }

    fn assert_close(got: &[f32], want: &[f32], what: &str) {
        assert_eq!(got.len(), want.len(), "{what}: length");
        for (i, (a, b)) in got.iter().zip(want).enumerate() {
            assert!((a - b).abs() <= 1e-4, "{what}: element {i}: {a} vs {b}");
        }
    }

    /// Conv weights go in once in PyTorch layout; the backend converts them to its own layout,
    /// and converting a converted weight again changes nothing. Inputs are NLC whatever layout
    /// the backend's convolutions use inside.
    pub fn conv_layouts_and_idempotent_weight_conversion<T: Tensor>(device: &T::Device) {
        let (len, cin, cout, k) = (7, 3, 4, 3);
        let x_data = values(len * cin, 1);
        let x = T::from_f32(device, &x_data, &[1, len, cin], DType::F32);
        for (kind, shape) in [
            (ConvKind::Conv, [cout, cin, k]),
            (ConvKind::Transpose, [cin, cout, k]),
        ] {
            let w_data = values(cout * cin * k, 2);
            let w = T::from_f32(device, &w_data, &shape, DType::F32);
            let once = T::prepare_conv_weight(&w, kind);
            let twice = T::prepare_conv_weight(&once, kind);
            assert_eq!(once.shape(), twice.shape(), "{kind:?}: converted twice");
            assert_eq!(
                once.to_vec_f32(),
                twice.to_vec_f32(),
                "{kind:?}: converted twice"
            );
            for stride in [1, 2] {
                let (want, y_once, y_twice) = match kind {
                    ConvKind::Conv => (
                        conv_reference(&x_data, cin, &w_data, cout, k, stride),
                        x.conv1d(&once, stride),
                        x.conv1d(&twice, stride),
                    ),
                    ConvKind::Transpose => (
                        conv_transpose_reference(&x_data, cin, &w_data, cout, k, stride),
                        x.conv_transpose1d(&once, stride),
                        x.conv_transpose1d(&twice, stride),
                    ),
                };
                assert_eq!(
                    y_once.shape(),
                    vec![1, want.len() / cout, cout],
                    "{kind:?} NLC out"
                );
                let what = format!("{kind:?} stride {stride}");
                assert_close(&y_once.to_vec_f32(), &want, &what);
                assert_eq!(y_once.to_vec_f32(), y_twice.to_vec_f32(), "{what}: twice");
            }
        }
    }

    /// GELU in its exact form, `x/2 · (1 + erf(x/√2))`, not the tanh approximation (which
    /// differs by 1e-4 to 4e-4 at these points).
    pub fn gelu_is_the_exact_erf_form<T: Tensor>(device: &T::Device) {
        // x and x/2 · (1 + erf(x/√2)) in f64.
        let cases = [
            (-3.0, -0.004_049_694_094_890_31),
            (-1.0, -0.158_655_253_931_457_05),
            (0.0, 0.0),
            (0.5, 0.345_731_230_637_006_56),
            (2.0, 1.954_499_736_103_641_6),
        ];
        let x: Vec<f32> = cases.iter().map(|&(x, _)| x as f32).collect();
        let got = T::from_f32(device, &x, &[x.len()], DType::F32)
            .gelu()
            .to_vec_f32();
        for (g, (x, want)) in got.iter().zip(cases) {
            assert!(
                (f64::from(*g) - want).abs() < 1e-6,
                "gelu({x}) = {g}, want {want}"
            );
        }
    }

    /// Pool attention of rows with a sliding window sees only the row's last `window`
    /// positions of its own slot (GQA: query head `h` reads KV head `h / 2`), against softmax
    /// attention written out on the host.
    pub fn windowed_pool_attention_sees_only_its_window<T: Tensor>(device: &T::Device) {
        let (slots, hkv, hq, positions, d) = (2, 2, 4, 10, 4);
        let value = |i: usize, salt: usize| ((i * 37 + salt * 11) % 23) as f32 / 23.0 - 0.5;
        let pool = |salt| -> Vec<f32> {
            (0..slots * hkv * positions * d)
                .map(|i| value(i, salt))
                .collect()
        };
        let (k, v) = (pool(1), pool(2));
        let shape = [slots, hkv, positions, d];
        let keys = T::from_f32(device, &k, &shape, DType::F32);
        let values = T::from_f32(device, &v, &shape, DType::F32);
        let (row_slots, row_positions, window, scale) = (vec![1, 0], vec![7, 2], 3, 0.5);
        let q: Vec<f32> = (0..2 * hq * d).map(|i| value(i, 3)).collect();
        let qt = T::from_f32(device, &q, &[2, hq, 1, d], DType::F32);
        let rows = PoolRows::windowed(
            device,
            row_slots.clone(),
            row_positions.clone(),
            Some(window),
        );
        assert_eq!(rows.first, [5, 0]);
        let got = T::pool_attention(&qt, &keys, &values, &rows, scale).to_vec_f32();
        let at = |pool: &[f32], slot: usize, head: usize, pos: usize| {
            let start = ((slot * hkv + head) * positions + pos) * d;
            pool[start..start + d].to_vec()
        };
        let mut want = Vec::new();
        for (r, (&slot, &pos)) in row_slots.iter().zip(&row_positions).enumerate() {
            for h in 0..hq {
                let query = &q[(r * hq + h) * d..(r * hq + h + 1) * d];
                let seen: Vec<usize> = ((pos + 1).saturating_sub(window)..=pos).collect();
                let scores: Vec<f32> = seen
                    .iter()
                    .map(|&j| {
                        let key = at(&k, slot, h / 2, j);
                        query.iter().zip(&key).map(|(a, b)| a * b).sum::<f32>() * scale as f32
                    })
                    .collect();
                let top = scores.iter().copied().fold(f32::NEG_INFINITY, f32::max);
                let weights: Vec<f32> = scores.iter().map(|s| (s - top).exp()).collect();
                let total: f32 = weights.iter().sum();
                let mut out = vec![0.0; d];
                for (&j, w) in seen.iter().zip(&weights) {
                    for (o, x) in out.iter_mut().zip(at(&v, slot, h / 2, j)) {
                        *o += w / total * x;
                    }
                }
                want.extend(out);
            }
        }
        assert_close(&got, &want, "windowed pool attention");
    }

    /// Dilated and grouped (including depthwise) convolutions against a direct loop.
    pub fn dilated_grouped_conv_matches_reference<T: Tensor>(device: &T::Device) {
        let (len, cin) = (13, 4);
        let x_data = values(len * cin, 3);
        let x = T::from_f32(device, &x_data, &[1, len, cin], DType::F32);
        for (cout, k, dilation, groups) in [(6, 3, 1, 1), (6, 3, 3, 1), (4, 3, 2, 4), (8, 2, 4, 2)]
        {
            let w_data = values(cout * (cin / groups) * k, 5);
            let w = T::from_f32(device, &w_data, &[cout, cin / groups, k], DType::F32);
            let w = T::prepare_conv_weight(&w, ConvKind::Conv);
            let want = dilated_conv_reference(&x_data, cin, &w_data, cout, k, dilation, groups);
            let y = x.conv1d_dilated(&w, dilation, groups);
            assert_eq!(y.shape(), vec![1, want.len() / cout, cout], "NLC out");
            let what = format!("cout {cout} k {k} dilation {dilation} groups {groups}");
            assert_close(&y.to_vec_f32(), &want, &what);
        }
    }

    /// `sin` elementwise, against f64.
    pub fn sin_matches_f64<T: Tensor>(device: &T::Device) {
        let x = [-4.0f32, -1.0, 0.0, 0.3, 2.5, 10.0];
        let got = T::from_f32(device, &x, &[2, 3], DType::F32)
            .sin()
            .to_vec_f32();
        for (g, x) in got.iter().zip(x) {
            let want = f64::from(x).sin();
            assert!(
                (f64::from(*g) - want).abs() < 1e-6,
                "sin({x}) = {g}, want {want}"
            );
        }
    }

    /// `tanh` elementwise, against f64.
    pub fn tanh_matches_f64<T: Tensor>(device: &T::Device) {
        let x = [-9.0f32, -1.5, -0.2, 0.0, 0.7, 3.0];
        let got = T::from_f32(device, &x, &[2, 3], DType::F32)
            .tanh()
            .to_vec_f32();
        for (g, x) in got.iter().zip(x) {
            let want = f64::from(x).tanh();
            assert!(
                (f64::from(*g) - want).abs() < 1e-6,
                "tanh({x}) = {g}, want {want}"
            );
        }
    }

    /// `elu` elementwise, against f64.
    pub fn elu_matches_f64<T: Tensor>(device: &T::Device) {
        let x = [-6.0f32, -1.0, -0.25, 0.0, 0.3, 4.5];
        let got = T::from_f32(device, &x, &[3, 2], DType::F32)
            .elu()
            .to_vec_f32();
        for (g, x) in got.iter().zip(x) {
            let x = f64::from(x);
            let want = if x > 0.0 { x } else { x.exp_m1() };
            assert!(
                (f64::from(*g) - want).abs() < 1e-6,
                "elu({x}) = {g}, want {want}"
            );
        }
    }

    /// `leaky_relu` is exactly `x` or `slope · x` in f32, on the backend and in the
    /// trait's default.
    pub fn leaky_relu_is_exact<T: Tensor>(device: &T::Device) {
        let x = [-6.0f32, -1.3, -0.25, -0.0, 0.0, 0.3, 4.5];
        let t = T::from_f32(device, &x, &[1, 7], DType::F32);
        let default = t.relu().add(&t.clamp(f32::NEG_INFINITY, 0.0).scale(0.1));
        for got in [t.leaky_relu(0.1).to_vec_f32(), default.to_vec_f32()] {
            for (g, x) in got.iter().zip(x) {
                let want = if x > 0.0 { x } else { x * 0.1 };
                assert_eq!(*g, want, "leaky_relu({x})");
            }
        }
    }
}
