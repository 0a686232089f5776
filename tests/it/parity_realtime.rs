//! Voxtral Realtime parity with the references on the `stt-tiny` checkpoint, f32 on libtorch
//! (CPU). Goldens from tools/goldens/voxtral_realtime/make_goldens.py: mistral-common 1.13.1's
//! offline padding and prompt, vLLM 0.33.0's log-mel, transformers 5.23.0's conv stem,
//! encoder, adapter, decoder logits and greedy tokens, and mistral-common's text of them.

use serde_json::Value;
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use voxtral_tts::models::voxtral_realtime::audio_tower::AudioTower;
use voxtral_tts::models::voxtral_realtime::mel::MelFrontEnd;
use voxtral_tts::models::voxtral_realtime::params::Config;
use voxtral_tts::models::voxtral_realtime::prompt::SpecialIds;
use voxtral_tts::models::voxtral_realtime::streaming::{AudioStream, TranscriptionStream};
use voxtral_tts::models::voxtral_realtime::testkit::cached_test_model;
use voxtral_tts::models::voxtral_realtime::transcriber::Transcriber;
use voxtral_tts::tensor::tch_backend::TchTensor;
use voxtral_tts::tensor::{DType, TensorData};
use voxtral_tts::tokenizers::tekken::Tekken;

/// Max abs difference from the reference's log-mel (values about −0.6..1.5).
const MEL_TOLERANCE: f32 = 1e-5;
/// Max abs difference from the reference at each encoder-side stage, f32.
const STAGE_TOLERANCE: f32 = 1e-5;
/// Max abs difference from the reference's decoder logits (values of a few units), f32.
const LOGITS_TOLERANCE: f32 = 1e-4;
/// Max abs difference between the chunked and the whole-utterance conv stem (f32 rounding).
const STREAMING_TOLERANCE: f32 = 1e-6;

const CPU: tch::Device = tch::Device::Cpu;

struct Golden {
    dir: PathBuf,
    case: Value,
}

impl Golden {
    fn load() -> Golden {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/goldens/voxtral_realtime");
        let case =
            serde_json::from_str(&std::fs::read_to_string(dir.join("case.json")).unwrap()).unwrap();
        Golden { dir, case }
    }

    fn usize(&self, key: &str) -> usize {
        self.case[key].as_u64().unwrap() as usize
    }

    /// A raw little-endian f32 file of the goldens.
    fn f32s(&self, name: &str) -> Vec<f32> {
        std::fs::read(self.dir.join(name))
            .unwrap()
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect()
    }

    /// The golden signal, before padding.
    fn signal(&self) -> Vec<f32> {
        let left = self.usize("left_pad_samples");
        let samples = self.case["signal"]["samples"].as_u64().unwrap() as usize;
        self.f32s("padded.f32")[left..left + samples].to_vec()
    }

    fn tokens(&self, key: &str) -> Vec<u32> {
        serde_json::from_value(self.case[key].clone()).unwrap()
    }

    /// The reference's greedy tokens and text, checked to be worth comparing against: several
    /// distinct text tokens (the checkpoint follows the audio rather than repeating one token)
    /// and a non-empty text.
    fn greedy_transcript(&self, dir: &Path) -> (Vec<u32>, String) {
        let tokens = self.tokens("greedy_tokens");
        let tok = Tekken::from_file(&dir.join("tekken.json")).unwrap();
        let specials = tok.num_special_tokens() as u32;
        let mut text_tokens: Vec<u32> = tokens.iter().copied().filter(|&t| t >= specials).collect();
        text_tokens.sort_unstable();
        text_tokens.dedup();
        assert!(
            text_tokens.len() >= 4,
            "golden tokens {tokens:?}: too few distinct text tokens"
        );
        let text = self.case["text"].as_str().unwrap().to_string();
        assert!(!text.is_empty(), "golden text is empty");
        (tokens, text)
    }

    /// The checkpoint folder, verified byte for byte against the goldens' source.
    fn model_dir(&self) -> PathBuf {
        assert_eq!(self.case["preset"], "stt-tiny");
        let seed = self.case["seed"].as_u64().unwrap();
        let dir = cached_test_model(seed).unwrap();
        let bytes = std::fs::read(dir.join("consolidated.safetensors")).unwrap();
        assert_eq!(
            format!("{:x}", Sha256::digest(&bytes)),
            self.case["checkpoint_sha256"].as_str().unwrap(),
            "make-test-model output changed: regenerate the goldens"
        );
        dir
    }
}

