//! Batched decode steps: every request in a batch gets exactly what it gets alone, whether it
//! joins at the start or between steps, and however long the others run; the worker batches
//! queued jobs that way, each in a slot of the model's KV pool.

use crate::common;

use common::start_loaded_worker;
use std::path::Path;
use std::time::Instant;
use voxtral_tts::device::DeviceChoice;
use voxtral_tts::engine::{
    prepare_speech, Conditioning, EngineOptions, PreparedSpeech, Sampling, SpeechInput,
};
use voxtral_tts::models::voxtral_tts::testkit::cached_endless_test_model;
use voxtral_tts::models::voxtral_tts::testkit::cached_test_model;
use voxtral_tts::models::voxtral_tts::testkit::Preset;
use voxtral_tts::models::voxtral_tts::{Generation, Noise, SynthesisRequest, Voxtral};
use voxtral_tts::scheduler::{JobEvent, JobOptions, LoadedModel, StreamSettings, WorkerSettings};
use voxtral_tts::tensor::{tch_backend::TchTensor, DType, Tensor};

fn request(text: &str, voice: &str, max_frames: usize, noise: Noise) -> SynthesisRequest {
    SynthesisRequest {
        text: text.into(),
        voice: voice.into(),
        max_frames,
        noise,
    }
}

fn requests() -> Vec<SynthesisRequest> {
    vec![
        request(
            "Hello world, this is a test.",
            "casual_female",
            30,
            Noise::Seeded {
                seed: 0,
                scale: 0.0,
            },
        ),
        request(
            "A second, longer sentence to read aloud.",
            "fr_male",
            24,
            Noise::Seeded {
                seed: 0,
                scale: 0.0,
            },
        ),
        request(
            "Short.",
            "neutral_male",
            12,
            Noise::Seeded {
                seed: 5,
                scale: 1.0,
            },
        ),
        request(
            "Noise from a seed, in a batch.",
            "de_female",
            20,
            Noise::Seeded {
                seed: 9,
                scale: 1.0,
            },
        ),
    ]
}

fn check<T: Tensor>(device: &T::Device, preset: Preset, dtype: DType) {
    let _guard = tch::no_grad_guard();
    let model = Voxtral::<T>::load(&cached_test_model(preset, 0).unwrap(), device, dtype).unwrap();
    let reqs = requests();
    let alone: Vec<_> = reqs
        .iter()
        .map(|r| model.start(r).unwrap().finish().unwrap())
        .collect();

    // Request 0 runs 3 steps alone; 1 and 2 join; 3 joins two steps later.
    let mut running: Vec<Generation<'_, T>> = vec![model.start(&reqs[0]).unwrap()];
    for step in 0.. {
        if step == 3 {
            running.push(model.start(&reqs[1]).unwrap());
            running.push(model.start(&reqs[2]).unwrap());
        }
        if step == 5 {
            running.push(model.start(&reqs[3]).unwrap());
        }
        if step > 5 && running.iter().all(|g| g.stop_reason().is_some()) {
            break;
        }
        Generation::step_batch(&mut running.iter_mut().collect::<Vec<_>>());
    }
    for (i, (g, a)) in running.into_iter().zip(&alone).enumerate() {
        let batched = g.finish().unwrap();
        assert_eq!(
            batched.codes,
            a.codes,
            "{} {preset:?} {dtype}: request {i} codes",
            T::BACKEND
        );
        assert_eq!(batched.stop, a.stop, "request {i}");
        assert_eq!(batched.pcm, a.pcm, "request {i} pcm");
    }
}

const CPU: tch::Device = tch::Device::Cpu;

#[test]
fn batched_requests_equal_running_alone_f32() {
    check::<TchTensor>(&CPU, Preset::Tiny, DType::F32);
    check::<TchTensor>(&CPU, Preset::TinyOdd, DType::F32);
}

#[test]
fn batched_requests_equal_running_alone_bf16() {
    check::<TchTensor>(&CPU, Preset::Tiny, DType::BF16);
}

