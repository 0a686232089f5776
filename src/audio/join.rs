//! Joining separately synthesized segments with a short crossfade, so the seam has no
//! click.
//!
//! The last `f` samples of what came before overlap the first `f` samples of the next
//! segment, mixed with a **linear** crossfade:
//! `out[i] = a[i] * (1 - w_i) + b[i] * w_i` with `w_i = (i + 1) / (f + 1)`, `i < f`.
//! `f` is `fade_samples`, or less when either side is shorter. Linear rather than
//! equal-power: the gains always sum to 1, so the result never exceeds the larger of the
//! two inputs (no clipping, no bump for correlated material); the slight loudness dip
//! it gives uncorrelated material lasts a few milliseconds, over segment edges that are
//! near silence anyway.
//!
//! Length: `sum(len) - sum(f)`, i.e. `sum(len) - (n - 1) * fade_samples` when no
//! segment is shorter than `fade_samples`. Empty segments are skipped.
//!
//! [`crossfade_join`] is the one-shot form; [`SegmentJoiner`] the streaming form, fed
//! segment by segment (or chunk by chunk), which holds back only the last
//! `fade_samples` samples and produces exactly the same samples.

/// Crossfade length between segments, in seconds (10 ms).
pub const SEGMENT_FADE_SECONDS: f64 = 0.010;

/// Crossfade length in samples at `sample_rate`: [`SEGMENT_FADE_SECONDS`] of it, rounded
/// down (240 at 24 kHz, 220 at 22.05 kHz, 441 at 44.1 kHz).
pub const fn fade_samples(sample_rate: u32) -> usize {
    (sample_rate as f64 * SEGMENT_FADE_SECONDS) as usize
}

/// Mixes `head` (the next segment's first samples) into `tail` (the previous output's
/// last samples), in place. Both have the crossfade's length.
fn mix(tail: &mut [f32], head: &[f32]) {
    let f = tail.len().min(head.len());
    let denom = (f + 1) as f32;
    for (i, (a, b)) in tail.iter_mut().zip(head).enumerate() {
        let w = (i + 1) as f32 / denom;
        *a = *a * (1.0 - w) + *b * w;
    }
}

/// Joins `segments` in order, crossfading each seam over `fade_samples` samples (see the
/// module documentation).
pub fn crossfade_join<S: AsRef<[f32]>>(segments: &[S], fade_samples: usize) -> Vec<f32> {
    let total = segments.iter().map(|s| s.as_ref().len()).sum();
    let mut out: Vec<f32> = Vec::with_capacity(total);
    for seg in segments {
        let seg = seg.as_ref();
        if seg.is_empty() {
            continue;
        }
        let f = fade_samples.min(out.len()).min(seg.len());
        let start = out.len() - f;
        mix(&mut out[start..], &seg[..f]);
        out.extend_from_slice(&seg[f..]);
    }
    out
}

/// Streaming form of [`crossfade_join`]: feed segments (or chunks of them) as they are
/// synthesized and send what comes back; the concatenation of everything returned,
/// [`finish`](Self::finish) included, equals `crossfade_join` of the whole segments.
///
/// Only the last `fade_samples` samples of the output so far are held back (they may
/// still be mixed with the next segment), plus, at the start of a segment, its first
/// samples until the crossfade can be computed.
#[derive(Clone, Debug)]
pub struct SegmentJoiner {
    fade: usize,
    /// The output's last samples, not final yet (at most `fade` after each call).
    tail: Vec<f32>,
    /// The current segment's first samples, not mixed yet (while `in_head`).
    head: Vec<f32>,
    in_head: bool,
}

impl SegmentJoiner {
    pub fn new(fade_samples: usize) -> Self {
        Self {
            fade: fade_samples,
            tail: Vec::new(),
            head: Vec::new(),
            in_head: false,
        }
    }

    /// A whole segment: the samples that are final so far.
    pub fn push(&mut self, segment: &[f32]) -> Vec<f32> {
        self.begin_segment();
        self.extend(segment)
    }

    /// Starts a new segment: the next [`extend`](Self::extend) samples are crossfaded
    /// with what came before.
    pub fn begin_segment(&mut self) {
        self.close_head();
        self.in_head = true;
    }

