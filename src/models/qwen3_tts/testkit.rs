//! Qwen3-TTS-12Hz random checkpoints in the published folder layout (`make-test-model --preset
//! qwen3-tiny-*`), one per published folder. The folder holds the real `config.json`,
//! `generation_config.json` and `speech_tokenizer/config.json` with only widths and depths
//! shrunk (every key, token id, language, speaker and 12 Hz constant stays), bf16
//! `model.safetensors` and f32 `speech_tokenizer/model.safetensors` with every tensor name of
//! the official `state_dict` (shapes derived from the configs as the official classes do,
//! `shared/docs/qwen3-tts-shapes.md`), and the real text tokenizer files, whose ids the
//! configs refer to. The speech tokenizer is the same for every preset of one seed, as it is
//! in the published folders.

use super::codec_transformer::{gelu_mlp, layer_scales};
use super::config::{
    Qwen3TtsConfig, SpeechDecoderConfig, SpeechEncoderConfig, SpeechTokenizerConfig, TtsModelType,
};
use super::keys;
use crate::nn::decoder::{DecoderStyle, LayerKeys, FINAL_NORM};
use crate::nn::layers::{weight, AttentionDims};
use crate::testkit::endless::edit_rows;
use crate::testkit::{
    cached_folder, progress_bar, write_safetensors, Init, Spec, Stored, TestModel, NORM,
};
use anyhow::{bail, Context, Result};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};

/// The presets `make-test-model` writes, each also at the published sizes.
pub const TEST_MODELS: &[TestModel] = &[
    TestModel {
        name: "qwen3-tiny-base",
        about: "Qwen3-TTS-12Hz-0.6B-Base, tiny: voice cloning",
        write: |out, seed| make_test_model(out, Qwen3Preset::TinyBase, seed),
        published_size: Some(|out, seed| {
            make_published_size_model(out, Qwen3Preset::TinyBase, seed)
        }),
    },
    TestModel {
        name: "qwen3-tiny-base-1b7",
        about: "Qwen3-TTS-12Hz-1.7B-Base, tiny: a talker wider than its code predictor",
        write: |out, seed| make_test_model(out, Qwen3Preset::TinyBase1b7, seed),
        published_size: Some(|out, seed| {
            make_published_size_model(out, Qwen3Preset::TinyBase1b7, seed)
        }),
    },
    TestModel {
        name: "qwen3-tiny-custom-voice",
        about: "Qwen3-TTS-12Hz-0.6B-CustomVoice, tiny: the nine preset speakers",
        write: |out, seed| make_test_model(out, Qwen3Preset::TinyCustomVoice, seed),
        published_size: Some(|out, seed| {
            make_published_size_model(out, Qwen3Preset::TinyCustomVoice, seed)
        }),
    },
    TestModel {
        name: "qwen3-tiny-custom-voice-1b7",
        about: "Qwen3-TTS-12Hz-1.7B-CustomVoice, tiny: preset speakers steered by instructions",
        write: |out, seed| make_test_model(out, Qwen3Preset::TinyCustomVoice1b7, seed),
        published_size: Some(|out, seed| {
            make_published_size_model(out, Qwen3Preset::TinyCustomVoice1b7, seed)
        }),
    },
    TestModel {
        name: "qwen3-tiny-voice-design",
        about: "Qwen3-TTS-12Hz-1.7B-VoiceDesign, tiny: a voice described by an instruction",
        write: |out, seed| make_test_model(out, Qwen3Preset::TinyVoiceDesign, seed),
        published_size: Some(|out, seed| {
            make_published_size_model(out, Qwen3Preset::TinyVoiceDesign, seed)
        }),
    },
];

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Qwen3Preset {
    /// Qwen3-TTS-12Hz-0.6B-Base: voice cloning (speaker encoder, speech-tokenizer encoder);
    /// the code predictor as wide as the talker (no input projection).
    #[value(name = "qwen3-tiny-base")]
    TinyBase,
    /// Qwen3-TTS-12Hz-1.7B-Base: as `qwen3-tiny-base`, with a talker wider than the code
    /// predictor (`small_to_mtp_projection`).
    #[value(name = "qwen3-tiny-base-1b7")]
    TinyBase1b7,
    /// Qwen3-TTS-12Hz-0.6B-CustomVoice: the nine preset speakers; instructions are dropped.
    #[value(name = "qwen3-tiny-custom-voice")]
    TinyCustomVoice,
    /// Qwen3-TTS-12Hz-1.7B-CustomVoice: preset speakers steered by instructions, with the
    /// code predictor's input projection.
    #[value(name = "qwen3-tiny-custom-voice-1b7")]
    TinyCustomVoice1b7,
    /// Qwen3-TTS-12Hz-1.7B-VoiceDesign: a voice described by an instruction, with the code
    /// predictor's input projection.
    #[value(name = "qwen3-tiny-voice-design")]
    TinyVoiceDesign,
}

/// The small files of a published folder.
struct Published {
    config: &'static str,
    generation_config: &'static str,
    configuration: &'static str,
    preprocessor_config: &'static str,
}

