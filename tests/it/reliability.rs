//! Short versions of the reliability checks (docs/reliability.md has the long ones): overload,
//! disconnects, SIGTERM under load, broken model folders at startup, hostile input. Each runs
//! the real `voxtral-tts serve` on the tiny random model.

use crate::common;

use common::*;
use serde_json::{json, Value};
use std::io::Read;
use std::path::Path;
use std::sync::Barrier;
use std::time::{Duration, Instant};

/// The server still answers a small request at once.
fn assert_healthy(server: &Server) {
    let reply = server.speech(speech_body("alloy", "pcm", 1, 2));
    reply.assert_ok();
    assert_eq!(reply.body.len(), 2 * 2 * FRAME);
}

#[test]
fn sixty_four_clients_against_a_queue_of_sixteen() {
    let server = Server::start(&[
        ("VOXTRAL_QUEUE_CAPACITY", "16"),
        ("VOXTRAL_MAX_BATCH_SIZE", "4"),
    ]);
    let clients = 64;
    let frames = 12;
    let barrier = Barrier::new(clients);
    let replies: Vec<Reply> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..clients)
            .map(|i| {
                let (server, barrier) = (&server, &barrier);
                scope.spawn(move || {
                    let mut body = speech_body("alloy", "wav", i as u64, frames);
                    if i % 2 == 1 {
                        body = streamed(body, "audio");
                    }
                    barrier.wait();
                    server.speech(body)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut accepted = 0;
    for reply in &replies {
        match reply.status {
            200 => {
                accepted += 1;
                let (rate, channels, samples) = decode("wav", &reply.body);
                assert_eq!((rate, channels), (24_000, 1));
                assert_eq!(samples, frames * FRAME);
            }
            429 => {
                reply.error(429);
                assert_eq!(reply.header("retry-after"), Some("1"));
            }
            other => panic!("status {other}: {}", String::from_utf8_lossy(&reply.body)),
        }
    }
    // At least the queue's 16 plus what the worker had taken; the rest were refused.
    assert!(accepted >= 16, "only {accepted} accepted");
    assert!(
        accepted < clients,
        "nothing was refused: the queue bound did not hold"
    );
    assert_eq!(jobs(&server, "completed"), accepted as f64);
    assert_healthy(&server);
}

#[test]
fn a_hundred_mid_stream_disconnects_leave_no_stuck_slot() {
    // Small chunks: a job notices its client is gone at the next write that fails.
    let server = Server::start(&[
        ("VOXTRAL_MAX_BATCH_SIZE", "4"),
        ("VOXTRAL_FIRST_CHUNK_FRAMES", "1"),
        ("VOXTRAL_CHUNK_FRAMES", "2"),
    ]);
    // The test checkpoint never ends a stream before its 2048 frames: every job is still
    // running when its client hangs up.
    let seeds: Vec<u64> = (0..100).collect();
    let completed_before = jobs(&server, "completed");
    let hang_up = |seed: u64| {
        let body = streamed(speech_body("echo", "mp3", seed, 2048), "audio");
        let response = agent()
            .post(&server.url("/v1/audio/speech"))
            .set("Content-Type", "application/json")
            .send_string(&body.to_string())
            .unwrap();
        let mut first = [0u8; 256];
        let n = response.into_reader().read(&mut first).unwrap();
        assert!(n > 0, "the stream started");
        // Dropping the reader closes the connection mid-stream.
    };
    for round in 0..25 {
        std::thread::scope(|scope| {
            for seed in &seeds[round * 4..][..4] {
                scope.spawn(move || hang_up(*seed));
            }
        });
    }
    server.wait_for("every job to be cancelled", || {
        jobs(&server, "cancelled") == 100.0
    });
    server.wait_for("the batch to empty and every KV slot to come back", || {
        let text = server.metrics();
        metric(&text, "speech_batch_size", &[]) == Some(0.0)
            && metric(&text, "speech_kv_free_slots", &[]) == Some(4.0)
    });
    let started = Instant::now();
    assert_healthy(&server);
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "the next request waited for abandoned jobs"
    );
    assert_eq!(jobs(&server, "completed"), completed_before + 1.0);
}

#[test]
fn sigterm_under_load_finishes_every_accepted_request_and_exits_zero() {
    let mut server = Server::start(&[("VOXTRAL_MAX_BATCH_SIZE", "4")]);
    let server_ref = &server;
    let before = metric(&server.metrics(), "speech_queue_wait_seconds_count", &[]).unwrap_or(0.0);
    let replies: Vec<Reply> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..8)
            .map(|i| {
                scope.spawn(move || {
                    let body = speech_body("onyx", "pcm", i, 60);
                    server_ref.speech(if i % 2 == 0 {
                        body
                    } else {
                        streamed(body, "audio")
                    })
                })
            })
            .collect();
        server_ref.wait_for("every request to be taken", || {
            let text = server_ref.metrics();
            let started = metric(&text, "speech_queue_wait_seconds_count", &[]).unwrap_or(0.0);
            let queued = metric(&text, "speech_queue_depth", &[]).unwrap_or(0.0);
            started - before + queued == 8.0
        });
        server_ref.signal("-TERM");
        server_ref.wait_for("draining", || server_ref.get("/ready").status == 503);
        let refused = server_ref.speech(speech_body("onyx", "pcm", 99, 2));
        assert_eq!(refused.error(503).2.as_deref(), Some("shutting_down"));
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    // Every request's 60 frames (the test checkpoint never stops before max_frames).
    for reply in &replies {
        assert_eq!(pcm_samples(reply).len(), 60 * FRAME, "finished in full");
    }
    assert!(server.wait_exit().success(), "{}", server.logs());
}

/// Announces a body of `size` bytes over a raw socket and sends only its first bytes: a
/// server that reads the whole body would wait; one that refuses by Content-Length answers
/// at once. Returns the response as text.
fn post_oversized(url: &str, size: usize, key: &str) -> String {
    use std::io::Write;
    let address = url.trim_start_matches("http://").split('/').next().unwrap();
    let mut stream = std::net::TcpStream::connect(address).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let head = format!(
        "POST /v1/audio/speech HTTP/1.1\r\nHost: {address}\r\nContent-Type: application/json\r\n\
         Authorization: Bearer {key}\r\nContent-Length: {size}\r\nConnection: close\r\n\r\n"
    );
    stream.write_all(head.as_bytes()).unwrap();
    stream.write_all(b"{  ").unwrap();
    let mut reply = Vec::new();
    let _ = stream.read_to_end(&mut reply);
    String::from_utf8_lossy(&reply).into_owned()
}

/// A copy of the tiny model folder broken by `breakage`.
fn broken_model(breakage: impl FnOnce(&Path)) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    copy_dir(&model(), dir.path());
    breakage(dir.path());
    dir
}

