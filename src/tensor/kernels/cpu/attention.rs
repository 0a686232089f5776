//! Attention without mask of a few queries: `cpu_small`'s one pass or libtorch's SDPA.

use crate::tensor::kernels::{cpu_gemv, cpu_small};
use tch::{Device, Kind};

/// Whether libtorch's attention of one query over many keys is slower than `cpu_small`'s loop:
/// where it runs its AVX2 build, as it chooses (x86-64 without AVX-512 F, BW, VL and DQ, or
/// `ATEN_CPU_CAPABILITY` asking for less). Its AVX2 build is 1.7 to 1.9 times slower than the
/// loop on one thread, its AVX-512 build 3 to 6 times faster (bf16, 170 to 2000 keys,
/// docs/performance.md); on other architectures it was not measured, so libtorch keeps them.
fn libtorch_attention_is_slower() -> bool {
    static SLOWER: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *SLOWER.get_or_init(|| {
        #[cfg(target_arch = "x86_64")]
        {
            let avx512 = std::arch::is_x86_feature_detected!("avx512f")
                && std::arch::is_x86_feature_detected!("avx512bw")
                && std::arch::is_x86_feature_detected!("avx512vl")
                && std::arch::is_x86_feature_detected!("avx512dq");
            let capped = std::env::var("ATEN_CPU_CAPABILITY")
                .is_ok_and(|c| matches!(c.to_lowercase().as_str(), "avx2" | "default"));
            !avx512 || capped
        }
        #[cfg(not(target_arch = "x86_64"))]
        false
    })
}

/// Attention without mask of a few queries on the CPU, in one pass where that is faster than
/// libtorch's SDPA: over a few keys (the flow head's three tokens), and over a decode step's
/// keys where [`libtorch_attention_is_slower`]. `None` for the rest.
pub(in crate::tensor) fn attention(
    q: &tch::Tensor,
    k: &tch::Tensor,
    v: &tch::Tensor,
    scale: f64,
) -> Option<tch::Tensor> {
    use cpu_small::attention::FEW_KEYS;
    let few_keys = k.size().get(2).is_some_and(|&n| n as usize <= FEW_KEYS);
    if few_keys || libtorch_attention_is_slower() {
        one_pass_attention(q, k, v, scale)
    } else {
        None
    }
}

/// Attention without mask of a few queries on the CPU (`cpu_small::attention`), bf16 or f32,
/// `[batch, heads, tokens, dim]` with `dim` contiguous; `None` for the rest (a prompt's many
/// queries, other types), which go to libtorch's SDPA. The result is `[batch, tokens, heads,
/// dim]` in memory, returned transposed, so that merging the heads back is a view.
fn one_pass_attention(
    q: &tch::Tensor,
    k: &tch::Tensor,
    v: &tch::Tensor,
    scale: f64,
) -> Option<tch::Tensor> {
    use cpu_gemv::Element;
    use cpu_small::attention::{attention, Strided, MAX_QUERIES};
    use half::bf16;

    let kind = q.kind();
    let fits = |t: &tch::Tensor| {
        t.device() == Device::Cpu && t.kind() == kind && t.dim() == 4 && t.stride()[3] == 1
    };
    let (qs, ks) = (q.size(), k.size());
    let plain = matches!(kind, Kind::BFloat16 | Kind::Float)
        && fits(q)
        && qs[2] as usize <= MAX_QUERIES
        && fits(k)
        && fits(v)
        && v.size() == ks
        && ks[0] == qs[0]
        && ks[3] == qs[3]
        && ks[1] > 0
        && ks[2] > 0
        && qs[1] % ks[1] == 0;
    if !plain {
        return None;
    }
    let out = tch::Tensor::empty([qs[0], qs[2], qs[1], qs[3]], (kind, Device::Cpu));
    /// # Safety
    /// As `attention`'s, and `out` a contiguous tensor of `E`'s kind not otherwise shared.
    unsafe fn run<E: Element>([q, k, v]: [&tch::Tensor; 3], scale: f32, out: &tch::Tensor) {
        let view = |t: &tch::Tensor| {
            let (size, stride) = (t.size(), t.stride());
            Strided {
                values: t.data_ptr() as *const E,
                shape: [0, 1, 2, 3].map(|i| size[i] as usize),
                strides: [0, 1, 2].map(|i| stride[i] as usize),
            }
        };
        let y = std::slice::from_raw_parts_mut(out.data_ptr() as *mut E, out.numel());
        attention(&view(q), &view(k), &view(v), scale, y)
    }
    // SAFETY: the three are live CPU tensors of `kind` whose shapes and strides were checked
    // above; `out` is new, contiguous and of `kind`.
    unsafe {
        match kind {
            Kind::BFloat16 => run::<bf16>([q, k, v], scale as f32, &out),
            _ => run::<f32>([q, k, v], scale as f32, &out),
        }
    }
    Some(out.transpose(1, 2))
}

#[cfg(test)]
mod tests {
    use super::super::seeded;
    use super::*;

