//! `voxtral-tts quantize`: writes a model folder with its large linear weights stored in 8 or
//! 4 bits (`models::quantize`), which a server then reads in place with no work at start.

use crate::models::quantize::quantize_folder;
use crate::tensor::quantized::QuantFormat;
use anyhow::Result;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct QuantizeArgs {
    /// Model folder of any family (Voxtral TTS, Qwen3-TTS, XTTS-v2 converted, Voxtral
    /// Realtime).
    #[arg(long)]
    model: PathBuf,
    /// Folder to write the quantized model to (every other file copied).
    #[arg(long)]
    out: PathBuf,
    /// q8 (8-bit, one scale per 32 weights) or q4 (4-bit).
    #[arg(long)]
    format: QuantFormat,
}

pub fn run(args: QuantizeArgs) -> Result<()> {
    let progress = indicatif::ProgressBar::new(0).with_style(
        indicatif::ProgressStyle::with_template("{msg} [{bar:40}] {bytes}/{total_bytes} ({eta})")
            .expect("valid template"),
    );
    let result = quantize_folder(&args.model, &args.out, args.format, &progress);
    progress.finish_and_clear();
    let written = result?;
    let heads = match written.heads_in_q8 {
        0 => String::new(),
        n => format!(" ({n} output head{} in q8)", if n == 1 { "" } else { "s" }),
    };
    eprintln!(
        "{} weights in {}{heads}: {:.1} MB of safetensors became {:.1} MB; wrote {}",
        written.weights,
        args.format,
        written.bytes_before as f64 / 1e6,
        written.bytes_after as f64 / 1e6,
        written
            .files
            .iter()
            .map(|f| f.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    );
    Ok(())
}
