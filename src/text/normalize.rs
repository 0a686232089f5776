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

use super::chars::{is_closer, is_nospace_script, is_sentence_terminal_char};
use std::ops::Range;
use std::sync::LazyLock;

use pulldown_cmark::{BrokenLink, CowStr, Event, LinkType, Options, Parser, Tag, TagEnd};

use regex::Regex;

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

// ---------------------------------------------------------------------------------------
// Pass 1: characters
// ---------------------------------------------------------------------------------------

/// What [`clean_chars`] does with one character when `invisible` is on.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Invisible {
    Keep,
    Remove,
    /// ZWNJ / ZWJ: kept between two non-ASCII, non-space characters.
    Joiner,
    /// Emoji tag characters U+E0020..=U+E007F: kept right after U+1F3F4 or another tag.
    Tag,
}

fn classify_invisible(c: char) -> Invisible {
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
fn is_unicode_space(c: char) -> bool {
    matches!(
        c,
        '\u{00A0}' | '\u{1680}' | '\u{2000}'..='\u{200A}' | '\u{202F}' | '\u{205F}' | '\u{3000}'
    )
}

/// Pass 1. Always: CR LF, CR, NEL, VT, FF and U+2028 become `\n`, U+2029 (paragraph
/// separator) becomes a blank line, tab and Unicode spaces (NBSP, U+2000..U+200A, U+3000,
/// ...) become `' '`, and every other control character (C0, DEL, C1, NUL included) is
/// removed. With `invisible`, also the invisible characters listed on
/// [`NormalizeOptions::invisible`] (details in `docs/text.md`).
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

// ---------------------------------------------------------------------------------------
// Pass 2: markdown
// ---------------------------------------------------------------------------------------

/// Pass 2: markdown and HTML markup, parsed with `pulldown-cmark` (CommonMark plus GFM
/// tables, strikethrough, task lists and footnotes); the text that markup marks up is kept.
///
/// Headings, paragraphs, list items, block quotes, table rows (their non-empty cells
/// joined by `", "`), footnote definitions, HTML blocks and code blocks each become a
/// paragraph of their own (separated by a blank line), so the line-break pass ends them
/// with a sentence break; soft line breaks stay `\n`. Code (blocks and spans) is kept
/// verbatim. Ordered-list numbers (`1.`, `2)`) are kept (they are often real content);
/// bullets, task boxes, `>` markers, heading and emphasis markers, link destinations,
/// link reference definitions, footnote references and thematic breaks are removed. A
/// link keeps its text (an autolink its URL, `mailto:` dropped), an image its alt text;
/// `[text][ref]` keeps its text even when `ref` is not defined.
///
/// Beyond CommonMark, for text that was not meant as markup: emphasis delimiters between
/// two digits (`2*3*4`), `__name__` around one identifier (Python's `__init__`), a single
/// `~` and emphasis inside a bare URL stay as they are; a line starting with `• ` is a list
/// item. HTML: see [`strip_html`]; decoded entities never reintroduce what pass 1 removed.
pub fn strip_markdown(text: &str) -> String {
    // `[text][ref]` and `[text][]` stay links without a definition; a lone `[text]` stays text.
    let mut broken = |link: BrokenLink<'_>| {
        matches!(link.link_type, LinkType::Reference | LinkType::Collapsed)
            .then(|| (CowStr::Borrowed(""), CowStr::Borrowed("")))
    };
    let options = Options::ENABLE_TABLES
        | Options::ENABLE_STRIKETHROUGH
        | Options::ENABLE_TASKLISTS
        | Options::ENABLE_FOOTNOTES;
    let parser = Parser::new_with_broken_link_callback(text, options, Some(&mut broken));
    let mut w = MarkdownText::new(text);
    for (event, range) in parser.into_offset_iter() {
        w.event(event, range);
    }
    w.out
}

