//! Voxtral TTS in the registry (`crate::models::registry`).

use super::params::Config;
use super::{bench, Voxtral};
use crate::engine::{EngineOptions, WithEngine};
use crate::models::registry::{Bench, FamilySpec, FolderConfig, ModelFamily, Task};
use crate::nn::LoadError;
use crate::tensor::{DType, Tensor};
use serde_json::Value;

/// The family's name on cards.
pub const NAME: &str = "voxtral-tts";

pub struct VoxtralTtsFamily;

fn detect(params: &Value) -> bool {
    params["multimodal"].get("audio_model_args").is_some()
}

impl ModelFamily for VoxtralTtsFamily {
    const SPEC: FamilySpec = FamilySpec {
        name: NAME,
        task: Task::Speak,
        config_file: "params.json",
        detect,
        layout: "Voxtral TTS: params.json with multimodal.audio_model_args, \
                 consolidated.safetensors, tekken.json, voice_embedding/",
        published_name: Some("mistralai/Voxtral-4B-TTS-2603"),
        openai_voices: &super::catalog::OPENAI_VOICES,
        bench: Bench::Own(bench::run),
        #[cfg(feature = "testkit")]
        testkit: crate::testkit::FamilyKit {
            models: super::testkit::TEST_MODELS,
            sources: &[
                include_str!("testkit.rs"),
                include_str!("keys.rs"),
                include_str!("codec.rs"),
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
        let config = Config::from_json(&folder.text, &folder.file)?;
        let voxtral = Voxtral::<T>::load_with(&folder.dir, config, device, dtype, &options)?;
        Ok(with.run(voxtral))
    }
}
