//! `aac`: AAC-LC in ADTS, mono, 24 kHz, via fdk-aac (cargo feature `aac`, because the
//! Fraunhofer licence is not free-software in Debian's sense).
//!
//! ADTS cannot signal encoder delay, so decoders play fdk's priming samples (`nDelay`)
//! as leading silence; every input sample is still present in the output.

use fdk_aac::enc::{AudioObjectType, BitRate, ChannelMode, Encoder, EncoderParams, Transport};

use super::{to_i16, AudioError, AudioFormat, FormatEncoder, SAMPLE_RATE};

/// Samples per AAC-LC frame.
pub(crate) const FRAME: usize = 1024;
/// 64 kbit/s CBR: the usual rate for mono speech at this sample rate.
const BITRATE: u32 = 64_000;

fn err(e: impl std::fmt::Debug) -> AudioError {
    AudioError::encoder(AudioFormat::Aac, format!("{e:?}"))
}

pub(crate) struct AacEncoder {
    fdk: Encoder,
    /// Encoder delay in samples (leading silence a decoder will output).
    delay: u64,
    pending: Vec<i16>,
    samples_in: u64,
    frames_out: u64,
    outbuf: Vec<u8>,
}

impl AacEncoder {
    pub(crate) fn new() -> Result<Self, AudioError> {
        let fdk = Encoder::new(EncoderParams {
            bit_rate: BitRate::Cbr(BITRATE),
            sample_rate: SAMPLE_RATE,
            transport: Transport::Adts,
            channels: ChannelMode::Mono,
            audio_object_type: AudioObjectType::Mpeg4LowComplexity,
        })
        .map_err(err)?;
        let info = fdk.info().map_err(err)?;
        let outbuf = vec![0; (info.maxOutBufBytes as usize).max(8192)];
        Ok(Self {
            fdk,
            delay: u64::from(info.nDelay),
            pending: Vec::with_capacity(FRAME),
            samples_in: 0,
            frames_out: 0,
            outbuf,
        })
    }

    /// Feeds `pending` (one full frame) to fdk; appends whatever access unit it returns.
    fn encode_pending(&mut self, out: &mut Vec<u8>) -> Result<(), AudioError> {
        let mut input: &[i16] = &self.pending;
        while !input.is_empty() {
            let r = self.fdk.encode(input, &mut self.outbuf).map_err(err)?;
            if r.output_size > 0 {
                out.extend_from_slice(&self.outbuf[..r.output_size.min(self.outbuf.len())]);
                self.frames_out += 1;
            }
            if r.input_consumed == 0 {
                if r.output_size == 0 {
                    // No progress at all: give up on this input rather than spin.
                    return Err(err("encoder consumed no input"));
                }
                continue;
            }
            input = &input[r.input_consumed.min(input.len())..];
        }
        self.pending.clear();
        Ok(())
    }
}

impl FormatEncoder for AacEncoder {
    fn push(&mut self, pcm: &[f32], out: &mut Vec<u8>) -> Result<(), AudioError> {
        for &x in pcm {
            self.pending.push(to_i16(x));
            self.samples_in += 1;
            if self.pending.len() == FRAME {
                self.encode_pending(out)?;
            }
        }
        Ok(())
    }

    fn finish(&mut self, out: &mut Vec<u8>) -> Result<(), AudioError> {
        // fdk-aac 0.8 has no flush call (numInSamples = -1 in C); feeding silence until
        // the delayed input has come out is equivalent, since fdk's flush zero-pads too.
        let needed = (self.samples_in + self.delay).div_ceil(FRAME as u64);
        // A bounded loop: fdk emits one frame per frame of input once primed.
        let limit = needed + self.delay.div_ceil(FRAME as u64) + 4;
        let mut fed = 0;
        while self.frames_out < needed && fed < limit {
            self.pending.resize(FRAME, 0);
            self.encode_pending(out)?;
            fed += 1;
        }
        if self.frames_out < needed {
            return Err(err("encoder did not drain"));
        }
        Ok(())
    }
}
