//! XTTS-v2 random checkpoints in the folder layout `voxtral-tts convert` leaves
//! (`make-test-model --preset xtts-tiny` or `xtts-full`): the published `config.json` with the
//! preset's GPT (every field name, audio token id, sample rate and inference default stays), a
//! small BPE `vocab.json` in the published format (the `[STOP]`/`[UNK]`/`[SPACE]`/`[START]`
//! specials and the 17 language tags), an f32 `model.safetensors` under the state dict's key
//! names (docs/xtts-v2-spec.md §2) and a `speakers.safetensors` of two studio voices.
//!
//! Scales keep activations O(1), and the stop code's row of `mel_head` is wider than the
//! others so that its logit tops the 1025 others now and then: greedy decoding stops by itself
//! well before the length cap, as with the real model.

pub mod vocab;
pub mod vocoder;

use super::cloning_mel::MELS;
use super::conditioning::{
    geglu_width, AttentionBlockKeys, PerceiverLayerKeys, CONDITIONING_BLOCKS, LATENTS,
    PERCEIVER_DEPTH, PERCEIVER_INNER,
};
use super::gpt::BlockKeys;
use super::keys;
use crate::nn::safetensors_writer::{self, TensorSpec};
use crate::testkit::endless::edit_rows;
use crate::testkit::{cached_folder, rng_for, write_safetensors, Init, Spec, Stored, TestModel};
use anyhow::{Context, Result};
use rand::Rng;
use safetensors::Dtype;
use serde_json::{json, Value};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use vocoder::{
    sized_hifigan_decoder_tensors, GeneratedTensor, VocoderDims,
    EMBEDDING as SPEAKER_EMBEDDING_WIDTH,
};

/// The published `config.json` (coqui/XTTS-v2), whose field names the tiny one keeps.
const PUBLISHED_CONFIG: &str = include_str!("../../../../tests/data/xtts/config.json");

/// The presets `make-test-model` writes.
pub const TEST_MODELS: &[TestModel] = &[
    TestModel {
        name: "xtts-tiny",
        about: "XTTS-v2 with a 2-layer, 64-wide GPT and a HiFi-GAN and speaker encoder of tiny \
                widths: a few MB, served by the tests",
        write: |out, seed| make_test_model(out, XttsPreset::Tiny, seed),
        published_size: None,
    },
    TestModel {
        name: "xtts-full",
        about: "XTTS-v2 at the published sizes, random (1.9 GB): for benchmarks",
        write: |out, seed| make_test_model(out, XttsPreset::Full, seed),
        published_size: None,
    },
];

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum XttsPreset {
    /// XTTS-v2 with a 2-layer, 64-wide GPT (4 heads); the perceiver keeps its 8 heads of 64;
    /// a HiFi-GAN and speaker encoder of tiny widths. A few MB, served by the tests.
    #[value(name = "xtts-tiny")]
    Tiny,
    /// The published sizes (30 layers, 1024 wide, 16 heads, 605 audio tokens, the published
    /// HiFi-GAN and speaker encoder), random: 1.9 GB, for benchmarks.
    #[value(name = "xtts-full")]
    Full,
}

/// A preset's sizes.
struct Dims {
    layers: usize,
    width: usize,
    heads: usize,
    /// Codes the GPT may generate are `gpt_max_audio_tokens - 3`.
    max_audio_tokens: usize,
    /// Rows of the text embedding (`gpt_number_text_tokens`); the vocabulary's size when
    /// `None`.
    text_tokens: Option<usize>,
    vocoder: VocoderDims,
}

impl XttsPreset {
    fn dims(self) -> Dims {
        match self {
            XttsPreset::Tiny => Dims {
                layers: 2,
                width: WIDTH,
                heads: 4,
                max_audio_tokens: 48,
                text_tokens: None,
                vocoder: VocoderDims::TINY,
            },
            XttsPreset::Full => Dims {
                layers: 30,
                width: 1024,
                heads: 16,
                max_audio_tokens: 605,
                text_tokens: Some(6681),
                vocoder: VocoderDims::PUBLISHED,
            },
        }
    }
}

/// The tiny GPT's width.
const WIDTH: usize = 64;

/// How much wider the stop code's `mel_head` row is than the others.
const STOP_ROW_GAIN: f32 = 2.2;

/// The 17 language tags of the published vocabulary, in `config.json`'s order.
pub const LANGUAGES: [&str; 17] = [
    "en", "es", "fr", "de", "it", "pt", "pl", "tr", "ru", "nl", "cs", "ar", "zh-cn", "hu", "ko",
    "ja", "hi",
];

