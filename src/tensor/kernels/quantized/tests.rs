use super::*;

/// Deterministic values in about -1..1, a few blocks of them much smaller or larger.
fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut state = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|i| {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let unit = (state >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0;
            match (i / GROUP) % 5 {
                3 => unit * 1e-3,
                4 => unit * 40.0,
                _ => unit,
            }
        })
        .collect()
}

#[test]
fn quantized_weights_are_within_half_a_step() {
    let (out, k) = (7, 5 * GROUP);
    let w = values(out * k, 1);
    for format in QuantFormat::ALL {
        let blocks = quantize(format, &w, k);
        assert_eq!(blocks.len(), format.bytes(out, k));
        let back = dequantize(format, &blocks);
        for (block, (original, restored)) in w
            .chunks_exact(GROUP)
            .zip(back.chunks_exact(GROUP))
            .enumerate()
        {
            let max = original.iter().fold(0f32, |m, v| m.max(v.abs()));
            let steps = match format {
                QuantFormat::Q8 => 127.0,
                QuantFormat::Q4 => 8.0,
            };
            // The scale is rounded up by at most one bf16 unit (2^-8 relative).
            let step = max / steps * (1.0 + 1.0 / 128.0);
            for (a, b) in original.iter().zip(restored) {
                // Q4 clips the value opposite the extreme from 8 steps to 7.
                let bound = if format == QuantFormat::Q4 {
                    step
                } else {
                    step / 2.0
                };
                assert!(
                    (a - b).abs() <= bound,
                    "{format} block {block}: {a} became {b} (step {step})"
                );
            }
        }
        let extreme = w[..GROUP]
            .iter()
            .fold(0f32, |m, &v| if v.abs() > m.abs() { v } else { m });
        if format == QuantFormat::Q4 {
            let at = w[..GROUP].iter().position(|&v| v == extreme).unwrap();
            assert!(
                (back[at] - extreme).abs() <= extreme.abs() / 128.0,
                "the extreme is kept"
            );
        }
    }
}

#[test]
fn inputs_are_within_half_a_step_of_their_bytes() {
    let x = values(6 * GROUP, 8);
    let inputs = quantize_inputs(&x);
    for (i, (&v, &q)) in x.iter().zip(&inputs.values).enumerate() {
        let scale = inputs.scales[i / GROUP];
        assert!(
            (v - f32::from(q) * scale).abs() <= scale / 2.0 * (1.0 + 1e-6),
            "{v} as {q}"
        );
    }
}

#[test]
fn names_parse_back() {
    for format in QuantFormat::ALL {
        assert_eq!(parse_quantize(format.name()), Ok(Some(format)));
        assert_eq!(
            QuantFormat::of_block_bytes(format.block_bytes()),
            Some(format)
        );
    }
    assert_eq!(parse_quantize("none"), Ok(None));
    assert!(parse_quantize("q5").unwrap_err().contains("none, q8, q4"));
}

fn product(variant: Variant, format: QuantFormat, x: &[f32], w: &[u8], k: usize) -> Vec<f32> {
    let out = w.len() / format.bytes(1, k);
    let mut y = vec![0.0; x.len() / k * out];
    linear_with(variant, format, x, w, k, &mut y, 1);
    y
}

#[test]
fn products_match_the_dequantized_weights_in_f64() {
    let (out, k) = (9, 12 * GROUP);
    for format in QuantFormat::ALL {
        let blocks = quantize(format, &values(out * k, 2), k);
        let dequantized = dequantize(format, &blocks);
        let x = values(3 * k, 3);
        let y = product(Variant::active(), format, &x, &blocks, k);
        // The inputs as the kernel reads them: bytes times their block's scale.
        let inputs = quantize_inputs(&x);
        let x: Vec<f32> = inputs
            .values
            .iter()
            .enumerate()
            .map(|(i, &q)| f32::from(q) * inputs.scales[i / GROUP])
            .collect();
        for (m, row) in x.chunks_exact(k).enumerate() {
            for (o, weights) in dequantized.chunks_exact(k).enumerate() {
                let exact: f64 = row
                    .iter()
                    .zip(weights)
                    .map(|(&a, &b)| f64::from(a) * f64::from(b))
                    .sum();
                let magnitude: f64 = row
                    .iter()
                    .zip(weights)
                    .map(|(&a, &b)| f64::from(a * b).abs())
                    .sum();
                // Each block's products are exact (integers); each block's scale and its sum
                // round once in f32, fewer than k times in all.
                let bound = magnitude * k as f64 * f64::from(f32::EPSILON);
                let got = f64::from(y[m * out + o]);
                assert!(
                    (got - exact).abs() <= bound,
                    "{format} row {m} output {o}: {got} against {exact}"
                );
            }
        }
    }
}

