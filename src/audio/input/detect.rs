//! Container detection from an upload's first bytes (never from a file name or MIME type,
//! which clients get wrong).

use std::fmt;

/// The containers audio input reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ContainerFormat {
    /// RIFF/WAVE: PCM integer (8 to 32 bit), float (32/64 bit), A-law, µ-law.
    Wav,
    /// MPEG-1/2/2.5 layer III, optionally behind an ID3v2 tag.
    Mp3,
    /// Native FLAC (`fLaC`).
    Flac,
    /// Ogg: Opus, Vorbis or FLAC.
    Ogg,
    /// WebM/Matroska (EBML): Opus, Vorbis, FLAC or PCM.
    WebM,
}

impl ContainerFormat {
    /// A short human name, used in error messages.
    pub fn name(self) -> &'static str {
        match self {
            ContainerFormat::Wav => "WAV",
            ContainerFormat::Mp3 => "MP3",
            ContainerFormat::Flac => "FLAC",
            ContainerFormat::Ogg => "Ogg",
            ContainerFormat::WebM => "WebM",
        }
    }
}

impl fmt::Display for ContainerFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The container of `bytes`, from its signature; `None` when it matches none.
pub fn detect_format(bytes: &[u8]) -> Option<ContainerFormat> {
    sniff(bytes).map(|(format, _)| format)
}

/// The container and the offset its reader starts at (past a leading ID3v2 tag).
pub(super) fn sniff(bytes: &[u8]) -> Option<(ContainerFormat, usize)> {
    if let Some(format) = signature(bytes) {
        return Some((format, 0));
    }
    // ID3v2 tag: "ID3", version (2), flags (1), syncsafe size (4), then an optional footer.
    if bytes.len() >= 10 && &bytes[..3] == b"ID3" {
        let size = bytes[6..10]
            .iter()
            .fold(0usize, |acc, &b| (acc << 7) | usize::from(b & 0x7f));
        let footer = if bytes[5] & 0x10 != 0 { 10 } else { 0 };
        let offset = (10 + size + footer).min(bytes.len());
        return match signature(&bytes[offset..]) {
            Some(ContainerFormat::Flac) => Some((ContainerFormat::Flac, offset)),
            // An ID3 tag is an MP3's; the MP3 reader looks for the first frame itself.
            _ => Some((ContainerFormat::Mp3, offset)),
        };
    }
    None
}

fn signature(b: &[u8]) -> Option<ContainerFormat> {
    if b.len() >= 12 && &b[..4] == b"RIFF" && &b[8..12] == b"WAVE" {
        Some(ContainerFormat::Wav)
    } else if b.starts_with(b"fLaC") {
        Some(ContainerFormat::Flac)
    } else if b.starts_with(b"OggS") {
        Some(ContainerFormat::Ogg)
    } else if b.starts_with(&[0x1a, 0x45, 0xdf, 0xa3]) {
        Some(ContainerFormat::WebM)
    } else if is_mp3_frame_header(b) {
        Some(ContainerFormat::Mp3)
    } else {
        None
    }
}

/// An MPEG audio layer III frame header: sync, a valid version, layer III, a valid bitrate
/// and sample rate index.
fn is_mp3_frame_header(b: &[u8]) -> bool {
    if b.len() < 4 || b[0] != 0xff || b[1] & 0xe0 != 0xe0 {
        return false;
    }
    let version = (b[1] >> 3) & 0b11; // 01 is reserved
    let layer = (b[1] >> 1) & 0b11; // 01 is layer III
    let bitrate = b[2] >> 4; // 1111 is invalid
    let rate = (b[2] >> 2) & 0b11; // 11 is reserved
    version != 0b01 && layer == 0b01 && bitrate != 0b1111 && rate != 0b11
}

/// The channel count in a WAV file's `fmt ` chunk, if it can be found.
///
/// Checked before symphonia sees the file: its WAV reader does u16 and shift arithmetic on
/// the channel count that overflows for absurd counts (a panic in builds with overflow checks).
pub(super) fn wav_channels(b: &[u8]) -> Option<u16> {
    let mut pos = 12usize;
    while pos.checked_add(8)? <= b.len() {
        let id = &b[pos..pos + 4];
        let size = u32::from_le_bytes(b[pos + 4..pos + 8].try_into().ok()?) as usize;
        if id == b"fmt " {
            let at = pos + 8 + 2;
            return b.get(at..at + 2).map(|c| u16::from_le_bytes([c[0], c[1]]));
        }
        // Chunks are padded to an even length.
        pos = pos
            .checked_add(8)?
            .checked_add(size)?
            .checked_add(size & 1)?;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signatures() {
        let mut wav = b"RIFF\0\0\0\0WAVEfmt ".to_vec();
        assert_eq!(detect_format(&wav), Some(ContainerFormat::Wav));
        wav[8] = b'X';
        assert_eq!(detect_format(&wav), None);
        assert_eq!(
            detect_format(b"fLaC\0\0\0\x22"),
            Some(ContainerFormat::Flac)
        );
        assert_eq!(detect_format(b"OggS\0\x02"), Some(ContainerFormat::Ogg));
        assert_eq!(
            detect_format(&[0x1a, 0x45, 0xdf, 0xa3, 0x9f]),
            Some(ContainerFormat::WebM)
        );
        // MPEG-1 layer III, 128 kbit/s, 44.1 kHz.
        assert_eq!(
            detect_format(&[0xff, 0xfb, 0x90, 0x64]),
            Some(ContainerFormat::Mp3)
        );
        // Layer II and a reserved sample rate index are not MP3.
        assert_eq!(detect_format(&[0xff, 0xfd, 0x90, 0x64]), None);
        assert_eq!(detect_format(&[0xff, 0xfb, 0x9c, 0x64]), None);
        assert_eq!(detect_format(b""), None);
        assert_eq!(detect_format(b"RIFF"), None);
        assert_eq!(detect_format(b"hello world, not audio"), None);
    }

    #[test]
    fn id3_tag_is_skipped() {
        // A 5-byte tag body, then an MP3 frame header.
        let mut b = b"ID3\x04\x00\x00\x00\x00\x00\x05abcde".to_vec();
        b.extend_from_slice(&[0xff, 0xfb, 0x90, 0x64]);
        assert_eq!(sniff(&b), Some((ContainerFormat::Mp3, 15)));
        // FLAC behind an ID3 tag.
        let mut b = b"ID3\x04\x00\x00\x00\x00\x00\x00".to_vec();
        b.extend_from_slice(b"fLaC");
        assert_eq!(sniff(&b), Some((ContainerFormat::Flac, 10)));
        // A tag claiming more bytes than there are: the offset stops at the end.
        let b = b"ID3\x04\x00\x00\x7f\x7f\x7f\x7f";
        assert_eq!(sniff(b), Some((ContainerFormat::Mp3, 10)));
    }

    #[test]
    fn wav_channel_count() {
        let mut b = b"RIFF\0\0\0\0WAVEJUNK\x03\0\0\0abc\0fmt \x10\0\0\0\x01\0\x02\0".to_vec();
        assert_eq!(wav_channels(&b), Some(2));
        b.truncate(b.len() - 1);
        assert_eq!(wav_channels(&b), None);
        assert_eq!(wav_channels(b"RIFF\0\0\0\0WAVEJUNK\xff\xff\xff\xff"), None);
    }
}
