//! `make-test-model`: writes a random checkpoint in a family's published layout, for the
//! tests and benchmarks (built with the feature `testkit`). The presets are the families'
//! (`voxtral_tts::testkit::test_models`).

use clap::builder::{PossibleValue, PossibleValuesParser};
use clap::Parser;
use std::path::PathBuf;
use std::process::ExitCode;
use voxtral_tts::testkit::{test_models, TestModel};

#[derive(Parser)]
#[command(
    name = "make-test-model",
    version,
    about = "Write a random checkpoint in a family's published layout (for tests and benchmarks)"
)]
struct Args {
    #[arg(long)]
    out: PathBuf,
    #[arg(long, value_parser = presets())]
    preset: String,
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Presets shrunk from a published folder: keep its sizes instead (benchmarks; 1.8 to
    /// 3.9 GB for Qwen3-TTS, 8.9 GB for stt-tiny).
    #[arg(long)]
    published_size: bool,
}

fn presets() -> PossibleValuesParser {
    PossibleValuesParser::new(test_models().map(|m| PossibleValue::new(m.name).help(m.about)))
}

fn run(args: Args) -> anyhow::Result<()> {
    let model: &TestModel = test_models()
        .find(|m| m.name == args.preset)
        .expect("clap accepts only the presets' names");
    let write = match (args.published_size, model.published_size) {
        (false, _) => model.write,
        (true, Some(published)) => published,
        (true, None) => {
            let shrunk: Vec<&str> = test_models()
                .filter(|m| m.published_size.is_some())
                .map(|m| m.name)
                .collect();
            anyhow::bail!(
                "--published-size is for the presets shrunk from a published folder ({}); {} is not one",
                shrunk.join(", "),
                model.name
            );
        }
    };
    write(&args.out, args.seed)
}

fn main() -> ExitCode {
    match run(Args::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
