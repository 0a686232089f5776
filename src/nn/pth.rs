//! PyTorch checkpoints (`.pth`/`.pt` written by `torch.save`), read without executing their
//! pickle.
//!
//! The pickle is interpreted by the `pytorch-reader` crate (tracel-ai/burn): a pickle machine
//! that never imports or calls anything. It rebuilds tensors from
//! `torch._utils._rebuild_tensor_v2` (and `_rebuild_parameter`) over typed storages, and keeps
//! every other `GLOBAL`/`REDUCE`/`NEWOBJ`/`BUILD` (a pickled config object, `os.getenv(...)`) as
//! an opaque value that is never run; opaque values holding tensor data are refused. On top of
//! that, a file whose data holds any object but tensors, storages, dictionaries and XTTS's
//! config classes (`TTS.*`) is refused outright (`os.system`, `builtins.eval`, ...). Views
//! (storage offsets, strides, transposes) are gathered into contiguous row-major bytes.
//! Containers: the zip archive `torch.save` has written since PyTorch 1.6 (what the XTTS files
//! are), and the older legacy and tar formats, which the crate also reads.
//!
//! Nested dictionaries are flattened with '.' (`{"a": {"b": t}}` gives `a.b`). Every error names
//! the file and, where there is one, the entry.

use super::LoadError;
use pytorch_reader::{
    DType as PthDType, PickleValue, PytorchError, PytorchReader, Tensor as PthTensor,
};
use safetensors::Dtype;
use std::path::Path;

/// One tensor of a checkpoint; its bytes are read on demand ([`PthCheckpoint::read`]).
pub struct PthEntry {
    pub key: String,
    pub dtype: Dtype,
    pub shape: Vec<usize>,
    tensor: PthTensor,
}

impl PthEntry {
    pub fn byte_len(&self) -> usize {
        self.tensor.byte_len()
    }
}

/// The tensors of one checkpoint, sorted by key.
pub struct PthCheckpoint {
    file: String,
    entries: Vec<PthEntry>,
    /// The private copy that [`PthCheckpoint::from_bytes`] reads from (entries read lazily).
    _copy: Option<TempCopy>,
}

/// A file removed when dropped: `pytorch-reader` opens zip archives by path only.
struct TempCopy(std::path::PathBuf);

impl TempCopy {
    fn write(bytes: &[u8]) -> std::io::Result<Self> {
        use std::sync::atomic::{AtomicU64, Ordering};
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let name = format!(
            "voxtral-pth-{}-{}.pth",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        );
        let path = std::env::temp_dir().join(name);
        std::fs::write(&path, bytes)?;
        Ok(TempCopy(path))
    }
}

impl Drop for TempCopy {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

impl PthCheckpoint {
    /// The tensors of `path`, or of its top-level dictionary entry `top_level_key` (XTTS keeps
    /// the state dict under `"model"`, beside a config and training counters that are skipped).
    pub fn open(path: &Path, top_level_key: Option<&str>) -> Result<Self, LoadError> {
        let file = path.display().to_string();
        refuse_foreign_objects(path, &file)?;
        let reader = match top_level_key {
            Some(key) => PytorchReader::with_top_level_key(path, key),
            None => PytorchReader::new(path),
        };
        Self::from_reader(file, reader, top_level_key, None)
    }

    /// As [`PthCheckpoint::open`], for a file held in memory; `file` names it in errors.
    pub fn from_bytes(
        bytes: Vec<u8>,
        file: &str,
        top_level_key: Option<&str>,
    ) -> Result<Self, LoadError> {
        let copy = TempCopy::write(&bytes).map_err(|e| LoadError::io(Path::new(file), e))?;
        refuse_foreign_objects(&copy.0, file)?;
        let reader = match top_level_key {
            Some(key) => PytorchReader::with_top_level_key(&copy.0, key),
            None => PytorchReader::new(&copy.0),
        };
        Self::from_reader(file.to_string(), reader, top_level_key, Some(copy))
    }

