//! gather_all (`_v` too): participant `i`'s block to every participant's destination at
//! `d_i = counts[0] + … + counts[i-1]`. Blocks of consecutive ranks are consecutive in the
//! destination, so the algorithms below move runs of blocks straight between destinations;
//! only Bruck's stages them in scratch.
//!
//! - ring: np − 1 rounds; in round i a rank passes block `me − i` to `me + 1` and gets block
//!   `me − i − 1` from `me − 1`. np(np − 1) messages.
//! - recursive doubling: in round k a rank swaps the run of blocks its group of 2^k ranks
//!   holds with the partner group's (`me ^ 2^k`). For a size that is not a power of two the
//!   first 2r ranks (r = np − 2^⌊log₂ np⌋) pair up first: the odd one of a pair hands its block
//!   to the even one, which takes part for both and at the end sends it the rest (two runs,
//!   around its own block). 2^⌊log₂ np⌋·⌊log₂ np⌋ + 3r messages.
//! - Bruck: ⌈log₂ np⌉ rounds; in round k a rank sends the first min(2^k, np − 2^k) blocks of its
//!   scratch (blocks `me, me + 1, …`) to `me − 2^k` and appends those of `me + 2^k`; a final
//!   local rotation puts block `me + j` of the scratch at its place. np·⌈log₂ np⌉ messages.
//! - gather then broadcast: a binomial gather to rank 0, each rank collecting its subtree's
//!   run of blocks in its own destination, then a binomial broadcast of the whole destination
//!   from 0. 2(np − 1) messages. (The broadcast rewrites a rank's own block with the same bytes,
//!   so an in-place source keeps its value.)
//!
//! The ring and recursive-doubling phases also serve the scatter-allgather broadcast
//! (`bcast_split.rs`), where blocks are indexed by rank relative to the root and the root
//! holds every block from the start.

use crate::sched::{Apply, Buf, Range, Recv, Round, Sched};

use super::data::{binomial, copy, finish, offsets, send, subtree_end, Source};

/// Blocks laid out consecutively in every participant's destination: block `i` at
/// `offs[i]..offs[i + 1]`, the block of index `i`, which is team rank `rank(i)`.
pub(crate) struct Blocks<'a> {
    pub(crate) offs: &'a [usize],
    pub(crate) rank: &'a dyn Fn(u32) -> u32,
    /// Index 0 holds every block from the start (a broadcast's root): it receives nothing.
    pub(crate) full0: bool,
}

impl Blocks<'_> {
    /// The destination range of blocks `a..b`.
    fn run(&self, a: u32, b: u32) -> Range {
        let (a, b) = (self.offs[a as usize], self.offs[b as usize]);
        Range::new(Buf::Dst, a, b - a)
    }

    /// Whether index `i` receives nothing.
    fn full(&self, i: u32) -> bool {
        self.full0 && i == 0
    }
}

/// A receive of `into` from `from`, unless `into` is empty.
pub(crate) fn recv(recvs: &mut Vec<Recv>, from: u32, tag: u32, into: Range) {
    if into.len > 0 {
        recvs.push(Recv {
            from,
            tag,
            into,
            how: Apply::Copy,
        });
    }
}

/// The ring's rounds for index `me` of `np` (tags `tag0..tag0 + np − 1`).
pub(crate) fn ring_phase(np: u32, me: u32, b: &Blocks<'_>, tag0: u32) -> Vec<Round> {
    let right = (me + 1) % np;
    let left = (me + np - 1) % np;
    (0..np.saturating_sub(1))
        .map(|i| {
            let mut r = Round::default();
            let out = (me + np - i) % np;
            let inn = (me + np - i - 1) % np;
            if !b.full(right) {
                send(&mut r.sends, (b.rank)(right), tag0 + i, b.run(out, out + 1));
            }
            if !b.full(me) {
                recv(&mut r.recvs, (b.rank)(left), tag0 + i, b.run(inn, inn + 1));
            }
            r
        })
        .collect()
}

/// The largest power of two not above `np` (at least 1).
pub(crate) fn pow2_floor(np: u32) -> u32 {
    1 << (31 - np.max(1).leading_zeros())
}

