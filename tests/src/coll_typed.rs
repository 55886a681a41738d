//! The typed collectives (`amnet::coll::Comm`): every operation on the world team and on a
//! split team, built-in and closure reductions, sync modes as values, the usage errors,
//! non-blocking calls in a scope, and (as nested jobs) a failed wait that must leave the lent
//! buffers alone and the representative-thread rule with several images per rank.

use std::time::{Duration, Instant};

use amnet::coll::{scope, Comm, InSync, Op, OutSync, Plain, RedOp, SyncMode};
use amnet::{Endpoint, Error};

use crate::coll::coll;
use crate::{ck, ensure, Ctx, Test, Verdict};

/// The suite's typed-API tests.
pub fn tests() -> Vec<Test> {
    let t = |name, run, secs: u64| Test {
        name,
        min_ranks: 1,
        process_only: false,
        timeout: Duration::from_secs(secs),
        only_conduit: None,
        run,
    };
    vec![
        t("coll_typed_world", world, 60),
        t("coll_typed_split_team", split_team, 60),
        t("coll_typed_closures", closures_world, 60),
        t("coll_typed_usage", usage, 30),
        t("coll_typed_scope", nonblocking, 60),
    ]
}

/// A 3-vector without padding: a client type with no built-in reduction.
#[derive(Clone, Copy, Debug, PartialEq)]
#[repr(C)]
struct V3 {
    x: f64,
    y: f64,
    z: f64,
}

// SAFETY: repr(C) with three f64 fields: 24 bytes, no padding, no pointers, and every bit
// pattern is a valid V3.
unsafe impl Plain for V3 {}

/// An affine map `x -> m·x + c` (wrapping), as `[m, c]`: composition is associative and not
/// commutative, so a reduction with it shows the order of its operands.
pub(crate) type Affine = [u64; 2];

/// `a` then `b`.
pub(crate) fn compose(a: &Affine, b: &Affine) -> Affine {
    [
        b[0].wrapping_mul(a[0]),
        b[0].wrapping_mul(a[1]).wrapping_add(b[1]),
    ]
}

/// Participant `p`'s map for element `j`.
pub(crate) fn affine(p: u64, j: u64) -> Affine {
    [p + 2 + j, 3 * p + j + 1]
}

/// The maps of participants `from..to` for element `j`, composed in participant order.
pub(crate) fn affine_fold(from: u64, to: u64, j: u64) -> Affine {
    (from + 1..to).fold(affine(from, j), |acc, p| compose(&acc, &affine(p, j)))
}

fn world(c: &Ctx<'_>) -> Verdict {
    let co = coll(c)?;
    let comm = co.team(co.world());
    ensure(
        comm.rank() == c.rank() && comm.size() == c.size() && !comm.is_images(),
        || format!("world view: rank {} of {}", comm.rank(), comm.size()),
    )?;
    exercise(&comm, "world")?;
    // With one image per rank the images view is the ranks view.
    let images = co.team_images(co.world());
    ensure(
        images.rank() == c.rank() && images.size() == c.size(),
        || format!("images view: rank {} of {}", images.rank(), images.size()),
    )?;
    let mut total = [0u64];
    ck(
        "reduce_to_all on the images view",
        images.reduce_to_all(&[u64::from(images.rank()) + 1], &mut total, Op::sum()),
    )?;
    let n = u64::from(images.size());
    ensure(total[0] == n * (n + 1) / 2, || {
        format!("images view sum {}", total[0])
    })
}

/// Parity teams with the rank order reversed: every operation, and the closures.
fn split_team(c: &Ctx<'_>) -> Verdict {
    let co = coll(c)?;
    let world = co.team(co.world());
    let me = c.rank();
    let key = -i32::try_from(me).unwrap_or(0);
    let half = ck("split", world.split(Some(me % 2), key))?.ok_or("no parity team")?;
    let mine: Vec<u32> = (0..c.size()).filter(|r| r % 2 == me % 2).rev().collect();
    ensure(half.team().members() == mine.as_slice(), || {
        format!("parity team {:?}, expected {mine:?}", half.team().members())
    })?;
    exercise(&half, "parity team")?;
    closures(&half, "parity team")?;
    // The world still works after the team's calls, and the team can go.
    let mut x = [u64::from(me)];
    ck("world broadcast", world.broadcast(&mut x, 0))?;
    ensure(x[0] == 0, || format!("world broadcast gave {}", x[0]))?;
    ck("destroy", half.destroy())
}

