//! Per-step engine costs on the tiny random checkpoint: tokenizer, one decode frame
//! (backbone + flow head), codec decode; and the bf16 products of one full-size backbone
//! layer, the project's kernel beside libtorch's GEMM; the Qwen3-TTS decoder's widest
//! convolutions beside libtorch's. Full-size per-frame numbers come from `voxtral-tts bench`.

use criterion::{criterion_group, criterion_main, Criterion};
use std::hint::black_box;
use voxtral_tts::models::voxtral_tts::testkit::{cached_test_model, Preset};
use voxtral_tts::models::voxtral_tts::{Noise, SynthesisRequest, Voxtral};
use voxtral_tts::tensor::{tch_backend::TchTensor, DType};

fn tokenizer(c: &mut Criterion) {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(".deps/ref/tekken_240911.json");
    let tok = voxtral_tts::tokenizers::tekken::Tekken::from_file(&dir)
        .expect("run scripts/setup.sh first");
    let base = "Bonjour tout le monde ! The quick brown fox, 3.14 😀 中文 — ";
    let text: String = base.chars().cycle().take(4096).collect();
    c.bench_function("tokenizer/encode 4096 chars (131k vocab)", |b| {
        b.iter(|| tok.encode(black_box(&text)))
    });
}

fn text_front_end(c: &mut Criterion) {
    use voxtral_tts::text::{normalize, split_segments, NormalizeOptions, DEFAULT_SEGMENT_CHARS};
    let plain =
        "The quick **brown** fox jumps over https://example.com/lazy?dog=1, again. ".repeat(1400);
    let opts = NormalizeOptions::default();
    c.bench_function("text/normalize + split 100k chars", |b| {
        b.iter(|| split_segments(&normalize(black_box(&plain), &opts), DEFAULT_SEGMENT_CHARS))
    });
}

fn frames(c: &mut Criterion) {
    let _guard = tch::no_grad_guard();
    let dir = cached_test_model(Preset::Tiny, 0).unwrap();
    for dtype in [DType::BF16, DType::F32] {
        let model = Voxtral::<TchTensor>::load(&dir, &tch::Device::Cpu, dtype).unwrap();
        let request = SynthesisRequest {
            text: "The quick brown fox jumps over the lazy dog.".into(),
            voice: "casual_male".into(),
            max_frames: 2048,
            noise: Noise::Seeded {
                seed: 1,
                scale: 1.0,
            },
        };
        let mut generation = model.start(&request).unwrap();
        c.bench_function(&format!("tiny {dtype}/frame (backbone + flow head)"), |b| {
            b.iter(|| {
                if generation.next_frame().is_none() {
                    generation = model.start(&request).unwrap();
                }
            })
        });
        let codes = model.start(&request).unwrap().finish().unwrap().codes;
        let ten: Vec<Vec<u32>> = codes.iter().cycle().take(10).cloned().collect();
        c.bench_function(&format!("tiny {dtype}/codec decode 10 frames"), |b| {
            b.iter(|| model.decode(black_box(&ten)).unwrap())
        });
        c.bench_function(&format!("tiny {dtype}/prefill"), |b| {
            b.iter(|| model.start(black_box(&request)).unwrap())
        });
    }
}

/// The `[out, in]` products of one full-size Voxtral TTS backbone layer (3072 wide, 9216
/// hidden): q, k, v, o, then w1, w3, w2.
const BACKBONE_LAYER: [(usize, usize); 7] = [
    (4096, 3072),
    (1024, 3072),
    (1024, 3072),
    (3072, 4096),
    (9216, 3072),
    (9216, 3072),
    (3072, 9216),
];

