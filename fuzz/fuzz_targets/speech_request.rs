//! The body of `POST /v1/audio/speech`: JSON parsing and field validation, through
//! `server::parse_speech_body` (what the route runs before queuing a job).
//!
//! Never panics; errors are 400 (a bad field, named in `param`) or 422 (not JSON); an
//! accepted request satisfies every documented limit.
#![no_main]

use libfuzzer_sys::fuzz_target;
use voxtral_tts::models::voxtral_tts::catalog::example_card;
use voxtral_tts::server::parse_speech_body;
use voxtral_tts::models::voxtral_tts::testkit::PRESET_VOICES;

fuzz_target!(|data: &[u8]| {
    let model = example_card(&PRESET_VOICES);
    // The server default, and a small limit so the "too long" path is reached too.
    for max_input_chars in [4096, 8] {
        match parse_speech_body(data, max_input_chars, &model) {
            Ok(speech) => {
                let chars = speech.text.chars().count();
                assert!((1..=max_input_chars).contains(&chars));
                assert!((0.25..=4.0).contains(&speech.speed));
                assert!((1..=2048).contains(&speech.max_frames));
                assert!(model.voices.iter().any(|v| v.name == speech.voice));
                assert!(speech.format.is_supported());
            }
            Err(e) => {
                let status = e.status.as_u16();
                assert!(
                    status == 400 || status == 422,
                    "status {status}: {}",
                    e.message
                );
                if status == 400 {
                    assert!(e.code.is_some());
                }
            }
        }
    }
});
