//! The causal audio encoder (spec §3): the conv stem, then pre-norm transformer layers over
//! the conv frames (RMSNorm, biased q/v/o without a k bias, interleaved RoPE at the frame's
//! absolute position, causal attention within a sliding window, biased SwiGLU), then the final
//! norm.

use super::conv_stem::ConvStem;
use super::keys;
use super::params::Config;
use crate::nn::decoder::LayerKeys;
use crate::nn::layer_probe;
use crate::nn::layers::{self, AttentionDims, AttentionProj, FeedForward, Loader, RmsNorm};
use crate::nn::mask::sliding_window_mask;
use crate::nn::LoadError;
use crate::tensor::Tensor;

struct EncoderLayer<T> {
    attention_norm: RmsNorm<T>,
    attention: AttentionProj<T>,
    /// Biases `[1, 1, width]` of wq, wv, wo (the checkpoint has none for wk).
    q_bias: T,
    v_bias: T,
    o_bias: T,
    ffn_norm: RmsNorm<T>,
    feed_forward: FeedForward<T>,
    /// `[1, 1, dim]`.
    w2_bias: T,
}

/// The bias of `module`, `[1, 1, len]`.
fn bias<T: Tensor>(l: &Loader<T>, module: &str, len: usize) -> Result<T, LoadError> {
    Ok(l.tensor(&layers::bias(module), &[len])?
        .reshape(&[1, 1, len]))
}

impl<T: Tensor> EncoderLayer<T> {
    fn load(l: &Loader<T>, keys: &LayerKeys, c: &Config) -> Result<Self, LoadError> {
        let e = &c.encoder;
        let width = e.n_heads * e.head_dim;
        let norm = |module: &str| RmsNorm::load(l, &layers::weight(module), e.dim, e.norm_eps);
        let dims = AttentionDims {
            dim: e.dim,
            n_heads: e.n_heads,
            n_kv_heads: e.n_heads,
            head_dim: e.head_dim,
        };
        let (a, ff) = (&keys.attention, &keys.feed_forward);
        Ok(EncoderLayer {
            attention_norm: norm(&keys.attention_norm)?,
            attention: AttentionProj::load(l, a, &dims)?,
            q_bias: bias(l, &a.q, width)?,
            v_bias: bias(l, &a.v, width)?,
            o_bias: bias(l, &a.o, e.dim)?,
            ffn_norm: norm(&keys.ffn_norm)?,
            feed_forward: FeedForward::load(l, ff, e.dim, e.hidden_dim)?,
            w2_bias: bias(l, &ff.down, e.dim)?,
        })
    }

    /// `x` `[1, frames, dim]` at positions `start..`, after the keys and values of `past`
    /// (the frames just before); `mask` the window bias over both. Returns the output and the
    /// keys and values of `past` and `x` together.
    fn forward(
        &self,
        x: &T,
        rope: &T::Rope,
        start: usize,
        mask: &T,
        past: Option<&KeysValues<T>>,
    ) -> (T, KeysValues<T>) {
        let a = &self.attention;
        let h = self.attention_norm.forward(x);
        let (q, k, v) = a.qkv(&h);
        let q = a
            .split_heads(&q.add(&self.q_bias), a.n_heads)
            .rope_interleaved(rope, start);
        let mut k = a.split_heads(&k, a.n_heads).rope_interleaved(rope, start);
        let mut v = a.split_heads(&v.add(&self.v_bias), a.n_heads);
        if let Some(past) = past {
            k = T::cat(&[&past.keys, &k], 2);
            v = T::cat(&[&past.values, &v], 2);
        }
        let attended = T::attention(&q, &k, &v, Some(mask), false, a.scale());
        let x = x.add(&a.merge_heads(&attended).add(&self.o_bias));
        let h = self
            .feed_forward
            .forward(&self.ffn_norm.forward(&x))
            .add(&self.w2_bias);
        (x.add(&h), KeysValues { keys: k, values: v })
    }
}

