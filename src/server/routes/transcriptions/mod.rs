//! `POST /v1/audio/transcriptions`: OpenAI's speech-to-text endpoint over a speech-to-text
//! model (docs/voxtral-realtime-spec.md, section A), and Mistral's shape of it (`mistral.rs`).

mod mistral;

use crate::audio::input::{decode_to_rate, AudioInputError, DecodeLimits};
use crate::engine::stt::{segments, TimedText};
use crate::scheduler::transcription::{
    TimedTranscript, TranscriptionEvent, TranscriptionJob, TranscriptionSubmitError,
};
use crate::server::error::ApiError;
use crate::server::state::AppState;
use crate::text::subtitles::{srt, vtt, Cue};
use axum::extract::{FromRequest, Multipart, Request, State};
use axum::http::{header, StatusCode};
use axum::response::sse::{Event, Sse};
use axum::response::{IntoResponse, Response};
use axum::Json;
use futures_util::StreamExt;
use serde_json::{json, Value};
use std::convert::Infallible;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

/// The fields of the multipart form this endpoint reads.
#[derive(Default)]
struct Form {
    file: Option<Vec<u8>>,
    model: Option<String>,
    response_format: Option<String>,
    temperature: Option<String>,
    stream: Option<String>,
    /// Mistral's fields, when the form has any.
    mistral: mistral::Fields,
}

#[derive(Clone, Copy, PartialEq)]
enum Format {
    Json,
    Text,
    Srt,
    Vtt,
    VerboseJson,
}

impl Format {
    fn parse(name: Option<&str>) -> Result<Format, ApiError> {
        Ok(match name.unwrap_or("json") {
            "json" => Format::Json,
            "text" => Format::Text,
            "srt" => Format::Srt,
            "vtt" => Format::Vtt,
            "verbose_json" => Format::VerboseJson,
            other => {
                return Err(ApiError::invalid(
                    "response_format",
                    format!(
                        "response_format {other:?}: expected json, text, srt, vtt or verbose_json"
                    ),
                ))
            }
        })
    }
}

impl Form {
    fn set(&mut self, name: &str, value: String) {
        if let Some(known) = mistral::FIELDS.iter().find(|f| **f == name) {
            self.mistral.entry(*known).or_default().push(value);
            return;
        }
        match name {
            "model" => self.model = Some(value),
            "response_format" => self.response_format = Some(value),
            "temperature" => self.temperature = Some(value),
            "stream" => self.stream = Some(value),
            // `language` and `prompt` are accepted and unused: the model has no input for
            // them. Other OpenAI fields (`timestamp_granularities[]`, `include[]`,
            // `chunking_strategy`) are accepted and ignored too.
            _ => {}
        }
    }
}

/// The form, multipart (OpenAI's, and Mistral's with a `file`) or URL-encoded (what
/// Mistral's SDK sends when it has no file to attach).
async fn read_form(request: Request, app: &AppState) -> Result<Form, ApiError> {
    let urlencoded = request
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/x-www-form-urlencoded"));
    let mut form = Form::default();
    if urlencoded {
        let axum::Form(fields) = axum::Form::<Vec<(String, String)>>::from_request(request, app)
            .await
            .map_err(|e| ApiError::new(e.status(), Some("invalid_form"), e.body_text()))?;
        for (name, value) in fields {
            form.set(&name, value);
        }
        return Ok(form);
    }
    let mut multipart = Multipart::from_request(request, app)
        .await
        .map_err(|e| ApiError::new(e.status(), Some("invalid_multipart"), e.body_text()))?;
    let bad = |e: axum::extract::multipart::MultipartError| {
        ApiError::new(e.status(), Some("invalid_multipart"), e.body_text())
    };
    while let Some(field) = multipart.next_field().await.map_err(bad)? {
        let name = field.name().unwrap_or("").to_string();
        if name == "file" {
            form.file = Some(field.bytes().await.map_err(bad)?.to_vec());
            continue;
        }
        let value = field.text().await.map_err(bad)?;
        form.set(&name, value);
    }
    Ok(form)
}

fn parse_flag(value: Option<&str>) -> Result<bool, ApiError> {
    match value.unwrap_or("false") {
        "true" | "True" | "1" => Ok(true),
        "false" | "False" | "0" | "" => Ok(false),
        other => Err(ApiError::invalid(
            "stream",
            format!("stream {other:?}: expected true or false"),
        )),
    }
}