fn closures_world(c: &Ctx<'_>) -> Verdict {
    let co = coll(c)?;
    closures(&co.team(co.world()), "world")
}

/// Every operation with built-in reductions and several sync modes on `comm`.
fn exercise(comm: &Comm, on: &str) -> Verdict {
    let r = u64::from(comm.rank());
    let n = u64::from(comm.size());
    let np = comm.size() as usize;
    let e = |what: &str, x: Error| format!("{on}: {what}: {x}");

    // broadcast from the first and the last participant, u64 and f64, two sync modes.
    for root in [0, comm.size() - 1] {
        let mut buf = [0u64; 5];
        if comm.rank() == root {
            buf = std::array::from_fn(|i| u64::from(root) * 100 + i as u64);
        }
        comm.broadcast(&mut buf, root)
            .map_err(|x| e("broadcast", x))?;
        let want: [u64; 5] = std::array::from_fn(|i| u64::from(root) * 100 + i as u64);
        ensure(buf == want, || {
            format!("{on}: broadcast from {root} gave {buf:?}")
        })?;
        let mut f = [if comm.rank() == root { 2.5f64 } else { 0.0 }; 3];
        comm.with_sync(SyncMode::all())
            .broadcast(&mut f, root)
            .map_err(|x| e("broadcast ALLSYNC", x))?;
        ensure(f == [2.5; 3], || format!("{on}: f64 broadcast gave {f:?}"))?;
    }

    // reduce_to_all: sums, maxima, minima, and in place.
    let mut s = [0u64; 3];
    comm.reduce_to_all(&[r + 1, 2 * r, 1], &mut s, Op::sum())
        .map_err(|x| e("reduce_to_all sum", x))?;
    ensure(s == [n * (n + 1) / 2, n * (n - 1), n], || {
        format!("{on}: reduce_to_all sum gave {s:?}")
    })?;
    #[allow(clippy::cast_possible_wrap, clippy::cast_possible_truncation)]
    let ri = r as i32;
    let mut m = [0i32; 2];
    comm.with_sync(SyncMode::no())
        .reduce_to_all(&[-ri, ri], &mut m, RedOp::Max)
        .map_err(|x| e("reduce_to_all max", x))?;
    #[allow(clippy::cast_possible_wrap, clippy::cast_possible_truncation)]
    let top = (n - 1) as i32;
    ensure(m == [0, top], || {
        format!("{on}: reduce_to_all max gave {m:?}")
    })?;
    #[allow(clippy::cast_precision_loss)]
    let mut v = [r as f64 * 0.5 - 1.0];
    comm.with_sync(SyncMode::new(InSync::All, OutSync::My))
        .reduce_to_all_in_place(&mut v, Op::min())
        .map_err(|x| e("reduce_to_all_in_place min", x))?;
    ensure(v == [-1.0], || format!("{on}: in-place min gave {v:?}"))?;

    // reduce to the last participant.
    let root = comm.size() - 1;
    let mut out = [0u64; 2];
    let is_root = comm.rank() == root;
    comm.reduce(&[r, 1], is_root.then_some(&mut out[..]), Op::sum(), root)
        .map_err(|x| e("reduce", x))?;
    if is_root {
        ensure(out == [n * (n - 1) / 2, n], || {
            format!("{on}: reduce gave {out:?}")
        })?;
    }
    let mut buf = [r + 10];
    comm.reduce_in_place(&mut buf, RedOp::Max, 0)
        .map_err(|x| e("reduce_in_place", x))?;
    let want = if comm.rank() == 0 { n + 9 } else { r + 10 };
    ensure(buf[0] == want, || {
        format!("{on}: reduce_in_place gave {}", buf[0])
    })?;

    // gather_all, in place and not; gather; scatter.
    let me32 = comm.rank();
    let mut all = vec![0u32; 2 * np];
    comm.gather_all(&[me32, me32 * me32], &mut all)
        .map_err(|x| e("gather_all", x))?;
    let want: Vec<u32> = (0..comm.size()).flat_map(|i| [i, i * i]).collect();
    ensure(all == want, || format!("{on}: gather_all gave {all:?}"))?;
    // In place: participant i's block is block i of its own buffer.
    let mut all = vec![u32::MAX; np];
    all[comm.rank() as usize] = me32 + 7;
    comm.gather_all_in_place(&mut all)
        .map_err(|x| e("gather_all_in_place", x))?;
    let want: Vec<u32> = (0..comm.size()).map(|i| i + 7).collect();
    ensure(all == want, || {
        format!("{on}: gather_all_in_place gave {all:?}")
    })?;
    let mut got = vec![0u64; np];
    let root0 = comm.rank() == 0;
    comm.gather(&[r * 3], root0.then_some(&mut got[..]), 0)
        .map_err(|x| e("gather", x))?;
    if root0 {
        let want: Vec<u64> = (0..n).map(|i| i * 3).collect();
        ensure(got == want, || format!("{on}: gather gave {got:?}"))?;
    }
    let src: Vec<i64> = (0..2 * np as i64).map(|i| i * 11).collect();
    let mut part = [0i64; 2];
    comm.scatter(root0.then_some(&src[..]), &mut part, 0)
        .map_err(|x| e("scatter", x))?;
    #[allow(clippy::cast_possible_wrap)]
    let ri64 = r as i64;
    ensure(part == [22 * ri64, 22 * ri64 + 11], || {
        format!("{on}: scatter gave {part:?}")
    })?;

    // exchange: block j of participant i (2 elements) goes to block i of participant j.
    let send: Vec<u64> = (0..n).flat_map(|j| [r * 1000 + j, r]).collect();
    let mut recv = vec![0u64; send.len()];
    comm.exchange(&send, &mut recv)
        .map_err(|x| e("exchange", x))?;
    let want: Vec<u64> = (0..n).flat_map(|i| [i * 1000 + r, i]).collect();
    ensure(recv == want, || format!("{on}: exchange gave {recv:?}"))?;

    // scans with a built-in.
    let mut sc = [0u64; 2];
    comm.scan(&[r + 1, 1], &mut sc, Op::sum())
        .map_err(|x| e("scan", x))?;
    ensure(sc == [(r + 1) * (r + 2) / 2, r + 1], || {
        format!("{on}: scan gave {sc:?}")
    })?;
    let mut ex = [u64::MAX];
    comm.exclusive_scan(&[r + 1], &mut ex, Op::sum())
        .map_err(|x| e("exclusive_scan", x))?;
    let want = if r == 0 { u64::MAX } else { r * (r + 1) / 2 };
    ensure(ex[0] == want, || {
        format!("{on}: exclusive_scan gave {}", ex[0])
    })
}

