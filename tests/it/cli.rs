//! The `voxtral-tts` command line, run as a user would.

use std::path::Path;
use std::process::Command;
use voxtral_tts::models::qwen3_tts::testkit::{
    cached_endless_test_model as cached_endless_qwen3_test_model, Qwen3Preset,
};
use voxtral_tts::models::voxtral_realtime::testkit::cached_test_model as cached_stt_test_model;
use voxtral_tts::models::voxtral_tts::testkit::cached_endless_test_model;
use voxtral_tts::models::voxtral_tts::testkit::Preset;

fn cli() -> Command {
    Command::new(env!("CARGO_BIN_EXE_voxtral-tts"))
}

fn run_ok(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn run_err(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap();
    assert!(!out.status.success(), "should fail");
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert_eq!(
        stderr.trim().lines().count(),
        1,
        "one-line error expected: {stderr}"
    );
    stderr
}

/// The tiny checkpoint that never says END_AUDIO: runs (the bench's warm-up steps included) are
/// as long as asked on every CPU.
fn model() -> String {
    cached_endless_test_model(Preset::Tiny, 0)
        .unwrap()
        .display()
        .to_string()
}

#[test]
fn synth_writes_a_24khz_mono_16bit_wav_and_the_codes() {
    let tmp = tempfile::tempdir().unwrap();
    let wav = tmp.path().join("out.wav");
    let codes = tmp.path().join("codes.json");
    run_ok(
        cli()
            .args([
                "synth",
                "--model",
                &model(),
                "--voice",
                "neutral_female",
                "--text",
                "Hello.",
            ])
            .args([
                "--output".as_ref(),
                wav.as_os_str(),
                "--max-frames".as_ref(),
                "12".as_ref(),
                "--seed".as_ref(),
                "3".as_ref(),
                "--dump-codes".as_ref(),
                codes.as_os_str(),
            ]),
    );
    let reader = hound::WavReader::open(&wav).unwrap();
    let spec = reader.spec();
    assert_eq!(
        (spec.channels, spec.sample_rate, spec.bits_per_sample),
        (1, 24_000, 16)
    );
    let dump: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&codes).unwrap()).unwrap();
    let frames = dump["codes"].as_array().unwrap();
    assert!(!frames.is_empty() && frames.len() <= 12);
    assert_eq!(reader.len() as usize, frames.len() * 1920);
    assert!(
        frames.iter().all(|f| f.as_array().unwrap().len() == 9),
        "1 semantic + 8 acoustic codes per frame"
    );
    assert_eq!(dump["prompt_ids"][0], 1);
}

#[test]
fn same_seed_same_audio_f32_and_bf16() {
    let tmp = tempfile::tempdir().unwrap();
    for dtype in ["f32", "bf16"] {
        let mut outputs = Vec::new();
        for i in 0..2 {
            let wav = tmp.path().join(format!("{dtype}{i}.wav"));
            run_ok(
                cli()
                    .args([
                        "synth",
                        "--model",
                        &model(),
                        "--voice",
                        "fr_male",
                        "--text",
                        "Bonjour.",
                        "--seed",
                        "9",
                    ])
                    .args(["--max-frames", "6", "--dtype", dtype, "--device", "cpu"])
                    .arg("--output")
                    .arg(&wav),
            );
            outputs.push(std::fs::read(&wav).unwrap());
        }
        assert_eq!(
            outputs[0], outputs[1],
            "{dtype}: a seeded run is deterministic"
        );
    }
}

#[test]
fn voices_lists_the_presets() {
    let out = run_ok(cli().args(["voices", "--model", &model()]));
    let names: Vec<&str> = out.lines().collect();
    assert_eq!(names.len(), 20);
    assert!(names.contains(&"casual_female") && names.contains(&"hi_female"));
}

