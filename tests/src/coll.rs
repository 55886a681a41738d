//! The collectives tests of the suite: property tests against the oracle, sync-mode tests
//! that fail when a mode is violated, the usage rules, many collectives outstanding, and
//! (as nested jobs) multi-image property tests, checked mode and the hang watchdog.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use amnet::coll::raw::Collectives;
use amnet::coll::{Addr, Coll, CollHandle, RedOp};
use amnet::sync_modes::flags as f;
use amnet::{Error, Token};

use crate::coll_prop::{fn_table, pattern, run_units, Caller, Form, World};
use crate::state::{lock, H_COLL_RULES};
use crate::{ck, ensure, Ctx, State, Test, Verdict};

/// The suite's collective tests.
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
        t("coll_property_single", prop_single, 120),
        t("coll_property_multi_all_threads", prop_multi, 120),
        t("coll_small_repeats", small_repeats, 60),
        t("coll_typed", typed, 30),
        t("coll_in_allsync", in_allsync, 30),
        t("coll_out_allsync", out_allsync, 30),
        t("coll_out_nosync", out_nosync, 30),
        t("coll_allsync_blocks", allsync_blocks, 60),
        t("coll_aggregate_merges_sync", aggregate_messages, 30),
        t("coll_direct_puts", direct_puts, 60),
        t("coll_direct_puts_large", direct_puts_large, 120),
        t("coll_early_data_bound", early_data_bound, 60),
        t("coll_barrier_schemes", barrier_schemes, 60),
        t("coll_rules", rules, 30),
        t("coll_rule_in_handler", rule_in_handler, 30),
        t("coll_in_place_scatter", in_place_scatter, 30),
        t(
            "coll_reductions_in_rank_order",
            reductions_in_rank_order,
            60,
        ),
        t("coll_vector_reductions", vector_reductions, 120),
        Test {
            min_ranks: 3,
            ..t("coll_progress_in_core_waits", progress_in_core_waits, 60)
        },
        Test {
            min_ranks: 2,
            ..t("coll_amsafe_in_core_waits", amsafe_in_core_waits, 60)
        },
        t("coll_team_structure", crate::coll_teams::structure, 60),
        t("coll_team_property", crate::coll_teams::property, 180),
        t(
            "coll_team_concurrent_threads",
            crate::coll_teams::concurrent,
            60,
        ),
        t("coll_team_areas", crate::coll_teams::areas, 120),
        // A measurement of a real job (it takes minutes in thread mode with a debug build).
        Test {
            process_only: true,
            ..t("coll_65535_outstanding", outstanding, 300)
        },
        Test {
            process_only: true,
            ..t("coll_images", crate::coll_images::from_suite, 180)
        },
    ]
}

/// This rank's Coll (initialized, collectively, on first use).
pub fn coll<'a>(c: &'a Ctx<'_>) -> Result<&'a Coll, String> {
    if c.st.coll.get().is_none() {
        let x = ck("Coll::init", Coll::init(c.ep, None, 0, &fn_table()))?;
        let _ = c.st.coll.set(x);
    }
    c.st.coll.get().ok_or_else(|| "no Coll".to_string())
}

fn world(c: &Ctx<'_>) -> World {
    World::new(vec![1; c.size() as usize])
}

fn prop_single(c: &Ctx<'_>) -> Verdict {
    prop(c, 0xC011, 260, &[Form::Single])
}

fn prop_multi(c: &Ctx<'_>) -> Verdict {
    prop(
        c,
        0xA11,
        160,
        &[Form::Single, Form::Multi, Form::AllThreads],
    )
}

/// `n` random calls of the call shapes `forms` (one image per rank) against the oracle;
/// the seed is `base` plus the job size unless `AMNET_TEST_SEED` is set.
fn prop(c: &Ctx<'_>, base: u64, n: usize, forms: &[Form]) -> Verdict {
    world_units(c, base, |seed, w| {
        crate::coll_prop::gen_units(seed, w, n, forms)
    })
}

/// The units `gen(seed, world)` makes on the world team, against the oracle; the seed is
/// `base` plus the job size unless `AMNET_TEST_SEED` is set.
fn world_units(
    c: &Ctx<'_>,
    base: u64,
    gen: impl FnOnce(u64, &World) -> Vec<crate::coll_prop::Unit>,
) -> Verdict {
    let co = coll(c)?;
    let w = world(c);
    let seed = crate::coll_prop::seed(base + u64::from(c.size()));
    let units = gen(seed, &w);
    run_units(
        &Caller {
            ep: c.ep,
            coll: co,
            team: co.world(),
            w: &w,
            seed,
        },
        &units,
    )
}

/// Small blocking calls, each made three times with fresh data, against the oracle
/// (`coll_prop::gen_small_repeats`).
fn small_repeats(c: &Ctx<'_>) -> Verdict {
    world_units(c, 0x5AA1, |seed, w| {
        crate::coll_prop::gen_small_repeats(seed, w, 300)
    })
}

fn typed(c: &Ctx<'_>) -> Verdict {
    let co = coll(c)?;
    let me = u64::from(c.rank());
    let p = u64::from(c.size());
    let s = ck(
        "reduce_to_all_typed",
        co.reduce_to_all_typed(RedOp::Sum, me + 1, f::ALLSYNC),
    )?;
    ensure(s == p * (p + 1) / 2, || format!("sum {s}"))?;
    let x = ck(
        "prefix_reduce_typed",
        co.prefix_reduce_typed(RedOp::Sum, me + 1, false, f::MYSYNC),
    )?;
    ensure(x == (me + 1) * (me + 2) / 2, || format!("prefix {x}"))?;
    let x = ck(
        "exclusive prefix",
        co.prefix_reduce_typed(RedOp::Max, me + 1, true, f::NOSYNC),
    )?;
    ensure(x == me.max(1), || format!("exclusive prefix max {x}"))?;
    let r = ck(
        "reduce_typed",
        co.reduce_typed(c.size() - 1, RedOp::Min, me + 5, f::ALLSYNC),
    )?;
    ensure(r == (me == p - 1).then_some(5), || format!("reduce {r:?}"))?;
    #[allow(clippy::cast_possible_wrap)]
    let v = (me % 3) as i32;
    let l = ck(
        "reduce_to_all_loc",
        co.reduce_to_all_loc(RedOp::MinLoc, v, me, f::ALLSYNC),
    )?;
    ensure(l.value == 0 && l.loc == 0, || format!("minloc {l:?}"))
}

/// In-place scatter: the root passes `InPlace` as its destination, so its own block stays in
/// its source; every other participant gets its block, and the root's source is untouched.
fn in_place_scatter(c: &Ctx<'_>) -> Verdict {
    let co = coll(c)?;
    let (me, p) = (c.rank() as usize, c.size() as usize);
    for root in 0..p {
        for v in [false, true] {
            let counts: Vec<usize> = if v {
                (0..p).map(|q| 1 + 37 * ((q + root) % 3)).collect()
            } else {
                vec![300; p]
            };
            let total: usize = counts.iter().sum();
            let src = pattern(0x1b, root, usize::from(v), 0, total);
            let fill = vec![0x5au8; 512];
            ck("write", c.ep.write_local(SM_DST, &fill))?;
            if me == root {
                ck("write", c.ep.write_local(SM_SRC, &src))?;
            }
            #[allow(clippy::cast_possible_truncation)] // root < size
            let r = root as u32;
            let dst = if me == root {
                Addr::InPlace
            } else {
                Addr::Seg(SM_DST)
            };
            let fl = f::IN_MYSYNC | f::OUT_MYSYNC | f::LOCAL;
            let what = if v { "scatter_v" } else { "scatter" };
            let res = if v {
                // SAFETY: segment offsets (and InPlace) only: no pointer address to keep valid.
                unsafe { co.scatter_v(co.world(), dst, r, Addr::Seg(SM_SRC), &counts, fl) }
            } else {
                // SAFETY: segment offsets (and InPlace) only: no pointer address to keep valid.
                unsafe { co.scatter(co.world(), dst, r, Addr::Seg(SM_SRC), 300, fl) }
            };
            ck(what, res)?;
            let at: usize = counts[..me].iter().sum();
            if me == root {
                let mut got = vec![0u8; total];
                ck("read", c.ep.read_local(SM_SRC, &mut got))?;
                ensure(got == src, || {
                    format!("{what} root {root}: the in-place root's source changed")
                })?;
                let mut d = vec![0u8; 512];
                ck("read", c.ep.read_local(SM_DST, &mut d))?;
                ensure(d == fill, || {
                    format!("{what} root {root}: the in-place root's segment at SM_DST was written")
                })?;
            } else {
                let mut got = vec![0u8; counts[me] + 8];
                ck("read", c.ep.read_local(SM_DST, &mut got))?;
                let mut want = src[at..at + counts[me]].to_vec();
                want.extend_from_slice(&fill[..8]);
                ensure(got == want, || {
                    format!(
                        "{what} root {root}: rank {me} got the wrong block or its guard changed"
                    )
                })?;
            }
            ck("barrier", c.ep.barrier())?;
        }
    }
    Ok(())
}

/// The array reductions on layouts that give each rank one run of the array in rank order
/// (some ranks none), so that the trees and prefix schemes of spec/coll.md §3b admit them
/// (selected when `AMNET_COLL_TUNE` prefers them), with a commutative and a non-commutative
/// function, in place where the operation allows it, against the oracle.
fn reductions_in_rank_order(c: &Ctx<'_>) -> Verdict {
    use crate::coll_oracle::{ODesc, OFn, OKind, OLay};
    use crate::coll_prop::{GCall, Rng, Unit};
    let co = coll(c)?;
    let w = world(c);
    let np = c.size() as usize;
    let seed = crate::coll_prop::seed(0x0DE5 + np as u64);
    let mut lays = vec![
        (OLay { blk: 1, off: 0 }, np),
        (OLay { blk: 3, off: 0 }, 3 * np),
        (OLay { blk: 2, off: 1 }, 2 * np - 1),
        (
            OLay {
                blk: 0,
                off: np - 1,
            },
            5,
        ),
    ];
    if np > 1 {
        // Rank 0 holds no element.
        lays.push((OLay { blk: 2, off: 2 }, 2 * np - 3));
    }
    let mut units = Vec::new();
    let mut idx = 0;
    for kind in [
        OKind::Reduce,
        OKind::ReduceAll,
        OKind::Prefix,
        OKind::ExPrefix,
    ] {
        for func in [OFn::SumU64, OFn::Affine] {
            for &(lay, n) in &lays {
                for in_place in [false, true] {
                    let one_each = lay.blk == 1 && lay.off == 0;
                    if in_place && kind != OKind::Prefix && kind != OKind::ExPrefix && !one_each {
                        // reduce and reduce_to_all read in place at most one element.
                        continue;
                    }
                    let root = idx % np;
                    #[allow(clippy::cast_possible_truncation)] // root < size
                    let call = GCall {
                        idx,
                        desc: ODesc {
                            kind,
                            np,
                            root,
                            counts: Vec::new(),
                            func,
                            n,
                            src_lay: lay,
                            dst_lay: lay,
                            in_place,
                        },
                        form: Form::Single,
                        vform: false,
                        local: true,
                        ptr: idx % 3 == 0,
                        sync: [f::NOSYNC, f::MYSYNC, f::ALLSYNC][idx % 3],
                        seg_assert: false,
                        root_image: root as u32,
                        slot: 0,
                        blocking: idx % 2 == 0,
                        aggregate: false,
                    };
                    units.push(Unit {
                        calls: vec![call],
                        all_threads: false,
                    });
                    idx += 1;
                }
            }
        }
    }
    let caller = Caller {
        ep: c.ep,
        coll: co,
        team: co.world(),
        w: &w,
        seed,
    };
    let mut r = Rng(seed ^ u64::from(c.rank()));
    for u in &units {
        caller.run_unit(u, &mut r)?;
    }
    Ok(())
}

