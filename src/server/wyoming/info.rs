//! The `info` answer to `describe`: one TTS program with the model's presets as voices, and
//! the voice a request without one gets.

use crate::cli::DEFAULT_MODEL_REPO;
use crate::engine::ModelCard;
use crate::server::voice_catalog::preset_info;
use serde_json::{json, Value};

/// The preset used when a request names no voice (nor a language that has one).
const DEFAULT_VOICE: &str = "neutral_female";

/// The data of the `info` event (the `wyoming` package's `Info`, `TtsProgram`, `TtsVoice`).
pub fn info(model: &ModelCard, model_id: &str) -> Value {
    let attribution = json!({
        "name": "Mistral AI",
        "url": format!("https://huggingface.co/{DEFAULT_MODEL_REPO}"),
    });
    let voices: Vec<Value> = model
        .voices
        .iter()
        .map(|name| {
            let (languages, description) = match preset_info(name) {
                Some(i) => (
                    vec![i.language],
                    format!("{name} ({}, {})", i.language_name, i.gender),
                ),
                None => (Vec::new(), name.clone()),
            };
            json!({
                "name": name,
                "attribution": attribution,
                "installed": true,
                "description": description,
                "version": null,
                "languages": languages,
                "speakers": null,
            })
        })
        .collect();
    json!({
        "asr": [], "handle": [], "intent": [], "wake": [], "mic": [], "snd": [],
        "tts": [{
            "name": "voxtral-tts",
            "attribution": attribution,
            "installed": true,
            "description": format!("Voxtral text to speech ({model_id})"),
            "version": env!("CARGO_PKG_VERSION"),
            "voices": voices,
            "supports_synthesize_streaming": true,
        }],
    })
}

/// The first preset speaking `language` (`fr`, or `fr-FR`), else `neutral_female`, else the
/// first preset.
pub fn default_voice<'a>(presets: &'a [String], language: Option<&str>) -> Option<&'a str> {
    let wanted = language.map(|l| l.split(['-', '_']).next().unwrap_or(l));
    let in_language = wanted.and_then(|code| {
        presets
            .iter()
            .find(|p| preset_info(p).is_some_and(|i| i.language.eq_ignore_ascii_case(code)))
    });
    in_language
        .or_else(|| presets.iter().find(|p| *p == DEFAULT_VOICE))
        .or_else(|| presets.first())
        .map(String::as_str)
}

#[cfg(all(test, feature = "testmodel"))]
mod tests {
    use super::*;
    use crate::testmodel::PRESET_VOICES;

    #[test]
    fn every_preset_is_a_voice_with_its_language() {
        let model = ModelCard::example(&["fr_male", "robot"]);
        let info = info(&model, "voxtral");
        let tts = &info["tts"][0];
        assert_eq!(tts["supports_synthesize_streaming"], true);
        assert_eq!(tts["voices"][0]["languages"], json!(["fr"]));
        assert_eq!(tts["voices"][0]["description"], "fr_male (French, male)");
        assert_eq!(tts["voices"][1]["languages"], json!([]));
    }

    #[test]
    fn default_voices() {
        let all: Vec<String> = PRESET_VOICES.iter().map(|s| s.to_string()).collect();
        assert_eq!(default_voice(&all, None), Some("neutral_female"));
        assert_eq!(default_voice(&all, Some("de-DE")), Some("de_male"));
        assert_eq!(default_voice(&all, Some("ja")), Some("neutral_female"));
        let french = vec!["fr_male".to_string()];
        assert_eq!(default_voice(&french, Some("en")), Some("fr_male"));
        assert_eq!(default_voice(&[], None), None);
    }
}