/// Closures as reductions: a non-commutative one (participant order), commutative ones on
/// types without built-ins.
fn closures(comm: &Comm, on: &str) -> Verdict {
    let r = u64::from(comm.rank());
    let n = u64::from(comm.size());
    let e = |what: &str, x: Error| format!("{on}: {what}: {x}");
    let comp = Op::custom(compose);
    ensure(!comp.is_commutative(), || {
        "Op::custom is commutative".into()
    })?;
    let mine: Vec<Affine> = (0..3).map(|j| affine(r, j)).collect();

    let mut all = vec![[0u64; 2]; 3];
    comm.reduce_to_all(&mine, &mut all, &comp)
        .map_err(|x| e("reduce_to_all with a closure", x))?;
    let want: Vec<Affine> = (0..3).map(|j| affine_fold(0, n, j)).collect();
    ensure(all == want, || {
        format!("{on}: non-commutative reduce_to_all gave {all:?}, want {want:?}")
    })?;

    let root = comm.size() / 2;
    let mut at_root = vec![[0u64; 2]; 3];
    let is_root = comm.rank() == root;
    comm.with_sync(SyncMode::all())
        .reduce(&mine, is_root.then_some(&mut at_root[..]), &comp, root)
        .map_err(|x| e("reduce with a closure", x))?;
    if is_root {
        ensure(at_root == want, || {
            format!("{on}: non-commutative reduce gave {at_root:?}")
        })?;
    }

    let mut sc = vec![[0u64; 2]; 3];
    comm.scan(&mine, &mut sc, &comp)
        .map_err(|x| e("scan with a closure", x))?;
    let want: Vec<Affine> = (0..3).map(|j| affine_fold(0, r + 1, j)).collect();
    ensure(sc == want, || format!("{on}: scan gave {sc:?}"))?;
    let mut ex = mine.clone();
    comm.exclusive_scan_in_place(&mut ex, &comp)
        .map_err(|x| e("exclusive_scan_in_place with a closure", x))?;
    let want: Vec<Affine> = if r == 0 {
        mine.clone()
    } else {
        (0..3).map(|j| affine_fold(0, r, j)).collect()
    };
    ensure(ex == want, || format!("{on}: exclusive scan gave {ex:?}"))?;

    // Commutative closures on types the built-ins do not cover.
    #[allow(clippy::cast_possible_truncation)]
    let small = [r as u16 + 1, 40_000];
    let mut s16 = [0u16; 2];
    comm.reduce_to_all(
        &small,
        &mut s16,
        Op::commutative(|a: &u16, b: &u16| a.wrapping_add(*b)),
    )
    .map_err(|x| e("reduce_to_all u16", x))?;
    #[allow(clippy::cast_possible_truncation)]
    let want = [(n * (n + 1) / 2) as u16, (40_000u64 * n % 65_536) as u16];
    ensure(s16 == want, || {
        format!("{on}: u16 sums {s16:?}, want {want:?}")
    })?;
    #[allow(clippy::cast_precision_loss)]
    let rf = r as f64;
    let mut v = [V3 {
        x: rf,
        y: -rf,
        z: 1.0,
    }];
    let vmax = Op::commutative(|a: &V3, b: &V3| V3 {
        x: a.x.max(b.x),
        y: a.y.max(b.y),
        z: a.z + b.z,
    });
    comm.reduce_to_all_in_place(&mut v, vmax)
        .map_err(|x| e("reduce_to_all V3", x))?;
    #[allow(clippy::cast_precision_loss)]
    let want = V3 {
        x: (n - 1) as f64,
        y: 0.0,
        z: n as f64,
    };
    ensure(v[0] == want, || {
        format!("{on}: V3 reduction gave {:?}", v[0])
    })
}

