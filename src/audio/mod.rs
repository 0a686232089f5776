//! Audio output layer: OpenAI `response_format` encoders and the `speed` time stretch.
//!
//! PCM comes in at the rate of the model that made it (16, 22.05, 24, 44.1, 48 kHz, ...):
//! every entry point takes that rate, and each format records it in its header, or
//! resamples where the codec cannot carry it (see [`encode_audio`]). `pcm` has no header:
//! its rate is the client's to know (the model's rate).
//!
//! Every format is implemented once, as an incremental encoder. Streaming responses
//! use it through [`stream_encoder`]; [`encode_audio`] pushes all samples through the
//! same encoder and finishes it, so both paths produce the same codec stream. The only
//! difference is that a one-shot file can have its header rewritten at the end (WAV
//! sizes, FLAC STREAMINFO, MP3 LAME/Info tag), which a stream already sent cannot.

use std::fmt;
use std::str::FromStr;

#[cfg(feature = "aac")]
mod aac;
mod flac;
pub mod input;
pub mod join;
pub mod mel;
mod mp3;
mod opus;
mod pcm;
mod rate;
mod tempo;
pub mod vad;
mod wav;

pub use tempo::{time_stretch, MAX_SPEED, MIN_SPEED};

/// Lowest PCM sample rate the encoders take (Hz); the same range as audio input's.
pub const MIN_SAMPLE_RATE: u32 = input::MIN_SAMPLE_RATE;
/// Highest PCM sample rate the encoders take (Hz).
pub const MAX_SAMPLE_RATE: u32 = input::MAX_SAMPLE_RATE;

/// OpenAI's `response_format` values, and float PCM (Mistral's `pcm`).
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Deserialize, serde::Serialize, utoipa::ToSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum AudioFormat {
    /// audio/mpeg
    Mp3,
    /// Ogg Opus, audio/opus
    Opus,
    /// AAC-LC in ADTS, audio/aac
    Aac,
    /// audio/flac
    Flac,
    /// 16-bit PCM WAV, audio/wav
    Wav,
    /// Raw 16-bit little-endian mono samples at the model's rate, audio/pcm
    Pcm,
    /// Raw 32-bit float little-endian mono samples at the model's rate, audio/pcm: what
    /// Mistral's API calls `pcm`
    #[serde(rename = "pcm_f32le")]
    PcmF32,
}

impl AudioFormat {
    /// All formats: OpenAI's, in its documentation order, then float PCM.
    pub const ALL: [AudioFormat; 7] = [
        AudioFormat::Mp3,
        AudioFormat::Opus,
        AudioFormat::Aac,
        AudioFormat::Flac,
        AudioFormat::Wav,
        AudioFormat::Pcm,
        AudioFormat::PcmF32,
    ];

    /// The name used in requests (`response_format`).
    pub fn as_str(self) -> &'static str {
        match self {
            AudioFormat::Mp3 => "mp3",
            AudioFormat::Opus => "opus",
            AudioFormat::Aac => "aac",
            AudioFormat::Flac => "flac",
            AudioFormat::Wav => "wav",
            AudioFormat::Pcm => "pcm",
            AudioFormat::PcmF32 => "pcm_f32le",
        }
    }

    /// `Content-Type` of the response body, as OpenAI's speech endpoint sends it.
    pub fn content_type(self) -> &'static str {
        match self {
            AudioFormat::Mp3 => "audio/mpeg",
            // The body is Ogg Opus; OpenAI labels it audio/opus (RFC 7845 would say audio/ogg).
            AudioFormat::Opus => "audio/opus",
            AudioFormat::Aac => "audio/aac",
            AudioFormat::Flac => "audio/flac",
            AudioFormat::Wav => "audio/wav",
            AudioFormat::Pcm | AudioFormat::PcmF32 => "audio/pcm",
        }
    }

    /// Usual file extension (for `Content-Disposition` or saving to disk).
    pub fn extension(self) -> &'static str {
        self.as_str()
    }

    /// Raw samples without a header: the client has to know the rate.
    pub fn is_raw(self) -> bool {
        matches!(self, AudioFormat::Pcm | AudioFormat::PcmF32)
    }

    /// Whether this build can encode the format (AAC needs the `aac` cargo feature).
    pub fn is_supported(self) -> bool {
        self != AudioFormat::Aac || cfg!(feature = "aac")
    }
}

impl fmt::Display for AudioFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Error for an unknown `response_format` string.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown audio format '{0}': expected one of mp3, opus, aac, flac, wav, pcm, pcm_f32le")]
pub struct ParseAudioFormatError(pub String);

