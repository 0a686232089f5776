//! Voxtral-4B-TTS: text + preset voice -> codes -> 24 kHz waveform.
//!
//! A request's path: `prompt` (tokenizer + voice rows) -> `backbone` prefill -> per frame:
//! `flow_head` (codes) -> audio-embedding feedback -> `backbone` step; then `codec`.

pub mod bench;
pub mod catalog;
pub mod codec;
mod engine;
pub mod family;
pub mod flow_head;
pub mod graphs;
pub mod keys;
pub mod params;
mod prompt;
#[cfg(feature = "testkit")]
pub mod testkit;
pub mod voices;

pub use crate::engine::StopReason;
pub use prompt::{Prompter, SpecialIds};

use crate::engine::{CudaGraphs, EngineOptions, PrepareError};
use crate::nn::checkpoint::Checkpoint;
use crate::nn::decoder::{Decoder, DecoderDims};
use crate::nn::kv_pool::{KvPool, KvSlot};
use crate::nn::layers::Loader;
pub use crate::nn::LoadError;
use crate::tensor::{DType, Products, Tensor};
use crate::tokenizers::tekken::Tekken;
use codec::{Codec, CodecError};
use flow_head::FlowHead;
use params::{Config, END_AUDIO_CODE};
use rand::SeedableRng;
use rand_distr::Distribution;
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};
use voices::Voice;

/// Default and hard cap on generated frames (2048 frames = 163.84 s).
pub const DEFAULT_MAX_FRAMES: usize = 2048;

