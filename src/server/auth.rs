//! Bearer API keys on the API routes, when any are configured.

use super::error::ApiError;
use super::state::AppState;
use axum::extract::{Request, State};
use axum::http::{header, StatusCode};
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
    let presented = request
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(bearer_token);
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
    fn accepts_only_configured_keys() {
        let keys = vec!["first-key".to_string(), "second".to_string()];
        assert!(is_accepted(&keys, "first-key") && is_accepted(&keys, "second"));
        assert!(!is_accepted(&keys, "first") && !is_accepted(&keys, "second-key"));
        assert!(!is_accepted(&keys, ""));
    }
}
