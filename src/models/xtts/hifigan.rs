//! XTTS-v2's waveform decoder (coqui's `HifiDecoder` + `HifiganGenerator`,
//! docs/xtts-v2-spec.md §6): GPT latents `[n, D]` and a speaker embedding to 24 kHz audio.
//!
//! The latents are first resampled twice with linear interpolation (`F.interpolate`,
//! `align_corners=False`, the scale given): ×`code_stride_len / output_hop_length` (4) to the
//! decoder's frame rate, then ×`output_sample_rate / input_sample_rate` (24000/22050) to the
//! output rate, each to `floor(len · scale)` frames. HiFi-GAN then runs `conv_pre` plus the
//! speaker's `cond_layer`, four stages of [leaky ReLU 0.1 → transposed conv → + `conds[i]`
//! → mean of the multi-receptive-field ResBlock1s], leaky ReLU 0.01, `conv_post`, tanh: 256
//! samples per frame. Weight norm (`g · v / ‖v‖` over every axis but the first) is folded
//! into plain weights at load. Every width comes from the checkpoint's shapes.

use crate::nn::layers::Loader;
use crate::nn::LoadError;
use crate::tensor::{ConvKind, DType, PadMode, Tensor};
use std::ops::Range;

/// HiFi-GAN's slope between layers (`LRELU_SLOPE`); the last activation uses torch's default.
const SLOPE: f32 = 0.1;
const LAST_SLOPE: f32 = 0.01;
/// ResBlock1's dilations in `convs1` and the upsampling strides: `HifiDecoder`'s defaults,
/// which no config field overrides (the kernels are read from the checkpoint).
const DILATIONS: [usize; 3] = [1, 3, 5];
const STRIDES: [usize; 4] = [8, 8, 2, 2];
/// The receptive field, in frames, is rounded up and this many frames added for the stream.
const CONTEXT_MARGIN: usize = 2;

/// The rates `HifiDecoder` is built with (`config.json`'s `model_args`).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DecoderRates {
    pub input_sample_rate: u32,
    pub output_sample_rate: u32,
    pub output_hop_length: usize,
    /// Audio samples per GPT code at the input rate (`gpt_code_stride_len`).
    pub code_stride_len: usize,
}

impl DecoderRates {
    /// XTTS-v2's published values.
    pub const PUBLISHED: DecoderRates = DecoderRates {
        input_sample_rate: 22_050,
        output_sample_rate: 24_000,
        output_hop_length: 256,
        code_stride_len: 1024,
    };

    /// From `config.json`; a missing field keeps the published value.
    pub fn from_config(config: &serde_json::Value) -> Result<Self, LoadError> {
        let args = &config["model_args"];
        let field = |name: &str, default: usize| -> Result<usize, LoadError> {
            match &args[name] {
                serde_json::Value::Null => Ok(default),
                v => v
                    .as_u64()
                    .filter(|&n| n > 0)
                    .map(|n| n as usize)
                    .ok_or_else(|| {
                        LoadError::invalid(
                            "config.json",
                            format!("model_args.{name}"),
                            format!("{v} is not a positive integer"),
                        )
                    }),
            }
        };
        let p = Self::PUBLISHED;
        Ok(DecoderRates {
            input_sample_rate: field("input_sample_rate", p.input_sample_rate as usize)? as u32,
            output_sample_rate: field("output_sample_rate", p.output_sample_rate as usize)? as u32,
            output_hop_length: field("output_hop_length", p.output_hop_length)?,
            code_stride_len: field("gpt_code_stride_len", p.code_stride_len)?,
        })
    }

    /// Decoder frames for `latents` GPT latents: `floor(floor(4n) · 24000/22050)`, 256
    /// samples each.
    pub fn frames_for(&self, latents: usize) -> usize {
        let [a, b] = self.scales();
        interpolated_len(interpolated_len(latents, a), b)
    }

    /// The two interpolation scales, as Python computes them (doubles).
    fn scales(&self) -> [f64; 2] {
        [
            self.code_stride_len as f64 / self.output_hop_length as f64,
            self.output_sample_rate as f64 / self.input_sample_rate as f64,
        ]
    }
}