#[test]
fn bad_input_is_a_one_line_error() {
    let tmp = tempfile::tempdir().unwrap();
    let wav = tmp.path().join("x.wav");
    let base = |voice: &str, text: &str| {
        let mut c = cli();
        c.args([
            "synth",
            "--model",
            &model(),
            "--voice",
            voice,
            "--text",
            text,
        ])
        .arg("--output")
        .arg(&wav);
        c
    };
    assert!(run_err(&mut base("nobody", "Hi.")).contains("Unknown voice 'nobody'"));
    assert!(run_err(&mut base("casual_male", "")).contains("empty"));
    assert!(run_err(base("casual_male", "Hi.").args(["--max-frames", "0"])).contains("max_frames"));
    assert!(run_err(base("casual_male", "Hi.").args(["--device", "cuda:7"])).contains("cuda:7"));
    assert!(run_err(cli().args(["voices", "--model", "/nonexistent"]))
        .contains("/nonexistent/params.json"));
    assert!(!wav.exists(), "no partial output on failure");
}

#[test]
fn make_test_model_is_deterministic_per_seed() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b, c) = (
        tmp.path().join("a"),
        tmp.path().join("b"),
        tmp.path().join("c"),
    );
    for (dir, seed) in [(&a, "5"), (&b, "5"), (&c, "6")] {
        run_ok(
            Command::new(env!("CARGO_BIN_EXE_make-test-model"))
                .args(["--preset", "tiny", "--seed", seed])
                .arg("--out")
                .arg(dir),
        );
    }
    let read = |d: &Path, f: &str| std::fs::read(d.join(f)).unwrap();
    for f in [
        "consolidated.safetensors",
        "tekken.json",
        "params.json",
        "voice_embedding/es_female.pt",
    ] {
        assert_eq!(read(&a, f), read(&b, f), "{f}");
    }
    assert_ne!(
        read(&a, "consolidated.safetensors"),
        read(&c, "consolidated.safetensors")
    );
}

/// `bench` says which kernel variant runs and what the CPU's FMA peak is (at the start, and
/// sampled between each batch size's steps), and reports the
/// arithmetic rate of prefill and of batched steps against it, the step's products by their
/// rows per weight read too (the tiny model's: one stream's backbone rows, and 2 streams' 12
/// flow-head rows).
#[test]
fn bench_names_the_kernel_variant_and_measures_the_fma_peak() {
    let out = run_ok(cli().args([
        "bench",
        "--model",
        &model(),
        "--frames",
        "2",
        "--threads",
        "1",
        "--batch",
        "1,2",
    ]));
    let line = |start: &str| {
        out.lines()
            .find(|l| l.starts_with(start))
            .unwrap_or_else(|| panic!("no {start} line in:\n{out}"))
            .to_string()
    };
    let active = voxtral_tts::tensor::cpu_gemv::Variant::active();
    assert!(line("kernel").contains(active.name()), "{out}");
    if active != voxtral_tts::tensor::cpu_gemv::Variant::Portable {
        assert!(line("peak").contains("GFLOP/s f32 FMA"), "{out}");
        assert!(line("prefill").contains("of the f32 FMA peak"), "{out}");
        assert!(line("batch   2").contains("of the f32 FMA peak"), "{out}");
        let by_rows: Vec<&str> = out
            .lines()
            .filter(|l| l.starts_with("  products by rows per weight read: "))
            .collect();
        assert_eq!(by_rows.len(), 2, "one per batch size:\n{out}");
        let sampled = out
            .lines()
            .filter(|l| l.starts_with("  f32 FMA peak between the steps "))
            .count();
        assert_eq!(sampled, 2, "one per batch size:\n{out}");
        assert!(
            by_rows[0].contains(" 1 row ") && by_rows[1].contains(" 9-24 rows "),
            "{out}"
        );
    }
}

/// `bench --json` writes what it prints: the figures per frame, the floors and each batch
/// size's step, with the weights' format.
#[test]
fn bench_writes_its_figures_as_json() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bench.json");
    let out = run_ok(cli().args([
        "bench",
        "--model",
        &model(),
        "--frames",
        "2",
        "--threads",
        "1",
        "--batch",
        "1,2",
        "--quantize",
        "q8",
        "--json",
        path.to_str().unwrap(),
    ]));
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert_eq!(report["family"], "voxtral-tts");
    assert_eq!(report["weights"], "q8");
    let total = report["ms_per_frame"]["total"].as_f64().unwrap();
    let printed = format!("total      {total:.2} ms/frame");
    assert!(out.contains(&printed), "{printed} not in:\n{out}");
    assert!(report["floors"]["read"]["backbone_ms"].as_f64().unwrap() > 0.0);
    let batch = report["batch"].as_array().unwrap();
    assert_eq!(batch.len(), 2);
    assert_eq!(batch[1]["streams"], 2);
    assert!(batch[1]["frames_per_s"].as_f64().unwrap() > 0.0);
}

