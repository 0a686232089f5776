//! The CPU's f32 FMA rate: what `bench` puts the products' rates against.

use super::Variant;
#[cfg(target_arch = "x86_64")]
use super::{openmp, x86};
#[cfg(target_arch = "x86_64")]
use libc::c_void;
#[cfg(target_arch = "x86_64")]
use std::sync::atomic::{AtomicUsize, Ordering};
#[cfg(target_arch = "x86_64")]
use std::time::Instant;

/// The CPU's f32 FMA rate with `variant`'s vector width on `threads` threads, in
/// floating-point operations per second (a multiply-add counts two): the best of 3 runs of a
/// loop of independent FMAs. `None` for the portable variant, whose width is the compiler's.
pub fn peak_f32_flops(variant: Variant, threads: usize) -> Option<f64> {
    #[cfg(target_arch = "x86_64")]
    {
        let run = FmaLoop::of(variant)?;
        (0..3)
            .map(|_| run.on_new_threads(threads, 20_000_000))
            .reduce(f64::max)
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (variant, threads);
        None
    }
}

/// The same rate over one run of about a millisecond, on the OpenMP threads the products run
/// on (new threads where no OpenMP runtime is loaded, as in [`peak_f32_flops`]). A VM that
/// shares its cores gives more or less of them from one second to the next: sampled between
/// a benchmark's steps, this is the peak of the moments the steps ran in. On OpenMP's own
/// threads it does not compete with them while they spin after a region.
pub fn sampled_f32_flops(variant: Variant, threads: usize) -> Option<f64> {
    #[cfg(target_arch = "x86_64")]
    {
        let run = FmaLoop::of(variant)?;
        const ITERATIONS: usize = 400_000;
        match openmp::runtime() {
            Some(omp) if threads > 1 => Some(run.on_openmp(omp, threads, ITERATIONS)),
            _ => Some(run.on_new_threads(threads, ITERATIONS)),
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (variant, threads);
        None
    }
}

/// The variant's loop of independent FMAs and its vector width.
#[cfg(target_arch = "x86_64")]
#[derive(Clone, Copy)]
struct FmaLoop {
    lanes: usize,
    run: unsafe fn(usize) -> f32,
}

#[cfg(target_arch = "x86_64")]
impl FmaLoop {
    fn of(variant: Variant) -> Option<FmaLoop> {
        let (lanes, run): (usize, unsafe fn(usize) -> f32) = match variant {
            Variant::Portable => return None,
            Variant::Avx2Fma => (8, x86::fma_loop_256),
            Variant::Avx512F | Variant::Avx512Bf16 | Variant::Amx => (16, x86::fma_loop_512),
        };
        variant.assert_supported();
        Some(FmaLoop { lanes, run })
    }

    /// Operations per second of `threads` runs of `iterations` in `seconds`.
    fn rate(self, threads: usize, iterations: usize, seconds: f64) -> f64 {
        let operations = 2 * threads * iterations * x86::fma_per_iteration(self.lanes);
        operations as f64 / seconds
    }

    fn on_new_threads(self, threads: usize, iterations: usize) -> f64 {
        let threads = threads.max(1);
        let started = Instant::now();
        std::thread::scope(|s| {
            for _ in 0..threads {
                // SAFETY: `of` asserted that the CPU has the loop's instructions.
                s.spawn(|| std::hint::black_box(unsafe { (self.run)(iterations) }));
            }
        });
        self.rate(threads, iterations, started.elapsed().as_secs_f64())
    }

    fn on_openmp(self, omp: &openmp::Runtime, threads: usize, iterations: usize) -> f64 {
        struct Job {
            fma: FmaLoop,
            iterations: usize,
            ran: AtomicUsize,
        }
        extern "C" fn body(job: *mut c_void) {
            // SAFETY: `on_openmp` passes a `Job` that outlives the region.
            let job = unsafe { &*(job as *const Job) };
            // SAFETY: `of` asserted that the CPU has the loop's instructions.
            std::hint::black_box(unsafe { (job.fma.run)(job.iterations) });
            job.ran.fetch_add(1, Ordering::Relaxed);
        }
        let job = Job {
            fma: self,
            iterations,
            ran: AtomicUsize::new(0),
        };
        let started = Instant::now();
        // SAFETY: the body only reads `job` and adds to its atomic count.
        unsafe { omp.parallel(body, &job as *const Job as *mut c_void, threads) };
        let seconds = started.elapsed().as_secs_f64();
        // The runtime may start fewer threads than asked.
        self.rate(job.ran.load(Ordering::Relaxed), iterations, seconds)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_sampled_peak_is_a_rate_on_either_kind_of_thread() {
        let variant = Variant::active();
        if variant == Variant::Portable {
            assert_eq!(sampled_f32_flops(variant, 2), None);
            return;
        }
        // Two threads on the OpenMP runtime (libtorch loads it), one on a new thread.
        for threads in [1, 2] {
            let rate = sampled_f32_flops(variant, threads).unwrap();
            assert!(rate.is_finite() && rate > 0.0, "{threads} threads: {rate}");
        }
    }
}