/// Recursive doubling's rounds for index `me` of `np` (tags `tag0..tag0 + 3 + log₂ np`).
pub(crate) fn rd_phase(np: u32, me: u32, b: &Blocks<'_>, tag0: u32) -> Vec<Round> {
    let p2 = pow2_floor(np);
    let rest = np - p2;
    // The first index of virtual rank v (v ≤ p2); virtual rank v is index first(v).
    let first = |v: u32| if v < rest { 2 * v } else { v + rest };
    let rank = |i: u32| (b.rank)(i);
    let (tag_pair, tag_low, tag_high) = (tag0, tag0 + 1, tag0 + 2);
    let mut rounds = Vec::new();
    if me < 2 * rest && me % 2 == 1 {
        // Hand my block to my pair and get the runs on either side of it back.
        let mut r = Round::default();
        if !b.full(me - 1) {
            send(&mut r.sends, rank(me - 1), tag_pair, b.run(me, me + 1));
        }
        if !b.full(me) {
            recv(&mut r.recvs, rank(me - 1), tag_low, b.run(0, me));
            recv(&mut r.recvs, rank(me - 1), tag_high, b.run(me + 1, np));
        }
        rounds.push(r);
        return rounds;
    }
    let v = if me < 2 * rest {
        let mut r = Round::default();
        if !b.full(me) {
            recv(&mut r.recvs, rank(me + 1), tag_pair, b.run(me + 1, me + 2));
        }
        rounds.push(r);
        me / 2
    } else {
        me - rest
    };
    let mut mask = 1;
    let mut k = 0;
    while mask < p2 {
        let partner = v ^ mask;
        let mine = v & !(mask - 1);
        let theirs = partner & !(mask - 1);
        let mut r = Round::default();
        if !b.full(first(partner)) {
            let run = b.run(first(mine), first(mine + mask));
            send(&mut r.sends, rank(first(partner)), tag0 + 3 + k, run);
        }
        if !b.full(me) {
            let run = b.run(first(theirs), first(theirs + mask));
            recv(&mut r.recvs, rank(first(partner)), tag0 + 3 + k, run);
        }
        rounds.push(r);
        mask <<= 1;
        k += 1;
    }
    if me < 2 * rest {
        let mut r = Round::default();
        send(&mut r.sends, rank(me + 1), tag_low, b.run(0, me + 1));
        send(&mut r.sends, rank(me + 1), tag_high, b.run(me + 2, np));
        rounds.push(r);
    }
    rounds
}

fn identity(i: u32) -> u32 {
    i
}

/// The first round: my block from its source to its place in my destination.
fn own_block(me: u32, counts: &[usize], offs: &[usize], src: Source) -> Round {
    let mut r = Round::default();
    let c = counts[me as usize];
    copy(
        &mut r.pre,
        src.at(0, c),
        Range::new(Buf::Dst, offs[me as usize], c),
    );
    r
}

/// Ring gather_all for team rank `me` of `np`.
pub(crate) fn ring(np: u32, me: u32, counts: &[usize], src: Source) -> Sched {
    let offs = offsets(counts.iter().copied());
    let b = Blocks {
        offs: &offs,
        rank: &identity,
        full0: false,
    };
    let mut rounds = vec![own_block(me, counts, &offs, src)];
    rounds.extend(ring_phase(np, me, &b, 0));
    finish(rounds, Vec::new(), 0)
}

/// Recursive-doubling gather_all for team rank `me` of `np` (any size).
pub(crate) fn recursive_doubling(np: u32, me: u32, counts: &[usize], src: Source) -> Sched {
    let offs = offsets(counts.iter().copied());
    let b = Blocks {
        offs: &offs,
        rank: &identity,
        full0: false,
    };
    let mut rounds = vec![own_block(me, counts, &offs, src)];
    rounds.extend(rd_phase(np, me, &b, 0));
    finish(rounds, Vec::new(), 0)
}

