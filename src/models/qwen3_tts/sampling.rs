//! Token choice as the official code makes it (spec section 7): the talker's rules
//! (repetition penalty over the generated tokens, EOS blocked for the first tokens, the control
//! ids suppressed but EOS) come first, then the shared choice (`crate::nn::sampling`).

use super::config::GenerationConfig;
pub use crate::nn::sampling::{penalize, pick, SampleError, Sampling, Uniforms};

/// The official `generate` blocks EOS until this many talker tokens exist.
pub const MIN_NEW_TOKENS: usize = 2;

/// A request's generation settings.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct GenerationParams {
    pub talker: Sampling,
    /// The code predictor's own settings (`subtalker_*`).
    pub predictor: Sampling,
    /// Over the talker's generated tokens.
    pub repetition_penalty: f32,
    /// Talker tokens at most; reaching it yields one frame fewer (the last token gets no
    /// codes).
    pub max_new_tokens: usize,
}

impl GenerationParams {
    /// `generation_config.json`'s settings.
    pub fn from_config(g: &GenerationConfig) -> Self {
        GenerationParams {
            talker: Sampling {
                do_sample: g.do_sample,
                temperature: g.temperature as f32,
                top_k: g.top_k,
                top_p: g.top_p as f32,
            },
            predictor: Sampling {
                do_sample: g.subtalker_dosample,
                temperature: g.subtalker_temperature as f32,
                top_k: g.subtalker_top_k,
                top_p: g.subtalker_top_p as f32,
            },
            repetition_penalty: g.repetition_penalty as f32,
            max_new_tokens: g.max_new_tokens,
        }
    }

    /// The same settings, both heads greedy (`do_sample=False, subtalker_dosample=False`).
    pub fn greedy(self) -> Self {
        GenerationParams {
            talker: Sampling::GREEDY,
            predictor: Sampling::GREEDY,
            ..self
        }
    }
}

/// The talker's rules on its raw `scores`, before the choice: the repetition penalty over every
/// distinct `generated` token (`x < 0 ? x * p : x / p`), EOS blocked while fewer than
/// [`MIN_NEW_TOKENS`] exist, and every id from `codes` on but EOS suppressed (the codec's
/// control ids).
pub fn talker_rules(scores: &mut [f32], generated: &[u32], penalty: f32, eos: u32, codes: usize) {
    penalize(scores, generated, penalty);
    if generated.len() < MIN_NEW_TOKENS {
        scores[eos as usize] = f32::NEG_INFINITY;
    }
    for (id, x) in scores.iter_mut().enumerate().skip(codes) {
        if id != eos as usize {
            *x = f32::NEG_INFINITY;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn talker_rules_penalize_block_eos_early_and_suppress_control_ids() {
        let mut scores = vec![2.0, -2.0, 1.0, 0.5, 3.0, 0.0];
        // Codes 0..4, EOS 5, one control id (4).
        talker_rules(&mut scores, &[0, 1, 0], 2.0, 5, 4);
        assert_eq!(scores[..4], [1.0, -4.0, 1.0, 0.5]);
        assert_eq!(scores[4], f32::NEG_INFINITY);
        assert_eq!(scores[5], 0.0, "EOS allowed after 3 tokens");
        let mut scores = vec![0.0, 0.0, 0.0, 0.0, 0.0, 9.0];
        talker_rules(&mut scores, &[0], 1.0, 5, 4);
        assert_eq!(scores[5], f32::NEG_INFINITY, "EOS blocked after 1 token");
    }
}
