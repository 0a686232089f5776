//! `voxtral-tts bench`: per-frame CPU/GPU time of the engine, split into backbone, flow head
//! and codec, on a model folder or on a random checkpoint made for the run.

use super::synth::parse_dtype;
use crate::device::{Backend, DeviceChoice};
use crate::model::params::Config;
use crate::model::{Noise, StageTimes, SynthesisRequest, Voxtral};
#[cfg(feature = "mlx")]
use crate::tensor::mlx_backend::MlxTensor;
use crate::tensor::tch_backend::TchTensor;
use crate::tensor::{DType, Tensor};
use crate::testmodel::{cached_test_model, Preset};
use anyhow::{Context, Result};
use std::path::PathBuf;
use std::time::{Duration, Instant};

#[derive(clap::Args)]
pub struct BenchArgs {
    /// Model folder; when absent, a random checkpoint of `--preset` (made under
    /// target/test-models on first use).
    #[arg(long)]
    model: Option<PathBuf>,
    #[arg(long, value_enum, default_value = "tiny")]
    preset: Preset,
    /// Frames to time (over as many runs as it takes if a run stops early at END_AUDIO).
    #[arg(long, default_value_t = 40)]
    frames: usize,
    #[arg(long, value_parser = parse_dtype, default_value = "bf16")]
    dtype: DType,
    #[arg(long, default_value = "auto")]
    device: DeviceChoice,
    /// libtorch intra-op threads (default: libtorch's choice).
    #[arg(long)]
    threads: Option<i32>,
    #[arg(long, default_value = "The quick brown fox jumps over the lazy dog.")]
    text: String,
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

pub fn run(args: BenchArgs) -> Result<()> {
    let _guard = tch::no_grad_guard();
    if let Some(n) = args.threads {
        tch::set_num_threads(n);
    }
    let dir = match &args.model {
        Some(dir) => dir.clone(),
        None => cached_test_model(args.preset, 0)?,
    };
    match args.device.resolve().map_err(anyhow::Error::msg)? {
        Backend::Tch(device) => run_on::<TchTensor>(&args, dir, &device),
        #[cfg(feature = "mlx")]
        Backend::Mlx(device) => run_on::<MlxTensor>(&args, dir, &device),
    }
}

fn run_on<T: Tensor>(args: &BenchArgs, dir: PathBuf, device: &T::Device) -> Result<()> {
    let started = Instant::now();
    let model = Voxtral::<T>::load(&dir, device, args.dtype).context("loading the model")?;
    let load = started.elapsed();
    let voice = model.voices().next().context("no voices")?.to_string();

    // Warm-up: first calls allocate and pick kernels.
    let warm = SynthesisRequest {
        text: args.text.clone(),
        voice: voice.clone(),
        max_frames: 2,
        noise: Noise::Seeded {
            seed: 0,
            scale: 1.0,
        },
    };
    model.start(&warm)?.finish()?;

    let mut total = StageTimes::default();
    let (mut frames, mut runs, mut prompt_len) = (0, 0, 0);
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
        let s = model.start(&request)?.finish()?;
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
        "model      {} ({}, {} {:?}{})",
        dir.display(),
        args.dtype,
        T::BACKEND,
        device,
        if T::BACKEND == TchTensor::BACKEND {
            format!(", {} threads", tch::get_num_threads())
        } else {
            String::new()
        }
    );
    println!("load       {:.0} ms", ms(load));
    println!(
        "prefill    {:.1} ms per run ({} prompt tokens, {runs} runs)",
        ms(total.prefill) / runs as f64,
        prompt_len
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
    let (backbone_bytes, flow_bytes) = weight_bytes_per_frame(&model.config, args.dtype);
    let bandwidth = copy_bandwidth();
    let floor = |bytes: f64| bytes / bandwidth * 1e3;
    println!(
        "bandwidth  {:.1} GB/s (large copy, bytes read + written)",
        bandwidth / 1e9
    );
    println!(
        "floor      backbone {:.1} ms ({:.2} GB), flow head {:.1} ms ({:.2} GB): measured/floor {:.2}x and {:.2}x",
        floor(backbone_bytes),
        backbone_bytes / 1e9,
        floor(flow_bytes),
        flow_bytes / 1e9,
        per(total.backbone) / floor(backbone_bytes),
        per(total.flow_head) / floor(flow_bytes),
    );
    Ok(())
}

/// Weight bytes one frame must read: each backbone layer once; each flow-head layer once per
/// Euler step (the two guidance rows share the read), its output projection per step, and the
/// f32 semantic head once.
fn weight_bytes_per_frame(cfg: &Config, dtype: DType) -> (f64, f64) {
    let size = match dtype {
        DType::BF16 => 2.0,
        DType::F32 => 4.0,
    };
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
    let flow = cfg.euler_steps as f64 * per_step * size
        + (f.dim * f.input_dim) as f64 * size
        + (cfg.semantic_head_rows * f.dim) as f64 * 4.0;
    (backbone, flow)
}

/// Bytes per second of a large memory copy, counting bytes read and bytes written; best of 3.
fn copy_bandwidth() -> f64 {
    let len = 512 << 20;
    let src = vec![1u8; len];
    let mut dst = vec![0u8; len];
    let best = (0..3)
        .map(|_| {
            let started = Instant::now();
            dst.copy_from_slice(std::hint::black_box(&src));
            started.elapsed()
        })
        .min()
        .expect("three runs");
    std::hint::black_box(&dst);
    2.0 * len as f64 / best.as_secs_f64()
}
