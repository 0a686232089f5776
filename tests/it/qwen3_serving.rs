//! Qwen3-TTS served: the engine behind the engine interface (batched talker steps equal each
//! session alone, streamed audio equals the whole decode), and the HTTP API on the tiny
//! CustomVoice, VoiceDesign and Base presets (voices, languages, instructions, greedy
//! decoding, errors).

use crate::common;

use common::{decode_streamed, max_abs_diff, pcm_samples, run_to_end, Server};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use voxtral_tts::engine::{
    prepare_speech, Conditioning, EngineOptions, PreparedSpeech, Sampling, SpeechInput,
    SpeechSession, StopReason, TextToSpeech,
};
use voxtral_tts::models::qwen3_tts::testkit::cached_endless_test_model as cached_endless_qwen3_test_model;
use voxtral_tts::models::qwen3_tts::testkit::cached_test_model as cached_qwen3_test_model;
use voxtral_tts::models::qwen3_tts::testkit::Qwen3Preset;
use voxtral_tts::models::qwen3_tts::Qwen3Engine;
use voxtral_tts::tensor::quantized::QuantFormat;
use voxtral_tts::tensor::tch_backend::TchTensor;
use voxtral_tts::tensor::DType;

fn model(preset: Qwen3Preset) -> PathBuf {
    cached_qwen3_test_model(preset, 0).unwrap()
}

fn engine(preset: Qwen3Preset, sessions: usize) -> Qwen3Engine<TchTensor> {
    load_engine(&model(preset), sessions)
}

fn load_engine(dir: &Path, sessions: usize) -> Qwen3Engine<TchTensor> {
    load_engine_in(dir, sessions, DType::F32, None)
}

fn load_engine_in(
    dir: &Path,
    sessions: usize,
    dtype: DType,
    quantize: Option<QuantFormat>,
) -> Qwen3Engine<TchTensor> {
    let options = EngineOptions {
        max_sessions: sessions,
        kv_cache_bytes: 64 << 20,
        quantize,
        ..EngineOptions::default()
    };
    Qwen3Engine::load(dir, &tch::Device::Cpu, dtype, &options).unwrap()
}

fn prepare(
    engine: &Qwen3Engine<TchTensor>,
    text: &str,
    voice: &str,
    conditioning: Conditioning,
    temperature: Option<f32>,
) -> PreparedSpeech {
    let input = SpeechInput {
        text: text.into(),
        voice: voice.into(),
        conditioning,
        max_frames: 24,
        sampling: Sampling {
            seed: 7,
            noise_scale: 1.0,
            temperature,
        },
        normalize: true,
        segment_chars: 300,
    };
    prepare_speech(&*engine.preparer(), engine.card().max_frames, input).unwrap()
}

fn english() -> Conditioning {
    Conditioning {
        language: Some("en".into()),
        ..Conditioning::default()
    }
}

/// Sessions stepped together (the talker's steps and the code predictor's passes batched)
/// each get the frames they get alone, greedy and sampled, in f32, bf16 and with q4 layers,
/// with the code predictor's input projection (1.7B) and without (0.6B).
#[test]
fn batched_sessions_equal_each_alone() {
    for preset in [
        Qwen3Preset::TinyCustomVoice1b7,
        Qwen3Preset::TinyCustomVoice,
    ] {
        for (dtype, quantize) in [
            (DType::F32, None),
            (DType::BF16, None),
            (DType::BF16, Some(QuantFormat::Q4)),
        ] {
            let engine = load_engine_in(&model(preset), 3, dtype, quantize);
            let what = format!("{} {dtype} {quantize:?}", preset.name());
            batched_sessions_equal_each_alone_on(&engine, &what);
        }
    }
}

fn batched_sessions_equal_each_alone_on(engine: &Qwen3Engine<TchTensor>, what: &str) {
    let requests = [
        prepare(engine, "Hello there.", "ryan", english(), Some(0.0)),
        prepare(
            engine,
            "A longer sentence, spoken by somebody else.",
            "vivian",
            Conditioning {
                instructions: Some("Whisper it.".into()),
                ..Conditioning::default()
            },
            Some(0.0),
        ),
        // Sampled: the same seed replays the same draws, batched or not.
        prepare(
            engine,
            "Sampled at the model's own settings.",
            "sohee",
            english(),
            None,
        ),
    ];
    let alone: Vec<Vec<Vec<u32>>> = requests
        .iter()
        .map(|r| {
            let mut session = engine.start_session(r, 0).unwrap();
            run_to_end(engine, &mut session);
            session.codes().to_vec()
        })
        .collect();
    let mut together: Vec<_> = requests
        .iter()
        .map(|r| engine.start_session(r, 0).unwrap())
        .collect();
    assert_eq!(engine.free_slots(), 0);
    while together.iter().any(|s| s.stop_reason().is_none()) {
        let mut batch: Vec<_> = together.iter_mut().collect();
        engine.step(&mut batch).unwrap();
    }
    for (i, (session, want)) in together.iter().zip(&alone).enumerate() {
        assert!(!want.is_empty(), "{what}: request {i} made no frames");
        assert_eq!(session.codes(), &want[..], "{what}: request {i}");
        assert_eq!(session.codes()[0].len(), 16);
    }
    drop(together);
    assert_eq!(engine.free_slots(), 3);
}

