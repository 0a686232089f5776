//! The transformer both halves of the speech tokenizer run: the Mimi encoder's
//! (`MimiTransformerModel`) and the decoder's pre-transformer
//! (`Qwen3TTSTokenizerV2DecoderTransformerModel`). Pre-norm layers with bias-free attention
//! (RoPE on rotated halves, see [`interleave_heads`]) and LayerScale on both branches; the
//! encoder's layers normalise with LayerNorm and run a GELU MLP, the decoder's with RMSNorm and
//! a gated SiLU one. How a layer attends (one window mask over a whole clip, or blocks over a
//! stream's kept keys) is each half's own.

use crate::models::qwen3_tts::speech_decoder::convs::LayerNorm;
use crate::nn::decoder::LayerKeys;
use crate::nn::layers::{weight as weight_key, Loader, RmsNorm};
use crate::nn::LoadError;
use crate::tensor::{DType, Tensor};

/// Which half's layers: their norm and MLP, and the keys they are stored under.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Layers {
    /// The encoder's: LayerNorm, [`gelu_mlp`] around a GELU.
    Encoder,
    /// The decoder's: RMSNorm, and a SwiGLU feed-forward in Hugging Face's names.
    Decoder,
}

/// Layer `p`'s GELU MLP (the encoder's): the modules of its projections in and out.
pub(super) fn gelu_mlp(p: &str) -> [String; 2] {
    [format!("{p}.mlp.fc1"), format!("{p}.mlp.fc2")]
}

/// Layer `p`'s LayerScale of its attention's and its MLP's outputs: their keys (`[hidden]`).
pub(super) fn layer_scales(p: &str) -> [String; 2] {
    [
        format!("{p}.self_attn_layer_scale.scale"),
        format!("{p}.mlp_layer_scale.scale"),
    ]
}

/// The sizes of a codec transformer, as both halves' configs give them.
pub(super) struct Dims {
    pub hidden: usize,
    pub intermediate: usize,
    pub layers: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    pub norm_eps: f64,
    pub window: usize,
    pub rope_theta: f64,
}

enum Norm<T> {
    Layer(LayerNorm<T>),
    Rms(RmsNorm<T>),
}

impl<T: Tensor> Norm<T> {
    fn forward(&self, x: &T) -> T {
        match self {
            Norm::Layer(norm) => norm.forward(x),
            Norm::Rms(norm) => norm.forward(x),
        }
    }
}

enum Mlp<T> {
    Gelu { fc1: T, fc2: T },
    GatedSilu { gate: T, up: T, down: T },
}

impl<T: Tensor> Mlp<T> {
    fn forward(&self, n: &T) -> T {
        match self {
            Mlp::Gelu { fc1, fc2 } => n.linear(fc1).gelu().linear(fc2),
            Mlp::GatedSilu { gate, up, down } => {
                n.linear(gate).silu().mul(&n.linear(up)).linear(down)
            }
        }
    }
}

struct Layer<T> {
    input_norm: Norm<T>,
    q: T,
    k: T,
    v: T,
    o: T,
    attention_scale: T,
    post_attention_norm: Norm<T>,
    mlp: Mlp<T>,
    mlp_scale: T,
}

/// The official RoPE rotates the pairs `(x[i], x[i + d/2])`; the backends rotate `(x[2i],
/// x[2i+1])`. Reordering the rows of each head of the q and k projections the same way turns
/// one into the other without changing any score (a dot product does not see the order).
pub(super) fn interleave_heads(weight: &[f32], head_dim: usize, width: usize) -> Vec<f32> {
    let half = head_dim / 2;
    let mut out = Vec::with_capacity(weight.len());
    for head in weight.chunks(head_dim * width) {
        for i in 0..half {
            out.extend_from_slice(&head[i * width..(i + 1) * width]);
            out.extend_from_slice(&head[(i + half) * width..(i + half + 1) * width]);
        }
    }
    out
}

pub(super) struct CodecTransformer<T: Tensor> {
    layers: Vec<Layer<T>>,
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    /// Keys a query sees, itself included: positions `i - window < j ≤ i`.
    pub window: usize,
    pub theta: f64,
    pub device: T::Device,
    pub dtype: DType,
}

