//! Exit and start-up scenarios, each a nested job of this program (`--scenario NAME`).
//!
//! Rank 0 of the suite starts the nested job, checks its exit code, that it ended in bounded
//! time, what the launcher reported, and that it left nothing in /dev/shm.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use amnet::{Endpoint, Error};
use amnet_launch::LaunchOptions;

use crate::state::{H_CHECK, H_COUNT, H_EXIT, H_EXIT_VIA_REPLY};
use crate::{handler_table, State, Test, Verdict};

/// One nested-job scenario.
pub struct Scenario {
    /// Name passed to `--scenario`.
    pub name: &'static str,
    /// Ranks in the nested job.
    pub ranks: u32,
    /// Exit codes the job may end with.
    pub codes: &'static [i32],
    /// Text the launcher's report must contain.
    pub log: Option<&'static str>,
    /// Launcher timeout for the nested job.
    pub timeout: Duration,
    /// What every rank of the nested job runs.
    pub body: fn(&Endpoint) -> Result<(), String>,
    /// Environment variables every rank sets at start-up, before `amnet::init`.
    pub env: &'static [(&'static str, &'static str)],
    /// The conduit it is about, when it checks one conduit's own behaviour.
    pub only_conduit: Option<&'static str>,
    /// How long its ranks wait on purpose (sleeps that make a rank late), added to the bound
    /// on the job's run time.
    pub planned: Duration,
}

const T: Duration = Duration::from_secs(30);

