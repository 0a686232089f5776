//! Custom voices (OpenAI's `POST /v1/audio/voices`): what a cloning model computed from a
//! reference clip, kept in a folder so that it survives restarts.
//!
//! Each voice is a folder `<dir>/voice_<hex>/` with `voice.json` (what the API lists) and
//! `voice.safetensors` (the model's tensors, e.g. a speaker embedding and reference codes).
//! A voice appears at once or not at all: it is written under `.incoming-*` and renamed into
//! place, and removed by renaming it to `.deleting-*` first. Leftovers of a crash (either
//! prefix) are cleared when the store opens; the folder itself is made by the first voice
//! stored (a server whose models cannot clone never creates it); a voice folder that cannot
//! be read is skipped with a warning, never deleted (it is the operator's data).

use crate::engine::voice::CUSTOM_VOICE_PREFIX;
pub use crate::engine::voice::{TensorData, VoiceTensor, VoiceTensors};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, RwLock};

const META_FILE: &str = "voice.json";
const TENSORS_FILE: &str = "voice.safetensors";
const ID_PREFIX: &str = CUSTOM_VOICE_PREFIX;
const INCOMING_PREFIX: &str = ".incoming-";
const DELETING_PREFIX: &str = ".deleting-";

/// What the API says of a stored voice, and which model can use it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct VoiceMeta {
    /// `voice_` and 32 hex digits.
    pub id: String,
    pub name: String,
    /// Unix time (seconds).
    pub created_at: u64,
    /// The served model's id it was computed by: only that model can speak with it.
    pub model: String,
    /// The model's family, e.g. `qwen3-tts`.
    pub family: String,
    /// The reference clip's transcript, for models that clone in context.
    pub transcript: Option<String>,
    /// The language speech with this voice is in when a request names none (one of the
    /// model's, BCP 47).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub language: Option<String>,
    /// Length of the reference clip.
    pub audio_seconds: f32,
    /// sha256 of the decoded clip and the settings it was computed with: the same upload
    /// need not be computed twice.
    pub source_sha256: String,
    /// Labels Mistral's voices API sets and returns; none for voices made through OpenAI's.
    #[serde(default, skip_serializing_if = "VoiceProfile::is_empty")]
    pub profile: VoiceProfile,
}

/// What Mistral's voices API says of a voice beyond its name: kept and returned as given,
/// none of it changes the speech (the voice's `language` does, set from `languages`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct VoiceProfile {
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub languages: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gender: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub age: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tags: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub color: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retention_notice: Option<u32>,
}

impl VoiceProfile {
    pub fn is_empty(&self) -> bool {
        *self == VoiceProfile::default()
    }
}

#[derive(Debug, thiserror::Error)]
pub enum VoiceStoreError {
    #[error("the voices folder {0} cannot be used: {1}")]
    Folder(PathBuf, io::Error),
    #[error("storing the voice failed: {0}")]
    Write(io::Error),
    #[error("the voice {id} cannot be read: {reason}")]
    Read { id: String, reason: String },
    #[error("{0} custom voices are stored, the most this server keeps; delete one first")]
    Full(usize),
}

/// The voices folder and, in memory, the metadata of every voice in it.
pub struct VoiceStore {
    dir: PathBuf,
    max_voices: usize,
    voices: RwLock<BTreeMap<String, VoiceMeta>>,
    /// Held while a voice is written: two equal uploads at once store one voice.
    creating: Mutex<()>,
}

