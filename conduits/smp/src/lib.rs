//! amnet smp conduit: ranks on one host, as processes (POSIX shared memory) or as threads of
//! one process (for unit tests, loom models and benches).
//!
//! Active messages travel through lock-free rings ([`ring`](crate::ring) has the protocol);
//! every rank maps every peer's segment, so Long payloads and put/get are plain copies. The
//! send and poll paths make no system call, take no lock and allocate nothing.

pub mod bell;
mod conduit;
mod ctl;
pub mod ring;
mod shm;
mod spawn;
mod threads;
mod wire;

pub use conduit::{SmpConduit, ThreadExit, ThreadShared, MAX_MEDIUM};
pub use ctl::MAX_RANKS;
pub use shm::{sweep_stale, unlink as unlink_shared, unlink_prefix, Region as SharedRegion};
pub use spawn::SmpJob;
pub use threads::{run_threads, RankOutcome};