macro_rules! published {
    ($folder:literal) => {
        Published {
            config: include_str!(concat!(
                "../../../tests/data/qwen3_tts/",
                $folder,
                "/config.json"
            )),
            generation_config: include_str!(concat!(
                "../../../tests/data/qwen3_tts/",
                $folder,
                "/generation_config.json"
            )),
            configuration: include_str!(concat!(
                "../../../tests/data/qwen3_tts/",
                $folder,
                "/configuration.json"
            )),
            preprocessor_config: include_str!(concat!(
                "../../../tests/data/qwen3_tts/",
                $folder,
                "/preprocessor_config.json"
            )),
        }
    };
}

/// The published speech tokenizer's `config.json` (`speech_tokenizer/` of every folder).
const SPEECH_TOKENIZER_CONFIG: &str =
    include_str!("../../../tests/data/qwen3_tts/Qwen3-TTS-Tokenizer-12Hz/config.json");

/// Its other small files, copied as they are.
const SPEECH_TOKENIZER_FILES: [(&str, &str); 2] = [
    (
        "configuration.json",
        include_str!("../../../tests/data/qwen3_tts/Qwen3-TTS-Tokenizer-12Hz/configuration.json"),
    ),
    (
        "preprocessor_config.json",
        include_str!(
            "../../../tests/data/qwen3_tts/Qwen3-TTS-Tokenizer-12Hz/preprocessor_config.json"
        ),
    ),
];

/// The real text tokenizer: the configs name its ids, so it keeps its full vocabulary.
const TOKENIZER_FILES: [(&str, &[u8]); 3] = [
    (
        "vocab.json",
        include_bytes!("../../../tests/data/qwen3_tts/tokenizer/vocab.json"),
    ),
    (
        "merges.txt",
        include_bytes!("../../../tests/data/qwen3_tts/tokenizer/merges.txt"),
    ),
    (
        "tokenizer_config.json",
        include_bytes!("../../../tests/data/qwen3_tts/tokenizer/tokenizer_config.json"),
    ),
];

/// Widths of the tiny talker and code predictor. The real 1.7B talker is wider than its code
/// predictor (2048 vs 1024); the real 0.6B has both 1024 wide.
struct TalkerWidths {
    talker: usize,
    predictor: usize,
}

const SMALL: TalkerWidths = TalkerWidths {
    talker: 16,
    predictor: 16,
};
const LARGE: TalkerWidths = TalkerWidths {
    talker: 24,
    predictor: 16,
};

/// Gain of `codec_head`'s EOS row: its logit then tops the 2048 codes now and then, so greedy
/// decoding neither stops at once nor runs forever.
const EOS_ROW_GAIN: f32 = 2.0;
/// Gain of the last conv of the decoder's residual units: at unit gain the twelve units grow
/// the signal about 80-fold.
const RESIDUAL_GAIN: f32 = 0.3;
/// Gain of the decoder's last conv, keeping the waveform (std about 0.3) mostly inside the
/// final clamp to ±1.
const WAVEFORM_GAIN: f32 = 0.1;

const BIAS: Init = Init::Around(0.0, 0.1);
const EMBEDDING: Init = Init::Around(0.0, 1.0);
/// SnakeBeta's log-scale alpha and beta.
const SNAKE: Init = Init::Around(0.0, 0.1);
/// LayerScale and ConvNeXt gamma.
const SCALE: Init = Init::Around(0.1, 0.05);
const CLUSTER_USAGE: Init = Init::Around(1.0, 0.5);

impl Qwen3Preset {
    fn published(self) -> Published {
        match self {
            Qwen3Preset::TinyBase => published!("Qwen3-TTS-12Hz-0.6B-Base"),
            Qwen3Preset::TinyBase1b7 => published!("Qwen3-TTS-12Hz-1.7B-Base"),
            Qwen3Preset::TinyCustomVoice => published!("Qwen3-TTS-12Hz-0.6B-CustomVoice"),
            Qwen3Preset::TinyCustomVoice1b7 => published!("Qwen3-TTS-12Hz-1.7B-CustomVoice"),
            Qwen3Preset::TinyVoiceDesign => published!("Qwen3-TTS-12Hz-1.7B-VoiceDesign"),
        }
    }

    fn widths(self) -> TalkerWidths {
        match self {
            Qwen3Preset::TinyBase | Qwen3Preset::TinyCustomVoice => SMALL,
            _ => LARGE,
        }
    }

    /// The name used on the command line (`qwen3-tiny-base`, ...).
    pub fn name(self) -> String {
        clap::ValueEnum::to_possible_value(&self)
            .expect("no skipped variants")
            .get_name()
            .to_string()
    }
}

/// Sets the existing key at `pointer` (a JSON pointer): shrinking never adds a key by mistake.
fn set(value: &mut Value, pointer: &str, new: Value) -> Result<()> {
    let slot = value
        .pointer_mut(pointer)
        .with_context(|| format!("the published config has no {pointer}"))?;
    *slot = new;
    Ok(())
}

