//! `GET /metrics`: Prometheus text format.

use crate::server::metrics::{QUEUE_CAPACITY, QUEUE_DEPTH};
use crate::server::state::AppState;
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;

/// Requests by status, queue depth, frames, audio seconds, real-time factor and
/// time-to-first-audio histograms, in Prometheus text format.
#[utoipa::path(get, path = "/metrics", tag = "operations", responses(
    (status = 200, description = "Prometheus text exposition format", body = String,
     content_type = "text/plain; version=0.0.4")))]
pub async fn metrics(State(app): State<AppState>) -> impl IntoResponse {
    for model in app.models.iter() {
        let id = model.id.clone();
        metrics::gauge!(QUEUE_DEPTH, "model" => id.clone()).set(model.queue.depth() as f64);
        metrics::gauge!(QUEUE_CAPACITY, "model" => id).set(model.queue.capacity() as f64);
    }
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        app.metrics.render(),
    )
}
