//! `params.json`: Mistral-format model arguments ([`mistral_params`]), with Voxtral-4B-TTS's
//! `multimodal` section. Structs mirror the JSON; absent fields take the reference's defaults.
//! `Config::from_file` validates and derives what the model needs.

use crate::nn::decoder::DecoderDims;
use crate::nn::mistral_params;
use crate::nn::LoadError;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;

/// The whole file: the text decoder (the backbone), then the audio sections.
pub type ModelArgs = mistral_params::ModelArgs<MultimodalArgs>;

#[derive(Clone, Debug, Deserialize, Serialize)]
pub struct MultimodalArgs {
    #[serde(default = "defaults::bos_token_id")]
    pub bos_token_id: u32,
    pub audio_model_args: AudioModelArgs,
    pub audio_tokenizer_args: AudioTokenizerArgs,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
pub struct AudioModelArgs {
    pub semantic_codebook_size: usize,
    pub acoustic_codebook_size: usize,
    pub n_acoustic_codebook: usize,
    #[serde(default = "defaults::audio_token_id")]
    pub audio_token_id: u32,
    #[serde(default = "defaults::begin_audio_token_id")]
    pub begin_audio_token_id: u32,
    #[serde(default)]
    pub audio_encoding_args: AudioEncodingArgs,
    pub acoustic_transformer_args: AcousticTransformerArgs,
}

#[derive(Clone, Debug, Deserialize, Serialize)]
pub struct AudioEncodingArgs {
    #[serde(default = "defaults::sampling_rate")]
    pub sampling_rate: u32,
    #[serde(default = "defaults::frame_rate")]
    pub frame_rate: f64,
    #[serde(default)]
    pub num_codebooks: Option<usize>,
}

impl Default for AudioEncodingArgs {
    fn default() -> Self {
        AudioEncodingArgs {
            sampling_rate: defaults::sampling_rate(),
            frame_rate: defaults::frame_rate(),
            num_codebooks: None,
        }
    }
}

/// Flow-matching head. Defaults are the reference dataclass's.
#[derive(Clone, Debug, Deserialize, Serialize)]
pub struct AcousticTransformerArgs {
    pub input_dim: usize,
    #[serde(default = "defaults::at_dim")]
    pub dim: usize,
    #[serde(default = "defaults::at_n_layers")]
    pub n_layers: usize,
    #[serde(default = "defaults::head_dim")]
    pub head_dim: usize,
    #[serde(default = "defaults::at_hidden_dim")]
    pub hidden_dim: usize,
    #[serde(default = "defaults::at_n_heads")]
    pub n_heads: usize,
    #[serde(default = "defaults::at_n_kv_heads")]
    pub n_kv_heads: usize,
    #[serde(default)]
    pub use_biases: bool,
    #[serde(default = "defaults::norm_eps")]
    pub norm_eps: f64,
    #[serde(default)]
    pub rope_theta: Option<f64>,
    #[serde(default)]
    pub sigma: Option<f64>,
    #[serde(default)]
    pub sigma_max: Option<f64>,
    /// Not in the published file; the reference serves with 7 Euler steps.
    #[serde(default)]
    pub n_decoding_steps: Option<usize>,
}

/// Codec (audio tokenizer). Defaults are the reference dataclass's.
#[derive(Clone, Debug, Deserialize, Serialize)]
pub struct AudioTokenizerArgs {
    #[serde(default = "defaults::channels")]
    pub channels: usize,
    #[serde(default = "defaults::sampling_rate")]
    pub sampling_rate: u32,
    #[serde(default = "defaults::patch_size")]
    pub pretransform_patch_size: usize,
    #[serde(default = "defaults::patch_kernel")]
    pub patch_proj_kernel_size: usize,
    #[serde(default = "defaults::semantic_codebook_size")]
    pub semantic_codebook_size: usize,
    #[serde(default = "defaults::semantic_dim")]
    pub semantic_dim: usize,
    #[serde(default = "defaults::acoustic_codebook_size")]
    pub acoustic_codebook_size: usize,
    #[serde(default = "defaults::acoustic_dim")]
    pub acoustic_dim: usize,
    #[serde(default = "defaults::yes")]
    pub conv_weight_norm: bool,
    #[serde(default = "defaults::yes")]
    pub causal: bool,
    #[serde(default = "defaults::window")]
    pub attn_sliding_window_size: usize,
    #[serde(default = "defaults::yes")]
    pub half_attn_window_upon_downsampling: bool,
    #[serde(default = "defaults::codec_dim")]
    pub dim: usize,
    #[serde(default = "defaults::codec_hidden_dim")]
    pub hidden_dim: usize,
    #[serde(default = "defaults::head_dim")]
    pub head_dim: usize,
    #[serde(default = "defaults::codec_heads")]
    pub n_heads: usize,
    #[serde(default = "defaults::codec_heads")]
    pub n_kv_heads: usize,
    #[serde(default = "defaults::yes")]
    pub qk_norm: bool,
    #[serde(default = "defaults::qk_norm_eps")]
    pub qk_norm_eps: f64,
    #[serde(default)]
    pub use_biases: bool,
    #[serde(default = "defaults::codec_norm_eps")]
    pub norm_eps: f64,
    #[serde(default = "defaults::yes")]
    pub layer_scale: bool,
    #[serde(default = "defaults::encoder_strides")]
    pub encoder_convs_strides_str: String,
    #[serde(default = "defaults::decoder_lengths")]
    pub decoder_transformer_lengths_str: String,
    #[serde(default = "defaults::decoder_kernels")]
    pub decoder_convs_kernels_str: String,
    #[serde(default = "defaults::decoder_strides")]
    pub decoder_convs_strides_str: String,
    /// Preset voice name -> index.
    #[serde(default)]
    pub voice: BTreeMap<String, usize>,
}

mod defaults {
    pub fn norm_eps() -> f64 {
        1e-5
    }
    pub fn bos_token_id() -> u32 {
        1
    }
    pub fn audio_token_id() -> u32 {
        24
    }
    pub fn begin_audio_token_id() -> u32 {
        25
    }
    pub fn sampling_rate() -> u32 {
        24_000
    }
    pub fn frame_rate() -> f64 {
        12.5
    }
    pub fn at_dim() -> usize {
        768
    }
    pub fn at_n_layers() -> usize {
        3
    }
    pub fn head_dim() -> usize {
        128
    }
    pub fn at_hidden_dim() -> usize {
        2048
    }
    pub fn at_n_heads() -> usize {
        6
    }
    pub fn at_n_kv_heads() -> usize {
        2
    }
    pub fn channels() -> usize {
        1
    }
    pub fn patch_size() -> usize {
        240
    }
    pub fn patch_kernel() -> usize {
        7
    }
    pub fn semantic_codebook_size() -> usize {
        8192
    }
    pub fn semantic_dim() -> usize {
        256
    }
    pub fn acoustic_codebook_size() -> usize {
        21
    }
    pub fn acoustic_dim() -> usize {
        36
    }
    pub fn yes() -> bool {
        true
    }
    pub fn window() -> usize {
        16
    }
    pub fn codec_dim() -> usize {
        1024
    }
    pub fn codec_hidden_dim() -> usize {
        4096
    }
    pub fn codec_heads() -> usize {
        8
    }
    pub fn qk_norm_eps() -> f64 {
        1e-6
    }
    pub fn codec_norm_eps() -> f64 {
        1e-2
    }
    pub fn encoder_strides() -> String {
        "2,2,2,1".into()
    }
    pub fn decoder_lengths() -> String {
        "2,2,2,2".into()
    }
    pub fn decoder_kernels() -> String {
        "3,4,4,4".into()
    }
    pub fn decoder_strides() -> String {
        "1,2,2,2".into()
    }
}

/// Reserved codes at the start of every codebook: 0 = EMPTY_AUDIO, 1 = END_AUDIO.
pub const NUM_AUDIO_SPECIAL_CODES: usize = 2;
pub const END_AUDIO_CODE: u32 = 1;
/// Euler steps of the flow head (not in the published file).
pub const DEFAULT_EULER_STEPS: usize = 7;
/// The reference pads its code tables to multiples of this.
const TABLE_PAD: usize = 128;

fn round_up(n: usize, multiple: usize) -> usize {
    n.div_ceil(multiple) * multiple
}

/// One codec decoder stage: a conv (stride 1 = plain causal conv, else transposed conv)
/// followed by a transformer with a sliding attention window.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CodecStage {
    pub kernel: usize,
    pub stride: usize,
    pub n_layers: usize,
    pub window: usize,
}

