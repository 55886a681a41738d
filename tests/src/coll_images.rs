//! Nested jobs for the collectives: the property test with 1-3 images per rank
//! (`--coll-images SEED`), and the checked-mode and hang-watchdog scenarios.

use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use amnet::coll::raw::Collectives;
use amnet::coll::{Addr, Coll, Op, RedOp};
use amnet::sync_modes::flags as f;
use amnet::{Endpoint, Error};
use amnet_launch::LaunchOptions;

use crate::coll_prop::{fn_table, gen_units, Caller, Form, Rng, World};
use crate::coll_typed::{affine, affine_fold, compose};
use crate::{handler_table, State, Verdict};

/// The suite entry: rank 0 runs the multi-image property test as a nested job of the same
/// size as the suite's (two seeds).
pub fn from_suite(c: &crate::Ctx<'_>) -> Verdict {
    if c.rank() != 0 {
        return Ok(());
    }
    let base = crate::coll_prop::seed(0x1A6E + u64::from(c.size()));
    for seed in [base, base + 1] {
        let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
        let opts = LaunchOptions {
            ranks: c.size(),
            program: exe.to_string_lossy().into_owned(),
            args: vec!["--coll-images".into(), seed.to_string()],
            timeout: Some(Duration::from_secs(150)),
            conduit: c.ep.conduit_name().parse().map_err(|e| format!("{e}"))?,
            grace: Duration::from_secs(2),
        };
        let mut log = Vec::new();
        let t0 = Instant::now();
        let code = amnet_launch::launch_job_with_log(&opts, &mut |m: &str| log.push(m.to_string()))
            .map_err(|e| format!("launch: {e}"))?;
        if code != 0 {
            return Err(format!(
                "the multi-image job (seed {seed}, images {:?}) exited with {code} after {:?}: {}",
                images_for(seed, c.size()),
                t0.elapsed(),
                log.join("\n")
            ));
        }
    }
    Ok(())
}

/// Images per rank for `seed`.
pub fn images_for(seed: u64, ranks: u32) -> Vec<u32> {
    #[allow(clippy::cast_possible_truncation)] // < 3
    (0..ranks)
        .map(|r| 1 + ((seed + u64::from(r)) % 3) as u32)
        .collect()
}

/// One rank of the multi-image job: returns the exit code.
pub fn main_images(seed: u64) -> i32 {
    let ep = match amnet::init() {
        Ok(ep) => ep,
        Err(e) => {
            say!("amnet-testsuite: init: {e}");
            return 2;
        }
    };
    let st = Arc::new(State::new(ep.size()));
    if let Err(e) = handler_table(&st).and_then(|t| ep.attach(t, crate::SEG_LEN)) {
        say!("amnet-testsuite: attach: {e}");
        return 2;
    }
    let w = World::new(images_for(seed, ep.size()));
    let me = ep.rank() as usize;
    let n_local = w.images[me] as usize;
    let units = gen_units(
        seed,
        &w,
        160,
        &[Form::Single, Form::Multi, Form::AllThreads],
    );
    let bar = Barrier::new(n_local);
    let fail = |img: usize, e: String| -> ! {
        say!("amnet-testsuite: multi-image job, rank {me} image {img}: {e}");
        ep.exit(1)
    };
    std::thread::scope(|sc| {
        for li in 0..n_local {
            let (ep, w, units, bar) = (ep.clone(), &w, &units, &bar);
            sc.spawn(move || {
                let img = w.first[me] + li;
                #[allow(clippy::cast_possible_truncation)]
                let co = match Coll::init(&ep, Some(&w.images), img as u32, &fn_table()) {
                    Ok(c) => c,
                    Err(e) => fail(img, format!("Coll::init: {e}")),
                };
                if li == 0 {
                    // LOCAL single-address without ALL_THREADS is refused with several images.
                    if w.multi() {
                        // SAFETY: segment offsets (and InPlace) only: no pointer address to keep valid.
                        let r = unsafe {
                            co.broadcast(
                                co.world(),
                                Addr::Seg(0),
                                0,
                                Addr::Seg(64),
                                8,
                                f::ALLSYNC | f::LOCAL,
                            )
                        };
                        if !matches!(r, Err(Error::Usage { .. })) {
                            fail(
                                img,
                                format!("LOCAL single-address call with several images: {r:?}"),
                            );
                        }
                    }
                }
                let caller = Caller {
                    ep: &ep,
                    coll: &co,
                    team: co.world(),
                    w,
                    seed,
                };
                let mut r = Rng(seed ^ ((img as u64) << 32) ^ 0x1ace);
                for u in units {
                    bar.wait();
                    if u.all_threads || li == 0 {
                        if let Err(e) = caller.run_unit(u, &mut r) {
                            fail(img, e);
                        }
                    }
                    bar.wait();
                }
                // The typed helpers from every image's thread (ALL_THREADS under the hood).
                let ni = w.nimages() as u64;
                let s = co.reduce_to_all_typed(RedOp::Sum, img as u64 + 1, f::ALLSYNC);
                if s.as_ref().ok() != Some(&(ni * (ni + 1) / 2)) {
                    fail(img, format!("reduce_to_all_typed over {ni} images: {s:?}"));
                }
                let x = co.prefix_reduce_typed(RedOp::Sum, 1u64, false, f::MYSYNC);
                if x.as_ref().ok() != Some(&(img as u64 + 1)) {
                    fail(img, format!("prefix_reduce_typed: {x:?}"));
                }
                bar.wait();
                if let Err(e) = typed_views(&co, w, me, li, bar) {
                    fail(img, e);
                }
                if li == 0 {
                    if let Err(e) = m_forms(&ep, &co, w, me) {
                        fail(img, e);
                    }
                }
                bar.wait();
                if let Err(e) = all_threads_forms(&ep, &co, w, me, li, bar) {
                    fail(img, e);
                }
                bar.wait();
                if let Err(e) = all_threads_reductions(&ep, &co, w, me, li, bar) {
                    fail(img, e);
                }
                bar.wait();
                if let Err(e) = disagreeing_images(&ep, &co, w, me, li) {
                    fail(img, e);
                }
                bar.wait();
                if let Err(e) = mixed_callers(&ep, &co, w, me, li) {
                    fail(img, e);
                }
                if let Err(e) = image_barrier(&ep, &co, w, img, seed) {
                    fail(img, e);
                }
            });
        }
    });
    if let Err(e) = ep.barrier() {
        say!("amnet-testsuite: final barrier: {e}");
        return 1;
    }
    0
}

