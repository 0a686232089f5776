//! The speech server as clients see it: a real `voxtral-tts serve` process on a free port with
//! a tiny random checkpoint, called over HTTP. Audio is decoded with ffmpeg (scripts/setup.sh
//! installs it); one test drives the server with the official openai Python SDK.

use crate::common;

use common::*;
use serde_json::{json, Value};
use std::io::Read;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

#[test]
fn every_format_decodes_to_the_synthesized_length_at_the_advertised_rate() {
    let server = Server::start(&[]);
    let reference = pcm_samples(&server.speech(speech_body("nova", "pcm", 5, 10)));
    assert!(!reference.is_empty() && reference.len().is_multiple_of(FRAME));
    assert!(reference.iter().any(|&s| s != 0), "silence");
    // (format, Content-Type, decoded rate, codec frame, leading priming decoders keep)
    let formats = [
        ("mp3", "audio/mpeg", 24_000, 576, 0),
        ("opus", "audio/opus", 48_000, 480, 0),
        ("aac", "audio/aac", 24_000, 1024, 2048),
        ("flac", "audio/flac", 24_000, 2048, 0),
        ("wav", "audio/wav", 24_000, 1, 0),
    ];
    for (format, content_type, rate, frame, priming) in formats {
        let reply = server.speech(speech_body("nova", format, 5, 10));
        assert_eq!(reply.status, 200, "{format}");
        assert_eq!(reply.header("content-type"), Some(content_type), "{format}");
        let (decoded_rate, channels, samples) = decode(format, &reply.body);
        assert_eq!((decoded_rate, channels), (rate, 1), "{format}");
        let extra = samples as f64 * 24_000.0 / f64::from(rate) - reference.len() as f64;
        // Nothing lost; at most one codec frame of padding (Ogg Opus trims exactly but
        // decodes at 48 kHz, so allow a frame either way).
        let lowest = if format == "opus" {
            -(frame as f64)
        } else {
            0.0
        };
        assert!(
            extra >= lowest && extra < (priming + frame) as f64,
            "{format}: decoded {extra:+} samples @24k against the PCM's {}",
            reference.len()
        );
    }
    let mut default = speech_body("nova", "mp3", 5, 10);
    default.as_object_mut().unwrap().remove("response_format");
    let reply = server.speech(default);
    assert_eq!(
        reply.header("content-type"),
        Some("audio/mpeg"),
        "OpenAI's default is mp3"
    );
}

#[test]
fn speed_stretches_the_duration_not_the_pitch() {
    let server = Server::start(&[]);
    let with_speed = |speed: f64| {
        let mut body = speech_body("echo", "pcm", 3, 8);
        body["speed"] = json!(speed);
        pcm_samples(&server.speech(body)).len()
    };
    let normal = with_speed(1.0);
    assert_eq!(with_speed(2.0), normal / 2);
    assert_eq!(with_speed(0.5), normal * 2);
    assert_eq!(with_speed(4.0), normal / 4);
    // Same sample rate throughout: a resampling speed-up would have changed the WAV header.
    let mut wav = speech_body("echo", "wav", 3, 8);
    wav["speed"] = json!(0.25);
    let reply = server.speech(wav);
    let (rate, _, samples) = decode("wav", &reply.body);
    assert_eq!((rate, samples), (24_000, normal * 4));
}

#[test]
fn openai_voice_names_select_their_presets() {
    let server = Server::start(&[]);
    let audio = |voice: Value| {
        let mut body = speech_body("", "pcm", 2, 4);
        body["voice"] = voice;
        server.speech(body).body
    };
    let preset = audio(json!("neutral_female"));
    assert_eq!(audio(json!("alloy")), preset);
    assert_eq!(audio(json!({"id": "alloy"})), preset);
    assert_eq!(audio(json!("Sage")), preset, "names are case-insensitive");
    assert_ne!(audio(json!("onyx")), preset, "onyx is a male preset");
    assert_eq!(audio(json!("onyx")), audio(json!("neutral_male")));

    let voices = server.get("/v1/audio/voices").json();
    let data = voices["data"].as_array().unwrap();
    assert_eq!(data.len(), 20);
    let mut aliases: Vec<&str> = data
        .iter()
        .flat_map(|v| v["aliases"].as_array().unwrap())
        .map(|a| a.as_str().unwrap())
        .collect();
    aliases.sort();
    let mut expected = OPENAI_VOICES.to_vec();
    expected.sort();
    assert_eq!(
        aliases, expected,
        "each OpenAI name maps to exactly one preset"
    );
    let find = |name: &str| data.iter().find(|v| v["name"] == name).unwrap().clone();
    assert_eq!(
        find("neutral_female"),
        json!({"id": "neutral_female", "name": "neutral_female", "language": "en",
            "language_name": "English", "gender": "female", "aliases": ["alloy", "sage"]})
    );
    let hindi = find("hi_male");
    assert_eq!(
        (hindi["language"].as_str(), hindi["gender"].as_str()),
        (Some("hi"), Some("male"))
    );
    assert_eq!(find("pt_female")["language_name"], "Portuguese");
}

