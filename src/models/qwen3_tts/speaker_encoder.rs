//! The Base variants' speaker encoder (spec §10): ECAPA-TDNN over the log-mel of a 24 kHz
//! clip, to an x-vector as wide as the talker. TDNN, 3 SE-Res2Net blocks, multi-layer feature
//! aggregation, attentive statistics pooling, `fc`. Every conv pads "same" in reflect mode.
//!
//! The convs run on the tensor interface, tap by tap (a dilated conv is a sum of shifted
//! `linear`s, and the interface's conv has no dilation). The gates and the pooling
//! (sigmoid, tanh, softmax, square root) run on the host: they read a few vectors once per
//! clip, and the interface has none of those ops.

use super::config::SpeakerEncoderConfig;
use super::speaker_mel::SpeakerMel;
use crate::nn::layers::Loader;
use crate::nn::LoadError;
use crate::tensor::{DType, PadMode, Tensor};

/// A conv with "same" reflect padding and a bias: taps `[out, in]` each.
struct SameConv<T: Tensor> {
    taps: Vec<T>,
    bias: T,
    dilation: usize,
}

impl<T: Tensor> SameConv<T> {
    fn load(
        l: &Loader<T>,
        key: &str,
        (out, inp, kernel): (usize, usize, usize),
        dilation: usize,
    ) -> Result<Self, LoadError> {
        let weight = l.tensor(&format!("{key}.weight"), &[out, inp, kernel])?;
        let taps = (0..kernel)
            .map(|j| weight.narrow(2, j, 1).reshape(&[out, inp]))
            .collect();
        Ok(SameConv {
            taps,
            bias: l.tensor(&format!("{key}.bias"), &[out])?,
            dilation,
        })
    }

    /// `x` `[1, time, in]` to `[1, time, out]`.
    fn forward(&self, x: &T) -> T {
        let time = x.shape()[1];
        let total = self.dilation * (self.taps.len() - 1);
        let padded = if total > 0 {
            x.pad_time(total / 2, total - total / 2, PadMode::Reflect)
        } else {
            x.clone()
        };
        let mut y = padded.narrow(1, 0, time).linear(&self.taps[0]);
        for (j, tap) in self.taps.iter().enumerate().skip(1) {
            y = y.add(&padded.narrow(1, j * self.dilation, time).linear(tap));
        }
        y.add(&self.bias)
    }

    /// The conv followed by ReLU: a `TimeDelayNetBlock`.
    fn relu(&self, x: &T) -> T {
        self.forward(x).relu()
    }
}

struct SeRes2NetBlock<T: Tensor> {
    tdnn1: SameConv<T>,
    res2net: Vec<SameConv<T>>,
    tdnn2: SameConv<T>,
    se1: SameConv<T>,
    se2: SameConv<T>,
    scale: usize,
}

impl<T: Tensor> SeRes2NetBlock<T> {
    fn forward(&self, x: &T, device: &T::Device) -> T {
        let h = self.tdnn1.relu(x);
        let width = h.shape()[2] / self.scale;
        let mut parts: Vec<T> = Vec::with_capacity(self.scale);
        for i in 0..self.scale {
            let chunk = h.narrow(2, i * width, width);
            let y = match i {
                0 => chunk,
                1 => self.res2net[0].relu(&chunk),
                _ => self.res2net[i - 1].relu(&chunk.add(&parts[i - 1])),
            };
            parts.push(y);
        }
        let h = self
            .tdnn2
            .relu(&T::cat(&parts.iter().collect::<Vec<_>>(), 2));
        // Squeeze-excitation: a per-channel gate from the time mean.
        let time = h.shape()[1];
        let mean = h
            .sum_dim(1)
            .scale(1.0 / time as f32)
            .reshape(&[1, 1, h.shape()[2]]);
        let logits = self.se2.forward(&self.se1.relu(&mean));
        let gate: Vec<f32> = logits.to_vec_f32().iter().map(|&v| sigmoid(v)).collect();
        let gate = T::from_f32(device, &gate, &[1, 1, gate.len()], h.dtype());
        h.mul(&gate).add(x)
    }
}

pub struct SpeakerEncoder<T: Tensor> {
    stem: SameConv<T>,
    blocks: Vec<SeRes2NetBlock<T>>,
    mfa: SameConv<T>,
    asp_tdnn: SameConv<T>,
    asp_conv: SameConv<T>,
    fc: SameConv<T>,
    device: T::Device,
    dtype: DType,
}

