//! Live transcription sessions (the Realtime WebSocket): the handle a connection holds, the
//! commands it sends the transcription worker, and the worker's side of each session.
//!
//! A session transcribes one item at a time: the audio appended since the last commit or
//! clear. Its samples (at the model's rate, resampled by the connection) go to the model as
//! they come ([`Utterance::push`]), and its positions join the worker's batched decode steps
//! ([`TranscriptionBatch`]) from the first one on, so text comes out while the client speaks.
//! A commit appends the right pad; the item drains and completes, and what the client sends
//! meanwhile waits for it, in order. A session holds a decoder slot only while an item is
//! open; the number of sessions is bounded where they are opened ([`LiveSessions::open`]), so
//! slots never run out.

use super::{stable_delta, Inbox, TranscriptionMetrics, UtteranceOf};
use crate::engine::stt::{SpeechToText, TranscriptionBatch, Utterance};
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::Sender;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};

/// What a connection asks of the worker.
pub enum LiveCommand {
    Open {
        session: u64,
        events: mpsc::UnboundedSender<LiveEvent>,
    },
    /// Samples at the model's rate for the open item (`item` names it in the events).
    Append {
        session: u64,
        item: Arc<str>,
        samples: Vec<f32>,
        received: Instant,
    },
    /// The item's audio is complete: pad, drain and complete it.
    Commit {
        session: u64,
    },
    /// Drops the open item.
    Clear {
        session: u64,
    },
    Close {
        session: u64,
    },
}

impl LiveCommand {
    /// The session it is for.
    pub fn session(&self) -> u64 {
        match self {
            LiveCommand::Open { session, .. }
            | LiveCommand::Append { session, .. }
            | LiveCommand::Commit { session }
            | LiveCommand::Clear { session }
            | LiveCommand::Close { session } => *session,
        }
    }
}

/// What the worker tells a connection.
#[derive(Debug)]
pub enum LiveEvent {
    /// Text decoded since the item's last delta; the deltas join to its transcript.
    Delta { item: Arc<str>, text: String },
    Completed {
        item: Arc<str>,
        transcript: String,
        audio_seconds: f64,
    },
    /// The item cannot be transcribed (too long for the loaded model, a model error); the
    /// session goes on with the next one.
    Failed { item: Arc<str>, message: String },
}

#[derive(Debug, thiserror::Error)]
pub enum LiveOpenError {
    #[error("this server transcribes at most {0} live sessions at once, and all are in use")]
    Full(usize),
    #[error("the transcription worker has stopped")]
    Stopped,
}

/// Opens live sessions on one model's worker, at most `max` at once.
#[derive(Clone)]
pub struct LiveSessions {
    inbox: Sender<Inbox>,
    permits: Arc<Semaphore>,
    max: usize,
    next_id: Arc<AtomicU64>,
}

impl LiveSessions {
    pub(super) fn new(inbox: Sender<Inbox>, max: usize) -> Self {
        LiveSessions {
            inbox,
            permits: Arc::new(Semaphore::new(max)),
            max,
            next_id: Arc::new(AtomicU64::new(0)),
        }
    }

    /// A new session and its events; refused when `max` are open. Dropping the session
    /// closes it and frees its place at once.
    pub fn open(&self) -> Result<(LiveSession, mpsc::UnboundedReceiver<LiveEvent>), LiveOpenError> {
        let permit = self
            .permits
            .clone()
            .try_acquire_owned()
            .map_err(|_| LiveOpenError::Full(self.max))?;
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let (events, received) = mpsc::unbounded_channel();
        let session = LiveSession {
            id,
            inbox: self.inbox.clone(),
            _permit: permit,
        };
        session
            .send(LiveCommand::Open {
                session: id,
                events,
            })
            .map_err(|_| LiveOpenError::Stopped)?;
        Ok((session, received))
    }

    /// Sessions open now.
    pub fn open_sessions(&self) -> usize {
        self.max - self.permits.available_permits()
    }
}

/// One open session, held by its connection.
pub struct LiveSession {
    id: u64,
    inbox: Sender<Inbox>,
    /// Dropped after `Drop::drop` has sent `Close`, so the worker has the close before the
    /// place is offered to a new session.
    _permit: OwnedSemaphorePermit,
}

/// The worker has stopped.
#[derive(Debug)]
pub struct WorkerStopped;

impl LiveSession {
    fn send(&self, command: LiveCommand) -> Result<(), WorkerStopped> {
        self.inbox
            .send(Inbox::Live(command))
            .map_err(|_| WorkerStopped)
    }

    pub fn append(&self, item: &Arc<str>, samples: Vec<f32>) -> Result<(), WorkerStopped> {
        self.send(LiveCommand::Append {
            session: self.id,
            item: item.clone(),
            samples,
            received: Instant::now(),
        })
    }

    pub fn commit(&self) -> Result<(), WorkerStopped> {
        self.send(LiveCommand::Commit { session: self.id })
    }

    pub fn clear(&self) -> Result<(), WorkerStopped> {
        self.send(LiveCommand::Clear { session: self.id })
    }
}

