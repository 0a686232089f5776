//! One `/v1/realtime` session: the client's events (in either dialect, read into OpenAI's)
//! carried out on a live transcription session, and the worker's events sent back.

use super::dialect::Dialect;
use super::events::{self, ClientEvent, EventError, ServerEvents};
use super::session::{SessionConfig, INPUT_RATE};
use super::{DRAIN_POLL, MAX_MESSAGE_BYTES, PENDING_ITEMS};
use crate::audio::input::{AudioInputError, StreamResampler};
use crate::audio::vad::{VadEvent, VoiceActivity};
use crate::scheduler::transcription::live::{LiveEvent, LiveOpenError, LiveSession, WorkerStopped};
use crate::server::routes::ws::{self, End, Outgoing};
use crate::server::state::{AppState, ServedTranscriber};
use axum::extract::ws::{Message, WebSocket};
use futures_util::stream::SplitStream;
use futures_util::StreamExt;
use serde_json::{json, Value};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};
use tokio::sync::mpsc;

/// Item and session ids, unique within the process.
static ITEMS: AtomicU64 = AtomicU64::new(0);
static SESSIONS: AtomicU64 = AtomicU64::new(0);

fn new_item_id() -> Arc<str> {
    format!("item_{:06}", ITEMS.fetch_add(1, Ordering::Relaxed)).into()
}

/// The item being appended to.
struct OpenItem {
    id: Arc<str>,
    /// `None` when the client sends the model's own rate.
    resampler: Option<StreamResampler>,
}

pub struct Connection {
    out: Outgoing,
    app: AppState,
    served: ServedTranscriber,
    sample_rate: u32,
    /// Chosen by the client's first telling event; OpenAI's until then.
    dialect: Option<Dialect>,
    /// vLLM's dialect: a `session.update` came (its commits need one first).
    settings_taken: bool,
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
    /// Committed items whose transcript (or failure) has not come back.
    pending: VecDeque<Arc<str>>,
    /// The last item the worker failed: the rest of its audio is not sent.
    failed: Option<Arc<str>>,
}

/// Cleared items remembered: the worker's events for one stop long before this many more.
const CLEARED_KEPT: usize = 8;

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

const WORKER_STOPPED: &str = "the transcription worker has stopped";

impl Connection {
    pub async fn run(
        socket: WebSocket,
        app: AppState,
        served: ServedTranscriber,
        sample_rate: u32,
    ) {
        let (sink, mut incoming) = socket.split();
        let mut connection = Connection {
            out: Outgoing::new(sink),
            config: SessionConfig::new(&served.id),
            app,
            served,
            sample_rate,
            dialect: None,
            settings_taken: false,
            events: ServerEvents::default(),
            item: None,
            previous_item: None,
            vad: None,
            received: 0,
            cleared: VecDeque::new(),
            pending: VecDeque::new(),
            failed: None,
        };
        let end = match connection.served.queue.live().open() {
            // Dropping `session` at the end of this arm closes it and frees its place.
            Ok((session, received)) => connection.serve(&session, received, &mut incoming).await,
            Err(e) => {
                let (code, close_code) = match e {
                    LiveOpenError::Full(_) => ("session_limit_reached", ws::TRY_AGAIN_LATER),
                    LiveOpenError::Stopped => ("worker_stopped", ws::INTERNAL_ERROR),
                };
                connection.refusal(code, close_code, &e.to_string())
            }
        };
        let Connection {
            out,
            dialect,
            mut events,
            ..
        } = connection;
        let dialect = dialect.unwrap_or(Dialect::OpenAi);
        ws::end(out, &mut incoming, end, |code, message| {
            let e = EventError::new(code, "", message);
            Message::Text(dialect.error(&mut events, "server_error", &e).into())
        })
        .await;
    }

    fn dialect(&self) -> Dialect {
        self.dialect.unwrap_or(Dialect::OpenAi)
    }

