//! The inference core: one worker thread owns the model and its libtorch context; the HTTP
//! layer submits jobs through a bounded queue and reads each job's events from its own channel.
//!
//! - `job`: what a job carries and the events it produces.
//! - `queue`: the bounded queue in front of the worker (full -> the caller answers 429).
//! - `worker`: loads the model, then runs jobs with continuous batching: all running jobs
//!   advance one frame per step; jobs join and leave between steps.
//! - `active`: one running job's state (segments, streaming chunks, its end).
//! - `outbox`: a job's audio and end, sent in order whichever thread decodes them.
//! - `voice_encoding`: a cloning model's encoders on a thread of their own (custom voices).
//! - `transcription`: speech to text's worker, its queue and live sessions.
//!
//! It names no model: it drives any `crate::engine::TextToSpeech` or
//! `crate::engine::stt::SpeechToText`, loaded through `crate::models::registry`.

mod active;
pub mod job;
mod outbox;
pub mod queue;
pub mod transcription;
pub mod voice_encoding;
pub mod worker;

pub use job::{JobError, JobEvent, JobOptions, JobSummary, SegmentCodes, SpeechJob};
pub use queue::{JobQueue, SubmitError};
pub use worker::{start_worker, EngineState, LoadedModel, StreamSettings, WorkerSettings};

/// Metrics the worker records (the HTTP layer describes and exports them), each with a
/// `model` label: the id the model is served under.
pub mod metric_names {
    /// Counter, label `outcome`: completed | failed | panicked | cancelled.
    pub const JOBS: &str = "speech_jobs_total";
    /// Counter: frames generated, cancelled jobs included.
    pub const FRAMES: &str = "speech_frames_generated_total";
    /// Histogram: seconds of audio per job (before any `speed` change); its `_sum` is the
    /// total audio synthesized.
    pub const AUDIO_SECONDS: &str = "speech_audio_duration_seconds";
    /// Histogram: synthesis wall time / audio duration (below 1 = faster than real time).
    pub const REAL_TIME_FACTOR: &str = "speech_real_time_factor";
    /// Gauge: jobs generating together in the current step.
    pub const BATCH_SIZE: &str = "speech_batch_size";
    /// Gauge: KV-cache slots free for new jobs (0: new jobs wait in the queue).
    pub const KV_FREE_SLOTS: &str = "speech_kv_free_slots";
    /// Gauge: 1 once the model is loaded.
    pub const MODEL_LOADED: &str = "speech_model_loaded";
}

/// One model's metrics, registered once with its `model` label: the hot loop records through
/// these handles instead of looking each metric up again per frame.
pub(crate) struct ModelMetrics {
    model: String,
    frames: metrics::Counter,
    audio_seconds: metrics::Histogram,
    real_time_factor: metrics::Histogram,
    batch_size: metrics::Gauge,
    free_slots: metrics::Gauge,
}

impl ModelMetrics {
    fn new(model: &str) -> Self {
        let label = || ("model", model.to_string());
        ModelMetrics {
            model: model.to_string(),
            frames: metrics::counter!(metric_names::FRAMES, &[label()]),
            audio_seconds: metrics::histogram!(metric_names::AUDIO_SECONDS, &[label()]),
            real_time_factor: metrics::histogram!(metric_names::REAL_TIME_FACTOR, &[label()]),
            batch_size: metrics::gauge!(metric_names::BATCH_SIZE, &[label()]),
            free_slots: metrics::gauge!(metric_names::KV_FREE_SLOTS, &[label()]),
        }
    }

    /// A job ended this way.
    fn job(&self, outcome: &'static str) {
        metrics::counter!(metric_names::JOBS, "model" => self.model.clone(), "outcome" => outcome)
            .increment(1);
    }
}
