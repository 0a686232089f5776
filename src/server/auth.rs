//! Bearer API keys on the API routes, when any are configured. A browser's WebSocket cannot
//! set headers, so OpenAI's browser clients send the key as a subprotocol instead
//! (`Sec-WebSocket-Protocol: realtime, openai-insecure-api-key.<KEY>`); it is accepted too.

use super::error::ApiError;
use super::state::AppState;
use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use subtle::ConstantTimeEq;

pub async fn require_api_key(
    State(app): State<AppState>,
    request: Request,
    next: Next,
) -> Response {
    let keys = app.config.api_keys.keys();
    if keys.is_empty() {
        return next.run(request).await;
    }
    let headers = request.headers();
    let presented = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(bearer_token)
        .or_else(|| subprotocol_key(headers));
    match presented {
        Some(token) if is_accepted(keys, token) => next.run(request).await,
        Some(_) => unauthorized("invalid_api_key", "Incorrect API key provided."),
        None => unauthorized(
            "missing_api_key",
            "You didn't provide an API key. Send it in an Authorization header using Bearer \
             auth (Authorization: Bearer YOUR_KEY).",
        ),
    }
}

fn bearer_token(value: &str) -> Option<&str> {
    let (scheme, token) = value.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim())
        .filter(|t| !t.is_empty())
}

/// The prefix of the subprotocol that carries the key (OpenAI's name for it).
const KEY_SUBPROTOCOL: &str = "openai-insecure-api-key.";

/// The key among the WebSocket subprotocols a client asks for, if it sent one.
fn subprotocol_key(headers: &HeaderMap) -> Option<&str> {
    headers
        .get_all(header::SEC_WEBSOCKET_PROTOCOL)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .find_map(|p| p.trim().strip_prefix(KEY_SUBPROTOCOL))
        .filter(|key| !key.is_empty())
}

/// Compares against every key in constant time, so timing reveals neither which key nor how
/// much of one matched.
fn is_accepted(keys: &[String], token: &str) -> bool {
    keys.iter()
        .fold(subtle::Choice::from(0), |found, key| {
            found | key.as_bytes().ct_eq(token.as_bytes())
        })
        .into()
}

fn unauthorized(code: &'static str, message: &str) -> Response {
    ApiError::new(StatusCode::UNAUTHORIZED, Some(code), message).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bearer_tokens() {
        assert_eq!(bearer_token("Bearer abc"), Some("abc"));
        assert_eq!(bearer_token("bearer  abc "), Some("abc"));
        assert_eq!(bearer_token("Basic abc"), None);
        assert_eq!(bearer_token("Bearer "), None);
        assert_eq!(bearer_token("Bearer"), None);
    }

    #[test]
    fn subprotocol_keys() {
        let key = |values: &[&str]| {
            let mut headers = HeaderMap::new();
            for v in values {
                headers.append(header::SEC_WEBSOCKET_PROTOCOL, v.parse().unwrap());
            }
            subprotocol_key(&headers).map(str::to_string)
        };
        assert_eq!(
            key(&["realtime, openai-insecure-api-key.abc"]),
            Some("abc".into())
        );
        assert_eq!(
            key(&["realtime", "openai-insecure-api-key.abc"]),
            Some("abc".into())
        );
        assert_eq!(key(&["realtime, openai-insecure-api-key."]), None);
        assert_eq!(key(&["realtime, openai-beta.realtime-v1"]), None);
        assert_eq!(key(&[]), None);
    }

    #[test]
    fn accepts_only_configured_keys() {
        let keys = vec!["first-key".to_string(), "second".to_string()];
        assert!(is_accepted(&keys, "first-key") && is_accepted(&keys, "second"));
        assert!(!is_accepted(&keys, "first") && !is_accepted(&keys, "second-key"));
        assert!(!is_accepted(&keys, ""));
    }
}
