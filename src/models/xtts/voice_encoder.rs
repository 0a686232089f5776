//! XTTS-v2's voice encoder (`Xtts.get_conditioning_latents`, docs/xtts-v2-spec.md §3): from
//! one or several 22.05 kHz clips of a speaker, the GPT conditioning latents (the clips cut to
//! `max_ref_len`, concatenated, chunked and averaged: always 32 latents) and the speaker
//! embedding (per clip at 16 kHz, averaged, not re-normalised). Loaded on its own (the
//! conditioning encoder, perceiver and speaker encoder, apart from the GPT and HiFi-GAN), so
//! that cloning runs off the decoding thread.
//!
//! It stores the voice as the studio voices are stored: [`GPT_COND_LATENT`] f32 `[1, 32, D]`
//! and [`SPEAKER_EMBEDDING`] f32 `[1, E, 1]`, which the engine reads back.

use super::checkpoint::{GPT_COND_LATENT, SPEAKER_EMBEDDING};
use super::cloning_mel::SAMPLE_RATE;
use super::conditioning::{CloningSettings, Conditioner};
use super::folder::XttsFolder;
use super::gpt_config::GptConfig;
use super::keys;
use super::reference_audio::{prepare_reference, sinc_resample};
use super::speaker_encoder::{SpeakerEncoder, SPEAKER_SAMPLE_RATE};
use super::tokenizer::XttsTokenizer;
use crate::engine::voice::{TensorData, VoiceEncodeError, VoiceEncoder, VoiceTensors};
use crate::nn::layers::Loader;
use crate::nn::LoadError;
use crate::tensor::{DType, Tensor};
use std::path::Path;

/// Most clips one voice averages: each is encoded on its own by the speaker encoder.
pub const MAX_CLIPS: usize = 8;

pub struct XttsVoiceEncoder<T: Tensor> {
    conditioner: Conditioner<T>,
    speaker: SpeakerEncoder<T>,
    settings: CloningSettings,
    /// The memory-mapped checkpoint the weights point into.
    _folder: XttsFolder,
}

impl<T: Tensor> XttsVoiceEncoder<T> {
    /// The encoders of the folder `dir`; `None` when its checkpoint has no speaker encoder.
    pub fn load(dir: &Path, device: &T::Device, dtype: DType) -> Result<Option<Self>, LoadError> {
        let folder = XttsFolder::open(dir)?;
        let has_speaker_encoder = folder
            .weights
            .keys()
            .iter()
            .any(|k| k.starts_with("hifigan_decoder.speaker_encoder."));
        if !has_speaker_encoder {
            return Ok(None);
        }
        let file = dir.join("config.json").display().to_string();
        let tokenizer = XttsTokenizer::from_file(&folder.vocab)?;
        let config = GptConfig::from_json(&folder.config, &file, &tokenizer)?;
        let a = &config.args;
        let loader = Loader::<T>::new(&folder.weights, device, dtype);
        let conditioner = Conditioner::load(&loader, a.gpt_n_model_channels, a.gpt_n_heads)?;
        // The speaker encoder's convolutions stay f32 on the CPU (no fast bf16 path).
        let speaker_dtype = if T::is_cpu(device) { DType::F32 } else { dtype };
        let speaker_loader = Loader::<T>::new(&folder.weights, device, speaker_dtype);
        let speaker =
            SpeakerEncoder::load(&speaker_loader.scoped(&keys::scope(keys::HIFIGAN_DECODER)))?;
        let d = &config.defaults;
        Ok(Some(XttsVoiceEncoder {
            conditioner,
            speaker,
            settings: CloningSettings {
                max_ref_len: d.max_ref_len,
                gpt_cond_len: d.gpt_cond_len,
                gpt_cond_chunk_len: d.gpt_cond_chunk_len,
                sound_norm_refs: d.sound_norm_refs,
            },
            _folder: folder,
        }))
    }

    /// The voice of `clips` (22.05 kHz mono, as `load_audio` returns them), as stored.
    fn voice(&self, clips: &[Vec<f32>]) -> Result<VoiceTensors, VoiceEncodeError> {
        let latents = self
            .conditioner
            .voice_latents(clips, &self.settings)
            .map_err(|e| VoiceEncodeError::input("audio_sample", e.to_string()))?;
        let mut embedding = vec![0f32; self.speaker.embedding_dim()];
        for clip in clips {
            let s = &self.settings;
            let cut = prepare_reference(clip, s.max_ref_len, s.sound_norm_refs);
            let clip_16k = sinc_resample(&cut, SAMPLE_RATE, SPEAKER_SAMPLE_RATE);
            let one = self
                .speaker
                .embed(&clip_16k)
                .map_err(|e| VoiceEncodeError::input("audio_sample", e.to_string()))?;
            for (sum, v) in embedding.iter_mut().zip(one) {
                *sum += v;
            }
        }
        for v in &mut embedding {
            *v /= clips.len() as f32;
        }
        let values = latents.to_vec_f32();
        if values.iter().chain(&embedding).any(|v| !v.is_finite()) {
            return Err(VoiceEncodeError::Engine(
                "the encoders gave values that are not finite".into(),
            ));
        }
        let mut tensors = VoiceTensors::default();
        tensors.insert(GPT_COND_LATENT, latents.shape(), TensorData::F32(values));
        let width = embedding.len();
        tensors.insert(
            SPEAKER_EMBEDDING,
            vec![1, width, 1],
            TensorData::F32(embedding),
        );
        Ok(tensors)
    }
}

impl<T: Tensor> VoiceEncoder for XttsVoiceEncoder<T> {
    fn sample_rate(&self) -> u32 {
        SAMPLE_RATE
    }

    /// The transcript is not used: XTTS-v2 clones from the audio alone.
    fn encode(
        &self,
        clips: &[Vec<f32>],
        _transcript: Option<&str>,
    ) -> Result<VoiceTensors, VoiceEncodeError> {
        if clips.is_empty() || clips.len() > MAX_CLIPS {
            return Err(VoiceEncodeError::input(
                "audio_sample",
                format!(
                    "XTTS-v2 clones a voice from 1 to {MAX_CLIPS} clips; {} were sent",
                    clips.len()
                ),
            ));
        }
        // `load_audio` clips to [-1, 1] after resampling.
        let clips: Vec<Vec<f32>> = clips
            .iter()
            .map(|c| c.iter().map(|x| x.clamp(-1.0, 1.0)).collect())
            .collect();
        self.voice(&clips)
    }
}
