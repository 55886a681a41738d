//! The steps of the reductions, run on an application thread (never in a handler, so
//! functions without AMSAFE are safe).
//!
//! - reduce / reduce_to_all: each rank reduces each of its source runs (consecutive elements
//!   on one participant) to one partial and sends the partials, packed in element order, to
//!   the root's rank (or every rank); the receiver combines all partials in element order with
//!   one call. Non-commutative functions are thus applied in image and element order, and the
//!   grouping depends only on the layout: the same job gives bitwise the same result.
//! - prefix_reduce (inclusive or exclusive): phase 0 sends every operand to the rank that owns
//!   its destination element (reblocking); phase 1 reduces each destination run to a partial
//!   and sends the partials to every rank; phase 2 combines the partials before each local run
//!   into its carry and computes the run's prefixes with one call.
//! - vector reductions (reduce_elems, reduce_elems_to_all, the scans): each rank combines its
//!   local participants' vectors elementwise (they are consecutive participants) and sends the
//!   result to the ranks that own results: the root's rank, every rank, or (scans) every later
//!   rank; a receiver folds the vectors per element in rank order with one call per element
//!   (scans: the earlier ranks' fold is the carry of its first local participant).

use std::sync::Arc;

use amnet_core::{Error, Result};

use crate::engine::{Area, Key, Op, Shared};
use crate::plan::{runs, Kind, Spec};
use crate::team::Geo;
use crate::types::Layout;

/// A team rank (every rank number of this module is one: streams, owners, destinations).
type TRank = u32;

/// One step's output: (destination team rank, phase, packed stream).
pub(crate) type StageOut = Vec<(TRank, u32, Arc<Vec<u8>>)>;

/// Bytes of phase `ph` that this rank expects.
fn expected(geo: &Geo, op: &Op, spec: &Spec, ph: usize) -> usize {
    let me = geo.me;
    let owner = |p: usize| geo.owner(op.image_space, p);
    match (spec.kind, ph) {
        (Kind::Reduce, 0) if owner(spec.root) == me => {
            runs(spec.src_lay, spec.n, spec.np).len() * spec.es
        }
        (Kind::ReduceAll, 0) => runs(spec.src_lay, spec.n, spec.np).len() * spec.es,
        (Kind::Prefix | Kind::ExclusivePrefix, 0) => {
            runs(spec.dst_lay, spec.n, spec.np)
                .iter()
                .filter(|r| owner(r.part) == me)
                .map(|r| r.len)
                .sum::<usize>()
                * spec.es
        }
        (Kind::Prefix | Kind::ExclusivePrefix, 1) => {
            runs(spec.dst_lay, spec.n, spec.np).len() * spec.es
        }
        // Vector reductions: one vector from every rank (scans: from every earlier rank).
        (Kind::ReduceElems, 0) if owner(spec.root) == me => geo.size() as usize * spec.n * spec.es,
        (Kind::ReduceElemsAll, 0) => geo.size() as usize * spec.n * spec.es,
        (Kind::ScanElems | Kind::ExclusiveScanElems, 0) => me as usize * spec.n * spec.es,
        _ => 0,
    }
}

/// Whether the next step of `op` can run.
pub(crate) fn ready(op: &Op, spec: &Spec) -> bool {
    let Some(geo) = op.geo.as_deref() else {
        return false;
    };
    match op.rphase {
        0 => true,
        1 => op.stage_got[0] >= expected(geo, op, spec, 0),
        2 => op.stage_got[1] >= expected(geo, op, spec, 1),
        _ => false,
    }
}

struct Ctx {
    geo: Arc<Geo>,
    spec: Arc<Spec>,
    image_space: bool,
    first: usize,
    src: Vec<Area>,
    dst: Vec<Area>,
    f: Arc<crate::types::ReduceFn>,
    fflags: u32,
    /// The built-in's elementwise kernel, when the function is one.
    kernel: Option<crate::builtin::Kernel>,
}

