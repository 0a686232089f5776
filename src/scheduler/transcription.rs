//! Speech to text's worker: one thread loads a Voxtral Realtime folder and owns it (and its
//! libtorch context); whole utterances come through a bounded queue and are transcribed one
//! at a time, offline and greedy, their text sent back as it is decoded.

use crate::device::{DeviceChoice, OnBackend};
use crate::models::voxtral_realtime::params::Config;
use crate::models::voxtral_realtime::timing::{token_seconds, words, TimedText};
use crate::models::voxtral_realtime::transcriber::{Transcriber, Transcript};
use crate::tensor::{DType, Tensor};
use std::path::PathBuf;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::sync::Arc;
use std::thread::JoinHandle;
use tokio::sync::{mpsc, watch};

pub struct TranscriptionSettings {
    pub model_id: String,
    pub model_dir: PathBuf,
    pub device: DeviceChoice,
    pub dtype: DType,
    /// libtorch CPU threads (0: its default).
    pub threads: usize,
    /// Longest utterance: the decoder's KV cache is sized for it when the model loads.
    pub max_audio_seconds: f64,
}

/// What clients may know of a loaded speech-to-text model.
#[derive(Clone, Debug)]
pub struct TranscriberCard {
    pub family: &'static str,
    /// Of the audio the model reads; requests are resampled to it.
    pub sample_rate: u32,
    /// Audio per decoded token (1280: 80 ms).
    pub samples_per_token: usize,
    pub max_audio_seconds: f64,
}

pub enum TranscriberState {
    Loading,
    Ready(Arc<TranscriberCard>),
    Failed(String),
}

/// One utterance, mono at the card's sample rate, and where its events go.
pub struct TranscriptionJob {
    pub audio: Vec<f32>,
    pub events: mpsc::UnboundedSender<TranscriptionEvent>,
}

pub enum TranscriptionEvent {
    /// Text decoded since the last delta; the deltas join to the final text.
    Delta(String),
    Done(TimedTranscript),
    /// The job failed (input too long for the loaded model, a model error).
    Failed(String),
}

/// A finished transcription.
#[derive(Clone, Debug)]
pub struct TimedTranscript {
    pub text: String,
    /// Every token decoded (streaming pads and words included).
    pub tokens: Vec<u32>,
    pub words: Vec<TimedText>,
    /// Of the input audio.
    pub audio_seconds: f64,
}

/// The bounded queue in front of the worker.
#[derive(Clone)]
pub struct TranscriptionQueue {
    jobs: SyncSender<TranscriptionJob>,
    capacity: usize,
}

#[derive(Debug, thiserror::Error)]
pub enum TranscriptionSubmitError {
    #[error("the transcription queue is full ({0} jobs waiting)")]
    Full(usize),
    #[error("the transcription worker has stopped")]
    Stopped,
}

impl TranscriptionQueue {
    pub fn try_submit(&self, job: TranscriptionJob) -> Result<(), TranscriptionSubmitError> {
        self.jobs.try_send(job).map_err(|e| match e {
            TrySendError::Full(_) => TranscriptionSubmitError::Full(self.capacity),
            TrySendError::Disconnected(_) => TranscriptionSubmitError::Stopped,
        })
    }
}

/// Starts the worker thread; it loads the model (state `Loading`, then `Ready` or `Failed`)
/// and runs jobs until every queue handle is dropped.
pub fn start_transcription_worker(
    settings: TranscriptionSettings,
    capacity: usize,
) -> std::io::Result<(
    TranscriptionQueue,
    watch::Receiver<TranscriberState>,
    JoinHandle<()>,
)> {
    // A zero-capacity channel would refuse every job the worker is not already waiting for.
    let (jobs, inbox) = sync_channel(capacity.max(1));
    let (state, state_rx) = watch::channel(TranscriberState::Loading);
    let name = format!("stt-{}", settings.model_id);
    let thread = std::thread::Builder::new().name(name).spawn(move || {
        let (device, threads) = (settings.device, settings.threads);
        let worker = Worker {
            settings,
            inbox,
            state: &state,
        };
        if let Err(message) = device.run(threads, worker) {
            state.send_replace(TranscriberState::Failed(message));
        }
    })?;
    Ok((TranscriptionQueue { jobs, capacity }, state_rx, thread))
}

struct Worker<'a> {
    settings: TranscriptionSettings,
    inbox: Receiver<TranscriptionJob>,
    state: &'a watch::Sender<TranscriberState>,
}

