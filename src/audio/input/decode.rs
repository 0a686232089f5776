//! Demuxing with symphonia and decoding to mono f32: symphonia's decoders for PCM, MP3, FLAC
//! and Vorbis, libopus (see [`super::opus`]) for Opus.

use std::io::{Cursor, ErrorKind};

use symphonia::core::audio::GenericAudioBufferRef;
use symphonia::core::codecs::audio::well_known::{
    CODEC_ID_FLAC, CODEC_ID_MP3, CODEC_ID_OPUS, CODEC_ID_VORBIS,
};
use symphonia::core::codecs::audio::{AudioCodecParameters, AudioDecoderOptions};
use symphonia::core::errors::Error as SymError;
use symphonia::core::formats::probe::ProbeableFormat;
use symphonia::core::formats::{FormatOptions, FormatReader, TrackType};
use symphonia::core::io::{MediaSource, MediaSourceStream, ReadOnlySource};
use symphonia::default::formats::{FlacReader, MkvReader, MpaReader, OggReader, WavReader};

use super::opus::{OpusDecoder, OpusHead, OPUS_RATE};
use super::{check_rate, AudioCodec, AudioInputError, ContainerFormat, DecodeLimits, DecodedAudio};

/// Decodes `bytes` (already sniffed as `format`) to mono f32.
pub(super) fn decode_container(
    bytes: &[u8],
    format: ContainerFormat,
    limits: &DecodeLimits,
) -> Result<DecodedAudio, AudioInputError> {
    let malformed = |e: SymError| AudioInputError::Malformed {
        format,
        detail: describe(&e),
    };
    let cursor = Cursor::new(bytes);
    // The Matroska reader checks element sizes against a known stream length and then refuses
    // a truncated file outright ("missing segment element"); read as a plain stream (what a
    // browser's MediaRecorder sends anyway), it decodes the clusters that are there. Seeking is
    // never needed: decoding runs from start to end.
    let source: Box<dyn MediaSource + '_> = match format {
        ContainerFormat::WebM => Box::new(ReadOnlySource::new(cursor)),
        _ => Box::new(cursor),
    };
    let mss = MediaSourceStream::new(source, Default::default());
    let opts = FormatOptions::default();
    let mut reader: Box<dyn FormatReader + '_> = match format {
        ContainerFormat::Wav => WavReader::try_probe_new(mss, opts),
        ContainerFormat::Mp3 => MpaReader::try_probe_new(mss, opts),
        ContainerFormat::Flac => FlacReader::try_probe_new(mss, opts),
        ContainerFormat::Ogg => OggReader::try_probe_new(mss, opts),
        ContainerFormat::WebM => MkvReader::try_probe_new(mss, opts),
    }
    .map_err(|e| match e {
        SymError::Unsupported(what) => AudioInputError::Unsupported {
            format,
            detail: what.to_string(),
        },
        e => malformed(e),
    })?;

    let track = reader
        .default_track(TrackType::Audio)
        .or_else(|| reader.first_track(TrackType::Audio))
        .ok_or(AudioInputError::NoAudio { format })?;
    let track_id = track.id;
    let params = track
        .codec_params
        .as_ref()
        .and_then(|p| p.audio())
        .cloned()
        .ok_or(AudioInputError::NoAudio { format })?;
    if let Some(rate) = params.sample_rate {
        check_rate(rate)?;
    }

    let mut packets = Packets::new(format, bytes.len());
    let mut sink = MonoSink::new(format, limits);
    let codec = if params.codec == CODEC_ID_OPUS {
        let head = params
            .extra_data
            .as_deref()
            .ok_or_else(|| "no OpusHead in the stream header".to_string())
            .and_then(OpusHead::parse)
            .map_err(|detail| AudioInputError::Malformed { format, detail })?;
        let mut decoder = OpusDecoder::new(&head)
            .map_err(|detail| AudioInputError::Unsupported { format, detail })?;
        let channels = decoder.channels();
        while let Some(packet) = packets.next(reader.as_mut(), track_id, sink.frames)? {
            let trim_end = usize::try_from(packet.trim_end.get()).unwrap_or(usize::MAX);
            match decoder.decode(&packet.data, trim_end) {
                Ok(samples) => {
                    packets.good += 1;
                    sink.push_interleaved(samples, channels, OPUS_RATE)?;
                }
                Err(e) => packets.bad(&e),
            }
        }
        AudioCodec::Opus
    } else {
        let mut decoder = symphonia::default::get_codecs()
            .make_audio_decoder(&params, &AudioDecoderOptions::default())
            .map_err(|e| match e {
                SymError::Unsupported(_) => AudioInputError::Unsupported {
                    format,
                    detail: format!("codec {} (supported: {})", codec_name(&params), SUPPORTED),
                },
                e => malformed(e),
            })?;
        while let Some(packet) = packets.next(reader.as_mut(), track_id, sink.frames)? {
            match decoder.decode(&packet) {
                Ok(buf) => {
                    packets.good += 1;
                    sink.push(buf)?;
                }
                Err(SymError::DecodeError(e)) => packets.bad(&e),
                Err(SymError::IoError(e)) => packets.bad(&e),
                Err(SymError::ResetRequired) => break,
                Err(e) => return Err(malformed(e)),
            }
        }
        match params.codec {
            c if c == CODEC_ID_MP3 => AudioCodec::Mp3,
            c if c == CODEC_ID_FLAC => AudioCodec::Flac,
            c if c == CODEC_ID_VORBIS => AudioCodec::Vorbis,
            _ => AudioCodec::Pcm,
        }
    };
    packets.finish()?;
    sink.finish(codec, params.channels.as_ref().map(|c| c.count()))
}

