//! What the models' log-mel front ends share (Voxtral Realtime's, Qwen3-TTS's speaker
//! encoder's and XTTS-v2's conditioning encoder's): the periodic Hann window, reflect padding,
//! the Slaney mel scale, the Slaney-normalised filterbank, and the frame loop through a real FFT
//! and a filterbank. Each front end keeps its band edges and the per-bin and log rules of its
//! reference.

use realfft::{RealFftPlanner, RealToComplex};
use std::sync::Arc;

/// Frames of `n_fft` samples every `hop`, windowed (periodic Hann, f32 as the references
/// form it), through a real FFT and a `[bins][mels]` filterbank. The FFT and the filterbank
/// sums run in f64 and are rounded once, so that this side adds no rounding of its own.
pub struct MelBank {
    n_fft: usize,
    hop: usize,
    mels: usize,
    window: Vec<f32>,
    filters: Vec<f32>,
    fft: Arc<dyn RealToComplex<f64>>,
}

impl MelBank {
    /// `filters`: `[n_fft / 2 + 1][mels]`.
    pub fn new(n_fft: usize, hop: usize, mels: usize, filters: Vec<f32>) -> Self {
        assert_eq!(
            filters.len(),
            (n_fft / 2 + 1) * mels,
            "a [bins][mels] filterbank"
        );
        MelBank {
            n_fft,
            hop,
            mels,
            window: periodic_hann(n_fft),
            filters,
            fft: RealFftPlanner::<f64>::new().plan_fft_forward(n_fft),
        }
    }

    /// The same with another analysis window, `n_fft` samples (a shorter one zero-padded
    /// around its centre, as `torch.stft` does).
    pub fn with_window(
        n_fft: usize,
        hop: usize,
        mels: usize,
        window: Vec<f32>,
        filters: Vec<f32>,
    ) -> Self {
        assert_eq!(window.len(), n_fft, "a window of n_fft samples");
        MelBank {
            window,
            ..Self::new(n_fft, hop, mels, filters)
        }
    }

    /// `frames` frames of `padded` (frame `t` from sample `t * hop`), frame-major
    /// `[t][mel]`: each FFT bin's value is `bin(|X|²)`, the bands sum it through the filters,
    /// and each band's sum, rounded to f32, goes through `log`.
    pub fn frames(
        &self,
        padded: &[f32],
        frames: usize,
        bin: impl Fn(f64) -> f32,
        log: impl Fn(f32) -> f32,
    ) -> Vec<f32> {
        let mut input = self.fft.make_input_vec();
        let mut spectrum = self.fft.make_output_vec();
        let mut scratch = self.fft.make_scratch_vec();
        let mut values = vec![0f32; self.n_fft / 2 + 1];
        let mut sums = vec![0f64; self.mels];
        let mut out = Vec::with_capacity(frames * self.mels);
        for t in 0..frames {
            let frame = &padded[t * self.hop..t * self.hop + self.n_fft];
            for ((x, &sample), &w) in input.iter_mut().zip(frame).zip(&self.window) {
                // The windowed frame in f32, as the references form it.
                *x = (sample * w) as f64;
            }
            self.fft
                .process_with_scratch(&mut input, &mut spectrum, &mut scratch)
                .unwrap_or_else(|_| unreachable!("buffers come from the plan"));
            for (v, c) in values.iter_mut().zip(&spectrum) {
                *v = bin(c.norm_sqr());
            }
            sums.fill(0.0);
            for (&v, filters) in values.iter().zip(self.filters.chunks_exact(self.mels)) {
                for (sum, &f) in sums.iter_mut().zip(filters) {
                    *sum += f as f64 * v as f64;
                }
            }
            out.extend(sums.iter().map(|&sum| log(sum as f32)));
        }
        out
    }
}

