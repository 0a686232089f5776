//! RMSNorm of a decode step's rows in one pass ([`cpu_small::norm`]).

use crate::tensor::kernels::{cpu_gemv, cpu_small};
use tch::{Device, Kind};

/// Values up to which [`cpu_rms_norm`] runs on one thread: a decode step's rows; a prompt's
/// go to libtorch's threads.
const CPU_RMS_NORM_MAX_VALUES: i64 = 1 << 18;

/// RMSNorm in one pass (`cpu_small::norm`) for a CPU tensor of a few rows with a weight of its
/// kind, bf16 or f32; `None` for the rest, which libtorch normalises.
pub(in crate::tensor) fn rms_norm(
    x: &tch::Tensor,
    weight: &tch::Tensor,
    eps: f64,
) -> Option<tch::Tensor> {
    use cpu_gemv::Element;
    use half::bf16;

    let kind = x.kind();
    let dim = *weight.size().first()?;
    let plain = matches!(kind, Kind::BFloat16 | Kind::Float)
        && dim > 0
        && x.device() == Device::Cpu
        && weight.device() == Device::Cpu
        && weight.kind() == kind
        && weight.size().len() == 1
        && x.size().last() == Some(&dim)
        && x.numel() <= CPU_RMS_NORM_MAX_VALUES as usize;
    if !plain {
        return None;
    }
    let (x, weight) = (x.contiguous(), weight.contiguous());
    let y = tch::Tensor::empty(x.size(), (kind, Device::Cpu));
    /// # Safety
    /// `x`, `weight` and `y` are contiguous CPU tensors of `E`'s kind, `y` not otherwise
    /// shared and of `x`'s length.
    unsafe fn run<E: Element>(x: &tch::Tensor, weight: &tch::Tensor, eps: f32, y: &tch::Tensor) {
        let values =
            |t: &tch::Tensor| std::slice::from_raw_parts(t.data_ptr() as *const E, t.numel());
        let y = std::slice::from_raw_parts_mut(y.data_ptr() as *mut E, y.numel());
        cpu_small::norm::rms_norm(values(x), values(weight), eps, y)
    }
    // SAFETY: `x`, `weight` and the new `y` are contiguous CPU tensors of `kind`, `y` of `x`'s
    // shape; `y` is not shared, and `x` and `weight` outlive the call.
    unsafe {
        match kind {
            Kind::BFloat16 => run::<bf16>(&x, &weight, eps as f32, &y),
            _ => run::<f32>(&x, &weight, eps as f32, &y),
        }
    }
    Some(y)
}

#[cfg(test)]
mod tests {
    use super::super::seeded;
    use super::*;
    use crate::tensor::tch_backend::libtorch_rms_norm;

    /// The one-pass RMSNorm against libtorch's operations, on a decode step's rows: f32 within
    /// a few roundings (the sums of squares are added in another order), bf16 within one
    /// rounding of the result, and in bf16 mostly the same bits (all of them here). How many
    /// f32 values share their bits depends on the data and on the order of libtorch's
    /// reduction: 68% to 92% in the runs here, so it is not asserted.
    #[test]
    fn one_pass_rms_norm_matches_libtorchs_operations() {
        for kind in [Kind::Float, Kind::BFloat16] {
            let x = seeded(&[8, 3, 1024], 7, kind);
            let weight = seeded(&[1024], 8, kind).abs() + 0.5;
            let fast = rms_norm(&x, &weight, 1e-5).expect("a few CPU rows take the one pass");
            let slow = libtorch_rms_norm(&x, &weight, 1e-5);
            let values = |t: &tch::Tensor| {
                Vec::<f32>::try_from(t.to_kind(Kind::Float).flatten(0, -1)).unwrap()
            };
            let (fast, slow) = (values(&fast), values(&slow));
            let ulp = if kind == Kind::Float {
                f32::EPSILON
            } else {
                1.0 / 128.0
            };
            let mut same = 0;
            for (f, s) in fast.iter().zip(&slow) {
                assert!(
                    (f - s).abs() <= 4.0 * ulp * s.abs(),
                    "{kind:?}: {f} against {s}"
                );
                same += usize::from(f == s);
            }
            if kind == Kind::BFloat16 {
                assert!(
                    same * 10 >= fast.len() * 9,
                    "{kind:?}: {same} of {} equal",
                    fast.len()
                );
            }
        }
    }
}