fn edit_params(dir: &Path, edit: impl FnOnce(&mut Value)) {
    let path = dir.join("params.json");
    let mut params: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    edit(&mut params);
    std::fs::write(path, params.to_string()).unwrap();
}

#[test]
fn a_broken_model_folder_stops_the_server_with_one_clear_error() {
    let cases: Vec<(&str, tempfile::TempDir, &[&str])> = vec![
        (
            "truncated checkpoint",
            broken_model(|d| {
                let path = d.join("consolidated.safetensors");
                let bytes = std::fs::read(&path).unwrap();
                std::fs::write(&path, &bytes[..bytes.len() / 2]).unwrap();
            }),
            &["consolidated.safetensors"],
        ),
        (
            "corrupt checkpoint",
            broken_model(|d| {
                std::fs::write(d.join("consolidated.safetensors"), [0xffu8; 64]).unwrap()
            }),
            &["consolidated.safetensors"],
        ),
        (
            "wrong tensor shapes",
            broken_model(|d| edit_params(d, |p| p["hidden_dim"] = json!(128))),
            &["consolidated.safetensors", "shape"],
        ),
        (
            "missing tekken.json",
            broken_model(|d| std::fs::remove_file(d.join("tekken.json")).unwrap()),
            &["tekken.json"],
        ),
        (
            "missing voice file",
            broken_model(|d| {
                for ext in ["pt", "safetensors"] {
                    let _ = std::fs::remove_file(d.join(format!("voice_embedding/fr_male.{ext}")));
                }
            }),
            &["fr_male"],
        ),
        (
            "corrupt params.json",
            broken_model(|d| std::fs::write(d.join("params.json"), "{\"dim\": ").unwrap()),
            &["params.json"],
        ),
    ];
    for (what, dir, names) in cases {
        let mut server = Server::spawn(dir.path(), &[], &[]);
        let status = server.wait_exit();
        let logs = server.logs();
        assert!(!status.success(), "{what}: exited 0\n{logs}");
        let last = logs.trim().lines().last().unwrap_or_default();
        assert!(
            last.starts_with("error: loading the model failed"),
            "{what}: {logs}"
        );
        for name in names {
            assert!(last.contains(name), "{what}: {last:?} should name {name}");
        }
        assert!(!logs.contains("panicked"), "{what}: {logs}");
    }
}

