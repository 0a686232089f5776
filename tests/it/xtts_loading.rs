//! XTTS-v2's pickled checkpoints read without executing them, checked against what torch reads
//! from the same files (`tests/data/xtts_pth`, written by `tools/fixtures/make_pth_fixtures.py`
//! with torch 2.11), and `voxtral-tts convert` run as a user would.

use safetensors::SafeTensors;
use serde_json::Value;
use std::collections::BTreeMap;
use std::io::{Cursor, Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use voxtral_tts::models::xtts::checkpoint::{normalize_key, ModelPth, SpeakersPth};
use voxtral_tts::models::xtts::folder::XttsFolder;
use voxtral_tts::nn::pth::PthCheckpoint;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/xtts_pth")
}

/// One tensor as torch read it: dtype name, shape, values.
struct Expected {
    dtype: String,
    shape: Vec<usize>,
    values: Vec<f64>,
}

fn expected(file: &str) -> BTreeMap<String, Expected> {
    let text = std::fs::read_to_string(fixtures().join("expected.json")).unwrap();
    let json: Value = serde_json::from_str(&text).unwrap();
    json[file]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            let expected = Expected {
                dtype: t["dtype"].as_str().unwrap().to_string(),
                shape: serde_json::from_value(t["shape"].clone()).unwrap(),
                // serde_json's default float parsing can miss the nearest f64 by an ulp;
                // every value here is an f32 (or narrower, or a small integer), so rounding
                // to f32 recovers it exactly.
                values: serde_json::from_value::<Vec<f64>>(t["values"].clone())
                    .unwrap()
                    .into_iter()
                    .map(|v| v as f32 as f64)
                    .collect(),
            };
            (t["key"].as_str().unwrap().to_string(), expected)
        })
        .collect()
}

/// Little-endian bytes of `dtype` (safetensors' name) as f64, exact for every dtype here.
fn decode(dtype: safetensors::Dtype, bytes: &[u8]) -> Vec<f64> {
    use safetensors::Dtype;
    let halves = || {
        bytes
            .chunks_exact(2)
            .map(|b| u16::from_le_bytes([b[0], b[1]]))
    };
    match dtype {
        Dtype::F32 => bytes
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes(b.try_into().unwrap()) as f64)
            .collect(),
        Dtype::F16 => halves().map(|h| half::f16::from_bits(h).to_f64()).collect(),
        Dtype::BF16 => halves()
            .map(|h| half::bf16::from_bits(h).to_f64())
            .collect(),
        Dtype::I64 => bytes
            .chunks_exact(8)
            .map(|b| i64::from_le_bytes(b.try_into().unwrap()) as f64)
            .collect(),
        Dtype::BOOL => bytes.iter().map(|&b| b as f64).collect(),
        other => panic!("no fixture has {other:?}"),
    }
}

fn torch_name(dtype: safetensors::Dtype) -> &'static str {
    use safetensors::Dtype;
    match dtype {
        Dtype::F32 => "float32",
        Dtype::F16 => "float16",
        Dtype::BF16 => "bfloat16",
        Dtype::I64 => "int64",
        Dtype::BOOL => "bool",
        _ => "other",
    }
}

/// Checks one tensor against torch's reading; returns the largest absolute difference.
fn compare(
    key: &str,
    dtype: safetensors::Dtype,
    shape: &[usize],
    bytes: &[u8],
    want: &Expected,
) -> f64 {
    assert_eq!(torch_name(dtype), want.dtype, "{key}");
    assert_eq!(shape, &want.shape[..], "{key}");
    let got = decode(dtype, bytes);
    assert_eq!(got.len(), want.values.len(), "{key}");
    got.iter()
        .zip(&want.values)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0, f64::max)
}

#[test]
fn model_pth_reads_as_torch_reads_it_in_both_containers() {
    let want = expected("model.pth");
    // The zip archive of torch >= 1.6 (the published files), and the legacy stream.
    for file in ["model.pth", "model_legacy_format.pth"] {
        let pth = PthCheckpoint::open(&fixtures().join(file), Some("model")).unwrap();
        let keys: Vec<&str> = pth.entries().iter().map(|e| e.key.as_str()).collect();
        assert_eq!(keys, want.keys().map(String::as_str).collect::<Vec<_>>());
        let mut max_diff = 0f64;
        for entry in pth.entries() {
            let bytes = pth.read(entry).unwrap();
            let diff = compare(
                &entry.key,
                entry.dtype,
                &entry.shape,
                &bytes,
                &want[&entry.key],
            );
            max_diff = max_diff.max(diff);
        }
        // Same values as torch: shared storages, offsets, strides and transposes gathered
        // exactly.
        assert_eq!(max_diff, 0.0, "{file}");
    }
}

