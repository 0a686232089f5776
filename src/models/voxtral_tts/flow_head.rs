//! The flow-matching head: turns one backbone hidden state into a frame of 37 codes.
//! Semantic code by masked argmax (f32); acoustic codes by 7 Euler steps of a 3-layer
//! bidirectional transformer with classifier-free guidance, then FSQ rounding.

use super::keys;
use super::params::{Config, END_AUDIO_CODE, NUM_AUDIO_SPECIAL_CODES};
use crate::nn::decoder::LayerKeys;
use crate::nn::layers::{
    time_embedding, weight, AttentionDims, AttentionProj, FeedForward, Loader, RmsNorm,
};
use crate::nn::LoadError;
use crate::tensor::{DType, Products, Tensor};
use std::cell::RefCell;

/// Classifier-free guidance weight of the conditional velocity.
pub const CFG_ALPHA: f32 = 1.2;

struct FlowLayer<T> {
    attention_norm: RmsNorm<T>,
    attention: AttentionProj<T>,
    ffn_norm: RmsNorm<T>,
    feed_forward: FeedForward<T>,
}

impl<T: Tensor> FlowLayer<T> {
    /// The query, key and value projections of tokens `x` `[b, tokens, dim]`, side by side
    /// in the last dimension: each token's depend on that token alone.
    fn projections(&self, x: &T) -> T {
        self.attention.qkv_joined(&self.attention_norm.forward(x))
    }

    /// Runs `x` `[b, tokens, dim]` through the layer, every token attending to every token, and
    /// returns the outputs of the first `queries` tokens only. Each token's output depends on
    /// the others only through attention, so the rows left out need no query, output
    /// projection or feed-forward: the last layer computes only the token the head reads.
    /// `projections`, where given, are `x`'s from [`FlowLayer::projections`].
    fn forward(&self, x: &T, projections: Option<&T>, queries: usize) -> T {
        let a = &self.attention;
        let first = |t: &T| {
            if queries == t.shape()[1] {
                t.clone()
            } else {
                t.narrow(1, 0, queries)
            }
        };
        let (q, k, v) = match projections {
            Some(p) => {
                let (q, k, v) = a.split_qkv(p);
                (first(&q), k, v)
            }
            // One product for q, k and v where every token is a query.
            None if queries == x.shape()[1] => a.qkv(&self.attention_norm.forward(x)),
            None => {
                let n = self.attention_norm.forward(x);
                let (k, v) = a.kv(&n);
                (a.q(&first(&n)), k, v)
            }
        };
        let q = a.split_heads(&q, a.n_heads);
        let k = a.split_heads(&k, a.n_kv_heads);
        let v = a.split_heads(&v, a.n_kv_heads);
        let h = a.merge_heads_add(&T::attention(&q, &k, &v, None, false, a.scale()), &first(x));
        self.feed_forward
            .forward_add(&self.ffn_norm.forward(&h), &h)
    }
}

pub struct FlowHead<T: Tensor> {
    semantic_out: T,
    semantic_mask: T,
    acoustic_out: T,
    input_projection: T,
    llm_projection: T,
    /// `time_projection(time_embedding(t_i))` for each Euler step, `[1, 1, dim]`.
    time_table: Vec<T>,
    /// The first layer's projections of each step's time token, `[1, 1, q + 2 kv]`.
    time_projections: Vec<T>,
    dt: f32,
    layers: Vec<FlowLayer<T>>,
    norm: RmsNorm<T>,
    alpha: f32,
    beta: f32,
    levels: usize,
    n_acoustic: usize,
    dim: usize,
    /// Width of the first layer's joined projections (q + 2 kv).
    projections: usize,
    dtype: DType,
    device: T::Device,
    buffers: RefCell<Option<EulerBuffers<T>>>,
}

