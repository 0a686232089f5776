//! One folder per model family, each loading its published folder and implementing the
//! engine interface (`crate::engine`); [`detect_family`] tells which family a folder holds from
//! its configuration file, [`load_tts`] loads the speaking ones.
//!
//! Adding a family: a folder here with its config structs, its model written against
//! `crate::tensor::Tensor` from the layers in `crate::nn`, a `TextToSpeech` (and
//! `SpeechPreparer`) implementation, and a line in [`Family`] and [`load_tts`].

pub mod quantize;
pub mod qwen3_tts;
pub mod voxtral_realtime;
pub mod voxtral_tts;
pub mod xtts;

use crate::engine::voice::VoiceEncoder;
use crate::engine::stt::{TranscriberOptions, WithTranscriber};
use crate::engine::{EngineOptions, WithEngine};
use crate::nn::LoadError;
use crate::tensor::{DType, Tensor};
use qwen3_tts::voice_encoder::Qwen3VoiceEncoder;
use serde_json::Value;
use std::path::Path;
use voxtral_tts::params::Config;
use voxtral_tts::Voxtral;
use xtts::voice_encoder::XttsVoiceEncoder;

/// The model families this server can load.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Family {
    /// Mistral's Voxtral-4B-TTS: params.json, consolidated.safetensors, tekken.json,
    /// voice_embedding/.
    VoxtralTts,
    /// Mistral's Voxtral-Mini-4B-Realtime (speech to text): params.json with
    /// `multimodal.whisper_model_args`, consolidated.safetensors, tekken.json with an `audio`
    /// section. Transcribes (`voxtral_realtime::transcriber`).
    VoxtralRealtime,
    /// Qwen3-TTS-12Hz (0.6B, 1.7B; Base, CustomVoice, VoiceDesign): config.json with
    /// `model_type: qwen3_tts`, model.safetensors, vocab.json + merges.txt,
    /// speech_tokenizer/.
    Qwen3Tts,
    /// Coqui's XTTS-v2: config.json with `model: xtts`, vocab.json, and the safetensors that
    /// `voxtral-tts convert` writes from model.pth (and speakers_xtts.pth).
    Xtts,
}

/// A model folder's configuration file and the family it names, read once (the folder may be
/// on slow storage, or the file a pipe).
struct FolderConfig {
    family: Family,
    /// The file's text.
    text: String,
    file: String,
}

impl FolderConfig {
    /// Folders of no known family get an error that says so.
    fn read(dir: &Path) -> Result<FolderConfig, LoadError> {
        let params = dir.join("params.json");
        let config = dir.join("config.json");
        if params.exists() {
            let (text, json) = read_json(&params)?;
            let multimodal = &json["multimodal"];
            if multimodal.get("audio_model_args").is_some() {
                return Ok(FolderConfig {
                    family: Family::VoxtralTts,
                    text,
                    file: params.display().to_string(),
                });
            }
            if multimodal.get("whisper_model_args").is_some() {
                return Ok(FolderConfig {
                    family: Family::VoxtralRealtime,
                    text,
                    file: params.display().to_string(),
                });
            }
            return Err(LoadError::invalid(
                params.display().to_string(),
                "multimodal.audio_model_args",
                "missing: not a Voxtral TTS params.json",
            ));
        }
        if config.exists() {
            let (text, json) = read_json(&config)?;
            if json["model_type"] == "qwen3_tts" {
                return Ok(FolderConfig {
                    family: Family::Qwen3Tts,
                    text,
                    file: config.display().to_string(),
                });
            }
            if json["model"] == "xtts" {
                return Ok(FolderConfig {
                    family: Family::Xtts,
                    text,
                    file: config.display().to_string(),
                });
            }
        }
        Err(LoadError::invalid(
            params.display().to_string(),
            "(family)",
            format!(
                "missing: {} holds no model of a known family (Voxtral TTS: params.json, \
                 consolidated.safetensors, tekken.json, voice_embedding/)",
                dir.display()
            ),
        ))
    }
}

fn read_json(path: &Path) -> Result<(String, Value), LoadError> {
    let text = std::fs::read_to_string(path).map_err(|e| LoadError::io(path, e))?;
    let json = crate::nn::config_json::parse(&text)
        .map_err(|e| LoadError::invalid(path.display().to_string(), "(json)", e.to_string()))?;
    Ok((text, json))
}

/// The family of the model folder `dir`, or why it has none this server knows.
pub fn detect_family(dir: &Path) -> Result<Family, LoadError> {
    FolderConfig::read(dir).map(|folder| folder.family)
}

impl Family {
    /// The published model's name, which a folder of this family is served under when the
    /// settings give it no `model_id`; `None` for a family published in several variants
    /// (Qwen3-TTS), whose folder name says which.
    pub fn published_name(self) -> Option<&'static str> {
        match self {
            Family::VoxtralTts => Some("mistralai/Voxtral-4B-TTS-2603"),
            Family::VoxtralRealtime => Some("mistralai/Voxtral-Mini-4B-Realtime-2602"),
            Family::Xtts => Some("coqui/XTTS-v2"),
            Family::Qwen3Tts => None,
        }
    }
}

