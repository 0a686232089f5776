//! `GET /v1/audio/transcriptions/realtime?model=`: Mistral's realtime transcription over a
//! WebSocket (docs.mistral.ai, Studio > Audio > Speech to text > Realtime; messages as the
//! `mistralai` Python SDK's `extra/realtime/transcription.py` and `connection.py` send and
//! parse them, with the models `realtimetranscriptionsession*.py`,
//! `realtimetranscriptioninputaudio*.py`, `transcriptionstreamtextdelta.py` and
//! `transcriptionstreamdone.py`), on the live sessions of a Voxtral Realtime model
//! (`scheduler::transcription::live`), the engine path of `/v1/realtime`.
//!
//! Raw PCM in the session's `audio_format` comes in with `input_audio.append` (base64), is
//! resampled to the model's 16 kHz as it arrives and streamed to the worker; text goes out as
//! it is decoded (`transcription.text.delta`). `input_audio.flush` sends on what the
//! resampler holds; `input_audio.end` ends the audio: `transcription.done` with the whole text
//! follows, and the socket closes. A bad message gets an `error` event and the session goes
//! on.

use super::ws::{self, End, Outgoing};
use crate::audio::input::StreamResampler;
use crate::scheduler::transcription::live::{LiveEvent, LiveOpenError, LiveSession};
use crate::server::error::ApiError;
use crate::server::routes::speech::mistral::error_event;
use crate::server::routes::voices::mistral::decode_base64;
use crate::server::state::{AppState, ServedTranscriber};
use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Query, State};
use axum::http::StatusCode;
use axum::response::Response;
use futures_util::StreamExt;
use serde::Deserialize;
use serde_json::{json, Map, Value};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;

/// Mistral's largest `input_audio.append`, decoded.
const MAX_APPEND_BYTES: usize = 262_144;
/// The largest client message: an append at the limit in base64, and its JSON.
pub const MAX_MESSAGE_BYTES: usize = 512 * 1024;
/// How often a session checks whether the server drains.
const DRAIN_POLL: Duration = Duration::from_millis(250);
/// Sample rates Mistral's `audio_format` takes.
const RATES: std::ops::RangeInclusive<u32> = 8_000..=96_000;

/// The connection URL's query.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct TranscriptionSocketQuery {
    /// The speech-to-text model (default: the first one served).
    model: Option<String>,
}

/// Transcribes audio while it is spoken: Mistral's realtime transcription session (WebSocket).
///
/// On connect the server sends `session.created` (`session`: `request_id`, `model`,
/// `audio_format` `{"encoding": "pcm_s16le", "sample_rate": 16000}` by default). The client
/// may send `session.update` before its audio (`audio_format`: `pcm_s16le`, `pcm_s32le`,
/// `pcm_f16le`, `pcm_f32le`, `pcm_mulaw` or `pcm_alaw` at 8 to 96 kHz, mono; `language` is
/// accepted and not applied: the model has no language input; `diarize` true,
/// `speaker_references`, `context_bias`, `turn_detection` and `target_streaming_delay_ms` get
/// an `error` naming them), answered with `session.updated`; then `input_audio.append`
/// (`audio`: base64 PCM, at most 262144 bytes decoded). Text comes back as
/// `transcription.text.delta` (`text`) while the audio is decoded. `input_audio.flush` sends
/// on the audio the resampler holds; `input_audio.end` ends the audio: `transcription.done`
/// (`model`, `text`, `language`, `usage`) follows and the socket closes. Past
/// `max_realtime_sessions` open sessions, a new one gets an `error` event and close code 1013.
#[utoipa::path(get, path = "/v1/audio/transcriptions/realtime", tag = "audio", security(("api_key" = [])),
    params(TranscriptionSocketQuery),
    responses(
        (status = 101, description = "Switching to the WebSocket protocol: the session's events follow"),
        (status = 400, description = "Not a WebSocket upgrade, or a model that does not transcribe", body = crate::server::error::ErrorResponse),
        (status = 401, description = "A missing or wrong API key", body = crate::server::error::ErrorResponse),
        (status = 404, description = "No model of that name", body = crate::server::error::ErrorResponse),
        (status = 503, description = "The model is loading", body = crate::server::error::ErrorResponse)))]
