//! A Base folder's voice encoder (spec §10): from one 24 kHz reference clip, the speaker
//! encoder's x-vector; with the clip's transcript, also the speech-tokenizer encoder's
//! reference codes and the tokenized transcript, for in-context cloning. Loaded on its own
//! (`speaker_encoder.*` of `model.safetensors`, the encoder half of `speech_tokenizer/`, the
//! text tokenizer), apart from the talker, so that a voice is computed off the decoding thread.
//!
//! The tensors it writes, which the engine (`engine.rs`) reads back:
//! - [`X_VECTOR`]: f32 `[hidden]`;
//! - with a transcript, [`REF_CODES`]: i64 `[frames, 16]`, and [`REF_TEXT_IDS`]: i64 `[n]`,
//!   `<|im_start|>assistant\n{transcript}<|im_end|>\n` tokenized ([`Reference::text_ids`]).

use super::config::{Qwen3TtsConfig, TtsModelType};
use super::engine::{REF_CODES, REF_TEXT_IDS, X_VECTOR};
use super::keys;
use super::prompt::{reference_text, ClonedVoice, Reference};
use super::speaker_encoder::SpeakerEncoder;
use super::speaker_mel::{SpeakerMelFrontEnd, SPEAKER_SAMPLE_RATE};
use super::speech_encoder::SpeechEncoder;
use crate::engine::voice::{TensorData, VoiceEncodeError, VoiceEncoder, VoiceTensors};
use crate::nn::checkpoint::Checkpoint;
use crate::nn::layers::Loader;
use crate::nn::LoadError;
use crate::tensor::{DType, Tensor};
use crate::tokenizers::qwen2::Qwen2Tokenizer;
use memmap2::Mmap;
use std::path::Path;
use std::sync::Arc;

/// Shortest clip accepted: a voice needs some speech (the official code takes any length).
pub const MIN_CLIP_SECONDS: f32 = 0.5;
/// Most tokens of a wrapped transcript: far more than a clip of the server's length limit
/// holds, and few enough to leave the talker's positions to the text spoken.
pub const MAX_TRANSCRIPT_TOKENS: usize = 1024;

pub struct Qwen3VoiceEncoder<T: Tensor> {
    speaker: SpeakerEncoder<T>,
    mel: SpeakerMelFrontEnd,
    speech: SpeechEncoder<T>,
    tokenizer: Qwen2Tokenizer,
    hidden: usize,
    /// The memory-mapped checkpoint the speaker encoder's weights point into.
    _weights: Vec<Arc<Mmap>>,
}

impl<T: Tensor> Qwen3VoiceEncoder<T> {
    /// The encoders of the folder `dir`; `None` for the variants that do not clone
    /// (CustomVoice, VoiceDesign).
    pub fn load(dir: &Path, device: &T::Device, dtype: DType) -> Result<Option<Self>, LoadError> {
        let config = Qwen3TtsConfig::from_file(&dir.join("config.json"))?;
        if config.tts_model_type != TtsModelType::Base {
            return Ok(None);
        }
        let ckpt = Checkpoint::open(&dir.join("model.safetensors"))?;
        let loader = Loader::<T>::new(&ckpt, device, dtype);
        let speaker = SpeakerEncoder::load(
            &loader.scoped(&keys::scope(keys::SPEAKER_ENCODER)),
            &config.speaker_encoder_config,
            device,
            dtype,
        )?;
        let speech = SpeechEncoder::load(&dir.join("speech_tokenizer"), device, dtype)?;
        if speech.sample_rate() != SPEAKER_SAMPLE_RATE {
            return Err(LoadError::invalid(
                dir.join("speech_tokenizer/config.json")
                    .display()
                    .to_string(),
                "encoder_config.sampling_rate",
                format!(
                    "{} Hz, but the speaker encoder reads {SPEAKER_SAMPLE_RATE} Hz clips",
                    speech.sample_rate()
                ),
            ));
        }
        Ok(Some(Qwen3VoiceEncoder {
            speaker,
            mel: SpeakerMelFrontEnd::new(),
            speech,
            tokenizer: Qwen2Tokenizer::from_folder(dir)?,
            hidden: config.talker_config.hidden_size,
            _weights: ckpt.mmaps(),
        }))
    }

