//! Tekken tokenizer (`tekken.json`), as used by Voxtral-4B-TTS and Voxtral Realtime.
//!
//! [`Tekken::decode`] turns ids back into text as `Tekkenizer.decode` does with its default
//! policy (`SpecialTokenPolicy.IGNORE`): special ids are dropped, and each run of regular ids
//! between them is decoded from its bytes as UTF-8, an invalid sequence becoming U+FFFD
//! (tiktoken's `errors="replace"`).
//!
//! Reproduces `mistral_common`'s `Tekkenizer.encode(text, bos=False, eos=False)`
//! (which is `tiktoken.Encoding.encode` plus an id offset):
//!
//! 1. The text is split into pieces with `config.pattern` (a tiktoken-style regex that
//!    needs look-ahead, `\s+(?!\S)`, hence `fancy-regex`). Text between matches (if a
//!    pattern left any) is dropped, exactly as tiktoken does.
//! 2. Each piece is encoded with byte-level BPE over the first
//!    `default_vocab_size - default_num_special_tokens` vocab entries: a piece that is a
//!    vocab entry is one token; otherwise, starting from single bytes, the adjacent pair
//!    whose concatenated bytes have the lowest rank is merged (leftmost on ties) until no
//!    adjacent pair is in the vocab. The rank is the merge priority.
//! 3. Token id = rank + `default_num_special_tokens` (ids below that are special tokens).
//!
//! # Regex failures
//! `fancy-regex` is a backtracking engine with a hard limit on its backtracking stack (1M
//! entries) and on backtracking steps (1M). With the Tekken pattern, fancy-regex 0.14
//! returns `Err` for a single run of about 1M characters of one class (1M spaces, letters,
//! CJK, punctuation, newlines...); shorter inputs never hit it (a 100k-char run is fine).
//! Python's tiktoken 0.14 (fancy-regex 0.19) raises `ValueError` for whitespace runs of
//! about 1M characters and copes with long letter runs, so such inputs have no usable
//! reference output. `encode` never fails and never panics: when a search errors at byte
//! position `p`, the search is retried on a bounded window of the text,
//! `text[p .. p + 64 KiB]` (cut at a char boundary), which needs far less backtracking
//! state. The first match in that window becomes the next piece (a match that reaches the
//! window end is cut there, so an over-long run is split into pieces of at most 64 KiB);
//! if even the windowed search errors, the whole window becomes one piece. Windowed mode
//! lasts until a match ends strictly inside its window (or the text ends); the normal
//! full-text search resumes after that. Every input byte that the pattern covers is still
//! encoded exactly once, so the byte content round-trips; only piece boundaries inside
//! the over-long run can differ from what an unlimited regex engine would produce.
//!
//! Pieces of 100 bytes or more use a heap-based merge (O(n log n)); shorter ones the
//! simple O(n^2) scan, like tiktoken. Both produce the same merges.

use std::cmp::Reverse;
use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, BinaryHeap, HashMap};
use std::path::Path;

use base64::Engine as _;
use serde_json::Value;

/// The pre-tokenizer pattern of the released Tekken vocabularies (v3..v7 files).
pub const TEKKEN_PATTERN: &str = r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+";

/// Special tokens that files without a `special_tokens` list (versions up to v7) get,
/// as `mistral_common`'s `Tekkenizer.DEPRECATED_SPECIAL_TOKENS` (ranks 0..=19).
pub(crate) const DEPRECATED_SPECIAL_TOKENS: [&str; 20] = [
    "<unk>",
    "<s>",
    "</s>",
    "[INST]",
    "[/INST]",
    "[AVAILABLE_TOOLS]",
    "[/AVAILABLE_TOOLS]",
    "[TOOL_RESULTS]",
    "[/TOOL_RESULTS]",
    "[TOOL_CALLS]",
    "[IMG]",
    "<pad>",
    "[IMG_BREAK]",
    "[IMG_END]",
    "[PREFIX]",
    "[MIDDLE]",
    "[SUFFIX]",
    "[SYSTEM_PROMPT]",
    "[/SYSTEM_PROMPT]",
    "[TOOL_CONTENT]",
];

/// Size of the window the regex search is retried on after a regex error (see module docs).
const FALLBACK_WINDOW_BYTES: usize = 64 * 1024;

/// Pieces at least this long use the heap-based merge (the threshold tiktoken uses).
const LARGE_PIECE_BYTES: usize = 100;

const NO_RANK: u32 = u32::MAX;

/// Errors loading a `tekken.json`. Every message starts with the file path (or the origin
/// given to [`Tekken::from_json_str`]) and names the key at fault.
#[derive(Debug, thiserror::Error)]
pub enum TokenizerError {
    #[error("{path}: cannot read tokenizer file: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: not valid JSON (whole document): {source}")]
    Json {
        path: String,
        #[source]
        source: serde_json::Error,
    },
    #[error("{path}: missing required key `{key}`")]
    MissingKey { path: String, key: String },
    #[error("{path}: key `{key}`: {reason}")]
    Invalid {
        path: String,
        key: String,
        reason: String,
    },
    #[error("{path}: key `config.pattern`: regex does not compile: {source}")]
    Pattern {
        path: String,
        #[source]
        source: Box<fancy_regex::Error>,
    },
}

