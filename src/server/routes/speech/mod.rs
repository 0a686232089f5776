//! `POST /v1/audio/speech`: validate -> queue a job -> collect its PCM -> time-stretch and
//! encode (on the blocking pool) -> audio body or Server-Sent Events.

mod request;

use request::{SpeechRequest, StreamFormat};

use crate::audio::{encode_audio, time_stretch};
use crate::infer::{JobError, JobEvent, JobSummary, SubmitError};
use crate::model::SynthError;
use crate::server::error::{ApiError, ErrorResponse};
use crate::server::json::JsonBody;
use crate::server::metrics::{QUEUE_WAIT, TIME_TO_FIRST_AUDIO};
use crate::server::state::AppState;
use axum::body::Body;
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::Response;
use base64::Engine;
use serde::Serialize;
use std::time::Instant;
use tokio::sync::mpsc::UnboundedReceiver;
use utoipa::openapi::schema::{KnownFormat, ObjectBuilder, Schema, SchemaFormat, Type};
use utoipa::openapi::RefOr;
use utoipa::{PartialSchema, ToSchema};

/// Response header carrying the seed a synthesis used (random unless the request set one).
pub const SEED_HEADER: &str = "x-voxtral-seed";

/// Encoded audio per `speech.audio.delta` event (even, so PCM samples never split).
const SSE_CHUNK_BYTES: usize = 16 * 1024;

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

#[derive(Serialize)]
#[serde(tag = "type")]
enum SseEvent<'a> {
    #[serde(rename = "speech.audio.delta")]
    Delta { audio: &'a str },
    #[serde(rename = "speech.audio.done")]
    Done { usage: Usage },
}

/// Usage in OpenAI's terms: prompt tokens in, audio frames out.
#[derive(Serialize)]
struct Usage {
    input_tokens: usize,
    output_tokens: usize,
    total_tokens: usize,
}

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
    JsonBody(request): JsonBody<SpeechRequest>,
) -> Result<Response, ApiError> {
    let received = Instant::now();
    let model = app.model()?;
    let speech = request.validate(app.config.max_input_chars, &model)?;
    let voice = speech.synthesis.voice.clone();
    let events = app.queue.submit(speech.synthesis).map_err(|e| match e {
        SubmitError::Full => ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            Some("queue_full"),
            format!(
                "The server is busy: {} requests are already waiting. Retry shortly.",
                app.queue.capacity()
            ),
        )
        .with_retry_after(1),
        SubmitError::WorkerStopped => ApiError::shutting_down(),
    })?;
    let (pcm, summary) = collect_audio(events).await?;
    let (format, speed) = (speech.format, speech.speed);
    let audio = tokio::task::spawn_blocking(move || {
        let pcm = if speed == 1.0 {
            pcm
        } else {
            time_stretch(&pcm, speed)
        };
        encode_audio(format, &pcm)
    })
    .await
    .map_err(|e| ApiError::internal(format!("audio encoding stopped: {e}")))?
    .map_err(|e| ApiError::internal(format!("audio encoding failed: {e}")))?;
    metrics::histogram!(TIME_TO_FIRST_AUDIO).record(received.elapsed().as_secs_f64());
    tracing::info!(
        model = %speech.model,
        voice = %voice,
        frames = summary.frames,
        stop = ?summary.stop,
        synthesis_ms = summary.synthesis_time.as_millis() as u64,
        %format,
        bytes = audio.len(),
        "speech done"
    );
    let response = match speech.stream_format {
        StreamFormat::Audio => Response::builder()
            .header(header::CONTENT_TYPE, format.content_type())
            .body(Body::from(audio)),
        StreamFormat::Sse => Response::builder()
            .header(header::CONTENT_TYPE, "text/event-stream")
            .header(header::CACHE_CONTROL, "no-cache")
            .body(Body::from(sse_body(&audio, &summary))),
    };
    let mut response = response.expect("static headers are valid");
    response
        .headers_mut()
        .insert(SEED_HEADER, speech.seed.into());
    Ok(response)
}

/// Waits for the job's events and gathers its audio.
async fn collect_audio(
    mut events: UnboundedReceiver<JobEvent>,
) -> Result<(Vec<f32>, JobSummary), ApiError> {
    let mut pcm = Vec::new();
    while let Some(event) = events.recv().await {
        match event {
            JobEvent::Started { queued } => {
                metrics::histogram!(QUEUE_WAIT).record(queued.as_secs_f64());
            }
            JobEvent::Audio(chunk) => pcm.extend(chunk),
            JobEvent::Done(summary) => return Ok((pcm, summary)),
            // Limits only the tokenizer can check: the text's fault, not the server's.
            JobEvent::Failed(JobError::Synthesis(
                e @ (SynthError::TooLong { .. } | SynthError::EmptyText),
            )) => return Err(ApiError::invalid("input", e.to_string())),
            JobEvent::Failed(e) => {
                return Err(ApiError::internal(format!("Synthesis failed: {e}")))
            }
        }
    }
    Err(ApiError::internal(
        "The inference worker stopped before finishing this request.",
    ))
}

/// OpenAI's speech SSE stream, made from the finished audio.
fn sse_body(audio: &[u8], summary: &JobSummary) -> String {
    let b64 = base64::engine::general_purpose::STANDARD;
    let mut body = String::new();
    let mut push = |event: &SseEvent| {
        body.push_str("data: ");
        body.push_str(&serde_json::to_string(event).expect("serializable"));
        body.push_str("\n\n");
    };
    for chunk in audio.chunks(SSE_CHUNK_BYTES) {
        push(&SseEvent::Delta {
            audio: &b64.encode(chunk),
        });
    }
    push(&SseEvent::Done {
        usage: Usage {
            input_tokens: summary.prompt_tokens,
            output_tokens: summary.frames,
            total_tokens: summary.prompt_tokens + summary.frames,
        },
    });
    body
}
