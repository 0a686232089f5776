//! The CPU's own kernels for a decode step's operations, and `cpu`: which of them, or which of
//! libtorch's operations, a libtorch CPU tensor runs.

pub(super) mod cpu;
pub mod cpu_gemv;
mod cpu_small;
pub mod quantized;