/// The published `config.json` with the talker, code predictor and speaker encoder shrunk.
fn tiny_config(preset: Qwen3Preset) -> Result<Value> {
    let mut config: Value = serde_json::from_str(preset.published().config)?;
    let w = preset.widths();
    for (key, value) in [
        ("hidden_size", json!(w.talker)),
        ("intermediate_size", json!(3 * w.talker)),
        ("num_hidden_layers", json!(2)),
        ("num_attention_heads", json!(4)),
        ("num_key_value_heads", json!(2)),
        ("head_dim", json!(8)),
        ("text_hidden_size", json!(8)),
        // Sums to head_dim / 2, as [24, 20, 20] does for 128.
        ("rope_scaling/mrope_section", json!([2, 1, 1])),
    ] {
        set(&mut config, &format!("/talker_config/{key}"), value)?;
    }
    for (key, value) in [
        ("hidden_size", json!(w.predictor)),
        ("intermediate_size", json!(3 * w.predictor)),
        ("num_hidden_layers", json!(2)),
        ("num_attention_heads", json!(4)),
        ("num_key_value_heads", json!(2)),
        ("head_dim", json!(8)),
        ("layer_types", json!(["full_attention", "full_attention"])),
    ] {
        set(
            &mut config,
            &format!("/talker_config/code_predictor_config/{key}"),
            value,
        )?;
    }
    if config["tts_model_type"] == "base" {
        set(
            &mut config,
            "/speaker_encoder_config/enc_dim",
            json!(w.talker),
        )?;
        // The published files leave these at the class defaults ([512, 512, 512, 512, 1536],
        // 128, 128); the tiny model needs them written out.
        let encoder = config["speaker_encoder_config"]
            .as_object_mut()
            .context("speaker_encoder_config is not an object")?;
        encoder.insert("enc_channels".into(), json!([32, 32, 32, 32, 96]));
        encoder.insert("enc_attention_channels".into(), json!(16));
        encoder.insert("enc_se_channels".into(), json!(16));
    }
    Ok(config)
}

/// The published `speech_tokenizer/config.json` with the decoder and the Mimi encoder shrunk;
/// codebook sizes, quantizer counts, rates, windows and RoPE constants stay.
fn tiny_speech_tokenizer_config() -> Result<Value> {
    let mut config: Value = serde_json::from_str(SPEECH_TOKENIZER_CONFIG)?;
    for (key, value) in [
        ("codebook_dim", json!(8)),
        ("latent_dim", json!(32)),
        ("hidden_size", json!(16)),
        ("intermediate_size", json!(32)),
        ("num_attention_heads", json!(4)),
        ("num_key_value_heads", json!(4)),
        ("head_dim", json!(8)),
        ("num_hidden_layers", json!(2)),
        ("decoder_dim", json!(64)),
    ] {
        set(&mut config, &format!("/decoder_config/{key}"), value)?;
    }
    for (key, value) in [
        ("hidden_size", json!(32)),
        ("intermediate_size", json!(64)),
        ("num_filters", json!(4)),
        ("num_attention_heads", json!(4)),
        ("num_key_value_heads", json!(4)),
        ("head_dim", json!(8)),
        ("num_hidden_layers", json!(2)),
        ("codebook_dim", json!(4)),
        ("vector_quantization_hidden_dimension", json!(4)),
        ("upsample_groups", json!(32)),
    ] {
        set(&mut config, &format!("/encoder_config/{key}"), value)?;
    }
    Ok(config)
}

/// Tensor specs in the order they are added.
#[derive(Default)]
struct Tensors(Vec<Spec>);

impl Tensors {
    fn add(&mut self, key: String, shape: &[usize], init: Init) {
        self.0.push(Spec {
            key,
            shape: shape.to_vec(),
            init,
        });
    }

    /// `{prefix}.weight` `[out, in]`, unit-variance outputs.
    fn linear(&mut self, prefix: &str, out: usize, input: usize) {
        self.add(
            format!("{prefix}.weight"),
            &[out, input],
            Init::Linear(input),
        );
    }

    fn linear_with_bias(&mut self, prefix: &str, out: usize, input: usize) {
        self.linear(prefix, out, input);
        self.add(format!("{prefix}.bias"), &[out], BIAS);
    }

    /// A Conv1d `{prefix}.weight` `[out, in, kernel]`.
    fn conv(&mut self, prefix: &str, out: usize, input: usize, kernel: usize) {
        self.add(
            format!("{prefix}.weight"),
            &[out, input, kernel],
            Init::Linear(input * kernel),
        );
    }

    fn conv_with_bias(&mut self, prefix: &str, out: usize, input: usize, kernel: usize) {
        self.conv(prefix, out, input, kernel);
        self.add(format!("{prefix}.bias"), &[out], BIAS);
    }

    /// A ConvTranspose1d (`[in, out, kernel]`; each output sample sums `in * kernel / stride`
    /// inputs) with its bias.
    fn transposed_conv(
        &mut self,
        prefix: &str,
        input: usize,
        out: usize,
        kernel: usize,
        stride: usize,
    ) {
        self.add(
            format!("{prefix}.weight"),
            &[input, out, kernel],
            Init::Linear(input * kernel / stride),
        );
        self.add(format!("{prefix}.bias"), &[out], BIAS);
    }

    fn norm(&mut self, key: String, n: usize) {
        self.add(key, &[n], NORM);
    }

    fn layer_norm(&mut self, prefix: &str, n: usize) {
        self.norm(format!("{prefix}.weight"), n);
        self.add(format!("{prefix}.bias"), &[n], BIAS);
    }

    fn snake(&mut self, prefix: &str, n: usize) {
        self.add(format!("{prefix}.alpha"), &[n], SNAKE);
        self.add(format!("{prefix}.beta"), &[n], SNAKE);
    }
}

