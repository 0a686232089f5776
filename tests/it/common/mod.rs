//! Helpers shared by the tests that run a real `voxtral-tts serve` process: start it on a free
//! port with a tiny random checkpoint, call it over HTTP, decode audio with ffmpeg. Also the
//! engine-level loops that tests of several families share: a session run to its end or
//! streamed, and a worker started and loaded.
// Each test binary uses only some of these.
#![allow(dead_code)]

use serde_json::{json, Value};
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{mpsc, Arc, Mutex};
use std::time::{Duration, Instant};
use voxtral_tts::engine::{SpeechSession, TextToSpeech};
use voxtral_tts::models::voxtral_tts::testkit::cached_endless_test_model;
use voxtral_tts::models::voxtral_tts::testkit::Preset;
use voxtral_tts::scheduler::{start_worker, EngineState, JobQueue, LoadedModel, WorkerSettings};

/// Samples per frame (80 ms at 24 kHz).
pub const FRAME: usize = 1920;
pub const OPENAI_VOICES: [&str; 13] = [
    "alloy", "ash", "ballad", "coral", "echo", "fable", "onyx", "nova", "sage", "shimmer", "verse",
    "marin", "cedar",
];

/// The tiny Voxtral TTS checkpoint the servers of the tests speak with: one that never says
/// END_AUDIO, so every request runs to its `max_frames` on every CPU (the tests count frames,
/// and some need a request that is still running). The parity tests use the checkpoints that
/// stop on their own.
pub fn model() -> PathBuf {
    cached_endless_test_model(Preset::Tiny, 0).unwrap()
}

/// A `voxtral-tts serve` child process, killed when dropped.
pub struct Server {
    pub child: Child,
    pub base: String,
    pub log: Arc<Mutex<String>>,
}

impl Server {
    /// Starts a server on the tiny model with these `VOXTRAL_*` settings and waits until ready.
    pub fn start(env: &[(&str, &str)]) -> Server {
        let server = Server::spawn(&model(), &[], env);
        server.wait_ready();
        server
    }

