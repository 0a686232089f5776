//! Sample-rate conversion with rubato's synchronous FFT resampler (band-limited, the quality of
//! its best sinc resampler, and fast for a whole clip in memory).

use rubato::audioadapter_buffers::direct::InterleavedSlice;
use rubato::{Fft, FixedSync, Indexing, Resampler};

use super::{check_rate, AudioInputError};

/// Frames per resampler chunk, roughly: see [`chunk_size`].
const CHUNK: usize = 1024;

/// rubato's `Fft` (with `FixedSync::Both`) uses FFTs of `k * from / gcd` input frames, `k`
/// the smallest with `k * from / gcd >= chunk`. When that length is odd, its filter's centre
/// falls half an input sample from the delay rubato trims (44.1 -> 16 kHz: 11 µs late).
/// Asking for an even `k` keeps both FFT lengths even and the output aligned.
fn chunk_size(from_rate: u32, to_rate: u32) -> usize {
    let (mut a, mut b) = (from_rate as usize, to_rate as usize);
    while b != 0 {
        (a, b) = (b, a % b);
    }
    let min_in = from_rate as usize / a;
    let k = CHUNK.div_ceil(min_in).next_multiple_of(2);
    k * min_in
}

/// Resamples mono `samples` from `from_rate` to `to_rate` Hz.
///
/// Equal rates return the samples unchanged (an exact copy). Otherwise the output has
/// `ceil(len * to_rate / from_rate)` samples, aligned with the input (rubato's delay is
/// trimmed; a test checks the phase to 1 % of a sample). Both rates must lie in [`super::MIN_SAMPLE_RATE`]`..=`[`super::MAX_SAMPLE_RATE`].
pub fn resample(
    samples: &[f32],
    from_rate: u32,
    to_rate: u32,
) -> Result<Vec<f32>, AudioInputError> {
    check_rate(from_rate)?;
    check_rate(to_rate)?;
    if from_rate == to_rate || samples.is_empty() {
        return Ok(samples.to_vec());
    }
    let internal = |e: &dyn std::fmt::Display| AudioInputError::Internal(format!("resampler: {e}"));
    let mut resampler = Fft::<f32>::new(
        from_rate as usize,
        to_rate as usize,
        chunk_size(from_rate, to_rate),
        1,
        FixedSync::Both,
    )
    .map_err(|e| internal(&e))?;
    let input = InterleavedSlice::new(samples, 1, samples.len()).map_err(|e| internal(&e))?;
    let output = resampler
        .process_all(&input, samples.len(), None)
        .map_err(|e| internal(&e))?;
    Ok(output.take_data())
}

/// Streaming form of [`resample`], for encoders that take PCM chunk by chunk: the samples
/// go through the resampler in fixed chunks whatever the push sizes, so the concatenated
/// output depends only on the concatenated input (a stream and a one-shot file get the same
/// samples), and it is that of [`resample`]: aligned, `ceil(len * to_rate / from_rate)` long.
/// Each push returns what is final so far; [`finish`](Self::finish) the rest.
///
/// Latency: nothing comes out until a whole chunk is in, `chunk_size(from, to)` input frames
/// (1176 from 44.1 or 22.05 kHz to 48 kHz: 27 or 53 ms), plus the filter's delay. Rates with
/// no common factor make that chunk a second or two long (44 101 Hz: two seconds), which a
/// stream then waits for; the rates models use are all far from that.
pub(crate) struct StreamResampler {
    fft: Fft<f32>,
    from_rate: u32,
    to_rate: u32,
    /// Input not yet processed (less than one chunk between calls).
    pending: Vec<f32>,
    /// One chunk of output.
    scratch: Vec<f32>,
    /// Startup delay still to drop from the output.
    to_trim: usize,
    samples_in: u64,
    samples_out: u64,
}

impl StreamResampler {
    pub(crate) fn new(from_rate: u32, to_rate: u32) -> Result<Self, AudioInputError> {
        check_rate(from_rate)?;
        check_rate(to_rate)?;
        let fft = Fft::<f32>::new(
            from_rate as usize,
            to_rate as usize,
            chunk_size(from_rate, to_rate),
            1,
            FixedSync::Both,
        )
        .map_err(|e| AudioInputError::Internal(format!("resampler: {e}")))?;
        Ok(Self {
            to_trim: fft.output_delay(),
            scratch: vec![0.0; fft.output_frames_max()],
            pending: Vec::with_capacity(fft.input_frames_max()),
            fft,
            from_rate,
            to_rate,
            samples_in: 0,
            samples_out: 0,
        })
    }

    /// Takes more input; returns the output that is final so far.
    pub(crate) fn push(&mut self, samples: &[f32]) -> Result<Vec<f32>, AudioInputError> {
        self.samples_in += samples.len() as u64;
        self.pending.extend_from_slice(samples);
        let chunk = self.fft.input_frames_next();
        let mut out = Vec::new();
        let mut used = 0;
        while self.pending.len() - used >= chunk {
            self.process(used, None, &mut out)?;
            used += chunk;
        }
        self.pending.drain(..used);
        Ok(out)
    }

    /// Flushes the input still held; returns the rest of the output.
    pub(crate) fn finish(mut self) -> Result<Vec<f32>, AudioInputError> {
        let expected =
            (self.samples_in * u64::from(self.to_rate)).div_ceil(u64::from(self.from_rate));
        let mut out = Vec::new();
        if !self.pending.is_empty() {
            self.process(0, Some(self.pending.len()), &mut out)?;
            self.pending.clear();
        }
        // Zeros through the filter until the delayed end of the input has come out.
        while self.samples_out < expected {
            self.process(0, Some(0), &mut out)?;
        }
        let extra = (self.samples_out - expected) as usize;
        out.truncate(out.len().saturating_sub(extra));
        Ok(out)
    }