/// The seven weight matrices of one full-size backbone layer (233 MB in bf16, far beyond the
/// caches), times 1 row (one stream), 6 rows (the flow head's rows for one stream) and 24 (four
/// streams' flow head, where the product is bound by arithmetic, not by reading): each
/// kernel variant this CPU supports, `TchTensor::linear` (the active variant) and libtorch's
/// own `linear`. Throughput is in weight bytes read per second; a bf16 weight is 2 bytes and
/// takes 2 floating-point operations per row, so the arithmetic rate is rows x bytes/s.
fn layer_products(c: &mut Criterion) {
    use criterion::Throughput;
    use half::bf16;
    use voxtral_tts::tensor::cpu_gemv::{linear_with, Variant};
    use voxtral_tts::tensor::NetworkOps;
    let _guard = tch::no_grad_guard();
    let shapes = BACKBONE_LAYER;
    let random = |rows: usize, cols: usize| {
        TchTensor(tch::Tensor::randn(
            [rows as i64, cols as i64],
            (tch::Kind::BFloat16, tch::Device::Cpu),
        ))
    };
    // SAFETY: a contiguous bf16 CPU tensor of `numel` values, alive while the slice is used.
    let values = |t: &TchTensor| unsafe {
        std::slice::from_raw_parts(t.0.data_ptr() as *const bf16, t.0.numel())
    };
    let weights: Vec<TchTensor> = shapes.iter().map(|&(o, i)| random(o, i)).collect();
    let bytes: u64 = shapes.iter().map(|&(o, i)| (o * i * 2) as u64).sum();
    let threads = usize::try_from(tch::get_num_threads()).unwrap_or(1);
    let mut group = c.benchmark_group("full-size layer bf16 products");
    group.throughput(Throughput::Bytes(bytes));
    group.sample_size(10);
    for rows in [1, 6, 24] {
        let inputs: Vec<TchTensor> = shapes.iter().map(|&(_, i)| random(rows, i)).collect();
        for variant in Variant::ALL.into_iter().filter(|v| v.supported()) {
            let mut outputs: Vec<Vec<bf16>> = shapes
                .iter()
                .map(|&(o, _)| vec![bf16::ZERO; rows * o])
                .collect();
            group.bench_function(format!("{rows} rows/{variant} kernel"), |b| {
                b.iter(|| {
                    for ((x, w), y) in inputs.iter().zip(&weights).zip(&mut outputs) {
                        let k = x.0.size()[1] as usize;
                        linear_with(variant, values(x), values(w), k, y, threads);
                    }
                })
            });
        }
        group.bench_function(format!("{rows} rows/TchTensor::linear"), |b| {
            b.iter(|| {
                for (x, w) in inputs.iter().zip(&weights) {
                    black_box(x.linear(w));
                }
            })
        });
        group.bench_function(format!("{rows} rows/libtorch linear"), |b| {
            b.iter(|| {
                for (x, w) in inputs.iter().zip(&weights) {
                    let _ = black_box(x.0.linear::<tch::Tensor>(&w.0, None));
                }
            })
        });
    }
    group.finish();
}

/// The products of one full-size backbone layer with its weights in `q8` and `q4`, with the
/// active kernel (and the portable one at one row): one row is a decode step, 6 the flow
/// head's (three tokens, both guidance branches), 16 a batch of streams. Throughput is in
/// multiply-adds per second (one per weight per row), which is what bounds these products once
/// the weights are 4 or 8 bits.
fn quantized_layer_products(c: &mut Criterion) {
    use criterion::Throughput;
    use voxtral_tts::tensor::cpu_gemv::Variant;
    use voxtral_tts::tensor::quantized::{linear_with, quantize, QuantFormat};
    let shapes = BACKBONE_LAYER;
    let random = |n: usize, seed: u64| -> Vec<f32> {
        let mut state = seed;
        (0..n)
            .map(|_| {
                state = state
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                (state >> 40) as f32 / (1u64 << 23) as f32 - 1.0
            })
            .collect()
    };
    let threads = usize::try_from(tch::get_num_threads()).unwrap_or(1);
    let weights_per_row: u64 = shapes.iter().map(|&(o, i)| (o * i) as u64).sum();
    let variants = [Variant::active(), Variant::Portable];
    for format in QuantFormat::ALL {
        let weights: Vec<Vec<u8>> = shapes
            .iter()
            .enumerate()
            .map(|(s, &(o, i))| quantize(format, &random(o * i, s as u64), i))
            .collect();
        let mut group = c.benchmark_group(format!("full-size layer {format} products"));
        group.sample_size(10);
        for rows in [1, 6, 16] {
            group.throughput(Throughput::Elements(weights_per_row * rows as u64));
            let inputs: Vec<Vec<f32>> = shapes.iter().map(|&(_, i)| random(rows * i, 7)).collect();
            let mut outputs: Vec<Vec<f32>> =
                shapes.iter().map(|&(o, _)| vec![0.0; rows * o]).collect();
            // The portable kernel at one row only: it is the reference, not a contender.
            let variants = if rows == 1 {
                &variants[..]
            } else {
                &variants[..1]
            };
            for &variant in variants {
                group.bench_function(format!("{rows} rows/{variant} kernel"), |b| {
                    b.iter(|| {
                        for ((x, w), (y, &(_, k))) in inputs
                            .iter()
                            .zip(&weights)
                            .zip(outputs.iter_mut().zip(&shapes))
                        {
                            linear_with(variant, format, x, w, k, y, threads);
                        }
                    })
                });
            }
        }
        group.finish();
    }
}

