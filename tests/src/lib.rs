//! The amnet conduit test suite.
//!
//! One suite, run on whichever conduit `AMNET_CONDUIT` selects, as a real job:
//! `amrun -n N amnet-testsuite [FILTER]` prints one line per test and ends with
//! `N passed, N failed`. Every rank runs every test in lockstep (a barrier before and after);
//! each rank reports its verdict to rank 0, which prints the line. A watchdog thread on every
//! rank ends the job with a message naming the test if a test overruns its time limit, so a
//! bug fails the suite in bounded time instead of hanging it. `cargo test` runs the same suite
//! (see `tests/`), in process mode at several job sizes and in thread mode.
//!
//! Exit behaviour is tested by scenarios: rank 0 starts a nested job of this same program
//! with `--scenario NAME` and checks the job's code, its time and the launcher's report.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use amnet::{Endpoint, Error, HandlerTable};

/// `eprintln!` in one `write` call: ranks of one job share the launcher's stderr, and a line
/// written in pieces can interleave with another rank's.
#[macro_export]
macro_rules! say {
    ($($arg:tt)*) => {
        $crate::say_line(&::std::format!($($arg)*))
    };
}

/// Write `text` and a newline to stderr with one `write_all` (see [`say!`]).
pub fn say_line(text: &str) {
    use std::io::Write;
    let mut line = String::with_capacity(text.len() + 1);
    line.push_str(text);
    line.push('\n');
    let _ = std::io::stderr().lock().write_all(line.as_bytes());
}

pub mod am;
pub mod atomic;
pub mod barrier;
pub mod coll;
pub mod coll_images;
pub mod coll_oracle;
pub mod coll_prop;
pub mod coll_teams;
pub mod coll_typed;
pub mod host;
pub mod ibv;
pub mod pattern;
pub mod progress;
pub mod rma;
pub mod rules;
pub mod scenarios;
pub mod state;
pub mod storm;
pub mod vis;

pub use state::State;

/// The segment every rank attaches: room for 4 MiB put/get at unaligned offsets plus the Long
/// landing areas.
pub const SEG_LEN: usize = 24 << 20;

/// The verdict of one test on one rank.
pub type Verdict = Result<(), String>;

/// What a test sees.
pub struct Ctx<'a> {
    /// This rank's endpoint (attached).
    pub ep: &'a Endpoint,
    /// Handler-side state.
    pub st: &'a Arc<State>,
    /// True when ranks are processes (scenarios run only then).
    pub process_mode: bool,
    /// The running test's name.
    pub name: &'static str,
}

impl Ctx<'_> {
    /// This rank.
    pub fn rank(&self) -> u32 {
        self.ep.rank()
    }
    /// Job size.
    pub fn size(&self) -> u32 {
        self.ep.size()
    }
}

/// One test of the suite.
pub struct Test {
    /// Its name, as printed and matched by the filter.
    pub name: &'static str,
    /// Fewest ranks it needs; with fewer it is skipped.
    pub min_ranks: u32,
    /// Whether it needs ranks to be processes (nested jobs).
    pub process_only: bool,
    /// Time limit, enforced by the watchdog.
    pub timeout: Duration,
    /// The conduit it is about, when it checks one conduit's own behaviour; skipped on others.
    pub only_conduit: Option<&'static str>,
    /// The body, run on every rank.
    pub run: fn(&Ctx<'_>) -> Verdict,
}

/// Every test, in the order they run.
pub fn all_tests() -> Vec<Test> {
    let mut v = Vec::new();
    v.extend(am::tests());
    v.extend(rules::tests());
    v.extend(host::tests());
    v.extend(rma::tests());
    v.extend(atomic::tests());
    v.extend(vis::tests());
    v.extend(barrier::tests());
    v.extend(progress::tests());
    v.extend(storm::tests());
    v.extend(coll::tests());
    v.extend(coll_typed::tests());
    v.extend(scenarios::tests());
    v.extend(ibv::tests());
    v
}

/// Shorthand to build a [`Test`] with default limits.
pub const fn test(name: &'static str, run: fn(&Ctx<'_>) -> Verdict) -> Test {
    Test {
        name,
        min_ranks: 1,
        process_only: false,
        timeout: Duration::from_secs(60),
        only_conduit: None,
        run,
    }
}

