//! `amnet-bench`: latency and bandwidth of amnet's active messages, put/get and barriers,
//! measured against floors taken in the same run, with the library's performance targets
//! checked at the end. On smp the floors are a raw shared-memory cache-line round trip and
//! local memcpy; on udp they are a raw UDP ping-pong and raw UDP streaming between the same
//! two processes (see `rawudp`), plus local memcpy.
//!
//! ```text
//! amrun -n 2 target/release/amnet-bench SUITE [--json] [--iters N] [--max-bytes N] [--rounds N]
//! ```
//!
//! SUITE is `am`, `rma`, `atomic`, `vis`, `gups`, `barrier`, `coll` or `all`. Rank 0 prints an OSU-style table per
//! operation (or, with `--json`, one JSON object per line) and a targets section.
//! Point-to-point measurements run between ranks 0 and 1; further ranks only take part in
//! barriers and collectives.
//!
//! Figures: p50 and p99 are percentiles of the samples, and the ratios and targets use the
//! p50. Where the clock advances in coarse steps (10 ns on hosts whose TSC ticks at 100 MHz),
//! a round trip's nearest-rank median is a multiple of the step; the p50 of rows timed one
//! operation per sample is then interpolated within the step (see `measure`), and `--json`
//! adds `p50_nearest_us` (the nearest-rank median) and `mean_us` to every such row.

mod am;
mod barrier;
mod coll;
mod floor;
mod gups;
mod images;
mod latency;
mod measure;
mod progress;
mod rawibv;
#[cfg(feature = "mpi")]
mod rawmpi;
#[cfg(feature = "ofi")]
mod rawofi;
mod rawudp;
mod report;
mod rma;
mod vis;

use std::process::ExitCode;
use std::sync::Arc;

use amnet::{AtomicOp, AtomicOps, Category, Endpoint, HandlerTable};

use crate::report::{Report, TARGET_BYTES};

const USAGE: &str = "usage: amrun -n 2 amnet-bench SUITE [--json] [--iters N] [--max-bytes N]

SUITE: am (Short/Medium/Long round trips, Medium/Long bandwidth), rma (put/get latency
and bandwidth), atomic (fetch-add and compare-swap round trips on a u64 of rank 1's
segment, interleaved with the floor; on smp rank 1 answers each with its own, so that
every operation finds the line in the other core's cache, as in the floor; with the mpi
feature also MPI_Fetch_and_op and MPI_Compare_and_swap plus flush), vis (a 64x64 f64
tile out of a 1024-column array put as one strided put and as 64 row puts, alternately),
gups (HPCC RandomAccess-style updates: batched AMs, then remote atomic xors, with the
verification pass; every rank takes part), progress (Short round trips to rank 1 while
its client computes and its progress thread answers: back to back, and each after a 3 ms
pause that lets the thread go to sleep in the conduit's idle wait), barrier (the endpoint's
barrier and the collectives' team barrier over every rank; alone, in blocks interleaved
with the cache-line floor and, with the mpi feature, MPI_Barrier), coll (broadcast,
scatter, gather, gather_all, exchange, reduce_to_all, prefix_reduce, reduce_elems_to_all,
scan_elems and reduce_elems in the nine IN/OUT sync modes, 8 B to 1 MiB, the MYSYNC
broadcast alternating with a local memcpy of its bytes), images (broadcast, scatter,
gather, gather_all, exchange and reduce_elems_to_all with --images K image threads per
rank, under ALL_THREADS and (but the last) in the m form, MYSYNC and ALLSYNC, 8 B to 32 KiB, with the selected algorithm and
with flat forced), or all (every suite but coll and images). Every run but coll also measures the floors between ranks 0
and 1 and local memcpy bandwidth. On smp the floor is a shared-memory cache-line round
trip; on udp it is a raw UDP ping-pong of 8-byte datagrams between the two processes
over sockets connected to each other (raw_udp_rtt, interleaved with the round trips it
is compared with) and raw UDP
streaming in 64 KiB datagrams (65,507 bytes, the UDP maximum; raw_udp_stream_bw), and
the udp targets replace the smp ones.

  --json          one JSON object per line instead of tables
  --iters N       samples for the small-message latencies (default 20000); the
                  bandwidth sweeps scale theirs down from it, and coll times N/100
                  calls per point up to 4 KiB, fewer above (at least 20)
  --max-bytes N   largest size of the bandwidth sweeps (default 4M; K/M suffixes
                  allowed); coll stops at 1M or at N, whichever is smaller
  --alg all       coll: every algorithm of each operation in turn (IN_ALLSYNC|OUT_ALLSYNC,
                  forced through Coll::tune; those that do not admit the call skipped),
                  then the selected one, instead of the nine sync modes
  --ops LIST      coll: only the operations named, comma-separated (broadcast, scatter,
                  gather, gather_all, exchange, reduce_to_all, prefix_reduce,
                  reduce_elems_to_all, scan_elems, reduce_elems, team_split, team_create)
  --team T        coll: `world` (default) or `split2`, the two halves of the job (even
                  and odd ranks) each running the suite on its own team at the same time
  --start S       coll: when each timed call starts: `barrier` (default), as the barrier
                  before it lets this rank out, or `sync`, at an instant every rank agreed
                  on, one window after the previous call's (the ranks' CLOCK_MONOTONIC;
                  the peer's calls too), so that neither library's barrier, which lets
                  its ranks out at different times, shapes the calls' times; the late
                  starts are counted on stderr
  --images K      images: image threads per rank (default 2, at most 16)
  --rounds N      run the whole measurement N times in one job (not coll) and add, per
                  target, the median over the rounds with its 10th-90th percentile range,
                  the same over the rounds in the fast state (round-trip floor below 200 ns
                  on smp, 5.6 us raw UDP, 0.8 us raw MPI) and the rounds that met it; the
                  tables are the last round's
  -h, --help      this text

