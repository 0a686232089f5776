//! The decode step (backbone step, then the flow head with its 7 Euler steps) as captured CUDA
//! graphs, with `cuda_graphs = auto` on a CUDA device: one graph per batch bucket and per
//! key length the pooled attention reads, all captured when the model loads (after one warm-up
//! run each) and sharing one memory pool. A step replays the graph of the smallest bucket that
//! holds its rows: its inputs (the fed-back codes' embedding ids, each row's KV slot and
//! position, the noise) are written into the bucket's fixed buffers, padding rows write into
//! a KV slot set aside for them, and the codes are read from the flow head's fixed buffer.
//! Steps no graph fits run eagerly (see [`Eager`]).

use super::{Generation, Voxtral};
use crate::tensor::cuda_graph::{CudaGraph, GraphError};
use crate::tensor::{
    linear_multiply_adds, pool_keys_read, DType, PoolRows, Tensor, POOL_KEYS_BUCKET,
};
use std::cell::Cell;
use std::collections::BTreeMap;
use std::time::Instant;

/// Batch sizes a graph is captured for; a step of fewer rows pads up to the next.
pub const BATCH_BUCKETS: [usize; 7] = [1, 2, 4, 8, 16, 32, 64];

/// The buckets captured for a pool of `sessions`: each up to the first that holds them all.
pub fn buckets_for(sessions: usize) -> Vec<usize> {
    let last = BATCH_BUCKETS
        .iter()
        .position(|&b| b >= sessions)
        .unwrap_or(BATCH_BUCKETS.len() - 1);
    BATCH_BUCKETS[..=last].to_vec()
}

/// The smallest of `buckets` (ascending) that holds `rows`.
pub fn bucket_for(rows: usize, buckets: &[usize]) -> Option<usize> {
    buckets.iter().copied().find(|&b| b >= rows)
}

/// Every key length the pooled attention reads from slots of `positions`
/// ([`pool_keys_read`]): one graph each.
pub fn key_lengths(positions: usize) -> Vec<usize> {
    let mut lengths: Vec<usize> = (1..=positions.div_ceil(POOL_KEYS_BUCKET))
        .map(|i| pool_keys_read(i * POOL_KEYS_BUCKET, positions))
        .collect();
    lengths.dedup();
    lengths
}

/// Why a step runs eagerly although graphs are on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Eager {
    /// A generation's first frame: its hidden state comes from its prompt, not from a
    /// backbone step, so the step's rows do not all run the captured backbone.
    FirstFrame,
    /// More rows than the largest bucket.
    Rows(usize),
    /// A row's slot has no room for the step (the eager step reports it).
    SlotFull,
}

impl Eager {
    fn index(self) -> u8 {
        match self {
            Eager::FirstFrame => 0,
            Eager::Rows(_) => 1,
            Eager::SlotFull => 2,
        }
    }
}

/// The graph a step replays, `(bucket, keys)`, for rows whose slots hold `lengths` positions
/// (`None`: a first frame, not fed back), in slots of `positions` positions.
pub fn choose(
    lengths: &[Option<usize>],
    buckets: &[usize],
    positions: usize,
) -> Result<(usize, usize), Eager> {
    let mut longest = 0;
    for length in lengths {
        let length = length.ok_or(Eager::FirstFrame)?;
        if length >= positions {
            return Err(Eager::SlotFull);
        }
        longest = longest.max(length + 1);
    }
    let bucket = bucket_for(lengths.len(), buckets).ok_or(Eager::Rows(lengths.len()))?;
    Ok((bucket, pool_keys_read(longest, positions)))
}

/// A bucket's fixed inputs and its graphs by key length.
struct Bucket<T> {
    rows: usize,
    /// `[rows, codebooks]` i64: the audio-embedding rows of each row's last frame.
    ids: T,
    /// `[rows]` i64: each row's KV slot and its position in it.
    slot_ids: T,
    position_ids: T,
    /// `[rows, n_acoustic]` f32.
    noise: T,
    graphs: BTreeMap<usize, CudaGraph>,
}

