//! XTTS-v2 behind the engine interface (`crate::engine`): the request-path preparer (language,
//! text cleaning and tokens, voice, the prompt's positions) and the worker's engine (GPT
//! sequences of every request stepped together, each sampling with its own state; HiFi-GAN).
//!
//! A voice is the GPT conditioning latents `[1, 32, D]` and the speaker embedding `[1, E, 1]`:
//! a studio speaker's from `speakers.safetensors`, or a custom voice's, as the voice encoder
//! (`voice_encoder.rs`) stores them under the same names.
//!
//! Decoding runs on the engine's vocoder thread (`vocoder.rs`), so the GPT's steps never wait
//! for HiFi-GAN: a finished segment decoded at once is the reference's one HiFi-GAN pass over
//! its latents; a streamed one goes through the bounded-window stream (`hifigan_stream.rs`),
//! whose samples equal the one-pass decode's.

use super::catalog::{self, CardInputs};
use super::checkpoint::{GPT_COND_LATENT, SPEAKER_EMBEDDING};
use super::conditioning::LATENTS;
use super::folder::XttsFolder;
use super::gpt::{GenerateError, GenerationParams, Gpt, GptSequence};
use super::gpt_config::GptConfig;
use super::hifigan::DecoderRates;
use super::text::{Language, TextError};
use super::tokenizer::XttsTokenizer;
use super::vocoder::{Request, SpeakerEmbedding, VocoderThread};
use crate::engine::{
    Conditioning, EngineError, EngineOptions, ModelCard, PcmSink, PrepareError, PreparedSpeech,
    Prompt, SpeechPreparer, SpeechSession, StopReason, TextToSpeech,
};
use crate::nn::layers::Loader;
use crate::nn::sampling::{Sampling, Uniforms};
use crate::nn::LoadError;
use crate::tensor::{DType, Tensor};
use std::cell::Cell;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::mpsc::{channel, Sender};
use std::sync::Arc;

/// The language of a request that names none: the studio voices are English.
pub const DEFAULT_LANGUAGE: &str = "en";

/// A voice as the GPT and HiFi-GAN take it.
#[derive(Clone, Debug, PartialEq)]
pub struct VoiceLatents {
    /// `[1, N, D]` row-major.
    pub gpt_cond_latent: Vec<f32>,
    pub latents: usize,
    pub speaker_embedding: Vec<f32>,
}

pub struct XttsEngine<T: Tensor> {
    gpt: Gpt<T>,
    vocoder: VocoderThread,
    /// Ids of streamed sessions on the vocoder thread.
    next_stream: Cell<u64>,
    studio: BTreeMap<String, VoiceLatents>,
    prompter: Arc<XttsPrompter>,
    defaults: GenerationParams,
    free_slots: Cell<usize>,
    cloning: bool,
    device: T::Device,
    dtype: DType,
    /// The memory-mapped checkpoint the weights point into.
    _folder: XttsFolder,
}

