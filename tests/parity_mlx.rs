//! The parity goldens of tests/parity.rs, run through the MLX backend (`--features mlx`): f32
//! exact codes and waveform within 1e-4; bf16 teacher-forced within the documented tolerance.
#![cfg(feature = "mlx")]

use serde_json::Value;
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use voxtral_tts::model::{Noise, StopReason, Synthesis, SynthesisRequest, Voxtral};
use voxtral_tts::tensor::mlx_backend::{MlxDevice, MlxTensor};
use voxtral_tts::tensor::DType;
use voxtral_tts::testmodel::{cached_test_model, Preset};

/// Same bounds as tests/parity.rs.
const WAVEFORM_TOLERANCE: f32 = 1e-4;
const BF16_MIN_SEMANTIC_AGREEMENT: f64 = 0.95;
const BF16_MIN_ACOUSTIC_WITHIN_ONE: f64 = 0.99;

/// Metal when this MLX has it (Apple Silicon), else the CPU.
fn device() -> MlxDevice {
    if MlxDevice::Gpu.is_available() {
        MlxDevice::Gpu
    } else {
        MlxDevice::Cpu
    }
}

struct Case {
    dir: PathBuf,
    golden: Value,
}

impl Case {
    fn load(name: &str) -> Case {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/goldens")
            .join(name);
        let file = if dir.join("case.json").exists() {
            "case.json"
        } else {
            "codec.json"
        };
        let golden =
            serde_json::from_str(&std::fs::read_to_string(dir.join(file)).unwrap()).unwrap();
        Case { dir, golden }
    }

    fn model_dir(&self) -> PathBuf {
        let spec: Value =
            serde_json::from_str(&std::fs::read_to_string(self.dir.join("model.json")).unwrap())
                .unwrap();
        let preset = match spec["preset"].as_str().unwrap() {
            "tiny" => Preset::Tiny,
            "tiny-odd" => Preset::TinyOdd,
            other => panic!("unknown preset {other}"),
        };
        let dir = cached_test_model(preset, spec["seed"].as_u64().unwrap()).unwrap();
        let bytes = std::fs::read(dir.join("consolidated.safetensors")).unwrap();
        assert_eq!(
            format!("{:x}", Sha256::digest(&bytes)),
            self.golden["checkpoint_sha256"].as_str().unwrap(),
            "make-test-model output changed: regenerate the goldens"
        );
        dir
    }

    fn model(&self, dtype: DType) -> Voxtral<MlxTensor> {
        Voxtral::load(&self.model_dir(), &device(), dtype).unwrap()
    }

    fn f32_file(&self, name: &str) -> Vec<f32> {
        std::fs::read(self.dir.join(name))
            .unwrap()
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect()
    }

    fn codes(&self) -> Vec<Vec<u32>> {
        serde_json::from_value(self.golden["codes"].clone()).unwrap()
    }

    fn noise(&self) -> Noise {
        match self.golden["noise"].as_str().unwrap() {
            "zeros" => Noise::Seeded {
                seed: 0,
                scale: 0.0,
            },
            "given" => Noise::Given(self.f32_file("noise.f32")),
            other => panic!("unknown noise mode {other}"),
        }
    }

    fn request(&self, max_frames: usize) -> SynthesisRequest {
        SynthesisRequest {
            text: self.golden["text"].as_str().unwrap().into(),
            voice: self.golden["voice"].as_str().unwrap().into(),
            max_frames,
            noise: self.noise(),
        }
    }

    fn run(&self, model: &Voxtral<MlxTensor>) -> Synthesis {
        let max_frames = self.golden["max_frames"].as_u64().unwrap() as usize;
        model
            .start(&self.request(max_frames))
            .unwrap()
            .finish()
            .unwrap()
    }
}

fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len(), "waveform lengths differ");
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

fn first_difference(a: &[Vec<u32>], b: &[Vec<u32>]) -> Option<usize> {
    a.iter()
        .zip(b)
        .position(|(x, y)| x != y)
        .or((a.len() != b.len()).then(|| a.len().min(b.len())))
}

fn assert_generation_matches(name: &str, min_frames: usize) {
    let case = Case::load(name);
    let s = case.run(&case.model(DType::F32));
    let g = &case.golden;
    let prompt: Vec<u32> = serde_json::from_value(g["prompt_ids"].clone()).unwrap();
    assert_eq!(s.prompt_ids, prompt, "{name}: prompt ids");
    let golden_codes = case.codes();
    assert!(golden_codes.len() >= min_frames, "{name}: short golden");
    assert_eq!(
        first_difference(&s.codes, &golden_codes),
        None,
        "{name}: first differing frame"
    );
    assert_eq!(
        s.stop == StopReason::EndAudio,
        g["ended"].as_bool().unwrap(),
        "{name}: stop reason {:?}",
        s.stop
    );
    let diff = max_abs_diff(&s.pcm, &case.f32_file("waveform.f32"));
    let frames = s.codes.len().max(1) as f64;
    eprintln!(
        "{name} (mlx {:?}): {} frames, waveform max abs diff {diff:.2e}; per frame: backbone {:.2} ms, flow head {:.2} ms",
        device(),
        s.codes.len(),
        s.times.backbone.as_secs_f64() * 1e3 / frames,
        s.times.flow_head.as_secs_f64() * 1e3 / frames,
    );
    assert!(
        diff <= WAVEFORM_TOLERANCE,
        "{name}: waveform max abs diff {diff}"
    );
}

