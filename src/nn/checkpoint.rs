//! Safetensors checkpoints, memory-mapped: one file (`consolidated.safetensors`,
//! `model.safetensors`), several shards, or the shards a `*.safetensors.index.json` lists.
//! Tensors are fetched by key with their expected shape; every mismatch is an error naming
//! the file and the key.

use super::LoadError;
use crate::tensor::quantized::QuantFormat;
use crate::tensor::{DType, RawTensor, Tensor};
use memmap2::Mmap;
use safetensors::{Dtype as StDtype, SafeTensors};
use std::cell::RefCell;
use std::collections::{BTreeSet, HashMap, HashSet};
use std::fs::File;
use std::path::Path;
use std::sync::Arc;

/// One memory-mapped file.
struct Shard {
    file: String,
    // Field order matters for drop: `tensors` borrows from `map`.
    tensors: SafeTensors<'static>,
    map: Arc<Mmap>,
}

impl Shard {
    fn open(path: &Path) -> Result<Shard, LoadError> {
        let file = path.display().to_string();
        let handle = File::open(path).map_err(|e| LoadError::io(path, e))?;
        // SAFETY: the file is mapped read-only; the model folder must not be modified while
        // the server runs (the same contract as every mmap-based loader).
        let map = Arc::new(unsafe { Mmap::map(&handle) }.map_err(|e| LoadError::io(path, e))?);
        // SAFETY: `map` is kept alive by `self.map` (and by the model, see `mmaps`) for as long
        // as anything borrows from it; the 'static is never handed out beyond the checkpoint.
        let bytes: &'static [u8] = unsafe { std::slice::from_raw_parts(map.as_ptr(), map.len()) };
        let tensors = SafeTensors::deserialize(bytes).map_err(|e| {
            LoadError::invalid(
                &file,
                "(header)",
                format!("not a valid safetensors file: {e}"),
            )
        })?;
        Ok(Shard { file, tensors, map })
    }
}

pub struct Checkpoint {
    shards: Vec<Shard>,
    /// Which shard holds each key.
    index: HashMap<String, usize>,
    used: RefCell<HashSet<String>>,
}

impl Checkpoint {
    pub fn open(path: &Path) -> Result<Self, LoadError> {
        Self::open_shards(&[path])
    }

    /// Several files as one checkpoint; a key in two of them is an error.
    pub fn open_shards<P: AsRef<Path>>(paths: &[P]) -> Result<Self, LoadError> {
        let shards = paths
            .iter()
            .map(|p| Shard::open(p.as_ref()))
            .collect::<Result<Vec<_>, _>>()?;
        let mut index = HashMap::new();
        for (i, shard) in shards.iter().enumerate() {
            for name in shard.tensors.names() {
                if let Some(first) = index.insert(name.to_string(), i) {
                    return Err(LoadError::invalid(
                        &shard.file,
                        name,
                        format!("also in {}", shards[first].file),
                    ));
                }
            }
        }
        Ok(Checkpoint {
            shards,
            index,
            used: Default::default(),
        })
    }

    /// The shards `index` (a `*.safetensors.index.json`, as Hugging Face writes them) lists
    /// in its `weight_map`, from the index's folder.
    pub fn open_indexed(index: &Path) -> Result<Self, LoadError> {
        #[derive(serde::Deserialize)]
        struct Index {
            weight_map: HashMap<String, String>,
        }
        let file = index.display().to_string();
        let text = std::fs::read_to_string(index).map_err(|e| LoadError::io(index, e))?;
        let parsed: Index = serde_json::from_str(&text)
            .map_err(|e| LoadError::invalid(&file, "weight_map", e.to_string()))?;
        let dir = index.parent().unwrap_or(Path::new("."));
        let names: BTreeSet<&String> = parsed.weight_map.values().collect();
        if let Some(bad) = names
            .iter()
            .find(|n| Path::new(n).components().count() != 1)
        {
            return Err(LoadError::invalid(
                &file,
                "weight_map",
                format!("{bad:?} is not a file name in the index's folder"),
            ));
        }
        let checkpoint = Self::open_shards(&names.iter().map(|n| dir.join(n)).collect::<Vec<_>>())?;
        for (key, shard) in &parsed.weight_map {
            let holder = checkpoint
                .index
                .get(key)
                .map(|&i| &checkpoint.shards[i].file);
            if holder.is_none_or(|f| !f.ends_with(shard.as_str())) {
                return Err(LoadError::invalid(
                    &file,
                    format!("weight_map.{key}"),
                    format!("not in {shard}"),
                ));
            }
        }
        Ok(checkpoint)
    }

