//! XTTS-v2's pickled checkpoints, read without executing them (`crate::nn::pth`):
//! `model.pth` (`{"config", "model": state dict, ...}`, only `"model"` is read) with the
//! reference loader's key normalisation, and `speakers_xtts.pth` (the studio voices).
//!
//! Key normalisation (`Xtts.get_compatible_checkpoint_state_dict` / `load_checkpoint` in
//! coqui-tts, docs/xtts-v2-spec.md §1):
//! - a leading `xtts.` (trainer checkpoints) is stripped;
//! - keys under `torch_mel_spectrogram_style_encoder`, `torch_mel_spectrogram_dvae` or `dvae`
//!   (training-only modules), the v1 aliases `gpt.gpt_inference.*` and `gpt.gpt.wte.weight`,
//!   and GPT-2's attention-mask buffers `gpt.gpt.h.N.attn.bias`/`.attn.masked_bias` are dropped;
//! - weight norm is spelled one way: the legacy `X.weight_g`/`X.weight_v` become
//!   `X.parametrizations.weight.original0`/`original1` (g, v), the spelling current torch
//!   writes. A file holding both spellings of one weight is refused.

use crate::nn::pth::{PthCheckpoint, PthEntry};
use crate::nn::LoadError;
use std::collections::BTreeMap;
use std::path::Path;

pub const MODEL_PTH: &str = "model.pth";
pub const SPEAKERS_PTH: &str = "speakers_xtts.pth";
pub const GPT_COND_LATENT: &str = "gpt_cond_latent";
pub const SPEAKER_EMBEDDING: &str = "speaker_embedding";

const DROPPED_MODULES: [&str; 3] = [
    "torch_mel_spectrogram_style_encoder",
    "torch_mel_spectrogram_dvae",
    "dvae",
];

/// The name `key` has in the model, or `None` for a key the model does not use.
pub fn normalize_key(key: &str) -> Option<String> {
    let key = key.strip_prefix("xtts.").unwrap_or(key);
    let first = key.split('.').next().unwrap_or(key);
    if DROPPED_MODULES.contains(&first)
        || key.starts_with("gpt.gpt_inference.")
        || key == "gpt.gpt.wte.weight"
        || is_attention_mask_buffer(key)
    {
        return None;
    }
    for (legacy, current) in [
        ("weight_g", "parametrizations.weight.original0"),
        ("weight_v", "parametrizations.weight.original1"),
    ] {
        if let Some(module) = key.strip_suffix(legacy).filter(|m| m.ends_with('.')) {
            return Some(format!("{module}{current}"));
        }
    }
    Some(key.to_string())
}

/// `gpt.gpt.h.N.attn.bias` / `.attn.masked_bias`: causal-mask buffers of old transformers
/// releases, not weights (the attention's own bias is `attn.c_attn.bias`).
fn is_attention_mask_buffer(key: &str) -> bool {
    let Some(rest) = key.strip_prefix("gpt.gpt.h.") else {
        return false;
    };
    let mut parts = rest.split('.');
    let layer = parts.next().is_some_and(|n| n.parse::<usize>().is_ok());
    layer
        && parts.next() == Some("attn")
        && matches!(parts.next(), Some("bias" | "masked_bias"))
        && parts.next().is_none()
}

/// `model.pth`'s state dict under the model's key names.
pub struct ModelPth {
    pth: PthCheckpoint,
    /// Model key -> index into `pth.entries()`, sorted by model key.
    kept: BTreeMap<String, usize>,
    dropped: Vec<String>,
}

impl ModelPth {
    pub fn open(path: &Path) -> Result<Self, LoadError> {
        Self::from_checkpoint(PthCheckpoint::open(path, Some("model"))?)
    }

    pub fn from_checkpoint(pth: PthCheckpoint) -> Result<Self, LoadError> {
        let mut kept = BTreeMap::new();
        let mut dropped = Vec::new();
        for (i, entry) in pth.entries().iter().enumerate() {
            let Some(name) = normalize_key(&entry.key) else {
                dropped.push(entry.key.clone());
                continue;
            };
            if let Some(first) = kept.insert(name.clone(), i) {
                return Err(LoadError::invalid(
                    pth.file(),
                    format!("model.{}", entry.key),
                    format!(
                        "is {name} once normalised, as model.{} is",
                        pth.entries()[first].key
                    ),
                ));
            }
        }
        if kept.is_empty() {
            return Err(LoadError::invalid(
                pth.file(),
                "model",
                "no model weights in the state dict",
            ));
        }
        Ok(ModelPth { pth, kept, dropped })
    }

    /// (model key, tensor), by model key.
    pub fn tensors(&self) -> impl Iterator<Item = (&str, &PthEntry)> {
        self.kept
            .iter()
            .map(|(name, &i)| (name.as_str(), &self.pth.entries()[i]))
    }

    /// The file's keys that the model does not use, as the file spells them.
    pub fn dropped(&self) -> &[String] {
        &self.dropped
    }

    pub fn read(&self, entry: &PthEntry) -> Result<Vec<u8>, LoadError> {
        self.pth.read(entry)
    }
}

/// One studio voice: its two tensors in the file.
pub struct SpeakerEntries<'a> {
    pub gpt_cond_latent: &'a PthEntry,
    pub speaker_embedding: &'a PthEntry,
}

