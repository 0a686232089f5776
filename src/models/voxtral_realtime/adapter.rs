//! The audio-to-text adapter (spec §3): stack `downsample_factor` consecutive encoder frames
//! (in time order) into one, then `w_out · gelu(w_in · x)` without biases, one embedding per
//! decoder position.

use super::keys;
use super::params::Config;
use crate::nn::layers::Loader;
use crate::nn::LoadError;
use crate::tensor::Tensor;

pub struct Adapter<T: Tensor> {
    w_in: T,
    w_out: T,
    factor: usize,
}

impl<T: Tensor> Adapter<T> {
    /// `l` scoped at `mm_streams_embeddings.embedding_module.`.
    pub fn load(l: &Loader<T>, c: &Config) -> Result<Self, LoadError> {
        let (factor, stacked) = (
            c.encoder.downsample_factor,
            c.encoder.dim * c.encoder.downsample_factor,
        );
        Ok(Adapter {
            w_in: l.tensor(keys::ADAPTER_IN, &[c.args.dim, stacked])?,
            w_out: l.tensor(keys::ADAPTER_OUT, &[c.args.dim, c.args.dim])?,
            factor,
        })
    }

    /// Encoder frames stacked into one decoder position.
    pub fn factor(&self) -> usize {
        self.factor
    }

    /// Encoder frames `[1, frames, enc_dim]` (a multiple of the factor) → `[1, frames /
    /// factor, dim]`.
    pub fn forward(&self, frames: &T) -> T {
        let s = frames.shape();
        let stacked = frames.reshape(&[s[0], s[1] / self.factor, s[2] * self.factor]);
        stacked.linear(&self.w_in).gelu().linear(&self.w_out)
    }
}
