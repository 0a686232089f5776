//! Streamed responses: each audio chunk is encoded as it arrives from the worker, and sent
//! as raw audio (chunked transfer) or as Server-Sent Events (OpenAI's or Mistral's) through
//! axum's `sse`.

use super::{job_error, mistral, worker_stopped};
use crate::audio::{time_stretch, AudioError, StreamEncoder};
use crate::scheduler::{JobEvent, JobSummary};
use crate::server::error::{ApiError, ErrorDetail};
use axum::body::Body;
use axum::response::sse::{Event, Sse};
use base64::Engine;
use bytes::Bytes;
use futures_util::Stream;
use serde::Serialize;
use std::collections::VecDeque;
use std::convert::Infallible;
use tokio::sync::mpsc::UnboundedReceiver;

/// Encoded audio per `speech.audio.delta` event (even, so PCM samples never split).
const SSE_CHUNK_BYTES: usize = 16 * 1024;

#[derive(Serialize)]
#[serde(tag = "type")]
enum SseEvent<'a> {
    #[serde(rename = "speech.audio.delta")]
    Delta { audio: &'a str },
    #[serde(rename = "speech.audio.done")]
    Done { usage: Usage },
    #[serde(rename = "error")]
    Error { error: ErrorDetail },
}

/// Usage in OpenAI's terms: prompt tokens in, audio frames out.
#[derive(Serialize)]
struct Usage {
    input_tokens: usize,
    output_tokens: usize,
    total_tokens: usize,
}

/// What the encoder made of the job's next events.
enum Piece {
    Audio(Vec<u8>),
    /// The encoder's last bytes, and the job's summary.
    End(Vec<u8>, JobSummary),
}

/// A job's audio, encoded as it arrives. Dropping it (the client went away) drops the job's
/// receiver, which stops the job at its next frame.
pub(super) struct Streamer {
    events: UnboundedReceiver<JobEvent>,
    pending: Option<JobEvent>,
    encoder: Option<Box<dyn StreamEncoder>>,
    /// With a speed change the audio is stretched as a whole, so it is held until the end.
    speed: f32,
    held: Vec<f32>,
    sample_rate: u32,
    done: bool,
}

impl Streamer {
    /// `first`: an event already taken off `events`.
    pub fn new(
        events: UnboundedReceiver<JobEvent>,
        first: Option<JobEvent>,
        encoder: Box<dyn StreamEncoder>,
        speed: f32,
        sample_rate: u32,
    ) -> Self {
        Streamer {
            events,
            pending: first,
            encoder: Some(encoder),
            speed,
            held: Vec::new(),
            sample_rate,
            done: false,
        }
    }

    async fn next(&mut self) -> Option<Result<Piece, ApiError>> {
        if self.done {
            return None;
        }
        loop {
            let event = match self.pending.take() {
                Some(event) => event,
                None => match self.events.recv().await {
                    Some(event) => event,
                    None => return Some(self.fail(worker_stopped())),
                },
            };
            let encoded = match event {
                JobEvent::Started { .. } | JobEvent::Progress { .. } => continue,
                JobEvent::Audio(pcm) if self.speed != 1.0 => {
                    self.held.extend(pcm);
                    continue;
                }
                JobEvent::Audio(pcm) => match self.encoder.as_mut().map(|e| e.push(&pcm)) {
                    Some(Ok(bytes)) if bytes.is_empty() => continue,
                    Some(result) => result.map(Piece::Audio),
                    None => continue,
                },
                JobEvent::Done(summary) => {
                    self.done = true;
                    self.finish().map(|bytes| Piece::End(bytes, summary))
                }
                JobEvent::Failed(e) => return Some(self.fail(job_error(e))),
            };
            return Some(encoded.or_else(|e| {
                self.fail(ApiError::internal(format!("audio encoding failed: {e}")))
            }));
        }
    }

