//! Custom voices as clients see them: a real `voxtral-tts serve` process, `POST`, `GET` and
//! `DELETE /v1/audio/voices` over HTTP with OpenAI's multipart form, and the voices folder
//! they are kept in.

mod common;

use common::*;

const BOUNDARY: &str = "voices-test-boundary";

/// A multipart form: text fields, then one `audio_sample` file per clip.
fn form(fields: &[(&str, &str)], clips: &[&[u8]]) -> Vec<u8> {
    let mut body = Vec::new();
    for (name, value) in fields {
        body.extend(
            format!("--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"{name}\"\r\n\r\n{value}\r\n")
                .bytes(),
        );
    }
    for clip in clips {
        body.extend(
            format!(
                "--{BOUNDARY}\r\nContent-Disposition: form-data; name=\"audio_sample\"; \
                 filename=\"clip.wav\"\r\nContent-Type: application/octet-stream\r\n\r\n"
            )
            .bytes(),
        );
        body.extend(*clip);
        body.extend(b"\r\n");
    }
    body.extend(format!("--{BOUNDARY}--\r\n").bytes());
    body
}

fn upload(server: &Server, fields: &[(&str, &str)], clips: &[&[u8]]) -> Reply {
    let request = agent().post(&server.url("/v1/audio/voices")).set(
        "Content-Type",
        &format!("multipart/form-data; boundary={BOUNDARY}"),
    );
    send(request, Some(&form(fields, clips)))
}

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
    let data = len * 2;
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
    for s in samples {
        out.extend(s.to_le_bytes());
    }
    out
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
                &format!("multipart/form-data; boundary={BOUNDARY}"),
            )
            .set("Authorization", "Bearer k-1");
        send(request, Some(&form(fields, clips)))
    };
    // Uploads and deletions need the key; the list stays open (public_discovery).
    // (A small body: the 401 comes before the body is read.)
    upload(&server, &[("name", "a")], &[b"RIFF"]).error(401);
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