/// Attention and MLP widths of one transformer stack.
struct Stack {
    hidden: usize,
    intermediate: usize,
    heads: usize,
    kv_heads: usize,
    head_dim: usize,
}

impl Stack {
    fn attention(&self) -> AttentionDims {
        AttentionDims {
            dim: self.hidden,
            n_heads: self.heads,
            n_kv_heads: self.kv_heads,
            head_dim: self.head_dim,
        }
    }

    fn attention_weights(&self, t: &mut Tensors, keys: &LayerKeys) {
        let weights = keys.attention.weights(&self.attention());
        t.0.extend(weights.map(Spec::matrix));
    }

    fn swiglu(&self, t: &mut Tensors, keys: &LayerKeys) {
        let weights = keys.feed_forward.weights(self.hidden, self.intermediate);
        t.0.extend(weights.map(Spec::matrix));
    }

    fn norms(&self, t: &mut Tensors, keys: &LayerKeys) {
        t.norm(weight(&keys.attention_norm), self.hidden);
        t.norm(weight(&keys.ffn_norm), self.hidden);
    }

    /// A Qwen3 decoder layer (talker, code predictor): q/k norms, SwiGLU, two RMSNorms.
    fn qwen3_layer(&self, t: &mut Tensors, keys: &LayerKeys) {
        self.attention_weights(t, keys);
        t.norm(weight(&keys.attention.q_norm), self.head_dim);
        t.norm(weight(&keys.attention.k_norm), self.head_dim);
        self.swiglu(t, keys);
        self.norms(t, keys);
    }

    /// A speech-decoder layer: no q/k norms, LayerScale after attention and MLP.
    fn decoder_layer(&self, t: &mut Tensors, p: &str) {
        let keys = LayerKeys::hugging_face(p);
        self.attention_weights(t, &keys);
        self.swiglu(t, &keys);
        self.norms(t, &keys);
        self.layer_scales(t, p);
    }

    /// A Mimi encoder layer: GELU MLP without biases, LayerNorms with biases, LayerScale.
    fn mimi_layer(&self, t: &mut Tensors, p: &str) {
        let keys = LayerKeys::hugging_face(p);
        self.attention_weights(t, &keys);
        let [fc1, fc2] = gelu_mlp(p);
        t.linear(&fc1, self.intermediate, self.hidden);
        t.linear(&fc2, self.hidden, self.intermediate);
        t.layer_norm(&keys.attention_norm, self.hidden);
        t.layer_norm(&keys.ffn_norm, self.hidden);
        self.layer_scales(t, p);
    }

    fn layer_scales(&self, t: &mut Tensors, p: &str) {
        for key in layer_scales(p) {
            t.add(key, &[self.hidden], SCALE);
        }
    }
}

/// Every tensor of `model.safetensors` (`Qwen3TTSForConditionalGeneration.state_dict()`).
fn model_specs(cfg: &Qwen3TtsConfig) -> Vec<Spec> {
    let mut t = Tensors::default();
    let talker = &cfg.talker_config;
    let stack = Stack {
        hidden: talker.hidden_size,
        intermediate: talker.intermediate_size,
        heads: talker.num_attention_heads,
        kv_heads: talker.num_key_value_heads,
        head_dim: talker.head_dim,
    };
    for i in 0..talker.num_hidden_layers {
        stack.qwen3_layer(&mut t, &DecoderStyle::Qwen3.layer_keys("talker.model.", i));
    }
    let h = talker.hidden_size;
    t.norm(format!("talker.model.{FINAL_NORM}"), h);
    t.add(
        "talker.model.codec_embedding.weight".into(),
        &[talker.vocab_size, h],
        EMBEDDING,
    );
    t.add(
        "talker.model.text_embedding.weight".into(),
        &[talker.text_vocab_size, talker.text_hidden_size],
        EMBEDDING,
    );
    let text = talker.text_hidden_size;
    t.linear_with_bias("talker.text_projection.linear_fc1", text, text);
    t.linear_with_bias("talker.text_projection.linear_fc2", h, text);
    t.add(
        format!("{}.{}", keys::TALKER, keys::CODEC_HEAD),
        &[talker.vocab_size, h],
        Init::LoudRow {
            fan_in: h,
            cols: h,
            row: talker.codec_eos_token_id as usize,
            gain: EOS_ROW_GAIN,
        },
    );

    let cp = &talker.code_predictor_config;
    let stack = Stack {
        hidden: cp.hidden_size,
        intermediate: cp.intermediate_size,
        heads: cp.num_attention_heads,
        kv_heads: cp.num_key_value_heads,
        head_dim: cp.head_dim,
    };
    let p = keys::CODE_PREDICTOR;
    for i in 0..cp.num_hidden_layers {
        let keys = DecoderStyle::Qwen3.layer_keys(&format!("{p}.model."), i);
        stack.qwen3_layer(&mut t, &keys);
    }
    t.norm(format!("{p}.model.{FINAL_NORM}"), cp.hidden_size);
    // Codebooks 1..15 are embedded at the talker's width, then projected.
    for j in 0..cp.num_code_groups - 1 {
        t.add(
            format!("{p}.model.codec_embedding.{j}.weight"),
            &[cp.vocab_size, h],
            EMBEDDING,
        );
    }
    for j in 0..cp.num_code_groups - 1 {
        t.linear(&format!("{p}.lm_head.{j}"), cp.vocab_size, cp.hidden_size);
    }
    if cp.hidden_size != h {
        t.linear_with_bias(&format!("{p}.small_to_mtp_projection"), cp.hidden_size, h);
    }

    if cfg.tts_model_type == TtsModelType::Base {
        speaker_encoder_specs(cfg, &mut t);
    }
    t.0
}