    /// The encoder's last bytes (after the held audio, with a speed change).
    fn finish(&mut self) -> Result<Vec<u8>, AudioError> {
        let Some(mut encoder) = self.encoder.take() else {
            return Ok(Vec::new());
        };
        let mut bytes = Vec::new();
        if self.speed != 1.0 {
            let pcm = time_stretch(
                &std::mem::take(&mut self.held),
                self.speed,
                self.sample_rate,
            );
            bytes = encoder.push(&pcm)?;
        }
        bytes.extend(encoder.finish()?);
        Ok(bytes)
    }

    fn fail<T>(&mut self, error: ApiError) -> Result<T, ApiError> {
        self.done = true;
        tracing::warn!(message = %error.message, "speech stream failed");
        Err(error)
    }
}

/// The audio file as it is encoded. An error after the status was sent cuts the connection.
pub(super) fn audio_body(streamer: Streamer) -> Body {
    Body::from_stream(futures_util::stream::unfold(streamer, |mut s| async move {
        let piece = s.next().await?;
        let bytes = match piece {
            Ok(Piece::Audio(bytes)) => Ok(Bytes::from(bytes)),
            Ok(Piece::End(bytes, summary)) => {
                tracing::info!(frames = summary.frames, "speech streamed");
                Ok(Bytes::from(bytes))
            }
            Err(e) => Err(std::io::Error::other(e.message)),
        };
        Some((bytes, s))
    }))
}

/// Whose words a response is in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Shape {
    OpenAi,
    Mistral,
}

impl Shape {
    fn delta(self, audio: &str) -> Event {
        match self {
            Shape::OpenAi => event(&SseEvent::Delta { audio }),
            Shape::Mistral => named(mistral::delta_event(audio)),
        }
    }

    fn done(self, summary: &JobSummary) -> Event {
        match self {
            Shape::OpenAi => event(&SseEvent::Done {
                usage: Usage {
                    input_tokens: summary.prompt_tokens,
                    output_tokens: summary.frames,
                    total_tokens: summary.prompt_tokens + summary.frames,
                },
            }),
            Shape::Mistral => named(mistral::done_event(summary)),
        }
    }

    fn error(self, error: ApiError) -> Event {
        match self {
            Shape::OpenAi => event(&SseEvent::Error {
                error: ErrorDetail {
                    kind: error.kind(),
                    message: error.message,
                    param: error.param,
                    code: error.code,
                },
            }),
            Shape::Mistral => named(mistral::error_event(&error)),
        }
    }
}

/// Mistral's events name themselves (`event:`) as well as carrying their `type`.
fn named(data: serde_json::Value) -> Event {
    let name = data["type"].as_str().unwrap_or("error").to_string();
    Event::default().event(name).data(data.to_string())
}

/// `speech.audio.delta` events with base64 audio, then `speech.audio.done` with the usage; an
/// error after the first event is an `error` event, and the end of the stream.
pub(super) fn sse(
    streamer: Streamer,
    shape: Shape,
) -> Sse<impl Stream<Item = Result<Event, Infallible>>> {
    let state = (streamer, VecDeque::new());
    Sse::new(futures_util::stream::unfold(
        state,
        move |(mut s, mut queued)| async move {
            while queued.is_empty() {
                queued.extend(match s.next().await? {
                    Ok(Piece::Audio(bytes)) => deltas(&bytes, shape),
                    Ok(Piece::End(bytes, summary)) => {
                        tracing::info!(frames = summary.frames, "speech streamed as events");
                        let mut events = deltas(&bytes, shape);
                        events.push(shape.done(&summary));
                        events
                    }
                    Err(error) => vec![shape.error(error)],
                });
            }
            let next = queued.pop_front().map(Ok)?;
            Some((next, (s, queued)))
        },
    ))
}

fn deltas(bytes: &[u8], shape: Shape) -> Vec<Event> {
    let b64 = base64::engine::general_purpose::STANDARD;
    bytes
        .chunks(SSE_CHUNK_BYTES)
        .map(|chunk| shape.delta(&b64.encode(chunk)))
        .collect()
}

