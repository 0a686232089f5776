//! XTTS-v2 served: the engine behind the engine interface (GPT sequences of several requests
//! stepped together pick the codes each picks alone; streamed audio equals the whole
//! decode), and the HTTP API on the tiny folder (studio voices, language, errors naming
//! their field, SSE, cloned voices).

use crate::common;

use common::{
    decode_streamed, max_abs_diff, pcm16_wav, pcm_samples, run_to_end, start_loaded_worker, Server,
};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use voxtral_tts::device::DeviceChoice;
use voxtral_tts::engine::{
    prepare_speech, Conditioning, EngineOptions, PreparedSpeech, Sampling, SpeechInput,
    SpeechSession, StopReason, TextToSpeech,
};
use voxtral_tts::models::xtts::testkit::cached_endless_test_model as cached_endless_xtts_test_model;
use voxtral_tts::models::xtts::testkit::STUDIO_VOICES as XTTS_STUDIO_VOICES;
use voxtral_tts::models::xtts::XttsEngine;
use voxtral_tts::scheduler::{JobEvent, JobOptions, StreamSettings, WorkerSettings};
use voxtral_tts::tensor::tch_backend::TchTensor;
use voxtral_tts::tensor::DType;

/// The tiny folder whose GPT never picks the stop code: every request runs to its frame
/// limit on every CPU (the XTTS goldens use the one that stops on its own).
fn model() -> PathBuf {
    cached_endless_xtts_test_model(0).unwrap()
}

fn engine(sessions: usize) -> XttsEngine<TchTensor> {
    load_engine(&model(), sessions)
}

fn load_engine(dir: &Path, sessions: usize) -> XttsEngine<TchTensor> {
    let options = EngineOptions {
        max_sessions: sessions,
        kv_cache_bytes: 64 << 20,
        ..EngineOptions::default()
    };
    XttsEngine::load(dir, &tch::Device::Cpu, DType::F32, &options).unwrap()
}

fn input(text: &str, voice: &str, language: Option<&str>, temperature: Option<f32>) -> SpeechInput {
    SpeechInput {
        text: text.into(),
        voice: voice.into(),
        conditioning: Conditioning {
            language: language.map(String::from),
            ..Conditioning::default()
        },
        max_frames: 40,
        sampling: Sampling {
            seed: 7,
            noise_scale: 1.0,
            temperature,
        },
        normalize: true,
        segment_chars: 300,
    }
}

fn prepare(engine: &XttsEngine<TchTensor>, input: SpeechInput) -> PreparedSpeech {
    prepare_speech(&*engine.preparer(), engine.card().max_frames, input).unwrap()
}

fn run_alone(engine: &XttsEngine<TchTensor>, request: &PreparedSpeech) -> Vec<Vec<u32>> {
    let mut session = engine.start_session(request, 0).unwrap();
    run_to_end(engine, &mut session);
    session.codes().to_vec()
}

#[test]
fn batched_sessions_equal_each_alone() {
    let engine = engine(3);
    let [claribel, viktor] = XTTS_STUDIO_VOICES;
    let mut requests = [
        prepare(&engine, input("hello there.", claribel, None, Some(0.0))),
        prepare(
            &engine,
            input(
                "the world is a longer sentence, is it not?",
                viktor,
                Some("fr"),
                Some(0.0),
            ),
        ),
        // Sampled at the model's settings: the seed replays the same draws, batched or not.
        prepare(&engine, input("sampled hello.", claribel, Some("de"), None)),
    ];
    // Rows leave the batch at different steps, at their own frame limits.
    let limits = [23, 40, 31];
    for (request, limit) in requests.iter_mut().zip(limits) {
        request.max_frames = limit;
    }
    let alone: Vec<_> = requests.iter().map(|r| run_alone(&engine, r)).collect();
    let mut together: Vec<_> = requests
        .iter()
        .map(|r| engine.start_session(r, 0).unwrap())
        .collect();
    assert_eq!(engine.free_slots(), 0);
    let mut steps = 0;
    while together.iter().any(|s| s.stop_reason().is_none()) {
        let mut batch: Vec<_> = together.iter_mut().collect();
        engine.step(&mut batch).unwrap();
        steps += 1;
    }
    let lengths: Vec<usize> = alone.iter().map(Vec::len).collect();
    assert_eq!(lengths, limits);
    assert_eq!(steps, 40);
    for (i, (session, want)) in together.iter().zip(&alone).enumerate() {
        assert_eq!(session.codes(), &want[..], "request {i}");
    }
    drop(together);
    assert_eq!(engine.free_slots(), 3);
}