pub struct StepGraphs<T> {
    buckets: Vec<Bucket<T>>,
    /// The KV slot padding rows write into.
    scratch: usize,
    /// An empty graph whose memory pool every step graph shares (one step runs at a time).
    _pool: CudaGraph,
    /// The flow head's multiply-adds per captured step, by bucket (what a replay does).
    flow_multiply_adds: BTreeMap<usize, u64>,
    /// Reasons already logged at info level, by [`Eager::index`].
    logged: Cell<u8>,
}

impl<T> StepGraphs<T> {
    fn buckets(&self) -> Vec<usize> {
        self.buckets.iter().map(|b| b.rows).collect()
    }

    /// Logs why a step runs eagerly: each reason once at info level, then at debug level.
    fn note_eager(&self, reason: Eager) {
        let bit = 1 << reason.index();
        if self.logged.get() & bit == 0 {
            self.logged.set(self.logged.get() | bit);
            tracing::info!(
                ?reason,
                "decode step runs eagerly (no CUDA graph fits it); said once"
            );
        } else {
            tracing::debug!(?reason, "decode step runs eagerly");
        }
    }
}

impl<T: Tensor> Voxtral<T> {
    /// Captures the step graphs, every bucket up to the pool's sessions and every key
    /// length, after `kv` set aside the slot `scratch`. `None` (logged) when a capture fails:
    /// the model then runs eagerly.
    pub(super) fn capture_step_graphs(
        &self,
        pool: CudaGraph,
        scratch: usize,
    ) -> Option<StepGraphs<T>> {
        let started = Instant::now();
        let reserved = T::reserved_device_bytes(&self.device);
        let (sessions, positions) = {
            let kv = self.kv.borrow();
            (kv.slots(), kv.positions())
        };
        let buckets = buckets_for(sessions);
        let largest = *buckets.last().expect("at least one bucket");
        // The flow head's buffers, sized once for any step: none is replaced after a capture.
        self.flow.reserve(largest.max(sessions));
        let width = self.config.codebook_offsets.len();
        let n_acoustic = self.flow.n_acoustic();
        let keys = key_lengths(positions);
        let mut captured = Vec::new();
        let mut flow_multiply_adds = BTreeMap::new();
        for &rows in &buckets {
            let ids = |value: i64| T::from_i64(&self.device, &vec![value; rows], &[rows]);
            let mut bucket = Bucket {
                rows,
                ids: T::from_i64(&self.device, &vec![0; rows * width], &[rows, width]),
                slot_ids: ids(scratch as i64),
                position_ids: ids(0),
                noise: T::zeros(&self.device, &[rows, n_acoustic], DType::F32),
                graphs: BTreeMap::new(),
            };
            for &length in &keys {
                let counted = linear_multiply_adds();
                let graph = T::capture_graph(&self.device, Some(&pool), 1, &mut || {
                    self.graph_step(&bucket, length)
                });
                match graph {
                    Ok(graph) => bucket.graphs.insert(length, graph),
                    Err(error) => {
                        tracing::warn!(%error, rows, keys = length, "capturing the decode step as a CUDA graph failed; it runs eagerly");
                        return None;
                    }
                };
                // Counted by the warm-up and the capture alike.
                flow_multiply_adds.insert(rows, (linear_multiply_adds() - counted) / 2);
            }
            captured.push(bucket);
        }
        let graphs_mib = reserved
            .zip(T::reserved_device_bytes(&self.device))
            .map(|(before, after)| after.saturating_sub(before) as f64 / (1 << 20) as f64);
        tracing::info!(
            buckets = ?buckets,
            key_lengths = keys.len(),
            graphs = buckets.len() * keys.len(),
            memory_mib = graphs_mib,
            kv_scratch_slot_mib = self.kv_bytes_per_position() as f64 * positions as f64 / (1 << 20) as f64,
            seconds = started.elapsed().as_secs_f64(),
            "decode step captured as CUDA graphs"
        );
        Some(StepGraphs {
            buckets: captured,
            scratch,
            _pool: pool,
            flow_multiply_adds,
            logged: Cell::new(0),
        })
    }

