//! Audio input (`voxtral_tts::audio::input`): every container and codec produced by ffmpeg is
//! decoded, checked for its rate, duration and content (a 440 Hz sine), resampled to the
//! rates the models want; truncated, corrupted and hostile inputs end in a clean error or a
//! shorter clip, never a panic or a hang.
//!
//! ffmpeg is required (Debian: `apt-get install -y ffmpeg`, with libmp3lame, libopus and
//! libvorbis, as Debian's build has); without it the tests fail with a message saying so.

use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use voxtral_tts::audio::input::{
    decode, decode_to_rate, detect_format, resample, AudioCodec, AudioInputError, ContainerFormat,
    DecodeLimits, DecodedAudio,
};

const SECONDS: f64 = 1.5;
const FREQ: f64 = 440.0;
const LIMITS: DecodeLimits = DecodeLimits::new(16 << 20, Duration::from_secs(60));

/// One file ffmpeg makes, and what decoding it must give.
struct Case {
    name: &'static str,
    /// Rate of the generated signal.
    source_rate: u32,
    stereo: bool,
    /// ffmpeg output options (codec, container).
    args: &'static [&'static str],
    /// Written to a pipe rather than a file (no seeking back: unknown sizes in the header).
    pipe: bool,
    format: ContainerFormat,
    codec: AudioCodec,
    /// Rate the decoder reports (Opus always decodes at 48 kHz).
    rate: u32,
    /// How far the duration may be from 1.5 s (codec padding not recorded in the file).
    tolerance: f64,
    /// The mono signal's expected amplitude is checked this closely.
    lossless: bool,
}

