//! The HTTP layer: OpenAI's speech API in front of the inference worker (`crate::scheduler`).
//!
//! A speech request's path: `layers` (request id, trace, CORS, metrics, error bodies, timeout,
//! body limit) -> `drain` and `auth` (the /v1 routes) -> `routes::speech` -> `scheduler` queue and
//! worker -> `audio` encoders -> response.

mod auth;
mod drain;
mod error;
mod json;
mod metrics;
mod openapi;
mod routes;
mod state;
pub(crate) mod voice_catalog;
pub mod voice_store;
mod wyoming;

use crate::config::ServerConfig;
use crate::engine::EngineOptions;
use crate::models::registry::{self, Task};
use crate::scheduler::transcription::{
    start_transcription_worker, TranscriberState, TranscriptionSettings,
};
use crate::scheduler::voice_encoding::{start_voice_encoding, VoiceEncodingSettings};
use crate::scheduler::{start_worker, EngineState, StreamSettings, WorkerSettings};
use anyhow::{anyhow, Context};
use axum::extract::DefaultBodyLimit;
use axum::http::{HeaderName, Request, StatusCode};
use axum::middleware::{from_fn, from_fn_with_state};
use axum::routing::get;
use axum::Router;
use drain::Drain;
use routes::speech::SEED_HEADER;
use routes::{
    health, models, playground, realtime, speech, speech_realtime, transcription_realtime,
    transcriptions, voices,
};
use state::{AppState, ServedModel, ServedTranscriber, ServedVoiceEncoder};
use std::future::IntoFuture;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tokio::sync::watch;
use tower_http::classify::ServerErrorsFailureClass;
use tower_http::cors::{AllowOrigin, Any, CorsLayer};
use tower_http::limit::RequestBodyLimitLayer;
use tower_http::request_id::{MakeRequestUuid, PropagateRequestIdLayer, SetRequestIdLayer};
use tower_http::timeout::TimeoutLayer;
use tower_http::trace::{DefaultOnResponse, TraceLayer};
use utoipa::OpenApi as _;
use utoipa_axum::router::OpenApiRouter;
use utoipa_axum::routes;
use utoipa_swagger_ui::SwaggerUi;
use voice_store::VoiceStore;

pub use error::ApiError;
pub use routes::speech::{parse_speech_body, Speech, StreamFormat};

const REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// The OpenAI-compatible API: behind the API keys and refused while draining.
fn v1_routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(speech::create_speech))
        .routes(routes!(speech_realtime::mistral_websocket))
        .routes(routes!(speech_realtime::vllm_websocket))
        .routes(routes!(models::list_models))
}

/// Speech to text: the same keys and drain as [`v1_routes`], with the upload limit of
/// `max_transcription_bytes` instead of `max_body_bytes`.
fn transcription_routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(transcriptions::create_transcription))
        .routes(routes!(realtime::realtime_websocket))
        .routes(routes!(
            transcription_realtime::mistral_transcription_websocket
        ))
}

/// Custom voices: the same keys and drain as [`v1_routes`], with the upload limit of
/// `max_voice_upload_bytes`.
fn voice_routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(voices::create::create_voice))
        .routes(routes!(voices::delete_voice, voices::mistral::update_voice))
}

/// The voice and model lists: refused while draining, and behind the API keys only when
/// `public_discovery` is off (Open WebUI fetches them without its key).
fn discovery_routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(voices::list_voices))
        .routes(routes!(voices::mistral::get_voice))
        .routes(routes!(models::list_audio_models))
}

/// Open to probes and scrapers.
fn operations_routes() -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(health::health))
        .routes(routes!(health::ready))
        .routes(routes!(routes::metrics::metrics))
}

/// The OpenAPI document of every route.
pub fn openapi() -> utoipa::openapi::OpenApi {
    OpenApiRouter::with_openapi(openapi::ApiDoc::openapi())
        .merge(v1_routes())
        .merge(transcription_routes())
        .merge(voice_routes())
        .merge(discovery_routes())
        .merge(operations_routes())
        .into_openapi()
}

