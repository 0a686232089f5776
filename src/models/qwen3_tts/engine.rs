//! Qwen3-TTS behind the engine interface (`crate::engine`): the request-path preparer (text
//! and instruction tokens, language, voice, the prompt's positions) and the worker's engine
//! (talker and code predictor sessions stepped together, the speech-tokenizer decoder).
//!
//! Decoding: a finished utterance decoded at once goes through the official chunked decode
//! (300 frames, 25 of context); a streamed one through the stateful decoder, chunk by chunk,
//! which equals a one-pass decode (the two agree to f32 rounding over the first 300
//! frames). An in-context voice's reference frames are decoded first and cut off, as the
//! official code does.

use super::catalog;
use super::config::{Qwen3TtsConfig, SpeechTokenizerConfig, TtsModelType};
use super::model::{GenerateError, Qwen3Tts, Session, TalkerOptions};
use super::prompt::{
    self, instruct_text, target_text, ClonedVoice, PromptError, PromptInput, Reference, TextLayout,
    Voice,
};
use super::sampling::{GenerationParams, Uniforms};
use super::speech_decoder::{official_reference_cut, DecoderStream, SpeechDecoder};
use crate::engine::{
    Conditioning, CustomVoice, EngineError, EngineOptions, ModelCard, PrepareError, PreparedSpeech,
    Prompt, SpeechPreparer, SpeechSession, StopReason, TextToSpeech,
};
use crate::nn::LoadError;
use crate::tensor::{DType, Tensor};
use crate::tokenizers::qwen2::Qwen2Tokenizer;
use std::cell::RefCell;
use std::path::Path;
use std::sync::Arc;

/// Most frames one request may ask for (164 s of audio at 12.5 frames a second), unless the
/// folder's `generation_config.json` allows fewer.
const MAX_FRAMES: usize = 2048;

/// Names of a custom voice's tensors, as the Base encoder writes them.
pub const X_VECTOR: &str = "x_vector";
pub const REF_CODES: &str = "ref_codes";
pub const REF_TEXT_IDS: &str = "ref_text_ids";

pub struct Qwen3Engine<T: Tensor> {
    model: Qwen3Tts<T>,
    decoder: SpeechDecoder<T>,
    prompter: Arc<Qwen3Prompter>,
    sample_rate: u32,
}

impl<T: Tensor> Qwen3Engine<T> {
    /// Loads a published folder: `config.json`, `generation_config.json`,
    /// `model.safetensors`, the text tokenizer and `speech_tokenizer/`'s decoder.
    pub fn load(
        dir: &Path,
        device: &T::Device,
        dtype: DType,
        options: &EngineOptions,
    ) -> Result<Self, LoadError> {
        options.cuda_graphs.not_captured(
            "qwen3_tts",
            "the talker's logits and each of the code predictor's 15 passes are sampled on the host, and each sampled code is uploaded for the next pass",
        );
        let config = Qwen3TtsConfig::from_file(&dir.join("config.json"))?;
        let talker = talker_options(&config, dtype, options)?;
        let model = Qwen3Tts::<T>::load(dir, device, dtype, &talker)?;
        let speech_dir = dir.join("speech_tokenizer");
        let codec = SpeechTokenizerConfig::from_file(&speech_dir.join("config.json"))?;
        // bf16 convolutions have no fast path on most CPUs (without AVX512-BF16, oneDNN falls
        // back to a reference loop, 100 times slower in `bench`); the decoder's weights are small.
        let decoder_dtype = if T::is_cpu(device) { DType::F32 } else { dtype };
        let decoder = SpeechDecoder::<T>::load(&speech_dir, device, decoder_dtype)?;
        let tokenizer = Qwen2Tokenizer::from_folder(dir)?;
        let max_frames = MAX_FRAMES.min(model.generation.max_new_tokens.saturating_sub(1));
        let prompter = Arc::new(Qwen3Prompter {
            config: model.config.clone(),
            tokenizer,
            max_positions: talker.max_positions,
            max_frames,
        });
        Ok(Qwen3Engine {
            model,
            decoder,
            prompter,
            sample_rate: codec.output_sample_rate,
        })
    }
}

