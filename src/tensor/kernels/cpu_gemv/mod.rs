//! Matrix products of a few rows (a decode step) on the CPU, in bf16 and f32, with one SIMD
//! variant per kind of x86-64 CPU and a portable one.
//!
//! A decode step multiplies a handful of rows (one per stream in the backbone, two per stream
//! in the flow head's last layer, six in its others) by every weight matrix, so it is bound by
//! reading the weights. libtorch's bf16 GEMM repacks the weight for each call (oneDNN) or, on
//! CPUs without AVX512-BF16, falls back to a slow path; this kernel streams each weight row
//! once and reaches the read bandwidth (docs/performance.md).
//!
//! Every output element is summed in the same order whatever the number of rows or threads,
//! so a request's result does not depend on the batch it runs in (libtorch's GEMMs pick
//! different kernels for different row counts, which changes the rounding). The order is
//! fixed per variant: variants differ from each other in the last bits, and one process uses
//! one variant, chosen once ([`Variant::active`]).

#[cfg(target_arch = "x86_64")]
mod amx;
pub(crate) mod openmp;
pub mod packed;
mod peak;
mod portable;
#[cfg(target_arch = "x86_64")]
pub(crate) mod x86;

pub use peak::{peak_f32_flops, sampled_f32_flops};

use half::bf16;
use std::fmt;
use std::ops::Range;
use std::sync::OnceLock;

/// Input rows up to which this kernel is used. Above, a product is compute-bound and a
/// blocked GEMM is the better choice (prefill).
pub const MAX_ROWS: usize = 64;

/// Weights smaller than this run on the calling thread: splitting costs more than it saves.
const PARALLEL_MIN_BYTES: usize = 256 << 10;

/// Weight rows per block: four rows share each load of an input.
const ROW_BLOCK: usize = 4;

/// The most input rows any variant keeps in registers at once (see [`Lanes::INPUTS`]).
const MAX_INPUT_BLOCK: usize = 6;

/// The most values any variant loads at once (512 bits of bf16).
const MAX_LANES: usize = 32;

/// The instruction sets the kernel is built for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Variant {
    /// Plain Rust, eight independent partial sums per output: the reference, and the kernel
    /// on CPUs that are not x86-64.
    Portable,
    /// AVX2 and FMA, 256 bits; bf16 is widened to f32 in registers.
    Avx2Fma,
    /// AVX-512F (with BW), 512 bits; bf16 is widened to f32 in registers.
    Avx512F,
    /// AVX-512F with AVX512-BF16: bf16 pairs through `vdpbf16ps`; f32 as [`Variant::Avx512F`].
    Avx512Bf16,
    /// AVX512-BF16 with the AMX tile unit: bf16 through `tdpbf16ps` ([`amx`]); f32 as
    /// [`Variant::Avx512F`].
    Amx,
}

impl Variant {
    pub const ALL: [Variant; 5] = [
        Variant::Portable,
        Variant::Avx2Fma,
        Variant::Avx512F,
        Variant::Avx512Bf16,
        Variant::Amx,
    ];

