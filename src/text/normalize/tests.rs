//! The passes together, through [`normalize`].

use super::characters::{classify_invisible, Invisible};
use super::*;

fn norm(s: &str) -> String {
    normalize(s, &NormalizeOptions::default())
}

fn only(f: impl FnOnce(&mut NormalizeOptions)) -> NormalizeOptions {
    let mut o = NormalizeOptions::NONE;
    f(&mut o);
    o
}

/// Deterministic xorshift generator for the randomized tests.
pub(crate) struct Rng(pub u64);
impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
    pub fn pick<'a>(&mut self, xs: &[&'a str]) -> &'a str {
        xs[self.below(xs.len())]
    }
}

#[test]
fn defaults_and_serde() {
    assert_eq!(NormalizeOptions::default(), NormalizeOptions::ALL);
    let o: NormalizeOptions = serde_json::from_str(r#"{"markdown": false}"#).unwrap();
    assert_eq!(
        o,
        NormalizeOptions {
            markdown: false,
            ..NormalizeOptions::ALL
        }
    );
    assert!(serde_json::from_str::<NormalizeOptions>(r#"{"nope": true}"#).is_err());
}

#[test]
fn plain_text_is_unchanged() {
    for s in [
        "Hello, world! How are you today?",
        "Prix : 5 € — «\u{a0}bien\u{a0}» ?",
        "你好，世界。今天天气很好！",
        "مرحبا بالعالم؟ كيف حالك۔",
        "नमस्ते दुनिया। आप कैसे हैं॥",
        "5 * 3 = 15, and 2*3*4 = 24; a_b_c and snake_case_name stay.",
        "Use Vec<T> when a < b and c > d.",
        "AT&T costs $5 & more.",
        "I'm 100% sure it's fine_ish.",
        "The ~5 km walk (about 1 h).",
    ] {
        let want = s.replace('\u{a0}', " ");
        assert_eq!(norm(s), want, "{s:?}");
    }
}

#[test]
fn control_characters_always_removed() {
    let s = "a\u{0}b\u{7}c\u{1b}[31md\u{7f}e\u{80}f\u{9f}g";
    assert_eq!(normalize(s, &NormalizeOptions::NONE), "abc[31mdefg");
    assert_eq!(norm(s), "abc[31mdefg");
    assert_eq!(
        normalize("a\tb\r\nc\rd\u{85}e", &NormalizeOptions::NONE),
        "a b\nc\nd\ne"
    );
    assert_eq!(
        normalize("a\u{2028}b\u{2029}c", &NormalizeOptions::NONE),
        "a\nb\n\nc"
    );
    assert_eq!(
        normalize("a\u{a0}b\u{3000}c\u{2009}d", &NormalizeOptions::NONE),
        "a b c d"
    );
}

#[test]
fn invisible_characters() {
    let o = only(|o| o.invisible = true);
    let cases = [
        ("zero\u{200B}width", "zerowidth"),
        ("\u{FEFF}BOM at start", "BOM at start"),
        ("co\u{AD}operate", "cooperate"),
        (
            "\u{202E}reversed\u{202C} \u{2067}isolate\u{2069}",
            "reversed isolate",
        ),
        ("a\u{200E}b\u{200F}c\u{061C}d", "abcd"),
        ("word\u{2060}joiner", "wordjoiner"),
        ("bad \u{FFFD}utf8", "bad utf8"),
        ("x\u{FFFE}y\u{1FFFF}z", "xyz"),
        // ZWJ / ZWNJ between two ASCII characters or at a space: removed.
        ("a\u{200D}b a\u{200C}b \u{200D}x", "ab ab x"),
        // Persian ZWNJ (می‌خواهم) and Devanagari ZWJ/ZWNJ: kept.
        ("می\u{200C}خواهم", "می\u{200C}خواهم"),
        ("क्\u{200D}ष", "क्\u{200D}ष"),
        ("क्\u{200C}ष", "क्\u{200C}ष"),
        // Emoji ZWJ sequence, skin tone, variation selector: kept.
        (
            "👨\u{200D}👩\u{200D}👧 👍🏽 ❤\u{FE0F}",
            "👨\u{200D}👩\u{200D}👧 👍🏽 ❤\u{FE0F}",
        ),
        // Flag of England (tag sequence): kept; stray tag characters: removed.
        (
            "\u{1F3F4}\u{E0067}\u{E0062}\u{E0065}\u{E006E}\u{E0067}\u{E007F}",
            "\u{1F3F4}\u{E0067}\u{E0062}\u{E0065}\u{E006E}\u{E0067}\u{E007F}",
        ),
        ("hid\u{E0068}\u{E0069}den", "hidden"),
        // Arabic number sign (visible format character): kept.
        ("\u{0600}123", "\u{0600}123"),
        // Doubled joiners collapse to one.
        ("می\u{200C}\u{200C}خواهم", "می\u{200C}خواهم"),
    ];
    for (input, want) in cases {
        assert_eq!(normalize(input, &o), want, "{input:?}");
    }
    // Off: format characters stay.
    assert_eq!(
        normalize("a\u{200B}b\u{AD}c", &NormalizeOptions::NONE),
        "a\u{200B}b\u{AD}c"
    );
}

#[test]
fn line_breaks() {
    let o = only(|o| o.line_breaks = true);
    let cases = [
        ("Hello\nworld", "Hello world"),
        ("Hello  \n   world\r\nagain", "Hello world again"),
        ("Title\n\nBody text", "Title. Body text"),
        ("One.\n\n\n\nTwo", "One. Two"),
        ("Really?\n\nYes!\n\nOK", "Really? Yes! OK"),
        ("Ingredients:\n\nEggs", "Ingredients. Eggs"),
        ("First,\n\nsecond", "First. second"),
        ("He said \"hi.\"\n\nThen left", "He said \"hi.\" Then left"),
        ("(see above)\n\nNext", "(see above). Next"),
        ("Last paragraph has no stop", "Last paragraph has no stop"),
        ("a\u{2029}b", "a. b"),
        // CJK: no space when joining lines, 。 as the added stop.
        ("我们今天\n去公园", "我们今天去公园"),
        ("你好\n\n世界", "你好。 世界"),
        ("こんにちは\n\nさようなら", "こんにちは。 さようなら"),
        ("नमस्ते\n\nदुनिया", "नमस्ते। दुनिया"),
        ("مرحبا\n\nعالم", "مرحبا. عالم"),
        ("\n\n  \n", ""),
    ];
    for (input, want) in cases {
        assert_eq!(normalize(input, &o), want, "{input:?}");
    }
    // Off: newlines stay, spaces around them go, blank lines collapse to one.
    assert_eq!(
        normalize("a  \n  b\n\n\n\nc", &NormalizeOptions::NONE),
        "a\nb\n\nc"
    );
}

#[test]
fn markdown_blocks() {
    let o = only(|o| {
        o.markdown = true;
        o.line_breaks = true
    });
    let cases = [
        ("# Title\nText here", "Title. Text here"),
        ("## Sub title ##\n\nBody", "Sub title. Body"),
        ("#hashtag stays", "#hashtag stays"),
        ("Title\n=====\nBody", "Title. Body"),
        ("Title\n-----\nBody", "Title. Body"),
        ("Above\n\n***\n\nBelow", "Above. Below"),
        (
            "- apples\n- pears\n* plums\n+ figs",
            "apples. pears. plums. figs",
        ),
        ("• one\n• two", "one. two"),
        (
            "1. Preheat the oven\n2) Bake",
            "1. Preheat the oven. 2) Bake",
        ),
        ("- [ ] todo\n- [x] done", "todo. done"),
        (
            "- a long item\n  that wraps\n- next",
            "a long item that wraps. next",
        ),
        ("> quoted text\n> more\n\nAfter", "quoted text more. After"),
        ("> > nested", "nested"),
        (
            "```rust\nlet x = 1;\n```\nAfter code",
            "let x = 1. After code",
        ),
        ("~~~\ncode *not* emphasis\n~~~", "code *not* emphasis"),
        (
            "| Name | Age |\n|------|----:|\n| Ann  | 31  |\n| Bob  | 42  |",
            "Name, Age. Ann, 31. Bob, 42",
        ),
        ("Name | Age\n--- | ---\nAnn | 31", "Name, Age. Ann, 31"),
        ("| a \\| b | c |\n|---|---|", "a | b, c"),
        (
            "See [the docs][1].\n\n[1]: https://example.com/docs \"Docs\"",
            "See the docs.",
        ),
        (
            "Claim[^1].\n\n[^1]: Source: a book.",
            "Claim. Source: a book.",
        ),
        ("Plain | pipe in text", "Plain | pipe in text"),
        ("5 - 3 = 2", "5 - 3 = 2"),
        ("-5 degrees", "-5 degrees"),
    ];
    for (input, want) in cases {
        assert_eq!(normalize(input, &o), want, "{input:?}");
    }
}

#[test]
fn markdown_inline() {
    let o = only(|o| o.markdown = true);
    let cases = [
        (
            "This is *important* and **bold** and ***both***.",
            "This is important and bold and both.",
        ),
        (
            "Use _emphasis_ and __strong text__ but keep snake_case_name.",
            "Use emphasis and strong text but keep snake_case_name.",
        ),
        (
            "Python's __init__ and __main__ stay",
            "Python's __init__ and __main__ stay",
        ),
        ("~~struck~~ text, ~5 km", "struck text, ~5 km"),
        ("**bold with *italic* inside**", "bold with italic inside"),
        ("___both___ and H~2~O", "both and H~2~O"),
        ("*a **b** c*", "a b c"),
        ("5 * 3 = 15 and 2*3*4 = 24", "5 * 3 = 15 and 2*3*4 = 24"),
        ("**unclosed bold", "**unclosed bold"),
        ("a * b * c", "a * b * c"),
        ("\\*not emphasis\\*", "*not emphasis*"),
        ("Run `cargo build` now", "Run cargo build now"),
        ("``code with ` tick``", "code with ` tick"),
        ("a `*not emph*` b", "a *not emph* b"),
        (
            "Read [the guide](https://example.com/guide \"Guide\").",
            "Read the guide.",
        ),
        ("[**Bold link**](http://x.y/(a)b)", "Bold link"),
        ("![A cat](cat.png) sits", "A cat sits"),
        ("[ref link][id] here", "ref link here"),
        ("[just brackets] stay", "[just brackets] stay"),
        (
            "Mail <mailto:me@example.com> or <you@example.org>",
            "Mail me@example.com or you@example.org",
        ),
        ("A<br>B<br/>C", "A B C"),
        ("<p>Para</p><div class=\"x\">Div</div>", "Para Div"),
        ("<b>bold</b> and <em>em</em>", "bold and em"),
        ("<img src=\"a.png\" alt=\"Alt text\"> here", "Alt text here"),
        ("a <!-- comment --> b", "a b"),
        (
            "Vec<T> and Option<String> stay",
            "Vec<T> and Option<String> stay",
        ),
        (
            "Tom &amp; Jerry &mdash; &#8220;hi&#x201D; &bogus; AT&T",
            "Tom & Jerry — “hi” &bogus; AT&T",
        ),
        ("zero&#8203;width &#0; nul", "zerowidth nul"),
        (
            "https://example.com/a_b_c_/x and www.site.org/*x*",
            "https://example.com/a_b_c_/x and www.site.org/*x*",
        ),
    ];
    for (input, want) in cases {
        assert_eq!(normalize(input, &o), want, "{input:?}");
    }
    // Off: markup stays.
    assert_eq!(normalize("# *Hi*", &NormalizeOptions::NONE), "# *Hi*");
}

#[test]
fn urls() {
    let o = only(|o| o.urls = true);
    let cases = [
        ("Visit https://example.com/path?x=1.", "Visit example.com."),
        (
            "See www.GitHub.com/rust-lang/rust, then",
            "See github.com, then",
        ),
        (
            "Login at https://user:pw@www.host.example:8443/x#frag!",
            "Login at host.example!",
        ),
        (
            "(see https://en.wikipedia.org/wiki/Rust_(programming_language))",
            "(see en.wikipedia.org)",
        ),
        (
            "ftp://files.example.net/pub/file.tar.gz",
            "files.example.net",
        ),
        ("http://[::1]:8080/", "::1"),
        ("http:// nothing", "nothing"),
        (
            "mail me@example.com or example.com",
            "mail me@example.com or example.com",
        ),
        ("\"https://a.io/x\"", "\"a.io\""),
    ];
    for (input, want) in cases {
        assert_eq!(normalize(input, &o), want, "{input:?}");
    }
    assert_eq!(
        normalize("https://a.io/x", &NormalizeOptions::NONE),
        "https://a.io/x"
    );
    // With markdown: a link keeps its text; a link whose text is the URL is spoken as the host.
    assert_eq!(
        norm("[https://docs.rs/regex](https://docs.rs/regex)"),
        "docs.rs"
    );
    assert_eq!(
        norm("**Docs:** <https://docs.rs/regex/latest>"),
        "Docs: docs.rs"
    );
}

#[test]
fn full_document() {
    let md = "\u{FEFF}# Release notes\r\n\r\nVersion **2.0** is out\u{200B}! See https://example.com/releases/2.0 for\r\ndetails.\r\n\r\n## Changes\r\n\r\n- Faster `decode()`\r\n- New [voices](https://example.com/voices)\r\n\r\n| Voice | Lang |\r\n|---|---|\r\n| Ava | en |\r\n";
    assert_eq!(
        norm(md),
        "Release notes. Version 2.0 is out! See example.com for details. Changes. Faster decode(). New voices. Voice, Lang. Ava, en"
    );
}

fn random_text(rng: &mut Rng, len: usize) -> String {
    const PIECES: &[&str] = &[
        "word",
        " ",
        " ",
        "\n",
        "\n\n",
        "*",
        "**",
        "_",
        "__",
        "`",
        "```",
        "~~",
        "#",
        "# ",
        "> ",
        "- ",
        "1. ",
        "|",
        "|---|",
        "[",
        "]",
        "(",
        ")",
        "![",
        "](",
        "<",
        ">",
        "<b>",
        "</p>",
        "<!--",
        "-->",
        "&amp;",
        "&#",
        ";",
        "\\",
        "http://",
        "https://x.y/z",
        "www.",
        ".",
        ",",
        "!",
        "?",
        "\u{200B}",
        "\u{200C}",
        "\u{200D}",
        "\u{FEFF}",
        "\u{202E}",
        "\u{AD}",
        "\u{0}",
        "\r",
        "\t",
        "\u{85}",
        "\u{2029}",
        "你好",
        "。",
        "مرحبا",
        "؟",
        "नमस्ते",
        "।",
        "👨\u{200D}👩",
        "🏴",
        "\u{E0067}",
        "é",
        "e\u{301}",
        "\u{FFFD}",
        "ก",
        "Dr.",
        "3.14",
        "=",
        "===",
        "---",
    ];
    let mut s = String::new();
    while s.len() < len {
        s.push_str(rng.pick(PIECES));
    }
    s
}

fn check_output(out: &str, opts: &NormalizeOptions) {
    assert!(!out.starts_with(char::is_whitespace) && !out.ends_with(char::is_whitespace));
    assert!(!out.contains("  "));
    for c in out.chars() {
        assert!(!c.is_control() || c == '\n', "control {c:?} in output");
        if opts.invisible {
            assert!(
                matches!(
                    classify_invisible(c),
                    Invisible::Keep | Invisible::Joiner | Invisible::Tag
                ),
                "invisible {c:?} in output"
            );
        }
        if opts.line_breaks {
            assert_ne!(c, '\n');
        }
    }
}

#[test]
fn never_panics_on_random_markup() {
    let mut rng = Rng(0x2545_F491_4F6C_DD1D);
    for round in 0..3000 {
        let len = rng.below(300);
        let s = random_text(&mut rng, len);
        let o = NormalizeOptions {
            invisible: round % 2 == 0,
            line_breaks: round % 3 != 0,
            markdown: round % 5 != 0,
            urls: round % 7 != 0,
        };
        let out = normalize(&s, &o);
        check_output(&out, &o);
        check_output(&norm(&s), &NormalizeOptions::ALL);
    }
}

#[test]
fn never_panics_on_random_bytes() {
    let mut rng = Rng(42);
    for _ in 0..2000 {
        let len = rng.below(400);
        let bytes: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
        let s = String::from_utf8_lossy(&bytes);
        check_output(&norm(&s), &NormalizeOptions::ALL);
        let _ = normalize(&s, &NormalizeOptions::NONE);
    }
}

#[test]
fn large_inputs() {
    let mut rng = Rng(7);
    let s = random_text(&mut rng, 100_000);
    check_output(&norm(&s), &NormalizeOptions::ALL);
    // Pathological repetitions must stay linear.
    for unit in [
        "*a ", "_a ", "`a ", "[a](", "<b ", "&#1", "| ", "``", "![", "\u{200D}", "# ", "> ",
    ] {
        let s = unit.repeat(100_000 / unit.len());
        let t = std::time::Instant::now();
        let out = norm(&s);
        check_output(&out, &NormalizeOptions::ALL);
        assert!(
            t.elapsed().as_secs_f64() < 2.0,
            "{unit:?} took {:?}",
            t.elapsed()
        );
    }
    // Mixed scripts and emoji survive intact.
    let mixed = "Hello 👋 мир 世界 שלום عالم नमस्ते 🏳\u{FE0F}\u{200D}🌈 ".repeat(2000);
    assert_eq!(norm(&mixed), mixed.trim_end());
}