impl FromStr for AudioFormat {
    type Err = ParseAudioFormatError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let t = s.trim();
        AudioFormat::ALL
            .into_iter()
            .find(|f| f.as_str().eq_ignore_ascii_case(t))
            .ok_or_else(|| ParseAudioFormatError(s.to_owned()))
    }
}

/// Encoding failure.
#[derive(Debug, thiserror::Error)]
pub enum AudioError {
    #[error("{format} encoder: {message}")]
    Encoder {
        format: AudioFormat,
        message: String,
    },
    #[error("audio format '{0}' is not available in this build (cargo feature `aac` is off)")]
    Unsupported(AudioFormat),
    #[error("sample rate {rate} Hz is out of range: the audio encoders take {min}..={max} Hz")]
    SampleRate { rate: u32, min: u32, max: u32 },
}

impl AudioError {
    pub(crate) fn encoder(format: AudioFormat, message: impl fmt::Display) -> Self {
        AudioError::Encoder {
            format,
            message: message.to_string(),
        }
    }
}

/// Checks that `rate` is one the encoders take ([`MIN_SAMPLE_RATE`]..=[`MAX_SAMPLE_RATE`]).
pub fn check_sample_rate(rate: u32) -> Result<(), AudioError> {
    if (MIN_SAMPLE_RATE..=MAX_SAMPLE_RATE).contains(&rate) {
        Ok(())
    } else {
        Err(AudioError::SampleRate {
            rate,
            min: MIN_SAMPLE_RATE,
            max: MAX_SAMPLE_RATE,
        })
    }
}

/// Incremental encoder: push PCM chunks as they are generated, send the returned bytes
/// right away. Each call returns only complete codec frames (pages for Ogg); the rest of
/// the samples stay buffered until the next push or `finish`.
pub trait StreamEncoder: Send {
    /// Encodes `pcm` (f32 mono at the encoder's sample rate, clipped to [-1, 1]).
    fn push(&mut self, pcm: &[f32]) -> Result<Vec<u8>, AudioError>;
    /// Flushes buffered samples and ends the stream.
    fn finish(self: Box<Self>) -> Result<Vec<u8>, AudioError>;
}

/// Whether the encoder's output is sent as it is produced or kept as one file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Mode {
    /// Bytes leave after every push: headers carry "unknown length" values.
    Stream,
    /// All output lands in one buffer, which `finish` may patch (sizes, tags).
    OneShot,
}

/// One format's encoder. `out` is where new bytes are appended; in [`Mode::OneShot`] it
/// is the whole file so far, so `finish` can rewrite the header in place.
pub(crate) trait FormatEncoder: Send {
    fn push(&mut self, pcm: &[f32], out: &mut Vec<u8>) -> Result<(), AudioError>;
    fn finish(&mut self, out: &mut Vec<u8>) -> Result<(), AudioError>;
}

fn new_encoder(
    format: AudioFormat,
    mode: Mode,
    sample_rate: u32,
) -> Result<Box<dyn FormatEncoder>, AudioError> {
    check_sample_rate(sample_rate)?;
    Ok(match format {
        AudioFormat::Wav => Box::new(wav::WavEncoder::new(mode, sample_rate)),
        AudioFormat::Pcm => Box::new(pcm::PcmEncoder),
        AudioFormat::PcmF32 => Box::new(pcm::PcmF32Encoder),
        AudioFormat::Mp3 => Box::new(mp3::Mp3Encoder::new(mode, sample_rate)?),
        AudioFormat::Flac => Box::new(flac::FlacEncoder::new(mode, sample_rate)?),
        AudioFormat::Opus => Box::new(opus::OpusEncoder::new(mode, sample_rate)?),
        #[cfg(feature = "aac")]
        AudioFormat::Aac => Box::new(aac::AacEncoder::new(sample_rate)?),
        #[cfg(not(feature = "aac"))]
        AudioFormat::Aac => return Err(AudioError::Unsupported(format)),
    })
}

struct Streaming(Box<dyn FormatEncoder>);

impl StreamEncoder for Streaming {
    fn push(&mut self, pcm: &[f32]) -> Result<Vec<u8>, AudioError> {
        let mut out = Vec::new();
        self.0.push(pcm, &mut out)?;
        Ok(out)
    }

    fn finish(mut self: Box<Self>) -> Result<Vec<u8>, AudioError> {
        let mut out = Vec::new();
        self.0.finish(&mut out)?;
        Ok(out)
    }
}

/// Creates a streaming encoder for `format`, taking PCM at `sample_rate` Hz. The bytes
/// it returns, all concatenated, are those [`encode_audio`] gives for the same samples,
/// except for the header fields a one-shot file fills in at the end.
pub fn stream_encoder(
    format: AudioFormat,
    sample_rate: u32,
) -> Result<Box<dyn StreamEncoder>, AudioError> {
    Ok(Box::new(Streaming(new_encoder(
        format,
        Mode::Stream,
        sample_rate,
    )?)))
}

