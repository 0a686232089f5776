//! Audio input: uploads decoded to mono f32 at their own rate, and resampled to a model's rate.
//!
//! Reference clips for voice cloning and uploads for speech-to-text arrive as files in any
//! common format. [`decode`] detects the container from the bytes themselves (never from a
//! file name), decodes it, averages the channels to mono and returns the samples with their
//! rate; [`resample`] and [`decode_to_rate`] bring them to the rate a model wants.
//!
//! | Container        | Codecs                                  | Decoded by                          |
//! |------------------|-----------------------------------------|-------------------------------------|
//! | WAV (RIFF/WAVE)  | PCM 8–32 bit, float 32/64, A-law, µ-law | symphonia                           |
//! | MP3 (opt. ID3v2) | MPEG layer III                          | symphonia                           |
//! | FLAC             | FLAC                                    | symphonia                           |
//! | Ogg              | Opus, Vorbis, FLAC                      | symphonia (Opus: libopus, audiopus) |
//! | WebM / Matroska  | Opus, Vorbis, FLAC, PCM                 | symphonia (Opus: libopus, audiopus) |
//!
//! Opus is decoded at 48 kHz with the stream's pre-skip and output gain applied. Gapless
//! trimming (MP3 encoder delay and padding, Vorbis and Ogg Opus end trimming) follows what the
//! container records; WebM's end padding (`DiscardPadding`) is not read, so a WebM/Opus clip may
//! keep up to one packet (20 ms) of padding at its end. A chained Ogg file yields its first
//! stream; a file with several audio tracks yields its default one.
//!
//! Nothing here panics on bad input: a byte limit is checked before decoding, the duration
//! limit while decoding (so no upload makes it allocate more than the limit allows), damaged
//! packets are skipped but a stream of mostly damaged packets is refused, a truncated file
//! decodes to what it holds, and a panic inside a third-party decoder is caught and returned
//! as [`AudioInputError::DecoderPanic`] (symphonia 0.6.1's FLAC decoder has arithmetic
//! overflows on some corrupted frames, which panic where overflow checks are on, as in debug
//! and fuzz builds; the default panic hook still prints them to stderr). Decoding is CPU work: call it from a blocking task
//! (`tokio::task::spawn_blocking`), not on an async thread.

mod decode;
mod detect;
mod error;
mod opus;
mod resample;

use std::panic::{catch_unwind, AssertUnwindSafe};
use std::time::Duration;

pub use detect::{detect_format, ContainerFormat};
pub use error::AudioInputError;
pub use resample::resample;
pub(crate) use resample::StreamResampler;

/// Lowest sample rate accepted, in a file or as a resampling target (Hz).
pub const MIN_SAMPLE_RATE: u32 = 4_000;
/// Highest sample rate accepted, in a file or as a resampling target (Hz).
pub const MAX_SAMPLE_RATE: u32 = 384_000;

/// Most channels accepted in a WAV file (checked before symphonia reads it; see
/// `detect::wav_channels`).
const MAX_WAV_CHANNELS: u16 = 32;

/// Limits an upload must respect; the caller sets them (from the server settings).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DecodeLimits {
    /// Largest upload accepted, in bytes (checked before any decoding).
    pub max_bytes: usize,
    /// Longest audio accepted (checked while decoding; decoding stops at the limit).
    pub max_duration: Duration,
}

impl DecodeLimits {
    pub const fn new(max_bytes: usize, max_duration: Duration) -> DecodeLimits {
        DecodeLimits {
            max_bytes,
            max_duration,
        }
    }

    /// The most frames at `rate` that fit in `max_duration` (rounded up).
    fn max_frames(&self, rate: u32) -> usize {
        let frames = (self.max_duration.as_secs_f64() * f64::from(rate)).ceil();
        // Saturates for absurd durations; the byte limit still bounds the work.
        frames.min(usize::MAX as f64) as usize
    }
}