#[test]
fn a_seed_reproduces_the_audio_and_is_returned() {
    let server = Server::start(&[]);
    let first = server.speech(speech_body("coral", "wav", 42, 5));
    assert_eq!(first.header("x-voxtral-seed"), Some("42"));
    assert_eq!(
        server.speech(speech_body("coral", "wav", 42, 5)).body,
        first.body
    );
    assert_ne!(
        server.speech(speech_body("coral", "wav", 43, 5)).body,
        first.body
    );

    let mut unseeded = speech_body("coral", "wav", 0, 5);
    unseeded.as_object_mut().unwrap().remove("seed");
    let random = server.speech(unseeded);
    let seed: u64 = random.header("x-voxtral-seed").unwrap().parse().unwrap();
    assert_eq!(
        server.speech(speech_body("coral", "wav", seed, 5)).body,
        random.body
    );
}

#[test]
fn sse_stream_format_sends_openai_events() {
    let server = Server::start(&[]);
    // The same chunks as `stream_format: audio` (a non-streamed file is decoded in one go).
    let plain = server
        .speech(streamed(speech_body("verse", "pcm", 9, 12), "audio"))
        .body;
    let mut body = speech_body("verse", "pcm", 9, 12);
    body["stream_format"] = json!("sse");
    let reply = server.speech(body);
    assert_eq!(reply.status, 200);
    assert_eq!(reply.header("content-type"), Some("text/event-stream"));
    let text = String::from_utf8(reply.body).unwrap();
    let events: Vec<Value> = text
        .split("\n\n")
        .filter(|e| !e.is_empty())
        .map(|e| serde_json::from_str(e.strip_prefix("data: ").expect("data: line")).unwrap())
        .collect();
    let (done, deltas) = events.split_last().unwrap();
    assert!(!deltas.is_empty());
    use base64::Engine;
    let mut audio = Vec::new();
    for delta in deltas {
        assert_eq!(delta["type"], "speech.audio.delta");
        let chunk = delta["audio"].as_str().unwrap();
        audio.extend(
            base64::engine::general_purpose::STANDARD
                .decode(chunk)
                .unwrap(),
        );
    }
    assert_eq!(audio, plain, "the deltas carry the same audio");
    assert_eq!(done["type"], "speech.audio.done");
    let usage = &done["usage"];
    assert_eq!(usage["output_tokens"], json!(plain.len() / 2 / FRAME));
    assert!(usage["input_tokens"].as_u64().unwrap() > 2);
    assert_eq!(
        usage["total_tokens"].as_u64(),
        Some(usage["input_tokens"].as_u64().unwrap() + usage["output_tokens"].as_u64().unwrap())
    );
}

#[test]
fn invalid_requests_get_openai_errors_naming_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let settings = dir.path().join("server.toml");
    std::fs::write(&settings, "max_input_chars = 20\nmax_body_bytes = 2048\n").unwrap();
    let server = Server::spawn(&model(), &["--config", settings.to_str().unwrap()], &[]);
    server.wait_ready();
    let valid = json!({"model": "tts-1", "input": "Hi", "voice": "alloy", "max_frames": 2});
    let with = |field: &str, value: Value| {
        let mut body = valid.clone();
        body[field] = value;
        body
    };
    let without = |field: &str| {
        let mut body = valid.clone();
        body.as_object_mut().unwrap().remove(field);
        body
    };
    let cases = [
        (without("input"), "input"),
        (without("voice"), "voice"),
        (without("model"), "model"),
        (with("input", json!("")), "input"),
        (with("input", json!("x".repeat(21))), "input"),
        (with("input", json!(12)), "input"),
        (with("voice", json!("robot")), "voice"),
        (with("voice", json!(7)), "voice"),
        (with("voice", json!({"name": "alloy"})), "voice"),
        (with("response_format", json!("ogg")), "response_format"),
        (with("speed", json!(4.01)), "speed"),
        (with("speed", json!(0.2)), "speed"),
        (with("speed", json!("fast")), "speed"),
        (with("stream_format", json!("chunks")), "stream_format"),
        (with("max_frames", json!(0)), "max_frames"),
        (with("max_frames", json!(2049)), "max_frames"),
        (with("seed", json!(-1)), "seed"),
        (with("instructions", json!(["loud"])), "instructions"),
        (with("normalize", json!("yes")), "normalize"),
    ];
    for (body, field) in cases {
        let reply = server.speech(body.clone());
        let (kind, param, _) = reply.error(400);
        assert_eq!(kind, "invalid_request_error", "{body}");
        assert_eq!(param.as_deref(), Some(field), "{body}");
    }
    // Characters, not bytes: 20 two-byte characters are within the limit.
    assert_eq!(
        server.speech(with("input", json!("é".repeat(20)))).status,
        200
    );
    assert_eq!(server.speech(with("speed", json!(0.25))).status, 200);

    let raw = |content_type: Option<&str>, body: &str| {
        let mut request = agent().post(&server.url("/v1/audio/speech"));
        if let Some(ct) = content_type {
            request = request.set("Content-Type", ct);
        }
        send(request, Some(body.as_bytes()))
    };
    let json = valid.to_string();
    assert_eq!(
        raw(None, &json).error(415).2.as_deref(),
        Some("unsupported_media_type")
    );
    assert_eq!(
        raw(Some("text/plain"), &json).error(415).0,
        "invalid_request_error"
    );
    let form = raw(
        Some("application/x-www-form-urlencoded"),
        "input=Hi&voice=alloy",
    );
    form.error(415);
    let (_, param, code) = raw(Some("application/json"), "{\"input\": ").error(422);
    assert_eq!((param, code.as_deref()), (None, Some("invalid_json")));
    raw(Some("application/json"), "input=Hi").error(422);
    let big = json!({"model": "tts-1", "input": "x".repeat(3000), "voice": "alloy"}).to_string();
    let (_, _, code) = raw(Some("application/json"), &big).error(413);
    assert_eq!(code.as_deref(), Some("payload_too_large"));
}

