//! Checks the mpi conduit end to end as a real MPI job.
//!
//! ```sh
//! mpirun -n 3 target/debug/examples/mpi_check [SCENARIO]
//! ```
//!
//! The default scenario, `all`, runs on every rank: Short, Medium and Long request/reply
//! ping-pong with every rank (itself included) over the payload sizes around each protocol
//! boundary; request and reply storms that exhaust the flow-control credits; requests from
//! several threads at once; put/get (on the path the probe at attach chose); barriers; and
//! plain MPI messages on the world communicator, received with `MPI_ANY_SOURCE`/`MPI_ANY_TAG`
//! while amnet traffic is in flight (from the main thread, and from a second thread when MPI
//! grants `MPI_THREAD_MULTIPLE`). It ends with code 0 when every check passed and 1 otherwise.
//!
//! `serialized` runs the same checks after the client initialized MPI itself at
//! `MPI_THREAD_SERIALIZED`, so the conduit serializes its MPI calls.
//!
//! The other scenarios end the job in a known way, for the exit-code tests: `exit` (rank 1
//! calls `exit(7)` while the others wait in a barrier), `exit-in-handler` (a request handler on
//! rank 1 calls `exit(9)`), `error` (rank 1 returns an error from `main`: code 1),
//! `exit-before-attach` (rank 1 calls `exit(17)` while the others attach), `panic` (the last
//! rank panics: code 101), `straggler` (rank 0 returns from `main` while the others compute
//! without polling: code 0 once the exit grace has passed), and `hang` (nobody ends).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use amnet::{Endpoint, HandlerTable, Token};
use amnet_mpi::mpi::topology::SimpleCommunicator;
use amnet_mpi::mpi::traits::*;
use amnet_mpi::MpiConduit;

const H_SHORT: u8 = 200;
const H_SHORT_REP: u8 = 201;
const H_MEDIUM: u8 = 202;
const H_MEDIUM_REP: u8 = 203;
const H_LONG: u8 = 204;
const H_LONG_REP: u8 = 205;
const H_COUNT: u8 = 206;
const H_EXIT: u8 = 207;

/// Segment area per source rank for Long payloads (requests, then replies).
const REGION: u64 = 2 << 20;
/// Long payload sizes: empty, tiny, around the default put threshold (256 B: from there on
/// the payload is put into the target segment when put/get run natively), and around the
/// 64 KiB boundary of the AM path (inline up to it, a separate message above).
const LONG_SIZES: [usize; 9] = [0, 1, 255, 256, 900, 4095, 65536, 65537, 1 << 20];
/// Medium payload sizes around the small/large receive boundary and the maximum.
const MEDIUM_SIZES: [usize; 8] = [0, 1, 7, 900, 984, 985, 4095, 65536];
/// Bytes of the put/get check (not a multiple of the 64 KiB chunk).
const RMA_LEN: usize = (1 << 20) + 123;

fn pattern(seed: u64, i: usize) -> u8 {
    seed.wrapping_mul(0x9E37_79B9)
        .wrapping_add((i as u64).wrapping_mul(7))
        .to_le_bytes()[0]
}

/// A length or seed as an AM argument (all are small).
fn arg(v: impl TryInto<u32>) -> u32 {
    v.try_into().unwrap_or(u32::MAX)
}

fn filled(seed: u64, len: usize) -> Vec<u8> {
    (0..len).map(|i| pattern(seed, i)).collect()
}

fn matches(seed: u64, data: &[u8]) -> bool {
    data.iter().enumerate().all(|(i, &b)| b == pattern(seed, i))
}

#[derive(Default)]
struct State {
    short_replies: AtomicU64,
    medium_replies: AtomicU64,
    long_replies: AtomicU64,
    counted: AtomicU64,
    errors: Mutex<Vec<String>>,
}

impl State {
    fn fail(&self, what: String) {
        self.errors
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(what);
    }
}

