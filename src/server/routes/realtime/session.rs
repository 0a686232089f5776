//! A transcription session's settings, as `session.update` (GA, `session.type:
//! "transcription"`) and the beta `transcription_session.update` set them, and the session
//! objects the server sends back in each shape (openai SDK types, docs/voxtral-realtime-spec.md
//! in the shared docs, section B).
//!
//! What the model has no use for is accepted and not applied: the language and prompt (the
//! Voxtral Realtime prompt has no slot for them), `delay` (the model's delay comes from its
//! tekken.json), noise reduction, `include` (no log probabilities are computed). What would
//! change the audio or the turns is refused: formats other than PCM16 at 24 kHz, and turn
//! detection (no voice activity detection: the client commits, `turn_detection: null`).

use super::events::EventError;
use serde_json::{json, Map, Value};

/// The only input rate: OpenAI's PCM16 format is 24 kHz mono.
pub const INPUT_RATE: u32 = 24_000;

#[derive(Clone, Debug)]
pub struct SessionConfig {
    /// The served speech-to-text model's id.
    pub model: String,
    pub language: Option<String>,
    pub prompt: String,
}

impl SessionConfig {
    pub fn new(model: &str) -> Self {
        SessionConfig {
            model: model.to_string(),
            language: None,
            prompt: String::new(),
        }
    }

    /// The session object of GA events (`session.created`, `session.updated`).
    pub fn ga(&self) -> Value {
        json!({
            "type": "transcription",
            "audio": {"input": {
                "format": {"type": "audio/pcm", "rate": INPUT_RATE},
                "transcription": self.transcription(),
                "turn_detection": null,
                "noise_reduction": null,
            }},
            "include": [],
        })
    }

    /// The session object of beta events (`transcription_session.updated`).
    pub fn beta(&self) -> Value {
        json!({
            "object": "realtime.transcription_session",
            "modalities": ["text"],
            "input_audio_format": "pcm16",
            "input_audio_transcription": self.transcription(),
            "turn_detection": null,
            "input_audio_noise_reduction": null,
            "include": [],
        })
    }

    fn transcription(&self) -> Value {
        json!({"model": self.model, "language": self.language, "prompt": self.prompt})
    }

    /// A GA `session` object applied to this configuration: the new one, or what is wrong.
    pub fn updated_ga(&self, session: &Value, served: &str) -> Result<Self, EventError> {
        let session = object(session, "session")?;
        match session.get("type").and_then(Value::as_str) {
            Some("transcription") => {}
            Some(other) => {
                return Err(EventError::invalid(
                    "session.type",
                    format!(
                        "session.type {other:?}: this endpoint serves transcription sessions \
                         only (session.type \"transcription\")"
                    ),
                ))
            }
            None => {
                return Err(EventError::invalid(
                    "session.type",
                    "session.type is required: \"transcription\"",
                ))
            }
        }
        let mut next = self.clone();
        let input = match session.get("audio") {
            None | Some(Value::Null) => return Ok(next),
            Some(audio) => match object(audio, "session.audio")?.get("input") {
                None | Some(Value::Null) => return Ok(next),
                Some(input) => object(input, "session.audio.input")?,
            },
        };
        if let Some(format) = input.get("format").filter(|f| !f.is_null()) {
            check_ga_format(object(format, "session.audio.input.format")?)?;
        }
        check_no_turn_detection(input.get("turn_detection"), "session.audio.input")?;
        if let Some(t) = input.get("transcription").filter(|t| !t.is_null()) {
            next.apply_transcription(t, "session.audio.input.transcription", served)?;
        }
        Ok(next)
    }

    /// A beta `session` object applied to this configuration.
    pub fn updated_beta(&self, session: &Value, served: &str) -> Result<Self, EventError> {
        let session = object(session, "session")?;
        let mut next = self.clone();
        match session.get("input_audio_format") {
            None | Some(Value::Null) => {}
            Some(Value::String(f)) if f == "pcm16" => {}
            Some(other) => {
                return Err(EventError::invalid(
                    "session.input_audio_format",
                    format!(
                        "input_audio_format {other}: only \"pcm16\" (24 kHz mono) is supported"
                    ),
                ))
            }
        }
        check_no_turn_detection(session.get("turn_detection"), "session")?;
        if let Some(t) = session
            .get("input_audio_transcription")
            .filter(|t| !t.is_null())
        {
            next.apply_transcription(t, "session.input_audio_transcription", served)?;
        }
        Ok(next)
    }