/// Every scenario.
pub fn scenarios() -> Vec<Scenario> {
    vec![
        Scenario {
            name: "exit-after-attach",
            ranks: 3,
            codes: &[7],
            log: Some("rank 1 ended the job with code 7"),
            timeout: T,
            env: &[],
            body: exit_after_attach,
            only_conduit: None,
            planned: Duration::ZERO,
        },
        Scenario {
            name: "exit-in-request-handler",
            ranks: 3,
            codes: &[9],
            log: None,
            timeout: T,
            env: &[],
            body: exit_in_request_handler,
            only_conduit: None,
            planned: Duration::ZERO,
        },
        Scenario {
            name: "exit-in-reply-handler",
            ranks: 3,
            codes: &[11],
            log: None,
            timeout: T,
            env: &[],
            body: exit_in_reply_handler,
            only_conduit: None,
            planned: Duration::ZERO,
        },
        Scenario {
            name: "exit-while-others-in-barrier",
            ranks: 3,
            codes: &[13],
            log: None,
            timeout: T,
            env: &[],
            body: exit_during_barrier,
            only_conduit: None,
            planned: Duration::ZERO,
        },
        Scenario {
            name: "exit-with-operations-outstanding",
            ranks: 3,
            codes: &[15],
            log: None,
            timeout: T,
            env: &[],
            body: exit_with_ops,
            only_conduit: None,
            planned: Duration::ZERO,
        },
        Scenario {
            name: "exit-several-ranks-at-once",
            ranks: 3,
            codes: &[20, 21, 22],
            log: None,
            timeout: T,
            env: &[],
            body: exit_several,
            only_conduit: None,
            planned: Duration::ZERO,
        },
        Scenario {
            name: "exit-before-attach",
            ranks: 3,
            codes: &[17],
            log: None,
            timeout: T,
            env: &[],
            body: exit_before_attach,
            only_conduit: None,
            planned: Duration::ZERO,
        },
        Scenario {
            name: "return-from-main-without-exit",
            ranks: 3,
            codes: &[0],
            log: None,
            timeout: T,
            env: &[],
            body: return_from_main,
            only_conduit: None,
            planned: Duration::ZERO,
        },
        Scenario {
            name: "return-error-from-main",
            ranks: 3,
            codes: &[1],
            log: Some("rank 1 ended the job with code 1"),
            timeout: T,
            env: &[],
            body: return_error_from_main,
            only_conduit: None,
            planned: Duration::ZERO,
        },
        Scenario {
            name: "rank-killed-by-signal",
            ranks: 3,
            codes: &[137],
            log: Some("rank 1 was killed by signal 9 (SIGKILL)"),
            timeout: T,
            env: &[],
            body: killed_by_signal,
            only_conduit: None,
            planned: Duration::ZERO,
        },
        Scenario {
            name: "rank-dies-after-another-returned",
            ranks: 3,
            codes: &[137],
            log: Some("rank 2 was killed by signal 9 (SIGKILL)"),
            timeout: T,
            env: &[],
            body: dies_after_return,
            only_conduit: None,
            planned: Duration::ZERO,
        },
        Scenario {
            name: "rank-panics",
            ranks: 3,
            codes: &[101],
            log: Some("rank 2 ended the job with code 101"),
            timeout: T,
            env: &[],
            body: panics,
            only_conduit: None,
            planned: Duration::ZERO,
        },
        Scenario {
            name: "launcher-timeout",
            ranks: 2,
            codes: &[124],
            log: Some("ranks still running: [0, 1]"),
            timeout: Duration::from_secs(2),
            env: &[],
            body: hang,
            only_conduit: None,
            planned: Duration::ZERO,
        },
        Scenario {
            name: "rule-use-before-attach",
            ranks: 2,
            codes: &[0],
            log: None,
            timeout: T,
            env: &[],
            body: use_before_attach,
            only_conduit: None,
            planned: Duration::ZERO,
        },
        Scenario {
            name: "rule-segment-larger-than-memory",
            ranks: 2,
            codes: &[0],
            log: None,
            timeout: T,
            env: &[],
            body: segment_too_large,
            only_conduit: None,
            planned: Duration::ZERO,
        },
        Scenario {
            name: "rule-handler-tables-differ",
            ranks: 3,
            codes: &[0],
            log: None,
            timeout: T,
            env: &[],
            body: tables_differ,
            only_conduit: None,
            planned: Duration::ZERO,
        },
        Scenario {
            name: "coll_checked_mode_mismatch",
            ranks: 3,
            codes: &[0],
            log: None,
            timeout: T,
            env: &[("AMNET_COLL_CHECK", "1")],
            body: crate::coll_images::check_mismatch,
            only_conduit: None,
            planned: Duration::ZERO,
        },
        Scenario {
            name: "coll_checked_mode_image_mismatch",
            ranks: 3,
            codes: &[0],
            log: None,
            timeout: T,
            env: &[("AMNET_COLL_CHECK", "1")],
            body: crate::coll_images::check_image_mismatch,
            only_conduit: None,
            planned: Duration::ZERO,
        },
        Scenario {
            name: "coll_checked_team_order",
            ranks: 2,
            codes: &[0],
            log: None,
            timeout: T,
            env: &[("AMNET_COLL_CHECK", "1")],
            body: crate::coll_images::check_team_order,
            only_conduit: None,
            planned: Duration::ZERO,
        },
        Scenario {
            name: "coll_hang_watchdog_report",
            ranks: 3,
            codes: &[42],
            log: None,
            timeout: T,
            // As below: the 1 s watchdog times the late rank, without injected faults.
            env: &[
                ("AMNET_HANG_TIMEOUT", "1"),
                ("AMNET_UDP_LOSS", ""),
                ("AMNET_UDP_DUP", ""),
                ("AMNET_UDP_REORDER", ""),
            ],
            body: crate::coll_images::hang_report,
            only_conduit: None,
            planned: Duration::ZERO,
        },
        Scenario {
            name: "coll_typed_failed_wait_detaches",
            ranks: 2,
            codes: &[0],
            log: None,
            timeout: T,
            // The 1 s watchdog times the late rank, so the job runs without injected faults
            // (an empty value is the default: none), which a lossy suite run would add.
            env: &[
                ("AMNET_HANG_TIMEOUT", "1"),
                ("AMNET_UDP_LOSS", ""),
                ("AMNET_UDP_DUP", ""),
                ("AMNET_UDP_REORDER", ""),
            ],
            body: crate::coll_typed::failed_wait_detaches,
            only_conduit: None,
            // Three rounds in which rank 1 enters 2.5 s late.
            planned: Duration::from_millis(7500),
        },
        Scenario {
            name: "udp-peer-timeout",
            ranks: 3,
            codes: &[42],
            log: None,
            timeout: T,
            // Without injected faults, as the other scenarios that time ranks against a 1 s
            // limit: under 30% loss a surviving rank's exit could go unheard for the second
            // its peer waits, which then reports the wrong rank failed.
            env: &[
                ("AMNET_UDP_PEER_TIMEOUT", "1"),
                ("AMNET_UDP_LOSS", ""),
                ("AMNET_UDP_DUP", ""),
                ("AMNET_UDP_REORDER", ""),
            ],
            body: udp_peer_timeout,
            only_conduit: Some("udp"),
            planned: Duration::ZERO,
        },
        Scenario {
            name: "udp-forged-datagrams",
            ranks: 2,
            codes: &[0],
            log: None,
            timeout: T,
            // The forgeries are datagrams: the two ranks talk over the network.
            env: &[
                ("AMNET_UDP_AUTH", "1"),
                ("AMNET_UDP_FORGE", "0.25"),
                ("AMNET_HOST_BYPASS", "0"),
            ],
            body: udp_forged_datagrams,
            only_conduit: Some("udp"),
            planned: Duration::ZERO,
        },
        Scenario {
            name: "udp-forged-datagrams-unauthenticated",
            ranks: 2,
            codes: &[0],
            log: None,
            timeout: T,
            env: &[
                ("AMNET_UDP_AUTH", "0"),
                ("AMNET_UDP_FORGE", "0.25"),
                ("AMNET_HOST_BYPASS", "0"),
            ],
            body: udp_forged_datagrams,
            only_conduit: Some("udp"),
            planned: Duration::ZERO,
        },
        // The ibv conduit's emulated device completes one of rank 1's work requests with an
        // error (AMNET_IBV_EMU_FAULT): rank 1's next call fails with an error that names the
        // operation, the peer and the status, and the job ends in bounded time.
        Scenario {
            name: "ibv-error-on-active-message",
            ranks: 2,
            codes: &[31],
            log: None,
            timeout: T,
            env: &[
                ("AMNET_IBV_DEVICE", "emu"),
                ("AMNET_HOST_BYPASS", "0"),
                ("AMNET_IBV_EMU_FAULT", "1:40:rem_access"),
            ],
            body: ibv_error_on_am,
            only_conduit: Some("ibv"),
            planned: Duration::ZERO,
        },
        Scenario {
            name: "ibv-error-on-put",
            ranks: 3,
            codes: &[31],
            log: None,
            timeout: T,
            env: &[
                ("AMNET_IBV_DEVICE", "emu"),
                ("AMNET_HOST_BYPASS", "0"),
                ("AMNET_IBV_EMU_FAULT", "1:30:retry"),
            ],
            body: ibv_error_on_put,
            only_conduit: Some("ibv"),
            planned: Duration::ZERO,
        },
        Scenario {
            name: "ibv-error-on-get",
            ranks: 2,
            codes: &[31],
            log: None,
            timeout: T,
            env: &[
                ("AMNET_IBV_DEVICE", "emu"),
                ("AMNET_HOST_BYPASS", "0"),
                ("AMNET_IBV_EMU_FAULT", "1:30:loc_prot"),
            ],
            body: ibv_error_on_get,
            only_conduit: Some("ibv"),
            planned: Duration::ZERO,
        },
    ]
}

