//! `voxtral-tts bench`: times a model folder with its family's bench
//! (`models::registry::Bench`).

use crate::bench::BenchArgs;
use crate::models::registry::{self, Bench};
use anyhow::Result;

pub fn run(args: BenchArgs) -> Result<()> {
    let family = registry::detect(&args.model)?;
    match family.bench {
        Bench::Own(bench) => bench(&args, &args.model),
        Bench::Engine {
            weight_bytes_per_frame,
        } => super::bench_engine::run(&args, &args.model, weight_bytes_per_frame),
    }
}
