//! Python's view of characters, as coqui's cleaners see them: `re`'s `\w`, `\d` and `\s` in a
//! str pattern, `str.strip()` and `str.lower()`, on CPython 3.11 (Unicode 14.0.0). Rust's own
//! classes differ (`char::is_alphanumeric` counts combining vowel signs, `char::is_whitespace`
//! leaves out U+001C..U+001F, and the standard library lowercases letters Unicode added
//! after 14.0), and a different class moves a `\b` and so changes the text.

use super::python_chars_table::{DECIMAL, WORD};

fn in_ranges(ranges: &[(u32, u32)], c: char) -> bool {
    let code = c as u32;
    ranges
        .binary_search_by(|&(start, end)| {
            if end < code {
                std::cmp::Ordering::Less
            } else if start > code {
                std::cmp::Ordering::Greater
            } else {
                std::cmp::Ordering::Equal
            }
        })
        .is_ok()
}

/// `re`'s `\w`: `str.isalnum()` or `_`.
pub fn is_word(c: char) -> bool {
    in_ranges(WORD, c)
}

/// `re`'s `\d`: a decimal digit of any script (Nd).
pub fn is_decimal(c: char) -> bool {
    in_ranges(DECIMAL, c)
}

/// `re`'s `\s` and `str.isspace()`: Unicode's White_Space plus U+001C..U+001F, which
/// Python counts as separators.
pub fn is_space(c: char) -> bool {
    c.is_whitespace() || ('\u{1C}'..='\u{1F}').contains(&c)
}

/// `str.strip()` with no argument.
pub fn strip(text: &str) -> &str {
    text.trim_matches(is_space)
}

/// Letters whose lowercase Unicode added after 14.0: Python 3.11 leaves them as they are.
fn caseless_in_python(c: char) -> bool {
    matches!(
        c as u32,
        0x1C89 | 0xA7CB | 0xA7CC | 0xA7CE | 0xA7D2 | 0xA7D4 | 0xA7DA | 0xA7DC
            | 0x10D50..=0x10D65
            | 0x16EA0..=0x16EB8
    )
}

/// `str.lower()`: full lowercase mappings ("İ" becomes "i̇") and the final-sigma rule, which
/// Rust's `str::to_lowercase` applies the same way.
pub fn lower(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for piece in text.split_inclusive(caseless_in_python) {
        match piece.char_indices().last() {
            Some((at, last)) if caseless_in_python(last) => {
                out.push_str(&piece[..at].to_lowercase());
                out.push(last);
            }
            _ => out.push_str(&piece.to_lowercase()),
        }
    }
    out
}

/// `re.sub(r"\s+", " ", text).strip()`: coqui's `collapse_whitespace`.
pub fn collapse_whitespace(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut in_space = false;
    for c in text.chars() {
        if is_space(c) {
            in_space = true;
        } else {
            if in_space && !out.is_empty() {
                out.push(' ');
            }
            in_space = false;
            out.push(c);
        }
    }
    out
}

/// Whether `re`'s `\b` holds between `before` and `after` (None: the text's edge).
pub fn is_boundary(before: Option<char>, after: Option<char>) -> bool {
    before.is_some_and(is_word) != after.is_some_and(is_word)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_follow_python_not_rust() {
        // A Devanagari vowel sign is alphabetic to Rust, not alphanumeric to Python.
        assert!('\u{93F}'.is_alphanumeric() && !is_word('\u{93F}'));
        assert!(is_word('²') && is_word('_') && !is_word('-'));
        assert!(is_decimal('٣') && !is_decimal('²'));
        assert!(is_space('\u{1F}') && !'\u{1F}'.is_whitespace());
        assert_eq!(strip("\u{1C} a b\u{A0}"), "a b");
        assert_eq!(collapse_whitespace(" a \t\n b  "), "a b");
    }

    #[test]
    fn lowercase_as_python() {
        assert_eq!(lower("İSTANBUL ΟΔΟΣ"), "i\u{307}stanbul οδο\u{3C2}");
        assert_eq!(lower("ΣΑΣ Σ"), "σα\u{3C2} σ");
        assert_eq!(lower("A\u{A7CB}B"), "a\u{A7CB}b");
    }
}
