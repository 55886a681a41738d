//! A bounded multi-producer multi-consumer ring of fixed-size slots, laid out in raw memory so
//! that it can live in POSIX shared memory and be used by several processes.
//!
//! The algorithm is Dmitry Vyukov's bounded MPMC queue: every slot carries a sequence number.
//! A producer at position `pos` may fill slot `pos % cap` when its sequence equals `pos`; it
//! claims the position with a CAS on the enqueue counter, writes, and publishes by storing
//! `pos + 1` (Release). A consumer at `pos` may read when the sequence equals `pos + 1`; it
//! claims with a CAS on the dequeue counter, reads, and frees the slot by storing `pos + cap`.
//!
//! Slots store their sequence minus their index (`pos & !mask` is the lap), so a zero-filled
//! region already is an empty ring: creating one writes nothing, and the pages of rings that
//! carry no traffic are never committed.
//!
//! ```text
//!  ctl: [enq counter | pad ][deq counter | pad ]      (one cache line each)
//!  slot 0: [seq | data .......... ]  stride bytes, a multiple of 64
//!  slot 1: [seq | data .......... ]
//!  ...
//! ```
//!
//! The consumer only reads the slot's own cache line to find a message, so with one producer
//! and one consumer a message costs one cache-line transfer. Producers and consumers never
//! share a counter line.

use amnet_core::sync::{AtomicU64, Ordering, UnsafeCell};

#[repr(C, align(64))]
struct Padded(AtomicU64);

#[repr(C)]
struct RingCtl {
    enq: Padded,
    deq: Padded,
}

#[repr(C)]
struct SlotHdr {
    seq: AtomicU64,
    /// Guards the slot's data bytes: a zero-sized cell in normal builds, a race detector
    /// under loom.
    data: UnsafeCell<()>,
}

/// Bytes from a slot's start to its data area.
pub const fn slot_header() -> usize {
    let s = std::mem::size_of::<SlotHdr>();
    (s + 7) & !7
}

/// Prefetch the cache line at `p` with intent to write (`prefetchw`; a no-op hint on CPUs
/// without it). Any address is allowed: a prefetch never faults.
#[inline(always)]
fn prefetch_write(p: *const u8) {
    #[cfg(all(target_arch = "x86_64", not(loom)))]
    // SAFETY: prefetchw only hints the cache; it reads no memory architecturally and never
    // faults, and it touches no register but its address operand.
    unsafe {
        std::arch::asm!("prefetchw [{0}]", in(reg) p, options(nostack, preserves_flags, readonly));
    }
    #[cfg(not(all(target_arch = "x86_64", not(loom))))]
    let _ = p;
}

/// A view of one ring in memory. Copyable; the memory is owned by whoever mapped it.
#[derive(Clone, Copy, Debug)]
pub struct Ring {
    base: *mut u8,
    mask: u64,
    stride: usize,
}

// SAFETY: the ring is designed for concurrent use from many threads and processes; all shared
// state is accessed through atomics or through slots claimed exclusively by the protocol.
unsafe impl Send for Ring {}
// SAFETY: as above.
unsafe impl Sync for Ring {}

impl Ring {
    /// Slot stride for `data_cap` data bytes.
    pub const fn stride(data_cap: usize) -> usize {
        (slot_header() + data_cap + 63) & !63
    }

    /// Bytes of memory one ring needs.
    pub const fn bytes(cap: usize, data_cap: usize) -> usize {
        std::mem::size_of::<RingCtl>() + cap * Self::stride(data_cap)
    }

    /// Data bytes per slot for a ring laid out with `data_cap`.
    pub fn data_cap(&self) -> usize {
        self.stride - slot_header()
    }

    /// Initialize a ring at `base`.
    ///
    /// # Safety
    /// - `base` is 64-byte aligned, zero-filled and valid for writes of
    ///   `Ring::bytes(cap, data_cap)` bytes.
    /// - `cap` is a power of two.
    /// - Nobody else uses the memory until initialization is published to them (by a barrier
    ///   with Release/Acquire ordering).
    pub unsafe fn init(base: *mut u8, cap: usize, data_cap: usize) -> Ring {
        debug_assert!(cap.is_power_of_two());
        debug_assert_eq!(base as usize % 64, 0);
        let r = Ring {
            base,
            mask: cap as u64 - 1,
            stride: Self::stride(data_cap),
        };
        // Zero-filled memory is an empty ring (see the module notes); only loom needs its
        // atomics constructed.
        #[cfg(loom)]
        // SAFETY: within the region the caller provided; nothing else accesses it yet.
        unsafe {
            let ctl = base.cast::<RingCtl>();
            std::ptr::write(
                ctl,
                RingCtl {
                    enq: Padded(AtomicU64::new(0)),
                    deq: Padded(AtomicU64::new(0)),
                },
            );
            for i in 0..cap {
                std::ptr::write(
                    r.slot_ptr(i as u64),
                    SlotHdr {
                        seq: AtomicU64::new(0),
                        data: UnsafeCell::new(()),
                    },
                );
            }
        }
        r
    }

