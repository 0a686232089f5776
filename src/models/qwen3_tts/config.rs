//! The configuration files of a Qwen3-TTS-12Hz folder: `config.json` (talker, code predictor,
//! speaker encoder), `generation_config.json` and `speech_tokenizer/config.json`. Structs mirror
//! the JSON with its key names, as the official classes read them (`configuration_qwen3_tts.py`,
//! `configuration_qwen3_tts_tokenizer_v2.py`); keys the official model never reads (dropout,
//! `initializer_range`, the HF generation leftovers) are not mirrored. Defaults only where the
//! official code supplies one for a key that a published file may omit.

use crate::nn::LoadError;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Deserializer};
use std::collections::BTreeMap;
use std::path::Path;

/// `config.json`.
#[derive(Clone, Debug, Deserialize)]
pub struct Qwen3TtsConfig {
    pub model_type: String,
    pub tokenizer_type: String,
    /// "0b6" or "1b7"; see [`Qwen3TtsConfig::ignores_instruct`].
    pub tts_model_size: String,
    pub tts_model_type: TtsModelType,
    pub im_start_token_id: u32,
    pub im_end_token_id: u32,
    pub assistant_token_id: u32,
    pub tts_pad_token_id: u32,
    pub tts_bos_token_id: u32,
    pub tts_eos_token_id: u32,
    pub talker_config: TalkerConfig,
    /// Only Base folders have it (only Base builds a speaker encoder); the official model takes
    /// the class defaults when it is absent, and reads its `sample_rate` in every variant.
    #[serde(default)]
    pub speaker_encoder_config: SpeakerEncoderConfig,
    /// Decides the text tokenizer's split regex (`crate::tokenizers::qwen2::SplitRegex`).
    #[serde(default)]
    pub transformers_version: Option<String>,
}

/// `tts_model_type`: which voices a folder offers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TtsModelType {
    /// Voices cloned from a clip (x-vector, and reference codes in the in-context mode).
    Base,
    /// Preset speakers (`talker_config.spk_id`), style instructions on the 1.7B only.
    CustomVoice,
    /// A voice described by an instruction.
    VoiceDesign,
}

/// `talker_config`: the 28-layer Qwen3 decoder over codec ids (`Qwen3TTSTalkerConfig`).
#[derive(Clone, Debug, Deserialize)]
pub struct TalkerConfig {
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub num_key_value_heads: usize,
    pub head_dim: usize,
    pub hidden_act: String,
    pub attention_bias: bool,
    pub rms_norm_eps: f64,
    pub rope_theta: f64,
    /// Interleaved MRoPE; with the equal position axes the official code feeds it, it is plain
    /// 1-D RoPE.
    pub rope_scaling: Option<RopeScaling>,
    pub max_position_embeddings: usize,
    pub use_sliding_window: bool,
    pub sliding_window: Option<usize>,
    /// Codec vocabulary (codebook 0 plus the control ids).
    pub vocab_size: usize,
    pub text_vocab_size: usize,
    pub text_hidden_size: usize,
    /// 16: codebook 0 from the talker, 15 from the code predictor.
    pub num_code_groups: usize,
    /// Never read by the official code.
    pub position_id_per_seconds: f64,
    pub codec_pad_id: u32,
    pub codec_bos_id: u32,
    pub codec_eos_token_id: u32,
    pub codec_think_id: u32,
    pub codec_nothink_id: u32,
    pub codec_think_bos_id: u32,
    pub codec_think_eos_id: u32,
    /// Language (and, for CustomVoice, dialect) name to codec id.
    pub codec_language_id: BTreeMap<String, u32>,
    /// CustomVoice speaker name to codec id; empty elsewhere.
    pub spk_id: BTreeMap<String, u32>,
    /// Speaker name to the dialect (a `codec_language_id` key) it switches to for Chinese and
    /// "auto"; `false` in the file is `None`.
    #[serde(deserialize_with = "dialects")]
    pub spk_is_dialect: BTreeMap<String, Option<String>>,
    pub code_predictor_config: CodePredictorConfig,
}

#[derive(Clone, Debug, Deserialize)]
pub struct RopeScaling {
    pub rope_type: String,
    pub interleaved: bool,
    pub mrope_section: Vec<usize>,
}