#[test]
fn streamed_audio_equals_the_whole_decode() {
    let engine = engine(1);
    let request = prepare(
        &engine,
        input(
            "stream this, please.",
            XTTS_STUDIO_VOICES[0],
            None,
            Some(0.0),
        ),
    );
    let mut session = engine.start_session(&request, 0).unwrap();
    let streamed = decode_streamed(&engine, &mut session, 3);
    let codes = session.codes().len();
    drop(session);
    let mut whole_session = engine.start_session(&request, 0).unwrap();
    run_to_end(&engine, &mut whole_session);
    assert_eq!(whole_session.codes().len(), codes);
    let whole = engine.decode(&whole_session, 0).unwrap();
    // floor(floor(4n) * 24000/22050) decoder frames of 256 samples.
    assert_eq!(
        whole.len(),
        ((4 * codes) as f64 * 24_000.0 / 22_050.0) as usize * 256
    );
    assert_eq!(whole.len(), streamed.len());
    let max = max_abs_diff(&whole, &streamed);
    assert!(max < 1e-4, "streamed differs from whole by {max}");
    assert!(whole.iter().any(|&x| x.abs() > 1e-3), "silent audio");
}

/// HiFi-GAN runs on the engine's vocoder thread: `decode_into` hands the work over and
/// returns while the decode is still to come (here the first delivery waits for a signal sent
/// only after `decode_into` has returned), and each sink is delivered there, in the order
/// asked, with the samples a plain `decode` gives.
#[test]
fn hifigan_decodes_on_the_vocoder_thread_without_holding_up_the_caller() {
    use std::sync::mpsc::channel;
    use std::time::Duration;
    use voxtral_tts::engine::PcmSink;

    let engine = engine(2);
    let request = prepare(
        &engine,
        input("off the thread.", XTTS_STUDIO_VOICES[0], None, Some(0.0)),
    );
    let mut streamed = engine.start_session(&request, 0).unwrap();
    for _ in 0..4 {
        engine.step(&mut [&mut streamed]).unwrap();
    }
    let mut whole = engine.start_session(&request, 0).unwrap();
    run_to_end(&engine, &mut whole);

    let (go, wait) = channel::<()>();
    let (delivered, received) = channel();
    let sink = |label: &'static str, gate: Option<std::sync::mpsc::Receiver<()>>| {
        let delivered = delivered.clone();
        PcmSink::new(
            move |pcm: Result<Vec<f32>, _>| {
                if let Some(gate) = gate {
                    gate.recv_timeout(Duration::from_secs(60))
                        .expect("decode_into returned");
                }
                let thread = std::thread::current().name().map(String::from);
                delivered.send((label, thread, pcm.unwrap())).unwrap();
            },
            || true,
        )
    };
    engine.decode_into(vec![
        (&streamed, 0, sink("chunk", Some(wait))),
        (&whole, 0, sink("whole", None)),
    ]);
    // Reached while the first delivery still waits: the decode did not run on this thread.
    go.send(()).unwrap();
    let first = received.recv_timeout(Duration::from_secs(60)).unwrap();
    let second = received.recv_timeout(Duration::from_secs(60)).unwrap();
    assert_eq!(
        (first.0, second.0),
        ("chunk", "whole"),
        "in the order asked"
    );
    let this = std::thread::current().name().map(String::from);
    for (_, thread, _) in [&first, &second] {
        assert_eq!(thread.as_deref(), Some("xtts-vocoder"));
        assert_ne!(*thread, this);
    }
    let want = engine.decode(&whole, 0).unwrap();
    assert_eq!(second.2, want, "the same samples as a waited decode");
    assert!(!want.is_empty());
}