impl VoiceStore {
    /// Opens the folder (none yet: no voices), clears half-written or half-deleted voices and
    /// reads the metadata of the others.
    pub fn open(dir: &Path, max_voices: usize) -> Result<Self, VoiceStoreError> {
        let folder_err = |e| VoiceStoreError::Folder(dir.to_path_buf(), e);
        let mut voices = BTreeMap::new();
        let entries = match fs::read_dir(dir) {
            Ok(entries) => Some(entries),
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(e) => return Err(folder_err(e)),
        };
        for entry in entries.into_iter().flatten() {
            let entry = entry.map_err(folder_err)?;
            let name = entry.file_name().to_string_lossy().into_owned();
            let path = entry.path();
            if name.starts_with(INCOMING_PREFIX) || name.starts_with(DELETING_PREFIX) {
                fs::remove_dir_all(&path).map_err(folder_err)?;
                continue;
            }
            if !name.starts_with(ID_PREFIX) || !path.is_dir() {
                continue;
            }
            match read_meta(&path) {
                Ok(meta) if meta.id == name => {
                    voices.insert(name, meta);
                }
                Ok(meta) => tracing::warn!(
                    "skipping voice folder {}: its voice.json names {}",
                    path.display(),
                    meta.id
                ),
                Err(e) => tracing::warn!("skipping voice folder {}: {e}", path.display()),
            }
        }
        Ok(VoiceStore {
            dir: dir.to_path_buf(),
            max_voices,
            voices: RwLock::new(voices),
            creating: Mutex::new(()),
        })
    }

    /// Stores a new voice under a fresh id (the given meta's `id` and `created_at` are
    /// replaced) and returns its metadata; returns the stored voice instead when one has the
    /// same model, name, source, language and labels (see [`Self::find_same`]).
    pub fn create(
        &self,
        mut meta: VoiceMeta,
        tensors: &VoiceTensors,
    ) -> Result<VoiceMeta, VoiceStoreError> {
        let _creating = self.creating.lock().unwrap();
        if let Some(same) = self.find_same(&meta) {
            return Ok(same);
        }
        let count = self.voices.read().unwrap().len();
        if count >= self.max_voices {
            return Err(VoiceStoreError::Full(self.max_voices));
        }
        let hex = format!("{:032x}", rand::random::<u128>());
        meta.id = format!("{ID_PREFIX}{hex}");
        meta.created_at = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        fs::create_dir_all(&self.dir).map_err(|e| VoiceStoreError::Folder(self.dir.clone(), e))?;
        let incoming = self.dir.join(format!("{INCOMING_PREFIX}{hex}"));
        let written = write_voice(&incoming, &meta, tensors)
            .and_then(|()| fs::rename(&incoming, self.dir.join(&meta.id)))
            .and_then(|()| sync_dir(&self.dir));
        if let Err(e) = written {
            let _ = fs::remove_dir_all(&incoming);
            return Err(VoiceStoreError::Write(e));
        }
        self.voices
            .write()
            .unwrap()
            .insert(meta.id.clone(), meta.clone());
        Ok(meta)
    }

    /// Every stored voice, oldest first.
    pub fn list(&self) -> Vec<VoiceMeta> {
        let mut all: Vec<VoiceMeta> = self.voices.read().unwrap().values().cloned().collect();
        all.sort_by(|a, b| (a.created_at, &a.id).cmp(&(b.created_at, &b.id)));
        all
    }

    pub fn get(&self, id: &str) -> Option<VoiceMeta> {
        self.voices.read().unwrap().get(id).cloned()
    }

    /// A voice `model` already computed from the same clip and settings.
    pub fn find_source(&self, model: &str, source_sha256: &str) -> Option<VoiceMeta> {
        let voices = self.voices.read().unwrap();
        voices
            .values()
            .find(|v| v.model == model && v.source_sha256 == source_sha256)
            .cloned()
    }

    /// The voice named `name` that `model` computed from the same clip and settings, with the
    /// same labels: an upload made again gets it back.
    pub fn find_same(&self, upload: &VoiceMeta) -> Option<VoiceMeta> {
        let voices = self.voices.read().unwrap();
        voices
            .values()
            .find(|v| {
                v.model == upload.model
                    && v.source_sha256 == upload.source_sha256
                    && v.name == upload.name
                    && v.language == upload.language
                    && v.profile == upload.profile
            })
            .cloned()
    }

    /// The tensors of a stored voice, read from its folder.
    pub fn tensors(&self, id: &str) -> Result<VoiceTensors, VoiceStoreError> {
        let read_err = |reason: String| VoiceStoreError::Read {
            id: id.to_string(),
            reason,
        };
        if self.get(id).is_none() {
            return Err(read_err("no such voice".into()));
        }
        let bytes =
            fs::read(self.dir.join(id).join(TENSORS_FILE)).map_err(|e| read_err(e.to_string()))?;
        decode_tensors(&bytes).map_err(read_err)
    }