/// Characters of the tiny vocabulary after the three leading specials.
const ALPHABET: &str = "abcdefghijklmnopqrstuvwxyz0123456789.,!?'-:;\"()";
/// Merges, in rank order; each joins two tokens already in the vocabulary.
const MERGES: [(&str, &str); 14] = [
    ("t", "h"),
    ("th", "e"),
    ("i", "n"),
    ("e", "r"),
    ("a", "n"),
    ("o", "n"),
    ("e", "n"),
    ("l", "l"),
    ("h", "e"),
    ("he", "ll"),
    ("hell", "o"),
    ("o", "r"),
    ("w", "or"),
    ("i", "s"),
];

const NORM: Init = Init::Around(1.0, 0.1);
const BIAS: Init = Init::Around(0.0, 0.1);
const EMBEDDING: Init = Init::Around(0.0, 1.0);

fn set(value: &mut Value, pointer: &str, new: Value) -> Result<()> {
    *value
        .pointer_mut(pointer)
        .with_context(|| format!("config.json has no {pointer}"))? = new;
    Ok(())
}

/// The published config with the preset's GPT and `text_tokens` text ids.
fn preset_config(d: &Dims, text_tokens: usize) -> Result<Value> {
    let mut config: Value = serde_json::from_str(PUBLISHED_CONFIG)?;
    for (key, value) in [
        ("gpt_layers", json!(d.layers)),
        ("gpt_n_model_channels", json!(d.width)),
        ("gpt_n_heads", json!(d.heads)),
        ("decoder_input_dim", json!(d.width)),
        ("gpt_max_audio_tokens", json!(d.max_audio_tokens)),
        ("gpt_number_text_tokens", json!(text_tokens)),
    ] {
        set(&mut config, &format!("/model_args/{key}"), value)?;
    }
    Ok(config)
}

/// `vocab.json`: Hugging Face `tokenizers` JSON, BPE over whitespace-split words, no
/// normalizer, with the specials and the language tags as added tokens. Returns it and its
/// size (`gpt_number_text_tokens`).
fn tiny_vocab() -> (Value, usize) {
    let mut tokens: Vec<String> = ["[STOP]", "[UNK]", "[SPACE]"].map(String::from).to_vec();
    tokens.extend(ALPHABET.chars().map(String::from));
    tokens.extend(MERGES.iter().map(|(a, b)| format!("{a}{b}")));
    let first_special = tokens.len();
    tokens.push("[START]".into());
    tokens.extend(LANGUAGES.iter().map(|l| format!("[{l}]")));
    let special = |id: usize| id < 3 || id >= first_special;
    let added: Vec<Value> = tokens
        .iter()
        .enumerate()
        .filter(|&(id, _)| special(id))
        .map(|(id, content)| {
            json!({"id": id, "content": content, "single_word": false, "lstrip": false,
                   "rstrip": false, "normalized": false, "special": true})
        })
        .collect();
    let vocab: serde_json::Map<String, Value> = tokens
        .iter()
        .enumerate()
        .map(|(id, t)| (t.clone(), json!(id)))
        .collect();
    let merges: Vec<String> = MERGES.iter().map(|(a, b)| format!("{a} {b}")).collect();
    let size = tokens.len();
    let json = json!({
        "version": "1.0", "truncation": null, "padding": null, "added_tokens": added,
        "normalizer": null, "pre_tokenizer": {"type": "Whitespace"}, "post_processor": null,
        "decoder": null,
        "model": {"type": "BPE", "dropout": null, "unk_token": "[UNK]",
                  "continuing_subword_prefix": null, "end_of_word_suffix": null,
                  "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
                  "vocab": vocab, "merges": merges}
    });
    (json, size)
}

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

    /// `nn.Linear`: weight `[out, in]`, unit-variance outputs, and a bias when `bias`.
    fn linear(&mut self, prefix: &str, out: usize, input: usize, bias: bool) {
        self.add(
            format!("{prefix}.weight"),
            &[out, input],
            Init::Linear(input),
        );
        if bias {
            self.add(format!("{prefix}.bias"), &[out], BIAS);
        }
    }

    /// Hugging Face GPT-2's `Conv1D`: weight `[in, out]`, bias `[out]`.
    fn conv1d_hf(&mut self, prefix: &str, input: usize, out: usize) {
        self.add(
            format!("{prefix}.weight"),
            &[input, out],
            Init::Linear(input),
        );
        self.add(format!("{prefix}.bias"), &[out], BIAS);
    }

    /// A kernel-1 `nn.Conv1d` with bias: weight `[out, in, 1]`.
    fn pointwise_conv(&mut self, prefix: &str, out: usize, input: usize) {
        self.add(
            format!("{prefix}.weight"),
            &[out, input, 1],
            Init::Linear(input),
        );
        self.add(format!("{prefix}.bias"), &[out], BIAS);
    }

    fn layer_norm(&mut self, prefix: &str, n: usize) {
        self.add(format!("{prefix}.weight"), &[n], NORM);
        self.add(format!("{prefix}.bias"), &[n], BIAS);
    }
}