/// Whether the host-local bypass is on in this job (spec/core.md §7e; network conduits).
pub fn bypass_on(c: &Ctx<'_>) -> bool {
    matches!(c.ep.conduit_name(), "udp" | "mpi" | "ofi" | "ibv")
        && c.ep
            .config_source()
            .flag(&amnet::config::vars::HOST_BYPASS)
            .ok()
            .flatten()
            .unwrap_or(true)
}

/// Whether messages from this rank to `dest` travel through the smp conduit's rings: on smp,
/// and through the bypass to a rank of this host.
pub fn rings_to(c: &Ctx<'_>, dest: u32) -> bool {
    c.ep.conduit_name() == "smp"
        || (bypass_on(c)
            && c.ep
                .host_map()
                .and_then(|m| m.same_host(c.rank(), dest))
                .unwrap_or(false))
}

/// Turn an amnet error into a verdict with context.
pub fn ck<T>(what: &str, r: Result<T, Error>) -> Result<T, String> {
    r.map_err(|e| format!("{what}: {e}"))
}

/// Fail with `msg` unless `cond`.
pub fn ensure(cond: bool, msg: impl FnOnce() -> String) -> Verdict {
    if cond {
        Ok(())
    } else {
        Err(msg())
    }
}

/// Totals of one suite run (meaningful on rank 0).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Summary {
    /// Tests every rank passed.
    pub passed: u32,
    /// Tests some rank failed.
    pub failed: u32,
    /// Tests skipped at this job size or mode.
    pub skipped: u32,
}

struct Watch {
    current: Mutex<Option<(String, Instant, Duration)>>,
    stop: AtomicBool,
}

fn start_watchdog(ep: &Endpoint, watch: &Arc<Watch>) -> std::thread::JoinHandle<()> {
    let ep = ep.clone();
    let w = watch.clone();
    std::thread::spawn(move || {
        while !w.stop.load(Ordering::Relaxed) {
            std::thread::sleep(Duration::from_millis(50));
            let over = {
                let g = w.current.lock().unwrap_or_else(|e| e.into_inner());
                g.as_ref()
                    .filter(|(_, t, lim)| t.elapsed() > *lim)
                    .map(|(n, _, lim)| (n.clone(), *lim))
            };
            if let Some((name, lim)) = over {
                say!(
                    "amnet-testsuite: rank {}: test {name} exceeded its limit of {} s; ending the job",
                    ep.rank(),
                    lim.as_secs()
                );
                ep.exit(3);
            }
        }
    })
}

/// The handler table every rank registers.
pub fn handler_table(st: &Arc<State>) -> Result<HandlerTable, Error> {
    let mut t = HandlerTable::new();
    state::register(&mut t, st)?;
    Ok(t)
}

/// Attach `ep` for the suite and run every test whose name contains `filter`. Prints on rank 0.
pub fn run_suite(
    ep: &Endpoint,
    filter: Option<&str>,
    process_mode: bool,
) -> Result<Summary, Error> {
    let st = Arc::new(State::new(ep.size()));
    ep.attach(handler_table(&st)?, SEG_LEN)?;
    run_attached(ep, &st, filter, process_mode, None)
}

