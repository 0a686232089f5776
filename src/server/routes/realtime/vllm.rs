//! vLLM's realtime transcription events (vllm-project/vllm,
//! `vllm/entrypoints/openai/realtime/connection.py` and `protocol.py`, and its docs' "Realtime
//! API"): `session.update` with the `model` at the top level, `input_audio_buffer.commit` to
//! start an utterance, `input_audio_buffer.append` (base64 PCM16 at 16 kHz mono) and
//! `input_audio_buffer.commit` with `final: true` to end it. The server answers
//! `transcription.delta` (`delta`), `transcription.done` (`text`, `usage`) and `error`
//! (`error`: the message, with a `code`).

use super::events::{pcm16, ClientEvent, EventError};
use serde_json::{json, Value};

/// vLLM takes PCM16 at the model's own rate.
pub const INPUT_RATE: u32 = 16_000;

/// Reads a client event of vLLM's.
pub fn parse(event: Value) -> Result<ClientEvent, EventError> {
    let kind = match event.get("type") {
        Some(Value::String(kind)) => kind.as_str(),
        _ => {
            return Err(EventError::new(
                "invalid_event",
                "type",
                "Unknown event type: None",
            ))
        }
    };
    match kind {
        "session.update" => Ok(ClientEvent::Settings {
            model: text(&event, "model")?,
            language: text(&event, "language")?,
            prompt: text(&event, "prompt")?,
        }),
        "input_audio_buffer.append" => {
            let samples = match event.get("audio") {
                Some(Value::String(audio)) => pcm16(audio)?,
                _ => Vec::new(),
            };
            if samples.is_empty() {
                return Err(EventError::new(
                    "invalid_audio",
                    "audio",
                    "Invalid audio data: \"audio\" is base64 PCM16 at 16 kHz, and not empty",
                ));
            }
            Ok(ClientEvent::Append(samples))
        }
        "input_audio_buffer.commit" => match event.get("final") {
            Some(Value::Bool(true)) => Ok(ClientEvent::Commit),
            None | Some(Value::Null | Value::Bool(false)) => Ok(ClientEvent::Start),
            Some(other) => Err(EventError::invalid(
                "final",
                format!("final {other}: true or false"),
            )),
        },
        other => Err(EventError::new(
            "unknown_event",
            "type",
            format!(
                "Unknown event type: {other} (vLLM's realtime transcription takes \
                 session.update, input_audio_buffer.append and input_audio_buffer.commit)"
            ),
        )),
    }
}

fn text(event: &Value, key: &str) -> Result<Option<String>, EventError> {
    match event.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(s)) => Ok(Some(s.clone())),
        Some(_) => Err(EventError::invalid(key, format!("{key} must be a string"))),
    }
}

/// A server event in OpenAI's shape as vLLM's, if vLLM has one: the transcription's deltas,
/// its end and its failure. (vLLM says nothing of commits, items or settings.)
pub fn translate(body: &Value) -> Option<Value> {
    let kind = body.get("type").and_then(Value::as_str)?;
    let kind = kind.strip_prefix("conversation.item.input_audio_transcription.")?;
    match kind {
        "delta" => Some(json!({"type": "transcription.delta", "delta": body["delta"]})),
        // The worker counts no tokens: vLLM's `usage` may be null.
        "completed" => Some(
            json!({"type": "transcription.done", "text": body["transcript"],
                                   "usage": null}),
        ),
        "failed" => Some(json!({"type": "error", "error": body["error"]["message"],
                                "code": "processing_error"})),
        _ => None,
    }
}

/// vLLM's `error` event: the message, and the code beside it.
pub fn error(e: &EventError) -> Value {
    json!({"type": "error", "error": e.message, "code": e.code})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commits_start_and_end_utterances() {
        let parse = |event: Value| parse(event).map_err(|e| e.code);
        assert!(matches!(
            parse(json!({"type": "input_audio_buffer.commit"})),
            Ok(ClientEvent::Start)
        ));
        assert!(matches!(
            parse(json!({"type": "input_audio_buffer.commit", "final": false})),
            Ok(ClientEvent::Start)
        ));
        assert!(matches!(
            parse(json!({"type": "input_audio_buffer.commit", "final": true})),
            Ok(ClientEvent::Commit)
        ));
        assert_eq!(
            parse(json!({"type": "input_audio_buffer.commit", "final": "yes"})).err(),
            Some("invalid_value")
        );
        assert_eq!(
            parse(json!({"type": "input_audio_buffer.append", "audio": ""})).err(),
            Some("invalid_audio")
        );
        assert_eq!(
            parse(json!({"type": "input_audio_buffer.clear"})).err(),
            Some("unknown_event")
        );
        match parse(json!({"type": "session.update", "model": "m", "language": "en"})) {
            Ok(ClientEvent::Settings {
                model, language, ..
            }) => assert_eq!((model, language), (Some("m".into()), Some("en".into()))),
            _ => panic!("not settings"),
        }
        assert_eq!(
            parse(json!({"type": "session.update", "model": 5})).err(),
            Some("invalid_value")
        );
    }

    #[test]
    fn only_the_transcription_s_events_are_sent() {
        const PREFIX: &str = "conversation.item.input_audio_transcription";
        let delta = json!({"type": format!("{PREFIX}.delta"), "item_id": "i", "delta": "Hi"});
        assert_eq!(
            translate(&delta),
            Some(json!({"type": "transcription.delta", "delta": "Hi"}))
        );
        let done = json!({"type": format!("{PREFIX}.completed"), "transcript": "Hi there"});
        assert_eq!(translate(&done).unwrap()["text"], "Hi there");
        let failed = json!({"type": format!("{PREFIX}.failed"), "error": {"message": "long"}});
        assert_eq!(
            translate(&failed),
            Some(json!({"type": "error", "error": "long", "code": "processing_error"}))
        );
        assert_eq!(
            translate(&json!({"type": "input_audio_buffer.committed"})),
            None
        );
        assert_eq!(translate(&json!({"type": "session.updated"})), None);
    }
}