    /// The name `VOXTRAL_CPU_KERNEL` takes and `bench` prints.
    pub fn name(self) -> &'static str {
        match self {
            Variant::Portable => "portable",
            Variant::Avx2Fma => "avx2",
            Variant::Avx512F => "avx512f",
            Variant::Avx512Bf16 => "avx512bf16",
            Variant::Amx => "amx",
        }
    }

    /// The CPU features the variant needs, as `/proc/cpuinfo` names them.
    pub fn needs(self) -> &'static str {
        match self {
            Variant::Portable => "nothing",
            Variant::Avx2Fma => "avx2 fma",
            Variant::Avx512F => "avx512f avx512bw",
            Variant::Avx512Bf16 => "avx512f avx512bw avx512_bf16",
            Variant::Amx => {
                "avx512f avx512bw avx512_bf16 amx_tile amx_bf16 (with the OS's permission)"
            }
        }
    }

    /// Whether this CPU has the instructions.
    pub fn supported(self) -> bool {
        #[cfg(target_arch = "x86_64")]
        {
            match self {
                Variant::Portable => true,
                Variant::Avx2Fma => {
                    is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma")
                }
                // BW for the packed loop's 16-bit interleave; every AVX-512 CPU but Xeon Phi has it.
                Variant::Avx512F => {
                    is_x86_feature_detected!("avx512f") && is_x86_feature_detected!("avx512bw")
                }
                Variant::Avx512Bf16 => {
                    Variant::Avx512F.supported() && is_x86_feature_detected!("avx512bf16")
                }
                Variant::Amx => Variant::Avx512Bf16.supported() && amx::available(),
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            self == Variant::Portable
        }
    }

    /// Panics, naming what is missing, when the CPU lacks the variant's instructions.
    pub fn assert_supported(self) {
        assert!(
            self.supported(),
            "this CPU lacks {} for the {self} kernel",
            self.needs()
        );
    }

    /// The fastest variant this CPU supports.
    pub fn best() -> Variant {
        *Variant::ALL
            .iter()
            .rev()
            .find(|v| v.supported())
            .unwrap_or(&Variant::Portable)
    }

    /// The variant this process uses: [`Variant::best`], unless `VOXTRAL_CPU_KERNEL` names
    /// another that this CPU supports (to compare variants, or to run as a CPU of another
    /// kind would). Chosen once.
    pub fn active() -> Variant {
        static ACTIVE: OnceLock<Variant> = OnceLock::new();
        *ACTIVE.get_or_init(|| {
            let best = Variant::best();
            let Ok(name) = std::env::var("VOXTRAL_CPU_KERNEL") else {
                return best;
            };
            match Variant::ALL.iter().find(|v| v.name() == name) {
                _ if name == "auto" => best,
                Some(v) if v.supported() => *v,
                Some(v) => {
                    tracing::warn!(requested = name, needs = v.needs(), using = best.name(), "VOXTRAL_CPU_KERNEL: this CPU lacks the instructions");
                    best
                }
                None => {
                    tracing::warn!(requested = name, using = best.name(), "VOXTRAL_CPU_KERNEL: unknown variant (auto, portable, avx2, avx512f, avx512bf16, amx)");
                    best
                }
            }
        })
    }
}

impl fmt::Display for Variant {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// An element type the kernel multiplies.
pub trait Element: Copy + Send + Sync + 'static {
    const ZERO: Self;
    /// Whether this is bf16 (the other is f32): the packed kernel's vector stores round and
    /// narrow it.
    const BF16: bool;
    /// The finished f32 sum as this type (rounded to nearest even for bf16, as libtorch does).
    fn from_sum(sum: f32) -> Self;
    fn to_f32(self) -> f32;
    /// `variant`'s code for this type.
    fn kernel(variant: Variant) -> Kernel<Self>;
}

/// One variant's code for one element type.
pub struct Kernel<E> {
    /// Computes the outputs of a range of weight rows of a [`Job`]; see [`Job::run`].
    run: unsafe fn(&Job<E>, Range<usize>),
    inputs: Inputs,
    /// The multiple of weight rows a thread's share is made of.
    block: usize,
}

/// How a variant reads its inputs.
#[derive(Clone, Copy)]
enum Inputs {
    AsIs,
    /// Widened by [`widen_inputs`] for loads of `lanes` values.
    Widened {
        lanes: usize,
    },
    /// As the AMX unit's pairs ([`amx::pairs`]).
    #[cfg(target_arch = "x86_64")]
    Pairs,
}

impl<E: Element> Kernel<E> {
    fn of<L: Lanes<E = E>>() -> Self {
        Kernel {
            run: Job::run::<L>,
            inputs: match L::WIDENED {
                true => Inputs::Widened { lanes: L::LANES },
                false => Inputs::AsIs,
            },
            block: ROW_BLOCK,
        }
    }
}

impl Element for bf16 {
    const ZERO: Self = bf16::ZERO;
    const BF16: bool = true;