/// Validated model configuration with the derived sizes.
#[derive(Clone, Debug)]
pub struct Config {
    pub args: ModelArgs,
    pub n_codebooks: usize,
    pub semantic_head_rows: usize,
    pub audio_embedding_rows: usize,
    /// Offset of each codebook in the audio embedding table.
    pub codebook_offsets: Vec<usize>,
    pub euler_steps: usize,
    pub codec_stages: Vec<CodecStage>,
    pub samples_per_frame: usize,
    pub max_positions: usize,
}

fn parse_int_list(s: &str, file: &str, key: &str) -> Result<Vec<usize>, LoadError> {
    let items: Result<Vec<usize>, _> = s.split(',').map(|p| p.trim().parse::<usize>()).collect();
    match items {
        Ok(v) if !v.is_empty() => Ok(v),
        _ => Err(LoadError::invalid(
            file,
            key,
            format!("expected comma-separated integers, got {s:?}"),
        )),
    }
}

impl Config {
    /// The backbone's sizes.
    pub fn decoder_dims(&self) -> DecoderDims {
        self.args.decoder_dims(self.max_positions)
    }

    pub fn from_file(path: &Path) -> Result<Self, LoadError> {
        let text = std::fs::read_to_string(path).map_err(|e| LoadError::io(path, e))?;
        Self::from_json(&text, &path.display().to_string())
    }

