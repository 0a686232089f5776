//! Splitting long input into sentence-sized segments.
//!
//! [`split_segments`] cuts text into segments of at most `max_chars` characters, each
//! synthesized on its own. Segments end, in order of preference, at:
//!
//! 1. a sentence end: `.` `!` `?` `…` followed by a space, the end, or CJK/Thai text
//!    (not after a digit), `。！？｡．`,
//!    `‼ ⁇ ⁈ ⁉`, Arabic `؟` `۔`, Devanagari `।` `॥`, Armenian `։`, Ethiopic `።` `፧`,
//!    Myanmar `။`, Khmer `។`, Greek `;` (U+037E), any of these followed by closing
//!    quotes/brackets; or a blank line;
//! 2. a clause mark: `,` `;` `:` followed by a space or CJK/Thai text (not after a
//!    digit), `、，；：` and Arabic `،` `؛`
//!    (anywhere), `—` `–` `―` and ` -- ` (an en dash between digits, `1990–2000`, is
//!    not one); or a single line break;
//! 3. a space;
//! 4. for text without spaces (CJK, kana, Thai, Lao, Khmer, Myanmar, Tibetan), a
//!    grapheme-cluster boundary next to a character of such a script, never before
//!    closing punctuation or after an opening bracket.
//!
//! Greedy: each segment runs as far as `max_chars` allows and ends at the last break of
//! the best kind available in that window, so short sentences are merged and a segment
//! is only cut inside a sentence when the sentence alone is longer than `max_chars`. A
//! single word longer than `max_chars` with no break of kind 4 inside stays whole (the
//! only case where a segment exceeds `max_chars`). Every cut is a grapheme-cluster
//! boundary.
//!
//! A `.` is not a sentence end (heuristics):
//! - after an initialism with inner dots, each part one or two letters: `U.S.`, `e.g.`,
//!   `i.e.`, `a.m.`, `Ph.D.`, `z.B.`;
//! - after a single capital letter (an initial: `John F. Kennedy`);
//! - after a title that precedes a name: `Mr. Mrs. Ms. Mx. Dr. Prof. St. Mt. Ft. Rev.
//!   Fr. Sr. Sra. Srta. Dra. Gen. Col. Capt. Lt. Sgt. Maj. Adm. Gov. Sen. Rep. Hon. Pres.
//!   Supt. Messrs. Mme. Mlle. Mgr. vs. cf. ca. approx. Hr. Fw.`;
//! - after `No. Nr. Vol. p. pp. Fig. Eq. Ch. Sec. Art. Jan. Feb. ... Dec.` when a digit
//!   follows (`No. 5`, `Jan. 3`);
//! - when the next word starts with a lowercase letter (`etc. and so on`,
//!   `approx. five`, `Inc. was`);
//! - `3.14`, `example.com`: a `.` not followed by a space is never a sentence end.
//!
//! `…` / `...` followed by a lowercase word is a clause break, not a sentence end.
//! `!` and `?` always end a sentence when followed by a space.

use std::ops::Range;

use unicode_segmentation::{GraphemeCursor, UnicodeSegmentation};

use super::chars::{is_closer, is_nospace_script, is_sentence_terminal_char, is_strong_terminal};

/// Default target segment size in characters.
pub const DEFAULT_SEGMENT_CHARS: usize = 300;

/// Strength of a break, weakest first.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Level {
    Space = 0,
    Clause = 1,
    Sentence = 2,
}

#[derive(Clone, Copy, Debug)]
struct Break {
    /// Char index where the segment before the break ends (exclusive).
    at: usize,
    level: Level,
}

/// Splits `text` into segments of at most `max_chars` characters (see the module
/// documentation for the rules). Segments are trimmed, non-empty slices of `text` in
/// order; whitespace between segments is dropped, whitespace inside them kept (as is a
/// space that shares a grapheme cluster with a neighbour, such as a combining mark on it).
/// `max_chars == 0` is treated as 1.
pub fn split_segments(text: &str, max_chars: usize) -> Vec<String> {
    split_ranges(text, max_chars)
        .into_iter()
        .map(|r| text[r].to_string())
        .collect()
}