/// The suite entries: one test per scenario, run by rank 0.
pub fn tests() -> Vec<Test> {
    scenarios()
        .into_iter()
        .map(|s| Test {
            name: s.name,
            min_ranks: 1,
            process_only: true,
            timeout: Duration::from_secs(60),
            only_conduit: s.only_conduit,
            run: run_from_suite,
        })
        .collect()
}

fn run_from_suite(c: &crate::Ctx<'_>) -> Verdict {
    if c.rank() != 0 {
        return Ok(());
    }
    let s = scenarios()
        .into_iter()
        .find(|s| s.name == c.name)
        .ok_or_else(|| format!("no scenario named {}", c.name))?;
    run_nested(&s, c.ep.conduit_name())
}

/// Start `s` as a nested job and check how it ended.
pub fn run_nested(s: &Scenario, conduit: &str) -> Verdict {
    let args = vec!["--scenario".into(), s.name.into()];
    launch_nested(
        s.name, s.ranks, args, s.timeout, conduit, s.codes, s.planned, s.log,
    )
}

/// Start a nested job of this program with `args` on `ranks` ranks of `conduit`, and check
/// that it ended with one of `codes` within its bound (the launcher's timeout, at most 10 s,
/// plus 3 s and the `planned` waits), that the launcher's report holds `log`, and that it
/// left nothing in /dev/shm. `name` names the job in failures.
#[allow(clippy::too_many_arguments)]
pub fn launch_nested(
    name: &str,
    ranks: u32,
    args: Vec<String>,
    timeout: Duration,
    conduit: &str,
    codes: &[i32],
    planned: Duration,
    want_log: Option<&str>,
) -> Verdict {
    let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
    let opts = LaunchOptions {
        ranks,
        program: exe.to_string_lossy().into_owned(),
        args,
        timeout: Some(timeout),
        conduit: conduit.parse().map_err(|e| format!("{e}"))?,
        grace: Duration::from_secs(2),
    };
    let mut log = Vec::new();
    let t0 = Instant::now();
    let code = amnet_launch::launch_job_with_log(&opts, &mut |m: &str| log.push(m.to_string()))
        .map_err(|e| format!("launch: {e}"))?;
    let took = t0.elapsed();
    let log = log.join("\n");
    if !codes.contains(&code) {
        return Err(format!(
            "{name}: job exited with {code}, expected one of {codes:?}; launcher said: {log}"
        ));
    }
    let bound = timeout.min(Duration::from_secs(10)) + Duration::from_secs(3) + planned;
    if took > bound {
        return Err(format!("{name}: took {took:?}, more than {bound:?}"));
    }
    if let Some(want) = want_log {
        if !log.contains(want) {
            return Err(format!("{name}: launcher report lacks {want:?}: {log:?}"));
        }
    }
    let prefix = format!("amnet-{}-", std::process::id());
    let left: Vec<String> = std::fs::read_dir("/dev/shm")
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with(&prefix))
                .collect()
        })
        .unwrap_or_default();
    if !left.is_empty() {
        return Err(format!("{name}: left shared memory behind: {left:?}"));
    }
    Ok(())
}

