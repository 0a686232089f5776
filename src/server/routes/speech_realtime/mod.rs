//! Text-in speech over a WebSocket: the text is sent while it is being written (a language
//! model's tokens), and speech comes back while it is still arriving. Two dialects over one
//! session core (`core.rs`):
//!
//! - `mistral.rs`: Mistral's realtime speech (`GET /v1/audio/speech/realtime?model=`):
//!   `session.update`, `input_text.append`, `input_text.flush`, `input_text.end`; the server
//!   answers `session.created` / `session.updated`, `speech.audio.delta`,
//!   `speech.audio.done` and `error`.
//! - `vllm.rs`: vLLM-Omni's streaming speech (`GET /v1/audio/speech/stream`):
//!   `session.config`, `input.text`, `input.done`, `session.close`; the server answers
//!   `audio.start`, binary audio frames, `audio.done`, `session.done` and `error`.
//!
//! The socket rules are the same for both: a message over the size limit ([`MAX_MESSAGE_BYTES`],
//! for Mistral's the size of a reference clip) gets an error event and close code 1009; a bad message an error event, and the session goes on;
//! at most `max_speech_sessions` sessions (one more: 1013); a client that stops reading is
//! closed (1008) after [`ws::STALL_LIMIT`]; when the server drains, 1012.

mod core;
mod mistral;
mod vllm;

use self::core::{Core, Granularity, Output, Voice};
use super::ws::{self, End, Outgoing};
use crate::server::error::ApiError;
use crate::server::state::AppState;
use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Query, State};
use axum::response::Response;
use futures_util::StreamExt;
use serde::Deserialize;
use serde_json::Value;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// The largest client message: text deltas and settings are small (a frame of
/// `max_input_chars` in four-byte characters, with room for the JSON around it).
pub const MAX_MESSAGE_BYTES: usize = 64 * 1024;
/// How often a session checks whether the server drains, and retries pieces the full queue
/// turned away.
const TICK: Duration = Duration::from_millis(250);

/// The connection URL's query.
#[derive(Debug, Deserialize, utoipa::IntoParams)]
#[into_params(parameter_in = Query)]
pub struct SpeechSocketQuery {
    /// The speech model (default: the first one served).
    model: Option<String>,
}

/// Speaks text while it is written: Mistral's realtime speech session (WebSocket).
///
/// On connect the server sends `session.created` with the default settings, and those of
/// the `X-Voxtral-Session` header (a `session` object as `session.update` takes: how a
/// Mistral SDK, which sends no extension fields, sets them through its `http_headers`) (Mistral's
/// `RealtimeSpeechSession`: `request_id`, `model`, `voice`, `is_ref_audio`,
/// `streaming_mode`, `response_format`, `expressiveness`). The client may send
/// `session.update` (`session`: `voice` (or `voice_id`): a preset or custom voice;
/// `ref_audio`: a base64 clip to clone the voice from, spoken by a model that clones (this one
/// when it does, else the first served one that does); `response_format` pcm (32-bit float,
/// the default), wav, mp3, flac, opus or aac; `streaming_mode` responsive; `expressiveness`
/// only as the model's; `speed`; and the extensions of `/v1/audio/speech`: `seed`,
/// `max_frames`, `language`, `instructions`, `temperature`, `split_granularity` sentence or
/// clause; any other field is refused by name), answered with `session.updated`; then
/// `input_text.append` (`text`: a delta) as the text is written. Each complete sentence is
/// spoken as soon as it is in; `speech.audio.delta` (`audio_data`: base64) carries the audio,
/// one continuous stream per generation, and `speech.audio.segment` says which samples speak
/// which text. `input_text.flush` (with an optional last `text`) speaks the rest and ends the
/// generation with `speech.audio.done` (usage); the socket stays open. `input_text.end` does
/// the same, then closes it. Rejected messages get an `error` event. With a `speed` other
/// than 1, each piece is stretched once it is complete. Browsers may send the API key as a
/// subprotocol, as on `/v1/realtime`.
#[utoipa::path(get, path = "/v1/audio/speech/realtime", tag = "audio", security(("api_key" = [])),
    params(SpeechSocketQuery),
    responses(
        (status = 101, description = "Switching to the WebSocket protocol: the session's events follow"),
        (status = 400, description = "Not a WebSocket upgrade, or a bad X-Voxtral-Session", body = crate::server::error::ErrorResponse),
        (status = 401, description = "A missing or wrong API key", body = crate::server::error::ErrorResponse),
        (status = 404, description = "No speech model of that name", body = crate::server::error::ErrorResponse),
        (status = 503, description = "The model is loading, or the server is shutting down", body = crate::server::error::ErrorResponse)))]
