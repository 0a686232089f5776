//! Strict loading: every malformed model folder is an error that names the file and the key.

use crate::common::copy_dir;
use std::path::{Path, PathBuf};
use voxtral_tts::models::voxtral_tts::testkit::cached_test_model;
use voxtral_tts::models::voxtral_tts::testkit::Preset;
use voxtral_tts::models::voxtral_tts::voices::load_voices;
use voxtral_tts::models::voxtral_tts::{LoadError, Voxtral};
use voxtral_tts::tensor::{tch_backend::TchTensor, DType};
use voxtral_tts::tokenizers::tekken::Tekken;

/// A private copy of the tiny test model that a test may break.
fn broken_copy() -> (tempfile::TempDir, PathBuf) {
    let src = cached_test_model(Preset::Tiny, 0).unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let dst = tmp.path().join("model");
    copy_dir(&src, &dst);
    (tmp, dst)
}

fn load_error(dir: &Path) -> String {
    match Voxtral::<TchTensor>::load(dir, &tch::Device::Cpu, DType::F32) {
        Ok(_) => panic!("loading {} should fail", dir.display()),
        Err(e) => e.to_string(),
    }
}

fn assert_names(err: &str, parts: &[&str]) {
    for p in parts {
        assert!(err.contains(p), "error {err:?} should name {p:?}");
    }
}

fn edit_json(path: &Path, edit: impl FnOnce(&mut serde_json::Value)) {
    let mut v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    edit(&mut v);
    std::fs::write(path, v.to_string()).unwrap();
}

#[test]
fn the_tiny_model_loads() {
    let dir = cached_test_model(Preset::Tiny, 0).unwrap();
    let m = Voxtral::<TchTensor>::load(&dir, &tch::Device::Cpu, DType::BF16).unwrap();
    assert_eq!(m.voices().count(), 20);
}

#[test]
fn missing_files_are_named() {
    for file in ["params.json", "tekken.json", "consolidated.safetensors"] {
        let (_tmp, dir) = broken_copy();
        std::fs::remove_file(dir.join(file)).unwrap();
        assert_names(&load_error(&dir), &[file]);
    }
    let (_tmp, dir) = broken_copy();
    std::fs::remove_dir_all(dir.join("voice_embedding")).unwrap();
    assert_names(&load_error(&dir), &["voice_embedding"]);
    // One voice that tekken.json lists is gone.
    let (_tmp, dir) = broken_copy();
    for ext in ["pt", "safetensors"] {
        let _ = std::fs::remove_file(dir.join(format!("voice_embedding/fr_male.{ext}")));
    }
    assert_names(&load_error(&dir), &["fr_male", "tekken.json"]);
}

#[test]
fn bad_json_is_named() {
    let (_tmp, dir) = broken_copy();
    std::fs::write(dir.join("params.json"), "{\"dim\": 64,").unwrap();
    assert_names(&load_error(&dir), &["params.json"]);
    let (_tmp, dir) = broken_copy();
    std::fs::write(dir.join("tekken.json"), "[").unwrap();
    assert_names(&load_error(&dir), &["tekken.json"]);
}

#[test]
fn wrong_shapes_and_missing_keys_are_named() {
    let (_tmp, dir) = broken_copy();
    edit_json(&dir.join("params.json"), |v| v["hidden_dim"] = 128.into());
    assert_names(
        &load_error(&dir),
        &[
            "consolidated.safetensors",
            "layers.0.feed_forward.w1.weight",
            "shape",
        ],
    );

    let (_tmp, dir) = broken_copy();
    edit_json(&dir.join("params.json"), |v| v["n_layers"] = 3.into());
    assert_names(
        &load_error(&dir),
        &["consolidated.safetensors", "layers.2.", "missing"],
    );
}