#[test]
fn code_limit_ends_with_max_frames() {
    let engine = engine(1);
    let mut request = prepare(
        &engine,
        input("limited.", XTTS_STUDIO_VOICES[1], None, Some(0.0)),
    );
    assert_eq!(run_alone(&engine, &request).len(), 40);
    request.max_frames = 2;
    let mut session = engine.start_session(&request, 0).unwrap();
    run_to_end(&engine, &mut session);
    assert_eq!(session.codes().len(), 2);
    assert_eq!(session.stop_reason(), Some(StopReason::MaxFrames));
}

#[test]
fn request_errors_name_their_field() {
    let engine = engine(1);
    let preparer = engine.preparer();
    let cap = engine.card().max_frames;
    let voice = XTTS_STUDIO_VOICES[0];
    let error = |input| prepare_speech(&*preparer, cap, input).unwrap_err();
    let language = error(input("hello.", voice, Some("klingon"), None));
    assert_eq!(language.param(), "language");
    assert!(language.to_string().contains("zh-cn"), "{language}");
    for ok in ["en", "EN", "en-GB", "pt"] {
        prepare_speech(&*preparer, cap, input("hello.", voice, Some(ok), None)).unwrap();
    }
    // Chinese is one of the model's languages, but its romanization is not ported.
    let chinese = error(input("hello.", voice, Some("zh-cn"), None));
    assert_eq!(chinese.param(), "language");
    assert!(chinese.to_string().contains("pypinyin"), "{chinese}");
    // Spanish numbers are not read out yet: refused, naming the text.
    let numbers = error(input("tengo 12 gatos.", voice, Some("es"), None));
    assert_eq!(numbers.param(), "input");
    assert!(numbers.to_string().contains("spell"), "{numbers}");
    // English ones are.
    prepare_speech(&*preparer, cap, input("i have 12 cats.", voice, None, None)).unwrap();
    assert_eq!(
        error(input("hello.", "nobody", None, None)).param(),
        "voice"
    );
    // One segment of more text tokens than the GPT takes (its sentences split at 300
    // characters would each fit).
    let long = "hello world ".repeat(200);
    let unsplit = SpeechInput {
        segment_chars: 10_000,
        ..input(&long, voice, None, None)
    };
    let too_long = error(unsplit);
    assert_eq!(too_long.param(), "input");
    assert!(too_long.to_string().contains("segment_chars"), "{too_long}");
    prepare_speech(&*preparer, cap, input(&long, voice, None, None)).unwrap();
}

/// A folder as coqui's trainer writes it (every fine-tuned XTTS-v2 folder people share):
/// `config.json` from Python's json, with `Infinity` for the unbounded training lengths and
/// `gpt_number_text_tokens: null` (the reference counts vocab.json's tokens), and a language
/// that vocab.json has no tag for (refused per request, as the reference does, not at load).
/// It speaks as the folder it was made from.
#[test]
fn a_folder_as_coqui_writes_it_loads_and_speaks_the_same() {
    let made = model();
    let tmp = tempfile::tempdir().unwrap();
    common::copy_dir(&made, tmp.path());
    let read = |name: &str| std::fs::read_to_string(made.join(name)).unwrap();
    let mut config: Value = serde_json::from_str(&read("config.json")).unwrap();
    config["model_args"]["gpt_number_text_tokens"] = Value::Null;
    for key in ["max_audio_len", "max_text_len"] {
        config[key] = json!("INFINITY");
    }
    let config = serde_json::to_string_pretty(&config)
        .unwrap()
        .replace("\"INFINITY\"", "Infinity");
    assert!(config.contains("\"max_text_len\": Infinity"), "{config}");
    std::fs::write(tmp.path().join("config.json"), config).unwrap();
    let vocab = read("vocab.json").replace("\"[ko]\"", "\"[kx]\"");
    std::fs::write(tmp.path().join("vocab.json"), vocab).unwrap();

    let coqui = load_engine(tmp.path(), 1);
    let voice = XTTS_STUDIO_VOICES[0];
    let korean = input("hello.", voice, Some("ko"), Some(0.0));
    let refused = prepare_speech(&*coqui.preparer(), coqui.card().max_frames, korean).unwrap_err();
    assert_eq!(refused.param(), "language");
    assert!(refused.to_string().contains("[ko]"), "{refused}");
    let codes = |engine: &XttsEngine<TchTensor>| {
        run_alone(
            engine,
            &prepare(engine, input("hello there.", voice, None, Some(0.0))),
        )
    };
    assert_eq!(codes(&coqui), codes(&engine(1)));
}