/// The GPT half of the state dict: the GPT-2 core, its embeddings, position tables, norms and
/// heads, the conditioning encoder, the perceiver and `mel_stats`.
fn gpt_specs(dims: &Dims, text_tokens: usize) -> Vec<Spec> {
    let d = dims.width;
    let audio_tokens = 1026;
    let mut t = Tensors::default();
    for layer in 0..dims.layers {
        let b = BlockKeys::new(&keys::scope(keys::GPT), layer);
        t.layer_norm(&b.ln_1, d);
        t.conv1d_hf(&b.c_attn, d, 3 * d);
        t.conv1d_hf(&b.c_proj, d, d);
        t.layer_norm(&b.ln_2, d);
        t.conv1d_hf(&b.c_fc, d, 4 * d);
        t.conv1d_hf(&b.mlp_proj, 4 * d, d);
    }
    t.layer_norm("gpt.gpt.ln_f", d);
    t.add(
        "gpt.text_embedding.weight".into(),
        &[text_tokens, d],
        EMBEDDING,
    );
    // `max_text_tokens + 2` and `max_audio_tokens + 2 + max_conditioning_inputs` rows.
    t.add(
        "gpt.text_pos_embedding.emb.weight".into(),
        &[402 + 2, d],
        EMBEDDING,
    );
    t.add(
        "gpt.mel_embedding.weight".into(),
        &[audio_tokens, d],
        EMBEDDING,
    );
    t.add(
        "gpt.mel_pos_embedding.emb.weight".into(),
        &[dims.max_audio_tokens + 3, d],
        EMBEDDING,
    );
    t.layer_norm("gpt.final_norm", d);
    t.linear("gpt.text_head", text_tokens, d, true);
    t.add(
        format!("{}.{}.weight", keys::GPT, keys::MEL_HEAD),
        &[audio_tokens, d],
        Init::LoudRow {
            fan_in: d,
            cols: d,
            row: 1025,
            gain: STOP_ROW_GAIN,
        },
    );
    t.add(
        format!("{}.{}.bias", keys::GPT, keys::MEL_HEAD),
        &[audio_tokens],
        BIAS,
    );

    t.pointwise_conv(&format!("{}.init", keys::CONDITIONING_ENCODER), d, MELS);
    for block in 0..CONDITIONING_BLOCKS {
        let b = AttentionBlockKeys::new(&keys::scope(keys::CONDITIONING_ENCODER), block);
        t.layer_norm(&b.norm, d);
        t.pointwise_conv(&b.qkv, 3 * d, d);
        t.pointwise_conv(&b.proj_out, d, d);
    }

    let p = keys::PERCEIVER;
    t.add(format!("{p}.latents"), &[LATENTS, d], EMBEDDING);
    let geglu = geglu_width(d);
    for layer in 0..PERCEIVER_DEPTH {
        let l = PerceiverLayerKeys::new(&format!("{p}."), layer);
        t.linear(&l.to_q, PERCEIVER_INNER, d, false);
        t.linear(&l.to_kv, 2 * PERCEIVER_INNER, d, false);
        t.linear(&l.to_out, d, PERCEIVER_INNER, false);
        t.linear(&l.expand, 2 * geglu, d, true);
        t.linear(&l.contract, d, geglu, true);
    }
    t.add(format!("{p}.norm.gamma"), &[d], NORM);

    // Log-mel statistics the cloning mel is divided by (positive, as the real ones are).
    t.add("mel_stats".into(), &[MELS], Init::Around(2.5, 1.5));
    t.0
}

/// The studio voices of the tiny folder's `speakers.safetensors`: two names of the published
/// file, so that OpenAI's `alloy` and `echo` select them.
pub const STUDIO_VOICES: [&str; 2] = ["Claribel Dervla", "Viktor Eka"];

