//! prefix_reduce and exclusive_prefix_reduce in the design notes' sense, for the layouts
//! where each participant's elements are one run of the array, the runs in participant order
//! (participants without elements take no part), and the destination layout places every
//! element where the source layout does. A participant's prefixes then need only the fold of
//! the runs of the participants before it (its carry):
//!
//! - dissemination (Hillis–Steele over the m participants with elements): each folds its run to
//!   a partial; in round k it sends (its carry ∘ its partial) to the participant 2^k after it
//!   and puts what arrives from the one 2^k before it in front of its carry. ⌈log₂ m⌉ rounds,
//!   Σ_k (m − 2^k) messages of one element.
//! - chain: participant i waits for the fold of every run before it from participant i − 1 and
//!   passes it on with its own partial added: m − 1 messages of one element, m − 1 hops.
//!
//! Both then compute the run's prefixes with one call after the carry. Commutativity does not
//! relax the layout condition: a prefix needs the elements before each element, which a
//! participant's partial does not give when runs interleave.

use crate::plan::Run;
use crate::sched::{Apply, Buf, Local, Range, Recv, Round, Sched, Send};

/// The scratch space: the carry, the partial right after it (so that one fold combines
/// them), and the value sent.
struct Slots {
    carry: Range,
    partial: Range,
    both: Range,
    sent: Range,
}

fn slots(es: usize) -> Slots {
    Slots {
        carry: Range::new(Buf::Tmp, 0, es),
        partial: Range::new(Buf::Tmp, es, es),
        both: Range::new(Buf::Tmp, 0, 2 * es),
        sent: Range::new(Buf::Tmp, 2 * es, es),
    }
}

/// This rank's position among the participants with elements, if it has any.
fn position(runs: &[Run], me: u32) -> Option<usize> {
    runs.iter().position(|r| r.part == me as usize)
}

fn rank_of(runs: &[Run], v: usize) -> u32 {
    u32::try_from(runs[v].part).unwrap_or(u32::MAX)
}

/// The final steps: the run's prefixes after the carry (none for the first participant).
fn output(run: &Run, es: usize, carry: Option<Range>, exclusive: bool) -> Vec<Local> {
    let (at, len) = (run.local * es, run.len * es);
    if !exclusive {
        return vec![Local::Scan {
            carry,
            from: Range::new(Buf::Src, at, len),
            to: Range::new(Buf::Dst, at, len),
        }];
    }
    // Element i gets the prefix through i − 1; the array's element 0 (no carry) is left as it
    // is. The scan reads the source before the carry is written (the source may be the
    // destination, in place).
    let mut v = Vec::new();
    if run.len > 1 {
        v.push(Local::Scan {
            carry,
            from: Range::new(Buf::Src, at, len - es),
            to: Range::new(Buf::Dst, at + es, len - es),
        });
    }
    if let Some(c) = carry {
        v.push(Local::Copy {
            from: c,
            to: Range::new(Buf::Dst, at, es),
        });
    }
    v
}

/// The dissemination schedule of team rank `me`; `runs` are the array's runs (one per
/// participant with elements, in participant order), `es` bytes per element.
pub(crate) fn dissemination(me: u32, es: usize, runs: &[Run], exclusive: bool) -> Sched {
    let Some(v) = position(runs, me) else {
        return Sched::default();
    };
    let m = runs.len();
    let run = &runs[v];
    let s = slots(es);
    let mut rounds = vec![Round {
        pre: vec![Local::Fold {
            from: Range::new(Buf::Src, run.local * es, run.len * es),
            to: s.partial,
        }],
        ..Round::default()
    }];
    let mut d = 1usize;
    let mut k = 0u32;
    while d < m {
        let mut r = if k == 0 {
            std::mem::take(&mut rounds[0])
        } else {
            Round::default()
        };
        if v + d < m {
            // What this rank sends covers the ranks from v − 2^k + 1 to v: its carry so far
            // (everything received before this round) and its partial.
            let from = if v >= 1 && k > 0 {
                r.pre.push(Local::Fold {
                    from: s.both,
                    to: s.sent,
                });
                s.sent
            } else {
                s.partial
            };
            r.sends.push(Send {
                to: rank_of(runs, v + d),
                tag: k + 1,
                from,
            });
        }
        if v >= d {
            r.recvs.push(Recv {
                from: rank_of(runs, v - d),
                tag: k + 1,
                into: s.carry,
                how: if k == 0 {
                    Apply::Copy
                } else {
                    Apply::CombineFirst
                },
            });
        }
        if k == 0 {
            rounds[0] = r;
        } else if !r.sends.is_empty() || !r.recvs.is_empty() {
            rounds.push(r);
        }
        d <<= 1;
        k += 1;
    }
    Sched {
        rounds,
        post: output(run, es, (v >= 1).then_some(s.carry), exclusive),
        tmp: 3 * es,
    }
}