const SUPPORTED: &str = "PCM, MP3, FLAC, Vorbis, Opus";

fn codec_name(params: &AudioCodecParameters) -> String {
    symphonia::default::get_codecs()
        .get_audio_decoder(params.codec)
        .map(|d| d.codec.info.short_name.to_string())
        .unwrap_or_else(|| format!("{}", params.codec))
}

/// A symphonia error in words for a client; IO errors at this point all mean the data ended
/// where the container said there was more.
fn describe(e: &SymError) -> String {
    match e {
        SymError::IoError(io) if io.kind() == ErrorKind::UnexpectedEof => {
            "the data ends early (truncated?)".into()
        }
        SymError::IoError(io) => io.to_string(),
        SymError::DecodeError(what) => what.to_string(),
        SymError::Unsupported(what) => format!("unsupported feature: {what}"),
        SymError::LimitError(what) => format!("limit exceeded: {what}"),
        other => other.to_string(),
    }
}

/// The packet loop's bookkeeping: end of data, truncation, damaged packets, and a cap on the
/// number of packets so that no malformed container can loop for ever.
struct Packets {
    format: ContainerFormat,
    good: usize,
    bad: usize,
    seen: usize,
    max: usize,
    first_error: Option<String>,
}

impl Packets {
    fn new(format: ContainerFormat, bytes: usize) -> Packets {
        Packets {
            format,
            good: 0,
            bad: 0,
            seen: 0,
            // Every packet but a laced empty one costs at least a byte of input.
            max: bytes.saturating_mul(4).saturating_add(4096),
            first_error: None,
        }
    }

    /// The next packet of `track_id`, or `None` at the end of the usable data: the end of the
    /// stream, a truncation, a chained Ogg stream (only the first is read), or a demuxing
    /// error after some audio (a damaged tail is cut off, like a truncation).
    fn next(
        &mut self,
        reader: &mut (dyn FormatReader + '_),
        track_id: u32,
        frames_so_far: usize,
    ) -> Result<Option<symphonia::core::packet::Packet>, AudioInputError> {
        loop {
            self.seen += 1;
            if self.seen > self.max {
                return Err(AudioInputError::Malformed {
                    format: self.format,
                    detail: "too many packets for the size of the data".into(),
                });
            }
            match reader.next_packet() {
                Ok(Some(p)) if p.track_id == track_id => return Ok(Some(p)),
                Ok(Some(_)) => continue,
                Ok(None) | Err(SymError::ResetRequired) => return Ok(None),
                Err(SymError::IoError(e)) if e.kind() == ErrorKind::UnexpectedEof => {
                    return Ok(None)
                }
                Err(e) if frames_so_far > 0 => {
                    tracing::debug!(format = %self.format, "audio input: stream cut at a demuxing error: {e}");
                    return Ok(None);
                }
                Err(e) => {
                    return Err(AudioInputError::Malformed {
                        format: self.format,
                        detail: describe(&e),
                    })
                }
            }
        }
    }

    fn bad(&mut self, e: &dyn std::fmt::Display) {
        self.bad += 1;
        if self.first_error.is_none() {
            self.first_error = Some(e.to_string());
        }
    }

    /// Damaged packets are skipped (as players do), but a stream where they outnumber good
    /// ones is refused.
    fn finish(self) -> Result<(), AudioInputError> {
        if self.bad > 0 {
            tracing::debug!(format = %self.format, good = self.good, bad = self.bad,
                "audio input: undecodable packets skipped");
        }
        if self.bad > self.good {
            return Err(AudioInputError::Malformed {
                format: self.format,
                detail: format!(
                    "{} of {} packets could not be decoded ({})",
                    self.bad,
                    self.bad + self.good,
                    self.first_error.as_deref().unwrap_or("?")
                ),
            });
        }
        Ok(())
    }
}

/// Collects decoded audio as mono (the mean of the channels), enforcing the duration limit as
/// it goes so that no upload can make it allocate more than the limit allows.
struct MonoSink {
    format: ContainerFormat,
    limits: DecodeLimits,
    samples: Vec<f32>,
    frames: usize,
    rate: Option<u32>,
    max_frames: usize,
    channels: usize,
    planes: Vec<Vec<f32>>,
}

impl MonoSink {
    fn new(format: ContainerFormat, limits: &DecodeLimits) -> MonoSink {
        MonoSink {
            format,
            limits: *limits,
            samples: Vec::new(),
            frames: 0,
            rate: None,
            max_frames: 0,
            channels: 0,
            planes: Vec::new(),
        }
    }

