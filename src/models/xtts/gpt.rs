//! XTTS-v2's GPT (coqui-tts `GPT`, `GPT2InferenceModel`; docs/xtts-v2-spec.md §2, §5): a
//! Hugging Face GPT-2 without its own token and position tables, fed
//! `[conditioning latents; text embeddings; audio embeddings]`, each embedding plus its own
//! learned position (text from 0, audio from 0 at the start code), and decoded code by code.
//!
//! The prompt is the 32 conditioning latents, `[START] text [STOP]` and the start code 1024.
//! Each step's hidden state (after GPT-2's `ln_f`) goes through `final_norm`: that is the
//! step's latent, which HiFi-GAN reads, and `mel_head` of it gives the code logits. The
//! reference computes the latents in a second pass over the codes; causal attention makes them
//! the decode-time ones (§5), so they are kept as decoding goes.

use super::gpt_config::GptConfig;
use super::keys;
use super::layers::{gelu_tanh, LayerNorm, Projection};
use crate::nn::layer_probe;
use crate::nn::layers::{Linear, Loader};
use crate::nn::sampling::{penalize, pick, SampleError, Sampling, Uniforms};
use crate::nn::LoadError;
use crate::tensor::quantized::QuantFormat;
use crate::tensor::Tensor;

/// One GPT-2 block: pre-norm attention and MLP (`gelu_new`), both residual.
struct Block<T> {
    ln_1: LayerNorm<T>,
    c_attn: Projection<T>,
    c_proj: Projection<T>,
    ln_2: LayerNorm<T>,
    c_fc: Projection<T>,
    mlp_proj: Projection<T>,
}

/// Where a GPT-2 block's modules are stored (Hugging Face's names), each holding a `.weight`
/// and a `.bias`: what the loader reads and the test checkpoint writes.
pub struct BlockKeys {
    pub ln_1: String,
    pub c_attn: String,
    pub c_proj: String,
    pub ln_2: String,
    pub c_fc: String,
    pub mlp_proj: String,
}

impl BlockKeys {
    /// Block `i`'s, under the GPT's prefix (`gpt.h.{i}`).
    pub fn new(gpt_prefix: &str, i: usize) -> Self {
        let p = |name: &str| format!("{gpt_prefix}gpt.h.{i}.{name}");
        BlockKeys {
            ln_1: p("ln_1"),
            c_attn: p("attn.c_attn"),
            c_proj: p("attn.c_proj"),
            ln_2: p("ln_2"),
            c_fc: p("mlp.c_fc"),
            mlp_proj: p("mlp.c_proj"),
        }
    }
}

impl<T: Tensor> Block<T> {
    fn load(l: &Loader<T>, keys: &BlockKeys, dim: usize) -> Result<Self, LoadError> {
        Ok(Block {
            ln_1: LayerNorm::load(l, &keys.ln_1, dim)?,
            c_attn: Projection::conv1d_hf(l, &keys.c_attn, dim, 3 * dim)?,
            c_proj: Projection::conv1d_hf(l, &keys.c_proj, dim, dim)?,
            ln_2: LayerNorm::load(l, &keys.ln_2, dim)?,
            c_fc: Projection::conv1d_hf(l, &keys.c_fc, dim, 4 * dim)?,
            mlp_proj: Projection::conv1d_hf(l, &keys.mlp_proj, 4 * dim, dim)?,
        })
    }