    /// Starts a server and waits only until it listens (the model may still be loading).
    pub fn spawn(model: &Path, args: &[&str], env: &[(&str, &str)]) -> Server {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_voxtral-tts"));
        cmd.args(["serve", "--port", "0", "--model"])
            .arg(model)
            .args(args)
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        // The server's settings come from `env` alone; the CPU kernel variant is the machine's
        // (as the test processes run it), so the server and the tests' other processes agree.
        for (key, _) in std::env::vars() {
            if key.starts_with("VOXTRAL_") && key != "VOXTRAL_CPU_KERNEL" {
                cmd.env_remove(key);
            }
        }
        cmd.envs(env.iter().copied());
        let mut child = cmd.spawn().expect("spawn voxtral-tts serve");
        let stderr = child.stderr.take().unwrap();
        let log = Arc::new(Mutex::new(String::new()));
        let (address_tx, address_rx) = mpsc::channel();
        let sink = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(address) = line.split("listening on ").nth(1) {
                    let _ = address_tx.send(address.trim().to_string());
                }
                let mut log = sink.lock().unwrap();
                log.push_str(&line);
                log.push('\n');
            }
        });
        let base = address_rx
            .recv_timeout(Duration::from_secs(120))
            .unwrap_or_else(|_| panic!("server did not start:\n{}", log.lock().unwrap()));
        Server { child, base, log }
    }

    pub fn wait_ready(&self) {
        self.wait_for("the server to be ready", || {
            self.get("/ready").status == 200
        });
    }

    pub fn wait_for(&self, what: &str, mut condition: impl FnMut() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(120);
        while !condition() {
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what}:\n{}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    pub fn logs(&self) -> String {
        self.log.lock().unwrap().clone()
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    pub fn get(&self, path: &str) -> Reply {
        send(agent().get(&self.url(path)), None)
    }

    pub fn post_json(&self, path: &str, body: &Value) -> Reply {
        let request = agent()
            .post(&self.url(path))
            .set("Content-Type", "application/json");
        send(request, Some(body.to_string().as_bytes()))
    }

    pub fn speech(&self, body: Value) -> Reply {
        self.post_json("/v1/audio/speech", &body)
    }

    pub fn metrics(&self) -> String {
        String::from_utf8(self.get("/metrics").body).unwrap()
    }

    pub fn signal(&self, signal: &str) {
        let ok = Command::new("kill")
            .args([signal, &self.child.id().to_string()])
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill {signal}");
    }

    pub fn wait_exit(&mut self) -> ExitStatus {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "server did not exit:\n{}",
                self.logs()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Reply {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// Asserts a 200, showing the body otherwise.
    pub fn assert_ok(&self) {
        assert_eq!(self.status, 200, "{}", String::from_utf8_lossy(&self.body));
    }

    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or_else(|e| {
            panic!("{e}: {}", String::from_utf8_lossy(&self.body));
        })
    }

    /// Checks OpenAI's error shape and the status; returns (type, param, code).
    pub fn error(&self, status: u16) -> (String, Option<String>, Option<String>) {
        let body = self.json();
        assert_eq!(self.status, status, "{body}");
        assert_eq!(
            self.header("content-type"),
            Some("application/json"),
            "{body}"
        );
        let error = body["error"].as_object().expect("an `error` object");
        let mut keys: Vec<&str> = error.keys().map(String::as_str).collect();
        keys.sort();
        assert_eq!(keys, ["code", "message", "param", "type"], "{body}");
        assert!(!error["message"].as_str().unwrap().is_empty());
        let text = |v: &Value| v.as_str().map(String::from);
        (
            text(&error["type"]).unwrap(),
            text(&error["param"]),
            text(&error["code"]),
        )
    }
}

pub fn agent() -> ureq::Agent {
    ureq::AgentBuilder::new()
        .timeout(Duration::from_secs(300))
        .build()
}

pub fn send(request: ureq::Request, body: Option<&[u8]>) -> Reply {
    let result = match body {
        Some(bytes) => request.send_bytes(bytes),
        None => request.call(),
    };
    let response = match result {
        Ok(r) | Err(ureq::Error::Status(_, r)) => r,
        Err(e) => panic!("request failed: {e}"),
    };
    let headers = response
        .headers_names()
        .into_iter()
        .map(|name| {
            let value = response.header(&name).unwrap_or_default().to_string();
            (name, value)
        })
        .collect();
    let status = response.status();
    let mut body = Vec::new();
    response.into_reader().read_to_end(&mut body).unwrap();
    Reply {
        status,
        headers,
        body,
    }
}

pub fn speech_body(voice: &str, format: &str, seed: u64, frames: usize) -> Value {
    json!({"model": "tts-1", "input": "Testing the speech server.", "voice": voice,
        "response_format": format, "seed": seed, "max_frames": frames})
}

pub fn pcm_samples(reply: &Reply) -> Vec<i16> {
    assert_eq!(
        reply.status,
        200,
        "{}",
        String::from_utf8_lossy(&reply.body)
    );
    assert_eq!(reply.header("content-type"), Some("audio/pcm"));
    reply
        .body
        .chunks_exact(2)
        .map(|b| i16::from_le_bytes([b[0], b[1]]))
        .collect()
}

/// The value of the first sample of `name` whose labels include all of `labels`.
pub fn metric(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    text.lines()
        .filter(|line| !line.starts_with('#'))
        .filter(|line| {
            line.starts_with(&format!("{name} ")) || line.starts_with(&format!("{name}{{"))
        })
        .find(|line| {
            labels
                .iter()
                .all(|(k, v)| line.contains(&format!("{k}=\"{v}\"")))
        })
        .and_then(|line| line.rsplit(' ').next()?.parse().ok())
}

/// Decodes with ffmpeg at the file's own rate: (sample rate, channels, samples).
pub fn decode(format: &str, bytes: &[u8]) -> (u32, u32, usize) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join(format!("clip.{format}"));
    std::fs::write(&path, bytes).unwrap();
    let probe = Command::new("ffprobe")
        .args(["-v", "error", "-select_streams", "a:0", "-show_entries"])
        .args(["stream=sample_rate,channels", "-of", "csv=p=0"])
        .arg(&path)
        .output()
        .expect("ffprobe is needed (scripts/setup.sh installs ffmpeg)");
    let probed = String::from_utf8_lossy(&probe.stdout);
    let mut fields = probed.trim().split(',').map(|f| f.parse::<u32>().unwrap());
    let (rate, channels) = (fields.next().unwrap(), fields.next().unwrap());
    let out = Command::new("ffmpeg")
        .args(["-nostdin", "-v", "error", "-i"])
        .arg(&path)
        .args(["-f", "s16le", "-acodec", "pcm_s16le", "-"])
        .output()
        .expect("ffmpeg is needed (scripts/setup.sh installs it)");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stderr.trim().is_empty(),
        "{format}: {stderr}"
    );
    (rate, channels, out.stdout.len() / 2 / channels as usize)
}

