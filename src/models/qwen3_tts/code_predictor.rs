//! The code predictor (spec section 7): per frame, codebooks 1..15 from the talker's last
//! hidden state and codebook 0. A fresh cache every frame: a 2-position prefill
//! `[past_hidden, E(c0)]`, then one step per codebook, each read by its own head. Its inputs
//! are in talker width; the 1.7B projects them down (`small_to_mtp_projection`). The frames
//! of several sessions run together, each in its own slot: every pass reads the weights once
//! for all of them.

use super::config::CodePredictorConfig;
use super::sampling::SampleError;
use super::talker::decoder_dims;
use crate::nn::decoder::{Decoder, DecoderStyle};
use crate::nn::kv_pool::{KvPool, KvSlot};
use crate::nn::layers::{Linear, Loader};
use crate::nn::LoadError;
use crate::tensor::cpu_gemv;
use crate::tensor::quantized::QuantFormat;
use crate::tensor::{DType, Tensor};
use std::cell::RefCell;

/// Sessions whose frames run in one batch at most: the prefill's two rows each stay within
/// the rows of the CPU's few-row products, whose sums do not depend on the batch (a larger
/// one would go to libtorch's GEMM and change a session's rounding).
const MAX_BATCH: usize = cpu_gemv::MAX_ROWS / 2;

pub struct CodePredictor<T: Tensor> {
    /// Codebooks 1..15, `[vocab, talker hidden]` each.
    codec_embedding: Vec<T>,
    /// Talker width to the predictor's, where they differ.
    projection: Option<Linear<T>>,
    decoder: Decoder<T>,
    /// One head per predicted codebook.
    lm_head: Vec<T>,
    /// A slot per session of a batch, reused by every frame.
    pool: RefCell<KvPool<T>>,
    device: T::Device,
}

