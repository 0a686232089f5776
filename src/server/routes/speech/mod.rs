//! `POST /v1/audio/speech`: validate -> queue a job -> collect its PCM -> time-stretch and
//! encode (on the blocking pool) -> audio body or Server-Sent Events. The body is OpenAI's
//! shape or Mistral's (`mistral.rs`), told apart by Mistral's own fields; both are spoken on
//! the same path and answered in their own shape.

pub(crate) mod mistral;
mod request;
mod stream;

use mistral::{MistralSpeech, MistralSpeechRequest};
use request::SpeechRequest;
pub use request::{Speech, StreamFormat};
use stream::{Shape, Streamer};

use crate::audio::{encode_audio, stream_encoder, time_stretch};
use crate::engine::{prepare_speech, CustomVoice, ModelCard, PreparedSpeech};
use crate::scheduler::{JobError, JobEvent, JobOptions, JobSummary, LoadedModel, SubmitError};
use crate::server::error::{ApiError, ErrorResponse};
use crate::server::json;
use crate::server::metrics::{QUEUE_WAIT, TIME_TO_FIRST_AUDIO};
use crate::server::state::{AppState, ServedModel};
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use base64::Engine as _;
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::mpsc::UnboundedReceiver;
use utoipa::openapi::schema::{
    KnownFormat, ObjectBuilder, OneOfBuilder, Schema, SchemaFormat, Type,
};
use utoipa::openapi::{Ref, RefOr};
use utoipa::{PartialSchema, ToSchema};

/// A `POST /v1/audio/speech` body checked as [`create_speech`] checks it: parsed by the
/// route's JSON extractor (a bad field gives 400 naming it, unparsable JSON 422), then
/// validated against `max_input_chars` and `model`'s voices. No server is needed: this is
/// the entry point of the `speech_request` fuzz target (`fuzz/`).
pub fn parse_speech_body(
    body: &[u8],
    max_input_chars: usize,
    model: &ModelCard,
) -> Result<Speech, ApiError> {
    parse_speech_body_with(body, max_input_chars, model, None)
}

/// [`parse_speech_body`], speaking with `reference` (a voice cloned from a clip the request
/// carried) when it is given.
pub(crate) fn parse_speech_body_with(
    body: &[u8],
    max_input_chars: usize,
    model: &ModelCard,
    reference: Option<Arc<CustomVoice>>,
) -> Result<Speech, ApiError> {
    json::parse::<SpeechRequest>(body)?.validate_with(max_input_chars, model, reference)
}

/// Response header carrying the seed a synthesis used (random unless the request set one).
pub const SEED_HEADER: &str = "x-voxtral-seed";

/// The audio file, in the requested `response_format` (documentation only).
pub struct AudioFile;

impl PartialSchema for AudioFile {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new()
            .schema_type(Type::String)
            .format(Some(SchemaFormat::KnownFormat(KnownFormat::Binary)))
            .into()
    }
}

impl ToSchema for AudioFile {}

/// `data: {"type": "speech.audio.delta", "audio": "<base64>"}` events, then
/// `data: {"type": "speech.audio.done", "usage": {...}}`; Mistral's name each event and carry
/// `audio_data` (documentation only).
pub struct SpeechEvents;

impl PartialSchema for SpeechEvents {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new()
            .schema_type(Type::String)
            .description(Some(
                "`data: {\"type\": \"speech.audio.delta\", \"audio\": \"<base64>\"}` events, \
                 then `data: {\"type\": \"speech.audio.done\", \"usage\": {\"input_tokens\", \
                 \"output_tokens\", \"total_tokens\"}}`. For Mistral's shape: `event: \
                 speech.audio.delta` with `data: {\"type\": \"speech.audio.delta\", \
                 \"audio_data\": \"<base64>\"}`, then `event: speech.audio.done` with `data: \
                 {\"type\": \"speech.audio.done\", \"usage\": {\"prompt_tokens\", \
                 \"completion_tokens\", \"total_tokens\"}}`",
            ))
            .into()
    }
}

impl ToSchema for SpeechEvents {}

/// OpenAI's request body or Mistral's (documentation only).
pub struct SpeechBody;

impl PartialSchema for SpeechBody {
    fn schema() -> RefOr<Schema> {
        OneOfBuilder::new()
            .item(Ref::from_schema_name(SpeechRequest::name()))
            .item(Ref::from_schema_name(MistralSpeechRequest::name()))
            .into()
    }
}

