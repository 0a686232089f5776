//! XTTS-v2's GPT side against coqui-tts 0.28.0 (tests/goldens/xtts/, made by
//! tools/goldens/xtts/make_goldens.py on `make-test-model --preset xtts-tiny`), f32 on
//! libtorch (CPU): `load_audio` on a 24 kHz stereo clip (mono mix, torchaudio's resampling,
//! clipping), the cloning mel and the conditioning encoder on one chunk, the conditioning
//! latents at the config's 30 s / 4 s chunks and at the 6 s / 6 s defaults, and from two
//! files peak-normalised (`get_conditioning_latents`), and
//! the codes and GPT latents of a greedy case (stopped by the stop code), a greedy case cut by
//! `max_new_tokens`, and a sampled case replayed on the reference's recorded uniforms.

use safetensors::SafeTensors;
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use voxtral_tts::models::qwen3_tts::sampling::{Sampling, Uniforms};
use voxtral_tts::models::xtts::cloning_mel::MELS;
use voxtral_tts::models::xtts::conditioning::{CloningSettings, Conditioner};
use voxtral_tts::models::xtts::folder::XttsFolder;
use voxtral_tts::models::xtts::gpt::{GenerationParams, Gpt};
use voxtral_tts::models::xtts::gpt_config::GptConfig;
use voxtral_tts::models::xtts::reference_audio::load_audio;
use voxtral_tts::models::xtts::testkit::make_test_model as make_xtts_test_model;
use voxtral_tts::models::xtts::testkit::write_gpt_checkpoint as write_xtts_gpt_checkpoint;
use voxtral_tts::models::xtts::testkit::XttsPreset;
use voxtral_tts::models::xtts::tokenizer::XttsTokenizer;
use voxtral_tts::nn::layer_probe::{self, LayerOutput};
use voxtral_tts::nn::layers::Loader;
use voxtral_tts::tensor::quantized::QuantFormat;
use voxtral_tts::tensor::tch_backend::TchTensor;
use voxtral_tts::tensor::{DType, Layout, TensorData};

/// Max abs difference of mels, encoder outputs, conditioning latents and GPT latents.
const TOLERANCE: f32 = 1e-4;

fn goldens_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/goldens/xtts")
}

struct Goldens {
    json: Value,
    tensors: Vec<u8>,
}

impl Goldens {
    fn load() -> Goldens {
        let dir = goldens_dir();
        let json =
            serde_json::from_str(&std::fs::read_to_string(dir.join("goldens.json")).unwrap())
                .unwrap();
        let tensors = std::fs::read(dir.join("goldens.safetensors")).unwrap();
        Goldens { json, tensors }
    }

    /// An f32 tensor of the goldens: its shape and values.
    fn tensor(&self, name: &str) -> (Vec<usize>, Vec<f32>) {
        let st = SafeTensors::deserialize(&self.tensors).unwrap();
        let view = st.tensor(name).unwrap_or_else(|e| panic!("{name}: {e}"));
        let values = view
            .data()
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        (view.shape().to_vec(), values)
    }

    fn ids(&self, value: &Value) -> Vec<u32> {
        serde_json::from_value(value.clone()).unwrap()
    }
}

/// The tiny folder, made again: its GPT half is checked against the file the goldens came
/// from (the folder adds a tiny vocoder, which coqui-tts could not load, and studio voices).
fn model_dir(goldens: &Goldens, tmp: &Path) -> PathBuf {
    let dir = tmp.join("xtts-tiny");
    let seed = goldens.json["seed"].as_u64().unwrap();
    make_xtts_test_model(&dir, XttsPreset::Tiny, seed).unwrap();
    let gpt_half = tmp.join("gpt-half.safetensors");
    write_xtts_gpt_checkpoint(&gpt_half, seed).unwrap();
    let bytes = std::fs::read(&gpt_half).unwrap();
    assert_eq!(
        format!("{:x}", Sha256::digest(&bytes)),
        goldens.json["checkpoint_sha256"],
        "not the checkpoint the goldens were made from"
    );
    let served = std::fs::read(dir.join("model.safetensors")).unwrap();
    let served = SafeTensors::deserialize(&served).unwrap();
    let half = SafeTensors::deserialize(&bytes).unwrap();
    for (name, tensor) in half.tensors() {
        let in_folder = served.tensor(&name).unwrap();
        assert_eq!(in_folder.shape(), tensor.shape(), "{name}");
        assert!(
            in_folder.data() == tensor.data(),
            "{name} differs in the folder"
        );
    }
    dir
}

