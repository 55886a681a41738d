//! reduce_to_all in the design notes' sense: every participant's elements of a distributed
//! array, combined in element order, to one element at every participant.
//!
//! - recursive doubling on partials: each rank folds its own elements to one partial (its
//!   elements are one run of the array, or the function is commutative), then ⌈log₂ p⌉ rounds
//!   of pairwise exchanges combine blocks of consecutive ranks in rank order. With a size that
//!   is not a power of two, the first 2r ranks (r = np − 2^⌊log₂ np⌋) pair up first (the odd one
//!   of each pair hands its partial to the even one, and gets the result back at the end), so
//!   the order holds for non-commutative functions too. Each of the 2^⌊log₂ np⌋ ranks sends
//!   one message per round, and each pair two more: 2^⌊log₂ np⌋·⌊log₂ np⌋ + 2r messages.
//!   The same exchanges on whole vectors serve reduce_elems_to_all (`vector.rs`).

use crate::sched::{Apply, Buf, Local, Range, Recv, Round, Sched, Send};

/// Tags: 0 the pairing, 1 + k round k, 63 the result back to a paired rank.
const TAG_PAIR: u32 = 0;
const TAG_BACK: u32 = 63;

/// The local steps that fold this rank's elements (`runs`: byte ranges of its source, in
/// element order, `es` bytes per element; at least one element) to one partial, the partial's
/// range in the scratch space, and the scratch bytes they use. One run is folded where it lies;
/// several are packed at the start of the scratch space first, the partial after them.
pub(crate) fn partial(es: usize, runs: &[(usize, usize)]) -> (Vec<Local>, Range, usize) {
    if let [(off, len)] = *runs {
        let acc = Range::new(Buf::Tmp, 0, es);
        let fold = Local::Fold {
            from: Range::new(Buf::Src, off, len),
            to: acc,
        };
        return (vec![fold], acc, es);
    }
    let mine: usize = runs.iter().map(|r| r.1).sum();
    let acc = Range::new(Buf::Tmp, mine, es);
    let mut pre = Vec::new();
    let mut at = 0;
    for &(off, len) in runs {
        pre.push(Local::Copy {
            from: Range::new(Buf::Src, off, len),
            to: Range::new(Buf::Tmp, at, len),
        });
        at += len;
    }
    pre.push(Local::Fold {
        from: Range::new(Buf::Tmp, 0, mine),
        to: acc,
    });
    (pre, acc, mine + es)
}

/// The schedule of team rank `me` of `np`: its elements are the `runs` (byte ranges of its
/// source, in element order), `es` bytes each; every rank has at least one element.
pub(crate) fn recursive_doubling(np: u32, me: u32, es: usize, runs: &[(usize, usize)]) -> Sched {
    let (pre, acc, tmp) = partial(es, runs);
    doubling(np, me, pre, acc, Range::new(Buf::Dst, 0, es), tmp)
}

/// Recursive doubling on the range `acc` (after the local steps `pre` filled it), the result
/// in `dst` (as long as `acc`; the same range needs no final copy); `tmp` scratch bytes.
pub(crate) fn doubling(
    np: u32,
    me: u32,
    pre: Vec<Local>,
    acc: Range,
    dst: Range,
    tmp: usize,
) -> Sched {
    let p2 = if np.is_power_of_two() {
        np
    } else {
        1 << (31 - np.leading_zeros())
    };
    let rest = np - p2;
    let mut rounds = Vec::new();
    // Pairing: ranks 2i and 2i+1 for i < rest; the odd ones drop out.
    let vrank = if me < 2 * rest {
        if me % 2 == 1 {
            rounds.push(Round {
                pre,
                sends: vec![Send {
                    to: me - 1,
                    tag: TAG_PAIR,
                    from: acc,
                }],
                recvs: vec![Recv {
                    from: me - 1,
                    tag: TAG_BACK,
                    into: dst,
                    how: Apply::Copy,
                }],
            });
            return Sched {
                rounds,
                post: Vec::new(),
                tmp,
            };
        }
        rounds.push(Round {
            pre,
            sends: Vec::new(),
            recvs: vec![Recv {
                from: me + 1,
                tag: TAG_PAIR,
                into: acc,
                how: Apply::CombineAfter,
            }],
        });
        me / 2
    } else {
        rounds.push(Round {
            pre,
            ..Round::default()
        });
        me - rest
    };
    // The real rank of virtual rank v.
    let real = |v: u32| if v < rest { 2 * v } else { v + rest };
    let mut mask = 1;
    let mut k = 1;
    while mask < p2 {
        let partner = vrank ^ mask;
        rounds.push(Round {
            pre: Vec::new(),
            sends: vec![Send {
                to: real(partner),
                tag: k,
                from: acc,
            }],
            recvs: vec![Recv {
                from: real(partner),
                tag: k,
                into: acc,
                how: if partner < vrank {
                    Apply::CombineFirst
                } else {
                    Apply::CombineAfter
                },
            }],
        });
        mask <<= 1;
        k += 1;
    }
    let mut last = Round {
        pre: if acc == dst {
            Vec::new()
        } else {
            vec![Local::Copy { from: acc, to: dst }]
        },
        ..Round::default()
    };
    if me < 2 * rest {
        last.sends.push(Send {
            to: me + 1,
            tag: TAG_BACK,
            from: acc,
        });
    }
    rounds.push(last);
    Sched {
        rounds,
        post: Vec::new(),
        tmp,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algs::testing::{compose, pattern, run};

    fn elem(b: &[u8]) -> (u64, u64) {
        (
            u64::from_le_bytes(b[..8].try_into().unwrap()),
            u64::from_le_bytes(b[8..16].try_into().unwrap()),
        )
    }

    #[test]
    fn every_rank_gets_the_ordered_combination() {
        let es = 16;
        for np in 1..=19u32 {
            for per in [1usize, 3] {
                // Rank t holds elements t*per .. (t+1)*per of the array, as one run.
                let scheds: Vec<Sched> = (0..np)
                    .map(|me| recursive_doubling(np, me, es, &[(0, per * es)]))
                    .collect();
                let mut areas: Vec<(Vec<u8>, Vec<u8>)> = (0..np as usize)
                    .map(|t| (pattern(t, 3, per * es), vec![0u8; es]))
                    .collect();
                let srcs: Vec<Vec<u8>> = areas.iter().map(|a| a.0.clone()).collect();
                let want = srcs
                    .iter()
                    .flat_map(|s| s.chunks(es).map(elem).collect::<Vec<_>>())
                    .reduce(compose)
                    .unwrap();
                let sent = run(&scheds, &mut areas, u64::from(np) * 7 + per as u64);
                for (t, (s, d)) in areas.iter().enumerate() {
                    assert_eq!(elem(d), want, "np {np} per {per} rank {t}");
                    assert_eq!(s, &srcs[t], "np {np}: rank {t}'s source was written");
                }
                let p2 = if np.is_power_of_two() {
                    np
                } else {
                    1 << (31 - np.leading_zeros())
                };
                let rounds = (32 - (p2 - 1).leading_zeros()) as usize;
                let extra = 2 * (np - p2) as usize;
                assert_eq!(sent, p2 as usize * rounds + extra, "np {np}");
            }
        }
    }
}