    /// Runs one chunk of `pending` from `offset` (`partial`: fewer frames, zero-padded).
    fn process(
        &mut self,
        offset: usize,
        partial: Option<usize>,
        out: &mut Vec<f32>,
    ) -> Result<(), AudioInputError> {
        let internal =
            |e: &dyn std::fmt::Display| AudioInputError::Internal(format!("resampler: {e}"));
        let input = InterleavedSlice::new(&self.pending[..], 1, self.pending.len())
            .map_err(|e| internal(&e))?;
        let frames_out = self.scratch.len();
        let mut output = InterleavedSlice::new_mut(&mut self.scratch[..], 1, frames_out)
            .map_err(|e| internal(&e))?;
        let indexing = Indexing {
            input_offset: offset,
            output_offset: 0,
            partial_len: partial,
            active_channels_mask: None,
        };
        let (_, n) = self
            .fft
            .process_into_buffer(&input, &mut output, Some(&indexing))
            .map_err(|e| internal(&e))?;
        let skip = self.to_trim.min(n);
        self.to_trim -= skip;
        out.extend_from_slice(&self.scratch[skip..n]);
        self.samples_out += (n - skip) as u64;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sine(freq: f32, rate: u32, secs: f32) -> Vec<f32> {
        let n = (rate as f32 * secs) as usize;
        (0..n)
            .map(|i| (2.0 * std::f32::consts::PI * freq * i as f32 / rate as f32).sin() * 0.5)
            .collect()
    }

    #[test]
    fn equal_rates_pass_through_exactly() {
        let x = sine(440.0, 16_000, 0.1);
        assert_eq!(resample(&x, 16_000, 16_000).unwrap(), x);
        assert!(resample(&[], 44_100, 16_000).unwrap().is_empty());
    }

    #[test]
    fn length_and_content() {
        for (from, to) in [
            (44_100, 16_000),
            (48_000, 24_000),
            (16_000, 24_000),
            (22_050, 44_100),
            (44_100, 24_000),
            (8_000, 24_000),
            (11_025, 16_000),
        ] {
            let x = sine(440.0, from, 0.5);
            let y = resample(&x, from, to).unwrap();
            let want = (x.len() as u64 * u64::from(to)).div_ceil(u64::from(from)) as usize;
            assert!(
                y.len().abs_diff(want) <= 1,
                "{from}->{to}: {} vs {want}",
                y.len()
            );
            // Away from the edges, the output is the same sine sampled at the new rate.
            let reference = sine(440.0, to, 0.5);
            let (a, b) = (y.len() / 10, y.len() * 9 / 10);
            let err = (a..b)
                .map(|i| (y[i] - reference[i]).abs())
                .fold(0.0f32, f32::max);
            // Phase of the output's 440 Hz component against the reference (a lag, if any).
            let w = 2.0 * std::f64::consts::PI * 440.0 / f64::from(to);
            let (mut c, mut s) = (0.0f64, 0.0f64);
            for (i, &v) in y.iter().enumerate().take(b).skip(a) {
                c += f64::from(v) * (w * i as f64).cos();
                s += f64::from(v) * (w * i as f64).sin();
            }
            let lag = c.atan2(s) / w;
            assert!(err < 1e-3, "{from}->{to}: max error {err}");
            assert!(lag.abs() < 1e-2, "{from}->{to}: {lag} samples late");
        }
    }

    #[test]
    fn odd_ratio_is_quick() {
        // 44101 and 16000 share no factor: rubato's FFT sizes are the rates themselves.
        let x = sine(440.0, 44_101, 2.0);
        let t = std::time::Instant::now();
        let y = resample(&x, 44_101, 16_000).unwrap();
        assert!(y.len().abs_diff(32_000) <= 2, "{}", y.len());
        assert!(t.elapsed().as_secs_f32() < 2.0, "{:?}", t.elapsed());
    }

    #[test]
    fn streaming_equals_one_shot() {
        for (from, to) in [
            (44_100, 48_000),
            (22_050, 48_000),
            (16_000, 22_050),
            (48_000, 44_100),
        ] {
            let x = &sine(440.0, from, 0.7)[..];
            let want = resample(x, from, to).unwrap();
            for chunks in [&[usize::MAX][..], &[1, 999, 3000, 7], &[4096, 4096, 1]] {
                let mut r = StreamResampler::new(from, to).unwrap();
                let mut got = Vec::new();
                let mut rest = x;
                for &c in chunks.iter().cycle().take(64) {
                    let (head, tail) = rest.split_at(c.min(rest.len()));
                    got.extend(r.push(head).unwrap());
                    rest = tail;
                }
                got.extend(r.push(rest).unwrap());
                got.extend(r.finish().unwrap());
                let n = want.len().min(got.len());
                assert!(
                    got.len().abs_diff(want.len()) <= 1,
                    "{from}->{to}: {} vs {}",
                    got.len(),
                    want.len()
                );
                assert_eq!(got[..n], want[..n], "{from}->{to}, chunks {chunks:?}");
            }
        }
        let r = StreamResampler::new(44_100, 48_000).unwrap();
        assert!(r.finish().unwrap().is_empty());
        assert!(StreamResampler::new(0, 48_000).is_err());
    }

    #[test]
    fn rates_out_of_range_are_refused() {
        assert!(matches!(
            resample(&[0.0; 10], 0, 16_000),
            Err(AudioInputError::SampleRate { rate: 0, .. })
        ));
        assert!(resample(&[0.0; 10], 16_000, 10_000_000).is_err());
    }
}
