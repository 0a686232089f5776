//! `voxtral-tts load`: drives a running server with N concurrent streaming clients and reports
//! aggregate frames/s, real-time factor and time to first audio, for each N in turn.

use anyhow::{bail, Context, Result};
use serde_json::json;
use std::io::Read;
use std::time::{Duration, Instant};

/// The PCM the model sends, as /v1/models describes it.
struct Pcm {
    sample_rate: f64,
    samples_per_frame: f64,
}

#[derive(clap::Args)]
pub struct LoadArgs {
    /// Base URL of the server.
    #[arg(long, default_value = "http://127.0.0.1:8000")]
    url: String,
    /// Concurrent clients, one run per value.
    #[arg(long, value_delimiter = ',', default_value = "1,4,8")]
    clients: Vec<usize>,
    /// Requests each client sends, one after another.
    #[arg(long, default_value_t = 2)]
    requests: usize,
    /// The model to request (an id or alias that /v1/models lists).
    #[arg(long, default_value = "tts-1")]
    model: String,
    /// Frames per request (80 ms each for Voxtral); the server stops there unless the model
    /// ends first.
    #[arg(long, default_value_t = 24)]
    max_frames: usize,
    #[arg(long, default_value = "alloy")]
    voice: String,
    #[arg(long, default_value = "The quick brown fox jumps over the lazy dog.")]
    input: String,
    /// Sent as `Authorization: Bearer` when the server has keys.
    #[arg(long, env = "VOXTRAL_API_KEY")]
    api_key: Option<String>,
    /// Print one JSON object per run instead of the table.
    #[arg(long)]
    json: bool,
}

/// One streamed request as the client saw it.
struct Sample {
    first_audio: Duration,
    total: Duration,
    frames: f64,
}

/// The figures of one run with `clients` concurrent clients.
#[derive(serde::Serialize)]
struct Report {
    clients: usize,
    requests: usize,
    failed: usize,
    frames: f64,
    wall_s: f64,
    frames_per_s: f64,
    /// Mean over requests of (request time / audio duration).
    real_time_factor: f64,
    ttfa_p50_ms: f64,
    ttfa_p95_ms: f64,
}

pub fn run(args: LoadArgs) -> Result<()> {
    if args.clients.contains(&0) || args.requests == 0 || args.max_frames == 0 {
        bail!("--clients, --requests and --max-frames must be at least 1");
    }
    let agent = ureq::AgentBuilder::new()
        .timeout(Duration::from_secs(3600))
        .build();
    let ready = agent.get(&format!("{}/ready", args.url)).call();
    if !matches!(&ready, Ok(r) if r.status() == 200) {
        bail!(
            "{} is not ready (GET /ready): start the server first",
            args.url
        );
    }
    let pcm = pcm_of(&agent, &args)?;
    // Warm-up: the first request pays one-time allocations.
    stream_one(&agent, &args, &pcm).context("warm-up request")?;
    if !args.json {
        println!(
            "{:>7} {:>8} {:>6} {:>7} {:>8} {:>9} {:>6} {:>10} {:>10}",
            "clients",
            "requests",
            "failed",
            "frames",
            "wall s",
            "frames/s",
            "RTF",
            "TTFA p50",
            "TTFA p95"
        );
    }
    for &clients in &args.clients {
        let report = run_clients(&agent, &args, &pcm, clients);
        if args.json {
            println!("{}", serde_json::to_string(&report)?);
        } else {
            println!(
                "{:>7} {:>8} {:>6} {:>7.0} {:>8.2} {:>9.2} {:>6.3} {:>8.0}ms {:>8.0}ms",
                report.clients,
                report.requests,
                report.failed,
                report.frames,
                report.wall_s,
                report.frames_per_s,
                report.real_time_factor,
                report.ttfa_p50_ms,
                report.ttfa_p95_ms
            );
        }
    }
    Ok(())
}