    /// Changes a stored voice's metadata (its name and labels: the tensors stay as they
    /// are); returns the new metadata, `None` when there is no voice with that id.
    pub fn update(
        &self,
        id: &str,
        change: impl FnOnce(&mut VoiceMeta),
    ) -> Result<Option<VoiceMeta>, VoiceStoreError> {
        let mut voices = self.voices.write().unwrap();
        let Some(current) = voices.get(id) else {
            return Ok(None);
        };
        let mut meta = current.clone();
        change(&mut meta);
        meta.id = id.to_string();
        let folder = self.dir.join(id);
        let json =
            serde_json::to_vec_pretty(&meta).map_err(|e| VoiceStoreError::Write(e.into()))?;
        // Written beside, then renamed over: a crash leaves the old file or the new one.
        let incoming = folder.join(format!("{INCOMING_PREFIX}{META_FILE}"));
        write_synced(&incoming, &json)
            .and_then(|()| fs::rename(&incoming, folder.join(META_FILE)))
            .and_then(|()| sync_dir(&folder))
            .map_err(|e| {
                let _ = fs::remove_file(&incoming);
                VoiceStoreError::Write(e)
            })?;
        voices.insert(id.to_string(), meta.clone());
        Ok(Some(meta))
    }

    /// Removes a voice; `false` when there was none with that id.
    pub fn delete(&self, id: &str) -> Result<bool, VoiceStoreError> {
        let mut voices = self.voices.write().unwrap();
        if !voices.contains_key(id) {
            return Ok(false);
        }
        let hex = &id[ID_PREFIX.len()..];
        let deleting = self.dir.join(format!("{DELETING_PREFIX}{hex}"));
        fs::rename(self.dir.join(id), &deleting).map_err(VoiceStoreError::Write)?;
        voices.remove(id);
        drop(voices);
        // Gone for the API already; a failure here leaves a folder the next open clears.
        if let Err(e) = fs::remove_dir_all(&deleting) {
            tracing::warn!("removing {}: {e}", deleting.display());
        }
        Ok(true)
    }
}

fn read_meta(folder: &Path) -> Result<VoiceMeta, String> {
    let text = fs::read_to_string(folder.join(META_FILE)).map_err(|e| e.to_string())?;
    serde_json::from_str(&text).map_err(|e| format!("{META_FILE}: {e}"))
}

fn write_voice(folder: &Path, meta: &VoiceMeta, tensors: &VoiceTensors) -> io::Result<()> {
    fs::create_dir(folder)?;
    let json = serde_json::to_vec_pretty(meta).map_err(io::Error::other)?;
    write_synced(&folder.join(META_FILE), &json)?;
    write_synced(&folder.join(TENSORS_FILE), &encode_tensors(tensors)?)?;
    sync_dir(folder)
}

fn write_synced(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let mut file = fs::File::create(path)?;
    file.write_all(bytes)?;
    file.sync_all()
}

/// Makes renames inside `dir` durable (a no-op where directories cannot be opened).
fn sync_dir(dir: &Path) -> io::Result<()> {
    match fs::File::open(dir) {
        Ok(handle) => handle.sync_all().or(Ok(())),
        Err(_) => Ok(()),
    }
}

fn encode_tensors(tensors: &VoiceTensors) -> io::Result<Vec<u8>> {
    use safetensors::tensor::TensorView;
    use safetensors::Dtype;
    let bytes: Vec<(&String, Dtype, &[usize], Vec<u8>)> = tensors
        .0
        .iter()
        .map(|(name, t)| {
            let (dtype, raw) = match &t.data {
                TensorData::F32(v) => {
                    (Dtype::F32, v.iter().flat_map(|x| x.to_le_bytes()).collect())
                }
                TensorData::I64(v) => {
                    (Dtype::I64, v.iter().flat_map(|x| x.to_le_bytes()).collect())
                }
            };
            (name, dtype, t.shape.as_slice(), raw)
        })
        .collect();
    let views = bytes
        .iter()
        .map(|(name, dtype, shape, raw)| {
            TensorView::new(*dtype, shape.to_vec(), raw).map(|view| (name.as_str(), view))
        })
        .collect::<Result<Vec<_>, _>>()
        .map_err(io::Error::other)?;
    safetensors::serialize(views, None).map_err(io::Error::other)
}

