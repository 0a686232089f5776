//! The browser playground (`GET /playground`): headless Chromium (Debian's `chromium`, driven
//! by playwright-core from tests/playground/) types text, picks the format, clicks Speak and
//! checks that the streamed audio starts playing (play.mjs); with four tiny models served, it
//! goes through every tab with Chromium's fake microphone (tour.mjs). scripts/setup.sh
//! installs both and exports VOXTRAL_NODE_MODULES; without them these tests fail, they do not
//! skip.

use crate::common;

use common::Server;
use serde_json::{json, Value};
use std::path::Path;
use std::process::Command;
use voxtral_tts::models::qwen3_tts::testkit::cached_endless_test_model as cached_endless_qwen3_test_model;
use voxtral_tts::models::qwen3_tts::testkit::Qwen3Preset;
use voxtral_tts::models::voxtral_realtime::testkit::cached_endless_test_model as cached_endless_stt_test_model;
use voxtral_tts::models::xtts::testkit::cached_endless_test_model as cached_endless_xtts_test_model;

const CHROMIUM: &str = "/usr/bin/chromium";

/// Runs play.mjs with these options; returns what the page did.
fn drive(options: Value) -> Value {
    run_script("play.mjs", options)
}

/// Runs a script of tests/playground with these options; returns what the page did.
fn run_script(name: &str, options: Value) -> Value {
    let chromium = std::env::var("VOXTRAL_CHROMIUM").unwrap_or_else(|_| CHROMIUM.into());
    assert!(
        Path::new(&chromium).exists(),
        "{chromium} is missing: the playground tests need Debian's chromium package \
         (scripts/setup.sh installs it)"
    );
    let modules = std::env::var("VOXTRAL_NODE_MODULES")
        .unwrap_or_else(|_| format!("{}/.deps/node/node_modules", env!("CARGO_MANIFEST_DIR")));
    assert!(
        Path::new(&modules).join("playwright-core").is_dir(),
        "playwright-core is missing from {modules}: run scripts/setup.sh and \
         eval \"$(scripts/setup.sh --env)\" (it sets VOXTRAL_NODE_MODULES)"
    );
    let script = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/playground")
        .join(name);
    let out = Command::new("node")
        .arg(script)
        .arg(options.to_string())
        .env("VOXTRAL_NODE_MODULES", &modules)
        .env("VOXTRAL_CHROMIUM", &chromium)
        .output()
        .expect("node is needed to drive Chromium");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let line = stdout.lines().last().unwrap_or_default();
    let result: Value = serde_json::from_str(line)
        .unwrap_or_else(|e| panic!("{e}: no result from play.mjs\n{stdout}\n{stderr}"));
    assert!(
        out.status.success(),
        "{name} {options}: {result:#}\n{stderr}"
    );
    assert!(
        result.get("external").is_none(),
        "the page fetched from elsewhere: {result}"
    );
    result
}

/// Plays each format through the page; checks that the request streamed (stream_format
/// audio) and that playback advanced. Returns the runs.
fn plays(server: &Server, formats: &[&str], max_frames: u32, key: Option<&str>) -> Vec<Value> {
    let result = drive(json!({
        "url": server.url(&format!("/playground?max_frames={max_frames}&seed=7")),
        "formats": formats,
        "key": key,
        "expect": "playing",
    }));
    let runs = result["runs"].as_array().unwrap().clone();
    assert_eq!(runs.len(), formats.len(), "{result}");
    for (run, format) in runs.iter().zip(formats) {
        let request = &run["request"];
        assert_eq!(request["stream_format"], "audio", "{run}");
        assert_eq!(request["response_format"], *format, "{run}");
        assert_eq!(request["max_frames"], max_frames, "{run}");
        assert!(run["currentTime"].as_f64().unwrap() > 0.0, "{run}");
        let events = run["events"].as_array().unwrap();
        assert!(events.contains(&json!("playing")), "{run}");
        assert!(!events.contains(&json!("error")), "{run}");
        assert!(
            run["status"]
                .as_str()
                .unwrap()
                .contains("First audio after"),
            "{run}"
        );
        eprintln!("{run}");
    }
    runs
}