/// A loaded Tekken tokenizer.
#[derive(Clone)]
pub struct Tekken {
    pattern: fancy_regex::Regex,
    /// Token bytes -> rank, for the first `vocab_size - num_special_tokens` ranks.
    ranks: HashMap<Vec<u8>, u32>,
    /// Rank -> token bytes (the inverse of `ranks`).
    bytes: Vec<Vec<u8>>,
    num_special_tokens: usize,
    vocab_size: usize,
    /// `token_str` -> id of every special token (including `<SPECIAL_N>` fillers).
    specials: HashMap<String, u32>,
    voice_num_audio_tokens: BTreeMap<String, usize>,
}

impl std::fmt::Debug for Tekken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tekken")
            .field("vocab_size", &self.vocab_size)
            .field("num_special_tokens", &self.num_special_tokens)
            .field("mergeable_ranks", &self.ranks.len())
            .field("voices", &self.voice_num_audio_tokens.len())
            .finish_non_exhaustive()
    }
}

impl Tekken {
    /// Reads a `tekken.json` (object form: `config`, `vocab`, optional `special_tokens`,
    /// optional `audio`; other keys such as `image` are ignored).
    pub fn from_file(path: &Path) -> Result<Self, TokenizerError> {
        let origin = path.display().to_string();
        let json = std::fs::read_to_string(path).map_err(|source| TokenizerError::Io {
            path: origin.clone(),
            source,
        })?;
        Self::from_json_str(&json, &origin)
    }

    /// Parses the contents of a `tekken.json`; `origin` (usually the file path) is used in
    /// error messages.
    pub fn from_json_str(json: &str, origin: &str) -> Result<Self, TokenizerError> {
        let loader = Loader { origin };
        loader.load(loader.parse(json)?)
    }

    /// Encodes `text` without BOS/EOS. Ids are `rank + num_special_tokens`. Never panics.
    pub fn encode(&self, text: &str) -> Vec<u32> {
        let mut out = Vec::with_capacity(text.len() / 3 + 1);
        let offset = self.num_special_tokens as u32;
        self.for_each_piece(text, |piece| self.encode_piece(piece, offset, &mut out));
        out
    }

    /// The text of `ids`, special ids dropped (see the module docs). An id past the
    /// vocabulary, which mistral-common refuses, is dropped too. Never panics.
    pub fn decode(&self, ids: &[u32]) -> String {
        let mut text = String::new();
        let mut run: Vec<u8> = Vec::new();
        for &id in ids {
            match (id as usize).checked_sub(self.num_special_tokens) {
                Some(rank) if rank < self.bytes.len() => run.extend_from_slice(&self.bytes[rank]),
                // A special id ends the run: the bytes on either side decode apart.
                _ => {
                    text.push_str(&String::from_utf8_lossy(&run));
                    run.clear();
                }
            }
        }
        text.push_str(&String::from_utf8_lossy(&run));
        text
    }

    /// Id of the special token named `token_str` (e.g. `"<s>"`, `"[AUDIO]"`), if any.
    pub fn special_id(&self, token_str: &str) -> Option<u32> {
        self.specials.get(token_str).copied()
    }

    /// `audio.voice_num_audio_tokens` (empty when the file has none).
    pub fn voice_num_audio_tokens(&self) -> &BTreeMap<String, usize> {
        &self.voice_num_audio_tokens
    }

    /// `config.default_vocab_size` (special + regular ids).
    pub fn vocab_size(&self) -> usize {
        self.vocab_size
    }

    /// `config.default_num_special_tokens`.
    pub fn num_special_tokens(&self) -> usize {
        self.num_special_tokens
    }

    /// Calls `f` on every non-empty pre-tokenizer piece of `text`, in order (see the module
    /// docs for the behaviour on regex errors).
    fn for_each_piece<'t>(&self, text: &'t str, mut f: impl FnMut(&'t [u8])) {
        let re = &self.pattern;
        let len = text.len();
        let mut pos = 0usize;
        let mut windowed = false;
        // Iteration rules of `fancy_regex::Matches`: the next search starts at the previous
        // match end, or one char later after an empty match. Empty matches give no piece.
        while pos <= len {
            let full = if windowed {
                Err(())
            } else {
                re.find_from_pos(text, pos).map_err(|_| ())
            };
            let (start, end) = match full {
                Ok(Some(m)) => (m.start(), m.end()),
                Ok(None) => break,
                Err(()) => {
                    let window_end = (pos + FALLBACK_WINDOW_BYTES).min(len);
                    let window_end = floor_char_boundary(text, window_end);
                    // A window always holds at least one char (the regex error was not at
                    // the text end); `window_end == len` ends windowed mode.
                    let window_end = if window_end <= pos {
                        next_char_boundary(text, pos).min(len)
                    } else {
                        window_end
                    };
                    match re.find_from_pos(&text[..window_end], pos) {
                        Ok(Some(m)) => {
                            windowed = m.end() >= window_end && window_end < len;
                            (m.start(), m.end())
                        }
                        Ok(None) => {
                            // No match in the window: its text is dropped, like unmatched
                            // text in tiktoken (cannot happen with the Tekken pattern).
                            windowed = window_end < len;
                            if window_end >= len {
                                break;
                            }
                            pos = window_end;
                            continue;
                        }
                        Err(_) => {
                            windowed = window_end < len;
                            (pos, window_end)
                        }
                    }
                }
            };
            if start == end {
                pos = next_char_boundary(text, end);
                continue;
            }
            f(&text.as_bytes()[start..end]);
            pos = end;
        }
    }