    /// View a ring that another party initialized.
    ///
    /// # Safety
    /// - `base` points to a ring initialized by [`Ring::init`] with the same `cap` and
    ///   `data_cap`, whose initialization happened-before this call, and which stays mapped
    ///   while the view is used.
    pub unsafe fn view(base: *mut u8, cap: usize, data_cap: usize) -> Ring {
        Ring {
            base,
            mask: cap as u64 - 1,
            stride: Self::stride(data_cap),
        }
    }

    #[inline(always)]
    fn ctl(&self) -> &RingCtl {
        // SAFETY: `base` holds an initialized RingCtl for the life of the mapping.
        unsafe { &*self.base.cast::<RingCtl>() }
    }

    #[inline(always)]
    fn slot_ptr(&self, pos: u64) -> *mut SlotHdr {
        #[allow(clippy::cast_possible_truncation)] // masked below the capacity, a usize
        let i = (pos & self.mask) as usize;
        // SAFETY: i < cap, so the slot lies inside the ring's region.
        unsafe {
            self.base
                .add(std::mem::size_of::<RingCtl>() + i * self.stride)
                .cast::<SlotHdr>()
        }
    }

    #[inline(always)]
    fn slot(&self, pos: u64) -> &SlotHdr {
        // SAFETY: slots are initialized by `init` and live as long as the mapping.
        unsafe { &*self.slot_ptr(pos) }
    }

    #[inline(always)]
    fn data_ptr(&self, pos: u64) -> *mut u8 {
        // SAFETY: the data area follows the header inside the slot's stride.
        unsafe { self.slot_ptr(pos).cast::<u8>().add(slot_header()) }
    }

    /// Claim a free slot, let `fill` write up to `data_cap()` bytes into it, and publish it.
    /// Returns false when the ring is full.
    #[inline(always)]
    pub fn try_push(&self, fill: impl FnOnce(*mut u8)) -> bool {
        match self.try_claim() {
            Some(pos) => {
                let p = self.data_ptr(pos);
                self.slot(pos).data.with_mut(|_| fill(p));
                // SAFETY: `pos` was claimed just above and is published once, here.
                unsafe { self.publish(pos) };
                true
            }
            None => false,
        }
    }

    /// Claim a free slot for a write that [`publish`](Self::publish) ends: returns its
    /// position (its data area is [`slot_data`](Self::slot_data)), or None when the ring is
    /// full. Until the publish, consumers wait at this position: messages claimed after it
    /// are delivered only once it is published.
    #[inline(always)]
    pub fn try_claim(&self) -> Option<u64> {
        let ctl = self.ctl();
        let mut pos = ctl.enq.0.load(Ordering::Relaxed);
        // The slot's line was last written by its consumer (when it freed the slot) and is
        // being read by it (a consumer polls the slot it expects next). Ask for it exclusive
        // at once: the seq load below then waits for one ownership transfer, where a plain
        // load would fetch a shared copy and the data store would pay a second transfer to
        // upgrade it. Prefetching the next slot right after a publish instead is worse: the
        // consumer, polling that slot meanwhile, takes the line back before the next push.
        self.prefetch(pos);
        loop {
            let slot = self.slot(pos);
            let lap = pos & !self.mask;
            let seq = slot.seq.load(Ordering::Acquire);
            let diff = seq.wrapping_sub(lap) as i64;
            if diff == 0 {
                // SeqCst on success: the claim is the first half of the doorbell protocol
                // (`bell`); on x86 it is the same locked instruction as a relaxed one.
                match ctl.enq.0.compare_exchange_weak(
                    pos,
                    pos.wrapping_add(1),
                    Ordering::SeqCst,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => return Some(pos),
                    Err(cur) => pos = cur,
                }
            } else if diff < 0 {
                return None;
            } else {
                pos = ctl.enq.0.load(Ordering::Relaxed);
            }
        }
    }

    /// The data area of the slot claimed at `pos` (`data_cap()` bytes), for its claimer to
    /// write until it publishes. Only the holder of the claim may write through it.
    #[inline(always)]
    pub fn slot_data(&self, pos: u64) -> *mut u8 {
        self.data_ptr(pos)
    }

    /// Publish the slot claimed at `pos` ([`try_claim`](Self::try_claim)), whose data the
    /// claimer has written: consumers may take it from now on.
    ///
    /// # Safety
    /// - `pos` was returned by `try_claim` on this ring and is published once: publishing a
    ///   position nobody claimed would hand consumers a slot a producer may be writing.
    #[inline(always)]
    pub unsafe fn publish(&self, pos: u64) {
        let lap = pos & !self.mask;
        self.slot(pos)
            .seq
            .store(lap.wrapping_add(1), Ordering::Release);
    }

    /// Ask for the line of the slot the next push will fill, in exclusive state, ahead of
    /// that push. A hint: it changes no state, and a push that never comes costs the
    /// consumer one extra read of that line.
    #[inline(always)]
    pub fn prefetch_next_push(&self) {
        self.prefetch(self.ctl().enq.0.load(Ordering::Relaxed));
    }

    /// Ask for the line of slot `pos` in exclusive state, ahead of a write to it.
    #[inline(always)]
    fn prefetch(&self, pos: u64) {
        prefetch_write(self.slot_ptr(pos).cast::<u8>());
    }

