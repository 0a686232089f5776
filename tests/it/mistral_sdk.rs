//! Mistral's official Python SDK (`mistralai` 3.7.0, pinned in scripts/setup.sh) pointed at a
//! real `voxtral-tts serve` with its `server_url`: tests/clients/mistral_sdk_client.py drives
//! it, these tests check what it got against the server's other routes. The server serves the
//! tiny Voxtral TTS, a tiny Qwen3-TTS Base beside it (the model a reference clip goes to), and
//! the tiny Voxtral Realtime, all on checkpoints that never stop on their own.
//!
//! The protocols, as github.com/mistralai/client-python has them (`src/mistralai/`):
//! `client/speech.py` (`POST /v1/audio/speech`, JSON, or `text/event-stream` when `stream`),
//! `client/models/speechrequest.py`, `speech_v1_audio_speech_postop.py` (`audio_data`; events
//! `speech.audio.delta` / `speech.audio.done` named by `event:`), `speechstreamdone.py`
//! (`usage`); `client/voices.py` (`/v1/audio/voices`: create, list with `limit`, `offset`,
//! `type`, get, `PATCH` update, delete) with `voicecreaterequest.py`, `voiceresponse.py`,
//! `voicelistresponse.py`; `client/transcriptions.py` (a multipart form, always with `stream`
//! and `diarize`; repeated `timestamp_granularities`), `transcriptionresponse.py`,
//! `transcriptionsegmentchunk.py`, `transcriptionstreamevents.py`; `extra/realtime/speech.py`
//! (`WS /v1/audio/speech/realtime?model=`: `session.update` with `voice`, `ref_audio`,
//! `response_format`, `streaming_mode`, `expressiveness`; `input_text.append`, `.flush`,
//! `.end`; `session.created`/`updated` with `realtimespeechsession.py`'s fields) and
//! `extra/realtime/transcription.py` with `connection.py` (`WS
//! /v1/audio/transcriptions/realtime?model=`: `session.update` with `audio_format`,
//! `input_audio.append` (base64), `.flush`, `.end`; `transcription.text.delta`,
//! `transcription.done`, `error` with a numeric `code`). docs.mistral.ai (Studio > Audio >
//! Text to speech > Speech, Voices; Speech to text > Offline transcription, Realtime) says
//! `pcm` is 32-bit float and `response_format` defaults to mp3.

use crate::common;

use base64::Engine as _;
use common::*;
use serde_json::{json, Value};
use std::path::Path;
use std::process::Command;
use voxtral_tts::models::qwen3_tts::testkit::{cached_endless_test_model, Qwen3Preset};
use voxtral_tts::models::voxtral_realtime::testkit::cached_endless_test_model as endless_stt;

/// As tests/clients/mistral_sdk_client.py sends them.
const TEXT: &str = "Hello there. How are you?";
const FRAMES: usize = 3;
const SEED: u64 = 7;
/// 10 ms at 24 kHz: the crossfade between the pieces of a realtime session.
const FADE: usize = 240;

/// The server and the ids of its three models.
struct Served {
    server: Server,
    speech: String,
    cloning: String,
    stt: String,
    /// The cloning model's samples per frame.
    cloning_frame: usize,
    /// Keeps the voices folder.
    _voices: tempfile::TempDir,
}

