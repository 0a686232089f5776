//! A model folder with its large linear weights stored quantized (`voxtral-tts quantize`):
//! the same folder, but each weight that the family's loaders quantize is stored as its
//! blocks (`U8 [out, k / 32, block]`, `tensor::quantized`), so that a server reads them in
//! place from the memory map with no work at start. Which weights: the ones the loaders
//! quantize when the model is loaded with `quantize` set (recorded by
//! `nn::quantized_keys`), so a stored folder and one quantized at load hold the same bytes.

use super::registry::{self, Task};
use crate::engine::stt::{SpeechToText, TranscriberOptions, WithTranscriber};
use crate::engine::{CudaGraphs, EngineOptions, TextToSpeech, WithEngine};
use crate::nn::checkpoint::raw_to_f32;
use crate::nn::quantized_keys::{self, Quantized};
use crate::nn::safetensors_writer::{write_safetensors, TensorSpec};
use crate::tensor::quantized::{quantize, QuantFormat, GROUP};
use crate::tensor::tch_backend::TchTensor;
use crate::tensor::{DType, RawTensor, Tensor};
use anyhow::{bail, ensure, Context, Result};
use safetensors::{Dtype, SafeTensors};
use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};

/// The header metadata keys a quantized file carries, beside the source's own.
pub const FORMAT_KEY: &str = "voxtral_tts.quantization";
pub const GROUP_KEY: &str = "voxtral_tts.quantization_group";

/// What [`quantize_folder`] wrote.
pub struct QuantizedFolder {
    pub weights: usize,
    /// Of these, the ones stored in `q8` in a `q4` folder (output heads: 8 bits at most).
    pub heads_in_q8: usize,
    pub bytes_before: u64,
    pub bytes_after: u64,
    pub files: Vec<PathBuf>,
}

/// Writes `model` to `out` with its large linear weights in `format`; every other file is
/// copied. `progress` counts the bytes of each safetensors file written.
pub fn quantize_folder(
    model: &Path,
    out: &Path,
    format: QuantFormat,
    progress: &indicatif::ProgressBar,
) -> Result<QuantizedFolder> {
    ensure!(
        model.canonicalize()? != out.canonicalize().unwrap_or_else(|_| out.to_path_buf()),
        "--out must be another folder than --model"
    );
    progress.set_message("finding the weights to quantize");
    let weights = weights_to_quantize(model, format)?;
    ensure!(
        !weights.is_empty(),
        "{}: no weight of this model is quantized (already quantized, or a family without large linear weights)",
        model.display()
    );
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let by_key: HashMap<&str, &Quantized> = weights.iter().map(|w| (w.key.as_str(), w)).collect();
    let mut written = QuantizedFolder {
        weights: weights.len(),
        heads_in_q8: weights.iter().filter(|w| w.format != format).count(),
        bytes_before: 0,
        bytes_after: 0,
        files: Vec::new(),
    };
    let mut done: HashSet<&str> = HashSet::new();
    for entry in walk(model)? {
        let relative = entry.strip_prefix(model).expect("under the model folder");
        let target = out.join(relative);
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent)?;
        }
        let is_safetensors = entry.extension().is_some_and(|e| e == "safetensors");
        if !is_safetensors || !holds_any(&entry, &by_key)? {
            std::fs::copy(&entry, &target)
                .with_context(|| format!("copying {}", entry.display()))?;
            continue;
        }
        let before = std::fs::metadata(&entry)?.len();
        let keys = rewrite(&entry, &target, &by_key, format, progress)?;
        done.extend(keys);
        written.bytes_before += before;
        written.bytes_after += std::fs::metadata(&target)?.len();
        written.files.push(target);
    }
    if let Some(missing) = weights.iter().find(|w| !done.contains(w.key.as_str())) {
        bail!(
            "{}: no safetensors file holds {}",
            model.display(),
            missing.key
        );
    }
    Ok(written)
}

/// Whether the safetensors file `path` holds any of `keys`.
fn holds_any(path: &Path, keys: &HashMap<&str, &Quantized>) -> Result<bool> {
    let file = std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    // SAFETY: mapped read-only; the source folder must not change while it is quantized.
    let map = unsafe { memmap2::Mmap::map(&file) }?;
    let (_, header) = SafeTensors::read_metadata(&map)
        .with_context(|| format!("{}: not a safetensors file", path.display()))?;
    Ok(header
        .tensors()
        .keys()
        .any(|k| keys.contains_key(k.as_str())))
}

/// The format a folder written by [`quantize_folder`] stores its weights in (from its
/// safetensors headers), `None` for any other folder.
pub fn stored_format(dir: &Path) -> Option<QuantFormat> {
    walk(dir)
        .ok()?
        .into_iter()
        .filter(|p| p.extension().is_some_and(|e| e == "safetensors"))
        .find_map(|path| {
            let file = std::fs::File::open(path).ok()?;
            // SAFETY: mapped read-only for the header's length of time.
            let map = unsafe { memmap2::Mmap::map(&file) }.ok()?;
            let (_, header) = SafeTensors::read_metadata(&map).ok()?;
            header.metadata().as_ref()?.get(FORMAT_KEY)?.parse().ok()
        })
}

/// How a model's large linear weights are multiplied on `T`'s `device`: `q8` or `q4` where
/// this backend multiplies them quantized (a stored folder's format first, else `quantize`),
/// the compute dtype elsewhere.
pub fn weight_format<T: Tensor>(
    dir: &Path,
    device: &T::Device,
    dtype: DType,
    quantize: Option<QuantFormat>,
) -> String {
    match stored_format(dir).or(quantize) {
        Some(format) if T::multiplies_quantized(device, format) => format.name().to_string(),
        _ => dtype.to_string(),
    }
}

