//! The inference worker: a plain thread that loads one model, then runs queued jobs with
//! continuous batching. The async runtime never runs model code.

use super::active::{ActiveJob, ClientGone};
use super::job::{JobError, JobEvent, SpeechJob};
use super::queue::JobQueue;
use super::{metric_names, ModelMetrics};
use crate::audio;
use crate::device::{DeviceChoice, OnBackend};
use crate::engine::{
    EngineError, EngineOptions, ModelCard, PcmSink, SpeechPreparer, TextToSpeech, WithEngine,
};
use crate::models::quantize::weight_format;
use crate::models::registry;
use crate::tensor::cpu_gemv::Variant;
use crate::tensor::tch_backend::TchTensor;
use crate::tensor::{DType, Tensor, TensorData};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::sync::Arc;
use std::thread::JoinHandle;
use tokio::sync::{mpsc, watch};

pub struct WorkerSettings {
    /// The id the model is served under: the `model` label of its metrics.
    pub model_id: String,
    pub model_dir: PathBuf,
    pub device: DeviceChoice,
    pub dtype: DType,
    /// libtorch CPU threads; 0 = its default.
    pub threads: usize,
    /// Tests only (debug builds): a job whose segment text contains this panics inside the
    /// worker.
    #[cfg(debug_assertions)]
    pub panic_on_input: Option<String>,
    pub streaming: StreamSettings,
    /// The KV pool's slots bound how many jobs generate together.
    pub engine: EngineOptions,
}

/// How a job's audio is cut into `Audio` events.
#[derive(Clone, Debug)]
pub struct StreamSettings {
    /// Frames before the first `Audio` event (small: time to first audio).
    pub first_chunk_frames: usize,
    /// Most frames per later `Audio` event: chunks double from `first_chunk_frames` up to
    /// this.
    pub chunk_frames: usize,
}

impl Default for StreamSettings {
    fn default() -> Self {
        Self {
            first_chunk_frames: 4,
            chunk_frames: 48,
        }
    }
}

/// A loaded model as the request path sees it: its card, and the half of its family that
/// prepares requests.
#[derive(Clone)]
pub struct LoadedModel {
    pub card: ModelCard,
    pub preparer: Arc<dyn SpeechPreparer>,
}

#[derive(Clone)]
pub enum EngineState {
    Loading,
    Ready(Arc<LoadedModel>),
    /// Loading failed; the message says why. The server shuts down.
    Failed(String),
}

/// Starts the worker thread with a queue of `capacity` jobs. The model loads on the thread;
/// `state` reports when it is ready. The thread ends once every `JobQueue` clone is dropped
/// and the queue is empty.
pub fn start_worker(
    settings: WorkerSettings,
    capacity: usize,
) -> std::io::Result<(JobQueue, watch::Receiver<EngineState>, JoinHandle<()>)> {
    let (jobs, receiver) = mpsc::channel(capacity);
    let (state, state_rx) = watch::channel(EngineState::Loading);
    let thread = std::thread::Builder::new()
        .name("inference".into())
        .spawn(move || run(settings, receiver, state))?;
    Ok((JobQueue::new(jobs), state_rx, thread))
}

fn run(
    settings: WorkerSettings,
    jobs: mpsc::Receiver<SpeechJob>,
    state: watch::Sender<EngineState>,
) {
    let serve = Serve {
        settings: &settings,
        jobs,
        state: &state,
    };
    if let Err(message) = settings.device.run(settings.threads, serve) {
        state.send_replace(EngineState::Failed(message));
    }
}

/// Loads the model on the resolved backend, then runs jobs until the queue closes.
struct Serve<'a> {
    settings: &'a WorkerSettings,
    jobs: mpsc::Receiver<SpeechJob>,
    state: &'a watch::Sender<EngineState>,
}

impl OnBackend for Serve<'_> {
    type Output = ();

    fn run<T: Tensor>(self, device: &T::Device) {
        let Serve {
            settings,
            jobs,
            state,
        } = self;
        let dir = &settings.model_dir;
        tracing::info!(dir = %dir.display(), backend = T::BACKEND, ?device, "loading model");
        let serving = Serving {
            settings,
            device: describe_device::<T>(device),
            weights: weight_format::<T>(dir, device, settings.dtype, settings.engine.quantize),
            jobs,
            state,
        };
        let loaded = catch_unwind(AssertUnwindSafe(|| {
            registry::load_tts::<T, _>(dir, device, settings.dtype, settings.engine, serving)
        }));
        let failure = match loaded {
            Ok(Ok(Ok(()))) => return,
            Ok(Ok(Err(message))) => message,
            Ok(Err(load)) => load.to_string(),
            Err(panic) => {
                let message = panic_message(&*panic);
                if !matches!(*state.borrow(), EngineState::Loading) {
                    tracing::error!(%message, "inference worker panicked");
                    return;
                }
                format!("loading panicked: {message}")
            }
        };
        state.send_replace(EngineState::Failed(failure));
    }
}