/// The vector reductions (reduce_elems, reduce_elems_to_all, scan_elems, exclusive_scan_elems)
/// with a commutative and a non-commutative function, in place or not, short and long vectors
/// (longer than a medium message), on the world team and on a team of every rank in reverse
/// order, against the oracle.
fn vector_reductions(c: &Ctx<'_>) -> Verdict {
    use crate::coll_oracle::{ODesc, OFn, OKind, OLay};
    use crate::coll_prop::{GCall, Rng, Unit};
    let co = coll(c)?;
    let np = c.size() as usize;
    #[allow(clippy::cast_possible_wrap)] // ranks fit in i32
    let key = -(c.rank() as i32);
    let reversed = ck("split", co.split(co.world(), Some(0), key))?
        .ok_or_else(|| "split gave no team".to_string())?;
    let w = World::new(vec![1; np]);
    let seed = crate::coll_prop::seed(0x7EC + np as u64);
    let mut units = Vec::new();
    let mut idx = 0;
    let lay = OLay { blk: 1, off: 0 };
    for kind in [
        OKind::ReduceElems,
        OKind::ReduceElemsAll,
        OKind::ScanElems,
        OKind::ExScanElems,
    ] {
        for func in [OFn::SumU64, OFn::Affine] {
            // 17000 elements: more than a host-scratch slot (the smp-native vector
            // reductions run it in chunks, blocking calls).
            for n in [1, 7, 5000, 17_000] {
                for in_place in [false, true] {
                    let root = (idx * 5) % np;
                    #[allow(clippy::cast_possible_truncation)] // root < size
                    let call = GCall {
                        idx,
                        desc: ODesc {
                            kind,
                            np,
                            root,
                            counts: Vec::new(),
                            func,
                            n,
                            src_lay: lay,
                            dst_lay: lay,
                            in_place,
                        },
                        form: Form::Single,
                        vform: false,
                        local: true,
                        ptr: idx % 3 == 1,
                        sync: [f::NOSYNC, f::MYSYNC, f::ALLSYNC][idx % 3],
                        seg_assert: false,
                        root_image: root as u32,
                        slot: idx % 2,
                        blocking: idx % 4 == 0 || n > 10_000,
                        aggregate: false,
                    };
                    units.push(Unit {
                        calls: vec![call],
                        all_threads: false,
                    });
                    idx += 1;
                }
            }
        }
    }
    for team in [co.world(), &reversed] {
        let caller = Caller {
            ep: c.ep,
            coll: co,
            team,
            w: &w,
            seed,
        };
        let mut r = Rng(seed ^ u64::from(c.rank()));
        for u in &units {
            caller.run_unit(u, &mut r)?;
        }
    }
    ck("destroy", co.destroy(&reversed))
}

// ----- sync modes ---------------------------------------------------------------------------

const SM_SRC: u64 = 0;
const SM_DST: u64 = 1 << 20;
/// Per-rank flags (8 bytes each) for tests that signal through the segment.
const SM_FLAG: u64 = 3 << 19;

/// IN_ALLSYNC: rank 0 enters at once; the last rank sleeps, then puts a new value into rank
/// 0's source, then enters. Every destination must hold the new value.
fn in_allsync(c: &Ctx<'_>) -> Verdict {
    let co = coll(c)?;
    let (me, p) = (c.rank(), c.size());
    let last = p - 1;
    let old = vec![0x11u8; 64];
    let new = vec![0xeeu8; 64];
    // Round 3's blocking ALLSYNC gather_all of segment areas takes the smp-native push
    // where every segment is mapped.
    for (round, kind) in [
        (0u8, "broadcast"),
        (1, "broadcast_nb"),
        (2, "gather_all"),
        (3, "gather_all ALLSYNC"),
    ] {
        ck("write", c.ep.write_local(SM_SRC, &old))?;
        ck(
            "write",
            c.ep.write_local(SM_DST, &vec![0u8; 64 * p as usize]),
        )?;
        ck("barrier", c.ep.barrier())?;
        if me == last {
            std::thread::sleep(Duration::from_millis(50));
            ck("put", c.ep.put(0, SM_SRC, &new))?;
        }
        let out = if round == 3 {
            f::OUT_ALLSYNC
        } else {
            f::OUT_MYSYNC
        };
        let fl = f::IN_ALLSYNC | out | f::SINGLE;
        let (d, s) = (Addr::Seg(SM_DST), Addr::Seg(SM_SRC));
        match round {
            0 => ck(
                "broadcast",
                // SAFETY: segment offsets (and InPlace) only: no pointer address to keep valid.
                unsafe { co.broadcast(co.world(), d, 0, s, 64, fl) },
            )?,
            1 => {
                let h = ck(
                    "broadcast_nb",
                    // SAFETY: segment offsets (and InPlace) only: no pointer address to keep valid.
                    unsafe { co.broadcast_nb(co.world(), d, 0, s, 64, fl) },
                )?;
                ck("wait_sync", co.wait_sync(h))?;
            }
            _ => ck(
                "gather_all",
                // SAFETY: segment offsets (and InPlace) only: no pointer address to keep valid.
                unsafe { co.gather_all(co.world(), d, s, 64, fl) },
            )?,
        }
        let mut got = vec![0u8; 64];
        ck("read", c.ep.read_local(SM_DST, &mut got))?;
        ensure(got == new, || {
            format!(
                "{kind}: rank 0's source was read before the last rank entered (got {:02x?})",
                &got[..4]
            )
        })?;
        ck("barrier", c.ep.barrier())?;
    }
    Ok(())
}

/// OUT_ALLSYNC: as soon as this rank's sync returns, every other rank's destination is done.
/// Rounds 0-3 a non-blocking gather_all of 1000-byte blocks, 4-7 a blocking one of 8-byte
/// blocks, 8-11 a blocking 8-byte broadcast from rank 0 (on the smp-native algorithms the
/// small calls' path of their own, spec/coll.md §3c, but for the `IN_ALLSYNC` rounds where
/// every segment is mapped, which take the push under ALLSYNC).
fn out_allsync(c: &Ctx<'_>) -> Verdict {
    let co = coll(c)?;
    let (me, p) = (c.rank() as usize, c.size() as usize);
    for round in 0..12usize {
        let seed = round as u64;
        let nb = if round < 4 { 1000 } else { 8 };
        let bcast = round >= 8;
        let src = pattern(seed, 0, me, 7, nb);
        ck("write", c.ep.write_local(SM_SRC, &src))?;
        ck("write", c.ep.write_local(SM_DST, &vec![0u8; nb * p]))?;
        ck("barrier", c.ep.barrier())?;
        // A different late rank each round.
        if me == (round + 1) % p && p > 1 {
            std::thread::sleep(Duration::from_millis(30));
        }
        let ins = [f::IN_NOSYNC, f::IN_MYSYNC, f::IN_ALLSYNC, f::IN_NOSYNC][round % 4];
        let fl = ins | f::OUT_ALLSYNC | f::SINGLE;
        let (d, s) = (Addr::Seg(SM_DST), Addr::Seg(SM_SRC));
        if round < 4 {
            let h = ck(
                "gather_all_nb",
                // SAFETY: segment offsets (and InPlace) only: no pointer address to keep valid.
                unsafe { co.gather_all_nb(co.world(), d, s, nb, fl) },
            )?;
            ck("wait_sync", co.wait_sync(h))?;
        } else if bcast {
            // SAFETY: segment offsets only: no pointer address to keep valid.
            ck("broadcast", unsafe {
                co.broadcast(co.world(), d, 0, s, nb, fl)
            })?;
        } else {
            // SAFETY: segment offsets only: no pointer address to keep valid.
            ck("gather_all", unsafe {
                co.gather_all(co.world(), d, s, nb, fl)
            })?;
        }
        let mut want = Vec::new();
        for r in 0..p {
            want.extend(pattern(seed, 0, r, 7, nb));
        }
        if bcast {
            // Rank 0's block, then the zeros the call leaves alone.
            want = pattern(seed, 0, 0, 7, nb);
            want.resize(nb * p, 0);
        }
        for r in 0..p {
            let mut got = vec![0u8; nb * p];
            #[allow(clippy::cast_possible_truncation)]
            ck("get", c.ep.get(r as u32, SM_DST, &mut got))?;
            crate::coll_oracle::diff(
                &format!("round {round}: rank {r}'s destination right after rank {me}'s OUT_ALLSYNC sync"),
                &got,
                &want,
            )?;
        }
        ck("barrier", c.ep.barrier())?;
    }
    out_allsync_reductions(c, co)
}