#[cfg(feature = "mlx")]
mod mlx {
    use super::*;
    use voxtral_tts::tensor::mlx_backend::{MlxDevice, MlxTensor};

    #[test]
    fn mlx_batched_requests_equal_running_alone_f32() {
        check::<MlxTensor>(&MlxDevice::Cpu, Preset::Tiny, DType::F32);
        check::<MlxTensor>(&MlxDevice::Cpu, Preset::TinyOdd, DType::F32);
    }

    #[test]
    fn mlx_batched_requests_equal_running_alone_bf16() {
        check::<MlxTensor>(&MlxDevice::Cpu, Preset::Tiny, DType::BF16);
    }
}

/// What the worker sent for one job: its PCM, frames, and when it started and ended.
struct Outcome {
    pcm: Vec<f32>,
    /// Samples per `Audio` event.
    chunks: Vec<usize>,
    frames: usize,
    /// Per segment, with `JobOptions::keep_codes`.
    codes: Vec<Vec<Vec<u32>>>,
    started: Instant,
    done: Instant,
}

/// Runs `jobs` through a real inference worker and collects each job's events. The start and
/// end times are the worker's (submission + time queued, + synthesis time), so they say
/// which jobs ran together whatever the collecting threads' scheduling.
fn run_worker(jobs: &[SynthesisRequest], slots: usize) -> Vec<Outcome> {
    let tiny = cached_test_model(Preset::Tiny, 0).unwrap();
    run_worker_with(&tiny, jobs, slots, JobOptions::default())
}

fn run_worker_with(
    model_dir: &Path,
    jobs: &[SynthesisRequest],
    slots: usize,
    options: JobOptions,
) -> Vec<Outcome> {
    let settings = WorkerSettings {
        model_id: "tiny".into(),
        model_dir: model_dir.to_path_buf(),
        device: DeviceChoice::Cpu,
        dtype: DType::F32,
        threads: 0,
        panic_on_input: None,
        streaming: StreamSettings::default(),
        // Prompts prefilled 5 tokens a step: jobs join while others still prefill.
        engine: EngineOptions {
            prefill_chunk_tokens: 5,
            max_sessions: slots,
            ..EngineOptions::default()
        },
    };
    let (queue, model, worker) = start_loaded_worker(settings, 16);
    let prepared: Vec<_> = jobs.iter().map(|r| prepare(&model, r)).collect();
    let receivers: Vec<_> = prepared
        .into_iter()
        .map(|p| (Instant::now(), queue.submit(p, options).unwrap()))
        .collect();
    drop(queue);
    let collectors: Vec<_> = receivers
        .into_iter()
        .map(|(submitted, mut events)| {
            std::thread::spawn(move || {
                let (mut pcm, mut chunks, mut started) = (Vec::new(), Vec::new(), None);
                loop {
                    match events.blocking_recv().expect("the job ends with Done") {
                        JobEvent::Started { queued } => started = Some(submitted + queued),
                        JobEvent::Progress { .. } => {}
                        JobEvent::Audio(chunk) => {
                            chunks.push(chunk.len());
                            pcm.extend(chunk);
                        }
                        JobEvent::Done(summary) => {
                            let started = started.unwrap();
                            return Outcome {
                                pcm,
                                chunks,
                                frames: summary.frames,
                                codes: summary.codes.into_iter().map(|s| s.codes).collect(),
                                started,
                                done: started + summary.synthesis_time,
                            };
                        }
                        JobEvent::Failed(e) => panic!("job failed: {e}"),
                    }
                }
            })
        })
        .collect();
    let outcomes = collectors.into_iter().map(|c| c.join().unwrap()).collect();
    worker.join().unwrap();
    outcomes
}

/// A request as the server prepares it, with short segments: the longer texts are spoken as
/// two or three generations.
fn prepare(model: &LoadedModel, r: &SynthesisRequest) -> PreparedSpeech {
    let Noise::Seeded { seed, scale } = r.noise else {
        panic!("the worker samples from seeds")
    };
    let input = SpeechInput {
        text: r.text.clone(),
        voice: r.voice.clone(),
        conditioning: Conditioning::default(),
        max_frames: r.max_frames,
        sampling: Sampling {
            seed,
            noise_scale: scale,
            temperature: None,
        },
        normalize: true,
        segment_chars: 24,
    };
    prepare_speech(&*model.preparer, model.card.max_frames, input).unwrap()
}