/// The typed API with several images per rank. The ranks view (`Coll::team`): one
/// representative thread per rank calls, with ranks as participants, while the other image
/// threads make no call (a reduction, a closure reduction, a broadcast and a split team). The
/// images view (`Coll::team_images`): every image thread calls, with images as participants.
fn typed_views(co: &Coll, w: &World, me: usize, li: usize, bar: &Barrier) -> Verdict {
    let ranks = co.team(co.world());
    let p = u64::from(ranks.size());
    let r = me as u64;
    if li == 0 {
        let e = |what: &str, x: Error| format!("typed ranks view, representative: {what}: {x}");
        if ranks.rank() as usize != me || ranks.size() as usize != w.images.len() {
            return Err(format!(
                "typed ranks view: rank {} of {}",
                ranks.rank(),
                ranks.size()
            ));
        }
        let mut s = [0u64; 2];
        ranks
            .reduce_to_all(&[r + 1, 1], &mut s, Op::sum())
            .map_err(|x| e("reduce_to_all", x))?;
        if s != [p * (p + 1) / 2, p] {
            return Err(format!("typed ranks view: reduce_to_all gave {s:?}"));
        }
        // Rank order through an associative, non-commutative closure.
        let mut d = [[0u64; 2]];
        ranks
            .reduce_to_all(&[affine(r, 0)], &mut d, Op::custom(compose))
            .map_err(|x| e("reduce_to_all with a closure", x))?;
        let want = affine_fold(0, p, 0);
        if d[0] != want {
            return Err(format!(
                "typed ranks view: closure gave {:?}, want {want:?}",
                d[0]
            ));
        }
        let root = ranks.size() - 1;
        let mut b = [if ranks.rank() == root { 0x5eed } else { 0u64 }; 3];
        ranks
            .broadcast(&mut b, root)
            .map_err(|x| e("broadcast", x))?;
        if b != [0x5eed; 3] {
            return Err(format!("typed ranks view: broadcast gave {b:?}"));
        }
        let half = ranks
            .split(Some(ranks.rank() % 2), 0)
            .map_err(|x| e("split", x))?
            .ok_or("typed ranks view: no parity team")?;
        let mut hs = [0u64];
        half.reduce_to_all(&[r], &mut hs, Op::sum())
            .map_err(|x| e("reduce_to_all on the parity team", x))?;
        let want: u64 = (0..p).filter(|i| i % 2 == r % 2).sum();
        if hs[0] != want {
            return Err(format!(
                "typed ranks view: parity team sum {}, want {want}",
                hs[0]
            ));
        }
        half.destroy().map_err(|x| e("destroy", x))?;
    }
    bar.wait();
    // Every image thread calls on the images view.
    let images = co.team_images(co.world());
    let ni = w.nimages() as u64;
    let img = (w.first[me] + li) as u64;
    let e = |what: &str, x: Error| format!("typed images view, image {img}: {what}: {x}");
    if u64::from(images.rank()) != img || u64::from(images.size()) != ni {
        return Err(format!(
            "typed images view: participant {} of {}, expected {img} of {ni}",
            images.rank(),
            images.size()
        ));
    }
    let mut s = [0u64];
    images
        .reduce_to_all(&[img + 1], &mut s, Op::sum())
        .map_err(|x| e("reduce_to_all", x))?;
    if s[0] != ni * (ni + 1) / 2 {
        return Err(format!("typed images view: reduce_to_all gave {}", s[0]));
    }
    #[allow(clippy::cast_possible_truncation)] // < 2^32 images
    let mut g = vec![0u32; ni as usize];
    #[allow(clippy::cast_possible_truncation)]
    images
        .gather_all(&[img as u32], &mut g)
        .map_err(|x| e("gather_all", x))?;
    #[allow(clippy::cast_possible_truncation)]
    let want: Vec<u32> = (0..ni as u32).collect();
    if g != want {
        return Err(format!("typed images view: gather_all gave {g:?}"));
    }
    let mut sc = [[0u64; 2]];
    images
        .scan(&[affine(img, 1)], &mut sc, Op::custom(compose))
        .map_err(|x| e("scan with a closure", x))?;
    let want = affine_fold(0, img + 1, 1);
    if sc[0] != want {
        return Err(format!(
            "typed images view: scan gave {:?}, want {want:?}",
            sc[0]
        ));
    }
    Ok(())
}

/// Where `mixed_callers` works: above the property test's slots.
const MIX: u64 = (crate::coll_prop::SLOTS * crate::coll_prop::SLOT) as u64;

