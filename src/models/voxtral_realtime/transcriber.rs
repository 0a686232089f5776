//! Offline transcription (spec §5–§7): the whole utterance padded as mistral-common pads it,
//! one mel, encoder and adapter pass, then greedy decoding of one token per 80 ms position.
//!
//! Decoding: the prompt (`<s>` and the streaming pads) prefills positions `0..P`; the output at
//! position `p` is `argmax(logits[p])` (the first maximum) and is fed at `p + 1` with that
//! position's audio embedding. It stops after `</s>` (which is not fed back) or after the
//! output of the last audio position, so an utterance of `n` positions yields at most
//! `n − P + 1` tokens, as mlx-audio and the spec's oracle decode. transformers' `generate`
//! stops one token earlier (at `max_length = n`); vLLM's offline path goes on past the audio
//! on zero embeddings, which is not reproduced.

use super::audio_tower::AudioTower;
use super::mel::{MelError, MelFrontEnd};
use super::params::Config;
use super::prompt::SpecialIds;
use super::text_decoder::TextDecoder;
use crate::nn::checkpoint::Checkpoint;
use crate::nn::kv_pool::{KvPool, KvSlot};
use crate::nn::layers::Loader;
use crate::nn::LoadError;
use crate::tensor::quantized::QuantFormat;
use crate::tensor::{DType, Tensor};
use crate::tokenizers::tekken::Tekken;
use std::path::Path;

/// What one utterance decodes to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Transcript {
    /// Every token decoded, one per position from the prompt's last: streaming pads and
    /// words, and the final `</s>` when decoding stopped on it.
    pub tokens: Vec<u32>,
    /// The tokens' text, special tokens dropped.
    pub text: String,
}

#[derive(Debug, thiserror::Error)]
pub enum TranscribeError {
    #[error(
        "the audio is too long: {seconds:.2} s takes {positions} positions (padding included), \
         the model was loaded for {max_positions}"
    )]
    TooLong {
        seconds: f64,
        positions: usize,
        max_positions: usize,
    },
    #[error(transparent)]
    Mel(#[from] MelError),
    #[error("this model cannot transcribe a stream: {0}")]
    NotStreamable(&'static str),
}

/// A Voxtral Realtime folder loaded for offline transcription.
pub struct Transcriber<T: Tensor> {
    pub config: Config,
    pub tokenizer: Tekken,
    pub special: SpecialIds,
    pub(super) tower: AudioTower<T>,
    pub(super) decoder: TextDecoder<T>,
    pub(super) mel: MelFrontEnd,
    pub(super) dtype: DType,
    max_positions: usize,
}

impl<T: Tensor> Transcriber<T> {
    /// Loads `dir` (params.json, tekken.json, consolidated.safetensors) for utterances of up
    /// to `max_positions` decoder positions, padding included
    /// ([`Streaming::offline_positions`](super::params::Streaming::offline_positions)).
    pub fn load(
        dir: &Path,
        device: &T::Device,
        dtype: DType,
        max_positions: usize,
    ) -> Result<Self, LoadError> {
        Self::load_quantized(dir, device, dtype, max_positions, None)
    }

    /// [`Transcriber::load`] with the encoder's, adapter's and decoder's linear weights stored
    /// in `quantize` where the backend multiplies that format.
    pub fn load_quantized(
        dir: &Path,
        device: &T::Device,
        dtype: DType,
        max_positions: usize,
        quantize: Option<QuantFormat>,
    ) -> Result<Self, LoadError> {
        let config = Config::load(dir)?;
        let tekken_path = dir.join("tekken.json");
        let tekken_file = tekken_path.display().to_string();
        let tokenizer = Tekken::from_file(&tekken_path)
            .map_err(|e| LoadError::invalid(&tekken_file, "(tokenizer)", e.to_string()))?;
        if tokenizer.vocab_size() != config.args.vocab_size {
            return Err(LoadError::invalid(
                &tekken_file,
                "config.default_vocab_size",
                format!(
                    "{}, but params.json's vocab_size is {}",
                    tokenizer.vocab_size(),
                    config.args.vocab_size
                ),
            ));
        }
        let special = SpecialIds::resolve(&tokenizer, &tekken_file)?;
        let ckpt = Checkpoint::open(&dir.join("consolidated.safetensors"))?;
        let frames = max_positions * config.encoder.downsample_factor;
        let tower = AudioTower::from_checkpoint(&ckpt, &config, device, dtype, frames, quantize)?;
        let decoder = TextDecoder::load(
            &Loader::<T>::new(&ckpt, device, dtype),
            &config,
            max_positions,
            quantize,
        )?;
        Ok(Transcriber {
            mel: MelFrontEnd::new(&config.mel),
            config,
            tokenizer,
            special,
            tower,
            decoder,
            dtype,
            max_positions,
        })
    }

    /// One audio embedding per decoder position, `[1, positions, dim]`, for mono `audio` at
    /// the model's rate.
    pub fn audio_embeddings(&self, audio: &[f32]) -> Result<T, TranscribeError> {
        let positions = self.config.streaming.offline_positions(audio.len());
        if positions > self.max_positions {
            return Err(TranscribeError::TooLong {
                seconds: audio.len() as f64 / f64::from(self.config.mel.sample_rate),
                positions,
                max_positions: self.max_positions,
            });
        }
        let padded = self.config.streaming.pad_offline(audio);
        let mel = self.mel.compute(&padded)?;
        Ok(self.tower.embed(&mel).embeddings)
    }

    /// Greedy decoding over `embeddings` `[1, positions, dim]` (see the module docs); `observe`
    /// sees the logits `[1, vocab]` of every decoded position, in order.
    pub fn greedy(&self, embeddings: &T, mut observe: impl FnMut(&T)) -> Vec<u32> {
        let mut decoding = self.start_decoding(embeddings.shape()[1]);
        decoding.feed(embeddings, &mut observe);
        decoding.tokens
    }

    /// Greedy decoding of up to `positions` positions whose audio embeddings come in parts
    /// ([`Decoding::feed`]).
    pub fn start_decoding(&self, positions: usize) -> Decoding<'_, T> {
        let mut pool = self.decoder.new_pool(self.dtype, 1, positions);
        let slot = pool.acquire().expect("a new pool has a free slot");
        Decoding {
            model: self,
            pool,
            slot,
            prompt: self.special.prompt(&self.config.streaming),
            waiting: None,
            prefilled: false,
            tokens: Vec::new(),
            ended: false,
        }
    }

    /// The longest utterance this model was loaded for, in decoder positions.
    pub fn max_positions(&self) -> usize {
        self.max_positions
    }

    /// Transcribes mono `audio` at the model's rate (`config.mel.sample_rate`).
    pub fn transcribe(&self, audio: &[f32]) -> Result<Transcript, TranscribeError> {
        let embeddings = self.audio_embeddings(audio)?;
        let tokens = self.greedy(&embeddings, |_| {});
        Ok(Transcript {
            text: self.tokenizer.decode(&tokens),
            tokens,
        })
    }
}

