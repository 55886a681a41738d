//! The endpoint barrier's flags in the host scratch, for a job whose ranks all share one host
//! (every rank maps every other rank's scratch, [`Conduit::host_scratch`]), and for the ranks
//! of one host in the hierarchical barrier of a job over several hosts (spec/core.md §8).
//!
//! Each rank owns two **slots** in the core's page of its host scratch
//! ([`CORE_SCRATCH_BYTES`], past the layers' part). For the barrier numbered `c` (0, 1, ...:
//! every rank counts the same barriers) a rank writes its value (anonymous, named id, ...) into
//! slot `c % 2`, then the slot's epoch `c + 1` with Release: its arrival. It completes the
//! barrier once every rank's slot `c % 2` holds epoch `c + 1` (Acquire), merging the values in
//! rank order, so every rank reaches the same verdict. No message travels: one store of a
//! line by each rank and a read of every rank's line.
//!
//! Two slots suffice: a rank writes slot `c % 2` again for barrier `c + 2` only after it
//! completed barrier `c + 1`, which needs every rank's arrival at `c + 1`, which each made
//! after it completed barrier `c`, that is after it read every rank's values of `c`. Epochs
//! only grow and the scratch is zero at start-up (epoch 0: no arrival yet), so the counter is
//! the sense.
//!
//! In the hierarchical barrier the host's lowest rank (its leader) waits for the host's
//! arrivals, agrees with the other hosts' leaders over messages, and then writes the verdict
//! into one of two **release slots** of its own, which the host's other ranks wait on.
//!
//! [`Conduit::host_scratch`]: crate::Conduit::host_scratch
//! [`CORE_SCRATCH_BYTES`]: crate::conduit::CORE_SCRATCH_BYTES

use std::ptr::NonNull;

use crate::sync::{AtomicU32, AtomicU64, Ordering};

/// Words of a barrier value (`barrier::Val::encode`).
pub(crate) const VAL_WORDS: usize = 5;

/// One slot: a barrier's epoch and the value its owner arrived with, on lines of their own
/// (two cache lines: x86's adjacent-line prefetcher pairs lines).
#[repr(C, align(128))]
pub(crate) struct Slot {
    /// `c + 1` for barrier `c` once the value is written (0: none yet); stored last, Release.
    epoch: AtomicU64,
    val: [AtomicU32; VAL_WORDS],
}

/// A rank's two slots, at the start of the core's page of its host scratch, and the two
/// release slots it writes when it leads its host in the hierarchical barrier.
#[repr(C)]
pub(crate) struct Slots {
    slot: [Slot; 2],
    release: [Slot; 2],
}

#[cfg(not(loom))]
const _: () = {
    assert!(std::mem::size_of::<Slots>() <= crate::conduit::CORE_SCRATCH_BYTES);
    assert!(std::mem::align_of::<Slots>() <= 4096);
};

impl Slots {
    /// Fresh slots on the heap (loom: its atomics must be loom's own objects).
    #[cfg(all(test, loom))]
    pub(crate) fn boxed() -> Box<Slots> {
        let slot = || Slot {
            epoch: AtomicU64::new(0),
            val: std::array::from_fn(|_| AtomicU32::new(0)),
        };
        Box::new(Slots {
            slot: [slot(), slot()],
            release: [slot(), slot()],
        })
    }
}

/// Every rank's slots (or those of one host's ranks), mapped here.
pub(crate) struct ShmBarrier {
    slots: Vec<NonNull<Slots>>,
    me: usize,
}

// SAFETY: the pointers address shared memory that stays mapped for the conduit's life (which
// the endpoint holding this outlives not), accessed only through atomics.
unsafe impl Send for ShmBarrier {}
// SAFETY: as above.
unsafe impl Sync for ShmBarrier {}

impl ShmBarrier {
    /// The flags of a job of `size` ranks where `scratch(r)` maps every rank's host scratch
    /// (`HOST_SCRATCH_BYTES`, page-aligned, zero-filled at start-up, the core's page written
    /// by nothing else); `None` where one of them is not mapped here, or for one rank.
    pub(crate) fn new(
        size: u32,
        me: u32,
        scratch: impl Fn(u32) -> Option<NonNull<u8>>,
    ) -> Option<ShmBarrier> {
        let all: Vec<u32> = (0..size).collect();
        ShmBarrier::of(&all, me as usize, scratch)
    }