/// Only greedy decoding exists: 0 to 1 is accepted (and decodes greedily), anything else 400.
fn check_temperature(value: Option<&str>) -> Result<(), ApiError> {
    let Some(value) = value.filter(|v| !v.is_empty()) else {
        return Ok(());
    };
    match value.parse::<f64>() {
        Ok(t) if (0.0..=1.0).contains(&t) => Ok(()),
        _ => Err(ApiError::invalid(
            "temperature",
            format!("temperature {value:?}: expected a number from 0 to 1"),
        )),
    }
}

fn audio_error(e: AudioInputError) -> ApiError {
    match e {
        AudioInputError::Internal(message) => ApiError::internal(message),
        AudioInputError::TooLarge { .. } => ApiError {
            param: Some("file".into()),
            ..ApiError::new(StatusCode::PAYLOAD_TOO_LARGE, Some(e.code()), e.to_string())
        },
        _ => ApiError {
            param: Some("file".into()),
            ..ApiError::new(StatusCode::BAD_REQUEST, Some(e.code()), e.to_string())
        },
    }
}

/// Transcribes an audio file, in OpenAI's shape or Mistral's.
///
/// A multipart form as OpenAI's: `file` (WAV, MP3, FLAC, Ogg or WebM, any sample rate,
/// resampled to the model's 16 kHz), `model` (a speech-to-text model's id), and optionally
/// `response_format` (`json`, the default, `text`, `srt`, `vtt` or `verbose_json`) and
/// `stream` (`true`: Server-Sent Events `transcript.text.delta` then `transcript.text.done`).
/// Decoding is greedy: `temperature` from 0 to 1 is accepted and changes nothing. `language`
/// and `prompt` are accepted and ignored: Voxtral Realtime has no language or prompt input.
/// Times in `verbose_json`, `srt` and `vtt` come from the tokens: each token stands for 80 ms
/// of audio (an approximation).
///
/// A form with one of Mistral's fields (`diarize`, `timestamp_granularities`, `context_bias`,
/// `speaker_references`, `file_url`, `file_id`; Mistral's SDK always sends `diarize`) is
/// answered in Mistral's shape: `{"model", "text", "language": null, "segments", "usage"}`,
/// where `timestamp_granularities` `segment` makes `segments` the sentences with their times,
/// and `word` the words (and adds `words`, OpenAI's shape of them); with `stream=true`, events
/// `transcription.text.delta` (`text`), `transcription.segment` per segment asked for, then
/// `transcription.done` (the response). `diarize=true`, `speaker_references`,
/// `context_bias`, `file_url` and `file_id` get a 400 naming them: the model has no input
/// for them, and the audio comes as `file`.
#[utoipa::path(post, path = "/v1/audio/transcriptions", tag = "audio", security(("api_key" = [])),
    request_body(content_type = "multipart/form-data", description = "file, model, response_format, temperature, stream, language, prompt; Mistral's diarize, timestamp_granularities"),
    responses(
        (status = 200, description = "The transcript: JSON, plain text, SubRip, WebVTT, or text/event-stream when stream=true"),
        (status = 400, description = "A missing, empty or undecodable file, a bad field, or a model that does not transcribe", body = crate::server::error::ErrorResponse),
        (status = 404, description = "No model of that name", body = crate::server::error::ErrorResponse),
        (status = 413, description = "The file is too large", body = crate::server::error::ErrorResponse),
        (status = 429, description = "The model's queue is full", body = crate::server::error::ErrorResponse),
        (status = 503, description = "The model is loading", body = crate::server::error::ErrorResponse)))]