/// Encodes a complete clip (f32 mono at `sample_rate` Hz, clipped to [-1, 1]) into a file.
///
/// Each format records `sample_rate` where its codec can, and otherwise resamples (with
/// rubato, aligned and streaming-safe) to a rate it can:
///
/// - `wav`, `pcm`, `pcm_f32le`: any rate (raw PCM has no header: the client knows the rate).
/// - `flac`: any rate up to 96 kHz (above 65 535 Hz, multiples of 10 Hz); others are
///   resampled to 96 kHz.
/// - `opus`: 8, 12, 16, 24 and 48 kHz are encoded as they are (libopus's input rates);
///   others are resampled to 48 kHz.
/// - `mp3`, `aac`: the MPEG rates 8, 11.025, 12, 16, 22.05, 24, 32, 44.1 and 48 kHz are
///   kept; others are resampled to the next of these above (48 kHz above 48 kHz).
///
/// Ogg Opus always decodes at 48 kHz; its header records `sample_rate` as the input
/// rate. A rate outside [`MIN_SAMPLE_RATE`]..=[`MAX_SAMPLE_RATE`] is an
/// [`AudioError::SampleRate`].
pub fn encode_audio(
    format: AudioFormat,
    pcm: &[f32],
    sample_rate: u32,
) -> Result<Vec<u8>, AudioError> {
    let mut enc = new_encoder(format, Mode::OneShot, sample_rate)?;
    let mut file = Vec::new();
    enc.push(pcm, &mut file)?;
    enc.finish(&mut file)?;
    Ok(file)
}

/// Clips to [-1, 1]; NaN becomes silence so a bad sample cannot poison a codec state.
#[inline]
pub(crate) fn clip(x: f32) -> f32 {
    if x.is_nan() {
        0.0
    } else {
        x.clamp(-1.0, 1.0)
    }
}

/// f32 -> s16 with clipping (symmetric scale, so +1.0 and -1.0 map to ±32767).
#[inline]
pub(crate) fn to_i16(x: f32) -> i16 {
    (clip(x) * 32767.0).round() as i16
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_formats() {
        for f in AudioFormat::ALL {
            assert_eq!(f.as_str().parse::<AudioFormat>().unwrap(), f);
            assert_eq!(f.to_string(), f.as_str());
        }
        assert_eq!("MP3".parse::<AudioFormat>().unwrap(), AudioFormat::Mp3);
        let err = "ogg".parse::<AudioFormat>().unwrap_err().to_string();
        assert!(err.contains("'ogg'") && err.contains("mp3, opus, aac, flac, wav, pcm, pcm_f32le"));
    }

    #[test]
    fn serde_names() {
        let f: AudioFormat = serde_json_like("\"flac\"");
        assert_eq!(f, AudioFormat::Flac);
        assert_eq!(serde_json_like("pcm_f32le"), AudioFormat::PcmF32);
    }

    // Minimal deserializer shim: serde's derive is exercised via serde's value types.
    fn serde_json_like(s: &str) -> AudioFormat {
        use serde::de::value::{Error, StrDeserializer};
        use serde::de::IntoDeserializer;
        let name = s.trim_matches('"');
        let de: StrDeserializer<'_, Error> = name.into_deserializer();
        serde::Deserialize::deserialize(de).unwrap()
    }

    #[test]
    fn bad_rates_are_errors() {
        for format in AudioFormat::ALL.into_iter().filter(|f| f.is_supported()) {
            for rate in [0, 1, MIN_SAMPLE_RATE - 1, MAX_SAMPLE_RATE + 1, u32::MAX] {
                let e = encode_audio(format, &[0.0; 10], rate).unwrap_err();
                assert!(
                    matches!(e, AudioError::SampleRate { .. }),
                    "{format} {rate}: {e}"
                );
                assert!(e.to_string().contains(&rate.to_string()), "{e}");
                assert!(matches!(
                    stream_encoder(format, rate).err(),
                    Some(AudioError::SampleRate { .. })
                ));
            }
            for rate in [MIN_SAMPLE_RATE, 11_025, 44_100, 96_000, MAX_SAMPLE_RATE] {
                encode_audio(format, &[0.1; 100], rate)
                    .unwrap_or_else(|e| panic!("{format} {rate}: {e}"));
            }
        }
    }

    #[test]
    fn sample_conversion_clips() {
        assert_eq!(to_i16(2.0), 32767);
        assert_eq!(to_i16(-7.0), -32767);
        assert_eq!(to_i16(f32::NAN), 0);
        assert_eq!(to_i16(f32::INFINITY), 32767);
        assert_eq!(to_i16(0.5), 16384);
    }
}