fn start() -> Served {
    let qwen3 = cached_endless_test_model(Qwen3Preset::TinyBase, 0).unwrap();
    let stt = endless_stt(0).unwrap();
    let voices = tempfile::tempdir().unwrap();
    let server = Server::spawn(
        &model(),
        &[
            "--model",
            qwen3.to_str().unwrap(),
            "--model",
            stt.to_str().unwrap(),
        ],
        &[
            ("VOXTRAL_VOICES_DIR", voices.path().to_str().unwrap()),
            // f32: a streamed decode and a one-shot one agree within a few LSB.
            ("VOXTRAL_DTYPE", "f32"),
        ],
    );
    server.wait_ready();
    let mut models = Vec::new();
    server.wait_for("the three models", || {
        models = server.get("/v1/models").json()["data"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|m| m["capabilities"].is_object())
            .cloned()
            .collect();
        models.len() == 3
    });
    let id = |family: &str| {
        let model = models.iter().find(|m| m["family"] == family).unwrap();
        model["id"].as_str().unwrap().to_string()
    };
    let cloning = models.iter().find(|m| m["family"] == "qwen3-tts").unwrap();
    let cloning_frame = cloning["capabilities"]["samples_per_frame"]
        .as_u64()
        .unwrap() as usize;
    let served = Served {
        speech: id("voxtral-tts"),
        cloning: id("qwen3-tts"),
        stt: id("voxtral-realtime"),
        cloning_frame,
        server,
        _voices: voices,
    };
    // The voice encoder loads after the model: a clip gets 503 until then.
    let clip = base64::engine::general_purpose::STANDARD.encode(clip());
    served.server.wait_for("the voice encoder", || {
        let body = json!({"input": "Hi.", "ref_audio": clip, "max_frames": 1});
        let reply = served.server.speech(body);
        assert_ne!(
            reply.status,
            400,
            "{}",
            String::from_utf8_lossy(&reply.body)
        );
        reply.status != 503
    });
    served
}

/// A mono 16-bit WAV of `len` samples at `rate`: a chirp of phase `sweep(t)` turns.
fn chirp_wav(rate: u32, len: u32, sweep: impl Fn(f64) -> f64) -> Vec<u8> {
    let samples: Vec<i16> = (0..len)
        .map(|i| {
            let t = f64::from(i) / f64::from(rate);
            (0.5 * (std::f64::consts::TAU * sweep(t)).sin() * 32767.0) as i16
        })
        .collect();
    pcm16_wav(rate, &samples)
}

/// A clip to clone from: 1.5 s at 16 kHz.
fn clip() -> Vec<u8> {
    chirp_wav(16_000, 24_000, |t| 150.0 * t + 400.0 * t * t)
}

/// One second to transcribe, at `rate`.
fn speech_audio(rate: u32) -> Vec<u8> {
    chirp_wav(rate, rate, |t| 100.0 * t + 3000.0 * t * t * t)
}

/// Runs one case of the driver; returns its folder and result.
fn sdk(served: &Served, case: &str) -> (tempfile::TempDir, Value) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let sdk = root.join(".deps/pymistral");
    assert!(
        sdk.join("mistralai").is_dir() && sdk.join("websockets").is_dir(),
        "Mistral's SDK with its realtime extra is missing from {}: run scripts/setup.sh",
        sdk.display()
    );
    let out = tempfile::tempdir().unwrap();
    let files = [
        ("CLIP", clip()),
        ("AUDIO", speech_audio(16_000)),
        ("AUDIO_24K", speech_audio(24_000)),
    ];
    for (name, bytes) in &files {
        std::fs::write(out.path().join(format!("{name}.wav")), bytes).unwrap();
    }
    let mut run = Command::new("python3");
    run.arg(root.join("tests/clients/mistral_sdk_client.py"))
        .args([case, out.path().to_str().unwrap()])
        .env("PYTHONPATH", &sdk)
        .env("SERVER_BASE_URL", &served.server.base)
        .env("SPEECH_MODEL", &served.speech)
        .env("STT_MODEL", &served.stt);
    for (name, _) in &files {
        run.env(name, out.path().join(format!("{name}.wav")));
    }
    let run = run.output().expect("python3 is needed for the SDK client");
    assert!(
        run.status.success(),
        "the {case} case failed:\n{}\n{}\nserver log:\n{}",
        String::from_utf8_lossy(&run.stdout),
        String::from_utf8_lossy(&run.stderr),
        served.server.logs()
    );
    let result = std::fs::read(out.path().join("result.json")).unwrap();
    let result = serde_json::from_slice(&result).unwrap();
    (out, result)
}