    /// `x` `[1, n, dim]`, appending its keys and values to `cache` (`[1, heads, len, hd]`).
    fn forward(&self, x: &T, cache: &mut Option<(T, T)>, heads: usize) -> T {
        let s = x.shape();
        let (n, dim) = (s[1], s[2]);
        let head_dim = dim / heads;
        let qkv = self.c_attn.forward(&self.ln_1.forward(x));
        let split = |i: usize| {
            qkv.narrow(2, i * dim, dim)
                .reshape(&[1, n, heads, head_dim])
                .transpose(1, 2)
        };
        let (q, mut k, mut v) = (split(0), split(1), split(2));
        if let Some((past_k, past_v)) = cache.as_ref() {
            k = T::cat(&[past_k, &k], 2);
            v = T::cat(&[past_v, &v], 2);
        }
        let scale = 1.0 / (head_dim as f64).sqrt();
        let attended = T::attention(&q, &k, &v, None, n > 1, scale)
            .transpose(1, 2)
            .reshape(&[1, n, dim]);
        *cache = Some((k, v));
        self.finish(x, &attended)
    }

    /// One new position per row, `x` `[rows, 1, dim]`: the projections and the MLP over
    /// every row at once (the weights read once), attention per row over its own cache.
    fn decode_rows(&self, x: &T, caches: &mut [&mut Option<(T, T)>], heads: usize) -> T {
        let dim = x.shape()[2];
        let head_dim = dim / heads;
        let qkv = self.c_attn.forward(&self.ln_1.forward(x));
        let scale = 1.0 / (head_dim as f64).sqrt();
        let rows: Vec<T> = caches
            .iter_mut()
            .enumerate()
            .map(|(r, cache)| {
                let row = qkv.narrow(0, r, 1);
                let split = |i: usize| {
                    row.narrow(2, i * dim, dim)
                        .reshape(&[1, 1, heads, head_dim])
                        .transpose(1, 2)
                };
                let (q, mut k, mut v) = (split(0), split(1), split(2));
                if let Some((past_k, past_v)) = cache.as_ref() {
                    k = T::cat(&[past_k, &k], 2);
                    v = T::cat(&[past_v, &v], 2);
                }
                let attended = T::attention(&q, &k, &v, None, false, scale)
                    .transpose(1, 2)
                    .reshape(&[1, 1, dim]);
                **cache = Some((k, v));
                attended
            })
            .collect();
        self.finish(x, &T::cat(&rows.iter().collect::<Vec<_>>(), 0))
    }

    /// The attention output's projection and the MLP, both residual.
    fn finish(&self, x: &T, attended: &T) -> T {
        let x = x.add(&self.c_proj.forward(attended));
        let mlp = self
            .mlp_proj
            .forward(&gelu_tanh(&self.c_fc.forward(&self.ln_2.forward(&x))));
        x.add(&mlp)
    }
}

/// How the codes are chosen.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GenerationParams {
    /// Greedy, or temperature/top-k/top-p sampling (applied only when sampling).
    pub sampling: Sampling,
    /// Hugging Face's multiplicative penalty over every id of the sequence so far: the
    /// prompt's placeholder 1s and the start code 1024 included.
    pub repetition_penalty: f32,
    /// Codes at most (the stop code included); `None`: the model's limit.
    pub max_codes: Option<usize>,
}

/// One sequence being generated: its cache, the hidden state its next code is read from, and
/// its own sampling state (penalty set, uniform draws, limit), so that sequences of different
/// requests step together yet pick exactly the codes each would pick alone.
pub struct GptSequence<T> {
    cache: GptCache<T>,
    /// `ln_f` of the last position, `[1, 1, dim]`: the next code's logits come from it.
    last: T,
    /// What Hugging Face's input_ids hold: placeholder 1s for the embedded prompt, the start
    /// code, then every code so far.
    seen: Vec<u32>,
    codes: Vec<u32>,
    /// One `final_norm` latent per code, row-major `[codes, dim]`, on the host.
    latents: Vec<f32>,
    params: GenerationParams,
    max_codes: usize,
    uniforms: Uniforms,
    prompt_positions: usize,
    done: bool,
}

impl<T> GptSequence<T> {
    pub fn codes(&self) -> &[u32] {
        &self.codes
    }

    /// The latents of every code so far, `[codes, dim]` row-major.
    pub fn latents(&self) -> &[f32] {
        &self.latents
    }

