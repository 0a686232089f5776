//! Reference audio -> the GPT's 32 conditioning latents (`Xtts.get_gpt_cond_latents`,
//! `ConditioningEncoder`, `PerceiverResampler` in coqui-tts; docs/xtts-v2-spec.md §3.4):
//! the first `gpt_cond_len` seconds cut into `gpt_cond_chunk_len`-second chunks (a chunk
//! under 0.33 s is skipped), each chunk's cloning mel through the conditioning encoder and the
//! perceiver, and the chunks' latents averaged. Whatever the audio, the result is `[1, 32, D]`.

use super::cloning_mel::{CloningMel, MELS, SAMPLE_RATE};
use super::keys;
use super::layers::{GroupNorm, Projection};
use super::reference_audio::prepare_reference;
use crate::nn::layers::{Linear, Loader};
use crate::nn::LoadError;
use crate::tensor::Tensor;

/// Perceiver sizes fixed by `GPT.__init__` (independent of the GPT's width).
pub const LATENTS: usize = 32;
const PERCEIVER_HEADS: usize = 8;
const PERCEIVER_HEAD_DIM: usize = 64;
pub const PERCEIVER_DEPTH: usize = 2;
pub const CONDITIONING_BLOCKS: usize = 6;
/// Chunks shorter than this are skipped (`MIN_AUDIO_SECONDS`).
const MIN_CHUNK_SECONDS: f64 = 0.33;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ConditioningError {
    #[error("the reference audio is too short: at least {MIN_CHUNK_SECONDS} s are needed")]
    TooShort,
}

/// `normalization(channels)` of tortoise's `arch_utils`: 32 groups, 16 up to 64 channels,
/// 8 up to 16, halved until they divide the channels.
fn group_count(channels: usize) -> usize {
    let mut groups = match channels {
        0..=16 => 8,
        17..=64 => 16,
        _ => 32,
    };
    while !channels.is_multiple_of(groups) {
        groups /= 2;
    }
    groups
}

/// One `AttentionBlock`: `xn = GroupNorm(x)`; `xn + proj_out(attention(qkv(xn)))`, the qkv
/// rows laid out per head (`q_h, k_h, v_h` blocks), not Q|K|V.
struct AttentionBlock<T: Tensor> {
    norm: GroupNorm<T>,
    qkv: Projection<T>,
    proj_out: Projection<T>,
    heads: usize,
}

/// Where an attention block's modules are stored, each holding a `.weight` and a `.bias`.
pub struct AttentionBlockKeys {
    pub norm: String,
    pub qkv: String,
    pub proj_out: String,
}

impl AttentionBlockKeys {
    /// Block `i`'s, under the conditioning encoder's `prefix`.
    pub fn new(prefix: &str, i: usize) -> Self {
        let p = |name: &str| format!("{prefix}attn.{i}.{name}");
        AttentionBlockKeys {
            norm: p("norm"),
            qkv: p("qkv"),
            proj_out: p("proj_out"),
        }
    }
}

impl<T: Tensor> AttentionBlock<T> {
    fn load(
        l: &Loader<T>,
        keys: &AttentionBlockKeys,
        dim: usize,
        heads: usize,
    ) -> Result<Self, LoadError> {
        Ok(AttentionBlock {
            norm: GroupNorm::load(l, &keys.norm, dim, group_count(dim))?,
            qkv: Projection::pointwise_conv(l, &keys.qkv, dim, 3 * dim)?,
            proj_out: Projection::pointwise_conv(l, &keys.proj_out, dim, dim)?,
            heads,
        })
    }

    /// `[1, len, dim]` -> the same shape.
    fn forward(&self, x: &T) -> T {
        let s = x.shape();
        let (len, dim) = (s[1], s[2]);
        let head_dim = dim / self.heads;
        let normed = self.norm.forward(x);
        let qkv = self
            .qkv
            .forward(&normed)
            .reshape(&[1, len, self.heads, 3 * head_dim]);
        let part = |i: usize| qkv.narrow(3, i * head_dim, head_dim).transpose(1, 2);
        let scale = 1.0 / (head_dim as f64).sqrt();
        let attended = T::attention(&part(0), &part(1), &part(2), None, false, scale)
            .transpose(1, 2)
            .reshape(&[1, len, dim]);
        normed.add(&self.proj_out.forward(&attended))
    }
}

/// `ConditioningEncoder`: a kernel-1 conv from the 80 mel bands, then six attention blocks.
struct ConditioningEncoder<T: Tensor> {
    init: Projection<T>,
    blocks: Vec<AttentionBlock<T>>,
}

impl<T: Tensor> ConditioningEncoder<T> {
    fn load(l: &Loader<T>, dim: usize, heads: usize) -> Result<Self, LoadError> {
        Ok(ConditioningEncoder {
            init: Projection::pointwise_conv(l, "init", MELS, dim)?,
            blocks: (0..CONDITIONING_BLOCKS)
                .map(|i| AttentionBlock::load(l, &AttentionBlockKeys::new("", i), dim, heads))
                .collect::<Result<_, _>>()?,
        })
    }

