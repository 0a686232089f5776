//! `GET /v1/realtime?intent=transcription`: OpenAI's Realtime transcription session over a
//! WebSocket (docs/voxtral-realtime-spec.md in the shared docs, section B), on a Voxtral
//! Realtime model's live sessions (`scheduler::transcription::live`).
//!
//! PCM16 at 24 kHz comes in with `input_audio_buffer.append`, is resampled to the model's
//! 16 kHz as it arrives and streamed to the worker; text goes out as it is decoded
//! (`conversation.item.input_audio_transcription.delta`), before the commit. A commit ends the
//! item: `input_audio_buffer.committed`, `conversation.item.added` and `.done`, the last
//! deltas, then `.completed` with the whole transcript. With `server_vad` turn detection the
//! server finds the speech (`audio::vad`), sends `input_audio_buffer.speech_started` and
//! `speech_stopped`, and commits by itself; audio outside speech is dropped. A bad event gets
//! an `error` event and the session goes on. When the server shuts down, open sessions get an
//! `error` event and are closed (code 1012); items not completed by then are lost.

mod events;
mod session;

use crate::audio::input::{AudioInputError, StreamResampler};
use crate::audio::vad::{VadEvent, VoiceActivity};
use crate::scheduler::transcription::live::{LiveEvent, LiveOpenError, LiveSession, WorkerStopped};
use crate::server::drain::Drain;
use crate::server::error::ApiError;
use crate::server::state::{AppState, ServedTranscriber};
use axum::extract::ws::{CloseFrame, Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Query, State};
use axum::response::Response;
use events::{ClientEvent, EventError, ServerEvents};
use serde::Deserialize;
use serde_json::{json, Value};
use session::{SessionConfig, INPUT_RATE};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::mpsc;

/// The connection URL's query.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct RealtimeQuery {
    /// Must be `transcription`: conversation sessions are not served.
    intent: Option<String>,
    /// The speech-to-text model (default: the first one served).
    model: Option<String>,
}

/// WebSocket close code 1013: try again later (every session place is taken).
const TRY_AGAIN_LATER: u16 = 1013;
/// WebSocket close code 1011: the server cannot go on (its worker stopped).
const INTERNAL_ERROR: u16 = 1011;
/// WebSocket close code 1012: the server is restarting (shutting down).
const SERVICE_RESTART: u16 = 1012;
/// The largest client message: OpenAI takes 15 MiB of base64 audio per append.
pub const MAX_MESSAGE_BYTES: usize = 16 * 1024 * 1024;
/// How often an open session checks whether the server is shutting down.
const DRAIN_POLL: Duration = Duration::from_millis(250);

/// Opens a live transcription session (WebSocket).
///
/// OpenAI's Realtime API, transcription sessions only: connect with `intent=transcription`
/// (and optionally `model`), then send `session.update` (`session.type: "transcription"`) or
/// the beta `transcription_session.update`, `input_audio_buffer.append` (base64 PCM16, 24 kHz
/// mono), `input_audio_buffer.commit` and `input_audio_buffer.clear`. The server sends
/// `session.created` on connect, `conversation.item.input_audio_transcription.delta` as text
/// is decoded and `.completed` after each commit. The client commits (`turn_detection:
/// null`, the default), or with `turn_detection: {"type": "server_vad"}` an energy detector
/// finds the speech, sends `input_audio_buffer.speech_started` and `speech_stopped` and
/// commits. Over `max_realtime_sessions` open sessions, a new one gets an `error` event and
/// is closed. Browsers, which cannot set headers, may send the API key as a subprotocol
/// (`Sec-WebSocket-Protocol: realtime, openai-insecure-api-key.<KEY>`); the server answers
/// with `realtime`.
#[utoipa::path(get, path = "/v1/realtime", tag = "audio", security(("api_key" = [])),
    params(RealtimeQuery),
    responses(
        (status = 101, description = "Switching to the WebSocket protocol: the session's events follow"),
        (status = 400, description = "Not a WebSocket upgrade, an intent other than transcription, or a model that does not transcribe", body = crate::server::error::ErrorResponse),
        (status = 401, description = "A missing or wrong API key", body = crate::server::error::ErrorResponse),
        (status = 404, description = "No model of that name", body = crate::server::error::ErrorResponse),
        (status = 503, description = "The model is loading", body = crate::server::error::ErrorResponse)))]
