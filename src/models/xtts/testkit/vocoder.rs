//! XTTS-v2's `hifigan_decoder.*` tensors, random: the speaker encoder (ResNet H/ASP with its
//! DSP buffers) and HiFi-GAN, full size with the real key names (docs/xtts-v2-spec.md §2).
//! Their widths are hard-coded in the reference's `HifiDecoder` (only HiFi-GAN's input width
//! follows `decoder_input_dim`), so a tiny XTTS checkpoint carries them at full size too.
//!
//! Scales keep activations O(1), as the reference oracle does (references-on-cpu.md): convs
//! drawn for unit-variance outputs, weight-norm magnitudes 0.8–1.2, small biases, BatchNorm
//! scales 1 ± 0.1 and running variances 0.5–1.5. The DSP buffers (pre-emphasis filter,
//! Hamming window, HTK mel filterbank) hold their constructed values, as real files do.

use super::super::keys;
use crate::nn::safetensors_writer::{write_safetensors, TensorSpec};
use crate::testkit::{cached_folder, rng_for, Init};
use anyhow::Result;
use rand::Rng;
use safetensors::Dtype;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

/// The widths of the two networks. The reference hard-codes them ([`VocoderDims::PUBLISHED`]);
/// the loaders read them from the tensors' shapes, so a served test folder can carry
/// [`VocoderDims::TINY`] ones (which coqui-tts itself could not load).
#[derive(Clone, Copy, Debug)]
pub struct VocoderDims {
    /// HiFi-GAN's first upsampling width (`upsample_initial_channel_decoder`), halved by each
    /// upsampling.
    pub upsample_channels: usize,
    pub speaker_filters: [usize; 4],
    pub speaker_blocks: [usize; 4],
    /// The speaker encoder's attention width.
    pub speaker_attention: usize,
}

impl VocoderDims {
    pub const PUBLISHED: VocoderDims = VocoderDims {
        upsample_channels: 512,
        speaker_filters: [32, 64, 128, 256],
        speaker_blocks: [3, 4, 6, 3],
        speaker_attention: 128,
    };

    /// About 0.5 M values: a served test folder of a few MB.
    pub const TINY: VocoderDims = VocoderDims {
        upsample_channels: 32,
        speaker_filters: [8, 8, 16, 16],
        speaker_blocks: [1, 1, 1, 1],
        speaker_attention: 16,
    };
}

const UPSAMPLE_KERNELS: [usize; 4] = [16, 16, 4, 4];
const UPSAMPLE_STRIDES: [usize; 4] = [8, 8, 2, 2];
const RESBLOCK_KERNELS: [usize; 3] = [3, 7, 11];
/// The speaker embedding's width (`d_vector_dim`).
pub const EMBEDDING: usize = 512;
const SPEAKER_MELS: usize = 64;
const SPEAKER_N_FFT: usize = 512;
const SPEAKER_WINDOW: usize = 400;
const SPEAKER_SAMPLE_RATE: f64 = 16_000.0;
const PRE_EMPHASIS: f32 = 0.97;

const BIAS: Init = Init::Around(0.0, 0.02);
const WEIGHT_NORM_G: Init = Init::Around(1.0, 0.2);
const BN_SCALE: Init = Init::Around(1.0, 0.1);
const BN_SHIFT: Init = Init::Around(0.0, 0.1);
const BN_VARIANCE: Init = Init::Around(1.0, 0.5);
/// The speaker embedding is unit-norm (its entries about 1/√512), so HiFi-GAN's conditioning
/// convs are this much wider than unit-variance: the waveform then depends on the voice.
const CONDITIONING_GAIN: f32 = 10.0;

/// One tensor of the state dict, its little-endian bytes ready for a safetensors file.
pub struct GeneratedTensor {
    pub key: String,
    pub dtype: Dtype,
    pub shape: Vec<usize>,
    pub bytes: Vec<u8>,
}

struct Out {
    seed: u64,
    dims: VocoderDims,
    tensors: Vec<GeneratedTensor>,
}

