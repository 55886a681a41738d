//! The data-movement algorithms' common part: which generator makes a call's schedule, where
//! a participant's source bytes are read (its source area, or its destination when the call is
//! in place), offsets of blocks, binomial subtrees, and the allgather phases shared by
//! gather_all and the scatter-allgather broadcast.
//!
//! Every generator here skips zero-length blocks on both sides (the sender and the receiver
//! compute the same lengths from the single-valued `counts`), so `v` forms with empty blocks
//! send no empty messages.

use crate::engine::Area;
use crate::plan::{Kind, Spec};
use crate::sched::{Buf, Range, Round, Sched, Send};

use super::{allgather, bcast_split, exchange, rooted};

/// Where a participant's source bytes are read: the source area, or an area and offset that
/// hold them (the destination of an in-place call, or a scratch copy).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Source {
    pub(crate) buf: Buf,
    pub(crate) base: usize,
}

impl Source {
    /// The participant's own source area.
    pub(crate) const OWN: Source = Source {
        buf: Buf::Src,
        base: 0,
    };

    /// In place: the source lies in the destination from `off`.
    pub(crate) fn in_dst(off: usize) -> Source {
        Source {
            buf: Buf::Dst,
            base: off,
        }
    }

    /// The source's bytes `off..off + len`.
    pub(crate) fn at(self, off: usize, len: usize) -> Range {
        Range::new(self.buf, self.base + off, len)
    }

    /// Whether the source is the destination's bytes (in place).
    pub(crate) fn in_place(self) -> bool {
        self.buf == Buf::Dst
    }
}

/// `src.ptr - dst.ptr` when the two areas are both non-empty and overlap.
fn alias(src: Area, dst: Area) -> Option<isize> {
    let overlap = src.len > 0
        && dst.len > 0
        && src.ptr < dst.ptr.saturating_add(dst.len)
        && dst.ptr < src.ptr.saturating_add(src.len);
    #[allow(clippy::cast_possible_wrap)] // addresses of one process differ by less than 2^63
    overlap.then(|| src.ptr.wrapping_sub(dst.ptr) as isize)
}

/// How the local participant's areas relate: `Some(off)` when its source is the in-place
/// source of the operation (it lies in its destination at `off`, the offset of
/// `Spec::in_place_offset`); for scatter, `Some(0)` when the root's destination is its own
/// block inside its source (the root's in-place destination).
pub(crate) fn in_place(spec: &Spec, me: usize, src: Area, dst: Area) -> Option<usize> {
    let a = alias(src, dst)?;
    if spec.kind == Kind::Scatter {
        let d = spec.scatter_block_offset(me);
        return (me == spec.root && a == -isize::try_from(d).ok()?).then_some(0);
    }
    let off = spec.in_place_offset(me)?;
    (a == isize::try_from(off).ok()?).then_some(off)
}

/// The schedule of the data-movement algorithm `alg` for team rank `me` of `spec`, whose
/// participant has the areas `src` and `dst`, or `None` when `alg` is not one of this module's.
pub(crate) fn generate(spec: &Spec, alg: &str, me: u32, src: Area, dst: Area) -> Option<Sched> {
    schedule(spec, alg, me, in_place(spec, me as usize, src, dst))
}

/// The schedule of the data-movement algorithm `alg` for team rank `me` of `spec` (in place as
/// [`in_place`] says), or `None` when `alg` is not one of this module's.
pub(crate) fn schedule(spec: &Spec, alg: &str, me: u32, place: Option<usize>) -> Option<Sched> {
    let np = u32::try_from(spec.np).unwrap_or(u32::MAX);
    let root = u32::try_from(spec.root).unwrap_or(0);
    let src = place.map_or(Source::OWN, Source::in_dst);
    let c = &spec.counts;
    let s = match (spec.kind, alg) {
        (Kind::Broadcast, "scatter_allgather") => {
            bcast_split::scatter_allgather(np, me, root, c[0], src.in_place())
        }
        (Kind::Broadcast, "pipeline") => {
            let chunk = spec.param("chunk").unwrap_or(bcast_split::CHUNK as u64);
            let chunk = usize::try_from(chunk.max(1)).unwrap_or(usize::MAX);
            bcast_split::pipeline(np, me, root, c[0], src.in_place(), chunk)
        }
        (Kind::Scatter, "binomial") => rooted::scatter_binomial(np, me, root, c, place.is_some()),
        (Kind::Gather, "binomial") => rooted::gather_binomial(np, me, root, c, src),
        (Kind::GatherAll, "ring") => allgather::ring(np, me, c, src),
        (Kind::GatherAll, "recursive_doubling") => allgather::recursive_doubling(np, me, c, src),
        (Kind::GatherAll, "bruck") => allgather::bruck(np, me, c, src),
        (Kind::GatherAll, "gather_broadcast") => allgather::gather_broadcast(np, me, c, src),
        (Kind::Exchange, "pairwise") => exchange::pairwise(np, me, c, src),
        (Kind::Exchange, "bruck") => exchange::bruck(np, me, c[0], src),
        _ => return None,
    };
    Some(s)
}

