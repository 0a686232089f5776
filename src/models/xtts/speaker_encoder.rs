//! XTTS-v2's speaker encoder (coqui's `ResNetSpeakerEncoder`, "H/ASP"; docs/xtts-v2-spec.md
//! §3.3): a 16 kHz clip to the unit-norm 512-d embedding that conditions HiFi-GAN.
//!
//! Front end, on the host: pre-emphasis (the checkpoint's 2-tap filter, the first sample
//! reflected), a centred, reflect-padded STFT with the checkpoint's Hamming window, power
//! spectrum, the checkpoint's HTK filterbank, `log(x + 1e-6)`, instance norm per mel band.
//! Then a ResNet over the `[mels, frames]` image: `conv1 → ReLU → BN`, four layers of
//! SE-basic blocks (`conv → ReLU → BN → conv → BN → SE`, plus the residual, ReLU; the first
//! block of layers 2–4 halves both axes), attention weights softmaxed over time, attentive
//! statistics pooling, `fc`, L2 normalisation.
//!
//! The 3×3 convs run on the tensor interface as conv1d over time with the frequency rows as the
//! batch, one conv1d per frequency tap (the interface has no 2-D conv). BatchNorm is folded
//! into a per-channel scale and shift at load, as ATen's inference kernel forms them. The SE
//! gates and the pooling (sigmoid, softmax, square root over a few vectors) run on the host.

use crate::audio::mel::{reflect_pad, MelBank};
use crate::nn::layers::Loader;
use crate::nn::LoadError;
use crate::tensor::{DType, PadMode, Tensor};

/// The speaker encoder's input rate.
pub const SPEAKER_SAMPLE_RATE: u32 = 16_000;
const N_FFT: usize = 512;
const HOP: usize = 160;
const LOG_FLOOR: f32 = 1e-6;
const NORM_EPS: f64 = 1e-5;
const BN_EPS: f32 = 1e-5;
/// ASP's variance floor.
const VARIANCE_FLOOR: f64 = 1e-5;

/// A clip the front end cannot frame (the centred STFT reflects `n_fft / 2` samples).
#[derive(Debug, thiserror::Error)]
#[error(
    "the reference clip is {samples} samples at 16 kHz; the speaker encoder needs more than {min}"
)]
pub struct ClipTooShort {
    pub samples: usize,
    pub min: usize,
}

/// BatchNorm in inference: `x · scale + shift` per channel.
struct Affine<T> {
    scale: T,
    shift: T,
}

impl<T: Tensor> Affine<T> {
    fn load(l: &Loader<T>, key: &str, channels: usize) -> Result<Self, LoadError> {
        let v = |name: &str| l.host_f32(&format!("{key}.{name}"), &[channels]);
        let (weight, bias, mean, var) = (
            v("weight")?,
            v("bias")?,
            v("running_mean")?,
            v("running_var")?,
        );
        let mut scale = Vec::with_capacity(channels);
        let mut shift = Vec::with_capacity(channels);
        for c in 0..channels {
            let alpha = weight[c] / (var[c] + BN_EPS).sqrt();
            scale.push(alpha);
            shift.push(bias[c] - mean[c] * alpha);
        }
        Ok(Affine {
            scale: l.from_f32(&scale, &[channels]),
            shift: l.from_f32(&shift, &[channels]),
        })
    }

    fn forward(&self, x: &T) -> T {
        x.mul(&self.scale).add(&self.shift)
    }
}

/// Keeps every other row of `x` `[rows, time, channels]` (rows is even), from row 0.
fn even_rows<T: Tensor>(x: &T) -> T {
    let s = x.shape();
    x.reshape(&[s[0] / 2, 2, s[1], s[2]])
        .narrow(1, 0, 1)
        .reshape(&[s[0] / 2, s[1], s[2]])
}

/// A 3×3 conv with padding 1 over `[freq, time, channels]`, stride 1 or 2 on both axes: one
/// conv1d over time per frequency tap.
struct Conv3x3<T> {
    /// `[out, in, 3]` per frequency offset.
    taps: [T; 3],
    bias: Option<T>,
    stride: usize,
}

impl<T: Tensor> Conv3x3<T> {
    fn load(
        l: &Loader<T>,
        key: &str,
        out: usize,
        input: usize,
        stride: usize,
        bias: bool,
    ) -> Result<Self, LoadError> {
        let weight = l.tensor(&format!("{key}.weight"), &[out, input, 3, 3])?;
        let tap = |df: usize| weight.narrow(2, df, 1).reshape(&[out, input, 3]);
        Ok(Conv3x3 {
            taps: [tap(0), tap(1), tap(2)],
            bias: bias
                .then(|| l.tensor(&format!("{key}.bias"), &[out]))
                .transpose()?,
            stride,
        })
    }

