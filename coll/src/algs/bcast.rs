//! Broadcast: `len` bytes of the root's source to every rank's destination.
//!
//! - binomial tree: the root sends to ranks at relative distances np/2, np/4, ..., each rank
//!   forwards to its own subtree once it has the data: ⌈log₂ np⌉ rounds, np − 1 messages.
//! - k-nomial tree (radix k ≥ 2): the same in base k: a rank sends to up to k − 1 children per
//!   level, ⌈log_k np⌉ levels; radix 2 is the binomial tree.

use crate::sched::{Apply, Buf, Local, Range, Recv, Round, Sched, Send};

use super::{absolute, relative};

/// The binomial tree's parent and children of relative rank `v` (children nearest first).
fn binomial(v: u32, np: u32) -> (Option<u32>, Vec<u32>) {
    let mut mask = 1u32;
    let mut parent = None;
    while mask < np {
        if v & mask != 0 {
            parent = Some(v - mask);
            break;
        }
        mask <<= 1;
    }
    // Children: v + m for every power of two m below the bit that names the parent (below
    // np for the root), largest first so the biggest subtree starts earliest.
    let mut children = Vec::new();
    let mut m = mask >> 1;
    while m > 0 {
        if v + m < np {
            children.push(v + m);
        }
        m >>= 1;
    }
    (parent, children)
}

/// The k-nomial tree's parent and children of relative rank `v` (largest subtrees first): the
/// reduction tree's levels (`tree::knomial_levels`), farthest level and child first.
fn knomial(v: u32, np: u32, k: u32) -> (Option<u32>, Vec<u32>) {
    let (parent, levels) = super::tree::knomial_levels(v, np, k);
    let children = levels.iter().rev().flat_map(|l| l.iter().rev().copied());
    (parent, children.collect())
}

/// Binomial-tree broadcast of `len` bytes from `root` among `np` ranks; `src_is_dst` when the
/// root's source is its destination (in place).
pub(crate) fn binomial_tree(np: u32, me: u32, root: u32, len: usize, src_is_dst: bool) -> Sched {
    let v = relative(me, root, np);
    tree(np, root, len, src_is_dst, binomial(v, np))
}

/// k-nomial-tree broadcast (radix `k`, at least 2).
pub(crate) fn knomial_tree(
    np: u32,
    me: u32,
    root: u32,
    len: usize,
    src_is_dst: bool,
    k: u32,
) -> Sched {
    let v = relative(me, root, np);
    tree(np, root, len, src_is_dst, knomial(v, np, k))
}

/// The schedule of a rank with `(parent, children)` (relative ranks) in a broadcast tree.
fn tree(
    np: u32,
    root: u32,
    len: usize,
    src_is_dst: bool,
    (parent, children): (Option<u32>, Vec<u32>),
) -> Sched {
    let dst = Range::new(Buf::Dst, 0, len);
    let mut rounds = Vec::new();
    let mut pre = Vec::new();
    match parent {
        None if !src_is_dst => pre.push(Local::Copy {
            from: Range::new(Buf::Src, 0, len),
            to: dst,
        }),
        None => {}
        Some(p) => rounds.push(Round {
            recvs: vec![Recv {
                from: absolute(p, root, np),
                tag: 0,
                into: dst,
                how: Apply::Copy,
            }],
            ..Round::default()
        }),
    }
    if !children.is_empty() || !pre.is_empty() {
        rounds.push(Round {
            pre,
            sends: children
                .iter()
                .map(|&c| Send {
                    to: absolute(c, root, np),
                    tag: 0,
                    from: dst,
                })
                .collect(),
            recvs: Vec::new(),
        });
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
    use crate::algs::testing::{pattern, run};

    #[test]
    fn binomial_reaches_every_rank_with_np_minus_one_messages() {
        for np in 1..=17u32 {
            for root in [0, np / 2, np - 1] {
                for len in [1, 8, 1000] {
                    let scheds: Vec<Sched> = (0..np)
                        .map(|me| binomial_tree(np, me, root, len, false))
                        .collect();
                    let want = pattern(root as usize, 1, len);
                    let mut areas: Vec<(Vec<u8>, Vec<u8>)> = (0..np as usize)
                        .map(|t| (pattern(t, 1, len), vec![0u8; len]))
                        .collect();
                    let sent = run(&scheds, &mut areas, u64::from(np * 31 + root));
                    assert_eq!(sent, np as usize - 1, "np {np} root {root}");
                    for (t, (_, d)) in areas.iter().enumerate() {
                        assert_eq!(d, &want, "np {np} root {root} len {len} rank {t}");
                    }
                    let depth = scheds.iter().map(|s| s.rounds.len()).max().unwrap_or(0);
                    let log = (32 - np.saturating_sub(1).leading_zeros()) as usize;
                    assert!(depth <= log + 1, "np {np}: {depth} rounds");
                }
            }
        }
    }

    #[test]
    fn knomial_reaches_every_rank_and_radix_two_is_binomial() {
        for np in 1..=30u32 {
            for k in [2u32, 3, 4, 7] {
                for root in [0, np - 1] {
                    let len = 24;
                    let scheds: Vec<Sched> = (0..np)
                        .map(|me| knomial_tree(np, me, root, len, false, k))
                        .collect();
                    let want = pattern(root as usize, 2, len);
                    let mut areas: Vec<(Vec<u8>, Vec<u8>)> = (0..np as usize)
                        .map(|t| (pattern(t, 2, len), vec![0u8; len]))
                        .collect();
                    let sent = run(&scheds, &mut areas, u64::from(np * 7 + k));
                    assert_eq!(sent, np as usize - 1, "np {np} k {k}");
                    assert!(areas.iter().all(|(_, d)| d == &want), "np {np} k {k}");
                    if k == 2 {
                        for me in 0..np {
                            assert_eq!(
                                scheds[me as usize],
                                binomial_tree(np, me, root, len, false),
                                "np {np} rank {me}"
                            );
                        }
                    }
                }
            }
        }
    }
}
