//! Live transcription: many utterances decoded in one batched step (the model), and OpenAI's
//! Realtime transcription session at `/v1/realtime?intent=transcription` as a plain WebSocket
//! client sees it, against a real `voxtral-tts serve` with the `stt-tiny` random checkpoint.

use crate::common;

use common::*;
use futures_util::{SinkExt, Stream, StreamExt};
use serde_json::{json, Value};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::{Error as WsError, Message};
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};
use voxtral_tts::audio::input::resample;
use voxtral_tts::models::voxtral_realtime::batch::BatchDecoder;
use voxtral_tts::models::voxtral_realtime::streaming::AudioStream;
use voxtral_tts::models::voxtral_realtime::testkit::cached_endless_test_model;
use voxtral_tts::models::voxtral_realtime::transcriber::Transcriber;
use voxtral_tts::tensor::tch_backend::TchTensor;
use voxtral_tts::tensor::DType;

const MODEL: &str = "stt-tiny-endless-0";

/// The `stt-tiny` checkpoint that never says `</s>`: every utterance decodes as many tokens as
/// its audio has positions, on every CPU.
fn stt_model() -> std::path::PathBuf {
    cached_endless_test_model(0).unwrap()
}

/// A cubic chirp of `len` samples at `rate`, from `f0` Hz.
fn chirp(len: usize, rate: u32, f0: f64) -> Vec<f32> {
    (0..len)
        .map(|i| {
            let t = i as f64 / f64::from(rate);
            (0.5 * (std::f64::consts::TAU * (f0 * t + 3000.0 * t * t * t)).sin()) as f32
        })
        .collect()
}

/// PCM16 samples of `audio` (what a client sends), and those samples back as f32.
fn pcm16(audio: &[f32]) -> (Vec<i16>, Vec<f32>) {
    let pcm: Vec<i16> = audio.iter().map(|&x| (x * 32767.0) as i16).collect();
    let back = pcm.iter().map(|&s| f32::from(s) / 32768.0).collect();
    (pcm, back)
}

fn load(positions: usize) -> Transcriber<TchTensor> {
    Transcriber::<TchTensor>::load(&stt_model(), &tch::Device::Cpu, DType::F32, positions).unwrap()
}

/// The offline transcript of 24 kHz `audio` as the server sees it (resampled to 16 kHz), and
/// whether its first text is decoded from a position whose audio is all in before the right
/// pad (so a live session sends it before the commit).
fn offline_text(audio24k: &[f32]) -> (String, bool) {
    offline_text_16k(&resample(audio24k, 24_000, 16_000).unwrap())
}

/// [`offline_text`] of audio at the model's 16 kHz.
fn offline_text_16k(audio: &[f32]) -> (String, bool) {
    let _guard = tch::no_grad_guard();
    let model = load(1000);
    let transcript = model.transcribe(audio).unwrap();
    let tokens = &transcript.tokens;
    let first_text = (1..=tokens.len()).find(|&n| !model.tokenizer.decode(&tokens[..n]).is_empty());
    let s = &model.config.streaming;
    // Token n - 1 comes from position prompt_len - 1 + n - 1, whose last mel frame ends 40
    // samples past it.
    let live = first_text.is_some_and(|n| {
        (s.prompt_len() - 1 + n) * s.samples_per_token + 40
            <= s.left_pad_tokens * s.samples_per_token + audio.len()
    });
    (transcript.text, live)
}

/// Three utterances of different lengths, streamed in pieces of different sizes and starting
/// at different times, decoded in shared steps: each gets the tokens of its offline
/// transcription alone, and the steps did batch several of them.
#[test]
fn batched_live_streams_decode_the_tokens_of_each_alone() {
    let _guard = tch::no_grad_guard();
    let model = load(200);
    let signals = [
        chirp(16_000, 16_000, 100.0),
        chirp(27_000, 16_000, 300.0),
        chirp(9_500, 16_000, 60.0),
    ];
    let alone: Vec<Vec<u32>> = signals
        .iter()
        .map(|s| model.transcribe(s).unwrap().tokens)
        .collect();
    let pieces = [1280, 700, 2000];
    let starts = [0, 3, 6]; // In steps of the loop below.
    let mut decoder = BatchDecoder::new(&model, 3);
    let mut streams: Vec<_> = (0..3)
        .map(|_| {
            let audio = AudioStream::start(&model).unwrap();
            (audio, decoder.start().unwrap(), 0usize, false)
        })
        .collect();
    assert_eq!(decoder.free_slots(), 0);
    let (mut widest, mut round) = (0, 0);
    loop {
        for (i, (audio, utterance, sent, finished)) in streams.iter_mut().enumerate() {
            if round < starts[i] || *finished {
                continue;
            }
            let signal = &signals[i];
            let embeddings = if *sent < signal.len() {
                let end = (*sent + pieces[i]).min(signal.len());
                let part = audio.push(&signal[*sent..end]).unwrap();
                *sent = end;
                part
            } else {
                *finished = true;
                audio.finish().unwrap()
            };
            if let Some(e) = embeddings {
                utterance.feed(e);
            }
        }
        let mut rows: Vec<_> = streams.iter_mut().map(|(_, u, _, _)| u).collect();
        let decoded = decoder.step(&mut rows);
        widest = widest.max(decoded);
        round += 1;
        if streams
            .iter()
            .all(|(_, u, _, finished)| *finished && u.waiting() == 0)
        {
            break;
        }
        assert!(round < 2000, "the streams never finished");
    }
    for (i, (_, utterance, _, _)) in streams.iter().enumerate() {
        assert_eq!(utterance.tokens(), alone[i], "stream {i}");
    }
    assert!(
        widest >= 3,
        "no step decoded the three streams together ({widest})"
    );
    for (_, utterance, _, _) in streams {
        decoder.end(utterance);
    }
    assert_eq!(decoder.free_slots(), 3);
}

type Socket = WebSocketStream<MaybeTlsStream<TcpStream>>;

/// Starts a server on the tiny speech model and the tiny speech-to-text model.
fn start(env: &[(&str, &str)]) -> Server {
    let stt = stt_model();
    let server = Server::spawn(&model(), &["--model", stt.to_str().unwrap()], env);
    server.wait_ready();
    let key = env
        .iter()
        .find(|(k, _)| *k == "VOXTRAL_API_KEYS")
        .map(|(_, v)| *v);
    server.wait_for("the speech-to-text model", || {
        let mut request = agent().get(&server.url("/v1/models"));
        if let Some(key) = key {
            request = request.set("Authorization", &format!("Bearer {key}"));
        }
        let models = send(request, None).json();
        models["data"]
            .as_array()
            .unwrap()
            .iter()
            .any(|m| m["id"] == MODEL && m["capabilities"].is_object())
    });
    server
}

