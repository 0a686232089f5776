//! `make-test-model --preset tiny|tiny-odd|mid|full`: random Voxtral TTS folders in the exact
//! published layout: params.json, bf16 consolidated.safetensors with the real key names, a
//! small valid tekken.json, and the voices as both PyTorch-zip `.pt` and `.safetensors`.
//! Deterministic per seed: every tensor draws from its own stream, seeded by the run seed and
//! the tensor's key.

use super::codec::layer_scales;
use super::keys;
use super::params::{Config, ModelArgs, END_AUDIO_CODE};
use super::voices::VOICE_DIR;
use crate::nn::decoder::{DecoderStyle, LayerKeys, FINAL_NORM};
use crate::nn::layers::{weight, AttentionDims};
use crate::testkit::endless::edit_rows;
use crate::testkit::tekken::write_test_tekken;
use crate::testkit::{
    cached_folder, progress_bar, rng_for, write_safetensors, write_values, Init, Spec, Stored,
    TestModel, NORM,
};
use anyhow::{Context, Result};
use clap::ValueEnum;
use rand::Rng;
use serde_json::json;
use std::collections::BTreeMap;
use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};

/// The presets `make-test-model` writes.
pub const TEST_MODELS: &[TestModel] = &[
    TestModel {
        name: "tiny",
        about: "Voxtral TTS, small dims, real structure: a 40-frame synthesis takes seconds on CPU",
        write: |out, seed| make_test_model(out, Preset::Tiny, seed),
        published_size: None,
    },
    TestModel {
        name: "tiny-odd",
        about: "Voxtral TTS like tiny with GQA 3, 6 codec heads and a 60-entry semantic codebook: \
                non-power-of-two paths and early END_AUDIO",
        write: |out, seed| make_test_model(out, Preset::TinyOdd, seed),
        published_size: None,
    },
    TestModel {
        name: "mid",
        about: "Voxtral TTS, width 1024, 8 layers (~0.6 GB): for batching benchmarks",
        write: |out, seed| make_test_model(out, Preset::Mid, seed),
        published_size: None,
    },
    TestModel {
        name: "full",
        about: "Voxtral TTS at the published sizes (~8 GB): for benchmarks",
        write: |out, seed| make_test_model(out, Preset::Full, seed),
        published_size: None,
    },
];

/// The 20 preset voices of the published model, in params.json order.
pub const PRESET_VOICES: [&str; 20] = [
    "casual_female",
    "casual_male",
    "cheerful_female",
    "neutral_female",
    "neutral_male",
    "pt_male",
    "pt_female",
    "nl_male",
    "nl_female",
    "it_male",
    "it_female",
    "fr_male",
    "fr_female",
    "es_male",
    "es_female",
    "de_male",
    "de_female",
    "ar_male",
    "hi_male",
    "hi_female",
];

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Preset {
    /// Small dims, real structure: a 40-frame synthesis takes seconds on CPU.
    Tiny,
    /// Like tiny with 6 query heads over 2 KV heads (GQA 3), 6 codec heads and a
    /// 60-entry semantic codebook: exercises non-power-of-two paths and early END_AUDIO.
    TinyOdd,
    /// Width 1024, 8 layers (~0.6 GB): for batching benchmarks, where a few streams make the
    /// flow head compute-bound.
    Mid,
    /// The published sizes (~8 GB): for benchmarks.
    Full,
}

struct Dims {
    dim: usize,
    layers: usize,
    heads: usize,
    kv_heads: usize,
    head_dim: usize,
    hidden: usize,
    semantic: usize,
    acoustic_books: usize,
    codec_dim: usize,
    codec_hidden: usize,
    codec_heads: usize,
    codec_kv_heads: usize,
    codec_head_dim: usize,
    semantic_dim: usize,
    merges: usize,
    voice_rows: (usize, usize),
}