/// `talker_config.code_predictor_config`: the 5-layer decoder that predicts codebooks 1..15
/// (`Qwen3TTSTalkerCodePredictorConfig`).
#[derive(Clone, Debug, Deserialize)]
pub struct CodePredictorConfig {
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub num_key_value_heads: usize,
    pub head_dim: usize,
    pub hidden_act: String,
    pub attention_bias: bool,
    pub rms_norm_eps: f64,
    pub rope_theta: f64,
    /// null: plain RoPE.
    pub rope_scaling: Option<RopeScaling>,
    pub max_position_embeddings: usize,
    pub use_sliding_window: bool,
    pub sliding_window: Option<usize>,
    /// Entries per codebook.
    pub vocab_size: usize,
    pub num_code_groups: usize,
    /// The one generation field of this config that the official code does not override at
    /// call time (1.0: no penalty).
    pub repetition_penalty: f64,
}

/// `speaker_encoder_config` (ECAPA-TDNN, Base only). The Base files give only `enc_dim` and
/// `sample_rate`; every missing key takes `Qwen3TTSSpeakerEncoderConfig`'s default.
#[derive(Clone, Debug, PartialEq, Deserialize)]
#[serde(default)]
pub struct SpeakerEncoderConfig {
    pub mel_dim: usize,
    /// Width of the x-vector; equal to the talker's hidden size.
    pub enc_dim: usize,
    pub enc_channels: Vec<usize>,
    pub enc_kernel_sizes: Vec<usize>,
    pub enc_dilations: Vec<usize>,
    pub enc_attention_channels: usize,
    pub enc_res2net_scale: usize,
    pub enc_se_channels: usize,
    pub sample_rate: u32,
}

impl Default for SpeakerEncoderConfig {
    fn default() -> Self {
        SpeakerEncoderConfig {
            mel_dim: 128,
            enc_dim: 1024,
            enc_channels: vec![512, 512, 512, 512, 1536],
            enc_kernel_sizes: vec![5, 3, 3, 3, 1],
            enc_dilations: vec![1, 2, 3, 4, 1],
            enc_attention_channels: 128,
            enc_res2net_scale: 8,
            enc_se_channels: 128,
            sample_rate: 24000,
        }
    }
}

/// `generation_config.json`, read by the official wrapper as a plain dict: a missing key takes
/// the wrapper's hard default (`_merge_generate_kwargs`), hence a default on every field.
#[derive(Clone, Debug, PartialEq, Deserialize)]
pub struct GenerationConfig {
    #[serde(default = "defaults::yes")]
    pub do_sample: bool,
    #[serde(default = "defaults::top_k")]
    pub top_k: usize,
    #[serde(default = "defaults::top_p")]
    pub top_p: f64,
    #[serde(default = "defaults::temperature")]
    pub temperature: f64,
    #[serde(default = "defaults::repetition_penalty")]
    pub repetition_penalty: f64,
    #[serde(default = "defaults::yes")]
    pub subtalker_dosample: bool,
    #[serde(default = "defaults::top_k")]
    pub subtalker_top_k: usize,
    #[serde(default = "defaults::top_p")]
    pub subtalker_top_p: f64,
    #[serde(default = "defaults::temperature")]
    pub subtalker_temperature: f64,
    #[serde(default = "defaults::max_new_tokens")]
    pub max_new_tokens: usize,
}

/// `speech_tokenizer/config.json` (also published alone as Qwen3-TTS-Tokenizer-12Hz).
#[derive(Clone, Debug, Deserialize)]
pub struct SpeechTokenizerConfig {
    pub model_type: String,
    pub encoder_valid_num_quantizers: usize,
    pub input_sample_rate: u32,
    pub output_sample_rate: u32,
    pub decode_upsample_rate: usize,
    pub encode_downsample_rate: usize,
    pub decoder_config: SpeechDecoderConfig,
    pub encoder_config: SpeechEncoderConfig,
}