/// The tensors a frame's Euler steps read and write, allocated once for up to `rows` streams
/// and written in place (the fixed inputs and outputs a captured CUDA graph needs). A batch of
/// `b` streams uses the first `b` rows of `state` and `codes`, and the `2b` rows of `tokens`
/// from `rows - b`: conditional rows end at `rows`, unconditional ones start there, so the
/// batch's rows are one contiguous block in the reference's order (conditional first).
struct EulerBuffers<T> {
    rows: usize,
    /// The ODE state, `[rows, n_acoustic]` f32: the noise copied in, then each step's update.
    state: T,
    /// The flow transformer's three input tokens per row, `[2 rows, 3, dim]`: the state's
    /// projection, the time step's embedding and the hidden state's projection. That last is
    /// zero for the unconditional rows, written once here.
    tokens: T,
    /// The first layer's query, key and value projections of `tokens`, `[2 rows, 3, q + 2 kv]`.
    /// A token's projections depend on it alone, so each distinct token is projected once:
    /// the state's per step for both halves, the time step's at load, the hidden state's once
    /// per frame; the unconditional rows' zero hidden state projects to the zeros left here.
    projections: T,
    /// Semantic code and acoustic levels per row, `[rows, 1 + n_acoustic]` f32: one read.
    codes: T,
}

impl<T: Tensor> EulerBuffers<T> {
    fn new(head: &FlowHead<T>, rows: usize) -> Self {
        let device = &head.device;
        EulerBuffers {
            rows,
            state: T::zeros(device, &[rows, head.n_acoustic], DType::F32),
            tokens: T::zeros(device, &[2 * rows, 3, head.dim], head.dtype),
            projections: T::zeros(device, &[2 * rows, 3, head.projections], head.dtype),
            codes: T::zeros(device, &[rows, 1 + head.n_acoustic], DType::F32),
        }
    }
}

/// The semantic head's weight `[rows, dim]`, which multiplies the hidden state in f32: where
/// the checkpoint stores it in bf16 and the backend packs it, packed as stored (f32 rows times
/// the packed weight are the products with its exact widening to f32, at half the bytes read
/// each frame: 17 MB of a mid-size model's, 51 MB of the full one's); elsewhere widened to f32
/// at load.
fn semantic_head<T: Tensor>(
    l: &Loader<T>,
    key: &str,
    rows: usize,
    dim: usize,
) -> Result<T, LoadError> {
    let shape = [rows, dim];
    if T::is_cpu(l.device) && l.stored_dtype(key, &shape)? == DType::BF16 {
        let stored = l.tensor_as(key, &shape, DType::BF16)?;
        if let Some(packed) = T::pack_for_few_rows(&[&stored], Products::FloatRows) {
            return Ok(packed);
        }
    }
    l.tensor_as(key, &shape, DType::F32)
}

impl<T: Tensor> FlowHead<T> {
    pub fn load(l: &Loader<T>, cfg: &Config) -> Result<Self, LoadError> {
        // Its products take six rows per stream, seven times a frame: compute-bound on a CPU
        // with a few streams, so its matrices are packed for that.
        let l = &l.packing(Products::FewRows);
        let at = cfg.flow();
        let am = cfg.audio_model();
        let (dim, n_ac) = (at.dim, am.n_acoustic_codebook);
        let p = keys::FLOW_HEAD;
        let dims = AttentionDims {
            dim,
            n_heads: at.n_heads,
            n_kv_heads: at.n_kv_heads,
            head_dim: at.head_dim,
        };
        let norm = |module: &str| RmsNorm::load(l, &weight(module), dim, at.norm_eps);
        let layers = (0..at.n_layers)
            .map(|i| {
                let keys = LayerKeys::mistral(&format!("{p}.layers.{i}"));
                Ok(FlowLayer {
                    attention_norm: norm(&keys.attention_norm)?,
                    attention: AttentionProj::load(l, &keys.attention, &dims)?,
                    ffn_norm: norm(&keys.ffn_norm)?,
                    feed_forward: FeedForward::load(l, &keys.feed_forward, dim, at.hidden_dim)?,
                })
            })
            .collect::<Result<Vec<_>, LoadError>>()?;

        let rows = cfg.semantic_head_rows;
        // Code 0 (EMPTY_AUDIO) and the padding rows can never be predicted; 1 is END_AUDIO.
        let valid_end = NUM_AUDIO_SPECIAL_CODES + am.semantic_codebook_size;
        let mask: Vec<f32> = (0..rows)
            .map(|i| {
                if i == 0 || i >= valid_end {
                    f32::NEG_INFINITY
                } else {
                    0.0
                }
            })
            .collect();

        // Times t_i = i/steps and a constant dt = 1/steps, in f32.
        let steps = cfg.euler_steps;
        let dtype = l.dtype;
        let times: Vec<f32> = (0..steps).map(|i| i as f32 / steps as f32).collect();
        let dt = 1.0 / steps as f32;
        let time_projection = l.tensor(&format!("{p}.time_projection.weight"), &[dim, dim])?;
        let time_table: Vec<T> = times
            .iter()
            .map(|&t| {
                l.from_f32(&time_embedding(t, dim), &[1, 1, dim])
                    .linear(&time_projection)
            })
            .collect();

        let first = layers
            .first()
            .expect("the config has at least one flow layer");
        let time_projections: Vec<T> = time_table.iter().map(|t| first.projections(t)).collect();
        let projections = time_projections[0].shape()[2];

        let alpha = CFG_ALPHA;
        Ok(FlowHead {
            semantic_out: semantic_head(l, keys::SEMANTIC_HEAD, rows, dim)?,
            semantic_mask: T::from_f32(l.device, &mask, &[rows], DType::F32),
            acoustic_out: l.tensor(
                &format!("{p}.acoustic_codebook_output.weight"),
                &[n_ac, dim],
            )?,
            input_projection: l.tensor(&format!("{p}.input_projection.weight"), &[dim, n_ac])?,
            llm_projection: l
                .tensor(&format!("{p}.llm_projection.weight"), &[dim, at.input_dim])?,
            time_table,
            time_projections,
            dt,
            layers,
            norm: RmsNorm::load(l, &format!("{p}.norm.weight"), dim, at.norm_eps)?,
            alpha,
            // 1 - alpha computed in f32, as the reference does (1 ulp from f32(-0.2)).
            beta: 1.0 - alpha,
            levels: am.acoustic_codebook_size,
            n_acoustic: n_ac,
            dim,
            projections,
            dtype,
            device: l.device.clone(),
            buffers: RefCell::new(None),
        })
    }

