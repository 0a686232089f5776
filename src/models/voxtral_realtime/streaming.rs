//! Streaming transcription: audio pushed in pieces of any size, one token decoded per 80 ms
//! position as soon as the audio it reads is in, and the same tokens as offline
//! transcription ([`Transcriber::transcribe`]) of the whole utterance.
//!
//! Offline-exact, as transformers and mlx-audio stream (spec §8): the stream is the offline
//! padded signal (the left pad first, the alignment and right pad at the end), its mel frames
//! are the offline frames (the reflect pads at both ends read zeros either way), the conv stem
//! carries its left context ([`ConvStem::step`](super::conv_stem::ConvStem::step)) and the
//! encoder its keys and values within its window. Position `p` is computed once the signal
//! reaches its last mel frame's end, `(p + 1) · 1280 + 40` samples: the 2.5 ms look-ahead.
//!
//! vLLM's realtime path is not followed: its segments re-read 840 samples (5.25 hops) before
//! each 1280-sample frame, so from position 39 on its mel grid sits 40 samples earlier than the
//! offline grid (its features equal the offline ones of the signal delayed by 40 samples), and
//! it drops the last position, whose look-ahead never arrives. Its realtime tokens can thus
//! differ from its own offline ones; ours cannot.

use super::conv_stem::ConvStemState;
use super::encoder::EncoderCache;
use super::transcriber::{Decoding, TranscribeError, Transcriber, Transcript};
use crate::tensor::Tensor;

/// The encoder side of a stream: samples in, one audio embedding per position out.
pub struct AudioStream<'a, T: Tensor> {
    model: &'a Transcriber<T>,
    /// The padded signal from sample `buffer_start` on (earlier samples are not needed again).
    buffer: Vec<f32>,
    buffer_start: usize,
    /// Audio samples pushed (padding excluded).
    pushed: usize,
    /// The right pad is in: nothing follows.
    finished: bool,
    /// Positions embedded so far.
    embedded: usize,
    conv: ConvStemState<T>,
    encoder: EncoderCache<T>,
    /// The mel floor's ceiling (`global_log_mel_max`).
    ceiling: f32,
}

impl<'a, T: Tensor> AudioStream<'a, T> {
    /// A stream of `model`'s: its left pad is in.
    pub fn start(model: &'a Transcriber<T>) -> Result<Self, TranscribeError> {
        let (streaming, mel) = (&model.config.streaming, &model.config.mel);
        let ceiling = model
            .mel
            .fixed_ceiling()
            .ok_or(TranscribeError::NotStreamable(
                "its mel floor follows the whole utterance's maximum (no global_log_mel_max)",
            ))?;
        // The edge frames' reflect pads then read only padding silence, as zeros do.
        let half = mel.n_fft / 2;
        if streaming.left_pad_tokens * streaming.samples_per_token <= half
            || streaming.right_pad_tokens * streaming.samples_per_token <= half
        {
            return Err(TranscribeError::NotStreamable(
                "its left or right pad is shorter than half a mel window",
            ));
        }
        let encoder = &model.tower.encoder;
        Ok(AudioStream {
            buffer: vec![0.0; streaming.left_pad_tokens * streaming.samples_per_token],
            buffer_start: 0,
            pushed: 0,
            finished: false,
            embedded: 0,
            conv: encoder.stem.start(model.dtype),
            encoder: encoder.start(),
            ceiling,
            model,
        })
    }

    /// Appends mono `audio` at the model's rate; returns the embeddings `[1, n, dim]` of the
    /// positions it completes, if any.
    pub fn push(&mut self, audio: &[f32]) -> Result<Option<T>, TranscribeError> {
        self.buffer.extend_from_slice(audio);
        self.pushed += audio.len();
        self.embed_ready()
    }

    /// Audio samples pushed (padding excluded).
    pub fn samples(&self) -> usize {
        self.pushed
    }

    /// Ends the stream with the offline alignment and right pad; returns the embeddings of
    /// the positions left (none when it has ended already).
    pub fn finish(&mut self) -> Result<Option<T>, TranscribeError> {
        if self.finished {
            return Ok(None);
        }
        let streaming = &self.model.config.streaming;
        let token = streaming.samples_per_token;
        let align = self.pushed.next_multiple_of(token) - self.pushed;
        let tail = align + streaming.right_pad_tokens * token;
        self.buffer.resize(self.buffer.len() + tail, 0.0);
        self.finished = true;
        self.embed_ready()
    }

