//! The model families this server knows. Each family's folder exports one [`ModelFamily`]
//! (its `family.rs`), and [`each_family`] lists them: everything outside a family's folder
//! reaches it through here, which family a folder holds ([`detect`]), its published name,
//! its loaders ([`load_tts`], [`load_stt`], [`load_voice_encoder`]), how `bench` times it,
//! and its random test checkpoints (feature `testkit`).
//!
//! Adding a family: its folder under `crate::models` with a `family.rs` implementing
//! [`ModelFamily`], and one line in [`each_family`] (docs/architecture.md).

use super::{qwen3_tts, voxtral_realtime, voxtral_tts, xtts};
use crate::bench::BenchArgs;
use crate::engine::stt::{TranscriberOptions, WithTranscriber};
use crate::engine::voice::VoiceEncoder;
use crate::engine::{EngineOptions, WithEngine};
use crate::nn::quantized_keys::Quantized;
use crate::nn::LoadError;
use crate::tensor::{DType, Tensor};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::sync::LazyLock;

/// Every family, in the order a folder's configuration file is matched against them. Adding
/// a family: its folder and one line here.
fn each_family(visitor: &mut impl FamilyVisitor) {
    visitor.visit::<voxtral_tts::family::VoxtralTtsFamily>();
    visitor.visit::<voxtral_realtime::family::VoxtralRealtimeFamily>();
    visitor.visit::<qwen3_tts::family::Qwen3TtsFamily>();
    visitor.visit::<xtts::family::XttsFamily>();
}

/// What a family does with text and audio.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Task {
    /// Text to speech: a `TextToSpeech` engine on a speech worker.
    Speak,
    /// Speech to text: a `SpeechToText` engine on a transcription worker.
    Transcribe,
}

/// What a family tells about itself, without loading anything.
#[derive(Clone, Copy)]
pub struct FamilySpec {
    /// Its name on cards and in `/v1/models`, e.g. `voxtral-tts`.
    pub name: &'static str,
    pub task: Task,
    /// The configuration file its folders are recognized by (`params.json`, `config.json`).
    pub config_file: &'static str,
    /// Whether that file's JSON is this family's.
    pub detect: fn(&Value) -> bool,
    /// Its folder's files, as the error for a folder of no known family lists them.
    pub layout: &'static str,
    /// The published model's name, which a folder of this family is served under when the
    /// settings give it no `model_id`; `None` for a family published in several variants,
    /// whose folder name says which.
    pub published_name: Option<&'static str>,
    /// OpenAI's voice names and the preset each selects, for a family that maps them (its
    /// cards' `voice_aliases`; a folder without that preset selects nothing).
    pub openai_voices: &'static [(&'static str, &'static str)],
    /// How `voxtral-tts bench` times its folders.
    pub bench: Bench,
    /// Its random test checkpoints.
    #[cfg(feature = "testkit")]
    pub testkit: crate::testkit::FamilyKit,
}

/// The weight bytes one frame of a folder reads computing in a dtype, with the weights the
/// loaders quantized (`None`: the folder's files do not say).
pub type WeightBytes = fn(&Path, DType, &[Quantized]) -> anyhow::Result<Option<f64>>;

/// How `voxtral-tts bench` times a family's folder.
#[derive(Clone, Copy)]
pub enum Bench {
    /// Through the engine interface, as the server's worker drives it, with the family's
    /// count of the weight bytes one frame reads where it has one (the floor of a frame).
    Engine {
        weight_bytes_per_frame: Option<WeightBytes>,
    },
    /// The family's own bench.
    Own(fn(&BenchArgs, &Path) -> anyhow::Result<()>),
}

/// What each family's folder exports: its spec, and its loaders, generic over the tensor
/// backend. A loader a family lacks refuses its folders.
pub trait ModelFamily {
    const SPEC: FamilySpec;

    /// Loads a speaking folder on `device` and hands the engine to `with`.
    fn load_tts<T: Tensor, W: WithEngine>(
        folder: &FolderConfig,
        _device: &T::Device,
        _dtype: DType,
        _options: EngineOptions,
        _with: W,
    ) -> Result<W::Output, LoadError> {
        Err(folder.refused("it transcribes, it does not speak"))
    }

    /// Loads a transcribing folder on `device` and hands the engine to `with`.
    fn load_stt<T: Tensor, W: WithTranscriber>(
        folder: &FolderConfig,
        _device: &T::Device,
        _dtype: DType,
        _options: TranscriberOptions,
        _with: W,
    ) -> Result<W::Output, LoadError> {
        Err(folder.refused("it speaks, it does not transcribe"))
    }

