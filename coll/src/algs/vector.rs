//! Vector reductions (MPI's sense): every rank's `n` elements of `es` bytes, combined
//! elementwise in rank order. Every combination puts the operands of lower ranks first, so
//! non-commutative functions are correct unless an algorithm says otherwise.
//!
//! - reduce_elems_to_all:
//!   - recursive doubling: whole vectors exchanged in ⌈log₂ p⌉ rounds (with a size that is not
//!     a power of two, the first 2r ranks pair up first, as in `allreduce.rs`); for small
//!     vectors.
//!   - Rabenseifner: a reduce-scatter by recursive halving with the distance doubling (partners
//!     1, 2, 4, … apart, so that each rank's segment always holds an aligned block of
//!     consecutive ranks, combined in order), then an allgather by recursive doubling that undoes
//!     the halving; each rank sends about 2·(p − 1)/p of the vector; for large vectors.
//!   - ring: a ring reduce-scatter and a ring allgather of p segments, 2(p − 1) steps of one
//!     segment each. Segment j is combined in the order j, j + 1, …, p − 1, 0, …, j − 1: a
//!     rotation of rank order, so a commutative function only.
//! - reduce_elems: the binomial tree of `tree.rs` on whole vectors (np − 1 messages), for
//!   small vectors; for large ones the reduce-scatter of Rabenseifner's algorithm followed by
//!   a binomial gather of the segments to the root (the halving steps in reverse).
//! - scan_elems, exclusive_scan_elems: dissemination (Hillis–Steele): in round k rank v sends
//!   its running prefix to v + 2^k and puts what arrives from v − 2^k in front of its own,
//!   ⌈log₂ p⌉ rounds. The exclusive scan first shifts every vector one rank up (rank v gets
//!   rank v − 1's vector) and then runs the inclusive scan over ranks 1..p; rank 0's
//!   destination is not written.

use crate::sched::{Apply, Buf, Local, Range, Recv, Round, Sched, Send};

const TAG_PAIR: u32 = 0;
const TAG_BACK: u32 = u32::MAX;

fn log2_floor_pow(np: u32) -> u32 {
    if np.is_power_of_two() {
        np
    } else {
        1 << (31 - np.leading_zeros())
    }
}

/// Elements `lo..hi` of the destination.
fn seg(es: usize, r: Elems) -> Range {
    seg_in(Buf::Dst, es, r)
}

/// Copy the source vector into the destination, where the algorithms work (a no-op in place).
fn start(len: usize) -> Vec<Local> {
    vec![Local::Copy {
        from: Range::new(Buf::Src, 0, len),
        to: Range::new(Buf::Dst, 0, len),
    }]
}

/// reduce_elems_to_all by recursive doubling, for team rank `me` of `np` (`len` bytes).
pub(crate) fn recursive_doubling(np: u32, me: u32, len: usize) -> Sched {
    let all = Range::new(Buf::Dst, 0, len);
    super::allreduce::doubling(np, me, start(len), all, all, 0)
}

/// Elements `lo..hi` of `buf`.
fn seg_in(buf: Buf, es: usize, (lo, hi): Elems) -> Range {
    Range::new(buf, lo * es, (hi - lo) * es)
}

/// A range of elements, `lo..hi`.
type Elems = (usize, usize);

/// The first half of Rabenseifner's algorithm, worked in `buf` (the destination or the
/// scratch buffer): the pairing that brings the ranks to a power of two and the reduce-scatter
/// by recursive halving.
struct Halved {
    rounds: Vec<Round>,
    /// This rank's place among the power of two; None for the odd rank of a pair, which
    /// handed its vector to the even one and takes no further part.
    v: Option<u32>,
    /// Ranks paired up (the first `2 * rest` ranks).
    rest: u32,
    /// The finished segment this rank holds (elements).
    cur: Elems,
    /// Per halving step: the partner distance, the segment held before it, and the half given.
    stack: Vec<(u32, Elems, Elems)>,
    /// The next free tag.
    tag: u32,
}

impl Halved {
    /// The team rank of place `v`.
    fn real(&self, v: u32) -> u32 {
        if v < self.rest {
            2 * v
        } else {
            v + self.rest
        }
    }

