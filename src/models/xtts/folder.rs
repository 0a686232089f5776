//! An XTTS-v2 folder as the server opens it: `config.json`, `vocab.json` and the safetensors
//! that `voxtral-tts convert` writes from the published pickles (`model.safetensors`, and
//! `speakers.safetensors` when the folder has studio voices). A folder that still has only
//! `model.pth` is refused with the command to run, so serving never reads a pickle.

use super::checkpoint::{GPT_COND_LATENT, MODEL_PTH, SPEAKERS_PTH, SPEAKER_EMBEDDING};
use super::convert::{MODEL_SAFETENSORS, SPEAKERS_SAFETENSORS};
use crate::nn::checkpoint::Checkpoint;
use crate::nn::config_json;
use crate::nn::LoadError;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

pub const CONFIG_JSON: &str = "config.json";
pub const VOCAB_JSON: &str = "vocab.json";

/// A built-in voice: the GPT conditioning latents `[1, N, D]` and the speaker embedding
/// `[1, E, 1]`, as f32.
pub struct StudioVoice {
    pub gpt_cond_latent: Vec<f32>,
    pub latent_shape: [usize; 3],
    pub speaker_embedding: Vec<f32>,
}

pub struct XttsFolder {
    pub config: serde_json::Value,
    pub vocab: PathBuf,
    /// The normalised state dict (`checkpoint::normalize_key` names), memory-mapped.
    pub weights: Checkpoint,
    pub speakers: BTreeMap<String, StudioVoice>,
}

impl XttsFolder {
    pub fn open(dir: &Path) -> Result<Self, LoadError> {
        let config_path = dir.join(CONFIG_JSON);
        let text =
            std::fs::read_to_string(&config_path).map_err(|e| LoadError::io(&config_path, e))?;
        let config = config_json::parse(&text).map_err(|e| {
            LoadError::invalid(config_path.display().to_string(), "(json)", e.to_string())
        })?;
        if config["model"] != "xtts" {
            return Err(LoadError::invalid(
                config_path.display().to_string(),
                "model",
                format!("is {}, expected \"xtts\"", config["model"]),
            ));
        }
        let vocab = dir.join(VOCAB_JSON);
        if !vocab.is_file() {
            return Err(LoadError::invalid(
                vocab.display().to_string(),
                "(file)",
                "missing",
            ));
        }
        let weights = open_converted(dir, MODEL_SAFETENSORS, MODEL_PTH)?.ok_or_else(|| {
            LoadError::invalid(
                dir.join(MODEL_SAFETENSORS).display().to_string(),
                "(file)",
                "missing",
            )
        })?;
        let speakers = match open_converted(dir, SPEAKERS_SAFETENSORS, SPEAKERS_PTH)? {
            Some(file) => read_speakers(&file)?,
            None => BTreeMap::new(),
        };
        Ok(XttsFolder {
            config,
            vocab,
            weights,
            speakers,
        })
    }
}

/// `dir/name`, or `None` when neither it nor its pickle is there; a pickle without its
/// conversion is an error that says how to convert it.
fn open_converted(dir: &Path, name: &str, pickle: &str) -> Result<Option<Checkpoint>, LoadError> {
    let path = dir.join(name);
    if path.is_file() {
        return Checkpoint::open(&path).map(Some);
    }
    if dir.join(pickle).is_file() {
        return Err(LoadError::invalid(
            path.display().to_string(),
            "(file)",
            format!(
                "missing; the folder has {pickle}, which the server does not read: run \
                 `voxtral-tts convert --model {}` once",
                dir.display()
            ),
        ));
    }
    Ok(None)
}

fn read_speakers(file: &Checkpoint) -> Result<BTreeMap<String, StudioVoice>, LoadError> {
    let mut shapes: BTreeMap<String, [Option<Vec<usize>>; 2]> = BTreeMap::new();
    for key in file.keys() {
        let (name, field) = key.rsplit_once('.').unwrap_or(("", &key));
        let slot = match field {
            GPT_COND_LATENT => 0,
            SPEAKER_EMBEDDING => 1,
            _ => {
                return Err(LoadError::invalid(
                    file.files(),
                    &key,
                    format!(
                        "expected <speaker>.{GPT_COND_LATENT} or <speaker>.{SPEAKER_EMBEDDING}"
                    ),
                ))
            }
        };
        shapes.entry(name.to_string()).or_default()[slot] = Some(file.shape(&key)?);
    }
    let mut voices = BTreeMap::new();
    for (name, [latent, embedding]) in shapes {
        let field_key = |field: &str| format!("{name}.{field}");
        let (Some(latent), Some(embedding)) = (latent, embedding) else {
            return Err(LoadError::invalid(
                file.files(),
                name,
                format!("a voice needs both {GPT_COND_LATENT} and {SPEAKER_EMBEDDING}"),
            ));
        };
        let latent_shape = match latent[..] {
            [1, n, d] => [1, n, d],
            _ => {
                return Err(LoadError::invalid(
                    file.files(),
                    field_key(GPT_COND_LATENT),
                    format!("shape {latent:?}, expected [1, N, D]"),
                ))
            }
        };
        if !matches!(embedding[..], [1, _, 1]) {
            return Err(LoadError::invalid(
                file.files(),
                field_key(SPEAKER_EMBEDDING),
                format!("shape {embedding:?}, expected [1, E, 1]"),
            ));
        }
        let voice = StudioVoice {
            gpt_cond_latent: file.load_f32(&field_key(GPT_COND_LATENT), &latent)?,
            latent_shape,
            speaker_embedding: file.load_f32(&field_key(SPEAKER_EMBEDDING), &embedding)?,
        };
        voices.insert(name, voice);
    }
    Ok(voices)
}