impl Ctx {
    fn owner(&self, p: usize) -> TRank {
        self.geo.owner(self.image_space, p)
    }

    fn local(&self, p: usize) -> Option<usize> {
        p.checked_sub(self.first).filter(|&i| i < self.src.len())
    }

    /// `n` elements of participant `p`'s source from element `at`.
    fn src_elems(&self, p: usize, at: usize, n: usize) -> &[u8] {
        let es = self.spec.es;
        let Some(i) = self.local(p) else { return &[] };
        let a = self.src[i];
        if (at + n) * es > a.len {
            return &[];
        }
        // SAFETY: the source area was resolved and checked at entry to hold the elements of
        // this participant under the layout (`api` checks its length against
        // `area_elems`); bulk semantics keep it valid and unmodified until sync.
        unsafe { std::slice::from_raw_parts((a.ptr + at * es) as *const u8, n * es) }
    }

    fn write_dst(&self, p: usize, at: usize, bytes: &[u8]) -> Result<()> {
        let es = self.spec.es;
        let Some(i) = self.local(p) else {
            return Ok(());
        };
        let a = self.dst[i];
        if at * es + bytes.len() > a.len {
            return Err(Error::Usage {
                op: self.spec.kind.name(),
                detail: format!(
                    "the destination of participant {p} holds {} bytes, too few for element {at}",
                    a.len
                ),
            });
        }
        // SAFETY: bounds checked above against the destination area resolved at entry,
        // which the bulk contract keeps valid and unaccessed by the client until sync; the
        // bytes come from library buffers.
        unsafe { amnet_core::mem::copy(bytes.as_ptr(), (a.ptr + at * es) as *mut u8, bytes.len()) };
        Ok(())
    }

    /// Reduce `m >= 1` packed elements to one, in order, with one call.
    fn reduce_list(&self, v: &[u8]) -> Vec<u8> {
        let es = self.spec.es;
        let m = v.len() / es.max(1);
        if m <= 1 {
            return v.to_vec();
        }
        let mut out = vec![0u8; es];
        (self.f)(
            &mut out,
            1,
            &v[..(m - 1) * es],
            m - 1,
            &v[(m - 1) * es..],
            es,
            self.fflags,
            self.spec.arg,
        );
        out
    }

    /// Vectors of equal length combined elementwise in order: element `i` of the result is
    /// `vs[0][i] ∘ vs[1][i] ∘ …`, one call per element (one per vector with a built-in's
    /// kernel).
    fn fold_vectors(&self, vs: &[&[u8]]) -> Vec<u8> {
        let es = self.spec.es.max(1);
        match vs {
            [] => Vec::new(),
            [v] => v.to_vec(),
            [v, rest @ ..] if self.kernel.is_some() && rest.iter().all(|x| x.len() == v.len()) => {
                let mut out = v.to_vec();
                if let Some(k) = &self.kernel {
                    for x in rest {
                        k(&mut out, x);
                    }
                }
                out
            }
            _ => {
                let len = vs[0].len();
                let mut out = Vec::with_capacity(len);
                let mut list = Vec::with_capacity(vs.len() * es);
                for at in (0..len).step_by(es) {
                    list.clear();
                    for v in vs {
                        list.extend_from_slice(&v[at..at + es]);
                    }
                    out.extend(self.reduce_list(&list));
                }
                out
            }
        }
    }

    /// Inclusive prefixes of `x` after the optional carry.
    fn prefixes(&self, carry: Option<&[u8]>, x: &[u8]) -> Vec<u8> {
        let es = self.spec.es;
        let m = x.len() / es.max(1);
        let mut out = vec![0u8; x.len()];
        if m == 0 {
            return out;
        }
        let (left, lc) = match carry {
            Some(c) => (c, 1),
            None => (&[][..], 0),
        };
        (self.f)(&mut out, m, left, lc, x, es, self.fflags, self.spec.arg);
        out
    }
}

