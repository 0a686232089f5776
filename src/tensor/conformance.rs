//! Backend-independent checks, run by each backend's tests on its own device.

use super::{ConvKind, DType, PoolRows, Tensor};

/// PyTorch `Conv1d` (no padding) of NLC `x` `[1, len, cin]` with a PyTorch weight
/// `[cout, cin, k]`, as NLC `[1, out_len, cout]` values.
fn conv_reference(
    x: &[f32],
    cin: usize,
    w: &[f32],
    cout: usize,
    k: usize,
    stride: usize,
) -> Vec<f32> {
    let len = x.len() / cin;
    let out_len = (len - k) / stride + 1;
    let mut y = vec![0.0; out_len * cout];
    for t in 0..out_len {
        for o in 0..cout {
            for i in 0..cin {
                for j in 0..k {
                    y[t * cout + o] += x[(t * stride + j) * cin + i] * w[(o * cin + i) * k + j];
                }
            }
        }
    }
    y
}

/// PyTorch `ConvTranspose1d` (no padding) of NLC `x` with a PyTorch weight `[cin, cout, k]`.
fn conv_transpose_reference(
    x: &[f32],
    cin: usize,
    w: &[f32],
    cout: usize,
    k: usize,
    stride: usize,
) -> Vec<f32> {
    let len = x.len() / cin;
    let out_len = (len - 1) * stride + k;
    let mut y = vec![0.0; out_len * cout];
    for t in 0..len {
        for i in 0..cin {
            for o in 0..cout {
                for j in 0..k {
                    y[(t * stride + j) * cout + o] += x[t * cin + i] * w[(i * cout + o) * k + j];
                }
            }
        }
    }
    y
}

/// PyTorch `Conv1d` (stride 1, no padding) with `dilation` and `groups`, NLC in and out,
/// weight `[cout, cin / groups, k]`.
fn dilated_conv_reference(
    x: &[f32],
    cin: usize,
    w: &[f32],
    cout: usize,
    k: usize,
    dilation: usize,
    groups: usize,
) -> Vec<f32> {
    let len = x.len() / cin;
    let out_len = len - (k - 1) * dilation;
    let (gin, gout) = (cin / groups, cout / groups);
    let mut y = vec![0.0; out_len * cout];
    for t in 0..out_len {
        for o in 0..cout {
            let g = o / gout;
            for i in 0..gin {
                for j in 0..k {
                    y[t * cout + o] +=
                        x[(t + j * dilation) * cin + g * gin + i] * w[(o * gin + i) * k + j];
                }
            }
        }
    }
    y
}

fn values(n: usize, seed: usize) -> Vec<f32> {
    (0..n).map(|i| ((i * 7 + seed) % 11) as f32 - 5.0).collect()
}

fn assert_close(got: &[f32], want: &[f32], what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    for (i, (a, b)) in got.iter().zip(want).enumerate() {
        assert!((a - b).abs() <= 1e-4, "{what}: element {i}: {a} vs {b}");
    }
}

/// Conv weights go in once in PyTorch layout; the backend converts them to its own layout,
/// and converting a converted weight again changes nothing. Inputs are NLC whatever layout
/// the backend's convolutions use inside.
pub fn conv_layouts_and_idempotent_weight_conversion<T: Tensor>(device: &T::Device) {
    let (len, cin, cout, k) = (7, 3, 4, 3);
    let x_data = values(len * cin, 1);
    let x = T::from_f32(device, &x_data, &[1, len, cin], DType::F32);
    for (kind, shape) in [
        (ConvKind::Conv, [cout, cin, k]),
        (ConvKind::Transpose, [cin, cout, k]),
    ] {
        let w_data = values(cout * cin * k, 2);
        let w = T::from_f32(device, &w_data, &shape, DType::F32);
        let once = T::prepare_conv_weight(&w, kind);
        let twice = T::prepare_conv_weight(&once, kind);
        assert_eq!(once.shape(), twice.shape(), "{kind:?}: converted twice");
        assert_eq!(
            once.to_vec_f32(),
            twice.to_vec_f32(),
            "{kind:?}: converted twice"
        );
        for stride in [1, 2] {
            let (want, y_once, y_twice) = match kind {
                ConvKind::Conv => (
                    conv_reference(&x_data, cin, &w_data, cout, k, stride),
                    x.conv1d(&once, stride),
                    x.conv1d(&twice, stride),
                ),
                ConvKind::Transpose => (
                    conv_transpose_reference(&x_data, cin, &w_data, cout, k, stride),
                    x.conv_transpose1d(&once, stride),
                    x.conv_transpose1d(&twice, stride),
                ),
            };
            assert_eq!(
                y_once.shape(),
                vec![1, want.len() / cout, cout],
                "{kind:?} NLC out"
            );
            let what = format!("{kind:?} stride {stride}");
            assert_close(&y_once.to_vec_f32(), &want, &what);
            assert_eq!(y_once.to_vec_f32(), y_twice.to_vec_f32(), "{what}: twice");
        }
    }
}

