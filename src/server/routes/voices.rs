//! `/v1/audio/voices`: the model's preset voices with language, gender and the OpenAI names
//! that map to each, and custom voices, in OpenAI's shape and Mistral's (`mistral.rs`):
//! `POST` computes one from a reference clip (on the model's voice-encoding thread) and stores
//! it, `GET` lists them beside the presets, `GET`, `PATCH` and `DELETE
//! /v1/audio/voices/{id}` read, change and remove one.

pub mod create;
pub mod mistral;

use crate::server::error::{ApiError, ErrorResponse};
use crate::server::state::AppState;
use crate::server::voice_catalog::aliases_of;
use crate::server::voice_store::VoiceMeta;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::Json;
use mistral::{MistralPage, MistralVoice, VoiceType};
use serde::{Deserialize, Serialize};
use utoipa::{IntoParams, ToSchema};

#[derive(Deserialize, IntoParams)]
pub struct VoicesQuery {
    /// Whose voices: a served model's id (see /v1/models); the default model when absent.
    model: Option<String>,
    /// Mistral's page (`items`): voices per page (10 when absent).
    limit: Option<usize>,
    /// Mistral's page (`items`): voices skipped before it.
    offset: Option<usize>,
    /// Mistral's page (`items`): `all` (the default), `custom` or `preset`.
    #[serde(rename = "type")]
    #[param(inline)]
    voice_type: Option<VoiceType>,
}

#[derive(Serialize, ToSchema)]
pub struct VoiceList {
    /// Always `list`.
    object: &'static str,
    data: Vec<Voice>,
    /// The same voices again, under the key Open WebUI reads (`voices[].id`, `voices[].name`).
    voices: Vec<Voice>,
    /// Whether a speech request's `instructions` steer these voices' style (Qwen3-TTS 1.7B
    /// CustomVoice) or describe the voice (VoiceDesign); `false`: they are ignored (Voxtral,
    /// Qwen3-TTS 0.6B CustomVoice and Base, as the official code does).
    instructions: bool,
    /// Mistral's page of the same presets, and of the custom voices of every model unless
    /// `model` is given (a Mistral request speaking with one goes to the model that made it):
    /// `items`, `total`, `page`, `page_size`, `total_pages`.
    #[serde(flatten)]
    mistral: MistralPage,
}

/// A preset, or a custom voice (which has `object` and the fields after it).
#[derive(Clone, Serialize, ToSchema)]
pub struct Voice {
    /// The preset's name, or the custom voice's `voice_...` id: usable as `voice`
    /// (a custom voice as `{"id": "voice_..."}`).
    #[schema(example = "casual_female")]
    id: String,
    /// The preset's name again, or the custom voice's name (what voice pickers show).
    #[schema(example = "casual_female")]
    name: String,
    /// BCP 47 language code: a preset's, or the one a custom voice speaks in when a request
    /// names none (null when it was given none, and for a preset not named like the
    /// published ones).
    #[schema(example = "en")]
    language: Option<String>,
    #[schema(example = "English")]
    language_name: Option<&'static str>,
    /// `female` or `male`.
    gender: Option<&'static str>,
    /// OpenAI voice names that select this preset.
    #[schema(example = json!(["shimmer", "marin"]))]
    aliases: Vec<&'static str>,
    /// Custom voices: `audio.voice`.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(example = "audio.voice")]
    object: Option<&'static str>,
    /// Custom voices: when it was made (Unix seconds).
    #[serde(skip_serializing_if = "Option::is_none")]
    created_at: Option<u64>,
    /// Custom voices: the model that computed it, the only one that can speak with it.
    #[serde(skip_serializing_if = "Option::is_none")]
    model: Option<String>,
    /// Custom voices: whether it clones in context (a transcript was given) rather than from
    /// the speaker embedding alone.
    #[serde(skip_serializing_if = "Option::is_none")]
    in_context: Option<bool>,
    /// Custom voices cloned in context: the reference clip's transcript.
    #[serde(skip_serializing_if = "Option::is_none")]
    transcript: Option<String>,
    /// Custom voices: the reference audio's length.
    #[serde(skip_serializing_if = "Option::is_none")]
    audio_seconds: Option<f32>,
}