#[test]
fn the_config_object_is_skipped_not_run() {
    // The whole file: the config object (NEWOBJ + BUILD of a TTS class) is an opaque value
    // holding no tensor, so only the state dict's tensors appear.
    let pth = PthCheckpoint::open(&fixtures().join("model.pth"), None).unwrap();
    assert_eq!(pth.entries().len(), expected("model.pth").len());
    assert!(pth.entries().iter().all(|e| e.key.starts_with("model.")));
    // The config object holds no tensor: under its key there is nothing to read.
    let config = PthCheckpoint::open(&fixtures().join("model.pth"), Some("config"));
    assert!(config.map_or(true, |p| p.entries().is_empty()));
    let missing = PthCheckpoint::open(&fixtures().join("model.pth"), Some("state_dict"))
        .err()
        .unwrap()
        .to_string();
    assert!(
        missing.contains("model.pth") && missing.contains("state_dict"),
        "{missing}"
    );
}

#[test]
fn model_keys_are_normalised_with_both_weight_norm_spellings() {
    let model = ModelPth::open(&fixtures().join("model.pth")).unwrap();
    let names: Vec<&str> = model.tensors().map(|(name, _)| name).collect();
    assert_eq!(
        names,
        [
            "gpt.conditioning_encoder.init.bias",
            "gpt.conditioning_encoder.init.weight",
            "gpt.final_norm.weight",
            "gpt.gpt.h.0.attn.c_attn.weight",
            "gpt.gpt.h.0.mlp.c_fc.weight",
            "gpt.mel_head.bias",
            "gpt.mel_head.weight",
            "gpt.text_embedding.weight",
            "hifigan_decoder.speaker_encoder.bn1.num_batches_tracked",
            "hifigan_decoder.speaker_encoder.layer1.0.idx",
            "hifigan_decoder.waveform_decoder.ups.0.parametrizations.weight.original0",
            "hifigan_decoder.waveform_decoder.ups.0.parametrizations.weight.original1",
            "hifigan_decoder.waveform_decoder.ups.1.parametrizations.weight.original0",
            "hifigan_decoder.waveform_decoder.ups.1.parametrizations.weight.original1",
            "mel_stats",
        ]
    );
    let mut dropped = model.dropped().to_vec();
    dropped.sort();
    assert_eq!(
        dropped,
        [
            "dvae.codebook.weight",
            "gpt.gpt.h.0.attn.bias",
            "gpt.gpt.h.0.attn.masked_bias",
            "gpt.gpt.wte.weight",
            "gpt.gpt_inference.transformer.ln_f.weight",
            "torch_mel_spectrogram_dvae.mel_stft.window",
            "xtts.torch_mel_spectrogram_style_encoder.mel_stft.window",
        ]
    );
    // The renamed tensors carry the file's values: legacy g is original0, v original1.
    let want = expected("model.pth");
    for (name, entry) in model.tensors() {
        assert_eq!(normalize_key(&entry.key).as_deref(), Some(name));
        let bytes = model.read(entry).unwrap();
        assert_eq!(
            compare(name, entry.dtype, &entry.shape, &bytes, &want[&entry.key]),
            0.0
        );
    }
    let source = |name: &str| {
        model
            .tensors()
            .find(|(n, _)| *n == name)
            .map(|(_, e)| e.key.clone())
            .unwrap()
    };
    let ups0 = "hifigan_decoder.waveform_decoder.ups.0";
    assert_eq!(
        source(&format!("{ups0}.parametrizations.weight.original0")),
        format!("{ups0}.weight_g")
    );
    assert_eq!(
        source(&format!("{ups0}.parametrizations.weight.original1")),
        format!("{ups0}.weight_v")
    );
}

