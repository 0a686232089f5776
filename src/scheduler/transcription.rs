//! Speech to text's worker: one thread loads a speech-to-text folder and owns it (and its
//! libtorch context), through the engine interface ([`SpeechToText`]). Whole utterances come
//! through a bounded queue, live sessions (`live`) through the same inbox; the worker advances
//! all of them together, one batched decode step at a time ([`TranscriptionBatch`]): each step
//! decodes one position of the running utterance and of every live item with a position
//! ready, and sends their new text as it is decoded. Utterances run one at a time, beside the
//! live items.

pub mod live;

use crate::device::{DeviceChoice, OnBackend};
use crate::engine::stt::{
    SpeechToText, TimedText, TranscriberCard, TranscriberOptions, TranscriptionBatch, Utterance,
    WithTranscriber,
};
use crate::engine::CudaGraphs;
use crate::models::quantize::weight_format;
use crate::models::registry;
use crate::tensor::quantized::QuantFormat;
use crate::tensor::{DType, Tensor};
use live::{LiveCommand, LiveSessions, LiveStreams};
use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, watch};

pub struct TranscriptionSettings {
    pub model_id: String,
    pub model_dir: PathBuf,
    pub device: DeviceChoice,
    pub dtype: DType,
    /// libtorch CPU threads (0: its default).
    pub threads: usize,
    /// Longest utterance (and live item): the decoder's KV cache is sized for it when the
    /// model loads.
    pub max_audio_seconds: f64,
    /// Live sessions open at once; the KV cache has a slot for each, and one for the
    /// utterance of `/v1/audio/transcriptions` being transcribed.
    pub max_live_sessions: usize,
    /// How the large linear weights are stored.
    pub quantize: Option<QuantFormat>,
    pub cuda_graphs: CudaGraphs,
}

pub enum TranscriberState {
    Loading,
    Ready(Arc<TranscriberCard>),
    Failed(String),
}

/// One utterance, mono at the card's sample rate, and where its events go.
pub struct TranscriptionJob {
    pub audio: Vec<f32>,
    pub events: mpsc::UnboundedSender<TranscriptionEvent>,
    /// When the upload was in (the metrics' time from speech to text starts there).
    pub received: Instant,
}

pub enum TranscriptionEvent {
    /// Text decoded since the last delta; the deltas join to the final text.
    Delta(String),
    Done(TimedTranscript),
    /// The job failed (input too long for the loaded model, a model error).
    Failed(String),
}

/// A finished transcription.
#[derive(Clone, Debug)]
pub struct TimedTranscript {
    pub text: String,
    /// Every token decoded (streaming pads and words included).
    pub tokens: Vec<u32>,
    pub words: Vec<TimedText>,
    /// Of the input audio.
    pub audio_seconds: f64,
}

/// Metrics the worker records, each with the labels `model` (the id the model is served
/// under) and `api` (`transcriptions` or `realtime`).
pub mod metric_names {
    /// Histogram: seconds of audio per transcription (live items cleared or cut short
    /// included); its `_sum` is the total audio transcribed.
    pub const AUDIO_SECONDS: &str = "transcription_audio_duration_seconds";
    /// Histogram, per finished transcription: the time of the decode steps it took part in
    /// divided by its audio's duration (below 1: faster than real time).
    pub const REAL_TIME_FACTOR: &str = "transcription_real_time_factor";
    /// Histogram, per piece of text sent: seconds from the arrival of the speech it
    /// transcribes (for an upload, the upload) to the text going out. Live, that includes the
    /// model's delay, its framing (the audio per token) and the wait for the step.
    pub const SPEECH_TO_TEXT: &str = "transcription_speech_to_text_seconds";
    /// Gauge (label `model` only): live sessions open.
    pub const LIVE_SESSIONS: &str = "transcription_live_sessions";
    /// Gauge (label `model` only): utterances decoded together in the last step.
    pub const BATCH_SIZE: &str = "transcription_batch_size";
}

/// One model's transcription metrics for one API.
#[derive(Clone)]
pub(crate) struct TranscriptionMetrics {
    audio_seconds: metrics::Histogram,
    real_time_factor: metrics::Histogram,
    speech_to_text: metrics::Histogram,
}

