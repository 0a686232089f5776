//! The inference worker: a plain thread that loads the model, then runs queued jobs with
//! continuous batching. The async runtime never runs model code.

use super::active::{ActiveJob, Admission, Ended};
use super::job::{JobError, JobEvent, SpeechJob};
use super::metric_names;
use super::queue::JobQueue;
use crate::device::{Backend, DeviceChoice};
use crate::models::voxtral_tts::{Generation, Voxtral};
use crate::tensor::cpu_gemv::Variant;
#[cfg(feature = "mlx")]
use crate::tensor::mlx_backend::MlxTensor;
use crate::tensor::tch_backend::TchTensor;
use crate::tensor::{DType, Tensor};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::sync::Arc;
use std::thread::JoinHandle;
use tokio::sync::{mpsc, watch};

pub struct WorkerSettings {
    pub model_dir: PathBuf,
    pub device: DeviceChoice,
    pub dtype: DType,
    /// libtorch CPU threads; 0 = its default.
    pub threads: usize,
    /// Tests only: a job whose text is exactly this panics inside the worker.
    pub panic_on_input: Option<String>,
    pub streaming: StreamSettings,
    pub batching: BatchSettings,
}

/// How many jobs advance together, and how much KV-cache memory they may hold.
#[derive(Clone, Debug)]
pub struct BatchSettings {
    /// Most jobs generating at once (each step decodes one frame for every one of them).
    pub max_batch_size: usize,
    /// KV-cache bytes the running jobs may reserve together. A job that does not fit waits
    /// for others to finish; one job alone always runs, whatever its size.
    pub kv_cache_budget_bytes: usize,
}

impl Default for BatchSettings {
    fn default() -> Self {
        Self {
            max_batch_size: 8,
            kv_cache_budget_bytes: 2 << 30,
        }
    }
}

/// How a job's audio is cut into `Audio` events, and how its text is prepared.
#[derive(Clone, Debug)]
pub struct StreamSettings {
    /// Frames before the first `Audio` event (small: time to first audio).
    pub first_chunk_frames: usize,
    /// Most frames per later `Audio` event: chunks double from `first_chunk_frames` up to
    /// this.
    pub chunk_frames: usize,
    /// Apply `text::normalize` to the input before splitting.
    pub normalize_text: bool,
    /// Longest segment (characters) synthesized as one generation.
    pub segment_chars: usize,
}

impl Default for StreamSettings {
    fn default() -> Self {
        Self {
            first_chunk_frames: 4,
            chunk_frames: 48,
            normalize_text: true,
            segment_chars: crate::text::DEFAULT_SEGMENT_CHARS,
        }
    }
}

/// What the HTTP layer needs to know about the loaded model.
#[derive(Clone, Debug)]
pub struct ModelInfo {
    /// Preset voice names, sorted.
    pub voices: Vec<String>,
    pub sample_rate: u32,
    pub device: String,
}

#[derive(Clone, Debug)]
pub enum EngineState {
    Loading,
    Ready(Arc<ModelInfo>),
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
    // Thread-local in libtorch: it must be taken on the thread that runs the model.
    let _no_grad = tch::no_grad_guard();
    if settings.threads > 0 {
        tch::set_num_threads(i32::try_from(settings.threads).unwrap_or(i32::MAX));
    }
    match settings.device.resolve() {
        Ok(Backend::Tch(device)) => serve::<TchTensor>(settings, &device, jobs, state),
        #[cfg(feature = "mlx")]
        Ok(Backend::Mlx(device)) => serve::<MlxTensor>(settings, &device, jobs, state),
        Err(message) => {
            state.send_replace(EngineState::Failed(message));
        }
    }
}

/// Loads the model on `device` of backend `T`, then runs jobs until the queue closes.
fn serve<T: Tensor>(
    settings: WorkerSettings,
    device: &T::Device,
    mut jobs: mpsc::Receiver<SpeechJob>,
    state: watch::Sender<EngineState>,
) {
    let model = match catch_unwind(AssertUnwindSafe(|| load::<T>(&settings, device))) {
        Ok(Ok((model, info))) => {
            tracing::info!(voices = info.voices.len(), device = %info.device, "model loaded");
            state.send_replace(EngineState::Ready(Arc::new(info)));
            metrics::gauge!(metric_names::MODEL_LOADED).set(1.0);
            model
        }
        Ok(Err(message)) => {
            state.send_replace(EngineState::Failed(message));
            return;
        }
        Err(panic) => {
            state.send_replace(EngineState::Failed(format!(
                "loading panicked: {}",
                panic_message(&*panic)
            )));
            return;
        }
    };
    Batcher {
        model: &model,
        settings: &settings,
        active: Vec::new(),
        waiting: None,
    }
    .run(&mut jobs);
    tracing::debug!("job queue closed: inference worker stops");
}

