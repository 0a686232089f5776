//! The Mimi encoder transformer (transformers `MimiTransformerModel`) at 25 Hz: pre-norm
//! layers with LayerNorm, bias-free attention with RoPE on rotated halves and a sliding
//! causal window (a query at `i` sees keys `i - window < j ≤ i`), a GELU MLP, and LayerScale
//! on both branches. No final norm.

use crate::models::qwen3_tts::config::SpeechEncoderConfig;
use crate::models::qwen3_tts::speech_decoder::convs::LayerNorm;
use crate::models::qwen3_tts::speech_decoder::transformer::interleave_heads;
use crate::nn::layers::Loader;
use crate::nn::mask::sliding_window_bias;
use crate::nn::LoadError;
use crate::tensor::{DType, Tensor};

struct Layer<T> {
    input_norm: LayerNorm<T>,
    q: T,
    k: T,
    v: T,
    o: T,
    attention_scale: T,
    post_attention_norm: LayerNorm<T>,
    fc1: T,
    fc2: T,
    mlp_scale: T,
}

/// The sliding window over `len` positions as a `[len, len]` additive bias; `None` when
/// every query sees all earlier keys (plain causal attention).
fn window_bias(len: usize, window: usize) -> Option<Vec<f32>> {
    (len > window).then(|| sliding_window_bias(0, len, 0, len, Some(window)))
}

pub(super) struct EncoderTransformer<T: Tensor> {
    layers: Vec<Layer<T>>,
    heads: usize,
    kv_heads: usize,
    head_dim: usize,
    window: usize,
    theta: f64,
    device: T::Device,
    dtype: DType,
}

impl<T: Tensor> EncoderTransformer<T> {
    /// Keys under `encoder.encoder_transformer.`.
    pub fn load(l: &Loader<T>, c: &SpeechEncoderConfig) -> Result<Self, LoadError> {
        let (hidden, head_dim) = (c.hidden_size, c.head_dim);
        let (q_width, kv_width) = (
            c.num_attention_heads * head_dim,
            c.num_key_value_heads * head_dim,
        );
        let rotated = |key: &str, rows: usize| -> Result<T, LoadError> {
            let w = l.host_f32(key, &[rows, hidden])?;
            Ok(l.from_f32(&interleave_heads(&w, head_dim, hidden), &[rows, hidden]))
        };
        let layers = (0..c.num_hidden_layers)
            .map(|i| {
                let p = format!("layers.{i}");
                let norm =
                    |name: &str| LayerNorm::load(l, &format!("{p}.{name}"), hidden, c.norm_eps);
                let weight =
                    |name: &str, shape: [usize; 2]| l.tensor(&format!("{p}.{name}.weight"), &shape);
                let scale = |name: &str| l.tensor(&format!("{p}.{name}.scale"), &[hidden]);
                Ok(Layer {
                    input_norm: norm("input_layernorm")?,
                    q: rotated(&format!("{p}.self_attn.q_proj.weight"), q_width)?,
                    k: rotated(&format!("{p}.self_attn.k_proj.weight"), kv_width)?,
                    v: weight("self_attn.v_proj", [kv_width, hidden])?,
                    o: weight("self_attn.o_proj", [hidden, q_width])?,
                    attention_scale: scale("self_attn_layer_scale")?,
                    post_attention_norm: norm("post_attention_layernorm")?,
                    fc1: weight("mlp.fc1", [c.intermediate_size, hidden])?,
                    fc2: weight("mlp.fc2", [hidden, c.intermediate_size])?,
                    mlp_scale: scale("mlp_layer_scale")?,
                })
            })
            .collect::<Result<Vec<_>, LoadError>>()?;
        Ok(EncoderTransformer {
            layers,
            heads: c.num_attention_heads,
            kv_heads: c.num_key_value_heads,
            head_dim,
            window: c.sliding_window,
            theta: c.rope_theta,
            device: l.device.clone(),
            dtype: l.dtype,
        })
    }

    /// `[1, len, hidden]` -> `[1, len, hidden]`, positions from 0.
    pub fn forward(&self, x: &T) -> T {
        let len = x.shape()[1];
        let rope = T::rope_table(&self.device, len, self.head_dim, self.theta);
        let mask = self.window_mask(len);
        self.layers.iter().fold(x.clone(), |h, layer| {
            self.layer_forward(layer, &h, &rope, mask.as_ref())
        })
    }

    fn window_mask(&self, len: usize) -> Option<T> {
        window_bias(len, self.window)
            .map(|bias| T::from_f32(&self.device, &bias, &[1, 1, len, len], self.dtype))
    }

    fn split_heads(&self, x: &T, heads: usize) -> T {
        let len = x.shape()[1];
        x.reshape(&[1, len, heads, self.head_dim]).transpose(1, 2)
    }

    fn layer_forward(&self, layer: &Layer<T>, h: &T, rope: &T::Rope, mask: Option<&T>) -> T {
        let len = h.shape()[1];
        let n = layer.input_norm.forward(h);
        let q = self
            .split_heads(&n.linear(&layer.q), self.heads)
            .rope_interleaved(rope, 0);
        let k = self
            .split_heads(&n.linear(&layer.k), self.kv_heads)
            .rope_interleaved(rope, 0);
        let v = self.split_heads(&n.linear(&layer.v), self.kv_heads);
        let scale = 1.0 / (self.head_dim as f64).sqrt();
        let attended = T::attention(&q, &k, &v, mask, mask.is_none(), scale)
            .transpose(1, 2)
            .reshape(&[1, len, self.heads * self.head_dim])
            .linear(&layer.o);
        let h = h.add(&attended.mul(&layer.attention_scale));
        let mlp = layer
            .post_attention_norm
            .forward(&h)
            .linear(&layer.fc1)
            .gelu()
            .linear(&layer.fc2);
        h.add(&mlp.mul(&layer.mlp_scale))
    }
}

#[cfg(test)]
mod tests {
    use super::window_bias;

    #[test]
    fn a_query_sees_itself_and_the_window_before_it() {
        assert_eq!(window_bias(3, 3), None);
        let bias = window_bias(4, 2).unwrap();
        let visible: Vec<Vec<usize>> = bias
            .chunks(4)
            .map(|row| (0..4).filter(|&j| row[j] == 0.0).collect())
            .collect();
        assert_eq!(visible, [vec![0], vec![0, 1], vec![1, 2], vec![2, 3]]);
        assert!(bias.iter().all(|&b| b == 0.0 || b == f32::NEG_INFINITY));
    }
}
