//! `POST /v1/audio/speech`: validate -> queue a job -> collect its PCM -> time-stretch and
//! encode (on the blocking pool) -> audio body or Server-Sent Events.

mod request;

use request::SpeechRequest;
pub use request::{Speech, StreamFormat};

use crate::audio::{
    encode_audio, stream_encoder, time_stretch, AudioError, AudioFormat, StreamEncoder,
};
use crate::models::voxtral_tts::{SynthError, SynthesisRequest};
use crate::scheduler::{JobError, JobEvent, JobOptions, JobSummary, ModelInfo, SubmitError};
use crate::server::error::{ApiError, ErrorDetail, ErrorResponse};
use crate::server::json::JsonBody;
use crate::server::metrics::{QUEUE_WAIT, TIME_TO_FIRST_AUDIO};
use crate::server::state::AppState;
use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::Response;
use base64::Engine;
use bytes::Bytes;
use serde::Serialize;
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
    model: &ModelInfo,
) -> Result<Speech, ApiError> {
    crate::server::json::parse::<SpeechRequest>(body)?.validate(max_input_chars, model)
}

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
    #[serde(rename = "error")]
    Error { error: ErrorDetail },
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
    headers: HeaderMap,
    JsonBody(request): JsonBody<SpeechRequest>,
) -> Result<Response, ApiError> {
    let received = Instant::now();
    let model = app.model()?;
    let mut speech = request.validate(app.config.max_input_chars, &model)?;
    if speech.stream_format.is_none() && reads_as_stream(&headers) {
        speech.stream_format = Some(StreamFormat::Audio);
    }
    let voice = speech.synthesis.voice.clone();
    let options = JobOptions {
        normalize_text: speech.normalize,
        stream: speech.stream_format.is_some(),
    };
    let mut events = submit(&app, speech.synthesis, options)?;
    // Errors before any audio (e.g. the tokenizer's limits) still get their status code.
    let first = first_audio(&mut events).await?;
    let (format, speed) = (speech.format, speech.speed);
    let mut response = match speech.stream_format {
        None => {
            let (pcm, summary) = collect_audio(first, events).await?;
            let audio = tokio::task::spawn_blocking(move || {
                let pcm = if speed == 1.0 {
                    pcm
                } else {
                    time_stretch(&pcm, speed, 24_000)
                };
                encode_audio(format, &pcm, 24_000)
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
            Response::builder()
                .header(header::CONTENT_TYPE, format.content_type())
                .body(Body::from(audio))
        }
        Some(stream_format) => {
            metrics::histogram!(TIME_TO_FIRST_AUDIO).record(received.elapsed().as_secs_f64());
            let encoder = stream_encoder(format, 24_000)
                .map_err(|e| ApiError::internal(format!("audio encoding failed: {e}")))?;
            let sse = stream_format == StreamFormat::Sse;
            let streamer = Streamer {
                events,
                pending: first,
                encoder: Some(encoder),
                speed,
                held: Vec::new(),
                sse,
                done: false,
                format,
            };
            let body =
                Body::from_stream(futures_util::stream::unfold(streamer, |mut s| async move {
                    s.next_item().await.map(|item| (item, s))
                }));
            let content_type = if sse {
                "text/event-stream"
            } else {
                format.content_type()
            };
            Response::builder()
                .header(header::CONTENT_TYPE, content_type)
                .header(header::CACHE_CONTROL, "no-cache")
                .body(body)
        }
    }
    .expect("static headers are valid");
    response
        .headers_mut()
        .insert(SEED_HEADER, speech.seed.into());
    Ok(response)
}

/// Queues a validated synthesis (for the HTTP route and the Wyoming listener alike).
pub(crate) fn submit(
    app: &AppState,
    synthesis: SynthesisRequest,
    options: JobOptions,
) -> Result<UnboundedReceiver<JobEvent>, ApiError> {
    app.queue.submit(synthesis, options).map_err(|e| match e {
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

/// The error a failed job gets, before any audio was sent.
pub(crate) fn job_error(e: JobError) -> ApiError {
    match e {
        // Limits only the tokenizer can check: the text's fault, not the server's.
        JobError::Synthesis(e @ (SynthError::TooLong { .. } | SynthError::EmptyText)) => {
            ApiError::invalid("input", e.to_string())
        }
        e => ApiError::internal(format!("Synthesis failed: {e}")),
    }
}

pub(crate) fn worker_stopped() -> ApiError {
    ApiError::internal("The inference worker stopped before finishing this request.")
}

/// Waits for the job's first audio; `None` when it finished without any.
pub(crate) async fn first_audio(
    events: &mut UnboundedReceiver<JobEvent>,
) -> Result<Option<JobEvent>, ApiError> {
    while let Some(event) = events.recv().await {
        match event {
            JobEvent::Started { queued } => {
                metrics::histogram!(QUEUE_WAIT).record(queued.as_secs_f64());
            }
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
            JobEvent::Started { .. } => {}
            JobEvent::Audio(chunk) => pcm.extend(chunk),
            JobEvent::Done(summary) => return Ok((pcm, summary)),
            JobEvent::Failed(e) => return Err(job_error(e)),
        }
    }
}

/// A streamed response: encodes each audio chunk as it arrives. Dropping it (the client
/// went away) drops the job's receiver, which stops the job at its next frame.
struct Streamer {
    events: UnboundedReceiver<JobEvent>,
    pending: Option<JobEvent>,
    encoder: Option<Box<dyn StreamEncoder>>,
    /// With a speed change the audio is stretched as a whole, so it is held until the end.
    speed: f32,
    held: Vec<f32>,
    sse: bool,
    done: bool,
    format: AudioFormat,
}

impl Streamer {
    async fn next_item(&mut self) -> Option<Result<Bytes, std::io::Error>> {
        if self.done {
            return None;
        }
        loop {
            let event = match self.pending.take() {
                Some(event) => event,
                None => match self.events.recv().await {
                    Some(event) => event,
                    None => return Some(self.fail(worker_stopped())),
                },
            };
            let result = match event {
                JobEvent::Started { .. } => continue,
                JobEvent::Audio(pcm) if self.speed != 1.0 => {
                    self.held.extend(pcm);
                    continue;
                }
                JobEvent::Audio(pcm) => match self.encoder.as_mut().map(|e| e.push(&pcm)) {
                    Some(Ok(bytes)) if bytes.is_empty() => continue,
                    Some(Ok(bytes)) => Ok(self.wrap(&bytes, None)),
                    Some(Err(e)) => Err(e),
                    None => continue,
                },
                JobEvent::Done(summary) => {
                    self.done = true;
                    self.finish().map(|bytes| self.wrap(&bytes, Some(&summary)))
                }
                JobEvent::Failed(e) => return Some(self.fail(job_error(e))),
            };
            return Some(match result {
                Ok(bytes) => Ok(bytes),
                Err(e) => self.fail(ApiError::internal(format!("audio encoding failed: {e}"))),
            });
        }
    }

    /// The encoder's last bytes (after the held audio, with a speed change).
    fn finish(&mut self) -> Result<Vec<u8>, AudioError> {
        let Some(mut encoder) = self.encoder.take() else {
            return Ok(Vec::new());
        };
        let mut bytes = Vec::new();
        if self.speed != 1.0 {
            let pcm = time_stretch(&std::mem::take(&mut self.held), self.speed, 24_000);
            bytes = encoder.push(&pcm)?;
        }
        bytes.extend(encoder.finish()?);
        Ok(bytes)
    }

    /// Encoded audio as sent: raw, or as SSE delta events (and the done event at the end).
    fn wrap(&self, bytes: &[u8], done: Option<&JobSummary>) -> Bytes {
        if !self.sse {
            return Bytes::copy_from_slice(bytes);
        }
        let b64 = base64::engine::general_purpose::STANDARD;
        let mut body = String::new();
        for chunk in bytes.chunks(SSE_CHUNK_BYTES) {
            push_event(
                &mut body,
                &SseEvent::Delta {
                    audio: &b64.encode(chunk),
                },
            );
        }
        if let Some(summary) = done {
            push_event(
                &mut body,
                &SseEvent::Done {
                    usage: Usage {
                        input_tokens: summary.prompt_tokens,
                        output_tokens: summary.frames,
                        total_tokens: summary.prompt_tokens + summary.frames,
                    },
                },
            );
            tracing::info!(frames = summary.frames, format = %self.format, "speech streamed");
        }
        Bytes::from(body)
    }

    /// Ends the stream after an error: an SSE error event, or (raw audio, where the status
    /// was already sent) a cut connection.
    fn fail(&mut self, error: ApiError) -> Result<Bytes, std::io::Error> {
        self.done = true;
        tracing::warn!(message = %error.message, "speech stream failed");
        if self.sse {
            let mut body = String::new();
            push_event(
                &mut body,
                &SseEvent::Error {
                    error: ErrorDetail {
                        kind: error.kind(),
                        message: error.message,
                        param: error.param,
                        code: error.code,
                    },
                },
            );
            Ok(Bytes::from(body))
        } else {
            Err(std::io::Error::other(error.message))
        }
    }
}

fn push_event(body: &mut String, event: &SseEvent) {
    body.push_str("data: ");
    body.push_str(&serde_json::to_string(event).expect("serializable"));
    body.push_str("\n\n");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::models::voxtral_tts::StopReason;
    use std::time::Duration;

    #[test]
    fn parse_speech_body_statuses() {
        let model = ModelInfo {
            voices: vec!["fr_male".into()],
            sample_rate: 24_000,
            device: "Cpu".into(),
        };
        let ok = br#"{"model": "tts-1", "input": "Salut", "voice": "fr_male", "seed": 3}"#;
        let speech = parse_speech_body(ok, 10, &model).unwrap();
        assert_eq!(
            (speech.seed, speech.synthesis.voice.as_str()),
            (3, "fr_male")
        );
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

    fn streamer(sse: bool, events: UnboundedReceiver<JobEvent>) -> Streamer {
        Streamer {
            events,
            pending: None,
            encoder: Some(stream_encoder(AudioFormat::Pcm, 24_000).unwrap()),
            speed: 1.0,
            held: Vec::new(),
            sse,
            done: false,
            format: AudioFormat::Pcm,
        }
    }

    async fn drain(mut s: Streamer) -> Vec<Result<Bytes, std::io::Error>> {
        let mut items = Vec::new();
        while let Some(item) = s.next_item().await {
            items.push(item);
        }
        items
    }

    #[tokio::test]
    async fn an_error_after_audio_is_an_sse_error_event() {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        tx.send(JobEvent::Audio(vec![0.5; 4])).unwrap();
        tx.send(JobEvent::Failed(JobError::Panicked("boom".into())))
            .unwrap();
        let items = drain(streamer(true, rx)).await;
        assert_eq!(items.len(), 2);
        let text: Vec<String> = items
            .into_iter()
            .map(|i| String::from_utf8(i.unwrap().to_vec()).unwrap())
            .collect();
        assert!(text[0].starts_with("data: {\"type\":\"speech.audio.delta\""));
        let error: serde_json::Value =
            serde_json::from_str(text[1].strip_prefix("data: ").unwrap().trim()).unwrap();
        assert_eq!(error["type"], "error");
        assert_eq!(error["error"]["type"], "server_error");
        assert!(error["error"]["message"].as_str().unwrap().contains("boom"));
    }

    #[tokio::test]
    async fn an_error_after_audio_cuts_a_raw_stream_and_done_ends_it() {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        tx.send(JobEvent::Audio(vec![0.5; 4])).unwrap();
        drop(tx);
        let items = drain(streamer(false, rx)).await;
        assert_eq!(items[0].as_ref().unwrap().len(), 8);
        assert!(items[1].is_err(), "the worker went away: the stream errors");
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        tx.send(JobEvent::Audio(vec![0.5; 4])).unwrap();
        tx.send(JobEvent::Done(JobSummary {
            prompt_tokens: 3,
            frames: 1,
            stop: StopReason::EndAudio,
            synthesis_time: Duration::ZERO,
        }))
        .unwrap();
        let items = drain(streamer(true, rx)).await;
        let last = String::from_utf8(items.last().unwrap().as_ref().unwrap().to_vec()).unwrap();
        assert!(last.contains("\"total_tokens\":4"), "{last}");
    }
}
