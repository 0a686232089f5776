//! Voxtral's voice catalogue: its presets' languages and genders (from their names), and
//! OpenAI's voice names mapped onto them so that requests written for OpenAI work unchanged.
//!
//! OpenAI's voices are all English, so they map onto the five English presets, female names
//! to female presets and male names to male ones, the calm ones to `neutral_*`, the bright
//! ones to `cheerful_female` and the conversational ones to `casual_*`.

use super::DEFAULT_MAX_FRAMES;
use crate::engine::{ModelCard, VoiceInfo};

/// (OpenAI voice, preset), in OpenAI's documentation order.
pub const OPENAI_VOICES: [(&str, &str); 13] = [
    ("alloy", "neutral_female"),
    ("ash", "casual_male"),
    ("ballad", "casual_male"),
    ("coral", "cheerful_female"),
    ("echo", "neutral_male"),
    ("fable", "casual_male"),
    ("onyx", "neutral_male"),
    ("nova", "cheerful_female"),
    ("sage", "neutral_female"),
    ("shimmer", "casual_female"),
    ("verse", "casual_male"),
    ("marin", "casual_female"),
    ("cedar", "neutral_male"),
];

/// What is known about a preset from its name: `<language>_<gender>`, or an English style.
pub struct PresetInfo {
    /// BCP 47 language code.
    pub language: &'static str,
    pub language_name: &'static str,
    pub gender: &'static str,
}

const LANGUAGES: [(&str, &str); 9] = [
    ("en", "English"),
    ("pt", "Portuguese"),
    ("nl", "Dutch"),
    ("it", "Italian"),
    ("fr", "French"),
    ("es", "Spanish"),
    ("de", "German"),
    ("ar", "Arabic"),
    ("hi", "Hindi"),
];

/// Language and gender of a preset named like the published ones (`fr_male`,
/// `casual_female`: styles without a language prefix are English); `None` for other names.
pub fn preset_info(name: &str) -> Option<PresetInfo> {
    let (prefix, gender) = name.rsplit_once('_')?;
    let gender = match gender {
        "male" => "male",
        "female" => "female",
        _ => return None,
    };
    let code = match prefix {
        "casual" | "cheerful" | "neutral" => "en",
        other => other,
    };
    let &(language, language_name) = LANGUAGES.iter().find(|(c, _)| *c == code)?;
    Some(PresetInfo {
        language,
        language_name,
        gender,
    })
}

/// Voxtral TTS's card, for a folder with these presets.
pub fn card<'a>(
    voices: impl Iterator<Item = &'a str>,
    sample_rate: u32,
    samples_per_frame: usize,
) -> ModelCard {
    ModelCard {
        family: super::family::NAME,
        owned_by: "mistralai",
        homepage: "https://huggingface.co/mistralai/Voxtral-4B-TTS-2603",
        voices: voices.map(voice_info).collect(),
        voice_aliases: &OPENAI_VOICES,
        languages: LANGUAGES.iter().map(|(code, _)| code.to_string()).collect(),
        language_input: false,
        cloning: false,
        instructions: false,
        voice_design: false,
        sample_rate,
        samples_per_frame,
        max_frames: DEFAULT_MAX_FRAMES,
        device: String::new(),
        weights: String::new(),
    }
}

/// The card of a folder with these presets at the published rates (24 kHz, 1920 samples per
/// frame), for tests and fuzz targets that check requests without loading a model.
pub fn example_card(voices: &[&str]) -> ModelCard {
    card(voices.iter().copied(), 24_000, 1920)
}

/// The card's description of a preset.
pub fn voice_info(name: &str) -> VoiceInfo {
    let info = preset_info(name);
    VoiceInfo {
        name: name.to_string(),
        language: info.as_ref().map(|i| i.language),
        language_name: info.as_ref().map(|i| i.language_name),
        gender: info.as_ref().map(|i| i.gender),
    }
}

#[cfg(all(test, feature = "testkit"))]
mod tests {
    use super::*;
    use crate::models::voxtral_tts::testkit::PRESET_VOICES;

    #[test]
    fn every_openai_voice_maps_to_a_published_preset_of_its_gender() {
        let female = ["alloy", "coral", "nova", "sage", "shimmer", "marin"];
        for (alias, preset) in OPENAI_VOICES {
            assert!(PRESET_VOICES.contains(&preset), "{alias} -> {preset}");
            let info = preset_info(preset).unwrap();
            assert_eq!(info.language, "en", "{alias}");
            let gender = if female.contains(&alias) {
                "female"
            } else {
                "male"
            };
            assert_eq!(info.gender, gender, "{alias} -> {preset}");
        }
    }

    #[test]
    fn every_published_preset_has_a_language_and_gender() {
        for name in PRESET_VOICES {
            assert!(preset_info(name).is_some(), "{name}");
        }
        let hi = preset_info("hi_female").unwrap();
        assert_eq!(
            (hi.language, hi.language_name, hi.gender),
            ("hi", "Hindi", "female")
        );
        assert!(preset_info("robot").is_none() && preset_info("xx_male").is_none());
    }
}
