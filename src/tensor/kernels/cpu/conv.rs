//! 1-D convolutions of NLC f32 input as matrix products, for the CPU: a conv is one product
//! per tap, accumulated in place; a transposed conv is one product for all taps, then its
//! taps' outputs are overlap-added.
//!
//! libtorch's own convolutions take NCL input, so each call transposes the input and the
//! output, and on short inputs with wide channels (a streaming decoder's chunks) they ran up
//! to 14 times slower than the products (Qwen3-TTS's first decoder block: 52.5 ms for a
//! one-frame chunk's transposed conv, 3.8 ms as a product; `cargo bench --bench engine --
//! "qwen3 decoder"`).
//! Here the NLC rows are the products' rows as they are, and each tap's weight matrix is
//! contiguous (see [`prepare`]).

use super::linear::cpu_linear;
use crate::tensor::kernels::cpu_gemv;
use tch::{Device, Kind, Tensor};

/// Whether `rows` are few enough for the few-row kernel, which reads a weight at the
/// memory's speed (a streaming chunk's first layers); more go through the GEMM.
fn few(rows: &Tensor) -> bool {
    rows.size()[0] as usize <= cpu_gemv::MAX_ROWS
}

/// `rows @ matrix.T` (`matrix` `[out, in]`).
fn product(rows: &Tensor, matrix: &Tensor) -> Tensor {
    if few(rows) {
        cpu_linear(rows, matrix)
    } else {
        rows.mm(&matrix.tr())
    }
}

/// `sum + rows @ matrix.T`, in `sum`'s storage: for many rows the GEMM adds in place itself.
fn add_product(mut sum: Tensor, rows: &Tensor, matrix: &Tensor) -> Tensor {
    if few(rows) {
        sum.g_add_(&product(rows, matrix))
    } else {
        sum.addmm_(rows, &matrix.tr())
    }
}

/// A conv weight as the products here read it: the same PyTorch tensor (`[out, in, k]` for a
/// conv, `[in, out, k]` transposed), its memory laid out `[k, out, in]`; other weights (on an
/// accelerator, in bf16) as they are. Idempotent.
pub fn prepare(weight: &Tensor, transposed: bool) -> Tensor {
    if weight.device() != Device::Cpu || weight.kind() != Kind::Float {
        return weight.shallow_clone();
    }
    // The permutation that takes the PyTorch order to [k, out, in], and its inverse.
    let (to, back) = if transposed {
        ([2, 1, 0], [2, 1, 0])
    } else {
        ([2, 0, 1], [1, 2, 0])
    };
    weight.permute(to).contiguous().permute(back)
}

/// Whether the products here take this convolution: f32 on the CPU, one sequence, no groups.
fn handled(x: &Tensor, weight: &Tensor, groups: usize) -> bool {
    x.device() == Device::Cpu
        && x.kind() == Kind::Float
        && weight.kind() == Kind::Float
        && groups == 1
        && x.size()[0] == 1
}

/// Conv1d without padding of NLC `x` `[1, len, in]` by `weight` `[out, in, k]`: `None` when
/// [`handled`] says no.
pub fn conv1d(
    x: &Tensor,
    weight: &Tensor,
    stride: usize,
    dilation: usize,
    groups: usize,
) -> Option<Tensor> {
    if !handled(x, weight, groups) {
        return None;
    }
    let (len, taps) = (x.size()[1], weight.size()[2]);
    let (stride, dilation) = (stride as i64, dilation as i64);
    let out_len = (len - (taps - 1) * dilation - 1) / stride + 1;
    let rows = x.select(0, 0);
    let mut y: Option<Tensor> = None;
    for tap in 0..taps {
        // Output t reads input t · stride + tap · dilation: a strided view of the rows.
        let start = tap * dilation;
        let input = rows.slice(0, start, start + (out_len - 1) * stride + 1, stride);
        let matrix = weight.select(2, tap);
        y = Some(match y {
            None => product(&input, &matrix),
            Some(sum) => add_product(sum, &input, &matrix),
        });
    }
    y.map(|y| y.unsqueeze(0))
}

