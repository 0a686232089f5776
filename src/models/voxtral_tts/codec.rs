//! The causal codec decoder: codes -> 24 kHz waveform.
//! Dequantize (semantic table | FSQ levels), a causal conv, then transformer stages with
//! ALiBi sliding-window attention and 2x transposed-conv upsampling, then a patch projection.

use super::keys;
use super::params::{Config, NUM_AUDIO_SPECIAL_CODES};
use crate::nn::decoder::LayerKeys;
use crate::nn::layers::{weight, AttentionDims, AttentionProj, FeedForward, Loader, RmsNorm};
use crate::nn::LoadError;
use crate::tensor::{ConvKind, DType, PadMode, Tensor};
use std::collections::HashMap;

/// Queries per block in windowed attention: keeps the bias small for long audio.
const ATTENTION_BLOCK: usize = 256;
/// Floor of the semantic codebook's cluster usage (reference `SemanticCodebook.epsilon`).
const CLUSTER_USAGE_FLOOR: f32 = 1e-5;

#[derive(Debug, thiserror::Error)]
pub enum CodecError {
    #[error("frame {frame}: expected {expected} codes, got {got}")]
    FrameWidth {
        frame: usize,
        expected: usize,
        got: usize,
    },
    #[error("frame {frame}, codebook {codebook}: code {code} is outside {lo}..={hi}")]
    CodeRange {
        frame: usize,
        codebook: usize,
        code: u32,
        lo: u32,
        hi: u32,
    },
}

/// Weight norm `W = v * (g / ||v||)`, the norm over every axis but the first, no epsilon.
fn weight_norm<T: Tensor>(
    l: &Loader<T>,
    prefix: &str,
    shape: [usize; 3],
) -> Result<Vec<f32>, LoadError> {
    let g = l.host_f32(
        &format!("{prefix}.parametrizations.weight.original0"),
        &[shape[0], 1, 1],
    )?;
    let mut v = l.host_f32(
        &format!("{prefix}.parametrizations.weight.original1"),
        &shape,
    )?;
    for (row, gain) in v.chunks_mut(shape[1] * shape[2]).zip(g) {
        let norm = row.iter().map(|x| x * x).sum::<f32>().sqrt();
        let factor = gain / norm;
        row.iter_mut().for_each(|x| *x *= factor);
    }
    Ok(v)
}

struct CausalConv<T> {
    weight: T,
    kernel: usize,
    stride: usize,
    pad: PadMode,
}

impl<T: Tensor> CausalConv<T> {
    fn load(
        l: &Loader<T>,
        prefix: &str,
        shape: [usize; 3],
        stride: usize,
        pad: PadMode,
    ) -> Result<Self, LoadError> {
        let w = l.from_f32(&weight_norm(l, prefix, shape)?, &shape);
        Ok(CausalConv {
            weight: T::prepare_conv_weight(&w, ConvKind::Conv),
            kernel: shape[2],
            stride,
            pad,
        })
    }

    /// Left-pads `kernel - stride` and right-pads up to a whole number of strides, so the
    /// output length is `ceil(len / stride)`.
    fn forward(&self, x: &T) -> T {
        let len = x.shape()[1];
        let (k, s) = (self.kernel, self.stride);
        let left = k - s;
        let right = len.div_ceil(s) * s - len;
        let padded = if self.pad == PadMode::Reflect && len <= left.max(right) {
            // Reflection needs more samples than the input has: zero-extend first, then cut
            // the extension back off (reference `pad1d`).
            let extra = left.max(right) - len + 1;
            let p = x
                .pad_time(0, extra, PadMode::Zero)
                .pad_time(left, right, PadMode::Reflect);
            let total = p.shape()[1];
            p.narrow(1, 0, total - extra)
        } else {
            x.pad_time(left, right, self.pad)
        };
        padded.conv1d(&self.weight, s)
    }
}

