//! XTTS-v2's card: the studio speakers of `speakers_xtts.pth` as named voices, OpenAI's voice
//! names mapped onto some of them, and the languages of `config.json`.

use crate::engine::{ModelCard, VoiceInfo};

/// OpenAI's voices mapped onto studio speakers of the published `speakers_xtts.pth` (a pair
/// whose speaker a folder lacks selects nothing): female names to female speakers, male to
/// male.
pub const OPENAI_VOICES: [(&str, &str); 13] = [
    ("alloy", "Claribel Dervla"),
    ("ash", "Andrew Chipper"),
    ("ballad", "Damien Black"),
    ("coral", "Daisy Studious"),
    ("echo", "Viktor Eka"),
    ("fable", "Craig Gutsy"),
    ("onyx", "Damien Black"),
    ("nova", "Ana Florence"),
    ("sage", "Gracie Wise"),
    ("shimmer", "Tammie Ema"),
    ("verse", "Andrew Chipper"),
    ("marin", "Claribel Dervla"),
    ("cedar", "Viktor Eka"),
];

pub struct CardInputs<'a> {
    pub speakers: Vec<String>,
    pub languages: &'a [String],
    pub cloning: bool,
    pub sample_rate: u32,
    pub samples_per_frame: usize,
    pub max_frames: usize,
}

pub fn card(inputs: CardInputs<'_>) -> ModelCard {
    ModelCard {
        family: super::family::NAME,
        owned_by: "coqui",
        homepage: "https://huggingface.co/coqui/XTTS-v2",
        voices: inputs
            .speakers
            .into_iter()
            .map(|name| VoiceInfo {
                name,
                language: None,
                language_name: None,
                gender: None,
            })
            .collect(),
        voice_aliases: &OPENAI_VOICES,
        languages: inputs.languages.to_vec(),
        language_input: true,
        cloning: inputs.cloning,
        instructions: false,
        voice_design: false,
        sample_rate: inputs.sample_rate,
        samples_per_frame: inputs.samples_per_frame,
        max_frames: inputs.max_frames,
        device: String::new(),
        weights: String::new(),
    }
}
