//! `POST /v1/audio/voices`: a multipart upload becomes a stored custom voice. The clips are
//! decoded and resampled to the encoder's rate on the blocking pool, the voice is computed on
//! the model's voice-encoding thread, then written to the store; the same upload made again
//! returns the stored voice without computing it again.

use super::mistral::{self, MistralVoice, MistralVoiceCreate};
use super::Voice;
use crate::audio::input::{decode_to_rate, AudioInputError, DecodeLimits};
use crate::engine::primary_language;
use crate::engine::voice::{VoiceEncodeError, VoiceTensors};
use crate::engine::ModelCard;
use crate::scheduler::voice_encoding::{VoiceEncoderState, VoiceEncodingJob, VoiceSubmitError};
use crate::server::error::{ApiError, ErrorResponse};
use crate::server::json::JsonBody;
use crate::server::state::{AppState, ServedModel, ServedVoiceEncoder};
use crate::server::voice_store::{VoiceMeta, VoiceStoreError};
use axum::extract::multipart::MultipartError;
use axum::extract::{FromRequest, Multipart, Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use sha2::{Digest, Sha256};
use std::time::Duration;
use tokio::sync::oneshot;

/// Longest voice name, in characters.
pub(super) const MAX_NAME_CHARS: usize = 128;
/// Longest transcript, in characters (the encoder also bounds its tokens).
const MAX_TRANSCRIPT_CHARS: usize = 4000;
/// The form field of the clips.
const AUDIO_FIELD: &str = "audio_sample";

/// The fields of the form, as sent.
#[derive(Default)]
struct Form {
    clips: Vec<Vec<u8>>,
    name: Option<String>,
    transcript: Option<String>,
    model: Option<String>,
    language: Option<String>,
}

/// A form whose text fields are valid.
#[derive(Debug, PartialEq)]
struct Upload {
    name: String,
    /// `None` for a blank transcript: the voice is then the speaker embedding alone.
    transcript: Option<String>,
    model: Option<String>,
    /// As sent (checked against the model's languages once the model is known).
    language: Option<String>,
}

async fn read_form(mut multipart: Multipart) -> Result<Form, ApiError> {
    let bad = |e: MultipartError| {
        let error = ApiError::new(e.status(), Some("invalid_multipart"), e.body_text());
        if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
            // Only the clips can make a form that large.
            return error.with_param(AUDIO_FIELD);
        }
        error
    };
    let mut form = Form::default();
    while let Some(field) = multipart.next_field().await.map_err(bad)? {
        let name = field.name().unwrap_or("").to_string();
        if name == AUDIO_FIELD || name == "audio_sample[]" {
            form.clips.push(field.bytes().await.map_err(bad)?.to_vec());
            continue;
        }
        let value = field.text().await.map_err(bad)?;
        match name.as_str() {
            "name" => form.name = Some(value),
            "transcript" => form.transcript = Some(value),
            "model" => form.model = Some(value),
            "language" => form.language = Some(value),
            // Other fields (OpenAI's `consent`, for one) are accepted and ignored.
            _ => {}
        }
    }
    Ok(form)
}

fn check_fields(form: &Form) -> Result<Upload, ApiError> {
    let name = form.name.as_deref().map(str::trim).unwrap_or("");
    if name.is_empty() {
        return Err(ApiError::invalid("name", "name is required"));
    }
    if name.chars().count() > MAX_NAME_CHARS {
        return Err(ApiError::invalid(
            "name",
            format!("name is longer than {MAX_NAME_CHARS} characters"),
        ));
    }
    let transcript = non_blank(&form.transcript);
    if transcript.is_some_and(|t| t.chars().count() > MAX_TRANSCRIPT_CHARS) {
        return Err(ApiError::invalid(
            "transcript",
            format!("transcript is longer than {MAX_TRANSCRIPT_CHARS} characters"),
        ));
    }
    if form.clips.is_empty() {
        return Err(ApiError::invalid(
            AUDIO_FIELD,
            "audio_sample is required: a clip of the voice (WAV, MP3, FLAC, Ogg or WebM)",
        ));
    }
    Ok(Upload {
        name: name.to_string(),
        transcript: transcript.map(str::to_string),
        model: form.model.clone().filter(|m| !m.is_empty()),
        language: non_blank(&form.language).map(str::to_string),
    })
}

