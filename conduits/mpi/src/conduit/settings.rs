//! The conduit's settings, read once from the environment at start-up: the `AMNET_MPI_*`
//! variables and `AMNET_VERBOSE` (and, through the core, `AMNET_BOOT_TIMEOUT`).

use std::time::Duration;

use amnet_core::{Error, Result};

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

/// Settings read from the environment.
#[derive(Debug, Clone)]
pub(super) struct Settings {
    pub(super) credits: u32,
    pub(super) grace: Duration,
    pub(super) boot_timeout: Duration,
    pub(super) verbose: bool,
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

fn env_flag(name: &str) -> Result<bool> {
    match std::env::var(name) {
        Err(_) => Ok(false),
        Ok(v) => match v.as_str() {
            "" | "0" | "no" | "false" => Ok(false),
            "1" | "yes" | "true" => Ok(true),
            other => Err(Error::Config(format!("{name}={other:?}: expected 0 or 1"))),
        },
    }
}

impl Settings {
    pub(super) fn from_env() -> Result<Settings> {
        let credits = match std::env::var("AMNET_MPI_CREDITS") {
            Err(_) => DEFAULT_CREDITS,
            Ok(v) => match v.parse::<u32>() {
                Ok(c) if (2..=MAX_CREDITS).contains(&c) => c,
                _ => {
                    return Err(Error::Config(format!(
                        "AMNET_MPI_CREDITS={v:?}: expected a whole number in 2..={MAX_CREDITS}"
                    )))
                }
            },
        };
        let grace = match std::env::var("AMNET_MPI_EXIT_GRACE") {
            Err(_) => Duration::from_secs(2),
            Ok(v) => match v.parse::<f64>() {
                Ok(s) if s.is_finite() && s > 0.0 && s < 1e6 => Duration::from_secs_f64(s),
                _ => {
                    return Err(Error::Config(format!(
                        "AMNET_MPI_EXIT_GRACE={v:?}: expected a positive number of seconds"
                    )))
                }
            },
        };
        let boot_timeout = amnet_core::conduit::boot_timeout()?;
        let rma_chunk = match std::env::var("AMNET_MPI_RMA_CHUNK") {
            Err(_) => raw::RMA_CHUNK,
            Ok(v) => match v.parse::<usize>() {
                Ok(c) if (1..=raw::RMA_CHUNK).contains(&c) => c,
                _ => {
                    return Err(Error::Config(format!(
                        "AMNET_MPI_RMA_CHUNK={v:?}: expected a whole number of bytes in 1..={}",
                        raw::RMA_CHUNK
                    )))
                }
            },
        };
        let long_put = match std::env::var("AMNET_MPI_LONG_PUT") {
            Err(_) => DEFAULT_LONG_PUT,
            Ok(v) => match v.parse::<usize>() {
                Ok(c) if (1..=MAX_LONG_PUT).contains(&c) => c,
                _ => {
                    return Err(Error::Config(format!(
                        "AMNET_MPI_LONG_PUT={v:?}: expected a whole number of bytes in \
                         1..={MAX_LONG_PUT}"
                    )))
                }
            },
        };
        Ok(Settings {
            rma_chunk,
            long_put,
            credits,
            grace,
            boot_timeout,
            verbose: env_flag("AMNET_VERBOSE")?,
            report: std::env::var_os("AMNET_MPI_REPORT")
                .filter(|p| !p.is_empty())
                .map(Into::into),
            lifeline: std::env::var_os("AMNET_MPI_LIFELINE")
                .filter(|p| !p.is_empty())
                .map(Into::into),
        })
    }
}
