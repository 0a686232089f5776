//! Mistral's shape of `POST /v1/audio/transcriptions` (docs.mistral.ai, Studio > Audio >
//! Speech to text > Offline transcription; fields as the `mistralai` Python SDK's
//! `audiotranscriptionrequest.py`, `transcriptionresponse.py`,
//! `transcriptionsegmentchunk.py` and the stream's `transcriptionstreamevents.py`,
//! `transcriptionstreamtextdelta.py`, `transcriptionstreamsegmentdelta.py`,
//! `transcriptionstreamdone.py` have them). A form with one of Mistral's own fields (the SDK
//! always sends `diarize`) is answered in Mistral's shape: JSON with `model`, `text`,
//! `language`, `segments` and `usage`, or with `stream=true` Server-Sent Events named
//! `transcription.text.delta`, `transcription.segment` and `transcription.done`.

use crate::engine::stt::{segments, TimedText};
use crate::scheduler::transcription::{TimedTranscript, TranscriptionEvent};
use crate::server::error::ApiError;
use axum::response::sse::{Event, Sse};
use futures_util::StreamExt;
use serde_json::{json, Value};
use std::collections::BTreeMap;
use std::convert::Infallible;
use tokio::sync::mpsc;

/// Form fields only Mistral's request has.
pub(super) const FIELDS: [&str; 6] = [
    "diarize",
    "timestamp_granularities",
    "context_bias",
    "speaker_references",
    "file_url",
    "file_id",
];

/// What a Mistral form asks beyond OpenAI's fields.
#[derive(Debug, Default, PartialEq)]
pub(super) struct Options {
    /// `segments` are the transcript's sentences.
    segment: bool,
    /// Word times: `segments` are the words (unless sentences are asked too), and `words` has
    /// them in OpenAI's shape.
    word: bool,
}

/// Mistral's fields of a form, by name, each value as sent (repeated fields in order).
pub(super) type Fields = BTreeMap<&'static str, Vec<String>>;

impl Options {
    /// `None` for a form without Mistral's fields (OpenAI's shape).
    pub fn read(fields: &Fields, response_format: Option<&str>) -> Result<Option<Self>, ApiError> {
        if fields.is_empty() {
            return Ok(None);
        }
        let given = |field: &str| {
            fields
                .get(field)
                .into_iter()
                .flatten()
                .map(|v| v.trim())
                .filter(|v| !v.is_empty())
        };
        for diarize in given("diarize") {
            match diarize {
                "false" | "False" | "0" => {}
                "true" | "True" | "1" => return Err(ApiError::invalid(
                    "diarize",
                    "diarize is not supported: this server's model does not tell speakers apart",
                )),
                other => {
                    return Err(ApiError::invalid(
                        "diarize",
                        format!("diarize {other:?}: expected true or false"),
                    ))
                }
            }
        }
        if given("speaker_references").any(|v| v != "{}" && v != "null") {
            return Err(ApiError::invalid(
                "speaker_references",
                "speaker_references is not supported: this server's model does not tell speakers apart",
            ));
        }
        if given("context_bias").next().is_some() {
            return Err(ApiError::invalid(
                "context_bias",
                "context_bias is not supported: this server's model takes no bias",
            ));
        }
        if given("file_url").next().is_some() {
            return Err(ApiError::invalid(
                "file_url",
                "file_url is not supported: this server fetches nothing; send the audio as `file`",
            ));
        }
        if given("file_id").next().is_some() {
            return Err(ApiError::invalid(
                "file_id",
                "file_id is not supported: this server keeps no files; send the audio as `file`",
            ));
        }
        if let Some(format) = response_format.filter(|f| !f.is_empty() && *f != "json") {
            return Err(ApiError::invalid(
                "response_format",
                format!(
                    "response_format {format:?}: a form with Mistral's fields is answered in JSON"
                ),
            ));
        }
        let mut options = Options::default();
        for granularity in given("timestamp_granularities") {
            match granularity {
                "segment" => options.segment = true,
                "word" => options.word = true,
                other => {
                    return Err(ApiError::invalid(
                        "timestamp_granularities",
                        format!("timestamp_granularities {other:?}: expected segment or word"),
                    ))
                }
            }
        }
        Ok(Some(options))
    }

    fn segments(&self, transcript: &TimedTranscript) -> Vec<TimedText> {
        if self.segment {
            segments(&transcript.words)
        } else if self.word {
            transcript.words.clone()
        } else {
            Vec::new()
        }
    }

    /// The finished transcription (`TranscriptionResponse`; `type` is set for the stream's
    /// `transcription.done`).
    pub fn response(&self, model: &str, transcript: &TimedTranscript) -> Value {
        let segments: Vec<Value> = self
            .segments(transcript)
            .iter()
            .map(|s| segment(s, "transcription_segment"))
            .collect();
        let mut response = json!({"model": model, "text": transcript.text, "language": null,
            "segments": segments, "usage": usage(transcript)});
        if self.word {
            response["words"] = transcript
                .words
                .iter()
                .map(|w| json!({"word": w.text, "start": w.start, "end": w.end}))
                .collect();
        }
        response
    }
}

fn segment(s: &TimedText, kind: &str) -> Value {
    json!({"type": kind, "text": s.text, "start": s.start, "end": s.end})
}

