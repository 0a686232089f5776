//! The log-mel front end, as vLLM 0.33's `compute_whisper_melspec` computes it (spec §2), on
//! the host: `torch.stft(n_fft, hop, periodic Hann, center=True, reflect)` without its last
//! frame, power `|X|²`, the Slaney filterbank of mistral-common (`mel_filter_bank`, float64
//! then float32), `log10(max(mel, 1e-10))`, the floor `max(·, log_mel_max − 8)` and
//! `(x + 4) / 4`.
//!
//! Inputs, window, filters and outputs are f32 as in the reference; the FFT and the filterbank
//! sums run in f64 and are rounded once, so that this side adds no rounding of its own. What
//! is left is the reference's f32 FFT rounding: a band that reads a single FFT bin whose power
//! is ~1e-9 of the frame's peak comes out up to ~3e-5 off the exact value there (measured in
//! tools/goldens/voxtral_realtime; `case.json` records it for the golden signal).

use super::params::MelSettings;
use crate::audio::mel::{reflect_pad, slaney_mel_filters, MelBank};

/// Mel frames, frame-major: `data[t * num_mel_bins + m]` (the `[time, channels]` layout the
/// conv stem reads).
#[derive(Clone, Debug, PartialEq)]
pub struct LogMel {
    pub frames: usize,
    pub num_mel_bins: usize,
    pub data: Vec<f32>,
}

impl LogMel {
    /// Mel `m` of frame `t`.
    pub fn at(&self, t: usize, m: usize) -> f32 {
        self.data[t * self.num_mel_bins + m]
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum MelError {
    #[error("{samples} samples is too short for the mel front end: it needs more than {min}")]
    TooShort { samples: usize, min: usize },
}

pub struct MelFrontEnd {
    settings: MelSettings,
    /// With mistral-common's filterbank.
    bank: MelBank,
}

/// The top of mistral-common's filterbank (`mel_filter_bank(bins, mels, 0 Hz, 8000 Hz, rate)`).
const F_MAX: f64 = 8000.0;

impl MelFrontEnd {
    pub fn new(settings: &MelSettings) -> Self {
        let n_fft = settings.n_fft;
        let bins = n_fft / 2 + 1;
        let mels = settings.num_mel_bins;
        let filters = slaney_mel_filters(bins, mels, settings.sample_rate, F_MAX);
        MelFrontEnd {
            bank: MelBank::new(n_fft, settings.hop_length, mels, filters),
            settings: settings.clone(),
        }
    }

    /// Log-mel features of mono audio at the model's rate: `len / hop` frames, frame `t`
    /// centred on sample `t * hop`.
    pub fn compute(&self, audio: &[f32]) -> Result<LogMel, MelError> {
        let s = &self.settings;
        let (n_fft, hop, n_mels) = (s.n_fft, s.hop_length, s.num_mel_bins);
        let half = n_fft / 2;
        // torch's reflect pad needs fewer pad samples than input samples.
        if audio.len() <= half {
            return Err(MelError::TooShort {
                samples: audio.len(),
                min: half,
            });
        }
        let padded = reflect_pad(audio, half);
        let frames = audio.len() / hop;
        let mut mel = self.log10_frames(&padded, frames);
        let ceiling = match s.global_log_mel_max {
            Some(max) => max as f32,
            None => mel.iter().copied().fold(f32::NEG_INFINITY, f32::max),
        };
        normalize(&mut mel, ceiling);
        Ok(LogMel {
            frames,
            num_mel_bins: n_mels,
            data: mel,
        })
    }

    /// The features of `frames` frames of a signal that already carries its edge padding:
    /// frame `t` reads `padded[t * hop..t * hop + n_fft]`, which must exist. Streaming
    /// computes a stream's frames from a window of it this way, with the fixed floor of
    /// [`fixed_ceiling`](Self::fixed_ceiling).
    pub fn frames_of_padded(&self, padded: &[f32], frames: usize, ceiling: f32) -> Vec<f32> {
        let mut mel = self.log10_frames(padded, frames);
        normalize(&mut mel, ceiling);
        mel
    }

    /// `global_log_mel_max`: the floor's ceiling when it does not depend on the utterance.
    pub fn fixed_ceiling(&self) -> Option<f32> {
        self.settings.global_log_mel_max.map(|max| max as f32)
    }

    /// `log10(max(mel, 1e-10))` of `frames` frames of `padded`, frame-major; power `|X|²`.
    fn log10_frames(&self, padded: &[f32], frames: usize) -> Vec<f32> {
        let power = |p: f64| p as f32;
        self.bank
            .frames(padded, frames, power, |mel| mel.max(1e-10).log10())
    }
}

/// The floor `max(·, ceiling − 8)`, then `(x + 4) / 4`.
fn normalize(mel: &mut [f32], ceiling: f32) {
    let floor = ceiling - 8.0;
    for v in mel.iter_mut() {
        *v = (v.max(floor) + 4.0) / 4.0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn front_end() -> MelFrontEnd {
        MelFrontEnd::new(&MelSettings {
            sample_rate: 16000,
            n_fft: 400,
            hop_length: 160,
            num_mel_bins: 128,
            global_log_mel_max: Some(1.5),
        })
    }

    #[test]
    fn digital_silence_is_the_floor_and_frames_are_len_over_hop() {
        let mel = front_end().compute(&[0.0; 1601]).unwrap();
        assert_eq!((mel.frames, mel.num_mel_bins), (10, 128));
        assert!(mel.data.iter().all(|&v| v == -0.625));
    }

    #[test]
    fn a_tone_peaks_in_the_bands_of_its_bin() {
        // 1 kHz is FFT bin 25 at 16 kHz / 400.
        let tone: Vec<f32> = (0..3200)
            .map(|i| (2.0 * std::f32::consts::PI * 1000.0 * i as f32 / 16000.0).sin())
            .collect();
        let fe = front_end();
        let mel = fe.compute(&tone).unwrap();
        let t = 10;
        let peak = (0..128)
            .max_by(|&a, &b| mel.at(t, a).total_cmp(&mel.at(t, b)))
            .unwrap();
        let filters = slaney_mel_filters(201, 128, 16000, F_MAX);
        assert!(filters[25 * 128 + peak] > 0.0, "peak in mel {peak}");
    }

    #[test]
    fn audio_shorter_than_the_reflect_pad_is_an_error() {
        assert_eq!(
            front_end().compute(&[0.1; 200]),
            Err(MelError::TooShort {
                samples: 200,
                min: 200
            })
        );
    }

    #[test]
    fn filterbank_matches_mistral_common_shape() {
        let filters = slaney_mel_filters(201, 128, 16000, F_MAX);
        // mistral-common: band 49 reads bin 30 alone with weight 0.02352005, band 50 bins 30-31.
        let band =
            |m: usize| -> Vec<usize> { (0..201).filter(|&k| filters[k * 128 + m] > 0.0).collect() };
        assert_eq!(band(49), [30]);
        assert_eq!(band(50), [30, 31]);
        assert!((filters[30 * 128 + 49] - 0.023_520_05).abs() < 1e-8);
        assert!((0..128).all(|m| !band(m).is_empty()));
    }
}
