//! Exchange (all-to-all): participant `i`'s block `j` to participant `j`'s destination at
//! block `i` (`_v`: the `counts` matrix, row = source; see `Spec::transfers_from`).
//!
//! - pairwise: np − 1 rounds; in round i a rank sends its block for `me + i` and receives the
//!   block of `me − i` (mod np). np(np − 1) messages (`_v`: the non-empty blocks). In place, the
//!   outgoing blocks are first copied to scratch, since incoming ones replace them.
//! - Bruck (uniform blocks, meant for small ones): the blocks are rotated into scratch so that
//!   block j is the one for `me + j`; in round k every block whose index has bit k set goes
//!   (packed into one message) to `me + 2^k`, and the blocks from `me − 2^k` take their
//!   places; afterwards scratch block j came from `me − j`, and a final local pass puts it at
//!   its place. ⌈log₂ np⌉ rounds, np·⌈log₂ np⌉ messages.

use crate::sched::{Buf, Local, Range, Round, Sched};

use super::allgather::recv;
use super::data::{copy, finish, offsets, send, Source};

/// Pairwise exchange for team rank `me` of `np`; `counts` is the np × np matrix (row =
/// source).
pub(crate) fn pairwise(np: u32, me: u32, counts: &[usize], src: Source) -> Sched {
    let n = np as usize;
    let m = me as usize;
    let at = |i: usize, j: usize| counts[i * n + j];
    // My outgoing blocks (destination order) and incoming blocks (source order).
    let out = offsets((0..n).map(|j| at(m, j)));
    let inn = offsets((0..n).map(|i| at(i, m)));
    let mut first = Round::default();
    let (src, tmp) = if src.in_place() {
        let scratch = Source {
            buf: Buf::Tmp,
            base: 0,
        };
        copy(&mut first.pre, src.at(0, out[n]), scratch.at(0, out[n]));
        (scratch, out[n])
    } else {
        (src, 0)
    };
    copy(
        &mut first.pre,
        src.at(out[m], at(m, m)),
        Range::new(Buf::Dst, inn[m], at(m, m)),
    );
    let mut rounds = vec![first];
    for i in 1..np {
        let to = ((me + i) % np) as usize;
        let from = ((me + np - i) % np) as usize;
        let mut r = Round::default();
        #[allow(clippy::cast_possible_truncation)] // team ranks
        send(&mut r.sends, to as u32, 0, src.at(out[to], at(m, to)));
        #[allow(clippy::cast_possible_truncation)]
        recv(
            &mut r.recvs,
            from as u32,
            0,
            Range::new(Buf::Dst, inn[from], at(from, m)),
        );
        rounds.push(r);
    }
    finish(rounds, Vec::new(), tmp)
}

/// The runs of block indices below `np` whose bit `dist` (a power of two) is set.
fn runs(np: usize, dist: usize) -> impl Iterator<Item = (usize, usize)> {
    (dist..np)
        .step_by(2 * dist)
        .map(move |a| (a, (a + dist).min(np)))
}

/// Bruck's exchange of `b`-byte blocks for team rank `me` of `np`.
pub(crate) fn bruck(np: u32, me: u32, b: usize, src: Source) -> Sched {
    let n = np as usize;
    let m = me as usize;
    let dst = |j: usize| Range::new(Buf::Dst, j * b, b);
    if n == 1 {
        let mut r = Round::default();
        copy(&mut r.pre, src.at(0, b), dst(0));
        return finish(vec![r], Vec::new(), 0);
    }
    // Scratch: the np working blocks, then the packed outgoing and incoming blocks.
    let work = |a: usize, e: usize| Range::new(Buf::Tmp, a * b, (e - a) * b);
    let mut most = 0;
    let mut dist = 1;
    while dist < n {
        most = most.max(runs(n, dist).map(|(a, e)| e - a).sum::<usize>());
        dist <<= 1;
    }
    let out_at = n * b;
    let in_at = out_at + most * b;
    // Unpack the blocks received in the round of `dist` into their places.
    let unpack = |steps: &mut Vec<Local>, dist: usize| {
        let mut at = in_at;
        for (a, e) in runs(n, dist) {
            copy(steps, Range::new(Buf::Tmp, at, (e - a) * b), work(a, e));
            at += (e - a) * b;
        }
    };
    // Working block j is my block for me + j.
    let mut rotate = Vec::new();
    copy(&mut rotate, src.at(m * b, (n - m) * b), work(0, n - m));
    copy(&mut rotate, src.at(0, m * b), work(n - m, n));
    let mut rounds = Vec::new();
    let mut dist = 1;
    let mut k = 0;
    while dist < n {
        let mut r = Round {
            pre: std::mem::take(&mut rotate),
            ..Round::default()
        };
        if dist > 1 {
            unpack(&mut r.pre, dist / 2);
        }
        let mut at = out_at;
        for (a, e) in runs(n, dist) {
            copy(
                &mut r.pre,
                work(a, e),
                Range::new(Buf::Tmp, at, (e - a) * b),
            );
            at += (e - a) * b;
        }
        let len = at - out_at;
        #[allow(clippy::cast_possible_truncation)] // below np
        let (to, from) = (((m + dist) % n) as u32, ((m + n - dist) % n) as u32);
        send(&mut r.sends, to, k, Range::new(Buf::Tmp, out_at, len));
        recv(&mut r.recvs, from, k, Range::new(Buf::Tmp, in_at, len));
        rounds.push(r);
        dist <<= 1;
        k += 1;
    }
    let mut post = Vec::new();
    unpack(&mut post, dist / 2);
    // Working block j came from me − j: it is destination block me − j.
    for i in 0..n {
        let j = (m + n - i) % n;
        copy(&mut post, work(j, j + 1), dst(i));
    }
    finish(rounds, post, in_at + most * b)
}

#[cfg(test)]
mod tests {
    use crate::algs::data::oracle::{check, spec, v_counts, SIZES};
    use crate::plan::Kind;

    fn log2_ceil(n: usize) -> usize {
        (usize::BITS - n.saturating_sub(1).leading_zeros()) as usize
    }

    #[test]
    fn pairwise_exchanges_every_block() {
        for np in 1..=17usize {
            for (i, &n) in SIZES.iter().enumerate() {
                for in_place in [false, true] {
                    let s = spec(Kind::Exchange, np, 0, vec![n; np * np]);
                    let sent = check(&s, "pairwise", in_place, (np * 3 + i) as u64);
                    assert_eq!(sent, np * (np - 1), "np {np} n {n}");
                }
                // A v matrix: in place only where a row fits in its column (the oracle checks).
                let v = v_counts(np * np, n, (np * 19 + i) as u64);
                for in_place in [false, true] {
                    check(
                        &spec(Kind::Exchange, np, 0, v.clone()),
                        "pairwise",
                        in_place,
                        5,
                    );
                }
            }
        }
    }

    #[test]
    fn bruck_exchanges_every_block() {
        for np in 1..=17usize {
            for (i, &n) in SIZES.iter().enumerate() {
                for in_place in [false, true] {
                    let s = spec(Kind::Exchange, np, 0, vec![n; np * np]);
                    let sent = check(&s, "bruck", in_place, (np * 11 + i) as u64);
                    assert_eq!(sent, np * log2_ceil(np), "np {np} n {n}");
                }
            }
            let n32 = u32::try_from(np).unwrap();
            let rounds = (0..n32)
                .map(|me| super::bruck(n32, me, 8, super::Source::OWN).rounds.len())
                .max();
            assert_eq!(rounds, Some(log2_ceil(np).max(1)), "np {np}");
        }
    }
}
