//! The offline transcription prompt (spec §5, mistral-common `encode_transcription` in
//! streaming format): `<s>`, then one `[STREAMING_PAD]` per left-pad token and per delay
//! token. The request's language has no place in it.

use super::params::Streaming;
use crate::nn::LoadError;
use crate::tokenizers::tekken::Tekken;

/// The special tokens transcription needs, resolved by name from tekken.json.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SpecialIds {
    pub bos: u32,
    pub eos: u32,
    pub streaming_pad: u32,
    pub streaming_word: u32,
}

impl SpecialIds {
    /// `tekken_file` names the tokenizer's file in errors.
    pub fn resolve(tokenizer: &Tekken, tekken_file: &str) -> Result<Self, LoadError> {
        let id = |name: &str| {
            tokenizer.special_id(name).ok_or_else(|| {
                LoadError::invalid(tekken_file, "special_tokens", format!("{name} is missing"))
            })
        };
        Ok(SpecialIds {
            bos: id("<s>")?,
            eos: id("</s>")?,
            streaming_pad: id("[STREAMING_PAD]")?,
            streaming_word: id("[STREAMING_WORD]")?,
        })
    }

    /// The prompt's token ids: one per decoder position it prefills.
    pub fn prompt(&self, streaming: &Streaming) -> Vec<u32> {
        let mut prompt = vec![self.bos];
        prompt.resize(streaming.prompt_len(), self.streaming_pad);
        prompt
    }
}
