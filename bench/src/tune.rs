//! `amrun -n N amnet-tune [--out FILE] [--max-bytes N] [--iters N]`: measure every algorithm
//! of every collective on this machine and write the tuning table that `AMNET_COLL_TUNING`
//! loads (spec/coll.md §3b).
//!
//! For team sizes 2, 4, 8, ... up to the job's size (and the job's size), on the team of the
//! first ranks (`split_strided(world, 0, 1, k)`), for every operation, at sizes from 8 bytes
//! to `--max-bytes` (default 1 MiB) in powers of 8, every algorithm runs `--iters` blocking
//! `IN_ALLSYNC|OUT_ALLSYNC` calls (default 50, fewer for large sizes) with a team barrier
//! before each; a call's time is the slowest rank's mean. The fastest algorithm of each point
//! wins; consecutive sizes with the same winner share a line. Rank 0 writes the table to
//! `--out` (default `amnet-tuning.txt`) and prints it.

use std::process::ExitCode;
use std::time::Instant;

use amnet::coll::builtin::builtin_index;
use amnet::coll::raw::Collectives;
use amnet::coll::{flags, Addr, Coll, ElemType, Layout, RedOp, Team};
use amnet::{Error, HandlerTable};

const USAGE: &str = "usage: amrun -n N amnet-tune [--out FILE] [--max-bytes N] [--iters N]";

/// The operations tuned, by name.
const OPS: [&str; 7] = [
    "broadcast",
    "scatter",
    "gather",
    "gather_all",
    "exchange",
    "reduce_to_all",
    "prefix_reduce",
];

struct Opts {
    out: String,
    max: usize,
    iters: usize,
}

fn parse() -> Result<Opts, String> {
    let mut o = Opts {
        out: "amnet-tuning.txt".into(),
        max: 1 << 20,
        iters: 50,
    };
    let mut it = std::env::args().skip(1);
    while let Some(a) = it.next() {
        let mut val = |what: &str| it.next().ok_or(format!("{what} needs a value"));
        match a.as_str() {
            "--out" => o.out = val("--out")?,
            "--max-bytes" => {
                let v = val("--max-bytes")?;
                o.max = v
                    .parse()
                    .ok()
                    .filter(|&n| n >= 8)
                    .ok_or(format!("--max-bytes {v:?}: expected at least 8"))?;
            }
            "--iters" => {
                let v = val("--iters")?;
                o.iters = v
                    .parse()
                    .ok()
                    .filter(|&n| n > 0)
                    .ok_or(format!("--iters {v:?}: expected a positive number"))?;
            }
            "-h" | "--help" => return Err(USAGE.into()),
            other => return Err(format!("unexpected argument {other:?}\n{USAGE}")),
        }
    }
    Ok(o)
}

/// One blocking call of `op` at `n` bytes per block on `team` (segment areas at 0 and `half`).
fn call(coll: &Coll, team: &Team, op: &str, n: usize, half: u64) -> amnet::Result<()> {
    let (src, dst) = (Addr::seg(0), Addr::seg(half));
    let fl = flags::ALLSYNC | flags::SINGLE;
    let ranks = team.size() as usize;
    // SAFETY: segment offsets only: no pointer address to keep valid.
    unsafe {
        match op {
            "broadcast" => coll.broadcast(team, dst, 0, src, n, fl),
            "scatter" => coll.scatter(team, dst, 0, src, n, fl),
            "gather" => coll.gather(team, 0, dst, src, n, fl),
            "gather_all" => coll.gather_all(team, dst, src, n, fl),
            "exchange" => coll.exchange(team, dst, src, n, fl),
            _ => {
                let count = (n / 8).max(1);
                let lay = Layout::block_cyclic(count.div_ceil(ranks).max(1), 0);
                let func = builtin_index(RedOp::Sum, ElemType::U64).unwrap_or(0);
                if op == "reduce_to_all" {
                    coll.reduce_to_all(team, dst, src, lay, 8, count, func, 0, fl)
                } else {
                    coll.prefix_reduce(team, dst, lay, src, lay, 8, count, func, 0, fl)
                }
            }
        }
    }
}