struct Model {
    conditioner: Conditioner<TchTensor>,
    gpt: Gpt<TchTensor>,
    /// The memory-mapped weights the tensors point into.
    _folder: XttsFolder,
}

/// The folder opened as the server opens it (no pickle), its GPT side loaded.
fn load_model(dir: &Path) -> Model {
    load_model_quantized(dir, None)
}

/// [`load_model`], the GPT's blocks in `quantize`.
fn load_model_quantized(dir: &Path, quantize: Option<QuantFormat>) -> Model {
    let folder = XttsFolder::open(dir).unwrap();
    let tokenizer = XttsTokenizer::from_file(&folder.vocab).unwrap();
    let config = GptConfig::from_json(&folder.config, "config.json", &tokenizer).unwrap();
    let device = tch::Device::Cpu;
    let l = Loader::<TchTensor>::new(&folder.weights, &device, DType::F32);
    let (dim, heads) = (config.args.gpt_n_model_channels, config.args.gpt_n_heads);
    Model {
        conditioner: Conditioner::load(&l, dim, heads).unwrap(),
        gpt: Gpt::load(&l, config, quantize).unwrap(),
        _folder: folder,
    }
}

/// A PCM16 WAV of the goldens as the reference reads it (int16 / 32768), through
/// `load_audio`: mono at 22.05 kHz.
fn loaded_clip(name: &str) -> Vec<f32> {
    let mut reader = hound::WavReader::open(goldens_dir().join(name)).unwrap();
    let spec = reader.spec();
    let samples: Vec<f32> = reader
        .samples::<i16>()
        .map(|s| f32::from(s.unwrap()) / 32768.0)
        .collect();
    load_audio(&samples, spec.channels as usize, spec.sample_rate)
}

fn reference_clip() -> Vec<f32> {
    loaded_clip("ref_22k.wav")
}

/// `[1, len, channels]` values as `[1, channels, len]`.
fn channels_first(x: &TchTensor) -> Vec<f32> {
    x.transpose(1, 2).to_vec_f32()
}

fn max_abs_diff(what: &str, got: &[f32], want: &[f32]) -> f32 {
    assert_eq!(got.len(), want.len(), "{what}: length");
    let diff = got
        .iter()
        .zip(want)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, f32::max);
    eprintln!("{what}: max abs diff {diff:e}");
    assert!(diff <= TOLERANCE, "{what}: max abs diff {diff}");
    diff
}

