//! The progress thread: while one rank computes without any amnet call, rank 0's active
//! message, get and atomic aimed at it are answered, and the computing rank learns that they
//! were only through a flag rank 0 puts into its segment afterwards; a collective the
//! computing rank started completes on the other ranks in the same way. And handles as
//! futures, awaited by a minimal executor, with and without the thread.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use amnet::coll::raw::Collectives;
use amnet::coll::Addr;
use amnet::sync_modes::flags as f;
use amnet::{AtomicOp, AtomicOps, Error};

use crate::{ck, ensure, test, Ctx, Test, Verdict};

/// Request: replies `H_PONG` with its arguments (registered after attach by this test).
const H_PING: u8 = 202;
/// Reply: counts.
const H_PONG: u8 = 203;
/// The element the atomics use (u64, rank 1).
const COUNTER_OFF: u64 = (9 << 20) + (448 << 10);
/// Bytes rank 0 gets from rank 1.
const GET_OFF: u64 = COUNTER_OFF + 64;
/// The flag rank 0 sets in rank 1's segment once its operations were answered (u64).
const FLAG_OFF: u64 = COUNTER_OFF + 128;
/// The longest rank 1 computes waiting for the flag: without a progress thread it never
/// comes (rank 0's first operation waits for rank 1's polls), so the test fails then.
const COMPUTE_LIMIT: Duration = Duration::from_secs(20);

/// The tests of this module.
pub fn tests() -> Vec<Test> {
    vec![
        test("handle_futures", futures),
        Test {
            min_ranks: 2,
            ..test("progress_thread", progress_thread)
        },
        Test {
            min_ranks: 2,
            ..test("progress_thread_collective", collective)
        },
    ]
}

/// Busy work that makes no amnet call until `flag` (a word of this rank's segment, read
/// through the atomic view obtained beforehand) is set, or `limit` passes. Returns whether
/// the flag came.
fn compute_until(flag: &AtomicU64, limit: Duration) -> bool {
    let t = Instant::now();
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    while t.elapsed() < limit {
        for _ in 0..10_000 {
            x = std::hint::black_box(x.rotate_left(7) ^ 0x1234_5678);
        }
        if flag.load(Ordering::Acquire) == 1 {
            return true;
        }
    }
    false
}

/// Replies `H_PONG` received.
static PONGS: AtomicU64 = AtomicU64::new(0);

fn progress_thread(c: &Ctx<'_>) -> Verdict {
    let registered =
        c.ep.register_handler(H_PING, |tok, args, _p| {
            let _ = tok.reply_short(H_PONG, args);
        })
        .and_then(|()| {
            c.ep.register_handler(H_PONG, |_tok, _args, _p| {
                PONGS.fetch_add(1, Ordering::SeqCst);
            })
        });
    match registered {
        Ok(()) | Err(Error::DuplicateHandler { .. }) => {}
        Err(e) => return Err(format!("register_handler: {e}")),
    }
    ck("start_progress_thread", c.ep.start_progress_thread())?;
    ck("start_progress_thread again", c.ep.start_progress_thread())?;
    ensure(c.ep.progress_thread_running(), || {
        "progress_thread_running() is false after start_progress_thread".into()
    })?;
    let ad = ck("atomic_domain", c.ep.atomic_domain::<u64>(AtomicOps::ALL))?;
    if c.rank() == 1 {
        ck("write_local", c.ep.write_local(COUNTER_OFF, &[0u8; 136]))?;
        ck("write_local", c.ep.write_local(GET_OFF, b"progress"))?;
    }
    ck("barrier", c.ep.barrier())?;
    // Each rank's verdict, returned after the closing barriers (a failure must not leave
    // the ranks at different barriers).
    let mut verdict: Verdict = Ok(());
    if c.rank() == 1 {
        let flag = &ck(
            "segment_atomics",
            c.ep.segment_atomics::<AtomicU64>(1, FLAG_OFF, 1),
        )?[0];
        if !compute_until(flag, COMPUTE_LIMIT) {
            verdict = Err(format!(
                "computed for {COMPUTE_LIMIT:?} without rank 0's operations being answered \
                 (no flag) on {}",
                c.ep.conduit_name()
            ));
        }
    } else if c.rank() == 0 {
        verdict = ask_while_computing(c, &ad);
        // Whatever happened, let rank 1 stop computing (an atomic store, as rank 1 reads it).
        ck("set flag", ad.set(1, FLAG_OFF, 1))?;
    }
    ck("barrier", c.ep.barrier())?;
    if c.rank() == 1 {
        let v = ck("get", ad.get(1, COUNTER_OFF))?;
        ensure(v == 5, || format!("rank 1's counter {v}, expected 5"))?;
    }
    // The rest of the suite runs as clients run by default, without the thread.
    ck("stop_progress_thread", c.ep.stop_progress_thread())?;
    ensure(!c.ep.progress_thread_running(), || {
        "progress_thread_running() is true after stop_progress_thread".into()
    })?;
    ck("barrier", c.ep.barrier())?;
    verdict
}

