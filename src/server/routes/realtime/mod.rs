//! `GET /v1/realtime`: live transcription over a WebSocket, on a Voxtral Realtime model's
//! live sessions (`scheduler::transcription::live`), in two dialects told apart by the
//! client's first messages (`dialect.rs`): OpenAI's Realtime transcription session
//! (docs/voxtral-realtime-spec.md in the shared docs, section B; the default) and vLLM's
//! realtime transcription (`vllm.rs`).
//!
//! PCM16 (24 kHz in OpenAI's dialect, 16 kHz in vLLM's) comes in with
//! `input_audio_buffer.append`, is resampled to the model's 16 kHz as it arrives (where it is
//! at another rate) and streamed to the worker; text goes out as it is decoded
//! (`conversation.item.input_audio_transcription.delta`), before the commit. A commit ends the
//! item: `input_audio_buffer.committed`, `conversation.item.added` and `.done`, the last
//! deltas, then `.completed` with the whole transcript. With `server_vad` turn detection the
//! server finds the speech (`audio::vad`), sends `input_audio_buffer.speech_started` and
//! `speech_stopped`, and commits by itself; audio outside speech is dropped. A bad event gets
//! an `error` event and the session goes on. When the server shuts down, open sessions get an
//! `error` event and are closed (code 1012); items not completed by then are lost.
//!
//! What a session holds is bounded: the events it sends wait in a bounded queue, and a client
//! that reads none for `ws::STALL_LIMIT` is closed (1008); with `PENDING_ITEMS` committed
//! items not yet transcribed it reads no more events until one is; the rest of an item the
//! worker failed (too long) is dropped here.

mod connection;
mod dialect;
mod events;
mod session;
mod vllm;

use crate::server::error::ApiError;
use crate::server::state::AppState;
use axum::extract::ws::WebSocketUpgrade;
use axum::extract::{Query, State};
use axum::response::Response;
use connection::Connection;
use serde::Deserialize;
use std::time::Duration;

/// The connection URL's query.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct RealtimeQuery {
    /// `transcription`, or left out (vLLM's clients send none): conversation sessions are
    /// not served.
    intent: Option<String>,
    /// The speech-to-text model (default: the first one served).
    model: Option<String>,
}

/// The largest client message: OpenAI takes 15 MiB of base64 audio per append.
pub const MAX_MESSAGE_BYTES: usize = 16 * 1024 * 1024;
/// How often an open session checks whether the server is shutting down.
const DRAIN_POLL: Duration = Duration::from_millis(250);
/// Committed items whose transcripts have not come back: with this many, the session reads
/// no more client events until one does, so a client that commits faster than the worker
/// transcribes waits instead of queueing audio without bound.
const PENDING_ITEMS: usize = 2;

/// Opens a live transcription session (WebSocket).
///
/// OpenAI's Realtime API, transcription sessions only: connect with `intent=transcription`
/// (and optionally `model`), then send `session.update` (`session.type: "transcription"`) or
/// the beta `transcription_session.update`, `input_audio_buffer.append` (base64 PCM16, 24 kHz
/// mono), `input_audio_buffer.commit` and `input_audio_buffer.clear`. The server sends
/// `session.created` on connect, `conversation.item.input_audio_transcription.delta` as text
/// is decoded and `.completed` after each commit. The client commits (`turn_detection:
/// null`, the default), or with `turn_detection: {"type": "server_vad"}` an energy detector
/// finds the speech, sends `input_audio_buffer.speech_started` and `speech_stopped` and
/// commits.
///
/// vLLM's realtime transcription on the same path (chosen when the client's first telling
/// event is a `session.update` with a top-level `model`, or a commit with `final`):
/// `session.update` (`model`), `input_audio_buffer.commit` to start, `input_audio_buffer.append`
/// (base64 PCM16, 16 kHz mono) and `input_audio_buffer.commit` with `final: true` to end the
/// utterance; the server sends `transcription.delta` and `transcription.done`, and errors as
/// `{"type": "error", "error": message, "code"}`.
///
/// Over `max_realtime_sessions` open sessions, a new one gets an `error` event and is closed
/// (1013). Browsers, which cannot set headers, may send the API key as a subprotocol
/// (`Sec-WebSocket-Protocol: realtime, openai-insecure-api-key.<KEY>`); the server answers
/// with `realtime`.
#[utoipa::path(get, path = "/v1/realtime", tag = "audio", security(("api_key" = [])),
    params(RealtimeQuery),
    responses(
        (status = 101, description = "Switching to the WebSocket protocol: the session's events follow"),
        (status = 400, description = "Not a WebSocket upgrade, an intent other than transcription, or a model that does not transcribe", body = crate::server::error::ErrorResponse),
        (status = 401, description = "A missing or wrong API key", body = crate::server::error::ErrorResponse),
        (status = 404, description = "No model of that name", body = crate::server::error::ErrorResponse),
        (status = 503, description = "The model is loading", body = crate::server::error::ErrorResponse)))]
pub async fn realtime_websocket(
    State(app): State<AppState>,
    Query(query): Query<RealtimeQuery>,
    upgrade: WebSocketUpgrade,
) -> Result<Response, ApiError> {
    match query.intent.as_deref() {
        None | Some("transcription") => {}
        Some(other) => {
            return Err(ApiError::invalid(
                "intent",
                format!(
                    "intent {other:?}: this server serves transcription sessions only \
                     (/v1/realtime?intent=transcription)"
                ),
            ))
        }
    }
    let served =
        match query.model.as_deref() {
            Some(name) => app.transcriber_named(name)?.clone(),
            None => app.transcribers.first().cloned().ok_or_else(|| {
                ApiError::invalid("model", "this server has no speech-to-text model")
            })?,
        };
    let card = served.loaded()?;
    // Browser clients ask for `realtime` beside the subprotocol that carries their key
    // (`server::auth`); the handshake fails in the browser unless one is chosen.
    Ok(upgrade
        .max_message_size(MAX_MESSAGE_BYTES)
        .max_frame_size(MAX_MESSAGE_BYTES)
        .protocols(["realtime"])
        .on_upgrade(move |socket| async move {
            Connection::run(socket, app, served, card.sample_rate).await;
        }))
}