impl<T: Tensor> SpeakerEncoder<T> {
    /// Loads `speaker_encoder.*` (`l` is scoped there).
    pub fn load(
        l: &Loader<T>,
        c: &SpeakerEncoderConfig,
        device: &T::Device,
        dtype: DType,
    ) -> Result<Self, LoadError> {
        let ch = &c.enc_channels;
        let (k, d) = (&c.enc_kernel_sizes, &c.enc_dilations);
        let stem = SameConv::load(l, "blocks.0.conv", (ch[0], c.mel_dim, k[0]), d[0])?;
        let width = |i: usize| ch[i] / c.enc_res2net_scale;
        let blocks = (1..4)
            .map(|i| {
                let p = format!("blocks.{i}");
                Ok(SeRes2NetBlock {
                    tdnn1: SameConv::load(l, &format!("{p}.tdnn1.conv"), (ch[i], ch[i - 1], 1), 1)?,
                    res2net: (0..c.enc_res2net_scale - 1)
                        .map(|j| {
                            SameConv::load(
                                l,
                                &format!("{p}.res2net_block.blocks.{j}.conv"),
                                (width(i), width(i), k[i]),
                                d[i],
                            )
                        })
                        .collect::<Result<_, _>>()?,
                    tdnn2: SameConv::load(l, &format!("{p}.tdnn2.conv"), (ch[i], ch[i], 1), 1)?,
                    se1: SameConv::load(
                        l,
                        &format!("{p}.se_block.conv1"),
                        (c.enc_se_channels, ch[i], 1),
                        1,
                    )?,
                    se2: SameConv::load(
                        l,
                        &format!("{p}.se_block.conv2"),
                        (ch[i], c.enc_se_channels, 1),
                        1,
                    )?,
                    scale: c.enc_res2net_scale,
                })
            })
            .collect::<Result<_, LoadError>>()?;
        let last = ch[4];
        let mfa = SameConv::load(l, "mfa.conv", (last, ch[1] + ch[2] + ch[3], k[4]), d[4])?;
        let attention = c.enc_attention_channels;
        Ok(SpeakerEncoder {
            stem,
            blocks,
            mfa,
            asp_tdnn: SameConv::load(l, "asp.tdnn.conv", (attention, last * 3, 1), 1)?,
            asp_conv: SameConv::load(l, "asp.conv", (last, attention, 1), 1)?,
            fc: SameConv::load(l, "fc", (c.enc_dim, last * 2, 1), 1)?,
            device: device.clone(),
            dtype,
        })
    }

    /// The x-vector of a clip's log-mel.
    pub fn x_vector(&self, mel: &SpeakerMel) -> Vec<f32> {
        let time = mel.frames;
        let x = T::from_f32(
            &self.device,
            &mel.data,
            &[1, time, SpeakerMel::BINS],
            self.dtype,
        );
        let mut h = self.stem.relu(&x);
        let mut hidden = Vec::with_capacity(3);
        for block in &self.blocks {
            h = block.forward(&h, &self.device);
            hidden.push(h.clone());
        }
        let h = self
            .mfa
            .relu(&T::cat(&hidden.iter().collect::<Vec<_>>(), 2));
        let channels = h.shape()[2];
        let frames = h.to_vec_f32();
        // Attentive statistics pooling: the attention reads each frame beside the clip's
        // plain mean and std, then weights the frames per channel.
        let uniform = vec![1.0 / time as f32; time * channels];
        let (mean, std) = statistics(&frames, &uniform, time, channels);
        let mut context = Vec::with_capacity(time * channels * 3);
        for t in 0..time {
            context.extend_from_slice(&frames[t * channels..(t + 1) * channels]);
            context.extend_from_slice(&mean);
            context.extend_from_slice(&std);
        }
        let context = T::from_f32(&self.device, &context, &[1, time, channels * 3], self.dtype);
        let a = self.asp_tdnn.relu(&context).to_vec_f32();
        let a: Vec<f32> = a.iter().map(|v| v.tanh()).collect();
        let attention = T::from_f32(&self.device, &a, &[1, time, a.len() / time], self.dtype);
        let logits = self.asp_conv.forward(&attention).to_vec_f32();
        let weights = softmax_over_time(&logits, time, channels);
        let (mean, std) = statistics(&frames, &weights, time, channels);
        let pooled = [mean, std].concat();
        let pooled = T::from_f32(&self.device, &pooled, &[1, 1, channels * 2], self.dtype);
        self.fc.forward(&pooled).to_vec_f32()
    }
}

fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

/// Weighted mean and std per channel of `x` `[time][channels]` with weights of the same shape
/// (summing to 1 over time), the std's variance clamped at 1e-12 as the reference does.
fn statistics(x: &[f32], w: &[f32], time: usize, channels: usize) -> (Vec<f32>, Vec<f32>) {
    let mut mean = vec![0f32; channels];
    for t in 0..time {
        for c in 0..channels {
            mean[c] += w[t * channels + c] * x[t * channels + c];
        }
    }
    let mut var = vec![0f32; channels];
    for t in 0..time {
        for c in 0..channels {
            let d = x[t * channels + c] - mean[c];
            var[c] += w[t * channels + c] * d * d;
        }
    }
    let std = var.iter().map(|v| v.max(1e-12).sqrt()).collect();
    (mean, std)
}

/// Softmax over the time axis of `x` `[time][channels]`.
fn softmax_over_time(x: &[f32], time: usize, channels: usize) -> Vec<f32> {
    let mut out = vec![0f32; x.len()];
    for c in 0..channels {
        let max = (0..time)
            .map(|t| x[t * channels + c])
            .fold(f32::NEG_INFINITY, f32::max);
        let mut sum = 0f32;
        for t in 0..time {
            let e = (x[t * channels + c] - max).exp();
            out[t * channels + c] = e;
            sum += e;
        }
        for t in 0..time {
            out[t * channels + c] /= sum;
        }
    }
    out
}
