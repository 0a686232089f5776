//! End-to-end checks of every `response_format`: encode, then decode with the ffmpeg CLI,
//! at 24 kHz (Voxtral's rate) and at the other rates models speak at.
//!
//! ffmpeg/ffprobe are required (Debian: `apt-get install -y ffmpeg`); without them the
//! tests fail with a message saying so rather than passing silently.

use std::path::Path;
use std::process::Command;

use voxtral_tts::audio::input::resample;
use voxtral_tts::audio::{encode_audio, stream_encoder, time_stretch, AudioFormat, StreamEncoder};

/// Voxtral's rate, that of the tests not about rates.
const SAMPLE_RATE: u32 = 24_000;

/// Rates every format is checked at (model families speak at these).
const RATES: [u32; 5] = [16_000, 22_050, 24_000, 44_100, 48_000];

/// ~1.37 s at `rate`: a 440 Hz tone plus a 200 Hz -> 4 kHz chirp. 32 880 samples at 24 kHz
/// is not a multiple of any codec frame (480, 576, 1024, 2048), so padding and trimming
/// are exercised.
fn test_signal(rate: u32) -> Vec<f32> {
    let sr = f64::from(rate);
    let n = (1.37 * sr) as usize;
    let dur = n as f64 / sr;
    (0..n)
        .map(|i| {
            let t = i as f64 / sr;
            let tone = 0.4 * (2.0 * std::f64::consts::PI * 440.0 * t).sin();
            // Linear chirp: phase = 2π (f0 t + (f1 - f0) t² / (2 dur)).
            let phase = 2.0 * std::f64::consts::PI * (200.0 * t + 3800.0 * t * t / (2.0 * dur));
            (tone + 0.3 * phase.sin()) as f32
        })
        .collect()
}

fn sine(freq: f64, seconds: f64, rate: u32) -> Vec<f32> {
    let sr = f64::from(rate);
    let n = (seconds * sr) as usize;
    (0..n)
        .map(|i| (0.5 * (2.0 * std::f64::consts::PI * freq * i as f64 / sr).sin()) as f32)
        .collect()
}

/// Chunk sizes of the streaming test; the last entry takes the rest.
const CHUNKS: [usize; 4] = [1000, 3841, 1, 7000];

fn stream_in_chunks(format: AudioFormat, pcm: &[f32], rate: u32) -> (Vec<u8>, Vec<Vec<u8>>) {
    let mut enc: Box<dyn StreamEncoder> = stream_encoder(format, rate).expect("stream_encoder");
    let mut pieces = Vec::new();
    let mut rest = pcm;
    for &c in &CHUNKS {
        let (head, tail) = rest.split_at(c.min(rest.len()));
        pieces.push(enc.push(head).expect("push"));
        rest = tail;
    }
    pieces.push(enc.push(rest).expect("push"));
    pieces.push(enc.finish().expect("finish"));
    (pieces.concat(), pieces)
}

fn require_ffmpeg() {
    for tool in ["ffmpeg", "ffprobe"] {
        let ok = Command::new(tool)
            .arg("-version")
            .output()
            .map(|o| o.status.success())
            .unwrap_or(false);
        assert!(
            ok,
            "`{tool}` is required by the audio format tests but was not found on PATH \
             (Debian/Ubuntu: apt-get install -y ffmpeg)"
        );
    }
}

struct Decoded {
    sample_rate: u32,
    channels: u32,
    /// Decoded samples at `sample_rate`, mono s16.
    samples: Vec<i16>,
}

impl Decoded {
    /// Length in samples at `rate` (opus decodes at 48 kHz).
    fn len_at(&self, rate: u32) -> f64 {
        self.samples.len() as f64 * f64::from(rate) / f64::from(self.sample_rate)
    }

    /// Length in 24 kHz samples.
    fn len_24k(&self) -> f64 {
        self.len_at(SAMPLE_RATE)
    }
}