/// `decoder_config`: codes to waveform (`Qwen3TTSTokenizerV2DecoderConfig`).
#[derive(Clone, Debug, Deserialize)]
pub struct SpeechDecoderConfig {
    pub codebook_size: usize,
    pub codebook_dim: usize,
    pub latent_dim: usize,
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub num_key_value_heads: usize,
    /// 64, so the attention is 1024 wide inside a 512-wide model.
    pub head_dim: usize,
    pub hidden_act: String,
    pub attention_bias: bool,
    pub rms_norm_eps: f64,
    pub rope_theta: f64,
    pub max_position_embeddings: usize,
    /// Every layer attends to the last 72 positions.
    pub sliding_window: usize,
    pub layer_scale_initial_scale: f64,
    pub num_quantizers: usize,
    pub num_semantic_quantizers: usize,
    pub upsample_rates: Vec<usize>,
    pub upsampling_ratios: Vec<usize>,
    pub decoder_dim: usize,
    /// In the file but unused by the official code (the semantic codebook has
    /// `codebook_size` entries).
    pub semantic_codebook_size: usize,
    /// In the file but unused by the official code.
    pub vector_quantization_hidden_dimension: usize,
}

/// `encoder_config`: a transformers `MimiConfig` (waveform to codes, for in-context cloning).
#[derive(Clone, Debug, Deserialize)]
pub struct SpeechEncoderConfig {
    pub sampling_rate: u32,
    #[serde(rename = "_frame_rate")]
    pub frame_rate: f64,
    pub audio_channels: usize,
    pub hidden_size: usize,
    pub intermediate_size: usize,
    pub num_filters: usize,
    pub num_residual_layers: usize,
    /// Mimi's downsampling ratios (8, 6, 5, 4), despite the name.
    pub upsampling_ratios: Vec<usize>,
    pub kernel_size: usize,
    pub last_kernel_size: usize,
    pub residual_kernel_size: usize,
    pub dilation_growth_rate: usize,
    pub use_causal_conv: bool,
    pub pad_mode: String,
    pub compress: usize,
    pub trim_right_ratio: f64,
    pub use_conv_shortcut: bool,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub num_key_value_heads: usize,
    pub head_dim: usize,
    pub hidden_act: String,
    pub attention_bias: bool,
    pub norm_eps: f64,
    pub rope_theta: f64,
    pub max_position_embeddings: usize,
    pub sliding_window: usize,
    pub layer_scale_initial_scale: f64,
    pub num_quantizers: usize,
    pub num_semantic_quantizers: usize,
    pub codebook_size: usize,
    pub codebook_dim: usize,
    pub vector_quantization_hidden_dimension: usize,
    pub upsample_groups: usize,
    pub normalize: bool,
}

impl Qwen3TtsConfig {
    pub fn from_file(path: &Path) -> Result<Self, LoadError> {
        let text = std::fs::read_to_string(path).map_err(|e| LoadError::io(path, e))?;
        Self::from_json(&text, &path.display().to_string())
    }

    /// Parses and checks `text`, the content of `file` (named in errors).
    pub fn from_json(text: &str, file: &str) -> Result<Self, LoadError> {
        let config: Qwen3TtsConfig = parse(text, file)?;
        config.check(file)?;
        Ok(config)
    }

    fn check(&self, file: &str) -> Result<(), LoadError> {
        let fail = |key: &str, msg: String| Err(LoadError::invalid(file, key, msg));
        if self.model_type != "qwen3_tts" {
            return fail(
                "model_type",
                format!("{:?}, expected \"qwen3_tts\"", self.model_type),
            );
        }
        if self.tokenizer_type != "qwen3_tts_tokenizer_12hz" {
            return fail(
                "tokenizer_type",
                format!(
                    "{:?}: only the 12 Hz speech tokenizer (\"qwen3_tts_tokenizer_12hz\") is supported",
                    self.tokenizer_type
                ),
            );
        }
        let talker = &self.talker_config;
        let predictor = &talker.code_predictor_config;
        for (key, heads, kv_heads) in [
            (
                "talker_config.num_key_value_heads",
                talker.num_attention_heads,
                talker.num_key_value_heads,
            ),
            (
                "talker_config.code_predictor_config.num_key_value_heads",
                predictor.num_attention_heads,
                predictor.num_key_value_heads,
            ),
        ] {
            if kv_heads == 0 || heads % kv_heads != 0 {
                return fail(key, format!("{kv_heads} does not divide {heads} heads"));
            }
        }
        if predictor.num_code_groups != talker.num_code_groups {
            return fail(
                "talker_config.code_predictor_config.num_code_groups",
                format!(
                    "{}, but talker_config.num_code_groups is {}",
                    predictor.num_code_groups, talker.num_code_groups
                ),
            );
        }
        for (speaker, dialect) in &talker.spk_is_dialect {
            if let Some(dialect) = dialect {
                if !talker.codec_language_id.contains_key(dialect) {
                    return fail(
                        &format!("talker_config.spk_is_dialect.{speaker}"),
                        format!("{dialect:?} is not in talker_config.codec_language_id"),
                    );
                }
            }
        }
        if self.tts_model_type == TtsModelType::Base {
            // The x-vector takes a codec position of the talker's width.
            let enc_dim = self.speaker_encoder_config.enc_dim;
            if enc_dim != talker.hidden_size {
                return fail(
                    "speaker_encoder_config.enc_dim",
                    format!(
                        "{enc_dim}, but the x-vector must be talker_config.hidden_size ({}) wide",
                        talker.hidden_size
                    ),
                );
            }
        }
        Ok(())
    }

