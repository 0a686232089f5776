//! `voxtral-tts serve`: the OpenAI-compatible speech server.

use crate::config::{FlagOverrides, LogFormat, ServerConfig};
use anyhow::{Context, Result};
use std::io::IsTerminal;
use std::path::PathBuf;

#[derive(clap::Args)]
pub struct ServeArgs {
    /// Model folder (Voxtral TTS: params.json, consolidated.safetensors, tekken.json,
    /// voice_embedding/). Repeat it to serve several models, each on its own worker.
    #[arg(long)]
    model: Vec<PathBuf>,
    /// Address to listen on [default: 127.0.0.1].
    #[arg(long)]
    host: Option<String>,
    /// Port to listen on; 0 picks a free one (the log says which) [default: 8000].
    #[arg(long)]
    port: Option<u16>,
    /// Settings file (TOML, keys as in config/default.toml). VOXTRAL_<KEY> environment
    /// variables override it, and flags override both.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Weight format of every model: none | q8 | q4 (the `quantize` setting).
    #[arg(long)]
    quantize: Option<String>,
}

pub fn run(args: ServeArgs) -> Result<()> {
    let flags = FlagOverrides {
        model: args.model,
        host: args.host,
        port: args.port,
        quantize: args.quantize,
    };
    let config = ServerConfig::load(args.config.as_deref(), &flags)?;
    init_logging(config.log_format);
    tracing::info!(?config, "starting");
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?
        .block_on(crate::server::serve(config))
}

fn init_logging(format: LogFormat) {
    let filter =
        tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into());
    let logs = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => logs.with_ansi(std::io::stderr().is_terminal()).init(),
        LogFormat::Json => logs.json().init(),
    }
}