/// Usage errors, raised on the calling participant before anything is sent (so every rank
/// gets the same without communicating).
fn usage(c: &Ctx<'_>) -> Verdict {
    let co = coll(c)?;
    let comm = co.team(co.world());
    let n = comm.size() as usize;
    let is_usage = |what: &str, r: amnet::Result<()>, text: &str| -> Verdict {
        match r {
            Err(Error::Usage { detail, .. }) if detail.contains(text) => Ok(()),
            other => Err(format!(
                "{what}: expected a usage error about {text:?}, got {other:?}"
            )),
        }
    };
    is_usage(
        "a built-in without an entry for u8",
        comm.reduce_to_all(&[1u8], &mut [0u8], Op::sum()),
        "has no entry for elements of type u8",
    )?;
    is_usage(
        "recv shorter than send",
        comm.reduce_to_all(&[1u64; 3], &mut [0u64; 2], Op::sum()),
        "recv has 2 elements",
    )?;
    is_usage(
        "a root that is not a participant",
        comm.broadcast(&mut [0u32; 2], comm.size()),
        "is not a participant",
    )?;
    is_usage(
        "gather_all with a short recv",
        comm.gather_all(&[1u32], &mut vec![0u32; n + 1]),
        "recv has",
    )?;
    is_usage(
        "an empty buffer",
        comm.broadcast::<u64>(&mut [], 0),
        "holds no bytes",
    )?;
    let mut buf = [0u64; 2];
    is_usage(
        "the root without a destination",
        comm.reduce(&[1u64; 2], None, Op::sum(), comm.rank()),
        "the root passes recv = None",
    )?;
    // Team creation is a call of the ranks view.
    match co.team_images(co.world()).split(Some(0), 0) {
        Err(Error::Usage { .. }) => {}
        other => return Err(format!("split on an images view: {other:?}")),
    }
    // Still in step: a real call works afterwards.
    ck("broadcast after the errors", comm.broadcast(&mut buf, 0))
}