On conduits other than smp, where every remote operation is a network round trip of
microseconds, the plan shrinks: 8-byte put/get latencies are timed one call per sample
(smp: batches of 100), put/get/memcpy points move at most 256 MiB (smp: 1 GiB) and
window bandwidth points time at most N/50 windows (smp: N/10), so that `all` with the
default N takes well under a minute on udp over loopback.";

/// Why a benchmark run failed.
#[derive(Debug)]
pub(crate) enum BenchError {
    /// An amnet call failed.
    Amnet(amnet::Error),
    /// A system call of the benchmark's own failed.
    Os(&'static str, std::io::Error),
    /// The job cannot run this suite.
    Usage(String),
}

impl std::fmt::Display for BenchError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BenchError::Amnet(e) => write!(f, "amnet: {e}"),
            BenchError::Os(what, e) => write!(f, "{what}: {e}"),
            BenchError::Usage(m) => f.write_str(m),
        }
    }
}

impl From<amnet::Error> for BenchError {
    fn from(e: amnet::Error) -> Self {
        BenchError::Amnet(e)
    }
}

/// Which suites to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Suite {
    Am,
    Rma,
    Atomic,
    Vis,
    Gups,
    Progress,
    Barrier,
    Coll,
    Images,
    All,
}

/// Iteration counts and sizes, derived from the command line.
#[derive(Debug, Clone)]
pub(crate) struct Plan {
    /// Samples for small-message latencies.
    pub(crate) iters: usize,
    /// Largest size of the bandwidth sweeps.
    pub(crate) max_bytes: usize,
    /// The conduit reaches its peers through a network stack (every conduit but smp): each
    /// remote operation costs microseconds, so the plan times fewer of them.
    pub(crate) network: bool,
    /// coll: every algorithm in turn (`--alg all`).
    pub(crate) alg_all: bool,
    /// coll: the two halves of the job each on its own team (`--team split2`).
    pub(crate) split2: bool,
    /// images: image threads per rank (`--images K`).
    pub(crate) images: usize,
    /// coll: only these operations (`--ops a,b`), by name; `None` for all.
    pub(crate) ops: Option<Vec<String>>,
    /// Rounds of the whole measurement in one job (`--rounds N`; 1 without it).
    pub(crate) rounds: usize,
    /// coll: every timed call starts at an instant the ranks agreed on (`--start sync`)
    /// instead of when the barrier before it let this rank out (`--start barrier`).
    pub(crate) sync_start: bool,
}

impl Plan {
    /// Back-to-back operations per sample for the 8-byte put/get latencies (smp).
    pub(crate) const LATENCY_BATCH: usize = 100;
    /// Bytes a window-bandwidth sample moves, at most (the window shrinks for large
    /// messages).
    const WINDOW_BYTES: usize = 2 << 20;
    /// Bytes one bandwidth point moves in all: at most for small messages, at least for
    /// large copies (smp).
    const POINT_BYTES: usize = 1 << 30;
    /// [`Plan::POINT_BYTES`] on network conduits.
    const NET_POINT_BYTES: usize = 256 << 20;

