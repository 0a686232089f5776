//! `aac`: AAC-LC in ADTS, mono, via fdk-aac (cargo feature `aac`, because the
//! Fraunhofer licence is not free-software in Debian's sense), at the PCM's rate when it is
//! one of the MPEG rates (8, 11.025, 12, 16, 22.05, 24, 32, 44.1, 48 kHz); any other rate is
//! resampled to the next of these above (48 kHz for rates above 48 kHz).
//!
//! ADTS cannot signal encoder delay, so decoders play fdk's priming samples (`nDelay`)
//! as leading silence; every input sample is still present in the output.

use fdk_aac::enc::{AudioObjectType, BitRate, ChannelMode, Encoder, EncoderParams, Transport};

use super::rate::{codec_rate, RateAdapter, MPEG_RATES};
use super::{to_i16, AudioError, AudioFormat, FormatEncoder};

/// Samples per AAC-LC frame.
pub(crate) const FRAME: usize = 1024;
/// 64 kbit/s CBR: the usual rate for mono speech at 24 kHz and above.
const BITRATE: u32 = 64_000;

/// The bitrate at `rate`: [`BITRATE`], or less where AAC-LC cannot spend that much (at most
/// 6144 bits per 1024-sample frame per channel, i.e. 6 bits a sample).
fn bitrate(rate: u32) -> u32 {
    BITRATE.min(rate * 6)
}

fn err(e: impl std::fmt::Debug) -> AudioError {
    AudioError::encoder(AudioFormat::Aac, format!("{e:?}"))
}

pub(crate) struct AacEncoder {
    fdk: Encoder,
    rate: RateAdapter,
    /// Encoder delay in samples (leading silence a decoder will output).
    delay: u64,
    pending: Vec<i16>,
    samples_in: u64,
    frames_out: u64,
    outbuf: Vec<u8>,
}

impl AacEncoder {
    pub(crate) fn new(sample_rate: u32) -> Result<Self, AudioError> {
        let aac_rate = codec_rate(sample_rate, &MPEG_RATES);
        let fdk = Encoder::new(EncoderParams {
            bit_rate: BitRate::Cbr(bitrate(aac_rate)),
            sample_rate: aac_rate,
            transport: Transport::Adts,
            channels: ChannelMode::Mono,
            audio_object_type: AudioObjectType::Mpeg4LowComplexity,
        })
        .map_err(err)?;
        let info = fdk.info().map_err(err)?;
        let outbuf = vec![0; (info.maxOutBufBytes as usize).max(8192)];
        Ok(Self {
            fdk,
            rate: RateAdapter::new(AudioFormat::Aac, sample_rate, aac_rate)?,
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

    /// Encodes the whole frames `pcm` (at the AAC rate) completes.
    fn feed(&mut self, pcm: &[f32], out: &mut Vec<u8>) -> Result<(), AudioError> {
        for &x in pcm {
            self.pending.push(to_i16(x));
            self.samples_in += 1;
            if self.pending.len() == FRAME {
                self.encode_pending(out)?;
            }
        }
        Ok(())
    }
}

impl FormatEncoder for AacEncoder {
    fn push(&mut self, pcm: &[f32], out: &mut Vec<u8>) -> Result<(), AudioError> {
        let pcm = self.rate.push(pcm)?;
        self.feed(&pcm, out)
    }

    fn finish(&mut self, out: &mut Vec<u8>) -> Result<(), AudioError> {
        let rest = self.rate.finish()?;
        self.feed(&rest, out)?;
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
