//! `POST /v1/audio/speech`: validate -> queue a job -> collect its PCM -> time-stretch and
//! encode (on the blocking pool) -> audio body or Server-Sent Events.

mod request;
mod stream;

use request::SpeechRequest;
pub use request::{Speech, StreamFormat};
use stream::Streamer;

use crate::audio::{encode_audio, stream_encoder, time_stretch};
use crate::engine::{prepare_speech, CustomVoice, ModelCard, PreparedSpeech};
use crate::scheduler::{JobError, JobEvent, JobOptions, JobSummary, LoadedModel, SubmitError};
use crate::server::error::{ApiError, ErrorResponse};
use crate::server::json::JsonBody;
use crate::server::metrics::{QUEUE_WAIT, TIME_TO_FIRST_AUDIO};
use crate::server::state::{AppState, ServedModel};
use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::mpsc::UnboundedReceiver;
use utoipa::openapi::schema::{KnownFormat, ObjectBuilder, Schema, SchemaFormat, Type};
use utoipa::openapi::RefOr;
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
    crate::server::json::parse::<SpeechRequest>(body)?.validate(max_input_chars, model)
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
/// `data: {"type": "speech.audio.done", "usage": {...}}` (documentation only).
pub struct SpeechEvents;

impl PartialSchema for SpeechEvents {
    fn schema() -> RefOr<Schema> {
        ObjectBuilder::new()
            .schema_type(Type::String)
            .description(Some(
                "`data: {\"type\": \"speech.audio.delta\", \"audio\": \"<base64>\"}` events, \
                 then `data: {\"type\": \"speech.audio.done\", \"usage\": {\"input_tokens\", \
                 \"output_tokens\", \"total_tokens\"}}`",
            ))
            .into()
    }
}

impl ToSchema for SpeechEvents {}

/// Generates speech from text with one of the preset voices.
///
/// Voices: the model's presets (see /v1/audio/voices) or OpenAI's names, which map to the
/// English presets: alloy, sage -> neutral_female; shimmer, marin -> casual_female;
/// coral, nova -> cheerful_female; echo, onyx, cedar -> neutral_male;
/// ash, ballad, fable, verse -> casual_male.
#[utoipa::path(post, path = "/v1/audio/speech", tag = "audio", security(("api_key" = [])),
    request_body = SpeechRequest,
    responses(
        (status = 200, description = "The audio (Content-Type by format: audio/mpeg, audio/opus, \
            audio/aac, audio/flac, audio/wav, audio/pcm), or text/event-stream for stream_format=sse",
            headers(("x-voxtral-seed" = u64, description = "The seed used")),
            content(
                (AudioFile = "audio/mpeg"), (AudioFile = "audio/opus"), (AudioFile = "audio/aac"),
                (AudioFile = "audio/flac"), (AudioFile = "audio/wav"), (AudioFile = "audio/pcm"),
                (SpeechEvents = "text/event-stream"),
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
    JsonBody(request): JsonBody<SpeechRequest>,
) -> Result<Response, ApiError> {
    let received = Instant::now();
    let served = app.model_named(&request.model)?;
    let model = served.loaded()?;
    let mut speech = request.validate(app.config.max_input_chars, &model.card)?;
    if speech.stream_format.is_none() && reads_as_stream(&headers) {
        speech.stream_format = Some(StreamFormat::Audio);
    }
    let prepared = prepare(&app, &served.id, &model, &speech).await?;
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
            Response::builder()
                .header(header::CONTENT_TYPE, format.content_type())
                .body(Body::from(audio))
        }
        Some(stream_format) => {
            metrics::histogram!(TIME_TO_FIRST_AUDIO, "model" => served.id.clone())
                .record(received.elapsed().as_secs_f64());
            let encoder = stream_encoder(format, rate)
                .map_err(|e| ApiError::internal(format!("audio encoding failed: {e}")))?;
            let streamer = Streamer::new(events, first, encoder, speed, rate);
            if stream_format == StreamFormat::Sse {
                Ok(stream::sse(streamer).into_response())
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