/// Like [`split_segments`], as byte ranges into `text`.
pub fn split_ranges(text: &str, max_chars: usize) -> Vec<Range<usize>> {
    let max = max_chars.max(1);
    let chars: Vec<char> = text.chars().collect();
    let n = chars.len();
    // Byte offset of every char index, plus the end.
    let mut offs: Vec<usize> = text.char_indices().map(|(b, _)| b).collect();
    offs.push(text.len());

    let Some(mut content_end) = chars
        .iter()
        .rposition(|c| !c.is_whitespace())
        .map(|p| p + 1)
    else {
        return Vec::new();
    };
    // Trailing whitespace glued to the char before it (a space after a prepend mark such as
    // U+0600 or U+070F is one grapheme cluster with it) stays, so the end is a boundary too.
    while content_end < n && !is_grapheme_boundary(text, offs[content_end]) {
        content_end += 1;
    }
    let breaks = find_breaks(text, &chars, &offs);
    // Skips whitespace-only grapheme clusters (CR LF is one), but not a space that carries
    // a combining mark (a cluster of its own), so segments always start on a grapheme
    // boundary.
    let skip_ws = |mut p: usize| {
        while p < n && chars[p].is_whitespace() {
            let mut q = p + 1;
            while q < n && !is_grapheme_boundary(text, offs[q]) {
                q += 1;
            }
            if !chars[p..q].iter().all(|c| c.is_whitespace()) {
                break;
            }
            p = q;
        }
        p
    };

    let mut ranges = Vec::new();
    let mut s = skip_ws(0);
    let mut bi = 0;
    while s < content_end {
        if content_end - s <= max {
            ranges.push(offs[s]..offs[content_end]);
            break;
        }
        let limit = s + max;
        while bi < breaks.len() && breaks[bi].at <= s {
            bi += 1;
        }
        let mut best: [Option<usize>; 3] = [None; 3];
        let mut j = bi;
        while j < breaks.len() && breaks[j].at <= limit {
            best[breaks[j].level as usize] = Some(breaks[j].at);
            j += 1;
        }
        let next_break = breaks.get(j).map_or(content_end, |b| b.at.min(content_end));
        let cut = best[Level::Sentence as usize]
            .or(best[Level::Clause as usize])
            .or(best[Level::Space as usize])
            .unwrap_or_else(|| grapheme_cut(text, &chars, &offs, s, limit, next_break));
        ranges.push(offs[s]..offs[cut]);
        s = skip_ws(cut);
    }
    ranges
}

/// How much of a text that is still being written may be spoken now: the byte offset just
/// after its last sentence end (or, with `clauses`, its last sentence end or clause mark)
/// that has the start of the next word after it. The break rules are
/// [`split_segments`]'s; a break needs the next word because some of them read it (`etc.
/// and`: no sentence end).
pub fn streamed_cut(text: &str, clauses: bool) -> Option<usize> {
    let chars: Vec<char> = text.chars().collect();
    let mut offs: Vec<usize> = text.char_indices().map(|(b, _)| b).collect();
    offs.push(text.len());
    let level = if clauses {
        Level::Clause
    } else {
        Level::Sentence
    };
    let last_word = chars.iter().rposition(|c| !c.is_whitespace())?;
    find_breaks(text, &chars, &offs)
        .into_iter()
        .filter(|b| b.level >= level && b.at <= last_word)
        .filter(|b| chars[b.at..=last_word].iter().any(|c| !c.is_whitespace()))
        .map(|b| offs[b.at])
        .next_back()
}

/// Cut for a window without any punctuation or space break: the last allowed grapheme
/// boundary (see [`nospace_boundary`]) at or before `limit`, else the first one after it,
/// else `fallback` (the next break of any kind, or the end of the text).
fn grapheme_cut(
    text: &str,
    chars: &[char],
    offs: &[usize],
    s: usize,
    limit: usize,
    fallback: usize,
) -> usize {
    let mut p = s;
    let mut last_ok = None;
    for g in text[offs[s]..offs[fallback]].graphemes(true) {
        p += g.chars().count();
        if p >= fallback {
            break;
        }
        if nospace_boundary(chars, p) {
            if p <= limit {
                last_ok = Some(p);
            } else {
                return last_ok.unwrap_or(p);
            }
        } else if p > limit && last_ok.is_some() {
            break;
        }
    }
    last_ok.unwrap_or(fallback)
}