pub async fn mistral_websocket(
    State(app): State<AppState>,
    Query(query): Query<SpeechSocketQuery>,
    headers: axum::http::HeaderMap,
    upgrade: WebSocketUpgrade,
) -> Result<Response, ApiError> {
    let served = match query.model.as_deref() {
        Some(name) => app.model_named(name)?,
        None => app.default_model()?,
    };
    let model = served.loaded()?;
    let mut dialect = mistral::Mistral::new(served.id.clone(), &model);
    if let Some(settings) = headers.get(mistral::SESSION_HEADER) {
        dialect.preset(settings.as_bytes())?;
    }
    let limit = mistral::message_bytes(&app.config);
    Ok(
        limited(upgrade, limit).on_upgrade(move |socket| async move {
            run(socket, app.clone(), limit, dialect).await;
        }),
    )
}

/// Speaks text while it is written: vLLM-Omni's streaming speech session (WebSocket).
///
/// The first message is `session.config` (`model`, `voice`, `response_format` (wav by
/// default), `speed`, `language`, `instructions`, `seed`, `max_new_tokens` as frames,
/// `split_granularity` none (the default: speak at `input.done`), sentence or clause). Then
/// `input.text` (`text`) as the text is written, and `input.done` to speak the rest; the
/// socket stays open for the next utterance until `session.close`. Each piece of text is
/// announced by `audio.start` (`sentence_text`), its audio comes as binary frames (one
/// continuous stream per utterance), and `audio.done` ends it with its samples in the stream
/// (`start_sample`, `end_sample`); `session.done` ends the utterance. Rejected messages get
/// `{"type": "error", "message"}`. With a `speed` other than 1, each piece is stretched once
/// it is complete. Browsers may send the API key as a subprotocol, as on `/v1/realtime`.
#[utoipa::path(get, path = "/v1/audio/speech/stream", tag = "audio", security(("api_key" = [])),
    responses(
        (status = 101, description = "Switching to the WebSocket protocol: the session's events follow"),
        (status = 400, description = "Not a WebSocket upgrade", body = crate::server::error::ErrorResponse),
        (status = 401, description = "A missing or wrong API key", body = crate::server::error::ErrorResponse),
        (status = 503, description = "The server is shutting down", body = crate::server::error::ErrorResponse)))]
pub async fn vllm_websocket(
    State(app): State<AppState>,
    upgrade: WebSocketUpgrade,
) -> Result<Response, ApiError> {
    Ok(
        limited(upgrade, MAX_MESSAGE_BYTES).on_upgrade(move |socket| async move {
            run(
                socket,
                app.clone(),
                MAX_MESSAGE_BYTES,
                vllm::Vllm::default(),
            )
            .await;
        }),
    )
}

/// Messages of at most `max_message_bytes`.
fn limited(upgrade: WebSocketUpgrade, max_message_bytes: usize) -> WebSocketUpgrade {
    // Browser clients send their key as a subprotocol beside `realtime` (`server::auth`), as
    // they do on `/v1/realtime`; the handshake fails in the browser unless one is chosen.
    upgrade
        .max_message_size(max_message_bytes)
        .max_frame_size(max_message_bytes)
        .protocols(["realtime"])
}

/// Sessions open in this process.
static OPEN: AtomicUsize = AtomicUsize::new(0);

/// A place among the `max_speech_sessions`, given back when dropped.
struct Place;

impl Place {
    fn take(limit: usize) -> Option<Place> {
        OPEN.fetch_update(Ordering::AcqRel, Ordering::Acquire, |open| {
            (open < limit).then_some(open + 1)
        })
        .ok()
        .map(|_| Place)
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        OPEN.fetch_sub(1, Ordering::AcqRel);
    }
}

/// What a client message asks for, once a dialect has read it.
pub enum Command {
    /// New settings: a `/v1/audio/speech` body without `input`.
    Configure(Value, Granularity),
    Append(String),
    Flush,
    /// Append, then flush.
    AppendFlush(String),
    /// Flush, then close once the generation is out.
    End,
    /// Close now.
    Close,
}