/// Bruck's gather_all for team rank `me` of `np`: blocks `me, me + 1, …` (mod np) packed in
/// scratch, then rotated into place.
pub(crate) fn bruck(np: u32, me: u32, counts: &[usize], src: Source) -> Sched {
    let n = np as usize;
    let m = me as usize;
    let offs = offsets(counts.iter().copied());
    // Scratch offsets of the blocks in the order me, me + 1, ...
    let roff = offsets((0..n).map(|j| counts[(m + j) % n]));
    let tmp = |a: usize, b: usize| Range::new(Buf::Tmp, roff[a], roff[b] - roff[a]);
    let dst = |a: usize, b: usize| Range::new(Buf::Dst, offs[a], offs[b] - offs[a]);
    let mut first = Round::default();
    copy(&mut first.pre, src.at(0, counts[m]), tmp(0, 1));
    let mut rounds = vec![first];
    let mut dist = 1u32;
    let mut k = 0;
    while dist < np {
        let cnt = dist.min(np - dist) as usize;
        let d = dist as usize;
        let mut r = Round::default();
        send(&mut r.sends, (me + np - dist) % np, k, tmp(0, cnt));
        recv(&mut r.recvs, (me + dist) % np, k, tmp(d, d + cnt));
        rounds.push(r);
        dist <<= 1;
        k += 1;
    }
    // Scratch block j is rank me + j's: me + 1..np first, then 0..me.
    let mut post = Vec::new();
    copy(&mut post, src.at(0, counts[m]), dst(m, m + 1));
    copy(&mut post, tmp(1, n - m), dst(m + 1, n));
    copy(&mut post, tmp(n - m, n), dst(0, m));
    finish(rounds, post, roff[n])
}

/// gather_all as a binomial gather to rank 0 and a binomial broadcast from it.
pub(crate) fn gather_broadcast(np: u32, me: u32, counts: &[usize], src: Source) -> Sched {
    let offs = offsets(counts.iter().copied());
    let b = Blocks {
        offs: &offs,
        rank: &identity,
        full0: false,
    };
    let (parent, children) = binomial(me, np);
    let end = subtree_end(me, np);
    let mut gather = own_block(me, counts, &offs, src);
    for &(c, e) in &children {
        recv(&mut gather.recvs, c, 0, b.run(c, e));
    }
    let mut rounds = vec![gather];
    let whole = b.run(0, np);
    if let Some(p) = parent {
        let mut up = Round::default();
        send(&mut up.sends, p, 0, b.run(me, end));
        recv(&mut up.recvs, p, 1, whole);
        rounds.push(up);
    }
    let mut down = Round::default();
    for &(c, _) in &children {
        send(&mut down.sends, c, 1, whole);
    }
    rounds.push(down);
    finish(rounds, Vec::new(), 0)
}

#[cfg(test)]
mod tests {
    use crate::algs::data::oracle::{check, spec, v_counts, SIZES};
    use crate::plan::Kind;

    fn log2_ceil(n: usize) -> usize {
        (usize::BITS - n.saturating_sub(1).leading_zeros()) as usize
    }

    /// Every size and form for `alg`; `msgs(np)` is the message count of uniform blocks.
    fn all(alg: &str, msgs: impl Fn(usize) -> usize) {
        for np in 1..=17usize {
            for (i, &n) in SIZES.iter().enumerate() {
                for in_place in [false, true] {
                    let s = spec(Kind::GatherAll, np, 0, vec![n; np]);
                    let sent = check(&s, alg, in_place, (np * 10 + i) as u64);
                    assert_eq!(sent, msgs(np), "{alg}: np {np} n {n}");
                }
                let v = v_counts(np, n, (np * 31 + i) as u64);
                for in_place in [false, true] {
                    check(&spec(Kind::GatherAll, np, 0, v.clone()), alg, in_place, 7);
                }
            }
        }
    }

    #[test]
    fn ring_gathers_to_all() {
        all("ring", |np| np * (np - 1));
    }

    #[test]
    fn recursive_doubling_gathers_to_all() {
        all("recursive_doubling", |np| {
            let p2 = super::pow2_floor(u32::try_from(np).unwrap()) as usize;
            p2 * log2_ceil(p2) + 3 * (np - p2)
        });
    }

    #[test]
    fn bruck_gathers_to_all() {
        all("bruck", |np| np * log2_ceil(np));
    }

    #[test]
    fn gather_broadcast_gathers_to_all() {
        all("gather_broadcast", |np| 2 * (np - 1));
    }

    #[test]
    fn rounds_are_logarithmic() {
        for np in 1..=17u32 {
            let counts = vec![5; np as usize];
            let src = super::Source::OWN;
            let depth = |s: crate::sched::Sched| s.rounds.len();
            let log = log2_ceil(np as usize);
            for me in 0..np {
                assert!(depth(super::bruck(np, me, &counts, src)) <= log + 1);
                assert!(depth(super::recursive_doubling(np, me, &counts, src)) <= log + 2);
                assert!(depth(super::ring(np, me, &counts, src)) <= np.max(1) as usize);
            }
        }
    }
}