#[test]
fn streamed_mp3_and_opus_start_playing_while_they_arrive() {
    let server = Server::start(&[]);
    let page = server.get("/playground");
    assert_eq!(page.status, 200);
    assert!(page
        .header("content-type")
        .unwrap()
        .starts_with("text/html"));
    assert!(page.header("content-security-policy").is_some());
    let no_redirects = ureq::AgentBuilder::new().redirects(0).build();
    let root = common::send(no_redirects.get(&server.url("/")), None);
    assert_eq!(root.status, 307);
    assert_eq!(root.header("location"), Some("/playground"));

    // 400 frames (32 s) take far longer to generate than the first chunk: playback must start
    // before the response ends. Moving on (and closing the page) cancels the request.
    let runs = plays(&server, &["mp3", "opus"], 400, None);
    // Chromium's MediaSource takes MP3 as it is; Ogg Opus the page remuxes into WebM.
    assert_eq!(runs[0]["mode"], "mse", "{}", runs[0]);
    assert_eq!(runs[1]["mode"], "webm", "{}", runs[1]);
    for run in &runs {
        let status = run["statusAtPlaying"].as_str().unwrap();
        assert!(
            status.contains("First audio after") && !status.contains("KiB after"),
            "playing only once the response had ended: {run}"
        );
    }
}

#[test]
fn the_other_formats_play_too() {
    let server = Server::start(&[]);
    let runs = plays(&server, &["aac", "flac", "wav", "pcm"], 8, None);
    // ADTS AAC streams through MediaSource; the others play once complete.
    let modes: Vec<&str> = runs.iter().map(|r| r["mode"].as_str().unwrap()).collect();
    assert_eq!(modes, ["mse", "blob", "blob", "blob"]);
}

#[test]
fn errors_show_the_servers_message() {
    let server = Server::start(&[]);
    let result = drive(json!({
        "url": server.url("/playground?max_frames=4"),
        "formats": ["mp3"],
        "text": "",
        "expect": "error",
    }));
    let status = result["runs"][0]["status"].as_str().unwrap();
    // The message of OpenAI's error body, not the JSON around it.
    assert_eq!(status, "'input' must not be empty.", "{result}");
}

#[test]
fn with_api_keys_the_page_asks_for_one() {
    let server = Server::start(&[("VOXTRAL_API_KEYS", "playground-key")]);
    // The page itself is open, and so is the voice list (`public_discovery`); the rest of
    // the API is not.
    assert_eq!(server.get("/playground").status, 200);
    assert_eq!(server.get("/v1/audio/voices").status, 200);
    assert_eq!(server.get("/v1/models").status, 401);
    plays(&server, &["mp3"], 40, Some("playground-key"));
}

/// Where the tour's screenshots go (scripts/playground-screenshots.sh copies them to docs/).
const SCREENSHOTS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/target/playground");

/// The fake microphone: four bursts of a rising tone between silences, 48 kHz.
fn bursts() -> Vec<u8> {
    let rate = 48_000u32;
    let samples: Vec<i16> = (0..4)
        .flat_map(|_| {
            let tone = (0..rate * 8 / 10).map(move |i| {
                let t = f64::from(i) / f64::from(rate);
                let phase = std::f64::consts::TAU * (180.0 * t + 200.0 * t * t);
                (0.3 * phase.sin() * 32767.0) as i16
            });
            tone.chain(std::iter::repeat_n(0, rate as usize * 7 / 10))
        })
        .collect();
    common::pcm16_wav(rate, &samples)
}