/// Every file under `dir` (folders walked), in a stable order.
fn walk(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut files = Vec::new();
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .with_context(|| format!("reading {}", dir.display()))?
        .collect::<Result<_, _>>()?;
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let path = entry.path();
        if entry.file_type()?.is_dir() {
            files.extend(walk(&path)?);
        } else {
            files.push(path);
        }
    }
    Ok(files)
}

/// Loads the model once on the CPU with its weights quantized, and returns the weights its
/// loaders quantized.
fn weights_to_quantize(model: &Path, format: QuantFormat) -> Result<Vec<Quantized>> {
    struct Drop;
    impl WithEngine for Drop {
        type Output = ();
        fn run<E: TextToSpeech>(self, _engine: E) {}
    }
    impl WithTranscriber for Drop {
        type Output = ();
        fn run<E: SpeechToText>(self, _engine: E) {}
    }
    let device = tch::Device::Cpu;
    let (loaded, weights) = quantized_keys::recording(|| match registry::detect(model)?.task {
        Task::Transcribe => {
            let options = TranscriberOptions {
                max_audio_seconds: 1.0,
                quantize: Some(format),
                cuda_graphs: CudaGraphs::Off,
            };
            registry::load_stt::<TchTensor, _>(model, &device, DType::BF16, options, Drop)
        }
        Task::Speak => {
            let options = EngineOptions {
                max_sessions: 1,
                // One session of any family at its published size: XTTS-v2's whole sequence
                // takes 122 MiB, and the others shorten their cache to fit.
                kv_cache_bytes: 256 << 20,
                quantize: Some(format),
                ..EngineOptions::default()
            };
            registry::load_tts::<TchTensor, _>(model, &device, DType::BF16, options, Drop)
        }
    });
    loaded.with_context(|| format!("loading {}", model.display()))?;
    Ok(weights)
}

/// Writes `source` to `target` with the tensors of `quantized` as their blocks; returns the
/// keys it quantized.
fn rewrite<'a>(
    source: &Path,
    target: &Path,
    quantized: &HashMap<&'a str, &Quantized>,
    format: QuantFormat,
    progress: &indicatif::ProgressBar,
) -> Result<Vec<&'a str>> {
    let file =
        std::fs::File::open(source).with_context(|| format!("opening {}", source.display()))?;
    // SAFETY: mapped read-only; the source folder must not change while it is quantized.
    let map = unsafe { memmap2::Mmap::map(&file) }?;
    let (_, header) = SafeTensors::read_metadata(&map)
        .with_context(|| format!("{}: not a safetensors file", source.display()))?;
    let tensors = SafeTensors::deserialize(&map)?;
    let mut metadata = header.metadata().clone().unwrap_or_default();
    let mut specs = Vec::new();
    let mut done = Vec::new();
    let mut names: Vec<String> = tensors.names().into_iter().map(String::from).collect();
    names.sort();
    for name in &names {
        let view = tensors.tensor(name)?;
        match quantized.get_key_value(name.as_str()) {
            Some((&key, weight)) => {
                let [out, k] = weight_shape(view.shape(), weight)?;
                specs.push(TensorSpec {
                    key: name.clone(),
                    dtype: Dtype::U8,
                    shape: weight.format.stored_shape(out, k).to_vec(),
                });
                done.push(key);
            }
            None => specs.push(TensorSpec {
                key: name.clone(),
                dtype: view.dtype(),
                shape: view.shape().to_vec(),
            }),
        }
    }
    if !done.is_empty() {
        metadata.insert(FORMAT_KEY.into(), format.name().into());
        metadata.insert(GROUP_KEY.into(), GROUP.to_string());
    }
    progress.set_message(format!("writing {}", target.display()));
    write_safetensors(
        target,
        &specs,
        &metadata,
        |i| {
            let view = tensors.tensor(&specs[i].key)?;
            Ok(match quantized.get(specs[i].key.as_str()) {
                Some(weight) => {
                    let [_, k] = weight_shape(view.shape(), weight)?;
                    quantize(weight.format, &values(&view, weight)?, k)
                }
                None => view.data().to_vec(),
            })
        },
        progress,
    )?;
    Ok(done)
}

/// The `[out, k]` a stored weight stands for.
fn weight_shape(stored: &[usize], weight: &Quantized) -> Result<[usize; 2]> {
    let &[rows, cols] = stored else {
        bail!("{}: shape {stored:?}, expected a matrix", weight.key);
    };
    Ok(if weight.transposed {
        [cols, rows]
    } else {
        [rows, cols]
    })
}

/// A weight's values `[out, k]` in f32, as the loader saw them before quantizing.
fn values(view: &safetensors::tensor::TensorView<'_>, weight: &Quantized) -> Result<Vec<f32>> {
    let dtype = match view.dtype() {
        Dtype::F32 => DType::F32,
        Dtype::BF16 => DType::BF16,
        other => bail!("{}: dtype {other:?}, expected F32 or BF16", weight.key),
    };
    let stored = raw_to_f32(&RawTensor {
        dtype,
        shape: view.shape().to_vec(),
        data: view.data(),
    });
    if !weight.transposed {
        return Ok(stored);
    }
    let [out, k] = weight_shape(view.shape(), weight)?;
    let mut transposed = vec![0f32; stored.len()];
    for i in 0..k {
        for o in 0..out {
            transposed[o * k + i] = stored[i * out + o];
        }
    }
    Ok(transposed)
}