    /// The official wrapper drops the instruction for `tts_model_size in "0b6"` (a substring
    /// test, kept as such): the 0.6B CustomVoice takes no style instruction.
    pub fn ignores_instruct(&self) -> bool {
        "0b6".contains(self.tts_model_size.as_str())
    }

    /// "auto" and the `codec_language_id` names that are not dialects, as the official model
    /// lists them (dialects are reached through a speaker, not asked for).
    pub fn supported_languages(&self) -> Vec<&str> {
        std::iter::once("auto")
            .chain(
                self.talker_config
                    .codec_language_id
                    .keys()
                    .map(String::as_str)
                    .filter(|name| !name.contains("dialect")),
            )
            .collect()
    }
}

impl GenerationConfig {
    pub fn from_file(path: &Path) -> Result<Self, LoadError> {
        let text = std::fs::read_to_string(path).map_err(|e| LoadError::io(path, e))?;
        parse(&text, &path.display().to_string())
    }
}

impl SpeechTokenizerConfig {
    pub fn from_file(path: &Path) -> Result<Self, LoadError> {
        let text = std::fs::read_to_string(path).map_err(|e| LoadError::io(path, e))?;
        Self::from_json(&text, &path.display().to_string())
    }

    pub fn from_json(text: &str, file: &str) -> Result<Self, LoadError> {
        let config: SpeechTokenizerConfig = parse(text, file)?;
        if config.model_type != "qwen3_tts_tokenizer_12hz" {
            return Err(LoadError::invalid(
                file,
                "model_type",
                format!(
                    "{:?}, expected \"qwen3_tts_tokenizer_12hz\"",
                    config.model_type
                ),
            ));
        }
        Ok(config)
    }
}

/// Deserializes `text` (as Python's json writes it); an error names the key path where it
/// failed.
fn parse<T: DeserializeOwned>(text: &str, file: &str) -> Result<T, LoadError> {
    let text = crate::nn::config_json::strict(text);
    let mut de = serde_json::Deserializer::from_str(&text);
    serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let key = e.path().to_string();
        LoadError::invalid(file, key, e.into_inner().to_string())
    })
}

/// `spk_is_dialect` values: `false` or a dialect name.
fn dialects<'de, D: Deserializer<'de>>(
    de: D,
) -> Result<BTreeMap<String, Option<String>>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Dialect {
        No(bool),
        Name(String),
    }
    let raw = BTreeMap::<String, Dialect>::deserialize(de)?;
    raw.into_iter()
        .map(|(speaker, dialect)| match dialect {
            Dialect::No(false) => Ok((speaker, None)),
            Dialect::No(true) => Err(serde::de::Error::custom(format!(
                "{speaker}: true is not a dialect; expected false or a dialect name"
            ))),
            Dialect::Name(name) => Ok((speaker, Some(name))),
        })
        .collect()
}

/// The official wrapper's hard generation defaults.
mod defaults {
    pub fn yes() -> bool {
        true
    }
    pub fn top_k() -> usize {
        50
    }
    pub fn top_p() -> f64 {
        1.0
    }
    pub fn temperature() -> f64 {
        0.9
    }
    pub fn repetition_penalty() -> f64 {
        1.05
    }
    /// The wrapper's hard default; the published file says 8192.
    pub fn max_new_tokens() -> usize {
        2048
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{json, Value};

    const FOLDERS: [&str; 5] = [
        "Qwen3-TTS-12Hz-0.6B-Base",
        "Qwen3-TTS-12Hz-0.6B-CustomVoice",
        "Qwen3-TTS-12Hz-1.7B-Base",
        "Qwen3-TTS-12Hz-1.7B-CustomVoice",
        "Qwen3-TTS-12Hz-1.7B-VoiceDesign",
    ];

    fn data(path: &str) -> std::path::PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/data/qwen3_tts")
            .join(path)
    }