    /// Back-to-back operations per sample for the 8-byte put/get latencies: a batch on smp
    /// (calls of nanoseconds), one call on network conduits (round trips of microseconds).
    pub(crate) fn latency_batch(&self) -> usize {
        if self.network {
            1
        } else {
            Self::LATENCY_BATCH
        }
    }

    fn point_bytes(&self) -> usize {
        if self.network {
            Self::NET_POINT_BYTES
        } else {
            Self::POINT_BYTES
        }
    }

    /// Untimed warm-up for a measurement of `n` samples.
    pub(crate) fn warmup(&self, n: usize) -> usize {
        (n / 10).max(10)
    }

    /// Powers of two from 8 to `max`, plus `max` itself.
    pub(crate) fn sizes(&self, max: usize) -> Vec<usize> {
        let mut v: Vec<usize> = std::iter::successors(Some(8usize), |&n| n.checked_mul(2))
            .take_while(|&n| n <= max)
            .collect();
        if max >= 8 && v.last() != Some(&max) {
            v.push(max);
        }
        v
    }

    /// (samples, operations per sample) for a put/get/memcpy of `n` bytes: batches of
    /// up to 100 small copies, and fewer samples as copies grow.
    pub(crate) fn rma_shape(&self, n: usize) -> (usize, usize) {
        let base = (self.iters / 4).max(20);
        let batch = (65536 / n.max(1)).clamp(1, self.latency_batch());
        let samples = if n <= 8192 {
            base
        } else {
            // Large copies: enough samples to move POINT_BYTES, so that a point spans tens
            // of milliseconds and a passing disturbance cannot move its median.
            (base * 8192 / n).max((self.point_bytes() / n).min(base))
        };
        (samples.max(1), batch)
    }

    /// Messages per window for window bandwidth at `n` bytes.
    pub(crate) fn window(&self, n: usize) -> usize {
        (Self::WINDOW_BYTES / n.max(1)).clamp(4, 64)
    }

    /// Windows to time at `n` bytes with `window` messages each.
    pub(crate) fn window_iters(&self, n: usize, window: usize) -> usize {
        let cap = if self.network {
            (self.iters / 50).max(10)
        } else {
            (self.iters / 10).max(10)
        };
        (self.point_bytes() / (n.max(1) * window)).clamp(10.min(cap), cap)
    }
}

/// `n` bytes of a recognizable, non-zero pattern.
pub(crate) fn pattern(n: usize) -> Vec<u8> {
    (0..n)
        .map(|i| u8::try_from(i % 251).unwrap_or(0) + 1)
        .collect()
}

/// Options from the command line.
#[derive(Debug)]
struct Opts {
    suite: Suite,
    json: bool,
    plan: Plan,
}

fn parse_size(v: &str) -> Option<usize> {
    let (num, mult) = match v.as_bytes().last()? {
        b'k' | b'K' => (&v[..v.len() - 1], 1usize << 10),
        b'm' | b'M' => (&v[..v.len() - 1], 1 << 20),
        b'g' | b'G' => (&v[..v.len() - 1], 1 << 30),
        _ => (v, 1),
    };
    num.parse::<usize>().ok()?.checked_mul(mult)
}

