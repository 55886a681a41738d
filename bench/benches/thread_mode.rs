//! Criterion benchmarks of amnet in thread mode (`amnet::run_threads(2, ...)`): a Short
//! request/reply round trip, an 8-byte blocking put and get, and a barrier.
//!
//! Rank 1 is a server: it polls (through `wait_until`, which backs off when idle) until
//! rank 0 sends it a stop message, running barriers when rank 0 asks for them. Rank 0 owns
//! the `Criterion` instance, and every measured loop runs on its thread (`iter_custom`).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use amnet::{Endpoint, HandlerTable, RankOutcome};
use criterion::Criterion;

/// Short request; rank 1 replies to [`H_PONG`].
const H_PING: u8 = 200;
/// Short reply: counts a reply on rank 0.
const H_PONG: u8 = 201;
/// Rank 0 asks rank 1 for `args[0] | args[1] << 32` barriers.
const H_BARRIERS: u8 = 202;
/// Rank 0 tells rank 1 to leave its serve loop.
const H_STOP: u8 = 203;

/// Per-rank counters the handlers bump.
#[derive(Debug, Default)]
struct State {
    pongs: AtomicU64,
    barriers: AtomicU64,
    stop: AtomicBool,
}

fn attach(ep: &Endpoint, st: &Arc<State>) -> amnet::Result<()> {
    let mut t = HandlerTable::new();
    t.register(H_PING, |tok, args, _| {
        if let Err(e) = tok.reply_short(H_PONG, args) {
            eprintln!("thread_mode bench: reply failed: {e}");
            tok.endpoint().exit(3);
        }
    })?;
    let s = st.clone();
    t.register(H_PONG, move |_, _, _| {
        s.pongs.fetch_add(1, Ordering::Release);
    })?;
    let s = st.clone();
    t.register(H_BARRIERS, move |_, args, _| {
        let n = u64::from(args[0]) | (u64::from(args[1]) << 32);
        s.barriers.fetch_add(n, Ordering::Release);
    })?;
    let s = st.clone();
    t.register(H_STOP, move |_, _, _| s.stop.store(true, Ordering::Release))?;
    ep.attach(t, 1 << 16)
}

/// Rank 1: serve until told to stop.
fn serve(ep: &Endpoint, st: &State) -> amnet::Result<()> {
    loop {
        ep.wait_until(|| {
            st.stop.load(Ordering::Acquire) || st.barriers.load(Ordering::Acquire) > 0
        })?;
        let n = st.barriers.swap(0, Ordering::AcqRel);
        for _ in 0..n {
            ep.barrier()?;
        }
        if n == 0 && st.stop.load(Ordering::Acquire) {
            return Ok(());
        }
    }
}

/// Unwrap inside a measured loop: a failure there is a broken library, not a result.
fn ok<T>(r: amnet::Result<T>) -> T {
    r.unwrap_or_else(|e| panic!("amnet call failed: {e}"))
}

/// Rank 0: run every benchmark, then stop the server.
fn client(ep: &Endpoint, st: &State) -> amnet::Result<()> {
    let mut c = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .sample_size(50)
        .nresamples(20_000)
        .without_plots()
        .configure_from_args();

    c.bench_function("thread/short_rtt", |b| {
        b.iter_custom(|iters| {
            let base = st.pongs.load(Ordering::Acquire);
            let t = Instant::now();
            for i in 1..=iters {
                ok(ep.request_short(1, H_PING, &[]));
                ok(ep.wait_until(|| st.pongs.load(Ordering::Acquire) >= base + i));
            }
            t.elapsed()
        })
    });

    let mut buf = [7u8; 8];
    c.bench_function("thread/put_8", |b| {
        b.iter(|| ok(ep.put(1, 0, std::hint::black_box(&buf))))
    });
    c.bench_function("thread/get_8", |b| {
        b.iter(|| ok(ep.get(1, 0, std::hint::black_box(&mut buf))))
    });

    c.bench_function("thread/barrier", |b| {
        b.iter_custom(|iters| {
            #[allow(clippy::cast_possible_truncation)] // split into 32-bit halves
            let args = [iters as u32, (iters >> 32) as u32];
            ok(ep.request_short(1, H_BARRIERS, &args));
            let t = Instant::now();
            for _ in 0..iters {
                ok(ep.barrier());
            }
            t.elapsed()
        })
    });

    c.final_summary();
    ep.request_short(1, H_STOP, &[])?;
    Ok(())
}

fn main() {
    let out = amnet::run_threads(2, |ep| -> amnet::Result<()> {
        let st = Arc::new(State::default());
        attach(&ep, &st)?;
        if ep.rank() == 0 {
            client(&ep, &st)?;
        } else {
            serve(&ep, &st)?;
        }
        ep.barrier()
    })
    .unwrap_or_else(|e| panic!("cannot start the thread-mode job: {e}"));
    for (rank, o) in out.into_iter().enumerate() {
        match o {
            RankOutcome::Returned(Ok(())) => {}
            RankOutcome::Returned(Err(e)) => panic!("rank {rank} failed: {e}"),
            RankOutcome::Exited(code) => panic!("rank {rank} exited with code {code}"),
            RankOutcome::Panicked(m) => panic!("rank {rank} panicked: {m}"),
        }
    }
}