/// Entry point of `--scenario NAME`: returns the process exit code.
pub fn main_scenario(name: &str) -> i32 {
    let Some(s) = scenarios().into_iter().find(|s| s.name == name) else {
        say!("amnet-testsuite: no scenario {name:?}");
        return 2;
    };
    // Still one thread: nothing else reads the environment yet.
    for (k, v) in s.env {
        std::env::set_var(k, v);
    }
    let ep = match amnet::init() {
        Ok(ep) => ep,
        Err(e) => {
            say!("amnet-testsuite: init: {e}");
            return 2;
        }
    };
    match (s.body)(&ep) {
        Ok(()) => 0,
        Err(e) => {
            say!("amnet-testsuite: scenario {name} rank {}: {e}", ep.rank());
            1
        }
    }
}

/// Attach with the suite's handler table and a 1 MiB segment.
pub(crate) fn attach(ep: &Endpoint) -> Result<Arc<State>, String> {
    let st = Arc::new(State::new(ep.size()));
    let t = handler_table(&st).map_err(|e| e.to_string())?;
    ep.attach(t, 1 << 20).map_err(|e| e.to_string())?;
    Ok(st)
}

fn park(ep: &Endpoint) -> Result<(), String> {
    // Wait for an event that never comes; only a job-wide exit ends this.
    ep.barrier_notify(0, amnet::barrier_flags::ANONYMOUS)
        .map_err(|e| e.to_string())?;
    ep.wait_until(|| false).map_err(|e| e.to_string())?;
    Err("park returned".into())
}

