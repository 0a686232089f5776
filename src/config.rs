//! Settings of `voxtral-tts serve`: `config/default.toml` (built in), then `--config FILE`,
//! then `VOXTRAL_<KEY>` environment variables, then flags; later sources win.

use crate::device::DeviceChoice;
use crate::engine::CudaGraphs;
use crate::models::registry;
use crate::tensor::quantized::{parse_quantize, QuantFormat};
use crate::tensor::DType;
use figment::providers::{Env, Format, Serialized, Toml};
use figment::Figment;
use serde::de::{self, Deserializer, Visitor};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::time::Duration;

/// The reference settings file, with every key and its documentation.
pub const DEFAULT_TOML: &str = include_str!("../config/default.toml");

/// Environment variables `VOXTRAL_<KEY>` set the key `<key>`.
pub const ENV_PREFIX: &str = "VOXTRAL_";

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerConfig {
    /// Model folders, one inference worker each; at least one, from any source.
    #[serde(default, deserialize_with = "path_list")]
    pub model: Vec<PathBuf>,
    /// The ids the models are served under, in the order of `model`; for a model without
    /// one, see [`ServerConfig::models`].
    #[serde(default, deserialize_with = "string_list")]
    pub model_id: Vec<String>,
    pub host: String,
    pub port: u16,
    #[serde(deserialize_with = "parse_with_from_str")]
    pub device: DeviceChoice,
    pub dtype: ComputeDType,
    /// How each model's large linear weights are stored: one format for every model, or one
    /// per model in the order of `model`; `None` keeps them as the checkpoint has them.
    #[serde(default, deserialize_with = "quantize_list")]
    pub quantize: Vec<Option<QuantFormat>>,
    /// Decode steps as captured CUDA graphs (`auto`) or eager (`off`).
    #[serde(deserialize_with = "parse_with_from_str")]
    pub cuda_graphs: CudaGraphs,
    /// libtorch CPU threads; 0 = its default.
    pub threads: usize,
    pub queue_capacity: usize,
    /// Most requests generating together: the KV pool's slots.
    pub max_batch_size: usize,
    /// The KV pool's memory in MiB, allocated at start and split evenly between the slots.
    pub kv_cache_budget_mib: usize,
    /// Prompt tokens a new request prefills per step, between the running requests' frames.
    pub prefill_chunk_tokens: usize,
    pub max_input_chars: usize,
    /// Frames (80 ms each) before the first audio chunk of a response.
    pub first_chunk_frames: usize,
    /// Frames per later audio chunk.
    pub chunk_frames: usize,
    /// Normalize the input text (markup, URLs, invisible characters, line breaks).
    pub normalize_text: bool,
    /// Longest text segment synthesized as one generation; longer input is split.
    pub segment_chars: usize,
    pub max_body_bytes: usize,
    /// Largest audio upload to /v1/audio/transcriptions.
    pub max_transcription_bytes: usize,
    /// Longest audio transcribed; speech-to-text KV caches are sized for it.
    pub max_transcription_seconds: usize,
    /// Where custom voices are kept (relative: to the working directory).
    pub voices_dir: PathBuf,
    /// Most custom voices kept, all models together.
    pub max_voices: usize,
    /// Longest reference clip of a custom voice.
    pub max_voice_clip_seconds: usize,
    /// Largest `POST /v1/audio/voices` body.
    pub max_voice_upload_bytes: usize,
    /// Live sessions (`/v1/realtime?intent=transcription`) open at once per speech-to-text
    /// model; one more is refused. Each takes a KV-cache slot of `max_transcription_seconds`.
    pub max_realtime_sessions: usize,
    /// Text-in speech sessions (`/v1/audio/speech/realtime`, `/v1/audio/speech/stream`) open
    /// at once; one more is refused (close code 1013).
    pub max_speech_sessions: usize,
    pub request_timeout_secs: u64,
    pub shutdown_grace_secs: u64,
    pub api_keys: ApiKeys,
    /// With `api_keys` set: the voice and model lists stay open (clients such as Open WebUI
    /// fetch them without a key).
    pub public_discovery: bool,
    #[serde(deserialize_with = "string_list")]
    pub cors_origins: Vec<String>,
    pub log_format: LogFormat,
    /// TCP port of the Wyoming protocol listener (Home Assistant); `None` = off.
    pub wyoming_port: Option<u16>,
    /// Tests only, and only in debug builds (a release build rejects the setting): the
    /// worker panics on a request whose input contains this.
    #[cfg(debug_assertions)]
    pub test_panic_on_input: Option<String>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ComputeDType {
    Bf16,
    F32,
}

impl From<ComputeDType> for DType {
    fn from(d: ComputeDType) -> DType {
        match d {
            ComputeDType::Bf16 => DType::BF16,
            ComputeDType::F32 => DType::F32,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LogFormat {
    Text,
    Json,
}

/// Bearer keys accepted on the API. `Debug` shows only how many there are, so a logged
/// config never leaks one.
#[derive(Clone, Default, Deserialize)]
#[serde(transparent)]
pub struct ApiKeys(#[serde(deserialize_with = "string_list")] Vec<String>);

impl ApiKeys {
    pub fn new(keys: Vec<String>) -> Self {
        ApiKeys(keys)
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn keys(&self) -> &[String] {
        &self.0
    }
}

impl fmt::Debug for ApiKeys {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "ApiKeys({} configured)", self.0.len())
    }
}

/// Settings given as flags: only those present override the other sources.
#[derive(Debug, Default, Serialize)]
pub struct FlagOverrides {
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub model: Vec<PathBuf>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub port: Option<u16>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub quantize: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{0}")]
    Invalid(#[from] Box<figment::Error>),
    #[error("no model folder: pass --model DIR or set {ENV_PREFIX}MODEL")]
    NoModel,
    #[error("model_id lists {ids} ids for {models} model folders")]
    TooManyIds { ids: usize, models: usize },
    #[error("two models are served as {0:?}: give each its own model_id")]
    DuplicateId(String),
    #[error("quantize lists {formats} formats for {models} model folders: give one for all, or one per model")]
    QuantizeCount { formats: usize, models: usize },
    #[error("{key} must be at least 1")]
    Zero { key: &'static str },
}

impl ServerConfig {
    /// Merges the built-in defaults, `file`, the process environment and `flags`.
    pub fn load(file: Option<&Path>, flags: &FlagOverrides) -> Result<Self, ConfigError> {
        Self::from_figment(Self::figment(file, flags))
    }

    pub fn figment(file: Option<&Path>, flags: &FlagOverrides) -> Figment {
        let mut figment = Figment::from(Toml::string(DEFAULT_TOML));
        if let Some(path) = file {
            figment = figment.merge(Toml::file_exact(path));
        }
        // Only our keys: other VOXTRAL_* variables (VOXTRAL_DEPS of scripts/setup.sh) are not
        // settings.
        let keys = field_names::<ServerConfig>();
        figment
            .merge(Env::prefixed(ENV_PREFIX).filter(move |k| keys.iter().any(|field| k == *field)))
            .merge(Serialized::defaults(flags))
    }

    pub fn from_figment(figment: Figment) -> Result<Self, ConfigError> {
        let config: ServerConfig = figment.extract().map_err(Box::new)?;
        if config.model.is_empty() {
            return Err(ConfigError::NoModel);
        }
        if config.model_id.len() > config.model.len() {
            return Err(ConfigError::TooManyIds {
                ids: config.model_id.len(),
                models: config.model.len(),
            });
        }
        if config.quantize.len() > 1 && config.quantize.len() != config.model.len() {
            return Err(ConfigError::QuantizeCount {
                formats: config.quantize.len(),
                models: config.model.len(),
            });
        }
        let ids: Vec<String> = config.models().into_iter().map(|(id, _)| id).collect();
        if let Some(dup) = ids
            .iter()
            .enumerate()
            .find(|(i, id)| ids[..*i].contains(id))
        {
            return Err(ConfigError::DuplicateId(dup.1.clone()));
        }
        for (key, value) in [
            ("queue_capacity", config.queue_capacity),
            ("max_input_chars", config.max_input_chars),
            ("max_batch_size", config.max_batch_size),
            ("kv_cache_budget_mib", config.kv_cache_budget_mib),
            ("prefill_chunk_tokens", config.prefill_chunk_tokens),
            ("first_chunk_frames", config.first_chunk_frames),
            ("chunk_frames", config.chunk_frames),
            ("segment_chars", config.segment_chars),
            ("max_body_bytes", config.max_body_bytes),
            ("max_transcription_bytes", config.max_transcription_bytes),
            (
                "max_transcription_seconds",
                config.max_transcription_seconds,
            ),
            ("max_voices", config.max_voices),
            ("max_voice_clip_seconds", config.max_voice_clip_seconds),
            ("max_voice_upload_bytes", config.max_voice_upload_bytes),
        ] {
            if value == 0 {
                return Err(ConfigError::Zero { key });
            }
        }
        Ok(config)
    }

    /// Each model's id and folder, in order (the first is the default model). A model that
    /// `model_id` does not name is served under its folder's name, the first one under its
    /// family's published name where the family has one (`mistralai/Voxtral-4B-TTS-2603`).
    pub fn models(&self) -> Vec<(String, PathBuf)> {
        self.model
            .iter()
            .enumerate()
            .map(|(i, dir)| {
                let published = || {
                    let family = registry::detect(dir).ok()?;
                    (i == 0).then_some(family.published_name)?
                };
                let id = self
                    .model_id
                    .get(i)
                    .cloned()
                    .or_else(|| published().map(String::from))
                    .unwrap_or_else(|| {
                        dir.file_name().map_or_else(
                            || dir.display().to_string(),
                            |name| name.to_string_lossy().into_owned(),
                        )
                    });
                (id, dir.clone())
            })
            .collect()
    }

    /// How the `index`th model's large linear weights are stored.
    pub fn quantize_of(&self, index: usize) -> Option<QuantFormat> {
        match self.quantize.as_slice() {
            [all] => *all,
            per_model => per_model.get(index).copied().flatten(),
        }
    }

    pub fn request_timeout(&self) -> Duration {
        Duration::from_secs(self.request_timeout_secs)
    }

    pub fn shutdown_grace(&self) -> Duration {
        Duration::from_secs(self.shutdown_grace_secs)
    }
}

fn parse_with_from_str<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: FromStr,
    T::Err: fmt::Display,
{
    String::deserialize(d)?.parse().map_err(de::Error::custom)
}

/// A list of strings given as a TOML array or as one comma-separated string (environment
/// variables). An environment value that looks like a number or a boolean arrives typed, so
/// those are taken as text too.
fn string_list<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    struct ListVisitor;

    impl<'de> Visitor<'de> for ListVisitor {
        type Value = Vec<String>;

        fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str("a list of strings or a comma-separated string")
        }

        fn visit_str<E: de::Error>(self, s: &str) -> Result<Self::Value, E> {
            Ok(s.split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(String::from)
                .collect())
        }

        fn visit_i64<E: de::Error>(self, v: i64) -> Result<Self::Value, E> {
            Ok(vec![v.to_string()])
        }

        fn visit_u64<E: de::Error>(self, v: u64) -> Result<Self::Value, E> {
            Ok(vec![v.to_string()])
        }

        fn visit_f64<E: de::Error>(self, v: f64) -> Result<Self::Value, E> {
            Ok(vec![v.to_string()])
        }

        fn visit_bool<E: de::Error>(self, v: bool) -> Result<Self::Value, E> {
            Ok(vec![v.to_string()])
        }

        fn visit_seq<A: de::SeqAccess<'de>>(self, mut seq: A) -> Result<Self::Value, A::Error> {
            let mut out = Vec::new();
            while let Some(item) = seq.next_element::<String>()? {
                out.push(item);
            }
            Ok(out)
        }
    }

    d.deserialize_any(ListVisitor)
}

/// Weight formats (`none`, `q8`, `q4`) as [`string_list`] reads them.
fn quantize_list<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Option<QuantFormat>>, D::Error> {
    string_list(d)?
        .iter()
        .map(|s| parse_quantize(s).map_err(de::Error::custom))
        .collect()
}

/// Paths as [`string_list`] reads them: a TOML array, or one comma-separated string.
fn path_list<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<PathBuf>, D::Error> {
    Ok(string_list(d)?.into_iter().map(PathBuf::from).collect())
}

/// The field names serde's derive gives a struct, read by asking it to deserialize from a
/// deserializer that records them: the one list of settings, with no copy to keep in sync.
fn field_names<T: for<'de> Deserialize<'de>>() -> &'static [&'static str] {
    struct FieldRecorder<'a>(&'a mut &'static [&'static str]);

    impl<'de> Deserializer<'de> for FieldRecorder<'_> {
        type Error = de::value::Error;

        fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Self::Error> {
            Err(de::Error::custom("not a struct"))
        }

        fn deserialize_struct<V: Visitor<'de>>(
            self,
            _name: &'static str,
            fields: &'static [&'static str],
            _visitor: V,
        ) -> Result<V::Value, Self::Error> {
            *self.0 = fields;
            Err(de::Error::custom("fields recorded"))
        }

        serde::forward_to_deserialize_any! {
            bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes
            byte_buf option unit unit_struct newtype_struct seq tuple tuple_struct map enum
            identifier ignored_any
        }
    }

    let mut fields: &'static [&'static str] = &[];
    let _ = T::deserialize(FieldRecorder(&mut fields));
    fields
}

