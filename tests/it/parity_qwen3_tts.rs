//! Qwen3-TTS talker and code predictor against the official qwen-tts 0.1.1 goldens
//! (tests/goldens/qwen3_tts/<preset>/, made by tools/goldens/qwen3_tts/make_goldens.py), f32 on
//! libtorch (CPU), for every `qwen3-tiny-*` preset and every case of its goldens: the
//! tokenized prompt texts, the prefill layout and embeddings, the talker's logits and hidden
//! state at every step, the codes (greedy in both text layouts, early EOS, and the sampled case
//! replayed on the recorded uniforms), and how generation stopped. The Base presets' x-vector
//! and reference codes are computed from the goldens' clip (speaker encoder, speech-tokenizer
//! encoder) and fed to the cases.

use safetensors::SafeTensors;
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};
use voxtral_tts::engine::StopReason;
use voxtral_tts::models::qwen3_tts::prompt::{
    instruct_text, reference_text, target_text, CodecInput, Position,
};
use voxtral_tts::models::qwen3_tts::speaker_mel::{SpeakerMelFrontEnd, SPEAKER_SAMPLE_RATE};
use voxtral_tts::models::qwen3_tts::speech_encoder::SpeechEncoder;
use voxtral_tts::models::qwen3_tts::testkit::make_test_model as make_qwen3_test_model;
use voxtral_tts::models::qwen3_tts::testkit::Qwen3Preset;
use voxtral_tts::models::qwen3_tts::{
    ClonedVoice, GenerationParams, PromptInput, Qwen3Tts, Reference, TalkerOptions, TextLayout,
    Uniforms, Voice,
};
use voxtral_tts::nn::layer_probe::{self, LayerOutput};
use voxtral_tts::tensor::quantized::QuantFormat;
use voxtral_tts::tensor::tch_backend::TchTensor;
use voxtral_tts::tensor::{DType, TensorData};
use voxtral_tts::tokenizers::qwen2::Qwen2Tokenizer;

/// Max abs difference of the prefill and trailing-text embeddings (the goldens' own check of
/// the spec's layout against the official code allows the same).
const EMBEDDING_TOLERANCE: f32 = 1e-5;
/// Max abs difference of the talker's logits and hidden states, every step.
const TALKER_TOLERANCE: f32 = 1e-4;

struct Goldens {
    json: Value,
    tensors: Vec<u8>,
}

impl Goldens {
    fn load(preset: Qwen3Preset) -> Goldens {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/goldens/qwen3_tts")
            .join(preset.name());
        let json =
            serde_json::from_str(&std::fs::read_to_string(dir.join("goldens.json")).unwrap())
                .unwrap();
        let tensors = std::fs::read(dir.join("tensors.safetensors")).unwrap();
        Goldens { json, tensors }
    }

    /// An f32 tensor of the goldens, flat.
    fn f32s(&self, name: &str) -> Vec<f32> {
        let st = SafeTensors::deserialize(&self.tensors).unwrap();
        let view = st.tensor(name).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(view.dtype(), safetensors::Dtype::F32, "{name}");
        view.data()
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect()
    }

    fn has(&self, name: &str) -> bool {
        let st = SafeTensors::deserialize(&self.tensors).unwrap();
        st.names().contains(&name)
    }

    /// The preset's checkpoint, made again and checked against the file the goldens came from.
    fn model_dir(&self, preset: Qwen3Preset, tmp: &Path) -> PathBuf {
        let dir = tmp.join(preset.name());
        make_qwen3_test_model(&dir, preset, self.json["seed"].as_u64().unwrap()).unwrap();
        let bytes = std::fs::read(dir.join("model.safetensors")).unwrap();
        assert_eq!(
            format!("{:x}", Sha256::digest(&bytes)),
            self.json["checkpoint_sha256"]["model.safetensors"],
            "{}: not the checkpoint the goldens were made from",
            preset.name()
        );
        dir
    }
}

impl Goldens {
    /// The preset's model, with a KV slot for `sessions` at once, and its tokenizer.
    fn load_model(
        &self,
        preset: Qwen3Preset,
        tmp: &Path,
        sessions: usize,
    ) -> (Qwen3Tts<TchTensor>, Qwen2Tokenizer) {
        let dir = self.model_dir(preset, tmp);
        let options = TalkerOptions {
            max_sessions: sessions,
            max_positions: 128,
            quantize: None,
        };
        let model =
            Qwen3Tts::<TchTensor>::load(&dir, &tch::Device::Cpu, DType::F32, &options).unwrap();
        (model, Qwen2Tokenizer::from_folder(&dir).unwrap())
    }

