//! The browser playground (`GET /playground`): headless Chromium (Debian's `chromium`, driven
//! by playwright-core from tests/playground/play.mjs) types text, picks the format, clicks
//! Speak and checks that the streamed audio starts playing. scripts/setup.sh installs both
//! and exports VOXTRAL_NODE_MODULES; without them these tests fail, they do not skip.

use crate::common;

use common::Server;
use serde_json::{json, Value};
use std::path::Path;
use std::process::Command;

const CHROMIUM: &str = "/usr/bin/chromium";

/// Runs play.mjs with these options; returns what the page did.
fn drive(options: Value) -> Value {
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
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/playground/play.mjs");
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
        "play.mjs {options}: {result:#}\n{stderr}"
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
