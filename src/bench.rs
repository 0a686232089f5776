//! `voxtral-tts bench`: its settings, which every family's bench takes
//! (`crate::models::registry::Bench`), and the measures of the machine the figures are set
//! against (the CPU kernel's peak, memory bandwidth).

use crate::device::{parse_dtype, DeviceChoice};
use crate::engine::CudaGraphs;
use crate::tensor::cpu_gemv::{peak_f32_flops, Variant};
use crate::tensor::quantized::{parse_quantize, QuantFormat};
use crate::tensor::{DType, Tensor, ROW_CLASSES};
use std::path::PathBuf;
use std::time::{Duration, Instant};

#[derive(clap::Args)]
pub struct BenchArgs {
    /// Model folder of any family (`make-test-model` writes random ones).
    #[arg(long)]
    pub model: PathBuf,
    /// Frames to time (over as many runs as it takes if a run stops early at END_AUDIO).
    #[arg(long, default_value_t = 40)]
    pub frames: usize,
    #[arg(long, value_parser = parse_dtype, default_value = "bf16")]
    pub dtype: DType,
    /// How the large linear weights are stored: none | q8 | q4 (`Option`
    /// spelled out: clap would make an `Option` flag optional instead of parsing `none`).
    #[arg(long, value_parser = parse_quantize, default_value = "none")]
    pub quantize: std::option::Option<QuantFormat>,
    #[arg(long, default_value = "auto")]
    pub device: DeviceChoice,
    /// auto | off: time the decode step as captured CUDA graphs where the model and device
    /// allow (docs/configuration.md, `cuda_graphs`).
    #[arg(long, default_value = "off")]
    pub cuda_graphs: CudaGraphs,
    /// libtorch intra-op threads (default: libtorch's choice).
    #[arg(long)]
    pub threads: Option<usize>,
    #[arg(long, default_value = "The quick brown fox jumps over the lazy dog.")]
    pub text: String,
    /// Also time decode steps of this many streams advancing together (continuous
    /// batching), e.g. `--batch 1,4,8`: `--frames` steps each, prefill and codec left out.
    #[arg(long, value_delimiter = ',')]
    pub batch: Vec<usize>,
    /// Speech-to-text folders: seconds of audio transcribed offline (live steps take
    /// `--frames` steps of one token's audio).
    #[arg(long, default_value_t = 4.0)]
    pub seconds: f64,
    /// Also write the figures as JSON to this file: what `bench` prints, for tools and the
    /// docs' charts (scripts/bench-charts.py).
    #[arg(long)]
    pub json: Option<PathBuf>,
}

/// Ends a run: prints the process's peak resident memory, adds it to `report` and writes
/// that to `--json`'s file, if one was given.
pub fn finish_report(args: &BenchArgs, mut report: serde_json::Value) -> anyhow::Result<()> {
    if let Some(bytes) = peak_rss_bytes() {
        println!(
            "memory     peak RSS {:.2} GB (mapped checkpoint pages read included)",
            bytes as f64 / 1e9
        );
        report["peak_rss_bytes"] = bytes.into();
    }
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_string_pretty(&report)? + "\n")
            .map_err(|e| anyhow::anyhow!("writing {}: {e}", path.display()))?;
    }
    Ok(())
}

/// The most memory this process has held resident so far (`getrusage`'s high-water mark).
fn peak_rss_bytes() -> Option<u64> {
    // SAFETY: `getrusage` fills the struct it is given and reads nothing else.
    let usage = unsafe {
        let mut usage = std::mem::zeroed::<libc::rusage>();
        (libc::getrusage(libc::RUSAGE_SELF, &mut usage) == 0).then_some(usage)
    }?;
    let max = u64::try_from(usage.ru_maxrss).ok()?;
    // Linux counts kilobytes, macOS bytes.
    Some(if cfg!(target_os = "macos") {
        max
    } else {
        max * 1024
    })
}

/// How the large linear weights of the folder `dir` are multiplied on `device`: `q8` or `q4`
/// where `T` multiplies them so (stored so, or `--quantize`), else the compute dtype.
pub fn weights_name<T: Tensor>(
    args: &BenchArgs,
    dir: &std::path::Path,
    device: &T::Device,
) -> String {
    crate::models::quantize::weight_format::<T>(dir, device, args.dtype, args.quantize)
}