    /// The whole schedule of the odd rank `me` of a pair, which handed its vector over: with
    /// `result`, it receives the result there from its partner at the end.
    fn odd_rank(mut self, me: u32, result: Option<Range>, tmp: usize) -> Sched {
        if let Some(into) = result {
            self.rounds[0].recvs.push(Recv {
                from: me - 1,
                tag: TAG_BACK,
                into,
                how: Apply::Copy,
            });
        }
        Sched {
            rounds: self.rounds,
            post: Vec::new(),
            tmp,
        }
    }

    /// The place of team rank `r` (the even rank's for a pair).
    fn place(&self, r: u32) -> u32 {
        if r < 2 * self.rest {
            r / 2
        } else {
            r - self.rest
        }
    }
}

fn halve(np: u32, me: u32, es: usize, n: usize, buf: Buf) -> Halved {
    let all = seg_in(buf, es, (0, n));
    let load = || {
        vec![Local::Copy {
            from: Range::new(Buf::Src, 0, n * es),
            to: all,
        }]
    };
    let p2 = log2_floor_pow(np);
    let rest = np - p2;
    let mut h = Halved {
        rounds: Vec::new(),
        v: None,
        rest,
        cur: (0, n),
        stack: Vec::new(),
        tag: 1,
    };
    // Pairing: ranks 2i and 2i+1 for i < rest; the odd one hands its vector to the even one.
    let v = if me < 2 * rest {
        if me % 2 == 1 {
            h.rounds.push(Round {
                pre: load(),
                sends: vec![Send {
                    to: me - 1,
                    tag: TAG_PAIR,
                    from: all,
                }],
                recvs: Vec::new(),
            });
            return h;
        }
        h.rounds.push(Round {
            pre: load(),
            sends: Vec::new(),
            recvs: vec![Recv {
                from: me + 1,
                tag: TAG_PAIR,
                into: all,
                how: Apply::CombineAfter,
            }],
        });
        me / 2
    } else {
        h.rounds.push(Round {
            pre: load(),
            ..Round::default()
        });
        me - rest
    };
    h.v = Some(v);
    // Reduce-scatter: at distance `mask` both partners hold the same segment; the one whose
    // bit is clear keeps its lower half, the other the upper half.
    let mut mask = 1u32;
    while mask < p2 {
        let partner = h.real(v ^ mask);
        let cur = h.cur;
        let mid = cur.0 + (cur.1 - cur.0) / 2;
        let (keep, give) = if v & mask == 0 {
            ((cur.0, mid), (mid, cur.1))
        } else {
            ((mid, cur.1), (cur.0, mid))
        };
        let mut r = Round::default();
        if give.1 > give.0 {
            r.sends.push(Send {
                to: partner,
                tag: h.tag,
                from: seg_in(buf, es, give),
            });
        }
        if keep.1 > keep.0 {
            r.recvs.push(Recv {
                from: partner,
                tag: h.tag,
                into: seg_in(buf, es, keep),
                how: if v ^ mask < v {
                    Apply::CombineFirst
                } else {
                    Apply::CombineAfter
                },
            });
        }
        if !r.sends.is_empty() || !r.recvs.is_empty() {
            h.rounds.push(r);
        }
        h.stack.push((mask, cur, give));
        h.cur = keep;
        mask <<= 1;
        h.tag += 1;
    }
    h
}

/// reduce_elems_to_all by Rabenseifner's algorithm: `n` elements of `es` bytes.
pub(crate) fn rabenseifner(np: u32, me: u32, es: usize, n: usize) -> Sched {
    let all = seg(es, (0, n));
    let mut h = halve(np, me, es, n, Buf::Dst);
    let Some(v) = h.v else {
        // The odd rank of a pair gets the result back at the end.
        return h.odd_rank(me, Some(all), 0);
    };
    // Allgather: the same pairs in reverse order exchange their (finished) halves.
    while let Some((mask, parent, theirs)) = h.stack.pop() {
        let partner = h.real(v ^ mask);
        let mut r = Round::default();
        if h.cur.1 > h.cur.0 {
            r.sends.push(Send {
                to: partner,
                tag: h.tag,
                from: seg(es, h.cur),
            });
        }
        if theirs.1 > theirs.0 {
            r.recvs.push(Recv {
                from: partner,
                tag: h.tag,
                into: seg(es, theirs),
                how: Apply::Copy,
            });
        }
        if !r.sends.is_empty() || !r.recvs.is_empty() {
            h.rounds.push(r);
        }
        h.cur = parent;
        h.tag += 1;
    }
    if me < 2 * h.rest {
        h.rounds.push(Round {
            sends: vec![Send {
                to: me + 1,
                tag: TAG_BACK,
                from: all,
            }],
            ..Round::default()
        });
    }
    Sched {
        rounds: h.rounds,
        post: Vec::new(),
        tmp: 0,
    }
}

