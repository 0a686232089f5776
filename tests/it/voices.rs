//! Custom voices as clients see them: a real `voxtral-tts serve` process, `POST`, `GET` and
//! `DELETE /v1/audio/voices` over HTTP with OpenAI's multipart form, and the voices folder
//! they are kept in.

use crate::common;

use common::*;
use serde_json::Value;
use std::path::Path;
use voxtral_tts::models::qwen3_tts::testkit::cached_test_model as cached_qwen3_test_model;
use voxtral_tts::models::qwen3_tts::testkit::Qwen3Preset;

fn delete(server: &Server, id: &str) -> Reply {
    send(
        agent().delete(&server.url(&format!("/v1/audio/voices/{id}"))),
        None,
    )
}

/// A mono 16-bit WAV at `rate`: `seconds` of a chirp, a stand-in for speech.
fn wav(rate: u32, seconds: f64) -> Vec<u8> {
    let len = (seconds * f64::from(rate)) as u32;
    let samples: Vec<i16> = (0..len)
        .map(|i| {
            let t = f64::from(i) / f64::from(rate);
            let x = 0.4 * (std::f64::consts::TAU * (150.0 * t + 400.0 * t * t)).sin();
            (x * 32767.0) as i16
        })
        .collect();
    pcm16_wav(rate, &samples)
}

/// The names in the voices folder, sorted (none when it does not exist).
fn folder(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = match std::fs::read_dir(dir) {
        Ok(entries) => entries
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect(),
        Err(_) => Vec::new(),
    };
    names.sort();
    names
}

#[test]
fn a_model_that_cannot_clone_refuses_uploads_and_lists_its_presets_as_before() {
    let voices = tempfile::tempdir().unwrap();
    let dir = voices.path().join("voices");
    let server = Server::spawn(
        &model(),
        &[],
        &[
            ("VOXTRAL_VOICES_DIR", dir.to_str().unwrap()),
            ("VOXTRAL_API_KEYS", "k-1"),
        ],
    );
    server.wait_ready();
    let clip = wav(16_000, 1.5);
    let keyed = |fields: &[(&str, &str)], clips: &[&[u8]]| {
        let request = agent()
            .post(&server.url("/v1/audio/voices"))
            .set(
                "Content-Type",
                &format!("multipart/form-data; boundary={VOICE_FORM_BOUNDARY}"),
            )
            .set("Authorization", "Bearer k-1");
        send(request, Some(&voice_form(fields, clips)))
    };
    // Uploads and deletions need the key; the list stays open (public_discovery).
    // (A small body: the 401 comes before the body is read.)
    upload_voice(&server, &[("name", "a")], &[b"RIFF"]).error(401);
    delete(&server, "voice_00").error(401);
    let (_, param, _) = keyed(&[("name", "a")], &[&clip]).error(400);
    assert_eq!(param.as_deref(), Some("model"));
    let (_, param, _) = keyed(&[], &[&clip]).error(400);
    assert_eq!(param.as_deref(), Some("name"));
    let (_, param, code) = keyed(&[("name", "a"), ("model", "nope")], &[&clip]).error(404);
    assert_eq!(
        (param.as_deref(), code.as_deref()),
        (Some("model"), Some("model_not_found"))
    );

    let voices = server.get("/v1/audio/voices").json();
    let data = voices["data"].as_array().unwrap();
    assert_eq!(data.len(), 20);
    assert_eq!(voices["voices"], voices["data"]);
    let keys: Vec<&String> = data[0].as_object().unwrap().keys().collect();
    assert_eq!(
        keys,
        [
            "aliases",
            "gender",
            "id",
            "language",
            "language_name",
            "name"
        ],
        "presets keep their fields"
    );

    let gone = send(
        agent()
            .delete(&server.url("/v1/audio/voices/voice_0123"))
            .set("Authorization", "Bearer k-1"),
        None,
    );
    let (kind, param, code) = gone.error(404);
    assert_eq!(
        (kind.as_str(), param.as_deref(), code.as_deref()),
        (
            "invalid_request_error",
            Some("voice_id"),
            Some("voice_not_found")
        )
    );
    assert!(!dir.exists(), "no voice, no folder");
}

