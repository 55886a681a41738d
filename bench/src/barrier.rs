//! The `barrier` suite: blocking barrier latency over all ranks.
//!
//! Rows: `barrier`, the endpoint's anonymous barrier (`Endpoint::barrier`); `team_barrier`,
//! the collectives' barrier on the world team (`Coll::barrier`, the one the smp-native
//! algorithms implement where the ranks share memory). When the suite runs alone it times
//! its floors in the same blocks: the shared-memory cache-line round trip between ranks 0
//! and 1 (`cacheline_rtt`, smp and mpi) and, on the mpi conduit, `MPI_Barrier` over every
//! rank (`raw_mpi_barrier`). The blocks rotate through the sides so that the VM's states
//! fall on every side alike; rank 0 times each call and reports the medians.

use amnet::coll::Coll;
use amnet::Endpoint;

use crate::floor::PingLine;
use crate::measure::Samples;
use crate::report::Row;
use crate::{BenchError, Plan};

/// Calls per block of one side.
const BLOCK: usize = 500;

/// The floors timed in the suite's own blocks.
pub(crate) struct Floors<'a> {
    /// The cache line ranks 0 and 1 ping-pong.
    pub(crate) line: Option<&'a mut PingLine>,
    /// One `MPI_Barrier` over every rank.
    pub(crate) mpi: Option<&'a mut dyn FnMut()>,
}

/// Time `n` calls of `f` into `out`.
fn block(
    n: usize,
    out: &mut Vec<f64>,
    mut f: impl FnMut() -> Result<(), BenchError>,
) -> Result<(), BenchError> {
    for _ in 0..n {
        let t = std::time::Instant::now();
        f()?;
        out.push(t.elapsed().as_nanos() as f64);
    }
    Ok(())
}

/// Collective: every rank runs the same barriers; rank 0 returns the rows.
pub(crate) fn run(
    ep: &Endpoint,
    coll: &Coll,
    plan: &Plan,
    floors: Floors<'_>,
) -> Result<Vec<Row>, BenchError> {
    let Floors { mut line, mut mpi } = floors;
    let me = ep.rank();
    let iters = plan.iters.max(1);
    let blocks = iters.div_ceil(BLOCK);
    let world = coll.world();
    let (mut core, mut team, mut cache, mut raw) = (
        Vec::with_capacity(iters),
        Vec::with_capacity(iters),
        Vec::new(),
        Vec::new(),
    );
    // Warm-up: a block of each side, untimed.
    let mut scratch = Vec::with_capacity(BLOCK);
    ep.barrier()?;
    block(plan.warmup(BLOCK), &mut scratch, || Ok(ep.barrier()?))?;
    block(
        plan.warmup(BLOCK),
        &mut scratch,
        || Ok(coll.barrier(world)?),
    )?;
    for b in 0..blocks {
        let n = BLOCK.min(iters - b * BLOCK);
        // The sides rotate: block b starts with side b mod 4.
        for side in (0..4).map(|k| (k + b) % 4) {
            match side {
                0 => {
                    ep.barrier()?;
                    block(n, &mut core, || Ok(ep.barrier()?))?;
                }
                1 => {
                    ep.barrier()?;
                    block(n, &mut team, || Ok(coll.barrier(world)?))?;
                }
                2 => {
                    let Some(l) = line.as_deref_mut() else {
                        continue;
                    };
                    ep.barrier()?;
                    match me {
                        0 => block(n, &mut cache, || {
                            l.ping();
                            Ok(())
                        })?,
                        1 => (0..n).for_each(|_| l.pong()),
                        _ => {}
                    }
                }
                _ => {
                    let Some(f) = mpi.as_deref_mut() else {
                        continue;
                    };
                    ep.barrier()?;
                    f();
                    block(n, &mut raw, || {
                        f();
                        Ok(())
                    })?;
                }
            }
        }
    }
    ep.barrier()?;
    if me != 0 {
        return Ok(Vec::new());
    }
    let row =
        |suite, op, bytes, ns: Vec<f64>| Row::latency(suite, op, bytes, &Samples::from_ns(ns), 1);
    let mut rows = Vec::new();
    if line.is_some() {
        rows.push(row("floor", "cacheline_rtt", 64, cache));
    }
    if mpi.is_some() {
        rows.push(row("floor", "raw_mpi_barrier", 0, raw));
    }
    rows.push(row("barrier", "barrier", 0, core));
    rows.push(row("barrier", "team_barrier", 0, team));
    Ok(rows)
}
