//! amnet mpi conduit: active messages over MPI.
//!
//! Each rank is one process of an MPI job (started by `mpirun`, or by `amrun --conduit mpi`,
//! whose spawner is `amnet_launch::mpi`; the program must be built with the umbrella crate's
//! `mpi` feature). Active messages
//! travel as non-blocking point-to-point messages on a private duplicate of
//! `MPI_COMM_WORLD`, so a client may use MPI itself, on the world communicator, in the same
//! program. Flow control is credit-based and replies have credits, tags and receives of their
//! own, so a handler that replies never waits behind requests. Put/get run natively with MPI
//! one-sided communication (a window over every rank's segment, a passive-target epoch for the
//! job's life) when a probe at attach finds it working on every rank, and on the core's
//! AM-based path otherwise. On the native path Long payloads (from 256 bytes, by default) are
//! put straight into the target segment before their header is sent; on the AM path those
//! above 64 KiB are received straight into it. Barriers come from the core. The design note
//! is `src/README.md`.
//!
//! ```no_run
//! use amnet::{Builder, ConduitKind, HandlerTable};
//!
//! # fn main() -> amnet::Result<()> {
//! // The same as `amnet::init()` with AMNET_CONDUIT=mpi (the umbrella crate's `mpi` feature).
//! let ep = Builder::new().conduit(ConduitKind::Mpi).init()?;
//! ep.attach(HandlerTable::new(), 1 << 20)?;
//! ep.barrier()?;
//! # Ok(()) }
//! ```
//!
//! Building needs an MPI library with its compiler wrapper (`mpicc`) and libclang; on Debian
//! `ci/install-mpi.sh` installs Open MPI and libclang.

mod conduit;
mod raw;
mod rma;
mod segment;
mod wire;

pub use conduit::{MpiConduit, MAX_MEDIUM};

/// The rsmpi crate this conduit is built on, for clients that also use MPI directly (on the
/// world communicator, never on amnet's private one).
pub use mpi;

/// Run `f` while holding the lock that serializes the conduit's MPI calls, when MPI granted
/// less than `MPI_THREAD_MULTIPLE` ([`MpiConduit::thread_level`]); run it directly otherwise.
///
/// A client that calls MPI itself from a thread while other threads drive amnet needs this
/// below `MPI_THREAD_MULTIPLE`. `f` must not call amnet (the lock is not reentrant) and must
/// not block in MPI waiting for another rank.
pub fn with_mpi_lock<R>(f: impl FnOnce() -> R) -> R {
    raw::locked(f)
}
