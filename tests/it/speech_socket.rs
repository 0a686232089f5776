//! Text-in speech over a WebSocket, as a plain client sees it, against a real
//! `voxtral-tts serve` on the tiny checkpoint that never stops (every piece runs to its
//! `max_frames`).
//!
//! Mistral's dialect (`/v1/audio/speech/realtime`) follows docs.mistral.ai, Studio > Audio >
//! Text to speech > "Speak in realtime" (`session.created`, `session.update` /
//! `session.updated`, `input_text.append`, `input_text.flush`, `input_text.end`,
//! `speech.audio.delta`, `speech.audio.done`, `error`), with the fields of the `mistralai`
//! Python SDK (github.com/mistralai/client-python): `audio_data` in
//! `src/mistralai/client/models/speechstreamaudiodelta.py`, `usage` in `speechstreamdone.py`,
//! the session's `voice` and `response_format` (`pcm` is 32-bit float) in
//! `realtimespeechsession.py`, the numeric `code` of `realtimespeecherrordetail.py`. The SDK
//! itself drives it in tests/it/mistral_sdk.rs. vLLM-Omni's (`/v1/audio/speech/stream`) follows
//! github.com/vllm-project/vllm-omni `vllm_omni/entrypoints/openai/serving_speech_stream.py`
//! (its docstring lists the messages) and `StreamingSpeechSessionConfig` in
//! `vllm_omni/entrypoints/openai/protocol/audio.py`.

use crate::common;

use base64::Engine as _;
use common::*;
use futures_util::{SinkExt, StreamExt};
use serde_json::{json, Value};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};

type Socket = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// 10 ms at 24 kHz: the crossfade between pieces.
const FADE: u64 = 240;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap()
}

async fn connect(server: &Server, path: &str) -> Socket {
    let url = format!("{}{path}", server.base.replace("http://", "ws://"));
    tokio_tungstenite::connect_async(url).await.unwrap().0
}

async fn send(ws: &mut Socket, event: Value) {
    ws.send(Message::Text(event.to_string().into()))
        .await
        .unwrap();
}

/// What the server sent next: a JSON event, a binary frame, or the close (code).
#[derive(Debug)]
enum Got {
    Event(Value),
    Bytes(Vec<u8>),
    Closed(Option<CloseCode>),
}

async fn next(ws: &mut Socket) -> Got {
    loop {
        let message = tokio::time::timeout(Duration::from_secs(120), ws.next())
            .await
            .expect("nothing from the server within two minutes");
        return match message {
            Some(Ok(Message::Text(text))) => Got::Event(serde_json::from_str(&text).unwrap()),
            Some(Ok(Message::Binary(bytes))) => Got::Bytes(bytes.to_vec()),
            Some(Ok(Message::Close(frame))) => Got::Closed(frame.map(|f| f.code)),
            Some(Ok(_)) => continue,
            None | Some(Err(_)) => Got::Closed(None),
        };
    }
}

async fn event(ws: &mut Socket) -> Value {
    match next(ws).await {
        Got::Event(event) => event,
        other => panic!("expected an event, got {other:?}"),
    }
}

/// Events up to and including the first of type `kind`; audio deltas are decoded into `pcm`.
async fn until(ws: &mut Socket, kind: &str, pcm: &mut Vec<u8>) -> Vec<Value> {
    let mut events = Vec::new();
    loop {
        let event = event(ws).await;
        assert!(event["type"] != "error" || kind == "error", "{event}");
        if event["type"] == "speech.audio.delta" {
            let audio = event["audio_data"].as_str().unwrap();
            pcm.extend(
                base64::engine::general_purpose::STANDARD
                    .decode(audio)
                    .unwrap(),
            );
        }
        let done = event["type"] == kind;
        events.push(event);
        if done {
            return events;
        }
    }
}

fn of_type<'a>(events: &'a [Value], kind: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["type"] == kind).collect()
}

/// vLLM-Omni's `pcm`: 16-bit samples.
fn samples(bytes: &[u8]) -> Vec<i16> {
    bytes
        .chunks_exact(2)
        .map(|b| i16::from_le_bytes([b[0], b[1]]))
        .collect()
}