    pub fn n_acoustic(&self) -> usize {
        self.n_acoustic
    }

    /// Codes (with their +2 offset) for each row of `hidden` `[b, dim]`, starting the ODE from
    /// `noise` (`[b, n_acoustic]` f32 on the model's device, already scaled). Row-major
    /// `[b][1 + n_acoustic]`.
    pub fn sample(&self, hidden: &T, noise: &T) -> Vec<Vec<u32>> {
        let codes = self.sample_codes(hidden, noise);
        // One evaluation per frame (lazy backends): both heads and every Euler step.
        T::eval(&[&codes]);
        self.frames(&codes.to_vec_f32())
    }

    /// Makes the buffers of `sample` hold at least `rows` rows now: a captured graph reads and
    /// writes the buffers it saw, so none may be replaced after a capture.
    pub fn reserve(&self, rows: usize) {
        let mut slot = self.buffers.borrow_mut();
        if slot.as_ref().is_none_or(|buffers| buffers.rows < rows) {
            *slot = Some(EulerBuffers::new(self, rows));
        }
    }

    /// [`FlowHead::sample`] up to the codes on the device: the semantic code and the acoustic
    /// levels per row, `[b, 1 + n_acoustic]` f32, a view of the head's buffers (overwritten by
    /// the next call). No host work once the buffers hold `b` rows ([`FlowHead::reserve`]).
    pub fn sample_codes(&self, hidden: &T, noise: &T) -> T {
        let b = hidden.shape()[0];
        assert_eq!(
            noise.shape(),
            [b, self.n_acoustic],
            "noise must hold n_acoustic values per row"
        );
        self.reserve(b);
        let mut slot = self.buffers.borrow_mut();
        let buffers = slot.as_mut().expect("reserved above");
        let logits = hidden
            .to_dtype(DType::F32)
            .linear(&self.semantic_out)
            .add(&self.semantic_mask);
        // Semantic ids as f32 (exact below 2^24) beside the acoustic levels: the frame's
        // codes come to the host in one read, the step's only synchronisation.
        let semantic = logits.argmax_last().to_dtype(DType::F32).reshape(&[b, 1]);
        let levels = self.acoustic(buffers, hidden, noise);
        buffers.codes.write_at(&[0, 0], &semantic);
        buffers.codes.write_at(&[0, 1], &levels);
        buffers.codes.narrow(0, 0, b)
    }

