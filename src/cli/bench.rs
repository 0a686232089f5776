//! `voxtral-tts bench`: per-frame CPU/GPU time of the engine, split into backbone, flow head
//! and codec, on a model folder or on a random checkpoint made for the run.

use super::synth::parse_dtype;
use crate::device::{DeviceChoice, OnBackend};
use crate::engine::{CudaGraphs, EngineOptions};
use crate::models::quantize::stored_format;
use crate::models::voxtral_tts::params::Config;
use crate::models::voxtral_tts::{Generation, Noise, StageTimes, SynthesisRequest, Voxtral};
use crate::models::{detect_family, Family};
use crate::tensor::cpu_gemv::{peak_f32_flops, sampled_f32_flops, Variant};
use crate::tensor::quantized::{parse_quantize, QuantFormat, GROUP};
use crate::tensor::tch_backend::TchTensor;
use crate::tensor::{linear_multiply_adds, timed_products, ROW_CLASSES};
use crate::tensor::{DType, Tensor};
use crate::testmodel::{cached_test_model, Preset};
use anyhow::{Context, Result};
use serde_json::json;
use std::path::PathBuf;
use std::time::{Duration, Instant};

#[derive(clap::Args)]
pub struct BenchArgs {
    /// Model folder (Voxtral TTS, Qwen3-TTS through the engine interface, or Voxtral
    /// Realtime speech to text); when absent, a random checkpoint of `--preset` (made under
    /// target/test-models on first use).
    #[arg(long)]
    pub(super) model: Option<PathBuf>,
    #[arg(long, value_enum, default_value = "tiny")]
    pub(super) preset: Preset,
    /// Frames to time (over as many runs as it takes if a run stops early at END_AUDIO).
    #[arg(long, default_value_t = 40)]
    pub(super) frames: usize,
    #[arg(long, value_parser = parse_dtype, default_value = "bf16")]
    pub(super) dtype: DType,
    /// How the large linear weights are stored: none | q8 | q4 (`Option`
    /// spelled out: clap would make an `Option` flag optional instead of parsing `none`).
    #[arg(long, value_parser = parse_quantize, default_value = "none")]
    pub(super) quantize: std::option::Option<QuantFormat>,
    #[arg(long, default_value = "auto")]
    pub(super) device: DeviceChoice,
    /// auto | off: time the decode step as captured CUDA graphs where the model and device
    /// allow (docs/configuration.md, `cuda_graphs`).
    #[arg(long, default_value = "off")]
    pub(super) cuda_graphs: CudaGraphs,
    /// libtorch intra-op threads (default: libtorch's choice).
    #[arg(long)]
    pub(super) threads: Option<usize>,
    #[arg(long, default_value = "The quick brown fox jumps over the lazy dog.")]
    pub(super) text: String,
    /// Also time decode steps of this many streams advancing together (continuous
    /// batching), e.g. `--batch 1,4,8`: `--frames` steps each, prefill and codec left out.
    #[arg(long, value_delimiter = ',')]
    pub(super) batch: Vec<usize>,
    /// Speech-to-text folders: seconds of audio transcribed offline (live steps take
    /// `--frames` steps of 80 ms).
    #[arg(long, default_value_t = 4.0)]
    pub(super) seconds: f64,
    /// Also write the figures as JSON to this file (Voxtral TTS folders): what `bench`
    /// prints, for tools and the docs' charts.
    #[arg(long)]
    pub(super) json: Option<PathBuf>,
}

/// A duration in milliseconds, as every bench line prints it.
pub(super) fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

pub fn run(args: BenchArgs) -> Result<()> {
    let dir = match &args.model {
        Some(dir) => dir.clone(),
        None => cached_test_model(args.preset, 0)?,
    };
    let family = detect_family(&dir)?;
    anyhow::ensure!(
        args.json.is_none() || family == Family::VoxtralTts,
        "bench --json writes the figures of Voxtral TTS folders; {} is another family",
        dir.display()
    );
    match family {
        Family::VoxtralTts => {}
        Family::VoxtralRealtime => return super::bench_stt::run(&args, dir),
        Family::Qwen3Tts | Family::Xtts => return super::bench_engine::run(&args, dir),
    }
    args.device
        .run(args.threads.unwrap_or(0), Bench { args: &args, dir })
        .map_err(anyhow::Error::msg)?
}

