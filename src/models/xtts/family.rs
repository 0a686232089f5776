//! XTTS-v2 in the registry (`crate::models::registry`).

use super::voice_encoder::XttsVoiceEncoder;
use super::XttsEngine;
use crate::engine::voice::VoiceEncoder;
use crate::engine::{EngineOptions, WithEngine};
use crate::models::registry::{Bench, FamilySpec, FolderConfig, ModelFamily, Task};
use crate::nn::LoadError;
use crate::tensor::{DType, Tensor};
use serde_json::Value;
use std::path::Path;

/// The family's name on cards.
pub const NAME: &str = "xtts-v2";

pub struct XttsFamily;

fn detect(config: &Value) -> bool {
    config["model"] == "xtts"
}

impl ModelFamily for XttsFamily {
    const SPEC: FamilySpec = FamilySpec {
        name: NAME,
        task: Task::Speak,
        config_file: "config.json",
        detect,
        layout: "XTTS-v2: config.json with model xtts, vocab.json, and the model.safetensors \
                 that `voxtral-tts convert` writes from model.pth",
        published_name: Some("coqui/XTTS-v2"),
        openai_voices: &super::catalog::OPENAI_VOICES,
        bench: Bench::Engine {
            weight_bytes_per_frame: None,
        },
        #[cfg(feature = "testkit")]
        testkit: crate::testkit::FamilyKit {
            models: super::testkit::TEST_MODELS,
            sources: &[
                include_str!("testkit/mod.rs"),
                include_str!("testkit/vocoder.rs"),
                include_str!("keys.rs"),
                include_str!("gpt.rs"),
                include_str!("conditioning.rs"),
                include_str!("cloning_mel.rs"),
            ],
        },
    };

    fn load_tts<T: Tensor, W: WithEngine>(
        folder: &FolderConfig,
        device: &T::Device,
        dtype: DType,
        options: EngineOptions,
        with: W,
    ) -> Result<W::Output, LoadError> {
        let engine = XttsEngine::<T>::load(&folder.dir, device, dtype, &options)?;
        Ok(with.run(engine))
    }

    /// `None` for a checkpoint without its speaker encoder.
    fn load_voice_encoder<'a, T: Tensor + 'a>(
        dir: &Path,
        device: &T::Device,
        dtype: DType,
    ) -> Result<Option<Box<dyn VoiceEncoder + 'a>>, LoadError> {
        let encoder = XttsVoiceEncoder::<T>::load(dir, device, dtype)?;
        Ok(encoder.map(|e| Box::new(e) as Box<dyn VoiceEncoder + 'a>))
    }
}