async fn connect(server: &Server, key: Option<&str>) -> Result<Socket, WsError> {
    let header = key.map(|key| ("Authorization", format!("Bearer {key}")));
    Ok(connect_with(server, header).await?.0)
}

/// Connects with `header` added to the upgrade request; returns the upgrade response too.
async fn connect_with(
    server: &Server,
    header: Option<(&'static str, String)>,
) -> Result<
    (
        Socket,
        tokio_tungstenite::tungstenite::handshake::client::Response,
    ),
    WsError,
> {
    let url = format!(
        "{}/v1/realtime?intent=transcription",
        server.base.replace("http://", "ws://")
    );
    let mut request = url.into_client_request().unwrap();
    if let Some((name, value)) = header {
        request.headers_mut().insert(name, value.parse().unwrap());
    }
    tokio_tungstenite::connect_async(request).await
}

async fn send_event(ws: &mut Socket, event: Value) {
    ws.send(Message::Text(event.to_string().into()))
        .await
        .unwrap();
}

/// The next server event, or `None` once the server has closed the socket.
async fn next_event(ws: &mut Socket) -> Option<Value> {
    loop {
        let message = tokio::time::timeout(Duration::from_secs(120), ws.next())
            .await
            .expect("no server event within two minutes");
        match message {
            Some(Ok(Message::Text(text))) => return Some(serde_json::from_str(&text).unwrap()),
            Some(Ok(Message::Close(_))) | None | Some(Err(_)) => return None,
            Some(Ok(_)) => {}
        }
    }
}

/// Events up to and including the first of type `kind`.
async fn events_until(ws: &mut Socket, kind: &str) -> Vec<Value> {
    let mut events = Vec::new();
    loop {
        let event = next_event(ws).await.expect("the socket closed");
        let done = event["type"] == kind;
        assert!(
            event["type"] != "error" || kind == "error",
            "unexpected error: {event}"
        );
        events.push(event);
        if done {
            return events;
        }
    }
}

/// Sends `pcm` in appends of `piece` samples (base64 PCM16).
async fn append(ws: &mut Socket, pcm: &[i16], piece: usize) {
    use base64::Engine as _;
    for chunk in pcm.chunks(piece) {
        let bytes: Vec<u8> = chunk.iter().flat_map(|s| s.to_le_bytes()).collect();
        let audio = base64::engine::general_purpose::STANDARD.encode(bytes);
        send_event(
            ws,
            json!({"type": "input_audio_buffer.append", "audio": audio}),
        )
        .await;
    }
}

fn deltas(events: &[Value], item: &str) -> String {
    events
        .iter()
        .filter(|e| e["type"] == "conversation.item.input_audio_transcription.delta")
        .inspect(|e| assert_eq!(e["item_id"], item, "{e}"))
        .map(|e| e["delta"].as_str().unwrap())
        .collect()
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// A session as a client runs it: created, updated (GA and beta), audio streamed in 20 ms
/// appends, text out before the commit where the model has decoded some, then the commit's
/// events and a completed transcript equal to the offline transcription of the same audio;
/// a second item follows the first. The metrics count both APIs.
#[test]
fn a_live_session_transcribes_as_offline_does() {
    let server = start(&[]);
    let audio = chirp(36_000, 24_000, 100.0);
    let (pcm, sent) = pcm16(&audio);
    let (want, before_commit) = offline_text(&sent);
    assert!(!want.is_empty(), "the test checkpoint decodes some text");
    runtime().block_on(async {
        let mut ws = connect(&server, None).await.unwrap();
        let created = next_event(&mut ws).await.unwrap();
        assert_eq!(created["type"], "session.created", "{created}");
        assert_eq!(created["session"]["type"], "transcription");
        assert_eq!(
            created["session"]["audio"]["input"]["format"]["rate"],
            24000
        );
        assert!(created["event_id"].is_string());

        send_event(
            &mut ws,
            json!({"type": "session.update", "session": {
            "type": "transcription", "audio": {"input": {
                "format": {"type": "audio/pcm", "rate": 24000},
                "transcription": {"model": MODEL, "language": "en"},
                "turn_detection": null}}}}),
        )
        .await;
        let updated = events_until(&mut ws, "session.updated").await;
        let session = &updated.last().unwrap()["session"];
        assert_eq!(session["audio"]["input"]["transcription"]["language"], "en");
        send_event(
            &mut ws,
            json!({"type": "transcription_session.update", "session": {
            "input_audio_format": "pcm16", "turn_detection": null,
            "input_audio_transcription": {"model": MODEL}}}),
        )
        .await;
        let beta = events_until(&mut ws, "transcription_session.updated").await;
        assert_eq!(
            beta.last().unwrap()["session"]["input_audio_format"],
            "pcm16"
        );

        append(&mut ws, &pcm, 480).await;
        let mut early = Vec::new();
        if before_commit {
            early =
                events_until(&mut ws, "conversation.item.input_audio_transcription.delta").await;
        }
        send_event(
            &mut ws,
            json!({"type": "input_audio_buffer.commit", "event_id": "c1"}),
        )
        .await;
        let mut events = events_until(
            &mut ws,
            "conversation.item.input_audio_transcription.completed",
        )
        .await;
        early.append(&mut events);
        let kinds: Vec<&str> = early.iter().map(|e| e["type"].as_str().unwrap()).collect();
        let at = |kind: &str| kinds.iter().position(|k| *k == kind).unwrap();
        assert!(at("input_audio_buffer.committed") < at("conversation.item.added"));
        assert!(at("conversation.item.added") < at("conversation.item.done"));
        let committed = &early[at("input_audio_buffer.committed")];
        let item = committed["item_id"].as_str().unwrap().to_string();
        assert!(committed["previous_item_id"].is_null(), "{committed}");
        assert_eq!(
            early[at("conversation.item.added")]["item"]["id"],
            item.as_str()
        );
        let completed = early.last().unwrap();
        assert_eq!(completed["item_id"], item.as_str());
        assert_eq!(completed["content_index"], 0);
        assert_eq!(completed["transcript"], want.as_str());
        assert_eq!(deltas(&early, &item), want);
        assert_eq!(completed["usage"]["type"], "duration");
        let seconds = completed["usage"]["seconds"].as_f64().unwrap();
        assert!((seconds - 1.5).abs() < 1e-3, "{seconds}");
        eprintln!(
            "live transcript {want:?}: {} deltas, text before the commit: {before_commit}",
            kinds.iter().filter(|k| k.ends_with(".delta")).count()
        );

        // A second item, in other append sizes.
        append(&mut ws, &pcm, 1000).await;
        send_event(&mut ws, json!({"type": "input_audio_buffer.commit"})).await;
        let events = events_until(
            &mut ws,
            "conversation.item.input_audio_transcription.completed",
        )
        .await;
        let committed = events
            .iter()
            .find(|e| e["type"] == "input_audio_buffer.committed")
            .unwrap();
        assert_eq!(committed["previous_item_id"], item.as_str());
        let second = committed["item_id"].as_str().unwrap();
        assert_ne!(second, item);
        assert_eq!(events.last().unwrap()["transcript"], want.as_str());
        assert_eq!(deltas(&events, second), want);
    });

    // The upload path counts too.
    let boundary = "realtime-test";
    let mut body = format!(
        "--{boundary}\r\nContent-Disposition: form-data; name=\"model\"\r\n\r\n{MODEL}\r\n\
         --{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.wav\"\r\n\r\n"
    )
    .into_bytes();
    body.extend(pcm16_wav(24_000, &pcm));
    body.extend(format!("\r\n--{boundary}--\r\n").bytes());
    let request = agent().post(&server.url("/v1/audio/transcriptions")).set(
        "Content-Type",
        &format!("multipart/form-data; boundary={boundary}"),
    );
    let reply = send(request, Some(&body));
    assert_eq!(reply.json()["text"], want.as_str());

    let text = server.metrics();
    for api in ["realtime", "transcriptions"] {
        let labels = [("model", MODEL), ("api", api)];
        let count = |name: &str| metric(&text, name, &labels).unwrap_or(0.0);
        let items = if api == "realtime" { 2.0 } else { 1.0 };
        assert_eq!(
            count("transcription_audio_duration_seconds_count"),
            items,
            "{api}"
        );
        let audio = count("transcription_audio_duration_seconds_sum");
        assert!((audio - 1.5 * items).abs() < 1e-3, "{api}: {audio}");
        assert_eq!(
            count("transcription_real_time_factor_count"),
            items,
            "{api}"
        );
        assert!(
            count("transcription_speech_to_text_seconds_count") >= items,
            "{api}"
        );
    }
}

/// Commit needs audio; clear drops what was appended (its text included), and the next item
/// transcribes only what follows. An item longer than `max_transcription_seconds` fails
/// (`.failed`), and the session goes on.
#[test]
fn clear_drops_the_buffer_and_an_empty_commit_is_an_error() {
    let server = start(&[("VOXTRAL_MAX_TRANSCRIPTION_SECONDS", "2")]);
    let audio = chirp(24_000, 24_000, 100.0);
    let (pcm, sent) = pcm16(&audio);
    let (want, _) = offline_text(&sent);
    let noise = chirp(30_000, 24_000, 700.0);
    let (noise_pcm, _) = pcm16(&noise);
    runtime().block_on(async {
        let mut ws = connect(&server, None).await.unwrap();
        events_until(&mut ws, "session.created").await;
        send_event(
            &mut ws,
            json!({"type": "input_audio_buffer.commit", "event_id": "e1"}),
        )
        .await;
        let error = events_until(&mut ws, "error").await.pop().unwrap();
        assert_eq!(error["error"]["code"], "input_audio_buffer_commit_empty");
        assert_eq!(error["error"]["type"], "invalid_request_error");
        assert_eq!(error["error"]["event_id"], "e1");

        append(&mut ws, &noise_pcm, 2400).await;
        send_event(&mut ws, json!({"type": "input_audio_buffer.clear"})).await;
        // No event of the cleared item follows `cleared` (the checks on deltas below).
        events_until(&mut ws, "input_audio_buffer.cleared").await;
        send_event(&mut ws, json!({"type": "input_audio_buffer.commit"})).await;
        let error = events_until(&mut ws, "error").await.pop().unwrap();
        assert_eq!(error["error"]["code"], "input_audio_buffer_commit_empty");

        append(&mut ws, &pcm, 480).await;
        send_event(&mut ws, json!({"type": "input_audio_buffer.commit"})).await;
        let events = events_until(
            &mut ws,
            "conversation.item.input_audio_transcription.completed",
        )
        .await;
        let completed = events.last().unwrap();
        let item = completed["item_id"].as_str().unwrap();
        assert_eq!(completed["transcript"], want.as_str());
        assert_eq!(deltas(&events, item), want);
        let seconds = completed["usage"]["seconds"].as_f64().unwrap();
        assert!((seconds - 1.0).abs() < 1e-3, "{seconds}");

        // Past the positions of 2 s (and their pads) while it streams.
        let (long, _) = pcm16(&chirp(24_000 * 5, 24_000, 100.0));
        append(&mut ws, &long, 4800).await;
        let failed = events_until(
            &mut ws,
            "conversation.item.input_audio_transcription.failed",
        )
        .await
        .pop()
        .unwrap();
        let message = failed["error"]["message"].as_str().unwrap();
        assert!(message.contains("too long"), "{failed}");
        send_event(&mut ws, json!({"type": "input_audio_buffer.commit"})).await;
        events_until(&mut ws, "input_audio_buffer.committed").await;
        // Within them while it streams, past them once the commit pads it.
        let (longish, _) = pcm16(&chirp(24_000 * 3, 24_000, 100.0));
        append(&mut ws, &longish, 4800).await;
        send_event(&mut ws, json!({"type": "input_audio_buffer.commit"})).await;
        let events = events_until(
            &mut ws,
            "conversation.item.input_audio_transcription.failed",
        )
        .await;
        let committed = events
            .iter()
            .find(|e| e["type"] == "input_audio_buffer.committed")
            .expect("the commit's events first");
        assert_eq!(committed["item_id"], events.last().unwrap()["item_id"]);
        append(&mut ws, &pcm, 480).await;
        send_event(&mut ws, json!({"type": "input_audio_buffer.commit"})).await;
        let events = events_until(
            &mut ws,
            "conversation.item.input_audio_transcription.completed",
        )
        .await;
        assert_eq!(events.last().unwrap()["transcript"], want.as_str());
        assert!(
            !events.iter().any(|e| e["item_id"] == failed["item_id"]),
            "the failed item completes nothing"
        );
    });
}

/// 24 kHz samples in `ms` milliseconds.
fn at_24k(ms: usize) -> usize {
    ms * 24
}

/// `ms` of a 100 Hz hum at -63 dBFS, well below server_vad's level at the default threshold
/// (-40 dBFS).
fn hum(ms: usize) -> Vec<f32> {
    (0..at_24k(ms))
        .map(|i| 0.001 * (i as f32 * 100.0 * std::f32::consts::TAU / 24_000.0).sin())
        .collect()
}

/// `ms` of white noise (a fixed xorshift sequence) up to `amplitude`.
fn noise(ms: usize, amplitude: f32) -> Vec<f32> {
    let mut state = 0x9e37_79b9_u32;
    (0..at_24k(ms))
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 17;
            state ^= state << 5;
            amplitude * (state as f32 / u32::MAX as f32 * 2.0 - 1.0)
        })
        .collect()
}

