//! Home Assistant's Wyoming protocol (`wyoming_port`): the `wyoming` package from PyPI drives
//! a real server (tests/clients/wyoming_client.py), and each audio stream it receives must
//! equal the HTTP API's streamed `pcm` for the same text, voice and seed.

use crate::common;

use common::*;
use serde_json::{json, Value};
use std::path::Path;
use std::process::Command;

/// The Wyoming address from the server's log line `Wyoming protocol on tcp://HOST:PORT`.
fn wyoming_address(server: &Server) -> (String, String) {
    let mut address = None;
    server.wait_for("the Wyoming listener", || {
        address = server.logs().lines().find_map(|l| {
            l.split("Wyoming protocol on tcp://")
                .nth(1)
                .map(str::to_string)
        });
        address.is_some()
    });
    let address = address.unwrap();
    let (host, port) = address.trim().rsplit_once(':').unwrap();
    (host.to_string(), port.to_string())
}

/// HTTP's streamed pcm for what the Wyoming client sent (its EXTRA: seed 23, 10 frames).
fn http_pcm(server: &Server, text: &str, voice: &str) -> Vec<u8> {
    let body = json!({"model": "tts-1", "input": text, "voice": voice, "response_format": "pcm",
        "stream_format": "audio", "seed": 23, "max_frames": 10});
    let reply = server.speech(body);
    reply.assert_ok();
    reply.body
}

#[test]
fn home_assistant_wyoming_client_gets_the_http_audio() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let package = root.join(".deps/pywyoming");
    assert!(
        package.join("wyoming").is_dir(),
        "the wyoming package is missing from {}: run scripts/setup.sh",
        package.display()
    );
    let server = Server::start(&[("VOXTRAL_WYOMING_PORT", "0")]);
    let (host, port) = wyoming_address(&server);
    let out = tempfile::tempdir().unwrap();
    let run = Command::new("python3")
        .arg(root.join("tests/clients/wyoming_client.py"))
        .args([&host, &port, out.path().to_str().unwrap()])
        .env("PYTHONPATH", &package)
        .output()
        .expect("python3 is needed for the Wyoming test");
    assert!(
        run.status.success(),
        "Wyoming client failed:\n{}\n{}\nserver log:\n{}",
        String::from_utf8_lossy(&run.stdout),
        String::from_utf8_lossy(&run.stderr),
        server.logs()
    );
    let result: Value =
        serde_json::from_slice(&std::fs::read(out.path().join("result.json")).unwrap()).unwrap();
    let pcm = |name: &str| std::fs::read(out.path().join(name)).unwrap();

    // describe -> info: the presets as voices with their languages, streaming supported.
    assert_eq!(result["program"], "voxtral-tts");
    assert_eq!(result["streaming"], true);
    let voices = result["voices"].as_object().unwrap();
    assert_eq!(voices.len(), 20);
    assert_eq!(voices["fr_male"], json!(["fr"]));
    assert_eq!(voices["casual_female"], json!(["en"]));

    // synthesize -> audio-start, audio-chunk*, audio-stop: 16-bit mono at 24 kHz.
    assert_eq!(result["synthesize-format"], json!([24000, 2, 1]));
    assert_eq!(
        result["synthesize-events"],
        json!(["audio-start", "audio-stop"])
    );
    let spoken = pcm("synthesize-0.pcm");
    assert!(!spoken.is_empty());
    assert_eq!(
        spoken,
        http_pcm(&server, "Bonjour tout le monde.", "fr_male")
    );

    // The streamed request: the first sentence is spoken once its end has arrived, the rest
    // at synthesize-stop; the whole text sent again as `synthesize` adds nothing.
    assert_eq!(
        result["stream-events"],
        json!([
            "audio-start",
            "audio-stop",
            "audio-start",
            "audio-stop",
            "synthesize-stopped"
        ])
    );
    assert_eq!(
        pcm("stream-0.pcm"),
        http_pcm(&server, "Hello world.", "neutral_male")
    );
    assert_eq!(
        pcm("stream-1.pcm"),
        http_pcm(&server, " This is the end.", "neutral_male")
    );

    // An unknown voice: an error event naming the presets, no audio.
    let error = result["unknown-error"].as_str().unwrap();
    assert!(
        error.starts_with("Unknown voice 'robot'. Use a preset ("),
        "{error}"
    );
    assert_eq!(result["unknown-events"], json!(["error"]));
}