impl<T: Tensor> CodePredictor<T> {
    /// Loads `talker.code_predictor.*` (`l` is scoped there) for a talker `talker_hidden` wide
    /// that steps up to `sessions` sessions together. The decoder layers' linear weights are
    /// stored in `quantize` where the backend multiplies it; embeddings and heads stay as
    /// stored.
    pub fn load(
        l: &Loader<T>,
        quantize: Option<QuantFormat>,
        c: &CodePredictorConfig,
        talker_hidden: usize,
        (dtype, sessions): (DType, usize),
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
        let pool = decoder.new_pool(dtype, sessions.clamp(1, MAX_BATCH), positions);
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

    /// Codebook `k`'s (1..=15) embeddings of `codes`, `[codes, talker hidden]`.
    pub fn embed(&self, k: usize, codes: &[u32]) -> T {
        let ids: Vec<i64> = codes.iter().map(|&c| i64::from(c)).collect();
        let ids = T::from_i64(&self.device, &ids, &[ids.len()]);
        self.codec_embedding[k - 1].embedding(&ids)
    }

    fn project(&self, x: &T) -> T {
        match &self.projection {
            Some(p) => p.forward(x),
            None => x.clone(),
        }
    }

    /// Codebooks 1..15 of one frame for each of `n` sessions, from the talker's `past_hidden`
    /// and `E(c0)` (`[n, 1, hidden]` each). `choose(r, logits, before)` turns a head's raw
    /// logits for row `r` into its code, given the codes chosen before it in that row's frame.
    pub fn predict(
        &self,
        past_hidden: &T,
        c0_embedding: &T,
        mut choose: impl FnMut(usize, &mut [f32], &[u32]) -> Result<u32, SampleError>,
    ) -> Result<Vec<Vec<u32>>, SampleError> {
        let n = past_hidden.shape()[0];
        let batch = self.pool.borrow().slots();
        let mut frames = Vec::with_capacity(n);
        for start in (0..n).step_by(batch) {
            let rows = batch.min(n - start);
            frames.extend(self.predict_batch(
                &past_hidden.narrow(0, start, rows),
                &c0_embedding.narrow(0, start, rows),
                |r, logits, before| choose(start + r, logits, before),
            )?);
        }
        Ok(frames)
    }

    /// [`Self::predict`] for at most as many sessions as the pool has slots.
    fn predict_batch(
        &self,
        past_hidden: &T,
        c0_embedding: &T,
        mut choose: impl FnMut(usize, &mut [f32], &[u32]) -> Result<u32, SampleError>,
    ) -> Result<Vec<Vec<u32>>, SampleError> {
        let mut pool = self.pool.borrow_mut();
        let shape = past_hidden.shape();
        let (rows, width) = (shape[0], shape[2]);
        let mut slots: Vec<KvSlot> = (0..rows)
            .map(|_| {
                pool.acquire().unwrap_or_else(|| {
                    unreachable!("a batch has a slot per row, given back after every frame")
                })
            })
            .collect();
        let mut run = |pool: &mut KvPool<T>| {
            let mut slot_refs: Vec<&mut KvSlot> = slots.iter_mut().collect();
            let x = self.project(&T::cat(&[past_hidden, c0_embedding], 1));
            let mut h = self.decoder.forward(&x, pool, &mut slot_refs);
            let mut codes = vec![Vec::with_capacity(self.lm_head.len()); rows];
            for (j, head) in self.lm_head.iter().enumerate() {
                let last = h.narrow(1, h.shape()[1] - 1, 1);
                let mut logits = last.linear(head).to_vec_f32();
                let vocab = logits.len() / rows;
                for (r, (row, codes)) in logits.chunks_mut(vocab).zip(&mut codes).enumerate() {
                    let code = choose(r, row, codes)?;
                    codes.push(code);
                }
                if j + 1 < self.lm_head.len() {
                    let next: Vec<u32> = codes.iter().map(|c| c[j]).collect();
                    let x = self.embed(j + 1, &next).reshape(&[rows, 1, width]);
                    h = self
                        .decoder
                        .forward(&self.project(&x), pool, &mut slot_refs);
                }
            }
            Ok(codes)
        };
        let codes = run(&mut pool);
        for slot in &slots {
            pool.release(slot);
        }
        codes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nn::checkpoint::{random_f32_checkpoint, Checkpoint};
    use crate::nn::decoder::FINAL_NORM;
    use crate::nn::layers::{weight, AttentionDims};
    use crate::tensor::tch_backend::TchTensor;
    use crate::tensor::{Layout, TensorData};
    use rand::{Rng, SeedableRng};

    /// The talker's width; the predictor's is half, so the input projection runs. Every
    /// product's inputs are whole q4 blocks (32 values), so q4 stores every layer's weights.
    const TALKER: usize = 64;
    const HIDDEN: usize = 32;
    const VOCAB: usize = 48;

    fn config() -> CodePredictorConfig {
        serde_json::from_value(serde_json::json!({
            "hidden_size": HIDDEN,
            "intermediate_size": 3 * HIDDEN,
            "num_hidden_layers": 2,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "head_dim": 8,
            "hidden_act": "silu",
            "attention_bias": false,
            "rms_norm_eps": 1e-6,
            "rope_theta": 1e6,
            "rope_scaling": null,
            "max_position_embeddings": 64,
            "use_sliding_window": false,
            "sliding_window": null,
            "vocab_size": VOCAB,
            "num_code_groups": 4,
            "repetition_penalty": 1.0,
        }))
        .unwrap()
    }

    /// A random f32 checkpoint of [`config`]'s predictor for a talker `TALKER` wide.
    fn checkpoint(dir: &std::path::Path) -> Checkpoint {
        let c = config();
        let h = c.hidden_size;
        let mut shapes = vec![
            (format!("model.{FINAL_NORM}"), vec![h]),
            ("small_to_mtp_projection.weight".into(), vec![h, TALKER]),
            ("small_to_mtp_projection.bias".into(), vec![h]),
        ];
        for j in 0..c.num_code_groups - 1 {
            shapes.push((
                format!("model.codec_embedding.{j}.weight"),
                vec![VOCAB, TALKER],
            ));
            shapes.push((format!("lm_head.{j}.weight"), vec![VOCAB, h]));
        }
        let attention = AttentionDims {
            dim: h,
            n_heads: c.num_attention_heads,
            n_kv_heads: c.num_key_value_heads,
            head_dim: c.head_dim,
        };
        for i in 0..c.num_hidden_layers {
            let keys = DecoderStyle::Qwen3.layer_keys("model.", i);
            let a = &keys.attention;
            let norms = [
                (&keys.attention_norm, h),
                (&keys.ffn_norm, h),
                (&a.q_norm, c.head_dim),
                (&a.k_norm, c.head_dim),
            ];
            shapes.extend(norms.map(|(module, n)| (weight(module), vec![n])));
            let matrices = a.weights(&attention).into_iter();
            let matrices = matrices.chain(keys.feed_forward.weights(h, c.intermediate_size));
            shapes.extend(matrices.map(|(key, shape)| (key, shape.to_vec())));
        }
        random_f32_checkpoint(&dir.join("code_predictor.safetensors"), &shapes, 11)
    }

    /// Per session: its codes, and the bits of every head's logits for it.
    type Record = (Vec<u32>, Vec<Vec<u32>>);

    /// Five sessions' frames run together (as batches of 3 and 2: the pool has 3 slots) give
    /// each session the logits, bit for bit, and so the codes it gets when its frame runs
    /// alone, in f32, bf16 and with q4 layers.
    #[test]
    fn frames_run_together_equal_each_frame_alone() {
        let _guard = tch::no_grad_guard();
        let dir = tempfile::tempdir().unwrap();
        let ckpt = checkpoint(dir.path());
        let sessions = 5;
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(5);
        let values: Vec<f32> = (0..2 * sessions * TALKER)
            .map(|_| rng.random::<f32>() - 0.5)
            .collect();
        let mut by_dtype = Vec::new();
        for (dtype, quantize) in [
            (DType::F32, None),
            (DType::BF16, None),
            (DType::BF16, Some(QuantFormat::Q4)),
        ] {
            let l = Loader::<TchTensor>::new(&ckpt, &tch::Device::Cpu, dtype);
            let predictor =
                CodePredictor::load(&l, quantize, &config(), TALKER, (dtype, 3)).unwrap();
            let inputs = TchTensor::from_f32(
                &tch::Device::Cpu,
                &values,
                &[2 * sessions, 1, TALKER],
                dtype,
            );
            // Runs sessions `which` together: past hidden state `s`, `E(c0)` row
            // `sessions + s`; each head's code is its logits' argmax.
            let run = |which: &[usize]| -> Vec<Record> {
                let rows = |offset: usize| {
                    let parts: Vec<TchTensor> = which
                        .iter()
                        .map(|&s| inputs.narrow(0, offset + s, 1))
                        .collect();
                    TchTensor::cat(&parts.iter().collect::<Vec<_>>(), 0)
                };
                let mut logits = vec![Vec::new(); which.len()];
                let codes = predictor
                    .predict(&rows(0), &rows(sessions), |r, row, before| {
                        assert_eq!(before.len(), logits[r].len(), "row {r}: one code per head");
                        logits[r].push(row.iter().map(|x| x.to_bits()).collect::<Vec<_>>());
                        let best = (0..row.len())
                            .max_by(|&a, &b| row[a].total_cmp(&row[b]))
                            .unwrap();
                        Ok(best as u32)
                    })
                    .unwrap();
                codes.into_iter().zip(logits).collect()
            };
            let together = run(&(0..sessions).collect::<Vec<_>>());
            for (s, record) in together.iter().enumerate() {
                assert_eq!(record.0.len(), 3, "a code per predicted codebook");
                assert_eq!(&run(&[s])[0], record, "{dtype} {quantize:?}: session {s}");
            }
            by_dtype.push(together);
        }
        assert_ne!(by_dtype[1], by_dtype[2], "q4 stores the layers' weights");
    }
}
