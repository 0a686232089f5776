//! `POST /v1/audio/transcriptions` as clients see it: a real `voxtral-tts serve` process with
//! a tiny speech model and the `stt-tiny` random Voxtral Realtime checkpoint, called over HTTP
//! with OpenAI's multipart form.

use crate::common;

use common::*;
use serde_json::Value;
use std::path::Path;
use std::process::Command;
use voxtral_tts::models::voxtral_realtime::testkit::cached_endless_test_model;

const BOUNDARY: &str = "transcription-test-boundary";

/// The `stt-tiny` checkpoint that never says `</s>`: every utterance decodes as many tokens as
/// its audio has positions, on every CPU.
fn stt_model() -> std::path::PathBuf {
    cached_endless_test_model(0).unwrap()
}

/// Starts a server on the tiny speech model and the tiny speech-to-text model.
fn start() -> Server {
    let stt = stt_model();
    let server = Server::spawn(&model(), &["--model", stt.to_str().unwrap()], &[]);
    server.wait_ready();
    server.wait_for("the speech-to-text model", || {
        server.get("/v1/models").json()["data"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["id"] == "stt-tiny-endless-0" && m["capabilities"].is_object())
    });
    server
}

/// One second of a 16-bit mono WAV at 16 kHz: a cubic chirp.
fn wav() -> Vec<u8> {
    wav_of(16_000)
}

fn wav_of(len: u32) -> Vec<u8> {
    let rate = 16_000u32;
    let samples: Vec<i16> = (0..len)
        .map(|i| {
            let t = f64::from(i) / f64::from(rate);
            let x = 0.5 * (std::f64::consts::TAU * (100.0 * t + 3000.0 * t * t * t)).sin();
            (x * 32767.0) as i16
        })
        .collect();
    pcm16_wav(rate, &samples)
}

/// A multipart form: text fields, then `file` when given.
fn form(fields: &[(&str, &str)], file: Option<&[u8]>) -> Vec<u8> {
    let mut body = Vec::new();
    for (name, value) in fields {
        body.extend(
            format!("--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"{name}\"\r\n\r\n{value}\r\n")
                .bytes(),
        );
    }
    if let Some(bytes) = file {
        body.extend(
            format!(
                "--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.wav\"\r\n\
                 Content-Type: application/octet-stream\r\n\r\n"
            )
            .bytes(),
        );
        body.extend(bytes);
        body.extend(b"\r\n");
    }
    body.extend(format!("--{BOUNDARY}--\r\n").bytes());
    body
}

fn transcribe(server: &Server, fields: &[(&str, &str)], file: Option<&[u8]>) -> Reply {
    let request = agent().post(&server.url("/v1/audio/transcriptions")).set(
        "Content-Type",
        &format!("multipart/form-data; boundary={BOUNDARY}"),
    );
    send(request, Some(&form(fields, file)))
}

/// What `voxtral-tts transcribe` prints for the same file (its text, without the newline).
fn cli_text(audio: &[u8]) -> String {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.wav");
    std::fs::write(&input, audio).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_voxtral-tts"))
        .args(["transcribe", "--device", "cpu", "--model"])
        .arg(stt_model())
        .arg("--input")
        .arg(Path::new(&input))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    text.strip_suffix('\n').unwrap().to_string()
}

/// The `data:` JSON of each Server-Sent Event.
fn sse_events(body: &[u8]) -> Vec<Value> {
    String::from_utf8(body.to_vec())
        .unwrap()
        .lines()
        .filter_map(|l| l.strip_prefix("data: "))
        .map(|d| serde_json::from_str(d).unwrap())
        .collect()
}

