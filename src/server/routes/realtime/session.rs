//! A transcription session's settings, as `session.update` (GA, `session.type:
//! "transcription"`) and the beta `transcription_session.update` set them, and the session
//! objects the server sends back in each shape (openai SDK types, docs/voxtral-realtime-spec.md
//! in the shared docs, section B).
//!
//! What the model has no use for is accepted and not applied: the language and prompt (the
//! Voxtral Realtime prompt has no slot for them), `delay` (the model's delay comes from its
//! tekken.json), noise reduction, `include` (no log probabilities are computed). What would
//! change the audio is refused: formats other than PCM16 at 24 kHz. Turns are the client's
//! commits (`turn_detection: null`, the default) or `server_vad`'s (an energy detector,
//! `audio::vad`); `semantic_vad` is refused.

use super::events::EventError;
use crate::audio::vad::{VadSettings, MAX_DURATION_MS};
use serde_json::{json, Map, Value};

/// The only input rate: OpenAI's PCM16 format is 24 kHz mono.
pub const INPUT_RATE: u32 = 24_000;

#[derive(Clone, Debug)]
pub struct SessionConfig {
    /// The served speech-to-text model's id.
    pub model: String,
    pub language: Option<String>,
    pub prompt: String,
    /// `server_vad`'s settings; `None`: the client commits.
    pub turn_detection: Option<VadSettings>,
}

impl SessionConfig {
    pub fn new(model: &str) -> Self {
        SessionConfig {
            model: model.to_string(),
            language: None,
            prompt: String::new(),
            turn_detection: None,
        }
    }

