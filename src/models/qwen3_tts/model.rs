//! The talker and code predictor of a Qwen3-TTS folder: loading `model.safetensors`, the
//! prefill (spec section 5) and the frame loop (section 7), one step for a batch of sessions.
//!
//! A session's frame `i`: the code predictor turns the talker's last hidden state and token
//! `c0_i` into codebooks 1..15; the sum of the frame's 16 embeddings plus trailing text `R[i]`
//! (or `<tts_pad>`) is the talker's next input, whose logits give `c0_{i+1}`. A session ends
//! on EOS, or on its `max_new_tokens`-th token, which never gets codes.

use super::code_predictor::CodePredictor;
use super::config::{GenerationConfig, Qwen3TtsConfig, TtsModelType};
use super::keys;
use super::prompt::{self, CodecInput, PromptError, PromptInput, PromptLayout, Voice};
use super::sampling::{self, GenerationParams, SampleError, Uniforms};
use super::speaker_encoder::SpeakerEncoder;
use super::speaker_mel::{SpeakerMelError, SpeakerMelFrontEnd};
use super::talker::Talker;
use crate::engine::StopReason;
use crate::nn::checkpoint::Checkpoint;
use crate::nn::kv_pool::{KvPool, KvSlot};
use crate::nn::layers::Loader;
use crate::nn::LoadError;
use crate::tensor::quantized::QuantFormat;
use crate::tensor::{DType, Tensor};
use std::cell::RefCell;
use std::path::Path;
use std::sync::Arc;

/// The talker's KV pool: sessions at once, and positions per session (prompt plus frames).
#[derive(Clone, Copy, Debug)]
pub struct TalkerOptions {
    pub max_sessions: usize,
    pub max_positions: usize,
    /// How the talker's and the code predictor's layers store their linear weights.
    pub quantize: Option<QuantFormat>,
}

