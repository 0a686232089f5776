//! Text front-end: what happens to the request's `input` before tokenization.
//!
//! - [`normalize()`]: invisible characters, line breaks, markdown and URLs, each
//!   switchable through [`NormalizeOptions`];
//! - [`split_segments`]: long input cut into sentence-sized segments, each synthesized on
//!   its own and joined with [`crate::audio::join::crossfade_join`] /
//!   [`crate::audio::join::SegmentJoiner`].
//!
//! The rules, with examples, are in `docs/text.md`. Both functions are linear in the
//! input, never panic, and have no length limit of their own: the request size cap is
//! enforced by the server, and raising it needs nothing here.

mod chars;
pub mod normalize;
pub mod split;
pub mod subtitles;

pub use normalize::{normalize, NormalizeOptions};
pub use split::{split_ranges, split_segments, streamed_cut, DEFAULT_SEGMENT_CHARS};

/// [`normalize()`] then [`split_segments`]: the segments to synthesize for `text`.
pub fn prepare_segments(text: &str, opts: &NormalizeOptions, max_chars: usize) -> Vec<String> {
    split_segments(&normalize(text, opts), max_chars)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "## Chapter\n\nDr. Smith arrived at 3 p.m. with **two** bags, e.g. a red one and a *blue* one. \
        He said: \"Look at https://example.com/a/b?c=1 now!\" Then he left\u{200B}.\n\n\
        - First item with `code`\n- Second [link](https://example.org/x)\n\n\
        | A | B |\n|---|---|\n| 1 | 2 |\n\n\
        这是一个很长的中文句子，用来测试分句功能。日本語の文も入れます。\n\
        مرحبا بالعالم؟ नमस्ते दुनिया। Emoji 👨\u{200D}👩\u{200D}👧 too &amp; more.\n\n";

    #[test]
    fn prepare_segments_end_to_end() {
        let segs = prepare_segments(SAMPLE, &NormalizeOptions::default(), 80);
        assert!(segs.iter().all(|s| s.chars().count() <= 80));
        assert_eq!(segs[0], "Chapter.");
        assert!(segs.iter().any(|s| s.contains("example.com now!")));
        assert!(!segs
            .iter()
            .any(|s| s.contains('*') || s.contains('|') || s.contains("https")));
    }
}
