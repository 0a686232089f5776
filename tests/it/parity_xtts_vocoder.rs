//! XTTS-v2's speaker encoder and HiFi-GAN decoder against coqui-tts 0.28.0's `HifiDecoder`,
//! f32 on libtorch (CPU), on the project's random full-size `hifigan_decoder.*` checkpoint
//! (src/models/xtts/testkit/vocoder.rs, seed `SEED`). Goldens from
//! tools/goldens/xtts/make_vocoder_goldens.py: the speaker front end's log-mel and the
//! embedding of a 1 s synthetic clip, and the waveform of random latents.

use safetensors::{Dtype, SafeTensors};
use serde_json::Value;
use std::path::{Path, PathBuf};
use voxtral_tts::models::xtts::hifigan::{interpolate_linear, DecoderRates, HifiGan};
use voxtral_tts::models::xtts::hifigan_stream::HifiGanStream;
use voxtral_tts::models::xtts::speaker_encoder::SpeakerEncoder;
use voxtral_tts::models::xtts::testkit::vocoder::{cached_hifigan_decoder, VOCODER_SAFETENSORS};
use voxtral_tts::nn::checkpoint::Checkpoint;
use voxtral_tts::nn::layers::Loader;
use voxtral_tts::tensor::tch_backend::TchTensor;
use voxtral_tts::tensor::{DType, TensorData};

const SEED: u64 = 18;
/// The published `decoder_input_dim`.
const LATENT_DIM: usize = 1024;
const EMBEDDING_TOLERANCE: f32 = 1e-4;
const LOG_MEL_TOLERANCE: f32 = 1e-4;
const WAVEFORM_TOLERANCE: f32 = 1e-4;
/// Streamed against one whole decode: the same samples up to float rounding.
const STREAMING_TOLERANCE: f32 = 1e-5;
const CPU: tch::Device = tch::Device::Cpu;

struct Golden {
    json: Value,
    tensors: Vec<u8>,
}

impl Golden {
    fn load() -> Golden {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/goldens/xtts/vocoder");
        let text = std::fs::read_to_string(dir.join("goldens.json")).unwrap();
        Golden {
            json: serde_json::from_str(&text).unwrap(),
            tensors: std::fs::read(dir.join("goldens.safetensors")).unwrap(),
        }
    }

    fn f32s(&self, name: &str) -> Vec<f32> {
        let st = SafeTensors::deserialize(&self.tensors).unwrap();
        let t = st.tensor(name).unwrap();
        assert_eq!(t.dtype(), Dtype::F32, "{name}");
        t.data()
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect()
    }
}

/// The cached checkpoint, checked to be the one the goldens were made from.
fn checkpoint(golden: &Golden) -> Checkpoint {
    let dir: PathBuf = cached_hifigan_decoder(LATENT_DIM, SEED).unwrap();
    let path = dir.join(VOCODER_SAFETENSORS);
    let ckpt = Checkpoint::open(&path).unwrap();
    let key = "hifigan_decoder.waveform_decoder.conv_pre.weight";
    let shape = ckpt.shape(key).unwrap();
    let fingerprint: f64 = ckpt
        .load_f32(key, &shape)
        .unwrap()
        .iter()
        .map(|&v| v as f64)
        .sum();
    let want = golden.json["fingerprint"].as_f64().unwrap();
    assert!(
        (fingerprint - want).abs() < 1e-6 * want.abs().max(1.0),
        "the goldens were made from another checkpoint ({want} vs {fingerprint}); regenerate: \
         .deps/xtts-ref-venv/bin/python tools/goldens/xtts/make_vocoder_goldens.py {}",
        path.display()
    );
    ckpt
}

fn max_abs_diff(got: &[f32], want: &[f32], what: &str) -> f32 {
    assert_eq!(got.len(), want.len(), "{what}: length");
    got.iter()
        .zip(want)
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max)
}

#[test]
fn speaker_front_end_and_embedding_match_coqui() {
    let golden = Golden::load();
    let ckpt = checkpoint(&golden);
    let loader = Loader::<TchTensor>::new(&ckpt, &CPU, DType::F32).scoped("hifigan_decoder.");
    let encoder = SpeakerEncoder::load(&loader).unwrap();
    assert_eq!(encoder.embedding_dim(), 512);
    let clip = golden.f32s("clip_16k");

    let log_mel = encoder.log_mel(&clip).unwrap();
    let diff = max_abs_diff(&log_mel, &golden.f32s("spk_logmel"), "log-mel");
    println!("speaker log-mel max |diff| {diff:e}");
    assert!(diff < LOG_MEL_TOLERANCE, "log-mel max |diff| {diff}");

    let embedding = encoder.embed(&clip).unwrap();
    let diff = max_abs_diff(&embedding, &golden.f32s("speaker_embedding"), "embedding");
    println!("speaker embedding max |diff| {diff:e}");
    assert!(diff < EMBEDDING_TOLERANCE, "embedding max |diff| {diff}");
}

