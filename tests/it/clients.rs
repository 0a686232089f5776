//! The clients people already point at an OpenAI-compatible speech server, each replayed with
//! the requests its source sends (paths, headers, body; the file is cited per test) against a
//! real `voxtral-tts serve` on the tiny random checkpoint. Those that call through the openai
//! Python SDK run `tests/clients/openai_sdk_clients.py` (scripts/setup.sh installs the SDK).
//!
//! A replay adds only the extension fields `seed` and `max_frames` where the client has no
//! way to send them, so that the tiny model's audio stays short and can be compared with a
//! plain request of the same seed.

use crate::common;

use common::*;
use serde_json::{json, Value};
use std::path::Path;
use std::process::Command;

/// A request with exactly these headers (plus the transport's Host and Content-Length).
fn request(
    server: &Server,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Option<&Value>,
) -> Reply {
    let mut request = agent().request(method, &server.url(path));
    for (name, value) in headers {
        request = request.set(name, value);
    }
    send(request, body.map(|b| b.to_string().into_bytes()).as_deref())
}

/// The audio of a plain streamed request of the same text, voice, seed and frames: what a
/// client reading the body as it arrives must get.
fn streamed_reference(server: &Server, mut body: Value, format: &str) -> Vec<u8> {
    body["response_format"] = json!(format);
    body["stream_format"] = json!("audio");
    let reply = server.speech(body);
    reply.assert_ok();
    reply.body
}

/// Runs one replay of tests/clients/openai_sdk_clients.py; returns the folder of its files.
fn sdk_client(server: &Server, client: &str) -> tempfile::TempDir {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let sdk = root.join(".deps/pyclient");
    assert!(
        sdk.join("openai").is_dir(),
        "the openai SDK is missing from {}: run scripts/setup.sh",
        sdk.display()
    );
    let out = tempfile::tempdir().unwrap();
    let run = Command::new("python3")
        .arg(root.join("tests/clients/openai_sdk_clients.py"))
        .args([client, out.path().to_str().unwrap()])
        .env("PYTHONPATH", &sdk)
        .env("SERVER_BASE_URL", &server.base)
        .output()
        .expect("python3 is needed for the client replays");
    assert!(
        run.status.success(),
        "{client} replay failed:\n{}\n{}\nserver log:\n{}",
        String::from_utf8_lossy(&run.stdout),
        String::from_utf8_lossy(&run.stderr),
        server.logs()
    );
    out
}

fn saved(dir: &tempfile::TempDir, name: &str) -> (Vec<u8>, Value) {
    let data = std::fs::read(dir.path().join(name)).unwrap();
    let meta = std::fs::read(dir.path().join(format!("{name}.json"))).unwrap();
    (data, serde_json::from_slice(&meta).unwrap())
}

/// The body the SDK replays send (see EXTRA and TEXT in openai_sdk_clients.py).
fn sdk_body(voice: &str) -> Value {
    json!({"model": "tts-1", "input": "Hello there. This is a voice agent speaking.",
        "voice": voice, "seed": 17, "max_frames": 12})
}

