//! Text normalization before tokenization.
//!
//! [`normalize`] runs up to five passes, in this order (each one documented on its
//! function and, with examples, in `docs/text.md`):
//!
//! 1. characters ([`clean_chars`]): always; line separators become `\n`, control
//!    characters go, Unicode spaces become `' '`; with [`NormalizeOptions::invisible`]
//!    also zero-width, bidi and other invisible format characters;
//! 2. markdown ([`NormalizeOptions::markdown`]): markup is removed, its text kept;
//! 3. URLs ([`NormalizeOptions::urls`]): a bare URL becomes its host name;
//! 4. line breaks ([`NormalizeOptions::line_breaks`]): a single newline becomes a
//!    space, a blank line a sentence break;
//! 5. spaces: always; runs of spaces collapse to one, the ends are trimmed.
//!
//! Every pass is linear in the input (no backtracking regex, no quadratic scans), works
//! on any `&str` and never panics.

mod characters;
mod line_breaks;
mod markdown;
mod spaces;
#[cfg(test)]
mod tests;
mod urls;

pub use characters::clean_chars;
pub use line_breaks::join_lines;
pub use markdown::strip_markdown;
pub use spaces::collapse_spaces;
pub use urls::speak_urls;

/// Which optional normalization passes [`normalize`] runs. All on by default.
///
/// Control characters, line-separator canonicalization and space collapsing are not
/// optional: they run whatever these flags say.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Deserialize, serde::Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct NormalizeOptions {
    /// Remove invisible format characters: zero-width space, BOM, bidi controls, soft
    /// hyphen, word joiner, stray emoji tag characters, U+FFFD, noncharacters; keep
    /// ZWJ/ZWNJ only between two non-ASCII characters.
    pub invisible: bool,
    /// Single newline -> space; blank line -> sentence break (terminal punctuation is
    /// added to the paragraph before it when missing).
    pub line_breaks: bool,
    /// Strip markdown and HTML markup, keeping the text it marks up.
    pub markdown: bool,
    /// Replace bare URLs (`http(s)://`, `ftp://`, `www.`) by their host name.
    pub urls: bool,
}

impl Default for NormalizeOptions {
    fn default() -> Self {
        Self::ALL
    }
}

impl NormalizeOptions {
    /// Every pass on (the default).
    pub const ALL: Self = Self {
        invisible: true,
        line_breaks: true,
        markdown: true,
        urls: true,
    };
    /// Every optional pass off: only control characters, line separators and spaces are
    /// normalized.
    pub const NONE: Self = Self {
        invisible: false,
        line_breaks: false,
        markdown: false,
        urls: false,
    };
}

/// Normalizes `text` for speech with the passes selected in `opts` (see the module
/// documentation and `docs/text.md`).
pub fn normalize(text: &str, opts: &NormalizeOptions) -> String {
    let mut s = clean_chars(text, opts.invisible);
    if opts.markdown {
        s = strip_markdown(&s);
    }
    if opts.urls {
        s = speak_urls(&s);
    }
    if opts.line_breaks {
        s = join_lines(&s);
    }
    collapse_spaces(&s)
}