impl<T: Tensor> XttsEngine<T> {
    /// Loads a converted folder (`voxtral-tts convert`): `config.json`, `vocab.json`,
    /// `model.safetensors` and, when present, the studio voices of `speakers.safetensors`.
    pub fn load(
        dir: &Path,
        device: &T::Device,
        dtype: DType,
        options: &EngineOptions,
    ) -> Result<Self, LoadError> {
        options.cuda_graphs.not_captured(
            "xtts",
            "each GPT step's scores and latents are read to the host to sample, and the next codes and positions are uploaded",
        );
        let folder = XttsFolder::open(dir)?;
        let file = dir.join("config.json").display().to_string();
        let tokenizer = XttsTokenizer::from_file(&folder.vocab)?;
        let config = GptConfig::from_json(&folder.config, &file, &tokenizer)?;
        let rates = DecoderRates::from_config(&folder.config)?;
        let languages = config_languages(&folder.config, &file, &tokenizer)?;
        let loader = Loader::<T>::new(&folder.weights, device, dtype);
        let gpt = Gpt::load(&loader, config.clone(), options.quantize)?;
        let vocoder = VocoderThread::start::<T>(dir.to_path_buf(), device, dtype, rates)?;
        let a = &config.args;
        if vocoder.latent_dim != a.gpt_n_model_channels {
            return Err(LoadError::invalid(
                "model.safetensors",
                "hifigan_decoder.waveform_decoder.conv_pre.weight",
                format!(
                    "HiFi-GAN takes latents {} wide; the GPT's are {}",
                    vocoder.latent_dim, a.gpt_n_model_channels
                ),
            ));
        }
        let studio = folder
            .speakers
            .iter()
            .map(|(name, v)| {
                let voice = VoiceLatents {
                    gpt_cond_latent: v.gpt_cond_latent.clone(),
                    latents: v.latent_shape[1],
                    speaker_embedding: v.speaker_embedding.clone(),
                };
                check_voice(&voice, a.gpt_n_model_channels, vocoder.embedding_dim)
                    .map_err(|e| LoadError::invalid("speakers.safetensors", name, e))?;
                Ok((name.clone(), voice))
            })
            .collect::<Result<BTreeMap<_, _>, LoadError>>()?;
        let max_positions = LATENTS + a.gpt_max_text_tokens + 2 + a.max_codes();
        let slots = session_slots(&config, dtype, max_positions, options)?;
        let d = &config.defaults;
        let defaults = GenerationParams {
            sampling: Sampling {
                do_sample: true,
                temperature: d.temperature,
                top_k: d.top_k,
                top_p: d.top_p,
            },
            repetition_penalty: d.repetition_penalty,
            max_codes: None,
        };
        let cloning = folder
            .weights
            .keys()
            .iter()
            .any(|k| k.starts_with("hifigan_decoder.speaker_encoder."));
        let prompter = Arc::new(XttsPrompter {
            tokenizer,
            languages,
            studio: studio.keys().cloned().collect(),
            gpt_width: a.gpt_n_model_channels,
            embedding_width: vocoder.embedding_dim,
            max_text_tokens: a.gpt_max_text_tokens,
            max_positions,
            max_frames: a.max_codes(),
            sample_rate: rates.output_sample_rate,
            samples_per_frame: samples_per_code(&rates),
        });
        Ok(XttsEngine {
            gpt,
            vocoder,
            next_stream: Cell::new(0),
            studio,
            prompter,
            defaults,
            free_slots: Cell::new(slots),
            cloning,
            device: device.clone(),
            dtype,
            _folder: folder,
        })
    }
}

/// Output samples per GPT code, rounded: 1024 input samples at 22.05 kHz out at 24 kHz.
fn samples_per_code(rates: &DecoderRates) -> usize {
    (rates.code_stride_len as f64 * f64::from(rates.output_sample_rate)
        / f64::from(rates.input_sample_rate))
    .round() as usize
}

/// `config.json`'s `languages`, as the server names them; one the vocabulary has no tag for
/// is kept, and refused per request by the tokenizer.
fn config_languages(
    config: &serde_json::Value,
    file: &str,
    tokenizer: &XttsTokenizer,
) -> Result<Vec<String>, LoadError> {
    let invalid = |msg: String| LoadError::invalid(file, "languages", msg);
    let names = config["languages"]
        .as_array()
        .ok_or_else(|| invalid("missing or not a list".into()))?;
    names
        .iter()
        .map(|name| {
            let name = name
                .as_str()
                .ok_or_else(|| invalid(format!("{name} is not a string")))?;
            let language = Language::parse(name).map_err(|e| invalid(e.to_string()))?;
            if !tokenizer.speaks(language) {
                // As the reference: the folder loads, and a request in it fails.
                tracing::warn!(
                    language = name,
                    "vocab.json has no {} tag: requests in this language are refused",
                    language.tag()
                );
            }
            Ok(name.to_string())
        })
        .collect()
}

/// Sessions that may run at once: `max_sessions`, fewer when `kv_cache_bytes` cannot hold
/// that many caches at their longest (each sequence's keys and values grow as it decodes).
fn session_slots(
    config: &GptConfig,
    dtype: DType,
    max_positions: usize,
    options: &EngineOptions,
) -> Result<usize, LoadError> {
    let a = &config.args;
    let per_session = 2 * a.gpt_layers * a.gpt_n_model_channels * dtype.size() * max_positions;
    let fit = options.kv_cache_bytes / per_session.max(1);
    if fit == 0 {
        return Err(LoadError::invalid(
            "(settings)",
            "kv_cache_budget_mib",
            format!(
                "{} bytes hold no XTTS-v2 sequence of {max_positions} positions ({per_session} \
                 bytes in {dtype}); raise it",
                options.kv_cache_bytes
            ),
        ));
    }
    Ok(options.max_sessions.max(1).min(fit))
}

