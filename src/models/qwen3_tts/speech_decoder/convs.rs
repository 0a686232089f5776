//! The decoder's convolutional parts (`modeling_qwen3_tts_tokenizer_v2.py`): causal convs,
//! causal transposed convs, SnakeBeta, the ConvNeXt upsampling block and the SEANet-style
//! decoder blocks. Each stateful conv takes its left context from a [`DecoderStream`], so a
//! chunk continues where the previous one stopped.

use super::stream::DecoderStream;
use crate::nn::layers::Loader;
use crate::nn::LoadError;
use crate::tensor::{ConvKind, PadMode, Tensor};

/// Numbers the convs that carry state, in load order.
#[derive(Default)]
pub(super) struct Slots(usize);

impl Slots {
    fn next(&mut self) -> usize {
        self.0 += 1;
        self.0 - 1
    }

    pub fn count(&self) -> usize {
        self.0
    }
}

/// `x @ w.T + b`.
pub(super) struct Affine<T> {
    weight: T,
    bias: T,
}

impl<T: Tensor> Affine<T> {
    pub fn load(l: &Loader<T>, prefix: &str, out: usize, input: usize) -> Result<Self, LoadError> {
        Ok(Affine {
            weight: l.tensor(&format!("{prefix}.weight"), &[out, input])?,
            bias: l.tensor(&format!("{prefix}.bias"), &[out])?,
        })
    }

    pub fn forward(&self, x: &T) -> T {
        x.linear(&self.weight).add(&self.bias)
    }
}

/// `CausalConvNet` at stride 1: a left context of `(kernel - 1) · dilation` samples (zeros at
/// the start of an utterance), so output `t` sees inputs up to `t`.
pub(super) struct CausalConv<T> {
    weight: T,
    bias: T,
    dilation: usize,
    groups: usize,
    context: usize,
    slot: usize,
}

/// Channels, kernel, dilation and groups of a causal conv.
pub(super) struct ConvShape {
    pub input: usize,
    pub output: usize,
    pub kernel: usize,
    pub dilation: usize,
    pub groups: usize,
}

impl ConvShape {
    pub fn plain(input: usize, output: usize, kernel: usize) -> Self {
        ConvShape {
            input,
            output,
            kernel,
            dilation: 1,
            groups: 1,
        }
    }
}

impl<T: Tensor> CausalConv<T> {
    /// `{prefix}.weight` `[out, in / groups, kernel]` and `{prefix}.bias`.
    pub fn load(
        l: &Loader<T>,
        prefix: &str,
        shape: ConvShape,
        slots: &mut Slots,
    ) -> Result<Self, LoadError> {
        let ConvShape {
            input,
            output,
            kernel,
            dilation,
            groups,
        } = shape;
        let weight = l.tensor(
            &format!("{prefix}.weight"),
            &[output, input / groups, kernel],
        )?;
        let context = (kernel - 1) * dilation;
        Ok(CausalConv {
            weight: T::prepare_conv_weight(&weight, ConvKind::Conv),
            bias: l.tensor(&format!("{prefix}.bias"), &[output])?,
            dilation,
            groups,
            context,
            slot: if context > 0 { slots.next() } else { 0 },
        })
    }

    /// `[1, len, in]` -> `[1, len, out]`.
    pub fn forward(&self, x: &T, stream: &mut DecoderStream<T>) -> T {
        let input = if self.context == 0 {
            x.clone()
        } else {
            let input = match stream.take_tail(self.slot) {
                Some(past) => T::cat(&[&past, x], 1),
                None => x.pad_time(self.context, 0, PadMode::Zero),
            };
            let len = input.shape()[1];
            stream.keep_tail(
                self.slot,
                &input.narrow(1, len - self.context, self.context),
            );
            input
        };
        input
            .conv1d_dilated(&self.weight, self.dilation, self.groups)
            .add(&self.bias)
    }
}

/// `CausalTransConvNet`: ConvTranspose1d with `kernel - stride` samples trimmed on the right,
/// so `len` frames give `len · stride` samples and each output depends on the current and
/// earlier inputs only. With `kernel = 2 · stride`, output frame `t` also reads input `t - 1`,
/// which a stream keeps.
pub(super) struct CausalTransposeConv<T> {
    weight: T,
    bias: T,
    stride: usize,
    /// Earlier input frames an output frame reads: `kernel / stride - 1`.
    overlap: usize,
    slot: usize,
}

