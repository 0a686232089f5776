//! The text decoder (spec §4): the Mistral decoder of `crate::nn::decoder` within its
//! sliding window, each layer's feed-forward norm scaled by `1 + W₂·gelu(W₁·t_cond)` where
//! `t_cond` embeds the transcription delay (in tokens); its input at each position is that
//! position's audio embedding plus the embedding of its token, and its head is
//! `tok_embeddings` (tied) or `output.weight`.

use super::keys;
use super::params::Config;
use crate::nn::decoder::Decoder;
use crate::nn::kv_pool::{KvPool, KvSlot};
use crate::nn::layers::{time_embedding, Loader};
use crate::nn::LoadError;
use crate::tensor::quantized::QuantFormat;
use crate::tensor::{DType, Tensor};

pub struct TextDecoder<T: Tensor> {
    decoder: Decoder<T>,
    /// `[vocab, dim]`: the input embedding, and the head when tied.
    tok_embeddings: T,
    /// `[vocab, dim]` when the head is not tied.
    output: Option<T>,
    dim: usize,
    device: T::Device,
}

impl<T: Tensor> TextDecoder<T> {
    /// Loads from the checkpoint's root (`layers.*`, `norm.weight`, `mm_streams_embeddings.
    /// embedding_module.tok_embeddings.weight`, `output.weight` if untied), conditioned on
    /// the delay of `config` (tekken.json's); RoPE covers `max_positions`.
    /// The layers' linear weights are stored in `quantize` where the backend multiplies it,
    /// and the head in `q8` (an output head is kept at 8 bits at most): the tied table then
    /// serves the embedding's rows dequantized. The conditioning stays as stored.
    pub fn load(
        l: &Loader<T>,
        config: &Config,
        max_positions: usize,
        quantize: Option<QuantFormat>,
    ) -> Result<Self, LoadError> {
        let a = &config.args;
        let dims = config.decoder_dims(max_positions);
        let decoder =
            Decoder::load(&l.quantizing(quantize), "", &dims)?.with_window(a.sliding_window);
        let t_cond = l.from_f32(
            &time_embedding(config.streaming.delay_tokens as f32, a.dim),
            &[1, 1, a.dim],
        );
        let scales = (0..a.n_layers)
            .map(|i| {
                let p = keys::delay_conditioning(i);
                let down = l.tensor(&format!("{p}.0.weight"), &[config.t_cond_dim, a.dim])?;
                let up = l.tensor(&format!("{p}.2.weight"), &[a.dim, config.t_cond_dim])?;
                Ok(t_cond.linear(&down).gelu().linear(&up).add_scalar(1.0))
            })
            .collect::<Result<Vec<T>, LoadError>>()?;
        let head = l.quantizing(quantize.map(|_| QuantFormat::Q8));
        let table = if a.tied_embeddings { &head } else { l };
        let tok_embeddings = table.tensor(keys::TOKEN_EMBEDDINGS, &[a.vocab_size, a.dim])?;
        let output = match a.tied_embeddings {
            true => None,
            false => Some(head.tensor("output.weight", &[a.vocab_size, a.dim])?),
        };
        Ok(TextDecoder {
            decoder: decoder.with_ffn_norm_scales(scales),
            tok_embeddings,
            output,
            dim: a.dim,
            device: l.device.clone(),
        })
    }

    /// A pool of `slots` sequences of up to `positions` positions each.
    pub fn new_pool(&self, dtype: DType, slots: usize, positions: usize) -> KvPool<T> {
        self.decoder.new_pool(dtype, slots, positions)
    }

    /// The decoder's input for `tokens` at the positions of `audio` `[1, len, dim]`: the sum
    /// of the two embeddings.
    pub fn embed(&self, tokens: &[u32], audio: &T) -> T {
        let ids: Vec<i64> = tokens.iter().map(|&t| i64::from(t)).collect();
        let ids = T::from_i64(&self.device, &ids, &[1, ids.len()]);
        self.token_rows(&ids, audio)
    }

    /// The decoder's input for one position of each of several sequences: `tokens[r]` at
    /// the position of `audio` row `r` (`[rows, 1, dim]`), `[rows, 1, dim]`.
    pub fn embed_rows(&self, tokens: &[u32], audio: &T) -> T {
        let ids: Vec<i64> = tokens.iter().map(|&t| i64::from(t)).collect();
        let ids = T::from_i64(&self.device, &ids, &[ids.len(), 1]);
        self.token_rows(&ids, audio)
    }

    /// The embeddings of `ids` plus `audio`, in `audio`'s dtype (a quantized table's rows
    /// come in f32).
    fn token_rows(&self, ids: &T, audio: &T) -> T {
        self.tok_embeddings
            .embedding(ids)
            .to_dtype(audio.dtype())
            .add(audio)
    }

    /// Runs `input` `[1, len, dim]` (from [`embed`](Self::embed)) after what `slot` holds and
    /// returns the logits of its last position, `[1, vocab]`.
    pub fn last_logits(&self, input: &T, pool: &mut KvPool<T>, slot: &mut KvSlot) -> T {
        self.rows_logits(input, pool, &mut [slot])
    }

    /// Runs `input` `[rows, len, dim]`, row `r` after what `slots[r]` holds (one token per
    /// row when there are several: a batched step), and returns the logits of each row's last
    /// position, `[rows, vocab]`.
    pub fn rows_logits(&self, input: &T, pool: &mut KvPool<T>, slots: &mut [&mut KvSlot]) -> T {
        let hidden = self.decoder.forward(input, pool, slots);
        let (rows, len) = (hidden.shape()[0], hidden.shape()[1]);
        let last = hidden.narrow(1, len - 1, 1).reshape(&[rows, self.dim]);
        last.linear(self.output.as_ref().unwrap_or(&self.tok_embeddings))
    }
}