    /// The one-pass attention against libtorch's SDPA, grouped queries and transposed
    /// (strided) inputs as the flow head passes them, and one query over hundreds of keys as a
    /// decode step's (past 512, in two blocks). In f32 both must lie within the rounding bound
    /// of the exact result ([`attention_bound`]), whatever order either sums in (it differs
    /// between libtorch's AVX2 and AVX-512 builds); in bf16 within a rounding or two of the
    /// result.
    #[test]
    fn one_pass_attention_matches_libtorchs() {
        for kind in [Kind::Float, Kind::BFloat16] {
            for (queries, keys) in [(3, 3), (1, 3), (2, 5), (1, 300), (1, 1100)] {
                let heads = |n: i64, tokens: i64, seed: u64| {
                    seeded(&[8, tokens, n, 64], seed, kind).transpose(1, 2)
                };
                let (q, k, v) = (heads(8, queries, 1), heads(2, keys, 2), heads(2, keys, 3));
                let fast = one_pass_attention(&q, &k, &v, 0.125).expect("a few CPU queries");
                let slow = tch::Tensor::scaled_dot_product_attention(
                    &q,
                    &k,
                    &v,
                    None::<&tch::Tensor>,
                    0.0,
                    false,
                    0.125,
                    true,
                );
                assert_eq!(fast.size(), slow.size());
                let values = |t: &tch::Tensor| {
                    Vec::<f32>::try_from(t.to_kind(Kind::Float).flatten(0, -1)).unwrap()
                };
                let (fast, slow) = (values(&fast), values(&slow));
                let case = format!("{kind:?}, {queries} queries, {keys} keys");
                if kind == Kind::Float {
                    let (exact, bound) = attention_bound(
                        &values(&q),
                        &values(&k),
                        &values(&v),
                        [8, 8, 2],
                        64,
                        0.125,
                    );
                    for (i, (f, s)) in fast.iter().zip(&slow).enumerate() {
                        let (f, s) = (f64::from(*f), f64::from(*s));
                        assert!(
                            (f - exact[i]).abs() <= bound[i],
                            "{case}: {f} against exact {}, bound {}",
                            exact[i],
                            bound[i]
                        );
                        assert!(
                            (s - exact[i]).abs() <= bound[i],
                            "{case}: libtorch {s} against exact {}, bound {}",
                            exact[i],
                            bound[i]
                        );
                    }
                } else {
                    let ulp = 1.0 / 128.0;
                    for (f, s) in fast.iter().zip(&slow) {
                        assert!(
                            (f - s).abs() <= 2.0 * ulp * s.abs().max(0.25),
                            "{case}: {f} against {s}"
                        );
                    }
                }
            }
        }
    }

    /// The exact attention (in f64) of f32 `q` `[batch, heads, queries, dim]` over `k`, `v`
    /// `[batch, kv_heads, keys, dim]` (`shape` = batch, heads, kv heads), and for each output
    /// the most that any f32 evaluation can differ from it, whatever its order of sums. With
    /// `u` = 2⁻²⁴ and `γ(n)` = nu/(1 - nu): each score `s_j` is a dot product, off by at
    /// most `E_j = γ(dim)·scale·Σ|q·k_j|`; moving every score by up to `E = max E_j` moves each
    /// weight `p_j` by a factor within `e^{±2E}`; a one-pass softmax rescales a weight and
    /// the running sums by up to `k` factors `e^{m_old - m_new}` (an exponential and a product
    /// each: `4k·u`), the sum of the `k` weights and the weighted sum of the `k` values add
    /// `γ(k)` each, and the exponentials and the division a few `u`. So the bound is
    /// `Σ_j p_j|v_j| · ((e^{2E} - 1) + (6k + 16)·u)`, to first order in `u`.
    fn attention_bound(
        q: &[f32],
        k: &[f32],
        v: &[f32],
        [batch, heads, kv_heads]: [usize; 3],
        dim: usize,
        scale: f64,
    ) -> (Vec<f64>, Vec<f64>) {
        let u = f64::from(f32::EPSILON) / 2.0;
        let gamma = |n: usize| n as f64 * u / (1.0 - n as f64 * u);
        let queries = q.len() / (batch * heads * dim);
        let keys = k.len() / (batch * kv_heads * dim);
        let (mut exact, mut bound) = (Vec::new(), Vec::new());
        for b in 0..batch {
            for h in 0..heads {
                let kv = h / (heads / kv_heads);
                let row = |t: &'_ [f32], heads: usize, head: usize, tokens: usize, i: usize| {
                    let start = ((b * heads + head) * tokens + i) * dim;
                    t[start..start + dim]
                        .iter()
                        .map(|&x| f64::from(x))
                        .collect::<Vec<f64>>()
                };
                for i in 0..queries {
                    let query = row(q, heads, h, queries, i);
                    let (mut scores, mut error) = (Vec::with_capacity(keys), 0f64);
                    for j in 0..keys {
                        let key = row(k, kv_heads, kv, keys, j);
                        let dot: f64 = query.iter().zip(&key).map(|(a, b)| a * b).sum();
                        let magnitude: f64 =
                            query.iter().zip(&key).map(|(a, b)| (a * b).abs()).sum();
                        scores.push(scale * dot);
                        error = error.max(gamma(dim) * scale * magnitude);
                    }
                    let top = scores.iter().copied().fold(f64::NEG_INFINITY, f64::max);
                    let weights: Vec<f64> = scores.iter().map(|s| (s - top).exp()).collect();
                    let total: f64 = weights.iter().sum();
                    let relative = (2.0 * error).exp_m1() + (6 * keys + 16) as f64 * u;
                    for d in 0..dim {
                        let (mut value, mut magnitude) = (0f64, 0f64);
                        for (j, w) in weights.iter().enumerate() {
                            let x = f64::from(v[((b * kv_heads + kv) * keys + j) * dim + d]);
                            value += w / total * x;
                            magnitude += w / total * x.abs();
                        }
                        exact.push(value);
                        bound.push(magnitude * relative);
                    }
                }
            }
        }
        (exact, bound)
    }
}
