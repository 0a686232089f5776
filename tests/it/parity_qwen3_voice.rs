//! The Qwen3-TTS Base voice encoder end to end against the official goldens
//! (tests/goldens/qwen3_tts/<preset>/, tools/goldens/qwen3_tts/make_goldens.py): the goldens'
//! reference clip written as a WAV file, decoded by the audio-input layer as an upload is, and
//! encoded by `models::load_voice_encoder` gives the official x-vector, reference codes and
//! tokenized transcript; the serving path's voice-encoding thread computes them. f32, libtorch on the CPU.

use crate::common;

use common::pcm16_wav;
use safetensors::SafeTensors;
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::sync::oneshot;
use voxtral_tts::audio::input::{decode_to_rate, DecodeLimits};
use voxtral_tts::device::DeviceChoice;
use voxtral_tts::engine::voice::{VoiceEncodeError, VoiceEncoder};
use voxtral_tts::models::qwen3_tts::engine::{REF_CODES, REF_TEXT_IDS, X_VECTOR};
use voxtral_tts::models::qwen3_tts::testkit::cached_test_model as cached_qwen3_test_model;
use voxtral_tts::models::qwen3_tts::testkit::Qwen3Preset;
use voxtral_tts::models::registry::load_voice_encoder;
use voxtral_tts::scheduler::voice_encoding::{
    start_voice_encoding, VoiceEncoderState, VoiceEncodingJob, VoiceEncodingSettings,
    VoiceSubmitError, VOICE_QUEUE_CAPACITY,
};
use voxtral_tts::tensor::tch_backend::TchTensor;
use voxtral_tts::tensor::DType;

/// The parity test's bound on the x-vector computed from the clip.
const X_VECTOR_TOLERANCE: f32 = 1e-4;

struct Goldens {
    json: Value,
    tensors: Vec<u8>,
}

impl Goldens {
    fn load(preset: Qwen3Preset) -> Goldens {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/goldens/qwen3_tts")
            .join(preset.name());
        let text = std::fs::read_to_string(dir.join("goldens.json")).unwrap();
        Goldens {
            json: serde_json::from_str(&text).unwrap(),
            tensors: std::fs::read(dir.join("tensors.safetensors")).unwrap(),
        }
    }

    fn f32s(&self, name: &str) -> Vec<f32> {
        let st = SafeTensors::deserialize(&self.tensors).unwrap();
        let view = st.tensor(name).unwrap();
        assert_eq!(view.dtype(), safetensors::Dtype::F32, "{name}");
        view.data()
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
            .collect()
    }

    /// The reference clip as the 16-bit PCM it was recorded as.
    fn clip_pcm16(&self) -> Vec<i16> {
        let spec = &self.json["reference_audio"];
        assert_eq!(spec["scale"], "int16 / 32768");
        let st = SafeTensors::deserialize(&self.tensors).unwrap();
        let view = st.tensor(spec["tensor"].as_str().unwrap()).unwrap();
        assert_eq!(view.dtype(), safetensors::Dtype::I16);
        view.data()
            .chunks_exact(2)
            .map(|b| i16::from_le_bytes([b[0], b[1]]))
            .collect()
    }

    /// The first in-context case: its transcript, tokenized transcript and reference codes.
    fn in_context_case(&self) -> (String, Vec<i64>, Vec<i64>) {
        let case = self.json["cases"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| !c["ref_codes"].is_null())
            .unwrap();
        let ints = |v: &Value| -> Vec<i64> {
            v.as_array()
                .unwrap()
                .iter()
                .flat_map(|x| match x.as_array() {
                    Some(row) => row.iter().map(|c| c.as_i64().unwrap()).collect(),
                    None => vec![x.as_i64().unwrap()],
                })
                .collect()
        };
        (
            case["request"]["ref_text"].as_str().unwrap().to_string(),
            ints(&case["ref_ids"]),
            ints(&case["ref_codes"]),
        )
    }

    /// The cached checkpoint of `preset`, checked to be the one the goldens came from.
    fn model_dir(&self, preset: Qwen3Preset) -> PathBuf {
        let dir = cached_qwen3_test_model(preset, self.json["seed"].as_u64().unwrap()).unwrap();
        for file in ["model.safetensors", "speech_tokenizer/model.safetensors"] {
            let bytes = std::fs::read(dir.join(file)).unwrap();
            assert_eq!(
                format!("{:x}", Sha256::digest(&bytes)),
                self.json["checkpoint_sha256"][file],
                "{}: {file} is not the goldens' checkpoint",
                preset.name()
            );
        }
        dir
    }
}

fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

fn encoder(dir: &Path) -> Box<dyn VoiceEncoder> {
    load_voice_encoder::<TchTensor>(dir, &tch::Device::Cpu, DType::F32)
        .unwrap()
        .expect("a Base folder clones")
}

