//! What each collective moves, as pure functions of its single-valued arguments: the
//! transfers of the data-movement operations and the runs of the block-cyclic layouts of the
//! reductions. Every rank computes the same plan independently; nothing here communicates.

use crate::types::{fn_flags, FnEntry, Layout};

/// The operation of a collective.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Kind {
    Broadcast,
    Scatter,
    Gather,
    GatherAll,
    Exchange,
    Reduce,
    ReduceAll,
    Prefix,
    ExclusivePrefix,
    /// Vector reductions (MPI's sense): `count` independent elements, combined elementwise.
    ReduceElems,
    ReduceElemsAll,
    ScanElems,
    ExclusiveScanElems,
    /// The team barrier: no data, only the entry signal (`Coll::barrier`); its algorithms are
    /// the signal schemes every entry and exit signal uses.
    Barrier,
}

impl Kind {
    /// Every operation, in code order.
    pub(crate) const ALL: [Kind; 14] = [
        Kind::Broadcast,
        Kind::Scatter,
        Kind::Gather,
        Kind::GatherAll,
        Kind::Exchange,
        Kind::Reduce,
        Kind::ReduceAll,
        Kind::Prefix,
        Kind::ExclusivePrefix,
        Kind::ReduceElems,
        Kind::ReduceElemsAll,
        Kind::ScanElems,
        Kind::ExclusiveScanElems,
        Kind::Barrier,
    ];

    pub(crate) fn name(self) -> &'static str {
        match self {
            Kind::Broadcast => "broadcast",
            Kind::Scatter => "scatter",
            Kind::Gather => "gather",
            Kind::GatherAll => "gather_all",
            Kind::Exchange => "exchange",
            Kind::Reduce => "reduce",
            Kind::ReduceAll => "reduce_to_all",
            Kind::Prefix => "prefix_reduce",
            Kind::ExclusivePrefix => "exclusive_prefix_reduce",
            Kind::ReduceElems => "reduce_elems",
            Kind::ReduceElemsAll => "reduce_elems_to_all",
            Kind::ScanElems => "scan_elems",
            Kind::ExclusiveScanElems => "exclusive_scan_elems",
            Kind::Barrier => "barrier",
        }
    }

    pub(crate) fn code(self) -> u32 {
        self as u32
    }

    pub(crate) fn is_reduction(self) -> bool {
        matches!(
            self,
            Kind::Reduce | Kind::ReduceAll | Kind::Prefix | Kind::ExclusivePrefix
        ) || self.is_vector()
    }

    /// A vector reduction: every participant's `count` elements, combined elementwise.
    pub(crate) fn is_vector(self) -> bool {
        matches!(
            self,
            Kind::ReduceElems | Kind::ReduceElemsAll | Kind::ScanElems | Kind::ExclusiveScanElems
        )
    }
}

/// The single-valued description of one collective over `np` participants.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct Spec {
    pub(crate) kind: Kind,
    /// Participants (ranks or images).
    pub(crate) np: usize,
    /// The root participant of rooted operations (0 otherwise).
    pub(crate) root: usize,
    /// Data movement: bytes per participant (len np), or the np x np matrix of exchange
    /// (row = source). Empty for reductions, and where `uniform` gives every block.
    pub(crate) counts: Vec<usize>,
    /// Data movement with every block of the same size: that size, and `counts` may be empty
    /// (the smp-native path does not build it; the engine's schedules read `counts`).
    pub(crate) uniform: Option<usize>,
    /// Reductions: element size, element count, layouts, function, argument.
    pub(crate) es: usize,
    pub(crate) n: usize,
    pub(crate) src_lay: Layout,
    pub(crate) dst_lay: Layout,
    pub(crate) func: usize,
    pub(crate) arg: u32,
    /// The algorithm the selector chose (`select::ALGS`), and its parameters.
    pub(crate) alg: &'static str,
    pub(crate) params: Vec<(String, u64)>,
    /// Reductions: a function this rank passed with the call, used instead of table entry
    /// `func` (then one of [`CallFn::index`]'s values). It stays on this rank.
    pub(crate) call_fn: Option<CallFn>,
}