    fn forward(&self, x: &T) -> T {
        let freq = x.shape()[0];
        // Zero rows above and below (the frequency axis moved to where `pad_time` pads),
        // then zero samples on both sides of the time axis.
        let padded = x
            .transpose(0, 1)
            .pad_time(1, 1, PadMode::Zero)
            .transpose(0, 1)
            .pad_time(1, 1, PadMode::Zero);
        let mut sum: Option<T> = None;
        for (df, tap) in self.taps.iter().enumerate() {
            let mut rows = padded.narrow(0, df, freq);
            if self.stride == 2 {
                rows = even_rows(&rows);
            }
            let part = rows.conv1d(tap, self.stride);
            sum = Some(match sum {
                None => part,
                Some(sum) => sum.add(&part),
            });
        }
        let y = sum.unwrap_or_else(|| unreachable!("three taps"));
        match &self.bias {
            Some(b) => y.add(b),
            None => y,
        }
    }
}

/// A linear layer applied on the host (the SE gates, the attention pooling's `fc`).
struct HostLinear {
    weight: Vec<f32>,
    bias: Vec<f32>,
    input: usize,
}

impl HostLinear {
    fn load<T: Tensor>(
        l: &Loader<T>,
        key: &str,
        out: usize,
        input: usize,
    ) -> Result<Self, LoadError> {
        Ok(HostLinear {
            weight: l.host_f32(&format!("{key}.weight"), &[out, input])?,
            bias: l.host_f32(&format!("{key}.bias"), &[out])?,
            input,
        })
    }

    fn forward(&self, x: &[f64]) -> Vec<f64> {
        self.weight
            .chunks_exact(self.input)
            .zip(&self.bias)
            .map(|(row, &b)| row.iter().zip(x).map(|(&w, &v)| w as f64 * v).sum::<f64>() + b as f64)
            .collect()
    }
}

/// Squeeze-and-excitation: each channel scaled by a gate from the channel means.
struct SqueezeExcite {
    fc0: HostLinear,
    fc2: HostLinear,
}

impl SqueezeExcite {
    fn forward<T: Tensor>(&self, x: &T, device: &T::Device) -> T {
        let channels = x.shape()[2];
        let values = x.to_vec_f32();
        let mut means = vec![0f64; channels];
        for row in values.chunks_exact(channels) {
            for (m, &v) in means.iter_mut().zip(row) {
                *m += v as f64;
            }
        }
        let positions = (values.len() / channels) as f64;
        means.iter_mut().for_each(|m| *m /= positions);
        let hidden: Vec<f64> = self
            .fc0
            .forward(&means)
            .into_iter()
            .map(|v| v.max(0.0))
            .collect();
        let gates: Vec<f32> = self
            .fc2
            .forward(&hidden)
            .into_iter()
            .map(|v| (1.0 / (1.0 + (-v).exp())) as f32)
            .collect();
        x.mul(&T::from_f32(device, &gates, &[channels], x.dtype()))
    }
}

/// `SEBasicBlock`, with its 1×1 strided `downsample` when it changes the shape.
struct Block<T> {
    conv1: Conv3x3<T>,
    bn1: Affine<T>,
    conv2: Conv3x3<T>,
    bn2: Affine<T>,
    se: SqueezeExcite,
    downsample: Option<(T, Affine<T>)>,
}

impl<T: Tensor> Block<T> {
    fn load(l: &Loader<T>, key: &str) -> Result<Self, LoadError> {
        let shape = l.shape(&format!("{key}.conv1.weight"))?;
        let (planes, input) = (shape[0], shape[1]);
        let downsample = match l.shape(&format!("{key}.downsample.0.weight")) {
            Ok(_) => Some((
                l.tensor(
                    &format!("{key}.downsample.0.weight"),
                    &[planes, input, 1, 1],
                )?
                .reshape(&[planes, input, 1]),
                Affine::load(l, &format!("{key}.downsample.1"), planes)?,
            )),
            Err(_) => None,
        };
        let stride = if downsample.is_some() { 2 } else { 1 };
        let reduced = l.shape(&format!("{key}.se.fc.0.weight"))?[0];
        Ok(Block {
            conv1: Conv3x3::load(l, &format!("{key}.conv1"), planes, input, stride, false)?,
            bn1: Affine::load(l, &format!("{key}.bn1"), planes)?,
            conv2: Conv3x3::load(l, &format!("{key}.conv2"), planes, planes, 1, false)?,
            bn2: Affine::load(l, &format!("{key}.bn2"), planes)?,
            se: SqueezeExcite {
                fc0: HostLinear::load(l, &format!("{key}.se.fc.0"), reduced, planes)?,
                fc2: HostLinear::load(l, &format!("{key}.se.fc.2"), planes, reduced)?,
            },
            downsample,
        })
    }

