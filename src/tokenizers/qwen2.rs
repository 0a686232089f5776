//! Qwen2 byte-level BPE (`vocab.json` + `merges.txt` + `tokenizer_config.json`), as the official
//! Qwen3-TTS stack (qwen-tts 0.1.1 on transformers 4.57.3) builds it: there is no
//! `tokenizer.json`, so transformers converts the slow `Qwen2Tokenizer` (`Qwen2Converter`):
//!
//! 1. added tokens (`added_tokens_decoder`) are cut out of the raw text first, as single ids;
//! 2. NFC on the rest;
//! 3. a regex split (behaviour "isolated"), then ByteLevel (no prefix space, no regex of its own);
//! 4. BPE over `vocab.json` with the ranks of `merges.txt`; no unknown token, no BOS or EOS.
//!
//! Step 3's regex is not Qwen2's own: qwen-tts loads the processor with `fix_mistral_regex=True`,
//! and transformers 4.57.3 takes that as a request to patch every folder whose `config.json`
//! says `transformers_version` 4.57.3, which the published ones do. The split regex is then
//! replaced by Mistral's (the Tekken pattern), which keeps mixed-case words such as "iPhone"
//! apart ([`SplitRegex`]). Goldens: `tests/goldens/qwen3_tts/tokenizer_cases.json`.
//!
//! The official build splits with onig, this one with fancy-regex; they agree on the goldens
//! and on 4000 random strings over all of Unicode. They can part on a run of about a million
//! characters of one class, past fancy-regex's backtracking limit, where the rest of the text
//! becomes one piece (the server's input limit is far below that).

use crate::nn::LoadError;
use crate::tokenizers::tekken::TEKKEN_PATTERN;
use serde::Deserialize;
use serde_json::Value;
use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use tokenizers::models::bpe::{Vocab, BPE};
use tokenizers::normalizers::unicode::NFC;
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::sequence::Sequence;
use tokenizers::pre_tokenizers::split::{Split, SplitPattern};
use tokenizers::{AddedToken, SplitDelimiterBehavior, Tokenizer};

/// Qwen2's own split regex (transformers `Qwen2Converter`); what the official stack replaces.
pub const QWEN2_PATTERN: &str = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// Which split regex the pre-tokenizer uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SplitRegex {
    /// transformers 4.57.3's `fix_mistral_regex` replacement ([`TEKKEN_PATTERN`]): what the
    /// official Qwen3-TTS code runs.
    MistralFix,
    /// [`QWEN2_PATTERN`]: what mlx-audio and vLLM-Omni run (newer transformers, no patch).
    PlainQwen2,
}

impl SplitRegex {
    pub fn pattern(self) -> &'static str {
        match self {
            SplitRegex::MistralFix => TEKKEN_PATTERN,
            SplitRegex::PlainQwen2 => QWEN2_PATTERN,
        }
    }
}

/// The keys of `tokenizer_config.json` that change the ids.
#[derive(Debug, Deserialize)]
struct TokenizerConfig {
    tokenizer_class: String,
    #[serde(default)]
    add_prefix_space: bool,
    #[serde(default)]
    split_special_tokens: bool,
    added_tokens_decoder: BTreeMap<String, AddedTokenEntry>,
}

#[derive(Debug, Deserialize)]
struct AddedTokenEntry {
    content: String,
    lstrip: bool,
    normalized: bool,
    rstrip: bool,
    single_word: bool,
    special: bool,
}

pub struct Qwen2Tokenizer {
    tokenizer: Tokenizer,
}

impl Qwen2Tokenizer {
    /// Loads `vocab.json`, `merges.txt` and `tokenizer_config.json` from `dir` with the split
    /// regex that the official Qwen3-TTS code ends up with for that folder: its choice depends
    /// on `dir/config.json` ([`SplitRegex::MistralFix`] for the published folders).
    pub fn from_folder(dir: &Path) -> Result<Self, LoadError> {
        let config = dir.join("config.json");
        let regex = match std::fs::read_to_string(&config) {
            Ok(text) => {
                let json: Value = serde_json::from_str(&text)
                    .map_err(|e| LoadError::invalid(display(&config), "(json)", e.to_string()))?;
                official_split_regex(&json).map_err(|msg| {
                    LoadError::invalid(display(&config), "transformers_version", msg)
                })?
            }
            // Without a config.json transformers applies no patch.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => SplitRegex::PlainQwen2,
            Err(e) => return Err(LoadError::io(&config, e)),
        };
        Self::from_folder_with(dir, regex)
    }

