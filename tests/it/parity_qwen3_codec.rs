//! The Qwen3-TTS speech-tokenizer decoder against the official qwen-tts 0.1.1 decode, f32 on
//! libtorch (CPU), on the `qwen3-tiny-*` speech tokenizer (the same file in every preset of
//! seed 0). Goldens from tools/goldens/qwen3_tts/make_goldens.py: the decoder alone on random
//! codes (`decode_100`, and `decode_330` across the official 300/25 chunk seam), and each
//! preset's decoded case waveform. The encoder's error paths (its codes are checked in
//! parity_qwen3_tts.rs).

use safetensors::{Dtype, SafeTensors};
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use voxtral_tts::models::qwen3_tts::speech_decoder::{
    official_reference_cut, CodesError, SpeechDecoder,
};
use voxtral_tts::models::qwen3_tts::speech_encoder::{EncodeError, SpeechEncoder};
use voxtral_tts::models::qwen3_tts::testkit::make_test_model as make_qwen3_test_model;
use voxtral_tts::models::qwen3_tts::testkit::Qwen3Preset;
use voxtral_tts::nn::LoadError;
use voxtral_tts::tensor::tch_backend::TchTensor;
use voxtral_tts::tensor::DType;

/// Max abs difference from the official waveform (samples in ±1).
const WAVEFORM_TOLERANCE: f32 = 1e-4;
/// Max abs difference between a stream fed in chunks and one forward pass.
const STREAMING_TOLERANCE: f32 = 1e-4;

const CPU: tch::Device = tch::Device::Cpu;

fn goldens_dir(preset: Qwen3Preset) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/goldens/qwen3_tts")
        .join(preset.name())
}

struct Golden {
    json: Value,
    tensors: Vec<u8>,
}