    pub fn from_json(text: &str, file: &str) -> Result<Self, LoadError> {
        Self::from_args(mistral_params::parse(text, file)?, file)
    }

    pub fn from_args(args: ModelArgs, file: &str) -> Result<Self, LoadError> {
        let bad = |key: &str, msg: String| LoadError::invalid(file, key, msg);
        let positive = |key: &str, v: usize| {
            if v == 0 {
                Err(bad(key, "must be > 0".into()))
            } else {
                Ok(())
            }
        };
        args.check_decoder(file)?;
        let am = &args.multimodal.audio_model_args;
        let at = &am.acoustic_transformer_args;
        let ct = &args.multimodal.audio_tokenizer_args;
        let prefix = "multimodal.audio_model_args.acoustic_transformer_args";
        if at.n_heads == 0 || at.n_kv_heads == 0 || !at.n_heads.is_multiple_of(at.n_kv_heads) {
            return Err(bad(
                &format!("{prefix}.n_kv_heads"),
                "must be > 0 and divide n_heads".into(),
            ));
        }
        positive(&format!("{prefix}.n_layers"), at.n_layers)?;
        if at.input_dim != args.dim {
            return Err(bad(
                &format!("{prefix}.input_dim"),
                format!("must equal dim {}", args.dim),
            ));
        }
        if at.use_biases || ct.use_biases {
            return Err(bad(
                "use_biases",
                "biased checkpoints are not supported".into(),
            ));
        }
        positive(
            "multimodal.audio_model_args.semantic_codebook_size",
            am.semantic_codebook_size,
        )?;
        if am.acoustic_codebook_size < 2 {
            return Err(bad(
                "multimodal.audio_model_args.acoustic_codebook_size",
                "must be >= 2".into(),
            ));
        }
        positive(
            "multimodal.audio_model_args.n_acoustic_codebook",
            am.n_acoustic_codebook,
        )?;
        let tk = "multimodal.audio_tokenizer_args";
        if ct.acoustic_dim != am.n_acoustic_codebook {
            return Err(bad(
                &format!("{tk}.acoustic_dim"),
                "must equal n_acoustic_codebook".into(),
            ));
        }
        if ct.semantic_codebook_size != am.semantic_codebook_size {
            return Err(bad(
                &format!("{tk}.semantic_codebook_size"),
                "must equal the audio model's".into(),
            ));
        }
        if ct.acoustic_codebook_size != am.acoustic_codebook_size {
            return Err(bad(
                &format!("{tk}.acoustic_codebook_size"),
                "must equal the audio model's".into(),
            ));
        }
        if !ct.causal || ct.channels != 1 {
            return Err(bad(tk, "only the causal mono codec is supported".into()));
        }
        if ct.n_heads == 0 || ct.n_kv_heads == 0 || !ct.n_heads.is_multiple_of(ct.n_kv_heads) {
            return Err(bad(
                &format!("{tk}.n_kv_heads"),
                "must be > 0 and divide n_heads".into(),
            ));
        }

        let lengths = parse_int_list(
            &ct.decoder_transformer_lengths_str,
            file,
            &format!("{tk}.decoder_transformer_lengths_str"),
        )?;
        let kernels = parse_int_list(
            &ct.decoder_convs_kernels_str,
            file,
            &format!("{tk}.decoder_convs_kernels_str"),
        )?;
        let strides = parse_int_list(
            &ct.decoder_convs_strides_str,
            file,
            &format!("{tk}.decoder_convs_strides_str"),
        )?;
        let enc_strides = parse_int_list(
            &ct.encoder_convs_strides_str,
            file,
            &format!("{tk}.encoder_convs_strides_str"),
        )?;
        if lengths.len() != kernels.len() || kernels.len() != strides.len() {
            return Err(bad(
                &format!("{tk}.decoder_*_str"),
                "the three lists must have equal lengths".into(),
            ));
        }
        if strides.iter().chain(&kernels).any(|&v| v == 0)
            || strides.iter().zip(&kernels).any(|(s, k)| s > k)
        {
            return Err(bad(
                &format!("{tk}.decoder_convs_strides_str"),
                "strides must be in 1..=kernel".into(),
            ));
        }
        // The attention window is halved for every downsampling encoder stage and doubled back
        // for every upsampling decoder stage (reference: VoxtralTTSAudioTokenizer.__init__).
        let mut window = ct.attn_sliding_window_size;
        if ct.half_attn_window_upon_downsampling {
            for &s in enc_strides.iter().filter(|&&s| s > 1) {
                if s != 2 {
                    return Err(bad(
                        &format!("{tk}.encoder_convs_strides_str"),
                        "only stride 2 halves the window".into(),
                    ));
                }
                window /= 2;
            }
        }
        let mut stages = Vec::with_capacity(lengths.len());
        for i in 0..lengths.len() {
            if ct.half_attn_window_upon_downsampling && strides[i] > 1 {
                if strides[i] != 2 {
                    return Err(bad(
                        &format!("{tk}.decoder_convs_strides_str"),
                        "only stride 2 doubles the window".into(),
                    ));
                }
                window *= 2;
            }
            if window == 0 {
                return Err(bad(
                    &format!("{tk}.attn_sliding_window_size"),
                    "window shrinks to 0".into(),
                ));
            }
            stages.push(CodecStage {
                kernel: kernels[i],
                stride: strides[i],
                n_layers: lengths[i],
                window,
            });
        }
        if stages[0].stride != 1 {
            return Err(bad(
                &format!("{tk}.decoder_convs_strides_str"),
                "the first decoder conv must have stride 1".into(),
            ));
        }
        for (i, st) in stages.iter().enumerate().skip(1) {
            if st.kernel == 1 && st.stride == 1 {
                return Err(bad(
                    &format!("{tk}.decoder_convs_kernels_str"),
                    format!("stage {i}: identity stages are not supported"),
                ));
            }
        }

        let n_codebooks = 1 + am.n_acoustic_codebook;
        let special = NUM_AUDIO_SPECIAL_CODES;
        let semantic_head_rows = round_up(am.semantic_codebook_size + special, TABLE_PAD);
        let mut codebook_offsets = Vec::with_capacity(n_codebooks);
        let mut total = 0;
        for k in 0..n_codebooks {
            codebook_offsets.push(total);
            total += if k == 0 {
                am.semantic_codebook_size
            } else {
                am.acoustic_codebook_size
            } + special;
        }
        let audio_embedding_rows = round_up(total, TABLE_PAD);
        let upsample: usize = stages.iter().map(|s| s.stride).product();
        Ok(Config {
            n_codebooks,
            semantic_head_rows,
            audio_embedding_rows,
            codebook_offsets,
            euler_steps: at.n_decoding_steps.unwrap_or(DEFAULT_EULER_STEPS),
            codec_stages: stages,
            samples_per_frame: ct.pretransform_patch_size * upsample,
            max_positions: args.max_seq_len.unwrap_or(128_000),
            args,
        })
    }

