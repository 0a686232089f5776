//! From mel frames to one audio embedding per decoder position, offline, as vLLM's
//! `VoxtralRealtimeGeneration.embed_multimodal` glues the parts (spec §3): an odd mel count
//! loses its *first* frame, the conv stem halves the rate, conv frames beyond a multiple of the
//! downsample factor are dropped from the *front*, then the encoder transformer and the
//! adapter.

use super::adapter::Adapter;
use super::encoder::Encoder;
use super::keys;
use super::mel::LogMel;
use super::params::Config;
use crate::nn::checkpoint::Checkpoint;
use crate::nn::layers::Loader;
use crate::nn::LoadError;
use crate::tensor::quantized::QuantFormat;
use crate::tensor::{DType, Tensor};
use memmap2::Mmap;
use std::path::Path;
use std::sync::Arc;

/// What the encoder side computes for one utterance, stage by stage.
pub struct AudioEmbeddings<T> {
    /// Conv stem output `[1, frames, enc_dim]`.
    pub conv_frames: T,
    /// Encoder output after the final norm `[1, frames, enc_dim]`.
    pub encoded: T,
    /// `[1, positions, dim]`: one per decoder position.
    pub embeddings: T,
}

pub struct AudioTower<T: Tensor> {
    pub encoder: Encoder<T>,
    pub adapter: Adapter<T>,
    pub(super) device: T::Device,
    dtype: DType,
    /// The memory maps the weights may point into.
    _weights: Vec<Arc<Mmap>>,
}

impl<T: Tensor> AudioTower<T> {
    /// The encoder and adapter of the folder `dir` (configured by `config`); RoPE covers
    /// `max_frames` encoder frames.
    pub fn load(
        dir: &Path,
        config: &Config,
        device: &T::Device,
        dtype: DType,
        max_frames: usize,
    ) -> Result<Self, LoadError> {
        let ckpt = Checkpoint::open(&dir.join("consolidated.safetensors"))?;
        Self::from_checkpoint(&ckpt, config, device, dtype, max_frames, None)
    }

    /// The encoder and adapter from an open checkpoint, their linear weights stored in
    /// `quantize` where the backend multiplies that format.
    pub fn from_checkpoint(
        ckpt: &Checkpoint,
        config: &Config,
        device: &T::Device,
        dtype: DType,
        max_frames: usize,
        quantize: Option<QuantFormat>,
    ) -> Result<Self, LoadError> {
        let l = Loader::<T>::new(ckpt, device, dtype)
            .scoped(keys::EMBEDDING_MODULE)
            .quantizing(quantize);
        Ok(AudioTower {
            encoder: Encoder::load(&l.scoped(keys::ENCODER), config, max_frames)?,
            adapter: Adapter::load(&l, config)?,
            device: device.clone(),
            dtype,
            _weights: ckpt.mmaps(),
        })
    }

    /// The whole utterance at once.
    pub fn embed(&self, mel: &LogMel) -> AudioEmbeddings<T> {
        let factor = self.adapter.factor();
        let skip = mel.frames % 2;
        let frames = mel.frames - skip;
        let rows = &mel.data[skip * mel.num_mel_bins..];
        let mel = T::from_f32(
            &self.device,
            rows,
            &[1, frames, mel.num_mel_bins],
            self.dtype,
        );
        let conv = self.encoder.stem.forward(&mel);
        let extra = (frames / 2) % factor;
        let conv_frames = conv.narrow(1, extra, frames / 2 - extra);
        let encoded = self.encoder.transformer(&conv_frames);
        let embeddings = self.adapter.forward(&encoded);
        AudioEmbeddings {
            conv_frames,
            encoded,
            embeddings,
        }
    }
}
