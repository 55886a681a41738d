//! The `gups` suite: HPCC RandomAccess-style updates of a table spread over every rank's
//! segment (`2^k` `u64` words per rank, word `i` of rank `r` starting as its global index),
//! each update xoring a pseudo-random value into the word it selects. Two variants, each
//! timed from a barrier to the end of its updates on every rank:
//!
//! - `gups_am`: updates buffered per destination and sent in Medium messages of up to 1024
//!   (8 KiB); the target's handler applies them through the safe atomic view of its segment
//!   (`segment_atomics`, plain loads and stores); a rank's own updates are applied directly;
//! - `gups_atomic`: one non-fetching atomic xor per update (`apply_nbi` in a `u64` domain),
//!   synced at the end.
//!
//! Figures: nanoseconds per update on one rank (the slowest rank's time over its updates) and
//! GUP/s over the job. Verification as in HPCC: the same updates applied a second time restore
//! every word; the words that do not are errors (HPCC accepts 1%; any here fails the run).

// Word indices are below 2^20 and rank numbers below the job size, both of which fit every
// integer type they are cast to here.
#![allow(clippy::cast_possible_truncation)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use amnet::{AtomicDomain, AtomicOp, Endpoint, HandlerTable};

use crate::measure::Samples;
use crate::report::Row;
use crate::{BenchError, Plan};

/// Medium request `[log]`: `u64` random values whose low `log` bits index this rank's table.
pub(crate) const H_GUPS: u8 = 209;
/// Updates per message.
const BATCH: usize = 1024;
/// The HPCC generator's polynomial.
const POLY: u64 = 7;

/// Words per rank: `2^20` on smp (8 MiB), `2^16` on network conduits.
fn table_log(plan: &Plan) -> u32 {
    if plan.network {
        16
    } else {
        20
    }
}

/// Segment bytes the suite needs: the table, then one counter and one error count per rank.
pub(crate) fn segment_bytes(plan: &Plan, ranks: usize) -> usize {
    (8usize << table_log(plan)) + 16 * ranks.max(1)
}

/// Updates the handler applied (this rank).
#[derive(Debug, Default)]
pub(crate) struct GupsState {
    pub(crate) applied: AtomicU64,
}

/// Registers the update handler.
pub(crate) fn register(t: &mut HandlerTable, st: &Arc<GupsState>) -> amnet::Result<()> {
    let s = st.clone();
    t.register(H_GUPS, move |tok, args, payload| {
        let ep = tok.endpoint();
        let Some(&log) = args.first().filter(|&&l| l < 40) else {
            return;
        };
        let Ok(table) = ep.segment_atomics::<AtomicU64>(ep.rank(), 0, 1usize << log) else {
            return;
        };
        let mask = (1u64 << log) - 1;
        let mut n = 0;
        for c in payload.chunks_exact(8) {
            let mut b = [0u8; 8];
            b.copy_from_slice(c);
            let ran = u64::from_le_bytes(b);
            let w = &table[(ran & mask) as usize];
            w.store(w.load(Ordering::Relaxed) ^ ran, Ordering::Relaxed);
            n += 1;
        }
        s.applied.fetch_add(n, Ordering::Release);
    })?;
    Ok(())
}

/// The next value of the HPCC generator.
#[inline]
fn next(ran: u64) -> u64 {
    (ran << 1) ^ if (ran as i64) < 0 { POLY } else { 0 }
}

/// The generator's start for `rank` (a distinct nonzero seed).
fn start(rank: u32) -> u64 {
    let mut x = u64::from(rank)
        .wrapping_add(1)
        .wrapping_mul(0x9e37_79b9_7f4a_7c15);
    x ^= x >> 31;
    x | 1
}

/// Which update path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Variant {
    Am,
    Atomic,
}

struct Table {
    log: u32,
    ranks: u64,
    updates: u64,
}

impl Table {
    fn mask(&self) -> u64 {
        (1u64 << self.log) - 1
    }
    /// The rank and word an update value selects.
    fn target(&self, ran: u64) -> (u32, u64) {
        let global = ran % (self.ranks << self.log);
        ((global >> self.log) as u32, ran & self.mask())
    }
}