pub async fn realtime_websocket(
    State(app): State<AppState>,
    Query(query): Query<RealtimeQuery>,
    upgrade: WebSocketUpgrade,
) -> Result<Response, ApiError> {
    match query.intent.as_deref() {
        Some("transcription") => {}
        other => {
            return Err(ApiError::invalid(
                "intent",
                format!(
                    "intent {other:?}: this server serves transcription sessions only \
                     (/v1/realtime?intent=transcription)"
                ),
            ))
        }
    }
    let served =
        match query.model.as_deref() {
            Some(name) => app.transcriber_named(name)?.clone(),
            None => app.transcribers.first().cloned().ok_or_else(|| {
                ApiError::invalid("model", "this server has no speech-to-text model")
            })?,
        };
    let card = served.loaded()?;
    let drain = app.drain.clone();
    // Browser clients ask for `realtime` beside the subprotocol that carries their key
    // (`server::auth`); the handshake fails in the browser unless one is chosen.
    Ok(upgrade
        .max_message_size(MAX_MESSAGE_BYTES)
        .max_frame_size(MAX_MESSAGE_BYTES)
        .protocols(["realtime"])
        .on_upgrade(move |socket| async move {
            Connection::run(socket, served, card.sample_rate, drain).await;
        }))
}

/// Item ids, unique within the process.
static ITEMS: AtomicU64 = AtomicU64::new(0);

fn new_item_id() -> Arc<str> {
    format!("item_{:06}", ITEMS.fetch_add(1, Ordering::Relaxed)).into()
}

/// The item being appended to.
struct OpenItem {
    id: Arc<str>,
    resampler: StreamResampler,
}

struct Connection {
    socket: WebSocket,
    drain: Arc<Drain>,
    served: ServedTranscriber,
    sample_rate: u32,
    events: ServerEvents,
    config: SessionConfig,
    item: Option<OpenItem>,
    previous_item: Option<Arc<str>>,
    /// The speech detector, with `server_vad` turn detection.
    vad: Option<VoiceActivity>,
    /// Samples appended in this session (at the input rate).
    received: u64,
    /// The last items cleared: the worker's events for them, sent before it had the clear,
    /// are dropped.
    cleared: VecDeque<Arc<str>>,
}

/// Cleared items remembered: the worker's events for one stop long before this many more.
const CLEARED_KEPT: usize = 8;

/// The socket is gone or the session cannot go on.
struct Closed;

/// Why a client event was not carried out.
enum Failure {
    Event(EventError),
    WorkerStopped,
}

impl From<EventError> for Failure {
    fn from(e: EventError) -> Self {
        Failure::Event(e)
    }
}

impl From<WorkerStopped> for Failure {
    fn from(_: WorkerStopped) -> Self {
        Failure::WorkerStopped
    }
}

fn resampling(e: AudioInputError) -> Failure {
    Failure::Event(EventError::new("processing_error", "audio", e.to_string()))
}

impl Connection {
    async fn run(
        socket: WebSocket,
        served: ServedTranscriber,
        sample_rate: u32,
        drain: Arc<Drain>,
    ) {
        let mut connection = Connection {
            config: SessionConfig::new(&served.id),
            socket,
            drain,
            served,
            sample_rate,
            events: ServerEvents::default(),
            item: None,
            previous_item: None,
            vad: None,
            received: 0,
            cleared: VecDeque::new(),
        };
        let opened = connection.served.queue.live().open();
        let (session, received) = match opened {
            Ok(opened) => opened,
            Err(e) => {
                let code = match e {
                    LiveOpenError::Full(_) => ("session_limit_reached", TRY_AGAIN_LATER),
                    LiveOpenError::Stopped => ("worker_stopped", INTERNAL_ERROR),
                };
                let _ = connection.refuse(code.0, code.1, &e.to_string()).await;
                return;
            }
        };
        let _ = connection.serve(&session, received).await;
        // Dropping `session` closes it and frees its place.
    }

