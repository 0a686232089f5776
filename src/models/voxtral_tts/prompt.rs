//! The prompt: `[BOS] [BEGIN_AUDIO] [AUDIO] x N [NEXT_AUDIO_TEXT] text [REPEAT_AUDIO_TEXT]
//! [BEGIN_AUDIO]`, N being the voice's row count. Tensor-free, so the request path builds
//! prompts before queueing (`crate::engine::SpeechPreparer`).

use super::params::Config;
use crate::engine::{Conditioning, PrepareError, Prompt, SpeechPreparer};
use crate::nn::LoadError;
use crate::tokenizers::tekken::Tekken;
use std::collections::BTreeMap;

/// Special token ids of the prompt, looked up by name in `tekken.json`.
#[derive(Clone, Copy, Debug)]
pub struct SpecialIds {
    pub bos: u32,
    pub audio: u32,
    pub begin_audio: u32,
    pub next_audio_text: u32,
    pub repeat_audio_text: u32,
}

impl SpecialIds {
    /// Looks the ids up by name in tekken.json (`file`), and checks that params.json
    /// (`config`) gives the same ids where it names them.
    pub(super) fn lookup(tok: &Tekken, file: &str, config: &Config) -> Result<Self, LoadError> {
        let id = |name: &str| {
            tok.special_id(name).ok_or_else(|| {
                LoadError::invalid(file, format!("special_tokens.{name}"), "missing")
            })
        };
        let ids = SpecialIds {
            bos: id("<s>")?,
            audio: id("[AUDIO]")?,
            begin_audio: id("[BEGIN_AUDIO]")?,
            next_audio_text: id("[NEXT_AUDIO_TEXT]")?,
            repeat_audio_text: id("[REPEAT_AUDIO_TEXT]")?,
        };
        let m = &config.args.multimodal;
        for (key, in_params, in_tekken) in [
            ("multimodal.bos_token_id", m.bos_token_id, ids.bos),
            (
                "multimodal.audio_model_args.audio_token_id",
                m.audio_model_args.audio_token_id,
                ids.audio,
            ),
            (
                "multimodal.audio_model_args.begin_audio_token_id",
                m.audio_model_args.begin_audio_token_id,
                ids.begin_audio,
            ),
        ] {
            if in_params != in_tekken {
                return Err(LoadError::invalid(
                    "params.json",
                    key,
                    format!("{in_params}, but tekken.json ({file}) has {in_tekken}"),
                ));
            }
        }
        Ok(ids)
    }
}

pub struct Prompter {
    pub tokenizer: Tekken,
    pub special: SpecialIds,
    /// Rows of each preset voice.
    pub(super) voice_rows: BTreeMap<String, usize>,
    /// A KV slot's positions (at most the model's).
    pub(super) max_positions: usize,
}

impl Prompter {
    pub fn prompt_ids(&self, text: &str, voice: &str) -> Result<Vec<u32>, PrepareError> {
        let rows = *self
            .voice_rows
            .get(voice)
            .ok_or_else(|| PrepareError::UnknownVoice(voice.to_string()))?;
        let s = &self.special;
        let text_ids = self.tokenizer.encode(text);
        if text_ids.is_empty() {
            return Err(PrepareError::EmptyText);
        }
        let mut ids = vec![s.bos, s.begin_audio];
        ids.extend(std::iter::repeat_n(s.audio, rows));
        ids.push(s.next_audio_text);
        ids.extend(text_ids);
        ids.push(s.repeat_audio_text);
        ids.push(s.begin_audio);
        Ok(ids)
    }
}

impl SpeechPreparer for Prompter {
    /// Voxtral has no language, instruction or cloning input: the preset sets them all
    /// (the HTTP layer never hands it a custom voice: its card does not clone).
    fn prompt(
        &self,
        text: &str,
        voice: &str,
        _conditioning: &Conditioning,
    ) -> Result<Prompt, PrepareError> {
        self.prompt_ids(text, voice).map(Prompt::of_ids)
    }

    fn max_positions(&self) -> usize {
        self.max_positions
    }
}
