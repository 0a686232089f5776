//! Mistral's shape of `POST /v1/audio/speech` (docs.mistral.ai, Studio > Audio > Text to
//! speech > Speech; fields as the `mistralai` Python SDK's `speechrequest.py`,
//! `speech_v1_audio_speech_postop.py` (`SpeechResponse`, `SpeechStreamEvents`),
//! `speechstreamaudiodelta.py` and `speechstreamdone.py` have them): the voice is `voice_id`
//! or a reference clip `ref_audio`, `stream` asks for Server-Sent Events, and the answer is
//! JSON with base64 `audio_data` or events named `speech.audio.delta` / `speech.audio.done`.
//! The body is read into an OpenAI-shaped one and spoken on the same path.

use super::request::SpeechRequest;
use super::Speech;
use crate::engine::CustomVoice;
use crate::models::voxtral_tts::flow_head::CFG_ALPHA;
use crate::scheduler::{JobSummary, LoadedModel};
use crate::server::error::ApiError;
use crate::server::json;
use crate::server::routes::voices::create::{decode_clips, encode, voice_encoder};
use crate::server::routes::voices::mistral::decode_base64;
use crate::server::state::{AppState, ServedModel};
use serde::de::IgnoredAny;
use serde::Deserialize;
use serde_json::{json, Map, Value};
use std::sync::Arc;
use utoipa::ToSchema;

/// Mistral's fields this server has no use for; a request that sets one is refused rather
/// than spoken otherwise than asked.
const UNSUPPORTED: [&str; 2] = ["phoneme_hints", "conversation_history"];

/// Accepted and unused: they do not change the audio.
const IGNORED: [&str; 2] = ["metadata", "prompt_cache_key"];

/// The voice label of a request speaking with its own reference clip (for the logs).
pub(crate) const REFERENCE_VOICE: &str = "ref_audio";

/// Mistral's speech request. The extension fields of OpenAI's shape (`seed`, `max_frames`,
/// `language`, `temperature`, `normalize`, `instructions`, `speed`) are taken too;
/// `metadata` and `prompt_cache_key` are accepted and unused (they do not change the audio).
#[derive(Deserialize, ToSchema)]
pub struct MistralSpeechRequest {
    /// The text to speak.
    input: String,
    /// A served model's id; absent: the default model, or with `ref_audio` the first model
    /// that clones, or with a custom voice the model that made it.
    model: Option<String>,
    /// A preset's name or a custom voice's `voice_...` id.
    voice_id: Option<String>,
    /// A reference clip (base64: WAV, MP3, FLAC, Ogg or WebM) to clone the voice from for
    /// this request; spoken by a model that clones (the one named when it does, else the first
    /// served one that does).
    ref_audio: Option<String>,
    /// Server-Sent Events while the audio is made.
    stream: Option<bool>,
    /// `mp3` (the default), `wav`, `pcm` (32-bit float little-endian), `flac`, `opus`, or this
    /// server's `aac`.
    response_format: Option<String>,
    /// The guidance scale of the model's flow matching: fixed by the model (a realtime
    /// session's `expressiveness` reports it); a request may only repeat it.
    expressiveness: Option<f64>,
    /// OpenAI's extension fields.
    #[serde(flatten)]
    #[schema(value_type = Object)]
    extensions: Map<String, Value>,
}

/// A Mistral request read: an OpenAI-shaped body and what Mistral's fields add to it.
pub(super) struct MistralSpeech {
    /// A `POST /v1/audio/speech` body of OpenAI's shape, `model` not set yet.
    body: Map<String, Value>,
    model: Option<String>,
    voice_id: Option<String>,
    ref_audio: Option<String>,
    pub stream: bool,
    expressiveness: Option<f64>,
}

/// The fields that tell Mistral's body from OpenAI's, present or not.
#[derive(Deserialize)]
struct MistralFields {
    voice_id: Option<IgnoredAny>,
    ref_audio: Option<IgnoredAny>,
    stream: Option<IgnoredAny>,
}

