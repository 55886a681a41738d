//! The `images` suite: the data movement collectives (broadcast, scatter, gather, gather_all,
//! exchange) and the vector reduction to all (`reduce_elems_to_all`, u64 sums of `bytes / 8`
//! elements; it has no `m` form) with image participants, every rank hosting `--images K`
//! image threads (default 2): every image thread calling with its own source and destination
//! (`ALL_THREADS | LOCAL`, segment addresses), and one thread per rank calling the `m` form with
//! lists of its images' areas (`LOCAL`), each under `IN_MYSYNC|OUT_MYSYNC` and
//! `IN_ALLSYNC|OUT_ALLSYNC`. Each point runs twice: with the algorithm the selector picks
//! (`shm` where the ranks share a host), then with `flat` forced through `Coll::tune` (the
//! engine's messages), so the two are compared in one job.
//!
//! Method: before each call every image thread meets the others in `barrier_images` (the `m`
//! form's callers in `Coll::barrier`), outside the timed region, and times its own call from
//! initiation to return. Rank 0 reports, per
//! point, the mean over its image threads' samples (`avg`), the smallest and largest image
//! mean, the mean median and the largest p99.

use std::sync::Barrier;
use std::time::Instant;

use amnet::coll::builtin::builtin_index;
use amnet::coll::raw::Collectives;
use amnet::coll::{flags, Addr, Coll, ElemType, RedOp};
use amnet::Endpoint;

use crate::measure::Samples;
use crate::report::Row;
use crate::{BenchError, Plan};

/// The operations measured.
const OPS: [&str; 6] = [
    "broadcast",
    "scatter",
    "gather",
    "gather_all",
    "exchange",
    "reduce_elems_to_all",
];

/// The sizes (bytes per block), capped by `--max-bytes`.
const SIZES: [usize; 4] = [8, 512, 4 << 10, 32 << 10];

/// The modes, each with its row label: every image thread calls (`ALL_THREADS`), or one
/// thread per rank enters all of the rank's images (`m` form, lists of `LOCAL` addresses).
const MODES: [(u32, &str); 4] = [
    (flags::MYSYNC | flags::ALL_THREADS, "ALL_THREADS|MYSYNC"),
    (flags::ALLSYNC | flags::ALL_THREADS, "ALL_THREADS|ALLSYNC"),
    (flags::MYSYNC, "m|MYSYNC"),
    (flags::ALLSYNC, "m|ALLSYNC"),
];

/// The algorithms: the selector's pick, then the engine's flat algorithm.
const ALGS: [(&str, &str); 2] = [("selected", ""), ("flat", "flat")];

/// Bytes of segment one image's source or destination takes for `ranks` ranks of `k` images
/// whose largest block is `max`.
fn stride(max: usize, ranks: usize, k: usize) -> usize {
    (max * ranks * k).next_multiple_of(4096)
}

/// Bytes of segment the suite needs on every rank.
pub(crate) fn segment_bytes(max: usize, ranks: usize, k: usize) -> usize {
    2 * k * stride(max.min(SIZES[SIZES.len() - 1]), ranks, k)
}

/// One image's timed calls of every point, in point order: (op, bytes, label, alg, samples).
type Points = Vec<(&'static str, usize, &'static str, &'static str, Samples)>;

/// Collective over every image thread: measure every point. Returns the rows on rank 0.
pub(crate) fn run(ep: &Endpoint, plan: &Plan) -> Result<Vec<Row>, BenchError> {
    let k = plan.images.max(1);
    let ranks = ep.size() as usize;
    let max = plan.max_bytes.min(SIZES[SIZES.len() - 1]);
    let st = stride(max, ranks, k);
    let images = vec![u32::try_from(k).unwrap_or(1); ranks];
    let me = ep.rank() as usize;
    let local = Barrier::new(k);
    let results: Vec<Result<Points, BenchError>> = std::thread::scope(|sc| {
        let hs: Vec<_> = (0..k)
            .map(|li| {
                let (images, local) = (&images, &local);
                sc.spawn(move || -> Result<Points, BenchError> {
                    let img = u32::try_from(me * k + li).unwrap_or(0);
                    let co = Coll::init(ep, Some(images), img, &[])?;
                    image(ep, &co, plan, (li, k), st, max, local)
                })
            })
            .collect();
        hs.into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(BenchError::Usage("an image thread panicked".into())))
            })
            .collect()
    });
    let mut per_image = Vec::with_capacity(k);
    for r in results {
        per_image.push(r?);
    }
    if me != 0 {
        return Ok(Vec::new());
    }
    let Some(first) = per_image.first() else {
        return Ok(Vec::new());
    };
    Ok(first
        .iter()
        .enumerate()
        .map(|(p, &(op, n, label, alg, ref s0))| {
            // The image threads that timed the point (an m form's: the rank's first).
            let timed: Vec<&Samples> = per_image
                .iter()
                .filter_map(|v| v.get(p).map(|x| &x.4))
                .filter(|x| x.len() > 0)
                .collect();
            let means: Vec<f64> = timed.iter().map(|x| x.mean()).collect();
            let kf = means.len().max(1) as f64;
            let avg = means.iter().sum::<f64>() / kf;
            let p50 = timed.iter().map(|x| x.p50()).sum::<f64>() / kf;
            let p99 = timed.iter().map(|x| x.p99()).fold(0.0, f64::max);
            let min = means.iter().copied().fold(f64::INFINITY, f64::min);
            let max = means.iter().copied().fold(0.0, f64::max);
            let mut row =
                Row::collective(op, n, label, alg, [avg, p50, p99, min, max], 0.0, s0.len());
            row.suite = "images";
            row
        })
        .collect())
}