    pub fn from_folder_with(dir: &Path, regex: SplitRegex) -> Result<Self, LoadError> {
        Self::from_files(
            &dir.join("vocab.json"),
            &dir.join("merges.txt"),
            &dir.join("tokenizer_config.json"),
            regex,
        )
    }

    pub fn from_files(
        vocab_file: &Path,
        merges_file: &Path,
        config_file: &Path,
        regex: SplitRegex,
    ) -> Result<Self, LoadError> {
        let vocab = read_vocab(vocab_file)?;
        let merges = read_merges(merges_file, &vocab)?;
        let config = read_config(config_file)?;
        let vocab_len = vocab.len();
        check_byte_alphabet(vocab_file, &vocab)?;

        let model = BPE::builder()
            .vocab_and_merges(vocab.into_iter().collect::<Vocab>(), merges)
            .build()
            .map_err(|e| LoadError::invalid(display(merges_file), "(bpe)", e.to_string()))?;
        let mut tokenizer = Tokenizer::new(model);
        tokenizer.with_normalizer(Some(NFC));
        let split = Split::new(
            SplitPattern::Regex(regex.pattern().to_string()),
            SplitDelimiterBehavior::Isolated,
            false,
        )
        .map_err(|e| LoadError::invalid(display(config_file), "(split regex)", e.to_string()))?;
        let byte_level = ByteLevel::new(config.add_prefix_space, true, false);
        tokenizer.with_pre_tokenizer(Some(Sequence::new(vec![split.into(), byte_level.into()])));
        // ByteLevel also decodes (its settings only matter to the pre-tokenizer).
        tokenizer.with_decoder(Some(ByteLevel::default()));
        add_tokens(&mut tokenizer, &config, config_file, vocab_len)?;
        Ok(Qwen2Tokenizer { tokenizer })
    }

    /// The ids of `text`, added tokens included; no BOS or EOS.
    pub fn encode(&self, text: &str) -> Vec<u32> {
        // With every byte's symbol in the vocab (checked at load) and no dropout, encoding
        // cannot fail: the BPE's only error is a symbol missing from the vocab.
        self.tokenizer
            .encode(text, false)
            .expect("byte-level BPE over a complete byte alphabet cannot fail")
            .get_ids()
            .to_vec()
    }

    /// The text of `ids`, added tokens written out; invalid UTF-8 becomes U+FFFD. Unknown ids
    /// are skipped.
    pub fn decode(&self, ids: &[u32]) -> String {
        // The ByteLevel decoder does not fail: a token outside its byte map is taken as its
        // own UTF-8.
        self.tokenizer.decode(ids, false).unwrap_or_default()
    }

    /// The id of a vocab entry or added token, by its exact text (vocab entries are in the
    /// byte-level alphabet: "\n" is "Ċ").
    pub fn token_id(&self, token: &str) -> Option<u32> {
        self.tokenizer.token_to_id(token)
    }

    /// Vocab entries plus added tokens.
    pub fn vocab_size(&self) -> usize {
        self.tokenizer.get_vocab_size(true)
    }
}

/// What transformers 4.57.3's `_patch_mistral_regex` does when asked for
/// `fix_mistral_regex=True` on a local folder with this `config.json`. (Without the file it
/// does not patch.) It patches unless the file says a version from 5.0.0 on, or one up
/// to 4.57.2 with a non-Mistral `model_type`. Err: a version that does not parse.
fn official_split_regex(config: &Value) -> Result<SplitRegex, String> {
    const MISTRAL_MODEL_TYPES: [&str; 5] =
        ["mistral", "mistral3", "voxtral", "ministral", "pixtral"];
    let model_type = config.get("model_type").and_then(Value::as_str);
    // Python's truthiness: an absent, null or empty version counts as none.
    let version = match config.get("transformers_version") {
        None | Some(Value::Null) => None,
        Some(Value::String(v)) if v.is_empty() => None,
        Some(Value::String(v)) => Some(v.as_str()),
        Some(other) => return Err(format!("{other} is not a version string")),
    };
    if let Some(version) = version {
        let parsed = PepVersion::parse(version)
            .ok_or_else(|| format!("{version:?} is not a PEP 440 version"))?;
        if parsed.at_most(&[4, 57, 2]) {
            if model_type.is_some_and(|t| !MISTRAL_MODEL_TYPES.contains(&t)) {
                return Ok(SplitRegex::PlainQwen2);
            }
        } else if parsed.at_least(&[5, 0, 0]) {
            return Ok(SplitRegex::PlainQwen2);
        }
    }
    Ok(SplitRegex::MistralFix)
}

