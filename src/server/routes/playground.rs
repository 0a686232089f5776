//! `GET /playground`: one self-contained page (no external scripts, styles or fetches) to try
//! the speech endpoint from a browser: type text, pick a voice and a format, hear it stream.
//! `GET /` redirects to it. Plain routes, outside the OpenAPI document and the API keys: the
//! page itself calls the /v1 routes, with a key field when the server asks for one.

use axum::http::header;
use axum::response::{Html, IntoResponse, Redirect};

const PAGE: &str = include_str!("playground.html");

/// The page may talk only to this server; audio plays from blob URLs (MediaSource).
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
        assert!(PAGE.contains("stream_format: \"audio\""));
    }
}