fn handlers(st: &Arc<State>, size: u32) -> Result<HandlerTable, String> {
    let mut t = HandlerTable::new();
    let e = |e: amnet::Error| e.to_string();
    let s = st.clone();
    t.register(
        H_SHORT,
        move |tok: &mut Token<'_>, args: &[u32], _: &[u8]| {
            let sum = args.iter().fold(0u32, |a, &b| a.wrapping_add(b));
            let n = u32::try_from(args.len()).unwrap_or(u32::MAX);
            if let Err(err) = tok.reply_short(H_SHORT_REP, &[n, sum]) {
                s.fail(format!("reply_short: {err}"));
            }
        },
    )
    .map_err(e)?;
    let s = st.clone();
    t.register(
        H_SHORT_REP,
        move |_: &mut Token<'_>, args: &[u32], _: &[u8]| {
            let n = args[0];
            let want = (0..n).fold(0u32, |a, i| a.wrapping_add(1000 + i));
            if args[1] != want {
                s.fail(format!(
                    "Short reply for {n} arguments: sum {} not {want}",
                    args[1]
                ));
            }
            s.short_replies.fetch_add(1, Ordering::Relaxed);
        },
    )
    .map_err(e)?;
    let s = st.clone();
    t.register(
        H_MEDIUM,
        move |tok: &mut Token<'_>, args: &[u32], payload: &[u8]| {
            if !matches(u64::from(args[0]), payload) || payload.len() != args[1] as usize {
                s.fail(format!(
                    "Medium request of {} bytes corrupted",
                    payload.len()
                ));
            }
            if let Err(err) = tok.reply_medium(H_MEDIUM_REP, args, payload) {
                s.fail(format!("reply_medium: {err}"));
            }
        },
    )
    .map_err(e)?;
    let s = st.clone();
    t.register(
        H_MEDIUM_REP,
        move |_: &mut Token<'_>, args: &[u32], payload: &[u8]| {
            if !matches(u64::from(args[0]), payload) || payload.len() != args[1] as usize {
                s.fail(format!("Medium reply of {} bytes corrupted", payload.len()));
            }
            s.medium_replies.fetch_add(1, Ordering::Relaxed);
        },
    )
    .map_err(e)?;
    let s = st.clone();
    t.register(
        H_LONG,
        move |tok: &mut Token<'_>, args: &[u32], payload: &[u8]| {
            let me = tok.endpoint().rank();
            if !matches(u64::from(args[0]), payload) || payload.len() != args[1] as usize {
                s.fail(format!("Long request of {} bytes corrupted", payload.len()));
            }
            let back = (u64::from(size) + u64::from(me)) * REGION;
            if let Err(err) = tok.reply_long(H_LONG_REP, args, payload, back) {
                s.fail(format!("reply_long: {err}"));
            }
        },
    )
    .map_err(e)?;
    let s = st.clone();
    t.register(
        H_LONG_REP,
        move |tok: &mut Token<'_>, args: &[u32], payload: &[u8]| {
            let mut seg = vec![0u8; args[1] as usize];
            let at = (u64::from(size) + u64::from(tok.src())) * REGION;
            let local = tok.endpoint().read_local(at, &mut seg);
            if local.is_err() || !matches(u64::from(args[0]), &seg) || seg != payload {
                s.fail(format!("Long reply of {} bytes corrupted", seg.len()));
            }
            s.long_replies.fetch_add(1, Ordering::Relaxed);
        },
    )
    .map_err(e)?;
    let s = st.clone();
    t.register(H_COUNT, move |_: &mut Token<'_>, _: &[u32], _: &[u8]| {
        s.counted.fetch_add(1, Ordering::Relaxed);
    })
    .map_err(e)?;
    t.register(H_EXIT, |tok: &mut Token<'_>, args: &[u32], _: &[u8]| {
        tok.endpoint().exit(i32::try_from(args[0]).unwrap_or(1))
    })
    .map_err(e)?;
    Ok(t)
}

fn seg_len(size: u32) -> usize {
    usize::try_from(2 * u64::from(size) * REGION).unwrap_or(0) + 2 * RMA_LEN
}