impl<T: Tensor> CodecTransformer<T> {
    /// Layers `layers.{i}.` of `l`.
    pub fn load(l: &Loader<T>, kind: Layers, d: &Dims) -> Result<Self, LoadError> {
        let (hidden, head_dim) = (d.hidden, d.head_dim);
        let (q_width, kv_width) = (d.heads * head_dim, d.kv_heads * head_dim);
        let rotated = |key: &str, rows: usize| -> Result<T, LoadError> {
            let w = l.host_f32(key, &[rows, hidden])?;
            Ok(l.from_f32(&interleave_heads(&w, head_dim, hidden), &[rows, hidden]))
        };
        let layers = (0..d.layers)
            .map(|i| {
                let p = format!("layers.{i}");
                // The norms, attention and SwiGLU of a Hugging Face layer; the encoder's MLP
                // and both halves' LayerScales are this transformer's own.
                let keys = LayerKeys::hugging_face(&p);
                let norm = |module: &str| -> Result<Norm<T>, LoadError> {
                    Ok(match kind {
                        Layers::Encoder => {
                            Norm::Layer(LayerNorm::load(l, module, hidden, d.norm_eps)?)
                        }
                        Layers::Decoder => {
                            Norm::Rms(RmsNorm::load(l, &weight_key(module), hidden, d.norm_eps)?)
                        }
                    })
                };
                let weight =
                    |module: &str, shape: [usize; 2]| l.tensor(&weight_key(module), &shape);
                let [attention_scale, mlp_scale] = layer_scales(&p);
                let scale = |key: &str| l.tensor(key, &[hidden]);
                let a = &keys.attention;
                let input_norm = norm(&keys.attention_norm)?;
                let q = rotated(&weight_key(&a.q), q_width)?;
                let k = rotated(&weight_key(&a.k), kv_width)?;
                let v = weight(&a.v, [kv_width, hidden])?;
                let o = weight(&a.o, [hidden, q_width])?;
                let attention_scale = scale(&attention_scale)?;
                let post_attention_norm = norm(&keys.ffn_norm)?;
                let (inner, outer) = ([d.intermediate, hidden], [hidden, d.intermediate]);
                let mlp = match kind {
                    Layers::Encoder => {
                        let [fc1, fc2] = gelu_mlp(&p);
                        Mlp::Gelu {
                            fc1: weight(&fc1, inner)?,
                            fc2: weight(&fc2, outer)?,
                        }
                    }
                    Layers::Decoder => {
                        let [gate, up, down] = keys
                            .feed_forward
                            .weights(hidden, d.intermediate)
                            .map(|(key, shape)| l.tensor(&key, &shape));
                        Mlp::GatedSilu {
                            gate: gate?,
                            up: up?,
                            down: down?,
                        }
                    }
                };
                Ok(Layer {
                    input_norm,
                    q,
                    k,
                    v,
                    o,
                    attention_scale,
                    post_attention_norm,
                    mlp,
                    mlp_scale: scale(&mlp_scale)?,
                })
            })
            .collect::<Result<Vec<_>, LoadError>>()?;
        Ok(CodecTransformer {
            layers,
            heads: d.heads,
            kv_heads: d.kv_heads,
            head_dim,
            window: d.window,
            theta: d.rope_theta,
            device: l.device.clone(),
            dtype: l.dtype,
        })
    }

    pub fn layers(&self) -> usize {
        self.layers.len()
    }

    /// The attention's scale, `1 / √head_dim`.
    pub fn scale(&self) -> f64 {
        1.0 / (self.head_dim as f64).sqrt()
    }

    /// `h` `[1, len, hidden]` through layer `index`. `attend` takes the layer's queries, keys
    /// and values `[1, heads, len, head_dim]`, not yet rotated, and gives the attention's output
    /// `[1, heads, len, head_dim]`.
    pub fn layer_forward(&self, index: usize, h: &T, attend: impl FnOnce(T, T, T) -> T) -> T {
        let layer = &self.layers[index];
        let len = h.shape()[1];
        let n = layer.input_norm.forward(h);
        let q = self.split_heads(&n.linear(&layer.q), self.heads);
        let k = self.split_heads(&n.linear(&layer.k), self.kv_heads);
        let v = self.split_heads(&n.linear(&layer.v), self.kv_heads);
        let attended = attend(q, k, v)
            .transpose(1, 2)
            .reshape(&[1, len, self.heads * self.head_dim])
            .linear(&layer.o);
        let h = h.add(&attended.mul(&layer.attention_scale));
        let mlp = layer.mlp.forward(&layer.post_attention_norm.forward(&h));
        h.add(&mlp.mul(&layer.mlp_scale))
    }

    fn split_heads(&self, x: &T, heads: usize) -> T {
        let len = x.shape()[1];
        x.reshape(&[1, len, heads, self.head_dim]).transpose(1, 2)
    }
}
