//! Scatter and gather (`_v` too) on a binomial tree of ranks relative to the root.
//!
//! A subtree is a run of consecutive relative ranks, so its blocks, taken in relative order,
//! are one run that a rank keeps in scratch: scatter's root sends each child the blocks of the
//! child's whole subtree, and each inner rank keeps its own block and passes its children
//! theirs; gather is the reverse (each inner rank collects its subtree's blocks behind its own
//! and sends them up). In absolute order a subtree's blocks are one run of the root's area
//! unless the subtree wraps past the last rank; the root then packs (scatter) or unpacks
//! (gather) that one subtree through scratch. np − 1 messages in ⌈log₂ np⌉ rounds (empty
//! subtrees of a `v` form send none).

use crate::sched::{Buf, Range, Round, Sched};

use super::allgather::recv;
use super::data::{binomial, copy, finish, offsets, send, subtree_end, Source};
use super::{absolute, relative};

/// The tree of team rank `me`: its relative rank, parent, children (with subtree ends), the
/// end of its subtree, and the block offsets in relative order.
struct Tree {
    v: u32,
    parent: Option<u32>,
    children: Vec<(u32, u32)>,
    end: u32,
    /// Offsets of the blocks of relative ranks 0, 1, …
    roff: Vec<usize>,
    /// Offsets of the blocks of team ranks 0, 1, … (the root's area).
    offs: Vec<usize>,
}

impl Tree {
    fn new(np: u32, me: u32, root: u32, counts: &[usize]) -> Tree {
        let v = relative(me, root, np);
        let (parent, children) = binomial(v, np);
        Tree {
            v,
            parent: parent.map(|p| absolute(p, root, np)),
            children,
            end: subtree_end(v, np),
            roff: offsets((0..np).map(|w| counts[absolute(w, root, np) as usize])),
            offs: offsets(counts.iter().copied()),
        }
    }

    /// The scratch range of relative ranks `a..b` in `v`'s subtree run.
    fn staged(&self, a: u32, b: u32) -> Range {
        let base = self.roff[self.v as usize];
        let (a, b) = (self.roff[a as usize], self.roff[b as usize]);
        Range::new(Buf::Tmp, a - base, b - a)
    }

    /// Bytes of `v`'s subtree.
    fn mine(&self) -> usize {
        self.roff[self.end as usize] - self.roff[self.v as usize]
    }
}

/// How the root reaches child subtree `c..e` (relative) in its area `buf` laid out in absolute
/// order: `Ok(range)` when it is one run, `Err((first, second))` when it wraps past the last
/// rank (the runs of team ranks `a..np` and `0..`).
fn root_run(
    np: u32,
    root: u32,
    t: &Tree,
    buf: Buf,
    (c, e): (u32, u32),
) -> std::result::Result<Range, (Range, Range)> {
    let a = absolute(c, root, np) as usize;
    let len = t.roff[e as usize] - t.roff[c as usize];
    let last = a + (e - c) as usize;
    if last <= np as usize {
        Ok(Range::new(buf, t.offs[a], len))
    } else {
        let head = t.offs[np as usize] - t.offs[a];
        Err((
            Range::new(buf, t.offs[a], head),
            Range::new(buf, 0, len - head),
        ))
    }
}

/// Binomial scatter from `root` for team rank `me` of `np`; `own_in_place` when the root's
/// destination is its own block of its source (its in-place destination).
pub(crate) fn scatter_binomial(
    np: u32,
    me: u32,
    root: u32,
    counts: &[usize],
    own_in_place: bool,
) -> Sched {
    let t = Tree::new(np, me, root, counts);
    let c = counts[me as usize];
    let own = Range::new(Buf::Dst, 0, c);
    let mut tmp = 0;
    let mut rounds = Vec::new();
    match t.parent {
        None => {
            let mut r = Round::default();
            if !own_in_place {
                copy(
                    &mut r.pre,
                    Range::new(Buf::Src, t.offs[me as usize], c),
                    own,
                );
            }
            for &(ch, e) in &t.children {
                let to = absolute(ch, root, np);
                match root_run(np, root, &t, Buf::Src, (ch, e)) {
                    Ok(run) => send(&mut r.sends, to, 0, run),
                    Err((head, tail)) => {
                        // Pack the wrapping subtree's two runs in scratch.
                        let h = Range::new(Buf::Tmp, 0, head.len);
                        copy(&mut r.pre, head, h);
                        copy(&mut r.pre, tail, Range::new(Buf::Tmp, head.len, tail.len));
                        tmp = head.len + tail.len;
                        send(&mut r.sends, to, 0, Range::new(Buf::Tmp, 0, tmp));
                    }
                }
            }
            rounds.push(r);
        }
        Some(p) if t.children.is_empty() => {
            let mut r = Round::default();
            recv(&mut r.recvs, p, 0, own);
            rounds.push(r);
        }
        Some(p) => {
            tmp = t.mine();
            let mut r = Round::default();
            recv(&mut r.recvs, p, 0, t.staged(t.v, t.end));
            rounds.push(r);
            let mut r = Round::default();
            copy(&mut r.pre, t.staged(t.v, t.v + 1), own);
            for &(ch, e) in &t.children {
                send(&mut r.sends, absolute(ch, root, np), 0, t.staged(ch, e));
            }
            rounds.push(r);
        }
    }
    finish(rounds, Vec::new(), tmp)
}