#[test]
fn cloning_mel_encoder_and_conditioning_latents() {
    let goldens = Goldens::load();
    let tmp = tempfile::tempdir().unwrap();
    let model = load_model(&model_dir(&goldens, tmp.path()));
    let clip = reference_clip();
    assert_eq!(clip.len() as u64, goldens.json["clip"]["samples"]);

    // The 30/4 run's last chunk: the samples after 4 s of the 4.6 s clip.
    let last_chunk = &clip[4 * 22_050..];
    let mel = model.conditioner.mel(last_chunk);
    let (shape, want) = goldens.tensor("clone_30_4.last_chunk.mel");
    assert_eq!(shape, [1, MELS, mel.shape()[1]]);
    max_abs_diff("cloning mel", &channels_first(&mel), &want);
    let encoded = model.conditioner.encode(&mel);
    let (_, want) = goldens.tensor("clone_30_4.last_chunk.cond_encoder_out");
    max_abs_diff("conditioning encoder", &channels_first(&encoded), &want);

    for (name, length, chunk) in [("clone_30_4", 30, 4), ("clone_6_6", 6, 6)] {
        let latents = model
            .conditioner
            .gpt_cond_latents(&clip, length, chunk)
            .unwrap();
        let (shape, want) = goldens.tensor(&format!("{name}.gpt_cond_latent"));
        assert_eq!(latents.shape(), shape);
        max_abs_diff(name, &latents.to_vec_f32(), &want);
    }
    let (_, a) = goldens.tensor("clone_30_4.gpt_cond_latent");
    let (_, b) = goldens.tensor("clone_6_6.gpt_cond_latent");
    assert!(
        a.iter().zip(&b).any(|(x, y)| (x - y).abs() > 1e-3),
        "30/4 and 6/6 differ"
    );

    let short = model.conditioner.gpt_cond_latents(&clip[..7000], 30, 4);
    assert!(short.is_err(), "under 0.33 s is refused");
}

#[test]
fn load_audio_and_cloning_from_two_files() {
    let goldens = Goldens::load();
    let tmp = tempfile::tempdir().unwrap();
    let model = load_model(&model_dir(&goldens, tmp.path()));
    let second = loaded_clip("ref_24k_stereo.wav");
    let (_, want) = goldens.tensor("load_audio.ref_24k_stereo");
    max_abs_diff("load_audio 24 kHz stereo", &second, &want);

    let settings = CloningSettings {
        max_ref_len: 30,
        gpt_cond_len: 30,
        gpt_cond_chunk_len: 4,
        sound_norm_refs: true,
    };
    let latents = model
        .conditioner
        .voice_latents(&[reference_clip(), second], &settings)
        .unwrap();
    let (_, want) = goldens.tensor("clone_two_files_norm.gpt_cond_latent");
    max_abs_diff("two files, normalised", &latents.to_vec_f32(), &want);
}

/// Runs one generation case from the goldens' 30/4 conditioning latents.
fn check_case(goldens: &Goldens, model: &Model, case: &str) {
    let record = &goldens.json["cases"][case];
    let settings = &goldens.json["settings"];
    let (shape, cond) = goldens.tensor("clone_30_4.gpt_cond_latent");
    let cond = TchTensor::from_f32(&tch::Device::Cpu, &cond, &shape, DType::F32);
    let sampled = record.get("uniforms").is_some();
    let sampling = Sampling {
        do_sample: sampled,
        temperature: settings["temperature"].as_f64().unwrap() as f32,
        top_k: settings["top_k"].as_u64().unwrap() as usize,
        top_p: settings["top_p"].as_f64().unwrap() as f32,
    };
    let params = GenerationParams {
        sampling,
        repetition_penalty: settings["repetition_penalty"].as_f64().unwrap() as f32,
        max_codes: record["max_new_tokens"].as_u64().map(|n| n as usize),
    };
    let mut uniforms = Uniforms::recorded(match record.get("uniforms") {
        Some(u) => serde_json::from_value(u.clone()).unwrap(),
        None => Vec::new(),
    });
    let text = goldens.ids(&goldens.json["text_ids"]);
    let generated = model
        .gpt
        .generate(&cond, &text, &params, &mut uniforms)
        .unwrap();
    let want = goldens.ids(&record["codes"]);
    assert_eq!(generated.codes, want, "{case}: codes");
    eprintln!("{case}: {} codes identical", want.len());
    assert_eq!(uniforms.recorded_left(), Some(0), "{case}: every draw used");
    let (shape, latents) = goldens.tensor(&format!("{case}.gpt_latents"));
    assert_eq!(generated.latents.shape(), shape);
    max_abs_diff(
        &format!("{case} gpt latents"),
        &generated.latents.to_vec_f32(),
        &latents,
    );
}