    /// Once it has generated its stop code or reached its limit.
    pub fn is_done(&self) -> bool {
        self.done
    }

    /// Positions of its prompt: the conditioning latents, `[START] text [STOP]`, the start code.
    pub fn prompt_positions(&self) -> usize {
        self.prompt_positions
    }
}

/// A finished generation.
pub struct Generated<T> {
    /// The codes, ending with the stop code unless the limit cut them.
    pub codes: Vec<u32>,
    /// One latent per code, `[1, codes, dim]`: the `final_norm` of the hidden state that
    /// produced it (the reference's `return_latent` output).
    pub latents: T,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum GenerateError {
    #[error("the text is {0} tokens; the model takes fewer than {1}")]
    TextTooLong(usize, usize),
    #[error("max_codes {0} is outside 1..={1}")]
    TooManyCodes(usize, usize),
    #[error("text id {0} is outside the vocabulary of {1}")]
    UnknownTextId(u32, usize),
    #[error("conditioning latents of shape {0:?}, expected [1, N, {1}]")]
    BadConditioning(Vec<usize>, usize),
    #[error(transparent)]
    Sample(#[from] SampleError),
}

pub struct Gpt<T: Tensor> {
    blocks: Vec<Block<T>>,
    ln_f: LayerNorm<T>,
    text_embedding: T,
    text_positions: T,
    mel_embedding: T,
    mel_positions: T,
    final_norm: LayerNorm<T>,
    mel_head: Linear<T>,
    config: GptConfig,
    device: T::Device,
}

/// The keys and values of one sequence, per layer.
pub struct GptCache<T> {
    layers: Vec<Option<(T, T)>>,
}

impl<T: Tensor> Gpt<T> {
    /// `l` at the state dict's root (`gpt.*`). The tensors may point into the checkpoint's
    /// memory maps, which the caller keeps alive as long as the model.
    /// The blocks' linear weights are stored in `quantize` where the backend multiplies it;
    /// embeddings and the head stay as stored.
    pub fn load(
        l: &Loader<T>,
        config: GptConfig,
        quantize: Option<QuantFormat>,
    ) -> Result<Self, LoadError> {
        let a = &config.args;
        let d = a.gpt_n_model_channels;
        let g = l.scoped(&keys::scope(keys::GPT));
        let blocks = g.quantizing(quantize);
        Ok(Gpt {
            blocks: (0..a.gpt_layers)
                .map(|i| Block::load(&blocks, &BlockKeys::new("", i), d))
                .collect::<Result<_, _>>()?,
            ln_f: LayerNorm::load(&g, "gpt.ln_f", d)?,
            text_embedding: g.tensor("text_embedding.weight", &[a.gpt_number_text_tokens, d])?,
            text_positions: g.tensor("text_pos_embedding.emb.weight", &[a.text_positions(), d])?,
            mel_embedding: g.tensor("mel_embedding.weight", &[a.gpt_num_audio_tokens, d])?,
            mel_positions: g.tensor("mel_pos_embedding.emb.weight", &[a.audio_positions(), d])?,
            final_norm: LayerNorm::load(&g, "final_norm", d)?,
            mel_head: Linear::load(&g, keys::MEL_HEAD, a.gpt_num_audio_tokens, d, true)?,
            device: l.device.clone(),
            config,
        })
    }

    pub fn config(&self) -> &GptConfig {
        &self.config
    }

    fn ids(&self, ids: &[u32]) -> T {
        let ids: Vec<i64> = ids.iter().map(|&i| i64::from(i)).collect();
        T::from_i64(&self.device, &ids, &[1, ids.len()])
    }

    fn positions(&self, start: usize, len: usize) -> T {
        let ids: Vec<i64> = (start..start + len).map(|i| i as i64).collect();
        T::from_i64(&self.device, &ids, &[1, len])
    }

    /// The audio code `code` at audio position `position`, `[1, 1, dim]`.
    fn audio_input(&self, code: u32, position: usize) -> T {
        self.mel_embedding
            .embedding(&self.ids(&[code]))
            .add(&self.mel_positions.embedding(&self.positions(position, 1)))
    }

    /// GPT-2 over `x` `[1, n, dim]` after what `cache` holds; `ln_f` of the hidden states.
    fn forward(&self, x: &T, cache: &mut GptCache<T>) -> T {
        let heads = self.config.args.gpt_n_heads;
        let mut h = x.clone();
        for (i, (block, layer)) in self.blocks.iter().zip(cache.layers.iter_mut()).enumerate() {
            h = block.forward(&h, layer, heads);
            layer_probe::record(i, &h);
        }
        self.ln_f.forward(&h)
    }

    /// The prompt: `cond` `[1, N, dim]`, then `[START] text [STOP]` with text positions, then
    /// the start code at audio position 0.
    fn prompt(&self, cond: &T, text: &[u32]) -> Result<T, GenerateError> {
        let a = &self.config.args;
        let shape = cond.shape();
        if shape.len() != 3 || shape[0] != 1 || shape[2] != a.gpt_n_model_channels {
            return Err(GenerateError::BadConditioning(
                shape,
                a.gpt_n_model_channels,
            ));
        }
        if text.len() >= a.gpt_max_text_tokens {
            return Err(GenerateError::TextTooLong(
                text.len(),
                a.gpt_max_text_tokens,
            ));
        }
        if let Some(&bad) = text
            .iter()
            .find(|&&t| t as usize >= a.gpt_number_text_tokens)
        {
            return Err(GenerateError::UnknownTextId(bad, a.gpt_number_text_tokens));
        }
        let mut ids = vec![self.config.start_text_token];
        ids.extend_from_slice(text);
        ids.push(self.config.stop_text_token);
        let text = self
            .text_embedding
            .embedding(&self.ids(&ids))
            .add(&self.text_positions.embedding(&self.positions(0, ids.len())));
        let start = self.audio_input(a.gpt_start_audio_token, 0);
        Ok(T::cat(&[cond, &text, &start], 1))
    }

    /// Prefills `text` (ids without `[START]`/`[STOP]`) spoken as `cond`: a sequence ready
    /// for [`Self::step`]. `uniforms` feed its sampling (one draw per code; greedy draws none).
    pub fn start(
        &self,
        cond: &T,
        text: &[u32],
        params: &GenerationParams,
        uniforms: Uniforms,
    ) -> Result<GptSequence<T>, GenerateError> {
        let a = &self.config.args;
        let limit = a.max_codes();
        let max_codes = params.max_codes.unwrap_or(limit);
        if max_codes == 0 || max_codes > limit {
            return Err(GenerateError::TooManyCodes(max_codes, limit));
        }
        let prompt = self.prompt(cond, text)?;
        let mut cache = GptCache {
            layers: (0..a.gpt_layers).map(|_| None).collect(),
        };
        let hidden = self.forward(&prompt, &mut cache);
        let n = hidden.shape()[1];
        Ok(GptSequence {
            cache,
            last: hidden.narrow(1, n - 1, 1),
            seen: vec![1, a.gpt_start_audio_token],
            codes: Vec::new(),
            latents: Vec::new(),
            params: *params,
            max_codes,
            uniforms,
            prompt_positions: n,
            done: false,
        })
    }

    /// One code for every running sequence of `batch`, together: the heads over all rows,
    /// each row's code picked with its own penalty set and draws, then one GPT pass over the
    /// new codes of the rows that go on. Done sequences are skipped.
    pub fn step(&self, batch: &mut [&mut GptSequence<T>]) -> Result<(), GenerateError> {
        self.step_choosing(batch, |picked| picked)
    }

    /// A step of one sequence fed `reference` instead of the code it picks (teacher forcing,
    /// to measure how far a weight format's predictions drift without compounding). Returns
    /// the code it picked, or `None` if it was done.
    pub fn step_teacher_forced(
        &self,
        sequence: &mut GptSequence<T>,
        reference: u32,
    ) -> Result<Option<u32>, GenerateError> {
        let mut picked = None;
        self.step_choosing(&mut [sequence], |code| {
            picked = Some(code);
            reference
        })?;
        Ok(picked)
    }

    /// [`Self::step`], each picked code passed through `feed` for the code that goes on.
    fn step_choosing(
        &self,
        batch: &mut [&mut GptSequence<T>],
        mut feed: impl FnMut(u32) -> u32,
    ) -> Result<(), GenerateError> {
        let mut running: Vec<&mut GptSequence<T>> = batch
            .iter_mut()
            .filter(|s| !s.done)
            .map(|s| &mut **s)
            .collect();
        if running.is_empty() {
            return Ok(());
        }
        let a = &self.config.args;
        let lasts: Vec<&T> = running.iter().map(|s| &s.last).collect();
        let latents = self.final_norm.forward(&T::cat(&lasts, 0));
        let scores = self.mel_head.forward(&latents).to_vec_f32();
        let latents = latents.to_vec_f32();
        let (vocab, dim) = (a.gpt_num_audio_tokens, a.gpt_n_model_channels);
        for (r, s) in running.iter_mut().enumerate() {
            let mut row = scores[r * vocab..(r + 1) * vocab].to_vec();
            penalize(&mut row, &s.seen, s.params.repetition_penalty);
            let code = feed(pick(&mut row, &s.params.sampling, &mut s.uniforms)?);
            s.codes.push(code);
            s.seen.push(code);
            s.latents
                .extend_from_slice(&latents[r * dim..(r + 1) * dim]);
            s.done = code == a.gpt_stop_audio_token || s.codes.len() == s.max_codes;
        }
        running.retain(|s| !s.done);
        if running.is_empty() {
            return Ok(());
        }
        let codes: Vec<i64> = running
            .iter()
            .map(|s| i64::from(*s.codes.last().expect("a code was just picked")))
            .collect();
        let positions: Vec<i64> = running.iter().map(|s| s.codes.len() as i64).collect();
        let rows = running.len();
        let x = self
            .mel_embedding
            .embedding(&T::from_i64(&self.device, &codes, &[rows, 1]))
            .add(
                &self
                    .mel_positions
                    .embedding(&T::from_i64(&self.device, &positions, &[rows, 1])),
            );
        let heads = a.gpt_n_heads;
        let mut h = x;
        for (l, block) in self.blocks.iter().enumerate() {
            let mut caches: Vec<&mut Option<(T, T)>> =
                running.iter_mut().map(|s| &mut s.cache.layers[l]).collect();
            h = block.decode_rows(&h, &mut caches, heads);
            layer_probe::record(l, &h);
        }
        let h = self.ln_f.forward(&h);
        for (r, s) in running.iter_mut().enumerate() {
            s.last = h.narrow(0, r, 1);
        }
        Ok(())
    }

    /// Codes and latents for `text` (ids without `[START]`/`[STOP]`) spoken as `cond`, one
    /// sequence alone. `uniforms` feed sampling (one draw per code); greedy draws none.
    pub fn generate(
        &self,
        cond: &T,
        text: &[u32],
        params: &GenerationParams,
        uniforms: &mut Uniforms,
    ) -> Result<Generated<T>, GenerateError> {
        let mut sequence = self.start(cond, text, params, uniforms.clone())?;
        while !sequence.done {
            self.step(&mut [&mut sequence])?;
        }
        *uniforms = sequence.uniforms;
        let dim = self.config.args.gpt_n_model_channels;
        let latents = T::from_f32(
            &self.device,
            &sequence.latents,
            &[1, sequence.codes.len(), dim],
            self.mel_embedding.dtype(),
        );
        Ok(Generated {
            codes: sequence.codes,
            latents,
        })
    }
}
