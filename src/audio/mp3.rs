//! `mp3`: MPEG Layer III, mono, via LAME, at the PCM's rate when MPEG has it: 32, 44.1,
//! 48 kHz are MPEG-1 (1152 samples/frame), 16, 22.05, 24 kHz MPEG-2 and 8, 11.025, 12 kHz
//! MPEG-2.5 (576 samples/frame). Any other rate is resampled to the next of these above
//! (48 kHz for rates above 48 kHz), so the file plays at the right speed and pitch.
//!
//! A one-shot file starts with LAME's Info tag frame, rewritten at the end with the
//! encoder delay and padding so decoders (ffmpeg, browsers) trim to the exact length.
//! A stream cannot rewrite its first frame, so it carries no tag: decoders then play
//! LAME's priming delay and final padding as a little extra silence.

use std::num::NonZeroU32;

use mp3lame_encoder::{max_required_buffer_size, Bitrate, Builder, Encoder, FlushGap, MonoPcm};

use super::rate::{codec_rate, RateAdapter, MPEG_RATES};
use super::{to_i16, AudioError, AudioFormat, FormatEncoder, Mode};

/// 64 kbit/s CBR is transparent for mono speech (and valid at every MPEG rate).
const BITRATE: Bitrate = Bitrate::Kbps64;
/// Upper bound per LAME call; keeps `max_required_buffer_size` small and the C int safe.
const CHUNK: usize = 1 << 16;

fn err(e: impl std::fmt::Display) -> AudioError {
    AudioError::encoder(AudioFormat::Mp3, e)
}

pub(crate) struct Mp3Encoder {
    lame: Encoder,
    mode: Mode,
    rate: RateAdapter,
    scratch: Vec<i16>,
}

impl Mp3Encoder {
    pub(crate) fn new(mode: Mode, sample_rate: u32) -> Result<Self, AudioError> {
        let mp3_rate = codec_rate(sample_rate, &MPEG_RATES);
        let mut b = Builder::new().ok_or_else(|| err("LAME allocation failed"))?;
        b.set_num_channels(1).map_err(err)?;
        b.set_sample_rate(mp3_rate).map_err(err)?;
        // Left unset, LAME picks its own output rate for the bitrate (and resamples to it).
        b.set_output_sample_rate(NonZeroU32::new(mp3_rate))
            .map_err(err)?;
        b.set_brate(BITRATE).map_err(err)?;
        b.set_mode(mp3lame_encoder::Mode::Mono).map_err(err)?;
        // Quality 2 is LAME's recommended "high"; at 24 kHz mono it is still far faster than real time.
        b.set_quality(mp3lame_encoder::Quality::NearBest)
            .map_err(err)?;
        b.set_to_write_vbr_tag(mode == Mode::OneShot).map_err(err)?;
        let lame = b.build().map_err(err)?;
        Ok(Self {
            lame,
            mode,
            rate: RateAdapter::new(AudioFormat::Mp3, sample_rate, mp3_rate)?,
            scratch: Vec::new(),
        })
    }
}

impl Mp3Encoder {
    fn encode(&mut self, pcm: &[f32], out: &mut Vec<u8>) -> Result<(), AudioError> {
        // LAME buffers partial frames itself and only emits whole frames.
        for chunk in pcm.chunks(CHUNK) {
            self.scratch.clear();
            self.scratch.extend(chunk.iter().map(|&x| to_i16(x)));
            out.reserve(max_required_buffer_size(chunk.len()));
            self.lame
                .encode_to_vec(MonoPcm(self.scratch.as_slice()), out)
                .map_err(err)?;
        }
        Ok(())
    }
}

impl FormatEncoder for Mp3Encoder {
    fn push(&mut self, pcm: &[f32], out: &mut Vec<u8>) -> Result<(), AudioError> {
        let pcm = self.rate.push(pcm)?;
        self.encode(&pcm, out)
    }

    fn finish(&mut self, out: &mut Vec<u8>) -> Result<(), AudioError> {
        let rest = self.rate.finish()?;
        self.encode(&rest, out)?;
        // FlushGap pads the last frame with silence; FlushNoGap would drop the tail.
        out.reserve(max_required_buffer_size(0));
        self.lame.flush_to_vec::<FlushGap>(out).map_err(err)?;
        if self.mode == Mode::OneShot {
            // LAME reserved the first frame of the stream for this tag (no ID3 precedes it).
            let mut tag = Vec::with_capacity(self.lame.lame_tag_size());
            if self.lame.lame_tag_encode_to_vec(&mut tag).is_some() && tag.len() <= out.len() {
                out[..tag.len()].copy_from_slice(&tag);
            }
        }
        Ok(())
    }
}
