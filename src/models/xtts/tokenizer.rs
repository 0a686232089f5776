//! XTTS-v2's tokenizer: `vocab.json` (a `tokenizers` JSON: BPE, `Whitespace` pre-tokenizer,
//! the special tokens as added tokens) read by the `tokenizers` crate, as coqui's
//! `VoiceBpeTokenizer.encode` feeds it: the cleaned text ([`text::preprocess`]) after the
//! language tag, every space written `[SPACE]`. `[START]` and `[STOP]` are not added here
//! (the GPT puts them around the ids).

use super::text::{self, Language, TextError};
use crate::nn::LoadError;
use std::path::Path;
use tokenizers::Tokenizer;

pub struct XttsTokenizer {
    tokenizer: Tokenizer,
}

impl XttsTokenizer {
    pub fn from_file(path: &Path) -> Result<Self, LoadError> {
        let file = path.display().to_string();
        let json = std::fs::read_to_string(path).map_err(|source| LoadError::Io {
            file: file.clone(),
            source,
        })?;
        Self::from_json(&json).map_err(|msg| LoadError::Invalid {
            file,
            key: "vocab".to_string(),
            msg,
        })
    }

    pub fn from_json(json: &str) -> Result<Self, String> {
        let tokenizer: Tokenizer = json
            .parse()
            .map_err(|e| format!("not a tokenizers vocab.json: {e}"))?;
        for token in ["[STOP]", "[UNK]", "[SPACE]", "[START]"] {
            if tokenizer.token_to_id(token).is_none() {
                return Err(format!("vocab.json has no {token} token"));
            }
        }
        // A character outside the vocabulary must come out as [UNK], so encoding cannot fail.
        tokenizer
            .encode("[en]a\u{10FFFF}", false)
            .map_err(|e| format!("vocab.json cannot encode an unknown character: {e}"))?;
        Ok(XttsTokenizer { tokenizer })
    }

    /// The id of a token by name (`[START]`, `[STOP]`, a language tag).
    pub fn token_id(&self, token: &str) -> Option<u32> {
        self.tokenizer.token_to_id(token)
    }

    /// `gpt_number_text_tokens` as `Xtts.init_models` derives it: the largest id plus one.
    pub fn number_of_tokens(&self) -> usize {
        let vocab = self.tokenizer.get_vocab(true);
        vocab.values().max().map_or(0, |&id| id as usize + 1)
    }

    /// Whether the vocabulary has this language's tag (the published v2 file has all 17).
    pub fn speaks(&self, language: Language) -> bool {
        self.token_id(&language.tag()).is_some()
    }

    /// `VoiceBpeTokenizer.encode(text, lang)`: the cleaned text and its ids. Text past the
    /// language's character limit is encoded whole, as the reference does (it only warns).
    pub fn encode(&self, text: &str, language: &str) -> Result<Encoded, TextError> {
        let language = Language::parse(language)?;
        if text.chars().count() > language.char_limit() {
            tracing::debug!(
                language = language.code(),
                limit = language.char_limit(),
                "XTTS-v2 text past the language's character limit may be cut short in speech"
            );
        }
        let cleaned = text::preprocess(text, language)?;
        if !self.speaks(language) {
            return Err(TextError::NoLanguageTag { language });
        }
        let marked = format!("{}{}", language.tag(), cleaned.replace(' ', "[SPACE]"));
        let encoding = self
            .tokenizer
            .encode(marked, false)
            .expect("checked at load: the BPE encodes unknown characters as [UNK]");
        Ok(Encoded {
            cleaned,
            ids: encoding.get_ids().to_vec(),
        })
    }

    /// What `Xtts.inference` encodes for each sentence: `sent.strip().lower()` first.
    pub fn encode_sentence(&self, sentence: &str, language: &str) -> Result<Encoded, TextError> {
        self.encode(&text::python_lower(text::python_strip(sentence)), language)
    }
}

/// A text's ids and the cleaned text they encode.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Encoded {
    pub cleaned: String,
    pub ids: Vec<u32>,
}
