//! The `progress` suite: Short round trips from rank 0 to rank 1 while rank 1's client
//! makes no amnet call, so that rank 1's progress thread answers them. The client sleeps
//! (in 1 ms naps) rather than computes: a computing client would add the operating system's
//! time-sharing of its core with the progress thread, which measures the host's core count
//! (on a 2-core host, three busy threads) rather than the thread. Two kinds of sample, in
//! interleaved blocks:
//!
//! - `busy_short_rtt`: back to back, so the thread is still polling when the next request
//!   comes;
//! - `wake_short_rtt`: each after rank 0 slept [`PAUSE`], so the thread has gone idle and
//!   waits in the conduit's idle wait (the doorbell futex on smp, `poll(2)` on udp's socket);
//!   the sample includes its wake-up.
//!
//! Rank 1 learns that the suite is over through a flag that rank 0 sets with an atomic in
//! rank 1's segment, read from rank 1's atomic view of its own segment.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use amnet::{AtomicOps, Category, Endpoint};

use crate::am::{self, AmState};
use crate::measure::Samples;
use crate::report::Row;
use crate::{BenchError, Plan};

/// The flag rank 0 sets in rank 1's segment when it has all its samples (u64).
const FLAG_OFF: u64 = 128;
/// What rank 0 sleeps before each wake-up sample: longer than the progress thread's spin,
/// yield and wait backoff (about 1.3 ms to its longest wait).
const PAUSE: Duration = Duration::from_millis(3);
/// Back-to-back round trips per block.
const BUSY_BLOCK: usize = 200;
/// Wake-up round trips per block.
const WAKE_BLOCK: usize = 10;
/// Untimed round trips at the start of each block.
const WARMUP: usize = 2;

/// Collective (every rank): the suite's rows, on rank 0.
pub(crate) fn run(ep: &Endpoint, st: &AmState, plan: &Plan) -> Result<Vec<Row>, BenchError> {
    let me = ep.rank();
    let ad = ep.atomic_domain::<u64>(AtomicOps::ALL)?;
    if me == 1 {
        ad.set(1, FLAG_OFF, 0)?;
        ep.start_progress_thread()?;
    }
    ep.barrier()?;
    let mut rows = Vec::new();
    if me == 1 {
        let flag = &ep.segment_atomics::<AtomicU64>(1, FLAG_OFF, 1)?[0];
        while flag.load(Ordering::Acquire) != 1 {
            std::thread::sleep(Duration::from_millis(1));
        }
    } else if me == 0 {
        let busy_n = (plan.iters / 10).max(BUSY_BLOCK);
        let wake_n = (plan.iters / 200).clamp(WAKE_BLOCK, 200);
        let (mut busy, mut wake) = (Vec::new(), Vec::new());
        let mut replies = st.replies.load(Ordering::Acquire);
        while busy.len() < busy_n || wake.len() < wake_n {
            for i in 0..BUSY_BLOCK + WARMUP {
                let t = Instant::now();
                round_trip(ep, st, &mut replies)?;
                if i >= WARMUP {
                    busy.push(t.elapsed().as_nanos() as f64);
                }
            }
            for _ in 0..WAKE_BLOCK {
                std::thread::sleep(PAUSE);
                let t = Instant::now();
                round_trip(ep, st, &mut replies)?;
                wake.push(t.elapsed().as_nanos() as f64);
            }
        }
        ad.set(1, FLAG_OFF, 1)?;
        rows.push(Row::latency(
            "progress",
            "busy_short_rtt",
            0,
            &Samples::from_ns(busy),
            1,
        ));
        rows.push(Row::latency(
            "progress",
            "wake_short_rtt",
            0,
            &Samples::from_ns(wake),
            1,
        ));
    }
    ep.barrier()?;
    if me == 1 {
        ep.stop_progress_thread()?;
    }
    ep.barrier()?;
    Ok(rows)
}

/// One Short request to rank 1 and its reply.
fn round_trip(ep: &Endpoint, st: &AmState, replies: &mut u64) -> Result<(), BenchError> {
    let (req, _) = am::rtt_request(Category::Short);
    am::send(ep, Category::Short, req, &[], &[])?;
    *replies += 1;
    let want = *replies;
    ep.wait_until(|| st.replies.load(Ordering::Acquire) >= want)?;
    Ok(())
}