pub async fn mistral_transcription_websocket(
    State(app): State<AppState>,
    Query(query): Query<TranscriptionSocketQuery>,
    upgrade: WebSocketUpgrade,
) -> Result<Response, ApiError> {
    let served =
        match query.model.as_deref() {
            Some(name) => app.transcriber_named(name)?.clone(),
            None => app.transcribers.first().cloned().ok_or_else(|| {
                ApiError::invalid("model", "this server has no speech-to-text model")
            })?,
        };
    let card = served.loaded()?;
    Ok(upgrade
        .max_message_size(MAX_MESSAGE_BYTES)
        .max_frame_size(MAX_MESSAGE_BYTES)
        .on_upgrade(move |socket| async move {
            run(socket, app, served, card.sample_rate).await;
        }))
}

/// Mistral's `AudioEncoding`s.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
enum Encoding {
    PcmS16le,
    PcmS32le,
    PcmF16le,
    PcmF32le,
    PcmMulaw,
    PcmAlaw,
}

impl Encoding {
    fn name(self) -> &'static str {
        match self {
            Encoding::PcmS16le => "pcm_s16le",
            Encoding::PcmS32le => "pcm_s32le",
            Encoding::PcmF16le => "pcm_f16le",
            Encoding::PcmF32le => "pcm_f32le",
            Encoding::PcmMulaw => "pcm_mulaw",
            Encoding::PcmAlaw => "pcm_alaw",
        }
    }

    fn sample_bytes(self) -> usize {
        match self {
            Encoding::PcmMulaw | Encoding::PcmAlaw => 1,
            Encoding::PcmS16le | Encoding::PcmF16le => 2,
            Encoding::PcmS32le | Encoding::PcmF32le => 4,
        }
    }

    /// One sample's bytes as a float in [-1, 1].
    fn sample(self, b: &[u8]) -> f32 {
        match self {
            Encoding::PcmS16le => f32::from(i16::from_le_bytes([b[0], b[1]])) / 32_768.0,
            Encoding::PcmS32le => {
                i32::from_le_bytes([b[0], b[1], b[2], b[3]]) as f32 / 2_147_483_648.0
            }
            Encoding::PcmF16le => half::f16::from_le_bytes([b[0], b[1]]).to_f32(),
            Encoding::PcmF32le => f32::from_le_bytes([b[0], b[1], b[2], b[3]]),
            Encoding::PcmMulaw => f32::from(mulaw(b[0])) / 32_768.0,
            Encoding::PcmAlaw => f32::from(alaw(b[0])) / 32_768.0,
        }
    }
}

/// G.711 μ-law to linear 16-bit.
fn mulaw(byte: u8) -> i16 {
    let u = !byte;
    let magnitude = ((i32::from(u & 0x0F) << 3) + 0x84) << ((u >> 4) & 0x07);
    let value = magnitude - 0x84;
    (if u & 0x80 != 0 { -value } else { value }) as i16
}