/// A boundary between `chars[p - 1]` and `chars[p]` (already a grapheme boundary) inside
/// a run without spaces may be cut when one side is a no-space script character, the
/// right side is not closing punctuation and the left side not an opening bracket.
fn nospace_boundary(chars: &[char], p: usize) -> bool {
    let (a, b) = (chars[p - 1], chars[p]);
    (is_nospace_script(a) || is_nospace_script(b))
        && !is_closer(b)
        && !is_cjk_no_start(b)
        && !is_opener(a)
        && !b.is_whitespace()
}

/// Punctuation that must not start a line in CJK text (kinsoku).
fn is_cjk_no_start(c: char) -> bool {
    matches!(
        c,
        '、' | '。'
            | '，'
            | '．'
            | '：'
            | '；'
            | '！'
            | '？'
            | '｡'
            | '､'
            | 'ー'
            | '…'
            | '‥'
            | '・'
            | '々'
            | 'ゝ'
            | 'ゞ'
            | 'ヽ'
            | 'ヾ'
    ) || is_sentence_terminal_char(c)
        || is_clause_char(c)
}

fn is_opener(c: char) -> bool {
    matches!(
        c,
        '"' | '\''
            | '“'
            | '‘'
            | '«'
            | '‹'
            | '('
            | '['
            | '{'
            | '「'
            | '『'
            | '（'
            | '【'
            | '〔'
            | '〈'
            | '《'
            | '〖'
            | '〘'
            | '〚'
            | '｢'
            | '［'
            | '｛'
            | '¿'
            | '¡'
    )
}

/// Clause marks that are a break wherever they are (no space needed after them).
fn is_clause_char(c: char) -> bool {
    matches!(c, '、' | '，' | '；' | '：' | '､' | '،' | '؛')
}

/// Titles after which `.` never ends a sentence (compared lowercase).
const TITLES: &[&str] = &[
    "mr", "mrs", "ms", "mx", "dr", "prof", "st", "mt", "ft", "rev", "fr", "sr", "sra", "srta",
    "dra", "gen", "col", "capt", "lt", "sgt", "maj", "adm", "gov", "sen", "rep", "hon", "pres",
    "supt", "messrs", "mme", "mlle", "mgr", "vs", "cf", "ca", "approx", "hr", "fw",
];

/// Abbreviations after which `.` does not end a sentence when a digit follows.
const NUMBER_ABBREVS: &[&str] = &[
    "no", "nos", "nr", "vol", "vols", "p", "pp", "fig", "figs", "eq", "eqs", "ch", "chap", "sec",
    "art", "op", "jan", "feb", "mar", "apr", "jun", "jul", "aug", "sep", "sept", "oct", "nov",
    "dec",
];

/// The word ending right before char index `i` (back to the previous space), without
/// leading opening quotes/brackets.
fn word_before(chars: &[char], i: usize) -> &[char] {
    let start = chars[..i]
        .iter()
        .rposition(|c| c.is_whitespace())
        .map_or(0, |p| p + 1);
    let mut w = &chars[start..i];
    while let Some((&c, rest)) = w.split_first() {
        if is_opener(c) {
            w = rest;
        } else {
            break;
        }
    }
    w
}

/// First character of the next word at or after `p`: spaces and opening
/// quotes/brackets skipped.
fn next_word_char(chars: &[char], mut p: usize) -> Option<char> {
    while p < chars.len() && (chars[p].is_whitespace() || is_opener(chars[p])) {
        p += 1;
    }
    chars.get(p).copied()
}

/// Whether the `.` at char index `i` (followed by a space at `e`) is an abbreviation's.
fn is_abbreviation(chars: &[char], i: usize, e: usize) -> bool {
    let w = word_before(chars, i);
    if w.is_empty() {
        return false;
    }
    // Initialism: U.S, e.g, Ph.D (parts of one or two letters, at least two parts).
    if w.contains(&'.') {
        let s: String = w.iter().collect();
        let parts: Vec<&str> = s.split('.').collect();
        return parts.len() >= 2
            && parts.iter().all(|p| {
                !p.is_empty() && p.chars().count() <= 2 && p.chars().all(char::is_alphabetic)
            });
    }
    if w.len() == 1 && w[0].is_uppercase() {
        return true;
    }
    if w.len() > 7 || !w.iter().all(char::is_ascii_alphabetic) {
        return false;
    }
    let lower: String = w.iter().map(|c| c.to_ascii_lowercase()).collect();
    if TITLES.contains(&lower.as_str()) {
        return true;
    }
    NUMBER_ABBREVS.contains(&lower.as_str())
        && next_word_char(chars, e).is_some_and(|c| c.is_ascii_digit())
}

