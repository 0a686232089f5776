//! Configuration files as Python's `json` module writes them. `json.dump` writes the
//! non-finite floats as the bare tokens `NaN`, `Infinity` and `-Infinity` (coqui's trainer
//! saves `"max_audio_len": Infinity` in every XTTS-v2 config it writes), and `json.load` reads
//! them back; strict JSON has no such tokens. They are read here as `null`: the fields that
//! carry them are training settings no loader reads, and a field that is read gets a clear
//! type error instead of a parse error.

use serde_json::Value;
use std::borrow::Cow;

/// Parses `text` as Python's `json.loads` does, the non-finite tokens read as `null`.
pub fn parse(text: &str) -> serde_json::Result<Value> {
    serde_json::from_str(&strict(text))
}

/// `text` with `NaN`, `Infinity` and `-Infinity` outside strings replaced by `null`;
/// borrowed when it has none.
pub fn strict(text: &str) -> Cow<'_, str> {
    const TOKENS: [&str; 3] = ["-Infinity", "Infinity", "NaN"];
    let bytes = text.as_bytes();
    let mut out: Option<String> = None;
    let (mut in_string, mut escaped) = (false, false);
    // Start of the text not yet copied into `out`.
    let mut copied = 0;
    let mut i = 0;
    while i < bytes.len() {
        let byte = bytes[i];
        if in_string {
            match byte {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            i += 1;
            continue;
        }
        if byte == b'"' {
            in_string = true;
            i += 1;
            continue;
        }
        match TOKENS.iter().find(|t| bytes[i..].starts_with(t.as_bytes())) {
            Some(token) => {
                let out = out.get_or_insert_with(|| String::with_capacity(text.len()));
                out.push_str(&text[copied..i]);
                out.push_str("null");
                i += token.len();
                copied = i;
            }
            None => i += 1,
        }
    }
    match out {
        Some(mut out) => {
            out.push_str(&text[copied..]);
            Cow::Owned(out)
        }
        None => Cow::Borrowed(text),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn pythons_non_finite_tokens_read_as_null() {
        let text = r#"{"max_audio_len": Infinity, "low": -Infinity, "x": [NaN, 1.5e3, -2],
            "name": "Infinity and NaN \" -Infinity", "ok": true}"#;
        assert_eq!(
            parse(text).unwrap(),
            json!({"max_audio_len": null, "low": null, "x": [null, 1500.0, -2],
                "name": "Infinity and NaN \" -Infinity", "ok": true})
        );
    }

    #[test]
    fn strict_json_is_read_unchanged_and_errors_still_show() {
        let text = r#"{"a": "NaN\\", "b": [1, 2]}"#;
        assert!(matches!(strict(text), Cow::Borrowed(_)));
        assert_eq!(parse(text).unwrap(), json!({"a": "NaN\\", "b": [1, 2]}));
        assert!(parse(r#"{"a": Inf}"#).is_err());
        assert!(parse(r#"{"a": 1,}"#).is_err());
    }
}
