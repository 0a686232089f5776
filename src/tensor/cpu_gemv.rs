//! Matrix products of a few rows (a decode step) on an x86-64 CPU with AVX-512, in bf16
//! (with AVX512-BF16) and f32.
//!
//! A decode step multiplies a handful of rows (one per stream in the backbone, two per stream
//! in the flow head's last layer, six in its others) by every weight matrix, so it is bound by
//! reading the weights. libtorch's bf16 GEMM (oneDNN) repacks the weight for each call and
//! reads it at about half of this machine's copy bandwidth; this kernel streams each weight
//! row once through `vdpbf16ps` (bf16) or `vfmadd` (f32) and reaches the copy bandwidth
//! (docs/performance.md).
//!
//! Every output element is summed in the same order whatever the number of rows or threads,
//! so a request's result does not depend on the batch it runs in (libtorch's GEMMs pick
//! different kernels for different row counts, which changes the rounding).

use half::bf16;
use libc::c_void;
use std::arch::x86_64::*;
use std::sync::OnceLock;

/// Input rows up to which this kernel is used. Above, a product is compute-bound and
/// libtorch's blocked GEMM is the better choice (prefill).
pub const MAX_ROWS: usize = 64;

/// Weights smaller than this run on the calling thread: splitting costs more than it saves.
const PARALLEL_MIN_BYTES: usize = 256 << 10;

/// Weight rows per block: four rows share each load of an input.
const ROW_BLOCK: usize = 4;

/// Input rows per block: up to six inputs share each load of a weight row (4 x 6 accumulators,
/// 6 inputs and a weight fill the 32 vector registers). More inputs run as more passes over a
/// block of weight rows, which then comes from the cache.
const INPUT_BLOCK: usize = 6;

/// An element type the kernel multiplies: how 512 bits of it load and accumulate into 16 f32
/// partial sums.
pub trait Element: Copy + 'static {
    /// Values per 512-bit load.
    const LANES: usize;

    /// Whether this CPU has the instructions the kernel needs for this type.
    fn available() -> bool;

    /// Loads `LANES` values.
    ///
    /// # Safety
    /// `ptr` points to `LANES` readable values and the CPU has [`Element::available`].
    unsafe fn load(ptr: *const Self) -> __m512i;

    /// Loads `n < LANES` values; the other lanes are zero and add nothing.
    ///
    /// # Safety
    /// `ptr` points to `n` readable values and the CPU has [`Element::available`].
    unsafe fn load_part(ptr: *const Self, n: usize) -> __m512i;

    /// `acc + w * x`, lane pairs (bf16) or lanes (f32) summed into 16 f32 lanes.
    ///
    /// # Safety
    /// The CPU has [`Element::available`].
    unsafe fn multiply_add(acc: __m512, w: __m512i, x: __m512i) -> __m512;

    /// The finished f32 sum as this type (rounded to nearest even for bf16, as libtorch does).
    fn from_sum(sum: f32) -> Self;

    /// [`dot`] compiled for this type's instructions.
    ///
    /// # Safety
    /// As [`dot`], and the CPU has [`Element::available`].
    unsafe fn dot<const R: usize, const M: usize>(
        w: *const Self,
        x: *const Self,
        k: usize,
        y: *mut Self,
        y_stride: usize,
    );
}

/// An `Element::dot` that runs [`dot`] with `$features` enabled, so the element's intrinsics
/// inline into its loop.
macro_rules! dot_with_features {
    ($features:literal) => {
        #[target_feature(enable = $features)]
        unsafe fn dot<const R: usize, const M: usize>(
            w: *const Self,
            x: *const Self,
            k: usize,
            y: *mut Self,
            y_stride: usize,
        ) {
            dot::<Self, R, M>(w, x, k, y, y_stride)
        }
    };
}

impl Element for bf16 {
    const LANES: usize = 32;

    fn available() -> bool {
        static AVAILABLE: OnceLock<bool> = OnceLock::new();
        *AVAILABLE.get_or_init(|| {
            is_x86_feature_detected!("avx512f")
                && is_x86_feature_detected!("avx512bw")
                && is_x86_feature_detected!("avx512bf16")
        })
    }

    #[inline(always)]
    unsafe fn load(ptr: *const Self) -> __m512i {
        _mm512_loadu_si512(ptr.cast())
    }

    #[inline(always)]
    unsafe fn load_part(ptr: *const Self, n: usize) -> __m512i {
        _mm512_maskz_loadu_epi16((1u32 << n) - 1, ptr.cast())
    }