const CASES: &[Case] = &[
    Case {
        name: "wav_s16_44k_mono",
        source_rate: 44_100,
        stereo: false,
        args: &["-c:a", "pcm_s16le", "-f", "wav"],
        pipe: false,
        format: ContainerFormat::Wav,
        codec: AudioCodec::Pcm,
        rate: 44_100,
        tolerance: 0.0,
        lossless: true,
    },
    Case {
        name: "wav_s24_48k_stereo",
        source_rate: 48_000,
        stereo: true,
        args: &["-c:a", "pcm_s24le", "-f", "wav"],
        pipe: false,
        format: ContainerFormat::Wav,
        codec: AudioCodec::Pcm,
        rate: 48_000,
        tolerance: 0.0,
        lossless: true,
    },
    Case {
        name: "wav_s32_48k_mono",
        source_rate: 48_000,
        stereo: false,
        args: &["-c:a", "pcm_s32le", "-f", "wav"],
        pipe: false,
        format: ContainerFormat::Wav,
        codec: AudioCodec::Pcm,
        rate: 48_000,
        tolerance: 0.0,
        lossless: true,
    },
    Case {
        name: "wav_f32_44k_stereo",
        source_rate: 44_100,
        stereo: true,
        args: &["-c:a", "pcm_f32le", "-f", "wav"],
        pipe: false,
        format: ContainerFormat::Wav,
        codec: AudioCodec::Pcm,
        rate: 44_100,
        tolerance: 0.0,
        lossless: true,
    },
    Case {
        name: "wav_f64_24k_mono",
        source_rate: 24_000,
        stereo: false,
        args: &["-c:a", "pcm_f64le", "-f", "wav"],
        pipe: false,
        format: ContainerFormat::Wav,
        codec: AudioCodec::Pcm,
        rate: 24_000,
        tolerance: 0.0,
        lossless: true,
    },
    Case {
        // Telephone audio: 8 kHz µ-law (companded, so not lossless).
        name: "wav_mulaw_8k_mono",
        source_rate: 8_000,
        stereo: false,
        args: &["-c:a", "pcm_mulaw", "-f", "wav"],
        pipe: false,
        format: ContainerFormat::Wav,
        codec: AudioCodec::Pcm,
        rate: 8_000,
        tolerance: 0.0,
        lossless: false,
    },
    Case {
        // Streamed WAV: ffmpeg cannot rewrite the sizes, so the header claims 4 GiB.
        name: "wav_s16_16k_piped",
        source_rate: 16_000,
        stereo: false,
        args: &["-c:a", "pcm_s16le", "-f", "wav"],
        pipe: true,
        format: ContainerFormat::Wav,
        codec: AudioCodec::Pcm,
        rate: 16_000,
        tolerance: 0.0,
        lossless: true,
    },
    Case {
        // ID3v2 tag, then a LAME/Xing frame recording the encoder delay and padding.
        name: "mp3_44k_stereo",
        source_rate: 44_100,
        stereo: true,
        args: &["-c:a", "libmp3lame", "-b:a", "128k", "-f", "mp3"],
        pipe: false,
        format: ContainerFormat::Mp3,
        codec: AudioCodec::Mp3,
        rate: 44_100,
        tolerance: 0.002,
        lossless: false,
    },
    Case {
        // Bare frames (no tag, no LAME frame): detected by the frame header; the encoder
        // delay (576 + 529) and padding are not recorded, so up to ~2 frames too long.
        name: "mp3_24k_mono_bare",
        source_rate: 24_000,
        stereo: false,
        args: &[
            "-c:a",
            "libmp3lame",
            "-b:a",
            "64k",
            "-write_xing",
            "0",
            "-id3v2_version",
            "0",
            "-f",
            "mp3",
        ],
        pipe: false,
        format: ContainerFormat::Mp3,
        codec: AudioCodec::Mp3,
        rate: 24_000,
        tolerance: 0.15,
        lossless: false,
    },
    Case {
        name: "flac_44k_stereo",
        source_rate: 44_100,
        stereo: true,
        args: &["-c:a", "flac", "-f", "flac"],
        pipe: false,
        format: ContainerFormat::Flac,
        codec: AudioCodec::Flac,
        rate: 44_100,
        tolerance: 0.0,
        lossless: true,
    },
    Case {
        name: "flac_s24_48k_mono",
        source_rate: 48_000,
        stereo: false,
        args: &[
            "-c:a",
            "flac",
            "-sample_fmt",
            "s32",
            "-bits_per_raw_sample",
            "24",
            "-f",
            "flac",
        ],
        pipe: false,
        format: ContainerFormat::Flac,
        codec: AudioCodec::Flac,
        rate: 48_000,
        tolerance: 0.0,
        lossless: true,
    },
    Case {
        // 44.1 kHz input: libopus encodes at 48 kHz; the OpusHead pre-skip is dropped and the
        // last page's granule position trims the end.
        name: "ogg_opus_44k_stereo",
        source_rate: 44_100,
        stereo: true,
        args: &["-c:a", "libopus", "-b:a", "64k", "-f", "ogg"],
        pipe: false,
        format: ContainerFormat::Ogg,
        codec: AudioCodec::Opus,
        rate: 48_000,
        tolerance: 0.001,
        lossless: false,
    },
    Case {
        name: "ogg_opus_16k_mono",
        source_rate: 16_000,
        stereo: false,
        args: &["-c:a", "libopus", "-b:a", "24k", "-f", "ogg"],
        pipe: false,
        format: ContainerFormat::Ogg,
        codec: AudioCodec::Opus,
        rate: 48_000,
        tolerance: 0.001,
        lossless: false,
    },
    Case {
        // WebM's end padding (DiscardPadding) is not read: up to one 20 ms packet more.
        name: "webm_opus_48k_stereo",
        source_rate: 48_000,
        stereo: true,
        args: &["-c:a", "libopus", "-b:a", "64k", "-f", "webm"],
        pipe: false,
        format: ContainerFormat::WebM,
        codec: AudioCodec::Opus,
        rate: 48_000,
        tolerance: 0.021,
        lossless: false,
    },
    Case {
        // As a browser's MediaRecorder sends it: unknown segment and cluster sizes, no cues.
        name: "webm_opus_48k_mono_piped",
        source_rate: 48_000,
        stereo: false,
        args: &["-c:a", "libopus", "-b:a", "32k", "-f", "webm"],
        pipe: true,
        format: ContainerFormat::WebM,
        codec: AudioCodec::Opus,
        rate: 48_000,
        tolerance: 0.021,
        lossless: false,
    },
    Case {
        name: "webm_vorbis_44k_mono",
        source_rate: 44_100,
        stereo: false,
        args: &["-c:a", "libvorbis", "-q:a", "4", "-f", "webm"],
        pipe: false,
        format: ContainerFormat::WebM,
        codec: AudioCodec::Vorbis,
        rate: 44_100,
        tolerance: 0.03,
        lossless: false,
    },
    Case {
        name: "mka_flac_48k_stereo",
        source_rate: 48_000,
        stereo: true,
        args: &["-c:a", "flac", "-f", "matroska"],
        pipe: false,
        format: ContainerFormat::WebM,
        codec: AudioCodec::Flac,
        rate: 48_000,
        tolerance: 0.0,
        lossless: true,
    },
    Case {
        name: "mka_pcm_s16_16k_mono",
        source_rate: 16_000,
        stereo: false,
        args: &["-c:a", "pcm_s16le", "-f", "matroska"],
        pipe: false,
        format: ContainerFormat::WebM,
        codec: AudioCodec::Pcm,
        rate: 16_000,
        tolerance: 0.0,
        lossless: true,
    },
    Case {
        name: "ogg_vorbis_44k_stereo",
        source_rate: 44_100,
        stereo: true,
        args: &["-c:a", "libvorbis", "-q:a", "4", "-f", "ogg"],
        pipe: false,
        format: ContainerFormat::Ogg,
        codec: AudioCodec::Vorbis,
        rate: 44_100,
        tolerance: 0.001,
        lossless: false,
    },
    Case {
        name: "ogg_flac_48k_mono",
        source_rate: 48_000,
        stereo: false,
        args: &["-c:a", "flac", "-f", "ogg"],
        pipe: false,
        format: ContainerFormat::Ogg,
        codec: AudioCodec::Flac,
        rate: 48_000,
        tolerance: 0.0,
        lossless: true,
    },
];