    fn forward(&self, x: &T, device: &T::Device) -> T {
        let out = self.bn1.forward(&self.conv1.forward(x).relu());
        let out = self.bn2.forward(&self.conv2.forward(&out));
        let out = self.se.forward(&out, device);
        let residual = match &self.downsample {
            Some((weight, bn)) => bn.forward(&even_rows(x).conv1d(weight, 2)),
            None => x.clone(),
        };
        out.add(&residual).relu()
    }
}

/// The front end's constants from the checkpoint's buffers.
struct FrontEnd {
    pre_emphasis: [f32; 2],
    bank: MelBank,
    mels: usize,
}

impl FrontEnd {
    /// Frames `[t][mel]` of `log(mel + 1e-6)`, before instance norm.
    fn log_mel(&self, clip: &[f32]) -> Result<Vec<f32>, ClipTooShort> {
        let min = N_FFT / 2;
        if clip.len() <= min {
            return Err(ClipTooShort {
                samples: clip.len(),
                min,
            });
        }
        // conv1d with [−0.97, 1] over the clip with its second sample reflected in front.
        let [a, b] = self.pre_emphasis;
        let emphasized: Vec<f32> = std::iter::once(a * clip[1] + b * clip[0])
            .chain(clip.windows(2).map(|w| a * w[0] + b * w[1]))
            .collect();
        let padded = reflect_pad(&emphasized, N_FFT / 2);
        let frames = clip.len() / HOP + 1;
        // torchaudio takes |X| then squares it.
        let power = |p: f64| {
            let magnitude = p.sqrt() as f32;
            magnitude * magnitude
        };
        Ok(self
            .bank
            .frames(&padded, frames, power, |m| (m + LOG_FLOOR).ln()))
    }
}

/// `InstanceNorm1d` (no affine): each band over time, biased variance, as `[mel][t]`.
fn instance_norm(frames: &[f32], mels: usize) -> Vec<f32> {
    let time = frames.len() / mels;
    let mut out = vec![0f32; frames.len()];
    for m in 0..mels {
        let band = (0..time).map(|t| frames[t * mels + m] as f64);
        let mean = band.clone().sum::<f64>() / time as f64;
        let var = band.map(|v| (v - mean).powi(2)).sum::<f64>() / time as f64;
        let inv = 1.0 / (var + NORM_EPS).sqrt();
        for t in 0..time {
            out[m * time + t] = ((frames[t * mels + m] as f64 - mean) * inv) as f32;
        }
    }
    out
}

pub struct SpeakerEncoder<T: Tensor> {
    device: T::Device,
    dtype: DType,
    front: FrontEnd,
    conv1: Conv3x3<T>,
    bn1: Affine<T>,
    blocks: Vec<Block<T>>,
    attention_in: (T, T),
    attention_bn: Affine<T>,
    attention_out: (T, T),
    fc: HostLinear,
    embedding: usize,
}

impl<T: Tensor> SpeakerEncoder<T> {
    /// Loads `speaker_encoder.*` from `l` (the `hifigan_decoder.` scope of an XTTS checkpoint);
    /// every width comes from the checkpoint's shapes.
    pub fn load(l: &Loader<T>) -> Result<Self, LoadError> {
        let l = l.scoped("speaker_encoder.");
        let fb_shape = l.shape("torch_spec.1.mel_scale.fb")?;
        let (bins, mels) = (fb_shape[0], fb_shape[1]);
        if bins != N_FFT / 2 + 1 || mels % 8 != 0 {
            return Err(LoadError::invalid(
                "speaker_encoder",
                "torch_spec.1.mel_scale.fb",
                format!(
                    "shape {fb_shape:?}, expected [{}, a multiple of 8]",
                    N_FFT / 2 + 1
                ),
            ));
        }
        let window_len = l.shape("torch_spec.1.spectrogram.window")?[0];
        if window_len > N_FFT {
            return Err(LoadError::invalid(
                "speaker_encoder",
                "torch_spec.1.spectrogram.window",
                format!("{window_len} samples, more than n_fft {N_FFT}"),
            ));
        }
        let mut window = vec![0f32; N_FFT];
        let offset = (N_FFT - window_len) / 2;
        window[offset..offset + window_len]
            .copy_from_slice(&l.host_f32("torch_spec.1.spectrogram.window", &[window_len])?);
        let filter = l.host_f32("torch_spec.0.filter", &[1, 1, 2])?;
        let front = FrontEnd {
            pre_emphasis: [filter[0], filter[1]],
            bank: MelBank::with_window(
                N_FFT,
                HOP,
                mels,
                window,
                l.host_f32("torch_spec.1.mel_scale.fb", &[bins, mels])?,
            ),
            mels,
        };

        let stem = l.shape("conv1.weight")?[0];
        let mut blocks = Vec::new();
        for layer in 1.. {
            let first = format!("layer{layer}.0");
            if l.shape(&format!("{first}.conv1.weight")).is_err() {
                break;
            }
            for b in 0.. {
                let key = format!("layer{layer}.{b}");
                if l.shape(&format!("{key}.conv1.weight")).is_err() {
                    break;
                }
                blocks.push(Block::load(&l, &key)?);
            }
        }
        let attention = l.shape("attention.0.weight")?;
        let (hidden, pooled) = (attention[0], attention[1]);
        let fc = l.shape("fc.weight")?;
        let conv1x1 = |key: &str, out: usize, input: usize| -> Result<(T, T), LoadError> {
            Ok((
                l.tensor(&format!("{key}.weight"), &[out, input, 1])?
                    .reshape(&[out, input]),
                l.tensor(&format!("{key}.bias"), &[out])?,
            ))
        };
        Ok(SpeakerEncoder {
            device: l.device.clone(),
            dtype: l.dtype,
            front,
            conv1: Conv3x3::load(&l, "conv1", stem, 1, 1, true)?,
            bn1: Affine::load(&l, "bn1", stem)?,
            blocks,
            attention_in: conv1x1("attention.0", hidden, pooled)?,
            attention_bn: Affine::load(&l, "attention.2", hidden)?,
            attention_out: conv1x1("attention.3", pooled, hidden)?,
            fc: HostLinear::load(&l, "fc", fc[0], fc[1])?,
            embedding: fc[0],
        })
    }