/// Whether `body` is Mistral's shape rather than OpenAI's: an object with one of
/// `voice_id`, `ref_audio` or `stream` set. (A body that does not parse is OpenAI's, which says what is
/// wrong with it.)
pub(super) fn is_mistral(body: &[u8]) -> bool {
    serde_json::from_slice::<MistralFields>(body)
        .is_ok_and(|f| f.voice_id.is_some() || f.ref_audio.is_some() || f.stream.is_some())
}

impl MistralSpeech {
    pub fn read(body: Value) -> Result<Self, ApiError> {
        let Value::Object(mut body) = body else {
            return Err(ApiError::invalid(
                "input",
                "The body must be a JSON object.",
            ));
        };
        for field in UNSUPPORTED {
            if body.get(field).is_some_and(|v| !v.is_null()) {
                return Err(ApiError::invalid(
                    field,
                    format!("'{field}' is not supported by this server."),
                ));
            }
        }
        for (field, instead) in [("voice", "voice_id"), ("stream_format", "stream")] {
            if body.contains_key(field) {
                return Err(ApiError::invalid(
                    field,
                    format!(
                        "'{field}' is OpenAI's field; this body is Mistral's (it has voice_id, \
                         ref_audio or stream): use '{instead}'."
                    ),
                ));
            }
        }
        for field in UNSUPPORTED.into_iter().chain(IGNORED) {
            body.remove(field);
        }
        let request: MistralSpeechRequest = json::from_value(Value::Object(body))?;
        let voice_id = request.voice_id.filter(|v| !v.trim().is_empty());
        let ref_audio = request.ref_audio.filter(|a| !a.is_empty());
        let voice =
            match (&voice_id, &ref_audio) {
                (Some(_), Some(_)) => {
                    return Err(ApiError::invalid(
                        "ref_audio",
                        "'voice_id' and 'ref_audio' are one or the other.",
                    ))
                }
                (Some(id), None) => id.clone(),
                (None, Some(_)) => REFERENCE_VOICE.to_string(),
                (None, None) => return Err(ApiError::invalid(
                    "voice_id",
                    "'voice_id' (a preset or custom voice) or 'ref_audio' (a clip) is required.",
                )),
            };
        let format = request.response_format.as_deref().unwrap_or("mp3");
        let mut body = request.extensions;
        body.insert("input".into(), Value::String(request.input));
        body.insert("voice".into(), Value::String(voice));
        body.insert("response_format".into(), format_name(format).into());
        Ok(MistralSpeech {
            body,
            model: request.model,
            voice_id,
            ref_audio,
            stream: request.stream.unwrap_or(false),
            expressiveness: request.expressiveness,
        })
    }

    /// The model that speaks, and the request validated for it (its reference clip cloned).
    pub async fn validate(
        mut self,
        app: &AppState,
    ) -> Result<(ServedModel, Arc<LoadedModel>, Speech), ApiError> {
        let (served, model, reference) = match &self.ref_audio {
            Some(clip) => {
                let (served, model) = app.cloning_model(self.model.as_deref(), "ref_audio")?;
                let reference = reference_voice(app, served, &model, clip).await?;
                (served.clone(), model, Some(reference))
            }
            None => {
                let served = voice_model(app, self.model.as_deref(), self.voice_id.as_deref())?;
                let model = served.loaded()?;
                (served.clone(), model, None)
            }
        };
        check_expressiveness(self.expressiveness, &model)?;
        self.body
            .insert("model".into(), Value::String(served.id.clone()));
        let request: SpeechRequest =
            json::from_value(Value::Object(self.body)).map_err(voice_id)?;
        let speech = request
            .validate_with(app.config.max_input_chars, &model.card, reference)
            .map_err(voice_id)?;
        Ok((served, model, speech))
    }
}