    /// The x-vector of a Base preset's clip (the same in every case), as `model` computes it,
    /// checked against the goldens' own.
    fn x_vector(&self, model: &Qwen3Tts<TchTensor>) -> Option<Vec<f32>> {
        if self.json["tts_model_type"] != "base" {
            return None;
        }
        let computed = model.x_vector(&self.reference_audio()).unwrap().unwrap();
        let diff = max_abs_diff(&computed, &self.f32s("icl.x_vector"));
        eprintln!("x-vector max abs diff {diff:e}");
        assert!(diff <= X_VECTOR_TOLERANCE, "x-vector: {diff}");
        Some(computed)
    }

    /// The reference codes of a Base preset's clip, as the speech-tokenizer encoder in
    /// `dir` computes them, checked against every in-context case's own.
    fn reference_codes(&self, dir: &Path) -> Option<Vec<Vec<u32>>> {
        if self.json["tts_model_type"] != "base" {
            return None;
        }
        let encoder = SpeechEncoder::<TchTensor>::load(
            &dir.join("speech_tokenizer"),
            &tch::Device::Cpu,
            DType::F32,
        )
        .unwrap();
        let computed = encoder.encode(&self.reference_audio()).unwrap();
        let mut checked = 0;
        for case in self.json["cases"].as_array().unwrap() {
            if case["ref_codes"].is_null() {
                continue;
            }
            assert_eq!(
                computed,
                codes(&case["ref_codes"]),
                "{}: reference codes",
                case["name"]
            );
            checked += 1;
        }
        assert!(checked > 0, "no in-context case");
        eprintln!(
            "reference codes: {} frames equal the goldens' ({checked} cases)",
            computed.len()
        );
        Some(computed)
    }
}

fn ids(value: &Value) -> Option<Vec<u32>> {
    value
        .as_array()
        .map(|a| a.iter().map(|v| v.as_u64().unwrap() as u32).collect())
}

fn codes(value: &Value) -> Vec<Vec<u32>> {
    value
        .as_array()
        .unwrap()
        .iter()
        .map(|f| ids(f).unwrap())
        .collect()
}

fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len(), "lengths");
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

/// A golden `prefill_layout` entry as a position.
fn position(entry: &Value) -> Position {
    let codec = match &entry["codec"] {
        Value::Null => None,
        Value::Number(n) => Some(CodecInput::Id(n.as_u64().unwrap() as u32)),
        Value::String(s) if s == "x_vector" => Some(CodecInput::XVector),
        Value::Object(o) => Some(CodecInput::RefFrame(
            o["ref_frame"].as_u64().unwrap() as usize
        )),
        other => panic!("unknown codec entry {other}"),
    };
    Position {
        text: entry["text"].as_u64().unwrap() as u32,
        codec,
    }
}

/// The worst differences of one case, for the summary line.
#[derive(Default)]
struct Diffs {
    prefill: f32,
    trailing: f32,
    logits: f32,
    hidden: f32,
}

/// A golden case's prompt inputs, the wrapped texts checked against the official ids.
struct CaseInputs<'g> {
    case: &'g Value,
    text_ids: Vec<u32>,
    instruct_ids: Option<Vec<u32>>,
    cloned: Option<ClonedVoice>,
}

impl<'g> CaseInputs<'g> {
    /// `x_vector` and `ref_codes`: the Base goldens' one clip's x-vector and reference codes.
    fn new(
        case: &'g Value,
        tok: &Qwen2Tokenizer,
        x_vector: Option<&[f32]>,
        ref_codes: Option<&[Vec<u32>]>,
        what: &str,
    ) -> Self {
        let request = &case["request"];
        let text_ids = ids(&case["input_ids"]).unwrap();
        assert_eq!(
            tok.encode(&target_text(request["text"].as_str().unwrap())),
            text_ids,
            "{what}: text ids"
        );
        let instruct_ids = request["instruct"]
            .as_str()
            .map(|i| tok.encode(&instruct_text(i)));
        if let Some(official) = ids(&case["instruct_ids"]) {
            assert_eq!(
                instruct_ids.as_ref(),
                Some(&official),
                "{what}: instruct ids"
            );
        }
        let reference = ids(&case["ref_ids"]).map(|ref_ids| {
            assert_eq!(
                tok.encode(&reference_text(request["ref_text"].as_str().unwrap())),
                ref_ids,
                "{what}: reference ids"
            );
            Reference {
                text_ids: ref_ids,
                codes: ref_codes.expect("in-context cases are Base cases").to_vec(),
            }
        });
        let cloned = x_vector.map(|x| ClonedVoice {
            x_vector: x.to_vec(),
            reference,
        });
        CaseInputs {
            case,
            text_ids,
            instruct_ids,
            cloned,
        }
    }