/// Representative broadcasts `mixed_callers` has issued on this rank (one job per process).
static MIX_REPS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// ALL_THREADS and representative calls interleaved with no barrier between the local
/// images: image 0 of each rank runs ahead (issuing its ALL_THREADS gather_all, then a
/// representative broadcast, six times), the others lag and must still join the right
/// gather_alls.
///
/// The client's part of the ordering rule: every rank must initiate the collectives in the
/// same order, so a lagging image may not start the (k+1)-th gather_all, nor after the last
/// one the collective that follows (the image barrier), before image 0 has issued the k-th
/// representative broadcast (otherwise that rank would order them the other way round). The lag alone (a sleep) does not guarantee it on a loaded machine; the wait on
/// `MIX_REPS` does.
fn mixed_callers(ep: &Endpoint, co: &Coll, w: &World, me: usize, li: usize) -> Verdict {
    use std::sync::atomic::Ordering;
    let k_max = 6u64;
    let ni = w.nimages() as u64;
    let img = (w.first[me] + li) as u64;
    let e = |what: &str, x: Error| format!("mixed callers: {what}: {x}");
    if me == 0 && li == 0 {
        for k in 0..k_max {
            ep.write_local(MIX + 8 * k, &(0xB0 + k).to_le_bytes())
                .map_err(|x| e("write", x))?;
        }
    }
    let src = |k: u64| MIX + 4096 + (k * 3 + li as u64) * 8;
    let dst = |k: u64| MIX + 65536 + (k * 3 + li as u64) * 8 * ni;
    let mut hs = Vec::new();
    for k in 0..k_max {
        if li != 0 {
            std::thread::sleep(Duration::from_millis(li as u64 * 2 + k % 2));
            wait_reps(k)?;
        }
        ep.write_local(src(k), &(img * 1000 + k).to_le_bytes())
            .map_err(|x| e("write", x))?;
        let fl = f::IN_MYSYNC | f::OUT_MYSYNC;
        hs.push(
            // SAFETY: segment offsets (and InPlace) only: no pointer address to keep valid.
            unsafe {
                co.gather_all_nb(
                    co.world(),
                    Addr::Seg(dst(k)),
                    Addr::Seg(src(k)),
                    8,
                    fl | f::LOCAL | f::ALL_THREADS,
                )
            }
            .map_err(|x| e("gather_all_nb", x))?,
        );
        if li == 0 {
            hs.push(
                // SAFETY: segment offsets (and InPlace) only: no pointer address to keep valid.
                unsafe {
                    co.broadcast_nb(
                        co.world(),
                        Addr::Seg(MIX + 1024 + 8 * k),
                        0,
                        Addr::Seg(MIX + 8 * k),
                        8,
                        fl | f::SINGLE,
                    )
                }
                .map_err(|x| e("broadcast_nb", x))?,
            );
            MIX_REPS.store(k + 1, Ordering::Release);
        }
    }
    // The same for what follows: no lagging image initiates its next collective (the image
    // barrier) before image 0 issued its last representative broadcast.
    if li != 0 {
        wait_reps(k_max)?;
    }
    co.wait_sync_all(&mut hs)
        .map_err(|x| e("wait_sync_all", x))?;
    let mut b = [0u8; 8];
    for k in 0..k_max {
        ep.read_local(MIX + 1024 + 8 * k, &mut b)
            .map_err(|x| e("read", x))?;
        // Only image 0 synced the representative broadcasts; the others may finish first.
        if li == 0 && u64::from_le_bytes(b) != 0xB0 + k {
            return Err(format!(
                "mixed callers: representative broadcast #{k} delivered {:#x}",
                u64::from_le_bytes(b)
            ));
        }
        #[allow(clippy::cast_possible_truncation)] // 8 * images, small
        let mut v = vec![0u8; (8 * ni) as usize];
        ep.read_local(dst(k), &mut v).map_err(|x| e("read", x))?;
        for (j, c) in v.chunks(8).enumerate() {
            let got = u64::from_le_bytes(c.try_into().unwrap_or([0; 8]));
            if got != j as u64 * 1000 + k {
                return Err(format!(
                    "mixed callers: gather_all #{k} on image {img}: block {j} holds {got}, \
                     expected {}",
                    j as u64 * 1000 + k
                ));
            }
        }
    }
    Ok(())
}

/// Wait (60 s at most) until image 0 of this rank has issued `k` representative broadcasts.
fn wait_reps(k: u64) -> Verdict {
    use std::sync::atomic::Ordering;
    let t0 = std::time::Instant::now();
    while MIX_REPS.load(Ordering::Acquire) < k {
        if t0.elapsed() > Duration::from_secs(60) {
            return Err(format!(
                "mixed callers: image 0 did not issue broadcast #{} within 60 s",
                k - 1
            ));
        }
        std::thread::sleep(Duration::from_micros(100));
    }
    Ok(())
}

/// Where `m_forms` keeps its sources and destinations: image `i`'s at `MFORM_SRC` and
/// `MFORM_DST` plus `(i - first image of its rank) * MFORM_STRIDE` (the same list on every
/// rank, one address per image of the job).
const MFORM_SRC: u64 = MIX + (1 << 20);
const MFORM_DST: u64 = MFORM_SRC + 3 * MFORM_STRIDE;
const MFORM_STRIDE: u64 = 128 << 10;

