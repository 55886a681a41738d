//! amnet: an active-message communication library for PGAS runtimes.
//!
//! ```no_run
//! use amnet::{HandlerTable, Token};
//! use std::sync::atomic::{AtomicU32, Ordering};
//! use std::sync::Arc;
//!
//! # fn main() -> amnet::Result<()> {
//! let ep = amnet::init()?;
//! let hits = Arc::new(AtomicU32::new(0));
//! let mut table = HandlerTable::new();
//! let h = hits.clone();
//! table.register(200, move |_tok: &mut Token<'_>, args: &[u32], _payload: &[u8]| {
//!     h.fetch_add(args[0], Ordering::Relaxed);
//! })?;
//! ep.attach(table, 1 << 20)?;
//! let next = (ep.rank() + 1) % ep.size();
//! ep.request_short(next, 200, &[1])?;
//! ep.wait_until(|| hits.load(Ordering::Relaxed) == 1)?;
//! ep.put(next, 0, b"hello")?;
//! ep.barrier()?;
//! # Ok(()) }
//! ```
//!
//! Run it with `amrun -n 4 ./program`. The conduit is chosen at run time by `AMNET_CONDUIT`
//! (default `smp`), or in code with a [`Builder`], whose settings win over the environment:
//!
//! ```no_run
//! use amnet::{Builder, ConduitKind};
//! use std::time::Duration;
//!
//! # fn main() -> amnet::Result<()> {
//! let ep = Builder::new()
//!     .conduit(ConduitKind::Udp)
//!     .boot_timeout(Duration::from_secs(30))
//!     .stats(true)
//!     .init()?;
//! # Ok(()) }
//! ```
//!
//! Every variable, its default and what it accepts is in [`config::VARS`] and the README.
//! See `spec/core.md` for the semantics.

/// Collectives: broadcast, scatter, gather, gather_all, exchange, reductions and prefix
/// reductions with UPC-style sync modes (see `spec/coll.md`).
pub use amnet_coll as coll;
/// The IN/OUT synchronization modes and flags of the collectives.
pub use amnet_sync_modes as sync_modes;

use std::time::Duration;

pub use amnet_core::barrier_flags;
pub use amnet_core::conduit;
pub use amnet_core::config;
pub use amnet_core::handlers;
pub use amnet_core::host;
pub use amnet_core::{
    AmCounts, AtomicDomain, AtomicElem, AtomicFuture, AtomicHandle, AtomicOp, AtomicOps,
    AtomicType, Backoff, Category, ConduitKind, Endpoint, EndpointConfig, Error, Handle, HandlerFn,
    HandlerTable, HostMap, Layer, LayerHooks, Prepared, PreparedReply, Rank, Result, RmaPath,
    Source, Stats, Token, FIRST_CLIENT_HANDLER, MAX_ARGS,
};
pub use amnet_smp::{RankOutcome, ThreadExit};

use amnet_core::config::vars;

/// The conduits this build knows, as named by `AMNET_CONDUIT` and `amrun --conduit`.
pub const CONDUITS: &[ConduitKind] = &[
    ConduitKind::Smp,
    ConduitKind::Udp,
    #[cfg(feature = "mpi")]
    ConduitKind::Mpi,
    #[cfg(feature = "ofi")]
    ConduitKind::Ofi,
    // (Under `--cfg loom`, for other crates' models, the ibv crate builds only its queues.)
    #[cfg(not(loom))]
    ConduitKind::Ibv,
];

/// The conduit selected by `AMNET_CONDUIT` (default smp), checked against [`CONDUITS`].
pub fn selected_conduit() -> Result<ConduitKind> {
    Builder::new().selected_conduit()
}

/// Join the job this process belongs to (as set up by `amrun`; without it, a job of one rank)
/// on the conduit named by `AMNET_CONDUIT`, with the settings of the environment. Then call
/// [`Endpoint::attach`]. [`Builder`] sets the same options from code.
pub fn init() -> Result<Endpoint> {
    Builder::new().init()
}

/// Run an N-rank job as N threads of this process (smp conduit, thread mode) and return each
/// rank's outcome in rank order. `f` receives the rank's endpoint, not yet attached.
pub fn run_threads<T, F>(ranks: u32, f: F) -> Result<Vec<RankOutcome<T>>>
where
    T: Send,
    F: Fn(Endpoint) -> T + Sync,
{
    Builder::new().run_threads(ranks, f)
}

/// Options for joining a job, set in code. Each wins over the environment variable it names;
/// what is not set comes from the environment, then the default (see [`config`]).
///
/// ```no_run
/// # fn main() -> amnet::Result<()> {
/// let ep = amnet::Builder::new().spin(100).verbose(true).init()?;
/// # Ok(()) }
/// ```
///
/// A setter given a value its variable does not accept makes [`Builder::init`] (and
/// [`Builder::run_threads`]) fail with [`Error::Config`] naming it.
#[derive(Debug, Clone, Default)]
pub struct Builder {
    source: Source,
    error: Option<Error>,
}

impl Builder {
    /// No options set: everything from the environment.
    pub fn new() -> Self {
        Builder::default()
    }

    fn with(mut self, var: &config::Var, value: String) -> Self {
        if self.error.is_none() {
            if let Err(e) = self.source.set(var.name, value) {
                self.error = Some(e);
            }
        }
        self
    }

    /// The conduit (`AMNET_CONDUIT`).
    pub fn conduit(self, kind: ConduitKind) -> Self {
        self.with(&vars::CONDUIT, kind.name().into())
    }