/// The talker's KV pool for `options`: `max_sessions` slots sharing `kv_cache_bytes`, each
/// of at most the model's positions.
fn talker_options(
    config: &Qwen3TtsConfig,
    dtype: DType,
    options: &EngineOptions,
) -> Result<TalkerOptions, LoadError> {
    let t = &config.talker_config;
    let slots = options.max_sessions.max(1);
    let per_position = 2 * t.num_hidden_layers * t.num_key_value_heads * t.head_dim * dtype.size();
    let positions = (options.kv_cache_bytes / slots / per_position).min(t.max_position_embeddings);
    // A short prompt and a few frames at the least.
    if positions < 64 {
        return Err(LoadError::invalid(
            "(settings)",
            "kv_cache_budget_mib",
            format!(
                "{} bytes for {slots} sessions leave {positions} positions each ({per_position} bytes per position in {dtype}); raise it or lower max_batch_size",
                options.kv_cache_bytes
            ),
        ));
    }
    Ok(TalkerOptions {
        max_sessions: slots,
        max_positions: positions,
        quantize: options.quantize,
    })
}

/// The request-path half: tokens, language, voice and instructions checked and counted.
pub struct Qwen3Prompter {
    config: Qwen3TtsConfig,
    tokenizer: Qwen2Tokenizer,
    max_positions: usize,
    max_frames: usize,
}

impl Qwen3Prompter {
    /// The config's language name for a request's language: a name (any case), a BCP 47
    /// code, or "auto" (also for none).
    fn language(&self, requested: Option<&str>) -> Result<String, PrepareError> {
        let Some(requested) = requested.map(str::trim) else {
            return Ok("auto".into());
        };
        let known = self.config.supported_languages();
        let name = catalog::language_name(requested).unwrap_or(requested);
        known
            .iter()
            .find(|k| k.eq_ignore_ascii_case(name))
            .map(|k| k.to_string())
            .ok_or_else(|| PrepareError::Invalid {
                param: "language",
                message: format!(
                    "Unknown language '{requested}'. This model speaks: {} (or their codes: {}).",
                    known.join(", "),
                    catalog::language_codes(&known).join(", ")
                ),
            })
    }

    /// The tokenized instruction, for the models that read one (VoiceDesign, 1.7B
    /// CustomVoice); others drop it, as the official wrappers do.
    fn instruct_ids(&self, conditioning: &Conditioning) -> Option<Vec<u32>> {
        let text = conditioning.instructions.as_deref().map(str::trim)?;
        let reads = match self.config.tts_model_type {
            TtsModelType::VoiceDesign => true,
            TtsModelType::CustomVoice => !self.config.ignores_instruct(),
            TtsModelType::Base => false,
        };
        (reads && !text.is_empty()).then(|| self.tokenizer.encode(&instruct_text(text)))
    }

    /// What a request's conditioning gives every segment's prompt, checked.
    fn request_inputs(&self, conditioning: &Conditioning) -> Result<RequestInputs, PrepareError> {
        Ok(RequestInputs {
            language: self.language(conditioning.language.as_deref())?,
            instruct: self.instruct_ids(conditioning),
            cloned: cloned_voice(self.config.tts_model_type, conditioning)?,
            model_type: self.config.tts_model_type,
        })
    }
}

/// A request's language, instruction and cloned voice, as a segment's prompt takes them: the
/// preparer counts the prompt from them, the engine prefills it.
struct RequestInputs {
    language: String,
    instruct: Option<Vec<u32>>,
    cloned: Option<ClonedVoice>,
    model_type: TtsModelType,
}

impl RequestInputs {
    fn prompt<'a>(&'a self, text_ids: &'a [u32], voice: &'a str) -> PromptInput<'a> {
        PromptInput {
            text_ids,
            instruct_ids: self.instruct.as_deref(),
            language: &self.language,
            voice: speaker(self.model_type, voice, self.cloned.as_ref()),
            layout: TextLayout::default_for(self.model_type),
        }
    }
}

impl SpeechPreparer for Qwen3Prompter {
    fn prompt(
        &self,
        text: &str,
        voice: &str,
        conditioning: &Conditioning,
    ) -> Result<Prompt, PrepareError> {
        let ids = self.tokenizer.encode(&target_text(text));
        let inputs = self.request_inputs(conditioning)?;
        let layout = prompt::layout(&self.config, &inputs.prompt(&ids, voice));
        let positions = layout.map_err(prepare_error)?.positions.len();
        Ok(Prompt { ids, positions })
    }

