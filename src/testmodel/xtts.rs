//! XTTS-v2 random checkpoints in the folder layout `voxtral-tts convert` leaves
//! (`make-test-model --preset xtts-tiny`): the published `config.json` with the GPT shrunk
//! (every field name, audio token id, sample rate and inference default stays), a small BPE
//! `vocab.json` in the published format (the `[STOP]`/`[UNK]`/`[SPACE]`/`[START]` specials and
//! the 17 language tags), and an f32 `model.safetensors` under the state dict's key names
//! (docs/xtts-v2-spec.md §2).
//!
//! Scales keep activations O(1), and the stop code's row of `mel_head` is wider than the
//! others so that its logit tops the 1025 others now and then: greedy decoding stops by itself
//! well before the length cap, as with the real model.

use super::{write_safetensors, Init, Spec, Stored};
use anyhow::{Context, Result};
use serde_json::{json, Value};
use std::path::Path;

/// The published `config.json` (coqui/XTTS-v2), whose field names the tiny one keeps.
const PUBLISHED_CONFIG: &str = include_str!("../../tests/data/xtts/config.json");

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum XttsPreset {
    /// XTTS-v2 with a 2-layer, 64-wide GPT (4 heads); the perceiver keeps its 8 heads of 64.
    #[value(name = "xtts-tiny")]
    Tiny,
}

/// The GPT sizes of the tiny preset.
const LAYERS: usize = 2;
const WIDTH: usize = 64;
const HEADS: usize = 4;
/// Codes the GPT may generate are `gpt_max_audio_tokens - 3` (45 here, 602 in the real one).
const MAX_AUDIO_TOKENS: usize = 48;

/// How much wider the stop code's `mel_head` row is than the others.
const STOP_ROW_GAIN: f32 = 2.2;

/// Mel bands of the conditioning front end; the perceiver's fixed sizes
/// (`GPT.__init__` in coqui-tts: 32 latents, 8 heads of 64, feed-forward ×4 with GEGLU).
const MELS: usize = 80;
const LATENTS: usize = 32;
const PERCEIVER_INNER: usize = 8 * 64;
const PERCEIVER_DEPTH: usize = 2;
const CONDITIONING_BLOCKS: usize = 6;

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

