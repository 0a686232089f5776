//! The OpenMP runtime libtorch already runs its parallel regions on (GNU libgomp, or a
//! runtime that exports its entry points, as LLVM's and Intel's do). Splitting the kernel
//! over the same threads keeps the process at one thread per core: a second pool would
//! compete with OpenMP's threads, which spin for a while after each region.

use libc::{c_int, c_uint, c_void};
use std::ops::Range;
use std::sync::OnceLock;

pub type Body = extern "C" fn(*mut c_void);
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

    /// This thread's part of `0..len`, inside a parallel region: whole blocks of `block`, in
    /// order of thread number, so every thread but the last gets full blocks. The parts of
    /// the team's threads are disjoint and cover `0..len`.
    pub fn share(&self, len: usize, block: usize) -> Range<usize> {
        let (thread, threads) = self.thread();
        let per_thread = len.div_ceil(threads).div_ceil(block) * block;
        let start = (thread * per_thread).min(len);
        start..(start + per_thread).min(len)
    }
}

/// Runs `run` over `0..len` on `threads` OpenMP threads, each thread on its [`Runtime::share`]
/// of whole blocks of `block`; on the calling thread, `run(0..len)`, when `threads` is 1 or no
/// runtime is loaded.
///
/// # Safety
/// `run` must be safe to call concurrently on disjoint ranges.
pub unsafe fn run_shares(len: usize, block: usize, threads: usize, run: &dyn Fn(Range<usize>)) {
    struct Shares<'a> {
        len: usize,
        block: usize,
        run: &'a dyn Fn(Range<usize>),
    }
    extern "C" fn body(data: *mut c_void) {
        let omp = runtime().expect("called from an OpenMP parallel region");
        // SAFETY: `run_shares` passes `Shares` that outlive the parallel region.
        let shares = unsafe { &*(data as *const Shares) };
        (shares.run)(omp.share(shares.len, shares.block));
    }
    match runtime() {
        Some(omp) if threads > 1 => {
            let shares = Shares { len, block, run };
            // SAFETY: `shares` lives until `parallel` returns; the caller vouches for `run`
            // on the threads' disjoint ranges.
            omp.parallel(body, &shares as *const Shares as *mut c_void, threads)
        }
        _ => run(0..len),
    }
}

/// The runtime loaded in this process, if any.
pub fn runtime() -> Option<&'static Runtime> {
    static RUNTIME: OnceLock<Option<Runtime>> = OnceLock::new();
    RUNTIME
        .get_or_init(|| {
            // SAFETY: looking symbols up has no preconditions; each one, when present, has
            // the C signature of the OpenMP ABI it is cast to.
            unsafe {
                let find = |name: &std::ffi::CStr| libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr());
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
