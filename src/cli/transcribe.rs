//! `voxtral-tts transcribe`: speech to text with a speech-to-text model folder, offline (the
//! whole file at once, greedy).

use crate::audio::input::{decode, DecodeLimits, DecodedAudio};
use crate::device::{parse_dtype, DeviceChoice, OnBackend};
use crate::engine::stt::{SpeechToText, TranscriberOptions, WithTranscriber};
use crate::engine::CudaGraphs;
use crate::models::registry::{self, load_stt, Task};
use crate::tensor::quantized::{parse_quantize, QuantFormat};
use crate::tensor::{DType, Tensor};
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Largest input file read.
const MAX_INPUT_BYTES: usize = 1 << 30;
/// Longest input transcribed: the decoder's KV cache and the rotary tables are sized for it.
const MAX_INPUT_DURATION: Duration = Duration::from_secs(3600);

#[derive(clap::Args)]
pub struct TranscribeArgs {
    /// Speech-to-text model folder (Voxtral Realtime: params.json, consolidated.safetensors,
    /// tekken.json).
    #[arg(long)]
    model: PathBuf,
    /// Audio file: WAV, MP3, FLAC, Ogg (Opus, Vorbis, FLAC) or WebM, at any sample rate.
    #[arg(long)]
    input: PathBuf,
    /// Also write {"tokens": [...]}, every token decoded, to this JSON file.
    #[arg(long)]
    dump_tokens: Option<PathBuf>,
    #[arg(long, value_parser = parse_dtype, default_value = "bf16")]
    dtype: DType,
    /// How the large linear weights are stored: none | q8 | q4 (`Option`
    /// spelled out: clap would make an `Option` flag optional instead of parsing `none`).
    #[arg(long, value_parser = parse_quantize, default_value = "none")]
    quantize: std::option::Option<QuantFormat>,
    /// auto | cpu | cuda | cuda:N | mlx.
    #[arg(long, default_value = "auto")]
    device: DeviceChoice,
}

/// Prints the text of `--input` on stdout.
pub fn run(args: TranscribeArgs) -> Result<()> {
    if registry::detect(&args.model)?.task != Task::Transcribe {
        bail!(
            "{} is a text-to-speech model folder; transcribe needs a speech-to-text one",
            args.model.display()
        );
    }
    let bytes =
        std::fs::read(&args.input).with_context(|| format!("reading {}", args.input.display()))?;
    let limits = DecodeLimits::new(MAX_INPUT_BYTES, MAX_INPUT_DURATION);
    let audio =
        decode(&bytes, &limits).with_context(|| format!("decoding {}", args.input.display()))?;
    let job = Transcribe {
        dir: &args.model,
        input: &args.input,
        audio,
        dtype: args.dtype,
        quantize: args.quantize,
    };
    let (tokens, text) = args.device.run(0, job).map_err(anyhow::Error::msg)??;
    if let Some(path) = &args.dump_tokens {
        let json = serde_json::json!({ "tokens": tokens });
        std::fs::write(path, serde_json::to_string(&json)? + "\n")
            .with_context(|| format!("writing {}", path.display()))?;
    }
    println!("{text}");
    Ok(())
}

/// Loading and transcription on the chosen backend, sized for this input.
struct Transcribe<'a> {
    dir: &'a Path,
    input: &'a Path,
    /// At the file's own rate: resampled to the model's once it is loaded.
    audio: DecodedAudio,
    dtype: DType,
    quantize: Option<QuantFormat>,
}

/// Room for the resampler's rounding when the model's rate is not the file's.
const RESAMPLING_ROOM_SECONDS: f64 = 1.0;

impl OnBackend for Transcribe<'_> {
    /// The tokens and their text.
    type Output = Result<(Vec<u32>, String)>;

    fn run<T: Tensor>(self, device: &T::Device) -> Self::Output {
        let options = TranscriberOptions {
            max_audio_seconds: self.audio.duration().as_secs_f64() + RESAMPLING_ROOM_SECONDS,
            quantize: self.quantize,
            cuda_graphs: CudaGraphs::Off,
        };
        let offline = Offline {
            input: self.input,
            audio: self.audio,
        };
        load_stt::<T, _>(self.dir, device, self.dtype, options, offline)?
    }
}

/// The whole file transcribed at once.
struct Offline<'a> {
    input: &'a Path,
    audio: DecodedAudio,
}

impl WithTranscriber for Offline<'_> {
    type Output = Result<(Vec<u32>, String)>;

    fn run<E: SpeechToText>(self, engine: E) -> Self::Output {
        let audio = self
            .audio
            .resampled(engine.card().sample_rate)
            .with_context(|| format!("decoding {}", self.input.display()))?;
        let tokens = engine.transcribe(&audio.samples)?;
        let text = engine.text(&tokens);
        Ok((tokens, text))
    }
}