fn parse_args(args: impl IntoIterator<Item = String>) -> Result<Option<Opts>, String> {
    let mut suite = None;
    let mut json = false;
    let mut iters = 20_000usize;
    let mut max_bytes = 4usize << 20;
    let mut alg_all = false;
    let mut split2 = false;
    let mut images = 2usize;
    let mut ops = None;
    let mut rounds = 1usize;
    let mut sync_start = false;
    let mut it = args.into_iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "-h" | "--help" => return Ok(None),
            "--json" => json = true,
            "--iters" => {
                let v = it.next().ok_or("--iters needs a number")?;
                iters = match v.parse() {
                    Ok(n) if n > 0 => n,
                    _ => return Err(format!("--iters {v:?}: expected a positive number")),
                };
            }
            "--max-bytes" => {
                let v = it.next().ok_or("--max-bytes needs a size")?;
                max_bytes = match parse_size(&v) {
                    Some(n) if n >= 8 => n,
                    _ => return Err(format!("--max-bytes {v:?}: expected a size of at least 8")),
                };
            }
            "--alg" => match it.next().as_deref() {
                Some("all") => alg_all = true,
                other => return Err(format!("--alg {other:?}: expected all")),
            },
            "--ops" => {
                let v = it.next().ok_or("--ops needs a list of operations")?;
                let list: Vec<String> = v.split(',').map(str::to_string).collect();
                if let Some(bad) = list.iter().find(|o| !coll::OP_NAMES.contains(&o.as_str())) {
                    return Err(format!(
                        "--ops: unknown operation {bad:?} (known: {})",
                        coll::OP_NAMES.join(", ")
                    ));
                }
                ops = Some(list);
            }
            "--rounds" => {
                let v = it.next().ok_or("--rounds needs a number")?;
                rounds = match v.parse() {
                    Ok(n) if n > 0 => n,
                    _ => return Err(format!("--rounds {v:?}: expected a positive number")),
                };
            }
            "--images" => {
                let v = it.next().ok_or("--images needs a number")?;
                images = match v.parse() {
                    Ok(n) if (1..=16).contains(&n) => n,
                    _ => return Err(format!("--images {v:?}: expected 1 to 16")),
                };
            }
            "--start" => match it.next().as_deref() {
                Some("barrier") => sync_start = false,
                Some("sync") => sync_start = true,
                other => return Err(format!("--start {other:?}: expected barrier or sync")),
            },
            "--team" => match it.next().as_deref() {
                Some("world") => split2 = false,
                Some("split2") => split2 = true,
                other => return Err(format!("--team {other:?}: expected world or split2")),
            },
            s if suite.is_none() && !s.starts_with('-') => {
                suite = Some(match s {
                    "am" => Suite::Am,
                    "rma" => Suite::Rma,
                    "atomic" => Suite::Atomic,
                    "vis" => Suite::Vis,
                    "gups" => Suite::Gups,
                    "progress" => Suite::Progress,
                    "barrier" => Suite::Barrier,
                    "coll" => Suite::Coll,
                    "images" => Suite::Images,
                    "all" => Suite::All,
                    _ => return Err(format!("unknown suite {s:?}")),
                })
            }
            other => return Err(format!("unexpected argument {other:?}")),
        }
    }
    let suite = suite.ok_or("no suite given")?;
    if rounds > 1 && matches!(suite, Suite::Coll | Suite::Images) {
        return Err(
            "--rounds: the coll and images suites have no targets to judge over rounds; use \
             it with am, rma, barrier or all"
                .into(),
        );
    }
    Ok(Some(Opts {
        suite,
        json,
        plan: Plan {
            iters,
            max_bytes,
            network: false,
            alg_all,
            split2,
            images,
            ops,
            rounds,
            sync_start,
        },
    }))
}