/// Non-blocking calls in a scope: several in flight at once, one tested to completion, one
/// waited for, one left to the end of the scope; a scope that ends with an error still
/// finishes what it started.
fn nonblocking(c: &Ctx<'_>) -> Verdict {
    let co = coll(c)?;
    let comm = co.team(co.world());
    let r = u64::from(comm.rank());
    let n = u64::from(comm.size());
    let np = comm.size() as usize;
    let mut a = [0u64; 4];
    if r == 0 {
        a = [5, 6, 7, 8];
    }
    let mine = [r + 1; 3];
    let mut b = [0u64; 3];
    let me32 = [comm.rank()];
    let mut g = vec![0u32; np];
    let one = [r + 1];
    let mut sc = [0u64; 1];
    let send: Vec<u64> = (0..n).map(|j| r * 100 + j).collect();
    let mut recv = vec![0u64; np];
    let comp = Op::custom(compose);
    let aff = [affine(r, 0)];
    let mut folded = [[0u64; 2]];
    let polls = ck(
        "scope",
        scope(|s| {
            let r1 = comm.broadcast_nb(s, &mut a, 0)?;
            let r2 = comm.reduce_to_all_nb(s, &mine, &mut b, Op::sum())?;
            let r3 = comm.gather_all_nb(s, &me32, &mut g)?;
            // Left to the scope: it is waited for when the closure returns.
            let _r4 = comm.scan_nb(s, &one, &mut sc, Op::sum())?;
            let r5 = comm.exchange_nb(s, &send, &mut recv)?;
            let r6 =
                comm.with_sync(SyncMode::all())
                    .reduce_to_all_nb(s, &aff, &mut folded, &comp)?;
            let mut polls = 0u64;
            let mut pending = Some(r2);
            while let Some(q) = pending {
                pending = q.test()?;
                polls += 1;
            }
            r5.wait()?;
            r1.wait()?;
            r6.wait()?;
            r3.wait()?;
            Ok(polls)
        }),
    )?;
    ensure(polls >= 1, || "no test call".into())?;
    ensure(a == [5, 6, 7, 8], || format!("broadcast_nb gave {a:?}"))?;
    ensure(b == [n * (n + 1) / 2; 3], || {
        format!("reduce_to_all_nb gave {b:?}")
    })?;
    let want: Vec<u32> = (0..comm.size()).collect();
    ensure(g == want, || format!("gather_all_nb gave {g:?}"))?;
    ensure(sc[0] == (r + 1) * (r + 2) / 2, || {
        format!("scan_nb left to the scope gave {}", sc[0])
    })?;
    let want: Vec<u64> = (0..n).map(|i| i * 100 + r).collect();
    ensure(recv == want, || format!("exchange_nb gave {recv:?}"))?;
    ensure(folded[0] == affine_fold(0, n, 0), || {
        format!("reduce_to_all_nb with a closure gave {:?}", folded[0])
    })?;

    // A scope whose closure fails after starting a call: the call is still finished, and the
    // closure's error is the scope's.
    let mut x = [0u64; 2];
    if r == 0 {
        x = [41, 42];
    }
    let res = scope(|s| {
        let _pending = comm.broadcast_nb(s, &mut x, 0)?;
        // Refused locally on every rank (u8 has no built-in Sum), with nothing sent.
        comm.reduce_to_all(&[1u8], &mut [0u8], Op::sum())?;
        Ok(())
    });
    ensure(matches!(res, Err(Error::Usage { .. })), || {
        format!("a scope ending in an error gave {res:?}")
    })?;
    ensure(x == [41, 42], || {
        format!("the broadcast left to a failing scope gave {x:?}")
    })
}

