//! Errors in OpenAI's shape: `{"error": {"message", "type", "param", "code"}}`.
//!
//! Handlers return [`ApiError`]; responses made elsewhere (axum's 405, tower-http's 413 and
//! timeout) are reshaped by [`openai_error_bodies`], so every error a client sees parses the
//! same way.

use axum::body::Body;
use axum::extract::Request;
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use utoipa::ToSchema;

/// The body of every error response.
#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorResponse {
    pub error: ErrorDetail,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorDetail {
    /// What went wrong, for people.
    pub message: String,
    /// `invalid_request_error`, `authentication_error`, `rate_limit_error` or `server_error`.
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// The request field at fault, for validation errors.
    pub param: Option<String>,
    /// A stable machine-readable reason, such as `queue_full` or `model_loading`.
    pub code: Option<&'static str>,
}

#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub message: String,
    pub param: Option<String>,
    pub code: Option<&'static str>,
    /// Seconds, sent as `Retry-After`.
    pub retry_after: Option<u32>,
}

impl ApiError {
    pub fn new(status: StatusCode, code: Option<&'static str>, message: impl Into<String>) -> Self {
        ApiError {
            status,
            message: message.into(),
            param: None,
            code,
            retry_after: None,
        }
    }

    /// 400 for a request field that fails validation.
    pub fn invalid(param: impl Into<String>, message: impl Into<String>) -> Self {
        ApiError {
            param: Some(param.into()),
            ..ApiError::new(StatusCode::BAD_REQUEST, Some("invalid_value"), message)
        }
    }

    /// The request field at fault.
    pub fn with_param(mut self, param: impl Into<String>) -> Self {
        self.param = Some(param.into());
        self
    }

    pub fn with_retry_after(mut self, seconds: u32) -> Self {
        self.retry_after = Some(seconds);
        self
    }

    pub fn internal(message: impl Into<String>) -> Self {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            Some("internal_error"),
            message,
        )
    }

    /// 503 while the model loads.
    pub fn model_loading() -> Self {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            Some("model_loading"),
            "The model is still loading; try again shortly.",
        )
        .with_retry_after(5)
    }

    /// 404 for a `model` this server does not serve (OpenAI's `model_not_found`).
    pub fn model_not_found(name: &str, served: &[&str]) -> Self {
        ApiError::no_such_model(format!(
            "The model '{name}' does not exist on this server. Served: {}.",
            served.join(", ")
        ))
    }

    /// OpenAI's 404 `model_not_found` on `model`, saying why.
    pub fn no_such_model(message: String) -> Self {
        ApiError::new(StatusCode::NOT_FOUND, Some("model_not_found"), message).with_param("model")
    }

    /// 503 once shutdown has begun.
    pub fn shutting_down() -> Self {
        ApiError::new(
            StatusCode::SERVICE_UNAVAILABLE,
            Some("shutting_down"),
            "The server is shutting down and accepts no new requests.",
        )
    }

    pub fn kind(&self) -> &'static str {
        match self.status {
            StatusCode::UNAUTHORIZED => "authentication_error",
            StatusCode::TOO_MANY_REQUESTS => "rate_limit_error",
            s if s.is_server_error() => "server_error",
            _ => "invalid_request_error",
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        // A 503 (loading, shutting down) is a state, not a failure: the response line logs it.
        if self.status.is_server_error() && self.status != StatusCode::SERVICE_UNAVAILABLE {
            tracing::warn!(status = %self.status, code = ?self.code, message = %self.message, "request failed");
        }
        let body = ErrorResponse {
            error: ErrorDetail {
                kind: self.kind(),
                message: self.message,
                param: self.param,
                code: self.code,
            },
        };
        let mut response = (self.status, axum::Json(body)).into_response();
        if let Some(seconds) = self.retry_after {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        }
        if self.status == StatusCode::UNAUTHORIZED {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        response
    }
}

/// Route fallback: unknown paths get 404 in OpenAI's shape.
pub async fn not_found(request: Request) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        Some("not_found"),
        format!(
            "Unknown path: {} {}",
            request.method(),
            request.uri().path()
        ),
    )
}

/// Middleware: gives error responses that have no JSON body (made by axum or tower-http) an
/// OpenAI error body, keeping their status and headers.
pub async fn openai_error_bodies(request: Request, next: Next) -> Response {
    let response = next.run(request).await;
    let status = response.status();
    let is_json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v.as_bytes().starts_with(b"application/json"));
    if !(status.is_client_error() || status.is_server_error()) || is_json {
        return response;
    }
    let (code, message) = match status {
        StatusCode::METHOD_NOT_ALLOWED => {
            ("method_not_allowed", "Method not allowed on this path.")
        }
        StatusCode::PAYLOAD_TOO_LARGE => ("payload_too_large", "The request body is too large."),
        StatusCode::GATEWAY_TIMEOUT => (
            "timeout",
            "The request took longer than the server's request timeout.",
        ),
        StatusCode::NOT_FOUND => ("not_found", "Not found."),
        _ => (
            "http_error",
            status.canonical_reason().unwrap_or("HTTP error"),
        ),
    };
    let (mut parts, _) = response.into_parts();
    let shaped = ApiError::new(status, Some(code), message).into_response();
    parts.headers.remove(header::CONTENT_LENGTH);
    parts.headers.extend(shaped.headers().clone());
    Response::from_parts(parts, Body::new(shaped.into_body()))
}