struct Upsample<T> {
    weight: T,
    kernel: usize,
    stride: usize,
}

impl<T: Tensor> Upsample<T> {
    /// Transposed conv, trimming `kernel - stride` samples on the right: length `len * stride`.
    fn forward(&self, x: &T) -> T {
        let y = x.conv_transpose1d(&self.weight, self.stride);
        let trim = self.kernel - self.stride;
        let len = y.shape()[1];
        y.narrow(1, 0, len - trim)
    }
}

struct CodecLayer<T> {
    attention_norm: RmsNorm<T>,
    attention: AttentionProj<T>,
    q_norm: Option<RmsNorm<T>>,
    k_norm: Option<RmsNorm<T>>,
    ffn_norm: RmsNorm<T>,
    feed_forward: FeedForward<T>,
    attention_scale: Option<T>,
    ffn_scale: Option<T>,
}

/// ALiBi slopes (reference `get_alibi_slopes`): `r^0..r^(n-1)`, `r = 2^(-8/n)` for a power of
/// two; otherwise those of the largest power of two `m < n`, then every other slope of `2m`.
pub fn alibi_slopes(n_heads: usize) -> Vec<f32> {
    let pow2 = |n: usize| -> Vec<f32> {
        let r = 2f64.powf(-8.0 / n as f64);
        (0..n).map(|i| r.powi(i as i32) as f32).collect()
    };
    if n_heads.is_power_of_two() {
        return pow2(n_heads);
    }
    let m = 1 << n_heads.ilog2();
    let mut slopes = pow2(m);
    slopes.extend(pow2(2 * m).into_iter().step_by(2).take(n_heads - m));
    slopes
}

struct Stage<T: Tensor> {
    upsample: Option<Upsample<T>>,
    layers: Vec<CodecLayer<T>>,
    window: usize,
}

pub struct Codec<T: Tensor> {
    semantic_table: T,
    semantic_size: usize,
    levels: usize,
    n_acoustic: usize,
    input_conv: CausalConv<T>,
    stages: Vec<Stage<T>>,
    output_proj: CausalConv<T>,
    slopes: Vec<f32>,
    n_heads: usize,
    patch: usize,
    dtype: DType,
    device: T::Device,
}

impl<T: Tensor> Codec<T> {
    pub fn load(l: &Loader<T>, cfg: &Config) -> Result<Self, LoadError> {
        let c = cfg.codec();
        let p = keys::CODEC;
        let dim = c.dim;

        let sum = l.host_f32(
            &format!("{p}.quantizer.semantic_codebook.embedding_sum"),
            &[c.semantic_codebook_size, c.semantic_dim],
        )?;
        let usage = l.host_f32(
            &format!("{p}.quantizer.semantic_codebook.cluster_usage"),
            &[c.semantic_codebook_size],
        )?;
        let table: Vec<f32> = sum
            .chunks(c.semantic_dim)
            .zip(&usage)
            .flat_map(|(row, u)| row.iter().map(move |x| x / u.max(CLUSTER_USAGE_FLOOR)))
            .collect();

        let conv_key = |block: usize| format!("{p}.decoder_blocks.{block}.conv");
        let input_conv = CausalConv::load(
            l,
            &conv_key(0),
            [dim, cfg.latent_dim(), cfg.codec_stages[0].kernel],
            1,
            PadMode::Replicate,
        )?;
        let mut stages = Vec::new();
        let mut block = 1;
        for (i, st) in cfg.codec_stages.iter().enumerate() {
            let upsample = if i == 0 {
                None
            } else {
                let shape = [dim, dim, st.kernel];
                let w = l.from_f32(&weight_norm(l, &conv_key(block), shape)?, &shape);
                block += 1;
                Some(Upsample {
                    weight: T::prepare_conv_weight(&w, ConvKind::Transpose),
                    kernel: st.kernel,
                    stride: st.stride,
                })
            };
            let layers = (0..st.n_layers)
                .map(|j| {
                    CodecLayer::load(l, &format!("{p}.decoder_blocks.{block}.layers.{j}"), cfg)
                })
                .collect::<Result<Vec<_>, _>>()?;
            block += 1;
            stages.push(Stage {
                upsample,
                layers,
                window: st.window,
            });
        }
        let output_proj = CausalConv::load(
            l,
            &format!("{p}.output_proj.conv"),
            [c.pretransform_patch_size, dim, c.patch_proj_kernel_size],
            1,
            PadMode::Reflect,
        )?;
        Ok(Codec {
            semantic_table: T::from_f32(
                l.device,
                &table,
                &[c.semantic_codebook_size, c.semantic_dim],
                DType::F32,
            ),
            semantic_size: c.semantic_codebook_size,
            levels: c.acoustic_codebook_size,
            n_acoustic: c.acoustic_dim,
            input_conv,
            stages,
            output_proj,
            slopes: alibi_slopes(c.n_heads),
            n_heads: c.n_heads,
            patch: c.pretransform_patch_size,
            dtype: l.dtype,
            device: l.device.clone(),
        })
    }

