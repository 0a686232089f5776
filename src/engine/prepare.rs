//! Text -> prepared segments, on the request path (the server's handlers and `synth` alike),
//! before anything is queued: normalization, splitting into segments, tokenizing and the
//! model's length limits. A request that passes holds everything the worker needs.

use super::SpeechPreparer;
use crate::text::{prepare_segments, NormalizeOptions};

/// A speech request as the HTTP layer or the CLI received it, its voice already resolved to
/// one of the model's presets.
#[derive(Clone, Debug)]
pub struct SpeechInput {
    pub text: String,
    pub voice: String,
    pub max_frames: usize,
    pub sampling: Sampling,
    /// Apply `text::normalize` before splitting.
    pub normalize: bool,
    /// Longest segment (characters) synthesized as one generation.
    pub segment_chars: usize,
}

/// How a request samples. Segment `i` of a request samples with `seed + i`.
#[derive(Clone, Copy, Debug)]
pub struct Sampling {
    pub seed: u64,
    /// Scale of the starting noise of flow-matching families (0 = deterministic).
    pub noise_scale: f32,
}

/// A request ready for the worker.
#[derive(Clone, Debug)]
pub struct PreparedSpeech {
    /// Never empty.
    pub segments: Vec<PreparedSegment>,
    pub voice: String,
    pub max_frames: usize,
    pub sampling: Sampling,
}

#[derive(Clone, Debug)]
pub struct PreparedSegment {
    pub text: String,
    pub prompt_ids: Vec<u32>,
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
    #[error("a segment's prompt of {prompt} tokens plus {frames} frames exceeds the {max} positions a request may use (a KV slot's); lower max_frames or segment_chars")]
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
            let prompt_ids = preparer.prompt(&text, &input.voice)?;
            if prompt_ids.len() + input.max_frames > max {
                return Err(PrepareError::TooLong {
                    prompt: prompt_ids.len(),
                    frames: input.max_frames,
                    max,
                });
            }
            Ok(PreparedSegment { text, prompt_ids })
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(PreparedSpeech {
        segments,
        voice: input.voice,
        max_frames: input.max_frames,
        sampling: input.sampling,
    })
}
