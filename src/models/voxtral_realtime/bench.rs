//! `voxtral-tts bench` on a Voxtral Realtime folder (the family's bench hook): the offline
//! real-time factor, the live step of `--batch` streams (each stream's encoder for 80 ms of
//! audio, then one batched decoder pass) against the 80 ms of audio a step covers, which is
//! also the compute part of the latency from an audio chunk to its token, and the weight-read
//! floor.

use super::batch::BatchDecoder;
use super::params::Config;
use super::streaming::AudioStream;
use super::transcriber::Transcriber;
use crate::bench::{finish_report, ms, read_bandwidth, weights_name, BenchArgs};
use crate::device::OnBackend;
use crate::nn::quantized_keys::{self, Quantized};
use crate::tensor::cpu_gemv::Variant;
use crate::tensor::tch_backend::TchTensor;
use crate::tensor::{DType, Tensor, TensorData};
use anyhow::{Context, Result};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Times the folder `dir` on `args.device`.
pub fn run(args: &BenchArgs, dir: &Path) -> Result<()> {
    let dir = dir.to_path_buf();
    args.device
        .run(args.threads.unwrap_or(0), SttBench { args, dir })
        .map_err(anyhow::Error::msg)?
}

struct SttBench<'a> {
    args: &'a BenchArgs,
    dir: PathBuf,
}

/// A voice-like test signal at `rate`: a gliding 150 Hz tone with harmonics, its loudness
/// swinging four times a second (the weights are random, so only its length matters).
fn signal(seconds: f64, rate: u32) -> Vec<f32> {
    let tau = std::f64::consts::TAU;
    (0..(seconds * f64::from(rate)) as usize)
        .map(|i| {
            let t = i as f64 / f64::from(rate);
            let phase = tau * (150.0 * t - 50.0 / (tau * 3.0) * (tau * 3.0 * t).cos());
            let voiced = phase.sin() + 0.5 * (2.0 * phase).sin() + 0.25 * (3.0 * phase).sin();
            (0.15 * voiced * (0.6 + 0.4 * (tau * 4.0 * t).sin())) as f32
        })
        .collect()
}

impl OnBackend for SttBench<'_> {
    type Output = Result<()>;

    fn run<T: Tensor>(self, device: &T::Device) -> Result<()> {
        let _guard = tch::no_grad_guard();
        let (args, dir) = (self.args, &self.dir);
        let config = Config::load(dir)?;
        let (rate, streaming) = (config.mel.sample_rate, &config.streaming);
        let audio = signal(args.seconds, rate);
        // A live stream: its prompt's audio, then one token's samples per timed step.
        let prompt_samples = (streaming.prompt_len() - streaming.left_pad_tokens)
            * streaming.samples_per_token
            + streaming.look_ahead_samples;
        let live_samples = prompt_samples + (args.frames + 1) * streaming.samples_per_token;
        let positions = streaming
            .offline_positions(audio.len())
            .max(streaming.offline_positions(live_samples));
        let threads = if T::BACKEND == TchTensor::BACKEND {
            usize::try_from(tch::get_num_threads()).unwrap_or(1).max(1)
        } else {
            1
        };

        let started = Instant::now();
        let (model, at_load) = quantized_keys::recording(|| {
            Transcriber::<T>::load_quantized(dir, device, args.dtype, positions, args.quantize)
        });
        let model = model.context("loading the model")?;
        println!(
            "model      {} (Voxtral Realtime, {}, {threads} threads)",
            dir.display(),
            args.dtype
        );
        let load = started.elapsed();
        println!("load       {:.0} ms", ms(load));

        // Warm-up: first calls allocate and pick kernels.
        model.transcribe(&audio[..audio.len().min(rate as usize)])?;

        let started = Instant::now();
        let embeddings = model.audio_embeddings(&audio)?;
        let encoded = started.elapsed();
        let tokens = model.greedy(&embeddings, |_| {});
        let total = started.elapsed();
        println!(
            "offline    {:.2} s of audio in {:.2} s: real-time factor {:.3} (encoder {:.2} s over {} positions, decoder {:.2} s for {} tokens)",
            args.seconds,
            total.as_secs_f64(),
            total.as_secs_f64() / args.seconds,
            encoded.as_secs_f64(),
            embeddings.shape()[1],
            (total - encoded).as_secs_f64(),
            tokens.len()
        );

        let (encoder_bytes, decoder_bytes) = weight_bytes_per_step(dir, args.dtype, &at_load)?;
        // An accelerator's large copy (bytes read and written), or the host's large read.
        let read = T::device_copy_bandwidth(device).unwrap_or_else(|| read_bandwidth(threads));
        println!(
            "weights    per step {:.2} GB for each stream's encoder and adapter, {:.2} GB for the decoder (head included); {:.1} GB/s memory bandwidth ({threads} threads)",
            encoder_bytes / 1e9,
            decoder_bytes / 1e9,
            read / 1e9
        );

        let step_audio_ms = streaming.samples_per_token as f64 * 1e3 / f64::from(rate);
        let batches = if args.batch.is_empty() {
            vec![1]
        } else {
            args.batch.clone()
        };
        let mut kept_up = 0;
        let mut report = json!({
            "family": "voxtral-realtime",
            "model": dir.display().to_string(),
            "backend": T::BACKEND,
            "device": format!("{device:?}"),
            "dtype": args.dtype.to_string(),
            "weights": weights_name::<T>(args, dir, device),
            "kernel": T::is_cpu(device).then(|| Variant::active().name()),
            "threads": threads,
            "frame_ms": step_audio_ms,
            "load_ms": ms(load),
            "offline": {
                "audio_s": args.seconds,
                "s": total.as_secs_f64(),
                "real_time_factor": total.as_secs_f64() / args.seconds,
                "encoder_s": encoded.as_secs_f64(),
                "decoder_s": (total - encoded).as_secs_f64(),
                "tokens": tokens.len(),
            },
            "weight_bytes_per_step": {"encoder": encoder_bytes, "decoder": decoder_bytes},
            "floors": {"read": {"bandwidth_gb_per_s": read / 1e9}},
        });
        let mut batch_report = Vec::new();
        for streams in batches {
            anyhow::ensure!(streams > 0, "--batch: sizes must be at least 1");
            let times = live_steps(&model, &audio, streams, prompt_samples, args.frames)?;
            let step = times.encoder + times.decoder;
            let floor = (streams as f64 * encoder_bytes + decoder_bytes) / read * 1e3;
            let keeps_up = step <= step_audio_ms;
            if keeps_up {
                kept_up = kept_up.max(streams);
            }
            // A live step gives each stream one token: one frame of 80 ms.
            if streams == 1 {
                report["ms_per_frame"] = json!({
                    "encoder": times.encoder,
                    "decoder": times.decoder,
                    "total": step,
                });
                report["real_time_factor"] = json!(step / step_audio_ms);
            }
            batch_report.push(json!({
                "streams": streams,
                "steps": args.frames,
                "ms_per_step": step,
                "encoder_ms": times.encoder,
                "decoder_ms": times.decoder,
                "frames_per_s": streams as f64 * 1e3 / step,
                "floor_ms": floor,
            }));
            println!(
                "batch {streams:<3}  {step:.1} ms/step for {step_audio_ms:.0} ms of audio per stream (encoders {:.1} ms, decoder {:.1} ms; {} steps): real-time factor {:.2} per stream, {}; floor/read {floor:.1} ms, measured/floor {:.2}x",
                times.encoder,
                times.decoder,
                args.frames,
                step / step_audio_ms,
                if keeps_up { "keeps up" } else { "falls behind" },
                step / floor,
            );
        }
        println!(
            "live       {kept_up} streams kept up with (of the --batch sizes); a chunk's token comes one step after its 80 ms and 2.5 ms of look-ahead are in, {} ms of model delay after the words",
            streaming.delay_tokens as f64 * step_audio_ms
        );
        report["batch"] = batch_report.into();
        finish_report(args, report)
    }
}