    /// The embedding's width (`d_vector_dim`).
    pub fn embedding_dim(&self) -> usize {
        self.embedding
    }

    /// The front end's `log(mel + 1e-6)` of a 16 kHz clip, `[mel][t]` (before instance norm).
    pub fn log_mel(&self, clip: &[f32]) -> Result<Vec<f32>, ClipTooShort> {
        let frames = self.front.log_mel(clip)?;
        let mels = self.front.mels;
        let time = frames.len() / mels;
        Ok((0..mels)
            .flat_map(|m| (0..time).map(move |t| (m, t)))
            .map(|(m, t)| frames[t * mels + m])
            .collect())
    }

    /// The unit-norm speaker embedding of a mono 16 kHz clip in [-1, 1].
    pub fn embed(&self, clip: &[f32]) -> Result<Vec<f32>, ClipTooShort> {
        let mels = self.front.mels;
        let normed = instance_norm(&self.front.log_mel(clip)?, mels);
        let time = normed.len() / mels;
        let image = T::from_f32(&self.device, &normed, &[mels, time, 1], self.dtype);
        let mut x = self.bn1.forward(&self.conv1.forward(&image).relu());
        for block in &self.blocks {
            x = block.forward(&x, &self.device);
        }
        // [freq, time, channels] -> [time, channels · freq], channel-major as torch reshapes.
        let s = x.shape();
        let (freq, time, channels) = (s[0], s[1], s[2]);
        let features = x
            .transpose(0, 1)
            .transpose(1, 2)
            .reshape(&[time, channels * freq]);
        let (w_in, b_in) = &self.attention_in;
        let (w_out, b_out) = &self.attention_out;
        let hidden = self
            .attention_bn
            .forward(&features.linear(w_in).add(b_in).relu());
        let logits = hidden.linear(w_out).add(b_out).to_vec_f32();
        Ok(self.pool_and_project(&features.to_vec_f32(), &logits, time))
    }

    /// Attention softmax over time per feature, attentive statistics pooling (μ, σ), `fc`,
    /// L2 normalisation.
    fn pool_and_project(&self, features: &[f32], logits: &[f32], time: usize) -> Vec<f32> {
        let width = features.len() / time;
        let mut mu = vec![0f64; width];
        let mut sigma = vec![0f64; width];
        for f in 0..width {
            let max = (0..time)
                .map(|t| logits[t * width + f])
                .fold(f32::MIN, f32::max) as f64;
            let weights: Vec<f64> = (0..time)
                .map(|t| (logits[t * width + f] as f64 - max).exp())
                .collect();
            let total: f64 = weights.iter().sum();
            let (mut m, mut sq) = (0f64, 0f64);
            for (t, w) in weights.iter().enumerate() {
                let v = features[t * width + f] as f64;
                m += v * w / total;
                sq += v * v * w / total;
            }
            mu[f] = m;
            sigma[f] = (sq - m * m).max(VARIANCE_FLOOR).sqrt();
        }
        mu.extend(sigma);
        let projected = self.fc.forward(&mu);
        let norm = projected
            .iter()
            .map(|v| v * v)
            .sum::<f64>()
            .sqrt()
            .max(1e-12);
        projected.iter().map(|v| (v / norm) as f32).collect()
    }
}
