//! `voxtral-tts synth` and `voxtral-tts voices`.

use crate::audio::{encode_audio, AudioFormat};
use crate::device::{Backend, DeviceChoice};
use crate::models::voxtral_tts::{Noise, SynthesisRequest, Voxtral, DEFAULT_MAX_FRAMES};
#[cfg(feature = "mlx")]
use crate::tensor::mlx_backend::MlxTensor;
use crate::tensor::tch_backend::TchTensor;
use crate::tensor::{DType, Tensor};
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};

#[derive(clap::Args)]
pub struct SynthArgs {
    /// Model folder (params.json, consolidated.safetensors, tekken.json, voice_embedding/).
    #[arg(long)]
    model: PathBuf,
    /// Preset voice name (see `voxtral-tts voices`).
    #[arg(long)]
    voice: String,
    #[arg(long)]
    text: String,
    /// Output WAV file.
    #[arg(long)]
    output: PathBuf,
    #[arg(long, default_value_t = DEFAULT_MAX_FRAMES)]
    max_frames: usize,
    /// Noise seed; a random one (printed) when absent.
    #[arg(long)]
    seed: Option<u64>,
    /// Scale of the flow head's starting noise; 0 gives deterministic output.
    #[arg(long, default_value_t = 1.0)]
    noise_scale: f32,
    #[arg(long, value_parser = parse_dtype, default_value = "bf16")]
    dtype: DType,
    /// auto | cpu | cuda | cuda:N | mlx (auto prefers CUDA; MLX on Apple Silicon builds with
    /// the `mlx` feature).
    #[arg(long, default_value = "auto")]
    device: DeviceChoice,
    /// Also write {"prompt_ids": [...], "codes": [[...], ...]} to this JSON file.
    #[arg(long)]
    dump_codes: Option<PathBuf>,
}

pub fn parse_dtype(s: &str) -> Result<DType, String> {
    match s {
        "bf16" => Ok(DType::BF16),
        "f32" => Ok(DType::F32),
        _ => Err(format!("unknown dtype {s:?}: expected bf16 or f32")),
    }
}

fn load(dir: &Path, device: DeviceChoice, dtype: DType) -> Result<Voxtral<TchTensor>> {
    let device = device.resolve_tch().map_err(anyhow::Error::msg)?;
    Voxtral::load(dir, &device, dtype).map_err(anyhow::Error::from)
}

pub fn run(args: SynthArgs) -> Result<()> {
    let _guard = tch::no_grad_guard();
    match args.device.resolve().map_err(anyhow::Error::msg)? {
        Backend::Tch(device) => run_on::<TchTensor>(args, &device),
        #[cfg(feature = "mlx")]
        Backend::Mlx(device) => run_on::<MlxTensor>(args, &device),
    }
}

fn run_on<T: Tensor>(args: SynthArgs, device: &T::Device) -> Result<()> {
    let model = Voxtral::<T>::load(&args.model, device, args.dtype)?;
    if !model.has_voice(&args.voice) {
        let names: Vec<&str> = model.voices().collect();
        bail!(
            "unknown voice {:?}; available: {}",
            args.voice,
            names.join(", ")
        );
    }
    let seed = args.seed.unwrap_or_else(rand::random);
    let request = SynthesisRequest {
        text: args.text,
        voice: args.voice,
        max_frames: args.max_frames,
        noise: Noise::Seeded {
            seed,
            scale: args.noise_scale,
        },
    };
    let mut generation = model.start(&request)?;
    if args.seed.is_none() && args.noise_scale > 0.0 {
        eprintln!("seed: {seed}");
    }
    let bar = indicatif::ProgressBar::new(args.max_frames as u64).with_style(
        indicatif::ProgressStyle::with_template(
            "{spinner} frames {pos}/{len} [{elapsed_precise}] {per_sec}",
        )
        .expect("valid template"),
    );
    while generation.next_frame().is_some() {
        bar.inc(1);
    }
    bar.finish_and_clear();
    let synthesis = generation.finish()?;
    write_atomically(
        &args.output,
        &encode_audio(AudioFormat::Wav, &synthesis.pcm, 24_000)?,
    )?;
    if let Some(path) = &args.dump_codes {
        let json =
            serde_json::json!({"prompt_ids": synthesis.prompt_ids, "codes": synthesis.codes});
        write_atomically(path, serde_json::to_string(&json)?.as_bytes())?;
    }
    eprintln!(
        "{} frames ({:.2} s of audio, stopped by {:?}) -> {}",
        synthesis.codes.len(),
        synthesis.pcm.len() as f64 / model.sample_rate() as f64,
        synthesis.stop,
        args.output.display()
    );
    Ok(())
}

pub fn list_voices(dir: &Path) -> Result<()> {
    let model = load(dir, DeviceChoice::Cpu, DType::BF16)?;
    for v in model.voices() {
        println!("{v}");
    }
    Ok(())
}

/// Writes via a temporary file and a rename, so a failed run never leaves a partial file.
fn write_atomically(path: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = path.with_extension("partial");
    std::fs::write(&tmp, bytes).with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("writing {}", path.display()))
}