/// Rank 0: an AM round trip, a get and an atomic to rank 1 while it computes.
fn ask_while_computing(c: &Ctx<'_>, ad: &amnet::AtomicDomain<u64>) -> Verdict {
    let before = PONGS.load(Ordering::SeqCst);
    ck("request_short", c.ep.request_short(1, H_PING, &[7]))?;
    ck(
        "wait for the reply",
        c.ep.wait_until(|| PONGS.load(Ordering::SeqCst) > before),
    )?;
    let mut b = [0u8; 8];
    ck("get", c.ep.get(1, GET_OFF, &mut b))?;
    ensure(&b == b"progress", || format!("get returned {b:?}"))?;
    let old = ck("fetch_add", ad.fetch_add(1, COUNTER_OFF, 5))?;
    ensure(old == 0, || format!("fetch_add read {old}, expected 0"))
}

/// Where each rank's contribution to the collective lies.
const COLL_SRC: u64 = COUNTER_OFF + 8192;
/// Where the gathered blocks land.
const COLL_DST: u64 = COUNTER_OFF + 16384;
/// Bytes per rank.
const COLL_BYTES: usize = 96;

/// The block `rank` contributes in round `round`.
fn block_of(rank: u32, round: u32) -> Vec<u8> {
    crate::pattern::bytes(rank * 31 + round, COLL_BYTES)
}

/// A collective advances while one of its ranks computes: every rank starts a gather_all
/// with `OUT_ALLSYNC` (no rank's sync returns before every rank's destination is complete,
/// which takes each rank's own polls to notice and announce), then rank 1 computes without
/// any amnet call until rank 0's sync returned and rank 0 set a flag in rank 1's segment.
/// Twice, with other data the second time.
fn collective(c: &Ctx<'_>) -> Verdict {
    let co = crate::coll::coll(c)?;
    let (me, p) = (c.rank(), c.size());
    ck("start_progress_thread", c.ep.start_progress_thread())?;
    let ad = ck("atomic_domain", c.ep.atomic_domain::<u64>(AtomicOps::ALL))?;
    let mut verdict: Verdict = Ok(());
    for round in 0..2u32 {
        ck(
            "write_local",
            c.ep.write_local(COLL_SRC, &block_of(me, round)),
        )?;
        ck(
            "write_local",
            c.ep.write_local(COLL_DST, &vec![0u8; COLL_BYTES * p as usize]),
        )?;
        ck("write_local", c.ep.write_local(FLAG_OFF, &[0u8; 8]))?;
        ck("barrier", c.ep.barrier())?;
        let fl = f::IN_NOSYNC | f::OUT_ALLSYNC | f::SINGLE;
        let h = ck(
            "gather_all_nb",
            // SAFETY: segment offsets only: no address to keep valid.
            unsafe {
                co.gather_all_nb(
                    co.world(),
                    Addr::Seg(COLL_DST),
                    Addr::Seg(COLL_SRC),
                    COLL_BYTES,
                    fl,
                )
            },
        )?;
        if me == 1 {
            let flag = &ck(
                "segment_atomics",
                c.ep.segment_atomics::<AtomicU64>(1, FLAG_OFF, 1),
            )?[0];
            if !compute_until(flag, COMPUTE_LIMIT) && verdict.is_ok() {
                verdict = Err(format!(
                    "round {round}: computed for {COMPUTE_LIMIT:?} and rank 0's OUT_ALLSYNC \
                     gather_all did not complete (no flag) on {}",
                    c.ep.conduit_name()
                ));
            }
        }
        ck("wait_sync", co.wait_sync(h))?;
        if me == 0 {
            // Rank 1 computes until this flag: rank 0's sync returned without its polls.
            ck("set flag", ad.set(1, FLAG_OFF, 1))?;
        }
        let mut got = vec![0u8; COLL_BYTES * p as usize];
        ck("read_local", c.ep.read_local(COLL_DST, &mut got))?;
        for r in 0..p {
            let at = r as usize * COLL_BYTES;
            if got[at..at + COLL_BYTES] != block_of(r, round)[..] && verdict.is_ok() {
                verdict = Err(format!(
                    "round {round}: rank {r}'s block in rank {me}'s destination differs"
                ));
            }
        }
        ck("barrier", c.ep.barrier())?;
    }
    ck("stop_progress_thread", c.ep.stop_progress_thread())?;
    ck("barrier", c.ep.barrier())?;
    verdict
}