/// G.711 A-law to linear 16-bit.
fn alaw(byte: u8) -> i16 {
    let a = byte ^ 0x55;
    let exponent = (a >> 4) & 0x07;
    let mantissa = i32::from(a & 0x0F);
    let magnitude = if exponent == 0 {
        (mantissa << 4) + 8
    } else {
        ((mantissa << 4) + 0x108) << (exponent - 1)
    };
    (if a & 0x80 != 0 { magnitude } else { -magnitude }) as i16
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct InputFormat {
    encoding: Encoding,
    sample_rate: u32,
}

/// A bad message: an `error` event, and the session goes on.
fn invalid(param: &str, message: impl Into<String>) -> ApiError {
    ApiError::invalid(param, message)
}

fn text(event: Value) -> Message {
    Message::Text(event.to_string().into())
}

/// The audio of the utterance under way.
struct Audio {
    item: Arc<str>,
    /// Bytes of a sample split across appends.
    partial: Vec<u8>,
    /// `None` when the client's rate is the model's; taken by a flush, made again by the
    /// next append.
    resampler: Option<StreamResampler>,
}

struct Session {
    model: String,
    request_id: String,
    model_rate: u32,
    format: InputFormat,
    language: Option<String>,
    audio: Option<Audio>,
    /// Audio has come in: the format can no longer change.
    started: bool,
    /// `input_audio.end` came: the socket closes after `transcription.done`.
    ending: bool,
}

impl Session {
    fn object(&self) -> Value {
        json!({
            "request_id": self.request_id,
            "model": self.model,
            "audio_format": {"encoding": self.format.encoding.name(),
                             "sample_rate": self.format.sample_rate},
            "target_streaming_delay_ms": null,
            "diarize": false,
            "context_bias": null,
            "language": self.language,
            "speaker_references": null,
            "turn_detection": null,
        })
    }

    /// A `session.update`'s `session`, applied.
    fn update(&mut self, update: &Map<String, Value>) -> Result<(), ApiError> {
        let set = |key: &str| update.get(key).filter(|v| !v.is_null());
        let mut format = self.format;
        if let Some(value) = set("audio_format") {
            if self.started {
                return Err(invalid(
                    "audio_format",
                    "audio_format cannot change once audio has been sent",
                ));
            }
            #[derive(Deserialize)]
            struct Wanted {
                encoding: Encoding,
                sample_rate: u32,
            }
            let wanted: Wanted = serde_json::from_value(value.clone()).map_err(|e| {
                invalid(
                    "audio_format",
                    format!("audio_format: {e} (encoding pcm_s16le, pcm_s32le, pcm_f16le, pcm_f32le, pcm_mulaw or pcm_alaw; sample_rate 8000 to 96000)"),
                )
            })?;
            if !RATES.contains(&wanted.sample_rate) {
                return Err(invalid(
                    "audio_format",
                    format!(
                        "audio_format.sample_rate {}: expected 8000 to 96000",
                        wanted.sample_rate
                    ),
                ));
            }
            format = InputFormat {
                encoding: wanted.encoding,
                sample_rate: wanted.sample_rate,
            };
        }
        let mut language = self.language.clone();
        for (key, value) in update {
            let unsupported =
                |why: &str| Err(invalid(key, format!("{key} is not supported: {why}")));
            match key.as_str() {
                "audio_format" => {}
                "language" => match value {
                    Value::Null => {}
                    Value::String(l) => language = Some(l.clone()),
                    _ => return Err(invalid("language", "language must be a string")),
                },
                "diarize" => match value {
                    Value::Null | Value::Bool(false) => {}
                    _ => return unsupported("this server's model does not tell speakers apart"),
                },
                "speaker_references" | "context_bias" => {
                    let empty = match value {
                        Value::Null => true,
                        Value::Array(a) => a.is_empty(),
                        Value::Object(o) => o.is_empty(),
                        _ => false,
                    };
                    if !empty {
                        return unsupported("this server's model takes no such input");
                    }
                }
                "turn_detection" if !value.is_null() => {
                    return unsupported("turns are the client's: send input_audio.end")
                }
                "target_streaming_delay_ms" if !value.is_null() => {
                    return unsupported("the model's delay is set by its checkpoint")
                }
                "turn_detection" | "target_streaming_delay_ms" => {}
                other => {
                    return Err(invalid(
                        other,
                        format!("{other} is not a setting of this server's transcription sessions"),
                    ))
                }
            }
        }
        self.format = format;
        self.language = language;
        Ok(())
    }

    /// Decodes an append's audio and streams it to the worker.
    fn append(&mut self, live: &LiveSession, audio: &str) -> Result<(), Failure> {
        if self.ending {
            return Err(invalid("audio", "the audio has ended (input_audio.end)").into());
        }
        let bytes = decode_base64(audio, "audio")?;
        if bytes.len() > MAX_APPEND_BYTES {
            return Err(invalid(
                "audio",
                format!(
                    "an append is at most {MAX_APPEND_BYTES} bytes of audio; this one has {}",
                    bytes.len()
                ),
            )
            .into());
        }
        self.started = true;
        let format = self.format;
        let open = match self.audio.take() {
            Some(open) => open,
            None => Audio {
                item: format!("{}_{}", self.request_id, rand::random::<u32>()).into(),
                partial: Vec::new(),
                resampler: None,
            },
        };
        let audio = self.audio.insert(open);
        audio.partial.extend_from_slice(&bytes);
        let size = format.encoding.sample_bytes();
        let whole = audio.partial.len() / size * size;
        let samples: Vec<f32> = audio.partial[..whole]
            .chunks_exact(size)
            .map(|b| format.encoding.sample(b))
            .collect();
        audio.partial.drain(..whole);
        let samples = if format.sample_rate == self.model_rate {
            samples
        } else {
            let resampler = match &mut audio.resampler {
                Some(resampler) => resampler,
                None => audio.resampler.insert(
                    StreamResampler::new(format.sample_rate, self.model_rate)
                        .map_err(|e| invalid("audio_format", e.to_string()))?,
                ),
            };
            resampler
                .push(&samples)
                .map_err(|e| ApiError::internal(e.to_string()))?
        };
        if !samples.is_empty() {
            live.append(&audio.item, samples)
                .map_err(|_| Failure::Stopped)?;
        }
        Ok(())
    }

    /// Sends on what the resampler holds.
    fn flush(&mut self, live: &LiveSession) -> Result<(), Failure> {
        let Some(audio) = &mut self.audio else {
            return Ok(());
        };
        if let Some(resampler) = audio.resampler.take() {
            let rest = resampler
                .finish()
                .map_err(|e| ApiError::internal(e.to_string()))?;
            if !rest.is_empty() {
                live.append(&audio.item, rest)
                    .map_err(|_| Failure::Stopped)?;
            }
        }
        Ok(())
    }

    /// Ends the audio; `false` when none came (nothing to wait for).
    fn end(&mut self, live: &LiveSession) -> Result<bool, Failure> {
        self.flush(live)?;
        self.ending = true;
        if self.audio.take().is_none() {
            return Ok(false);
        }
        live.commit().map_err(|_| Failure::Stopped)?;
        Ok(true)
    }

    fn done(&self, text: &str, audio_seconds: f64) -> Value {
        json!({"type": "transcription.done", "model": self.model, "text": text,
               "language": null, "segments": [],
               "usage": {"prompt_audio_seconds": audio_seconds.ceil() as u64}})
    }
}

/// Why a message was not carried out.
enum Failure {
    Invalid(ApiError),
    Stopped,
}

impl From<ApiError> for Failure {
    fn from(e: ApiError) -> Self {
        Failure::Invalid(e)
    }
}

fn closing(error: &ApiError, code: u16) -> Vec<Message> {
    vec![text(error_event(error)), ws::close(code, &error.message)]
}

async fn run(socket: WebSocket, app: AppState, served: ServedTranscriber, model_rate: u32) {
    let (sink, mut incoming) = socket.split();
    let mut out = Outgoing::new(sink);
    let end = session(&mut out, &mut incoming, &app, &served, model_rate).await;
    ws::end(out, &mut incoming, end, |code, message| {
        text(error_event(&ApiError::new(
            StatusCode::BAD_REQUEST,
            Some(code),
            message,
        )))
    })
    .await;
}

/// Opens a live session on the worker and serves it; its place is free again once this
/// returns, while the last messages go out.
async fn session(
    out: &mut Outgoing,
    incoming: &mut futures_util::stream::SplitStream<WebSocket>,
    app: &AppState,
    served: &ServedTranscriber,
    model_rate: u32,
) -> End {
    let (live, received) = match served.queue.live().open() {
        Ok(opened) => opened,
        Err(e) => {
            let (status, code, close) = match e {
                LiveOpenError::Full(_) => (
                    StatusCode::TOO_MANY_REQUESTS,
                    "session_limit_reached",
                    ws::TRY_AGAIN_LATER,
                ),
                LiveOpenError::Stopped => (
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "worker_stopped",
                    ws::INTERNAL_ERROR,
                ),
            };
            let error = ApiError::new(status, Some(code), e.to_string());
            return End::With(closing(&error, close));
        }
    };
    let mut session = Session {
        model: served.id.clone(),
        request_id: format!("transcription_{:032x}", rand::random::<u128>()),
        model_rate,
        format: InputFormat {
            encoding: Encoding::PcmS16le,
            sample_rate: 16_000,
        },
        language: None,
        audio: None,
        started: false,
        ending: false,
    };
    serve(&mut session, &live, received, out, incoming, app).await
}

async fn serve(
    session: &mut Session,
    live: &LiveSession,
    mut received: mpsc::UnboundedReceiver<LiveEvent>,
    out: &mut Outgoing,
    incoming: &mut futures_util::stream::SplitStream<WebSocket>,
    app: &AppState,
) -> End {
    let created = json!({"type": "session.created", "session": session.object()});
    if out.send(text(created)).await.is_err() {
        return End::Stalled;
    }
    let mut drain_poll = tokio::time::interval(DRAIN_POLL);
    loop {
        let reply = tokio::select! {
            _ = drain_poll.tick() => {
                if app.drain.is_draining() {
                    return End::With(closing(&ApiError::shutting_down(), ws::SERVICE_RESTART));
                }
                continue;
            }
            event = received.recv() => match event {
                Some(LiveEvent::Delta { text: delta, .. }) => {
                    vec![json!({"type": "transcription.text.delta", "text": delta})]
                }
                Some(LiveEvent::Completed { transcript, audio_seconds, .. }) => {
                    let done = session.done(&transcript, audio_seconds);
                    if session.ending {
                        return End::With(vec![text(done), ws::close(1000, "")]);
                    }
                    vec![done]
                }
                Some(LiveEvent::Failed { message, .. }) => {
                    let error = ApiError::invalid("audio", message);
                    if session.ending {
                        return End::With(closing(&error, 1000));
                    }
                    vec![error_event(&error)]
                }
                None => {
                    let e = ApiError::internal("the transcription worker has stopped");
                    return End::With(closing(&e, ws::INTERNAL_ERROR));
                }
            },
            message = incoming.next() => match message {
                Some(Ok(Message::Text(message))) => match on_message(session, live, message.as_str()) {
                    Ok(Reply::Events(events)) => events,
                    Ok(Reply::Close(events)) => {
                        let mut last: Vec<Message> = events.into_iter().map(text).collect();
                        last.push(ws::close(1000, ""));
                        return End::With(last);
                    }
                    Err(Failure::Invalid(e)) => vec![error_event(&e)],
                    Err(Failure::Stopped) => {
                        let e = ApiError::internal("the transcription worker has stopped");
                        return End::With(closing(&e, ws::INTERNAL_ERROR));
                    }
                },
                Some(Ok(Message::Binary(_))) => {
                    vec![error_event(&invalid("type", "Messages are JSON text, not binary frames."))]
                }
                Some(Ok(Message::Ping(_) | Message::Pong(_))) => continue,
                Some(Ok(Message::Close(_))) | None => return End::With(Vec::new()),
                Some(Err(e)) if ws::too_large(&e) => {
                    let e = ApiError::new(
                        StatusCode::PAYLOAD_TOO_LARGE,
                        Some("message_too_large"),
                        format!("A message is at most {MAX_MESSAGE_BYTES} bytes."),
                    );
                    return End::Oversized(closing(&e, ws::MESSAGE_TOO_BIG));
                }
                Some(Err(_)) => return End::With(Vec::new()),
            },
        };
        for event in reply {
            if out.send(text(event)).await.is_err() {
                return End::Stalled;
            }
        }
    }
}

/// What a client message is answered with.
enum Reply {
    Events(Vec<Value>),
    /// The last events: the session ends.
    Close(Vec<Value>),
}

fn on_message(session: &mut Session, live: &LiveSession, message: &str) -> Result<Reply, Failure> {
    let event: Value = serde_json::from_str(message)
        .map_err(|e| invalid("type", format!("The message is not valid JSON: {e}")))?;
    let kind = event
        .get("type")
        .and_then(Value::as_str)
        .ok_or_else(|| invalid("type", "A message is a JSON object with a \"type\" string."))?;
    Ok(match kind {
        "session.update" => {
            let update = event
                .get("session")
                .and_then(Value::as_object)
                .ok_or_else(|| invalid("session", "`session` must be an object."))?;
            session.update(update)?;
            Reply::Events(vec![
                json!({"type": "session.updated", "session": session.object()}),
            ])
        }
        "input_audio.append" => {
            let audio = event
                .get("audio")
                .and_then(Value::as_str)
                .ok_or_else(|| invalid("audio", "`audio` must be a base64 string."))?;
            session.append(live, audio)?;
            Reply::Events(Vec::new())
        }
        "input_audio.flush" => {
            session.flush(live)?;
            Reply::Events(Vec::new())
        }
        "input_audio.end" => {
            if session.ending {
                return Err(invalid("type", "the audio has already ended").into());
            }
            if session.end(live)? {
                Reply::Events(Vec::new())
            } else {
                Reply::Close(vec![session.done("", 0.0)])
            }
        }
        other => return Err(invalid("type", format!("Unknown message type: {other:?}.")).into()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn g711_decodes_to_the_standard_values() {
        // ITU-T G.711: the codes of silence and of the loudest samples.
        assert_eq!((mulaw(0xFF), mulaw(0x7F)), (0, 0));
        assert_eq!((mulaw(0x80), mulaw(0x00)), (32_124, -32_124));
        assert_eq!((alaw(0xD5), alaw(0x55)), (8, -8));
        assert_eq!((alaw(0xAA), alaw(0x2A)), (32_256, -32_256));
    }

    #[test]
    fn every_encoding_reads_full_scale_as_one() {
        let cases: [(Encoding, Vec<u8>); 4] = [
            (Encoding::PcmS16le, i16::MIN.to_le_bytes().to_vec()),
            (Encoding::PcmS32le, i32::MIN.to_le_bytes().to_vec()),
            (
                Encoding::PcmF16le,
                half::f16::from_f32(-1.0).to_le_bytes().to_vec(),
            ),
            (Encoding::PcmF32le, (-1.0f32).to_le_bytes().to_vec()),
        ];
        for (encoding, bytes) in cases {
            assert_eq!(bytes.len(), encoding.sample_bytes());
            assert_eq!(encoding.sample(&bytes), -1.0, "{encoding:?}");
        }
    }

    fn session() -> Session {
        Session {
            model: "stt".into(),
            request_id: "r".into(),
            model_rate: 16_000,
            format: InputFormat {
                encoding: Encoding::PcmS16le,
                sample_rate: 16_000,
            },
            language: None,
            audio: None,
            started: false,
            ending: false,
        }
    }

    fn update(session: &mut Session, body: Value) -> Result<(), String> {
        session
            .update(body.as_object().unwrap())
            .map_err(|e| e.param.unwrap())
    }

    #[test]
    fn updates_set_the_format_and_refuse_what_the_model_cannot_do() {
        let mut s = session();
        update(
            &mut s,
            json!({"audio_format": {"encoding": "pcm_f32le", "sample_rate": 24000},
                   "language": "fr", "diarize": false, "context_bias": [], "turn_detection": null}),
        )
        .unwrap();
        assert_eq!(s.object()["audio_format"]["encoding"], "pcm_f32le");
        assert_eq!(s.object()["language"], "fr");
        for (body, param) in [
            (json!({"diarize": true}), "diarize"),
            (json!({"context_bias": ["Voxtral"]}), "context_bias"),
            (
                json!({"speaker_references": {"a": "x"}}),
                "speaker_references",
            ),
            (
                json!({"turn_detection": {"start_threshold": 0.5}}),
                "turn_detection",
            ),
            (
                json!({"target_streaming_delay_ms": 480}),
                "target_streaming_delay_ms",
            ),
            (
                json!({"audio_format": {"encoding": "pcm_u8", "sample_rate": 16000}}),
                "audio_format",
            ),
            (
                json!({"audio_format": {"encoding": "pcm_s16le", "sample_rate": 4000}}),
                "audio_format",
            ),
            (json!({"voice": "x"}), "voice"),
        ] {
            assert_eq!(
                update(&mut s, body.clone()),
                Err(param.to_string()),
                "{body}"
            );
        }
        assert_eq!(
            s.format.sample_rate, 24_000,
            "a refused update changes nothing"
        );
        s.started = true;
        let again = json!({"audio_format": {"encoding": "pcm_s16le", "sample_rate": 16000}});
        assert_eq!(update(&mut s, again), Err("audio_format".into()));
    }
}
