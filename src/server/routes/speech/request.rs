//! The body of `POST /v1/audio/speech` (OpenAI's fields plus two extensions) and its
//! validation into a job for the worker.

use crate::audio::{AudioFormat, MAX_SPEED, MIN_SPEED};
use crate::engine::voice::CUSTOM_VOICE_PREFIX;
use crate::engine::{Conditioning, CustomVoice, ModelCard, Sampling, SpeechInput};
use crate::server::error::ApiError;
use crate::server::voice_catalog;
use serde::Deserialize;
use std::ops::RangeInclusive;
use std::sync::Arc;
use utoipa::ToSchema;

/// OpenAI's range for `speed`: what the time stretch takes.
const SPEED_RANGE: RangeInclusive<f32> = MIN_SPEED..=MAX_SPEED;
/// `temperature`'s range, as OpenAI's other endpoints take it.
const TEMPERATURE_RANGE: RangeInclusive<f32> = 0.0..=2.0;
/// Characters of `instructions` (OpenAI's limit).
const MAX_INSTRUCTIONS_CHARS: usize = 4096;

fn mp3() -> AudioFormat {
    AudioFormat::Mp3
}

#[derive(Debug, Deserialize, ToSchema)]
#[schema(example = json!({"model": "tts-1", "input": "Hello there!", "voice": "alloy"}))]
pub struct SpeechRequest {
    /// A served model's id (see /v1/models), or OpenAI's `tts-1`, `tts-1-hd` or
    /// `gpt-4o-mini-tts` for the default (first) model. Any other name gets 404.
    pub model: String,
    /// The text to speak: 1 to 4096 characters (the limit is the `max_input_chars` setting).
    pub input: String,
    pub voice: VoiceChoice,
    /// Steers the style (Qwen3-TTS 1.7B CustomVoice) or describes the whole voice (Qwen3-TTS
    /// VoiceDesign). Accepted and ignored by models without instruction input (Voxtral,
    /// Qwen3-TTS 0.6B CustomVoice and Base): see `capabilities.instructions` in /v1/models.
    pub instructions: Option<String>,
    /// Extension: the language to speak, as a code (`en`, `zh`) or the model's name for it
    /// (`english`); `auto` (the default) lets the model tell from the text. Models without a
    /// language input (Voxtral) ignore it.
    pub language: Option<String>,
    /// Extension: the sampling temperature of token-sampling models (Qwen3-TTS), 0 to 2;
    /// 0 decodes greedily. Absent: the model's own. Voxtral ignores it (its sampling is
    /// flow-matching noise, set by `seed`).
    #[schema(minimum = 0.0, maximum = 2.0)]
    pub temperature: Option<f32>,
    /// Audio encoding of the response (mp3 by default, as OpenAI).
    #[serde(default = "mp3")]
    pub response_format: AudioFormat,
    /// Playback speed, 0.25 to 4.0 (default 1.0), applied with a pitch-preserving time stretch.
    #[schema(minimum = 0.25, maximum = 4.0, example = 1.0)]
    pub speed: Option<f32>,
    /// Absent: the complete audio file, sent once synthesis has finished (streamed as
    /// `audio` when the openai SDKs' `with_streaming_response` sends
    /// `X-Stainless-Raw-Response: stream`). `audio`: the
    /// audio file streamed (chunked transfer) while it is generated; WAV then has
    /// "unknown length" (0xFFFFFFFF) sizes. `sse`: Server-Sent Events while it is generated,
    /// OpenAI's `speech.audio.delta` events with base64 audio, then `speech.audio.done` with
    /// usage; an error after the first event arrives as `{"type": "error", "error": {...}}`.
    pub stream_format: Option<StreamFormat>,
    /// Extension: the sampling seed. The same request with the same seed gives the same
    /// audio. Random when absent; the seed used is returned in the `x-voxtral-seed` header.
    pub seed: Option<u64>,
    /// Extension: the most frames to generate (80 ms of audio each), 1 to 2048 (the default).
    #[schema(minimum = 1, maximum = 2048)]
    pub max_frames: Option<usize>,
    /// Extension: clean the input first (markup, URLs, invisible characters, line breaks;
    /// see docs/text.md). Absent: the server's `normalize_text` setting (on by default).
    pub normalize: Option<bool>,
}

