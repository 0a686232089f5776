//! The inference worker: a plain thread that loads the model, then runs queued jobs one at a
//! time. The async runtime never runs model code.

use super::job::{JobError, JobEvent, JobSummary, SpeechJob};
use super::metric_names;
use super::queue::JobQueue;
use crate::audio;
use crate::device::DeviceChoice;
use crate::model::{SynthError, Voxtral};
use crate::tensor::tch_backend::TchTensor;
use crate::tensor::DType;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;
use tokio::sync::{mpsc, watch};

pub struct WorkerSettings {
    pub model_dir: PathBuf,
    pub device: DeviceChoice,
    pub dtype: DType,
    /// Tests only: a job whose text is exactly this panics inside the worker.
    pub panic_on_input: Option<String>,
    pub streaming: StreamSettings,
}

/// How a job's audio is cut into `Audio` events, and how its text is prepared.
#[derive(Clone, Debug)]
pub struct StreamSettings {
    /// Frames before the first `Audio` event (small: time to first audio).
    pub first_chunk_frames: usize,
    /// Frames per later `Audio` event.
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
            chunk_frames: 16,
            normalize_text: true,
            segment_chars: crate::text::DEFAULT_SEGMENT_CHARS,
        }
    }
}

/// Crossfade between segments: 10 ms.
const SEGMENT_FADE_SAMPLES: usize = audio::SAMPLE_RATE as usize / 100;

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
    mut jobs: mpsc::Receiver<SpeechJob>,
    state: watch::Sender<EngineState>,
) {
    // Thread-local in libtorch: it must be taken on the thread that runs the model.
    let _no_grad = tch::no_grad_guard();
    let model = match catch_unwind(|| load(&settings)) {
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
    while let Some(job) = jobs.blocking_recv() {
        run_job(
            &model,
            job,
            settings.panic_on_input.as_deref(),
            &settings.streaming,
        );
    }
    tracing::debug!("job queue closed: inference worker stops");
}

fn load(settings: &WorkerSettings) -> Result<(Voxtral<TchTensor>, ModelInfo), String> {
    let device = settings.device.resolve_tch()?;
    tracing::info!(dir = %settings.model_dir.display(), ?device, "loading model");
    let model = Voxtral::<TchTensor>::load(&settings.model_dir, &device, settings.dtype)
        .map_err(|e| e.to_string())?;
    // The encoders take PCM at one fixed rate; a model at another rate would play wrongly.
    if model.sample_rate() != audio::SAMPLE_RATE {
        return Err(format!(
            "the model's sample rate is {} Hz; the audio encoders need {} Hz",
            model.sample_rate(),
            audio::SAMPLE_RATE
        ));
    }
    let info = ModelInfo {
        voices: model.voices().map(String::from).collect(),
        sample_rate: model.sample_rate(),
        device: format!("{device:?}"),
    };
    Ok((model, info))
}

/// How a job ended when nothing panicked.
enum Ended {
    Completed(JobSummary),
    /// The client went away (its receiver was dropped).
    Cancelled {
        frames: usize,
    },
}

fn run_job(
    model: &Voxtral<TchTensor>,
    job: SpeechJob,
    panic_on_input: Option<&str>,
    streaming: &StreamSettings,
) {
    let outcome_counter = |outcome: &'static str| {
        metrics::counter!(metric_names::JOBS, "outcome" => outcome).increment(1);
    };
    if job.events.is_closed() {
        outcome_counter("cancelled");
        return;
    }
    let _ = job.events.send(JobEvent::Started {
        queued: job.enqueued.elapsed(),
    });
    // The model holds no state across jobs (each generation has its own cache), so a panic
    // leaves nothing half-updated: the next job can use it.
    let result = catch_unwind(AssertUnwindSafe(|| {
        synthesize(model, &job, panic_on_input, streaming)
    }));
    let event = match result {
        Ok(Ok(Ended::Completed(summary))) => {
            outcome_counter("completed");
            JobEvent::Done(summary)
        }
        Ok(Ok(Ended::Cancelled { frames })) => {
            outcome_counter("cancelled");
            tracing::info!(frames, "client gone: job stopped");
            return;
        }
        Ok(Err(e)) => {
            outcome_counter("failed");
            JobEvent::Failed(JobError::Synthesis(e))
        }
        Err(panic) => {
            outcome_counter("panicked");
            let message = panic_message(&*panic);
            tracing::error!(%message, "inference job panicked; the worker continues");
            JobEvent::Failed(JobError::Panicked(message))
        }
    };
    let _ = job.events.send(event);
}

