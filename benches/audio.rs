//! Encoders: one second of 24 kHz audio into every response format, and the time stretch.

use criterion::{criterion_group, criterion_main, Criterion};
use std::hint::black_box;
use voxtral_tts::audio::{encode_audio, time_stretch, AudioFormat};

const SAMPLE_RATE: u32 = 24_000;

fn one_second() -> Vec<f32> {
    (0..SAMPLE_RATE as usize)
        .map(|i| 0.5 * (i as f32 * 440.0 * std::f32::consts::TAU / SAMPLE_RATE as f32).sin())
        .collect()
}

fn encoders(c: &mut Criterion) {
    let pcm = one_second();
    for format in AudioFormat::ALL {
        if format.is_supported() {
            c.bench_function(&format!("encode 1 s/{format}"), |b| {
                b.iter(|| encode_audio(format, black_box(&pcm), SAMPLE_RATE).unwrap())
            });
        }
    }
    c.bench_function("time_stretch 1 s/x1.5", |b| {
        b.iter(|| time_stretch(black_box(&pcm), 1.5, SAMPLE_RATE))
    });
}

criterion_group!(benches, encoders);
criterion_main!(benches);