#[test]
fn speakers_read_by_name_with_both_latents() {
    let want = expected("speakers_xtts.pth");
    let speakers = SpeakersPth::open(&fixtures().join("speakers_xtts.pth")).unwrap();
    let names: Vec<&str> = speakers.speakers().map(|(name, _)| name).collect();
    assert_eq!(names, ["Dr. Dot B", "Tiny Speaker A"]);
    for (name, voice) in speakers.speakers() {
        for (field, entry) in [
            ("gpt_cond_latent", voice.gpt_cond_latent),
            ("speaker_embedding", voice.speaker_embedding),
        ] {
            let key = format!("{name}.{field}");
            let bytes = speakers.read(entry).unwrap();
            assert_eq!(
                compare(&key, entry.dtype, &entry.shape, &bytes, &want[&key]),
                0.0
            );
        }
    }
    // model.pth is no speakers file: its keys are not <speaker>.<latent>.
    let err = SpeakersPth::open(&fixtures().join("model.pth"))
        .err()
        .unwrap()
        .to_string();
    assert!(
        err.contains("model.pth") && err.contains("expected <speaker>."),
        "{err}"
    );
}

// ---- hand-made archives: pickles torch would not write ----

/// A torch zip archive `archive/{data.pkl, data/<n>...}` holding `pickle` and `storages`.
fn torch_zip(pickle: &[u8], storages: &[&[u8]]) -> Vec<u8> {
    let mut zip = zip::ZipWriter::new(Cursor::new(Vec::new()));
    let stored =
        zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored);
    zip.start_file("archive/data.pkl", stored).unwrap();
    zip.write_all(pickle).unwrap();
    for (i, bytes) in storages.iter().enumerate() {
        zip.start_file(format!("archive/data/{i}"), stored).unwrap();
        zip.write_all(bytes).unwrap();
    }
    zip.start_file("archive/byteorder", stored).unwrap();
    zip.write_all(b"little").unwrap();
    zip.start_file("archive/version", stored).unwrap();
    zip.write_all(b"3\n").unwrap();
    zip.finish().unwrap().into_inner()
}

/// Protocol-2 pickle text for a `FloatStorage` tensor `[n]` on storage "0", as torch writes it.
fn tensor_pickle(n: u8) -> Vec<u8> {
    let mut p = b"ctorch._utils\n_rebuild_tensor_v2\n((X\x07\x00\x00\x00storagectorch\nFloatStorage\nX\x01\x00\x00\x000X\x03\x00\x00\x00cpuK".to_vec();
    p.extend([n, b't', b'Q', b'K', 0, b'K', n, 0x85, b'K', 1, 0x85, 0x89]);
    p.extend(b"ccollections\nOrderedDict\n)Rtq\x00R");
    p
}

fn two_floats() -> Vec<u8> {
    [1.5f32.to_le_bytes(), (-2f32).to_le_bytes()].concat()
}

/// `{"w": tensor, "x": <module>.<name>(command)}` in a torch zip, the call spelled with GLOBAL
/// or with STACK_GLOBAL; with `pop`, the call's result is discarded before it reaches the dict.
fn pickle_calling(
    module: &str,
    name: &str,
    command: &str,
    stack_global: bool,
    pop: bool,
) -> Vec<u8> {
    let short_string =
        |s: &str| [&[b'X'][..], &(s.len() as u32).to_le_bytes(), s.as_bytes()].concat();
    let mut pickle = b"\x80\x02}(X\x01\x00\x00\x00w".to_vec();
    pickle.extend(tensor_pickle(2));
    if pop {
        pickle.extend(b"X\x01\x00\x00\x00v");
    } else {
        pickle.extend(b"X\x01\x00\x00\x00x");
    }
    if stack_global {
        pickle.extend(short_string(module));
        pickle.extend(short_string(name));
        pickle.push(0x93);
    } else {
        pickle.extend(format!("c{module}\n{name}\n").as_bytes());
    }
    pickle.extend(short_string(command));
    pickle.extend(b"\x85R");
    if pop {
        // Drop the call's result and store a plain value under "v" instead.
        pickle.extend(b"0K\x01");
    }
    pickle.extend(b"u.");
    torch_zip(&pickle, &[&two_floats()])
}