/// The chain schedule of team rank `me` (arguments as for [`dissemination`]).
pub(crate) fn chain(me: u32, es: usize, runs: &[Run], exclusive: bool) -> Sched {
    let Some(v) = position(runs, me) else {
        return Sched::default();
    };
    let m = runs.len();
    let run = &runs[v];
    let s = slots(es);
    let mut first = Round {
        pre: vec![Local::Fold {
            from: Range::new(Buf::Src, run.local * es, run.len * es),
            to: s.partial,
        }],
        ..Round::default()
    };
    let mut rounds = Vec::new();
    if v == 0 {
        if m > 1 {
            first.sends.push(Send {
                to: rank_of(runs, 1),
                tag: 0,
                from: s.partial,
            });
        }
        rounds.push(first);
    } else {
        first.recvs.push(Recv {
            from: rank_of(runs, v - 1),
            tag: 0,
            into: s.carry,
            how: Apply::Copy,
        });
        rounds.push(first);
        if v + 1 < m {
            rounds.push(Round {
                pre: vec![Local::Fold {
                    from: s.both,
                    to: s.sent,
                }],
                sends: vec![Send {
                    to: rank_of(runs, v + 1),
                    tag: 0,
                    from: s.sent,
                }],
                recvs: Vec::new(),
            });
        }
    }
    Sched {
        rounds,
        post: output(run, es, (v >= 1).then_some(s.carry), exclusive),
        tmp: 3 * es,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::algs::testing::{compose, pattern, run};
    use crate::plan::{area_elems, runs};
    use crate::types::Layout;

    fn elem(b: &[u8]) -> (u64, u64) {
        (
            u64::from_le_bytes(b[..8].try_into().unwrap()),
            u64::from_le_bytes(b[8..16].try_into().unwrap()),
        )
    }

    /// Layouts with one run per participant in participant order, for `np` participants:
    /// (layout, elements).
    fn cases(np: usize) -> Vec<(Layout, usize)> {
        let mut v = Vec::new();
        for per in [1usize, 2, 5] {
            // Every participant holds `per` elements.
            v.push((Layout::block_cyclic(per, 0), np * per));
            // Participant 0 holds none, the last one fewer than `per`.
            if np > 1 {
                v.push((Layout::block_cyclic(per, per), (np - 1) * per - per / 2));
            }
            // Starting inside a block.
            v.push((Layout::block_cyclic(per + 1, 1), np * (per + 1) - 1));
        }
        v.push((Layout::indefinite(np / 2), 4));
        v
    }

    type Gen = fn(u32, usize, &[Run], bool) -> Sched;

    fn check(gen: Gen, name: &str, msgs: fn(usize) -> usize) {
        for early in [false, true] {
            check_one(gen, name, msgs, early);
        }
    }

    /// `early`: the schedules as `OUT_NOSYNC` runs them (`engine::read_src_early`).
    fn check_one(gen: Gen, name: &str, msgs: fn(usize) -> usize, early: bool) {
        let es = 16;
        for np in 1..=17usize {
            for (lay, n) in cases(np) {
                let rs = runs(lay, n, np);
                assert!(rs.windows(2).all(|w| w[0].part < w[1].part), "{lay:?}");
                for exclusive in [false, true] {
                    #[allow(clippy::cast_possible_truncation)] // np <= 17
                    let scheds: Vec<Sched> = (0..np)
                        .map(|me| {
                            let mut s = gen(me as u32, es, &rs, exclusive);
                            if early {
                                crate::engine::read_src_early(&mut s);
                            }
                            s
                        })
                        .collect();
                    let mut areas: Vec<(Vec<u8>, Vec<u8>)> = (0..np)
                        .map(|t| {
                            let len = area_elems(lay, n, np, t) * es;
                            (pattern(t, 7, len), pattern(t, 8, len))
                        })
                        .collect();
                    let before = areas.clone();
                    // The array in element order, and its prefixes.
                    let x: Vec<(u64, u64)> = rs
                        .iter()
                        .flat_map(|r| {
                            let s = &before[r.part].0;
                            (0..r.len)
                                .map(|i| elem(&s[(r.local + i) * es..]))
                                .collect::<Vec<_>>()
                        })
                        .collect();
                    let mut acc = Vec::new();
                    for (k, e) in x.iter().enumerate() {
                        acc.push(if k == 0 { *e } else { compose(acc[k - 1], *e) });
                    }
                    #[allow(clippy::cast_possible_truncation)] // small
                    let sent = run(&scheds, &mut areas, (np * 1009 + n) as u64);
                    assert_eq!(sent, msgs(rs.len()), "{name} np {np} {lay:?}");
                    for r in &rs {
                        for i in 0..r.len {
                            let k = r.k0 + i;
                            let at = (r.local + i) * es;
                            let got = elem(&areas[r.part].1[at..]);
                            let want = match (exclusive, k) {
                                (false, _) => acc[k],
                                (true, 0) => elem(&before[r.part].1[at..]),
                                (true, _) => acc[k - 1],
                            };
                            assert_eq!(
                                got, want,
                                "{name} np {np} {lay:?} n {n} exclusive {exclusive} element {k}"
                            );
                        }
                    }
                    for (t, (s, _)) in areas.iter().enumerate() {
                        assert_eq!(s, &before[t].0, "{name}: a source was written");
                    }
                }
            }
        }
    }

    #[test]
    fn dissemination_gives_every_element_its_prefix() {
        check(dissemination, "dissemination", |m| {
            let mut total = 0;
            let mut d = 1;
            while d < m {
                total += m - d;
                d <<= 1;
            }
            total
        });
    }

    #[test]
    fn chain_gives_every_element_its_prefix() {
        check(chain, "chain", |m| m.saturating_sub(1));
    }
}
