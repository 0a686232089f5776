//! Pass 2: markdown.

use super::characters::{classify_invisible, is_unicode_space, Invisible};
use std::ops::Range;
use std::sync::LazyLock;

use pulldown_cmark::{BrokenLink, CowStr, Event, LinkType, Options, Parser, Tag, TagEnd};

use regex::Regex;

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