fn file(dir: &tempfile::TempDir, name: &str) -> Vec<u8> {
    std::fs::read(dir.path().join(name)).unwrap()
}

/// 32-bit float PCM (Mistral's `pcm`) as 16-bit samples, rounded as the server's s16 is.
fn f32_as_s16(bytes: &[u8]) -> Vec<i16> {
    assert_eq!(bytes.len() % 4, 0, "whole f32 samples");
    bytes
        .chunks_exact(4)
        .map(|b| {
            let x = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
            assert!((-1.0..=1.0).contains(&x), "{x}");
            (x * 32767.0).round() as i16
        })
        .collect()
}

/// The samples of a mono 16-bit WAV.
fn wav_samples(bytes: &[u8]) -> Vec<i16> {
    let reader = hound::WavReader::new(bytes).unwrap();
    assert_eq!(reader.spec().channels, 1);
    reader.into_samples::<i16>().map(Result::unwrap).collect()
}

/// An error the SDK raised: its status, and the field the body names.
fn refused(error: &Value) -> (u64, &str) {
    (
        error["status"].as_u64().unwrap(),
        error["body"]["error"]["param"].as_str().unwrap_or(""),
    )
}

/// `client.audio.speech.complete`: a preset voice in each of Mistral's formats decodes to the
/// frames asked for, its `pcm` is 32-bit float and the same audio as OpenAI's s16 `pcm` of
/// the same seed, `stream=True` gives the same audio as named events with Mistral's usage,
/// and `phoneme_hints`, `conversation_history`, an `expressiveness` the model does not have
/// and an unknown voice are each a 400 naming the field.
#[test]
fn the_sdk_speaks_in_every_format_and_streams() {
    let served = start();
    let (dir, result) = sdk(&served, "speech");
    let samples = FRAMES * FRAME;
    for format in ["mp3", "wav", "flac", "opus"] {
        let (rate, channels, decoded) = decode(format, &file(&dir, &format!("speech.{format}")));
        assert_eq!(channels, 1, "{format}");
        let at_24k = decoded as f64 * 24_000.0 / f64::from(rate);
        assert!(
            (at_24k - samples as f64).abs() <= 1.0,
            "{format}: {decoded} samples at {rate} Hz"
        );
    }
    let openai = pcm_samples(&served.server.speech(json!({"model": served.speech,
        "input": TEXT, "voice": "casual_female", "response_format": "pcm", "seed": SEED,
        "max_frames": FRAMES})));
    let pcm = f32_as_s16(&file(&dir, "speech.pcm"));
    assert_eq!(pcm.len(), samples);
    assert!(
        max_lsb_diff(&pcm, &openai) <= 1,
        "the same seed, the same audio"
    );
    assert_eq!(wav_samples(&file(&dir, "speech.wav")), openai);

    let streamed = f32_as_s16(&file(&dir, "stream.pcm"));
    assert!(max_lsb_diff(&streamed, &pcm) <= 4, "streamed vs whole");
    let events = result["events"].as_array().unwrap();
    let (last, deltas) = events.split_last().unwrap();
    assert_eq!(last, "speech.audio.done");
    assert!(!deltas.is_empty() && deltas.iter().all(|e| e == "speech.audio.delta"));
    let usage = &result["usage"];
    assert_eq!(usage["completion_tokens"], FRAMES, "{usage}");
    let prompt = usage["prompt_tokens"].as_u64().unwrap();
    assert!(prompt > 0);
    assert_eq!(usage["total_tokens"], prompt + FRAMES as u64);

    for field in [
        "phoneme_hints",
        "conversation_history",
        "expressiveness",
        "voice_id",
    ] {
        assert_eq!(refused(&result["refused"][field]), (400, field), "{result}");
    }
}

