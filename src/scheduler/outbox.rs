//! A job's way out: its audio, the joins between its segments and its end go to the client in
//! the order the worker asked for them, whichever thread finishes decoding them. The worker
//! reserves a place for each piece of audio as it asks for its decode, and goes on stepping;
//! the decode (on the worker, or on a thread of the engine's own, e.g. XTTS-v2's HiFi-GAN)
//! fills that place, and whatever is ready at the front goes out. So no step waits for a
//! decoder, and `Done` still comes after the last `Audio`.

use super::job::{JobError, JobEvent, JobSummary};
use super::ModelMetrics;
use crate::audio::join::{fade_samples, SegmentJoiner};
use crate::engine::{EngineError, PcmSink};
use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::Instant;
use tokio::sync::mpsc::UnboundedSender;

pub(super) struct Outbox {
    state: Mutex<State>,
    metrics: Arc<ModelMetrics>,
}

struct State {
    events: UnboundedSender<JobEvent>,
    /// Pieces not sent yet, in order; the first is piece number `sent`.
    queue: VecDeque<Piece>,
    sent: usize,
    joiner: SegmentJoiner,
    /// Samples sent, and at what rate: the job's audio duration.
    samples: usize,
    sample_rate: u32,
    /// The job's start on the worker.
    started: Instant,
    /// `Done` or `Failed` has gone out: nothing more will.
    ended: bool,
}

enum Piece {
    /// A decode's PCM; `None` until it is delivered.
    Audio(Option<Result<Vec<f32>, EngineError>>),
    /// The audio after this begins the next segment (cross-faded onto the one before).
    NextSegment,
    /// The job's end; its synthesis time is taken when it goes out.
    Done(JobSummary),
}

impl Outbox {
    pub fn new(
        events: UnboundedSender<JobEvent>,
        metrics: Arc<ModelMetrics>,
        sample_rate: u32,
        started: Instant,
    ) -> Arc<Self> {
        let mut joiner = SegmentJoiner::new(fade_samples(sample_rate));
        joiner.begin_segment();
        Arc::new(Outbox {
            state: Mutex::new(State {
                events,
                queue: VecDeque::new(),
                sent: 0,
                joiner,
                samples: 0,
                sample_rate,
                started,
                ended: false,
            }),
            metrics,
        })
    }

    /// A place for the next piece of audio, and the sink its decode delivers it to.
    pub fn audio_sink(self: &Arc<Self>) -> PcmSink {
        let index = {
            let mut state = self.lock();
            state.queue.push_back(Piece::Audio(None));
            state.sent + state.queue.len() - 1
        };
        let (outbox, asker) = (self.clone(), self.clone());
        PcmSink::new(
            move |pcm| outbox.deliver(index, pcm),
            move || !asker.ended(),
        )
    }

    /// The audio queued after this belongs to the next segment.
    pub fn next_segment(&self) {
        self.push(Piece::NextSegment);
    }

    /// The job has generated everything: `Done` goes out after its last audio.
    pub fn done(&self, summary: JobSummary) {
        self.push(Piece::Done(summary));
    }

    /// The job failed: `Failed` goes out now, and audio still being decoded is dropped.
    pub fn fail(&self, error: JobError, outcome: &'static str) {
        let mut state = self.lock();
        self.end(&mut state, Some(JobEvent::Failed(error)), outcome);
    }

    /// The client has gone: the job is counted as cancelled, once, and nothing more is sent.
    pub fn cancel(&self) {
        let mut state = self.lock();
        self.end(&mut state, None, "cancelled");
    }

    /// `Done` or `Failed` has gone out, or the client has gone: nothing more is wanted.
    pub fn ended(&self) -> bool {
        let state = self.lock();
        state.ended || state.events.is_closed()
    }

    /// Whether `Done` or `Failed` has gone out: while the worker still generates the job,
    /// a decode of its audio failed, and the worker stops it.
    pub fn finished(&self) -> bool {
        self.lock().ended
    }

