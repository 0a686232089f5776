//! SubRip (`.srt`) and WebVTT (`.vtt`) text from timed segments: what
//! `response_format=srt|vtt` of a transcription returns.

/// One cue: its text and its start and end in seconds.
pub struct Cue<'a> {
    pub text: &'a str,
    pub start: f64,
    pub end: f64,
}

/// Cues numbered from 1, times as `HH:MM:SS,mmm`, each followed by a blank line.
pub fn srt(cues: &[Cue]) -> String {
    let mut out = String::new();
    for (i, cue) in cues.iter().enumerate() {
        out += &format!(
            "{}\n{} --> {}\n{}\n\n",
            i + 1,
            timestamp(cue.start, ','),
            timestamp(cue.end, ','),
            cue.text
        );
    }
    out
}

/// The `WEBVTT` header, then cues with times as `HH:MM:SS.mmm`.
pub fn vtt(cues: &[Cue]) -> String {
    let mut out = String::from("WEBVTT\n\n");
    for cue in cues {
        out += &format!(
            "{} --> {}\n{}\n\n",
            timestamp(cue.start, '.'),
            timestamp(cue.end, '.'),
            cue.text
        );
    }
    out
}

/// `HH:MM:SS` then `separator` and milliseconds, rounded to the nearest; negative is 0.
fn timestamp(seconds: f64, separator: char) -> String {
    let millis = (seconds.max(0.0) * 1000.0).round() as u64;
    let (hours, rest) = (millis / 3_600_000, millis % 3_600_000);
    let (minutes, rest) = (rest / 60_000, rest % 60_000);
    format!(
        "{hours:02}:{minutes:02}:{:02}{separator}{:03}",
        rest / 1000,
        rest % 1000
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const CUES: [Cue<'static>; 2] = [
        Cue {
            text: "Hello there.",
            start: 0.08,
            end: 1.2,
        },
        Cue {
            text: "Bye",
            start: 3725.5,
            end: 3726.0004,
        },
    ];

    #[test]
    fn srt_numbers_cues_with_comma_milliseconds() {
        assert_eq!(
            srt(&CUES),
            "1\n00:00:00,080 --> 00:00:01,200\nHello there.\n\n\
             2\n01:02:05,500 --> 01:02:06,000\nBye\n\n"
        );
        assert_eq!(srt(&[]), "");
    }

    #[test]
    fn vtt_has_its_header_and_dot_milliseconds() {
        assert_eq!(
            vtt(&CUES),
            "WEBVTT\n\n00:00:00.080 --> 00:00:01.200\nHello there.\n\n\
             01:02:05.500 --> 01:02:06.000\nBye\n\n"
        );
        assert_eq!(vtt(&[]), "WEBVTT\n\n");
    }
}