    // Both with integer operations, so that loops over them vectorise (the `half` crate's
    // conversions branch on NaN); the same bits as the crate's (tested).
    #[inline(always)]
    fn from_sum(sum: f32) -> Self {
        let bits = sum.to_bits();
        let rounded = if sum.is_nan() {
            (bits >> 16) | 0x40
        } else {
            // Adding just under half a unit of the kept bits, plus the kept part's lowest bit,
            // carries exactly when rounding to nearest even goes up.
            (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
        };
        bf16::from_bits(rounded as u16)
    }

    #[inline(always)]
    fn to_f32(self) -> f32 {
        // A bf16 is the top half of an f32.
        f32::from_bits(u32::from(self.to_bits()) << 16)
    }

    fn kernel(variant: Variant) -> Kernel<Self> {
        match variant {
            Variant::Portable => Kernel::of::<portable::Lanes8<bf16>>(),
            #[cfg(target_arch = "x86_64")]
            Variant::Avx2Fma => Kernel::of::<x86::Avx2Bf16>(),
            #[cfg(target_arch = "x86_64")]
            Variant::Avx512F => Kernel::of::<x86::Avx512WidenedBf16>(),
            #[cfg(target_arch = "x86_64")]
            Variant::Avx512Bf16 => Kernel::of::<x86::Avx512DotBf16>(),
            #[cfg(target_arch = "x86_64")]
            Variant::Amx => Kernel {
                run: amx::run,
                inputs: Inputs::Pairs,
                block: amx::BLOCK,
            },
            #[cfg(not(target_arch = "x86_64"))]
            _ => unreachable!("only the portable variant is supported here"),
        }
    }
}

impl Element for f32 {
    const ZERO: Self = 0.0;
    const BF16: bool = false;

    #[inline(always)]
    fn from_sum(sum: f32) -> Self {
        sum
    }

    #[inline(always)]
    fn to_f32(self) -> f32 {
        self
    }

    fn kernel(variant: Variant) -> Kernel<Self> {
        match variant {
            Variant::Portable => Kernel::of::<portable::Lanes8<f32>>(),
            #[cfg(target_arch = "x86_64")]
            Variant::Avx2Fma => Kernel::of::<x86::Avx2F32>(),
            #[cfg(target_arch = "x86_64")]
            Variant::Avx512F | Variant::Avx512Bf16 | Variant::Amx => Kernel::of::<x86::Avx512F32>(),
            #[cfg(not(target_arch = "x86_64"))]
            _ => unreachable!("only the portable variant is supported here"),
        }
    }
}

/// How one variant multiplies one element type: `LANES` values load into `Vals`, and products
/// accumulate into `Acc`, a vector of f32 partial sums added up at the end.
pub trait Lanes {
    type E: Element;
    /// The inputs as the variant reads them: `E`, or f32 when `WIDENED`.
    type X: Element;
    type Acc: Copy;
    type Vals: Copy;
    /// Whether the inputs are widened to f32 once per product ([`widen_inputs`]) rather than
    /// in registers for every block of weight rows.
    const WIDENED: bool = false;
    /// Values of `E` per load.
    const LANES: usize;
    /// Input rows per block: that many inputs share each load of a weight row, and
    /// `ROW_BLOCK x INPUTS` accumulators plus the loaded values fill the vector registers.
    const INPUTS: usize;