/// The text of a markdown document, written event by event (see [`strip_markdown`]).
struct MarkdownText<'a> {
    src: &'a str,
    out: String,
    /// Byte ranges of the bare URLs in `src`, in order: no emphasis inside them.
    urls: Vec<Range<usize>>,
    /// One entry per open emphasis, strong or strikethrough: the closing delimiter to write
    /// back when the delimiters are not markup here (`2*3*4`, `__init__`).
    emphasis: Vec<Option<&'a str>>,
    /// Open lists, innermost last: whether each is ordered.
    lists: Vec<bool>,
    /// Cells of the table row being read, and the cell being written.
    row: Vec<String>,
    cell: Option<String>,
    /// Raw HTML of the HTML block being read.
    html: Option<String>,
    code: bool,
    autolink: bool,
    /// Nothing written yet on the current line.
    line_start: bool,
}

impl<'a> MarkdownText<'a> {
    fn new(src: &'a str) -> Self {
        Self {
            src,
            out: String::with_capacity(src.len()),
            urls: bare_urls(src),
            emphasis: Vec::new(),
            lists: Vec::new(),
            row: Vec::new(),
            cell: None,
            html: None,
            code: false,
            autolink: false,
            line_start: true,
        }
    }

    fn push(&mut self, s: &str) {
        if s.is_empty() {
            return;
        }
        self.line_start = false;
        match &mut self.cell {
            Some(cell) => cell.push_str(s),
            None => self.out.push_str(s),
        }
    }

    fn line_break(&mut self) {
        self.push("\n");
        self.line_start = true;
    }

    /// Ends the current paragraph.
    fn block(&mut self) {
        if !self.out.is_empty() && !self.out.ends_with("\n\n") {
            self.out.push_str("\n\n");
        }
        self.line_start = true;
    }

    fn event(&mut self, event: Event<'a>, range: Range<usize>) {
        match event {
            Event::Start(tag) => self.start(tag, range),
            Event::End(tag) => self.end(tag),
            Event::Text(t) => {
                let source = &self.src[range];
                if self.code {
                    self.push(&t);
                } else if source.starts_with('&') && source != &*t {
                    // A decoded entity.
                    self.push(&decoded_text(&t));
                } else if self.autolink {
                    self.push(t.strip_prefix("mailto:").unwrap_or(&t));
                } else {
                    let mut t: &str = &t;
                    if self.line_start && self.cell.is_none() {
                        if let Some(item) = t.strip_prefix('•').filter(|r| r.starts_with(' ')) {
                            self.block();
                            t = item;
                        }
                    }
                    self.push(t);
                }
            }
            Event::Code(t) | Event::InlineMath(t) | Event::DisplayMath(t) => self.push(&t),
            Event::Html(t) => match &mut self.html {
                Some(block) => block.push_str(&t),
                None => self.push(&strip_html(&t)),
            },
            Event::InlineHtml(t) => self.push(&strip_html(&t)),
            Event::SoftBreak | Event::HardBreak => self.line_break(),
            Event::Rule => self.block(),
            Event::FootnoteReference(_) | Event::TaskListMarker(_) => {}
        }
    }

