//! Which kernel runs an operation of a libtorch CPU tensor: the CPU kernels beside this module
//! (`cpu_gemv`, `cpu_small`, `quantized`) where they outrun libtorch's for the shapes at hand
//! (a decode step's few rows; a CPU without AVX512-BF16), libtorch's operations elsewhere.
//! Each choice keeps the bits the tests pin: a request's result does not depend on its batch.

mod attention;
mod conv;
mod linear;
mod packed_linear;
mod quantized_linear;
mod rms_norm;
mod vector_math;

pub(in crate::tensor) use attention::attention;
pub(in crate::tensor) use conv::{conv1d, conv_transpose1d, prepare as prepare_conv_weight};
pub(in crate::tensor) use linear::{linear, multiply_adds};
pub(in crate::tensor) use packed_linear::{fused_linear, linear_rows, pack_for_few_rows};
pub(in crate::tensor) use quantized_linear::{from_blocks, quantize_weight, quantized_embedding};
pub(in crate::tensor) use rms_norm::rms_norm;
pub(in crate::tensor) use vector_math::settle_vector_math;

/// Values in [-2, 2) from a fixed sequence, as a tensor of `kind`: unlike `randn`, other
/// tests running at the same time cannot change them through libtorch's global generator.
#[cfg(test)]
fn seeded(shape: &[i64], seed: u64, kind: tch::Kind) -> tch::Tensor {
    let mut state = seed;
    let n = shape.iter().product::<i64>() as usize;
    let values: Vec<f32> = (0..n)
        .map(|_| {
            state = state
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (state >> 40) as f32 / (1u64 << 22) as f32 - 2.0
        })
        .collect();
    tch::Tensor::from_slice(&values)
        .reshape(shape)
        .to_kind(kind)
}