/// `out_allsync`'s rounds of 8-byte reductions (one u64 each), a different late rank each
/// round: scan_elems under each IN mode, reduce_elems rooted at 0, and a prefix_reduce of one
/// element (on rank 0; the other ranks hold none) under `IN_ALLSYNC`. Right after its
/// `OUT_ALLSYNC` call returns, each rank reads every rank's destination.
fn out_allsync_reductions(c: &Ctx<'_>, co: &Coll) -> Verdict {
    use amnet::coll::builtin::builtin_index;
    use amnet::coll::{ElemType, Layout};
    let (me, p) = (c.rank() as usize, c.size() as usize);
    let func = builtin_index(RedOp::Sum, ElemType::U64).ok_or("no built-in u64 sum".to_string())?;
    let x = |round: usize, q: usize| (q * 7 + round + 1) as u64;
    for round in 12..18usize {
        ck(
            "write",
            c.ep.write_local(SM_SRC, &x(round, me).to_le_bytes()),
        )?;
        ck("write", c.ep.write_local(SM_DST, &[0u8; 8]))?;
        ck("barrier", c.ep.barrier())?;
        if me == (round + 1) % p && p > 1 {
            std::thread::sleep(Duration::from_millis(30));
        }
        let ins = [f::IN_NOSYNC, f::IN_MYSYNC, f::IN_ALLSYNC][round % 3];
        let fl = ins | f::OUT_ALLSYNC | f::SINGLE;
        let (d, s) = (Addr::Seg(SM_DST), Addr::Seg(SM_SRC));
        let (what, want): (&str, Box<dyn Fn(usize) -> u64>) = if round < 15 {
            // SAFETY: segment offsets only: no pointer address to keep valid.
            ck("scan_elems", unsafe {
                co.scan_elems(co.world(), d, s, 8, 1, func, 0, fl)
            })?;
            (
                "scan_elems",
                Box::new(move |r| (0..=r).map(|q| x(round, q)).sum()),
            )
        } else if round < 17 {
            // SAFETY: as above.
            ck("reduce_elems", unsafe {
                co.reduce_elems(co.world(), 0, d, s, 8, 1, func, 0, fl)
            })?;
            let all: u64 = (0..p).map(|q| x(round, q)).sum();
            (
                "reduce_elems",
                Box::new(move |r| if r == 0 { all } else { 0 }),
            )
        } else {
            let lay = Layout::block_cyclic(1, 0);
            let fl = f::IN_ALLSYNC | f::OUT_ALLSYNC | f::SINGLE;
            // SAFETY: as above.
            ck("prefix_reduce", unsafe {
                co.prefix_reduce(co.world(), d, lay, s, lay, 8, 1, func, 0, fl)
            })?;
            (
                "prefix_reduce",
                Box::new(move |r| if r == 0 { x(round, 0) } else { 0 }),
            )
        };
        for r in 0..p {
            let mut got = [0u8; 8];
            #[allow(clippy::cast_possible_truncation)]
            ck("get", c.ep.get(r as u32, SM_DST, &mut got))?;
            ensure(u64::from_le_bytes(got) == want(r), || {
                format!(
                    "round {round}: {what}: rank {r}'s destination right after rank {me}'s \
                     OUT_ALLSYNC sync holds {}, not {}",
                    u64::from_le_bytes(got),
                    want(r)
                )
            })?;
        }
        ck("barrier", c.ep.barrier())?;
    }
    Ok(())
}

/// Blocking data movement of segment areas under `ALLSYNC` (which the smp-native algorithms
/// run by writing each block straight into the destinations it belongs to, up to 2 KiB
/// blocks) alternating with `MYSYNC` calls (which publish and read), roots moving: every
/// destination holds exactly its blocks, the bytes past it (and a gather's non-roots') are
/// untouched, and under `ALLSYNC` every rank's destination is complete when this rank's call
/// returns. A source that overlaps the destinations (an in-place exchange) gives the same
/// result.
fn allsync_blocks(c: &Ctx<'_>) -> Verdict {
    const OPS: [&str; 6] = [
        "broadcast",
        "scatter",
        "gather",
        "gather_all",
        "exchange",
        "exchange in place",
    ];
    let co = coll(c)?;
    let (me, p) = (c.rank() as usize, c.size() as usize);
    let guard = 64;
    let mut call = 0usize;
    for n in [1usize, 8, 104, 2048, 2049] {
        for op in OPS {
            for (fl, name) in [
                (f::ALLSYNC, "ALLSYNC"),
                (f::MYSYNC, "MYSYNC"),
                (f::ALLSYNC, "ALLSYNC"),
            ] {
                call += 1;
                let r32 = u32::try_from(call).map_or(0, |k| c.size() - 1 - k % c.size());
                let root = r32 as usize;
                let src = pattern(0xb7, call, me, 3, src_len(op, n, p));
                ck(
                    "write",
                    c.ep.write_local(SM_DST, &vec![0x5a; n * p + guard]),
                )?;
                let s = if op == "exchange in place" {
                    ck("write", c.ep.write_local(SM_DST, &src))?;
                    SM_DST
                } else {
                    ck("write", c.ep.write_local(SM_SRC, &src))?;
                    SM_SRC
                };
                ck("barrier", c.ep.barrier())?;
                let (d, s) = (Addr::Seg(SM_DST), Addr::Seg(s));
                let what = format!("{op} of {n}-byte blocks, {name}, root {root}, call {call}");
                let (w, fl) = (co.world(), fl | f::SINGLE);
                // SAFETY: segment offsets only: no pointer address to keep valid.
                let r = unsafe {
                    match op {
                        "broadcast" => co.broadcast(w, d, r32, s, n, fl),
                        "scatter" => co.scatter(w, d, r32, s, n, fl),
                        "gather" => co.gather(w, r32, d, s, n, fl),
                        "gather_all" => co.gather_all(w, d, s, n, fl),
                        _ => co.exchange(w, d, s, n, fl),
                    }
                };
                ck(&what, r)?;
                let ranks: Vec<usize> = if fl & f::ALLSYNC == f::ALLSYNC {
                    (0..p).collect()
                } else {
                    vec![me]
                };
                for r in ranks {
                    let mut got = vec![0u8; n * p + guard];
                    #[allow(clippy::cast_possible_truncation)]
                    ck("get", c.ep.get(r as u32, SM_DST, &mut got))?;
                    crate::coll_oracle::diff(
                        &format!("{what}: rank {r}'s destination after rank {me}'s call returned"),
                        &got,
                        &want_of(op, r, root, n, p, call, guard),
                    )?;
                }
                ck("barrier", c.ep.barrier())?;
            }
        }
    }
    Ok(())
}

/// The source bytes of a rank in [`allsync_blocks`]' `op`.
fn src_len(op: &str, n: usize, p: usize) -> usize {
    match op {
        "scatter" | "exchange" | "exchange in place" => n * p,
        _ => n,
    }
}

/// Rank `r`'s destination area (`n * p + guard` bytes, filled with 0x5a before the call) after
/// [`allsync_blocks`]' call `call` of `op` rooted at `root`.
fn want_of(
    op: &str,
    r: usize,
    root: usize,
    n: usize,
    p: usize,
    call: usize,
    guard: usize,
) -> Vec<u8> {
    let src = |q: usize| pattern(0xb7, call, q, 3, src_len(op, n, p));
    let blocks: Vec<u8> = match op {
        "broadcast" => src(root),
        "scatter" => src(root)[r * n..(r + 1) * n].to_vec(),
        "gather" if r != root => Vec::new(),
        "gather" | "gather_all" => (0..p).flat_map(src).collect(),
        _ => (0..p)
            .flat_map(|q| src(q)[r * n..(r + 1) * n].to_vec())
            .collect(),
    };
    let mut want = vec![0x5a; n * p + guard];
    want[..blocks.len()].copy_from_slice(&blocks);
    want
}

/// OUT_NOSYNC: a sync needs only this rank's own part. Rank 0, the root of a broadcast, enters
/// it only once every other rank's sync of it returned (each puts a flag into rank 0 then),
/// so those syncs return without its data, whatever the network delays. A later `OUT_MYSYNC` broadcast from another root, whose data comes at once,
/// syncs only once the first one's data is in place too (the first is `IN_MYSYNC`: its data
/// travels in messages the receiver tracks; `IN_NOSYNC` data written by direct puts is in
/// place after a barrier). Then a gather_all with the late rank
/// synced early everywhere is in place after a barrier (the core's, then the team's). A
/// destination outside the segment is in place at the sync.
fn out_nosync(c: &Ctx<'_>) -> Verdict {
    let co = coll(c)?;
    let (me, p) = (c.rank(), c.size());
    if p < 2 {
        return Ok(());
    }
    ck("tune", co.tune("broadcast:-:flat;gather_all:-:flat"))?;
    let late = 0;
    let n = 64usize;
    let first = pattern(0x0d, 0, 0, 1, n);
    let second = pattern(0x0d, 0, p as usize - 1, 2, n);
    ck("write", c.ep.write_local(SM_SRC, &first))?;
    ck("write", c.ep.write_local(SM_SRC + 4096, &second))?;
    ck("write", c.ep.write_local(SM_DST, &vec![0u8; 8192]))?;
    ck(
        "write",
        c.ep.write_local(SM_FLAG, &vec![0u8; 8 * p as usize]),
    )?;
    ck("barrier", c.ep.barrier())?;
    if me == late {
        // The others sync the broadcast below before this rank enters it: each puts 1 into
        // its slot here once its sync returned. A sync that waited for the root would never
        // return, and this wait would end at its limit.
        let done = || {
            (0..p).filter(|&r| r != late).all(|r| {
                let mut b = [0u8; 8];
                c.ep.read_local(SM_FLAG + 8 * u64::from(r), &mut b).is_ok() && b[0] == 1
            })
        };
        let t0 = Instant::now();
        ck(
            "wait_until",
            c.ep.wait_until(|| done() || t0.elapsed() > Duration::from_secs(20)),
        )?;
        ensure(done(), || {
            "an OUT_NOSYNC sync without sends of its own waited for the late root".into()
        })?;
    }
    let nosync = f::NOSYNC | f::SINGLE;
    let h = ck(
        "broadcast_nb",
        // SAFETY: segment offsets only: no pointer address to keep valid.
        unsafe {
            co.broadcast_nb(
                co.world(),
                Addr::Seg(SM_DST),
                late,
                Addr::Seg(SM_SRC),
                n,
                f::IN_MYSYNC | f::OUT_NOSYNC | f::SINGLE,
            )
        },
    )?;
    ck("wait_sync", co.wait_sync(h))?;
    if me != late {
        ck(
            "put",
            c.ep.put(late, SM_FLAG + 8 * u64::from(me), &1u64.to_le_bytes()),
        )?;
    }
    let h = ck(
        "broadcast_nb",
        // SAFETY: segment offsets only: no pointer address to keep valid.
        unsafe {
            co.broadcast_nb(
                co.world(),
                Addr::Seg(SM_DST + 4096),
                p - 1,
                Addr::Seg(SM_SRC + 4096),
                n,
                f::MYSYNC | f::SINGLE,
            )
        },
    )?;
    ck("wait_sync", co.wait_sync(h))?;
    let mut got = vec![0u8; n];
    ck("read", c.ep.read_local(SM_DST, &mut got))?;
    ensure(got == first, || {
        "an OUT_MYSYNC sync returned before an earlier OUT_NOSYNC broadcast's data was in place"
            .into()
    })?;
    ck("read", c.ep.read_local(SM_DST + 4096, &mut got))?;
    ensure(got == second, || {
        "the OUT_MYSYNC broadcast's data is wrong".into()
    })?;
    // A destination outside the segment (`Addr::ptr`) must be done by the sync: OUT_NOSYNC
    // gives OUT_MYSYNC's guarantee there.
    if me == late {
        std::thread::sleep(Duration::from_millis(30));
    }
    let mut heap = vec![0u8; n];
    // SAFETY: `heap` outlives the collective, which the wait_sync completes.
    let dst = unsafe { Addr::ptr(heap.as_mut_ptr()) };
    let h = ck(
        "broadcast_nb",
        // SAFETY: `heap`, behind `dst`, lives until the wait_sync below completes the
        // collective (outside the segment OUT_NOSYNC gives OUT_MYSYNC's guarantee), and is
        // leaked if that sync fails; the source is a segment offset.
        unsafe { co.broadcast_nb(co.world(), dst, late, Addr::Seg(SM_SRC), n, nosync) },
    )?;
    if let Err(e) = co.wait_sync(h) {
        std::mem::forget(heap);
        return Err(format!("wait_sync: {e}"));
    }
    ensure(heap == first, || {
        "an OUT_NOSYNC broadcast into memory outside the segment returned before its data".into()
    })?;
    // Late data for collectives synced early: in place after a barrier.
    for (round, core) in [(0u64, true), (1, false)] {
        let mine = pattern(0x0e + round, 0, me as usize, 3, n);
        ck("write", c.ep.write_local(SM_SRC, &mine))?;
        ck(
            "write",
            c.ep.write_local(SM_DST, &vec![0u8; n * p as usize]),
        )?;
        ck("barrier", c.ep.barrier())?;
        if me == late {
            std::thread::sleep(Duration::from_millis(30));
        }
        let h = ck(
            "gather_all_nb",
            // SAFETY: segment offsets only: no pointer address to keep valid.
            unsafe {
                co.gather_all_nb(co.world(), Addr::Seg(SM_DST), Addr::Seg(SM_SRC), n, nosync)
            },
        )?;
        ck("wait_sync", co.wait_sync(h))?;
        if core {
            ck("barrier", c.ep.barrier())?;
        } else {
            ck("team barrier", co.barrier(co.world()))?;
        }
        let mut all = vec![0u8; n * p as usize];
        ck("read", c.ep.read_local(SM_DST, &mut all))?;
        let want: Vec<u8> = (0..p as usize)
            .flat_map(|r| pattern(0x0e + round, 0, r, 3, n))
            .collect();
        crate::coll_oracle::diff(
            &format!(
                "an OUT_NOSYNC gather_all after {}",
                if core { "a barrier" } else { "a team barrier" }
            ),
            &all,
            &want,
        )?;
    }
    ck("tune", co.tune(&env_tune()))?;
    ck("barrier", c.ep.barrier())
}

