//! Random checkpoints in the published layouts, for the tests and benchmarks: behind the
//! cargo feature `testkit` (off by default), so that the server binary carries no generator.
//! `make-test-model` (src/bin/make-test-model.rs) writes them.
//!
//! Each family's writer lives next to its loader (`crate::models::<family>::testkit`) and is
//! listed in its registry spec ([`FamilyKit`]); here are the parts they share: values drawn
//! per tensor from a stream seeded by the run seed and the tensor's key (so a checkpoint is
//! deterministic per seed), safetensors written tensor by tensor, the cache under
//! `target/test-models/`, a small `tekken.json` ([`tekken`]), and heads whose stop token is
//! never picked ([`endless`]).

pub mod endless;
pub mod tekken;

use crate::models::registry;
use anyhow::{Context, Result};
use rand::{Rng, SeedableRng};
use serde_json::json;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

/// A family's random test checkpoints, as its registry spec lists them.
#[derive(Clone, Copy)]
pub struct FamilyKit {
    /// `make-test-model --preset NAME`.
    pub models: &'static [TestModel],
    /// The source files that decide what the writer writes (its own, and those of the loaders
    /// that define the keys it writes): their digest names the cache of what it wrote.
    pub sources: &'static [&'static str],
}

/// One `make-test-model` preset.
pub struct TestModel {
    pub name: &'static str,
    /// What it is (`make-test-model --help`).
    pub about: &'static str,
    /// Writes the folder to `out`, the same for the same seed.
    pub write: fn(out: &Path, seed: u64) -> Result<()>,
    /// The same folder at the published sizes (`--published-size`), for a preset shrunk
    /// from a published folder.
    pub published_size: Option<fn(out: &Path, seed: u64) -> Result<()>>,
}

/// Every family's presets, in the registry's order.
pub fn test_models() -> impl Iterator<Item = &'static TestModel> {
    registry::families()
        .iter()
        .flat_map(|family| family.testkit.models)
}

/// A progress bar for a large file: drawn when `shown`, in bytes.
pub fn progress_bar(shown: bool) -> indicatif::ProgressBar {
    let progress = indicatif::ProgressBar::new(0).with_style(
        indicatif::ProgressStyle::with_template("{msg} [{bar:40}] {bytes}/{total_bytes} ({eta})")
            .expect("valid template"),
    );
    if !shown {
        progress.set_draw_target(indicatif::ProgressDrawTarget::hidden());
    }
    progress
}

/// How a tensor's random values are drawn.
#[derive(Clone, Copy)]
pub enum Init {
    /// Uniform in `[-a, a]` with `a = sqrt(3 / fan_in)`: unit-variance outputs.
    Linear(usize),
    /// Uniform in `[center - spread, center + spread]`.
    Around(f32, f32),
    /// `Linear(fan_in)` times `gain`.
    Gain(usize, f32),
    /// `Linear(fan_in)` over rows of `cols` values, except row `row`, `gain` times wider: a
    /// head row whose logit must stand out now and then (an end token).
    LoudRow {
        fan_in: usize,
        cols: usize,
        row: usize,
        gain: f32,
    },
    /// Uniform around 0 over rows of `cols` values: `quiet` wide for the first `rows` rows,
    /// `loud` wide for the rest.
    QuietRows {
        rows: usize,
        cols: usize,
        quiet: f32,
        loud: f32,
    },
}

impl Init {
    /// Center and half-width of the value at flat index `index`.
    pub fn range(self, index: usize) -> (f32, f32) {
        let linear = |fan_in: usize| (3.0 / fan_in as f32).sqrt();
        match self {
            Init::Linear(fan_in) => (0.0, linear(fan_in)),
            Init::Around(center, spread) => (center, spread),
            Init::Gain(fan_in, gain) => (0.0, gain * linear(fan_in)),
            Init::LoudRow {
                fan_in,
                cols,
                row,
                gain,
            } => {
                let a = linear(fan_in);
                (0.0, if index / cols == row { gain * a } else { a })
            }
            Init::QuietRows {
                rows,
                cols,
                quiet,
                loud,
            } => (0.0, if index / cols < rows { quiet } else { loud }),
        }
    }
}

/// How a file stores its values.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Stored {
    Bf16,
    F32,
}

impl Stored {
    pub fn name(self) -> &'static str {
        match self {
            Stored::Bf16 => "BF16",
            Stored::F32 => "F32",
        }
    }

    pub fn size(self) -> usize {
        match self {
            Stored::Bf16 => 2,
            Stored::F32 => 4,
        }
    }
}

pub struct Spec {
    pub key: String,
    pub shape: Vec<usize>,
    pub init: Init,
}

impl Spec {
    /// A linear weight at `key`, `[out, in]`: unit-variance outputs.
    pub fn matrix((key, [out, input]): (String, [usize; 2])) -> Self {
        Spec {
            key,
            shape: vec![out, input],
            init: Init::Linear(input),
        }
    }

    /// A norm's weight `[n]`, around one.
    pub fn norm(key: String, n: usize) -> Self {
        Spec {
            key,
            shape: vec![n],
            init: NORM,
        }
    }
}

/// How a norm's weights are drawn.
pub const NORM: Init = Init::Around(1.0, 0.1);