/// The codec an upload was decoded from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum AudioCodec {
    Pcm,
    Mp3,
    Flac,
    Vorbis,
    Opus,
}

/// A decoded upload: mono samples (the mean of its channels) at `sample_rate`.
#[derive(Clone, Debug, PartialEq)]
pub struct DecodedAudio {
    /// Mono samples, nominally in [-1, 1] (float sources may exceed it); never NaN or infinite.
    pub samples: Vec<f32>,
    /// Samples per second of `samples`.
    pub sample_rate: u32,
    /// Channels in the source before the downmix to mono.
    pub source_channels: usize,
    /// The container it came in.
    pub format: ContainerFormat,
    /// The codec it was decoded from.
    pub codec: AudioCodec,
}

impl DecodedAudio {
    /// The duration of `samples` at `sample_rate`.
    pub fn duration(&self) -> Duration {
        Duration::from_secs_f64(self.samples.len() as f64 / f64::from(self.sample_rate))
    }

    /// The same audio at `rate` Hz (unchanged when it already is).
    pub fn resampled(mut self, rate: u32) -> Result<DecodedAudio, AudioInputError> {
        if rate != self.sample_rate {
            self.samples = resample(&self.samples, self.sample_rate, rate)?;
            self.sample_rate = rate;
        }
        Ok(self)
    }
}

/// Decodes an upload to mono f32 at its own sample rate.
///
/// The container is detected from the bytes; see the module documentation for the formats.
/// Errors: [`AudioInputError::Empty`], [`AudioInputError::TooLarge`] (before decoding),
/// [`AudioInputError::UnknownFormat`], then whatever the file's contents call for.
pub fn decode(bytes: &[u8], limits: &DecodeLimits) -> Result<DecodedAudio, AudioInputError> {
    if bytes.is_empty() {
        return Err(AudioInputError::Empty);
    }
    if bytes.len() > limits.max_bytes {
        return Err(AudioInputError::TooLarge {
            size: bytes.len(),
            limit: limits.max_bytes,
        });
    }
    let (format, offset) = detect::sniff(bytes).ok_or(AudioInputError::UnknownFormat)?;
    let body = &bytes[offset..];
    if body.is_empty() {
        return Err(AudioInputError::NoAudio { format });
    }
    if format == ContainerFormat::Wav {
        match detect::wav_channels(body) {
            Some(n) if n > MAX_WAV_CHANNELS => {
                return Err(AudioInputError::Unsupported {
                    format,
                    detail: format!("{n} channels (at most {MAX_WAV_CHANNELS})"),
                })
            }
            _ => {}
        }
    }
    // The decoders are third-party code fed untrusted bytes: a panic in one is this upload's
    // fault, not the server's, and must not take a worker thread down.
    catch_unwind(AssertUnwindSafe(|| {
        decode::decode_container(body, format, limits)
    }))
    .unwrap_or(Err(AudioInputError::DecoderPanic { format }))
}

/// [`decode`], then [`resample`] to `rate` Hz (e.g. 16 kHz for speech-to-text, 24 kHz for a
/// cloning reference).
pub fn decode_to_rate(
    bytes: &[u8],
    rate: u32,
    limits: &DecodeLimits,
) -> Result<DecodedAudio, AudioInputError> {
    check_rate(rate)?;
    decode(bytes, limits)?.resampled(rate)
}