    fn from_reader(
        file: String,
        reader: Result<PytorchReader, PytorchError>,
        top_level_key: Option<&str>,
        copy: Option<TempCopy>,
    ) -> Result<Self, LoadError> {
        let reader = reader.map_err(|e| {
            let entry = match (&e, top_level_key) {
                (PytorchError::KeyNotFound(_), Some(key)) => key,
                (PytorchError::Zip(_), _) => "(zip)",
                _ => "(pickle)",
            };
            LoadError::invalid(
                &file,
                entry,
                format!("not a readable PyTorch checkpoint: {e}"),
            )
        })?;
        let mut entries = reader
            .into_tensors()
            .into_iter()
            .map(|(key, tensor)| {
                let dtype = safetensors_dtype(tensor.dtype());
                let shape = tensor.shape().to_vec();
                PthEntry {
                    key,
                    dtype,
                    shape,
                    tensor,
                }
            })
            .collect::<Vec<_>>();
        entries.sort_by(|a, b| a.key.cmp(&b.key));
        Ok(PthCheckpoint {
            file,
            entries,
            _copy: copy,
        })
    }

    pub fn file(&self) -> &str {
        &self.file
    }

    pub fn entries(&self) -> &[PthEntry] {
        &self.entries
    }

    /// The entry's values: contiguous, row-major, little-endian.
    pub fn read(&self, entry: &PthEntry) -> Result<Vec<u8>, LoadError> {
        let bytes = entry
            .tensor
            .read()
            .map_err(|e| LoadError::invalid(&self.file, &entry.key, e.to_string()))?;
        if bytes.len() != entry.byte_len() {
            return Err(LoadError::invalid(
                &self.file,
                &entry.key,
                format!("{} bytes, expected {}", bytes.len(), entry.byte_len()),
            ));
        }
        Ok(bytes)
    }
}

/// Refuses a checkpoint whose pickle builds any object but tensors, storages, dictionaries and
/// XTTS's config classes (`TTS.*`, skipped): nothing is ever run, but a file naming
/// `os.system` or `builtins.eval` is not a checkpoint to trust. An unreadable pickle is left
/// to the tensor reader, which reports it.
fn refuse_foreign_objects(path: &Path, file: &str) -> Result<(), LoadError> {
    fn find_foreign(value: &PickleValue) -> Option<&str> {
        match value {
            PickleValue::Unsupported(name) => {
                let allowed = matches!(name.as_str(), "torch.Tensor" | "int")
                    || name.starts_with("TTS.")
                    || (name.starts_with("torch.") && name.ends_with("Storage"));
                (!allowed).then_some(name.as_str())
            }
            PickleValue::List(items) => items.iter().find_map(find_foreign),
            PickleValue::Dict(dict) => dict.values().find_map(find_foreign),
            _ => None,
        }
    }
    let Ok(root) = PytorchReader::read_pickle_data(path, None) else {
        return Ok(());
    };
    match find_foreign(&root) {
        Some(name) => Err(LoadError::invalid(
            file,
            "(pickle)",
            format!("refused: builds {name}, which a checkpoint never holds (not executed)"),
        )),
        None => Ok(()),
    }
}

fn safetensors_dtype(dtype: PthDType) -> Dtype {
    match dtype {
        PthDType::F64 => Dtype::F64,
        PthDType::F32 => Dtype::F32,
        PthDType::F16 => Dtype::F16,
        PthDType::BF16 => Dtype::BF16,
        PthDType::I64 => Dtype::I64,
        PthDType::I32 => Dtype::I32,
        PthDType::I16 => Dtype::I16,
        PthDType::I8 => Dtype::I8,
        PthDType::U64 => Dtype::U64,
        PthDType::U32 => Dtype::U32,
        PthDType::U16 => Dtype::U16,
        PthDType::U8 => Dtype::U8,
        PthDType::Bool => Dtype::BOOL,
    }
}
