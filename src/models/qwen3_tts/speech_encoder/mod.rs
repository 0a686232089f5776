//! The 12 Hz speech-tokenizer encoder: a 24 kHz reference clip -> 16 codes per 80 ms frame,
//! the reference codes of in-context cloning (`speech_tokenizer/model.safetensors`, keys
//! `encoder.*`; spec §10). It is transformers' `MimiModel.encode`: the causal SEANet encoder
//! to 25 Hz, the windowed transformer, a stride-2 conv to 12.5 Hz, then the split RVQ, of
//! which the first `encoder_valid_num_quantizers` codebooks are kept.

mod quantizer;
mod seanet;
mod transformer;

use crate::models::qwen3_tts::config::{SpeechEncoderConfig, SpeechTokenizerConfig};
use crate::nn::checkpoint::Checkpoint;
use crate::nn::layers::Loader;
use crate::nn::LoadError;
use crate::tensor::{DType, PadMode, Tensor};
use memmap2::Mmap;
use quantizer::ResidualQuantizer;
use seanet::{MimiConv, MimiConvShape, Seanet};
use std::path::Path;
use std::sync::Arc;
use transformer::EncoderTransformer;

#[derive(Debug, thiserror::Error)]
pub enum EncodeError {
    #[error("the reference audio is empty")]
    Empty,
}

pub struct SpeechEncoder<T: Tensor> {
    seanet: Seanet<T>,
    transformer: EncoderTransformer<T>,
    /// 25 Hz -> 12.5 Hz; absent when the SEANet already runs at the frame rate.
    downsample: Option<MimiConv<T>>,
    semantic: ResidualQuantizer<T>,
    acoustic: ResidualQuantizer<T>,
    codebooks: usize,
    sample_rate: u32,
    device: T::Device,
    dtype: DType,
    /// The checkpoint's memory maps, which zero-copy weights point into.
    _maps: Vec<Arc<Mmap>>,
}

/// The SEANet's frames per second, rounded up as `MimiConfig.encodec_frame_rate` does.
fn seanet_rate(c: &SpeechEncoderConfig) -> f64 {
    let hop: usize = c.upsampling_ratios.iter().product();
    (f64::from(c.sampling_rate) / hop as f64).ceil()
}

/// What the official encoder hard-codes or this one supports, checked against
/// `encoder_config`; returns the downsampling stride (1: none).
fn check(config: &SpeechTokenizerConfig, file: &str) -> Result<usize, LoadError> {
    let c = &config.encoder_config;
    let fail = |key: &str, msg: String| {
        Err(LoadError::invalid(
            file,
            format!("encoder_config.{key}"),
            msg,
        ))
    };
    if c.audio_channels != 1 {
        return fail("audio_channels", format!("{}: only mono", c.audio_channels));
    }
    if !c.use_causal_conv || c.pad_mode != "constant" {
        return fail(
            "use_causal_conv",
            "only causal convs padded with zeros are supported".into(),
        );
    }
    if c.hidden_act != "gelu" {
        return fail(
            "hidden_act",
            format!("{:?}, expected \"gelu\"", c.hidden_act),
        );
    }
    if c.attention_bias {
        return fail("attention_bias", "true is not supported".into());
    }
    if c.upsampling_ratios.contains(&0) || c.compress == 0 {
        return fail("upsampling_ratios", "a ratio or compress of 0".into());
    }
    if c.sliding_window == 0 {
        return fail("sliding_window", "0".into());
    }
    if !c.head_dim.is_multiple_of(2) {
        return fail("head_dim", format!("{}: must be even", c.head_dim));
    }
    if c.num_key_value_heads == 0 || !c.num_attention_heads.is_multiple_of(c.num_key_value_heads) {
        return fail(
            "num_key_value_heads",
            format!(
                "{} does not divide {} heads",
                c.num_key_value_heads, c.num_attention_heads
            ),
        );
    }
    if c.num_semantic_quantizers == 0 || c.num_semantic_quantizers >= c.num_quantizers {
        return fail(
            "num_semantic_quantizers",
            format!(
                "{}: between 1 and num_quantizers - 1 ({})",
                c.num_semantic_quantizers,
                c.num_quantizers - 1
            ),
        );
    }
    let valid = config.encoder_valid_num_quantizers;
    if valid == 0 || valid > c.num_quantizers {
        return Err(LoadError::invalid(
            file,
            "encoder_valid_num_quantizers",
            format!("{valid}: between 1 and {}", c.num_quantizers),
        ));
    }
    let ratio = seanet_rate(c) / c.frame_rate;
    if ratio.fract() != 0.0 || ratio < 1.0 {
        return fail(
            "_frame_rate",
            format!(
                "{} does not divide the SEANet rate {}",
                c.frame_rate,
                seanet_rate(c)
            ),
        );
    }
    let stride = ratio as usize;
    let hop: usize = c.upsampling_ratios.iter().product();
    if hop * stride != config.encode_downsample_rate {
        return Err(LoadError::invalid(
            file,
            "encode_downsample_rate",
            format!(
                "{}, but the encoder makes a frame of every {} samples",
                config.encode_downsample_rate,
                hop * stride
            ),
        ));
    }
    Ok(stride)
}