impl<T: Tensor> CausalTransposeConv<T> {
    /// `{prefix}.weight` `[in, out, kernel]` and `{prefix}.bias`.
    pub fn load(
        l: &Loader<T>,
        prefix: &str,
        [input, output, kernel]: [usize; 3],
        stride: usize,
        slots: &mut Slots,
    ) -> Result<Self, LoadError> {
        let weight = l.tensor(&format!("{prefix}.weight"), &[input, output, kernel])?;
        if stride == 0 || !kernel.is_multiple_of(stride) {
            return Err(LoadError::invalid(
                "speech_tokenizer/config.json",
                prefix,
                format!("kernel {kernel} is not a multiple of stride {stride}"),
            ));
        }
        let overlap = kernel / stride - 1;
        Ok(CausalTransposeConv {
            weight: T::prepare_conv_weight(&weight, ConvKind::Transpose),
            bias: l.tensor(&format!("{prefix}.bias"), &[output])?,
            stride,
            overlap,
            slot: if overlap > 0 { slots.next() } else { 0 },
        })
    }

    /// `[1, len, in]` -> `[1, len · stride, out]`.
    pub fn forward(&self, x: &T, stream: &mut DecoderStream<T>) -> T {
        let len = x.shape()[1];
        if self.overlap == 0 {
            return x
                .conv_transpose1d(&self.weight, self.stride)
                .add(&self.bias);
        }
        // Earlier frames (zeros at the start) go in front; their own outputs are dropped.
        let input = match stream.take_tail(self.slot) {
            Some(past) => T::cat(&[&past, x], 1),
            None => x.pad_time(self.overlap, 0, PadMode::Zero),
        };
        let total = input.shape()[1];
        stream.keep_tail(
            self.slot,
            &input.narrow(1, total - self.overlap, self.overlap),
        );
        input
            .conv_transpose1d(&self.weight, self.stride)
            .narrow(1, self.overlap * self.stride, len * self.stride)
            .add(&self.bias)
    }
}

/// SnakeBeta, `x + sin²(x · e^α) / (e^β + 1e-9)`, with `e^α` and `1 / (e^β + 1e-9)` computed
/// once at load (in f32, as the official module computes them).
pub(super) struct SnakeBeta<T> {
    frequency: T,
    inverse_magnitude: T,
}

impl<T: Tensor> SnakeBeta<T> {
    pub fn load(l: &Loader<T>, prefix: &str, channels: usize) -> Result<Self, LoadError> {
        let alpha = l.host_f32(&format!("{prefix}.alpha"), &[channels])?;
        let beta = l.host_f32(&format!("{prefix}.beta"), &[channels])?;
        let frequency: Vec<f32> = alpha.iter().map(|a| a.exp()).collect();
        let inverse: Vec<f32> = beta.iter().map(|b| 1.0 / (b.exp() + 1e-9)).collect();
        Ok(SnakeBeta {
            frequency: l.from_f32(&frequency, &[channels]),
            inverse_magnitude: l.from_f32(&inverse, &[channels]),
        })
    }

    pub fn forward(&self, x: &T) -> T {
        let s = x.mul(&self.frequency).sin();
        x.add(&s.mul(&s).mul(&self.inverse_magnitude))
    }
}

/// LayerNorm over the last axis: the centred input through RMSNorm (which then divides by
/// the standard deviation), plus the bias. Also the Mimi encoder's norm.
pub(in crate::models::qwen3_tts) struct LayerNorm<T> {
    weight: T,
    bias: T,
    eps: f64,
}

impl<T: Tensor> LayerNorm<T> {
    /// `{prefix}.weight` and `{prefix}.bias`, both `[dim]`.
    pub fn load(l: &Loader<T>, prefix: &str, dim: usize, eps: f64) -> Result<Self, LoadError> {
        Ok(LayerNorm {
            weight: l.tensor(&format!("{prefix}.weight"), &[dim])?,
            bias: l.tensor(&format!("{prefix}.bias"), &[dim])?,
            eps,
        })
    }

    /// `[batch, len, dim]` -> the same shape.
    pub fn forward(&self, x: &T) -> T {
        let shape = x.shape();
        let (rows, width) = (shape[..2].to_vec(), shape[2]);
        let mean = x
            .sum_dim(2)
            .scale(1.0 / width as f32)
            .reshape(&[rows[0], rows[1], 1]);
        x.sub(&mean)
            .rms_norm(&self.weight, self.eps)
            .add(&self.bias)
    }
}

