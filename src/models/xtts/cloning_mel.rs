//! The conditioning encoder's log-mel (`wav_to_mel_cloning` in coqui-tts, as
//! `get_gpt_cond_latents` calls it; docs/xtts-v2-spec.md §3.4): torchaudio's
//! `MelSpectrogram` at 22.05 kHz with `n_fft` 2048, a 1024-sample periodic Hann window
//! (zero-padded to 2048 at both ends, as `torch.stft` pads it), hop 256, centred with reflect
//! padding, power 2, 80 HTK-scale bands over 0–8 kHz with Slaney area normalisation; then
//! `log(clamp(mel, 1e-5))` divided band by band by the checkpoint's `mel_stats`.

use crate::audio::mel::{periodic_hann, reflect_pad, slaney_filterbank, MelBank};

pub const SAMPLE_RATE: u32 = 22_050;
pub const MELS: usize = 80;
const N_FFT: usize = 2048;
const WINDOW: usize = 1024;
const HOP: usize = 256;
const F_MAX: f64 = 8000.0;

pub struct CloningMel {
    bank: MelBank,
    /// `mel_stats`, one divisor per band.
    stats: Vec<f32>,
}

impl CloningMel {
    /// `stats`: the checkpoint's `mel_stats` (80 values).
    pub fn new(stats: Vec<f32>) -> Self {
        assert_eq!(stats.len(), MELS, "one mel_stats value per band");
        let pad = (N_FFT - WINDOW) / 2;
        let mut window = vec![0f32; N_FFT];
        window[pad..pad + WINDOW].copy_from_slice(&periodic_hann(WINDOW));
        CloningMel {
            bank: MelBank::with_window(N_FFT, HOP, MELS, window, slaney_htk_filters()),
            stats,
        }
    }

    /// Frames `1 + len / 256` (centred STFT).
    pub fn frames(samples: usize) -> usize {
        1 + samples / HOP
    }

    /// The normalised log-mel of `audio` (22.05 kHz), frame-major `[frame][band]`. `audio`
    /// must be longer than 1024 samples (the reflect padding); the caller skips shorter
    /// chunks, as the reference does below 0.33 s.
    pub fn compute(&self, audio: &[f32]) -> Vec<f32> {
        assert!(audio.len() > N_FFT / 2, "a chunk longer than the padding");
        let padded = reflect_pad(audio, N_FFT / 2);
        let frames = Self::frames(audio.len());
        let mut mel = self
            .bank
            .frames(&padded, frames, |power| power as f32, |m| m.max(1e-5).ln());
        for frame in mel.chunks_exact_mut(MELS) {
            for (value, stat) in frame.iter_mut().zip(&self.stats) {
                *value /= stat;
            }
        }
        mel
    }
}

fn hz_to_mel_htk(hz: f64) -> f64 {
    2595.0 * (1.0 + hz / 700.0).log10()
}

fn mel_to_hz_htk(mel: f64) -> f64 {
    700.0 * (10f64.powf(mel / 2595.0) - 1.0)
}

/// torchaudio's `melscale_fbanks(1025, 0, 8000, 80, 22050, norm="slaney", mel_scale="htk")`
/// as `[bin][band]`: the Slaney-normalised triangles between HTK-spaced edges.
fn slaney_htk_filters() -> Vec<f32> {
    let top = hz_to_mel_htk(F_MAX);
    let edges: Vec<f64> = (0..MELS + 2)
        .map(|i| mel_to_hz_htk(top * i as f64 / (MELS + 1) as f64))
        .collect();
    slaney_filterbank(N_FFT / 2 + 1, SAMPLE_RATE, &edges)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filters_are_slaney_normalised_triangles_up_to_8_khz() {
        let filters = slaney_htk_filters();
        let bins = N_FFT / 2 + 1;
        let bin_hz = 11025.0 / 1024.0;
        // Bins above 8 kHz (bin 743 is 7999.6 Hz) belong to no band.
        let above = (8000.0 / bin_hz) as usize + 1;
        assert!(filters[above * MELS..].iter().all(|&f| f == 0.0));
        // Slaney normalisation gives every triangle unit area in Hz; bands many bins wide
        // show it to within the sampling of the triangle by the bins.
        for band in [40, 60, 79] {
            let area: f64 = (0..bins)
                .map(|b| f64::from(filters[b * MELS + band]) * bin_hz)
                .sum();
            assert!((area - 1.0).abs() < 0.02, "band {band}: area {area}");
        }
    }

    #[test]
    fn silence_gives_the_clamped_log_over_the_stats() {
        let mel = CloningMel::new(vec![2.0; MELS]);
        let out = mel.compute(&vec![0.0; 4000]);
        assert_eq!(out.len(), CloningMel::frames(4000) * MELS);
        let want = (1e-5f32).ln() / 2.0;
        assert!(out.iter().all(|&v| v == want), "{}", out[0]);
    }
}