    /// Checks codes (with their +2 offset, END excluded) before they reach the tensors.
    pub fn validate(&self, codes: &[Vec<u32>]) -> Result<(), CodecError> {
        let special = NUM_AUDIO_SPECIAL_CODES as u32;
        for (frame, row) in codes.iter().enumerate() {
            if row.len() != 1 + self.n_acoustic {
                return Err(CodecError::FrameWidth {
                    frame,
                    expected: 1 + self.n_acoustic,
                    got: row.len(),
                });
            }
            for (codebook, &code) in row.iter().enumerate() {
                let size = if codebook == 0 {
                    self.semantic_size
                } else {
                    self.levels
                } as u32;
                if code < special || code >= special + size {
                    return Err(CodecError::CodeRange {
                        frame,
                        codebook,
                        code,
                        lo: special,
                        hi: special + size - 1,
                    });
                }
            }
        }
        Ok(())
    }

    /// Decodes frames of codes to `frames * samples_per_frame` samples.
    pub fn decode(&self, codes: &[Vec<u32>]) -> Result<Vec<f32>, CodecError> {
        self.validate(codes)?;
        if codes.is_empty() {
            return Ok(Vec::new());
        }
        Ok(self.forward(&self.latent(codes, 1)).to_vec_f32())
    }

    /// Frames of left context after which earlier frames cannot change the output: the
    /// codec's receptive field from its kernels, upsampling and attention windows (each
    /// attention layer reaches `window` positions back), rounded up, plus a margin of 2.
    pub fn context_frames(&self) -> usize {
        let mut frames = (self.input_conv.kernel - 1) as f64;
        let mut rate = 1.0;
        for stage in &self.stages {
            if let Some(up) = &stage.upsample {
                frames += (up.kernel as f64 / rate).ceil();
                rate *= up.stride as f64;
            }
            frames += (stage.layers.len() * stage.window) as f64 / rate;
        }
        frames += (self.output_proj.kernel as f64 / rate).ceil();
        frames.ceil() as usize + 2
    }

    /// Decodes `codes[from..]` for streaming: at most `context_frames()` earlier frames are
    /// decoded as context and their samples dropped, so the result equals the matching slice
    /// of `decode(codes)` (the codec is causal) at a cost independent of `from`.
    pub fn decode_tail(&self, codes: &[Vec<u32>], from: usize) -> Result<Vec<f32>, CodecError> {
        // One stream alone: its pass has nothing to pad.
        let mut pcm = self.decode_tails(&[(codes, from)])?;
        Ok(pcm.pop().expect("one stream in, one out"))
    }

