//! Incremental codec decoding: chunks decoded with left context and concatenated equal the
//! one-shot decode (the codec is causal; its receptive field is about 20 frames).

use crate::common;

use common::max_abs_diff;
use voxtral_tts::models::voxtral_tts::testkit::cached_test_model;
use voxtral_tts::models::voxtral_tts::testkit::Preset;
use voxtral_tts::models::voxtral_tts::{Noise, SynthesisRequest, Voxtral};
use voxtral_tts::tensor::{tch_backend::TchTensor, DType};

/// A random test checkpoint of `preset` on the CPU.
fn load(preset: Preset, dtype: DType) -> Voxtral<TchTensor> {
    Voxtral::load(
        &cached_test_model(preset, 0).unwrap(),
        &tch::Device::Cpu,
        dtype,
    )
    .unwrap()
}

fn codes(model: &Voxtral<TchTensor>, frames: usize) -> Vec<Vec<u32>> {
    // Random valid codes: more frames than a random model's synthesis reliably gives.
    let cfg = &model.config.args.multimodal.audio_model_args;
    let mut state = 12345u64;
    let mut next = |n: usize| {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        2 + ((state >> 33) as usize % n) as u32
    };
    (0..frames)
        .map(|_| {
            let mut f = vec![next(cfg.semantic_codebook_size)];
            f.extend((0..cfg.n_acoustic_codebook).map(|_| next(cfg.acoustic_codebook_size)));
            f
        })
        .collect()
}

#[test]
fn chunked_decode_equals_one_shot_for_several_chunk_sizes() {
    let _guard = tch::no_grad_guard();
    for preset in [Preset::Tiny, Preset::TinyOdd] {
        let model = load(preset, DType::F32);
        let all = codes(&model, 90);
        let one_shot = model.decode(&all).unwrap();
        assert!(
            model.codec_context_frames() >= 16,
            "context {}",
            model.codec_context_frames()
        );
        for chunk in [1, 3, 4, 8, 25, 40] {
            let mut streamed = Vec::new();
            let mut from = 0;
            while from < all.len() {
                let end = (from + chunk).min(all.len());
                streamed.extend(model.decode_tail(&all[..end], from).unwrap());
                from = end;
            }
            assert_eq!(streamed.len(), one_shot.len());
            let diff = max_abs_diff(&streamed, &one_shot);
            assert!(
                diff <= 1e-4,
                "{preset:?} chunk {chunk}: max abs diff {diff}"
            );
        }
    }
}

#[test]
fn streams_decoded_together_equal_each_decoded_alone() {
    // What one step of the server decodes at once on an accelerator: streams of different
    // lengths, each from its own frame (one from the start, one with nothing new, one empty,
    // and a whole long segment, which goes in a pass of its own).
    let _guard = tch::no_grad_guard();
    for preset in [Preset::Tiny, Preset::TinyOdd] {
        let model = load(preset, DType::F32);
        let all = codes(&model, 300);
        let streams: [(&[Vec<u32>], usize); 6] = [
            (&all[..90], 61),
            (&all[..7], 0),
            (&all[..300], 0),
            (&all[..40], 40),
            (&all[..33], 29),
            (&all[..0], 0),
        ];
        let together = model.decode_tails_together(&streams).unwrap();
        assert_eq!(together.len(), streams.len());
        for ((codes, from), pcm) in streams.iter().zip(&together) {
            let alone = model.decode_tail(codes, *from).unwrap();
            assert_eq!(
                pcm.len(),
                alone.len(),
                "{preset:?} {} from {from}",
                codes.len()
            );
            let diff = max_abs_diff(pcm, &alone);
            assert!(
                diff <= 1e-4,
                "{preset:?} {} frames from {from}: max abs diff {diff}",
                codes.len()
            );
        }
    }
}

#[test]
fn too_little_context_would_differ() {
    // The equality above is not vacuous: decoding a chunk without its context changes it.
    let _guard = tch::no_grad_guard();
    let model = load(Preset::Tiny, DType::F32);
    let all = codes(&model, 60);
    let one_shot = model.decode(&all).unwrap();
    let alone = model.decode(&all[50..]).unwrap();
    let spf = one_shot.len() / all.len();
    let diff = max_abs_diff(&alone, &one_shot[50 * spf..]);
    assert!(
        diff > 1e-3,
        "context-free decode should differ, diff {diff}"
    );
}

/// Synthesizes `request` once in one piece and once decoded 4 frames at a time, as the server
/// streams; the largest difference between the two waveforms.
fn streamed_against_one_shot(model: &Voxtral<TchTensor>, request: &SynthesisRequest) -> f32 {
    let one_shot = model.start(request).unwrap().finish().unwrap();
    let mut generation = model.start(request).unwrap();
    let (mut streamed, mut decoded) = (Vec::new(), 0);
    while generation.next_frame().is_some() {
        if generation.frames().len() - decoded == 4 {
            streamed.extend(model.decode_tail(generation.frames(), decoded).unwrap());
            decoded = generation.frames().len();
        }
    }
    streamed.extend(model.decode_tail(generation.frames(), decoded).unwrap());
    assert_eq!(streamed.len(), one_shot.pcm.len());
    max_abs_diff(&streamed, &one_shot.pcm)
}

fn streaming_request() -> SynthesisRequest {
    SynthesisRequest {
        text: "Streaming keeps the first sound early.".into(),
        voice: "casual_male".into(),
        max_frames: 40,
        noise: Noise::Seeded {
            seed: 0,
            scale: 0.0,
        },
    }
}

#[test]
fn streamed_synthesis_matches_one_shot() {
    let _guard = tch::no_grad_guard();
    let model = load(Preset::Tiny, DType::F32);
    let diff = streamed_against_one_shot(&model, &streaming_request());
    assert!(diff <= 1e-4, "max abs diff {diff}");
}

/// In bf16 mode the codec still computes in f32 on the CPU, so streamed audio is the one-shot
/// audio within 4 steps of 16-bit PCM (it differed by up to 128 when the codec ran in bf16).
#[test]
fn streamed_synthesis_matches_one_shot_in_bf16_mode() {
    let _guard = tch::no_grad_guard();
    for preset in [Preset::Tiny, Preset::TinyOdd] {
        let model = load(preset, DType::BF16);
        let mut request = streaming_request();
        request.voice = model.voices().next().unwrap().to_string();
        let diff = streamed_against_one_shot(&model, &request);
        let lsb = diff * 32768.0;
        eprintln!("{preset:?} bf16: streamed vs one-shot max diff {lsb:.2} LSB");
        assert!(lsb <= 4.0, "{preset:?}: {lsb} LSB");
    }
}