fn max_abs_diff(got: &[f32], want: &[f32], what: &str) -> f32 {
    assert_eq!(got.len(), want.len(), "{what}: length");
    let diff = got
        .iter()
        .zip(want)
        .map(|(a, b)| (a - b).abs())
        .fold(0f32, f32::max);
    assert!(diff.is_finite(), "{what}: non-finite values");
    diff
}

#[test]
fn offline_padding_and_prompt_match_mistral_common() {
    let golden = Golden::load();
    let dir = golden.model_dir();
    let config = Config::load(&dir).unwrap();
    let padded = golden.f32s("padded.f32");
    let (left, samples) = (
        golden.usize("left_pad_samples"),
        golden.case["signal"]["samples"].as_u64().unwrap() as usize,
    );
    assert_eq!(
        config.streaming.pad_offline(&padded[left..left + samples]),
        padded
    );
    let s = &config.streaming;
    assert_eq!(left, s.left_pad_tokens * s.samples_per_token);
    assert_eq!(s.delay_tokens, golden.usize("delay_tokens"));
    assert_eq!(s.right_pad_tokens, golden.usize("right_pad_tokens"));
    assert_eq!(
        padded.len() / s.samples_per_token,
        golden.usize("audio_tokens")
    );

    let tekken = dir.join("tekken.json");
    let tokenizer = Tekken::from_file(&tekken).unwrap();
    let ids = SpecialIds::resolve(&tokenizer, &tekken.display().to_string()).unwrap();
    let want: Vec<u32> = serde_json::from_value(golden.case["prompt_tokens"].clone()).unwrap();
    assert_eq!(ids.prompt(s), want);
}

#[test]
fn mel_matches_vllm_front_end() {
    let golden = Golden::load();
    let config = Config::load(&golden.model_dir()).unwrap();
    let mel = MelFrontEnd::new(&config.mel)
        .compute(&golden.f32s("padded.f32"))
        .unwrap();
    let (frames, bins) = (golden.usize("mel_frames"), golden.usize("num_mel_bins"));
    assert_eq!((mel.frames, mel.num_mel_bins), (frames, bins));
    // The reference's layout is [mels, frames].
    let want = golden.f32s("mel.f32");
    let got: Vec<f32> = (0..bins)
        .flat_map(|m| (0..frames).map(move |t| (m, t)))
        .map(|(m, t)| mel.at(t, m))
        .collect();
    let diff = max_abs_diff(&got, &want, "mel");
    eprintln!("mel: max abs diff {diff:e}");
    assert!(diff <= MEL_TOLERANCE, "mel differs by {diff}");
}

/// The encoder side on the reference's own mel, so that each stage is compared alone.
#[test]
fn conv_stem_encoder_and_adapter_match_transformers() {
    let golden = Golden::load();
    let dir = golden.model_dir();
    let config = Config::load(&dir).unwrap();
    let (frames, bins) = (golden.usize("mel_frames"), golden.usize("num_mel_bins"));
    let reference_mel = golden.f32s("mel.f32");
    let mel = voxtral_tts::models::voxtral_realtime::mel::LogMel {
        frames,
        num_mel_bins: bins,
        data: (0..frames)
            .flat_map(|t| (0..bins).map(move |m| (t, m)))
            .map(|(t, m)| reference_mel[m * frames + t])
            .collect(),
    };
    let tower = AudioTower::<TchTensor>::load(&dir, &config, &CPU, DType::F32, frames).unwrap();
    let out = tower.embed(&mel);
    for (name, tensor) in [
        ("conv_stem", &out.conv_frames),
        ("encoder", &out.encoded),
        ("adapter", &out.embeddings),
    ] {
        let shape: Vec<usize> =
            serde_json::from_value(golden.case[format!("{name}_shape")].clone()).unwrap();
        assert_eq!(tensor.shape()[1..], shape[..], "{name} shape");
        let diff = max_abs_diff(
            &tensor.to_vec_f32(),
            &golden.f32s(&format!("{name}.f32")),
            name,
        );
        eprintln!("{name}: max abs diff {diff:e}");
        assert!(diff <= STAGE_TOLERANCE, "{name} differs by {diff}");
    }
}