    /// [`Codec::decode_tail`] of several streams, in as few passes as keep the padding small
    /// ([`passes`]): in a pass each stream's frames, its context included, are padded on the
    /// right to the longest with copies of its last frame, and one product per weight serves
    /// them all, as in the decode step. The codec is causal, so the padding changes none of a
    /// stream's own samples, which come out equal to its `decode_tail` up to the summation
    /// order of batched products.
    pub fn decode_tails(
        &self,
        streams: &[(&[Vec<u32>], usize)],
    ) -> Result<Vec<Vec<f32>>, CodecError> {
        let context = self.context_frames();
        let spans: Vec<(&[Vec<u32>], usize)> = streams
            .iter()
            .map(|&(codes, from)| {
                let start = from.saturating_sub(context);
                (&codes[start..], from - start)
            })
            .collect();
        for (codes, _) in &spans {
            self.validate(codes)?;
        }
        let lengths: Vec<usize> = spans.iter().map(|(codes, _)| codes.len()).collect();
        let mut out = vec![Vec::new(); streams.len()];
        for pass in passes(&lengths) {
            let members: Vec<_> = pass.iter().map(|&i| spans[i]).collect();
            for (i, pcm) in pass.into_iter().zip(self.decode_padded(&members)) {
                out[i] = pcm;
            }
        }
        Ok(out)
    }

    /// One pass of [`Codec::decode_tails`] over checked spans (frames, frames to skip).
    fn decode_padded(&self, spans: &[(&[Vec<u32>], usize)]) -> Vec<Vec<f32>> {
        let longest = spans
            .iter()
            .map(|(codes, _)| codes.len())
            .max()
            .unwrap_or(0);
        if longest == 0 {
            return vec![Vec::new(); spans.len()];
        }
        let padded: Vec<Vec<u32>> = spans
            .iter()
            .flat_map(|(codes, _)| {
                // A stream with nothing to decode gets any valid frame: its row is discarded.
                let last = codes.last().map_or_else(|| self.silent_frame(), Vec::clone);
                let padding = std::iter::repeat_n(last, longest - codes.len());
                codes.iter().cloned().chain(padding)
            })
            .collect();
        let pcm = self
            .forward(&self.latent(&padded, spans.len()))
            .to_vec_f32();
        let per_frame = pcm.len() / (spans.len() * longest);
        pcm.chunks_exact(per_frame * longest)
            .zip(spans)
            .map(|(row, (codes, skip))| row[skip * per_frame..codes.len() * per_frame].to_vec())
            .collect()
    }

    /// The lowest valid code of every codebook.
    fn silent_frame(&self) -> Vec<u32> {
        vec![NUM_AUDIO_SPECIAL_CODES as u32; 1 + self.n_acoustic]
    }

    /// `[streams, frames / streams, semantic_dim + n_acoustic]` of `codes` (the streams'
    /// frames one after another): table rows | FSQ levels mapped to [-1, 1].
    fn latent(&self, codes: &[Vec<u32>], streams: usize) -> T {
        let t = codes.len();
        let special = NUM_AUDIO_SPECIAL_CODES as u32;
        let ids: Vec<i64> = codes.iter().map(|f| (f[0] - special) as i64).collect();
        let semantic = self
            .semantic_table
            .embedding(&T::from_i64(&self.device, &ids, &[t]));
        let steps = (self.levels - 1) as f32;
        let acoustic: Vec<f32> = codes
            .iter()
            .flat_map(|f| {
                f[1..]
                    .iter()
                    .map(move |&c| ((c - special) * 2) as f32 / steps - 1.0)
            })
            .collect();
        let acoustic = T::from_f32(&self.device, &acoustic, &[t, self.n_acoustic], DType::F32);
        T::cat(&[&semantic, &acoustic], 1)
            .to_dtype(self.dtype)
            .reshape(&[streams, t / streams, self.latent_width()])
    }

    fn latent_width(&self) -> usize {
        self.semantic_table.shape()[1] + self.n_acoustic
    }