/// The `m` forms of the data movement operations, from each rank's representative thread,
/// every sync mode, with blocks that fit the header line, the data slot and more than one
/// image per rank's run: every image's destination checked, and, where the operation's rank
/// form selects `shm` on the world team, not one active message sent by the call.
fn m_forms(ep: &Endpoint, co: &Coll, w: &World, me: usize) -> Verdict {
    let ni = w.nimages();
    let local = w.first[me]..w.first[me + 1];
    let host = |i: usize| (0..w.ranks()).rfind(|&r| w.first[r] <= i).unwrap_or(0);
    let at = |base: u64, i: usize| base + (i - w.first[host(i)]) as u64 * MFORM_STRIDE;
    let srcs: Vec<Addr> = (0..ni).map(|i| Addr::Seg(at(MFORM_SRC, i))).collect();
    let dsts: Vec<Addr> = (0..ni).map(|i| Addr::Seg(at(MFORM_DST, i))).collect();
    let shm_op = |op: &str, bytes: usize| -> Result<bool, String> {
        let a = co
            .selected(co.world(), op, bytes, f::ALLSYNC)
            .map_err(|e| format!("m forms: selected {op}: {e}"))?;
        Ok(a == "shm")
    };
    // Byte `b` of image `i`'s block `j` in round `salt`.
    let pat = |salt: usize, i: usize, j: usize, b: usize| -> u8 {
        #[allow(clippy::cast_possible_truncation)] // masked
        let v = ((salt * 131 + i * 31 + j * 7 + b) & 0xff) as u8;
        v
    };
    let e = |what: String, x: Error| format!("m forms: {what}: {x}");
    let modes = [
        f::ALLSYNC,
        f::MYSYNC,
        f::NOSYNC,
        f::IN_ALLSYNC | f::OUT_NOSYNC,
        f::IN_NOSYNC | f::OUT_ALLSYNC,
    ];
    let mut salt = 0usize;
    for n in [8usize, 40, 1000] {
        for (mi, &mode) in modes.iter().enumerate() {
            for op in ["broadcast", "scatter", "gather", "gather_all", "exchange"] {
                salt += 1;
                let root = (salt * 5 + mi) % ni;
                let what = || format!("{op} of {n} B, flags {mode:#x}, root image {root}");
                // Every local image's source: ni blocks (a scatter root's and exchange's),
                // one for the others.
                for i in local.clone() {
                    let blocks = if matches!(op, "scatter" | "exchange") {
                        ni
                    } else {
                        1
                    };
                    let v: Vec<u8> = (0..blocks * n)
                        .map(|x| pat(salt, i, x / n, x % n))
                        .collect();
                    ep.write_local(at(MFORM_SRC, i), &v)
                        .map_err(|x| e(what(), x))?;
                    ep.write_local(at(MFORM_DST, i), &vec![0xEE; ni * n])
                        .map_err(|x| e(what(), x))?;
                }
                co.barrier(co.world()).map_err(|x| e(what(), x))?;
                let before = ep.stats().requests_sent.messages();
                #[allow(clippy::cast_possible_truncation)] // images fit u32
                let r32 = root as u32;
                let fl = mode | f::SINGLE;
                // SAFETY: segment offsets only: no pointer address to keep valid.
                let r = unsafe {
                    match op {
                        "broadcast" => co.broadcastm(co.world(), &dsts, r32, srcs[root], n, fl),
                        "scatter" => co.scatterm(co.world(), &dsts, r32, srcs[root], n, fl),
                        "gather" => co.gatherm(co.world(), r32, dsts[root], &srcs, n, fl),
                        "gather_all" => co.gather_allm(co.world(), &dsts, &srcs, n, fl),
                        _ => co.exchangem(co.world(), &dsts, &srcs, n, fl),
                    }
                };
                r.map_err(|x| e(what(), x))?;
                let sent = ep.stats().requests_sent.messages() - before;
                if shm_op(op, n)? && sent != 0 {
                    return Err(format!(
                        "m forms: {} sent {sent} active messages on a team whose collectives \
                         run smp-native",
                        what()
                    ));
                }
                if mode & f::OUT_NOSYNC != 0 {
                    // The call may return before its data is in place; the team barrier
                    // completes it.
                    co.barrier(co.world()).map_err(|x| e(what(), x))?;
                }
                // Each local image's destination: (source image, its block) per block.
                for j in local.clone() {
                    let want: Vec<(usize, usize)> = match op {
                        "broadcast" => vec![(root, 0)],
                        "scatter" => vec![(root, j)],
                        "gather" if j == root => (0..ni).map(|i| (i, 0)).collect(),
                        "gather" => Vec::new(),
                        "gather_all" => (0..ni).map(|i| (i, 0)).collect(),
                        _ => (0..ni).map(|i| (i, j)).collect(),
                    };
                    let mut got = vec![0u8; want.len() * n];
                    ep.read_local(at(MFORM_DST, j), &mut got)
                        .map_err(|x| e(what(), x))?;
                    for (k, &(i, blk)) in want.iter().enumerate() {
                        for b in 0..n {
                            let (g, x) = (got[k * n + b], pat(salt, i, blk, b));
                            if g != x {
                                return Err(format!(
                                    "m forms: {}: image {j}'s block {k} byte {b} is {g:#x}, \
                                     image {i}'s block {blk} holds {x:#x}",
                                    what()
                                ));
                            }
                        }
                    }
                }
                co.barrier(co.world()).map_err(|x| e(what(), x))?;
            }
        }
    }
    Ok(())
}

/// The single-address data movement operations under `ALL_THREADS` from every image thread,
/// each with its own source and destination (`LOCAL`), in three sync modes and two sizes:
/// every image's destination checked, and, where the operation's rank form selects `shm` on
/// the world team, no active message sent by the rank while its images are in the calls.
fn all_threads_forms(
    ep: &Endpoint,
    co: &Coll,
    w: &World,
    me: usize,
    li: usize,
    bar: &Barrier,
) -> Verdict {
    let ni = w.nimages();
    let img = w.first[me] + li;
    let src_at = MFORM_SRC + li as u64 * MFORM_STRIDE;
    let dst_at = MFORM_DST + li as u64 * MFORM_STRIDE;
    let shm_op = |op: &str, bytes: usize| -> Result<bool, String> {
        let a = co
            .selected(co.world(), op, bytes, f::ALLSYNC)
            .map_err(|e| format!("ALL_THREADS forms: selected {op}: {e}"))?;
        Ok(a == "shm")
    };
    let pat = |salt: usize, i: usize, j: usize, b: usize| -> u8 {
        #[allow(clippy::cast_possible_truncation)] // masked
        let v = ((salt * 151 + i * 37 + j * 11 + b) & 0xff) as u8;
        v
    };
    let e = |what: String, x: Error| format!("ALL_THREADS forms, image {img}: {what}: {x}");
    let mut salt = 0usize;
    for n in [8usize, 1000] {
        for (mi, &mode) in [f::ALLSYNC, f::MYSYNC, f::NOSYNC].iter().enumerate() {
            for op in ["broadcast", "scatter", "gather", "gather_all", "exchange"] {
                salt += 1;
                let root = (salt * 3 + mi) % ni;
                let what = || format!("{op} of {n} B, flags {mode:#x}, root image {root}");
                let blocks = if matches!(op, "scatter" | "exchange") {
                    ni
                } else {
                    1
                };
                let v: Vec<u8> = (0..blocks * n)
                    .map(|x| pat(salt, img, x / n, x % n))
                    .collect();
                ep.write_local(src_at, &v).map_err(|x| e(what(), x))?;
                ep.write_local(dst_at, &vec![0xEE; ni * n])
                    .map_err(|x| e(what(), x))?;
                #[allow(clippy::cast_possible_truncation)] // images fit u32
                let r32 = root as u32;
                let fl = mode | f::LOCAL | f::ALL_THREADS;
                let (s, d) = (Addr::Seg(src_at), Addr::Seg(dst_at));
                let label = format!("ALL_THREADS forms, image {img}: {}", what());
                images_call(ep, co, bar, shm_op(op, n)?, mode, &label, || {
                    // SAFETY: segment offsets only: no pointer address to keep valid.
                    unsafe {
                        match op {
                            "broadcast" => co.broadcast(co.world(), d, r32, s, n, fl),
                            "scatter" => co.scatter(co.world(), d, r32, s, n, fl),
                            "gather" => co.gather(co.world(), r32, d, s, n, fl),
                            "gather_all" => co.gather_all(co.world(), d, s, n, fl),
                            _ => co.exchange(co.world(), d, s, n, fl),
                        }
                    }
                })?;
                let want: Vec<(usize, usize)> = match op {
                    "broadcast" => vec![(root, 0)],
                    "scatter" => vec![(root, img)],
                    "gather" if img == root => (0..ni).map(|i| (i, 0)).collect(),
                    "gather" => Vec::new(),
                    "gather_all" => (0..ni).map(|i| (i, 0)).collect(),
                    _ => (0..ni).map(|i| (i, img)).collect(),
                };
                let mut got = vec![0u8; want.len() * n];
                ep.read_local(dst_at, &mut got).map_err(|x| e(what(), x))?;
                for (k, &(i, blk)) in want.iter().enumerate() {
                    for b in 0..n {
                        let (g, x) = (got[k * n + b], pat(salt, i, blk, b));
                        if g != x {
                            return Err(format!(
                                "ALL_THREADS forms: {}: image {img}'s block {k} byte {b} is \
                                 {g:#x}, image {i}'s block {blk} holds {x:#x}",
                                what()
                            ));
                        }
                    }
                }
                co.barrier_images(co.world()).map_err(|x| e(what(), x))?;
            }
        }
    }
    Ok(())
}