impl Out {
    fn values(&mut self, key: String, shape: &[usize], values: Vec<f32>) {
        self.tensors.push(GeneratedTensor {
            key,
            dtype: Dtype::F32,
            shape: shape.to_vec(),
            bytes: values.iter().flat_map(|v| v.to_le_bytes()).collect(),
        });
    }

    pub(super) fn random(&mut self, key: String, shape: &[usize], init: Init) {
        let mut rng = rng_for(self.seed, &key);
        let n = shape.iter().product();
        let values = (0..n)
            .map(|i| {
                let (center, spread) = init.range(i);
                center + spread * (rng.random::<f32>() * 2.0 - 1.0)
            })
            .collect();
        self.values(key, shape, values);
    }

    fn conv(&mut self, p: &str, shape: &[usize], bias: bool) {
        let fan_in = shape[1..].iter().product();
        self.random(format!("{p}.weight"), shape, Init::Linear(fan_in));
        if bias {
            self.random(format!("{p}.bias"), &shape[..1], BIAS);
        }
    }

    /// A weight-normed conv: `original0` (g, one per slice of dim 0) and `original1` (v).
    fn weight_norm_conv(&mut self, p: &str, shape: &[usize], bias_len: usize) {
        let g_shape: Vec<usize> = std::iter::once(shape[0])
            .chain(std::iter::repeat_n(1, shape.len() - 1))
            .collect();
        let wn = format!("{p}.parametrizations.weight");
        self.random(format!("{wn}.original0"), &g_shape, WEIGHT_NORM_G);
        self.random(format!("{wn}.original1"), shape, Init::Around(0.0, 1.0));
        self.random(format!("{p}.bias"), &[bias_len], BIAS);
    }

    fn batch_norm(&mut self, p: &str, n: usize) {
        self.random(format!("{p}.weight"), &[n], BN_SCALE);
        self.random(format!("{p}.bias"), &[n], BN_SHIFT);
        self.random(format!("{p}.running_mean"), &[n], BN_SHIFT);
        self.random(format!("{p}.running_var"), &[n], BN_VARIANCE);
        self.tensors.push(GeneratedTensor {
            key: format!("{p}.num_batches_tracked"),
            dtype: Dtype::I64,
            shape: vec![],
            bytes: 0i64.to_le_bytes().to_vec(),
        });
    }
}

/// Every `hifigan_decoder.*` tensor of an XTTS-v2 checkpoint whose GPT latents are
/// `decoder_input_dim` wide, drawn from `seed` (each tensor from its own stream, by key).
/// f32, except BatchNorm's `num_batches_tracked` (i64 scalars, as torch saves them).
pub fn hifigan_decoder_tensors(decoder_input_dim: usize, seed: u64) -> Vec<GeneratedTensor> {
    sized_hifigan_decoder_tensors(VocoderDims::PUBLISHED, decoder_input_dim, seed)
}

/// [`hifigan_decoder_tensors`] with the widths `dims`.
pub fn sized_hifigan_decoder_tensors(
    dims: VocoderDims,
    decoder_input_dim: usize,
    seed: u64,
) -> Vec<GeneratedTensor> {
    let mut out = Out {
        seed,
        dims,
        tensors: Vec::new(),
    };
    waveform_decoder(&mut out, decoder_input_dim);
    speaker_encoder(&mut out);
    out.tensors
}

