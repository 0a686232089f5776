//! HiFi-GAN on a thread of its own (as Auralis serves it; the spec's table of its
//! optimisations): the worker's GPT batch steps never wait for a waveform. The engine sends
//! each decode here with the session's new latents and the job's [`PcmSink`]; the thread
//! decodes and delivers into the job's outbox, which sends the audio in order. Requests are
//! handled in the order sent, so a streamed session's chunks are too; the thread keeps each
//! streamed session's [`HifiGanStream`] until the session closes it.
//!
//! The thread loads its own HiFi-GAN from the folder's `model.safetensors` (memory-mapped:
//! the pages are shared with the worker's mapping) on the worker's backend, device and dtype.

use super::convert::MODEL_SAFETENSORS;
use super::hifigan::{Conditioning, DecoderRates, HifiGan};
use super::hifigan_stream::HifiGanStream;
use super::keys;
use crate::engine::{EngineError, PcmSink};
use crate::nn::checkpoint::Checkpoint;
use crate::nn::layers::Loader;
use crate::nn::LoadError;
use crate::tensor::{DType, Tensor};
use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::sync::mpsc::{channel, sync_channel, Receiver, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;

/// A speaker embedding, shared by every decode of a session.
pub type SpeakerEmbedding = Arc<[f32]>;

pub enum Request {
    /// A finished segment's latents `[n, D]` decoded in one pass (the reference's
    /// `inference`).
    Whole {
        latents: Vec<f32>,
        speaker: SpeakerEmbedding,
        sink: PcmSink,
    },
    /// The next latents of streamed session `stream` (the first push opens its stream);
    /// `finish` once its last latent is in.
    Push {
        stream: u64,
        latents: Vec<f32>,
        finish: bool,
        speaker: SpeakerEmbedding,
        sink: PcmSink,
    },
    /// Session `stream` has ended: its stream, if any, is dropped.
    Close { stream: u64 },
}

/// What the engine keeps of the thread: where to send, and the decoder's widths.
pub struct VocoderThread {
    requests: Option<Sender<Request>>,
    thread: Option<JoinHandle<()>>,
    /// Width of the latents it takes.
    pub latent_dim: usize,
    /// Width of the speaker embedding it is conditioned on.
    pub embedding_dim: usize,
}

impl VocoderThread {
    /// Starts the thread and waits until it has loaded HiFi-GAN from `dir` (f32 on the CPU,
    /// where bf16 convolutions have no fast path; `dtype` elsewhere).
    pub fn start<T: Tensor>(
        dir: PathBuf,
        device: &T::Device,
        dtype: DType,
        rates: DecoderRates,
    ) -> Result<Self, LoadError> {
        let (requests, inbox) = channel();
        let (loaded_tx, loaded) = sync_channel(1);
        let dir_shown = dir.clone();
        let device = device.clone();
        let thread = T::spawn_model_thread("xtts-vocoder".into(), move || {
            let loading = catch_unwind(AssertUnwindSafe(|| load::<T>(&dir, &device, dtype, rates)));
            let (_weights, decoder) = match loading {
                Ok(Ok(loaded)) => loaded,
                Ok(Err(e)) => return drop(loaded_tx.send(Err(e))),
                Err(_) => {
                    let e = LoadError::invalid(
                        dir.display().to_string(),
                        "hifigan_decoder",
                        "loading HiFi-GAN panicked",
                    );
                    return drop(loaded_tx.send(Err(e)));
                }
            };
            let _ = loaded_tx.send(Ok((decoder.latent_dim(), decoder.embedding_dim())));
            serve(&decoder, inbox);
        })
        .map_err(|e| LoadError::io(&dir_shown, e))?;
        let (latent_dim, embedding_dim) = loaded.recv().unwrap_or_else(|_| {
            Err(LoadError::invalid(
                "(the vocoder thread)",
                "hifigan_decoder",
                "it stopped while loading",
            ))
        })?;
        Ok(VocoderThread {
            requests: Some(requests),
            thread: Some(thread),
            latent_dim,
            embedding_dim,
        })
    }

    /// A handle to send requests with (sessions keep one to close their stream).
    pub fn sender(&self) -> Sender<Request> {
        self.requests.clone().expect("open until dropped")
    }

    /// Sends `request`; if the thread has stopped, its sink (dropped) fails the job.
    pub fn send(&self, request: Request) {
        if let Some(requests) = &self.requests {
            let _ = requests.send(request);
        }
    }
}

impl Drop for VocoderThread {
    /// Decodes everything already sent (its jobs get their audio), then stops the thread.
    fn drop(&mut self) {
        self.requests = None;
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// HiFi-GAN from the folder's weights (the engine has opened and checked the folder already;
/// this thread maps only `model.safetensors`), and the checkpoint its tensors point into.
fn load<T: Tensor>(
    dir: &std::path::Path,
    device: &T::Device,
    dtype: DType,
    rates: DecoderRates,
) -> Result<(Checkpoint, HifiGan<T>), LoadError> {
    let weights = Checkpoint::open(&dir.join(MODEL_SAFETENSORS))?;
    let dtype = if T::is_cpu(device) { DType::F32 } else { dtype };
    let loader = Loader::<T>::new(&weights, device, dtype);
    let decoder = HifiGan::load(&loader.scoped(&keys::scope(keys::HIFIGAN_DECODER)), rates)?;
    Ok((weights, decoder))
}

/// Handles requests until every sender is gone.
fn serve<T: Tensor>(decoder: &HifiGan<T>, inbox: Receiver<Request>) {
    let mut streams: HashMap<u64, HifiGanStream<'_, T, Conditioning<T>>> = HashMap::new();
    while let Ok(request) = inbox.recv() {
        match request {
            Request::Whole {
                latents,
                speaker,
                sink,
            } => {
                if sink.wanted() {
                    let pcm = guarded(|| {
                        let cond = conditioning(decoder, &speaker)?;
                        let rows = latents.len() / decoder.latent_dim();
                        Ok(decoder.decode(&decoder.latents(&latents, rows), &cond))
                    });
                    sink.deliver(pcm);
                }
            }
            Request::Push {
                stream,
                latents,
                finish,
                speaker,
                sink,
            } => {
                if !sink.wanted() {
                    streams.remove(&stream);
                    continue;
                }
                let pcm = guarded(|| {
                    let open = match streams.remove(&stream) {
                        Some(open) => open,
                        None => HifiGanStream::new(decoder, conditioning(decoder, &speaker)?),
                    };
                    let mut open = open;
                    let mut pcm = open.push(&latents);
                    if finish {
                        pcm.extend(open.finish());
                    } else {
                        streams.insert(stream, open);
                    }
                    Ok(pcm)
                });
                sink.deliver(pcm);
            }
            Request::Close { stream } => {
                streams.remove(&stream);
            }
        }
    }
}

fn conditioning<T: Tensor>(
    decoder: &HifiGan<T>,
    speaker: &[f32],
) -> Result<Conditioning<T>, EngineError> {
    decoder
        .conditioning(speaker)
        .map_err(|e| EngineError(e.to_string()))
}

/// `decode()`, with a panic turned into an error for its job alone.
fn guarded(
    decode: impl FnOnce() -> Result<Vec<f32>, EngineError>,
) -> Result<Vec<f32>, EngineError> {
    catch_unwind(AssertUnwindSafe(decode)).unwrap_or_else(|panic| {
        let message = panic
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a non-text panic".into());
        Err(EngineError(format!("HiFi-GAN panicked: {message}")))
    })
}
