//! `make-test-model --preset stt-tiny`: a random Voxtral Realtime folder in the exact
//! published layout (docs/voxtral-realtime-spec.md §1): `params.json` with the real schema,
//! bf16 `consolidated.safetensors` with the real key names (no `wk` bias, no
//! `output.weight`), and a `tekken.json` with the real `audio` section and the streaming
//! specials at their real ranks. Only widths and depths shrink; every audio front-end and
//! streaming constant keeps its real value, and the attention windows are small so that short
//! audio crosses them.

use super::keys;
use crate::nn::decoder::{DecoderStyle, LayerKeys, FINAL_NORM};
use crate::nn::layers::{self, weight, AttentionDims};
use crate::testkit::endless::edit_rows;
use crate::testkit::tekken::write_tekken;
use crate::testkit::{
    cached_folder, progress_bar, write_safetensors, Init, Spec, Stored, TestModel,
};
use crate::tokenizers::tekken::Tekken;
use anyhow::{Context, Result};
use serde_json::json;
use std::path::{Path, PathBuf};

/// The preset `make-test-model` writes.
pub const TEST_MODELS: &[TestModel] = &[TestModel {
    name: "stt-tiny",
    about: "Voxtral Realtime (speech to text), small dims, real layout and audio constants",
    write: make_test_model,
    published_size: Some(make_published_size_model),
}];

/// Special tokens at their ranks in the published tokenizer; the prompt needs `<s>` (1) and
/// `[STREAMING_PAD]` (32), decoding stops on `</s>` (2). `[TRANSCRIBE]` (34) is the rank all
/// Mistral audio tokenizers share.
const SPECIAL_TOKENS: [(usize, &str); 5] = [
    (24, "[AUDIO]"),
    (25, "[BEGIN_AUDIO]"),
    (32, "[STREAMING_PAD]"),
    (33, "[STREAMING_WORD]"),
    (34, "[TRANSCRIBE]"),
];

/// Ranks reserved for special tokens, as in the published tokenizer.
const SPECIAL_RANKS: usize = 1000;

/// Learned merges of the tiny vocabulary: 1000 specials + 256 bytes + 44 = 1300 tokens.
const MERGES: usize = 44;

/// The sizes that differ between the tiny and the published model.
struct SttDims {
    enc_dim: usize,
    enc_layers: usize,
    enc_heads: usize,
    enc_head_dim: usize,
    enc_hidden: usize,
    enc_window: usize,
    dim: usize,
    layers: usize,
    heads: usize,
    kv_heads: usize,
    head_dim: usize,
    hidden: usize,
    window: usize,
    vocab: usize,
}

/// Encoder attention 4 × 24 = 96 wide over a 64-wide stream (the real one is 2048 over 1280);
/// decoder GQA 2; windows of 40 encoder frames and 48 positions.
const STT_TINY: SttDims = SttDims {
    enc_dim: 64,
    enc_layers: 2,
    enc_heads: 4,
    enc_head_dim: 24,
    enc_hidden: 160,
    enc_window: 40,
    dim: 96,
    layers: 2,
    heads: 4,
    kv_heads: 2,
    head_dim: 32,
    hidden: 192,
    window: 48,
    vocab: SPECIAL_RANKS + 256 + MERGES,
};

/// The published sizes (spec §1 and §9): 4.43 G values, 8.86 GB in bf16. The tokenizer
/// fills the published vocabulary with learned and random merges.
const STT_PUBLISHED: SttDims = SttDims {
    enc_dim: 1280,
    enc_layers: 32,
    enc_heads: 32,
    enc_head_dim: 64,
    enc_hidden: 5120,
    enc_window: 750,
    dim: 3072,
    layers: 26,
    heads: 32,
    kv_heads: 8,
    head_dim: 128,
    hidden: 9216,
    window: 8192,
    vocab: 131_072,
};

/// Mel bins and the adapter's frame stacking keep their real values.
const NUM_MEL_BINS: usize = 128;
const DOWNSAMPLE_FACTOR: usize = 4;
const T_COND_DIM: usize = 32;