/// The ECAPA-TDNN x-vector encoder (Base only). Every conv has a bias.
fn speaker_encoder_specs(cfg: &Qwen3TtsConfig, t: &mut Tensors) {
    let c = &cfg.speaker_encoder_config;
    let channels = &c.enc_channels;
    let kernels = &c.enc_kernel_sizes;
    let p = keys::SPEAKER_ENCODER;
    t.conv_with_bias(
        &format!("{p}.blocks.0.conv"),
        channels[0],
        c.mel_dim,
        kernels[0],
    );
    for i in 1..channels.len() - 1 {
        let b = format!("{p}.blocks.{i}");
        let width = channels[i];
        t.conv_with_bias(&format!("{b}.tdnn1.conv"), width, channels[i - 1], 1);
        let split = width / c.enc_res2net_scale;
        for j in 0..c.enc_res2net_scale - 1 {
            t.conv_with_bias(
                &format!("{b}.res2net_block.blocks.{j}.conv"),
                split,
                split,
                kernels[i],
            );
        }
        t.conv_with_bias(&format!("{b}.tdnn2.conv"), width, width, 1);
        t.conv_with_bias(&format!("{b}.se_block.conv1"), c.enc_se_channels, width, 1);
        t.conv_with_bias(&format!("{b}.se_block.conv2"), width, c.enc_se_channels, 1);
    }
    let last = *channels.last().expect("the config check wants channels");
    let last_kernel = *kernels.last().expect("as many kernels as channels");
    t.conv_with_bias(&format!("{p}.mfa.conv"), last, last, last_kernel);
    t.conv_with_bias(
        &format!("{p}.asp.tdnn.conv"),
        c.enc_attention_channels,
        3 * last,
        1,
    );
    t.conv_with_bias(&format!("{p}.asp.conv"), last, c.enc_attention_channels, 1);
    t.conv_with_bias(&format!("{p}.fc"), c.enc_dim, 2 * last, 1);
}

/// Every tensor of `speech_tokenizer/model.safetensors` (`Qwen3TTSTokenizerV2Model`).
fn speech_tokenizer_specs(cfg: &SpeechTokenizerConfig) -> Vec<Spec> {
    let mut t = Tensors::default();
    mimi_encoder_specs(&cfg.encoder_config, &mut t);
    speech_decoder_specs(&cfg.decoder_config, &mut t);
    t.0
}

/// transformers' `MimiModel` without its decoder half (the official code drops `upsample`,
/// `decoder_transformer` and `decoder`).
fn mimi_encoder_specs(c: &SpeechEncoderConfig, t: &mut Tensors) {
    let p = "encoder.encoder.layers";
    t.conv_with_bias(
        &format!("{p}.0.conv"),
        c.num_filters,
        c.audio_channels,
        c.kernel_size,
    );
    // Module indices count the ELUs between the convs.
    let mut index = 1;
    let mut width = c.num_filters;
    for &ratio in c.upsampling_ratios.iter().rev() {
        for _ in 0..c.num_residual_layers {
            let block = format!("{p}.{index}");
            let hidden = width / c.compress;
            t.conv_with_bias(
                &format!("{block}.block.1.conv"),
                hidden,
                width,
                c.residual_kernel_size,
            );
            t.conv_with_bias(&format!("{block}.block.3.conv"), width, hidden, 1);
            if c.use_conv_shortcut {
                t.conv_with_bias(&format!("{block}.shortcut.conv"), width, width, 1);
            }
            index += 1;
        }
        index += 1;
        t.conv_with_bias(&format!("{p}.{index}.conv"), 2 * width, width, 2 * ratio);
        index += 1;
        width *= 2;
    }
    index += 1;
    t.conv_with_bias(
        &format!("{p}.{index}.conv"),
        c.hidden_size,
        width,
        c.last_kernel_size,
    );

    let stack = Stack {
        hidden: c.hidden_size,
        intermediate: c.intermediate_size,
        heads: c.num_attention_heads,
        kv_heads: c.num_key_value_heads,
        head_dim: c.head_dim,
    };
    for i in 0..c.num_hidden_layers {
        stack.mimi_layer(t, &format!("encoder.encoder_transformer.layers.{i}"));
    }

    // From the SEANet rate (25 Hz) down to `_frame_rate` (12.5 Hz).
    let hop: usize = c.upsampling_ratios.iter().product();
    let seanet_rate = (c.sampling_rate as f64 / hop as f64).ceil();
    if seanet_rate != c.frame_rate {
        let kernel = 2 * (seanet_rate / c.frame_rate) as usize;
        t.conv(
            "encoder.downsample.conv",
            c.hidden_size,
            c.hidden_size,
            kernel,
        );
    }

    let semantic = c.num_semantic_quantizers;
    for (name, count) in [
        ("semantic_residual_vector_quantizer", semantic),
        (
            "acoustic_residual_vector_quantizer",
            c.num_quantizers - semantic,
        ),
    ] {
        let q = format!("encoder.quantizer.{name}");
        for l in 0..count {
            let book = format!("{q}.layers.{l}.codebook");
            t.add(format!("{book}.initialized"), &[1], Init::Around(1.0, 0.0));
            t.add(
                format!("{book}.cluster_usage"),
                &[c.codebook_size],
                CLUSTER_USAGE,
            );
            t.add(
                format!("{book}.embed_sum"),
                &[c.codebook_size, c.codebook_dim],
                EMBEDDING,
            );
        }
        let projected = c.vector_quantization_hidden_dimension;
        if projected != c.hidden_size {
            t.conv(&format!("{q}.input_proj"), projected, c.hidden_size, 1);
            t.conv(&format!("{q}.output_proj"), c.hidden_size, projected, 1);
        }
    }
}

