//! bf16 matrix products of a few rows on an x86-64 CPU with AVX512-BF16.
//!
//! A decode step multiplies a handful of rows (one per stream in the backbone, six per stream
//! in the flow head) by every weight matrix, so it is bound by reading the weights. libtorch's
//! bf16 GEMM (oneDNN) repacks the weight for each call and reads it at about half of this
//! machine's copy bandwidth; this kernel streams each weight row once through `vdpbf16ps` dot
//! products and reaches the copy bandwidth (docs/performance.md).
//!
//! Every output element is summed in the same order whatever the number of rows or threads,
//! so a request's result does not depend on the batch it runs in.

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

/// Input rows per block: four inputs share each load of a weight row. More inputs run as more
/// passes over a block of weight rows, which then comes from the cache.
const INPUT_BLOCK: usize = 6;

/// Whether this CPU has the instructions the kernel needs.
pub fn available() -> bool {
    static AVAILABLE: OnceLock<bool> = OnceLock::new();
    *AVAILABLE.get_or_init(|| {
        is_x86_feature_detected!("avx512f")
            && is_x86_feature_detected!("avx512bw")
            && is_x86_feature_detected!("avx512bf16")
    })
}

/// `y[m][o] = sum_k x[m][k] * w[o][k]`, accumulated in f32 and rounded to bf16 (what
/// `torch.nn.functional.linear` computes, up to summation order). `x` holds `rows * k` values,
/// `w` `out * k`, `y` `rows * out`; `threads` is how many OpenMP threads to spread the weight rows over.
///
/// # Panics
/// When the lengths disagree, `rows` exceeds [`MAX_ROWS`], or [`available`] is false.
pub fn linear(x: &[bf16], w: &[bf16], k: usize, y: &mut [bf16], threads: usize) {
    assert!(available(), "AVX512-BF16 is not available on this CPU");
    assert!(
        k > 0 && x.len().is_multiple_of(k) && w.len().is_multiple_of(k),
        "shapes disagree"
    );
    let (rows, out) = (x.len() / k, w.len() / k);
    assert!(rows <= MAX_ROWS, "{rows} rows: more than {MAX_ROWS}");
    assert_eq!(y.len(), rows * out, "output length");
    let job = Job {
        x: x.as_ptr().cast(),
        w: w.as_ptr().cast(),
        y: y.as_mut_ptr().cast(),
        k,
        rows,
        out,
    };
    let parallel = threads > 1 && std::mem::size_of_val(w) >= PARALLEL_MIN_BYTES;
    match openmp::runtime() {
        Some(omp) if parallel => {
            // SAFETY: `job` lives until `parallel` returns, and each thread computes a
            // different range of weight rows (`run_share`), so no output is written twice.
            unsafe { omp.parallel(run_share, &job as *const Job as *mut c_void, threads) }
        }
        // SAFETY: the lengths were checked above; `y` is borrowed mutably for the call.
        _ => unsafe { job.run(0..out) },
    }
}

