//! Graceful shutdown: once draining, new API requests get 503 while those already in flight
//! run to completion.

use super::error::ApiError;
use super::state::AppState;
use axum::body::{Body, HttpBody};
use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use tokio::sync::watch;

pub struct Drain {
    draining: AtomicBool,
    in_flight: watch::Sender<usize>,
}

impl Default for Drain {
    fn default() -> Self {
        Drain {
            draining: AtomicBool::new(false),
            in_flight: watch::Sender::new(0),
        }
    }
}

impl Drain {
    pub fn start(&self) {
        self.draining.store(true, Ordering::SeqCst);
    }

    pub fn is_draining(&self) -> bool {
        self.draining.load(Ordering::SeqCst)
    }

    pub fn in_flight(&self) -> usize {
        *self.in_flight.borrow()
    }

    /// Resolves once no request is in flight.
    pub async fn idle(&self) {
        let mut count = self.in_flight.subscribe();
        // The sender lives in `self`, so the channel cannot close while we wait.
        let _ = count.wait_for(|&n| n == 0).await;
    }
}

/// Counts a request as in flight until it is dropped (answered, or abandoned by its client).
pub struct InFlight(Arc<Drain>);

impl InFlight {
    /// Also held by each Wyoming synthesis, so that a drain waits for those too.
    pub fn new(drain: Arc<Drain>) -> Self {
        drain.in_flight.send_modify(|n| *n += 1);
        InFlight(drain)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.send_modify(|n| *n -= 1);
    }
}

/// Middleware for the API routes.
pub async fn reject_while_draining(
    State(app): State<AppState>,
    request: Request,
    next: Next,
) -> Response {
    if app.drain.is_draining() {
        return ApiError::shutting_down().into_response();
    }
    let in_flight = InFlight::new(app.drain.clone());
    let response = next.run(request).await;
    if response.body().size_hint().exact().is_some() {
        return response;
    }
    // A streamed body is still being produced: the request stays in flight until it ends
    // (or its client goes away).
    let (parts, body) = response.into_parts();
    let body = body.into_data_stream().map(move |chunk| {
        let _ = &in_flight;
        chunk
    });
    Response::from_parts(parts, Body::from_stream(body))
}
