//! The README's main job: a 4-rank smp job that checks AMs, put/get and barriers across every
//! rank, then prints a short latency table measured between ranks 0 and 1.
//!
//! `cargo build --release --bin amrun --example demo && target/release/amrun -n 4 target/release/examples/demo`

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use amnet::{Endpoint, HandlerTable, Token};

const PING: u8 = 200;
const PONG: u8 = 201;
const ITERS: u32 = 20_000;

fn median_us(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Time `op` ITERS times after a warm-up; returns the median in microseconds.
fn time(mut op: impl FnMut() -> amnet::Result<()>) -> amnet::Result<f64> {
    for _ in 0..ITERS / 10 {
        op()?;
    }
    let mut v = Vec::with_capacity(ITERS as usize);
    for _ in 0..ITERS {
        let t = Instant::now();
        op()?;
        v.push(t.elapsed().as_secs_f64() * 1e6);
    }
    Ok(median_us(v))
}

fn round_trip(ep: &Endpoint, pongs: &AtomicU64, kind: u32) -> amnet::Result<()> {
    let want = pongs.load(Ordering::Relaxed) + 1;
    let p = [0u8; 8];
    match kind {
        0 => ep.request_short(1, PING, &[0])?,
        1 => ep.request_medium(1, PING, &[1], &p)?,
        _ => ep.request_long(1, PING, &[2], &p, 64)?,
    }
    ep.wait_until(|| pongs.load(Ordering::Relaxed) >= want)
}

fn main() -> amnet::Result<()> {
    let ep = amnet::init()?;
    let pongs = Arc::new(AtomicU64::new(0));
    let mut t = HandlerTable::new();
    t.register(PING, |tok: &mut Token<'_>, args: &[u32], payload: &[u8]| {
        let r = match args[0] {
            0 => tok.reply_short(PONG, &[]),
            1 => tok.reply_medium(PONG, &[], payload),
            _ => tok.reply_long(PONG, &[], payload, 64),
        };
        r.expect("reply");
    })?;
    let p = pongs.clone();
    t.register(PONG, move |_: &mut Token<'_>, _: &[u32], _: &[u8]| {
        p.fetch_add(1, Ordering::Relaxed);
    })?;
    ep.attach(t, 1 << 20)?;
    let (me, n) = (ep.rank(), ep.size());

    // Correctness first: every rank puts its rank into every peer's segment, then reads back.
    for d in 0..n {
        ep.put(d, 4096 + 8 * u64::from(me), &u64::from(me).to_le_bytes())?;
    }
    ep.barrier()?;
    for s in 0..n {
        let mut b = [0u8; 8];
        ep.read_local(4096 + 8 * u64::from(s), &mut b)?;
        assert_eq!(
            u64::from_le_bytes(b),
            u64::from(s),
            "rank {me}: put from rank {s} is wrong"
        );
        ep.get(s, 4096 + 8 * u64::from(me), &mut b)?;
        assert_eq!(
            u64::from_le_bytes(b),
            u64::from(me),
            "rank {me}: get from rank {s} is wrong"
        );
    }
    ep.barrier()?;
    if me == 0 {
        println!(
            "amnet demo: conduit {} with {n} ranks: AMs, put/get and barriers checked",
            ep.conduit_name()
        );
    }

    // Latency between ranks 0 and 1; the other ranks wait in the barrier.
    if me == 0 && n > 1 {
        let rows = [
            (
                "Short request+reply round trip",
                time(|| round_trip(&ep, &pongs, 0))?,
            ),
            (
                "Medium 8 B round trip",
                time(|| round_trip(&ep, &pongs, 1))?,
            ),
            ("Long 8 B round trip", time(|| round_trip(&ep, &pongs, 2))?),
            ("put 8 B (blocking)", time(|| ep.put(1, 0, &[7u8; 8]))?),
            (
                "get 8 B (blocking)",
                time(|| {
                    let mut b = [0u8; 8];
                    ep.get(1, 0, &mut b)
                })?,
            ),
        ];
        println!("{:<34} {:>10}", "operation", "median us");
        for (name, us) in rows {
            println!("{name:<34} {us:>10.3}");
        }
    }
    ep.barrier()?;
    let t0 = Instant::now();
    for _ in 0..2000 {
        ep.barrier()?;
    }
    if me == 0 {
        let us = t0.elapsed().as_secs_f64() * 1e6 / 2000.0;
        println!("{:<34} {us:>10.3}", format!("barrier, {n} ranks (mean)"));
    }
    ep.barrier()?;
    Ok(())
}
