//! Writes a safetensors file one tensor at a time (a converted checkpoint of gigabytes is never
//! held in memory whole), through a temporary file that replaces the target only once complete.

use anyhow::{ensure, Context, Result};
use safetensors::tensor::TensorInfo;
use safetensors::Dtype;
use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};

/// What the header says of one tensor; its bytes come from the caller.
pub struct TensorSpec {
    pub key: String,
    pub dtype: Dtype,
    pub shape: Vec<usize>,
}

impl TensorSpec {
    fn byte_len(&self) -> usize {
        self.shape.iter().product::<usize>() * self.dtype.bitsize() / 8
    }
}

/// Writes `tensors` to `path`. `bytes(i)` returns the little-endian, row-major bytes of
/// `tensors[i]` and is called once per tensor, in file order; `progress` is advanced by each
/// tensor's size. Tensors are laid out widest element first (then by key), so every tensor
/// starts aligned to its element size, as the reference writer does.
pub fn write_safetensors(
    path: &Path,
    tensors: &[TensorSpec],
    metadata: &HashMap<String, String>,
    mut bytes: impl FnMut(usize) -> Result<Vec<u8>>,
    progress: &indicatif::ProgressBar,
) -> Result<()> {
    let mut order: Vec<usize> = (0..tensors.len()).collect();
    order.sort_by(|&a, &b| {
        let (a, b) = (&tensors[a], &tensors[b]);
        b.dtype
            .bitsize()
            .cmp(&a.dtype.bitsize())
            .then_with(|| a.key.cmp(&b.key))
    });
    let mut header = BTreeMap::new();
    let mut offset = 0usize;
    for &i in &order {
        let spec = &tensors[i];
        let end = offset + spec.byte_len();
        let info = TensorInfo {
            dtype: spec.dtype,
            shape: spec.shape.clone(),
            data_offsets: (offset, end),
        };
        ensure!(
            header
                .insert(spec.key.clone(), serde_json::to_value(info)?)
                .is_none(),
            "{}: key {} given twice",
            path.display(),
            spec.key
        );
        offset = end;
    }
    if !metadata.is_empty() {
        header.insert("__metadata__".into(), serde_json::to_value(metadata)?);
    }
    let mut text = serde_json::to_string(&header)?;
    // The data section starts 8-byte aligned.
    while text.len() % 8 != 0 {
        text.push(' ');
    }
    progress.set_length(offset as u64);
    write_atomically(path, |out| {
        out.write_all(&(text.len() as u64).to_le_bytes())?;
        out.write_all(text.as_bytes())?;
        for &i in &order {
            let spec = &tensors[i];
            let data = bytes(i)?;
            ensure!(
                data.len() == spec.byte_len(),
                "{}: {} bytes, expected {} for {:?} {:?}",
                spec.key,
                data.len(),
                spec.byte_len(),
                spec.dtype,
                spec.shape
            );
            out.write_all(&data)?;
            progress.inc(data.len() as u64);
        }
        Ok(())
    })
}

/// Runs `write` on a temporary file next to `path`, then renames it over `path`: a reader of
/// `path` sees the old file or the complete new one, never a partial one. The temporary file
/// is removed if anything fails.
pub fn write_atomically(
    path: &Path,
    write: impl FnOnce(&mut BufWriter<File>) -> Result<()>,
) -> Result<()> {
    let temp = temp_path(path)?;
    let result = (|| {
        let file = File::create(&temp).with_context(|| format!("creating {}", temp.display()))?;
        let mut out = BufWriter::with_capacity(1 << 20, file);
        write(&mut out).with_context(|| format!("writing {}", path.display()))?;
        let file = out
            .into_inner()
            .map_err(|e| e.into_error())
            .with_context(|| format!("writing {}", temp.display()))?;
        file.sync_all()
            .with_context(|| format!("writing {}", temp.display()))?;
        std::fs::rename(&temp, path)
            .with_context(|| format!("renaming {} to {}", temp.display(), path.display()))
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&temp);
    }
    result
}

fn temp_path(path: &Path) -> Result<PathBuf> {
    let name = path
        .file_name()
        .with_context(|| format!("{} is not a file path", path.display()))?;
    let mut temp = std::ffi::OsString::from(".");
    temp.push(name);
    temp.push(format!(".tmp-{}", std::process::id()));
    Ok(path.with_file_name(temp))
}

#[cfg(test)]
mod tests {
    use super::*;
    use safetensors::SafeTensors;

    fn spec(key: &str, dtype: Dtype, shape: &[usize]) -> TensorSpec {
        TensorSpec {
            key: key.into(),
            dtype,
            shape: shape.to_vec(),
        }
    }

    #[test]
    fn writes_a_file_the_safetensors_crate_reads_with_each_tensor_aligned() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.safetensors");
        let tensors = [
            spec("b.half", Dtype::F16, &[3]),
            spec("a.long", Dtype::I64, &[]),
            spec("c.float", Dtype::F32, &[2, 1]),
            spec("d.flag", Dtype::BOOL, &[1]),
        ];
        let data: Vec<Vec<u8>> = vec![
            vec![1, 2, 3, 4, 5, 6],
            7i64.to_le_bytes().to_vec(),
            [1.5f32.to_le_bytes(), (-2f32).to_le_bytes()].concat(),
            vec![1],
        ];
        let metadata = HashMap::from([("format".to_string(), "pt".to_string())]);
        let bar = indicatif::ProgressBar::hidden();
        write_safetensors(&path, &tensors, &metadata, |i| Ok(data[i].clone()), &bar).unwrap();
        assert_eq!(bar.position(), 6 + 8 + 8 + 1);
        let bytes = std::fs::read(&path).unwrap();
        let st = SafeTensors::deserialize(&bytes).unwrap();
        for (spec, data) in tensors.iter().zip(&data) {
            let view = st.tensor(&spec.key).unwrap();
            assert_eq!((view.dtype(), view.shape()), (spec.dtype, &spec.shape[..]));
            assert_eq!(view.data(), &data[..]);
            let start = view.data().as_ptr() as usize - bytes.as_ptr() as usize;
            assert_eq!(start % (spec.dtype.bitsize() / 8), 0, "{}", spec.key);
        }
        let (_, meta) = SafeTensors::read_metadata(&bytes).unwrap();
        assert_eq!(meta.metadata().as_ref().unwrap()["format"], "pt");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn a_failed_write_leaves_the_old_file_and_no_temporary() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.safetensors");
        std::fs::write(&path, b"old").unwrap();
        let tensors = [spec("x", Dtype::F32, &[2])];
        let bar = indicatif::ProgressBar::hidden();
        let short = write_safetensors(&path, &tensors, &HashMap::new(), |_| Ok(vec![0; 4]), &bar)
            .unwrap_err();
        assert!(
            format!("{short:#}").contains("4 bytes, expected 8"),
            "{short:#}"
        );
        let failing = write_safetensors(
            &path,
            &tensors,
            &HashMap::new(),
            |_| anyhow::bail!("storage unreadable"),
            &bar,
        )
        .unwrap_err();
        assert!(format!("{failing:#}").contains("storage unreadable"));
        assert_eq!(std::fs::read(&path).unwrap(), b"old");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }
}