#[derive(Debug, thiserror::Error)]
pub enum SynthError {
    #[error(transparent)]
    Input(#[from] PrepareError),
    #[error("noise array holds {got} values, need {need} ({frames} frames x {width})")]
    NoiseLength {
        got: usize,
        need: usize,
        frames: usize,
        width: usize,
    },
    #[error("noise scale must be finite and >= 0, got {0}")]
    NoiseScale(f32),
    #[error(transparent)]
    Codec(#[from] CodecError),
    #[error("all {0} KV-cache slots are in use")]
    NoFreeSlot(usize),
}

/// Where the flow head's starting noise comes from.
#[derive(Clone, Debug)]
pub enum Noise {
    /// Standard normal draws from a seeded ChaCha8 stream, times `scale` (0 = deterministic).
    Seeded { seed: u64, scale: f32 },
    /// Exactly these values, `n_acoustic` per frame (parity tests against reference goldens).
    Given(Vec<f32>),
}

#[derive(Clone, Debug)]
pub struct SynthesisRequest {
    pub text: String,
    pub voice: String,
    pub max_frames: usize,
    pub noise: Noise,
}

/// Time spent per model part, for benchmarks.
#[derive(Clone, Copy, Debug, Default)]
pub struct StageTimes {
    pub prefill: Duration,
    pub backbone: Duration,
    pub flow_head: Duration,
    pub codec: Duration,
    /// Multiply-adds of the flow head's products, where the backend counts them
    /// (`tensor::linear_multiply_adds`): the whole batch's, as `flow_head` is the whole step's.
    pub flow_head_multiply_adds: u64,
}

pub struct Voxtral<T: Tensor> {
    pub config: Config,
    /// Tokenizer and prompt layout, shared with the request path.
    pub prompter: Arc<Prompter>,
    voices: BTreeMap<String, Voice>,
    tok_embeddings: T,
    audio_embeddings: T,
    backbone: Decoder<T>,
    /// The backbone's keys and values for every session: a session holds a slot.
    kv: RefCell<KvPool<T>>,
    flow: FlowHead<T>,
    codec: Codec<T>,
    device: T::Device,
    dtype: DType,
    /// Prompt tokens an engine-interface session prefills per step.
    prefill_chunk: usize,
    /// Wait for the device at the end of each stage, so that `StageTimes` holds each stage's
    /// device time rather than the time to queue it (benchmarks on CUDA; off when serving,
    /// where the host queues the flow head while the device still runs the backbone).
    synchronized_stages: bool,
    /// The decode step's CUDA graphs (`cuda_graphs = auto` on a CUDA device).
    graphs: Option<graphs::StepGraphs<T>>,
    /// The memory-mapped checkpoint the weights point into; declared last so it outlives them.
    _weights: Vec<Arc<memmap2::Mmap>>,
}

impl<T: Tensor> Voxtral<T> {
    /// Loads a model folder in the published layout: params.json, consolidated.safetensors,
    /// tekken.json and voice_embedding/, with the default options.
    pub fn load(dir: &Path, device: &T::Device, dtype: DType) -> Result<Self, LoadError> {
        Self::load_for(dir, device, dtype, &EngineOptions::default())
    }

    /// [`Voxtral::load`] with `options` (KV pool size, prefill chunks).
    pub fn load_for(
        dir: &Path,
        device: &T::Device,
        dtype: DType,
        options: &EngineOptions,
    ) -> Result<Self, LoadError> {
        let config = Config::from_file(&dir.join("params.json"))?;
        Self::load_with(dir, config, device, dtype, options)
    }

    /// Loads the folder `dir` whose params.json was already read as `config`.
    pub fn load_with(
        dir: &Path,
        config: Config,
        device: &T::Device,
        dtype: DType,
        options: &EngineOptions,
    ) -> Result<Self, LoadError> {
        let tekken_path = dir.join("tekken.json");
        let tokenizer = Tekken::from_file(&tekken_path).map_err(|e| {
            LoadError::invalid(
                tekken_path.display().to_string(),
                "(tokenizer)",
                e.to_string(),
            )
        })?;
        let special = SpecialIds::lookup(&tokenizer, &tekken_path.display().to_string(), &config)?;
        let a = &config.args;
        if tokenizer.vocab_size() > a.vocab_size {
            return Err(LoadError::invalid(
                tekken_path.display().to_string(),
                "config.default_vocab_size",
                format!(
                    "{} exceeds params.json vocab_size {}",
                    tokenizer.vocab_size(),
                    a.vocab_size
                ),
            ));
        }
        let voices = voices::load_voices(dir, tokenizer.voice_num_audio_tokens(), a.dim)?;
        let ckpt = Checkpoint::open(&dir.join("consolidated.safetensors"))?;
        let l = Loader::<T>::new(&ckpt, device, dtype);
        // Embedding tables stay in their stored dtype: rows are converted after lookup.
        let tok_embeddings = l.tensor_as_stored(keys::TOKEN_EMBEDDINGS, &[a.vocab_size, a.dim])?;
        let audio_embeddings = l.tensor_as_stored(
            keys::AUDIO_EMBEDDINGS,
            &[config.audio_embedding_rows, a.dim],
        )?;
        let (slots, positions) = kv_slots(&config, dtype, options)?;
        let dims = DecoderDims {
            max_positions: positions,
            ..config.decoder_dims()
        };
        // Its steps multiply a row per stream: packed, on CPUs where that costs its prompts
        // nothing, they run faster from one stream on (docs/performance.md).
        let quantized = l.quantizing(options.quantize);
        let backbone = Decoder::load(&quantized.packing(Products::AlsoManyRows), "", &dims)?;
        // With graphs, one slot more, set aside for the padding rows of captured steps.
        let probe = match options.cuda_graphs {
            CudaGraphs::Off => None,
            CudaGraphs::Auto => T::capture_graph(device, None, 0, &mut || {})
                .inspect_err(|reason| {
                    tracing::info!(%reason, "cuda_graphs = auto: decode steps run eagerly")
                })
                .ok(),
        };
        let mut kv = backbone.new_pool(dtype, slots + usize::from(probe.is_some()), positions);
        let scratch = probe.as_ref().and_then(|_| kv.set_aside());
        // The flow head stays in the compute dtype: its products of six rows per stream run
        // faster from its packed bf16 weights than from quantized ones (docs/quantization.md).
        let flow = FlowHead::load(&l, &config)?;
        // The codec's weights are small, and bf16 convolutions have no fast path on most CPUs
        // (55x slower than f32 without AVX512-BF16): on a CPU it computes in f32, which also
        // makes streamed and one-shot decoding agree in bf16 mode.
        let codec_dtype = if T::is_cpu(device) { DType::F32 } else { dtype };
        let codec = Codec::load(&l.with_dtype(codec_dtype), &config)?;
        let unused: Vec<String> = ckpt
            .unused_keys()
            .into_iter()
            .filter(|k| !is_known_unused(k))
            .collect();
        if !unused.is_empty() {
            tracing::warn!(file = ckpt.files(), count = unused.len(), first = %unused[0], "checkpoint has tensors the model does not use");
        }
        let prompter = Prompter {
            tokenizer,
            special,
            voice_rows: voices.iter().map(|(k, v)| (k.clone(), v.rows)).collect(),
            max_positions: kv.positions(),
        };
        let mut model = Voxtral {
            _weights: ckpt.mmaps(),
            config,
            prompter: Arc::new(prompter),
            voices,
            tok_embeddings,
            audio_embeddings,
            backbone,
            kv: RefCell::new(kv),
            flow,
            codec,
            device: device.clone(),
            dtype,
            prefill_chunk: options.prefill_chunk_tokens.max(1),
            synchronized_stages: false,
            graphs: None,
        };
        if let (Some(pool), Some(scratch)) = (probe, scratch) {
            model.graphs = model.capture_step_graphs(pool, scratch);
        }
        Ok(model)
    }

    /// Makes `StageTimes` count each stage's device time: the device is waited for after
    /// every stage (see `synchronized_stages`).
    pub fn synchronize_stages(&mut self, on: bool) {
        self.synchronized_stages = on;
    }

    /// The end of a timed stage.
    fn stage_done(&self) {
        if self.synchronized_stages {
            T::synchronize(&self.device);
        }
    }

    pub fn voices(&self) -> impl Iterator<Item = &str> {
        self.voices.keys().map(String::as_str)
    }

    pub fn has_voice(&self, name: &str) -> bool {
        self.voices.contains_key(name)
    }

    pub fn sample_rate(&self) -> u32 {
        self.config.sample_rate()
    }

    pub fn samples_per_frame(&self) -> usize {
        self.config.samples_per_frame
    }

    /// The prompt of `text` in `voice` (see `prompt`).
    pub fn prompt_ids(&self, text: &str, voice: &str) -> Result<Vec<u32>, SynthError> {
        Ok(self.prompter.prompt_ids(text, voice)?)
    }

    /// Embeds the prompt; the `[AUDIO]` rows are replaced, in order, by the voice's rows.
    fn embed_prompt(&self, ids: &[u32], voice: &Voice) -> T {
        let dim = self.config.args.dim;
        let idx: Vec<i64> = ids.iter().map(|&i| i as i64).collect();
        let rows = self
            .tok_embeddings
            .embedding(&T::from_i64(&self.device, &idx, &[ids.len()]))
            .to_dtype(self.dtype);
        let voice_rows = T::from_f32(&self.device, &voice.data, &[voice.rows, dim], self.dtype);
        let mut parts = Vec::new();
        let (mut start, mut next_voice_row) = (0, 0);
        while start < ids.len() {
            let is_audio = ids[start] == self.prompter.special.audio;
            let end = (start..ids.len())
                .find(|&i| (ids[i] == self.prompter.special.audio) != is_audio)
                .unwrap_or(ids.len());
            let len = end - start;
            parts.push(if is_audio {
                let part = voice_rows.narrow(0, next_voice_row, len);
                next_voice_row += len;
                part
            } else {
                rows.narrow(0, start, len)
            });
            start = end;
        }
        let refs: Vec<&T> = parts.iter().collect();
        T::cat(&refs, 0).reshape(&[1, ids.len(), dim])
    }

    /// Prefills the prompt and returns a generation that yields one frame per `next_frame`.
    /// The text is tokenized as given: no normalization, no segments (`crate::engine::prepare`
    /// does those for the server and `synth`).
    pub fn start(&self, req: &SynthesisRequest) -> Result<Generation<'_, T>, SynthError> {
        if req.max_frames == 0 || req.max_frames > DEFAULT_MAX_FRAMES {
            return Err(PrepareError::MaxFrames {
                got: req.max_frames,
                max: DEFAULT_MAX_FRAMES,
            }
            .into());
        }
        let ids = self.prompt_ids(&req.text, &req.voice)?;
        let max = self.prompter.max_positions;
        if ids.len() + req.max_frames > max {
            return Err(PrepareError::TooLong {
                prompt: ids.len(),
                frames: req.max_frames,
                max,
            }
            .into());
        }
        self.start_prompt(ids, &req.voice, req.max_frames, &req.noise, usize::MAX)
    }

    /// Starts a generation of a prompt built by `prompt_ids` (its length already checked):
    /// prefills its first `chunk` tokens now, the rest a chunk per step.
    fn start_prompt(
        &self,
        ids: Vec<u32>,
        voice: &str,
        max_frames: usize,
        noise: &Noise,
        chunk: usize,
    ) -> Result<Generation<'_, T>, SynthError> {
        let width = self.flow.n_acoustic();
        let noise = match noise {
            Noise::Given(v) if v.len() < max_frames * width => {
                return Err(SynthError::NoiseLength {
                    got: v.len(),
                    need: max_frames * width,
                    frames: max_frames,
                    width,
                })
            }
            Noise::Seeded { scale, .. } if !scale.is_finite() || *scale < 0.0 => {
                return Err(SynthError::NoiseScale(*scale))
            }
            Noise::Given(v) => NoiseStream::Given(v.clone(), 0),
            Noise::Seeded { seed, scale } => NoiseStream::Seeded(
                Box::new(rand_chacha::ChaCha8Rng::seed_from_u64(*seed)),
                *scale,
            ),
        };
        let voice = self
            .voices
            .get(voice)
            .ok_or_else(|| PrepareError::UnknownVoice(voice.to_string()))?;
        let started = Instant::now();
        let slot = {
            let mut kv = self.kv.borrow_mut();
            kv.acquire().ok_or(SynthError::NoFreeSlot(kv.slots()))?
        };
        let prefill = Prefill {
            embedded: self.embed_prompt(&ids, voice),
            done: 0,
            chunk: chunk.max(1),
        };
        let mut generation = Generation {
            model: self,
            prompt_ids: ids,
            slot,
            hidden: None,
            prefill: Some(prefill),
            noise,
            frames: Vec::new(),
            max_frames,
            stop: None,
            times: StageTimes {
                prefill: started.elapsed(),
                ..Default::default()
            },
        };
        generation.prefill_chunk();
        Ok(generation)
    }

