//! bf16 products of a few rows with the weight packed once, at load, for the products a decode
//! step makes compute-bound: the flow head multiplies six rows per stream by each weight, seven
//! times per frame, so with a few streams it is bound by multiply-adds rather than by reading
//! the weights. Here outputs fill the vectors and each input value is broadcast, the loop does
//! one load and two shuffles per 32 weights beside its multiply-adds, and every output
//! is summed over `k` in order with fused multiply-adds in f32, then rounded once. That order
//! is the same whatever the rows, the threads or the instruction set, so every variant gives
//! the same bits, and a request's result does not depend on its batch. The rows may also be
//! f32, summed into f32 outputs the same way: the semantic head's products, f32 rows by a bf16
//! weight read at half the bytes of an f32 copy.

use super::{equal_parts, openmp, Element, Variant, PARALLEL_MIN_BYTES};
use half::bf16;
use libc::c_void;
use std::cell::Cell;
use std::ops::Range;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Outputs per panel: one 64-byte line of bf16 per value of `k`.
pub const PANEL: usize = 32;

/// `w` `[out, k]` packed in panels of [`PANEL`] outputs (`out` a multiple of it): panel after
/// panel, and in each, for each `k`, one line of its 32 values, ordered so that interleaving
/// the line with zeros widens it to two vectors of outputs (see [`position`]).
pub fn pack(w: &[bf16], out: usize, k: usize) -> Vec<bf16> {
    let mut packed = vec![bf16::ZERO; out * k];
    pack_into(w, out, k, &mut packed);
    packed
}

/// [`pack`] into `packed` (`out * k` values), the panels shared by the CPU's threads: a whole
/// backbone is gigabytes.
pub fn pack_into(w: &[bf16], out: usize, k: usize, packed: &mut [bf16]) {
    assert!(
        out.is_multiple_of(PANEL) && w.len() == out * k && packed.len() == out * k,
        "packing needs [out, k], out a multiple of {PANEL}"
    );
    if k == 0 {
        return;
    }
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let panels_per_thread = (out / PANEL).div_ceil(threads).max(1);
    std::thread::scope(|scope| {
        let parts = packed.chunks_mut(panels_per_thread * PANEL * k);
        for (part, chunk) in parts.enumerate() {
            scope.spawn(move || {
                let first = part * panels_per_thread;
                for (p, lines) in chunk.chunks_exact_mut(PANEL * k).enumerate() {
                    let rows = &w[(first + p) * PANEL * k..][..PANEL * k];
                    pack_panel(rows, k, lines);
                }
            });
        }
    });
}

/// One panel: `rows` holds its 32 outputs' weights `[32, k]`.
fn pack_panel(rows: &[bf16], k: usize, lines: &mut [bf16]) {
    for (o, row) in rows.chunks_exact(k).enumerate() {
        let at = position(o);
        for (line, &v) in lines.chunks_exact_mut(PANEL).zip(row) {
            line[at] = v;
        }
    }
}

/// Where output `o` of a panel sits in each line. Interleaving a vector of 16-bit values with
/// zeros (`unpacklo`/`unpackhi`) puts each value in the top half of a 32-bit lane, which is its
/// f32: within each 128-bit quarter of the line, the first four values go to the low vector,
/// the next four to the high one. So the low vector of a line's first 32 bytes holds outputs
/// 0-7 and its high vector outputs 16-23, the second 32 bytes outputs 8-15 and 24-31; with
/// AVX-512, the whole line's two vectors hold outputs 0-15 and 16-31. The shuffles run beside
/// the multiply-adds on Intel's cores, where the shift and mask they replace took an FMA port:
/// one thread's AVX2 loop in L1, 6 rows, 81 → 89 GFLOP/s against 89.5 for the multiply-adds
/// alone (AVX-512 unchanged, 160 either way).
fn position(o: usize) -> usize {
    let (high, within) = (o / 16, o % 16);
    let (half, lane) = (within / 8, within % 8);
    half * 16 + lane / 4 * 8 + high * 4 + lane % 4
}

/// `y[r][o] = sum_k x[r][k] * w[o][k]` for a weight from [`pack`], the rows `x` and what is
/// added given by `product`; `y` holds `rows * out` values, and `threads` OpenMP threads share
/// the panels. With the active variant. Inputs and outputs are bf16, or f32: the weights
/// widened multiply f32 rows exactly as the same weights stored in f32 would, at half the
/// bytes read.
pub fn linear<I: Element, O: Element>(
    product: Product<'_, I, O>,
    packed: &[bf16],
    k: usize,
    y: &mut [O],
    threads: usize,
) {
    linear_with(Variant::active(), product, packed, k, y, threads)
}

/// The SiLU of every bf16 value, indexed by its bits, as the backend computes it (a bf16)
/// and widened to f32: a gated product's rows read it, so that they hold the bits the
/// separate operation gives. Widened, eight entries are one gather.
pub type SiluTable = [f32; 1 << 16];

/// The rows a product multiplies.
#[derive(Clone, Copy)]
pub enum Rows<'a, I> {
    /// `[rows][k]`.
    Plain(&'a [I]),
    /// `[rows][2k]` bf16, each a feed-forward's gate then its up projection: the product
    /// multiplies `silu(gate) · up`, the SiLU from `silu` and the product rounded to bf16, as
    /// the two operations apart give it.
    Gated {
        values: &'a [bf16],
        silu: &'a SiluTable,
    },
}

/// What a product multiplies and adds.
#[derive(Clone, Copy)]
pub struct Product<'a, I, O> {
    pub rows: Rows<'a, I>,
    /// `[rows][out]`, added to the outputs and rounded again, as an add after the product
    /// (a residual connection) gives it.
    pub residual: Option<&'a [O]>,
}