fn decode_tensors(bytes: &[u8]) -> Result<VoiceTensors, String> {
    let file = safetensors::SafeTensors::deserialize(bytes).map_err(|e| e.to_string())?;
    let mut out = BTreeMap::new();
    for (name, view) in file.tensors() {
        let raw = view.data();
        let data = match view.dtype() {
            safetensors::Dtype::F32 => TensorData::F32(
                raw.chunks_exact(4)
                    .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
                    .collect(),
            ),
            safetensors::Dtype::I64 => TensorData::I64(
                raw.chunks_exact(8)
                    .map(|b| i64::from_le_bytes(b.try_into().unwrap()))
                    .collect(),
            ),
            other => return Err(format!("{name}: unexpected dtype {other:?}")),
        };
        let shape = view.shape().to_vec();
        out.insert(name, VoiceTensor { shape, data });
    }
    Ok(VoiceTensors(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(name: &str) -> VoiceMeta {
        VoiceMeta {
            id: String::new(),
            name: name.into(),
            created_at: 0,
            model: "qwen3".into(),
            family: "qwen3-tts".into(),
            transcript: Some("Hello.".into()),
            language: None,
            audio_seconds: 3.5,
            source_sha256: format!("sha-{name}"),
            profile: VoiceProfile::default(),
        }
    }

    fn tensors() -> VoiceTensors {
        let mut map = BTreeMap::new();
        map.insert(
            "x_vector".to_string(),
            VoiceTensor {
                shape: vec![1, 3],
                data: TensorData::F32(vec![0.5, -1.25, 3.0]),
            },
        );
        map.insert(
            "ref_codes".to_string(),
            VoiceTensor {
                shape: vec![2, 2],
                data: TensorData::I64(vec![1, 2047, 3, 4]),
            },
        );
        VoiceTensors(map)
    }

    #[test]
    fn a_voice_survives_a_restart_with_its_tensors() {
        let dir = tempfile::tempdir().unwrap();
        let store = VoiceStore::open(dir.path(), 10).unwrap();
        let made = store.create(meta("alice"), &tensors()).unwrap();
        assert!(made.id.starts_with("voice_") && made.id.len() == 6 + 32);
        assert!(made.created_at > 0);

        let reopened = VoiceStore::open(dir.path(), 10).unwrap();
        assert_eq!(reopened.list(), vec![made.clone()]);
        assert_eq!(reopened.tensors(&made.id).unwrap(), tensors());
        assert_eq!(
            reopened.find_source("qwen3", "sha-alice").map(|v| v.id),
            Some(made.id.clone())
        );
        assert_eq!(reopened.find_source("other-model", "sha-alice"), None);
    }

    #[test]
    fn deleted_voices_are_gone_now_and_after_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let store = VoiceStore::open(dir.path(), 10).unwrap();
        let a = store.create(meta("a"), &tensors()).unwrap();
        let b = store.create(meta("b"), &tensors()).unwrap();
        assert!(store.delete(&a.id).unwrap());
        assert!(!store.delete(&a.id).unwrap());
        assert!(store.tensors(&a.id).is_err());
        assert_eq!(store.list(), vec![b.clone()]);
        assert_eq!(VoiceStore::open(dir.path(), 10).unwrap().list(), vec![b]);
    }

    #[test]
    fn crash_leftovers_are_cleared_and_broken_folders_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let store = VoiceStore::open(dir.path(), 10).unwrap();
        let kept = store.create(meta("kept"), &tensors()).unwrap();
        for leftover in [".incoming-00ff", ".deleting-00aa"] {
            fs::create_dir(dir.path().join(leftover)).unwrap();
            fs::write(dir.path().join(leftover).join(META_FILE), b"{").unwrap();
        }
        let broken = dir.path().join("voice_broken");
        fs::create_dir(&broken).unwrap();
        fs::write(broken.join(META_FILE), b"not json").unwrap();

        let reopened = VoiceStore::open(dir.path(), 10).unwrap();
        assert_eq!(reopened.list(), vec![kept]);
        assert!(!dir.path().join(".incoming-00ff").exists());
        assert!(!dir.path().join(".deleting-00aa").exists());
        assert!(
            broken.exists(),
            "an unreadable voice is the operator's to remove"
        );
    }

    #[test]
    fn a_failed_write_leaves_nothing_behind() {
        let dir = tempfile::tempdir().unwrap();
        let store = VoiceStore::open(dir.path(), 10).unwrap();
        // A shape that does not match its data makes the tensors unserializable.
        let mut bad = tensors();
        bad.0.get_mut("x_vector").unwrap().shape = vec![7];
        assert!(matches!(
            store.create(meta("bad"), &bad),
            Err(VoiceStoreError::Write(_))
        ));
        assert!(store.list().is_empty());
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    #[test]
    fn the_folder_is_made_by_the_first_voice() {
        let dir = tempfile::tempdir().unwrap();
        let folder = dir.path().join("voices");
        let store = VoiceStore::open(&folder, 10).unwrap();
        assert!(store.list().is_empty() && !folder.exists());
        let made = store.create(meta("first"), &tensors()).unwrap();
        assert!(folder.join(&made.id).join(TENSORS_FILE).exists());
        // A file where the folder should be is an error that names it.
        let file = dir.path().join("file");
        fs::write(&file, b"").unwrap();
        let e = VoiceStore::open(&file, 10).err().unwrap();
        assert!(e.to_string().contains("file"), "{e}");
    }

    #[test]
    fn the_same_upload_under_the_same_name_is_stored_once() {
        let dir = tempfile::tempdir().unwrap();
        let store = VoiceStore::open(dir.path(), 10).unwrap();
        let first = store.create(meta("alice"), &tensors()).unwrap();
        let again = store.create(meta("alice"), &tensors()).unwrap();
        assert_eq!(again, first);
        assert_eq!(
            store.find_same(&meta("alice")).map(|v| v.id),
            Some(first.id.clone())
        );
        // Another name is another voice, even from the same clip; so is another language.
        let renamed = VoiceMeta {
            name: "bob".into(),
            ..meta("alice")
        };
        let bob = store.create(renamed, &tensors()).unwrap();
        assert_ne!(bob.id, first.id);
        let french = VoiceMeta {
            language: Some("fr".into()),
            ..meta("alice")
        };
        let french = store.create(french, &tensors()).unwrap();
        assert_ne!(french.id, first.id);
        assert_eq!(french.language.as_deref(), Some("fr"));
        assert_eq!(store.list().len(), 3);
        let carol = VoiceMeta {
            name: "carol".into(),
            ..meta("alice")
        };
        assert_eq!(store.find_same(&carol), None);
    }

    #[test]
    fn an_update_changes_the_metadata_now_and_after_a_restart() {
        let dir = tempfile::tempdir().unwrap();
        let store = VoiceStore::open(dir.path(), 10).unwrap();
        let made = store.create(meta("alice"), &tensors()).unwrap();
        let updated = store
            .update(&made.id, |v| {
                v.name = "alicia".into();
                v.id = "voice_other".into();
                v.profile.tags = Some(vec!["calm".into()]);
            })
            .unwrap()
            .unwrap();
        assert_eq!(
            (updated.id.as_str(), updated.name.as_str()),
            (made.id.as_str(), "alicia")
        );
        assert_eq!(updated.profile.tags, Some(vec!["calm".to_string()]));
        assert_eq!(store.get(&made.id), Some(updated.clone()));
        let reopened = VoiceStore::open(dir.path(), 10).unwrap();
        assert_eq!(reopened.list(), vec![updated]);
        assert_eq!(reopened.tensors(&made.id).unwrap(), tensors());
        assert_eq!(store.update("voice_none", |_| {}).unwrap(), None);
    }

    #[test]
    fn the_store_refuses_voices_beyond_its_limit() {
        let dir = tempfile::tempdir().unwrap();
        let store = VoiceStore::open(dir.path(), 1).unwrap();
        store.create(meta("one"), &tensors()).unwrap();
        assert!(matches!(
            store.create(meta("two"), &tensors()),
            Err(VoiceStoreError::Full(1))
        ));
    }
}
