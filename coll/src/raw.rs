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
//! [`Addr::ptr`] makes: its caller vouches that the memory stays valid and untouched until
//! the collective is synced on its rank (see its `# Safety`). Everything else here is safe.
//!
//! ```no_run
//! use amnet::coll::raw::{flags, Addr, Collectives};
//! use amnet::coll::Coll;
//!
//! /// Rank 0's 8 bytes at segment offset 0 go to offset 64 of every rank's segment.
//! fn bcast(coll: &Coll) -> amnet::Result<()> {
//!     coll.broadcast(coll.world(), Addr::seg(64), 0, Addr::seg(0), 8, flags::ALLSYNC | flags::SINGLE)
//! }
//! ```
//!
//! The same types are also exported at the crate root.

pub use crate::api::Collectives;
pub use crate::types::{fn_flags, Addr, CollHandle, FnEntry, Layout, RawPtr, ReduceFn};
pub use amnet_sync_modes::{flags, InSync, Mode, OutSync};
