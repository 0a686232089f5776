//! The inference core: one worker thread owns the model and its libtorch context; the HTTP
//! layer submits jobs through a bounded queue and reads each job's events from its own channel.
//!
//! - `job`: what a job carries and the events it produces.
//! - `queue`: the bounded queue in front of the worker (full -> the caller answers 429).
//! - `worker`: loads the model, then runs jobs with continuous batching: all running jobs
//!   advance one frame per step; jobs join and leave between steps.
//! - `active`: one running job's state (segments, streaming chunks, its end).

mod active;
pub mod job;
pub mod queue;
pub mod worker;

pub use job::{JobError, JobEvent, JobOptions, JobSummary, SpeechJob};
pub use queue::{JobQueue, SubmitError};
pub use worker::{
    start_worker, BatchSettings, EngineState, ModelInfo, StreamSettings, WorkerSettings,
};

/// Metrics the worker records (the HTTP layer describes and exports them).
pub mod metric_names {
    /// Counter, label `outcome`: completed | failed | panicked | cancelled.
    pub const JOBS: &str = "voxtral_jobs_total";
    /// Counter: frames generated (80 ms of audio each), cancelled jobs included.
    pub const FRAMES: &str = "voxtral_frames_generated_total";
    /// Histogram: seconds of audio per job (before any `speed` change); its `_sum` is the
    /// total audio synthesized.
    pub const AUDIO_SECONDS: &str = "voxtral_audio_duration_seconds";
    /// Histogram: synthesis wall time / audio duration (below 1 = faster than real time).
    pub const REAL_TIME_FACTOR: &str = "voxtral_real_time_factor";
    /// Gauge: jobs generating together in the current step.
    pub const BATCH_SIZE: &str = "voxtral_batch_size";
    /// Gauge: KV-cache bytes the running jobs reserve.
    pub const KV_RESERVED_BYTES: &str = "voxtral_kv_cache_reserved_bytes";
    /// Gauge: 1 once the model is loaded.
    pub const MODEL_LOADED: &str = "voxtral_model_loaded";
}
