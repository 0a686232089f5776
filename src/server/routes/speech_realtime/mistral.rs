//! Mistral's realtime speech messages (docs.mistral.ai, Studio > Audio > Text to speech >
//! "Speak in realtime"; event shapes from the `mistralai` Python SDK's models:
//! `speechstreamaudiodelta.py` (`audio_data`), `speechstreamdone.py` (`usage`), and the
//! realtime sessions' `session.created` / `session.updated` / `error` envelopes).

use super::core::{Granularity, Output, Voice};
use super::{invalid_message, Command, Dialect};
use crate::server::error::ApiError;
use axum::extract::ws::Message;
use base64::Engine as _;
use serde_json::{json, Map, Value};

/// Audio bytes per `speech.audio.delta` (even: a PCM sample never splits).
const DELTA_BYTES: usize = 16 * 1024;

/// The `session` fields a client may set, and the request field each one is.
const FIELDS: [(&str, &str); 9] = [
    ("voice_id", "voice"),
    ("voice", "voice"),
    ("response_format", "response_format"),
    ("seed", "seed"),
    ("max_frames", "max_frames"),
    ("language", "language"),
    ("instructions", "instructions"),
    ("temperature", "temperature"),
    ("speed", "speed"),
];

pub struct Mistral {
    model: String,
    /// The settings in force, as `session.update` gave them.
    settings: Map<String, Value>,
    /// Settings of an update not yet taken.
    pending: Option<Map<String, Value>>,
    granularity: Granularity,
    pending_granularity: Granularity,
}

impl Mistral {
    pub fn new(model: String) -> Self {
        Mistral {
            model,
            settings: Map::new(),
            pending: None,
            granularity: Granularity::Sentence,
            pending_granularity: Granularity::Sentence,
        }
    }

    fn body(&self, settings: &Map<String, Value>) -> Value {
        let mut body = json!({"model": self.model, "response_format": "pcm"});
        for (field, request_field) in FIELDS {
            if let Some(value) = settings.get(field).filter(|v| !v.is_null()) {
                body[request_field] = value.clone();
            }
        }
        body
    }

    fn session(&self, voice: &Voice, granularity: Granularity) -> Value {
        let speech = &voice.speech;
        json!({
            "model": voice.served.id,
            "voice_id": speech.voice,
            "response_format": speech.format.to_string(),
            "sample_rate": voice.sample_rate(),
            "split_granularity": match granularity {
                Granularity::Clause => "clause",
                _ => "sentence",
            },
            "seed": speech.seed,
            "max_frames": speech.max_frames,
            "speed": speech.speed,
        })
    }
}

fn text(event: Value) -> Message {
    Message::Text(event.to_string().into())
}

impl Dialect for Mistral {
    fn opened(&mut self, core: &super::core::Core) -> Vec<Message> {
        let session = core.voice().map(|v| self.session(v, self.granularity));
        vec![text(json!({"type": "session.created", "session": session}))]
    }

    fn default_settings(&self) -> Option<(Value, Granularity)> {
        Some((self.body(&self.settings), self.granularity))
    }

    fn parse(&mut self, message: &str) -> Result<Command, ApiError> {
        let event: Value = serde_json::from_str(message)
            .map_err(|e| invalid_message(format!("The message is not valid JSON: {e}")))?;
        let kind = event
            .get("type")
            .and_then(Value::as_str)
            .ok_or_else(|| invalid_message("A message is a JSON object with a \"type\" string."))?;
        match kind {
            "session.update" => {
                let Some(update) = event.get("session").and_then(Value::as_object) else {
                    return Err(ApiError::invalid("session", "`session` must be an object."));
                };
                let mut settings = self.settings.clone();
                for (key, value) in update {
                    settings.insert(key.clone(), value.clone());
                }
                let granularity = match settings.get("split_granularity") {
                    None | Some(Value::Null) => Granularity::Sentence,
                    Some(Value::String(name)) if name != "none" => Granularity::parse(name)
                        .ok_or_else(|| {
                            ApiError::invalid(
                                "split_granularity",
                                "`split_granularity` is sentence or clause.",
                            )
                        })?,
                    Some(_) => {
                        return Err(ApiError::invalid(
                            "split_granularity",
                            "`split_granularity` is sentence or clause.",
                        ))
                    }
                };
                let body = self.body(&settings);
                self.pending = Some(settings);
                self.pending_granularity = granularity;
                Ok(Command::Configure(body, granularity))
            }
            "input_text.append" => match event.get("text") {
                Some(Value::String(delta)) => Ok(Command::Append(delta.clone())),
                _ => Err(ApiError::invalid("text", "`text` must be a string.")),
            },
            "input_text.flush" => Ok(Command::Flush),
            "input_text.end" => Ok(Command::End),
            other => Err(invalid_message(format!("Unknown message type: {other:?}."))),
        }
    }

    fn configured(&mut self, voice: &Voice) -> Vec<Message> {
        if let Some(settings) = self.pending.take() {
            self.settings = settings;
            self.granularity = self.pending_granularity;
        }
        let session = self.session(voice, self.granularity);
        vec![text(json!({"type": "session.updated", "session": session}))]
    }

    fn needs_settings_first(&self) -> bool {
        false
    }

    fn render(&mut self, output: Output) -> Vec<Message> {
        let b64 = base64::engine::general_purpose::STANDARD;
        match output {
            Output::PieceStarted { .. } => Vec::new(),
            Output::Audio(bytes) => bytes
                .chunks(DELTA_BYTES)
                .map(|chunk| {
                    text(json!({"type": "speech.audio.delta", "audio_data": b64.encode(chunk)}))
                })
                .collect(),
            Output::PieceDone {
                index,
                text: spoken,
                start,
                end,
            } => vec![text(json!({"type": "speech.audio.segment", "index": index,
                "text": spoken, "start_sample": start, "end_sample": end}))],
            Output::PieceFailed { index, error } => {
                let mut event = error_event(&error);
                event["error"]["index"] = json!(index);
                vec![text(event)]
            }
            Output::Done(usage) => vec![text(json!({"type": "speech.audio.done", "usage": {
                "prompt_tokens": usage.prompt_tokens,
                "completion_tokens": usage.frames,
                "total_tokens": usage.prompt_tokens + usage.frames,
            }}))],
        }
    }

    fn error(&mut self, error: &ApiError) -> Message {
        self.pending = None;
        text(error_event(error))
    }
}

/// Mistral's `error` event: `message` and a numeric `code` (the HTTP status the same
/// failure has on `/v1/audio/speech`), with OpenAI's `type` and `param` and this server's
/// string `reason` beside them.
fn error_event(error: &ApiError) -> Value {
    json!({"type": "error", "error": {
        "message": error.message,
        "code": error.status.as_u16(),
        "type": error.kind(),
        "param": error.param,
        "reason": error.code,
    }})
}
