//! `wav`: 16-bit PCM RIFF/WAVE, mono, at the PCM's own rate (any rate: the header says it).
//!
//! Streams start with hound's "infinite file" header (0xFFFFFFFF in both size fields,
//! which ffmpeg, browsers and most players read as "until end of stream"). A one-shot
//! file gets the real sizes patched in at `finish`.

use super::pcm::write_s16le;
use super::{AudioError, FormatEncoder, Mode};

/// Offsets of the RIFF chunk size and data chunk size in the 44-byte PCM header.
const RIFF_SIZE_AT: usize = 4;
const DATA_SIZE_AT: usize = 40;
const HEADER_LEN: usize = 44;

pub(crate) struct WavEncoder {
    mode: Mode,
    sample_rate: u32,
    header_written: bool,
    data_bytes: u64,
}

impl WavEncoder {
    pub(crate) fn new(mode: Mode, sample_rate: u32) -> Self {
        Self {
            mode,
            sample_rate,
            header_written: false,
            data_bytes: 0,
        }
    }

    fn header(&self) -> Vec<u8> {
        hound::WavSpec {
            channels: 1,
            sample_rate: self.sample_rate,
            bits_per_sample: 16,
            sample_format: hound::SampleFormat::Int,
        }
        .into_header_for_infinite_file()
    }

    fn ensure_header(&mut self, out: &mut Vec<u8>) {
        if !self.header_written {
            out.extend_from_slice(&self.header());
            self.header_written = true;
        }
    }
}

impl FormatEncoder for WavEncoder {
    fn push(&mut self, pcm: &[f32], out: &mut Vec<u8>) -> Result<(), AudioError> {
        // The header goes out with the first push so a client sees bytes immediately.
        self.ensure_header(out);
        write_s16le(pcm, out);
        self.data_bytes += 2 * pcm.len() as u64;
        Ok(())
    }

    fn finish(&mut self, out: &mut Vec<u8>) -> Result<(), AudioError> {
        self.ensure_header(out);
        if self.mode == Mode::OneShot && out.len() >= HEADER_LEN {
            // Over 4 GiB the "unknown" 0xFFFFFFFF sizes are the best a RIFF header can say.
            if let Ok(data) = u32::try_from(self.data_bytes) {
                if let Some(riff) = data.checked_add((HEADER_LEN - 8) as u32) {
                    out[RIFF_SIZE_AT..RIFF_SIZE_AT + 4].copy_from_slice(&riff.to_le_bytes());
                    out[DATA_SIZE_AT..DATA_SIZE_AT + 4].copy_from_slice(&data.to_le_bytes());
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audio::{encode_audio, AudioFormat};

    #[test]
    fn header_layout() {
        let h = WavEncoder::new(Mode::Stream, 24_000).header();
        assert_eq!(h.len(), HEADER_LEN);
        assert_eq!(&h[0..4], b"RIFF");
        assert_eq!(&h[36..40], b"data");
        assert_eq!(&h[DATA_SIZE_AT..DATA_SIZE_AT + 4], &[0xFF; 4]);
    }

    #[test]
    fn one_shot_has_sizes_and_reads_back() {
        let pcm: Vec<f32> = (0..1000).map(|i| (i as f32 * 0.01).sin() * 0.5).collect();
        for rate in [16_000, 22_050, 24_000, 44_100, 48_000] {
            let bytes = encode_audio(AudioFormat::Wav, &pcm, rate).unwrap();
            assert_eq!(bytes.len(), HEADER_LEN + 2000);
            let reader = hound::WavReader::new(std::io::Cursor::new(&bytes)).unwrap();
            assert_eq!(reader.len(), 1000);
            assert_eq!(reader.spec().sample_rate, rate);
        }
        let empty = encode_audio(AudioFormat::Wav, &[], 24_000).unwrap();
        assert_eq!(empty.len(), HEADER_LEN);
        assert_eq!(
            hound::WavReader::new(std::io::Cursor::new(&empty))
                .unwrap()
                .len(),
            0
        );
    }
}
