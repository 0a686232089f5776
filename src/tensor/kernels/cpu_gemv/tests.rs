//! Every variant against a plain product and against itself in a batch. A SIMD variant's
//! tests run where the CPU has its instructions and say that they were skipped elsewhere; the
//! portable variant and the one this CPU uses are tested everywhere.

use super::*;

trait Value: Element + PartialEq + fmt::Debug {
    fn from(v: f32) -> Self;
}
impl Value for bf16 {
    fn from(v: f32) -> Self {
        bf16::from_f32(v)
    }
}
impl Value for f32 {
    fn from(v: f32) -> Self {
        v
    }
}

/// Whether `variant` can run here; says so when it cannot.
pub(super) fn runs_here(variant: Variant, test: &str) -> bool {
    let supported = variant.supported();
    if !supported {
        eprintln!(
            "SKIPPED {test} for the {variant} kernel: this CPU lacks {}",
            variant.needs()
        );
    }
    supported
}

/// Small integers: every product and partial sum is exact in f32, so the result does not
/// depend on summation order.
fn integers<E: Value>(n: usize, seed: u32) -> Vec<E> {
    (0..n as u32)
        .map(|i| E::from(((i.wrapping_mul(2_654_435_761) ^ seed) % 17) as f32 - 8.0))
        .collect()
}

fn plain_product<E: Value>(x: &[E], w: &[E], k: usize) -> Vec<E> {
    let (rows, out) = (x.len() / k, w.len() / k);
    let mut y = Vec::with_capacity(rows * out);
    for m in 0..rows {
        for o in 0..out {
            let s: f32 = (0..k)
                .map(|i| x[m * k + i].to_f32() * w[o * k + i].to_f32())
                .sum();
            y.push(E::from_sum(s));
        }
    }
    y
}

fn matches_a_plain_product<E: Value>(variant: Variant) {
    // Row tails (out % 4), input tails (rows % every variant's input block), k tails
    // (k % lanes), and a weight large enough to be split across threads.
    for (rows, out, k) in [
        (1, 4, 32),
        (3, 7, 45),
        (5, 6, 17),
        (7, 9, 64),
        (64, 13, 3),
        (2, 1030, 160),
    ] {
        let x = integers::<E>(rows * k, 1);
        let w = integers::<E>(out * k, 2);
        let want = plain_product(&x, &w, k);
        for threads in [1, 2, 3] {
            let mut y = vec![E::ZERO; rows * out];
            linear_with(variant, &x, &w, k, &mut y, threads);
            assert_eq!(
                y, want,
                "{variant}: rows {rows} out {out} k {k} threads {threads}"
            );
        }
    }
}

/// Values whose sums do round: only the order of summation could differ between a row alone
/// and the same row in a batch, or between thread counts.
fn same_bits_alone_and_in_a_batch<E: Value>(variant: Variant) {
    let (k, out, rows) = (200, 37, MAX_ROWS);
    let x: Vec<E> = (0..rows * k)
        .map(|i| E::from((i as f32 * 0.618).sin()))
        .collect();
    let w: Vec<E> = (0..out * k)
        .map(|i| E::from((i as f32 * 0.377).cos() * 0.1))
        .collect();
    let mut batch = vec![E::ZERO; rows * out];
    linear_with(variant, &x, &w, k, &mut batch, 2);
    for m in 0..rows {
        let mut alone = vec![E::ZERO; out];
        linear_with(variant, &x[m * k..(m + 1) * k], &w, k, &mut alone, 1);
        assert_eq!(alone, batch[m * out..(m + 1) * out], "{variant}: row {m}");
    }
}