/// The events of `item`, in order.
fn of_item<'a>(events: &'a [Value], item: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["item_id"] == item).collect()
}

/// With `server_vad` the server finds each burst of a tone or noise between silences and
/// commits it as its own item: `speech_started`, `speech_stopped`, the commit's events, and a
/// transcript equal to the offline transcription of the item's audio (the burst, the 300 ms
/// of padding before it and the 500 ms of quiet that ended it). A client commit during speech
/// ends the item without `speech_stopped`. Silence and a quiet hum make no item.
#[test]
fn server_vad_commits_each_burst_and_ignores_silence() {
    // f32, as `offline_text` computes: the random checkpoint's tokens change with the
    // rounding of bf16 activations.
    let server = start(&[("VOXTRAL_DTYPE", "f32")]);
    // Milliseconds: hum 0-500, chirp 500-1500, silence 1500-2300, noise 2300-3000, hum
    // 3000-3800, chirp 3800-4320.
    let mut audio = hum(500);
    audio.extend(chirp(at_24k(1000), 24_000, 100.0));
    audio.extend(vec![0.0; at_24k(800)]);
    audio.extend(noise(700, 0.3));
    audio.extend(hum(800));
    audio.extend(chirp(at_24k(520), 24_000, 300.0));
    let (pcm, sent) = pcm16(&audio);
    // Speech starts at the first loud frame less the padding, and stops once 500 ms of quiet
    // have followed (or at the client's commit).
    let spans = [(200, 2000), (2000, 3500), (3500, 4320)];
    let wants: Vec<String> = spans
        .iter()
        .map(|&(start, end)| offline_text(&sent[at_24k(start)..at_24k(end)]).0)
        .collect();
    assert!(
        wants.iter().any(|w| !w.is_empty()),
        "the test checkpoint decodes some text"
    );
    let server_vad = json!({"type": "server_vad", "threshold": 0.5, "prefix_padding_ms": 300,
                            "silence_duration_ms": 500});
    let update = json!({"type": "session.update", "session": {"type": "transcription",
        "audio": {"input": {"turn_detection": server_vad}}}});
    runtime().block_on(async {
        let mut ws = connect(&server, None).await.unwrap();
        events_until(&mut ws, "session.created").await;
        send_event(&mut ws, update.clone()).await;
        let updated = events_until(&mut ws, "session.updated").await;
        let session = &updated.last().unwrap()["session"];
        assert_eq!(session["audio"]["input"]["turn_detection"], server_vad);
        let mut quiet = hum(1000);
        quiet.extend(vec![0.0; at_24k(1000)]);
        append(&mut ws, &pcm16(&quiet).0, 480).await;
        send_event(&mut ws, json!({"type": "input_audio_buffer.commit"})).await;
        let event = next_event(&mut ws).await.unwrap();
        assert_eq!(
            event["error"]["code"], "input_audio_buffer_commit_empty",
            "nothing comes before the commit's error: {event}"
        );
        ws.close(None).await.unwrap();

        let mut ws = connect(&server, None).await.unwrap();
        events_until(&mut ws, "session.created").await;
        send_event(&mut ws, update).await;
        events_until(&mut ws, "session.updated").await;
        append(&mut ws, &pcm[..at_24k(3800)], 480).await;
        let mut events = Vec::new();
        for _ in 0..2 {
            events.extend(
                events_until(
                    &mut ws,
                    "conversation.item.input_audio_transcription.completed",
                )
                .await,
            );
        }
        append(&mut ws, &pcm[at_24k(3800)..], 480).await;
        events.extend(events_until(&mut ws, "input_audio_buffer.speech_started").await);
        send_event(&mut ws, json!({"type": "input_audio_buffer.commit"})).await;
        events.extend(
            events_until(
                &mut ws,
                "conversation.item.input_audio_transcription.completed",
            )
            .await,
        );

        let started: Vec<&Value> = events
            .iter()
            .filter(|e| e["type"] == "input_audio_buffer.speech_started")
            .collect();
        assert_eq!(started.len(), 3, "{events:?}");
        let mut previous = Value::Null;
        for (i, ((start, end), want)) in spans.into_iter().zip(&wants).enumerate() {
            let item = started[i]["item_id"].as_str().unwrap();
            assert_eq!(started[i]["audio_start_ms"], start, "item {i}");
            let own = of_item(&events, item);
            let kinds: Vec<&str> = own
                .iter()
                .map(|e| e["type"].as_str().unwrap())
                .filter(|k| !k.ends_with(".delta"))
                .collect();
            let mut expected = vec![
                "input_audio_buffer.speech_started",
                "input_audio_buffer.speech_stopped",
                "input_audio_buffer.committed",
                "conversation.item.input_audio_transcription.completed",
            ];
            if i == 2 {
                expected.remove(1);
            } else {
                let stopped = own
                    .iter()
                    .find(|e| e["type"] == "input_audio_buffer.speech_stopped")
                    .unwrap();
                assert_eq!(stopped["audio_end_ms"], end, "item {i}: {stopped}");
            }
            assert_eq!(kinds, expected, "item {i}");
            let committed = own
                .iter()
                .find(|e| e["type"] == "input_audio_buffer.committed")
                .unwrap();
            assert_eq!(committed["previous_item_id"], previous, "item {i}");
            let added = events
                .iter()
                .filter(|e| e["type"] == "conversation.item.added")
                .nth(i)
                .unwrap();
            assert_eq!(added["item"]["id"], item);
            let completed = own.last().unwrap();
            assert_eq!(completed["transcript"], want.as_str(), "item {i}");
            let text: String = own
                .iter()
                .filter(|e| e["type"] == "conversation.item.input_audio_transcription.delta")
                .map(|e| e["delta"].as_str().unwrap())
                .collect();
            assert_eq!(&text, want, "item {i}");
            let seconds = completed["usage"]["seconds"].as_f64().unwrap();
            let length = (end - start) as f64 / 1000.0;
            assert!((seconds - length).abs() < 1e-3, "item {i}: {seconds}");
            previous = json!(item);
        }
        eprintln!("server_vad transcripts: {wants:?}");

        // After the items, quiet again makes none.
        append(&mut ws, &pcm16(&hum(1000)).0, 480).await;
        send_event(&mut ws, json!({"type": "input_audio_buffer.commit"})).await;
        let event = next_event(&mut ws).await.unwrap();
        assert_eq!(
            event["error"]["code"], "input_audio_buffer_commit_empty",
            "{event}"
        );
    });
}

