//! Round-trip latencies between ranks 0 and 1, measured in interleaved blocks: the floor
//! (the cache-line ping-pong on smp, the raw UDP ping-pong on udp) and the Short, Medium
//! and Long request/reply round trips (and on udp the 8-byte blocking put and get) take
//! turns, a block of each per round, until every one has its samples.
//!
//! On a virtual machine the cost of a cache-line transfer between the two vCPUs changes
//! when the host moves them (on the 2-core VM of bench/RESULTS.md, between about 80 and
//! 490 ns per round trip; "The 2-core VM's fast and slow states"). Measuring each operation
//! in one stretch would compare the AM round trip under one placement with the floor under
//! another; interleaving short blocks gives every operation the same mix, so the ratios hold
//! even when the absolute numbers move.

use std::sync::atomic::Ordering;

use amnet::{Category, Endpoint};

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

/// Collective: measure `ops` in interleaved blocks, `plan.iters` samples each. Returns the
/// rows on rank 0, in the order of `ops`.
pub(crate) fn run(
    ep: &Endpoint,
    st: &AmState,
    plan: &Plan,
    floors: &mut Floors,
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