fn run(opts: &Opts) -> Result<(), BenchError> {
    let ep = amnet::init()?;
    let st = Arc::new(am::AmState::default());
    let gst = Arc::new(gups::GupsState::default());
    let mut table = HandlerTable::new();
    am::register(&mut table, &st)?;
    gups::register(&mut table, &gst)?;
    let plan = &opts.plan;
    // Long payloads, puts and gets all use offset 0 of the peer's segment; the coll suite
    // needs source and destination areas of `ranks` blocks each, and room for its figures.
    let mut seg = plan.max_bytes.max(4096);
    if opts.suite == Suite::Coll {
        seg = seg.max(coll::segment_bytes(
            plan.max_bytes.min(coll::MAX_BYTES),
            ep.size() as usize,
        ));
    }
    if opts.suite == Suite::Vis {
        seg = seg.max(vis::segment_bytes());
    }
    if opts.suite == Suite::Images {
        seg = seg.max(images::segment_bytes(
            plan.max_bytes,
            ep.size() as usize,
            plan.images,
        ));
    }
    if opts.suite == Suite::Gups {
        let mut p = opts.plan.clone();
        p.network = amnet::selected_conduit()? != amnet::ConduitKind::Smp;
        seg = seg.max(gups::segment_bytes(&p, ep.size() as usize));
    }
    ep.attach(table, seg)?;
    let point_to_point = !matches!(opts.suite, Suite::Barrier | Suite::Coll | Suite::Gups);
    if point_to_point && ep.size() < 2 {
        return Err(BenchError::Usage(
            "the point-to-point suites (am, rma, atomic, vis, progress, all) need at least 2 ranks (amrun -n 2 ...)".into(),
        ));
    }
    let me = ep.rank();
    let mut plan = opts.plan.clone();
    let conduit = report_conduit(&ep);
    plan.network = conduit == ep.conduit_name() && conduit != "smp";
    let plan = &plan;
    let udp = conduit == "udp";
    // The round-trip floor's set-up, once for every round.
    let mut floors = latency::Floors::default();
    // The round-trip floors, for the suites compared with them.
    let with_floor = !matches!(opts.suite, Suite::Coll | Suite::Vis | Suite::Gups);
    if ep.size() >= 2 && with_floor {
        if udp {
            floors.raw = rawudp::RawUdp::setup(&ep)?;
        } else {
            floors.line = Some(floor::PingLine::setup(&ep)?);
        }
    }
    // Rank 0's side of every transfer: the memcpy floor copies `local` to `other`, puts
    // and Long payloads come from `local`, gets land in it. Sharing the buffer keeps the
    // comparison with the floor about the remote side only.
    let mut local = crate::pattern(plan.max_bytes);
    let mut reports = Vec::with_capacity(plan.rounds);
    // The collectives of the barrier suite, made when it first runs.
    let mut coll = None;
    for _ in 0..plan.rounds {
        let mut report = measure(
            &ep,
            (&st, &gst),
            opts,
            plan,
            (&mut floors, &mut coll),
            &mut local,
        )?;
        report.compute_ratios();
        reports.push(report);
    }
    if me == 0 {
        let last = reports.last().expect("at least one round");
        if opts.json {
            for l in last.json_lines() {
                println!("{l}");
            }
            if reports.len() > 1 {
                for l in report::rounds_json(&reports) {
                    println!("{l}");
                }
            }
        } else {
            if reports.len() > 1 {
                println!("# the tables are the last of {} rounds", reports.len());
            }
            print!("{}", last.table());
            if reports.len() > 1 {
                print!("\n{}", report::rounds_table(&reports));
            }
        }
    }
    ep.barrier()?;
    Ok(())
}

/// The conduit's name in reports: `udp+bypass`, `mpi+bypass`, `ofi+bypass` or `ibv+bypass` for a job on one
/// host whose ranks talk through the host-local bypass (spec/core.md §7e): they talk through
/// the smp rings and map each other's segments, so the shared-memory floors apply, not the
/// network's.
fn report_conduit(ep: &Endpoint) -> &'static str {
    let name = ep.conduit_name();
    let bypassed = ep.size() >= 2
        && ep.host_map().is_ok_and(|m| m.hosts() == 1)
        && ep.rma_path(1 - ep.rank().min(1)).ok() == Some(amnet::RmaPath::Direct);
    match (name, bypassed) {
        ("udp", true) => "udp+bypass",
        ("mpi", true) => "mpi+bypass",
        ("ofi", true) => "ofi+bypass",
        ("ibv", true) => "ibv+bypass",
        _ => name,
    }
}