    fn start(&mut self, tag: Tag<'a>, range: Range<usize>) {
        match tag {
            Tag::Paragraph
            | Tag::Heading { .. }
            | Tag::BlockQuote(_)
            | Tag::FootnoteDefinition(_)
            | Tag::Table(_)
            | Tag::DefinitionList
            | Tag::DefinitionListTitle
            | Tag::DefinitionListDefinition
            | Tag::MetadataBlock(_) => self.block(),
            Tag::CodeBlock(_) => {
                self.block();
                self.code = true;
            }
            Tag::HtmlBlock => {
                self.block();
                self.html = Some(String::new());
            }
            Tag::List(first) => {
                self.block();
                self.lists.push(first.is_some());
            }
            Tag::Item => {
                self.block();
                if self.lists.last() == Some(&true) {
                    // Keep the number as written: `1.`, `2)`.
                    let marker = self.src[range.start..].trim_start_matches([' ', '\t']);
                    let digits = marker.bytes().take_while(u8::is_ascii_digit).count();
                    if digits > 0 && matches!(marker.as_bytes().get(digits), Some(b'.' | b')')) {
                        self.push(&marker[..=digits]);
                        self.push(" ");
                    }
                }
            }
            Tag::TableHead | Tag::TableRow => self.row.clear(),
            Tag::TableCell => self.cell = Some(String::new()),
            Tag::Emphasis | Tag::Strong | Tag::Strikethrough => {
                let len = match tag {
                    Tag::Emphasis => Some(1),
                    Tag::Strong => Some(2),
                    _ => None,
                };
                let close = self.literal_delimiters(range, len);
                if let Some((open, _)) = close {
                    self.push(open);
                }
                self.emphasis.push(close.map(|(_, close)| close));
            }
            Tag::Link { link_type, .. } => {
                self.autolink = matches!(link_type, LinkType::Autolink | LinkType::Email);
            }
            Tag::Image { .. } | Tag::Superscript | Tag::Subscript => {}
        }
    }

    fn end(&mut self, tag: TagEnd) {
        match tag {
            TagEnd::CodeBlock => {
                self.code = false;
                self.block();
            }
            TagEnd::HtmlBlock => {
                let html = self.html.take().unwrap_or_default();
                self.push(&strip_html(&html));
                self.block();
            }
            TagEnd::List(_) => {
                self.lists.pop();
                self.block();
            }
            TagEnd::TableCell => {
                if let Some(cell) = self.cell.take() {
                    let cell = cell.trim();
                    if !cell.is_empty() {
                        self.row.push(cell.to_string());
                    }
                }
            }
            TagEnd::TableHead | TagEnd::TableRow => {
                let row = std::mem::take(&mut self.row).join(", ");
                self.block();
                self.push(&row);
                self.block();
            }
            TagEnd::Emphasis | TagEnd::Strong | TagEnd::Strikethrough => {
                if let Some(Some(close)) = self.emphasis.pop() {
                    self.push(close);
                }
            }
            TagEnd::Link => self.autolink = false,
            TagEnd::Paragraph
            | TagEnd::Heading(_)
            | TagEnd::BlockQuote(_)
            | TagEnd::Item
            | TagEnd::FootnoteDefinition
            | TagEnd::Table
            | TagEnd::DefinitionList
            | TagEnd::DefinitionListTitle
            | TagEnd::DefinitionListDefinition
            | TagEnd::MetadataBlock(_) => self.block(),
            TagEnd::Image | TagEnd::Superscript | TagEnd::Subscript => {}
        }
    }

    /// The opening and closing delimiters of the emphasis (or strikethrough) spanning
    /// `range`, `len` bytes each (`None`: a strikethrough, one or two `~`), when they are to
    /// stay as text: between two digits (`2*3*4`), `__name__` around one identifier, a
    /// single `~`, or inside a bare URL.
    fn literal_delimiters(
        &self,
        range: Range<usize>,
        len: Option<usize>,
    ) -> Option<(&'a str, &'a str)> {
        let src = self.src;
        let span = src.get(range.clone())?;
        let ch = span
            .chars()
            .next()
            .filter(|c| matches!(c, '*' | '_' | '~'))?;
        let run = span.bytes().take_while(|b| *b == ch as u8).count();
        let n = len.unwrap_or(run.min(2));
        if n == 0 || run < n || 2 * n > span.len() || !span.ends_with(&span[..n]) {
            return None;
        }
        let (open, close) = (range.start..range.start + n, range.end - n..range.end);
        let inner = &src[open.end..close.start];
        let digit_before = |i: usize| src[..i].ends_with(|c: char| c.is_ascii_digit());
        let digit_at = |i: usize| src[i..].starts_with(|c: char| c.is_ascii_digit());
        let between_digits = (digit_before(open.start) && digit_at(open.end))
            || (digit_before(close.start) && digit_at(close.end));
        // Not `___x___` (emphasis around strong).
        let dunder = &src[open.clone()] == "__"
            && !src[..open.start].ends_with('_')
            && !src[close.end..].starts_with('_')
            && !inner.is_empty()
            && inner.chars().all(|c| c.is_alphanumeric() || c == '_');
        let single_tilde = &src[open.clone()] == "~";
        let i = self.urls.partition_point(|u| u.end <= open.start);
        let in_url = self.urls.get(i).is_some_and(|u| u.start <= open.start);
        (between_digits || dunder || single_tilde || in_url).then(|| (&src[open], &src[close]))
    }
}