/// One dialect's messages over the shared core.
pub trait Dialect: Send + 'static {
    /// What the server sends on connect.
    fn opened(&mut self, core: &Core) -> Vec<Message>;
    /// The default settings, if the dialect has any before the client's.
    fn default_settings(&self) -> Option<(Value, Granularity)>;
    /// Reads a client text message.
    fn parse(&mut self, text: &str) -> Result<Command, ApiError>;
    /// The answer to settings taken.
    fn configured(&mut self, voice: &Voice) -> Vec<Message>;
    /// The settings must come first (vLLM-Omni closes a session that starts otherwise).
    fn needs_settings_first(&self) -> bool;
    fn render(&mut self, output: Output) -> Vec<Message>;
    /// An error event for `error` (a WebSocket close code goes with it when it ends the
    /// session).
    fn error(&mut self, error: &ApiError) -> Message;
}

/// Serves one socket whose messages are at most `max_message_bytes`.
async fn run<D: Dialect>(
    socket: WebSocket,
    app: AppState,
    max_message_bytes: usize,
    mut dialect: D,
) {
    let (sink, mut incoming) = socket.split();
    let mut out = Outgoing::new(sink);
    let end = session(
        &mut dialect,
        &mut out,
        &mut incoming,
        &app,
        max_message_bytes,
    )
    .await;
    ws::end(out, &mut incoming, end, |code, message| {
        dialect.error(&ApiError::new(
            axum::http::StatusCode::BAD_REQUEST,
            Some(code),
            message,
        ))
    })
    .await;
}

/// Takes a place and serves the session; the place is free again once it returns, while the
/// last messages go out.
async fn session<D: Dialect>(
    dialect: &mut D,
    out: &mut Outgoing,
    incoming: &mut futures_util::stream::SplitStream<WebSocket>,
    app: &AppState,
    max_message_bytes: usize,
) -> End {
    let limit = app.config.max_speech_sessions;
    let Some(_place) = Place::take(limit) else {
        let e = ApiError::new(
            axum::http::StatusCode::TOO_MANY_REQUESTS,
            Some("session_limit_reached"),
            format!("{limit} speech sessions are open, the most this server takes: retry later"),
        );
        return End::With(vec![
            dialect.error(&e),
            ws::close(ws::TRY_AGAIN_LATER, &e.message),
        ]);
    };
    let mut core = Core::new(app.clone());
    if let Some((body, granularity)) = dialect.default_settings() {
        match Voice::new(app, body, granularity)
            .await
            .and_then(|v| core.configure(v))
        {
            Ok(()) => {}
            // The defaults need what only the client can give (a model without presets needs
            // a voice): the session starts unconfigured.
            Err(e) if e.status == axum::http::StatusCode::BAD_REQUEST => {}
            Err(e) => {
                return End::With(vec![
                    dialect.error(&e),
                    ws::close(ws::INTERNAL_ERROR, &e.message),
                ])
            }
        }
    }
    serve(&mut core, dialect, out, incoming, app, max_message_bytes).await
}

