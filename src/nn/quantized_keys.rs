//! Which checkpoint keys a model's loaders quantized: `voxtral-tts quantize` loads a model
//! with its weights quantized and stores exactly those keys in blocks, so that the stored
//! folder and one quantized at load give the same tensors, with no list of keys kept apart
//! from the loaders.

use crate::tensor::quantized::{QuantFormat, GROUP};
use crate::tensor::DType;
use anyhow::Context;
use std::cell::RefCell;
use std::collections::HashMap;
use std::path::Path;

thread_local! {
    static RECORDING: RefCell<Option<Vec<Quantized>>> = const { RefCell::new(None) };
}

/// One weight a loader quantized.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Quantized {
    pub key: String,
    pub format: QuantFormat,
    /// Stored `[k, out]`, transposed before quantizing (GPT-2's `Conv1D`).
    pub transposed: bool,
}

/// Notes that the loader quantized `key` (a no-op outside [`recording`]).
pub fn record(key: &str, format: QuantFormat, transposed: bool) {
    RECORDING.with(|keys| {
        if let Some(keys) = keys.borrow_mut().as_mut() {
            keys.push(Quantized {
                key: key.to_string(),
                format,
                transposed,
            });
        }
    });
}

/// Runs `load` (on this thread) and returns what it returned with the weights its loaders
/// quantized, in order.
pub fn recording<R>(load: impl FnOnce() -> R) -> (R, Vec<Quantized>) {
    RECORDING.with(|keys| *keys.borrow_mut() = Some(Vec::new()));
    let result = load();
    let keys = RECORDING.with(|keys| keys.borrow_mut().take().unwrap_or_default());
    (result, keys)
}

/// The weights quantized so far by the [`recording`] this thread is in (none outside one):
/// for code that runs inside a load, such as a visitor handed the loaded model.
pub fn recorded() -> Vec<Quantized> {
    RECORDING.with(|keys| keys.borrow().clone().unwrap_or_default())
}

/// The bytes a loaded model holds of each tensor of the safetensors file `path`, computing in
/// `dtype`: a weight stored in blocks as stored, one quantized at load (`at_load`) at its
/// format's size, any other in `dtype`.
pub fn loaded_bytes(
    path: &Path,
    dtype: DType,
    at_load: &[Quantized],
) -> anyhow::Result<Vec<(String, usize)>> {
    let file = std::fs::File::open(path).with_context(|| path.display().to_string())?;
    // SAFETY: read-only map of a checkpoint nobody writes while it is read.
    let map = unsafe { memmap2::Mmap::map(&file) }?;
    let (_, metadata) = safetensors::SafeTensors::read_metadata(&map)
        .with_context(|| format!("{}: not a safetensors file", path.display()))?;
    let formats: HashMap<&str, QuantFormat> =
        at_load.iter().map(|q| (q.key.as_str(), q.format)).collect();
    Ok(metadata
        .tensors()
        .into_iter()
        .map(|(name, info)| {
            let values: usize = info.shape.iter().product();
            let bytes = match (info.dtype, formats.get(name.as_str())) {
                (safetensors::Dtype::U8, _) => values,
                (_, Some(format)) => values / GROUP * format.block_bytes(),
                _ => values * dtype.size(),
            };
            (name, bytes)
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nn::safetensors_writer::{write_safetensors, TensorSpec};
    use safetensors::Dtype;

    /// Stored blocks count as stored, weights quantized at load at their format's size, the
    /// rest at the compute dtype's size whatever they are stored in.
    #[test]
    fn loaded_bytes_count_each_weight_as_the_model_holds_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("model.safetensors");
        let spec = |key: &str, dtype, shape: &[usize]| TensorSpec {
            key: key.into(),
            dtype,
            shape: shape.to_vec(),
        };
        let tensors = [
            spec("stored_q4", Dtype::U8, &[4, 2, 18]),
            spec("at_load", Dtype::BF16, &[4, 64]),
            spec("norm", Dtype::F32, &[64]),
        ];
        let bytes = |i: usize| {
            let t = &tensors[i];
            Ok(vec![
                0;
                t.shape.iter().product::<usize>() * t.dtype.bitsize()
                    / 8
            ])
        };
        let progress = indicatif::ProgressBar::hidden();
        write_safetensors(&path, &tensors, &HashMap::new(), bytes, &progress).unwrap();
        let at_load = [Quantized {
            key: "at_load".into(),
            format: QuantFormat::Q8,
            transposed: false,
        }];
        let mut got = loaded_bytes(&path, DType::BF16, &at_load).unwrap();
        got.sort();
        let want = [
            ("at_load", 4 * 2 * 34),
            ("norm", 64 * 2),
            ("stored_q4", 4 * 2 * 18),
        ];
        let want: Vec<(String, usize)> = want.iter().map(|&(k, b)| (k.into(), b)).collect();
        assert_eq!(got, want);
        let unquantized = loaded_bytes(&path, DType::F32, &[]).unwrap();
        assert!(unquantized.contains(&("at_load".into(), 4 * 64 * 4)));
    }
}
