//! Mistral's realtime speech messages (docs.mistral.ai, Studio > Audio > Text to speech >
//! "Speak in realtime"; shapes as the `mistralai` Python SDK has them:
//! `extra/realtime/speech.py` (the client), the models `realtimespeechsession.py`,
//! `realtimespeechsessionupdatepayload.py`, `speechstreamaudiodelta.py` (`audio_data`),
//! `speechstreamdone.py` (`usage`) and `realtimespeecherror.py`).

use super::core::{Core, Granularity, Output, Voice};
use super::{invalid_message, Command, Dialect, MAX_MESSAGE_BYTES};
use crate::config::ServerConfig;
use crate::scheduler::LoadedModel;
use crate::server::error::ApiError;
use crate::server::routes::speech::mistral::{
    error_event, expressiveness_of, format_name, mistral_format_name, usage,
};
use axum::extract::ws::Message;
use base64::Engine as _;
use serde_json::{json, Map, Value};

/// Audio bytes per `speech.audio.delta` (even: a PCM sample never splits).
const DELTA_BYTES: usize = 16 * 1024;

/// The `session` fields passed on to the speech request, and the request field each one is.
const FIELDS: [(&str, &str); 11] = [
    ("voice_id", "voice"),
    ("voice", "voice"),
    ("ref_audio", "ref_audio"),
    ("expressiveness", "expressiveness"),
    ("response_format", "response_format"),
    ("seed", "seed"),
    ("max_frames", "max_frames"),
    ("language", "language"),
    ("instructions", "instructions"),
    ("temperature", "temperature"),
    ("speed", "speed"),
];

/// The connection's header that sets the session before any update: a `session` object, as
/// `session.update` has (Mistral's SDK sends no extension fields, but takes `http_headers`).
pub const SESSION_HEADER: &str = "x-voxtral-session";

/// The `session` fields the dialect reads itself.
const OWN_FIELDS: [&str; 2] = ["split_granularity", "streaming_mode"];

/// The largest message: a `session.update` may carry a reference clip (base64), as large as
/// a `/v1/audio/speech` body may be.
pub fn message_bytes(config: &ServerConfig) -> usize {
    MAX_MESSAGE_BYTES.max(config.max_body_bytes)
}

pub struct Mistral {
    /// The model of the connection URL.
    model: String,
    /// Its guidance scale, reported while no voice is set.
    expressiveness: f64,
    request_id: String,
    /// The settings in force, as `session.update` gave them.
    settings: Map<String, Value>,
    /// Settings of an update not yet taken.
    pending: Option<Map<String, Value>>,
    granularity: Granularity,
    pending_granularity: Granularity,
}

impl Mistral {
    pub fn new(model: String, loaded: &LoadedModel) -> Self {
        Mistral {
            model,
            expressiveness: expressiveness_of(loaded),
            request_id: format!("speech_{:032x}", rand::random::<u128>()),
            settings: Map::new(),
            pending: None,
            granularity: Granularity::Sentence,
            pending_granularity: Granularity::Sentence,
        }
    }

    /// Settings before any update, from the [`SESSION_HEADER`] of the connection.
    pub fn preset(&mut self, header: &[u8]) -> Result<(), ApiError> {
        let invalid = |message: String| ApiError::invalid(SESSION_HEADER, message);
        let settings: Value = serde_json::from_slice(header)
            .map_err(|e| invalid(format!("{SESSION_HEADER} is not JSON: {e}")))?;
        let Value::Object(settings) = settings else {
            return Err(invalid(format!("{SESSION_HEADER} must be a JSON object")));
        };
        self.settings = self.updated(&settings)?;
        self.granularity = granularity_of(&self.settings)?;
        Ok(())
    }

    fn body(&self, settings: &Map<String, Value>) -> Value {
        let mut body = json!({"model": self.model, "response_format": "pcm_f32le"});
        for (field, request_field) in FIELDS {
            if let Some(value) = settings.get(field).filter(|v| !v.is_null()) {
                body[request_field] = match (request_field, value) {
                    ("response_format", Value::String(name)) => json!(format_name(name)),
                    _ => value.clone(),
                };
            }
        }
        body
    }