/// Writes `bytes` to a temp file and decodes it with ffmpeg at its native rate (raw PCM:
/// as `rate`, which a client has to know).
fn decode(format: AudioFormat, bytes: &[u8], rate: u32) -> Decoded {
    require_ffmpeg();
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join(format!("clip.{}", format.extension()));
    std::fs::write(&path, bytes).expect("write temp file");
    // Raw PCM has no header: tell ffmpeg what it is, as a client would.
    let rate_arg = rate.to_string();
    let raw_args: &[&str] = match format {
        AudioFormat::Pcm => &["-f", "s16le", "-ar", &rate_arg, "-ac", "1"],
        AudioFormat::PcmF32 => &["-f", "f32le", "-ar", &rate_arg, "-ac", "1"],
        _ => &[],
    };

    let (sample_rate, channels) = if format.is_raw() {
        (rate, 1)
    } else {
        probe(&path)
    };

    let out = Command::new("ffmpeg")
        .args(["-nostdin", "-v", "error"])
        .args(raw_args)
        .arg("-i")
        .arg(&path)
        .args(["-f", "s16le", "-acodec", "pcm_s16le", "-"])
        .output()
        .expect("run ffmpeg");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "{format}: ffmpeg failed ({}): {stderr}",
        out.status
    );
    assert!(
        stderr.trim().is_empty(),
        "{format}: ffmpeg reported errors: {stderr}"
    );
    let samples = out
        .stdout
        .chunks_exact(2)
        .map(|b| i16::from_le_bytes([b[0], b[1]]))
        .collect();
    Decoded {
        sample_rate,
        channels,
        samples,
    }
}

fn probe(path: &Path) -> (u32, u32) {
    let out = Command::new("ffprobe")
        .args(["-v", "error", "-select_streams", "a:0"])
        .args([
            "-show_entries",
            "stream=sample_rate,channels",
            "-of",
            "csv=p=0",
        ])
        .arg(path)
        .output()
        .expect("run ffprobe");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "ffprobe failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut it = text.trim().split(',');
    let sr = it.next().and_then(|s| s.trim().parse().ok());
    let ch = it.next().and_then(|s| s.trim().parse().ok());
    match (sr, ch) {
        (Some(sr), Some(ch)) => (sr, ch),
        _ => panic!("unexpected ffprobe output: {text:?}"),
    }
}

fn to_i16(x: f32) -> i16 {
    (x.clamp(-1.0, 1.0) * 32767.0).round() as i16
}

fn rms_f32(x: &[f32]) -> f64 {
    (x.iter().map(|&v| f64::from(v) * f64::from(v)).sum::<f64>() / x.len().max(1) as f64).sqrt()
}

/// The rate a format's file says (and decodes at) for PCM at `rate`.
fn coded_rate(format: AudioFormat, rate: u32) -> u32 {
    const MPEG: [u32; 9] = [
        8_000, 11_025, 12_000, 16_000, 22_050, 24_000, 32_000, 44_100, 48_000,
    ];
    match format {
        AudioFormat::Opus => 48_000,
        AudioFormat::Mp3 | AudioFormat::Aac => {
            MPEG.into_iter().find(|&r| r >= rate).unwrap_or(48_000)
        }
        _ => rate,
    }
}

/// Samples per codec frame, counted at `rate`: the granularity of padding at the end.
fn frame_len(format: AudioFormat, rate: u32) -> usize {
    let coded = coded_rate(format, rate);
    let at_coded_rate = match format {
        AudioFormat::Wav | AudioFormat::Pcm | AudioFormat::PcmF32 => 1,
        AudioFormat::Flac => 2048,
        AudioFormat::Opus => 960,
        // MPEG-1 Layer III (32 kHz and up) has 1152 samples a frame, MPEG-2/2.5 576.
        AudioFormat::Mp3 if coded >= 32_000 => 1152,
        AudioFormat::Mp3 => 576,
        AudioFormat::Aac => 1024,
    };
    (at_coded_rate as u64 * u64::from(rate)).div_ceil(u64::from(coded)) as usize
}