/// Each bad event (bad JSON, an unknown type, bad values, a binary frame) gets an `error` event
/// in OpenAI's shape, naming what is wrong, and the session goes on; a message over the size
/// limit gets an error event and close code 1009.
#[test]
fn bad_events_get_error_events_and_the_session_goes_on() {
    let server = start(&[]);
    runtime().block_on(async {
        let mut ws = connect(&server, None).await.unwrap();
        events_until(&mut ws, "session.created").await;
        let cases = [
            ("{not json".to_string(), "invalid_json", None),
            (
                json!({"type": "response.create"}).to_string(),
                "unknown_event",
                Some("type"),
            ),
            (
                json!({"type": "input_audio_buffer.append", "audio": "not base64!"}).to_string(),
                "invalid_audio",
                Some("audio"),
            ),
            (
                json!({"type": "session.update", "session": {"type": "realtime"}}).to_string(),
                "invalid_value",
                Some("session.type"),
            ),
            (
                json!({"type": "session.update", "session": {"type": "transcription",
                    "audio": {"input": {"turn_detection": {"type": "semantic_vad"}}}}})
                .to_string(),
                "invalid_value",
                Some("session.audio.input.turn_detection.type"),
            ),
            (
                json!({"type": "session.update", "session": {"type": "transcription",
                    "audio": {"input": {"turn_detection": {"type": "server_vad",
                                                           "threshold": 2}}}}})
                .to_string(),
                "invalid_value",
                Some("session.audio.input.turn_detection.threshold"),
            ),
            (
                json!({"type": "transcription_session.update", "session": {"turn_detection":
                    {"type": "server_vad", "silence_duration_ms": -5}}})
                .to_string(),
                "invalid_value",
                Some("session.turn_detection.silence_duration_ms"),
            ),
            (
                json!({"type": "transcription_session.update",
                       "session": {"input_audio_format": "g711_ulaw"}})
                .to_string(),
                "invalid_value",
                Some("session.input_audio_format"),
            ),
            (
                json!({"type": "session.update", "session": {"type": "transcription",
                    "audio": {"input": {"transcription": {"model": "whisper-9"}}}}})
                .to_string(),
                "model_not_found",
                Some("session.audio.input.transcription.model"),
            ),
        ];
        for (text, code, param) in cases {
            ws.send(Message::Text(text.clone().into())).await.unwrap();
            let error = next_event(&mut ws).await.expect("the session stays open");
            assert_eq!(error["type"], "error", "{text}: {error}");
            assert!(error["event_id"].is_string());
            let e = &error["error"];
            assert_eq!(e["type"], "invalid_request_error", "{text}");
            assert_eq!(e["code"], code, "{text}: {e}");
            assert_eq!(e["param"].as_str(), param, "{text}: {e}");
            assert!(!e["message"].as_str().unwrap().is_empty());
        }
        ws.send(Message::Binary(vec![1, 2].into())).await.unwrap();
        let error = next_event(&mut ws).await.unwrap();
        assert_eq!(error["error"]["code"], "invalid_event");
        // Still serving, and the refused updates changed nothing.
        send_event(
            &mut ws,
            json!({"type": "session.update",
                                   "session": {"type": "transcription"}}),
        )
        .await;
        let updated = next_event(&mut ws).await.unwrap();
        assert_eq!(updated["type"], "session.updated");
        assert!(updated["session"]["audio"]["input"]["turn_detection"].is_null());

        // Over the 16 MiB limit: an error event, then close code 1009. The server refuses the
        // message at its header, so the client reads while it sends the rest.
        let audio = "A".repeat(17 * 1024 * 1024);
        let big = json!({"type": "input_audio_buffer.append", "audio": audio}).to_string();
        let (mut tx, mut rx) = ws.split();
        let sending = tokio::spawn(async move { tx.send(Message::Text(big.into())).await });
        let (error, code) = last_event_and_close(&mut rx).await;
        sending.abort();
        let error = error.expect("an error event");
        assert_eq!(error["error"]["code"], "message_too_large", "{error}");
        assert_eq!(code, Some(CloseCode::Size));
    });
    assert!(!server.logs().contains("panicked"), "{}", server.logs());
    // Only transcription sessions, only models that transcribe.
    let upgrade = |path: &str| {
        let request = agent()
            .get(&server.url(path))
            .set("Connection", "Upgrade")
            .set("Upgrade", "websocket")
            .set("Sec-WebSocket-Version", "13")
            .set("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==");
        send(request, None)
    };
    let (_, param, _) = upgrade("/v1/realtime?intent=conversation").error(400);
    assert_eq!(param.as_deref(), Some("intent"));
    let (_, _, code) = upgrade("/v1/realtime?intent=transcription&model=nope").error(404);
    assert_eq!(code.as_deref(), Some("model_not_found"));
    let (_, param, _) = upgrade("/v1/realtime?intent=transcription&model=tts-1").error(400);
    assert_eq!(param.as_deref(), Some("model"));
}