fn check_preset(preset: Qwen3Preset) {
    let goldens = Goldens::load(preset);
    let dir = goldens.model_dir(preset);
    let encoder = encoder(&dir);
    let rate = encoder.sample_rate();
    assert_eq!(rate, goldens.json["reference_audio"]["sample_rate"]);
    let limits = DecodeLimits::new(1 << 20, Duration::from_secs(30));
    let clip = decode_to_rate(&pcm16_wav(rate, &goldens.clip_pcm16()), rate, &limits)
        .unwrap()
        .samples;
    let (transcript, ref_ids, ref_codes) = goldens.in_context_case();

    let voice = encoder
        .encode(std::slice::from_ref(&clip), Some(&transcript))
        .unwrap();
    let (shape, x_vector) = voice.f32(X_VECTOR).unwrap();
    let hidden = x_vector.len();
    assert_eq!(shape, [hidden]);
    let diff = max_abs_diff(x_vector, &goldens.f32s("icl.x_vector"));
    eprintln!("{}: x-vector max abs diff {diff:e}", preset.name());
    assert!(diff <= X_VECTOR_TOLERANCE, "{}: {diff}", preset.name());
    let (code_shape, codes) = voice.i64(REF_CODES).unwrap();
    assert_eq!(codes, ref_codes, "{}: reference codes", preset.name());
    assert_eq!(code_shape, [ref_codes.len() / 16, 16]);
    assert_eq!(voice.i64(REF_TEXT_IDS).unwrap().1, ref_ids);
    eprintln!(
        "{}: {} reference frames and {} transcript ids equal the goldens'",
        preset.name(),
        code_shape[0],
        ref_ids.len()
    );

    // Without a transcript: the x-vector alone, the same one.
    let plain = encoder.encode(&[clip], None).unwrap();
    assert_eq!(plain.0.keys().collect::<Vec<_>>(), [X_VECTOR]);
    assert_eq!(plain.f32(X_VECTOR).unwrap().1, x_vector);
}

#[test]
fn tiny_base_voices_match_the_official_goldens() {
    check_preset(Qwen3Preset::TinyBase);
}

#[test]
fn tiny_base_1b7_voices_match_the_official_goldens() {
    check_preset(Qwen3Preset::TinyBase1b7);
}

#[test]
fn bad_clips_and_transcripts_are_the_uploads_fault() {
    let dir = cached_qwen3_test_model(Qwen3Preset::TinyBase, 0).unwrap();
    let encoder = encoder(&dir);
    let second = vec![0.1f32; 24_000];
    let field = |e: VoiceEncodeError| match e {
        VoiceEncodeError::Input { field, message } => (field, message),
        other => panic!("{other:?}"),
    };
    let (f, message) = field(
        encoder
            .encode(&[second.clone(), second.clone()], None)
            .unwrap_err(),
    );
    assert_eq!(f, "audio_sample");
    assert!(message.contains("one clip; 2 were sent"), "{message}");
    let (f, message) = field(encoder.encode(&[vec![0.1; 6_000]], None).unwrap_err());
    assert_eq!(f, "audio_sample");
    assert!(message.contains("0.25 s"), "{message}");
    let (f, _) = field(encoder.encode(&[], None).unwrap_err());
    assert_eq!(f, "audio_sample");
    let long = "word ".repeat(2000);
    let (f, message) = field(encoder.encode(&[second], Some(&long)).unwrap_err());
    assert_eq!(f, "transcript");
    assert!(message.contains("tokens"), "{message}");
}

#[test]
fn variants_that_do_not_clone_have_no_encoder() {
    let dir = cached_qwen3_test_model(Qwen3Preset::TinyCustomVoice, 0).unwrap();
    let none = load_voice_encoder::<TchTensor>(&dir, &tch::Device::Cpu, DType::F32).unwrap();
    assert!(none.is_none());
}

/// The serving path's thread: it loads the encoder itself, computes the voices sent to it in
/// order, and a full queue is refused at once rather than waited on.
#[test]
fn the_voice_encoding_thread_computes_voices_and_refuses_beyond_its_queue() {
    let (queue, mut state, thread) = start_voice_encoding(VoiceEncodingSettings {
        model_id: "base".into(),
        model_dir: cached_qwen3_test_model(Qwen3Preset::TinyBase, 0).unwrap(),
        device: DeviceChoice::Cpu,
        dtype: DType::F32,
        threads: 1,
    })
    .unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let ready = runtime
        .block_on(state.wait_for(|s| !matches!(s, VoiceEncoderState::Loading)))
        .unwrap()
        .clone();
    assert_eq!(
        ready,
        VoiceEncoderState::Ready {
            sample_rate: 24_000
        }
    );
    let clip = vec![0.1f32; 24_000];
    let mut replies = Vec::new();
    let mut refused = 0;
    for _ in 0..VOICE_QUEUE_CAPACITY + 6 {
        let (reply, done) = oneshot::channel();
        let job = VoiceEncodingJob {
            clips: vec![clip.clone()],
            transcript: Some("Hello.".into()),
            reply,
        };
        match queue.try_submit(job) {
            Ok(()) => replies.push(done),
            Err(VoiceSubmitError::Full) => refused += 1,
            Err(e) => panic!("{e}"),
        }
    }
    assert!(refused > 0, "the queue holds {VOICE_QUEUE_CAPACITY}");
    let first = runtime.block_on(replies.remove(0)).unwrap().unwrap();
    assert!(first.contains(REF_CODES) && first.contains(REF_TEXT_IDS));
    for done in replies {
        assert_eq!(runtime.block_on(done).unwrap().unwrap(), first);
    }
    drop(queue);
    thread.join().unwrap();
}