    fn real(folder: &str) -> Qwen3TtsConfig {
        Qwen3TtsConfig::from_file(&data(folder).join("config.json")).unwrap()
    }

    fn real_json(folder: &str) -> Value {
        serde_json::from_str(&std::fs::read_to_string(data(folder).join("config.json")).unwrap())
            .unwrap()
    }

    fn error(json: &Value) -> String {
        Qwen3TtsConfig::from_json(&json.to_string(), "config.json")
            .unwrap_err()
            .to_string()
    }

    #[test]
    fn the_five_published_configs_give_the_spec_values() {
        for folder in FOLDERS {
            let config = real(folder);
            let large = folder.contains("1.7B");
            assert_eq!(config.tts_model_size, if large { "1b7" } else { "0b6" });
            assert_eq!(config.ignores_instruct(), !large, "{folder}");
            assert_eq!(config.transformers_version.as_deref(), Some("4.57.3"));
            assert_eq!(
                (
                    config.im_start_token_id,
                    config.im_end_token_id,
                    config.assistant_token_id
                ),
                (151644, 151645, 77091)
            );
            assert_eq!(
                (
                    config.tts_pad_token_id,
                    config.tts_bos_token_id,
                    config.tts_eos_token_id
                ),
                (151671, 151672, 151673)
            );

            let t = &config.talker_config;
            let hidden = if large { 2048 } else { 1024 };
            assert_eq!(t.hidden_size, hidden, "{folder}");
            assert_eq!(t.intermediate_size, if large { 6144 } else { 3072 });
            assert_eq!(
                (
                    t.num_hidden_layers,
                    t.num_attention_heads,
                    t.num_key_value_heads,
                    t.head_dim
                ),
                (28, 16, 8, 128)
            );
            assert_eq!(
                (t.vocab_size, t.text_vocab_size, t.text_hidden_size),
                (3072, 151936, 2048)
            );
            assert_eq!((t.rope_theta, t.rms_norm_eps), (1e6, 1e-6));
            let rope = t.rope_scaling.as_ref().unwrap();
            assert_eq!(
                (rope.rope_type.as_str(), rope.interleaved),
                ("default", true)
            );
            assert_eq!(rope.mrope_section, [24, 20, 20]);
            assert_eq!((t.num_code_groups, t.position_id_per_seconds), (16, 13.0));
            assert_eq!((t.sliding_window, t.use_sliding_window), (None, false));
            assert_eq!((t.hidden_act.as_str(), t.attention_bias), ("silu", false));
            assert_eq!(
                [
                    t.codec_pad_id,
                    t.codec_bos_id,
                    t.codec_eos_token_id,
                    t.codec_think_id,
                    t.codec_nothink_id,
                    t.codec_think_bos_id,
                    t.codec_think_eos_id
                ],
                [2148, 2149, 2150, 2154, 2155, 2156, 2157]
            );
            let mut languages = vec![
                ("chinese", 2055),
                ("english", 2050),
                ("german", 2053),
                ("italian", 2070),
                ("portuguese", 2071),
                ("spanish", 2054),
                ("japanese", 2058),
                ("korean", 2064),
                ("french", 2061),
                ("russian", 2069),
            ];
            let mut supported: Vec<&str> = languages.iter().map(|(name, _)| *name).collect();
            supported.sort_unstable();
            supported.insert(0, "auto");
            assert_eq!(config.supported_languages(), supported);

            let p = &t.code_predictor_config;
            assert_eq!(
                (p.hidden_size, p.intermediate_size, p.num_hidden_layers),
                (1024, 3072, 5)
            );
            assert_eq!(
                (p.num_attention_heads, p.num_key_value_heads, p.head_dim),
                (16, 8, 128)
            );
            assert_eq!((p.vocab_size, p.num_code_groups), (2048, 16));
            assert_eq!(
                (p.rope_theta, p.rms_norm_eps, p.repetition_penalty),
                (1e6, 1e-6, 1.0)
            );
            assert!(p.rope_scaling.is_none());

            let speakers = &t.spk_id;
            match config.tts_model_type {
                TtsModelType::CustomVoice => {
                    assert!(folder.contains("CustomVoice"));
                    languages.extend([("beijing_dialect", 2074), ("sichuan_dialect", 2062)]);
                    let want: BTreeMap<String, u32> = [
                        ("serena", 3066),
                        ("vivian", 3065),
                        ("uncle_fu", 3010),
                        ("ryan", 3061),
                        ("aiden", 2861),
                        ("ono_anna", 2873),
                        ("sohee", 2864),
                        ("eric", 2875),
                        ("dylan", 2878),
                    ]
                    .into_iter()
                    .map(|(name, id)| (name.to_string(), id))
                    .collect();
                    assert_eq!(*speakers, want);
                    let dialects: Vec<(&str, &str)> = t
                        .spk_is_dialect
                        .iter()
                        .filter_map(|(s, d)| Some((s.as_str(), d.as_deref()?)))
                        .collect();
                    assert_eq!(
                        dialects,
                        [("dylan", "beijing_dialect"), ("eric", "sichuan_dialect")]
                    );
                    assert_eq!(t.spk_is_dialect.len(), 9);
                }
                TtsModelType::Base | TtsModelType::VoiceDesign => {
                    assert!(speakers.is_empty() && t.spk_is_dialect.is_empty());
                }
            }
            let want: BTreeMap<String, u32> = languages
                .into_iter()
                .map(|(name, id)| (name.to_string(), id))
                .collect();
            assert_eq!(t.codec_language_id, want, "{folder}");

            let encoder = &config.speaker_encoder_config;
            let expected_type = if folder.ends_with("Base") {
                assert_eq!(encoder.enc_dim, hidden);
                TtsModelType::Base
            } else {
                assert_eq!(*encoder, SpeakerEncoderConfig::default());
                if folder.ends_with("CustomVoice") {
                    TtsModelType::CustomVoice
                } else {
                    TtsModelType::VoiceDesign
                }
            };
            assert_eq!(config.tts_model_type, expected_type);
            assert_eq!((encoder.mel_dim, encoder.sample_rate), (128, 24000));
            assert_eq!(encoder.enc_channels, [512, 512, 512, 512, 1536]);
            assert_eq!(encoder.enc_kernel_sizes, [5, 3, 3, 3, 1]);
            assert_eq!(encoder.enc_dilations, [1, 2, 3, 4, 1]);
            assert_eq!(
                (
                    encoder.enc_attention_channels,
                    encoder.enc_res2net_scale,
                    encoder.enc_se_channels
                ),
                (128, 8, 128)
            );
        }
    }

