//! The `coll` suite: latency of the collectives (broadcast, scatter, gather, gather_all,
//! exchange, reduce_to_all, prefix_reduce, reduce_elems_to_all, scan_elems, reduce_elems) in each of the nine IN/OUT synchronization
//! modes, single-address form (`SINGLE`, segment addresses), with the AM requests each call
//! sends.
//!
//! Method (OSU style): every rank runs the same calls; before each call (warm-up included)
//! the ranks meet in a barrier, outside the timed region, and each rank times its own call,
//! from initiation to the return of the blocking call. Per point, each rank keeps the mean,
//! median and 99th percentile of its samples and the AM requests it sent per call (its
//! request count over the timed loop, less the barriers' share measured beforehand). At the
//! end one `gather` brings every rank's figures to rank 0, which reports the average over
//! ranks of the per-rank means (the headline), their minimum and maximum, the average of
//! the medians, the largest per-rank p99 and the requests per call summed over ranks.
//!
//! With one rank per core (2 ranks on the 2-core VM) the waits of `Endpoint::barrier` and of
//! the collectives both end in sleeps of tens to hundreds of microseconds, and a point can
//! settle into a rhythm in which the rank that waits for data sleeps every call (120-250 µs
//! on it, about 3 µs on the other): look at `min us` for what the protocol itself costs. A
//! barrier that never sleeps avoids the rhythm with 2 ranks but doubles every time with 4
//! oversubscribed ranks, so the suite keeps the library's barrier (bench/RESULTS.md, "What was
//! tried and not kept").
//!
//! `--start sync` starts every timed call, amnet's and MPI's, at an instant the ranks agreed
//! on (`Start`): after its barrier a rank waits for the call's window on `CLOCK_MONOTONIC`.
//! Without it a call starts when the barrier before it lets the rank out, and a barrier
//! whose last arrival leaves at once while the others leave a line flight later (amnet's
//! flags) makes a rooted call's waiting rank wait that flight as well, where one that lets
//! its ranks out together (Open MPI's) does not.
//!
//! The broadcast's `IN_MYSYNC|OUT_MYSYNC` calls alternate with a local memcpy of the same
//! bytes between two page-aligned buffers of the rank (rows `memcpy`); the targets give the
//! broadcast's bandwidth over it at 64 KiB and 1 MiB (medians).
//!
//! `--alg all` measures, per operation and size, every algorithm in turn
//! (`IN_ALLSYNC|OUT_ALLSYNC`, forced through `Coll::tune`; an algorithm that does not admit
//! the call is skipped on every rank alike), then the one the selector picks. `--team split2`
//! runs everything on the job's two halves (even and odd ranks) at the same time, each on its
//! own team; rank 0 reports its half.
//!
//! Team creation closes the suite: `team_split` splits the team into its even and odd ranks
//! (one gather_all of colors and keys; the algorithm column names the gather_all the
//! selector picks), `team_create` makes the team of its even ranks from a list (no
//! messages); each call is timed alone and the new team destroyed after the clock stops.
//!
//! With the mpi feature on the mpi conduit, MPI's own collectives run in the same job on a
//! duplicate of the job's communicator (split like the team under `--team split2`): at each
//! operation and size the reference point (`IN_ALLSYNC|OUT_ALLSYNC`, or the selected
//! algorithm under `--alg all`) alternates call by call with the MPI counterpart, each after
//! a barrier of its own library, and the report gives every amnet row's ratio to MPI
//! (`vs peer`). The counterparts: `MPI_Bcast`, `MPI_Scatter`, `MPI_Gather`, `MPI_Allgather`,
//! `MPI_Alltoall`; for the array reductions, what an MPI program writes for the same result:
//! the sum of the rank's own elements and an `MPI_Allreduce` of one u64 (reduce_to_all), the
//! rank's local inclusive scan, an `MPI_Exscan` of its total and the carry added to each
//! element (prefix_reduce); `MPI_Allreduce` and `MPI_Scan` for the vector reductions.
//!
//! Sizes: `bytes` is the block each participant contributes or receives: the broadcast
//! payload, the per-participant block of scatter/gather/gather_all/exchange (the root's
//! scatter source and gather destination, every rank's gather_all destination and exchange
//! areas, are `bytes * ranks`), for the array reductions `8 * elements` of u64 data in a
//! block-cyclic layout with one block per rank (so each rank holds about `bytes / ranks`),
//! and for the vector reductions (`reduce_elems_to_all`, `scan_elems`, `reduce_elems` to rank
//! 0) every rank's vector of
//! `bytes / 8` u64 elements, combined elementwise.

