//! Mistral's shape of the voice store (docs.mistral.ai, Studio > Audio > Text to speech >
//! Voices; fields as the `mistralai` Python SDK's models `voicecreaterequest.py`,
//! `voiceupdaterequest.py`, `voiceresponse.py` and `voicelistresponse.py` have them): a voice
//! made from a base64 clip in a JSON body, read one by one, changed, and listed a page at a
//! time. The voices are the store's custom voices and the models' presets, as in OpenAI's
//! shape.

use super::create::{decode_clips, model_language, source_sha256, store_voice, voice_encoder};
use crate::engine::VoiceInfo;
use crate::server::error::{ApiError, ErrorResponse};
use crate::server::json::JsonBody;
use crate::server::state::AppState;
use crate::server::voice_store::{VoiceMeta, VoiceProfile};
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::Json;
use base64::Engine as _;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use utoipa::ToSchema;

/// A voice in Mistral's shape (`VoiceResponse`).
#[derive(Clone, Debug, Serialize, ToSchema)]
pub struct MistralVoice {
    /// A custom voice's `voice_...` id, or a preset's name: usable as `voice_id`.
    pub id: String,
    pub name: String,
    /// RFC 3339 (UTC): when a custom voice was made; for a preset, when the server started.
    pub created_at: String,
    /// Always null: the server has no users.
    pub user_id: Option<String>,
    /// `preset` or `custom`.
    #[serde(rename = "type")]
    pub voice_type: &'static str,
    pub languages: Vec<String>,
    pub gender: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub age: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tags: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub color: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub retention_notice: Option<u32>,
    /// Custom voices: `ivc` (an instant clone, from a clip).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kind: Option<&'static str>,
    /// Extension: the served model that speaks with this voice.
    pub model: String,
}

impl MistralVoice {
    pub fn preset(voice: &VoiceInfo, model: &str, started_at: u64) -> Self {
        MistralVoice {
            id: voice.name.clone(),
            name: voice.name.clone(),
            created_at: rfc3339(started_at),
            user_id: None,
            voice_type: "preset",
            languages: voice.language.map(str::to_string).into_iter().collect(),
            gender: voice.gender.map(str::to_string),
            age: None,
            tags: None,
            color: None,
            description: None,
            retention_notice: None,
            kind: None,
            model: model.to_string(),
        }
    }

    pub fn custom(meta: &VoiceMeta) -> Self {
        let profile = &meta.profile;
        let languages = if profile.languages.is_empty() {
            meta.language.iter().cloned().collect()
        } else {
            profile.languages.clone()
        };
        MistralVoice {
            id: meta.id.clone(),
            name: meta.name.clone(),
            created_at: rfc3339(meta.created_at),
            user_id: None,
            voice_type: "custom",
            languages,
            gender: profile.gender.clone(),
            age: profile.age,
            tags: profile.tags.clone(),
            color: profile.color.clone(),
            description: profile.description.clone(),
            retention_notice: profile.retention_notice,
            kind: Some("ivc"),
            model: meta.model.clone(),
        }
    }
}

/// Unix seconds as RFC 3339 in UTC (`2026-03-20T18:34:32Z`).
fn rfc3339(unix: u64) -> String {
    let (days, secs) = (unix / 86_400, unix % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1_460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        secs / 3600,
        secs / 60 % 60,
        secs % 60
    )
}

/// `type` of Mistral's list: which voices.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum VoiceType {
    #[default]
    All,
    Custom,
    Preset,
}

/// Mistral's page of the voices (`VoiceListResponse`'s fields, beside OpenAI's list).
#[derive(Serialize, ToSchema)]
pub struct MistralPage {
    pub items: Vec<MistralVoice>,
    pub total: usize,
    pub page: usize,
    pub page_size: usize,
    pub total_pages: usize,
}

impl MistralPage {
    /// `offset` and `limit` (Mistral's defaults: 0 and 10) over `voices` of `kind`.
    pub fn new(
        voices: Vec<MistralVoice>,
        kind: VoiceType,
        offset: Option<usize>,
        limit: Option<usize>,
    ) -> Result<Self, ApiError> {
        let limit = limit.unwrap_or(10);
        if limit == 0 {
            return Err(ApiError::invalid("limit", "`limit` must be at least 1."));
        }
        let offset = offset.unwrap_or(0);
        let chosen: Vec<MistralVoice> = voices
            .into_iter()
            .filter(|v| match kind {
                VoiceType::All => true,
                VoiceType::Custom => v.voice_type == "custom",
                VoiceType::Preset => v.voice_type == "preset",
            })
            .collect();
        let total = chosen.len();
        Ok(MistralPage {
            items: chosen.into_iter().skip(offset).take(limit).collect(),
            total,
            page: offset / limit + 1,
            page_size: limit,
            total_pages: total.div_ceil(limit),
        })
    }
}