    fn apply_transcription(
        &mut self,
        transcription: &Value,
        param: &str,
        served: &str,
    ) -> Result<(), EventError> {
        let t = object(transcription, param)?;
        if let Some(model) = t.get("model").filter(|m| !m.is_null()) {
            match model.as_str() {
                Some(m) if m == served => {}
                _ => {
                    return Err(EventError::new(
                        "model_not_found",
                        format!("{param}.model"),
                        format!(
                            "The model {model} is not transcribed by this session: it was \
                             opened on {served:?} (choose the model with ?model= on the URL)"
                        ),
                    ))
                }
            }
        }
        let text = |key: &str| -> Result<Option<String>, EventError> {
            match t.get(key) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::String(s)) => Ok(Some(s.clone())),
                Some(_) => Err(EventError::invalid(
                    format!("{param}.{key}"),
                    format!("{param}.{key} must be a string"),
                )),
            }
        };
        let (language, prompt) = (text("language")?, text("prompt")?);
        if language.is_some() {
            self.language = language;
        }
        if let Some(prompt) = prompt {
            self.prompt = prompt;
        }
        Ok(())
    }
}

fn object<'a>(value: &'a Value, param: &str) -> Result<&'a Map<String, Value>, EventError> {
    value
        .as_object()
        .ok_or_else(|| EventError::invalid(param, format!("{param} must be an object")))
}

fn check_ga_format(format: &Map<String, Value>) -> Result<(), EventError> {
    let param = "session.audio.input.format";
    match format.get("type").and_then(Value::as_str) {
        Some("audio/pcm") | None => {}
        Some(other) => {
            return Err(EventError::invalid(
                format!("{param}.type"),
                format!(
                    "audio format {other:?}: only \"audio/pcm\" (PCM16, 24 kHz mono) is supported"
                ),
            ))
        }
    }
    match format.get("rate") {
        None | Some(Value::Null) => Ok(()),
        Some(rate) if rate.as_u64() == Some(u64::from(INPUT_RATE)) => Ok(()),
        Some(rate) => Err(EventError::invalid(
            format!("{param}.rate"),
            format!("rate {rate}: audio/pcm is 24000 Hz"),
        )),
    }
}

/// Only `null` (or leaving it out): the client commits each item.
fn check_no_turn_detection(value: Option<&Value>, parent: &str) -> Result<(), EventError> {
    match value {
        None | Some(Value::Null) => Ok(()),
        Some(_) => Err(EventError::invalid(
            format!("{parent}.turn_detection"),
            "turn detection (voice activity detection) is not supported: set turn_detection \
             to null and send input_audio_buffer.commit at the end of each utterance (text \
             comes out while the audio streams in)",
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ga_updates_check_the_type_format_turns_and_model() {
        let base = SessionConfig::new("stt");
        let ok = json!({"type": "transcription", "audio": {"input": {
            "format": {"type": "audio/pcm", "rate": 24000},
            "transcription": {"model": "stt", "language": "fr", "prompt": "p"},
            "turn_detection": null}}});
        let next = base.updated_ga(&ok, "stt").unwrap();
        assert_eq!(next.language.as_deref(), Some("fr"));
        assert_eq!(next.ga()["audio"]["input"]["transcription"]["prompt"], "p");
        let param = |session: Value| base.updated_ga(&session, "stt").unwrap_err().param;
        assert_eq!(param(json!({"type": "realtime"})), "session.type");
        assert_eq!(param(json!({})), "session.type");
        assert_eq!(
            param(
                json!({"type": "transcription", "audio": {"input": {"format": {"type": "audio/pcmu"}}}})
            ),
            "session.audio.input.format.type"
        );
        assert_eq!(
            param(
                json!({"type": "transcription", "audio": {"input": {"format": {"type": "audio/pcm", "rate": 16000}}}})
            ),
            "session.audio.input.format.rate"
        );
        assert_eq!(
            param(
                json!({"type": "transcription", "audio": {"input": {"turn_detection": {"type": "server_vad"}}}})
            ),
            "session.audio.input.turn_detection"
        );
        assert_eq!(
            param(
                json!({"type": "transcription", "audio": {"input": {"transcription": {"model": "whisper-1"}}}})
            ),
            "session.audio.input.transcription.model"
        );
    }

    #[test]
    fn beta_updates_take_pcm16_and_no_turn_detection() {
        let base = SessionConfig::new("stt");
        let next = base
            .updated_beta(
                &json!({"input_audio_format": "pcm16", "turn_detection": null,
                        "input_audio_transcription": {"model": "stt", "language": "en"}}),
                "stt",
            )
            .unwrap();
        assert_eq!(next.beta()["input_audio_transcription"]["language"], "en");
        let param = |session: Value| base.updated_beta(&session, "stt").unwrap_err().param;
        assert_eq!(
            param(json!({"input_audio_format": "g711_ulaw"})),
            "session.input_audio_format"
        );
        assert_eq!(
            param(json!({"turn_detection": {"type": "server_vad"}})),
            "session.turn_detection"
        );
    }
}
