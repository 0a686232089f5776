//! `voxtral-tts bench` through the engine interface, for the speaking families without a bench
//! of their own (`models::registry::Bench::Engine`), as the server's worker drives them:
//! first audio (prefill, then frames until their decode gives samples), the batched step at
//! each `--batch` size, the decoder's time per frame, and the weight-read floor of a frame
//! where the family counts the bytes it reads.

use crate::bench::{finish_report, ms, read_bandwidth, weights_name, BenchArgs};
use crate::device::OnBackend;
use crate::engine::{
    prepare_speech, Conditioning, EngineOptions, Sampling, SpeechInput, SpeechSession,
    TextToSpeech, WithEngine,
};
use crate::models::registry::{load_tts, WeightBytes};
use crate::nn::quantized_keys;
use crate::tensor::cpu_gemv::Variant;
use crate::tensor::tch_backend::TchTensor;
use crate::tensor::{Tensor, TensorData};
use anyhow::{Context, Result};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Times the folder `dir`; `weight_bytes_per_frame` counts what a frame reads, where the
/// family can.
pub fn run(
    args: &BenchArgs,
    dir: &Path,
    weight_bytes_per_frame: Option<WeightBytes>,
) -> Result<()> {
    let dir = dir.to_path_buf();
    let bench = EngineBench {
        args,
        dir,
        weight_bytes_per_frame,
    };
    args.device
        .run(args.threads.unwrap_or(0), bench)
        .map_err(anyhow::Error::msg)?
}

struct EngineBench<'a> {
    args: &'a BenchArgs,
    dir: PathBuf,
    weight_bytes_per_frame: Option<WeightBytes>,
}

impl OnBackend for EngineBench<'_> {
    type Output = Result<()>;

    fn run<T: Tensor>(self, device: &T::Device) -> Result<()> {
        let sessions = self.args.batch.iter().copied().max().unwrap_or(1).max(1);
        let options = EngineOptions {
            max_sessions: sessions,
            quantize: self.args.quantize,
            cuda_graphs: self.args.cuda_graphs,
            ..EngineOptions::default()
        };
        let started = Instant::now();
        let timed = Timed {
            args: self.args,
            dir: &self.dir,
            weight_bytes_per_frame: self.weight_bytes_per_frame,
            started,
            backend: T::BACKEND,
            device: format!("{device:?}"),
            weights: weights_name::<T>(self.args, &self.dir, device),
            kernel: T::is_cpu(device).then(|| Variant::active().name()),
            threads: if T::BACKEND == TchTensor::BACKEND {
                usize::try_from(tch::get_num_threads()).unwrap_or(1).max(1)
            } else {
                1
            },
        };
        // Recording what the loaders quantize, which the weights' bytes count.
        quantized_keys::recording(|| {
            load_tts::<T, _>(&self.dir, device, self.args.dtype, options, timed)
        })
        .0
        .context("loading the model")?
    }
}

struct Timed<'a> {
    args: &'a BenchArgs,
    dir: &'a Path,
    weight_bytes_per_frame: Option<WeightBytes>,
    started: Instant,
    backend: &'static str,
    device: String,
    /// How the large linear weights are multiplied (`weights_name`).
    weights: String,
    /// The CPU kernel variant, on a CPU.
    kernel: Option<&'static str>,
    threads: usize,
}