pub fn streamed(mut body: Value, stream_format: &str) -> Value {
    body["stream_format"] = json!(stream_format);
    body
}

/// The largest difference between two equally long sample sequences, in 16-bit steps.
pub fn max_lsb_diff(a: &[i16], b: &[i16]) -> i32 {
    assert_eq!(a.len(), b.len(), "lengths differ");
    a.iter()
        .zip(b)
        .map(|(x, y)| (i32::from(*x) - i32::from(*y)).abs())
        .max()
        .unwrap_or(0)
}

/// Jobs that ended with `outcome` (completed, failed, panicked, cancelled) so far.
pub fn jobs(server: &Server, outcome: &str) -> f64 {
    metric(
        &server.metrics(),
        "speech_jobs_total",
        &[("outcome", outcome)],
    )
    .unwrap_or(0.0)
}

/// A mono 16-bit PCM WAV file of `samples` at `rate`.
pub fn pcm16_wav(rate: u32, samples: &[i16]) -> Vec<u8> {
    let data = samples.len() as u32 * 2;
    let mut out = Vec::new();
    out.extend(b"RIFF");
    out.extend((36 + data).to_le_bytes());
    out.extend(b"WAVEfmt ");
    out.extend(16u32.to_le_bytes());
    out.extend(1u16.to_le_bytes());
    out.extend(1u16.to_le_bytes());
    out.extend(rate.to_le_bytes());
    out.extend((rate * 2).to_le_bytes());
    out.extend(2u16.to_le_bytes());
    out.extend(16u16.to_le_bytes());
    out.extend(b"data");
    out.extend(data.to_le_bytes());
    out.extend(samples.iter().flat_map(|s| s.to_le_bytes()));
    out
}

/// Steps `session` alone until it stops.
pub fn run_to_end<E: TextToSpeech>(engine: &E, session: &mut E::Session<'_>) {
    while session.stop_reason().is_none() {
        engine.step(&mut [&mut *session]).unwrap();
    }
}

/// Steps `session` alone until it stops, decoding as a streamed response does: each time
/// `chunk` new codes are in, then the rest at the end. Returns the audio streamed.
pub fn decode_streamed<E: TextToSpeech>(
    engine: &E,
    session: &mut E::Session<'_>,
    chunk: usize,
) -> Vec<f32> {
    let (mut streamed, mut decoded) = (Vec::new(), 0);
    while session.stop_reason().is_none() {
        engine.step(&mut [&mut *session]).unwrap();
        let codes = session.codes().len();
        if codes >= decoded + chunk && session.stop_reason().is_none() {
            streamed.extend(engine.decode(session, decoded).unwrap());
            decoded = codes;
        }
    }
    assert!(decoded > 0, "the utterance was shorter than one chunk");
    streamed.extend(engine.decode(session, decoded).unwrap());
    streamed
}

/// The largest difference between two signals of the same length.
pub fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0f32, f32::max)
}

/// Starts a worker with a queue of `capacity` jobs and waits for its model to load.
pub fn start_loaded_worker(
    settings: WorkerSettings,
    capacity: usize,
) -> (JobQueue, Arc<LoadedModel>, std::thread::JoinHandle<()>) {
    let (queue, mut state, worker) = start_worker(settings, capacity).unwrap();
    let loaded = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
        .block_on(state.wait_for(|s| !matches!(s, EngineState::Loading)))
        .unwrap()
        .clone();
    let EngineState::Ready(loaded) = loaded else {
        panic!("the model did not load")
    };
    (queue, loaded, worker)
}