impl ToSchema for SpeechBody {
    fn schemas(schemas: &mut Vec<(String, RefOr<Schema>)>) {
        schemas.push((SpeechRequest::name().into(), SpeechRequest::schema()));
        <SpeechRequest as ToSchema>::schemas(schemas);
        schemas.push((
            MistralSpeechRequest::name().into(),
            MistralSpeechRequest::schema(),
        ));
        <MistralSpeechRequest as ToSchema>::schemas(schemas);
    }
}

/// `{"audio_data": "<base64>"}`: the audio file of a Mistral request (documentation only).
pub struct MistralAudio;

impl PartialSchema for MistralAudio {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new()
            .property(
                "audio_data",
                ObjectBuilder::new()
                    .schema_type(Type::String)
                    .description(Some("The audio file in `response_format`, base64")),
            )
            .required("audio_data")
            .into()
    }
}

impl ToSchema for MistralAudio {}

/// Generates speech from text, in OpenAI's shape or Mistral's.
///
/// OpenAI's (`SpeechRequest`, with `voice`): voices are the model's presets (see
/// /v1/audio/voices), custom voices as `{"id": "voice_..."}`, or OpenAI's names, which map to
/// the English presets: alloy, sage -> neutral_female; shimmer, marin -> casual_female;
/// coral, nova -> cheerful_female; echo, onyx, cedar -> neutral_male;
/// ash, ballad, fable, verse -> casual_male. The answer is the audio file.
///
/// Mistral's (`MistralSpeechRequest`: a body with `voice_id`, `ref_audio` or `stream`): the
/// voice is `voice_id` or a reference clip `ref_audio` (cloned by a model that clones, for
/// this request only); the answer is `{"audio_data": "<base64>"}`, or with `stream: true`
/// Server-Sent Events `event: speech.audio.delta` (`audio_data`) then `event:
/// speech.audio.done` (`usage`). Its `pcm` is 32-bit float. A body with `ref_audio` is held to
/// `max_body_bytes` as any other (raise it for long clips). Fields this server cannot honour (`phoneme_hints`, `conversation_history`, an `expressiveness`
/// other than the model's) get a 400 naming them.
#[utoipa::path(post, path = "/v1/audio/speech", tag = "audio", security(("api_key" = [])),
    request_body = SpeechBody,
    responses(
        (status = 200, description = "The audio (Content-Type by format: audio/mpeg, audio/opus, \
            audio/aac, audio/flac, audio/wav, audio/pcm), or text/event-stream for stream_format=sse; \
            for Mistral's shape JSON with base64 `audio_data`, or text/event-stream for stream=true",
            headers(("x-voxtral-seed" = u64, description = "The seed used")),
            content(
                (AudioFile = "audio/mpeg"), (AudioFile = "audio/opus"), (AudioFile = "audio/aac"),
                (AudioFile = "audio/flac"), (AudioFile = "audio/wav"), (AudioFile = "audio/pcm"),
                (MistralAudio = "application/json"), (SpeechEvents = "text/event-stream"),
            )),
        (status = 400, description = "A field is invalid (`param` names it)", body = ErrorResponse),
        (status = 401, description = "Missing or wrong API key (when keys are configured)", body = ErrorResponse),
        (status = 413, description = "Body larger than `max_body_bytes`", body = ErrorResponse),
        (status = 415, description = "Body not sent as application/json", body = ErrorResponse),
        (status = 422, description = "Body is not valid JSON", body = ErrorResponse),
        (status = 429, description = "The queue is full; see Retry-After", body = ErrorResponse),
        (status = 500, description = "Synthesis failed", body = ErrorResponse),
        (status = 503, description = "The model is loading, or the server is shutting down", body = ErrorResponse),
        (status = 504, description = "Not finished within `request_timeout_secs`", body = ErrorResponse),
    ))]
pub async fn create_speech(
    State(app): State<AppState>,
    headers: HeaderMap,
    body: Bytes,
) -> Result<Response, ApiError> {
    let received = Instant::now();
    json::require_json(&headers)?;
    if mistral::is_mistral(&body) {
        let request = MistralSpeech::read(json::parse(&body)?)?;
        let stream = request.stream;
        let (served, model, mut speech) = request.validate(&app).await?;
        if stream {
            speech.stream_format = Some(StreamFormat::Sse);
        }
        return speak(&app, &served, &model, speech, Shape::Mistral, received).await;
    }
    let request: SpeechRequest = json::parse(&body)?;
    let served = app.model_named(&request.model)?;
    let model = served.loaded()?;
    let mut speech = request.validate(app.config.max_input_chars, &model.card)?;
    if speech.stream_format.is_none() && reads_as_stream(&headers) {
        speech.stream_format = Some(StreamFormat::Audio);
    }
    speak(&app, served, &model, speech, Shape::OpenAi, received).await
}

