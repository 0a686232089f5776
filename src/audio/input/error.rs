//! The one error type of audio input: every way an upload can be refused, each with a message
//! fit to send back to the client (HTTP 400), and a stable code for the JSON error body.

use std::time::Duration;

use super::ContainerFormat;

/// Why an audio upload could not be decoded or resampled.
///
/// Every variant but [`AudioInputError::Internal`] is the client's doing (an HTTP 400); the
/// `Display` text says what was wrong in words a client can act on.
#[derive(Debug, thiserror::Error)]
pub enum AudioInputError {
    /// The upload has no bytes at all.
    #[error("the audio upload is empty")]
    Empty,
    /// The upload is bigger than the caller's byte limit (checked before any decoding).
    #[error("the audio upload is {size} bytes; the limit is {limit} bytes")]
    TooLarge { size: usize, limit: usize },
    /// The decoded audio runs past the caller's duration limit (decoding stops there).
    #[error("the audio is longer than the limit of {:.1} s", limit.as_secs_f64())]
    TooLong { limit: Duration },
    /// The first bytes match none of the containers this layer reads.
    #[error(
        "unrecognized audio format: expected WAV, MP3, FLAC, Ogg (Opus, Vorbis or FLAC) \
         or WebM/Matroska (Opus, Vorbis, FLAC or PCM)"
    )]
    UnknownFormat,
    /// A known container holding something this layer does not decode (a codec, a channel
    /// layout, a sample rate).
    #[error("unsupported {format} audio: {detail}")]
    Unsupported {
        format: ContainerFormat,
        detail: String,
    },
    /// The container or codec data is damaged (bad header, no decodable packet, random bytes
    /// after a valid signature).
    #[error("malformed {format} audio: {detail}")]
    Malformed {
        format: ContainerFormat,
        detail: String,
    },
    /// A well-formed file with no audio in it (no audio track, or zero samples).
    #[error("the {format} audio contains no samples")]
    NoAudio { format: ContainerFormat },
    /// A sample rate outside the range this layer accepts (see [`super::MIN_SAMPLE_RATE`]).
    #[error("sample rate {rate} Hz is outside the supported range {min} to {max} Hz")]
    SampleRate { rate: u32, min: u32, max: u32 },
    /// A third-party decoder panicked on this input; caught and turned into an error.
    #[error("malformed {format} audio: the decoder failed on this file")]
    DecoderPanic { format: ContainerFormat },
    /// A failure that is not the client's doing (the resampler refusing valid arguments).
    #[error("audio processing failed: {0}")]
    Internal(String),
}

impl AudioInputError {
    /// A stable machine-readable code, e.g. for the `code` field of an OpenAI-style error body.
    pub fn code(&self) -> &'static str {
        match self {
            AudioInputError::Empty => "audio_empty",
            AudioInputError::TooLarge { .. } => "audio_too_large",
            AudioInputError::TooLong { .. } => "audio_too_long",
            AudioInputError::UnknownFormat => "audio_unknown_format",
            AudioInputError::Unsupported { .. } => "audio_unsupported",
            AudioInputError::Malformed { .. } | AudioInputError::DecoderPanic { .. } => {
                "audio_malformed"
            }
            AudioInputError::NoAudio { .. } => "audio_no_samples",
            AudioInputError::SampleRate { .. } => "audio_sample_rate",
            AudioInputError::Internal(_) => "audio_internal",
        }
    }

    /// Whether the request was at fault (an HTTP 400) rather than the server (a 500).
    pub fn is_client_error(&self) -> bool {
        !matches!(self, AudioInputError::Internal(_))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_name_the_problem() {
        let e = AudioInputError::TooLarge {
            size: 30_000_000,
            limit: 25_000_000,
        };
        assert_eq!(
            e.to_string(),
            "the audio upload is 30000000 bytes; the limit is 25000000 bytes"
        );
        assert_eq!(e.code(), "audio_too_large");
        let e = AudioInputError::TooLong {
            limit: Duration::from_secs(30),
        };
        assert_eq!(
            e.to_string(),
            "the audio is longer than the limit of 30.0 s"
        );
        let e = AudioInputError::Malformed {
            format: ContainerFormat::Flac,
            detail: "bad header".into(),
        };
        assert_eq!(e.to_string(), "malformed FLAC audio: bad header");
        assert!(e.is_client_error());
        assert!(!AudioInputError::Internal("x".into()).is_client_error());
    }
}
