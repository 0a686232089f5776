//! openapi/openapi.json is the committed description of the HTTP API; this fails when the
//! code's document drifts from it. After an intended API change, regenerate the file:
//! `UPDATE_OPENAPI=1 cargo test --features testkit --test it server_openapi`.

use std::path::Path;

#[test]
fn committed_openapi_document_matches_the_code() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("openapi/openapi.json");
    let current = voxtral_tts::server::openapi().to_pretty_json().unwrap() + "\n";
    if std::env::var_os("UPDATE_OPENAPI").is_some() {
        std::fs::write(&path, &current).unwrap();
        return;
    }
    let committed = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        committed == current,
        "{} is out of date with the code: review the API change, then run \
         `UPDATE_OPENAPI=1 cargo test --features testkit --test it server_openapi`",
        path.display()
    );
}

#[test]
fn the_document_describes_every_endpoint_and_the_voice_mapping() {
    let doc = voxtral_tts::server::openapi();
    let paths: Vec<&str> = doc.paths.paths.keys().map(String::as_str).collect();
    for path in [
        "/v1/audio/speech",
        "/v1/audio/voices",
        "/v1/models",
        "/health",
        "/ready",
        "/metrics",
    ] {
        assert!(paths.contains(&path), "{path} missing from {paths:?}");
    }
    let description = doc.info.description.unwrap();
    assert!(
        description.contains("| alloy | neutral_female |"),
        "{description}"
    );
}