fn params_json(d: &SttDims) -> serde_json::Value {
    // Built in parts: one json! of the whole file exceeds the macro recursion limit.
    let audio_encoding_args = json!({
        "sampling_rate": 16000, "frame_rate": 12.5, "num_mel_bins": NUM_MEL_BINS,
        "hop_length": 160, "window_size": 400, "chunk_length_s": null,
        "global_log_mel_max": 1.5, "transcription_format": "streaming"
    });
    let encoder_args = json!({
        "dim": d.enc_dim, "n_layers": d.enc_layers, "head_dim": d.enc_head_dim,
        "hidden_dim": d.enc_hidden, "n_heads": d.enc_heads, "n_kv_heads": d.enc_heads,
        "use_biases": true, "rope_theta": 1_000_000.0, "causal": true, "norm_eps": 1e-5,
        "pos_embed": "rope", "ffn_type": "swiglu", "norm_type": "rms_norm",
        "sliding_window": d.enc_window, "max_source_positions": null,
        "audio_encoding_args": audio_encoding_args
    });
    json!({
        "dim": d.dim, "n_layers": d.layers, "head_dim": d.head_dim, "hidden_dim": d.hidden,
        "n_heads": d.heads, "n_kv_heads": d.kv_heads, "use_biases": false, "causal": true,
        "rope_theta": 1_000_000.0, "norm_eps": 1e-5, "vocab_size": d.vocab,
        "model_max_length": 131_072, "tied_embeddings": true, "sliding_window": d.window,
        "ada_rms_norm_t_cond": true, "ada_rms_norm_t_cond_dim": T_COND_DIM,
        "multimodal": {
            "whisper_model_args": {
                "encoder_args": encoder_args,
                "downsample_args": {"downsample_factor": DOWNSAMPLE_FACTOR}
            }
        }
    })
}

/// tekken.json's `audio` section, with the published values.
fn tekken_audio() -> serde_json::Value {
    json!({
        "sampling_rate": 16000, "frame_rate": 12.5,
        "audio_encoding_config": {"num_mel_bins": NUM_MEL_BINS, "hop_length": 160, "window_size": 400},
        "chunk_length_s": null, "transcription_format": "streaming",
        "transcription_delay_ms": 480, "streaming_look_ahead_ms": 2.5,
        "streaming_look_back_ms": 52.5, "streaming_n_left_pad_tokens": 32
    })
}

/// Every tensor of the published layout.
fn specs(d: &SttDims) -> Vec<Spec> {
    let mut out = Vec::new();
    let mut push = |key: String, shape: Vec<usize>, init: Init| out.push(Spec { key, shape, init });
    let norm = Init::Around(1.0, 0.1);
    let bias = Init::Around(0.0, 0.1);
    let e = keys::EMBEDDING_MODULE;
    let w = format!("{e}{}", keys::ENCODER);
    let (ed, eh) = (d.enc_dim, d.enc_heads * d.enc_head_dim);
    for (i, input) in [NUM_MEL_BINS, ed].into_iter().enumerate() {
        let p = format!("{w}{}", keys::CONV_STEM[i]);
        push(
            format!("{p}.weight"),
            vec![ed, input, 3],
            Init::Linear(input * 3),
        );
        push(format!("{p}.bias"), vec![ed], bias);
    }
    let encoder_attention = AttentionDims {
        dim: ed,
        n_heads: d.enc_heads,
        n_kv_heads: d.enc_heads,
        head_dim: d.enc_head_dim,
    };
    for l in 0..d.enc_layers {
        let layer = LayerKeys::mistral(&format!("{w}{}", keys::encoder_layer(l)));
        let (a, ff) = (&layer.attention, &layer.feed_forward);
        let [q, k, v, o] = a.weights(&encoder_attention);
        let [gate, up, down] = ff.weights(ed, d.enc_hidden);
        let with_bias = |module: &str, n: usize| Spec {
            key: layers::bias(module),
            shape: vec![n],
            init: bias,
        };
        // The published checkpoint has no wk bias (vLLM loads a zero one).
        out.extend([
            Spec::norm(weight(&layer.attention_norm), ed),
            Spec::norm(weight(&layer.ffn_norm), ed),
            Spec::matrix(q),
            with_bias(&a.q, eh),
            Spec::matrix(k),
            Spec::matrix(v),
            with_bias(&a.v, eh),
            Spec::matrix(o),
            with_bias(&a.o, ed),
            Spec::matrix(gate),
            Spec::matrix(down),
            with_bias(&ff.down, ed),
            Spec::matrix(up),
        ]);
    }
    let mut push = |key: String, shape: Vec<usize>, init: Init| out.push(Spec { key, shape, init });
    push(format!("{w}{}", keys::ENCODER_NORM), vec![ed], norm);
    let stacked = ed * DOWNSAMPLE_FACTOR;
    push(
        format!("{e}{}", keys::ADAPTER_IN),
        vec![d.dim, stacked],
        Init::Linear(stacked),
    );
    push(
        format!("{e}{}", keys::ADAPTER_OUT),
        vec![d.dim, d.dim],
        Init::Linear(d.dim),
    );
    // Tied with the head. Small next to the audio embeddings, or the fed-back token's own
    // logit wins and greedy decoding repeats one token whatever the audio; the special rows
    // (mostly unused placeholders) smaller still, or 1000 of the 1300 rows crowd the text out.
    push(
        keys::TOKEN_EMBEDDINGS.into(),
        vec![d.vocab, d.dim],
        Init::QuietRows {
            rows: SPECIAL_RANKS,
            cols: d.dim,
            quiet: 0.0125,
            loud: 0.05,
        },
    );
    let attention = AttentionDims {
        dim: d.dim,
        n_heads: d.heads,
        n_kv_heads: d.kv_heads,
        head_dim: d.head_dim,
    };
    for l in 0..d.layers {
        let layer = DecoderStyle::Mistral.layer_keys("", l);
        let [q, k, v, o] = layer.attention.weights(&attention);
        let [gate, up, down] = layer.feed_forward.weights(d.dim, d.hidden);
        push(weight(&layer.attention_norm), vec![d.dim], norm);
        push(weight(&layer.ffn_norm), vec![d.dim], norm);
        // In Mistral's file order: w1, w2, w3.
        for spec in [q, k, v, o, gate, down, up].map(Spec::matrix) {
            push(spec.key, spec.shape, spec.init);
        }
        let conditioning = keys::delay_conditioning(l);
        push(
            format!("{conditioning}.0.weight"),
            vec![T_COND_DIM, d.dim],
            Init::Linear(d.dim),
        );
        // Small: the ada scale `1 + ...` stays near 1, as in a trained model.
        push(
            format!("{conditioning}.2.weight"),
            vec![d.dim, T_COND_DIM],
            Init::Around(0.0, 0.1),
        );
    }
    push(FINAL_NORM.into(), vec![d.dim], norm);
    out
}