/// The fields every custom voice object has.
fn check_voice_object(voice: &Value, name: &str, in_context: bool) -> String {
    let id = voice["id"].as_str().unwrap().to_string();
    assert!(id.starts_with("voice_") && id.len() == 38, "{voice}");
    assert_eq!(voice["object"], "audio.voice");
    assert_eq!(voice["name"], name);
    assert!(voice["created_at"].as_u64().unwrap() > 1_700_000_000);
    assert_eq!(voice["in_context"], in_context);
    assert_eq!(voice["transcript"].is_string(), in_context);
    id
}

/// Waits for the model's voice encoder: uploads get 503 while it loads.
fn upload_when_ready(server: &Server, fields: &[(&str, &str)], clips: &[&[u8]]) -> Reply {
    let mut reply = upload_voice(server, fields, clips);
    server.wait_for("the voice encoder", || {
        if reply.status != 503 {
            return true;
        }
        reply = upload_voice(server, fields, clips);
        false
    });
    reply
}

#[test]
fn custom_voices_are_made_listed_deduplicated_deleted_and_kept_across_restarts() {
    let model = cached_qwen3_test_model(Qwen3Preset::TinyBase, 0).unwrap();
    let voices = tempfile::tempdir().unwrap();
    let dir = voices.path().join("voices");
    let env = [
        ("VOXTRAL_VOICES_DIR", dir.to_str().unwrap()),
        ("VOXTRAL_MAX_VOICE_CLIP_SECONDS", "3"),
        ("VOXTRAL_DTYPE", "f32"),
    ];
    let server = Server::spawn(&model, &[], &env);
    server.wait_ready();
    // At 16 kHz: resampled to the encoder's 24 kHz.
    let clip = wav(16_000, 1.5);
    let alice = upload_when_ready(
        &server,
        &[("name", "alice"), ("transcript", "Hello there.")],
        &[&clip],
    );
    alice.assert_ok();
    let alice = alice.json();
    let alice_id = check_voice_object(&alice, "alice", true);
    assert_eq!(alice["transcript"], "Hello there.");
    assert_eq!(folder(&dir), [alice_id.as_str()]);
    let stored = dir.join(&alice_id);
    assert!(stored.join("voice.json").exists() && stored.join("voice.safetensors").exists());

    // The same upload again: the stored voice, nothing new computed or written.
    let again = upload_voice(
        &server,
        &[("name", "alice"), ("transcript", "Hello there.")],
        &[&clip],
    );
    assert_eq!(again.json(), alice);
    // Another name (and no transcript): another voice.
    let bob = upload_voice(&server, &[("name", "bob")], &[&clip]).json();
    let bob_id = check_voice_object(&bob, "bob", false);
    assert_ne!(bob_id, alice_id);

    let listed = server.get("/v1/audio/voices").json();
    let mut custom: Vec<&Value> = listed["data"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|v| v["object"] == "audio.voice")
        .collect();
    // Oldest first; both were made within the same second (the unit of created_at).
    custom.sort_by_key(|v| v["name"].as_str().unwrap().to_string());
    assert_eq!(custom, [&alice, &bob]);
    assert_eq!(listed["voices"], listed["data"]);

    // Speech with each voice (in context and x-vector only), greedy: the same request gives
    // the same audio, and the two voices different audio.
    let speak = |id: &str| {
        let reply = server.speech(
            serde_json::json!({"model": "tts-1", "input": "Hello again.",
            "voice": {"id": id}, "response_format": "pcm", "temperature": 0, "max_frames": 8,
            "language": "en"}),
        );
        reply.assert_ok();
        common::pcm_samples(&reply)
    };
    let (with_alice, with_bob) = (speak(&alice_id), speak(&bob_id));
    assert!(!with_alice.is_empty() && with_alice.len() % 1920 == 0);
    assert_eq!(speak(&alice_id), with_alice);
    assert_ne!(with_alice, with_bob);
    let unknown = server.speech(serde_json::json!({"model": "tts-1", "input": "Hi.",
        "voice": {"id": "voice_0123456789abcdef0123456789abcdef"}}));
    let (_, param, code) = unknown.error(400);
    assert_eq!(
        (param.as_deref(), code.as_deref()),
        (Some("voice"), Some("voice_not_found"))
    );

    // Bad uploads: a 400 naming the field, and nothing left in the folder.
    let before = folder(&dir);
    let undecodable = b"not audio at all".repeat(100);
    for (fields, clips, field) in [
        (vec![("name", "x")], vec![&b""[..]], "audio_sample"),
        (vec![("name", "x")], vec![&undecodable[..]], "audio_sample"),
        (
            vec![("name", "x")],
            vec![&wav(24_000, 4.0)[..]],
            "audio_sample",
        ),
        (
            vec![("name", "x")],
            vec![&wav(24_000, 0.25)[..]],
            "audio_sample",
        ),
        (
            vec![("name", "x")],
            vec![&clip[..], &clip[..]],
            "audio_sample",
        ),
        (vec![("name", "x")], vec![], "audio_sample"),
        (vec![("transcript", "Hi.")], vec![&clip[..]], "name"),
    ] {
        let (_, param, _) = upload_voice(&server, &fields, &clips).error(400);
        assert_eq!(param.as_deref(), Some(field), "{fields:?}");
    }
    assert_eq!(folder(&dir), before);

    let deleted = delete(&server, &bob_id);
    deleted.assert_ok();
    // OpenAI's fields, and Mistral's shape of the voice deleted.
    let deleted = deleted.json();
    assert_eq!(
        (&deleted["id"], &deleted["object"], &deleted["deleted"]),
        (
            &bob["id"],
            &serde_json::json!("audio.voice.deleted"),
            &serde_json::json!(true)
        )
    );
    assert_eq!(
        (&deleted["name"], &deleted["type"]),
        (&bob["name"], &serde_json::json!("custom"))
    );
    delete(&server, &bob_id).error(404);
    assert_eq!(folder(&dir), [alice_id.as_str()]);
    drop(server);

    let server = Server::spawn(&model, &[], &env);
    server.wait_ready();
    let listed = server.get("/v1/audio/voices").json();
    let custom: Vec<&Value> = listed["data"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|v| v["object"] == "audio.voice")
        .collect();
    assert_eq!(custom, [&alice], "the voice survives a restart");
}