fn router(state: AppState) -> Router {
    let config = state.config.clone();
    let v1: Router<AppState> = v1_routes()
        .split_for_parts()
        .0
        .route_layer(RequestBodyLimitLayer::new(config.max_body_bytes))
        .route_layer(from_fn_with_state(state.clone(), auth::require_api_key))
        .route_layer(from_fn_with_state(
            state.clone(),
            drain::reject_while_draining,
        ));
    let transcription: Router<AppState> = transcription_routes()
        .split_for_parts()
        .0
        .route_layer(RequestBodyLimitLayer::new(config.max_transcription_bytes))
        .route_layer(from_fn_with_state(state.clone(), auth::require_api_key))
        .route_layer(from_fn_with_state(
            state.clone(),
            drain::reject_while_draining,
        ));
    let voice: Router<AppState> = voice_routes()
        .split_for_parts()
        .0
        .route_layer(RequestBodyLimitLayer::new(config.max_voice_upload_bytes))
        .route_layer(from_fn_with_state(state.clone(), auth::require_api_key))
        .route_layer(from_fn_with_state(
            state.clone(),
            drain::reject_while_draining,
        ));
    let mut discovery: Router<AppState> = discovery_routes().split_for_parts().0;
    if !config.public_discovery {
        discovery = discovery.route_layer(from_fn_with_state(state.clone(), auth::require_api_key));
    }
    let discovery = discovery.route_layer(from_fn_with_state(
        state.clone(),
        drain::reject_while_draining,
    ));
    let operations: Router<AppState> = operations_routes().split_for_parts().0;
    // A page for people, not part of the API document; it calls /v1 with the user's key.
    let playground: Router<AppState> = Router::new()
        .route("/playground", get(playground::page))
        .route("/", get(playground::root));
    // Layers listed innermost first.
    let app = Router::new()
        .merge(v1)
        .merge(transcription)
        .merge(voice)
        .merge(discovery)
        .merge(operations)
        .merge(playground)
        .merge(SwaggerUi::new("/docs").url("/openapi.json", openapi()))
        .fallback(error::not_found)
        // The largest of the limits; each route group applies its own.
        .layer(RequestBodyLimitLayer::new(
            config
                .max_body_bytes
                .max(config.max_transcription_bytes)
                .max(config.max_voice_upload_bytes),
        ))
        .layer(DefaultBodyLimit::disable())
        .layer(TimeoutLayer::with_status_code(
            StatusCode::GATEWAY_TIMEOUT,
            config.request_timeout(),
        ))
        .layer(from_fn(error::openai_error_bodies))
        .layer(from_fn(metrics::count_requests));
    let app = match cors(&config.cors_origins) {
        Some(cors) => app.layer(cors),
        None => app,
    };
    app.layer(
        TraceLayer::new_for_http()
            .make_span_with(|request: &Request<_>| {
                let id = request
                    .headers()
                    .get(&REQUEST_ID)
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or("");
                tracing::info_span!("request", method = %request.method(), path = %request.uri().path(), id)
            })
            .on_response(DefaultOnResponse::new().level(tracing::Level::INFO))
            .on_failure(log_failure),
    )
    .layer(PropagateRequestIdLayer::new(REQUEST_ID))
    .layer(SetRequestIdLayer::new(REQUEST_ID, MakeRequestUuid))
    .with_state(state)
}

/// A failed response at error level, but not a 503: loading and shutting down are states,
/// answered with `Retry-After` (a readiness probe asks every few seconds while a model
/// loads), and the response line already logs them.
fn log_failure(failure: ServerErrorsFailureClass, latency: Duration, _span: &tracing::Span) {
    if !matches!(
        failure,
        ServerErrorsFailureClass::StatusCode(StatusCode::SERVICE_UNAVAILABLE)
    ) {
        tracing::error!(classification = %failure, latency_ms = latency.as_millis(), "response failed");
    }
}

fn cors(origins: &[String]) -> Option<CorsLayer> {
    if origins.is_empty() {
        return None;
    }
    let allow = if origins.iter().any(|o| o == "*") {
        AllowOrigin::from(Any)
    } else {
        AllowOrigin::list(origins.iter().filter_map(|o| o.parse().ok()))
    };
    Some(
        CorsLayer::new()
            .allow_origin(allow)
            .allow_methods(Any)
            .allow_headers(Any)
            .expose_headers([REQUEST_ID, HeaderName::from_static(SEED_HEADER)]),
    )
}

