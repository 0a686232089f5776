//! Qwen3-TTS's card: the CustomVoice speakers with their native languages, OpenAI's voice
//! names mapped onto them, and the models' languages as BCP 47 codes.

use super::config::{Qwen3TtsConfig, TtsModelType};
use crate::engine::{primary_language, ModelCard, VoiceInfo};

/// A CustomVoice speaker's native language (code, name) and gender, from the published
/// model card; every speaker speaks every language of the model.
const SPEAKERS: [(&str, &str, &str, &str); 9] = [
    ("vivian", "zh", "Chinese", "female"),
    ("serena", "zh", "Chinese", "female"),
    ("uncle_fu", "zh", "Chinese", "male"),
    ("dylan", "zh", "Chinese (Beijing dialect)", "male"),
    ("eric", "zh", "Chinese (Sichuan dialect)", "male"),
    ("ryan", "en", "English", "male"),
    ("aiden", "en", "English", "male"),
    ("ono_anna", "ja", "Japanese", "female"),
    ("sohee", "ko", "Korean", "female"),
];

/// OpenAI's voices, female names to the female speakers and male names to the English male
/// ones (as for Voxtral: calm to one, bright or conversational to the other).
pub const OPENAI_VOICES: [(&str, &str); 13] = [
    ("alloy", "serena"),
    ("ash", "aiden"),
    ("ballad", "aiden"),
    ("coral", "vivian"),
    ("echo", "ryan"),
    ("fable", "aiden"),
    ("onyx", "ryan"),
    ("nova", "vivian"),
    ("sage", "serena"),
    ("shimmer", "serena"),
    ("verse", "aiden"),
    ("marin", "serena"),
    ("cedar", "ryan"),
];

/// The config's language names and their BCP 47 codes.
const LANGUAGES: [(&str, &str); 10] = [
    ("zh", "chinese"),
    ("en", "english"),
    ("de", "german"),
    ("it", "italian"),
    ("pt", "portuguese"),
    ("es", "spanish"),
    ("ja", "japanese"),
    ("ko", "korean"),
    ("fr", "french"),
    ("ru", "russian"),
];

/// The config's name of a BCP 47 code (`en`, `en-US`), any case; `None` for other input.
pub fn language_name(code: &str) -> Option<&'static str> {
    let primary = primary_language(code);
    LANGUAGES
        .iter()
        .find(|(c, _)| c.eq_ignore_ascii_case(primary))
        .map(|(_, name)| *name)
}

/// The BCP 47 codes of config language names (names without one are left out).
pub fn language_codes(names: &[&str]) -> Vec<&'static str> {
    names
        .iter()
        .filter_map(|name| LANGUAGES.iter().find(|(_, n)| n == name).map(|(c, _)| *c))
        .collect()
}

pub fn card(
    config: &Qwen3TtsConfig,
    sample_rate: u32,
    samples_per_frame: usize,
    max_frames: usize,
) -> ModelCard {
    let voices = config
        .talker_config
        .spk_id
        .keys()
        .map(|name| {
            let known = SPEAKERS.iter().find(|(n, ..)| n.eq_ignore_ascii_case(name));
            VoiceInfo {
                name: name.clone(),
                language: known.map(|s| s.1),
                language_name: known.map(|s| s.2),
                gender: known.map(|s| s.3),
            }
        })
        .collect();
    let model_type = config.tts_model_type;
    ModelCard {
        family: super::family::NAME,
        owned_by: "Qwen",
        homepage: "https://huggingface.co/collections/Qwen/qwen3-tts",
        voices,
        voice_aliases: match model_type {
            TtsModelType::CustomVoice => &OPENAI_VOICES,
            _ => &[],
        },
        languages: language_codes(&config.supported_languages())
            .into_iter()
            .map(String::from)
            .collect(),
        language_input: true,
        cloning: model_type == TtsModelType::Base,
        instructions: match model_type {
            TtsModelType::VoiceDesign => true,
            TtsModelType::CustomVoice => !config.ignores_instruct(),
            TtsModelType::Base => false,
        },
        voice_design: model_type == TtsModelType::VoiceDesign,
        sample_rate,
        samples_per_frame,
        max_frames,
        device: String::new(),
        weights: String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_map_to_config_names() {
        assert_eq!(language_name("en"), Some("english"));
        assert_eq!(language_name("ZH-cn"), Some("chinese"));
        assert_eq!(language_name("pt_BR"), Some("portuguese"));
        assert_eq!(language_name("xx"), None);
        assert_eq!(
            language_codes(&["auto", "french", "beijing_dialect"]),
            ["fr"]
        );
    }

    #[test]
    fn openai_voices_select_published_speakers() {
        for (_, speaker) in OPENAI_VOICES {
            assert!(SPEAKERS.iter().any(|(name, ..)| *name == speaker));
        }
    }
}
