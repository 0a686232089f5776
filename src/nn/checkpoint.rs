//! `consolidated.safetensors`, memory-mapped. Tensors are fetched by key with their expected
//! shape; every mismatch is an error naming the file and the key.

use super::LoadError;
use crate::tensor::{DType, RawTensor, Tensor};
use memmap2::Mmap;
use safetensors::{Dtype as StDtype, SafeTensors};
use std::collections::HashSet;
use std::fs::File;
use std::path::Path;
use std::sync::Arc;

pub struct Checkpoint {
    file: String,
    // Field order matters for drop: `tensors` borrows from `map`.
    tensors: SafeTensors<'static>,
    used: std::cell::RefCell<HashSet<String>>,
    map: Arc<Mmap>,
}

impl Checkpoint {
    pub fn open(path: &Path) -> Result<Self, LoadError> {
        let file = path.display().to_string();
        let handle = File::open(path).map_err(|e| LoadError::io(path, e))?;
        // SAFETY: the file is mapped read-only; the model folder must not be modified while
        // the server runs (the same contract as every mmap-based loader).
        let map = Arc::new(unsafe { Mmap::map(&handle) }.map_err(|e| LoadError::io(path, e))?);
        // SAFETY: `map` is kept alive by `self.map` (and by the model, see `mmap`) for as long
        // as anything borrows from it; the 'static is never handed out beyond `self`.
        let bytes: &'static [u8] = unsafe { std::slice::from_raw_parts(map.as_ptr(), map.len()) };
        let tensors = SafeTensors::deserialize(bytes).map_err(|e| {
            LoadError::invalid(
                &file,
                "(header)",
                format!("not a valid safetensors file: {e}"),
            )
        })?;
        Ok(Checkpoint {
            file,
            tensors,
            used: Default::default(),
            map,
        })
    }

    /// The memory map the zero-copy tensors point into; the model keeps it alive.
    pub fn mmap(&self) -> Arc<Mmap> {
        self.map.clone()
    }

    pub fn file(&self) -> &str {
        &self.file
    }

    /// The raw tensor at `key`, checked against `shape`.
    pub fn raw(&self, key: &str, shape: &[usize]) -> Result<RawTensor<'static>, LoadError> {
        let view = self
            .tensors
            .tensor(key)
            .map_err(|_| LoadError::invalid(&self.file, key, "missing tensor"))?;
        if view.shape() != shape {
            return Err(LoadError::invalid(
                &self.file,
                key,
                format!("shape {:?}, expected {:?}", view.shape(), shape),
            ));
        }
        let dtype = match view.dtype() {
            StDtype::BF16 => DType::BF16,
            StDtype::F32 => DType::F32,
            other => {
                return Err(LoadError::invalid(
                    &self.file,
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

    /// The tensor at `key` in `dtype`, sharing the mapped bytes where the backend allows.
    pub fn load<T: Tensor>(
        &self,
        device: &T::Device,
        key: &str,
        shape: &[usize],
        dtype: DType,
    ) -> Result<T, LoadError> {
        let raw = self.raw(key, shape)?;
        // SAFETY: `raw.data` points into `self.map`, which the model holds (`mmap()`) for as
        // long as its tensors live, and which is never written.
        Ok(unsafe { T::from_raw(device, &raw, dtype) })
    }

    /// The tensor at `key` as f32 values on the host.
    pub fn load_f32(&self, key: &str, shape: &[usize]) -> Result<Vec<f32>, LoadError> {
        let raw = self.raw(key, shape)?;
        Ok(raw_to_f32(&raw))
    }

    /// Keys present in the file but never loaded (an unknown layout would show up here).
    pub fn unused_keys(&self) -> Vec<String> {
        let used = self.used.borrow();
        let mut keys: Vec<String> = self
            .tensors
            .names()
            .into_iter()
            .filter(|k| !used.contains(*k))
            .map(String::from)
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
