//! The engine path both text-in dialects share: text arrives in deltas, is cut where a
//! sentence (or clause) is complete, and each piece is queued as its own job as soon as it is
//! cut, so it joins the worker's batch while later text is still being written. The pieces'
//! audio goes out in order as one stream: joined with the crossfade of `/v1/audio/speech`'s
//! segments and encoded by one streaming encoder per generation. With a `speed` other than 1
//! each piece is held until it is complete and stretched as a whole (as `/v1/audio/speech`
//! stretches its whole audio), so its audio leaves a piece later.

use crate::audio::join::{fade_samples, SegmentJoiner};
use crate::audio::{stream_encoder, time_stretch, AudioFormat, StreamEncoder};
use crate::engine::PrepareError;
use crate::scheduler::{JobEvent, JobOptions, LoadedModel};
use crate::server::error::ApiError;
use crate::server::routes::speech::mistral::{
    check_expressiveness, reference_voice, voice_model, REFERENCE_VOICE,
};
use crate::server::routes::speech::{
    job_error, parse_speech_body_with, prepare, submit, worker_stopped, Speech,
};
use crate::server::state::{AppState, ServedModel};
use crate::server::voice_catalog;
use crate::text::{split_ranges, streamed_cut};
use axum::http::StatusCode;
use serde_json::Value;
use std::collections::VecDeque;
use std::sync::Arc;
use tokio::sync::mpsc::UnboundedReceiver;

/// Pieces queued on the worker at once per session; later ones wait here, so one socket
/// cannot fill the model's queue.
const PIECES_AHEAD: usize = 4;

/// Where streamed text is cut into pieces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Granularity {
    /// Nothing is spoken before a flush: the whole text is one piece.
    Whole,
    Sentence,
    Clause,
}

impl Granularity {
    pub fn parse(name: &str) -> Option<Self> {
        match name {
            "none" => Some(Granularity::Whole),
            "sentence" => Some(Granularity::Sentence),
            "clause" => Some(Granularity::Clause),
            _ => None,
        }
    }
}

/// What a generation speaks with: checked as a `POST /v1/audio/speech` body is.
pub struct Voice {
    pub served: ServedModel,
    pub model: Arc<LoadedModel>,
    /// The validated request; `text` is replaced by each piece's.
    pub speech: Speech,
    pub granularity: Granularity,
}

impl Voice {
    /// `body` is a `POST /v1/audio/speech` body without `input`, and two fields of Mistral's:
    /// `ref_audio` (a clip to clone the voice from, spoken by a model that clones) and
    /// `expressiveness` (which may only repeat the model's). A custom voice's id is spoken by
    /// the model that made it when `model` cannot clone.
    pub async fn new(
        app: &AppState,
        mut body: Value,
        granularity: Granularity,
    ) -> Result<Self, ApiError> {
        let take = |body: &mut Value, field: &str| {
            body.as_object_mut()
                .and_then(|b| b.remove(field))
                .filter(|v| !v.is_null())
        };
        let clip = match take(&mut body, "ref_audio") {
            Some(Value::String(clip)) => Some(clip),
            Some(_) => {
                return Err(ApiError::invalid(
                    "ref_audio",
                    "`ref_audio` must be base64.",
                ))
            }
            None => None,
        };
        let expressiveness = match take(&mut body, "expressiveness") {
            Some(Value::Number(n)) => n.as_f64(),
            Some(_) => {
                return Err(ApiError::invalid(
                    "expressiveness",
                    "`expressiveness` must be a number.",
                ))
            }
            None => None,
        };
        let requested = body["model"].as_str().map(str::to_string);
        let (served, model, reference) = match clip {
            Some(clip) => {
                let (served, model) = app.cloning_model(requested.as_deref(), "ref_audio")?;
                let reference = reference_voice(app, served, &model, &clip).await?;
                (served.clone(), model, Some(reference))
            }
            None => {
                let served = voice_model(app, requested.as_deref(), body["voice"].as_str())?;
                let model = served.loaded()?;
                (served.clone(), model, None)
            }
        };
        check_expressiveness(expressiveness, &model)?;
        body["model"] = Value::String(served.id.clone());
        if reference.is_some() {
            body["voice"] = Value::String(REFERENCE_VOICE.into());
        } else if body["voice"].is_null() {
            let card = &model.card;
            let voice = voice_catalog::resolve("alloy", card)
                .or_else(|| card.voices.first().map(|v| v.name.as_str()))
                .ok_or_else(|| {
                    ApiError::invalid(
                        "voice",
                        "This model has no preset voices: set a voice or a reference clip.",
                    )
                })?;
            body["voice"] = Value::String(voice.to_string());
        }
        body["input"] = Value::String("-".into());
        let speech = parse_speech_body_with(
            body.to_string().as_bytes(),
            usize::MAX,
            &model.card,
            reference,
        )?;
        Ok(Voice {
            served,
            model,
            speech,
            granularity,
        })
    }