impl WithEngine for Timed<'_> {
    type Output = Result<()>;

    fn run<E: TextToSpeech>(self, engine: E) -> Result<()> {
        let args = self.args;
        let card = engine.card();
        println!(
            "model      {} ({}, {}, {} threads)",
            self.dir.display(),
            card.family,
            args.dtype,
            self.threads
        );
        let load = self.started.elapsed();
        println!("load       {:.0} ms", ms(load));
        let voice = match (card.voices.first(), card.voice_design) {
            (Some(v), _) => v.name.clone(),
            (None, true) => "designed".into(),
            (None, false) => anyhow::bail!(
                "this folder has no preset voices (a cloning-only model): bench a CustomVoice or \
                 VoiceDesign folder"
            ),
        };
        let input = SpeechInput {
            text: args.text.clone(),
            voice,
            conditioning: Conditioning {
                language: Some("en".into()),
                instructions: card.voice_design.then(|| "A calm, warm voice.".into()),
                custom_voice: None,
            },
            max_frames: args.frames.min(card.max_frames),
            sampling: Sampling {
                seed: 0,
                noise_scale: 1.0,
                temperature: None,
            },
            normalize: true,
            segment_chars: usize::MAX,
        };
        let speech = prepare_speech(&*engine.preparer(), card.max_frames, input)?;
        let frame_ms = card.samples_per_frame as f64 * 1e3 / card.sample_rate as f64;

        // Warm-up: first calls allocate and pick kernels.
        {
            let mut warm = engine.start_session(&speech, 0)?;
            engine.step(&mut [&mut warm])?;
            engine.decode(&warm, 0)?;
        }

        // First audio: the prefill, then frame by frame, each decoded as a streamed request
        // is, until a decode gives samples (a decoder with right context, as XTTS-v2's
        // HiFi-GAN stream, needs a few frames).
        let started = Instant::now();
        let mut first = engine.start_session(&speech, 0)?;
        let prefill = started.elapsed();
        let mut decoded = 0;
        loop {
            engine.step(&mut [&mut first])?;
            let pcm = engine.decode(&first, decoded)?;
            decoded = first.codes().len();
            if !pcm.is_empty() || first.stop_reason().is_some() {
                break;
            }
        }
        let first_audio = started.elapsed();
        let prompt_tokens = first.prompt_ids().len();
        println!(
            "first      {:.0} ms to the first audio ({decoded} frames; prefill {:.0} ms of {prompt_tokens} prompt tokens)",
            ms(first_audio),
            ms(prefill),
        );
        drop(first);

        let mut single_ms = None;
        let (mut decoder_ms, mut batch_report) = (None, Vec::new());
        let batches = if args.batch.is_empty() {
            vec![1]
        } else {
            args.batch.clone()
        };
        for n in batches {
            let mut sessions = (0..n)
                .map(|_| engine.start_session(&speech, 0))
                .collect::<Result<Vec<_>, _>>()?;
            let (mut frames, mut steps) = (0, 0);
            let started = Instant::now();
            while steps < args.frames && sessions.iter().any(|s| s.stop_reason().is_none()) {
                let before: usize = sessions.iter().map(|s| s.codes().len()).sum();
                let mut batch: Vec<&mut E::Session<'_>> = sessions.iter_mut().collect();
                engine.step(&mut batch)?;
                frames += sessions.iter().map(|s| s.codes().len()).sum::<usize>() - before;
                steps += 1;
            }
            let elapsed = started.elapsed();
            anyhow::ensure!(frames > 0, "the model stopped at once");
            let per_frame = ms(elapsed) / frames as f64;
            let step_ms = ms(elapsed) / steps as f64;
            let rate = frames as f64 / elapsed.as_secs_f64();
            let ratio = single_ms.map_or(String::new(), |one: f64| {
                format!(", {:.2}x one stream", one / per_frame)
            });
            single_ms.get_or_insert(per_frame);
            batch_report.push(json!({
                "streams": n,
                "steps": steps,
                "frames": frames,
                "ms_per_step": step_ms,
                "frames_per_s": rate,
            }));
            println!(
                "batch {n:<3}  {step_ms:.1} ms/step, {rate:.2} frames/s ({frames} frames in {steps} steps; real-time factor {:.3} per stream{ratio})",
                step_ms / frame_ms,
            );
            if n == 1 {
                let decoded = Instant::now();
                engine.decode(&sessions[0], 0)?;
                let per_frame_ms = ms(decoded.elapsed()) / sessions[0].codes().len() as f64;
                println!(
                    "decoder    {per_frame_ms:.2} ms/frame (whole utterance of {} frames)",
                    sessions[0].codes().len()
                );
                decoder_ms = Some((per_frame, per_frame_ms));
            }
        }
        let bytes = match self.weight_bytes_per_frame {
            Some(count) => count(self.dir, args.dtype, &quantized_keys::recorded())?,
            None => None,
        };
        let mut report = json!({
            "family": card.family,
            "model": self.dir.display().to_string(),
            "backend": self.backend,
            "device": self.device,
            "dtype": args.dtype.to_string(),
            "weights": self.weights,
            "kernel": self.kernel,
            "threads": self.threads,
            "frame_ms": frame_ms,
            "load_ms": ms(load),
            "first_audio_ms": ms(first_audio),
            "prefill_ms": ms(prefill),
            "prompt_tokens": prompt_tokens,
            "batch": batch_report,
        });
        // One stream's frame: its decode step, then its share of the decoder's work.
        if let Some((step, decoder)) = decoder_ms {
            report["ms_per_frame"] =
                json!({"step": step, "decoder": decoder, "total": step + decoder});
            report["real_time_factor"] = json!((step + decoder) / frame_ms);
        }
        if let Some(bytes) = bytes {
            let read = read_bandwidth(self.threads);
            report["weight_bytes_per_frame"] = json!(bytes);
            report["floors"] = json!({"read": {
                "bandwidth_gb_per_s": read / 1e9,
                "ms": bytes / read * 1e3,
            }});
            let floor = bytes / read * 1e3;
            println!(
                "floor/read {floor:.1} ms/frame: {:.2} GB of weights read per frame at {:.1} GB/s ({} threads){}",
                bytes / 1e9,
                read / 1e9,
                self.threads,
                single_ms.map_or(String::new(), |m| format!("; one stream measured/floor {:.2}x", m / floor))
            );
        }
        finish_report(args, report)
    }
}