/// The part of a PEP 440 version that orders it against a final release: the release numbers
/// and whether a dev or pre-release (before it), nothing (equal) or a post or local release
/// (after it) follows.
#[derive(Debug, PartialEq)]
struct PepVersion {
    release: Vec<u64>,
    suffix: std::cmp::Ordering,
}

impl PepVersion {
    fn parse(text: &str) -> Option<PepVersion> {
        use std::cmp::Ordering::{Equal, Greater, Less};
        let text = text.trim().to_ascii_lowercase();
        let text = text.strip_prefix('v').unwrap_or(&text);
        let (public, local) = match text.split_once('+') {
            Some((public, local)) => (public, Some(local)),
            None => (text, None),
        };
        let end = public
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(public.len());
        let numbers = public[..end].trim_end_matches('.');
        let release = numbers
            .split('.')
            .map(|n| n.parse().ok())
            .collect::<Option<Vec<u64>>>()?;
        let rest = public[end..].trim_start_matches(['.', '-', '_']);
        let after_release = if public[..end].ends_with('.') && rest.is_empty() {
            return None;
        } else if rest.is_empty() {
            Equal
        } else if [
            "dev", "a", "b", "c", "rc", "pre", "preview", "alpha", "beta",
        ]
        .iter()
        .any(|label| rest.starts_with(label))
        {
            Less
        } else if rest.starts_with("post")
            || rest.starts_with('r')
            || (public[end..].starts_with('-') && rest.starts_with(|c: char| c.is_ascii_digit()))
        {
            Greater // "post", "rev", "r", and "1.0-1" (an implicit post-release)
        } else {
            return None;
        };
        let suffix = match (after_release, local) {
            (Equal, Some(local)) if !local.is_empty() => Greater,
            (_, Some("")) => return None,
            (suffix, _) => suffix,
        };
        Some(PepVersion { release, suffix })
    }

    /// The release compared with `other`, trailing zeros ignored (5.0 == 5.0.0).
    fn release_cmp(&self, other: &[u64]) -> std::cmp::Ordering {
        let len = self.release.len().max(other.len());
        let pad = |v: &[u64]| {
            (0..len)
                .map(|i| v.get(i).copied().unwrap_or(0))
                .collect::<Vec<_>>()
        };
        pad(&self.release).cmp(&pad(other))
    }

    fn at_most(&self, other: &[u64]) -> bool {
        self.release_cmp(other).then(self.suffix).is_le()
    }

    fn at_least(&self, other: &[u64]) -> bool {
        self.release_cmp(other).then(self.suffix).is_ge()
    }
}

fn display(path: &Path) -> String {
    path.display().to_string()
}

fn read_vocab(file: &Path) -> Result<HashMap<String, u32>, LoadError> {
    let text = std::fs::read_to_string(file).map_err(|e| LoadError::io(file, e))?;
    let vocab: HashMap<String, u32> = serde_json::from_str(&text)
        .map_err(|e| LoadError::invalid(display(file), "(json)", e.to_string()))?;
    // Added tokens take the ids after the vocab's, so the vocab must be 0..n.
    let mut ids: Vec<u32> = vocab.values().copied().collect();
    ids.sort_unstable();
    if let Some(gap) = ids.iter().enumerate().find(|&(i, &id)| id as usize != i) {
        return Err(LoadError::invalid(
            display(file),
            "(ids)",
            format!(
                "ids must be 0..{} with none repeated; position {} holds {}",
                vocab.len(),
                gap.0,
                gap.1
            ),
        ));
    }
    Ok(vocab)
}

