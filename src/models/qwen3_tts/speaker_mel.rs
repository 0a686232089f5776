//! The speaker encoder's log-mel front end, as the official `extract_speaker_embedding` computes
//! it on a 24 kHz clip (spec §10): reflect pad of `(n_fft − hop) / 2` on each side, frames of
//! `n_fft` every `hop` samples (`center=False`), periodic Hann window, magnitude
//! `sqrt(re² + im² + 1e-9)`, librosa's Slaney filterbank (0 Hz to 12 kHz) and
//! `ln(max(·, 1e-5))`.
//!
//! The FFT and the filterbank sums run in f64 and are rounded once, so that this side adds no
//! rounding of its own to the reference's f32 arithmetic.

use crate::audio::mel::{reflect_pad, slaney_mel_filters, MelBank};

/// The clip rate the speaker encoder reads.
pub const SPEAKER_SAMPLE_RATE: u32 = 24_000;
const N_FFT: usize = 1024;
const HOP: usize = 256;
const MEL_BINS: usize = 128;
const F_MAX: f64 = 12_000.0;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SpeakerMelError {
    #[error("a reference clip of {samples} samples is too short: it needs at least {min}")]
    TooShort { samples: usize, min: usize },
}

/// Frame-major log-mel: `data[t * 128 + m]`, the `[time, mels]` layout the encoder reads.
#[derive(Clone, Debug, PartialEq)]
pub struct SpeakerMel {
    pub frames: usize,
    pub data: Vec<f32>,
}

impl SpeakerMel {
    pub const BINS: usize = MEL_BINS;
}

pub struct SpeakerMelFrontEnd {
    /// With librosa's filterbank.
    bank: MelBank,
}

impl Default for SpeakerMelFrontEnd {
    fn default() -> Self {
        Self::new()
    }
}

impl SpeakerMelFrontEnd {
    pub fn new() -> Self {
        let filters = slaney_mel_filters(N_FFT / 2 + 1, MEL_BINS, SPEAKER_SAMPLE_RATE, F_MAX);
        SpeakerMelFrontEnd {
            bank: MelBank::new(N_FFT, HOP, MEL_BINS, filters),
        }
    }

    /// Log-mel of a mono clip at 24 kHz: `len / hop` frames (for `len ≥ hop`).
    pub fn compute(&self, audio: &[f32]) -> Result<SpeakerMel, SpeakerMelError> {
        let pad = (N_FFT - HOP) / 2;
        // The reflect pad needs more input samples than it pads, and one frame must fit.
        let min = pad + 1;
        if audio.len() < min {
            return Err(SpeakerMelError::TooShort {
                samples: audio.len(),
                min,
            });
        }
        let padded = reflect_pad(audio, pad);
        let frames = (padded.len() - N_FFT) / HOP + 1;
        let magnitude = |power: f64| (power + 1e-9).sqrt() as f32;
        let data = self
            .bank
            .frames(&padded, frames, magnitude, |mel| mel.max(1e-5).ln());
        Ok(SpeakerMel { frames, data })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_are_len_over_hop_and_silence_is_the_magnitude_floor() {
        let mel = SpeakerMelFrontEnd::new().compute(&[0.0; 2560]).unwrap();
        assert_eq!(mel.frames, 10);
        assert_eq!(mel.data.len(), 10 * 128);
        // Every band reads sqrt(1e-9) times its filter's sum.
        assert!(mel.data.iter().all(|v| v.is_finite() && *v < -8.0));
    }

    #[test]
    fn a_clip_shorter_than_the_reflect_pad_is_an_error() {
        assert_eq!(
            SpeakerMelFrontEnd::new().compute(&[0.1; 384]),
            Err(SpeakerMelError::TooShort {
                samples: 384,
                min: 385
            })
        );
    }
}