/// `speakers_xtts.pth`: `{name: {"gpt_cond_latent": [1, 32, D], "speaker_embedding": [1, E, 1]}}`.
pub struct SpeakersPth {
    pth: PthCheckpoint,
    /// Name -> (gpt_cond_latent, speaker_embedding) indices into `pth.entries()`.
    speakers: BTreeMap<String, (usize, usize)>,
}

impl SpeakersPth {
    pub fn open(path: &Path) -> Result<Self, LoadError> {
        Self::from_checkpoint(PthCheckpoint::open(path, None)?)
    }

    pub fn from_checkpoint(pth: PthCheckpoint) -> Result<Self, LoadError> {
        let mut latents = BTreeMap::new();
        let mut embeddings = BTreeMap::new();
        for (i, entry) in pth.entries().iter().enumerate() {
            // Nested dicts come flattened as "name.field"; the field names hold no '.', so the
            // last one splits even names that do.
            let (name, field) = entry.key.rsplit_once('.').unwrap_or(("", &entry.key));
            let (table, rank_3_with, expected) = match field {
                GPT_COND_LATENT => (&mut latents, [Some(1), None, None], "[1, N, D]"),
                SPEAKER_EMBEDDING => (&mut embeddings, [Some(1), None, Some(1)], "[1, E, 1]"),
                _ => {
                    return Err(LoadError::invalid(
                        pth.file(),
                        &entry.key,
                        format!(
                            "expected <speaker>.{GPT_COND_LATENT} or <speaker>.{SPEAKER_EMBEDDING}"
                        ),
                    ))
                }
            };
            let fits = entry.shape.len() == 3
                && entry
                    .shape
                    .iter()
                    .zip(rank_3_with)
                    .all(|(&n, want)| want.is_none_or(|w| w == n));
            if !fits {
                return Err(LoadError::invalid(
                    pth.file(),
                    &entry.key,
                    format!("shape {:?}, expected {expected}", entry.shape),
                ));
            }
            table.insert(name.to_string(), i);
        }
        let mut speakers = BTreeMap::new();
        for (name, latent) in latents {
            let Some(embedding) = embeddings.remove(&name) else {
                return Err(missing(&pth, &name, SPEAKER_EMBEDDING));
            };
            speakers.insert(name, (latent, embedding));
        }
        if let Some(name) = embeddings.keys().next() {
            return Err(missing(&pth, name, GPT_COND_LATENT));
        }
        Ok(SpeakersPth { pth, speakers })
    }

    /// The voices, by name.
    pub fn speakers(&self) -> impl Iterator<Item = (&str, SpeakerEntries<'_>)> {
        let entries = self.pth.entries();
        self.speakers
            .iter()
            .map(move |(name, &(latent, embedding))| {
                (
                    name.as_str(),
                    SpeakerEntries {
                        gpt_cond_latent: &entries[latent],
                        speaker_embedding: &entries[embedding],
                    },
                )
            })
    }

    pub fn len(&self) -> usize {
        self.speakers.len()
    }

    pub fn is_empty(&self) -> bool {
        self.speakers.is_empty()
    }

    pub fn read(&self, entry: &PthEntry) -> Result<Vec<u8>, LoadError> {
        self.pth.read(entry)
    }
}

fn missing(pth: &PthCheckpoint, name: &str, field: &str) -> LoadError {
    LoadError::invalid(pth.file(), format!("{name}.{field}"), "missing tensor")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_normalised_as_the_reference_loader_does() {
        let cases = [
            ("gpt.mel_head.weight", Some("gpt.mel_head.weight")),
            ("xtts.gpt.mel_head.weight", Some("gpt.mel_head.weight")),
            ("dvae.codebook", None),
            ("xtts.dvae.codebook", None),
            ("torch_mel_spectrogram_dvae.mel_stft.window", None),
            ("torch_mel_spectrogram_style_encoder.x", None),
            ("dvaex.weight", Some("dvaex.weight")),
            ("gpt.gpt_inference.transformer.h.0.ln_1.weight", None),
            ("gpt.gpt.wte.weight", None),
            ("gpt.gpt.h.12.attn.bias", None),
            ("gpt.gpt.h.0.attn.masked_bias", None),
            (
                "gpt.gpt.h.0.attn.c_attn.bias",
                Some("gpt.gpt.h.0.attn.c_attn.bias"),
            ),
            (
                "gpt.conditioning_encoder.attn.0.norm.bias",
                Some("gpt.conditioning_encoder.attn.0.norm.bias"),
            ),
            (
                "hifigan_decoder.waveform_decoder.ups.0.weight_g",
                Some("hifigan_decoder.waveform_decoder.ups.0.parametrizations.weight.original0"),
            ),
            (
                "xtts.hifigan_decoder.waveform_decoder.ups.0.weight_v",
                Some("hifigan_decoder.waveform_decoder.ups.0.parametrizations.weight.original1"),
            ),
            (
                "hifigan_decoder.waveform_decoder.ups.1.parametrizations.weight.original1",
                Some("hifigan_decoder.waveform_decoder.ups.1.parametrizations.weight.original1"),
            ),
            ("a.not_weight_g", Some("a.not_weight_g")),
        ];
        for (key, want) in cases {
            assert_eq!(normalize_key(key).as_deref(), want, "{key}");
        }
    }
}