/// reduce_elems to `root` by a reduce-scatter and a gather (Rabenseifner's reduce): the
/// reduce-scatter of [`rabenseifner`] in the scratch buffer, then the halving steps in reverse
/// order as a binomial gather of the finished segments towards the root's place; each rank
/// sends about 2·(p − 1)/p of the vector at most, where the binomial tree sends all of it
/// ⌈log₂ p⌉ times along its longest path. For large vectors.
pub(crate) fn reduce_scatter_gather(np: u32, me: u32, root: u32, es: usize, n: usize) -> Sched {
    let len = n * es;
    let acc = seg_in(Buf::Tmp, es, (0, n));
    let dst = Range::new(Buf::Dst, 0, len);
    let mut h = halve(np, me, es, n, Buf::Tmp);
    let Some(v) = h.v else {
        // The odd rank of a pair: the root gets the result from its even partner.
        return h.odd_rank(me, (me == root).then_some(dst), len);
    };
    let v_root = h.place(root);
    // Gather: at each step (largest distance first) the partner on the root's side of the
    // step's bit takes in the other's finished segment, which then has nothing more to do. The
    // ranks still in agree with the root's place on every larger bit, so both partners of a
    // step are still in, each holding its segment of that level complete.
    while let Some((mask, parent, theirs)) = h.stack.pop() {
        let partner = h.real(v ^ mask);
        let mut r = Round::default();
        let keeps = v & mask == v_root & mask;
        if keeps {
            if theirs.1 > theirs.0 {
                r.recvs.push(Recv {
                    from: partner,
                    tag: h.tag,
                    into: seg_in(Buf::Tmp, es, theirs),
                    how: Apply::Copy,
                });
            }
        } else if h.cur.1 > h.cur.0 {
            r.sends.push(Send {
                to: partner,
                tag: h.tag,
                from: seg_in(Buf::Tmp, es, h.cur),
            });
        }
        if !r.sends.is_empty() || !r.recvs.is_empty() {
            h.rounds.push(r);
        }
        if !keeps {
            break;
        }
        h.cur = parent;
        h.tag += 1;
    }
    let mut post = Vec::new();
    if v == v_root {
        if h.real(v) == root {
            post.push(Local::Copy { from: acc, to: dst });
        } else {
            // The root is the odd rank of this rank's pair.
            h.rounds.push(Round {
                sends: vec![Send {
                    to: root,
                    tag: TAG_BACK,
                    from: acc,
                }],
                ..Round::default()
            });
        }
    }
    Sched {
        rounds: h.rounds,
        post,
        tmp: len,
    }
}

/// reduce_elems_to_all around a ring (a commutative function): `n` elements of `es` bytes.
pub(crate) fn ring(np: u32, me: u32, es: usize, n: usize) -> Sched {
    let p = np as usize;
    let part = |j: usize| (j * n / p, (j + 1) * n / p);
    let (next, prev) = ((me + 1) % np, (me + np - 1) % np);
    let at = |k: usize| (me as usize + p * 2 - k) % p;
    let mut rounds = vec![Round {
        pre: start(n * es),
        ..Round::default()
    }];
    let mut tag = 0;
    // Reduce-scatter: step s sends segment me − s, gets segment me − s − 1 and puts the
    // earlier ranks' combination in front of its own.
    for s in 0..p.saturating_sub(1) {
        step(
            &mut rounds,
            es,
            (next, part(at(s))),
            (prev, part(at(s + 1))),
            tag,
            Apply::CombineFirst,
        );
        tag += 1;
    }
    // Allgather: rank me finished segment me + 1; step s passes on segment me + 1 − s.
    for s in 0..p.saturating_sub(1) {
        step(
            &mut rounds,
            es,
            (next, part((at(s) + 1) % p)),
            (prev, part(at(s))),
            tag,
            Apply::Copy,
        );
        tag += 1;
    }
    Sched {
        rounds,
        post: Vec::new(),
        tmp: 0,
    }
}

