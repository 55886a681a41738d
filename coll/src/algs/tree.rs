//! Reductions over trees whose subtrees are contiguous ranges of ranks, so that a rank
//! combines what it receives in rank order and non-commutative functions stay correct.
//!
//! - reduce to `root` (binomial, or k-nomial with radix k): the ranks `root..np` form a
//!   k-nomial tree rooted at `root` (a child's subtree is the range that follows it, combined
//!   after the parent's own value), the ranks `0..root` the mirror image rooted at `root − 1`
//!   (subtrees to the left, combined before), whose root hands its result to `root` last.
//!   np − 1 messages; about ⌈log_k np⌉ + 1 levels (one more where both halves exist).
//! - reduce then broadcast (reduce_to_all): the binomial reduce to rank 0, then the binomial
//!   broadcast from rank 0: 2(np − 1) messages in about 2⌈log₂ np⌉ rounds.
//!
//! The value reduced is a range of the scratch space that the caller's local steps fill: the
//! fold of a rank's elements of the array (reduce), or a copy of its vector (reduce_elems).

use crate::sched::{Apply, Buf, Local, Range, Recv, Round, Sched, Send};

fn narrow(x: u64) -> u32 {
    u32::try_from(x).unwrap_or(u32::MAX)
}

/// The k-nomial tree over positions `0..s` rooted at 0: position `v`'s parent and its
/// children, level by level (nearest first), each level in ascending order. The subtree of
/// child `v + j·k^m` is the range `v + j·k^m .. v + (j + 1)·k^m` (clipped to `s`), so the
/// children in this order cover `v + 1 ..` consecutively.
pub(crate) fn knomial_levels(v: u32, s: u32, k: u32) -> (Option<u32>, Vec<Vec<u32>>) {
    let k = u64::from(k.max(2));
    let (v, n) = (u64::from(v), u64::from(s));
    // The lowest base-k digit of v that is not 0 names the parent; the root has none.
    let mut mask = 1u64;
    let mut parent = None;
    while mask < n {
        let digit = (v / mask) % k;
        if digit != 0 {
            parent = Some(v - digit * mask);
            break;
        }
        mask *= k;
    }
    let mut levels = Vec::new();
    let mut m = 1u64;
    while m < mask {
        let level: Vec<u32> = (1..k)
            .map(|j| v + j * m)
            .filter(|&c| c < n)
            .map(narrow)
            .collect();
        if !level.is_empty() {
            levels.push(level);
        }
        m *= k;
    }
    (parent.map(narrow), levels)
}

/// Team rank `me`'s parent and children (levels of (team rank, how its value is combined))
/// in the reduction tree to `root` with radix `k`.
fn place(np: u32, me: u32, root: u32, k: u32) -> (Option<u32>, Vec<Vec<(u32, Apply)>>) {
    if me >= root {
        // root..np: a k-nomial tree rooted at `root`; children hold later ranks.
        let (parent, levels) = knomial_levels(me - root, np - root, k);
        let mut levels: Vec<Vec<(u32, Apply)>> = levels
            .into_iter()
            .map(|l| {
                l.into_iter()
                    .map(|c| (c + root, Apply::CombineAfter))
                    .collect()
            })
            .collect();
        if me == root && root > 0 {
            // The left half's result comes first in rank order.
            levels.push(vec![(root - 1, Apply::CombineFirst)]);
        }
        (parent.map(|p| p + root), levels)
    } else {
        // 0..root, mirrored: rooted at root − 1; children hold earlier ranks.
        let (parent, levels) = knomial_levels(root - 1 - me, root, k);
        let levels = levels
            .into_iter()
            .map(|l| {
                l.into_iter()
                    .map(|c| (root - 1 - c, Apply::CombineFirst))
                    .collect()
            })
            .collect();
        (Some(parent.map_or(root, |p| root - 1 - p)), levels)
    }
}

/// The reduction of every rank's `acc` (filled by the local steps `pre`) in rank order to
/// `root`, whose result is copied to `out` at the end (a range as long as `acc`). `tmp`
/// scratch bytes; radix `k` (2: binomial).
#[allow(clippy::too_many_arguments)]
pub(crate) fn reduce(
    np: u32,
    me: u32,
    root: u32,
    k: u32,
    pre: Vec<Local>,
    acc: Range,
    out: Range,
    tmp: usize,
) -> Sched {
    let (parent, levels) = place(np, me, root, k);
    let mut rounds = vec![Round {
        pre,
        ..Round::default()
    }];
    for (i, level) in levels.into_iter().enumerate() {
        let recvs = level
            .into_iter()
            .map(|(from, how)| Recv {
                from,
                tag: 0,
                into: acc,
                how,
            })
            .collect();
        if i == 0 {
            rounds[0].recvs = recvs;
        } else {
            rounds.push(Round {
                recvs,
                ..Round::default()
            });
        }
    }
    let mut post = Vec::new();
    match parent {
        Some(to) => {
            let send = Send {
                to,
                tag: 0,
                from: acc,
            };
            // A round's sends go before its receives are applied.
            match rounds.last_mut() {
                Some(r) if r.recvs.is_empty() => r.sends.push(send),
                _ => rounds.push(Round {
                    sends: vec![send],
                    ..Round::default()
                }),
            }
        }
        None => post.push(Local::Copy { from: acc, to: out }),
    }
    Sched { rounds, post, tmp }
}