use amnet::coll::builtin::builtin_index;
use amnet::coll::raw::Collectives;
use amnet::coll::{flags, Addr, Coll, ElemType, Layout, RedOp, Team};
use amnet::{Endpoint, Error};

use crate::measure::Samples;
use crate::report::Row;
use crate::{BenchError, Plan};

/// Another library's collectives, timed call by call against amnet's reference point.
pub(crate) trait Peer {
    /// The name of the counterpart of the operation named `op` (`"broadcast"`, ...), if the
    /// peer has one.
    fn counterpart(&self, op: &str) -> Option<&'static str>;
    /// A barrier of the peer over the team's ranks (outside the timed region).
    fn barrier(&mut self) -> Result<(), BenchError>;
    /// One call of `op`'s counterpart at `n` bytes (the suite's meaning of `bytes`).
    fn call(&mut self, op: &str, n: usize) -> Result<(), BenchError>;
}

/// The collectives the suite measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Broadcast,
    Scatter,
    Gather,
    GatherAll,
    Exchange,
    ReduceToAll,
    Prefix,
    /// Elementwise reduction of every rank's vector, to every rank (MPI_Allreduce).
    ReduceElemsToAll,
    /// Elementwise inclusive scan over the ranks' vectors (MPI_Scan).
    ScanElems,
    /// Elementwise reduction of the ranks' vectors to rank 0 (MPI_Reduce).
    ReduceElems,
    /// Team creation: `split` of the team into its even and odd ranks.
    TeamSplit,
    /// Team creation: `create` of the team's even ranks from an explicit list.
    TeamCreate,
}

impl Op {
    const ALL: [Op; 10] = [
        Op::Broadcast,
        Op::Scatter,
        Op::Gather,
        Op::GatherAll,
        Op::Exchange,
        Op::ReduceToAll,
        Op::Prefix,
        Op::ReduceElemsToAll,
        Op::ScanElems,
        Op::ReduceElems,
    ];

    fn name(self) -> &'static str {
        match self {
            Op::Broadcast => "broadcast",
            Op::Scatter => "scatter",
            Op::Gather => "gather",
            Op::GatherAll => "gather_all",
            Op::Exchange => "exchange",
            Op::ReduceToAll => "reduce_to_all",
            Op::Prefix => "prefix_reduce",
            Op::ReduceElemsToAll => "reduce_elems_to_all",
            Op::ScanElems => "scan_elems",
            Op::ReduceElems => "reduce_elems",
            Op::TeamSplit => "team_split",
            Op::TeamCreate => "team_create",
        }
    }
}

/// The names `--ops` accepts: every operation the suite measures.
pub(crate) const OP_NAMES: [&str; 12] = [
    "broadcast",
    "scatter",
    "gather",
    "gather_all",
    "exchange",
    "reduce_to_all",
    "prefix_reduce",
    "reduce_elems_to_all",
    "scan_elems",
    "reduce_elems",
    "team_split",
    "team_create",
];

/// The IN and OUT modes, strongest first; every pair is measured.
const IN_MODES: [(u32, &str); 3] = [
    (flags::IN_ALLSYNC, "IN_ALLSYNC"),
    (flags::IN_MYSYNC, "IN_MYSYNC"),
    (flags::IN_NOSYNC, "IN_NOSYNC"),
];
const OUT_MODES: [(u32, &str); 3] = [
    (flags::OUT_ALLSYNC, "OUT_ALLSYNC"),
    (flags::OUT_MYSYNC, "OUT_MYSYNC"),
    (flags::OUT_NOSYNC, "OUT_NOSYNC"),
];