/// `torch.hann_window(n)` (periodic) as ATen computes it, in f32:
/// `cos(i · f32(2π / n)) · −0.5 + 0.5`.
pub fn periodic_hann(n: usize) -> Vec<f32> {
    let step = (2.0 * std::f64::consts::PI / n as f64) as f32;
    (0..n)
        .map(|i| (i as f32 * step).cos() * -0.5 + 0.5)
        .collect()
}

/// `audio` with `pad` samples mirrored at each end, the edge sample not repeated.
pub fn reflect_pad(audio: &[f32], pad: usize) -> Vec<f32> {
    let n = audio.len();
    let mut out = Vec::with_capacity(n + 2 * pad);
    out.extend((1..=pad).rev().map(|i| audio[i]));
    out.extend_from_slice(audio);
    out.extend((1..=pad).map(|i| audio[n - 1 - i]));
    out
}

/// Slaney mel scale (librosa's, as mistral-common uses it): linear below 1 kHz, logarithmic
/// above.
pub fn hz_to_mel(hz: f64) -> f64 {
    const MIN_LOG_HZ: f64 = 1000.0;
    const MIN_LOG_MEL: f64 = 15.0;
    if hz >= MIN_LOG_HZ {
        MIN_LOG_MEL + (hz / MIN_LOG_HZ).ln() * (27.0 / 6.4f64.ln())
    } else {
        3.0 * hz / 200.0
    }
}

pub fn mel_to_hz(mel: f64) -> f64 {
    const MIN_LOG_HZ: f64 = 1000.0;
    const MIN_LOG_MEL: f64 = 15.0;
    if mel >= MIN_LOG_MEL {
        MIN_LOG_HZ * ((6.4f64.ln() / 27.0) * (mel - MIN_LOG_MEL)).exp()
    } else {
        200.0 * mel / 3.0
    }
}

/// `numpy.linspace(start, stop, n)`: `start + i · step`, the last value `stop` itself.
fn linspace(start: f64, stop: f64, n: usize) -> Vec<f64> {
    let step = (stop - start) / (n - 1) as f64;
    (0..n)
        .map(|i| {
            if i + 1 == n {
                stop
            } else {
                start + i as f64 * step
            }
        })
        .collect()
}

/// Triangular filters between consecutive `edges` (Hz), each scaled to unit area (Slaney
/// normalisation, `2 / (upper edge − lower edge)`), over `bins` FFT bins from 0 Hz to
/// `sample_rate / 2` (`numpy.linspace`, as mistral-common and torchaudio space them; librosa's
/// `rfftfreq` gives the same values at the rates here): `[bins][edges.len() - 2]`, computed in
/// f64 and rounded once.
pub fn slaney_filterbank(bins: usize, sample_rate: u32, edges: &[f64]) -> Vec<f32> {
    let mels = edges.len() - 2;
    let bin_hz = linspace(0.0, (sample_rate / 2) as f64, bins);
    let mut filters = vec![0f32; bins * mels];
    for (k, &f) in bin_hz.iter().enumerate() {
        for (m, edge) in edges.windows(3).enumerate() {
            let (lower, centre, upper) = (edge[0], edge[1], edge[2]);
            let rising = (f - lower) / (centre - lower);
            let falling = (upper - f) / (upper - centre);
            let area = 2.0 / (upper - lower);
            filters[k * mels + m] = (0f64.max(rising.min(falling)) * area) as f32;
        }
    }
    filters
}

/// librosa's `filters.mel(sr, n_fft, n_mels, fmin=0, fmax)` and mistral-common's
/// `mel_filter_bank` (Slaney scale and normalisation): `mels` bands whose edges are equally
/// spaced on the Slaney mel scale from 0 Hz to `f_max`, `[bins][mels]`.
pub fn slaney_mel_filters(bins: usize, mels: usize, sample_rate: u32, f_max: f64) -> Vec<f32> {
    let edges: Vec<f64> = linspace(hz_to_mel(0.0), hz_to_mel(f_max), mels + 2)
        .into_iter()
        .map(mel_to_hz)
        .collect();
    slaney_filterbank(bins, sample_rate, &edges)
}