    fn max_positions(&self) -> usize {
        self.max_positions
    }
}

/// Who speaks a request, by model type: a preset, the instruction's voice, or a clone.
fn speaker<'a>(model: TtsModelType, voice: &'a str, cloned: Option<&'a ClonedVoice>) -> Voice<'a> {
    match (model, cloned) {
        (_, Some(cloned)) => Voice::Cloned(cloned),
        (TtsModelType::VoiceDesign, None) => Voice::Designed,
        _ => Voice::Speaker(voice),
    }
}

/// A custom voice's tensors as the prompt takes them; `None` without one. Only Base clones.
fn cloned_voice(
    model: TtsModelType,
    conditioning: &Conditioning,
) -> Result<Option<ClonedVoice>, PrepareError> {
    let invalid = |message: String| PrepareError::Invalid {
        param: "voice",
        message,
    };
    let Some(voice) = conditioning.custom_voice.as_deref() else {
        return match model {
            TtsModelType::Base => Err(invalid(
                "This Base model speaks only with custom voices: create one from a clip with \
                 POST /v1/audio/voices and pass its id as voice: {\"id\": \"voice_...\"}."
                    .into(),
            )),
            _ => Ok(None),
        };
    };
    if model != TtsModelType::Base {
        return Err(invalid(format!(
            "Voice '{}' is a custom voice; this model has only preset voices.",
            voice.id
        )));
    }
    voice_tensors(voice)
        .map(Some)
        .map_err(|e| invalid(format!("Custom voice '{}' cannot be used: {e}.", voice.id)))
}

/// `x_vector`, and for an in-context voice `ref_codes` and `ref_text_ids`.
pub(super) fn voice_tensors(voice: &CustomVoice) -> Result<ClonedVoice, String> {
    let t = &voice.tensors;
    let (_, x_vector) = t.f32(X_VECTOR).ok_or("it has no x_vector")?;
    let reference = match (t.i64(REF_CODES), t.i64(REF_TEXT_IDS)) {
        (None, None) => None,
        (Some((shape, codes)), Some((_, text))) => {
            let width = *shape
                .last()
                .filter(|_| shape.len() == 2)
                .ok_or("bad ref_codes")?;
            let to_u32 = |v: &i64| u32::try_from(*v).map_err(|_| format!("bad id {v}"));
            Some(Reference {
                text_ids: text.iter().map(to_u32).collect::<Result<_, _>>()?,
                codes: codes
                    .chunks(width)
                    .map(|frame| frame.iter().map(to_u32).collect())
                    .collect::<Result<_, _>>()?,
            })
        }
        _ => return Err("it has ref_codes or ref_text_ids without the other".into()),
    };
    Ok(ClonedVoice {
        x_vector: x_vector.to_vec(),
        reference,
    })
}

/// A prompt error as the request's fault, naming the field.
fn prepare_error(e: PromptError) -> PrepareError {
    match e {
        PromptError::UnknownSpeaker(name, _) => PrepareError::UnknownVoice(name),
        PromptError::UnknownLanguage(..) => PrepareError::Invalid {
            param: "language",
            message: e.to_string(),
        },
        PromptError::TooShort { .. } | PromptError::TextId { .. } => PrepareError::Invalid {
            param: "input",
            message: e.to_string(),
        },
        _ => PrepareError::Invalid {
            param: "voice",
            message: e.to_string(),
        },
    }
}

impl From<GenerateError> for EngineError {
    fn from(e: GenerateError) -> Self {
        EngineError(e.to_string())
    }
}

/// One segment's session and how much of it has been decoded.
pub struct Qwen3Session<'m, T: Tensor> {
    session: Session<'m, T>,
    prompt_ids: Vec<u32>,
    /// An in-context voice's reference frames: decoded before the generated ones.
    reference: Option<Vec<Vec<u32>>>,
    /// The streaming decoder and the frames it has decoded, once streaming began.
    stream: RefCell<Option<(DecoderStream<T>, usize)>>,
}

impl<T: Tensor> SpeechSession for Qwen3Session<'_, T> {
    fn prompt_ids(&self) -> &[u32] {
        &self.prompt_ids
    }

    fn codes(&self) -> &[Vec<u32>] {
        self.session.frames()
    }

    fn stop_reason(&self) -> Option<StopReason> {
        self.session.stop()
    }
}