#[test]
fn every_response_format_carries_the_clis_text() {
    let server = start();
    let audio = wav();
    let want = cli_text(&audio);
    assert!(!want.is_empty(), "the test checkpoint decodes some text");
    let model = ("model", "stt-tiny-endless-0");

    let json = transcribe(
        &server,
        &[model, ("language", "en"), ("prompt", "x")],
        Some(&audio),
    );
    json.assert_ok();
    let json = json.json();
    assert_eq!(json["text"], want.as_str());
    assert_eq!(json["usage"]["type"], "duration");
    assert!((json["usage"]["seconds"].as_f64().unwrap() - 1.0).abs() < 1e-9);

    let text = transcribe(&server, &[model, ("response_format", "text")], Some(&audio));
    assert!(text
        .header("content-type")
        .unwrap()
        .starts_with("text/plain"));
    assert_eq!(String::from_utf8(text.body).unwrap(), format!("{want}\n"));

    let verbose = transcribe(
        &server,
        &[model, ("response_format", "verbose_json")],
        Some(&audio),
    );
    let verbose = verbose.json();
    assert_eq!(verbose["text"], want.as_str());
    assert!((verbose["duration"].as_f64().unwrap() - 1.0).abs() < 1e-9);
    let words = verbose["words"].as_array().unwrap();
    let segments = verbose["segments"].as_array().unwrap();
    assert!(!words.is_empty() && !segments.is_empty(), "{verbose}");
    for w in words {
        let (start, end) = (w["start"].as_f64().unwrap(), w["end"].as_f64().unwrap());
        assert!(start >= 0.0 && end >= start && end <= 1.0, "{w}");
        // On the 80 ms token grid, or at the end of the audio.
        let on_grid = |t: f64| ((t / 0.08).round() * 0.08 - t).abs() < 1e-9 || t == 1.0;
        assert!(on_grid(start) && on_grid(end), "{w}");
    }

    let srt = transcribe(&server, &[model, ("response_format", "srt")], Some(&audio));
    let srt = String::from_utf8(srt.body).unwrap();
    assert!(srt.starts_with("1\n00:00:"), "{srt}");
    let vtt = transcribe(&server, &[model, ("response_format", "vtt")], Some(&audio));
    let vtt = String::from_utf8(vtt.body).unwrap();
    assert!(vtt.starts_with("WEBVTT\n\n00:00:"), "{vtt}");

    // Greedy whatever the temperature.
    let warm = transcribe(&server, &[model, ("temperature", "0.7")], Some(&audio));
    assert_eq!(warm.json()["text"], want.as_str());
}

#[test]
fn streamed_deltas_join_to_the_text() {
    let server = start();
    let audio = wav();
    let want = cli_text(&audio);
    let reply = transcribe(
        &server,
        &[("model", "stt-tiny-endless-0"), ("stream", "true")],
        Some(&audio),
    );
    reply.assert_ok();
    assert!(reply
        .header("content-type")
        .unwrap()
        .starts_with("text/event-stream"));
    let events = sse_events(&reply.body);
    let (done, deltas) = events.split_last().unwrap();
    assert!(!deltas.is_empty());
    let joined: String = deltas
        .iter()
        .map(|e| {
            assert_eq!(e["type"], "transcript.text.delta");
            e["delta"].as_str().unwrap()
        })
        .collect();
    assert_eq!(joined, want);
    assert_eq!(done["type"], "transcript.text.done");
    assert_eq!(done["text"], want.as_str());
    assert_eq!(done["usage"]["type"], "duration");
}

/// Form fields, file, expected status and the `param` it names.
type Case<'a> = (&'a [(&'a str, &'a str)], Option<&'a [u8]>, u16, &'a str);

