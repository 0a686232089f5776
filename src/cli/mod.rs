//! The `voxtral-tts` command line.

mod bench;
mod bench_engine;
mod convert;
mod download;
mod load;
mod quantize;
mod serve;
mod synth;
mod transcribe;

use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "voxtral-tts",
    version,
    about = "OpenAI-compatible speech server: text to speech and speech to text"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the OpenAI-compatible speech server (POST /v1/audio/speech).
    Serve(serve::ServeArgs),
    /// Synthesize speech to a WAV file (16-bit PCM, mono, 24 kHz).
    Synth(synth::SynthArgs),
    /// Transcribe an audio file with a speech-to-text model folder (prints the text).
    Transcribe(transcribe::TranscribeArgs),
    /// List the preset voices of a model folder.
    Voices {
        /// Model folder (params.json, consolidated.safetensors, tekken.json, voice_embedding/).
        #[arg(long)]
        model: PathBuf,
    },
    /// Time the engine per frame (for Voxtral TTS: backbone, flow head, codec) and per
    /// batched step; on a speech-to-text folder, offline transcription and live steps.
    Bench(crate::bench::BenchArgs),
    /// Drive a running server with N concurrent streaming clients: frames/s, real-time
    /// factor, time to first audio.
    Load(load::LoadArgs),
    /// Download the published model folder from the Hugging Face Hub (needs internet).
    Download(download::DownloadArgs),
    /// Write an XTTS-v2 folder's pickles (model.pth, speakers_xtts.pth) as safetensors, read
    /// without executing them, so the folder serves without pickles.
    Convert(convert::ConvertArgs),
    /// Write a model folder with its large linear weights in 8 or 4 bits (q8, q4), read in
    /// place by the server.
    Quantize(quantize::QuantizeArgs),
}

pub fn main() -> ExitCode {
    let cli = Cli::parse();
    // The server sets up its own logs (format and level from its settings).
    if !matches!(cli.command, Command::Serve(_)) {
        tracing_subscriber::fmt()
            .with_env_filter(
                tracing_subscriber::EnvFilter::try_from_default_env()
                    .unwrap_or_else(|_| "warn".into()),
            )
            .with_writer(std::io::stderr)
            .init();
    }
    let result = match cli.command {
        Command::Serve(args) => serve::run(args),
        Command::Synth(args) => synth::run(args),
        Command::Transcribe(args) => transcribe::run(args),
        Command::Voices { model } => synth::list_voices(&model),
        Command::Bench(args) => bench::run(args),
        Command::Load(args) => load::run(args),
        Command::Download(args) => download::run(args),
        Command::Convert(args) => convert::run(args),
        Command::Quantize(args) => quantize::run(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