    /// The mel `[1, frames, 80]` -> `[1, frames, dim]`.
    fn forward(&self, mel: &T) -> T {
        self.blocks
            .iter()
            .fold(self.init.forward(mel), |h, block| block.forward(&h))
    }
}

/// One perceiver layer: cross-attention of the latents over `[latents; context]` (8 heads of
/// 64, no biases, no norm before it), then a GEGLU feed-forward; both residual.
struct PerceiverLayer<T> {
    to_q: Linear<T>,
    to_kv: Linear<T>,
    to_out: Linear<T>,
    expand: Linear<T>,
    contract: Linear<T>,
    geglu: usize,
}

/// Where a perceiver layer's projections are stored: the attention's (`.weight` only), then
/// the feed-forward's (`.weight` and `.bias`).
pub struct PerceiverLayerKeys {
    pub to_q: String,
    pub to_kv: String,
    pub to_out: String,
    pub expand: String,
    pub contract: String,
}

impl PerceiverLayerKeys {
    /// Layer `i`'s, under the perceiver's `prefix`.
    pub fn new(prefix: &str, i: usize) -> Self {
        let p = |name: &str| format!("{prefix}layers.{i}.{name}");
        PerceiverLayerKeys {
            to_q: p("0.to_q"),
            to_kv: p("0.to_kv"),
            to_out: p("0.to_out"),
            expand: p("1.0"),
            contract: p("1.2"),
        }
    }
}

/// The perceiver's attention width: 8 heads of 64.
pub const PERCEIVER_INNER: usize = PERCEIVER_HEADS * PERCEIVER_HEAD_DIM;

/// The width of a perceiver layer's GEGLU for latents `dim` wide.
pub fn geglu_width(dim: usize) -> usize {
    dim * 4 * 2 / 3
}

impl<T: Tensor> PerceiverLayer<T> {
    fn load(l: &Loader<T>, keys: &PerceiverLayerKeys, dim: usize) -> Result<Self, LoadError> {
        let inner = PERCEIVER_INNER;
        let geglu = geglu_width(dim);
        Ok(PerceiverLayer {
            to_q: Linear::load(l, &keys.to_q, inner, dim, false)?,
            to_kv: Linear::load(l, &keys.to_kv, 2 * inner, dim, false)?,
            to_out: Linear::load(l, &keys.to_out, dim, inner, false)?,
            expand: Linear::load(l, &keys.expand, 2 * geglu, dim, true)?,
            contract: Linear::load(l, &keys.contract, dim, geglu, true)?,
            geglu,
        })
    }

    fn forward(&self, latents: &T, context: &T) -> T {
        let inner = PERCEIVER_INNER;
        let heads = |x: &T| {
            let s = x.shape();
            x.reshape(&[s[0], s[1], PERCEIVER_HEADS, PERCEIVER_HEAD_DIM])
                .transpose(1, 2)
        };
        let kv = self.to_kv.forward(&T::cat(&[latents, context], 1));
        let (k, v) = (kv.narrow(2, 0, inner), kv.narrow(2, inner, inner));
        let q = self.to_q.forward(latents);
        let scale = 1.0 / (PERCEIVER_HEAD_DIM as f64).sqrt();
        let s = latents.shape();
        let attended = T::attention(&heads(&q), &heads(&k), &heads(&v), None, false, scale)
            .transpose(1, 2)
            .reshape(&[s[0], s[1], inner]);
        let latents = self.to_out.forward(&attended).add(latents);
        let h = self.expand.forward(&latents);
        let (x, gates) = (
            h.narrow(2, 0, self.geglu),
            h.narrow(2, self.geglu, self.geglu),
        );
        self.contract.forward(&x.mul(&gates.gelu())).add(&latents)
    }
}

/// `PerceiverResampler`: 32 learned latents through two layers, then RMSNorm
/// (`normalize(x)·√D·γ`, which is RMSNorm without epsilon).
struct Perceiver<T> {
    latents: T,
    layers: Vec<PerceiverLayer<T>>,
    gamma: T,
}

impl<T: Tensor> Perceiver<T> {
    fn load(l: &Loader<T>, dim: usize) -> Result<Self, LoadError> {
        Ok(Perceiver {
            latents: l
                .tensor("latents", &[LATENTS, dim])?
                .reshape(&[1, LATENTS, dim]),
            layers: (0..PERCEIVER_DEPTH)
                .map(|i| PerceiverLayer::load(l, &PerceiverLayerKeys::new("", i), dim))
                .collect::<Result<_, _>>()?,
            gamma: l.tensor("norm.gamma", &[dim])?,
        })
    }

