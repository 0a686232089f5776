//! The JSON body extractor: OpenAI-shaped errors that name the field at fault.

use super::error::ApiError;
use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
use axum::http::{header, HeaderMap, StatusCode};
use serde::de::DeserializeOwned;
use serde_json::error::Category;

/// Like `axum::Json`, but a body that is not JSON gets 415 (wrong Content-Type) or 422
/// (unparsable), and a well-formed body with a bad field gets 400 with `param` set.
pub struct JsonBody<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, ApiError> {
        require_json(request.headers())?;
        let body = Bytes::from_request(request, state).await.map_err(|e| {
            let code = match e.status() {
                StatusCode::PAYLOAD_TOO_LARGE => "payload_too_large",
                _ => "unreadable_body",
            };
            ApiError::new(e.status(), Some(code), e.body_text())
        })?;
        parse(&body).map(JsonBody)
    }
}

/// 415 unless the body is sent as JSON.
pub(crate) fn require_json(headers: &HeaderMap) -> Result<(), ApiError> {
    if is_json(headers) {
        return Ok(());
    }
    Err(ApiError::new(
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        Some("unsupported_media_type"),
        "The request body must be JSON, sent with Content-Type: application/json.",
    ))
}

pub(crate) fn is_json(headers: &HeaderMap) -> bool {
    let Some(mime) = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
    else {
        return false;
    };
    let essence = mime.split(';').next().unwrap_or("").trim();
    essence.eq_ignore_ascii_case("application/json")
        || essence.to_ascii_lowercase().ends_with("+json")
}

pub(crate) fn parse<T: DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    let mut json = serde_json::Deserializer::from_slice(body);
    let value = serde_path_to_error::deserialize(&mut json).map_err(|e| {
        if e.inner().classify() != Category::Data {
            return not_json(e.inner());
        }
        invalid_field(&e)
    })?;
    json.end().map_err(|e| not_json(&e))?;
    Ok(value)
}

/// A body already parsed as JSON, read as `T`: a bad field gets 400 naming it, as [`parse`].
pub(crate) fn from_value<T: DeserializeOwned>(body: serde_json::Value) -> Result<T, ApiError> {
    serde_path_to_error::deserialize(body).map_err(|e| invalid_field(&e))
}

fn invalid_field(e: &serde_path_to_error::Error<serde_json::Error>) -> ApiError {
    let param = field_of(e);
    let message = match &param {
        Some(field) => format!("Invalid '{field}': {}", e.inner()),
        None => format!("Invalid request body: {}", e.inner()),
    };
    ApiError {
        param,
        ..ApiError::new(StatusCode::BAD_REQUEST, Some("invalid_value"), message)
    }
}

fn not_json(e: &serde_json::Error) -> ApiError {
    ApiError::new(
        StatusCode::UNPROCESSABLE_ENTITY,
        Some("invalid_json"),
        format!("The request body is not valid JSON: {e}"),
    )
}

/// The request field an error is about. serde reports a missing field at the enclosing
/// object, naming the field only in its message.
fn field_of(e: &serde_path_to_error::Error<serde_json::Error>) -> Option<String> {
    let path = e.path().to_string();
    if path != "." {
        return Some(path);
    }
    let message = e.inner().to_string();
    let missing = message.strip_prefix("missing field `")?;
    missing.split('`').next().map(String::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize)]
    #[allow(dead_code)]
    struct Example {
        name: String,
        inner: Option<Inner>,
    }

    #[derive(Debug, serde::Deserialize)]
    #[allow(dead_code)]
    struct Inner {
        count: u32,
    }

    fn error(body: &str) -> ApiError {
        parse::<Example>(body.as_bytes()).unwrap_err()
    }

    #[test]
    fn data_errors_name_the_field() {
        let e = error(r#"{"inner": {"count": 1}}"#);
        assert_eq!(
            (e.status, e.param.as_deref()),
            (StatusCode::BAD_REQUEST, Some("name"))
        );
        let e = error(r#"{"name": 5}"#);
        assert_eq!(e.param.as_deref(), Some("name"));
        let e = error(r#"{"name": "x", "inner": {"count": -1}}"#);
        assert_eq!(e.param.as_deref(), Some("inner.count"));
        let e = error("\"just a string\"");
        assert_eq!((e.status, e.param), (StatusCode::BAD_REQUEST, None));
    }

    #[test]
    fn parsed_values_name_the_field_too() {
        let body = serde_json::json!({"name": "x", "inner": {"count": -1}});
        let e = from_value::<Example>(body).unwrap_err();
        assert_eq!(
            (e.status, e.param.as_deref()),
            (StatusCode::BAD_REQUEST, Some("inner.count"))
        );
        assert!(from_value::<Example>(serde_json::json!({"name": "x"})).is_ok());
    }

    #[test]
    fn syntax_errors_are_422() {
        for body in ["{", "name=x", r#"{"name": "x"} trailing"#, ""] {
            assert_eq!(
                error(body).status,
                StatusCode::UNPROCESSABLE_ENTITY,
                "{body:?}"
            );
        }
        assert!(parse::<Example>(br#" {"name": "x"} "#).is_ok());
    }

    #[test]
    fn json_content_types() {
        let with = |v: &str| {
            let mut h = HeaderMap::new();
            h.insert(header::CONTENT_TYPE, v.parse().unwrap());
            is_json(&h)
        };
        assert!(with("application/json") && with("Application/JSON; charset=utf-8"));
        assert!(with("application/vnd.api+json"));
        assert!(!with("text/plain") && !with("application/x-www-form-urlencoded"));
        assert!(!is_json(&HeaderMap::new()));
    }
}
