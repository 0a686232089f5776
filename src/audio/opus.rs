//! `opus`: Opus in Ogg (RFC 7845), mono, encoded at 24 kHz in 20 ms frames.
//!
//! Granule positions count 48 kHz samples, as RFC 7845 requires whatever the input
//! rate. The pre-skip (in the OpusHead) is the encoder lookahead, and the last page's
//! granule is cut back to the true length, so decoders trim both ends exactly.
//! When streaming, each push that completes a frame ends with a flushed Ogg page.

use std::hash::{BuildHasher, Hasher};

use audiopus::coder::Encoder;
use audiopus::{Application, Bitrate, Channels, SampleRate};
use ogg::writing::{PacketWriteEndInfo, PacketWriter};

use super::{clip, AudioError, AudioFormat, FormatEncoder, Mode, SAMPLE_RATE};

/// 20 ms at 24 kHz.
pub(crate) const FRAME: usize = 480;
/// Granule units (48 kHz) per input sample.
const GRANULE_PER_SAMPLE: u64 = (48_000 / SAMPLE_RATE) as u64;
/// 32 kbit/s VBR: clean fullband speech; Opus reaches transparency for speech well below that of mp3.
const BITRATE: i32 = 32_000;
/// Largest packet libopus can produce (RFC 6716 recommends a 4000-byte buffer).
const MAX_PACKET: usize = 4000;
const VENDOR: &[u8] = b"voxtral-tts";

fn err(e: impl std::fmt::Display) -> AudioError {
    AudioError::encoder(AudioFormat::Opus, e)
}

pub(crate) struct OpusEncoder {
    mode: Mode,
    opus: Encoder,
    ogg: PacketWriter<'static, Vec<u8>>,
    serial: u32,
    /// Encoder lookahead in 24 kHz samples; doubled it is the OpusHead pre-skip.
    lookahead: u64,
    pending: Vec<f32>,
    /// Real input samples received.
    samples_in: u64,
    /// Frames (packets) encoded so far.
    frames_out: u64,
    headers_written: bool,
    packet: Vec<u8>,
}

impl OpusEncoder {
    pub(crate) fn new(mode: Mode) -> Result<Self, AudioError> {
        let mut opus =
            Encoder::new(SampleRate::Hz24000, Channels::Mono, Application::Audio).map_err(err)?;
        opus.set_bitrate(Bitrate::BitsPerSecond(BITRATE))
            .map_err(err)?;
        let lookahead = u64::from(opus.lookahead().map_err(err)?);
        // Ogg wants a serial that differs between streams that could get chained;
        // RandomState is a dependency-free source of per-process randomness.
        let serial = std::collections::hash_map::RandomState::new()
            .build_hasher()
            .finish() as u32;
        Ok(Self {
            mode,
            opus,
            ogg: PacketWriter::new(Vec::new()),
            serial,
            lookahead,
            pending: Vec::with_capacity(FRAME),
            samples_in: 0,
            frames_out: 0,
            headers_written: false,
            packet: vec![0; MAX_PACKET],
        })
    }

    fn pre_skip(&self) -> u16 {
        u16::try_from(self.lookahead * GRANULE_PER_SAMPLE).unwrap_or(u16::MAX)
    }

    fn opus_head(&self) -> Vec<u8> {
        let mut h = Vec::with_capacity(19);
        h.extend_from_slice(b"OpusHead");
        h.push(1); // version
        h.push(1); // channels
        h.extend_from_slice(&self.pre_skip().to_le_bytes());
        h.extend_from_slice(&SAMPLE_RATE.to_le_bytes()); // original input rate (informational)
        h.extend_from_slice(&0i16.to_le_bytes()); // output gain
        h.push(0); // channel mapping family 0: mono/stereo, no table
        h
    }

    fn opus_tags() -> Vec<u8> {
        let mut t = Vec::with_capacity(16 + VENDOR.len());
        t.extend_from_slice(b"OpusTags");
        t.extend_from_slice(&(VENDOR.len() as u32).to_le_bytes());
        t.extend_from_slice(VENDOR);
        t.extend_from_slice(&0u32.to_le_bytes()); // no user comments
        t
    }