/// Nested job (2 ranks, `AMNET_HANG_TIMEOUT=1`): a typed wait that fails leaves the lent
/// buffer alone. Rank 1 enters two broadcasts (root 1) and an in-place reduce_to_all only
/// after rank 0's waits for them reported `Hang`; the data then arrives at rank 0, and must
/// land in library memory, not in the buffer rank 0 lent (here kept alive and watched; in a
/// program, possibly a stack frame that is gone), while rank 1 still gets rank 0's operands.
/// Once nothing is in flight, both ranks check a normal call.
pub fn failed_wait_detaches(ep: &Endpoint) -> Result<(), String> {
    let co = crate::coll_images::attach_coll(ep)?;
    let comm = co.team(co.world());
    let me = ep.rank();
    let fill = 0xAAAA_AAAA_AAAA_AAAAu64;
    for round in 0..3u32 {
        if me == 1 {
            // Enter late: after rank 0's wait gave up (1 s).
            std::thread::sleep(Duration::from_millis(2500));
            if round < 2 {
                // The same form as rank 0's (blocking and non-blocking calls do not match).
                let mut data = [u64::from(round) + 7; 4];
                let r = if round == 0 {
                    scope(|s| comm.broadcast_nb(s, &mut data, 1)?.wait())
                } else {
                    comm.broadcast(&mut data, 1)
                };
                r.map_err(|e| format!("round {round}: the late root's broadcast: {e}"))?;
            } else {
                // Rank 0's operands still count: they left before its wait failed.
                let mut out = [0u64; 4];
                comm.reduce_to_all(&[2u64; 4], &mut out, Op::sum())
                    .map_err(|e| format!("round {round}: the late reduce_to_all: {e}"))?;
                if out != [3; 4] {
                    return Err(format!(
                        "round {round}: the late reduce_to_all gave {out:?}"
                    ));
                }
            }
            continue;
        }
        // Rounds 0 and 1: a broadcast's destination (scope and blocking form); round 2: an
        // in-place reduction's operand and result.
        let start = if round < 2 { fill } else { 1 };
        let mut buf = [start; 4];
        let t0 = Instant::now();
        let r = match round {
            0 => scope(|s| comm.broadcast_nb(s, &mut buf, 1)?.wait()),
            1 => comm.broadcast(&mut buf, 1),
            _ => comm.reduce_to_all_in_place(&mut buf, Op::sum()),
        };
        if !matches!(r, Err(Error::Hang { .. })) {
            return Err(format!(
                "round {round}: a call whose peer is late gave {r:?}"
            ));
        }
        // The collective is still in flight; its data comes once rank 1 enters.
        let done = |co: &amnet::coll::Coll| co.in_flight_report().contains("no collectives");
        while !done(&co) {
            co.poll().map_err(|e| format!("round {round}: poll: {e}"))?;
            if t0.elapsed() > Duration::from_secs(15) {
                return Err(format!(
                    "round {round}: the detached call never finished: {}",
                    co.in_flight_report()
                ));
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        if buf != [start; 4] {
            return Err(format!(
                "round {round}: data arrived in the buffer after its wait failed: {buf:x?}"
            ));
        }
    }
    // Everything is synced: barriers and calls work again.
    ep.barrier().map_err(|e| format!("barrier: {e}"))?;
    let mut x = [u64::from(me)];
    comm.broadcast(&mut x, 1)
        .map_err(|e| format!("a broadcast after the detached ones: {e}"))?;
    if x != [1] {
        return Err(format!("a broadcast after the detached ones gave {x:?}"));
    }
    ep.barrier().map_err(|e| format!("final barrier: {e}"))
}
