//! `pcm`: raw signed 16-bit little-endian mono, no header (OpenAI's definition), at the
//! model's rate as it comes: nothing in the bytes says the rate, the client has to know it
//! (OpenAI's models are 24 kHz; here it is the rate of the model that spoke).

use super::{clip, to_i16, AudioError, FormatEncoder};

pub(crate) struct PcmEncoder;

/// Appends `pcm` as s16le; shared with the WAV encoder, whose payload is the same.
pub(crate) fn write_s16le(pcm: &[f32], out: &mut Vec<u8>) {
    out.reserve(pcm.len() * 2);
    for &x in pcm {
        out.extend_from_slice(&to_i16(x).to_le_bytes());
    }
}

impl FormatEncoder for PcmEncoder {
    fn push(&mut self, pcm: &[f32], out: &mut Vec<u8>) -> Result<(), AudioError> {
        write_s16le(pcm, out);
        Ok(())
    }

    fn finish(&mut self, _out: &mut Vec<u8>) -> Result<(), AudioError> {
        Ok(())
    }
}

/// `pcm_f32le`: raw 32-bit float little-endian mono, no header (Mistral's `pcm`), clipped to
/// [-1, 1] as every other format is.
pub(crate) struct PcmF32Encoder;

impl FormatEncoder for PcmF32Encoder {
    fn push(&mut self, pcm: &[f32], out: &mut Vec<u8>) -> Result<(), AudioError> {
        out.reserve(pcm.len() * 4);
        for &x in pcm {
            out.extend_from_slice(&clip(x).to_le_bytes());
        }
        Ok(())
    }

    fn finish(&mut self, _out: &mut Vec<u8>) -> Result<(), AudioError> {
        Ok(())
    }
}