    fn input(&self) -> PromptInput<'_> {
        let request = &self.case["request"];
        let voice = match self.case["api"].as_str().unwrap() {
            "generate_custom_voice" => Voice::Speaker(request["speaker"].as_str().unwrap()),
            "generate_voice_design" => Voice::Designed,
            _ => Voice::Cloned(self.cloned.as_ref().unwrap()),
        };
        let layout = match self.case["text_layout"].as_str().unwrap() {
            "streaming" => TextLayout::Streaming,
            _ => TextLayout::NonStreaming,
        };
        PromptInput {
            text_ids: &self.text_ids,
            // Given even where the model drops it (0.6B CustomVoice): the goldens have none.
            instruct_ids: self.instruct_ids.as_deref(),
            language: request["language"].as_str().unwrap(),
            voice,
            layout,
        }
    }
}

/// A case's settings: `generation_config.json`'s, greedy, or sampled on the recorded draws.
fn generation(
    model: &Qwen3Tts<TchTensor>,
    case: &Value,
    max_new_tokens: usize,
) -> (GenerationParams, Uniforms) {
    let mut params = GenerationParams::from_config(&model.generation);
    params.max_new_tokens = max_new_tokens;
    match case["uniforms"].as_array() {
        Some(u) => {
            assert!(!case["greedy"].as_bool().unwrap());
            let draws = u.iter().map(|v| v.as_f64().unwrap()).collect();
            (params, Uniforms::recorded(draws))
        }
        None => {
            assert!(
                case["greedy"].as_bool().unwrap(),
                "a sampled case without uniforms"
            );
            (params.greedy(), Uniforms::recorded(Vec::new()))
        }
    }
}