/// The codes-to-waveform decoder.
fn speech_decoder_specs(c: &SpeechDecoderConfig, t: &mut Tensors) {
    let stack = Stack {
        hidden: c.hidden_size,
        intermediate: c.intermediate_size,
        heads: c.num_attention_heads,
        kv_heads: c.num_key_value_heads,
        head_dim: c.head_dim,
    };
    let p = "decoder.pre_transformer";
    for i in 0..c.num_hidden_layers {
        stack.decoder_layer(t, &format!("{p}.layers.{i}"));
    }
    t.norm(format!("{p}.norm.weight"), c.hidden_size);
    t.linear_with_bias(&format!("{p}.input_proj"), c.hidden_size, c.latent_dim);
    t.linear_with_bias(&format!("{p}.output_proj"), c.latent_dim, c.hidden_size);

    // Split RVQ: one semantic codebook (fixed in the official code), the rest acoustic; each
    // half of `codebook_dim` wide. `input_proj` is only used to encode, but is stored.
    let half = c.codebook_dim / 2;
    for (name, count) in [("rvq_first", 1), ("rvq_rest", c.num_quantizers - 1)] {
        let q = format!("decoder.quantizer.{name}");
        t.conv(&format!("{q}.input_proj"), half, c.codebook_dim, 1);
        t.conv(&format!("{q}.output_proj"), c.codebook_dim, half, 1);
        for l in 0..count {
            let book = format!("{q}.vq.layers.{l}._codebook");
            t.add(
                format!("{book}.cluster_usage"),
                &[c.codebook_size],
                CLUSTER_USAGE,
            );
            t.add(
                format!("{book}.embedding_sum"),
                &[c.codebook_size, half],
                EMBEDDING,
            );
        }
    }
    t.conv_with_bias("decoder.pre_conv.conv", c.latent_dim, c.codebook_dim, 3);

    let latent = c.latent_dim;
    for (i, &factor) in c.upsampling_ratios.iter().enumerate() {
        let u = format!("decoder.upsample.{i}");
        t.transposed_conv(&format!("{u}.0.conv"), latent, latent, factor, factor);
        t.add(format!("{u}.1.gamma"), &[latent], SCALE);
        t.add(
            format!("{u}.1.dwconv.conv.weight"),
            &[latent, 1, 7],
            Init::Linear(7),
        );
        t.add(format!("{u}.1.dwconv.conv.bias"), &[latent], BIAS);
        t.layer_norm(&format!("{u}.1.norm"), latent);
        t.linear_with_bias(&format!("{u}.1.pwconv1"), 4 * latent, latent);
        t.linear_with_bias(&format!("{u}.1.pwconv2"), latent, 4 * latent);
    }

    let d = "decoder.decoder";
    t.conv_with_bias(&format!("{d}.0.conv"), c.decoder_dim, latent, 7);
    let mut width = c.decoder_dim;
    for (i, &rate) in c.upsample_rates.iter().enumerate() {
        let block = format!("{d}.{}.block", i + 1);
        let out = width / 2;
        t.snake(&format!("{block}.0"), width);
        t.transposed_conv(&format!("{block}.1.conv"), width, out, 2 * rate, rate);
        // Residual units with dilations 1, 3, 9.
        for unit in 2..5 {
            let r = format!("{block}.{unit}");
            t.snake(&format!("{r}.act1"), out);
            t.conv_with_bias(&format!("{r}.conv1.conv"), out, out, 7);
            t.snake(&format!("{r}.act2"), out);
            t.add(
                format!("{r}.conv2.conv.weight"),
                &[out, out, 1],
                Init::Gain(out, RESIDUAL_GAIN),
            );
            t.add(format!("{r}.conv2.conv.bias"), &[out], BIAS);
        }
        width = out;
    }
    let n = c.upsample_rates.len();
    t.snake(&format!("{d}.{}", n + 1), width);
    t.add(
        format!("{d}.{}.conv.weight", n + 2),
        &[1, width, 7],
        Init::Gain(width * 7, WAVEFORM_GAIN),
    );
    t.add(
        format!("{d}.{}.conv.bias", n + 2),
        &[1],
        Init::Around(0.0, 0.01),
    );
}

fn write_json(path: &Path, value: &Value) -> Result<()> {
    std::fs::write(path, serde_json::to_string_pretty(value)? + "\n")
        .with_context(|| format!("writing {}", path.display()))
}