    /// More samples of the current segment (a first call without
    /// [`begin_segment`](Self::begin_segment) starts one): the samples that are final
    /// so far.
    pub fn extend(&mut self, chunk: &[f32]) -> Vec<f32> {
        if self.in_head {
            self.head.extend_from_slice(chunk);
            if self.head.len() >= self.fade.min(self.tail.len()) {
                self.close_head();
            }
        } else {
            self.tail.extend_from_slice(chunk);
        }
        self.take_final()
    }

    /// Everything still held back; the joiner is done.
    pub fn finish(mut self) -> Vec<f32> {
        self.close_head();
        std::mem::take(&mut self.tail)
    }

    /// Number of samples currently held back.
    pub fn pending(&self) -> usize {
        self.tail.len() + self.head.len()
    }

    /// Mixes the buffered head of the current segment into the tail.
    fn close_head(&mut self) {
        if !self.in_head {
            return;
        }
        self.in_head = false;
        let f = self.fade.min(self.tail.len()).min(self.head.len());
        let start = self.tail.len() - f;
        mix(&mut self.tail[start..], &self.head[..f]);
        self.tail.extend_from_slice(&self.head[f..]);
        self.head.clear();
    }

    /// Returns all but the last `fade` samples of the tail.
    fn take_final(&mut self) -> Vec<f32> {
        if self.in_head || self.tail.len() <= self.fade {
            return Vec::new();
        }
        let keep = self.tail.split_off(self.tail.len() - self.fade);
        std::mem::replace(&mut self.tail, keep)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sine(freq: f32, phase: f32, amp: f32, n: usize) -> Vec<f32> {
        let sr = 24_000.0;
        (0..n)
            .map(|i| amp * (std::f32::consts::TAU * freq * i as f32 / sr + phase).sin())
            .collect()
    }

    fn max_jump(x: &[f32]) -> f32 {
        x.windows(2)
            .map(|w| (w[1] - w[0]).abs())
            .fold(0.0, f32::max)
    }

    /// Deterministic xorshift generator for the randomized tests.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }
        fn sample(&mut self) -> f32 {
            (self.next() % 20001) as f32 / 10000.0 - 1.0
        }
    }

    #[test]
    fn fade_is_10_ms() {
        for (rate, want) in [
            (8_000, 80),
            (16_000, 160),
            (22_050, 220),
            (24_000, 240),
            (44_100, 441),
            (48_000, 480),
        ] {
            assert_eq!(fade_samples(rate), want, "{rate}");
            // The scheduler's own formula gives the same.
            assert_eq!((f64::from(rate) * SEGMENT_FADE_SECONDS) as usize, want);
        }
        assert_eq!(fade_samples(0), 0);
    }

    #[test]
    fn seam_between_two_sines_has_no_click() {
        let fade = fade_samples(24_000);
        // A ends near +1, B starts at -0.8: a plain concatenation jumps by ~1.8.
        let n = 24_000;
        let a = sine(220.0, 0.0, 1.0, n);
        let mut a = a;
        let offset = a.iter().rposition(|v| *v > 0.99).unwrap_or(n - 1);
        a.truncate(offset + 1);
        let b = sine(330.0, -std::f32::consts::FRAC_PI_2, 0.8, n);
        let plain: Vec<f32> = a.iter().chain(&b).copied().collect();
        assert!(
            max_jump(&plain) > 1.5,
            "test signal must click without a crossfade"
        );

        let joined = crossfade_join(&[a.clone(), b.clone()], fade);
        // The steepest slope of either sine alone: 2*pi*f/sr*amp.
        let natural = max_jump(&a).max(max_jump(&b));
        let seam = a.len() - fade;
        let around = &joined[seam.saturating_sub(10)..seam + fade + 10];
        let jump = max_jump(around);
        // Plus at most (|a| + |b|) / (fade + 1) per sample from the fade itself.
        assert!(
            jump <= natural + 1.8 / (fade + 1) as f32 + 1e-4,
            "jump {jump}, natural {natural}"
        );
        assert!(max_jump(&joined) < 0.1);
    }