/// A text field trimmed, `None` when absent or blank.
fn non_blank(field: &Option<String>) -> Option<&str> {
    field.as_deref().map(str::trim).filter(|v| !v.is_empty())
}

/// The model's spelling of `requested` among its `languages` (BCP 47): the same code in any
/// case, or a regional variant of one (`en-US` for `en`).
pub(super) fn model_language(languages: &[String], requested: &str) -> Result<String, ApiError> {
    let primary = primary_language(requested);
    languages
        .iter()
        .find(|l| l.eq_ignore_ascii_case(requested))
        .or_else(|| languages.iter().find(|l| l.eq_ignore_ascii_case(primary)))
        .cloned()
        .ok_or_else(|| {
            ApiError::invalid(
                "language",
                format!(
                    "the model does not speak '{requested}'; it speaks: {}",
                    languages.join(", ")
                ),
            )
        })
}

/// sha256 of what determines a voice's tensors: the model, the clips as the encoder reads
/// them, and the transcript.
pub(super) fn source_sha256(
    model_id: &str,
    sample_rate: u32,
    clips: &[Vec<f32>],
    transcript: Option<&str>,
) -> String {
    let mut hash = Sha256::new();
    let mut field = |bytes: &[u8]| {
        hash.update((bytes.len() as u64).to_le_bytes());
        hash.update(bytes);
    };
    field(model_id.as_bytes());
    field(&sample_rate.to_le_bytes());
    match transcript {
        Some(text) => field(format!("transcript:{text}").as_bytes()),
        None => field(b"no transcript"),
    }
    for clip in clips {
        let bytes: Vec<u8> = clip.iter().flat_map(|s| s.to_le_bytes()).collect();
        field(&bytes);
    }
    format!("{:x}", hash.finalize())
}

/// A clip that cannot be used, as an error naming the request field `field` that sent it.
fn audio_error(e: AudioInputError, field: &str) -> ApiError {
    let status = match e {
        AudioInputError::Internal(_) => return ApiError::internal(e.to_string()),
        AudioInputError::TooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
        _ => StatusCode::BAD_REQUEST,
    };
    ApiError::new(status, Some(e.code()), format!("{field}: {e}")).with_param(field)
}

fn encode_error(e: VoiceEncodeError) -> ApiError {
    match e {
        VoiceEncodeError::Input { field, message } => ApiError::invalid(field, message),
        VoiceEncodeError::Engine(_) => ApiError::internal(e.to_string()),
    }
}

fn store_error(e: VoiceStoreError) -> ApiError {
    match e {
        VoiceStoreError::Full(_) => ApiError::new(
            StatusCode::BAD_REQUEST,
            Some("too_many_voices"),
            e.to_string(),
        ),
        _ => ApiError::internal(e.to_string()),
    }
}

async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> T + Send + 'static,
) -> Result<T, ApiError> {
    tokio::task::spawn_blocking(work)
        .await
        .map_err(|e| ApiError::internal(e.to_string()))
}

