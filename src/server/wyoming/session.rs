//! One Wyoming connection: answers `describe` and `ping`, synthesizes `synthesize` events,
//! and for a streamed request (`synthesize-start`, `synthesize-chunk`*, `synthesize-stop`)
//! speaks each run of complete sentences as soon as its text has arrived.
//!
//! Synthesis is a `POST /v1/audio/speech` in all but transport: the same validation, queue,
//! drain and streamed PCM encoder, so the audio equals that of a `pcm` request streamed as
//! `audio` with the same seed.

use super::event::{read_event, write_event, Event, ReadError};
use super::info::{default_voice, info};
use crate::audio::{stream_encoder, AudioFormat};
use crate::scheduler::{EngineState, JobEvent, JobOptions, LoadedModel};
use crate::server::drain::InFlight;
use crate::server::error::ApiError;
use crate::server::parse_speech_body;
use crate::server::routes::speech::{first_audio, job_error, prepare, submit, worker_stopped};
use crate::server::state::AppState;
use serde_json::{json, Map, Value};
use std::sync::Arc;
use tokio::io::{BufReader, BufWriter};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;

/// Samples per `audio-chunk` event (Piper's default, which Home Assistant is used to).
const CHUNK_SAMPLES: usize = 1024;

/// What ends a connection: the peer went away, or an error that was reported to it.
enum Stop {
    Io(std::io::Error),
    Api(ApiError),
}

impl From<std::io::Error> for Stop {
    fn from(e: std::io::Error) -> Self {
        Stop::Io(e)
    }
}

impl From<ApiError> for Stop {
    fn from(e: ApiError) -> Self {
        Stop::Api(e)
    }
}

/// The voice and extensions of a request: from `synthesize`, or `synthesize-start` for all of
/// a stream's text.
struct Options {
    voice: Option<String>,
    language: Option<String>,
    /// Extensions beside Wyoming's fields, as in the HTTP API: checked the same way.
    seed: Value,
    max_frames: Value,
}

impl Options {
    fn from_data(data: &Map<String, Value>) -> Self {
        let voice = data.get("voice");
        let text = |v: Option<&Value>| v.and_then(Value::as_str).map(String::from);
        Options {
            voice: text(voice.and_then(|v| v.get("name"))),
            language: text(voice.and_then(|v| v.get("language"))),
            seed: data.get("seed").cloned().unwrap_or(Value::Null),
            max_frames: data.get("max_frames").cloned().unwrap_or(Value::Null),
        }
    }
}

/// A streamed request in progress: its options and the text not yet spoken.
struct TextStream {
    options: Options,
    pending: String,
}

struct Session {
    app: AppState,
    reader: BufReader<OwnedReadHalf>,
    writer: BufWriter<OwnedWriteHalf>,
    stream: Option<TextStream>,
}

pub async fn run(socket: TcpStream, app: AppState) {
    let _ = socket.set_nodelay(true);
    let (read, write) = socket.into_split();
    let mut session = Session {
        app,
        reader: BufReader::new(read),
        writer: BufWriter::new(write),
        stream: None,
    };
    match session.serve().await {
        Ok(()) => tracing::debug!("connection closed"),
        Err(Stop::Io(e)) => tracing::debug!(error = %e, "connection lost"),
        Err(Stop::Api(e)) => {
            tracing::warn!(code = ?e.code, message = %e.message, "Wyoming request failed");
            let error = Event::new(
                "error",
                json!({"text": e.message, "code": e.code.unwrap_or("error")}),
            );
            let _ = write_event(&mut session.writer, &error).await;
        }
    }
}

impl Session {
    async fn serve(&mut self) -> Result<(), Stop> {
        loop {
            let event = match read_event(&mut self.reader).await {
                Ok(Some(event)) => event,
                Ok(None) => return Ok(()),
                Err(ReadError::Io(e)) => return Err(e.into()),
                Err(ReadError::Invalid(message)) => {
                    return Err(ApiError::invalid("event", message).into())
                }
            };
            self.handle(event).await?;
        }
    }

    async fn handle(&mut self, event: Event) -> Result<(), Stop> {
        match event.kind.as_str() {
            "describe" => {
                // A server that only transcribes offers no program here.
                let served = self.app.default_model().ok().map(|m| m.id.clone());
                let info = match served {
                    Some(id) => info(Some((&self.loaded_model().await?.card, id.as_str()))),
                    None => info(None),
                };
                self.write(Event::new("info", info)).await
            }
            "ping" => {
                let text = event.data.get("text").cloned().unwrap_or(Value::Null);
                self.write(Event::new("pong", json!({ "text": text })))
                    .await
            }
            // Home Assistant also sends the whole text inside a stream, for servers that
            // cannot stream: already spoken from the chunks.
            "synthesize" if self.stream.is_some() => Ok(()),
            "synthesize" => {
                let text = text_of(&event.data)?;
                self.speak(&Options::from_data(&event.data), &text).await
            }
            "synthesize-start" => {
                self.stream = Some(TextStream {
                    options: Options::from_data(&event.data),
                    pending: String::new(),
                });
                Ok(())
            }
            "synthesize-chunk" => {
                let text = text_of(&event.data)?;
                let Some(stream) = self.stream.as_mut() else {
                    return Err(not_streaming(&event.kind).into());
                };
                stream.pending.push_str(&text);
                let Some(end) = sentences_end(&stream.pending) else {
                    return Ok(());
                };
                let ready: String = stream.pending.drain(..end).collect();
                let stream = self.stream.take().expect("checked above");
                let spoken = self.speak(&stream.options, &ready).await;
                self.stream = Some(stream);
                spoken
            }
            "synthesize-stop" => {
                let Some(stream) = self.stream.take() else {
                    return Err(not_streaming(&event.kind).into());
                };
                if !stream.pending.trim().is_empty() {
                    self.speak(&stream.options, &stream.pending).await?;
                }
                self.write(Event::new("synthesize-stopped", Value::Null))
                    .await
            }
            // Wyoming servers ignore the events they do not handle.
            _ => Ok(()),
        }
    }