/// Why a voice's tensors do not fit this model, if they do not.
fn check_voice(voice: &VoiceLatents, gpt_width: usize, embedding: usize) -> Result<(), String> {
    if voice.latents == 0 || voice.gpt_cond_latent.len() != voice.latents * gpt_width {
        return Err(format!(
            "its {GPT_COND_LATENT} has {} values, not [1, N, {gpt_width}]",
            voice.gpt_cond_latent.len()
        ));
    }
    if voice.speaker_embedding.len() != embedding {
        return Err(format!(
            "its {SPEAKER_EMBEDDING} has {} values; this model's are {embedding} wide",
            voice.speaker_embedding.len()
        ));
    }
    Ok(())
}

/// A custom voice's tensors (as `voice_encoder.rs` stores them), checked against the model.
pub fn custom_voice_latents(
    tensors: &crate::engine::VoiceTensors,
    gpt_width: usize,
    embedding: usize,
) -> Result<VoiceLatents, String> {
    let (shape, latent) = tensors
        .f32(GPT_COND_LATENT)
        .ok_or_else(|| format!("it has no {GPT_COND_LATENT}"))?;
    let (_, speaker) = tensors
        .f32(SPEAKER_EMBEDDING)
        .ok_or_else(|| format!("it has no {SPEAKER_EMBEDDING}"))?;
    let voice = VoiceLatents {
        gpt_cond_latent: latent.to_vec(),
        latents: if shape.len() == 3 { shape[1] } else { 0 },
        speaker_embedding: speaker.to_vec(),
    };
    check_voice(&voice, gpt_width, embedding)?;
    Ok(voice)
}

/// The request-path half: language, text and voice checked, the prompt counted.
pub struct XttsPrompter {
    tokenizer: XttsTokenizer,
    /// `config.json`'s language names.
    languages: Vec<String>,
    studio: Vec<String>,
    gpt_width: usize,
    embedding_width: usize,
    max_text_tokens: usize,
    max_positions: usize,
    max_frames: usize,
    sample_rate: u32,
    samples_per_frame: usize,
}

impl XttsPrompter {
    /// The language a request speaks, as the tokenizer takes it: one of `config.json`'s
    /// (`en`, `zh-cn`; a region such as `en-US` is cut as the reference does, any case).
    fn language(&self, conditioning: &Conditioning) -> Result<String, PrepareError> {
        let requested = conditioning
            .language
            .as_deref()
            .map(str::trim)
            .unwrap_or(DEFAULT_LANGUAGE)
            .to_lowercase();
        let invalid = || PrepareError::Invalid {
            param: "language",
            message: format!(
                "XTTS-v2 does not speak the language '{requested}'; it speaks: {}.",
                self.languages.join(", ")
            ),
        };
        let parsed = Language::parse(&requested).map_err(|_| invalid())?;
        self.languages
            .iter()
            .find(|name| Language::parse(name).ok() == Some(parsed))
            .cloned()
            .ok_or_else(invalid)
    }

    /// The voice's latents count, checking a custom voice or the preset's name.
    fn voice_latents(
        &self,
        voice: &str,
        conditioning: &Conditioning,
    ) -> Result<usize, PrepareError> {
        if let Some(custom) = conditioning.custom_voice.as_deref() {
            let latents =
                custom_voice_latents(&custom.tensors, self.gpt_width, self.embedding_width)
                    .map_err(|e| PrepareError::Invalid {
                        param: "voice",
                        message: format!("Custom voice '{}' cannot be used: {e}.", custom.id),
                    })?;
            return Ok(latents.latents);
        }
        if self.studio.iter().any(|name| name == voice) {
            return Ok(LATENTS);
        }
        Err(PrepareError::UnknownVoice(voice.to_string()))
    }

