//! A speech job and the events the worker sends back for it.

use crate::engine::{EngineError, PreparedSpeech, StopReason};
use std::time::{Duration, Instant};
use tokio::sync::mpsc::UnboundedSender;

/// One synthesis, as queued. Dropping the receiving end of `events` cancels it: the worker
/// checks between frames and stops.
pub struct SpeechJob {
    pub speech: PreparedSpeech,
    /// Unbounded so that a slow reader never stalls the worker; a job's audio is bounded by
    /// its `max_frames`.
    pub events: UnboundedSender<JobEvent>,
    pub enqueued: Instant,
    pub options: JobOptions,
}

/// Per-request choices beside the synthesis itself.
#[derive(Clone, Copy, Debug, Default)]
pub struct JobOptions {
    /// The client reads audio as it is generated: decode in chunks. Otherwise each segment
    /// is decoded once, when it ends (no codec context decoded twice).
    pub stream: bool,
    /// Send a `Progress` event after every frame (progress bars).
    pub progress: bool,
    /// Keep every segment's prompt and codes for the summary (`synth --dump-codes`).
    pub keep_codes: bool,
}

/// What the worker reports, in this order: `Started`, `Progress` and `Audio`, then `Done` or
/// `Failed`. A job cancelled while queued reports nothing.
#[derive(Debug)]
pub enum JobEvent {
    /// The worker took the job off the queue after it waited `queued`.
    Started {
        queued: Duration,
    },
    /// Frames generated so far, all segments together (with `JobOptions::progress`).
    Progress {
        frames: usize,
    },
    /// The next PCM samples (mono, the model's sample rate).
    Audio(Vec<f32>),
    Done(JobSummary),
    Failed(JobError),
}

#[derive(Clone, Debug)]
pub struct JobSummary {
    pub prompt_tokens: usize,
    pub frames: usize,
    pub stop: StopReason,
    /// From the job's start on the worker to its last audio.
    pub synthesis_time: Duration,
    /// Per segment, with `JobOptions::keep_codes`; empty otherwise.
    pub codes: Vec<SegmentCodes>,
}

/// What one segment was generated from and what it generated.
#[derive(Clone, Debug, serde::Serialize)]
pub struct SegmentCodes {
    pub text: String,
    pub prompt_ids: Vec<u32>,
    pub codes: Vec<Vec<u32>>,
}

#[derive(Debug, thiserror::Error)]
pub enum JobError {
    #[error(transparent)]
    Engine(#[from] EngineError),
    #[error("the inference worker panicked: {0}")]
    Panicked(String),
}