/// A spec's values as [`write_safetensors`] draws them (one stream per key), as f32 bytes.
fn drawn(spec: &Spec, seed: u64) -> Vec<u8> {
    let mut rng = rng_for(seed, &spec.key);
    let n: usize = spec.shape.iter().product();
    (0..n)
        .flat_map(|i| {
            let (center, spread) = spec.init.range(i);
            (center + spread * (rng.random::<f32>() * 2.0 - 1.0)).to_le_bytes()
        })
        .collect()
}

/// A tensor of a written file: drawn from its spec when written (the published size does not
/// fit in memory comfortably), or already made.
enum Source {
    Drawn(Spec),
    Made(GeneratedTensor),
}

fn write_tensors(path: &Path, tensors: &[Source], seed: u64) -> Result<()> {
    let specs: Vec<TensorSpec> = tensors
        .iter()
        .map(|t| match t {
            Source::Drawn(s) => TensorSpec {
                key: s.key.clone(),
                dtype: Dtype::F32,
                shape: s.shape.clone(),
            },
            Source::Made(t) => TensorSpec {
                key: t.key.clone(),
                dtype: t.dtype,
                shape: t.shape.clone(),
            },
        })
        .collect();
    safetensors_writer::write_safetensors(
        path,
        &specs,
        &HashMap::new(),
        |i| {
            Ok(match &tensors[i] {
                Source::Drawn(spec) => drawn(spec, seed),
                Source::Made(t) => t.bytes.clone(),
            })
        },
        &indicatif::ProgressBar::hidden(),
    )
}

/// `speakers.safetensors` as `voxtral-tts convert` writes it: per voice a conditioning
/// latent `[1, 32, width]` and a unit-norm speaker embedding `[1, 512, 1]`.
fn studio_voices(width: usize, seed: u64) -> Vec<GeneratedTensor> {
    let f32_bytes = |v: &[f32]| v.iter().flat_map(|x| x.to_le_bytes()).collect();
    let mut tensors = Vec::new();
    for name in STUDIO_VOICES {
        let mut rng = rng_for(seed, name);
        let mut draw =
            |n: usize| -> Vec<f32> { (0..n).map(|_| rng.random::<f32>() * 2.0 - 1.0).collect() };
        let latent = draw(LATENTS * width);
        let mut embedding = draw(SPEAKER_EMBEDDING_WIDTH);
        let norm = embedding.iter().map(|x| x * x).sum::<f32>().sqrt();
        embedding.iter_mut().for_each(|x| *x /= norm);
        tensors.push(GeneratedTensor {
            key: format!("{name}.gpt_cond_latent"),
            dtype: Dtype::F32,
            shape: vec![1, LATENTS, width],
            bytes: f32_bytes(&latent),
        });
        tensors.push(GeneratedTensor {
            key: format!("{name}.speaker_embedding"),
            dtype: Dtype::F32,
            shape: vec![1, SPEAKER_EMBEDDING_WIDTH, 1],
            bytes: f32_bytes(&embedding),
        });
    }
    tensors
}

/// The GPT half alone, as the GPT goldens (tools/goldens/xtts/make_goldens.py) were made
/// from it: coqui-tts cannot load the tiny vocoder's widths.
pub fn write_gpt_checkpoint(path: &Path, seed: u64) -> Result<()> {
    let (_, text_tokens) = tiny_vocab();
    write_safetensors(
        path,
        &gpt_specs(&XttsPreset::Tiny.dims(), text_tokens),
        seed,
        Stored::F32,
        &indicatif::ProgressBar::hidden(),
    )
}

fn write_json(path: &Path, value: &Value) -> Result<()> {
    std::fs::write(path, serde_json::to_string_pretty(value)? + "\n")
        .with_context(|| format!("writing {}", path.display()))
}

/// Writes a random XTTS-v2 folder to `out`, ready to serve: the GPT half, a HiFi-GAN and
/// speaker encoder, and two studio voices. `model.safetensors` comes last.
pub fn make_test_model(out: &Path, preset: XttsPreset, seed: u64) -> Result<()> {
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let dims = preset.dims();
    let (vocab, vocab_size) = tiny_vocab();
    let text_tokens = dims.text_tokens.unwrap_or(vocab_size).max(vocab_size);
    write_json(
        &out.join("config.json"),
        &preset_config(&dims, text_tokens)?,
    )?;
    write_json(&out.join("vocab.json"), &vocab)?;
    let voices: Vec<Source> = studio_voices(dims.width, seed)
        .into_iter()
        .map(Source::Made)
        .collect();
    write_tensors(&out.join("speakers.safetensors"), &voices, seed)?;
    let mut tensors: Vec<Source> = gpt_specs(&dims, text_tokens)
        .into_iter()
        .map(Source::Drawn)
        .collect();
    tensors.extend(
        sized_hifigan_decoder_tensors(dims.vocoder, dims.width, seed)
            .into_iter()
            .map(Source::Made),
    );
    write_tensors(&out.join("model.safetensors"), &tensors, seed)
}