/// `a` then `b`: `b`'s rounds after `a`'s, its tags moved up by `tag_offset` so that no
/// message of one is taken for the other; `a`'s final steps run before `b`'s first round.
pub(crate) fn then(a: Sched, mut b: Sched, tag_offset: u32) -> Sched {
    for r in &mut b.rounds {
        for s in &mut r.sends {
            s.tag += tag_offset;
        }
        for v in &mut r.recvs {
            v.tag += tag_offset;
        }
    }
    let mut rounds = a.rounds;
    let mut post = b.post;
    match b.rounds.first_mut() {
        Some(first) => {
            let mut pre = a.post;
            pre.append(&mut first.pre);
            first.pre = pre;
        }
        None => {
            let mut p = a.post;
            p.append(&mut post);
            post = p;
        }
    }
    rounds.append(&mut b.rounds);
    Sched {
        rounds,
        post,
        tmp: a.tmp.max(b.tmp),
    }
}

/// reduce_to_all: the binomial reduce to rank 0 of the partials that `pre` computes into
/// `acc`, then the binomial broadcast of the result (`es` bytes at the destination's start).
pub(crate) fn reduce_broadcast(
    np: u32,
    me: u32,
    es: usize,
    pre: Vec<Local>,
    acc: Range,
    tmp: usize,
) -> Sched {
    let dst = Range::new(Buf::Dst, 0, es);
    let red = reduce(np, me, 0, 2, pre, acc, dst, tmp);
    // Rank 0's result is already in its destination: the broadcast is in place there.
    let bcast = super::bcast::binomial_tree(np, me, 0, es, true);
    then(red, bcast, 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algs::allreduce::partial;
    use crate::algs::testing::{compose, pattern, run};

    fn elem(b: &[u8]) -> (u64, u64) {
        (
            u64::from_le_bytes(b[..8].try_into().unwrap()),
            u64::from_le_bytes(b[8..16].try_into().unwrap()),
        )
    }

    /// Rank t's source: `per` elements (one run of the array, in rank order).
    fn sources(np: u32, per: usize) -> Vec<Vec<u8>> {
        (0..np as usize).map(|t| pattern(t, 5, per * 16)).collect()
    }

    fn fold_all(srcs: &[Vec<u8>]) -> (u64, u64) {
        srcs.iter()
            .flat_map(|s| s.chunks(16).map(elem).collect::<Vec<_>>())
            .reduce(compose)
            .unwrap()
    }

    #[test]
    fn levels_cover_the_following_ranks_in_order() {
        for s in 1..=40u32 {
            for k in [2u32, 3, 4, 5] {
                // Every position but the root has the parent whose levels name it, and a
                // position's children's subtrees are the consecutive ranges after it.
                let mut size = vec![1u32; s as usize];
                for v in (0..s).rev() {
                    let (_, levels) = knomial_levels(v, s, k);
                    let mut next = v + 1;
                    for c in levels.iter().flatten() {
                        assert_eq!(*c, next, "s {s} k {k} v {v}");
                        next += size[*c as usize];
                        assert_eq!(knomial_levels(*c, s, k).0, Some(v));
                    }
                    size[v as usize] = next - v;
                }
                assert_eq!(size[0], s);
            }
        }
    }

    #[test]
    fn tree_reduce_to_every_root_in_rank_order() {
        let es = 16;
        for np in 1..=17u32 {
            for k in [2u32, 3, 4] {
                for per in [1usize, 3] {
                    let srcs = sources(np, per);
                    let want = fold_all(&srcs);
                    for root in 0..np {
                        let scheds: Vec<Sched> = (0..np)
                            .map(|me| {
                                let (pre, acc, tmp) = partial(es, &[(0, per * es)]);
                                reduce(np, me, root, k, pre, acc, Range::new(Buf::Dst, 0, es), tmp)
                            })
                            .collect();
                        let mut areas: Vec<(Vec<u8>, Vec<u8>)> = srcs
                            .iter()
                            .enumerate()
                            .map(|(t, s)| {
                                let d = if t == root as usize { es } else { 0 };
                                (s.clone(), vec![0u8; d])
                            })
                            .collect();
                        let sent = run(&scheds, &mut areas, u64::from(np * 131 + root * 7 + k));
                        assert_eq!(sent, np as usize - 1, "np {np} k {k} root {root}");
                        assert_eq!(
                            elem(&areas[root as usize].1),
                            want,
                            "np {np} k {k} per {per} root {root}"
                        );
                        for (t, (s, _)) in areas.iter().enumerate() {
                            assert_eq!(s, &srcs[t], "a source was written");
                        }
                        // Depth: at most the levels of the larger half, plus one.
                        let depth = scheds.iter().map(|s| s.rounds.len()).max().unwrap_or(0);
                        let log = (32 - np.saturating_sub(1).leading_zeros()) as usize;
                        assert!(depth <= log + 2, "np {np} root {root}: {depth} rounds");
                    }
                }
            }
        }
    }

    #[test]
    fn reduce_broadcast_gives_every_rank_the_ordered_combination() {
        let es = 16;
        for np in 1..=17u32 {
            for per in [1usize, 2, 5] {
                let srcs = sources(np, per);
                let want = fold_all(&srcs);
                let scheds: Vec<Sched> = (0..np)
                    .map(|me| {
                        let (pre, acc, tmp) = partial(es, &[(0, per * es)]);
                        reduce_broadcast(np, me, es, pre, acc, tmp)
                    })
                    .collect();
                let mut areas: Vec<(Vec<u8>, Vec<u8>)> =
                    srcs.iter().map(|s| (s.clone(), vec![0u8; es])).collect();
                let sent = run(&scheds, &mut areas, u64::from(np) * 17 + per as u64);
                assert_eq!(sent, 2 * (np as usize - 1), "np {np}");
                for (t, (_, d)) in areas.iter().enumerate() {
                    assert_eq!(elem(d), want, "np {np} per {per} rank {t}");
                }
            }
        }
    }
}