fn requests(c: &Ctx<'_>) -> u64 {
    c.ep.stats().requests_sent.messages()
}

/// Messages this rank sends for `k` 8-byte broadcasts with `fl`, aggregated or not.
fn count_broadcasts(
    c: &Ctx<'_>,
    co: &Coll,
    k: usize,
    fl: u32,
    aggregate: bool,
) -> Result<u64, String> {
    ck("barrier", c.ep.barrier())?;
    let before = requests(c);
    let mut hs = Vec::new();
    for i in 0..k {
        let a = if aggregate && i + 1 < k {
            f::AGGREGATE
        } else {
            0
        };
        let d = Addr::Seg(SM_DST + 64 * i as u64);
        let h = ck(
            "broadcast_nb",
            // SAFETY: segment offsets (and InPlace) only: no pointer address to keep valid.
            unsafe { co.broadcast_nb(co.world(), d, 0, Addr::Seg(SM_SRC), 8, fl | f::SINGLE | a) },
        )?;
        hs.push(h);
    }
    ck("wait_sync_all", co.wait_sync_all(&mut hs))?;
    let n = requests(c) - before;
    ck("barrier", c.ep.barrier())?;
    Ok(n)
}

/// An aggregate of k ALLSYNC broadcasts pays one entry and one exit round, not k.
fn aggregate_messages(c: &Ctx<'_>) -> Verdict {
    let co = coll(c)?;
    let p = u64::from(c.size());
    let k = 8usize;
    // Signal messages this rank sends per entry or exit signal: ceil(log2 p) rounds of
    // dissemination, or one per child and one up in the tree.
    let log = if ck(
        "selected",
        co.selected(co.world(), "barrier", 0, f::ALLSYNC),
    )? == "tree"
    {
        tree_children(c.rank(), c.size()) + u64::from(c.rank() != 0)
    } else {
        u64::from(64 - (p - 1).leading_zeros())
    };
    let sep = count_broadcasts(c, co, k, f::ALLSYNC, false)?;
    let agg = count_broadcasts(c, co, k, f::ALLSYNC, true)?;
    let bound = sep.saturating_sub((k as u64 - 1) * 2 * log);
    ensure(agg <= bound, || {
        format!("an aggregate of {k} ALLSYNC broadcasts sent {agg} requests; {k} separate ones sent {sep}; expected at most {bound}")
    })?;
    let nosync = count_broadcasts(c, co, k, f::NOSYNC, false)?;
    let mysync = count_broadcasts(c, co, k, f::MYSYNC, false)?;
    let in_all = count_broadcasts(c, co, k, f::IN_ALLSYNC | f::OUT_NOSYNC, false)?;
    let out_all = count_broadcasts(c, co, k, f::IN_NOSYNC | f::OUT_ALLSYNC, false)?;
    if c.rank() == 0 {
        println!("note: rank 0 requests for {k} broadcasts at {p} ranks: ALLSYNC {sep}, aggregated ALLSYNC {agg}, NOSYNC {nosync}, MYSYNC {mysync}, IN_ALLSYNC|OUT_NOSYNC {in_all}, IN_NOSYNC|OUT_ALLSYNC {out_all}");
    }
    if p > 1 {
        ensure(
            nosync < sep && mysync < sep && in_all < sep && out_all < sep,
            || {
                format!("requests: ALLSYNC {sep}, NOSYNC {nosync}, MYSYNC {mysync}, IN_ALLSYNC {in_all}, OUT_ALLSYNC {out_all}: weaker modes should send fewer")
            },
        )?;
        ensure(mysync + k as u64 * 2 * log == sep, || {
            format!("ALLSYNC sent {sep} requests, MYSYNC {mysync}: expected exactly {} signal messages more", k as u64 * 2 * log)
        })?;
        // NOSYNC broadcasts into the segment (the flat algorithm) are puts: no data messages
        // where a put is a direct copy.
        let direct = ck(
            "selected",
            co.selected(co.world(), "broadcast", 8, f::NOSYNC),
        )? == "flat"
            && (0..c.size())
                .all(|r| r == c.rank() || matches!(c.ep.rma_path(r), Ok(amnet::RmaPath::Direct)));
        ensure(
            nosync <= mysync && (!direct || c.rank() != 0 || nosync < mysync),
            || {
                format!("NOSYNC broadcasts sent {nosync} requests, MYSYNC {mysync}: NOSYNC should send fewer (direct puts)")
            },
        )?;
    }
    Ok(())
}

/// Scatter, gather and exchange (uniform and `_v`) with `IN_NOSYNC` and `OUT_NOSYNC` or
/// `OUT_ALLSYNC` on `SINGLE` segment destinations write other ranks' blocks with puts (the
/// flat algorithm): the data lands right (guards untouched), and where a put is a direct copy
/// a rank that sends blocks to others sends fewer AM requests than under `MYSYNC`. An in-place
/// exchange source is refused under those modes.
/// Force `ops` (`"scatter:-:flat;..."`) on this rank for `f`, then restore the forced choices
/// of the environment: for tests of one algorithm's mechanism (every rank does the same).
fn forcing<T>(co: &Coll, ops: &str, f: impl FnOnce() -> Result<T, String>) -> Result<T, String> {
    let env = env_tune();
    ck("tune", co.tune(&format!("{ops};{env}")))?;
    let r = f();
    ck("tune", co.tune(&env))?;
    r
}

fn direct_puts(c: &Ctx<'_>) -> Verdict {
    let co = coll(c)?;
    // The engine's direct puts, not the smp-native algorithms.
    forcing(co, "scatter:-:flat;gather:-:flat;exchange:-:flat", || {
        direct_puts_flat(c, co)
    })
}