    fn reference(&self, clip: &[f32], transcript: &str) -> Result<Reference, VoiceEncodeError> {
        let text_ids = self.tokenizer.encode(&reference_text(transcript));
        if text_ids.len() > MAX_TRANSCRIPT_TOKENS {
            return Err(VoiceEncodeError::input(
                "transcript",
                format!(
                    "the transcript is {} tokens long; the most is {MAX_TRANSCRIPT_TOKENS}",
                    text_ids.len()
                ),
            ));
        }
        let codes = self
            .speech
            .encode(clip)
            .map_err(|e| VoiceEncodeError::input("audio_sample", e.to_string()))?;
        Ok(Reference { text_ids, codes })
    }
}

impl<T: Tensor> VoiceEncoder for Qwen3VoiceEncoder<T> {
    fn sample_rate(&self) -> u32 {
        SPEAKER_SAMPLE_RATE
    }

    fn encode(
        &self,
        clips: &[Vec<f32>],
        transcript: Option<&str>,
    ) -> Result<VoiceTensors, VoiceEncodeError> {
        let clip = match clips {
            [clip] => clip,
            _ => {
                return Err(VoiceEncodeError::input(
                    "audio_sample",
                    format!(
                        "Qwen3-TTS clones a voice from one clip; {} were sent",
                        clips.len()
                    ),
                ))
            }
        };
        let seconds = clip.len() as f32 / SPEAKER_SAMPLE_RATE as f32;
        if seconds < MIN_CLIP_SECONDS {
            return Err(VoiceEncodeError::input(
                "audio_sample",
                format!(
                    "the clip is {seconds:.2} s long; a voice needs at least {MIN_CLIP_SECONDS} s"
                ),
            ));
        }
        let mel = self
            .mel
            .compute(clip)
            .map_err(|e| VoiceEncodeError::input("audio_sample", e.to_string()))?;
        let x_vector = self.speaker.x_vector(&mel);
        if x_vector.len() != self.hidden || x_vector.iter().any(|v| !v.is_finite()) {
            return Err(VoiceEncodeError::Engine(format!(
                "the speaker encoder gave {} values (not all finite?) for a talker {} wide",
                x_vector.len(),
                self.hidden
            )));
        }
        let reference = match transcript {
            Some(text) => Some(self.reference(clip, text)?),
            None => None,
        };
        Ok(stored_tensors(&ClonedVoice {
            x_vector,
            reference,
        }))
    }
}

/// A cloned voice as stored tensors.
pub fn stored_tensors(voice: &ClonedVoice) -> VoiceTensors {
    let mut tensors = VoiceTensors::default();
    let x = &voice.x_vector;
    tensors.insert(X_VECTOR, vec![x.len()], TensorData::F32(x.clone()));
    if let Some(reference) = &voice.reference {
        let width = reference.codes.first().map_or(0, Vec::len);
        let codes = reference.codes.iter().flatten().map(|&c| i64::from(c));
        tensors.insert(
            REF_CODES,
            vec![reference.codes.len(), width],
            TensorData::I64(codes.collect()),
        );
        let ids = reference.text_ids.iter().map(|&id| i64::from(id));
        tensors.insert(
            REF_TEXT_IDS,
            vec![reference.text_ids.len()],
            TensorData::I64(ids.collect()),
        );
    }
    tensors
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::CustomVoice;
    use crate::models::qwen3_tts::engine::voice_tensors;

    fn voice(reference: bool) -> ClonedVoice {
        ClonedVoice {
            x_vector: vec![0.5, -1.0, 2.0],
            reference: reference.then(|| Reference {
                text_ids: vec![151644, 77091, 198, 32, 151645, 198],
                codes: vec![vec![1, 2], vec![2047, 0], vec![7, 8]],
            }),
        }
    }

    /// What this encoder writes, the engine reads back as the same voice.
    #[test]
    fn stored_tensors_read_back_as_the_voice() {
        for in_context in [false, true] {
            let tensors = stored_tensors(&voice(in_context));
            assert_eq!(tensors.contains(REF_CODES), in_context);
            let stored = CustomVoice {
                id: "voice_0".into(),
                transcript: None,
                tensors,
            };
            let back = voice_tensors(&stored).unwrap();
            let want = voice(in_context);
            assert_eq!(back.x_vector, want.x_vector);
            let (got, want) = (back.reference, want.reference);
            assert_eq!(
                got.as_ref().map(|r| &r.codes),
                want.as_ref().map(|r| &r.codes)
            );
            assert_eq!(got.map(|r| r.text_ids), want.map(|r| r.text_ids));
        }
        let tensors = stored_tensors(&voice(true));
        assert_eq!(tensors.i64(REF_CODES).unwrap().0, &[3, 2]);
        assert_eq!(tensors.f32(X_VECTOR).unwrap().0, &[3]);
    }
}