/// Runs one OpenMP thread's share of a [`Job`]: whole blocks of weight rows, in order of
/// thread number, so every thread but the last runs full blocks.
extern "C" fn run_share(job: *mut c_void) {
    let omp = openmp::runtime().expect("called from an OpenMP parallel region");
    // SAFETY: `linear` passes a `Job` that outlives the parallel region.
    let job = unsafe { &*(job as *const Job) };
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
struct Job {
    x: *const u16,
    w: *const u16,
    y: *mut u16,
    k: usize,
    rows: usize,
    out: usize,
}

impl Job {
    /// Computes the outputs of weight rows `range` for every input row.
    ///
    /// # Safety
    /// The pointers cover the lengths `linear` checked, `range` lies within `0..out`, and no
    /// other thread writes the same outputs.
    unsafe fn run(&self, range: std::ops::Range<usize>) {
        let (k, out) = (self.k, self.out);
        let mut o = range.start;
        while o < range.end {
            let block = if range.end - o >= ROW_BLOCK {
                ROW_BLOCK
            } else {
                1
            };
            let w = self.w.add(o * k);
            let mut m = 0;
            while m < self.rows {
                let inputs = (self.rows - m).min(INPUT_BLOCK);
                let x = self.x.add(m * k);
                let y = self.y.add(m * out + o);
                match (block, inputs) {
                    (ROW_BLOCK, 1) => dot::<ROW_BLOCK, 1>(w, x, k, y, out),
                    (ROW_BLOCK, 2) => dot::<ROW_BLOCK, 2>(w, x, k, y, out),
                    (ROW_BLOCK, 3) => dot::<ROW_BLOCK, 3>(w, x, k, y, out),
                    (ROW_BLOCK, 4) => dot::<ROW_BLOCK, 4>(w, x, k, y, out),
                    (ROW_BLOCK, 5) => dot::<ROW_BLOCK, 5>(w, x, k, y, out),
                    (ROW_BLOCK, _) => dot::<ROW_BLOCK, INPUT_BLOCK>(w, x, k, y, out),
                    (_, 1) => dot::<1, 1>(w, x, k, y, out),
                    (_, 2) => dot::<1, 2>(w, x, k, y, out),
                    (_, 3) => dot::<1, 3>(w, x, k, y, out),
                    (_, 4) => dot::<1, 4>(w, x, k, y, out),
                    (_, 5) => dot::<1, 5>(w, x, k, y, out),
                    (_, _) => dot::<1, INPUT_BLOCK>(w, x, k, y, out),
                }
                m += inputs;
            }
            o += block;
        }
    }
}

/// Dot products of `R` weight rows (stride `k`) with `M` input rows (stride `k`), written to
/// `y[m * y_stride + r]` as bf16. 32 values per step, the tail through a masked load; each
/// accumulator holds 16 partial sums, added up at the end.
#[target_feature(enable = "avx512f,avx512bw,avx512bf16")]
unsafe fn dot<const R: usize, const M: usize>(
    w: *const u16,
    x: *const u16,
    k: usize,
    y: *mut u16,
    y_stride: usize,
) {
    let mut acc = [[_mm512_setzero_ps(); M]; R];
    let mut inputs: [__m512bh; M] = [pairs(_mm512_setzero_si512()); M];
    let mut c = 0;
    while c + 32 <= k {
        for (m, input) in inputs.iter_mut().enumerate() {
            *input = pairs(_mm512_loadu_si512(x.add(m * k + c).cast()));
        }
        for (r, row) in acc.iter_mut().enumerate() {
            let weights: __m512bh = pairs(_mm512_loadu_si512(w.add(r * k + c).cast()));
            for (sum, input) in row.iter_mut().zip(&inputs) {
                *sum = _mm512_dpbf16_ps(*sum, weights, *input);
            }
        }
        c += 32;
    }
    if c < k {
        // Masked-off lanes load as zeros and add nothing.
        let mask: __mmask32 = (1u32 << (k - c)) - 1;
        for (m, input) in inputs.iter_mut().enumerate() {
            *input = pairs(_mm512_maskz_loadu_epi16(mask, x.add(m * k + c).cast()));
        }
        for (r, row) in acc.iter_mut().enumerate() {
            let weights: __m512bh = pairs(_mm512_maskz_loadu_epi16(mask, w.add(r * k + c).cast()));
            for (sum, input) in row.iter_mut().zip(&inputs) {
                *sum = _mm512_dpbf16_ps(*sum, weights, *input);
            }
        }
    }
    for (r, row) in acc.iter().enumerate() {
        for (m, sum) in row.iter().enumerate() {
            *y.add(m * y_stride + r) = bf16::from_f32(_mm512_reduce_add_ps(*sum)).to_bits();
        }
    }
}

/// 32 bf16 values as the operand type of `vdpbf16ps` (the same bits).
#[inline]
#[target_feature(enable = "avx512f")]
fn pairs(v: __m512i) -> __m512bh {
    // SAFETY: both are 512-bit vectors; every bit pattern is valid for either.
    unsafe { std::mem::transmute::<__m512i, __m512bh>(v) }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values(n: usize, seed: u32) -> Vec<bf16> {
        // Small integers times a power of two: every product and partial sum is exact in f32,
        // so the result does not depend on summation order.
        (0..n as u32)
            .map(|i| bf16::from_f32(((i.wrapping_mul(2_654_435_761) ^ seed) % 17) as f32 - 8.0))
            .collect()
    }

    fn reference(x: &[bf16], w: &[bf16], k: usize) -> Vec<bf16> {
        let (rows, out) = (x.len() / k, w.len() / k);
        let mut y = Vec::with_capacity(rows * out);
        for m in 0..rows {
            for o in 0..out {
                let s: f32 = (0..k)
                    .map(|i| x[m * k + i].to_f32() * w[o * k + i].to_f32())
                    .sum();
                y.push(bf16::from_f32(s));
            }
        }
        y
    }

    #[test]
    fn matches_a_plain_product_for_every_shape_and_thread_count() {
        assert!(
            available(),
            "these tests need a CPU with AVX512-BF16, as CI's has"
        );
        // Row tails (out % 4), input tails (rows % 4), k tails (k % 32), and a weight large
        // enough to be split across threads.
        for (rows, out, k) in [
            (1, 4, 32),
            (3, 7, 45),
            (5, 9, 64),
            (64, 13, 3),
            (2, 1030, 160),
        ] {
            let x = values(rows * k, 1);
            let w = values(out * k, 2);
            let want = reference(&x, &w, k);
            for threads in [1, 2, 3] {
                let mut y = vec![bf16::ZERO; rows * out];
                linear(&x, &w, k, &mut y, threads);
                assert_eq!(y, want, "rows {rows} out {out} k {k} threads {threads}");
            }
        }
    }

    #[test]
    fn a_row_gives_the_same_bits_alone_and_in_a_batch() {
        assert!(
            available(),
            "these tests need a CPU with AVX512-BF16, as CI's has"
        );
        // Random-looking values whose sums do round: only the order of summation could differ.
        let (k, out) = (200, 37);
        let x: Vec<bf16> = (0..9 * k)
            .map(|i| bf16::from_f32(((i as f32) * 0.618).sin()))
            .collect();
        let w: Vec<bf16> = (0..out * k)
            .map(|i| bf16::from_f32(((i as f32) * 0.377).cos() * 0.1))
            .collect();
        let mut batch = vec![bf16::ZERO; 9 * out];
        linear(&x, &w, k, &mut batch, 2);
        for m in 0..9 {
            let mut alone = vec![bf16::ZERO; out];
            linear(&x[m * k..(m + 1) * k], &w, k, &mut alone, 1);
            assert_eq!(alone, batch[m * out..(m + 1) * out], "row {m}");
        }
    }
}
