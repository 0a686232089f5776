//! Voxtral Realtime in the registry (`crate::models::registry`).

use super::bench;
use super::engine::RealtimeEngine;
use crate::engine::stt::{TranscriberOptions, WithTranscriber};
use crate::models::registry::{Bench, FamilySpec, FolderConfig, ModelFamily, Task};
use crate::nn::LoadError;
use crate::tensor::{DType, Tensor};
use serde_json::Value;

/// The family's name on cards.
pub const NAME: &str = "voxtral-realtime";

pub struct VoxtralRealtimeFamily;

fn detect(params: &Value) -> bool {
    params["multimodal"].get("whisper_model_args").is_some()
}

impl ModelFamily for VoxtralRealtimeFamily {
    const SPEC: FamilySpec = FamilySpec {
        name: NAME,
        task: Task::Transcribe,
        config_file: "params.json",
        detect,
        layout: "Voxtral Realtime: params.json with multimodal.whisper_model_args, \
                 consolidated.safetensors, tekken.json",
        published_name: Some("mistralai/Voxtral-Mini-4B-Realtime-2602"),
        openai_voices: &[],
        bench: Bench::Own(bench::run),
        #[cfg(feature = "testkit")]
        testkit: crate::testkit::FamilyKit {
            models: super::testkit::TEST_MODELS,
            sources: &[include_str!("testkit.rs"), include_str!("keys.rs")],
        },
    };

    fn load_stt<T: Tensor, W: WithTranscriber>(
        folder: &FolderConfig,
        device: &T::Device,
        dtype: DType,
        options: TranscriberOptions,
        with: W,
    ) -> Result<W::Output, LoadError> {
        let engine = RealtimeEngine::<T>::load(&folder.dir, device, dtype, &options)?;
        Ok(with.run(engine))
    }
}