#[test]
fn truncated_or_corrupt_safetensors_is_an_error() {
    let (_tmp, dir) = broken_copy();
    let path = dir.join("consolidated.safetensors");
    let bytes = std::fs::read(&path).unwrap();
    std::fs::write(&path, &bytes[..bytes.len() / 2]).unwrap();
    assert_names(&load_error(&dir), &["consolidated.safetensors"]);
    std::fs::write(&path, b"not a safetensors file at all").unwrap();
    assert_names(&load_error(&dir), &["consolidated.safetensors"]);
}

#[test]
fn wrong_dtype_is_named() {
    let (_tmp, dir) = broken_copy();
    let path = dir.join("voice_embedding/casual_male.safetensors");
    let data = vec![0u8; 4];
    let view =
        safetensors::tensor::TensorView::new(safetensors::Dtype::I32, vec![1, 1], &data).unwrap();
    safetensors::serialize_to_file([("embedding", view)], None, &path).unwrap();
    std::fs::remove_file(dir.join("voice_embedding/casual_male.pt")).unwrap();
    assert_names(&load_error(&dir), &["casual_male.safetensors", "embedding"]);
}

#[test]
fn voice_row_counts_are_checked_against_tekken() {
    let (_tmp, dir) = broken_copy();
    edit_json(&dir.join("tekken.json"), |v| {
        let n = v["audio"]["voice_num_audio_tokens"]["fr_male"]
            .as_u64()
            .unwrap();
        v["audio"]["voice_num_audio_tokens"]["fr_male"] = (n + 1).into();
    });
    assert_names(&load_error(&dir), &["fr_male.pt", "data/0", "bytes"]);

    let (_tmp, dir) = broken_copy();
    edit_json(&dir.join("tekken.json"), |v| {
        v["audio"]["voice_num_audio_tokens"]
            .as_object_mut()
            .unwrap()
            .remove("de_male");
    });
    assert_names(&load_error(&dir), &["de_male", "voice_num_audio_tokens"]);
}

#[test]
fn pt_and_safetensors_voices_hold_the_same_rows() {
    let dir = cached_test_model(Preset::Tiny, 0).unwrap();
    let tok = Tekken::from_file(&dir.join("tekken.json")).unwrap();
    let from_pt = load_voices(&dir, tok.voice_num_audio_tokens(), 64).unwrap();
    let (_tmp, copy) = broken_copy();
    for e in std::fs::read_dir(copy.join("voice_embedding")).unwrap() {
        let p = e.unwrap().path();
        if p.extension().unwrap() == "pt" {
            std::fs::remove_file(p).unwrap();
        }
    }
    let from_st = load_voices(&copy, tok.voice_num_audio_tokens(), 64).unwrap();
    assert_eq!(from_pt.len(), 20);
    for (name, v) in &from_pt {
        assert_eq!(v.data, from_st[name].data, "{name}");
        assert_eq!(v.rows, tok.voice_num_audio_tokens()[name]);
    }
}

#[test]
fn corrupt_pt_voice_is_named() {
    let (_tmp, dir) = broken_copy();
    std::fs::write(
        dir.join("voice_embedding/it_female.pt"),
        b"PK\x03\x04garbage",
    )
    .unwrap();
    assert_names(&load_error(&dir), &["it_female.pt"]);
}

#[test]
fn load_error_is_a_value_not_a_panic() {
    let err: LoadError = Voxtral::<TchTensor>::load(
        Path::new("/nonexistent/model"),
        &tch::Device::Cpu,
        DType::F32,
    )
    .err()
    .unwrap();
    assert!(err.to_string().contains("/nonexistent/model/params.json"));
}

#[test]
fn params_token_ids_must_agree_with_tekken() {
    let (_tmp, dir) = broken_copy();
    edit_json(&dir.join("params.json"), |v| {
        v["multimodal"]["audio_model_args"]["audio_token_id"] = 7.into();
    });
    assert_names(
        &load_error(&dir),
        &["params.json", "audio_token_id", "tekken.json"],
    );
}