/// Four jobs of different lengths, voices, noise and segment counts.
fn worker_jobs() -> Vec<SynthesisRequest> {
    let mut jobs = requests();
    jobs[1].text = "A longer text. It is spoken as more than one segment, in order.".into();
    jobs[3].max_frames = 9;
    jobs
}

#[test]
fn the_worker_batches_queued_jobs_and_each_gets_what_it_gets_alone() {
    let jobs = worker_jobs();
    let serial = run_worker(&jobs, 1);
    let batched = run_worker(&jobs, 8);
    // One at a time: each job starts after the previous one ended.
    for pair in serial.windows(2) {
        assert!(
            pair[1].started >= pair[0].done,
            "max_batch_size 1 ran jobs together"
        );
    }
    // Batched: every job started before the first one ended.
    let first_done = batched.iter().map(|o| o.done).min().unwrap();
    assert!(
        batched.iter().all(|o| o.started < first_done),
        "not batched"
    );
    for (i, (b, s)) in batched.iter().zip(&serial).enumerate() {
        assert!(b.frames > 0 && !b.pcm.is_empty(), "job {i} made no audio");
        assert_eq!(b.frames, s.frames, "job {i} frames");
        assert_eq!(b.pcm, s.pcm, "job {i} pcm differs when batched");
    }
}

/// Two KV slots: the third job waits in the queue until a running one ends and gives its
/// slot back, then gets what it gets alone. A job of several segments keeps running in one
/// slot from segment to segment, with every slot taken.
#[test]
fn jobs_beyond_the_free_kv_slots_wait_for_one() {
    let jobs = worker_jobs();
    let order = [jobs[0].clone(), jobs[1].clone(), jobs[3].clone()];
    let outcomes = run_worker(&order, 2);
    let first_done = outcomes[0].done.min(outcomes[1].done);
    assert!(
        outcomes[1].started < first_done,
        "the first two run together"
    );
    assert!(
        outcomes[2].started >= first_done,
        "the third job was admitted without a free slot"
    );
    let alone = run_worker(&order, 1);
    for (i, (o, a)) in outcomes.iter().zip(&alone).enumerate() {
        assert_eq!(o.pcm, a.pcm, "job {i}");
    }
}

/// The pool's memory is split between its slots: a slot's positions bound a request's prompt
/// plus frames, and a request beyond them is refused when it is prepared, before any queue.
#[test]
fn the_kv_budget_bounds_each_slot() {
    let _guard = tch::no_grad_guard();
    // Runs the request to its frame limit whatever the CPU.
    let dir = cached_endless_test_model(Preset::Tiny, 0).unwrap();
    let (cpu, dtype) = (tch::Device::Cpu, DType::F32);
    let roomy = Voxtral::<TchTensor>::load(&dir, &cpu, dtype).unwrap();
    let req = &requests()[0];
    let prompt = roomy.prompt_ids(&req.text, &req.voice).unwrap().len();
    let needed = prompt + req.max_frames;
    assert!(roomy.max_positions() >= needed);
    // Four slots of exactly this request's positions.
    let per_position = roomy.kv_bytes_per_position();
    let options = |positions: usize| EngineOptions {
        max_sessions: 4,
        kv_cache_bytes: 4 * positions * per_position,
        ..EngineOptions::default()
    };
    let exact = Voxtral::<TchTensor>::load_for(&dir, &cpu, dtype, &options(needed)).unwrap();
    assert_eq!(exact.max_positions(), needed);
    let mut generation = exact.start(req).unwrap();
    while generation.next_frame().is_some() {}
    assert_eq!(generation.frames().len(), req.max_frames);
    drop(generation);

    let short = Voxtral::<TchTensor>::load_for(&dir, &cpu, dtype, &options(needed - 1)).unwrap();
    let err = short.start(req).err().expect("one position short");
    let limit = format!("exceeds the {} positions", needed - 1);
    assert!(err.to_string().contains(&limit), "{err}");
    // Every slot taken: the next generation is refused, and runs once one is given back.
    let held: Vec<Generation<'_, TchTensor>> = (0..4)
        .map(|_| exact.start(&requests()[2]).unwrap())
        .collect();
    assert_eq!(exact.free_slots(), 0);
    let err = exact.start(&requests()[2]).err().expect("no free slot");
    assert_eq!(err.to_string(), "all 4 KV-cache slots are in use");
    drop(held);
    assert_eq!(exact.free_slots(), 4);
}