/// Leading priming (samples) that decoders output because the container cannot
/// say to drop it: ADTS has no field for it, and a stream cannot go back to fill in
/// MP3's LAME tag. Ogg Opus (pre-skip + end granule) and one-shot MP3 (LAME Info tag)
/// are trimmed exactly.
fn expected_lag(format: AudioFormat, streaming: bool) -> usize {
    match format {
        AudioFormat::Mp3 if streaming => 576 + 529, // LAME encoder delay + decoder delay
        AudioFormat::Aac => 2048,                   // fdk-aac AAC-LC nDelay
        _ => 0,
    }
}

/// Lag (0..=4096) at which `decoded` best matches the start of `pcm`.
fn find_lag(pcm: &[f32], decoded: &[f32]) -> usize {
    let n = pcm.len().min(8192);
    let reference = &pcm[..n];
    let mut best = (0, f64::MIN);
    for lag in 0..=4096usize {
        if lag + n > decoded.len() {
            break;
        }
        let seg = &decoded[lag..lag + n];
        let dot: f64 = seg
            .iter()
            .zip(reference)
            .map(|(&a, &b)| f64::from(a) * f64::from(b))
            .sum();
        let energy: f64 = seg.iter().map(|&a| f64::from(a) * f64::from(a)).sum();
        let score = dot / energy.sqrt().max(1e-9);
        if score > best.1 {
            best = (lag, score);
        }
    }
    best.0
}

/// Decodes `bytes` and checks them against `pcm` (at `rate`): the file's rate, where the
/// audio starts, its length, level and tail.
fn check_decoded(
    format: AudioFormat,
    pcm: &[f32],
    rate: u32,
    bytes: &[u8],
    streaming: bool,
) -> Decoded {
    let mode = if streaming { "streamed" } else { "one-shot" };
    let d = decode(format, bytes, rate);
    assert_eq!(
        d.sample_rate,
        coded_rate(format, rate),
        "{format} @ {rate}: sample rate"
    );
    assert_eq!(d.channels, 1, "{format}: channels");

    // Compare at the input's rate (opus decodes at 48 kHz: resample it back).
    let decoded: Vec<f32> = d.samples.iter().map(|&v| f32::from(v) / 32767.0).collect();
    let decoded = resample(&decoded, d.sample_rate, rate).expect("resample decoded audio");
    let lag = find_lag(pcm, &decoded);
    // Priming is counted at the codec's rate.
    let want_lag = (expected_lag(format, streaming) as u64 * u64::from(rate)
        / u64::from(d.sample_rate)) as usize;
    let err = d.len_at(rate) - pcm.len() as f64;
    let extra = err - lag as f64;
    eprintln!(
        "{format:>4} {mode} @ {rate} Hz: decoded {} samples @ {} Hz; length error {err:+.1} \
         samples ({:+.2} ms) = priming {lag} + tail {extra:+.1}",
        d.samples.len(),
        d.sample_rate,
        err * 1000.0 / f64::from(rate)
    );
    assert!(
        lag.abs_diff(want_lag) <= 2,
        "{format} {mode} @ {rate}: audio starts at sample {lag}, expected {want_lag}"
    );
    // Nothing lost at the end, and at most one frame of padding after the last sample
    // (a streamed MP3 also plays LAME's flush padding, which at 16 kHz reaches into a
    // second frame: it has no tag to say where the audio ends).
    let frame = frame_len(format, rate) as f64;
    let limit = if format == AudioFormat::Mp3 && streaming {
        2.0 * frame
    } else {
        frame
    };
    assert!(
        (0.0..limit).contains(&extra) || (format == AudioFormat::Opus && extra.abs() < frame),
        "{format} {mode} @ {rate}: {extra:+} samples after the input's end (frame {frame})"
    );
    if matches!(format, AudioFormat::Opus) || !streaming && format == AudioFormat::Mp3 {
        // Exact, up to the fraction of a sample a resampled length can be off by.
        let tolerance = if d.sample_rate.is_multiple_of(rate) {
            0.0
        } else {
            1.0
        };
        assert!(
            err.abs() <= tolerance,
            "{format} {mode} @ {rate}: trimmed length must be exact, is {err:+}"
        );
    }
    // The audio itself must survive (not silence, not clipped garbage).
    let aligned = &decoded[lag.min(decoded.len())..];
    let aligned = &aligned[..pcm.len().min(aligned.len())];
    let (r_in, r_out) = (rms_f32(pcm), rms_f32(aligned));
    assert!(
        (r_out / r_in - 1.0).abs() < 0.1,
        "{format} {mode} @ {rate}: RMS {r_out:.3} after decoding vs {r_in:.3} before"
    );
    // The last 20 ms must be there too (a dropped tail would read as silence here).
    let tail = pcm.len() - rate as usize / 50;
    let (t_in, t_out) = (
        rms_f32(&pcm[tail..]),
        rms_f32(&aligned[tail.min(aligned.len())..]),
    );
    assert!(
        (t_out / t_in - 1.0).abs() < 0.25,
        "{format} {mode} @ {rate}: last 20 ms RMS {t_out:.3} vs {t_in:.3}: tail lost?"
    );
    d
}