/// Eight mel frames (one decoder position) at a time through the conv stem's state gives the
/// offline conv frames.
#[test]
fn streamed_conv_stem_equals_offline() {
    let golden = Golden::load();
    let dir = golden.model_dir();
    let config = Config::load(&dir).unwrap();
    let mel = MelFrontEnd::new(&config.mel)
        .compute(&golden.f32s("padded.f32"))
        .unwrap();
    let tower = AudioTower::<TchTensor>::load(&dir, &config, &CPU, DType::F32, mel.frames).unwrap();
    let stem = &tower.encoder.stem;
    let bins = mel.num_mel_bins;
    let all = TchTensor::from_f32(&CPU, &mel.data, &[1, mel.frames, bins], DType::F32);
    let offline = stem.forward(&all).to_vec_f32();
    let chunk = config.streaming.mel_frames_per_token;
    let mut state = stem.start(DType::F32);
    let streamed: Vec<f32> = mel
        .data
        .chunks(chunk * bins)
        .flat_map(|rows| {
            let input = TchTensor::from_f32(&CPU, rows, &[1, rows.len() / bins, bins], DType::F32);
            stem.step(&mut state, &input).to_vec_f32()
        })
        .collect();
    // libtorch may block a convolution differently for other lengths: equal up to rounding.
    let diff = max_abs_diff(&streamed, &offline, "streamed conv stem");
    eprintln!("streamed conv stem: max abs diff {diff:e}");
    assert!(
        diff <= STREAMING_TOLERANCE,
        "streamed conv stem differs by {diff}"
    );
}

/// The decoder alone, on the reference's audio embeddings: the logits of every decoded
/// position and the greedy tokens. Positions past the decoder's window (48 in stt-tiny) are
/// among them.
#[test]
fn decoder_logits_and_greedy_tokens_match_transformers() {
    let _guard = tch::no_grad_guard();
    let golden = Golden::load();
    let dir = golden.model_dir();
    let audio_tokens = golden.usize("audio_tokens");
    let model = Transcriber::<TchTensor>::load(&dir, &CPU, DType::F32, audio_tokens).unwrap();
    let dim = model.config.args.dim;
    let embeddings = TchTensor::from_f32(
        &CPU,
        &golden.f32s("adapter.f32"),
        &[1, audio_tokens, dim],
        DType::F32,
    );
    let mut logits = Vec::new();
    let tokens = model.greedy(&embeddings, |step| logits.extend(step.to_vec_f32()));
    let want = golden.tokens("greedy_tokens");
    assert!(
        audio_tokens > model.config.args.sliding_window.unwrap(),
        "the golden no longer crosses the decoder window"
    );
    let shape: Vec<usize> = serde_json::from_value(golden.case["logits_shape"].clone()).unwrap();
    assert_eq!(shape, [want.len(), model.config.args.vocab_size]);
    let diff = max_abs_diff(&logits, &golden.f32s("logits.f32"), "logits");
    eprintln!(
        "decoder logits ({} steps): max abs diff {diff:e}",
        want.len()
    );
    assert!(diff <= LOGITS_TOLERANCE, "logits differ by {diff}");
    assert_eq!(tokens, want);
}

/// Audio in, text out: padding, mel, encoder, adapter and decoder of our own, against the
/// reference's tokens and mistral-common's text of them.
#[test]
fn offline_transcription_matches_the_references() {
    let _guard = tch::no_grad_guard();
    let golden = Golden::load();
    let dir = golden.model_dir();
    let signal = golden.signal();
    let config = Config::load(&dir).unwrap();
    let positions = config.streaming.offline_positions(signal.len());
    assert_eq!(positions, golden.usize("audio_tokens"));
    let model = Transcriber::<TchTensor>::load(&dir, &CPU, DType::F32, positions).unwrap();
    let transcript = model.transcribe(&signal).unwrap();
    let (want_tokens, want_text) = golden.greedy_transcript(&dir);
    assert_eq!(transcript.tokens, want_tokens);
    assert_eq!(transcript.text, want_text);
    // transformers' own generate, with its caches, stops one token earlier.
    let generated = golden.tokens("hf_generate_tokens");
    assert_eq!(transcript.tokens[..generated.len()], generated[..]);
    // A model loaded for fewer positions refuses the utterance rather than overflowing.
    let short = Transcriber::<TchTensor>::load(&dir, &CPU, DType::F32, positions - 1).unwrap();
    let err = short.transcribe(&signal).unwrap_err().to_string();
    assert!(err.contains("too long"), "{err}");
}

