//! Voice activity detection for live transcription (the Realtime API's `server_vad` turn
//! detection): where speech starts and stops in a stream of samples.
//!
//! An energy detector, not OpenAI's model: each 20 ms frame is speech when its RMS level is at
//! least [`VadSettings::level_dbfs`] (−60 dBFS at threshold 0, −40 at the default 0.5, −20 at
//! 1). Speech starts at the first loud frame and is reported with `prefix_padding_ms` of the
//! audio before it; it stops once `silence_duration_ms` of quiet frames have followed, and
//! the reported audio runs to the end of that silence. Audio outside speech is dropped.

use std::collections::VecDeque;

/// Frames the detector classifies, in milliseconds.
pub const FRAME_MS: u32 = 20;

/// The longest padding or silence a session may ask for.
pub const MAX_DURATION_MS: u32 = 10_000;

/// `server_vad`'s settings, with OpenAI's defaults.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct VadSettings {
    /// 0 to 1: higher needs louder audio to count as speech.
    pub threshold: f32,
    /// Audio kept from before the first loud frame.
    pub prefix_padding_ms: u32,
    /// Quiet audio that ends the speech.
    pub silence_duration_ms: u32,
}

impl Default for VadSettings {
    fn default() -> Self {
        VadSettings {
            threshold: 0.5,
            prefix_padding_ms: 300,
            silence_duration_ms: 500,
        }
    }
}

impl VadSettings {
    /// The RMS level, in dB below full scale, from which a frame is speech.
    pub fn level_dbfs(&self) -> f32 {
        -60.0 + 40.0 * self.threshold
    }
}

/// What a piece of input did to the speech, in order.
#[derive(Clone, Debug, PartialEq)]
pub enum VadEvent {
    /// Speech began: `start_ms` (from the session's first sample) is where `audio`, the
    /// padding and the first loud frame, begins.
    Started { start_ms: u64, audio: Vec<f32> },
    /// More audio of the speech.
    Speech(Vec<f32>),
    /// Speech ended at `end_ms`, after the silence that ended it; `audio` runs up to there.
    Stopped { end_ms: u64, audio: Vec<f32> },
}

/// The detector's state over one session's samples at one rate.
pub struct VoiceActivity {
    settings: VadSettings,
    rate: u32,
    frame: usize,
    /// Samples of the frame being filled.
    pending: Vec<f32>,
    /// The most recent quiet audio, at most the padding, while there is no speech.
    padding: VecDeque<f32>,
    in_speech: bool,
    /// Quiet samples since the last loud frame, during speech.
    quiet: usize,
    /// Samples classified so far: where the next frame starts.
    position: u64,
}

impl VoiceActivity {
    /// A detector whose first sample is the session's `position`th; it starts in speech when
    /// `in_speech` (an open item goes on until a silence ends it).
    pub fn new(settings: VadSettings, rate: u32, position: u64, in_speech: bool) -> Self {
        VoiceActivity {
            settings,
            rate,
            frame: samples(rate, FRAME_MS).max(1),
            pending: Vec::new(),
            padding: VecDeque::new(),
            in_speech,
            quiet: 0,
            position,
        }
    }

    pub fn in_speech(&self) -> bool {
        self.in_speech
    }

    /// Classifies the whole frames `samples` completes; the rest waits for the next call.
    pub fn push(&mut self, samples_in: &[f32]) -> Vec<VadEvent> {
        let mut events = Vec::new();
        let mut rest = samples_in;
        while !rest.is_empty() {
            let take = (self.frame - self.pending.len()).min(rest.len());
            self.pending.extend_from_slice(&rest[..take]);
            rest = &rest[take..];
            if self.pending.len() == self.frame {
                let frame = std::mem::take(&mut self.pending);
                self.on_frame(frame, &mut events);
            }
        }
        events
    }

    /// Forgets the speech and the padding (the buffer was cleared).
    pub fn reset(&mut self) {
        self.end();
    }

    /// Ends the speech by hand (a commit): returns the samples of the unfinished frame when
    /// they belong to the speech, and forgets the rest.
    pub fn end(&mut self) -> Vec<f32> {
        self.position += self.pending.len() as u64;
        let pending = std::mem::take(&mut self.pending);
        let tail = if self.in_speech { pending } else { Vec::new() };
        self.padding.clear();
        self.in_speech = false;
        self.quiet = 0;
        tail
    }

    fn on_frame(&mut self, frame: Vec<f32>, events: &mut Vec<VadEvent>) {
        let loud = level_dbfs(&frame) >= self.settings.level_dbfs();
        let frame_end = self.position + frame.len() as u64;
        if !self.in_speech {
            if loud {
                let start = self.position - self.padding.len() as u64;
                let mut audio: Vec<f32> = self.padding.drain(..).collect();
                audio.extend_from_slice(&frame);
                self.in_speech = true;
                self.quiet = 0;
                events.push(VadEvent::Started {
                    start_ms: self.ms(start),
                    audio,
                });
            } else {
                self.padding.extend(frame);
                let keep = samples(self.rate, self.settings.prefix_padding_ms);
                let excess = self.padding.len().saturating_sub(keep);
                self.padding.drain(..excess);
            }
        } else {
            self.quiet = if loud { 0 } else { self.quiet + frame.len() };
            let stopped = self.quiet >= samples(self.rate, self.settings.silence_duration_ms);
            match (events.last_mut(), stopped) {
                (_, true) => {
                    self.in_speech = false;
                    self.quiet = 0;
                    events.push(VadEvent::Stopped {
                        end_ms: self.ms(frame_end),
                        audio: frame,
                    });
                }
                (Some(VadEvent::Started { audio, .. } | VadEvent::Speech(audio)), false) => {
                    audio.extend_from_slice(&frame)
                }
                _ => events.push(VadEvent::Speech(frame)),
            }
        }
        self.position = frame_end;
    }