/// The boundary of [`voice_form`]'s multipart bodies.
pub const VOICE_FORM_BOUNDARY: &str = "voices-test-boundary";

/// A `POST /v1/audio/voices` multipart form: text fields, then one `audio_sample` file per
/// clip.
pub fn voice_form(fields: &[(&str, &str)], clips: &[&[u8]]) -> Vec<u8> {
    let mut body = Vec::new();
    for (name, value) in fields {
        body.extend(
            format!("--{VOICE_FORM_BOUNDARY}\r\nContent-Disposition: form-data; name=\"{name}\"\r\n\r\n{value}\r\n")
                .bytes(),
        );
    }
    for clip in clips {
        body.extend(
            format!(
                "--{VOICE_FORM_BOUNDARY}\r\nContent-Disposition: form-data; name=\"audio_sample\"; \
                 filename=\"clip.wav\"\r\nContent-Type: application/octet-stream\r\n\r\n"
            )
            .bytes(),
        );
        body.extend(*clip);
        body.extend(b"\r\n");
    }
    body.extend(format!("--{VOICE_FORM_BOUNDARY}--\r\n").bytes());
    body
}

/// Uploads a custom voice ([`voice_form`]).
pub fn upload_voice(server: &Server, fields: &[(&str, &str)], clips: &[&[u8]]) -> Reply {
    let request = agent().post(&server.url("/v1/audio/voices")).set(
        "Content-Type",
        &format!("multipart/form-data; boundary={VOICE_FORM_BOUNDARY}"),
    );
    send(request, Some(&voice_form(fields, clips)))
}

/// A copy of the folder `src` (and its subfolders) at `dst`.
pub fn copy_dir(src: &Path, dst: &Path) {
    std::fs::create_dir_all(dst).unwrap();
    for e in std::fs::read_dir(src).unwrap() {
        let e = e.unwrap();
        let to = dst.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_dir(&e.path(), &to);
        } else {
            std::fs::copy(e.path(), to).unwrap();
        }
    }
}

/// A WebSocket to `path` on `server` whose receive buffer is a few kilobytes (the kernel's
/// auto-tuning off): once such a client stops reading, the server's writes back up within
/// its own send buffer.
pub async fn connect_small_window(
    server: &Server,
    path: &str,
) -> tokio_tungstenite::WebSocketStream<tokio::net::TcpStream> {
    let address: std::net::SocketAddr = server
        .base
        .trim_start_matches("http://")
        .parse()
        .expect("the server's address");
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let stream = socket.connect(address).await.unwrap();
    let url = format!("{}{path}", server.base.replace("http://", "ws://"));
    tokio_tungstenite::client_async(url, stream)
        .await
        .unwrap()
        .0
}

/// The next text message of a WebSocket, as JSON.
pub async fn next_message<S>(ws: &mut tokio_tungstenite::WebSocketStream<S>) -> Value
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    use futures_util::StreamExt;
    use tokio_tungstenite::tungstenite::Message;
    loop {
        let message = tokio::time::timeout(Duration::from_secs(120), ws.next())
            .await
            .expect("nothing from the server within two minutes");
        match message {
            Some(Ok(Message::Text(text))) => return serde_json::from_str(&text).unwrap(),
            Some(Ok(Message::Binary(_) | Message::Ping(_) | Message::Pong(_))) => {}
            other => panic!("expected a text message, got {other:?}"),
        }
    }
}

/// The server process's resident memory, in bytes (`VmRSS` of /proc/PID/status).
pub fn resident_bytes(server: &Server) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{}/status", server.child.id())).unwrap();
    let line = status
        .lines()
        .find(|l| l.starts_with("VmRSS:"))
        .expect("VmRSS in /proc/PID/status");
    let kib: u64 = line
        .split_whitespace()
        .nth(1)
        .and_then(|v| v.parse().ok())
        .expect("VmRSS in kB");
    kib * 1024
}