impl Preset {
    /// The preset's sizes.
    fn dims(self) -> Dims {
        match self {
            Preset::Tiny => Dims {
                dim: 64,
                layers: 2,
                heads: 4,
                kv_heads: 1,
                head_dim: 16,
                hidden: 160,
                semantic: 200,
                acoustic_books: 8,
                codec_dim: 32,
                codec_hidden: 64,
                codec_heads: 4,
                codec_kv_heads: 4,
                codec_head_dim: 8,
                semantic_dim: 16,
                merges: 300,
                voice_rows: (6, 14),
            },
            Preset::TinyOdd => Dims {
                dim: 48,
                layers: 3,
                heads: 6,
                kv_heads: 2,
                head_dim: 8,
                hidden: 96,
                semantic: 60,
                acoustic_books: 5,
                codec_dim: 36,
                codec_hidden: 72,
                codec_heads: 6,
                codec_kv_heads: 3,
                codec_head_dim: 6,
                semantic_dim: 12,
                merges: 120,
                voice_rows: (3, 9),
            },
            Preset::Mid => Dims {
                dim: 1024,
                layers: 8,
                heads: 8,
                kv_heads: 2,
                head_dim: 128,
                hidden: 3072,
                semantic: 8192,
                acoustic_books: 36,
                codec_dim: 256,
                codec_hidden: 1024,
                codec_heads: 4,
                codec_kv_heads: 4,
                codec_head_dim: 64,
                semantic_dim: 256,
                merges: 2000,
                voice_rows: (100, 300),
            },
            Preset::Full => Dims {
                dim: 3072,
                layers: 26,
                heads: 32,
                kv_heads: 8,
                head_dim: 128,
                hidden: 9216,
                semantic: 8192,
                acoustic_books: 36,
                codec_dim: 1024,
                codec_hidden: 4096,
                codec_heads: 8,
                codec_kv_heads: 8,
                codec_head_dim: 128,
                semantic_dim: 256,
                merges: 2000,
                voice_rows: (100, 300),
            },
        }
    }
}

fn params_json(d: &Dims, vocab: usize) -> serde_json::Value {
    let voices: serde_json::Map<String, serde_json::Value> = PRESET_VOICES
        .iter()
        .enumerate()
        .map(|(i, v)| (v.to_string(), json!(i)))
        .collect();
    json!({
        "dim": d.dim, "n_layers": d.layers, "head_dim": d.head_dim, "hidden_dim": d.hidden,
        "n_heads": d.heads, "n_kv_heads": d.kv_heads, "rope_theta": 1_000_000.0, "norm_eps": 1e-5,
        "vocab_size": vocab, "tied_embeddings": true, "use_biases": false,
        "multimodal": {
            "bos_token_id": 1,
            "audio_model_args": {
                "semantic_codebook_size": d.semantic, "acoustic_codebook_size": 21,
                "n_acoustic_codebook": d.acoustic_books, "audio_token_id": 24, "begin_audio_token_id": 25,
                "audio_encoding_args": {"sampling_rate": 24000, "frame_rate": 12.5, "num_codebooks": 1 + d.acoustic_books},
                "acoustic_transformer_args": {
                    "input_dim": d.dim, "dim": d.dim, "n_layers": 3, "head_dim": d.head_dim,
                    "hidden_dim": d.hidden, "n_heads": d.heads, "n_kv_heads": d.kv_heads,
                    "rope_theta": 10000.0, "sigma": 1e-5, "sigma_max": 1.0
                }
            },
            "audio_tokenizer_args": {
                "pretransform_patch_size": 240, "patch_proj_kernel_size": 7,
                "semantic_codebook_size": d.semantic, "semantic_dim": d.semantic_dim,
                "acoustic_codebook_size": 21, "acoustic_dim": d.acoustic_books,
                "conv_weight_norm": true, "causal": true, "attn_sliding_window_size": 16,
                "half_attn_window_upon_downsampling": true, "dim": d.codec_dim, "hidden_dim": d.codec_hidden,
                "head_dim": d.codec_head_dim, "n_heads": d.codec_heads, "n_kv_heads": d.codec_kv_heads,
                "qk_norm": true, "qk_norm_eps": 1e-6, "norm_eps": 0.01, "layer_scale": true,
                "decoder_transformer_lengths_str": "2,2,2,2", "decoder_convs_kernels_str": "3,4,4,4",
                "decoder_convs_strides_str": "1,2,2,2", "voice": voices
            }
        }
    })
}

