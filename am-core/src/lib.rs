//! amnet AM core: the active-message API that every conduit shares.
//!
//! An [`Endpoint`] is one rank's view of a job. After [`Endpoint::attach`] registers the
//! handler table and the segment (collectively), ranks exchange Short, Medium and Long
//! active messages, run handlers inside [`Endpoint::poll`] and blocking waits, move data with
//! put/get, synchronize with split-phase barriers and end the job with [`Endpoint::exit`].
//!
//! The transport is a [`Conduit`]; this crate holds everything above it. See `spec/core.md`
//! for the full semantics.

mod atomic;
mod backoff;
pub mod barrier;
pub mod conduit;
pub mod config;
pub mod credits;
pub mod diag;
mod endpoint;
mod error;
mod handler;
pub mod handlers;
pub mod host;
pub mod job;
pub mod layer;
mod lc;
pub mod mem;
mod npam;
mod progress;
mod rma;
mod segview;
mod shmbar;
mod stats;
pub mod sync;
mod vis;

pub use atomic::{
    AtomicDomain, AtomicElem, AtomicFuture, AtomicHandle, AtomicOp, AtomicOps, AtomicType,
};
pub use backoff::{now_ns, AwakeWindow, Backoff};
pub use barrier::flags as barrier_flags;
pub use conduit::{
    Category, Conduit, InMsg, LocalSegment, NativeAtomics, NativeRma, OutMsg, PreparedSlot,
    RmaTicket, HOST_SCRATCH_BYTES, LAYER_SCRATCH_BYTES, MAX_ARGS,
};
pub use config::{ConduitKind, Source};
pub use endpoint::{Endpoint, EndpointConfig};
pub use error::{Error, Result};
pub use handler::{HandlerFn, HandlerTable, Token, FIRST_CLIENT_HANDLER};
pub use handlers::Layer;
pub use host::HostMap;
pub use layer::LayerHooks;
pub use npam::{Prepared, PreparedReply};
pub use rma::{Handle, RmaPath, SyncFuture};
pub use segview::SegmentAtomic;
pub use stats::{AmCounts, Stats};

/// A rank number, `0..size`.
pub type Rank = u32;