    /// Samples of audio sent so far.
    pub fn samples_sent(&self) -> usize {
        self.lock().samples
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn push(&self, piece: Piece) {
        let mut state = self.lock();
        if !state.ended {
            state.queue.push_back(piece);
            self.flush(&mut state);
        }
    }

    fn deliver(&self, index: usize, pcm: Result<Vec<f32>, EngineError>) {
        let mut state = self.lock();
        if state.ended {
            return;
        }
        let at = index - state.sent;
        state.queue[at] = Piece::Audio(Some(pcm));
        self.flush(&mut state);
    }

    /// Sends every piece that is ready at the front of the queue.
    fn flush(&self, state: &mut State) {
        while let Some(piece) = state.queue.front() {
            if matches!(piece, Piece::Audio(None)) {
                return;
            }
            let piece = state.queue.pop_front().expect("a front piece");
            state.sent += 1;
            match piece {
                Piece::Audio(Some(Ok(pcm))) => {
                    let joined = state.joiner.extend(&pcm);
                    state.send_audio(joined);
                }
                // A decode skipped because the client went away is no failure.
                Piece::Audio(Some(Err(_))) if state.events.is_closed() => {
                    self.end(state, None, "cancelled");
                }
                Piece::Audio(Some(Err(e))) => {
                    tracing::error!(message = %e.0, "decoding failed");
                    self.end(state, Some(JobEvent::Failed(JobError::Engine(e))), "failed");
                }
                Piece::Audio(None) => unreachable!("checked above"),
                Piece::NextSegment => state.joiner.begin_segment(),
                Piece::Done(mut summary) => {
                    let joiner = std::mem::replace(&mut state.joiner, SegmentJoiner::new(0));
                    state.send_audio(joiner.finish());
                    summary.synthesis_time = state.started.elapsed();
                    let audio_seconds = state.samples as f64 / f64::from(state.sample_rate);
                    self.metrics.audio_seconds.record(audio_seconds);
                    if audio_seconds > 0.0 {
                        self.metrics
                            .real_time_factor
                            .record(summary.synthesis_time.as_secs_f64() / audio_seconds);
                    }
                    self.end(state, Some(JobEvent::Done(summary)), "completed");
                }
            }
        }
    }

    /// Sends `last`, if any, and counts the job's `outcome`: once, whoever ends it first.
    fn end(&self, state: &mut State, last: Option<JobEvent>, outcome: &'static str) {
        if state.ended {
            return;
        }
        state.ended = true;
        state.queue.clear();
        self.metrics.job(outcome);
        if let Some(last) = last {
            let _ = state.events.send(last);
        }
    }
}

impl State {
    fn send_audio(&mut self, pcm: Vec<f32>) {
        if !pcm.is_empty() {
            self.samples += pcm.len();
            let _ = self.events.send(JobEvent::Audio(pcm));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::StopReason;
    use std::time::Duration;
    use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver};

    fn outbox() -> (Arc<Outbox>, UnboundedReceiver<JobEvent>) {
        let (events, received) = unbounded_channel();
        let metrics = Arc::new(ModelMetrics::new("outbox-test"));
        // 1 kHz: a 1-sample cross-fade between segments.
        (Outbox::new(events, metrics, 1000, Instant::now()), received)
    }

    fn summary() -> JobSummary {
        JobSummary {
            prompt_tokens: 1,
            frames: 2,
            stop: StopReason::EndAudio,
            synthesis_time: Duration::ZERO,
            codes: Vec::new(),
        }
    }

    /// The events received so far: audio chunks as their samples, `Done` as `[-1.0]`,
    /// `Failed` as `[-2.0]`.
    fn drain(received: &mut UnboundedReceiver<JobEvent>) -> Vec<Vec<f32>> {
        let mut out = Vec::new();
        while let Ok(event) = received.try_recv() {
            out.push(match event {
                JobEvent::Audio(pcm) => pcm,
                JobEvent::Done(_) => vec![-1.0],
                JobEvent::Failed(_) => vec![-2.0],
                other => panic!("{other:?}"),
            });
        }
        out
    }

    #[test]
    fn audio_goes_out_in_the_order_asked_and_done_after_the_last() {
        let (outbox, mut received) = outbox();
        let first = outbox.audio_sink();
        let second = outbox.audio_sink();
        outbox.done(summary());
        second.deliver(Ok(vec![3.0, 4.0]));
        assert!(
            drain(&mut received).is_empty(),
            "nothing before the first piece"
        );
        assert!(!outbox.finished());
        first.deliver(Ok(vec![1.0, 2.0]));
        let mut sent = drain(&mut received);
        assert_eq!(sent.pop(), Some(vec![-1.0]), "Done last");
        assert_eq!(sent.concat(), [1.0, 2.0, 3.0, 4.0]);
        assert!(outbox.finished());
        assert_eq!(outbox.samples_sent(), 4);
    }

    #[test]
    fn segments_are_cross_faded_when_their_audio_arrives() {
        let (outbox, mut received) = outbox();
        let first = outbox.audio_sink();
        outbox.next_segment();
        let second = outbox.audio_sink();
        outbox.done(summary());
        second.deliver(Ok(vec![0.0, 5.0, 6.0]));
        first.deliver(Ok(vec![1.0, 2.0]));
        let mut sent = drain(&mut received);
        assert_eq!(sent.pop(), Some(vec![-1.0]));
        let joined = crate::audio::join::crossfade_join(&[vec![1.0, 2.0], vec![0.0, 5.0, 6.0]], 10);
        assert_eq!(sent.concat(), joined);
        assert_eq!(joined.len(), 3, "a real cross-fade: {joined:?}");
    }

    #[test]
    fn a_failed_or_abandoned_decode_fails_the_job_once() {
        let (outbox, mut received) = outbox();
        let first = outbox.audio_sink();
        let second = outbox.audio_sink();
        assert!(first.wanted());
        drop(first);
        assert_eq!(drain(&mut received), vec![vec![-2.0]]);
        assert!(outbox.finished());
        assert!(
            !second.wanted(),
            "the job has ended: its decodes can be skipped"
        );
        second.deliver(Ok(vec![1.0]));
        outbox.done(summary());
        outbox.fail(JobError::Panicked("late".into()), "panicked");
        assert!(drain(&mut received).is_empty(), "nothing after Failed");
    }

    #[test]
    fn a_gone_client_wants_no_more_audio_and_its_skipped_decode_ends_the_job() {
        let (outbox, received) = outbox();
        let sink = outbox.audio_sink();
        outbox.done(summary());
        assert!(sink.wanted());
        drop(received);
        assert!(!sink.wanted());
        assert!(!outbox.finished());
        // A decoder skips unwanted audio: the sink is dropped undelivered.
        drop(sink);
        assert!(outbox.finished(), "ended (as cancelled), not left waiting");
    }
}
