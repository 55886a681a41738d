//! The `rma` suite: blocking put and get from rank 0 to rank 1's segment, 8-byte latency
//! and bandwidth from 8 bytes up to the largest size.

use amnet::Endpoint;

use crate::floor::CopyFloor;
use crate::measure::{time_batched, time_paired, Samples, Side};
use crate::report::Row;
use crate::{BenchError, Plan};

/// Which operation to time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Put,
    Get,
}

/// Rank 0 only: time blocking `op`s of `buf.len()` bytes against rank 1, offset 0: puts
/// from `buf`, gets into it.
fn time_op(
    ep: &Endpoint,
    op: Op,
    buf: &mut [u8],
    samples: usize,
    batch: usize,
    warmup: usize,
) -> Result<Samples, BenchError> {
    let s = match op {
        Op::Put => time_batched(warmup, samples, batch, || ep.put(1, 0, buf))?,
        Op::Get => time_batched(warmup, samples, batch, || ep.get(1, 0, buf))?,
    };
    std::hint::black_box(&*buf);
    Ok(s)
}

/// Like [`time_op`], interleaved with the memcpy floor of the same copy. Returns the
/// operation's samples and the floor's.
fn time_op_paired(
    ep: &Endpoint,
    op: Op,
    buf: &mut [u8],
    floor: &mut CopyFloor,
    (samples, batch): (usize, usize),
    warmup: usize,
) -> Result<(Samples, Samples), BenchError> {
    let r = time_paired(warmup, samples, batch, |side| match (op, side) {
        (Op::Put, Side::Op) => ep.put(1, 0, buf),
        (Op::Get, Side::Op) => ep.get(1, 0, buf),
        (Op::Put, Side::Floor) => {
            floor.copy_in(buf);
            Ok(())
        }
        (Op::Get, Side::Floor) => {
            floor.copy_out(buf);
            Ok(())
        }
    })?;
    std::hint::black_box(&*buf);
    Ok(r)
}

/// Collective: the whole suite, with `local` (at least `plan.max_bytes` long) as rank 0's
/// side of every transfer. Returns the rows on rank 0. With `latency_done` the 8-byte
/// latencies were measured already (interleaved with the floor, in `latency`), and only the
/// bandwidth sweeps run.
pub(crate) fn run(
    ep: &Endpoint,
    plan: &Plan,
    local: &mut [u8],
    latency_done: bool,
) -> Result<Vec<Row>, BenchError> {
    let mut rows = Vec::new();
    ep.barrier()?;
    if ep.rank() == 0 {
        let batch = plan.latency_batch();
        let lat: &[(Op, &'static str)] = if latency_done {
            &[]
        } else {
            &[(Op::Put, "put_lat"), (Op::Get, "get_lat")]
        };
        for &(op, name) in lat {
            let s = time_op(
                ep,
                op,
                &mut local[..8],
                plan.iters,
                batch,
                plan.warmup(plan.iters),
            )?;
            rows.push(Row::latency("rma", name, 8, &s, batch));
        }
        for (op, name) in [(Op::Put, "put_bw"), (Op::Get, "get_bw")] {
            let mut floor = CopyFloor::new(plan.max_bytes);
            for n in plan.sizes(plan.max_bytes) {
                let shape = plan.rma_shape(n);
                let warmup = plan.warmup(shape.0);
                let (s, f) = time_op_paired(ep, op, &mut local[..n], &mut floor, shape, warmup)?;
                rows.push(Row::bandwidth("rma", name, n, &s, shape.1).with_floor(&f));
            }
        }
    }
    ep.barrier()?;
    Ok(rows)
}