#[derive(Debug, thiserror::Error)]
pub enum GenerateError {
    #[error(transparent)]
    Prompt(#[from] PromptError),
    #[error(transparent)]
    Sample(#[from] SampleError),
    #[error("max_new_tokens must be at least 1")]
    NoNewTokens,
    #[error("a prompt of {prompt} positions and {new} new tokens needs more than the {max} positions of a KV slot")]
    TooLong {
        prompt: usize,
        new: usize,
        max: usize,
    },
    #[error("all {0} KV-cache slots are in use")]
    NoFreeSlot(usize),
}

pub struct Qwen3Tts<T: Tensor> {
    pub config: Qwen3TtsConfig,
    pub generation: GenerationConfig,
    talker: Talker<T>,
    predictor: CodePredictor<T>,
    /// Base only: the x-vector of a reference clip.
    speaker_encoder: Option<SpeakerEncoder<T>>,
    /// The talker's keys and values: a session holds one slot.
    kv: RefCell<KvPool<T>>,
    /// `P(<tts_pad>)`, `[1, hidden]`: the text side of decode steps past the trailing text.
    tts_pad: T,
    device: T::Device,
    dtype: DType,
    /// The memory-mapped checkpoint the weights point into; declared last so it outlives them.
    _weights: Vec<Arc<memmap2::Mmap>>,
}

impl<T: Tensor> Qwen3Tts<T> {
    /// Loads `config.json`, `generation_config.json` and the talker and code predictor of
    /// `model.safetensors` from a folder in the published layout.
    pub fn load(
        dir: &Path,
        device: &T::Device,
        dtype: DType,
        options: &TalkerOptions,
    ) -> Result<Self, LoadError> {
        let config = Qwen3TtsConfig::from_file(&dir.join("config.json"))?;
        let generation = GenerationConfig::from_file(&dir.join("generation_config.json"))?;
        let ckpt = Checkpoint::open(&dir.join("model.safetensors"))?;
        let l = Loader::<T>::new(&ckpt, device, dtype);
        let t = &config.talker_config;
        let positions = options.max_positions.min(t.max_position_embeddings);
        let talker = Talker::load(
            &l.scoped(&keys::scope(keys::TALKER)),
            t,
            positions,
            options.quantize,
        )?;
        let predictor = CodePredictor::load(
            &l.scoped(&keys::scope(keys::CODE_PREDICTOR)),
            options.quantize,
            &t.code_predictor_config,
            t.hidden_size,
            (dtype, options.max_sessions),
        )?;
        let speaker_encoder = match config.tts_model_type {
            TtsModelType::Base => Some(SpeakerEncoder::load(
                &l.scoped(&keys::scope(keys::SPEAKER_ENCODER)),
                &config.speaker_encoder_config,
                device,
                dtype,
            )?),
            _ => None,
        };
        let kv = talker
            .decoder
            .new_pool(dtype, options.max_sessions, positions);
        let unused: Vec<String> = ckpt.unused_keys().into_iter().collect();
        if !unused.is_empty() {
            tracing::warn!(file = ckpt.files(), count = unused.len(), first = %unused[0], "checkpoint has tensors the model does not use");
        }
        let tts_pad = talker.text(&[config.tts_pad_token_id]);
        Ok(Qwen3Tts {
            _weights: ckpt.mmaps(),
            config,
            generation,
            talker,
            predictor,
            speaker_encoder,
            kv: RefCell::new(kv),
            tts_pad,
            device: device.clone(),
            dtype,
        })
    }

    /// Sessions that can start now: free slots of the talker's KV pool.
    pub fn free_slots(&self) -> usize {
        self.kv.borrow().free_slots()
    }

    /// The x-vector of a mono reference clip at 24 kHz; `None` for the variants that do not
    /// clone (no speaker encoder).
    pub fn x_vector(&self, clip: &[f32]) -> Option<Result<Vec<f32>, SpeakerMelError>> {
        let encoder = self.speaker_encoder.as_ref()?;
        Some(
            SpeakerMelFrontEnd::new()
                .compute(clip)
                .map(|mel| encoder.x_vector(&mel)),
        )
    }

    /// The prefill of `input`: its layout, the talker's input `[1, positions, hidden]`, and the
    /// trailing text `[trailing, hidden]`.
    pub fn prefill(&self, input: &PromptInput<'_>) -> Result<(PromptLayout, T, T), PromptError> {
        let layout = prompt::layout(&self.config, input)?;
        let (x, trailing) = self.embed(&layout, input.voice);
        Ok((layout, x, trailing))
    }

    /// [`Self::prefill`]'s tensors for a `layout` made for `voice`.
    fn embed(&self, layout: &PromptLayout, voice: Voice<'_>) -> (T, T) {
        let hidden = self.config.talker_config.hidden_size;
        let text_ids: Vec<u32> = layout.positions.iter().map(|p| p.text).collect();
        let text = self.talker.text(&text_ids);
        let codec_ids: Vec<u32> = layout
            .positions
            .iter()
            .filter_map(|p| match p.codec {
                Some(CodecInput::Id(id)) => Some(id),
                _ => None,
            })
            .collect();
        let codec = self.talker.codec(&codec_ids);
        let cloned = match voice {
            Voice::Cloned(v) => Some(v),
            _ => None,
        };
        let x_vector =
            cloned.map(|v| T::from_f32(&self.device, &v.x_vector, &[1, hidden], self.dtype));
        let reference = cloned
            .and_then(|v| v.reference.as_ref())
            .map(|r| self.sum_codebooks(&r.codes));
        let mut next_id = 0;
        let rows: Vec<T> = layout
            .positions
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let text = text.narrow(0, i, 1);
                let codec = match p.codec {
                    None => return text,
                    Some(CodecInput::Id(_)) => {
                        next_id += 1;
                        codec.narrow(0, next_id - 1, 1)
                    }
                    Some(CodecInput::XVector) => {
                        x_vector.clone().expect("layout checked the voice")
                    }
                    Some(CodecInput::RefFrame(k)) => reference
                        .as_ref()
                        .expect("layout checked the voice")
                        .narrow(0, k, 1),
                };
                text.add(&codec)
            })
            .collect();
        let prefill = T::cat(&rows.iter().collect::<Vec<_>>(), 0).reshape(&[1, rows.len(), hidden]);
        (prefill, self.talker.text(&layout.trailing))
    }

    /// Per frame of `codes` (16 codebooks each), the sum of its codebooks' embeddings:
    /// `E(c0) + Σ_k code_predictor.codec_embedding[k-1](c_k)`, `[frames, hidden]`.
    fn sum_codebooks(&self, codes: &[Vec<u32>]) -> T {
        let (frames, hidden) = (codes.len(), self.config.talker_config.hidden_size);
        let groups = self.config.talker_config.num_code_groups;
        let parts: Vec<T> = (0..groups)
            .map(|k| {
                let column: Vec<u32> = codes.iter().map(|f| f[k]).collect();
                let rows = if k == 0 {
                    self.talker.codec(&column)
                } else {
                    self.predictor.embed(k, &column)
                };
                rows.reshape(&[frames, 1, hidden])
            })
            .collect();
        T::cat(&parts.iter().collect::<Vec<_>>(), 1).sum_dim(1)
    }