/// Within a rounding step of an f64 product: the lanes are wired to the right values.
fn close_to_f64<E: Value>(variant: Variant, relative: f64) {
    let (rows, out, k) = (9, 21, 333);
    let x: Vec<E> = (0..rows * k)
        .map(|i| E::from((i as f32 * 0.731).sin()))
        .collect();
    let w: Vec<E> = (0..out * k)
        .map(|i| E::from((i as f32 * 0.411).cos()))
        .collect();
    let mut y = vec![E::ZERO; rows * out];
    linear_with(variant, &x, &w, k, &mut y, 2);
    for m in 0..rows {
        for o in 0..out {
            let (mut want, mut magnitude) = (0.0f64, 0.0f64);
            for i in 0..k {
                let p = f64::from(x[m * k + i].to_f32()) * f64::from(w[o * k + i].to_f32());
                want += p;
                magnitude += p.abs();
            }
            let got = f64::from(y[m * out + o].to_f32());
            assert!(
                (got - want).abs() <= want.abs() * relative + magnitude * 1e-6,
                "{variant}: y[{m}][{o}] = {got}, f64 gives {want}"
            );
        }
    }
}

fn check(variant: Variant, test: &str) {
    if !runs_here(variant, test) {
        return;
    }
    assert!(
        openmp::runtime().is_some(),
        "libtorch's OpenMP runtime is loaded"
    );
    matches_a_plain_product::<bf16>(variant);
    matches_a_plain_product::<f32>(variant);
    same_bits_alone_and_in_a_batch::<bf16>(variant);
    same_bits_alone_and_in_a_batch::<f32>(variant);
    close_to_f64::<bf16>(variant, 1.0 / 128.0);
    close_to_f64::<f32>(variant, 1e-6);
}

#[test]
fn portable_kernel_is_exact_batch_invariant_and_close_to_f64() {
    check(Variant::Portable, "portable");
}

#[test]
fn avx2_kernel_is_exact_batch_invariant_and_close_to_f64() {
    check(Variant::Avx2Fma, "avx2");
}

#[test]
fn avx512f_kernel_is_exact_batch_invariant_and_close_to_f64() {
    check(Variant::Avx512F, "avx512f");
}

#[test]
fn avx512bf16_kernel_is_exact_batch_invariant_and_close_to_f64() {
    check(Variant::Avx512Bf16, "avx512bf16");
}

#[test]
fn amx_kernel_is_exact_batch_invariant_and_close_to_f64() {
    check(Variant::Amx, "amx");
}

/// The variant this process runs is always tested, whatever the host.
#[test]
fn the_active_kernel_runs_here_and_is_checked() {
    let active = Variant::active();
    assert!(active.supported(), "{active} chosen but not supported");
    eprintln!("active kernel: {active} (best here: {})", Variant::best());
    check(active, "active");
}

/// The best variant is supported, and every variant better than it is not.
#[test]
fn best_is_the_last_supported_variant() {
    let best = Variant::best();
    assert!(best.supported());
    let position = Variant::ALL.iter().position(|&v| v == best).unwrap();
    assert!(Variant::ALL[position + 1..].iter().all(|v| !v.supported()));
}

/// bf16's integer conversions give the `half` crate's bits, ties and infinities included.
#[test]
fn bf16_conversions_match_the_half_crates() {
    let specials = [
        0.0f32,
        -0.0,
        1.0,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::MAX,
        f32::MIN_POSITIVE,
        1e-40,
    ];
    let ties = (0..64u32).map(|i| f32::from_bits(0x3F80_8000 + (i << 16)));
    let spread = (0..100_000u32).map(|i| f32::from_bits(i.wrapping_mul(2_654_435_761)));
    for value in specials
        .into_iter()
        .chain(ties)
        .chain(spread)
        .filter(|v| !v.is_nan())
    {
        assert_eq!(
            <bf16 as Element>::from_sum(value).to_bits(),
            bf16::from_f32(value).to_bits(),
            "{value:e}"
        );
        let b = bf16::from_f32(value);
        assert_eq!(Element::to_f32(b).to_bits(), b.to_f32().to_bits());
    }
    assert!(<bf16 as Element>::from_sum(f32::NAN).is_nan());
}
