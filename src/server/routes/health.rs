//! `GET /health` (the process is up) and `GET /ready` (it can take speech requests).

use crate::server::error::{ApiError, ErrorResponse};
use crate::server::state::AppState;
use axum::extract::State;
use axum::Json;
use serde::Serialize;
use utoipa::ToSchema;

#[derive(Serialize, ToSchema)]
pub struct Status {
    /// `ok` for /health, `ready` for /ready.
    status: &'static str,
}

/// Liveness: 200 as long as the process serves HTTP, while loading and draining too.
#[utoipa::path(get, path = "/health", tag = "operations",
    responses((status = 200, description = "The server is running", body = Status)))]
pub async fn health() -> Json<Status> {
    Json(Status { status: "ok" })
}

/// Readiness: 200 once every model is loaded, 503 while loading or shutting down.
#[utoipa::path(get, path = "/ready", tag = "operations", responses(
    (status = 200, description = "The model is loaded", body = Status),
    (status = 503, description = "Loading, load failed, or shutting down", body = ErrorResponse),
))]
pub async fn ready(State(app): State<AppState>) -> Result<Json<Status>, ApiError> {
    if app.drain.is_draining() {
        return Err(ApiError::shutting_down());
    }
    for model in app.models.iter() {
        model.loaded()?;
    }
    for model in app.transcribers.iter() {
        model.loaded()?;
    }
    Ok(Json(Status { status: "ready" }))
}