#[cfg(test)]
// figment's `Jail` fixes the closures' error type (figment::Error, which is large).
#[allow(clippy::result_large_err)]
mod tests {
    use super::*;
    use figment::Jail;

    fn load_in(jail: &Jail, file: Option<&str>, flags: &FlagOverrides) -> ServerConfig {
        let path = file.map(|text| {
            jail.create_file("server.toml", text).unwrap();
            jail.directory().join("server.toml")
        });
        ServerConfig::load(path.as_deref(), flags).unwrap()
    }

    #[test]
    fn defaults_then_file_then_env_then_flags() {
        Jail::expect_with(|jail| {
            let flags = FlagOverrides {
                model: vec!["/flag/model".into()],
                ..Default::default()
            };
            let c = load_in(jail, None, &flags);
            assert_eq!((c.host.as_str(), c.port), ("127.0.0.1", 8000));
            assert_eq!(c.max_input_chars, 4096);
            assert_eq!(c.device, DeviceChoice::Auto);
            assert_eq!(c.cuda_graphs, CudaGraphs::Off);
            assert!(c.api_keys.is_empty() && c.cors_origins.is_empty());

            let file = "port = 9000\nqueue_capacity = 3\ndevice = \"cpu\"\nmodel = \"/file\"";
            let c = load_in(jail, Some(file), &FlagOverrides::default());
            assert_eq!((c.port, c.queue_capacity), (9000, 3));
            assert_eq!(c.model, [Path::new("/file")]);

            jail.set_env("VOXTRAL_PORT", "9100");
            jail.set_env("VOXTRAL_DEVICE", "cuda:1");
            jail.set_env("VOXTRAL_LOG_FORMAT", "json");
            jail.set_env("VOXTRAL_CUDA_GRAPHS", "auto");
            let c = load_in(jail, Some(file), &FlagOverrides::default());
            assert_eq!((c.port, c.device), (9100, DeviceChoice::Cuda(1)));
            assert_eq!(c.cuda_graphs, CudaGraphs::Auto);
            assert_eq!(c.log_format, LogFormat::Json);

            let flags = FlagOverrides {
                port: Some(9200),
                host: Some("0.0.0.0".into()),
                ..flags
            };
            let c = load_in(jail, Some(file), &flags);
            assert_eq!((c.host.as_str(), c.port), ("0.0.0.0", 9200));
            assert_eq!(c.model, [Path::new("/flag/model")]);
            Ok(())
        });
    }