impl<T: Tensor> TextToSpeech for Qwen3Engine<T> {
    type Session<'m>
        = Qwen3Session<'m, T>
    where
        T: 'm;

    fn card(&self) -> ModelCard {
        let p = &self.prompter;
        catalog::card(
            &p.config,
            self.sample_rate,
            self.decoder.samples_per_frame(),
            p.max_frames,
        )
    }

    fn preparer(&self) -> Arc<dyn SpeechPreparer> {
        self.prompter.clone()
    }

    fn free_slots(&self) -> usize {
        self.model.free_slots()
    }

    fn start_session<'m>(
        &'m self,
        speech: &PreparedSpeech,
        segment: usize,
    ) -> Result<Qwen3Session<'m, T>, EngineError> {
        let ids = &speech.segments[segment].prompt.ids;
        let inputs = self
            .prompter
            .request_inputs(&speech.conditioning)
            .map_err(|e| EngineError(e.to_string()))?;
        let input = inputs.prompt(ids, &speech.voice);
        let mut params = GenerationParams::from_config(&self.model.generation);
        // The official `max_new_tokens` M gives at most M - 1 frames.
        params.max_new_tokens = speech.max_frames + 1;
        match speech.sampling.temperature {
            Some(t) if t <= 0.0 => params = params.greedy(),
            Some(t) => params.talker.temperature = t,
            None => {}
        }
        let seed = speech.sampling.seed.wrapping_add(segment as u64);
        let session = self.model.start(&input, params, Uniforms::seeded(seed))?;
        Ok(Qwen3Session {
            session,
            prompt_ids: ids.clone(),
            reference: inputs.cloned.and_then(|c| c.reference).map(|r| r.codes),
            stream: RefCell::new(None),
        })
    }

    fn step(&self, batch: &mut [&mut Qwen3Session<'_, T>]) -> Result<(), EngineError> {
        let mut sessions: Vec<&mut Session<'_, T>> =
            batch.iter_mut().map(|s| &mut s.session).collect();
        Ok(self.model.step(&mut sessions)?)
    }

    fn decode(&self, session: &Qwen3Session<'_, T>, from: usize) -> Result<Vec<f32>, EngineError> {
        let frames = session.session.frames();
        let codes_error = |e: super::speech_decoder::CodesError| EngineError(e.to_string());
        let mut stream = session.stream.borrow_mut();
        if from == 0 && stream.is_none() && session.session.stop().is_some() {
            return self.decode_whole(session.reference.as_deref(), frames);
        }
        if stream.is_none() {
            let mut fresh = self.decoder.new_stream();
            if let Some(reference) = &session.reference {
                // Its samples are the reference clip's own: they only set the context.
                self.decoder
                    .decode_chunk(&mut fresh, reference)
                    .map_err(codes_error)?;
            }
            *stream = Some((fresh, 0));
        }
        let (stream, decoded) = stream.as_mut().expect("set above");
        if from != *decoded {
            return Err(EngineError(format!(
                "decoding from frame {from}, but the stream has decoded {decoded}"
            )));
        }
        let pcm = self
            .decoder
            .decode_chunk(stream, &frames[from..])
            .map_err(codes_error)?;
        *decoded = frames.len();
        Ok(pcm)
    }
}

impl<T: Tensor> Qwen3Engine<T> {
    /// A finished utterance as the official `decode` gives it, an in-context voice's
    /// reference decoded in front and cut off by the official proportion.
    fn decode_whole(
        &self,
        reference: Option<&[Vec<u32>]>,
        frames: &[Vec<u32>],
    ) -> Result<Vec<f32>, EngineError> {
        let codes_error = |e: super::speech_decoder::CodesError| EngineError(e.to_string());
        let Some(reference) = reference else {
            return self.decoder.decode(frames).map_err(codes_error);
        };
        let all: Vec<Vec<u32>> = reference.iter().chain(frames).cloned().collect();
        let wav = self.decoder.decode(&all).map_err(codes_error)?;
        let cut = official_reference_cut(reference.len(), all.len(), wav.len());
        Ok(wav[cut..].to_vec())
    }
}