/// One `ALL_THREADS` call (`call`) from every image thread of the rank, after the images'
/// barrier and between meetings of the rank's image threads, so that the rank's requests sent
/// meanwhile are the call's: none where `shm` (its rank form selects `shm`). Under
/// `OUT_NOSYNC` the images' barrier then completes the call's data.
fn images_call(
    ep: &Endpoint,
    co: &Coll,
    bar: &Barrier,
    shm: bool,
    mode: u32,
    what: &str,
    call: impl FnOnce() -> Result<(), Error>,
) -> Verdict {
    let e = |x: Error| format!("{what}: {x}");
    co.barrier_images(co.world()).map_err(e)?;
    // Every local image reads the count after the barrier's messages and before any enters
    // the call, and again after every one left it.
    bar.wait();
    let before = ep.stats().requests_sent.messages();
    bar.wait();
    call().map_err(e)?;
    bar.wait();
    let sent = ep.stats().requests_sent.messages() - before;
    bar.wait();
    if shm && sent != 0 {
        return Err(format!(
            "{what}: sent {sent} active messages from rank {} on a team whose collectives run \
             smp-native",
            ep.rank()
        ));
    }
    if mode & f::OUT_NOSYNC != 0 {
        // The call may return before its data is in place; the images' barrier completes it.
        co.barrier_images(co.world()).map_err(e)?;
    }
    Ok(())
}

