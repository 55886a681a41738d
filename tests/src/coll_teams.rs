//! Teams: creation (split, split_strided, split_2d, create), numbering, ids and translation,
//! destruction, the oracle property tests on every kind of team, collectives on two teams
//! from two threads of a rank at once, and the smp-native state of teams (host-scratch areas
//! taken over from destroyed teams, and teams beyond the areas).

use amnet::coll::raw::Collectives;
use amnet::coll::{Addr, Coll, Team};
use amnet::sync_modes::flags as f;
use amnet::Error;

use crate::coll::coll;
use crate::coll_prop::{gen_units, run_units, Caller, Form, World};
use crate::{ck, ensure, Ctx, Verdict};

/// Gather one u64 from every member of `team` (in team order).
fn gather_u64(co: &Coll, team: &Team, v: u64) -> Result<Vec<u64>, String> {
    // [this rank's value | every member's], on the heap for the whole collective.
    let mut buf = vec![0u8; 8 * (team.size() as usize + 1)];
    buf[..8].copy_from_slice(&v.to_le_bytes());
    let (s, d) = (buf.as_mut_ptr(), buf[8..].as_mut_ptr());
    // SAFETY: both ranges lie in `buf`, and are passed only to the gather below.
    let (s, d) = unsafe { (Addr::ptr(s), Addr::ptr(d)) };
    let fl = f::IN_MYSYNC | f::OUT_MYSYNC | f::SINGLE;
    // SAFETY: both ranges lie in `buf`, untouched and dropped only after the blocking gather
    // returned Ok (it completed here), leaked when it failed (it may still be in flight).
    if let Err(e) = unsafe { co.gather_all(team, d, s, 8, fl) } {
        std::mem::forget(buf);
        return Err(format!("gather_all on a team: {e}"));
    }
    Ok(buf[8..]
        .chunks(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
        .collect())
}

/// Broadcast `v` from team rank 0 of `team`; returns what arrived.
fn bcast_u64(co: &Coll, team: &Team, v: u64, at: u64) -> Result<u64, String> {
    let ep = co.endpoint();
    ck("write_local", ep.write_local(at, &v.to_le_bytes()))?;
    ck(
        "broadcast on a team",
        // SAFETY: segment offsets (and InPlace) only: no pointer address to keep valid.
        unsafe {
            co.broadcast(
                team,
                Addr::Seg(at + 8),
                0,
                Addr::Seg(at),
                8,
                f::ALLSYNC | f::SINGLE,
            )
        },
    )?;
    let mut b = [0u8; 8];
    ck("read_local", ep.read_local(at + 8, &mut b))?;
    Ok(u64::from_le_bytes(b))
}

fn usage_containing(what: &str, r: amnet::Result<impl std::fmt::Debug>, text: &str) -> Verdict {
    match r {
        Err(Error::Usage { detail, .. }) if detail.contains(text) => Ok(()),
        other => Err(format!(
            "{what}: expected a usage error about {text:?}, got {other:?}"
        )),
    }
}

/// Creation, numbering, ids, translation and destruction.
pub fn structure(c: &Ctx<'_>) -> Verdict {
    let co = coll(c)?;
    let (me, n) = (c.rank(), c.size());
    let world = co.world().clone();
    ensure(
        world.rank() == me && world.size() == n && world.id() == 0,
        || format!("world team {world:?}"),
    )?;

    // MPI-style split: parity colors, keys that reverse the order.
    let key = -i32::try_from(me).unwrap_or(0);
    let half = ck("split", co.split(&world, Some(me % 2), key))?.ok_or("no parity team")?;
    let mine: Vec<u32> = (0..n).filter(|r| r % 2 == me % 2).rev().collect();
    ensure(half.members() == mine.as_slice(), || {
        format!(
            "parity team members {:?}, expected {mine:?}",
            half.members()
        )
    })?;
    let pos = mine.iter().position(|&r| r == me).unwrap_or(usize::MAX);
    ensure(half.rank() as usize == pos, || {
        format!("parity team rank {}, expected {pos}", half.rank())
    })?;
    ensure(half.translate(half.rank(), &world) == Some(me), || {
        "translate to the world".to_string()
    })?;
    // A rank of the other parity is not in this team.
    let other = me ^ 1;
    if other < n {
        ensure(world.translate(other, &half).is_none(), || {
            format!("rank {other} of the other parity translated into this team")
        })?;
    }
    // Ids: the same on every member, different between the two halves.
    let ids = gather_u64(co, &world, half.id())?;
    for (r, &id) in ids.iter().enumerate() {
        let same = r % 2 == me as usize % 2;
        ensure((id == half.id()) == same && id != 0, || {
            format!("rank {r} has team id {id:#x}, this rank {:#x}", half.id())
        })?;
    }
    let got = bcast_u64(co, &half, u64::from(me), 0)?;
    ensure(got == u64::from(half.members()[0]), || {
        format!("broadcast on the parity team gave {got}")
    })?;

    // A rank passing no color gets no team.
    let color = (me % 3 != 0).then_some(7);
    let t = ck("split with no color", co.split(&world, color, 0))?;
    ensure(t.is_some() == color.is_some(), || {
        format!("team {t:?} for color {color:?}")
    })?;

    // Strided with a negative stride: every second rank from the last, in reverse.
    let size = i64::from(n.div_ceil(2));
    let strided = ck(
        "split_strided",
        co.split_strided(&world, i64::from(n) - 1, -2, size),
    )?;
    let want: Vec<u32> = (0..n).rev().step_by(2).collect();
    match &strided {
        Some(t) => ensure(t.members() == want.as_slice(), || {
            format!("strided members {:?}, expected {want:?}", t.members())
        })?,
        None => ensure(!want.contains(&me), || "no strided team".to_string())?,
    }
    // An invalid triplet is the same error on every rank.
    usage_containing(
        "invalid triplet",
        co.split_strided(&world, 0, i64::from(n), 2),
        "outside",
    )?;

    // 2-D: rows of 3; this rank's number in its row is its x, in its column its y.
    let (row, col) = ck("split_2d", co.split_2d(&world, 3))?;
    ensure(row.rank() == me % 3 && col.rank() == me / 3, || {
        format!("row rank {} column rank {}", row.rank(), col.rank())
    })?;
    ensure(row.id() != col.id(), || {
        "row and column share an id".to_string()
    })?;

    // From an explicit list: the world reversed.
    let list: Vec<u32> = (0..n).rev().collect();
    let rev = ck("create", co.create(&world, &list))?.ok_or("no created team")?;
    ensure(rev.rank() == n - 1 - me, || {
        format!("reversed rank {}", rev.rank())
    })?;
    usage_containing("create twice", co.create(&world, &[0, 0]), "twice")?;
    ck("team barrier", co.barrier(&rev))?;

    // Destruction.
    ck("destroy", co.destroy(&half))?;
    usage_containing(
        "broadcast on a destroyed team",
        // SAFETY: segment offsets (and InPlace) only: no pointer address to keep valid.
        unsafe {
            co.broadcast(
                &half,
                Addr::Seg(64),
                0,
                Addr::Seg(0),
                8,
                f::ALLSYNC | f::SINGLE,
            )
        },
        "destroyed",
    )?;
    usage_containing("destroy the world", co.destroy(&world), "world")?;
    for t in [Some(rev), Some(row), Some(col), strided, t]
        .into_iter()
        .flatten()
    {
        ck("destroy", co.destroy(&t))?;
    }
    Ok(())
}

/// The oracle property sequence on a team.
fn prop_on(c: &Ctx<'_>, co: &Coll, team: &Team, base: u64, calls: usize) -> Verdict {
    let w = World::new(vec![1; team.size() as usize]);
    let seed = crate::coll_prop::seed(base + u64::from(c.size()));
    let units = gen_units(seed, &w, calls, &[Form::Single, Form::Multi]);
    run_units(
        &Caller {
            ep: c.ep,
            coll: co,
            team,
            w: &w,
            seed,
        },
        &units,
    )
    .map_err(|e| format!("on team {team:?}: {e}"))
}

/// The oracle property tests on split, strided (negative stride), 2-D and created teams.
pub fn property(c: &Ctx<'_>) -> Verdict {
    let co = coll(c)?;
    let (me, n) = (c.rank(), c.size());
    let world = co.world().clone();
    let key = -i32::try_from(me).unwrap_or(0);
    let half = ck("split", co.split(&world, Some(me % 2), key))?.ok_or("no parity team")?;
    prop_on(c, co, &half, 0x7EA1, 40)?;
    // Strided, reversed: ranks not in it sit this one out.
    let strided = ck(
        "split_strided",
        co.split_strided(&world, i64::from(n) - 1, -1, i64::from(n.div_ceil(2))),
    )?;
    if let Some(t) = &strided {
        prop_on(c, co, t, 0x7EA2, 40)?;
    }
    let (row, col) = ck("split_2d", co.split_2d(&world, 2))?;
    prop_on(c, co, &row, 0x7EA3, 30)?;
    prop_on(c, co, &col, 0x7EA4, 30)?;
    let list: Vec<u32> = (0..n).map(|i| (i * 3 + 1) % n).collect();
    let list = if is_permutation(&list, n) {
        list
    } else {
        (0..n).rev().collect()
    };
    let made = ck("create", co.create(&world, &list))?.ok_or("no created team")?;
    prop_on(c, co, &made, 0x7EA5, 40)?;
    for t in [Some(half), strided, Some(row), Some(col), Some(made)]
        .into_iter()
        .flatten()
    {
        ck("destroy", co.destroy(&t))?;
    }
    Ok(())
}

fn is_permutation(v: &[u32], n: u32) -> bool {
    let mut s: Vec<u32> = v.to_vec();
    s.sort_unstable();
    s == (0..n).collect::<Vec<u32>>()
}

/// Collectives on a rank's row and column teams from two threads at once.
pub fn concurrent(c: &Ctx<'_>) -> Verdict {
    let co = coll(c)?;
    let world = co.world().clone();
    let (row, col) = ck("split_2d", co.split_2d(&world, 2))?;
    let run = |team: &Team, at: u64| -> Verdict {
        for i in 0..50u64 {
            let v = u64::from(team.members()[0]) * 1000 + i;
            let mine = if team.rank() == 0 { v } else { u64::MAX };
            let got = bcast_u64(co, team, mine, at)?;
            ensure(got == v, || {
                format!("round {i} on {team:?}: got {got}, expected {v}")
            })?;
        }
        Ok(())
    };
    let (a, b) = std::thread::scope(|s| {
        let a = s.spawn(|| run(&row, 0));
        let b = s.spawn(|| run(&col, 4096));
        (a.join(), b.join())
    });
    a.map_err(|_| "the row thread panicked".to_string())??;
    b.map_err(|_| "the column thread panicked".to_string())??;
    // Teams made from the row and from the column by two threads at once (where the ranks
    // share memory, the two creations must not take the same host-scratch area), then used
    // from both threads at once.
    // Four teams a thread kept alive (more than the areas there are for both threads
    // together: the later ones run the message algorithms), then destroyed.
    let make_and_use = |parent: &Team, at: u64| -> Verdict {
        let mut kept = Vec::new();
        for _ in 0..4 {
            let t = ck("split", co.split(parent, Some(0), 0))?.ok_or("no team")?;
            run(&t, at)?;
            kept.push(t);
        }
        for t in kept {
            ck("destroy", co.destroy(&t))?;
        }
        Ok(())
    };
    let (a, b) = std::thread::scope(|s| {
        let a = s.spawn(|| make_and_use(&row, 0));
        let b = s.spawn(|| make_and_use(&col, 4096));
        (a.join(), b.join())
    });
    a.map_err(|_| "the row creation thread panicked".to_string())??;
    b.map_err(|_| "the column creation thread panicked".to_string())??;
    ck("destroy", co.destroy(&row))?;
    ck("destroy", co.destroy(&col))
}

/// `calls` broadcasts from team rank 0 and gathers on `team`, every value new (`tag`
/// distinguishes teams and rounds), each checked on every member, then a barrier.
fn traffic(co: &Coll, team: &Team, tag: u64, calls: u64) -> Verdict {
    let me = u64::from(team.rank());
    for i in 0..calls {
        let v = (tag << 32) | (i << 8);
        let got = bcast_u64(co, team, v | me, 0)?;
        ensure(got == v, || {
            format!("{team:?} call {i}: broadcast gave {got:#x}, expected {v:#x}")
        })?;
        let all = gather_u64(co, team, v | me)?;
        for (r, &x) in all.iter().enumerate() {
            ensure(x == v | r as u64, || {
                format!("{team:?} call {i}: gathered {x:#x} from team rank {r}")
            })?;
        }
    }
    ck("team barrier", co.barrier(team))
}

/// Whether `team`'s 8-byte broadcast runs the smp-native algorithm.
fn on_shm(co: &Coll, team: &Team) -> Result<bool, String> {
    let alg = ck(
        "selected",
        co.selected(team, "broadcast", 8, f::ALLSYNC | f::SINGLE),
    )?;
    Ok(alg == "shm")
}

/// Where the ranks share memory, every team of more than one member made while an area of the
/// host scratch is free runs the smp-native algorithms, on an area taken over from destroyed
/// teams of other members and other numbers of calls (their headers and barrier words must
/// not pass for the new team's); teams made while no area is free run the message algorithms,
/// correctly, and a destroyed team's area serves the next team.
pub fn areas(c: &Ctx<'_>) -> Verdict {
    let co = coll(c)?;
    let (me, n) = (c.rank(), c.size());
    let world = co.world().clone();
    let shm = on_shm(co, &world)?;
    // With a hierarchy (several hosts that share memory each), the teams whose members share
    // one host run shm too.
    let hier = ck(
        "selected",
        co.selected(&world, "barrier", 0, f::ALLSYNC | f::SINGLE),
    )? == "hier";
    let hosts = ck("host_map", c.ep.host_map())?;
    let one_host = |team: &Team| {
        let h = hosts.host_of(team.members()[0]).ok();
        team.members().iter().all(|&r| hosts.host_of(r).ok() == h)
    };
    let want = |team: &Team| -> Verdict {
        let got = on_shm(co, team)?;
        let expect = team.size() > 1 && (shm || (hier && one_host(team)));
        ensure(got == expect, || {
            format!(
                "{team:?} runs shm: {got}, expected {expect} (the world: shm {shm}, hier {hier})"
            )
        })
    };
    for round in 0..6u64 {
        // Parity teams of different lengths of use, then the world reversed (it takes the
        // area the parity teams left, at the larger of their high waters), then rows.
        let half = ck("split", co.split(&world, Some(me % 2), 0))?.ok_or("no parity team")?;
        want(&half)?;
        traffic(co, &half, round * 16 + 1, 9 + 2 * u64::from(me % 2) + round)?;
        ck("destroy", co.destroy(&half))?;
        let list: Vec<u32> = (0..n).rev().collect();
        let rev = ck("create", co.create(&world, &list))?.ok_or("no created team")?;
        want(&rev)?;
        traffic(co, &rev, round * 16 + 2, 20 + round)?;
        let (row, col) = ck("split_2d", co.split_2d(&world, 2))?;
        want(&row)?;
        want(&col)?;
        traffic(co, &row, round * 16 + 3, 3)?;
        traffic(co, &col, round * 16 + 4, 4)?;
        for t in [rev, row, col] {
            ck("destroy", co.destroy(&t))?;
        }
    }
    // Teams kept alive until the areas run out: the later ones take the message algorithms.
    let mut kept = Vec::new();
    let mut fell_back = false;
    for i in 0..24u64 {
        let t = ck("create", co.create(&world, &(0..n).collect::<Vec<u32>>()))?
            .ok_or("no created team")?;
        let on = on_shm(co, &t)?;
        ensure(!(on && fell_back), || {
            format!("team {i} runs shm after an earlier one fell back")
        })?;
        fell_back |= !on;
        traffic(co, &t, 0x100 + i, 3)?;
        kept.push(t);
    }
    ensure(!shm || n == 1 || fell_back, || {
        "24 teams alive at once all run shm: the host scratch has no end".to_string()
    })?;
    let first = kept.first().map(|t| on_shm(co, t)).transpose()?;
    ensure(first == Some(shm && n > 1), || {
        format!("the first kept team runs shm: {first:?}")
    })?;
    for t in kept.drain(..) {
        ck("destroy", co.destroy(&t))?;
    }
    let t =
        ck("create", co.create(&world, &(0..n).collect::<Vec<u32>>()))?.ok_or("no created team")?;
    want(&t)?;
    traffic(co, &t, 0x200, 5)?;
    ck("destroy", co.destroy(&t))
}
