//! The code predictor (spec section 7): per frame, codebooks 1..15 from the talker's last
//! hidden state and codebook 0. A fresh cache every frame: a 2-position prefill
//! `[past_hidden, E(c0)]`, then one step per codebook, each read by its own head. Its inputs
//! are in talker width; the 1.7B projects them down (`small_to_mtp_projection`).

use super::config::CodePredictorConfig;
use super::sampling::SampleError;
use super::talker::decoder_dims;
use crate::nn::decoder::{Decoder, DecoderStyle};
use crate::nn::kv_pool::KvPool;
use crate::nn::layers::{Linear, Loader};
use crate::nn::LoadError;
use crate::tensor::quantized::QuantFormat;
use crate::tensor::{DType, Tensor};
use std::cell::RefCell;

pub struct CodePredictor<T: Tensor> {
    /// Codebooks 1..15, `[vocab, talker hidden]` each.
    codec_embedding: Vec<T>,
    /// Talker width to the predictor's, where they differ.
    projection: Option<Linear<T>>,
    decoder: Decoder<T>,
    /// One head per predicted codebook.
    lm_head: Vec<T>,
    /// One slot, reused by every frame: frames run one at a time.
    pool: RefCell<KvPool<T>>,
    device: T::Device,
}

impl<T: Tensor> CodePredictor<T> {
    /// Loads `talker.code_predictor.*` (`l` is scoped there) for a talker `talker_hidden` wide.
    /// The decoder layers' linear weights are stored in `quantize` where the backend
    /// multiplies it; embeddings and heads stay as stored.
    pub fn load(
        l: &Loader<T>,
        quantize: Option<QuantFormat>,
        c: &CodePredictorConfig,
        talker_hidden: usize,
        dtype: DType,
    ) -> Result<Self, LoadError> {
        let predicted = c.num_code_groups - 1;
        // The prefill's 2 positions and one per later codebook.
        let positions = c.num_code_groups;
        let dims = decoder_dims(
            c.hidden_size,
            c.intermediate_size,
            c.num_hidden_layers,
            (c.num_attention_heads, c.num_key_value_heads, c.head_dim),
            c.rms_norm_eps,
            c.rope_theta,
            positions,
        );
        let decoder = Decoder::load_style(
            &l.quantizing(quantize),
            "model.",
            &dims,
            DecoderStyle::Qwen3,
        )?;
        let pool = decoder.new_pool(dtype, 1, positions);
        Ok(CodePredictor {
            codec_embedding: (0..predicted)
                .map(|j| {
                    l.tensor(
                        &format!("model.codec_embedding.{j}.weight"),
                        &[c.vocab_size, talker_hidden],
                    )
                })
                .collect::<Result<_, _>>()?,
            projection: if c.hidden_size != talker_hidden {
                Some(Linear::load(
                    l,
                    "small_to_mtp_projection",
                    c.hidden_size,
                    talker_hidden,
                    true,
                )?)
            } else {
                None
            },
            decoder,
            lm_head: (0..predicted)
                .map(|j| {
                    l.tensor(
                        &format!("lm_head.{j}.weight"),
                        &[c.vocab_size, c.hidden_size],
                    )
                })
                .collect::<Result<_, _>>()?,
            pool: RefCell::new(pool),
            device: l.device.clone(),
        })
    }

    /// Codebook `k`'s (1..=15) embedding of `code`, `[1, talker hidden]`.
    pub fn embed(&self, k: usize, code: u32) -> T {
        let id = T::from_i64(&self.device, &[i64::from(code)], &[1]);
        self.codec_embedding[k - 1].embedding(&id)
    }

    fn project(&self, x: &T) -> T {
        match &self.projection {
            Some(p) => p.forward(x),
            None => x.clone(),
        }
    }

    /// Codebooks 1..15 of one frame from the talker's `past_hidden` and `E(c0)` (`[1, 1,
    /// hidden]` each). `choose` turns each head's raw logits into a code, given the codes
    /// chosen before it in this frame.
    pub fn predict(
        &self,
        past_hidden: &T,
        c0_embedding: &T,
        mut choose: impl FnMut(&mut [f32], &[u32]) -> Result<u32, SampleError>,
    ) -> Result<Vec<u32>, SampleError> {
        let mut pool = self.pool.borrow_mut();
        let mut slot = pool
            .acquire()
            .unwrap_or_else(|| unreachable!("the slot is given back after every frame"));
        let width = past_hidden.shape()[2];
        let mut run = || {
            let x = self.project(&T::cat(&[past_hidden, c0_embedding], 1));
            let mut h = self.decoder.forward(&x, &mut pool, &mut [&mut slot]);
            let mut codes = Vec::with_capacity(self.lm_head.len());
            for (j, head) in self.lm_head.iter().enumerate() {
                let last = h.narrow(1, h.shape()[1] - 1, 1);
                let mut logits = last.linear(head).to_vec_f32();
                let code = choose(&mut logits, &codes)?;
                codes.push(code);
                if j + 1 < self.lm_head.len() {
                    let x = self.project(&self.embed(j + 1, code).reshape(&[1, 1, width]));
                    h = self.decoder.forward(&x, &mut pool, &mut [&mut slot]);
                }
            }
            Ok(codes)
        };
        let codes = run();
        pool.release(&slot);
        codes
    }
}