#[test]
fn unknown_paths_and_methods_get_404_and_405() {
    let server = Server::start(&[]);
    let (kind, _, code) = server.get("/v1/audio/translations").error(404);
    assert_eq!(
        (kind.as_str(), code.as_deref()),
        ("invalid_request_error", Some("not_found"))
    );
    server.get("/v2/audio/speech").error(404);
    let reply = server.get("/v1/audio/speech");
    assert_eq!(reply.error(405).2.as_deref(), Some("method_not_allowed"));
    assert_eq!(reply.header("allow"), Some("POST"));
    send(agent().delete(&server.url("/v1/models")), None).error(405);
    let put = agent()
        .put(&server.url("/health"))
        .set("Content-Type", "application/json");
    send(put, Some(b"{}")).error(405);
}

#[test]
fn api_keys_guard_the_v1_routes_only() {
    let server = Server::start(&[("VOXTRAL_API_KEYS", "first-key, second-key")]);
    let (kind, _, code) = server.get("/v1/models").error(401);
    assert_eq!(
        (kind.as_str(), code.as_deref()),
        ("authentication_error", Some("missing_api_key"))
    );
    let with_key = |key: &str| {
        let request = agent()
            .get(&server.url("/v1/models"))
            .set("Authorization", &format!("Bearer {key}"));
        send(request, None)
    };
    let wrong = with_key("first");
    assert_eq!(wrong.error(401).2.as_deref(), Some("invalid_api_key"));
    assert_eq!(wrong.header("www-authenticate"), Some("Bearer"));
    assert_eq!(with_key("second-key").status, 200);
    assert_eq!(with_key("first-key").status, 200);
    let speech = agent()
        .post(&server.url("/v1/audio/speech"))
        .set("Content-Type", "application/json");
    send(speech, Some(b"{}")).error(401);
    for open in ["/health", "/ready", "/metrics", "/openapi.json"] {
        assert_eq!(server.get(open).status, 200, "{open}");
    }
    let logs = server.logs();
    assert!(
        !logs.contains("first-key") && !logs.contains("second-key"),
        "{logs}"
    );
}

#[test]
fn a_full_queue_gets_429_with_retry_after() {
    // One job at a time, so the second one waits in the queue.
    let server = Server::start(&[
        ("VOXTRAL_QUEUE_CAPACITY", "1"),
        ("VOXTRAL_MAX_BATCH_SIZE", "1"),
    ]);
    // Long jobs, abandoned when the server is killed at the end: the threads get only the URL.
    let start_long_job = || {
        let url = server.url("/v1/audio/speech");
        let body = speech_body("alloy", "pcm", 1, 2048).to_string();
        std::thread::spawn(move || {
            let request = agent().post(&url).set("Content-Type", "application/json");
            let _ = request.send_string(&body);
        });
    };
    let started = || metric(&server.metrics(), "speech_queue_wait_seconds_count", &[]);
    // One job running, one waiting: the queue (capacity 1) is full.
    start_long_job();
    server.wait_for("the first job to start", || started() == Some(1.0));
    start_long_job();
    server.wait_for("a job to wait in the queue", || {
        metric(&server.metrics(), "speech_queue_depth", &[]) == Some(1.0)
    });
    let reply = server.speech(speech_body("alloy", "pcm", 1, 2));
    let (kind, _, code) = reply.error(429);
    assert_eq!(
        (kind.as_str(), code.as_deref()),
        ("rate_limit_error", Some("queue_full"))
    );
    assert_eq!(reply.header("retry-after"), Some("1"));
    let metrics = server.metrics();
    let rejected = [("route", "/v1/audio/speech"), ("status", "429")];
    assert_eq!(
        metric(&metrics, "speech_http_requests_total", &rejected),
        Some(1.0)
    );
}