/// Binomial gather to `root` for team rank `me` of `np`; `src` says where its block is read
/// (the root's in-place source lies in its destination).
pub(crate) fn gather_binomial(np: u32, me: u32, root: u32, counts: &[usize], src: Source) -> Sched {
    let t = Tree::new(np, me, root, counts);
    let c = counts[me as usize];
    let mut tmp = 0;
    let mut rounds = Vec::new();
    let mut post = Vec::new();
    match t.parent {
        None => {
            let mut r = Round::default();
            let at = t.offs[me as usize];
            copy(&mut r.pre, src.at(0, c), Range::new(Buf::Dst, at, c));
            for &(ch, e) in &t.children {
                let from = absolute(ch, root, np);
                match root_run(np, root, &t, Buf::Dst, (ch, e)) {
                    Ok(run) => recv(&mut r.recvs, from, 0, run),
                    Err((head, tail)) => {
                        // Unpack the wrapping subtree's blocks from scratch afterwards.
                        tmp = head.len + tail.len;
                        recv(&mut r.recvs, from, 0, Range::new(Buf::Tmp, 0, tmp));
                        copy(&mut post, Range::new(Buf::Tmp, 0, head.len), head);
                        copy(&mut post, Range::new(Buf::Tmp, head.len, tail.len), tail);
                    }
                }
            }
            rounds.push(r);
        }
        Some(p) if t.children.is_empty() => {
            let mut r = Round::default();
            send(&mut r.sends, p, 0, src.at(0, c));
            rounds.push(r);
        }
        Some(p) => {
            tmp = t.mine();
            let mut r = Round::default();
            copy(&mut r.pre, src.at(0, c), t.staged(t.v, t.v + 1));
            for &(ch, e) in &t.children {
                recv(&mut r.recvs, absolute(ch, root, np), 0, t.staged(ch, e));
            }
            rounds.push(r);
            let mut r = Round::default();
            send(&mut r.sends, p, 0, t.staged(t.v, t.end));
            rounds.push(r);
        }
    }
    finish(rounds, post, tmp)
}

#[cfg(test)]
mod tests {
    use crate::algs::data::oracle::{check, spec, v_counts, SIZES};
    use crate::plan::Kind;

    fn all(kind: Kind) {
        for np in 1..=17usize {
            for root in [0, 1 % np, np / 2, np - 1] {
                for (i, &n) in SIZES.iter().enumerate() {
                    for in_place in [false, true] {
                        let s = spec(kind, np, root, vec![n; np]);
                        let sent = check(&s, "binomial", in_place, (np * 13 + root + i) as u64);
                        assert_eq!(sent, np - 1, "{kind:?} np {np} root {root} n {n}");
                    }
                    let v = v_counts(np, n, (np * 17 + root + i) as u64);
                    for in_place in [false, true] {
                        check(&spec(kind, np, root, v.clone()), "binomial", in_place, 3);
                    }
                }
            }
        }
    }

    #[test]
    fn binomial_scatter_delivers_every_block() {
        all(Kind::Scatter);
    }

    #[test]
    fn binomial_gather_collects_every_block() {
        all(Kind::Gather);
    }

    #[test]
    fn scratch_is_at_most_the_largest_subtree() {
        // The root stages at most the one wrapping subtree; inner ranks their own subtree.
        for np in 2..=17u32 {
            for root in 0..np {
                let counts = vec![4usize; np as usize];
                for me in 0..np {
                    let s = super::scatter_binomial(np, me, root, &counts, false);
                    let g = super::gather_binomial(np, me, root, &counts, super::Source::OWN);
                    let half = 4 * np.next_power_of_two() as usize / 2;
                    assert!(
                        s.tmp <= half && g.tmp <= half,
                        "np {np} root {root} me {me}"
                    );
                }
            }
        }
    }
}