    /// Prefills `input` and picks the first talker token.
    pub fn start(
        &self,
        input: &PromptInput<'_>,
        params: GenerationParams,
        uniforms: Uniforms,
    ) -> Result<Session<'_, T>, GenerateError> {
        if params.max_new_tokens == 0 {
            return Err(GenerateError::NoNewTokens);
        }
        let layout = prompt::layout(&self.config, input)?;
        let prompt = layout.positions.len();
        let mut kv = self.kv.borrow_mut();
        // The first token comes from the prefill, each later one from a step.
        if prompt + params.max_new_tokens - 1 > kv.positions() {
            return Err(GenerateError::TooLong {
                prompt,
                new: params.max_new_tokens,
                max: kv.positions(),
            });
        }
        let (x, trailing) = self.embed(&layout, input.voice);
        let mut slot = kv.acquire().ok_or(GenerateError::NoFreeSlot(kv.slots()))?;
        let hidden = self.talker.decoder.forward(&x, &mut kv, &mut [&mut slot]);
        drop(kv);
        let mut session = Session {
            model: self,
            slot,
            trailing,
            params,
            uniforms,
            tokens: Vec::new(),
            frames: Vec::new(),
            hidden: hidden.narrow(1, prompt - 1, 1),
            logits: Vec::new(),
            stop: None,
        };
        let logits = self.talker.logits(&session.hidden).to_vec_f32();
        session.choose(logits)?;
        Ok(session)
    }

    /// One frame for every session of `sessions` that has not stopped: the code predictor's
    /// codebooks 1..15, then one talker step, each for all of them together; the step picks
    /// each one's next token.
    pub fn step(&self, sessions: &mut [&mut Session<'_, T>]) -> Result<(), GenerateError> {
        let mut active: Vec<&mut Session<'_, T>> = sessions
            .iter_mut()
            .filter(|s| s.stop.is_none())
            .map(|s| &mut **s)
            .collect();
        if active.is_empty() {
            return Ok(());
        }
        let frames = self.predict_frames(&mut active, |_, _, picked| picked)?;
        self.advance(&mut active, frames)
    }

    /// A step fed the reference's frame instead of the session's own (teacher forcing, to
    /// measure how far a dtype's predictions drift from the reference's without compounding):
    /// each of codebooks 1..15 is predicted after the reference's token `c0` and codes before
    /// it, and the talker reads `reference`. Returns the predicted frame; the talker's next token is the session's
    /// last token. Runs whether or not the session has stopped.
    pub fn step_teacher_forced(
        &self,
        session: &mut Session<'_, T>,
        reference: &[u32],
    ) -> Result<Vec<u32>, GenerateError> {
        *session
            .tokens
            .last_mut()
            .expect("a started session has a token") = reference[0];
        let mut predicted = vec![reference[0]];
        self.predict_frames(&mut [&mut *session], |_, codebook, picked| {
            predicted.push(picked);
            reference[codebook]
        })?;
        self.advance(&mut [session], vec![reference.to_vec()])?;
        Ok(predicted)
    }

    /// Each session's next frame: its last token `c0`, then codebooks 1..15 from the code
    /// predictor, run for all of them together; each samples its codes with its own
    /// parameters and draws. `feed(row, codebook, picked)` gives the code that goes on.
    fn predict_frames(
        &self,
        sessions: &mut [&mut Session<'_, T>],
        mut feed: impl FnMut(usize, usize, u32) -> u32,
    ) -> Result<Vec<Vec<u32>>, GenerateError> {
        let (n, hidden) = (sessions.len(), self.config.talker_config.hidden_size);
        let c0: Vec<u32> = sessions
            .iter()
            .map(|s| *s.tokens.last().expect("a started session has a token"))
            .collect();
        let c0_embedding = self.talker.codec(&c0).reshape(&[n, 1, hidden]);
        let past_hidden = T::cat(&sessions.iter().map(|s| &s.hidden).collect::<Vec<_>>(), 0);
        let penalty = self
            .config
            .talker_config
            .code_predictor_config
            .repetition_penalty as f32;
        let codes = self
            .predictor
            .predict(&past_hidden, &c0_embedding, |r, logits, before| {
                let s = &mut *sessions[r];
                sampling::penalize(logits, before, penalty);
                let picked = sampling::pick(logits, &s.params.predictor, &mut s.uniforms)?;
                Ok(feed(r, before.len() + 1, picked))
            })?;
        Ok(c0
            .into_iter()
            .zip(codes)
            .map(|(c0, codes)| [vec![c0], codes].concat())
            .collect())
    }

    /// Feeds each session its frame (plus its next trailing text) in one talker step for
    /// all, which picks each one's next token.
    fn advance(
        &self,
        active: &mut [&mut Session<'_, T>],
        frames: Vec<Vec<u32>>,
    ) -> Result<(), GenerateError> {
        let hidden_size = self.config.talker_config.hidden_size;
        let mut inputs = Vec::with_capacity(active.len());
        for (s, frame) in active.iter_mut().zip(frames) {
            let text = match s.trailing.shape()[0] {
                n if s.frames.len() < n => s.trailing.narrow(0, s.frames.len(), 1),
                _ => self.tts_pad.clone(),
            };
            inputs.push(self.sum_codebooks(std::slice::from_ref(&frame)).add(&text));
            s.frames.push(frame);
        }
        let rows = inputs.len();
        let x = T::cat(&inputs.iter().collect::<Vec<_>>(), 0).reshape(&[rows, 1, hidden_size]);
        let hidden = {
            let mut kv = self.kv.borrow_mut();
            let mut slots: Vec<&mut KvSlot> = active.iter_mut().map(|s| &mut s.slot).collect();
            self.talker.decoder.forward(&x, &mut kv, &mut slots)
        };
        let logits = self.talker.logits(&hidden).to_vec_f32();
        let vocab = logits.len() / rows;
        for (r, s) in active.iter_mut().enumerate() {
            s.hidden = hidden.narrow(0, r, 1);
            s.choose(logits[r * vocab..(r + 1) * vocab].to_vec())?;
        }
        Ok(())
    }
}

/// One utterance in progress: a slot of the talker's KV pool, its tokens and frames.
pub struct Session<'m, T: Tensor> {
    model: &'m Qwen3Tts<T>,
    /// Given back when the session is dropped.
    slot: KvSlot,
    /// `R`, `[len, hidden]`: added to decode steps `0, 1, ...`.
    trailing: T,
    params: GenerationParams,
    uniforms: Uniforms,
    /// Talker tokens (codebook 0) so far; the last one has no frame yet.
    tokens: Vec<u32>,
    frames: Vec<Vec<u32>>,
    /// The talker's last normed hidden state, `[1, 1, hidden]`.
    hidden: T,
    /// The talker's raw logits at its last step.
    logits: Vec<f32>,
    stop: Option<StopReason>,
}

impl<T: Tensor> Session<'_, T> {
    /// Applies the talker's rules and sampling to its raw `logits`.
    fn choose(&mut self, logits: Vec<f32>) -> Result<(), GenerateError> {
        let t = &self.model.config.talker_config;
        let mut scores = logits.clone();
        self.logits = logits;
        let codes = t.code_predictor_config.vocab_size;
        sampling::talker_rules(
            &mut scores,
            &self.tokens,
            self.params.repetition_penalty,
            t.codec_eos_token_id,
            codes,
        );
        let token = sampling::pick(&mut scores, &self.params.talker, &mut self.uniforms)?;
        self.tokens.push(token);
        if token == t.codec_eos_token_id {
            self.stop = Some(StopReason::EndAudio);
        } else if self.tokens.len() >= self.params.max_new_tokens {
            self.stop = Some(StopReason::MaxFrames);
        }
        Ok(())
    }

    /// The next frame (16 codes), or `None` once the session has stopped.
    pub fn next_frame(&mut self) -> Result<Option<&[u32]>, GenerateError> {
        if self.stop.is_some() {
            return Ok(None);
        }
        let model = self.model;
        model.step(&mut [&mut *self])?;
        Ok(self.frames.last().map(Vec::as_slice))
    }

    /// The frames so far, 16 codes each.
    pub fn frames(&self) -> &[Vec<u32>] {
        &self.frames
    }

    /// Every talker token so far, the last one included (EOS, or one never given codes).
    pub fn tokens(&self) -> &[u32] {
        &self.tokens
    }

    pub fn stop(&self) -> Option<StopReason> {
        self.stop
    }

    /// Where its sampling draws come from, and what is left of them.
    pub fn uniforms(&self) -> &Uniforms {
        &self.uniforms
    }

    /// The talker's raw logits at its last step, before any rule.
    pub fn last_logits(&self) -> &[f32] {
        &self.logits
    }

    /// The talker's last normed hidden state (what the code predictor reads).
    pub fn last_hidden(&self) -> Vec<f32> {
        self.hidden.to_vec_f32()
    }
}

impl<T: Tensor> Drop for Session<'_, T> {
    fn drop(&mut self) {
        self.model.kv.borrow_mut().release(&self.slot);
    }
}
