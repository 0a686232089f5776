//! The text-side ids a Qwen3-TTS prompt is built from, looked up by name in the text tokenizer
//! and checked against the ids `config.json` gives.

use super::config::Qwen3TtsConfig;
use crate::nn::LoadError;
use crate::tokenizers::qwen2::Qwen2Tokenizer;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TtsTokenIds {
    pub im_start: u32,
    pub im_end: u32,
    /// `<tts_pad>`: the text side of positions that carry only codec input.
    pub tts_pad: u32,
    /// `<tts_text_bos>`.
    pub tts_text_bos: u32,
    /// `<tts_text_eod>`: the text side after the last text token.
    pub tts_text_eod: u32,
    /// "assistant", the role of target and reference texts.
    pub assistant: u32,
    /// "user", the role of instructions.
    pub user: u32,
    pub newline: u32,
}

impl TtsTokenIds {
    /// Looks the ids up in `tok` (loaded from `tokenizer_file`) and checks them against
    /// `config` (from `config_file`).
    pub fn lookup(
        tok: &Qwen2Tokenizer,
        tokenizer_file: &str,
        config: &Qwen3TtsConfig,
        config_file: &str,
    ) -> Result<Self, LoadError> {
        let special = |name: &str| {
            tok.token_id(name).ok_or_else(|| {
                LoadError::invalid(
                    tokenizer_file,
                    format!("added_tokens_decoder: {name}"),
                    "missing",
                )
            })
        };
        // Plain words are looked up by encoding them: one id each.
        let word = |text: &str| match tok.encode(text)[..] {
            [id] => Ok(id),
            ref ids => Err(LoadError::invalid(
                tokenizer_file,
                format!("{text:?}"),
                format!("encodes to {ids:?}, expected one id"),
            )),
        };
        let ids = TtsTokenIds {
            im_start: special("<|im_start|>")?,
            im_end: special("<|im_end|>")?,
            tts_pad: special("<tts_pad>")?,
            tts_text_bos: special("<tts_text_bos>")?,
            tts_text_eod: special("<tts_text_eod>")?,
            assistant: word("assistant")?,
            user: word("user")?,
            newline: word("\n")?,
        };
        for (key, in_config, in_tokenizer) in [
            ("im_start_token_id", config.im_start_token_id, ids.im_start),
            ("im_end_token_id", config.im_end_token_id, ids.im_end),
            (
                "assistant_token_id",
                config.assistant_token_id,
                ids.assistant,
            ),
            ("tts_pad_token_id", config.tts_pad_token_id, ids.tts_pad),
            (
                "tts_bos_token_id",
                config.tts_bos_token_id,
                ids.tts_text_bos,
            ),
            (
                "tts_eos_token_id",
                config.tts_eos_token_id,
                ids.tts_text_eod,
            ),
        ] {
            if in_config != in_tokenizer {
                return Err(LoadError::invalid(
                    config_file,
                    key,
                    format!("{in_config}, but the tokenizer ({tokenizer_file}) has {in_tokenizer}"),
                ));
            }
        }
        Ok(ids)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn data(path: &str) -> std::path::PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/data/qwen3_tts")
            .join(path)
    }

    #[test]
    fn ids_are_read_by_name_and_agree_with_config_json() {
        let tok = Qwen2Tokenizer::from_folder_with(
            &data("tokenizer"),
            crate::tokenizers::qwen2::SplitRegex::MistralFix,
        )
        .unwrap();
        let file = data("Qwen3-TTS-12Hz-1.7B-VoiceDesign/config.json");
        let text = std::fs::read_to_string(&file).unwrap();
        let config = Qwen3TtsConfig::from_json(&text, "config.json").unwrap();
        let ids = TtsTokenIds::lookup(&tok, "tokenizer", &config, "config.json").unwrap();
        assert_eq!(
            ids,
            TtsTokenIds {
                im_start: 151644,
                im_end: 151645,
                tts_pad: 151671,
                tts_text_bos: 151672,
                tts_text_eod: 151673,
                assistant: 77091,
                user: 872,
                newline: 198,
            }
        );
        // The role prefix is the first three ids of a wrapped text (spec section 4).
        let wrapped = tok.encode("<|im_start|>assistant\nHi.<|im_end|>\n<|im_start|>assistant\n");
        assert_eq!(wrapped[..3], [ids.im_start, ids.assistant, ids.newline]);

        let moved = text.replace(
            "\"tts_pad_token_id\": 151671",
            "\"tts_pad_token_id\": 151670",
        );
        assert_ne!(moved, text);
        let config = Qwen3TtsConfig::from_json(&moved, "config.json").unwrap();
        let err = TtsTokenIds::lookup(&tok, "tokenizer", &config, "config.json").unwrap_err();
        let err = err.to_string();
        assert!(
            err.contains("config.json: tts_pad_token_id: 151670, but the tokenizer"),
            "{err}"
        );
    }
}