/// Byte ranges of the bare URLs in `s` (see [`bare_url_len`]), in order.
fn bare_urls(s: &str) -> Vec<Range<usize>> {
    let mut urls = Vec::new();
    let mut prev: Option<char> = None;
    let mut skip_to = 0;
    for (i, c) in s.char_indices() {
        if i >= skip_to
            && matches!(c, 'h' | 'H' | 'w' | 'W' | 'f' | 'F')
            && prev.is_none_or(|p| !p.is_alphanumeric())
        {
            let n = bare_url_len(&s[i..]);
            if n > 0 {
                urls.push(i..i + n);
                skip_to = i + n;
            }
        }
        prev = Some(c);
    }
    urls
}

/// Length in bytes of a bare URL starting at `s` (`http://`, `https://`, `ftp://`,
/// `www.`), or 0.
fn bare_url_len(s: &str) -> usize {
    let b = s.as_bytes();
    let starts = |p: &[u8]| b.len() >= p.len() && b[..p.len()].eq_ignore_ascii_case(p);
    if !(starts(b"http://") || starts(b"https://") || starts(b"ftp://") || starts(b"www.")) {
        return 0;
    }
    s.find(|c: char| c.is_whitespace() || matches!(c, '<' | '>' | '"' | '`'))
        .unwrap_or(s.len())
}

/// Text from a decoded entity without what pass 1 removes: control characters go,
/// tabs and Unicode spaces become `' '`, invisible format characters go (`&#8203;`).
fn decoded_text(t: &str) -> String {
    t.chars()
        .filter_map(|c| match c {
            '\n' => Some(c),
            c if c == '\t' || is_unicode_space(c) => Some(' '),
            c if c.is_control() || classify_invisible(c) != Invisible::Keep => None,
            c => Some(c),
        })
        .collect()
}

/// Raw HTML (an inline tag, or an HTML block): comments and tags of known HTML elements
/// are removed (`<br>`, `<p>`, `<div>`, ... become a space; `<img alt="x">` becomes `x`),
/// entities decoded; anything else, such as `Vec<T>` or `<script>`, stays as text.
fn strip_html(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut i = 0;
    while let Some(off) = s[i..].find(['<', '&']) {
        let at = i + off;
        out.push_str(&s[i..at]);
        let rest = &s[at..];
        let taken = if rest.starts_with('&') {
            ENTITY.captures(rest).and_then(|caps| {
                let decoded = decode_entity(&caps)?;
                out.push_str(&decoded);
                caps.get(0).map(|m| m.end())
            })
        } else if let Some(m) = HTML_COMMENT.find(rest) {
            Some(m.end())
        } else {
            HTML_TAG.captures(rest).and_then(|caps| {
                let name = caps.get(1).map_or("", |m| m.as_str());
                let separates = html_tag_kind(name)?;
                let tag = caps.get(0).map_or("", |m| m.as_str());
                if name.eq_ignore_ascii_case("img") {
                    if let Some(alt) = IMG_ALT.captures(tag) {
                        let a = alt.get(1).or(alt.get(2)).or(alt.get(3));
                        out.push(' ');
                        out.push_str(a.map_or("", |m| m.as_str()));
                    }
                }
                if separates {
                    out.push(' ');
                }
                Some(tag.len())
            })
        };
        match taken {
            Some(n) => i = at + n,
            None => {
                out.push_str(&rest[..1]);
                i = at + 1;
            }
        }
    }
    out.push_str(&s[i..]);
    out
}

