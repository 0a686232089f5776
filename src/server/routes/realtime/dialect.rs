//! The two dialects of `/v1/realtime`, told apart by the client's first messages: OpenAI's
//! Realtime transcription session (the default) and vLLM's realtime transcription
//! (`vllm.rs`). The connection works in OpenAI's events; vLLM's are read into them and
//! written from them.

use super::events::{self, ClientEvent, EventError, ServerEvents};
use super::{session, vllm};
use serde_json::Value;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dialect {
    OpenAi,
    Vllm,
}

impl Dialect {
    /// The dialect a client event shows, if it shows one: vLLM's `session.update` names the
    /// `model` at the top level (OpenAI's has a `session` object), and its commits may carry
    /// `final`; OpenAI's other events show OpenAI's.
    pub fn detect(event: &Value) -> Option<Dialect> {
        let kind = event.get("type").and_then(Value::as_str)?;
        let has = |key: &str| event.get(key).is_some();
        match kind {
            "session.update" if has("model") && !has("session") => Some(Dialect::Vllm),
            "input_audio_buffer.commit" if has("final") => Some(Dialect::Vllm),
            "session.update"
            | "transcription_session.update"
            | "input_audio_buffer.append"
            | "input_audio_buffer.commit"
            | "input_audio_buffer.clear" => Some(Dialect::OpenAi),
            _ => None,
        }
    }

    /// The rate of the PCM16 the client appends.
    pub fn input_rate(self) -> u32 {
        match self {
            Dialect::OpenAi => session::INPUT_RATE,
            Dialect::Vllm => vllm::INPUT_RATE,
        }
    }

    pub fn parse(self, event: Value) -> Result<ClientEvent, EventError> {
        match self {
            Dialect::OpenAi => events::parse_value(event),
            Dialect::Vllm => vllm::parse(event),
        }
    }

    /// A server event (in OpenAI's shape) as this dialect sends it; `None` when it has none.
    pub fn write(self, events: &mut ServerEvents, body: Value) -> Option<String> {
        match self {
            Dialect::OpenAi => Some(events.event(body)),
            Dialect::Vllm => vllm::translate(&body).map(|event| event.to_string()),
        }
    }

    /// An `error` event; `kind` is OpenAI's error type.
    pub fn error(self, events: &mut ServerEvents, kind: &str, e: &EventError) -> String {
        match self {
            Dialect::OpenAi => events.error(kind, e),
            Dialect::Vllm => vllm::error(e).to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn the_first_telling_event_chooses_the_dialect() {
        let detect = |event: Value| Dialect::detect(&event);
        let vllm = Some(Dialect::Vllm);
        let openai = Some(Dialect::OpenAi);
        assert_eq!(
            detect(json!({"type": "session.update", "model": "m"})),
            vllm
        );
        assert_eq!(
            detect(json!({"type": "input_audio_buffer.commit", "final": true})),
            vllm
        );
        assert_eq!(
            detect(json!({"type": "input_audio_buffer.commit", "final": false})),
            vllm
        );
        assert_eq!(
            detect(json!({"type": "session.update", "session": {"type": "transcription"}})),
            openai
        );
        // Neither a model nor a session: OpenAI's, which asks for the session.
        assert_eq!(detect(json!({"type": "session.update"})), openai);
        assert_eq!(detect(json!({"type": "input_audio_buffer.commit"})), openai);
        assert_eq!(
            detect(json!({"type": "input_audio_buffer.append", "audio": ""})),
            openai
        );
        assert_eq!(detect(json!({"type": "response.create"})), None);
        assert_eq!(detect(json!({"no": "type"})), None);
    }
}
