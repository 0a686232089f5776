//! `opus`: Opus in Ogg (RFC 7845), mono, in 20 ms frames. libopus takes 8, 12, 16, 24 and
//! 48 kHz input: PCM at one of those is encoded as it is, any other rate (22.05, 44.1 kHz,
//! ...) is resampled to 48 kHz first. The OpusHead records the PCM's rate as the "input
//! sample rate"; decoders output 48 kHz whatever it says.
//!
//! Granule positions count 48 kHz samples, as RFC 7845 requires whatever the input
//! rate. The pre-skip (in the OpusHead) is the encoder lookahead, and the last page's
//! granule is cut back to the true length, so decoders trim both ends exactly.
//! When streaming, each push that completes a frame ends with a flushed Ogg page.

use std::hash::{BuildHasher, Hasher};

use audiopus::coder::Encoder;
use audiopus::{Application, Bitrate, Channels, SampleRate};
use ogg::writing::{PacketWriteEndInfo, PacketWriter};

use super::rate::RateAdapter;
use super::{clip, AudioError, AudioFormat, FormatEncoder, Mode};

/// Input rates libopus takes.
const OPUS_RATES: [u32; 5] = [8_000, 12_000, 16_000, 24_000, 48_000];
/// Rate of Ogg Opus granule positions and of decoded output.
const GRANULE_RATE: u32 = 48_000;
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
    /// Rate of the PCM pushed (recorded in the OpusHead).
    input_rate: u32,
    /// From `input_rate` to the rate libopus encodes at.
    rate: RateAdapter,
    /// Samples per 20 ms frame at the encoding rate.
    frame: usize,
    /// Granule units (48 kHz) per sample at the encoding rate.
    granule_per_sample: u64,
    /// Encoder lookahead in samples at the encoding rate; in granule units it is the
    /// OpusHead pre-skip.
    lookahead: u64,
    pending: Vec<f32>,
    /// Real samples received, at the encoding rate.
    samples_in: u64,
    /// Frames (packets) encoded so far.
    frames_out: u64,
    headers_written: bool,
    packet: Vec<u8>,
}

impl OpusEncoder {
    pub(crate) fn new(mode: Mode, sample_rate: u32) -> Result<Self, AudioError> {
        let opus_rate = if OPUS_RATES.contains(&sample_rate) {
            sample_rate
        } else {
            GRANULE_RATE
        };
        let sr = match opus_rate {
            8_000 => SampleRate::Hz8000,
            12_000 => SampleRate::Hz12000,
            16_000 => SampleRate::Hz16000,
            24_000 => SampleRate::Hz24000,
            _ => SampleRate::Hz48000,
        };
        let frame = opus_rate as usize / 50;
        let mut opus = Encoder::new(sr, Channels::Mono, Application::Audio).map_err(err)?;
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
            input_rate: sample_rate,
            rate: RateAdapter::new(AudioFormat::Opus, sample_rate, opus_rate)?,
            frame,
            granule_per_sample: u64::from(GRANULE_RATE / opus_rate),
            lookahead,
            pending: Vec::with_capacity(frame),
            samples_in: 0,
            frames_out: 0,
            headers_written: false,
            packet: vec![0; MAX_PACKET],
        })
    }

    fn pre_skip(&self) -> u16 {
        u16::try_from(self.lookahead * self.granule_per_sample).unwrap_or(u16::MAX)
    }

    fn opus_head(&self) -> Vec<u8> {
        let mut h = Vec::with_capacity(19);
        h.extend_from_slice(b"OpusHead");
        h.push(1); // version
        h.push(1); // channels
        h.extend_from_slice(&self.pre_skip().to_le_bytes());
        h.extend_from_slice(&self.input_rate.to_le_bytes()); // original input rate (informational)
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

    /// Granule position at the end of `frames` frames.
    fn granule(&self, frames: u64) -> u64 {
        frames * self.frame as u64 * self.granule_per_sample
    }

    /// Encodes the whole frames `pcm` (at the encoding rate) completes; with `end_page`,
    /// the last packet ends an Ogg page.
    fn feed(&mut self, pcm: &[f32], end_page: bool) -> Result<(), AudioError> {
        let mut last: Option<Vec<u8>> = None;
        for &x in pcm {
            self.pending.push(clip(x));
            self.samples_in += 1;
            if self.pending.len() == self.frame {
                // Hold back one packet: the last one of this push may need to end the page.
                if let Some(p) = last.take() {
                    let g = self.granule(self.frames_out);
                    self.write(p, PacketWriteEndInfo::NormalPacket, g)?;
                }
                last = Some(self.encode_frame()?);
            }
        }
        if let Some(p) = last {
            let g = self.granule(self.frames_out);
            let end = if end_page {
                PacketWriteEndInfo::EndPage
            } else {
                PacketWriteEndInfo::NormalPacket
            };
            self.write(p, end, g)?;
        }
        Ok(())
    }
}

impl FormatEncoder for OpusEncoder {
    fn push(&mut self, pcm: &[f32], out: &mut Vec<u8>) -> Result<(), AudioError> {
        self.ensure_headers()?;
        let pcm = self.rate.push(pcm)?;
        self.feed(&pcm, self.mode == Mode::Stream)?;
        self.drain_into(out);
        Ok(())
    }

    fn finish(&mut self, out: &mut Vec<u8>) -> Result<(), AudioError> {
        self.ensure_headers()?;
        // The resampler's last samples, if any.
        let rest = self.rate.finish()?;
        self.feed(&rest, false)?;
        // Enough frames that the decoder output covers pre-skip + all input; at least one,
        // because the end-of-stream flag has to travel on a packet.
        let needed = (self.samples_in + self.lookahead).div_ceil(self.frame as u64);
        let end_granule = (self.lookahead + self.samples_in) * self.granule_per_sample;
        loop {
            self.pending.resize(self.frame, 0.0);
            let packet = self.encode_frame()?;
            let full = self.granule(self.frames_out);
            if self.frames_out >= needed {
                // The final granule is the true end, which trims the padding on decode.
                let prev = self.granule(self.frames_out - 1);
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
        // (rate, samples per frame, granule units per sample)
        for (rate, frame, gps) in [
            (24_000, 480, 2),
            (16_000, 320, 3),
            (48_000, 960, 1),
            (44_100, 960, 1),
            (22_050, 960, 1),
        ] {
            let enc = OpusEncoder::new(Mode::Stream, rate).unwrap();
            assert_eq!((enc.frame, enc.granule_per_sample), (frame, gps), "{rate}");
            let h = enc.opus_head();
            assert_eq!(h.len(), 19);
            assert_eq!(&h[..8], b"OpusHead");
            let pre_skip = u16::from_le_bytes([h[10], h[11]]);
            assert_eq!(u64::from(pre_skip), enc.lookahead * gps);
            assert_eq!(u32::from_le_bytes([h[12], h[13], h[14], h[15]]), rate);
        }
    }
}
