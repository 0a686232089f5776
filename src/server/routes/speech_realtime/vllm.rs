//! vLLM-Omni's streaming speech messages (vllm-project/vllm-omni,
//! `vllm_omni/entrypoints/openai/serving_speech_stream.py`, whose docstring lists them, and
//! `StreamingSpeechSessionConfig` in `vllm_omni/entrypoints/openai/protocol/audio.py`).

use super::core::{Granularity, Output, Voice};
use super::{invalid_message, Command, Dialect};
use crate::audio::AudioFormat;
use crate::server::error::ApiError;
use axum::extract::ws::Message;
use serde_json::{json, Value};

#[derive(Default)]
pub struct Vllm {
    format: Option<AudioFormat>,
    sample_rate: u32,
    /// Utterances (flushes) ended so far.
    utterance: usize,
    /// Pieces of this utterance announced, and bytes since the last `audio.start`.
    sentences: usize,
    bytes: usize,
}

fn text(event: Value) -> Message {
    Message::Text(event.to_string().into())
}

impl Dialect for Vllm {
    fn opened(&mut self, _core: &super::core::Core) -> Vec<Message> {
        Vec::new()
    }

    fn default_settings(&self) -> Option<(Value, Granularity)> {
        None
    }

    fn parse(&mut self, message: &str) -> Result<Command, ApiError> {
        let event: Value =
            serde_json::from_str(message).map_err(|_| invalid_message("Invalid JSON message"))?;
        if !event.is_object() {
            return Err(invalid_message("WebSocket messages must be JSON objects"));
        }
        match event.get("type").and_then(Value::as_str) {
            Some("session.config") => {
                let field = |name: &str| event.get(name).cloned().unwrap_or(Value::Null);
                let voice = match field("voice") {
                    Value::Null => field("speaker"),
                    voice => voice,
                };
                let format = match field("response_format") {
                    Value::Null => json!("wav"),
                    format => format,
                };
                let granularity =
                    match event.get("split_granularity") {
                        None | Some(Value::Null) => Granularity::Whole,
                        Some(Value::String(name)) => Granularity::parse(name).ok_or_else(|| {
                            ApiError::invalid(
                            "split_granularity",
                            "Invalid session config: split_granularity is none, sentence or clause",
                        )
                        })?,
                        Some(_) => return Err(ApiError::invalid(
                            "split_granularity",
                            "Invalid session config: split_granularity is none, sentence or clause",
                        )),
                    };
                let body = json!({"model": field("model"), "voice": voice,
                    "response_format": format, "speed": field("speed"),
                    "language": field("language"), "instructions": field("instructions"),
                    "seed": field("seed"), "max_frames": field("max_new_tokens")});
                Ok(Command::Configure(body, granularity))
            }
            Some("input.text") => match event.get("text") {
                Some(Value::String(delta)) => Ok(Command::Append(delta.clone())),
                None => Ok(Command::Append(String::new())),
                Some(_) => Err(ApiError::invalid(
                    "text",
                    "input.text requires a string value",
                )),
            },
            Some("input.done") => Ok(Command::Flush),
            Some("session.close") => Ok(Command::Close),
            Some(other) => Err(invalid_message(format!("Unknown message type: {other}"))),
            None => Err(invalid_message("Unknown message type: None")),
        }
    }

    fn configured(&mut self, voice: &Voice) -> Vec<Message> {
        self.format = Some(voice.format());
        self.sample_rate = voice.sample_rate();
        Vec::new()
    }

    fn needs_settings_first(&self) -> bool {
        true
    }

    fn render(&mut self, output: Output) -> Vec<Message> {
        let format = self.format.map(|f| f.to_string());
        match output {
            Output::PieceStarted {
                index,
                text: sentence,
            } => {
                self.sentences = index + 1;
                self.bytes = 0;
                let mut start = json!({"type": "audio.start", "utterance_index": self.utterance,
                    "sentence_index": index, "sentence_text": sentence, "format": format});
                if self.format.is_some_and(AudioFormat::is_raw) {
                    start["sample_rate"] = json!(self.sample_rate);
                    start["channels"] = json!(1);
                }
                vec![text(start)]
            }
            Output::Audio(bytes) => {
                self.bytes += bytes.len();
                vec![Message::Binary(bytes.into())]
            }
            Output::PieceDone {
                index, start, end, ..
            } => vec![text(
                json!({"type": "audio.done", "utterance_index": self.utterance,
                "sentence_index": index, "total_bytes": self.bytes, "error": false,
                "start_sample": start, "end_sample": end}),
            )],
            Output::PieceFailed { index, error } => vec![
                self.error(&error),
                text(
                    json!({"type": "audio.done", "utterance_index": self.utterance,
                    "sentence_index": index, "total_bytes": 0, "error": true}),
                ),
            ],
            Output::Done(usage) => {
                let done = json!({"type": "session.done", "utterance_index": self.utterance,
                    "total_sentences": self.sentences.max(usage.pieces)});
                self.utterance += 1;
                self.sentences = 0;
                vec![text(done)]
            }
        }
    }

    /// vLLM-Omni's `{"type": "error", "message"}`, with this server's `code` beside it.
    fn error(&mut self, error: &ApiError) -> Message {
        text(json!({"type": "error", "message": error.message, "code": error.code}))
    }
}
