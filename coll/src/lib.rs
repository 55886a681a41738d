//! amnet collectives: broadcast, scatter, gather, gather_all, exchange, reduce, reduce_to_all
//! and (exclusive) prefix reductions of distributed arrays, the vector reductions of MPI
//! (`reduce_elems`, `reduce_elems_to_all`, `scan_elems`, `exclusive_scan_elems`), with the
//! nine UPC-style synchronization modes of `amnet-sync-modes`, single- and multiple-address
//! ("m") forms, variable-contribution ("v") forms, in-place forms, images (several language
//! threads per rank), aggregation, and a registered function table with built-in reductions.
//!
//! Two front doors:
//! - the typed API, safe: [`Comm`] (made by [`Coll::team`] or [`Coll::team_images`]) takes
//!   slices of [`Plain`] elements, [`SyncMode`] values and [`Op`] values (built-in reductions
//!   or closures); its non-blocking calls borrow their buffers for a [`scope`];
//! - the UPC/GASNet shape, [`raw::Collectives`]: addresses, byte counts, flag words and
//!   function-table indices, `unsafe` because the library writes through the addresses until
//!   a sync that nothing ties to a borrow.
//!
//! ```no_run
//! use amnet::coll::{Coll, Op};
//! use amnet::Endpoint;
//!
//! /// On an attached endpoint: rank 0's three values go to every rank, then every rank gets
//! /// the elementwise sums of every rank's vector.
//! fn example(ep: &Endpoint) -> amnet::Result<[u64; 2]> {
//!     let coll = Coll::init(ep, None, 0, &[])?;
//!     let world = coll.team(coll.world());
//!     let mut params = [0.0f64; 3];
//!     if world.rank() == 0 {
//!         params = [0.5, 1.5, 2.5];
//!     }
//!     world.broadcast(&mut params, 0)?;
//!     let mut total = [0u64; 2];
//!     world.reduce_to_all(&[u64::from(ep.rank()), 1], &mut total, Op::sum())?;
//!     Ok(total)
//! }
//! ```
//!
//! See `spec/coll.md` for the full semantics.

mod algs;
mod api;
pub mod builtin;
mod create;
mod detach;
mod engine;
mod fasthash;
mod hier;
mod plan;
pub mod raw;
mod reduce;
mod sched;
mod select;
mod shm;
mod team;
mod typed;
mod types;

pub use amnet_sync_modes::{flags, InSync, Mode, OutSync};
pub use api::{Coll, FlowStats};
pub use builtin::{Elem, ElemType, Loc, RedOp};
pub use team::Team;
pub use typed::{scope, Comm, ElemKind, Op, Plain, Request, Scope, SyncMode};
pub use types::{fn_flags, Addr, CollHandle, FnEntry, Layout, RawPtr, ReduceFn};
