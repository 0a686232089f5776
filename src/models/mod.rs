//! One folder per model family. Each loads its published folder and implements the engine
//! interface (`crate::engine`).

pub mod voxtral_tts;