fn check_rate(rate: u32) -> Result<(), AudioInputError> {
    if (MIN_SAMPLE_RATE..=MAX_SAMPLE_RATE).contains(&rate) {
        Ok(())
    } else {
        Err(AudioInputError::SampleRate {
            rate,
            min: MIN_SAMPLE_RATE,
            max: MAX_SAMPLE_RATE,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: DecodeLimits = DecodeLimits::new(1 << 20, Duration::from_secs(10));

    /// A minimal 16-bit PCM WAV.
    fn wav(rate: u32, channels: u16, samples: &[i16]) -> Vec<u8> {
        let data_len = (samples.len() * 2) as u32;
        let mut b = Vec::new();
        b.extend_from_slice(b"RIFF");
        b.extend_from_slice(&(36 + data_len).to_le_bytes());
        b.extend_from_slice(b"WAVEfmt ");
        b.extend_from_slice(&16u32.to_le_bytes());
        b.extend_from_slice(&1u16.to_le_bytes());
        b.extend_from_slice(&channels.to_le_bytes());
        b.extend_from_slice(&rate.to_le_bytes());
        b.extend_from_slice(&(rate * u32::from(channels) * 2).to_le_bytes());
        b.extend_from_slice(&channels.wrapping_mul(2).to_le_bytes());
        b.extend_from_slice(&16u16.to_le_bytes());
        b.extend_from_slice(b"data");
        b.extend_from_slice(&data_len.to_le_bytes());
        for s in samples {
            b.extend_from_slice(&s.to_le_bytes());
        }
        b
    }

    #[test]
    fn stereo_is_averaged_to_mono() {
        let a = decode(
            &wav(16_000, 2, &[16384, 0, -16384, -16384, 8192, 24576]),
            &LIMITS,
        )
        .unwrap();
        assert_eq!(a.sample_rate, 16_000);
        assert_eq!(a.source_channels, 2);
        assert_eq!(a.format, ContainerFormat::Wav);
        assert_eq!(a.codec, AudioCodec::Pcm);
        assert_eq!(a.samples, vec![0.25, -0.5, 0.5]);
    }

    #[test]
    fn limits() {
        let w = wav(16_000, 1, &vec![0; 16_000]);
        assert!(matches!(decode(&[], &LIMITS), Err(AudioInputError::Empty)));
        let small = DecodeLimits::new(100, Duration::from_secs(10));
        assert!(matches!(
            decode(&w, &small),
            Err(AudioInputError::TooLarge { limit: 100, .. })
        ));
        let short = DecodeLimits::new(1 << 20, Duration::from_millis(999));
        assert!(matches!(
            decode(&w, &short),
            Err(AudioInputError::TooLong { .. })
        ));
        let exact = DecodeLimits::new(1 << 20, Duration::from_secs(1));
        assert_eq!(
            decode(&w, &exact).unwrap().duration(),
            Duration::from_secs(1)
        );
    }

    #[test]
    fn empty_and_odd_wavs() {
        assert!(matches!(
            decode(&wav(16_000, 1, &[]), &LIMITS),
            Err(AudioInputError::NoAudio {
                format: ContainerFormat::Wav
            })
        ));
        assert!(matches!(
            decode(&wav(1_000, 1, &[1, 2, 3]), &LIMITS),
            Err(AudioInputError::SampleRate { rate: 1_000, .. })
        ));
        // 40000 channels: refused before symphonia's WAV reader overflows on it.
        let e = decode(&wav(16_000, 40_000, &[0; 40_000]), &LIMITS).unwrap_err();
        assert!(matches!(e, AudioInputError::Unsupported { .. }), "{e:?}");
        assert_eq!(
            e.to_string(),
            "unsupported WAV audio: 40000 channels (at most 32)"
        );
        // Header only, cut inside the fmt chunk.
        assert!(matches!(
            decode(&wav(16_000, 1, &[1, 2])[..20], &LIMITS),
            Err(AudioInputError::Malformed { .. })
        ));
    }

    #[test]
    fn decode_to_rate_resamples() {
        let a = decode_to_rate(&wav(16_000, 1, &vec![1000; 1600]), 24_000, &LIMITS).unwrap();
        assert_eq!(a.sample_rate, 24_000);
        assert_eq!(a.samples.len(), 2400);
        assert!(matches!(
            decode_to_rate(&wav(16_000, 1, &[0; 10]), 0, &LIMITS),
            Err(AudioInputError::SampleRate { .. })
        ));
    }
}
