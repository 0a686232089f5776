//! `flac`: 16-bit mono FLAC at the PCM's own rate (STREAMINFO says it), encoded frame by
//! frame with flacenc. flacenc takes rates up to 96 kHz, and a frame header can only name
//! a rate above 65 535 Hz in tens of Hz: other rates (above 96 kHz, or such as 88 201 Hz)
//! are resampled to 96 kHz, the one case where FLAC output is not the input bit for bit.
//!
//! The stream header is sent first with "unknown" totals (0 samples, 0 frame sizes,
//! zero MD5), which the FLAC format allows for streams. A one-shot file gets the real
//! STREAMINFO (sample count, frame sizes, MD5) patched over it at `finish`.

use flacenc::bitsink::MemSink;
use flacenc::component::{BitRepr, Stream, StreamInfo};
use flacenc::config;
use flacenc::error::{Verified, Verify};
use flacenc::source::{Context, Fill, FrameBuf};

use super::rate::RateAdapter;
use super::{to_i16, AudioError, AudioFormat, FormatEncoder, Mode};

/// 2048 samples (85 ms at 24 kHz, 43 ms at 48 kHz): a streaming client gets a frame at least that often,
/// and compression stays within a percent or two of the 4096 default.
pub(crate) const BLOCK_SIZE: usize = 2048;
/// "fLaC" + metadata block header + STREAMINFO body.
const HEADER_LEN: usize = 4 + 4 + 34;

fn err(e: impl std::fmt::Display) -> AudioError {
    AudioError::encoder(AudioFormat::Flac, e)
}

/// The rate to encode PCM at `rate` at (see the module documentation).
fn flac_rate(rate: u32) -> u32 {
    if rate <= 65_535 || rate <= 96_000 && rate.is_multiple_of(10) {
        rate
    } else {
        96_000
    }
}

pub(crate) struct FlacEncoder {
    mode: Mode,
    rate: RateAdapter,
    config: Verified<config::Encoder>,
    info: StreamInfo,
    framebuf: FrameBuf,
    context: Context,
    pending: Vec<i32>,
    frames: usize,
    header_written: bool,
}

impl FlacEncoder {
    pub(crate) fn new(mode: Mode, sample_rate: u32) -> Result<Self, AudioError> {
        let config = config::Encoder::default()
            .into_verified()
            .map_err(|(_, e)| err(e))?;
        let rate = flac_rate(sample_rate);
        let mut info = StreamInfo::new(rate as usize, 1, 16).map_err(err)?;
        info.set_block_sizes(BLOCK_SIZE, BLOCK_SIZE).map_err(err)?;
        Ok(Self {
            mode,
            rate: RateAdapter::new(AudioFormat::Flac, sample_rate, rate)?,
            config,
            info,
            framebuf: FrameBuf::with_size(1, BLOCK_SIZE).map_err(err)?,
            context: Context::new(16, 1),
            pending: Vec::with_capacity(BLOCK_SIZE),
            frames: 0,
            header_written: false,
        })
    }

    /// Serialises "fLaC" + STREAMINFO for `info`.
    fn header_bytes(info: &StreamInfo) -> Result<Vec<u8>, AudioError> {
        let stream = Stream::with_stream_info(info.clone());
        let mut sink = MemSink::<u8>::with_capacity(stream.count_bits());
        stream.write(&mut sink).map_err(err)?;
        Ok(sink.into_inner())
    }

    fn streaming_header(&self) -> Result<Vec<u8>, AudioError> {
        let mut info = self.info.clone();
        // 0 = unknown for frame sizes; StreamInfo::new starts min at u32::MAX otherwise.
        info.set_frame_sizes(0, 0).map_err(err)?;
        Self::header_bytes(&info)
    }

    fn ensure_header(&mut self, out: &mut Vec<u8>) -> Result<(), AudioError> {
        if !self.header_written {
            out.extend_from_slice(&self.streaming_header()?);
            self.header_written = true;
        }
        Ok(())
    }