    pub fn format(&self) -> AudioFormat {
        self.speech.format
    }

    pub fn sample_rate(&self) -> u32 {
        self.model.card.sample_rate
    }
}

/// What a session sends, in order.
#[derive(Debug)]
pub enum Output {
    /// A piece's first audio follows.
    PieceStarted { index: usize, text: String },
    /// Encoded audio.
    Audio(Vec<u8>),
    /// A piece is spoken: its samples (at the model's rate) in the generation's stream,
    /// from `start` (where its crossfade begins) to `end`.
    PieceDone {
        index: usize,
        text: String,
        start: usize,
        end: usize,
    },
    /// A piece could not be spoken; the generation goes on without it.
    PieceFailed { index: usize, error: ApiError },
    /// The flushed generation is all out.
    Done(Usage),
}

#[derive(Clone, Copy, Debug, Default)]
pub struct Usage {
    pub pieces: usize,
    pub prompt_tokens: usize,
    pub frames: usize,
}

/// A queued piece.
struct Running {
    index: usize,
    text: String,
    events: UnboundedReceiver<JobEvent>,
    samples: usize,
    started: bool,
    /// The piece's audio so far, when it is stretched once complete.
    held: Vec<f32>,
}

/// One socket's text and audio.
pub struct Core {
    app: AppState,
    voice: Option<Voice>,
    /// Text not cut yet.
    text: String,
    /// Cut pieces waiting for a place on the worker.
    waiting: VecDeque<(usize, String)>,
    running: VecDeque<Running>,
    next_index: usize,
    joiner: SegmentJoiner,
    encoder: Option<Box<dyn StreamEncoder>>,
    /// Samples of the generation's joined stream so far.
    joined: usize,
    usage: Usage,
    /// The client flushed: the generation ends once everything is spoken.
    flushing: bool,
}

impl Core {
    pub fn new(app: AppState) -> Self {
        Core {
            app,
            voice: None,
            text: String::new(),
            waiting: VecDeque::new(),
            running: VecDeque::new(),
            next_index: 0,
            joiner: SegmentJoiner::new(0),
            encoder: None,
            joined: 0,
            usage: Usage::default(),
            flushing: false,
        }
    }

    pub fn app(&self) -> &AppState {
        &self.app
    }

    pub fn voice(&self) -> Option<&Voice> {
        self.voice.as_ref()
    }

    /// A generation is under way: text came in and its audio is not all out.
    pub fn busy(&self) -> bool {
        !self.text.is_empty() || !self.waiting.is_empty() || !self.running.is_empty()
    }

    /// Sets what the next generation speaks with (refused while one is under way).
    pub fn configure(&mut self, voice: Voice) -> Result<(), ApiError> {
        if self.busy() {
            return Err(ApiError::invalid(
                "session",
                "The session's settings cannot change while a generation is under way: flush it first.",
            ));
        }
        self.voice = Some(voice);
        Ok(())
    }

    /// Characters taken but not spoken yet (cut or not).
    fn unspoken_chars(&self) -> usize {
        let cut: usize = self.waiting.iter().map(|(_, t)| t.chars().count()).sum();
        let running: usize = self.running.iter().map(|r| r.text.chars().count()).sum();
        self.text.chars().count() + cut + running
    }

