//! `GET /v1/models`: each served model under its own id, and OpenAI's speech model names;
//! `GET /v1/audio/models`: the same ids in the shape Open WebUI reads.

use crate::server::state::{AppState, OPENAI_MODEL_ALIASES, OPENAI_TRANSCRIPTION_ALIASES};
use axum::extract::State;
use axum::Json;
use serde::Serialize;
use utoipa::ToSchema;

#[derive(Serialize, ToSchema)]
pub struct ModelList {
    /// Always `list`.
    object: &'static str,
    data: Vec<Model>,
}

#[derive(Serialize, ToSchema)]
pub struct Model {
    id: String,
    /// Always `model`.
    object: &'static str,
    /// Unix time the server started.
    created: u64,
    owned_by: &'static str,
    /// Extension: the model family, e.g. `voxtral-tts` (absent while loading).
    #[serde(skip_serializing_if = "Option::is_none")]
    family: Option<&'static str>,
    /// Extension: how its large linear weights are multiplied: `q8`, `q4` (quantized),
    /// `bf16` or `f32` (absent while loading).
    #[serde(skip_serializing_if = "Option::is_none")]
    weights: Option<String>,
    /// Extension: what the model can do (absent while loading).
    #[serde(skip_serializing_if = "Option::is_none")]
    capabilities: Option<Capabilities>,
    /// Extension: other names requests may use for it (OpenAI's, for the default model).
    aliases: Vec<&'static str>,
    /// Extension: for an alias entry, the id of the model it stands for.
    #[serde(skip_serializing_if = "Option::is_none")]
    parent: Option<String>,
}

#[derive(Serialize, ToSchema)]
pub struct Capabilities {
    /// Endpoints it serves, e.g. `/v1/audio/speech`.
    endpoints: Vec<&'static str>,
    /// Preset voice names.
    voices: Vec<String>,
    /// A voice can be cloned from a reference clip.
    cloning: bool,
    /// Free-text instructions steer the style.
    instructions: bool,
    /// `instructions` describe the whole voice (there are no presets; `voice` is ignored).
    voice_design: bool,
    /// BCP 47 codes.
    languages: Vec<String>,
    /// A speech request's `language` is read (`false`: accepted and ignored).
    language_input: bool,
    /// Of the PCM it produces (before any encoding); for speech to text, of the audio it reads.
    sample_rate: u32,
    /// Samples per generated frame: the unit of `max_frames` and of usage's output tokens
    /// (speech to text: the audio per decoded token).
    samples_per_frame: usize,
}

/// Each served model, then OpenAI's names for the default (first) one.
fn models(app: &AppState) -> Vec<Model> {
    let mut list: Vec<Model> = app
        .models
        .iter()
        .enumerate()
        .map(|(i, served)| {
            let loaded = served.loaded().ok();
            Model {
                id: served.id.clone(),
                object: "model",
                created: app.started_at,
                owned_by: loaded.as_ref().map_or("unknown", |m| m.card.owned_by),
                family: loaded.as_ref().map(|m| m.card.family),
                weights: loaded.as_ref().map(|m| m.card.weights.clone()),
                capabilities: loaded.map(|m| Capabilities {
                    endpoints: vec!["/v1/audio/speech"],
                    voices: m.card.voices.iter().map(|v| v.name.clone()).collect(),
                    cloning: m.card.cloning,
                    instructions: m.card.instructions,
                    voice_design: m.card.voice_design,
                    languages: m.card.languages.clone(),
                    language_input: m.card.language_input,
                    sample_rate: m.card.sample_rate,
                    samples_per_frame: m.card.samples_per_frame,
                }),
                aliases: if i == 0 {
                    OPENAI_MODEL_ALIASES.to_vec()
                } else {
                    Vec::new()
                },
                parent: None,
            }
        })
        .collect();
    list.extend(app.transcribers.iter().enumerate().map(|(i, served)| {
        let card = served.loaded().ok();
        Model {
            id: served.id.clone(),
            object: "model",
            created: app.started_at,
            owned_by: if card.is_some() {
                "mistralai"
            } else {
                "unknown"
            },
            family: card.as_ref().map(|c| c.family),
            weights: card.as_ref().map(|c| c.weights.clone()),
            capabilities: card.map(|c| Capabilities {
                endpoints: vec!["/v1/audio/transcriptions", "/v1/realtime"],
                voices: Vec::new(),
                cloning: false,
                instructions: false,
                voice_design: false,
                languages: Vec::new(),
                language_input: false,
                sample_rate: c.sample_rate,
                samples_per_frame: c.samples_per_token,
            }),
            aliases: if i == 0 {
                OPENAI_TRANSCRIPTION_ALIASES.to_vec()
            } else {
                Vec::new()
            },
            parent: None,
        }
    }));
    // OpenAI's names, each standing for the first model of its kind.
    let firsts = [
        (app.models.first().map(|m| &m.id), &OPENAI_MODEL_ALIASES),
        (
            app.transcribers.first().map(|m| &m.id),
            &OPENAI_TRANSCRIPTION_ALIASES,
        ),
    ];
    for (first, aliases) in firsts {
        let Some(first) = first else { continue };
        let owned_by = list
            .iter()
            .find(|m| &m.id == first)
            .map_or("unknown", |m| m.owned_by);
        list.extend(aliases.iter().map(|alias| Model {
            id: alias.to_string(),
            object: "model",
            created: app.started_at,
            owned_by,
            family: None,
            weights: None,
            capabilities: None,
            aliases: Vec::new(),
            parent: Some(first.clone()),
        }));
    }
    list
}

/// Lists each served model (with its family, capabilities and aliases), then OpenAI's speech
/// and transcription model names, each standing for the first model of its kind.
#[utoipa::path(get, path = "/v1/models", tag = "models", security(("api_key" = [])),
    responses((status = 200, description = "The models and their aliases", body = ModelList)))]
pub async fn list_models(State(app): State<AppState>) -> Json<ModelList> {
    Json(ModelList {
        object: "list",
        data: models(&app),
    })
}

#[derive(Serialize, ToSchema)]
pub struct AudioModelList {
    models: Vec<AudioModel>,
}

#[derive(Serialize, ToSchema)]
pub struct AudioModel {
    #[schema(example = "tts-1")]
    id: String,
}

/// Lists the ids of /v1/models as `{"models": [{"id"}]}`.
///
/// The list Open WebUI offers for its TTS model setting. Open to clients without a key when
/// `public_discovery` is on (the default).
#[utoipa::path(get, path = "/v1/audio/models", tag = "models", security((), ("api_key" = [])),
    responses((status = 200, description = "The model and its aliases", body = AudioModelList)))]
pub async fn list_audio_models(State(app): State<AppState>) -> Json<AudioModelList> {
    Json(AudioModelList {
        models: models(&app)
            .into_iter()
            .map(|m| AudioModel { id: m.id })
            .collect(),
    })
}
