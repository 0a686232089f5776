//! Products by weights packed in panels for [`cpu_gemv::packed`], with a feed-forward's gating
//! and a residual in their passes.

use super::linear::{timed_cpu_product, widens_bf16_gemm};
use crate::tensor::kernels::cpu_gemv;
use crate::tensor::tch_backend::TchTensor;
use crate::tensor::{Fused, Layout, NetworkOps, Products, TensorData};
use tch::{Device, Kind};

/// The product of CPU tensors with `fused`'s work in its passes, where the weight is packed
/// ([`packed_linear`]); timed and counted as [`super::linear`]'s.
pub(in crate::tensor) fn fused_linear(
    x: &TchTensor,
    weight: &TchTensor,
    fused: Fused<'_, TchTensor>,
) -> Option<TchTensor> {
    let inputs = x.0.numel() / if fused.gated { 2 } else { 1 };
    timed_cpu_product(inputs, weight, || packed_linear(&x.0, &weight.0, fused))
}

/// `x @ weight[start..start + len].T` for a packed weight, `None` for any other.
pub(in crate::tensor) fn linear_rows(
    x: &TchTensor,
    weight: &TchTensor,
    start: usize,
    len: usize,
) -> Option<TchTensor> {
    use cpu_gemv::packed::PANEL;
    packed_outputs(&weight.0)?;
    // Packed: whole panels are a packed weight of their own; otherwise all outputs, cut.
    if start.is_multiple_of(PANEL) && len.is_multiple_of(PANEL) {
        let panels = weight
            .0
            .narrow(0, (start / PANEL) as i64, (len / PANEL) as i64);
        return Some(x.linear(&TchTensor(panels)));
    }
    let y = x.linear(weight);
    Some(y.narrow(y.shape().len() - 1, start, len))
}

/// On the CPU, a bf16 weight of whole panels is packed for [`cpu_gemv::packed`], whose
/// products of a few dozen rows run nearer the FMA peak than the few-row kernel's
/// (docs/performance.md), and f32 rows read it at half an f32 copy's bytes; with the `amx`
/// kernel (except for f32 rows), elsewhere, or for an f32 weight, nothing.
pub(in crate::tensor) fn pack_for_few_rows(
    parts: &[&TchTensor],
    products: Products,
) -> Option<TchTensor> {
    use cpu_gemv::Variant;
    // With AVX512-BF16 libtorch's bf16 GEMM of a prompt outruns the packed kernel (AMX);
    // elsewhere bf16 GEMMs are widened, and the packed kernel outruns those too. The AMX
    // variant reads weights as stored, faster than the packed kernel at any row count.
    let packs = match (products, Variant::active()) {
        // No other kernel multiplies f32 rows by bf16 weights.
        (Products::FloatRows, _) => true,
        (_, Variant::Amx) => false,
        (Products::FewRows, _) => true,
        (Products::AlsoManyRows, _) => widens_bf16_gemm(),
    };
    if !packs {
        return None;
    }
    packed_panels(parts)
}

/// The outputs of a weight packed by [`cpu_gemv::packed`] (a bf16 CPU tensor
/// `[out / PANEL, k, PANEL]`, made by `pack_for_few_rows`), or `None` for any other weight.
pub(super) fn packed_outputs(w: &tch::Tensor) -> Option<i64> {
    use cpu_gemv::packed::PANEL;
    match w.size().as_slice() {
        &[panels, _, panel] if panel == PANEL as i64 => Some(panels * panel),
        _ => None,
    }
}