fn direct_puts_flat(c: &Ctx<'_>, co: &Coll) -> Verdict {
    let (me, p) = (c.rank() as usize, c.size() as usize);
    let w = co.world();
    let root = c.size() - 1;
    let direct_path = (0..c.size())
        .all(|r| r == c.rank() || matches!(c.ep.rma_path(r), Ok(amnet::RmaPath::Direct)));
    // Exchange matrix (row = source); the rooted forms use row 0 as their counts.
    let m = |v: bool, i: usize, j: usize| if v { (i * 7 + j * 13) % 40 } else { 96 };
    let guard = 16;
    for op in ["scatter", "gather", "exchange"] {
        for v in [false, true] {
            let counts: Vec<usize> = if op == "exchange" {
                (0..p * p).map(|k| m(v, k / p, k % p)).collect()
            } else {
                (0..p).map(|q| m(v, 1, q) + usize::from(v)).collect()
            };
            let mut sent = Vec::new();
            for (fl, name) in [
                (f::NOSYNC, "NOSYNC"),
                (f::IN_NOSYNC | f::OUT_ALLSYNC, "IN_NOSYNC|OUT_ALLSYNC"),
                (f::MYSYNC, "MYSYNC"),
            ] {
                let call = sent.len();
                let what = format!("{op}{} {name}", if v { "_v" } else { "" });
                let pat = |r: usize, len: usize| pattern(0xd1, call, r, u64::from(v), len);
                // Areas: my source, and my destination with what it must hold.
                let (src, want): (Vec<u8>, Vec<u8>) = match op {
                    "scatter" => {
                        let total: usize = counts.iter().sum();
                        let at: usize = counts[..me].iter().sum();
                        let rs = pat(root as usize, total);
                        let mine = if me == root as usize {
                            rs.clone()
                        } else {
                            Vec::new()
                        };
                        (mine, rs[at..at + counts[me]].to_vec())
                    }
                    "gather" => {
                        let want = if me == root as usize {
                            (0..p).flat_map(|q| pat(q, counts[q])).collect()
                        } else {
                            Vec::new()
                        };
                        (pat(me, counts[me]), want)
                    }
                    _ => {
                        let row = |i: usize| (0..p).map(|j| counts[i * p + j]).sum::<usize>();
                        let want = (0..p)
                            .flat_map(|i| {
                                let at: usize = (0..me).map(|j| counts[i * p + j]).sum();
                                pat(i, row(i))[at..at + counts[i * p + me]].to_vec()
                            })
                            .collect();
                        (pat(me, row(me)), want)
                    }
                };
                let fill = vec![0x5au8; want.len() + guard];
                ck("write", c.ep.write_local(SM_DST, &fill))?;
                ck("write", c.ep.write_local(SM_SRC, &src))?;
                ck("barrier", c.ep.barrier())?;
                let before = requests(c);
                let (d, s) = (Addr::Seg(SM_DST), Addr::Seg(SM_SRC));
                let fl = fl | f::SINGLE;
                // SAFETY: segment offsets only: no pointer address to keep valid.
                let r = unsafe {
                    match (op, v) {
                        ("scatter", false) => co.scatter(w, d, root, s, counts[0], fl),
                        ("scatter", true) => co.scatter_v(w, d, root, s, &counts, fl),
                        ("gather", false) => co.gather(w, root, d, s, counts[0], fl),
                        ("gather", true) => co.gather_v(w, root, d, s, &counts, fl),
                        (_, false) => co.exchange(w, d, s, counts[0], fl),
                        (_, true) => co.exchange_v(w, d, s, &counts, fl),
                    }
                };
                ck(&what, r)?;
                sent.push(requests(c) - before);
                // NOSYNC data is in place after a core barrier.
                ck("barrier", c.ep.barrier())?;
                check_dst(c, SM_DST, &what, &want, &fill)?;
            }
            let label = format!("{op}{}", if v { "_v" } else { "" });
            let sends_to_others = match op {
                "scatter" => me == root as usize && (0..p).any(|q| q != me && counts[q] > 0),
                "gather" => me != root as usize && counts[me] > 0,
                _ => (0..p).any(|j| j != me && counts[me * p + j] > 0),
            };
            if me == 0 {
                println!(
                    "note: rank 0 requests for {label} at {p} ranks: NOSYNC {}, IN_NOSYNC|OUT_ALLSYNC {}, MYSYNC {}",
                    sent[0], sent[1], sent[2]
                );
            }
            let most = counts.iter().copied().max().unwrap_or(0);
            let flat = ck("selected", co.selected(w, op, most, f::NOSYNC))? == "flat";
            ensure(
                sent[0] <= sent[2] && sent[1] <= sent[2] + 2 * p as u64,
                || {
                    format!("{label}: rank {me} sent NOSYNC {} IN_NOSYNC|OUT_ALLSYNC {} MYSYNC {} requests", sent[0], sent[1], sent[2])
                },
            )?;
            if flat && direct_path && sends_to_others {
                ensure(sent[0] < sent[2], || {
                    format!("{label}: rank {me} sent {} requests under NOSYNC and {} under MYSYNC: direct puts should send fewer", sent[0], sent[2])
                })?;
            }
        }
    }
    // An in-place exchange source cannot go with direct puts.
    let flat = ck("selected", co.selected(w, "exchange", 8, f::NOSYNC))? == "flat";
    // SAFETY: segment offsets (and InPlace) only: no pointer address to keep valid.
    let r = unsafe {
        co.exchange(
            w,
            Addr::Seg(SM_DST),
            Addr::InPlace,
            8,
            f::NOSYNC | f::SINGLE,
        )
    };
    if flat && c.ep.segment_len().is_ok() {
        match r {
            Err(Error::Usage { detail, .. }) if detail.contains("in-place exchange source") => {}
            other => {
                return Err(format!(
                    "in-place NOSYNC exchange: expected a refusal, got {other:?}"
                ))
            }
        }
    } else {
        ck("in-place exchange", r)?;
    }
    ck("barrier", c.ep.barrier())
}

/// This rank's destination at segment offset `at`, filled with `fill` before `what`, holds
/// `want` followed by the rest of the fill (a guard).
fn check_dst(c: &Ctx<'_>, at: u64, what: &str, want: &[u8], fill: &[u8]) -> Verdict {
    let me = c.rank();
    let mut got = vec![0u8; fill.len()];
    ck("read", c.ep.read_local(at, &mut got))?;
    ensure(got[..want.len()] == want[..], || {
        format!("{what}: rank {me} got the wrong data")
    })?;
    ensure(got[want.len()..] == fill[want.len()..], || {
        format!("{what}: rank {me}'s guard after its destination changed")
    })
}

/// Large blocks (several Medium messages each, above the engine's 32 KiB threshold) under
/// the sync modes that need notices, on `SINGLE` segment areas with the flat algorithm, go
/// by direct puts: every byte for another rank is put (the put counters say exactly how
/// many), the data is right and in place when an `OUT_MYSYNC` or `OUT_ALLSYNC` sync returns,
/// and under `IN_MYSYNC` and `IN_ALLSYNC` no peer writes a destination before its owner
/// entered (a late rank finds its destination untouched while the others wait in the call).
fn direct_puts_large(c: &Ctx<'_>) -> Verdict {
    const SRC: u64 = 4 << 20;
    const DST: u64 = 14 << 20;
    let co = coll(c)?;
    let (me, p) = (c.rank() as usize, c.size() as usize);
    let w = co.world();
    let root = c.size() - 1;
    let block = (4 * c.ep.max_medium() + 3).max(32 * 1024 + 5);
    let guard = 16;
    let modes = [
        (f::MYSYNC, "MYSYNC"),
        (f::IN_ALLSYNC | f::OUT_MYSYNC, "IN_ALLSYNC|OUT_MYSYNC"),
        (f::IN_MYSYNC | f::OUT_ALLSYNC, "IN_MYSYNC|OUT_ALLSYNC"),
        (f::ALLSYNC, "ALLSYNC"),
        (f::IN_NOSYNC | f::OUT_MYSYNC, "IN_NOSYNC|OUT_MYSYNC"),
        (f::IN_MYSYNC | f::OUT_NOSYNC, "IN_MYSYNC|OUT_NOSYNC"),
    ];
    let mut call = 0usize;
    for op in ["broadcast", "scatter", "gather", "gather_all", "exchange"] {
        let flat = ck("selected", co.selected(w, op, block, f::MYSYNC | f::SINGLE))? == "flat";
        for (fl, name) in modes {
            call += 1;
            let what = format!("{op} of {block}-byte blocks under {name}");
            let pat = |r: usize, len: usize| pattern(0x1a, call, r, 0, len);
            let r0 = root as usize;
            // My source, my destination's expected bytes, and the bytes I send to others.
            let (src, want, to_others): (Vec<u8>, Vec<u8>, usize) = match op {
                "broadcast" => {
                    let b = pat(r0, block);
                    let out = if me == r0 { (p - 1) * block } else { 0 };
                    (if me == r0 { b.clone() } else { Vec::new() }, b, out)
                }
                "scatter" => {
                    let all = pat(r0, p * block);
                    let mine = all[me * block..(me + 1) * block].to_vec();
                    let out = if me == r0 { (p - 1) * block } else { 0 };
                    (if me == r0 { all } else { Vec::new() }, mine, out)
                }
                "gather" => {
                    let want = if me == r0 {
                        (0..p).flat_map(|q| pat(q, block)).collect()
                    } else {
                        Vec::new()
                    };
                    (pat(me, block), want, if me == r0 { 0 } else { block })
                }
                "gather_all" => {
                    let want = (0..p).flat_map(|q| pat(q, block)).collect();
                    (pat(me, block), want, (p - 1) * block)
                }
                _ => {
                    let want = (0..p)
                        .flat_map(|q| pat(q, p * block)[me * block..(me + 1) * block].to_vec())
                        .collect();
                    (pat(me, p * block), want, (p - 1) * block)
                }
            };
            let fill = vec![0xa5u8; want.len() + guard];
            ck("write", c.ep.write_local(DST, &fill))?;
            ck("write", c.ep.write_local(SRC, &src))?;
            ck("barrier", c.ep.barrier())?;
            // One rank enters late; under IN_MYSYNC and IN_ALLSYNC its destination must still
            // be untouched then, though the others entered and wait in the call.
            let late = call % p;
            if me == late && p > 1 {
                std::thread::sleep(Duration::from_millis(30));
                if fl & f::IN_NOSYNC == 0 {
                    let mut now = vec![0u8; fill.len()];
                    ck("read", c.ep.read_local(DST, &mut now))?;
                    ensure(now == fill, || {
                        format!("{what}: a peer wrote rank {me}'s destination before it entered")
                    })?;
                }
            }
            let before = c.ep.stats();
            let (d, s) = (Addr::Seg(DST), Addr::Seg(SRC));
            let fl = fl | f::SINGLE;
            // SAFETY: segment offsets only: no pointer address to keep valid.
            let r = unsafe {
                match op {
                    "broadcast" => co.broadcast(w, d, root, s, block, fl),
                    "scatter" => co.scatter(w, d, root, s, block, fl),
                    "gather" => co.gather(w, root, d, s, block, fl),
                    "gather_all" => co.gather_all(w, d, s, block, fl),
                    _ => co.exchange(w, d, s, block, fl),
                }
            };
            ck(&what, r)?;
            let after = c.ep.stats();
            // OUT_MYSYNC and OUT_ALLSYNC: my destination is complete now; OUT_NOSYNC: after
            // a barrier.
            if fl & f::OUT_NOSYNC != 0 {
                ck("barrier", c.ep.barrier())?;
            }
            check_dst(c, DST, &what, &want, &fill)?;
            if flat {
                let put = after.put_bytes - before.put_bytes;
                ensure(put == to_others as u64, || {
                    format!("{what}: rank {me} put {put} bytes; its blocks for other ranks hold {to_others} (direct puts)")
                })?;
            }
            ck("barrier", c.ep.barrier())?;
        }
    }
    Ok(())
}