/// [`linear`] with a given variant (all give the same bits).
///
/// # Panics
/// When the lengths disagree, or the CPU lacks the variant's instructions.
pub fn linear_with<I: Element, O: Element>(
    variant: Variant,
    product: Product<'_, I, O>,
    packed: &[bf16],
    k: usize,
    y: &mut [O],
    threads: usize,
) {
    variant.assert_supported();
    let (values, per_row) = match product.rows {
        Rows::Plain(x) => (x.len(), k),
        Rows::Gated { values, .. } => (values.len(), 2 * k),
    };
    assert!(
        k > 0 && values.is_multiple_of(per_row) && packed.len().is_multiple_of(PANEL * k),
        "shapes disagree"
    );
    let (rows, out) = (values / per_row, packed.len() / k);
    assert_eq!(y.len(), rows * out, "output length");
    if let Some(residual) = product.residual {
        assert_eq!(residual.len(), rows * out, "residual length");
    }
    let mut inputs = INPUTS.take();
    if inputs.len() < rows * k {
        inputs.resize(rows * k, 0.0);
    }
    let parallel = threads > 1 && std::mem::size_of_val(packed) >= PARALLEL_MIN_BYTES;
    let (plain, gated);
    let widen = match product.rows {
        Rows::Plain(x) => {
            plain = Plain(x.as_ptr());
            Widen::new(&plain, widen_columns::<Plain<I>, O>)
        }
        Rows::Gated { values, silu } => {
            gated = Gated {
                values: values.as_ptr(),
                silu: silu.as_ptr(),
            };
            Widen::new(&gated, widen_columns::<Gated, O>)
        }
    };
    let job = Job {
        inputs: inputs.as_mut_ptr(),
        widen,
        packed: packed.as_ptr(),
        residual: product.residual.map_or(std::ptr::null(), <[O]>::as_ptr),
        y: y.as_mut_ptr(),
        rows,
        k,
        out,
        variant,
        claimed: AtomicUsize::new(0),
    };
    match openmp::runtime() {
        Some(omp) if parallel => {
            // SAFETY: `job` and the rows it reads outlive the region, and each thread writes
            // its own columns of the inputs, then its own panels' outputs.
            unsafe {
                omp.parallel(
                    run_share::<O>,
                    &job as *const Job<O> as *mut c_void,
                    threads,
                )
            }
        }
        // SAFETY: the lengths were checked above and `y` is borrowed mutably for the call.
        _ => unsafe {
            (job.widen.run)(&job, 0..k);
            job.run(0..out / PANEL, None)
        },
    }
    if inputs.len() <= KEPT_INPUTS {
        INPUTS.set(inputs);
    }
}

thread_local! {
    /// The widened inputs of this thread's last product, kept for the next: a decode step
    /// makes hundreds, and a fresh buffer each time was allocated and zeroed.
    static INPUTS: Cell<Vec<f32>> = const { Cell::new(Vec::new()) };
}

/// The most values [`INPUTS`] keeps (4 MB): a decode step's products, not a long prompt's.
const KEPT_INPUTS: usize = 1 << 20;

/// A product's rows, read as f32 values.
trait Source {
    /// Row `r`'s value `c`, of `k` a row.
    ///
    /// # Safety
    /// `r` and `c` lie within the rows the source was made for.
    unsafe fn get(&self, r: usize, c: usize, k: usize) -> f32;

    /// Row `r`'s values `c..c + 8`.
    ///
    /// # Safety
    /// As [`Source::get`], for each value, and the CPU has AVX2.
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn get8(&self, r: usize, c: usize, k: usize) -> std::arch::x86_64::__m256 {
        let mut wide = [0.0f32; 8];
        for (j, w) in wide.iter_mut().enumerate() {
            *w = self.get(r, c + j, k);
        }
        std::arch::x86_64::_mm256_loadu_ps(wide.as_ptr())
    }
}

/// [`Rows::Plain`]'s values.
struct Plain<I>(*const I);

impl<I: Element> Source for Plain<I> {
    #[inline(always)]
    unsafe fn get(&self, r: usize, c: usize, k: usize) -> f32 {
        (*self.0.add(r * k + c)).to_f32()
    }
}

/// [`Rows::Gated`]'s values and table.
struct Gated {
    values: *const bf16,
    silu: *const f32,
}

impl Source for Gated {
    #[inline(always)]
    unsafe fn get(&self, r: usize, c: usize, k: usize) -> f32 {
        let gate = *self.values.add(2 * r * k + c);
        let up = *self.values.add((2 * r + 1) * k + c);
        let silu = *self.silu.add(usize::from(gate.to_bits()));
        bf16::from_sum(silu * up.to_f32()).to_f32()
    }

    /// Eight values at once, as [`Source::get`] gives them, with the table read by a gather:
    /// one by one, the gating took the down projection of 24 rows by 3072 from 690 to 950 µs.
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    unsafe fn get8(&self, r: usize, c: usize, k: usize) -> std::arch::x86_64::__m256 {
        use std::arch::x86_64 as arch;
        let gate = x86::bf16_bits(self.values.add(2 * r * k + c));
        let silu = arch::_mm256_i32gather_ps::<4>(self.silu, gate);
        let up = x86::widen_bf16(self.values.add((2 * r + 1) * k + c));
        x86::round_to_bf16(arch::_mm256_mul_ps(silu, up))
    }
}