/// `ref_audio` on a request naming the Voxtral model is cloned by the Qwen3-TTS Base model
/// beside it; `client.audio.voices` makes a voice of the same clip (speaking as the clip
/// does), lists, reads, changes and deletes it in Mistral's shape, and the presets page.
#[test]
fn the_sdk_clones_from_a_clip_and_keeps_voices() {
    let served = start();
    let (dir, result) = sdk(&served, "clone");
    let from_clip = wav_samples(&file(&dir, "ref.wav"));
    assert_eq!(from_clip.len(), FRAMES * served.cloning_frame);
    assert!(from_clip.iter().any(|&s| s != 0), "audio, not silence");
    assert!(
        wav_samples(&file(&dir, "voice.wav")) == from_clip,
        "a stored voice of the clip speaks as the clip does"
    );
    let streamed = f32_as_s16(&file(&dir, "ref_stream.pcm"));
    assert!(max_lsb_diff(&streamed, &from_clip) <= 4);

    let created = &result["created"];
    let id = created["id"].as_str().unwrap();
    assert!(id.starts_with("voice_"), "{created}");
    assert_eq!(created["type"], "custom");
    assert_eq!(created["name"], "alice");
    assert_eq!(created["languages"], json!(["en"]));
    assert_eq!(created["gender"], "female");
    assert_eq!(created["tags"], json!(["calm"]));
    assert_eq!(created["user_id"], Value::Null);
    assert_eq!(result["got"], *created);
    let listed = &result["listed"];
    assert_eq!(
        (&listed["total"], &listed["items"][0]["id"]),
        (&json!(1), &json!(id))
    );
    let presets = &result["presets"];
    let names: Vec<&str> = presets["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["id"].as_str().unwrap())
        .collect();
    assert_eq!(
        names,
        ["de_male", "es_female", "es_male", "fr_female", "fr_male"],
        "the second page of five presets"
    );
    assert_eq!(
        (
            &presets["total"],
            &presets["page"],
            &presets["page_size"],
            &presets["total_pages"]
        ),
        (&json!(20), &json!(2), &json!(5), &json!(4))
    );
    let updated = &result["updated"];
    assert_eq!(updated["name"], "alicia");
    assert_eq!(updated["tags"], json!(["warm", "calm"]));
    assert_eq!(updated["description"], "A test voice");
    assert_eq!(updated["created_at"], created["created_at"]);
    assert_eq!(result["deleted"], *updated, "the voice as it was");
    let preset = &result["preset"];
    assert_eq!(
        (&preset["type"], &preset["gender"]),
        (&json!("preset"), &json!("female"))
    );
    assert_eq!(preset["languages"], json!(["en"]));

    let refusals = &result["refused"];
    assert_eq!(refused(&refusals["update_preset"]), (400, "voice_id"));
    assert_eq!(refused(&refusals["both"]), (400, "ref_audio"));
    assert_eq!(refused(&refusals["not_audio"]), (400, "ref_audio"));
    assert_eq!(refused(&refusals["gone"]), (404, "voice_id"));
    let voices = served.server.get("/v1/audio/voices?type=custom").json();
    assert_eq!(voices["total"], 0, "deleted: {voices}");
}

/// A transcription the OpenAI way (`verbose_json`), to compare Mistral's shape with.
fn verbose(served: &Served, wav: &[u8]) -> Value {
    const BOUNDARY: &str = "mistral-sdk-test";
    let mut body = Vec::new();
    for (name, value) in [
        ("model", served.stt.as_str()),
        ("response_format", "verbose_json"),
    ] {
        body.extend(
            format!("--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"{name}\"\r\n\r\n{value}\r\n")
                .bytes(),
        );
    }
    body.extend(
        format!(
            "--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"a.wav\"\r\n\r\n"
        )
        .bytes(),
    );
    body.extend(wav);
    body.extend(format!("\r\n--{BOUNDARY}--\r\n").bytes());
    let request = agent()
        .post(&served.server.url("/v1/audio/transcriptions"))
        .set(
            "Content-Type",
            &format!("multipart/form-data; boundary={BOUNDARY}"),
        );
    let reply = send(request, Some(&body));
    reply.assert_ok();
    reply.json()
}

/// Mistral's `segments` as (text, start, end), and OpenAI's words or segments likewise.
fn timed(items: &Value, text: &str) -> Vec<(String, f64, f64)> {
    items
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s[text].as_str().unwrap().to_string(),
                s["start"].as_f64().unwrap(),
                s["end"].as_f64().unwrap(),
            )
        })
        .collect()
}