/// One round of the measurements `opts` asks for: the floors first (the round-trip floor
/// interleaved with the AM round trips), then every suite.
fn measure(
    ep: &amnet::Endpoint,
    (st, gst): (&Arc<am::AmState>, &Arc<gups::GupsState>),
    opts: &Opts,
    plan: &Plan,
    (floors, coll): (&mut latency::Floors, &mut Option<amnet::coll::Coll>),
    local: &mut [u8],
) -> Result<Report, BenchError> {
    let me = ep.rank();
    let conduit = report_conduit(ep);
    let mut report = Report::new(conduit, ep.size());
    let udp = conduit == "udp";
    let point_to_point = !matches!(opts.suite, Suite::Barrier | Suite::Coll);
    // The bandwidth sweeps' sizes, with the one the targets are judged at.
    let mut sizes = plan.sizes(plan.max_bytes);
    if plan.max_bytes >= TARGET_BYTES && !sizes.contains(&TARGET_BYTES) {
        sizes.push(TARGET_BYTES);
    }

    // The floors come first, so that everything else can be compared with them.
    if me == 0 {
        let s = measure::timer_overhead(plan.iters);
        report.extend([report::Row::latency("floor", "timer", 0, &s, 1)]);
    }
    // On udp the 8-byte put/get latencies are interleaved with the raw ping-pong as well.
    let rma_lat_interleaved = udp && matches!(opts.suite, Suite::Rma | Suite::All);
    // The atomic round trips' domain and element (collective).
    let atomic = if point_to_point && matches!(opts.suite, Suite::Atomic | Suite::All) {
        // The operations the round trips use: a conduit that runs them itself (ibv's HCA
        // atomics) offloads the domain.
        let ad = ep.atomic_domain::<u64>(AtomicOps::of(&[
            AtomicOp::Get,
            AtomicOp::Add,
            AtomicOp::CompareSwap,
        ]))?;
        if me == 1 {
            ep.write_local(latency::ATOMIC_OFF, &0u64.to_le_bytes())?;
        }
        ep.barrier()?;
        Some(ad)
    } else {
        None
    };
    // The barrier suite alone times its floors in its own blocks.
    let with_floor = !matches!(
        opts.suite,
        Suite::Coll | Suite::Vis | Suite::Gups | Suite::Barrier
    );
    if ep.size() >= 2 && with_floor {
        // The round-trip floor, interleaved with the AM round trips when they are measured.
        let mut ops = if udp {
            vec![latency::LatOp::RawUdp]
        } else {
            vec![latency::LatOp::Floor]
        };
        if matches!(opts.suite, Suite::Am | Suite::All) {
            ops.extend([Category::Short, Category::Medium, Category::Long].map(latency::LatOp::Am));
        }
        if rma_lat_interleaved {
            ops.extend([latency::LatOp::Put, latency::LatOp::Get]);
        }
        if atomic.is_some() {
            ops.extend([latency::LatOp::FetchAdd, latency::LatOp::CompareSwap]);
        }
        report.extend(latency::run(ep, st, plan, floors, atomic.as_ref(), &ops)?);
    }
    // The bandwidth floors, for the suites with bandwidth sweeps.
    let sweeps = matches!(opts.suite, Suite::Am | Suite::Rma | Suite::All);
    if me == 0 && sweeps {
        let mut other = vec![0u8; plan.max_bytes];
        report.extend(floor::memcpy_bw(plan, &sizes, local, &mut other));
    }
    if udp && ep.size() >= 2 && sweeps {
        report.extend(rawudp::stream_bw(ep, &mut floors.raw, plan, &sizes)?);
        if let Some(raw) = floors.raw.as_ref().filter(|r| me == 0 && r.losses() > 0) {
            eprintln!(
                "amnet-bench: raw UDP floors: {} blocks or points cut short by a lost datagram",
                raw.losses()
            );
        }
    }

    #[cfg(feature = "mpi")]
    if ep.conduit_name() == "mpi" && ep.size() >= 2 && opts.suite != Suite::Coll {
        if sweeps {
            report.extend(rawmpi::run(ep, plan, &sizes)?);
        }
        if atomic.is_some() {
            report.extend(rawmpi::atomics(ep, plan)?);
        }
    }

    #[cfg(feature = "ofi")]
    if conduit == "ofi" && ep.size() >= 2 && opts.suite != Suite::Coll && sweeps {
        report.extend(rawofi::run(ep, plan)?);
    }

    if conduit == "ibv" && ep.size() >= 2 && opts.suite != Suite::Coll && sweeps {
        report.extend(rawibv::run(ep, plan)?);
    }

    if matches!(opts.suite, Suite::Am | Suite::All) {
        report.extend(am::run(ep, st, plan, local)?);
    }
    if matches!(opts.suite, Suite::Rma | Suite::All) {
        report.extend(rma::run(ep, plan, local, rma_lat_interleaved)?);
    }
    if matches!(opts.suite, Suite::Barrier | Suite::All) {
        if coll.is_none() {
            *coll = Some(amnet::coll::Coll::init(ep, None, 0, &[])?);
        }
        let c = coll.as_ref().expect("made above");
        let alone = opts.suite == Suite::Barrier;
        #[cfg(feature = "mpi")]
        let mut mpi_barrier = (alone && ep.conduit_name() == "mpi").then(rawmpi::world_barrier);
        #[allow(unused_mut)]
        let mut fl = barrier::Floors {
            line: if alone { floors.line.as_mut() } else { None },
            mpi: None,
        };
        #[cfg(feature = "mpi")]
        if let Some(f) = mpi_barrier.as_mut() {
            fl.mpi = Some(f);
        }
        report.extend(barrier::run(ep, c, plan, fl)?);
    }
    if opts.suite == Suite::Vis {
        report.extend(vis::run(ep, st, plan)?);
    }
    if opts.suite == Suite::Gups {
        report.extend(gups::run(ep, gst, plan)?);
    }
    if matches!(opts.suite, Suite::Progress | Suite::All) && ep.size() >= 2 {
        report.extend(progress::run(ep, st, plan)?);
    }
    if opts.suite == Suite::Images {
        report.extend(images::run(ep, plan)?);
    }
    if opts.suite == Suite::Coll {
        #[cfg(feature = "mpi")]
        let mut mpi_peer = if ep.conduit_name() == "mpi" {
            let max = plan.max_bytes.min(coll::MAX_BYTES);
            Some(rawmpi::MpiColl::new(ep, plan.split2, max)?)
        } else {
            None
        };
        #[allow(unused_mut)]
        let mut peer: Option<&mut dyn coll::Peer> = None;
        #[cfg(feature = "mpi")]
        if let Some(p) = mpi_peer.as_mut() {
            peer = Some(p);
        }
        report.extend(coll::run(ep, plan, peer)?);
    }
    Ok(report)
}

