//! Safe access to segment memory mapped in this process (spec/core.md §7b): a rank's own
//! segment, and on conduits that map their peers (smp) every rank's, seen as a slice of
//! atomic integers. A load or store through it with `Ordering::Relaxed` compiles to a plain
//! memory access (no lock, no call), and since every access is atomic, other ranks and
//! threads writing the same bytes at the same time is no data race: a reader gets some value
//! each word held.

use std::ptr::NonNull;
use std::sync::atomic::{
    AtomicI16, AtomicI32, AtomicI64, AtomicI8, AtomicU16, AtomicU32, AtomicU64, AtomicU8,
};

use crate::endpoint::{seg_off, Endpoint};
use crate::{Error, Rank, Result};

mod sealed {
    pub trait Sealed {}
}

/// An atomic integer type that segment memory can be viewed as: `AtomicU8` .. `AtomicU64`,
/// `AtomicI8` .. `AtomicI64`.
pub trait SegmentAtomic: sealed::Sealed + Sync + Send + 'static {
    /// Its size and alignment in bytes.
    const SIZE: usize;
}

macro_rules! seg_atomic {
    ($($t:ty),*) => {$(
        impl sealed::Sealed for $t {}
        impl SegmentAtomic for $t {
            const SIZE: usize = std::mem::size_of::<$t>();
        }
        // The view casts bytes to `$t`: size and alignment must agree.
        const _: () = assert!(std::mem::align_of::<$t>() == std::mem::size_of::<$t>());
    )*};
}

seg_atomic!(AtomicU8, AtomicU16, AtomicU32, AtomicU64, AtomicI8, AtomicI16, AtomicI32, AtomicI64);

impl Endpoint {
    /// The base of `rank`'s segment mapped in this process: this rank's own segment always;
    /// another rank's where put/get reach it by a copy ([`RmaPath::Direct`], smp). The address
    /// is `segment_len_of(rank)` bytes long and valid for the endpoint's life, in the manner of
    /// GASNet-EX's `gex_EP_QueryBoundSegmentNB`. Using it is the caller's unsafe code: the
    /// owner and every other rank write that memory at any time; [`segment_atomics`] is the
    /// safe view.
    ///
    /// [`RmaPath::Direct`]: crate::RmaPath::Direct
    /// [`segment_atomics`]: Endpoint::segment_atomics
    pub fn mapped_segment(&self, rank: Rank) -> Result<NonNull<u8>> {
        let att = self.attached_for("mapped_segment")?;
        att.check_rank(rank)?;
        let base = if rank == self.rank() {
            att.seg.base
        } else {
            match att.peers[rank as usize] {
                Some(p) => p.0,
                None => {
                    return Err(Error::Usage {
                        op: "mapped_segment",
                        detail: format!(
                            "rank {rank}'s segment is not mapped in this process (its put/get \
                             path is {:?}, not Direct); use put/get or atomic domains",
                            self.rma_path(rank)?
                        ),
                    })
                }
            }
        };
        NonNull::new(base).ok_or(Error::Usage {
            op: "mapped_segment",
            detail: format!("rank {rank}'s segment is empty"),
        })
    }

    /// `count` elements of `rank`'s segment from `offset`, viewed as atomics of type `A`
    /// (`AtomicU64`, `AtomicU32`, ..., `AtomicU8`), for the ranks [`mapped_segment`] maps:
    /// this rank's own segment on every conduit, every rank's on smp. Usable from handlers.
    /// Errors: `BadRank`, `OutOfSegment`, and `Error::Usage` for a segment not mapped here or
    /// an `offset` not aligned to `A`'s size in that memory.
    ///
    /// Accesses through the view are atomic with respect to each other and to atomic
    /// domains' operations of the same width on the same element. The library's own copies
    /// into a segment (put, VIS put, Long payloads, `write_local`) are plain copies: a client
    /// orders them against its view accesses of the same bytes (a barrier, a reply), as it
    /// orders two puts to the same bytes (spec/core.md §7b).
    ///
    /// [`mapped_segment`]: Endpoint::mapped_segment
    pub fn segment_atomics<A: SegmentAtomic>(
        &self,
        rank: Rank,
        offset: u64,
        count: usize,
    ) -> Result<&[A]> {
        let att = self.attached_for("segment_atomics")?;
        let bytes = count.checked_mul(A::SIZE).ok_or(Error::Usage {
            op: "segment_atomics",
            detail: format!("{count} elements of {} bytes overflow usize", A::SIZE),
        })?;
        att.check_range(rank, offset, bytes)?;
        if count == 0 {
            return Ok(&[]);
        }
        let base = self.mapped_segment(rank)?;
        // SAFETY: `offset + bytes` lies inside `rank`'s segment (checked above), so the
        // pointer stays inside the mapping.
        let p = unsafe { base.as_ptr().add(seg_off(offset)) };
        if (p as usize) % A::SIZE != 0 {
            return Err(Error::Usage {
                op: "segment_atomics",
                detail: format!(
                    "offset {offset} in rank {rank}'s segment is not aligned to {} bytes (the \
                     element size)",
                    A::SIZE
                ),
            });
        }
        // SAFETY: `count` elements of `A` from `p` lie inside a segment mapped (readable and
        // writable) for the life of the endpoint, which `&self` borrows; `p` is aligned for
        // `A` (size equals alignment, checked at compile time); every bit pattern is a valid
        // integer; an `A` is an `UnsafeCell`, so shared references to it permit the writes
        // other ranks and threads make. Other processes' accesses are outside this process's
        // memory model; within it, the library's non-atomic copies into the same bytes are
        // ordered against view accesses by the client, as spec/core.md §7b requires.
        Ok(unsafe { std::slice::from_raw_parts(p.cast::<A>(), count) })
    }
}