/// The offsets of consecutive blocks of the given sizes: `np + 1` entries, from 0 to the total.
pub(crate) fn offsets(sizes: impl Iterator<Item = usize>) -> Vec<usize> {
    let mut v = vec![0];
    let mut acc = 0;
    for s in sizes {
        acc += s;
        v.push(acc);
    }
    v
}

/// The binomial tree rooted at 0 of `np` ranks: the parent of `v` and its children with the end
/// of each child's subtree (child `c` covers `c..end`), largest subtree first. `v`'s own
/// subtree is `v..` the end its parent lists (`np` for the root).
pub(crate) fn binomial(v: u32, np: u32) -> (Option<u32>, Vec<(u32, u32)>) {
    // The lowest set bit of v names the parent; the root's children are below np.
    let low = if v == 0 {
        np.next_power_of_two()
    } else {
        1 << v.trailing_zeros()
    };
    let parent = (v != 0).then(|| v - low);
    let mut children = Vec::new();
    let mut m = low >> 1;
    while m > 0 {
        if v + m < np {
            children.push((v + m, (v + 2 * m).min(np)));
        }
        m >>= 1;
    }
    (parent, children)
}

/// The end of `v`'s subtree in the binomial tree of `np` ranks rooted at 0.
pub(crate) fn subtree_end(v: u32, np: u32) -> u32 {
    if v == 0 {
        np
    } else {
        (v + (1 << v.trailing_zeros())).min(np)
    }
}

/// A send of `r` to `to` unless `r` is empty.
pub(crate) fn send(sends: &mut Vec<Send>, to: u32, tag: u32, r: Range) {
    if r.len > 0 {
        sends.push(Send { to, tag, from: r });
    }
}

/// The schedule of `rounds` and `post`, leaving out rounds that do nothing, and joining a
/// round without receives with the next when that one has no local steps (its sends go out at
/// once).
pub(crate) fn finish(rounds: Vec<Round>, post: Vec<crate::sched::Local>, tmp: usize) -> Sched {
    let mut out: Vec<Round> = Vec::new();
    for r in rounds {
        if r.pre.is_empty() && r.sends.is_empty() && r.recvs.is_empty() {
            continue;
        }
        match out.last_mut() {
            Some(last) if last.recvs.is_empty() && r.pre.is_empty() => {
                last.sends.extend(r.sends);
                last.recvs = r.recvs;
            }
            _ => out.push(r),
        }
    }
    Sched {
        rounds: out,
        post,
        tmp,
    }
}

/// A local copy of `len` bytes, or nothing when `len` is 0 or the ranges are the same.
pub(crate) fn copy(steps: &mut Vec<crate::sched::Local>, from: Range, to: Range) {
    if from.len > 0 && from != to {
        steps.push(crate::sched::Local::Copy { from, to });
    }
}

#[cfg(test)]
pub(crate) mod oracle {
    //! The tests' check of a data-movement algorithm against the operation's definition.

    use super::schedule;
    use crate::algs::testing::{pattern, run};
    use crate::plan::{Kind, Spec};
    use crate::sched::Sched;
    use crate::types::Layout;

    /// A call of `kind` over `np` ranks.
    pub(crate) fn spec(kind: Kind, np: usize, root: usize, counts: Vec<usize>) -> Spec {
        Spec {
            kind,
            np,
            root,
            counts,
            uniform: None,
            es: 0,
            n: 0,
            src_lay: Layout::indefinite(0),
            dst_lay: Layout::indefinite(0),
            func: 0,
            arg: 0,
            alg: "test",
            params: Vec::new(),
            call_fn: None,
        }
    }

    /// Whether participant `p` may pass an in-place source (or, scatter's root, destination),
    /// and where its source then lies in its destination.
    fn in_place_at(s: &Spec, p: usize) -> Option<usize> {
        if s.src_len(p) == 0 || s.dst_len(p) == 0 {
            return None;
        }
        match s.kind {
            Kind::Broadcast | Kind::Gather if p != s.root => None,
            Kind::Scatter => (p == s.root).then_some(0),
            _ => s
                .in_place_offset(p)
                .filter(|o| o + s.src_len(p) <= s.dst_len(p)),
        }
    }

