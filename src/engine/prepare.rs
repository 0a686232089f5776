//! Text -> prepared segments, on the request path (the server's handlers and `synth` alike),
//! before anything is queued: normalization, splitting into segments, tokenizing and the
//! model's length limits. A request that passes holds everything the worker needs.

use super::voice::CustomVoice;
use super::SpeechPreparer;
use crate::text::{prepare_segments, NormalizeOptions};
use std::sync::Arc;

/// A speech request as the HTTP layer or the CLI received it, its voice already resolved to
/// one of the model's presets (or, with `conditioning.custom_voice`, a stored voice's id).
#[derive(Clone, Debug)]
pub struct SpeechInput {
    pub text: String,
    pub voice: String,
    pub conditioning: Conditioning,
    pub max_frames: usize,
    pub sampling: Sampling,
    /// Apply `text::normalize` before splitting.
    pub normalize: bool,
    /// Longest segment (characters) synthesized as one generation.
    pub segment_chars: usize,
}

/// What a request asks of the voice beside its text. Each family takes what its card
/// offers (`languages`, `instructions`, `cloning`) and says so for the rest.
#[derive(Clone, Debug, Default)]
pub struct Conditioning {
    /// One of the model's languages; `None`: the model's own choice ("auto").
    pub language: Option<String>,
    /// Free-text instructions: a style, or a whole voice's description.
    pub instructions: Option<String>,
    /// A voice cloned from a clip, in place of a preset.
    pub custom_voice: Option<Arc<CustomVoice>>,
}

/// How a request samples. Segment `i` of a request samples with `seed + i`.
#[derive(Clone, Copy, Debug)]
pub struct Sampling {
    pub seed: u64,
    /// Scale of the starting noise of flow-matching families (0 = deterministic).
    pub noise_scale: f32,
    /// Temperature of token-sampling families: `None` for the model's own, 0 for greedy.
    pub temperature: Option<f32>,
}

/// A request ready for the worker.
#[derive(Clone, Debug)]
pub struct PreparedSpeech {
    /// Never empty.
    pub segments: Vec<PreparedSegment>,
    pub voice: String,
    pub conditioning: Conditioning,
    pub max_frames: usize,
    pub sampling: Sampling,
}

#[derive(Clone, Debug)]
pub struct PreparedSegment {
    pub text: String,
    pub prompt: Prompt,
}

/// A segment's prompt as the family's preparer builds it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Prompt {
    pub ids: Vec<u32>,
    /// KV positions the prompt fills: its ids' count, or more for a family that adds rows
    /// of its own (a speaker embedding, a reference clip's frames).
    pub positions: usize,
}

impl Prompt {
    /// A prompt of token ids only.
    pub fn of_ids(ids: Vec<u32>) -> Self {
        Prompt {
            positions: ids.len(),
            ids,
        }
    }
}

/// Why a request cannot be synthesized: always the input's fault (HTTP 400).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PrepareError {
    #[error("unknown voice {0:?}")]
    UnknownVoice(String),
    #[error("the input is empty once normalized (markup, invisible characters and spaces are not spoken)")]
    EmptyText,
    #[error("max_frames must be between 1 and {max}, got {got}")]
    MaxFrames { got: usize, max: usize },
    /// A field the model cannot take as given, for a reason of its own.
    #[error("{message}")]
    Invalid {
        param: &'static str,
        message: String,
    },
    #[error("a segment's prompt of {prompt} positions plus {frames} frames exceeds the {max} positions a request may use (a KV slot's); lower max_frames or segment_chars")]
    TooLong {
        prompt: usize,
        frames: usize,
        max: usize,
    },
}

impl PrepareError {
    /// The request field at fault.
    pub fn param(&self) -> &'static str {
        match self {
            PrepareError::UnknownVoice(_) => "voice",
            PrepareError::MaxFrames { .. } => "max_frames",
            PrepareError::EmptyText | PrepareError::TooLong { .. } => "input",
            PrepareError::Invalid { param, .. } => param,
        }
    }
}

/// Normalizes, splits and tokenizes `input`, and checks every segment against the model's
/// limits. Linear in the input; call it off the async threads for long texts.
pub fn prepare_speech(
    preparer: &dyn SpeechPreparer,
    max_frames_cap: usize,
    input: SpeechInput,
) -> Result<PreparedSpeech, PrepareError> {
    if !(1..=max_frames_cap).contains(&input.max_frames) {
        return Err(PrepareError::MaxFrames {
            got: input.max_frames,
            max: max_frames_cap,
        });
    }
    let opts = if input.normalize {
        NormalizeOptions::default()
    } else {
        NormalizeOptions::NONE
    };
    let texts = prepare_segments(&input.text, &opts, input.segment_chars.max(1));
    if texts.is_empty() {
        return Err(PrepareError::EmptyText);
    }
    let max = preparer.max_positions();
    let segments = texts
        .into_iter()
        .map(|text| {
            let prompt = preparer.prompt(&text, &input.voice, &input.conditioning)?;
            if prompt.positions + input.max_frames > max {
                return Err(PrepareError::TooLong {
                    prompt: prompt.positions,
                    frames: input.max_frames,
                    max,
                });
            }
            Ok(PreparedSegment { text, prompt })
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(PreparedSpeech {
        segments,
        voice: input.voice,
        conditioning: input.conditioning,
        max_frames: input.max_frames,
        sampling: input.sampling,
    })
}