impl Voice {
    fn custom(meta: VoiceMeta) -> Voice {
        Voice {
            id: meta.id,
            name: meta.name,
            language: meta.language,
            language_name: None,
            gender: None,
            aliases: Vec::new(),
            object: Some("audio.voice"),
            created_at: Some(meta.created_at),
            model: Some(meta.model),
            in_context: Some(meta.transcript.is_some()),
            transcript: meta.transcript,
            audio_seconds: Some(meta.audio_seconds),
        }
    }
}

/// Lists the preset voices of a model (the default one unless `model` is given), then its
/// custom voices, oldest first: OpenAI's list (`data`, and `voices` for Open WebUI) and
/// Mistral's page (`items` and its counts, chosen by `limit`, `offset` and `type`).
///
/// Open to clients without a key when `public_discovery` is on (the default).
#[utoipa::path(get, path = "/v1/audio/voices", tag = "audio", security((), ("api_key" = [])),
    responses(
        (status = 200, description = "The preset and custom voices", body = VoiceList),
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
        None => app.default_model()?,
    };
    let model = served.loaded()?;
    let card = &model.card;
    let presets = card.voices.iter().map(|v| Voice {
        id: v.name.clone(),
        name: v.name.clone(),
        language: v.language.map(str::to_string),
        language_name: v.language_name,
        gender: v.gender,
        aliases: aliases_of(&v.name, card),
        object: None,
        created_at: None,
        model: None,
        in_context: None,
        transcript: None,
        audio_seconds: None,
    });
    let custom = app
        .voices
        .list()
        .into_iter()
        .filter(|v| v.model == served.id)
        .map(Voice::custom);
    let data: Vec<Voice> = presets.chain(custom).collect();
    let mistral_presets = card
        .voices
        .iter()
        .map(|v| MistralVoice::preset(v, &served.id, app.started_at));
    let mistral_custom = app
        .voices
        .list()
        .into_iter()
        .filter(|v| query.model.is_none() || v.model == served.id)
        .map(|v| MistralVoice::custom(&v));
    let mistral = MistralPage::new(
        mistral_presets.chain(mistral_custom).collect(),
        query.voice_type.unwrap_or_default(),
        query.offset,
        query.limit,
    )?;
    Ok(Json(VoiceList {
        object: "list",
        voices: data.clone(),
        data,
        instructions: card.instructions,
        mistral,
    }))
}

/// OpenAI's answer (`id`, `object`, `deleted`) and Mistral's (the voice as it was).
#[derive(Serialize, ToSchema)]
pub struct VoiceDeleted {
    /// Always `audio.voice.deleted`.
    object: &'static str,
    /// Always true.
    deleted: bool,
    #[serde(flatten)]
    voice: MistralVoice,
}

/// Deletes a custom voice: requests naming it fail from now on, and it is gone from the
/// voices folder.
#[utoipa::path(delete, path = "/v1/audio/voices/{voice_id}", tag = "audio", security(("api_key" = [])),
    params(("voice_id" = String, Path, description = "The custom voice's `voice_...` id")),
    responses(
        (status = 200, description = "The voice is deleted", body = VoiceDeleted),
        (status = 404, description = "No custom voice has that id", body = ErrorResponse),
    ))]
pub async fn delete_voice(
    State(app): State<AppState>,
    Path(voice_id): Path<String>,
) -> Result<Json<VoiceDeleted>, ApiError> {
    let store = app.voices.clone();
    let id = voice_id.clone();
    let before = app.voices.get(&voice_id);
    let deleted = tokio::task::spawn_blocking(move || store.delete(&id))
        .await
        .map_err(|e| ApiError::internal(e.to_string()))?
        .map_err(|e| ApiError::internal(e.to_string()))?;
    let Some(voice) = before.filter(|_| deleted) else {
        return Err(ApiError::new(
            StatusCode::NOT_FOUND,
            Some("voice_not_found"),
            format!("No custom voice '{voice_id}'."),
        )
        .with_param("voice_id"));
    };
    Ok(Json(VoiceDeleted {
        object: "audio.voice.deleted",
        deleted: true,
        voice: MistralVoice::custom(&voice),
    }))
}