fn exit_after_attach(ep: &Endpoint) -> Result<(), String> {
    attach(ep)?;
    if ep.rank() == 1 {
        std::thread::sleep(Duration::from_millis(100));
        ep.exit(7);
    }
    park(ep)
}

fn exit_in_request_handler(ep: &Endpoint) -> Result<(), String> {
    attach(ep)?;
    if ep.rank() == 0 {
        ep.request_short(1, H_EXIT, &[9])
            .map_err(|e| e.to_string())?;
    }
    park(ep)
}

fn exit_in_reply_handler(ep: &Endpoint) -> Result<(), String> {
    attach(ep)?;
    if ep.rank() == 0 {
        ep.request_short(1, H_EXIT_VIA_REPLY, &[11])
            .map_err(|e| e.to_string())?;
    }
    park(ep)
}

fn exit_during_barrier(ep: &Endpoint) -> Result<(), String> {
    attach(ep)?;
    if ep.rank() == 2 {
        std::thread::sleep(Duration::from_millis(300));
        ep.exit(13);
    }
    ep.barrier().map_err(|e| e.to_string())?;
    Err("the barrier completed without rank 2".into())
}

fn exit_with_ops(ep: &Endpoint) -> Result<(), String> {
    attach(ep)?;
    let payload = vec![1u8; 4000];
    let next = (ep.rank() + 1) % ep.size();
    for i in 0..100_000u32 {
        if ep.rank() == 1 && i == 2000 {
            let _ = ep.put_nbi(next, 0, &payload);
            ep.exit(15);
        }
        // A send that finds room does not poll (spec/core.md §5): without polls of its own, a
        // rank whose sends always find room would not run the requests of the rank behind it
        // in the ring until its loop ended, and rank 1 (behind rank 2, across hosts) would
        // reach its exit only then.
        if i % 64 == 0 {
            ep.poll().map_err(|e| e.to_string())?;
        }
        ep.request_medium(next, H_COUNT, &[i], &payload)
            .map_err(|e| e.to_string())?;
        let _ = ep.put_nbi(next, 0, &payload);
    }
    park(ep)
}

fn exit_several(ep: &Endpoint) -> Result<(), String> {
    attach(ep)?;
    ep.barrier().map_err(|e| e.to_string())?;
    #[allow(clippy::cast_possible_wrap)]
    ep.exit(20 + ep.rank() as i32)
}

fn exit_before_attach(ep: &Endpoint) -> Result<(), String> {
    if ep.rank() == 0 {
        std::thread::sleep(Duration::from_millis(100));
        ep.exit(17);
    }
    attach(ep)?;
    park(ep)
}

fn return_from_main(ep: &Endpoint) -> Result<(), String> {
    attach(ep)?;
    if ep.rank() == 1 {
        return Ok(());
    }
    park(ep)
}

fn return_error_from_main(ep: &Endpoint) -> Result<(), String> {
    attach(ep)?;
    if ep.rank() == 1 {
        return Err("returning an error on purpose".into());
    }
    park(ep)
}

fn killed_by_signal(ep: &Endpoint) -> Result<(), String> {
    attach(ep)?;
    if ep.rank() == 1 {
        std::thread::sleep(Duration::from_millis(100));
        // SAFETY: raising a signal on ourselves.
        unsafe { libc::raise(libc::SIGKILL) };
    }
    park(ep)
}

