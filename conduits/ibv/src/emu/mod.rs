//! The emulated device: verbs' semantics between the processes of one host, for testing the
//! ibv conduit where no RDMA device exists (`AMNET_IBV_DEVICE=emu`). It is a test device: it
//! moves bytes with `process_vm_writev` / `process_vm_readv` and keeps its queues in shared
//! memory, so its figures say nothing about a real HCA's.
//!
//! Each opened device is one POSIX shared-memory object (`/dev/shm/{prefix}{pid}-{n}`)
//! holding, as 64-bit words that every access reaches atomically:
//!
//! ```text
//! header | MR table (seqlocked entries) | QP table | one receive ring per QP | CQ rings | SRQ rings
//! ```
//!
//! What a real HCA does at the responder, the emulated device does in the requester's
//! process, at `post_send` or at a later `poll_cq` of the requester (its progress): it checks
//! the local keys against its own MR table and the remote key, range and access against the
//! peer's, takes a receive buffer from the peer's receive queue or shared receive queue
//! (none: receiver not ready, retried until the peer's RNR timer runs out `rnr_retry` times),
//! moves the bytes into or out of the peer's memory, and pushes the peer's receive completion
//! (with its immediate data) into the peer's completion queue. A queue pair runs its requests
//! in the order they were posted, so RC ordering holds; one waiting on RNR holds back those
//! after it. Atomics take a lock word in the target device's header, so they are atomic with
//! respect to each other (`IBV_ATOMIC_HCA`), not to the target's own CPU accesses.
//!
//! Errors follow verbs: a local key, range or access violation completes `LOC_PROT_ERR`, a
//! remote one `REM_ACCESS_ERR`, a receive buffer that is too small `LOC_LEN_ERR` at the
//! receiver and `REM_INV_REQ_ERR` at the requester, a peer that posts no receive
//! `RNR_RETRY_EXC_ERR`, a peer queue pair that is gone or not connected `RETRY_EXC_ERR` after
//! the transport timeout; the queue pairs involved enter ERR, and every request outstanding
//! on them completes `WR_FLUSH_ERR`. [`EmuDevice::fail_next`] injects an error completion.
//!
//! The send queue is accounted as on hardware: a request holds its slot until a signaled
//! completion at or after it has been polled, so a protocol that never signals fills it.

#[cfg(not(loom))]
mod device;
pub(crate) mod ring;

#[cfg(not(loom))]
pub use device::{EmuCq, EmuDevice, EmuLimits, EmuMr, EmuQp, EmuSrq};
