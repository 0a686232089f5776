//! Many utterances decoded together: one KV pool with a slot per utterance, allocated once,
//! and steps that advance every utterance with a position to decode in ONE pass of the text
//! decoder, so its weights are read once for all of them.
//!
//! A step first prefills, one at a time, the utterances whose prompt positions have all
//! arrived, then decodes one position of every other utterance that has its audio embedding,
//! as the rows of one batch. A row has the bits it has alone (`crate::nn::decoder`: the
//! products of a few rows sum in a fixed order, and attention runs per slot), so each
//! utterance decodes the tokens of [`Decoding`](super::transcriber::Decoding), the offline
//! greedy path, whatever the batch it runs in.

use super::transcriber::Transcriber;
use crate::nn::kv_pool::{KvPool, KvSlot};
use crate::tensor::Tensor;

/// One slot per utterance, up to `slots` utterances at once, each of up to the model's
/// `max_positions()`.
pub struct BatchDecoder<'m, T: Tensor> {
    model: &'m Transcriber<T>,
    pool: KvPool<T>,
    prompt: Vec<u32>,
}

/// One utterance being decoded: its slot, the audio embeddings it has not decoded yet and
/// its tokens so far.
pub struct Utterance<T: Tensor> {
    slot: KvSlot,
    /// `[1, n, dim]`: positions received and not decoded yet.
    waiting: Option<T>,
    prefilled: bool,
    tokens: Vec<u32>,
    /// `</s>` was decoded: later positions decode nothing.
    ended: bool,
    /// The prompt's length: positions prefilled at once.
    prompt: usize,
}

impl<T: Tensor> Utterance<T> {
    /// Appends the next positions' audio embeddings, `[1, n, dim]`.
    pub fn feed(&mut self, embeddings: T) {
        if self.ended {
            return;
        }
        self.waiting = Some(match self.waiting.take() {
            Some(waiting) => T::cat(&[&waiting, &embeddings], 1),
            None => embeddings,
        });
    }

    /// Every token decoded so far (one per position from the prompt's last).
    pub fn tokens(&self) -> &[u32] {
        &self.tokens
    }

    /// Positions received and not decoded yet (none once `</s>` is decoded).
    pub fn waiting(&self) -> usize {
        match (&self.waiting, self.ended) {
            (Some(w), false) => w.shape()[1],
            _ => 0,
        }
    }

    /// Whether the next [`BatchDecoder::step`] decodes a position of it: one is waiting,
    /// and before the prefill, every prompt position is.
    pub fn ready(&self) -> bool {
        let waiting = self.waiting();
        waiting > 0 && (self.prefilled || waiting >= self.prompt)
    }

    /// Drops the first `n` waiting positions.
    fn consume(&mut self, n: usize) {
        let waiting = self.waiting.take().expect("positions to consume");
        let left = waiting.shape()[1] - n;
        self.waiting = (left > 0).then(|| waiting.narrow(1, n, left));
    }

    fn take(&mut self, token: u32, eos: u32) {
        self.tokens.push(token);
        self.ended = token == eos;
    }
}

impl<'m, T: Tensor> BatchDecoder<'m, T> {
    /// Allocates the pool: `slots` sequences of the model's `max_positions()` each.
    pub fn new(model: &'m Transcriber<T>, slots: usize) -> Self {
        BatchDecoder {
            pool: model
                .decoder
                .new_pool(model.dtype, slots, model.max_positions()),
            prompt: model.special.prompt(&model.config.streaming),
            model,
        }
    }

    pub fn free_slots(&self) -> usize {
        self.pool.free_slots()
    }

    /// A new utterance in a free slot; `None` when every slot is in use.
    pub fn start(&mut self) -> Option<Utterance<T>> {
        let slot = self.pool.acquire()?;
        Some(Utterance {
            slot,
            waiting: None,
            prefilled: false,
            tokens: Vec::new(),
            ended: false,
            prompt: self.prompt.len(),
        })
    }

    /// Gives the utterance's slot back.
    pub fn end(&mut self, utterance: Utterance<T>) {
        self.pool.release(&utterance.slot);
    }

    /// Decodes at most one position of each of `utterances`: prefills (one pass each) those
    /// whose prompt positions are all in, then one batched pass over the others that have a
    /// position waiting. Returns the number of utterances that decoded a token.
    pub fn step(&mut self, utterances: &mut [&mut Utterance<T>]) -> usize {
        let decoder = &self.model.decoder;
        let eos = self.model.special.eos;
        let p = self.prompt.len();
        let ready: Vec<&mut Utterance<T>> = utterances
            .iter_mut()
            .filter(|u| u.ready())
            .map(|u| &mut **u)
            .collect();
        let (mut rows, prompts): (Vec<_>, Vec<_>) = ready.into_iter().partition(|u| u.prefilled);
        let decoded = rows.len() + prompts.len();
        for u in prompts {
            let audio = u.waiting.as_ref().expect("ready").narrow(1, 0, p);
            let input = decoder.embed(&self.prompt, &audio);
            let logits = decoder.last_logits(&input, &mut self.pool, &mut u.slot);
            u.consume(p);
            u.prefilled = true;
            u.take(logits.argmax_last().to_vec_i64()[0] as u32, eos);
        }
        if rows.is_empty() {
            return decoded;
        }
        let tokens: Vec<u32> = rows
            .iter()
            .map(|u| *u.tokens.last().expect("the prefill decoded a token"))
            .collect();
        let audio: Vec<T> = rows
            .iter()
            .map(|u| u.waiting.as_ref().expect("ready").narrow(1, 0, 1))
            .collect();
        let input = decoder.embed_rows(&tokens, &T::cat(&audio.iter().collect::<Vec<_>>(), 0));
        let mut slots: Vec<&mut KvSlot> = rows.iter_mut().map(|u| &mut u.slot).collect();
        let logits = decoder.rows_logits(&input, &mut self.pool, &mut slots);
        let next = logits.argmax_last().to_vec_i64();
        for (u, token) in rows.iter_mut().zip(next) {
            u.consume(1);
            u.take(token as u32, eos);
        }
        decoded
    }
}
