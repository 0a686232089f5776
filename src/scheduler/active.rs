//! One admitted job as the batching loop advances it: the segments still to speak, the
//! session of the current one (and of later ones started ahead in spare slots), and how much
//! of its audio has been asked for. The audio itself goes out through the job's outbox.

use super::job::{JobError, JobEvent, JobSummary, SegmentCodes, SpeechJob};
use super::outbox::Outbox;
use super::worker::StreamSettings;
use super::ModelMetrics;
use crate::engine::{EngineError, PcmSink, SpeechSession, StopReason, TextToSpeech};
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The client went away (its receiver was dropped): the job stops.
pub(super) struct ClientGone {
    /// Frames generated for it until then.
    pub frames: usize,
}

pub(super) struct ActiveJob<'m, E: TextToSpeech + 'm> {
    pub job: SpeechJob,
    metrics: &'m ModelMetrics,
    /// Where its audio, segment joins and end go, in order.
    outbox: Arc<Outbox>,
    segment: usize,
    /// The current segment's session; between segments, none (its KV slot is given back
    /// before the next one takes one).
    session: Option<E::Session<'m>>,
    /// Sessions of the segments after the current one, started early in slots nobody queued
    /// for: they generate in the same batch steps, and their audio goes out in order.
    ahead: VecDeque<E::Session<'m>>,
    /// Frames of the current segment already counted / already asked to be decoded.
    seen: usize,
    decoded: usize,
    /// Decode when the segment has this many frames (streaming only).
    next_chunk: usize,
    /// Frames in the chunk after the next: chunks double up to `chunk_frames`.
    chunk: usize,
    frames: usize,
    prompt_tokens: usize,
    codes: Vec<SegmentCodes>,
}

impl<'m, E: TextToSpeech> ActiveJob<'m, E> {
    /// Prefills the first segment. The caller has sent nothing for this job yet.
    pub fn start(
        engine: &'m E,
        metrics: &'m Arc<ModelMetrics>,
        sample_rate: u32,
        job: SpeechJob,
        streaming: &StreamSettings,
    ) -> Result<Self, Box<(SpeechJob, EngineError)>> {
        let _ = job.events.send(JobEvent::Started {
            queued: job.enqueued.elapsed(),
        });
        let started = Instant::now();
        let session = match engine.start_session(&job.speech, 0) {
            Ok(session) => session,
            Err(e) => return Err(Box::new((job, e))),
        };
        let outbox = Outbox::new(job.events.clone(), metrics.clone(), sample_rate, started);
        Ok(ActiveJob {
            prompt_tokens: session.prompt_ids().len(),
            job,
            metrics,
            outbox,
            segment: 0,
            session: Some(session),
            ahead: VecDeque::new(),
            seen: 0,
            decoded: 0,
            next_chunk: streaming.first_chunk_frames.max(1),
            chunk: streaming.first_chunk_frames.max(1),
            frames: 0,
            codes: Vec::new(),
        })
    }

