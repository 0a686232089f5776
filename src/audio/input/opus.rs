//! Opus packets (from Ogg or WebM, demuxed by symphonia) decoded by libopus through `audiopus`:
//! symphonia has no Opus decoder. Output is 48 kHz, the Opus pre-skip and output gain of the
//! `OpusHead` applied (RFC 7845).

use audiopus::coder::Decoder;
use audiopus::packet::Packet;
use audiopus::{Channels, MutSignals, SampleRate};

/// Opus always decodes at 48 kHz here (its native rate; no libopus-internal resampling).
pub(super) const OPUS_RATE: u32 = 48_000;

/// Longest Opus packet: 120 ms at 48 kHz (RFC 6716 §3.2.5), per channel.
const MAX_FRAMES_PER_PACKET: usize = 5760;

/// The fields of an `OpusHead` identification header (RFC 7845 §5.1) decoding needs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct OpusHead {
    pub channels: u8,
    pub pre_skip: u16,
    /// Output gain, Q7.8 dB.
    pub output_gain: i16,
    pub mapping_family: u8,
}

impl OpusHead {
    pub fn parse(b: &[u8]) -> Result<OpusHead, String> {
        if b.len() < 19 || &b[..8] != b"OpusHead" {
            return Err("missing or short OpusHead header".into());
        }
        // Major version 0 only; minor versions are compatible (RFC 7845 §5.1).
        if b[8] >> 4 != 0 {
            return Err(format!("unsupported OpusHead version {}", b[8]));
        }
        let head = OpusHead {
            channels: b[9],
            pre_skip: u16::from_le_bytes([b[10], b[11]]),
            output_gain: i16::from_le_bytes([b[16], b[17]]),
            mapping_family: b[18],
        };
        if head.channels == 0 {
            return Err("OpusHead declares zero channels".into());
        }
        Ok(head)
    }
}

/// Decodes the packets of one Opus stream to interleaved f32 at 48 kHz.
#[derive(Debug)]
pub(super) struct OpusDecoder {
    decoder: Decoder,
    channels: usize,
    /// Pre-skip frames still to drop from the start of the output.
    skip: usize,
    gain: f32,
    buf: Vec<f32>,
}

impl OpusDecoder {
    /// Only mono and stereo streams (channel mapping family 0, or family 1 with at most two
    /// channels, which is a single Opus stream too) are decoded: `audiopus` exposes no
    /// multistream decoder.
    pub fn new(head: &OpusHead) -> Result<OpusDecoder, String> {
        let channels = match (head.mapping_family, head.channels) {
            (0 | 1, 1) => Channels::Mono,
            (0 | 1, 2) => Channels::Stereo,
            (0, n) => {
                return Err(format!(
                    "OpusHead declares {n} channels for mapping family 0"
                ))
            }
            (family, n) => {
                return Err(format!(
                    "Opus with {n} channels (channel mapping family {family}) is not supported; \
                     send mono or stereo"
                ))
            }
        };
        let decoder = Decoder::new(SampleRate::Hz48000, channels)
            .map_err(|e| format!("libopus decoder: {e}"))?;
        let channels = usize::from(head.channels);
        Ok(OpusDecoder {
            decoder,
            channels,
            skip: usize::from(head.pre_skip),
            gain: 10f32.powf(f32::from(head.output_gain) / (20.0 * 256.0)),
            buf: vec![0.0; MAX_FRAMES_PER_PACKET * channels],
        })
    }

    pub fn channels(&self) -> usize {
        self.channels
    }

    /// Decodes one packet; returns its interleaved samples after the pre-skip, less
    /// `trim_end` frames at the end (the container's end padding, when it says so).
    pub fn decode(&mut self, packet: &[u8], trim_end: usize) -> Result<&[f32], String> {
        let packet = Packet::try_from(packet).map_err(|e| e.to_string())?;
        let out = MutSignals::try_from(&mut self.buf[..]).map_err(|e| e.to_string())?;
        let frames = self
            .decoder
            .decode_float(Some(packet), out, false)
            .map_err(|e| e.to_string())?
            .min(MAX_FRAMES_PER_PACKET);
        let skip = self.skip.min(frames);
        self.skip -= skip;
        let end = frames.saturating_sub(trim_end).max(skip);
        let samples = &mut self.buf[skip * self.channels..end * self.channels];
        if self.gain != 1.0 {
            samples.iter_mut().for_each(|s| *s *= self.gain);
        }
        Ok(samples)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn head(channels: u8, pre_skip: u16, gain: i16, family: u8) -> Vec<u8> {
        let mut b = b"OpusHead".to_vec();
        b.push(1);
        b.push(channels);
        b.extend_from_slice(&pre_skip.to_le_bytes());
        b.extend_from_slice(&48_000u32.to_le_bytes());
        b.extend_from_slice(&gain.to_le_bytes());
        b.push(family);
        b
    }

    #[test]
    fn parses_head() {
        let h = OpusHead::parse(&head(2, 312, -256, 0)).unwrap();
        assert_eq!(
            h,
            OpusHead {
                channels: 2,
                pre_skip: 312,
                output_gain: -256,
                mapping_family: 0
            }
        );
        assert!(OpusHead::parse(b"OpusHead").is_err());
        assert!(OpusHead::parse(&head(0, 0, 0, 0)).is_err());
        let mut v = head(1, 0, 0, 0);
        v[8] = 0x10;
        assert!(OpusHead::parse(&v).is_err());
    }

    #[test]
    fn refuses_multichannel() {
        let h = OpusHead::parse(&head(6, 312, 0, 1)).unwrap();
        assert!(OpusDecoder::new(&h).unwrap_err().contains("6 channels"));
        let h = OpusHead::parse(&head(3, 312, 0, 0)).unwrap();
        assert!(OpusDecoder::new(&h).is_err());
    }

    #[test]
    fn garbage_packets_are_errors_and_pre_skip_is_dropped() {
        let h = OpusHead::parse(&head(1, 100, 0, 0)).unwrap();
        let mut d = OpusDecoder::new(&h).unwrap();
        assert!(d.decode(&[], 0).is_err());
        // TOC 0xf8: CELT-only, 20 ms, mono, one frame; 0 payload bytes is a valid (silent)
        // frame in libopus' eyes: 960 frames, less the pre-skip of 100.
        let out = d.decode(&[0xf8], 0).unwrap();
        assert_eq!(out.len(), 860);
        let out = d.decode(&[0xf8], 60).unwrap();
        assert_eq!(out.len(), 900);
        // Code 3 with a frame count of 0 is invalid (RFC 6716 §3.2.5).
        assert!(d.decode(&[0xfb, 0x00], 0).is_err());
    }
}