    /// The memory maps the zero-copy tensors point into; the model keeps them alive.
    pub fn mmaps(&self) -> Vec<Arc<Mmap>> {
        self.shards.iter().map(|s| s.map.clone()).collect()
    }

    /// The checkpoint's files, for messages.
    pub fn files(&self) -> String {
        let files: Vec<&str> = self.shards.iter().map(|s| s.file.as_str()).collect();
        files.join(", ")
    }

    /// Every key, sorted (for files whose keys are data, such as a table of voices).
    pub fn keys(&self) -> Vec<String> {
        let mut keys: Vec<String> = self.index.keys().cloned().collect();
        keys.sort();
        keys
    }

    /// The shape stored at `key`.
    pub fn shape(&self, key: &str) -> Result<Vec<usize>, LoadError> {
        let Some(shard) = self.index.get(key).map(|&i| &self.shards[i]) else {
            return Err(LoadError::invalid(self.files(), key, "missing tensor"));
        };
        let view = shard
            .tensors
            .tensor(key)
            .map_err(|e| LoadError::invalid(&shard.file, key, e.to_string()))?;
        Ok(view.shape().to_vec())
    }

    /// The raw tensor at `key`, checked against `shape`.
    pub fn raw(&self, key: &str, shape: &[usize]) -> Result<RawTensor<'static>, LoadError> {
        let Some(shard) = self.index.get(key).map(|&i| &self.shards[i]) else {
            return Err(LoadError::invalid(self.files(), key, "missing tensor"));
        };
        let view = shard
            .tensors
            .tensor(key)
            .map_err(|e| LoadError::invalid(&shard.file, key, e.to_string()))?;
        if view.shape() != shape {
            return Err(LoadError::invalid(
                &shard.file,
                key,
                format!("shape {:?}, expected {:?}", view.shape(), shape),
            ));
        }
        let dtype = match view.dtype() {
            StDtype::BF16 => DType::BF16,
            StDtype::F32 => DType::F32,
            other => {
                return Err(LoadError::invalid(
                    &shard.file,
                    key,
                    format!("dtype {other:?}, expected BF16 or F32"),
                ))
            }
        };
        self.used.borrow_mut().insert(key.to_string());
        Ok(RawTensor {
            dtype,
            shape: view.shape().to_vec(),
            data: view.data(),
        })
    }

    /// The blocks of the `[out, k]` weight at `key` where a quantized checkpoint stores it in
    /// one of [`QuantFormat`]'s layouts (bytes `[out, k / 32, block]`); `None` where it is
    /// stored as values.
    pub fn quantized(
        &self,
        key: &str,
        [out, k]: [usize; 2],
    ) -> Result<Option<(QuantFormat, &'static [u8])>, LoadError> {
        let Some(shard) = self.index.get(key).map(|&i| &self.shards[i]) else {
            return Err(LoadError::invalid(self.files(), key, "missing tensor"));
        };
        let view = shard
            .tensors
            .tensor(key)
            .map_err(|e| LoadError::invalid(&shard.file, key, e.to_string()))?;
        if view.dtype() != StDtype::U8 {
            return Ok(None);
        }
        let format = match view.shape() {
            &[_, _, block] => QuantFormat::of_block_bytes(block),
            _ => None,
        };
        match format {
            Some(format) if QuantFormat::fits(k) && view.shape() == format.stored_shape(out, k) => {
                self.used.borrow_mut().insert(key.to_string());
                Ok(Some((format, view.data())))
            }
            _ => Err(LoadError::invalid(
                &shard.file,
                key,
                format!(
                    "bytes of shape {:?}: not a quantized [{out}, {k}] weight (q8: [{out}, {}, 34], q4: [{out}, {}, 18])",
                    view.shape(),
                    k / 32,
                    k / 32
                ),
            )),
        }
    }

    /// The tensor at `key` in `dtype`, sharing the mapped bytes where the backend allows.
    pub fn load<T: Tensor>(
        &self,
        device: &T::Device,
        key: &str,
        shape: &[usize],
        dtype: DType,
    ) -> Result<T, LoadError> {
        let raw = self.raw(key, shape)?;
        // SAFETY: `raw.data` points into a shard's map, which the model holds (`mmaps()`) for
        // as long as its tensors live, and which is never written.
        Ok(unsafe { T::from_raw(device, &raw, dtype) })
    }

    /// The tensor at `key` as f32 values on the host.
    pub fn load_f32(&self, key: &str, shape: &[usize]) -> Result<Vec<f32>, LoadError> {
        let raw = self.raw(key, shape)?;
        Ok(raw_to_f32(&raw))
    }

    /// Keys present in the files but never loaded (an unknown layout would show up here).
    pub fn unused_keys(&self) -> Vec<String> {
        let used = self.used.borrow();
        let mut keys: Vec<String> = self
            .index
            .keys()
            .filter(|k| !used.contains(*k))
            .cloned()
            .collect();
        keys.sort();
        keys
    }
}