impl TranscriptionMetrics {
    fn new(model: &str, api: &'static str) -> Self {
        let labels = [("model", model.to_string()), ("api", api.to_string())];
        TranscriptionMetrics {
            audio_seconds: metrics::histogram!(metric_names::AUDIO_SECONDS, &labels),
            real_time_factor: metrics::histogram!(metric_names::REAL_TIME_FACTOR, &labels),
            speech_to_text: metrics::histogram!(metric_names::SPEECH_TO_TEXT, &labels),
        }
    }
}

/// What reaches the worker, in order: uploads and live sessions' commands.
pub(crate) enum Inbox {
    Job(TranscriptionJob),
    Live(LiveCommand),
}

/// The bounded queue in front of the worker, and the live sessions it serves.
#[derive(Clone)]
pub struct TranscriptionQueue {
    inbox: Sender<Inbox>,
    /// Jobs submitted and not started yet.
    waiting: Arc<AtomicUsize>,
    capacity: usize,
    live: LiveSessions,
}

#[derive(Debug, thiserror::Error)]
pub enum TranscriptionSubmitError {
    #[error("the transcription queue is full ({0} jobs waiting)")]
    Full(usize),
    #[error("the transcription worker has stopped")]
    Stopped,
}

impl TranscriptionQueue {
    pub fn try_submit(&self, job: TranscriptionJob) -> Result<(), TranscriptionSubmitError> {
        if self.waiting.fetch_add(1, Ordering::SeqCst) >= self.capacity {
            self.waiting.fetch_sub(1, Ordering::SeqCst);
            return Err(TranscriptionSubmitError::Full(self.capacity));
        }
        self.inbox.send(Inbox::Job(job)).map_err(|_| {
            self.waiting.fetch_sub(1, Ordering::SeqCst);
            TranscriptionSubmitError::Stopped
        })
    }

    /// Opens live sessions on this worker.
    pub fn live(&self) -> &LiveSessions {
        &self.live
    }
}

/// Starts the worker thread; it loads the model (state `Loading`, then `Ready` or `Failed`)
/// and runs jobs and live sessions until every queue handle is dropped.
pub fn start_transcription_worker(
    settings: TranscriptionSettings,
    capacity: usize,
) -> std::io::Result<(
    TranscriptionQueue,
    watch::Receiver<TranscriberState>,
    JoinHandle<()>,
)> {
    let (inbox_tx, inbox) = channel();
    // At least one: a zero capacity would refuse every job.
    let capacity = capacity.max(1);
    let waiting = Arc::new(AtomicUsize::new(0));
    let live = LiveSessions::new(inbox_tx.clone(), settings.max_live_sessions);
    let (state, state_rx) = watch::channel(TranscriberState::Loading);
    let name = format!("stt-{}", settings.model_id);
    let worker_waiting = waiting.clone();
    let thread = std::thread::Builder::new().name(name).spawn(move || {
        let (device, threads) = (settings.device, settings.threads);
        let worker = Worker {
            settings,
            inbox,
            waiting: worker_waiting,
            state: &state,
        };
        if let Err(message) = device.run(threads, worker) {
            state.send_replace(TranscriberState::Failed(message));
        }
    })?;
    let queue = TranscriptionQueue {
        inbox: inbox_tx,
        waiting,
        capacity,
        live,
    };
    Ok((queue, state_rx, thread))
}

struct Worker<'a> {
    settings: TranscriptionSettings,
    inbox: Receiver<Inbox>,
    waiting: Arc<AtomicUsize>,
    state: &'a watch::Sender<TranscriberState>,
}

impl OnBackend for Worker<'_> {
    type Output = ();

    fn run<T: Tensor>(self, device: &T::Device) {
        let s = &self.settings;
        let options = TranscriberOptions {
            max_audio_seconds: s.max_audio_seconds,
            quantize: s.quantize,
            cuda_graphs: s.cuda_graphs,
        };
        let serving = Serving {
            weights: weight_format::<T>(&s.model_dir, device, s.dtype, s.quantize),
            worker: &self,
        };
        if let Err(e) = registry::load_stt::<T, _>(&s.model_dir, device, s.dtype, options, serving)
        {
            let message = e.to_string();
            tracing::error!(model = %s.model_id, "loading failed: {message}");
            self.state.send_replace(TranscriberState::Failed(message));
        }
    }
}

/// Hands the loaded engine to the worker's loop.
struct Serving<'w, 'a> {
    weights: String,
    worker: &'w Worker<'a>,
}