fn waveform_decoder(out: &mut Out, input_dim: usize) {
    let p = format!("{}.waveform_decoder", keys::HIFIGAN_DECODER);
    let upsample_channels = out.dims.upsample_channels;
    out.conv(
        &format!("{p}.conv_pre"),
        &[upsample_channels, input_dim, 7],
        true,
    );
    let conditioning = |out: &mut Out, key: String, channels: usize| {
        out.random(
            format!("{key}.weight"),
            &[channels, EMBEDDING, 1],
            Init::Gain(EMBEDDING, CONDITIONING_GAIN),
        );
        out.random(format!("{key}.bias"), &[channels], BIAS);
    };
    conditioning(out, format!("{p}.cond_layer"), upsample_channels);
    for (i, (&kernel, _stride)) in UPSAMPLE_KERNELS.iter().zip(UPSAMPLE_STRIDES).enumerate() {
        let (input, channels) = (upsample_channels >> i, upsample_channels >> (i + 1));
        out.weight_norm_conv(
            &format!("{p}.ups.{i}"),
            &[input, channels, kernel],
            channels,
        );
        conditioning(out, format!("{p}.conds.{i}"), channels);
        for (j, &k) in RESBLOCK_KERNELS.iter().enumerate() {
            let block = format!("{p}.resblocks.{}", i * RESBLOCK_KERNELS.len() + j);
            for convs in ["convs1", "convs2"] {
                for m in 0..3 {
                    out.weight_norm_conv(
                        &format!("{block}.{convs}.{m}"),
                        &[channels, channels, k],
                        channels,
                    );
                }
            }
        }
    }
    let last = upsample_channels >> UPSAMPLE_KERNELS.len();
    out.conv(&format!("{p}.conv_post"), &[1, last, 7], false);
}

fn speaker_encoder(out: &mut Out) {
    let p = format!("{}.speaker_encoder", keys::HIFIGAN_DECODER);
    let VocoderDims {
        speaker_filters: filters,
        speaker_blocks,
        speaker_attention: attention,
        ..
    } = out.dims;
    out.conv(&format!("{p}.conv1"), &[filters[0], 1, 3, 3], true);
    out.batch_norm(&format!("{p}.bn1"), filters[0]);
    let mut inplanes = filters[0];
    for (l, (&planes, &blocks)) in filters.iter().zip(&speaker_blocks).enumerate() {
        for b in 0..blocks {
            let block = format!("{p}.layer{}.{b}", l + 1);
            let input = if b == 0 { inplanes } else { planes };
            out.conv(&format!("{block}.conv1"), &[planes, input, 3, 3], false);
            out.batch_norm(&format!("{block}.bn1"), planes);
            out.conv(&format!("{block}.conv2"), &[planes, planes, 3, 3], false);
            out.batch_norm(&format!("{block}.bn2"), planes);
            out.conv(&format!("{block}.se.fc.0"), &[planes / 8, planes], true);
            out.conv(&format!("{block}.se.fc.2"), &[planes, planes / 8], true);
            if b == 0 && l > 0 {
                out.conv(
                    &format!("{block}.downsample.0"),
                    &[planes, input, 1, 1],
                    false,
                );
                out.batch_norm(&format!("{block}.downsample.1"), planes);
            }
        }
        inplanes = planes;
    }
    out.values(
        format!("{p}.torch_spec.0.filter"),
        &[1, 1, 2],
        vec![-PRE_EMPHASIS, 1.0],
    );
    out.values(
        format!("{p}.torch_spec.1.spectrogram.window"),
        &[SPEAKER_WINDOW],
        periodic_hamming(SPEAKER_WINDOW),
    );
    out.values(
        format!("{p}.torch_spec.1.mel_scale.fb"),
        &[SPEAKER_N_FFT / 2 + 1, SPEAKER_MELS],
        htk_filterbank(SPEAKER_N_FFT / 2 + 1, SPEAKER_MELS, SPEAKER_SAMPLE_RATE),
    );
    let pooled = filters[3] * SPEAKER_MELS / 8;
    out.conv(&format!("{p}.attention.0"), &[attention, pooled, 1], true);
    out.batch_norm(&format!("{p}.attention.2"), attention);
    out.conv(&format!("{p}.attention.3"), &[pooled, attention, 1], true);
    out.conv(&format!("{p}.fc"), &[EMBEDDING, 2 * pooled], true);
}

/// `torch.hamming_window(n)` (periodic): `0.54 − 0.46·cos(2πi/n)`.
fn periodic_hamming(n: usize) -> Vec<f32> {
    (0..n)
        .map(|i| (0.54 - 0.46 * (2.0 * std::f64::consts::PI * i as f64 / n as f64).cos()) as f32)
        .collect()
}