/// GELU in its exact form, `x/2 · (1 + erf(x/√2))`, not the tanh approximation (which
/// differs by 1e-4 to 4e-4 at these points).
pub fn gelu_is_the_exact_erf_form<T: Tensor>(device: &T::Device) {
    // x and x/2 · (1 + erf(x/√2)) in f64.
    let cases = [
        (-3.0, -0.004_049_694_094_890_31),
        (-1.0, -0.158_655_253_931_457_05),
        (0.0, 0.0),
        (0.5, 0.345_731_230_637_006_56),
        (2.0, 1.954_499_736_103_641_6),
    ];
    let x: Vec<f32> = cases.iter().map(|&(x, _)| x as f32).collect();
    let got = T::from_f32(device, &x, &[x.len()], DType::F32)
        .gelu()
        .to_vec_f32();
    for (g, (x, want)) in got.iter().zip(cases) {
        assert!(
            (f64::from(*g) - want).abs() < 1e-6,
            "gelu({x}) = {g}, want {want}"
        );
    }
}

/// Pool attention of rows with a sliding window sees only the row's last `window`
/// positions of its own slot (GQA: query head `h` reads KV head `h / 2`), against softmax
/// attention written out on the host.
pub fn windowed_pool_attention_sees_only_its_window<T: Tensor>(device: &T::Device) {
    let (slots, hkv, hq, positions, d) = (2, 2, 4, 10, 4);
    let value = |i: usize, salt: usize| ((i * 37 + salt * 11) % 23) as f32 / 23.0 - 0.5;
    let pool = |salt| -> Vec<f32> {
        (0..slots * hkv * positions * d)
            .map(|i| value(i, salt))
            .collect()
    };
    let (k, v) = (pool(1), pool(2));
    let shape = [slots, hkv, positions, d];
    let keys = T::from_f32(device, &k, &shape, DType::F32);
    let values = T::from_f32(device, &v, &shape, DType::F32);
    let (row_slots, row_positions, window, scale) = (vec![1, 0], vec![7, 2], 3, 0.5);
    let q: Vec<f32> = (0..2 * hq * d).map(|i| value(i, 3)).collect();
    let qt = T::from_f32(device, &q, &[2, hq, 1, d], DType::F32);
    let rows = PoolRows::windowed(
        device,
        row_slots.clone(),
        row_positions.clone(),
        Some(window),
    );
    assert_eq!(rows.first, [5, 0]);
    let got = T::pool_attention(&qt, &keys, &values, &rows, scale).to_vec_f32();
    let at = |pool: &[f32], slot: usize, head: usize, pos: usize| {
        let start = ((slot * hkv + head) * positions + pos) * d;
        pool[start..start + d].to_vec()
    };
    let mut want = Vec::new();
    for (r, (&slot, &pos)) in row_slots.iter().zip(&row_positions).enumerate() {
        for h in 0..hq {
            let query = &q[(r * hq + h) * d..(r * hq + h + 1) * d];
            let seen: Vec<usize> = ((pos + 1).saturating_sub(window)..=pos).collect();
            let scores: Vec<f32> = seen
                .iter()
                .map(|&j| {
                    let key = at(&k, slot, h / 2, j);
                    query.iter().zip(&key).map(|(a, b)| a * b).sum::<f32>() * scale as f32
                })
                .collect();
            let top = scores.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let weights: Vec<f32> = scores.iter().map(|s| (s - top).exp()).collect();
            let total: f32 = weights.iter().sum();
            let mut out = vec![0.0; d];
            for (&j, w) in seen.iter().zip(&weights) {
                for (o, x) in out.iter_mut().zip(at(&v, slot, h / 2, j)) {
                    *o += w / total * x;
                }
            }
            want.extend(out);
        }
    }
    assert_close(&got, &want, "windowed pool attention");
}