    /// What a graph records: the backbone step of the bucket's rows and the flow head over
    /// them, reading and writing fixed tensors only.
    fn graph_step(&self, bucket: &Bucket<T>, keys: usize) {
        let dim = self.config.args.dim;
        let x = self
            .audio_embeddings
            .embedding(&bucket.ids)
            .to_dtype(self.dtype)
            .sum_dim(1)
            .reshape(&[bucket.rows, 1, dim]);
        let rows = PoolRows::on_device(
            bucket.slot_ids.clone(),
            bucket.position_ids.clone(),
            bucket.rows,
            keys,
        );
        let hidden = self
            .backbone
            .step_rows(&x, &mut self.kv.borrow_mut(), &rows)
            .reshape(&[bucket.rows, dim]);
        self.flow.sample_codes(&hidden, &bucket.noise);
    }
}

impl<T: Tensor> Generation<'_, T> {
    /// Runs the step of `active` (every one prefilled, noise drawn: `noise`, row-major) as a
    /// graph: `Ok(true)` when it did, `Ok(false)` when none fits (the caller runs it eagerly).
    pub(super) fn replay_step(
        active: &mut [&mut Generation<'_, T>],
        noise: &[f32],
    ) -> Result<bool, GraphError> {
        let m = active[0].model;
        let Some(graphs) = &m.graphs else {
            return Ok(false);
        };
        let lengths: Vec<Option<usize>> = active
            .iter()
            .map(|g| (!g.frames.is_empty()).then(|| g.slot.len()))
            .collect();
        let positions = m.kv.borrow().positions();
        let (rows, keys) = match choose(&lengths, &graphs.buckets(), positions) {
            Ok(chosen) => chosen,
            Err(reason) => {
                graphs.note_eager(reason);
                return Ok(false);
            }
        };
        let bucket = graphs
            .buckets
            .iter()
            .find(|b| b.rows == rows)
            .expect("chosen among these buckets");
        let graph = bucket
            .graphs
            .get(&keys)
            .expect("every key length is captured");
        let started = Instant::now();
        let n = active.len();
        let padding = rows - n;
        let offsets = &m.config.codebook_offsets;
        let mut ids: Vec<i64> = active
            .iter()
            .flat_map(|g| {
                let frame = g.frames.last().expect("fed back");
                frame
                    .iter()
                    .zip(offsets)
                    .map(|(&c, &o)| (c as usize + o) as i64)
            })
            .collect();
        ids.resize(rows * offsets.len(), 0);
        let slots = active.iter().map(|g| g.slot.index());
        let slots: Vec<i64> = slots
            .chain(std::iter::repeat_n(graphs.scratch, padding))
            .map(|s| s as i64)
            .collect();
        let at = active.iter().map(|g| g.slot.len() as i64);
        let at: Vec<i64> = at.chain(std::iter::repeat_n(0, padding)).collect();
        let mut noise = noise.to_vec();
        noise.resize(rows * m.flow.n_acoustic(), 0.0);
        let upload = |buffer: &T, values: &[i64], shape: &[usize]| {
            let mut buffer = buffer.clone();
            buffer.write_at(
                &vec![0; shape.len()],
                &T::from_i64(&m.device, values, shape),
            );
        };
        upload(&bucket.ids, &ids, &[rows, offsets.len()]);
        upload(&bucket.slot_ids, &slots, &[rows]);
        upload(&bucket.position_ids, &at, &[rows]);
        let noise = T::from_f32(&m.device, &noise, &[rows, m.flow.n_acoustic()], DType::F32);
        bucket.noise.clone().write_at(&[0, 0], &noise);
        graph.replay()?;
        let codes = m.flow.codes_view(n).to_vec_f32();
        let frames = m.flow.frames(&codes);
        let elapsed = started.elapsed();
        let multiply_adds = graphs.flow_multiply_adds.get(&rows).copied().unwrap_or(0);
        for (g, frame) in active.iter_mut().zip(frames) {
            g.slot.advance();
            // The whole step, backbone and flow head together, counts as the backbone's.
            g.times.backbone += elapsed;
            g.times.flow_head_multiply_adds += multiply_adds;
            g.accept(frame);
        }
        Ok(true)
    }
}