/// The sync-mode label every ratio is taken against.
pub(crate) const REFERENCE_SYNC: &str = "IN_ALLSYNC|OUT_ALLSYNC";

/// The nine (flags, label) pairs, IN_ALLSYNC|OUT_ALLSYNC first.
fn modes() -> Vec<(u32, &'static str)> {
    const LABELS: [&str; 9] = [
        "IN_ALLSYNC|OUT_ALLSYNC",
        "IN_ALLSYNC|OUT_MYSYNC",
        "IN_ALLSYNC|OUT_NOSYNC",
        "IN_MYSYNC|OUT_ALLSYNC",
        "IN_MYSYNC|OUT_MYSYNC",
        "IN_MYSYNC|OUT_NOSYNC",
        "IN_NOSYNC|OUT_ALLSYNC",
        "IN_NOSYNC|OUT_MYSYNC",
        "IN_NOSYNC|OUT_NOSYNC",
    ];
    let mut v = Vec::with_capacity(9);
    for (i, &(fi, ni)) in IN_MODES.iter().enumerate() {
        for (o, &(fo, no)) in OUT_MODES.iter().enumerate() {
            let label = LABELS[i * 3 + o];
            debug_assert_eq!(label, format!("{ni}|{no}"));
            v.push((fi | fo, label));
        }
    }
    v
}

/// Largest size the suite measures by default (`--max-bytes` caps it further).
pub(crate) const MAX_BYTES: usize = 1 << 20;

/// The sizes: 8 B to 1 MiB in powers of 8, plus 64 KiB, capped at `max`.
pub(crate) fn sizes(max: usize) -> Vec<usize> {
    [8, 64, 512, 4 << 10, 32 << 10, 64 << 10, 256 << 10, 1 << 20]
        .into_iter()
        .filter(|&n| n <= max)
        .collect()
}

/// Bytes of segment the suite needs on every rank of a `ranks`-rank job whose largest size
/// is `max`.
pub(crate) fn segment_bytes(max: usize, ranks: usize) -> usize {
    let l = layout(max, ranks);
    l.gathered + l.results * ranks
}

/// Where the suite's areas lie in the segment.
#[derive(Debug, Clone, Copy)]
struct SegLayout {
    /// Source area (`max * ranks` bytes).
    src: usize,
    /// Destination area (`max * ranks` bytes).
    dst: usize,
    /// This rank's figures (`results` bytes).
    mine: usize,
    /// Every rank's figures, gathered on rank 0 (`results * ranks` bytes).
    gathered: usize,
    /// Bytes of one rank's figures.
    results: usize,
}

/// Points of team creation (split, create).
const TEAM_POINTS: usize = 2;

/// Figures per point and rank: mean, median, p99 (ns), requests per call.
const FIGS: usize = 4;

/// Points per (operation, size) at most: the nine modes, or every algorithm and the selected
/// one, and the peer's counterpart.
const POINTS_PER_SIZE: usize = 16;

fn layout(max: usize, ranks: usize) -> SegLayout {
    let area = (max * ranks).next_multiple_of(4096);
    let points = Op::ALL.len() * sizes(max).len() * POINTS_PER_SIZE + TEAM_POINTS;
    let results = (points * FIGS * 8).next_multiple_of(64);
    SegLayout {
        src: 0,
        dst: area,
        mine: 2 * area,
        gathered: 2 * area + results,
        results,
    }
}

/// The synchronized start of `--start sync`: every timed call of a point, amnet's and the
/// peer's, begins at an instant the ranks agreed on, one window after the previous one, read
/// from `CLOCK_MONOTONIC` (one clock for every process of the host). The barrier before each
/// call stays (every rank finished the previous call); the start then no longer depends on
/// when that library's barrier let each rank out (a barrier whose last arrival leaves at once
/// and the others a line flight later makes a rooted call's waiting rank wait that flight
/// too). A rank that reaches a start after it counts the call late and, like the others,
/// which find the following start past too, moves to the first start a window ahead.
struct Start {
    /// The next start, `CLOCK_MONOTONIC` nanoseconds.
    next: u64,
    /// Nanoseconds between starts.
    window: u64,
    /// Calls started late, and all calls.
    late: usize,
    turns: usize,
}