    #[inline(always)]
    unsafe fn multiply_add(acc: __m512, w: __m512i, x: __m512i) -> __m512 {
        // SAFETY: both are 512-bit vectors; every bit pattern is valid for either.
        let pairs = |v: __m512i| std::mem::transmute::<__m512i, __m512bh>(v);
        _mm512_dpbf16_ps(acc, pairs(w), pairs(x))
    }

    fn from_sum(sum: f32) -> Self {
        bf16::from_f32(sum)
    }

    dot_with_features!("avx512f,avx512bw,avx512bf16");
}

impl Element for f32 {
    const LANES: usize = 16;

    fn available() -> bool {
        static AVAILABLE: OnceLock<bool> = OnceLock::new();
        *AVAILABLE.get_or_init(|| is_x86_feature_detected!("avx512f"))
    }

    #[inline(always)]
    unsafe fn load(ptr: *const Self) -> __m512i {
        _mm512_loadu_si512(ptr.cast())
    }

    #[inline(always)]
    unsafe fn load_part(ptr: *const Self, n: usize) -> __m512i {
        _mm512_castps_si512(_mm512_maskz_loadu_ps((1u16 << n) - 1, ptr))
    }

    #[inline(always)]
    unsafe fn multiply_add(acc: __m512, w: __m512i, x: __m512i) -> __m512 {
        _mm512_fmadd_ps(_mm512_castsi512_ps(w), _mm512_castsi512_ps(x), acc)
    }

    fn from_sum(sum: f32) -> Self {
        sum
    }

    dot_with_features!("avx512f");
}

/// `y[m][o] = sum_k x[m][k] * w[o][k]`, accumulated in f32 (what
/// `torch.nn.functional.linear` computes, up to summation order). `x` holds `rows * k` values,
/// `w` `out * k`, `y` `rows * out`; `threads` is how many OpenMP threads to spread the weight
/// rows over.
///
/// # Panics
/// When the lengths disagree, `rows` exceeds [`MAX_ROWS`], or the CPU lacks the instructions
/// ([`Element::available`]).
pub fn linear<E: Element>(x: &[E], w: &[E], k: usize, y: &mut [E], threads: usize) {
    assert!(E::available(), "this CPU lacks the AVX-512 instructions");
    assert!(
        k > 0 && x.len().is_multiple_of(k) && w.len().is_multiple_of(k),
        "shapes disagree"
    );
    let (rows, out) = (x.len() / k, w.len() / k);
    assert!(rows <= MAX_ROWS, "{rows} rows: more than {MAX_ROWS}");
    assert_eq!(y.len(), rows * out, "output length");
    let job = Job {
        x: x.as_ptr(),
        w: w.as_ptr(),
        y: y.as_mut_ptr(),
        k,
        rows,
        out,
    };
    let parallel = threads > 1 && std::mem::size_of_val(w) >= PARALLEL_MIN_BYTES;
    match openmp::runtime() {
        Some(omp) if parallel => {
            // SAFETY: `job` lives until `parallel` returns, and each thread computes a
            // different range of weight rows (`run_share`), so no output is written twice.
            unsafe {
                omp.parallel(
                    run_share::<E>,
                    &job as *const Job<E> as *mut c_void,
                    threads,
                )
            }
        }
        // SAFETY: the lengths were checked above; `y` is borrowed mutably for the call.
        _ => unsafe { job.run(0..out) },
    }
}

/// Runs one OpenMP thread's share of a [`Job`]: whole blocks of weight rows, in order of
/// thread number, so every thread but the last runs full blocks.
extern "C" fn run_share<E: Element>(job: *mut c_void) {
    let omp = openmp::runtime().expect("called from an OpenMP parallel region");
    // SAFETY: `linear` passes a `Job<E>` that outlives the parallel region.
    let job = unsafe { &*(job as *const Job<E>) };
    let (thread, threads) = omp.thread();
    let per_thread = job.out.div_ceil(threads).div_ceil(ROW_BLOCK) * ROW_BLOCK;
    let start = (thread * per_thread).min(job.out);
    let end = (start + per_thread).min(job.out);
    // SAFETY: the ranges of different threads are disjoint and within `0..out`.
    unsafe { job.run(start..end) };
}

/// The OpenMP runtime libtorch already runs its parallel regions on (GNU libgomp, or a
/// runtime that exports its entry points, as LLVM's and Intel's do). Splitting the kernel
/// over the same threads keeps the process at one thread per core: a second pool would
/// compete with OpenMP's threads, which spin for a while after each region.
mod openmp {
    use libc::{c_int, c_uint, c_void};
    use std::sync::OnceLock;

