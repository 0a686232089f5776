//! What the decoder carries from one call to the next: the left context of every causal
//! convolution and the last keys and values of every attention layer.
//!
//! The decoder is causal, and its attention sees only the 72 most recent positions, so a
//! bounded state makes chunked decoding exact. [`DecoderStream`] holds, per causal conv, the
//! last `(kernel - 1) · dilation` input samples; per transposed conv with overlapping taps, the
//! last input frame; per attention layer, the keys and values of the last 71 positions
//! (window - 1). Feeding an utterance in chunks of any size, down to one frame, gives the samples
//! of one forward pass over the whole utterance.
//!
//! How it relates to the official whole-utterance decode (`chunked_decode(300, 25)`): that
//! decodes 300-frame chunks afresh, each with only 25 earlier frames as context, so past frame
//! 300 its output is an approximation of the full-context decode (spec §8.6, §9).
//! [`super::SpeechDecoder::decode`] reproduces the official chunking for parity;
//! a stream gives the exact full-context output instead, which equals the official output for
//! the first 300 frames. A stream's cost per chunk does not grow with the utterance.

use crate::tensor::Tensor;

/// Keys and values of the most recent positions of one attention layer, before RoPE
/// (`[1, kv_heads, positions, head_dim]`): each call rotates them at positions relative to
/// the oldest one kept, which leaves the attention scores unchanged (RoPE scores depend only
/// on the distance between query and key), and keeps the rotary table bounded.
pub(super) struct KvWindow<T> {
    pub keys: T,
    pub values: T,
}

/// The state of one utterance being decoded in chunks (`SpeechDecoder::new_stream`).
pub struct DecoderStream<T> {
    /// Per stateful conv (numbered as the decoder loads), its last inputs.
    tails: Vec<Option<T>>,
    /// Per attention layer.
    windows: Vec<Option<KvWindow<T>>>,
    frames: usize,
}

impl<T: Tensor> DecoderStream<T> {
    pub(super) fn new(convs: usize, layers: usize) -> Self {
        DecoderStream {
            tails: (0..convs).map(|_| None).collect(),
            windows: (0..layers).map(|_| None).collect(),
            frames: 0,
        }
    }

    /// Frames decoded so far.
    pub fn frames(&self) -> usize {
        self.frames
    }

    pub(super) fn advance(&mut self, frames: usize) {
        self.frames += frames;
    }

    /// The inputs conv `slot` saw last (`None` at the start: the official zero padding).
    pub(super) fn take_tail(&mut self, slot: usize) -> Option<T> {
        self.tails[slot].take()
    }

    /// Keeps a copy of `tail`, the last inputs of conv `slot`, for the next call.
    pub(super) fn keep_tail(&mut self, slot: usize, tail: &T) {
        self.tails[slot] = Some(owned(tail));
    }

    pub(super) fn take_window(&mut self, layer: usize) -> Option<KvWindow<T>> {
        self.windows[layer].take()
    }

    /// Keeps a copy of the last `keys` and `values` of attention layer `layer`.
    pub(super) fn keep_window(&mut self, layer: usize, keys: &T, values: &T) {
        self.windows[layer] = Some(KvWindow {
            keys: owned(keys),
            values: owned(values),
        });
    }

    /// Positions layer 0 holds from earlier calls (all layers hold as many).
    pub(super) fn past_positions(&self) -> usize {
        self.windows
            .first()
            .and_then(Option::as_ref)
            .map_or(0, |w| w.keys.shape()[2])
    }
}

/// A copy of `view` holding only its own values: a view of a pass's activations would keep
/// all of them alive between calls (about 125 MB per stream after a 16-frame pass).
fn owned<T: Tensor>(view: &T) -> T {
    T::cat(&[view], 0)
}