/// Writes the stt-tiny folder to `out`.
pub fn make_test_model(out: &Path, seed: u64) -> Result<()> {
    make_model(out, &STT_TINY, seed, indicatif::ProgressBar::hidden())
}

/// The same folder at the published sizes, for benchmarks (8.86 GB, shown as it is written).
pub fn make_published_size_model(out: &Path, seed: u64) -> Result<()> {
    let progress = progress_bar(true);
    progress.set_message("consolidated.safetensors");
    make_model(out, &STT_PUBLISHED, seed, progress)
}

/// The stt-tiny folder under `target/test-models/`, made on first use.
pub fn cached_test_model(seed: u64) -> Result<PathBuf> {
    cached_folder("stt-tiny", seed, "consolidated.safetensors", |dir| {
        make_test_model(dir, seed)
    })
}

/// [`cached_test_model`]'s folder, but one that never says `</s>` ([`never_end_transcript`]):
/// it decodes every position of the audio, the same on every CPU.
pub fn cached_endless_test_model(seed: u64) -> Result<PathBuf> {
    cached_folder(
        "stt-tiny-endless",
        seed,
        "consolidated.safetensors",
        |dir| {
            make_test_model(dir, seed)?;
            let tekken = Tekken::from_file(&dir.join("tekken.json"))?;
            let eos = tekken
                .special_id("</s>")
                .context("the test tekken.json has no </s>")?;
            never_end_transcript(&dir.join("consolidated.safetensors"), eos as usize)
        },
    )
}

/// `</s>`'s row of the tied embedding (the head) zero, and the rows after it in opposite pairs
/// ([`crate::testkit::endless`]). Decoding stays bounded: one token per audio position.
pub fn never_end_transcript(weights: &Path, eos: usize) -> Result<()> {
    edit_rows(weights, keys::TOKEN_EMBEDDINGS, |embeddings| {
        embeddings.zero(eos);
        embeddings.mirror(eos + 1..embeddings.rows);
    })
}

fn make_model(out: &Path, d: &SttDims, seed: u64, progress: indicatif::ProgressBar) -> Result<()> {
    write_small_files(out, d)?;
    write_safetensors(
        &out.join("consolidated.safetensors"),
        &specs(d),
        seed,
        Stored::Bf16,
        &progress,
    )
}

