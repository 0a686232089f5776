//! XTTS-v2's text front end, exact against coqui-tts 0.28.0's `VoiceBpeTokenizer`
//! (`TTS/tts/layers/xtts/tokenizer.py`) with `num2words` 0.5.14: what the tokenizer encodes
//! after the language tag (docs/xtts-text.md has the matrix).
//!
//! | languages | cleaned exactly | numbers |
//! |---|---|---|
//! | en, fr, de | yes | cardinals, ordinals, decimals, £ $ € amounts, thousands separators |
//! | es it pt pl tr ru nl cs ar hu hi | yes | refused: "spell the numbers out" |
//! | ko | yes, then hangul romanisation | refused |
//! | zh-cn, ja | refused (pypinyin, cutlet with MeCab) | |
//!
//! Refusals are [`TextError`]s, a 400 naming the language and what to change.

mod cleaners;
mod hangul;
mod language;
mod num2words;
mod numbers;
mod python_chars;
mod python_chars_table;

pub use cleaners::preprocess;
pub use language::{Language, TextError};
pub use python_chars::{lower as python_lower, strip as python_strip};