/// Mistral's name of a format as this server's: its `pcm` is 32-bit float.
pub(crate) fn format_name(name: &str) -> &str {
    match name {
        "pcm" => "pcm_f32le",
        other => other,
    }
}

/// This server's name of a format as Mistral's.
pub(crate) fn mistral_format_name(format: crate::audio::AudioFormat) -> &'static str {
    match format {
        crate::audio::AudioFormat::PcmF32 => "pcm",
        other => other.as_str(),
    }
}

/// An error about OpenAI's `voice` is about Mistral's `voice_id`.
fn voice_id(mut error: ApiError) -> ApiError {
    if error.param.as_deref() == Some("voice") {
        error.param = Some("voice_id".into());
    }
    error
}

/// The model a request naming `requested` speaks `voice_id` with: a stored custom voice goes
/// to the model that made it, unless the request names another model that clones (which then
/// says the voice is not its own).
pub(crate) fn voice_model<'a>(
    app: &'a AppState,
    requested: Option<&str>,
    voice_id: Option<&str>,
) -> Result<&'a ServedModel, ApiError> {
    let requested = match requested {
        Some(name) => Some(app.model_named(name)?),
        None => None,
    };
    let owner = voice_id
        .and_then(|id| app.voices.get(id))
        .and_then(|meta| app.models.iter().find(|m| m.id == meta.model));
    match (requested, owner) {
        (Some(named), Some(owner)) if named.id != owner.id => {
            let clones = named.loaded()?.card.cloning;
            Ok(if clones { named } else { owner })
        }
        (_, Some(owner)) => Ok(owner),
        (Some(named), None) => Ok(named),
        (None, None) => app.default_model(),
    }
}

/// The guidance scale a model speaks with (Mistral's `expressiveness`): Voxtral TTS's flow
/// matching guides at a fixed scale; the other families have no guidance (1).
pub(crate) fn expressiveness_of(model: &LoadedModel) -> f64 {
    if model.card.family == "voxtral-tts" {
        // As written in decimal (1.2), not as the nearest f32 (1.2000000476837158).
        (f64::from(CFG_ALPHA) * 1e6).round() / 1e6
    } else {
        1.0
    }
}

/// `expressiveness` may only repeat the model's own: any other would change the speech.
pub(crate) fn check_expressiveness(
    requested: Option<f64>,
    model: &LoadedModel,
) -> Result<(), ApiError> {
    let fixed = expressiveness_of(model);
    match requested {
        Some(e) if (e - fixed).abs() > 1e-6 => Err(ApiError::invalid(
            "expressiveness",
            format!("'expressiveness' is fixed at {fixed} for this model; got {e}."),
        )),
        _ => Ok(()),
    }
}

/// A voice cloned from `ref_audio` (base64) by `served`'s voice encoder, for one request or
/// session (not stored).
pub(crate) async fn reference_voice(
    app: &AppState,
    served: &ServedModel,
    model: &LoadedModel,
    ref_audio: &str,
) -> Result<Arc<CustomVoice>, ApiError> {
    let clip = decode_base64(ref_audio, "ref_audio")?;
    let (encoder, sample_rate) = voice_encoder(app, served, &model.card)?;
    let clips = decode_clips(app, vec![clip], sample_rate, "ref_audio").await?;
    let tensors = encode(encoder, clips, None)
        .await
        .map_err(|e| match e.param {
            Some(_) => e.with_param("ref_audio"),
            None => e,
        })?;
    Ok(Arc::new(CustomVoice {
        id: REFERENCE_VOICE.into(),
        transcript: None,
        tensors,
    }))
}

/// Mistral's `usage` of a generation: prompt tokens in, frames out.
pub(crate) fn usage(prompt_tokens: usize, frames: usize) -> Value {
    json!({"prompt_tokens": prompt_tokens, "completion_tokens": frames,
           "total_tokens": prompt_tokens + frames})
}

pub(super) fn done_event(summary: &JobSummary) -> Value {
    json!({"type": "speech.audio.done", "usage": usage(summary.prompt_tokens, summary.frames)})
}