fn server(settings: &[(&str, &str)]) -> Server {
    let server = Server::spawn(&model(), &[], settings);
    server.wait_ready();
    server
}

fn speech(voice: Value, extra: Value) -> Value {
    let mut body = json!({"model": "tts-1", "input": "Hello from the tests.", "voice": voice,
        "response_format": "pcm", "seed": 3, "temperature": 0});
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
    let card = &models["data"][0];
    // Served without a model_id: under XTTS-v2's published name, not another family's.
    assert_eq!(card["id"], "coqui/XTTS-v2");
    assert_eq!(card["family"], "xtts-v2");
    assert_eq!(card["capabilities"]["cloning"], true);
    assert_eq!(card["capabilities"]["language_input"], true);
    assert!(card["capabilities"]["languages"]
        .as_array()
        .unwrap()
        .contains(&json!("zh-cn")));

    let voices = server.get("/v1/audio/voices").json();
    let names: Vec<&str> = voices["data"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|v| v["id"].as_str())
        .collect();
    for studio in XTTS_STUDIO_VOICES {
        assert!(names.contains(&studio), "{names:?}");
    }

    // An OpenAI voice name selects its studio speaker: the same greedy audio.
    let by_name = server.speech(speech(json!(XTTS_STUDIO_VOICES[0]), json!({})));
    by_name.assert_ok();
    let by_alias = server.speech(speech(json!("alloy"), json!({})));
    let (a, b) = (pcm_samples(&by_name), pcm_samples(&by_alias));
    assert!(!a.is_empty() && a.len() % 256 == 0, "{} samples", a.len());
    assert_eq!(a, b);
    // The other speaker, and the language, change the audio.
    let other = server.speech(speech(json!(XTTS_STUDIO_VOICES[1]), json!({})));
    assert_ne!(pcm_samples(&other), a);
    let french = server.speech(speech(json!("alloy"), json!({"language": "fr"})));
    french.assert_ok();
    assert_ne!(pcm_samples(&french), a);

    // Streamed as Server-Sent Events.
    let sse = server.speech(speech(json!("alloy"), json!({"stream_format": "sse"})));
    sse.assert_ok();
    let text = String::from_utf8(sse.body.clone()).unwrap();
    assert!(
        text.contains("speech.audio.delta") && text.contains("speech.audio.done"),
        "{text}"
    );
    // Streamed PCM: the same samples as the whole file.
    let streamed = server.speech(speech(json!("alloy"), json!({"stream_format": "audio"})));
    assert_eq!(pcm_samples(&streamed).len(), a.len());
    let worst = common::max_lsb_diff(&pcm_samples(&streamed), &a);
    assert!(worst <= 2, "streamed PCM differs by {worst} steps");

    // Errors, each naming its field.
    let (_, param, _) = server
        .speech(speech(json!("alloy"), json!({"language": "klingon"})))
        .error(400);
    assert_eq!(param.as_deref(), Some("language"));
    let (message, param, _) = server
        .speech(speech(
            json!("alloy"),
            json!({"language": "es", "input": "Tengo 12 gatos."}),
        ))
        .error(400);
    assert_eq!(param.as_deref(), Some("input"), "{message}");
    let (_, param, _) = server.speech(speech(json!("nobody"), json!({}))).error(400);
    assert_eq!(param.as_deref(), Some("voice"));
}

fn upload(server: &Server, name: &str, clips: &[&[u8]]) -> common::Reply {
    common::upload_voice(server, &[("name", name)], clips)
}

