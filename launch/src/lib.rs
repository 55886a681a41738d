//! amnet's launcher: the job supervisor, each conduit's spawner and the `amrun` command.
//!
//! Ranks never link this crate; `amrun` and test harnesses that start jobs of their own do.
//! [`launch_job`] starts a job of [`LaunchOptions::ranks`] processes on a conduit and returns
//! its exit code:
//!
//! - smp and udp jobs run under [`supervise`], with the conduit's job type
//!   ([`amnet_smp::SmpJob`], [`amnet_udp::spawn::UdpJob`]) saying what each rank needs;
//! - mpi jobs run under the MPI library's own launcher ([`mpi::run`]).
//!
//! ```no_run
//! use std::time::Duration;
//! use amnet_launch::{launch_job, LaunchOptions};
//!
//! # fn main() -> amnet::Result<()> {
//! let opts = LaunchOptions::new(4, "target/release/examples/hello");
//! let code = launch_job(&LaunchOptions { timeout: Some(Duration::from_secs(60)), ..opts })?;
//! assert_eq!(code, 0);
//! # Ok(()) }
//! ```

pub mod mpi;
mod supervise;

use amnet_core::config::Source;
use amnet_core::{ConduitKind, Result};

pub use supervise::{signal_name, supervise, supervise_with_log, LaunchOptions};

/// Start the job `opts` describes and return its exit code, printing the launcher's messages
/// (a rank that died, a timeout) on stderr as `amrun: ...`.
pub fn launch_job(opts: &LaunchOptions) -> Result<i32> {
    launch_job_with_log(opts, &mut |m: &str| amnet_core::diag!("amrun: {m}"))
}

/// [`launch_job`], handing the launcher's messages to `log`.
pub fn launch_job_with_log(opts: &LaunchOptions, log: &mut dyn FnMut(&str)) -> Result<i32> {
    let src = Source::env();
    match opts.conduit {
        ConduitKind::Smp => {
            let mut job = amnet_smp::SmpJob::new(opts.ranks)?;
            supervise_with_log(&mut job, opts, log)
        }
        // The ofi and ibv conduits' ranks find each other through the udp job's bootstrap
        // service.
        ConduitKind::Udp | ConduitKind::Ofi | ConduitKind::Ibv => {
            let mut job = amnet_udp::spawn::UdpJob::new(opts.ranks, &src)?;
            let code = supervise_with_log(&mut job, opts, log);
            if opts.conduit == ConduitKind::Ofi {
                // The regions of this host's ranks on libfabric's shm provider, named after
                // the job's bootstrap port: those of ranks killed before they could unlink
                // their own (amnet_ofi::raw).
                let port = job.boot_addr().port();
                amnet_smp::unlink_prefix(&format!("amnet-ofi-{port}-"));
            }
            if opts.conduit == ConduitKind::Ibv {
                // The emulated device's objects of ranks killed before they connected.
                amnet_smp::unlink_prefix(&format!("amnet-ibv-{}-", job.boot_addr().port()));
            }
            // The host-local bypass's group objects of this host's ranks killed while they
            // started (each is named after its creator's process, now gone).
            amnet_smp::sweep_stale();
            let code = code?;
            for e in job.boot_errors() {
                log(&format!("bootstrap: {e}"));
            }
            Ok(code)
        }
        ConduitKind::Mpi => mpi::run(opts, log),
        other => Err(amnet_core::Error::Config(format!(
            "the launcher has no spawner for the {other} conduit"
        ))),
    }
}