/// The segments a job's text is synthesized as, in order (never empty).
fn segments(text: &str, streaming: &StreamSettings) -> Vec<String> {
    let opts = if streaming.normalize_text {
        crate::text::NormalizeOptions::default()
    } else {
        crate::text::NormalizeOptions::NONE
    };
    let segments = crate::text::prepare_segments(text, &opts, streaming.segment_chars.max(1));
    if segments.is_empty() {
        vec![text.to_string()]
    } else {
        segments
    }
}

/// Generates the job's segments one after another, sending audio as it is decoded: the
/// first chunk after `first_chunk_frames` frames, then every `chunk_frames`. Segments are
/// joined with a short crossfade.
fn synthesize(
    model: &Voxtral<TchTensor>,
    job: &SpeechJob,
    panic_on_input: Option<&str>,
    streaming: &StreamSettings,
) -> Result<Ended, SynthError> {
    if panic_on_input == Some(job.request.text.as_str()) {
        panic!("test_panic_on_input matched this request's input");
    }
    let started = Instant::now();
    let first_chunk = streaming.first_chunk_frames.max(1);
    let chunk = streaming.chunk_frames.max(1);
    let mut joiner = audio::join::SegmentJoiner::new(SEGMENT_FADE_SAMPLES);
    let mut total_frames = 0usize;
    let mut prompt_tokens = 0;
    let mut samples = 0usize;
    let mut stop = None;
    let mut first = true;
    let send = |pcm: Vec<f32>, samples: &mut usize| {
        if !pcm.is_empty() {
            *samples += pcm.len();
            let _ = job.events.send(JobEvent::Audio(pcm));
        }
    };
    for (index, text) in segments(&job.request.text, streaming)
        .into_iter()
        .enumerate()
    {
        let mut request = job.request.clone();
        request.text = text;
        if let crate::model::Noise::Seeded { seed, .. } = &mut request.noise {
            *seed = seed.wrapping_add(index as u64);
        }
        let mut generation = model.start(&request)?;
        prompt_tokens += generation.prompt_ids.len();
        joiner.begin_segment();
        let mut decoded = 0;
        let mut next_chunk = if first { first_chunk } else { chunk };
        loop {
            let more = generation.next_frame().is_some();
            if more {
                total_frames += 1;
                metrics::counter!(metric_names::FRAMES).increment(1);
                if job.events.is_closed() {
                    return Ok(Ended::Cancelled {
                        frames: total_frames,
                    });
                }
            }
            let frames = generation.frames().len();
            if frames > decoded && (frames >= next_chunk || !more) {
                let pcm = model.decode_tail(generation.frames(), decoded)?;
                decoded = frames;
                next_chunk = frames + chunk;
                first = false;
                send(joiner.extend(&pcm), &mut samples);
            }
            if !more {
                break;
            }
        }
        stop = generation.stop_reason();
    }
    send(joiner.finish(), &mut samples);
    let synthesis_time = started.elapsed();
    let audio_seconds = samples as f64 / f64::from(model.sample_rate());
    metrics::histogram!(metric_names::AUDIO_SECONDS).record(audio_seconds);
    if audio_seconds > 0.0 {
        metrics::histogram!(metric_names::REAL_TIME_FACTOR)
            .record(synthesis_time.as_secs_f64() / audio_seconds);
    }
    Ok(Ended::Completed(JobSummary {
        prompt_tokens,
        frames: total_frames,
        stop: stop.unwrap_or(crate::model::StopReason::MaxFrames),
        synthesis_time,
    }))
}

fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "non-text panic payload".into())
}
