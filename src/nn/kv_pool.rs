//! Keys and values of a decoder for a fixed number of sequences, allocated once when the model
//! loads: every decode step writes into and attends over the same device tensors, whatever
//! the batch, so nothing is allocated per step or per request.

use crate::tensor::{DType, Tensor};

/// One tensor per layer for keys and one for values, `[slots, kv_heads, positions, head_dim]`;
/// a sequence owns one slot from start to end.
pub struct KvPool<T> {
    pub(super) keys: Vec<T>,
    pub(super) values: Vec<T>,
    positions: usize,
    /// Free slot indices, the lowest last (taken first).
    free: Vec<usize>,
    slots: usize,
}

/// A sequence's place in a [`KvPool`]: its slot and how many positions it has written.
#[derive(Debug)]
pub struct KvSlot {
    pub(super) index: usize,
    pub(super) len: usize,
}

impl KvSlot {
    /// Its slot in the pool.
    pub fn index(&self) -> usize {
        self.index
    }

    /// Positions written so far: the next token's position.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Counts one more position written by a step run outside [`super::decoder::Decoder`]
    /// (a replayed graph of its step).
    pub fn advance(&mut self) {
        self.len += 1;
    }
}

impl<T: Tensor> KvPool<T> {
    /// `layers` gives each layer's `(kv_heads, head_dim)`.
    pub fn new(
        device: &T::Device,
        dtype: DType,
        layers: &[(usize, usize)],
        slots: usize,
        positions: usize,
    ) -> Self {
        let pool = |&(heads, head_dim): &(usize, usize)| {
            T::uninit(device, &[slots, heads, positions, head_dim], dtype)
        };
        KvPool {
            keys: layers.iter().map(pool).collect(),
            values: layers.iter().map(pool).collect(),
            positions,
            free: (0..slots).rev().collect(),
            slots,
        }
    }

    /// Positions each slot holds.
    pub fn positions(&self) -> usize {
        self.positions
    }

    pub fn slots(&self) -> usize {
        self.slots
    }

    pub fn free_slots(&self) -> usize {
        self.free.len()
    }

    /// Takes a free slot, empty; `None` when every slot is in use.
    pub fn acquire(&mut self) -> Option<KvSlot> {
        let index = self.free.pop()?;
        Some(KvSlot { index, len: 0 })
    }

    /// Takes the highest free slot for good, out of the slots sessions acquire: scratch rows
    /// (a captured decode step's padding) write there. `None` when every slot is in use.
    pub fn set_aside(&mut self) -> Option<usize> {
        (!self.free.is_empty()).then(|| {
            self.slots -= 1;
            self.free.remove(0)
        })
    }

    /// Gives a slot back (its contents are overwritten by the next user).
    pub fn release(&mut self, slot: &KvSlot) {
        debug_assert!(!self.free.contains(&slot.index), "slot released twice");
        self.free.push(slot.index);
        // Lowest first: the slots in use stay packed at the front.
        self.free.sort_unstable_by(|a, b| b.cmp(a));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tensor::tch_backend::TchTensor;
    use crate::tensor::TensorData;

    #[test]
    fn slots_are_taken_lowest_first_and_come_back() {
        let mut pool = KvPool::<TchTensor>::new(&tch::Device::Cpu, DType::F32, &[(2, 4); 3], 3, 16);
        assert_eq!(pool.keys[0].shape(), vec![3, 2, 16, 4]);
        let a = pool.acquire().unwrap();
        let b = pool.acquire().unwrap();
        let c = pool.acquire().unwrap();
        assert_eq!((a.index, b.index, c.index), (0, 1, 2));
        assert!(pool.acquire().is_none());
        pool.release(&c);
        pool.release(&a);
        assert_eq!(pool.free_slots(), 2);
        assert_eq!(pool.acquire().unwrap().index, 0);
    }

    #[test]
    fn a_slot_set_aside_is_never_acquired() {
        let mut pool = KvPool::<TchTensor>::new(&tch::Device::Cpu, DType::F32, &[(1, 2)], 3, 4);
        assert_eq!(pool.set_aside(), Some(2));
        assert_eq!((pool.slots(), pool.free_slots()), (2, 2));
        let a = pool.acquire().unwrap();
        let b = pool.acquire().unwrap();
        assert_eq!((a.index(), b.index()), (0, 1));
        assert!(pool.acquire().is_none() && pool.set_aside().is_none());
        pool.release(&b);
        assert_eq!(pool.acquire().unwrap().index(), 1);
    }
}
