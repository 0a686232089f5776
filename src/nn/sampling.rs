//! Token choice as Hugging Face's `generate` makes it, on the host over f32 logits, shared by
//! the token-sampling families (Qwen3-TTS's talker and code predictor, XTTS-v2's GPT): the
//! repetition penalty, then, when sampling, temperature, top-k and top-p, softmax, and one
//! uniform draw turned into a token by the inverse CDF (what `torch.multinomial` does with one
//! draw, so recorded reference draws replay exactly); greedy takes the argmax instead.

use rand::{Rng, SeedableRng};

/// How one head picks its token.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sampling {
    /// False: the argmax (greedy); the other fields are then unused.
    pub do_sample: bool,
    pub temperature: f32,
    /// 0 keeps every token.
    pub top_k: usize,
    /// 1.0 keeps every token.
    pub top_p: f32,
}

impl Sampling {
    pub const GREEDY: Sampling = Sampling {
        do_sample: false,
        temperature: 1.0,
        top_k: 0,
        top_p: 1.0,
    };
}

/// Where the uniform draws of sampling come from.
#[derive(Clone, Debug)]
pub enum Uniforms {
    /// A request's own seeded stream.
    Seeded(Box<rand_chacha::ChaCha8Rng>),
    /// Exactly these values in order (parity with recorded reference draws).
    Recorded { values: Vec<f64>, next: usize },
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SampleError {
    #[error("the {0} recorded uniform draws ran out")]
    OutOfUniforms(usize),
    #[error("no token has a finite score")]
    NothingToSample,
}

impl Uniforms {
    pub fn seeded(seed: u64) -> Self {
        Uniforms::Seeded(Box::new(rand_chacha::ChaCha8Rng::seed_from_u64(seed)))
    }

    pub fn recorded(values: Vec<f64>) -> Self {
        Uniforms::Recorded { values, next: 0 }
    }

    /// How many recorded draws are still unused; `None` for a seeded stream.
    pub fn recorded_left(&self) -> Option<usize> {
        match self {
            Uniforms::Seeded(_) => None,
            Uniforms::Recorded { values, next } => Some(values.len() - next),
        }
    }