    /// The codes the last [`FlowHead::sample_codes`] (or a replay of it) wrote for its
    /// first `rows` rows.
    pub fn codes_view(&self, rows: usize) -> T {
        let buffers = self.buffers.borrow();
        let buffers = buffers.as_ref().expect("sampled before");
        buffers.codes.narrow(0, 0, rows)
    }

    /// Frames of codes (with their +2 offset) from [`FlowHead::sample_codes`]'s values read to
    /// the host, row-major.
    pub fn frames(&self, codes: &[f32]) -> Vec<Vec<u32>> {
        codes
            .chunks_exact(1 + self.n_acoustic)
            .map(|row| {
                let semantic = row[0] as u32;
                // An END frame carries EMPTY acoustic codes, as in the reference.
                let ended = semantic == END_AUDIO_CODE;
                let acoustic = row[1..]
                    .iter()
                    .map(|&level| if ended { 0 } else { level as u32 });
                std::iter::once(semantic)
                    .chain(acoustic.map(|level| level + NUM_AUDIO_SPECIAL_CODES as u32))
                    .collect()
            })
            .collect()
    }

    /// FSQ levels (before the +2 offset) `[b, n_acoustic]` as floats.
    fn acoustic(&self, buffers: &mut EulerBuffers<T>, hidden: &T, noise: &T) -> T {
        let b = hidden.shape()[0];
        let (conditional, unconditional) = (buffers.rows - b, buffers.rows);
        // The projections of the conditional rows; the unconditional rows see a zero hidden
        // state, whose projection is the zeros already in the buffer.
        let llm = hidden
            .linear(&self.llm_projection)
            .reshape(&[b, 1, self.dim]);
        let first = &self.layers[0];
        buffers.tokens.write_at(&[conditional, 2, 0], &llm);
        buffers
            .projections
            .write_at(&[conditional, 2, 0], &first.projections(&llm));
        // The ODE state, the guidance mix and FSQ stay in f32 whatever the compute dtype: it
        // is 36 values per frame, and bf16 rounding here would move codes across FSQ levels.
        buffers.state.write_at(&[0, 0], noise);
        let steps = self.time_table.len();
        let mut x = buffers.state.narrow(0, 0, b);
        for (i, (t, t_projections)) in self
            .time_table
            .iter()
            .zip(&self.time_projections)
            .enumerate()
        {
            // Both halves see the same state.
            let xb = x
                .to_dtype(self.dtype)
                .linear(&self.input_projection)
                .reshape(&[b, 1, self.dim]);
            let xb_projections = first.projections(&xb);
            for half in [conditional, unconditional] {
                buffers.tokens.write_at(&[half, 0, 0], &xb);
                buffers.projections.write_at(&[half, 0, 0], &xb_projections);
            }
            buffers
                .tokens
                .write_at(&[conditional, 1, 0], &t.broadcast_to(&[2 * b, 1, self.dim]));
            buffers.projections.write_at(
                &[conditional, 1, 0],
                &t_projections.broadcast_to(&[2 * b, 1, self.projections]),
            );
            let mut h = buffers.tokens.narrow(0, conditional, 2 * b);
            let projections = buffers.projections.narrow(0, conditional, 2 * b);
            // The velocity is read from the first token (the state's) of the last layer.
            let last = self.layers.len() - 1;
            for (j, layer) in self.layers.iter().enumerate() {
                let given = (j == 0).then_some(&projections);
                h = layer.forward(&h, given, if j == last { 1 } else { 3 });
            }
            let v = self
                .norm
                .forward(&h)
                .reshape(&[2 * b, self.dim])
                .linear(&self.acoustic_out)
                .to_dtype(DType::F32);
            let v = v
                .narrow(0, 0, b)
                .scale(self.alpha)
                .add(&v.narrow(0, b, b).scale(self.beta));
            x = x.add(&v.scale(self.dt));
            if i + 1 < steps {
                buffers.state.write_at(&[0, 0], &x);
                x = buffers.state.narrow(0, 0, b);
            }
        }
        let levels = (self.levels - 1) as f32;
        x.clamp(-1.0, 1.0)
            .add_scalar(1.0)
            .scale(0.5)
            .scale(levels)
            .round()
    }
}