#[cfg(all(test, feature = "testkit"))]
mod tests {
    use super::*;
    use crate::engine::{CudaGraphs, EngineOptions};
    use crate::models::voxtral_tts::testkit::{cached_test_model, Preset};
    use crate::models::voxtral_tts::{Noise, SynthesisRequest};
    use crate::tensor::tch_backend::TchTensor;

    /// On the CPU `auto` captures nothing, takes no scratch slot, and gives `off`'s codes.
    #[test]
    fn auto_on_the_cpu_runs_eagerly() {
        let dir = cached_test_model(Preset::Tiny, 0).unwrap();
        let load = |cuda_graphs| {
            let options = EngineOptions {
                max_sessions: 2,
                kv_cache_bytes: 8 << 20,
                cuda_graphs,
                ..EngineOptions::default()
            };
            Voxtral::<TchTensor>::load_for(&dir, &tch::Device::Cpu, DType::F32, &options).unwrap()
        };
        let (off, auto) = (load(CudaGraphs::Off), load(CudaGraphs::Auto));
        assert!(auto.graphs.is_none());
        assert_eq!((auto.free_slots(), off.free_slots()), (2, 2));
        let request = SynthesisRequest {
            text: "Hello there.".into(),
            voice: off.voices().next().unwrap().to_string(),
            max_frames: 6,
            noise: Noise::Seeded {
                seed: 1,
                scale: 1.0,
            },
        };
        let codes = |m: &Voxtral<TchTensor>| m.start(&request).unwrap().finish().unwrap().codes;
        assert_eq!(codes(&auto), codes(&off));
    }

    #[test]
    fn buckets_reach_the_first_that_holds_every_session() {
        assert_eq!(buckets_for(1), [1]);
        assert_eq!(buckets_for(8), [1, 2, 4, 8]);
        assert_eq!(buckets_for(9), [1, 2, 4, 8, 16]);
        assert_eq!(buckets_for(64), BATCH_BUCKETS);
        assert_eq!(buckets_for(200), BATCH_BUCKETS);
        assert_eq!(bucket_for(3, &buckets_for(8)), Some(4));
        assert_eq!(bucket_for(8, &buckets_for(8)), Some(8));
        assert_eq!(bucket_for(65, &BATCH_BUCKETS), None);
    }

    #[test]
    fn key_lengths_are_what_the_pooled_attention_reads() {
        assert_eq!(key_lengths(100), [100]);
        assert_eq!(key_lengths(256), [256]);
        assert_eq!(key_lengths(600), [256, 512, 600]);
        for positions in [1, 255, 257, 2520] {
            let lengths = key_lengths(positions);
            for longest in 1..=positions {
                let keys = pool_keys_read(longest, positions);
                assert!(lengths.contains(&keys), "{positions}: {longest} -> {keys}");
            }
        }
    }

    #[test]
    fn a_step_replays_its_bucket_or_says_why_not() {
        let buckets = buckets_for(8);
        assert_eq!(
            choose(&[Some(10), Some(300), Some(0)], &buckets, 2520),
            Ok((4, 512))
        );
        assert_eq!(choose(&[Some(255)], &buckets, 2520), Ok((1, 256)));
        assert_eq!(choose(&[Some(256)], &buckets, 2520), Ok((1, 512)));
        assert_eq!(choose(&[Some(2519)], &buckets, 2520), Ok((1, 2520)));
        assert_eq!(
            choose(&[Some(4), None], &buckets, 2520),
            Err(Eager::FirstFrame)
        );
        assert_eq!(choose(&[Some(2520)], &buckets, 2520), Err(Eager::SlotFull));
        assert_eq!(choose(&[Some(1); 9], &buckets, 2520), Err(Eager::Rows(9)));
    }
}