/// Dilated and grouped (including depthwise) convolutions against a direct loop.
pub fn dilated_grouped_conv_matches_reference<T: Tensor>(device: &T::Device) {
    let (len, cin) = (13, 4);
    let x_data = values(len * cin, 3);
    let x = T::from_f32(device, &x_data, &[1, len, cin], DType::F32);
    for (cout, k, dilation, groups) in [(6, 3, 1, 1), (6, 3, 3, 1), (4, 3, 2, 4), (8, 2, 4, 2)] {
        let w_data = values(cout * (cin / groups) * k, 5);
        let w = T::from_f32(device, &w_data, &[cout, cin / groups, k], DType::F32);
        let w = T::prepare_conv_weight(&w, ConvKind::Conv);
        let want = dilated_conv_reference(&x_data, cin, &w_data, cout, k, dilation, groups);
        let y = x.conv1d_dilated(&w, dilation, groups);
        assert_eq!(y.shape(), vec![1, want.len() / cout, cout], "NLC out");
        let what = format!("cout {cout} k {k} dilation {dilation} groups {groups}");
        assert_close(&y.to_vec_f32(), &want, &what);
    }
}

/// `sin` elementwise, against f64.
pub fn sin_matches_f64<T: Tensor>(device: &T::Device) {
    let x = [-4.0f32, -1.0, 0.0, 0.3, 2.5, 10.0];
    let got = T::from_f32(device, &x, &[2, 3], DType::F32)
        .sin()
        .to_vec_f32();
    for (g, x) in got.iter().zip(x) {
        let want = f64::from(x).sin();
        assert!(
            (f64::from(*g) - want).abs() < 1e-6,
            "sin({x}) = {g}, want {want}"
        );
    }
}

/// `tanh` elementwise, against f64.
pub fn tanh_matches_f64<T: Tensor>(device: &T::Device) {
    let x = [-9.0f32, -1.5, -0.2, 0.0, 0.7, 3.0];
    let got = T::from_f32(device, &x, &[2, 3], DType::F32)
        .tanh()
        .to_vec_f32();
    for (g, x) in got.iter().zip(x) {
        let want = f64::from(x).tanh();
        assert!(
            (f64::from(*g) - want).abs() < 1e-6,
            "tanh({x}) = {g}, want {want}"
        );
    }
}

/// `elu` elementwise, against f64.
pub fn elu_matches_f64<T: Tensor>(device: &T::Device) {
    let x = [-6.0f32, -1.0, -0.25, 0.0, 0.3, 4.5];
    let got = T::from_f32(device, &x, &[3, 2], DType::F32)
        .elu()
        .to_vec_f32();
    for (g, x) in got.iter().zip(x) {
        let x = f64::from(x);
        let want = if x > 0.0 { x } else { x.exp_m1() };
        assert!(
            (f64::from(*g) - want).abs() < 1e-6,
            "elu({x}) = {g}, want {want}"
        );
    }
}

/// `leaky_relu` is exactly `x` or `slope · x` in f32, on the backend and in the
/// trait's default.
pub fn leaky_relu_is_exact<T: Tensor>(device: &T::Device) {
    let x = [-6.0f32, -1.3, -0.25, -0.0, 0.0, 0.3, 4.5];
    let t = T::from_f32(device, &x, &[1, 7], DType::F32);
    let default = t.relu().add(&t.clamp(f32::NEG_INFINITY, 0.0).scale(0.1));
    for got in [t.leaky_relu(0.1).to_vec_f32(), default.to_vec_f32()] {
        for (g, x) in got.iter().zip(x) {
            let want = if x > 0.0 { x } else { x * 0.1 };
            assert_eq!(*g, want, "leaky_relu({x})");
        }
    }
}