/// Open WebUI, backend/open_webui/routers/audio.py (open-webui/open-webui@6adde20):
/// `get_available_voices` and `get_available_models` call `requests.get(f"{base}/audio/voices")`
/// and `.../audio/models` with no headers at all (so no key), and read `voices[].id/.name` and
/// `models[].id`; `speech` posts the front-end's `{input, voice}` plus `model` and the admin's
/// "additional parameters" (TTS_OPENAI_PARAMS, here the extension fields) with aiohttp and
/// `Authorization: Bearer {TTS_OPENAI_API_KEY}`, and caches the answer as an .mp3.
#[test]
fn open_webui_lists_voices_without_its_key_and_gets_mp3() {
    let server = Server::start(&[("VOXTRAL_API_KEYS", "webui-key")]);
    let python_requests = [
        ("User-Agent", "python-requests/2.32.3"),
        ("Accept-Encoding", "gzip, deflate"),
        ("Accept", "*/*"),
        ("Connection", "keep-alive"),
    ];
    let voices = request(&server, "GET", "/v1/audio/voices", &python_requests, None);
    assert_eq!(voices.status, 200, "public_discovery is on by default");
    let voices = voices.json();
    let listed: Vec<(&str, &str)> = voices["voices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| (v["id"].as_str().unwrap(), v["name"].as_str().unwrap()))
        .collect();
    assert_eq!(listed.len(), 20);
    assert!(listed.contains(&("fr_female", "fr_female")), "{listed:?}");
    assert_eq!(
        voices["data"], voices["voices"],
        "the OpenAI-style list is unchanged"
    );
    let models = request(&server, "GET", "/v1/audio/models", &python_requests, None).json();
    let ids: Vec<&str> = models["models"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert_eq!(
        ids,
        [
            "mistralai/Voxtral-4B-TTS-2603",
            "tts-1",
            "tts-1-hd",
            "gpt-4o-mini-tts"
        ]
    );

    let aiohttp = [
        ("Content-Type", "application/json"),
        ("Authorization", "Bearer webui-key"),
        ("User-Agent", "Python/3.11 aiohttp/3.12.15"),
        ("Accept", "*/*"),
        ("Accept-Encoding", "gzip, deflate"),
    ];
    let payload = json!({"input": "Bonjour, je suis une voix.", "voice": "fr_female",
        "model": "tts-1", "max_frames": 10, "seed": 4});
    let reply = request(
        &server,
        "POST",
        "/v1/audio/speech",
        &aiohttp,
        Some(&payload),
    );
    reply.assert_ok();
    assert_eq!(
        reply.header("content-type"),
        Some("audio/mpeg"),
        "no response_format: mp3"
    );
    let (rate, channels, samples) = decode("mp3", &reply.body);
    assert_eq!((rate, channels), (24_000, 1));
    assert!(samples >= 10 * FRAME - 240, "{samples} samples");
    // The same request without its key is refused: only the lists are open.
    let keyless = &aiohttp[..1];
    let refused = request(&server, "POST", "/v1/audio/speech", keyless, Some(&payload));
    assert_eq!(refused.error(401).2.as_deref(), Some("missing_api_key"));
}

/// Splits as LibreChat's `splitTextIntoChunks(input, 1000)` does for input of 4096 characters
/// or more (api/server/services/Files/Audio/streamAudio.js): at most 1000 characters, ending
/// after the chunk's last separator, trimmed.
fn librechat_chunks(text: &str) -> Vec<String> {
    let mut chunks = Vec::new();
    let mut rest = text;
    while !rest.is_empty() {
        let window: String = rest.chars().take(1000).collect();
        let end = if window.len() < rest.len() {
            window
                .rfind(['.', '?', '!', ';', '\n'])
                .map_or(window.len(), |i| i + 1)
        } else {
            rest.len()
        };
        chunks.push(rest[..end].trim().to_string());
        rest = rest[end..].trim_start();
    }
    chunks
}

/// LibreChat, api/server/services/Files/Audio/TTSService.js (danny-avila/LibreChat@6aa8eff):
/// `openAIProvider` sends `{input, model, voice}` through axios with
/// `Authorization: ${apiKey ? 'Bearer ' + key : undefined}`, the literal text `undefined`
/// when no key is configured; `processTextToSpeech` splits input of 4096 characters or more
/// into 1000-character requests and pipes the mp3 answers one after another into one
/// `audio/mpeg` response, which must play as one stream.
#[test]
fn librechat_authorization_undefined_and_concatenated_mp3_answers() {
    let server = Server::start(&[]);
    let axios = [
        ("Accept", "application/json, text/plain, */*"),
        ("Content-Type", "application/json"),
        ("Authorization", "undefined"),
        ("User-Agent", "axios/1.8.2"),
        ("Accept-Encoding", "gzip, compress, deflate, br"),
    ];
    let sentence = "LibreChat reads long answers aloud in several parts. ";
    let text = sentence.repeat(4200 / sentence.len() + 1);
    assert!(text.len() >= 4096);
    let chunks = librechat_chunks(&text);
    assert!(
        chunks.len() >= 5 && chunks.iter().all(|c| c.len() <= 1000),
        "{}",
        chunks.len()
    );
    let (mut joined, mut spoken) = (Vec::new(), 0);
    for (i, chunk) in chunks.iter().enumerate() {
        let mut body = json!({"input": chunk, "model": "tts-1", "voice": "alloy",
            "max_frames": 3, "seed": i});
        let reply = request(&server, "POST", "/v1/audio/speech", &axios, Some(&body));
        reply.assert_ok();
        assert_eq!(reply.header("content-type"), Some("audio/mpeg"));
        joined.extend_from_slice(&reply.body);
        body["response_format"] = json!("pcm");
        spoken += pcm_samples(&server.speech(body)).len();
    }
    // ffmpeg decodes the concatenation without an error (`decode` checks its stderr), and
    // every part's audio is in it.
    let (rate, channels, samples) = decode("mp3", &joined);
    assert_eq!((rate, channels), (24_000, 1));
    let slack = chunks.len() * (576 + 1728 + 576);
    assert!(
        samples >= spoken && samples <= spoken + slack,
        "{samples} decoded for {spoken} spoken in {} parts",
        chunks.len()
    );
}

/// SillyTavern, src/endpoints/openai.js (SillyTavern/SillyTavern@ba6f7b7), `custom.post(
/// '/generate-voice')`: node-fetch to the configured endpoint with `Authorization: Bearer ${key
/// ?? ''}` (empty without a key) and `{input, response_format: 'mp3', voice, speed, model}`.
#[test]
fn sillytavern_empty_bearer_with_speed() {
    let server = Server::start(&[]);
    let node_fetch = [
        ("Content-Type", "application/json"),
        ("Authorization", "Bearer "),
        ("Accept", "*/*"),
        (
            "User-Agent",
            "node-fetch/1.0 (+https://github.com/bitinn/node-fetch)",
        ),
        ("Accept-Encoding", "gzip,deflate"),
    ];
    let mut body = json!({"input": "Hello from the tavern.", "response_format": "mp3",
        "voice": "nova", "speed": 2.0, "model": "tts-1", "max_frames": 20, "seed": 3});
    let reply = request(
        &server,
        "POST",
        "/v1/audio/speech",
        &node_fetch,
        Some(&body),
    );
    reply.assert_ok();
    assert_eq!(reply.header("content-type"), Some("audio/mpeg"));
    let (_, _, samples) = decode("mp3", &reply.body);
    body["response_format"] = json!("pcm");
    body["speed"] = json!(1.0);
    let normal = pcm_samples(&server.speech(body)).len();
    assert!(
        samples >= normal / 2 && samples < normal / 2 + 576 + 1728,
        "speed 2: {samples} decoded for {normal} at speed 1"
    );
}

/// pipecat, src/pipecat/services/openai/tts.py (pipecat-ai/pipecat@acead05): `run_tts` sends
/// `response_format: "pcm"` through the SDK's `with_streaming_response` and turns 0.5 s chunks
/// of the body into 24 kHz s16le frames as they arrive; it refuses any voice outside OpenAI's
/// 13 (`VALID_VOICES`) before sending, so all 13 must work.
#[test]
fn pipecat_reads_streamed_24khz_pcm_and_every_openai_voice_works() {
    let server = Server::start(&[]);
    let out = sdk_client(&server, "pipecat");
    let (pcm, meta) = saved(&out, "pipecat.pcm");
    assert_eq!(meta["content_type"], "audio/pcm");
    assert_eq!(
        meta["transfer_encoding"], "chunked",
        "streamed while generated: {meta}"
    );
    assert!(!pcm.is_empty());
    assert_eq!(pcm, streamed_reference(&server, sdk_body("alloy"), "pcm"));

    for voice in OPENAI_VOICES {
        let body = json!({"input": "Hi.", "model": "gpt-4o-mini-tts", "voice": voice,
            "response_format": "pcm", "max_frames": 2, "seed": 1});
        let samples = pcm_samples(&server.speech(body));
        assert!(!samples.is_empty(), "{voice}");
    }
}

/// LiveKit agents, livekit-plugins/livekit-plugins-openai/livekit/plugins/openai/tts.py
/// (livekit/agents@da6af86): `stream_format="sse"` for models other than tts-1/tts-1-hd, the
/// body parsed by its Content-Type, `speech.audio.delta` events' `delta` or `audio` decoded.
#[test]
fn livekit_parses_sse_or_audio_by_content_type() {
    let server = Server::start(&[]);
    let out = sdk_client(&server, "livekit");
    let (mp3, meta) = saved(&out, "livekit-gpt-4o-mini-tts.mp3");
    assert_eq!(meta["content_type"], "text/event-stream");
    assert!(
        meta["usage"]["output_tokens"]
            .as_u64()
            .is_some_and(|n| n > 0),
        "{meta}"
    );
    assert!(
        meta["request_id"].as_str().is_some_and(|id| !id.is_empty()),
        "{meta}"
    );
    assert_eq!(mp3, streamed_reference(&server, sdk_body("ash"), "mp3"));
    decode("mp3", &mp3);
    let (pcm, _) = saved(&out, "livekit-gpt-4o-mini-tts.pcm");
    assert_eq!(pcm, streamed_reference(&server, sdk_body("ash"), "pcm"));
    let (mp3, meta) = saved(&out, "livekit-tts-1.mp3");
    assert_eq!(
        meta["content_type"], "audio/mpeg",
        "tts-1 streams plain audio"
    );
    assert_eq!(mp3, streamed_reference(&server, sdk_body("ash"), "mp3"));
}

/// Home Assistant, homeassistant/components/openai_conversation/tts.py (home-assistant/core
/// @057855a): `instructions` (the text "None" without a prompt), `speed` and the preferred
/// `response_format`, the whole body of a `with_streaming_response` kept as the file.
#[test]
fn home_assistant_openai_tts_instructions_speed_and_formats() {
    let server = Server::start(&[]);
    let out = sdk_client(&server, "home-assistant");
    let (mp3, meta) = saved(&out, "home-assistant.mp3");
    assert_eq!(meta["content_type"], "audio/mpeg");
    assert_eq!(mp3, streamed_reference(&server, sdk_body("marin"), "mp3"));
    let (pcm, _) = saved(&out, "home-assistant.pcm");
    let reference = streamed_reference(&server, sdk_body("marin"), "pcm");
    assert_eq!(pcm, reference);
    let (opus, meta) = saved(&out, "home-assistant.opus");
    assert_eq!(meta["content_type"], "audio/opus");
    let (rate, _, samples) = decode("opus", &opus);
    let at_24k = samples * 24_000 / rate as usize;
    let expected = reference.len() / 2 * 2 / 3;
    assert!(
        at_24k.abs_diff(expected) <= 960,
        "speed 1.5: {at_24k} vs {expected}"
    );
}

/// Without `api_keys` any Authorization header, or none, is accepted (LibreChat's literal
/// `undefined`, SillyTavern's empty `Bearer `); with keys, a missing or wrong one gets 401 in
/// OpenAI's shape, and `public_discovery = false` closes the voice and model lists too.
#[test]
fn keys_are_ignored_without_keys_and_enforced_with_them() {
    let open = Server::start(&[]);
    for auth in [
        None,
        Some("undefined"),
        Some("Bearer "),
        Some("Bearer sk-x"),
        Some("Basic eDp5"),
    ] {
        let headers: Vec<(&str, &str)> = auth.iter().map(|a| ("Authorization", *a)).collect();
        assert_eq!(
            request(&open, "GET", "/v1/models", &headers, None).status,
            200,
            "{auth:?}"
        );
    }
    drop(open);

    let keyed = Server::start(&[
        ("VOXTRAL_API_KEYS", "k-1"),
        ("VOXTRAL_PUBLIC_DISCOVERY", "false"),
    ]);
    for (auth, code) in [
        ("undefined", "missing_api_key"),
        ("Bearer ", "missing_api_key"),
        ("Bearer k-2", "invalid_api_key"),
    ] {
        let reply = request(
            &keyed,
            "GET",
            "/v1/models",
            &[("Authorization", auth)],
            None,
        );
        let (kind, _, got) = reply.error(401);
        assert_eq!(
            (kind.as_str(), got.as_deref()),
            ("authentication_error", Some(code)),
            "{auth}"
        );
    }
    for path in ["/v1/audio/voices", "/v1/audio/models"] {
        keyed.get(path).error(401);
        let with_key = request(
            &keyed,
            "GET",
            path,
            &[("Authorization", "Bearer k-1")],
            None,
        );
        assert_eq!(with_key.status, 200, "{path}");
    }
}

/// A model folder without `neutral_female` (its file and its tekken.json entry): `alloy`
/// maps to it, so the message says that, and offers only the OpenAI names whose presets are
/// there.
#[test]
fn an_alias_whose_preset_is_missing_gets_a_message_that_holds() {
    let tiny = model();
    let dir = tempfile::tempdir().unwrap();
    for entry in ["params.json", "consolidated.safetensors"] {
        std::os::unix::fs::symlink(tiny.join(entry), dir.path().join(entry)).unwrap();
    }
    let mut tekken: Value =
        serde_json::from_slice(&std::fs::read(tiny.join("tekken.json")).unwrap()).unwrap();
    let listed = tekken["audio"]["voice_num_audio_tokens"]
        .as_object_mut()
        .unwrap();
    assert!(listed.remove("neutral_female").is_some());
    std::fs::write(dir.path().join("tekken.json"), tekken.to_string()).unwrap();
    let voices = dir.path().join("voice_embedding");
    std::fs::create_dir(&voices).unwrap();
    for entry in std::fs::read_dir(tiny.join("voice_embedding")).unwrap() {
        let path = entry.unwrap().path();
        if !path
            .file_name()
            .unwrap()
            .to_string_lossy()
            .starts_with("neutral_female")
        {
            std::os::unix::fs::symlink(&path, voices.join(path.file_name().unwrap())).unwrap();
        }
    }
    let server = Server::spawn(dir.path(), &[], &[]);
    server.wait_ready();
    let reply = server.speech(speech_body("alloy", "pcm", 1, 2));
    let (_, param, _) = reply.error(400);
    assert_eq!(param.as_deref(), Some("voice"));
    let message = reply.json()["error"]["message"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        message.starts_with("The OpenAI voice 'alloy' selects the preset 'neutral_female', which this model folder does not have."),
        "{message}"
    );
    let offered = message.split(" maps to one (").nth(1).unwrap();
    assert!(
        !offered.contains("alloy") && !offered.contains("sage") && offered.contains("nova"),
        "{message}"
    );
    assert_eq!(server.speech(speech_body("nova", "pcm", 1, 2)).status, 200);
}