/// Mistral's `UsageInfo` of a transcription: the audio's whole seconds and the tokens decoded.
pub(crate) fn usage(transcript: &TimedTranscript) -> Value {
    json!({"prompt_audio_seconds": transcript.audio_seconds.ceil() as u64,
           "completion_tokens": transcript.tokens.len(),
           "total_tokens": transcript.tokens.len()})
}

/// Mistral's events name themselves (`event:`) as well as carrying their `type`.
fn named(data: Value) -> Event {
    let name = data["type"].as_str().unwrap_or("error").to_string();
    Event::default().event(name).data(data.to_string())
}

/// `transcription.text.delta` per piece of text, then `transcription.segment` per segment
/// asked for and `transcription.done`; a failure mid-way is an `error` event.
pub(super) fn sse(
    received: mpsc::UnboundedReceiver<TranscriptionEvent>,
    options: Options,
    model: String,
) -> Sse<impl futures_util::Stream<Item = Result<Event, Infallible>>> {
    let received = futures_util::stream::unfold(received, |mut rx| async move {
        rx.recv().await.map(|event| (event, rx))
    });
    let events = received.flat_map(move |event| {
        let events = match event {
            TranscriptionEvent::Delta(text) => {
                vec![named(
                    json!({"type": "transcription.text.delta", "text": text}),
                )]
            }
            TranscriptionEvent::Done(transcript) => {
                let mut events: Vec<Event> = options
                    .segments(&transcript)
                    .iter()
                    .map(|s| named(segment(s, "transcription.segment")))
                    .collect();
                let mut done = options.response(&model, &transcript);
                done["type"] = json!("transcription.done");
                events.push(named(done));
                events
            }
            TranscriptionEvent::Failed(message) => vec![named(json!({"type": "error",
                "error": {"message": message, "code": 400, "type": "invalid_request_error"}}))],
        };
        futures_util::stream::iter(events.into_iter().map(Ok))
    });
    Sse::new(events)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(pairs: &[(&'static str, &str)]) -> Fields {
        let mut fields = Fields::new();
        for (name, value) in pairs {
            fields.entry(name).or_default().push(value.to_string());
        }
        fields
    }

    fn param(pairs: &[(&'static str, &str)]) -> String {
        Options::read(&fields(pairs), None)
            .unwrap_err()
            .param
            .unwrap()
    }

    #[test]
    fn openai_forms_have_no_options() {
        assert_eq!(Options::read(&Fields::new(), Some("srt")).unwrap(), None);
    }

    #[test]
    fn granularities_are_read_and_the_unsupported_refused_by_name() {
        let read = |pairs| Options::read(&fields(pairs), None).unwrap().unwrap();
        assert_eq!(read(&[("diarize", "false")]), Options::default());
        let both = read(&[
            ("diarize", "false"),
            ("timestamp_granularities", "segment"),
            ("timestamp_granularities", "word"),
        ]);
        assert!(both.segment && both.word);
        assert_eq!(param(&[("diarize", "true")]), "diarize");
        assert_eq!(param(&[("diarize", "maybe")]), "diarize");
        assert_eq!(param(&[("context_bias", "Voxtral")]), "context_bias");
        assert_eq!(
            param(&[("speaker_references", "{\"a\": \"x\"}")]),
            "speaker_references"
        );
        assert_eq!(param(&[("file_url", "https://x/a.mp3")]), "file_url");
        assert_eq!(param(&[("file_id", "f")]), "file_id");
        assert_eq!(
            param(&[("timestamp_granularities", "char")]),
            "timestamp_granularities"
        );
        let e = Options::read(&fields(&[("diarize", "false")]), Some("srt")).unwrap_err();
        assert_eq!(e.param.as_deref(), Some("response_format"));
        assert!(read(&[("speaker_references", "{}"), ("context_bias", "")]) == Options::default());
    }

    #[test]
    fn responses_carry_the_segments_asked_for() {
        let word = |text: &str, start: f64| TimedText {
            text: text.into(),
            start,
            end: start + 0.24,
        };
        let transcript = TimedTranscript {
            text: "Hi there. Bye.".into(),
            tokens: vec![1; 30],
            words: vec![word("Hi", 0.0), word("there.", 0.32), word("Bye.", 0.64)],
            audio_seconds: 2.1,
        };
        let plain = Options::default().response("stt", &transcript);
        assert_eq!(
            plain,
            json!({"model": "stt", "text": "Hi there. Bye.", "language": null, "segments": [],
                "usage": {"prompt_audio_seconds": 3, "completion_tokens": 30, "total_tokens": 30}})
        );
        let words = Options {
            word: true,
            ..Options::default()
        }
        .response("stt", &transcript);
        assert_eq!(words["segments"].as_array().unwrap().len(), 3);
        assert_eq!(words["segments"][1]["text"], "there.");
        assert_eq!(words["words"][2]["word"], "Bye.");
        let sentences = Options {
            segment: true,
            ..Options::default()
        }
        .response("stt", &transcript);
        let texts: Vec<&str> = sentences["segments"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["text"].as_str().unwrap())
            .collect();
        assert_eq!(texts, ["Hi there.", "Bye."]);
        assert_eq!(sentences["segments"][0]["type"], "transcription_segment");
        assert!(sentences.get("words").is_none());
    }
}