    pub fn sample_rate(&self) -> u32 {
        self.args.multimodal.audio_tokenizer_args.sampling_rate
    }

    pub fn audio_model(&self) -> &AudioModelArgs {
        &self.args.multimodal.audio_model_args
    }

    pub fn flow(&self) -> &AcousticTransformerArgs {
        &self
            .args
            .multimodal
            .audio_model_args
            .acoustic_transformer_args
    }

    pub fn codec(&self) -> &AudioTokenizerArgs {
        &self.args.multimodal.audio_tokenizer_args
    }

    /// Codec latent width: semantic embedding + one value per acoustic codebook.
    pub fn latent_dim(&self) -> usize {
        self.codec().semantic_dim + self.codec().acoustic_dim
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const REAL: &str = r#"{"dim":3072,"n_layers":26,"head_dim":128,"hidden_dim":9216,"n_heads":32,
      "n_kv_heads":8,"rope_theta":1000000.0,"norm_eps":1e-5,"vocab_size":131072,"tied_embeddings":true,
      "multimodal":{"bos_token_id":1,"audio_model_args":{"semantic_codebook_size":8192,
      "acoustic_codebook_size":21,"n_acoustic_codebook":36,"audio_token_id":24,"begin_audio_token_id":25,
      "audio_encoding_args":{"sampling_rate":24000,"frame_rate":12.5,"num_codebooks":37},
      "acoustic_transformer_args":{"input_dim":3072,"dim":3072,"n_layers":3,"head_dim":128,
      "hidden_dim":9216,"n_heads":32,"n_kv_heads":8,"rope_theta":10000,"sigma":1e-5,"sigma_max":1.0}},
      "audio_tokenizer_args":{"pretransform_patch_size":240,"patch_proj_kernel_size":7,
      "semantic_codebook_size":8192,"semantic_dim":256,"acoustic_codebook_size":21,"acoustic_dim":36,
      "conv_weight_norm":true,"causal":true,"attn_sliding_window_size":16,
      "half_attn_window_upon_downsampling":true,"dim":1024,"hidden_dim":4096,"head_dim":128,"n_heads":8,
      "n_kv_heads":8,"qk_norm":true,"qk_norm_eps":1e-6,"norm_eps":0.01,"layer_scale":true,
      "decoder_transformer_lengths_str":"2,2,2,2","decoder_convs_kernels_str":"3,4,4,4",
      "decoder_convs_strides_str":"1,2,2,2","voice":{"casual_female":0,"hi_female":19}}}}"#;