    /// Waits for the model (Home Assistant asks for `info` as soon as it connects).
    async fn loaded_model(&self) -> Result<Arc<LoadedModel>, ApiError> {
        let served = self.app.default_model()?;
        let mut engine = served.engine.clone();
        let _ = engine
            .wait_for(|s| !matches!(s, EngineState::Loading))
            .await;
        served.loaded()
    }

    /// Synthesizes `text` as `audio-start`, `audio-chunk`*, `audio-stop`.
    async fn speak(&mut self, options: &Options, text: &str) -> Result<(), Stop> {
        if self.app.drain.is_draining() {
            return Err(ApiError::shutting_down().into());
        }
        let _in_flight = InFlight::new(self.app.drain.clone());
        let served = self.app.default_model()?.clone();
        let model = served.loaded()?;
        let voice = options
            .voice
            .as_deref()
            .or_else(|| default_voice(&model.card, options.language.as_deref()))
            .ok_or_else(|| ApiError::invalid("voice", "This model folder has no preset voices."))?;
        let body = json!({"model": served.id, "input": text, "voice": voice,
            "response_format": "pcm", "seed": options.seed, "max_frames": options.max_frames});
        let speech = parse_speech_body(
            body.to_string().as_bytes(),
            self.app.config.max_input_chars,
            &model.card,
        )?;
        let prepared = prepare(&self.app, &served.id, &model, &speech).await?;
        let job = JobOptions {
            stream: true,
            ..JobOptions::default()
        };
        let mut events = submit(&served, prepared, job)?;
        let mut next = first_audio(&mut events, &served.id).await?;
        let rate = model.card.sample_rate;
        let mut encoder = stream_encoder(AudioFormat::Pcm, rate).map_err(encoding_failed)?;
        let format = json!({"rate": model.card.sample_rate, "width": 2, "channels": 1});
        self.write(Event::new("audio-start", format.clone()))
            .await?;
        loop {
            let event = match next.take() {
                Some(event) => event,
                None => events.recv().await.ok_or_else(worker_stopped)?,
            };
            match event {
                JobEvent::Started { .. } | JobEvent::Progress { .. } => {}
                JobEvent::Audio(pcm) => {
                    let bytes = encoder.push(&pcm).map_err(encoding_failed)?;
                    self.write_audio(&format, bytes).await?;
                }
                JobEvent::Done(summary) => {
                    let last = encoder.finish().map_err(encoding_failed)?;
                    self.write_audio(&format, last).await?;
                    tracing::info!(
                        voice,
                        frames = summary.frames,
                        seed = speech.seed,
                        "Wyoming speech done"
                    );
                    return self.write(Event::new("audio-stop", Value::Null)).await;
                }
                JobEvent::Failed(e) => return Err(job_error(e).into()),
            }
        }
    }

    async fn write_audio(&mut self, format: &Value, bytes: Vec<u8>) -> Result<(), Stop> {
        for chunk in bytes.chunks(CHUNK_SAMPLES * 2) {
            let event = Event::new("audio-chunk", format.clone()).with_payload(chunk.to_vec());
            self.write(event).await?;
        }
        Ok(())
    }

    async fn write(&mut self, event: Event) -> Result<(), Stop> {
        Ok(write_event(&mut self.writer, &event).await?)
    }
}

fn encoding_failed(e: crate::audio::AudioError) -> ApiError {
    ApiError::internal(format!("audio encoding failed: {e}"))
}

fn text_of(data: &Map<String, Value>) -> Result<String, ApiError> {
    data.get("text")
        .and_then(Value::as_str)
        .map(String::from)
        .ok_or_else(|| ApiError::invalid("text", "The event has no string `text`."))
}

fn not_streaming(kind: &str) -> ApiError {
    ApiError::invalid(
        "event",
        format!("'{kind}' outside synthesize-start ... synthesize-stop."),
    )
}

/// The end of the last complete sentence in streamed text: after `.`, `!`, `?` or `…` and
/// the whitespace that shows the sentence is over, or after a line break.
fn sentences_end(text: &str) -> Option<usize> {
    let mut end = None;
    let mut chars = text.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        let next_is_space = chars.peek().is_some_and(|(_, n)| n.is_whitespace());
        if c == '\n' || (matches!(c, '.' | '!' | '?' | '…') && next_is_space) {
            end = Some(i + c.len_utf8());
        }
    }
    end
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sentences_end_after_punctuation_and_a_space() {
        assert_eq!(sentences_end("Hello there"), None);
        assert_eq!(sentences_end("Hello there."), None, "more may follow");
        assert_eq!(sentences_end("Hello. Wor"), Some(6));
        assert_eq!(sentences_end("One! Two? Thr"), Some(9));
        assert_eq!(sentences_end("Pi is 3.14 and"), None);
        assert_eq!(sentences_end("Line one\nline"), Some(9));
        assert_eq!(sentences_end("Voilà… puis"), Some("Voilà…".len()));
    }
}