/// `merges.txt` as the slow `Qwen2Tokenizer` reads it: a first line `#version: ...` and blank
/// lines are skipped; every other line is two vocab entries separated by a space.
fn read_merges(
    file: &Path,
    vocab: &HashMap<String, u32>,
) -> Result<Vec<(String, String)>, LoadError> {
    let text = std::fs::read_to_string(file).map_err(|e| LoadError::io(file, e))?;
    let mut merges = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || (i == 0 && line.starts_with("#version:")) {
            continue;
        }
        let key = || format!("line {}", i + 1);
        let mut parts = line.split_whitespace();
        let (Some(left), Some(right), None) = (parts.next(), parts.next(), parts.next()) else {
            return Err(LoadError::invalid(
                display(file),
                key(),
                format!("expected two tokens separated by a space, got {line:?}"),
            ));
        };
        for part in [left, right, &format!("{left}{right}")] {
            if !vocab.contains_key(part) {
                return Err(LoadError::invalid(
                    display(file),
                    key(),
                    format!("{part:?} is not in vocab.json"),
                ));
            }
        }
        merges.push((left.to_string(), right.to_string()));
    }
    Ok(merges)
}

fn read_config(file: &Path) -> Result<TokenizerConfig, LoadError> {
    let text = std::fs::read_to_string(file).map_err(|e| LoadError::io(file, e))?;
    let mut de = serde_json::Deserializer::from_str(&text);
    let config: TokenizerConfig = serde_path_to_error::deserialize(&mut de)
        .map_err(|e| LoadError::invalid(display(file), e.path().to_string(), e.to_string()))?;
    if !matches!(
        config.tokenizer_class.as_str(),
        "Qwen2Tokenizer" | "Qwen2TokenizerFast"
    ) {
        return Err(LoadError::invalid(
            display(file),
            "tokenizer_class",
            format!(
                "{:?}: only the Qwen2 tokenizer is supported",
                config.tokenizer_class
            ),
        ));
    }
    if config.split_special_tokens {
        return Err(LoadError::invalid(
            display(file),
            "split_special_tokens",
            "true is not supported: Qwen3-TTS prompts need their special tokens whole",
        ));
    }
    Ok(config)
}

/// Every byte's ByteLevel symbol must be a vocab entry, so that any text encodes.
fn check_byte_alphabet(file: &Path, vocab: &HashMap<String, u32>) -> Result<(), LoadError> {
    match ByteLevel::alphabet()
        .into_iter()
        .find(|c| !vocab.contains_key(&c.to_string()))
    {
        Some(missing) => Err(LoadError::invalid(
            display(file),
            format!("{missing:?}"),
            "missing: every byte's symbol must be in the vocab",
        )),
        None => Ok(()),
    }
}