#[test]
fn pickles_naming_anything_but_tensors_are_refused_and_never_run() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("ran");
    let command = format!("touch {}", marker.display());
    for (module, name) in [
        ("os", "system"),
        ("posix", "system"),
        ("builtins", "eval"),
        ("subprocess", "call"),
    ] {
        for stack_global in [false, true] {
            let bytes = pickle_calling(module, name, &command, stack_global, false);
            let err = PthCheckpoint::from_bytes(bytes, "evil.pth", None)
                .err()
                .unwrap()
                .to_string();
            assert!(
                err.starts_with("evil.pth: ") && err.contains(&format!("{module}.{name}")),
                "{err}"
            );
            assert!(!err.contains('\n'), "{err}");
        }
    }
    // A call whose result is popped never shows in the data: nothing is run either way, and only
    // the real tensor comes out.
    let bytes = pickle_calling("os", "system", &command, false, true);
    if let Ok(pth) = PthCheckpoint::from_bytes(bytes, "evil.pth", None) {
        let keys: Vec<&str> = pth.entries().iter().map(|e| e.key.as_str()).collect();
        assert_eq!(keys, ["w"]);
        assert_eq!(pth.read(&pth.entries()[0]).unwrap(), two_floats());
    }
    assert!(!marker.exists());

    // A tensor's storage handed to an unknown callable instead of `_rebuild_tensor_v2`: refused.
    let smuggled = String::from_utf8_lossy(&tensor_pickle(2))
        .replace("torch._utils\n_rebuild_tensor_v2", "evil\nrebuild")
        .into_bytes();
    let mut pickle = b"\x80\x02}(X\x01\x00\x00\x00w".to_vec();
    pickle.extend(smuggled);
    pickle.extend(b"u.");
    let bytes = torch_zip(&pickle, &[&two_floats()]);
    let err = PthCheckpoint::from_bytes(bytes, "evil.pth", None)
        .err()
        .unwrap()
        .to_string();
    assert!(err.starts_with("evil.pth: "), "{err}");
}

/// The entries of a zip archive, in order.
fn unzip(bytes: &[u8]) -> Vec<(String, Vec<u8>)> {
    let mut zip = zip::ZipArchive::new(Cursor::new(bytes)).unwrap();
    (0..zip.len())
        .map(|i| {
            let mut entry = zip.by_index(i).unwrap();
            let mut data = Vec::new();
            entry.read_to_end(&mut data).unwrap();
            (entry.name().to_string(), data)
        })
        .collect()
}

fn rezip(entries: &[(String, Vec<u8>)]) -> Vec<u8> {
    let mut zip = zip::ZipWriter::new(Cursor::new(Vec::new()));
    let stored =
        zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored);
    for (name, data) in entries {
        zip.start_file(name.as_str(), stored).unwrap();
        zip.write_all(data).unwrap();
    }
    zip.finish().unwrap().into_inner()
}

/// Opens `bytes` both ways and reads every tensor: any outcome but a panic is fine, and an
/// accepted tensor has the size its dtype and shape say.
fn read_everything(bytes: Vec<u8>) -> bool {
    let mut ok = false;
    for key in [Some("model"), None] {
        if let Ok(pth) = PthCheckpoint::from_bytes(bytes.clone(), "bad.pth", key) {
            for entry in pth.entries() {
                if let Ok(data) = pth.read(entry) {
                    assert_eq!(data.len(), entry.byte_len());
                    ok = true;
                }
            }
        }
    }
    ok
}