/// A voice name (a preset such as `fr_female`, or an OpenAI name such as `alloy`), or
/// OpenAI's voice object `{"id": name}`.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(
    untagged,
    expecting = "expected a voice name or an object {\"id\": name}"
)]
pub enum VoiceChoice {
    Name(String),
    Object { id: String },
}

impl VoiceChoice {
    fn name(&self) -> &str {
        match self {
            VoiceChoice::Name(name) | VoiceChoice::Object { id: name } => name,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum StreamFormat {
    Audio,
    Sse,
}

/// A request that passed validation.
pub struct Speech {
    /// As requested: for the logs.
    pub model: String,
    pub text: String,
    /// One of the model's presets; for a voice-design model, the name as given (unused); for
    /// a custom voice, its id.
    pub voice: String,
    /// `voice` is a custom voice's id (`voice_...`), to look up in the voice store.
    pub custom_voice: bool,
    /// A voice cloned from the request's own reference clip (Mistral's `ref_audio`), not
    /// stored; `voice` is then only a label for the logs.
    pub reference: Option<Arc<CustomVoice>>,
    pub language: Option<String>,
    pub instructions: Option<String>,
    pub temperature: Option<f32>,
    pub max_frames: usize,
    pub format: AudioFormat,
    pub speed: f32,
    /// `None`: the whole file at the end.
    pub stream_format: Option<StreamFormat>,
    pub seed: u64,
    /// `None`: the server's setting.
    pub normalize: Option<bool>,
}

impl SpeechRequest {
    /// Checks every field against the settings and the model's card.
    pub fn validate(self, max_input_chars: usize, model: &ModelCard) -> Result<Speech, ApiError> {
        self.validate_with(max_input_chars, model, None)
    }

    /// [`validate`](Self::validate), speaking with `reference` (a voice cloned from a clip the
    /// request carried) instead of the named voice when it is given.
    pub fn validate_with(
        self,
        max_input_chars: usize,
        model: &ModelCard,
        reference: Option<Arc<CustomVoice>>,
    ) -> Result<Speech, ApiError> {
        let chars = self.input.chars().count();
        if chars == 0 {
            return Err(ApiError::invalid("input", "'input' must not be empty."));
        }
        if chars > max_input_chars {
            return Err(ApiError::invalid(
                "input",
                format!("'input' is {chars} characters long; the maximum is {max_input_chars}."),
            ));
        }
        let requested = self.voice.name();
        let custom_voice = reference.is_none()
            && model.cloning
            && requested.trim().starts_with(CUSTOM_VOICE_PREFIX);
        let voice = if custom_voice || model.voice_design || reference.is_some() {
            requested.trim()
        } else {
            voice_catalog::resolve(requested, model).ok_or_else(|| {
                ApiError::invalid(
                    "voice",
                    voice_catalog::unknown_voice_message(requested, model),
                )
            })?
        };
        let format = self.response_format;
        if !format.is_supported() {
            return Err(ApiError::invalid(
                "response_format",
                format!("'{format}' is not available in this build of the server."),
            ));
        }
        let speed = self.speed.unwrap_or(1.0);
        if !SPEED_RANGE.contains(&speed) {
            return Err(ApiError::invalid(
                "speed",
                format!("'speed' must be between {MIN_SPEED} and {MAX_SPEED}; got {speed}."),
            ));
        }
        let max_frames = self.max_frames.unwrap_or(model.max_frames);
        if !(1..=model.max_frames).contains(&max_frames) {
            return Err(ApiError::invalid(
                "max_frames",
                format!(
                    "'max_frames' must be between 1 and {}; got {max_frames}.",
                    model.max_frames
                ),
            ));
        }
        let instructions = self.instructions.filter(|i| !i.trim().is_empty());
        if let Some(chars) = instructions.as_ref().map(|i| i.chars().count()) {
            if chars > MAX_INSTRUCTIONS_CHARS {
                return Err(ApiError::invalid(
                    "instructions",
                    format!("'instructions' is {chars} characters long; the maximum is {MAX_INSTRUCTIONS_CHARS}."),
                ));
            }
            if !model.instructions {
                tracing::debug!("'instructions' given: this model has no use for them");
            }
        }
        if let Some(t) = self.temperature {
            if !TEMPERATURE_RANGE.contains(&t) {
                return Err(ApiError::invalid(
                    "temperature",
                    format!("'temperature' must be between 0 and 2; got {t}."),
                ));
            }
        }
        let seed = self.seed.unwrap_or_else(rand::random);
        Ok(Speech {
            model: self.model,
            text: self.input,
            voice: voice.to_string(),
            custom_voice,
            reference,
            language: self.language.filter(|l| !l.trim().is_empty()),
            instructions,
            temperature: self.temperature,
            max_frames,
            format,
            speed,
            stream_format: self.stream_format,
            seed,
            normalize: self.normalize,
        })
    }
}

impl Speech {
    /// What text preparation takes; `normalize_text` and `segment_chars` are the server's
    /// settings (a request's `normalize` overrides the first).
    pub fn input(&self, normalize_text: bool, segment_chars: usize) -> SpeechInput {
        SpeechInput {
            text: self.text.clone(),
            voice: self.voice.clone(),
            conditioning: Conditioning {
                language: self.language.clone(),
                instructions: self.instructions.clone(),
                custom_voice: None,
            },
            max_frames: self.max_frames,
            sampling: Sampling {
                seed: self.seed,
                noise_scale: 1.0,
                temperature: self.temperature,
            },
            normalize: self.normalize.unwrap_or(normalize_text),
            segment_chars,
        }
    }
}

#[cfg(all(test, feature = "testkit"))]
mod tests {
    use super::*;
    use crate::models::voxtral_tts::catalog::example_card;
    use crate::models::voxtral_tts::testkit::PRESET_VOICES;
    use axum::http::StatusCode;
    use serde_json::json;

    fn model() -> ModelCard {
        example_card(&PRESET_VOICES)
    }

    fn validate(body: serde_json::Value) -> Result<Speech, ApiError> {
        let request: SpeechRequest = serde_json::from_value(body).unwrap();
        request.validate(10, &model())
    }

    fn param_of(body: serde_json::Value) -> String {
        let e = validate(body).err().expect("invalid");
        assert_eq!(e.status, StatusCode::BAD_REQUEST);
        e.param.unwrap()
    }

    #[test]
    fn defaults_follow_openai() {
        let s = validate(json!({"model": "tts-1", "input": "Hi", "voice": "alloy"})).unwrap();
        assert_eq!(s.format, AudioFormat::Mp3);
        assert_eq!((s.speed, s.stream_format), (1.0, None));
        assert_eq!(s.voice, "neutral_female");
        assert_eq!(s.max_frames, model().max_frames);
    }

    #[test]
    fn extensions_and_voice_object() {
        let s = validate(
            json!({"model": "x", "input": "Hi", "voice": {"id": "fr_male"},
            "seed": 7, "max_frames": 12, "response_format": "flac", "speed": 1.5,
            "stream_format": "sse", "instructions": "whisper"}),
        )
        .unwrap();
        assert_eq!((s.seed, s.max_frames), (7, 12));
        let input = s.input(true, 300);
        assert_eq!((input.sampling.seed, input.sampling.noise_scale), (7, 1.0));
        assert_eq!((s.format, s.speed), (AudioFormat::Flac, 1.5));
        assert_eq!(s.voice, "fr_male");
        assert_eq!(s.stream_format, Some(StreamFormat::Sse));
    }

    #[test]
    fn input_length_counts_characters_not_bytes() {
        let ok = "é".repeat(10);
        assert!(validate(json!({"model": "x", "input": ok, "voice": "alloy"})).is_ok());
        let long = "é".repeat(11);
        assert_eq!(
            param_of(json!({"model": "x", "input": long, "voice": "alloy"})),
            "input"
        );
        assert_eq!(
            param_of(json!({"model": "x", "input": "", "voice": "alloy"})),
            "input"
        );
    }

    #[test]
    fn each_bad_field_is_named() {
        let base = |field: &str, value: serde_json::Value| {
            let mut body = json!({"model": "x", "input": "Hi", "voice": "alloy"});
            body[field] = value;
            param_of(body)
        };
        assert_eq!(base("voice", json!("robot")), "voice");
        assert_eq!(base("speed", json!(4.5)), "speed");
        assert_eq!(base("speed", json!(0.2)), "speed");
        assert_eq!(base("max_frames", json!(0)), "max_frames");
        assert_eq!(
            base("max_frames", json!(model().max_frames + 1)),
            "max_frames"
        );
    }
}
