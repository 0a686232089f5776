//! What every handler shares.

use super::drain::Drain;
use super::error::ApiError;
use crate::config::ServerConfig;
use crate::scheduler::{EngineState, JobQueue, ModelInfo};
use axum::http::StatusCode;
use metrics_exporter_prometheus::PrometheusHandle;
use std::sync::Arc;
use tokio::sync::watch;

#[derive(Clone)]
pub struct AppState {
    pub config: Arc<ServerConfig>,
    pub queue: JobQueue,
    pub engine: watch::Receiver<EngineState>,
    pub drain: Arc<Drain>,
    pub metrics: PrometheusHandle,
    /// Unix time the server started (the `created` of /v1/models entries).
    pub started_at: u64,
}

impl AppState {
    /// The loaded model, or 503 while it is loading.
    pub fn model(&self) -> Result<Arc<ModelInfo>, ApiError> {
        match &*self.engine.borrow() {
            EngineState::Ready(info) => Ok(info.clone()),
            EngineState::Loading => Err(ApiError::model_loading()),
            EngineState::Failed(message) => Err(ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                Some("model_load_failed"),
                format!("The model failed to load: {message}"),
            )),
        }
    }
}