    async fn serve(
        &mut self,
        session: &LiveSession,
        mut received: mpsc::UnboundedReceiver<LiveEvent>,
        incoming: &mut SplitStream<WebSocket>,
    ) -> End {
        let created = json!({"type": "session.created", "session": self.config.ga(),
            // vLLM's clients read the session's `id` and `created` from the same event.
            "id": format!("sess_{:06}", SESSIONS.fetch_add(1, Ordering::Relaxed)),
            "created": SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())});
        if let Err(end) = self.send(created).await {
            return end;
        }
        let mut drain_poll = tokio::time::interval(DRAIN_POLL);
        loop {
            let step = tokio::select! {
                _ = drain_poll.tick() => if self.app.drain.is_draining() {
                    // Open sessions end with the server: they would otherwise hold its
                    // transcription worker past the shutdown.
                    let message = "The server is shutting down: reconnect to go on";
                    Err(self.refusal("server_shutting_down", ws::SERVICE_RESTART, message))
                } else {
                    Ok(())
                },
                message = incoming.next(), if self.pending.len() < PENDING_ITEMS => match message {
                    Some(Ok(Message::Text(text))) => self.on_event(session, text.as_str()).await,
                    Some(Ok(Message::Binary(_))) => {
                        let e = EventError::new(
                            "invalid_event",
                            "",
                            "Events are JSON text messages, not binary ones",
                        );
                        self.send_error(&e).await
                    }
                    Some(Ok(Message::Ping(_) | Message::Pong(_))) => Ok(()),
                    Some(Err(e)) if ws::too_large(&e) => {
                        let message = format!("An event is at most {MAX_MESSAGE_BYTES} bytes");
                        Err(self.refusal("message_too_large", ws::MESSAGE_TOO_BIG, &message))
                    }
                    Some(Ok(Message::Close(_))) | Some(Err(_)) | None => Err(End::With(Vec::new())),
                },
                event = received.recv() => match event {
                    Some(event) => self.on_worker_event(event).await,
                    None => Err(self.refusal("worker_stopped", ws::INTERNAL_ERROR, WORKER_STOPPED)),
                },
            };
            if let Err(end) = step {
                return end;
            }
        }
    }

    async fn on_event(&mut self, session: &LiveSession, text: &str) -> Result<(), End> {
        let (value, event_id) = match events::read(text) {
            Ok(read) => read,
            Err(e) => return self.send_error(&e).await,
        };
        if self.dialect.is_none() {
            self.dialect = Dialect::detect(&value);
        }
        let event = match self.dialect().parse(value) {
            Ok(event) => event,
            Err(e) => return self.send_error(&EventError { event_id, ..e }).await,
        };
        match self.apply(session, event) {
            Ok(replies) => {
                for body in replies {
                    self.send(body).await?;
                }
                Ok(())
            }
            Err(Failure::Event(e)) => self.send_error(&EventError { event_id, ..e }).await,
            Err(Failure::WorkerStopped) => {
                Err(self.refusal("worker_stopped", ws::INTERNAL_ERROR, WORKER_STOPPED))
            }
        }
    }

    /// Carries out one client event; returns the server events that answer it.
    fn apply(&mut self, session: &LiveSession, event: ClientEvent) -> Result<Vec<Value>, Failure> {
        Ok(match event {
            ClientEvent::SessionUpdate(update) => {
                let config = self.config.updated_ga(&update, &self.served.id)?;
                self.configure(config);
                vec![json!({"type": "session.updated", "session": self.config.ga()})]
            }
            ClientEvent::BetaSessionUpdate(update) => {
                let config = self.config.updated_beta(&update, &self.served.id)?;
                self.configure(config);
                vec![json!({"type": "transcription_session.updated",
                            "session": self.config.beta()})]
            }
            ClientEvent::Settings {
                model,
                language,
                prompt,
            } => {
                if let Some(model) = model {
                    self.check_model(&model)?;
                }
                // Taken and not applied, as in OpenAI's dialect (`session.rs`).
                if language.is_some() {
                    self.config.language = language;
                }
                if let Some(prompt) = prompt {
                    self.config.prompt = prompt;
                }
                self.settings_taken = true;
                Vec::new()
            }
            ClientEvent::Append(pcm) => self.append(session, &pcm)?,
            // The item opens with its first audio, which may come before the start.
            ClientEvent::Start => {
                self.check_settings_taken()?;
                Vec::new()
            }
            ClientEvent::Commit => {
                self.check_settings_taken()?;
                let tail = self.vad.as_mut().map(VoiceActivity::end);
                if let Some(tail) = tail.filter(|tail| !tail.is_empty()) {
                    self.stream(session, &tail)?;
                }
                self.commit(session)?
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
                vec![json!({"type": "input_audio_buffer.cleared"})]
            }
        })
    }

    /// vLLM's dialect takes commits only after a `session.update` has named the model.
    fn check_settings_taken(&self) -> Result<(), EventError> {
        if self.dialect == Some(Dialect::Vllm) && !self.settings_taken {
            return Err(EventError::new(
                "model_not_validated",
                "",
                "Model not validated. Make sure to validate the model by sending a \
                 session.update event.",
            ));
        }
        Ok(())
    }

    /// The model a vLLM `session.update` names must be the session's.
    fn check_model(&self, name: &str) -> Result<(), EventError> {
        match self.app.transcriber_named(name) {
            Ok(named) if named.id == self.served.id => Ok(()),
            Ok(named) => Err(EventError::new(
                "model_not_found",
                "model",
                format!(
                    "This session transcribes with {:?}: connect with ?model={} to use {name:?}",
                    self.served.id, named.id
                ),
            )),
            Err(e) => Err(EventError::new(
                e.code.unwrap_or("model_not_found"),
                "model",
                e.message,
            )),
        }
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
        let input_rate = self.dialect().input_rate();
        let item = match &mut self.item {
            Some(item) => item,
            None => {
                let resampler = (input_rate != self.sample_rate)
                    .then(|| StreamResampler::new(input_rate, self.sample_rate))
                    .transpose()
                    .map_err(resampling)?;
                self.item.insert(OpenItem {
                    id: new_item_id(),
                    resampler,
                })
            }
        };
        // The worker drops the rest of a failed item too; it need not be sent.
        if self.failed.as_ref() == Some(&item.id) {
            return Ok(item.id.clone());
        }
        let resampled = match &mut item.resampler {
            Some(resampler) => resampler.push(samples).map_err(resampling)?,
            None => samples.to_vec(),
        };
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
        let rest = match item.resampler {
            Some(resampler) => resampler.finish().map_err(resampling)?,
            None => Vec::new(),
        };
        if !rest.is_empty() {
            session.append(&item.id, rest)?;
        }
        session.commit()?;
        // A failed item completes nothing: it is not waited for.
        if self.failed.as_ref() != Some(&item.id) {
            self.pending.push_back(item.id.clone());
        }
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

    async fn on_worker_event(&mut self, event: LiveEvent) -> Result<(), End> {
        const PREFIX: &str = "conversation.item.input_audio_transcription";
        let (item, ended) = match &event {
            LiveEvent::Delta { item, .. } => (item, false),
            LiveEvent::Completed { item, .. } | LiveEvent::Failed { item, .. } => (item, true),
        };
        if ended {
            self.pending.retain(|pending| pending != item);
        }
        if matches!(event, LiveEvent::Failed { .. }) {
            self.failed = Some(item.clone());
        }
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

    /// Sends a server event (in OpenAI's shape) as the dialect has it.
    async fn send(&mut self, body: Value) -> Result<(), End> {
        if let Some(text) = self.dialect().write(&mut self.events, body) {
            self.out.send(Message::Text(text.into())).await?;
        }
        Ok(())
    }

    async fn send_error(&mut self, e: &EventError) -> Result<(), End> {
        let text = self
            .dialect()
            .error(&mut self.events, "invalid_request_error", e);
        self.out.send(Message::Text(text.into())).await?;
        Ok(())
    }

    /// The end of a session that cannot go on: an `error` event, then the socket closed
    /// with `close_code`.
    fn refusal(&mut self, code: &'static str, close_code: u16, message: &str) -> End {
        let e = EventError::new(code, "", message);
        let text = self.dialect().error(&mut self.events, "server_error", &e);
        let last = vec![Message::Text(text.into()), ws::close(close_code, message)];
        if close_code == ws::MESSAGE_TOO_BIG {
            End::Oversized(last)
        } else {
            End::With(last)
        }
    }
}
