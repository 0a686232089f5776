//! The `info` answer to `describe`: one TTS program with the model's presets as voices (none
//! when no speech model is served), and the voice a request without one gets.

use crate::engine::{primary_language, ModelCard};
use crate::server::voice_catalog;
use serde_json::{json, Value};

/// The data of the `info` event (the `wyoming` package's `Info`, `TtsProgram`, `TtsVoice`).
pub fn info(tts: Option<(&ModelCard, &str)>) -> Value {
    let programs: Vec<Value> = tts
        .map(|(model, id)| tts_program(model, id))
        .into_iter()
        .collect();
    json!({
        "asr": [], "handle": [], "intent": [], "wake": [], "mic": [], "snd": [],
        "tts": programs,
    })
}

/// The `tts` program of the speech model `model_id`, with its preset voices.
fn tts_program(model: &ModelCard, model_id: &str) -> Value {
    let attribution = json!({
        "name": model.owned_by,
        "url": model.homepage,
    });
    let voices: Vec<Value> = model
        .voices
        .iter()
        .map(|v| {
            let description = match (v.language_name, v.gender) {
                (Some(language), Some(gender)) => format!("{} ({language}, {gender})", v.name),
                _ => v.name.clone(),
            };
            json!({
                "name": v.name,
                "attribution": attribution,
                "installed": true,
                "description": description,
                "version": null,
                "languages": v.language.into_iter().collect::<Vec<_>>(),
                "speakers": null,
            })
        })
        .collect();
    json!({
        "name": model.family,
        "attribution": attribution,
        "installed": true,
        "description": format!("{} text to speech ({model_id})", model.family),
        "version": env!("CARGO_PKG_VERSION"),
        "voices": voices,
        "supports_synthesize_streaming": true,
    })
}

/// The first preset speaking `language` (`fr`, or `fr-FR`), else the preset OpenAI's default
/// voice (`alloy`) selects, else the first preset.
pub fn default_voice<'a>(model: &'a ModelCard, language: Option<&str>) -> Option<&'a str> {
    let wanted = language.map(primary_language);
    let in_language = wanted.and_then(|code| {
        model
            .voices
            .iter()
            .find(|v| v.language.is_some_and(|l| l.eq_ignore_ascii_case(code)))
            .map(|v| v.name.as_str())
    });
    in_language
        .or_else(|| voice_catalog::resolve("alloy", model))
        .or_else(|| model.voices.first().map(|v| v.name.as_str()))
}

#[cfg(all(test, feature = "testkit"))]
mod tests {
    use super::*;
    use crate::models::voxtral_tts::catalog::example_card;
    use crate::models::voxtral_tts::testkit::PRESET_VOICES;

    #[test]
    fn every_preset_is_a_voice_with_its_language() {
        let model = example_card(&["fr_male", "robot"]);
        let info = info(Some((&model, "voxtral")));
        let tts = &info["tts"][0];
        assert_eq!(tts["supports_synthesize_streaming"], true);
        assert_eq!(tts["voices"][0]["languages"], json!(["fr"]));
        assert_eq!(tts["voices"][0]["description"], "fr_male (French, male)");
        assert_eq!(tts["voices"][1]["languages"], json!([]));
        // A server that only transcribes: no program.
        assert_eq!(super::info(None)["tts"], json!([]));
    }

    #[test]
    fn default_voices() {
        let all = example_card(&PRESET_VOICES);
        assert_eq!(default_voice(&all, None), Some("neutral_female"));
        assert_eq!(default_voice(&all, Some("de-DE")), Some("de_male"));
        assert_eq!(default_voice(&all, Some("ja")), Some("neutral_female"));
        let french = example_card(&["fr_male"]);
        assert_eq!(default_voice(&french, Some("en")), Some("fr_male"));
        assert_eq!(default_voice(&example_card(&[]), None), None);
    }
}