fn check_preset(preset: Qwen3Preset) {
    let _guard = tch::no_grad_guard();
    let name = preset.name();
    let goldens = Goldens::load(preset);
    let tmp = tempfile::tempdir().unwrap();
    let (model, tok) = goldens.load_model(preset, tmp.path(), 1);
    let max_new_tokens = goldens.json["max_new_tokens"].as_u64().unwrap() as usize;
    let x_vector = goldens.x_vector(&model);
    let ref_codes = goldens.reference_codes(&tmp.path().join(preset.name()));

    let cases = goldens.json["cases"].as_array().unwrap();
    assert!(!cases.is_empty());
    for case in cases {
        let case_name = case["name"].as_str().unwrap();
        let what = format!("{name} {case_name}");
        let inputs = CaseInputs::new(case, &tok, x_vector.as_deref(), ref_codes.as_deref(), &what);
        let input = inputs.input();

        // The prefill.
        let mut diffs = Diffs::default();
        let (prompt, x, trailing) = model.prefill(&input).unwrap();
        let want: Vec<Position> = case["prefill_layout"]
            .as_array()
            .unwrap()
            .iter()
            .map(position)
            .collect();
        assert_eq!(prompt.positions, want, "{what}: prefill layout");
        assert_eq!(
            Some(prompt.trailing.clone()),
            ids(&case["trailing_text_ids"]),
            "{what}: trailing text ids"
        );
        diffs.prefill = max_abs_diff(
            &x.to_vec_f32(),
            &goldens.f32s(&format!("{case_name}.prefill_embeds")),
        );
        diffs.trailing = max_abs_diff(
            &trailing.to_vec_f32(),
            &goldens.f32s(&format!("{case_name}.trailing_text")),
        );
        assert!(
            diffs.prefill <= EMBEDDING_TOLERANCE && diffs.trailing <= EMBEDDING_TOLERANCE,
            "{what}: prefill differs by {}, trailing text by {}",
            diffs.prefill,
            diffs.trailing
        );

        // Generation, step by step.
        let (params, uniforms) = generation(&model, case, max_new_tokens);
        let mut session = model.start(&input, params, uniforms).unwrap();
        let hidden = goldens.f32s(&format!("{case_name}.talker_hidden"));
        let width = hidden.len() / case["talker_steps"].as_u64().unwrap() as usize;
        let tops = case["talker_top"].as_array().unwrap();
        let mut step = 0;
        loop {
            let logits = session.last_logits();
            let top = &tops[step];
            let top_ids = ids(&top["ids"]).unwrap();
            for (k, (&id, value)) in top_ids
                .iter()
                .zip(top["values"].as_array().unwrap())
                .enumerate()
            {
                let diff = (logits[id as usize] - value.as_f64().unwrap() as f32).abs();
                diffs.logits = diffs.logits.max(diff);
                assert!(
                    diff <= TALKER_TOLERANCE,
                    "{what}: step {step}, top {k} (id {id}) differs by {diff}"
                );
            }
            let best = (0..logits.len())
                .max_by(|&a, &b| logits[a].total_cmp(&logits[b]).then(b.cmp(&a)))
                .unwrap() as u32;
            assert_eq!(best, top_ids[0], "{what}: step {step}: top logit");
            // The first case of a preset has every logit of the first step.
            let first = format!("{case_name}.talker_logits_first");
            if step == 0 && goldens.has(&first) {
                let d = max_abs_diff(logits, &goldens.f32s(&first));
                diffs.logits = diffs.logits.max(d);
                assert!(d <= TALKER_TOLERANCE, "{what}: first logits differ by {d}");
            }
            let d = max_abs_diff(
                &session.last_hidden(),
                &hidden[step * width..(step + 1) * width],
            );
            diffs.hidden = diffs.hidden.max(d);
            assert!(
                d <= TALKER_TOLERANCE,
                "{what}: step {step}: hidden state differs by {d}"
            );
            if session.next_frame().unwrap().is_none() {
                break;
            }
            step += 1;
            assert!(
                step < tops.len(),
                "{what}: more talker steps than the official code"
            );
        }

        assert_eq!(session.frames(), codes(&case["codes"]), "{what}: codes");
        assert_eq!(
            session.tokens().len(),
            case["talker_steps"].as_u64().unwrap() as usize,
            "{what}: talker steps"
        );
        assert_eq!(
            session.tokens().last().copied(),
            case["last_talker_token"].as_u64().map(|t| t as u32),
            "{what}: last talker token"
        );
        let stop = match case["stopped_by"].as_str().unwrap() {
            "eos" => StopReason::EndAudio,
            _ => StopReason::MaxFrames,
        };
        assert_eq!(session.stop(), Some(stop), "{what}: stop");
        assert_eq!(
            session.uniforms().recorded_left(),
            Some(0),
            "{what}: every recorded draw used, no more"
        );
        eprintln!(
            "{what}: {} frames ({stop:?}), max |diff| prefill {:.1e}, trailing {:.1e}, logits {:.1e}, hidden {:.1e}",
            session.frames().len(),
            diffs.prefill,
            diffs.trailing,
            diffs.logits,
            diffs.hidden
        );
    }
}

#[test]
fn tiny_base_matches_the_official_goldens() {
    check_preset(Qwen3Preset::TinyBase);
}

#[test]
fn tiny_base_1b7_matches_the_official_goldens() {
    check_preset(Qwen3Preset::TinyBase1b7);
}

#[test]
fn tiny_custom_voice_matches_the_official_goldens() {
    check_preset(Qwen3Preset::TinyCustomVoice);
}

#[test]
fn tiny_custom_voice_1b7_matches_the_official_goldens() {
    check_preset(Qwen3Preset::TinyCustomVoice1b7);
}

#[test]
fn tiny_voice_design_matches_the_official_goldens() {
    check_preset(Qwen3Preset::TinyVoiceDesign);
}