    #[test]
    fn generation_config_is_the_published_one_and_missing_keys_take_the_wrapper_defaults() {
        let published = GenerationConfig {
            do_sample: true,
            top_k: 50,
            top_p: 1.0,
            temperature: 0.9,
            repetition_penalty: 1.05,
            subtalker_dosample: true,
            subtalker_top_k: 50,
            subtalker_top_p: 1.0,
            subtalker_temperature: 0.9,
            max_new_tokens: 8192,
        };
        for folder in FOLDERS {
            let file = data(folder).join("generation_config.json");
            assert_eq!(GenerationConfig::from_file(&file).unwrap(), published);
        }
        let empty: GenerationConfig = serde_json::from_str("{}").unwrap();
        assert_eq!(
            empty,
            GenerationConfig {
                max_new_tokens: 2048,
                ..published
            }
        );
    }

    #[test]
    fn speech_tokenizer_config_gives_the_spec_values() {
        let file = data("Qwen3-TTS-Tokenizer-12Hz/config.json");
        let config = SpeechTokenizerConfig::from_file(&file).unwrap();
        assert_eq!(
            (config.decode_upsample_rate, config.encode_downsample_rate),
            (1920, 1920)
        );
        assert_eq!(
            (config.input_sample_rate, config.output_sample_rate),
            (24000, 24000)
        );
        assert_eq!(config.encoder_valid_num_quantizers, 16);
        let d = &config.decoder_config;
        assert_eq!(
            (d.codebook_size, d.codebook_dim, d.latent_dim),
            (2048, 512, 1024)
        );
        assert_eq!((d.hidden_size, d.intermediate_size), (512, 1024));
        assert_eq!(
            (
                d.num_attention_heads,
                d.head_dim,
                d.num_key_value_heads,
                d.num_hidden_layers
            ),
            (16, 64, 16, 8)
        );
        assert_eq!(
            (d.sliding_window, d.rope_theta, d.rms_norm_eps),
            (72, 10000.0, 1e-5)
        );
        assert_eq!(d.layer_scale_initial_scale, 0.01);
        assert_eq!(
            (d.decoder_dim, d.num_quantizers, d.num_semantic_quantizers),
            (1536, 16, 1)
        );
        assert_eq!(
            (d.upsample_rates.as_slice(), d.upsampling_ratios.as_slice()),
            (&[8, 5, 4, 3][..], &[2, 2][..])
        );
        assert_eq!(
            (
                d.semantic_codebook_size,
                d.vector_quantization_hidden_dimension
            ),
            (4096, 512)
        );
        let e = &config.encoder_config;
        assert_eq!((e.hidden_size, e.num_filters, e.compress), (512, 64, 2));
        assert_eq!(e.upsampling_ratios, [8, 6, 5, 4]);
        assert_eq!(
            (e.kernel_size, e.last_kernel_size, e.residual_kernel_size),
            (7, 3, 3)
        );
        assert_eq!(
            (e.num_hidden_layers, e.num_attention_heads, e.head_dim),
            (8, 8, 64)
        );
        assert_eq!((e.sliding_window, e.num_quantizers), (250, 32));
        assert_eq!(
            (e.codebook_size, e.codebook_dim, e.frame_rate),
            (2048, 256, 12.5)
        );
        assert!(e.use_causal_conv);
        assert_eq!((e.pad_mode.as_str(), e.sampling_rate), ("constant", 24000));
        // Every model folder carries the same file.
        let text = std::fs::read_to_string(&file).unwrap();
        let err = SpeechTokenizerConfig::from_json(
            &text.replace("qwen3_tts_tokenizer_12hz", "x"),
            "c.json",
        );
        assert!(err.unwrap_err().to_string().contains("c.json: model_type"));
    }

