//! INTERIM tokenizer (to be replaced by the full Tekken implementation).
use base64::Engine;
use serde::Deserialize;
use std::collections::{BTreeMap, HashMap};
use std::path::Path;

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct TokenizerError(String);

#[derive(Deserialize)]
struct File {
    config: Conf,
    vocab: Vec<Entry>,
    special_tokens: Vec<Special>,
    #[serde(default)]
    audio: Option<Audio>,
}
#[derive(Deserialize)]
struct Conf {
    pattern: String,
    default_vocab_size: usize,
    default_num_special_tokens: usize,
}
#[derive(Deserialize)]
struct Entry {
    rank: u32,
    token_bytes: String,
}
#[derive(Deserialize)]
struct Special {
    rank: u32,
    token_str: String,
}
#[derive(Deserialize)]
struct Audio {
    #[serde(default)]
    voice_num_audio_tokens: BTreeMap<String, usize>,
}

pub struct Tekken {
    ranks: HashMap<Vec<u8>, u32>,
    regex: fancy_regex::Regex,
    special: HashMap<String, u32>,
    voices: BTreeMap<String, usize>,
    vocab_size: usize,
    n_special: usize,
}

impl Tekken {
    pub fn from_file(path: &Path) -> Result<Self, TokenizerError> {
        let s = std::fs::read_to_string(path).map_err(|e| TokenizerError(e.to_string()))?;
        let f: File = serde_json::from_str(&s).map_err(|e| TokenizerError(e.to_string()))?;
        let n = f.config.default_vocab_size - f.config.default_num_special_tokens;
        let mut ranks = HashMap::new();
        for e in f.vocab.iter().take(n) {
            let b = base64::engine::general_purpose::STANDARD
                .decode(&e.token_bytes)
                .map_err(|e| TokenizerError(e.to_string()))?;
            ranks.insert(b, e.rank);
        }
        Ok(Tekken {
            ranks,
            regex: fancy_regex::Regex::new(&f.config.pattern)
                .map_err(|e| TokenizerError(e.to_string()))?,
            special: f
                .special_tokens
                .iter()
                .map(|s| (s.token_str.clone(), s.rank))
                .collect(),
            voices: f
                .audio
                .map(|a| a.voice_num_audio_tokens)
                .unwrap_or_default(),
            vocab_size: f.config.default_vocab_size,
            n_special: f.config.default_num_special_tokens,
        })
    }
    pub fn encode(&self, text: &str) -> Vec<u32> {
        let mut out = Vec::new();
        for m in self.regex.find_iter(text).flatten() {
            let mut parts: Vec<Vec<u8>> = m.as_str().bytes().map(|b| vec![b]).collect();
            loop {
                let best = (0..parts.len().saturating_sub(1))
                    .filter_map(|i| {
                        let mut j = parts[i].clone();
                        j.extend(&parts[i + 1]);
                        self.ranks.get(&j).map(|&r| (r, i))
                    })
                    .min();
                let Some((_, i)) = best else { break };
                let next = parts.remove(i + 1);
                parts[i].extend(next);
            }
            out.extend(parts.iter().map(|p| self.ranks[p] + self.n_special as u32));
        }
        out
    }
    pub fn special_id(&self, s: &str) -> Option<u32> {
        self.special.get(s).copied()
    }
    pub fn voice_num_audio_tokens(&self) -> &BTreeMap<String, usize> {
        &self.voices
    }
    pub fn vocab_size(&self) -> usize {
        self.vocab_size
    }
}

pub fn write_test_tekken(
    path: &Path,
    num_merges: usize,
    voices: &BTreeMap<String, usize>,
) -> std::io::Result<()> {
    let names: HashMap<u32, &str> = [
        (0, "<unk>"),
        (1, "<s>"),
        (2, "</s>"),
        (24, "[AUDIO]"),
        (25, "[BEGIN_AUDIO]"),
        (35, "[REPEAT_AUDIO_TEXT]"),
        (36, "[NEXT_AUDIO_TEXT]"),
    ]
    .into_iter()
    .collect();
    let specials: Vec<_> = (0..1000u32).map(|r| serde_json::json!({"rank": r, "token_str": names.get(&r).map(|s| s.to_string()).unwrap_or(format!("<SPECIAL_{r}>")), "is_control": true})).collect();
    let mut toks: Vec<Vec<u8>> = (0..=255u8).map(|b| vec![b]).collect();
    let alpha = b"etaoinshrdlu cmfwypvbgkjqxz";
    'outer: for a in alpha {
        for b in alpha {
            if toks.len() >= 256 + num_merges {
                break 'outer;
            }
            toks.push(vec![*a, *b]);
        }
    }
    'outer2: for a in alpha {
        for b in alpha {
            for c in alpha {
                if toks.len() >= 256 + num_merges {
                    break 'outer2;
                }
                toks.push(vec![*a, *b, *c]);
            }
        }
    }
    let vocab: Vec<_> = toks.iter().enumerate().map(|(r, t)| serde_json::json!({"rank": r, "token_bytes": base64::engine::general_purpose::STANDARD.encode(t), "token_str": String::from_utf8_lossy(t)})).collect();
    let j = serde_json::json!({"config": {"pattern": r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+", "num_vocab_tokens": toks.len(), "default_vocab_size": 1256 + num_merges, "default_num_special_tokens": 1000, "version": "v7"}, "vocab": vocab, "special_tokens": specials, "audio": {"voice_num_audio_tokens": voices}});
    std::fs::write(path, serde_json::to_string(&j).unwrap())
}