/// Mistral's `VoiceCreateRequest`, with two extensions. `sample_filename` is accepted and
/// unused: the clip's format is read from its bytes.
#[derive(Debug, Deserialize, ToSchema)]
pub struct MistralVoiceCreate {
    pub name: String,
    /// The reference clip, base64 (WAV, MP3, FLAC, Ogg or WebM).
    pub sample_audio: Option<String>,
    /// Languages of the voice: each one the model speaks; the first is what it speaks when a
    /// request names none.
    #[serde(default)]
    pub languages: Vec<String>,
    pub gender: Option<Gender>,
    pub age: Option<u32>,
    pub tags: Option<Vec<String>>,
    pub color: Option<String>,
    pub description: Option<String>,
    pub retention_notice: Option<u32>,
    /// Extension: the model that computes the voice (one that clones; the first served one
    /// that does when absent).
    pub model: Option<String>,
    /// Extension: what the clip says; the model then clones in context, closer to the clip.
    pub transcript: Option<String>,
}

#[derive(Clone, Copy, Debug, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum Gender {
    Female,
    Male,
    Neutral,
}

impl Gender {
    fn as_str(self) -> &'static str {
        match self {
            Gender::Female => "female",
            Gender::Male => "male",
            Gender::Neutral => "neutral",
        }
    }
}

/// `POST /v1/audio/voices` with a JSON body: Mistral's way of making a voice.
pub(super) async fn create(
    app: AppState,
    request: MistralVoiceCreate,
) -> Result<Json<MistralVoice>, ApiError> {
    let name = request.name.trim();
    if name.is_empty() || name.chars().count() > super::create::MAX_NAME_CHARS {
        return Err(ApiError::invalid(
            "name",
            format!(
                "name must be 1 to {} characters",
                super::create::MAX_NAME_CHARS
            ),
        ));
    }
    let clip = request
        .sample_audio
        .as_deref()
        .filter(|a| !a.is_empty())
        .ok_or_else(|| {
            ApiError::invalid(
                "sample_audio",
                "sample_audio is required: a clip of the voice, base64",
            )
        })?;
    let clip = decode_base64(clip, "sample_audio")?;
    let (served, model) = app.cloning_model(request.model.as_deref(), "sample_audio")?;
    let languages = model_languages(&model.card.languages, &request.languages)?;
    let transcript = request
        .transcript
        .as_deref()
        .map(str::trim)
        .filter(|t| !t.is_empty())
        .map(str::to_string);
    let (encoder, sample_rate) = voice_encoder(&app, served, &model.card)?;
    let clips = decode_clips(&app, vec![clip], sample_rate, "sample_audio").await?;
    let audio_seconds = clips[0].len() as f32 / sample_rate as f32;
    let meta = VoiceMeta {
        id: String::new(),
        name: name.to_string(),
        created_at: 0,
        model: served.id.clone(),
        family: model.card.family.to_string(),
        source_sha256: source_sha256(&served.id, sample_rate, &clips, transcript.as_deref()),
        transcript,
        language: languages.first().cloned(),
        audio_seconds,
        profile: VoiceProfile {
            languages: request.languages,
            gender: request.gender.map(|g| g.as_str().to_string()),
            age: request.age,
            tags: request.tags,
            color: request.color,
            description: request.description,
            retention_notice: request.retention_notice,
        },
    };
    let stored = store_voice(&app, encoder, clips, meta).await?;
    Ok(Json(MistralVoice::custom(&stored)))
}

/// The model's spelling of each of `requested` (an error naming `languages` for one it does
/// not speak).
fn model_languages(spoken: &[String], requested: &[String]) -> Result<Vec<String>, ApiError> {
    requested
        .iter()
        .map(|l| model_language(spoken, l).map_err(|e| e.with_param("languages")))
        .collect()
}

