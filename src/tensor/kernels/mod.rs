//! The CPU's own kernels for a decode step's operations, and `cpu`: which of them, or which of
//! libtorch's operations, a libtorch CPU tensor runs; `cuda_int4`: `q4` weights on CUDA.

pub(super) mod cpu;
pub mod cpu_gemv;
mod cpu_small;
pub(super) mod cuda_int4;
pub mod quantized;
