//! The schedules of the reductions' scheduled algorithms, by operation and algorithm name
//! (the generators are in `tree.rs`, `prefix.rs` and `vector.rs`).

use amnet_core::{Error, Result};

use super::{allreduce, prefix, tree, vector};
use crate::plan::{runs, Kind, Spec};
use crate::sched::{Buf, Range, Sched};

/// The schedule of reduction algorithm `name` for team rank `me` of the call `spec`.
pub(crate) fn generate(kind: Kind, name: &str, spec: &Spec, me: u32) -> Result<Sched> {
    let np = u32::try_from(spec.np).unwrap_or(u32::MAX);
    let root = u32::try_from(spec.root).unwrap_or(0);
    let es = spec.es;
    let radix = u32::try_from(spec.param("radix").unwrap_or(4)).unwrap_or(4);
    // This rank's elements of the array: byte ranges of its source, in element order.
    let mine = || -> Vec<(usize, usize)> {
        runs(spec.src_lay, spec.n, spec.np)
            .into_iter()
            .filter(|r| r.part == me as usize)
            .map(|r| (r.local * es, r.len * es))
            .collect()
    };
    let dst = Range::new(Buf::Dst, 0, es);
    Ok(match (kind, name) {
        (Kind::Reduce, "binomial" | "knomial") => {
            let (pre, acc, tmp) = allreduce::partial(es, &mine());
            let k = if name == "binomial" { 2 } else { radix };
            tree::reduce(np, me, root, k, pre, acc, dst, tmp)
        }
        (Kind::ReduceAll, "reduce_broadcast") => {
            let (pre, acc, tmp) = allreduce::partial(es, &mine());
            tree::reduce_broadcast(np, me, es, pre, acc, tmp)
        }
        (Kind::Prefix | Kind::ExclusivePrefix, "dissemination" | "chain") => {
            let rs = runs(spec.src_lay, spec.n, spec.np);
            let exclusive = kind == Kind::ExclusivePrefix;
            if name == "chain" {
                prefix::chain(me, es, &rs, exclusive)
            } else {
                prefix::dissemination(me, es, &rs, exclusive)
            }
        }
        (Kind::ReduceElems, "binomial") => vector::binomial(np, me, root, spec.n * es),
        (Kind::ReduceElems, "reduce_scatter_gather") => {
            vector::reduce_scatter_gather(np, me, root, es, spec.n)
        }
        (Kind::ReduceElemsAll, "recursive_doubling") => {
            vector::recursive_doubling(np, me, spec.n * es)
        }
        (Kind::ReduceElemsAll, "rabenseifner") => vector::rabenseifner(np, me, es, spec.n),
        (Kind::ReduceElemsAll, "ring") => vector::ring(np, me, es, spec.n),
        (Kind::ScanElems | Kind::ExclusiveScanElems, "dissemination") => {
            vector::scan(np, me, spec.n * es, kind == Kind::ExclusiveScanElems)
        }
        _ => {
            return Err(Error::Usage {
                op: kind.name(),
                detail: format!("algorithm {name} has no schedule generator"),
            })
        }
    })
}