/// Mean milliseconds per live step: every stream's encoder, then the batched decoder pass.
struct StepTimes {
    encoder: f64,
    decoder: f64,
}

/// `streams` live streams of `audio` (repeated as needed), prefilled untimed, then `steps`
/// timed steps of one token's samples each.
fn live_steps<T: Tensor>(
    model: &Transcriber<T>,
    audio: &[f32],
    streams: usize,
    prompt_samples: usize,
    steps: usize,
) -> Result<StepTimes> {
    let token = model.config.streaming.samples_per_token;
    let samples: Vec<f32> = audio
        .iter()
        .copied()
        .cycle()
        .take(prompt_samples + steps * token)
        .collect();
    let mut decoder = BatchDecoder::new(model, streams);
    let mut live = (0..streams)
        .map(|_| {
            let utterance = decoder.start().context("a free slot")?;
            Ok((AudioStream::start(model)?, utterance))
        })
        .collect::<Result<Vec<_>>>()?;
    for (audio, utterance) in &mut live {
        if let Some(e) = audio.push(&samples[..prompt_samples])? {
            utterance.feed(e);
        }
    }
    let mut rows: Vec<_> = live.iter_mut().map(|(_, u)| u).collect();
    anyhow::ensure!(
        decoder.step(&mut rows) == streams,
        "the prompt's audio did not complete the prompt"
    );
    let (mut encoder, mut decoding) = (Duration::ZERO, Duration::ZERO);
    for step in 0..steps {
        let chunk = &samples[prompt_samples + step * token..][..token];
        let started = Instant::now();
        for (audio, utterance) in &mut live {
            if let Some(e) = audio.push(chunk)? {
                utterance.feed(e);
            }
        }
        let encoded = Instant::now();
        let mut rows: Vec<_> = live.iter_mut().map(|(_, u)| u).collect();
        let decoded = decoder.step(&mut rows);
        anyhow::ensure!(decoded == streams, "a stream had no position to decode");
        encoder += encoded - started;
        decoding += encoded.elapsed();
    }
    for (_, utterance) in live {
        decoder.end(utterance);
    }
    Ok(StepTimes {
        encoder: ms(encoder) / steps as f64,
        decoder: ms(decoding) / steps as f64,
    })
}

/// Weight bytes a live step reads at `dtype`, with the weights stored in blocks or quantized at
/// load (`at_load`) at their format's size: per stream, the encoder and adapter (80 ms of
/// audio); once for the batch, the decoder layers, norms and the token table (the tied head).
fn weight_bytes_per_step(dir: &Path, dtype: DType, at_load: &[Quantized]) -> Result<(f64, f64)> {
    let path = dir.join("consolidated.safetensors");
    let (mut encoder, mut decoder) = (0.0, 0.0);
    for (key, bytes) in quantized_keys::loaded_bytes(&path, dtype, at_load)? {
        let audio_side =
            key.contains("whisper_encoder.") || key.contains("audio_language_projection.");
        if audio_side {
            encoder += bytes as f64;
        } else {
            decoder += bytes as f64;
        }
    }
    Ok((encoder, decoder))
}
