//! `voxtral-tts synth` and `voxtral-tts voices`.

use crate::audio::input::{decode_to_rate, DecodeLimits};
use crate::audio::{encode_audio, AudioFormat};
use crate::device::{parse_dtype, DeviceChoice};
use crate::engine::{
    prepare_speech, Conditioning, CudaGraphs, CustomVoice, EngineOptions, Sampling, SpeechInput,
};
use crate::scheduler::voice_encoding::{
    start_voice_encoding, VoiceEncoderState, VoiceEncodingJob, VoiceEncodingSettings,
};
use crate::scheduler::{
    start_worker, EngineState, JobEvent, JobOptions, JobQueue, JobSummary, LoadedModel,
    StreamSettings, WorkerSettings,
};
use crate::server::voice_catalog;
use crate::tensor::quantized::{parse_quantize, QuantFormat};
use crate::tensor::DType;
use crate::text::DEFAULT_SEGMENT_CHARS;
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;
use tokio::sync::mpsc::UnboundedReceiver;
use tokio::sync::oneshot;

/// Limits of a `--reference-audio` file: those of the server's defaults would do, but a
/// local file may be longer; cloning reads at most 30 s of it anyway.
const MAX_REFERENCE_BYTES: usize = 200 << 20;
const MAX_REFERENCE_DURATION: Duration = Duration::from_secs(600);

#[derive(clap::Args)]
pub struct SynthArgs {
    /// Model folder of any speaking family (Voxtral TTS, Qwen3-TTS, XTTS-v2).
    #[arg(long)]
    model: PathBuf,
    /// Preset voice name or OpenAI voice name (see `voxtral-tts voices`); any name for a
    /// voice-design model.
    #[arg(long, required_unless_present = "reference_audio")]
    voice: Option<String>,
    /// Clone the voice of these clips instead (a cloning model: Qwen3-TTS Base takes one,
    /// XTTS-v2 averages several); any format the server accepts. Repeat for several clips.
    #[arg(long, conflicts_with = "voice")]
    reference_audio: Vec<PathBuf>,
    /// The reference clip's transcript, for in-context cloning (Qwen3-TTS Base).
    #[arg(long, requires = "reference_audio")]
    reference_text: Option<String>,
    #[arg(long)]
    text: String,
    /// Output WAV file.
    #[arg(long)]
    output: PathBuf,
    /// Most frames (80 ms each) per segment; the model's limit when absent.
    #[arg(long)]
    max_frames: Option<usize>,
    /// Sampling seed; a random one (printed) when absent.
    #[arg(long)]
    seed: Option<u64>,
    /// Scale of the flow head's starting noise (Voxtral); 0 gives deterministic output.
    #[arg(long, default_value_t = 1.0)]
    noise_scale: f32,
    /// Sampling temperature of token-sampling models (Qwen3-TTS); 0 decodes greedily.
    /// The model's own when absent.
    #[arg(long)]
    temperature: Option<f32>,
    /// Language to speak (a code such as `en`, or the model's name for it); the model
    /// tells from the text when absent (Qwen3-TTS).
    #[arg(long)]
    language: Option<String>,
    /// Style instructions, or the voice's description for a voice-design model (Qwen3-TTS).
    #[arg(long)]
    instructions: Option<String>,
    #[arg(long, value_parser = parse_dtype, default_value = "bf16")]
    dtype: DType,
    /// How the large linear weights are stored: none | q8 | q4 (`Option`
    /// spelled out: clap would make an `Option` flag optional instead of parsing `none`).
    #[arg(long, value_parser = parse_quantize, default_value = "none")]
    quantize: std::option::Option<QuantFormat>,
    /// auto | cpu | cuda | cuda:N | mlx (auto prefers CUDA; MLX on Apple Silicon builds with
    /// the `mlx` feature).
    #[arg(long, default_value = "auto")]
    device: DeviceChoice,
    /// auto | off: run the decode step as captured CUDA graphs where the model and device
    /// allow (docs/configuration.md, `cuda_graphs`).
    #[arg(long, default_value = "off")]
    cuda_graphs: CudaGraphs,
    /// Speak the text as given: no markup stripping, URL or line-break handling (the server's
    /// `normalize: false`).
    #[arg(long)]
    no_normalize: bool,
    /// Longest segment (characters) synthesized as one generation; longer text is split at
    /// sentence boundaries and the segments crossfaded, as the server does.
    #[arg(long, default_value_t = DEFAULT_SEGMENT_CHARS)]
    segment_chars: usize,
    /// Also write {"prompt_ids": [...], "codes": [[...], ...]} (of the first segment) and
    /// {"segments": [{"text", "prompt_ids", "codes"}, ...]} to this JSON file.
    #[arg(long)]
    dump_codes: Option<PathBuf>,
}