fn dies_after_return(ep: &Endpoint) -> Result<(), String> {
    attach(ep)?;
    match ep.rank() {
        1 => Ok(()),
        2 => {
            // Not polling, so the job-wide exit(0) does not reach this rank before it dies.
            std::thread::sleep(Duration::from_millis(100));
            // SAFETY: raising a signal on ourselves.
            unsafe { libc::raise(libc::SIGKILL) };
            Ok(())
        }
        _ => park(ep),
    }
}

/// Report a deliberate panic in one line, without the default hook's wording and backtrace,
/// so that a CI log's first report of a panic is a real one.
fn quiet_panic_hook() {
    std::panic::set_hook(Box::new(|info| {
        let msg = info
            .payload()
            .downcast_ref::<&str>()
            .copied()
            .or_else(|| info.payload().downcast_ref::<String>().map(String::as_str))
            .unwrap_or("(no message)");
        say!("amnet-testsuite: deliberate panic: {msg}");
    }));
}

fn panics(ep: &Endpoint) -> Result<(), String> {
    attach(ep)?;
    if ep.rank() == 2 {
        std::thread::sleep(Duration::from_millis(100));
        quiet_panic_hook();
        panic!("rank 2 panics on purpose");
    }
    park(ep)
}

/// udp: rank 2 stops itself (alive but silent, so only the conduit's liveness check can
/// notice); ranks 0 and 1 send to it and wait, and must get an error naming rank 2 after
/// about AMNET_UDP_PEER_TIMEOUT (1 s), then end the job with 42 (the launcher kills the
/// stopped rank).
fn udp_peer_timeout(ep: &Endpoint) -> Result<(), String> {
    /// Poll for `ms` milliseconds: a rank that sleeps is as silent to its peers as a
    /// stopped one (no heartbeats, no retransmissions).
    fn poll_for(ep: &Endpoint, ms: u64) -> amnet::Result<()> {
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_millis(ms) {
            ep.poll()?;
            std::thread::yield_now();
        }
        Ok(())
    }
    attach(ep)?;
    ep.barrier().map_err(|e| e.to_string())?;
    if ep.rank() == 2 {
        // Keep polling for a while first: under injected loss the peers may still need a
        // retransmission of this rank's last barrier message.
        poll_for(ep, 500).map_err(|e| e.to_string())?;
        // SAFETY: raising a signal on ourselves.
        unsafe { libc::raise(libc::SIGSTOP) };
        return park(ep);
    }
    // Polling, not sleeping: under injected loss the first heartbeat after a 700 ms sleep may
    // not reach a peer before its 1 s timeout (ranks 0 and 1 would fail each other). Under
    // loss the barrier's exits can be skewed by some hundreds of milliseconds, and a rank
    // that left it late, or lost rank 2's last heartbeats, may find rank 2 failed while it
    // still polls here: that is the outcome the request below waits for, found earlier.
    let t0 = Instant::now();
    let r = poll_for(ep, 700).and_then(|()| {
        ep.request_short(2, H_COUNT, &[1])
            .and_then(|()| ep.wait_until(|| false))
    });
    let took = t0.elapsed();
    match r {
        Err(amnet::Error::PeerFailed { rank: 2, .. }) if took < Duration::from_secs(10) => {
            std::thread::sleep(Duration::from_millis(200));
            ep.exit(42)
        }
        other => {
            say!(
                "rank {}: waiting on a stopped rank 2 gave {other:?} after {took:?}",
                ep.rank()
            );
            ep.exit(1)
        }
    }
}