#[test]
fn streamed_audio_equals_the_whole_decode() {
    // Never EOS: the request runs its 24 frames on every CPU, several chunks of 5.
    let endless = cached_endless_qwen3_test_model(Qwen3Preset::TinyCustomVoice, 0).unwrap();
    let engine = load_engine(&endless, 1);
    let request = prepare(
        &engine,
        "Stream this, please.",
        "aiden",
        english(),
        Some(0.0),
    );
    let mut session = engine.start_session(&request, 0).unwrap();
    let streamed = decode_streamed(&engine, &mut session, 5);
    let frames = session.codes().len();
    assert_eq!(frames, request.max_frames);
    let spf = engine.card().samples_per_frame;
    assert_eq!(streamed.len(), frames * spf);
    drop(session);
    // A fresh session of the same request decodes the whole utterance at once.
    let mut whole_session = engine.start_session(&request, 0).unwrap();
    run_to_end(&engine, &mut whole_session);
    let whole = engine.decode(&whole_session, 0).unwrap();
    assert_eq!(whole.len(), streamed.len());
    let max = max_abs_diff(&whole, &streamed);
    assert!(max < 1e-4, "streamed differs from whole by {max}");
    // A decode that skips frames is refused, not garbled.
    assert!(engine.decode(&whole_session, 1).is_err());
}

#[test]
fn frame_limit_and_greedy_are_honoured() {
    let engine = engine(Qwen3Preset::TinyVoiceDesign, 1);
    let mut request = prepare(
        &engine,
        "Limited.",
        "anything",
        Conditioning {
            instructions: Some("A deep, calm voice.".into()),
            ..english()
        },
        Some(0.0),
    );
    request.max_frames = 3;
    let mut session = engine.start_session(&request, 0).unwrap();
    run_to_end(&engine, &mut session);
    let frames = session.codes().len();
    assert!(frames <= 3, "{frames} frames");
    if frames == 3 {
        assert_eq!(session.stop_reason(), Some(StopReason::MaxFrames));
    }
}

#[test]
fn request_errors_name_their_field() {
    let base = engine(Qwen3Preset::TinyBase, 1);
    let preparer = base.preparer();
    let input = |voice: &str, language: Option<&str>| SpeechInput {
        text: "Hello.".into(),
        voice: voice.into(),
        conditioning: Conditioning {
            language: language.map(String::from),
            ..Conditioning::default()
        },
        max_frames: 10,
        sampling: Sampling {
            seed: 0,
            noise_scale: 1.0,
            temperature: None,
        },
        normalize: true,
        segment_chars: 300,
    };
    let no_voice = prepare_speech(&*preparer, 100, input("alloy", None)).unwrap_err();
    assert_eq!(no_voice.param(), "voice");
    assert!(
        no_voice.to_string().contains("POST /v1/audio/voices"),
        "{no_voice}"
    );
    let custom = engine(Qwen3Preset::TinyCustomVoice, 1);
    let preparer = custom.preparer();
    let language = prepare_speech(&*preparer, 100, input("ryan", Some("klingon"))).unwrap_err();
    assert_eq!(language.param(), "language");
    assert!(language.to_string().contains("english"), "{language}");
    for ok in ["en", "English", "en-GB", "auto"] {
        prepare_speech(&*preparer, 100, input("ryan", Some(ok))).unwrap();
    }
    let voice = prepare_speech(&*preparer, 100, input("nobody", None)).unwrap_err();
    assert_eq!(voice.param(), "voice");
}

/// One server for the three tiny presets (greedy), with these settings beside the model ids.
fn server(settings: &[(&str, &str)]) -> Server {
    let custom = model(Qwen3Preset::TinyCustomVoice1b7);
    let design = model(Qwen3Preset::TinyVoiceDesign);
    let base = model(Qwen3Preset::TinyBase);
    let server = Server::spawn(
        &custom,
        &[
            "--model",
            design.to_str().unwrap(),
            "--model",
            base.to_str().unwrap(),
        ],
        &[&[("VOXTRAL_MODEL_ID", "custom,design,base")], settings].concat(),
    );
    server.wait_ready();
    server
}

fn speech(model: &str, voice: Value, extra: Value) -> Value {
    let mut body = json!({"model": model, "input": "Hello from the tests.", "voice": voice,
        "response_format": "pcm", "seed": 3, "max_frames": 12, "temperature": 0});
    for (k, v) in extra.as_object().unwrap() {
        body[k] = v.clone();
    }
    body
}