#[test]
fn malformed_wyoming_input_gets_an_error_event_and_the_listener_keeps_serving() {
    use std::io::{BufRead, BufReader, Write};
    let server = Server::start(&[("VOXTRAL_WYOMING_PORT", "0")]);
    let (host, port) = wyoming_address(&server);
    let exchange = |bytes: &[u8]| {
        let mut socket =
            std::net::TcpStream::connect((host.as_str(), port.parse().unwrap())).unwrap();
        socket.write_all(bytes).unwrap();
        let mut line = String::new();
        BufReader::new(&socket).read_line(&mut line).unwrap();
        let header: Value = serde_json::from_str(&line).unwrap();
        header
    };
    for bad in [
        &b"not json\n"[..],
        b"{\"type\":\"synthesize\",\"data\":{\"text\":5}}\n",
        b"{\"type\":\"synthesize\",\"data\":{\"text\":\"Hi.\",\"max_frames\":0}}\n",
        b"{\"type\":\"synthesize-chunk\",\"data\":{\"text\":\"Hi.\"}}\n",
        b"{\"type\":\"synthesize\",\"data_length\":99999999}\n",
    ] {
        let header = exchange(bad);
        assert_eq!(header["type"], "error", "{}", String::from_utf8_lossy(bad));
    }
    let pong = exchange(b"{\"type\":\"ping\",\"data\":{\"text\":\"x\"}}\n");
    assert_eq!(pong["type"], "pong");
    // The log is read from the server's stderr by another thread: wait for the line.
    server.wait_for("the failure in the server's log", || {
        server.logs().contains("Wyoming request failed")
    });
}

/// One Wyoming event read off a socket: (type, data, payload); `None` once it is closed.
fn read_event(reader: &mut impl std::io::BufRead) -> Option<(String, Value, Vec<u8>)> {
    let mut line = String::new();
    if reader.read_line(&mut line).unwrap() == 0 {
        return None;
    }
    let header: Value = serde_json::from_str(&line).unwrap();
    let mut read = |key: &str| {
        let mut bytes = vec![0; header[key].as_u64().unwrap_or(0) as usize];
        reader.read_exact(&mut bytes).unwrap();
        bytes
    };
    let data = read("data_length");
    let payload = read("payload_length");
    let data = if data.is_empty() {
        header["data"].clone()
    } else {
        serde_json::from_slice(&data).unwrap()
    };
    Some((header["type"].as_str().unwrap().to_string(), data, payload))
}

#[test]
fn sigterm_lets_a_wyoming_synthesis_finish_then_the_server_exits() {
    use std::io::{BufReader, Write};
    use std::net::TcpStream;
    // A grace long enough for a busy machine: without the drain waiting for it, the
    // connection would be cut at once.
    let mut server = Server::start(&[
        ("VOXTRAL_WYOMING_PORT", "0"),
        ("VOXTRAL_SHUTDOWN_GRACE_SECS", "300"),
    ]);
    let (host, port) = wyoming_address(&server);
    let address = (host.as_str(), port.parse::<u16>().unwrap());
    // An idle connection must not keep the server from exiting.
    let _idle = TcpStream::connect(address).unwrap();
    let mut socket = TcpStream::connect(address).unwrap();
    let request = json!({"type": "synthesize", "data": {"text": "A long story.",
        "voice": {"name": "fable"}, "seed": 8, "max_frames": 150}});
    socket.write_all(format!("{request}\n").as_bytes()).unwrap();
    let mut reader = BufReader::new(socket);
    let next = |reader: &mut BufReader<TcpStream>| {
        read_event(reader).unwrap_or_else(|| panic!("connection closed:\n{}", server.logs()))
    };
    assert_eq!(next(&mut reader).0, "audio-start");
    server.signal("-TERM");
    let mut samples = 0;
    loop {
        let (kind, data, payload) = next(&mut reader);
        match kind.as_str() {
            "audio-chunk" => samples += payload.len() / 2,
            "audio-stop" => break,
            _ => panic!("{kind}: {data}"),
        }
    }
    assert!(samples > 4 * FRAME, "{samples} samples");
    assert!(server.wait_exit().success(), "{}", server.logs());
    assert!(server.logs().contains("draining"));
}
