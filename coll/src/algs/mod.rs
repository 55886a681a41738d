//! The algorithm generators: pure functions from a call's single-valued arguments and a rank's
//! team number to that rank's schedule ([`crate::sched::Sched`]). Each family sits in a module
//! of its own with its tests, which run every rank's schedule through the simulator and compare
//! the result with the operation's definition.

pub(crate) mod allreduce;
pub(crate) mod bcast;
// Data movement: scatter-allgather and pipelined broadcast, binomial scatter and gather, the
// gather_all and exchange algorithms (`data::generate` dispatches them).
pub(crate) mod allgather;
pub(crate) mod bcast_split;
pub(crate) mod data;
pub(crate) mod exchange;
pub(crate) mod prefix;
pub(crate) mod red;
pub(crate) mod rooted;
pub(crate) mod tree;
pub(crate) mod vector;

use amnet_core::{Error, Result};

use crate::engine::Area;
use crate::plan::{Kind, Spec};
use crate::sched::Sched;
use crate::select::Alg;

/// The schedule of algorithm `alg` for this rank (team rank `me`) of the call `spec`, whose
/// one local participant has the areas `areas[0]` (rank space: schedules take no images).
pub(crate) fn generate(
    alg: &Alg,
    spec: &Spec,
    me: u32,
    areas: &[(usize, Area, Area)],
) -> Result<Sched> {
    let np = u32::try_from(spec.np).unwrap_or(u32::MAX);
    let root = u32::try_from(spec.root).unwrap_or(0);
    let (_, src, dst) = areas.first().copied().unwrap_or_default();
    let in_place = src.len > 0 && src.ptr == dst.ptr;
    if let Some(s) = data::generate(spec, alg.name, me, src, dst) {
        return Ok(s);
    }
    match (spec.kind, alg.name) {
        (Kind::Broadcast, "binomial") => {
            Ok(bcast::binomial_tree(np, me, root, spec.counts[0], in_place))
        }
        (Kind::Broadcast, "knomial") => Ok(bcast::knomial_tree(
            np,
            me,
            root,
            spec.counts[0],
            in_place,
            u32::try_from(spec.param("radix").unwrap_or(4)).unwrap_or(4),
        )),
        (Kind::ReduceAll, "recursive_doubling") => {
            let es = spec.es;
            let runs: Vec<(usize, usize)> = crate::plan::runs(spec.src_lay, spec.n, spec.np)
                .into_iter()
                .filter(|r| r.part == me as usize)
                .map(|r| (r.local * es, r.len * es))
                .collect();
            Ok(allreduce::recursive_doubling(np, me, es, &runs))
        }
        (k, name) if k.is_reduction() => red::generate(k, name, spec, me),
        (k, name) => Err(Error::Usage {
            op: k.name(),
            detail: format!("algorithm {name} has no schedule generator"),
        }),
    }
}

/// A rank's position relative to a root: `(me - root) mod np`.
pub(crate) fn relative(me: u32, root: u32, np: u32) -> u32 {
    (me + np - root % np) % np
}

/// The rank at position `v` relative to `root`.
pub(crate) fn absolute(v: u32, root: u32, np: u32) -> u32 {
    (v + root) % np
}

#[cfg(test)]
pub(crate) mod testing {
    use crate::sched::{simulate, Combine, Sched};

    /// A byte pattern for rank `t`'s area `which` of `len` bytes.
    pub(crate) fn pattern(t: usize, which: u8, len: usize) -> Vec<u8> {
        (0..len)
            .map(|i| {
                let x = (i as u64)
                    .wrapping_mul(0x9e37_79b9)
                    .wrapping_add((t as u64) << 8)
                    .wrapping_add(u64::from(which) << 24);
                (x ^ (x >> 13)).to_le_bytes()[0]
            })
            .collect()
    }

    /// The tests' combination on 16-byte elements `(a, b)` of two u64: the affine map
    /// `x -> a x + b` composed in order, `(a1, b1) ∘ (a2, b2) = (a1 a2, a2 b1 + b2)` (wrapping):
    /// associative and not commutative, so an algorithm that combines out of order fails.
    pub(crate) struct Affine;

    fn pair(e: &[u8]) -> (u64, u64) {
        let w = |i: usize| u64::from_le_bytes(e[i..i + 8].try_into().unwrap_or([0; 8]));
        (w(0), w(8))
    }

    fn put(out: &mut [u8], (a, b): (u64, u64)) {
        out[..8].copy_from_slice(&a.to_le_bytes());
        out[8..16].copy_from_slice(&b.to_le_bytes());
    }

    /// `x ∘ y` for two elements.
    pub(crate) fn compose(x: (u64, u64), y: (u64, u64)) -> (u64, u64) {
        (
            x.0.wrapping_mul(y.0),
            y.0.wrapping_mul(x.1).wrapping_add(y.1),
        )
    }

    impl Combine for Affine {
        fn combine(&self, out: &mut [u8], left: &[u8], right: &[u8]) {
            for i in 0..out.len() / 16 {
                let r = i * 16..i * 16 + 16;
                let v = compose(pair(&left[r.clone()]), pair(&right[r.clone()]));
                put(&mut out[r], v);
            }
        }
        fn fold(&self, out: &mut [u8], xs: &[u8]) {
            let mut acc = pair(&xs[..16]);
            for e in xs[16..].chunks(16) {
                acc = compose(acc, pair(e));
            }
            put(out, acc);
        }
        fn scan(&self, out: &mut [u8], carry: Option<&[u8]>, xs: &[u8]) {
            let mut acc = carry.map(pair);
            for (i, e) in xs.chunks(16).enumerate() {
                let v = match acc {
                    None => pair(e),
                    Some(a) => compose(a, pair(e)),
                };
                put(&mut out[i * 16..i * 16 + 16], v);
                acc = Some(v);
            }
        }
    }

    /// Run `scheds` with the given areas (combining with [`Affine`]); panics with the
    /// simulator's error.
    pub(crate) fn run(scheds: &[Sched], areas: &mut [(Vec<u8>, Vec<u8>)], seed: u64) -> usize {
        simulate(scheds, areas, &Affine, seed).unwrap_or_else(|e| panic!("simulation: {e}"))
    }
}
