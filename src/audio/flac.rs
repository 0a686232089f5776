//! `flac`: 16-bit mono 24 kHz FLAC, encoded frame by frame with flacenc.
//!
//! The stream header is sent first with "unknown" totals (0 samples, 0 frame sizes,
//! zero MD5), which the FLAC format allows for streams. A one-shot file gets the real
//! STREAMINFO (sample count, frame sizes, MD5) patched over it at `finish`.

use flacenc::bitsink::MemSink;
use flacenc::component::{BitRepr, Stream, StreamInfo};
use flacenc::config;
use flacenc::error::{Verified, Verify};
use flacenc::source::{Context, Fill, FrameBuf};

use super::{to_i16, AudioError, AudioFormat, FormatEncoder, Mode, SAMPLE_RATE};

/// 2048 samples (85 ms at 24 kHz): a streaming client gets a frame at least that often,
/// and compression stays within a percent or two of the 4096 default.
pub(crate) const BLOCK_SIZE: usize = 2048;
/// "fLaC" + metadata block header + STREAMINFO body.
const HEADER_LEN: usize = 4 + 4 + 34;

fn err(e: impl std::fmt::Display) -> AudioError {
    AudioError::encoder(AudioFormat::Flac, e)
}

pub(crate) struct FlacEncoder {
    mode: Mode,
    config: Verified<config::Encoder>,
    info: StreamInfo,
    framebuf: FrameBuf,
    context: Context,
    pending: Vec<i32>,
    frames: usize,
    header_written: bool,
}

impl FlacEncoder {
    pub(crate) fn new(mode: Mode) -> Result<Self, AudioError> {
        let config = config::Encoder::default()
            .into_verified()
            .map_err(|(_, e)| err(e))?;
        let mut info = StreamInfo::new(SAMPLE_RATE as usize, 1, 16).map_err(err)?;
        info.set_block_sizes(BLOCK_SIZE, BLOCK_SIZE).map_err(err)?;
        Ok(Self {
            mode,
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
}

impl FormatEncoder for FlacEncoder {
    fn push(&mut self, pcm: &[f32], out: &mut Vec<u8>) -> Result<(), AudioError> {
        self.ensure_header(out)?;
        for &x in pcm {
            self.pending.push(i32::from(to_i16(x)));
            if self.pending.len() == BLOCK_SIZE {
                self.encode_pending(out)?;
            }
        }
        Ok(())
    }

    fn finish(&mut self, out: &mut Vec<u8>) -> Result<(), AudioError> {
        self.ensure_header(out)?;
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
        let enc = FlacEncoder::new(Mode::Stream).unwrap();
        let h = enc.streaming_header().unwrap();
        assert_eq!(h.len(), HEADER_LEN);
        assert_eq!(&h[..4], b"fLaC");
        assert_eq!(
            h[4], 0x80,
            "STREAMINFO must be flagged as the last metadata block"
        );
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
            crate::audio::encode_audio(AudioFormat::Flac, &pcm).unwrap();
        }
    }
}