/// One ring step: send segment `out.1` to `out.0`, receive segment `inc.1` from `inc.0`
/// (empty segments are not sent).
fn step(
    rounds: &mut Vec<Round>,
    es: usize,
    out: (u32, (usize, usize)),
    inc: (u32, (usize, usize)),
    tag: u32,
    how: Apply,
) {
    let mut r = if rounds.len() == 1 && rounds[0].sends.is_empty() && rounds[0].recvs.is_empty() {
        rounds.pop().unwrap_or_default()
    } else {
        Round::default()
    };
    let (to, o) = out;
    let (from, i) = inc;
    if o.1 > o.0 {
        r.sends.push(Send {
            to,
            tag,
            from: seg(es, o),
        });
    }
    if i.1 > i.0 {
        r.recvs.push(Recv {
            from,
            tag,
            into: seg(es, i),
            how,
        });
    }
    if !r.pre.is_empty() || !r.sends.is_empty() || !r.recvs.is_empty() {
        rounds.push(r);
    }
}

/// reduce_elems to `root`: the binomial tree on whole vectors (`len` bytes).
pub(crate) fn binomial(np: u32, me: u32, root: u32, len: usize) -> Sched {
    let acc = Range::new(Buf::Tmp, 0, len);
    let pre = vec![Local::Copy {
        from: Range::new(Buf::Src, 0, len),
        to: acc,
    }];
    super::tree::reduce(np, me, root, 2, pre, acc, Range::new(Buf::Dst, 0, len), len)
}

