//! The Mimi SEANet encoder (transformers `MimiEncoder`): a conv, then per ratio (4, 5, 6, 8)
//! residual blocks and a strided conv doubling the channels, then a conv to the hidden size.
//! ELU (α = 1) before every conv but the first.

use crate::models::qwen3_tts::config::SpeechEncoderConfig;
use crate::nn::layers::Loader;
use crate::nn::LoadError;
use crate::tensor::{ConvKind, PadMode, Tensor};

/// `MimiConv1d` with causal padding: `kernel - stride` samples on the left (dilated kernel),
/// and on the right whatever makes the length a multiple of the stride, so `len` inputs give
/// `ceil(len / stride)` outputs.
pub(super) struct MimiConv<T> {
    weight: T,
    bias: Option<T>,
    span: usize,
    stride: usize,
    dilation: usize,
    pad: PadMode,
}

/// Channels, kernel, stride and dilation of a [`MimiConv`].
pub(super) struct MimiConvShape {
    pub input: usize,
    pub output: usize,
    pub kernel: usize,
    pub stride: usize,
    pub dilation: usize,
}

impl MimiConvShape {
    pub fn plain(input: usize, output: usize, kernel: usize) -> Self {
        MimiConvShape {
            input,
            output,
            kernel,
            stride: 1,
            dilation: 1,
        }
    }
}

impl<T: Tensor> MimiConv<T> {
    /// `{prefix}.weight` `[out, in, kernel]`, and `{prefix}.bias` when `bias`.
    pub fn load(
        l: &Loader<T>,
        prefix: &str,
        shape: MimiConvShape,
        bias: bool,
        pad: PadMode,
    ) -> Result<Self, LoadError> {
        let MimiConvShape {
            input,
            output,
            kernel,
            stride,
            dilation,
        } = shape;
        let weight = l.tensor(&format!("{prefix}.weight"), &[output, input, kernel])?;
        let bias = if bias {
            Some(l.tensor(&format!("{prefix}.bias"), &[output])?)
        } else {
            None
        };
        Ok(MimiConv {
            weight: T::prepare_conv_weight(&weight, ConvKind::Conv),
            bias,
            span: (kernel - 1) * dilation + 1,
            stride,
            dilation,
            pad,
        })
    }

    /// `[1, len, in]` -> `[1, ceil(len / stride), out]`.
    pub fn forward(&self, x: &T) -> T {
        let len = x.shape()[1];
        let right = len.div_ceil(self.stride) * self.stride - len;
        let padded = x.pad_time(self.span - self.stride, right, self.pad);
        let y = if self.stride == 1 {
            padded.conv1d_dilated(&self.weight, self.dilation, 1)
        } else {
            padded.conv1d(&self.weight, self.stride)
        };
        match &self.bias {
            Some(bias) => y.add(bias),
            None => y,
        }
    }
}

/// `x + conv1x1(elu(conv_k(elu(x))))`, the bottleneck `compress` times narrower.
struct ResnetBlock<T> {
    narrow: MimiConv<T>,
    widen: MimiConv<T>,
    shortcut: Option<MimiConv<T>>,
}

impl<T: Tensor> ResnetBlock<T> {
    fn forward(&self, x: &T) -> T {
        let h = self.widen.forward(&self.narrow.forward(&x.elu()).elu());
        match &self.shortcut {
            Some(shortcut) => shortcut.forward(x).add(&h),
            None => x.add(&h),
        }
    }
}

struct Stage<T> {
    blocks: Vec<ResnetBlock<T>>,
    downsample: MimiConv<T>,
}

pub(super) struct Seanet<T> {
    input: MimiConv<T>,
    stages: Vec<Stage<T>>,
    output: MimiConv<T>,
}

impl<T: Tensor> Seanet<T> {
    /// Keys under `encoder.encoder.layers.`, numbered as the official `nn.Sequential` numbers
    /// its modules (the ELUs take indices too).
    pub fn load(l: &Loader<T>, c: &SpeechEncoderConfig) -> Result<Self, LoadError> {
        let conv = |index: usize, shape: MimiConvShape| {
            MimiConv::load(l, &format!("{index}.conv"), shape, true, PadMode::Zero)
        };
        let input = conv(
            0,
            MimiConvShape::plain(c.audio_channels, c.num_filters, c.kernel_size),
        )?;
        let mut index = 1;
        let mut width = c.num_filters;
        let mut stages = Vec::new();
        for &ratio in c.upsampling_ratios.iter().rev() {
            let mut blocks = Vec::new();
            let mut dilation = 1;
            for _ in 0..c.num_residual_layers {
                let hidden = width / c.compress;
                let block = |name: &str, shape| {
                    MimiConv::load(
                        l,
                        &format!("{index}.{name}.conv"),
                        shape,
                        true,
                        PadMode::Zero,
                    )
                };
                blocks.push(ResnetBlock {
                    narrow: block(
                        "block.1",
                        MimiConvShape {
                            dilation,
                            ..MimiConvShape::plain(width, hidden, c.residual_kernel_size)
                        },
                    )?,
                    widen: block("block.3", MimiConvShape::plain(hidden, width, 1))?,
                    shortcut: if c.use_conv_shortcut {
                        Some(block("shortcut", MimiConvShape::plain(width, width, 1))?)
                    } else {
                        None
                    },
                });
                dilation *= c.dilation_growth_rate;
                index += 1;
            }
            // The ELU before the strided conv.
            index += 1;
            let downsample = conv(
                index,
                MimiConvShape {
                    stride: ratio,
                    ..MimiConvShape::plain(width, 2 * width, 2 * ratio)
                },
            )?;
            stages.push(Stage { blocks, downsample });
            index += 1;
            width *= 2;
        }
        // The ELU before the last conv.
        index += 1;
        let output = conv(
            index,
            MimiConvShape::plain(width, c.hidden_size, c.last_kernel_size),
        )?;
        Ok(Seanet {
            input,
            stages,
            output,
        })
    }

    /// `[1, samples, 1]` -> `[1, ceil(samples / hop), hidden]`.
    pub fn forward(&self, x: &T) -> T {
        let mut x = self.input.forward(x);
        for stage in &self.stages {
            for block in &stage.blocks {
                x = block.forward(&x);
            }
            x = stage.downsample.forward(&x.elu());
        }
        self.output.forward(&x.elu())
    }
}