    fn ms(&self, samples: u64) -> u64 {
        samples * 1000 / u64::from(self.rate)
    }
}

fn samples(rate: u32, ms: u32) -> usize {
    (u64::from(rate) * u64::from(ms) / 1000) as usize
}

/// A frame's RMS level in dB below full scale (1.0); silence is −∞.
fn level_dbfs(frame: &[f32]) -> f32 {
    let power = frame
        .iter()
        .map(|&s| f64::from(s) * f64::from(s))
        .sum::<f64>()
        / frame.len() as f64;
    (10.0 * power.log10()) as f32
}

#[cfg(test)]
mod tests {
    use super::*;

    const RATE: u32 = 24_000;

    /// `ms` of a 440 Hz sine at `amplitude`.
    fn tone(ms: u32, amplitude: f32) -> Vec<f32> {
        (0..samples(RATE, ms))
            .map(|i| amplitude * (i as f32 * 440.0 * std::f32::consts::TAU / RATE as f32).sin())
            .collect()
    }

    fn audio_of(events: &[VadEvent]) -> usize {
        events
            .iter()
            .map(|e| match e {
                VadEvent::Started { audio, .. }
                | VadEvent::Speech(audio)
                | VadEvent::Stopped { audio, .. } => audio.len(),
            })
            .sum()
    }

    #[test]
    fn speech_is_found_with_its_padding_and_ends_after_the_silence() {
        let mut vad = VoiceActivity::new(VadSettings::default(), RATE, 0, false);
        // 1 s of quiet noise (-50 dBFS RMS for a sine of amplitude 0.0045), 600 ms of speech
        // (-23 dBFS), then 700 ms of silence, fed in uneven pieces.
        let mut input = tone(1000, 0.0045);
        input.extend(tone(600, 0.1));
        input.extend(vec![0.0; samples(RATE, 700)]);
        let mut events = Vec::new();
        for piece in input.chunks(1234) {
            events.extend(vad.push(piece));
        }
        let VadEvent::Started { start_ms, .. } = &events[0] else {
            panic!("speech starts first: {events:?}")
        };
        assert_eq!(*start_ms, 1000 - 300, "the padding goes back 300 ms");
        let Some(VadEvent::Stopped { end_ms, .. }) = events.last() else {
            panic!("speech stops last")
        };
        assert_eq!(*end_ms, 1600 + 500, "500 ms of silence end it");
        assert_eq!(
            audio_of(&events),
            samples(RATE, 300 + 600 + 500),
            "padding, speech and the silence that ended it, nothing else"
        );
        assert!(!vad.in_speech());
        assert!(vad.push(&vec![0.0; samples(RATE, 2000)]).is_empty());
    }

    #[test]
    fn a_short_pause_does_not_end_the_speech_and_the_threshold_sets_the_level() {
        let mut vad = VoiceActivity::new(VadSettings::default(), RATE, 0, false);
        let mut input = tone(200, 0.1);
        input.extend(vec![0.0; samples(RATE, 300)]);
        input.extend(tone(200, 0.1));
        let events = vad.push(&input);
        assert!(matches!(events[0], VadEvent::Started { start_ms: 0, .. }));
        assert_eq!(events.len(), 1, "one item, still open: {events:?}");
        assert!(vad.in_speech());

        let strict = VadSettings {
            threshold: 1.0,
            ..VadSettings::default()
        };
        assert_eq!(strict.level_dbfs(), -20.0);
        let mut vad = VoiceActivity::new(strict, RATE, 0, false);
        assert!(
            vad.push(&tone(500, 0.1)).is_empty(),
            "-23 dBFS is below -20"
        );
        assert!(!vad.push(&tone(100, 0.5)).is_empty(), "-9 dBFS is speech");
    }

    #[test]
    fn an_open_item_goes_on_until_a_silence_and_reset_forgets_the_speech() {
        let settings = VadSettings {
            silence_duration_ms: 100,
            ..VadSettings::default()
        };
        // Enabled 1 s into the session, with an item open.
        let mut vad = VoiceActivity::new(settings, RATE, u64::from(RATE), true);
        let events = vad.push(&vec![0.0; samples(RATE, 200)]);
        assert!(matches!(
            events[..],
            [VadEvent::Speech(_), VadEvent::Stopped { end_ms: 1100, .. }]
        ));
        let mut vad = VoiceActivity::new(settings, RATE, 0, false);
        vad.push(&tone(110, 0.1));
        assert_eq!(vad.end().len(), samples(RATE, 10), "the unfinished frame");
        assert!(!vad.in_speech());
        assert!(vad.push(&vec![0.0; samples(RATE, 500)]).is_empty());
        vad.push(&tone(30, 0.1));
        vad.reset();
        assert!(vad.push(&vec![0.0; samples(RATE, 500)]).is_empty());
    }
}