    /// # Safety
    /// The CPU has the variant's instructions (as every method here).
    unsafe fn zero() -> Self::Acc;
    /// # Safety
    /// As [`Lanes::zero`].
    unsafe fn zero_vals() -> Self::Vals;
    /// Loads `LANES` weights.
    ///
    /// # Safety
    /// `ptr` points to `LANES` readable values.
    unsafe fn load(ptr: *const Self::E) -> Self::Vals;
    /// Loads `LANES` inputs.
    ///
    /// # Safety
    /// `ptr` points to `LANES` readable values.
    unsafe fn load_input(ptr: *const Self::X) -> Self::Vals;
    /// `acc + w * x`, in a fixed order.
    ///
    /// # Safety
    /// As [`Lanes::zero`].
    unsafe fn multiply_add(acc: Self::Acc, w: Self::Vals, x: Self::Vals) -> Self::Acc;
    /// The partial sums added up, in a fixed order.
    ///
    /// # Safety
    /// As [`Lanes::zero`].
    unsafe fn sum(acc: Self::Acc) -> f32;
    /// [`dot`] compiled for this variant's instructions.
    ///
    /// # Safety
    /// As [`dot`], and the CPU has the variant's instructions.
    unsafe fn dot<const R: usize, const M: usize>(
        w: *const Self::E,
        x: *const Self::X,
        x_stride: usize,
        k: usize,
        y: *mut Self::E,
        y_stride: usize,
    );
}

/// The inputs widened to f32 for a variant with `WIDENED` inputs of `lanes` values per load:
/// each row padded with zeros to whole loads, and within each load the even-numbered values
/// first, then the odd ones, as the variant splits its weights. Returns the values and the
/// row stride.
fn widen_inputs<E: Element>(x: &[E], k: usize, lanes: usize) -> (Vec<f32>, usize) {
    let stride = k.div_ceil(lanes) * lanes;
    let half = lanes / 2;
    let mut out = vec![0.0; x.len() / k * stride];
    for (row, widened) in x.chunks_exact(k).zip(out.chunks_exact_mut(stride)) {
        for (i, v) in row.iter().enumerate() {
            let (block, at) = (i / lanes * lanes, i % lanes);
            widened[block + at / 2 + (at % 2) * half] = v.to_f32();
        }
    }
    (out, stride)
}

/// `y[m][o] = sum_k x[m][k] * w[o][k]`, accumulated in f32 (what
/// `torch.nn.functional.linear` computes, up to summation order), with the active variant.
/// `x` holds `rows * k` values, `w` `out * k`, `y` `rows * out`; `threads` is how many OpenMP
/// threads to spread the weight rows over.
///
/// # Panics
/// When the lengths disagree or `rows` exceeds [`MAX_ROWS`].
pub fn linear<E: Element>(x: &[E], w: &[E], k: usize, y: &mut [E], threads: usize) {
    linear_with(Variant::active(), x, w, k, y, threads)
}

/// [`linear`] with a given variant.
///
/// # Panics
/// As [`linear`], and when the CPU lacks the variant's instructions.
pub fn linear_with<E: Element>(
    variant: Variant,
    x: &[E],
    w: &[E],
    k: usize,
    y: &mut [E],
    threads: usize,
) {
    variant.assert_supported();
    assert!(
        k > 0 && x.len().is_multiple_of(k) && w.len().is_multiple_of(k),
        "shapes disagree"
    );
    let (rows, out) = (x.len() / k, w.len() / k);
    assert!(rows <= MAX_ROWS, "{rows} rows: more than {MAX_ROWS}");
    assert_eq!(y.len(), rows * out, "output length");
    let kernel = E::kernel(variant);
    let widened;
    #[cfg(target_arch = "x86_64")]
    let pairs;
    let (x_ptr, x_stride) = match kernel.inputs {
        Inputs::AsIs => (x.as_ptr().cast::<u8>(), k),
        Inputs::Widened { lanes } => {
            widened = widen_inputs(x, k, lanes);
            (widened.0.as_ptr().cast::<u8>(), widened.1)
        }
        #[cfg(target_arch = "x86_64")]
        Inputs::Pairs => {
            pairs = amx::pairs(x, k);
            (pairs.0.as_ptr().cast::<u8>(), pairs.1)
        }
    };
    let job = Job {
        x: x_ptr,
        x_stride,
        w: w.as_ptr(),
        y: y.as_mut_ptr(),
        k,
        rows,
        out,
        run: kernel.run,
        block: kernel.block,
    };
    let parallel = threads > 1 && std::mem::size_of_val(w) >= PARALLEL_MIN_BYTES;
    // Whole blocks of weight rows, in order of thread number, so every thread but the last
    // runs full blocks (and a block's outputs sit where they would with one thread).
    // SAFETY: the lengths were checked above, `y` is borrowed mutably for the call, the
    // variant is supported, and each thread computes a different range of weight rows, so
    // no output is written twice.
    unsafe {
        openmp::run_shares(
            out,
            job.block,
            if parallel { threads } else { 1 },
            &|rows| (job.run)(&job, rows),
        )
    }
}

/// One product, shared by the threads that compute it.
pub struct Job<E> {
    /// The inputs as the kernel reads them ([`Inputs`]).
    x: *const u8,
    x_stride: usize,
    w: *const E,
    y: *mut E,
    k: usize,
    rows: usize,
    out: usize,
    run: unsafe fn(&Job<E>, Range<usize>),
    block: usize,
}

impl<E: Element> Job<E> {
    /// Computes the outputs of weight rows `range` for every input row with `L`.
    ///
    /// # Safety
    /// The pointers cover the lengths `linear_with` checked, `x` is in `L`'s input layout,
    /// `range` lies within `0..out`, no other thread writes the same outputs, and the CPU has
    /// `L`'s instructions.
    unsafe fn run<L: Lanes<E = E>>(&self, range: Range<usize>) {
        let (k, out, x_stride) = (self.k, self.out, self.x_stride);
        let inputs_base = self.x.cast::<L::X>();
        let mut o = range.start;
        while o < range.end {
            let w = self.w.add(o * k);
            let full = range.end - o >= ROW_BLOCK;
            let mut m = 0;
            while m < self.rows {
                let inputs = (self.rows - m).min(L::INPUTS).min(MAX_INPUT_BLOCK);
                let (x, y) = (inputs_base.add(m * x_stride), self.y.add(m * out + o));
                macro_rules! dot {
                    ($($n:literal)*) => {
                        match (full, inputs) {
                            $((true, $n) => L::dot::<ROW_BLOCK, $n>(w, x, x_stride, k, y, out),)*
                            $((false, $n) => L::dot::<1, $n>(w, x, x_stride, k, y, out),)*
                            _ => unreachable!("1 to MAX_INPUT_BLOCK inputs"),
                        }
                    };
                }
                dot!(1 2 3 4 5 6);
                m += inputs;
            }
            o += if full { ROW_BLOCK } else { 1 };
        }
    }
}

/// Dot products of `R` weight rows (stride `k`) with `M` input rows (stride `x_stride`),
/// written to `y[m * y_stride + r]`: `L::LANES` values per step; the weights' tail from a
/// zero-padded copy, the inputs' too unless widened (already padded). Each accumulator's
/// partial sums are added up at the end. Inlined into each variant's [`Lanes::dot`], which
/// enables that variant's instructions.
#[inline(always)]
unsafe fn dot<L: Lanes, const R: usize, const M: usize>(
    w: *const L::E,
    x: *const L::X,
    x_stride: usize,
    k: usize,
    y: *mut L::E,
    y_stride: usize,
) {
    let mut acc = [[L::zero(); M]; R];
    let mut inputs = [L::zero_vals(); M];
    let mut c = 0;
    while c + L::LANES <= k {
        for (m, input) in inputs.iter_mut().enumerate() {
            *input = L::load_input(x.add(m * x_stride + c));
        }
        for (r, row) in acc.iter_mut().enumerate() {
            let weights = L::load(w.add(r * k + c));
            for (sum, input) in row.iter_mut().zip(&inputs) {
                *sum = L::multiply_add(*sum, weights, *input);
            }
        }
        c += L::LANES;
    }
    if c < k {
        let tail = k - c;
        for (m, input) in inputs.iter_mut().enumerate() {
            let at = x.add(m * x_stride + c);
            *input = if L::WIDENED {
                L::load_input(at)
            } else {
                L::load_input(padded(at, tail).as_ptr())
            };
        }
        for (r, row) in acc.iter_mut().enumerate() {
            let weights = L::load(padded(w.add(r * k + c), tail).as_ptr());
            for (sum, input) in row.iter_mut().zip(&inputs) {
                *sum = L::multiply_add(*sum, weights, *input);
            }
        }
    }
    for (r, row) in acc.iter().enumerate() {
        for (m, sum) in row.iter().enumerate() {
            *y.add(m * y_stride + r) = L::E::from_sum(L::sum(*sum));
        }
    }
}

/// `0..len` cut into as few ranges of at most `most` as possible, equal to within one: a tile
/// of a few rows keeps too little work in flight, so 8 rows with at most 6 run as 4 + 4, not
/// 6 + 2.
fn equal_parts(len: usize, most: usize) -> impl Iterator<Item = Range<usize>> {
    let parts = len.div_ceil(most);
    (0..parts).map(move |i| i * len / parts..(i + 1) * len / parts)
}

/// `n < MAX_LANES` values from `p`, then zeros, which add nothing to a dot product.
#[inline(always)]
unsafe fn padded<V: Element>(p: *const V, n: usize) -> [V; MAX_LANES] {
    let mut buf = [V::ZERO; MAX_LANES];
    std::ptr::copy_nonoverlapping(p, buf.as_mut_ptr(), n);
    buf
}

#[cfg(test)]
mod tests;