/// Mistral's `pcm` (32-bit float) as 16-bit samples, rounded as the server's s16 is.
fn mistral_samples(bytes: &[u8]) -> Vec<i16> {
    bytes
        .chunks_exact(4)
        .map(|b| (f32::from_le_bytes([b[0], b[1], b[2], b[3]]) * 32767.0).round() as i16)
        .collect()
}

/// A Mistral session: created with defaults, updated, text in deltas cut at sentence ends;
/// each sentence is a piece with its samples in one continuous stream (pieces overlap by the
/// crossfade), the first piece sounds as `/v1/audio/speech` with the same seed, usage counts
/// every frame, and the socket serves a second generation before `input_text.end` closes it.
#[test]
fn a_mistral_session_speaks_each_sentence_into_one_stream() {
    let server = Server::start(&[]);
    runtime().block_on(async {
        let mut ws = connect(&server, "/v1/audio/speech/realtime").await;
        let created = event(&mut ws).await;
        assert_eq!(created["type"], "session.created", "{created}");
        assert_eq!(created["session"]["response_format"], "pcm");
        send(
            &mut ws,
            json!({"type": "session.update", "session": {"voice_id": "alloy",
            "response_format": "pcm", "seed": 7, "max_frames": 3}}),
        )
        .await;
        let updated = event(&mut ws).await;
        assert_eq!(updated["type"], "session.updated", "{updated}");
        assert_eq!(updated["session"]["voice"], "neutral_female");
        assert_eq!(updated["session"]["sample_rate"], 24_000);
        for delta in ["Hello the", "re. How are", " you? Fi", "ne"] {
            send(&mut ws, json!({"type": "input_text.append", "text": delta})).await;
        }
        send(&mut ws, json!({"type": "input_text.flush"})).await;
        let mut pcm = Vec::new();
        let events = until(&mut ws, "speech.audio.done", &mut pcm).await;
        let pieces = of_type(&events, "speech.audio.segment");
        let texts: Vec<&str> = pieces.iter().map(|p| p["text"].as_str().unwrap()).collect();
        assert_eq!(texts, ["Hello there.", "How are you?", "Fine"]);
        let span = |p: &Value| {
            (
                p["start_sample"].as_u64().unwrap(),
                p["end_sample"].as_u64().unwrap(),
            )
        };
        let (start0, end0) = span(pieces[0]);
        assert_eq!(start0, 0);
        for pair in pieces.windows(2) {
            let ((_, end), (start, next_end)) = (span(pair[0]), span(pair[1]));
            assert_eq!(start, end - FADE, "pieces overlap by the crossfade");
            assert_eq!(next_end - start, end0, "3 frames each");
        }
        let stream = mistral_samples(&pcm);
        assert_eq!(
            stream.len() as u64,
            span(pieces[2]).1,
            "one continuous stream"
        );
        let usage = &of_type(&events, "speech.audio.done")[0]["usage"];
        assert_eq!(usage["completion_tokens"], 9, "{usage}");

        // The first piece is what `/v1/audio/speech` says for its text and seed, up to the
        // crossfade into the second.
        let body = json!({"model": "tts-1", "input": "Hello there.", "voice": "alloy",
            "response_format": "pcm", "seed": 7, "max_frames": 3, "stream_format": "audio"});
        let alone = pcm_samples(&server.speech(body));
        let kept = (end0 - FADE) as usize;
        assert!(max_lsb_diff(&alone[..kept], &stream[..kept]) <= 1);

        // The socket stays open: a second generation, then the end.
        send(
            &mut ws,
            json!({"type": "input_text.append", "text": "Again."}),
        )
        .await;
        send(&mut ws, json!({"type": "input_text.end"})).await;
        let mut second = Vec::new();
        let events = until(&mut ws, "speech.audio.done", &mut second).await;
        assert_eq!(of_type(&events, "speech.audio.segment").len(), 1);
        assert_eq!(second.len() as u64, end0 * 4, "3 frames of f32le");
        assert!(matches!(
            next(&mut ws).await,
            Got::Closed(Some(CloseCode::Normal))
        ));
    });
}

