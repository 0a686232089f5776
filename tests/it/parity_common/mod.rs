//! Parity with the reference (vLLM-Omni semantics; goldens from mlx-audio 0.6.2 patched at run
//! time, see tools/goldens/), for any backend: tests/it/parity.rs runs it on libtorch,
//! tests/it/parity_mlx.rs on MLX, with the same goldens and bounds. Checkpoints are rebuilt by
//! `make-test-model` (deterministic per seed) and checked against the hash the goldens were
//! made from.
// Each test binary uses only some of these.
#![allow(dead_code)]

use serde_json::Value;
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use voxtral_tts::models::voxtral_tts::testkit::cached_test_model;
use voxtral_tts::models::voxtral_tts::testkit::Preset;
use voxtral_tts::models::voxtral_tts::{Noise, StopReason, Synthesis, SynthesisRequest, Voxtral};
use voxtral_tts::tensor::{DType, Tensor};

/// Waveform tolerance against the reference (max abs, f32 compute).
pub const WAVEFORM_TOLERANCE: f32 = 1e-4;
/// bf16 tolerance, teacher-forced: share of frames whose semantic code equals the reference's,
/// and share of acoustic codes within one FSQ level of it.
pub const BF16_MIN_SEMANTIC_AGREEMENT: f64 = 0.95;
pub const BF16_MIN_ACOUSTIC_WITHIN_ONE: f64 = 0.99;

pub struct Case {
    pub dir: PathBuf,
    pub golden: Value,
}

impl Case {
    pub fn load(name: &str) -> Case {
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

    /// The checkpoint folder, verified byte for byte against the goldens' source.
    pub fn model_dir(&self) -> PathBuf {
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
        let sha = format!("{:x}", Sha256::digest(&bytes));
        assert_eq!(
            sha,
            self.golden["checkpoint_sha256"].as_str().unwrap(),
            "make-test-model output changed: regenerate the goldens"
        );
        dir
    }

    pub fn model<T: Tensor>(&self, device: &T::Device, dtype: DType) -> Voxtral<T> {
        Voxtral::load(&self.model_dir(), device, dtype).unwrap()
    }

    pub fn f32_file(&self, name: &str) -> Vec<f32> {
        let bytes = std::fs::read(self.dir.join(name)).unwrap();
        bytes
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect()
    }

    pub fn codes(&self) -> Vec<Vec<u32>> {
        serde_json::from_value(self.golden["codes"].clone()).unwrap()
    }

    /// The golden's request, for `max_frames` frames.
    pub fn request(&self, max_frames: usize) -> SynthesisRequest {
        let g = &self.golden;
        let noise = match g["noise"].as_str().unwrap() {
            "zeros" => Noise::Seeded {
                seed: 0,
                scale: 0.0,
            },
            "given" => Noise::Given(self.f32_file("noise.f32")),
            other => panic!("unknown noise mode {other}"),
        };
        SynthesisRequest {
            text: g["text"].as_str().unwrap().into(),
            voice: g["voice"].as_str().unwrap().into(),
            max_frames,
            noise,
        }
    }

    pub fn run<T: Tensor>(&self, model: &Voxtral<T>) -> Synthesis {
        let request = self.request(self.golden["max_frames"].as_u64().unwrap() as usize);
        let _guard = tch::no_grad_guard();
        model.start(&request).unwrap().finish().unwrap()
    }
}

pub fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
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

/// f32 generation: exact prompt ids, codes and stop reason; waveform within the tolerance.
pub fn assert_generation_matches<T: Tensor>(device: &T::Device, name: &str, min_frames: usize) {
    let case = Case::load(name);
    let s = case.run(&case.model::<T>(device, DType::F32));
    let g = &case.golden;
    let prompt: Vec<u32> = serde_json::from_value(g["prompt_ids"].clone()).unwrap();
    assert_eq!(s.prompt_ids, prompt, "{name}: prompt ids");
    let golden_codes = case.codes();
    assert!(
        golden_codes.len() >= min_frames,
        "{name}: golden has only {} frames",
        golden_codes.len()
    );
    assert_eq!(
        first_difference(&s.codes, &golden_codes),
        None,
        "{name}: first differing frame"
    );
    let ended = g["ended"].as_bool().unwrap();
    assert_eq!(
        s.stop == StopReason::EndAudio,
        ended,
        "{name}: stop reason {:?}",
        s.stop
    );
    let diff = max_abs_diff(&s.pcm, &case.f32_file("waveform.f32"));
    let frames = s.codes.len().max(1) as f64;
    eprintln!(
        "{name} ({} {device:?}): {} frames, waveform max abs diff {diff:.2e}; per frame: backbone {:.2} ms, flow head {:.2} ms",
        T::BACKEND,
        s.codes.len(),
        s.times.backbone.as_secs_f64() * 1e3 / frames,
        s.times.flow_head.as_secs_f64() * 1e3 / frames,
    );
    assert!(
        diff <= WAVEFORM_TOLERANCE,
        "{name}: waveform max abs diff {diff}"
    );
}

/// A golden that must exercise an early END_AUDIO.
pub fn assert_stops_early_like_reference<T: Tensor>(device: &T::Device, name: &str) {
    let case = Case::load(name);
    assert!(
        case.golden["ended"].as_bool().unwrap(),
        "this case must exercise an early END_AUDIO"
    );
    assert_generation_matches::<T>(device, name, 1);
}

/// The codec alone, fed the reference's codes (f32).
pub fn assert_codec_matches<T: Tensor>(device: &T::Device, name: &str) {
    let case = Case::load(name);
    let model = case.model::<T>(device, DType::F32);
    let _guard = tch::no_grad_guard();
    let pcm = model.decode(&case.codes()).unwrap();
    let diff = max_abs_diff(&pcm, &case.f32_file("codec_waveform.f32"));
    eprintln!("{name} ({}): waveform max abs diff {diff:.2e}", T::BACKEND);
    assert!(
        diff <= WAVEFORM_TOLERANCE,
        "{name}: waveform max abs diff {diff}"
    );
}

/// bf16 compute against the f32 reference, teacher-forced (each step is fed the reference's
/// previous frame, so one early difference does not derail the rest). The bounds are the
/// documented bf16 tolerance (docs/correctness.md, "Numerics").
pub fn assert_bf16_teacher_forced_within_tolerance<T: Tensor>(device: &T::Device) {
    for name in ["tiny_zeros", "tiny_noise", "odd_noise"] {
        let case = Case::load(name);
        let model = case.model::<T>(device, DType::BF16);
        let golden = case.codes();
        let request = case.request(golden.len());
        let _guard = tch::no_grad_guard();
        let mut generation = model.start(&request).unwrap();
        let (mut semantic_equal, mut acoustic_close, mut acoustic_total, mut max_level_diff) =
            (0, 0, 0, 0);
        for reference in &golden {
            // An END predicted here counts as a semantic miss; feed the reference frame on.
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
        eprintln!("{name} {} bf16 teacher-forced: semantic equal {semantic_equal}/{}, acoustic within 1 level {acoustic_close}/{acoustic_total}, max level diff {max_level_diff}", T::BACKEND, golden.len());
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
