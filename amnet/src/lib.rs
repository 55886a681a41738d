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
//! (default `smp`). See `spec/core.md` for the semantics.

/// Collectives: broadcast, scatter, gather, gather_all, exchange, reductions and prefix
/// reductions with UPC-style sync modes (see `spec/coll.md`).
pub use amnet_coll as coll;
/// The IN/OUT synchronization modes and flags of the collectives.
pub use amnet_sync_modes as sync_modes;

pub use amnet_core::barrier_flags;
pub use amnet_core::launch;
pub use amnet_core::{
    AmCounts, Category, Conduit, Config, Endpoint, Error, Handle, HandlerFn, HandlerTable, Rank,
    Result, Stats, Token, FIRST_CLIENT_HANDLER, MAX_ARGS,
};
pub use amnet_smp::RankOutcome;

/// The conduits this build knows, as named by `AMNET_CONDUIT` and `amrun --conduit`.
#[cfg(not(feature = "mpi"))]
pub const CONDUITS: &[&str] = &["smp", "udp"];
/// The conduits this build knows, as named by `AMNET_CONDUIT` and `amrun --conduit`.
#[cfg(feature = "mpi")]
pub const CONDUITS: &[&str] = &["smp", "udp", "mpi"];

/// The conduit selected by `AMNET_CONDUIT` (default `smp`).
pub fn selected_conduit() -> Result<String> {
    let c = std::env::var("AMNET_CONDUIT").unwrap_or_default();
    let c = if c.is_empty() { "smp".to_string() } else { c };
    if CONDUITS.contains(&c.as_str()) {
        Ok(c)
    } else {
        Err(Error::Config(format!(
            "AMNET_CONDUIT={c:?}: this build has the conduits {CONDUITS:?}"
        )))
    }
}

/// Join the job this process belongs to (as set up by `amrun`; without it, a job of one rank)
/// on the conduit named by `AMNET_CONDUIT`. Then call [`Endpoint::attach`].
pub fn init() -> Result<Endpoint> {
    match selected_conduit()?.as_str() {
        "smp" => Endpoint::new(Box::new(amnet_smp::SmpConduit::from_env()?)),
        "udp" => Endpoint::new(Box::new(amnet_udp::UdpConduit::from_env()?)),
        #[cfg(feature = "mpi")]
        "mpi" => Endpoint::new(Box::new(amnet_mpi::MpiConduit::from_env()?)),
        other => Err(Error::Config(format!("conduit {other} is not built in"))),
    }
}

/// Run an N-rank job as N threads of this process (smp conduit, thread mode) and return each
/// rank's outcome in rank order. `f` receives the rank's endpoint, not yet attached.
pub fn run_threads<T, F>(ranks: u32, f: F) -> Result<Vec<RankOutcome<T>>>
where
    T: Send,
    F: Fn(Endpoint) -> T + Sync,
{
    amnet_smp::run_threads(ranks, |c| match Endpoint::new(Box::new(c)) {
        Ok(ep) => f(ep),
        Err(e) => panic!("cannot create the endpoint: {e}"),
    })
}

/// Start a job of `opts.ranks` processes on the conduit named in `opts.conduit` and return
/// its exit code (what `amrun` does).
pub fn launch_job(opts: &launch::LaunchOptions) -> Result<i32> {
    launch_job_with_log(opts, &mut |m: &str| eprintln!("amrun: {m}"))
}

/// [`launch_job`], handing the launcher's messages (a rank that died, a timeout) to `log`.
pub fn launch_job_with_log(opts: &launch::LaunchOptions, log: &mut dyn FnMut(&str)) -> Result<i32> {
    match opts.conduit.as_str() {
        "smp" => amnet_smp::run(opts, log),
        "udp" => amnet_udp::spawn::run(opts, log),
        #[cfg(feature = "mpi")]
        "mpi" => amnet_mpi::run(opts, log),
        other => Err(Error::Config(format!(
            "unknown conduit {other:?}; this build has {CONDUITS:?}"
        ))),
    }
}