    fn write(
        &mut self,
        packet: Vec<u8>,
        end: PacketWriteEndInfo,
        granule: u64,
    ) -> Result<(), AudioError> {
        self.ogg
            .write_packet(packet, self.serial, end, granule)
            .map_err(err)
    }

    fn ensure_headers(&mut self) -> Result<(), AudioError> {
        if !self.headers_written {
            // RFC 7845: each header packet ends its own page, with granule 0.
            let head = self.opus_head();
            self.write(head, PacketWriteEndInfo::EndPage, 0)?;
            self.write(Self::opus_tags(), PacketWriteEndInfo::EndPage, 0)?;
            self.headers_written = true;
        }
        Ok(())
    }

    /// Encodes one full frame from `pending`; returns the packet.
    fn encode_frame(&mut self) -> Result<Vec<u8>, AudioError> {
        let n = self
            .opus
            .encode_float(&self.pending, &mut self.packet)
            .map_err(err)?;
        self.pending.clear();
        self.frames_out += 1;
        Ok(self.packet[..n.min(MAX_PACKET)].to_vec())
    }

    fn drain_into(&mut self, out: &mut Vec<u8>) {
        out.append(self.ogg.inner_mut());
    }
}

impl FormatEncoder for OpusEncoder {
    fn push(&mut self, pcm: &[f32], out: &mut Vec<u8>) -> Result<(), AudioError> {
        self.ensure_headers()?;
        let mut last: Option<Vec<u8>> = None;
        for &x in pcm {
            self.pending.push(clip(x));
            self.samples_in += 1;
            if self.pending.len() == FRAME {
                // Hold back one packet: the last one of this push may need to end the page.
                if let Some(p) = last.take() {
                    let g = self.frames_out * FRAME as u64 * GRANULE_PER_SAMPLE;
                    self.write(p, PacketWriteEndInfo::NormalPacket, g)?;
                }
                last = Some(self.encode_frame()?);
            }
        }
        if let Some(p) = last {
            let g = self.frames_out * FRAME as u64 * GRANULE_PER_SAMPLE;
            let end = match self.mode {
                Mode::Stream => PacketWriteEndInfo::EndPage,
                Mode::OneShot => PacketWriteEndInfo::NormalPacket,
            };
            self.write(p, end, g)?;
        }
        self.drain_into(out);
        Ok(())
    }

    fn finish(&mut self, out: &mut Vec<u8>) -> Result<(), AudioError> {
        self.ensure_headers()?;
        // Enough frames that the decoder output covers pre-skip + all input; at least one,
        // because the end-of-stream flag has to travel on a packet.
        let needed = (self.samples_in + self.lookahead).div_ceil(FRAME as u64);
        let end_granule = (self.lookahead + self.samples_in) * GRANULE_PER_SAMPLE;
        loop {
            self.pending.resize(FRAME, 0.0);
            let packet = self.encode_frame()?;
            let full = self.frames_out * FRAME as u64 * GRANULE_PER_SAMPLE;
            if self.frames_out >= needed {
                // The final granule is the true end, which trims the padding on decode.
                let prev = (self.frames_out - 1) * FRAME as u64 * GRANULE_PER_SAMPLE;
                let g = end_granule.clamp(prev, full);
                self.write(packet, PacketWriteEndInfo::EndStream, g)?;
                break;
            }
            self.write(packet, PacketWriteEndInfo::NormalPacket, full)?;
        }
        self.drain_into(out);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn head_fields() {
        let enc = OpusEncoder::new(Mode::Stream).unwrap();
        let h = enc.opus_head();
        assert_eq!(h.len(), 19);
        assert_eq!(&h[..8], b"OpusHead");
        let pre_skip = u16::from_le_bytes([h[10], h[11]]);
        assert_eq!(u64::from(pre_skip), enc.lookahead * 2);
        assert_eq!(u32::from_le_bytes([h[12], h[13], h[14], h[15]]), 24_000);
    }
}