impl Spec {
    /// The algorithm parameter `name`, if `AMNET_COLL_TUNE` gave one.
    pub(crate) fn param(&self, name: &str) -> Option<u64> {
        self.params.iter().find(|(k, _)| k == name).map(|(_, v)| *v)
    }

    /// The reduction function: the call's own, else entry `func` of `table`.
    pub(crate) fn function<'a>(&'a self, table: &'a [FnEntry]) -> Option<&'a FnEntry> {
        match &self.call_fn {
            Some(f) => Some(&f.0),
            None => table.get(self.func),
        }
    }
}

/// A reduction function given with one call rather than registered in the table (the typed
/// API's closures). Every rank passes its own; only its commutativity is agreed, through the
/// function index the call carries ([`CallFn::index`]).
#[derive(Clone)]
pub(crate) struct CallFn(pub(crate) FnEntry);

impl CallFn {
    /// The function index that stands for a call's own function in the spec and the
    /// checked-mode signature: `usize::MAX - 1` for a commutative one, `usize::MAX` for a
    /// `NONCOMM` one (far beyond any table).
    pub(crate) fn index(&self) -> usize {
        if self.0.flags & fn_flags::NONCOMM != 0 {
            usize::MAX
        } else {
            usize::MAX - 1
        }
    }
}

impl std::fmt::Debug for CallFn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("CallFn").field(&self.0).finish()
    }
}

/// Two specs agree when their call functions agree in flags (the functions are each rank's
/// own and never compared).
impl PartialEq for CallFn {
    fn eq(&self, other: &CallFn) -> bool {
        self.0.flags == other.0.flags
    }
}

impl Eq for CallFn {}

impl std::hash::Hash for CallFn {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        self.0.flags.hash(h);
    }
}

/// One block to move: from the source participant's area at `src_off` to participant `to`'s
/// destination at `dst_off`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Transfer {
    pub(crate) to: usize,
    pub(crate) src_off: usize,
    pub(crate) dst_off: usize,
    pub(crate) len: usize,
}

impl Spec {
    fn c(&self, p: usize) -> usize {
        match self.uniform {
            Some(n) => n,
            None => self.counts[p],
        }
    }

    fn m(&self, p: usize, q: usize) -> usize {
        match self.uniform {
            Some(n) => n,
            None => self.counts[p * self.np + q],
        }
    }

    /// The bytes of every block together.
    fn total(&self) -> usize {
        match self.uniform {
            Some(n) => n * self.np,
            None => self.counts.iter().sum(),
        }
    }

    /// The bytes of the blocks before participant `p`'s.
    fn before(&self, p: usize) -> usize {
        match self.uniform {
            Some(n) => n * p,
            None => self.counts[..p].iter().sum(),
        }
    }

    /// Bytes of participant `p`'s source area (0 where it has none).
    pub(crate) fn src_len(&self, p: usize) -> usize {
        match self.kind {
            Kind::Broadcast if p == self.root => self.c(0),
            Kind::Scatter if p == self.root => self.total(),
            Kind::Gather | Kind::GatherAll => self.c(p),
            Kind::Exchange => (0..self.np).map(|q| self.m(p, q)).sum(),
            _ => 0,
        }
    }

    /// Bytes of participant `p`'s destination area (data movement).
    pub(crate) fn dst_len(&self, p: usize) -> usize {
        match self.kind {
            Kind::Broadcast => self.c(0),
            Kind::Scatter => self.c(p),
            Kind::Gather if p == self.root => self.total(),
            Kind::Gather => 0,
            Kind::GatherAll => self.total(),
            Kind::Exchange => (0..self.np).map(|i| self.m(i, p)).sum(),
            _ => 0,
        }
    }

    /// Whether participant `p` has a destination area (its address is used).
    pub(crate) fn has_dst(&self, p: usize) -> bool {
        match self.kind {
            Kind::Gather | Kind::Reduce | Kind::ReduceElems => p == self.root,
            _ => true,
        }
    }