fn is_grapheme_boundary(text: &str, byte: usize) -> bool {
    let mut cursor = GraphemeCursor::new(byte, text.len(), true);
    cursor.is_boundary(text, 0).unwrap_or(true)
}

/// All punctuation, line and space breaks of `text`, in order, at most one per position
/// (the strongest), never at position 0, never inside a grapheme cluster.
fn find_breaks(text: &str, chars: &[char], offs: &[usize]) -> Vec<Break> {
    let n = chars.len();
    let mut breaks: Vec<Break> = Vec::with_capacity(n / 4);
    let mut push = |at: usize, level: Level| {
        if at == 0 || at >= n {
            return;
        }
        if let Some(last) = breaks.last_mut() {
            if last.at == at {
                last.level = last.level.max(level);
                return;
            }
        }
        if is_grapheme_boundary(text, offs[at]) {
            breaks.push(Break { at, level });
        }
    };
    let skip_closers = |mut e: usize| {
        while e < n && is_closer(chars[e]) {
            e += 1;
        }
        e
    };
    let ws_or_end = |e: usize| e >= n || chars[e].is_whitespace();
    // ASCII punctuation directly followed by CJK/Thai text ends a sentence or clause
    // there too (`你好!世界`), unless it follows a digit (`3.5`, `1,000`).
    let ends_word = |i: usize, e: usize| {
        ws_or_end(e) || (is_nospace_script(chars[e]) && !(i > 0 && chars[i - 1].is_ascii_digit()))
    };

    let mut i = 0;
    while i < n {
        let c = chars[i];
        if c.is_whitespace() {
            let mut j = i;
            let mut newlines = 0;
            while j < n && chars[j].is_whitespace() {
                newlines += match chars[j] {
                    '\n' => 1,
                    '\u{2029}' => 2,
                    _ => 0,
                };
                j += 1;
            }
            let level = match newlines {
                0 => Level::Space,
                1 => Level::Clause,
                _ => Level::Sentence,
            };
            push(i, level);
            i = j;
            continue;
        }
        if is_sentence_terminal_char(c) {
            let mut k = i;
            while k < n && is_sentence_terminal_char(chars[k]) {
                k += 1;
            }
            let e = skip_closers(k);
            let run = &chars[i..k];
            if run.iter().any(|c| is_strong_terminal(*c)) {
                push(e, Level::Sentence);
            } else if ends_word(i, e) {
                let dots_only = run.iter().all(|c| *c == '.');
                let ellipsis = run.contains(&'…') || (dots_only && run.len() >= 2);
                let lower_next = next_word_char(chars, e).is_some_and(char::is_lowercase);
                if ellipsis {
                    push(
                        e,
                        if lower_next {
                            Level::Clause
                        } else {
                            Level::Sentence
                        },
                    );
                } else if dots_only {
                    if !(lower_next || is_abbreviation(chars, i, e)) {
                        push(e, Level::Sentence);
                    }
                } else {
                    push(e, Level::Sentence);
                }
            }
            i = k.max(i + 1);
            continue;
        }
        if is_clause_char(c) {
            push(skip_closers(i + 1), Level::Clause);
        } else if matches!(c, ',' | ';' | ':') {
            let e = skip_closers(i + 1);
            if ends_word(i, e) {
                push(e, Level::Clause);
            }
        } else if matches!(c, '—' | '―') {
            push(i + 1, Level::Clause);
        } else if c == '–' {
            let digits = i > 0
                && chars[i - 1].is_ascii_digit()
                && chars.get(i + 1).is_some_and(char::is_ascii_digit);
            if !digits {
                push(i + 1, Level::Clause);
            }
        } else if c == '-' && chars.get(i + 1) == Some(&'-') {
            let mut k = i;
            while k < n && chars[k] == '-' {
                k += 1;
            }
            if i > 0 && chars[i - 1].is_whitespace() && ws_or_end(k) {
                push(k, Level::Clause);
            }
            i = k;
            continue;
        }
        i += 1;
    }
    breaks
}