/// `CLOCK_MONOTONIC` in nanoseconds.
fn mono_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec to write; CLOCK_MONOTONIC always exists on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    u64::try_from(ts.tv_sec).unwrap_or(0) * 1_000_000_000 + u64::try_from(ts.tv_nsec).unwrap_or(0)
}

impl Start {
    /// Agree on the first start and the window: each rank proposes four times its 90th
    /// percentile warm-up round (`rounds_ns`: barrier and call, and the peer's, of which a
    /// round holds `calls`) per call plus 2 µs, and a first start 50 µs from now; the largest
    /// proposals win (a reduction over the world, in the results area, outside the timed
    /// region).
    fn agree(
        ep: &Endpoint,
        coll: &Coll,
        l: &SegLayout,
        rounds_ns: &mut [u64],
        calls: u64,
    ) -> Result<Start, BenchError> {
        rounds_ns.sort_unstable();
        let p90 = rounds_ns
            .get(rounds_ns.len() * 9 / 10)
            .copied()
            .unwrap_or(0);
        let window = 4 * p90 / calls + 2_000;
        let mine: Vec<u8> = [mono_ns() + 50_000, window]
            .iter()
            .flat_map(|v| v.to_ne_bytes())
            .collect();
        ep.write_local(l.mine as u64, &mine)?;
        let func = builtin_index(RedOp::Max, ElemType::U64).unwrap_or(0);
        // SAFETY: segment offsets only: no pointer address to keep valid.
        unsafe {
            coll.reduce_elems_to_all(
                coll.world(),
                Addr::seg(l.mine as u64 + 32),
                Addr::seg(l.mine as u64),
                8,
                2,
                func,
                0,
                flags::ALLSYNC | flags::SINGLE,
            )
        }?;
        let mut both = [0u8; 16];
        ep.read_local(l.mine as u64 + 32, &mut both)?;
        let word = |i: usize| {
            let mut b = [0u8; 8];
            b.copy_from_slice(&both[i * 8..i * 8 + 8]);
            u64::from_ne_bytes(b)
        };
        Ok(Start {
            next: word(0),
            window: word(1).max(1),
            late: 0,
            turns: 0,
        })
    }

    /// Wait for this call's start (spinning: the window is a few microseconds); past it, count
    /// the call late and take the first start a window ahead for the next one.
    fn wait_turn(&mut self) {
        self.turns += 1;
        let mut now = mono_ns();
        if now > self.next {
            self.late += 1;
            let behind = (now - self.next) / self.window + 2;
            self.next += behind * self.window;
            return;
        }
        while now < self.next {
            std::hint::spin_loop();
            now = mono_ns();
        }
        self.next += self.window;
    }
}

/// Fewest timed calls per point.
const MIN_ITERS: usize = 20;

/// (warm-up, timed) calls at `n` bytes: `--iters / 100` (200 by default) up to 4 KiB, then
/// fewer as sizes grow (but at least [`MIN_ITERS`]); a tenth as many warm-ups (at least 2).
/// Most calls take 20 µs to 3 ms on the 2-core VM, so the default run stays near a minute.
fn shape(plan: &Plan, n: usize) -> (usize, usize) {
    let base = (plan.iters / 100).max(MIN_ITERS);
    let iters = if n <= 4096 {
        base
    } else {
        (base * 4096 / n).max(MIN_ITERS)
    };
    ((iters / 10).max(2), iters)
}