#[test]
fn greedy_codes_and_latents() {
    let goldens = Goldens::load();
    let tmp = tempfile::tempdir().unwrap();
    let model = load_model(&model_dir(&goldens, tmp.path()));
    check_case(&goldens, &model, "greedy");
    check_case(&goldens, &model, "max_new_tokens");
}

#[test]
fn sampled_codes_replay_the_recorded_uniforms() {
    let goldens = Goldens::load();
    let tmp = tempfile::tempdir().unwrap();
    let model = load_model(&model_dir(&goldens, tmp.path()));
    check_case(&goldens, &model, "sampled");
}

/// The GPT fed the goldens' greedy codes (teacher forcing), from the goldens' 30/4
/// conditioning latents: the codes it picks on the way and every block's output.
fn teacher_forced_codes(goldens: &Goldens, model: &Model) -> (Vec<u32>, Vec<LayerOutput>) {
    let (shape, cond) = goldens.tensor("clone_30_4.gpt_cond_latent");
    let cond = TchTensor::from_f32(&tch::Device::Cpu, &cond, &shape, DType::F32);
    let params = GenerationParams {
        sampling: Sampling::GREEDY,
        repetition_penalty: goldens.json["settings"]["repetition_penalty"]
            .as_f64()
            .unwrap() as f32,
        max_codes: None,
    };
    let text = goldens.ids(&goldens.json["text_ids"]);
    let reference = goldens.ids(&goldens.json["cases"]["greedy"]["codes"]);
    layer_probe::recording(|| {
        let mut sequence = model
            .gpt
            .start(&cond, &text, &params, Uniforms::recorded(Vec::new()))
            .unwrap();
        reference
            .iter()
            .map_while(|&code| model.gpt.step_teacher_forced(&mut sequence, code).unwrap())
            .collect()
    })
}

/// The GPT's blocks in q8 and q4 against the f32 run, teacher-forced on the goldens' greedy
/// codes: q8 keeps at least 95% of the codes; q4 is pinned at what it measured, with a
/// margin; every block's output stays within the pinned relative error (docs/quantization.md
/// has the figures).
#[test]
fn quantized_gpt_stays_near_f32_teacher_forced() {
    let _guard = tch::no_grad_guard();
    let goldens = Goldens::load();
    let tmp = tempfile::tempdir().unwrap();
    let dir = model_dir(&goldens, tmp.path());
    let reference = goldens.ids(&goldens.json["cases"]["greedy"]["codes"]);
    let (codes, reference_layers) = teacher_forced_codes(&goldens, &load_model(&dir));
    assert_eq!(codes, reference, "f32 picks the goldens' codes");
    for (format, min_agreement, max_drift) in [
        (QuantFormat::Q8, 0.95, XTTS_Q8_DRIFT),
        (QuantFormat::Q4, 0.8, XTTS_Q4_DRIFT),
    ] {
        let model = load_model_quantized(&dir, Some(format));
        let (codes, layers) = teacher_forced_codes(&goldens, &model);
        assert_eq!(codes.len(), reference.len());
        let same = codes.iter().zip(&reference).filter(|(a, b)| a == b).count();
        let agreement = same as f64 / reference.len() as f64;
        let drift = crate::quantization::layer_drift(&reference_layers, &layers);
        eprintln!(
            "XTTS-v2 GPT {format} against f32, teacher-forced: codes {same}/{} ({:.1}%); block outputs' relative error median {:.4}, max {:.4}",
            reference.len(),
            100.0 * agreement,
            drift.median,
            drift.max
        );
        assert!(agreement >= min_agreement, "{format}: codes {agreement:.3}");
        assert!(drift.max <= max_drift, "{format}: {drift:?}");
    }
}

/// The largest relative error of a block's output pinned per format (measured, with a
/// margin).
const XTTS_Q8_DRIFT: f64 = 0.02;
const XTTS_Q4_DRIFT: f64 = 0.16;
