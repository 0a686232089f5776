//! `voxtral-tts transcribe`: speech to text with a Voxtral Realtime folder, offline (the whole
//! file at once, greedy).

use super::synth::parse_dtype;
use crate::audio::input::{decode_to_rate, DecodeLimits};
use crate::device::{DeviceChoice, OnBackend};
use crate::models::voxtral_realtime::params::Config;
use crate::models::voxtral_realtime::transcriber::{Transcriber, Transcript};
use crate::models::{detect_family, Family};
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
    /// Voxtral Realtime model folder (params.json, consolidated.safetensors, tekken.json).
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
    match detect_family(&args.model)? {
        Family::VoxtralRealtime => {}
        Family::VoxtralTts | Family::Qwen3Tts | Family::Xtts => bail!(
            "{} is a text-to-speech model folder; transcribe needs a Voxtral Realtime one",
            args.model.display()
        ),
    }
    let config = Config::load(&args.model)?;
    let bytes =
        std::fs::read(&args.input).with_context(|| format!("reading {}", args.input.display()))?;
    let limits = DecodeLimits::new(MAX_INPUT_BYTES, MAX_INPUT_DURATION);
    let audio = decode_to_rate(&bytes, config.mel.sample_rate, &limits)
        .with_context(|| format!("decoding {}", args.input.display()))?;
    let job = Transcribe {
        dir: &args.model,
        audio: &audio.samples,
        positions: config.streaming.offline_positions(audio.samples.len()),
        dtype: args.dtype,
        quantize: args.quantize,
    };
    let transcript = args.device.run(0, job).map_err(anyhow::Error::msg)??;
    if let Some(path) = &args.dump_tokens {
        let json = serde_json::json!({ "tokens": transcript.tokens });
        std::fs::write(path, serde_json::to_string(&json)? + "\n")
            .with_context(|| format!("writing {}", path.display()))?;
    }
    println!("{}", transcript.text);
    Ok(())
}

/// Loading and transcription on the chosen backend, sized for this input.
struct Transcribe<'a> {
    dir: &'a Path,
    audio: &'a [f32],
    positions: usize,
    dtype: DType,
    quantize: Option<QuantFormat>,
}

impl OnBackend for Transcribe<'_> {
    type Output = Result<Transcript>;

    fn run<T: Tensor>(self, device: &T::Device) -> Result<Transcript> {
        let model = Transcriber::<T>::load_quantized(
            self.dir,
            device,
            self.dtype,
            self.positions,
            self.quantize,
        )?;
        Ok(model.transcribe(self.audio)?)
    }
}