/// One layer's keys and values, `[1, heads, frames, head_dim]`.
struct KeysValues<T> {
    keys: T,
    values: T,
}

impl<T: Tensor> KeysValues<T> {
    /// The last `keep` frames (all of them if fewer).
    fn last(&self, keep: usize) -> Self {
        let frames = self.keys.shape()[2];
        let keep = keep.min(frames);
        KeysValues {
            keys: self.keys.narrow(2, frames - keep, keep),
            values: self.values.narrow(2, frames - keep, keep),
        }
    }
}

/// What the encoder carries between the chunks of a stream: each layer's keys and values of
/// the frames a later frame's window still reaches, and the next frame's position.
pub struct EncoderCache<T> {
    layers: Vec<Option<KeysValues<T>>>,
    position: usize,
}

impl<T: Tensor> EncoderCache<T> {
    /// Frames whose keys and values are held.
    fn held(&self) -> usize {
        self.layers[0].as_ref().map_or(0, |kv| kv.keys.shape()[2])
    }
}

pub struct Encoder<T: Tensor> {
    pub stem: ConvStem<T>,
    layers: Vec<EncoderLayer<T>>,
    norm: RmsNorm<T>,
    rope: T::Rope,
    window: Option<usize>,
    device: T::Device,
}

impl<T: Tensor> Encoder<T> {
    /// `l` scoped at `mm_streams_embeddings.embedding_module.whisper_encoder.`; RoPE covers
    /// frames `0..max_frames`.
    pub fn load(l: &Loader<T>, c: &Config, max_frames: usize) -> Result<Self, LoadError> {
        let e = &c.encoder;
        let layers = (0..e.n_layers)
            .map(|i| EncoderLayer::load(l, &LayerKeys::mistral(&keys::encoder_layer(i)), c))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Encoder {
            stem: ConvStem::load(l, c.mel.num_mel_bins, e.dim)?,
            layers,
            norm: RmsNorm::load(l, keys::ENCODER_NORM, e.dim, e.norm_eps)?,
            rope: T::rope_table(l.device, max_frames, e.head_dim, e.rope_theta),
            window: e.sliding_window,
            device: l.device.clone(),
        })
    }

    /// The transformer over conv frames `[1, frames, dim]` that start at frame 0, each
    /// attending to itself and the frames before it within the window; ends with the final
    /// norm.
    pub fn transformer(&self, frames: &T) -> T {
        let len = frames.shape()[1];
        let mask = sliding_window_mask::<T>(
            &self.device,
            frames.dtype(),
            (0, len),
            (0, len),
            self.window,
        );
        let mut x = frames.clone();
        for (i, layer) in self.layers.iter().enumerate() {
            x = layer.forward(&x, &self.rope, 0, &mask, None).0;
            layer_probe::record(i, &x);
        }
        self.norm.forward(&x)
    }

    /// An empty cache for a stream that starts at frame 0.
    pub fn start(&self) -> EncoderCache<T> {
        EncoderCache {
            layers: self.layers.iter().map(|_| None).collect(),
            position: 0,
        }
    }

    /// The transformer over the stream's next conv frames `[1, frames, dim]`: the same output
    /// as [`transformer`](Self::transformer) gives those frames over the whole stream.
    pub fn step(&self, cache: &mut EncoderCache<T>, frames: &T) -> T {
        let len = frames.shape()[1];
        let mask = sliding_window_mask::<T>(
            &self.device,
            frames.dtype(),
            (cache.held(), len),
            (0, cache.held() + len),
            self.window,
        );
        // A later frame's window reaches back `window - 1` frames.
        let keep = self.window.map_or(usize::MAX, |w| w - 1);
        let mut x = frames.clone();
        for (i, (layer, held)) in self.layers.iter().zip(&mut cache.layers).enumerate() {
            let (out, kv) = layer.forward(&x, &self.rope, cache.position, &mask, held.as_ref());
            *held = Some(kv.last(keep));
            layer_probe::record(i, &out);
            x = out;
        }
        cache.position += len;
        self.norm.forward(&x)
    }
}