    /// The flags of the ranks `ranks` (one host's, ascending), this rank being `ranks[me]`,
    /// under the conditions of [`ShmBarrier::new`]; index `i` of the other calls is
    /// `ranks[i]`.
    pub(crate) fn of(
        ranks: &[u32],
        me: usize,
        scratch: impl Fn(u32) -> Option<NonNull<u8>>,
    ) -> Option<ShmBarrier> {
        if ranks.len() < 2 || me >= ranks.len() {
            return None;
        }
        let slots = ranks
            .iter()
            .map(|&r| {
                let p = scratch(r)?;
                // The core's page: the last of the scratch.
                let at = p.as_ptr().wrapping_add(crate::conduit::LAYER_SCRATCH_BYTES);
                NonNull::new(at.cast::<Slots>())
            })
            .collect::<Option<Vec<_>>>()?;
        Some(ShmBarrier { slots, me })
    }

    /// Over slots the caller owns (the loom models).
    #[cfg(all(test, loom))]
    pub(crate) fn over(slots: &[Box<Slots>], me: usize) -> ShmBarrier {
        ShmBarrier {
            slots: slots.iter().map(|b| NonNull::from(&**b)).collect(),
            me,
        }
    }

    fn slots(&self, r: usize) -> &Slots {
        // SAFETY: `new` took each pointer from the conduit's host scratch (mapped for the
        // conduit's life, page-aligned, the core's page large enough for `Slots`, checked at
        // compile time, zero-filled at start-up: a valid `Slots` of zero atomics); the
        // loom models' boxes outlive the barrier.
        unsafe { self.slots[r].as_ref() }
    }

    /// This rank arrives at barrier `c` with `val`.
    pub(crate) fn arrive(&self, c: u64, val: [u32; VAL_WORDS]) {
        let s = &self.slots(self.me).slot[(c % 2) as usize];
        for (w, v) in s.val.iter().zip(val) {
            w.store(v, Ordering::Relaxed);
        }
        s.epoch.store(c + 1, Ordering::Release);
    }

    /// Whether every rank from `from` on arrived at barrier `c`: the first that has not, or
    /// `None` when all have (Acquire: their values may be read then). A slot past `c + 1` (a
    /// rank at `c + 2` already, which this rank's other thread let through) counts as
    /// arrived: the caller finds its barrier completed.
    pub(crate) fn first_missing(&self, c: u64, from: usize) -> Option<usize> {
        let k = (c % 2) as usize;
        (from..self.slots.len())
            .find(|&r| self.slots(r).slot[k].epoch.load(Ordering::Acquire) < c + 1)
    }

    /// Rank `r`'s value at barrier `c`, once `first_missing` said it arrived (and before this
    /// rank arrives at `c + 1`: `r` does not write the slot again before that).
    pub(crate) fn value(&self, c: u64, r: usize) -> [u32; VAL_WORDS] {
        let s = &self.slots(r).slot[(c % 2) as usize];
        std::array::from_fn(|i| s.val[i].load(Ordering::Relaxed))
    }

    /// Ranks in the job.
    pub(crate) fn ranks(&self) -> usize {
        self.slots.len()
    }

    /// As the leader (index 0) of a host in the hierarchical barrier: barrier `c`'s verdict
    /// `val`, for the host's other ranks. The leader writes it once every rank of the host
    /// arrived at `c` (and the leaders agreed), so a rank that reads it at `c` cannot have
    /// arrived at `c + 1` yet: release slot `c % 2` is written again, for `c + 2`, only after
    /// every rank of the host arrived at `c + 2`, that is after each read the verdict of `c`
    /// and of `c + 1`.
    pub(crate) fn release(&self, c: u64, val: [u32; VAL_WORDS]) {
        let s = &self.slots(self.me).release[(c % 2) as usize];
        for (w, v) in s.val.iter().zip(val) {
            w.store(v, Ordering::Relaxed);
        }
        s.epoch.store(c + 1, Ordering::Release);
    }

    /// The verdict of barrier `c` that the host's leader (index 0) released, once it did
    /// (Acquire); a release past `c + 1` (this rank's other thread completed `c`) reads as
    /// released too.
    pub(crate) fn released(&self, c: u64) -> Option<[u32; VAL_WORDS]> {
        let s = &self.slots(0).release[(c % 2) as usize];
        if s.epoch.load(Ordering::Acquire) < c + 1 {
            return None;
        }
        Some(std::array::from_fn(|i| s.val[i].load(Ordering::Relaxed)))
    }
}

#[cfg(all(test, loom))]
mod loom_models {
    //! Run with `RUSTFLAGS="--cfg loom" cargo test -p amnet-core --lib --release loom_`.
    use super::*;
    use loom::sync::Arc;
    use loom::thread;