/// `x @ w.T` for a weight packed by [`cpu_gemv::packed`], with `fused`'s work in its passes;
/// `None` for any other weight, and for gated f32 rows or a residual not of the output's kind
/// and shape (done apart). bf16 rows give bf16, f32 rows f32 (the product with the weight
/// widened to f32).
pub(super) fn packed_linear(
    x: &tch::Tensor,
    w: &tch::Tensor,
    fused: Fused<'_, TchTensor>,
) -> Option<tch::Tensor> {
    use cpu_gemv::packed::{self, Product, Rows};
    use cpu_gemv::Element;
    use half::bf16;

    let out = packed_outputs(w)?;
    let k = w.size()[1];
    let kind = x.kind();
    if fused.gated && kind != Kind::BFloat16 {
        return None;
    }
    let width = if fused.gated { 2 * k } else { k };
    assert!(
        x.device() == Device::Cpu
            && matches!(kind, Kind::BFloat16 | Kind::Float)
            && x.size().last() == Some(&width),
        "a packed weight multiplies bf16 or f32 rows of {width} values on the CPU, not {:?} {:?} on {:?}",
        kind,
        x.size(),
        x.device()
    );
    let x = x.contiguous();
    let mut shape = x.size();
    *shape.last_mut().expect("at least one axis") = out;
    let residual = match fused.residual {
        Some(r) if r.0.kind() != kind || r.0.size() != shape || r.0.device() != Device::Cpu => {
            return None
        }
        r => r.map(|r| r.0.contiguous()),
    };
    let y = tch::Tensor::empty(&shape, (kind, Device::Cpu));
    let threads = usize::try_from(tch::get_num_threads()).unwrap_or(1);

    /// # Safety
    /// `x`, `residual` and `y` are contiguous CPU tensors of `E`'s kind, `y` new and not
    /// shared; `w` is a packed weight.
    unsafe fn run<E: Element>(
        x: &tch::Tensor,
        gated: bool,
        w: &tch::Tensor,
        residual: Option<&tch::Tensor>,
        y: &tch::Tensor,
        threads: usize,
    ) {
        let values =
            |t: &tch::Tensor| std::slice::from_raw_parts(t.data_ptr() as *const E, t.numel());
        let rows = match gated {
            // Gated rows are bf16 (checked above).
            true => Rows::Gated {
                values: std::slice::from_raw_parts(x.data_ptr() as *const bf16, x.numel()),
                silu: silu_table(),
            },
            false => Rows::Plain(values(x)),
        };
        let product = Product {
            rows,
            residual: residual.map(values),
        };
        let packed = std::slice::from_raw_parts(w.data_ptr() as *const bf16, w.numel());
        let k = w.size()[1] as usize;
        let y = std::slice::from_raw_parts_mut(y.data_ptr() as *mut E, y.numel());
        packed::linear(product, packed, k, y, threads)
    }
    // SAFETY: as `run` asks: `x` and `residual` were made contiguous, of `kind` (checked), and
    // `y` is new; `pack_for_few_rows` made `w`.
    unsafe {
        match kind {
            Kind::BFloat16 => run::<bf16>(&x, fused.gated, w, residual.as_ref(), &y, threads),
            _ => run::<f32>(&x, fused.gated, w, residual.as_ref(), &y, threads),
        }
    }
    Some(y)
}

/// libtorch's SiLU of every bf16 value, indexed by its bits and widened to f32 (256 KB, made
/// once): what a gated product's rows read, so that they hold the bits of libtorch's `silu`
/// (tested).
fn silu_table() -> &'static cpu_gemv::packed::SiluTable {
    use half::bf16;
    static TABLE: std::sync::OnceLock<Box<cpu_gemv::packed::SiluTable>> =
        std::sync::OnceLock::new();
    TABLE.get_or_init(|| {
        let bits: Vec<i16> = (0..=u16::MAX).map(|b| b as i16).collect();
        let silu = tch::Tensor::from_slice(&bits)
            .view_dtype(Kind::BFloat16)
            .silu()
            .contiguous();
        let mut table = Box::new([0.0; 1 << 16]);
        // SAFETY: `silu` is a contiguous CPU tensor of 65,536 bf16 values.
        let values = unsafe { std::slice::from_raw_parts(silu.data_ptr() as *const bf16, 1 << 16) };
        for (entry, value) in table.iter_mut().zip(values) {
            *entry = value.to_f32();
        }
        table
    })
}