fn fnv1a(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ b as u64).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The random stream of the tensor (or other value) `key`: a checkpoint's values do not
/// depend on the order its tensors are drawn in.
pub fn rng_for(seed: u64, key: &str) -> rand_chacha::ChaCha8Rng {
    rand_chacha::ChaCha8Rng::seed_from_u64(seed ^ fnv1a(key))
}

/// Streams `n` values drawn per `init` into `out`, stored as `stored`.
pub fn write_values(
    out: &mut impl Write,
    rng: &mut impl Rng,
    n: usize,
    init: Init,
    stored: Stored,
) -> std::io::Result<()> {
    let mut buf = Vec::with_capacity(1 << 17);
    let mut done = 0;
    while done < n {
        let chunk = (n - done).min(1 << 15);
        buf.clear();
        for index in done..done + chunk {
            let (center, spread) = init.range(index);
            let u: f32 = rng.random::<f32>() * 2.0 - 1.0;
            let value = center + spread * u;
            match stored {
                Stored::Bf16 => buf.extend_from_slice(&half::bf16::from_f32(value).to_le_bytes()),
                Stored::F32 => buf.extend_from_slice(&value.to_le_bytes()),
            }
        }
        out.write_all(&buf)?;
        done += chunk;
    }
    Ok(())
}

/// Writes a safetensors file tensor by tensor, without holding the data in memory.
pub fn write_safetensors(
    path: &Path,
    specs: &[Spec],
    seed: u64,
    stored: Stored,
    progress: &indicatif::ProgressBar,
) -> Result<()> {
    let mut header = serde_json::Map::new();
    header.insert("__metadata__".into(), json!({"format": "pt"}));
    let mut offset = 0usize;
    for s in specs {
        let bytes = s.shape.iter().product::<usize>() * stored.size();
        header.insert(
            s.key.clone(),
            json!({"dtype": stored.name(), "shape": s.shape, "data_offsets": [offset, offset + bytes]}),
        );
        offset += bytes;
    }
    let mut text = serde_json::to_string(&header)?;
    // The data section starts 8-byte aligned, as the reference writer does.
    while (8 + text.len()) % 8 != 0 {
        text.push(' ');
    }
    let file = File::create(path).with_context(|| format!("creating {}", path.display()))?;
    let mut out = BufWriter::with_capacity(1 << 20, file);
    out.write_all(&(text.len() as u64).to_le_bytes())?;
    out.write_all(text.as_bytes())?;
    progress.set_length(offset as u64);
    for s in specs {
        let n = s.shape.iter().product();
        write_values(&mut out, &mut rng_for(seed, &s.key), n, s.init, stored)?;
        progress.inc((n * stored.size()) as u64);
    }
    out.flush()?;
    Ok(())
}

/// The folder `target/test-models/<generator>/<name>-<seed>`, made by `make` unless it holds
/// `last_file` (the last file `make` writes). Made in a temporary folder and renamed into
/// place, so concurrent callers never see a partial one. `<generator>` is a digest of this
/// generator's source: a checkpoint made by an older generator is never reused, and the
/// folders of older generators are removed when a new one is first made.
pub fn cached_folder(
    name: &str,
    seed: u64,
    last_file: &str,
    make: impl Fn(&Path) -> Result<()>,
) -> Result<PathBuf> {
    let cache = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/test-models");
    let generator = generator_digest();
    let root = cache.join(&generator);
    if !root.exists() {
        remove_older_generations(&cache, &generator);
    }
    std::fs::create_dir_all(&root).with_context(|| format!("creating {}", root.display()))?;
    let dir = root.join(format!("{name}-{seed}"));
    if dir.join(last_file).exists() {
        return Ok(dir);
    }
    // Unique per caller: tests of one process make the same checkpoint from several threads.
    static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let tmp = root.join(format!(".{name}-{seed}.{}.{call}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    make(&tmp)?;
    match std::fs::rename(&tmp, &dir) {
        Ok(()) => Ok(dir),
        // Another process finished first: theirs is identical (deterministic per seed).
        Err(_) if dir.join(last_file).exists() => {
            let _ = std::fs::remove_dir_all(&tmp);
            Ok(dir)
        }
        Err(e) => Err(e).with_context(|| format!("moving {} into place", dir.display())),
    }
}

/// 16 hex digits of a hash of the generators' source files, this module's, the shared layers'
/// that define the keys inside a block, and every family's (`std`'s SipHash with fixed keys:
/// the same source gives the same digest in every build of one toolchain).
fn generator_digest() -> String {
    use std::hash::{DefaultHasher, Hash, Hasher};
    let mut hasher = DefaultHasher::new();
    [
        include_str!("mod.rs"),
        include_str!("endless.rs"),
        include_str!("tekken.rs"),
        include_str!("../nn/layers.rs"),
        include_str!("../nn/decoder.rs"),
    ]
    .hash(&mut hasher);
    for family in registry::families() {
        family.testkit.sources.hash(&mut hasher);
    }
    format!("{:016x}", hasher.finish())
}

/// Removes the cached checkpoints of other generator versions (folders named by a digest).
fn remove_older_generations(cache: &Path, current: &str) {
    let Ok(entries) = std::fs::read_dir(cache) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let name = name.to_string_lossy();
        let is_digest = name.len() == 16 && name.chars().all(|c| c.is_ascii_hexdigit());
        if is_digest && name != current {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}