/// How the threads widen a product's rows to f32 before its panels, each its share of the
/// columns: each pass's rows interleaved, `[k][rows of the pass]`, so that the loop broadcasts
/// each row's value from memory, a load, not a shuffle beside its multiply-adds, and a pass's
/// values for one `k` share a line, one stream for the prefetchers where the rows gave one
/// each. (Measured with 24 rows, 2 threads: `avx2` 171-185 → 190-192 GFLOP/s in cache, four
/// passes a half panel; `avx512f` and fewer rows unchanged.) One row, or one row a pass (the
/// portable loop's), is then `[rows][k]`.
struct Widen<O> {
    /// The [`Source`] that `run` was made for.
    source: *const c_void,
    /// Widens the columns (values of `k`) given.
    run: unsafe fn(&Job<O>, Range<usize>),
    /// Threads done with their columns.
    done: AtomicUsize,
}

impl<O> Widen<O> {
    fn new<S: Source>(source: &S, run: unsafe fn(&Job<O>, Range<usize>)) -> Self {
        Widen {
            source: (source as *const S).cast(),
            run,
            done: AtomicUsize::new(0),
        }
    }
}

/// [`Widen::run`] for rows of source `S`.
///
/// # Safety
/// `job.widen.source` is an `S`, and no other thread writes these columns.
unsafe fn widen_columns<S: Source, O>(job: &Job<O>, columns: Range<usize>) {
    let source = &*job.widen.source.cast::<S>();
    for part in equal_parts(job.rows, job.variant.pass_rows(job.rows)) {
        let (n, to) = (part.len(), job.inputs.add(part.start * job.k));
        #[cfg(target_arch = "x86_64")]
        let scalar = match n {
            1 => columns.clone(),
            _ => x86::interleave(source, part.start, n, job.k, to, columns.clone()),
        };
        #[cfg(not(target_arch = "x86_64"))]
        let scalar = columns.clone();
        for kk in scalar {
            for r in 0..n {
                *to.add(kk * n + r) = source.get(part.start + r, kk, job.k);
            }
        }
    }
}

/// One product, shared by the threads that compute it; outputs of type `O`.
struct Job<O> {
    /// The rows widened to f32, written by the threads first as `widen` says.
    inputs: *mut f32,
    widen: Widen<O>,
    packed: *const bf16,
    /// Added to the outputs where not null, `[rows][out]`.
    residual: *const O,
    y: *mut O,
    rows: usize,
    k: usize,
    out: usize,
    variant: Variant,
    /// Panels claimed so far by the threads.
    claimed: AtomicUsize,
}

extern "C" fn run_share<O: Element>(job: *mut c_void) {
    let omp = openmp::runtime().expect("called from an OpenMP parallel region");
    // SAFETY: `linear` passes a `Job<O>` that outlives the parallel region.
    let job = unsafe { &*(job as *const Job<O>) };
    let panels = job.out / PANEL;
    let (_, threads) = omp.thread();
    // Each thread widens its columns; every panel needs them all, so all wait for all.
    // SAFETY: the threads' shares of the columns are disjoint.
    unsafe { (job.widen.run)(job, omp.share(job.k, 8)) };
    job.widen.done.fetch_add(1, Ordering::Release);
    while job.widen.done.load(Ordering::Acquire) < threads {
        std::hint::spin_loop();
    }
    // One panel at a time: a thread that the machine slows (another guest on its core, an
    // efficiency core) takes fewer, and the threads finish at most a panel apart. (Chunks of a
    // shrinking share of the panels left, a quarter first, let a thread slowed inside a long
    // chunk keep the other waiting: with AVX2 the mid-size flow head at 4 streams spent 8 to
    // 10 ms a step with one thread done and the other not, 1.6 to 2.1 ms one panel at a
    // time, and took 2 to 4% less time; with AVX-512, within 1% either way.)
    let claim = || {
        let panel = job.claimed.fetch_add(1, Ordering::Relaxed);
        (panel < panels).then_some(panel)
    };
    // Each panel claimed before the last one runs, so that it is fetched during the passes
    // over the last one.
    let mut current = claim();
    while let Some(panel) = current {
        current = claim();
        // SAFETY: each panel is claimed once, and is within the panels.
        unsafe { job.run(panel..panel + 1, current) };
    }
}

impl Variant {
    /// The most rows a pass over a panel takes with this variant's loop, for a product of
    /// `rows` rows.
    fn pass_rows(self, rows: usize) -> usize {
        #[cfg(not(target_arch = "x86_64"))]
        let _ = rows;
        match self {
            #[cfg(target_arch = "x86_64")]
            Variant::Avx512F | Variant::Avx512Bf16 | Variant::Amx => x86::ROWS_512,
            #[cfg(target_arch = "x86_64")]
            Variant::Avx2Fma if x86::whole_panels_avx2(rows) => x86::ROWS_WHOLE,
            #[cfg(target_arch = "x86_64")]
            Variant::Avx2Fma => x86::ROWS_256,
            _ => 1,
        }
    }
}