    /// Encodes `pending` (at most one block) as the next frame.
    fn encode_pending(&mut self, out: &mut Vec<u8>) -> Result<(), AudioError> {
        if self.pending.is_empty() {
            return Ok(());
        }
        (&mut self.framebuf, &mut self.context)
            .fill_interleaved(&self.pending)
            .map_err(err)?;
        self.pending.clear();
        let frame =
            flacenc::encode_fixed_size_frame(&self.config, &self.framebuf, self.frames, &self.info)
                .map_err(err)?;
        self.frames += 1;
        self.info.update_frame_info(&frame);
        let mut sink = MemSink::<u8>::with_capacity(frame.count_bits());
        frame.write(&mut sink).map_err(err)?;
        out.extend_from_slice(sink.as_slice());
        Ok(())
    }

    /// Encodes the whole blocks `pcm` (at the FLAC rate) completes.
    fn feed(&mut self, pcm: &[f32], out: &mut Vec<u8>) -> Result<(), AudioError> {
        for &x in pcm {
            self.pending.push(i32::from(to_i16(x)));
            if self.pending.len() == BLOCK_SIZE {
                self.encode_pending(out)?;
            }
        }
        Ok(())
    }
}

impl FormatEncoder for FlacEncoder {
    fn push(&mut self, pcm: &[f32], out: &mut Vec<u8>) -> Result<(), AudioError> {
        self.ensure_header(out)?;
        let pcm = self.rate.push(pcm)?;
        self.feed(&pcm, out)
    }

    fn finish(&mut self, out: &mut Vec<u8>) -> Result<(), AudioError> {
        self.ensure_header(out)?;
        let rest = self.rate.finish()?;
        self.feed(&rest, out)?;
        // The last frame may be shorter than BLOCK_SIZE (allowed for fixed-blocksize streams).
        self.encode_pending(out)?;
        if self.mode == Mode::OneShot && out.len() >= HEADER_LEN {
            let mut info = self.info.clone();
            // STREAMINFO's block sizes exclude the short last block: keep the nominal size.
            info.set_block_sizes(BLOCK_SIZE, BLOCK_SIZE).map_err(err)?;
            if self.frames == 0 {
                info.set_frame_sizes(0, 0).map_err(err)?;
            }
            info.set_md5_digest(&self.context.md5_digest());
            let header = Self::header_bytes(&info)?;
            if header.len() == HEADER_LEN {
                out[..HEADER_LEN].copy_from_slice(&header);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_is_42_bytes() {
        let enc = FlacEncoder::new(Mode::Stream, 24_000).unwrap();
        let h = enc.streaming_header().unwrap();
        assert_eq!(h.len(), HEADER_LEN);
        assert_eq!(&h[..4], b"fLaC");
        assert_eq!(
            h[4], 0x80,
            "STREAMINFO must be flagged as the last metadata block"
        );
    }

    #[test]
    fn streaminfo_carries_the_rate() {
        for (rate, want) in [
            (8_000u32, 8_000),
            (16_000, 16_000),
            (22_050, 22_050),
            (24_000, 24_000),
            (44_100, 44_100),
            (48_000, 48_000),
            (65_535, 65_535),
            (88_200, 88_200),
            (88_201, 96_000),
            (96_000, 96_000),
            (192_000, 96_000),
        ] {
            let h = FlacEncoder::new(Mode::Stream, rate)
                .unwrap()
                .streaming_header()
                .unwrap();
            // STREAMINFO body from byte 8: rate is the 20 bits after the 10 bytes of sizes.
            let bits = u32::from_be_bytes([h[18], h[19], h[20], 0]) >> 12;
            assert_eq!(bits, want, "{rate}");
            // Frames encode at that rate too.
            let pcm = vec![0.25; 3000];
            crate::audio::encode_audio(AudioFormat::Flac, &pcm, rate).unwrap();
        }
    }

    #[test]
    fn odd_lengths_do_not_fail() {
        for n in [
            0usize,
            1,
            5,
            31,
            32,
            33,
            BLOCK_SIZE - 1,
            BLOCK_SIZE,
            BLOCK_SIZE + 1,
        ] {
            let pcm: Vec<f32> = (0..n)
                .map(|i| ((i * 7919) % 200) as f32 / 100.0 - 1.0)
                .collect();
            crate::audio::encode_audio(AudioFormat::Flac, &pcm, 24_000).unwrap();
        }
    }
}