struct Bench<'a> {
    args: &'a BenchArgs,
    dir: PathBuf,
}

impl OnBackend for Bench<'_> {
    type Output = Result<()>;

    fn run<T: Tensor>(self, device: &T::Device) -> Result<()> {
        run_on::<T>(self.args, self.dir, device)
    }
}

/// Prompt positions a bench stream may use besides its frames.
const PROMPT_ROOM: usize = 1024;

/// A KV slot per stream of the largest `--batch`, each with room for a prompt and `--frames`.
fn engine_options(args: &BenchArgs, dir: &std::path::Path) -> Result<EngineOptions> {
    let config = Config::from_file(&dir.join("params.json"))?;
    let sessions = args.batch.iter().copied().max().unwrap_or(1).max(1);
    let positions = (PROMPT_ROOM + args.frames).min(config.max_positions);
    let per_position = config.decoder_dims().kv_bytes_per_position(args.dtype);
    Ok(EngineOptions {
        max_sessions: sessions,
        kv_cache_bytes: sessions * positions * per_position,
        quantize: args.quantize,
        cuda_graphs: args.cuda_graphs,
        ..EngineOptions::default()
    })
}

fn run_on<T: Tensor>(args: &BenchArgs, dir: PathBuf, device: &T::Device) -> Result<()> {
    let started = Instant::now();
    let mut model = Voxtral::<T>::load_for(&dir, device, args.dtype, &engine_options(args, &dir)?)
        .context("loading the model")?;
    // Each stage's own time, also on devices that queue work (the server does not wait).
    model.synchronize_stages(true);
    let load = started.elapsed();
    let voice = model.voices().next().context("no voices")?.to_string();

    // Warm-up: first calls allocate and pick kernels.
    let warm = SynthesisRequest {
        text: args.text.clone(),
        voice: voice.clone(),
        max_frames: 8,
        noise: Noise::Seeded {
            seed: 0,
            scale: 1.0,
        },
    };
    model.start(&warm)?.finish()?;

    let mut total = StageTimes::default();
    let (mut frames, mut runs, mut prompt_len, mut prefill_multiply_adds) = (0, 0, 0, 0);
    while frames < args.frames {
        let request = SynthesisRequest {
            text: args.text.clone(),
            voice: voice.clone(),
            max_frames: args.frames - frames,
            noise: Noise::Seeded {
                seed: runs as u64,
                scale: 1.0,
            },
        };
        let before = linear_multiply_adds();
        let generation = model.start(&request)?;
        prefill_multiply_adds += linear_multiply_adds() - before;
        let s = generation.finish()?;
        prompt_len = s.prompt_ids.len();
        frames += s.codes.len();
        runs += 1;
        total.prefill += s.times.prefill;
        total.backbone += s.times.backbone;
        total.flow_head += s.times.flow_head;
        total.codec += s.times.codec;
        anyhow::ensure!(
            runs < 100 || frames > 0,
            "the model stops at once on every seed"
        );
    }
    let per = |d: Duration| ms(d) / frames as f64;
    println!(
        "model      {} ({}{}, {} {:?}{})",
        dir.display(),
        args.dtype,
        stored_format(&dir)
            .or(args.quantize)
            .map_or(String::new(), |f| format!(", {f} weights")),
        T::BACKEND,
        device,
        if T::BACKEND == TchTensor::BACKEND {
            format!(", {} threads", tch::get_num_threads())
        } else {
            String::new()
        }
    );
    // Measured with as many threads as the engine ran on: one core cannot draw the memory
    // bandwidth (or the arithmetic) that two can.
    let threads = if T::BACKEND == TchTensor::BACKEND {
        usize::try_from(tch::get_num_threads()).unwrap_or(1).max(1)
    } else {
        1
    };
    // The CPU kernel and its peak say nothing of an accelerator's products.
    let peak = if T::is_cpu(device) {
        cpu_kernel_and_peak(threads)
    } else {
        None
    };
    println!("load       {:.0} ms", ms(load));
    let prefill = ms(total.prefill) / runs as f64;
    println!(
        "prefill    {prefill:.1} ms per run ({} prompt tokens, {runs} runs){}",
        prompt_len,
        arithmetic_rate(prefill_multiply_adds, total.prefill, peak)
    );
    println!("backbone   {:.2} ms/frame", per(total.backbone));
    println!("flow head  {:.2} ms/frame", per(total.flow_head));
    println!("codec      {:.2} ms/frame", per(total.codec));
    let step = per(total.backbone + total.flow_head + total.codec);
    let frame_ms = model.samples_per_frame() as f64 * 1e3 / model.sample_rate() as f64;
    println!(
        "total      {step:.2} ms/frame over {frames} frames (real-time factor {:.3})",
        step / frame_ms
    );
    let format = stored_format(&dir).or(args.quantize);
    let (backbone_bytes, flow_bytes) = weight_bytes_per_frame(&model.config, args.dtype, format);
    let mut report = json!({
        "family": "voxtral-tts",
        "model": dir.display().to_string(),
        "backend": T::BACKEND,
        "device": format!("{device:?}"),
        "dtype": args.dtype.to_string(),
        "weights": format.map_or(args.dtype.to_string(), |f| f.name().to_string()),
        "kernel": T::is_cpu(device).then(|| Variant::active().name()),
        "threads": threads,
        "frames": frames,
        "load_ms": ms(load),
        "prefill_ms": prefill,
        "prompt_tokens": prompt_len,
        "ms_per_frame": {
            "backbone": per(total.backbone),
            "flow_head": per(total.flow_head),
            "codec": per(total.codec),
            "total": step,
        },
        "real_time_factor": step / frame_ms,
        "weight_bytes_per_frame": {"backbone": backbone_bytes, "flow_head": flow_bytes},
        "floors": {},
    });
    // The weights live where the model runs: an accelerator's own memory, or the host's.
    let floors = match T::device_copy_bandwidth(device) {
        Some(copy) => {
            println!(
                "bandwidth  {:.1} GB/s large copy on {device:?} (bytes read + written)",
                copy / 1e9
            );
            vec![("copy", copy)]
        }
        None => {
            let (copy, read) = (copy_bandwidth(threads), read_bandwidth(threads));
            println!(
                "bandwidth  {:.1} GB/s large copy (bytes read + written), {:.1} GB/s large read; {threads} threads",
                copy / 1e9,
                read / 1e9
            );
            vec![("copy", copy), ("read", read)]
        }
    };
    for (name, bandwidth) in floors {
        let floor = |bytes: f64| bytes / bandwidth * 1e3;
        report["floors"][name] = json!({
            "bandwidth_gb_per_s": bandwidth / 1e9,
            "backbone_ms": floor(backbone_bytes),
            "flow_head_ms": floor(flow_bytes),
        });
        println!(
            "floor/{name} backbone {:.1} ms ({:.2} GB), flow head {:.1} ms ({:.2} GB): measured/floor {:.2}x and {:.2}x",
            floor(backbone_bytes),
            backbone_bytes / 1e9,
            floor(flow_bytes),
            flow_bytes / 1e9,
            per(total.backbone) / floor(backbone_bytes),
            per(total.flow_head) / floor(flow_bytes),
        );
    }
    report["batch"] = batch_steps(args, &model, &voice, peak, threads)?.into();
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_string_pretty(&report)? + "\n")
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