/// The reductions, scans and the barrier under `ALL_THREADS` from every image thread (u64
/// sums, `LOCAL` areas), in three sync modes and two vector lengths: every image's result
/// checked, and, where the operation's rank form selects `shm` on the world team, no active
/// message sent by the rank while its images are in the calls.
fn all_threads_reductions(
    ep: &Endpoint,
    co: &Coll,
    w: &World,
    me: usize,
    li: usize,
    bar: &Barrier,
) -> Verdict {
    use amnet::coll::builtin::builtin_index;
    use amnet::coll::{ElemType, Layout};
    let ni = w.nimages();
    let img = w.first[me] + li;
    let src_at = MFORM_SRC + li as u64 * MFORM_STRIDE;
    let dst_at = MFORM_DST + li as u64 * MFORM_STRIDE;
    // Whether the rank form of `op` runs smp-native here (a forced choice may say otherwise).
    let shm_op = |op: &str, bytes: usize| -> Result<bool, String> {
        let a = co
            .selected(co.world(), op, bytes, f::ALLSYNC)
            .map_err(|e| format!("ALL_THREADS reductions: selected {op}: {e}"))?;
        Ok(a == "shm")
    };
    let sum = builtin_index(RedOp::Sum, ElemType::U64)
        .ok_or_else(|| "ALL_THREADS reductions: no built-in u64 sum".to_string())?;
    let e = |what: String, x: Error| format!("ALL_THREADS reductions, image {img}: {what}: {x}");
    // Element k of image i's vector.
    let v = |i: usize, k: usize| (i as u64 + 1) * 1000 + k as u64;
    const SENTINEL: u64 = 0xDEAD_BEEF;
    let ops = [
        "reduce_elems_to_all",
        "reduce_elems",
        "scan_elems",
        "exclusive_scan_elems",
        "reduce_to_all",
        "prefix_reduce",
        "barrier",
    ];
    let mut round = 0usize;
    for count in [1usize, 300] {
        for &mode in &[f::ALLSYNC, f::MYSYNC, f::NOSYNC] {
            for op in ops {
                round += 1;
                let root = round % ni;
                let what = || format!("{op} of {count} u64, flags {mode:#x}, root image {root}");
                let words: Vec<u8> = (0..count).flat_map(|k| v(img, k).to_le_bytes()).collect();
                ep.write_local(src_at, &words).map_err(|x| e(what(), x))?;
                let fill: Vec<u8> = (0..count).flat_map(|_| SENTINEL.to_le_bytes()).collect();
                ep.write_local(dst_at, &fill).map_err(|x| e(what(), x))?;
                #[allow(clippy::cast_possible_truncation)] // images fit u32
                let r32 = root as u32;
                let fl = mode | f::LOCAL | f::ALL_THREADS;
                let (s, d) = (Addr::Seg(src_at), Addr::Seg(dst_at));
                let wt = co.world();
                // The array forms: one element per image, in image order.
                let lay = Layout::block_cyclic(1, 0);
                let bytes = if op == "barrier" { 0 } else { 8 * count };
                let label = format!("ALL_THREADS reductions, image {img}: {}", what());
                images_call(ep, co, bar, shm_op(op, bytes)?, mode, &label, || {
                    // SAFETY: segment offsets only: no pointer address to keep valid.
                    unsafe {
                        match op {
                            "reduce_elems_to_all" => {
                                co.reduce_elems_to_all(wt, d, s, 8, count, sum, 0, fl)
                            }
                            "reduce_elems" => co.reduce_elems(wt, r32, d, s, 8, count, sum, 0, fl),
                            "scan_elems" => co.scan_elems(wt, d, s, 8, count, sum, 0, fl),
                            "exclusive_scan_elems" => {
                                co.exclusive_scan_elems(wt, d, s, 8, count, sum, 0, fl)
                            }
                            "reduce_to_all" => co.reduce_to_all(wt, d, s, lay, 8, ni, sum, 0, fl),
                            "prefix_reduce" => {
                                co.prefix_reduce(wt, d, lay, s, lay, 8, ni, sum, 0, fl)
                            }
                            _ => co.barrier_images(wt),
                        }
                    }
                })?;
                // What the image's destination holds: element k's sum over `imgs`, or the
                // sentinel where it gets nothing.
                let total = |imgs: std::ops::Range<usize>, k: usize| imgs.map(|i| v(i, k)).sum();
                let want: Vec<u64> = match op {
                    "reduce_elems_to_all" => (0..count).map(|k| total(0..ni, k)).collect(),
                    "reduce_elems" if img == root => (0..count).map(|k| total(0..ni, k)).collect(),
                    "scan_elems" => (0..count).map(|k| total(0..img + 1, k)).collect(),
                    "exclusive_scan_elems" if img > 0 => {
                        (0..count).map(|k| total(0..img, k)).collect()
                    }
                    // The array forms: element 0 of the image's vector is its element.
                    "reduce_to_all" => vec![total(0..ni, 0)],
                    "prefix_reduce" => vec![total(0..img + 1, 0)],
                    "barrier" => Vec::new(),
                    _ => vec![SENTINEL; count],
                };
                let mut got = vec![0u8; want.len() * 8];
                ep.read_local(dst_at, &mut got).map_err(|x| e(what(), x))?;
                for (k, (c, &x)) in got.chunks(8).zip(&want).enumerate() {
                    let g = u64::from_le_bytes(c.try_into().unwrap_or([0; 8]));
                    if g != x {
                        return Err(format!(
                            "ALL_THREADS reductions: {}: image {img}'s element {k} is {g}, \
                             expected {x}",
                            what()
                        ));
                    }
                }
                co.barrier_images(co.world()).map_err(|x| e(what(), x))?;
            }
        }
    }
    Ok(())
}

/// Where the world's collectives run smp-native: an `ALL_THREADS` broadcast whose image
/// threads on one rank pass different sizes fails with `Usage` on every image of that rank,
/// and on the images that would read its contribution, and hangs nowhere; the next calls
/// work.
fn disagreeing_images(ep: &Endpoint, co: &Coll, w: &World, me: usize, li: usize) -> Verdict {
    let shm = co
        .selected(co.world(), "broadcast", 8, f::ALLSYNC)
        .map_err(|e| format!("disagreeing images: selected: {e}"))?
        == "shm";
    if !shm || !w.multi() {
        return Ok(());
    }
    let img = w.first[me] + li;
    let e = |what: &str, x: Error| format!("disagreeing images, image {img}: {what}: {x}");
    let (s, d) = (
        Addr::Seg(MFORM_SRC + li as u64 * MFORM_STRIDE),
        Addr::Seg(MFORM_DST + li as u64 * MFORM_STRIDE),
    );
    let fl = f::MYSYNC | f::LOCAL | f::ALL_THREADS;
    co.barrier_images(co.world()).map_err(|x| e("barrier", x))?;
    // Image threads of one rank pass 8, 16, ... bytes.
    // SAFETY: segment offsets only: no pointer address to keep valid.
    let r = unsafe { co.broadcast(co.world(), d, 0, s, 8 * (li + 1), fl) };
    match r {
        Err(Error::Usage { detail, .. }) if detail.contains("disagree") => {}
        Ok(()) if w.images[me] == 1 => {}
        other => {
            return Err(format!(
                "disagreeing images, image {img} (rank {me} hosts {}): the broadcast gave \
                 {other:?}",
                w.images[me]
            ))
        }
    }
    // The team goes on: a barrier and a broadcast that every image agrees on.
    co.barrier_images(co.world())
        .map_err(|x| e("barrier after", x))?;
    let v = 0x5eed_0000_u64 + 77;
    if img == 0 {
        ep.write_local(MFORM_SRC, &v.to_le_bytes())
            .map_err(|x| e("write", x))?;
    }
    // SAFETY: segment offsets only: no pointer address to keep valid.
    unsafe {
        co.broadcast(
            co.world(),
            d,
            0,
            s,
            8,
            f::ALLSYNC | f::LOCAL | f::ALL_THREADS,
        )
    }
    .map_err(|x| e("broadcast after", x))?;
    let mut got = [0u8; 8];
    let Addr::Seg(at) = d else {
        return Ok(());
    };
    ep.read_local(at, &mut got).map_err(|x| e("read", x))?;
    if u64::from_le_bytes(got) != v {
        return Err(format!(
            "disagreeing images, image {img}: the broadcast after brought {:#x}",
            u64::from_le_bytes(got)
        ));
    }
    co.barrier_images(co.world())
        .map_err(|x| e("barrier at the end", x))?;
    Ok(())
}

/// Where `image_barrier` keeps each image's round number, on rank 0.
const ROUNDS_AT: u64 = MIX + 256 * 1024;