/// `bench --json` of a family benched through the engine interface (Qwen3-TTS) and of speech
/// to text: the figures it printed, and scripts/bench-charts.py draws all three families'.
#[test]
fn bench_of_every_family_writes_json_that_the_charts_read() {
    let dir = tempfile::tempdir().unwrap();
    let qwen3 = cached_endless_qwen3_test_model(Qwen3Preset::TinyCustomVoice, 0).unwrap();
    let stt = cached_stt_test_model(0).unwrap();
    let bench = |model: &Path, name: &str, extra: &[&str]| {
        let path = dir.path().join(name);
        let out = run_ok(
            cli()
                .args(["bench", "--model", model.to_str().unwrap(), "--frames", "2"])
                .args([
                    "--threads",
                    "1",
                    "--batch",
                    "1,2",
                    "--json",
                    path.to_str().unwrap(),
                ])
                .args(extra),
        );
        let report: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let batch = report["batch"].as_array().unwrap();
        assert_eq!(batch.len(), 2, "{report}");
        assert_eq!(batch[1]["streams"], 2);
        assert!(batch[1]["frames_per_s"].as_f64().unwrap() > 0.0);
        assert!(report["ms_per_frame"]["total"].as_f64().unwrap() > 0.0);
        (out, report, path)
    };
    let (out, report, qwen3_json) = bench(&qwen3, "qwen3.json", &["--quantize", "q4"]);
    assert_eq!(report["family"], "qwen3-tts");
    assert_eq!(report["weights"], "q4");
    let step = report["batch"][0]["ms_per_step"].as_f64().unwrap();
    assert!(
        out.contains(&format!("batch 1    {step:.1} ms/step")),
        "{out}"
    );
    let (out, report, stt_json) = bench(&stt, "stt.json", &["--seconds", "1"]);
    assert_eq!(report["family"], "voxtral-realtime");
    assert_eq!(report["weights"], "bf16");
    let step = report["ms_per_frame"]["total"].as_f64().unwrap();
    assert!(
        out.contains(&format!("batch 1    {step:.1} ms/step")),
        "{out}"
    );
    let voxtral_json = dir.path().join("voxtral.json");
    run_ok(
        cli()
            .args([
                "bench",
                "--model",
                &model(),
                "--frames",
                "2",
                "--threads",
                "1",
            ])
            .args(["--json", voxtral_json.to_str().unwrap()]),
    );
    let prefix = dir.path().join("chart");
    let charts = Command::new("python3")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/bench-charts.py"))
        .args(["--title", "tiny checkpoints", prefix.to_str().unwrap()])
        .args([&voxtral_json, &qwen3_json, &stt_json])
        .output()
        .unwrap();
    assert!(charts.status.success(), "{charts:?}");
    for chart in ["chart-per-frame.svg", "chart-streams.svg"] {
        let svg = std::fs::read_to_string(dir.path().join(chart)).unwrap();
        assert!(
            svg.starts_with("<svg") && svg.contains("qwen3-tts q4"),
            "{chart}: {svg}"
        );
    }
}