#[test]
fn a_panic_in_the_worker_fails_only_that_request() {
    let server = Server::start(&[("VOXTRAL_TEST_PANIC_ON_INPUT", "please panic")]);
    let mut body = speech_body("alloy", "wav", 1, 3);
    body["input"] = json!("please panic");
    let reply = server.speech(body);
    let (kind, _, code) = reply.error(500);
    assert_eq!(
        (kind.as_str(), code.as_deref()),
        ("server_error", Some("internal_error"))
    );
    assert!(String::from_utf8_lossy(&reply.body).contains("panicked"));
    for _ in 0..2 {
        assert_eq!(server.speech(speech_body("alloy", "wav", 1, 3)).status, 200);
    }
    let metrics = server.metrics();
    let jobs = |outcome| metric(&metrics, "speech_jobs_total", &[("outcome", outcome)]);
    assert_eq!(
        (jobs("panicked"), jobs("completed")),
        (Some(1.0), Some(2.0))
    );
}

#[test]
fn requests_get_503_until_the_model_is_loaded() {
    // tekken.json is a FIFO: the worker's loading blocks reading it until the test writes the
    // real file. (params.json is read before listening: it tells the model's family.)
    let tiny = model();
    let dir = tempfile::tempdir().unwrap();
    for entry in ["consolidated.safetensors", "params.json", "voice_embedding"] {
        std::os::unix::fs::symlink(tiny.join(entry), dir.path().join(entry)).unwrap();
    }
    let fifo = dir.path().join("tekken.json");
    assert!(Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    let server = Server::spawn(dir.path(), &[], &[]);
    assert_eq!(server.get("/health").status, 200);
    assert_eq!(
        server.get("/ready").error(503).2.as_deref(),
        Some("model_loading")
    );
    let reply = server.speech(speech_body("alloy", "wav", 1, 2));
    assert_eq!(reply.error(503).2.as_deref(), Some("model_loading"));
    assert!(reply.header("retry-after").is_some());
    server.get("/v1/audio/voices").error(503);
    assert_eq!(
        server.get("/v1/models").status,
        200,
        "the model list needs no model"
    );
    // Loading is a state, not a failure: a readiness probe polling it logs no error or warning.
    let logs = server.logs();
    assert!(
        !logs.contains("ERROR") && !logs.contains("WARN"),
        "503s while loading logged as failures:\n{logs}"
    );
    std::fs::write(&fifo, std::fs::read(tiny.join("tekken.json")).unwrap()).unwrap();
    server.wait_ready();
    assert_eq!(server.speech(speech_body("alloy", "wav", 1, 2)).status, 200);
}

#[test]
fn a_model_that_fails_to_load_stops_the_server_with_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::spawn(&dir.path().join("missing"), &[], &[]);
    let status = server.wait_exit();
    assert!(!status.success());
    let logs = server.logs();
    let last = logs.trim().lines().last().unwrap();
    assert!(
        last.starts_with("error: loading the model failed") && last.contains("missing"),
        "{logs}"
    );
}

#[test]
fn sigterm_finishes_in_flight_requests_and_refuses_new_ones() {
    // One job at a time, so the second one is still queued when SIGTERM arrives.
    let mut server = Server::start(&[("VOXTRAL_MAX_BATCH_SIZE", "1")]);
    let server_ref = &server;
    let (in_flight, streamed_reply) = std::thread::scope(|scope| {
        let request = scope.spawn(|| server_ref.speech(speech_body("ash", "pcm", 4, 150)));
        server_ref.wait_for("the job to start", || {
            metric(
                &server_ref.metrics(),
                "speech_queue_wait_seconds_count",
                &[],
            ) == Some(1.0)
        });
        // Queued behind it: a streamed response is in flight until its last byte, not
        // just its headers.
        let streaming =
            scope.spawn(|| server_ref.speech(streamed(speech_body("ash", "pcm", 4, 100), "audio")));
        server_ref.wait_for("the second job to queue", || {
            metric(&server_ref.metrics(), "speech_queue_depth", &[]) == Some(1.0)
        });
        server_ref.signal("-TERM");
        server_ref.wait_for("draining", || server_ref.get("/ready").status == 503);
        let refused = server_ref.speech(speech_body("ash", "pcm", 4, 2));
        assert_eq!(refused.error(503).2.as_deref(), Some("shutting_down"));
        assert_eq!(server_ref.get("/health").status, 200);
        (request.join().unwrap(), streaming.join().unwrap())
    });
    assert_eq!(
        pcm_samples(&streamed_reply).len(),
        100 * FRAME,
        "the stream finished in full"
    );
    assert_eq!(
        pcm_samples(&in_flight).len(),
        150 * FRAME,
        "finished in full"
    );
    assert!(server.wait_exit().success(), "{}", server.logs());
    assert!(server.logs().contains("draining"));
}