/// The bf16 CPU weights `parts` `[out_i, k]`, stacked and packed in panels for
/// [`cpu_gemv::packed`] (`[out / PANEL, k, PANEL]`), or `None` when they are not bf16 CPU
/// weights of whole panels.
fn packed_panels(parts: &[&TchTensor]) -> Option<TchTensor> {
    use cpu_gemv::packed::{self, PANEL};
    use half::bf16;

    let k = parts.first()?.0.size().get(1).copied()?;
    let packable = |w: &tch::Tensor| match w.size().as_slice() {
        &[out, cols] => {
            w.device() == Device::Cpu
                && w.kind() == Kind::BFloat16
                && cols == k
                && out > 0
                && (out as usize).is_multiple_of(PANEL)
        }
        _ => false,
    };
    if !parts.iter().all(|p| packable(&p.0)) {
        return None;
    }
    let k = k as usize;
    let out: usize = parts.iter().map(|p| p.0.size()[0] as usize).sum();
    let shape = [(out / PANEL) as i64, k as i64, PANEL as i64];
    let panels = tch::Tensor::empty(shape, (Kind::BFloat16, Device::Cpu));
    // SAFETY: a new contiguous bf16 CPU tensor of `out * k` values, written only here.
    let mut into =
        unsafe { std::slice::from_raw_parts_mut(panels.data_ptr() as *mut bf16, out * k) };
    for part in parts {
        let w = part.0.contiguous();
        let rows = w.size()[0] as usize;
        // SAFETY: a contiguous bf16 CPU tensor of `rows * k` values, alive for the call.
        let values = unsafe { std::slice::from_raw_parts(w.data_ptr() as *const bf16, rows * k) };
        let (this, rest) = into.split_at_mut(rows * k);
        packed::pack_into(values, rows, k, this);
        into = rest;
    }
    Some(TchTensor(panels))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tensor::DType;
    use crate::tensor::{Elementwise, Tensor};

    /// A packed weight's outputs `start..start + len`, as a fused weight's parts are taken:
    /// whole panels alone, or a cut of every output; both as the whole product has them, and
    /// near the plain f32 product of those rows.
    #[test]
    fn linear_rows_of_a_packed_weight_are_those_of_the_whole_product() {
        let _guard = tch::no_grad_guard();
        let w = tch::Tensor::randn([160, 64], (Kind::Float, Device::Cpu)).to_kind(Kind::BFloat16);
        let x = tch::Tensor::randn([2, 3, 64], (Kind::Float, Device::Cpu)).to_kind(Kind::BFloat16);
        let (w, x) = (TchTensor(w), TchTensor(x));
        let packed = packed_panels(&[&w]).expect("bf16 whole panels pack");
        let whole = x.linear(&packed);
        // Packed from parts, as a fused weight is: the same panels.
        let parts = [w.narrow(0, 0, 96), w.narrow(0, 96, 64)];
        let from_parts =
            packed_panels(&[&parts[0], &parts[1]]).expect("parts of whole panels pack");
        assert!(from_parts.0.equal(&packed.0));
        for (start, len) in [(0, 160), (32, 64), (128, 32), (40, 50), (0, 8)] {
            let got = x.linear_rows(&packed, start, len);
            assert!(got.0.equal(&whole.narrow(2, start, len).0), "{start}+{len}");
            let plain = x.0.to_kind(Kind::Float).linear::<tch::Tensor>(
                &w.0.narrow(0, start as i64, len as i64).to_kind(Kind::Float),
                None,
            );
            let err = (got.0.to_kind(Kind::Float) - &plain)
                .abs()
                .max()
                .double_value(&[]);
            let scale = plain.abs().max().double_value(&[]);
            assert!(err <= scale / 64.0, "{start}+{len}: {err} off");
        }
    }

    /// The SiLU table holds libtorch's bits for every bf16 value, from its vectorised loop
    /// (all the values, in reverse order) and from its scalar one (each value alone, as a
    /// width's tail runs), so a gated product's rows are libtorch's `silu` at any position.
    #[test]
    fn the_silu_table_is_libtorchs_silu_of_every_bf16_value() {
        let _guard = tch::no_grad_guard();
        let table = silu_table();
        let bits: Vec<i16> = (0..=u16::MAX).map(|b| b as i16).collect();
        let all = tch::Tensor::from_slice(&bits).view_dtype(Kind::BFloat16);
        let vectorised = all.flip([0]).silu().flip([0]).view_dtype(Kind::Int16);
        let vectorised = Vec::<i16>::try_from(&vectorised).expect("i16 values");
        let same = |i: usize, libtorch: i16| {
            let (ours, theirs) = (table[i], half::bf16::from_bits(libtorch as u16).to_f32());
            ours.to_bits() == theirs.to_bits() || (ours.is_nan() && theirs.is_nan())
        };
        for (i, &silu) in vectorised.iter().enumerate() {
            assert!(same(i, silu), "value {i:#06x}, vectorised");
        }
        for i in 0..bits.len() {
            let alone = all.narrow(0, i as i64, 1).silu().view_dtype(Kind::Int16);
            assert!(
                same(i, alone.int64_value(&[0]) as i16),
                "value {i:#06x}, alone"
            );
        }
    }

    /// A packed product with a feed-forward's gating and a residual done in its passes gives
    /// the bits of libtorch's operations apart around the packed product (SiLU, product, add),
    /// for widths with and without the vectorised loop's tails; f32 gated rows and an add
    /// that broadcasts are done apart.
    #[test]
    fn fused_products_equal_the_operations_apart() {
        let _guard = tch::no_grad_guard();
        let randn = |shape: &[i64], kind: Kind, scale: f64| {
            TchTensor((tch::Tensor::randn(shape, (Kind::Float, Device::Cpu)) * scale).to_kind(kind))
        };
        for (k, rows, kind) in [
            (64, 1, Kind::BFloat16),
            (37, 7, Kind::BFloat16),
            (3072, 24, Kind::BFloat16),
            (40, 6, Kind::Float),
        ] {
            let w = randn(&[96, k], Kind::BFloat16, 1.0);
            let packed = packed_panels(&[&w]).expect("bf16 whole panels pack");
            let gate_up = randn(&[rows, 2 * k], kind, 4.0);
            let x = randn(&[rows, k], kind, 1.0);
            let residual = randn(&[rows, 96], kind, 8.0);
            let (gate, up) = (
                gate_up.narrow(1, 0, k as usize),
                gate_up.narrow(1, k as usize, k as usize),
            );
            let gated = gate.silu().mul(&up).linear(&packed);
            let cases = [
                (
                    gate_up.gated_linear(&packed, Some(&residual)),
                    residual.add(&gated),
                ),
                (gate_up.gated_linear(&packed, None), gated),
                (
                    x.linear_add(&packed, &residual),
                    residual.add(&x.linear(&packed)),
                ),
            ];
            for (i, (fused, apart)) in cases.iter().enumerate() {
                assert!(
                    fused.0.equal(&apart.0),
                    "{k} wide, {rows} rows, {kind:?}, case {i}"
                );
            }
            // A residual that broadcasts.
            let row = residual.narrow(0, 0, 1);
            let fused = x.linear_add(&packed, &row);
            assert!(fused.0.equal(&row.add(&x.linear(&packed)).0));
        }
    }

    /// f32 rows times a packed bf16 weight (the semantic head's product) come out in f32,
    /// within f32 roundings of libtorch's f32 product with the weight widened.
    #[test]
    fn f32_rows_times_a_packed_weight_are_f32_products() {
        let _guard = tch::no_grad_guard();
        let w = tch::Tensor::randn([96, 300], (Kind::Float, Device::Cpu)).to_kind(Kind::BFloat16);
        let packed = packed_panels(&[&TchTensor(w.shallow_clone())]).expect("whole panels pack");
        for rows in [1, 4] {
            let x = tch::Tensor::randn([rows, 300], (Kind::Float, Device::Cpu));
            let got = TchTensor(x.shallow_clone()).linear(&packed);
            assert_eq!(got.dtype(), DType::F32);
            let widened = w.to_kind(Kind::Float);
            let want = x.linear::<tch::Tensor>(&widened, None);
            // Any order of the 300 sums is within 300 roundings of the products' magnitudes.
            let bound = x.abs().linear::<tch::Tensor>(&widened.abs(), None) * (300.0 * 6e-8);
            let worst = ((&got.0 - &want).abs() - bound).max().double_value(&[]);
            assert!(worst <= 0.0, "{rows} rows: {worst} beyond f32 roundings");
        }
    }
}