pub(super) fn delta_event(audio_data: &str) -> Value {
    json!({"type": "speech.audio.delta", "audio_data": audio_data})
}

/// Mistral's `error` event: `message` and a numeric `code` (the HTTP status the same failure
/// has on `/v1/audio/speech`), with OpenAI's `type` and `param` and this server's string
/// `reason` beside them.
pub(crate) fn error_event(error: &ApiError) -> Value {
    json!({"type": "error", "error": {
        "message": error.message,
        "code": error.status.as_u16(),
        "type": error.kind(),
        "param": error.param,
        "reason": error.code,
    }})
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(body: Value) -> Result<MistralSpeech, ApiError> {
        MistralSpeech::read(body)
    }

    fn param(body: Value) -> String {
        read(body).err().expect("refused").param.unwrap()
    }

    #[test]
    fn mistral_bodies_are_told_by_their_fields() {
        let mistral = |body: Value| is_mistral(body.to_string().as_bytes());
        assert!(mistral(json!({"input": "Hi", "stream": false})));
        assert!(mistral(json!({"input": "Hi", "voice_id": "x"})));
        assert!(!mistral(json!({"input": "Hi", "voice": "alloy"})));
        assert!(!mistral(
            json!({"input": "Hi", "voice": "alloy", "stream": null})
        ));
        assert!(!mistral(json!("text")));
        assert!(!is_mistral(b"{\"stream\": "));
    }

    #[test]
    fn a_mistral_body_reads_as_openais() {
        let preset = read(json!({"input": "Hi", "voice_id": "alloy", "stream": true,
            "response_format": "pcm", "metadata": {"a": 1}, "prompt_cache_key": "k",
            "seed": 3}))
        .unwrap();
        assert!(preset.stream && preset.ref_audio.is_none());
        assert_eq!(
            Value::Object(preset.body),
            json!({"input": "Hi", "voice": "alloy", "response_format": "pcm_f32le", "seed": 3})
        );
        let clip = read(json!({"input": "Hi", "ref_audio": "UklG", "model": null})).unwrap();
        assert!(clip.ref_audio.is_some() && !clip.stream && clip.model.is_none());
        assert_eq!(clip.body["voice"], REFERENCE_VOICE);
        assert_eq!(clip.body["response_format"], "mp3", "Mistral's default");
    }

    #[test]
    fn what_cannot_be_done_is_refused_by_name() {
        let base = |field: &str, value: Value| {
            let mut body = json!({"input": "Hi", "voice_id": "alloy"});
            body[field] = value;
            param(body)
        };
        assert_eq!(base("phoneme_hints", json!({"Hi": ["h"]})), "phoneme_hints");
        assert_eq!(
            base("conversation_history", json!([{"role": "user"}])),
            "conversation_history"
        );
        assert_eq!(base("voice", json!("alloy")), "voice");
        assert_eq!(base("stream_format", json!("sse")), "stream_format");
        assert_eq!(base("stream", json!("yes")), "stream");
        assert_eq!(base("ref_audio", json!("UklG")), "ref_audio");
        assert_eq!(base("expressiveness", json!("high")), "expressiveness");
        assert_eq!(param(json!({"input": "Hi", "stream": false})), "voice_id");
        assert!(read(json!({"input": "Hi", "voice_id": "a", "phoneme_hints": null})).is_ok());
    }

    #[test]
    fn mistrals_pcm_is_float() {
        use crate::audio::AudioFormat;
        assert_eq!(format_name("pcm"), "pcm_f32le");
        assert_eq!(mistral_format_name(AudioFormat::PcmF32), "pcm");
        for format in [
            AudioFormat::Mp3,
            AudioFormat::Wav,
            AudioFormat::Flac,
            AudioFormat::Opus,
        ] {
            assert_eq!(format_name(mistral_format_name(format)), format.as_str());
        }
    }
}