#[test]
fn a_client_that_goes_away_cancels_its_job() {
    let server = Server::start(&[]);
    let impatient = ureq::AgentBuilder::new()
        .timeout(Duration::from_millis(500))
        .build()
        .post(&server.url("/v1/audio/speech"))
        .set("Content-Type", "application/json");
    let body = speech_body("fable", "pcm", 8, 2048).to_string();
    assert!(
        impatient.send_string(&body).is_err(),
        "gave up after 500 ms"
    );
    server.wait_for("the job to be cancelled", || {
        jobs(&server, "cancelled") == 1.0
    });
    let frames = metric(&server.metrics(), "speech_frames_generated_total", &[]).unwrap();
    assert!(frames < 2048.0, "stopped early: {frames} frames");
    assert_eq!(server.speech(speech_body("fable", "pcm", 8, 3)).status, 200);
}

#[test]
fn a_request_past_the_timeout_gets_504_and_its_job_stops() {
    let server = Server::start(&[("VOXTRAL_REQUEST_TIMEOUT_SECS", "1")]);
    let started = Instant::now();
    let reply = server.speech(speech_body("fable", "pcm", 8, 2048));
    assert_eq!(reply.error(504).2.as_deref(), Some("timeout"));
    assert!(started.elapsed() < Duration::from_secs(30));
    server.wait_for("the job to be cancelled", || {
        jobs(&server, "cancelled") == 1.0
    });
}

#[test]
fn metrics_count_requests_frames_and_latencies() {
    let server = Server::start(&[]);
    assert_eq!(server.speech(speech_body("marin", "wav", 1, 6)).status, 200);
    server.speech(speech_body("nobody", "wav", 1, 6)).error(400);
    let text = server.metrics();
    let speech = |status| {
        let labels = [
            ("route", "/v1/audio/speech"),
            ("method", "POST"),
            ("status", status),
        ];
        metric(&text, "speech_http_requests_total", &labels)
    };
    assert_eq!((speech("200"), speech("400")), (Some(1.0), Some(1.0)));
    let model = [("model", "mistralai/Voxtral-4B-TTS-2603")];
    assert_eq!(
        metric(&text, "speech_frames_generated_total", &model),
        Some(6.0)
    );
    assert_eq!(metric(&text, "speech_queue_depth", &[]), Some(0.0));
    assert_eq!(metric(&text, "speech_queue_capacity", &[]), Some(16.0));
    assert_eq!(metric(&text, "speech_model_loaded", &[]), Some(1.0));
    let audio = metric(&text, "speech_audio_duration_seconds_sum", &[]).unwrap();
    assert!((audio - 0.48).abs() < 1e-9, "6 frames of 80 ms: {audio}");
    for histogram in [
        "speech_real_time_factor",
        "speech_time_to_first_audio_seconds",
        "speech_queue_wait_seconds",
    ] {
        assert!(
            text.contains(&format!("# TYPE {histogram} histogram")),
            "{text}"
        );
        let count = metric(&text, &format!("{histogram}_count"), &[]);
        assert_eq!(count, Some(1.0), "{histogram}");
    }
}

#[test]
fn models_health_docs_and_the_committed_openapi_document() {
    let server = Server::start(&[("VOXTRAL_MODEL_ID", "voxtral-test")]);
    assert_eq!(server.get("/health").json(), json!({"status": "ok"}));
    assert_eq!(server.get("/ready").json(), json!({"status": "ready"}));
    let models = server.get("/v1/models").json();
    assert_eq!(models["object"], "list");
    let ids = model_ids(&models);
    assert_eq!(
        ids,
        ["voxtral-test", "tts-1", "tts-1-hd", "gpt-4o-mini-tts"]
    );
    assert_eq!(models["data"][0]["object"], "model");

    let committed =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("openapi/openapi.json"))
            .unwrap();
    let committed: Value = serde_json::from_str(&committed).unwrap();
    assert_eq!(server.get("/openapi.json").json(), committed);

    // The docs page and its scripts come from the server itself (works offline).
    let page = server.get("/docs/");
    assert_eq!(page.status, 200);
    assert!(String::from_utf8_lossy(&page.body).contains("swagger-ui"));
    for asset in ["/docs/swagger-ui-bundle.js", "/docs/swagger-ui.css"] {
        let reply = server.get(asset);
        assert_eq!(reply.status, 200, "{asset}");
        assert!(reply.body.len() > 10_000, "{asset}");
    }
}

#[test]
fn cors_and_request_ids() {
    let server = Server::start(&[("VOXTRAL_CORS_ORIGINS", "https://app.example")]);
    let preflight = agent()
        .request("OPTIONS", &server.url("/v1/audio/speech"))
        .set("Origin", "https://app.example")
        .set("Access-Control-Request-Method", "POST")
        .set(
            "Access-Control-Request-Headers",
            "authorization, content-type",
        );
    let reply = send(preflight, None);
    assert_eq!(reply.status, 200);
    assert_eq!(
        reply.header("access-control-allow-origin"),
        Some("https://app.example")
    );
    let from = |origin: &str| {
        let request = agent().get(&server.url("/v1/models")).set("Origin", origin);
        send(request, None)
    };
    assert_eq!(
        from("https://app.example").header("access-control-allow-origin"),
        Some("https://app.example")
    );
    assert_eq!(
        from("https://evil.example").header("access-control-allow-origin"),
        None
    );

    let generated = server.get("/health");
    let id = generated.header("x-request-id").expect("a request id");
    assert_eq!(id.len(), 36, "a UUID: {id}");
    let given = send(
        agent()
            .get(&server.url("/v1/models"))
            .set("x-request-id", "trace-me-123"),
        None,
    );
    assert_eq!(given.header("x-request-id"), Some("trace-me-123"));
    server.wait_for("the id in the request's log span", || {
        server.logs().contains("trace-me-123")
    });
}