/// `client.audio.transcriptions`: the text is OpenAI's route's for the same file, segment
/// and word timestamps are its segments and words, the stream's deltas join to the text and
/// end with `transcription.done`, and `diarize=True`, `context_bias` and `file_url` are a 400
/// naming them.
#[test]
fn the_sdk_transcribes_with_timestamps_and_streams() {
    let served = start();
    let (_dir, result) = sdk(&served, "transcribe");
    let openai = verbose(&served, &speech_audio(16_000));
    let text = openai["text"].as_str().unwrap();
    assert!(!text.trim().is_empty());
    let plain = &result["plain"];
    assert_eq!(
        (
            &plain["model"],
            &plain["text"],
            &plain["language"],
            &plain["segments"]
        ),
        (&json!(served.stt), &json!(text), &Value::Null, &json!([]))
    );
    assert_eq!(plain["usage"]["prompt_audio_seconds"], 1);
    let segments = &result["segments"];
    assert_eq!(segments["text"], text);
    assert_eq!(
        timed(&segments["segments"], "text"),
        timed(&openai["segments"], "text")
    );
    let words = &result["words"];
    let word_times = timed(&words["segments"], "text");
    assert_eq!(word_times, timed(&openai["words"], "word"));
    assert!(word_times.len() > 1, "{words}");
    assert!(word_times
        .windows(2)
        .all(|w| w[0].1 <= w[1].1 && w[0].1 <= w[0].2 && w[1].2 <= 1.0));
    assert!(segments["segments"][0]["type"] == "transcription_segment");

    let events = result["events"].as_array().unwrap();
    let names: Vec<&str> = events
        .iter()
        .map(|e| e["event"].as_str().unwrap())
        .collect();
    let deltas: String = events
        .iter()
        .filter(|e| e["event"] == "transcription.text.delta")
        .map(|e| e["data"]["text"].as_str().unwrap())
        .collect();
    assert_eq!(deltas, text);
    let segment_events = names
        .iter()
        .filter(|n| **n == "transcription.segment")
        .count();
    assert_eq!(
        segment_events,
        segments["segments"].as_array().unwrap().len()
    );
    assert_eq!(names.last(), Some(&"transcription.done"));
    let done = &events.last().unwrap()["data"];
    assert_eq!(
        (&done["text"], &done["model"]),
        (&json!(text), &json!(served.stt))
    );

    for field in ["diarize", "context_bias", "file_url"] {
        assert_eq!(refused(&result["refused"][field]), (400, field), "{result}");
    }
}

/// The events of one `speak_stream` of a type.
fn of_type<'a>(events: &'a Value, kind: &str) -> Vec<&'a Value> {
    events
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["type"] == kind)
        .collect()
}