#[cfg(test)]
mod tests {

    #[test]
    fn streamed_cut_waits_for_the_next_word() {
        assert_eq!(streamed_cut("Hello there", false), None);
        assert_eq!(
            streamed_cut("Hello there. ", false),
            None,
            "the next word decides"
        );
        assert_eq!(streamed_cut("Hello there. Wo", false), Some(12));
        assert_eq!(streamed_cut("One. Two! Thr", false), Some(9));
        assert_eq!(streamed_cut("Dr. Smith came", false), None);
        assert_eq!(streamed_cut("Pi is 3.14 and", false), None);
        assert_eq!(streamed_cut("First, second", false), None);
        assert_eq!(streamed_cut("First, second", true), Some(6));
        assert_eq!(streamed_cut("", true), None);
    }

    use super::*;

    #[test]
    fn whitespace_is_trimmed_by_grapheme_cluster() {
        // Found by the `text` fuzz target: U+070F (Syriac abbreviation mark) is a prepend
        // character, one grapheme cluster with the space after it; trimming that space cut
        // the cluster.
        let text = "ab \u{70F} ";
        assert_eq!(split_ranges(text, 10), vec![0..text.len()]);
        assert_eq!(split_segments("x\u{600} \n", 10), vec!["x\u{600} "]);
        let found = "\0\0H\u{f}\r\u{70f} e<\0H\u{f}\r\u{70f} ";
        assert_eq!(split_ranges(found, 158), vec![0..found.len()]);
        // And a segment never starts with CR LF (one cluster): it is skipped whole.
        assert_eq!(split_segments("a. \r\nb", 2), vec!["a.", "b"]);
    }