/// `make serve` without MODEL and without a reachable model hub stops at once (before setup or
/// a build) with one line saying what to pass, and leaves nothing in the cache folder.
#[test]
fn make_serve_without_model_or_network_says_what_to_pass() {
    let cache = tempfile::tempdir().unwrap();
    let out = Command::new("make")
        .args(["-s", "--no-print-directory", "serve"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env("VOXTRAL_MODEL_CACHE", cache.path())
        // A closed port: the hub is unreachable.
        .env("HF_ENDPOINT", "http://127.0.0.1:9")
        .env_remove("MODEL")
        // As a top-level make, also when the suite itself runs under `make test`.
        .env_remove("MAKELEVEL")
        .env_remove("MAKEFLAGS")
        .env_remove("MFLAGS")
        .output()
        .expect("make is needed for this test");
    assert!(!out.status.success());
    assert!(out.stdout.is_empty());
    let stderr = String::from_utf8(out.stderr).unwrap();
    let ours: Vec<&str> = stderr
        .lines()
        .filter(|l| !l.starts_with("make: ***"))
        .collect();
    assert_eq!(ours.len(), 1, "{stderr}");
    assert!(
        ours[0].starts_with("make serve: no MODEL given and http://127.0.0.1:9 cannot be reached")
            && ours[0]
                .ends_with("pass a model folder: make serve MODEL=/path/to/Voxtral-4B-TTS-2603"),
        "{stderr}"
    );
    assert_eq!(std::fs::read_dir(cache.path()).unwrap().count(), 0);
}

/// The Voxtral Realtime goldens' signal as a 32-bit float WAV at 16 kHz (no rounding), and
/// the goldens' case.
fn realtime_golden_wav(dir: &Path) -> (std::path::PathBuf, serde_json::Value) {
    let goldens = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/goldens/voxtral_realtime");
    let case: serde_json::Value =
        serde_json::from_slice(&std::fs::read(goldens.join("case.json")).unwrap()).unwrap();
    let left = case["left_pad_samples"].as_u64().unwrap() as usize;
    let samples = case["signal"]["samples"].as_u64().unwrap() as usize;
    let padded = std::fs::read(goldens.join("padded.f32")).unwrap();
    let data = &padded[4 * left..4 * (left + samples)];
    let mut wav = b"RIFF".to_vec();
    wav.extend((36 + data.len() as u32).to_le_bytes());
    wav.extend(b"WAVEfmt ");
    wav.extend(16u32.to_le_bytes()); // fmt chunk size
    wav.extend(3u16.to_le_bytes()); // IEEE float
    wav.extend(1u16.to_le_bytes()); // mono
    wav.extend(16_000u32.to_le_bytes()); // sample rate
    wav.extend(64_000u32.to_le_bytes()); // bytes per second
    wav.extend(4u16.to_le_bytes()); // bytes per frame
    wav.extend(32u16.to_le_bytes()); // bits per sample
    wav.extend(b"data");
    wav.extend((data.len() as u32).to_le_bytes());
    wav.extend(data);
    let path = dir.join("speech.wav");
    std::fs::write(&path, wav).unwrap();
    (path, case)
}

#[test]
fn transcribe_prints_the_text_and_dumps_the_golden_tokens() {
    let tmp = tempfile::tempdir().unwrap();
    let (wav, case) = realtime_golden_wav(tmp.path());
    let model = cached_stt_test_model(case["seed"].as_u64().unwrap()).unwrap();
    let tokens = tmp.path().join("tokens.json");
    let stdout = run_ok(
        cli()
            .args(["transcribe", "--dtype", "f32", "--device", "cpu", "--model"])
            .arg(&model)
            .arg("--input")
            .arg(&wav)
            .arg("--dump-tokens")
            .arg(&tokens),
    );
    assert_eq!(stdout, format!("{}\n", case["text"].as_str().unwrap()));
    let dumped: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&tokens).unwrap()).unwrap();
    assert_eq!(dumped["tokens"], case["greedy_tokens"]);

    // Not audio, a missing file, a folder of another family: one line each, non-zero exit.
    let junk = tmp.path().join("junk.wav");
    std::fs::write(&junk, b"this is not audio at all").unwrap();
    let err = run_err(
        cli()
            .args(["transcribe", "--device", "cpu", "--model"])
            .arg(&model)
            .arg("--input")
            .arg(&junk),
    );
    assert!(err.contains("junk.wav"), "{err}");
    let err = run_err(
        cli()
            .args(["transcribe", "--device", "cpu", "--model"])
            .arg(&model)
            .arg("--input")
            .arg(tmp.path().join("missing.wav")),
    );
    assert!(err.contains("missing.wav"), "{err}");
    let err = run_err(
        cli()
            .args(["transcribe", "--device", "cpu", "--model", &self::model()])
            .arg("--input")
            .arg(&wav),
    );
    assert!(err.contains("text-to-speech"), "{err}");
}