/// `floor(len · scale)`: what `F.interpolate` makes of `len` frames.
pub fn interpolated_len(len: usize, scale: f64) -> usize {
    (len as f64 * scale).floor() as usize
}

/// Which input frames, and with which weights, make output frames `out` of a linear
/// interpolation of `input` frames by `scale` (ATen's `upsample_linear1d` CPU kernel, f32).
struct LinearTaps {
    first: Vec<i64>,
    second: Vec<i64>,
    first_weight: Vec<f32>,
    second_weight: Vec<f32>,
}

impl LinearTaps {
    fn new(input: usize, scale: f64, out: Range<usize>) -> Self {
        let n = out.len();
        let mut taps = LinearTaps {
            first: Vec::with_capacity(n),
            second: Vec::with_capacity(n),
            first_weight: Vec::with_capacity(n),
            second_weight: Vec::with_capacity(n),
        };
        let same_length = interpolated_len(input, scale) == input;
        let ratio = (1.0 / scale) as f32;
        for i in out {
            let (index, lambda) = if same_length {
                (i as i64, 0.0)
            } else {
                let source = (ratio * (i as f32 + 0.5) - 0.5).max(0.0);
                let index = (source.floor() as i64).min(input as i64 - 1);
                (index, (source - index as f32).clamp(0.0, 1.0))
            };
            let next = if index < input as i64 - 1 {
                index + 1
            } else {
                index
            };
            taps.first.push(index);
            taps.second.push(next);
            taps.first_weight.push(1.0 - lambda);
            taps.second_weight.push(lambda);
        }
        taps
    }

    /// The input frames these taps read.
    fn span(&self) -> Range<usize> {
        let lo = self.first.first().copied().unwrap_or(0) as usize;
        let hi = self
            .second
            .iter()
            .copied()
            .max()
            .map_or(lo, |m| m as usize + 1);
        lo..hi
    }

    /// The output frames from `x` `[frames, channels]`, whose row 0 is input frame `offset`.
    fn apply<T: Tensor>(&self, x: &T, offset: usize, device: &T::Device) -> T {
        let shift = |ids: &[i64]| {
            let local: Vec<i64> = ids.iter().map(|&i| i - offset as i64).collect();
            T::from_i64(device, &local, &[local.len()])
        };
        let n = self.first.len();
        let weight = |w: &[f32]| T::from_f32(device, w, &[n, 1], x.dtype());
        x.embedding(&shift(&self.first))
            .mul(&weight(&self.first_weight))
            .add(
                &x.embedding(&shift(&self.second))
                    .mul(&weight(&self.second_weight)),
            )
    }
}

/// `F.interpolate(x^T, scale_factor=scale, mode="linear")^T` for `x` `[frames, channels]`
/// (the decoder's resampling; also the GPT latents' `speed` stretch).
pub fn interpolate_linear<T: Tensor>(x: &T, scale: f64, device: &T::Device) -> T {
    let frames = x.shape()[0];
    LinearTaps::new(frames, scale, 0..interpolated_len(frames, scale)).apply(x, 0, device)
}

/// A Conv1d with "same" zero padding, weight norm folded.
struct Conv<T> {
    weight: T,
    bias: Option<T>,
    dilation: usize,
    pad: usize,
}

/// `g · v / ‖v‖`, the norm over every axis but the first, as `torch._weight_norm` forms it.
fn fold_weight_norm(g: &[f32], v: &[f32]) -> Vec<f32> {
    let per = v.len() / g.len();
    v.chunks_exact(per)
        .zip(g)
        .flat_map(|(slice, &g)| {
            let norm = slice
                .iter()
                .map(|&x| x as f64 * x as f64)
                .sum::<f64>()
                .sqrt() as f32;
            let factor = g / norm;
            slice.iter().map(move |&x| x * factor)
        })
        .collect()
}