/// Early data stays within the budget (`AMNET_COLL_EARLY_BYTES`, here set small): every rank
/// but 0 issues `K` flat exchanges while rank 0 waits before it enters any; rank 0 then holds
/// at most each sender's share (or one collective's block, if larger) per sender, the senders'
/// later exchanges wait for it (deferrals), and every block arrives.
fn early_data_bound(c: &Ctx<'_>) -> Verdict {
    let co = coll(c)?;
    let (me, p) = (c.rank() as usize, c.size() as usize);
    let w = co.world();
    let k = 32usize;
    let n = 512usize;
    let budget = 2048usize;
    let old = co.flow_stats().budget;
    ck("tune", co.tune("exchange:-:flat"))?;
    let src: Vec<Vec<u8>> = (0..p).map(|r| pattern(0xe7, 0, r, 0, n * p)).collect();
    ck("write", c.ep.write_local(SM_SRC, &src[me]))?;
    ck("write", c.ep.write_local(SM_DST, &vec![0u8; k * n * p]))?;
    ck("barrier", c.ep.barrier())?;
    co.set_early_budget(budget);
    let fl = f::IN_MYSYNC | f::OUT_MYSYNC | f::SINGLE;
    let issue = || -> Result<Vec<CollHandle>, String> {
        (0..k)
            .map(|i| {
                let d = Addr::Seg(SM_DST + (i * n * p) as u64);
                ck(
                    "exchange_nb",
                    // SAFETY: segment offsets (and InPlace) only: no pointer address to keep valid.
                    unsafe { co.exchange_nb(w, d, Addr::Seg(SM_SRC), n, fl) },
                )
            })
            .collect()
    };
    let mut peak = 0;
    let mut hs = if me == 0 {
        // Late: let the others run ahead, then take in whatever they sent before entering.
        std::thread::sleep(Duration::from_millis(30));
        let t = Instant::now();
        while t.elapsed() < Duration::from_millis(20) {
            ck("poll", co.poll())?;
        }
        peak = co.flow_stats().early_peak;
        issue()?
    } else {
        issue()?
    };
    ck("wait_sync_all", co.wait_sync_all(&mut hs))?;
    let st = co.flow_stats();
    co.set_early_budget(old);
    ck("tune", co.tune(&env_tune()))?;
    ck("barrier", c.ep.barrier())?;
    let mut got = vec![0u8; k * n * p];
    ck("read", c.ep.read_local(SM_DST, &mut got))?;
    for i in 0..k {
        for (q, sq) in src.iter().enumerate() {
            let at = i * n * p + q * n;
            ensure(got[at..at + n] == sq[me * n..(me + 1) * n], || {
                format!("exchange #{i}: rank {me} got the wrong block from rank {q}")
            })?;
        }
    }
    ensure(st.early_bytes == 0, || {
        format!(
            "rank {me} still counts {} early bytes with nothing in flight",
            st.early_bytes
        )
    })?;
    if p > 1 {
        let bound = (p - 1) * (budget / (p - 1)).max(n);
        if me == 0 {
            println!(
                "note: rank 0 held at most {peak} early bytes (bound {bound}; {} senders x {k} exchanges x {n} bytes unbounded)",
                p - 1
            );
            ensure(peak > 0 && st.early_peak <= bound, || {
                format!("rank 0 held {} early bytes at most ({peak} before it entered); the bound is {bound}", st.early_peak)
            })?;
        } else {
            ensure(st.deferrals > 0 && st.asks > 0, || {
                format!("rank {me} ran {k} exchanges ahead of rank 0 without waiting: {st:?}")
            })?;
        }
    }
    Ok(())
}

/// Children of team rank `r` in the binomial tree of `p` ranks rooted at 0 (the `tree` signal).
fn tree_children(r: u32, p: u32) -> u64 {
    let limit = if r == 0 {
        u64::MAX
    } else {
        u64::from(r & r.wrapping_neg())
    };
    (0..32u32)
        .take_while(|&k| (1u64 << k) < limit && u64::from(r) + (1u64 << k) < u64::from(p))
        .count() as u64
}

/// The AMNET_COLL_TUNE a job started with (restored after a test that calls `Coll::tune`).
fn env_tune() -> String {
    std::env::var("AMNET_COLL_TUNE").unwrap_or_default()
}

/// The team barrier and the entry signals under each signal scheme (`barrier`'s algorithms,
/// forced through `Coll::tune`): nobody leaves a barrier before the late rank of the round put
/// its round number into every rank's flag, and each rank sends what its scheme sends: one
/// message per round (dissemination) or one per child and one up (tree).
fn barrier_schemes(c: &Ctx<'_>) -> Verdict {
    let co = coll(c)?;
    // The environment's forced choices come back whatever the outcome.
    let r = barrier_schemes_forced(c, co);
    ck("tune", co.tune(&env_tune()))?;
    r
}

fn barrier_schemes_forced(c: &Ctx<'_>, co: &Coll) -> Verdict {
    let (me, p) = (c.rank(), c.size());
    let log = u64::from(32 - (p - 1).leading_zeros()); // ceil(log2 p)
    let algs = Coll::algorithms("barrier").unwrap_or_default();
    ensure(algs == ["dissemination", "tree", "shm", "hier"], || {
        format!("barrier's algorithms are {algs:?}")
    })?;
    // The smp-native barrier where the team has it (one host): no messages at all.
    let mut schemes = vec!["dissemination", "tree"];
    if ck(
        "selected",
        co.selected(co.world(), "barrier", 0, f::ALLSYNC),
    )? == "shm"
    {
        // And a message-based scheme after it: a changed choice must not find the
        // smp-native barrier's remembered initiation.
        schemes.extend(["shm", "dissemination"]);
    }
    for scheme in schemes {
        ck(
            "tune",
            co.tune(&format!("barrier:-:{scheme};broadcast:-:flat")),
        )?;
        let sel = ck(
            "selected",
            co.selected(co.world(), "barrier", 0, f::ALLSYNC),
        )?;
        ensure(sel == scheme, || {
            format!("selected {sel} with {scheme} forced")
        })?;
        // The entry and exit signals of the engine's collectives run the tree or
        // dissemination (where the barrier is smp-native: dissemination).
        let signals = match scheme {
            "tree" => tree_children(me, p) + u64::from(me != 0),
            _ => log,
        };
        let want = if scheme == "shm" { 0 } else { signals };
        for round in 1..=4u64 {
            let late = u32::try_from(round % u64::from(p)).unwrap_or(0);
            ck("barrier", c.ep.barrier())?;
            if me == late {
                std::thread::sleep(Duration::from_millis(20));
                for r in 0..p {
                    ck("put", c.ep.put(r, SM_FLAG, &round.to_le_bytes()))?;
                }
            }
            let before = requests(c);
            ck("team barrier", co.barrier(co.world()))?;
            let sent = requests(c) - before;
            let mut got = [0u8; 8];
            ck("read", c.ep.read_local(SM_FLAG, &mut got))?;
            ensure(u64::from_le_bytes(got) == round, || {
                format!("{scheme} round {round}: left the barrier before rank {late} entered it")
            })?;
            ensure(sent == want, || {
                format!("{scheme}: a barrier sent {sent} requests from rank {me}, expected {want}")
            })?;
        }
        // An IN_ALLSYNC broadcast's entry signal runs the same scheme.
        let before = requests(c);
        let h = ck(
            "broadcast_nb",
            // SAFETY: segment offsets only: no pointer address to keep valid.
            unsafe {
                co.broadcast_nb(
                    co.world(),
                    Addr::Seg(SM_DST),
                    0,
                    Addr::Seg(SM_SRC),
                    8,
                    f::IN_ALLSYNC | f::OUT_MYSYNC | f::SINGLE,
                )
            },
        )?;
        ck("wait_sync", co.wait_sync(h))?;
        let sent = requests(c) - before;
        let data = if me == 0 { u64::from(p) - 1 } else { 0 };
        ensure(sent == signals + data, || {
            format!(
                "{scheme}: an IN_ALLSYNC broadcast sent {sent} requests from rank {me}, expected                  {signals} signals and {data} data messages"
            )
        })?;
        ck("barrier", c.ep.barrier())?;
    }
    Ok(())
}

// ----- rules --------------------------------------------------------------------------------

/// A correct broadcast after an error: it must still work.
fn still_works(c: &Ctx<'_>, co: &Coll, what: &str) -> Verdict {
    let v = pattern(99, what.len(), 0, 3, 40);
    if c.rank() == 0 {
        ck("write", c.ep.write_local(SM_SRC, &v))?;
    }
    ck("write", c.ep.write_local(SM_DST, &[0u8; 40]))?;
    // SAFETY: segment offsets (and InPlace) only: no pointer address to keep valid.
    unsafe {
        co.broadcast(
            co.world(),
            Addr::Seg(SM_DST),
            0,
            Addr::Seg(SM_SRC),
            40,
            f::ALLSYNC | f::SINGLE,
        )
    }
    .map_err(|e| format!("a broadcast after {what} failed: {e}"))?;
    let mut got = vec![0u8; 40];
    ck("read", c.ep.read_local(SM_DST, &mut got))?;
    ensure(got == v, || {
        format!("a broadcast after {what} moved wrong data")
    })
}

fn expect_err(what: &str, r: Result<(), Error>, ok: impl Fn(&Error) -> bool) -> Verdict {
    match r {
        Err(e) if ok(&e) => Ok(()),
        Err(e) => Err(format!("{what}: unexpected error {e:?}")),
        Ok(()) => Err(format!("{what}: succeeded")),
    }
}

/// (what, outcome, whether the error is the expected one).
type Case<'a> = (&'a str, Result<(), Error>, fn(&Error) -> bool);

fn is_usage(e: &Error) -> bool {
    matches!(e, Error::Usage { .. })
}

/// barrier_notify must be refused; if it is not, finish that barrier so the job stays in step.
fn notify_refused(c: &Ctx<'_>, what: &str) -> Verdict {
    match c.ep.barrier_notify(0, amnet::barrier_flags::ANONYMOUS) {
        Err(e) if is_usage(&e) => Ok(()),
        Err(e) => Err(format!("{what}: unexpected error {e:?}")),
        Ok(()) => {
            let _ = c.ep.barrier_wait(0, amnet::barrier_flags::ANONYMOUS);
            Err(format!("{what}: succeeded"))
        }
    }
}