    fn forward(&self, latent: &T) -> T {
        let mut x = self.input_conv.forward(latent);
        for stage in &self.stages {
            if let Some(up) = &stage.upsample {
                x = up.forward(&x);
            }
            let mut bias = WindowBias::new(self, stage.window);
            for layer in &stage.layers {
                x = layer.forward(&x, &mut bias);
            }
        }
        let y = self.output_proj.forward(&x);
        let shape = y.shape();
        y.reshape(&[shape[0], shape[1] * self.patch])
    }
}

/// Frames a pass of [`Codec::decode_tails`] may pad any stream to, whatever its own length:
/// streamed chunks with their context stay in one pass.
const PASS_FLOOR_FRAMES: usize = 128;

/// Streams (by their lengths in frames) grouped into passes, shortest first: a pass's
/// longest is at most twice its shortest, or [`PASS_FLOOR_FRAMES`], so padding at most
/// doubles a pass's work. A whole segment decoded when it ends (hundreds of frames) does not
/// make every streamed chunk beside it as long.
fn passes(lengths: &[usize]) -> Vec<Vec<usize>> {
    let mut order: Vec<usize> = (0..lengths.len()).collect();
    order.sort_by_key(|&i| lengths[i]);
    let mut passes: Vec<Vec<usize>> = Vec::new();
    let mut limit = 0;
    for i in order {
        match passes.last_mut() {
            Some(pass) if lengths[i] <= limit => pass.push(i),
            _ => {
                limit = (2 * lengths[i]).max(PASS_FLOOR_FRAMES);
                passes.push(vec![i]);
            }
        }
    }
    passes
}

/// ALiBi + causal + sliding-window biases of one stage, by (queries, keys, first query - first key).
struct WindowBias<'a, T: Tensor> {
    codec: &'a Codec<T>,
    window: usize,
    cache: HashMap<(usize, usize, usize), T>,
}

impl<'a, T: Tensor> WindowBias<'a, T> {
    fn new(codec: &'a Codec<T>, window: usize) -> Self {
        WindowBias {
            codec,
            window,
            cache: HashMap::new(),
        }
    }

    fn get(&mut self, q_len: usize, k_len: usize, offset: usize) -> T {
        let (codec, window) = (self.codec, self.window as i64);
        self.cache
            .entry((q_len, k_len, offset))
            .or_insert_with(|| {
                let mut bias = Vec::with_capacity(codec.n_heads * q_len * k_len);
                for &slope in &codec.slopes {
                    let slope = codec.dtype.round_scalar(slope);
                    for i in 0..q_len {
                        for j in 0..k_len {
                            // Position of key j relative to query i.
                            let rel = j as i64 - (i + offset) as i64;
                            bias.push(if rel > 0 || rel < -window {
                                f32::NEG_INFINITY
                            } else {
                                codec.dtype.round_scalar(slope * rel as f32)
                            });
                        }
                    }
                }
                T::from_f32(
                    &codec.device,
                    &bias,
                    &[1, codec.n_heads, q_len, k_len],
                    codec.dtype,
                )
            })
            .clone()
    }
}

/// The keys of a codec layer's scales of its attention and feed-forward outputs (`[dim]`, with
/// `layer_scale`), under the layer's prefix `p`.
pub fn layer_scales(p: &str) -> [String; 2] {
    [format!("{p}.attention_scale"), format!("{p}.ffn_scale")]
}