fn specs(cfg: &Config, d: &Dims) -> Vec<Spec> {
    let mut out = Vec::new();
    let mut push = |key: String, shape: Vec<usize>, init: Init| out.push(Spec { key, shape, init });
    let a = &cfg.args;
    push(
        keys::TOKEN_EMBEDDINGS.into(),
        vec![a.vocab_size, a.dim],
        Init::Around(0.0, 0.8),
    );
    push(
        keys::AUDIO_EMBEDDINGS.into(),
        vec![cfg.audio_embedding_rows, a.dim],
        Init::Around(0.0, 0.3),
    );
    let mut transformer = |keys: LayerKeys, dim, heads, kv, head_dim, hidden| {
        let attention = AttentionDims {
            dim,
            n_heads: heads,
            n_kv_heads: kv,
            head_dim,
        };
        let [gate, up, down] = keys.feed_forward.weights(dim, hidden);
        out.extend(keys.attention.weights(&attention).map(Spec::matrix));
        out.push(Spec::norm(weight(&keys.attention_norm), dim));
        out.push(Spec::norm(weight(&keys.ffn_norm), dim));
        // In Mistral's file order: w1, w2, w3.
        out.extend([gate, down, up].map(Spec::matrix));
    };
    for i in 0..a.n_layers {
        transformer(
            DecoderStyle::Mistral.layer_keys("", i),
            a.dim,
            a.n_heads,
            a.n_kv_heads,
            a.head_dim,
            a.hidden_dim,
        );
    }
    let at = cfg.flow();
    for i in 0..at.n_layers {
        transformer(
            LayerKeys::mistral(&format!("{}.layers.{i}", keys::FLOW_HEAD)),
            at.dim,
            at.n_heads,
            at.n_kv_heads,
            at.head_dim,
            at.hidden_dim,
        );
    }
    let c = cfg.codec();
    // Codec transformers are the odd decoder blocks (the convs are the even ones).
    for (j, st) in cfg.codec_stages.iter().enumerate() {
        for l in 0..st.n_layers {
            let p = format!("{}.decoder_blocks.{}.layers.{l}", keys::CODEC, 2 * j + 1);
            let keys = LayerKeys::mistral(&p);
            transformer(
                keys,
                c.dim,
                c.n_heads,
                c.n_kv_heads,
                c.head_dim,
                c.hidden_dim,
            );
        }
    }
    let mut push = |key: String, shape: Vec<usize>, init: Init| out.push(Spec { key, shape, init });
    push(FINAL_NORM.into(), vec![a.dim], NORM);
    let p = keys::FLOW_HEAD;
    push(
        format!("{p}.input_projection.weight"),
        vec![at.dim, d.acoustic_books],
        Init::Linear(d.acoustic_books),
    );
    push(
        format!("{p}.time_projection.weight"),
        vec![at.dim, at.dim],
        Init::Linear(at.dim),
    );
    push(
        format!("{p}.llm_projection.weight"),
        vec![at.dim, a.dim],
        Init::Linear(a.dim),
    );
    push(
        keys::SEMANTIC_HEAD.into(),
        vec![cfg.semantic_head_rows, at.dim],
        Init::Linear(at.dim),
    );
    push(
        format!("{p}.acoustic_codebook_output.weight"),
        vec![d.acoustic_books, at.dim],
        Init::Linear(at.dim),
    );
    push(
        format!("{p}.norm.weight"),
        vec![at.dim],
        Init::Around(1.0, 0.1),
    );
    let t = keys::CODEC;
    for (i, st) in cfg.codec_stages.iter().enumerate() {
        let block = 2 * i;
        let in_ch = if i == 0 { cfg.latent_dim() } else { c.dim };
        // Conv1d v is [out, in, k]; ConvTranspose1d v is [in, out, k]: g has one value per axis-0 row.
        push(
            format!("{t}.decoder_blocks.{block}.conv.parametrizations.weight.original0"),
            vec![c.dim, 1, 1],
            Init::Around(1.0, 0.3),
        );
        let v_shape = if i == 0 {
            vec![c.dim, in_ch, st.kernel]
        } else {
            vec![c.dim, c.dim, st.kernel]
        };
        push(
            format!("{t}.decoder_blocks.{block}.conv.parametrizations.weight.original1"),
            v_shape,
            Init::Around(0.0, 1.0),
        );
    }
    for j in 0..(cfg.codec_stages.len()) {
        let block = 2 * j + 1;
        for l in 0..cfg.codec_stages[j].n_layers {
            let lp = format!("{t}.decoder_blocks.{block}.layers.{l}");
            let attention = LayerKeys::mistral(&lp).attention;
            push(
                weight(&attention.q_norm),
                vec![c.n_heads * c.head_dim],
                NORM,
            );
            push(
                weight(&attention.k_norm),
                vec![c.n_kv_heads * c.head_dim],
                NORM,
            );
            for scale in layer_scales(&lp) {
                push(scale, vec![c.dim], Init::Around(0.1, 0.05));
            }
        }
    }
    push(
        format!("{t}.output_proj.conv.parametrizations.weight.original0"),
        vec![c.pretransform_patch_size, 1, 1],
        Init::Around(0.3, 0.1),
    );
    push(
        format!("{t}.output_proj.conv.parametrizations.weight.original1"),
        vec![c.pretransform_patch_size, c.dim, c.patch_proj_kernel_size],
        Init::Around(0.0, 1.0),
    );
    push(
        format!("{t}.quantizer.semantic_codebook.embedding_sum"),
        vec![c.semantic_codebook_size, c.semantic_dim],
        Init::Around(0.0, 1.0),
    );
    push(
        format!("{t}.quantizer.semantic_codebook.cluster_usage"),
        vec![c.semantic_codebook_size],
        Init::Around(1.25, 0.75),
    );
    out
}