/// A duration in milliseconds, as every bench line prints it.
pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Prints the CPU kernel in use and its f32 FMA peak on `threads` threads; the peak.
pub fn cpu_kernel_and_peak(threads: usize) -> Option<f64> {
    let kernel = Variant::active();
    let has: Vec<&str> = Variant::ALL
        .iter()
        .filter(|v| **v != Variant::Portable && v.supported())
        .map(|v| v.name())
        .collect();
    println!(
        "kernel     {kernel} (this CPU supports: {}; VOXTRAL_CPU_KERNEL picks another)",
        if has.is_empty() {
            "portable only".to_string()
        } else {
            has.join(", ")
        }
    );
    let peak = peak_f32_flops(kernel, threads);
    if let Some(peak) = peak {
        // The tile unit is not bound by the FMA rate: its products can pass 100% of it.
        let beyond = match kernel {
            Variant::Amx => "; the amx kernel's bf16 products run on the tile unit, beyond it",
            _ => "",
        };
        println!(
            "peak       {:.1} GFLOP/s f32 FMA ({threads} threads, the {kernel} kernel's vector width{beyond})",
            peak / 1e9
        );
    }
    peak
}

/// `"; products at X GFLOP/s, Y% of the f32 FMA peak"` for `multiply_adds` done in
/// `time`, or nothing when none were counted.
pub fn arithmetic_rate(multiply_adds: u64, time: Duration, peak: Option<f64>) -> String {
    if multiply_adds == 0 || time.is_zero() {
        return String::new();
    }
    let rate = 2.0 * multiply_adds as f64 / time.as_secs_f64();
    let share = peak.map_or(String::new(), |p| {
        format!(", {:.0}% of the f32 FMA peak", 100.0 * rate / p)
    });
    format!("; products at {:.1} GFLOP/s{share}", rate / 1e9)
}

/// Each class of rows' share of the step, `"2-4 rows 13.3 ms/step, 71.4 GFLOP/s (29%); ..."`,
/// between two [`timed_products`] tallies, on the CPU (where the peak is known) only. A weight
/// read for 24 rows is compute-bound where one read for 4 is bound by the reading: the classes
/// show which the step's time goes to.
pub fn products_by_rows(
    before: &[(u64, Duration)],
    after: &[(u64, Duration)],
    steps: usize,
    peak: Option<f64>,
) -> Option<String> {
    let peak = peak?;
    let classes: Vec<String> = ROW_CLASSES
        .iter()
        .zip(before.iter().zip(after))
        .filter(|(_, ((_, a), (_, b)))| b > a)
        .map(|((_, label), ((m0, t0), (m1, t1)))| {
            let time = *t1 - *t0;
            let rate = 2.0 * (m1 - m0) as f64 / time.as_secs_f64();
            format!(
                "{label} {:.1} ms/step, {:.1} GFLOP/s ({:.0}%)",
                ms(time) / steps.max(1) as f64,
                rate / 1e9,
                100.0 * rate / peak
            )
        })
        .collect();
    (!classes.is_empty()).then(|| classes.join("; "))
}

/// `run` over 1 GiB, split evenly over `threads` threads; the best of 3 runs in bytes per
/// second, each byte of the buffer counted `passes` times (2 for a copy: read and written).
fn bandwidth(threads: usize, run: impl Fn(&[u64], &mut [u64]) + Sync, passes: f64) -> f64 {
    let len = (1 << 30) / 8;
    let src = vec![1u64; len];
    let mut dst = vec![0u64; len];
    let chunk = len.div_ceil(threads);
    let best = (0..3)
        .map(|_| {
            let started = Instant::now();
            std::thread::scope(|s| {
                for (src, dst) in src.chunks(chunk).zip(dst.chunks_mut(chunk)) {
                    s.spawn(|| run(std::hint::black_box(src), dst));
                }
            });
            started.elapsed()
        })
        .min()
        .expect("three runs");
    std::hint::black_box(&dst);
    passes * (len * 8) as f64 / best.as_secs_f64()
}

/// A large memory copy, counting bytes read and bytes written.
pub fn copy_bandwidth(threads: usize) -> f64 {
    bandwidth(threads, |src, dst| dst.copy_from_slice(src), 2.0)
}

/// A large read (a sum of every word), which is all a weight-bound decode step does.
pub fn read_bandwidth(threads: usize) -> f64 {
    bandwidth(
        threads,
        |src, dst| {
            // Eight independent sums: the loop is bound by loads, not by one add chain.
            let lanes = src.chunks_exact(8).fold([0u64; 8], |mut acc, words| {
                for (a, w) in acc.iter_mut().zip(words) {
                    *a = a.wrapping_add(*w);
                }
                acc
            });
            dst[0] = lanes.iter().fold(0, |a, &b| a.wrapping_add(b));
        },
        1.0,
    )
}