/// One pass of this rank's updates.
fn pass(
    ep: &Endpoint,
    st: &GupsState,
    ad: &AtomicDomain<u64>,
    t: &Table,
    v: Variant,
    counters_off: u64,
) -> Result<(), BenchError> {
    let me = ep.rank();
    let n = ep.size() as usize;
    let local = ep.segment_atomics::<AtomicU64>(me, 0, 1usize << t.log)?;
    let mut ran = start(me);
    match v {
        Variant::Atomic => {
            for _ in 0..t.updates {
                ran = next(ran);
                let (r, w) = t.target(ran);
                ad.apply_nbi(r, w * 8, AtomicOp::Xor, ran, 0)?;
            }
            ep.wait_sync_nbi()?;
            ep.barrier()?;
        }
        Variant::Am => {
            let before = st.applied.load(Ordering::Acquire);
            let mut bufs: Vec<Vec<u8>> = (0..n).map(|_| Vec::with_capacity(BATCH * 8)).collect();
            let mut sent = vec![0u64; n];
            for _ in 0..t.updates {
                ran = next(ran);
                let (r, w) = t.target(ran);
                if r == me {
                    let x = &local[w as usize];
                    x.store(x.load(Ordering::Relaxed) ^ ran, Ordering::Relaxed);
                    continue;
                }
                let b = &mut bufs[r as usize];
                b.extend_from_slice(&ran.to_le_bytes());
                if b.len() == BATCH * 8 {
                    ep.request_medium(r, H_GUPS, &[t.log], b)?;
                    sent[r as usize] += BATCH as u64;
                    b.clear();
                }
            }
            for (r, b) in bufs.iter_mut().enumerate() {
                if !b.is_empty() {
                    ep.request_medium(r as u32, H_GUPS, &[t.log], b)?;
                    sent[r] += (b.len() / 8) as u64;
                    b.clear();
                }
            }
            // Every rank learns how many updates are on their way to it, then waits for them.
            for (r, &c) in sent.iter().enumerate() {
                ep.put(r as u32, counters_off + 8 * u64::from(me), &c.to_le_bytes())?;
            }
            ep.barrier()?;
            let mut counts = vec![0u8; 8 * n];
            ep.read_local(counters_off, &mut counts)?;
            let want: u64 = counts
                .chunks_exact(8)
                .map(|c| u64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
                .sum();
            ep.wait_until(|| st.applied.load(Ordering::Acquire) - before >= want)?;
            ep.barrier()?;
        }
    }
    Ok(())
}

/// Collective: both variants, timed and verified. Returns the rows on rank 0.
pub(crate) fn run(ep: &Endpoint, st: &GupsState, plan: &Plan) -> Result<Vec<Row>, BenchError> {
    let me = ep.rank();
    let n = u64::from(ep.size());
    let log = table_log(plan);
    let words = 1usize << log;
    let t = Table {
        log,
        ranks: n,
        updates: 4 * words as u64,
    };
    let counters_off = (words * 8) as u64;
    let err_off = counters_off + 8 * n;
    let ad = ep.atomic_domain::<u64>(AtomicOp::Xor.into())?;
    let mut rows = Vec::new();
    for (v, name) in [(Variant::Am, "gups_am"), (Variant::Atomic, "gups_atomic")] {
        // HPCC's initial table: word i of rank r holds its global index.
        let local = ep.segment_atomics::<AtomicU64>(me, 0, words)?;
        for (i, w) in local.iter().enumerate() {
            w.store((u64::from(me) << log) + i as u64, Ordering::Relaxed);
        }
        ep.barrier()?;
        let t0 = Instant::now();
        pass(ep, st, &ad, &t, v, counters_off)?;
        let ns = t0.elapsed().as_nanos() as f64;
        // Verification: the same updates again restore the table.
        pass(ep, st, &ad, &t, v, counters_off)?;
        let errors = local
            .iter()
            .enumerate()
            .filter(|&(i, w)| w.load(Ordering::Relaxed) != (u64::from(me) << log) + i as u64)
            .count() as u64;
        ep.barrier()?;
        ep.put(0, err_off + 8 * u64::from(me), &errors.to_le_bytes())?;
        ep.barrier()?;
        if me == 0 {
            let mut all = vec![0u8; 8 * n as usize];
            ep.read_local(err_off, &mut all)?;
            let total: u64 = all
                .chunks_exact(8)
                .map(|c| u64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
                .sum();
            if total > 0 {
                return Err(BenchError::Usage(format!(
                    "{name}: verification found {total} of {} words wrong",
                    n << log
                )));
            }
            let per = Samples::from_ns(vec![ns / t.updates as f64]);
            rows.push(Row::latency("gups", name, 8, &per, 1));
        }
        ep.barrier()?;
    }
    Ok(rows)
}