/// Audio pushed in pieces of several sizes (one sample, odd, one token, all at once): the
/// streamed audio embeddings equal the offline ones, and decoding them as they come gives the
/// reference's logits and tokens. Offline-exact streaming, not vLLM's realtime grid (see
/// `streaming`'s docs).
#[test]
fn streaming_equals_offline_transcription() {
    let _guard = tch::no_grad_guard();
    let golden = Golden::load();
    let dir = golden.model_dir();
    let signal = golden.signal();
    let positions = golden.usize("audio_tokens");
    let model = Transcriber::<TchTensor>::load(&dir, &CPU, DType::F32, positions).unwrap();
    let offline = model.transcribe(&signal).unwrap();
    let (want_tokens, want_text) = golden.greedy_transcript(&dir);
    assert_eq!(offline.tokens, want_tokens);
    assert_eq!(offline.text, want_text);
    let offline_embeddings = model.audio_embeddings(&signal).unwrap().to_vec_f32();
    let want_logits = golden.f32s("logits.f32");
    for piece in [1, 333, 1280, signal.len()] {
        let mut audio = AudioStream::start(&model).unwrap();
        let mut decoding = model.start_decoding(positions);
        let (mut embeddings, mut logits, mut tokens) = (Vec::new(), Vec::new(), Vec::new());
        let mut observe = |step: &TchTensor| logits.extend(step.to_vec_f32());
        let mut parts: Vec<Option<TchTensor>> = signal
            .chunks(piece)
            .map(|chunk| audio.push(chunk).unwrap())
            .collect();
        parts.push(audio.finish().unwrap());
        for part in parts.into_iter().flatten() {
            embeddings.extend(part.to_vec_f32());
            tokens.extend(decoding.feed(&part, &mut observe));
        }
        let what = format!("streamed embeddings, pieces of {piece}");
        let diff = max_abs_diff(&embeddings, &offline_embeddings, &what);
        eprintln!("{what}: max abs diff {diff:e} from offline");
        assert!(diff <= STAGE_TOLERANCE, "{what} differ by {diff}");
        let diff = max_abs_diff(&logits, &want_logits, "streamed logits");
        eprintln!("streamed logits, pieces of {piece}: max abs diff {diff:e} from the reference");
        assert!(diff <= LOGITS_TOLERANCE, "streamed logits differ by {diff}");
        assert_eq!(tokens, offline.tokens, "pieces of {piece}");
    }

    // The whole stream: tokens as they come, then the transcript, both the offline ones.
    let mut stream = TranscriptionStream::start(&model).unwrap();
    let mut tokens = Vec::new();
    for chunk in signal.chunks(1000) {
        tokens.extend(stream.push(chunk).unwrap());
    }
    let (last, transcript) = stream.finish().unwrap();
    tokens.extend(last);
    assert_eq!(tokens, offline.tokens);
    assert_eq!(transcript, offline);

    // A model loaded for fewer positions refuses the stream's end rather than overflowing.
    let short = Transcriber::<TchTensor>::load(&dir, &CPU, DType::F32, positions - 1).unwrap();
    let mut stream = TranscriptionStream::start(&short).unwrap();
    stream.push(&signal).unwrap();
    let err = stream.finish().unwrap_err().to_string();
    assert!(err.contains("too long"), "{err}");
}

/// Positions are embedded as soon as the audio covers their last mel frame (2.5 ms of
/// look-ahead past their 80 ms), not before.
#[test]
fn a_stream_embeds_a_position_once_its_look_ahead_is_in() {
    let _guard = tch::no_grad_guard();
    let golden = Golden::load();
    let dir = golden.model_dir();
    let model = Transcriber::<TchTensor>::load(&dir, &CPU, DType::F32, 64).unwrap();
    let streaming = &model.config.streaming;
    let (left, token) = (
        streaming.left_pad_tokens * streaming.samples_per_token,
        streaming.samples_per_token,
    );
    let mut audio = AudioStream::start(&model).unwrap();
    let count = |part: Option<TchTensor>| part.map_or(0, |p| p.shape()[1]);
    // Position left_pad_tokens needs its frame and 40 samples more.
    let first = token + streaming.look_ahead_samples;
    let signal = vec![0.1f32; first + token];
    let before = count(audio.push(&signal[..first - 1]).unwrap());
    assert_eq!(before, streaming.left_pad_tokens, "{left} pad samples");
    assert_eq!(count(audio.push(&signal[first - 1..first]).unwrap()), 1);
    assert_eq!(
        count(audio.push(&signal[first..first + token - 1]).unwrap()),
        0
    );
    assert_eq!(count(audio.push(&signal[first + token - 1..]).unwrap()), 1);
}
