//! Word times from a transcript's tokens. Voxtral Realtime decodes exactly one token per
//! 80 ms of audio, `delay_tokens` behind the speech: the token decoded `i`-th (from the
//! prompt's last position, as [`Transcript::tokens`](super::transcriber::Transcript::tokens)
//! lists them) is emitted once the audio up to `(i + 1 + delay) · 80 ms` is in, and so stands
//! for the speech of `[i · 80 ms, (i + 1) · 80 ms)`. This is an approximation no reference
//! implements (docs/voxtral-realtime-spec.md, section A, `verbose_json`): a word's start is
//! its first token's start, its end is its last token's end.

use super::prompt::SpecialIds;
use crate::engine::stt::TimedText;
use crate::tokenizers::tekken::Tekken;

/// The transcript's words with their times. A word starts at a text token whose text begins
/// with white space, at the first text token after `[STREAMING_WORD]`, or at the first text
/// token; its text is its tokens decoded together (so a character split across tokens stays
/// whole), trimmed. `token_seconds` is the audio one token stands for (80 ms).
pub fn words(
    tokens: &[u32],
    tokenizer: &Tekken,
    special: &SpecialIds,
    token_seconds: f64,
) -> Vec<TimedText> {
    // Each word's first and last token index, and its tokens.
    let mut runs: Vec<(usize, usize, Vec<u32>)> = Vec::new();
    let mut word_break = true;
    for (i, &token) in tokens.iter().enumerate() {
        if (token as usize) < tokenizer.num_special_tokens() {
            word_break |= token == special.streaming_word;
            continue;
        }
        let starts_with_space = tokenizer.decode(&[token]).starts_with(char::is_whitespace);
        match runs.last_mut() {
            Some((_, last, run)) if !word_break && !starts_with_space => {
                *last = i;
                run.push(token);
            }
            _ => runs.push((i, i, vec![token])),
        }
        word_break = false;
    }
    runs.into_iter()
        .filter_map(|(first, last, tokens)| {
            let text = tokenizer.decode(&tokens).trim().to_string();
            (!text.is_empty()).then(|| TimedText {
                text,
                start: first as f64 * token_seconds,
                end: (last + 1) as f64 * token_seconds,
            })
        })
        .collect()
}

/// Seconds of audio per decoder position (80 ms).
pub fn token_seconds(streaming: &super::params::Streaming, sample_rate: u32) -> f64 {
    streaming.samples_per_token as f64 / f64::from(sample_rate)
}

#[cfg(all(test, feature = "testkit"))]
mod tests {
    use super::*;

    const PAD: u32 = 32;
    const WORD: u32 = 33;
    const EOS: u32 = 2;

    /// A byte-level Tekken (no merges): text byte `b` is token `1000 + b`.
    fn byte_tokenizer() -> Tekken {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tekken.json");
        crate::testkit::tekken::write_tekken(
            &path,
            0,
            &[(32, "[STREAMING_PAD]"), (33, "[STREAMING_WORD]")],
            &serde_json::json!({}),
        )
        .unwrap();
        Tekken::from_file(&path).unwrap()
    }

    fn special() -> SpecialIds {
        SpecialIds {
            bos: 1,
            eos: EOS,
            streaming_pad: PAD,
            streaming_word: WORD,
        }
    }

    fn bytes(text: &str) -> Vec<u32> {
        text.bytes().map(|b| 1000 + u32::from(b)).collect()
    }

    fn timed(text: &str, start: f64, end: f64) -> TimedText {
        TimedText {
            text: text.into(),
            start,
            end,
        }
    }

    #[test]
    fn words_take_their_first_and_last_tokens_times() {
        // "Hi" at tokens 1-2, a pad inside " thé" (é is two bytes, split by a pad), then
        // `[STREAMING_WORD]` before "re" with no space, and the end token.
        let mut tokens = vec![PAD];
        tokens.extend(bytes("Hi"));
        tokens.extend(bytes(" th"));
        let e_acute = bytes("é");
        tokens.push(e_acute[0]);
        tokens.push(PAD);
        tokens.push(e_acute[1]);
        tokens.extend([PAD, PAD, WORD]);
        tokens.extend(bytes("re."));
        tokens.push(EOS);
        let got = words(&tokens, &byte_tokenizer(), &special(), 0.08);
        let want = [
            timed("Hi", 0.08, 0.24),
            timed("thé", 0.24, 0.72),
            timed("re.", 0.96, 1.2),
        ];
        assert_eq!(got.len(), want.len(), "{got:?}");
        for (g, w) in got.iter().zip(&want) {
            assert_eq!(g.text, w.text);
            assert!(
                (g.start - w.start).abs() < 1e-9 && (g.end - w.end).abs() < 1e-9,
                "{g:?}"
            );
        }
    }

    #[test]
    fn a_token_is_80_ms_at_16_khz() {
        let config = crate::models::voxtral_realtime::params::Config::load(
            &crate::models::voxtral_realtime::testkit::cached_test_model(0).unwrap(),
        )
        .unwrap();
        let seconds = token_seconds(&config.streaming, config.mel.sample_rate);
        assert!((seconds - 0.08).abs() < 1e-12);
    }
}