impl OnBackend for Worker<'_> {
    type Output = ();

    fn run<T: Tensor>(self, device: &T::Device) {
        let s = &self.settings;
        let loaded = Config::load(&s.model_dir)
            .map_err(|e| e.to_string())
            .and_then(|config| {
                let samples = (s.max_audio_seconds * f64::from(config.mel.sample_rate)).ceil();
                let positions = config.streaming.offline_positions(samples as usize);
                Transcriber::<T>::load(&s.model_dir, device, s.dtype, positions)
                    .map_err(|e| e.to_string())
            });
        let model = match loaded {
            Ok(model) => model,
            Err(message) => {
                tracing::error!(model = %s.model_id, "loading failed: {message}");
                self.state.send_replace(TranscriberState::Failed(message));
                return;
            }
        };
        let sample_rate = model.config.mel.sample_rate;
        self.state
            .send_replace(TranscriberState::Ready(Arc::new(TranscriberCard {
                family: "voxtral-realtime",
                sample_rate,
                samples_per_token: model.config.streaming.samples_per_token,
                max_audio_seconds: s.max_audio_seconds,
            })));
        tracing::info!(model = %s.model_id, "speech-to-text model loaded");
        while let Ok(job) = self.inbox.recv() {
            let events = job.events.clone();
            let outcome =
                std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| transcribe(&model, job)));
            if outcome.is_err() {
                let _ = events.send(TranscriptionEvent::Failed(
                    "the model panicked on this input".into(),
                ));
            }
        }
    }
}

/// Decodes `job` position by position, sending each new piece of text as it is decoded.
fn transcribe<T: Tensor>(model: &Transcriber<T>, job: TranscriptionJob) {
    let embeddings = match model.audio_embeddings(&job.audio) {
        Ok(e) => e,
        Err(e) => {
            let _ = job.events.send(TranscriptionEvent::Failed(e.to_string()));
            return;
        }
    };
    let positions = embeddings.shape()[1];
    let prompt = model.config.streaming.prompt_len().min(positions);
    let mut decoding = model.start_decoding(positions);
    let mut sent = String::new();
    let mut next = 0;
    while next < positions && decoding.tokens.last() != Some(&model.special.eos) {
        let step = if next == 0 { prompt } else { 1 };
        decoding.feed(&embeddings.narrow(1, next, step), &mut |_| {});
        next += step;
        if job.events.is_closed() {
            return; // The client has gone.
        }
        let delta = stable_delta(&model.tokenizer.decode(&decoding.tokens), &sent);
        if !delta.is_empty() {
            sent.push_str(&delta);
            let _ = job.events.send(TranscriptionEvent::Delta(delta));
        }
    }
    let transcript = Transcript {
        text: model.tokenizer.decode(&decoding.tokens),
        tokens: decoding.tokens,
    };
    if let Some(rest) = transcript.text.strip_prefix(sent.as_str()) {
        if !rest.is_empty() {
            let _ = job.events.send(TranscriptionEvent::Delta(rest.to_string()));
        }
    }
    let sample_rate = model.config.mel.sample_rate;
    let token_seconds = token_seconds(&model.config.streaming, sample_rate);
    let audio_seconds = job.audio.len() as f64 / f64::from(sample_rate);
    // The right padding's positions decode too: their words end with the audio.
    let words = words(&transcript, &model.tokenizer, &model.special, token_seconds)
        .into_iter()
        .map(|w| TimedText {
            start: w.start.min(audio_seconds),
            end: w.end.min(audio_seconds),
            text: w.text,
        })
        .collect();
    let _ = job.events.send(TranscriptionEvent::Done(TimedTranscript {
        words,
        audio_seconds,
        text: transcript.text,
        tokens: transcript.tokens,
    }));
}

/// The text of `decoded` past `sent`, holding back a trailing replacement character: the
/// last token may have ended inside a UTF-8 sequence that the next one completes.
fn stable_delta(decoded: &str, sent: &str) -> String {
    let stable = decoded.trim_end_matches('\u{FFFD}');
    stable
        .strip_prefix(sent)
        .map_or_else(String::new, str::to_string)
}

#[cfg(test)]
mod tests {
    use super::stable_delta;

    #[test]
    fn deltas_hold_back_an_unfinished_character() {
        assert_eq!(stable_delta("ab", ""), "ab");
        assert_eq!(stable_delta("abc\u{FFFD}", "ab"), "c");
        assert_eq!(stable_delta("abcé", "abc"), "é");
        assert_eq!(stable_delta("x", "ab"), "");
    }
}
