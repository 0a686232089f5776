//! The 12 Hz speech-tokenizer decoder: 16 codes per 80 ms frame -> 1920 samples at 24 kHz
//! (`speech_tokenizer/model.safetensors`, keys `decoder.*`; spec §8).
//!
//! Split RVQ lookup, a causal conv, the windowed pre-transformer, two ×2 transposed-conv +
//! ConvNeXt stages, then a causal conv and four SnakeBeta / transposed-conv / residual-unit
//! blocks (×8, ×5, ×4, ×3) down to one channel, clamped to ±1. Everything is causal, so the
//! decoder also runs in chunks that continue one another ([`DecoderStream`], `stream.rs`).

pub(super) mod convs;
pub(super) mod quantizer;
mod stream;
pub(super) mod transformer;

pub use stream::DecoderStream;

use crate::models::qwen3_tts::config::{SpeechDecoderConfig, SpeechTokenizerConfig};
use crate::nn::checkpoint::Checkpoint;
use crate::nn::layers::Loader;
use crate::nn::LoadError;
use crate::tensor::{DType, Tensor};
use convs::{CausalConv, CausalTransposeConv, ConvNeXt, ConvShape, DecoderBlock, Slots, SnakeBeta};
use memmap2::Mmap;
use quantizer::SplitQuantizer;
use std::path::Path;
use std::sync::Arc;
use transformer::PreTransformer;

/// The official whole-utterance decode (`chunked_decode`): chunks of 300 frames, each
/// decoded afresh with up to 25 earlier frames of context whose samples are dropped.
pub const OFFICIAL_CHUNK_FRAMES: usize = 300;
pub const OFFICIAL_CHUNK_CONTEXT: usize = 25;

/// The most frames one forward pass takes; longer inputs go through the stream in passes of
/// this many. A pass's largest activations then stay under 32 MB, which the allocator
/// reuses: larger ones are mapped and zeroed afresh for every operation, and 48-frame passes
/// measured 20 to 40% slower per frame than 16-frame ones (as did 96).
const PASS_FRAMES: usize = 16;

/// How many leading samples the official Base in-context output drops: the utterance is
/// decoded after the reference clip's codes, and the cut is `int(ref_len / total_len ·
/// len(wav))` in Python floats (`qwen3_tts_model.py` l.628). That is `reference_frames ·
/// 1920` in exact arithmetic, but the float product can land just below it (15 of 22
/// frames cuts 28799 samples, not 28800), so it is computed the same way here.
pub fn official_reference_cut(
    reference_frames: usize,
    total_frames: usize,
    samples: usize,
) -> usize {
    if total_frames == 0 {
        return 0;
    }
    (reference_frames as f64 / total_frames as f64 * samples as f64) as usize
}

#[derive(Debug, thiserror::Error)]
pub enum CodesError {
    #[error("frame {frame}: expected {expected} codes, got {got}")]
    FrameWidth {
        frame: usize,
        expected: usize,
        got: usize,
    },
    #[error("frame {frame}, codebook {codebook}: code {code} is outside 0..{size}")]
    CodeRange {
        frame: usize,
        codebook: usize,
        code: u32,
        size: usize,
    },
}

pub struct SpeechDecoder<T: Tensor> {
    quantizer: SplitQuantizer<T>,
    pre_conv: CausalConv<T>,
    transformer: PreTransformer<T>,
    upsample: Vec<(CausalTransposeConv<T>, ConvNeXt<T>)>,
    input_conv: CausalConv<T>,
    blocks: Vec<DecoderBlock<T>>,
    output_act: SnakeBeta<T>,
    output_conv: CausalConv<T>,
    stateful_convs: usize,
    codebooks: usize,
    codebook_size: usize,
    samples_per_frame: usize,
    dtype: DType,
    /// The checkpoint's memory maps, which zero-copy weights point into.
    _maps: Vec<Arc<Mmap>>,
}