#[test]
fn mlx_tiny_zero_noise_matches_reference_for_48_frames() {
    assert_generation_matches("tiny_zeros", 48);
}

#[test]
fn mlx_tiny_given_noise_matches_reference_for_40_frames() {
    assert_generation_matches("tiny_noise", 40);
}

#[test]
fn mlx_tiny_given_noise_stops_at_end_audio_like_reference() {
    assert!(Case::load("tiny_noise_end").golden["ended"]
        .as_bool()
        .unwrap());
    assert_generation_matches("tiny_noise_end", 1);
}

#[test]
fn mlx_gqa3_six_heads_small_codebook_stops_early_like_reference() {
    assert!(Case::load("odd_end_zeros").golden["ended"]
        .as_bool()
        .unwrap());
    assert_generation_matches("odd_end_zeros", 1);
}

#[test]
fn mlx_gqa3_six_heads_given_noise_matches_reference_for_40_frames() {
    assert_generation_matches("odd_noise", 40);
}

fn assert_codec_matches(name: &str) {
    let case = Case::load(name);
    let pcm = case.model(DType::F32).decode(&case.codes()).unwrap();
    let diff = max_abs_diff(&pcm, &case.f32_file("codec_waveform.f32"));
    eprintln!("{name} (mlx): waveform max abs diff {diff:.2e}");
    assert!(
        diff <= WAVEFORM_TOLERANCE,
        "{name}: waveform max abs diff {diff}"
    );
}

#[test]
fn mlx_codec_teacher_forced_matches_reference() {
    assert_codec_matches("codec_tiny");
}

#[test]
fn mlx_codec_teacher_forced_matches_reference_with_six_alibi_heads() {
    assert_codec_matches("codec_odd");
}

#[test]
fn mlx_bf16_teacher_forced_codes_stay_within_documented_tolerance() {
    for name in ["tiny_zeros", "tiny_noise", "odd_noise"] {
        let case = Case::load(name);
        let model = case.model(DType::BF16);
        let golden = case.codes();
        let mut generation = model.start(&case.request(golden.len())).unwrap();
        let (mut semantic_equal, mut acoustic_close, mut acoustic_total, mut max_level_diff) =
            (0, 0, 0, 0);
        for reference in &golden {
            let Some(frame) = generation.next_frame().map(<[u32]>::to_vec) else {
                break;
            };
            semantic_equal += usize::from(frame[0] == reference[0]);
            for (a, b) in frame[1..].iter().zip(&reference[1..]) {
                let d = (*a as i64 - *b as i64).unsigned_abs();
                acoustic_close += usize::from(d <= 1);
                acoustic_total += 1;
                max_level_diff = max_level_diff.max(d);
            }
            generation.replace_last_frame(reference.clone());
        }
        let semantic_rate = semantic_equal as f64 / golden.len() as f64;
        let acoustic_rate = acoustic_close as f64 / acoustic_total.max(1) as f64;
        eprintln!("{name} mlx bf16 teacher-forced: semantic equal {semantic_equal}/{}, acoustic within 1 level {acoustic_close}/{acoustic_total}, max level diff {max_level_diff}", golden.len());
        assert!(
            semantic_rate >= BF16_MIN_SEMANTIC_AGREEMENT,
            "{name}: semantic agreement {semantic_rate:.3}"
        );
        assert!(
            acoustic_rate >= BF16_MIN_ACOUSTIC_WITHIN_ONE,
            "{name}: acoustic agreement {acoustic_rate:.3}"
        );
    }
}

/// MLX evaluates lazily built graphs only at the outer loop boundaries: once per backbone
/// pass (prefill, then each fed-back frame), once per flow-head frame, once per codec decode.
#[test]
fn mlx_evaluates_once_per_backbone_pass_flow_head_frame_and_decode() {
    use voxtral_tts::tensor::mlx_backend::evaluations;
    let case = Case::load("tiny_noise");
    let model = case.model(DType::F32);
    let frames = 6;
    let before = evaluations();
    let mut generation = model.start(&case.request(frames)).unwrap();
    assert_eq!(evaluations() - before, 1, "prefill: one backbone pass");
    for i in 0..frames {
        let before = evaluations();
        assert!(generation.next_frame().is_some(), "frame {i}");
        // The first frame reads the prefill's hidden state: flow head only.
        let expected = if i == 0 { 1 } else { 2 };
        assert_eq!(evaluations() - before, expected, "frame {i}: evaluations");
    }
    let before = evaluations();
    let synthesis = generation.finish().unwrap();
    assert_eq!(evaluations() - before, 1, "codec decode: one evaluation");
    assert_eq!(synthesis.codes, case.codes()[..frames].to_vec());
}
