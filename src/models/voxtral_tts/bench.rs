//! `voxtral-tts bench` on a Voxtral TTS folder (the family's bench hook): per-frame CPU/GPU
//! time of the engine, split into backbone, flow head and codec, the batched step at each
//! `--batch` size, and the weight-read floors; `--json` writes the figures.

use super::params::Config;
use super::{Generation, Noise, StageTimes, SynthesisRequest, Voxtral};
use crate::bench::{
    arithmetic_rate, copy_bandwidth, cpu_kernel_and_peak, finish_report, ms, products_by_rows,
    read_bandwidth, weights_name, BenchArgs,
};
use crate::device::OnBackend;
use crate::engine::EngineOptions;
use crate::tensor::cpu_gemv::{sampled_f32_flops, Variant};
use crate::tensor::quantized::{QuantFormat, GROUP};
use crate::tensor::tch_backend::TchTensor;
use crate::tensor::{linear_multiply_adds, timed_products};
use crate::tensor::{DType, Tensor, TensorData};
use anyhow::{Context, Result};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Times the folder `dir` on `args.device`.
pub fn run(args: &BenchArgs, dir: &Path) -> Result<()> {
    let dir = dir.to_path_buf();
    args.device
        .run(args.threads.unwrap_or(0), Bench { args, dir })
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
fn engine_options(args: &BenchArgs, dir: &Path) -> Result<EngineOptions> {
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
    // `q8` or `q4` where this backend multiplies the weights so (dequantized elsewhere).
    let weights = weights_name::<T>(args, &dir, device);
    let multiplied: Option<QuantFormat> = weights.parse().ok();
    println!(
        "model      {} ({}{}, {} {:?}{})",
        dir.display(),
        args.dtype,
        multiplied.map_or(String::new(), |f| format!(", {f} weights")),
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
    let (backbone_bytes, flow_bytes) =
        weight_bytes_per_frame(&model.config, args.dtype, multiplied);
    let mut report = json!({
        "family": "voxtral-tts",
        "model": dir.display().to_string(),
        "backend": T::BACKEND,
        "device": format!("{device:?}"),
        "dtype": args.dtype.to_string(),
        "weights": weights,
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
    finish_report(args, report)
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
