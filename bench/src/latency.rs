//! Round-trip latencies between ranks 0 and 1, measured in interleaved blocks: the floor
//! (the cache-line ping-pong on smp, the raw UDP ping-pong on udp) and the Short, Medium
//! and Long request/reply round trips (and on udp the 8-byte blocking put and get, and the
//! atomic round trips when measured) take turns, a block of each per round, until every one
//! has its samples.
//!
//! The atomic round trips are fetch-adds and compare-swaps by rank 0 on a `u64` of rank 1's
//! segment. Where rank 1's segment is mapped (smp) the operation itself moves no message, so
//! it is timed in the shape of the cache-line floor: rank 0 increments the element (from
//! even to odd), rank 1 sees the odd value and increments it again with the same operation,
//! and rank 0's sample ends when it sees that; each operation finds the line in the other
//! core's cache. Elsewhere rank 0 times its blocking operations one by one while rank 1's
//! handlers serve them.
//!
//! On a virtual machine the cost of a cache-line transfer between the two vCPUs changes
//! when the host moves them (on the 2-core VM of bench/RESULTS.md, between about 80 and
//! 490 ns per round trip; "The 2-core VM's fast and slow states"). Measuring each operation
//! in one stretch would compare the AM round trip under one placement with the floor under
//! another; interleaving short blocks gives every operation the same mix, so the ratios hold
//! even when the absolute numbers move.

use std::sync::atomic::Ordering;

use amnet::{AtomicDomain, Category, Endpoint, RmaPath};

use crate::am::{self, AmState};
use crate::floor::PingLine;
use crate::measure::Samples;
use crate::rawudp::RawUdp;
use crate::report::Row;
use crate::{BenchError, Plan};

/// One of the interleaved round trips.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum LatOp {
    /// The cache-line ping-pong floor.
    Floor,
    /// The raw UDP ping-pong floor.
    RawUdp,
    /// An AM request of this category and its reply of the same category.
    Am(Category),
    /// A blocking 8-byte put to rank 1.
    Put,
    /// A blocking 8-byte get from rank 1.
    Get,
    /// A fetch-add on a `u64` of rank 1's segment.
    FetchAdd,
    /// A compare-swap on a `u64` of rank 1's segment.
    CompareSwap,
}

impl LatOp {
    fn row_name(self) -> (&'static str, &'static str, usize) {
        match self {
            LatOp::Floor => ("floor", "cacheline_rtt", 64),
            LatOp::RawUdp => ("floor", "raw_udp_rtt", 8),
            LatOp::Am(Category::Short) => ("am", "short_rtt", 0),
            LatOp::Am(Category::Medium) => ("am", "medium_rtt", 8),
            LatOp::Am(Category::Long) => ("am", "long_rtt", 8),
            LatOp::Put => ("rma", "put_lat", 8),
            LatOp::Get => ("rma", "get_lat", 8),
            LatOp::FetchAdd => ("atomic", "fetch_add_rtt", 8),
            LatOp::CompareSwap => ("atomic", "compare_swap_rtt", 8),
        }
    }
}

/// The floors [`run`] can interleave: the cache-line ping-pong, the raw UDP ping-pong
/// (each present on ranks 0 and 1 only when measured).
#[derive(Default)]
pub(crate) struct Floors {
    /// The shared-memory cache line (smp).
    pub(crate) line: Option<PingLine>,
    /// The raw UDP sockets (udp).
    pub(crate) raw: Option<RawUdp>,
}

/// Timed round trips per block.
const BLOCK: usize = 1000;

/// Offset of the atomic round trips' element in rank 1's segment: a cache line of its own
/// (the 8-byte put, get and Long round trips use offset 0). It starts at 0 and is even
/// between blocks.
pub(crate) const ATOMIC_OFF: u64 = 64;

/// Spins on an atomic element before each `yield_now`, so that a waiter never starves its
/// peer when the ranks share a core.
const SPINS_BEFORE_YIELD: u32 = 1 << 12;

/// True when the atomic round trips take the shape of the cache-line floor: ranks 0 and 1
/// map each other's segments (each asks about the other, so that both agree).
fn atomic_pingpong(ep: &Endpoint) -> Result<bool, BenchError> {
    let other = u32::from(ep.rank() == 0);
    Ok(ep.rma_path(other)? == RmaPath::Direct)
}

/// Waits until rank 1's atomic element (read through the domain) satisfies `ok`; returns it.
fn wait_element(ad: &AtomicDomain<u64>, ok: impl Fn(u64) -> bool) -> Result<u64, BenchError> {
    let mut spins = 0u32;
    loop {
        let v = ad.get(1, ATOMIC_OFF)?;
        if ok(v) {
            return Ok(v);
        }
        spins += 1;
        if spins == SPINS_BEFORE_YIELD {
            spins = 0;
            std::thread::yield_now();
        } else {
            std::hint::spin_loop();
        }
    }
}

/// One block of atomic round trips on rank 0 or 1 (`n` operations, the first `warmup`
/// untimed). `cur` is the element's value between blocks (even), kept by both ranks.
fn atomic_block(
    ep: &Endpoint,
    ad: &AtomicDomain<u64>,
    op: LatOp,
    (n, warmup): (usize, usize),
    cur: &mut u64,
    samples: &mut Vec<f64>,
) -> Result<(), BenchError> {
    let pingpong = atomic_pingpong(ep)?;
    let me = ep.rank();
    let step = |v: u64| -> Result<u64, BenchError> {
        Ok(if op == LatOp::FetchAdd {
            ad.fetch_add(1, ATOMIC_OFF, 1)?
        } else {
            ad.compare_swap(1, ATOMIC_OFF, v, v + 1)?
        })
    };
    for i in 0..n {
        if me == 0 {
            let t = std::time::Instant::now();
            let old = step(*cur)?;
            if old != *cur {
                return Err(BenchError::Usage(format!(
                    "atomic round trip: the element held {old}, expected {}",
                    *cur
                )));
            }
            *cur += 1;
            if pingpong {
                let want = *cur + 1;
                *cur = wait_element(ad, |v| v == want)?;
            }
            if i >= warmup {
                samples.push(t.elapsed().as_nanos() as f64);
            }
        } else if pingpong {
            let odd = wait_element(ad, |v| v % 2 == 1)?;
            step(odd)?;
            *cur = odd + 1;
        }
    }
    Ok(())
}