    /// Decodes frames of codes (with their +2 offset, END excluded) to PCM.
    pub fn decode(&self, codes: &[Vec<u32>]) -> Result<Vec<f32>, CodecError> {
        self.codec.decode(codes)
    }

    /// Decodes the frames from `from` on, with enough earlier frames as context that the
    /// result equals the same samples of a one-shot `decode` (streaming).
    pub fn decode_tail(&self, codes: &[Vec<u32>], from: usize) -> Result<Vec<f32>, CodecError> {
        self.codec.decode_tail(codes, from)
    }

    /// [`Voxtral::decode_tail`] of several streams: on an accelerator together, in one codec
    /// pass for streams of like lengths (`Codec::decode_tails`); on the CPU one at a time, so
    /// that a stream's audio stays bit for bit what it is alone (batched products sum in
    /// another order).
    pub fn decode_tails(
        &self,
        streams: &[(&[Vec<u32>], usize)],
    ) -> Result<Vec<Vec<f32>>, CodecError> {
        if T::is_cpu(&self.device) {
            streams
                .iter()
                .map(|&(codes, from)| self.decode_tail(codes, from))
                .collect()
        } else {
            self.decode_tails_together(streams)
        }
    }

    /// [`Voxtral::decode_tails`] together whatever the device.
    pub fn decode_tails_together(
        &self,
        streams: &[(&[Vec<u32>], usize)],
    ) -> Result<Vec<Vec<f32>>, CodecError> {
        self.codec.decode_tails(streams)
    }

