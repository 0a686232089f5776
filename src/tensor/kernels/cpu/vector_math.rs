//! oneMKL's vector math, settled before a model's first tensor.

use tch::Kind;

/// The vector-math functions libtorch's CPU build hands to oneMKL (`vmsSin`, `vmsExp`, ...)
/// for f32 and f64 tensors.
const MKL_VECTOR_MATH: [fn(&tch::Tensor) -> tch::Tensor; 16] = [
    tch::Tensor::acos,
    tch::Tensor::asin,
    tch::Tensor::atan,
    tch::Tensor::cos,
    tch::Tensor::erf,
    tch::Tensor::erfc,
    tch::Tensor::erfinv,
    tch::Tensor::exp,
    tch::Tensor::log,
    tch::Tensor::log10,
    tch::Tensor::log2,
    tch::Tensor::sin,
    tch::Tensor::sqrt,
    tch::Tensor::tan,
    tch::Tensor::tanh,
    tch::Tensor::trunc,
];

/// oneMKL picks its vector-math kernels on the first call in a process, and when libtorch's
/// threads make that call together (an operation of 2048 values or more, split between them)
/// one of them can run a low-accuracy kernel for it (pytorch/pytorch#188792). With libtorch's
/// oneMKL 2024.0 here, about one process in twenty had a first `sin` thousands of ulps off
/// after a matrix product: a server's first request, decoded by the Qwen3 codec, gave other
/// audio than the same request after it. One call of each function on a single value, on
/// one thread, before a model's first tensor exists, settles the kernels.
pub(in crate::tensor) fn settle_vector_math() {
    static SETTLED: std::sync::Once = std::sync::Once::new();
    SETTLED.call_once(|| {
        for kind in [Kind::Float, Kind::Double] {
            let one = tch::Tensor::from_slice(&[0.5f32]).to_kind(kind);
            for function in MKL_VECTOR_MATH {
                let _ = function(&one);
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::super::seeded;
    use crate::tensor::tch_backend::TchTensor;
    use crate::tensor::{DType, TensorData};
    use tch::{Device, Kind};

    /// Set in the child processes of [`first_vector_math_call_gives_what_later_calls_give`].
    const VECTOR_MATH_CHILD: &str = "VECTOR_MATH_CHILD";

    /// After a model's first tensor, the process's first vector-math call, made by libtorch's
    /// threads together over 8192 values after a matrix product, gives what the next call
    /// gives. The race it guards against can happen once per process, in one process of 20 to
    /// 70 here, so the test runs itself again as 96 processes (this binary, this test alone).
    /// Without `settle_vector_math` it failed in 5 of 8 runs (1 to 4 processes each): it can
    /// miss a regression, but it never fails with the warm-up. Where libtorch runs on one
    /// thread there is no race to see.
    #[test]
    fn first_vector_math_call_gives_what_later_calls_give() {
        const PROCESSES: usize = 96;
        const NAME: &str =
            "tensor::kernels::cpu::vector_math::tests::first_vector_math_call_gives_what_later_calls_give";
        if std::env::var_os(VECTOR_MATH_CHILD).is_some() {
            let _ = TchTensor::from_f32(&Device::Cpu, &[0.0], &[1], DType::F32);
            let (a, w) = (
                seeded(&[27, 512], 1, Kind::Float),
                seeded(&[512, 512], 2, Kind::Float),
            );
            for _ in 0..3 {
                let _ = a.matmul(&w);
            }
            let x = seeded(&[8192], 3, Kind::Float);
            let (first, second) = (x.sin(), x.sin());
            assert!(
                first.equal(&second),
                "the first sin differs from the second"
            );
            return;
        }
        let exe = std::env::current_exe().expect("the test binary");
        let at_once = std::thread::available_parallelism().map_or(1, |n| n.get().min(4));
        let mut failures = Vec::new();
        for batch in (0..PROCESSES).collect::<Vec<_>>().chunks(at_once) {
            let children: Vec<_> = batch
                .iter()
                .map(|_| {
                    std::process::Command::new(&exe)
                        .args([NAME, "--exact", "--test-threads=1"])
                        .env(VECTOR_MATH_CHILD, "1")
                        .stdout(std::process::Stdio::piped())
                        .stderr(std::process::Stdio::piped())
                        .spawn()
                        .expect("start the test binary")
                })
                .collect();
            for child in children {
                let output = child.wait_with_output().expect("run the test binary");
                let stdout = String::from_utf8_lossy(&output.stdout);
                if !(output.status.success() && stdout.contains("1 passed")) {
                    failures.push(format!(
                        "{stdout}{}",
                        String::from_utf8_lossy(&output.stderr)
                    ));
                }
            }
        }
        assert!(
            failures.is_empty(),
            "{} of {PROCESSES} processes failed; the first:\n{}",
            failures.len(),
            failures[0]
        );
    }
}