#[test]
fn truncated_and_corrupted_files_are_errors_not_panics() {
    let file = std::fs::read(fixtures().join("model.pth")).unwrap();
    for len in (0..file.len()).step_by(3) {
        let err = PthCheckpoint::from_bytes(file[..len].to_vec(), "cut.pth", Some("model"));
        let err = err.err().map(|e| e.to_string());
        assert!(err.is_some_and(|e| e.starts_with("cut.pth: ")), "{len}");
    }
    // Corrupt the pickle itself (re-zipped, so the archive's checksums still hold), byte by
    // byte, and the storages: torch's own layout with each byte changed in turn.
    let entries = unzip(&file);
    let pickle_at = entries
        .iter()
        .position(|(n, _)| n.ends_with("data.pkl"))
        .unwrap();
    let mut accepted = 0;
    for i in 0..entries[pickle_at].1.len() {
        for flip in [0x01u8, 0x80, 0xff] {
            let mut mutated = entries.clone();
            mutated[pickle_at].1[i] ^= flip;
            accepted += read_everything(rezip(&mutated)) as usize;
        }
    }
    let mut truncated = entries.clone();
    let storage = entries
        .iter()
        .position(|(n, _)| n.ends_with("data/8"))
        .unwrap();
    truncated[storage].1.truncate(5);
    let pth = PthCheckpoint::from_bytes(rezip(&truncated), "short.pth", Some("model"));
    let failures: Vec<String> = match pth {
        Ok(pth) => pth
            .entries()
            .iter()
            .filter_map(|e| pth.read(e).err().map(|e| e.to_string()))
            .collect(),
        Err(e) => vec![e.to_string()],
    };
    assert!(
        !failures.is_empty() && failures.iter().all(|e| e.starts_with("short.pth: ")),
        "{failures:?}"
    );
    // Most one-byte changes of a pickle still read (a changed value, a renamed key).
    assert!(accepted > 0);
    assert!(!read_everything(b"PK\x03\x04 not a zip".to_vec()));
    assert!(!read_everything(Vec::new()));
}

// ---- voxtral-tts convert ----

fn cli() -> Command {
    Command::new(env!("CARGO_BIN_EXE_voxtral-tts"))
}