/// The model of `dir` on its own inference worker (the server's), once loaded.
fn start(
    dir: &Path,
    device: DeviceChoice,
    dtype: DType,
    quantize: Option<QuantFormat>,
    cuda_graphs: CudaGraphs,
) -> Result<(JobQueue, Arc<LoadedModel>, JoinHandle<()>)> {
    let settings = WorkerSettings {
        model_id: "synth".into(),
        model_dir: dir.to_path_buf(),
        device,
        dtype,
        threads: 0,
        #[cfg(debug_assertions)]
        panic_on_input: None,
        streaming: StreamSettings::default(),
        engine: EngineOptions {
            quantize,
            cuda_graphs,
            ..EngineOptions::default()
        },
    };
    let (queue, mut state, worker) = start_worker(settings, 1)?;
    let loaded = state.wait_for(|s| !matches!(s, EngineState::Loading));
    let ready = runtime()?.block_on(loaded)?.clone();
    match ready {
        EngineState::Ready(model) => Ok((queue, model, worker)),
        EngineState::Failed(message) => bail!("{message}"),
        EngineState::Loading => unreachable!("waited for the end of loading"),
    }
}

fn runtime() -> Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_current_thread().build()?)
}

/// Synthesizes as the server does: the same text preparation (normalization, segments), the
/// same worker, the same crossfades, so the same request gives the same audio.
pub fn run(args: SynthArgs) -> Result<()> {
    let (queue, model, worker) = start(
        &args.model,
        args.device,
        args.dtype,
        args.quantize,
        args.cuda_graphs,
    )?;
    let card = &model.card;
    let custom_voice = match args.voice {
        Some(_) => None,
        None => Some(Arc::new(clone_voice(&args)?)),
    };
    let voice = match (&args.voice, &custom_voice) {
        (_, Some(custom)) => custom.id.clone(),
        (Some(voice), None) if card.voice_design => voice.clone(),
        (Some(voice), None) => match voice_catalog::resolve(voice, card) {
            Some(preset) => preset.to_string(),
            None => bail!("{}", voice_catalog::unknown_voice_message(voice, card)),
        },
        (None, None) => unreachable!("clap requires --voice or --reference-audio"),
    };
    if let Some(t) = args.temperature.filter(|t| !(0.0..=2.0).contains(t)) {
        bail!("--temperature must be between 0 and 2; got {t}");
    }
    let seed = args.seed.unwrap_or_else(rand::random);
    let input = SpeechInput {
        text: args.text,
        voice,
        conditioning: Conditioning {
            language: args.language,
            instructions: args.instructions,
            custom_voice,
        },
        max_frames: args.max_frames.unwrap_or(card.max_frames),
        sampling: Sampling {
            seed,
            noise_scale: args.noise_scale,
            temperature: args.temperature,
        },
        normalize: !args.no_normalize,
        segment_chars: args.segment_chars,
    };
    let prepared = prepare_speech(&*model.preparer, model.card.max_frames, input)?;
    if args.seed.is_none() {
        eprintln!("seed: {seed}");
    }
    let options = JobOptions {
        stream: false,
        progress: true,
        keep_codes: args.dump_codes.is_some(),
    };
    let events = queue.submit(prepared, options)?;
    let (pcm, summary) = collect(events)?;
    drop(queue);
    let _ = worker.join();
    let wav = encode_audio(AudioFormat::Wav, &pcm, model.card.sample_rate)?;
    write_atomically(&args.output, &wav)?;
    if let Some(path) = &args.dump_codes {
        let first = &summary.codes[0];
        let json = serde_json::json!({
            "prompt_ids": first.prompt_ids,
            "codes": first.codes,
            "segments": summary.codes,
        });
        write_atomically(path, serde_json::to_string(&json)?.as_bytes())?;
    }
    eprintln!(
        "{} frames ({:.2} s of audio, stopped by {:?}) -> {}",
        summary.frames,
        pcm.len() as f64 / f64::from(model.card.sample_rate),
        summary.stop,
        args.output.display()
    );
    Ok(())
}