/// The `xtts-tiny` folder under `target/test-models/`, made on first use.
pub fn cached_test_model(seed: u64) -> Result<PathBuf> {
    cached_folder("xtts-tiny", seed, "model.safetensors", |dir| {
        make_test_model(dir, XttsPreset::Tiny, seed)
    })
}

/// [`cached_test_model`]'s folder, but one whose GPT never picks the stop code
/// ([`never_stop_audio`]): requests run to their code limit on every CPU.
pub fn cached_endless_test_model(seed: u64) -> Result<PathBuf> {
    cached_folder("xtts-tiny-endless", seed, "model.safetensors", |dir| {
        make_test_model(dir, XttsPreset::Tiny, seed)?;
        let config: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(dir.join("config.json"))?)?;
        let stop = config["model_args"]["gpt_stop_audio_token"]
            .as_u64()
            .context("config.json has no gpt_stop_audio_token")?;
        never_stop_audio(&dir.join("model.safetensors"), stop as usize)
    })
}

/// The stop code's `mel_head` row zero and its bias -10⁴ ([`crate::testkit::endless`]), a
/// logit far below every other code's, so neither greedy decoding nor top-k/top-p sampling
/// picks it.
pub fn never_stop_audio(weights: &Path, stop: usize) -> Result<()> {
    let head = format!("{}.{}", keys::GPT, keys::MEL_HEAD);
    edit_rows(weights, &format!("{head}.weight"), |head| head.zero(stop))?;
    edit_rows(weights, &format!("{head}.bias"), |bias| {
        bias.set(stop, -1e4);
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vocab_is_a_bpe_tokenizer_with_the_specials_and_language_tags() {
        let (vocab, size) = tiny_vocab();
        let tokenizer = tokenizers::Tokenizer::from_bytes(vocab.to_string()).unwrap();
        assert_eq!(tokenizer.get_vocab_size(true), size);
        for (token, id) in [("[STOP]", 0), ("[UNK]", 1), ("[SPACE]", 2)] {
            assert_eq!(tokenizer.token_to_id(token), Some(id));
        }
        assert!(tokenizer.token_to_id("[START]").is_some());
        for language in LANGUAGES {
            assert!(tokenizer.token_to_id(&format!("[{language}]")).is_some());
        }
        let ids = tokenizer
            .encode("[en]hello[SPACE]world", false)
            .unwrap()
            .get_ids()
            .to_vec();
        let hello = tokenizer.token_to_id("hello").unwrap();
        // w+or is a merge, then nothing joins "wor" with "l" or "l" with "d".
        let world = ["wor", "l", "d"].map(|t| tokenizer.token_to_id(t).unwrap());
        let mut want = vec![tokenizer.token_to_id("[en]").unwrap(), hello, 2];
        want.extend(world);
        assert_eq!(ids, want);
    }

    #[test]
    fn config_keeps_the_published_fields_with_the_tiny_gpt() {
        let (_, size) = tiny_vocab();
        let config = preset_config(&XttsPreset::Tiny.dims(), size).unwrap();
        let published: Value = serde_json::from_str(PUBLISHED_CONFIG).unwrap();
        let keys = |v: &Value| -> Vec<String> {
            v.as_object().unwrap().keys().cloned().collect::<Vec<_>>()
        };
        assert_eq!(keys(&config), keys(&published));
        assert_eq!(keys(&config["model_args"]), keys(&published["model_args"]));
        assert_eq!(config["model_args"]["gpt_n_model_channels"], WIDTH);
        assert_eq!(config["model_args"]["gpt_stop_audio_token"], 1025);
        assert_eq!(config["gpt_cond_len"], 30);
        let specs = gpt_specs(&XttsPreset::Tiny.dims(), size);
        let find = |k: &str| specs.iter().find(|s| s.key == k).map(|s| s.shape.clone());
        assert_eq!(find("gpt.mel_pos_embedding.emb.weight"), Some(vec![51, 64]));
        assert_eq!(
            find("gpt.conditioning_perceiver.layers.1.1.0.weight"),
            Some(vec![340, 64])
        );
        assert_eq!(find("gpt.gpt.h.1.attn.c_attn.weight"), Some(vec![64, 192]));
    }
}