    /// Deterministic xorshift generator for the randomized tests.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        fn below(&mut self, n: usize) -> usize {
            (self.next() % n.max(1) as u64) as usize
        }
        fn pick<'a>(&mut self, xs: &[&'a str]) -> &'a str {
            xs[self.below(xs.len())]
        }
    }

    /// The text of every sentence-level break: what each sentence ends with.
    fn sentences(text: &str) -> Vec<String> {
        let chars: Vec<char> = text.chars().collect();
        let mut offs: Vec<usize> = text.char_indices().map(|(b, _)| b).collect();
        offs.push(text.len());
        let mut out = Vec::new();
        let mut start = 0;
        for b in find_breaks(text, &chars, &offs) {
            if b.level == Level::Sentence {
                out.push(text[offs[start]..offs[b.at]].trim().to_string());
                start = b.at;
            }
        }
        let rest = text[offs[start]..].trim();
        if !rest.is_empty() {
            out.push(rest.to_string());
        }
        out
    }

    fn chars(s: &str) -> usize {
        s.chars().count()
    }

    #[test]
    fn empty_and_short() {
        assert!(split_segments("", 300).is_empty());
        assert!(split_segments(" \n\t ", 300).is_empty());
        assert_eq!(split_segments("  Hello there.  ", 300), ["Hello there."]);
        assert_eq!(split_segments("Hi", 0), ["Hi"]);
        assert_eq!(DEFAULT_SEGMENT_CHARS, 300);
    }

    #[test]
    fn sentence_ends() {
        let cases: &[(&str, &[&str])] = &[
            ("One. Two! Three? Four", &["One.", "Two!", "Three?", "Four"]),
            (
                "Really?! Yes... Sure… OK",
                &["Really?!", "Yes...", "Sure…", "OK"],
            ),
            (
                "He said \"Stop.\" Then he left.",
                &["He said \"Stop.\"", "Then he left."],
            ),
            ("(A note.) Next one.", &["(A note.)", "Next one."]),
            (
                "你好。世界！真的吗？是的",
                &["你好。", "世界！", "真的吗？", "是的"],
            ),
            (
                "「はい。」と言った。次",
                &["「はい。」", "と言った。", "次"],
            ),
            ("هل أنت بخير؟ نعم۔ شكرا", &["هل أنت بخير؟", "نعم۔", "شكرا"]),
            ("मैं ठीक हूँ। धन्यवाद॥ अच्छा", &["मैं ठीक हूँ।", "धन्यवाद॥", "अच्छा"]),
            ("Para one\n\nPara two", &["Para one", "Para two"]),
        ];
        for (text, want) in cases {
            assert_eq!(sentences(text), *want, "{text:?}");
        }
    }

    #[test]
    fn no_sentence_end_inside_abbreviations_and_numbers() {
        for text in [
            "Dr. Smith met Mrs. Jones and Prof. Lee.",
            "It costs 3.14 dollars or 2.5 euros.",
            "Visit example.com or v1.2.3 today.",
            "Fruit, e.g. apples, i.e. sweet ones.",
            "The U.S. Army and the E.U. met.",
            "John F. Kennedy and J. R. R. Tolkien.",
            "See No. 5 and Fig. 3 on p. 12, from Jan. 3.",
            "We met at 3 p.m. and left at 5 a.m. sharp.",
            "Apples, pears, etc. are fruit.",
            "He waited... and waited.",
            "Mt. Everest vs. St. Helens.",
            "Z.B. bzw. usw. sind deutsch.",
        ] {
            assert_eq!(sentences(text), [text], "{text:?}");
        }
        // But a real end after a number or a non-title word still splits.
        assert_eq!(
            sentences("I was born in 1990. Then I grew."),
            ["I was born in 1990.", "Then I grew."]
        );
        assert_eq!(
            sentences("It works at Acme Inc. The end."),
            ["It works at Acme Inc.", "The end."]
        );
        assert_eq!(sentences("I love it! no way."), ["I love it!", "no way."]);
        assert_eq!(sentences("Chapter No. Then"), ["Chapter No.", "Then"]);
    }

    #[test]
    fn merges_short_sentences_up_to_max() {
        let text = "One. Two. Three. Four. Five. Six.";
        assert_eq!(split_segments(text, 300), [text]);
        assert_eq!(
            split_segments(text, 10),
            ["One. Two.", "Three.", "Four.", "Five. Six."]
        );
        assert_eq!(
            split_segments(text, 16),
            ["One. Two. Three.", "Four. Five. Six."]
        );
    }

    #[test]
    fn prefers_sentence_then_clause_then_space() {
        // Sentence end preferred over a later comma.
        let text = "Short one. Then a clause, and more words follow here";
        assert_eq!(
            split_segments(text, 30),
            ["Short one.", "Then a clause,", "and more words follow here"]
        );
        // A long sentence splits at clause marks.
        let text = "First part of it, second part here; third: and the last words";
        assert_eq!(
            split_segments(text, 25),
            [
                "First part of it,",
                "second part here; third:",
                "and the last words"
            ]
        );
        // Dashes are clause marks; an en dash in a range is not.
        let text = "It was late — very late – in 1990–2000 indeed";
        assert_eq!(
            split_segments(text, 16),
            ["It was late —", "very late –", "in 1990–2000", "indeed"]
        );
        // No punctuation: spaces.
        let text = "alpha beta gamma delta epsilon zeta eta theta";
        let segs = split_segments(text, 12);
        assert_eq!(
            segs,
            ["alpha beta", "gamma delta", "epsilon zeta", "eta theta"]
        );
        // CJK clause marks.
        assert_eq!(
            split_segments("我们今天，去公园玩、然后回家", 6),
            ["我们今天，", "去公园玩、", "然后回家"]
        );
        // Arabic comma.
        assert_eq!(
            split_segments("أنا هنا، وأنت هناك، ونحن معا", 10),
            ["أنا هنا،", "وأنت هناك،", "ونحن معا"]
        );
        // A clause tail merges with the next sentence.
        let text = "A fairly long first clause, tail. Next.";
        assert_eq!(
            split_segments(text, 30),
            ["A fairly long first clause,", "tail. Next."]
        );
    }

    #[test]
    fn long_words_stay_whole() {
        let word = "a".repeat(500);
        let text = format!("Start {word} end. More");
        assert_eq!(
            split_segments(&text, 100),
            ["Start", word.as_str(), "end. More"]
        );
        let url = "https://example.com/".to_string() + &"x".repeat(300);
        assert_eq!(split_segments(&url, 50), [url.as_str()]);
    }

    #[test]
    fn no_space_scripts_split_at_graphemes() {
        let text = "漢字".repeat(400);
        let segs = split_segments(&text, 100);
        assert_eq!(segs.len(), 8);
        assert!(segs.iter().all(|s| chars(s) == 100));
        assert_eq!(segs.concat(), text);

        // Thai.
        let text = "สวัสดีครับ".repeat(100);
        let segs = split_segments(&text, 64);
        assert!(segs.iter().all(|s| chars(s) <= 64));
        assert_eq!(segs.concat(), text);
        // No segment starts with a combining mark.
        assert!(segs.iter().all(|s| s.chars().next().is_some_and(
            |c| !matches!(c, '\u{0E31}' | '\u{0E34}'..='\u{0E3A}' | '\u{0E47}'..='\u{0E4E}')
        )));

        // Combining dakuten (か + U+3099) is never separated from its base.
        let text = "か\u{3099}き".repeat(300);
        for seg in split_segments(&text, 7) {
            assert!(!seg.starts_with('\u{3099}'), "{seg:?}");
            assert!(chars(&seg) <= 7);
        }

        // Latin words inside CJK stay whole; CJK punctuation never starts a segment.
        let text = "我喜欢Python编程，也喜欢Rust语言。".repeat(50);
        let segs = split_segments(&text, 9);
        for seg in &segs {
            assert!(!seg.starts_with(['，', '。']), "{seg:?}");
            for w in ["Python", "Rust"] {
                let first = &w[..1];
                if seg.ends_with(first) || seg.starts_with(&w[1..2]) {
                    panic!("{w} split in {segs:?}");
                }
            }
        }
        assert_eq!(segs.concat(), text);

        // Emoji ZWJ sequences inside CJK are not cut.
        let text = "好👨\u{200D}👩\u{200D}👧".repeat(200);
        for seg in split_segments(&text, 5) {
            assert!(
                !seg.starts_with('\u{200D}') && !seg.ends_with('\u{200D}'),
                "{seg:?}"
            );
        }
    }

    fn random_text(rng: &mut Rng, words: usize, latin_only: bool) -> String {
        const LATIN: &[&str] = &[
            "the",
            "a",
            "voice",
            "model",
            "speaks",
            "Dr.",
            "U.S.",
            "e.g.",
            "3.14",
            "example.com",
            "hello,",
            "world.",
            "why?",
            "yes!",
            "wait...",
            "(aside)",
            "\"quoted.\"",
            "—",
            "–",
            "--",
            "x;",
            "y:",
            "ok…",
            "Mr.",
            "No.",
            "5",
            "incomprehensibilities",
            "well-known",
            "it's",
            "supercalifragilisticexpialidocious",
        ];
        const OTHER: &[&str] = &[
            "你好。",
            "世界",
            "我们今天去公园，",
            "こんにちは、",
            "「はい。」",
            "สวัสดีครับ",
            "مرحبا،",
            "بالعالم؟",
            "नमस्ते।",
            "धन्यवाद॥",
            "👨\u{200D}👩\u{200D}👧",
            "e\u{301}",
            "Привет.",
            "한국어",
            "か\u{3099}",
            "漢字漢字漢字漢字漢字漢字",
        ];
        const SPACES: &[&str] = &[" ", " ", " ", " ", "  ", "\n", "\n\n", "\t"];
        let mut s = String::new();
        for _ in 0..words {
            let w = if latin_only || rng.below(3) > 0 {
                rng.pick(LATIN)
            } else {
                rng.pick(OTHER)
            };
            s.push_str(w);
            if rng.below(8) > 0 || latin_only {
                s.push_str(rng.pick(SPACES));
            }
        }
        s
    }

    fn is_break_punct(c: char) -> bool {
        is_sentence_terminal_char(c)
            || is_clause_char(c)
            || is_closer(c)
            || matches!(c, ',' | ';' | ':' | '—' | '–' | '―' | '-')
    }

    fn check(text: &str, max: usize) -> Vec<String> {
        let ranges = split_ranges(text, max);
        let segs = split_segments(text, max);
        assert_eq!(ranges.len(), segs.len());
        let mut prev_end = 0;
        for (r, seg) in ranges.iter().zip(&segs) {
            assert!(r.start >= prev_end && r.start < r.end, "{ranges:?}");
            prev_end = r.end;
            assert!(!seg.is_empty());
            assert!(
                seg.trim_end() == seg || !is_grapheme_boundary(seg, seg.trim_end().len()),
                "{seg:?}"
            );
            assert!(
                seg.trim_start() == seg || !is_grapheme_boundary(seg, 1),
                "{seg:?}"
            );
            // Only whitespace between segments.
            // Over max only if the segment is a single unbreakable word.
            if chars(seg) > max.max(1) {
                // (Whitespace glued to a neighbour in one grapheme cluster is no break.)
                let breakable = seg
                    .char_indices()
                    .any(|(b, c)| b > 0 && c.is_whitespace() && is_grapheme_boundary(seg, b));
                assert!(!breakable, "{seg:?} over {max}");
            }
            // Cuts are grapheme boundaries, and inside a word only after punctuation or
            // next to a no-space script.
            for at in [r.start, r.end] {
                assert!(
                    is_grapheme_boundary(text, at),
                    "{at} {:?} | {:?}",
                    &text[..at].chars().rev().take(3).collect::<String>(),
                    &text[at..].chars().take(3).collect::<String>()
                );
                let before = text[..at].chars().next_back();
                let after = text[at..].chars().next();
                if let (Some(a), Some(b)) = (before, after) {
                    if !a.is_whitespace() && !b.is_whitespace() {
                        assert!(
                            is_break_punct(a) || is_nospace_script(a) || is_nospace_script(b),
                            "cut inside a word: {a:?}|{b:?} in {text:?}"
                        );
                    }
                }
            }
        }
        let gaps_ok = {
            let mut last = 0;
            ranges.iter().all(|r| {
                let ok = text[last..r.start].trim().is_empty();
                last = r.end;
                ok
            }) && text[last..].trim().is_empty()
        };
        assert!(gaps_ok, "text lost between segments");
        // Concatenation reproduces the text without its whitespace.
        let strip = |s: &str| s.chars().filter(|c| !c.is_whitespace()).collect::<String>();
        assert_eq!(strip(&segs.concat()), strip(text));
        segs
    }

    #[test]
    fn property_words_in_order_latin() {
        let mut rng = Rng(0xDEAD_BEEF_CAFE_F00D);
        for _ in 0..2000 {
            let words = rng.below(120);
            let text = random_text(&mut rng, words, true);
            let max = 1 + rng.below(200);
            let segs = check(&text, max);
            let joined = segs.join(" ");
            assert_eq!(
                joined.split_whitespace().collect::<Vec<_>>(),
                text.split_whitespace().collect::<Vec<_>>(),
                "max {max}"
            );
        }
    }

    #[test]
    fn property_mixed_scripts() {
        let mut rng = Rng(0x1234_5678_9ABC_DEF1);
        for _ in 0..2000 {
            let words = rng.below(150);
            let text = random_text(&mut rng, words, false);
            let max = 1 + rng.below(120);
            check(&text, max);
        }
    }

    #[test]
    fn never_panics_on_random_bytes() {
        let mut rng = Rng(99);
        for _ in 0..2000 {
            let len = rng.below(600);
            let bytes: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
            let text = String::from_utf8_lossy(&bytes);
            check(&text, rng.below(80));
        }
    }

    #[test]
    fn large_input() {
        let mut rng = Rng(5);
        let text = random_text(&mut rng, 20_000, false);
        assert!(text.chars().count() > 100_000);
        let segs = check(&text, DEFAULT_SEGMENT_CHARS);
        assert!(segs.len() > 100_000 / DEFAULT_SEGMENT_CHARS);
        // Pathological inputs stay linear.
        for text in [
            "a".repeat(100_000),
            "。".repeat(100_000),
            ". ".repeat(50_000),
            "好".repeat(100_000),
            " ".repeat(100_000),
        ] {
            let t = std::time::Instant::now();
            check(&text, DEFAULT_SEGMENT_CHARS);
            assert!(t.elapsed().as_secs_f64() < 2.0);
        }
    }
}
