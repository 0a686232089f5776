//! A request's `voice` against the model's card: a preset name, or one of OpenAI's voice
//! names that the family maps onto a preset, in any case; and, for a name that selects
//! nothing, a message listing only the names that work with this model.

use crate::engine::ModelCard;

/// The preset a requested voice selects, if the model has it.
pub fn resolve<'a>(requested: &str, card: &'a ModelCard) -> Option<&'a str> {
    let requested = requested.trim();
    let preset = alias(requested, card).map_or(requested, |(_, preset)| preset);
    card.voices
        .iter()
        .find(|v| v.name.eq_ignore_ascii_case(preset))
        .map(|v| v.name.as_str())
}

/// The OpenAI voice names that select `preset`.
pub fn aliases_of(preset: &str, card: &ModelCard) -> Vec<&'static str> {
    card.voice_aliases
        .iter()
        .filter(|(_, p)| *p == preset)
        .map(|(alias, _)| *alias)
        .collect()
}

fn alias(requested: &str, card: &ModelCard) -> Option<(&'static str, &'static str)> {
    card.voice_aliases
        .iter()
        .find(|(alias, _)| alias.eq_ignore_ascii_case(requested))
        .copied()
}

/// Why `requested` names no voice of this model, listing only names that work with it: an
/// OpenAI name is valid only while its preset is in the model folder.
pub fn unknown_voice_message(requested: &str, card: &ModelCard) -> String {
    let usable: Vec<&str> = card
        .voice_aliases
        .iter()
        .filter(|(_, preset)| resolve(preset, card).is_some())
        .map(|(alias, _)| *alias)
        .collect();
    let mut message = match alias(requested.trim(), card) {
        Some((alias, preset)) => format!(
            "The OpenAI voice '{alias}' selects the preset '{preset}', which this model folder \
             does not have."
        ),
        None => format!("Unknown voice '{requested}'."),
    };
    if card.cloning {
        message.push_str(
            " Custom voices of this model: create one from a clip with POST /v1/audio/voices \
             and pass its id, voice: {\"id\": \"voice_...\"}.",
        );
    }
    if card.voices.is_empty() {
        message.push_str(" This model folder has no preset voices.");
        return message;
    }
    let presets: Vec<&str> = card.voices.iter().map(|v| v.name.as_str()).collect();
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

#[cfg(all(test, feature = "testkit"))]
mod tests {
    use super::*;
    use crate::models::voxtral_tts::catalog::example_card;
    use crate::models::voxtral_tts::testkit::PRESET_VOICES;

    #[test]
    fn resolves_presets_and_aliases_case_insensitively() {
        let all = example_card(&PRESET_VOICES);
        assert_eq!(resolve("alloy", &all), Some("neutral_female"));
        assert_eq!(resolve("Onyx", &all), Some("neutral_male"));
        assert_eq!(resolve("fr_female", &all), Some("fr_female"));
        assert_eq!(resolve(" DE_MALE ", &all), Some("de_male"));
        assert_eq!(resolve("nobody", &all), None);
        assert_eq!(aliases_of("casual_female", &all), ["shimmer", "marin"]);
        assert!(aliases_of("fr_male", &all).is_empty());
    }

    #[test]
    fn unknown_voice_messages_list_only_names_that_work() {
        let message = unknown_voice_message("robot", &example_card(&PRESET_VOICES));
        assert!(
            message.starts_with("Unknown voice 'robot'. Use a preset (casual_female, "),
            "{message}"
        );
        assert!(message.contains("(alloy, ash,"), "{message}");

        // Only the French presets: no OpenAI name works, and alloy is not offered.
        let message = unknown_voice_message("Alloy", &example_card(&["fr_female", "fr_male"]));
        assert_eq!(
            message,
            "The OpenAI voice 'alloy' selects the preset 'neutral_female', which this model \
             folder does not have. Use a preset (fr_female, fr_male)."
        );
        // One English preset: only its names are offered.
        let message = unknown_voice_message("nova", &example_card(&["fr_male", "neutral_male"]));
        assert!(message.ends_with("(echo, onyx, cedar)."), "{message}");
        assert!(unknown_voice_message("x", &example_card(&[])).ends_with("has no preset voices."));
    }
}
