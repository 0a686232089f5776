//! `text::normalize` and `text::split_ranges` / `split_segments` on arbitrary UTF-8.
//!
//! Input: byte 0 selects the normalization passes (low 4 bits) and byte 1 the segment size
//! (`max_chars` 0..=255); the rest is the text. Besides "never panics", checks what
//! `split_segments` documents (src/text/split.rs, docs/text.md): segments are non-empty,
//! in order, non-overlapping slices of the text that start and end on grapheme-cluster
//! boundaries, only whitespace lies between them (so they hold every word in order), and
//! none starts or ends with a grapheme cluster of whitespace only; `prepare_segments` is
//! `normalize` then `split_segments`; and
//! the normalizer leaves no control character other than `\n`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use unicode_segmentation::{GraphemeCursor, UnicodeSegmentation};
use voxtral_tts::text::{
    normalize, prepare_segments, split_ranges, split_segments, NormalizeOptions,
};

fn is_boundary(text: &str, at: usize) -> bool {
    GraphemeCursor::new(at, text.len(), true)
        .is_boundary(text, 0)
        .unwrap_or(false)
}

fn check_split(text: &str, max_chars: usize) {
    let ranges = split_ranges(text, max_chars);
    let mut prev_end = 0;
    for r in &ranges {
        assert!(r.start < r.end, "empty segment {r:?} in {text:?}");
        assert!(prev_end <= r.start, "segments out of order in {text:?}");
        let gap = &text[prev_end..r.start];
        assert!(
            gap.chars().all(char::is_whitespace),
            "non-whitespace {gap:?} dropped between segments of {text:?}"
        );
        assert!(
            is_boundary(text, r.start) && is_boundary(text, r.end),
            "cut {r:?} inside a grapheme cluster of {text:?}"
        );
        let seg = &text[r.clone()];
        // Trimmed, except for whitespace sharing a grapheme cluster with a non-space.
        let blank = |g: &str| g.chars().all(char::is_whitespace);
        assert!(
            !blank(seg.graphemes(true).next().unwrap())
                && !blank(seg.graphemes(true).next_back().unwrap()),
            "segment {seg:?} not trimmed (max_chars {max_chars})"
        );
        prev_end = r.end;
    }
    let tail = &text[prev_end..];
    assert!(
        tail.chars().all(char::is_whitespace),
        "non-whitespace {tail:?} dropped at the end of {text:?}"
    );
    let segments = split_segments(text, max_chars);
    assert_eq!(segments.len(), ranges.len());
    for (s, r) in segments.iter().zip(&ranges) {
        assert_eq!(s.as_str(), &text[r.clone()]);
    }
}

fuzz_target!(|data: &[u8]| {
    if data.len() < 2 {
        return;
    }
    let Ok(text) = std::str::from_utf8(&data[2..]) else {
        return;
    };
    let flags = data[0];
    let opts = NormalizeOptions {
        invisible: flags & 1 != 0,
        line_breaks: flags & 2 != 0,
        markdown: flags & 4 != 0,
        urls: flags & 8 != 0,
    };
    let max_chars = data[1] as usize;

    let clean = normalize(text, &opts);
    assert!(
        !clean.chars().any(|c| c.is_control() && c != '\n'),
        "control character left in {clean:?}"
    );
    check_split(text, max_chars);
    check_split(&clean, max_chars);
    assert_eq!(
        prepare_segments(text, &opts, max_chars),
        split_segments(&clean, max_chars)
    );
});
