//! The Realtime API's events in OpenAI's shapes (openai SDK 3.51 `types/realtime/*` and
//! `types/beta/realtime/*`): the client events this endpoint reads, and the server events it
//! writes, each with its own `event_id`. vLLM's dialect (`vllm.rs`) reads into the same
//! client events.

use base64::Engine as _;
use serde_json::{json, Value};

/// A client event this endpoint does something with.
#[derive(Debug)]
pub enum ClientEvent {
    /// GA `session.update`: the `session` object.
    SessionUpdate(Value),
    /// Beta `transcription_session.update`: the `session` object.
    BetaSessionUpdate(Value),
    /// vLLM's `session.update`: its settings at the top level.
    Settings {
        model: Option<String>,
        language: Option<String>,
        prompt: Option<String>,
    },
    /// `input_audio_buffer.append`: PCM16 little-endian samples.
    Append(Vec<i16>),
    /// vLLM's commit without `final`: an utterance starts.
    Start,
    Commit,
    Clear,
}

/// What is wrong with a client event: an `error` event's `error` object.
#[derive(Debug)]
pub struct EventError {
    pub code: &'static str,
    pub param: String,
    pub message: String,
    /// The client event's `event_id`, when it had one.
    pub event_id: Option<String>,
}

impl EventError {
    pub fn new(code: &'static str, param: impl Into<String>, message: impl Into<String>) -> Self {
        EventError {
            code,
            param: param.into(),
            message: message.into(),
            event_id: None,
        }
    }

    pub fn invalid(param: impl Into<String>, message: impl Into<String>) -> Self {
        Self::new("invalid_value", param, message)
    }
}

/// Reads one text message as JSON, with the client's `event_id` when it has one.
pub fn read(text: &str) -> Result<(Value, Option<String>), EventError> {
    let value: Value = serde_json::from_str(text).map_err(|e| {
        EventError::new(
            "invalid_json",
            "",
            format!("The event is not valid JSON: {e}"),
        )
    })?;
    let event_id = value
        .get("event_id")
        .and_then(Value::as_str)
        .map(str::to_string);
    Ok((value, event_id))
}

/// Reads an OpenAI client event.
pub fn parse_value(mut value: Value) -> Result<ClientEvent, EventError> {
    if !value.is_object() {
        return Err(EventError::new(
            "invalid_event",
            "",
            "An event is a JSON object with a \"type\"",
        ));
    }
    let kind = match value.get("type") {
        Some(Value::String(kind)) => kind.clone(),
        _ => {
            return Err(EventError::new(
                "invalid_event",
                "type",
                "The event has no \"type\" string",
            ))
        }
    };
    let session = |value: &mut Value| match value.get_mut("session").map(Value::take) {
        Some(session) if session.is_object() => Ok(session),
        _ => Err(EventError::new(
            "missing_required_parameter",
            "session",
            format!("{kind} needs a \"session\" object"),
        )),
    };
    Ok(match kind.as_str() {
        "session.update" => ClientEvent::SessionUpdate(session(&mut value)?),
        "transcription_session.update" => ClientEvent::BetaSessionUpdate(session(&mut value)?),
        "input_audio_buffer.append" => {
            let audio = value.get("audio").and_then(Value::as_str).ok_or_else(|| {
                EventError::new(
                    "missing_required_parameter",
                    "audio",
                    "input_audio_buffer.append needs \"audio\": base64 PCM16 at 24 kHz mono",
                )
            })?;
            ClientEvent::Append(pcm16(audio)?)
        }
        "input_audio_buffer.commit" => ClientEvent::Commit,
        "input_audio_buffer.clear" => ClientEvent::Clear,
        other => {
            return Err(EventError::new(
                "unknown_event",
                "type",
                format!(
                    "Unsupported event type {other:?}: a transcription session takes \
                     session.update, transcription_session.update and \
                     input_audio_buffer.append, .commit and .clear"
                ),
            ))
        }
    })
}

/// Base64 PCM16 little-endian samples.
pub fn pcm16(audio: &str) -> Result<Vec<i16>, EventError> {
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(audio)
        .map_err(|e| {
            EventError::new(
                "invalid_audio",
                "audio",
                format!("The audio is not valid base64: {e}"),
            )
        })?;
    if bytes.len() % 2 != 0 {
        return Err(EventError::new(
            "invalid_audio",
            "audio",
            format!(
                "The audio has {} bytes: PCM16 has two bytes per sample",
                bytes.len()
            ),
        ));
    }
    Ok(bytes
        .chunks_exact(2)
        .map(|b| i16::from_le_bytes([b[0], b[1]]))
        .collect())
}

/// Writes server events, numbering their `event_id`s.
#[derive(Default)]
pub struct ServerEvents {
    sent: u64,
}

impl ServerEvents {
    /// `body` (an object with its `type`) with a fresh `event_id`.
    pub fn event(&mut self, mut body: Value) -> String {
        self.sent += 1;
        body["event_id"] = json!(format!("event_{}", self.sent));
        body.to_string()
    }

    /// An `error` event; `kind` is OpenAI's error type.
    pub fn error(&mut self, kind: &str, e: &EventError) -> String {
        let param = (!e.param.is_empty()).then_some(e.param.as_str());
        self.event(json!({"type": "error", "error": {
            "type": kind, "code": e.code, "message": e.message, "param": param,
            "event_id": e.event_id,
        }}))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<(ClientEvent, Option<String>), EventError> {
        let (value, event_id) = read(text)?;
        match parse_value(value) {
            Ok(event) => Ok((event, event_id)),
            Err(e) => Err(EventError { event_id, ..e }),
        }
    }

    #[test]
    fn bad_events_name_what_is_wrong() {
        let code = |text: &str| parse(text).unwrap_err().code;
        assert_eq!(code("{not json"), "invalid_json");
        assert_eq!(code("[1]"), "invalid_event");
        assert_eq!(code(r#"{"type": 3}"#), "invalid_event");
        assert_eq!(code(r#"{"type": "response.create"}"#), "unknown_event");
        assert_eq!(
            code(r#"{"type": "session.update"}"#),
            "missing_required_parameter"
        );
        assert_eq!(
            code(r#"{"type": "input_audio_buffer.append"}"#),
            "missing_required_parameter"
        );
        assert_eq!(
            code(r#"{"type": "input_audio_buffer.append", "audio": "%%"}"#),
            "invalid_audio"
        );
        // Three bytes: not whole samples.
        assert_eq!(
            code(r#"{"type": "input_audio_buffer.append", "audio": "AAEC"}"#),
            "invalid_audio"
        );
        let e = parse(r#"{"type": "nope", "event_id": "mine"}"#).unwrap_err();
        assert_eq!(e.event_id.as_deref(), Some("mine"));
    }

    #[test]
    fn appended_audio_is_little_endian_pcm16() {
        // 0x0100 = 256, 0xFFFF = -1.
        match parse(r#"{"type": "input_audio_buffer.append", "audio": "AAH//w=="}"#).unwrap() {
            (ClientEvent::Append(samples), None) => assert_eq!(samples, vec![256, -1]),
            other => panic!("{other:?}"),
        }
    }
}