/// Left 0.5 sin, right 0.3 sin: the mono mean is 0.4 sin. Mono cases are 0.4 sin.
const MONO_AMPLITUDE: f64 = 0.4;

fn ffmpeg(case: &Case, dir: &std::path::Path) -> Vec<u8> {
    let expr = if case.stereo {
        format!("0.5*sin(2*PI*{FREQ}*t)|0.3*sin(2*PI*{FREQ}*t)")
    } else {
        format!("{MONO_AMPLITUDE}*sin(2*PI*{FREQ}*t)")
    };
    let source = format!("aevalsrc=exprs='{expr}':s={}:d={SECONDS}", case.source_rate);
    let mut cmd = Command::new("ffmpeg");
    cmd.args([
        "-hide_banner",
        "-loglevel",
        "error",
        "-nostdin",
        "-f",
        "lavfi",
        "-i",
    ])
    .arg(&source)
    .args(["-map_metadata", "-1"])
    .args(case.args);
    let out = if case.pipe {
        cmd.arg("pipe:1")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let o = cmd.output().expect("ffmpeg runs");
        assert!(
            o.status.success(),
            "{}: {}",
            case.name,
            String::from_utf8_lossy(&o.stderr)
        );
        o.stdout
    } else {
        let path = dir.join(case.name);
        cmd.arg("-y").arg(&path);
        let o = cmd.output().unwrap_or_else(|e| {
            panic!(
                "ffmpeg is required by the audio input tests ({e}); \
                 Debian/Ubuntu: apt-get install -y ffmpeg"
            )
        });
        assert!(
            o.status.success(),
            "{}: {}",
            case.name,
            String::from_utf8_lossy(&o.stderr)
        );
        std::fs::read(&path).unwrap()
    };
    assert!(!out.is_empty(), "{}: ffmpeg wrote nothing", case.name);
    out
}

/// Every case's file, made once (in parallel) for all tests of this binary.
fn files() -> &'static [Vec<u8>] {
    static FILES: OnceLock<Vec<Vec<u8>>> = OnceLock::new();
    FILES.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        std::thread::scope(|s| {
            let handles: Vec<_> = CASES
                .iter()
                .map(|c| {
                    let dir = dir.path();
                    s.spawn(move || ffmpeg(c, dir))
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        })
    })
}

fn case_index(name: &str) -> usize {
    CASES.iter().position(|c| c.name == name).unwrap()
}

