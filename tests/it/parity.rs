//! Parity with the reference on libtorch (CPU); the cases and bounds are in
//! tests/it/parity_common (tests/it/parity_mlx.rs runs the same on MLX).

use crate::parity_common;

use parity_common::*;
use voxtral_tts::tensor::tch_backend::TchTensor;

const CPU: tch::Device = tch::Device::Cpu;

#[test]
fn tiny_zero_noise_matches_reference_for_48_frames() {
    assert_generation_matches::<TchTensor>(&CPU, "tiny_zeros", 48);
}

#[test]
fn tiny_given_noise_matches_reference_for_40_frames() {
    assert_generation_matches::<TchTensor>(&CPU, "tiny_noise", 40);
}

#[test]
fn tiny_given_noise_stops_at_end_audio_like_reference() {
    assert_stops_early_like_reference::<TchTensor>(&CPU, "tiny_noise_end");
}

#[test]
fn gqa3_six_heads_small_codebook_stops_early_like_reference() {
    assert_stops_early_like_reference::<TchTensor>(&CPU, "odd_end_zeros");
}

#[test]
fn gqa3_six_heads_given_noise_matches_reference_for_40_frames() {
    assert_generation_matches::<TchTensor>(&CPU, "odd_noise", 40);
}

#[test]
fn codec_teacher_forced_matches_reference() {
    assert_codec_matches::<TchTensor>(&CPU, "codec_tiny");
}

#[test]
fn codec_teacher_forced_matches_reference_with_six_alibi_heads() {
    assert_codec_matches::<TchTensor>(&CPU, "codec_odd");
}

/// The documented bf16 tolerance (docs/correctness.md, "Numerics"), teacher-forced.
#[test]
fn bf16_teacher_forced_codes_stay_within_documented_tolerance() {
    assert_bf16_teacher_forced_within_tolerance::<TchTensor>(&CPU);
}
