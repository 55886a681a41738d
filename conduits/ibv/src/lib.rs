//! amnet ibv conduit: InfiniBand and RoCE through the verbs interface.
//!
//! The conduit's protocol is written against the [`verbs::Verbs`] trait, which has two
//! implementations:
//!
//! - `rdma::RdmaDevice`, over libibverbs (rdma-core), for real InfiniBand and RoCE HCAs
//!   (cargo feature `ibv`; build.rs then compiles a small C shim and links libibverbs);
//! - [`emu::EmuDevice`], an emulated device that keeps verbs' semantics between the processes
//!   of one host (registered regions with keys and access flags checked on every access, RC
//!   ordering, receive completions with immediate data, receiver-not-ready, access errors,
//!   8-byte atomics, flushes), so that the protocol runs unchanged as a real multi-process
//!   job where no RDMA device exists. It is a test device and is documented as one.

// Under `--cfg loom` only the emulated device's queues are built, for their model.
#[cfg(not(loom))]
mod conduit;
pub mod emu;
#[cfg(all(feature = "ibv", not(loom)))]
pub mod rdma;
#[cfg(not(loom))]
mod rma;
pub mod verbs;
#[cfg(not(loom))]
mod wire;

#[cfg(not(loom))]
pub use conduit::{emu_prefix, open, IbvConduit, EAGER_MAX, MAX_MEDIUM};