/// Every greedy case of a preset stepped together, one batch: each session's codes are its
/// goldens, sessions that stop early (EOS) leaving the others' unchanged.
fn check_batched(preset: Qwen3Preset) {
    let _guard = tch::no_grad_guard();
    let goldens = Goldens::load(preset);
    let tmp = tempfile::tempdir().unwrap();
    let greedy: Vec<&Value> = goldens.json["cases"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["greedy"].as_bool().unwrap())
        .collect();
    assert!(greedy.len() > 1);
    let (model, tok) = goldens.load_model(preset, tmp.path(), greedy.len());
    let max_new_tokens = goldens.json["max_new_tokens"].as_u64().unwrap() as usize;
    let x_vector = goldens.x_vector(&model);
    let ref_codes = goldens.reference_codes(&tmp.path().join(preset.name()));
    let inputs: Vec<CaseInputs<'_>> = greedy
        .iter()
        .map(|c| {
            CaseInputs::new(
                c,
                &tok,
                x_vector.as_deref(),
                ref_codes.as_deref(),
                "batched",
            )
        })
        .collect();
    let mut sessions: Vec<_> = inputs
        .iter()
        .map(|i| {
            let (params, uniforms) = generation(&model, i.case, max_new_tokens);
            model.start(&i.input(), params, uniforms).unwrap()
        })
        .collect();
    while sessions.iter().any(|s| s.stop().is_none()) {
        let mut batch: Vec<_> = sessions.iter_mut().collect();
        model.step(&mut batch).unwrap();
    }
    for (session, case) in sessions.iter().zip(&greedy) {
        let what = format!(
            "{} {} batched",
            preset.name(),
            case["name"].as_str().unwrap()
        );
        assert_eq!(session.frames(), codes(&case["codes"]), "{what}: codes");
        eprintln!(
            "{what}: {} frames ({:?})",
            session.frames().len(),
            session.stop()
        );
    }
}

#[test]
fn tiny_base_cases_batched_equal_the_official_goldens() {
    check_batched(Qwen3Preset::TinyBase);
}

#[test]
fn tiny_custom_voice_1b7_cases_batched_equal_the_official_goldens() {
    check_batched(Qwen3Preset::TinyCustomVoice1b7);
}

/// Max abs difference of the speaker encoder's log-mel (natural log, values about −12 to 2).
const SPEAKER_MEL_TOLERANCE: f32 = 1e-5;
/// Max abs difference of the x-vector computed from the clip.
const X_VECTOR_TOLERANCE: f32 = 1e-4;

impl Goldens {
    /// The Base goldens' reference clip, at the rate and scale goldens.json gives.
    fn reference_audio(&self) -> Vec<f32> {
        let spec = &self.json["reference_audio"];
        assert_eq!(spec["sample_rate"], SPEAKER_SAMPLE_RATE);
        assert_eq!(spec["scale"], "int16 / 32768");
        let st = SafeTensors::deserialize(&self.tensors).unwrap();
        let view = st.tensor(spec["tensor"].as_str().unwrap()).unwrap();
        assert_eq!(view.dtype(), safetensors::Dtype::I16);
        view.data()
            .chunks_exact(2)
            .map(|b| i16::from_le_bytes([b[0], b[1]]) as f32 / 32768.0)
            .collect()
    }
}

fn check_speaker_mel(preset: Qwen3Preset) {
    let goldens = Goldens::load(preset);
    let mel = SpeakerMelFrontEnd::new()
        .compute(&goldens.reference_audio())
        .unwrap();
    let expected = goldens.f32s("icl.speaker_mel");
    assert_eq!(mel.data.len(), expected.len(), "{}", preset.name());
    let diff = max_abs_diff(&mel.data, &expected);
    eprintln!("{}: speaker mel max abs diff {diff:e}", preset.name());
    assert!(diff <= SPEAKER_MEL_TOLERANCE, "{}: {diff}", preset.name());
}

#[test]
fn speaker_mel_matches_the_official_goldens() {
    check_speaker_mel(Qwen3Preset::TinyBase);
    check_speaker_mel(Qwen3Preset::TinyBase1b7);
}

/// Shares of a bf16 run's predictions equal to the official f32 codes.
#[derive(Default)]
struct Agreement {
    tokens: (usize, usize),
    codes: (usize, usize),
}