/// The packets of an Ogg stream, in order.
fn ogg_packets(bytes: &[u8]) -> Vec<Vec<u8>> {
    let mut reader = ogg::PacketReader::new(std::io::Cursor::new(bytes));
    let mut packets = Vec::new();
    while let Some(p) = reader.read_packet().expect("ogg packet") {
        packets.push(p.data);
    }
    packets
}

fn check_format(format: AudioFormat, rate: u32) {
    let pcm = test_signal(rate);
    let one_shot =
        encode_audio(format, &pcm, rate).unwrap_or_else(|e| panic!("{format} @ {rate}: {e}"));
    let a = check_decoded(format, &pcm, rate, &one_shot, false);

    let (streamed, pieces) = stream_in_chunks(format, &pcm, rate);
    let b = check_decoded(format, &pcm, rate, &streamed, true);

    match format {
        AudioFormat::Wav | AudioFormat::Pcm | AudioFormat::Flac => {
            // Lossless: both paths give back exactly the quantised input.
            let expect: Vec<i16> = pcm.iter().map(|&x| to_i16(x)).collect();
            assert!(
                a.samples == expect,
                "{format}: one-shot samples differ from input"
            );
            assert!(
                b.samples == expect,
                "{format}: streamed samples differ from input"
            );
        }
        AudioFormat::PcmF32 => {
            // The input itself, clipped, in both paths.
            let expect: Vec<u8> = pcm
                .iter()
                .flat_map(|&x| x.clamp(-1.0, 1.0).to_le_bytes())
                .collect();
            assert!(
                one_shot == expect,
                "pcm_f32le: one-shot bytes differ from input"
            );
            assert!(
                streamed == expect,
                "pcm_f32le: streamed bytes differ from input"
            );
        }
        AudioFormat::Opus => {
            // Every non-empty push result is a run of whole Ogg pages.
            for p in pieces.iter().filter(|p| !p.is_empty()) {
                assert_eq!(&p[..4], b"OggS", "opus: push output must start on a page");
            }
            // Pages fall differently; the packets (after OpusHead and OpusTags) are the same.
            assert!(
                ogg_packets(&streamed)[2..] == ogg_packets(&one_shot)[2..],
                "opus @ {rate}: streamed packets differ from one-shot"
            );
        }
        // ADTS has nothing to rewrite: the very same bytes.
        AudioFormat::Aac => assert!(streamed == one_shot, "aac @ {rate}: stream differs"),
        // One-shot only adds the LAME Info frame in front.
        AudioFormat::Mp3 => assert!(
            one_shot.ends_with(&streamed),
            "mp3 @ {rate}: stream differs from the one-shot frames"
        ),
    }
    match format {
        AudioFormat::Wav => {
            assert_eq!(
                &streamed[40..44],
                &[0xFF; 4],
                "streamed wav: data size unknown"
            );
            let n = (2 * pcm.len()) as u32;
            assert_eq!(
                &one_shot[40..44],
                &n.to_le_bytes(),
                "one-shot wav: data size"
            );
            assert_eq!(
                &one_shot[4..8],
                &(n + 36).to_le_bytes(),
                "one-shot wav: RIFF size"
            );
            assert_eq!(&streamed[44..], &one_shot[44..]);
        }
        AudioFormat::Pcm => assert_eq!(streamed, one_shot),
        // Same frames after the 42-byte header (STREAMINFO is only filled in one-shot).
        AudioFormat::Flac => assert!(streamed[42..] == one_shot[42..], "flac @ {rate}"),
        _ => {}
    }
}