    /// The session object (`RealtimeSpeechSession`), with this server's extensions
    /// `sample_rate`, `split_granularity`, `seed` and `max_frames` once a voice is set.
    fn session(&self, voice: Option<&Voice>) -> Value {
        let granularity = match self.granularity {
            Granularity::Clause => "clause",
            _ => "sentence",
        };
        let Some(voice) = voice else {
            return json!({
                "request_id": self.request_id,
                "model": self.model,
                "voice": null,
                "is_ref_audio": false,
                "streaming_mode": "responsive",
                "response_format": "pcm",
                "expressiveness": self.expressiveness,
                "split_granularity": granularity,
            });
        };
        let speech = &voice.speech;
        let reference = speech.reference.is_some();
        json!({
            "request_id": self.request_id,
            "model": voice.served.id,
            "voice": (!reference).then_some(&speech.voice),
            "is_ref_audio": reference,
            "streaming_mode": "responsive",
            "response_format": mistral_format_name(speech.format),
            "expressiveness": expressiveness_of(&voice.model),
            "sample_rate": voice.sample_rate(),
            "split_granularity": granularity,
            "seed": speech.seed,
            "max_frames": speech.max_frames,
            "speed": speech.speed,
        })
    }

    /// The settings after `update`: a voice replaces a reference clip and the other way round.
    fn updated(&self, update: &Map<String, Value>) -> Result<Map<String, Value>, ApiError> {
        let set = |key: &str| update.get(key).is_some_and(|v| !v.is_null());
        if (set("voice") || set("voice_id")) && set("ref_audio") {
            return Err(ApiError::invalid(
                "ref_audio",
                "`voice` and `ref_audio` are one or the other.",
            ));
        }
        let mut settings = self.settings.clone();
        if set("voice") || set("voice_id") {
            settings.remove("ref_audio");
        }
        if set("ref_audio") {
            settings.remove("voice");
            settings.remove("voice_id");
        }
        for (key, value) in update {
            let known =
                FIELDS.iter().any(|(field, _)| field == key) || OWN_FIELDS.contains(&key.as_str());
            if !known {
                return Err(ApiError::invalid(
                    key.as_str(),
                    format!("`{key}` is not a setting of this server's speech sessions."),
                ));
            }
            settings.insert(key.clone(), value.clone());
        }
        match settings.get("streaming_mode") {
            None | Some(Value::Null) => {}
            Some(Value::String(mode)) if mode == "responsive" => {}
            Some(Value::String(mode)) if mode == "long_form" => {
                return Err(ApiError::invalid(
                    "streaming_mode",
                    "`streaming_mode` long_form is not available: each sentence is spoken as \
                     soon as it is complete (responsive).",
                ))
            }
            Some(_) => {
                return Err(ApiError::invalid(
                    "streaming_mode",
                    "`streaming_mode` is responsive or long_form.",
                ))
            }
        }
        Ok(settings)
    }
}

/// Where the settings cut the text: at sentences (the default) or clauses.
fn granularity_of(settings: &Map<String, Value>) -> Result<Granularity, ApiError> {
    let invalid = || {
        ApiError::invalid(
            "split_granularity",
            "`split_granularity` is sentence or clause.",
        )
    };
    match settings.get("split_granularity") {
        None | Some(Value::Null) => Ok(Granularity::Sentence),
        Some(Value::String(name)) if name != "none" => Granularity::parse(name).ok_or_else(invalid),
        Some(_) => Err(invalid()),
    }
}

fn text(event: Value) -> Message {
    Message::Text(event.to_string().into())
}

impl Dialect for Mistral {
    fn opened(&mut self, core: &Core) -> Vec<Message> {
        let session = self.session(core.voice());
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
                let settings = self.updated(update)?;
                let granularity = granularity_of(&settings)?;
                let body = self.body(&settings);
                self.pending = Some(settings);
                self.pending_granularity = granularity;
                Ok(Command::Configure(body, granularity))
            }
            "input_text.append" => match event.get("text") {
                Some(Value::String(delta)) => Ok(Command::Append(delta.clone())),
                _ => Err(ApiError::invalid("text", "`text` must be a string.")),
            },
            // With `text`, the SDK's `flush(text)`: the text, then the flush.
            "input_text.flush" => match event.get("text") {
                None | Some(Value::Null) => Ok(Command::Flush),
                Some(Value::String(delta)) => Ok(Command::AppendFlush(delta.clone())),
                Some(_) => Err(ApiError::invalid("text", "`text` must be a string.")),
            },
            "input_text.end" => Ok(Command::End),
            other => Err(invalid_message(format!("Unknown message type: {other:?}."))),
        }
    }

    fn configured(&mut self, voice: &Voice) -> Vec<Message> {
        if let Some(settings) = self.pending.take() {
            self.settings = settings;
            self.granularity = self.pending_granularity;
        }
        let session = self.session(Some(voice));
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
            Output::Done(done) => vec![text(json!({"type": "speech.audio.done",
                "usage": usage(done.prompt_tokens, done.frames)}))],
        }
    }

    fn error(&mut self, error: &ApiError) -> Message {
        self.pending = None;
        text(error_event(error))
    }
}