#[test]
fn openai_python_sdk_works_unchanged() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let sdk = root.join(".deps/pyclient");
    assert!(
        sdk.join("openai").is_dir(),
        "the openai SDK is missing from {}: run scripts/setup.sh",
        sdk.display()
    );
    let server = Server::start(&[("VOXTRAL_API_KEYS", "sdk-test-key")]);
    let out = Command::new("python3")
        .arg(root.join("tests/sdk/openai_client.py"))
        .env("PYTHONPATH", &sdk)
        .env("SERVER_BASE_URL", &server.base)
        .env("SERVER_API_KEY", "sdk-test-key")
        .output()
        .expect("python3 is needed for the SDK test");
    assert!(
        out.status.success(),
        "SDK client failed:\n{}\n{}\nserver log:\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
        server.logs()
    );
}

/// Posts a speech request and returns the open response (status, headers, body reader).
fn open_speech(server: &Server, body: &Value) -> ureq::Response {
    let request = agent()
        .post(&server.url("/v1/audio/speech"))
        .set("Content-Type", "application/json");
    match request.send_string(&body.to_string()) {
        Ok(r) | Err(ureq::Error::Status(_, r)) => r,
        Err(e) => panic!("request failed: {e}"),
    }
}

/// The SSE events of a body, parsed.
fn sse_events(body: &[u8]) -> Vec<Value> {
    String::from_utf8(body.to_vec())
        .unwrap()
        .split("\n\n")
        .filter(|e| !e.is_empty())
        .map(|e| serde_json::from_str(e.strip_prefix("data: ").expect("data: line")).unwrap())
        .collect()
}

fn base64_decode(text: &str) -> Vec<u8> {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD
        .decode(text)
        .unwrap()
}

#[test]
fn streamed_pcm_equals_the_file_and_the_one_shot_decode() {
    // 40 frames: chunks of 4, 8, 16 and 12 frames; the file is decoded in one go. In f32,
    // where chunked and one-shot decodes agree within 1e-4: in bf16 the codec's rounding
    // depends on how much context a decode sees.
    let server = Server::start(&[("VOXTRAL_DTYPE", "f32")]);
    let body = speech_body("nova", "pcm", 21, 40);
    let file = pcm_samples(&server.speech(body.clone()));
    assert!(file.len() > 20 * FRAME, "{} samples", file.len());
    let reply = server.speech(streamed(body.clone(), "audio"));
    assert_eq!(reply.header("transfer-encoding"), Some("chunked"));
    assert_eq!(reply.header("x-voxtral-seed"), Some("21"));
    let chunked = pcm_samples(&reply);
    let worst = max_lsb_diff(&chunked, &file);
    assert!(worst <= 4, "chunked vs one-shot: {worst} LSB apart");
    // SSE: the first delta is the first chunk, 4 frames, sent on its own.
    let reply = server.speech(streamed(body.clone(), "sse"));
    let events = sse_events(&reply.body);
    let first = base64_decode(events[0]["audio"].as_str().unwrap());
    // (less the 10 ms held back for a crossfade with a possible next segment)
    assert_eq!(first.len(), (4 * FRAME - 240) * 2, "first chunk: 4 frames");
    let mut audio = Vec::new();
    for delta in &events[..events.len() - 1] {
        assert_eq!(delta["type"], "speech.audio.delta");
        audio.extend(base64_decode(delta["audio"].as_str().unwrap()));
    }
    let samples: Vec<i16> = audio
        .chunks_exact(2)
        .map(|b| i16::from_le_bytes([b[0], b[1]]))
        .collect();
    assert_eq!(samples, chunked, "SSE deltas == the streamed audio");
}