#[test]
fn api_keys_apply_to_the_websocket() {
    let server = start(&[("VOXTRAL_API_KEYS", "sesame")]);
    runtime().block_on(async {
        for key in [None, Some("wrong")] {
            match connect(&server, key).await {
                Err(WsError::Http(response)) => assert_eq!(response.status(), 401),
                Err(e) => panic!("{key:?}: {e}"),
                Ok(_) => panic!("{key:?}: connected without the key"),
            }
        }
        let mut ws = connect(&server, Some("sesame")).await.unwrap();
        assert_eq!(
            next_event(&mut ws).await.unwrap()["type"],
            "session.created"
        );

        // A browser sends the key as a subprotocol beside `realtime`, which the server
        // chooses (the client checks that it was one it asked for).
        let browser = |key: &str| {
            let protocols = format!("realtime, openai-insecure-api-key.{key}");
            connect_with(&server, Some(("Sec-WebSocket-Protocol", protocols)))
        };
        match browser("wrong").await {
            Err(WsError::Http(response)) => assert_eq!(response.status(), 401),
            Err(e) => panic!("a wrong subprotocol key: {e}"),
            Ok(_) => panic!("a wrong subprotocol key connected"),
        }
        let (mut ws, response) = browser("sesame").await.unwrap();
        assert_eq!(response.headers()["sec-websocket-protocol"], "realtime");
        assert_eq!(
            next_event(&mut ws).await.unwrap()["type"],
            "session.created"
        );
    });
}