    async fn serve(
        &mut self,
        session: &LiveSession,
        mut received: mpsc::UnboundedReceiver<LiveEvent>,
    ) -> Result<(), Closed> {
        let created = json!({"type": "session.created", "session": self.config.ga()});
        self.send(created).await?;
        let mut drain_poll = tokio::time::interval(DRAIN_POLL);
        loop {
            tokio::select! {
                _ = drain_poll.tick() => if self.drain.is_draining() {
                    // Open sessions end with the server: they would otherwise hold its
                    // transcription worker past the shutdown.
                    let message = "The server is shutting down: reconnect to go on";
                    return self.refuse("server_shutting_down", SERVICE_RESTART, message).await;
                },
                message = self.socket.recv() => match message {
                    Some(Ok(Message::Text(text))) => self.on_event(session, text.as_str()).await?,
                    Some(Ok(Message::Binary(_))) => {
                        let e = EventError::new(
                            "invalid_event",
                            "",
                            "Events are JSON text messages, not binary ones",
                        );
                        self.send_error(&e).await?;
                    }
                    Some(Ok(Message::Ping(_) | Message::Pong(_))) => {}
                    Some(Err(e)) if super::ws::too_large(&e) => {
                        let message = format!("An event is at most {MAX_MESSAGE_BYTES} bytes");
                        return self.refuse("message_too_large", super::ws::MESSAGE_TOO_BIG, &message).await;
                    }
                    Some(Ok(Message::Close(_))) | Some(Err(_)) | None => return Err(Closed),
                },
                event = received.recv() => match event {
                    Some(event) => self.on_worker_event(event).await?,
                    None => {
                        let message = "the transcription worker has stopped";
                        return self.refuse("worker_stopped", INTERNAL_ERROR, message).await;
                    }
                },
            }
        }
    }

    async fn on_event(&mut self, session: &LiveSession, text: &str) -> Result<(), Closed> {
        let (event, event_id) = match events::parse(text) {
            Ok(parsed) => parsed,
            Err(e) => return self.send_error(&e).await,
        };
        match self.apply(session, event) {
            Ok(Some(reply)) => {
                for body in reply {
                    self.send(body).await?;
                }
                Ok(())
            }
            Ok(None) => Ok(()),
            Err(Failure::Event(e)) => self.send_error(&EventError { event_id, ..e }).await,
            Err(Failure::WorkerStopped) => {
                let message = "the transcription worker has stopped";
                self.refuse("worker_stopped", INTERNAL_ERROR, message).await
            }
        }
    }

    /// Carries out one client event; returns the server events that answer it.
    fn apply(
        &mut self,
        session: &LiveSession,
        event: ClientEvent,
    ) -> Result<Option<Vec<Value>>, Failure> {
        Ok(match event {
            ClientEvent::SessionUpdate(update) => {
                let config = self.config.updated_ga(&update, &self.served.id)?;
                self.configure(config);
                Some(vec![
                    json!({"type": "session.updated", "session": self.config.ga()}),
                ])
            }
            ClientEvent::BetaSessionUpdate(update) => {
                let config = self.config.updated_beta(&update, &self.served.id)?;
                self.configure(config);
                Some(vec![json!({"type": "transcription_session.updated",
                                 "session": self.config.beta()})])
            }
            ClientEvent::Append(pcm) => {
                let replies = self.append(session, &pcm)?;
                (!replies.is_empty()).then_some(replies)
            }
            ClientEvent::Commit => {
                let tail = self.vad.as_mut().map(VoiceActivity::end);
                if let Some(tail) = tail.filter(|tail| !tail.is_empty()) {
                    self.stream(session, &tail)?;
                }
                Some(self.commit(session)?)
            }
            ClientEvent::Clear => {
                if let Some(vad) = &mut self.vad {
                    vad.reset();
                }
                if let Some(item) = self.item.take() {
                    session.clear()?;
                    if self.cleared.len() == CLEARED_KEPT {
                        self.cleared.pop_front();
                    }
                    self.cleared.push_back(item.id);
                }
                Some(vec![json!({"type": "input_audio_buffer.cleared"})])
            }
        })
    }

    /// Takes a session update; a new turn detection starts a new detector, in speech when an
    /// item is open.
    fn configure(&mut self, config: SessionConfig) {
        if config.turn_detection != self.config.turn_detection {
            let (received, open) = (self.received, self.item.is_some());
            self.vad = config
                .turn_detection
                .map(|settings| VoiceActivity::new(settings, INPUT_RATE, received, open));
        }
        self.config = config;
    }

    /// Streams the samples to the open item, or with turn detection the speech among them;
    /// returns the speech events and the commits the detector made.
    fn append(&mut self, session: &LiveSession, pcm: &[i16]) -> Result<Vec<Value>, Failure> {
        self.received += pcm.len() as u64;
        let samples: Vec<f32> = pcm.iter().map(|&s| f32::from(s) / 32768.0).collect();
        let Some(vad) = &mut self.vad else {
            if !samples.is_empty() {
                self.stream(session, &samples)?;
            }
            return Ok(Vec::new());
        };
        let mut replies = Vec::new();
        for event in vad.push(&samples) {
            match event {
                VadEvent::Started { start_ms, audio } => {
                    let item = self.stream(session, &audio)?;
                    replies.push(json!({"type": "input_audio_buffer.speech_started",
                                        "audio_start_ms": start_ms, "item_id": item}));
                }
                VadEvent::Speech(audio) => {
                    self.stream(session, &audio)?;
                }
                VadEvent::Stopped { end_ms, audio } => {
                    let item = self.stream(session, &audio)?;
                    replies.push(json!({"type": "input_audio_buffer.speech_stopped",
                                        "audio_end_ms": end_ms, "item_id": item}));
                    replies.extend(self.commit(session)?);
                }
            }
        }
        Ok(replies)
    }