fn main() -> ExitCode {
    let opts = match parse_args(std::env::args().skip(1)) {
        Ok(Some(o)) => o,
        Ok(None) => {
            println!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            // Every rank parses the same arguments: let rank 0 (or a lone process) tell.
            let src = amnet::Source::env();
            if src
                .count_u32(&amnet::config::vars::RANK)
                .ok()
                .flatten()
                .unwrap_or(0)
                == 0
            {
                eprintln!("amnet-bench: {e}\n{USAGE}");
            }
            return ExitCode::from(2);
        }
    };
    match run(&opts) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("amnet-bench: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn parses_options() {
        let o = parse_args(args("all --json --iters 500 --max-bytes 1M"))
            .unwrap()
            .unwrap();
        assert_eq!(o.suite, Suite::All);
        assert!(o.json);
        assert_eq!(o.plan.iters, 500);
        assert_eq!(o.plan.max_bytes, 1 << 20);
        assert!(parse_args(args("--help")).unwrap().is_none());
        assert!(parse_args(args("nope")).is_err());
        assert!(parse_args(args("am --iters 0")).is_err());
        assert!(parse_args(args("")).is_err());
        let o = parse_args(args("am --rounds 7")).unwrap().unwrap();
        assert_eq!(o.plan.rounds, 7);
        assert_eq!(parse_args(args("all")).unwrap().unwrap().plan.rounds, 1);
        assert!(parse_args(args("am --rounds 0")).is_err());
        assert!(parse_args(args("coll --rounds 3")).is_err());
        assert!(
            parse_args(args("coll --start sync"))
                .unwrap()
                .unwrap()
                .plan
                .sync_start
        );
        assert!(
            !parse_args(args("coll --start barrier"))
                .unwrap()
                .unwrap()
                .plan
                .sync_start
        );
        assert!(parse_args(args("coll --start now")).is_err());
    }

    #[test]
    fn sizes_and_shapes() {
        let mut p = Plan {
            iters: 20_000,
            max_bytes: 4 << 20,
            network: false,
            alg_all: false,
            split2: false,
            images: 2,
            ops: None,
            rounds: 1,
            sync_start: false,
        };
        let s = p.sizes(p.max_bytes);
        assert_eq!(s.first(), Some(&8));
        assert_eq!(s.last(), Some(&(4 << 20)));
        assert_eq!(s.len(), 20);
        assert_eq!(p.sizes(100), vec![8, 16, 32, 64, 100]);
        assert_eq!(p.rma_shape(8), (5000, 100));
        assert_eq!(p.window(8), 64);
        assert_eq!(p.window(4 << 20), 4);
        assert!(p.window_iters(4 << 20, 4) >= 10);
        assert_eq!(pattern(3), vec![1, 2, 3]);
        p.network = true;
        assert_eq!(p.rma_shape(8), (5000, 1));
        assert_eq!(p.rma_shape(1 << 20), (256, 1));
        assert_eq!(p.window_iters(8, 64), 400);
        assert_eq!(p.window_iters(1 << 20, 4), 64);
    }
}