/// Run the suite on an endpoint already attached with [`handler_table`] and [`SEG_LEN`].
/// Rank 0 writes `passed failed skipped` to `summary` (or to `AMNET_TESTSUITE_SUMMARY`).
pub fn run_attached(
    ep: &Endpoint,
    st: &Arc<State>,
    filter: Option<&str>,
    process_mode: bool,
    summary: Option<&str>,
) -> Result<Summary, Error> {
    let watch = Arc::new(Watch {
        current: Mutex::new(None),
        stop: AtomicBool::new(false),
    });
    // Thread mode cannot end one rank from another thread; its harness has its own timeout.
    let dog = process_mode.then(|| start_watchdog(ep, &watch));
    let mut sum = Summary::default();
    if ep.rank() == 0 {
        println!(
            "amnet-testsuite: conduit {} ranks {} rma {}",
            ep.conduit_name(),
            ep.size(),
            if ep.config().rma_native {
                "native"
            } else {
                "am"
            }
        );
    }
    for (idx, t) in all_tests().into_iter().enumerate() {
        if filter.is_some_and(|f| !t.name.contains(f)) {
            continue;
        }
        let wrong_conduit = t.only_conduit.filter(|&c| c != ep.conduit_name());
        if ep.size() < t.min_ranks || (t.process_only && !process_mode) || wrong_conduit.is_some() {
            if ep.rank() == 0 {
                println!(
                    "skip {} (needs {})",
                    t.name,
                    if let Some(c) = wrong_conduit {
                        format!("the {c} conduit")
                    } else if t.process_only && !process_mode {
                        "process mode".to_string()
                    } else {
                        format!("{} ranks", t.min_ranks)
                    }
                );
            }
            sum.skipped += 1;
            continue;
        }
        *watch.current.lock().unwrap_or_else(|e| e.into_inner()) =
            Some((t.name.to_string(), Instant::now(), t.timeout));
        st.reset();
        ep.barrier()?;
        let ctx = Ctx {
            ep,
            st,
            process_mode,
            name: t.name,
        };
        let t0 = Instant::now();
        let v = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| (t.run)(&ctx)))
            .unwrap_or_else(|p| {
                Err(format!(
                    "panicked: {}",
                    p.downcast_ref::<&str>()
                        .map(|s| s.to_string())
                        .or_else(|| p.downcast_ref::<String>().cloned())
                        .unwrap_or_default()
                ))
            });
        let elapsed = t0.elapsed();
        let verdicts = state::gather_verdicts(ep, st, idx, &v)?;
        ep.barrier()?;
        *watch.current.lock().unwrap_or_else(|e| e.into_inner()) = None;
        if ep.rank() == 0 {
            let fails: Vec<String> = verdicts
                .iter()
                .enumerate()
                .filter_map(|(r, v)| v.as_ref().err().map(|e| format!("rank {r}: {e}")))
                .collect();
            if fails.is_empty() {
                sum.passed += 1;
                println!("ok   {} ({:.1} ms)", t.name, elapsed.as_secs_f64() * 1e3);
            } else {
                sum.failed += 1;
                println!("FAIL {}: {}", t.name, fails.join("; "));
            }
        }
    }
    // The closing barrier under the watchdog too: a test that failed on one rank before its
    // own barriers leaves the ranks' barrier counts apart, and one of them would wait here
    // for good.
    *watch.current.lock().unwrap_or_else(|e| e.into_inner()) = Some((
        "(the suite's closing barrier)".to_string(),
        Instant::now(),
        CLOSING_LIMIT,
    ));
    if ep.rank() == 0 {
        let path = summary
            .map(str::to_string)
            .or_else(|| amnet::Source::env().text(&amnet::config::vars::TESTSUITE_SUMMARY));
        if let Some(path) = path {
            let line = format!("{} {} {}\n", sum.passed, sum.failed, sum.skipped);
            if let Err(e) = std::fs::write(&path, line) {
                say!("amnet-testsuite: cannot write {path}: {e}");
            }
        }
        if sum.skipped > 0 {
            println!(
                "{} passed, {} failed, {} skipped",
                sum.passed, sum.failed, sum.skipped
            );
        } else {
            println!("{} passed, {} failed", sum.passed, sum.failed);
        }
    }
    let closed = ep.barrier();
    watch.stop.store(true, Ordering::Relaxed);
    if let Some(d) = dog {
        let _ = d.join();
    }
    closed?;
    Ok(sum)
}

/// How long the suite's closing barrier may take.
const CLOSING_LIMIT: Duration = Duration::from_secs(60);

/// Check the suite's own variables (`AMNET_STORM`, `AMNET_TEST_SEED`): a value they do not
/// accept is `Error::Config` naming it.
pub fn check_settings() -> Result<(), Error> {
    let src = amnet::Source::env();
    src.count(&amnet::config::vars::STORM)?;
    src.count(&amnet::config::vars::TEST_SEED)?;
    Ok(())
}

/// A process-wide counter for unique seeds.
pub fn next_seed() -> u32 {
    static N: AtomicU64 = AtomicU64::new(1);
    #[allow(clippy::cast_possible_truncation)] // wraps harmlessly
    let v = N.fetch_add(1, Ordering::Relaxed) as u32;
    v
}
