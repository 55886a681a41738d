//! The `barrier` suite: anonymous blocking barrier latency over all ranks.

use amnet::Endpoint;

use crate::measure::time_each;
use crate::report::Row;
use crate::{BenchError, Plan};

/// Collective: every rank runs the same number of barriers; rank 0 times each one and
/// returns the row.
pub(crate) fn run(ep: &Endpoint, plan: &Plan) -> Result<Vec<Row>, BenchError> {
    let (warmup, iters) = (plan.warmup(plan.iters), plan.iters);
    ep.barrier()?;
    let s = time_each(warmup, iters, |_| ep.barrier())?;
    ep.barrier()?;
    Ok(if ep.rank() == 0 {
        vec![Row::latency("barrier", "barrier", 0, &s, 1)]
    } else {
        Vec::new()
    })
}