/// Creates a custom voice from a reference clip, in OpenAI's shape or Mistral's.
///
/// OpenAI's is a multipart form (`multipart/form-data`): `audio_sample` (the clip: WAV, MP3,
/// FLAC, Ogg or WebM, any rate, resampled to the model's; a family that averages several clips
/// takes the field repeated), `name`, optionally `transcript` (what the clip says: the model then clones in
/// context, closer to the clip), `language` (one of the model's, BCP 47: speech with the voice
/// is in it when a request names none) and `model` (a served model's id; the default model
/// when absent); the answer is the voice as `GET /v1/audio/voices` lists it. Mistral's is a
/// JSON body (`MistralVoiceCreate`: `name`, `sample_audio` in base64, `languages`, `gender`
/// and other labels, with `model` and `transcript` as extensions; the first served model
/// that clones when `model` is absent), answered in Mistral's shape. Use the voice in speech
/// requests as `"voice": {"id": "voice_..."}` (OpenAI) or `"voice_id"` (Mistral). The same
/// clip, transcript, language, labels and model under the same name returns the voice already
/// stored. Only models that clone accept it (`capabilities.cloning` in /v1/models); the
/// voice is kept in the server's voices folder across restarts.
#[utoipa::path(post, path = "/v1/audio/voices", tag = "audio", security(("api_key" = [])),
    request_body(content(
        (MistralVoiceCreate = "application/json"),
        (String = "multipart/form-data"),
    )),
    responses(
        (status = 200, description = "The voice: `Voice` for a form, `MistralVoice` for JSON", content(
            (Voice = "application/json"), (MistralVoice = "application/json"))),
        (status = 400, description = "A missing field, an undecodable, too short or too long clip, a model that cannot clone, or the most voices stored", body = ErrorResponse),
        (status = 404, description = "No model of that name", body = ErrorResponse),
        (status = 413, description = "The upload is too large", body = ErrorResponse),
        (status = 415, description = "Neither a multipart form nor JSON", body = ErrorResponse),
        (status = 429, description = "The model's voice encoder is busy", body = ErrorResponse),
        (status = 503, description = "The model is loading", body = ErrorResponse)))]
pub async fn create_voice(
    State(app): State<AppState>,
    request: Request,
) -> Result<Response, ApiError> {
    if crate::server::json::is_json(request.headers()) {
        let JsonBody(body) = JsonBody::<MistralVoiceCreate>::from_request(request, &app).await?;
        return Ok(mistral::create(app, body).await?.into_response());
    }
    let multipart = Multipart::from_request(request, &app).await.map_err(|e| {
        ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            Some("unsupported_media_type"),
            format!("{e}: send a multipart form (OpenAI's shape) or JSON (Mistral's)."),
        )
    })?;
    Ok(create_openai(app, multipart).await?.into_response())
}

async fn create_openai(app: AppState, multipart: Multipart) -> Result<Json<Voice>, ApiError> {
    let form = read_form(multipart).await?;
    let upload = check_fields(&form)?;
    let served = match &upload.model {
        Some(name) => app.model_named(name)?,
        None => app.default_model()?,
    };
    let card = served.loaded()?;
    let language = upload
        .language
        .as_deref()
        .map(|l| model_language(&card.card.languages, l))
        .transpose()?;
    let (encoder, sample_rate) = voice_encoder(&app, served, &card.card)?;
    let clips = decode_clips(&app, form.clips, sample_rate, AUDIO_FIELD).await?;
    let source = source_sha256(
        &served.id,
        sample_rate,
        &clips,
        upload.transcript.as_deref(),
    );
    let audio_seconds = clips.iter().map(Vec::len).sum::<usize>() as f32 / sample_rate as f32;
    let meta = VoiceMeta {
        id: String::new(),
        name: upload.name,
        created_at: 0,
        model: served.id.clone(),
        family: card.card.family.to_string(),
        transcript: upload.transcript,
        language,
        audio_seconds,
        source_sha256: source,
        profile: Default::default(),
    };
    let stored = store_voice(&app, encoder, clips, meta).await?;
    Ok(Json(Voice::custom(stored)))
}

/// Stores the voice `meta` describes, computed from `clips` (read at the encoder's rate): the
/// stored one when the same upload was made before, its tensors reused when only the name
/// differs.
pub(crate) async fn store_voice(
    app: &AppState,
    encoder: &ServedVoiceEncoder,
    clips: Vec<Vec<f32>>,
    meta: VoiceMeta,
) -> Result<VoiceMeta, ApiError> {
    let store = app.voices.clone();
    if let Some(same) = store.find_same(&meta) {
        return Ok(same);
    }
    // Another name for a voice already computed: its tensors are reused.
    let computed = match store.find_source(&meta.model, &meta.source_sha256) {
        Some(other) => {
            let store = store.clone();
            blocking(move || store.tensors(&other.id)).await?.ok()
        }
        None => None,
    };
    let tensors = match computed {
        Some(tensors) => tensors,
        None => encode(encoder, clips, meta.transcript.clone()).await?,
    };
    blocking(move || store.create(meta, &tensors))
        .await?
        .map_err(store_error)
}