/// Speaks a validated request and answers in `shape`.
async fn speak(
    app: &AppState,
    served: &ServedModel,
    model: &Arc<LoadedModel>,
    speech: Speech,
    shape: Shape,
    received: Instant,
) -> Result<Response, ApiError> {
    let prepared = prepare(app, &served.id, model, &speech).await?;
    let options = JobOptions {
        stream: speech.stream_format.is_some(),
        ..JobOptions::default()
    };
    let mut events = submit(served, prepared, options)?;
    // Errors before any audio (e.g. the tokenizer's limits) still get their status code.
    let first = first_audio(&mut events, &served.id).await?;
    let (format, speed, rate) = (speech.format, speech.speed, model.card.sample_rate);
    let mut response = match speech.stream_format {
        None => {
            let (pcm, summary) = collect_audio(first, events).await?;
            let audio = tokio::task::spawn_blocking(move || {
                let pcm = if speed == 1.0 {
                    pcm
                } else {
                    time_stretch(&pcm, speed, rate)
                };
                encode_audio(format, &pcm, rate)
            })
            .await
            .map_err(|e| ApiError::internal(format!("audio encoding stopped: {e}")))?
            .map_err(|e| ApiError::internal(format!("audio encoding failed: {e}")))?;
            metrics::histogram!(TIME_TO_FIRST_AUDIO, "model" => served.id.clone())
                .record(received.elapsed().as_secs_f64());
            tracing::info!(
                model = %speech.model,
                voice = %speech.voice,
                frames = summary.frames,
                stop = ?summary.stop,
                synthesis_ms = summary.synthesis_time.as_millis() as u64,
                %format,
                bytes = audio.len(),
                "speech done"
            );
            match shape {
                Shape::OpenAi => Response::builder()
                    .header(header::CONTENT_TYPE, format.content_type())
                    .body(Body::from(audio)),
                Shape::Mistral => {
                    let b64 = base64::engine::general_purpose::STANDARD.encode(&audio);
                    Ok(axum::Json(serde_json::json!({"audio_data": b64})).into_response())
                }
            }
        }
        Some(stream_format) => {
            metrics::histogram!(TIME_TO_FIRST_AUDIO, "model" => served.id.clone())
                .record(received.elapsed().as_secs_f64());
            let encoder = stream_encoder(format, rate)
                .map_err(|e| ApiError::internal(format!("audio encoding failed: {e}")))?;
            let streamer = Streamer::new(events, first, encoder, speed, rate);
            if stream_format == StreamFormat::Sse {
                Ok(stream::sse(streamer, shape).into_response())
            } else {
                Response::builder()
                    .header(header::CONTENT_TYPE, format.content_type())
                    .header(header::CACHE_CONTROL, "no-cache")
                    .body(stream::audio_body(streamer))
            }
        }
    }
    .expect("static headers are valid");
    response
        .headers_mut()
        .insert(SEED_HEADER, speech.seed.into());
    Ok(response)
}

/// Normalizes, splits and tokenizes a validated request of the served model `model_id`,
/// reading its custom voice if it names one (on the blocking pool: linear in the input, but
/// long inputs take milliseconds, and the voice is a file). Input the model cannot take is a
/// 400 here, before the request waits in any queue.
pub(crate) async fn prepare(
    app: &AppState,
    model_id: &str,
    model: &std::sync::Arc<LoadedModel>,
    speech: &Speech,
) -> Result<PreparedSpeech, ApiError> {
    let mut input = speech.input(app.config.normalize_text, app.config.segment_chars);
    input.conditioning.custom_voice = speech.reference.clone();
    let custom_voice = speech.custom_voice.then(|| speech.voice.clone());
    let (app, model_id, model) = (app.clone(), model_id.to_string(), model.clone());
    tokio::task::spawn_blocking(move || {
        if let Some(id) = custom_voice {
            let (meta, tensors) = app.custom_voice(&model_id, &id)?;
            // A request that names no language speaks the voice's, when it was given one.
            if input.conditioning.language.is_none() {
                input.conditioning.language = meta.language;
            }
            input.conditioning.custom_voice = Some(Arc::new(CustomVoice {
                id,
                transcript: meta.transcript,
                tensors,
            }));
        }
        prepare_speech(&*model.preparer, model.card.max_frames, input).map_err(|e| {
            let message = e.to_string();
            ApiError::invalid(e.param(), format!("{}.", message.trim_end_matches('.')))
        })
    })
    .await
    .map_err(|e| ApiError::internal(format!("text preparation stopped: {e}")))?
}

