//! Broadcast of large payloads, split into pieces:
//!
//! - scatter-allgather (van de Geijn): the payload is cut into np pieces (piece v, of rank v
//!   relative to the root, is bytes `v·n/np..(v+1)·n/np`); a binomial scatter gives every rank
//!   its subtree's pieces, then an allgather of the pieces completes every copy: recursive
//!   doubling when np is a power of two, else a ring. The root holds every piece and receives
//!   nothing. With n ≥ np (no empty piece): np(np − 1) messages with the ring,
//!   (np − 1)(log₂ np + 1) with recursive doubling.
//! - pipeline: a chain from the root (relative rank v sends to v + 1) in chunks of `chunk`
//!   bytes (the parameter `chunk`, default 64 KiB); a rank forwards chunk j while it receives
//!   chunk j + 1. (np − 1)·⌈n / chunk⌉ messages.

use crate::sched::{Buf, Range, Round, Sched};

use super::allgather::{rd_phase, recv, ring_phase, Blocks};
use super::data::{binomial, copy, finish, send, subtree_end};
use super::{absolute, relative};

/// The pipeline's default chunk in bytes.
pub(crate) const CHUNK: usize = 64 << 10;

/// The root's first round: its source copied to its destination (unless in place).
fn root_copy(n: usize, in_place: bool) -> Round {
    let mut r = Round::default();
    if !in_place {
        copy(
            &mut r.pre,
            Range::new(Buf::Src, 0, n),
            Range::new(Buf::Dst, 0, n),
        );
    }
    r
}

/// Scatter-allgather broadcast of `n` bytes from `root` for team rank `me` of `np`;
/// `in_place` when the root's source is its destination.
pub(crate) fn scatter_allgather(np: u32, me: u32, root: u32, n: usize, in_place: bool) -> Sched {
    let v = relative(me, root, np);
    let offs: Vec<usize> = (0..=u64::from(np))
        .map(|i| {
            let o = u128::from(i) * n as u128 / u128::from(np);
            usize::try_from(o).unwrap_or(n)
        })
        .collect();
    let rank = move |i: u32| absolute(i, root, np);
    let b = Blocks {
        offs: &offs,
        rank: &rank,
        full0: true,
    };
    let run = |a: u32, e: u32| {
        Range::new(
            Buf::Dst,
            offs[a as usize],
            offs[e as usize] - offs[a as usize],
        )
    };
    let (parent, children) = binomial(v, np);
    let mut rounds = Vec::new();
    match parent {
        None => rounds.push(root_copy(n, in_place)),
        Some(p) => {
            let mut r = Round::default();
            recv(&mut r.recvs, rank(p), 0, run(v, subtree_end(v, np)));
            rounds.push(r);
        }
    }
    let mut down = Round::default();
    for &(c, e) in &children {
        send(&mut down.sends, rank(c), 0, run(c, e));
    }
    rounds.push(down);
    if np.is_power_of_two() {
        rounds.extend(rd_phase(np, v, &b, 1));
    } else {
        rounds.extend(ring_phase(np, v, &b, 1));
    }
    finish(rounds, Vec::new(), 0)
}

/// Pipelined chain broadcast of `n` bytes from `root` in chunks of `chunk` bytes (at least 1).
pub(crate) fn pipeline(
    np: u32,
    me: u32,
    root: u32,
    n: usize,
    in_place: bool,
    chunk: usize,
) -> Sched {
    let v = relative(me, root, np);
    let chunk = chunk.max(1);
    let nch = n.div_ceil(chunk);
    let piece = |j: usize| {
        let a = j * chunk;
        Range::new(Buf::Dst, a, chunk.min(n - a))
    };
    let tag = |j: usize| u32::try_from(j).unwrap_or(u32::MAX);
    let next = absolute(v + 1, root, np);
    let mut rounds = Vec::new();
    if v == 0 {
        let mut r = root_copy(n, in_place);
        if np > 1 {
            for j in 0..nch {
                send(&mut r.sends, next, tag(j), piece(j));
            }
        }
        rounds.push(r);
    } else {
        let prev = absolute(v - 1, root, np);
        // Round j forwards chunk j − 1 and receives chunk j.
        for j in 0..=nch {
            let mut r = Round::default();
            if j > 0 && v + 1 < np {
                send(&mut r.sends, next, tag(j - 1), piece(j - 1));
            }
            if j < nch {
                recv(&mut r.recvs, prev, tag(j), piece(j));
            }
            rounds.push(r);
        }
    }
    finish(rounds, Vec::new(), 0)
}

#[cfg(test)]
mod tests {
    use crate::algs::data::oracle::{check, spec};
    use crate::plan::Kind;

    const SIZES: [usize; 7] = [1, 2, 3, 7, 16, 101, 1000];

    fn roots(np: usize) -> [usize; 3] {
        [0, np / 2, np - 1]
    }

    #[test]
    fn scatter_allgather_reaches_every_rank() {
        for np in 1..=17usize {
            for root in roots(np) {
                for (i, &n) in SIZES.iter().enumerate() {
                    for in_place in [false, true] {
                        let s = spec(Kind::Broadcast, np, root, vec![n]);
                        let sent = check(&s, "scatter_allgather", in_place, (np * 7 + i) as u64);
                        if n >= np {
                            let want = if np.is_power_of_two() {
                                (np - 1) * (np.trailing_zeros() as usize + 1)
                            } else {
                                np * (np - 1)
                            };
                            assert_eq!(sent, want, "np {np} root {root} n {n}");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn pipeline_reaches_every_rank() {
        for np in 1..=17usize {
            for root in roots(np) {
                for (i, &n) in SIZES.iter().enumerate() {
                    for chunk in [1usize, 3, 64, 1 << 16] {
                        if chunk == 1 && n > 101 {
                            continue;
                        }
                        let mut s = spec(Kind::Broadcast, np, root, vec![n]);
                        s.params = vec![("chunk".to_string(), chunk as u64)];
                        let sent = check(&s, "pipeline", chunk == 3, (np * 5 + i) as u64);
                        assert_eq!(
                            sent,
                            (np - 1) * n.div_ceil(chunk),
                            "np {np} n {n} chunk {chunk}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn pipeline_chunk_defaults_to_64k_and_zero_means_one_byte() {
        let mut s = spec(Kind::Broadcast, 3, 1, vec![(64 << 10) + 1]);
        assert_eq!(check(&s, "pipeline", false, 1), 2 * 2);
        s.counts = vec![5];
        s.params = vec![("chunk".to_string(), 0)];
        assert_eq!(check(&s, "pipeline", false, 1), 2 * 5);
    }
}
