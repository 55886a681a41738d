//! The value types of the collective API: addresses, handles, layouts and the
//! function table.

use std::sync::Arc;

/// Where a participant's source or destination area lies.
///
/// `Seg(offset)` is an offset into the segment of the rank that owns the participant: the
/// same value means the same place on every rank, so it is the natural single-valued address.
/// `Ptr` is a raw pointer into the calling process, made only with the unsafe [`Addr::ptr`]
/// (its [`RawPtr`] has no safe constructor) and taken only by the unsafe entries of
/// [`raw::Collectives`](crate::raw::Collectives): safe code can neither forge one nor make a
/// collective write through one.
/// `InPlace` (sources only) takes the data from the destination, per operation (see the
/// spec).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Addr {
    /// An offset into the owning rank's segment.
    Seg(u64),
    /// A pointer into the owning process's memory.
    Ptr(RawPtr),
    /// The source is the destination (in-place forms).
    InPlace,
}

impl Addr {
    /// An address in the owning rank's segment.
    pub fn seg(offset: u64) -> Addr {
        Addr::Seg(offset)
    }

    /// An address anywhere in this process.
    ///
    /// # Safety
    /// - Every collective the address is passed to (an unsafe entry of
    ///   [`raw::Collectives`](crate::raw::Collectives)) may read (a source) or write (a
    ///   destination) through `p`: its caller meets that entry's contract for it (`p` valid
    ///   and not otherwise accessed from the initiation until its sync succeeds on this rank,
    ///   bulk semantics).
    pub unsafe fn ptr(p: *mut u8) -> Addr {
        Addr::Ptr(RawPtr(p as usize))
    }
}

/// An address in this process that a caller of the unsafe [`Addr::ptr`] vouched for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RawPtr(usize);

impl RawPtr {
    /// The address.
    pub fn addr(self) -> usize {
        self.0
    }
}

/// The handle of a non-blocking collective (or of an aggregate). Belongs to the thread that
/// started it; dead once a sync succeeded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct CollHandle(pub(crate) u64);

impl CollHandle {
    /// The handle of a call that completed synchronously (all zero bits).
    pub const INVALID: CollHandle = CollHandle(0);

    /// True for [`CollHandle::INVALID`].
    pub fn is_invalid(&self) -> bool {
        self.0 == 0
    }

    /// The handle as an integer, for a layer that carries it in another language (the C
    /// ABI's `amnet_coll_handle_t`); 0 for [`CollHandle::INVALID`].
    pub fn to_bits(self) -> u64 {
        self.0
    }

    /// The handle whose [`CollHandle::to_bits`] is `bits`. A value that names no collective
    /// outstanding on the calling thread is refused by the syncs (`Error::BadHandle`).
    pub fn from_bits(bits: u64) -> CollHandle {
        CollHandle(bits)
    }
}

/// A block-cyclic layout of a distributed array over the participants.
///
/// `blk > 0`: elements are dealt in blocks of `blk` to participants 0, 1, ... in turn, and
/// `off` is the global index (in elements) of the first element used. `blk == 0`
/// ("indefinite"): every element lives on participant `off`, consecutively.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Layout {
    /// Elements per block; 0 for indefinite.
    pub blk: usize,
    /// First element (blk > 0) or the participant holding all (blk == 0).
    pub off: usize,
}

impl Layout {
    /// Block-cyclic with `blk` elements per block, starting at element `off`.
    pub fn block_cyclic(blk: usize, off: usize) -> Layout {
        Layout { blk, off }
    }

    /// Every element on participant `p`.
    pub const fn indefinite(p: usize) -> Layout {
        Layout { blk: 0, off: p }
    }
}

/// Flags of a function-table entry.
pub mod fn_flags {
    /// The function may run outside the rank's coll calls: from the collectives' progress
    /// function inside any amnet call that polls (`Endpoint::wait_until`, a put's wait, a
    /// barrier), on the calling thread. Without it, reduction steps that call the function run
    /// only inside coll calls (initiations, syncs, `Coll::poll`) and when a core barrier
    /// completes collectives synced early. No function runs in a handler or on a library
    /// thread.
    pub const AMSAFE: u32 = 1;
    /// The function is not commutative: operands are combined in image and element order.
    pub const NONCOMM: u32 = 2;
}

/// A (prefix) reduction callback, with the arguments of the design notes:
/// `(results, result_count, left_operands, left_count, right_operands, elem_size, flags, arg)`.
///
/// It must write `result_count` results: result `i` is the combination, in order, of every
/// left operand and of right operands `0..=i`. A reduction always gets `result_count == 1`.
/// `flags` holds `NONCOMM` when the entry was registered with it; `arg` is the call's argument.
pub type ReduceFn = dyn Fn(&mut [u8], usize, &[u8], usize, &[u8], usize, u32, u32) + Send + Sync;

/// One entry of the function table given to `Coll::init`.
#[derive(Clone)]
pub struct FnEntry {
    /// The callback.
    pub f: Arc<ReduceFn>,
    /// `fn_flags` bits.
    pub flags: u32,
}

impl std::fmt::Debug for FnEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FnEntry")
            .field("flags", &self.flags)
            .finish()
    }
}

impl FnEntry {
    /// An entry for `f` with `flags`.
    pub fn new<F>(flags: u32, f: F) -> FnEntry
    where
        F: Fn(&mut [u8], usize, &[u8], usize, &[u8], usize, u32, u32) + Send + Sync + 'static,
    {
        FnEntry {
            f: Arc::new(f),
            flags,
        }
    }
}