/// ConvTranspose1d without padding of NLC `x` `[1, len, in]` by `weight` `[in, out, k]`:
/// `[1, (len - 1) · stride + k, out]`, or `None` when [`handled`] says no.
pub fn conv_transpose1d(x: &Tensor, weight: &Tensor, stride: usize) -> Option<Tensor> {
    if !handled(x, weight, 1) {
        return None;
    }
    let (len, outputs, taps) = (x.size()[1], weight.size()[1], weight.size()[2]);
    let stride = stride as i64;
    // Every input frame's taps: [len, taps · out], tap j landing on output t · stride + j.
    let all_taps = weight.permute([2, 1, 0]).reshape([taps * outputs, -1]);
    let products = product(&x.select(0, 0), &all_taps).view([len, taps, outputs]);
    // Output frames of `stride` samples: frame t + q gets taps q · stride.. of input t.
    let shifts = (taps + stride - 1) / stride;
    let y = Tensor::zeros(
        [len + shifts - 1, stride, outputs],
        (Kind::Float, Device::Cpu),
    );
    for q in 0..shifts {
        let width = stride.min(taps - q * stride);
        let mut frames = y.narrow(0, q, len).narrow(1, 0, width);
        let _ = frames.g_add_(&products.narrow(1, q * stride, width));
    }
    Some(
        y.view([(len + shifts - 1) * stride, outputs])
            .narrow(0, 0, (len - 1) * stride + taps)
            .unsqueeze(0),
    )
}

#[cfg(test)]
mod tests {
    use super::super::seeded;
    use super::*;

    fn max_abs_diff(a: &Tensor, b: &Tensor) -> f64 {
        assert_eq!(a.size(), b.size());
        (a - b).abs().max().double_value(&[])
    }

    /// Both sides of the few-row cut, strides, dilations: the products give libtorch's
    /// convolution (NCL) to rounding.
    #[test]
    fn convs_as_products_equal_libtorchs() {
        for (len, cin, cout, taps, stride, dilation) in [
            (7, 3, 4, 3, 1, 1),
            (40, 24, 16, 7, 1, 3),
            (300, 24, 16, 7, 1, 9),
            (300, 16, 8, 5, 2, 1),
            (90, 32, 1, 7, 1, 1),
        ] {
            let x = seeded(&[1, len, cin], 1, Kind::Float);
            let w = seeded(&[cout, cin, taps], 2, Kind::Float);
            let got = conv1d(&x, &prepare(&w, false), stride, dilation, 1).unwrap();
            let want = x
                .transpose(1, 2)
                .conv1d::<Tensor>(&w, None, [stride as i64], [0], [dilation as i64], 1)
                .transpose(1, 2);
            let what = format!("conv {len}x{cin}->{cout} k{taps} s{stride} d{dilation}");
            assert!(max_abs_diff(&got, &want) < 1e-4, "{what}");
        }
        for (len, cin, cout, taps, stride) in [
            (5, 48, 24, 16, 8),
            (100, 48, 24, 16, 8),
            (70, 16, 8, 3, 2),
            (9, 8, 4, 4, 4),
        ] {
            let x = seeded(&[1, len, cin], 3, Kind::Float);
            let w = seeded(&[cin, cout, taps], 4, Kind::Float);
            let got = conv_transpose1d(&x, &prepare(&w, true), stride).unwrap();
            let want = x
                .transpose(1, 2)
                .conv_transpose1d::<Tensor>(&w, None, [stride as i64], [0], [0], 1, [1])
                .transpose(1, 2);
            let what = format!("transposed {len}x{cin}->{cout} k{taps} s{stride}");
            assert!(max_abs_diff(&got, &want) < 1e-4, "{what}");
        }
    }

    /// bf16, groups and batches of several sequences stay with libtorch.
    #[test]
    fn other_convs_are_left_to_libtorch() {
        let w = seeded(&[4, 4, 3], 5, Kind::Float);
        let x = seeded(&[1, 8, 4], 6, Kind::Float);
        assert!(conv1d(&x.to_kind(Kind::BFloat16), &w, 1, 1, 1).is_none());
        assert!(conv1d(&x, &w, 1, 1, 2).is_none());
        assert!(conv1d(&seeded(&[2, 8, 4], 6, Kind::Float), &w, 1, 1, 1).is_none());
        assert!(conv1d(&x, &w, 1, 1, 1).is_some());
        // Preparing keeps the values and is idempotent.
        let once = prepare(&w, false);
        assert_eq!(max_abs_diff(&once, &w), 0.0);
        assert_eq!(prepare(&once, false).stride(), once.stride());
    }
}