/// A weight stored plain or weight-normed, `[shape]`, as f32 on the host.
fn load_weight<T: Tensor>(l: &Loader<T>, key: &str) -> Result<(Vec<f32>, Vec<usize>), LoadError> {
    let plain = format!("{key}.weight");
    if let Ok(shape) = l.shape(&plain) {
        return Ok((l.host_f32(&plain, &shape)?, shape));
    }
    let (g_key, v_key) = (
        format!("{key}.parametrizations.weight.original0"),
        format!("{key}.parametrizations.weight.original1"),
    );
    let shape = l.shape(&v_key)?;
    let mut g_shape = vec![1; shape.len()];
    g_shape[0] = shape[0];
    let g = l.host_f32(&g_key, &g_shape)?;
    Ok((fold_weight_norm(&g, &l.host_f32(&v_key, &shape)?), shape))
}

impl<T: Tensor> Conv<T> {
    fn load(l: &Loader<T>, key: &str, dilation: usize, bias: bool) -> Result<Self, LoadError> {
        let (values, shape) = load_weight(l, key)?;
        let weight = T::prepare_conv_weight(&l.from_f32(&values, &shape), ConvKind::Conv);
        let bias = bias
            .then(|| l.tensor(&format!("{key}.bias"), &shape[..1]))
            .transpose()?;
        Ok(Conv {
            weight,
            bias,
            dilation,
            pad: (shape[2] - 1) * dilation / 2,
        })
    }

    /// Frames each side an output sample reads.
    fn reach(&self) -> usize {
        self.pad
    }

    fn forward(&self, x: &T) -> T {
        let y = x
            .pad_time(self.pad, self.pad, PadMode::Zero)
            .conv1d_dilated(&self.weight, self.dilation, 1);
        match &self.bias {
            Some(b) => y.add(b),
            None => y,
        }
    }
}

/// ResBlock1: for each pair, `x += c2(lrelu(c1(lrelu(x))))`.
struct ResBlock<T> {
    pairs: Vec<(Conv<T>, Conv<T>)>,
}

impl<T: Tensor> ResBlock<T> {
    fn load(l: &Loader<T>, key: &str) -> Result<Self, LoadError> {
        let pairs = DILATIONS
            .iter()
            .enumerate()
            .map(|(m, &d)| {
                Ok((
                    Conv::load(l, &format!("{key}.convs1.{m}"), d, true)?,
                    Conv::load(l, &format!("{key}.convs2.{m}"), 1, true)?,
                ))
            })
            .collect::<Result<_, LoadError>>()?;
        Ok(ResBlock { pairs })
    }

    fn reach(&self) -> usize {
        self.pairs.iter().map(|(a, b)| a.reach() + b.reach()).sum()
    }

    fn forward(&self, x: &T) -> T {
        let mut x = x.clone();
        for (c1, c2) in &self.pairs {
            let y = c2.forward(&c1.forward(&x.leaky_relu(SLOPE)).leaky_relu(SLOPE));
            x = y.add(&x);
        }
        x
    }
}

/// One upsampling stage: the transposed conv, its speaker conditioning, its ResBlocks.
struct Stage<T> {
    weight: T,
    bias: T,
    stride: usize,
    crop: usize,
    cond: Option<(T, T)>,
    resblocks: Vec<ResBlock<T>>,
}

impl<T: Tensor> Stage<T> {
    fn forward(&self, x: &T, cond: Option<&T>) -> T {
        let y = x
            .leaky_relu(SLOPE)
            .conv_transpose1d(&self.weight, self.stride);
        let len = y.shape()[1] - 2 * self.crop;
        let mut y = y.narrow(1, self.crop, len).add(&self.bias);
        if let Some(c) = cond {
            y = y.add(c);
        }
        let mut sum = self.resblocks[0].forward(&y);
        for block in &self.resblocks[1..] {
            sum = sum.add(&block.forward(&y));
        }
        sum.scale(1.0 / self.resblocks.len() as f32)
    }
}

/// A speaker embedding of the wrong width (a voice made for another model).
#[derive(Debug, thiserror::Error)]
#[error("a speaker embedding of {got} values; this decoder takes {want}")]
pub struct EmbeddingWidth {
    pub got: usize,
    pub want: usize,
}