impl<T: Tensor> SpeechEncoder<T> {
    /// Loads the encoder half of a `speech_tokenizer/` folder (its `config.json` and
    /// `model.safetensors`).
    pub fn load(folder: &Path, device: &T::Device, dtype: DType) -> Result<Self, LoadError> {
        let config = SpeechTokenizerConfig::from_file(&folder.join("config.json"))?;
        let ckpt = Checkpoint::open(&folder.join("model.safetensors"))?;
        let config_file = folder.join("config.json").display().to_string();
        Self::from_checkpoint(&ckpt, &config, &config_file, device, dtype)
    }

    /// The encoder from an open checkpoint; every `encoder.*` tensor must be used, except the
    /// quantizers' decode-only output projections and `initialized` flags and the codebooks
    /// past `encoder_valid_num_quantizers`.
    pub fn from_checkpoint(
        ckpt: &Checkpoint,
        config: &SpeechTokenizerConfig,
        config_file: &str,
        device: &T::Device,
        dtype: DType,
    ) -> Result<Self, LoadError> {
        let stride = check(config, config_file)?;
        let c = &config.encoder_config;
        let l = Loader::<T>::new(ckpt, device, dtype).scoped("encoder.");
        let seanet = Seanet::load(&l.scoped("encoder.layers."), c)?;
        let transformer = EncoderTransformer::load(&l.scoped("encoder_transformer."), c)?;
        let downsample = if stride > 1 {
            let shape = MimiConvShape {
                stride,
                ..MimiConvShape::plain(c.hidden_size, c.hidden_size, 2 * stride)
            };
            Some(MimiConv::load(
                &l,
                "downsample.conv",
                shape,
                false,
                PadMode::Replicate,
            )?)
        } else {
            None
        };
        let valid = config.encoder_valid_num_quantizers;
        let semantic_count = c.num_semantic_quantizers.min(valid);
        // The quantizers measure distances in f32 whatever the model's dtype: `encode` hands
        // them f32 latents, so their projections are f32 too.
        let q = l.scoped("quantizer.").with_dtype(DType::F32);
        let semantic = ResidualQuantizer::load(
            &q.scoped("semantic_residual_vector_quantizer."),
            c,
            semantic_count,
        )?;
        let acoustic = ResidualQuantizer::load(
            &q.scoped("acoustic_residual_vector_quantizer."),
            c,
            valid - semantic_count,
        )?;
        let unused_ok = |key: &str| {
            let Some(rest) = key.strip_prefix("encoder.quantizer.") else {
                return false;
            };
            let Some((_, rest)) = rest.split_once('.') else {
                return false;
            };
            rest == "output_proj.weight"
                || rest.ends_with(".codebook.initialized")
                || rest.starts_with("layers.")
        };
        if let Some(key) = ckpt
            .unused_keys()
            .into_iter()
            .find(|k| k.starts_with("encoder.") && !unused_ok(k))
        {
            return Err(LoadError::invalid(
                ckpt.files(),
                key,
                "unexpected tensor: not part of the encoder that speech_tokenizer/config.json describes",
            ));
        }
        Ok(SpeechEncoder {
            seanet,
            transformer,
            downsample,
            semantic,
            acoustic,
            codebooks: valid,
            sample_rate: c.sampling_rate,
            device: device.clone(),
            dtype,
            _maps: ckpt.mmaps(),
        })
    }

    /// The rate the clip must have (24 kHz).
    pub fn sample_rate(&self) -> u32 {
        self.sample_rate
    }

    /// Codes per frame (16).
    pub fn codebooks(&self) -> usize {
        self.codebooks
    }

    /// A mono clip at [`Self::sample_rate`] -> `ceil(len / 1920)` frames of
    /// [`Self::codebooks`] codes.
    pub fn encode(&self, clip: &[f32]) -> Result<Vec<Vec<u32>>, EncodeError> {
        if clip.is_empty() {
            return Err(EncodeError::Empty);
        }
        let x = T::from_f32(&self.device, clip, &[1, clip.len(), 1], self.dtype);
        let x = self.transformer.forward(&self.seanet.forward(&x));
        let x = match &self.downsample {
            Some(conv) => conv.forward(&x),
            None => x,
        };
        let frames = x.shape()[1];
        // The quantizers measure distances in f32 whatever the model's dtype.
        let latents = x.reshape(&[frames, x.shape()[2]]).to_dtype(DType::F32);
        let books: Vec<Vec<i64>> = self
            .semantic
            .encode(&latents)
            .into_iter()
            .chain(self.acoustic.encode(&latents))
            .collect();
        Ok((0..frames)
            .map(|f| books.iter().map(|book| book[f] as u32).collect())
            .collect())
    }
}