/// vLLM-Omni's dialect on the same engine path: `session.config` first (else an error and
/// a close), each sentence announced by `audio.start` before `input.done` is sent, its audio
/// in binary frames, `audio.done` with its samples, `session.done` per utterance; the
/// socket serves the next utterance and closes on `session.close`.
#[test]
fn a_vllm_omni_session_speaks_sentences_before_input_done() {
    let server = Server::start(&[]);
    runtime().block_on(async {
        let mut ws = connect(&server, "/v1/audio/speech/stream").await;
        send(&mut ws, json!({"type": "input.text", "text": "Hi."})).await;
        let error = event(&mut ws).await;
        assert_eq!(error["type"], "error", "{error}");
        assert!(matches!(
            next(&mut ws).await,
            Got::Closed(Some(CloseCode::Policy))
        ));

        let mut ws = connect(&server, "/v1/audio/speech/stream").await;
        send(
            &mut ws,
            json!({"type": "session.config", "voice": "alloy",
            "response_format": "pcm", "split_granularity": "sentence", "max_new_tokens": 2,
            "seed": 1}),
        )
        .await;
        send(
            &mut ws,
            json!({"type": "input.text", "text": "One sentence. Two"}),
        )
        .await;
        let start = event(&mut ws).await;
        assert_eq!(start["type"], "audio.start", "{start}");
        assert_eq!(start["sentence_text"], "One sentence.");
        assert_eq!(start["sample_rate"], 24_000);
        send(
            &mut ws,
            json!({"type": "input.text", "text": " sentences."}),
        )
        .await;
        send(&mut ws, json!({"type": "input.done"})).await;
        let (mut audio, mut events) = (Vec::new(), vec![start]);
        loop {
            match next(&mut ws).await {
                Got::Bytes(bytes) => audio.extend(bytes),
                Got::Event(event) => {
                    let done = event["type"] == "session.done";
                    assert_ne!(event["type"], "error", "{event}");
                    events.push(event);
                    if done {
                        break;
                    }
                }
                Got::Closed(code) => panic!("closed: {code:?}"),
            }
        }
        let dones = of_type(&events, "audio.done");
        let starts = of_type(&events, "audio.start");
        assert_eq!((starts.len(), dones.len()), (2, 2));
        assert_eq!(starts[1]["sentence_text"], "Two sentences.");
        assert_eq!(
            dones[1]["start_sample"],
            dones[0]["end_sample"].as_u64().unwrap() - FADE
        );
        assert_eq!(
            audio.len() as u64,
            dones[1]["end_sample"].as_u64().unwrap() * 2
        );
        let done = of_type(&events, "session.done")[0];
        assert_eq!(
            (
                done["utterance_index"].clone(),
                done["total_sentences"].clone()
            ),
            (json!(0), json!(2))
        );

        send(&mut ws, json!({"type": "input.text", "text": "Next one."})).await;
        send(&mut ws, json!({"type": "input.done"})).await;
        loop {
            if let Got::Event(event) = next(&mut ws).await {
                if event["type"] == "session.done" {
                    assert_eq!(event["utterance_index"], 1);
                    break;
                }
            }
        }
        send(&mut ws, json!({"type": "session.close"})).await;
        assert!(matches!(
            next(&mut ws).await,
            Got::Closed(Some(CloseCode::Normal))
        ));
    });
}

/// A language model's answer replayed a word every 30 ms: the first audio comes back while
/// the answer is still being written. The last word is held until audio arrives, so the
/// test does not depend on the machine's speed: a server that waited for the end of the
/// text would never answer it (the wait gives up after two minutes and the test fails).
#[test]
fn the_first_audio_leaves_before_the_text_is_complete() {
    let server = Server::start(&[]);
    runtime().block_on(async {
        let mut ws = connect(&server, "/v1/audio/speech/realtime").await;
        event(&mut ws).await;
        send(
            &mut ws,
            json!({"type": "session.update", "session": {"response_format": "pcm",
            "max_frames": 2}}),
        )
        .await;
        assert_eq!(event(&mut ws).await["type"], "session.updated");
        let answer = "Sure. Here is the plan for today, step by step. First we write the \
                      tests, then we read them again, and at the end we ship it.";
        let words: Vec<String> = answer.split_inclusive(' ').map(String::from).collect();
        let (mut tx, mut rx) = ws.split();
        let began = Instant::now();
        let reader = tokio::spawn(async move {
            loop {
                let Some(Ok(Message::Text(text))) = rx.next().await else {
                    panic!("closed before any audio")
                };
                let event: Value = serde_json::from_str(&text).unwrap();
                assert_ne!(event["type"], "error", "{event}");
                if event["type"] == "speech.audio.delta" {
                    return (began.elapsed(), rx);
                }
            }
        });
        let (last, rest) = words.split_last().unwrap();
        for word in rest {
            tx.send(Message::Text(
                json!({"type": "input_text.append", "text": word})
                    .to_string()
                    .into(),
            ))
            .await
            .unwrap();
            tokio::time::sleep(Duration::from_millis(30)).await;
        }
        let (first_audio, mut rx) = tokio::time::timeout(Duration::from_secs(120), reader)
            .await
            .expect("no audio while the text was incomplete")
            .unwrap();
        eprintln!("first audio after {first_audio:?}, the text's first sentence after 30 ms");
        tx.send(Message::Text(
            json!({"type": "input_text.append", "text": last})
                .to_string()
                .into(),
        ))
        .await
        .unwrap();
        tx.send(Message::Text(
            json!({"type": "input_text.end"}).to_string().into(),
        ))
        .await
        .unwrap();
        let mut pieces = 0;
        while let Some(Ok(Message::Text(text))) = rx.next().await {
            let event: Value = serde_json::from_str(&text).unwrap();
            pieces += usize::from(event["type"] == "speech.audio.segment");
            if event["type"] == "speech.audio.done" {
                break;
            }
        }
        assert_eq!(pieces, 3, "one piece per sentence");
    });
}