    /// The next draw in `[0, 1)`.
    pub fn draw(&mut self) -> Result<f64, SampleError> {
        match self {
            Uniforms::Seeded(rng) => Ok(rng.random::<f64>()),
            Uniforms::Recorded { values, next } => {
                let u = *values
                    .get(*next)
                    .ok_or(SampleError::OutOfUniforms(values.len()))?;
                *next += 1;
                Ok(u)
            }
        }
    }
}

/// Hugging Face's repetition penalty over the distinct `tokens`; 1.0 changes nothing.
pub fn penalize(scores: &mut [f32], tokens: &[u32], penalty: f32) {
    if penalty == 1.0 {
        return;
    }
    let mut seen = vec![false; scores.len()];
    for &t in tokens {
        let t = t as usize;
        if !std::mem::replace(&mut seen[t], true) {
            let x = scores[t];
            scores[t] = if x < 0.0 { x * penalty } else { x / penalty };
        }
    }
}

/// The token `s` picks from `scores` (changed in place by the warpers).
pub fn pick(scores: &mut [f32], s: &Sampling, uniforms: &mut Uniforms) -> Result<u32, SampleError> {
    if !s.do_sample {
        return argmax(scores);
    }
    if s.temperature != 1.0 {
        for x in scores.iter_mut() {
            *x /= s.temperature;
        }
    }
    if s.top_k > 0 && s.top_k < scores.len() {
        let mut sorted = scores.to_vec();
        sorted.sort_unstable_by(|a, b| b.total_cmp(a));
        let kth = sorted[s.top_k - 1];
        for x in scores.iter_mut() {
            if *x < kth {
                *x = f32::NEG_INFINITY;
            }
        }
    }
    if s.top_p < 1.0 {
        top_p(scores, s.top_p);
    }
    let probs = softmax(scores).ok_or(SampleError::NothingToSample)?;
    inverse_cdf(&probs, uniforms.draw()?)
}

/// First index of the maximum, as `torch.argmax`.
fn argmax(scores: &[f32]) -> Result<u32, SampleError> {
    let mut best: Option<(usize, f32)> = None;
    for (i, &x) in scores.iter().enumerate() {
        if best.is_none_or(|(_, b)| x > b) {
            best = Some((i, x));
        }
    }
    match best {
        Some((i, x)) if x > f32::NEG_INFINITY => Ok(i as u32),
        _ => Err(SampleError::NothingToSample),
    }
}

/// Hugging Face's top-p: the smallest tokens whose probabilities sum to at most `1 - p` are
/// removed, the largest always kept.
fn top_p(scores: &mut [f32], p: f32) {
    let Some(probs) = softmax(scores) else { return };
    let mut order: Vec<usize> = (0..scores.len()).collect();
    order.sort_by(|&a, &b| scores[a].total_cmp(&scores[b]));
    let mut cumulative = 0.0f32;
    let last = order.len() - 1;
    for (rank, &i) in order.iter().enumerate() {
        cumulative += probs[i];
        if cumulative <= 1.0 - p && rank < last {
            scores[i] = f32::NEG_INFINITY;
        }
    }
}

/// f32 softmax, as torch computes it (max subtracted); `None` when every score is -inf.
fn softmax(scores: &[f32]) -> Option<Vec<f32>> {
    let max = scores.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    if max == f32::NEG_INFINITY {
        return None;
    }
    let exp: Vec<f32> = scores.iter().map(|&x| (x - max).exp()).collect();
    // Times the reciprocal of the sum, as torch's CPU kernel does.
    let inverse = 1.0 / exp.iter().sum::<f32>();
    Some(exp.iter().map(|&e| e * inverse).collect())
}

/// The first token whose cumulative probability (in f64) exceeds `u` times the total: what
/// `torch.multinomial` does with one draw, the recipe the goldens replay.
fn inverse_cdf(probs: &[f32], u: f64) -> Result<u32, SampleError> {
    let total: f64 = probs.iter().map(|&p| f64::from(p)).sum();
    let target = u * total;
    let mut cdf = 0.0f64;
    for (i, &p) in probs.iter().enumerate() {
        cdf += f64::from(p);
        if cdf > target {
            return Ok(i as u32);
        }
    }
    // Rounding can leave the target at the very top: the last token with any mass.
    probs
        .iter()
        .rposition(|&p| p > 0.0)
        .map(|i| i as u32)
        .ok_or(SampleError::NothingToSample)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn greedy_takes_the_first_maximum() {
        let mut u = Uniforms::recorded(vec![]);
        let mut scores = vec![1.0, 3.0, 3.0, f32::NEG_INFINITY];
        assert_eq!(pick(&mut scores, &Sampling::GREEDY, &mut u), Ok(1));
        let mut none = vec![f32::NEG_INFINITY; 3];
        assert_eq!(
            pick(&mut none, &Sampling::GREEDY, &mut u),
            Err(SampleError::NothingToSample)
        );
    }

    #[test]
    fn sampling_inverts_the_cdf_of_the_kept_tokens() {
        let s = Sampling {
            do_sample: true,
            temperature: 1.0,
            top_k: 2,
            top_p: 1.0,
        };
        // Top-2 keeps ids 1 and 2 with probabilities 1/3 and 2/3 (ln 2 apart).
        let scores = vec![0.0, 1.0, 1.0 + std::f32::consts::LN_2, -1.0];
        let mut u = Uniforms::recorded(vec![0.0, 0.3, 0.34, 0.999]);
        let picks: Vec<u32> = (0..4)
            .map(|_| pick(&mut scores.clone(), &s, &mut u).unwrap())
            .collect();
        assert_eq!(picks, [1, 1, 2, 2]);
        assert_eq!(
            pick(&mut scores.clone(), &s, &mut u),
            Err(SampleError::OutOfUniforms(4))
        );
    }

    #[test]
    fn top_p_keeps_the_smallest_set_reaching_p() {
        let mut scores = vec![(0.5f32).ln(), (0.3f32).ln(), (0.2f32).ln()];
        top_p(&mut scores, 0.6);
        assert!(scores[0].is_finite() && scores[1].is_finite());
        assert_eq!(scores[2], f32::NEG_INFINITY);
    }

    #[test]
    fn seeded_draws_repeat_per_seed() {
        let (mut a, mut b) = (Uniforms::seeded(7), Uniforms::seeded(7));
        let draws: Vec<f64> = (0..3).map(|_| a.draw().unwrap()).collect();
        assert_eq!(draws, (0..3).map(|_| b.draw().unwrap()).collect::<Vec<_>>());
        assert!(draws.iter().all(|u| (0.0..1.0).contains(u)));
    }
}