    /// Where an in-place source of `p` starts inside its destination.
    pub(crate) fn in_place_offset(&self, p: usize) -> Option<usize> {
        match self.kind {
            Kind::Broadcast => Some(0),
            Kind::Gather if p == self.root => Some(self.before(p)),
            Kind::GatherAll => Some(self.before(p)),
            Kind::Exchange => Some(0),
            k if k.is_reduction() => Some(0),
            _ => None,
        }
    }

    /// Scatter: where participant `p`'s block starts in the root's source.
    pub(crate) fn scatter_block_offset(&self, p: usize) -> usize {
        self.before(p)
    }

    /// The blocks participant `p` sends (zero-length blocks left out).
    pub(crate) fn transfers_from(&self, p: usize) -> Vec<Transfer> {
        let mut v = Vec::new();
        self.each_transfer_from(p, |t| v.push(t));
        v
    }

    /// [`Spec::transfers_from`] without the vector: `f` sees each block in turn.
    pub(crate) fn each_transfer_from(&self, p: usize, mut f: impl FnMut(Transfer)) {
        let np = self.np;
        let mut add = |to, src_off, dst_off, len| {
            if len > 0 {
                f(Transfer {
                    to,
                    src_off,
                    dst_off,
                    len,
                });
            }
        };
        match self.kind {
            Kind::Broadcast if p == self.root => {
                for q in 0..np {
                    add(q, 0, 0, self.c(0));
                }
            }
            Kind::Scatter if p == self.root => {
                let mut d = 0;
                for q in 0..np {
                    add(q, d, 0, self.c(q));
                    d += self.c(q);
                }
            }
            Kind::Gather => {
                add(self.root, 0, self.scatter_block_offset(p), self.c(p));
            }
            Kind::GatherAll => {
                let d = self.scatter_block_offset(p);
                for q in 0..np {
                    add(q, 0, d, self.c(p));
                }
            }
            Kind::Exchange => {
                let mut sd = 0;
                for q in 0..np {
                    let rd: usize = (0..p).map(|i| self.m(i, q)).sum();
                    add(q, sd, rd, self.m(p, q));
                    sd += self.m(p, q);
                }
            }
            _ => {}
        }
    }

    /// Bytes participant `q` receives in all: its whole destination (data movement; the
    /// reductions track their operands separately).
    pub(crate) fn incoming(&self, q: usize) -> usize {
        self.dst_len(q)
    }
}

/// A maximal run of consecutive elements `k0..k0+len` of a distributed array that lie on one
/// participant, at element `local` of its area.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Run {
    pub(crate) part: usize,
    pub(crate) local: usize,
    pub(crate) k0: usize,
    pub(crate) len: usize,
}

/// The runs of elements `0..n` laid out by `lay` over `np` participants, in element order.
pub(crate) fn runs(lay: Layout, n: usize, np: usize) -> Vec<Run> {
    runs_iter(lay, n, np).collect()
}

/// [`runs`] without the vector.
pub(crate) fn runs_iter(lay: Layout, n: usize, np: usize) -> impl Iterator<Item = Run> {
    let mut k = 0;
    std::iter::from_fn(move || {
        if k >= n && !(lay.blk == 0 && k == 0) {
            return None;
        }
        if lay.blk == 0 {
            k = usize::MAX;
            return Some(Run {
                part: lay.off,
                local: 0,
                k0: 0,
                len: n,
            });
        }
        let g = lay.off + k;
        let b = g / lay.blk;
        let within = g % lay.blk;
        let len = (lay.blk - within).min(n - k);
        let r = Run {
            part: b % np,
            local: (b / np) * lay.blk + within,
            k0: k,
            len,
        };
        k += len;
        Some(r)
    })
}

/// Whether participant `p` holds any of elements `0..n` laid out by `lay` over `np`
/// participants (a run of [`runs_iter`] with `part == p` and a length), without walking the runs.
pub(crate) fn holds(lay: Layout, n: usize, np: usize, p: usize) -> bool {
    if n == 0 || np == 0 {
        return false;
    }
    if lay.blk == 0 {
        return p == lay.off;
    }
    let first = lay.off / lay.blk;
    let blocks = (lay.off + (n - 1)) / lay.blk - first + 1;
    blocks >= np || (p + np - first % np) % np < blocks
}

