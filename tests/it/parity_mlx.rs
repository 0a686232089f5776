//! The parity goldens of tests/it/parity.rs on the MLX backend (`--features mlx`), with the same
//! cases and bounds (tests/it/parity_common): f32 exact codes and waveform within 1e-4, bf16
//! teacher-forced within the documented tolerance. Metal when this MLX has it, else the CPU.
#![cfg(feature = "mlx")]

use crate::parity_common;

use parity_common::*;
use voxtral_tts::tensor::mlx_backend::{MlxDevice, MlxTensor};
use voxtral_tts::tensor::DType;

fn device() -> MlxDevice {
    if MlxDevice::Gpu.is_available() {
        MlxDevice::Gpu
    } else {
        MlxDevice::Cpu
    }
}

#[test]
fn mlx_tiny_zero_noise_matches_reference_for_48_frames() {
    assert_generation_matches::<MlxTensor>(&device(), "tiny_zeros", 48);
}

#[test]
fn mlx_tiny_given_noise_matches_reference_for_40_frames() {
    assert_generation_matches::<MlxTensor>(&device(), "tiny_noise", 40);
}

#[test]
fn mlx_tiny_given_noise_stops_at_end_audio_like_reference() {
    assert_stops_early_like_reference::<MlxTensor>(&device(), "tiny_noise_end");
}

#[test]
fn mlx_gqa3_six_heads_small_codebook_stops_early_like_reference() {
    assert_stops_early_like_reference::<MlxTensor>(&device(), "odd_end_zeros");
}

#[test]
fn mlx_gqa3_six_heads_given_noise_matches_reference_for_40_frames() {
    assert_generation_matches::<MlxTensor>(&device(), "odd_noise", 40);
}

#[test]
fn mlx_codec_teacher_forced_matches_reference() {
    assert_codec_matches::<MlxTensor>(&device(), "codec_tiny");
}

#[test]
fn mlx_codec_teacher_forced_matches_reference_with_six_alibi_heads() {
    assert_codec_matches::<MlxTensor>(&device(), "codec_odd");
}

#[test]
fn mlx_bf16_teacher_forced_codes_stay_within_documented_tolerance() {
    assert_bf16_teacher_forced_within_tolerance::<MlxTensor>(&device());
}

/// MLX evaluates lazily built graphs only at the outer loop boundaries: once per backbone
/// pass (prefill, then each fed-back frame), once per flow-head frame, once per codec decode.
#[test]
fn mlx_evaluates_once_per_backbone_pass_flow_head_frame_and_decode() {
    use voxtral_tts::tensor::mlx_backend::evaluations;
    let case = Case::load("tiny_noise");
    let model = case.model::<MlxTensor>(&device(), DType::F32);
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

/// Quantized weights on MLX (its own `quantized_matmul`), against MLX's f32 run on the same
/// checkpoint, teacher-forced, with the bounds the libtorch CPU run keeps
/// (tests/it/quantization.rs): q8 at least 95% of the semantic codes and of the acoustic
/// levels within one.
#[test]
fn mlx_quantized_predictions_stay_near_f32_teacher_forced() {
    use crate::quantization::{reference_codes, voxtral_agreement};
    use voxtral_tts::engine::EngineOptions;
    use voxtral_tts::models::voxtral_tts::Voxtral;
    use voxtral_tts::tensor::quantized::QuantFormat;
    let case = Case::load("tiny_noise");
    let load = |quantize| {
        let options = EngineOptions {
            quantize,
            ..EngineOptions::default()
        };
        Voxtral::<MlxTensor>::load_for(&case.model_dir(), &device(), DType::F32, &options).unwrap()
    };
    let reference = reference_codes(&load(None), &case);
    assert!(reference.len() >= 10, "too few frames to measure");
    for (format, min_semantic, min_acoustic) in
        [(QuantFormat::Q8, 0.95, 0.95), (QuantFormat::Q4, 0.25, 0.6)]
    {
        let (semantic, acoustic) = voxtral_agreement(&load(Some(format)), &case, &reference);
        eprintln!(
            "MLX {format} against f32, teacher-forced: semantic {:.1}%, acoustic within one {:.1}% ({} frames)",
            100.0 * semantic,
            100.0 * acoustic,
            reference.len()
        );
        assert!(semantic >= min_semantic, "{format}: semantic {semantic:.3}");
        assert!(acoustic >= min_acoustic, "{format}: acoustic {acoustic:.3}");
    }
}