/// `served`'s voice-encoding thread and the rate it takes clips at, or why it cannot clone
/// now (a 400 naming `model` for a model that cannot clone, 503 while loading).
pub(crate) fn voice_encoder<'a>(
    app: &'a AppState,
    served: &ServedModel,
    card: &ModelCard,
) -> Result<(&'a ServedVoiceEncoder, u32), ApiError> {
    let encoder = app
        .voice_encoder(&served.id)
        .ok_or_else(|| ApiError::internal("the model has no voice-encoding thread"))?;
    let state = encoder.state.borrow().clone();
    match state {
        VoiceEncoderState::Ready { sample_rate } => Ok((encoder, sample_rate)),
        VoiceEncoderState::Loading => Err(ApiError::model_loading()),
        VoiceEncoderState::NotCloning => Err(ApiError::invalid(
            "model",
            format!(
                "the model '{}' ({}) cannot clone voices: /v1/models says which can (capabilities.cloning)",
                served.id, card.family
            ),
        )),
        VoiceEncoderState::Failed(message) => Err(ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            Some("voice_encoder_failed"),
            format!("The model's voice encoder failed to load: {message}"),
        )),
    }
}

/// Decodes reference clips and resamples them to `sample_rate` (on the blocking pool), within
/// the voice upload limits; an unusable clip is an error naming `field`.
pub(crate) async fn decode_clips(
    app: &AppState,
    clips: Vec<Vec<u8>>,
    sample_rate: u32,
    field: &'static str,
) -> Result<Vec<Vec<f32>>, ApiError> {
    let limits = DecodeLimits::new(
        app.config.max_voice_upload_bytes,
        Duration::from_secs(app.config.max_voice_clip_seconds as u64),
    );
    blocking(move || {
        clips
            .iter()
            .map(|bytes| decode_to_rate(bytes, sample_rate, &limits).map(|a| a.samples))
            .collect::<Result<Vec<_>, _>>()
    })
    .await?
    .map_err(|e| audio_error(e, field))
}