impl WithTranscriber for Serving<'_, '_> {
    type Output = ();

    fn run<E: SpeechToText>(self, model: E) {
        let card = TranscriberCard {
            weights: self.weights,
            ..model.card()
        };
        let worker = self.worker;
        worker
            .state
            .send_replace(TranscriberState::Ready(Arc::new(card)));
        tracing::info!(model = %worker.settings.model_id, "speech-to-text model loaded");
        serve(&model, worker);
    }
}

/// The utterances of a model's batch.
type UtteranceOf<'m, E> = <<E as SpeechToText>::Batch<'m> as TranscriptionBatch>::Utterance;

/// Inbox messages taken between two decode steps, at most.
const MESSAGES_PER_STEP: usize = 256;

/// The worker's loop: takes what arrived, starts the next utterance when none runs, and runs
/// one decode step over everything that has a position to decode; waits for the inbox when
/// nothing has.
fn serve<'m, E: SpeechToText>(model: &'m E, worker: &Worker<'_>) {
    let id = &worker.settings.model_id;
    let label = || ("model", id.clone());
    let batch_size = metrics::gauge!(metric_names::BATCH_SIZE, &[label()]);
    let live_sessions = metrics::gauge!(metric_names::LIVE_SESSIONS, &[label()]);
    let job_metrics = TranscriptionMetrics::new(id, "transcriptions");
    let sample_rate = model.card().sample_rate;
    let mut decoder = model.batch(worker.settings.max_live_sessions + 1);
    let mut live = LiveStreams::new(model, TranscriptionMetrics::new(id, "realtime"));
    let mut jobs = VecDeque::new();
    let mut running: Option<RunningJob<UtteranceOf<'m, E>>> = None;
    loop {
        let busy = live.utterances().any(|u| u.ready())
            || running.as_ref().is_some_and(|r| r.utterance.ready())
            || (running.is_none() && !jobs.is_empty());
        let first = if busy {
            None
        } else {
            match worker.inbox.recv() {
                Ok(message) => Some(message),
                Err(_) => return, // Every handle is gone: the server has stopped.
            }
        };
        // A bounded number, so that a flood of appends does not hold the step back.
        let arrived = first
            .into_iter()
            .chain(std::iter::from_fn(|| worker.inbox.try_recv().ok()))
            .take(MESSAGES_PER_STEP);
        for message in arrived {
            match message {
                Inbox::Job(job) => jobs.push_back(job),
                Inbox::Live(command) => {
                    let session = command.session();
                    let run = std::panic::AssertUnwindSafe(|| live.command(command, &mut decoder));
                    if std::panic::catch_unwind(run).is_err() {
                        let message = "the model panicked on this audio";
                        live.fail_session(session, message, &mut decoder);
                    }
                }
            }
        }
        live_sessions.set(live.sessions() as f64);
        if running.is_none() {
            if let Some(job) = jobs.pop_front() {
                worker.waiting.fetch_sub(1, Ordering::SeqCst);
                running = RunningJob::start(&mut decoder, job, job_metrics.clone());
            }
        }
        let mut rows: Vec<_> = live.utterances().collect();
        rows.extend(running.as_mut().map(|r| &mut r.utterance));
        if !rows.iter().any(|u| u.ready()) {
            continue;
        }
        let started = Instant::now();
        let step =
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| decoder.step(&mut rows)));
        drop(rows);
        let elapsed = started.elapsed();
        match step {
            Ok(decoded) => batch_size.set(decoded as f64),
            Err(_) => {
                let message = "the model panicked on this audio";
                live.fail_all(message, &mut decoder);
                if let Some(job) = running.take() {
                    job.fail(message, &mut decoder);
                }
                continue;
            }
        }
        live.after_step(elapsed, &mut decoder);
        if let Some(job) = running.as_mut() {
            if job.after_step(model, elapsed) {
                running
                    .take()
                    .expect("the job")
                    .finish(model, sample_rate, &mut decoder);
            }
        }
    }
}

/// The upload being transcribed: all its positions are embedded when it starts.
struct RunningJob<U> {
    job: TranscriptionJob,
    utterance: U,
    /// Text sent as deltas.
    sent: String,
    seen_tokens: usize,
    busy: Duration,
    metrics: TranscriptionMetrics,
}

