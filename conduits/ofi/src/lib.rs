//! amnet ofi conduit: active messages and RMA over libfabric.
//!
//! libfabric is how HPC software reaches today's fabrics (Slingshot's cxi, EFA, Omni-Path,
//! verbs, tcp, shm) through one interface. [`OfiConduit`] carries active messages over its
//! tagged messages in the manner of Open MPI's OFI MTL (spec/ofi.md); the umbrella crate's
//! feature `amnet/ofi` selects it with `AMNET_CONDUIT=ofi` or `amrun --conduit ofi`. Its
//! pieces:
//!
//! - `ffi`: the bindings, through a small C file (`src/shim.c`) that build.rs compiles against
//!   the installed headers, since libfabric's data-path calls are static inline functions;
//! - `provider`: provider selection (`AMNET_OFI_PROVIDER_INCLUDE` / `_EXCLUDE`, the first
//!   acceptable answer of `fi_getinfo`, RMA and the full tag layout's capabilities where the
//!   chosen provider offers them);
//! - `rma`: native put and get with `fi_write` / `fi_read` into the peers' registered
//!   segments, where the provider offers RMA;
//! - [`raw`]: one open endpoint with tagged sends and receives and completion-queue reads,
//!   public for the benchmark's raw floor;
//! - [`tag`]: the layouts of job, source rank and message class in the 64-bit tag
//!   (`AMNET_OFI_TAG_MODE`), with the limits each implies checked, never wrapped;
//!   [`raw::OfiEndpoint::tag_layout`] resolves one against the chosen provider.
//!
//! Building this crate needs
//! libfabric 1.10 or later with its headers (`libfabric-dev`; `ci/install-ofi.sh`); the
//! default build of the workspace does not include it.

mod conduit;
mod ffi;
mod provider;
pub mod raw;
mod rma;
pub mod tag;

pub use conduit::{OfiConduit, EAGER_MAX, MAX_MEDIUM};