/// torchaudio's `melscale_fbanks` (HTK scale, no norm, 0 Hz to Nyquist): `[bins][mels]`
/// triangles between mel-spaced edges.
fn htk_filterbank(bins: usize, mels: usize, sample_rate: f64) -> Vec<f32> {
    let to_mel = |hz: f64| 2595.0 * (1.0 + hz / 700.0).log10();
    let to_hz = |mel: f64| 700.0 * (10f64.powf(mel / 2595.0) - 1.0);
    let nyquist = sample_rate / 2.0;
    let top = to_mel(nyquist);
    let edges: Vec<f64> = (0..mels + 2)
        .map(|i| to_hz(top * i as f64 / (mels + 1) as f64))
        .collect();
    let mut fb = Vec::with_capacity(bins * mels);
    for b in 0..bins {
        let freq = nyquist * b as f64 / (bins - 1) as f64;
        for m in 0..mels {
            let down = (freq - edges[m]) / (edges[m + 1] - edges[m]);
            let up = (edges[m + 2] - freq) / (edges[m + 2] - edges[m + 1]);
            fb.push(down.min(up).max(0.0) as f32);
        }
    }
    fb
}

/// Writes the tensors to `path` as one safetensors file.
pub fn write_hifigan_decoder(path: &Path, decoder_input_dim: usize, seed: u64) -> Result<()> {
    let tensors = hifigan_decoder_tensors(decoder_input_dim, seed);
    let specs: Vec<TensorSpec> = tensors
        .iter()
        .map(|t| TensorSpec {
            key: t.key.clone(),
            dtype: t.dtype,
            shape: t.shape.clone(),
        })
        .collect();
    write_safetensors(
        path,
        &specs,
        &HashMap::new(),
        |i| Ok(tensors[i].bytes.clone()),
        &indicatif::ProgressBar::hidden(),
    )
}

/// The file name of [`cached_hifigan_decoder`]'s checkpoint.
pub const VOCODER_SAFETENSORS: &str = "model.safetensors";

/// A folder under `target/test-models/` holding [`write_hifigan_decoder`]'s file, made on
/// first use.
pub fn cached_hifigan_decoder(decoder_input_dim: usize, seed: u64) -> Result<PathBuf> {
    cached_folder(
        &format!("xtts-vocoder-{decoder_input_dim}"),
        seed,
        VOCODER_SAFETENSORS,
        |dir| {
            std::fs::create_dir_all(dir)?;
            write_hifigan_decoder(&dir.join(VOCODER_SAFETENSORS), decoder_input_dim, seed)
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(tensors: &[GeneratedTensor], prefix: &str) -> usize {
        tensors
            .iter()
            .filter(|t| t.key.starts_with(prefix) && t.dtype == Dtype::F32)
            .map(|t| t.shape.iter().product::<usize>())
            .sum()
    }

    /// The published checkpoint's counts (docs/xtts-v2-spec.md §2): HiFi-GAN 17.8 M at
    /// `decoder_input_dim` 1024, the speaker encoder 8.05 M with its buffers; 536 keys as
    /// coqui's `HifiDecoder.state_dict()` has.
    #[test]
    fn full_size_layout() {
        let tensors = hifigan_decoder_tensors(1024, 1);
        assert_eq!(tensors.len(), 536);
        let hifigan = params(&tensors, "hifigan_decoder.waveform_decoder.");
        let speaker = params(&tensors, "hifigan_decoder.speaker_encoder.");
        assert!((17_700_000..17_900_000).contains(&hifigan), "{hifigan}");
        assert!((8_000_000..8_100_000).contains(&speaker), "{speaker}");
    }

    #[test]
    fn filterbank_rows_are_triangles() {
        let fb = htk_filterbank(257, 64, 16_000.0);
        for m in 0..64 {
            let column: Vec<f32> = (0..257).map(|b| fb[b * 64 + m]).collect();
            let peak = column.iter().cloned().fold(0f32, f32::max);
            assert!(peak > 0.0 && peak <= 1.0, "mel {m}: peak {peak}");
        }
    }
}