/// `seconds` of a chirp starting at `hz`, at 24 kHz: a stand-in for speech.
fn chirp(hz: f64, seconds: f64) -> Vec<u8> {
    let rate = 24_000u32;
    let samples: Vec<i16> = (0..(seconds * f64::from(rate)) as u32)
        .map(|i| {
            let t = f64::from(i) / f64::from(rate);
            (0.4 * (std::f64::consts::TAU * (hz * t + 300.0 * t * t)).sin() * 32767.0) as i16
        })
        .collect();
    pcm16_wav(rate, &samples)
}

/// At the default settings (bf16), as a user gets it.
#[test]
fn cloned_voices_over_http() {
    cloned_voices_at(&[]);
}

#[test]
fn cloned_voices_over_http_in_f32() {
    cloned_voices_at(&[("VOXTRAL_DTYPE", "f32")]);
}

fn cloned_voices_at(settings: &[(&str, &str)]) {
    let voices = tempfile::tempdir().unwrap();
    let dir = voices.path().join("voices");
    let mut env = vec![("VOXTRAL_VOICES_DIR", dir.to_str().unwrap())];
    env.extend_from_slice(settings);
    let server = Server::spawn(&model(), &[], &env);
    server.wait_ready();
    let (low, high) = (chirp(120.0, 1.5), chirp(600.0, 1.0));
    let mut reply = upload(&server, "one", &[&low]);
    server.wait_for("the voice encoder", || {
        if reply.status != 503 {
            return true;
        }
        reply = upload(&server, "one", &[&low]);
        false
    });
    reply.assert_ok();
    let one = reply.json()["id"].as_str().unwrap().to_string();
    // Two clips, averaged as the reference does: another voice.
    let both = upload(&server, "both", &[&low, &high]);
    both.assert_ok();
    let both = both.json()["id"].as_str().unwrap().to_string();
    assert_ne!(one, both);
    // The same upload under the same name: the stored voice back.
    assert_eq!(upload(&server, "one", &[&low]).json()["id"], one.as_str());

    let speak = |voice: Value| {
        let reply = server.speech(speech(voice, json!({})));
        reply.assert_ok();
        pcm_samples(&reply)
    };
    let with_one = speak(json!({"id": one}));
    assert!(!with_one.is_empty());
    assert_eq!(speak(json!({"id": one})), with_one);
    assert_ne!(speak(json!({"id": both})), with_one);
    assert_ne!(speak(json!("alloy")), with_one);

    // A voice given a language speaks it when a request names none (the audio of the voice
    // asked for in French); the list shows it, and a request's own language still wins.
    let french = common::upload_voice(&server, &[("name", "one"), ("language", "FR")], &[&low]);
    french.assert_ok();
    assert_eq!(french.json()["language"], "fr");
    let french = french.json()["id"].as_str().unwrap().to_string();
    assert_ne!(french, one);
    let in_french = speak(json!({"id": french}));
    assert_ne!(in_french, with_one);
    let asked = server.speech(speech(json!({"id": one}), json!({"language": "fr"})));
    assert_eq!(pcm_samples(&asked), in_french);
    let asked = server.speech(speech(json!({"id": french}), json!({"language": "en"})));
    assert_eq!(pcm_samples(&asked), with_one);
    let listed = server.get("/v1/audio/voices").json();
    let listed = listed["data"].as_array().unwrap();
    let entry = listed.iter().find(|v| v["id"] == french.as_str()).unwrap();
    assert_eq!(entry["language"], "fr");
    let (_, param, _) =
        common::upload_voice(&server, &[("name", "x"), ("language", "klingon")], &[&low])
            .error(400);
    assert_eq!(param.as_deref(), Some("language"));

    // A clip too short for a conditioning chunk is refused, naming the field.
    let (_, param, _) = upload(&server, "short", &[&chirp(200.0, 0.2)]).error(400);
    assert_eq!(param.as_deref(), Some("audio_sample"));
}

/// At the default dtype (bf16) and in f32.
#[test]
fn synth_clones_from_reference_audio() {
    for dtype in ["bf16", "f32"] {
        synth_clones_in(dtype);
    }
}

