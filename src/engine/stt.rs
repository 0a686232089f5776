//! The speech-to-text half of the engine interface: what the transcription worker
//! (`crate::scheduler::transcription`) and the HTTP layer know of a transcribing family.
//!
//! A [`SpeechToText`] engine is owned by one worker thread. It transcribes a whole upload at
//! once ([`SpeechToText::transcribe`], the command line), or many utterances together: a
//! [`TranscriptionBatch`] holds their KV slots, each [`Utterance`] (an upload's audio given
//! whole, or a live item's pushed as it arrives) decodes one token per position, and one
//! [`TranscriptionBatch::step`] advances every utterance that has a position ready in one
//! pass.

use super::CudaGraphs;
use crate::tensor::quantized::QuantFormat;

/// What clients may know of a loaded speech-to-text model.
#[derive(Clone, Debug)]
pub struct TranscriberCard {
    /// The family's name, e.g. `voxtral-realtime`.
    pub family: &'static str,
    /// Of the audio the model reads; requests are resampled to it.
    pub sample_rate: u32,
    /// Audio per decoded token.
    pub samples_per_token: usize,
    /// The longest utterance (and live item) the model was loaded for.
    pub max_audio_seconds: f64,
    /// How its large linear weights are multiplied: `q8`, `q4`, or the compute dtype (filled
    /// in by the worker).
    pub weights: String,
}

/// Settings a worker gives the speech-to-text engine it loads.
#[derive(Clone, Copy, Debug)]
pub struct TranscriberOptions {
    /// Longest utterance (and live item): the decoder's positions are sized for it when the
    /// model loads.
    pub max_audio_seconds: f64,
    /// How the large linear weights are stored where the backend multiplies that format.
    pub quantize: Option<QuantFormat>,
    /// Whether decode steps run as captured CUDA graphs where the family and device allow.
    pub cuda_graphs: CudaGraphs,
}

/// Why an utterance cannot be transcribed (too long for the loaded model, no free slot, a
/// stream the model cannot take): it fails, and the worker goes on with the others.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct TranscriptionError(pub String);

/// A word, or a segment of words, and the seconds of audio it covers.
#[derive(Clone, Debug, PartialEq)]
pub struct TimedText {
    pub text: String,
    pub start: f64,
    pub end: f64,
}

/// The worker half of a speech-to-text family.
pub trait SpeechToText {
    type Batch<'m>: TranscriptionBatch
    where
        Self: 'm;

    /// The card, without `weights` (the worker describes them).
    fn card(&self) -> TranscriberCard;
    /// Utterances decoded together, up to `slots` at once: their KV memory is allocated now.
    fn batch(&self, slots: usize) -> Self::Batch<'_>;
    /// The tokens of a whole utterance (mono, at the card's rate) decoded on their own.
    fn transcribe(&self, audio: &[f32]) -> Result<Vec<u32>, TranscriptionError>;
    /// The text of `tokens`, special tokens dropped.
    fn text(&self, tokens: &[u32]) -> String;
    /// The words of an utterance's `tokens`, each with the seconds of audio it covers.
    fn words(&self, tokens: &[u32]) -> Vec<TimedText>;
    /// Samples into a live item's audio where the speech that its first `tokens` tokens
    /// transcribe ends (the model's delay taken off): the time from speech to text of its
    /// latest text is counted from that sample's arrival.
    fn spoken_samples(&self, tokens: usize) -> usize;
}

/// Utterances sharing one KV pool, advanced together one position per step.
pub trait TranscriptionBatch {
    type Utterance: Utterance;

    /// An upload, its whole audio (mono, at the card's rate) embedded now, in a free slot.
    fn start_upload(&mut self, audio: &[f32]) -> Result<Self::Utterance, TranscriptionError>;
    /// A live item in a free slot: its audio comes with [`Utterance::push`].
    fn start_live(&mut self) -> Result<Self::Utterance, TranscriptionError>;
    /// Decodes at most one position of each of `utterances`, together; returns how many
    /// decoded a token.
    fn step(&mut self, utterances: &mut [&mut Self::Utterance]) -> usize;
    /// Gives the utterance's slot back.
    fn end(&mut self, utterance: Self::Utterance);
}

/// One utterance being decoded in a slot of its batch.
pub trait Utterance {
    /// Every token decoded so far.
    fn tokens(&self) -> &[u32];
    /// Whether the next step decodes a position of it.
    fn ready(&self) -> bool;
    /// Positions received and not decoded yet (none once the model has ended the text).
    fn waiting(&self) -> usize;
    /// Appends a live item's next samples (mono, at the card's rate).
    fn push(&mut self, samples: &[f32]) -> Result<(), TranscriptionError>;
    /// Ends a live item's audio: its last positions become ready.
    fn finish(&mut self) -> Result<(), TranscriptionError>;
    /// Audio samples received (padding excluded).
    fn samples(&self) -> usize;
}

/// What to do with a speech-to-text engine once a family is loaded (the family is known only
/// at run time): the caller is handed the engine through this generic method.
pub trait WithTranscriber {
    type Output;
    fn run<E: SpeechToText>(self, engine: E) -> Self::Output;
}

/// A new segment starts after a word ending a sentence, or after this much silence.
const SEGMENT_PAUSE_SECONDS: f64 = 1.0;

/// Words grouped into segments: a segment ends with a word that ends a sentence
/// (`.`, `!`, `?`, `…`), or before a pause of a second or more.
pub fn segments(words: &[TimedText]) -> Vec<TimedText> {
    let mut out: Vec<TimedText> = Vec::new();
    let mut open = false;
    for word in words {
        let pause = out
            .last()
            .is_some_and(|s| word.start - s.end >= SEGMENT_PAUSE_SECONDS);
        match out.last_mut() {
            Some(segment) if open && !pause => {
                segment.text.push(' ');
                segment.text.push_str(&word.text);
                segment.end = word.end;
            }
            _ => out.push(word.clone()),
        }
        open = !word.text.ends_with(['.', '!', '?', '…']);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timed(text: &str, start: f64, end: f64) -> TimedText {
        TimedText {
            text: text.into(),
            start,
            end,
        }
    }

    #[test]
    fn segments_end_at_sentence_ends_and_long_pauses() {
        let words = [
            timed("One", 0.0, 0.2),
            timed("two.", 0.3, 0.5),
            timed("Three", 0.6, 0.8),
            timed("four", 2.0, 2.2),
        ];
        assert_eq!(
            segments(&words),
            [
                timed("One two.", 0.0, 0.5),
                timed("Three", 0.6, 0.8),
                timed("four", 2.0, 2.2),
            ]
        );
        assert!(segments(&[]).is_empty());
    }
}