/// What the official decoder hard-codes, checked against `decoder_config`.
fn check(c: &SpeechDecoderConfig, samples_per_frame: usize, file: &str) -> Result<(), LoadError> {
    let fail = |key: &str, msg: String| {
        Err(LoadError::invalid(
            file,
            format!("decoder_config.{key}"),
            msg,
        ))
    };
    let rate: usize = c
        .upsampling_ratios
        .iter()
        .chain(&c.upsample_rates)
        .product();
    if rate != samples_per_frame {
        return fail(
            "upsample_rates",
            format!("upsample to {rate} samples per frame, but decode_upsample_rate is {samples_per_frame}"),
        );
    }
    if c.hidden_act != "silu" {
        return fail(
            "hidden_act",
            format!("{:?}, expected \"silu\"", c.hidden_act),
        );
    }
    if c.attention_bias {
        return fail("attention_bias", "true is not supported".into());
    }
    if c.num_quantizers < 2 {
        return fail(
            "num_quantizers",
            format!("{}: at least 2 (semantic + acoustic)", c.num_quantizers),
        );
    }
    if c.sliding_window == 0 {
        return fail("sliding_window", "0".into());
    }
    // Codebook entries are half the codebook dimension wide; RoPE rotates pairs.
    if !c.codebook_dim.is_multiple_of(2) {
        return fail("codebook_dim", format!("{}: must be even", c.codebook_dim));
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
    if !c.decoder_dim.is_multiple_of(1 << c.upsample_rates.len()) {
        return fail(
            "decoder_dim",
            format!(
                "{} is not halved {} times",
                c.decoder_dim,
                c.upsample_rates.len()
            ),
        );
    }
    Ok(())
}

impl<T: Tensor> SpeechDecoder<T> {
    /// Loads the decoder half of a `speech_tokenizer/` folder (its `config.json` and
    /// `model.safetensors`).
    pub fn load(folder: &Path, device: &T::Device, dtype: DType) -> Result<Self, LoadError> {
        let config = SpeechTokenizerConfig::from_file(&folder.join("config.json"))?;
        let ckpt = Checkpoint::open(&folder.join("model.safetensors"))?;
        let config_file = folder.join("config.json").display().to_string();
        Self::from_checkpoint(&ckpt, &config, &config_file, device, dtype)
    }

    /// The decoder from an open checkpoint; every `decoder.*` tensor must be used, except the
    /// quantizer's encode-only input projections.
    pub fn from_checkpoint(
        ckpt: &Checkpoint,
        config: &SpeechTokenizerConfig,
        config_file: &str,
        device: &T::Device,
        dtype: DType,
    ) -> Result<Self, LoadError> {
        let c = &config.decoder_config;
        let samples_per_frame = config.decode_upsample_rate;
        check(c, samples_per_frame, config_file)?;
        let l = Loader::<T>::new(ckpt, device, dtype).scoped("decoder.");
        let mut slots = Slots::default();
        let quantizer = SplitQuantizer::load(&l.scoped("quantizer."), c)?;
        let pre_conv = CausalConv::load(
            &l,
            "pre_conv.conv",
            ConvShape::plain(c.codebook_dim, c.latent_dim, 3),
            &mut slots,
        )?;
        let transformer = PreTransformer::load(&l.scoped("pre_transformer."), c)?;
        let upsample = c
            .upsampling_ratios
            .iter()
            .enumerate()
            .map(|(i, &factor)| {
                let p = format!("upsample.{i}");
                let dim = c.latent_dim;
                Ok((
                    CausalTransposeConv::load(
                        &l,
                        &format!("{p}.0.conv"),
                        [dim, dim, factor],
                        factor,
                        &mut slots,
                    )?,
                    ConvNeXt::load(&l, &format!("{p}.1"), dim, &mut slots)?,
                ))
            })
            .collect::<Result<Vec<_>, LoadError>>()?;
        let input_conv = CausalConv::load(
            &l,
            "decoder.0.conv",
            ConvShape::plain(c.latent_dim, c.decoder_dim, 7),
            &mut slots,
        )?;
        let mut width = c.decoder_dim;
        let mut blocks = Vec::new();
        for (i, &rate) in c.upsample_rates.iter().enumerate() {
            blocks.push(DecoderBlock::load(
                &l,
                &format!("decoder.{}.block", i + 1),
                width,
                rate,
                &mut slots,
            )?);
            width /= 2;
        }
        let n = c.upsample_rates.len();
        let output_act = SnakeBeta::load(&l, &format!("decoder.{}", n + 1), width)?;
        let output_conv = CausalConv::load(
            &l,
            &format!("decoder.{}.conv", n + 2),
            ConvShape::plain(width, 1, 7),
            &mut slots,
        )?;
        let encode_only = |key: &str| {
            key.starts_with("decoder.quantizer.") && key.ends_with(".input_proj.weight")
        };
        if let Some(key) = ckpt
            .unused_keys()
            .into_iter()
            .find(|k| k.starts_with("decoder.") && !encode_only(k))
        {
            return Err(LoadError::invalid(
                ckpt.files(),
                key,
                "unexpected tensor: not part of the decoder that speech_tokenizer/config.json describes",
            ));
        }
        Ok(SpeechDecoder {
            quantizer,
            pre_conv,
            transformer,
            upsample,
            input_conv,
            blocks,
            output_act,
            output_conv,
            stateful_convs: slots.count(),
            codebooks: c.num_quantizers,
            codebook_size: c.codebook_size,
            samples_per_frame,
            dtype,
            _maps: ckpt.mmaps(),
        })
    }

    /// Output samples per frame of codes (1920).
    pub fn samples_per_frame(&self) -> usize {
        self.samples_per_frame
    }

    /// Codes per frame (16).
    pub fn codebooks(&self) -> usize {
        self.codebooks
    }

    /// Checks every frame's width and code range before anything reaches the tensors.
    pub fn validate(&self, codes: &[Vec<u32>]) -> Result<(), CodesError> {
        for (frame, row) in codes.iter().enumerate() {
            if row.len() != self.codebooks {
                return Err(CodesError::FrameWidth {
                    frame,
                    expected: self.codebooks,
                    got: row.len(),
                });
            }
            if let Some((codebook, &code)) = row
                .iter()
                .enumerate()
                .find(|&(_, &code)| code as usize >= self.codebook_size)
            {
                return Err(CodesError::CodeRange {
                    frame,
                    codebook,
                    code,
                    size: self.codebook_size,
                });
            }
        }
        Ok(())
    }

    /// The whole utterance as the official `decode` gives it: 300-frame chunks with 25
    /// frames of context ([`OFFICIAL_CHUNK_FRAMES`]). Equal to [`Self::decode_one_pass`] over
    /// the first 300 frames, an approximation of it after.
    pub fn decode(&self, codes: &[Vec<u32>]) -> Result<Vec<f32>, CodesError> {
        self.validate(codes)?;
        let mut pcm = Vec::with_capacity(codes.len() * self.samples_per_frame);
        let mut start = 0;
        while start < codes.len() {
            let end = (start + OFFICIAL_CHUNK_FRAMES).min(codes.len());
            let context = start.min(OFFICIAL_CHUNK_CONTEXT);
            let chunk = self.decode_frames(&codes[start - context..end], &mut self.new_stream());
            pcm.extend_from_slice(&chunk[context * self.samples_per_frame..]);
            start = end;
        }
        Ok(pcm)
    }

    /// The whole utterance as one forward pass would give it: every frame sees its full left
    /// context.
    pub fn decode_one_pass(&self, codes: &[Vec<u32>]) -> Result<Vec<f32>, CodesError> {
        self.validate(codes)?;
        Ok(self.decode_frames(codes, &mut self.new_stream()))
    }

    /// A stream for one utterance, to be fed with [`Self::decode_chunk`].
    pub fn new_stream(&self) -> DecoderStream<T> {
        DecoderStream::new(self.stateful_convs, self.transformer.layers())
    }

    /// The samples of the next `codes` of `stream`'s utterance: chunk after chunk, the same
    /// samples as [`Self::decode_one_pass`] of the whole.
    pub fn decode_chunk(
        &self,
        stream: &mut DecoderStream<T>,
        codes: &[Vec<u32>],
    ) -> Result<Vec<f32>, CodesError> {
        self.validate(codes)?;
        Ok(self.decode_frames(codes, stream))
    }

    /// `codes` through `stream`, at most [`PASS_FRAMES`] frames per forward pass.
    fn decode_frames(&self, codes: &[Vec<u32>], stream: &mut DecoderStream<T>) -> Vec<f32> {
        let mut pcm = Vec::with_capacity(codes.len() * self.samples_per_frame);
        for pass in codes.chunks(PASS_FRAMES) {
            pcm.extend(self.forward(pass, stream).to_vec_f32());
        }
        pcm
    }

    /// Valid, non-empty codes -> `[frames · samples_per_frame]` samples.
    fn forward(&self, codes: &[Vec<u32>], stream: &mut DecoderStream<T>) -> T {
        let x = self.quantizer.decode(codes, self.dtype);
        let x = self.pre_conv.forward(&x, stream);
        let mut x = self.transformer.forward(&x, stream);
        for (up, block) in &self.upsample {
            x = block.forward(&up.forward(&x, stream), stream);
        }
        x = self.input_conv.forward(&x, stream);
        for block in &self.blocks {
            x = block.forward(&x, stream);
        }
        let wav = self
            .output_conv
            .forward(&self.output_act.forward(&x), stream)
            .clamp(-1.0, 1.0);
        stream.advance(codes.len());
        wav.reshape(&[codes.len() * self.samples_per_frame])
    }
}

#[cfg(test)]
mod tests {
    use super::official_reference_cut;

    #[test]
    fn reference_cut_rounds_as_the_official_float_expression() {
        assert_eq!(official_reference_cut(10, 19, 19 * 1920), 10 * 1920);
        // int(15 / 22 * 42240) == 28799 in Python.
        assert_eq!(official_reference_cut(15, 22, 22 * 1920), 28799);
        assert_eq!(official_reference_cut(0, 0, 0), 0);
    }
}