/// `barrier_images` waits for every image thread of every rank: in each round every image
/// puts its round number into its slot on rank 0 (some after a delay), meets the others in
/// the barrier, and then reads every slot: none may be behind.
fn image_barrier(ep: &Endpoint, co: &Coll, w: &World, img: usize, seed: u64) -> Verdict {
    let ni = w.nimages();
    let e = |what: &str, x: Error| format!("barrier_images: {what}: {x}");
    for round in 1..=6u64 {
        // A different image arrives late in each round.
        if (seed + round) % ni as u64 == img as u64 {
            std::thread::sleep(Duration::from_millis(20));
        }
        ep.put(0, ROUNDS_AT + 8 * img as u64, &round.to_le_bytes())
            .map_err(|x| e("put", x))?;
        co.barrier_images(co.world()).map_err(|x| e("barrier", x))?;
        let mut v = vec![0u8; 8 * ni];
        ep.get(0, ROUNDS_AT, &mut v).map_err(|x| e("get", x))?;
        for (j, c) in v.chunks(8).enumerate() {
            let got = u64::from_le_bytes(c.try_into().unwrap_or([0; 8]));
            if got < round {
                return Err(format!(
                    "barrier_images round {round}: image {img} left the barrier while image \
                     {j} was at round {got}"
                ));
            }
        }
    }
    Ok(())
}

// ----- scenarios ----------------------------------------------------------------------------

pub(crate) fn attach_coll(ep: &Endpoint) -> Result<Coll, String> {
    let st = Arc::new(State::new(ep.size()));
    let t = handler_table(&st).map_err(|e| e.to_string())?;
    ep.attach(t, 1 << 20).map_err(|e| e.to_string())?;
    Coll::init(ep, None, 0, &fn_table()).map_err(|e| e.to_string())
}

/// AMNET_COLL_CHECK=1: a correct broadcast works; rank 1 calls scan_elems where the others
/// call reduce_elems_to_all: every rank must get a Mismatch naming both operations; then rank
/// 1 passes another root: every rank must get a Mismatch naming rank 1 and the root.
pub fn check_mismatch(ep: &Endpoint) -> Result<(), String> {
    let co = attach_coll(ep)?;
    let fl = f::ALLSYNC | f::SINGLE;
    if ep.rank() == 0 {
        ep.write_local(0, &[7u8; 8]).map_err(|e| e.to_string())?;
    }
    // SAFETY: segment offsets (and InPlace) only: no pointer address to keep valid.
    unsafe { co.broadcast(co.world(), Addr::Seg(64), 0, Addr::Seg(0), 8, fl) }
        .map_err(|e| format!("a matching broadcast in checked mode: {e}"))?;
    let mut got = [0u8; 8];
    ep.read_local(64, &mut got).map_err(|e| e.to_string())?;
    if got != [7u8; 8] {
        say!("rank {}: checked broadcast moved {got:?}", ep.rank());
        ep.exit(1);
    }
    // Rank 1 calls a different vector reduction: the report names both operations.
    let sum = crate::coll_prop::fn_index(crate::coll_oracle::OFn::SumU64);
    ep.write_local(128, &[1u8; 16]).map_err(|e| e.to_string())?;
    let (dst, src) = (Addr::Seg(256), Addr::Seg(128));
    let r = if ep.rank() == 1 {
        // SAFETY: segment offsets (and InPlace) only: no pointer address to keep valid.
        unsafe { co.scan_elems(co.world(), dst, src, 8, 2, sum, 0, fl) }
    } else {
        // SAFETY: segment offsets (and InPlace) only: no pointer address to keep valid.
        unsafe { co.reduce_elems_to_all(co.world(), dst, src, 8, 2, sum, 0, fl) }
    };
    match r {
        Err(Error::Mismatch { detail, .. })
            if detail.contains("operation = scan_elems")
                && detail.contains("reduce_elems_to_all") => {}
        other => {
            say!(
                "rank {}: scan_elems on rank 1 against reduce_elems_to_all gave {other:?}",
                ep.rank()
            );
            ep.exit(1);
        }
    }
    let root = u32::from(ep.rank() == 1);
    // SAFETY: segment offsets (and InPlace) only: no pointer address to keep valid.
    match unsafe { co.broadcast(co.world(), Addr::Seg(64), root, Addr::Seg(0), 8, fl) } {
        Err(Error::Mismatch { detail, .. })
            if detail.contains("rank 1") && detail.contains("root") =>
        {
            // Leave together after a pause, so a failing rank's code wins.
            std::thread::sleep(Duration::from_millis(300));
            ep.exit(0)
        }
        other => {
            say!(
                "rank {}: a broadcast with a different root on rank 1 gave {other:?}",
                ep.rank()
            );
            ep.exit(1)
        }
    }
}

/// AMNET_COLL_CHECK=1 and the ordering rule: ranks 0 and 1 form two teams of the same ranks;
/// rank 0 starts a broadcast on the first, then on the second, rank 1 the other way round
/// (non-blocking, so nothing deadlocks). Checked mode must fail the second team's broadcast on
/// both ranks with an error naming both ranks and both teams; a matching pair then works.
pub fn check_team_order(ep: &Endpoint) -> Result<(), String> {
    let co = attach_coll(ep)?;
    let me = ep.rank();
    let a = co
        .create(co.world(), &[0, 1])
        .map_err(|e| e.to_string())?
        .ok_or("no team a")?;
    let b = co
        .create(co.world(), &[1, 0])
        .map_err(|e| e.to_string())?
        .ok_or("no team b")?;
    let fl = f::NOSYNC | f::SINGLE;
    let bc = |t: &amnet::coll::Team, at: u64| {
        // SAFETY: segment offsets (and InPlace) only: no pointer address to keep valid.
        unsafe { co.broadcast_nb(t, Addr::Seg(at + 8), 0, Addr::Seg(at), 8, fl) }
    };
    // A non-blocking start may complete (and fail) at once: its result is the op's.
    let sync = |h: amnet::Result<amnet::coll::CollHandle>| h.and_then(|h| co.wait_sync(h));
    let (ha, hb) = if me == 0 {
        let ha = bc(&a, 0);
        (ha, bc(&b, 64))
    } else {
        let hb = bc(&b, 64);
        (bc(&a, 0), hb)
    };
    let ra = sync(ha);
    let rb = sync(hb);
    let named = |r: &amnet::Result<()>| {
        matches!(r, Err(Error::Mismatch { what, detail })
            if what.contains("order") && detail.contains("rank 0") && detail.contains("rank 1")
                && detail.contains(&format!("{:#x}", a.id()))
                && detail.contains(&format!("{:#x}", b.id())))
    };
    if !(named(&ra) || named(&rb)) {
        say!("rank {me}: the crossed order gave {ra:?} and {rb:?}");
        ep.exit(1);
    }
    // The same order on both ranks works.
    let ha = bc(&a, 0);
    let hb = bc(&b, 64);
    sync(ha).map_err(|e| format!("team a in order: {e}"))?;
    sync(hb).map_err(|e| format!("team b in order: {e}"))?;
    std::thread::sleep(Duration::from_millis(300));
    ep.exit(0)
}