fn write(path: &Path, bytes: &[u8]) -> Result<()> {
    std::fs::write(path, bytes).with_context(|| format!("writing {}", path.display()))
}

/// Writes a complete random Qwen3-TTS folder to `out`; `model.safetensors` comes last.
pub fn make_test_model(out: &Path, preset: Qwen3Preset, seed: u64) -> Result<()> {
    make_model(out, preset, seed, false)
}

/// The same folder at the published sizes (the preset picks which published folder), for
/// benchmarks: 0.9 G values for the 0.6B, 1.9 G for the 1.7B, plus 0.17 G for the speech
/// tokenizer, shown as they are written.
pub fn make_published_size_model(out: &Path, preset: Qwen3Preset, seed: u64) -> Result<()> {
    make_model(out, preset, seed, true)
}

fn make_model(out: &Path, preset: Qwen3Preset, seed: u64, published_size: bool) -> Result<()> {
    let speech_dir = out.join("speech_tokenizer");
    std::fs::create_dir_all(&speech_dir)
        .with_context(|| format!("creating {}", speech_dir.display()))?;
    let published = preset.published();

    let (config, speech_config) = if published_size {
        (
            serde_json::from_str(published.config)?,
            serde_json::from_str(SPEECH_TOKENIZER_CONFIG)?,
        )
    } else {
        (tiny_config(preset)?, tiny_speech_tokenizer_config()?)
    };
    let parsed = Qwen3TtsConfig::from_json(&config.to_string(), "config.json")?;
    let speech_parsed = SpeechTokenizerConfig::from_json(
        &speech_config.to_string(),
        "speech_tokenizer/config.json",
    )?;
    if speech_parsed.decoder_config.codebook_dim % 2 != 0 {
        bail!("the split RVQ needs an even decoder codebook_dim");
    }

    write_json(&out.join("config.json"), &config)?;
    write(
        &out.join("generation_config.json"),
        published.generation_config.as_bytes(),
    )?;
    write(
        &out.join("configuration.json"),
        published.configuration.as_bytes(),
    )?;
    write(
        &out.join("preprocessor_config.json"),
        published.preprocessor_config.as_bytes(),
    )?;
    for (name, bytes) in TOKENIZER_FILES {
        write(&out.join(name), bytes)?;
    }
    write_json(&speech_dir.join("config.json"), &speech_config)?;
    for (name, text) in SPEECH_TOKENIZER_FILES {
        write(&speech_dir.join(name), text.as_bytes())?;
    }

    let progress = progress_bar(published_size);
    progress.set_message("speech_tokenizer/model.safetensors");
    write_safetensors(
        &speech_dir.join("model.safetensors"),
        &speech_tokenizer_specs(&speech_parsed),
        seed,
        Stored::F32,
        &progress,
    )?;
    progress.set_message("model.safetensors");
    write_safetensors(
        &out.join("model.safetensors"),
        &model_specs(&parsed),
        seed,
        Stored::Bf16,
        &progress,
    )?;
    progress.finish_and_clear();
    Ok(())
}

/// A random checkpoint under `target/test-models/<generator>/<preset>-<seed>`, made on first use.
pub fn cached_test_model(preset: Qwen3Preset, seed: u64) -> Result<PathBuf> {
    cached_folder(&preset.name(), seed, "model.safetensors", |dir| {
        make_test_model(dir, preset, seed)
    })
}

/// [`cached_test_model`]'s checkpoint, but one whose talker never picks EOS
/// ([`never_end_codec`]): greedy requests run to their frame limit on every CPU.
pub fn cached_endless_test_model(preset: Qwen3Preset, seed: u64) -> Result<PathBuf> {
    let name = format!("{}-endless", preset.name());
    cached_folder(&name, seed, "model.safetensors", |dir| {
        make_test_model(dir, preset, seed)?;
        let text = std::fs::read_to_string(dir.join("config.json"))?;
        let talker = Qwen3TtsConfig::from_json(&text, "config.json")?.talker_config;
        never_end_codec(
            &dir.join("model.safetensors"),
            talker.codec_eos_token_id as usize,
            talker.code_predictor_config.vocab_size,
        )
    })
}

