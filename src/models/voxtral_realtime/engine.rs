//! Voxtral Realtime behind the speech-to-text interface (`crate::engine::stt`): uploads
//! embedded offline when they start, live items through the offline-exact streaming encoder
//! (`streaming.rs`), both decoded in the rows of one [`BatchDecoder`].

use super::batch::{BatchDecoder, Utterance};
use super::params::Config;
use super::streaming::AudioStream;
use super::timing::{token_seconds, words};
use super::transcriber::{TranscribeError, Transcriber};
use crate::engine::stt::{
    self, SpeechToText, TimedText, TranscriberCard, TranscriberOptions, TranscriptionBatch,
    TranscriptionError,
};
use crate::nn::LoadError;
use crate::tensor::{DType, Tensor};
use std::path::Path;

impl From<TranscribeError> for TranscriptionError {
    fn from(e: TranscribeError) -> Self {
        TranscriptionError(e.to_string())
    }
}

/// A Voxtral Realtime folder loaded for utterances of up to `max_audio_seconds`.
pub struct RealtimeEngine<T: Tensor> {
    model: Transcriber<T>,
    max_audio_seconds: f64,
}

impl<T: Tensor> RealtimeEngine<T> {
    /// Loads `dir` with its decoder's positions sized for `options.max_audio_seconds`.
    pub fn load(
        dir: &Path,
        device: &T::Device,
        dtype: DType,
        options: &TranscriberOptions,
    ) -> Result<Self, LoadError> {
        options.cuda_graphs.not_captured(
            super::family::NAME,
            "its decoder step has no capture yet (sliding-window rows and the audio rows it adds are built on the host each step)",
        );
        let config = Config::load(dir)?;
        let samples = (options.max_audio_seconds * f64::from(config.mel.sample_rate)).ceil();
        let positions = config.streaming.offline_positions(samples as usize);
        let model = Transcriber::load_quantized(dir, device, dtype, positions, options.quantize)?;
        Ok(RealtimeEngine {
            model,
            max_audio_seconds: options.max_audio_seconds,
        })
    }
}

impl<T: Tensor> SpeechToText for RealtimeEngine<T> {
    type Batch<'m>
        = Batch<'m, T>
    where
        T: 'm;

    fn card(&self) -> TranscriberCard {
        TranscriberCard {
            family: super::family::NAME,
            sample_rate: self.model.config.mel.sample_rate,
            samples_per_token: self.model.config.streaming.samples_per_token,
            max_audio_seconds: self.max_audio_seconds,
            weights: String::new(),
        }
    }

    fn batch(&self, slots: usize) -> Batch<'_, T> {
        Batch {
            model: &self.model,
            decoder: BatchDecoder::new(&self.model, slots),
        }
    }

    fn transcribe(&self, audio: &[f32]) -> Result<Vec<u32>, TranscriptionError> {
        Ok(self.model.transcribe(audio)?.tokens)
    }

    fn text(&self, tokens: &[u32]) -> String {
        self.model.tokenizer.decode(tokens)
    }

    fn words(&self, tokens: &[u32]) -> Vec<TimedText> {
        let config = &self.model.config;
        let token_seconds = token_seconds(&config.streaming, config.mel.sample_rate);
        words(
            tokens,
            &self.model.tokenizer,
            &self.model.special,
            token_seconds,
        )
    }

    /// The token decoded at position `p` reads the audio up to the end of position `p`,
    /// which is `p + 1 - left_pad` tokens into the item's audio; the model emits a word
    /// `delay` tokens after it was spoken, so the speech it transcribes ended `delay` tokens
    /// before that.
    fn spoken_samples(&self, tokens: usize) -> usize {
        let streaming = &self.model.config.streaming;
        // The `tokens`-th token is decoded at position `prompt_len - 1 + tokens - 1`.
        let read = streaming.prompt_len() - 1 + tokens;
        read.saturating_sub(streaming.left_pad_tokens + streaming.delay_tokens)
            * streaming.samples_per_token
    }
}

/// The utterances being decoded, in the slots of one [`BatchDecoder`].
pub struct Batch<'m, T: Tensor> {
    model: &'m Transcriber<T>,
    decoder: BatchDecoder<'m, T>,
}

/// An upload (its audio embedded when it started) or a live item (its [`AudioStream`]).
pub struct Stream<'m, T: Tensor> {
    live: Option<AudioStream<'m, T>>,
    utterance: Utterance<T>,
    upload_samples: usize,
}

impl<'m, T: Tensor> TranscriptionBatch for Batch<'m, T> {
    type Utterance = Stream<'m, T>;

    fn start_upload(&mut self, audio: &[f32]) -> Result<Stream<'m, T>, TranscriptionError> {
        let embeddings = self.model.audio_embeddings(audio)?;
        let mut utterance = self
            .decoder
            .start()
            .ok_or_else(|| TranscriptionError("no decoder slot is free for this job".into()))?;
        utterance.feed(embeddings);
        Ok(Stream {
            live: None,
            utterance,
            upload_samples: audio.len(),
        })
    }

    fn start_live(&mut self) -> Result<Stream<'m, T>, TranscriptionError> {
        let audio = AudioStream::start(self.model)?;
        let utterance = self
            .decoder
            .start()
            .ok_or_else(|| TranscriptionError("no decoder slot is free for this session".into()))?;
        Ok(Stream {
            live: Some(audio),
            utterance,
            upload_samples: 0,
        })
    }

    fn step(&mut self, streams: &mut [&mut Stream<'m, T>]) -> usize {
        let mut rows: Vec<&mut Utterance<T>> =
            streams.iter_mut().map(|s| &mut s.utterance).collect();
        self.decoder.step(&mut rows)
    }

    fn end(&mut self, stream: Stream<'m, T>) {
        self.decoder.end(stream.utterance);
    }
}

impl<'m, T: Tensor> Stream<'m, T> {
    /// The live item's audio stream; an upload takes no more audio.
    fn live(&mut self) -> Result<&mut AudioStream<'m, T>, TranscriptionError> {
        self.live
            .as_mut()
            .ok_or_else(|| TranscriptionError("an upload's audio is given whole".into()))
    }
}

impl<T: Tensor> stt::Utterance for Stream<'_, T> {
    fn tokens(&self) -> &[u32] {
        self.utterance.tokens()
    }

    fn ready(&self) -> bool {
        self.utterance.ready()
    }

    fn waiting(&self) -> usize {
        self.utterance.waiting()
    }

    fn push(&mut self, samples: &[f32]) -> Result<(), TranscriptionError> {
        if let Some(embeddings) = self.live()?.push(samples)? {
            self.utterance.feed(embeddings);
        }
        Ok(())
    }

    fn finish(&mut self) -> Result<(), TranscriptionError> {
        if let Some(embeddings) = self.live()?.finish()? {
            self.utterance.feed(embeddings);
        }
        Ok(())
    }

    fn samples(&self) -> usize {
        self.live
            .as_ref()
            .map_or(self.upload_samples, AudioStream::samples)
    }
}