/// A speaker's conditioning, computed once per voice: `cond_layer(g)` and each stage's
/// `conds[i](g)`, `[1, 1, channels]`.
pub struct Conditioning<T> {
    pre: T,
    stages: Vec<Option<T>>,
}

pub struct HifiGan<T: Tensor> {
    device: T::Device,
    dtype: DType,
    rates: DecoderRates,
    latent_dim: usize,
    embedding_dim: usize,
    conv_pre: Conv<T>,
    cond_layer: (T, T),
    stages: Vec<Stage<T>>,
    conv_post: Conv<T>,
}

impl<T: Tensor> HifiGan<T> {
    /// Loads `waveform_decoder.*` from `l` (the `hifigan_decoder.` scope of an XTTS checkpoint).
    pub fn load(l: &Loader<T>, rates: DecoderRates) -> Result<Self, LoadError> {
        let l = l.scoped("waveform_decoder.");
        let conv_pre = Conv::load(&l, "conv_pre", 1, true)?;
        let latent_dim = l.shape("conv_pre.weight")?[1];
        let cond_shape = l.shape("cond_layer.weight")?;
        let embedding_dim = cond_shape[1];
        let conditioning = |key: &str| -> Result<(T, T), LoadError> {
            let shape = l.shape(&format!("{key}.weight"))?;
            let w = l.tensor(&format!("{key}.weight"), &[shape[0], embedding_dim, 1])?;
            Ok((
                w.reshape(&[shape[0], embedding_dim]),
                l.tensor(&format!("{key}.bias"), &[shape[0]])?,
            ))
        };
        let cond_layer = conditioning("cond_layer")?;
        let mut stages = Vec::new();
        let mut resblock = 0;
        for (i, &stride) in STRIDES.iter().enumerate() {
            let (values, shape) = load_weight(&l, &format!("ups.{i}"))?;
            let (channels, kernel) = (shape[1], shape[2]);
            let mut resblocks = Vec::new();
            while l
                .shape(&format!(
                    "resblocks.{resblock}.convs1.0.parametrizations.weight.original1"
                ))
                .or_else(|_| l.shape(&format!("resblocks.{resblock}.convs1.0.weight")))
                .is_ok_and(|s| s[0] == channels)
            {
                resblocks.push(ResBlock::load(&l, &format!("resblocks.{resblock}"))?);
                resblock += 1;
            }
            if resblocks.is_empty() {
                return Err(LoadError::invalid(
                    "waveform_decoder",
                    format!("resblocks.{resblock}"),
                    format!("missing for upsampling stage {i}"),
                ));
            }
            let cond = l
                .shape(&format!("conds.{i}.weight"))
                .is_ok()
                .then(|| conditioning(&format!("conds.{i}")))
                .transpose()?;
            stages.push(Stage {
                weight: T::prepare_conv_weight(&l.from_f32(&values, &shape), ConvKind::Transpose),
                bias: l.tensor(&format!("ups.{i}.bias"), &[channels])?,
                stride,
                crop: (kernel - stride) / 2,
                cond,
                resblocks,
            });
        }
        let hop: usize = stages.iter().map(|s| s.stride).product();
        if hop != rates.output_hop_length {
            return Err(LoadError::invalid(
                "waveform_decoder",
                "ups",
                format!(
                    "upsample by {hop}, but output_hop_length is {}",
                    rates.output_hop_length
                ),
            ));
        }
        Ok(HifiGan {
            device: l.device.clone(),
            dtype: l.dtype,
            rates,
            latent_dim,
            embedding_dim,
            conv_pre,
            cond_layer,
            stages,
            conv_post: Conv::load(&l, "conv_post", 1, false)?,
        })
    }

    pub fn latent_dim(&self) -> usize {
        self.latent_dim
    }

    /// Width of the speaker embedding it is conditioned on.
    pub fn embedding_dim(&self) -> usize {
        self.embedding_dim
    }

    /// Output samples per decoder frame.
    pub fn hop(&self) -> usize {
        self.rates.output_hop_length
    }

