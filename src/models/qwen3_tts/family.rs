//! Qwen3-TTS in the registry (`crate::models::registry`).

use super::bench::weight_bytes_per_frame;
use super::voice_encoder::Qwen3VoiceEncoder;
use super::Qwen3Engine;
use crate::engine::voice::VoiceEncoder;
use crate::engine::{EngineOptions, WithEngine};
use crate::models::registry::{Bench, FamilySpec, FolderConfig, ModelFamily, Task};
use crate::nn::LoadError;
use crate::tensor::{DType, Tensor};
use serde_json::Value;
use std::path::Path;

/// The family's name on cards.
pub const NAME: &str = "qwen3-tts";

pub struct Qwen3TtsFamily;

fn detect(config: &Value) -> bool {
    config["model_type"] == "qwen3_tts"
}

impl ModelFamily for Qwen3TtsFamily {
    const SPEC: FamilySpec = FamilySpec {
        name: NAME,
        task: Task::Speak,
        config_file: "config.json",
        detect,
        layout: "Qwen3-TTS: config.json with model_type qwen3_tts, model.safetensors, \
                 vocab.json, merges.txt, speech_tokenizer/",
        // Published in several variants: the folder's name says which.
        published_name: None,
        // The CustomVoice speakers.
        openai_voices: &super::catalog::OPENAI_VOICES,
        bench: Bench::Engine {
            weight_bytes_per_frame: Some(weight_bytes_per_frame),
        },
        #[cfg(feature = "testkit")]
        testkit: crate::testkit::FamilyKit {
            models: super::testkit::TEST_MODELS,
            sources: &[
                include_str!("testkit.rs"),
                include_str!("keys.rs"),
                include_str!("codec_transformer.rs"),
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
        let engine = Qwen3Engine::<T>::load(&folder.dir, device, dtype, &options)?;
        Ok(with.run(engine))
    }

    /// Base folders clone; CustomVoice and VoiceDesign do not.
    fn load_voice_encoder<'a, T: Tensor + 'a>(
        dir: &Path,
        device: &T::Device,
        dtype: DType,
    ) -> Result<Option<Box<dyn VoiceEncoder + 'a>>, LoadError> {
        let encoder = Qwen3VoiceEncoder::<T>::load(dir, device, dtype)?;
        Ok(encoder.map(|e| Box::new(e) as Box<dyn VoiceEncoder + 'a>))
    }
}
