//! Pitch-preserving time stretch for OpenAI's `speed` parameter (WSOLA).
//!
//! Output is built from 40 ms Hann-windowed grains overlap-added at a fixed 20 ms hop.
//! Grain k is read from the input near `k * hop * speed`, shifted by up to ±10 ms to
//! where it best continues the previous grain (normalised cross-correlation), so
//! periodic sounds stay in phase and pitch is unchanged; only the duration scales.
//! Grain, hop and search radius are those durations at the PCM's sample rate.

use super::{MAX_SAMPLE_RATE, MIN_SAMPLE_RATE};

/// Stride of the coarse correlation search; the best coarse offset is then refined at 1.
const COARSE: usize = 4;

/// Grain length, synthesis hop and search radius, in samples at one rate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Grains {
    /// Grain length: 40 ms, long enough to hold two periods of a low (50 Hz) voice. Even,
    /// so that the hop is exactly half of it.
    win: usize,
    /// Synthesis hop: 50 % overlap, where periodic Hann windows sum to exactly 1.
    hop: usize,
    /// Search radius: ±10 ms covers one pitch period down to 100 Hz either way.
    tol: isize,
}

impl Grains {
    /// The sizes at `sample_rate`, clamped to [`MIN_SAMPLE_RATE`]..=[`MAX_SAMPLE_RATE`]
    /// (this function has no error to return: an absurd rate gets the nearest sane sizes).
    fn at(sample_rate: u32) -> Self {
        let rate = sample_rate.clamp(MIN_SAMPLE_RATE, MAX_SAMPLE_RATE) as usize;
        let win = (rate / 25) & !1;
        Self {
            win,
            hop: win / 2,
            tol: (rate / 100) as isize,
        }
    }
}

pub const MIN_SPEED: f32 = 0.25;
pub const MAX_SPEED: f32 = 4.0;

/// Stretches `pcm` (mono at `sample_rate` Hz) so its duration becomes `len / speed`,
/// keeping pitch.
///
/// `speed` is clamped to [0.25, 4.0] (OpenAI's range); exactly 1.0, or a non-finite
/// value, returns the input unchanged. `sample_rate` sets the grain sizes (40 ms grains,
/// ±10 ms search); outside [`MIN_SAMPLE_RATE`]..=[`MAX_SAMPLE_RATE`] it is taken as the
/// nearest bound.
pub fn time_stretch(pcm: &[f32], speed: f32, sample_rate: u32) -> Vec<f32> {
    if speed == 1.0 || !speed.is_finite() || pcm.is_empty() {
        return pcm.to_vec();
    }
    let speed = f64::from(speed.clamp(MIN_SPEED, MAX_SPEED));
    let out_len = (pcm.len() as f64 / speed).round() as usize;
    if out_len == 0 {
        return Vec::new();
    }

    let Grains { win, hop, tol } = Grains::at(sample_rate);
    let window: Vec<f32> = (0..win)
        .map(|n| {
            let phase = 2.0 * std::f64::consts::PI * n as f64 / win as f64;
            (0.5 - 0.5 * phase.cos()) as f32
        })
        .collect();
    // Samples outside the input read as silence, so grains may hang over either end;
    // non-finite samples too, so one bad value cannot turn every correlation into NaN.
    let at = |i: isize| -> f32 {
        usize::try_from(i)
            .ok()
            .and_then(|i| pcm.get(i))
            .copied()
            .filter(|v| v.is_finite())
            .unwrap_or(0.0)
    };

    // Output grains start at k*hop - hop so that sample 0 is covered at full weight.
    let mut acc = vec![0.0f32; out_len + win];
    let mut weight = vec![0.0f32; out_len + win];
    let mut target = vec![0.0f32; hop];
    let mut prev_start: isize = -(hop as isize);
    let mut k = 0usize;
    loop {
        let out_start = k as isize * hop as isize - hop as isize;
        if out_start >= out_len as isize {
            break;
        }
        let start = if k == 0 {
            prev_start
        } else {
            // What would naturally follow the previous grain in the input.
            let natural = prev_start + hop as isize;
            for (n, t) in target.iter_mut().enumerate() {
                *t = at(natural + n as isize);
            }
            let nominal = (out_start as f64 * speed).round() as isize;
            best_offset(&at, &target, nominal, tol)
        };
        for (n, &w) in window.iter().enumerate() {
            let o = out_start + n as isize;
            if let Ok(o) = usize::try_from(o) {
                if o < acc.len() {
                    acc[o] += at(start + n as isize) * w;
                    weight[o] += w;
                }
            }
        }
        prev_start = start;
        k += 1;
    }

    acc.truncate(out_len);
    for (a, &w) in acc.iter_mut().zip(&weight) {
        // Weight is 1 in the interior; only the last partial grain can leave it below.
        *a = if w > 1e-3 { *a / w } else { 0.0 };
    }
    acc
}