/// The talker's EOS row zero and the 2048 codes in opposite pairs
/// ([`crate::testkit::endless`]), so that at most half the codes have a logit below EOS's:
/// greedy never picks it, nor does top-k sampling with k up to 1024.
pub fn never_end_codec(weights: &Path, eos: usize, codes: usize) -> Result<()> {
    let head = format!("{}.{}", keys::TALKER, keys::CODEC_HEAD);
    edit_rows(weights, &head, |head| {
        head.zero(eos);
        head.mirror(0..codes);
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::models::qwen3_tts::config::GenerationConfig;
    use clap::ValueEnum;

    fn real(folder: &str) -> String {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/data/qwen3_tts")
            .join(folder)
            .join("config.json");
        std::fs::read_to_string(path).unwrap()
    }

    fn params(specs: &[Spec]) -> usize {
        specs
            .iter()
            .map(|s| s.shape.iter().product::<usize>())
            .sum()
    }

    /// At the published sizes the specs give the official `state_dict`'s tensor count and
    /// parameter total (shared/docs/qwen3-tts-shapes.md).
    #[test]
    fn published_configs_give_the_published_tensor_counts_and_sizes() {
        for (folder, tensors, total) in [
            ("Qwen3-TTS-12Hz-0.6B-Base", 478, 914_643_008),
            ("Qwen3-TTS-12Hz-1.7B-Base", 480, 1_928_677_440),
            ("Qwen3-TTS-12Hz-1.7B-CustomVoice", 404, 1_916_676_352),
        ] {
            let cfg = Qwen3TtsConfig::from_json(&real(folder), folder).unwrap();
            let specs = model_specs(&cfg);
            assert_eq!((specs.len(), params(&specs)), (tensors, total), "{folder}");
        }
        let cfg = SpeechTokenizerConfig::from_json(&real("Qwen3-TTS-Tokenizer-12Hz"), "tokenizer")
            .unwrap();
        let specs = speech_tokenizer_specs(&cfg);
        assert_eq!((specs.len(), params(&specs)), (496, 170_557_441));
        let find = |k: &str| specs.iter().find(|s| s.key == k).map(|s| s.shape.clone());
        assert_eq!(
            find("encoder.encoder.layers.14.conv.weight"),
            Some(vec![512, 1024, 3])
        );
        assert_eq!(
            find("encoder.downsample.conv.weight"),
            Some(vec![512, 512, 4])
        );
        assert_eq!(
            find("decoder.decoder.1.block.1.conv.weight"),
            Some(vec![1536, 768, 16])
        );
    }

    /// Every preset writes a folder the project's config structs accept, with the published
    /// ids and constants, deterministically to the byte.
    #[test]
    fn presets_load_in_the_config_structs_and_are_deterministic() {
        let tmp = tempfile::tempdir().unwrap();
        for &preset in Qwen3Preset::value_variants() {
            let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
            make_test_model(&a, preset, 3).unwrap();
            make_test_model(&b, preset, 3).unwrap();
            let files = [
                "config.json",
                "generation_config.json",
                "configuration.json",
                "preprocessor_config.json",
                "vocab.json",
                "merges.txt",
                "tokenizer_config.json",
                "model.safetensors",
                "speech_tokenizer/config.json",
                "speech_tokenizer/configuration.json",
                "speech_tokenizer/preprocessor_config.json",
                "speech_tokenizer/model.safetensors",
            ];
            for file in files {
                let read = |dir: &Path| std::fs::read(dir.join(file)).unwrap();
                assert!(read(&a) == read(&b), "{} {file}", preset.name());
            }
            let size = std::fs::metadata(a.join("model.safetensors"))
                .unwrap()
                .len()
                + std::fs::metadata(a.join("speech_tokenizer/model.safetensors"))
                    .unwrap()
                    .len();
            assert!(size < 9_000_000, "{} weighs {size} bytes", preset.name());

            let cfg = Qwen3TtsConfig::from_file(&a.join("config.json")).unwrap();
            let published = Qwen3TtsConfig::from_json(preset.published().config, "real").unwrap();
            let (tiny, real) = (&cfg.talker_config, &published.talker_config);
            assert_eq!(cfg.tts_model_type, published.tts_model_type);
            assert_eq!(cfg.tts_model_size, published.tts_model_size);
            assert_eq!(tiny.codec_language_id, real.codec_language_id);
            assert_eq!(tiny.spk_id, real.spk_id);
            assert_eq!(tiny.spk_is_dialect, real.spk_is_dialect);
            assert_eq!(
                (tiny.vocab_size, tiny.text_vocab_size, tiny.num_code_groups),
                (3072, 151_936, 16)
            );
            assert_eq!(tiny.codec_eos_token_id, 2150);
            let projected = tiny.hidden_size != tiny.code_predictor_config.hidden_size;
            assert_eq!(projected, cfg.tts_model_size == "1b7", "{}", preset.name());
            assert_eq!(
                GenerationConfig::from_file(&a.join("generation_config.json")).unwrap(),
                GenerationConfig::from_file(
                    &Path::new(env!("CARGO_MANIFEST_DIR")).join(
                        "tests/data/qwen3_tts/Qwen3-TTS-12Hz-0.6B-Base/generation_config.json"
                    )
                )
                .unwrap()
            );
            let speech =
                SpeechTokenizerConfig::from_file(&a.join("speech_tokenizer/config.json")).unwrap();
            let d = &speech.decoder_config;
            assert_eq!(
                (d.codebook_size, d.num_quantizers, d.sliding_window),
                (2048, 16, 72)
            );
            assert_eq!(d.upsample_rates, [8, 5, 4, 3]);
            assert_eq!(speech.decode_upsample_rate, 1920);
            assert_eq!(speech.encoder_config.num_quantizers, 32);
        }
    }

    #[test]
    fn the_speech_tokenizer_is_shared_by_every_preset_of_a_seed() {
        let tmp = tempfile::tempdir().unwrap();
        let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
        make_test_model(&a, Qwen3Preset::TinyBase, 1).unwrap();
        make_test_model(&b, Qwen3Preset::TinyVoiceDesign, 1).unwrap();
        let read =
            |dir: &Path| std::fs::read(dir.join("speech_tokenizer/model.safetensors")).unwrap();
        assert!(read(&a) == read(&b));
    }
}