/// At the default settings (bf16), as a user gets it.
#[test]
fn served_over_http() {
    served_over_http_with(&[]);
}

#[test]
fn served_over_http_in_f32() {
    served_over_http_with(&[("VOXTRAL_DTYPE", "f32")]);
}

fn served_over_http_with(settings: &[(&str, &str)]) {
    let server = server(settings);
    let models = server.get("/v1/models").json();
    let data = models["data"].as_array().unwrap();
    let card = |id: &str| data.iter().find(|m| m["id"] == id).unwrap().clone();
    assert_eq!(card("custom")["family"], "qwen3-tts");
    assert_eq!(card("custom")["capabilities"]["instructions"], true);
    assert_eq!(card("design")["capabilities"]["voice_design"], true);
    assert_eq!(card("base")["capabilities"]["cloning"], true);
    assert_eq!(card("base")["capabilities"]["language_input"], true);
    assert!(card("custom")["capabilities"]["languages"]
        .as_array()
        .unwrap()
        .contains(&json!("en")));

    let voices = server.get("/v1/audio/voices?model=custom").json();
    assert_eq!(voices["instructions"], true);
    assert_eq!(
        server.get("/v1/audio/voices?model=base").json()["instructions"],
        false
    );
    let ryan = voices["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|v| v["id"] == "ryan")
        .unwrap()
        .clone();
    assert_eq!(
        (&ryan["language"], &ryan["gender"]),
        (&json!("en"), &json!("male"))
    );
    assert!(ryan["aliases"].as_array().unwrap().contains(&json!("echo")));

    // An OpenAI voice name selects its speaker: the same greedy audio as the speaker.
    let by_name = server.speech(speech("custom", json!("ryan"), json!({"language": "en"})));
    by_name.assert_ok();
    let by_alias = server.speech(speech("custom", json!("echo"), json!({"language": "en"})));
    let (a, b) = (pcm_samples(&by_name), pcm_samples(&by_alias));
    assert!(!a.is_empty() && a.len() % 1920 == 0, "{} samples", a.len());
    assert_eq!(a, b);
    // Greedy: the seed does not matter.
    let reseeded = server.speech(speech(
        "custom",
        json!("ryan"),
        json!({"language": "en", "seed": 99}),
    ));
    assert_eq!(pcm_samples(&reseeded), a);
    // Instructions steer the 1.7B CustomVoice.
    let steered = server.speech(speech(
        "custom",
        json!("ryan"),
        json!({"language": "en", "instructions": "Very fast and angry."}),
    ));
    steered.assert_ok();

    // VoiceDesign: any voice name; the instructions describe the voice.
    let designed = server.speech(speech(
        "design",
        json!("alloy"),
        json!({"instructions": "An old sailor, gravelly.", "response_format": "wav"}),
    ));
    designed.assert_ok();
    assert_eq!(designed.header("content-type"), Some("audio/wav"));

    // Streamed as Server-Sent Events, with usage.
    let sse = server.speech(speech(
        "custom",
        json!("vivian"),
        json!({"stream_format": "sse"}),
    ));
    sse.assert_ok();
    let text = String::from_utf8(sse.body.clone()).unwrap();
    assert!(
        text.contains("speech.audio.delta") && text.contains("speech.audio.done"),
        "{text}"
    );

    // Streamed as a file in every format, chunk by chunk through the stateful decoder: the
    // PCM stream carries the same greedy samples as the whole file.
    let streamed = server.speech(speech(
        "custom",
        json!("ryan"),
        json!({"language": "en", "stream_format": "audio"}),
    ));
    assert_eq!(pcm_samples(&streamed).len(), a.len());
    let worst = common::max_lsb_diff(&pcm_samples(&streamed), &a);
    assert!(worst <= 4, "streamed PCM differs by {worst} steps");
    for format in ["mp3", "opus", "aac", "flac", "wav"] {
        let reply = server.speech(speech(
            "custom",
            json!("ryan"),
            json!({"language": "en", "stream_format": "audio", "response_format": format}),
        ));
        reply.assert_ok();
        assert!(!reply.body.is_empty(), "{format}");
    }

    // Errors, each naming its field.
    let (_, param, _) = server
        .speech(speech(
            "custom",
            json!("ryan"),
            json!({"language": "klingon"}),
        ))
        .error(400);
    assert_eq!(param.as_deref(), Some("language"));
    let (_, param, _) = server
        .speech(speech("custom", json!("ryan"), json!({"temperature": 3})))
        .error(400);
    assert_eq!(param.as_deref(), Some("temperature"));
    let refused = server.speech(speech("base", json!("alloy"), json!({})));
    let (_, param, _) = refused.error(400);
    assert_eq!(param.as_deref(), Some("voice"));
    let message = refused.json()["error"]["message"].to_string();
    assert!(message.contains("/v1/audio/voices"), "{message}");
}
