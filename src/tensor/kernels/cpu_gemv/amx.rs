//! bf16 products on the AMX tile unit (Intel Xeon since Sapphire Rapids). One `tdpbf16ps`
//! multiplies a tile of 16 weight rows x 32 values by 32 values of up to 16 input rows: 8192
//! multiply-adds, where an AVX-512 FMA does 16. A decode step's few dozen rows then cost about
//! what one row costs, the time to read the weights, so batching streams pays on these CPUs.
//!
//! The weights are read as stored, 16 rows at a time (no packing, so a mapped checkpoint stays
//! shared with libtorch's prompt GEMMs). The inputs are rearranged once per product into the
//! unit's layout for its second operand: pairs of values, transposed ([`pairs`]).
//!
//! Order: the unit's own. It is not sequential fused multiply-adds (measured: most f32 sums
//! differ in the last bits), but it is fixed for each output, whichever tile column its input
//! row sits in and however many rows share the tile (tested), so a request's bits do not depend
//! on its batch. Inputs and sums below f32's normal range are flushed to zero (Intel's manual),
//! as with `vdpbf16ps`.

use super::{equal_parts, Element, Job};
use half::bf16;
use std::arch::asm;
use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
use std::ops::Range;
use std::sync::OnceLock;

/// Rows of a tile: weight rows (outputs) of the first operand, input rows of the second.
const TILE_ROWS: usize = 16;
/// Values of `k` per tile: 64 bytes of bf16.
const TILE_K: usize = 32;
/// Outputs per step, two weight tiles, and the multiple a thread's share is made of.
pub(super) const BLOCK: usize = 2 * TILE_ROWS;
/// Steps of `k` ahead of the one multiplied whose weights are prefetched, with two input tiles.
const PREFETCH_STEPS: usize = 2;
/// Input tiles per pass over the weights, each with its two tiles of sums: 2 + 2 + 4 of the
/// unit's 8 tiles.
const INPUT_TILES: usize = 2;

/// Whether the CPU has AMX with bf16 and the kernel lets this process use it (Linux asks each
/// process to request the tile state; the request is made here, once).
pub(super) fn available() -> bool {
    static AVAILABLE: OnceLock<bool> = OnceLock::new();
    *AVAILABLE.get_or_init(|| {
        use std::arch::x86_64::{__cpuid_count, __get_cpuid_max};
        // Leaf 7 is read only where it exists.
        let leaf7 = (__get_cpuid_max(0).0 >= 7).then(|| __cpuid_count(7, 0));
        let (tile, bf16) = leaf7.map_or((false, false), |l| {
            (l.edx & (1 << 24) != 0, l.edx & (1 << 22) != 0)
        });
        if !(tile && bf16) {
            return false;
        }
        let permitted = tile_state_permitted();
        if !permitted {
            tracing::warn!("the CPU has AMX but the OS refused this process the tile state (arch_prctl; a seccomp profile or a kernel before 5.16): the amx kernel is not used");
        }
        permitted
    })
}

#[cfg(target_os = "linux")]
fn tile_state_permitted() -> bool {
    const ARCH_REQ_XCOMP_PERM: libc::c_long = 0x1023;
    const XFEATURE_XTILEDATA: libc::c_long = 18;
    // SAFETY: this request only asks the kernel to allow the tile state for the whole process.
    unsafe {
        libc::syscall(
            libc::SYS_arch_prctl,
            ARCH_REQ_XCOMP_PERM,
            XFEATURE_XTILEDATA,
        ) == 0
    }
}

#[cfg(not(target_os = "linux"))]
fn tile_state_permitted() -> bool {
    false
}

/// The bf16 inputs in the layout of the unit's second operand: `[k / 2][rows]`, each a pair of
/// a row's values `2p` and `2p + 1` in one u32, `k` padded with zeros to whole tiles. A tile of
/// inputs is then 16 consecutive pairs of `k` for the rows of a group. Returns the pairs and
/// their row stride in u32 (the number of rows).
pub(super) fn pairs<E: Element>(x: &[E], k: usize) -> (Vec<u32>, usize) {
    let rows = x.len() / k;
    let bits = |v: &E| u32::from(bf16::from_f32(v.to_f32()).to_bits());
    let mut pairs = vec![0; k.div_ceil(TILE_K) * TILE_K / 2 * rows];
    for (m, row) in x.chunks_exact(k).enumerate() {
        for (p, pair) in row.chunks(2).enumerate() {
            pairs[p * rows + m] = bits(&pair[0]) | pair.get(1).map_or(0, bits) << 16;
        }
    }
    (pairs, rows)
}

/// The unit's tile configuration (palette 1): rows and bytes per row of each of 8 tiles.
#[repr(C, align(64))]
struct TileConfig {
    palette: u8,
    start_row: u8,
    reserved: [u8; 14],
    bytes_per_row: [u16; 16],
    rows: [u8; 16],
}

/// Tiles 0 and 1 hold weights, 2 and 3 the inputs of two row groups, 4 to 7 the sums
/// (4 + group, weight tile 0; 6 + group, weight tile 1).
fn configure(groups: &[Range<usize>]) -> TileConfig {
    let mut config = TileConfig {
        palette: 1,
        start_row: 0,
        reserved: [0; 14],
        bytes_per_row: [0; 16],
        rows: [0; 16],
    };
    for tile in 0..2 {
        config.rows[tile] = TILE_ROWS as u8;
        config.bytes_per_row[tile] = (TILE_K * 2) as u16;
    }
    for (g, group) in groups.iter().enumerate() {
        for tile in [2 + g, 4 + g, 6 + g] {
            config.rows[tile] = TILE_ROWS as u8;
            config.bytes_per_row[tile] = (group.len() * 4) as u16;
        }
    }
    config
}