/// Hostile clients: bad JSON, unknown types, binary frames, text that is not a string, an
/// unknown setting and endless text without a flush each get an error event (Mistral's
/// numeric code), and the session goes on; a message over the size limit (64 KiB, or
/// `max_body_bytes` when larger: room for a reference clip) gets an error event and close
/// code 1009. Nothing reaches the server's logs as a panic.
#[test]
fn bad_messages_get_error_events_and_oversized_ones_close_the_socket() {
    let server = Server::start(&[
        ("VOXTRAL_MAX_INPUT_CHARS", "100"),
        ("VOXTRAL_MAX_BODY_BYTES", "1000"),
    ]);
    runtime().block_on(async {
        let mut ws = connect(&server, "/v1/audio/speech/realtime").await;
        event(&mut ws).await;
        let mut errors = Vec::new();
        ws.send(Message::Text("{not json".into())).await.unwrap();
        errors.push(event(&mut ws).await);
        send(&mut ws, json!({"type": "input_audio.append", "audio": ""})).await;
        errors.push(event(&mut ws).await);
        ws.send(Message::Binary(vec![1, 2, 3].into()))
            .await
            .unwrap();
        errors.push(event(&mut ws).await);
        send(&mut ws, json!({"type": "input_text.append", "text": 5})).await;
        errors.push(event(&mut ws).await);
        send(
            &mut ws,
            json!({"type": "session.update", "session": {"voice_id": "robot"}}),
        )
        .await;
        errors.push(event(&mut ws).await);
        send(
            &mut ws,
            json!({"type": "session.update", "session": {"voice_profile": "x"}}),
        )
        .await;
        let unknown = event(&mut ws).await;
        assert_eq!(unknown["error"]["param"], "voice_profile", "{unknown}");
        errors.push(unknown);
        for error in &errors {
            assert_eq!(error["type"], "error", "{error}");
            assert_eq!(error["error"]["code"], 400, "{error}");
        }
        // Text without a flush is bounded: past `max_input_chars` waiting, a delta is refused.
        send(
            &mut ws,
            json!({"type": "session.update", "session": {"max_frames": 1}}),
        )
        .await;
        assert_eq!(event(&mut ws).await["type"], "session.updated");
        let words = "word ".repeat(19);
        send(&mut ws, json!({"type": "input_text.append", "text": words})).await;
        send(
            &mut ws,
            json!({"type": "input_text.append", "text": "x".repeat(10)}),
        )
        .await;
        let refused = event(&mut ws).await;
        assert_eq!(
            refused["error"]["reason"], "input_text_too_long",
            "{refused}"
        );
        send(&mut ws, json!({"type": "input_text.flush"})).await;
        let mut pcm = Vec::new();
        until(&mut ws, "speech.audio.done", &mut pcm).await;
        assert!(!pcm.is_empty(), "the session still speaks");

        let big = json!({"type": "input_text.append", "text": "a".repeat(70_000)});
        send(&mut ws, big).await;
        let error = event(&mut ws).await;
        assert_eq!(error["error"]["code"], 413, "{error}");
        let closed = next(&mut ws).await;
        assert!(
            matches!(closed, Got::Closed(Some(CloseCode::Size))),
            "{closed:?}"
        );
    });
    assert!(!server.logs().contains("panicked"), "{}", server.logs());
}