/// `client.audio.realtime_speech.speak_stream`: text streamed in pieces is spoken a sentence
/// at a time into one 32-bit float stream, the first sentence as `/v1/audio/speech` says it
/// with the same seed; a `ref_audio` session goes to the cloning model; `long_form` is
/// refused by name.
#[test]
fn the_sdk_speaks_text_while_it_is_written() {
    let served = start();
    let (dir, result) = sdk(&served, "realtime_speech");
    let preset = &result["preset"]["events"];
    let created = &of_type(preset, "session.created")[0]["session"];
    assert_eq!(created["model"], served.speech);
    assert_eq!(created["response_format"], "pcm");
    let updated = &of_type(preset, "session.updated")[0]["session"];
    assert_eq!(
        (
            &updated["voice"],
            &updated["is_ref_audio"],
            &updated["expressiveness"]
        ),
        (&json!("casual_female"), &json!(false), &json!(1.2))
    );
    let pieces = of_type(preset, "speech.audio.segment");
    let texts: Vec<&str> = pieces
        .iter()
        .map(|p| p["unknown"]["text"].as_str().unwrap())
        .collect();
    assert_eq!(texts, ["Hello there.", "How are you?"]);
    let end = |p: &Value| p["unknown"]["end_sample"].as_u64().unwrap() as usize;
    let stream = f32_as_s16(&file(&dir, "preset.pcm"));
    assert_eq!(stream.len(), end(pieces[1]), "one continuous stream");
    let done = &of_type(preset, "speech.audio.done")[0];
    assert_eq!(done["usage"]["completion_tokens"], 2 * FRAMES);
    let alone = pcm_samples(&served.server.speech(json!({"model": served.speech,
        "input": "Hello there.", "voice": "casual_female", "response_format": "pcm",
        "seed": SEED, "max_frames": FRAMES, "stream_format": "audio"})));
    let kept = end(pieces[0]) - FADE;
    assert!(max_lsb_diff(&alone[..kept], &stream[..kept]) <= 1);

    let cloned = &result["ref"]["events"];
    let updated = &of_type(cloned, "session.updated")[0]["session"];
    assert_eq!(
        (
            &updated["model"],
            &updated["is_ref_audio"],
            &updated["voice"]
        ),
        (&json!(served.cloning), &json!(true), &Value::Null)
    );
    let pieces = of_type(cloned, "speech.audio.segment");
    let audio = file(&dir, "ref.pcm");
    assert_eq!(audio.len(), 4 * end(pieces[1]));
    assert!(audio.len() >= 4 * 2 * FRAMES * served.cloning_frame - 4 * FADE);

    let refused = &of_type(&result["long_form"]["events"], "error")[0]["error"];
    assert_eq!(refused["code"], 400);
    assert!(
        refused["message"]
            .as_str()
            .unwrap()
            .contains("streaming_mode"),
        "{refused}"
    );
    assert!(file(&dir, "long_form.pcm").is_empty());
}

/// `client.audio.realtime.transcribe_stream`: 16 kHz `pcm_s16le` and 24 kHz `pcm_f32le`
/// (resampled by the server) give the text `/v1/audio/transcriptions` gives for the same
/// audio, deltas first; `diarize=True` is an `error` naming it.
#[test]
fn the_sdk_transcribes_while_audio_is_streamed() {
    let served = start();
    let (_dir, result) = sdk(&served, "realtime_transcription");
    for (run, rate) in [("s16", 16_000), ("f32_24k", 24_000)] {
        let events = &result[run];
        let created = &of_type(events, "session.created")[0]["session"];
        assert_eq!(created["model"], served.stt);
        let text = verbose(&served, &speech_audio(rate))["text"].clone();
        let deltas: String = of_type(events, "transcription.text.delta")
            .iter()
            .map(|e| e["text"].as_str().unwrap())
            .collect();
        let done = of_type(events, "transcription.done");
        assert_eq!(done.len(), 1, "{events}");
        assert_eq!(done[0]["text"], text, "{run}");
        assert_eq!(deltas, text.as_str().unwrap(), "{run}");
        assert_eq!(done[0]["usage"]["prompt_audio_seconds"], 1);
        assert_eq!(events.as_array().unwrap().last(), Some(done[0]));
    }
    let refused = &of_type(&result["diarize"], "error")[0]["error"];
    assert_eq!(refused["code"], 400);
    assert!(refused["message"].as_str().unwrap().contains("diarize"));
}
