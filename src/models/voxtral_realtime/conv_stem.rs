//! The causal conv stem (spec §3): `gelu(conv1)` (kernel 3, stride 1, left pad 2), then
//! `gelu(conv2)` (kernel 3, stride 2, left pad 1) over the mel frames, halving their rate.
//! The left pads are `kernel − stride`, as vLLM's `WhisperCausalConv1d` and transformers'
//! `left_pad` have them (the ExecuTorch seed pads conv2 by 2, which is wrong).

use super::keys;
use crate::nn::layers::Loader;
use crate::nn::LoadError;
use crate::tensor::{ConvKind, PadMode, Tensor};

const KERNEL: usize = 3;

struct CausalConv<T> {
    weight: T,
    /// `[1, 1, out]`.
    bias: T,
    stride: usize,
    /// Input channels.
    input: usize,
}

impl<T: Tensor> CausalConv<T> {
    fn load(
        l: &Loader<T>,
        key: &str,
        input: usize,
        output: usize,
        stride: usize,
    ) -> Result<Self, LoadError> {
        let weight = l.tensor(&format!("{key}.weight"), &[output, input, KERNEL])?;
        Ok(CausalConv {
            weight: T::prepare_conv_weight(&weight, ConvKind::Conv),
            bias: l
                .tensor(&format!("{key}.bias"), &[output])?
                .reshape(&[1, 1, output]),
            stride,
            input,
        })
    }

    fn left_pad(&self) -> usize {
        KERNEL - self.stride
    }

    /// `x` already carries its left context (zeros or the previous frames).
    fn forward_padded(&self, x: &T) -> T {
        x.conv1d(&self.weight, self.stride).add(&self.bias)
    }
}

pub struct ConvStem<T: Tensor> {
    conv1: CausalConv<T>,
    conv2: CausalConv<T>,
    device: T::Device,
}

impl<T: Tensor> ConvStem<T> {
    /// `l` scoped at the encoder (`…whisper_encoder.`).
    pub fn load(l: &Loader<T>, num_mel_bins: usize, dim: usize) -> Result<Self, LoadError> {
        Ok(ConvStem {
            conv1: CausalConv::load(l, keys::CONV_STEM[0], num_mel_bins, dim, 1)?,
            conv2: CausalConv::load(l, keys::CONV_STEM[1], dim, dim, 2)?,
            device: l.device.clone(),
        })
    }

    /// Mel frames `[1, frames, mels]` (an even count) → `[1, frames / 2, dim]`, with zeros before
    /// the first frame.
    pub fn forward(&self, mel: &T) -> T {
        let h = self
            .conv1
            .forward_padded(&mel.pad_time(self.conv1.left_pad(), 0, PadMode::Zero));
        let h = h.gelu();
        let h = self
            .conv2
            .forward_padded(&h.pad_time(self.conv2.left_pad(), 0, PadMode::Zero));
        h.gelu()
    }

    /// A streaming state whose output equals [`forward`](Self::forward) on the whole input.
    pub fn start(&self, dtype: crate::tensor::DType) -> ConvStemState<T> {
        let context =
            |conv: &CausalConv<T>| T::zeros(&self.device, &[1, conv.left_pad(), conv.input], dtype);
        ConvStemState {
            conv1_context: context(&self.conv1),
            conv2_context: context(&self.conv2),
        }
    }

    /// The next even number of mel frames `[1, n, mels]` → `[1, n / 2, dim]`: the frames each
    /// conv needs from before the chunk come from `state`, which is then moved on. An even
    /// chunk keeps conv2's stride phase, so chunked output equals the offline one.
    pub fn step(&self, state: &mut ConvStemState<T>, mel: &T) -> T {
        let input = T::cat(&[&state.conv1_context, mel], 1);
        state.conv1_context = tail(&input, self.conv1.left_pad());
        let h = self.conv1.forward_padded(&input).gelu();
        let input = T::cat(&[&state.conv2_context, &h], 1);
        state.conv2_context = tail(&input, self.conv2.left_pad());
        self.conv2.forward_padded(&input).gelu()
    }
}

/// The last `n` frames of `[1, len, channels]`.
fn tail<T: Tensor>(x: &T, n: usize) -> T {
    let len = x.shape()[1];
    x.narrow(1, len - n, n)
}

/// What the conv stem carries between chunks: the last 2 mel frames (conv1's left context)
/// and the last conv1 output frame (conv2's).
pub struct ConvStemState<T> {
    conv1_context: T,
    conv2_context: T,
}