pub async fn create_transcription(
    State(app): State<AppState>,
    request: Request,
) -> Result<Response, ApiError> {
    let arrived = Instant::now();
    let form = read_form(request, &app).await?;
    let model_name = form
        .model
        .as_deref()
        .filter(|m| !m.is_empty())
        .ok_or_else(|| ApiError::invalid("model", "model is required"))?;
    let served = app.transcriber_named(model_name)?;
    let mistral = mistral::Options::read(&form.mistral, form.response_format.as_deref())?;
    let format = Format::parse(form.response_format.as_deref())?;
    let stream = parse_flag(form.stream.as_deref())?;
    check_temperature(form.temperature.as_deref())?;
    if stream && format != Format::Json && format != Format::Text {
        return Err(ApiError::invalid(
            "stream",
            "stream=true is for response_format json or text",
        ));
    }
    let bytes = form
        .file
        .ok_or_else(|| ApiError::invalid("file", "file is required"))?;
    let card = served.loaded()?;
    let limits = DecodeLimits::new(
        app.config.max_transcription_bytes,
        Duration::from_secs_f64(card.max_audio_seconds),
    );
    let audio =
        tokio::task::spawn_blocking(move || decode_to_rate(&bytes, card.sample_rate, &limits))
            .await
            .map_err(|e| ApiError::internal(e.to_string()))?
            .map_err(audio_error)?;
    let (events, mut received) = mpsc::unbounded_channel();
    served
        .queue
        .try_submit(TranscriptionJob {
            audio: audio.samples,
            events,
            received: arrived,
        })
        .map_err(|e| match e {
            TranscriptionSubmitError::Full(_) => ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                Some("queue_full"),
                e.to_string(),
            )
            .with_retry_after(1),
            TranscriptionSubmitError::Stopped => ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                Some("worker_stopped"),
                e.to_string(),
            ),
        })?;
    if stream {
        return Ok(match mistral {
            Some(options) => mistral::sse(received, options, served.id.clone()).into_response(),
            None => sse(received).into_response(),
        });
    }
    loop {
        match received.recv().await {
            Some(TranscriptionEvent::Delta(_)) => {}
            Some(TranscriptionEvent::Done(transcript)) => {
                return Ok(match &mistral {
                    Some(options) => {
                        Json(options.response(&served.id, &transcript)).into_response()
                    }
                    None => respond(format, &transcript),
                })
            }
            Some(TranscriptionEvent::Failed(message)) => {
                return Err(ApiError::invalid("file", message))
            }
            None => return Err(ApiError::internal("the transcription worker stopped")),
        }
    }
}

fn usage(transcript: &TimedTranscript) -> Value {
    json!({"type": "duration", "seconds": transcript.audio_seconds})
}

fn cues(segments: &[TimedText]) -> Vec<Cue<'_>> {
    segments
        .iter()
        .map(|s| Cue {
            text: &s.text,
            start: s.start,
            end: s.end,
        })
        .collect()
}

fn respond(format: Format, transcript: &TimedTranscript) -> Response {
    let segments = segments(&transcript.words);
    let plain =
        |body: String, mime: &'static str| ([(header::CONTENT_TYPE, mime)], body).into_response();
    match format {
        Format::Json => {
            Json(json!({"text": transcript.text, "usage": usage(transcript)})).into_response()
        }
        Format::Text => plain(
            format!("{}\n", transcript.text),
            "text/plain; charset=utf-8",
        ),
        Format::Srt => plain(srt(&cues(&segments)), "application/x-subrip; charset=utf-8"),
        Format::Vtt => plain(vtt(&cues(&segments)), "text/vtt; charset=utf-8"),
        Format::VerboseJson => Json(verbose_json(transcript, &segments)).into_response(),
    }
}

fn verbose_json(transcript: &TimedTranscript, segments: &[TimedText]) -> Value {
    let segments: Vec<Value> = segments
        .iter()
        .enumerate()
        .map(|(id, s)| {
            json!({"id": id, "seek": 0, "start": s.start, "end": s.end, "text": s.text,
                   "tokens": [], "temperature": 0.0, "avg_logprob": 0.0,
                   "compression_ratio": 0.0, "no_speech_prob": 0.0})
        })
        .collect();
    let words: Vec<Value> = transcript
        .words
        .iter()
        .map(|w| json!({"word": w.text, "start": w.start, "end": w.end}))
        .collect();
    json!({"task": "transcribe", "duration": transcript.audio_seconds, "language": "",
           "text": transcript.text, "segments": segments, "words": words,
           "usage": usage(transcript)})
}

/// `transcript.text.delta` per piece of text, then `transcript.text.done` with the whole
/// text and usage; a failure mid-way is an `error` event.
fn sse(
    received: mpsc::UnboundedReceiver<TranscriptionEvent>,
) -> Sse<impl futures_util::Stream<Item = Result<Event, Infallible>>> {
    let received = futures_util::stream::unfold(received, |mut rx| async move {
        rx.recv().await.map(|event| (event, rx))
    });
    let events = received.map(|event| {
        let data = match event {
            TranscriptionEvent::Delta(delta) => {
                json!({"type": "transcript.text.delta", "delta": delta})
            }
            TranscriptionEvent::Done(t) => {
                json!({"type": "transcript.text.done", "text": t.text, "usage": usage(&t)})
            }
            TranscriptionEvent::Failed(message) => {
                json!({"type": "error", "error": {"message": message, "type": "invalid_request_error"}})
            }
        };
        Ok(Event::default().data(data.to_string()))
    });
    Sse::new(events)
}