/// Runs the server until SIGTERM or Ctrl-C (then drains) or until the model fails to load.
pub async fn serve(config: ServerConfig) -> anyhow::Result<()> {
    let metrics_handle = metrics::install_recorder().context("installing the metrics recorder")?;
    tokio::spawn(metrics::run_upkeep(metrics_handle.clone()));
    let listener = tokio::net::TcpListener::bind((config.host.as_str(), config.port))
        .await
        .with_context(|| format!("binding {}:{}", config.host, config.port))?;
    let wyoming_listener = match config.wyoming_port {
        Some(port) => Some(
            tokio::net::TcpListener::bind((config.host.as_str(), port))
                .await
                .with_context(|| format!("binding {}:{port} (wyoming_port)", config.host))?,
        ),
        None => None,
    };
    let voices = VoiceStore::open(&config.voices_dir, config.max_voices)
        .context("opening the custom voices (voices_dir)")?;
    let mut workers = Vec::new();
    let Started {
        models,
        voice_encoders,
        transcribers,
    } = match start_models(&config, &mut workers) {
        Ok(started) => started,
        Err(e) => {
            // The queues are gone with the error: each thread ends once its model has loaded.
            // Joined before the error is returned, so that the process never tears down
            // libtorch under a thread still loading.
            join_workers(workers).await;
            return Err(e);
        }
    };
    let grace = config.shutdown_grace();
    let load_failure = watch_load_failures(&models, &transcribers);
    let state = AppState {
        config: Arc::new(config),
        models: models.into(),
        transcribers: transcribers.into(),
        drain: Arc::new(Drain::default()),
        metrics: metrics_handle,
        voices: Arc::new(voices),
        voice_encoders: voice_encoders.into(),
        started_at: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
    };
    let served =
        serve_until_shutdown(listener, wyoming_listener, state, &load_failure, grace).await;
    // The router and the Wyoming listener, and with them every queue handle, are gone: the
    // workers finish and exit.
    let clean = join_workers(workers).await;
    served?;
    if !clean {
        return Err(anyhow!("an inference worker thread panicked"));
    }
    if let Some(failure) = &*load_failure.borrow() {
        return Err(anyhow!("loading the model failed: {failure}"));
    }
    tracing::info!("stopped");
    Ok(())
}

/// Serves HTTP (and Wyoming) until a termination signal and the drain, or a model's failure
/// to load; returns with every handle on the state dropped.
async fn serve_until_shutdown(
    listener: tokio::net::TcpListener,
    wyoming_listener: Option<tokio::net::TcpListener>,
    state: AppState,
    load_failure: &watch::Receiver<Option<String>>,
    grace: Duration,
) -> anyhow::Result<()> {
    tracing::info!("listening on http://{}", listener.local_addr()?);
    let wyoming = match wyoming_listener {
        Some(listener) => {
            tracing::info!("Wyoming protocol on tcp://{}", listener.local_addr()?);
            Some(tokio::spawn(wyoming::serve(listener, state.clone())))
        }
        None => None,
    };
    let drain = state.drain.clone();
    let signal_failure = load_failure.clone();
    let (drained, drained_rx) = tokio::sync::oneshot::channel::<()>();
    let server = axum::serve(listener, router(state)).with_graceful_shutdown(async move {
        shutdown_trigger(signal_failure, &drain, grace).await;
        let _ = drained.send(());
    });
    let served = tokio::select! {
        served = server.into_future() => served.context("serving HTTP"),
        // Connections still open after the drain (requests past the grace period) are cut.
        _ = async {
            let _ = drained_rx.await;
            tokio::time::sleep(Duration::from_secs(1)).await;
        } => {
            tracing::warn!("closing connections still open after the grace period");
            Ok(())
        }
    };
    if let Some(wyoming) = wyoming {
        wyoming.abort();
        let _ = wyoming.await;
    }
    served
}

/// The served models, each with the threads that own it.
struct Started {
    models: Vec<ServedModel>,
    voice_encoders: Vec<ServedVoiceEncoder>,
    transcribers: Vec<ServedTranscriber>,
}

