//! Short round trip through the Rust API: the loop of `bench/c/short_rtt.c` (the C ABI),
//! which `bench/capi.sh` runs in the same invocation to compare the two. Rank 0 sends a Short
//! request with one argument to rank 1, whose handler replies with a Short; rank 0 waits for
//! the reply with `wait_until`. Prints, on rank 0, `rust short_rtt_ns MEDIAN min MIN` over
//! BATCHES batches of ITERS round trips (arguments: ITERS BATCHES, default 20000 15).

use std::process::ExitCode;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Instant;

const H_REQ: u8 = 200;
const H_REP: u8 = 201;
const H_DONE: u8 = 202;

fn arg(n: usize, default: u64) -> Option<u64> {
    match std::env::args().nth(n) {
        Some(v) => v.parse().ok().filter(|&x| x >= 1),
        None => Some(default),
    }
}

fn main() -> ExitCode {
    let (Some(iters), Some(batches)) = (arg(1, 20000), arg(2, 15)) else {
        eprintln!("usage: amnet-capi-rtt [ITERS [BATCHES]] (both at least 1)");
        return ExitCode::from(2);
    };
    match run(iters, batches) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("amnet-capi-rtt: {e}");
            ExitCode::from(2)
        }
    }
}

fn run(iters: u64, batches: u64) -> amnet::Result<()> {
    let ep = amnet::init()?;
    let replies = Arc::new(AtomicU32::new(0));
    let done = Arc::new(AtomicU32::new(0));
    let mut t = amnet::HandlerTable::new();
    t.register(H_REQ, |tok, args, _| {
        if let Err(e) = tok.reply_short(H_REP, args) {
            eprintln!("amnet-capi-rtt: reply failed: {e}");
            tok.endpoint().exit(3);
        }
    })?;
    let r = replies.clone();
    t.register(H_REP, move |_, _, _| {
        r.store(r.load(Ordering::Relaxed) + 1, Ordering::Release);
    })?;
    let d = done.clone();
    t.register(H_DONE, move |_, _, _| d.store(1, Ordering::Release))?;
    ep.attach(t, 0)?;
    if ep.size() < 2 {
        return Err(amnet::Error::Config(
            "needs 2 ranks (amrun -n 2)".to_string(),
        ));
    }
    ep.barrier()?;
    if ep.rank() == 0 {
        let mut times = Vec::new();
        let mut sent = 0u32;
        // Batch 0 warms up.
        for b in 0..=batches {
            let t0 = Instant::now();
            for _ in 0..iters {
                ep.request_short(1, H_REQ, &[7])?;
                sent += 1;
                ep.wait_until(|| replies.load(Ordering::Acquire) == sent)?;
            }
            if b > 0 {
                times.push(t0.elapsed().as_secs_f64() * 1e9 / iters as f64);
            }
        }
        times.sort_by(f64::total_cmp);
        println!(
            "rust short_rtt_ns {:.1} min {:.1}",
            times[times.len() / 2],
            times[0]
        );
        ep.request_short(1, H_DONE, &[])?;
    } else if ep.rank() == 1 {
        ep.wait_until(|| done.load(Ordering::Acquire) == 1)?;
    }
    ep.barrier()?;
    Ok(())
}
