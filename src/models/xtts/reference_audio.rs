//! A reference clip as coqui-tts prepares it for cloning (`load_audio`,
//! `get_conditioning_latents`; docs/xtts-v2-spec.md §3.1-3.2): channels averaged to mono,
//! resampled to 22.05 kHz with torchaudio's `resample` (windowed sinc, Hann window, 6 zero
//! crossings, roll-off 0.99), clipped to [-1, 1], cut to `max_ref_len` seconds and, with
//! `sound_norm_refs`, scaled to a peak of 0.75.

use super::cloning_mel::SAMPLE_RATE;

/// Hann-windowed sinc low-pass: zero crossings each side, and the cut-off as a fraction of the
/// lower Nyquist frequency (torchaudio's defaults).
const ZERO_CROSSINGS: usize = 6;
const ROLLOFF: f64 = 0.99;

/// `channels` interleaved samples at `rate` -> the 22.05 kHz mono clip `load_audio` returns.
pub fn load_audio(interleaved: &[f32], channels: usize, rate: u32) -> Vec<f32> {
    let mono: Vec<f32> = if channels <= 1 {
        interleaved.to_vec()
    } else {
        interleaved
            .chunks_exact(channels)
            .map(|frame| frame.iter().sum::<f32>() / channels as f32)
            .collect()
    };
    let mut audio = sinc_resample(&mono, rate, SAMPLE_RATE);
    for x in &mut audio {
        *x = x.clamp(-1.0, 1.0);
    }
    audio
}

/// The first `max_ref_len` seconds of a loaded clip, peak-normalised to 0.75 when
/// `sound_norm_refs` (as `get_conditioning_latents` prepares each file).
pub fn prepare_reference(audio: &[f32], max_ref_len: usize, sound_norm_refs: bool) -> Vec<f32> {
    let mut audio = audio[..audio.len().min(SAMPLE_RATE as usize * max_ref_len)].to_vec();
    if sound_norm_refs {
        let peak = audio.iter().fold(0f32, |m, x| m.max(x.abs()));
        if peak > 0.0 {
            for x in &mut audio {
                *x = *x / peak * 0.75;
            }
        }
    }
    audio
}

fn gcd(mut a: u32, mut b: u32) -> u32 {
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// `torchaudio.functional.resample(x, from, to)`: the rates reduced by their gcd to
/// `orig`/`new`, output sample `n·new + p` is the dot product of the kernel of phase `p` with
/// the input zero-padded by `width` (and `width + orig` at the end) from sample `n·orig`;
/// `ceil(len·new/orig)` samples. The kernel is formed in f32 as torchaudio forms it for an f32
/// waveform; the dot products run in f64 and are rounded once.
pub fn sinc_resample(x: &[f32], from: u32, to: u32) -> Vec<f32> {
    if from == to || x.is_empty() {
        return x.to_vec();
    }
    let g = gcd(from, to);
    let (orig, new) = ((from / g) as usize, (to / g) as usize);
    let (kernels, width) = sinc_kernels(orig, new);
    let taps = 2 * width + orig;
    let mut padded = vec![0f32; width];
    padded.extend_from_slice(x);
    padded.resize(padded.len() + width + orig, 0.0);
    let blocks = (padded.len() - taps) / orig + 1;
    let target = (new as u64 * x.len() as u64).div_ceil(orig as u64) as usize;
    let mut out = Vec::with_capacity(target);
    'blocks: for b in 0..blocks {
        let window = &padded[b * orig..b * orig + taps];
        for kernel in kernels.chunks_exact(taps) {
            if out.len() == target {
                break 'blocks;
            }
            let sum: f64 = window
                .iter()
                .zip(kernel)
                .map(|(&s, &k)| f64::from(s) * f64::from(k))
                .sum();
            out.push(sum as f32);
        }
    }
    out
}

/// `_get_sinc_resample_kernel` for an f32 waveform: `[new][2·width + orig]` and `width`.
fn sinc_kernels(orig: usize, new: usize) -> (Vec<f32>, usize) {
    let base = orig.min(new) as f64 * ROLLOFF;
    let width = (ZERO_CROSSINGS as f64 * orig as f64 / base).ceil() as usize;
    let lowpass = ZERO_CROSSINGS as f32;
    let base32 = base as f32;
    let scale = (base / orig as f64) as f32;
    let pi = std::f64::consts::PI as f32;
    let mut kernels = Vec::with_capacity(new * (2 * width + orig));
    for phase in 0..new {
        let shift = -(phase as f32) / new as f32;
        for i in 0..2 * width + orig {
            let idx = (i as f32 - width as f32) / orig as f32;
            let t = ((shift + idx) * base32).clamp(-lowpass, lowpass);
            let window = (t * pi / lowpass / 2.0).cos().powi(2);
            let t = t * pi;
            let sinc = if t == 0.0 { 1.0 } else { t.sin() / t };
            kernels.push(sinc * (window * scale));
        }
    }
    (kernels, width)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lengths_follow_torchaudio() {
        assert_eq!(sinc_resample(&[0.0; 1000], 24_000, 22_050).len(), 919);
        assert_eq!(sinc_resample(&[0.0; 1001], 16_000, 22_050).len(), 1380);
        assert_eq!(sinc_resample(&[0.5; 10], 22_050, 22_050), vec![0.5; 10]);
    }

    #[test]
    fn a_low_tone_passes_through() {
        let tone = |rate: f64, n: usize| -> Vec<f32> {
            (0..n)
                .map(|i| (2.0 * std::f64::consts::PI * 440.0 * i as f64 / rate).sin() as f32)
                .collect()
        };
        let got = sinc_resample(&tone(24_000.0, 24_000), 24_000, 22_050);
        let want = tone(22_050.0, 22_050);
        // Away from the zero-padded edges the tone is kept to within 1e-3.
        for i in 200..22_000 {
            assert!(
                (got[i] - want[i]).abs() < 1e-3,
                "{i}: {} vs {}",
                got[i],
                want[i]
            );
        }
    }

    #[test]
    fn stereo_is_averaged_and_clipped() {
        let audio = load_audio(&[0.5, 1.0, 2.0, 2.0], 2, 22_050);
        assert_eq!(audio, [0.75, 1.0]);
        let cut = prepare_reference(&[0.5, -0.25, 0.1], 30, true);
        assert_eq!(cut, [0.75, -0.375, 0.1 / 0.5 * 0.75]);
    }
}