/// Voxtral TTS, Qwen3-TTS Base, XTTS-v2 and Voxtral Realtime served behind a key: each tab
/// driven through the page (tour.mjs), then checked in the page's state, the requests it sent
/// and the server's voice lists.
#[test]
fn every_tab_with_four_models() {
    let tmp = tempfile::tempdir().unwrap();
    let voices = tmp.path().join("voices");
    let base = cached_endless_qwen3_test_model(Qwen3Preset::TinyBase, 0).unwrap();
    let xtts = cached_endless_xtts_test_model(0).unwrap();
    let stt = cached_endless_stt_test_model(0).unwrap();
    let server = Server::spawn(
        &common::model(),
        &[
            "--model",
            base.to_str().unwrap(),
            "--model",
            xtts.to_str().unwrap(),
            "--model",
            stt.to_str().unwrap(),
        ],
        &[
            ("VOXTRAL_MODEL_ID", "voxtral,qwen3-base,xtts,stt"),
            ("VOXTRAL_VOICES_DIR", voices.to_str().unwrap()),
            // Every request of the page carries the key, the realtime WebSocket's as a
            // subprotocol.
            ("VOXTRAL_API_KEYS", "tour-key"),
        ],
    );
    server.wait_ready();
    let wav = tmp.path().join("microphone.wav");
    std::fs::write(&wav, bursts()).unwrap();
    std::fs::create_dir_all(SCREENSHOTS).unwrap();
    let started = std::time::Instant::now();
    let result = run_script(
        "tour.mjs",
        json!({
            "url": server.url("/playground?max_frames=24&seed=7"),
            "key": "tour-key",
            "wav": wav,
            "shots": SCREENSHOTS,
            "speak": ["voxtral", "xtts"],
            "clone": {"model": "qwen3-base"},
            "drop": {"model": "xtts"},
        }),
    );
    eprintln!(
        "tour in {:.1} s: {result:#}",
        started.elapsed().as_secs_f64()
    );
    assert_eq!(
        result["tabs"],
        json!({"speak": true, "clone": true, "transcribe": true})
    );
    assert_eq!(
        result["models"],
        json!(["voxtral", "qwen3-base", "xtts"]),
        "speech models only"
    );
    assert_eq!(result["cloneModels"], json!(["qwen3-base", "xtts"]));
    assert_eq!(result["sttModels"], json!(["stt"]));
    assert_eq!(result["keyboard"], json!(["tab-clone", "shown"]));
    assert_eq!(result["keyField"], false, "shown once the key works");

    // Speak: each model with its default voice, streamed, played, drawn and downloaded.
    let speak = result["speak"].as_array().unwrap();
    for run in speak.iter().chain([&result["clonedSpeak"]]) {
        let request = &run["request"];
        assert_eq!(request["stream_format"], "audio", "{run}");
        assert_eq!(request["max_frames"], 24, "{run}");
        assert_eq!(run["stream"], true, "streaming is the default: {run}");
        assert!(run["currentTime"].as_f64().unwrap() > 0.0, "{run}");
        assert!(run["columns"].as_u64().unwrap() > 0, "no waveform: {run}");
        assert!(
            run["status"]
                .as_str()
                .unwrap()
                .contains("First audio after"),
            "{run}"
        );
        assert_eq!(run["download"]["name"], "speech.mp3", "{run}");
        assert!(run["download"]["bytes"].as_u64().unwrap() > 0, "{run}");
    }
    for run in speak {
        assert_eq!(run["request"]["model"], run["model"], "{run}");
    }
    let (voxtral, xtts_run) = (&speak[0], &speak[1]);
    // Voxtral: presets grouped by language and gender; the English sample gets an English
    // voice; no language or instructions field (the model reads neither).
    assert_eq!(voxtral["sample"], "en", "{voxtral}");
    assert_eq!(voxtral["voiceLanguage"], "en", "{voxtral}");
    assert_eq!(voxtral["request"]["voice"], voxtral["voice"], "{voxtral}");
    let groups = voxtral["groups"].as_array().unwrap();
    assert!(groups.contains(&json!("English · female")), "{voxtral}");
    assert_eq!(
        (&voxtral["language"], &voxtral["instructions"]),
        (&json!(false), &json!(false))
    );
    // XTTS-v2 reads the language; Qwen3-TTS Base has no voice before one is cloned.
    assert_eq!(xtts_run["language"], true, "{xtts_run}");
    assert_eq!(xtts_run["instructions"], false, "{xtts_run}");
    assert_eq!(result["beforeClone"]["speakable"], false, "{result}");

    // Clone: recorded from the fake microphone, in context with its transcript.
    assert!(
        result["recorded"]
            .as_str()
            .unwrap()
            .starts_with("Recording of "),
        "{result}"
    );
    let cloned = result["cloned"].as_array().unwrap();
    assert_eq!(cloned.len(), 1, "{result}");
    assert!(
        cloned[0]["text"].as_str().unwrap().contains("in context"),
        "{result}"
    );
    let id = cloned[0]["id"].as_str().unwrap();
    let listed = server.get("/v1/audio/voices?model=qwen3-base").json();
    let stored = listed["data"].as_array().unwrap();
    assert_eq!(stored.len(), 1, "{listed}");
    assert_eq!(stored[0]["id"], id);
    assert_eq!(stored[0]["transcript"], "Hello there, this is my voice.");
    // Spoken with it from the Speak tab.
    let with_voice = &result["clonedSpeak"];
    assert_eq!(with_voice["groups"], json!(["Your voices"]), "{with_voice}");
    assert_eq!(
        with_voice["request"]["voice"],
        json!({"id": id}),
        "{with_voice}"
    );
    assert_eq!(with_voice["request"]["model"], "qwen3-base", "{with_voice}");
    // The dropped file made an XTTS-v2 voice, listed in the picker; deleted again.
    assert_eq!(result["dropped"].as_array().unwrap().len(), 1, "{result}");
    assert!(
        result["droppedPicker"]
            .as_array()
            .unwrap()
            .contains(&json!("Your voices")),
        "{result}"
    );
    assert!(result["deleted"]
        .as_str()
        .unwrap()
        .starts_with("Deleted the voice Dropped voice"));
    let xtts_voices = server.get("/v1/audio/voices?model=xtts").json();
    assert!(
        xtts_voices["data"]
            .as_array()
            .unwrap()
            .iter()
            .all(|v| v["object"] != "audio.voice"),
        "{xtts_voices}"
    );

    // Transcribe: the file in three formats, and the microphone live with server VAD.
    let file = &result["file"];
    assert!(!file["text"].as_str().unwrap().trim().is_empty(), "{file}");
    assert!(
        file["srt"].as_str().unwrap().starts_with("1\n00:00:"),
        "{file}"
    );
    assert!(
        file["vtt"].as_str().unwrap().starts_with("WEBVTT\n"),
        "{file}"
    );
    let live = &result["live"];
    assert!(live["turns"].as_u64().unwrap() >= 1, "{live}");
    assert!(live["deltas"].as_u64().unwrap() >= 1, "{live}");
    assert!(live["completed"].as_u64().unwrap() >= 1, "{live}");
    let completed = live["items"].as_array().unwrap();
    assert!(
        completed
            .iter()
            .any(|i| i["open"] == false && !i["text"].as_str().unwrap().is_empty()),
        "{live}"
    );

    // A phone's width: nothing wider than the screen.
    let phone = &result["phone"];
    assert!(
        phone["scrollWidth"].as_u64() <= phone["width"].as_u64(),
        "{phone}"
    );
    for name in ["speak", "clone", "transcribe", "phone"] {
        let shot = Path::new(SCREENSHOTS).join(format!("{name}.png"));
        assert!(
            std::fs::metadata(&shot).unwrap().len() > 0,
            "{}",
            shot.display()
        );
    }
}
