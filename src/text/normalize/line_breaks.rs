//! Pass 4: line breaks.

use crate::text::chars::{is_closer, is_nospace_script, is_sentence_terminal_char};

/// Clause punctuation that may end a paragraph and is replaced by a full stop there.
fn is_clause_punct(c: char) -> bool {
    matches!(
        c,
        ',' | ';' | ':' | '、' | '，' | '；' | '：' | '،' | '؛' | '—' | '–' | '-'
    )
}

/// The full stop a paragraph of this script gets: `。` after CJK/kana, `।` after
/// Devanagari/Bengali, `.` otherwise.
fn full_stop_for(text: &str) -> char {
    match text.chars().rev().find(|c| c.is_alphanumeric()) {
        Some(
            '\u{3040}'..='\u{30FF}'
            | '\u{3400}'..='\u{4DBF}'
            | '\u{4E00}'..='\u{9FFF}'
            | '\u{F900}'..='\u{FAFF}'
            | '\u{20000}'..='\u{3FFFF}',
        ) => '。',
        Some('\u{0900}'..='\u{09FF}') => '।',
        _ => '.',
    }
}

/// Pass 4: each paragraph (text between blank lines) becomes one line: its lines are
/// trimmed and joined by a space (by nothing when both sides are CJK/Thai-like script).
/// Every paragraph followed by another one must end in a sentence break: when its last
/// character (before closing quotes/brackets) is not sentence-final punctuation, a
/// trailing clause mark (`,` `;` `:` `—` ...) is replaced by, or else the paragraph gets,
/// a full stop (`.`, `。` after CJK, `।` after Devanagari/Bengali). Paragraphs are then
/// joined by a space. The last paragraph is left as it is.
pub fn join_lines(text: &str) -> String {
    let mut paras: Vec<String> = Vec::new();
    let mut cur = String::new();
    for line in text.split('\n') {
        let line = line.trim_matches([' ', '\t']);
        if line.is_empty() {
            if !cur.is_empty() {
                paras.push(std::mem::take(&mut cur));
            }
            continue;
        }
        if let (Some(a), Some(b)) = (cur.chars().next_back(), line.chars().next()) {
            if !(is_nospace_script(a) && is_nospace_script(b)) {
                cur.push(' ');
            }
        }
        cur.push_str(line);
    }
    if !cur.is_empty() {
        paras.push(cur);
    }
    let n = paras.len();
    let mut out = String::with_capacity(text.len() + n);
    for (k, mut p) in paras.into_iter().enumerate() {
        if k + 1 < n {
            end_sentence(&mut p);
        }
        if !out.is_empty() {
            out.push(' ');
        }
        out.push_str(&p);
    }
    out
}

fn end_sentence(p: &mut String) {
    let core = p.trim_end_matches(is_closer);
    let Some(last) = core.chars().next_back() else {
        return;
    };
    if is_sentence_terminal_char(last) {
        return;
    }
    let stop = full_stop_for(p);
    if is_clause_punct(last) && core.len() == p.len() {
        p.truncate(p.len() - last.len_utf8());
        // "word -" / "word —": drop the space before the mark too.
        let t = p.trim_end().len();
        p.truncate(t);
    }
    p.push(stop);
}