    /// Run algorithm `alg` on every rank of `s` (in place wherever allowed when `in_place`),
    /// check every destination against `Spec::transfers_from` and that no source changed, and
    /// return the messages sent. An in-place participant's source area is empty in the
    /// simulation (its bytes lie in its destination), so a schedule that reads it fails.
    pub(crate) fn check(s: &Spec, alg: &str, in_place: bool, seed: u64) -> usize {
        let np = s.np;
        let srcs: Vec<Vec<u8>> = (0..np).map(|p| pattern(p, 5, s.src_len(p))).collect();
        let mut want: Vec<Vec<u8>> = (0..np).map(|p| vec![0; s.dst_len(p)]).collect();
        for (p, src) in srcs.iter().enumerate() {
            for t in s.transfers_from(p) {
                want[t.to][t.dst_off..t.dst_off + t.len]
                    .copy_from_slice(&src[t.src_off..t.src_off + t.len]);
            }
        }
        let mut areas = Vec::new();
        let mut scheds: Vec<Sched> = Vec::new();
        for p in 0..np {
            let place = in_place.then(|| in_place_at(s, p)).flatten();
            let mut dst = pattern(p, 9, s.dst_len(p));
            let src = match (place, s.kind) {
                (None, _) => srcs[p].clone(),
                (Some(_), Kind::Scatter) => {
                    // The root's destination is its block of the source, already in place.
                    let d = s.scatter_block_offset(p);
                    dst.copy_from_slice(&srcs[p][d..d + s.dst_len(p)]);
                    srcs[p].clone()
                }
                (Some(off), _) => {
                    dst[off..off + srcs[p].len()].copy_from_slice(&srcs[p]);
                    Vec::new()
                }
            };
            areas.push((src, dst));
            #[allow(clippy::cast_possible_truncation)] // small test sizes
            let me = p as u32;
            let sc = schedule(s, alg, me, place)
                .unwrap_or_else(|| panic!("{alg} is not a {} algorithm", s.kind.name()));
            scheds.push(sc);
        }
        let sent = run(&scheds, &mut areas, seed);
        let what = || {
            format!(
                "{alg}: np {np} root {} counts {:?} in place {in_place}",
                s.root, s.counts
            )
        };
        for (p, (src, dst)) in areas.iter().enumerate() {
            assert_eq!(dst, &want[p], "{}: rank {p}'s destination", what());
            if src.len() == srcs[p].len() {
                assert_eq!(src, &srcs[p], "{}: rank {p}'s source was written", what());
            }
        }
        sent
    }

    /// Sizes the tests use: one byte, odd sizes, sizes not divisible by small team sizes.
    pub(crate) const SIZES: [usize; 5] = [1, 3, 7, 65, 1000];

    /// Pseudo-random `v` counts (about a fifth of them 0) of at most `max` bytes.
    pub(crate) fn v_counts(n: usize, max: usize, seed: u64) -> Vec<usize> {
        let mut x = seed | 1;
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                #[allow(clippy::cast_possible_truncation)] // reduced modulo a small number
                let r = (x % 1000) as usize;
                if r < 200 {
                    0
                } else {
                    r % (max + 1)
                }
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::select::{Imp, ALGS};

    #[test]
    fn every_registered_data_algorithm_has_a_generator() {
        for a in ALGS.iter().filter(|a| a.imp == Imp::Sched) {
            let (np, counts) = match a.kind {
                Kind::Broadcast => (4, vec![8]),
                Kind::Exchange => (4, vec![8; 16]),
                Kind::Scatter | Kind::Gather | Kind::GatherAll => (4, vec![8; 4]),
                _ => continue,
            };
            if matches!((a.kind, a.name), (Kind::Broadcast, "binomial" | "knomial")) {
                continue;
            }
            let s = oracle::spec(a.kind, np, 1, counts);
            assert!(
                schedule(&s, a.name, 0, None).is_some(),
                "{} {} has no generator here",
                a.kind.name(),
                a.name
            );
        }
    }

    #[test]
    fn in_place_is_recognized_only_at_the_operations_offset() {
        let area = |ptr, len| Area { ptr, len };
        let g = oracle::spec(Kind::GatherAll, 3, 0, vec![4, 4, 4]);
        assert_eq!(in_place(&g, 1, area(1004, 4), area(1000, 12)), Some(4));
        assert_eq!(in_place(&g, 1, area(1000, 4), area(1000, 12)), None);
        assert_eq!(in_place(&g, 1, area(2000, 4), area(1000, 12)), None);
        let sc = oracle::spec(Kind::Scatter, 3, 2, vec![4, 4, 4]);
        assert_eq!(in_place(&sc, 2, area(1000, 12), area(1008, 4)), Some(0));
        assert_eq!(in_place(&sc, 1, area(1000, 12), area(1004, 4)), None);
        let b = oracle::spec(Kind::Broadcast, 3, 0, vec![4]);
        assert_eq!(in_place(&b, 0, area(1000, 4), area(1000, 4)), Some(0));
        assert_eq!(in_place(&b, 1, area(0, 0), area(1000, 4)), None);
    }

    #[test]
    fn binomial_subtrees_partition_the_ranks() {
        for np in 1..=40u32 {
            let mut owner = vec![None; np as usize];
            for v in 0..np {
                let (parent, children) = binomial(v, np);
                assert_eq!(parent.is_none(), v == 0);
                for (c, end) in children {
                    assert_eq!(binomial(c, np).0, Some(v), "np {np}: parent of {c}");
                    assert_eq!(subtree_end(c, np), end, "np {np}: subtree of {c}");
                    assert!(owner[c as usize].replace(v).is_none(), "np {np}: {c} twice");
                }
                // A subtree is the rank and its children's subtrees, consecutive.
                let end = subtree_end(v, np);
                let mut at = v + 1;
                for (c, e) in binomial(v, np).1.into_iter().rev() {
                    assert_eq!(c, at, "np {np} v {v}");
                    at = e;
                }
                assert_eq!(at, end, "np {np} v {v}");
            }
            assert!(owner.iter().skip(1).all(Option::is_some));
        }
    }
}