/// Adds `added_tokens_decoder` in id order and checks that each lands on its declared id
/// (the tokenizer numbers added tokens from the vocab's size on, as transformers does).
fn add_tokens(
    tokenizer: &mut Tokenizer,
    config: &TokenizerConfig,
    file: &Path,
    vocab_len: usize,
) -> Result<(), LoadError> {
    let mut entries = Vec::with_capacity(config.added_tokens_decoder.len());
    for (id, entry) in &config.added_tokens_decoder {
        let key = || format!("added_tokens_decoder.{id}");
        let id: u32 = id
            .parse()
            .map_err(|_| LoadError::invalid(display(file), key(), "the key is not an id"))?;
        entries.push((id, entry, key()));
    }
    entries.sort_by_key(|&(id, ..)| id);
    for (id, entry, key) in entries {
        let token = AddedToken::from(entry.content.clone(), entry.special)
            .lstrip(entry.lstrip)
            .rstrip(entry.rstrip)
            .single_word(entry.single_word)
            .normalized(entry.normalized);
        tokenizer.add_tokens(&[token]);
        let got = tokenizer.token_to_id(&entry.content);
        if got != Some(id) {
            return Err(LoadError::invalid(
                display(file),
                key,
                format!(
                    "{:?} would get id {got:?}, not {id}: added tokens must follow the {vocab_len} \
                     vocab ids without gaps",
                    entry.content
                ),
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::OnceLock;

    fn data(path: &str) -> std::path::PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
    }

    fn real(regex: SplitRegex) -> &'static Qwen2Tokenizer {
        static OFFICIAL: OnceLock<Qwen2Tokenizer> = OnceLock::new();
        static PLAIN: OnceLock<Qwen2Tokenizer> = OnceLock::new();
        let cell = match regex {
            SplitRegex::MistralFix => &OFFICIAL,
            SplitRegex::PlainQwen2 => &PLAIN,
        };
        cell.get_or_init(|| {
            Qwen2Tokenizer::from_folder_with(&data("tests/data/qwen3_tts/tokenizer"), regex)
                .unwrap()
        })
    }

    fn goldens() -> Value {
        let file = data("tests/goldens/qwen3_tts/tokenizer_cases.json");
        serde_json::from_str(&std::fs::read_to_string(file).unwrap()).unwrap()
    }

    fn ids(value: &Value) -> Vec<u32> {
        serde_json::from_value(value.clone()).unwrap()
    }

    #[test]
    fn encodes_and_decodes_every_golden_case_as_the_official_code() {
        let goldens = goldens();
        let cases = goldens["cases"].as_array().unwrap();
        assert!(cases.len() > 80);
        let official = real(SplitRegex::MistralFix);
        let mut failures = Vec::new();
        for case in cases {
            let text = case["text"].as_str().unwrap();
            let want = ids(&case["ids"]);
            let got = official.encode(text);
            if got != want {
                failures.push(format!(
                    "{}: {text:?}\n  got  {got:?}\n  want {want:?}",
                    case["name"]
                ));
            }
            assert_eq!(
                official.decode(&want),
                case["decoded"].as_str().unwrap(),
                "{}",
                case["name"]
            );
        }
        assert!(failures.is_empty(), "{}", failures.join("\n"));
    }

    #[test]
    fn the_plain_qwen2_regex_gives_the_other_ids_where_they_differ() {
        let goldens = goldens();
        let plain = real(SplitRegex::PlainQwen2);
        let mut differ = Vec::new();
        for case in goldens["cases"].as_array().unwrap() {
            let text = case["text"].as_str().unwrap();
            let want = case.get("plain_qwen2_ids").unwrap_or(&case["ids"]);
            assert_eq!(plain.encode(text), ids(want), "{}", case["name"]);
            if case.get("plain_qwen2_ids").is_some() {
                differ.push(case["name"].as_str().unwrap());
            }
        }
        // Spec section 4: the mixed-case words, and marks inside words (Devanagari, Thai).
        assert_eq!(
            differ,
            [
                "mixed_case_words",
                "mixed_case_more",
                "rtl_indic_thai",
                "mixed_scripts",
                "target_wrapper"
            ]
        );
        let official = real(SplitRegex::MistralFix);
        assert_eq!(
            official.encode("iPhone eBay McDonald"),
            [72, 6939, 384, 22587, 4483, 18234]
        );
        assert_eq!(plain.encode("iPhone eBay McDonald"), [44740, 29906, 30914]);
    }

    #[test]
    fn special_tokens_are_single_ids_read_by_name() {
        let goldens = goldens();
        let tok = real(SplitRegex::MistralFix);
        assert_eq!(
            tok.vocab_size() as u64,
            goldens["vocab_size_with_added"].as_u64().unwrap()
        );
        for (name, id) in goldens["token_ids"].as_object().unwrap() {
            assert_eq!(
                tok.token_id(name),
                Some(id.as_u64().unwrap() as u32),
                "{name}"
            );
        }
        assert_eq!(tok.token_id("<tts_pad>"), Some(151671));
        assert_eq!(
            tok.encode("<tts_text_bos><|im_start|>assistant\n"),
            [151672, 151644, 77091, 198]
        );
        assert_eq!(tok.decode(&[151673, u32::MAX, 9707]), "<tts_text_eod>Hello");
    }

    fn folder_with_tokenizer(config_json: Option<&str>) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for name in ["vocab.json", "merges.txt", "tokenizer_config.json"] {
            let from = data("tests/data/qwen3_tts/tokenizer").join(name);
            std::fs::copy(from, dir.path().join(name)).unwrap();
        }
        if let Some(text) = config_json {
            std::fs::write(dir.path().join("config.json"), text).unwrap();
        }
        dir
    }

    #[test]
    fn from_folder_picks_the_regex_as_transformers_4_57_3_does() {
        let real_config = std::fs::read_to_string(data(
            "tests/data/qwen3_tts/Qwen3-TTS-12Hz-0.6B-Base/config.json",
        ))
        .unwrap();
        let mixed = "iPhone";
        let official = real(SplitRegex::MistralFix).encode(mixed);
        let plain = real(SplitRegex::PlainQwen2).encode(mixed);
        assert_ne!(official, plain);
        let published = folder_with_tokenizer(Some(&real_config));
        assert_eq!(
            Qwen2Tokenizer::from_folder(published.path())
                .unwrap()
                .encode(mixed),
            official
        );
        let no_config = folder_with_tokenizer(None);
        assert_eq!(
            Qwen2Tokenizer::from_folder(no_config.path())
                .unwrap()
                .encode(mixed),
            plain
        );
        let bad = folder_with_tokenizer(Some(r#"{"transformers_version": "four"}"#));
        let err = Qwen2Tokenizer::from_folder(bad.path())
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("config.json: transformers_version"), "{err}");
    }

    #[test]
    fn official_split_regex_follows_the_version_rules() {
        let pick = |json: &str| official_split_regex(&serde_json::from_str(json).unwrap());
        use SplitRegex::{MistralFix, PlainQwen2};
        for (json, want) in [
            (
                r#"{"model_type": "qwen3_tts", "transformers_version": "4.57.3"}"#,
                MistralFix,
            ),
            (
                r#"{"model_type": "qwen3_tts", "transformers_version": "4.57.2"}"#,
                PlainQwen2,
            ),
            (
                r#"{"model_type": "qwen3_tts", "transformers_version": "4.57.2.post1"}"#,
                MistralFix,
            ),
            (
                r#"{"model_type": "qwen3_tts", "transformers_version": "4.57.3.dev0"}"#,
                MistralFix,
            ),
            (
                r#"{"model_type": "qwen3_tts", "transformers_version": "4.57.0.dev0"}"#,
                PlainQwen2,
            ),
            (
                r#"{"model_type": "qwen3_tts", "transformers_version": "4.40"}"#,
                PlainQwen2,
            ),
            (
                r#"{"model_type": "mistral", "transformers_version": "4.40.0"}"#,
                MistralFix,
            ),
            (r#"{"transformers_version": "4.40.0"}"#, MistralFix),
            (
                r#"{"model_type": "qwen3_tts", "transformers_version": "4.99.0"}"#,
                MistralFix,
            ),
            (
                r#"{"model_type": "qwen3_tts", "transformers_version": "5.0.0rc1"}"#,
                MistralFix,
            ),
            (
                r#"{"model_type": "qwen3_tts", "transformers_version": "5.0.0"}"#,
                PlainQwen2,
            ),
            (
                r#"{"model_type": "qwen3_tts", "transformers_version": "5"}"#,
                PlainQwen2,
            ),
            (
                r#"{"model_type": "qwen3_tts", "transformers_version": "5.13.0"}"#,
                PlainQwen2,
            ),
            (r#"{"model_type": "qwen3_tts"}"#, MistralFix),
            (
                r#"{"model_type": "qwen3_tts", "transformers_version": null}"#,
                MistralFix,
            ),
        ] {
            assert_eq!(pick(json), Ok(want), "{json}");
        }
        assert!(pick(r#"{"transformers_version": 4.57}"#).is_err());
        assert!(pick(r#"{"transformers_version": "4.57.x"}"#).is_err());
    }

    #[test]
    fn pep_440_versions_order_against_a_final_release() {
        use std::cmp::Ordering::{Equal, Greater, Less};
        let v = |text: &str| PepVersion::parse(text).map(|v| (v.release, v.suffix));
        assert_eq!(v("4.57.3"), Some((vec![4, 57, 3], Equal)));
        assert_eq!(v("v5.0"), Some((vec![5, 0], Equal)));
        assert_eq!(v("4.57.0.dev0"), Some((vec![4, 57, 0], Less)));
        assert_eq!(v("5.0.0rc1"), Some((vec![5, 0, 0], Less)));
        assert_eq!(v("1.0b2"), Some((vec![1, 0], Less)));
        assert_eq!(v("4.57.2.post1"), Some((vec![4, 57, 2], Greater)));
        assert_eq!(v("1.0-1"), Some((vec![1, 0], Greater)));
        assert_eq!(v("4.57.2+local"), Some((vec![4, 57, 2], Greater)));
        for bad in ["", "four", "4..1", "4.57.", "4.57.x", "4.57+", "4.57.2-x"] {
            assert_eq!(v(bad), None, "{bad:?}");
        }
    }

    /// A tokenizer folder with the 256 byte symbols (ids 0..256, as `ByteLevel::alphabet`
    /// sorts them), one merge "a b", and the given added tokens.
    fn tiny_folder(merges: &str, tokenizer_config: &str) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let mut symbols: Vec<String> = ByteLevel::alphabet().iter().map(char::to_string).collect();
        symbols.sort();
        symbols.push("ab".into());
        let vocab: BTreeMap<&str, usize> = symbols
            .iter()
            .enumerate()
            .map(|(i, s)| (s.as_str(), i))
            .collect();
        std::fs::write(
            dir.path().join("vocab.json"),
            serde_json::to_string(&vocab).unwrap(),
        )
        .unwrap();
        std::fs::write(dir.path().join("merges.txt"), merges).unwrap();
        std::fs::write(dir.path().join("tokenizer_config.json"), tokenizer_config).unwrap();
        dir
    }

    const TINY_CONFIG: &str = r#"{"tokenizer_class": "Qwen2Tokenizer", "added_tokens_decoder": {
        "257": {"content": "<x>", "lstrip": false, "normalized": false, "rstrip": false,
                "single_word": false, "special": true}}}"#;

    fn tiny_error(merges: &str, config: &str) -> String {
        let dir = tiny_folder(merges, config);
        let result = Qwen2Tokenizer::from_folder_with(dir.path(), SplitRegex::MistralFix);
        result.err().expect("should fail").to_string()
    }

    #[test]
    fn a_tiny_folder_encodes_with_its_merge_and_added_token() {
        let dir = tiny_folder("#version: 0.2\na b\n\n", TINY_CONFIG);
        let tok = Qwen2Tokenizer::from_folder_with(dir.path(), SplitRegex::MistralFix).unwrap();
        let ab = tok.token_id("ab").unwrap();
        assert_eq!(ab, 256);
        assert_eq!(tok.encode("ab<x>b"), [ab, 257, tok.token_id("b").unwrap()]);
        assert_eq!(tok.decode(&tok.encode("é ab\n")), "é ab\n");
        assert_eq!(tok.vocab_size(), 258);
    }

    #[test]
    fn bad_files_name_the_file_and_key() {
        let err = tiny_error("a b c\n", TINY_CONFIG);
        assert!(
            err.contains("merges.txt: line 1: expected two tokens"),
            "{err}"
        );
        let err = tiny_error("a z\n", TINY_CONFIG);
        assert!(
            err.contains("merges.txt: line 1: \"az\" is not in vocab.json"),
            "{err}"
        );
        let err = tiny_error("", &TINY_CONFIG.replace("\"257\"", "\"300\""));
        assert!(
            err.contains("tokenizer_config.json: added_tokens_decoder.300"),
            "{err}"
        );
        let err = tiny_error("", &TINY_CONFIG.replace("Qwen2Tokenizer", "LlamaTokenizer"));
        assert!(
            err.contains("tokenizer_config.json: tokenizer_class"),
            "{err}"
        );
        let err = tiny_error(
            "",
            &TINY_CONFIG.replace("\"special\": true", "\"special\": 1"),
        );
        assert!(
            err.contains("tokenizer_config.json: added_tokens_decoder"),
            "{err}"
        );
        let err = tiny_error(
            "",
            r#"{"tokenizer_class": "Qwen2Tokenizer", "split_special_tokens": true, "added_tokens_decoder": {}}"#,
        );
        assert!(err.contains("split_special_tokens"), "{err}");

        let dir = tiny_folder("", TINY_CONFIG);
        std::fs::write(dir.path().join("vocab.json"), r#"{"a": 0, "b": 2}"#).unwrap();
        let err = Qwen2Tokenizer::from_folder_with(dir.path(), SplitRegex::MistralFix);
        let err = err.err().unwrap().to_string();
        assert!(err.contains("vocab.json: (ids)"), "{err}");
        std::fs::write(dir.path().join("vocab.json"), r#"{"a": 0}"#).unwrap();
        let err = Qwen2Tokenizer::from_folder_with(dir.path(), SplitRegex::MistralFix);
        let err = err.err().unwrap().to_string();
        assert!(
            err.contains("vocab.json") && err.contains("every byte"),
            "{err}"
        );
        std::fs::remove_file(dir.path().join("merges.txt")).unwrap();
        let err = Qwen2Tokenizer::from_folder_with(dir.path(), SplitRegex::MistralFix);
        assert!(err.err().unwrap().to_string().contains("merges.txt"));
    }
}