    /// Takes a text delta; pieces it completes are queued.
    pub async fn append(&mut self, delta: &str) -> Result<Vec<Output>, ApiError> {
        if self.voice.is_none() {
            return Err(ApiError::invalid("session", "Configure the session first."));
        }
        let limit = self.app.config.max_input_chars;
        let chars = delta.chars().count();
        if self.unspoken_chars() + chars > limit {
            return Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                Some("input_text_too_long"),
                format!(
                    "At most {limit} characters may wait to be spoken; this delta of {chars} \
                     was dropped. Send more once audio has come back, or flush."
                ),
            )
            .with_param("text"));
        }
        self.flushing = false;
        self.text.push_str(delta);
        self.cut(false);
        self.pump().await
    }

    /// Ends the generation: the rest of the text is the last piece.
    pub async fn flush(&mut self) -> Result<Vec<Output>, ApiError> {
        if self.voice.is_none() {
            return Err(ApiError::invalid("session", "Configure the session first."));
        }
        self.cut(true);
        self.flushing = true;
        self.pump().await
    }

    /// Moves the complete pieces of the text to `waiting`; `all` takes the rest too.
    fn cut(&mut self, all: bool) {
        let granularity = self.voice.as_ref().map(|v| v.granularity);
        let end = match granularity {
            _ if all => Some(self.text.len()),
            Some(Granularity::Sentence) => streamed_cut(&self.text, false),
            Some(Granularity::Clause) => streamed_cut(&self.text, true),
            Some(Granularity::Whole) | None => None,
        };
        if let Some(end) = end {
            let rest = self.text.split_off(end);
            let piece = std::mem::replace(&mut self.text, rest);
            self.push_piece(piece);
        }
        // A run without any break is cut as a long segment of `/v1/audio/speech` is, so it
        // starts before the flush and the buffer stays bounded.
        let max = self.app.config.segment_chars.max(1);
        if granularity != Some(Granularity::Whole) && self.text.chars().count() > max {
            let ranges = split_ranges(&self.text, max);
            if let Some(last) = ranges.last().filter(|_| ranges.len() > 1) {
                let rest = self.text.split_off(last.start);
                let piece = std::mem::replace(&mut self.text, rest);
                self.push_piece(piece);
            }
        }
    }

    fn push_piece(&mut self, piece: String) {
        if !piece.trim().is_empty() {
            self.waiting
                .push_back((self.next_index, piece.trim().to_string()));
            self.next_index += 1;
        }
    }

    /// Queues waiting pieces while there is room; ends the generation when a flushed one is
    /// all out.
    async fn pump(&mut self) -> Result<Vec<Output>, ApiError> {
        let mut out = Vec::new();
        while self.running.len() < PIECES_AHEAD {
            let Some((index, text)) = self.waiting.pop_front() else {
                break;
            };
            match self.start_piece(index, &text).await {
                Ok(Some(events)) => self.running.push_back(Running {
                    index,
                    text,
                    events,
                    samples: 0,
                    started: false,
                    held: Vec::new(),
                }),
                // Nothing to say once normalized (only punctuation, markup).
                Ok(None) => {}
                Err(error) if error.code == Some("queue_full") => {
                    // Tried again when a piece ends or the session's timer ticks.
                    self.waiting.push_front((index, text));
                    break;
                }
                Err(error) => out.push(Output::PieceFailed { index, error }),
            }
        }
        if self.flushing && self.waiting.is_empty() && self.running.is_empty() {
            out.extend(self.finish()?);
        }
        Ok(out)
    }

    /// Retries pieces the full queue turned away.
    pub async fn retry(&mut self) -> Result<Vec<Output>, ApiError> {
        if self.waiting.is_empty() {
            return Ok(Vec::new());
        }
        self.pump().await
    }

    async fn start_piece(
        &mut self,
        index: usize,
        text: &str,
    ) -> Result<Option<UnboundedReceiver<JobEvent>>, ApiError> {
        if self.app.drain.is_draining() {
            return Err(ApiError::shutting_down());
        }
        let voice = self.voice.as_mut().expect("configured before text");
        voice.speech.text = text.to_string();
        let base_seed = voice.speech.seed;
        // Each piece its own seed, as each segment of a long request has.
        voice.speech.seed = base_seed.wrapping_add(index as u64);
        let prepared = prepare(&self.app, &voice.served.id, &voice.model, &voice.speech).await;
        voice.speech.seed = base_seed;
        let prepared = match prepared {
            Ok(prepared) => prepared,
            Err(e) if e.message.trim_end_matches('.') == empty_text() => return Ok(None),
            Err(e) => return Err(e),
        };
        let options = JobOptions {
            stream: true,
            ..JobOptions::default()
        };
        submit(&voice.served, prepared, options).map(Some)
    }

    /// The next event of the piece whose audio goes out now; waits forever when there is
    /// none (for `select!`; cancel-safe).
    pub async fn next_event(&mut self) -> Option<JobEvent> {
        match self.running.front_mut() {
            Some(piece) => piece.events.recv().await,
            None => std::future::pending().await,
        }
    }

    /// Handles what [`next_event`](Self::next_event) returned.
    pub async fn on_event(&mut self, event: Option<JobEvent>) -> Result<Vec<Output>, ApiError> {
        let mut out = Vec::new();
        let Some(voice) = self.voice.as_ref().filter(|_| !self.running.is_empty()) else {
            return Ok(out);
        };
        let (speed, rate) = (voice.speech.speed, voice.sample_rate());
        match event {
            Some(JobEvent::Started { .. } | JobEvent::Progress { .. }) => return Ok(out),
            Some(JobEvent::Audio(pcm)) if speed != 1.0 => {
                let piece = self.running.front_mut().expect("the front piece");
                piece.held.extend(pcm);
                return Ok(out);
            }
            Some(JobEvent::Audio(pcm)) => return self.play(&pcm),
            Some(JobEvent::Done(summary)) => {
                if speed != 1.0 {
                    let piece = self.running.front_mut().expect("the front piece");
                    let held = std::mem::take(&mut piece.held);
                    let stretched = time_stretch(&held, speed, rate);
                    if !stretched.is_empty() {
                        out.extend(self.play(&stretched)?);
                    }
                }
                let piece = self.running.pop_front().expect("the front piece");
                let overlap = if self.usage.pieces == 0 {
                    0
                } else {
                    fade_samples(rate).min(self.joined).min(piece.samples)
                };
                let start = self.joined - overlap;
                self.joined = start + piece.samples;
                self.usage.pieces += 1;
                self.usage.prompt_tokens += summary.prompt_tokens;
                self.usage.frames += summary.frames;
                out.push(Output::PieceDone {
                    index: piece.index,
                    text: piece.text,
                    start,
                    end: self.joined,
                });
            }
            Some(JobEvent::Failed(e)) => {
                let piece = self.running.pop_front().expect("the front piece");
                out.push(Output::PieceFailed {
                    index: piece.index,
                    error: job_error(e),
                });
            }
            None => {
                self.running.pop_front();
                return Err(worker_stopped());
            }
        }
        out.extend(self.pump().await?);
        Ok(out)
    }

    /// The front piece's audio into the generation's stream, its start announced first.
    fn play(&mut self, pcm: &[f32]) -> Result<Vec<Output>, ApiError> {
        let mut out = Vec::new();
        let piece = self.running.front_mut().expect("the front piece");
        if !piece.started {
            piece.started = true;
            out.push(Output::PieceStarted {
                index: piece.index,
                text: piece.text.clone(),
            });
            if self.encoder.is_none() {
                let voice = self.voice.as_ref().expect("configured");
                let rate = voice.sample_rate();
                self.joiner = SegmentJoiner::new(fade_samples(rate));
                self.encoder = Some(stream_encoder(voice.format(), rate).map_err(encoding)?);
            }
            self.joiner.begin_segment();
        }
        piece.samples += pcm.len();
        let joined = self.joiner.extend(pcm);
        out.extend(self.encode(&joined)?);
        Ok(out)
    }

    fn encode(&mut self, pcm: &[f32]) -> Result<Option<Output>, ApiError> {
        let Some(encoder) = self.encoder.as_mut() else {
            return Ok(None);
        };
        if pcm.is_empty() {
            return Ok(None);
        }
        let bytes = encoder.push(pcm).map_err(encoding)?;
        Ok((!bytes.is_empty()).then_some(Output::Audio(bytes)))
    }

    /// The generation's last audio and its end; the next text starts a new one.
    fn finish(&mut self) -> Result<Vec<Output>, ApiError> {
        let mut out = Vec::new();
        let joiner = std::mem::replace(&mut self.joiner, SegmentJoiner::new(0));
        let tail = joiner.finish();
        out.extend(self.encode(&tail)?);
        if let Some(encoder) = self.encoder.take() {
            let bytes = encoder.finish().map_err(encoding)?;
            if !bytes.is_empty() {
                out.push(Output::Audio(bytes));
            }
        }
        out.push(Output::Done(std::mem::take(&mut self.usage)));
        self.joined = 0;
        self.next_index = 0;
        self.flushing = false;
        Ok(out)
    }
}

/// The message of a piece with nothing to say, as `prepare` words it.
fn empty_text() -> String {
    PrepareError::EmptyText.to_string()
}

fn encoding(e: crate::audio::AudioError) -> ApiError {
    ApiError::internal(format!("audio encoding failed: {e}"))
}