/// Collective: measure `ops` in interleaved blocks, `plan.iters` samples each. Returns the
/// rows on rank 0, in the order of `ops`.
pub(crate) fn run(
    ep: &Endpoint,
    st: &AmState,
    plan: &Plan,
    floors: &mut Floors,
    atomic: Option<&AtomicDomain<u64>>,
    ops: &[LatOp],
) -> Result<Vec<Row>, BenchError> {
    let block = BLOCK.min(plan.iters);
    let rounds = plan.iters.div_ceil(block);
    let first_warmup = plan.warmup(plan.iters);
    let block_warmup = plan.warmup(block);
    let payload = [0x5au8; 8];
    let mut samples: Vec<Vec<f64>> = ops.iter().map(|_| Vec::new()).collect();
    // Snapshots before the barrier: rank 0 may start sending (and rank 1 serving, inside its
    // barrier wait) as soon as rank 0 leaves it.
    let mut replies = st.replies.load(Ordering::Acquire);
    let mut served = st.served.load(Ordering::Acquire);
    let mut marks = st.marks.load(Ordering::Acquire);
    let mut word = [0u8; 8];
    // The atomic element's value between blocks (0 at the start of the run's round).
    let mut cur = 0u64;
    ep.barrier()?;
    let me = ep.rank();
    if me <= 1 {
        for round in 0..rounds {
            let timed = block.min(plan.iters - round * block);
            let warmup = if round == 0 {
                first_warmup
            } else {
                block_warmup
            };
            for (k, &op) in ops.iter().enumerate() {
                let n = warmup + timed;
                match (me, op) {
                    (0, LatOp::Floor) => {
                        if let Some(line) = floors.line.as_mut() {
                            for i in 0..n {
                                let t = std::time::Instant::now();
                                line.ping();
                                if i >= warmup {
                                    samples[k].push(t.elapsed().as_nanos() as f64);
                                }
                            }
                        }
                    }
                    (0, LatOp::RawUdp) => {
                        if let Some(raw) = floors.raw.as_mut() {
                            raw.ping_block(n, warmup, &mut samples[k]);
                        }
                    }
                    (0, LatOp::Put | LatOp::Get) => {
                        for i in 0..n {
                            let t = std::time::Instant::now();
                            if op == LatOp::Put {
                                ep.put(1, 0, &payload)?;
                            } else {
                                ep.get(1, 0, &mut word)?;
                            }
                            if i >= warmup {
                                samples[k].push(t.elapsed().as_nanos() as f64);
                            }
                        }
                        // Untimed: tell rank 1 the block is over.
                        ep.request_short(1, am::H_MARK, &[])?;
                    }
                    (_, LatOp::FetchAdd | LatOp::CompareSwap) => {
                        let ad = atomic.ok_or_else(|| {
                            BenchError::Usage("atomic round trips without a domain".into())
                        })?;
                        atomic_block(ep, ad, op, (n, warmup), &mut cur, &mut samples[k])?;
                        // Untimed: where rank 1 serves the operations, tell it the block is
                        // over.
                        if !atomic_pingpong(ep)? {
                            if me == 0 {
                                ep.request_short(1, am::H_MARK, &[])?;
                            } else {
                                marks += 1;
                                ep.wait_until(|| st.marks.load(Ordering::Acquire) >= marks)?;
                            }
                        }
                    }
                    (0, LatOp::Am(cat)) => {
                        let (req, bytes) = am::rtt_request(cat);
                        for i in 0..n {
                            let t = std::time::Instant::now();
                            am::send(ep, cat, req, &[], &payload[..bytes])?;
                            replies += 1;
                            ep.wait_until(|| st.replies.load(Ordering::Acquire) >= replies)?;
                            if i >= warmup {
                                samples[k].push(t.elapsed().as_nanos() as f64);
                            }
                        }
                    }
                    (_, LatOp::Floor) => {
                        if let Some(line) = floors.line.as_mut() {
                            for _ in 0..n {
                                line.pong();
                            }
                        }
                    }
                    (_, LatOp::RawUdp) => {
                        if let Some(raw) = floors.raw.as_mut() {
                            raw.pong_block(n);
                        }
                    }
                    (_, LatOp::Am(_)) => {
                        served += n as u64;
                        ep.wait_until(|| st.served.load(Ordering::Acquire) >= served)?;
                    }
                    (_, LatOp::Put | LatOp::Get) => {
                        // Serve the puts and gets (the library's handlers) until the mark.
                        marks += 1;
                        ep.wait_until(|| st.marks.load(Ordering::Acquire) >= marks)?;
                    }
                }
            }
        }
    }
    std::hint::black_box(&word);
    ep.barrier()?;
    if me != 0 {
        return Ok(Vec::new());
    }

    Ok(ops
        .iter()
        .zip(samples)
        .map(|(&op, s)| {
            let (suite, name, bytes) = op.row_name();
            Row::latency(suite, name, bytes, &Samples::from_ns(s), 1)
        })
        .collect())
}
