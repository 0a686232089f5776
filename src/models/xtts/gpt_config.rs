//! What the GPT side reads from `config.json` (`model_args` and the inference defaults, under
//! their published names) and from the tokenizer (the text token count and the start and stop
//! ids, which `Xtts.init_models` takes from `vocab.json` rather than from the config).

use super::tokenizer::XttsTokenizer;
use crate::nn::LoadError;
use serde::Deserialize;

/// `model_args`' GPT fields.
#[derive(Clone, Debug, Deserialize)]
pub struct GptArgs {
    pub gpt_layers: usize,
    pub gpt_n_model_channels: usize,
    pub gpt_n_heads: usize,
    pub gpt_number_text_tokens: usize,
    pub gpt_max_audio_tokens: usize,
    pub gpt_max_text_tokens: usize,
    pub gpt_num_audio_tokens: usize,
    pub gpt_start_audio_token: u32,
    pub gpt_stop_audio_token: u32,
    pub gpt_use_perceiver_resampler: bool,
}

impl GptArgs {
    /// Codes the GPT may generate (`GPT.max_gen_mel_tokens`: 602 in the published model).
    pub fn max_codes(&self) -> usize {
        self.gpt_max_audio_tokens - 3
    }

    /// Rows of the text position table (`max_text_tokens + 2`).
    pub fn text_positions(&self) -> usize {
        self.gpt_max_text_tokens + 2
    }

    /// Rows of the audio position table (`max_audio_tokens + 2 + 1`).
    pub fn audio_positions(&self) -> usize {
        self.gpt_max_audio_tokens + 3
    }
}

/// The inference defaults `Xtts.synthesize` takes from the config.
#[derive(Clone, Debug, Deserialize)]
pub struct InferenceDefaults {
    pub temperature: f32,
    pub length_penalty: f32,
    pub repetition_penalty: f32,
    pub top_k: usize,
    pub top_p: f32,
    pub gpt_cond_len: usize,
    pub gpt_cond_chunk_len: usize,
    pub max_ref_len: usize,
    pub sound_norm_refs: bool,
}

#[derive(Clone, Debug)]
pub struct GptConfig {
    pub args: GptArgs,
    pub defaults: InferenceDefaults,
    pub start_text_token: u32,
    pub stop_text_token: u32,
}

impl GptConfig {
    /// From the parsed `config.json` (`file` names it in errors) and the tokenizer of its
    /// `vocab.json`.
    pub fn from_json(
        config: &serde_json::Value,
        file: &str,
        tokenizer: &XttsTokenizer,
    ) -> Result<Self, LoadError> {
        let invalid =
            |key: &str, e: serde_json::Error| LoadError::invalid(file, key, e.to_string());
        let mut model_args = config["model_args"].clone();
        // Configs written for a new vocabulary leave the count `null`: the reference counts
        // the tokenizer's tokens (it always does, and a checkpoint of another size fails its
        // load, so a count the config gives is that one).
        if let Some(count) = model_args
            .get_mut("gpt_number_text_tokens")
            .filter(|count| count.is_null())
        {
            *count = tokenizer.number_of_tokens().into();
        }
        let args: GptArgs =
            serde_json::from_value(model_args).map_err(|e| invalid("model_args", e))?;
        let defaults: InferenceDefaults = serde_json::from_value(config.clone())
            .map_err(|e| invalid("(inference settings)", e))?;
        if !args.gpt_use_perceiver_resampler {
            return Err(LoadError::invalid(
                file,
                "model_args.gpt_use_perceiver_resampler",
                "false is XTTS v1, which is not supported (v2 has the perceiver)",
            ));
        }
        if args.gpt_n_heads == 0 || !args.gpt_n_model_channels.is_multiple_of(args.gpt_n_heads) {
            return Err(LoadError::invalid(
                file,
                "model_args.gpt_n_heads",
                "must be positive and divide gpt_n_model_channels",
            ));
        }
        if args.gpt_max_audio_tokens < 4 {
            return Err(LoadError::invalid(
                file,
                "model_args.gpt_max_audio_tokens",
                "below 4",
            ));
        }
        let id = |token: &str| {
            tokenizer
                .token_id(token)
                .expect("the tokenizer checks its special tokens at load")
        };
        Ok(GptConfig {
            args,
            defaults,
            start_text_token: id("[START]"),
            stop_text_token: id("[STOP]"),
        })
    }
}