    /// A rank's barriers: arrive with `vals[c]`, wait until all arrived (yielding), then read
    /// everyone's value; returns the values seen per barrier.
    fn rank(b: &ShmBarrier, vals: &[[u32; VAL_WORDS]]) -> Vec<Vec<[u32; VAL_WORDS]>> {
        let mut seen = Vec::new();
        for (c, v) in vals.iter().enumerate() {
            let c = c as u64;
            b.arrive(c, *v);
            let mut from = 0;
            while let Some(r) = b.first_missing(c, from) {
                from = r;
                thread::yield_now();
            }
            seen.push((0..b.ranks()).map(|r| b.value(c, r)).collect());
        }
        seen
    }

    /// Two ranks through three barriers (both slots, one reused): each sees both values of
    /// each barrier, never a value of the barrier two later that reuses the slot.
    #[test]
    fn loom_endpoint_barrier_two_ranks_three_barriers() {
        loom::model(|| {
            let slots = Arc::new(vec![Slots::boxed(), Slots::boxed()]);
            let val = |r: u32, c: u32| [1, 10 * c + r, r, 0, 0];
            let hs: Vec<_> = (0..2u32)
                .map(|r| {
                    let slots = slots.clone();
                    thread::spawn(move || {
                        let b = ShmBarrier::over(&slots, r as usize);
                        let vals: Vec<_> = (0..3).map(|c| val(r, c)).collect();
                        rank(&b, &vals)
                    })
                })
                .collect();
            for h in hs {
                let seen = h.join().unwrap();
                for (c, vs) in (0u32..).zip(&seen) {
                    for (r, v) in (0u32..).zip(vs) {
                        assert_eq!(*v, val(r, c), "barrier {c}, rank {r}");
                    }
                }
            }
        });
    }

    /// A host's leader and one other rank through three hierarchical barriers (both release
    /// slots, one reused): the other rank reads each barrier's verdict, never the one of the
    /// barrier two later that reuses the slot, and the leader releases only after the other
    /// rank arrived.
    #[test]
    fn loom_endpoint_barrier_release_three_barriers() {
        loom::model(|| {
            let slots = Arc::new(vec![Slots::boxed(), Slots::boxed()]);
            let verdict = |c: u32| [1, 100 + c, 0, 0, 0];
            let leader = {
                let slots = slots.clone();
                thread::spawn(move || {
                    let b = ShmBarrier::over(&slots, 0);
                    for c in 0..3u32 {
                        b.arrive(u64::from(c), [0; VAL_WORDS]);
                        while b.first_missing(u64::from(c), 0).is_some() {
                            thread::yield_now();
                        }
                        assert_eq!(b.value(u64::from(c), 1), [1, c, 1, 0, 0]);
                        b.release(u64::from(c), verdict(c));
                    }
                })
            };
            let b = ShmBarrier::over(&slots, 1);
            for c in 0..3u32 {
                b.arrive(u64::from(c), [1, c, 1, 0, 0]);
                let v = loop {
                    if let Some(v) = b.released(u64::from(c)) {
                        break v;
                    }
                    thread::yield_now();
                };
                assert_eq!(v, verdict(c), "barrier {c}");
            }
            leader.join().unwrap();
        });
    }

    /// No rank leaves a barrier before every rank arrived at it: a rank's write before its
    /// arrival is seen by every rank after the barrier.
    #[test]
    fn loom_endpoint_barrier_orders_writes() {
        loom::model(|| {
            let slots = Arc::new(vec![Slots::boxed(), Slots::boxed(), Slots::boxed()]);
            let data: Arc<Vec<AtomicU32>> = Arc::new((0..3).map(|_| AtomicU32::new(0)).collect());
            let hs: Vec<_> = (0..3usize)
                .map(|r| {
                    let (slots, data) = (slots.clone(), data.clone());
                    thread::spawn(move || {
                        let b = ShmBarrier::over(&slots, r);
                        data[r].store(1, Ordering::Relaxed);
                        b.arrive(0, [0; VAL_WORDS]);
                        // One look at the flags (three spinning ranks are beyond loom's
                        // search): what it may conclude must hold.
                        if b.first_missing(0, 0).is_none() {
                            for d in data.iter() {
                                assert_eq!(d.load(Ordering::Relaxed), 1, "left before an arrival");
                            }
                        }
                    })
                })
                .collect();
            for h in hs {
                h.join().unwrap();
            }
        });
    }
}