    /// The context `[1, frames, dim]` -> `[1, 32, dim]`.
    fn forward(&self, context: &T) -> T {
        self.layers
            .iter()
            .fold(self.latents.clone(), |latents, layer| {
                layer.forward(&latents, context)
            })
            .rms_norm(&self.gamma, 0.0)
    }
}

/// The cloning front end and both networks, with the checkpoint's `mel_stats`.
pub struct Conditioner<T: Tensor> {
    mel: CloningMel,
    encoder: ConditioningEncoder<T>,
    perceiver: Perceiver<T>,
    device: T::Device,
    dtype: crate::tensor::DType,
}

impl<T: Tensor> Conditioner<T> {
    /// `l` at the state dict's root: `mel_stats`, `gpt.conditioning_encoder.*`,
    /// `gpt.conditioning_perceiver.*`. The tensors may point into the checkpoint's memory
    /// maps, which the caller keeps alive as long as the model.
    pub fn load(l: &Loader<T>, dim: usize, heads: usize) -> Result<Self, LoadError> {
        Ok(Conditioner {
            mel: CloningMel::new(l.host_f32("mel_stats", &[MELS])?),
            encoder: ConditioningEncoder::load(
                &l.scoped(&keys::scope(keys::CONDITIONING_ENCODER)),
                dim,
                heads,
            )?,
            perceiver: Perceiver::load(&l.scoped(&keys::scope(keys::PERCEIVER)), dim)?,
            device: l.device.clone(),
            dtype: l.dtype,
        })
    }

    /// The normalised cloning mel of one chunk, `[1, frames, 80]`.
    pub fn mel(&self, chunk: &[f32]) -> T {
        let mel = self.mel.compute(chunk);
        let frames = mel.len() / MELS;
        T::from_f32(&self.device, &mel, &[1, frames, MELS], self.dtype)
    }

    /// The conditioning encoder's output for a mel, `[1, frames, dim]`.
    pub fn encode(&self, mel: &T) -> T {
        self.encoder.forward(mel)
    }

    /// One chunk's latents, `[1, 32, dim]`.
    pub fn chunk_latents(&self, chunk: &[f32]) -> T {
        self.perceiver.forward(&self.encode(&self.mel(chunk)))
    }

    /// `get_gpt_cond_latents(audio, 22050, length, chunk_length)`: `audio` at 22.05 kHz, its
    /// first `length` seconds in `chunk_length`-second chunks, the chunks' latents averaged.
    pub fn gpt_cond_latents(
        &self,
        audio: &[f32],
        length: usize,
        chunk_length: usize,
    ) -> Result<T, ConditioningError> {
        let rate = SAMPLE_RATE as usize;
        let audio = &audio[..audio.len().min(rate * length)];
        let chunks: Vec<&[f32]> = audio
            .chunks(rate * chunk_length.max(1))
            .filter(|c| c.len() as f64 >= f64::from(SAMPLE_RATE) * MIN_CHUNK_SECONDS)
            .collect();
        let mut sum: Option<T> = None;
        for chunk in &chunks {
            let latents = self.chunk_latents(chunk);
            sum = Some(match sum {
                Some(s) => s.add(&latents),
                None => latents,
            });
        }
        let sum = sum.ok_or(ConditioningError::TooShort)?;
        Ok(sum.scale(1.0 / chunks.len() as f32))
    }
}

/// How reference clips become conditioning latents (`config.json`'s `max_ref_len`,
/// `gpt_cond_len`, `gpt_cond_chunk_len`, `sound_norm_refs`; the reference function's own
/// defaults are 30/6/6/false).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CloningSettings {
    pub max_ref_len: usize,
    pub gpt_cond_len: usize,
    pub gpt_cond_chunk_len: usize,
    pub sound_norm_refs: bool,
}

impl<T: Tensor> Conditioner<T> {
    /// The GPT half of `get_conditioning_latents`: each clip (22.05 kHz, as `load_audio`
    /// returns it) cut to `max_ref_len` seconds and optionally peak-normalised, the clips
    /// concatenated, then [`Conditioner::gpt_cond_latents`].
    pub fn voice_latents(
        &self,
        clips: &[Vec<f32>],
        settings: &CloningSettings,
    ) -> Result<T, ConditioningError> {
        let audio: Vec<f32> = clips
            .iter()
            .flat_map(|clip| {
                prepare_reference(clip, settings.max_ref_len, settings.sound_norm_refs)
            })
            .collect();
        self.gpt_cond_latents(&audio, settings.gpt_cond_len, settings.gpt_cond_chunk_len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn group_counts_follow_tortoise_normalization() {
        assert_eq!(group_count(1024), 32);
        assert_eq!(group_count(64), 16);
        assert_eq!(group_count(48), 16);
        assert_eq!(group_count(40), 8);
        assert_eq!(group_count(16), 8);
    }
}