/// Run the next step of reduction `key`; returns the streams to send.
pub(crate) fn step(s: &Shared, key: Key) -> Result<StageOut> {
    // Take what the step needs under the lock.
    let (ctx, phase, stage, xs) = {
        let mut st = s.lock();
        let Some(op) = st.ops.get_mut(&key) else {
            return Ok(Vec::new());
        };
        let (Some(spec), Some(geo)) = (op.spec.clone(), op.geo.clone()) else {
            return Ok(Vec::new());
        };
        let Some(entry) = spec.function(&s.fns) else {
            return Err(Error::Usage {
                op: spec.kind.name(),
                detail: format!(
                    "function {} is not in the table ({} entries)",
                    spec.func,
                    s.fns.len()
                ),
            });
        };
        let phase = op.rphase;
        let stage = match phase {
            1 => std::mem::take(&mut op.stage[0]),
            2 => std::mem::take(&mut op.stage[1]),
            _ => Vec::new(),
        };
        let ctx = Ctx {
            geo,
            image_space: op.image_space,
            first: op.first,
            src: op.parts.iter().map(|p| p.src).collect(),
            dst: op.parts.iter().map(|p| p.dst).collect(),
            f: entry.f.clone(),
            fflags: entry.flags & crate::types::fn_flags::NONCOMM,
            kernel: if spec.call_fn.is_none() {
                s.kernels.get(spec.func).cloned().flatten()
            } else {
                None
            },
            spec,
        };
        (ctx, phase, stage, std::mem::take(&mut op.xs))
    };
    let (outs, next, xs) = match phase {
        0 => {
            let (outs, xs) = phase0(&ctx);
            (outs, 1, xs)
        }
        1 => phase1(&ctx, &stage, &xs)?,
        _ => (phase2(&ctx, &stage, &xs)?, 3, Vec::new()),
    };
    let mut st = s.lock();
    if let Some(op) = st.ops.get_mut(&key) {
        op.rphase = next;
        op.xs = xs;
    }
    Ok(outs)
}

/// The operands' first step: the streams to send, and what this rank keeps for its next step.
fn phase0(c: &Ctx) -> (StageOut, Vec<Vec<u8>>) {
    let spec = &c.spec;
    let me = c.geo.me;
    let size = c.geo.size();
    if spec.kind.is_vector() {
        // The local participants' vectors, combined in participant order (they are
        // consecutive), go to the owners of the results.
        let xs: Vec<Vec<u8>> = (0..c.src.len())
            .map(|i| c.src_elems(c.first + i, 0, spec.n).to_vec())
            .collect();
        let mine = Arc::new(c.fold_vectors(&xs.iter().map(Vec::as_slice).collect::<Vec<_>>()));
        let to: Vec<TRank> = match spec.kind {
            Kind::ReduceElems => vec![c.owner(spec.root)],
            Kind::ReduceElemsAll => (0..size).collect(),
            _ => (me + 1..size).collect(),
        };
        let outs = to.into_iter().map(|t| (t, 0, mine.clone())).collect();
        // Scans write every local participant's own prefix from its vector.
        let keep = if matches!(spec.kind, Kind::ScanElems | Kind::ExclusiveScanElems) {
            xs
        } else {
            Vec::new()
        };
        return (outs, keep);
    }
    (phase0_array(c), Vec::new())
}