impl<O: Element> Job<O> {
    /// Computes every row's outputs of `panels`; `then` is the panel this thread computes
    /// after them, if any.
    ///
    /// # Safety
    /// The pointers cover the lengths `linear` checked, and no other thread writes these panels.
    unsafe fn run(&self, panels: Range<usize>, then: Option<usize>) {
        #[cfg(target_arch = "x86_64")]
        let end = panels.end;
        #[cfg(not(target_arch = "x86_64"))]
        let _ = then;
        for panel in panels {
            let w = self.packed.add(panel * PANEL * self.k);
            let y = self.y.add(panel * PANEL);
            // This thread's next panel, fetched during the passes over this one.
            #[cfg(target_arch = "x86_64")]
            let next = (panel + 1 < end)
                .then_some(panel + 1)
                .or(then)
                .map(|next| self.packed.add(next * PANEL * self.k));
            match self.variant {
                #[cfg(target_arch = "x86_64")]
                Variant::Avx512F | Variant::Avx512Bf16 | Variant::Amx => {
                    x86::panel_avx512(self, w, next, y)
                }
                #[cfg(target_arch = "x86_64")]
                Variant::Avx2Fma => x86::panel_avx2(self, w, next, y),
                _ => self.panel_portable(w, y),
            }
        }
    }

    /// One panel, one output at a time: the order every variant follows.
    unsafe fn panel_portable(&self, w: *const bf16, y: *mut O) {
        for r in 0..self.rows {
            for i in 0..PANEL {
                let at = position(i);
                let mut sum = 0.0f32;
                for kk in 0..self.k {
                    let weight = (*w.add(kk * PANEL + at)).to_f32();
                    sum = weight.mul_add(*self.inputs.add(r * self.k + kk), sum);
                }
                let at = r * self.out + i;
                *y.add(at) = self.output(y.offset_from(self.y) as usize + at, sum);
            }
        }
    }

    /// Output `at` (an index of `y`) of its finished sum: rounded, then with the residual's
    /// value added and rounded again, where there is one.
    #[inline(always)]
    unsafe fn output(&self, at: usize, sum: f32) -> O {
        let y = O::from_sum(sum);
        if self.residual.is_null() {
            return y;
        }
        O::from_sum(y.to_f32() + (*self.residual.add(at)).to_f32())
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::super::{equal_parts, Element};
    use super::{Job, Source, PANEL};
    use half::bf16;
    use std::arch::x86_64::*;
    use std::ops::Range;

    /// Lines of weights fetched ahead of the one multiplied (measured: without it the loop
    /// waits on memory about a quarter of the time).
    const PREFETCH_LINES: usize = 16;

    /// Rows whose accumulators stay in registers at once: 12 x 2 of the 32 with AVX-512.
    pub(super) const ROWS_512: usize = 12;
    /// With AVX2: 6 x 2 of the 16, for half a panel at a time.
    pub(super) const ROWS_256: usize = 6;
    /// With AVX2, for a whole panel at a time: 3 x 4 of the 16.
    pub(super) const ROWS_WHOLE: usize = 3;

    /// Widens and interleaves the columns of `n` rows (at most 16) of `source` from row
    /// `first` into `[k][n]`, eight columns at a time from `columns.start`, with 8x8
    /// transposes. The calling thread's scalar loop before took a nanosecond a value, 3 ms of
    /// each mid-size flow head step at 4 streams (2.45 million values); shared by the threads
    /// this way, the step took 1 to 3% less time with AVX2 and with AVX-512. Returns the
    /// columns left at the end (fewer than eight), for the caller. Every variant with passes
    /// of several rows has AVX2.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn interleave<S: Source>(
        source: &S,
        first: usize,
        n: usize,
        k: usize,
        to: *mut f32,
        columns: Range<usize>,
    ) -> Range<usize> {
        debug_assert!((1..=16).contains(&n));
        let groups = n.div_ceil(8);
        let lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
        let mut kk = columns.start;
        while kk + 8 <= columns.end {
            for g in 0..groups {
                // Rows past the last repeat it: their lanes are not stored.
                let mut rows = [_mm256_setzero_ps(); 8];
                for (i, row) in rows.iter_mut().enumerate() {
                    *row = source.get8(first + (g * 8 + i).min(n - 1), kk, k);
                }
                let columns = transpose(rows);
                let kept = (n - g * 8).min(8) as i32;
                let kept = _mm256_cmpgt_epi32(_mm256_set1_epi32(kept), lane);
                for (j, column) in columns.into_iter().enumerate() {
                    _mm256_maskstore_ps(to.add((kk + j) * n + g * 8), kept, column);
                }
            }
            kk += 8;
        }
        kk..columns.end
    }

    /// Rows `r[i]` of 8 values into columns: `out[j][i] = r[i][j]`.
    #[inline(always)]
    unsafe fn transpose(r: [__m256; 8]) -> [__m256; 8] {
        let t0 = _mm256_unpacklo_ps(r[0], r[1]);
        let t1 = _mm256_unpackhi_ps(r[0], r[1]);
        let t2 = _mm256_unpacklo_ps(r[2], r[3]);
        let t3 = _mm256_unpackhi_ps(r[2], r[3]);
        let t4 = _mm256_unpacklo_ps(r[4], r[5]);
        let t5 = _mm256_unpackhi_ps(r[4], r[5]);
        let t6 = _mm256_unpacklo_ps(r[6], r[7]);
        let t7 = _mm256_unpackhi_ps(r[6], r[7]);
        let u0 = _mm256_shuffle_ps::<0x44>(t0, t2);
        let u1 = _mm256_shuffle_ps::<0xEE>(t0, t2);
        let u2 = _mm256_shuffle_ps::<0x44>(t1, t3);
        let u3 = _mm256_shuffle_ps::<0xEE>(t1, t3);
        let u4 = _mm256_shuffle_ps::<0x44>(t4, t6);
        let u5 = _mm256_shuffle_ps::<0xEE>(t4, t6);
        let u6 = _mm256_shuffle_ps::<0x44>(t5, t7);
        let u7 = _mm256_shuffle_ps::<0xEE>(t5, t7);
        [
            _mm256_permute2f128_ps::<0x20>(u0, u4),
            _mm256_permute2f128_ps::<0x20>(u1, u5),
            _mm256_permute2f128_ps::<0x20>(u2, u6),
            _mm256_permute2f128_ps::<0x20>(u3, u7),
            _mm256_permute2f128_ps::<0x31>(u0, u4),
            _mm256_permute2f128_ps::<0x31>(u1, u5),
            _mm256_permute2f128_ps::<0x31>(u2, u6),
            _mm256_permute2f128_ps::<0x31>(u3, u7),
        ]
    }