/// `check_format` at 24 kHz, then at every rate of [`RATES`] and at `extra` ones.
fn check_rates(format: AudioFormat, extra: &[u32]) {
    check_format(format, SAMPLE_RATE);
    for &rate in RATES.iter().chain(extra) {
        if rate != SAMPLE_RATE {
            check_format(format, rate);
        }
    }
}

#[test]
fn wav_roundtrip() {
    check_rates(AudioFormat::Wav, &[8_000, 96_000]);
}

#[test]
fn pcm_roundtrip() {
    check_rates(AudioFormat::Pcm, &[]);
}

#[test]
fn pcm_f32_roundtrip() {
    check_rates(AudioFormat::PcmF32, &[]);
}

#[test]
fn flac_roundtrip() {
    check_rates(AudioFormat::Flac, &[8_000, 96_000]);
}

#[test]
fn mp3_roundtrip() {
    // 20 kHz is no MPEG rate: resampled to 22.05 kHz.
    check_rates(AudioFormat::Mp3, &[20_000]);
}

#[test]
fn opus_roundtrip() {
    // 22.05 and 44.1 kHz (in RATES) are resampled to 48 kHz; 16 kHz is encoded as it is.
    check_rates(AudioFormat::Opus, &[8_000, 12_000]);
}

#[test]
fn aac_roundtrip() {
    if !AudioFormat::Aac.is_supported() {
        // Built without the `aac` feature: the error must say so, not panic.
        let e = encode_audio(AudioFormat::Aac, &[0.0; 10], SAMPLE_RATE).unwrap_err();
        assert!(e.to_string().contains("aac"), "{e}");
        return;
    }
    check_rates(AudioFormat::Aac, &[20_000]);
}

#[test]
fn zero_and_absurd_rates_are_errors() {
    for format in AudioFormat::ALL {
        for rate in [0, 1, 1_000_000, u32::MAX] {
            let e = encode_audio(format, &[0.1; 100], rate).unwrap_err();
            assert!(
                e.to_string().contains("aac") || e.to_string().contains("sample rate"),
                "{format} @ {rate}: {e}"
            );
            assert!(stream_encoder(format, rate).is_err(), "{format} @ {rate}");
        }
    }
}

#[test]
fn empty_input_gives_valid_files() {
    for format in AudioFormat::ALL.into_iter().filter(|f| f.is_supported()) {
        let bytes =
            encode_audio(format, &[], SAMPLE_RATE).unwrap_or_else(|e| panic!("{format}: {e}"));
        let (streamed, _) = stream_in_chunks(format, &[], SAMPLE_RATE);
        if format.is_raw() {
            assert!(bytes.is_empty() && streamed.is_empty());
            continue;
        }
        for (what, b) in [("one-shot", &bytes), ("streamed", &streamed)] {
            let d = decode(format, b, SAMPLE_RATE);
            // Only codec priming that the container cannot signal may remain.
            let above = expected_lag(format, what == "streamed") + frame_len(format, SAMPLE_RATE);
            assert!(
                d.len_24k() <= above as f64,
                "{format} {what}: empty input decoded to {} samples",
                d.samples.len()
            );
        }
    }
}

#[test]
fn wild_samples_are_clipped_not_fatal() {
    let pcm = [
        0.0,
        2.0,
        -3.0,
        f32::NAN,
        f32::INFINITY,
        f32::NEG_INFINITY,
        0.5,
    ];
    for format in AudioFormat::ALL.into_iter().filter(|f| f.is_supported()) {
        encode_audio(format, &pcm, SAMPLE_RATE).unwrap_or_else(|e| panic!("{format}: {e}"));
    }
    let d = decode(
        AudioFormat::Wav,
        &encode_audio(AudioFormat::Wav, &pcm, SAMPLE_RATE).unwrap(),
        SAMPLE_RATE,
    );
    assert_eq!(d.samples, [0, 32767, -32767, 0, 32767, -32767, 16384]);
}