/// Past `max_speech_sessions` a socket gets an error event and close code 1013; closing a
/// session frees its place. A refused socket does not disturb the open session's audio.
#[test]
fn sessions_are_bounded() {
    let server = Server::start(&[("VOXTRAL_MAX_SPEECH_SESSIONS", "1")]);
    runtime().block_on(async {
        let mut first = connect(&server, "/v1/audio/speech/realtime").await;
        event(&mut first).await;
        let mut second = connect(&server, "/v1/audio/speech/stream").await;
        let refused = event(&mut second).await;
        assert_eq!(refused["code"], "session_limit_reached", "{refused}");
        assert!(matches!(
            next(&mut second).await,
            Got::Closed(Some(CloseCode::Again))
        ));
        send(
            &mut first,
            json!({"type": "session.update", "session": {"max_frames": 1,
            "response_format": "pcm"}}),
        )
        .await;
        event(&mut first).await;
        send(
            &mut first,
            json!({"type": "input_text.append", "text": "Still here."}),
        )
        .await;
        send(&mut first, json!({"type": "input_text.end"})).await;
        let mut pcm = Vec::new();
        until(&mut first, "speech.audio.done", &mut pcm).await;
        assert!(!pcm.is_empty());
        assert!(matches!(next(&mut first).await, Got::Closed(_)));
    });
    server.wait_for("the place to be free", || {
        runtime().block_on(async {
            let mut ws = connect(&server, "/v1/audio/speech/realtime").await;
            event(&mut ws).await["type"] == "session.created"
        })
    });
}