/// Hands a loaded engine to the batching loop.
struct Serving<'a> {
    settings: &'a WorkerSettings,
    device: String,
    weights: String,
    jobs: mpsc::Receiver<SpeechJob>,
    state: &'a watch::Sender<EngineState>,
}

impl WithEngine for Serving<'_> {
    /// `Err`: the model loaded but cannot be served.
    type Output = Result<(), String>;

    fn run<E: TextToSpeech>(mut self, engine: E) -> Result<(), String> {
        let card = ModelCard {
            device: self.device,
            weights: self.weights,
            ..engine.card()
        };
        audio::check_sample_rate(card.sample_rate)
            .map_err(|e| format!("the model's output cannot be encoded: {e}"))?;
        let sample_rate = card.sample_rate;
        tracing::info!(family = card.family, voices = card.voices.len(), device = %card.device, weights = %card.weights, "model loaded");
        self.state
            .send_replace(EngineState::Ready(Arc::new(LoadedModel {
                card,
                preparer: engine.preparer(),
            })));
        metrics::gauge!(metric_names::MODEL_LOADED, "model" => self.settings.model_id.clone())
            .set(1.0);
        Batcher {
            engine: &engine,
            sample_rate,
            metrics: &Arc::new(ModelMetrics::new(&self.settings.model_id)),
            settings: self.settings,
            active: Vec::new(),
        }
        .run(&mut self.jobs);
        tracing::debug!("job queue closed: inference worker stops");
        Ok(())
    }
}

/// The backend and device, and on a libtorch CPU the kernel variant of its decode products.
fn describe_device<T: Tensor>(device: &T::Device) -> String {
    let kernel = if T::BACKEND == TchTensor::BACKEND && T::is_cpu(device) {
        format!(" ({} kernel)", Variant::active())
    } else {
        String::new()
    };
    format!("{} {device:?}{kernel}", T::BACKEND)
}

/// The continuous-batching loop: every step advances all running jobs by one frame together;
/// between steps, queued jobs are admitted (prefilled) while the engine has free KV slots,
/// and ended ones leave, giving theirs back.
struct Batcher<'m, E: TextToSpeech> {
    engine: &'m E,
    /// Of the engine's PCM (its card's).
    sample_rate: u32,
    metrics: &'m Arc<ModelMetrics>,
    settings: &'m WorkerSettings,
    active: Vec<ActiveJob<'m, E>>,
}

impl<'m, E: TextToSpeech> Batcher<'m, E> {
    /// Runs until the queue is closed and every job has ended.
    fn run(mut self, jobs: &mut mpsc::Receiver<SpeechJob>) {
        loop {
            if !self.admit(jobs) {
                return;
            }
            self.record_gauges();
            self.step();
            self.record_gauges();
        }
    }

    fn record_gauges(&self) {
        self.metrics.batch_size.set(self.active.len() as f64);
        self.metrics.free_slots.set(self.engine.free_slots() as f64);
    }

    /// Admits queued jobs between steps; waits for one when nothing runs. False once the
    /// queue is closed and nothing is left to run.
    fn admit(&mut self, jobs: &mut mpsc::Receiver<SpeechJob>) -> bool {
        let metrics = self.metrics;
        // Queued jobs wait in the queue (where they can still be cancelled) for a free slot;
        // slots come back as running jobs end.
        while self.active.is_empty() || self.engine.free_slots() > 0 {
            let job = if self.active.is_empty() {
                match jobs.blocking_recv() {
                    Some(job) => job,
                    None => return false,
                }
            } else {
                match jobs.try_recv() {
                    Ok(job) => job,
                    Err(_) => break,
                }
            };
            if job.events.is_closed() {
                metrics.job("cancelled");
                continue;
            }
            let engine = self.engine;
            let streaming = &self.settings.streaming;
            let started = catch_unwind(AssertUnwindSafe(|| {
                ActiveJob::start(engine, metrics, self.sample_rate, job, streaming)
            }));
            match started {
                Ok(Ok(job)) => self.active.push(job),
                Ok(Err(failed)) => {
                    let (job, e) = *failed;
                    fail(metrics, &job, JobError::Engine(e), "failed");
                }
                Err(panic) => {
                    metrics.job("panicked");
                    tracing::error!(message = %panic_message(&*panic), "prefill panicked");
                }
            }
        }
        self.start_segments_ahead();
        true
    }