async fn serve<D: Dialect>(
    core: &mut Core,
    dialect: &mut D,
    out: &mut Outgoing,
    incoming: &mut futures_util::stream::SplitStream<WebSocket>,
    app: &AppState,
    max_message_bytes: usize,
) -> End {
    for message in dialect.opened(core) {
        if out.send(message).await.is_err() {
            return End::Stalled;
        }
    }
    let mut tick = tokio::time::interval(TICK);
    let mut ending = false;
    loop {
        let outputs = tokio::select! {
            _ = tick.tick() => {
                if app.drain.is_draining() {
                    let e = ApiError::shutting_down();
                    return End::With(vec![dialect.error(&e), ws::close(ws::SERVICE_RESTART, &e.message)]);
                }
                core.retry().await
            }
            event = core.next_event() => core.on_event(event).await,
            message = incoming.next(), if !ending => match message {
                Some(Ok(Message::Text(text))) => {
                    match on_text(core, dialect, out, text.as_str()).await {
                        Ok(Step::Go(outputs)) => Ok(outputs),
                        Ok(Step::End(outputs)) => {
                            ending = true;
                            Ok(outputs)
                        }
                        Ok(Step::Close) => return End::With(vec![ws::close(1000, "")]),
                        Err(end) => return end,
                    }
                }
                Some(Ok(Message::Binary(_))) => {
                    Err(invalid_message("Messages are JSON text, not binary frames."))
                }
                Some(Ok(Message::Ping(_) | Message::Pong(_))) => Ok(Vec::new()),
                Some(Ok(Message::Close(_))) | None => return End::With(Vec::new()),
                Some(Err(e)) if ws::too_large(&e) => {
                    let e = ApiError::new(
                        axum::http::StatusCode::PAYLOAD_TOO_LARGE,
                        Some("message_too_large"),
                        format!("A message is at most {max_message_bytes} bytes."),
                    );
                    return End::Oversized(vec![dialect.error(&e), ws::close(ws::MESSAGE_TOO_BIG, &e.message)]);
                }
                Some(Err(_)) => return End::With(Vec::new()),
            },
        };
        let (outputs, fatal) = match outputs {
            Ok(outputs) => (outputs, None),
            // The worker stopped: nothing more can be spoken.
            Err(e) if e.status.is_server_error() => (Vec::new(), Some(e)),
            Err(e) => {
                if out.send(dialect.error(&e)).await.is_err() {
                    return End::Stalled;
                }
                continue;
            }
        };
        let mut done = false;
        for output in outputs {
            done |= matches!(output, Output::Done(_));
            for message in dialect.render(output) {
                if out.send(message).await.is_err() {
                    return End::Stalled;
                }
            }
        }
        if let Some(e) = fatal {
            return End::With(vec![
                dialect.error(&e),
                ws::close(ws::INTERNAL_ERROR, &e.message),
            ]);
        }
        if ending && done {
            return End::With(vec![ws::close(1000, "")]);
        }
    }
}

enum Step {
    Go(Vec<Output>),
    /// The client ends the session once this generation is out.
    End(Vec<Output>),
    Close,
}

async fn on_text<D: Dialect>(
    core: &mut Core,
    dialect: &mut D,
    out: &mut Outgoing,
    text: &str,
) -> Result<Step, End> {
    let command = match dialect.parse(text) {
        Ok(command) => command,
        Err(e) => {
            out.send(dialect.error(&e)).await?;
            return Ok(Step::Go(Vec::new()));
        }
    };
    if dialect.needs_settings_first()
        && core.voice().is_none()
        && !matches!(command, Command::Configure(..) | Command::Close)
    {
        let e = invalid_message("The first message must be session.config.");
        return Err(End::With(vec![
            dialect.error(&e),
            ws::close(ws::POLICY_VIOLATION, &e.message),
        ]));
    }
    let result = match command {
        Command::Configure(body, granularity) => {
            let app = core.app().clone();
            match Voice::new(&app, body, granularity).await {
                Ok(voice) => {
                    let answer = dialect.configured(&voice);
                    match core.configure(voice) {
                        Ok(()) => {
                            for message in answer {
                                out.send(message).await?;
                            }
                            Ok(Vec::new())
                        }
                        Err(e) => Err(e),
                    }
                }
                Err(e) => Err(e),
            }
        }
        Command::Append(delta) => core.append(&delta).await,
        Command::Flush => core.flush().await,
        Command::AppendFlush(delta) => match core.append(&delta).await {
            Ok(mut outputs) => core.flush().await.map(|more| {
                outputs.extend(more);
                outputs
            }),
            Err(e) => Err(e),
        },
        Command::End => {
            return match core.flush().await {
                Ok(outputs) => Ok(Step::End(outputs)),
                Err(e) => {
                    out.send(dialect.error(&e)).await?;
                    Ok(Step::Close)
                }
            }
        }
        Command::Close => return Ok(Step::Close),
    };
    match result {
        Ok(outputs) => Ok(Step::Go(outputs)),
        Err(e) if e.status.is_server_error() && e.code != Some("shutting_down") => {
            Err(End::With(vec![
                dialect.error(&e),
                ws::close(ws::INTERNAL_ERROR, &e.message),
            ]))
        }
        Err(e) => {
            out.send(dialect.error(&e)).await?;
            Ok(Step::Go(Vec::new()))
        }
    }
}

/// A message that cannot be read (bad JSON, an unknown type, a binary frame).
pub fn invalid_message(message: impl Into<String>) -> ApiError {
    ApiError::new(
        axum::http::StatusCode::BAD_REQUEST,
        Some("invalid_message"),
        message,
    )
    .with_param("type")
}