    /// The session object of GA events (`session.created`, `session.updated`).
    pub fn ga(&self) -> Value {
        json!({
            "type": "transcription",
            "audio": {"input": {
                "format": {"type": "audio/pcm", "rate": INPUT_RATE},
                "transcription": self.transcription(),
                "turn_detection": self.turn_detection_object(),
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
            "turn_detection": self.turn_detection_object(),
            "input_audio_noise_reduction": null,
            "include": [],
        })
    }

    fn turn_detection_object(&self) -> Value {
        match self.turn_detection {
            None => Value::Null,
            Some(vad) => json!({"type": "server_vad", "threshold": vad.threshold,
                "prefix_padding_ms": vad.prefix_padding_ms,
                "silence_duration_ms": vad.silence_duration_ms}),
        }
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
        if let Some(turns) = turn_detection(input.get("turn_detection"), "session.audio.input")? {
            next.turn_detection = turns;
        }
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
        if let Some(turns) = turn_detection(session.get("turn_detection"), "session")? {
            next.turn_detection = turns;
        }
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

/// A `turn_detection` value: `None` when left out (unchanged), `Some(None)` for `null` (the
/// client commits), `Some(Some(settings))` for `server_vad` (OpenAI's defaults for the fields
/// left out; `create_response` and `interrupt_response` concern responses, which a
/// transcription session does not make, and are ignored).
fn turn_detection(
    value: Option<&Value>,
    parent: &str,
) -> Result<Option<Option<VadSettings>>, EventError> {
    let param = format!("{parent}.turn_detection");
    let value = match value {
        None => return Ok(None),
        Some(Value::Null) => return Ok(Some(None)),
        Some(value) => object(value, &param)?,
    };
    match value.get("type").and_then(Value::as_str) {
        Some("server_vad") | None => {}
        Some(other) => {
            return Err(EventError::invalid(
                format!("{param}.type"),
                format!(
                    "turn detection {other:?} is not supported: use \"server_vad\" (an energy \
                     detector) or null (the client commits)"
                ),
            ))
        }
    }
    if value.get("idle_timeout_ms").is_some_and(|v| !v.is_null()) {
        return Err(EventError::invalid(
            format!("{param}.idle_timeout_ms"),
            "idle_timeout_ms is not supported: a transcription session makes no responses",
        ));
    }
    let mut vad = VadSettings::default();
    if let Some(t) = value.get("threshold").filter(|v| !v.is_null()) {
        vad.threshold = t
            .as_f64()
            .filter(|t| (0.0..=1.0).contains(t))
            .ok_or_else(|| {
                EventError::invalid(
                    format!("{param}.threshold"),
                    format!("threshold {t}: a number from 0 to 1"),
                )
            })? as f32;
    }
    let duration = |key: &str, default: u32| -> Result<u32, EventError> {
        match value.get(key) {
            None | Some(Value::Null) => Ok(default),
            Some(v) => v
                .as_u64()
                .filter(|&ms| ms <= u64::from(MAX_DURATION_MS))
                .map(|ms| ms as u32)
                .ok_or_else(|| {
                    EventError::invalid(
                        format!("{param}.{key}"),
                        format!("{key} {v}: whole milliseconds from 0 to {MAX_DURATION_MS}"),
                    )
                }),
        }
    };
    vad.prefix_padding_ms = duration("prefix_padding_ms", vad.prefix_padding_ms)?;
    vad.silence_duration_ms = duration("silence_duration_ms", vad.silence_duration_ms)?;
    Ok(Some(Some(vad)))
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
                json!({"type": "transcription", "audio": {"input": {"turn_detection": {"type": "semantic_vad"}}}})
            ),
            "session.audio.input.turn_detection.type"
        );
        assert_eq!(
            param(
                json!({"type": "transcription", "audio": {"input": {"transcription": {"model": "whisper-1"}}}})
            ),
            "session.audio.input.transcription.model"
        );
    }

    #[test]
    fn server_vad_takes_openai_s_fields_and_defaults_and_null_turns_it_off() {
        let ga = |turns: Value| json!({"type": "transcription", "audio": {"input": {"turn_detection": turns}}});
        let base = SessionConfig::new("stt");
        let on = base
            .updated_ga(
                &ga(json!({"type": "server_vad", "create_response": true})),
                "stt",
            )
            .unwrap();
        assert_eq!(on.turn_detection, Some(VadSettings::default()));
        assert_eq!(
            on.ga()["audio"]["input"]["turn_detection"],
            json!({"type": "server_vad", "threshold": 0.5, "prefix_padding_ms": 300,
                   "silence_duration_ms": 500})
        );
        let tuned = json!({"type": "server_vad", "threshold": 0.25, "prefix_padding_ms": 100,
                           "silence_duration_ms": 800});
        let tuned = base
            .updated_beta(&json!({"turn_detection": tuned}), "stt")
            .unwrap();
        assert_eq!(
            tuned.turn_detection,
            Some(VadSettings {
                threshold: 0.25,
                prefix_padding_ms: 100,
                silence_duration_ms: 800
            })
        );
        assert_eq!(tuned.beta()["turn_detection"]["silence_duration_ms"], 800);
        let kept = tuned
            .updated_beta(&json!({"input_audio_format": "pcm16"}), "stt")
            .unwrap();
        assert_eq!(
            kept.turn_detection, tuned.turn_detection,
            "left out: unchanged"
        );
        let off = on.updated_ga(&ga(Value::Null), "stt").unwrap();
        assert_eq!(off.turn_detection, None);
        assert_eq!(off.ga()["audio"]["input"]["turn_detection"], Value::Null);

        let param = |turns: Value| base.updated_ga(&ga(turns), "stt").unwrap_err().param;
        let at = |field: &str| format!("session.audio.input.turn_detection.{field}");
        assert_eq!(
            param(json!({"type": "server_vad", "threshold": 1.5})),
            at("threshold")
        );
        assert_eq!(
            param(json!({"type": "server_vad", "silence_duration_ms": -1})),
            at("silence_duration_ms")
        );
        assert_eq!(
            param(json!({"type": "server_vad", "prefix_padding_ms": 60000})),
            at("prefix_padding_ms")
        );
        assert_eq!(
            param(json!({"type": "server_vad", "idle_timeout_ms": 5000})),
            at("idle_timeout_ms")
        );
        assert_eq!(
            param(json!("server_vad")),
            "session.audio.input.turn_detection"
        );
    }

    #[test]
    fn beta_updates_take_pcm16_and_refuse_semantic_vad() {
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
            param(json!({"turn_detection": {"type": "semantic_vad"}})),
            "session.turn_detection.type"
        );
    }
}