/// A minimal protocol-2 pickle of `torch._utils._rebuild_tensor_v2` over storage "0", as
/// `torch.save` writes for a contiguous bf16 tensor `[rows, dim]`.
fn tensor_pickle(rows: usize, dim: usize) -> Vec<u8> {
    let mut p = vec![0x80, 0x02];
    let global = |p: &mut Vec<u8>, module: &str, name: &str| {
        p.push(b'c');
        p.extend_from_slice(format!("{module}\n{name}\n").as_bytes());
    };
    let string = |p: &mut Vec<u8>, s: &str| {
        p.push(b'X');
        p.extend_from_slice(&(s.len() as u32).to_le_bytes());
        p.extend_from_slice(s.as_bytes());
    };
    let int = |p: &mut Vec<u8>, v: usize| {
        p.push(b'J');
        p.extend_from_slice(&(v as i32).to_le_bytes());
    };
    global(&mut p, "torch._utils", "_rebuild_tensor_v2");
    p.push(b'('); // args
    p.push(b'('); // persistent id
    string(&mut p, "storage");
    global(&mut p, "torch", "BFloat16Storage");
    string(&mut p, "0");
    string(&mut p, "cpu");
    int(&mut p, rows * dim);
    p.push(b't');
    p.push(b'Q'); // BINPERSID
    int(&mut p, 0); // storage offset
    int(&mut p, rows);
    int(&mut p, dim);
    p.push(0x86); // TUPLE2: size
    int(&mut p, dim);
    int(&mut p, 1);
    p.push(0x86); // TUPLE2: stride
    p.push(0x89); // requires_grad = False
    global(&mut p, "collections", "OrderedDict");
    p.push(b')');
    p.push(b'R');
    p.push(b't');
    p.push(b'R');
    p.push(b'.');
    p
}

fn write_voice_pt(path: &Path, name: &str, rows: usize, dim: usize, data: &[u8]) -> Result<()> {
    let file = File::create(path).with_context(|| format!("creating {}", path.display()))?;
    let mut zip = zip::ZipWriter::new(file);
    let opts =
        zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored);
    let entries: [(&str, &[u8]); 4] = [
        ("data.pkl", &tensor_pickle(rows, dim)),
        ("byteorder", b"little"),
        ("data/0", data),
        ("version", b"3\n"),
    ];
    for (entry, bytes) in entries {
        zip.start_file(format!("{name}/{entry}"), opts)?;
        zip.write_all(bytes)?;
    }
    zip.finish()?;
    Ok(())
}

fn write_voice_safetensors(path: &Path, rows: usize, dim: usize, data: &[u8]) -> Result<()> {
    let view =
        safetensors::tensor::TensorView::new(safetensors::Dtype::BF16, vec![rows, dim], data)?;
    safetensors::serialize_to_file([("embedding", view)], None, path)?;
    Ok(())
}

impl Preset {
    /// The name used on the command line (`tiny`, `tiny-odd`, `mid`, `full`).
    pub fn name(self) -> String {
        self.to_possible_value()
            .expect("no skipped variants")
            .get_name()
            .to_string()
    }
}

/// A random checkpoint under `target/test-models/<generator>/<preset>-<seed>`, made on first use.
pub fn cached_test_model(preset: Preset, seed: u64) -> Result<PathBuf> {
    cached_folder(&preset.name(), seed, "consolidated.safetensors", |dir| {
        make_test_model(dir, preset, seed)
    })
}

