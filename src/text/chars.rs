//! Character classes the normalizer and the splitter both ask about.

/// Closing quotes and brackets that may follow sentence-final punctuation.
pub(crate) fn is_closer(c: char) -> bool {
    matches!(
        c,
        '"' | '\''
            | '”'
            | '’'
            | '»'
            | '›'
            | ')'
            | ']'
            | '}'
            | '」'
            | '』'
            | '）'
            | '】'
            | '〕'
            | '〉'
            | '》'
            | '〗'
            | '〙'
            | '〛'
            | '｣'
            | '＂'
            | '＇'
            | '］'
            | '｝'
    )
}

/// Scripts written without spaces between words (CJK ideographs, kana, Thai, Lao,
/// Khmer, Myanmar, Tibetan) and CJK punctuation / fullwidth forms.
pub(crate) fn is_nospace_script(c: char) -> bool {
    matches!(c,
        '\u{0E00}'..='\u{0EFF}'      // Thai, Lao
        | '\u{0F00}'..='\u{0FFF}'    // Tibetan
        | '\u{1000}'..='\u{109F}'    // Myanmar
        | '\u{1780}'..='\u{17FF}'    // Khmer
        | '\u{2E80}'..='\u{2FDF}'    // CJK radicals
        | '\u{3000}'..='\u{30FF}'    // CJK punctuation, Hiragana, Katakana
        | '\u{3100}'..='\u{312F}'    // Bopomofo
        | '\u{31F0}'..='\u{31FF}'    // Katakana extensions
        | '\u{3400}'..='\u{4DBF}'    // CJK extension A
        | '\u{4E00}'..='\u{9FFF}'    // CJK unified ideographs
        | '\u{F900}'..='\u{FAFF}'    // CJK compatibility ideographs
        | '\u{FE30}'..='\u{FE4F}'    // CJK compatibility forms
        | '\u{FF00}'..='\u{FFEF}'    // halfwidth and fullwidth forms
        | '\u{20000}'..='\u{3FFFF}' // CJK extensions B..
    )
}

/// Terminators that end a sentence only when followed by a space or the end.
fn is_weak_terminal(c: char) -> bool {
    matches!(c, '.' | '!' | '?' | '…')
}

/// Terminators that end a sentence wherever they are.
pub(crate) fn is_strong_terminal(c: char) -> bool {
    matches!(
        c,
        '。' | '！'
            | '？'
            | '｡'
            | '．'
            | '‼'
            | '⁇'
            | '⁈'
            | '⁉'
            | '؟'
            | '۔'
            | '।'
            | '॥'
            | '։'
            | '።'
            | '፧'
            | '။'
            | '។'
            | '\u{037E}'
    )
}

/// Sentence-final punctuation: where the splitter may end a sentence (the normalizer asks too).
pub(crate) fn is_sentence_terminal_char(c: char) -> bool {
    is_weak_terminal(c) || is_strong_terminal(c)
}
