//! Custom voices are computed on a thread of their own per cloning model, apart from its
//! inference worker, so that encoding a reference clip never holds up the frames of the
//! requests being decoded. The thread loads the model's encoders (`models::registry::load_voice_encoder`)
//! and owns them; uploads come through a small bounded queue (full: the caller answers 429)
//! and are encoded one at a time.

use crate::device::{DeviceChoice, OnBackend};
use crate::engine::voice::{VoiceEncodeError, VoiceTensors};
use crate::models::registry::load_voice_encoder;
use crate::tensor::{DType, Tensor};
use std::path::PathBuf;
use std::sync::mpsc::{sync_channel, Receiver, SyncSender, TrySendError};
use std::thread::JoinHandle;
use tokio::sync::{oneshot, watch};

/// Uploads waiting for the encoder beyond the one it computes: each takes seconds of CPU, so
/// a longer queue would only make clients wait longer.
pub const VOICE_QUEUE_CAPACITY: usize = 4;

pub struct VoiceEncodingSettings {
    pub model_id: String,
    pub model_dir: PathBuf,
    pub device: DeviceChoice,
    pub dtype: DType,
    /// libtorch CPU threads (0: its default).
    pub threads: usize,
}

#[derive(Clone, Debug, PartialEq)]
pub enum VoiceEncoderState {
    Loading,
    /// Clips must be mono at this rate.
    Ready {
        sample_rate: u32,
    },
    /// The model does not clone voices; the thread has ended.
    NotCloning,
    Failed(String),
}

/// Clips of one speaker at the encoder's rate, and where the voice goes.
pub struct VoiceEncodingJob {
    pub clips: Vec<Vec<f32>>,
    pub transcript: Option<String>,
    pub reply: oneshot::Sender<Result<VoiceTensors, VoiceEncodeError>>,
}

#[derive(Clone)]
pub struct VoiceEncodingQueue {
    jobs: SyncSender<VoiceEncodingJob>,
}

#[derive(Debug, thiserror::Error)]
pub enum VoiceSubmitError {
    #[error("{VOICE_QUEUE_CAPACITY} voices are waiting to be computed; try again shortly")]
    Full,
    #[error("the voice encoder has stopped")]
    Stopped,
}

impl VoiceEncodingQueue {
    pub fn try_submit(&self, job: VoiceEncodingJob) -> Result<(), VoiceSubmitError> {
        self.jobs.try_send(job).map_err(|e| match e {
            TrySendError::Full(_) => VoiceSubmitError::Full,
            TrySendError::Disconnected(_) => VoiceSubmitError::Stopped,
        })
    }
}

/// Starts the thread: it loads the encoders (`Loading`, then `Ready`, `NotCloning` or
/// `Failed`) and encodes until every queue handle is dropped.
pub fn start_voice_encoding(
    settings: VoiceEncodingSettings,
) -> std::io::Result<(
    VoiceEncodingQueue,
    watch::Receiver<VoiceEncoderState>,
    JoinHandle<()>,
)> {
    let (jobs, inbox) = sync_channel(VOICE_QUEUE_CAPACITY);
    let (state, state_rx) = watch::channel(VoiceEncoderState::Loading);
    let name = format!("voices-{}", settings.model_id);
    let thread = std::thread::Builder::new().name(name).spawn(move || {
        let (device, threads) = (settings.device, settings.threads);
        let encoding = Encoding {
            settings,
            inbox,
            state: &state,
        };
        if let Err(message) = device.run(threads, encoding) {
            state.send_replace(VoiceEncoderState::Failed(message));
        }
    })?;
    Ok((VoiceEncodingQueue { jobs }, state_rx, thread))
}

struct Encoding<'a> {
    settings: VoiceEncodingSettings,
    inbox: Receiver<VoiceEncodingJob>,
    state: &'a watch::Sender<VoiceEncoderState>,
}

impl OnBackend for Encoding<'_> {
    type Output = ();

    fn run<T: Tensor>(self, device: &T::Device) {
        let s = &self.settings;
        let encoder = match load_voice_encoder::<T>(&s.model_dir, device, s.dtype) {
            Ok(Some(encoder)) => encoder,
            Ok(None) => {
                self.state.send_replace(VoiceEncoderState::NotCloning);
                return;
            }
            Err(e) => {
                tracing::error!(model = %s.model_id, "loading the voice encoder failed: {e}");
                self.state
                    .send_replace(VoiceEncoderState::Failed(e.to_string()));
                return;
            }
        };
        self.state.send_replace(VoiceEncoderState::Ready {
            sample_rate: encoder.sample_rate(),
        });
        tracing::info!(model = %s.model_id, "voice encoder loaded");
        while let Ok(job) = self.inbox.recv() {
            if job.reply.is_closed() {
                continue; // The client has gone.
            }
            let encoded = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                encoder.encode(&job.clips, job.transcript.as_deref())
            }))
            .unwrap_or_else(|_| {
                Err(VoiceEncodeError::Engine(
                    "the voice encoder panicked on this clip".into(),
                ))
            });
            let _ = job.reply.send(encoded);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn state_of(dir: &Path) -> VoiceEncoderState {
        let (queue, mut state, thread) = start_voice_encoding(VoiceEncodingSettings {
            model_id: "m".into(),
            model_dir: dir.to_path_buf(),
            device: DeviceChoice::Cpu,
            dtype: DType::F32,
            threads: 1,
        })
        .unwrap();
        drop(queue);
        thread.join().unwrap();
        let last = state.borrow_and_update().clone();
        last
    }

    fn published(folder: &str) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let config = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/data/qwen3_tts")
            .join(folder)
            .join("config.json");
        std::fs::copy(config, dir.path().join("config.json")).unwrap();
        dir
    }

    #[test]
    fn models_that_do_not_clone_end_the_thread_and_broken_ones_say_why() {
        let empty = tempfile::tempdir().unwrap();
        match state_of(empty.path()) {
            VoiceEncoderState::Failed(message) => assert!(message.contains("known family")),
            other => panic!("{other:?}"),
        }
        let custom = published("Qwen3-TTS-12Hz-0.6B-CustomVoice");
        assert_eq!(state_of(custom.path()), VoiceEncoderState::NotCloning);
        // A Base config without its weights.
        let base = published("Qwen3-TTS-12Hz-0.6B-Base");
        match state_of(base.path()) {
            VoiceEncoderState::Failed(message) => {
                assert!(message.contains("model.safetensors"), "{message}")
            }
            other => panic!("{other:?}"),
        }
    }
}