/// One blocking collective of `op` at `n` bytes with `fl` (the IN/OUT bits and `SINGLE`) on
/// team `w` of `ranks` ranks.
fn call(
    coll: &Coll,
    w: &Team,
    op: Op,
    n: usize,
    ranks: usize,
    l: &SegLayout,
    fl: u32,
) -> amnet::Result<()> {
    let (src, dst) = (Addr::seg(l.src as u64), Addr::seg(l.dst as u64));
    match op {
        Op::Broadcast =>
        // SAFETY: segment offsets (and InPlace) only: no pointer address to keep valid.
        unsafe { coll.broadcast(w, dst, 0, src, n, fl) },
        Op::Scatter =>
        // SAFETY: segment offsets (and InPlace) only: no pointer address to keep valid.
        unsafe { coll.scatter(w, dst, 0, src, n, fl) },
        Op::Gather =>
        // SAFETY: segment offsets (and InPlace) only: no pointer address to keep valid.
        unsafe { coll.gather(w, 0, dst, src, n, fl) },
        Op::GatherAll =>
        // SAFETY: segment offsets (and InPlace) only: no pointer address to keep valid.
        unsafe { coll.gather_all(w, dst, src, n, fl) },
        Op::Exchange =>
        // SAFETY: segment offsets (and InPlace) only: no pointer address to keep valid.
        unsafe { coll.exchange(w, dst, src, n, fl) },
        Op::ReduceElemsToAll | Op::ScanElems | Op::ReduceElems => {
            let func = builtin_index(RedOp::Sum, ElemType::U64).unwrap_or(0);
            if op == Op::ScanElems {
                // SAFETY: segment offsets only: no pointer address to keep valid.
                unsafe { coll.scan_elems(w, dst, src, 8, n / 8, func, 0, fl) }
            } else if op == Op::ReduceElems {
                // SAFETY: segment offsets only: no pointer address to keep valid.
                unsafe { coll.reduce_elems(w, 0, dst, src, 8, n / 8, func, 0, fl) }
            } else {
                // SAFETY: segment offsets only: no pointer address to keep valid.
                unsafe { coll.reduce_elems_to_all(w, dst, src, 8, n / 8, func, 0, fl) }
            }
        }
        Op::TeamSplit | Op::TeamCreate => Err(Error::Usage {
            op: "amnet-bench coll",
            detail: "team creation is timed by `team_point`".into(),
        }),
        Op::ReduceToAll | Op::Prefix => {
            let count = n / 8;
            let lay = Layout::block_cyclic(count.div_ceil(ranks).max(1), 0);
            let func = builtin_index(RedOp::Sum, ElemType::U64).unwrap_or(0);
            if op == Op::ReduceToAll {
                // SAFETY: segment offsets (and InPlace) only: no pointer address to keep valid.
                unsafe { coll.reduce_to_all(w, dst, src, lay, 8, count, func, 0, fl) }
            } else {
                // SAFETY: segment offsets (and InPlace) only: no pointer address to keep valid.
                unsafe { coll.prefix_reduce(w, dst, lay, src, lay, 8, count, func, 0, fl) }
            }
        }
    }
}

/// AM requests this rank has sent so far.
fn requests(ep: &Endpoint) -> u64 {
    ep.stats().requests_sent.messages()
}

/// The `&'static` name of algorithm `name` of `op` (names come from `Coll::algorithms`).
fn alg_name(op: Op, name: &str) -> &'static str {
    Coll::algorithms(op.name())
        .unwrap_or_default()
        .into_iter()
        .find(|a| *a == name)
        .unwrap_or("?")
}

/// Whether `e` is the refusal of a forced algorithm that does not admit the call.
fn not_admitted(e: &Error) -> bool {
    matches!(e, Error::Usage { detail, .. } if detail.contains("AMNET_COLL_TUNE forces"))
}

/// The sync label of a peer's rows.
pub(crate) const PEER_SYNC: &str = "peer";

/// The sync label of the memcpy floor's rows: a local copy of the broadcast's bytes between
/// two page-aligned buffers, timed interleaved with each IN_MYSYNC|OUT_MYSYNC broadcast.
pub(crate) const FLOOR_SYNC: &str = "memcpy";

/// The mode whose broadcast the memcpy floor pairs with.
pub(crate) const FLOOR_PAIRED_SYNC: &str = "IN_MYSYNC|OUT_MYSYNC";

/// The peer and the name of `op`'s counterpart, if there is a peer with one.
fn pair<'a>(
    peer: &'a mut Option<&mut dyn Peer>,
    op: Op,
) -> Option<(&'a mut dyn Peer, &'static str)> {
    let p = peer.as_deref_mut()?;
    let name = p.counterpart(op.name())?;
    Some((p, name))
}