fn rules(c: &Ctx<'_>) -> Verdict {
    let co = coll(c)?;
    let t = co.world();
    let (d, s) = (Addr::Seg(SM_DST), Addr::Seg(SM_SRC));
    let p = c.size() as usize;
    still_works(c, co, "nothing")?;
    let cases: Vec<Case<'_>> = vec![
        (
            "AGGREGATE on a blocking call",
            // SAFETY: segment offsets (and InPlace) only: no pointer address to keep valid.
            unsafe { co.broadcast(t, d, 0, s, 8, f::ALLSYNC | f::SINGLE | f::AGGREGATE) },
            is_usage,
        ),
        (
            "no IN flag",
            // SAFETY: segment offsets (and InPlace) only: no pointer address to keep valid.
            unsafe { co.broadcast(t, d, 0, s, 8, f::OUT_MYSYNC | f::SINGLE) },
            is_usage,
        ),
        (
            "two OUT flags",
            // SAFETY: segment offsets (and InPlace) only: no pointer address to keep valid.
            unsafe {
                co.broadcast(
                    t,
                    d,
                    0,
                    s,
                    8,
                    f::IN_MYSYNC | f::OUT_MYSYNC | f::OUT_NOSYNC | f::SINGLE,
                )
            },
            is_usage,
        ),
        (
            "no SINGLE/LOCAL",
            // SAFETY: segment offsets (and InPlace) only: no pointer address to keep valid.
            unsafe { co.broadcast(t, d, 0, s, 8, f::ALLSYNC) },
            is_usage,
        ),
        (
            "SINGLE and LOCAL",
            // SAFETY: segment offsets (and InPlace) only: no pointer address to keep valid.
            unsafe { co.broadcast(t, d, 0, s, 8, f::ALLSYNC | f::SINGLE | f::LOCAL) },
            is_usage,
        ),
        (
            "nbytes 0",
            // SAFETY: segment offsets (and InPlace) only: no pointer address to keep valid.
            unsafe { co.broadcast(t, d, 0, s, 0, f::ALLSYNC | f::SINGLE) },
            is_usage,
        ),
        (
            "root out of range",
            // SAFETY: segment offsets (and InPlace) only: no pointer address to keep valid.
            unsafe { co.broadcast(t, d, c.size(), s, 8, f::ALLSYNC | f::SINGLE) },
            is_usage,
        ),
        (
            "counts one too long",
            // SAFETY: segment offsets (and InPlace) only: no pointer address to keep valid.
            unsafe { co.scatter_v(t, d, 0, s, &vec![1; p + 1], f::ALLSYNC | f::SINGLE) },
            is_usage,
        ),
        (
            "exchange_v counts of length P*P+1",
            // SAFETY: segment offsets (and InPlace) only: no pointer address to keep valid.
            unsafe { co.exchange_v(t, d, s, &vec![1; p * p + 1], f::ALLSYNC | f::SINGLE) },
            is_usage,
        ),
        (
            "destination beyond the segment",
            // SAFETY: segment offsets (and InPlace) only: no pointer address to keep valid.
            unsafe {
                co.broadcast(
                    t,
                    Addr::Seg(crate::SEG_LEN as u64 - 4),
                    0,
                    s,
                    8,
                    f::ALLSYNC | f::SINGLE,
                )
            },
            |e| matches!(e, Error::OutOfSegment { .. }),
        ),
        (
            "m list of the wrong length",
            // SAFETY: segment offsets (and InPlace) only: no pointer address to keep valid.
            unsafe { co.broadcastm(t, &vec![d; p + 1], 0, s, 8, f::ALLSYNC | f::SINGLE) },
            is_usage,
        ),
        (
            "function index past the table",
            // SAFETY: segment offsets (and InPlace) only: no pointer address to keep valid.
            unsafe {
                co.reduce_to_all(
                    t,
                    d,
                    s,
                    amnet::coll::Layout::block_cyclic(1, 0),
                    8,
                    p,
                    10_000,
                    0,
                    f::ALLSYNC | f::SINGLE,
                )
            },
            is_usage,
        ),
    ];
    for (what, r, ok) in cases {
        expect_err(what, r, ok)?;
        still_works(c, co, what)?;
    }
    // A call like the one before it (whose initiation the smp-native path repeats) still
    // has its addresses checked.
    for _ in 0..2 {
        // SAFETY: segment offsets only: no pointer address to keep valid.
        ck("broadcast", unsafe {
            co.broadcast(t, d, 0, s, 8, f::ALLSYNC | f::SINGLE)
        })?;
    }
    expect_err(
        "a repeated call with its destination beyond the segment",
        // SAFETY: segment offsets only: no pointer address to keep valid.
        unsafe {
            co.broadcast(
                t,
                Addr::Seg(crate::SEG_LEN as u64 - 4),
                0,
                s,
                8,
                f::ALLSYNC | f::SINGLE,
            )
        },
        |e| matches!(e, Error::OutOfSegment { .. }),
    )?;
    still_works(c, co, "a repeated call out of the segment")?;
    expect_err(
        "a second Coll::init",
        Coll::init(c.ep, None, 0, &fn_table()).map(|_| ()),
        is_usage,
    )?;
    still_works(c, co, "a second Coll::init")?;
    // A barrier with a collective initiated and not synced.
    // (ALLSYNC, so that the handle stays live until every rank synced it, with 2+ ranks.)
    let h = ck(
        "broadcast_nb",
        // SAFETY: segment offsets (and InPlace) only: no pointer address to keep valid.
        unsafe { co.broadcast_nb(t, d, 0, s, 8, f::ALLSYNC | f::SINGLE) },
    )?;
    if !h.is_invalid() {
        notify_refused(c, "barrier_notify with an unsynced collective")?;
    }
    // Sync from another thread, then twice.
    if !h.is_invalid() {
        let co2 = co.clone();
        let r = std::thread::scope(|sc| sc.spawn(move || co2.try_sync(h).map(|_| ())).join());
        expect_err(
            "try_sync from another thread",
            r.map_err(|_| "thread panicked".to_string())?,
            |e| matches!(e, Error::BadHandle(_)),
        )?;
    }
    ck("wait_sync", co.wait_sync(h))?;
    if !h.is_invalid() {
        expect_err("wait_sync of a synced handle", co.wait_sync(h), |e| {
            matches!(e, Error::BadHandle(_))
        })?;
        expect_err(
            "try_sync of a synced handle",
            co.try_sync(h).map(|_| ()),
            |e| matches!(e, Error::BadHandle(_)),
        )?;
    }
    ck("barrier after sync", c.ep.barrier())?;
    // An aggregate left open also stops a barrier, until a plain call closes it.
    let h0 = ck(
        "aggregate member",
        // SAFETY: segment offsets (and InPlace) only: no pointer address to keep valid.
        unsafe { co.broadcast_nb(t, d, 0, s, 8, f::NOSYNC | f::SINGLE | f::AGGREGATE) },
    )?;
    ensure(h0.is_invalid(), || {
        "an aggregate member returned a live handle".into()
    })?;
    notify_refused(c, "barrier_notify with an aggregate open")?;
    // A team creation gathers on its parent (where the ranks share memory): refused while an
    // aggregate is open there, on every conduit.
    let all: Vec<u32> = (0..c.size()).collect();
    expect_err(
        "team create with an aggregate open",
        co.create(t, &all).map(|_| ()),
        |e| matches!(e, Error::Usage { detail, .. } if detail.contains("aggregate")),
    )?;
    let h1 = ck(
        "closing call",
        // SAFETY: segment offsets (and InPlace) only: no pointer address to keep valid.
        unsafe { co.broadcast_nb(t, Addr::Seg(SM_DST + 64), 0, s, 8, f::NOSYNC | f::SINGLE) },
    )?;
    ck("wait_sync", co.wait_sync(h1))?;
    ck("barrier after the aggregate", c.ep.barrier())?;
    // Nor between barrier_notify and the end of that barrier.
    ck(
        "barrier_notify",
        c.ep.barrier_notify(0, amnet::barrier_flags::ANONYMOUS),
    )?;
    let r = co.split(t, Some(0), 0).map(|_| ());
    ck(
        "barrier_wait",
        c.ep.barrier_wait(0, amnet::barrier_flags::ANONYMOUS),
    )?;
    expect_err("team split inside a barrier", r, is_usage)?;
    let mut hs = [CollHandle::INVALID; 3];
    ck(
        "wait_sync_all of invalid handles",
        co.wait_sync_all(&mut hs),
    )?;
    still_works(c, co, "the barrier rules")
}

/// H_COLL_RULES: try collectives from a handler; record what happened.
pub fn in_handler(st: &State, tok: &mut Token<'_>) {
    let mut out = Vec::new();
    match st.coll.get() {
        None => out.push("no Coll on this rank".to_string()),
        Some(co) => {
            // SAFETY: segment offsets (and InPlace) only: no pointer address to keep valid.
            let r = unsafe {
                co.broadcast(
                    co.world(),
                    Addr::Seg(SM_DST),
                    0,
                    Addr::Seg(SM_SRC),
                    8,
                    f::ALLSYNC | f::SINGLE,
                )
            };
            if !matches!(r, Err(Error::InHandler { .. })) {
                out.push(format!("broadcast in a handler: {r:?}"));
            }
            // SAFETY: segment offsets (and InPlace) only: no pointer address to keep valid.
            let r = unsafe {
                co.broadcast_nb(
                    co.world(),
                    Addr::Seg(SM_DST),
                    0,
                    Addr::Seg(SM_SRC),
                    8,
                    f::NOSYNC | f::SINGLE,
                )
            };
            if !matches!(r, Err(Error::InHandler { .. })) {
                out.push(format!("broadcast_nb in a handler: {r:?}"));
            }
            let r = co.reduce_to_all_typed(RedOp::Sum, 1u64, f::NOSYNC);
            if !matches!(r, Err(Error::InHandler { .. })) {
                out.push(format!("reduce_to_all_typed in a handler: {r:?}"));
            }
            let r = Coll::init(tok.endpoint(), None, 0, &fn_table());
            if !matches!(r, Err(Error::InHandler { .. })) {
                out.push(format!("Coll::init in a handler: {r:?}"));
            }
        }
    }
    lock(&st.rules).extend(out);
    st.rules_done.fetch_add(1, Ordering::SeqCst);
}

fn rule_in_handler(c: &Ctx<'_>) -> Verdict {
    let co = coll(c)?;
    let next = (c.rank() + 1) % c.size();
    ck("request", c.ep.request_short(next, H_COLL_RULES, &[]))?;
    ck(
        "wait",
        c.ep.wait_until(|| c.st.rules_done.load(Ordering::SeqCst) >= 1),
    )?;
    let r = lock(&c.st.rules).clone();
    ensure(r.is_empty(), || r.join("; "))?;
    ck("barrier", c.ep.barrier())?;
    still_works(c, co, "collectives tried in a handler")
}

// ----- many outstanding ---------------------------------------------------------------------