/// `speed` on a text stream as on `/v1/audio/speech`: each piece is stretched as a whole once
/// it is complete (at 2, a piece of 4 frames has 2 frames' samples), the segments' samples
/// follow the stretched stream, and the first piece sounds as `/v1/audio/speech` with the same
/// speed and seed. vLLM-Omni's `session.config` takes `speed` the same way; out of OpenAI's
/// range it is refused.
#[test]
fn speed_stretches_each_piece_as_the_speech_endpoint_does() {
    let server = Server::start(&[]);
    let stretched = 4 * FRAME as u64 / 2;
    runtime().block_on(async {
        let mut ws = connect(&server, "/v1/audio/speech/realtime").await;
        event(&mut ws).await;
        send(
            &mut ws,
            json!({"type": "session.update", "session": {"voice_id": "alloy",
            "response_format": "pcm", "seed": 7, "max_frames": 4, "speed": 2.0}}),
        )
        .await;
        let updated = event(&mut ws).await;
        assert_eq!(updated["session"]["speed"], 2.0, "{updated}");
        send(
            &mut ws,
            json!({"type": "input_text.append", "text": "Hello there. Fine"}),
        )
        .await;
        send(&mut ws, json!({"type": "input_text.flush"})).await;
        let mut pcm = Vec::new();
        let events = until(&mut ws, "speech.audio.done", &mut pcm).await;
        let pieces = of_type(&events, "speech.audio.segment");
        let spans: Vec<(u64, u64)> = pieces
            .iter()
            .map(|p| {
                (
                    p["start_sample"].as_u64().unwrap(),
                    p["end_sample"].as_u64().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            spans,
            [(0, stretched), (stretched - FADE, 2 * stretched - FADE)]
        );
        let stream = mistral_samples(&pcm);
        assert_eq!(stream.len() as u64, 2 * stretched - FADE);
        let body = json!({"model": "tts-1", "input": "Hello there.", "voice": "alloy",
            "response_format": "pcm", "seed": 7, "max_frames": 4, "speed": 2.0});
        let alone = pcm_samples(&server.speech(body));
        assert_eq!(alone.len() as u64, stretched);
        let kept = (stretched - FADE) as usize;
        assert!(max_lsb_diff(&alone[..kept], &stream[..kept]) <= 1);

        send(
            &mut ws,
            json!({"type": "session.update", "session": {"speed": 5}}),
        )
        .await;
        let refused = event(&mut ws).await;
        assert_eq!(refused["error"]["param"], "speed", "{refused}");

        let mut ws = connect(&server, "/v1/audio/speech/stream").await;
        send(
            &mut ws,
            json!({"type": "session.config", "voice": "alloy", "response_format": "pcm",
            "speed": 2.0, "max_new_tokens": 4, "seed": 7}),
        )
        .await;
        send(
            &mut ws,
            json!({"type": "input.text", "text": "Hello there."}),
        )
        .await;
        send(&mut ws, json!({"type": "input.done"})).await;
        let mut audio = Vec::new();
        loop {
            match next(&mut ws).await {
                Got::Bytes(bytes) => audio.extend(bytes),
                Got::Event(event) if event["type"] == "audio.done" => {
                    assert_eq!(event["end_sample"], stretched, "{event}");
                }
                Got::Event(event) if event["type"] == "session.done" => break,
                Got::Event(event) => assert_ne!(event["type"], "error", "{event}"),
                Got::Closed(code) => panic!("closed: {code:?}"),
            }
        }
        assert_eq!(samples(&audio), alone);
    });
}

/// With API keys, a browser's key sent as a subprotocol (`realtime,
/// openai-insecure-api-key.<KEY>`, as on `/v1/realtime`) opens both speech sockets, the
/// server choosing `realtime`; a wrong key, or none, is a 401.
#[test]
fn browsers_send_the_api_key_as_a_subprotocol() {
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    use tokio_tungstenite::tungstenite::Error as WsError;
    let server = Server::start(&[("VOXTRAL_API_KEYS", "sesame")]);
    runtime().block_on(async {
        for path in ["/v1/audio/speech/realtime", "/v1/audio/speech/stream"] {
            let open = |key: Option<&str>| {
                let url = format!("{}{path}", server.base.replace("http://", "ws://"));
                let mut request = url.into_client_request().unwrap();
                if let Some(key) = key {
                    let protocols = format!("realtime, openai-insecure-api-key.{key}");
                    request
                        .headers_mut()
                        .insert("Sec-WebSocket-Protocol", protocols.parse().unwrap());
                }
                tokio_tungstenite::connect_async(request)
            };
            for key in [None, Some("wrong")] {
                match open(key).await {
                    Err(WsError::Http(response)) => assert_eq!(response.status(), 401),
                    Err(e) => panic!("{path} {key:?}: {e}"),
                    Ok(_) => panic!("{path} {key:?}: connected without the key"),
                }
            }
            let (mut ws, response) = open(Some("sesame")).await.unwrap();
            assert_eq!(response.headers()["sec-websocket-protocol"], "realtime");
            // Serving: vLLM-Omni's session closes when asked, Mistral's greets first.
            if path.ends_with("stream") {
                send(&mut ws, json!({"type": "session.close"})).await;
                assert!(matches!(
                    next(&mut ws).await,
                    Got::Closed(Some(CloseCode::Normal))
                ));
            } else {
                assert_eq!(event(&mut ws).await["type"], "session.created");
            }
        }
    });
}

/// vLLM-Omni's socket takes hostile messages as Mistral's does: bad JSON, an unknown type, a
/// binary frame and text that is not a string each get `{"type": "error", "message"}` and the
/// session goes on; a message over the size limit gets an error and close code 1009.
#[test]
fn vllm_omni_bad_messages_get_error_events_and_oversized_ones_close_the_socket() {
    let server = Server::start(&[]);
    runtime().block_on(async {
        let mut ws = connect(&server, "/v1/audio/speech/stream").await;
        send(
            &mut ws,
            json!({"type": "session.config", "voice": "alloy", "response_format": "pcm",
            "max_new_tokens": 1}),
        )
        .await;
        ws.send(Message::Text("{not json".into())).await.unwrap();
        let mut errors = vec![event(&mut ws).await];
        send(&mut ws, json!({"type": "input.audio", "audio": ""})).await;
        errors.push(event(&mut ws).await);
        ws.send(Message::Binary(vec![1, 2, 3].into()))
            .await
            .unwrap();
        errors.push(event(&mut ws).await);
        send(&mut ws, json!({"type": "input.text", "text": 5})).await;
        errors.push(event(&mut ws).await);
        for error in &errors {
            assert_eq!(error["type"], "error", "{error}");
            assert!(!error["message"].as_str().unwrap().is_empty(), "{error}");
        }
        send(
            &mut ws,
            json!({"type": "input.text", "text": "Still here."}),
        )
        .await;
        send(&mut ws, json!({"type": "input.done"})).await;
        let mut audio = Vec::new();
        loop {
            match next(&mut ws).await {
                Got::Bytes(bytes) => audio.extend(bytes),
                Got::Event(event) if event["type"] == "session.done" => break,
                Got::Event(event) => assert_ne!(event["type"], "error", "{event}"),
                Got::Closed(code) => panic!("closed: {code:?}"),
            }
        }
        assert_eq!(audio.len(), FRAME * 2, "the session still speaks");

        let big = json!({"type": "input.text", "text": "a".repeat(70_000)});
        send(&mut ws, big).await;
        let error = event(&mut ws).await;
        assert_eq!(error["code"], "message_too_large", "{error}");
        let closed = next(&mut ws).await;
        assert!(
            matches!(closed, Got::Closed(Some(CloseCode::Size))),
            "{closed:?}"
        );
    });
    assert!(!server.logs().contains("panicked"), "{}", server.logs());
}

/// One Mistral session of 3 frames from connect to `speech.audio.done`: all its audio.
async fn speak_three_frames(base: &str) {
    let url = format!(
        "{}/v1/audio/speech/realtime",
        base.replace("http://", "ws://")
    );
    let mut ws = tokio_tungstenite::connect_async(url).await.unwrap().0;
    event(&mut ws).await;
    send(
        &mut ws,
        json!({"type": "session.update", "session": {"max_frames": 3,
        "response_format": "pcm"}}),
    )
    .await;
    assert_eq!(event(&mut ws).await["type"], "session.updated");
    send(
        &mut ws,
        json!({"type": "input_text.append", "text": "Still here."}),
    )
    .await;
    send(&mut ws, json!({"type": "input_text.end"})).await;
    let mut pcm = Vec::new();
    until(&mut ws, "speech.audio.done", &mut pcm).await;
    assert_eq!(pcm.len(), 3 * FRAME * 4, "all its audio, f32le");
}

/// A client that never reads while its audio keeps coming (six sentences of 400 frames each on
/// the never-stopping checkpoint): the session's send queue is bounded, and once the client
/// has read nothing for the stall limit the session ends with an error event and close code
/// 1008. Meanwhile other sessions get all their audio, one after another until the stalled
/// one is closed.
#[test]
fn a_client_that_never_reads_is_closed_and_others_keep_their_audio() {
    let server = Server::start(&[]);
    runtime().block_on(async {
        let mut deaf = connect_small_window(&server, "/v1/audio/speech/realtime").await;
        assert_eq!(next_message(&mut deaf).await["type"], "session.created");
        for event in [
            json!({"type": "session.update", "session": {"max_frames": 400,
                   "response_format": "pcm"}}),
            json!({"type": "input_text.append", "text": "One. Two. Three. Four. Five. Six."}),
            json!({"type": "input_text.flush"}),
        ] {
            deaf.send(Message::Text(event.to_string().into()))
                .await
                .unwrap();
        }
        let stalled = Arc::new(AtomicBool::new(false));
        let others = tokio::spawn({
            let (base, stalled) = (server.base.clone(), stalled.clone());
            async move {
                let mut rounds = 0;
                while !stalled.load(Ordering::Relaxed) {
                    speak_three_frames(&base).await;
                    rounds += 1;
                }
                rounds
            }
        });
        let deadline = Instant::now() + Duration::from_secs(300);
        while !server.logs().contains("the client is not reading") {
            assert!(Instant::now() < deadline, "{}", server.logs());
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        stalled.store(true, Ordering::Relaxed);
        let (mut deltas, mut last) = (0, Value::Null);
        let code = loop {
            match tokio::time::timeout(Duration::from_secs(120), deaf.next())
                .await
                .expect("no close within two minutes")
            {
                Some(Ok(Message::Text(text))) => {
                    last = serde_json::from_str(&text).unwrap();
                    deltas += usize::from(last["type"] == "speech.audio.delta");
                }
                Some(Ok(Message::Close(frame))) => break frame.map(|f| f.code),
                Some(Ok(_)) => {}
                other => panic!("no close frame: {other:?}"),
            }
        };
        assert_eq!(last["error"]["reason"], "client_not_reading", "{last}");
        assert_eq!(code, Some(CloseCode::Policy));
        assert!(deltas > 0);
        let rounds = others.await.unwrap();
        assert!(rounds > 0, "no other session ran meanwhile");
        eprintln!("{rounds} other sessions spoke while one client did not read");
    });
    assert!(!server.logs().contains("panicked"), "{}", server.logs());
}

/// Sends `megabytes` of text deltas of 1000 characters with no flush (reading the answers
/// meanwhile), then the flush; returns the errors' codes and the audio's length.
async fn flood(base: String, path: &str, config: Value, megabytes: usize) -> (Vec<String>, usize) {
    let url = format!("{}{path}", base.replace("http://", "ws://"));
    let (mut tx, mut rx) = tokio_tungstenite::connect_async(url)
        .await
        .unwrap()
        .0
        .split();
    let mistral = path.ends_with("realtime");
    let (append, flush, done) = if mistral {
        ("input_text.append", "input_text.flush", "speech.audio.done")
    } else {
        ("input.text", "input.done", "session.done")
    };
    let reader = tokio::spawn(async move {
        let (mut codes, mut audio) = (Vec::new(), 0);
        loop {
            match rx.next().await {
                Some(Ok(Message::Text(text))) => {
                    let event: Value = serde_json::from_str(&text).unwrap();
                    match event["type"].as_str().unwrap() {
                        "error" if mistral => codes.push(event["error"]["reason"].to_string()),
                        "error" => codes.push(event["code"].to_string()),
                        "speech.audio.delta" => {
                            audio += event["audio_data"].as_str().unwrap().len()
                        }
                        kind if kind == done => return (codes, audio),
                        _ => {}
                    }
                }
                Some(Ok(Message::Binary(bytes))) => audio += bytes.len(),
                Some(Ok(_)) => {}
                other => panic!("{other:?}"),
            }
        }
    });
    tx.send(Message::Text(config.to_string().into()))
        .await
        .unwrap();
    let delta = json!({"type": append, "text": "word ".repeat(200)}).to_string();
    for _ in 0..megabytes * 1000 {
        tx.send(Message::Text(delta.clone().into())).await.unwrap();
    }
    tx.send(Message::Text(json!({"type": flush}).to_string().into()))
        .await
        .unwrap();
    reader.await.unwrap()
}

/// 100 MB of text deltas with no flush, 50 MB on each socket at once: the text waiting to be
/// spoken stays within `max_input_chars` (deltas past it are refused, `input_text_too_long`),
/// the server's resident memory grows by less than 100 MB over the whole flood, and both
/// sessions still speak when flushed.
#[test]
fn a_hundred_megabytes_of_text_deltas_keep_memory_bounded() {
    let server = Server::start(&[]);
    runtime().block_on(async {
        // Warm: the sockets' first allocations are not the flood's.
        speak_three_frames(&server.base).await;
        let before = resident_bytes(&server);
        let mistral = tokio::spawn(flood(
            server.base.clone(),
            "/v1/audio/speech/realtime",
            json!({"type": "session.update", "session": {"max_frames": 1,
                   "response_format": "pcm"}}),
            50,
        ));
        let vllm = tokio::spawn(flood(
            server.base.clone(),
            "/v1/audio/speech/stream",
            json!({"type": "session.config", "response_format": "pcm", "max_new_tokens": 1}),
            50,
        ));
        let mut peak = before;
        while !(mistral.is_finished() && vllm.is_finished()) {
            peak = peak.max(resident_bytes(&server));
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        for (name, (codes, audio)) in [
            ("mistral", mistral.await.unwrap()),
            ("vllm-omni", vllm.await.unwrap()),
        ] {
            assert!(!codes.is_empty(), "{name}: no delta was refused");
            assert!(
                codes.iter().all(|c| c == "\"input_text_too_long\""),
                "{name}: {:?}",
                codes.iter().find(|c| *c != "\"input_text_too_long\"")
            );
            assert!(audio > 0, "{name}: no audio after the flush");
            eprintln!("{name}: {} deltas refused", codes.len());
        }
        let growth = peak.saturating_sub(before);
        eprintln!("resident memory grew by {} MB at most", growth >> 20);
        assert!(growth < 100 << 20, "grew by {growth} bytes");
    });
    assert!(!server.logs().contains("panicked"), "{}", server.logs());
}