#[test]
fn bad_requests_get_openai_errors() {
    let server = start();
    let audio = wav();
    let stt = ("model", "stt-tiny-endless-0");
    let cases: [Case; 7] = [
        (&[stt], None, 400, "file"),
        (&[stt], Some(b""), 400, "file"),
        (&[stt], Some(b"definitely not audio"), 400, "file"),
        (&[("model", "whisper-9")], Some(&audio), 404, "model"),
        (&[("model", "tts-1")], Some(&audio), 400, "model"),
        (
            &[stt, ("response_format", "docx")],
            Some(&audio),
            400,
            "response_format",
        ),
        (
            &[stt, ("temperature", "3")],
            Some(&audio),
            400,
            "temperature",
        ),
    ];
    for (fields, file, status, param) in cases {
        let reply = transcribe(&server, fields, file);
        let (_, got_param, code) = reply.error(status);
        assert_eq!(got_param.as_deref(), Some(param), "{fields:?}");
        if status == 404 {
            assert_eq!(code.as_deref(), Some("model_not_found"));
        }
    }
    // The speech-to-text model cannot speak.
    let reply = server.speech(speech_body_for("stt-tiny-endless-0"));
    let (_, param, _) = reply.error(400);
    assert_eq!(param.as_deref(), Some("model"));
    let message = reply.json()["error"]["message"].to_string();
    assert!(message.contains("speech-to-text"), "{message}");
    // /v1/models lists it with its endpoint.
    let models = server.get("/v1/models").json();
    let stt = models["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["id"] == "stt-tiny-endless-0")
        .unwrap()
        .clone();
    assert_eq!(
        stt["capabilities"]["endpoints"],
        serde_json::json!(["/v1/audio/transcriptions", "/v1/realtime"])
    );
}

#[test]
fn uploads_over_the_limits_are_refused() {
    let stt = stt_model();
    let server = Server::spawn(
        &model(),
        &["--model", stt.to_str().unwrap()],
        &[
            ("VOXTRAL_MAX_TRANSCRIPTION_BYTES", "40000"),
            ("VOXTRAL_MAX_TRANSCRIPTION_SECONDS", "1"),
        ],
    );
    server.wait_ready();
    let stt = ("model", "stt-tiny-endless-0");
    assert_eq!(oversized_upload_status(&server, 50_000), 413);
    // 1.2 s: 38,444 bytes, under the byte limit, over the duration limit.
    let (_, param, _) = transcribe(&server, &[stt], Some(&wav_of(19_200))).error(400);
    assert_eq!(param.as_deref(), Some("file"));
}

/// The status line's code for an upload announcing `bytes` of body, read before sending any:
/// the server answers 413 from the headers and closes, which a client still writing sees
/// as a broken pipe.
fn oversized_upload_status(server: &Server, bytes: usize) -> u16 {
    use std::io::{Read, Write};
    let address = server.base.trim_start_matches("http://");
    let mut stream = std::net::TcpStream::connect(address).unwrap();
    write!(
        stream,
        "POST /v1/audio/transcriptions HTTP/1.1\r\nHost: {address}\r\n\
         Content-Type: multipart/form-data; boundary={BOUNDARY}\r\n\
         Content-Length: {bytes}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut head = [0u8; 12];
    stream.read_exact(&mut head).unwrap();
    std::str::from_utf8(&head[9..12]).unwrap().parse().unwrap()
}

fn speech_body_for(model: &str) -> Value {
    let mut body = speech_body("nova", "wav", 1, 4);
    body["model"] = model.into();
    body
}

/// A speech-to-text model that fails to load stops the server, as a speech model does.
#[test]
fn a_transcription_model_that_fails_to_load_stops_the_server() {
    let broken = tempfile::tempdir().unwrap();
    for file in ["params.json", "tekken.json"] {
        std::fs::copy(stt_model().join(file), broken.path().join(file)).unwrap();
    }
    let mut server = Server::spawn(&model(), &["--model", broken.path().to_str().unwrap()], &[]);
    assert!(!server.wait_exit().success());
    let logs = server.logs();
    let last = logs.trim().lines().last().unwrap();
    assert!(
        last.starts_with("error: loading the model failed")
            && last.contains("consolidated.safetensors"),
        "{logs}"
    );
}

/// A server of a speech-to-text model alone: it transcribes, lists the model without OpenAI's
/// speech names, and answers the speech routes with a 404 that says what it serves.
#[test]
fn a_server_of_speech_to_text_alone_transcribes_and_refuses_speech() {
    let server = Server::spawn(&stt_model(), &[], &[]);
    server.wait_ready();
    let models = server.get("/v1/models").json();
    let data = models["data"].as_array().unwrap();
    assert_eq!(data[0]["family"], "voxtral-realtime");
    let id = data[0]["id"].as_str().unwrap();
    // OpenAI's transcription names stand for it; none of its speech names is listed.
    let ids: Vec<&str> = data.iter().map(|m| m["id"].as_str().unwrap()).collect();
    assert_eq!(
        ids,
        [
            id,
            "whisper-1",
            "gpt-4o-transcribe",
            "gpt-4o-mini-transcribe"
        ]
    );
    assert!(data[1..].iter().all(|m| m["parent"] == id), "{models}");
    let reply = transcribe(&server, &[("model", id)], Some(&wav()));
    reply.assert_ok();
    let by_alias = transcribe(&server, &[("model", "whisper-1")], Some(&wav()));
    assert_eq!(by_alias.json(), reply.json());
    for name in ["tts-1", "no-such-model"] {
        let reply = server.speech(speech_body_for(name));
        let (_, param, code) = reply.error(404);
        assert_eq!(
            (param.as_deref(), code.as_deref()),
            (Some("model"), Some("model_not_found"))
        );
        let message = reply.json()["error"]["message"]
            .as_str()
            .unwrap()
            .to_string();
        assert!(message.contains(id), "{message}");
    }
    server.get("/v1/audio/voices").error(404);
    let (_, param, _) = server.speech(speech_body_for(id)).error(400);
    assert_eq!(param.as_deref(), Some("model"));
}

/// A start that fails while another model still loads: one error line last, a non-zero exit,
/// and no panic from a thread torn down mid-load.
#[test]
fn a_failed_start_stops_the_threads_before_it_exits() {
    let empty = tempfile::tempdir().unwrap();
    let mut server = Server::spawn(
        &stt_model(),
        &["--model", empty.path().to_str().unwrap()],
        &[],
    );
    assert!(!server.wait_exit().success());
    let logs = server.logs();
    assert!(!logs.contains("panicked"), "{logs}");
    let last = logs.trim().lines().last().unwrap();
    assert!(last.starts_with("error: "), "{logs}");
    assert_eq!(logs.matches("error: ").count(), 1, "{logs}");
}