#[test]
fn content_types_and_names() {
    let expect = [
        ("mp3", "audio/mpeg"),
        ("opus", "audio/opus"),
        ("aac", "audio/aac"),
        ("flac", "audio/flac"),
        ("wav", "audio/wav"),
        ("pcm", "audio/pcm"),
        ("pcm_f32le", "audio/pcm"),
    ];
    for (name, ct) in expect {
        let f: AudioFormat = name.parse().unwrap();
        assert_eq!(f.content_type(), ct);
    }
    let err = "webm".parse::<AudioFormat>().unwrap_err().to_string();
    assert!(
        err.contains("mp3, opus, aac, flac, wav, pcm, pcm_f32le"),
        "{err}"
    );
}

/// Dominant frequency (PCM at `rate`) by a DFT peak search over 50..2000 Hz at 0.5 Hz
/// resolution.
fn dominant_freq(x: &[f32], rate: u32) -> f64 {
    let mut best = (0.0, 0.0);
    let mut f = 50.0;
    while f <= 2000.0 {
        let w = 2.0 * std::f64::consts::PI * f / f64::from(rate);
        let (mut re, mut im) = (0.0, 0.0);
        for (i, &v) in x.iter().enumerate() {
            re += f64::from(v) * (w * i as f64).cos();
            im += f64::from(v) * (w * i as f64).sin();
        }
        let p = re * re + im * im;
        if p > best.1 {
            best = (f, p);
        }
        f += 0.5;
    }
    best.0
}

#[test]
fn time_stretch_keeps_pitch_and_scales_length() {
    for rate in [SAMPLE_RATE, 16_000, 22_050, 48_000] {
        let x = sine(440.0, 1.0, rate);
        assert_eq!(time_stretch(&x, 1.0, rate), x);
        for speed in [0.25f32, 0.5, 0.8, 1.25, 2.0, 4.0] {
            let y = time_stretch(&x, speed, rate);
            let want = x.len() as f64 / f64::from(speed);
            let rel = (y.len() as f64 - want).abs() / want;
            assert!(
                rel < 0.01,
                "{rate} Hz, speed {speed}: length {} vs {want}",
                y.len()
            );
            if speed == 0.5 || speed == 2.0 {
                // Analyse the middle 0.4 s (0.2 s at speed 2) to stay clear of the edges.
                let mid = &y[y.len() / 4..y.len() * 3 / 4];
                let f = dominant_freq(mid, rate);
                assert!(
                    (f - 440.0).abs() < 440.0 * 0.02,
                    "{rate} Hz, speed {speed}: pitch {f} Hz"
                );
                // No dropouts from misaligned grains: the tone's level is kept.
                let r = rms_f32(mid) / rms_f32(&x);
                assert!(
                    (r - 1.0).abs() < 0.1,
                    "{rate} Hz, speed {speed}: level ratio {r}"
                );
            }
        }
    }
}

#[test]
fn time_stretch_survives_odd_input() {
    assert!(time_stretch(&[], 2.0, SAMPLE_RATE).is_empty());
    assert_eq!(time_stretch(&[0.3], 0.5, SAMPLE_RATE).len(), 2);
    assert_eq!(time_stretch(&[0.3], 0.5, 0).len(), 2);
    let noisy: Vec<f32> = (0..5000)
        .map(|i| {
            if i % 7 == 0 {
                f32::NAN
            } else {
                (i as f32).sin()
            }
        })
        .collect();
    let y = time_stretch(&noisy, 1.5, SAMPLE_RATE);
    assert_eq!(y.len(), 3333);
    assert!(
        y.iter().all(|v| v.is_finite()),
        "NaN input must read as silence"
    );
}