#[test]
fn hostile_input_gets_clear_errors_and_never_a_5xx() {
    let dir = tempfile::tempdir().unwrap();
    let settings = dir.path().join("server.toml");
    std::fs::write(
        &settings,
        "max_body_bytes = 1048576\napi_keys = [\"hostile-secret-key\"]\n",
    )
    .unwrap();
    let server = Server::spawn(&model(), &["--config", settings.to_str().unwrap()], &[]);
    server.wait_ready();
    let post = |body: &[u8], content_type: &str, key: &str| {
        let request = agent()
            .post(&server.url("/v1/audio/speech"))
            .set("Content-Type", content_type)
            .set("Authorization", &format!("Bearer {key}"));
        send(request, Some(body))
    };
    let key = "hostile-secret-key";
    let with = |field: &str, value: Value| {
        let mut body = speech_body("alloy", "pcm", 1, 2);
        body[field] = value;
        body.to_string().into_bytes()
    };
    let mut nested = "[".repeat(100_000);
    nested.push_str(&"]".repeat(100_000));
    let deep = format!("{{\"model\": \"tts-1\", \"input\": {nested}, \"voice\": \"alloy\"}}");
    let deep_object = "{\"a\":".repeat(50_000) + &"}".repeat(50_000);
    let mut invalid_utf8 = br#"{"model": "tts-1", "voice": "alloy", "input": "caf"#.to_vec();
    invalid_utf8.extend_from_slice(&[0xc3, 0x28, 0xff]);
    invalid_utf8.extend_from_slice(br#""}"#);
    // (what, body, expected status, param)
    let refused: Vec<(&str, Vec<u8>, u16, Option<&str>)> = vec![
        ("deeply nested input", deep.into_bytes(), 400, Some("input")),
        ("deeply nested body", deep_object.into_bytes(), 422, None),
        ("nested body", nested.into_bytes(), 400, None),
        ("invalid UTF-8", invalid_utf8, 422, None),
        (
            "100k characters",
            with("input", json!("a".repeat(100_000))),
            400,
            Some("input"),
        ),
        (
            "path as voice",
            with("voice", json!("../../etc/passwd")),
            400,
            Some("voice"),
        ),
        (
            "absolute voice path",
            with("voice", json!("/etc/passwd")),
            400,
            Some("voice"),
        ),
        (
            "NaN speed",
            br#"{"model":"tts-1","input":"hi","voice":"alloy","speed":NaN}"#.to_vec(),
            422,
            None,
        ),
        (
            "huge speed",
            with("speed", json!(1e308)),
            400,
            Some("speed"),
        ),
        (
            "overflowing speed",
            br#"{"model":"tts-1","input":"hi","voice":"alloy","speed":1e999}"#.to_vec(),
            422,
            None,
        ),
        (
            "negative speed",
            with("speed", json!(-1.0)),
            400,
            Some("speed"),
        ),
        (
            "huge max_frames",
            with("max_frames", json!(u64::MAX)),
            400,
            Some("max_frames"),
        ),
    ];
    for (what, body, status, param) in refused {
        let reply = post(&body, "application/json", key);
        let (_, got_param, _) = reply.error(status);
        if param.is_some() {
            assert_eq!(got_param.as_deref(), param, "{what}");
        }
    }
    // A body over the limit is refused from its Content-Length, before it is read.
    let reply = post_oversized(&server.url("/v1/audio/speech"), 2 << 20, key);
    assert!(reply.starts_with("HTTP/1.1 413"), "{reply}");
    assert!(reply.contains("payload_too_large"), "{reply}");
    // Odd but valid text is spoken.
    let spoken = [
        "NUL \u{0} and controls \u{1}\u{7}\u{1b}[31m in the text",
        "مرحبا بالعالم، هذا اختبار.",
        "שלום עולם \u{202e}reversed\u{202c}",
        "Emoji 🎉👩‍👩‍👧 and flags 🇫🇷",
        "中文测试。日本語のテスト。한국어 테스트.",
        "\u{feff}\u{200b}\u{200d}",
    ];
    for text in spoken {
        let reply = post(&with("input", json!(text)), "application/json", key);
        assert!(
            reply.status == 200 || reply.status == 400,
            "{text:?}: {} {}",
            reply.status,
            String::from_utf8_lossy(&reply.body)
        );
        if reply.status == 400 {
            assert_eq!(reply.error(400).1.as_deref(), Some("input"), "{text:?}");
        }
    }
    // The wrong key is refused; neither key ever reaches the logs.
    post(
        &with("input", json!("hi")),
        "application/json",
        "wrong-guess",
    )
    .error(401);
    let logs = server.logs();
    assert!(
        !logs.contains(key) && !logs.contains("wrong-guess"),
        "{logs}"
    );
    assert!(!logs.contains("panicked"), "{logs}");
    let text = server.metrics();
    for status in ["500", "503", "504"] {
        let labels = [("route", "/v1/audio/speech"), ("status", status)];
        assert_eq!(
            metric(&text, "speech_http_requests_total", &labels),
            None,
            "{status}"
        );
    }
}

#[test]
fn a_raised_input_cap_just_works() {
    let server = Server::start(&[("VOXTRAL_MAX_INPUT_CHARS", "20000")]);
    let input: String = (0..800)
        .map(|i| format!("Sentence {i} is here. "))
        .collect::<String>()
        .chars()
        .take(20_000)
        .collect();
    let mut body = speech_body("alloy", "pcm", 1, 1);
    body["input"] = json!(input);
    let samples = pcm_samples(&server.speech(body)).len();
    // About 67 segments of at most 300 characters, one frame each, joined with 10 ms
    // crossfades.
    assert!(samples > 60 * (FRAME - 240), "{samples} samples");
    let mut over = speech_body("alloy", "pcm", 1, 1);
    over["input"] = json!("a".repeat(20_001));
    assert_eq!(server.speech(over).error(400).1.as_deref(), Some("input"));
}
