//! `GET /v1/audio/voices`: the model's preset voices with language, gender and the OpenAI
//! names that map to each.

use crate::server::error::{ApiError, ErrorResponse};
use crate::server::state::AppState;
use crate::server::voice_catalog::aliases_of;
use axum::extract::{Query, State};
use axum::Json;
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

#[derive(Deserialize, IntoParams)]
pub struct VoicesQuery {
    /// Whose voices: a served model's id (see /v1/models); the default model when absent.
    model: Option<String>,
}

#[derive(Serialize, ToSchema)]
pub struct VoiceList {
    /// Always `list`.
    object: &'static str,
    data: Vec<Voice>,
    /// The same voices again, under the key Open WebUI reads (`voices[].id`, `voices[].name`).
    voices: Vec<Voice>,
}

#[derive(Clone, Serialize, ToSchema)]
pub struct Voice {
    /// The preset's name, usable as `voice`.
    #[schema(example = "casual_female")]
    id: String,
    /// The preset's name again (what voice pickers show).
    #[schema(example = "casual_female")]
    name: String,
    /// BCP 47 language code (null for a preset not named like the published ones).
    #[schema(example = "en")]
    language: Option<&'static str>,
    #[schema(example = "English")]
    language_name: Option<&'static str>,
    /// `female` or `male`.
    gender: Option<&'static str>,
    /// OpenAI voice names that select this preset.
    #[schema(example = json!(["shimmer", "marin"]))]
    aliases: Vec<&'static str>,
}

/// Lists the preset voices of a model (the default one unless `model` is given).
///
/// Open to clients without a key when `public_discovery` is on (the default).
#[utoipa::path(get, path = "/v1/audio/voices", tag = "audio", security((), ("api_key" = [])),
    responses(
        (status = 200, description = "The preset voices", body = VoiceList),
        (status = 404, description = "No such model", body = ErrorResponse),
        (status = 503, description = "The model is still loading", body = ErrorResponse),
    ),
    params(VoicesQuery))]
pub async fn list_voices(
    State(app): State<AppState>,
    Query(query): Query<VoicesQuery>,
) -> Result<Json<VoiceList>, ApiError> {
    let served = match &query.model {
        Some(name) => app.model_named(name)?,
        None => app.default_model(),
    };
    let model = served.loaded()?;
    let card = &model.card;
    let data: Vec<Voice> = card
        .voices
        .iter()
        .map(|v| Voice {
            id: v.name.clone(),
            name: v.name.clone(),
            language: v.language,
            language_name: v.language_name,
            gender: v.gender,
            aliases: aliases_of(&v.name, card),
        })
        .collect();
    Ok(Json(VoiceList {
        object: "list",
        voices: data.clone(),
        data,
    }))
}