    /// The bits of eight bf16 values from `at`, each in a 32-bit lane.
    #[inline(always)]
    pub(super) unsafe fn bf16_bits(at: *const bf16) -> __m256i {
        _mm256_cvtepu16_epi32(_mm_loadu_si128(at.cast()))
    }

    /// Eight bf16 values from `at`, widened to f32 (each the top half of its lane).
    #[inline(always)]
    pub(super) unsafe fn widen_bf16(at: *const bf16) -> __m256 {
        _mm256_castsi256_ps(_mm256_slli_epi32::<16>(bf16_bits(at)))
    }

    /// `v` rounded to bf16 (to nearest even, NaNs made quiet) and widened back, as
    /// [`Element::from_sum`] and [`Element::to_f32`] do for each value.
    #[inline(always)]
    pub(super) unsafe fn round_to_bf16(v: __m256) -> __m256 {
        let bits = _mm256_castps_si256(v);
        let lowest_kept = _mm256_and_si256(_mm256_srli_epi32::<16>(bits), _mm256_set1_epi32(1));
        let carried = _mm256_add_epi32(bits, _mm256_set1_epi32(0x7FFF));
        let rounded = _mm256_add_epi32(carried, lowest_kept);
        let quiet = _mm256_or_si256(bits, _mm256_set1_epi32(0x40_0000));
        let nan = _mm256_castps_si256(_mm256_cmp_ps::<_CMP_UNORD_Q>(v, v));
        let kept = _mm256_blendv_epi8(rounded, quiet, nan);
        _mm256_castsi256_ps(_mm256_and_si256(kept, _mm256_set1_epi32(-0x1_0000)))
    }

    /// Stores eight f32 sums as the outputs of `job` from `y` on, as [`Job::output`] gives
    /// each: rounded, then the residual added and rounded again, where there is one. In
    /// vectors: one value at a time, the stores took 4-5% of a product's time with `k` 1024,
    /// and the mid-size flow head took 2-3% more time with AVX2 (one stream and four,
    /// alternated in one process), 5% with AVX-512.
    #[inline(always)]
    unsafe fn store<O: Element>(job: &Job<O>, y: *mut O, sums: __m256) {
        let residual = match job.residual.is_null() {
            true => None,
            false => Some(job.residual.offset(y.offset_from(job.y))),
        };
        if O::BF16 {
            let mut v = round_to_bf16(sums);
            if let Some(residual) = residual {
                v = round_to_bf16(_mm256_add_ps(v, widen_bf16(residual.cast())));
            }
            let bits = _mm256_srli_epi32::<16>(_mm256_castps_si256(v));
            let halves = _mm_packus_epi32(
                _mm256_castsi256_si128(bits),
                _mm256_extracti128_si256::<1>(bits),
            );
            _mm_storeu_si128(y.cast(), halves);
        } else {
            let mut v = sums;
            if let Some(residual) = residual {
                v = _mm256_add_ps(v, _mm256_loadu_ps(residual.cast()));
            }
            _mm256_storeu_ps(y.cast(), v);
        }
    }

    /// The lines of this thread's next panel that one pass over the current panel fetches
    /// into L2: from `from` on, one line every `PANEL / step` steps (the address moves by
    /// `step` values a step: the loop adds to a pointer where it shifted the step's count by a
    /// variable amount, three instructions and more micro-operations on Intel's cores, where
    /// a pass of a few rows has few multiply-adds a step to hide them behind. Measured with
    /// AVX2, 8 rows by 3072 to 1024: 108-114 → 124-135 GFLOP/s on two threads, 59-60 → 71 on
    /// one; 4 rows 5% faster, 12 and 24 unchanged; AVX-512 unchanged but for 4 rows, 0 to 19%
    /// faster).
    #[derive(Clone, Copy)]
    struct Fetch {
        from: *const bf16,
        step: usize,
    }

    /// What pass `pass` of a panel's `passes` fetches of `next`, this thread's next panel: every
    /// pass an equal share, in order, each from its share's start, `PANEL / passes` values a
    /// step rounded up (a line every `passes` steps, or a little more often), so that memory is
    /// read at an even pace from the first pass to the last. (The first pass fetched nothing
    /// before, for fear of slowing the reads of the panel it multiplies, and the later ones
    /// the whole of `next` between them. Measured with AVX2, 2 threads, weights beyond the
    /// caches: 6 rows 13-16% faster, 8 rows 4-6%, 12 rows 10%, 24 rows 2-7%; AVX-512, 24 rows
    /// 7-9%, up to 12 rows one pass, unchanged. The mid-size flow head alternated in one
    /// process: one stream 42.0 → 36.6 ms, four 86.0 → 81.6 with the passes below.) Past 32
    /// passes (a prompt's rows), the shares overlap, each running on ahead, which a prefetch
    /// may, as does the last one's end past the panel's.
    fn share_of_next(
        next: Option<*const bf16>,
        k: usize,
        pass: usize,
        passes: usize,
    ) -> Option<Fetch> {
        Some(Fetch {
            from: next?.wrapping_add(pass * k / passes * PANEL),
            step: PANEL.div_ceil(passes),
        })
    }

