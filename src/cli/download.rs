//! `voxtral-tts download`: fetches the published model folder from the Hugging Face Hub.

use anyhow::{Context, Result};
use std::path::{Path, PathBuf};

pub const DEFAULT_REPO: &str = "mistralai/Voxtral-4B-TTS-2603";

#[derive(clap::Args)]
pub struct DownloadArgs {
    /// Folder to put the model in.
    #[arg(long)]
    out: PathBuf,
    #[arg(long, default_value = DEFAULT_REPO)]
    repo: String,
    #[arg(long, default_value = "main")]
    revision: String,
}

/// Files of the model folder the engine reads.
fn wanted(name: &str) -> bool {
    matches!(
        name,
        "params.json" | "tekken.json" | "consolidated.safetensors"
    ) || (name.starts_with("voice_embedding/")
        && (name.ends_with(".pt") || name.ends_with(".safetensors")))
}

pub fn run(args: DownloadArgs) -> Result<()> {
    let api = hf_hub::api::sync::ApiBuilder::from_env()
        .with_progress(true)
        .build()?;
    let repo = api.repo(hf_hub::Repo::with_revision(
        args.repo.clone(),
        hf_hub::RepoType::Model,
        args.revision,
    ));
    let info = repo
        .info()
        .with_context(|| format!("listing {} (gated repos need HF_TOKEN)", args.repo))?;
    let files: Vec<String> = info
        .siblings
        .into_iter()
        .map(|s| s.rfilename)
        .filter(|n| wanted(n))
        .collect();
    anyhow::ensure!(
        !files.is_empty(),
        "{} has none of the model files",
        args.repo
    );
    for name in &files {
        let cached = repo
            .get(name)
            .with_context(|| format!("downloading {name}"))?;
        link_into(&cached, &args.out.join(name))?;
    }
    eprintln!("{} files in {}", files.len(), args.out.display());
    Ok(())
}

/// Places a cached file in the model folder without a second copy where the OS allows.
fn link_into(cached: &Path, target: &Path) -> Result<()> {
    if let Some(parent) = target.parent() {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("creating {}", parent.display()))?;
    }
    let _ = std::fs::remove_file(target);
    std::fs::hard_link(cached, target)
        .or_else(|_| std::fs::copy(cached, target).map(|_| ()))
        .with_context(|| format!("writing {}", target.display()))
}