/// Computes the outputs `outputs` of every input row, `job.x` holding [`pairs`].
///
/// # Safety
/// As [`Job::run`]; the CPU has AMX-BF16 and the process may use it ([`available`]).
pub(super) unsafe fn run(job: &Job<bf16>, outputs: Range<usize>) {
    let groups: Vec<Range<usize>> = equal_parts(job.rows, TILE_ROWS).collect();
    let mut scratch = Scratch {
        staged: Staged([bf16::ZERO; BLOCK * TILE_K]),
        sums: Sums([0.0; TILE_ROWS * TILE_ROWS]),
    };
    for pass in groups.chunks(INPUT_TILES) {
        let config = configure(pass);
        asm!("ldtilecfg [{}]", in(reg) &config as *const TileConfig, options(nostack, readonly));
        let mut o = outputs.start;
        while o < outputs.end {
            let n = (outputs.end - o).min(BLOCK);
            block(job, pass, o, n, &mut scratch);
            o += n;
        }
    }
    // Back to the initial state: a context switch then need not save 8 KB of tiles.
    asm!("tilerelease", options(nostack, nomem));
}

/// Weights `[BLOCK][TILE_K]` staged with zeros where a block or `k` ends early.
#[repr(C, align(64))]
struct Staged([bf16; BLOCK * TILE_K]);

/// Sums of one tile, `[TILE_ROWS outputs][rows of the group]`.
#[repr(C, align(64))]
struct Sums([f32; TILE_ROWS * TILE_ROWS]);

/// A thread's buffers, made once per product.
struct Scratch {
    staged: Staged,
    sums: Sums,
}

/// Outputs `o..o + n` (`n <= BLOCK`) of the row groups of one pass (one or two).
unsafe fn block(
    job: &Job<bf16>,
    groups: &[Range<usize>],
    o: usize,
    n: usize,
    scratch: &mut Scratch,
) {
    let (k, rows) = (job.k, job.rows);
    let weights = job.w.add(o * k);
    let inputs = job.x.cast::<u32>();
    let input_stride = rows * 4;
    let two = groups.len() == 2;
    asm!("tilezero tmm4", "tilezero tmm6", options(nostack, nomem));
    if two {
        asm!("tilezero tmm5", "tilezero tmm7", options(nostack, nomem));
    }
    let staged = scratch.staged.0.as_mut_ptr();
    let mut c = 0;
    while c < k {
        let (a, a_stride) = if n == BLOCK && c + TILE_K <= k {
            (weights.add(c), k * 2)
        } else {
            let values = (k - c).min(TILE_K);
            std::ptr::write_bytes(staged, 0, BLOCK * TILE_K);
            for r in 0..n {
                let from = weights.add(r * k + c);
                std::ptr::copy_nonoverlapping(from, staged.add(r * TILE_K), values);
            }
            (staged.cast_const(), TILE_K * 2)
        };
        // Two input tiles make each step longer, so fewer weight loads are in flight: fetched
        // ahead, 24 rows of a full-size layer took 12% less time (one tile: no gain, measured).
        if two && n == BLOCK && c + PREFETCH_STEPS * TILE_K < k {
            for r in 0..BLOCK {
                let line = weights.add(r * k + c + PREFETCH_STEPS * TILE_K);
                _mm_prefetch::<_MM_HINT_T0>(line.cast());
            }
        }
        let b = a.cast::<u8>().add(TILE_ROWS * a_stride);
        let x = inputs.add(c / 2 * rows);
        asm!(
            "tileloadd tmm0, [{a} + {a_stride}]",
            "tileloadd tmm1, [{b} + {a_stride}]",
            "tileloadd tmm2, [{x} + {x_stride}]",
            "tdpbf16ps tmm4, tmm0, tmm2",
            "tdpbf16ps tmm6, tmm1, tmm2",
            a = in(reg) a,
            b = in(reg) b,
            a_stride = in(reg) a_stride,
            x = in(reg) x.add(groups[0].start),
            x_stride = in(reg) input_stride,
            options(nostack, readonly),
        );
        if two {
            asm!(
                "tileloadd tmm3, [{x} + {x_stride}]",
                "tdpbf16ps tmm5, tmm0, tmm3",
                "tdpbf16ps tmm7, tmm1, tmm3",
                x = in(reg) x.add(groups[1].start),
                x_stride = in(reg) input_stride,
                options(nostack, readonly),
            );
        }
        c += TILE_K;
    }
    let sums = &mut scratch.sums;
    for (g, group) in groups.iter().enumerate() {
        for half in 0..2 {
            let stride = group.len() * 4;
            let to = sums.0.as_mut_ptr();
            match (g, half) {
                (0, 0) => {
                    asm!("tilestored [{} + {}], tmm4", in(reg) to, in(reg) stride, options(nostack))
                }
                (1, 0) => {
                    asm!("tilestored [{} + {}], tmm5", in(reg) to, in(reg) stride, options(nostack))
                }
                (0, _) => {
                    asm!("tilestored [{} + {}], tmm6", in(reg) to, in(reg) stride, options(nostack))
                }
                _ => {
                    asm!("tilestored [{} + {}], tmm7", in(reg) to, in(reg) stride, options(nostack))
                }
            }
            let first = half * TILE_ROWS;
            for i in 0..n.saturating_sub(first).min(TILE_ROWS) {
                for (m, row) in group.clone().enumerate() {
                    let sum = sums.0[i * group.len() + m];
                    *job.y.add(row * job.out + o + first + i) = bf16::from_f32(sum);
                }
            }
        }
    }
}