    /// Generations that can start now (free KV slots).
    pub fn free_slots(&self) -> usize {
        self.kv.borrow().free_slots()
    }

    /// KV-pool bytes per position of a generation.
    pub fn kv_bytes_per_position(&self) -> usize {
        self.config.decoder_dims().kv_bytes_per_position(self.dtype)
    }

    /// Positions of prompt plus frames one generation may use.
    pub fn max_positions(&self) -> usize {
        self.prompter.max_positions
    }

    /// Frames of context `decode_tail` reads before its first new frame.
    pub fn codec_context_frames(&self) -> usize {
        self.codec.context_frames()
    }

    /// The next backbone input of each frame, `[frames, 1, dim]`: the sum of its codes'
    /// audio embeddings. One lookup for all.
    fn embed_frames(&self, frames: &[&[u32]]) -> T {
        let ids: Vec<i64> = frames
            .iter()
            .flat_map(|codes| {
                codes
                    .iter()
                    .zip(&self.config.codebook_offsets)
                    .map(|(&c, &o)| (c as usize + o) as i64)
            })
            .collect();
        let width = self.config.codebook_offsets.len();
        let rows = self.audio_embeddings.embedding(&T::from_i64(
            &self.device,
            &ids,
            &[frames.len(), width],
        ));
        rows.to_dtype(self.dtype)
            .sum_dim(1)
            .reshape(&[frames.len(), 1, self.config.args.dim])
    }
}

