//! Batched decode steps: every request in a batch gets exactly what it gets alone, whether it
//! joins at the start or between steps, and however long the others run.

use voxtral_tts::model::{Generation, Noise, SynthesisRequest, Voxtral};
use voxtral_tts::tensor::{tch_backend::TchTensor, DType};
use voxtral_tts::testmodel::{cached_test_model, Preset};

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

fn check(preset: Preset, dtype: DType) {
    let _guard = tch::no_grad_guard();
    let model = Voxtral::<TchTensor>::load(
        &cached_test_model(preset, 0).unwrap(),
        &tch::Device::Cpu,
        dtype,
    )
    .unwrap();
    let reqs = requests();
    let alone: Vec<_> = reqs
        .iter()
        .map(|r| model.start(r).unwrap().finish().unwrap())
        .collect();

    // Request 0 runs 3 steps alone; 1 and 2 join; 3 joins two steps later.
    let mut running: Vec<Generation<'_, TchTensor>> = vec![model.start(&reqs[0]).unwrap()];
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
            batched.codes, a.codes,
            "{preset:?} {dtype}: request {i} codes"
        );
        assert_eq!(batched.stop, a.stop, "request {i}");
        assert_eq!(batched.pcm, a.pcm, "request {i} pcm");
    }
}

#[test]
fn batched_requests_equal_running_alone_f32() {
    check(Preset::Tiny, DType::F32);
    check(Preset::TinyOdd, DType::F32);
}

#[test]
fn batched_requests_equal_running_alone_bf16() {
    check(Preset::Tiny, DType::BF16);
}