fn phase0_array(c: &Ctx) -> StageOut {
    let spec = &c.spec;
    let es = spec.es;
    let me = c.geo.me;
    let size = c.geo.size();
    match spec.kind {
        Kind::Reduce | Kind::ReduceAll => {
            let mut stream = Vec::new();
            for r in runs(spec.src_lay, spec.n, spec.np) {
                if c.owner(r.part) == me {
                    stream.extend(c.reduce_list(c.src_elems(r.part, r.local, r.len)));
                }
            }
            let stream = Arc::new(stream);
            if spec.kind == Kind::Reduce {
                vec![(c.owner(spec.root), 0, stream)]
            } else {
                (0..size).map(|to| (to, 0, stream.clone())).collect()
            }
        }
        _ => {
            // Reblock: every local operand goes to the rank owning its destination element.
            let dst_owner = owner_by_k(c, spec.dst_lay);
            let mut streams = vec![Vec::new(); size as usize];
            for r in runs(spec.src_lay, spec.n, spec.np) {
                if c.owner(r.part) != me {
                    continue;
                }
                let x = c.src_elems(r.part, r.local, r.len);
                for i in 0..r.len {
                    let to = dst_owner[r.k0 + i] as usize;
                    if let Some(e) = x.get(i * es..(i + 1) * es) {
                        streams[to].extend_from_slice(e);
                    }
                }
            }
            streams
                .into_iter()
                .enumerate()
                .map(|(to, v)| {
                    #[allow(clippy::cast_possible_truncation)] // to < size
                    (to as TRank, 0, Arc::new(v))
                })
                .collect()
        }
    }
}

/// The team rank holding each element `k` under `lay`.
fn owner_by_k(c: &Ctx, lay: Layout) -> Vec<TRank> {
    let mut v = vec![0; c.spec.n];
    for r in runs(lay, c.spec.n, c.spec.np) {
        v[r.k0..r.k0 + r.len].fill(c.owner(r.part));
    }
    v
}

/// Reads packed elements from per-rank streams in order.
struct Streams<'a> {
    bufs: &'a [Vec<u8>],
    at: Vec<usize>,
}

impl<'a> Streams<'a> {
    fn new(bufs: &'a [Vec<u8>]) -> Self {
        Streams {
            bufs,
            at: vec![0; bufs.len()],
        }
    }

    fn next(&mut self, from: TRank, es: usize) -> Result<&'a [u8]> {
        let f = from as usize;
        let a = self.at[f];
        let b = self.bufs.get(f).and_then(|v| v.get(a..a + es));
        match b {
            Some(b) => {
                self.at[f] += es;
                Ok(b)
            }
            None => Err(Error::Usage {
                op: "reduction",
                detail: format!(
                    "team rank {from} sent fewer operands than the layout implies: the ranks \
                     disagree on the arguments (run with AMNET_COLL_CHECK=1 to find which)"
                ),
            }),
        }
    }
}

type Phase1 = (StageOut, u8, Vec<Vec<u8>>);

/// The vector that team rank `from` sent (`len` bytes).
fn vector_from(stage: &[Vec<u8>], from: TRank, len: usize) -> Result<&[u8]> {
    stage
        .get(from as usize)
        .and_then(|v| v.get(..len))
        .ok_or_else(|| Error::Usage {
            op: "reduction",
            detail: format!(
                "team rank {from} sent fewer operands than the count implies: the ranks \
                 disagree on the arguments (run with AMNET_COLL_CHECK=1 to find which)"
            ),
        })
}

/// The vector reductions' step once the vectors arrived: fold them in rank order and write
/// the results (scans: after the earlier ranks' fold, each local participant's prefix).
fn phase1_vector(c: &Ctx, stage: &[Vec<u8>], xs: &[Vec<u8>]) -> Result<()> {
    let spec = &c.spec;
    let me = c.geo.me;
    let len = spec.n * spec.es;
    match spec.kind {
        Kind::ReduceElems if c.owner(spec.root) != me => {}
        Kind::ReduceElems | Kind::ReduceElemsAll => {
            let vs = (0..c.geo.size())
                .map(|r| vector_from(stage, r, len))
                .collect::<Result<Vec<_>>>()?;
            let result = c.fold_vectors(&vs);
            if spec.kind == Kind::ReduceElems {
                c.write_dst(spec.root, 0, &result)?;
            } else {
                for i in 0..c.dst.len() {
                    c.write_dst(c.first + i, 0, &result)?;
                }
            }
        }
        _ => {
            let before = (0..me)
                .map(|r| vector_from(stage, r, len))
                .collect::<Result<Vec<_>>>()?;
            let mut carry = (!before.is_empty()).then(|| c.fold_vectors(&before));
            for (i, x) in xs.iter().enumerate() {
                let next = match &carry {
                    None => x.clone(),
                    Some(cv) => c.fold_vectors(&[cv, x]),
                };
                let out = if spec.kind == Kind::ScanElems {
                    Some(&next)
                } else {
                    // Exclusive: participant 0 has nothing before it and keeps its destination.
                    carry.as_ref()
                };
                if let Some(o) = out {
                    c.write_dst(c.first + i, 0, o)?;
                }
                carry = Some(next);
            }
        }
    }
    Ok(())
}

