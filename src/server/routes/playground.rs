//! `GET /playground`: one self-contained page (no external scripts, styles or fetches) to try
//! the served models from a browser: speak with any model and voice while it streams, clone a
//! voice from the microphone or a file, transcribe a file or the microphone live (over the
//! realtime WebSocket). `GET /` redirects to it. Plain routes, outside the OpenAPI document and
//! the API keys: the page itself calls the /v1 routes, with a key field when the server asks
//! for one.

use axum::http::header;
use axum::response::{Html, IntoResponse, Redirect};

const PAGE: &str = include_str!("playground.html");

/// The page may talk only to this server (`'self'` covers its WebSocket too); audio plays from
/// blob URLs (MediaSource, recordings).
const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'unsafe-inline'; \
     style-src 'unsafe-inline'; connect-src 'self'; media-src 'self' blob:";

pub async fn page() -> impl IntoResponse {
    (
        [
            (header::CONTENT_SECURITY_POLICY, CONTENT_SECURITY_POLICY),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        Html(PAGE),
    )
}

pub async fn root() -> Redirect {
    Redirect::temporary("/playground")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_page_loads_nothing_from_elsewhere() {
        for external in ["http://", "https://", "//cdn", "<link", "src=\""] {
            assert!(!PAGE.contains(external), "{external}");
        }
        assert!(PAGE.contains("body.stream_format = \"audio\""));
        // Nothing that the policy would have to be loosened for: no eval, no worklet or
        // worker scripts (the microphone is read with a ScriptProcessorNode).
        for needs_more in ["eval(", "new Function", "addModule", "new Worker"] {
            assert!(!PAGE.contains(needs_more), "{needs_more}");
        }
        for loose in ["unsafe-eval", "*", "http:", "https:", "data:"] {
            assert!(!CONTENT_SECURITY_POLICY.contains(loose), "{loose}");
        }
    }
}