    #[test]
    fn length_is_sum_minus_overlaps() {
        let fade = 240;
        let segs: Vec<Vec<f32>> = [1000, 240, 5000, 777]
            .iter()
            .map(|n| vec![0.5; *n])
            .collect();
        let out = crossfade_join(&segs, fade);
        assert_eq!(out.len(), 1000 + 240 + 5000 + 777 - 3 * fade);
        // Short segments overlap by their own length.
        let segs = vec![vec![1.0; 1000], vec![1.0; 100], vec![1.0; 1000]];
        assert_eq!(
            crossfade_join(&segs, 240).len(),
            1000 + 100 + 1000 - 100 - 240
        );
        // Empty segments are skipped.
        let segs = vec![vec![], vec![1.0; 500], vec![], vec![1.0; 500], vec![]];
        assert_eq!(crossfade_join(&segs, 240).len(), 1000 - 240);
        assert!(crossfade_join::<Vec<f32>>(&[], 240).is_empty());
    }

    #[test]
    fn constant_signal_stays_constant() {
        let segs = vec![vec![0.25; 1000], vec![0.25; 1000], vec![0.25; 1000]];
        for v in crossfade_join(&segs, 240) {
            assert!((v - 0.25).abs() < 1e-6);
        }
    }

    #[test]
    fn fade_zero_is_concatenation_and_single_segment_is_unchanged() {
        let a = vec![1.0, 2.0, 3.0];
        let b = vec![4.0, 5.0];
        assert_eq!(
            crossfade_join(&[a.clone(), b.clone()], 0),
            vec![1.0, 2.0, 3.0, 4.0, 5.0]
        );
        assert_eq!(crossfade_join(std::slice::from_ref(&a), 240), a);
    }

    #[test]
    fn output_never_exceeds_inputs() {
        let mut rng = Rng(7);
        let segs: Vec<Vec<f32>> = (0..6)
            .map(|_| (0..(rng.below(900) + 1)).map(|_| rng.sample()).collect())
            .collect();
        let peak = segs.iter().flatten().fold(0.0f32, |m, v| m.max(v.abs()));
        for v in crossfade_join(&segs, 240) {
            assert!(v.abs() <= peak + 1e-6);
        }
    }

    #[test]
    fn streaming_equals_one_shot() {
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
        for round in 0..300 {
            let fade = [0, 1, 7, 240, 480][round % 5];
            let nseg = rng.below(6);
            let segs: Vec<Vec<f32>> = (0..nseg)
                .map(|_| {
                    let len = match rng.below(4) {
                        0 => 0,
                        1 => rng.below(fade + 2),
                        _ => rng.below(3000),
                    };
                    (0..len).map(|_| rng.sample()).collect()
                })
                .collect();
            let want = crossfade_join(&segs, fade);

            // Whole segments.
            let mut j = SegmentJoiner::new(fade);
            let mut got = Vec::new();
            for s in &segs {
                let part = j.push(s);
                got.extend(part);
                assert!(j.pending() <= 2 * fade);
            }
            got.extend(j.finish());
            assert_eq!(got, want, "push, round {round}");

            // Random chunks.
            let mut j = SegmentJoiner::new(fade);
            let mut got = Vec::new();
            for s in &segs {
                j.begin_segment();
                let mut p = 0;
                while p < s.len() {
                    let q = (p + 1 + rng.below(600)).min(s.len());
                    got.extend(j.extend(&s[p..q]));
                    p = q;
                }
            }
            got.extend(j.finish());
            assert_eq!(got, want, "chunks, round {round}");
        }
    }

    #[test]
    fn streaming_holds_back_only_the_fade() {
        let mut j = SegmentJoiner::new(240);
        assert_eq!(j.push(&vec![0.1; 24_000]).len(), 24_000 - 240);
        assert_eq!(j.pending(), 240);
        // The next segment's first 240 samples are mixed into the held tail.
        assert_eq!(j.push(&vec![0.2; 24_000]).len(), 24_000 - 240);
        assert_eq!(j.finish().len(), 240);
    }
}