    /// Checks the rate (fixed for the whole stream) and that `frames` more fit the limit.
    fn admit(&mut self, frames: usize, rate: u32, channels: usize) -> Result<(), AudioInputError> {
        match self.rate {
            None => {
                check_rate(rate)?;
                self.rate = Some(rate);
                self.max_frames = self.limits.max_frames(rate);
            }
            Some(r) if r != rate => {
                return Err(AudioInputError::Unsupported {
                    format: self.format,
                    detail: format!("the sample rate changes mid-stream ({r} Hz to {rate} Hz)"),
                })
            }
            Some(_) => {}
        }
        if channels == 0 {
            return Err(AudioInputError::Malformed {
                format: self.format,
                detail: "a packet decoded to zero channels".into(),
            });
        }
        self.channels = self.channels.max(channels);
        if self.frames + frames > self.max_frames {
            return Err(AudioInputError::TooLong {
                limit: self.limits.max_duration,
            });
        }
        self.frames += frames;
        Ok(())
    }

    fn push(&mut self, buf: GenericAudioBufferRef<'_>) -> Result<(), AudioInputError> {
        let frames = buf.frames();
        if frames == 0 {
            return Ok(());
        }
        let channels = buf.spec().channels().count();
        self.admit(frames, buf.spec().rate(), channels)?;
        buf.copy_to_vecs_planar::<f32>(&mut self.planes);
        let planes = &self.planes[..channels.min(self.planes.len())];
        let scale = 1.0 / planes.len().max(1) as f32;
        self.samples.extend((0..frames).map(|i| {
            let sum: f32 = planes
                .iter()
                .map(|p| p.get(i).copied().unwrap_or(0.0))
                .sum();
            sum * scale
        }));
        Ok(())
    }

    fn push_interleaved(
        &mut self,
        samples: &[f32],
        channels: usize,
        rate: u32,
    ) -> Result<(), AudioInputError> {
        let frames = samples.len() / channels.max(1);
        if frames == 0 {
            return Ok(());
        }
        self.admit(frames, rate, channels)?;
        let scale = 1.0 / channels as f32;
        self.samples.extend(
            samples
                .chunks_exact(channels)
                .map(|f| f.iter().sum::<f32>() * scale),
        );
        Ok(())
    }

    fn finish(
        mut self,
        codec: AudioCodec,
        declared_channels: Option<usize>,
    ) -> Result<DecodedAudio, AudioInputError> {
        let Some(sample_rate) = self.rate.filter(|_| !self.samples.is_empty()) else {
            return Err(AudioInputError::NoAudio {
                format: self.format,
            });
        };
        // NaN or infinite samples (float WAV can carry them) would poison any model input.
        for s in &mut self.samples {
            if !s.is_finite() {
                *s = 0.0;
            }
        }
        Ok(DecodedAudio {
            samples: self.samples,
            sample_rate,
            source_channels: declared_channels
                .unwrap_or(self.channels)
                .max(self.channels),
            format: self.format,
            codec,
        })
    }
}