static HTML_COMMENT: LazyLock<Regex> =
    LazyLock::new(|| Regex::new(r"^<!--(?s:.*?)-->").expect("valid regex"));
static HTML_TAG: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(
        r#"^</?([A-Za-z][A-Za-z0-9]*)(?:\s+[A-Za-z_:@][-A-Za-z0-9_:.@]*(?:\s*=\s*(?:"[^"]*"|'[^']*'|[^\s"'=<>`]+))?)*\s*/?>"#,
    )
    .expect("valid regex")
});
static IMG_ALT: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r#"(?i)\salt\s*=\s*(?:"([^"]*)"|'([^']*)'|([^\s"'=<>`]+))"#).expect("valid regex")
});
static ENTITY: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r"^&(?:#([0-9]{1,7})|#[xX]([0-9a-fA-F]{1,6})|([A-Za-z][A-Za-z0-9]{1,31}));")
        .expect("valid regex")
});

/// HTML elements whose tags are removed; `true`: the tag separates words (becomes a
/// space), `false`: it does not (`<b>`, `<em>`, ...). Any other `<name>` is left alone,
/// so `Vec<T>` or `a <b> c`-like text that is not HTML mostly survives.
fn html_tag_kind(name: &str) -> Option<bool> {
    const INLINE: &[&str] = &[
        "a", "abbr", "b", "bdi", "bdo", "big", "cite", "code", "del", "dfn", "em", "font", "i",
        "ins", "kbd", "mark", "q", "s", "samp", "small", "span", "strike", "strong", "sub", "sup",
        "time", "tt", "u", "var", "wbr",
    ];
    const BLOCK: &[&str] = &[
        "article",
        "aside",
        "blockquote",
        "body",
        "br",
        "caption",
        "center",
        "col",
        "colgroup",
        "dd",
        "details",
        "div",
        "dl",
        "dt",
        "figcaption",
        "figure",
        "footer",
        "h1",
        "h2",
        "h3",
        "h4",
        "h5",
        "h6",
        "head",
        "header",
        "hr",
        "html",
        "img",
        "li",
        "main",
        "nav",
        "ol",
        "p",
        "picture",
        "pre",
        "section",
        "summary",
        "table",
        "tbody",
        "td",
        "tfoot",
        "th",
        "thead",
        "tr",
        "ul",
    ];
    let lower = name.to_ascii_lowercase();
    if INLINE.contains(&lower.as_str()) {
        Some(false)
    } else if BLOCK.contains(&lower.as_str()) {
        Some(true)
    } else {
        None
    }
}

fn decode_entity(caps: &regex::Captures<'_>) -> Option<String> {
    let c = if let Some(d) = caps.get(1) {
        char::from_u32(d.as_str().parse().ok()?)?
    } else if let Some(h) = caps.get(2) {
        char::from_u32(u32::from_str_radix(h.as_str(), 16).ok()?)?
    } else {
        let s = match caps.get(3)?.as_str() {
            "amp" => "&",
            "lt" => "<",
            "gt" => ">",
            "quot" => "\"",
            "apos" => "'",
            "nbsp" | "ensp" | "emsp" | "thinsp" => " ",
            "ndash" => "–",
            "mdash" => "—",
            "hellip" => "…",
            "lsquo" => "‘",
            "rsquo" => "’",
            "ldquo" => "“",
            "rdquo" => "”",
            "laquo" => "«",
            "raquo" => "»",
            "copy" => "©",
            "reg" => "®",
            "trade" => "™",
            "deg" => "°",
            "times" => "×",
            "divide" => "÷",
            "euro" => "€",
            "pound" => "£",
            "yen" => "¥",
            "cent" => "¢",
            "sect" => "§",
            "para" => "¶",
            "middot" => "·",
            "bull" => "•",
            "shy" | "zwsp" | "zwj" | "zwnj" | "lrm" | "rlm" => "",
            _ => return None,
        };
        return Some(s.to_string());
    };
    // Never reintroduce what pass 1 removed.
    Some(decoded_text(c.encode_utf8(&mut [0; 4])))
}