/// Over `max_realtime_sessions`, a session gets an error event and a close; a client that
/// goes away (closing, or just dropping the connection) frees its place at once.
#[test]
fn sessions_are_bounded_and_a_disconnect_frees_the_place() {
    let server = start(&[("VOXTRAL_MAX_REALTIME_SESSIONS", "1")]);
    runtime().block_on(async {
        let mut first = connect(&server, None).await.unwrap();
        events_until(&mut first, "session.created").await;
        // An open item holds a decoder slot too.
        let (pcm, _) = pcm16(&chirp(12_000, 24_000, 100.0));
        append(&mut first, &pcm, 2400).await;

        let refused = |mut ws: Socket| async move {
            let error = next_event(&mut ws).await.expect("an error event");
            assert_eq!(error["type"], "error", "{error}");
            assert_eq!(error["error"]["code"], "session_limit_reached", "{error}");
            assert!(error["error"]["message"]
                .as_str()
                .unwrap()
                .contains("at most 1"));
            match tokio::time::timeout(Duration::from_secs(30), ws.next())
                .await
                .unwrap()
            {
                Some(Ok(Message::Close(Some(frame)))) => {
                    assert_eq!(frame.code, CloseCode::Again)
                }
                other => panic!("expected a close frame, got {other:?}"),
            }
        };
        refused(connect(&server, None).await.unwrap()).await;

        // A clean close frees the place.
        first.close(None).await.unwrap();
        while first.next().await.is_some() {}
        let mut second = open_within(&server, Duration::from_secs(2)).await;
        refused(connect(&server, None).await.unwrap()).await;

        // So does a dropped connection.
        append(&mut second, &pcm, 2400).await;
        drop(second);
        let mut third = open_within(&server, Duration::from_secs(2)).await;
        // It transcribes.
        append(&mut third, &pcm, 2400).await;
        send_event(&mut third, json!({"type": "input_audio_buffer.commit"})).await;
        events_until(
            &mut third,
            "conversation.item.input_audio_transcription.completed",
        )
        .await;
        let sessions = metric(
            &server.metrics(),
            "transcription_live_sessions",
            &[("model", MODEL)],
        );
        assert_eq!(sessions, Some(1.0));
    });
}

/// Reads on to the server's close: the last event before it, and its code.
async fn last_event_and_close(
    ws: &mut (impl Stream<Item = Result<Message, WsError>> + Unpin),
) -> (Option<Value>, Option<CloseCode>) {
    let mut last = None;
    loop {
        let message = tokio::time::timeout(Duration::from_secs(120), ws.next())
            .await
            .expect("no close within two minutes");
        match message {
            Some(Ok(Message::Text(text))) => last = Some(serde_json::from_str(&text).unwrap()),
            Some(Ok(Message::Close(frame))) => return (last, frame.map(|f| f.code)),
            Some(Ok(_)) => {}
            None | Some(Err(_)) => return (last, None),
        }
    }
}

