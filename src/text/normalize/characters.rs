//! Pass 1: characters.

/// What [`clean_chars`] does with one character when `invisible` is on.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Invisible {
    Keep,
    Remove,
    /// ZWNJ / ZWJ: kept between two non-ASCII, non-space characters.
    Joiner,
    /// Emoji tag characters U+E0020..=U+E007F: kept right after U+1F3F4 or another tag.
    Tag,
}

pub(super) fn classify_invisible(c: char) -> Invisible {
    match c {
        '\u{200C}' | '\u{200D}' => Invisible::Joiner,
        '\u{E0020}'..='\u{E007F}' => Invisible::Tag,
        '\u{00AD}'                       // soft hyphen
        | '\u{034F}'                     // combining grapheme joiner
        | '\u{061C}'                     // Arabic letter mark
        | '\u{180E}'                     // Mongolian vowel separator
        | '\u{200B}'                     // zero-width space
        | '\u{200E}' | '\u{200F}'        // LRM, RLM
        | '\u{202A}'..='\u{202E}'        // bidi embeddings and overrides
        | '\u{2060}'..='\u{2064}'        // word joiner, invisible math operators
        | '\u{2066}'..='\u{206F}'        // bidi isolates, deprecated format characters
        | '\u{3164}' | '\u{FFA0}'        // Hangul fillers
        | '\u{FEFF}'                     // BOM / zero-width no-break space
        | '\u{FFF9}'..='\u{FFFB}'        // interlinear annotation
        | '\u{FFFD}'                     // replacement character (invalid UTF-8)
        | '\u{FDD0}'..='\u{FDEF}'        // noncharacters
        | '\u{1BCA0}'..='\u{1BCA3}'      // shorthand format controls
        | '\u{1D173}'..='\u{1D17A}'      // musical symbol format controls
        | '\u{E0001}' => Invisible::Remove, // language tag
        c if (c as u32) & 0xFFFE == 0xFFFE => Invisible::Remove, // U+xFFFE, U+xFFFF
        _ => Invisible::Keep,
    }
}

/// Unicode space separators (Zs) other than U+0020.
pub(super) fn is_unicode_space(c: char) -> bool {
    matches!(
        c,
        '\u{00A0}' | '\u{1680}' | '\u{2000}'..='\u{200A}' | '\u{202F}' | '\u{205F}' | '\u{3000}'
    )
}

/// Pass 1. Always: CR LF, CR, NEL, VT, FF and U+2028 become `\n`, U+2029 (paragraph
/// separator) becomes a blank line, tab and Unicode spaces (NBSP, U+2000..U+200A, U+3000,
/// ...) become `' '`, and every other control character (C0, DEL, C1, NUL included) is
/// removed. With `invisible`, also the invisible characters listed on
/// [`NormalizeOptions::invisible`](super::NormalizeOptions::invisible) (details in
/// `docs/text.md`).
pub fn clean_chars(text: &str, invisible: bool) -> String {
    let mut out = String::with_capacity(text.len());
    let mut prev: Option<char> = None;
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        let emit = match c {
            '\r' => {
                if chars.peek() == Some(&'\n') {
                    chars.next();
                }
                '\n'
            }
            '\n' | '\u{0B}' | '\u{0C}' | '\u{85}' | '\u{2028}' => '\n',
            '\u{2029}' => {
                out.push('\n');
                '\n'
            }
            '\t' => ' ',
            c if c.is_control() => continue,
            c if is_unicode_space(c) => ' ',
            c if invisible => match classify_invisible(c) {
                Invisible::Keep => c,
                Invisible::Remove => continue,
                Invisible::Joiner => {
                    let joinable = |x: Option<char>| {
                        x.is_some_and(|x| {
                            !x.is_ascii()
                                && !x.is_whitespace()
                                && !matches!(x, '\u{200C}' | '\u{200D}')
                        })
                    };
                    if joinable(prev) && joinable(chars.peek().copied()) {
                        c
                    } else {
                        continue;
                    }
                }
                Invisible::Tag => {
                    if matches!(prev, Some('\u{1F3F4}' | '\u{E0020}'..='\u{E007E}')) {
                        c
                    } else {
                        continue;
                    }
                }
            },
            c => c,
        };
        out.push(emit);
        prev = Some(emit);
    }
    out
}
