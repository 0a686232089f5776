//! The bounded queue in front of the inference worker.

use super::job::{JobEvent, JobOptions, SpeechJob};
use crate::engine::PreparedSpeech;
use std::time::Instant;
use tokio::sync::mpsc::{self, error::TrySendError, UnboundedReceiver};

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SubmitError {
    #[error("the queue is full")]
    Full,
    #[error("the inference worker has stopped")]
    WorkerStopped,
}

/// Cheap to clone: every handler holds one. The worker stops once all are dropped.
#[derive(Clone)]
pub struct JobQueue {
    jobs: mpsc::Sender<SpeechJob>,
}

impl JobQueue {
    pub(super) fn new(jobs: mpsc::Sender<SpeechJob>) -> Self {
        JobQueue { jobs }
    }

    /// Queues a synthesis without waiting; its events arrive on the returned receiver, and
    /// dropping that receiver cancels the job.
    pub fn submit(
        &self,
        speech: PreparedSpeech,
        options: JobOptions,
    ) -> Result<UnboundedReceiver<JobEvent>, SubmitError> {
        let (events, receiver) = mpsc::unbounded_channel();
        let job = SpeechJob {
            speech,
            events,
            enqueued: Instant::now(),
            options,
        };
        match self.jobs.try_send(job) {
            Ok(()) => Ok(receiver),
            Err(TrySendError::Full(_)) => Err(SubmitError::Full),
            Err(TrySendError::Closed(_)) => Err(SubmitError::WorkerStopped),
        }
    }

    /// Jobs waiting to be admitted (running ones are not counted).
    pub fn depth(&self) -> usize {
        self.jobs.max_capacity() - self.jobs.capacity()
    }

    pub fn capacity(&self) -> usize {
        self.jobs.max_capacity()
    }
}