/// Start within `nominal ± tol` whose first `target.len()` samples best match `target`.
fn best_offset(at: &impl Fn(isize) -> f32, target: &[f32], nominal: isize, tol: isize) -> isize {
    let target_energy: f32 = target.iter().map(|t| t * t).sum();
    if target_energy < 1e-9 {
        // Continuing silence: any alignment is as good, stay on schedule.
        return nominal;
    }
    let score = |c: isize| -> f32 {
        let mut dot = 0.0f32;
        let mut energy = 0.0f32;
        for (n, &t) in target.iter().enumerate() {
            let x = at(c + n as isize);
            dot += x * t;
            energy += x * x;
        }
        if energy < 1e-9 {
            f32::NEG_INFINITY
        } else {
            dot / energy.sqrt()
        }
    };
    let argmax = |range: &mut dyn Iterator<Item = isize>| -> Option<isize> {
        let mut best: Option<(isize, f32)> = None;
        for c in range {
            let s = score(c);
            if best.is_none_or(|(_, b)| s > b) {
                best = Some((c, s));
            }
        }
        best.map(|(c, _)| c)
    };
    let coarse = argmax(&mut (nominal - tol..=nominal + tol).step_by(COARSE)).unwrap_or(nominal);
    let lo = (coarse - COARSE as isize).max(nominal - tol);
    let hi = (coarse + COARSE as isize).min(nominal + tol);
    argmax(&mut (lo..=hi)).unwrap_or(nominal)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identity_and_degenerate_inputs() {
        let x = vec![0.1f32, -0.2, 0.3];
        assert_eq!(time_stretch(&x, 1.0, 24_000), x);
        assert_eq!(time_stretch(&x, f32::NAN, 24_000), x);
        assert!(time_stretch(&[], 2.0, 24_000).is_empty());
        assert_eq!(time_stretch(&x, 2.0, 24_000).len(), 2);
        assert_eq!(time_stretch(&x, 100.0, 24_000).len(), 1); // clamped to 4.0: round(3/4) = 1
        assert_eq!(time_stretch(&x, 0.0, 24_000).len(), 12); // clamped to 0.25
                                                             // Absurd rates do not panic (nor allocate absurd grains).
        for rate in [0, 1, u32::MAX] {
            assert_eq!(time_stretch(&x, 0.5, rate).len(), 6);
        }
    }

    #[test]
    fn grain_sizes_follow_the_rate() {
        let g = |win, tol| Grains {
            win,
            hop: win / 2,
            tol,
        };
        assert_eq!(Grains::at(24_000), g(960, 240));
        assert_eq!(Grains::at(16_000), g(640, 160));
        assert_eq!(Grains::at(48_000), g(1920, 480));
        // 44.1 kHz: 1764 = 40 ms exactly; 11.025 kHz: 441 rounds down to even 440.
        assert_eq!(Grains::at(44_100), g(1764, 441));
        assert_eq!(Grains::at(11_025), g(440, 110));
        assert_eq!(Grains::at(0), Grains::at(MIN_SAMPLE_RATE));
    }

    #[test]
    fn keeps_pitch_at_other_rates() {
        for rate in [16_000u32, 22_050, 48_000] {
            let sr = f64::from(rate);
            let x: Vec<f32> = (0..rate as usize)
                .map(|i| (0.5 * (2.0 * std::f64::consts::PI * 220.0 * i as f64 / sr).sin()) as f32)
                .collect();
            let y = time_stretch(&x, 2.0, rate);
            assert_eq!(y.len(), x.len() / 2);
            // Zero crossings per second in the middle: 2 * 220 when the pitch is kept.
            let mid = &y[y.len() / 4..y.len() * 3 / 4];
            let crossings = mid
                .windows(2)
                .filter(|w| (w[0] < 0.0) != (w[1] < 0.0))
                .count();
            let per_s = crossings as f64 * sr / mid.len() as f64;
            assert!((per_s - 440.0).abs() < 10.0, "{rate}: {per_s} crossings/s");
        }
    }
}