/// A model folder: the fixtures plus a minimal config.json (as coqui writes it) and vocab.json.
fn xtts_folder(dir: &Path) {
    std::fs::create_dir_all(dir).unwrap();
    for name in ["model.pth", "speakers_xtts.pth"] {
        std::fs::copy(fixtures().join(name), dir.join(name)).unwrap();
    }
    // As Python's json writes coqui's unbounded training lengths.
    std::fs::write(
        dir.join("config.json"),
        r#"{"model": "xtts", "languages": ["en"], "max_audio_len": Infinity}"#,
    )
    .unwrap();
    std::fs::write(dir.join("vocab.json"), r#"{"model": {"type": "BPE"}}"#).unwrap();
}

fn one_line_error(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap();
    assert!(!out.status.success(), "should fail");
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    stderr
}

#[test]
fn convert_writes_safetensors_that_hold_what_torch_read() {
    let tmp = tempfile::tempdir().unwrap();
    let (model, out) = (tmp.path().join("xtts"), tmp.path().join("served"));
    xtts_folder(&model);
    let run = cli()
        .args(["convert", "--model"])
        .arg(&model)
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{stderr}");
    assert!(
        stderr.contains("19 tensors") && stderr.contains("2 studio voices"),
        "{stderr}"
    );

    let mut max_diff = 0f64;
    let want = expected("model.pth");
    let bytes = std::fs::read(out.join("model.safetensors")).unwrap();
    let st = SafeTensors::deserialize(&bytes).unwrap();
    let mut names = st.names();
    names.sort();
    let model_pth = ModelPth::open(&model.join("model.pth")).unwrap();
    assert_eq!(
        names,
        model_pth.tensors().map(|(n, _)| n).collect::<Vec<_>>()
    );
    for (name, entry) in model_pth.tensors() {
        let view = st.tensor(name).unwrap();
        let diff = compare(
            name,
            view.dtype(),
            view.shape(),
            view.data(),
            &want[&entry.key],
        );
        max_diff = max_diff.max(diff);
    }
    let want = expected("speakers_xtts.pth");
    let bytes = std::fs::read(out.join("speakers.safetensors")).unwrap();
    let st = SafeTensors::deserialize(&bytes).unwrap();
    assert_eq!(st.names().len(), want.len());
    for (key, want) in &want {
        let view = st.tensor(key).unwrap();
        max_diff = max_diff.max(compare(key, view.dtype(), view.shape(), view.data(), want));
    }
    assert_eq!(max_diff, 0.0);
    for name in ["config.json", "vocab.json"] {
        assert_eq!(
            std::fs::read(out.join(name)).unwrap(),
            std::fs::read(model.join(name)).unwrap()
        );
    }
    let mut written: Vec<String> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    written.sort();
    assert_eq!(
        written,
        [
            "config.json",
            "model.safetensors",
            "speakers.safetensors",
            "vocab.json"
        ]
    );

    // In place, without --out: the safetensors land beside the pickles.
    let run = cli()
        .args(["convert", "--model"])
        .arg(&model)
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    assert_eq!(
        std::fs::read(model.join("model.safetensors")).unwrap(),
        std::fs::read(out.join("model.safetensors")).unwrap()
    );
}

#[test]
fn convert_fails_with_one_line_that_names_the_file() {
    let tmp = tempfile::tempdir().unwrap();
    let model = tmp.path().join("xtts");
    xtts_folder(&model);
    let convert = || {
        let mut cmd = cli();
        cmd.args(["convert", "--model"]).arg(&model);
        cmd
    };

    let full = std::fs::read(model.join("model.pth")).unwrap();
    std::fs::write(model.join("model.pth"), &full[..full.len() / 2]).unwrap();
    let err = one_line_error(&mut convert());
    assert!(err.contains("model.pth: (zip)"), "{err}");
    assert!(!model.join("model.safetensors").exists());
    let elsewhere = tmp.path().join("not-created");
    one_line_error(convert().arg("--out").arg(&elsewhere));
    assert!(!elsewhere.exists());

    std::fs::write(model.join("model.pth"), &full).unwrap();
    std::fs::write(model.join("speakers_xtts.pth"), b"garbage").unwrap();
    let err = one_line_error(&mut convert());
    assert!(err.contains("speakers_xtts.pth"), "{err}");
    // Nothing half-written: both pickles are read before anything is written.
    let files = std::fs::read_dir(&model).unwrap().count();
    assert_eq!(files, 4);

    std::fs::write(model.join("config.json"), r#"{"model": "tortoise"}"#).unwrap();
    let err = one_line_error(&mut convert());
    assert!(
        err.contains("config.json") && err.contains("\"xtts\""),
        "{err}"
    );

    std::fs::remove_file(model.join("model.pth")).unwrap();
    std::fs::write(model.join("config.json"), r#"{"model": "xtts"}"#).unwrap();
    let err = one_line_error(&mut convert());
    assert!(err.contains("model.pth: missing"), "{err}");
}

#[test]
fn the_server_opens_the_converted_folder_and_refuses_bare_pickles() {
    let tmp = tempfile::tempdir().unwrap();
    let (model, out) = (tmp.path().join("xtts"), tmp.path().join("served"));
    xtts_folder(&model);
    let err = XttsFolder::open(&model).err().unwrap().to_string();
    assert!(
        err.contains("model.safetensors") && err.contains("voxtral-tts convert --model"),
        "{err}"
    );

    let run = cli()
        .args(["convert", "--model"])
        .arg(&model)
        .arg("--out")
        .arg(&out)
        .output()
        .unwrap();
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let folder = XttsFolder::open(&out).unwrap();
    let model_pth = ModelPth::open(&model.join("model.pth")).unwrap();
    let want = expected("model.pth");
    for (name, entry) in model_pth.tensors() {
        if entry.dtype == safetensors::Dtype::F32 {
            let values = folder.weights.load_f32(name, &entry.shape).unwrap();
            let got: Vec<f64> = values.iter().map(|&v| v as f64).collect();
            assert_eq!(got, want[&entry.key].values, "{name}");
        }
    }
    let want = expected("speakers_xtts.pth");
    assert_eq!(folder.speakers.len(), 2);
    for (name, voice) in &folder.speakers {
        let latent = &want[&format!("{name}.gpt_cond_latent")];
        let embedding = &want[&format!("{name}.speaker_embedding")];
        assert_eq!(voice.latent_shape.to_vec(), latent.shape);
        let as_f64 = |v: &[f32]| v.iter().map(|&x| x as f64).collect::<Vec<_>>();
        assert_eq!(as_f64(&voice.gpt_cond_latent), latent.values);
        assert_eq!(as_f64(&voice.speaker_embedding), embedding.values);
    }

    // Studio voices are optional; a converted folder without its pickles serves.
    std::fs::remove_file(out.join("speakers.safetensors")).unwrap();
    assert!(XttsFolder::open(&out).unwrap().speakers.is_empty());
    std::fs::write(out.join("model.safetensors"), b"truncated").unwrap();
    let err = XttsFolder::open(&out).err().unwrap().to_string();
    assert!(err.contains("model.safetensors"), "{err}");
}
