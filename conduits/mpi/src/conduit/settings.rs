//! The conduit's settings, resolved once at start-up from the core's configuration source
//! (`amnet_core::config`): the `AMNET_MPI_*` variables, `AMNET_VERBOSE`, `AMNET_RMA` and
//! `AMNET_BOOT_TIMEOUT`. The ranges each accepts are in `config::VARS`; the constants here
//! are checked against them at compile time.

use std::time::Duration;

use amnet_core::config::{vars, Kind, Source};
use amnet_core::Result;

use crate::raw;
use crate::wire;

const DEFAULT_CREDITS: u32 = 32;
/// Default of `AMNET_MPI_LONG_PUT`: Long payloads of at least this many bytes are put into the
/// target segment when put/get run natively; smaller ones travel inline with the header.
const DEFAULT_LONG_PUT: usize = 256;
/// Largest `AMNET_MPI_LONG_PUT`: every payload too large to travel inline is put.
const MAX_LONG_PUT: usize = wire::MAX_INLINE + 1;
/// At most this many credits per peer and class: every outstanding separate Long holds a
/// credit, so the data tag index cannot wrap onto a transfer still in flight.
const MAX_CREDITS: u32 = 1024;
const _: () = assert!(2 * MAX_CREDITS < wire::LONG_TAGS);

/// The upper bound `config::VARS` gives a count variable.
const fn max_of(kind: Kind) -> u64 {
    match kind {
        Kind::Count { max, .. } => max,
        _ => 0,
    }
}
const _: () = assert!(max_of(vars::MPI_CREDITS.kind) == MAX_CREDITS as u64);
const _: () = assert!(max_of(vars::MPI_LONG_PUT.kind) == MAX_LONG_PUT as u64);
const _: () = assert!(max_of(vars::MPI_RMA_CHUNK.kind) == raw::RMA_CHUNK as u64);

/// Settings read from the environment.
#[derive(Debug, Clone)]
pub(super) struct Settings {
    pub(super) credits: u32,
    pub(super) grace: Duration,
    pub(super) boot_timeout: Duration,
    pub(super) verbose: bool,
    /// No RMA window: put/get on the core's AM path (`AMNET_RMA=am`).
    pub(super) rma_am: bool,
    /// File where the rank that ends the job with a non-zero code records `rank code`, for the
    /// launcher's report (`AMNET_MPI_REPORT`, set by the spawner).
    pub(super) report: Option<std::path::PathBuf>,
    /// The spawner's socket that every rank keeps a connection to, so that the spawner can
    /// name a rank that died (`AMNET_MPI_LIFELINE`, set by the spawner for Hydra, which names
    /// none).
    pub(super) lifeline: Option<std::path::PathBuf>,
    /// Bytes per `MPI_Put`/`MPI_Get` of the native put/get path (`AMNET_MPI_RMA_CHUNK`, at
    /// most and by default [`raw::RMA_CHUNK`]); larger transfers are split.
    pub(super) rma_chunk: usize,
    /// A Long payload of at least this many bytes is put into the target segment when
    /// put/get run natively (`AMNET_MPI_LONG_PUT`, 1..=[`MAX_LONG_PUT`], default
    /// [`DEFAULT_LONG_PUT`]).
    pub(super) long_put: usize,
}

impl Settings {
    pub(super) fn resolve(src: &Source) -> Result<Settings> {
        Ok(Settings {
            rma_chunk: src
                .count_usize(&vars::MPI_RMA_CHUNK)?
                .unwrap_or(raw::RMA_CHUNK),
            long_put: src
                .count_usize(&vars::MPI_LONG_PUT)?
                .unwrap_or(DEFAULT_LONG_PUT),
            credits: src
                .count_u32(&vars::MPI_CREDITS)?
                .unwrap_or(DEFAULT_CREDITS),
            grace: src
                .seconds(&vars::MPI_EXIT_GRACE)?
                .unwrap_or(Duration::from_secs(2)),
            boot_timeout: src.boot_timeout()?,
            verbose: src.flag(&vars::VERBOSE)?.unwrap_or(false),
            rma_am: src.choice(&vars::RMA)? == Some("am"),
            report: src.text(&vars::MPI_REPORT).map(Into::into),
            lifeline: src.text(&vars::MPI_LIFELINE).map(Into::into),
        })
    }
}
