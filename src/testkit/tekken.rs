//! A small but valid `tekken.json` for test checkpoints ([`write_test_tekken`]): the
//! published special-token layout, the real Tekken pattern and a vocabulary learned by a
//! small BPE trainer on a built-in English and French text.

use std::collections::BTreeMap;
use std::path::Path;

use base64::Engine as _;

use crate::tokenizers::tekken::{DEPRECATED_SPECIAL_TOKENS, TEKKEN_PATTERN};

/// Names at fixed ranks in the generated file, as in the Voxtral-4B-TTS `tekken.json`:
/// ranks 0..=19 are mistral-common's deprecated defaults, then the audio tokens.
/// `[TRANSCRIBE]` (34) is needed by mistral-common's `MistralTokenizer.from_file` for any
/// v7 file with an `audio` section (`InstructTokenizerV7` looks it up); its rank is the
/// one of mistral-common's audio test tokenizers. `[OUTPUT_AUDIO]` (26) is not in
/// mistral-common's `SpecialTokens`; it is what other Voxtral-TTS ports read from the real
/// file. The prompt uses 1, 24, 25, 35 and 36, looked up by name.
const TEST_SPECIAL_TOKENS: [(usize, &str); 6] = [
    (24, "[AUDIO]"),
    (25, "[BEGIN_AUDIO]"),
    (26, "[OUTPUT_AUDIO]"),
    (34, "[TRANSCRIBE]"),
    (35, "[REPEAT_AUDIO_TEXT]"),
    (36, "[NEXT_AUDIO_TEXT]"),
];

/// Built-in training text (English and French) for the generator's merges.
const TRAINING_TEXT: &str = "\
The quick brown fox jumps over the lazy dog. Hello, world! How are you today? \
I would like a cup of tea, please, and a slice of lemon cake. The weather is lovely this \
morning: the sun is shining and the birds are singing in the garden. We will meet at the \
station at 10:30, then walk to the museum together. Reading books is one of my favourite \
things; I read every evening before going to sleep. Please speak slowly and clearly, so \
that everyone in the room can hear the voice. This is a test of the text to speech \
system, with numbers like 2024, 3.14 and 1,000,000, and punctuation (brackets), \
\"quotes\", 'apostrophes' - dashes... and more!\n\
Bonjour tout le monde ! Comment allez-vous aujourd'hui ? Je voudrais un café au lait et \
un croissant, s'il vous plaît. Il fait très beau ce matin : le soleil brille et les \
oiseaux chantent dans le jardin. Nous nous retrouverons à la gare à dix heures et demie, \
puis nous irons ensemble au musée. La lecture est l'une de mes activités préférées ; je \
lis chaque soir avant de m'endormir. Parlez lentement et clairement, pour que tout le \
monde puisse entendre la voix. Ceci est un essai du système de synthèse vocale, avec des \
nombres comme 2024, 3,14 et 1 000 000, des accents (é, è, ê, à, ç, ô, û) et de la \
ponctuation « entre guillemets ».\n\
Tab\tand\nnewline handling.  Two  spaces,   three   spaces.\n\n\
Paris is a beautiful city! Where is the nearest bakery? What time is it? \
Où est la boulangerie la plus proche ? Quelle heure est-il ? Merci beaucoup, au revoir.\n";

#[derive(serde::Serialize)]
struct GenConfig<'a> {
    pattern: &'a str,
    num_vocab_tokens: usize,
    default_vocab_size: usize,
    default_num_special_tokens: usize,
    version: &'a str,
}

#[derive(serde::Serialize)]
struct GenVocabEntry {
    rank: usize,
    token_bytes: String,
    token_str: Option<String>,
}

#[derive(serde::Serialize)]
struct GenSpecialEntry {
    rank: usize,
    token_str: String,
    is_control: bool,
}

#[derive(serde::Serialize)]
struct GenEncodingConfig {
    num_mel_bins: usize,
    hop_length: usize,
    window_size: usize,
}

#[derive(serde::Serialize)]
struct GenAudio<'a> {
    sampling_rate: u32,
    frame_rate: f64,
    audio_encoding_config: GenEncodingConfig,
    chunk_length_s: Option<f64>,
    voice_num_audio_tokens: &'a BTreeMap<String, usize>,
}

#[derive(serde::Serialize)]
struct GenFile<'a, A> {
    config: GenConfig<'a>,
    vocab: Vec<GenVocabEntry>,
    special_tokens: Vec<GenSpecialEntry>,
    audio: A,
}

