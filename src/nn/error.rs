//! Errors while loading a model folder. Each names the file and, where there is one, the key.

use std::path::Path;

#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("{file}: {source}")]
    Io {
        file: String,
        source: std::io::Error,
    },
    #[error("{file}: {key}: {msg}")]
    Invalid {
        file: String,
        key: String,
        msg: String,
    },
}

impl LoadError {
    pub fn io(path: &Path, source: std::io::Error) -> Self {
        LoadError::Io {
            file: path.display().to_string(),
            source,
        }
    }

    pub fn invalid(
        file: impl Into<String>,
        key: impl Into<String>,
        msg: impl Into<String>,
    ) -> Self {
        LoadError::Invalid {
            file: file.into(),
            key: key.into(),
            msg: msg.into(),
        }
    }
}