#[test]
fn every_format_streams_and_the_stream_decodes_cleanly() {
    let server = Server::start(&[]);
    let reference = pcm_samples(&server.speech(speech_body("nova", "pcm", 5, 30)));
    // (format, Content-Type, decoded rate, codec frame, leading priming decoders keep):
    // a streamed MP3 has no LAME tag, so decoders keep the encoder delay and padding.
    let formats = [
        ("mp3", "audio/mpeg", 24_000, 576, 1728),
        ("opus", "audio/opus", 48_000, 480, 0),
        ("aac", "audio/aac", 24_000, 1024, 2048),
        ("flac", "audio/flac", 24_000, 2048, 0),
        ("wav", "audio/wav", 24_000, 1, 0),
        ("pcm", "audio/pcm", 24_000, 1, 0),
    ];
    for (format, content_type, rate, frame, priming) in formats {
        let reply = server.speech(streamed(speech_body("nova", format, 5, 30), "audio"));
        assert_eq!(reply.status, 200, "{format}");
        assert_eq!(reply.header("content-type"), Some(content_type), "{format}");
        assert_eq!(
            reply.header("transfer-encoding"),
            Some("chunked"),
            "{format}"
        );
        if format == "wav" {
            assert_eq!(&reply.body[4..8], &[0xFF; 4], "RIFF size unknown");
        }
        let samples = if format == "pcm" {
            reply.body.len() / 2
        } else {
            let (decoded_rate, channels, samples) = decode(format, &reply.body);
            assert_eq!((decoded_rate, channels), (rate, 1), "{format}");
            samples * 24_000 / rate as usize
        };
        let extra = samples as f64 - reference.len() as f64;
        let lowest = if format == "opus" {
            -(frame as f64)
        } else {
            0.0
        };
        assert!(
            extra >= lowest && extra < (priming + frame) as f64,
            "{format}: decoded {extra:+} samples @24k against the PCM's {}",
            reference.len()
        );
    }
    // A speed change streams too (the stretched clip at the end).
    let mut body = streamed(speech_body("nova", "pcm", 5, 30), "audio");
    body["speed"] = json!(2.0);
    let fast = server.speech(body);
    assert_eq!(fast.status, 200);
    let ratio = fast.body.len() as f64 / 2.0 / reference.len() as f64;
    assert!((ratio - 0.5).abs() < 0.05, "speed 2: {ratio}");
}

#[test]
fn errors_before_the_first_audio_keep_their_status_when_streaming() {
    let server = Server::start(&[("VOXTRAL_TEST_PANIC_ON_INPUT", "boom")]);
    let mut body = streamed(speech_body("nova", "mp3", 1, 5), "sse");
    body["input"] = json!("boom");
    assert_eq!(server.speech(body).error(500).0, "server_error");
    let body = streamed(speech_body("nobody", "mp3", 1, 5), "audio");
    server.speech(body).error(400);
}

#[test]
fn a_streaming_client_that_disconnects_frees_the_worker_at_once() {
    let server = Server::start(&[]);
    let response = open_speech(
        &server,
        &streamed(speech_body("fable", "pcm", 8, 2048), "audio"),
    );
    assert_eq!(response.status(), 200);
    let mut reader = response.into_reader();
    let mut first = vec![0u8; 4 * FRAME * 2];
    reader.read_exact(&mut first).unwrap();
    drop(reader);
    server.wait_for("the job to be cancelled", || {
        jobs(&server, "cancelled") == 1.0
    });
    let frames = metric(&server.metrics(), "speech_frames_generated_total", &[]).unwrap();
    assert!(frames < 2048.0, "stopped early: {frames} frames");
    let started = Instant::now();
    let next = server.speech(speech_body("fable", "pcm", 8, 3));
    assert_eq!(next.status, 200);
    assert!(started.elapsed() < Duration::from_secs(20));
}

#[test]
fn long_input_is_split_into_segments_and_streams_the_same() {
    // f32: streamed segments are decoded in chunks, the file's in one go (see above).
    let server = Server::start(&[("VOXTRAL_SEGMENT_CHARS", "40"), ("VOXTRAL_DTYPE", "f32")]);
    let input = "The first sentence is here. A second one follows it. \
        Then a **third**, with markup! And a fourth to end the text.";
    let mut body = speech_body("nova", "pcm", 3, 6);
    body["input"] = json!(input);
    let file = pcm_samples(&server.speech(body.clone()));
    assert!(
        file.len() > 2 * 6 * FRAME,
        "every segment speaks: {} samples",
        file.len()
    );
    let reply = server.speech(streamed(body.clone(), "sse"));
    let events = sse_events(&reply.body);
    let (done, deltas) = events.split_last().unwrap();
    let audio: Vec<u8> = deltas
        .iter()
        .flat_map(|d| base64_decode(d["audio"].as_str().unwrap()))
        .collect();
    assert_eq!(audio.len(), file.len() * 2, "streamed == not streamed");
    let samples: Vec<i16> = audio
        .chunks_exact(2)
        .map(|b| i16::from_le_bytes([b[0], b[1]]))
        .collect();
    let worst = max_lsb_diff(&samples, &file);
    assert!(worst <= 4, "streamed vs not streamed: {worst} LSB apart");
    let frames = done["usage"]["output_tokens"].as_u64().unwrap();
    assert!(frames > 12, "frames of every segment: {frames}");
}