fn phase1(c: &Ctx, stage: &[Vec<u8>], xs: &[Vec<u8>]) -> Result<Phase1> {
    let spec = &c.spec;
    let es = spec.es;
    let me = c.geo.me;
    if spec.kind.is_vector() {
        phase1_vector(c, stage, xs)?;
        return Ok((Vec::new(), 3, Vec::new()));
    }
    match spec.kind {
        Kind::Reduce if c.owner(spec.root) != me => Ok((Vec::new(), 3, Vec::new())),
        Kind::Reduce | Kind::ReduceAll => {
            // Combine every source run's partial in element order.
            let mut st = Streams::new(stage);
            let mut all = Vec::new();
            for r in runs(spec.src_lay, spec.n, spec.np) {
                all.extend_from_slice(st.next(c.owner(r.part), es)?);
            }
            let result = c.reduce_list(&all);
            if spec.kind == Kind::Reduce {
                if c.owner(spec.root) == me {
                    c.write_dst(spec.root, 0, &result)?;
                }
            } else {
                for i in 0..c.dst.len() {
                    c.write_dst(c.first + i, 0, &result)?;
                }
            }
            Ok((Vec::new(), 3, Vec::new()))
        }
        _ => {
            // Operands of the local destination runs, then their partials to every rank.
            let src_owner = owner_by_k(c, spec.src_lay);
            let mut st = Streams::new(stage);
            let mut xs = Vec::new();
            let mut partials = Vec::new();
            for r in runs(spec.dst_lay, spec.n, spec.np) {
                if c.owner(r.part) != me {
                    continue;
                }
                let mut x = Vec::with_capacity(r.len * es);
                for &from in &src_owner[r.k0..r.k0 + r.len] {
                    x.extend_from_slice(st.next(from, es)?);
                }
                partials.extend(c.reduce_list(&x));
                xs.push(x);
            }
            let partials = Arc::new(partials);
            let outs = (0..c.geo.size())
                .map(|to| (to, 1, partials.clone()))
                .collect();
            Ok((outs, 2, xs))
        }
    }
}

fn phase2(c: &Ctx, stage: &[Vec<u8>], xs: &[Vec<u8>]) -> Result<StageOut> {
    let spec = &c.spec;
    let es = spec.es;
    let me = c.geo.me;
    let mut st = Streams::new(stage);
    let mut carry: Option<Vec<u8>> = None;
    let mut mine = xs.iter();
    for r in runs(spec.dst_lay, spec.n, spec.np) {
        let owner = c.owner(r.part);
        let partial = st.next(owner, es)?.to_vec();
        if owner == me {
            let x = mine.next().map_or(&[][..], Vec::as_slice);
            if spec.kind == Kind::Prefix {
                let out = c.prefixes(carry.as_deref(), x);
                c.write_dst(r.part, r.local, &out)?;
            } else {
                // Exclusive: element k gets the prefix through k - 1; element 0 of the whole
                // array has none and is left unchanged.
                if let Some(cv) = &carry {
                    c.write_dst(r.part, r.local, cv)?;
                }
                if r.len > 1 {
                    let out = c.prefixes(carry.as_deref(), &x[..(r.len - 1) * es]);
                    c.write_dst(r.part, r.local + 1, &out)?;
                }
            }
        }
        carry = Some(match carry {
            None => partial,
            Some(cv) => {
                let mut both = cv;
                both.extend_from_slice(&partial);
                c.reduce_list(&both)
            }
        });
    }
    Ok(Vec::new())
}