    #[test]
    fn bad_configs_name_the_key() {
        let base = real_json("Qwen3-TTS-12Hz-0.6B-Base");
        let custom = real_json("Qwen3-TTS-12Hz-1.7B-CustomVoice");

        let mut json = base.clone();
        json["model_type"] = json!("qwen2");
        assert!(error(&json).contains("config.json: model_type"));
        let mut json = base.clone();
        json["tokenizer_type"] = json!("qwen3_tts_tokenizer_25hz");
        assert!(error(&json).contains("config.json: tokenizer_type"));
        let mut json = base.clone();
        json["tts_model_type"] = json!("singing");
        assert!(error(&json).contains("config.json: tts_model_type"));
        let mut json = base.clone();
        json["talker_config"]
            .as_object_mut()
            .unwrap()
            .remove("hidden_size");
        let err = error(&json);
        assert!(
            err.contains("talker_config") && err.contains("hidden_size"),
            "{err}"
        );
        let mut json = base.clone();
        json["talker_config"]["num_key_value_heads"] = json!(3);
        assert!(error(&json).contains("talker_config.num_key_value_heads: 3 does not divide 16"));
        let mut json = base.clone();
        json["talker_config"]["code_predictor_config"]["num_code_groups"] = json!(8);
        assert!(error(&json).contains("code_predictor_config.num_code_groups: 8"));
        let mut json = base.clone();
        json["speaker_encoder_config"]["enc_dim"] = json!(512);
        assert!(error(&json).contains("speaker_encoder_config.enc_dim: 512"));
        let mut json = base;
        json.as_object_mut()
            .unwrap()
            .remove("speaker_encoder_config");
        let config = Qwen3TtsConfig::from_json(&json.to_string(), "config.json").unwrap();
        assert_eq!(
            config.speaker_encoder_config,
            SpeakerEncoderConfig::default()
        );

        let mut json = custom.clone();
        json["talker_config"]["spk_is_dialect"]["eric"] = json!(true);
        let err = error(&json);
        assert!(
            err.contains("talker_config.spk_is_dialect") && err.contains("eric"),
            "{err}"
        );
        let mut json = custom;
        json["talker_config"]["spk_is_dialect"]["eric"] = json!("cantonese");
        let err = error(&json);
        assert!(
            err.contains("talker_config.spk_is_dialect.eric: \"cantonese\""),
            "{err}"
        );

        let err = Qwen3TtsConfig::from_file(&data("missing/config.json")).unwrap_err();
        assert!(err.to_string().contains("missing/config.json"));
        assert!(Qwen3TtsConfig::from_json("{", "config.json").is_err());
    }
}