    /// Every session of the job that a batch step advances: the current one, then those
    /// started ahead.
    pub fn sessions(&mut self) -> impl Iterator<Item = &mut E::Session<'m>> {
        self.session.iter_mut().chain(self.ahead.iter_mut())
    }

    /// Starts the next segment not yet started, in a free slot; false when every segment
    /// has one.
    pub fn start_ahead(&mut self, engine: &'m E) -> Result<bool, EngineError> {
        let next = self.segment + 1 + self.ahead.len();
        if next >= self.job.speech.segments.len() {
            return Ok(false);
        }
        let session = self.start_segment(engine, next)?;
        self.ahead.push_back(session);
        Ok(true)
    }

    /// A session for segment `index`, its prompt tokens counted.
    fn start_segment(
        &mut self,
        engine: &'m E,
        index: usize,
    ) -> Result<E::Session<'m>, EngineError> {
        let session = engine.start_session(&self.job.speech, index)?;
        self.prompt_tokens += session.prompt_ids().len();
        Ok(session)
    }

    /// The current segment's session.
    pub fn current(&self) -> &E::Session<'m> {
        self.session
            .as_ref()
            .expect("a job runs a session until it ends")
    }

    /// After a batch step: counts the current segment's new frames.
    pub fn count_frames(&mut self) -> Result<(), ClientGone> {
        let frames = self.current().codes().len();
        if frames > self.seen {
            self.frames += frames - self.seen;
            self.metrics.frames.increment((frames - self.seen) as u64);
            self.seen = frames;
            if self.job.events.is_closed() {
                return Err(ClientGone {
                    frames: self.frames,
                });
            }
            if self.job.options.progress {
                let _ = self.job.events.send(JobEvent::Progress {
                    frames: self.frames,
                });
            }
        }
        Ok(())
    }

    /// The frame from which the current segment's audio is due now, if any: the next chunk
    /// of a streamed response, or the rest once the segment has stopped.
    pub fn audio_due(&self) -> Option<usize> {
        let frames = self.current().codes().len();
        let stopped = self.current().stop_reason().is_some();
        let chunk_due = self.job.options.stream && frames >= self.next_chunk;
        (frames > self.decoded && (chunk_due || stopped)).then_some(self.decoded)
    }

    /// Where the audio from [`ActiveJob::audio_due`]'s frame on goes once decoded: its place
    /// in the outbox is taken now, so it goes out in order whenever its decode delivers.
    pub fn audio_sink(&mut self, streaming: &StreamSettings) -> PcmSink {
        self.decoded = self.current().codes().len();
        // Later chunks grow: fewer decodes, each re-reading less context per new frame.
        self.chunk = (self.chunk * 2).min(streaming.chunk_frames.max(1));
        self.next_chunk = self.decoded + self.chunk;
        self.outbox.audio_sink()
    }

    /// Whether a decode of its audio failed: its outbox has sent `Failed` and counted it.
    pub fn decode_failed(&self) -> bool {
        self.outbox.finished()
    }

    /// Fails the job: `Failed` goes out at once.
    pub fn fail(&self, error: JobError, outcome: &'static str) {
        self.outbox.fail(error, outcome);
    }

    /// Its client has gone: counted as cancelled, and its pending decodes are not wanted.
    pub fn cancel(&self) {
        self.outbox.cancel();
    }

    /// Once the current segment has stopped (its audio asked for): on to the next segment,
    /// or the job's end (true: `Done` goes out after its last audio).
    pub fn advance(
        &mut self,
        engine: &'m E,
        streaming: &StreamSettings,
    ) -> Result<bool, EngineError> {
        if self.current().stop_reason().is_none() {
            return Ok(false);
        }
        self.keep_codes();
        if self.segment + 1 == self.job.speech.segments.len() {
            let summary = self.summary();
            self.outbox.done(summary);
            return Ok(true);
        }
        self.segment += 1;
        self.session = None;
        let session = match self.ahead.pop_front() {
            Some(session) => session,
            None => self.start_segment(engine, self.segment)?,
        };
        self.session = Some(session);
        self.seen = 0;
        self.decoded = 0;
        if self.outbox.samples_sent() == 0 {
            self.chunk = streaming.first_chunk_frames.max(1);
        }
        self.next_chunk = self.chunk;
        self.outbox.next_segment();
        Ok(false)
    }

    /// The text of the segment being generated.
    pub fn segment_text(&self) -> &str {
        &self.job.speech.segments[self.segment].text
    }

    fn keep_codes(&mut self) {
        if self.job.options.keep_codes {
            self.codes.push(SegmentCodes {
                text: self.segment_text().to_string(),
                prompt_ids: self.current().prompt_ids().to_vec(),
                codes: self.current().codes().to_vec(),
            });
        }
    }

    /// The job's summary; its synthesis time is taken when its last audio goes out.
    fn summary(&mut self) -> JobSummary {
        JobSummary {
            prompt_tokens: self.prompt_tokens,
            frames: self.frames,
            stop: self
                .current()
                .stop_reason()
                .unwrap_or(StopReason::MaxFrames),
            synthesis_time: Duration::ZERO,
            codes: std::mem::take(&mut self.codes),
        }
    }
}