/// Cloning as a user gets it: a Qwen3-TTS Base server at the default settings (bf16) takes an
/// upload and speaks with it, and `synth --reference-audio` (bf16 by default) clones from a
/// file, in context with its transcript and from the x-vector alone.
#[test]
fn qwen3_clones_at_the_default_settings() {
    let model = cached_qwen3_test_model(Qwen3Preset::TinyBase, 0).unwrap();
    let voices = tempfile::tempdir().unwrap();
    let dir = voices.path().join("voices");
    let server = Server::spawn(
        &model,
        &[],
        &[("VOXTRAL_VOICES_DIR", dir.to_str().unwrap())],
    );
    server.wait_ready();
    let clip = wav(24_000, 2.0);
    let reply = upload_when_ready(
        &server,
        &[("name", "alice"), ("transcript", "Hello there.")],
        &[&clip],
    );
    reply.assert_ok();
    let id = reply.json()["id"].as_str().unwrap().to_string();
    let speech = server.speech(
        serde_json::json!({"model": "tts-1", "input": "Hello again.",
        "voice": {"id": id}, "response_format": "pcm", "max_frames": 6, "language": "en"}),
    );
    speech.assert_ok();
    assert!(!pcm_samples(&speech).is_empty());
    drop(server);

    let tmp = tempfile::tempdir().unwrap();
    let (input, output) = (tmp.path().join("clip.wav"), tmp.path().join("out.wav"));
    std::fs::write(&input, &clip).unwrap();
    for transcript in [Some("Hello there."), None] {
        let mut synth = std::process::Command::new(env!("CARGO_BIN_EXE_voxtral-tts"));
        synth
            .args(["synth", "--device", "cpu", "--model"])
            .arg(&model)
            .args([
                "--text",
                "Hello again.",
                "--max-frames",
                "6",
                "--reference-audio",
            ])
            .arg(&input)
            .arg("--output")
            .arg(&output);
        if let Some(text) = transcript {
            synth.args(["--reference-text", text]);
        }
        let run = synth.output().unwrap();
        assert!(
            run.status.success(),
            "{}",
            String::from_utf8_lossy(&run.stderr)
        );
        assert!(hound::WavReader::open(&output).unwrap().len() > 0);
    }
}