/// Connects until a session opens (its `session.created`), within `limit`.
async fn open_within(server: &Server, limit: Duration) -> Socket {
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        let mut ws = connect(server, None).await.unwrap();
        let event = next_event(&mut ws).await.unwrap();
        if event["type"] == "session.created" {
            return ws;
        }
        assert_eq!(event["error"]["code"], "session_limit_reached", "{event}");
        assert!(
            tokio::time::Instant::now() < deadline,
            "the place was not freed within {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The official `openai` Python SDK's realtime client (tests/clients/openai_realtime_client.py)
/// connects, updates the session, streams the audio, commits and reads the offline transcript.
#[test]
fn the_openai_sdks_realtime_client_transcribes() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let sdk = root.join(".deps/pyclient");
    assert!(
        sdk.join("openai").is_dir() && sdk.join("websockets").is_dir(),
        "the openai SDK with its realtime extra is missing from {}: run scripts/setup.sh",
        sdk.display()
    );
    let server = start(&[]);
    let (pcm, sent) = pcm16(&chirp(36_000, 24_000, 100.0));
    let (want, _) = offline_text(&sent);
    let dir = tempfile::tempdir().unwrap();
    let audio = dir.path().join("audio.pcm");
    let bytes: Vec<u8> = pcm.iter().flat_map(|s| s.to_le_bytes()).collect();
    std::fs::write(&audio, bytes).unwrap();
    let run = std::process::Command::new("python3")
        .arg(root.join("tests/clients/openai_realtime_client.py"))
        .env("PYTHONPATH", &sdk)
        .env("SERVER_BASE_URL", &server.base)
        .env("MODEL", MODEL)
        .env("AUDIO", &audio)
        .env("EXPECTED", &want)
        .output()
        .expect("python3 is needed for the SDK client");
    assert!(
        run.status.success(),
        "the SDK session failed:\n{}\n{}\nserver log:\n{}",
        String::from_utf8_lossy(&run.stdout),
        String::from_utf8_lossy(&run.stderr),
        server.logs()
    );
    eprint!("{}", String::from_utf8_lossy(&run.stdout));
}

/// On SIGTERM an open session gets an `error` event and a close (1012), and the server exits:
/// live sessions do not hold its transcription worker past the shutdown.
#[test]
fn a_shutdown_closes_open_sessions() {
    let mut server = start(&[]);
    runtime().block_on(async {
        let mut ws = connect(&server, None).await.unwrap();
        events_until(&mut ws, "session.created").await;
        let (pcm, _) = pcm16(&chirp(12_000, 24_000, 100.0));
        append(&mut ws, &pcm, 2400).await;
        server.signal("-TERM");
        let error = events_until(&mut ws, "error").await.pop().unwrap();
        assert_eq!(error["error"]["code"], "server_shutting_down", "{error}");
        match tokio::time::timeout(Duration::from_secs(30), ws.next())
            .await
            .unwrap()
        {
            Some(Ok(Message::Close(Some(frame)))) => assert_eq!(frame.code, CloseCode::Restart),
            other => panic!("expected a close frame, got {other:?}"),
        }
    });
    assert!(server.wait_exit().success(), "{}", server.logs());
}

/// PCM16 samples as base64 little-endian bytes, in appends of `bytes` each.
fn base64_chunks(pcm: &[i16], bytes: usize) -> Vec<String> {
    use base64::Engine as _;
    let raw: Vec<u8> = pcm.iter().flat_map(|s| s.to_le_bytes()).collect();
    raw.chunks(bytes)
        .map(|chunk| base64::engine::general_purpose::STANDARD.encode(chunk))
        .collect()
}

/// vLLM's realtime dialect on the same path and the same live sessions, replaying the message
/// sequence of vLLM's own example client (github.com/vllm-project/vllm,
/// `examples/speech_to_text/realtime/openai_realtime_client.py`
/// @1874ec08480148d8623e98b251eeae9459423b64): connect to `/v1/realtime` with no query, read
/// `session.created` (its `id`), send `session.update` with the `model`, a commit to start,
/// appends of 4096 bytes of PCM16 at 16 kHz, and a commit with `final: true`; then read
/// `transcription.delta` until `transcription.done` (`text`). The shapes are vLLM's
/// `vllm/entrypoints/openai/realtime/protocol.py` and `connection.py`
/// (@0787aaa088808ed424d73dc584d23657aa58639b: the commit's `final`, `model_not_validated`).
/// The deltas join to the done text, which is the OpenAI dialect's transcript of the same audio
/// (sent there at 24 kHz) and the offline transcription of the 16 kHz samples; a second
/// utterance on the socket transcribes the same.
#[test]
fn vllm_s_example_client_transcribes_as_the_openai_dialect_does() {
    let server = start(&[]);
    let (pcm24k, sent24k) = pcm16(&chirp(36_000, 24_000, 100.0));
    let (pcm16k, sent16k) = pcm16(&resample(&sent24k, 24_000, 16_000).unwrap());
    let (want, _) = offline_text_16k(&sent16k);
    assert!(!want.is_empty(), "the test checkpoint decodes some text");
    runtime().block_on(async {
        let mut ws = connect(&server, None).await.unwrap();
        events_until(&mut ws, "session.created").await;
        append(&mut ws, &pcm24k, 480).await;
        send_event(&mut ws, json!({"type": "input_audio_buffer.commit"})).await;
        let events = events_until(
            &mut ws,
            "conversation.item.input_audio_transcription.completed",
        )
        .await;
        let openai = events.last().unwrap()["transcript"].clone();

        let url = format!("{}/v1/realtime", server.base.replace("http://", "ws://"));
        let mut ws = tokio_tungstenite::connect_async(url).await.unwrap().0;
        let created = next_event(&mut ws).await.unwrap();
        assert_eq!(created["type"], "session.created", "{created}");
        assert!(
            created["id"].is_string() && created["created"].is_u64(),
            "{created}"
        );
        send_event(&mut ws, json!({"type": "session.update", "model": MODEL})).await;
        for utterance in 0..2 {
            send_event(&mut ws, json!({"type": "input_audio_buffer.commit"})).await;
            for audio in base64_chunks(&pcm16k, 4096) {
                send_event(
                    &mut ws,
                    json!({"type": "input_audio_buffer.append", "audio": audio}),
                )
                .await;
            }
            send_event(
                &mut ws,
                json!({"type": "input_audio_buffer.commit", "final": true}),
            )
            .await;
            let mut deltas = String::new();
            loop {
                let event = next_event(&mut ws).await.expect("the socket stays open");
                match event["type"].as_str().unwrap() {
                    "transcription.delta" => deltas.push_str(event["delta"].as_str().unwrap()),
                    "transcription.done" => {
                        assert_eq!(event["text"], want.as_str(), "utterance {utterance}");
                        break;
                    }
                    _ => panic!("vLLM's dialect sends deltas and done, not {event}"),
                }
            }
            assert_eq!(deltas, want, "utterance {utterance}");
        }
        assert_eq!(
            openai,
            want.as_str(),
            "the OpenAI dialect on the same audio"
        );
    });
}

/// In vLLM's dialect errors are vLLM's (`{"type": "error", "error": message, "code"}`): a
/// commit before `session.update` names the model (`model_not_validated`, as vLLM's
/// `connection.py` @0787aaa088808ed424d73dc584d23657aa58639b), a model not served, bad JSON,
/// an event vLLM does not have, empty audio, a binary frame, a final commit with no audio;
/// the session goes on and transcribes.
#[test]
fn vllm_s_dialect_answers_bad_events_with_vllm_s_errors() {
    let server = start(&[]);
    let (pcm, sent) = pcm16(&chirp(16_000, 16_000, 100.0));
    let (want, _) = offline_text_16k(&sent);
    runtime().block_on(async {
        let url = format!("{}/v1/realtime", server.base.replace("http://", "ws://"));
        let mut ws = tokio_tungstenite::connect_async(url).await.unwrap().0;
        next_event(&mut ws).await.unwrap();
        let cases = [
            (
                json!({"type": "input_audio_buffer.commit", "final": true}).to_string(),
                "model_not_validated",
            ),
            (
                json!({"type": "session.update", "model": "nope"}).to_string(),
                "model_not_found",
            ),
            ("{not json".to_string(), "invalid_json"),
            (
                json!({"type": "input_audio_buffer.clear"}).to_string(),
                "unknown_event",
            ),
            (
                json!({"type": "input_audio_buffer.append", "audio": ""}).to_string(),
                "invalid_audio",
            ),
        ];
        for (text, code) in cases {
            ws.send(Message::Text(text.clone().into())).await.unwrap();
            let error = next_event(&mut ws).await.expect("the session stays open");
            assert_eq!(error["type"], "error", "{text}: {error}");
            assert_eq!(error["code"], code, "{text}: {error}");
            assert!(error["error"].is_string(), "{text}: {error}");
        }
        ws.send(Message::Binary(vec![1, 2].into())).await.unwrap();
        let error = next_event(&mut ws).await.unwrap();
        assert_eq!(error["code"], "invalid_event", "{error}");

        send_event(&mut ws, json!({"type": "session.update", "model": MODEL})).await;
        send_event(
            &mut ws,
            json!({"type": "input_audio_buffer.commit", "final": true}),
        )
        .await;
        let error = next_event(&mut ws).await.unwrap();
        assert_eq!(error["code"], "input_audio_buffer_commit_empty", "{error}");
        for audio in base64_chunks(&pcm, 4096) {
            send_event(
                &mut ws,
                json!({"type": "input_audio_buffer.append", "audio": audio}),
            )
            .await;
        }
        send_event(
            &mut ws,
            json!({"type": "input_audio_buffer.commit", "final": true}),
        )
        .await;
        let done = loop {
            let event = next_event(&mut ws).await.unwrap();
            if event["type"] != "transcription.delta" {
                break event;
            }
        };
        assert_eq!(done["type"], "transcription.done", "{done}");
        assert_eq!(done["text"], want.as_str());
    });
    assert!(!server.logs().contains("panicked"), "{}", server.logs());
}

/// A client that sends and never reads (each unknown event it sends gets an error event) fills
/// its bounded send queue; once it has read nothing for the stall limit its session ends with
/// an error event and close code 1008. Meanwhile other sessions transcribe as usual, one after
/// another until the stalled one is closed.
#[test]
fn a_client_that_never_reads_is_closed_and_others_keep_transcribing() {
    let server = start(&[]);
    let (pcm, sent) = pcm16(&chirp(24_000, 24_000, 100.0));
    let (want, _) = offline_text(&sent);
    runtime().block_on(async {
        let mut deaf = connect_small_window(&server, "/v1/realtime?intent=transcription").await;
        assert_eq!(next_message(&mut deaf).await["type"], "session.created");
        let (mut tx, mut rx) = deaf.split();
        let junk = json!({"type": "nope"}).to_string();
        let flood = tokio::spawn(async move {
            while tx.send(Message::Text(junk.clone().into())).await.is_ok() {}
        });
        let stalled = Arc::new(AtomicBool::new(false));
        let others = tokio::spawn({
            let (base, stalled, want) = (server.base.clone(), stalled.clone(), want.clone());
            async move {
                let mut rounds = 0;
                while !stalled.load(Ordering::Relaxed) {
                    let url = format!("{}/v1/realtime", base.replace("http://", "ws://"));
                    let mut ws = tokio_tungstenite::connect_async(url).await.unwrap().0;
                    events_until(&mut ws, "session.created").await;
                    append(&mut ws, &pcm, 2400).await;
                    send_event(&mut ws, json!({"type": "input_audio_buffer.commit"})).await;
                    let events = events_until(
                        &mut ws,
                        "conversation.item.input_audio_transcription.completed",
                    )
                    .await;
                    assert_eq!(events.last().unwrap()["transcript"], want.as_str());
                    rounds += 1;
                }
                rounds
            }
        });
        let deadline = Instant::now() + Duration::from_secs(120);
        while !server.logs().contains("the client is not reading") {
            assert!(Instant::now() < deadline, "{}", server.logs());
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        stalled.store(true, Ordering::Relaxed);
        let (last, code) = last_event_and_close(&mut rx).await;
        let last = last.expect("events before the close");
        assert_eq!(last["error"]["code"], "client_not_reading", "{last}");
        assert_eq!(code, Some(CloseCode::Policy));
        flood.abort();
        let rounds = others.await.unwrap();
        assert!(rounds > 0, "no other session ran meanwhile");
        eprintln!("{rounds} other sessions transcribed while one client did not read");
    });
    assert!(!server.logs().contains("panicked"), "{}", server.logs());
}

/// A client that commits item after item without waiting: the session reads on only while
/// at most two committed items are not transcribed yet, and loses nothing. Two items too long
/// for `max_transcription_seconds` fail while they stream (the rest of their audio dropped),
/// and are committed once the client has read that: failed items are not waited for, so the
/// items after them still complete, each with the transcript of its own audio.
#[test]
fn commits_faster_than_the_worker_wait_and_lose_nothing() {
    let server = start(&[("VOXTRAL_MAX_TRANSCRIPTION_SECONDS", "2")]);
    let (short, sent) = pcm16(&chirp(24_000, 24_000, 100.0));
    let (want, _) = offline_text(&sent);
    let (long, _) = pcm16(&chirp(24_000 * 5, 24_000, 100.0));
    runtime().block_on(async {
        let mut ws = connect(&server, None).await.unwrap();
        events_until(&mut ws, "session.created").await;
        // The items' last events (`.completed` or `.failed`), in order.
        let mut ends: Vec<Value> = Vec::new();
        let failed = |ends: &[Value]| {
            ends.iter()
                .filter(|e| e["type"].as_str().unwrap().ends_with(".failed"))
                .count()
        };
        for (pcm, too_long) in [
            (&short, false),
            (&long, true),
            (&short, false),
            (&long, true),
            (&short, false),
            (&short, false),
        ] {
            append(&mut ws, pcm, 4800).await;
            let failures = failed(&ends) + usize::from(too_long);
            while failed(&ends) < failures {
                let event = next_event(&mut ws).await.expect("the socket stays open");
                assert_ne!(event["type"], "error", "{event}");
                let kind = event["type"].as_str().unwrap();
                if kind.ends_with(".completed") || kind.ends_with(".failed") {
                    ends.push(event);
                }
            }
            send_event(&mut ws, json!({"type": "input_audio_buffer.commit"})).await;
        }
        while ends.len() < 6 {
            let event = next_event(&mut ws).await.expect("the socket stays open");
            assert_ne!(event["type"], "error", "{event}");
            if event["type"] == "conversation.item.input_audio_transcription.completed" {
                ends.push(event);
            }
        }
        let kinds: Vec<&str> = ends
            .iter()
            .map(|e| e["type"].as_str().unwrap().rsplit('.').next().unwrap())
            .collect();
        assert_eq!(
            kinds,
            [
                "completed",
                "failed",
                "completed",
                "failed",
                "completed",
                "completed"
            ]
        );
        for end in ends.iter().filter(|e| e["transcript"].is_string()) {
            assert_eq!(end["transcript"], want.as_str(), "{end}");
        }
    });
}