    /// Slots that no queued job took go to the later segments of running jobs, one job at a
    /// time in turn, so that a long text's sentences generate together (as Auralis does)
    /// rather than one after another. Queued jobs come first: this runs after admission.
    fn start_segments_ahead(&mut self) {
        let engine = self.engine;
        loop {
            let mut started = false;
            let mut failed = Vec::new();
            for (i, active) in self.active.iter_mut().enumerate() {
                if engine.free_slots() == 0 {
                    break;
                }
                match catch_unwind(AssertUnwindSafe(|| active.start_ahead(engine))) {
                    Ok(Ok(more)) => started |= more,
                    Ok(Err(e)) => failed.push((i, JobError::Engine(e), "failed")),
                    Err(panic) => {
                        let message = panic_message(&*panic);
                        failed.push((i, JobError::Panicked(message), "panicked"));
                    }
                }
            }
            for (i, error, outcome) in failed.into_iter().rev() {
                self.active.remove(i).fail(error, outcome);
            }
            if !started || engine.free_slots() == 0 {
                return;
            }
        }
    }

    /// One frame for every running job, then each job's own work: audio out, next segment,
    /// or its end.
    fn step(&mut self) {
        if self.active.is_empty() {
            return;
        }
        let engine = self.engine;
        let stepped = catch_unwind(AssertUnwindSafe(|| {
            let mut batch: Vec<_> = self.active.iter_mut().flat_map(|a| a.sessions()).collect();
            engine.step(&mut batch)
        }));
        // The batch's caches may be half-written: every job in it fails; the model itself
        // holds no per-job state, so the worker goes on.
        let (message, panicked) = match stepped {
            Ok(Ok(())) => (None, false),
            Ok(Err(e)) => (Some(e.0), false),
            Err(panic) => (Some(panic_message(&*panic)), true),
        };
        if let Some(message) = message {
            let outcome = if panicked { "panicked" } else { "failed" };
            tracing::error!(%message, jobs = self.active.len(), "batch step {outcome}");
            for active in self.active.drain(..) {
                let error = if panicked {
                    JobError::Panicked(message.clone())
                } else {
                    JobError::Engine(EngineError(message.clone()))
                };
                active.fail(error, outcome);
            }
            return;
        }
        let mut running = Vec::with_capacity(self.active.len());
        for mut active in self.active.drain(..) {
            if active.decode_failed() {
                continue;
            }
            match active.count_frames() {
                Ok(()) => running.push(active),
                Err(ClientGone { frames }) => {
                    active.cancel();
                    tracing::info!(frames, "client gone: job stopped");
                }
            }
        }
        self.decode_due(&mut running);
        let streaming = &self.settings.streaming;
        let mut still_running = Vec::with_capacity(running.len());
        for mut active in running {
            if active.decode_failed() {
                continue;
            }
            let result = catch_unwind(AssertUnwindSafe(|| {
                #[cfg(debug_assertions)]
                if let Some(trigger) = &self.settings.panic_on_input {
                    if active.segment_text().contains(trigger.as_str()) {
                        panic!("test_panic_on_input matched this request's input");
                    }
                }
                active.advance(engine, streaming)
            }));
            match result {
                Ok(Ok(false)) => still_running.push(active),
                // Its outbox sends `Done` after its last audio.
                Ok(Ok(true)) => {}
                Ok(Err(e)) => active.fail(JobError::Engine(e), "failed"),
                Err(panic) => {
                    let message = panic_message(&*panic);
                    tracing::error!(%message, "inference job panicked; the worker continues");
                    active.fail(JobError::Panicked(message), "panicked");
                }
            }
        }
        self.active = still_running;
    }

    /// Asks for the audio this step made due, every due job's in one call (codec passes over
    /// many streams on an accelerator, or handed to the engine's own vocoder thread). Each
    /// piece goes out through its job's outbox when decoded; a failed decode fails the jobs
    /// that were in it.
    fn decode_due(&self, running: &mut [ActiveJob<'m, E>]) {
        let streaming = &self.settings.streaming;
        let due: Vec<(usize, usize, PcmSink)> = running
            .iter_mut()
            .enumerate()
            .filter_map(|(i, active)| {
                let from = active.audio_due()?;
                Some((i, from, active.audio_sink(streaming)))
            })
            .collect();
        if due.is_empty() {
            return;
        }
        let jobs = due.len();
        let work = due
            .into_iter()
            .map(|(i, from, sink)| (running[i].current(), from, sink))
            .collect();
        if let Err(panic) = catch_unwind(AssertUnwindSafe(|| self.engine.decode_into(work))) {
            // The sinks it dropped have failed their jobs.
            let message = panic_message(&*panic);
            tracing::error!(%message, jobs, "decoding panicked");
        }
    }
}

fn fail(metrics: &ModelMetrics, job: &SpeechJob, error: JobError, outcome: &'static str) {
    metrics.job(outcome);
    let _ = job.events.send(JobEvent::Failed(error));
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "non-text panic payload".into())
}