/// Teacher-forced agreement with the official f32 codes of every greedy case of `preset`: each
/// step reads the reference's frame, so one differing code does not compound (free-running,
/// bf16 and f32 part ways after a few frames, as for Voxtral). The talker's tokens and the 15
/// predicted codebooks of every frame, as shares, and every talker and predictor layer's
/// output on the way.
fn teacher_forced_agreement(
    preset: Qwen3Preset,
    dtype: DType,
    quantize: Option<QuantFormat>,
) -> (f64, f64, Vec<LayerOutput>) {
    let _guard = tch::no_grad_guard();
    let goldens = Goldens::load(preset);
    let tmp = tempfile::tempdir().unwrap();
    let dir = goldens.model_dir(preset, tmp.path());
    let options = TalkerOptions {
        max_sessions: 1,
        max_positions: 128,
        quantize,
    };
    let model = Qwen3Tts::<TchTensor>::load(&dir, &tch::Device::Cpu, dtype, &options).unwrap();
    let tok = Qwen2Tokenizer::from_folder(&dir).unwrap();
    // The official x-vector and reference codes: this measures the talker and predictor.
    let base = goldens.json["tts_model_type"] == "base";
    let x_vector = base.then(|| goldens.f32s("icl.x_vector"));
    let mut agreement = Agreement::default();
    let ((), layers) = layer_probe::recording(|| {
        for case in goldens.json["cases"].as_array().unwrap() {
            if !case["greedy"].as_bool().unwrap() {
                continue;
            }
            let ref_codes = (!case["ref_codes"].is_null()).then(|| codes(&case["ref_codes"]));
            let what = format!("{} {} {dtype}", preset.name(), case["name"]);
            let inputs =
                CaseInputs::new(case, &tok, x_vector.as_deref(), ref_codes.as_deref(), &what);
            let (params, uniforms) = generation(&model, case, 64);
            let mut session = model.start(&inputs.input(), params, uniforms).unwrap();
            for frame in codes(&case["codes"]) {
                let token = *session.tokens().last().unwrap();
                agreement.tokens.0 += usize::from(token == frame[0]);
                agreement.tokens.1 += 1;
                let predicted = model.step_teacher_forced(&mut session, &frame).unwrap();
                let same = predicted[1..]
                    .iter()
                    .zip(&frame[1..])
                    .filter(|(a, b)| a == b)
                    .count();
                agreement.codes.0 += same;
                agreement.codes.1 += frame.len() - 1;
            }
        }
    });
    assert!(agreement.tokens.1 >= 20, "too few frames to measure");
    let share = |(same, all): (usize, usize)| same as f64 / all.max(1) as f64;
    let (tokens, codes) = (share(agreement.tokens), share(agreement.codes));
    let weights = quantize.map_or(dtype.to_string(), |f| format!("{f} ({dtype} activations)"));
    eprintln!(
        "{}: {weights} teacher-forced against the official f32 codes: talker tokens {}/{} ({:.1}%), predicted codes {}/{} ({:.1}%)",
        preset.name(),
        agreement.tokens.0,
        agreement.tokens.1,
        100.0 * tokens,
        agreement.codes.0,
        agreement.codes.1,
        100.0 * codes
    );
    (tokens, codes, layers)
}

/// bf16 against the official f32 codes, teacher-forced, for the Base (x-vector and
/// in-context) and CustomVoice 1.7B presets.
#[test]
fn bf16_teacher_forced_agrees_with_the_official_codes() {
    for preset in [Qwen3Preset::TinyBase, Qwen3Preset::TinyCustomVoice1b7] {
        let (tokens, codes, _) = teacher_forced_agreement(preset, DType::BF16, None);
        assert!(tokens >= 0.9, "talker tokens agree {tokens}");
        assert!(codes >= 0.9, "predicted codes agree {codes}");
    }
}

/// The talker's and the code predictor's layers in q8 and q4 against the same official codes:
/// q8 keeps at least 95% of the talker tokens and of the predicted codes; q4 is pinned at what
/// it measured, with a margin; every layer's output stays within the pinned relative error of
/// the bf16 run's (docs/quantization.md has the figures).
#[test]
fn quantized_teacher_forced_stays_near_bf16() {
    let mut failures = Vec::new();
    for preset in [Qwen3Preset::TinyBase, Qwen3Preset::TinyCustomVoice1b7] {
        let (_, _, bf16_layers) = teacher_forced_agreement(preset, DType::BF16, None);
        for (format, min_tokens, min_codes, max_drift) in [
            (QuantFormat::Q8, 0.95, 0.95, 0.1),
            (QuantFormat::Q4, 0.85, 0.75, 0.5),
        ] {
            let (tokens, codes, layers) =
                teacher_forced_agreement(preset, DType::BF16, Some(format));
            let drift = crate::quantization::layer_drift(&bf16_layers, &layers);
            eprintln!(
                "{} {format} against bf16: layer outputs' relative error median {:.4}, max {:.4}",
                preset.name(),
                drift.median,
                drift.max
            );
            if tokens < min_tokens || codes < min_codes || drift.max > max_drift {
                failures.push(format!(
                    "{} {format}: talker tokens {tokens:.3}, predicted codes {codes:.3}, {drift:?}",
                    preset.name()
                ));
            }
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}
