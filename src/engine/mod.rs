//! The engine interface: all that the scheduler (`crate::scheduler`) and the HTTP layer
//! (`crate::server`) know of a model family.
//!
//! A text-to-speech family comes in two halves:
//! - a [`SpeechPreparer`]: thread-safe and tensor-free, used on the request path to turn text
//!   into prompts before anything is queued ([`prepare::prepare_speech`]), so that bad input
//!   gets its 400 at once;
//! - a [`TextToSpeech`] engine, owned by one inference worker thread: it starts a
//!   [`SpeechSession`] from a prepared segment and advances a batch of sessions one frame per
//!   step, then decodes their frames to PCM.
//!
//! A speech-to-text family implements [`stt::SpeechToText`] (uploads and live streams in
//! shared batched steps), and a cloning family a [`voice::VoiceEncoder`].
//!
//! Each family lives in its own folder under `crate::models`, and is listed in
//! `crate::models::registry`, which detects the family of a model folder and loads it.

pub mod prepare;
pub mod stt;
pub mod voice;

pub use prepare::{
    prepare_speech, Conditioning, PrepareError, PreparedSegment, PreparedSpeech, Prompt, Sampling,
    SpeechInput,
};
pub use voice::{CustomVoice, VoiceTensors};

use crate::tensor::quantized::QuantFormat;
use std::sync::Arc;

/// Why a session stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StopReason {
    /// The model ended the audio itself.
    EndAudio,
    /// The request's frame limit was reached.
    MaxFrames,
}

/// What a loaded model offers: what /v1/models, the voice list and validation read.
#[derive(Clone, Debug)]
pub struct ModelCard {
    /// The family's name, e.g. `voxtral-tts`.
    pub family: &'static str,
    /// Who published the weights (OpenAI's `owned_by`).
    pub owned_by: &'static str,
    /// Where the published weights and their licence are.
    pub homepage: &'static str,
    /// Preset voices, sorted by name.
    pub voices: Vec<VoiceInfo>,
    /// OpenAI's voice names mapped onto presets, as (name, preset), for a family that maps
    /// them. A pair whose preset the folder lacks selects nothing.
    pub voice_aliases: &'static [(&'static str, &'static str)],
    /// Languages the model speaks (BCP 47).
    pub languages: Vec<String>,
    /// Whether a request's `language` steers the speech (otherwise it is accepted and ignored).
    pub language_input: bool,
    /// Whether a voice can be cloned from a reference clip.
    pub cloning: bool,
    /// Whether free-text style instructions steer the voice.
    pub instructions: bool,
    /// Whether `instructions` describe the whole voice: the model has no presets, and any
    /// requested voice name is accepted (and ignored).
    pub voice_design: bool,
    /// PCM out, mono.
    pub sample_rate: u32,
    /// Samples per generated frame (the unit of `max_frames` and of usage).
    pub samples_per_frame: usize,
    /// Most frames one request may ask for.
    pub max_frames: usize,
    /// The backend and device it runs on (filled in by the worker).
    pub device: String,
    /// How its large linear weights are multiplied: `q8`, `q4`, or the compute dtype (filled
    /// in by the worker).
    pub weights: String,
}

/// The language of a BCP 47 code without its region: `fr` of `fr-CA` (or `fr_CA`).
pub fn primary_language(code: &str) -> &str {
    code.split(['-', '_']).next().unwrap_or(code)
}

/// A preset voice as a card describes it.
#[derive(Clone, Debug)]
pub struct VoiceInfo {
    pub name: String,
    /// BCP 47 code, where known.
    pub language: Option<&'static str>,
    pub language_name: Option<&'static str>,
    pub gender: Option<&'static str>,
}

/// The request-path half of a family: no tensors, safe to call from any thread.
pub trait SpeechPreparer: Send + Sync {
    /// The prompt of one segment of (already normalized) text spoken by `voice`, a preset of
    /// the model's card (or a custom voice's id, `conditioning.custom_voice` holding it).
    /// `Err` for input the model cannot take.
    fn prompt(
        &self,
        text: &str,
        voice: &str,
        conditioning: &Conditioning,
    ) -> Result<Prompt, PrepareError>;
    /// Positions one session may use, its prompt plus its frames: a KV slot's.
    fn max_positions(&self) -> usize;
}

/// One segment's generation on the worker: frames come out one per step.
pub trait SpeechSession {
    /// The prompt this session was started from.
    fn prompt_ids(&self) -> &[u32];
    /// The codes of every frame generated so far.
    fn codes(&self) -> &[Vec<u32>];
    /// `Some` once it has stopped; a stopped session is skipped by later steps.
    fn stop_reason(&self) -> Option<StopReason>;
}

/// The worker half of a text-to-speech family.
pub trait TextToSpeech {
    type Session<'m>: SpeechSession
    where
        Self: 'm;