    #[inline]
    fn rank(&self, bytes: &[u8]) -> u32 {
        self.ranks.get(bytes).copied().unwrap_or(NO_RANK)
    }

    /// The merges are tiktoken's `byte_pair_encode`, written out here: the `tiktoken-rs` crate
    /// has it, but its `CoreBPE` unwraps the regex's errors (a panic on the over-long runs that
    /// `for_each_piece` windows), and for these two merge loops alone it would bring a second
    /// `fancy-regex` (0.19 beside 0.14), `bstr`, and 8 MB of bundled OpenAI vocabularies.
    fn encode_piece(&self, piece: &[u8], offset: u32, out: &mut Vec<u32>) {
        if piece.is_empty() {
            return;
        }
        if let Some(&rank) = self.ranks.get(piece) {
            out.push(rank + offset);
            return;
        }
        if piece.len() < LARGE_PIECE_BYTES {
            self.merge_small(piece, offset, out);
        } else {
            self.merge_large(piece, offset, out);
        }
    }

    /// tiktoken's `_byte_pair_merge`: `parts[i] = (start, rank of parts i and i+1 merged)`.
    fn merge_small(&self, piece: &[u8], offset: u32, out: &mut Vec<u32>) {
        let n = piece.len();
        let mut parts: Vec<(usize, u32)> = Vec::with_capacity(n + 1);
        for i in 0..n - 1 {
            parts.push((i, self.rank(&piece[i..i + 2])));
        }
        parts.push((n - 1, NO_RANK));
        parts.push((n, NO_RANK));
        loop {
            let mut best = (NO_RANK, usize::MAX);
            for (i, &(_, rank)) in parts[..parts.len() - 1].iter().enumerate() {
                if rank < best.0 {
                    best = (rank, i);
                }
            }
            if best.0 == NO_RANK {
                break;
            }
            let i = best.1;
            parts.remove(i + 1);
            // Pair ranks of the new part with its neighbours (`parts` is one shorter now).
            let pair_rank = |parts: &[(usize, u32)], j: usize| {
                if j + 2 < parts.len() {
                    self.rank(&piece[parts[j].0..parts[j + 2].0])
                } else {
                    NO_RANK
                }
            };
            parts[i].1 = pair_rank(&parts, i);
            if i > 0 {
                parts[i - 1].1 = pair_rank(&parts, i - 1);
            }
        }
        for w in parts.windows(2) {
            // Every part is a single byte or a merge result, so it has a rank.
            out.push(self.rank(&piece[w[0].0..w[1].0]) + offset);
        }
    }

    /// Same merges as `merge_small`, with a min-heap of candidate pairs (rank, start) and
    /// lazy invalidation; a heap entry is valid while the two parts it joins are still
    /// adjacent and unmerged, checked via the span end it was pushed with.
    fn merge_large(&self, piece: &[u8], offset: u32, out: &mut Vec<u32>) {
        let n = piece.len();
        // Parts are identified by their start byte; `end[s]` is the end of the part starting
        // at `s`, `prev[s]` the start of the part before it (usize::MAX for none),
        // `alive[s]` whether a part starts at `s`.
        let mut end: Vec<usize> = (1..=n).collect();
        let mut prev: Vec<usize> = (0..n).map(|i| i.wrapping_sub(1)).collect();
        let mut alive = vec![true; n];
        let mut heap: BinaryHeap<Reverse<(u32, usize, usize)>> = BinaryHeap::with_capacity(n);
        for i in 0..n - 1 {
            let rank = self.rank(&piece[i..i + 2]);
            if rank != NO_RANK {
                heap.push(Reverse((rank, i, i + 2)));
            }
        }
        while let Some(Reverse((_, start, span_end))) = heap.pop() {
            if !alive[start] {
                continue;
            }
            let mid = end[start];
            if mid >= n || end[mid] != span_end {
                continue; // stale: one of the two parts has changed since
            }
            // Merge the part at `mid` into the part at `start`.
            alive[mid] = false;
            end[start] = span_end;
            if span_end < n {
                prev[span_end] = start;
                let next_end = end[span_end];
                let rank = self.rank(&piece[start..next_end]);
                if rank != NO_RANK {
                    heap.push(Reverse((rank, start, next_end)));
                }
            }
            let p = prev[start];
            if p != usize::MAX {
                let rank = self.rank(&piece[p..span_end]);
                if rank != NO_RANK {
                    heap.push(Reverse((rank, p, span_end)));
                }
            }
        }
        let mut s = 0;
        while s < n {
            out.push(self.rank(&piece[s..end[s]]) + offset);
            s = end[s];
        }
    }
}

