//! Sample-rate plumbing shared by the encoders whose codec takes only some rates.

use super::input::StreamResampler;
use super::{AudioError, AudioFormat};

/// The rates MPEG audio (MP3: MPEG-1/2/2.5 Layer III; AAC's common ones) can signal.
pub(crate) const MPEG_RATES: [u32; 9] = [
    8_000, 11_025, 12_000, 16_000, 22_050, 24_000, 32_000, 44_100, 48_000,
];

/// The rate to encode `rate` at: `rate` itself when `supported` has it, else the next
/// supported rate above (no information is lost), else the highest. `supported` is sorted.
pub(crate) fn codec_rate(rate: u32, supported: &[u32]) -> u32 {
    supported
        .iter()
        .copied()
        .find(|&r| r >= rate)
        .or_else(|| supported.last().copied())
        .unwrap_or(rate)
}

/// Brings PCM from the caller's rate to the codec's, streaming-safe: a pass-through when
/// they are equal, else a [`StreamResampler`] (output independent of the push sizes).
pub(crate) struct RateAdapter {
    format: AudioFormat,
    resampler: Option<StreamResampler>,
}

impl RateAdapter {
    pub(crate) fn new(format: AudioFormat, from: u32, to: u32) -> Result<Self, AudioError> {
        let resampler = if from == to {
            None
        } else {
            Some(StreamResampler::new(from, to).map_err(|e| AudioError::encoder(format, e))?)
        };
        Ok(Self { format, resampler })
    }

    /// `pcm` at the codec rate (borrowed unchanged when no resampling is needed).
    pub(crate) fn push<'a>(
        &mut self,
        pcm: &'a [f32],
    ) -> Result<std::borrow::Cow<'a, [f32]>, AudioError> {
        match &mut self.resampler {
            None => Ok(pcm.into()),
            Some(r) => r
                .push(pcm)
                .map(Into::into)
                .map_err(|e| AudioError::encoder(self.format, e)),
        }
    }

    /// The resampler's last samples (none when passing through); the adapter is spent.
    pub(crate) fn finish(&mut self) -> Result<Vec<f32>, AudioError> {
        match self.resampler.take() {
            None => Ok(Vec::new()),
            Some(r) => r.finish().map_err(|e| AudioError::encoder(self.format, e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codec_rate_picks_the_next_supported_rate() {
        assert_eq!(codec_rate(24_000, &MPEG_RATES), 24_000);
        assert_eq!(codec_rate(44_100, &MPEG_RATES), 44_100);
        assert_eq!(codec_rate(4_000, &MPEG_RATES), 8_000);
        assert_eq!(codec_rate(20_000, &MPEG_RATES), 22_050);
        assert_eq!(codec_rate(96_000, &MPEG_RATES), 48_000);
    }
}
