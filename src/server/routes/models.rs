//! `GET /v1/models`: the served model under its own id and OpenAI's speech model names;
//! `GET /v1/audio/models`: the same ids in the shape Open WebUI reads.

use crate::server::state::AppState;
use axum::extract::State;
use axum::Json;
use serde::Serialize;
use utoipa::ToSchema;

/// OpenAI's speech model names, listed so that clients which check /v1/models find one.
/// Any `model` value is accepted by /v1/audio/speech; all of them mean the same model.
pub const OPENAI_MODEL_ALIASES: [&str; 3] = ["tts-1", "tts-1-hd", "gpt-4o-mini-tts"];

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
}

/// The model id from the settings (`model_id`), then the OpenAI aliases.
fn model_ids(app: &AppState) -> impl Iterator<Item = String> + '_ {
    std::iter::once(app.config.model_id.clone())
        .chain(OPENAI_MODEL_ALIASES.iter().map(|s| s.to_string()))
}

/// Lists the model id from the settings (`model_id`) followed by the OpenAI aliases.
#[utoipa::path(get, path = "/v1/models", tag = "models", security(("api_key" = [])),
    responses((status = 200, description = "The model and its aliases", body = ModelList)))]
pub async fn list_models(State(app): State<AppState>) -> Json<ModelList> {
    Json(ModelList {
        object: "list",
        data: model_ids(&app)
            .map(|id| Model {
                id,
                object: "model",
                created: app.started_at,
                owned_by: "mistralai",
            })
            .collect(),
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
        models: model_ids(&app).map(|id| AudioModel { id }).collect(),
    })
}