fn event(event: &SseEvent) -> Event {
    Event::default().data(serde_json::to_string(event).expect("serializable"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::audio::{stream_encoder, AudioFormat};
    use crate::engine::StopReason;
    use crate::scheduler::JobError;
    use axum::response::IntoResponse;
    use serde_json::Value;
    use std::time::Duration;

    fn streamer(events: UnboundedReceiver<JobEvent>) -> Streamer {
        let encoder = stream_encoder(AudioFormat::Pcm, 24_000).unwrap();
        Streamer::new(events, None, encoder, 1.0, 24_000)
    }

    async fn body_text(body: Body) -> Result<String, axum::Error> {
        let bytes = axum::body::to_bytes(body, usize::MAX).await?;
        Ok(String::from_utf8(bytes.to_vec()).unwrap())
    }

    fn summary() -> JobSummary {
        JobSummary {
            prompt_tokens: 3,
            frames: 1,
            stop: StopReason::EndAudio,
            synthesis_time: Duration::ZERO,
            codes: Vec::new(),
        }
    }

    #[tokio::test]
    async fn an_error_after_audio_is_an_sse_error_event() {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        tx.send(JobEvent::Audio(vec![0.5; 4])).unwrap();
        tx.send(JobEvent::Failed(JobError::Panicked("boom".into())))
            .unwrap();
        let response = sse(streamer(rx), Shape::OpenAi).into_response();
        assert_eq!(response.headers()["content-type"], "text/event-stream");
        let text = body_text(response.into_body()).await.unwrap();
        let events: Vec<&str> = text.split_terminator("\n\n").collect();
        assert_eq!(events.len(), 2, "{text}");
        assert!(events[0].starts_with("data: {\"type\":\"speech.audio.delta\""));
        let error: Value = serde_json::from_str(events[1].strip_prefix("data: ").unwrap()).unwrap();
        assert_eq!(error["type"], "error");
        assert_eq!(error["error"]["type"], "server_error");
        assert!(error["error"]["message"].as_str().unwrap().contains("boom"));
    }

    #[tokio::test]
    async fn an_error_after_audio_cuts_a_raw_stream_and_done_ends_it() {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        tx.send(JobEvent::Audio(vec![0.5; 4])).unwrap();
        drop(tx);
        assert!(
            body_text(audio_body(streamer(rx))).await.is_err(),
            "the worker went away: the stream errors"
        );
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        tx.send(JobEvent::Audio(vec![0.5; 4])).unwrap();
        tx.send(JobEvent::Done(summary())).unwrap();
        let pcm = axum::body::to_bytes(audio_body(streamer(rx)), usize::MAX).await;
        assert_eq!(pcm.unwrap().len(), 8, "4 samples of s16le");
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        tx.send(JobEvent::Audio(vec![0.5; 4])).unwrap();
        tx.send(JobEvent::Done(summary())).unwrap();
        let text = body_text(sse(streamer(rx), Shape::OpenAi).into_response().into_body())
            .await
            .unwrap();
        let last = text.split_terminator("\n\n").last().unwrap();
        assert!(last.contains("\"total_tokens\":4"), "{last}");
    }

    #[tokio::test]
    async fn mistrals_events_are_named_and_carry_audio_data() {
        let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
        tx.send(JobEvent::Audio(vec![0.5; 4])).unwrap();
        tx.send(JobEvent::Done(summary())).unwrap();
        let text = body_text(
            sse(streamer(rx), Shape::Mistral)
                .into_response()
                .into_body(),
        )
        .await
        .unwrap();
        let events: Vec<(&str, Value)> = text
            .split_terminator("\n\n")
            .map(|e| {
                let (name, data) = e.split_once('\n').unwrap();
                let data = serde_json::from_str(data.strip_prefix("data: ").unwrap()).unwrap();
                (name.strip_prefix("event: ").unwrap(), data)
            })
            .collect();
        assert_eq!(events.len(), 2, "{text}");
        assert_eq!(events[0].0, "speech.audio.delta");
        assert_eq!(
            events[0].1["audio_data"], "AEAAQABAAEA=",
            "4 samples of s16le"
        );
        assert_eq!(events[1].0, "speech.audio.done");
        assert_eq!(
            events[1].1["usage"],
            serde_json::json!({"prompt_tokens": 3, "completion_tokens": 1, "total_tokens": 4})
        );
    }
}