    type Body = extern "C" fn(*mut c_void);
    /// `GOMP_parallel(body, data, num_threads, flags)`.
    type Parallel = unsafe extern "C" fn(Body, *mut c_void, c_uint, c_uint);
    /// `omp_get_thread_num()`, `omp_get_num_threads()`.
    type Query = unsafe extern "C" fn() -> c_int;

    pub struct Runtime {
        parallel: Parallel,
        thread_num: Query,
        num_threads: Query,
    }

    impl Runtime {
        /// Runs `body(data)` on `threads` threads and returns when all are done.
        ///
        /// # Safety
        /// `body` must be safe to run concurrently on `data`.
        pub unsafe fn parallel(&self, body: Body, data: *mut c_void, threads: usize) {
            let threads = c_uint::try_from(threads).unwrap_or(c_uint::MAX);
            (self.parallel)(body, data, threads, 0);
        }

        /// This thread's number and the team's size, inside a parallel region.
        pub fn thread(&self) -> (usize, usize) {
            // SAFETY: both are plain queries with no preconditions.
            let (n, of) = unsafe { ((self.thread_num)(), (self.num_threads)()) };
            (n.max(0) as usize, of.max(1) as usize)
        }
    }

    /// The runtime loaded in this process, if any.
    pub fn runtime() -> Option<&'static Runtime> {
        static RUNTIME: OnceLock<Option<Runtime>> = OnceLock::new();
        RUNTIME
            .get_or_init(|| {
                // SAFETY: looking symbols up has no preconditions; each one, when present,
                // has the C signature of the OpenMP ABI it is cast to.
                unsafe {
                    let find =
                        |name: &std::ffi::CStr| libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr());
                    let (parallel, thread_num, num_threads) = (
                        find(c"GOMP_parallel"),
                        find(c"omp_get_thread_num"),
                        find(c"omp_get_num_threads"),
                    );
                    if parallel.is_null() || thread_num.is_null() || num_threads.is_null() {
                        return None;
                    }
                    Some(Runtime {
                        parallel: std::mem::transmute::<*mut c_void, Parallel>(parallel),
                        thread_num: std::mem::transmute::<*mut c_void, Query>(thread_num),
                        num_threads: std::mem::transmute::<*mut c_void, Query>(num_threads),
                    })
                }
            })
            .as_ref()
    }
}

/// One product, shared by the threads that compute it.
struct Job<E> {
    x: *const E,
    w: *const E,
    y: *mut E,
    k: usize,
    rows: usize,
    out: usize,
}