/// udp with `AMNET_UDP_FORGE=0.25`: ahead of a quarter of the DATA datagrams with a payload
/// goes a forgery, as a host on the path could send it: the real job key, a valid header and
/// sequence number, the payload's last byte changed, and a wrong tag or none. Both ranks
/// exchange checked Mediums of 1 B to 60 KB and put and get back 512 KiB (a put's chunks
/// leave from the caller's memory). With `AMNET_UDP_AUTH=1` every forgery must fail its tag
/// (counted in `auth_failures`) and the traffic must arrive intact; without, forgeries must
/// get through (the genuine datagram is then dropped as a duplicate): what the tag stops.
fn udp_forged_datagrams(ep: &Endpoint) -> Result<(), String> {
    const N: u32 = 300;
    const BLOCK: usize = 512 << 10;
    let e = |e: Error| e.to_string();
    let st = attach(ep)?;
    let auth = ep
        .config_source()
        .flag(&amnet::config::vars::UDP_AUTH)
        .map_err(e)?
        .unwrap_or(false);
    let me = ep.rank();
    let peer = 1 - me;
    for i in 0..N {
        let seed = (me << 20) | i;
        let len = 1 + (i as usize * 7919) % 60_000;
        ep.request_medium(
            peer,
            H_CHECK,
            &crate::pattern::args(seed, 3),
            &crate::pattern::bytes(seed, len),
        )
        .map_err(e)?;
    }
    ep.wait_until(|| st.acks.load(Ordering::SeqCst) >= u64::from(N))
        .map_err(e)?;
    // Each rank puts its block into the peer's segment, then reads it back.
    let seed = 0xf0_0000 | me;
    let block = crate::pattern::bytes(seed, BLOCK);
    let at = u64::from(me) * BLOCK as u64;
    ep.put(peer, at, &block).map_err(e)?;
    ep.barrier().map_err(e)?;
    let mut back = vec![0u8; BLOCK];
    ep.get(peer, at, &mut back).map_err(e)?;
    ep.barrier().map_err(e)?;
    let block_bad = crate::pattern::first_bad(seed, &back);
    let bad = crate::state::lock(&st.errors).len() + usize::from(block_bad.is_some());
    let cs = ep.conduit_stats();
    let get = |k: &str| cs.iter().find(|(n, _)| *n == k).map_or(0, |&(_, v)| v);
    let (failed, forged) = (get("auth_failures"), get("injected_forged"));
    let verdict = if auth {
        if bad > 0 || failed == 0 || forged == 0 {
            Err(format!(
                "with AMNET_UDP_AUTH=1: {bad} corrupted message(s) or block(s) (must be 0; \
                 first bad byte of the block read back: {block_bad:?}; handlers: {:?}), \
                 {failed} auth_failures and {forged} forgeries sent (must be more than 0)",
                st.handler_verdict()
            ))
        } else {
            Ok(())
        }
    } else if bad == 0 || failed != 0 {
        Err(format!(
            "without AMNET_UDP_AUTH: {bad} corrupted message(s) or block(s) (forgeries should \
             get through) and {failed} auth_failures (must be 0); {forged} forgeries sent"
        ))
    } else {
        Ok(())
    };
    // Both ranks are done with each other's segments before either leaves.
    ep.barrier().map_err(e)?;
    verdict
}

fn hang(ep: &Endpoint) -> Result<(), String> {
    attach(ep)?;
    park(ep)
}

fn use_before_attach(ep: &Endpoint) -> Result<(), String> {
    let not = |what: &str, r: Result<(), Error>| match r {
        Err(Error::NotAttached { .. }) => Ok(()),
        other => Err(format!("{what} before attach: {other:?}")),
    };
    let r = (|| {
        not("request_short", ep.request_short(0, H_CHECK, &[]))?;
        not("request_medium", ep.request_medium(0, H_CHECK, &[], &[1]))?;
        not("poll", ep.poll().map(|_| ()))?;
        not("put", ep.put(0, 0, &[1]))?;
        not("barrier", ep.barrier())?;
        not("segment_len", ep.segment_len().map(|_| ()))?;
        match amnet::init() {
            Err(Error::Config(m)) if m.contains("twice") => {}
            other => return Err(format!("a second init: {other:?}")),
        }
        Ok::<(), String>(())
    })();
    if let Err(e) = r {
        say!("rank {}: {e}", ep.rank());
        ep.exit(1);
    }
    attach(ep)?;
    ep.barrier().map_err(|e| e.to_string())
}