/// scan_elems (inclusive) or exclusive_scan_elems by dissemination (`len` bytes).
pub(crate) fn scan(np: u32, me: u32, len: usize, exclusive: bool) -> Sched {
    let all = Range::new(Buf::Dst, 0, len);
    let mut rounds = Vec::new();
    // The ranks that scan, and this rank's place among them.
    let (first, v) = if exclusive {
        // Shift: rank me's vector to me + 1, which starts from it.
        let mut r = Round::default();
        if me + 1 < np {
            r.sends.push(Send {
                to: me + 1,
                tag: 0,
                from: Range::new(Buf::Src, 0, len),
            });
        }
        if me == 0 {
            rounds.push(r);
            return Sched {
                rounds,
                post: Vec::new(),
                tmp: 0,
            };
        }
        r.recvs.push(Recv {
            from: me - 1,
            tag: 0,
            into: all,
            how: Apply::Copy,
        });
        rounds.push(r);
        (1, me - 1)
    } else {
        rounds.push(Round {
            pre: start(len),
            ..Round::default()
        });
        (0, me)
    };
    let m = np - first;
    let mut d = 1u32;
    let mut k = 1;
    while d < m {
        let mut r = if !exclusive && k == 1 {
            rounds.pop().unwrap_or_default()
        } else {
            Round::default()
        };
        if v + d < m {
            r.sends.push(Send {
                to: v + d + first,
                tag: k,
                from: all,
            });
        }
        if v >= d {
            r.recvs.push(Recv {
                from: v - d + first,
                tag: k,
                into: all,
                how: Apply::CombineFirst,
            });
        }
        if !r.pre.is_empty() || !r.sends.is_empty() || !r.recvs.is_empty() {
            rounds.push(r);
        }
        d <<= 1;
        k += 1;
    }
    Sched {
        rounds,
        post: Vec::new(),
        tmp: 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algs::testing::{compose, pattern, run};
    use crate::sched::{simulate, Combine};

    fn elem(b: &[u8]) -> (u64, u64) {
        (
            u64::from_le_bytes(b[..8].try_into().unwrap()),
            u64::from_le_bytes(b[8..16].try_into().unwrap()),
        )
    }

    const ES: usize = 16;

    /// Every rank's vector of `n` elements.
    fn vectors(np: u32, n: usize, which: u8) -> Vec<Vec<u8>> {
        (0..np as usize)
            .map(|t| pattern(t, which, n * ES))
            .collect()
    }

    /// Element i of the fold of vectors `lo..=hi` in order.
    fn fold(vs: &[Vec<u8>], lo: usize, hi: usize, i: usize) -> (u64, u64) {
        (lo..=hi)
            .map(|t| elem(&vs[t][i * ES..]))
            .reduce(compose)
            .unwrap()
    }

    fn areas(vs: &[Vec<u8>], dst: impl Fn(usize) -> usize, which: u8) -> Vec<(Vec<u8>, Vec<u8>)> {
        vs.iter()
            .enumerate()
            .map(|(t, s)| (s.clone(), pattern(t, which, dst(t))))
            .collect()
    }

    const COUNTS: [usize; 5] = [1, 2, 3, 17, 64];

    fn check_all_reduce(name: &str, gen: impl Fn(u32, u32, usize) -> Sched) {
        for np in 1..=17u32 {
            for n in COUNTS {
                let vs = vectors(np, n, 11);
                let scheds: Vec<Sched> = (0..np).map(|me| gen(np, me, n)).collect();
                let mut a = areas(&vs, |_| n * ES, 12);
                run(&scheds, &mut a, u64::from(np) * 97 + n as u64);
                for (t, (s, d)) in a.iter().enumerate() {
                    assert_eq!(s, &vs[t], "{name}: a source was written");
                    for i in 0..n {
                        assert_eq!(
                            elem(&d[i * ES..]),
                            fold(&vs, 0, np as usize - 1, i),
                            "{name} np {np} n {n} rank {t} element {i}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn recursive_doubling_reduces_every_element_in_rank_order() {
        check_all_reduce("recursive_doubling", |np, me, n| {
            recursive_doubling(np, me, n * ES)
        });
    }

    #[test]
    fn rabenseifner_reduces_every_element_in_rank_order() {
        check_all_reduce("rabenseifner", |np, me, n| rabenseifner(np, me, ES, n));
        // Each rank sends at most 2 log2 p segments (halves) plus the pairing.
        for np in 1..=17u32 {
            let n = 64;
            let scheds: Vec<Sched> = (0..np).map(|me| rabenseifner(np, me, ES, n)).collect();
            let p2 = log2_floor_pow(np);
            let bytes: usize = scheds
                .iter()
                .flat_map(|s| s.rounds.iter().flat_map(|r| r.sends.iter()))
                .map(|s| s.from.len)
                .sum();
            let rest = (np - p2) as usize;
            // Reduce-scatter plus allgather: 2 (p2 − 1)/p2 of the vector per virtual rank.
            let want = 2 * (p2 as usize - 1) * n * ES + 2 * rest * n * ES;
            assert_eq!(bytes, want, "np {np}");
        }
    }

    /// Wrapping u64 sum on 8-byte elements: commutative.
    struct Sum;

    impl Combine for Sum {
        fn combine(&self, out: &mut [u8], left: &[u8], right: &[u8]) {
            for i in (0..out.len()).step_by(8) {
                let a = u64::from_le_bytes(left[i..i + 8].try_into().unwrap());
                let b = u64::from_le_bytes(right[i..i + 8].try_into().unwrap());
                out[i..i + 8].copy_from_slice(&a.wrapping_add(b).to_le_bytes());
            }
        }
        fn fold(&self, out: &mut [u8], xs: &[u8]) {
            let s = xs
                .chunks(8)
                .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
                .fold(0u64, u64::wrapping_add);
            out.copy_from_slice(&s.to_le_bytes());
        }
        fn scan(&self, _: &mut [u8], _: Option<&[u8]>, _: &[u8]) {
            unreachable!("the vector algorithms do not scan runs");
        }
    }

    #[test]
    fn ring_reduces_every_element_with_a_commutative_function() {
        for np in 1..=17u32 {
            for n in COUNTS {
                let vs: Vec<Vec<u8>> = (0..np as usize).map(|t| pattern(t, 13, n * 8)).collect();
                let scheds: Vec<Sched> = (0..np).map(|me| ring(np, me, 8, n)).collect();
                let mut a: Vec<(Vec<u8>, Vec<u8>)> =
                    vs.iter().map(|s| (s.clone(), vec![0u8; n * 8])).collect();
                let sent = simulate(&scheds, &mut a, &Sum, u64::from(np) + n as u64)
                    .unwrap_or_else(|e| panic!("ring np {np} n {n}: {e}"));
                let p = np as usize;
                let nonempty = (0..p).filter(|j| (j + 1) * n / p > j * n / p).count();
                assert_eq!(sent, 2 * (p - 1) * nonempty, "np {np} n {n}");
                for i in 0..n {
                    let want = vs
                        .iter()
                        .map(|v| u64::from_le_bytes(v[i * 8..i * 8 + 8].try_into().unwrap()))
                        .fold(0u64, u64::wrapping_add);
                    for (t, (_, d)) in a.iter().enumerate() {
                        let got = u64::from_le_bytes(d[i * 8..i * 8 + 8].try_into().unwrap());
                        assert_eq!(got, want, "np {np} n {n} rank {t} element {i}");
                    }
                }
            }
        }
    }

    #[test]
    fn binomial_reduces_every_element_to_every_root() {
        for np in 1..=17u32 {
            for n in [1usize, 5] {
                let vs = vectors(np, n, 14);
                for root in 0..np {
                    let scheds: Vec<Sched> =
                        (0..np).map(|me| binomial(np, me, root, n * ES)).collect();
                    let mut a = areas(&vs, |t| if t == root as usize { n * ES } else { 0 }, 15);
                    let sent = run(&scheds, &mut a, u64::from(np * 19 + root));
                    assert_eq!(sent, np as usize - 1);
                    root_holds_the_fold(&vs, &a[root as usize].1, n, root);
                }
            }
        }
    }

    /// The root's destination `d` holds the fold of every vector of `vs`, element by element.
    fn root_holds_the_fold(vs: &[Vec<u8>], d: &[u8], n: usize, root: u32) {
        let np = vs.len();
        for i in 0..n {
            assert_eq!(
                elem(&d[i * ES..]),
                fold(vs, 0, np - 1, i),
                "np {np} n {n} root {root} element {i}"
            );
        }
    }

    #[test]
    fn reduce_scatter_gather_reduces_every_element_to_every_root() {
        for np in 1..=17u32 {
            for n in COUNTS {
                let vs = vectors(np, n, 18);
                for root in 0..np {
                    let scheds: Vec<Sched> = (0..np)
                        .map(|me| reduce_scatter_gather(np, me, root, ES, n))
                        .collect();
                    // Only the root has a destination: a write to another's would fail.
                    let mut a = areas(&vs, |t| if t == root as usize { n * ES } else { 0 }, 19);
                    run(&scheds, &mut a, u64::from(np * 23 + root) + n as u64);
                    for (t, (s, _)) in a.iter().enumerate() {
                        assert_eq!(s, &vs[t], "a source was written");
                    }
                    root_holds_the_fold(&vs, &a[root as usize].1, n, root);
                }
            }
            // Bytes: the reduce-scatter's (p2 − 1)/p2 of the vector per place, the gather's
            // half a vector per step (its senders pass on all they gathered), the pairing's
            // vector per pair, and the result to an odd root.
            let n = 64;
            let p2 = log2_floor_pow(np) as usize;
            let rest = np as usize - p2;
            for root in 0..np {
                let bytes: usize = (0..np)
                    .map(|me| reduce_scatter_gather(np, me, root, ES, n))
                    .flat_map(|s| s.rounds.into_iter().flat_map(|r| r.sends))
                    .map(|s| s.from.len)
                    .sum();
                let back = usize::from((root as usize) < 2 * rest && root % 2 == 1);
                let steps = p2.trailing_zeros() as usize;
                let want = (p2 - 1) * n * ES + steps * n * ES / 2 + rest * n * ES + back * n * ES;
                assert_eq!(bytes, want, "np {np} root {root}");
            }
        }
    }

    #[test]
    fn scans_give_every_rank_its_prefix() {
        for np in 1..=17u32 {
            for n in [1usize, 4, 9] {
                for exclusive in [false, true] {
                    let vs = vectors(np, n, 16);
                    let scheds: Vec<Sched> =
                        (0..np).map(|me| scan(np, me, n * ES, exclusive)).collect();
                    let mut a = areas(&vs, |_| n * ES, 17);
                    let before = a.clone();
                    let sent = run(&scheds, &mut a, u64::from(np) * 3 + n as u64);
                    let p = np as usize;
                    let m = if exclusive { p - 1 } else { p };
                    let mut want_sent = if exclusive { p - 1 } else { 0 };
                    let mut d = 1;
                    while d < m {
                        want_sent += m - d;
                        d <<= 1;
                    }
                    assert_eq!(sent, want_sent, "np {np} exclusive {exclusive}");
                    for (t, (_, got)) in a.iter().enumerate() {
                        for i in 0..n {
                            let want = match (exclusive, t) {
                                (false, _) => fold(&vs, 0, t, i),
                                (true, 0) => elem(&before[0].1[i * ES..]),
                                (true, _) => fold(&vs, 0, t - 1, i),
                            };
                            assert_eq!(
                                elem(&got[i * ES..]),
                                want,
                                "np {np} n {n} exclusive {exclusive} rank {t} element {i}"
                            );
                        }
                    }
                }
            }
        }
    }
}