impl<T: Tensor> CodecLayer<T> {
    fn load(l: &Loader<T>, p: &str, cfg: &Config) -> Result<Self, LoadError> {
        let c = cfg.codec();
        let keys = LayerKeys::mistral(p);
        let k = &keys.attention;
        let dims = AttentionDims {
            dim: c.dim,
            n_heads: c.n_heads,
            n_kv_heads: c.n_kv_heads,
            head_dim: c.head_dim,
        };
        let (qw, kw) = (c.n_heads * c.head_dim, c.n_kv_heads * c.head_dim);
        let qk = |module: &str, width: usize| -> Result<Option<RmsNorm<T>>, LoadError> {
            c.qk_norm
                .then(|| RmsNorm::load(l, &weight(module), width, c.qk_norm_eps))
                .transpose()
        };
        let scale = |key: String| -> Result<Option<T>, LoadError> {
            c.layer_scale.then(|| l.tensor(&key, &[c.dim])).transpose()
        };
        let [attention_scale, ffn_scale] = layer_scales(p);
        let norm = |module: &str| RmsNorm::load(l, &weight(module), c.dim, c.norm_eps);
        Ok(CodecLayer {
            attention_norm: norm(&keys.attention_norm)?,
            q_norm: qk(&k.q_norm, qw)?,
            k_norm: qk(&k.k_norm, kw)?,
            attention: AttentionProj::load(l, k, &dims)?,
            ffn_norm: norm(&keys.ffn_norm)?,
            feed_forward: FeedForward::load(l, &keys.feed_forward, c.dim, c.hidden_dim)?,
            attention_scale: scale(attention_scale)?,
            ffn_scale: scale(ffn_scale)?,
        })
    }

    fn forward(&self, x: &T, bias: &mut WindowBias<'_, T>) -> T {
        let a = &self.attention;
        let n = self.attention_norm.forward(x);
        let (mut q, mut k, v) = a.qkv(&n);
        // q/k norms act on the full projected width, before the head split.
        if let (Some(qn), Some(kn)) = (&self.q_norm, &self.k_norm) {
            q = qn.forward(&q);
            k = kn.forward(&k);
        }
        let q = a.split_heads(&q, a.n_heads);
        let k = a.split_heads(&k, a.n_kv_heads);
        let v = a.split_heads(&v, a.n_kv_heads);
        let len = x.shape()[1];
        // Each query sees at most `window + 1` keys, so long inputs attend block by block.
        let mut outs = Vec::new();
        let mut start = 0;
        while start < len {
            let q_len = ATTENTION_BLOCK.min(len - start);
            let k_start = start.saturating_sub(bias.window);
            let k_len = start + q_len - k_start;
            let b = bias.get(q_len, k_len, start - k_start);
            outs.push(T::attention(
                &q.narrow(2, start, q_len),
                &k.narrow(2, k_start, k_len),
                &v.narrow(2, k_start, k_len),
                Some(&b),
                false,
                a.scale(),
            ));
            start += q_len;
        }
        let refs: Vec<&T> = outs.iter().collect();
        let mut r = a.merge_heads(&T::cat(&refs, 2));
        if let Some(s) = &self.attention_scale {
            r = r.mul(s);
        }
        let h = x.add(&r);
        let mut r = self.feed_forward.forward(&self.ffn_norm.forward(&h));
        if let Some(s) = &self.ffn_scale {
            r = r.mul(s);
        }
        h.add(&r)
    }
}

#[cfg(test)]
mod tests {
    use super::passes;

    #[test]
    fn passes_keep_padding_within_twice_a_streams_length() {
        // Streamed chunks share one pass; a whole segment goes apart; nothing is lost.
        let lengths = [68, 30, 400, 0, 68, 900, 129, 256];
        let passes = passes(&lengths);
        assert_eq!(passes, vec![vec![3, 1, 0, 4], vec![6, 7], vec![2], vec![5]]);
        for pass in &passes {
            let shortest = pass.iter().map(|&i| lengths[i]).min().unwrap();
            let longest = pass.iter().map(|&i| lengths[i]).max().unwrap();
            assert!(longest <= (2 * shortest).max(128), "{pass:?}");
        }
        let mut all: Vec<usize> = passes.concat();
        all.sort();
        assert_eq!(all, (0..lengths.len()).collect::<Vec<_>>());
        assert!(super::passes(&[]).is_empty());
    }
}