impl Drop for LiveSession {
    fn drop(&mut self) {
        let _ = self.send(LiveCommand::Close { session: self.id });
    }
}

/// An item's commands, kept in order while an earlier item drains.
enum Queued {
    Append {
        item: Arc<str>,
        samples: Vec<f32>,
        received: Instant,
    },
    Commit,
    Clear,
}

/// A model's batch, whose slots hold the items' utterances.
type BatchOf<'m, E> = <E as SpeechToText>::Batch<'m>;

/// The item being transcribed.
struct Item<U> {
    id: Arc<str>,
    utterance: U,
    /// Text sent as deltas.
    sent: String,
    /// Tokens seen after the last step: a step that adds one had this item in its batch.
    seen_tokens: usize,
    /// Time of the decode steps this item took part in.
    busy: Duration,
    /// When each append's audio arrived: (samples in after it, time).
    arrivals: VecDeque<(usize, Instant)>,
    committed: bool,
}

struct Session<U> {
    events: mpsc::UnboundedSender<LiveEvent>,
    item: Option<Item<U>>,
    /// Commands behind a committed item that is still draining.
    queued: VecDeque<Queued>,
    /// An item that failed: its later appends and its commit are dropped.
    failed: Option<Arc<str>>,
}

/// The worker's side of every open session.
pub(super) struct LiveStreams<'m, E: SpeechToText + 'm> {
    model: &'m E,
    sample_rate: u32,
    sessions: HashMap<u64, Session<UtteranceOf<'m, E>>>,
    metrics: TranscriptionMetrics,
}