/// Unparks the executor's thread; counts its wake-ups.
struct Unpark {
    thread: std::thread::Thread,
    wakes: AtomicU64,
}

impl Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.wakes.fetch_add(1, Ordering::SeqCst);
        self.thread.unpark();
    }
}

/// A minimal executor: polls `f` on this thread, parking (at most 10 ms) between polls.
fn block_on<F: Future>(f: F) -> F::Output {
    let unpark = Arc::new(Unpark {
        thread: std::thread::current(),
        wakes: AtomicU64::new(0),
    });
    let waker = Waker::from(unpark);
    let mut cx = Context::from_waker(&waker);
    let mut f = std::pin::pin!(f);
    loop {
        if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
        std::thread::park_timeout(Duration::from_millis(10));
    }
}

/// The 300 bytes `rank` puts.
fn bytes_of(rank: u32) -> Vec<u8> {
    crate::pattern::bytes(rank.wrapping_mul(7919), 300)
}

/// Puts, gets and atomics to the next rank awaited as futures, on this thread's executor.
fn futures(c: &Ctx<'_>) -> Verdict {
    const OFF: u64 = COUNTER_OFF + 4096;
    let next = (c.rank() + 1) % c.size();
    let prev = (c.rank() + c.size() - 1) % c.size();
    let ad = ck("atomic_domain", c.ep.atomic_domain::<u64>(AtomicOps::ALL))?;
    ck("write_local", c.ep.write_local(OFF, &[0u8; 8]))?;
    ck("barrier", c.ep.barrier())?;
    for round in 0..2 {
        if round == 1 {
            ck("start_progress_thread", c.ep.start_progress_thread())?;
        }
        let data = bytes_of(c.rank());
        let at = OFF + 8 + 512 * round;
        let h = ck("put_nb", c.ep.put_nb(next, at, &data))?;
        ck("put future", block_on(c.ep.sync_future(h)))?;
        let h = ck("fetch_nb", ad.fetch_nb(next, OFF, AtomicOp::Add, 1, 0))?;
        let old = ck("fetch future", block_on(ad.fetch_future(h)))?;
        ensure(old == round, || {
            format!("fetch_add future read {old}, expected {round}")
        })?;
        ck("barrier", c.ep.barrier())?;
        let h = ck("get_nb_local", c.ep.get_nb_local(next, at, at + 300, 300))?;
        ck("get future", block_on(c.ep.sync_future(h)))?;
        let mut got = vec![0u8; 300];
        ck("read_local", c.ep.read_local(at + 300, &mut got))?;
        let want = bytes_of(c.rank());
        ensure(got == want, || {
            format!("round {round}: the get future's bytes differ")
        })?;
        let mut mine = vec![0u8; 300];
        ck("read_local", c.ep.read_local(at, &mut mine))?;
        let from_prev = bytes_of(prev);
        ensure(mine == from_prev, || {
            format!("round {round}: the put future's bytes differ")
        })?;
        ck("barrier", c.ep.barrier())?;
    }
    ck("stop_progress_thread", c.ep.stop_progress_thread())?;
    ck("barrier", c.ep.barrier())
}