/// AMNET_COLL_CHECK=1 with two images per rank: a correct ALL_THREADS broadcast works, then
/// (twice, in two call orders) image 1 (rank 0) passes 16 bytes where every other image passes
/// 8: every image of every rank must get a Mismatch naming the size, also an image that calls
/// late; a matching broadcast then works again.
pub fn check_image_mismatch(ep: &Endpoint) -> Result<(), String> {
    let st = Arc::new(State::new(ep.size()));
    let t = handler_table(&st).map_err(|e| e.to_string())?;
    ep.attach(t, 1 << 20).map_err(|e| e.to_string())?;
    let images = vec![2u32; ep.size() as usize];
    let me = ep.rank();
    if me == 0 {
        ep.write_local(0, &[7u8; 16]).map_err(|e| e.to_string())?;
    }
    let bad = std::sync::atomic::AtomicU32::new(0);
    std::thread::scope(|sc| {
        for li in 0..2u32 {
            let (ep, images, bad) = (ep.clone(), &images, &bad);
            sc.spawn(move || {
                let img = 2 * me + li;
                let report = |m: String| {
                    say!("rank {me} image {img}: {m}");
                    bad.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                };
                let co = match Coll::init(&ep, Some(images), img, &fn_table()) {
                    Ok(c) => c,
                    Err(e) => return report(format!("Coll::init: {e}")),
                };
                let fl = f::ALLSYNC | f::LOCAL | f::ALL_THREADS;
                let dst = Addr::Seg(64 + 64 * u64::from(li));
                // SAFETY: segment offsets (and InPlace) only: no pointer address to keep valid.
                if let Err(e) = unsafe { co.broadcast(co.world(), dst, 0, Addr::Seg(0), 8, fl) } {
                    return report(format!("a matching ALL_THREADS broadcast: {e}"));
                }
                let n = if img == 1 { 16 } else { 8 };
                // Twice: first image 1 of rank 0 calls first (the ranks' signatures differ),
                // then image 0 does (rank 0's images differ). The second image of every other
                // rank calls late both times: its rank learns of the failure before that
                // image calls, and the collective must still wait for it (ending without it
                // would let the late call start the same collective afresh and hang).
                for round in 0..2u32 {
                    let late = if me == 0 { li == round } else { li == 1 };
                    if late {
                        std::thread::sleep(Duration::from_millis(100));
                    }
                    // SAFETY: segment offsets (and InPlace) only: no pointer address to keep valid.
                    match unsafe { co.broadcast(co.world(), dst, 0, Addr::Seg(0), n, fl) } {
                        Err(Error::Mismatch { detail, .. })
                            if detail.contains("bytes in all") && detail.contains("16") => {}
                        other => report(format!(
                            "round {round}: image 1 passing 16 bytes against 8 everywhere else \
                             gave {other:?}"
                        )),
                    }
                }
                // After the failures the ranks still agree on the numbering.
                // SAFETY: segment offsets (and InPlace) only: no pointer address to keep valid.
                if let Err(e) = unsafe { co.broadcast(co.world(), dst, 0, Addr::Seg(0), 8, fl) } {
                    report(format!("a matching broadcast after the failed ones: {e}"));
                }
            });
        }
    });
    // Leave together after a pause, so a failing rank's code wins.
    std::thread::sleep(Duration::from_millis(300));
    ep.exit(i32::from(bad.into_inner() > 0))
}

/// AMNET_HANG_TIMEOUT=1: the last rank never enters; the others must give up with a report
/// naming the collective and what it waits for (exit 42 when the report is right).
pub fn hang_report(ep: &Endpoint) -> Result<(), String> {
    let co = attach_coll(ep)?;
    if ep.rank() == ep.size() - 1 {
        ep.barrier_notify(0, amnet::barrier_flags::ANONYMOUS)
            .map_err(|e| e.to_string())?;
        ep.wait_until(|| false).map_err(|e| e.to_string())?;
        return Err("park returned".into());
    }
    let t0 = Instant::now();
    // SAFETY: segment offsets (and InPlace) only: no pointer address to keep valid.
    let r = unsafe {
        co.broadcast(
            co.world(),
            Addr::Seg(64),
            0,
            Addr::Seg(0),
            8,
            f::ALLSYNC | f::SINGLE,
        )
    };
    let took = t0.elapsed();
    match r {
        Err(Error::Hang { detail, .. })
            if detail.contains("broadcast")
                && detail.contains("waits for")
                // The entry signal; under a hierarchical algorithm, the barrier it runs
                // first (the host's or the leaders').
                && (detail.contains("entry signal")
                    || (detail.contains("(hierarchical)") && detail.contains("barrier"))) =>
        {
            if took > Duration::from_secs(5) {
                say!("rank {}: the hang was reported after {took:?}", ep.rank());
                ep.exit(1);
            }
            ep.exit(42)
        }
        other => {
            say!(
                "rank {}: a broadcast without the last rank gave {other:?}",
                ep.rank()
            );
            ep.exit(1)
        }
    }
}