    /// The speaker's conditioning vectors from its embedding (`embedding_dim` values).
    pub fn conditioning(&self, embedding: &[f32]) -> Result<Conditioning<T>, EmbeddingWidth> {
        if embedding.len() != self.embedding_dim {
            return Err(EmbeddingWidth {
                got: embedding.len(),
                want: self.embedding_dim,
            });
        }
        let g = T::from_f32(
            &self.device,
            embedding,
            &[1, 1, self.embedding_dim],
            self.dtype,
        );
        let project = |(w, b): &(T, T)| g.linear(w).add(b);
        Ok(Conditioning {
            pre: project(&self.cond_layer),
            stages: self
                .stages
                .iter()
                .map(|s| s.cond.as_ref().map(project))
                .collect(),
        })
    }

    /// Decoder frames for `latents` GPT latents (see [`DecoderRates::frames_for`]).
    pub fn frames_for(&self, latents: usize) -> usize {
        self.rates.frames_for(latents)
    }

    /// Decoder frames `frames` of the resampled latents, from `window` `[m, D]` whose row 0 is
    /// latent `offset` of a sequence of `total` latents (the window must cover what the
    /// frames read: [`Self::latents_read`]).
    fn resample(&self, window: &T, offset: usize, total: usize, frames: Range<usize>) -> T {
        let [a, b] = self.rates.scales();
        let second = LinearTaps::new(interpolated_len(total, a), b, frames);
        let mid = second.span();
        let first = LinearTaps::new(total, a, mid.clone());
        let z = first.apply(window, offset, &self.device);
        second.apply(&z, mid.start, &self.device)
    }

    /// The latents that decoder frames `frames` read, in a sequence of `total`.
    fn latents_read(&self, total: usize, frames: Range<usize>) -> Range<usize> {
        let [a, b] = self.rates.scales();
        let mid = LinearTaps::new(interpolated_len(total, a), b, frames).span();
        LinearTaps::new(total, a, mid).span()
    }

    /// HiFi-GAN on decoder frames `z` `[frames, D]`: `[frames · hop]` samples before tanh.
    fn generate(&self, z: &T, cond: &Conditioning<T>) -> T {
        let frames = z.shape()[0];
        let mut x = self
            .conv_pre
            .forward(&z.reshape(&[1, frames, self.latent_dim]))
            .add(&cond.pre);
        for (stage, c) in self.stages.iter().zip(&cond.stages) {
            x = stage.forward(&x, c.as_ref());
        }
        self.conv_post.forward(&x.leaky_relu(LAST_SLOPE))
    }

    /// Frames each side of a frame that its samples read through HiFi-GAN, rounded up, plus
    /// a margin: the stream's context.
    pub fn context_frames(&self) -> usize {
        let mut reach = self.conv_pre.reach() as f64;
        let mut rate = 1.0;
        for stage in &self.stages {
            rate *= stage.stride as f64;
            // A transposed conv's output sample reads its input's neighbours.
            reach += stage.stride as f64 / rate;
            let widest = stage
                .resblocks
                .iter()
                .map(ResBlock::reach)
                .max()
                .unwrap_or(0);
            reach += widest as f64 / rate;
        }
        reach += self.conv_post.reach() as f64 / rate;
        reach.ceil() as usize + CONTEXT_MARGIN
    }

    /// The waveform of `latents` (`[n, D]`) for a speaker: `frames_for(n) · hop`
    /// samples at the output rate.
    pub fn decode(&self, latents: &T, cond: &Conditioning<T>) -> Vec<f32> {
        let total = latents.shape()[0];
        if total == 0 {
            return Vec::new();
        }
        let z = self.resample(latents, 0, total, 0..self.frames_for(total));
        finish(&self.generate(&z, cond))
    }