    /// The voice encoder of a cloning folder, loaded on `device`; `None` for a folder that
    /// does not clone.
    fn load_voice_encoder<'a, T: Tensor + 'a>(
        _dir: &Path,
        _device: &T::Device,
        _dtype: DType,
    ) -> Result<Option<Box<dyn VoiceEncoder + 'a>>, LoadError> {
        Ok(None)
    }
}

/// Every family's spec, in [`each_family`]'s order.
pub fn families() -> &'static [FamilySpec] {
    static FAMILIES: LazyLock<Vec<FamilySpec>> = LazyLock::new(|| {
        struct Specs(Vec<FamilySpec>);
        impl FamilyVisitor for Specs {
            fn visit<F: ModelFamily>(&mut self) {
                self.0.push(F::SPEC);
            }
        }
        let mut specs = Specs(Vec::new());
        each_family(&mut specs);
        specs.0
    });
    &FAMILIES
}

/// A model folder's configuration file and the family it names, read once (the folder may be
/// on slow storage, or the file a pipe).
pub struct FolderConfig {
    pub family: &'static FamilySpec,
    pub dir: PathBuf,
    /// The file's path, as errors name it.
    pub file: String,
    /// The file's text.
    pub text: String,
}

impl FolderConfig {
    /// The first configuration file of the families' that `dir` holds decides: a folder whose
    /// file no family recognizes, or with none, gets an error that says so.
    pub fn read(dir: &Path) -> Result<FolderConfig, LoadError> {
        let mut files: Vec<&str> = Vec::new();
        for family in families() {
            if !files.contains(&family.config_file) {
                files.push(family.config_file);
            }
        }
        for name in &files {
            let path = dir.join(name);
            if !path.exists() {
                continue;
            }
            let (text, json) = read_json(&path)?;
            let file = path.display().to_string();
            let family = families()
                .iter()
                .find(|f| f.config_file == *name && (f.detect)(&json));
            return match family {
                Some(family) => Ok(FolderConfig {
                    family,
                    dir: dir.to_path_buf(),
                    file,
                    text,
                }),
                None => Err(no_known_family(dir, file)),
            };
        }
        let first = dir.join(files.first().copied().unwrap_or_default());
        Err(no_known_family(dir, first.display().to_string()))
    }

    /// The error of a loader this folder's family lacks.
    fn refused(&self, why: &str) -> LoadError {
        LoadError::invalid(
            &self.file,
            "(family)",
            format!("this is a {} model folder: {why}", self.family.name),
        )
    }
}

fn no_known_family(dir: &Path, file: String) -> LoadError {
    let layouts: Vec<&str> = families().iter().map(|f| f.layout).collect();
    LoadError::invalid(
        file,
        "(family)",
        format!(
            "missing: {} holds no model of a known family ({})",
            dir.display(),
            layouts.join("; ")
        ),
    )
}

fn read_json(path: &Path) -> Result<(String, Value), LoadError> {
    let text = std::fs::read_to_string(path).map_err(|e| LoadError::io(path, e))?;
    let json = crate::nn::config_json::parse(&text)
        .map_err(|e| LoadError::invalid(path.display().to_string(), "(json)", e.to_string()))?;
    Ok((text, json))
}

/// The family of the model folder `dir`, or why it has none this server knows.
pub fn detect(dir: &Path) -> Result<&'static FamilySpec, LoadError> {
    FolderConfig::read(dir).map(|folder| folder.family)
}

/// Loads the speaking folder `dir` on `device` with `options` and hands the engine to `with`.
pub fn load_tts<T: Tensor, W: WithEngine>(
    dir: &Path,
    device: &T::Device,
    dtype: DType,
    options: EngineOptions,
    with: W,
) -> Result<W::Output, LoadError> {
    struct Load<'a, T: Tensor, W> {
        folder: &'a FolderConfig,
        device: &'a T::Device,
        dtype: DType,
        options: EngineOptions,
        with: W,
    }
    impl<T: Tensor, W: WithEngine> OnFamily for Load<'_, T, W> {
        type Output = Result<W::Output, LoadError>;
        fn run<F: ModelFamily>(self) -> Self::Output {
            F::load_tts::<T, W>(
                self.folder,
                self.device,
                self.dtype,
                self.options,
                self.with,
            )
        }
    }
    let folder = FolderConfig::read(dir)?;
    let load = Load::<T, W> {
        folder: &folder,
        device,
        dtype,
        options,
        with,
    };
    on_family(folder.family, load)
}

