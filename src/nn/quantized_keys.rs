//! Which checkpoint keys a model's loaders quantized: `voxtral-tts quantize` loads a model
//! with its weights quantized and stores exactly those keys in blocks, so that the stored
//! folder and one quantized at load give the same tensors, with no list of keys kept apart
//! from the loaders.

use crate::tensor::quantized::QuantFormat;
use std::cell::RefCell;

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
