//! `params.json`, the model arguments of Mistral's folders (Voxtral-4B-TTS and Voxtral
//! Realtime): the text decoder's at the top level, in one schema, and each family's own under
//! `multimodal`. Structs mirror the JSON; absent fields take the reference's defaults.

use crate::nn::decoder::DecoderDims;
use crate::nn::LoadError;
use serde::{Deserialize, Serialize};

/// The top level of a `params.json`: the text decoder, then the family's `multimodal` section.
#[derive(Clone, Debug, Deserialize, Serialize)]
pub struct ModelArgs<M> {
    pub dim: usize,
    pub n_layers: usize,
    pub head_dim: usize,
    pub hidden_dim: usize,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    #[serde(default = "defaults::rope_theta")]
    pub rope_theta: f64,
    #[serde(default = "defaults::norm_eps")]
    pub norm_eps: f64,
    pub vocab_size: usize,
    #[serde(default)]
    pub tied_embeddings: bool,
    #[serde(default)]
    pub use_biases: bool,
    #[serde(default = "defaults::yes")]
    pub causal: bool,
    /// Attention window in positions, self included; `None` attends to every earlier one.
    #[serde(default)]
    pub sliding_window: Option<usize>,
    #[serde(default)]
    pub max_seq_len: Option<usize>,
    #[serde(default)]
    pub model_max_length: Option<usize>,
    #[serde(default)]
    pub ada_rms_norm_t_cond: bool,
    #[serde(default)]
    pub ada_rms_norm_t_cond_dim: Option<usize>,
    pub multimodal: M,
}

mod defaults {
    pub fn rope_theta() -> f64 {
        10_000.0
    }
    pub fn norm_eps() -> f64 {
        1e-5
    }
    pub fn yes() -> bool {
        true
    }
}

impl<M> ModelArgs<M> {
    /// The text decoder's attention sizes.
    pub fn attention(&self) -> Attention {
        Attention {
            dim: self.dim,
            n_layers: self.n_layers,
            head_dim: self.head_dim,
            hidden_dim: self.hidden_dim,
            n_heads: self.n_heads,
            n_kv_heads: self.n_kv_heads,
            norm_eps: self.norm_eps,
            rope_theta: self.rope_theta,
        }
    }

    /// Checks what every family's text decoder needs: [`Attention::check`]'s sizes, a vocabulary,
    /// and no biases.
    pub fn check_decoder(&self, file: &str) -> Result<(), LoadError> {
        self.attention().check(file, "")?;
        if self.vocab_size == 0 {
            return Err(LoadError::invalid(file, "vocab_size", "must be > 0"));
        }
        if self.use_biases {
            return Err(LoadError::invalid(
                file,
                "use_biases",
                "a biased text decoder is not supported",
            ));
        }
        Ok(())
    }

    /// The text decoder's sizes; `max_positions` is a KV slot's length.
    pub fn decoder_dims(&self, max_positions: usize) -> DecoderDims {
        DecoderDims {
            dim: self.dim,
            n_layers: self.n_layers,
            n_heads: self.n_heads,
            n_kv_heads: self.n_kv_heads,
            head_dim: self.head_dim,
            hidden_dim: self.hidden_dim,
            norm_eps: self.norm_eps,
            rope_theta: self.rope_theta,
            max_positions,
        }
    }
}

/// The sizes every attention stack needs, wherever they sit in the file.
pub struct Attention {
    pub dim: usize,
    pub n_layers: usize,
    pub head_dim: usize,
    pub hidden_dim: usize,
    pub n_heads: usize,
    pub n_kv_heads: usize,
    pub norm_eps: f64,
    pub rope_theta: f64,
}

impl Attention {
    /// Sizes above 0, an even head width (rotary embeddings), query heads in whole groups per
    /// key-value head, a positive epsilon and θ; errors name `prefix` + the key.
    pub fn check(&self, file: &str, prefix: &str) -> Result<(), LoadError> {
        let bad =
            |key: &str, msg: &str| Err(LoadError::invalid(file, format!("{prefix}{key}"), msg));
        for (key, value) in [
            ("dim", self.dim),
            ("n_layers", self.n_layers),
            ("head_dim", self.head_dim),
            ("hidden_dim", self.hidden_dim),
            ("n_heads", self.n_heads),
            ("n_kv_heads", self.n_kv_heads),
        ] {
            if value == 0 {
                return bad(key, "must be > 0");
            }
        }
        if !self.head_dim.is_multiple_of(2) {
            return bad("head_dim", "must be even for rotary embeddings");
        }
        if !self.n_heads.is_multiple_of(self.n_kv_heads) {
            return bad("n_kv_heads", "must divide n_heads");
        }
        if !positive(self.norm_eps) {
            return bad("norm_eps", "must be > 0");
        }
        if !positive(self.rope_theta) {
            return bad("rope_theta", "must be > 0");
        }
        Ok(())
    }
}

/// Whether `x` is a finite number above 0.
pub fn positive(x: f64) -> bool {
    x.is_finite() && x > 0.0
}

/// `text` as a `T`, an error naming `file` and the key at fault (`(json)` for the syntax or
/// the whole document).
pub fn parse<T: serde::de::DeserializeOwned>(text: &str, file: &str) -> Result<T, LoadError> {
    let de = &mut serde_json::Deserializer::from_str(text);
    serde_path_to_error::deserialize(de).map_err(|e| {
        // Syntax errors have no path ("?"); errors about the whole document the root (".").
        let path = e.path().to_string();
        let key = if path == "." || path == "?" {
            "(json)".to_string()
        } else {
            path
        };
        LoadError::invalid(file, key, e.inner().to_string())
    })
}