    /// The text ids of one segment as `Xtts.inference` encodes it.
    fn text_ids(&self, text: &str, language: &str) -> Result<Vec<u32>, PrepareError> {
        let encoded = self
            .tokenizer
            .encode_sentence(text, language)
            .map_err(text_error)?;
        if encoded.ids.len() >= self.max_text_tokens {
            return Err(PrepareError::Invalid {
                param: "input",
                message: format!(
                    "a segment is {} text tokens long; XTTS-v2 takes fewer than {} per \
                     generation: lower segment_chars or split the text into sentences",
                    encoded.ids.len(),
                    self.max_text_tokens
                ),
            });
        }
        Ok(encoded.ids)
    }
}

fn text_error(e: TextError) -> PrepareError {
    PrepareError::Invalid {
        param: e.param(),
        message: e.to_string(),
    }
}

impl SpeechPreparer for XttsPrompter {
    fn prompt(
        &self,
        text: &str,
        voice: &str,
        conditioning: &Conditioning,
    ) -> Result<Prompt, PrepareError> {
        let language = self.language(conditioning)?;
        let latents = self.voice_latents(voice, conditioning)?;
        let ids = self.text_ids(text, &language)?;
        // The conditioning latents, `[START] text [STOP]`, the start code.
        let positions = latents + ids.len() + 2 + 1;
        Ok(Prompt { ids, positions })
    }

    fn max_positions(&self) -> usize {
        self.max_positions
    }
}

impl From<GenerateError> for EngineError {
    fn from(e: GenerateError) -> Self {
        EngineError(e.to_string())
    }
}

/// Gives its slot back when dropped.
struct Slot<'m>(&'m Cell<usize>);

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        self.0.set(self.0.get() + 1);
    }
}

/// One segment's generation: its GPT sequence, the voice's speaker embedding for HiFi-GAN,
/// and, once streaming began, how many latents its stream on the vocoder thread was given.
pub struct XttsSession<'m, T: Tensor> {
    sequence: GptSequence<T>,
    prompt_ids: Vec<u32>,
    /// One single-code frame per code (the stop code included: its latent is decoded too).
    frames: Vec<Vec<u32>>,
    speaker: SpeakerEmbedding,
    /// Its stream's id on the vocoder thread, which the session closes when dropped.
    stream: u64,
    /// Latents given to that stream so far; `None` until streaming began.
    streamed: Cell<Option<usize>>,
    vocoder: Sender<Request>,
    stop_code: u32,
    _slot: Slot<'m>,
}

impl<T: Tensor> Drop for XttsSession<'_, T> {
    fn drop(&mut self) {
        if self.streamed.get().is_some() {
            let _ = self.vocoder.send(Request::Close {
                stream: self.stream,
            });
        }
    }
}

impl<T: Tensor> SpeechSession for XttsSession<'_, T> {
    fn prompt_ids(&self) -> &[u32] {
        &self.prompt_ids
    }

    fn codes(&self) -> &[Vec<u32>] {
        &self.frames
    }

    fn stop_reason(&self) -> Option<StopReason> {
        if !self.sequence.is_done() {
            return None;
        }
        Some(if self.sequence.codes().last() == Some(&self.stop_code) {
            StopReason::EndAudio
        } else {
            StopReason::MaxFrames
        })
    }
}

impl<T: Tensor> TextToSpeech for XttsEngine<T> {
    type Session<'m>
        = XttsSession<'m, T>
    where
        T: 'm;

    fn card(&self) -> ModelCard {
        let p = &self.prompter;
        catalog::card(CardInputs {
            speakers: self.studio.keys().cloned().collect(),
            languages: &p.languages,
            cloning: self.cloning,
            sample_rate: p.sample_rate,
            samples_per_frame: p.samples_per_frame,
            max_frames: p.max_frames,
        })
    }

    fn preparer(&self) -> Arc<dyn SpeechPreparer> {
        self.prompter.clone()
    }

    fn free_slots(&self) -> usize {
        self.free_slots.get()
    }