    /// The position consumers take next (the oldest slot not yet taken).
    #[inline]
    pub fn head(&self) -> u64 {
        self.ctl().deq.0.load(Ordering::Acquire)
    }

    /// True when a message may be waiting (a cheap check without claiming).
    #[inline(always)]
    pub fn maybe_ready(&self) -> bool {
        let pos = self.ctl().deq.0.load(Ordering::Relaxed);
        self.slot(pos).seq.load(Ordering::Relaxed) == (pos & !self.mask).wrapping_add(1)
    }

    /// True when a producer has claimed a position that no consumer has taken yet: a message
    /// is in the ring or about to be. The sleeper's check of the doorbell protocol
    /// ([`bell`](crate::bell)): sequentially consistent with the producers' claims.
    #[inline]
    pub fn claimed(&self) -> bool {
        let ctl = self.ctl();
        let deq = ctl.deq.0.load(Ordering::Relaxed);
        ctl.enq.0.load(Ordering::SeqCst) != deq
    }

    /// Claim the oldest published slot, run `read` on its data, and free it.
    /// Returns None when the ring is empty.
    #[inline(always)]
    pub fn try_pop<R>(&self, read: impl FnOnce(*const u8) -> R) -> Option<R> {
        let ctl = self.ctl();
        let mut pos = ctl.deq.0.load(Ordering::Relaxed);
        loop {
            let slot = self.slot(pos);
            let lap = pos & !self.mask;
            let seq = slot.seq.load(Ordering::Acquire);
            let diff = seq.wrapping_sub(lap.wrapping_add(1)) as i64;
            if diff == 0 {
                // The free store below writes this line: take it exclusive now, so that the
                // ownership transfer overlaps the claim and the handler instead of stalling
                // the next locked instruction.
                self.prefetch(pos);
                match ctl.deq.0.compare_exchange_weak(
                    pos,
                    pos.wrapping_add(1),
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                ) {
                    Ok(_) => {
                        let p = self.data_ptr(pos);
                        let r = slot.data.with(|_| read(p));
                        slot.seq
                            .store(lap.wrapping_add(self.mask + 1), Ordering::Release);
                        return Some(r);
                    }
                    Err(cur) => pos = cur,
                }
            } else if diff < 0 {
                return None;
            } else {
                pos = ctl.deq.0.load(Ordering::Relaxed);
            }
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::alloc::{alloc_zeroed, dealloc, Layout};

    struct Buf(*mut u8, Layout);
    impl Buf {
        fn new(n: usize) -> Buf {
            let l = Layout::from_size_align(n, 64).unwrap();
            // SAFETY: non-zero size layout.
            Buf(unsafe { alloc_zeroed(l) }, l)
        }
    }
    impl Drop for Buf {
        fn drop(&mut self) {
            // SAFETY: allocated with this layout in `new`.
            unsafe { dealloc(self.0, self.1) }
        }
    }

    #[test]
    fn fifo_and_full() {
        let b = Buf::new(Ring::bytes(4, 8));
        // SAFETY: fresh aligned buffer of the right size.
        let r = unsafe { Ring::init(b.0, 4, 8) };
        for i in 0..4u8 {
            // SAFETY: data_cap >= 1.
            assert!(r.try_push(|p| unsafe { *p = i }));
        }
        assert!(!r.try_push(|_| {}));
        for i in 0..4u8 {
            // SAFETY: the slot holds one written byte.
            assert_eq!(r.try_pop(|p| unsafe { *p }), Some(i));
        }
        assert_eq!(r.try_pop(|_| ()), None);
        assert!(!r.maybe_ready());
    }

    #[test]
    fn threads_exactly_once() {
        const N: u64 = 20_000;
        let b = Buf::new(Ring::bytes(16, 8));
        // SAFETY: fresh aligned buffer of the right size.
        let r = unsafe { Ring::init(b.0, 16, 8) };
        let sum = std::sync::atomic::AtomicU64::new(0);
        let count = std::sync::atomic::AtomicU64::new(0);
        std::thread::scope(|s| {
            for t in 0..2u64 {
                s.spawn(move || {
                    for i in 0..N {
                        let v = t * N + i;
                        // SAFETY: data_cap 8 holds one u64.
                        while !r.try_push(|p| unsafe { p.cast::<u64>().write_unaligned(v) }) {
                            std::thread::yield_now();
                        }
                    }
                });
            }
            for _ in 0..2 {
                let (sum, count) = (&sum, &count);
                s.spawn(move || {
                    while count.load(std::sync::atomic::Ordering::Relaxed) < 2 * N {
                        // SAFETY: every slot holds a u64 written by a producer.
                        match r.try_pop(|p| unsafe { p.cast::<u64>().read_unaligned() }) {
                            Some(v) => {
                                sum.fetch_add(v, std::sync::atomic::Ordering::Relaxed);
                                count.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                            }
                            None => std::thread::yield_now(),
                        }
                    }
                });
            }
        });
        let n = 2 * N;
        assert_eq!(sum.into_inner(), n * (n - 1) / 2);
    }
}
