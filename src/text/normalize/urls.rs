//! Pass 3: URLs.

use regex::Regex;
use std::sync::LazyLock;

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