/// Loads the transcribing folder `dir` on `device` with `options` and hands the engine to
/// `with`.
pub fn load_stt<T: Tensor, W: WithTranscriber>(
    dir: &Path,
    device: &T::Device,
    dtype: DType,
    options: TranscriberOptions,
    with: W,
) -> Result<W::Output, LoadError> {
    struct Load<'a, T: Tensor, W> {
        folder: &'a FolderConfig,
        device: &'a T::Device,
        dtype: DType,
        options: TranscriberOptions,
        with: W,
    }
    impl<T: Tensor, W: WithTranscriber> OnFamily for Load<'_, T, W> {
        type Output = Result<W::Output, LoadError>;
        fn run<F: ModelFamily>(self) -> Self::Output {
            F::load_stt::<T, W>(
                self.folder,
                self.device,
                self.dtype,
                self.options,
                self.with,
            )
        }
    }
    let folder = FolderConfig::read(dir)?;
    let load = Load::<T, W> {
        folder: &folder,
        device,
        dtype,
        options,
        with,
    };
    on_family(folder.family, load)
}

/// The voice encoder of a cloning model folder (`Ok(None)` for families and variants that do
/// not clone), loaded on `device`; it runs on the thread that loads it
/// (`scheduler::voice_encoding`).
pub fn load_voice_encoder<'a, T: Tensor + 'a>(
    dir: &Path,
    device: &T::Device,
    dtype: DType,
) -> Result<Option<Box<dyn VoiceEncoder + 'a>>, LoadError> {
    struct Load<'d, 'a, T: Tensor> {
        dir: &'d Path,
        device: &'d T::Device,
        dtype: DType,
        encoder: std::marker::PhantomData<&'a ()>,
    }
    impl<'a, T: Tensor + 'a> OnFamily for Load<'_, 'a, T> {
        type Output = Result<Option<Box<dyn VoiceEncoder + 'a>>, LoadError>;
        fn run<F: ModelFamily>(self) -> Self::Output {
            F::load_voice_encoder::<T>(self.dir, self.device, self.dtype)
        }
    }
    let family = detect(dir)?;
    let load = Load::<T> {
        dir,
        device,
        dtype,
        encoder: std::marker::PhantomData,
    };
    on_family(family, load)
}

/// Sees every family's type, in [`each_family`]'s order.
trait FamilyVisitor {
    fn visit<F: ModelFamily>(&mut self);
}

/// Work generic over the family, run on one of them by [`on_family`].
trait OnFamily {
    type Output;
    fn run<F: ModelFamily>(self) -> Self::Output;
}

/// Runs `job` on the family of `spec` (one of [`families`]).
fn on_family<J: OnFamily>(spec: &FamilySpec, job: J) -> J::Output {
    struct Find<J: OnFamily> {
        name: &'static str,
        job: Option<J>,
        output: Option<J::Output>,
    }
    impl<J: OnFamily> FamilyVisitor for Find<J> {
        fn visit<F: ModelFamily>(&mut self) {
            if F::SPEC.name == self.name {
                if let Some(job) = self.job.take() {
                    self.output = Some(job.run::<F>());
                }
            }
        }
    }
    let mut find = Find {
        name: spec.name,
        job: Some(job),
        output: None,
    };
    each_family(&mut find);
    find.output.expect("every family of `families` is visited")
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

    fn family(dir: &Path) -> Result<&'static str, LoadError> {
        detect(dir).map(|f| f.name)
    }

    fn error(files: &[(&str, &str)]) -> String {
        family(folder(files).path()).unwrap_err().to_string()
    }

    #[test]
    fn detects_each_family_or_says_why_not() {
        let tts = folder(&[("params.json", r#"{"multimodal": {"audio_model_args": {}}}"#)]);
        assert_eq!(family(tts.path()).unwrap(), "voxtral-tts");
        let stt = folder(&[(
            "params.json",
            r#"{"multimodal": {"whisper_model_args": {}}}"#,
        )]);
        assert_eq!(family(stt.path()).unwrap(), "voxtral-realtime");
        let qwen = folder(&[("config.json", r#"{"model_type": "qwen3_tts"}"#)]);
        assert_eq!(family(qwen.path()).unwrap(), "qwen3-tts");
        let xtts = folder(&[("config.json", r#"{"model": "xtts"}"#)]);
        assert_eq!(family(xtts.path()).unwrap(), "xtts-v2");
        let other = error(&[("config.json", r#"{"model_type": "bert"}"#)]);
        assert!(other.contains("no model of a known family"), "{other}");
        assert!(error(&[]).contains("params.json"));
        let broken = error(&[("params.json", "{")]);
        assert!(broken.contains("(json)"), "{broken}");
    }

    #[test]
    fn every_family_has_its_own_name() {
        let names: Vec<&str> = families().iter().map(|f| f.name).collect();
        let mut unique = names.clone();
        unique.sort();
        unique.dedup();
        assert_eq!(unique.len(), names.len(), "{names:?}");
    }
}