/// Amplitude of the `FREQ` component and the share of the signal's power it holds, over the
/// middle 80 % (away from codec edge effects).
fn tone(samples: &[f32], rate: u32) -> (f64, f64) {
    let (a, b) = (samples.len() / 10, samples.len() * 9 / 10);
    let x = &samples[a..b];
    let w = 2.0 * std::f64::consts::PI * FREQ / f64::from(rate);
    let (mut c, mut s, mut p) = (0.0, 0.0, 0.0);
    for (i, &v) in x.iter().enumerate() {
        let v = f64::from(v);
        let t = (a + i) as f64;
        c += v * (w * t).cos();
        s += v * (w * t).sin();
        p += v * v;
    }
    let n = x.len() as f64;
    let amp = 2.0 * (c * c + s * s).sqrt() / n;
    let power = p / n;
    (amp, (amp * amp / 2.0) / power)
}

fn check_tone(name: &str, a: &DecodedAudio, lossless: bool) {
    let (amp, purity) = tone(&a.samples, a.sample_rate);
    assert!(
        purity > 0.98,
        "{name} at {} Hz: 440 Hz holds only {purity:.3} of the power",
        a.sample_rate
    );
    let tol = if lossless { 0.002 } else { 0.05 };
    assert!(
        (amp - MONO_AMPLITUDE).abs() < tol,
        "{name} at {} Hz: amplitude {amp:.4}, want {MONO_AMPLITUDE}",
        a.sample_rate
    );
}

#[test]
fn every_format_decodes_with_its_rate_duration_and_content() {
    for (case, bytes) in CASES.iter().zip(files()) {
        assert_eq!(detect_format(bytes), Some(case.format), "{}", case.name);
        let t = Instant::now();
        let a = decode(bytes, &LIMITS).unwrap_or_else(|e| panic!("{}: {e}", case.name));
        let took = t.elapsed();
        assert_eq!(a.format, case.format, "{}", case.name);
        assert_eq!(a.codec, case.codec, "{}", case.name);
        assert_eq!(a.sample_rate, case.rate, "{}", case.name);
        assert_eq!(
            a.source_channels,
            if case.stereo { 2 } else { 1 },
            "{}",
            case.name
        );
        let secs = a.duration().as_secs_f64();
        // Lossless: exact to the sample. Otherwise never shorter than the source by more
        // than a sample, and at most `tolerance` longer.
        let sample = 1.0 / f64::from(a.sample_rate);
        assert!(
            secs >= SECONDS - sample - 1e-9 && secs <= SECONDS + case.tolerance + sample,
            "{}: {secs:.5} s, want {SECONDS} s (+{} s)",
            case.name,
            case.tolerance
        );
        check_tone(case.name, &a, case.lossless);
        assert!(a.samples.iter().all(|s| s.is_finite()));
        eprintln!(
            "{:<26} {:>6} Hz {:.4} s  decoded in {took:?}",
            case.name, a.sample_rate, secs
        );
    }
}

#[test]
fn every_format_resamples_to_model_rates() {
    for (case, bytes) in CASES.iter().zip(files()) {
        for rate in [16_000, 24_000] {
            let a = decode_to_rate(bytes, rate, &LIMITS)
                .unwrap_or_else(|e| panic!("{} to {rate}: {e}", case.name));
            assert_eq!(a.sample_rate, rate);
            let secs = a.duration().as_secs_f64();
            assert!(
                (secs - SECONDS).abs() <= case.tolerance + 2.0 / f64::from(rate) + 1e-9,
                "{} at {rate} Hz: {secs:.5} s",
                case.name
            );
            check_tone(case.name, &a, case.lossless);
        }
    }
}

#[test]
fn resampling_a_decoded_clip_keeps_it_aligned() {
    // The 48 kHz WAV, resampled, against the same sine generated at the target rate.
    let i = case_index("wav_s32_48k_mono");
    let a = decode(&files()[i], &LIMITS).unwrap();
    for rate in [16_000u32, 24_000, 44_100] {
        let y = resample(&a.samples, a.sample_rate, rate).unwrap();
        let w = 2.0 * std::f64::consts::PI * FREQ / f64::from(rate);
        let err = (y.len() / 10..y.len() * 9 / 10)
            .map(|n| (f64::from(y[n]) - MONO_AMPLITUDE * (w * n as f64).sin()).abs())
            .fold(0.0, f64::max);
        assert!(err < 2e-3, "48 kHz -> {rate} Hz: max error {err}");
    }
    assert_eq!(resample(&a.samples, 48_000, 48_000).unwrap(), a.samples);
}