/// The ConvNeXt block after each ×2 upsampling: causal depthwise conv (k7), LayerNorm
/// (eps 1e-6), Linear ×4, exact GELU, Linear back, times γ, plus the input.
pub(super) struct ConvNeXt<T> {
    depthwise: CausalConv<T>,
    norm: LayerNorm<T>,
    expand: Affine<T>,
    project: Affine<T>,
    gamma: T,
}

impl<T: Tensor> ConvNeXt<T> {
    pub fn load(
        l: &Loader<T>,
        prefix: &str,
        dim: usize,
        slots: &mut Slots,
    ) -> Result<Self, LoadError> {
        let depthwise = ConvShape {
            groups: dim,
            ..ConvShape::plain(dim, dim, 7)
        };
        Ok(ConvNeXt {
            depthwise: CausalConv::load(l, &format!("{prefix}.dwconv.conv"), depthwise, slots)?,
            norm: LayerNorm::load(l, &format!("{prefix}.norm"), dim, 1e-6)?,
            expand: Affine::load(l, &format!("{prefix}.pwconv1"), 4 * dim, dim)?,
            project: Affine::load(l, &format!("{prefix}.pwconv2"), dim, 4 * dim)?,
            gamma: l.tensor(&format!("{prefix}.gamma"), &[dim])?,
        })
    }

    pub fn forward(&self, x: &T, stream: &mut DecoderStream<T>) -> T {
        let h = self.norm.forward(&self.depthwise.forward(x, stream));
        let h = self.project.forward(&self.expand.forward(&h).gelu());
        x.add(&h.mul(&self.gamma))
    }
}

/// `x + conv1x1(snake(conv7_dilated(snake(x))))`.
struct ResidualUnit<T> {
    act1: SnakeBeta<T>,
    conv1: CausalConv<T>,
    act2: SnakeBeta<T>,
    conv2: CausalConv<T>,
}

impl<T: Tensor> ResidualUnit<T> {
    fn load(
        l: &Loader<T>,
        prefix: &str,
        dim: usize,
        dilation: usize,
        slots: &mut Slots,
    ) -> Result<Self, LoadError> {
        let dilated = ConvShape {
            dilation,
            ..ConvShape::plain(dim, dim, 7)
        };
        Ok(ResidualUnit {
            act1: SnakeBeta::load(l, &format!("{prefix}.act1"), dim)?,
            conv1: CausalConv::load(l, &format!("{prefix}.conv1.conv"), dilated, slots)?,
            act2: SnakeBeta::load(l, &format!("{prefix}.act2"), dim)?,
            conv2: CausalConv::load(
                l,
                &format!("{prefix}.conv2.conv"),
                ConvShape::plain(dim, dim, 1),
                slots,
            )?,
        })
    }

    fn forward(&self, x: &T, stream: &mut DecoderStream<T>) -> T {
        let h = self.conv1.forward(&self.act1.forward(x), stream);
        let h = self.conv2.forward(&self.act2.forward(&h), stream);
        h.add(x)
    }
}

/// One upsampling block of the waveform decoder: SnakeBeta, a causal transposed conv by
/// `rate` (kernel `2 · rate`) halving the channels, then residual units dilated 1, 3 and 9.
pub(super) struct DecoderBlock<T> {
    act: SnakeBeta<T>,
    upsample: CausalTransposeConv<T>,
    units: Vec<ResidualUnit<T>>,
}

impl<T: Tensor> DecoderBlock<T> {
    pub fn load(
        l: &Loader<T>,
        prefix: &str,
        input: usize,
        rate: usize,
        slots: &mut Slots,
    ) -> Result<Self, LoadError> {
        let output = input / 2;
        let upsample = CausalTransposeConv::load(
            l,
            &format!("{prefix}.1.conv"),
            [input, output, 2 * rate],
            rate,
            slots,
        )?;
        let units = [1, 3, 9]
            .iter()
            .enumerate()
            .map(|(i, &dilation)| {
                ResidualUnit::load(l, &format!("{prefix}.{}", i + 2), output, dilation, slots)
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(DecoderBlock {
            act: SnakeBeta::load(l, &format!("{prefix}.0"), input)?,
            upsample,
            units,
        })
    }

    pub fn forward(&self, x: &T, stream: &mut DecoderStream<T>) -> T {
        let mut h = self.upsample.forward(&self.act.forward(x), stream);
        for unit in &self.units {
            h = unit.forward(&h, stream);
        }
        h
    }
}