    #[test]
    fn several_models_get_their_ids_in_order() {
        Jail::expect_with(|jail| {
            let file = "model = [\"/m/voxtral\", \"/m/second\"]\nmodel_id = \"main\"";
            let c = load_in(jail, Some(file), &FlagOverrides::default());
            let ids: Vec<String> = c.models().into_iter().map(|(id, _)| id).collect();
            assert_eq!(ids, ["main", "second"]);
            jail.set_env("VOXTRAL_MODEL", "/a/x,/b/x");
            jail.set_env("VOXTRAL_MODEL_ID", "");
            let err = ServerConfig::load(None, &FlagOverrides::default()).unwrap_err();
            assert!(err.to_string().contains("\"x\""), "{err}");
            jail.set_env("VOXTRAL_MODEL_ID", "one,two,three");
            let err = ServerConfig::load(None, &FlagOverrides::default()).unwrap_err();
            assert!(matches!(err, ConfigError::TooManyIds { ids: 3, models: 2 }));
            Ok(())
        });
    }

    /// Without `model_id`, the first model takes its family's published name, so that
    /// `/v1/models` does not list an XTTS-v2 folder as Voxtral; later ones their folders'.
    #[test]
    fn unnamed_models_take_their_published_name_first_then_their_folder_name() {
        Jail::expect_with(|jail| {
            let voxtral = r#"{"multimodal": {"audio_model_args": {}}}"#;
            let folder = |name: &str, file: &str, text: &str| {
                let dir = jail.directory().join(name);
                std::fs::create_dir(&dir).unwrap();
                std::fs::write(dir.join(file), text).unwrap();
                dir.display().to_string()
            };
            let ids_of = |dirs: &[&String]| -> Vec<String> {
                let flags = FlagOverrides {
                    model: dirs.iter().map(|d| PathBuf::from(d.as_str())).collect(),
                    ..Default::default()
                };
                let c = ServerConfig::load(None, &flags).unwrap();
                c.models().into_iter().map(|(id, _)| id).collect()
            };
            let tts = folder("tts", "params.json", voxtral);
            let other_tts = folder("other-tts", "params.json", voxtral);
            let xtts = folder("xtts", "config.json", r#"{"model": "xtts"}"#);
            let qwen = folder("qwen", "config.json", r#"{"model_type": "qwen3_tts"}"#);
            assert_eq!(
                ids_of(&[&tts, &other_tts, &xtts]),
                ["mistralai/Voxtral-4B-TTS-2603", "other-tts", "xtts"]
            );
            assert_eq!(ids_of(&[&xtts, &tts]), ["coqui/XTTS-v2", "tts"]);
            assert_eq!(ids_of(&[&qwen]), ["qwen"]);
            jail.set_env("VOXTRAL_MODEL_ID", "mine");
            assert_eq!(ids_of(&[&xtts]), ["mine"]);
            Ok(())
        });
    }

    #[test]
    fn lists_from_env_are_comma_separated_and_keys_stay_text() {
        Jail::expect_with(|jail| {
            jail.set_env("VOXTRAL_MODEL", "/m");
            jail.set_env("VOXTRAL_API_KEYS", "alpha, beta");
            jail.set_env(
                "VOXTRAL_CORS_ORIGINS",
                "https://a.example,https://b.example",
            );
            let c = load_in(jail, None, &FlagOverrides::default());
            assert_eq!(c.api_keys.keys(), ["alpha", "beta"]);
            assert_eq!(c.cors_origins, ["https://a.example", "https://b.example"]);
            assert_eq!(format!("{:?}", c.api_keys), "ApiKeys(2 configured)");

            jail.set_env("VOXTRAL_API_KEYS", "12345");
            let c = load_in(jail, None, &FlagOverrides::default());
            assert_eq!(c.api_keys.keys(), ["12345"]);
            Ok(())
        });
    }

    #[test]
    fn other_voxtral_variables_are_not_settings_but_unknown_file_keys_are_errors() {
        Jail::expect_with(|jail| {
            jail.set_env("VOXTRAL_MODEL", "/m");
            jail.set_env("VOXTRAL_DEPS", "/opt/voxtral");
            jail.set_env("VOXTRAL_CUDA", "1");
            load_in(jail, None, &FlagOverrides::default());

            jail.create_file("typo.toml", "queue_capacty = 3").unwrap();
            let err = ServerConfig::load(
                Some(&jail.directory().join("typo.toml")),
                &FlagOverrides::default(),
            )
            .unwrap_err()
            .to_string();
            assert!(err.contains("queue_capacty"), "{err}");
            Ok(())
        });
    }

    #[test]
    fn bad_values_are_errors() {
        Jail::expect_with(|jail| {
            jail.set_env("VOXTRAL_MODEL", "/m");
            for (var, value, needle) in [
                ("VOXTRAL_DEVICE", "gpu", "unknown device"),
                ("VOXTRAL_CUDA_GRAPHS", "on", "expected auto or off"),
                ("VOXTRAL_LOG_FORMAT", "xml", "xml"),
                ("VOXTRAL_QUEUE_CAPACITY", "0", "queue_capacity"),
                ("VOXTRAL_PORT", "http", "PORT"),
            ] {
                jail.set_env(var, value);
                let err = ServerConfig::load(None, &FlagOverrides::default())
                    .unwrap_err()
                    .to_string();
                assert!(err.contains(needle), "{var}={value}: {err}");
                std::env::remove_var(var);
            }
            std::env::remove_var("VOXTRAL_MODEL");
            let err = ServerConfig::load(None, &FlagOverrides::default()).unwrap_err();
            assert!(matches!(err, ConfigError::NoModel));
            Ok(())
        });
    }

    #[test]
    fn every_field_is_documented_in_the_default_file() {
        for key in field_names::<ServerConfig>() {
            assert!(
                DEFAULT_TOML.contains(&format!("\n{key} ="))
                    || DEFAULT_TOML.contains(&format!("# {key} =")),
                "config/default.toml does not document `{key}`"
            );
        }
        assert!(field_names::<ServerConfig>().contains(&"queue_capacity"));
    }
}