pub(crate) fn decode_base64(text: &str, field: &str) -> Result<Vec<u8>, ApiError> {
    base64::engine::general_purpose::STANDARD
        .decode(text.trim())
        .map_err(|e| ApiError::invalid(field, format!("`{field}` is not base64: {e}")))
}

fn voice_not_found(id: &str) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        Some("voice_not_found"),
        format!("No voice '{id}'."),
    )
    .with_param("voice_id")
}

/// Reads one voice in Mistral's shape: a custom voice, or a preset of a served model.
///
/// Open to clients without a key when `public_discovery` is on (the default), as the list is.
#[utoipa::path(get, path = "/v1/audio/voices/{voice_id}", tag = "audio", security((), ("api_key" = [])),
    params(("voice_id" = String, Path, description = "A custom voice's `voice_...` id or a preset's name")),
    responses(
        (status = 200, description = "The voice", body = MistralVoice),
        (status = 404, description = "No voice has that id", body = ErrorResponse),
        (status = 503, description = "The model is still loading", body = ErrorResponse),
    ))]
pub async fn get_voice(
    State(app): State<AppState>,
    Path(voice_id): Path<String>,
) -> Result<Json<MistralVoice>, ApiError> {
    if let Some(meta) = app.voices.get(&voice_id) {
        return Ok(Json(MistralVoice::custom(&meta)));
    }
    for served in app.models.iter() {
        let model = served.loaded()?;
        if let Some(preset) = model.card.voices.iter().find(|v| v.name == voice_id) {
            return Ok(Json(MistralVoice::preset(
                preset,
                &served.id,
                app.started_at,
            )));
        }
    }
    Err(voice_not_found(&voice_id))
}

/// Changes a custom voice's name and labels (Mistral's `VoiceUpdateRequest`: `name`,
/// `languages`, `gender`, `age`, `tags`, `description`, `retention_notice`; a field set to
/// null is cleared). The voice's sound stays as it is; its first language is what it speaks
/// when a request names none.
#[utoipa::path(patch, path = "/v1/audio/voices/{voice_id}", tag = "audio", security(("api_key" = [])),
    params(("voice_id" = String, Path, description = "The custom voice's `voice_...` id")),
    request_body(content = Object, description = "Mistral's VoiceUpdateRequest"),
    responses(
        (status = 200, description = "The changed voice", body = MistralVoice),
        (status = 400, description = "A bad field, a field that cannot change, or a preset", body = ErrorResponse),
        (status = 404, description = "No custom voice has that id", body = ErrorResponse),
    ))]
pub async fn update_voice(
    State(app): State<AppState>,
    Path(voice_id): Path<String>,
    JsonBody(changes): JsonBody<Map<String, Value>>,
) -> Result<Json<MistralVoice>, ApiError> {
    let Some(current) = app.voices.get(&voice_id) else {
        let preset = app.models.iter().any(|served| {
            served
                .loaded()
                .is_ok_and(|m| m.card.voices.iter().any(|v| v.name == voice_id))
        });
        if preset {
            return Err(ApiError::invalid(
                "voice_id",
                format!("'{voice_id}' is a preset voice: presets cannot be changed."),
            ));
        }
        return Err(voice_not_found(&voice_id));
    };
    let spoken = app
        .models
        .iter()
        .find(|m| m.id == current.model)
        .and_then(|m| m.loaded().ok())
        .map(|m| m.card.languages.clone())
        .unwrap_or_default();
    let mut next = current;
    for (field, value) in &changes {
        apply_change(&mut next, &spoken, field, value)?;
    }
    let store = app.voices.clone();
    let id = voice_id.clone();
    let updated = tokio::task::spawn_blocking(move || store.update(&id, |meta| *meta = next))
        .await
        .map_err(|e| ApiError::internal(e.to_string()))?
        .map_err(|e| ApiError::internal(e.to_string()))?
        .ok_or_else(|| voice_not_found(&voice_id))?;
    Ok(Json(MistralVoice::custom(&updated)))
}