fn check(ep: &Endpoint, st: &State) -> Result<(), String> {
    let me = ep.rank();
    let n = ep.size();
    let e = |e: amnet::Error| e.to_string();

    // Short with 0..=16 arguments, to every rank.
    for dest in 0..n {
        for k in 0..=16u32 {
            let args: Vec<u32> = (0..k).map(|i| 1000 + i).collect();
            ep.request_short(dest, H_SHORT, &args).map_err(e)?;
        }
    }
    let want = u64::from(n) * 17;
    ep.wait_until(|| st.short_replies.load(Ordering::Relaxed) >= want)
        .map_err(e)?;

    // Medium around every size boundary.
    let mut sent = 0u64;
    for (k, &len) in MEDIUM_SIZES.iter().enumerate() {
        for dest in 0..n {
            let seed = u64::from(me) * 100 + k as u64;
            let body = filled(seed, len);
            let args = [arg(seed), arg(len)];
            ep.request_medium(dest, H_MEDIUM, &args, &body).map_err(e)?;
            sent += 1;
        }
    }
    ep.wait_until(|| st.medium_replies.load(Ordering::Relaxed) >= sent)
        .map_err(e)?;

    // Long, inline and separate: one size at a time, since each size reuses the areas.
    let mut sent = 0u64;
    for (k, &len) in LONG_SIZES.iter().enumerate() {
        let seed = u64::from(me) * 100 + 50 + k as u64;
        let body = filled(seed, len);
        for dest in 0..n {
            let args = [arg(seed), arg(len)];
            ep.request_long(dest, H_LONG, &args, &body, u64::from(me) * REGION)
                .map_err(e)?;
            sent += 1;
        }
        ep.wait_until(|| st.long_replies.load(Ordering::Relaxed) >= sent)
            .map_err(e)?;
        ep.barrier().map_err(e)?;
    }

    // A request storm without replies and a reply storm: both run out of credits many times.
    let storm = 5000u64;
    for _ in 0..storm {
        for dest in 0..n {
            ep.request_short(dest, H_COUNT, &[]).map_err(e)?;
        }
    }
    let before = st.short_replies.load(Ordering::Relaxed);
    for i in 0..2000u64 {
        ep.request_short((me + 1 + arg(i % u64::from(n))) % n, H_SHORT, &[1000, 1001])
            .map_err(e)?;
    }
    ep.wait_until(|| {
        st.counted.load(Ordering::Relaxed) >= storm * u64::from(n)
            && st.short_replies.load(Ordering::Relaxed) >= before + 2000
    })
    .map_err(e)?;
    ep.barrier().map_err(e)?;

    // Several threads sending at once.
    let before = st.short_replies.load(Ordering::Relaxed);
    std::thread::scope(|s| {
        for t in 0..3u32 {
            let ep = ep.clone();
            s.spawn(move || {
                for i in 0..500u32 {
                    let dest = (me + t + i) % n;
                    if let Err(err) = ep.request_short(dest, H_SHORT, &[1000]) {
                        return Err(err.to_string());
                    }
                }
                Ok(())
            });
        }
    });
    ep.wait_until(|| st.short_replies.load(Ordering::Relaxed) >= before + 1500)
        .map_err(e)?;
    ep.barrier().map_err(e)?;

    // Put/get, on the path chosen at attach (native MPI one-sided, or the AM path).
    let next = (me + 1) % n;
    let prev = (me + n - 1) % n;
    let rma_off = 2 * u64::from(n) * REGION;
    ep.put(next, rma_off, &filled(u64::from(me) + 7, RMA_LEN))
        .map_err(e)?;
    ep.barrier().map_err(e)?;
    let mut got = vec![0u8; RMA_LEN];
    ep.read_local(rma_off, &mut got).map_err(e)?;
    if !matches(u64::from(prev) + 7, &got) {
        st.fail(format!("put from rank {prev} did not arrive intact"));
    }
    let mut back = vec![0u8; RMA_LEN];
    ep.get(next, rma_off, &mut back).map_err(e)?;
    if !matches(u64::from(me) + 7, &back) {
        st.fail(format!("get from rank {next} returned wrong bytes"));
    }
    ep.barrier().map_err(e)?;

    // Plain MPI on the world communicator while amnet messages are in flight: a receive from
    // any source with any tag must see only the client's message.
    let world = SimpleCommunicator::world();
    let before = st.short_replies.load(Ordering::Relaxed);
    for dest in 0..n {
        ep.request_short(dest, H_SHORT, &[1000, 1001, 1002])
            .map_err(e)?;
    }
    let token = 1_000_000 + u64::from(me);
    let next_i = i32::try_from(next).unwrap_or(0);
    let (value, from) = amnet_mpi::mpi::request::scope(|scope| {
        let sreq = world
            .process_at_rank(next_i)
            .immediate_send_with_tag(scope, &token, 3);
        let (v, status) = world.any_process().receive::<u64>();
        sreq.wait();
        (v, status.source_rank())
    });
    if value != 1_000_000 + u64::from(prev) || from != i32::try_from(prev).unwrap_or(-1) {
        st.fail(format!(
            "world receive got {value} from rank {from}; expected {} from rank {prev}",
            1_000_000 + u64::from(prev)
        ));
    }
    ep.wait_until(|| st.short_replies.load(Ordering::Relaxed) >= before + u64::from(n))
        .map_err(e)?;
    ep.barrier().map_err(e)?;

    // The same from a second thread, concurrently with an amnet storm on this one.
    let multiple = matches!(
        amnet_mpi::mpi::environment::threading_support(),
        amnet_mpi::mpi::Threading::Multiple
    );
    if multiple {
        let rounds = 200u64;
        // Absolute: peers may have started their storm before this rank left the barrier.
        let expect = (storm + 2000) * u64::from(n);
        let world_errors = std::thread::scope(|s| {
            let h = s.spawn(|| {
                let world = SimpleCommunicator::world();
                let mut bad = 0u32;
                for r in 0..rounds {
                    let v = r * 1000 + u64::from(me);
                    let (got, _) = amnet_mpi::mpi::request::scope(|scope| {
                        let sreq = world
                            .process_at_rank(next_i)
                            .immediate_send_with_tag(scope, &v, 4);
                        let got = world.any_process().receive::<u64>();
                        sreq.wait();
                        got
                    });
                    if got != r * 1000 + u64::from(prev) {
                        bad += 1;
                    }
                }
                bad
            });
            for _ in 0..2000 {
                for dest in 0..n {
                    if let Err(err) = ep.request_short(dest, H_COUNT, &[]) {
                        st.fail(err.to_string());
                    }
                }
            }
            h.join().unwrap_or(u32::MAX)
        });
        if world_errors != 0 {
            st.fail(format!("{world_errors} world messages went astray"));
        }
        ep.wait_until(|| st.counted.load(Ordering::Relaxed) >= expect)
            .map_err(e)?;
        ep.barrier().map_err(e)?;
    }
    Ok(())
}