    /// Samples of decoder frames `frames` of a sequence of `total` latents, HiFi-GAN run on
    /// `frames` widened by `context` frames each side (clamped to the sequence): equal to the
    /// same samples of the whole decode when `context` covers the receptive field.
    pub(crate) fn decode_frames(
        &self,
        latents: &T,
        offset: usize,
        total: usize,
        frames: Range<usize>,
        context: usize,
        cond: &Conditioning<T>,
    ) -> Vec<f32> {
        let end = self.frames_for(total);
        let window = frames.start.saturating_sub(context)..(frames.end + context).min(end);
        let z = self.resample(latents, offset, total, window.clone());
        let hop = self.hop();
        let wav = self.generate(&z, cond);
        let from = (frames.start - window.start) * hop;
        finish(&wav.narrow(1, from, frames.len() * hop))
    }

    /// Whether decoder frame `frame` of a sequence of `total` latents keeps its value when
    /// latents are appended: neither interpolation reads the current last frame's clamp.
    pub(crate) fn frame_is_final(&self, total: usize, frame: usize) -> bool {
        let [a, b] = self.rates.scales();
        let mid = interpolated_len(total, a);
        let second = LinearTaps::new(mid, b, frame..frame + 1);
        let k = second.first[0];
        k + 1 < mid as i64
            && LinearTaps::new(total, a, k as usize..k as usize + 2)
                .first
                .iter()
                .all(|&i| i + 1 < total as i64)
    }

    /// A tensor of latents `[rows, D]` on the decoder's device, in its dtype.
    pub fn latents(&self, values: &[f32], rows: usize) -> T {
        T::from_f32(&self.device, values, &[rows, self.latent_dim], self.dtype)
    }

    /// The latent range [`Self::decode_frames`] reads for `frames` with `context`.
    pub(crate) fn latents_for_frames(
        &self,
        total: usize,
        frames: Range<usize>,
        context: usize,
    ) -> Range<usize> {
        let end = self.frames_for(total);
        self.latents_read(
            total,
            frames.start.saturating_sub(context)..(frames.end + context).min(end),
        )
    }
}

/// The samples through tanh, on the host.
fn finish<T: Tensor>(wav: &T) -> Vec<f32> {
    wav.to_vec_f32().into_iter().map(f32::tanh).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// docs/xtts-v2-spec.md §6: 34 codes give 37 888 samples (verified on coqui-tts).
    #[test]
    fn output_length_rule() {
        let rates = DecoderRates::PUBLISHED;
        assert_eq!(rates.frames_for(34) * rates.output_hop_length, 37_888);
        assert_eq!(rates.frames_for(9) * rates.output_hop_length, 9_984);
        assert_eq!(rates.frames_for(0), 0);
    }

    #[test]
    fn rates_from_config() {
        let config = serde_json::json!({"model_args": {"output_sample_rate": 22050}});
        let rates = DecoderRates::from_config(&config).unwrap();
        assert_eq!(rates.output_sample_rate, 22_050);
        assert_eq!(rates.input_sample_rate, 22_050);
        // The same rates: the second interpolation keeps the length, as coqui skips it.
        assert_eq!(rates.frames_for(5), 20);
        let bad = serde_json::json!({"model_args": {"output_hop_length": "256"}});
        let err = DecoderRates::from_config(&bad).unwrap_err().to_string();
        assert!(err.contains("model_args.output_hop_length"), "{err}");
    }

    /// Each slice along the first axis gets norm `g`.
    #[test]
    fn weight_norm_folds_per_first_axis_slice() {
        let v = [3.0f32, 4.0, 0.0, 1.0, 0.0, 0.0];
        let w = fold_weight_norm(&[2.0, 0.5], &v);
        assert_eq!(w, vec![1.2, 1.6, 0.0, 0.5, 0.0, 0.0]);
    }

    /// ATen's taps at the edges: source clamped at 0 below, the last frame repeated above.
    #[test]
    fn linear_taps_at_the_edges() {
        let taps = LinearTaps::new(3, 4.0, 0..12);
        assert_eq!(taps.first[..3], [0, 0, 0]);
        assert_eq!(taps.second[..3], [1, 1, 1]);
        assert_eq!(taps.second_weight[..3], [0.0, 0.0, 0.125]);
        assert_eq!(taps.first[11], 2);
        assert_eq!(taps.second[11], 2);
        assert_eq!(taps.span(), 0..3);
    }
}
