//! What every handler shares, and how a request's `model` finds its worker.

use super::drain::Drain;
use super::error::ApiError;
use super::voice_store::{VoiceMeta, VoiceStore, VoiceTensors};
use crate::config::ServerConfig;
use crate::engine::stt::TranscriberCard;
use crate::scheduler::transcription::{TranscriberState, TranscriptionQueue};
use crate::scheduler::voice_encoding::{VoiceEncoderState, VoiceEncodingQueue};
use crate::scheduler::{EngineState, JobQueue, LoadedModel};
use axum::http::StatusCode;
use metrics_exporter_prometheus::PrometheusHandle;
use std::sync::Arc;
use tokio::sync::watch;

/// OpenAI's speech model names: a request naming one gets the first (default) model.
pub const OPENAI_MODEL_ALIASES: [&str; 3] = ["tts-1", "tts-1-hd", "gpt-4o-mini-tts"];

/// OpenAI's transcription model names (`whisper-1` is what Open WebUI and most clients send):
/// a request naming one gets the first speech-to-text model.
pub const OPENAI_TRANSCRIPTION_ALIASES: [&str; 3] =
    ["whisper-1", "gpt-4o-transcribe", "gpt-4o-mini-transcribe"];

#[derive(Clone)]
pub struct AppState {
    pub config: Arc<ServerConfig>,
    /// The text-to-speech models, in the order of the settings. The first is the default
    /// model; none on a server that only transcribes.
    pub models: Arc<[ServedModel]>,
    /// The speech-to-text models, in the order of the settings.
    pub transcribers: Arc<[ServedTranscriber]>,
    pub drain: Arc<Drain>,
    pub metrics: PrometheusHandle,
    /// Unix time the server started (the `created` of /v1/models entries).
    pub started_at: u64,
    /// Custom voices, every model's.
    pub voices: Arc<VoiceStore>,
    /// Each speech model's voice-encoding thread, in the order of `models`.
    pub voice_encoders: Arc<[ServedVoiceEncoder]>,
}

/// The thread that computes a speech model's custom voices (`scheduler::voice_encoding`).
#[derive(Clone)]
pub struct ServedVoiceEncoder {
    /// The served model's id.
    pub model_id: String,
    pub queue: VoiceEncodingQueue,
    pub state: watch::Receiver<VoiceEncoderState>,
}

/// One model folder and the inference worker that owns it.
#[derive(Clone)]
pub struct ServedModel {
    pub id: String,
    pub queue: JobQueue,
    pub engine: watch::Receiver<EngineState>,
}

impl ServedModel {
    /// The loaded model, or 503 while it is loading.
    pub fn loaded(&self) -> Result<Arc<LoadedModel>, ApiError> {
        match &*self.engine.borrow() {
            EngineState::Ready(model) => Ok(model.clone()),
            EngineState::Loading => Err(ApiError::model_loading()),
            EngineState::Failed(message) => Err(ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                Some("model_load_failed"),
                format!("The model failed to load: {message}"),
            )),
        }
    }
}

/// A speech-to-text model folder and the worker that owns it.
#[derive(Clone)]
pub struct ServedTranscriber {
    pub id: String,
    pub queue: TranscriptionQueue,
    pub state: watch::Receiver<TranscriberState>,
}

impl ServedTranscriber {
    /// The loaded model's card, or 503 while it is loading.
    pub fn loaded(&self) -> Result<Arc<TranscriberCard>, ApiError> {
        match &*self.state.borrow() {
            TranscriberState::Ready(card) => Ok(card.clone()),
            TranscriberState::Loading => Err(ApiError::model_loading()),
            TranscriberState::Failed(message) => Err(ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                Some("model_load_failed"),
                format!("The model failed to load: {message}"),
            )),
        }
    }
}

impl AppState {
    /// The first model: what Wyoming clients, requests naming OpenAI's models and requests
    /// naming none get; a 404 on a server that only transcribes.
    pub fn default_model(&self) -> Result<&ServedModel, ApiError> {
        self.models.first().ok_or_else(|| {
            let served: Vec<&str> = self.transcribers.iter().map(|m| m.id.as_str()).collect();
            ApiError::no_such_model(format!(
                "This server serves no text-to-speech model, only speech to text ({}): use \
                 /v1/audio/transcriptions.",
                served.join(", ")
            ))
        })
    }

    /// The model a request names: by id, or one of OpenAI's names; 404 for any other.
    pub fn model_named(&self, name: &str) -> Result<&ServedModel, ApiError> {
        if let Some(model) = self.models.iter().find(|m| m.id == name) {
            return Ok(model);
        }
        if OPENAI_MODEL_ALIASES.contains(&name) {
            return self.default_model();
        }
        let transcription_alias =
            !self.transcribers.is_empty() && OPENAI_TRANSCRIPTION_ALIASES.contains(&name);
        if transcription_alias || self.transcribers.iter().any(|m| m.id == name) {
            return Err(ApiError::invalid(
                "model",
                format!("{name} is a speech-to-text model: use /v1/audio/transcriptions"),
            ));
        }
        if self.models.is_empty() {
            return self.default_model();
        }
        let mut served: Vec<&str> = self.models.iter().map(|m| m.id.as_str()).collect();
        served.extend(OPENAI_MODEL_ALIASES);
        Err(ApiError::model_not_found(name, &served))
    }
}