#[test]
fn streamed_jobs_get_doubling_chunks_and_others_one_decode_per_segment() {
    const FRAME: usize = 1920;
    const FADE: usize = 240;
    let job = request(
        "Good morning.",
        "neutral_male",
        40,
        Noise::Seeded {
            seed: 0,
            scale: 0.0,
        },
    );
    // Every frame up to the limit, whatever the CPU.
    let endless = cached_endless_test_model(Preset::Tiny, 0).unwrap();
    let streamed = run_worker_with(
        &endless,
        std::slice::from_ref(&job),
        8,
        JobOptions {
            stream: true,
            ..JobOptions::default()
        },
    );
    assert_eq!(streamed[0].frames, 40);
    // 4, 8, 16 frames, then the last 12; 10 ms are held back for a crossfade until the end.
    assert_eq!(
        streamed[0].chunks,
        [4 * FRAME - FADE, 8 * FRAME, 16 * FRAME, 12 * FRAME, FADE]
    );
    let whole = run_worker_with(&endless, &[job], 8, JobOptions::default());
    assert_eq!(whole[0].chunks, [40 * FRAME - FADE, FADE]);
    let worst = whole[0]
        .pcm
        .iter()
        .zip(&streamed[0].pcm)
        .map(|(a, b)| (a - b).abs())
        .fold(0.0f32, f32::max);
    assert!(worst < 1e-4, "chunked vs one-shot decode: {worst}");
}

/// The batching tests run with the variant `VOXTRAL_CPU_KERNEL` names (make test runs them
/// once as on an AVX2-only CPU): check that the name took effect.
#[test]
fn the_kernel_variant_follows_voxtral_cpu_kernel() {
    use voxtral_tts::tensor::cpu_gemv::Variant;
    let active = Variant::active();
    eprintln!(
        "kernel variant: {active} (best on this CPU: {})",
        Variant::best()
    );
    if let Ok(name) = std::env::var("VOXTRAL_CPU_KERNEL") {
        let requested = Variant::ALL.iter().find(|v| v.name() == name);
        if let Some(v) = requested.filter(|v| v.supported()) {
            assert_eq!(active, *v);
        }
    }
}

/// The worker prefills prompts 5 tokens a step; the codes are those of a whole-prompt prefill
/// (`Voxtral::start`), batched or not.
#[test]
fn prompts_prefilled_in_chunks_give_the_codes_of_a_whole_prefill() {
    let _guard = tch::no_grad_guard();
    let jobs = vec![requests()[2].clone(), requests()[0].clone()];
    let options = JobOptions {
        keep_codes: true,
        ..JobOptions::default()
    };
    let tiny = cached_test_model(Preset::Tiny, 0).unwrap();
    let outcomes = run_worker_with(&tiny, &jobs, 8, options);
    let model = Voxtral::<TchTensor>::load(&tiny, &tch::Device::Cpu, DType::F32).unwrap();
    // "Short.": one segment, the same text the worker prefilled.
    let mut whole = model.start(&jobs[0]).unwrap();
    assert!(
        whole.prompt_ids.len() > 10,
        "the prompt spans several chunks"
    );
    while whole.next_frame().is_some() {}
    assert_eq!(outcomes[0].codes, [whole.frames().to_vec()]);
}