/// The voice of `--reference-audio`, computed by the model's voice encoder on its own
/// thread, as `POST /v1/audio/voices` computes it (not stored).
fn clone_voice(args: &SynthArgs) -> Result<CustomVoice> {
    let (queue, mut state, thread) = start_voice_encoding(VoiceEncodingSettings {
        model_id: "synth".into(),
        model_dir: args.model.clone(),
        device: args.device,
        dtype: args.dtype,
        threads: 0,
    })?;
    let rt = runtime()?;
    let ready = rt
        .block_on(state.wait_for(|s| !matches!(s, VoiceEncoderState::Loading)))?
        .clone();
    let sample_rate = match ready {
        VoiceEncoderState::Ready { sample_rate } => sample_rate,
        VoiceEncoderState::NotCloning => {
            bail!("{} cannot clone voices", args.model.display())
        }
        VoiceEncoderState::Failed(message) => bail!("loading the voice encoder: {message}"),
        VoiceEncoderState::Loading => unreachable!("waited for the end of loading"),
    };
    let limits = DecodeLimits::new(MAX_REFERENCE_BYTES, MAX_REFERENCE_DURATION);
    let clips = args
        .reference_audio
        .iter()
        .map(|path| {
            let bytes =
                std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
            let audio = decode_to_rate(&bytes, sample_rate, &limits)
                .with_context(|| format!("decoding {}", path.display()))?;
            Ok(audio.samples)
        })
        .collect::<Result<Vec<_>>>()?;
    let (reply, done) = oneshot::channel();
    queue
        .try_submit(VoiceEncodingJob {
            clips,
            transcript: args.reference_text.clone(),
            reply,
        })
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let tensors = rt
        .block_on(done)
        .context("the voice encoder stopped")?
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    drop(queue);
    let _ = thread.join();
    Ok(CustomVoice {
        id: "reference".into(),
        transcript: args.reference_text.clone(),
        tensors,
    })
}

/// The job's audio and summary, with a progress bar of frames generated.
fn collect(mut events: UnboundedReceiver<JobEvent>) -> Result<(Vec<f32>, JobSummary)> {
    let bar = indicatif::ProgressBar::new_spinner().with_style(
        indicatif::ProgressStyle::with_template(
            "{spinner} frames {pos} [{elapsed_precise}] {per_sec}",
        )
        .expect("valid template"),
    );
    let mut pcm = Vec::new();
    let result = loop {
        match events.blocking_recv() {
            Some(JobEvent::Started { .. }) => {}
            Some(JobEvent::Progress { frames }) => bar.set_position(frames as u64),
            Some(JobEvent::Audio(chunk)) => pcm.extend(chunk),
            Some(JobEvent::Done(summary)) => break Ok((pcm, summary)),
            Some(JobEvent::Failed(e)) => break Err(anyhow::Error::from(e)),
            None => break Err(anyhow::anyhow!("the inference worker stopped")),
        }
    };
    bar.finish_and_clear();
    result
}

pub fn list_voices(dir: &Path) -> Result<()> {
    let (_queue, model, _worker) =
        start(dir, DeviceChoice::Cpu, DType::BF16, None, CudaGraphs::Off)?;
    for v in &model.card.voices {
        println!("{}", v.name);
    }
    Ok(())
}

/// Writes via a temporary file and a rename, so a failed run never leaves a partial file.
fn write_atomically(path: &Path, bytes: &[u8]) -> Result<()> {
    let tmp = path.with_extension("partial");
    std::fs::write(&tmp, bytes).with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("writing {}", path.display()))
}