/// Greedy decoding fed the audio embeddings of successive positions as they come: the prompt
/// is prefilled once all its positions are in, then each further position decodes one token.
pub struct Decoding<'a, T: Tensor> {
    model: &'a Transcriber<T>,
    pool: KvPool<T>,
    slot: KvSlot,
    prompt: Vec<u32>,
    /// The prompt positions' embeddings received so far, `[1, n, dim]`.
    waiting: Option<T>,
    prefilled: bool,
    /// Every token decoded.
    pub tokens: Vec<u32>,
    /// `</s>` was decoded: later positions decode nothing.
    ended: bool,
}

impl<T: Tensor> Decoding<'_, T> {
    /// Feeds the next positions' embeddings `[1, n, dim]`; `observe` sees the logits
    /// `[1, vocab]` of each position decoded. Returns the tokens decoded from them.
    pub fn feed(&mut self, embeddings: &T, observe: &mut impl FnMut(&T)) -> Vec<u32> {
        let decoder = &self.model.decoder;
        let decoded = self.tokens.len();
        let mut next = 0;
        let mut embeddings = embeddings.clone();
        if !self.prefilled {
            if let Some(waiting) = self.waiting.take() {
                embeddings = T::cat(&[&waiting, &embeddings], 1);
            }
            let p = self.prompt.len();
            if embeddings.shape()[1] < p {
                self.waiting = Some(embeddings);
                return Vec::new();
            }
            let input = decoder.embed(&self.prompt, &embeddings.narrow(1, 0, p));
            let logits = decoder.last_logits(&input, &mut self.pool, &mut self.slot);
            self.prefilled = true;
            self.take(&logits, observe);
            next = p;
        }
        while !self.ended && next < embeddings.shape()[1] {
            let token = *self.tokens.last().expect("the prefill decoded a token");
            let input = decoder.embed(&[token], &embeddings.narrow(1, next, 1));
            let logits = decoder.last_logits(&input, &mut self.pool, &mut self.slot);
            self.take(&logits, observe);
            next += 1;
        }
        self.tokens[decoded..].to_vec()
    }

    /// The greedy token of `logits`; `</s>` ends the decoding (it is not fed back).
    fn take(&mut self, logits: &T, observe: &mut impl FnMut(&T)) {
        observe(logits);
        let token = logits.argmax_last().to_vec_i64()[0] as u32;
        self.tokens.push(token);
        self.ended = token == self.model.special.eos;
    }
}