/// Learns `num_merges` merged tokens (byte strings, in rank order after the 256 bytes):
/// greedy BPE on the pre-split [`TRAINING_TEXT`] (most frequent adjacent pair first, ties
/// broken by the smaller byte strings); once the text is fully merged, further tokens are
/// concatenations of two existing tokens drawn with a fixed-seed ChaCha8 generator.
fn learn_merges(num_merges: usize) -> Vec<Vec<u8>> {
    use rand::{Rng as _, SeedableRng as _};

    let re = fancy_regex::Regex::new(TEKKEN_PATTERN).expect("TEKKEN_PATTERN compiles");
    // Distinct pieces with their counts; each piece as a list of token byte strings.
    let mut counts: BTreeMap<&[u8], u64> = BTreeMap::new();
    for m in re.find_iter(TRAINING_TEXT).flatten() {
        *counts.entry(m.as_str().as_bytes()).or_default() += 1;
    }
    let mut words: Vec<(Vec<Vec<u8>>, u64)> = counts
        .into_iter()
        .map(|(w, c)| (w.iter().map(|&b| vec![b]).collect(), c))
        .collect();

    let mut known: std::collections::HashSet<Vec<u8>> = (0..=255u8).map(|b| vec![b]).collect();
    let mut merges: Vec<Vec<u8>> = Vec::with_capacity(num_merges);
    while merges.len() < num_merges {
        let mut pairs: BTreeMap<(&[u8], &[u8]), u64> = BTreeMap::new();
        for (parts, c) in &words {
            for w in parts.windows(2) {
                *pairs.entry((&w[0], &w[1])).or_default() += c;
            }
        }
        // Highest count; among equal counts the first in (left, right) byte order.
        let mut best: Option<(Vec<u8>, Vec<u8>)> = None;
        let mut best_count = 0;
        for ((left, right), c) in pairs {
            if c > best_count && !known.contains(&[left, right].concat()) {
                best = Some((left.to_vec(), right.to_vec()));
                best_count = c;
            }
        }
        let Some((left, right)) = best else {
            break;
        };
        let merged = [left.as_slice(), right.as_slice()].concat();
        for (parts, _) in &mut words {
            let mut i = 0;
            while i + 1 < parts.len() {
                if parts[i] == left && parts[i + 1] == right {
                    parts[i] = merged.clone();
                    parts.remove(i + 1);
                }
                i += 1;
            }
        }
        known.insert(merged.clone());
        merges.push(merged);
    }

    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(0x7e6b_6b65_6e00_0001);
    let mut pool: Vec<Vec<u8>> = (0..=255u8).map(|b| vec![b]).collect();
    pool.extend(merges.iter().cloned());
    while merges.len() < num_merges {
        let a = &pool[rng.random_range(0..pool.len())];
        let b = &pool[rng.random_range(0..pool.len())];
        let merged = [a.as_slice(), b.as_slice()].concat();
        if merged.len() <= 24 && known.insert(merged.clone()) {
            pool.push(merged.clone());
            merges.push(merged);
        }
    }
    merges
}

/// Writes a small but valid `tekken.json` (version "v7") that mistral-common's
/// `Tekkenizer.from_file` and `MistralTokenizer.from_file` load (the latter needs the file
/// name to contain "tekken"): 1000 special tokens (`<unk>`, `<s>`=1, `</s>`=2, ...,
/// `[TOOL_CONTENT]`=19, `[AUDIO]`=24, `[BEGIN_AUDIO]`=25, `[OUTPUT_AUDIO]`=26,
/// `[TRANSCRIBE]`=34, `[REPEAT_AUDIO_TEXT]`=35, `[NEXT_AUDIO_TEXT]`=36, all others
/// `<SPECIAL_N>`), the 256
/// byte tokens plus `num_merges` merged tokens (deterministic, see [`learn_merges`]), the
/// real Tekken pattern, `default_vocab_size = 1000 + 256 + num_merges`, and
/// `audio.voice_num_audio_tokens = voices` (24 kHz, 12.5 Hz frames). The output is the same
/// for the same arguments.
pub fn write_test_tekken(
    path: &Path,
    num_merges: usize,
    voices: &BTreeMap<String, usize>,
) -> std::io::Result<()> {
    let audio = GenAudio {
        sampling_rate: 24000,
        frame_rate: 12.5,
        audio_encoding_config: GenEncodingConfig {
            num_mel_bins: 128,
            hop_length: 160,
            window_size: 400,
        },
        chunk_length_s: None,
        voice_num_audio_tokens: voices,
    };
    write_tekken(path, num_merges, &TEST_SPECIAL_TOKENS, &audio)
}

/// Writes a v7 `tekken.json` like [`write_test_tekken`]'s, with `specials` named at their
/// ranks (the others `<SPECIAL_N>` or mistral-common's deprecated defaults) and `audio` as
/// the file's `audio` section.
pub fn write_tekken(
    path: &Path,
    num_merges: usize,
    specials: &[(usize, &str)],
    audio: &impl serde::Serialize,
) -> std::io::Result<()> {
    const NUM_SPECIAL: usize = 1000;
    let b64 = base64::engine::general_purpose::STANDARD;

    let mut tokens: Vec<Vec<u8>> = (0..=255u8).map(|b| vec![b]).collect();
    tokens.extend(learn_merges(num_merges));
    let vocab: Vec<GenVocabEntry> = tokens
        .iter()
        .enumerate()
        .map(|(rank, bytes)| GenVocabEntry {
            rank,
            token_bytes: b64.encode(bytes),
            token_str: std::str::from_utf8(bytes).ok().map(str::to_string),
        })
        .collect();

    let mut names: Vec<String> = (0..NUM_SPECIAL).map(|i| format!("<SPECIAL_{i}>")).collect();
    for (rank, name) in DEPRECATED_SPECIAL_TOKENS.iter().enumerate() {
        names[rank] = name.to_string();
    }
    for &(rank, name) in specials {
        names[rank] = name.to_string();
    }
    let special_tokens = names
        .into_iter()
        .enumerate()
        .map(|(rank, token_str)| GenSpecialEntry {
            rank,
            token_str,
            is_control: true,
        })
        .collect();

    let file = GenFile {
        config: GenConfig {
            pattern: TEKKEN_PATTERN,
            num_vocab_tokens: tokens.len(),
            default_vocab_size: NUM_SPECIAL + tokens.len(),
            default_num_special_tokens: NUM_SPECIAL,
            version: "v7",
        },
        vocab,
        special_tokens,
        audio,
    };
    let json = serde_json::to_vec_pretty(&file).map_err(std::io::Error::other)?;
    std::fs::write(path, json)
}

