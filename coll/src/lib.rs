//! amnet collectives: broadcast, scatter, gather, gather_all, exchange, reduce, reduce_to_all
//! and (exclusive) prefix reductions of distributed arrays, the vector reductions of MPI
//! (`reduce_elems`, `reduce_elems_to_all`, `scan_elems`, `exclusive_scan_elems`), with the
//! nine UPC-style synchronization modes of `amnet-sync-modes`, single- and multiple-address
//! ("m") forms, variable-contribution ("v") forms, in-place forms, images (several language
//! threads per rank), aggregation, and a registered function table with built-in reductions.
//!
//! ```no_run
//! use amnet::coll::{flags, Addr, Coll, RedOp};
//! use amnet::Endpoint;
//!
//! /// On an attached endpoint: rank 0's 8 bytes at segment offset 0 go to offset 64 of every
//! /// rank's segment, then every rank gets the sum of the rank numbers.
//! fn example(ep: &Endpoint) -> amnet::Result<u64> {
//!     let coll = Coll::init(ep, None, 0, &[])?;
//!     coll.broadcast(coll.world(), Addr::seg(64), 0, Addr::seg(0), 8, flags::ALLSYNC | flags::SINGLE)?;
//!     coll.reduce_to_all_typed(RedOp::Sum, u64::from(ep.rank()), flags::ALLSYNC)
//! }
//! ```
//!
//! See `spec/coll.md` for the full semantics.

mod algs;
mod api;
pub mod builtin;
mod create;
mod engine;
mod fasthash;
mod plan;
mod reduce;
mod sched;
mod select;
mod team;
mod types;

pub use amnet_sync_modes::{flags, InSync, Mode, OutSync};
pub use api::{Coll, FlowStats};
pub use builtin::{Elem, ElemType, Loc, RedOp};
pub use team::Team;
pub use types::{fn_flags, Addr, CollHandle, FnEntry, Layout, RawPtr, ReduceFn};