fn floor_char_boundary(text: &str, mut i: usize) -> usize {
    if i >= text.len() {
        return text.len();
    }
    while !text.is_char_boundary(i) {
        i -= 1;
    }
    i
}

fn next_char_boundary(text: &str, i: usize) -> usize {
    if i >= text.len() {
        return text.len() + 1;
    }
    let mut j = i + 1;
    while j < text.len() && !text.is_char_boundary(j) {
        j += 1;
    }
    j
}

/// `tekken.json` as far as this tokenizer reads it (other keys, such as `image`, are
/// ignored).
#[derive(serde::Deserialize)]
struct TekkenFile {
    config: TekkenConfig,
    /// Read entry by entry ([`VocabEntry`]), and only the first
    /// `default_vocab_size - default_num_special_tokens`: the rest is unused
    /// (mistral-common cuts it off unread).
    vocab: Vec<Value>,
    /// Absent or null up to version v7: mistral-common's deprecated defaults apply.
    special_tokens: Option<Vec<SpecialTokenEntry>>,
    audio: Option<AudioSection>,
}

#[derive(serde::Deserialize)]
struct TekkenConfig {
    pattern: String,
    default_vocab_size: usize,
    default_num_special_tokens: usize,
    version: String,
}

#[derive(serde::Deserialize)]
struct VocabEntry {
    rank: usize,
    /// Base64.
    token_bytes: String,
}

#[derive(serde::Deserialize)]
struct SpecialTokenEntry {
    rank: usize,
    token_str: String,
}

#[derive(serde::Deserialize)]
struct AudioSection {
    voice_num_audio_tokens: Option<BTreeMap<String, usize>>,
}

/// Parsing and validation of the JSON document, mirroring `Tekkenizer.from_file` and
/// `Tekkenizer.__init__` of mistral-common 1.13.
struct Loader<'a> {
    origin: &'a str,
}