/// The slowest member's mean seconds per call of `alg`, or `None` when it does not admit the
/// call (every member learns the same).
fn measure(
    coll: &Coll,
    team: &Team,
    op: &str,
    alg: &str,
    n: usize,
    iters: usize,
    half: u64,
) -> amnet::Result<Option<f64>> {
    coll.tune(&format!("{op}:-:{alg}"))?;
    coll.barrier(team)?;
    match call(coll, team, op, n, half) {
        Err(Error::Usage { detail, .. }) if detail.contains("AMNET_COLL_TUNE forces") => {
            return Ok(None)
        }
        r => r?,
    }
    let mut total = 0.0;
    for _ in 0..iters {
        coll.barrier(team)?;
        let t = Instant::now();
        call(coll, team, op, n, half)?;
        total += t.elapsed().as_secs_f64();
    }
    let mean = total / iters as f64;
    // The slowest member's mean, on every member.
    // [this rank's mean | every member's], on the heap for the whole collective.
    let mut buf = vec![0u8; 8 * (team.size() as usize + 1)];
    buf[..8].copy_from_slice(&mean.to_le_bytes());
    let (s, d) = (buf.as_mut_ptr(), buf[8..].as_mut_ptr());
    // SAFETY: both ranges lie in `buf`, and are passed only to the gather below.
    let (s, d) = unsafe { (Addr::ptr(s), Addr::ptr(d)) };
    // SAFETY: both ranges lie in `buf`, untouched and dropped only after the blocking gather
    // returned Ok (it completed here), leaked when it failed (it may still be in flight).
    if let Err(e) = unsafe { coll.gather_all(team, d, s, 8, flags::ALLSYNC | flags::SINGLE) } {
        std::mem::forget(buf);
        return Err(e);
    }
    Ok(Some(buf[8..].chunks(8).fold(0.0, |m, c| {
        m.max(f64::from_le_bytes(c.try_into().unwrap_or([0; 8])))
    })))
}

fn human(n: usize) -> String {
    match n {
        n if n >= 1 << 20 && n % (1 << 20) == 0 => format!("{}M", n >> 20),
        n if n >= 1 << 10 && n % (1 << 10) == 0 => format!("{}K", n >> 10),
        n => n.to_string(),
    }
}

fn run(o: &Opts) -> amnet::Result<()> {
    let ep = amnet::init()?;
    let size = ep.size();
    let half = (o.max * size as usize).next_multiple_of(4096);
    ep.attach(HandlerTable::new(), 2 * half)?;
    let coll = Coll::init(&ep, None, 0, &[])?;
    let pattern: Vec<u8> = (0..half / 8)
        .flat_map(|i| (i as u64 % 251 + 1).to_ne_bytes())
        .collect();
    ep.write_local(0, &pattern)?;
    let mut sizes = Vec::new();
    let mut n = 8;
    while n <= o.max {
        sizes.push(n);
        n *= 8;
    }
    let mut ks: Vec<u32> = (1..32)
        .map(|i| 1u32 << i)
        .take_while(|&k| k < size)
        .collect();
    ks.push(size);
    let mut lines = Vec::new();
    let mut prev_k = 0;
    for &k in &ks {
        let team = coll.split_strided(coll.world(), 0, 1, i64::from(k))?;
        if let Some(team) = &team {
            for op in OPS {
                let mut best: Vec<(usize, &'static str)> = Vec::new();
                for &n in &sizes {
                    let iters = if n <= 4096 {
                        o.iters
                    } else {
                        (o.iters * 4096 / n).max(5)
                    };
                    let mut win: Option<(&'static str, f64)> = None;
                    for alg in Coll::algorithms(op).unwrap_or_default() {
                        if let Some(t) = measure(&coll, team, op, alg, n, iters, half as u64)? {
                            if win.is_none_or(|(_, w)| t < w) {
                                win = Some((alg, t));
                            }
                        }
                    }
                    if let Some((alg, _)) = win {
                        best.push((n, alg));
                    }
                }
                coll.tune("")?;
                // Consecutive sizes with the same winner share a line.
                let mut lo = 0;
                for (i, &(n, alg)) in best.iter().enumerate() {
                    let last = i + 1 == best.len() || best[i + 1].1 != alg;
                    if last {
                        let hi = if i + 1 == best.len() {
                            String::new()
                        } else {
                            human(n)
                        };
                        lines.push(format!(
                            "{op} {}-{} {}-{hi} {alg}",
                            prev_k + 1,
                            if k == size {
                                String::new()
                            } else {
                                k.to_string()
                            },
                            human(lo)
                        ));
                        lo = n + 1;
                    }
                }
            }
            coll.destroy(team)?;
        }
        ep.barrier()?;
        prev_k = k;
    }
    if ep.rank() == 0 {
        let text = format!(
            "# amnet tuning table: measured with {} ranks on the {} conduit by amnet-tune\n\
             # OP RANKS BYTES ALGORITHM\n{}\n",
            size,
            ep.conduit_name(),
            lines.join("\n")
        );
        std::fs::write(&o.out, &text)
            .map_err(|e| Error::os("core", format!("write {}", o.out), e))?;
        print!("{text}");
    }
    ep.barrier()?;
    Ok(())
}

fn main() -> ExitCode {
    let o = match parse() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("amnet-tune: {e}");
            return ExitCode::from(2);
        }
    };
    match run(&o) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("amnet-tune: {e}");
            ExitCode::from(1)
        }
    }
}