/// The published config with the tiny GPT and this vocabulary's size.
fn tiny_config(text_tokens: usize) -> Result<Value> {
    let mut config: Value = serde_json::from_str(PUBLISHED_CONFIG)?;
    for (key, value) in [
        ("gpt_layers", json!(LAYERS)),
        ("gpt_n_model_channels", json!(WIDTH)),
        ("gpt_n_heads", json!(HEADS)),
        ("decoder_input_dim", json!(WIDTH)),
        ("gpt_max_audio_tokens", json!(MAX_AUDIO_TOKENS)),
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
fn gpt_specs(text_tokens: usize) -> Vec<Spec> {
    let d = WIDTH;
    let audio_tokens = 1026;
    let mut t = Tensors::default();
    for layer in 0..LAYERS {
        let p = format!("gpt.gpt.h.{layer}");
        t.layer_norm(&format!("{p}.ln_1"), d);
        t.conv1d_hf(&format!("{p}.attn.c_attn"), d, 3 * d);
        t.conv1d_hf(&format!("{p}.attn.c_proj"), d, d);
        t.layer_norm(&format!("{p}.ln_2"), d);
        t.conv1d_hf(&format!("{p}.mlp.c_fc"), d, 4 * d);
        t.conv1d_hf(&format!("{p}.mlp.c_proj"), 4 * d, d);
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
        &[MAX_AUDIO_TOKENS + 3, d],
        EMBEDDING,
    );
    t.layer_norm("gpt.final_norm", d);
    t.linear("gpt.text_head", text_tokens, d, true);
    t.add(
        "gpt.mel_head.weight".into(),
        &[audio_tokens, d],
        Init::LoudRow {
            fan_in: d,
            cols: d,
            row: 1025,
            gain: STOP_ROW_GAIN,
        },
    );
    t.add("gpt.mel_head.bias".into(), &[audio_tokens], BIAS);

    t.pointwise_conv("gpt.conditioning_encoder.init", d, MELS);
    for block in 0..CONDITIONING_BLOCKS {
        let p = format!("gpt.conditioning_encoder.attn.{block}");
        t.layer_norm(&format!("{p}.norm"), d);
        t.pointwise_conv(&format!("{p}.qkv"), 3 * d, d);
        t.pointwise_conv(&format!("{p}.proj_out"), d, d);
    }

    let p = "gpt.conditioning_perceiver";
    t.add(format!("{p}.latents"), &[LATENTS, d], EMBEDDING);
    let geglu = d * 4 * 2 / 3;
    for layer in 0..PERCEIVER_DEPTH {
        let l = format!("{p}.layers.{layer}");
        t.linear(&format!("{l}.0.to_q"), PERCEIVER_INNER, d, false);
        t.linear(&format!("{l}.0.to_kv"), 2 * PERCEIVER_INNER, d, false);
        t.linear(&format!("{l}.0.to_out"), d, PERCEIVER_INNER, false);
        t.linear(&format!("{l}.1.0"), 2 * geglu, d, true);
        t.linear(&format!("{l}.1.2"), d, geglu, true);
    }
    t.add(format!("{p}.norm.gamma"), &[d], NORM);

    // Log-mel statistics the cloning mel is divided by (positive, as the real ones are).
    t.add("mel_stats".into(), &[MELS], Init::Around(2.5, 1.5));
    t.0
}

/// Every tensor of `model.safetensors`.
fn model_specs(text_tokens: usize) -> Vec<Spec> {
    // The vocoder and speaker encoder (`hifigan_decoder.*`) are appended here by their own
    // generator; until then the folder holds the GPT half only.
    gpt_specs(text_tokens)
}

fn write_json(path: &Path, value: &Value) -> Result<()> {
    std::fs::write(path, serde_json::to_string_pretty(value)? + "\n")
        .with_context(|| format!("writing {}", path.display()))
}

/// Writes a random XTTS-v2 folder to `out`; `model.safetensors` comes last.
pub fn make_test_model(out: &Path, _preset: XttsPreset, seed: u64) -> Result<()> {
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let (vocab, text_tokens) = tiny_vocab();
    write_json(&out.join("config.json"), &tiny_config(text_tokens)?)?;
    write_json(&out.join("vocab.json"), &vocab)?;
    write_safetensors(
        &out.join("model.safetensors"),
        &model_specs(text_tokens),
        seed,
        Stored::F32,
        &indicatif::ProgressBar::hidden(),
    )
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
        let config = tiny_config(size).unwrap();
        let published: Value = serde_json::from_str(PUBLISHED_CONFIG).unwrap();
        let keys = |v: &Value| -> Vec<String> {
            v.as_object().unwrap().keys().cloned().collect::<Vec<_>>()
        };
        assert_eq!(keys(&config), keys(&published));
        assert_eq!(keys(&config["model_args"]), keys(&published["model_args"]));
        assert_eq!(config["model_args"]["gpt_n_model_channels"], WIDTH);
        assert_eq!(config["model_args"]["gpt_stop_audio_token"], 1025);
        assert_eq!(config["gpt_cond_len"], 30);
        let specs = model_specs(size);
        let find = |k: &str| specs.iter().find(|s| s.key == k).map(|s| s.shape.clone());
        assert_eq!(find("gpt.mel_pos_embedding.emb.weight"), Some(vec![51, 64]));
        assert_eq!(
            find("gpt.conditioning_perceiver.layers.1.1.0.weight"),
            Some(vec![340, 64])
        );
        assert_eq!(find("gpt.gpt.h.1.attn.c_attn.weight"), Some(vec![64, 192]));
    }
}
