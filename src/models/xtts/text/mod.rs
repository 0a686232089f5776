//! XTTS-v2's text front end, exact against coqui-tts 0.28.0's `VoiceBpeTokenizer`
//! (`TTS/tts/layers/xtts/tokenizer.py`) with `num2words` 0.5.14: what the tokenizer encodes
//! after the language tag (docs/xtts-text.md has the matrix).
//!
//! | languages | cleaned exactly | numbers |
//! |---|---|---|
//! | en | yes | cardinals, ordinals, decimals, £ $ € amounts, thousands commas |
//! | es fr de it pt pl tr ru nl cs ar hu hi | yes | refused: "spell the numbers out" |
//! | zh-cn, ja, ko | refused (pypinyin, cutlet, hangul romanisation) | |
//!
//! Refusals are [`TextError`]s, a 400 naming the language and what to change.

mod cleaners;
mod language;
mod num2words_en;
mod numbers;
mod python_chars;
mod python_chars_table;

pub use cleaners::preprocess;
pub use language::{Language, TextError};
pub use python_chars::{lower as python_lower, strip as python_strip};