    /// The card, without `device` (the worker describes the device).
    fn card(&self) -> ModelCard;
    /// The request-path half, shared with the HTTP layer once the model is loaded.
    fn preparer(&self) -> Arc<dyn SpeechPreparer>;
    /// Sessions that can start now: each holds one of the KV pool's slots until it is dropped.
    fn free_slots(&self) -> usize;
    /// Starts (prefills) segment `segment` of a prepared request in a free slot.
    fn start_session<'m>(
        &'m self,
        speech: &PreparedSpeech,
        segment: usize,
    ) -> Result<Self::Session<'m>, EngineError>;
    /// Advances every running session of `batch` by one step, together: one frame each, or,
    /// for a session whose prompt is prefilled in chunks, its next chunk. An error fails
    /// every job of the batch.
    fn step(&self, batch: &mut [&mut Self::Session<'_>]) -> Result<(), EngineError>;
    /// PCM of the session's frames from `from` on. Decoding in pieces gives the same samples
    /// as decoding all frames at once.
    fn decode(&self, session: &Self::Session<'_>, from: usize) -> Result<Vec<f32>, EngineError>;
    /// [`TextToSpeech::decode`] of several sessions, each from its own frame, each delivered
    /// to its sink: what one step made due. An engine may decode them together (codec passes
    /// over many streams on an accelerator), or hand them to a thread of its own and return
    /// at once (the worker goes on stepping); a session's pieces are delivered in the order
    /// asked. A failure is delivered to every sink whose audio it touched.
    fn decode_into(&self, work: Vec<(&Self::Session<'_>, usize, PcmSink)>) {
        for (session, from, sink) in work {
            sink.deliver(self.decode(session, from));
        }
    }
}

/// Where one piece of a session's decoded PCM goes (the job's outbox): delivered once, from
/// the worker or from a thread of the engine's own. A sink dropped undelivered delivers an
/// error, so that no job waits for audio that will never come.
pub struct PcmSink {
    deliver: Option<Deliver>,
    wanted: Box<dyn Fn() -> bool + Send>,
}

type Deliver = Box<dyn FnOnce(Result<Vec<f32>, EngineError>) + Send>;

impl PcmSink {
    pub fn new(
        deliver: impl FnOnce(Result<Vec<f32>, EngineError>) + Send + 'static,
        wanted: impl Fn() -> bool + Send + 'static,
    ) -> Self {
        PcmSink {
            deliver: Some(Box::new(deliver)),
            wanted: Box::new(wanted),
        }
    }

    pub fn deliver(mut self, pcm: Result<Vec<f32>, EngineError>) {
        if let Some(deliver) = self.deliver.take() {
            deliver(pcm);
        }
    }

    /// False once the job has ended (failed, or its client gone): its decode can be skipped.
    pub fn wanted(&self) -> bool {
        (self.wanted)()
    }
}

impl Drop for PcmSink {
    fn drop(&mut self) {
        if let Some(deliver) = self.deliver.take() {
            deliver(Err(EngineError(
                "the decoder stopped before this audio was decoded (see the server log)".into(),
            )));
        }
    }
}

/// A failure inside the engine (not the input's fault: input was checked when prepared).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct EngineError(pub String);

/// Settings a worker gives the engine it loads.
#[derive(Clone, Copy, Debug)]
pub struct EngineOptions {
    /// Prompt tokens a session prefills per step: a new request holds the running ones up
    /// for at most one chunk.
    pub prefill_chunk_tokens: usize,
    /// Sessions that can run at once: the KV pool's slots, allocated when the model loads.
    pub max_sessions: usize,
    /// Memory of the KV pool, split evenly between its slots. A slot's positions (at most the
    /// model's) bound a session's prompt plus frames.
    pub kv_cache_bytes: usize,
    /// How the large linear weights are stored where the backend multiplies that format
    /// (`None`: as the checkpoint stores them, in the compute dtype).
    pub quantize: Option<QuantFormat>,
    /// Whether decode steps run as captured CUDA graphs where the family and device allow.
    pub cuda_graphs: CudaGraphs,
}

impl Default for EngineOptions {
    fn default() -> Self {
        EngineOptions {
            prefill_chunk_tokens: 256,
            max_sessions: 8,
            kv_cache_bytes: 2 << 30,
            quantize: None,
            cuda_graphs: CudaGraphs::Off,
        }
    }
}

/// `cuda_graphs`: `auto` captures the decode step as CUDA graphs when the model loads on a
/// CUDA device of a build with the graph shim, and runs eagerly (saying why) otherwise.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CudaGraphs {
    Auto,
    #[default]
    Off,
}

impl CudaGraphs {
    /// For families whose steps are not captured: with `auto`, logs that they run eagerly
    /// and `why`.
    pub fn not_captured(self, family: &str, why: &str) {
        if self == CudaGraphs::Auto {
            tracing::info!(family, why, "cuda_graphs = auto: decode steps run eagerly");
        }
    }
}

impl std::str::FromStr for CudaGraphs {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "auto" => Ok(CudaGraphs::Auto),
            "off" => Ok(CudaGraphs::Off),
            _ => Err(format!("unknown cuda_graphs {s:?}: expected auto or off")),
        }
    }
}

/// What to do with an engine once a family is loaded: the family is known only at run time,
/// so the caller (the inference worker) is handed the engine through this generic method.
pub trait WithEngine {
    type Output;
    fn run<E: TextToSpeech>(self, engine: E) -> Self::Output;
}