/// The rate and frame size of `args.model` (an alias entry names its model as `parent`).
fn pcm_of(agent: &ureq::Agent, args: &LoadArgs) -> Result<Pcm> {
    let mut request = agent.get(&format!("{}/v1/models", args.url));
    if let Some(key) = &args.api_key {
        request = request.set("Authorization", &format!("Bearer {key}"));
    }
    let list: serde_json::Value = request.call()?.into_json()?;
    let models = list["data"].as_array().context("/v1/models has no data")?;
    let find = |id: &str| models.iter().find(|m| m["id"] == id);
    let entry = find(&args.model)
        .with_context(|| format!("the server does not list the model {:?}", args.model))?;
    let model = match entry["parent"].as_str() {
        Some(parent) => find(parent).context("an alias without its model")?,
        None => entry,
    };
    let capabilities = &model["capabilities"];
    let number = |key: &str| {
        capabilities[key]
            .as_f64()
            .with_context(|| format!("/v1/models gives no capabilities.{key} for {}", model["id"]))
    };
    Ok(Pcm {
        sample_rate: number("sample_rate")?,
        samples_per_frame: number("samples_per_frame")?,
    })
}

fn run_clients(agent: &ureq::Agent, args: &LoadArgs, pcm: &Pcm, clients: usize) -> Report {
    let started = Instant::now();
    let results: Vec<Result<Sample>> = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..clients)
            .map(|_| {
                scope.spawn(|| {
                    (0..args.requests)
                        .map(|_| stream_one(agent, args, pcm))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        workers
            .into_iter()
            .flat_map(|w| w.join().expect("client thread"))
            .collect()
    });
    let wall = started.elapsed().as_secs_f64();
    let mut failed = 0;
    let mut samples = Vec::new();
    for result in results {
        match result {
            Ok(sample) => samples.push(sample),
            Err(e) => {
                failed += 1;
                eprintln!("request failed: {e:#}");
            }
        }
    }
    let frames: f64 = samples.iter().map(|s| s.frames).sum();
    let rtf = samples
        .iter()
        .map(|s| s.total.as_secs_f64() / (s.frames * pcm.samples_per_frame / pcm.sample_rate))
        .sum::<f64>()
        / samples.len().max(1) as f64;
    let mut ttfa: Vec<f64> = samples
        .iter()
        .map(|s| s.first_audio.as_secs_f64() * 1e3)
        .collect();
    ttfa.sort_by(f64::total_cmp);
    Report {
        clients,
        requests: clients * args.requests,
        failed,
        frames,
        wall_s: wall,
        frames_per_s: frames / wall,
        real_time_factor: rtf,
        ttfa_p50_ms: percentile(&ttfa, 0.50),
        ttfa_p95_ms: percentile(&ttfa, 0.95),
    }
}

/// Nearest-rank percentile of sorted values (NaN when there are none).
fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = (p * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// One streamed PCM request: time to the first audio bytes, time to the last, frames.
fn stream_one(agent: &ureq::Agent, args: &LoadArgs, pcm: &Pcm) -> Result<Sample> {
    let body = json!({
        "model": args.model, "input": args.input, "voice": args.voice,
        "response_format": "pcm", "stream_format": "audio", "max_frames": args.max_frames,
    });
    let mut request = agent
        .post(&format!("{}/v1/audio/speech", args.url))
        .set("Content-Type", "application/json");
    if let Some(key) = &args.api_key {
        request = request.set("Authorization", &format!("Bearer {key}"));
    }
    let started = Instant::now();
    let response = match request.send_string(&body.to_string()) {
        Ok(r) => r,
        Err(ureq::Error::Status(status, r)) => {
            bail!("HTTP {status}: {}", r.into_string().unwrap_or_default())
        }
        Err(e) => return Err(e.into()),
    };
    let mut reader = response.into_reader();
    let mut buffer = vec![0u8; 64 * 1024];
    let mut first_audio = None;
    let mut bytes = 0usize;
    loop {
        let n = reader.read(&mut buffer).context("reading the stream")?;
        if n == 0 {
            break;
        }
        first_audio.get_or_insert_with(|| started.elapsed());
        bytes += n;
    }
    let first_audio = first_audio.context("the stream carried no audio")?;
    Ok(Sample {
        first_audio,
        total: started.elapsed(),
        frames: bytes as f64 / 2.0 / pcm.samples_per_frame,
    })
}

#[cfg(test)]
mod tests {
    use super::percentile;

    #[test]
    fn nearest_rank_percentiles() {
        let v: Vec<f64> = (1..=20).map(f64::from).collect();
        assert_eq!(percentile(&v, 0.5), 10.0);
        assert_eq!(percentile(&v, 0.95), 19.0);
        assert_eq!(percentile(&[7.0], 0.95), 7.0);
        assert!(percentile(&[], 0.5).is_nan());
    }
}