/// The backbone's KV pool for `options`: `max_sessions` slots sharing `kv_cache_bytes`, each
/// of at most the model's positions. Returns the slots and their positions.
fn kv_slots(
    config: &Config,
    dtype: DType,
    options: &EngineOptions,
) -> Result<(usize, usize), LoadError> {
    let slots = options.max_sessions.max(1);
    let per_position = config.decoder_dims().kv_bytes_per_position(dtype);
    let positions = (options.kv_cache_bytes / slots / per_position).min(config.max_positions);
    // A prompt of a few tokens and one frame at the least.
    if positions < 16 {
        return Err(LoadError::invalid(
            "(settings)",
            "kv_cache_budget_mib",
            format!(
                "{} bytes for {slots} sessions leave {positions} positions each ({per_position} bytes per position in {dtype}); raise it or lower max_batch_size",
                options.kv_cache_bytes
            ),
        ));
    }
    tracing::debug!(slots, positions, "KV pool");
    Ok((slots, positions))
}

/// Encoder-side tensors that ship in some checkpoints but play no part in synthesis.
fn is_known_unused(key: &str) -> bool {
    let codec = |rest: &str| key.starts_with(&format!("{}.{rest}", keys::CODEC));
    codec("encoder_blocks.") || codec("input_proj.")
}

enum NoiseStream {
    Seeded(Box<rand_chacha::ChaCha8Rng>, f32),
    Given(Vec<f32>, usize),
}

impl NoiseStream {
    fn next(&mut self, width: usize) -> Vec<f32> {
        match self {
            NoiseStream::Seeded(_, scale) if *scale == 0.0 => vec![0.0; width],
            NoiseStream::Seeded(rng, scale) => (0..width)
                .map(|_| rand_distr::StandardNormal.sample(rng))
                .map(|x: f32| x * *scale)
                .collect(),
            NoiseStream::Given(values, pos) => {
                let out = values[*pos..*pos + width].to_vec();
                *pos += width;
                out
            }
        }
    }
}

