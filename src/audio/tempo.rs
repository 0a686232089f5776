//! Pitch-preserving time stretch for OpenAI's `speed` parameter (WSOLA).
//!
//! Output is built from 40 ms Hann-windowed grains overlap-added at a fixed 20 ms hop.
//! Grain k is read from the input near `k * hop * speed`, shifted by up to ±10 ms to
//! where it best continues the previous grain (normalised cross-correlation), so
//! periodic sounds stay in phase and pitch is unchanged; only the duration scales.

use super::SAMPLE_RATE;

/// Grain length: 40 ms, long enough to hold two periods of a low (50 Hz) voice.
const WIN: usize = (SAMPLE_RATE as usize) / 25;
/// Synthesis hop: 50 % overlap, where periodic Hann windows sum to exactly 1.
const HOP: usize = WIN / 2;
/// Search radius: ±10 ms covers one pitch period down to 100 Hz either way.
const TOL: isize = (SAMPLE_RATE as isize) / 100;
/// Stride of the coarse correlation search; the best coarse offset is then refined at 1.
const COARSE: usize = 4;

pub const MIN_SPEED: f32 = 0.25;
pub const MAX_SPEED: f32 = 4.0;

/// Stretches `pcm` so its duration becomes `len / speed`, keeping pitch.
///
/// `speed` is clamped to [0.25, 4.0] (OpenAI's range); exactly 1.0, or a non-finite
/// value, returns the input unchanged.
pub fn time_stretch(pcm: &[f32], speed: f32) -> Vec<f32> {
    if speed == 1.0 || !speed.is_finite() || pcm.is_empty() {
        return pcm.to_vec();
    }
    let speed = f64::from(speed.clamp(MIN_SPEED, MAX_SPEED));
    let out_len = (pcm.len() as f64 / speed).round() as usize;
    if out_len == 0 {
        return Vec::new();
    }

    let window: Vec<f32> = (0..WIN)
        .map(|n| {
            let phase = 2.0 * std::f64::consts::PI * n as f64 / WIN as f64;
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

    // Output grains start at k*HOP - HOP so that sample 0 is covered at full weight.
    let mut acc = vec![0.0f32; out_len + WIN];
    let mut weight = vec![0.0f32; out_len + WIN];
    let mut target = vec![0.0f32; HOP];
    let mut prev_start: isize = -(HOP as isize);
    let mut k = 0usize;
    loop {
        let out_start = k as isize * HOP as isize - HOP as isize;
        if out_start >= out_len as isize {
            break;
        }
        let start = if k == 0 {
            prev_start
        } else {
            // What would naturally follow the previous grain in the input.
            let natural = prev_start + HOP as isize;
            for (n, t) in target.iter_mut().enumerate() {
                *t = at(natural + n as isize);
            }
            let nominal = (out_start as f64 * speed).round() as isize;
            best_offset(&at, &target, nominal)
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

/// Start within `nominal ± TOL` whose first HOP samples best match `target`.
fn best_offset(at: &impl Fn(isize) -> f32, target: &[f32], nominal: isize) -> isize {
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
    let coarse = argmax(&mut (nominal - TOL..=nominal + TOL).step_by(COARSE)).unwrap_or(nominal);
    let lo = (coarse - COARSE as isize).max(nominal - TOL);
    let hi = (coarse + COARSE as isize).min(nominal + TOL);
    argmax(&mut (lo..=hi)).unwrap_or(nominal)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identity_and_degenerate_inputs() {
        let x = vec![0.1f32, -0.2, 0.3];
        assert_eq!(time_stretch(&x, 1.0), x);
        assert_eq!(time_stretch(&x, f32::NAN), x);
        assert!(time_stretch(&[], 2.0).is_empty());
        assert_eq!(time_stretch(&x, 2.0).len(), 2);
        assert_eq!(time_stretch(&x, 100.0).len(), 1); // clamped to 4.0: round(3/4) = 1
        assert_eq!(time_stretch(&x, 0.0).len(), 12); // clamped to 0.25
    }
}