    /// Resamples the samples and streams what is final of them to the worker, opening an item
    /// if none is; returns the item's id.
    fn stream(&mut self, session: &LiveSession, samples: &[f32]) -> Result<Arc<str>, Failure> {
        let item = match &mut self.item {
            Some(item) => item,
            None => self.item.insert(OpenItem {
                id: new_item_id(),
                resampler: StreamResampler::new(INPUT_RATE, self.sample_rate)
                    .map_err(resampling)?,
            }),
        };
        let resampled = item.resampler.push(samples).map_err(resampling)?;
        if !resampled.is_empty() {
            session.append(&item.id, resampled)?;
        }
        Ok(item.id.clone())
    }

    /// Ends the open item: the resampler's tail and the commit go to the worker.
    fn commit(&mut self, session: &LiveSession) -> Result<Vec<Value>, Failure> {
        let Some(item) = self.item.take() else {
            return Err(Failure::Event(EventError::new(
                "input_audio_buffer_commit_empty",
                "",
                "The input audio buffer is empty: append audio before committing",
            )));
        };
        let rest = item.resampler.finish().map_err(resampling)?;
        if !rest.is_empty() {
            session.append(&item.id, rest)?;
        }
        session.commit()?;
        let previous = self.previous_item.replace(item.id.clone());
        let added = json!({"id": item.id, "type": "message", "object": "realtime.item",
                           "role": "user", "status": "completed",
                           "content": [{"type": "input_audio", "transcript": null}]});
        Ok(vec![
            json!({"type": "input_audio_buffer.committed", "item_id": item.id,
                   "previous_item_id": previous}),
            json!({"type": "conversation.item.added", "item": added,
                   "previous_item_id": previous}),
            json!({"type": "conversation.item.done", "item": added,
                   "previous_item_id": previous}),
        ])
    }

    async fn on_worker_event(&mut self, event: LiveEvent) -> Result<(), Closed> {
        const PREFIX: &str = "conversation.item.input_audio_transcription";
        let item = match &event {
            LiveEvent::Delta { item, .. }
            | LiveEvent::Completed { item, .. }
            | LiveEvent::Failed { item, .. } => item,
        };
        if self.cleared.contains(item) {
            return Ok(());
        }
        let body = match event {
            LiveEvent::Delta { item, text } => json!({"type": format!("{PREFIX}.delta"),
                "item_id": item, "content_index": 0, "delta": text}),
            LiveEvent::Completed {
                item,
                transcript,
                audio_seconds,
            } => json!({"type": format!("{PREFIX}.completed"), "item_id": item,
                "content_index": 0, "transcript": transcript,
                "usage": {"type": "duration", "seconds": audio_seconds}}),
            LiveEvent::Failed { item, message } => json!({"type": format!("{PREFIX}.failed"),
                "item_id": item, "content_index": 0,
                "error": {"type": "transcription_error", "code": "transcription_failed",
                          "message": message, "param": null}}),
        };
        self.send(body).await
    }

    async fn send(&mut self, body: Value) -> Result<(), Closed> {
        let text = self.events.event(body);
        self.socket
            .send(Message::Text(text.into()))
            .await
            .map_err(|_| Closed)
    }

    async fn send_error(&mut self, e: &EventError) -> Result<(), Closed> {
        let text = self.events.error("invalid_request_error", e);
        self.socket
            .send(Message::Text(text.into()))
            .await
            .map_err(|_| Closed)
    }

    /// An `error` event, then the socket closed with `close_code`.
    async fn refuse(
        &mut self,
        code: &'static str,
        close_code: u16,
        message: &str,
    ) -> Result<(), Closed> {
        let text = self
            .events
            .error("server_error", &EventError::new(code, "", message));
        let _ = self.socket.send(Message::Text(text.into())).await;
        let reason = message.chars().take(120).collect::<String>();
        let frame = CloseFrame {
            code: close_code,
            reason: reason.into(),
        };
        let _ = self.socket.send(Message::Close(Some(frame))).await;
        if close_code == super::ws::MESSAGE_TOO_BIG {
            super::ws::linger(&mut self.socket).await;
        }
        Err(Closed)
    }
}