/// One field of an update applied to `voice` (whose model speaks `spoken`).
fn apply_change(
    voice: &mut VoiceMeta,
    spoken: &[String],
    field: &str,
    value: &Value,
) -> Result<(), ApiError> {
    fn typed<T: serde::de::DeserializeOwned>(field: &str, value: &Value) -> Result<T, ApiError> {
        serde_json::from_value(value.clone())
            .map_err(|e| ApiError::invalid(field, format!("Invalid '{field}': {e}")))
    }
    let profile = &mut voice.profile;
    match field {
        "name" => {
            let name: String = typed(field, value)?;
            let name = name.trim();
            if name.is_empty() || name.chars().count() > super::create::MAX_NAME_CHARS {
                return Err(ApiError::invalid(
                    "name",
                    format!(
                        "name must be 1 to {} characters",
                        super::create::MAX_NAME_CHARS
                    ),
                ));
            }
            voice.name = name.to_string();
        }
        "languages" => {
            let languages: Option<Vec<String>> = typed(field, value)?;
            let languages = languages.unwrap_or_default();
            voice.language = model_languages(spoken, &languages)?.first().cloned();
            profile.languages = languages;
        }
        "gender" => {
            let gender: Option<Gender> = typed(field, value)?;
            profile.gender = gender.map(|g| g.as_str().to_string());
        }
        "age" => profile.age = typed(field, value)?,
        "tags" => profile.tags = typed(field, value)?,
        "description" => profile.description = typed(field, value)?,
        "retention_notice" => profile.retention_notice = typed(field, value)?,
        other => {
            return Err(ApiError::invalid(
                other,
                format!("'{other}' cannot be changed: a voice's update takes name, languages, gender, age, tags, description and retention_notice."),
            ))
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn times_are_rfc3339_in_utc() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(1_774_031_672), "2026-03-20T18:34:32Z");
    }

    fn voice(name: &str, voice_type: &'static str) -> MistralVoice {
        MistralVoice {
            voice_type,
            ..MistralVoice::preset(
                &VoiceInfo {
                    name: name.into(),
                    language: Some("en"),
                    language_name: None,
                    gender: None,
                },
                "m",
                0,
            )
        }
    }

    #[test]
    fn pages_count_the_chosen_voices() {
        let all = || {
            vec![
                voice("a", "preset"),
                voice("b", "preset"),
                voice("c", "custom"),
            ]
        };
        let page = MistralPage::new(all(), VoiceType::All, Some(1), Some(1)).unwrap();
        let names: Vec<&str> = page.items.iter().map(|v| v.name.as_str()).collect();
        assert_eq!(names, ["b"]);
        assert_eq!((page.total, page.page, page.total_pages), (3, 2, 3));
        let custom = MistralPage::new(all(), VoiceType::Custom, None, None).unwrap();
        assert_eq!(
            (custom.total, custom.items.len(), custom.page_size),
            (1, 1, 10)
        );
        let e = MistralPage::new(all(), VoiceType::All, None, Some(0))
            .err()
            .unwrap();
        assert_eq!(e.param.as_deref(), Some("limit"));
    }

    #[test]
    fn updates_change_labels_and_refuse_what_cannot_change() {
        let mut meta = VoiceMeta {
            id: "voice_1".into(),
            name: "a".into(),
            created_at: 0,
            model: "m".into(),
            family: "qwen3-tts".into(),
            transcript: None,
            language: None,
            audio_seconds: 1.0,
            source_sha256: String::new(),
            profile: VoiceProfile::default(),
        };
        let spoken = ["en".to_string(), "fr".into()];
        let mut apply = |field: &str, value: Value| apply_change(&mut meta, &spoken, field, &value);
        apply("name", json!(" b ")).unwrap();
        apply("languages", json!(["FR", "en"])).unwrap();
        apply("tags", json!(["calm"])).unwrap();
        apply("gender", json!("female")).unwrap();
        let param = |r: Result<(), ApiError>| r.err().unwrap().param.unwrap();
        assert_eq!(param(apply("languages", json!(["de"]))), "languages");
        assert_eq!(param(apply("gender", json!("robot"))), "gender");
        assert_eq!(param(apply("name", json!(null))), "name");
        assert_eq!(param(apply("color", json!("red"))), "color");
        assert_eq!(
            (meta.name.as_str(), meta.language.as_deref()),
            ("b", Some("fr"))
        );
        assert_eq!(meta.profile.languages, ["FR", "en"]);
        assert_eq!(meta.profile.gender.as_deref(), Some("female"));
        apply_change(&mut meta, &spoken, "tags", &json!(null)).unwrap();
        assert_eq!(meta.profile.tags, None);
    }
}
