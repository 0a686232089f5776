//! Streaming HiFi-GAN: the waveform of a growing latent sequence, chunk by chunk, each chunk
//! decoded from a bounded window of latents, never the whole sequence again.
//!
//! How it differs from coqui's `Xtts.inference_stream` (docs/xtts-v2-spec.md §7): there,
//! every `stream_chunk_size` codes HiFi-GAN re-runs on *all* latents so far (quadratic), the
//! newest 1024 samples of each decode are held back, and each chunk's first 1024 samples are
//! cross-faded (linear ramps) with the previous decode's held tail, because two decodes of
//! different lengths disagree near the older one's end.
//!
//! Here the decoder is a fixed-reach convolution stack over the resampled latents, so a
//! decoder frame's samples depend only on the frames within [`HifiGan::context_frames`] of it.
//! A frame is emitted once its resampled value and those of its right context can no longer
//! change as latents are appended (the interpolations clamp at the current last latent), and
//! it is decoded from a window of those frames with `context` frames on each side: the
//! samples equal the whole decode's (to float rounding) at any chunking, so no seam exists and
//! no cross-fade is applied. What the reference's cross-fade semantics guarantee and this keeps:
//! the concatenated stream has exactly the length of one final decode, and the held-back tail
//! (here `context` frames plus the interpolation edge, there 1024 samples) is emitted by the
//! final chunk. Each chunk costs its own frames plus `2 · context`, whatever the length so far.

use super::hifigan::{Conditioning, HifiGan};
use crate::tensor::Tensor;
use std::borrow::Borrow;

/// `C`: the speaker's conditioning, borrowed, or owned by a session that keeps the stream.
pub struct HifiGanStream<'a, T: Tensor, C: Borrow<Conditioning<T>> = &'a Conditioning<T>> {
    decoder: &'a HifiGan<T>,
    cond: C,
    context: usize,
    /// Latents `offset..total`, row-major `[_, D]`: older ones are never read again.
    latents: Vec<f32>,
    offset: usize,
    total: usize,
    /// Decoder frames already emitted.
    emitted: usize,
}

impl<'a, T: Tensor, C: Borrow<Conditioning<T>>> HifiGanStream<'a, T, C> {
    pub fn new(decoder: &'a HifiGan<T>, cond: C) -> Self {
        Self::with_context(decoder, cond, decoder.context_frames())
    }

    /// A stream whose windows carry `context` frames each side (fewer than
    /// [`HifiGan::context_frames`] gives audible seams; tests measure them).
    pub fn with_context(decoder: &'a HifiGan<T>, cond: C, context: usize) -> Self {
        HifiGanStream {
            decoder,
            cond,
            context,
            latents: Vec::new(),
            offset: 0,
            total: 0,
            emitted: 0,
        }
    }

    /// Appends latents (`[k, D]` row-major) and returns the samples that became final.
    pub fn push(&mut self, latents: &[f32]) -> Vec<f32> {
        let dim = self.decoder.latent_dim();
        assert_eq!(latents.len() % dim, 0, "latents of width {dim}");
        self.latents.extend_from_slice(latents);
        self.total += latents.len() / dim;
        let ready = self.final_frames().saturating_sub(self.context);
        self.emit(ready)
    }

    /// The rest of the waveform once the last latent is in.
    pub fn finish(mut self) -> Vec<f32> {
        if self.total == 0 {
            return Vec::new();
        }
        let end = self.decoder.frames_for(self.total);
        self.emit(end)
    }

    /// Decodes frames `emitted..end`, then forgets the latents no later chunk reads.
    fn emit(&mut self, end: usize) -> Vec<f32> {
        if end <= self.emitted {
            return Vec::new();
        }
        let dim = self.decoder.latent_dim();
        let frames = self.emitted..end;
        let read = self
            .decoder
            .latents_for_frames(self.total, frames.clone(), self.context);
        let rows = &self.latents[(read.start - self.offset) * dim..(read.end - self.offset) * dim];
        let window = self.decoder.latents(rows, read.len());
        let samples = self.decoder.decode_frames(
            &window,
            read.start,
            self.total,
            frames,
            self.context,
            self.cond.borrow(),
        );
        self.emitted = end;
        let keep_from = self
            .decoder
            .latents_for_frames(self.total, end..end + 1, self.context)
            .start
            .max(self.offset);
        self.latents.drain(..(keep_from - self.offset) * dim);
        self.offset = keep_from;
        samples
    }

    /// Leading decoder frames whose resampled values no longer change when latents are
    /// appended.
    fn final_frames(&self) -> usize {
        let end = self.decoder.frames_for(self.total);
        (0..end)
            .rev()
            .find(|&f| self.decoder.frame_is_final(self.total, f))
            .map_or(0, |f| f + 1)
    }
}
