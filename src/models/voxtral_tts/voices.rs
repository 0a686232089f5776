//! Preset voices: `voice_embedding/<name>.pt` (a PyTorch zip whose `*/data/0` entry holds the
//! raw tensor; the pickle is never executed) or `<name>.safetensors` (key `embedding`).
//! Each is `[N, dim]` with N = `tekken.json` `audio.voice_num_audio_tokens[name]`.

use crate::nn::LoadError;
use safetensors::{Dtype as StDtype, SafeTensors};
use std::collections::BTreeMap;
use std::io::{Read, Seek};
use std::path::Path;

pub const VOICE_DIR: &str = "voice_embedding";

/// One voice prompt: `rows` hidden states of width `dim`, kept as f32 (exact for bf16 input).
#[derive(Clone, Debug)]
pub struct Voice {
    pub rows: usize,
    pub data: Vec<f32>,
}

#[derive(Clone, Copy)]
enum Element {
    BF16,
    F32,
}

impl Element {
    fn size(self) -> usize {
        match self {
            Element::BF16 => 2,
            Element::F32 => 4,
        }
    }

    fn decode(self, bytes: &[u8]) -> Vec<f32> {
        match self {
            Element::BF16 => bytes
                .chunks_exact(2)
                .map(|b| half::bf16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f32())
                .collect(),
            Element::F32 => bytes
                .chunks_exact(4)
                .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
                .collect(),
        }
    }
}

/// Loads every voice in `dir/voice_embedding`, checking each against tekken's row counts.
pub fn load_voices(
    dir: &Path,
    rows: &BTreeMap<String, usize>,
    dim: usize,
) -> Result<BTreeMap<String, Voice>, LoadError> {
    let vdir = dir.join(VOICE_DIR);
    let entries = std::fs::read_dir(&vdir).map_err(|e| LoadError::io(&vdir, e))?;
    let mut voices = BTreeMap::new();
    let mut paths: Vec<_> = entries.filter_map(|e| e.ok().map(|e| e.path())).collect();
    // `.pt` (the published format) wins over a converted `.safetensors` of the same name.
    paths.sort_by_key(|p| {
        (
            p.file_stem().map(|s| s.to_owned()),
            p.extension().is_none_or(|e| e != "pt"),
        )
    });
    for path in paths {
        let (Some(stem), Some(ext)) = (
            path.file_stem().and_then(|s| s.to_str()),
            path.extension().and_then(|e| e.to_str()),
        ) else {
            continue;
        };
        if !matches!(ext, "pt" | "safetensors") || voices.contains_key(stem) {
            continue;
        }
        let file = path.display().to_string();
        let &n = rows.get(stem).ok_or_else(|| {
            LoadError::invalid(
                &file,
                format!("audio.voice_num_audio_tokens.{stem}"),
                "voice has no row count in tekken.json",
            )
        })?;
        let voice = if ext == "pt" {
            read_pt(&path, n, dim)?
        } else {
            read_safetensors(&path, n, dim)?
        };
        voices.insert(stem.to_string(), voice);
    }
    if voices.is_empty() {
        return Err(LoadError::invalid(
            vdir.display().to_string(),
            "*.pt|*.safetensors",
            "no voice files",
        ));
    }
    // tekken.json names the voices the model ships with: a missing file is a broken folder,
    // not a smaller voice list.
    if let Some(name) = rows.keys().find(|name| !voices.contains_key(*name)) {
        return Err(LoadError::invalid(
            vdir.join(format!("{name}.pt")).display().to_string(),
            format!("audio.voice_num_audio_tokens.{name}"),
            "voice listed in tekken.json has no file (.pt or .safetensors)",
        ));
    }
    Ok(voices)
}

fn read_pt(path: &Path, n: usize, dim: usize) -> Result<Voice, LoadError> {
    let handle = std::fs::File::open(path).map_err(|e| LoadError::io(path, e))?;
    read_pt_from(handle, &path.display().to_string(), n, dim)
}

/// Reads one `.pt` voice (a PyTorch zip; the pickle is only searched for the storage class
/// name, never executed) from `reader`, checking it holds `[n, dim]` BF16 or F32 values.
/// `file` names the source in errors. Never panics on malformed input (fuzzed:
/// `fuzz/fuzz_targets/voice_pt.rs`).
pub fn read_pt_from<R: Read + Seek>(
    reader: R,
    file: &str,
    n: usize,
    dim: usize,
) -> Result<Voice, LoadError> {
    let path = Path::new(file);
    let mut zip = zip::ZipArchive::new(reader).map_err(|e| {
        LoadError::invalid(file, "(zip)", format!("not a PyTorch zip archive: {e}"))
    })?;
    let names: Vec<String> = zip.file_names().map(String::from).collect();
    let find = |suffix: &str| names.iter().find(|n| n.ends_with(suffix)).cloned();
    let read_entry = |zip: &mut zip::ZipArchive<R>, name: &str| -> Result<Vec<u8>, LoadError> {
        let mut entry = zip
            .by_name(name)
            .map_err(|e| LoadError::invalid(file, name, e.to_string()))?;
        let mut bytes = Vec::new();
        entry
            .read_to_end(&mut bytes)
            .map_err(|e| LoadError::io(path, e))?;
        Ok(bytes)
    };
    let pickle_name =
        find("/data.pkl").ok_or_else(|| LoadError::invalid(file, "data.pkl", "missing entry"))?;
    let pickle = read_entry(&mut zip, &pickle_name)?;
    // The storage class name in the pickle tells the element type; nothing else is read from it.
    let contains = |needle: &[u8]| pickle.windows(needle.len()).any(|w| w == needle);
    let element = if contains(b"BFloat16Storage") {
        Element::BF16
    } else if contains(b"FloatStorage") {
        Element::F32
    } else {
        return Err(LoadError::invalid(
            file,
            &pickle_name,
            "tensor storage is neither BFloat16Storage nor FloatStorage",
        ));
    };
    let data_name = find("/data/0")
        .ok_or_else(|| LoadError::invalid(file, "data/0", "missing tensor entry"))?;
    let bytes = read_entry(&mut zip, &data_name)?;
    let expected = n * dim * element.size();
    if bytes.len() != expected {
        return Err(LoadError::invalid(
            file,
            &data_name,
            format!(
                "{} bytes, expected {expected} ([{n}, {dim}] from tekken.json)",
                bytes.len()
            ),
        ));
    }
    Ok(Voice {
        rows: n,
        data: element.decode(&bytes),
    })
}

fn read_safetensors(path: &Path, n: usize, dim: usize) -> Result<Voice, LoadError> {
    let file = path.display().to_string();
    let bytes = std::fs::read(path).map_err(|e| LoadError::io(path, e))?;
    let st = SafeTensors::deserialize(&bytes).map_err(|e| {
        LoadError::invalid(
            &file,
            "(header)",
            format!("not a valid safetensors file: {e}"),
        )
    })?;
    let view = st
        .tensor("embedding")
        .map_err(|_| LoadError::invalid(&file, "embedding", "missing tensor"))?;
    if view.shape() != [n, dim] {
        return Err(LoadError::invalid(
            &file,
            "embedding",
            format!("shape {:?}, expected [{n}, {dim}]", view.shape()),
        ));
    }
    let element = match view.dtype() {
        StDtype::BF16 => Element::BF16,
        StDtype::F32 => Element::F32,
        other => {
            return Err(LoadError::invalid(
                &file,
                "embedding",
                format!("dtype {other:?}, expected BF16 or F32"),
            ))
        }
    };
    Ok(Voice {
        rows: n,
        data: element.decode(view.data()),
    })
}