    /// The fetches of step `kk`: the weights' line [`PREFETCH_LINES`] on into L1 (past the
    /// panel's end, the next one's first lines: a prefetch never faults), and with `FETCH`,
    /// the pass's share of the next panel into L2. Without a test in the loop, the compiler
    /// keeps the loop to the step, these and one count.
    #[inline(always)]
    unsafe fn fetch_ahead<const FETCH: bool>(w: *const bf16, fetch: Fetch, kk: usize) {
        _mm_prefetch::<_MM_HINT_T0>(w.wrapping_add((kk + PREFETCH_LINES) * PANEL).cast());
        if FETCH {
            let line = fetch.from.wrapping_add(kk * fetch.step);
            _mm_prefetch::<_MM_HINT_T1>(line.cast());
        }
    }

    /// One panel, in passes of at most 12 rows. The first pass reads the weights from memory
    /// and the later ones from L2, and the passes fetch `next` (this thread's next panel) into
    /// L2 ([`share_of_next`]): memory stays busy while they multiply, and the next first pass
    /// finds its lines near. (Measured on the flow head's matrices, 24 rows, 2 threads,
    /// weights beyond the caches: 274 to 292 GFLOP/s, 226 to 242 without; a lone pass
    /// fetching `next`, one stream's flow head took a quarter less time.)
    #[target_feature(enable = "avx512f,avx512bw")]
    pub(super) unsafe fn panel_avx512<O: Element>(
        job: &Job<O>,
        w: *const bf16,
        next: Option<*const bf16>,
        y: *mut O,
    ) {
        let passes = job.rows.div_ceil(ROWS_512);
        let idle = Fetch {
            from: w,
            step: PANEL,
        };
        for (pass, rows) in equal_parts(job.rows, ROWS_512).enumerate() {
            let r = rows.start;
            macro_rules! tile {
                ($($n:literal)*) => {
                    match (rows.len(), share_of_next(next, job.k, pass, passes)) {
                        $(
                            ($n, Some(fetch)) => tile_avx512::<O, $n, true>(job, w, fetch, r, y),
                            ($n, None) => tile_avx512::<O, $n, false>(job, w, idle, r, y),
                        )*
                        _ => unreachable!("1 to {ROWS_512} rows"),
                    }
                };
            }
            tile!(1 2 3 4 5 6 7 8 9 10 11 12);
        }
    }

    #[inline(always)]
    unsafe fn tile_avx512<O: Element, const R: usize, const FETCH: bool>(
        job: &Job<O>,
        w: *const bf16,
        fetch: Fetch,
        r0: usize,
        y: *mut O,
    ) {
        let mut acc = [[_mm512_setzero_ps(); 2]; R];
        let zero = _mm512_setzero_si512();
        for kk in 0..job.k {
            fetch_ahead::<FETCH>(w, fetch, kk);
            let line = _mm512_loadu_si512(w.add(kk * PANEL).cast());
            let first = _mm512_castsi512_ps(_mm512_unpacklo_epi16(zero, line));
            let second = _mm512_castsi512_ps(_mm512_unpackhi_epi16(zero, line));
            // The pass's `R` values for this `k`, side by side (see `widened`).
            let inputs = job.inputs.add(r0 * job.k + kk * R);
            for (r, sums) in acc.iter_mut().enumerate() {
                let x = _mm512_set1_ps(*inputs.add(r));
                sums[0] = _mm512_fmadd_ps(first, x, sums[0]);
                sums[1] = _mm512_fmadd_ps(second, x, sums[1]);
            }
        }
        for (r, tile) in acc.iter().enumerate() {
            let row = y.add((r0 + r) * job.out);
            for (i, &v) in tile.iter().enumerate() {
                let high = _mm512_extractf64x4_pd::<1>(_mm512_castps_pd(v));
                store(job, row.add(16 * i), _mm512_castps512_ps256(v));
                store(job, row.add(16 * i + 8), _mm256_castpd_ps(high));
            }
        }
    }