#[test]
fn every_variant_gives_the_portable_bits() {
    // 13 outputs: whole tiles of eight and four, and single ones; 1 to 9 rows: every tile
    // height the kernels have.
    let (out, k) = (13, 7 * GROUP);
    for format in QuantFormat::ALL {
        let blocks = quantize(format, &values(out * k, 4), k);
        for rows in 1..=9 {
            let x = values(rows * k, 5);
            let want = product(Variant::Portable, format, &x, &blocks, k);
            for variant in Variant::ALL.into_iter().filter(|v| v.supported()) {
                let got = product(variant, format, &x, &blocks, k);
                assert_eq!(
                    got.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                    want.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                    "{format} {variant} {rows} rows"
                );
            }
        }
    }
}

#[test]
fn batched_rows_equal_each_row_alone_on_any_threads() {
    // Large enough to be split between threads.
    let (out, k) = (1024, 16 * GROUP);
    for format in QuantFormat::ALL {
        let blocks = quantize(format, &values(out * k, 6), k);
        assert!(blocks.len() >= PARALLEL_MIN_BYTES / 2);
        let x = values(11 * k, 7);
        let mut batched = vec![0.0; 11 * out];
        linear(format, &x, &blocks, k, &mut batched, 2);
        for (m, row) in x.chunks_exact(k).enumerate() {
            let mut alone = vec![0.0; out];
            linear(format, row, &blocks, k, &mut alone, 1);
            assert!(
                alone
                    .iter()
                    .zip(&batched[m * out..][..out])
                    .all(|(a, b)| a.to_bits() == b.to_bits()),
                "{format} row {m}"
            );
        }
    }
}

/// A prompt's tiles of dequantized rows are the dequantized weights, rounded as libtorch
/// rounds f32 to bf16 when asked, on one thread or split over two.
#[test]
fn dequantized_rows_are_the_weights_rounded_as_asked() {
    let (out, k) = (4096, 4 * GROUP);
    let mut w = values(out * k, 5);
    // Ties of bf16 rounding, both ways, and values that round up into the next exponent.
    w[..4].copy_from_slice(&[
        f32::from_bits(0x3F80_8000),
        f32::from_bits(0x3F81_8000),
        f32::from_bits(0x3FFF_FFFF),
        -f32::from_bits(0x3FFF_8001),
    ]);
    let rows = 1..out;
    for format in QuantFormat::ALL {
        let blocks = quantize(format, &w, k);
        assert!(blocks.len() >= PARALLEL_MIN_BYTES, "large enough to split");
        let whole = dequantize(format, &blocks);
        for to_bf16 in [false, true] {
            for threads in [1, 2] {
                let mut tile = vec![f32::NAN; rows.len() * k];
                dequantize_rows(
                    format,
                    &blocks,
                    k,
                    rows.clone(),
                    &mut tile,
                    to_bf16,
                    threads,
                );
                for (i, (&got, &value)) in tile.iter().zip(&whole[rows.start * k..]).enumerate() {
                    let want = if to_bf16 {
                        half::bf16::from_f32(value).to_f32()
                    } else {
                        value
                    };
                    assert_eq!(
                        got.to_bits(),
                        want.to_bits(),
                        "{format} value {i}, bf16 {to_bf16}, {threads} threads"
                    );
                }
            }
        }
    }
    for &value in &w[..4] {
        let want = half::bf16::from_f32(value).to_f32();
        assert_eq!(round_to_bf16(value).to_bits(), want.to_bits(), "{value}");
    }
}