pub fn raw_to_f32(raw: &RawTensor<'_>) -> Vec<f32> {
    match raw.dtype {
        DType::F32 => raw
            .data
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect(),
        DType::BF16 => raw
            .data
            .chunks_exact(2)
            .map(|b| half::bf16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f32())
            .collect(),
    }
}

/// A checkpoint at `path` of f32 tensors `shapes` (key, shape), each value uniform in
/// [-0.5, 0.5) from a ChaCha8 stream seeded with `seed`, drawn in order: for unit tests.
#[cfg(test)]
pub(crate) fn random_f32_checkpoint(
    path: &Path,
    shapes: &[(String, Vec<usize>)],
    seed: u64,
) -> Checkpoint {
    use rand::{Rng, SeedableRng};
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let data: Vec<Vec<u8>> = shapes
        .iter()
        .map(|(_, shape)| {
            (0..shape.iter().product::<usize>())
                .flat_map(|_| (rng.random::<f32>() - 0.5).to_le_bytes())
                .collect()
        })
        .collect();
    let views: Vec<_> = shapes
        .iter()
        .zip(&data)
        .map(|((key, shape), bytes)| {
            let view =
                safetensors::tensor::TensorView::new(StDtype::F32, shape.clone(), bytes).unwrap();
            (key.clone(), view)
        })
        .collect();
    safetensors::serialize_to_file(views, None, path).unwrap();
    Checkpoint::open(path).unwrap()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(path: &Path, keys: &[&str]) {
        let data = 1.5f32.to_le_bytes().repeat(2);
        let views: Vec<_> = keys
            .iter()
            .map(|k| {
                let view =
                    safetensors::tensor::TensorView::new(StDtype::F32, vec![2], &data).unwrap();
                (k.to_string(), view)
            })
            .collect();
        safetensors::serialize_to_file(views, None, path).unwrap();
    }

    #[test]
    fn shards_and_their_index_read_as_one_checkpoint() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (
            dir.path().join("a.safetensors"),
            dir.path().join("b.safetensors"),
        );
        write(&a, &["talker.x", "talker.y"]);
        write(&b, &["decoder.z"]);
        let index = dir.path().join("model.safetensors.index.json");
        let map = r#"{"weight_map": {"talker.x": "a.safetensors", "talker.y": "a.safetensors",
            "decoder.z": "b.safetensors"}}"#;
        std::fs::write(&index, map).unwrap();
        let ckpt = Checkpoint::open_indexed(&index).unwrap();
        assert_eq!(ckpt.load_f32("decoder.z", &[2]).unwrap(), [1.5, 1.5]);
        assert_eq!(ckpt.load_f32("talker.x", &[2]).unwrap(), [1.5, 1.5]);
        assert_eq!(ckpt.unused_keys(), ["talker.y"]);
        let missing = ckpt.raw("nope", &[2]).err().unwrap().to_string();
        assert!(
            missing.contains("a.safetensors, ") && missing.contains("nope"),
            "{missing}"
        );
        let shape = ckpt.raw("decoder.z", &[3]).err().unwrap().to_string();
        assert!(
            shape.contains("b.safetensors") && shape.contains("[2]"),
            "{shape}"
        );

        write(&b, &["decoder.z", "talker.x"]);
        let twice = Checkpoint::open_shards(&[&a, &b])
            .err()
            .unwrap()
            .to_string();
        assert!(
            twice.contains("talker.x") && twice.contains("also in"),
            "{twice}"
        );
        std::fs::write(&index, r#"{"weight_map": {"talker.q": "a.safetensors"}}"#).unwrap();
        write(&b, &["decoder.z"]);
        let wrong = Checkpoint::open_indexed(&index).err().unwrap().to_string();
        assert!(wrong.contains("weight_map.talker.q"), "{wrong}");
    }
}
