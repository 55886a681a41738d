//! The collectives in the UPC/GASNet shape: the form the C layer sits on.
//!
//! Every operation is a method of [`Collectives`], implemented for [`Coll`](crate::Coll),
//! in a blocking and a non-blocking (`_nb`) form: broadcast, scatter, gather, gather_all and
//! exchange with their multiple-address (`m`) and variable-size (`_v`) forms, the array
//! reductions (reduce, reduce_to_all, prefix_reduce, exclusive_prefix_reduce) and the vector
//! reductions (reduce_elems, reduce_elems_to_all, scan_elems, exclusive_scan_elems). They
//! take raw [`Addr`]esses, byte counts, a [`Layout`] for the array reductions, a function
//! table index and a `u32` word of [`flags`]; a non-blocking call returns a [`CollHandle`]
//! that [`Coll::try_sync`](crate::Coll::try_sync), [`Coll::wait_sync`](crate::Coll::wait_sync)
//! and their `_all`/`_some` forms complete.
//!
//! An address is a segment offset ([`Addr::seg`]) or a pointer that only the unsafe
//! [`Addr::ptr`] makes. Every operation takes addresses and is `unsafe`: its caller vouches
//! that pointer addresses stay valid and untouched until the collective is synced on its
//! rank (the trait's `# Safety`). The safe form of the same operations is the typed API
//! ([`Comm`](crate::Comm)), which lends the library only memory it borrows for exactly that
//! long.
//!
//! ```no_run
//! use amnet::coll::raw::{flags, Addr, Collectives};
//! use amnet::coll::Coll;
//!
//! /// Rank 0's 8 bytes at segment offset 0 go to offset 64 of every rank's segment.
//! fn bcast(coll: &Coll) -> amnet::Result<()> {
//!     // SAFETY: segment addresses only; the library checks them against the segment.
//!     unsafe {
//!         coll.broadcast(coll.world(), Addr::seg(64), 0, Addr::seg(0), 8, flags::ALLSYNC | flags::SINGLE)
//!     }
//! }
//! ```
//!
//! Safe code cannot make a collective write through a pointer; both the address and the
//! call need `unsafe`:
//!
//! ```compile_fail,E0133
//! use amnet::coll::raw::{flags, Addr, Collectives};
//! use amnet::coll::Coll;
//!
//! fn scribble(coll: &Coll) -> amnet::Result<()> {
//!     let dst = unsafe { Addr::ptr(0x1000 as *mut u8) };
//!     coll.broadcast(coll.world(), dst, 0, Addr::seg(0), 8, flags::ALLSYNC | flags::SINGLE)
//! }
//! ```
//!
//! ```compile_fail,E0133
//! use amnet::coll::raw::Addr;
//!
//! let dst = Addr::ptr(0x1000 as *mut u8); // error: call to unsafe function
//! ```
//!
//! ```compile_fail,E0423
//! use amnet::coll::raw::{Addr, RawPtr};
//!
//! let dst = Addr::Ptr(RawPtr(0x1000)); // error: RawPtr's field is private
//! ```
//!
//! The same types are also exported at the crate root.

pub use crate::api::Collectives;
pub use crate::types::{fn_flags, Addr, CollHandle, FnEntry, Layout, RawPtr, ReduceFn};
pub use amnet_sync_modes::{flags, InSync, Mode, OutSync};