/// Collective: measure every op, size and mode (or algorithm). Returns the rows on rank 0.
///
/// `peer`, when given, is timed against the reference point of each operation and size.
pub(crate) fn run(
    ep: &Endpoint,
    plan: &Plan,
    mut peer: Option<&mut dyn Peer>,
) -> Result<Vec<Row>, BenchError> {
    let coll = Coll::init(ep, None, 0, &[])?;
    let team = if plan.split2 {
        let me = ep.rank();
        let key = i32::try_from(me).unwrap_or(0);
        coll.split(coll.world(), Some(me % 2), key)?
            .ok_or(BenchError::Usage("no half team".into()))?
    } else {
        coll.world().clone()
    };
    let ranks = team.size() as usize;
    let max = plan.max_bytes.min(MAX_BYTES);
    let l = layout(max, ep.size() as usize);
    // Small u64 values, so that sums and scans stay far from overflow.
    let src: Vec<u8> = (0..max * ranks / 8)
        .flat_map(|i| (i as u64 % 251 + 1).to_ne_bytes())
        .collect();
    ep.write_local(l.src as u64, &src)?;

    // The barriers' share of the request counts.
    ep.barrier()?;
    let calib = 200;
    let before = requests(ep);
    for _ in 0..calib {
        ep.barrier()?;
    }
    let per_barrier = (requests(ep) - before) as f64 / calib as f64;

    let modes = modes();
    let sizes = sizes(max);
    // The memcpy floor's buffers: the source's bytes, copied to a page-aligned buffer.
    let span = max.div_ceil(4096) * 4096;
    let mut floor_buf = vec![0u8; 2 * span + 4096];
    let fa = floor_buf.as_ptr().align_offset(4096).min(4096);
    let (floor_src, floor_dst) = floor_buf[fa..fa + 2 * span].split_at_mut(span);
    floor_src[..max].copy_from_slice(&src[..max]);
    // Every page of the copy's destination in memory before the first timed copy.
    floor_dst.fill(1);
    // Timed calls that started late under `--start sync`, of all of them.
    let mut late = (0usize, 0usize);
    let mut figs: Vec<f64> = Vec::with_capacity(Op::ALL.len() * sizes.len() * 9 * FIGS);
    let mut points = Vec::new();
    // Time one point: warm-up, then timed calls, each after a barrier. With `paired`, the
    // peer's counterpart alternates with the amnet call and makes a second point.
    let mut point = |op: Op,
                     n: usize,
                     fl: u32,
                     label: &'static str,
                     alg: &'static str,
                     paired: Option<(&mut dyn Peer, &'static str)>| {
        let (warmup, iters) = shape(plan, n);
        let mut paired = paired;
        let mut rounds_ns = Vec::with_capacity(warmup);
        for _ in 0..warmup {
            let t = std::time::Instant::now();
            ep.barrier()?;
            call(&coll, &team, op, n, ranks, &l, fl)?;
            if let Some((p, _)) = paired.as_mut() {
                p.barrier()?;
                p.call(op.name(), n)?;
            }
            rounds_ns.push(u64::try_from(t.elapsed().as_nanos()).unwrap_or(u64::MAX));
        }
        let mut start = if plan.sync_start {
            let calls = if paired.is_some() { 2 } else { 1 };
            Some(Start::agree(ep, &coll, &l, &mut rounds_ns, calls)?)
        } else {
            None
        };
        let mut ns = Vec::with_capacity(iters);
        let mut peer_ns = Vec::with_capacity(if paired.is_some() { iters } else { 0 });
        let floor = op == Op::Broadcast && label == FLOOR_PAIRED_SYNC && !plan.alg_all;
        let mut floor_ns = Vec::with_capacity(if floor { iters } else { 0 });
        // The peer's calls and barriers send no AM requests.
        let before = requests(ep);
        for _ in 0..iters {
            ep.barrier()?;
            if let Some(st) = start.as_mut() {
                st.wait_turn();
            }
            let t = std::time::Instant::now();
            call(&coll, &team, op, n, ranks, &l, fl)?;
            ns.push(t.elapsed().as_nanos() as f64);
            if floor {
                let t = std::time::Instant::now();
                floor_dst[..n].copy_from_slice(std::hint::black_box(&floor_src[..n]));
                std::hint::black_box(&floor_dst[..n]);
                floor_ns.push(t.elapsed().as_nanos() as f64);
            }
            if let Some((p, _)) = paired.as_mut() {
                p.barrier()?;
                if let Some(st) = start.as_mut() {
                    st.wait_turn();
                }
                let t = std::time::Instant::now();
                p.call(op.name(), n)?;
                peer_ns.push(t.elapsed().as_nanos() as f64);
            }
        }
        if let Some(st) = start {
            late.0 += st.late;
            late.1 += st.turns;
        }
        let sent = (requests(ep) - before) as f64 - per_barrier * iters as f64;
        let mean = ns.iter().sum::<f64>() / iters as f64;
        let s = Samples::from_ns(ns);
        figs.extend([mean, s.p50(), s.p99(), sent / iters as f64]);
        points.push((op, n, label, alg, iters));
        if floor {
            let mean = floor_ns.iter().sum::<f64>() / iters as f64;
            let s = Samples::from_ns(floor_ns);
            figs.extend([mean, s.p50(), s.p99(), f64::NAN]);
            points.push((op, n, FLOOR_SYNC, "memcpy", iters));
        }
        if let Some((_, name)) = paired {
            let mean = peer_ns.iter().sum::<f64>() / iters as f64;
            let s = Samples::from_ns(peer_ns);
            figs.extend([mean, s.p50(), s.p99(), f64::NAN]);
            points.push((op, n, PEER_SYNC, name, iters));
        }
        Ok::<(), BenchError>(())
    };
    let wanted = |op: Op| {
        plan.ops
            .as_ref()
            .is_none_or(|l| l.iter().any(|o| o == op.name()))
    };
    for op in Op::ALL.into_iter().filter(|&op| wanted(op)) {
        for &n in &sizes {
            if !plan.alg_all {
                for &(mode, label) in &modes {
                    let fl = mode | flags::SINGLE;
                    let alg = alg_name(op, &coll.selected(&team, op.name(), n, mode)?);
                    let paired = if label == REFERENCE_SYNC {
                        pair(&mut peer, op)
                    } else {
                        None
                    };
                    point(op, n, fl, label, alg, paired)?;
                }
                continue;
            }
            let fl = flags::ALLSYNC | flags::SINGLE;
            for name in Coll::algorithms(op.name()).unwrap_or_default() {
                coll.tune(&format!("{}:-:{name}", op.name()))?;
                // Every rank gets the same answer: a refusal skips the algorithm everywhere.
                ep.barrier()?;
                match call(&coll, &team, op, n, ranks, &l, fl) {
                    Err(e) if not_admitted(&e) => continue,
                    r => r?,
                }
                point(op, n, fl, REFERENCE_SYNC, name, None)?;
            }
            coll.tune("")?;
            let alg = alg_name(op, &coll.selected(&team, op.name(), n, flags::ALLSYNC)?);
            let paired = pair(&mut peer, op);
            point(op, n, fl, "selected", alg, paired)?;
        }
    }
    coll.tune("")?;

    // Team creation: each call timed alone (the new team's destruction, a barrier on it,
    // after the clock stops), with the requests the creation itself sent.
    for op in [Op::TeamSplit, Op::TeamCreate]
        .into_iter()
        .filter(|&op| wanted(op))
    {
        let (warmup, iters) = shape(plan, 8);
        let evens: Vec<u32> = (0..team.size()).step_by(2).collect();
        let mut ns = Vec::with_capacity(iters);
        let mut sent = 0;
        for i in 0..warmup + iters {
            ep.barrier()?;
            let before = requests(ep);
            let t = std::time::Instant::now();
            let made = if op == Op::TeamSplit {
                let key = i32::try_from(team.rank()).unwrap_or(0);
                coll.split(&team, Some(team.rank() % 2), key)?
            } else {
                coll.create(&team, &evens)?
            };
            let took = t.elapsed().as_nanos() as f64;
            if i >= warmup {
                ns.push(took);
                sent += requests(ep) - before;
            }
            if let Some(t) = made {
                coll.destroy(&t)?;
            }
        }
        let mean = ns.iter().sum::<f64>() / iters as f64;
        let s = Samples::from_ns(ns);
        figs.extend([mean, s.p50(), s.p99(), sent as f64 / iters as f64]);
        let alg = if op == Op::TeamSplit {
            let mode = flags::IN_MYSYNC | flags::OUT_MYSYNC;
            alg_name(Op::GatherAll, &coll.selected(&team, "gather_all", 8, mode)?)
        } else {
            "-"
        };
        points.push((op, 0, "-", alg, iters));
    }

    if plan.sync_start {
        eprintln!(
            "# rank {}: {} of {} timed calls started late (synchronized start)",
            ep.rank(),
            late.0,
            late.1
        );
    }
    // Every rank's figures to rank 0 (the whole job: with split2 rank 0 reports its half).
    let bytes: Vec<u8> = figs.iter().flat_map(|v| v.to_ne_bytes()).collect();
    ep.write_local(l.mine as u64, &bytes)?;
    ep.barrier()?;
    // SAFETY: segment offsets (and InPlace) only: no pointer address to keep valid.
    unsafe {
        coll.gather(
            coll.world(),
            0,
            Addr::seg(l.gathered as u64),
            Addr::seg(l.mine as u64),
            l.results,
            flags::ALLSYNC | flags::SINGLE,
        )
    }?;
    ep.barrier()?;
    if ep.rank() != 0 {
        return Ok(Vec::new());
    }
    let all_ranks = ep.size() as usize;
    let mut all = vec![0u8; l.results * all_ranks];
    ep.read_local(l.gathered as u64, &mut all)?;
    let fig = |rank: usize, point: usize, k: usize| {
        let at = rank * l.results + (point * FIGS + k) * 8;
        let mut b = [0u8; 8];
        b.copy_from_slice(&all[at..at + 8]);
        f64::from_ne_bytes(b)
    };
    // The job ranks of rank 0's team.
    let mine: Vec<usize> = team.members().iter().map(|&r| r as usize).collect();
    let rf = mine.len() as f64;
    Ok(points
        .iter()
        .enumerate()
        .map(|(p, &(op, n, label, alg, iters))| {
            let means: Vec<f64> = mine.iter().map(|&r| fig(r, p, 0)).collect();
            let avg = means.iter().sum::<f64>() / rf;
            let p50 = mine.iter().map(|&r| fig(r, p, 1)).sum::<f64>() / rf;
            let p99 = mine.iter().map(|&r| fig(r, p, 2)).fold(0.0, f64::max);
            let msgs = mine.iter().map(|&r| fig(r, p, 3)).sum::<f64>();
            let min = means.iter().copied().fold(f64::INFINITY, f64::min);
            let max = means.iter().copied().fold(0.0, f64::max);
            Row::collective(
                op.name(),
                n,
                label,
                alg,
                [avg, p50, p99, min, max],
                msgs,
                iters,
            )
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_and_sizes() {
        let m = modes();
        assert_eq!(m.len(), 9);
        assert_eq!(m[0].1, REFERENCE_SYNC);
        assert_eq!(m[0].0, flags::ALLSYNC);
        assert_eq!(m[8].0, flags::NOSYNC);
        assert_eq!(m[4].0, flags::MYSYNC);
        assert_eq!(sizes(MAX_BYTES).len(), 8);
        assert_eq!(sizes(100), vec![8, 64]);
        for op in Op::ALL {
            assert!(OP_NAMES.contains(&op.name()), "{}", op.name());
        }
        let l = layout(1 << 20, 4);
        assert!(l.gathered >= l.mine + l.results);
        assert!(segment_bytes(1 << 20, 4) >= 8 << 20);
        let p = Plan {
            iters: 20_000,
            max_bytes: 1 << 20,
            network: false,
            alg_all: false,
            split2: false,
            images: 2,
            ops: None,
            rounds: 1,
            sync_start: false,
        };
        assert_eq!(shape(&p, 8), (20, 200));
        assert_eq!(shape(&p, 64 << 10), (2, 20));
        assert_eq!(shape(&p, 1 << 20), (2, 20));
    }
}