/// Prints the CPU kernel in use and its f32 FMA peak on `threads` threads; the peak.
fn cpu_kernel_and_peak(threads: usize) -> Option<f64> {
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
fn arithmetic_rate(multiply_adds: u64, time: Duration, peak: Option<f64>) -> String {
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
fn products_by_rows(
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

/// Decode steps of `--batch` streams together, as the server's batcher runs them: frames/s
/// of the engine alone and its ratio to one stream.
fn batch_steps<T: Tensor>(
    args: &BenchArgs,
    model: &Voxtral<T>,
    voice: &str,
    peak: Option<f64>,
    threads: usize,
) -> Result<Vec<serde_json::Value>> {
    let mut one_stream = None;
    let mut results = Vec::new();
    for &streams in &args.batch {
        anyhow::ensure!(streams > 0, "--batch: sizes must be at least 1");
        let mut running = (0..streams)
            .map(|i| model.start(&stream_request(args, voice, i)))
            .collect::<Result<Vec<_>, _>>()?;
        // Untimed: the first steps of a batch size pay one-time costs (on CUDA, loading the
        // kernels its shapes pick and the libraries' choices for them).
        for _ in 0..WARM_UP_STEPS {
            Generation::step_batch(&mut running.iter_mut().collect::<Vec<_>>());
        }
        let warm = running[0].times();
        let warm_frames: usize = running.iter().map(|g| g.frames().len()).sum();
        let before = linear_multiply_adds();
        let products_before = timed_products();
        let (mut steps, mut generated) = (0, Duration::ZERO);
        let mut peak_samples = Vec::new();
        while running.iter().any(|g| g.stop_reason().is_none()) {
            let started = Instant::now();
            Generation::step_batch(&mut running.iter_mut().collect::<Vec<_>>());
            generated += started.elapsed();
            steps += 1;
            if peak.is_some() {
                peak_samples.extend(sampled_f32_flops(Variant::active(), threads));
            }
        }
        // The steps' rates against the peak of the moments they ran in, where it was sampled.
        let start_peak = peak;
        let peak = match peak_samples.len() {
            0 => peak,
            n => Some(peak_samples.iter().sum::<f64>() / n as f64),
        };
        let rate = arithmetic_rate(linear_multiply_adds() - before, generated, peak);
        let by_rows = products_by_rows(&products_before, &timed_products(), steps, peak);
        // Each stream's audio decoded once, as for a file response: one stream at a time,
        // then all in one codec pass (what the server's step does on an accelerator); each
        // way once untimed first.
        let streams_codes: Vec<(&[Vec<u32>], usize)> =
            running.iter().map(|g| (g.frames(), 0)).collect();
        model.decode_tails_together(&streams_codes)?;
        for g in &running {
            model.decode(g.frames())?;
        }
        let decoding = Instant::now();
        let one_by_one = running
            .iter()
            .map(|g| model.decode(g.frames()))
            .collect::<Result<Vec<_>, _>>()?;
        let codec_one_by_one = decoding.elapsed();
        let decoding = Instant::now();
        let together = model.decode_tails_together(&streams_codes)?;
        let codec_together = decoding.elapsed();
        let codec_diff = one_by_one
            .iter()
            .flatten()
            .zip(together.iter().flatten())
            .map(|(a, b)| (a - b).abs())
            .fold(0.0, f32::max);
        let frames: usize = running.iter().map(|g| g.frames().len()).sum::<usize>() - warm_frames;
        let times = running[0].times();
        let (backbone, flow_head) = (
            times.backbone - warm.backbone,
            times.flow_head - warm.flow_head,
        );
        let flow_head_rate = arithmetic_rate(
            times.flow_head_multiply_adds - warm.flow_head_multiply_adds,
            flow_head,
            peak,
        );
        let per_step = |d: Duration| ms(d) / steps as f64;
        let fps = frames as f64 / generated.as_secs_f64();
        let ratio = fps / *one_stream.get_or_insert(fps);
        results.push(json!({
            "streams": streams,
            "steps": steps,
            "frames": frames,
            "ms_per_step": per_step(generated),
            "backbone_ms_per_step": per_step(backbone),
            "flow_head_ms_per_step": per_step(flow_head),
            "frames_per_s": fps,
        }));
        println!(
            "batch {streams:>3}  {:.1} ms/step (backbone {:.1}, flow head {:.1}), {frames} frames in {steps} steps: {fps:.2} frames/s, {ratio:.2}x batch {}{rate}",
            per_step(generated),
            per_step(backbone),
            per_step(flow_head),
            args.batch[0],
        );
        if let (Some(start), Some(during)) = (start_peak, peak) {
            println!(
                "  f32 FMA peak between the steps {:.1} GFLOP/s (mean of {} runs of about 1 ms, one after each step; {:.1} at the start): the shares here are of it",
                during / 1e9,
                peak_samples.len(),
                start / 1e9
            );
        }
        if !flow_head_rate.is_empty() {
            // The flow head's rows grow with the batch: the part that batching makes
            // compute-bound, measured over its whole time (norms and attention included).
            println!("  flow head alone{flow_head_rate}");
        }
        if let Some(by_rows) = by_rows {
            println!("  products by rows per weight read: {by_rows}");
        }
        println!(
            "  codec per step, each stream decoded once: {:.1} ms one stream at a time, {:.1} ms all in one pass (max |diff| {codec_diff:.1e})",
            per_step(codec_one_by_one),
            per_step(codec_together),
        );
        if streams > 1 {
            // The batch's slots must be free for the streams to run alone.
            let batched: Vec<Vec<Vec<u32>>> = running.iter().map(|g| g.frames().to_vec()).collect();
            drop(running);
            let checked = [0, streams - 1].map(|i| {
                let alone = codes_alone(model, &stream_request(args, voice, i))?;
                Ok::<_, anyhow::Error>(format!(
                    "stream {i}: {} of {} frames",
                    leading_equal(&batched[i], &alone),
                    alone.len().max(batched[i].len())
                ))
            });
            let [first, last] = checked;
            println!(
                "  batched == alone (codes equal from the start; f32 equals in full on the CPU): {}, {}",
                first?, last?
            );
        }
    }
    Ok(results)
}

/// Steps a `--batch` run takes before it starts timing.
const WARM_UP_STEPS: usize = 3;

/// Stream `index` of a `--batch` run: its own seed, `--frames` timed frames at most after
/// the warm-up's.
fn stream_request(args: &BenchArgs, voice: &str, index: usize) -> SynthesisRequest {
    SynthesisRequest {
        text: args.text.clone(),
        voice: voice.to_string(),
        max_frames: args.frames + WARM_UP_STEPS,
        noise: Noise::Seeded {
            seed: index as u64,
            scale: 1.0,
        },
    }
}

/// The codes of `request` generated with no other stream in the step.
fn codes_alone<T: Tensor>(model: &Voxtral<T>, request: &SynthesisRequest) -> Result<Vec<Vec<u32>>> {
    let mut generation = model.start(request)?;
    while generation.next_frame().is_some() {}
    Ok(generation.frames().to_vec())
}

/// How many frames two runs share from the first on.
fn leading_equal(a: &[Vec<u32>], b: &[Vec<u32>]) -> usize {
    a.iter().zip(b).take_while(|(x, y)| x == y).count()
}

/// Weight bytes one frame must read: each backbone layer once; each flow-head layer once per
/// Euler step (the two guidance rows share the read), its output projection per step, and the
/// semantic head once (as stored: its products are in f32, but a CPU kernel widens bf16
/// weights as it reads them).
fn weight_bytes_per_frame(cfg: &Config, dtype: DType, quantize: Option<QuantFormat>) -> (f64, f64) {
    let dense = match dtype {
        DType::BF16 => 2.0,
        DType::F32 => 4.0,
    };
    // The backbone's linear weights are what `--quantize` stores in blocks.
    let size = quantize.map_or(dense, |f| f.block_bytes() as f64 / GROUP as f64);
    let layer = |dim: usize, heads: usize, kv: usize, hd: usize, hidden: usize| {
        (2 * dim * heads * hd + 2 * dim * kv * hd + 3 * dim * hidden + 2 * dim) as f64
    };
    let a = &cfg.args;
    let backbone =
        a.n_layers as f64 * layer(a.dim, a.n_heads, a.n_kv_heads, a.head_dim, a.hidden_dim) * size;
    let f = cfg.flow();
    let per_step = f.n_layers as f64
        * layer(f.dim, f.n_heads, f.n_kv_heads, f.head_dim, f.hidden_dim)
        + (2 * f.dim * cfg.audio_model().n_acoustic_codebook) as f64;
    // The flow head stays in the compute dtype.
    let flow = cfg.euler_steps as f64 * per_step * dense
        + (f.dim * f.input_dim) as f64 * dense
        + (cfg.semantic_head_rows * f.dim) as f64 * dense;
    (backbone, flow)
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
fn copy_bandwidth(threads: usize) -> f64 {
    bandwidth(threads, |src, dst| dst.copy_from_slice(src), 2.0)
}

/// A large read (a sum of every word), which is all a weight-bound decode step does.
pub(super) fn read_bandwidth(threads: usize) -> f64 {
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