fn synth_clones_in(dtype: &str) {
    let tmp = tempfile::tempdir().unwrap();
    let (low, high) = (tmp.path().join("low.wav"), tmp.path().join("high.wav"));
    std::fs::write(&low, chirp(120.0, 1.5)).unwrap();
    std::fs::write(&high, chirp(600.0, 1.0)).unwrap();
    let synth = |out: &std::path::Path, voice: &[&std::ffi::OsStr]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_voxtral-tts"))
            .args(["synth", "--model", model().to_str().unwrap()])
            .args(["--text", "Hello.", "--temperature", "0", "--dtype", dtype])
            .args(["--device", "cpu", "--output"])
            .arg(out)
            .args(voice)
            .output()
            .unwrap()
    };
    let reference = |paths: &[&std::path::Path]| -> Vec<i16> {
        let out = tmp.path().join("out.wav");
        let mut args: Vec<&std::ffi::OsStr> = Vec::new();
        for path in paths {
            args.push("--reference-audio".as_ref());
            args.push(path.as_os_str());
        }
        let run = synth(&out, &args);
        assert!(
            run.status.success(),
            "{}",
            String::from_utf8_lossy(&run.stderr)
        );
        let mut reader = hound::WavReader::open(&out).unwrap();
        assert_eq!(reader.spec().sample_rate, 24_000);
        reader.samples::<i16>().map(Result::unwrap).collect()
    };
    let one = reference(&[&low]);
    assert!(!one.is_empty());
    assert_eq!(reference(&[&low]), one);
    assert_ne!(reference(&[&low, &high]), one);
    let both = synth(
        &tmp.path().join("x.wav"),
        &[
            "--voice".as_ref(),
            "alloy".as_ref(),
            "--reference-audio".as_ref(),
            low.as_os_str(),
        ],
    );
    assert!(!both.status.success());
}

/// A long text's sentences through the worker: with free slots they generate in the same
/// steps (the frames of a later sentence are counted at once when its turn comes, where one
/// slot counts them one per step), and the audio is the same as one after another.
#[test]
fn a_texts_sentences_generate_together_in_free_slots() {
    let run = |slots: usize| -> (Vec<usize>, Vec<f32>) {
        let settings = WorkerSettings {
            model_id: "xtts".into(),
            model_dir: model(),
            device: DeviceChoice::Cpu,
            dtype: DType::F32,
            threads: 0,
            panic_on_input: None,
            streaming: StreamSettings::default(),
            engine: EngineOptions {
                max_sessions: slots,
                kv_cache_bytes: 64 << 20,
                ..EngineOptions::default()
            },
        };
        let (queue, loaded, worker) = start_loaded_worker(settings, 4);
        let mut request = input(
            "hello there. the world is wide. is it not? hello again.",
            XTTS_STUDIO_VOICES[0],
            None,
            Some(0.0),
        );
        request.segment_chars = 20;
        let prepared = prepare_speech(&*loaded.preparer, loaded.card.max_frames, request).unwrap();
        assert!(
            prepared.segments.len() >= 3,
            "{} segments",
            prepared.segments.len()
        );
        let options = JobOptions {
            stream: false,
            progress: true,
            keep_codes: false,
        };
        let mut events = queue.submit(prepared, options).unwrap();
        drop(queue);
        let (mut progress, mut pcm) = (Vec::new(), Vec::new());
        loop {
            match events.blocking_recv().expect("the job ends with Done") {
                JobEvent::Progress { frames } => progress.push(frames),
                JobEvent::Audio(chunk) => pcm.extend(chunk),
                JobEvent::Done(_) => break,
                JobEvent::Failed(e) => panic!("{e}"),
                JobEvent::Started { .. } => {}
            }
        }
        worker.join().unwrap();
        (progress, pcm)
    };
    let (serial_progress, serial) = run(1);
    let (together_progress, together) = run(4);
    let jumps = |p: &[usize]| p.windows(2).filter(|w| w[1] > w[0] + 1).count();
    assert_eq!(jumps(&serial_progress), 0, "{serial_progress:?}");
    assert!(jumps(&together_progress) > 0, "{together_progress:?}");
    assert_eq!(serial_progress.last(), together_progress.last());
    assert_eq!(together, serial);
}