impl<E: Element> Job<E> {
    /// Computes the outputs of weight rows `range` for every input row.
    ///
    /// # Safety
    /// The pointers cover the lengths `linear` checked, `range` lies within `0..out`, and no
    /// other thread writes the same outputs.
    unsafe fn run(&self, range: std::ops::Range<usize>) {
        let (k, out) = (self.k, self.out);
        let mut o = range.start;
        while o < range.end {
            let w = self.w.add(o * k);
            let full = range.end - o >= ROW_BLOCK;
            let mut m = 0;
            while m < self.rows {
                let inputs = (self.rows - m).min(INPUT_BLOCK);
                let (x, y) = (self.x.add(m * k), self.y.add(m * out + o));
                macro_rules! dot {
                    ($($n:literal)*) => {
                        match (full, inputs) {
                            $((true, $n) => E::dot::<ROW_BLOCK, $n>(w, x, k, y, out),)*
                            $((false, $n) => E::dot::<1, $n>(w, x, k, y, out),)*
                            _ => unreachable!("1 to INPUT_BLOCK inputs"),
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

/// Dot products of `R` weight rows (stride `k`) with `M` input rows (stride `k`), written to
/// `y[m * y_stride + r]`. `E::LANES` values per step, the tail through a masked load; each
/// accumulator holds 16 partial sums, added up at the end. Inlined into each type's
/// [`Element::dot`], which enables that type's instructions.
#[inline(always)]
unsafe fn dot<E: Element, const R: usize, const M: usize>(
    w: *const E,
    x: *const E,
    k: usize,
    y: *mut E,
    y_stride: usize,
) {
    let mut acc = [[_mm512_setzero_ps(); M]; R];
    let mut inputs = [_mm512_setzero_si512(); M];
    let mut c = 0;
    while c + E::LANES <= k {
        for (m, input) in inputs.iter_mut().enumerate() {
            *input = E::load(x.add(m * k + c));
        }
        for (r, row) in acc.iter_mut().enumerate() {
            let weights = E::load(w.add(r * k + c));
            for (sum, input) in row.iter_mut().zip(&inputs) {
                *sum = E::multiply_add(*sum, weights, *input);
            }
        }
        c += E::LANES;
    }
    if c < k {
        for (m, input) in inputs.iter_mut().enumerate() {
            *input = E::load_part(x.add(m * k + c), k - c);
        }
        for (r, row) in acc.iter_mut().enumerate() {
            let weights = E::load_part(w.add(r * k + c), k - c);
            for (sum, input) in row.iter_mut().zip(&inputs) {
                *sum = E::multiply_add(*sum, weights, *input);
            }
        }
    }
    for (r, row) in acc.iter().enumerate() {
        for (m, sum) in row.iter().enumerate() {
            *y.add(m * y_stride + r) = E::from_sum(_mm512_reduce_add_ps(*sum));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    trait FromF32: Element + PartialEq + std::fmt::Debug {
        fn from(v: f32) -> Self;
        fn to(self) -> f32;
    }
    impl FromF32 for bf16 {
        fn from(v: f32) -> Self {
            bf16::from_f32(v)
        }
        fn to(self) -> f32 {
            self.to_f32()
        }
    }
    impl FromF32 for f32 {
        fn from(v: f32) -> Self {
            v
        }
        fn to(self) -> f32 {
            self
        }
    }

    fn available<E: Element>() {
        assert!(
            E::available(),
            "these tests need AVX-512 and AVX512-BF16, as CI's CPU has"
        );
        assert!(
            openmp::runtime().is_some(),
            "libtorch's OpenMP runtime is loaded"
        );
    }

    /// Small integers: every product and partial sum is exact in f32, so the result does not
    /// depend on summation order.
    fn integers<E: FromF32>(n: usize, seed: u32) -> Vec<E> {
        (0..n as u32)
            .map(|i| E::from(((i.wrapping_mul(2_654_435_761) ^ seed) % 17) as f32 - 8.0))
            .collect()
    }

    fn reference<E: FromF32>(x: &[E], w: &[E], k: usize) -> Vec<E> {
        let (rows, out) = (x.len() / k, w.len() / k);
        let mut y = Vec::with_capacity(rows * out);
        for m in 0..rows {
            for o in 0..out {
                let s: f32 = (0..k).map(|i| x[m * k + i].to() * w[o * k + i].to()).sum();
                y.push(E::from_sum(s));
            }
        }
        y
    }

    fn matches_a_plain_product<E: FromF32>() {
        available::<E>();
        // Row tails (out % 4), input tails (rows % 6), k tails (k % lanes), and a weight large
        // enough to be split across threads.
        for (rows, out, k) in [
            (1, 4, 32),
            (3, 7, 45),
            (7, 9, 64),
            (64, 13, 3),
            (2, 1030, 160),
        ] {
            let x = integers::<E>(rows * k, 1);
            let w = integers::<E>(out * k, 2);
            let want = reference(&x, &w, k);
            for threads in [1, 2, 3] {
                let mut y = vec![E::from(0.0); rows * out];
                linear(&x, &w, k, &mut y, threads);
                assert_eq!(y, want, "rows {rows} out {out} k {k} threads {threads}");
            }
        }
    }

    #[test]
    fn bf16_matches_a_plain_product_for_every_shape_and_thread_count() {
        matches_a_plain_product::<bf16>();
    }

    #[test]
    fn f32_matches_a_plain_product_for_every_shape_and_thread_count() {
        matches_a_plain_product::<f32>();
    }

    fn same_bits_alone_and_in_a_batch<E: FromF32>() {
        available::<E>();
        // Values whose sums do round: only the order of summation could differ.
        let (k, out) = (200, 37);
        let x: Vec<E> = (0..9 * k)
            .map(|i| E::from((i as f32 * 0.618).sin()))
            .collect();
        let w: Vec<E> = (0..out * k)
            .map(|i| E::from((i as f32 * 0.377).cos() * 0.1))
            .collect();
        let mut batch = vec![E::from(0.0); 9 * out];
        linear(&x, &w, k, &mut batch, 2);
        for m in 0..9 {
            let mut alone = vec![E::from(0.0); out];
            linear(&x[m * k..(m + 1) * k], &w, k, &mut alone, 1);
            assert_eq!(alone, batch[m * out..(m + 1) * out], "row {m}");
        }
    }

    #[test]
    fn a_row_gives_the_same_bits_alone_and_in_a_batch() {
        same_bits_alone_and_in_a_batch::<bf16>();
        same_bits_alone_and_in_a_batch::<f32>();
    }
}
