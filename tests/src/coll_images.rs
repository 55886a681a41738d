//! Nested jobs for the collectives: the property test with 1-3 images per rank
//! (`--coll-images SEED`), and the checked-mode and hang-watchdog scenarios.

use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use amnet::coll::{Addr, Coll, RedOp, Team};
use amnet::launch::LaunchOptions;
use amnet::sync_modes::flags as f;
use amnet::{Endpoint, Error};

use crate::coll_prop::{fn_table, gen_units, Caller, Form, Rng, World};
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
            conduit: c.ep.conduit_name().to_string(),
            grace: Duration::from_secs(2),
        };
        let mut log = Vec::new();
        let t0 = Instant::now();
        let code = amnet::launch_job_with_log(&opts, &mut |m: &str| log.push(m.to_string()))
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
            eprintln!("amnet-testsuite: init: {e}");
            return 2;
        }
    };
    let st = Arc::new(State::new(ep.size()));
    if let Err(e) = handler_table(&st).and_then(|t| ep.attach(t, crate::SEG_LEN)) {
        eprintln!("amnet-testsuite: attach: {e}");
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
        eprintln!("amnet-testsuite: multi-image job, rank {me} image {img}: {e}");
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
                        let r = co.broadcast(
                            Team::WORLD,
                            Addr::Seg(0),
                            0,
                            Addr::Seg(64),
                            8,
                            f::ALLSYNC | f::LOCAL,
                        );
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
            });
        }
    });
    if let Err(e) = ep.barrier() {
        eprintln!("amnet-testsuite: final barrier: {e}");
        return 1;
    }
    0
}

// ----- scenarios ----------------------------------------------------------------------------

fn attach_coll(ep: &Endpoint) -> Result<Coll, String> {
    let st = Arc::new(State::new(ep.size()));
    let t = handler_table(&st).map_err(|e| e.to_string())?;
    ep.attach(t, 1 << 20).map_err(|e| e.to_string())?;
    Coll::init(ep, None, 0, &fn_table()).map_err(|e| e.to_string())
}

/// AMNET_COLL_CHECK=1: a correct broadcast works, then rank 1 passes another root: every
/// rank must get a Mismatch naming rank 1 and the root.
pub fn check_mismatch(ep: &Endpoint) -> Result<(), String> {
    let co = attach_coll(ep)?;
    let fl = f::ALLSYNC | f::SINGLE;
    if ep.rank() == 0 {
        ep.write_local(0, &[7u8; 8]).map_err(|e| e.to_string())?;
    }
    co.broadcast(Team::WORLD, Addr::Seg(64), 0, Addr::Seg(0), 8, fl)
        .map_err(|e| format!("a matching broadcast in checked mode: {e}"))?;
    let mut got = [0u8; 8];
    ep.read_local(64, &mut got).map_err(|e| e.to_string())?;
    if got != [7u8; 8] {
        eprintln!("rank {}: checked broadcast moved {got:?}", ep.rank());
        ep.exit(1);
    }
    let root = u32::from(ep.rank() == 1);
    match co.broadcast(Team::WORLD, Addr::Seg(64), root, Addr::Seg(0), 8, fl) {
        Err(Error::Mismatch { detail, .. })
            if detail.contains("rank 1") && detail.contains("root") =>
        {
            // Leave together after a pause, so a failing rank's code wins.
            std::thread::sleep(Duration::from_millis(300));
            ep.exit(0)
        }
        other => {
            eprintln!(
                "rank {}: a broadcast with a different root on rank 1 gave {other:?}",
                ep.rank()
            );
            ep.exit(1)
        }
    }
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
    let r = co.broadcast(
        Team::WORLD,
        Addr::Seg(64),
        0,
        Addr::Seg(0),
        8,
        f::ALLSYNC | f::SINGLE,
    );
    let took = t0.elapsed();
    match r {
        Err(Error::Hang { detail, .. })
            if detail.contains("broadcast")
                && detail.contains("waits for")
                && detail.contains("entry signal") =>
        {
            if took > Duration::from_secs(5) {
                eprintln!("rank {}: the hang was reported after {took:?}", ep.rank());
                ep.exit(1);
            }
            ep.exit(42)
        }
        other => {
            eprintln!(
                "rank {}: a broadcast without the last rank gave {other:?}",
                ep.rank()
            );
            ep.exit(1)
        }
    }
}