/// [`cached_test_model`]'s checkpoint, but one that never says END_AUDIO
/// ([`never_end_audio`]): every request runs to its frame limit, the same on every CPU.
pub fn cached_endless_test_model(preset: Preset, seed: u64) -> Result<PathBuf> {
    let name = format!("{}-endless", preset.name());
    cached_folder(&name, seed, "consolidated.safetensors", |dir| {
        make_test_model(dir, preset, seed)?;
        never_end_audio(&dir.join("consolidated.safetensors"))
    })
}

/// END_AUDIO's row of the semantic head zero, the codes after it in opposite pairs
/// ([`crate::testkit::endless`]).
pub fn never_end_audio(weights: &Path) -> Result<()> {
    edit_rows(weights, keys::SEMANTIC_HEAD, |head| {
        let end = END_AUDIO_CODE as usize;
        head.zero(end);
        head.mirror(end + 1..head.rows);
    })
}

/// Writes a complete random model folder to `out`.
pub fn make_test_model(out: &Path, preset: Preset, seed: u64) -> Result<()> {
    let d = preset.dims();
    std::fs::create_dir_all(out.join(VOICE_DIR))
        .with_context(|| format!("creating {}", out.display()))?;
    // The full preset keeps the published embedding table size; its tokenizer uses a prefix.
    let vocab = if preset == Preset::Full {
        131_072
    } else {
        1000 + 256 + d.merges
    };
    let params = params_json(&d, vocab);
    let args: ModelArgs = serde_json::from_value(params.clone())?;
    let cfg = Config::from_args(args, "params.json").map_err(anyhow::Error::from)?;
    std::fs::write(
        out.join("params.json"),
        serde_json::to_string_pretty(&params)? + "\n",
    )?;

    let mut voice_rng = rng_for(seed, "voice_rows");
    let rows: BTreeMap<String, usize> = PRESET_VOICES
        .iter()
        .map(|v| {
            (
                v.to_string(),
                voice_rng.random_range(d.voice_rows.0..=d.voice_rows.1),
            )
        })
        .collect();
    write_test_tekken(&out.join("tekken.json"), d.merges, &rows).context("writing tekken.json")?;

    for (name, &n) in &rows {
        let mut data = Vec::with_capacity(n * d.dim * 2);
        write_values(
            &mut data,
            &mut rng_for(seed, &format!("voice.{name}")),
            n * d.dim,
            Init::Around(0.0, 1.0),
            Stored::Bf16,
        )?;
        write_voice_pt(
            &out.join(VOICE_DIR).join(format!("{name}.pt")),
            name,
            n,
            d.dim,
            &data,
        )?;
        write_voice_safetensors(
            &out.join(VOICE_DIR).join(format!("{name}.safetensors")),
            n,
            d.dim,
            &data,
        )?;
    }

    let progress = progress_bar(matches!(preset, Preset::Mid | Preset::Full));
    progress.set_message("consolidated.safetensors");
    write_safetensors(
        &out.join("consolidated.safetensors"),
        &specs(&cfg, &d),
        seed,
        Stored::Bf16,
        &progress,
    )?;
    progress.finish_and_clear();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn full_preset_has_the_published_tensor_count_and_sizes() {
        let d = Preset::Full.dims();
        let args: ModelArgs = serde_json::from_value(params_json(&d, 131_072)).unwrap();
        let cfg = Config::from_args(args, "params.json").unwrap();
        let specs = specs(&cfg, &d);
        assert_eq!(specs.len(), 386);
        let find = |k: &str| specs.iter().find(|s| s.key == k).map(|s| s.shape.clone());
        assert_eq!(
            find("acoustic_transformer.semantic_codebook_output.weight"),
            Some(vec![8320, 3072])
        );
        assert_eq!(
            find("mm_audio_embeddings.audio_codebook_embeddings.embeddings.weight"),
            Some(vec![9088, 3072])
        );
        assert_eq!(
            find("audio_tokenizer.decoder_blocks.0.conv.parametrizations.weight.original1"),
            Some(vec![1024, 292, 3])
        );
        assert_eq!(
            find("audio_tokenizer.decoder_blocks.7.layers.1.attention.k_norm.weight"),
            Some(vec![1024])
        );
        let bytes: usize = specs
            .iter()
            .map(|s| s.shape.iter().product::<usize>() * 2)
            .sum();
        assert!((7_500_000_000..8_500_000_000).contains(&bytes), "{bytes}");
    }
}
