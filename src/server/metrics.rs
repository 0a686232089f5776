//! Prometheus metrics: the recorder, the HTTP request counter, and descriptions of every
//! metric (the inference workers record their own under `scheduler::metric_names`); every
//! metric but the HTTP counter has a `model` label.

use crate::scheduler::metric_names as engine;
use crate::scheduler::transcription::metric_names as stt;
use axum::extract::{MatchedPath, Request};
use axum::middleware::Next;
use axum::response::Response;
use metrics_exporter_prometheus::{BuildError, Matcher, PrometheusBuilder, PrometheusHandle};
use std::time::Duration;

/// Counter, labels `route` (the route pattern, or `unmatched`), `method`, `status`.
pub const HTTP_REQUESTS: &str = "speech_http_requests_total";
/// Gauge: speech jobs waiting for the worker (sampled when scraped).
pub const QUEUE_DEPTH: &str = "speech_queue_depth";
/// Gauge: how many jobs the queue holds before answering 429.
pub const QUEUE_CAPACITY: &str = "speech_queue_capacity";
/// Histogram: seconds a job waited in the queue.
pub const QUEUE_WAIT: &str = "speech_queue_wait_seconds";
/// Histogram: seconds from receiving a speech request to having its first audio bytes.
pub const TIME_TO_FIRST_AUDIO: &str = "speech_time_to_first_audio_seconds";

const LATENCY_BUCKETS: [f64; 12] = [
    0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 120.0,
];
const RTF_BUCKETS: [f64; 10] = [0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 5.0];
const AUDIO_BUCKETS: [f64; 9] = [0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 40.0, 80.0, 170.0];

/// Installs the process-wide recorder (once per process) and describes every metric.
pub fn install_recorder() -> Result<PrometheusHandle, BuildError> {
    let handle = PrometheusBuilder::new()
        .set_buckets_for_metric(Matcher::Full(QUEUE_WAIT.into()), &LATENCY_BUCKETS)?
        .set_buckets_for_metric(Matcher::Full(TIME_TO_FIRST_AUDIO.into()), &LATENCY_BUCKETS)?
        .set_buckets_for_metric(Matcher::Full(engine::REAL_TIME_FACTOR.into()), &RTF_BUCKETS)?
        .set_buckets_for_metric(Matcher::Full(engine::AUDIO_SECONDS.into()), &AUDIO_BUCKETS)?
        .set_buckets_for_metric(Matcher::Full(stt::AUDIO_SECONDS.into()), &AUDIO_BUCKETS)?
        .set_buckets_for_metric(Matcher::Full(stt::REAL_TIME_FACTOR.into()), &RTF_BUCKETS)?
        .set_buckets_for_metric(Matcher::Full(stt::SPEECH_TO_TEXT.into()), &LATENCY_BUCKETS)?
        .install_recorder()?;
    metrics::describe_counter!(HTTP_REQUESTS, "HTTP requests by route, method and status");
    metrics::describe_gauge!(QUEUE_DEPTH, "Speech jobs waiting for the inference worker");
    metrics::describe_gauge!(QUEUE_CAPACITY, "Queue size beyond which requests get 429");
    metrics::describe_histogram!(
        QUEUE_WAIT,
        metrics::Unit::Seconds,
        "Time jobs waited in the queue"
    );
    metrics::describe_histogram!(
        TIME_TO_FIRST_AUDIO,
        metrics::Unit::Seconds,
        "Time from receiving a speech request to its first audio bytes"
    );
    metrics::describe_counter!(engine::JOBS, "Speech jobs by outcome");
    metrics::describe_counter!(
        engine::FRAMES,
        "Frames generated (each the samples_per_frame of its model's capabilities)"
    );
    metrics::describe_histogram!(
        engine::AUDIO_SECONDS,
        metrics::Unit::Seconds,
        "Audio synthesized per job, before speed changes"
    );
    metrics::describe_histogram!(
        engine::REAL_TIME_FACTOR,
        "Synthesis time divided by audio duration, per job"
    );
    metrics::describe_gauge!(engine::MODEL_LOADED, "1 once the model is loaded");
    metrics::describe_gauge!(engine::BATCH_SIZE, "Speech jobs generating together");
    metrics::describe_gauge!(
        engine::KV_FREE_SLOTS,
        "KV-cache slots free for new jobs (0: new jobs wait)"
    );
    describe_transcription();
    Ok(handle)
}

fn describe_transcription() {
    metrics::describe_histogram!(
        stt::AUDIO_SECONDS,
        metrics::Unit::Seconds,
        "Audio transcribed per upload or live item, by api (transcriptions, realtime)"
    );
    metrics::describe_histogram!(
        stt::REAL_TIME_FACTOR,
        "Decode time a transcription took part in divided by its audio duration"
    );
    metrics::describe_histogram!(
        stt::SPEECH_TO_TEXT,
        metrics::Unit::Seconds,
        "Time from the arrival of the speech a piece of text transcribes to that text going out"
    );
    metrics::describe_gauge!(stt::LIVE_SESSIONS, "Live transcription sessions open");
    metrics::describe_gauge!(
        stt::BATCH_SIZE,
        "Utterances decoded together in the last transcription step"
    );
}

/// Keeps histogram memory bounded: the exporter drains samples on upkeep, which its own
/// HTTP listener would run but a handle-only install must run itself.
pub async fn run_upkeep(handle: PrometheusHandle) {
    let mut every = tokio::time::interval(Duration::from_secs(5));
    loop {
        every.tick().await;
        handle.run_upkeep();
    }
}

/// Middleware: counts every response by route pattern, method and status.
pub async fn count_requests(request: Request, next: Next) -> Response {
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_string(), |p| p.as_str().to_string());
    let method = request.method().to_string();
    let response = next.run(request).await;
    let status = response.status().as_u16().to_string();
    metrics::counter!(HTTP_REQUESTS, "route" => route, "method" => method, "status" => status)
        .increment(1);
    response
}