impl Loader<'_> {
    fn missing(&self, key: &str) -> TokenizerError {
        TokenizerError::MissingKey {
            path: self.origin.to_string(),
            key: key.to_string(),
        }
    }

    fn invalid(&self, key: &str, reason: impl Into<String>) -> TokenizerError {
        TokenizerError::Invalid {
            path: self.origin.to_string(),
            key: key.to_string(),
            reason: reason.into(),
        }
    }

    /// A deserialization error at `prefix` + the error's own path (`.` is the value
    /// itself). serde reports a missing field at the enclosing object and names the field
    /// only in its message; the key named here is the field's.
    fn serde_error(
        &self,
        prefix: &str,
        e: serde_path_to_error::Error<serde_json::Error>,
    ) -> TokenizerError {
        let path = e.path().to_string();
        let key = match (prefix, path.as_str()) {
            ("", ".") => String::new(),
            (_, ".") => prefix.to_string(),
            (_, p) if prefix.is_empty() || p.starts_with('[') => format!("{prefix}{p}"),
            (_, p) => format!("{prefix}.{p}"),
        };
        let inner = e.into_inner();
        if inner.classify() != serde_json::error::Category::Data {
            return TokenizerError::Json {
                path: self.origin.to_string(),
                source: inner,
            };
        }
        let message = inner.to_string();
        if let Some(field) = message
            .strip_prefix("missing field `")
            .and_then(|m| m.split('`').next())
        {
            return match key.as_str() {
                "" => self.missing(field),
                _ => self.missing(&format!("{key}.{field}")),
            };
        }
        match key.as_str() {
            "" => self.invalid("(root)", message),
            _ => self.invalid(&key, message),
        }
    }

    fn parse(&self, json: &str) -> Result<TekkenFile, TokenizerError> {
        let mut de = serde_json::Deserializer::from_str(json);
        let file =
            serde_path_to_error::deserialize(&mut de).map_err(|e| self.serde_error("", e))?;
        de.end().map_err(|source| TokenizerError::Json {
            path: self.origin.to_string(),
            source,
        })?;
        Ok(file)
    }

    /// `value` of `key`, at most `u32::MAX / 2` (ids are `u32`).
    fn id_count(&self, key: &str, value: usize) -> Result<usize, TokenizerError> {
        if value > u32::MAX as usize / 2 {
            return Err(self.invalid(key, format!("value {value} is too large")));
        }
        Ok(value)
    }

    fn load(&self, file: TekkenFile) -> Result<Tekken, TokenizerError> {
        let config = &file.config;
        let vocab_size = self.id_count("config.default_vocab_size", config.default_vocab_size)?;
        let num_special = self.id_count(
            "config.default_num_special_tokens",
            config.default_num_special_tokens,
        )?;
        let version = &config.version;
        // mistral-common accepts only its known versions; accept any `v<N>` so that newer
        // files still load, and use N for the `special_tokens` rule below.
        let version_num: u32 = version
            .strip_prefix('v')
            .and_then(|n| n.parse().ok())
            .ok_or_else(|| {
                self.invalid(
                    "config.version",
                    format!("expected a version like \"v7\", found {version:?}"),
                )
            })?;

        if vocab_size < num_special + 256 {
            return Err(self.invalid(
                "config.default_vocab_size",
                format!(
                    "{vocab_size} leaves fewer than 256 regular tokens after \
                     {num_special} special tokens (config.default_num_special_tokens)"
                ),
            ));
        }
        let inner_vocab = vocab_size - num_special;

        let specials =
            self.load_special_tokens(file.special_tokens.as_deref(), num_special, version_num)?;
        let ranks = self.load_vocab(&file.vocab, inner_vocab)?;
        let voice_num_audio_tokens = file
            .audio
            .and_then(|a| a.voice_num_audio_tokens)
            .unwrap_or_default();

        let pattern =
            fancy_regex::Regex::new(&config.pattern).map_err(|e| TokenizerError::Pattern {
                path: self.origin.to_string(),
                source: Box::new(e),
            })?;

        let mut bytes = vec![Vec::new(); ranks.len()];
        for (token, &rank) in &ranks {
            bytes[rank as usize] = token.clone();
        }
        Ok(Tekken {
            pattern,
            ranks,
            bytes,
            num_special_tokens: num_special,
            vocab_size,
            specials,
            voice_num_audio_tokens,
        })
    }

    fn load_special_tokens(
        &self,
        list: Option<&[SpecialTokenEntry]>,
        num_special: usize,
        version_num: u32,
    ) -> Result<HashMap<String, u32>, TokenizerError> {
        let mut named: Vec<(String, u32)> = Vec::new();
        match list {
            None => {
                if version_num > 7 {
                    return Err(self.missing("special_tokens"));
                }
                for (rank, name) in DEPRECATED_SPECIAL_TOKENS.iter().enumerate() {
                    named.push((name.to_string(), rank as u32));
                }
            }
            Some(list) => {
                for (i, entry) in list.iter().enumerate() {
                    if entry.rank >= num_special {
                        return Err(self.invalid(
                            &format!("special_tokens[{i}].rank"),
                            format!(
                                "rank {} is not below config.default_num_special_tokens ({num_special})",
                                entry.rank
                            ),
                        ));
                    }
                    named.push((entry.token_str.clone(), entry.rank as u32));
                }
            }
        }
        if named.len() > num_special {
            return Err(self.invalid(
                "special_tokens",
                format!(
                    "{} entries but config.default_num_special_tokens is {num_special}",
                    named.len()
                ),
            ));
        }
        // Like mistral-common: positions len(list)..num_special are filled with
        // `<SPECIAL_{i}>` (rank i), and all names must be unique.
        let listed = named.len();
        named.extend((listed..num_special).map(|i| (format!("<SPECIAL_{i}>"), i as u32)));
        let mut specials = HashMap::with_capacity(named.len());
        for (i, (name, rank)) in named.into_iter().enumerate() {
            match specials.entry(name) {
                Entry::Occupied(e) => {
                    let key = if i < listed {
                        format!("special_tokens[{i}].token_str")
                    } else {
                        "special_tokens".to_string()
                    };
                    return Err(
                        self.invalid(&key, format!("duplicate special token {:?}", e.key()))
                    );
                }
                Entry::Vacant(e) => {
                    e.insert(rank);
                }
            }
        }
        Ok(specials)
    }

    fn load_vocab(
        &self,
        vocab: &[Value],
        inner_vocab: usize,
    ) -> Result<HashMap<Vec<u8>, u32>, TokenizerError> {
        if vocab.len() < inner_vocab {
            return Err(self.invalid(
                "vocab",
                format!(
                    "{} entries, but config.default_vocab_size - config.default_num_special_tokens \
                     = {inner_vocab} are needed",
                    vocab.len()
                ),
            ));
        }
        let b64 = base64::engine::general_purpose::STANDARD;
        let mut ranks: HashMap<Vec<u8>, u32> = HashMap::with_capacity(inner_vocab);
        // Entries past `inner_vocab` are unused (mistral-common cuts them off unread).
        for (i, entry) in vocab[..inner_vocab].iter().enumerate() {
            let key = format!("vocab[{i}]");
            let entry: VocabEntry =
                serde_path_to_error::deserialize(entry).map_err(|e| self.serde_error(&key, e))?;
            if entry.rank != i {
                return Err(self.invalid(
                    &format!("{key}.rank"),
                    format!(
                        "rank {} at position {i}: vocab must be sorted by rank, from 0",
                        entry.rank
                    ),
                ));
            }
            let bytes = b64.decode(&entry.token_bytes).map_err(|e| {
                self.invalid(&format!("{key}.token_bytes"), format!("bad base64: {e}"))
            })?;
            if i < 256 && bytes != [i as u8] {
                return Err(self.invalid(
                    &format!("{key}.token_bytes"),
                    format!("rank {i} must be the single byte 0x{i:02x}, found {bytes:02x?}"),
                ));
            }
            match ranks.entry(bytes) {
                Entry::Occupied(e) => {
                    return Err(self.invalid(
                        &format!("{key}.token_bytes"),
                        format!("same bytes as rank {}", e.get()),
                    ));
                }
                Entry::Vacant(e) => {
                    e.insert(i as u32);
                }
            }
        }
        Ok(ranks)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    #[cfg(feature = "testkit")]
    use crate::testkit::tekken::generated;
    #[cfg(feature = "testkit")]
    use rand::{Rng as _, SeedableRng as _};
    use std::path::PathBuf;
    use std::sync::OnceLock;

    fn manifest_path(rel: &str) -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)
    }

    /// mistral-common 1.13.1's `data/tekken_240911.json` (131072 ids); required, not skipped.
    fn reference() -> &'static Tekken {
        static REF: OnceLock<Tekken> = OnceLock::new();
        REF.get_or_init(|| {
            let path = std::env::var_os("VOXTRAL_TEKKEN_REF")
                .map(PathBuf::from)
                .unwrap_or_else(|| manifest_path(".deps/ref/tekken_240911.json"));
            Tekken::from_file(&path).unwrap_or_else(|e| {
                panic!(
                    "the reference vocabulary is required: set VOXTRAL_TEKKEN_REF or put \
                     mistral_common/data/tekken_240911.json (wheel mistral-common==1.13.1) at \
                     .deps/ref/tekken_240911.json: {e}"
                )
            })
        })
    }

    #[derive(serde::Deserialize)]
    struct Golden {
        cases: Vec<GoldenCase>,
    }

    #[derive(serde::Deserialize)]
    struct GoldenCase {
        text: String,
        ids: Vec<u32>,
    }

    fn check_golden(tok: &Tekken, rel: &str) {
        let path = manifest_path(rel);
        let json =
            std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let golden: Golden = serde_json::from_str(&json).unwrap();
        assert!(golden.cases.len() >= 100, "{rel}: too few cases");
        let mut failures = Vec::new();
        for case in &golden.cases {
            let got = tok.encode(&case.text);
            if got != case.ids {
                failures.push(format!(
                    "{:?}: expected {:?}, got {:?}",
                    case.text.chars().take(60).collect::<String>(),
                    case.ids,
                    got
                ));
            }
        }
        assert!(
            failures.is_empty(),
            "{rel}: {} of {} cases differ from mistral-common:\n{}",
            failures.len(),
            golden.cases.len(),
            failures.join("\n")
        );
    }

    #[test]
    fn reference_vocab_spec_vectors() {
        let tok = reference();
        assert_eq!(tok.encode("Hello."), vec![22177, 1046]);
        assert_eq!(
            tok.encode("Tab\tand\nnewline handling."),
            vec![16256, 1009, 1421, 1010, 3080, 2839, 21490, 1046]
        );
        assert_eq!(
            tok.encode("Paris is a beautiful city!"),
            vec![42572, 1395, 1261, 15568, 5970, 1033]
        );
        assert_eq!(tok.encode(""), Vec::<u32>::new());
        assert_eq!(tok.vocab_size(), 131072);
        assert_eq!(tok.num_special_tokens(), 1000);
        // This v3 file has no `special_tokens`: mistral-common's defaults apply.
        assert_eq!(tok.special_id("<s>"), Some(1));
        assert_eq!(tok.special_id("[TOOL_CONTENT]"), Some(19));
        assert_eq!(tok.special_id("<SPECIAL_24>"), Some(24));
        assert_eq!(tok.special_id("[AUDIO]"), None);
        assert!(tok.voice_num_audio_tokens().is_empty());
    }

    /// Specials are dropped, and the regular ids between two of them decode on their own:
    /// a character whose bytes a special splits is two replacement characters, as in
    /// mistral-common (`Tekkenizer.decode`, `SpecialTokenPolicy.IGNORE`).
    #[test]
    fn decode_drops_specials_and_replaces_broken_utf8() {
        let tok = reference();
        let (bos, eos) = (1, 2);
        let hello = tok.encode("Hello.");
        let ids: Vec<u32> = [
            &[bos][..],
            &hello,
            &[32, 33, 999],
            &tok.encode(" Paris"),
            &[eos],
        ]
        .concat();
        assert_eq!(tok.decode(&ids), "Hello. Paris");
        assert_eq!(tok.decode(&[]), "");
        assert_eq!(tok.decode(&[bos, eos]), "");
        // "é" is 0xC3 0xA9; byte b has rank b, id b + 1000.
        let (c3, a9) = (1000 + 0xC3, 1000 + 0xA9);
        assert_eq!(tok.decode(&[c3, a9]), "é");
        assert_eq!(tok.decode(&[c3, 32, a9]), "\u{FFFD}\u{FFFD}");
        assert_eq!(tok.decode(&[c3]), "\u{FFFD}");
        // Past the vocabulary: dropped, never a panic.
        assert_eq!(tok.decode(&[u32::MAX, 131_072]), "");
    }

    #[test]
    fn reference_vocab_matches_mistral_common_golden() {
        check_golden(reference(), "tests/data/tekken_240911_cases.json");
    }

    #[cfg(feature = "testkit")]
    #[test]
    fn generated_file_matches_mistral_common_golden() {
        let (_dir, _path, tok) = generated(500);
        check_golden(&tok, "tests/data/tekken_test_gen500_cases.json");
    }

    #[cfg(feature = "testkit")]
    #[test]
    fn heap_merge_equals_scan_merge() {
        let (_dir, _path, small) = generated(2000);
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(11);
        let alphabet: Vec<char> = "aeiouéèntrslABCDE  xyz中文字😀\u{301}.,!0123"
            .chars()
            .collect();
        for tok in [reference(), &small] {
            for _ in 0..300 {
                let len = rng.random_range(2..260);
                let s: String = (0..len)
                    .map(|_| alphabet[rng.random_range(0..alphabet.len())])
                    .collect();
                let bytes = s.as_bytes();
                let (mut a, mut b) = (Vec::new(), Vec::new());
                tok.merge_small(bytes, 0, &mut a);
                tok.merge_large(bytes, 0, &mut b);
                assert_eq!(a, b, "{s:?}");
            }
        }
    }

    #[cfg(feature = "testkit")]
    fn hostile_inputs() -> Vec<String> {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(5);
        let mut random_text = String::new();
        while random_text.chars().count() < 100_000 {
            // Any Unicode scalar value, biased towards the common planes.
            let c = match rng.random_range(0..4) {
                0 => rng.random_range(0..0x80),
                1 => rng.random_range(0x80..0x3000),
                2 => rng.random_range(0x3000..0x11_0000),
                _ => *[0x20, 0x0a, 0x0d, 0x09, 0x00, 0x200f, 0x202e]
                    .get(rng.random_range(0..7))
                    .unwrap(),
            };
            if let Some(c) = char::from_u32(c) {
                random_text.push(c);
            }
        }
        vec![
            "\0".to_string(),
            "a\0b\0\0".to_string(),
            "👨‍👩‍👧‍👦🇫🇷👍🏽".repeat(50),
            "\u{202e}مرحبا بالعالم\u{200f} שלום".to_string(),
            "中文字日本語한국어".repeat(100),
            "\u{301}\u{301}x\u{feff}\u{2028}".to_string(),
            random_text,
            "word ".repeat(20_000),
        ]
    }

    #[cfg(feature = "testkit")]
    #[test]
    fn never_panics_and_round_trips() {
        let (_dir, _path, small) = generated(1000);
        for tok in [reference(), &small] {
            for text in hostile_inputs() {
                let ids = tok.encode(&text);
                assert!(ids
                    .iter()
                    .all(|&id| (id as usize) >= tok.num_special_tokens()));
                assert_eq!(tok.decode(&ids), text);
            }
        }
    }

    #[cfg(feature = "testkit")]
    #[test]
    fn regex_error_falls_back_without_panicking() {
        let (_dir, _path, tok) = generated(300);
        let n = 1_100_000;
        for text in [
            " ".repeat(n),
            "a".repeat(n),
            format!("Hello {}world.", " ".repeat(n)),
            format!("{}b and more text", "A".repeat(n)),
        ] {
            // The plain search does fail on these inputs, so the fallback is exercised.
            assert!(tok.pattern.find_from_pos(&text, 0).is_err() || text.starts_with("Hello"));
            assert_eq!(tok.decode(&tok.encode(&text)), text);
        }
        // Pieces before and after an over-long run are split normally; the run itself is
        // cut into pieces of at most FALLBACK_WINDOW_BYTES.
        let text = format!("Hello. {}Tab\tand", "x".repeat(n));
        let mut pieces: Vec<&[u8]> = Vec::new();
        tok.for_each_piece(&text, |p| pieces.push(p));
        assert_eq!(&pieces[..2], &[&b"Hello"[..], b"."]);
        assert_eq!(&pieces[pieces.len() - 2..], &[&b"Tab"[..], b"\tand"]);
        assert!(pieces.iter().all(|p| p.len() <= FALLBACK_WINDOW_BYTES));
        assert!(pieces.len() > n / FALLBACK_WINDOW_BYTES);
        assert_eq!(pieces.concat(), text.as_bytes());
        let ids = tok.encode(&text);
        let head = tok.encode("Hello.");
        assert_eq!(&ids[..head.len()], &head[..]);
        assert!(ids.ends_with(&tok.encode("\tand")));
    }

    #[cfg(feature = "testkit")]
    fn load_err(json: &str) -> String {
        match Tekken::from_json_str(json, "/models/x/tekken.json") {
            Ok(_) => panic!("loaded: {json}"),
            Err(e) => e.to_string(),
        }
    }

    #[cfg(feature = "testkit")]
    /// A valid document (generated, 0 merges) with `edit` applied.
    fn edited(edit: impl FnOnce(&mut Value)) -> String {
        let (_dir, path, _) = generated(0);
        let mut doc: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        edit(&mut doc);
        doc.to_string()
    }

    #[cfg(feature = "testkit")]
    #[test]
    fn errors_name_file_and_key() {
        let cases: Vec<(String, &str)> = vec![
            ("{not json".to_string(), "not valid JSON"),
            ("[]".to_string(), "(root)"),
            (
                edited(|d| {
                    d.as_object_mut().unwrap().remove("config");
                }),
                "`config`",
            ),
            (
                edited(|d| d["config"]["pattern"] = Value::from(3)),
                "config.pattern",
            ),
            (
                edited(|d| d["config"]["pattern"] = Value::from("(unclosed")),
                "config.pattern",
            ),
            (
                edited(|d| {
                    d["config"]
                        .as_object_mut()
                        .unwrap()
                        .remove("default_vocab_size");
                }),
                "config.default_vocab_size",
            ),
            (
                edited(|d| d["config"]["default_vocab_size"] = Value::from(1100)),
                "config.default_vocab_size",
            ),
            (
                edited(|d| d["config"]["default_vocab_size"] = Value::from(1300)),
                "`vocab`",
            ),
            (
                edited(|d| d["config"]["default_num_special_tokens"] = Value::from(-1)),
                "config.default_num_special_tokens",
            ),
            (
                edited(|d| d["config"]["version"] = Value::from("seven")),
                "config.version",
            ),
            (
                edited(|d| {
                    d.as_object_mut().unwrap().remove("vocab");
                }),
                "`vocab`",
            ),
            (
                edited(|d| d["vocab"][7]["rank"] = Value::from(8)),
                "vocab[7].rank",
            ),
            (
                edited(|d| d["vocab"][200]["token_bytes"] = Value::from("!!")),
                "vocab[200].token_bytes",
            ),
            (
                edited(|d| d["vocab"][65]["token_bytes"] = Value::from("Qg==")),
                "vocab[65].token_bytes",
            ),
            (
                edited(|d| {
                    d["vocab"][9].as_object_mut().unwrap().remove("token_bytes");
                }),
                "vocab[9].token_bytes",
            ),
            (
                edited(|d| d["special_tokens"][5]["token_str"] = Value::from("<s>")),
                "special_tokens[5].token_str",
            ),
            (
                edited(|d| d["special_tokens"][5]["rank"] = Value::from(1000)),
                "special_tokens[5].rank",
            ),
            (
                edited(|d| d["special_tokens"][5] = Value::from(5)),
                "special_tokens[5]",
            ),
            (
                edited(|d| d["special_tokens"] = Value::from("x")),
                "special_tokens",
            ),
            (
                edited(|d| {
                    d.as_object_mut().unwrap().remove("special_tokens");
                    d["config"]["version"] = Value::from("v11");
                }),
                "`special_tokens`",
            ),
            (
                edited(|d| d["audio"]["voice_num_audio_tokens"]["casual_male"] = Value::from(-3)),
                "audio.voice_num_audio_tokens.casual_male",
            ),
            (
                edited(|d| d["audio"]["voice_num_audio_tokens"] = Value::from(1)),
                "audio.voice_num_audio_tokens",
            ),
        ];
        for (json, key) in cases {
            let msg = load_err(&json);
            assert!(msg.starts_with("/models/x/tekken.json: "), "{msg}");
            assert!(msg.contains(key), "expected {key:?} in {msg:?}");
        }
        let missing = Path::new("/nonexistent/dir/tekken.json");
        let msg = Tekken::from_file(missing).unwrap_err().to_string();
        assert!(msg.starts_with("/nonexistent/dir/tekken.json: "), "{msg}");
    }

    #[cfg(feature = "testkit")]
    #[test]
    fn optional_parts_may_be_absent() {
        // No `audio`, no `special_tokens` (v7 and below use the deprecated defaults), extra
        // keys ignored, unused vocab entries past the vocab size not even read.
        let json = edited(|d| {
            let obj = d.as_object_mut().unwrap();
            obj.remove("audio");
            obj.remove("special_tokens");
            obj.insert("image".into(), serde_json::json!({"image_patch_size": 16}));
            d["vocab"]
                .as_array_mut()
                .unwrap()
                .push(Value::from("unused"));
        });
        let tok = Tekken::from_json_str(&json, "x").unwrap();
        assert!(tok.voice_num_audio_tokens().is_empty());
        assert_eq!(tok.special_id("<s>"), Some(1));
        assert_eq!(tok.special_id("<SPECIAL_20>"), Some(20));
        assert_eq!(tok.encode("ab"), vec![1000 + 97, 1000 + 98]);
    }
}
