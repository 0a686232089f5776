//! The Mimi encoder transformer (transformers `MimiTransformerModel`) at 25 Hz: the codec
//! transformer's encoder layers ([`CodecTransformer`]) over a whole clip, a query at `i`
//! seeing keys `i - window < j ≤ i`. No final norm.

use crate::models::qwen3_tts::codec_transformer::{CodecTransformer, Dims, Layers};
use crate::models::qwen3_tts::config::SpeechEncoderConfig;
use crate::nn::layers::Loader;
use crate::nn::mask::sliding_window_bias;
use crate::nn::LoadError;
use crate::tensor::Tensor;

/// The sliding window over `len` positions as a `[len, len]` additive bias; `None` when
/// every query sees all earlier keys (plain causal attention).
fn window_bias(len: usize, window: usize) -> Option<Vec<f32>> {
    (len > window).then(|| sliding_window_bias(0, len, 0, len, Some(window)))
}

pub(super) struct EncoderTransformer<T: Tensor> {
    transformer: CodecTransformer<T>,
}

impl<T: Tensor> EncoderTransformer<T> {
    /// Keys under `encoder.encoder_transformer.`.
    pub fn load(l: &Loader<T>, c: &SpeechEncoderConfig) -> Result<Self, LoadError> {
        let dims = Dims {
            hidden: c.hidden_size,
            intermediate: c.intermediate_size,
            layers: c.num_hidden_layers,
            heads: c.num_attention_heads,
            kv_heads: c.num_key_value_heads,
            head_dim: c.head_dim,
            norm_eps: c.norm_eps,
            window: c.sliding_window,
            rope_theta: c.rope_theta,
        };
        Ok(EncoderTransformer {
            transformer: CodecTransformer::load(l, Layers::Encoder, &dims)?,
        })
    }

    /// `[1, len, hidden]` -> `[1, len, hidden]`, positions from 0.
    pub fn forward(&self, x: &T) -> T {
        let t = &self.transformer;
        let len = x.shape()[1];
        let rope = T::rope_table(&t.device, len, t.head_dim, t.theta);
        let mask = window_bias(len, t.window)
            .map(|bias| T::from_f32(&t.device, &bias, &[1, 1, len, len], t.dtype));
        (0..t.layers()).fold(x.clone(), |h, index| {
            t.layer_forward(index, &h, |q, k, v| {
                let (q, k) = (q.rope_interleaved(&rope, 0), k.rope_interleaved(&rope, 0));
                T::attention(&q, &k, &v, mask.as_ref(), mask.is_none(), t.scale())
            })
        })
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