    /// Samples of the padded signal received.
    fn received(&self) -> usize {
        self.buffer_start + self.buffer.len()
    }

    /// Embeds every position whose mel frames the received signal covers.
    fn embed_ready(&mut self) -> Result<Option<T>, TranscribeError> {
        let model = self.model;
        let (streaming, mel) = (&model.config.streaming, &model.config.mel);
        let frames_per_token = streaming.mel_frames_per_token;
        let (hop, n_fft, half) = (mel.hop_length, mel.n_fft, mel.n_fft / 2);
        let ready = if self.finished {
            self.received() / streaming.samples_per_token
        } else {
            // Position p's last frame reads up to ((p + 1)·F − 1)·hop − half + n_fft.
            let reach = n_fft - half;
            (self.received() + hop)
                .checked_sub(reach)
                .map_or(0, |covered| covered / (hop * frames_per_token))
        };
        if ready <= self.embedded {
            return Ok(None);
        }
        if ready > model.max_positions() {
            let rate = f64::from(mel.sample_rate);
            return Err(TranscribeError::TooLong {
                seconds: self.pushed as f64 / rate,
                positions: ready,
                max_positions: model.max_positions(),
            });
        }
        let (first, frames) = (
            self.embedded * frames_per_token,
            (ready - self.embedded) * frames_per_token,
        );
        // Frames first.. read samples from first·hop − half on; zeros before the signal's
        // start and past its end stand for the reflected padding silence.
        let from = (first * hop) as isize - half as isize;
        let len = (frames - 1) * hop + n_fft;
        let window: Vec<f32> = (from..from + len as isize)
            .map(|i| {
                usize::try_from(i)
                    .ok()
                    .and_then(|i| i.checked_sub(self.buffer_start))
                    .and_then(|i| self.buffer.get(i).copied())
                    .unwrap_or(0.0)
            })
            .collect();
        let features = model.mel.frames_of_padded(&window, frames, self.ceiling);
        let tower = &model.tower;
        let features = T::from_f32(
            &tower.device,
            &features,
            &[1, frames, mel.num_mel_bins],
            model.dtype,
        );
        let conv = tower.encoder.stem.step(&mut self.conv, &features);
        let encoded = tower.encoder.step(&mut self.encoder, &conv);
        self.embedded = ready;
        // The next frame reads from here on.
        let keep_from = (ready * frames_per_token * hop).saturating_sub(half);
        if keep_from > self.buffer_start {
            self.buffer.drain(..keep_from - self.buffer_start);
            self.buffer_start = keep_from;
        }
        Ok(Some(tower.adapter.forward(&encoded)))
    }
}

/// A stream transcribed as it comes: [`AudioStream`] feeding [`Decoding`].
pub struct TranscriptionStream<'a, T: Tensor> {
    model: &'a Transcriber<T>,
    audio: AudioStream<'a, T>,
    decoding: Decoding<'a, T>,
}

impl<'a, T: Tensor> TranscriptionStream<'a, T> {
    /// A stream of up to `model.max_positions()` positions, padding included.
    pub fn start(model: &'a Transcriber<T>) -> Result<Self, TranscribeError> {
        Ok(TranscriptionStream {
            model,
            audio: AudioStream::start(model)?,
            decoding: model.start_decoding(model.max_positions()),
        })
    }

    /// Appends `audio`; returns the tokens it lets decode.
    pub fn push(&mut self, audio: &[f32]) -> Result<Vec<u32>, TranscribeError> {
        let embeddings = self.audio.push(audio)?;
        Ok(decode(&mut self.decoding, embeddings))
    }

    /// Ends the stream: the tokens of the right pad's positions, then the whole transcript.
    pub fn finish(self) -> Result<(Vec<u32>, Transcript), TranscribeError> {
        let TranscriptionStream {
            model,
            mut audio,
            mut decoding,
        } = self;
        let last = decode(&mut decoding, audio.finish()?);
        let text = model.tokenizer.decode(&decoding.tokens);
        let transcript = Transcript {
            tokens: decoding.tokens,
            text,
        };
        Ok((last, transcript))
    }
}

/// The tokens that the next positions' embeddings, if any, decode.
fn decode<T: Tensor>(decoding: &mut Decoding<'_, T>, embeddings: Option<T>) -> Vec<u32> {
    match embeddings {
        Some(e) => decoding.feed(&e, &mut |_| {}),
        None => Vec::new(),
    }
}