/// The part of a prompt not prefilled yet.
struct Prefill<T> {
    /// `[1, prompt, dim]`.
    embedded: T,
    done: usize,
    chunk: usize,
}

/// One synthesis in progress: frames come out one at a time, so callers can stream, show
/// progress or cancel between frames.
pub struct Generation<'m, T: Tensor> {
    model: &'m Voxtral<T>,
    pub prompt_ids: Vec<u32>,
    /// Its place in the model's KV pool, given back when the generation is dropped.
    slot: KvSlot,
    /// The backbone's last hidden state, once the prompt is prefilled.
    hidden: Option<T>,
    prefill: Option<Prefill<T>>,
    noise: NoiseStream,
    frames: Vec<Vec<u32>>,
    max_frames: usize,
    stop: Option<StopReason>,
    pub times: StageTimes,
}

impl<T: Tensor> Generation<'_, T> {
    /// Generates the next frame's codes, or `None` once generation has stopped.
    pub fn next_frame(&mut self) -> Option<&[u32]> {
        let before = self.frames.len();
        Generation::step_batch(&mut [&mut *self]);
        (self.frames.len() > before).then(|| self.frames[before].as_slice())
    }

    /// Prefills the next chunk of the prompt; the last one leaves the hidden state the first
    /// frame is sampled from.
    fn prefill_chunk(&mut self) {
        let Some(p) = &mut self.prefill else { return };
        let started = Instant::now();
        let total = p.embedded.shape()[1];
        let len = p.chunk.min(total - p.done);
        let chunk = if len == total {
            p.embedded.clone()
        } else {
            p.embedded.narrow(1, p.done, len)
        };
        let mut kv = self.model.kv.borrow_mut();
        let hidden = self
            .model
            .backbone
            .forward(&chunk, &mut kv, &mut [&mut self.slot]);
        p.done += len;
        self.model.stage_done();
        if p.done == total {
            let dim = self.model.config.args.dim;
            self.hidden = Some(hidden.narrow(1, len - 1, 1).reshape(&[1, dim]));
            self.prefill = None;
        }
        self.times.prefill += started.elapsed();
    }

    /// Advances every running generation of `batch` by one step, together: a generation
    /// still prefilling its prompt prefills one more chunk (alone: a chunk's time is all a new
    /// request costs the others); the others get one frame each, from one batched backbone
    /// step for those with a frame to feed back and one flow-head pass over all. Stopped
    /// generations are skipped. All must come from the same model.
    pub fn step_batch(batch: &mut [&mut Generation<'_, T>]) {
        let mut active: Vec<&mut Generation<'_, T>> = batch
            .iter_mut()
            .filter(|g| g.stop.is_none())
            .map(|g| &mut **g)
            .collect();
        for g in active.iter_mut().filter(|g| g.prefill.is_some()) {
            g.prefill_chunk();
        }
        active.retain(|g| g.prefill.is_none());
        let Some(first) = active.first() else { return };
        let m = first.model;
        assert!(
            active.iter().all(|g| std::ptr::eq(g.model, m)),
            "one model per batch"
        );
        let dim = m.config.args.dim;
        // Every upload of the step comes before its first operation: on CUDA a copy from host
        // memory waits for the device, and here the device has nothing queued yet. The noise
        // is each generation's own seeded draw, whenever it is drawn.
        let width = m.flow.n_acoustic();
        let noise: Vec<f32> = active
            .iter_mut()
            .flat_map(|g| g.noise.next(width))
            .collect();
        match Generation::replay_step(&mut active, &noise) {
            Ok(true) => return,
            Ok(false) => {}
            Err(error) => {
                tracing::warn!(%error, "replaying the decode step's CUDA graph failed; this step runs eagerly")
            }
        }
        let noise = T::from_f32(&m.device, &noise, &[active.len(), width], DType::F32);

        let started = Instant::now();
        let fed: Vec<&[u32]> = active
            .iter()
            .filter_map(|g| g.frames.last().map(Vec::as_slice))
            .collect();
        if !fed.is_empty() {
            let x = m.embed_frames(&fed);
            let mut slots: Vec<&mut KvSlot> = active
                .iter_mut()
                .filter(|g| !g.frames.is_empty())
                .map(|g| &mut g.slot)
                .collect();
            let hidden = m.backbone.forward(&x, &mut m.kv.borrow_mut(), &mut slots);
            m.stage_done();
            let elapsed = started.elapsed();
            let feeding = active.iter_mut().filter(|g| !g.frames.is_empty());
            for (row, g) in feeding.enumerate() {
                g.hidden = Some(hidden.narrow(0, row, 1).reshape(&[1, dim]));
                g.times.backbone += elapsed;
            }
        }

        let started = Instant::now();
        let hidden: Vec<&T> = active
            .iter()
            .map(|g| g.hidden.as_ref().expect("prefilled"))
            .collect();
        let hidden = T::cat(&hidden, 0);
        let counted = crate::tensor::linear_multiply_adds();
        let frames = m.flow.sample(&hidden, &noise);
        let elapsed = started.elapsed();
        let multiply_adds = crate::tensor::linear_multiply_adds() - counted;
        for (g, frame) in active.iter_mut().zip(frames) {
            g.times.flow_head += elapsed;
            g.times.flow_head_multiply_adds += multiply_adds;
            g.accept(frame);
        }
    }

    fn accept(&mut self, frame: Vec<u32>) {
        if frame[0] == END_AUDIO_CODE {
            self.stop = Some(StopReason::EndAudio);
            return;
        }
        self.frames.push(frame);
        if self.frames.len() == self.max_frames {
            self.stop = Some(StopReason::MaxFrames);
        }
    }

    /// Teacher forcing: the next step is fed `frame` instead of the last generated frame
    /// (per-stage comparisons with a reference, spec section 9). Must be a valid frame.
    pub fn replace_last_frame(&mut self, frame: Vec<u32>) {
        let last = self.frames.last_mut().expect("a frame was generated");
        assert_eq!(last.len(), frame.len(), "frame width");
        *last = frame;
    }

    pub fn frames(&self) -> &[Vec<u32>] {
        &self.frames
    }

    pub fn stop_reason(&self) -> Option<StopReason> {
        self.stop
    }

    pub fn max_frames(&self) -> usize {
        self.max_frames
    }

    /// Time spent so far per model part; a batched step counts in full for each member.
    pub fn times(&self) -> StageTimes {
        self.times
    }

    /// Runs to the end and decodes everything.
    pub fn finish(mut self) -> Result<Synthesis, SynthError> {
        while self.next_frame().is_some() {}
        let started = Instant::now();
        let pcm = self.model.decode(&self.frames)?;
        self.times.codec += started.elapsed();
        Ok(Synthesis {
            prompt_ids: std::mem::take(&mut self.prompt_ids),
            codes: std::mem::take(&mut self.frames),
            stop: self.stop.expect("finished"),
            pcm,
            times: self.times,
        })
    }
}

impl<T: Tensor> Drop for Generation<'_, T> {
    fn drop(&mut self) {
        self.model.kv.borrow_mut().release(&self.slot);
    }
}

/// A finished synthesis.
#[derive(Clone, Debug)]
pub struct Synthesis {
    pub prompt_ids: Vec<u32>,
    /// Per frame: 37 codes with their +2 offset; the END frame is not included.
    pub codes: Vec<Vec<u32>>,
    pub stop: StopReason,
    pub pcm: Vec<f32>,
    pub times: StageTimes,
}