/// Convolutions of the Qwen3-TTS speech-tokenizer decoder's first block at its published
/// width, on the NLC rows of a one-frame and a 16-frame chunk: the backend's (products per
/// tap) beside libtorch's own convolution of the same values. Throughput is in multiply-adds.
fn decoder_convolutions(c: &mut Criterion) {
    use criterion::Throughput;
    use voxtral_tts::tensor::{ConvKind, NetworkOps};
    let _guard = tch::no_grad_guard();
    let f32s = (tch::Kind::Float, tch::Device::Cpu);
    let mut group = c.benchmark_group("qwen3 decoder block 1 convolutions");
    group.sample_size(10);
    for frames in [1i64, 16] {
        // The transposed conv (1536 to 768 channels, kernel 16, stride 8) reads the chunk's 4
        // samples per frame and one earlier; the dilated conv (768, kernel 7, dilation 9) its
        // 32 per frame and 54 earlier.
        let up_x = tch::Tensor::randn([1, 4 * frames + 1, 1536], f32s);
        let up_w = tch::Tensor::randn([1536, 768, 16], f32s);
        let conv_x = tch::Tensor::randn([1, 32 * frames + 54, 768], f32s);
        let conv_w = tch::Tensor::randn([768, 768, 7], f32s);
        let up = TchTensor::prepare_conv_weight(&TchTensor(up_w.copy()), ConvKind::Transpose);
        let conv = TchTensor::prepare_conv_weight(&TchTensor(conv_w.copy()), ConvKind::Conv);
        let (up_in, conv_in) = (TchTensor(up_x.copy()), TchTensor(conv_x.copy()));
        group.throughput(Throughput::Elements(
            (up_x.size()[1] * 1536 * 768 * 16) as u64,
        ));
        group.bench_function(format!("{frames} frames/transposed/products"), |b| {
            b.iter(|| black_box(up_in.conv_transpose1d(&up, 8)))
        });
        group.bench_function(format!("{frames} frames/transposed/libtorch"), |b| {
            b.iter(|| {
                black_box(up_x.transpose(1, 2).conv_transpose1d::<tch::Tensor>(
                    &up_w,
                    None,
                    [8],
                    [0],
                    [0],
                    1,
                    [1],
                ))
            })
        });
        group.throughput(Throughput::Elements((32 * frames * 768 * 768 * 7) as u64));
        group.bench_function(format!("{frames} frames/dilated/products"), |b| {
            b.iter(|| black_box(conv_in.conv1d_dilated(&conv, 9, 1)))
        });
        group.bench_function(format!("{frames} frames/dilated/libtorch"), |b| {
            b.iter(|| {
                black_box(conv_x.transpose(1, 2).conv1d::<tch::Tensor>(
                    &conv_w,
                    None,
                    [1],
                    [0],
                    [9],
                    1,
                ))
            })
        });
    }
    group.finish();
}

criterion_group!(
    benches,
    tokenizer,
    text_front_end,
    frames,
    layer_products,
    quantized_layer_products,
    decoder_convolutions
);
criterion_main!(benches);