/// Elements a participant's area must hold under `lay` for `n` elements (0 for participants
/// with none).
pub(crate) fn area_elems(lay: Layout, n: usize, np: usize, p: usize) -> usize {
    runs_iter(lay, n, np)
        .filter(|r| r.part == p)
        .map(|r| r.local + r.len)
        .max()
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn holds_matches_the_runs() {
        for np in 1..7 {
            for blk in 0..5 {
                for off in 0..9 {
                    for n in 0..20 {
                        let lay = if blk == 0 {
                            Layout::indefinite(off % np)
                        } else {
                            Layout::block_cyclic(blk, off)
                        };
                        for p in 0..np {
                            let by_runs = runs_iter(lay, n, np).any(|r| r.part == p && r.len > 0);
                            assert_eq!(holds(lay, n, np, p), by_runs, "{np} {blk} {off} {n} {p}");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn runs_cover_every_element_once() {
        for np in 1..6 {
            for blk in 0..5 {
                for off in 0..7 {
                    let lay = if blk == 0 {
                        Layout::indefinite(off % np)
                    } else {
                        Layout::block_cyclic(blk, off)
                    };
                    let n = 23;
                    let rs = runs(lay, n, np);
                    let mut k = 0;
                    let mut seen = std::collections::HashSet::new();
                    for r in &rs {
                        assert_eq!(r.k0, k);
                        assert!(r.part < np);
                        for i in 0..r.len {
                            assert!(seen.insert((r.part, r.local + i)), "slot used twice");
                        }
                        k += r.len;
                    }
                    assert_eq!(k, n);
                }
            }
        }
        // Cyclic over 3, starting at element 4: element 0 is global 4 = block 4 -> part 1.
        let rs = runs(Layout::block_cyclic(1, 4), 3, 3);
        assert_eq!(
            rs.iter().map(|r| (r.part, r.local)).collect::<Vec<_>>(),
            vec![(1, 1), (2, 1), (0, 2)]
        );
    }

    #[test]
    fn exchange_plan_is_a_transpose() {
        let np = 3;
        let spec = Spec {
            kind: Kind::Exchange,
            np,
            root: 0,
            counts: vec![1, 2, 3, 4, 5, 6, 7, 8, 9],
            uniform: None,
            es: 0,
            n: 0,
            src_lay: Layout::indefinite(0),
            dst_lay: Layout::indefinite(0),
            func: 0,
            arg: 0,
            alg: "flat",
            params: Vec::new(),
            call_fn: None,
        };
        let t = spec.transfers_from(1);
        assert_eq!(
            t.iter()
                .map(|t| (t.to, t.src_off, t.dst_off, t.len))
                .collect::<Vec<_>>(),
            vec![(0, 0, 1, 4), (1, 4, 2, 5), (2, 9, 3, 6)]
        );
        assert_eq!(spec.incoming(2), 3 + 6 + 9);
    }

    #[test]
    fn uniform_blocks_match_the_counts_they_stand_for() {
        for kind in [
            Kind::Broadcast,
            Kind::Scatter,
            Kind::Gather,
            Kind::GatherAll,
            Kind::Exchange,
        ] {
            for np in 1..5 {
                for root in 0..np {
                    let len = if kind == Kind::Exchange { np * np } else { np };
                    let listed = crate::algs::data::oracle::spec(
                        kind,
                        np,
                        root,
                        vec![7; if kind == Kind::Broadcast { 1 } else { len }],
                    );
                    let uniform = Spec {
                        counts: Vec::new(),
                        uniform: Some(7),
                        params: Vec::new(),
                        call_fn: None,
                        ..listed
                    };
                    for p in 0..np {
                        let of = |s: &Spec| {
                            (
                                s.src_len(p),
                                s.dst_len(p),
                                s.in_place_offset(p),
                                (kind == Kind::Scatter).then(|| s.scatter_block_offset(p)),
                            )
                        };
                        assert_eq!(
                            of(&uniform),
                            of(&listed),
                            "{kind:?} np {np} root {root} p {p}"
                        );
                    }
                }
            }
        }
    }
}