/// Detects the family of `dir`, loads it on `device` with `options` and hands the engine to
/// `with`. A speech-to-text folder is refused: it does not speak.
pub fn load_tts<T: Tensor, W: WithEngine>(
    dir: &Path,
    device: &T::Device,
    dtype: DType,
    options: EngineOptions,
    with: W,
) -> Result<W::Output, LoadError> {
    let folder = FolderConfig::read(dir)?;
    match folder.family {
        Family::VoxtralTts => {
            let config = Config::from_json(&folder.text, &folder.file)?;
            let voxtral = Voxtral::<T>::load_with(dir, config, device, dtype, &options)?;
            Ok(with.run(voxtral))
        }
        Family::Qwen3Tts => {
            let engine = qwen3_tts::Qwen3Engine::<T>::load(dir, device, dtype, &options)?;
            Ok(with.run(engine))
        }
        Family::Xtts => {
            let engine = xtts::XttsEngine::<T>::load(dir, device, dtype, &options)?;
            Ok(with.run(engine))
        }
        Family::VoxtralRealtime => Err(LoadError::invalid(
            folder.file,
            "(family)",
            "this is a Voxtral Realtime (speech-to-text) model folder: it transcribes \
             (`voxtral-tts transcribe`), it does not speak; the server does not serve it yet",
        )),
    }
}

/// Loads the speech-to-text folder `dir` on `device` with `options` and hands the engine to
/// `with`. A speaking folder is refused: it does not transcribe.
pub fn load_stt<T: Tensor, W: WithTranscriber>(
    dir: &Path,
    device: &T::Device,
    dtype: DType,
    options: TranscriberOptions,
    with: W,
) -> Result<W::Output, LoadError> {
    let folder = FolderConfig::read(dir)?;
    match folder.family {
        Family::VoxtralRealtime => {
            let engine =
                voxtral_realtime::engine::RealtimeEngine::<T>::load(dir, device, dtype, &options)?;
            Ok(with.run(engine))
        }
        Family::VoxtralTts | Family::Qwen3Tts | Family::Xtts => Err(LoadError::invalid(
            folder.file,
            "(family)",
            "this is a text-to-speech model folder: it does not transcribe",
        )),
    }
}

/// The voice encoder of a cloning model folder (`Ok(None)` for families and variants that do
/// not clone: Voxtral, Qwen3-TTS CustomVoice and VoiceDesign, an XTTS-v2 checkpoint without
/// its speaker encoder), loaded on `device`; it runs on
/// the thread that loads it (`scheduler::voice_encoding`).
pub fn load_voice_encoder<'a, T: Tensor + 'a>(
    dir: &Path,
    device: &T::Device,
    dtype: DType,
) -> Result<Option<Box<dyn VoiceEncoder + 'a>>, LoadError> {
    match detect_family(dir)? {
        Family::Qwen3Tts => {
            let encoder = Qwen3VoiceEncoder::<T>::load(dir, device, dtype)?;
            Ok(encoder.map(|e| Box::new(e) as Box<dyn VoiceEncoder + 'a>))
        }
        Family::Xtts => {
            let encoder = XttsVoiceEncoder::<T>::load(dir, device, dtype)?;
            Ok(encoder.map(|e| Box::new(e) as Box<dyn VoiceEncoder + 'a>))
        }
        Family::VoxtralTts | Family::VoxtralRealtime => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn folder(files: &[(&str, &str)]) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for (name, text) in files {
            std::fs::write(dir.path().join(name), text).unwrap();
        }
        dir
    }

    fn family(dir: &Path) -> Result<Family, LoadError> {
        detect_family(dir)
    }

    fn error(files: &[(&str, &str)]) -> String {
        family(folder(files).path()).unwrap_err().to_string()
    }

    #[test]
    fn detects_each_family_or_says_why_not() {
        let tts = folder(&[("params.json", r#"{"multimodal": {"audio_model_args": {}}}"#)]);
        assert_eq!(family(tts.path()).unwrap(), Family::VoxtralTts);
        let stt = folder(&[(
            "params.json",
            r#"{"multimodal": {"whisper_model_args": {}}}"#,
        )]);
        assert_eq!(family(stt.path()).unwrap(), Family::VoxtralRealtime);
        let qwen = folder(&[("config.json", r#"{"model_type": "qwen3_tts"}"#)]);
        assert_eq!(family(qwen.path()).unwrap(), Family::Qwen3Tts);
        let xtts = folder(&[("config.json", r#"{"model": "xtts"}"#)]);
        assert_eq!(family(xtts.path()).unwrap(), Family::Xtts);
        let other = error(&[("config.json", r#"{"model_type": "bert"}"#)]);
        assert!(other.contains("no model of a known family"), "{other}");
        assert!(error(&[]).contains("params.json"));
        let broken = error(&[("params.json", "{")]);
        assert!(broken.contains("(json)"), "{broken}");
    }
}