    /// One panel in passes of whole panels, each of at most [`ROWS_WHOLE`] rows, or of half
    /// panels, at most [`ROWS_256`] rows, as [`whole_panels_avx2`] chooses; the passes share
    /// the fetch of `next` as with AVX-512.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn panel_avx2<O: Element>(
        job: &Job<O>,
        w: *const bf16,
        next: Option<*const bf16>,
        y: *mut O,
    ) {
        let whole = whole_panels_avx2(job.rows);
        let (halves, most) = match whole {
            true => (0..1, ROWS_WHOLE),
            false => (0..2, ROWS_256),
        };
        let per_half = job.rows.div_ceil(most);
        let passes = halves.len() * per_half;
        let idle = Fetch {
            from: w,
            step: PANEL,
        };
        for half in halves {
            for (pass, rows) in equal_parts(job.rows, most).enumerate() {
                let r = rows.start;
                let fetch = share_of_next(next, job.k, half * per_half + pass, passes);
                macro_rules! tile {
                    ($whole:literal, $($n:literal)*) => {
                        match (rows.len(), fetch) {
                            $(
                                ($n, Some(fetch)) => tile_avx2::<O, $n, true, $whole>(job, w, fetch, half, r, y),
                                ($n, None) => tile_avx2::<O, $n, false, $whole>(job, w, idle, half, r, y),
                            )*
                            _ => unreachable!("1 to {most} rows"),
                        }
                    };
                }
                match whole {
                    true => tile!(true, 1 2 3),
                    false => tile!(false, 1 2 3 4 5 6),
                }
            }
        }
    }

    /// Whether a pass of the AVX2 loop covers a whole panel (four vectors of outputs for up to
    /// three rows) rather than half of one (two for up to six): where that takes fewer passes,
    /// 1-3 rows, 7-9, 13-15 and so on. The accumulators are as many (12 of the 16 registers),
    /// and fewer passes over the panel's lines wait less on them. (Measured with 2 threads,
    /// weights beyond the caches: 1-3 rows 14-17% faster, 8 rows 2-4%, 14 and 20 rows within
    /// 2% either way; with 24, whole panels were 4-6% slower. The mid-size flow head at 4
    /// streams, alternated in one process: 0.7-2.2% less time.)
    pub(super) fn whole_panels_avx2(rows: usize) -> bool {
        rows.div_ceil(ROWS_WHOLE) < 2 * rows.div_ceil(ROWS_256)
    }

    /// `R` rows times the panel's half `half`, or with `WHOLE` the whole panel (`half` 0).
    #[inline(always)]
    unsafe fn tile_avx2<O: Element, const R: usize, const FETCH: bool, const WHOLE: bool>(
        job: &Job<O>,
        w: *const bf16,
        fetch: Fetch,
        half: usize,
        r0: usize,
        y: *mut O,
    ) {
        // Lanes 0-7 of a line hold outputs 0-7 and 16-23; lanes 8-15, outputs 8-15 and 24-31.
        let halves = if WHOLE { 2 } else { 1 };
        let mut acc = [[[_mm256_setzero_ps(); 2]; R]; 2];
        let zero = _mm256_setzero_si256();
        for kk in 0..job.k {
            fetch_ahead::<FETCH>(w, fetch, kk);
            // The pass's `R` values for this `k`, side by side (see `widened`).
            let inputs = job.inputs.add(r0 * job.k + kk * R);
            for (h, tile) in acc.iter_mut().take(halves).enumerate() {
                let at = kk * PANEL + (half + h) * PANEL / 2;
                let line = _mm256_loadu_si256(w.add(at).cast());
                let first = _mm256_castsi256_ps(_mm256_unpacklo_epi16(zero, line));
                let second = _mm256_castsi256_ps(_mm256_unpackhi_epi16(zero, line));
                for (r, sums) in tile.iter_mut().enumerate() {
                    // The second half reads each value again: kept from the first, three
                    // values beside 12 accumulators and the line's two vectors outnumbered
                    // the 16 registers, and the compiler moved two accumulators to the stack
                    // (24 rows 35% slower).
                    let value = match h {
                        0 => *inputs.add(r),
                        _ => std::ptr::read_volatile(inputs.add(r)),
                    };
                    let x = _mm256_set1_ps(value);
                    sums[0] = _mm256_fmadd_ps(first, x, sums[0]);
                    sums[1] = _mm256_fmadd_ps(second, x, sums[1]);
                }
            }
        }
        for (h, tile) in acc.iter().take(halves).enumerate() {
            for (r, vectors) in tile.iter().enumerate() {
                let row = y.add((r0 + r) * job.out + (half + h) * 8);
                store(job, row, vectors[0]);
                store(job, row.add(PANEL / 2), vectors[1]);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use half::bf16;

    fn values(n: usize, seed: u64) -> Vec<bf16> {
        let mut state = seed;
        (0..n)
            .map(|_| {
                state = state
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                bf16::from_f32((state >> 40) as f32 / (1u64 << 24) as f32 - 0.5)
            })
            .collect()
    }

    fn plain<I, O>(x: &[I]) -> Product<'_, I, O> {
        Product {
            rows: Rows::Plain(x),
            residual: None,
        }
    }

    /// Every output summed over `k` in order with fused multiply-adds, then rounded to `O`.
    fn reference<I: Element, O: Element>(x: &[I], w: &[bf16], k: usize) -> Vec<O> {
        let out = w.len() / k;
        x.chunks_exact(k)
            .flat_map(|row| {
                (0..out).map(move |o| {
                    let sum = (0..k).fold(0.0f32, |s, kk| {
                        w[o * k + kk].to_f32().mul_add(row[kk].to_f32(), s)
                    });
                    O::from_sum(sum)
                })
            })
            .collect()
    }

    /// Each variant gives the reference's bits, for row counts across the register tiles (1 to
    /// 13, and 24), so a row's result does not depend on the rows beside it. A SIMD variant
    /// runs where the CPU has its instructions and says it was skipped elsewhere.
    #[test]
    fn every_variant_sums_each_output_in_order() {
        let (out, k) = (2 * PANEL, 37);
        let w = values(out * k, 1);
        let packed = pack(&w, out, k);
        let runs_here = |v: &Variant| super::super::tests::runs_here(*v, "packed::every_variant");
        for variant in Variant::ALL.into_iter().filter(runs_here) {
            for rows in (1..=13).chain([24]) {
                let x = values(rows * k, rows as u64 + 2);
                let mut y = vec![bf16::ZERO; rows * out];
                linear_with(variant, plain(&x), &packed, k, &mut y, 1);
                assert_eq!(y, reference::<_, bf16>(&x, &w, k), "{variant}, {rows} rows");
            }
        }
    }

    /// f32 rows times a packed bf16 weight give the f32 sums of the widened weight in the same
    /// order, unrounded (the semantic head's products), for values no bf16 holds, in every
    /// variant and across the register tiles.
    #[test]
    fn f32_rows_give_the_widened_weights_f32_sums() {
        let (out, k) = (2 * PANEL, 41);
        let w = values(out * k, 5);
        let packed = pack(&w, out, k);
        let runs_here = |v: &Variant| super::super::tests::runs_here(*v, "packed::f32_rows");
        for variant in Variant::ALL.into_iter().filter(runs_here) {
            for rows in [1, 4, 7, 13, 24] {
                let x: Vec<f32> = (0..rows * k)
                    .map(|i| (i as f32 * 0.731).sin() / 3.0)
                    .collect();
                assert!(x.iter().any(|&v| bf16::from_f32(v).to_f32() != v));
                let mut y = vec![0.0f32; rows * out];
                linear_with(variant, plain(&x), &packed, k, &mut y, 1);
                assert_eq!(
                    y,
                    reference::<f32, f32>(&x, &w, k),
                    "{variant}, {rows} rows"
                );
            }
        }
    }

    /// A stand-in for the backend's SiLU table: any values do, the kernel only reads them.
    fn silu_table() -> Box<SiluTable> {
        let mut table = Box::new([0.0; 1 << 16]);
        for (bits, silu) in table.iter_mut().enumerate() {
            let x = bf16::from_bits(bits as u16).to_f32();
            *silu = bf16::from_f32(x / (1.0 + (-x).exp())).to_f32();
        }
        table
    }

    /// Gated rows and a residual give the bits of the operations apart: the table's SiLU of
    /// the gate times the up half, rounded, multiplied, rounded, then the residual added and
    /// rounded; in every variant, across the register tiles, on one thread and on several.
    #[test]
    fn gated_rows_and_a_residual_give_the_operations_apart() {
        let silu = silu_table();
        let runs_here = |v: &Variant| super::super::tests::runs_here(*v, "packed::gated");
        for variant in Variant::ALL.into_iter().filter(runs_here) {
            for (panels, k, rows, threads) in [(2, 37, 1, 1), (2, 37, 7, 1), (8, 1021, 24, 2)] {
                let out = panels * PANEL;
                let w = values(out * k, 6);
                let gate_up = values(rows * 2 * k, 7);
                let residual = values(rows * out, 8);
                let multiplied: Vec<bf16> = gate_up
                    .chunks_exact(2 * k)
                    .flat_map(|row| {
                        let (gate, up) = row.split_at(k);
                        gate.iter()
                            .zip(up)
                            .map(|(g, u)| bf16::from_f32(silu[g.to_bits() as usize] * u.to_f32()))
                    })
                    .collect();
                let expected: Vec<bf16> = reference::<_, bf16>(&multiplied, &w, k)
                    .iter()
                    .zip(&residual)
                    .map(|(y, r)| bf16::from_f32(y.to_f32() + r.to_f32()))
                    .collect();
                let product = Product::<bf16, _> {
                    rows: Rows::Gated {
                        values: &gate_up,
                        silu: &silu,
                    },
                    residual: Some(&residual),
                };
                let mut y = vec![bf16::ZERO; rows * out];
                linear_with(variant, product, &pack(&w, out, k), k, &mut y, threads);
                assert_eq!(y, expected, "{variant}, {rows} rows, {threads} threads");
            }
        }
    }

    /// The vector rounding of a gated row's products gives [`Element::from_sum`]'s bits: on
    /// ties either way, NaNs, infinities, the largest values and a spread of all the others.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn vector_rounding_to_bf16_is_the_scalar_one() {
        if !super::super::tests::runs_here(Variant::Avx2Fma, "packed::vector_rounding") {
            return;
        }
        let edges = [
            0x3F80_8000u32, // a tie, kept part even: down
            0x3F81_8000,    // a tie, kept part odd: up
            0x3F80_7FFF,
            0x7F7F_FFFF, // rounds up to infinity
            0x7F80_0000,
            0xFF80_0000,
            0x7F80_0001, // a signalling NaN, made quiet
            0x7FC0_0000,
            0xFFFF_FFFF,
            0x8000_0000,
            0x0000_8000,
        ];
        let spread = (0..u32::MAX / 65_521).map(|i| i * 65_521);
        let bits: Vec<u32> = edges.into_iter().chain(spread).collect();
        for chunk in bits.chunks_exact(8) {
            let values: Vec<f32> = chunk.iter().map(|&b| f32::from_bits(b)).collect();
            let mut rounded = [0.0f32; 8];
            // SAFETY: the CPU has AVX2 (checked above), and both hold eight values.
            unsafe {
                use std::arch::x86_64::*;
                let v = x86::round_to_bf16(_mm256_loadu_ps(values.as_ptr()));
                _mm256_storeu_ps(rounded.as_mut_ptr(), v);
            }
            for (v, r) in values.iter().zip(rounded) {
                let expected = bf16::from_sum(*v).to_f32();
                assert_eq!(r.to_bits(), expected.to_bits(), "{:#010x}", v.to_bits());
            }
        }
    }

    /// The public entry, threaded, against the reference.
    #[test]
    fn linear_over_threads_equals_the_reference() {
        // Panels claimed one at a time by two and three threads; the inputs widened by the
        // threads in shares of eight columns, the last one short.
        for (panels, k, threads, rows) in [
            (8, 1024, 2, 7),
            (40, 256, 2, 7),
            (40, 256, 3, 7),
            (8, 1021, 2, 24),
            (40, 253, 3, 13),
        ] {
            let out = panels * PANEL;
            let w = values(out * k, 3);
            let x = values(rows * k, 4);
            let mut y = vec![bf16::ZERO; rows * out];
            linear(plain(&x), &pack(&w, out, k), k, &mut y, threads);
            assert_eq!(y, reference::<_, bf16>(&x, &w, k), "{panels} panels");
        }
    }
}