/// Queues a prepared synthesis on `model`'s worker (for the HTTP route and the Wyoming
/// listener alike).
pub(crate) fn submit(
    model: &ServedModel,
    speech: PreparedSpeech,
    options: JobOptions,
) -> Result<UnboundedReceiver<JobEvent>, ApiError> {
    model.queue.submit(speech, options).map_err(|e| match e {
        SubmitError::Full => ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            Some("queue_full"),
            format!(
                "The server is busy: {} requests are already waiting. Retry shortly.",
                model.queue.capacity()
            ),
        )
        .with_retry_after(1),
        SubmitError::WorkerStopped => ApiError::shutting_down(),
    })
}

/// The openai SDKs' `with_streaming_response` sends this header: the caller reads the body
/// while it arrives (pipecat, LiveKit, Home Assistant), as OpenAI streams every response.
const SDK_STREAM_HEADER: &str = "x-stainless-raw-response";

fn reads_as_stream(headers: &HeaderMap) -> bool {
    headers
        .get(SDK_STREAM_HEADER)
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"stream"))
}

/// The error a failed job gets (its input was checked before it was queued).
pub(crate) fn job_error(e: JobError) -> ApiError {
    ApiError::internal(format!("Synthesis failed: {e}"))
}

pub(crate) fn worker_stopped() -> ApiError {
    ApiError::internal("The inference worker stopped before finishing this request.")
}

/// Waits for the job's first audio; `None` when it finished without any.
pub(crate) async fn first_audio(
    events: &mut UnboundedReceiver<JobEvent>,
    model: &str,
) -> Result<Option<JobEvent>, ApiError> {
    while let Some(event) = events.recv().await {
        match event {
            JobEvent::Started { queued } => {
                metrics::histogram!(QUEUE_WAIT, "model" => model.to_string())
                    .record(queued.as_secs_f64());
            }
            JobEvent::Progress { .. } => {}
            JobEvent::Failed(e) => return Err(job_error(e)),
            event => return Ok(Some(event)),
        }
    }
    Err(worker_stopped())
}

/// Gathers the rest of the job's audio.
async fn collect_audio(
    first: Option<JobEvent>,
    mut events: UnboundedReceiver<JobEvent>,
) -> Result<(Vec<f32>, JobSummary), ApiError> {
    let mut pcm = Vec::new();
    let mut next = first;
    loop {
        let event = match next.take() {
            Some(event) => event,
            None => events.recv().await.ok_or_else(worker_stopped)?,
        };
        match event {
            JobEvent::Started { .. } | JobEvent::Progress { .. } => {}
            JobEvent::Audio(chunk) => pcm.extend(chunk),
            JobEvent::Done(summary) => return Ok((pcm, summary)),
            JobEvent::Failed(e) => return Err(job_error(e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::models::voxtral_tts::catalog::example_card;

    #[test]
    fn parse_speech_body_statuses() {
        let model = example_card(&["fr_male"]);
        let ok = br#"{"model": "tts-1", "input": "Salut", "voice": "fr_male", "seed": 3}"#;
        let speech = parse_speech_body(ok, 10, &model).unwrap();
        assert_eq!((speech.seed, speech.voice.as_str()), (3, "fr_male"));
        let err = |body: &[u8]| parse_speech_body(body, 10, &model).err().unwrap();
        assert_eq!(
            err(b"{\"model\": ").status,
            StatusCode::UNPROCESSABLE_ENTITY
        );
        let bad = err(br#"{"model": "x", "input": "Hi", "voice": "fr_male", "speed": "x"}"#);
        assert_eq!(
            (bad.status, bad.param.as_deref()),
            (StatusCode::BAD_REQUEST, Some("speed"))
        );
        let long = err(br#"{"model": "x", "input": "far too long here", "voice": "fr_male"}"#);
        assert_eq!(long.param.as_deref(), Some("input"));
    }
}