/// A refusal fit for a 400. A caught decoder panic counts (that is what the catch is for:
/// e.g. symphonia's FLAC decoder adds with overflow on some corrupted frames, which panics in
/// builds with overflow checks); a client error must never come out as `Internal`.
fn is_clean_error(e: &AudioInputError) -> bool {
    if matches!(e, AudioInputError::DecoderPanic { .. }) {
        eprintln!("caught a decoder panic: {e}");
    }
    e.is_client_error() && !e.to_string().is_empty()
}

#[test]
fn truncated_files_error_or_decode_shorter() {
    for (case, bytes) in CASES.iter().zip(files()) {
        for cut in [bytes.len() / 2, bytes.len() * 9 / 10, 60, 5] {
            let part = &bytes[..cut.min(bytes.len())];
            let t = Instant::now();
            match decode(part, &LIMITS) {
                Ok(a) => {
                    let secs = a.duration().as_secs_f64();
                    assert!(
                        secs < SECONDS + case.tolerance,
                        "{} cut at {cut}: {secs} s",
                        case.name
                    );
                    if cut == bytes.len() / 2 && secs > 0.3 {
                        check_tone(case.name, &a, case.lossless);
                    }
                    eprintln!("{} cut at {cut}: {secs:.3} s", case.name);
                }
                Err(e) => {
                    assert!(is_clean_error(&e), "{} cut at {cut}: {e:?}", case.name);
                    eprintln!("{} cut at {cut}: {e}", case.name);
                }
            }
            assert!(
                t.elapsed() < Duration::from_secs(2),
                "{} cut at {cut}: slow",
                case.name
            );
        }
    }
}

/// xorshift64*: deterministic bytes without a dependency.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

#[test]
fn empty_random_and_oversized_inputs_are_clear_errors() {
    assert!(matches!(decode(&[], &LIMITS), Err(AudioInputError::Empty)));
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for n in [1, 3, 100, 65_536] {
        let e = decode(&rng.bytes(n), &LIMITS).unwrap_err();
        assert!(
            matches!(e, AudioInputError::UnknownFormat),
            "{n} random bytes: {e:?}"
        );
        assert!(e.to_string().starts_with("unrecognized audio format"));
    }
    let e = decode(b"{\"input\": \"not audio\"}", &LIMITS).unwrap_err();
    assert!(matches!(e, AudioInputError::UnknownFormat));

    let bytes = &files()[0];
    let small = DecodeLimits::new(1000, Duration::from_secs(60));
    let e = decode(bytes, &small).unwrap_err();
    assert!(
        matches!(e, AudioInputError::TooLarge { limit: 1000, .. }),
        "{e:?}"
    );
    assert_eq!(e.code(), "audio_too_large");
}

#[test]
fn duration_limit_stops_decoding() {
    let short = DecodeLimits::new(16 << 20, Duration::from_secs(1));
    for (case, bytes) in CASES.iter().zip(files()) {
        let e = decode(bytes, &short).unwrap_err();
        assert!(
            matches!(e, AudioInputError::TooLong { .. }),
            "{}: {e:?}",
            case.name
        );
        assert_eq!(e.to_string(), "the audio is longer than the limit of 1.0 s");
    }
}

#[test]
fn signatures_followed_by_garbage_are_errors() {
    let mut rng = Rng(42);
    let mut heads: Vec<Vec<u8>> = vec![
        b"RIFF\xff\xff\xff\xffWAVE".to_vec(),
        b"fLaC".to_vec(),
        b"OggS".to_vec(),
        vec![0x1a, 0x45, 0xdf, 0xa3],
        b"ID3\x04\x00\x00\x00\x00\x00\x00".to_vec(),
        vec![0xff, 0xfb, 0x90, 0x64],
    ];
    // The real headers (first 64 bytes of each file) with random bodies.
    heads.extend(files().iter().map(|f| f[..64.min(f.len())].to_vec()));
    for head in &heads {
        for n in [0, 10, 1000, 50_000] {
            let mut b = head.clone();
            b.extend(rng.bytes(n));
            let t = Instant::now();
            if let Err(e) = decode(&b, &LIMITS) {
                assert!(is_clean_error(&e), "{:02x?} + {n}: {e:?}", &head[..4]);
            }
            assert!(
                t.elapsed() < Duration::from_secs(2),
                "{:02x?} + {n}: slow",
                &head[..4]
            );
        }
    }
}