/// Computes the voice on the model's voice-encoding thread.
pub(crate) async fn encode(
    encoder: &ServedVoiceEncoder,
    clips: Vec<Vec<f32>>,
    transcript: Option<String>,
) -> Result<VoiceTensors, ApiError> {
    let (reply, done) = oneshot::channel();
    encoder
        .queue
        .try_submit(VoiceEncodingJob {
            clips,
            transcript,
            reply,
        })
        .map_err(|e| match e {
            VoiceSubmitError::Full => ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                Some("queue_full"),
                e.to_string(),
            )
            .with_retry_after(5),
            VoiceSubmitError::Stopped => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                Some("worker_stopped"),
                e.to_string(),
            ),
        })?;
    done.await
        .map_err(|_| ApiError::internal("the voice encoder stopped"))?
        .map_err(encode_error)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn form(name: Option<&str>, transcript: Option<&str>, clips: usize) -> Form {
        Form {
            clips: vec![b"RIFF".to_vec(); clips],
            name: name.map(str::to_string),
            transcript: transcript.map(str::to_string),
            model: Some(String::new()),
            language: Some(" fr-FR ".into()),
        }
    }

    fn param(e: ApiError) -> (StatusCode, Option<String>) {
        (e.status, e.param)
    }

    #[test]
    fn fields_are_checked_and_named_when_wrong() {
        let ok = check_fields(&form(Some(" Alice "), Some("  Hello.\n"), 1)).unwrap();
        assert_eq!(
            ok,
            Upload {
                name: "Alice".into(),
                transcript: Some("Hello.".into()),
                model: None,
                language: Some("fr-FR".into()),
            }
        );
        let blank = check_fields(&form(Some("a"), Some(" \n"), 1)).unwrap();
        assert_eq!(blank.transcript, None, "a blank transcript is none");
        let bad = StatusCode::BAD_REQUEST;
        for (form, field) in [
            (form(None, None, 1), "name"),
            (form(Some("  "), None, 1), "name"),
            (form(Some(&"n".repeat(129)), None, 1), "name"),
            (form(Some("a"), Some(&"t".repeat(4001)), 1), "transcript"),
            (form(Some("a"), None, 0), "audio_sample"),
        ] {
            let e = check_fields(&form).unwrap_err();
            assert_eq!(param(e), (bad, Some(field.to_string())));
        }
    }

    #[test]
    fn a_language_is_one_of_the_models_in_its_spelling() {
        let languages = ["en".to_string(), "fr".into(), "zh-cn".into()];
        for (requested, spoken) in [
            ("fr", "fr"),
            ("FR", "fr"),
            ("fr-CA", "fr"),
            ("zh-CN", "zh-cn"),
        ] {
            assert_eq!(model_language(&languages, requested).unwrap(), spoken);
        }
        for unknown in ["de", "zh", "english"] {
            let e = model_language(&languages, unknown).unwrap_err();
            assert!(e.message.contains("en, fr, zh-cn"), "{}", e.message);
            assert_eq!(param(e), (StatusCode::BAD_REQUEST, Some("language".into())));
        }
    }

    #[test]
    fn the_source_hash_covers_model_clips_and_transcript() {
        let clips = vec![vec![0.25f32, -0.5]];
        let base = source_sha256("m", 24_000, &clips, Some("Hi."));
        assert_eq!(base.len(), 64);
        assert_eq!(base, source_sha256("m", 24_000, &clips, Some("Hi.")));
        for other in [
            source_sha256("n", 24_000, &clips, Some("Hi.")),
            source_sha256("m", 16_000, &clips, Some("Hi.")),
            source_sha256("m", 24_000, &clips, None),
            source_sha256("m", 24_000, &clips, Some("Hi!")),
            source_sha256("m", 24_000, &[vec![0.25, -0.5, 0.0]], Some("Hi.")),
            // Clip boundaries count: one clip of two samples is not two of one.
            source_sha256("m", 24_000, &[vec![0.25], vec![-0.5]], Some("Hi.")),
        ] {
            assert_ne!(other, base);
        }
    }

    #[test]
    fn errors_map_to_statuses_and_fields() {
        let e = audio_error(AudioInputError::Empty, AUDIO_FIELD);
        assert_eq!(
            param(e),
            (StatusCode::BAD_REQUEST, Some("audio_sample".into()))
        );
        let e = audio_error(AudioInputError::TooLarge { size: 9, limit: 1 }, "ref_audio");
        assert_eq!(
            (e.status, e.param.as_deref()),
            (StatusCode::PAYLOAD_TOO_LARGE, Some("ref_audio"))
        );
        let e = audio_error(
            AudioInputError::TooLong {
                limit: Duration::from_secs(30),
            },
            AUDIO_FIELD,
        );
        assert!(e.message.contains("30.0 s"), "{}", e.message);
        assert!(
            audio_error(AudioInputError::Internal("x".into()), AUDIO_FIELD)
                .status
                .is_server_error()
        );
        let e = encode_error(VoiceEncodeError::input("transcript", "too long"));
        assert_eq!(
            param(e),
            (StatusCode::BAD_REQUEST, Some("transcript".into()))
        );
        let e = encode_error(VoiceEncodeError::Engine("nan".into()));
        assert_eq!(e.status, StatusCode::INTERNAL_SERVER_ERROR);
        let e = store_error(VoiceStoreError::Full(3));
        assert_eq!(
            (e.status, e.code),
            (StatusCode::BAD_REQUEST, Some("too_many_voices"))
        );
    }
}