/// One image thread's part: every point, timed.
fn image(
    ep: &Endpoint,
    co: &Coll,
    plan: &Plan,
    (li, k): (usize, usize),
    stride: usize,
    max: usize,
    local: &Barrier,
) -> Result<Points, BenchError> {
    let ranks = ep.size() as usize;
    let src = (2 * li * stride) as u64;
    let dst = src + stride as u64;
    let fill: Vec<u8> = (0..stride)
        .map(|i| u8::try_from(i % 251).unwrap_or(0))
        .collect();
    ep.write_local(src, &fill)?;
    let root = 0u32;
    let sum = builtin_index(RedOp::Sum, ElemType::U64).unwrap_or(0);
    let mut out = Vec::new();
    for (alg, forced) in ALGS {
        if li == 0 {
            let text = if forced.is_empty() {
                String::new()
            } else {
                OPS.iter()
                    .map(|op| format!("{op}:-:{forced}"))
                    .collect::<Vec<_>>()
                    .join(";")
            };
            co.tune(&text)?;
        }
        local.wait();
        co.barrier_images(co.world())?;
        for op in OPS {
            for n in SIZES.into_iter().filter(|&n| n <= max) {
                // Exchange areas hold a block per image of the job.
                if n * ranks * k > stride {
                    continue;
                }
                for (fl, label) in MODES {
                    let all = fl & flags::ALL_THREADS != 0;
                    // The vector reductions have no m form.
                    if !all && op == "reduce_elems_to_all" {
                        continue;
                    }
                    let fl = fl | flags::LOCAL;
                    // The m form's lists: this rank's images' areas.
                    let at = |l: usize, d: bool| {
                        Addr::Seg((2 * l * stride + if d { stride } else { 0 }) as u64)
                    };
                    let srcs: Vec<Addr> = (0..k).map(|l| at(l, false)).collect();
                    let dsts: Vec<Addr> = (0..k).map(|l| at(l, true)).collect();
                    let iters = if n <= 4096 {
                        (plan.iters / 100).max(20)
                    } else {
                        (plan.iters / 400).max(20)
                    };
                    let warmup = (iters / 10).max(2);
                    let mut ns = Vec::with_capacity(iters);
                    local.wait();
                    if !all && li != 0 {
                        // One thread per rank calls the m form (an empty point here).
                        local.wait();
                        out.push((op, n, label, alg, Samples::from_ns(Vec::new())));
                        continue;
                    }
                    for i in 0..warmup + iters {
                        if all {
                            co.barrier_images(co.world())?;
                        } else {
                            co.barrier(co.world())?;
                        }
                        let (s, d) = (Addr::Seg(src), Addr::Seg(dst));
                        let w = co.world();
                        let t = Instant::now();
                        // SAFETY: segment offsets only: no pointer address to keep valid.
                        unsafe {
                            match (op, all) {
                                ("broadcast", true) => co.broadcast(w, d, root, s, n, fl),
                                ("scatter", true) => co.scatter(w, d, root, s, n, fl),
                                ("gather", true) => co.gather(w, root, d, s, n, fl),
                                ("gather_all", true) => co.gather_all(w, d, s, n, fl),
                                ("exchange", true) => co.exchange(w, d, s, n, fl),
                                (_, true) => co.reduce_elems_to_all(w, d, s, 8, n / 8, sum, 0, fl),
                                ("broadcast", false) => co.broadcastm(w, &dsts, root, s, n, fl),
                                ("scatter", false) => co.scatterm(w, &dsts, root, s, n, fl),
                                ("gather", false) => co.gatherm(w, root, d, &srcs, n, fl),
                                ("gather_all", false) => co.gather_allm(w, &dsts, &srcs, n, fl),
                                (_, false) => co.exchangem(w, &dsts, &srcs, n, fl),
                            }?;
                        }
                        if i >= warmup {
                            ns.push(t.elapsed().as_nanos() as f64);
                        }
                    }
                    local.wait();
                    out.push((op, n, label, alg, Samples::from_ns(ns)));
                }
            }
        }
    }
    if li == 0 {
        co.tune("")?;
    }
    Ok(out)
}