/// At least 65,535 tiny non-blocking collectives outstanding, then one wait_sync_all
/// (`IN_NOSYNC|OUT_MYSYNC`: a sync waits for this rank's data).
fn outstanding(c: &Ctx<'_>) -> Verdict {
    let co = coll(c)?;
    let n = 65_536usize;
    let p = c.size() as usize;
    let me = c.rank() as usize;
    let src = pattern(5, 0, me, 0, n);
    ck("write", c.ep.write_local(SM_SRC, &src))?;
    ck("write", c.ep.write_local(SM_DST, &vec![0u8; n]))?;
    // Rank 0 counts the others' "all issued" notes in its segment (a slot per rank).
    ck("write", c.ep.write_local(SM_FLAG, &vec![0u8; 8 * p]))?;
    ck("barrier", c.ep.barrier())?;
    let t0 = Instant::now();
    let issue = |hs: &mut Vec<CollHandle>| -> Verdict {
        for i in 0..n {
            // SAFETY: segment offsets (and InPlace) only: no pointer address to keep valid.
            let h = unsafe {
                co.broadcast_nb(
                    co.world(),
                    Addr::Seg(SM_DST + i as u64),
                    0,
                    Addr::Seg(SM_SRC + i as u64),
                    1,
                    f::IN_NOSYNC | f::OUT_MYSYNC | f::SINGLE,
                )
            }
            .map_err(|e| format!("broadcast_nb #{i}: {e}"))?;
            hs.push(h);
        }
        Ok(())
    };
    let mut hs = Vec::with_capacity(n);
    // Every rank but the root issues all of its broadcasts before the root issues any, so
    // none of them can complete at initiation: all n are in flight at once there.
    if me != 0 {
        issue(&mut hs)?;
        let live = hs.iter().filter(|h| !h.is_invalid()).count();
        ensure(live == n, || {
            format!("only {live} of {n} broadcasts were in flight before the root started")
        })?;
        let one = 1u64.to_le_bytes();
        ck("put", c.ep.put(0, SM_FLAG + 8 * me as u64, &one))?;
    } else {
        let mut got = vec![0u8; 8 * p];
        ck(
            "wait for the others to issue",
            c.ep.wait_until(|| {
                c.ep.read_local(SM_FLAG, &mut got).is_ok()
                    && got.chunks(8).skip(1).all(|x| x[0] == 1)
            }),
        )?;
        issue(&mut hs)?;
    }
    let issued = t0.elapsed();
    ck("wait_sync_all", co.wait_sync_all(&mut hs))?;
    let took = t0.elapsed();
    let mut got = vec![0u8; n];
    ck("read", c.ep.read_local(SM_DST, &mut got))?;
    let want = pattern(5, 0, 0, 0, n);
    for (i, (&g, &w)) in got.iter().zip(&want).enumerate() {
        ensure(g == w, || {
            format!("broadcast #{i}: got {g:#x}, expected {w:#x}")
        })?;
    }
    if p > 1 && me == p - 1 {
        println!(
            "note: {n} broadcasts at {p} ranks: rank {me} had all {n} in flight at once \
             (issued in {:.2} s), all synced in {:.2} s",
            issued.as_secs_f64(),
            took.as_secs_f64()
        );
    }
    // The time is printed, not asserted: the test's watchdog bounds it, and how fast 65,536
    // collectives go is a benchmark figure (it depends on the conduit, the network and the
    // load), not a pass/fail criterion.
    Ok(())
}

/// Reduction steps inside core waits follow `AMSAFE`: rank 0 starts a reduce to itself
/// before the others enter, then waits in `Endpoint::wait_until` (a core wait, no coll call)
/// until every other rank synced its part (so its operand or partial is on its way, ahead of
/// what it sends next) and put a flag into its slot on rank 0, and a while longer. With a built-in
/// function (all are `AMSAFE`) the result is in its destination by then; with the suite's
/// client function (registered without `AMSAFE`) the destination is untouched until rank 0
/// syncs, and right after.
fn amsafe_in_core_waits(c: &Ctx<'_>) -> Verdict {
    const SRC: u64 = SM_SRC + 4096;
    const DST: u64 = SM_DST + 4096;
    let co = coll(c)?;
    let (me, p) = (c.rank(), c.size());
    let w = co.world();
    use crate::coll_oracle::OFn;
    let (sum, client) = (
        crate::coll_prop::fn_index(OFn::SumU64),
        crate::coll_prop::fn_index(OFn::Affine),
    );
    let word = |x: u64| x.to_ne_bytes();
    let affine_bytes = |a: [u64; 2]| [word(a[0]), word(a[1])].concat();
    for (round, (func, es, amsafe)) in [(sum, 8usize, true), (client, 16, false)]
        .into_iter()
        .enumerate()
    {
        // This test's flag value for the round, in every other rank's slot on rank 0.
        let tag = 0x5afe_0000 + round as u64;
        let (mine, want) = if amsafe {
            let n = u64::from(p);
            (
                word(u64::from(me) + 1).to_vec(),
                word(n * (n + 1) / 2).to_vec(),
            )
        } else {
            (
                affine_bytes(crate::coll_typed::affine(u64::from(me), 0)),
                affine_bytes(crate::coll_typed::affine_fold(0, u64::from(p), 0)),
            )
        };
        let fill = vec![0x5au8; es];
        ck("write", c.ep.write_local(SRC, &mine))?;
        ck("write", c.ep.write_local(DST, &fill))?;
        ck(
            "write",
            c.ep.write_local(SM_FLAG, &vec![0u8; 8 * p as usize]),
        )?;
        ck("barrier", c.ep.barrier())?;
        if me != 0 {
            // Rank 0 initiates first (it puts this round's tag into slot 0 here once its
            // call returned), so that the reduction cannot run inside its initiation.
            ck(
                "wait_until",
                c.ep.wait_until(|| {
                    let mut b = [0u8; 8];
                    c.ep.read_local(SM_FLAG, &mut b).is_ok() && u64::from_le_bytes(b) == tag
                }),
            )?;
        }
        let h = ck(
            "reduce_nb",
            // SAFETY: segment offsets only: no pointer address to keep valid.
            unsafe {
                co.reduce_nb(
                    w,
                    0,
                    Addr::Seg(DST),
                    Addr::Seg(SRC),
                    amnet::coll::Layout::block_cyclic(1, 0),
                    es,
                    p as usize,
                    func,
                    0,
                    f::IN_MYSYNC | f::OUT_MYSYNC | f::SINGLE,
                )
            },
        )?;
        let what = if amsafe {
            "built-in sum"
        } else {
            "client function"
        };
        if me == 0 {
            for r in 1..p {
                ck("put", c.ep.put(r, SM_FLAG, &tag.to_le_bytes()))?;
            }
            let all_told = || {
                (1..p).all(|r| {
                    let mut b = [0u8; 8];
                    c.ep.read_local(SM_FLAG + 8 * u64::from(r), &mut b).is_ok()
                        && u64::from_le_bytes(b) == tag
                })
            };
            let written = || {
                let mut b = vec![0u8; es];
                c.ep.read_local(DST, &mut b).is_ok() && b == want
            };
            // Then, with AMSAFE, until the result is written (2 s at most: a put may overtake
            // the data message it follows on some conduits); without, 50 ms more.
            let mut told: Option<Instant> = None;
            ck(
                "wait_until",
                c.ep.wait_until(|| {
                    if !all_told() {
                        return false;
                    }
                    let t = told.get_or_insert_with(Instant::now).elapsed();
                    if amsafe {
                        written() || t >= Duration::from_secs(2)
                    } else {
                        t >= Duration::from_millis(50)
                    }
                }),
            )?;
            let mut got = vec![0u8; es];
            ck("read", c.ep.read_local(DST, &mut got))?;
            // Synced, and the barrier below reached, before any verdict: a failure leaves
            // nothing in flight and no rank waiting.
            ck("wait_sync", co.wait_sync(h))?;
            let during = if amsafe {
                ensure(got == want, || {
                    format!("{what}: the reduce had not written its result while rank 0 waited in wait_until: {got:02x?}")
                })
            } else {
                ensure(got == fill, || {
                    format!("{what} (not AMSAFE): the reduce wrote its result while rank 0 waited in wait_until, outside every coll call")
                })
            };
            ck("read", c.ep.read_local(DST, &mut got))?;
            ck("barrier", c.ep.barrier())?;
            during?;
            ensure(got == want, || {
                format!("{what}: the reduce gave {got:02x?}, want {want:02x?}")
            })?;
            continue;
        } else {
            // A non-root is done once its operand (or its subtree's partial) is sent.
            ck("wait_sync", co.wait_sync(h))?;
            ck(
                "put",
                c.ep.put(0, SM_FLAG + 8 * u64::from(me), &tag.to_le_bytes()),
            )?;
        }
        ck("barrier", c.ep.barrier())?;
    }
    Ok(())
}

/// Collectives move along while a rank waits in the core (`Endpoint::wait_until`), not only in
/// coll calls: in a binomial broadcast from rank 0, every rank with children waits in
/// `wait_until` for a message from each leaf, sent once the leaf's broadcast completed, and
/// syncs its own handle only then. The leaves complete only if the waiting ranks forward.
/// (With the flat algorithm selected, nothing needs forwarding and the test passes too.)
fn progress_in_core_waits(c: &Ctx<'_>) -> Verdict {
    use crate::state::H_COUNT;
    let co = coll(c)?;
    let (me, n) = (c.rank(), c.size());
    // Binomial shape from root 0: rank v has children iff its lowest set bit (np's next power
    // of two for the root) is above 1 and v + 1 exists.
    let low = |v: u32| {
        if v == 0 {
            n.next_power_of_two()
        } else {
            v & v.wrapping_neg()
        }
    };
    let has_children = |v: u32| low(v) > 1 && v + 1 < n;
    let leaves: Vec<u32> = (1..n).filter(|&v| !has_children(v)).collect();
    ck("write_local", c.ep.write_local(SM_SRC, &[0xa5; 64]))?;
    if me == 0 {
        // The others are in `wait_until` (or their sync) before any data leaves the root.
        std::thread::sleep(Duration::from_millis(30));
    }
    let h = ck(
        "broadcast_nb",
        // SAFETY: segment offsets (and InPlace) only: no pointer address to keep valid.
        unsafe {
            co.broadcast_nb(
                co.world(),
                Addr::Seg(SM_DST),
                0,
                Addr::Seg(SM_SRC),
                64,
                f::IN_NOSYNC | f::OUT_MYSYNC | f::SINGLE,
            )
        },
    )?;
    if has_children(me) {
        let want = leaves.len() as u64;
        ck(
            "wait_until the leaves are done",
            c.ep.wait_until(|| c.st.hits.load(Ordering::Acquire) >= want),
        )?;
        ck("wait_sync", co.wait_sync(h))?;
    } else {
        ck("wait_sync", co.wait_sync(h))?;
        if me != 0 {
            for v in (0..n).filter(|&v| has_children(v)) {
                ck("done message", c.ep.request_short(v, H_COUNT, &[me]))?;
            }
        }
    }
    let mut b = [0u8; 64];
    ck("read_local", c.ep.read_local(SM_DST, &mut b))?;
    ensure(b == [0xa5; 64], || {
        "the broadcast's bytes did not arrive".into()
    })
}
