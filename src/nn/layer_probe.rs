//! Each transformer layer's output, recorded while a caller asks for them: how far a model
//! with quantized weights drifts from the same model unquantized, layer by layer, on the same
//! input (`tests/it/quantization.rs`, docs/quantization.md). Outside [`recording`] a layer
//! pays one thread-local read.

use crate::tensor::Tensor;
use std::cell::RefCell;

thread_local! {
    static RECORDING: RefCell<Option<Vec<LayerOutput>>> = const { RefCell::new(None) };
}

/// One layer's output, in the order the layers ran.
#[derive(Clone, Debug)]
pub struct LayerOutput {
    /// The layer's index in its stack.
    pub layer: usize,
    pub values: Vec<f32>,
}

/// Notes layer `layer`'s `output` (a no-op outside [`recording`]).
pub fn record<T: Tensor>(layer: usize, output: &T) {
    RECORDING.with(|outputs| {
        if let Some(outputs) = outputs.borrow_mut().as_mut() {
            outputs.push(LayerOutput {
                layer,
                values: output.to_vec_f32(),
            });
        }
    });
}

/// Runs `run` (on this thread) and returns what it returned with every layer output recorded
/// meanwhile, in order.
pub fn recording<R>(run: impl FnOnce() -> R) -> (R, Vec<LayerOutput>) {
    RECORDING.with(|outputs| *outputs.borrow_mut() = Some(Vec::new()));
    let result = run();
    let outputs = RECORDING.with(|outputs| outputs.borrow_mut().take().unwrap_or_default());
    (result, outputs)
}