impl<'m, E: SpeechToText + 'm> LiveStreams<'m, E> {
    pub(super) fn new(model: &'m E, metrics: TranscriptionMetrics) -> Self {
        LiveStreams {
            model,
            sample_rate: model.card().sample_rate,
            sessions: HashMap::new(),
            metrics,
        }
    }

    pub(super) fn sessions(&self) -> usize {
        self.sessions.len()
    }

    pub(super) fn command(&mut self, command: LiveCommand, decoder: &mut BatchOf<'m, E>) {
        match command {
            LiveCommand::Open { session, events } => {
                self.sessions.insert(
                    session,
                    Session {
                        events,
                        item: None,
                        queued: VecDeque::new(),
                        failed: None,
                    },
                );
            }
            LiveCommand::Close { session } => {
                if let Some(mut s) = self.sessions.remove(&session) {
                    if let Some(item) = s.item.take() {
                        self.end(item, decoder);
                    }
                }
            }
            LiveCommand::Append {
                session,
                item,
                samples,
                received,
            } => self.queue(
                session,
                Queued::Append {
                    item,
                    samples,
                    received,
                },
                decoder,
            ),
            LiveCommand::Commit { session } => self.queue(session, Queued::Commit, decoder),
            LiveCommand::Clear { session } => self.queue(session, Queued::Clear, decoder),
        }
    }

    /// Applies `command` now, or after the draining item when there is one.
    fn queue(&mut self, session: u64, command: Queued, decoder: &mut BatchOf<'m, E>) {
        let Some(s) = self.sessions.get_mut(&session) else {
            return;
        };
        s.queued.push_back(command);
        self.run_queued(session, decoder);
    }

    /// Applies the session's queued commands until one waits for a draining item.
    fn run_queued(&mut self, session: u64, decoder: &mut BatchOf<'m, E>) {
        loop {
            let Some(s) = self.sessions.get_mut(&session) else {
                return;
            };
            if s.item.as_ref().is_some_and(|i| i.committed) {
                return;
            }
            let Some(command) = s.queued.pop_front() else {
                return;
            };
            match command {
                Queued::Append {
                    item,
                    samples,
                    received,
                } => {
                    if s.failed.as_ref() == Some(&item) {
                        continue;
                    }
                    if s.item.is_none() {
                        match decoder.start_live() {
                            Ok(utterance) => s.item = Some(Item::new(&item, utterance)),
                            Err(e) => {
                                fail(s, item, e.to_string());
                                continue;
                            }
                        }
                    }
                    let open = s.item.as_mut().expect("an open item");
                    let pushed = open.utterance.push(&samples);
                    open.arrivals
                        .push_back((open.utterance.samples(), received));
                    if let Err(e) = pushed {
                        let item = s.item.take().expect("an open item");
                        let id = item.id.clone();
                        self.end(item, decoder);
                        let s = self.sessions.get_mut(&session).expect("the session");
                        fail(s, id, e.to_string());
                    }
                }
                Queued::Commit => {
                    if let Some(open) = s.item.as_mut() {
                        open.committed = true;
                        if let Err(e) = open.utterance.finish() {
                            let item = s.item.take().expect("an open item");
                            let id = item.id.clone();
                            self.end(item, decoder);
                            let s = self.sessions.get_mut(&session).expect("the session");
                            fail(s, id, e.to_string());
                        }
                    }
                    let s = self.sessions.get_mut(&session).expect("the session");
                    s.failed = None;
                }
                Queued::Clear => {
                    s.failed = None;
                    if let Some(item) = s.item.take() {
                        self.end(item, decoder);
                    }
                }
            }
        }
    }

    /// The open items' utterances, for a decode step.
    pub(super) fn utterances(
        &mut self,
    ) -> impl Iterator<Item = &mut UtteranceOf<'m, E>> + use<'_, 'm, E> {
        self.sessions
            .values_mut()
            .filter_map(|s| s.item.as_mut())
            .map(|i| &mut i.utterance)
    }

    /// After a decode step that took `elapsed`: each item's new text out, the drained items
    /// completed, and the commands that waited for them applied.
    pub(super) fn after_step(&mut self, elapsed: Duration, decoder: &mut BatchOf<'m, E>) {
        let model = self.model;
        let mut drained = Vec::new();
        for (&id, s) in &mut self.sessions {
            let Some(item) = s.item.as_mut() else {
                continue;
            };
            let tokens = item.utterance.tokens();
            if tokens.len() > item.seen_tokens {
                item.seen_tokens = tokens.len();
                item.busy += elapsed;
                let decoded = model.text(tokens);
                let delta = stable_delta(&decoded, &item.sent);
                if !delta.is_empty() {
                    item.sent.push_str(&delta);
                    self.metrics
                        .speech_to_text
                        .record(speech_to_text_seconds(model, item));
                    let _ = s.events.send(LiveEvent::Delta {
                        item: item.id.clone(),
                        text: delta,
                    });
                }
            }
            if item.committed && item.utterance.waiting() == 0 {
                drained.push(id);
            }
        }
        for id in drained {
            let s = self.sessions.get_mut(&id).expect("the session");
            let item = s.item.take().expect("a drained item");
            let transcript = model.text(item.utterance.tokens());
            if let Some(rest) = transcript.strip_prefix(item.sent.as_str()) {
                if !rest.is_empty() {
                    let _ = s.events.send(LiveEvent::Delta {
                        item: item.id.clone(),
                        text: rest.to_string(),
                    });
                }
            }
            let audio_seconds = item.seconds(self.sample_rate);
            if audio_seconds > 0.0 {
                self.metrics
                    .real_time_factor
                    .record(item.busy.as_secs_f64() / audio_seconds);
            }
            let _ = s.events.send(LiveEvent::Completed {
                item: item.id.clone(),
                transcript,
                audio_seconds,
            });
            self.end(item, decoder);
            self.run_queued(id, decoder);
        }
    }

    /// Fails every open item (a panic in a step they took part in) and frees its slot.
    pub(super) fn fail_all(&mut self, message: &str, decoder: &mut BatchOf<'m, E>) {
        let ids: Vec<u64> = self.sessions.keys().copied().collect();
        for id in ids {
            self.fail_session(id, message, decoder);
        }
    }

    /// Fails the session's open item, if any (a panic while it was being processed), frees
    /// its slot and goes on with what the session sent next.
    pub(super) fn fail_session(
        &mut self,
        session: u64,
        message: &str,
        decoder: &mut BatchOf<'m, E>,
    ) {
        let Some(s) = self.sessions.get_mut(&session) else {
            return;
        };
        if let Some(item) = s.item.take() {
            let item_id = item.id.clone();
            self.end(item, decoder);
            let s = self.sessions.get_mut(&session).expect("the session");
            fail(s, item_id, message.to_string());
        }
        self.run_queued(session, decoder);
    }

    /// Frees the item's slot and counts its audio.
    fn end(&self, item: Item<UtteranceOf<'m, E>>, decoder: &mut BatchOf<'m, E>) {
        self.metrics
            .audio_seconds
            .record(item.seconds(self.sample_rate));
        decoder.end(item.utterance);
    }
}

impl<U: Utterance> Item<U> {
    fn new(id: &Arc<str>, utterance: U) -> Self {
        Item {
            id: id.clone(),
            utterance,
            sent: String::new(),
            seen_tokens: 0,
            busy: Duration::ZERO,
            arrivals: VecDeque::new(),
            committed: false,
        }
    }

    /// Seconds of audio received.
    fn seconds(&self, sample_rate: u32) -> f64 {
        self.utterance.samples() as f64 / f64::from(sample_rate)
    }
}

fn fail<U>(s: &mut Session<U>, item: Arc<str>, message: String) {
    s.failed = Some(item.clone());
    let _ = s.events.send(LiveEvent::Failed { item, message });
}

/// Seconds from when the speech that the item's last token transcribes arrived to now.
fn speech_to_text_seconds<U: Utterance>(model: &impl SpeechToText, item: &mut Item<U>) -> f64 {
    let spoken_end = model.spoken_samples(item.utterance.tokens().len());
    // Appends wholly before that sample are no longer needed.
    while item.arrivals.len() > 1 && item.arrivals[0].0 < spoken_end {
        item.arrivals.pop_front();
    }
    item.arrivals
        .front()
        .map_or(0.0, |&(_, at)| at.elapsed().as_secs_f64())
}