#[test]
fn a_request_can_switch_text_normalization_off_and_on() {
    let server = Server::start(&[]);
    let input_tokens = |normalize: Option<bool>| {
        let mut body = speech_body("nova", "pcm", 3, 2);
        body["input"] = json!("**Bold** words and a link: https://example.com/a/b?c=d");
        if let Some(normalize) = normalize {
            body["normalize"] = json!(normalize);
        }
        let reply = server.speech(streamed(body, "sse"));
        assert_eq!(reply.status, 200);
        let events = sse_events(&reply.body);
        events.last().unwrap()["usage"]["input_tokens"]
            .as_u64()
            .unwrap()
    };
    let (default, on, off) = (
        input_tokens(None),
        input_tokens(Some(true)),
        input_tokens(Some(false)),
    );
    assert_eq!(default, on, "normalization is on by default");
    assert!(
        off > on,
        "the raw markup and URL take more tokens: {off} vs {on}"
    );
}

#[test]
fn several_models_are_served_by_id_and_an_unknown_model_is_404() {
    let odd = voxtral_tts::models::voxtral_tts::testkit::cached_test_model(
        voxtral_tts::models::voxtral_tts::testkit::Preset::TinyOdd,
        0,
    )
    .unwrap();
    let server = Server::spawn(
        &model(),
        &["--model", odd.to_str().unwrap()],
        &[("VOXTRAL_MODEL_ID", "main,odd")],
    );
    server.wait_ready();
    let models = server.get("/v1/models").json();
    let ids = model_ids(&models);
    assert_eq!(ids, ["main", "odd", "tts-1", "tts-1-hd", "gpt-4o-mini-tts"]);
    let (main, second) = (&models["data"][0], &models["data"][1]);
    assert_eq!(
        (main["family"].as_str(), main["owned_by"].as_str()),
        (Some("voxtral-tts"), Some("mistralai"))
    );
    assert_eq!(
        main["aliases"],
        json!(["tts-1", "tts-1-hd", "gpt-4o-mini-tts"])
    );
    assert_eq!(second["aliases"], json!([]));
    let capabilities = &second["capabilities"];
    assert_eq!(capabilities["sample_rate"], 24_000);
    assert_eq!(capabilities["samples_per_frame"], 1920);
    // Voxtral speaks each preset's own language: a request's `language` is ignored.
    assert_eq!(capabilities["language_input"], false);
    assert_eq!(capabilities["cloning"], false);
    assert_eq!(capabilities["voices"].as_array().unwrap().len(), 20);
    assert_eq!(models["data"][2]["parent"], "main");

    // Routed by `model`: OpenAI's names mean the first model; the second answers differently.
    let speak = |model: &str| {
        let mut body = speech_body("alloy", "pcm", 5, 6);
        body["model"] = json!(model);
        server.speech(body)
    };
    let main_audio = pcm_samples(&speak("main"));
    assert_eq!(pcm_samples(&speak("tts-1")), main_audio);
    assert_ne!(pcm_samples(&speak("odd")), main_audio);
    let (kind, param, code) = speak("whisper-1").error(404);
    assert_eq!(
        (kind.as_str(), param.as_deref(), code.as_deref()),
        (
            "invalid_request_error",
            Some("model"),
            Some("model_not_found")
        )
    );
    assert_eq!(server.get("/v1/audio/voices?model=odd").status, 200);
    server.get("/v1/audio/voices?model=nope").error(404);
    let frames = |model| {
        metric(
            &server.metrics(),
            "speech_frames_generated_total",
            &[("model", model)],
        )
    };
    assert_eq!(frames("odd").map(|f| f > 0.0), Some(true));
    assert!(frames("main").is_some());
}

#[test]
fn synth_on_the_command_line_gives_the_server_s_audio() {
    // Markup, two sentences and short segments: normalization, splitting and crossfades.
    let text = "# Hello\n\nThis is **the first** sentence. And here is a second one!";
    let server = Server::start(&[("VOXTRAL_SEGMENT_CHARS", "24")]);
    let reply = server.speech(json!({"model": "tts-1", "input": text, "voice": "fr_male",
        "response_format": "wav", "seed": 3, "max_frames": 8}));
    reply.assert_ok();
    let dir = tempfile::tempdir().unwrap();
    let wav = dir.path().join("cli.wav");
    let status = Command::new(env!("CARGO_BIN_EXE_voxtral-tts"))
        .args([
            "synth",
            "--voice",
            "fr_male",
            "--seed",
            "3",
            "--max-frames",
            "8",
        ])
        .args(["--segment-chars", "24", "--text", text, "--model"])
        .arg(model())
        .arg("--output")
        .arg(&wav)
        .status()
        .unwrap();
    assert!(status.success());
    let cli = std::fs::read(&wav).unwrap();
    assert!(reply.body.len() > 44 + 3 * 2 * FRAME, "several segments");
    assert!(cli == reply.body, "synth and the server differ");

    // Input that is empty once normalized is refused before it is queued.
    let (_, param, _) = server
        .speech(json!({"model": "tts-1", "input": "** **", "voice": "alloy"}))
        .error(400);
    assert_eq!(param.as_deref(), Some("input"));
}

/// The ids a /v1/models answer lists, in order.
fn model_ids(models: &Value) -> Vec<&str> {
    models["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect()
}