fn load<T: Tensor>(
    settings: &WorkerSettings,
    device: &T::Device,
) -> Result<(Voxtral<T>, ModelInfo), String> {
    tracing::info!(dir = %settings.model_dir.display(), backend = T::BACKEND, ?device, "loading model");
    let model = Voxtral::<T>::load(&settings.model_dir, device, settings.dtype)
        .map_err(|e| e.to_string())?;
    // The encoders take PCM at one fixed rate; a model at another rate would play wrongly.
    if model.sample_rate() != 24_000 {
        return Err(format!(
            "the model's sample rate is {} Hz; the audio encoders need {} Hz",
            model.sample_rate(),
            24_000
        ));
    }
    let info = ModelInfo {
        voices: model.voices().map(String::from).collect(),
        sample_rate: model.sample_rate(),
        device: describe_device::<T>(device),
    };
    Ok((model, info))
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
/// between steps, queued jobs are admitted (prefilled) while the batch and KV budget allow,
/// and ended ones leave.
struct Batcher<'m, T: Tensor> {
    model: &'m Voxtral<T>,
    settings: &'m WorkerSettings,
    active: Vec<ActiveJob<'m, T>>,
    /// A job taken off the queue that waits for KV memory; admitted before any other.
    waiting: Option<Admission>,
}

impl<'m, T: Tensor> Batcher<'m, T> {
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
        metrics::gauge!(metric_names::BATCH_SIZE).set(self.active.len() as f64);
        metrics::gauge!(metric_names::KV_RESERVED_BYTES).set(self.reserved() as f64);
    }

    fn reserved(&self) -> usize {
        self.active.iter().map(|a| a.kv_bytes).sum()
    }

    /// Admits queued jobs between steps; waits for one when nothing runs. False once the
    /// queue is closed and nothing is left to run.
    fn admit(&mut self, jobs: &mut mpsc::Receiver<SpeechJob>) -> bool {
        let batching = &self.settings.batching;
        while self.active.len() < batching.max_batch_size.max(1) {
            let admission = match self.waiting.take() {
                Some(admission) => admission,
                None => {
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
                        count_outcome("cancelled");
                        continue;
                    }
                    let model = self.model;
                    let streaming = &self.settings.streaming;
                    match catch_unwind(AssertUnwindSafe(|| Admission::new(model, job, streaming))) {
                        Ok(admission) => admission,
                        Err(panic) => {
                            count_outcome("panicked");
                            tracing::error!(message = %panic_message(&*panic), "admission panicked");
                            continue;
                        }
                    }
                }
            };
            if admission.job.events.is_closed() {
                count_outcome("cancelled");
                continue;
            }
            let fits = self.reserved() + admission.kv_bytes <= batching.kv_cache_budget_bytes;
            if !fits && !self.active.is_empty() {
                self.waiting = Some(admission);
                break;
            }
            if !fits {
                tracing::warn!(
                    kv_bytes = admission.kv_bytes,
                    budget = batching.kv_cache_budget_bytes,
                    "a job larger than the KV budget runs alone"
                );
            }
            let model = self.model;
            let streaming = &self.settings.streaming;
            let started = catch_unwind(AssertUnwindSafe(|| {
                ActiveJob::start(model, admission, streaming)
            }));
            match started {
                Ok(Ok(job)) => self.active.push(job),
                Ok(Err(failed)) => {
                    let (job, e) = *failed;
                    fail(&job, JobError::Synthesis(e), "failed");
                }
                Err(panic) => {
                    count_outcome("panicked");
                    tracing::error!(message = %panic_message(&*panic), "prefill panicked");
                }
            }
        }
        true
    }

    /// One frame for every running job, then each job's own work: audio out, next segment,
    /// or its end.
    fn step(&mut self) {
        if self.active.is_empty() {
            return;
        }
        let stepped = catch_unwind(AssertUnwindSafe(|| {
            let mut batch: Vec<_> = self.active.iter_mut().map(|a| a.generation()).collect();
            Generation::step_batch(&mut batch);
        }));
        if let Err(panic) = stepped {
            // The batch's caches may be half-written: every job in it fails; the model
            // itself holds no per-job state, so the worker goes on.
            let message = panic_message(&*panic);
            tracing::error!(%message, jobs = self.active.len(), "batch step panicked");
            for active in self.active.drain(..) {
                fail(&active.job, JobError::Panicked(message.clone()), "panicked");
            }
            return;
        }
        let model = self.model;
        let streaming = &self.settings.streaming;
        let panic_on_input = self.settings.panic_on_input.as_deref();
        let mut running = Vec::with_capacity(self.active.len());
        for mut active in self.active.drain(..) {
            let result = catch_unwind(AssertUnwindSafe(|| {
                active.after_step(model, streaming, panic_on_input)
            }));
            match result {
                Ok(Ok(None)) => running.push(active),
                Ok(Ok(Some(Ended::Completed(summary)))) => {
                    count_outcome("completed");
                    let _ = active.job.events.send(JobEvent::Done(summary));
                }
                Ok(Ok(Some(Ended::Cancelled { frames }))) => {
                    count_outcome("cancelled");
                    tracing::info!(frames, "client gone: job stopped");
                }
                Ok(Err(e)) => fail(&active.job, JobError::Synthesis(e), "failed"),
                Err(panic) => {
                    let message = panic_message(&*panic);
                    tracing::error!(%message, "inference job panicked; the worker continues");
                    fail(&active.job, JobError::Panicked(message), "panicked");
                }
            }
        }
        self.active = running;
    }
}

fn count_outcome(outcome: &'static str) {
    metrics::counter!(metric_names::JOBS, "outcome" => outcome).increment(1);
}

fn fail(job: &SpeechJob, error: JobError, outcome: &'static str) {
    count_outcome(outcome);
    let _ = job.events.send(JobEvent::Failed(error));
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "non-text panic payload".into())
}