#[test]
fn a_clip_too_short_to_frame_is_an_error() {
    let golden = Golden::load();
    let ckpt = checkpoint(&golden);
    let loader = Loader::<TchTensor>::new(&ckpt, &CPU, DType::F32).scoped("hifigan_decoder.");
    let encoder = SpeakerEncoder::load(&loader).unwrap();
    let err = encoder.embed(&[0.1; 200]).unwrap_err();
    assert!(err.to_string().contains("200 samples"), "{err}");
}

fn decoder(ckpt: &Checkpoint) -> HifiGan<TchTensor> {
    let loader = Loader::<TchTensor>::new(ckpt, &CPU, DType::F32).scoped("hifigan_decoder.");
    HifiGan::load(&loader, DecoderRates::PUBLISHED).unwrap()
}

#[test]
fn hifigan_waveform_matches_coqui() {
    let golden = Golden::load();
    let ckpt = checkpoint(&golden);
    let decoder = decoder(&ckpt);
    let cond = decoder
        .conditioning(&golden.f32s("speaker_embedding"))
        .unwrap();
    for frames in golden.json["latent_frames"].as_array().unwrap() {
        let n = frames.as_u64().unwrap() as usize;
        let latents = decoder.latents(&golden.f32s(&format!("latents_{n}")), n);
        let wav = decoder.decode(&latents, &cond);
        assert_eq!(wav.len(), decoder.frames_for(n) * 256);
        let diff = max_abs_diff(&wav, &golden.f32s(&format!("wav_{n}")), "waveform");
        println!("{n} latents: {} samples, max |diff| {diff:e}", wav.len());
        assert!(diff < WAVEFORM_TOLERANCE, "{n} latents: max |diff| {diff}");
    }
}

#[test]
fn speed_stretch_of_the_latents_matches_coqui() {
    let golden = Golden::load();
    let ckpt = checkpoint(&golden);
    let decoder = decoder(&ckpt);
    let frames = golden.json["latent_frames"].as_array().unwrap();
    let n = frames.last().unwrap().as_u64().unwrap() as usize;
    let latents = decoder.latents(&golden.f32s(&format!("latents_{n}")), n);
    let speed = golden.json["speed"].as_f64().unwrap();
    let stretched = interpolate_linear(&latents, 1.0 / speed.max(0.05), &CPU);
    let diff = max_abs_diff(
        &stretched.to_vec_f32(),
        &golden.f32s("latents_speed"),
        "stretch",
    );
    println!(
        "speed {speed}: {:?}, max |diff| {diff:e}",
        stretched.shape()
    );
    assert!(diff < 1e-6, "max |diff| {diff}");
}

#[test]
fn a_speaker_embedding_of_another_width_is_an_error() {
    let golden = Golden::load();
    let ckpt = checkpoint(&golden);
    let err = decoder(&ckpt).conditioning(&[0.1; 256]).err().unwrap();
    assert!(err.to_string().contains("256 values"), "{err}");
}

/// Deterministic latents `[n, D]` of unit scale.
fn latents(n: usize, dim: usize) -> Vec<f32> {
    (0..n * dim)
        .map(|i| ((i as f32 * 0.7548777).fract() - 0.5) * 3.0 + (i as f32 * 0.013).sin())
        .collect()
}

/// Streams `values` in chunks of `chunk` latents; returns the samples and the chunk sizes.
fn stream(
    decoder: &HifiGan<TchTensor>,
    stream: HifiGanStream<'_, TchTensor>,
    values: &[f32],
    chunk: usize,
) -> (Vec<f32>, Vec<usize>) {
    let mut stream = stream;
    let mut out = Vec::new();
    let mut sizes = Vec::new();
    for piece in values.chunks(chunk * decoder.latent_dim()) {
        let samples = stream.push(piece);
        sizes.push(samples.len());
        out.extend(samples);
    }
    let rest = stream.finish();
    sizes.push(rest.len());
    out.extend(rest);
    (out, sizes)
}

#[test]
fn streamed_decode_equals_the_whole_decode() {
    let golden = Golden::load();
    let ckpt = checkpoint(&golden);
    let decoder = decoder(&ckpt);
    let cond = decoder
        .conditioning(&golden.f32s("speaker_embedding"))
        .unwrap();
    let n = 9;
    let values = latents(n, decoder.latent_dim());
    let whole = decoder.decode(&decoder.latents(&values, n), &cond);
    let context = decoder.context_frames();
    println!("context {context} frames each side");
    let (streamed, sizes) = stream(&decoder, HifiGanStream::new(&decoder, &cond), &values, 3);
    println!("chunk sizes {sizes:?}");
    assert_eq!(streamed.len(), whole.len());
    assert!(sizes.iter().filter(|&&s| s > 0).count() >= 2, "{sizes:?}");
    let diff = max_abs_diff(&streamed, &whole, "stream");
    println!("streamed vs whole: max |diff| {diff:e}");
    assert!(diff < STREAMING_TOLERANCE, "max |diff| {diff}");

    // Without context, the seams show: the context is what makes the stream exact.
    let (seamed, _) = stream(
        &decoder,
        HifiGanStream::with_context(&decoder, &cond, 0),
        &values,
        3,
    );
    let diff = max_abs_diff(&seamed, &whole, "seamed stream");
    println!("no context: max |diff| {diff:e}");
    assert!(diff > 100.0 * STREAMING_TOLERANCE, "max |diff| {diff}");
}
