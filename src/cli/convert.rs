//! `voxtral-tts convert`: writes an XTTS-v2 folder's pickled checkpoints as safetensors
//! (`models::xtts::convert`), reading the pickles without executing them.

use crate::models::xtts::convert::convert_folder;
use anyhow::Result;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct ConvertArgs {
    /// XTTS-v2 model folder (config.json, model.pth, vocab.json, optional speakers_xtts.pth).
    #[arg(long)]
    model: PathBuf,
    /// Folder to write model.safetensors (and speakers.safetensors) to, with config.json and
    /// vocab.json copied beside them; by default the model folder itself.
    #[arg(long)]
    out: Option<PathBuf>,
}

pub fn run(args: ConvertArgs) -> Result<()> {
    let out = args.out.unwrap_or_else(|| args.model.clone());
    let progress = indicatif::ProgressBar::new(0).with_style(
        indicatif::ProgressStyle::with_template("{msg} [{bar:40}] {bytes}/{total_bytes} ({eta})")
            .expect("valid template"),
    );
    let result = convert_folder(&args.model, &out, &progress);
    progress.finish_and_clear();
    let converted = result?;
    let speakers = converted
        .speakers
        .map_or(String::new(), |n| format!(", {n} studio voices"));
    eprintln!(
        "{} tensors ({:.1} MB){speakers}; {} unused keys left out; wrote {}",
        converted.tensors,
        converted.bytes as f64 / 1e6,
        converted.dropped,
        converted
            .files
            .iter()
            .map(|f| f.display().to_string())
            .collect::<Vec<_>>()
            .join(", ")
    );
    Ok(())
}
