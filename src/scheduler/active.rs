//! One admitted job as the batching loop advances it: the text segments still to speak, the
//! generation of the current one, and how much of its audio has gone out.

use super::job::{JobEvent, JobSummary, SpeechJob};
use super::metric_names;
use super::worker::StreamSettings;
use crate::audio::{self, join::SegmentJoiner};
use crate::models::voxtral_tts::{Generation, Noise, StopReason, SynthError, Voxtral};
use crate::tensor::Tensor;
use std::time::Instant;

/// Crossfade between segments: 10 ms.
const SEGMENT_FADE_SAMPLES: usize = audio::join::fade_samples(24_000);

/// How a job ended when nothing failed.
pub(super) enum Ended {
    Completed(JobSummary),
    /// The client went away (its receiver was dropped).
    Cancelled {
        frames: usize,
    },
}

/// A job taken off the queue, with the KV memory it will hold once admitted.
pub(super) struct Admission {
    pub job: SpeechJob,
    segments: Vec<String>,
    pub kv_bytes: usize,
}

impl Admission {
    pub fn new<T: Tensor>(model: &Voxtral<T>, job: SpeechJob, streaming: &StreamSettings) -> Self {
        let normalize = job
            .options
            .normalize_text
            .unwrap_or(streaming.normalize_text);
        let segments = segments(&job.request.text, normalize, streaming.segment_chars);
        // The longest segment's prompt bounds every cache this job allocates. A text the
        // tokenizer rejects reserves nothing: starting it fails at once.
        let longest_prompt = segments
            .iter()
            .filter_map(|text| model.prompt_ids(text, &job.request.voice).ok())
            .map(|ids| ids.len())
            .max()
            .unwrap_or(0);
        let kv_bytes = model.kv_cache_bytes(longest_prompt + job.request.max_frames);
        Admission {
            job,
            segments,
            kv_bytes,
        }
    }
}

/// The segments a text is synthesized as, in order (never empty).
fn segments(text: &str, normalize: bool, segment_chars: usize) -> Vec<String> {
    let opts = if normalize {
        crate::text::NormalizeOptions::default()
    } else {
        crate::text::NormalizeOptions::NONE
    };
    let segments = crate::text::prepare_segments(text, &opts, segment_chars.max(1));
    if segments.is_empty() {
        vec![text.to_string()]
    } else {
        segments
    }
}

pub(super) struct ActiveJob<'m, T: Tensor> {
    pub job: SpeechJob,
    pub kv_bytes: usize,
    /// Segments not started yet, next first.
    pending: std::vec::IntoIter<String>,
    segment_index: usize,
    generation: Generation<'m, T>,
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
    started: Instant,
}

impl<'m, T: Tensor> ActiveJob<'m, T> {
    /// Prefills the first segment. The caller has sent nothing for this job yet.
    pub fn start(
        model: &'m Voxtral<T>,
        admission: Admission,
        streaming: &StreamSettings,
    ) -> Result<Self, Box<(SpeechJob, SynthError)>> {
        let Admission {
            job,
            segments,
            kv_bytes,
        } = admission;
        let _ = job.events.send(JobEvent::Started {
            queued: job.enqueued.elapsed(),
        });
        let started = Instant::now();
        let mut pending = segments.into_iter();
        let first = pending.next().expect("at least one segment");
        let generation = match start_segment(model, &job, first, 0) {
            Ok(g) => g,
            Err(e) => return Err(Box::new((job, e))),
        };
        let mut joiner = SegmentJoiner::new(SEGMENT_FADE_SAMPLES);
        joiner.begin_segment();
        Ok(ActiveJob {
            prompt_tokens: generation.prompt_ids.len(),
            job,
            kv_bytes,
            pending,
            segment_index: 0,
            generation,
            seen: 0,
            decoded: 0,
            next_chunk: streaming.first_chunk_frames.max(1),
            chunk: streaming.first_chunk_frames.max(1),
            joiner,
            frames: 0,
            samples: 0,
            started,
        })
    }

    pub fn generation(&mut self) -> &mut Generation<'m, T> {
        &mut self.generation
    }

    /// After a batch step: counts the new frame, sends the audio that is due, and moves on to
    /// the next segment when this one stopped. `Some` once the job has ended.
    pub fn after_step(
        &mut self,
        model: &'m Voxtral<T>,
        streaming: &StreamSettings,
        panic_on_input: Option<&str>,
    ) -> Result<Option<Ended>, SynthError> {
        if panic_on_input == Some(self.job.request.text.as_str()) {
            panic!("test_panic_on_input matched this request's input");
        }
        let frames = self.generation.frames().len();
        if frames > self.seen {
            self.frames += frames - self.seen;
            metrics::counter!(metric_names::FRAMES).increment((frames - self.seen) as u64);
            self.seen = frames;
            if self.job.events.is_closed() {
                return Ok(Some(Ended::Cancelled {
                    frames: self.frames,
                }));
            }
        }
        let stopped = self.generation.stop_reason().is_some();
        let chunk_due = self.job.options.stream && frames >= self.next_chunk;
        if frames > self.decoded && (chunk_due || stopped) {
            let pcm = model.decode_tail(self.generation.frames(), self.decoded)?;
            self.decoded = frames;
            // Later chunks grow: fewer decodes, each re-reading less context per new frame.
            self.chunk = (self.chunk * 2).min(streaming.chunk_frames.max(1));
            self.next_chunk = frames + self.chunk;
            let joined = self.joiner.extend(&pcm);
            self.send(joined);
        }
        if !stopped {
            return Ok(None);
        }
        let Some(text) = self.pending.next() else {
            return Ok(Some(self.finish(model)));
        };
        self.segment_index += 1;
        self.generation = start_segment(model, &self.job, text, self.segment_index)?;
        self.prompt_tokens += self.generation.prompt_ids.len();
        self.seen = 0;
        self.decoded = 0;
        if self.samples == 0 {
            self.chunk = streaming.first_chunk_frames.max(1);
        }
        self.next_chunk = self.chunk;
        self.joiner.begin_segment();
        Ok(None)
    }

    fn finish(&mut self, model: &Voxtral<T>) -> Ended {
        let tail = std::mem::replace(&mut self.joiner, SegmentJoiner::new(0)).finish();
        self.send(tail);
        let synthesis_time = self.started.elapsed();
        let audio_seconds = self.samples as f64 / f64::from(model.sample_rate());
        metrics::histogram!(metric_names::AUDIO_SECONDS).record(audio_seconds);
        if audio_seconds > 0.0 {
            metrics::histogram!(metric_names::REAL_TIME_FACTOR)
                .record(synthesis_time.as_secs_f64() / audio_seconds);
        }
        Ended::Completed(JobSummary {
            prompt_tokens: self.prompt_tokens,
            frames: self.frames,
            stop: self
                .generation
                .stop_reason()
                .unwrap_or(StopReason::MaxFrames),
            synthesis_time,
        })
    }

    fn send(&mut self, pcm: Vec<f32>) {
        if !pcm.is_empty() {
            self.samples += pcm.len();
            let _ = self.job.events.send(JobEvent::Audio(pcm));
        }
    }
}

/// Prefills one segment; segment `index` samples with the job's seed plus `index`.
fn start_segment<'m, T: Tensor>(
    model: &'m Voxtral<T>,
    job: &SpeechJob,
    text: String,
    index: usize,
) -> Result<Generation<'m, T>, SynthError> {
    let mut request = job.request.clone();
    request.text = text;
    if let Noise::Seeded { seed, .. } = &mut request.noise {
        *seed = seed.wrapping_add(index as u64);
    }
    model.start(&request)
}