fn main() -> Result<(), String> {
    let scenario = std::env::args().nth(1).unwrap_or_else(|| "all".into());
    if scenario == "serialized" {
        // The client initializes MPI itself, at a level below MPI_THREAD_MULTIPLE: the conduit
        // joins that initialization and serializes its MPI calls. The universe is never
        // dropped (that would finalize MPI under amnet's feet); the conduit finalizes at exit.
        let universe =
            amnet_mpi::mpi::initialize_with_threading(amnet_mpi::mpi::Threading::Serialized);
        std::mem::forget(universe);
    }
    let conduit = MpiConduit::from_env().map_err(|e| e.to_string())?;
    if scenario == "serialized" && conduit.thread_level() == amnet_mpi::mpi::Threading::Multiple {
        return Err("the client asked for MPI_THREAD_SERIALIZED but got MULTIPLE".into());
    }
    let ep = Endpoint::new(Box::new(conduit)).map_err(|e| e.to_string())?;
    let (me, n) = (ep.rank(), ep.size());
    let st = Arc::new(State::default());
    if scenario == "exit-before-attach" && me == 1 {
        ep.exit(17);
    }
    ep.attach(handlers(&st, n)?, seg_len(n))
        .map_err(|e| e.to_string())?;
    ep.barrier().map_err(|e| e.to_string())?;
    let last = n - 1;
    match scenario.as_str() {
        "all" | "serialized" => {
            check(&ep, &st)?;
            let errors = st.errors.lock().unwrap_or_else(|e| e.into_inner()).clone();
            ep.barrier().map_err(|e| e.to_string())?;
            if !errors.is_empty() {
                return Err(format!("rank {me}: {}", errors.join("; ")));
            }
            if me == 0 {
                println!("mpi_check: {n} ranks: all checks passed");
            }
            ep.barrier().map_err(|e| e.to_string())?;
            Ok(())
        }
        "exit" => {
            if me == 1 % n {
                std::thread::sleep(Duration::from_millis(200));
                ep.exit(7);
            }
            loop {
                ep.barrier().map_err(|e| e.to_string())?;
            }
        }
        "exit-in-handler" => {
            if me == 0 {
                ep.request_short(1 % n, H_EXIT, &[9])
                    .map_err(|e| e.to_string())?;
            }
            ep.wait_until(|| false).map_err(|e| e.to_string())?;
            Ok(())
        }
        "error" => {
            if me == 1 % n {
                return Err("rank 1 fails on purpose".into());
            }
            loop {
                ep.barrier().map_err(|e| e.to_string())?;
            }
        }
        "exit-before-attach" => Err("rank 1 should have ended the job".into()),
        "panic" => {
            if me == last {
                // One line instead of the default hook's report and backtrace, so that a CI
                // log's first report of a panic is a real one.
                std::panic::set_hook(Box::new(|_| {
                    eprintln!("mpi_check: deliberate panic of the last rank");
                }));
                panic!("rank {me} panics on purpose");
            }
            loop {
                ep.barrier().map_err(|e| e.to_string())?;
            }
        }
        "straggler" => {
            if me == 0 {
                return Ok(());
            }
            // Compute without polling amnet: the job ends around this rank.
            std::thread::sleep(Duration::from_secs(600));
            Err("the straggler was not ended".into())
        }
        "hang" => {
            std::thread::sleep(Duration::from_secs(600));
            Ok(())
        }
        other => Err(format!("unknown scenario {other:?}")),
    }
}