impl<U: Utterance> RunningJob<U> {
    /// Embeds the job's audio; `None` (the job answered) when it cannot be transcribed.
    fn start<B: TranscriptionBatch<Utterance = U>>(
        decoder: &mut B,
        job: TranscriptionJob,
        metrics: TranscriptionMetrics,
    ) -> Option<Self> {
        let started = Instant::now();
        let embedded = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            decoder.start_upload(&job.audio)
        }));
        let utterance = match embedded {
            Ok(Ok(utterance)) => utterance,
            Ok(Err(e)) => {
                let _ = job.events.send(TranscriptionEvent::Failed(e.to_string()));
                return None;
            }
            Err(_) => {
                let _ = job.events.send(TranscriptionEvent::Failed(
                    "the model panicked on this input".into(),
                ));
                return None;
            }
        };
        Some(RunningJob {
            job,
            utterance,
            sent: String::new(),
            seen_tokens: 0,
            busy: started.elapsed(),
            metrics,
        })
    }

    /// Sends the text decoded since the last delta; whether the job has ended (decoded, or
    /// its client gone).
    fn after_step(&mut self, model: &impl SpeechToText, elapsed: Duration) -> bool {
        let tokens = self.utterance.tokens();
        if tokens.len() > self.seen_tokens {
            self.seen_tokens = tokens.len();
            self.busy += elapsed;
            let delta = stable_delta(&model.text(tokens), &self.sent);
            if !delta.is_empty() {
                self.sent.push_str(&delta);
                self.metrics
                    .speech_to_text
                    .record(self.job.received.elapsed().as_secs_f64());
                let _ = self.job.events.send(TranscriptionEvent::Delta(delta));
            }
        }
        self.utterance.waiting() == 0 || self.job.events.is_closed()
    }

    fn fail(self, message: &str, decoder: &mut impl TranscriptionBatch<Utterance = U>) {
        let _ = self
            .job
            .events
            .send(TranscriptionEvent::Failed(message.to_string()));
        decoder.end(self.utterance);
    }

    /// Sends the rest of the text and the timed transcript; frees the slot.
    fn finish(
        self,
        model: &impl SpeechToText,
        sample_rate: u32,
        decoder: &mut impl TranscriptionBatch<Utterance = U>,
    ) {
        let RunningJob {
            job,
            utterance,
            sent,
            busy,
            metrics,
            ..
        } = self;
        let tokens = utterance.tokens().to_vec();
        let text = model.text(&tokens);
        decoder.end(utterance);
        let audio_seconds = job.audio.len() as f64 / f64::from(sample_rate);
        metrics.audio_seconds.record(audio_seconds);
        if job.events.is_closed() {
            return; // The client has gone.
        }
        if audio_seconds > 0.0 {
            metrics
                .real_time_factor
                .record(busy.as_secs_f64() / audio_seconds);
        }
        if let Some(rest) = text.strip_prefix(sent.as_str()) {
            if !rest.is_empty() {
                let _ = job.events.send(TranscriptionEvent::Delta(rest.to_string()));
            }
        }
        // The right padding's positions decode too: their words end with the audio.
        let words = model
            .words(&tokens)
            .into_iter()
            .map(|w| TimedText {
                start: w.start.min(audio_seconds),
                end: w.end.min(audio_seconds),
                text: w.text,
            })
            .collect();
        let _ = job.events.send(TranscriptionEvent::Done(TimedTranscript {
            words,
            audio_seconds,
            text,
            tokens,
        }));
    }
}

/// The text of `decoded` past `sent`, holding back a trailing replacement character: the
/// last token may have ended inside a UTF-8 sequence that the next one completes.
pub(crate) fn stable_delta(decoded: &str, sent: &str) -> String {
    let stable = decoded.trim_end_matches('\u{FFFD}');
    stable
        .strip_prefix(sent)
        .map_or_else(String::new, str::to_string)
}

#[cfg(test)]
mod tests {
    use super::stable_delta;

    #[test]
    fn deltas_hold_back_an_unfinished_character() {
        assert_eq!(stable_delta("ab", ""), "ab");
        assert_eq!(stable_delta("abc\u{FFFD}", "ab"), "c");
        assert_eq!(stable_delta("abcé", "abc"), "é");
        assert_eq!(stable_delta("x", "ab"), "");
    }
}
