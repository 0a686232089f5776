//! A speech job and the events the worker sends back for it.

use crate::models::voxtral_tts::{StopReason, SynthError, SynthesisRequest};
use std::time::{Duration, Instant};
use tokio::sync::mpsc::UnboundedSender;

/// One synthesis, as queued. Dropping the receiving end of `events` cancels it: the worker
/// checks between frames and stops.
pub struct SpeechJob {
    pub request: SynthesisRequest,
    /// Unbounded so that a slow reader never stalls the worker; a job's audio is bounded by
    /// its `max_frames`.
    pub events: UnboundedSender<JobEvent>,
    pub enqueued: Instant,
    pub options: JobOptions,
}

/// Per-request choices beside the synthesis itself.
#[derive(Clone, Copy, Debug, Default)]
pub struct JobOptions {
    /// Overrides the server's `normalize_text` setting for this job.
    pub normalize_text: Option<bool>,
    /// The client reads audio as it is generated: decode in chunks. Otherwise each segment
    /// is decoded once, when it ends (no codec context decoded twice).
    pub stream: bool,
}

/// What the worker reports, in this order: `Started`, `Audio` chunks, then `Done` or
/// `Failed`. A job cancelled while queued reports nothing.
#[derive(Debug)]
pub enum JobEvent {
    /// The worker took the job off the queue after it waited `queued`.
    Started {
        queued: Duration,
    },
    /// The next PCM samples (mono, the model's sample rate).
    Audio(Vec<f32>),
    Done(JobSummary),
    Failed(JobError),
}

#[derive(Clone, Copy, Debug)]
pub struct JobSummary {
    pub prompt_tokens: usize,
    pub frames: usize,
    pub stop: StopReason,
    /// From the job's start on the worker to its last audio.
    pub synthesis_time: Duration,
}

#[derive(Debug, thiserror::Error)]
pub enum JobError {
    #[error(transparent)]
    Synthesis(#[from] SynthError),
    #[error("the inference worker panicked: {0}")]
    Panicked(String),
}
