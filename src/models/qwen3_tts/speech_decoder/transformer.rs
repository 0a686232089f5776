//! The decoder's pre-transformer (`Qwen3TTSTokenizerV2DecoderTransformerModel`): Linear in,
//! the codec transformer's decoder layers ([`CodecTransformer`]), RMSNorm, Linear out.
//! Attention has no q/k norm, RoPE on rotated halves (θ 10000) and a sliding causal window: a
//! query at position `i` sees keys `i - window < j ≤ i`, from this chunk and the keys a
//! stream kept of the ones before.

use super::convs::Affine;
use super::stream::DecoderStream;
use crate::models::qwen3_tts::codec_transformer::{CodecTransformer, Dims, Layers};
use crate::models::qwen3_tts::config::SpeechDecoderConfig;
use crate::nn::layers::{Loader, RmsNorm};
use crate::nn::mask::sliding_window_mask;
use crate::nn::LoadError;
use crate::tensor::Tensor;

/// Queries per attention call: each sees at most `window` keys, so a long utterance costs
/// blocks of `ATTENTION_BLOCK × (ATTENTION_BLOCK + window)` scores, not `len²`.
const ATTENTION_BLOCK: usize = 256;

/// One block of queries and the keys it may see, with the mask as an additive bias.
struct Block<T> {
    query_start: usize,
    queries: usize,
    key_start: usize,
    keys: usize,
    bias: T,
}

pub(super) struct PreTransformer<T: Tensor> {
    input_proj: Affine<T>,
    transformer: CodecTransformer<T>,
    norm: RmsNorm<T>,
    output_proj: Affine<T>,
}

impl<T: Tensor> PreTransformer<T> {
    /// Keys under `decoder.pre_transformer.`.
    pub fn load(l: &Loader<T>, c: &SpeechDecoderConfig) -> Result<Self, LoadError> {
        let hidden = c.hidden_size;
        let dims = Dims {
            hidden,
            intermediate: c.intermediate_size,
            layers: c.num_hidden_layers,
            heads: c.num_attention_heads,
            kv_heads: c.num_key_value_heads,
            head_dim: c.head_dim,
            norm_eps: c.rms_norm_eps,
            window: c.sliding_window,
            rope_theta: c.rope_theta,
        };
        Ok(PreTransformer {
            input_proj: Affine::load(l, "input_proj", hidden, c.latent_dim)?,
            transformer: CodecTransformer::load(l, Layers::Decoder, &dims)?,
            norm: RmsNorm::load(l, "norm.weight", hidden, c.rms_norm_eps)?,
            output_proj: Affine::load(l, "output_proj", c.latent_dim, hidden)?,
        })
    }

    pub fn layers(&self) -> usize {
        self.transformer.layers()
    }

    /// `[1, len, latent]` -> `[1, len, latent]`, continuing the positions `stream` holds.
    pub fn forward(&self, x: &T, stream: &mut DecoderStream<T>) -> T {
        let t = &self.transformer;
        let len = x.shape()[1];
        let past = stream.past_positions();
        // Positions count from the oldest key kept (see `stream::KvWindow`).
        let rope = T::rope_table(&t.device, past + len, t.head_dim, t.theta);
        let blocks = self.blocks(past, len);
        let mut h = self.input_proj.forward(x);
        for index in 0..t.layers() {
            h = t.layer_forward(index, &h, |q, k, v| {
                self.attend(index, [q, k, v], &rope, &blocks, stream)
            });
        }
        self.output_proj.forward(&self.norm.forward(&h))
    }

    /// Query blocks over `len` new positions after `past` kept ones.
    fn blocks(&self, past: usize, len: usize) -> Vec<Block<T>> {
        let t = &self.transformer;
        let window = t.window;
        (0..len)
            .step_by(ATTENTION_BLOCK)
            .map(|query_start| {
                let queries = ATTENTION_BLOCK.min(len - query_start);
                let first = past + query_start;
                let key_start = (first + 1).saturating_sub(window);
                let keys = first + queries - key_start;
                Block {
                    query_start,
                    queries,
                    key_start,
                    keys,
                    bias: sliding_window_mask(
                        &t.device,
                        t.dtype,
                        (first, queries),
                        (key_start, keys),
                        Some(window),
                    ),
                }
            })
            .collect()
    }

    /// Layer `index`'s attention of this chunk's queries over its keys and the ones `stream`
    /// kept, which it then keeps in their place.
    fn attend(
        &self,
        index: usize,
        [q, k, v]: [T; 3],
        rope: &T::Rope,
        blocks: &[Block<T>],
        stream: &mut DecoderStream<T>,
    ) -> T {
        let t = &self.transformer;
        let len = q.shape()[2];
        let (keys, values) = match stream.take_window(index) {
            Some(w) => (T::cat(&[&w.keys, &k], 2), T::cat(&[&w.values, &v], 2)),
            None => (k, v),
        };
        let total = keys.shape()[2];
        let past = total - len;
        let kept = total.min(t.window - 1);
        stream.keep_window(
            index,
            &keys.narrow(2, total - kept, kept),
            &values.narrow(2, total - kept, kept),
        );
        let q = q.rope_interleaved(rope, past);
        let keys = keys.rope_interleaved(rope, 0);
        let outs: Vec<T> = blocks
            .iter()
            .map(|b| {
                T::attention(
                    &q.narrow(2, b.query_start, b.queries),
                    &keys.narrow(2, b.key_start, b.keys),
                    &values.narrow(2, b.key_start, b.keys),
                    Some(&b.bias),
                    false,
                    t.scale(),
                )
            })
            .collect();
        T::cat(&outs.iter().collect::<Vec<_>>(), 2)
    }
}