#[test]
fn corrupted_files_never_panic_or_hang() {
    // AUDIO_INPUT_FUZZ_ROUNDS=5000 for a longer hunt (40 keeps the suite quick).
    let rounds: usize = std::env::var("AUDIO_INPUT_FUZZ_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(40);
    let mut rng = Rng(std::env::var("AUDIO_INPUT_FUZZ_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(7));
    let t = Instant::now();
    let mut outcomes = (0, 0);
    for (case, bytes) in CASES.iter().zip(files()) {
        for round in 0..rounds {
            let mut b = bytes.clone();
            // Early rounds hit the headers, later ones anywhere.
            let span = if round % 2 == 0 {
                200.min(b.len())
            } else {
                b.len()
            };
            for _ in 0..1 + round % 8 {
                let i = (rng.next() % span as u64) as usize;
                b[i] = rng.next() as u8;
            }
            match decode(&b, &LIMITS) {
                Ok(a) => {
                    outcomes.0 += 1;
                    assert!(a.samples.iter().all(|s| s.is_finite()));
                    assert!(a.duration().as_secs_f64() < 60.0);
                }
                Err(e) => {
                    outcomes.1 += 1;
                    assert!(is_clean_error(&e), "{} round {round}: {e:?}", case.name);
                }
            }
        }
    }
    eprintln!(
        "corrupted files: {} decoded, {} refused, {:?}",
        outcomes.0,
        outcomes.1,
        t.elapsed()
    );
}

#[test]
fn headers_claiming_huge_lengths_decode_what_is_there() {
    // WAV: RIFF and data sizes of 4 GiB, 0.25 s of actual samples.
    let mut w = Vec::new();
    w.extend_from_slice(b"RIFF\xff\xff\xff\xffWAVEfmt ");
    w.extend_from_slice(&16u32.to_le_bytes());
    w.extend_from_slice(&1u16.to_le_bytes());
    w.extend_from_slice(&1u16.to_le_bytes());
    w.extend_from_slice(&16_000u32.to_le_bytes());
    w.extend_from_slice(&32_000u32.to_le_bytes());
    w.extend_from_slice(&2u16.to_le_bytes());
    w.extend_from_slice(&16u16.to_le_bytes());
    w.extend_from_slice(b"data\xff\xff\xff\xff");
    w.extend(std::iter::repeat_n([0x00, 0x10], 4000).flatten());
    let a = decode(&w, &LIMITS).unwrap();
    assert_eq!(a.samples.len(), 4000);

    // A chunk before `data` claiming 4 GiB: an error, not a 4 GiB allocation.
    let mut w2 = w[..36].to_vec();
    w2.extend_from_slice(b"LIST\xf0\xff\xff\xff");
    w2.extend_from_slice(&[0; 64]);
    let e = decode(&w2, &LIMITS).unwrap_err();
    assert!(is_clean_error(&e), "{e:?}");

    // FLAC: STREAMINFO claiming 2^36 - 1 samples (about 17 days at 44.1 kHz).
    let i = case_index("flac_44k_stereo");
    let mut f = files()[i].clone();
    // fLaC, block header (4), then STREAMINFO: total samples are the low 36 bits of bytes 13..18.
    f[8 + 13] |= 0x0f;
    f[8 + 14..8 + 18].copy_from_slice(&[0xff; 4]);
    match decode(&f, &LIMITS) {
        Ok(a) => assert!((a.duration().as_secs_f64() - SECONDS).abs() < 0.01),
        Err(e) => assert!(is_clean_error(&e), "{e:?}"),
    }
    // And with a short duration limit, the claim does not matter: decoding stops at the limit.
    let short = DecodeLimits::new(16 << 20, Duration::from_millis(500));
    assert!(matches!(
        decode(&f, &short),
        Err(AudioInputError::TooLong { .. })
    ));
}