    #[test]
    fn real_params_derive_the_spec_sizes() {
        let c = Config::from_json(REAL, "params.json").unwrap();
        assert_eq!(c.semantic_head_rows, 8320);
        assert_eq!(c.audio_embedding_rows, 9088);
        assert_eq!(c.samples_per_frame, 1920);
        assert_eq!(c.latent_dim(), 292);
        assert_eq!(c.n_codebooks, 37);
        assert_eq!(c.euler_steps, 7);
        assert_eq!(c.codebook_offsets[1], 8194);
        assert_eq!(c.codebook_offsets[2], 8194 + 23);
        let windows: Vec<usize> = c.codec_stages.iter().map(|s| s.window).collect();
        assert_eq!(windows, vec![2, 4, 8, 16]);
        let strides: Vec<usize> = c.codec_stages.iter().map(|s| s.stride).collect();
        assert_eq!(strides, vec![1, 2, 2, 2]);
    }

    #[test]
    fn bad_lists_and_json_name_the_key() {
        let broken = REAL.replace("\"3,4,4,4\"", "\"3,x,4,4\"");
        let err = Config::from_json(&broken, "params.json")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("params.json") && err.contains("decoder_convs_kernels_str"),
            "{err}"
        );
        let err = Config::from_json("{", "params.json")
            .unwrap_err()
            .to_string();
        assert!(err.contains("params.json"), "{err}");
        let missing = REAL.replace("\"n_heads\":32,\n      \"n_kv_heads\":8,", "");
        let err = Config::from_json(&missing, "p.json")
            .unwrap_err()
            .to_string();
        assert!(err.contains("n_heads"), "{err}");
    }
}
