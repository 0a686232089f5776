//! One admitted job as the batching loop advances it: the segments still to speak, the
//! session of the current one (and of later ones started ahead in spare slots), and how much
//! of its audio has gone out.

use super::job::{JobEvent, JobSummary, SegmentCodes, SpeechJob};
use super::worker::StreamSettings;
use super::ModelMetrics;
use crate::audio::join::{fade_samples, SegmentJoiner};
use crate::engine::{EngineError, SpeechSession, StopReason, TextToSpeech};
use std::collections::VecDeque;
use std::time::Instant;

/// The client went away (its receiver was dropped): the job stops.
pub(super) struct ClientGone {
    /// Frames generated for it until then.
    pub frames: usize,
}

pub(super) struct ActiveJob<'m, E: TextToSpeech + 'm> {
    pub job: SpeechJob,
    metrics: &'m ModelMetrics,
    segment: usize,
    /// The current segment's session; between segments, none (its KV slot is given back
    /// before the next one takes one).
    session: Option<E::Session<'m>>,
    /// Sessions of the segments after the current one, started early in slots nobody queued
    /// for: they generate in the same batch steps, and their audio goes out in order.
    ahead: VecDeque<E::Session<'m>>,
    /// Frames of the current segment already counted / already decoded and sent.
    seen: usize,
    decoded: usize,
    /// Decode when the segment has this many frames (streaming only).
    next_chunk: usize,
    /// Frames in the chunk after the next: chunks double up to `chunk_frames`.
    chunk: usize,
    joiner: SegmentJoiner,
    frames: usize,
    prompt_tokens: usize,
    samples: usize,
    sample_rate: u32,
    codes: Vec<SegmentCodes>,
    started: Instant,
}

impl<'m, E: TextToSpeech> ActiveJob<'m, E> {
    /// Prefills the first segment. The caller has sent nothing for this job yet.
    pub fn start(
        engine: &'m E,
        metrics: &'m ModelMetrics,
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
        let mut joiner = SegmentJoiner::new(fade_samples(sample_rate));
        joiner.begin_segment();
        Ok(ActiveJob {
            prompt_tokens: session.prompt_ids().len(),
            job,
            metrics,
            segment: 0,
            session: Some(session),
            ahead: VecDeque::new(),
            seen: 0,
            decoded: 0,
            next_chunk: streaming.first_chunk_frames.max(1),
            chunk: streaming.first_chunk_frames.max(1),
            joiner,
            frames: 0,
            samples: 0,
            sample_rate,
            codes: Vec::new(),
            started,
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

    /// Sends `pcm`, the audio decoded from [`ActiveJob::audio_due`]'s frame on.
    pub fn send_audio(&mut self, pcm: &[f32], streaming: &StreamSettings) {
        self.decoded = self.current().codes().len();
        // Later chunks grow: fewer decodes, each re-reading less context per new frame.
        self.chunk = (self.chunk * 2).min(streaming.chunk_frames.max(1));
        self.next_chunk = self.decoded + self.chunk;
        let joined = self.joiner.extend(pcm);
        self.send(joined);
    }

    /// Once the current segment has stopped (its audio sent): on to the next segment, or
    /// the job's end (`Some`).
    pub fn advance(
        &mut self,
        engine: &'m E,
        streaming: &StreamSettings,
    ) -> Result<Option<JobSummary>, EngineError> {
        if self.current().stop_reason().is_none() {
            return Ok(None);
        }
        self.keep_codes();
        if self.segment + 1 == self.job.speech.segments.len() {
            return Ok(Some(self.finish()));
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
        if self.samples == 0 {
            self.chunk = streaming.first_chunk_frames.max(1);
        }
        self.next_chunk = self.chunk;
        self.joiner.begin_segment();
        Ok(None)
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

    fn finish(&mut self) -> JobSummary {
        let tail = std::mem::replace(&mut self.joiner, SegmentJoiner::new(0)).finish();
        self.send(tail);
        let synthesis_time = self.started.elapsed();
        let audio_seconds = self.samples as f64 / f64::from(self.sample_rate);
        self.metrics.audio_seconds.record(audio_seconds);
        if audio_seconds > 0.0 {
            self.metrics
                .real_time_factor
                .record(synthesis_time.as_secs_f64() / audio_seconds);
        }
        JobSummary {
            prompt_tokens: self.prompt_tokens,
            frames: self.frames,
            stop: self
                .current()
                .stop_reason()
                .unwrap_or(StopReason::MaxFrames),
            synthesis_time,
            codes: std::mem::take(&mut self.codes),
        }
    }

    fn send(&mut self, pcm: Vec<f32>) {
        if !pcm.is_empty() {
            self.samples += pcm.len();
            let _ = self.job.events.send(JobEvent::Audio(pcm));
        }
    }
}