fn segment_too_large(ep: &Endpoint) -> Result<(), String> {
    let st = Arc::new(State::new(ep.size()));
    let t = handler_table(&st).map_err(|e| e.to_string())?;
    match ep.attach(t, 1 << 40) {
        // smp maps segments from /dev/shm; heap-backed conduits check the host's memory.
        Err(Error::Config(m)) if m.contains("/dev/shm") || m.contains("memory") => {
            // Success everywhere: leave together after a pause, so a failing rank's code wins.
            std::thread::sleep(Duration::from_millis(300));
            ep.exit(0)
        }
        other => {
            say!(
                "rank {}: attach of a 1 TiB segment gave {other:?}",
                ep.rank()
            );
            ep.exit(1)
        }
    }
}

fn tables_differ(ep: &Endpoint) -> Result<(), String> {
    let st = Arc::new(State::new(ep.size()));
    let mut t = handler_table(&st).map_err(|e| e.to_string())?;
    if ep.rank() == 1 {
        t.register(250, |_: &mut amnet::Token<'_>, _: &[u32], _: &[u8]| {})
            .map_err(|e| e.to_string())?;
    }
    match ep.attach(t, 4096) {
        Err(Error::Mismatch { detail, .. })
            if detail.contains("rank 1") && detail.contains("250") =>
        {
            // Success everywhere: leave together after a pause, so a failing rank's code wins.
            std::thread::sleep(Duration::from_millis(300));
            ep.exit(0)
        }
        other => {
            say!(
                "rank {}: attach with differing tables gave {other:?}",
                ep.rank()
            );
            ep.exit(1)
        }
    }
}

/// Rank 1: the failed call's error must contain every one of `want`; then the job ends with
/// 31 (anything else is the scenario's failure).
fn ibv_error_named(ep: &Endpoint, e: &Error, want: &[&str]) -> Result<(), String> {
    let msg = e.to_string();
    if let Some(w) = want.iter().find(|w| !msg.contains(**w)) {
        return Err(format!("the error does not say {w:?}: {msg}"));
    }
    ep.exit(31)
}

fn ibv_error_on_am(ep: &Endpoint) -> Result<(), String> {
    attach(ep)?;
    if ep.rank() == 1 {
        for i in 0..10_000u32 {
            if let Err(e) = ep.request_short(0, H_COUNT, &[i]) {
                return ibv_error_named(ep, &e, &["rank 1:", "to rank 0", "remote access error"]);
            }
        }
        return Err("10000 requests and no error".into());
    }
    park(ep)
}

fn ibv_error_on_put(ep: &Endpoint) -> Result<(), String> {
    attach(ep)?;
    if ep.rank() == 1 {
        let data = vec![5u8; 1000];
        for i in 0..10_000u64 {
            if let Err(e) = ep.put(2, (i % 64) * 1000, &data) {
                return ibv_error_named(
                    ep,
                    &e,
                    &[
                        "rank 1:",
                        "put, get or atomic with rank 2",
                        "transport retries exceeded",
                    ],
                );
            }
        }
        return Err("10000 puts and no error".into());
    }
    park(ep)
}

fn ibv_error_on_get(ep: &Endpoint) -> Result<(), String> {
    attach(ep)?;
    if ep.rank() == 1 {
        let mut data = vec![0u8; 1000];
        for i in 0..10_000u64 {
            if let Err(e) = ep.get(0, (i % 64) * 1000, &mut data) {
                return ibv_error_named(
                    ep,
                    &e,
                    &[
                        "rank 1:",
                        "put, get or atomic with rank 0",
                        "local protection error",
                    ],
                );
            }
        }
        return Err("10000 gets and no error".into());
    }
    park(ep)
}
