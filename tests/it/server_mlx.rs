//! `voxtral-tts serve` on the MLX backend (`--features mlx`): `VOXTRAL_DEVICE=mlx` loads the
//! model through MLX and serves speech.
#![cfg(feature = "mlx")]

use crate::common;

use common::*;

#[test]
fn device_mlx_serves_speech_through_the_mlx_backend() {
    let server = Server::start(&[("VOXTRAL_DEVICE", "mlx"), ("VOXTRAL_DTYPE", "f32")]);
    let reply = server.speech(speech_body("nova", "pcm", 5, 6));
    assert_eq!(reply.status, 200);
    let pcm = pcm_samples(&reply);
    assert!(!pcm.is_empty() && pcm.len().is_multiple_of(FRAME));
    assert!(pcm.iter().any(|&s| s != 0), "silence");
    // The same seed gives the same audio.
    assert_eq!(
        pcm_samples(&server.speech(speech_body("nova", "pcm", 5, 6))),
        pcm
    );
    let logs = server.logs();
    assert!(
        logs.lines()
            .any(|l| l.contains("model loaded") && l.contains("mlx")),
        "{logs}"
    );
}

/// `quantize = "q8"` on MLX: the weights are multiplied in MLX's quantized form, and
/// `/v1/models` says so.
#[test]
fn device_mlx_serves_quantized_weights() {
    let server = Server::start(&[
        ("VOXTRAL_DEVICE", "mlx"),
        ("VOXTRAL_DTYPE", "f32"),
        ("VOXTRAL_QUANTIZE", "q8"),
    ]);
    let models = server.get("/v1/models").json();
    assert_eq!(models["data"][0]["weights"], "q8", "{models}");
    let reply = server.speech(speech_body("nova", "pcm", 5, 6));
    assert_eq!(reply.status, 200);
    let pcm = pcm_samples(&reply);
    assert!(!pcm.is_empty() && pcm.iter().any(|&s| s != 0), "silence");
}