/// `params.json` and `tekken.json`.
fn write_small_files(out: &Path, d: &SttDims) -> Result<()> {
    std::fs::create_dir_all(out)?;
    std::fs::write(
        out.join("params.json"),
        serde_json::to_string_pretty(&params_json(d))? + "\n",
    )?;
    write_tekken(
        &out.join("tekken.json"),
        d.vocab - SPECIAL_RANKS - 256,
        &SPECIAL_TOKENS,
        &tekken_audio(),
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::models::voxtral_realtime::params::Config;
    use crate::nn::checkpoint::Checkpoint;

    #[test]
    fn real_sizes_give_the_published_tensor_table() {
        let specs = specs(&STT_PUBLISHED);
        assert_eq!(specs.len(), 711);
        let params: usize = specs
            .iter()
            .map(|s| s.shape.iter().product::<usize>())
            .sum();
        assert_eq!(params, 4_429_679_360);
        let find = |k: &str| specs.iter().find(|s| s.key == k).map(|s| s.shape.clone());
        let w = "mm_streams_embeddings.embedding_module.whisper_encoder.";
        assert_eq!(
            find(&format!("{w}conv_layers.0.conv.weight")),
            Some(vec![1280, 128, 3])
        );
        assert_eq!(
            find(&format!("{w}conv_layers.1.conv.weight")),
            Some(vec![1280, 1280, 3])
        );
        assert_eq!(
            find(&format!("{w}transformer.layers.31.attention.wq.weight")),
            Some(vec![2048, 1280])
        );
        assert_eq!(
            find(&format!("{w}transformer.layers.0.attention.wk.bias")),
            None
        );
        assert_eq!(
            find("mm_streams_embeddings.embedding_module.audio_language_projection.0.weight"),
            Some(vec![3072, 5120])
        );
        assert_eq!(
            find("layers.25.ada_rms_norm_t_cond.0.weight"),
            Some(vec![32, 3072])
        );
        assert_eq!(find("layers.0.attention.wk.weight"), Some(vec![1024, 3072]));
        assert_eq!(find("output.weight"), None);
    }

    #[test]
    fn published_size_config_and_tokenizer_agree() {
        let dir = tempfile::tempdir().unwrap();
        write_small_files(dir.path(), &STT_PUBLISHED).unwrap();
        let config = Config::load(dir.path()).unwrap();
        assert_eq!(config.args.vocab_size, 131_072);
        assert_eq!(config.encoder.sliding_window, Some(750));
        let tok = Tekken::from_file(&dir.path().join("tekken.json")).unwrap();
        assert_eq!(tok.vocab_size(), 131_072);
        assert_eq!(tok.special_id("[STREAMING_PAD]"), Some(32));
    }

    #[test]
    fn stt_tiny_is_deterministic_and_loads() {
        let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        make_test_model(a.path(), 0).unwrap();
        make_test_model(b.path(), 0).unwrap();
        for file in ["params.json", "tekken.json", "consolidated.safetensors"] {
            let (x, y) = (a.path().join(file), b.path().join(file));
            assert_eq!(
                std::fs::read(x).unwrap(),
                std::fs::read(y).unwrap(),
                "{file}"
            );
        }
        let other = tempfile::tempdir().unwrap();
        make_test_model(other.path(), 1).unwrap();
        let weights = |dir: &Path| std::fs::read(dir.join("consolidated.safetensors")).unwrap();
        assert_ne!(weights(a.path()), weights(other.path()));

        let config = Config::load(a.path()).unwrap();
        assert_eq!(config.streaming.prompt_len(), 39);
        assert_eq!(config.encoder.sliding_window, Some(40));
        let tok = Tekken::from_file(&a.path().join("tekken.json")).unwrap();
        assert_eq!(tok.vocab_size(), config.args.vocab_size);
        for (name, id) in [
            ("<s>", 1),
            ("</s>", 2),
            ("[STREAMING_PAD]", 32),
            ("[STREAMING_WORD]", 33),
        ] {
            assert_eq!(tok.special_id(name), Some(id), "{name}");
        }
        let ckpt = Checkpoint::open(&a.path().join("consolidated.safetensors")).unwrap();
        for spec in specs(&STT_TINY) {
            let raw = ckpt.raw(&spec.key, &spec.shape).unwrap();
            assert_eq!(raw.dtype, crate::tensor::DType::BF16, "{}", spec.key);
        }
        assert!(ckpt.unused_keys().is_empty(), "{:?}", ckpt.unused_keys());
    }
}
