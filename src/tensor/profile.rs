//! What the backends count for `bench`: the multiply-adds of every product, and the time of
//! the CPU's products by their rows.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

static LINEAR_MULTIPLY_ADDS: AtomicU64 = AtomicU64::new(0);

/// Multiply-adds of every `linear` product so far of the backends that count them (libtorch's,
/// on any device): `bench` divides them by time to report arithmetic rates.
pub fn linear_multiply_adds() -> u64 {
    LINEAR_MULTIPLY_ADDS.load(Ordering::Relaxed)
}

pub(super) fn count_multiply_adds(n: u64) {
    LINEAR_MULTIPLY_ADDS.fetch_add(n, Ordering::Relaxed);
}

/// The classes of rows per weight read that [`timed_products`] files CPU products under, by
/// their largest row count: a decode step's products differ in kind by their rows (a stream's
/// one, the flow head's six per stream), and so do their bounds, reading or arithmetic.
pub const ROW_CLASSES: [(usize, &str); 5] = [
    (1, "1 row"),
    (4, "2-4 rows"),
    (8, "5-8 rows"),
    (24, "9-24 rows"),
    (usize::MAX, "25+ rows"),
];

/// Multiply-adds and nanoseconds of the timed products of each [`ROW_CLASSES`] class.
static TIMED_PRODUCTS: [[AtomicU64; 2]; ROW_CLASSES.len()] =
    [const { [AtomicU64::new(0), AtomicU64::new(0)] }; ROW_CLASSES.len()];

/// Multiply-adds and time so far of the CPU products of each of [`ROW_CLASSES`] (libtorch's
/// backend; products on an accelerator run asynchronously and are not timed).
pub fn timed_products() -> [(u64, Duration); ROW_CLASSES.len()] {
    std::array::from_fn(|i| {
        let [multiply_adds, nanos] = &TIMED_PRODUCTS[i];
        (
            multiply_adds.load(Ordering::Relaxed),
            Duration::from_nanos(nanos.load(Ordering::Relaxed)),
        )
    })
}

pub(super) fn count_timed_product(rows: usize, multiply_adds: u64, time: Duration) {
    let class = ROW_CLASSES
        .iter()
        .position(|&(most, _)| rows <= most)
        .expect("the last class takes any count");
    let [counted, nanos] = &TIMED_PRODUCTS[class];
    counted.fetch_add(multiply_adds, Ordering::Relaxed);
    nanos.fetch_add(time.as_nanos() as u64, Ordering::Relaxed);
}