impl AppState {
    /// The speech-to-text model a transcription request names: by id, or one of OpenAI's
    /// transcription names; a speech model is a 400, any other name a 404.
    pub fn transcriber_named(&self, name: &str) -> Result<&ServedTranscriber, ApiError> {
        if let Some(model) = self.transcribers.iter().find(|m| m.id == name) {
            return Ok(model);
        }
        if OPENAI_TRANSCRIPTION_ALIASES.contains(&name) {
            return self.transcribers.first().ok_or_else(|| {
                let served: Vec<&str> = self.models.iter().map(|m| m.id.as_str()).collect();
                ApiError::no_such_model(format!(
                    "This server serves no speech-to-text model, only text to speech ({}).",
                    served.join(", ")
                ))
            });
        }
        if self.models.iter().any(|m| m.id == name) || OPENAI_MODEL_ALIASES.contains(&name) {
            return Err(ApiError::invalid(
                "model",
                format!("{name} is a text-to-speech model: it cannot transcribe"),
            ));
        }
        let mut served: Vec<&str> = self.transcribers.iter().map(|m| m.id.as_str()).collect();
        served.extend(OPENAI_TRANSCRIPTION_ALIASES);
        Err(ApiError::model_not_found(name, &served))
    }
}

impl AppState {
    /// A custom voice for a request to `model_id` (a served model's id): its metadata and
    /// tensors. A 400 naming `voice` when there is no such voice or another model made it.
    /// Reads the voice's file: call it where blocking briefly is fine.
    pub fn custom_voice(
        &self,
        model_id: &str,
        id: &str,
    ) -> Result<(VoiceMeta, VoiceTensors), ApiError> {
        custom_voice_in(&self.voices, model_id, id)
    }

    /// The model that clones from a reference clip sent in `field`, for a request naming
    /// `requested`: that model when it clones, otherwise the first served model that does
    /// (Mistral's clients name their text-to-speech model and send a clip: the clip goes to
    /// the cloning model served beside it).
    pub fn cloning_model(
        &self,
        requested: Option<&str>,
        field: &str,
    ) -> Result<(&ServedModel, Arc<LoadedModel>), ApiError> {
        if let Some(name) = requested {
            let served = self.model_named(name)?;
            let model = served.loaded()?;
            if model.card.cloning {
                return Ok((served, model));
            }
        }
        let mut loading = None;
        for served in self.models.iter() {
            match served.loaded() {
                Ok(model) if model.card.cloning => return Ok((served, model)),
                Ok(_) => {}
                Err(e) => loading = loading.or(Some(e)),
            }
        }
        Err(loading.unwrap_or_else(|| {
            ApiError::invalid(
                field,
                format!(
                    "No model served here clones voices from `{field}`: serve one that does \
                     (capabilities.cloning in /v1/models) beside the others."
                ),
            )
        }))
    }

    /// The voice-encoding thread of the served model `model_id`.
    pub fn voice_encoder(&self, model_id: &str) -> Option<&ServedVoiceEncoder> {
        self.voice_encoders.iter().find(|e| e.model_id == model_id)
    }
}

/// [`AppState::custom_voice`] in `store`.
fn custom_voice_in(
    store: &VoiceStore,
    model_id: &str,
    id: &str,
) -> Result<(VoiceMeta, VoiceTensors), ApiError> {
    let not_found = || {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            Some("voice_not_found"),
            format!("No custom voice '{id}': GET /v1/audio/voices lists them."),
        )
        .with_param("voice")
    };
    let meta = store.get(id).ok_or_else(not_found)?;
    if meta.model != model_id {
        return Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            Some("voice_model_mismatch"),
            format!(
                "The voice '{id}' was made by the model '{}'; upload its clip again with \
                 model '{model_id}' to use it here.",
                meta.model
            ),
        )
        .with_param("voice"));
    }
    match store.tensors(id) {
        Ok(tensors) => Ok((meta, tensors)),
        // Deleted since it was looked up.
        Err(_) if store.get(id).is_none() => Err(not_found()),
        Err(e) => Err(ApiError::internal(e.to_string())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::voice::TensorData;

    #[test]
    fn a_custom_voice_is_found_only_for_its_model() {
        let dir = tempfile::tempdir().unwrap();
        let store = VoiceStore::open(dir.path(), 10).unwrap();
        let mut tensors = VoiceTensors::default();
        tensors.insert("x_vector", vec![2], TensorData::F32(vec![1.0, 2.0]));
        let meta = VoiceMeta {
            id: String::new(),
            name: "alice".into(),
            created_at: 0,
            model: "base".into(),
            family: "qwen3-tts".into(),
            transcript: None,
            language: None,
            audio_seconds: 2.0,
            source_sha256: "sha".into(),
            profile: Default::default(),
        };
        let made = store.create(meta, &tensors).unwrap();
        let (found, read) = custom_voice_in(&store, "base", &made.id).unwrap();
        assert_eq!((found, read), (made.clone(), tensors));
        let error = |model: &str, id: &str| {
            let e = custom_voice_in(&store, model, id).unwrap_err();
            (e.status, e.param, e.code)
        };
        let bad = StatusCode::BAD_REQUEST;
        assert_eq!(
            error("other", &made.id),
            (bad, Some("voice".into()), Some("voice_model_mismatch"))
        );
        assert_eq!(
            error("base", "voice_00"),
            (bad, Some("voice".into()), Some("voice_not_found"))
        );
        store.delete(&made.id).unwrap();
        assert_eq!(error("base", &made.id).2, Some("voice_not_found"));
    }
}