impl Golden {
    fn load(preset: Qwen3Preset) -> Golden {
        let dir = goldens_dir(preset);
        let text = std::fs::read_to_string(dir.join("goldens.json")).unwrap();
        Golden {
            json: serde_json::from_str(&text).unwrap(),
            tensors: std::fs::read(dir.join("tensors.safetensors")).unwrap(),
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

    /// An int32 `[frames, 16]` tensor as frames of codes.
    fn code_tensor(&self, name: &str) -> Vec<Vec<u32>> {
        let st = SafeTensors::deserialize(&self.tensors).unwrap();
        let t = st.tensor(name).unwrap();
        assert_eq!(t.dtype(), Dtype::I32, "{name}");
        let values: Vec<u32> = t
            .data()
            .chunks_exact(4)
            .map(|b| u32::try_from(i32::from_le_bytes([b[0], b[1], b[2], b[3]])).unwrap())
            .collect();
        values.chunks(t.shape()[1]).map(<[u32]>::to_vec).collect()
    }

    fn speech_tokenizer_sha256(&self) -> &str {
        self.json["checkpoint_sha256"]["speech_tokenizer/model.safetensors"]
            .as_str()
            .unwrap()
    }
}

fn codes_of(value: &Value) -> Vec<Vec<u32>> {
    serde_json::from_value(value.clone()).unwrap()
}

fn max_abs_diff(got: &[f32], want: &[f32]) -> f32 {
    assert_eq!(got.len(), want.len(), "lengths");
    got.iter()
        .zip(want)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, f32::max)
}

/// The speech tokenizer of `qwen3-tiny-base` at the goldens' seed, generated into `tmp`,
/// checked to be the very file every preset's goldens came from.
fn speech_tokenizer(tmp: &Path) -> PathBuf {
    let base = Golden::load(Qwen3Preset::TinyBase);
    let seed = base.json["seed"].as_u64().unwrap();
    make_qwen3_test_model(tmp, Qwen3Preset::TinyBase, seed).unwrap();
    let folder = tmp.join("speech_tokenizer");
    let bytes = std::fs::read(folder.join("model.safetensors")).unwrap();
    let sha = format!("{:x}", Sha256::digest(&bytes));
    for &preset in <Qwen3Preset as clap::ValueEnum>::value_variants() {
        let golden = Golden::load(preset);
        assert_eq!(golden.json["seed"].as_u64(), Some(seed), "{preset:?}");
        assert_eq!(golden.speech_tokenizer_sha256(), sha, "{preset:?}");
    }
    folder
}

fn load(folder: &Path) -> SpeechDecoder<TchTensor> {
    SpeechDecoder::load(folder, &CPU, DType::F32).unwrap()
}

#[test]
fn decoder_matches_the_official_decode() {
    let tmp = tempfile::tempdir().unwrap();
    let decoder = load(&speech_tokenizer(tmp.path()));

    // The decoder alone: the goldens keep the last samples of decode_100 and the samples
    // around the 300-frame chunk seam of decode_330.
    let base = Golden::load(Qwen3Preset::TinyBase);
    for case in base.json["decoder_cases"].as_array().unwrap() {
        let name = case["name"].as_str().unwrap();
        let codes = base.code_tensor(&format!("{name}.codes"));
        assert_eq!(codes.len() as u64, case["frames"].as_u64().unwrap());
        let kept: Vec<usize> = serde_json::from_value(case["kept_samples"].clone()).unwrap();
        let want = base.f32s(&format!("{name}.wav"));
        let pcm = decoder.decode(&codes).unwrap();
        assert_eq!(
            pcm.len() as u64,
            case["samples"].as_u64().unwrap(),
            "{name}"
        );
        let diff = max_abs_diff(&pcm[kept[0]..kept[1]], &want);
        eprintln!("{name}: max |Δ| {diff:.2e} over samples {kept:?}");
        assert!(diff <= WAVEFORM_TOLERANCE, "{name}: max |Δ| {diff}");

        // Past 300 frames the official chunking is not one forward pass: the one-pass decode
        // differs there (by 0.05 on this checkpoint), so the chunks above are what matched.
        let one_pass = decoder.decode_one_pass(&codes).unwrap();
        let one_pass_diff = max_abs_diff(&one_pass[kept[0]..kept[1]], &want);
        let official = case["chunked_vs_one_pass_max_abs_diff"].as_f64().unwrap() as f32;
        eprintln!("{name}: one pass max |Δ| {one_pass_diff:.2e} (official: {official:.2e})");
        assert!(
            (one_pass_diff - official).abs() <= WAVEFORM_TOLERANCE,
            "{name}"
        );
    }

    // Each preset's decoded case: reference codes (Base in-context) then the generated ones,
    // the reference part cut from the waveform.
    for &preset in <Qwen3Preset as clap::ValueEnum>::value_variants() {
        let golden = Golden::load(preset);
        for case in golden.json["cases"].as_array().unwrap() {
            let Some(samples) = case["wav_samples"].as_u64() else {
                continue;
            };
            let name = case["name"].as_str().unwrap();
            let mut codes = match &case["ref_codes"] {
                Value::Null => Vec::new(),
                reference => codes_of(reference),
            };
            let reference_frames = codes.len();
            codes.extend(codes_of(&case["codes"]));
            let pcm = decoder.decode(&codes).unwrap();
            let cut = official_reference_cut(reference_frames, codes.len(), pcm.len());
            let official_cut = case["output_cut_samples"].as_u64().unwrap_or(0);
            assert_eq!(cut as u64, official_cut, "{preset:?} {name}");
            let want = golden.f32s(&format!("{name}.wav"));
            assert_eq!((pcm.len() - cut) as u64, samples, "{preset:?} {name}");
            let diff = max_abs_diff(&pcm[cut..], &want);
            eprintln!("{} {name}: max |Δ| {diff:.2e}", preset.name());
            assert!(
                diff <= WAVEFORM_TOLERANCE,
                "{preset:?} {name}: max |Δ| {diff}"
            );
        }
    }
}

#[test]
fn a_stream_in_chunks_gives_the_one_pass_samples() {
    let tmp = tempfile::tempdir().unwrap();
    let decoder = load(&speech_tokenizer(tmp.path()));
    // Longer than the attention window (72) and the convs' context, so every kind of state
    // is carried across chunks.
    let codes = Golden::load(Qwen3Preset::TinyBase).code_tensor("decode_100.codes");
    let whole = decoder.decode_one_pass(&codes).unwrap();
    for chunk in [1, 4, 25, 73] {
        let mut stream = decoder.new_stream();
        let mut pcm = Vec::new();
        for part in codes.chunks(chunk) {
            pcm.extend(decoder.decode_chunk(&mut stream, part).unwrap());
        }
        assert_eq!(stream.frames(), codes.len());
        let diff = max_abs_diff(&pcm, &whole);
        eprintln!("chunks of {chunk}: max |Δ| {diff:.2e}");
        assert!(
            diff <= STREAMING_TOLERANCE,
            "chunks of {chunk}: max |Δ| {diff}"
        );
    }
    // The first 100 frames of the official decode are one pass.
    assert!(decoder.decode(&codes).unwrap() == whole);
}

#[test]
fn bad_codes_and_checkpoints_are_clear_errors() {
    let tmp = tempfile::tempdir().unwrap();
    let folder = speech_tokenizer(tmp.path());
    let decoder = load(&folder);
    let frame = vec![0u32; 16];
    assert!(matches!(
        decoder.decode(&[frame.clone(), vec![0; 15]]),
        Err(CodesError::FrameWidth {
            frame: 1,
            expected: 16,
            got: 15
        })
    ));
    let mut wide = frame.clone();
    wide[3] = 2048;
    let err = decoder.decode_one_pass(&[frame, wide]).unwrap_err();
    assert_eq!(
        err.to_string(),
        "frame 1, codebook 3: code 2048 is outside 0..2048"
    );
    assert!(decoder.decode(&[]).unwrap().is_empty());

    // A checkpoint without one decoder tensor, and one with a tensor no decoder has.
    let rewrite = |skip: &str, extra: bool| -> LoadError {
        let extra = extra.then_some(("decoder.decoder.6.conv.bias", "decoder.decoder.7.conv.bias"));
        let broken = broken_copy(&folder, &tmp.path().join("broken"), skip, extra);
        match SpeechDecoder::<TchTensor>::load(&broken, &CPU, DType::F32) {
            Err(e) => e,
            Ok(_) => panic!("loaded a broken checkpoint"),
        }
    };
    let missing = "decoder.pre_transformer.layers.1.mlp_layer_scale.scale";
    let err = rewrite(missing, false).to_string();
    assert!(
        err.contains("model.safetensors") && err.contains(missing) && err.contains("missing"),
        "{err}"
    );
    let err = rewrite("", true).to_string();
    assert!(
        err.contains("decoder.decoder.7.conv.bias") && err.contains("unexpected tensor"),
        "{err}"
    );
}

/// A copy of the speech tokenizer `folder` in `dest` without the tensor `skip`, and with the
/// tensor `extra.0` also stored as `extra.1`.
fn broken_copy(folder: &Path, dest: &Path, skip: &str, extra: Option<(&str, &str)>) -> PathBuf {
    let bytes = std::fs::read(folder.join("model.safetensors")).unwrap();
    let st = SafeTensors::deserialize(&bytes).unwrap();
    let mut tensors: Vec<(String, safetensors::tensor::TensorView<'_>)> = st
        .tensors()
        .into_iter()
        .filter(|(name, _)| name != skip)
        .collect();
    if let Some((from, to)) = extra {
        tensors.push((to.into(), st.tensor(from).unwrap()));
    }
    std::fs::create_dir_all(dest).unwrap();
    std::fs::copy(folder.join("config.json"), dest.join("config.json")).unwrap();
    safetensors::serialize_to_file(tensors, None, &dest.join("model.safetensors")).unwrap();
    dest.to_path_buf()
}

/// The encoder's bad inputs and checkpoints: an empty clip, a missing or unexpected
/// `encoder.*` tensor, a config asking for more codebooks than the quantizer has. (Its codes
/// are checked against the goldens by parity_qwen3_tts.rs, fed to the in-context cases.)
#[test]
fn encoder_bad_clips_and_checkpoints_are_clear_errors() {
    let tmp = tempfile::tempdir().unwrap();
    let folder = speech_tokenizer(tmp.path());
    let encoder = SpeechEncoder::<TchTensor>::load(&folder, &CPU, DType::F32).unwrap();
    assert_eq!((encoder.sample_rate(), encoder.codebooks()), (24000, 16));
    assert!(matches!(encoder.encode(&[]), Err(EncodeError::Empty)));
    // ceil(len / 1920) frames.
    assert_eq!(encoder.encode(&[0.5]).unwrap().len(), 1);
    assert_eq!(encoder.encode(&vec![0.1; 1921]).unwrap().len(), 2);

    let load_err = |dir: &Path| match SpeechEncoder::<TchTensor>::load(dir, &CPU, DType::F32) {
        Err(e) => e.to_string(),
        Ok(_) => panic!("loaded a broken encoder"),
    };
    let missing = "encoder.encoder_transformer.layers.1.mlp_layer_scale.scale";
    let err = load_err(&broken_copy(&folder, &tmp.path().join("a"), missing, None));
    assert!(
        err.contains("model.safetensors") && err.contains(missing) && err.contains("missing"),
        "{err}"
    );
    let extra = (
        "encoder.encoder.layers.0.conv.bias",
        "encoder.downsample.conv.bias",
    );
    let err = load_err(&broken_copy(
        &folder,
        &tmp.path().join("b"),
        "",
        Some(extra),
    ));
    assert!(
        err.contains(extra.1) && err.contains("unexpected tensor"),
        "{err}"
    );
    let dir = broken_copy(&folder, &tmp.path().join("c"), "", None);
    let config = std::fs::read_to_string(dir.join("config.json")).unwrap();
    let mut json: Value = serde_json::from_str(&config).unwrap();
    json["encoder_valid_num_quantizers"] = 33.into();
    std::fs::write(dir.join("config.json"), json.to_string()).unwrap();
    let err = load_err(&dir);
    assert!(
        err.contains("config.json") && err.contains("encoder_valid_num_quantizers: 33"),
        "{err}"
    );
}

/// tools/goldens/qwen3_tts/mimi_long_clip.py's `synthetic_clip`: two sines plus a 64-bit
/// LCG's noise, in f64, rounded to int16.
fn synthetic_clip(samples: usize) -> Vec<f32> {
    use std::f64::consts::PI;
    let mut state: u64 = 0x2545_F491_4F6C_DD1D;
    (0..samples)
        .map(|n| {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let noise = ((state >> 40) as f64 / (1u64 << 24) as f64 - 0.5) * 0.2;
            let t = n as f64 / 24000.0;
            let x = 0.3 * (2.0 * PI * 220.0 * t).sin()
                + 0.2 * (2.0 * PI * 1370.0 * t + 0.5).sin() * (2.0 * PI * 3.0 * t).sin()
                + noise;
            let q = (x * 32768.0 + 0.5).floor().clamp(-32768.0, 32767.0);
            (q / 32768.0) as f32
        })
        .collect()
}

/// Clips longer than the encoder transformer's 250-position window (14 s: 350 positions),
/// and of an odd SEANet length (the replicate-padded downsample pads on the right): codes
/// identical to transformers' Mimi modules (tests/goldens/qwen3_tts/mimi_long_clip/, made by
/// tools/goldens/qwen3_tts/mimi_long_clip.py, which first checks those modules against the
/// official goldens' reference codes).
#[test]
fn encoder_codes_of_long_clips_equal_the_reference() {
    let tmp = tempfile::tempdir().unwrap();
    let folder = speech_tokenizer(tmp.path());
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/goldens/qwen3_tts/mimi_long_clip");
    let json: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("goldens.json")).unwrap()).unwrap();
    let bytes = std::fs::read(folder.join("model.safetensors")).unwrap();
    assert_eq!(
        format!("{:x}", Sha256::digest(&bytes)),
        json["speech_tokenizer_sha256"]
    );
    let encoder = SpeechEncoder::<TchTensor>::load(&folder, &CPU, DType::F32).unwrap();
    for case in json["cases"].as_array().unwrap() {
        let samples = case["samples"].as_u64().unwrap() as usize;
        let codes = encoder.encode(&synthetic_clip(samples)).unwrap();
        assert_eq!(codes.len(), samples.div_ceil(1920));
        assert!(
            codes == codes_of(&case["codes"]),
            "{samples} samples: codes differ"
        );
        eprintln!(
            "{samples} samples: {} frames equal the reference",
            codes.len()
        );
    }
}