    /// Put/get always on the AM-based reference path (`AMNET_RMA=am`) when true; the
    /// conduit's native path when it has one (`AMNET_RMA=native`) when false.
    pub fn rma_am_only(self, am: bool) -> Self {
        self.with(&vars::RMA, if am { "am" } else { "native" }.into())
    }

    /// Idle polls a wait spins before it yields (`AMNET_SPIN`).
    pub fn spin(self, polls: u32) -> Self {
        self.with(&vars::SPIN, polls.to_string())
    }

    /// Print this rank's counters at exit (`AMNET_STATS`).
    pub fn stats(self, on: bool) -> Self {
        self.with(&vars::STATS, flag(on))
    }

    /// Print the configuration at attach on rank 0 (`AMNET_VERBOSE`).
    pub fn verbose(self, on: bool) -> Self {
        self.with(&vars::VERBOSE, flag(on))
    }

    /// Start a progress thread at attach (`AMNET_PROGRESS_THREAD`; see
    /// [`Endpoint::start_progress_thread`]).
    pub fn progress_thread(self, on: bool) -> Self {
        self.with(&vars::PROGRESS_THREAD, flag(on))
    }

    /// How long start-up and attach wait for every rank (`AMNET_BOOT_TIMEOUT`; more than 0).
    pub fn boot_timeout(self, limit: Duration) -> Self {
        self.with(&vars::BOOT_TIMEOUT, secs(limit))
    }

    /// Compare every collective's arguments across ranks (`AMNET_COLL_CHECK`).
    pub fn coll_check(self, on: bool) -> Self {
        self.with(&vars::COLL_CHECK, flag(on))
    }

    /// Report a collective wait that makes no progress for `limit` and fail it with
    /// [`Error::Hang`] (`AMNET_HANG_TIMEOUT`; more than 0).
    pub fn hang_timeout(self, limit: Duration) -> Self {
        self.with(&vars::HANG_TIMEOUT, secs(limit))
    }

    /// udp: tag every datagram with the job's secret and drop those whose tag does not verify
    /// (`AMNET_UDP_AUTH`). Every rank of the job must agree.
    pub fn udp_auth(self, on: bool) -> Self {
        self.with(&vars::UDP_AUTH, flag(on))
    }

    /// Any other variable of [`config::VARS`] by name, for conduit tuning
    /// (`.var("AMNET_UDP_MTU", "9000")`). An empty value means the default whatever the
    /// environment says; an unknown name or a value the variable does not accept makes `init`
    /// fail.
    pub fn var(mut self, name: &str, value: impl Into<String>) -> Self {
        if self.error.is_none() {
            if let Err(e) = self.source.set(name, value) {
                self.error = Some(e);
            }
        }
        self
    }

    /// The settings so far, or the first error a setter met.
    pub fn source(&self) -> Result<&Source> {
        match &self.error {
            Some(e) => Err(e.clone()),
            None => Ok(&self.source),
        }
    }

    /// The conduit these settings select, checked against [`CONDUITS`].
    pub fn selected_conduit(&self) -> Result<ConduitKind> {
        let c = self.source()?.conduit()?;
        if CONDUITS.contains(&c) {
            Ok(c)
        } else {
            let built: Vec<&str> = CONDUITS.iter().map(|c| c.name()).collect();
            Err(Error::Config(format!(
                "AMNET_CONDUIT={:?}: this build has the conduits {built:?} (the mpi conduit \
                 needs the cargo feature amnet/mpi, the ofi conduit amnet/ofi)",
                c.name()
            )))
        }
    }

    /// Join the job this process belongs to (see [`init`]) with these settings.
    pub fn init(self) -> Result<Endpoint> {
        let kind = self.selected_conduit()?;
        let src = self.source;
        let conduit: Box<dyn amnet_core::Conduit> = match kind {
            ConduitKind::Smp => Box::new(amnet_smp::SmpConduit::new(&src)?),
            ConduitKind::Udp => {
                amnet_bypass::wrap(Box::new(amnet_udp::UdpConduit::new(&src)?), &src)?
            }
            #[cfg(feature = "mpi")]
            ConduitKind::Mpi => {
                amnet_bypass::wrap(Box::new(amnet_mpi::MpiConduit::new(&src)?), &src)?
            }
            #[cfg(feature = "ofi")]
            ConduitKind::Ofi => {
                amnet_bypass::wrap(Box::new(amnet_ofi::OfiConduit::new(&src)?), &src)?
            }
            #[cfg(not(loom))]
            ConduitKind::Ibv => amnet_bypass::wrap(amnet_ibv::open(&src)?, &src)?,
            other => return Err(Error::Config(format!("conduit {other} is not built in"))),
        };
        Endpoint::with_source(conduit, src)
    }

    /// Run an N-rank job as N threads of this process (smp conduit, thread mode) with these
    /// settings; see [`run_threads`].
    pub fn run_threads<T, F>(self, ranks: u32, f: F) -> Result<Vec<RankOutcome<T>>>
    where
        T: Send,
        F: Fn(Endpoint) -> T + Sync,
    {
        let src = self.source()?.clone();
        // Resolve once so that a bad setting is an error here, not a panic in every thread.
        amnet_core::EndpointConfig::resolve(&src, false)?;
        amnet_smp::run_threads(ranks, |c| {
            match Endpoint::with_source(Box::new(c), src.clone()) {
                Ok(ep) => f(ep),
                Err(e) => panic!("cannot create the endpoint: {e}"),
            }
        })
    }
}

fn flag(on: bool) -> String {
    if on { "1" } else { "0" }.into()
}

fn secs(d: Duration) -> String {
    // Zero is refused by the variable's rule, with its name.
    format!("{}", d.as_secs_f64())
}