    fn start_session<'m>(
        &'m self,
        speech: &PreparedSpeech,
        segment: usize,
    ) -> Result<XttsSession<'m, T>, EngineError> {
        let free = self.free_slots.get();
        if free == 0 {
            return Err(EngineError("no free session slot".into()));
        }
        let voice = self.voice(speech)?;
        let ids = &speech.segments[segment].prompt.ids;
        let mut params = self.defaults;
        params.max_codes = Some(speech.max_frames.min(self.prompter.max_frames));
        match speech.sampling.temperature {
            Some(t) if t <= 0.0 => params.sampling = Sampling::GREEDY,
            Some(t) => params.sampling.temperature = t,
            None => {}
        }
        let cond = T::from_f32(
            &self.device,
            &voice.gpt_cond_latent,
            &[1, voice.latents, self.prompter.gpt_width],
            self.dtype,
        );
        let seed = speech.sampling.seed.wrapping_add(segment as u64);
        let sequence = self
            .gpt
            .start(&cond, ids, &params, Uniforms::seeded(seed))?;
        let stream = self.next_stream.get();
        self.next_stream.set(stream + 1);
        self.free_slots.set(free - 1);
        Ok(XttsSession {
            sequence,
            prompt_ids: ids.clone(),
            frames: Vec::new(),
            speaker: voice.speaker_embedding.into(),
            stream,
            streamed: Cell::new(None),
            vocoder: self.vocoder.sender(),
            stop_code: self.gpt.config().args.gpt_stop_audio_token,
            _slot: Slot(&self.free_slots),
        })
    }

    fn step(&self, batch: &mut [&mut XttsSession<'_, T>]) -> Result<(), EngineError> {
        let mut sequences: Vec<&mut GptSequence<T>> =
            batch.iter_mut().map(|s| &mut s.sequence).collect();
        self.gpt.step(&mut sequences)?;
        for session in batch.iter_mut() {
            let codes = session.sequence.codes();
            let known = session.frames.len();
            session
                .frames
                .extend(codes[known..].iter().map(|&code| vec![code]));
        }
        Ok(())
    }

    /// Waits for the vocoder thread (`bench`'s timings); the worker uses `decode_into`.
    fn decode(&self, session: &XttsSession<'_, T>, from: usize) -> Result<Vec<f32>, EngineError> {
        let (sent, pcm) = channel();
        let sink = PcmSink::new(
            move |decoded| {
                let _ = sent.send(decoded);
            },
            || true,
        );
        self.decode_into(vec![(session, from, sink)]);
        pcm.recv()
            .unwrap_or_else(|_| Err(EngineError("the vocoder thread stopped".into())))
    }

    /// Hands each session's new latents to the vocoder thread and returns at once.
    fn decode_into(&self, work: Vec<(&XttsSession<'_, T>, usize, PcmSink)>) {
        let dim = self.prompter.gpt_width;
        for (session, from, sink) in work {
            let total = session.frames.len();
            let latents = session.sequence.latents();
            let speaker = session.speaker.clone();
            let done = session.sequence.is_done();
            let request = match session.streamed.get() {
                None if from == 0 && done => Request::Whole {
                    latents: latents[..total * dim].to_vec(),
                    speaker,
                    sink,
                },
                Some(pushed) if pushed != from => {
                    sink.deliver(Err(EngineError(format!(
                        "decoding from code {from}, but the stream has been given {pushed}"
                    ))));
                    continue;
                }
                _ => {
                    session.streamed.set(Some(total));
                    Request::Push {
                        stream: session.stream,
                        latents: latents[from * dim..total * dim].to_vec(),
                        finish: done,
                        speaker,
                        sink,
                    }
                }
            };
            self.vocoder.send(request);
        }
    }
}

impl<T: Tensor> XttsEngine<T> {
    /// The voice a request speaks with: its custom voice, or a studio speaker.
    fn voice(&self, speech: &PreparedSpeech) -> Result<VoiceLatents, EngineError> {
        if let Some(custom) = speech.conditioning.custom_voice.as_deref() {
            return custom_voice_latents(
                &custom.tensors,
                self.prompter.gpt_width,
                self.prompter.embedding_width,
            )
            .map_err(EngineError);
        }
        self.studio
            .get(&speech.voice)
            .cloned()
            .ok_or_else(|| EngineError(format!("unknown voice {:?}", speech.voice)))
    }
}
