//! The voice catalogue: Voxtral's presets, their languages, and OpenAI's voice names mapped
//! onto them so that requests written for OpenAI work unchanged.
//!
//! OpenAI's voices are all English, so they map onto the five English presets, female names
//! to female presets and male names to male ones, the calm ones to `neutral_*`, the bright
//! ones to `cheerful_female` and the conversational ones to `casual_*`.

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

/// OpenAI names that map to `preset`.
pub fn aliases_of(preset: &str) -> Vec<&'static str> {
    OPENAI_VOICES
        .iter()
        .filter(|(_, p)| *p == preset)
        .map(|(alias, _)| *alias)
        .collect()
}

/// The model's preset for a requested voice: a preset name or an OpenAI name, in any case.
pub fn resolve<'a>(requested: &str, presets: &'a [String]) -> Option<&'a str> {
    let requested = requested.trim();
    let preset = OPENAI_VOICES
        .iter()
        .find(|(alias, _)| alias.eq_ignore_ascii_case(requested))
        .map_or(requested, |(_, preset)| *preset);
    presets
        .iter()
        .find(|p| p.eq_ignore_ascii_case(preset))
        .map(String::as_str)
}

/// Why `requested` names no voice of this model, listing only names that work with it: an
/// OpenAI name is valid only while its preset is in the model folder.
pub fn unknown_voice_message(requested: &str, presets: &[String]) -> String {
    let trimmed = requested.trim();
    let usable: Vec<&str> = OPENAI_VOICES
        .iter()
        .filter(|(_, preset)| resolve(preset, presets).is_some())
        .map(|(alias, _)| *alias)
        .collect();
    let mut message = match OPENAI_VOICES
        .iter()
        .find(|(alias, _)| alias.eq_ignore_ascii_case(trimmed))
    {
        Some((alias, preset)) => format!(
            "The OpenAI voice '{alias}' selects the preset '{preset}', which this model folder \
             does not have."
        ),
        None => format!("Unknown voice '{requested}'."),
    };
    if presets.is_empty() {
        message.push_str(" This model folder has no preset voices.");
        return message;
    }
    message.push_str(&format!(" Use a preset ({})", presets.join(", ")));
    if !usable.is_empty() {
        message.push_str(&format!(
            " or an OpenAI voice name that maps to one ({})",
            usable.join(", ")
        ));
    }
    message.push('.');
    message
}

#[cfg(all(test, feature = "testmodel"))]
mod tests {
    use super::*;
    use crate::testmodel::PRESET_VOICES;

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

    #[test]
    fn resolves_presets_and_aliases_case_insensitively() {
        let presets: Vec<String> = PRESET_VOICES.iter().map(|s| s.to_string()).collect();
        assert_eq!(resolve("alloy", &presets), Some("neutral_female"));
        assert_eq!(resolve("Onyx", &presets), Some("neutral_male"));
        assert_eq!(resolve("fr_female", &presets), Some("fr_female"));
        assert_eq!(resolve(" DE_MALE ", &presets), Some("de_male"));
        assert_eq!(resolve("nobody", &presets), None);
        assert_eq!(aliases_of("casual_female"), ["shimmer", "marin"]);
        assert!(aliases_of("fr_male").is_empty());
    }

    #[test]
    fn unknown_voice_messages_list_only_names_that_work() {
        let all: Vec<String> = PRESET_VOICES.iter().map(|s| s.to_string()).collect();
        let message = unknown_voice_message("robot", &all);
        assert!(
            message.starts_with("Unknown voice 'robot'. Use a preset (casual_female, "),
            "{message}"
        );
        assert!(message.contains("(alloy, ash,"), "{message}");

        // Only the French presets: no OpenAI name works, and alloy is not offered.
        let french = vec!["fr_female".to_string(), "fr_male".to_string()];
        let message = unknown_voice_message("Alloy", &french);
        assert_eq!(
            message,
            "The OpenAI voice 'alloy' selects the preset 'neutral_female', which this model \
             folder does not have. Use a preset (fr_female, fr_male)."
        );
        // One English preset: only its names are offered.
        let some = vec!["fr_male".to_string(), "neutral_male".to_string()];
        let message = unknown_voice_message("nova", &some);
        assert!(message.ends_with("(echo, onyx, cedar)."), "{message}");
        assert!(unknown_voice_message("x", &[]).ends_with("has no preset voices."));
    }
}
