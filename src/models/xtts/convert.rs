//! `voxtral-tts convert`: an XTTS-v2 folder's pickles written once as safetensors, so that a
//! deployment serves without reading a pickle at all.
//!
//! `model.pth` -> `model.safetensors` (the normalised state dict, `checkpoint.rs`), and
//! `speakers_xtts.pth` -> `speakers.safetensors` (keys `<speaker>.gpt_cond_latent` and
//! `<speaker>.speaker_embedding`). Dtypes are kept as stored. `config.json` and `vocab.json`
//! are copied when the output is another folder.

use super::checkpoint::{ModelPth, SpeakersPth, MODEL_PTH, SPEAKERS_PTH};
use crate::nn::safetensors_writer::{write_atomically, write_safetensors, TensorSpec};
use anyhow::{bail, Context, Result};
use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};

pub const MODEL_SAFETENSORS: &str = "model.safetensors";
pub const SPEAKERS_SAFETENSORS: &str = "speakers.safetensors";
const COPIED: [&str; 2] = ["config.json", "vocab.json"];

/// What a conversion wrote.
pub struct Converted {
    pub tensors: usize,
    pub bytes: u64,
    /// model.pth keys left out by the normalisation.
    pub dropped: usize,
    /// Studio voices converted, if the folder has `speakers_xtts.pth`.
    pub speakers: Option<usize>,
    pub files: Vec<PathBuf>,
}

/// Converts the XTTS-v2 folder `model` into `out` (which may be `model` itself).
/// `progress` counts the bytes of each safetensors file as it is written. On failure, the
/// files this run had already completed are removed, so no half-converted folder is left.
pub fn convert_folder(
    model: &Path,
    out: &Path,
    progress: &indicatif::ProgressBar,
) -> Result<Converted> {
    let mut files = Vec::new();
    let result = convert_into(model, out, progress, &mut files);
    if result.is_err() {
        for file in &files {
            let _ = std::fs::remove_file(file);
        }
    }
    let (tensors, bytes, dropped, speakers) = result?;
    Ok(Converted {
        tensors,
        bytes,
        dropped,
        speakers,
        files,
    })
}

/// The conversion; each file completed is pushed to `files`. Returns (tensors, bytes,
/// dropped keys, studio voices).
fn convert_into(
    model: &Path,
    out: &Path,
    progress: &indicatif::ProgressBar,
    files: &mut Vec<PathBuf>,
) -> Result<(usize, u64, usize, Option<usize>)> {
    check_folder(model)?;

    // Both pickles are parsed before anything is written, so a bad speakers file leaves no
    // half-converted folder.
    let pth = ModelPth::open(&model.join(MODEL_PTH))?;
    let speakers_pth = model.join(SPEAKERS_PTH);
    let voices = match speakers_pth.exists() {
        true => Some(SpeakersPth::open(&speakers_pth)?),
        false => None,
    };
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;

    let entries: Vec<_> = pth.tensors().map(|(_, e)| e).collect();
    let model_specs = specs(pth.tensors().map(|(name, e)| (name.to_string(), e)));
    let mut tensors = model_specs.len();
    let mut bytes = write(
        &out.join(MODEL_SAFETENSORS),
        &model_specs,
        MODEL_PTH,
        |i| Ok(pth.read(entries[i])?),
        progress,
    )?;
    files.push(out.join(MODEL_SAFETENSORS));

    if let Some(voices) = &voices {
        let entries: Vec<_> = voices
            .speakers()
            .flat_map(|(_, v)| [v.gpt_cond_latent, v.speaker_embedding])
            .collect();
        let speaker_specs = specs(entries.iter().map(|e| (e.key.clone(), *e)));
        tensors += speaker_specs.len();
        bytes += write(
            &out.join(SPEAKERS_SAFETENSORS),
            &speaker_specs,
            SPEAKERS_PTH,
            |i| Ok(voices.read(entries[i])?),
            progress,
        )?;
        files.push(out.join(SPEAKERS_SAFETENSORS));
    }

    if !same_folder(model, out)? {
        for name in COPIED {
            let target = out.join(name);
            copy_atomically(&model.join(name), &target)?;
            files.push(target);
        }
    }
    Ok((tensors, bytes, pth.dropped().len(), voices.map(|v| v.len())))
}

/// The folder must be XTTS's: its config names the model, and the files it needs are there.
fn check_folder(model: &Path) -> Result<()> {
    let config = model.join("config.json");
    let text = std::fs::read_to_string(&config)
        .with_context(|| format!("{}: not an XTTS-v2 model folder", model.display()))?;
    let json = crate::nn::config_json::parse(&text)
        .with_context(|| format!("{}: not valid JSON", config.display()))?;
    if json["model"] != "xtts" {
        bail!(
            "{}: \"model\" is {}, expected \"xtts\" (convert reads XTTS-v2 folders)",
            config.display(),
            json["model"]
        );
    }
    for name in [MODEL_PTH, "vocab.json"] {
        if !model.join(name).is_file() {
            bail!("{}: missing", model.join(name).display());
        }
    }
    Ok(())
}

/// Writes one safetensors file from `source`'s tensors; returns its data size in bytes.
fn write(
    target: &Path,
    specs: &[TensorSpec],
    source: &str,
    bytes: impl FnMut(usize) -> Result<Vec<u8>>,
    progress: &indicatif::ProgressBar,
) -> Result<u64> {
    let name = target.file_name().unwrap_or_default().to_string_lossy();
    progress.set_message(name.into_owned());
    progress.set_position(0);
    let metadata = HashMap::from([
        ("format".to_string(), "pt".to_string()),
        ("source".to_string(), source.to_string()),
    ]);
    write_safetensors(target, specs, &metadata, bytes, progress)?;
    Ok(progress.position())
}

fn specs<'a>(
    entries: impl Iterator<Item = (String, &'a crate::nn::pth::PthEntry)>,
) -> Vec<TensorSpec> {
    entries
        .map(|(key, e)| TensorSpec {
            key,
            dtype: e.dtype,
            shape: e.shape.clone(),
        })
        .collect()
}

fn same_folder(a: &Path, b: &Path) -> Result<bool> {
    let canonical =
        |p: &Path| std::fs::canonicalize(p).with_context(|| format!("reading {}", p.display()));
    Ok(canonical(a)? == canonical(b)?)
}

fn copy_atomically(from: &Path, to: &Path) -> Result<()> {
    let bytes = std::fs::read(from).with_context(|| format!("reading {}", from.display()))?;
    write_atomically(to, |out| Ok(out.write_all(&bytes)?))
}