/// The served models' threads, started in the order of the settings (pushed onto `workers` as
/// they start, so that the caller can join them when a later one fails to start).
fn start_models(
    config: &ServerConfig,
    workers: &mut Vec<std::thread::JoinHandle<()>>,
) -> anyhow::Result<Started> {
    let (mut models, mut voice_encoders, mut transcribers) = (Vec::new(), Vec::new(), Vec::new());
    for (index, (id, model_dir)) in config.models().into_iter().enumerate() {
        if matches!(registry::detect(&model_dir), Ok(family) if family.task == Task::Transcribe) {
            let (queue, state, worker) = start_transcription_worker(
                TranscriptionSettings {
                    model_id: id.clone(),
                    model_dir,
                    device: config.device,
                    dtype: config.dtype.into(),
                    threads: config.threads,
                    max_audio_seconds: config.max_transcription_seconds as f64,
                    max_live_sessions: config.max_realtime_sessions,
                    quantize: config.quantize_of(index),
                    cuda_graphs: config.cuda_graphs,
                },
                config.queue_capacity,
            )
            .with_context(|| format!("starting the transcription worker of {id}"))?;
            workers.push(worker);
            transcribers.push(ServedTranscriber { id, queue, state });
            continue;
        }
        let (queue, engine, worker) = start_worker(
            WorkerSettings {
                model_id: id.clone(),
                model_dir: model_dir.clone(),
                device: config.device,
                dtype: config.dtype.into(),
                threads: config.threads,
                #[cfg(debug_assertions)]
                panic_on_input: config.test_panic_on_input.clone(),
                streaming: StreamSettings {
                    first_chunk_frames: config.first_chunk_frames,
                    chunk_frames: config.chunk_frames,
                },
                engine: EngineOptions {
                    prefill_chunk_tokens: config.prefill_chunk_tokens,
                    max_sessions: config.max_batch_size,
                    kv_cache_bytes: config.kv_cache_budget_mib << 20,
                    quantize: config.quantize_of(index),
                    cuda_graphs: config.cuda_graphs,
                },
            },
            config.queue_capacity,
        )
        .with_context(|| format!("starting the inference worker of {id}"))?;
        workers.push(worker);
        let (voice_queue, voice_state, voice_thread) =
            start_voice_encoding(VoiceEncodingSettings {
                model_id: id.clone(),
                model_dir,
                device: config.device,
                dtype: config.dtype.into(),
                threads: config.threads,
            })
            .with_context(|| format!("starting the voice encoder of {id}"))?;
        workers.push(voice_thread);
        voice_encoders.push(ServedVoiceEncoder {
            model_id: id.clone(),
            queue: voice_queue,
            state: voice_state,
        });
        models.push(ServedModel { id, queue, engine });
    }
    Ok(Started {
        models,
        voice_encoders,
        transcribers,
    })
}

/// Waits for every model thread to end; false when one panicked.
async fn join_workers(workers: Vec<std::thread::JoinHandle<()>>) -> bool {
    let mut clean = true;
    for worker in workers {
        let joined = tokio::task::spawn_blocking(move || worker.join()).await;
        clean &= matches!(joined, Ok(Ok(())));
    }
    clean
}

/// Holds "id: message" of the first model, text-to-speech or speech-to-text, whose loading
/// fails; `None` while none has.
fn watch_load_failures(
    models: &[ServedModel],
    transcribers: &[ServedTranscriber],
) -> watch::Receiver<Option<String>> {
    let (failure_tx, failure) = watch::channel(None);
    let failure_tx = Arc::new(failure_tx);
    let report = move |id: String, message: String| {
        failure_tx.send_if_modified(|first| {
            first.is_none() && first.replace(format!("{id}: {message}")).is_none()
        });
    };
    for model in models {
        let (id, mut state, report) = (model.id.clone(), model.engine.clone(), report.clone());
        tokio::spawn(async move {
            let failed = state
                .wait_for(|s| matches!(s, EngineState::Failed(_)))
                .await;
            if let Ok(failed) = failed {
                if let EngineState::Failed(message) = &*failed {
                    report(id, message.clone());
                }
            }
        });
    }
    for model in transcribers {
        let (id, mut state, report) = (model.id.clone(), model.state.clone(), report.clone());
        tokio::spawn(async move {
            let failed = state
                .wait_for(|s| matches!(s, TranscriberState::Failed(_)))
                .await;
            if let Ok(failed) = failed {
                if let TranscriberState::Failed(message) = &*failed {
                    report(id, message.clone());
                }
            }
        });
    }
    failure
}

/// Resolves when the server should stop: after a termination signal and the drain, or at
/// once when a model fails to load.
async fn shutdown_trigger(
    mut load_failure: watch::Receiver<Option<String>>,
    drain: &Drain,
    grace: Duration,
) {
    tokio::select! {
        () = termination_signal() => {}
        _ = load_failure.wait_for(Option::is_some) => return,
    }
    drain.start();
    tracing::info!(
        in_flight = drain.in_flight(),
        grace_secs = grace.as_secs(),
        "draining"
    );
    if tokio::time::timeout(grace, drain.idle()).await.is_err() {
        tracing::warn!(
            in_flight = drain.in_flight(),
            "grace period over with requests in flight"
        );
    }
}

#[cfg(unix)]
async fn termination_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}

#[cfg(not(unix))]
async fn termination_signal() {
    let _ = tokio::signal::ctrl_c().await;
}