/// The voices of [`generated`]'s file.
#[cfg(test)]
pub(crate) fn test_voices() -> BTreeMap<String, usize> {
    [("casual_male", 147), ("neutral_female", 67)]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect()
}

/// A generated tekken.json with `num_merges` merges in a temporary folder, and its tokenizer
/// (tests of the generator and of the tokenizer).
#[cfg(test)]
pub(crate) fn generated(
    num_merges: usize,
) -> (
    tempfile::TempDir,
    std::path::PathBuf,
    crate::tokenizers::tekken::Tekken,
) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tekken.json");
    write_test_tekken(&path, num_merges, &test_voices()).unwrap();
    let tok = crate::tokenizers::tekken::Tekken::from_file(&path).unwrap();
    (dir, path, tok)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    #[test]
    fn generated_file_layout() {
        for num_merges in [0, 1, 300, 3000] {
            let (_dir, path, tok) = generated(num_merges);
            assert_eq!(tok.vocab_size(), 1000 + 256 + num_merges);
            assert_eq!(tok.num_special_tokens(), 1000);
            assert_eq!(tok.voice_num_audio_tokens(), &test_voices());
            for (name, id) in [
                ("<unk>", 0),
                ("<s>", 1),
                ("</s>", 2),
                ("[INST]", 3),
                ("<pad>", 11),
                ("[TOOL_CONTENT]", 19),
                ("<SPECIAL_20>", 20),
                ("[AUDIO]", 24),
                ("[BEGIN_AUDIO]", 25),
                ("[OUTPUT_AUDIO]", 26),
                ("<SPECIAL_33>", 33),
                ("[TRANSCRIBE]", 34),
                ("[REPEAT_AUDIO_TEXT]", 35),
                ("[NEXT_AUDIO_TEXT]", 36),
                ("<SPECIAL_999>", 999),
            ] {
                assert_eq!(tok.special_id(name), Some(id), "{name}");
            }
            assert_eq!(tok.special_id("<SPECIAL_1000>"), None);
            let doc: Value =
                serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
            assert_eq!(doc["config"]["version"], "v7");
            assert_eq!(doc["config"]["pattern"], TEKKEN_PATTERN);
            assert_eq!(doc["vocab"].as_array().unwrap().len(), 256 + num_merges);
            assert_eq!(doc["special_tokens"].as_array().unwrap().len(), 1000);
            // The TTS prompt of the spec, built from ids looked up by name.
            let mut prompt = vec![
                tok.special_id("<s>").unwrap(),
                tok.special_id("[BEGIN_AUDIO]").unwrap(),
            ];
            prompt.extend(std::iter::repeat_n(tok.special_id("[AUDIO]").unwrap(), 3));
            prompt.push(tok.special_id("[NEXT_AUDIO_TEXT]").unwrap());
            prompt.push(tok.special_id("[REPEAT_AUDIO_TEXT]").unwrap());
            assert_eq!(prompt, vec![1, 25, 24, 24, 24, 36, 35]);
        }
    }

    #[test]
    fn generator_is_deterministic_and_learns_merges() {
        let (_d1, p1, tok) = generated(400);
        let (_d2, p2, _) = generated(400);
        assert_eq!(std::fs::read(&p1).unwrap(), std::fs::read(p2).unwrap());
        // Learned merges compress the training text well below one token per byte.
        let ids = tok.encode(TRAINING_TEXT);
        assert!(ids.len() * 2 < TRAINING_TEXT.len(), "{} ids", ids.len());
        // The ids decode back to the text through the file's own vocab.
        let doc: Value = serde_json::from_str(&std::fs::read_to_string(&p1).unwrap()).unwrap();
        let b64 = base64::engine::general_purpose::STANDARD;
        let table: Vec<Vec<u8>> = doc["vocab"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| b64.decode(e["token_bytes"].as_str().unwrap()).unwrap())
            .collect();
        let decoded: Vec<u8> = ids
            .iter()
            .flat_map(|&id| table[id as usize - tok.num_special_tokens()].clone())
            .collect();
        assert_eq!(decoded, TRAINING_TEXT.as_bytes());
    }
}