// ---------------------------------------------------------------------------------------
// Pass 3: URLs
// ---------------------------------------------------------------------------------------

static URL: LazyLock<Regex> = LazyLock::new(|| {
    Regex::new(r#"(?i)\b(?:(?:https?|ftp)://|www\.)[^\s<>"`]*"#).expect("valid regex")
});

/// Pass 3: each bare URL (`http://`, `https://`, `ftp://` or `www.` at a word start,
/// up to the next space, `<`, `>`, `"` or backtick; trailing `.,;:!?'` and unbalanced
/// closing brackets are left outside) is replaced by its host name, lowercased, without
/// `www.`, port, user info, path, query or fragment:
/// `https://www.Example.com:8080/a?b=1#c` -> `example.com`. A URL without a host is
/// removed. E-mail addresses and bare domains (`example.com`) are left alone.
pub fn speak_urls(text: &str) -> String {
    if !text.as_bytes().iter().any(|b| matches!(b, b':' | b'.')) {
        return text.to_string();
    }
    let mut out = String::with_capacity(text.len());
    let mut last = 0;
    for m in URL.find_iter(text) {
        let url = trim_url(m.as_str());
        out.push_str(&text[last..m.start()]);
        out.push_str(&url_host(url));
        last = m.start() + url.len();
    }
    out.push_str(&text[last..]);
    out
}

/// Drops trailing punctuation that belongs to the sentence, not the URL.
fn trim_url(mut u: &str) -> &str {
    loop {
        let Some(c) = u.chars().next_back() else {
            return u;
        };
        let drop = match c {
            '.' | ',' | ';' | ':' | '!' | '?' | '\'' | '*' | '_' => true,
            ')' => u.matches('(').count() < u.matches(')').count(),
            ']' => u.matches('[').count() < u.matches(']').count(),
            '}' => u.matches('{').count() < u.matches('}').count(),
            _ => false,
        };
        if !drop {
            return u;
        }
        u = &u[..u.len() - c.len_utf8()];
    }
}

fn url_host(url: &str) -> String {
    let rest = match url.find("://") {
        Some(p) => &url[p + 3..],
        None => url,
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let host_port = authority.rsplit('@').next().unwrap_or("");
    let host = if host_port.starts_with('[') {
        // IPv6 literal: keep the brackets' content.
        host_port
            .split(']')
            .next()
            .unwrap_or("")
            .trim_start_matches('[')
    } else {
        host_port.split(':').next().unwrap_or("")
    };
    let host = host.trim_end_matches('.');
    let host = match host.get(..4) {
        Some(p) if host.len() > 4 && p.eq_ignore_ascii_case("www.") => &host[4..],
        _ => host,
    };
    host.to_lowercase()
}

// ---------------------------------------------------------------------------------------
// Pass 4: line breaks
// ---------------------------------------------------------------------------------------

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

// ---------------------------------------------------------------------------------------
// Pass 5: spaces
// ---------------------------------------------------------------------------------------

/// Pass 5: runs of spaces become one space, spaces at line ends are dropped, three or
/// more newlines become a blank line, and the result is trimmed.
pub fn collapse_spaces(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut space = false;
    let mut newlines = 0usize;
    for c in text.chars() {
        match c {
            '\n' => {
                newlines += 1;
                space = false;
            }
            c if c.is_whitespace() => space = true,
            c => {
                if !out.is_empty() {
                    if newlines > 0 {
                        out.push_str(if newlines >= 2 { "\n\n" } else { "\n" });
                    } else if space {
                        out.push(' ');
                    }
                }
                newlines = 0;
                space = false;
                out.push(c);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
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
}
