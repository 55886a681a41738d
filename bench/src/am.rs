//! The `am` suite: handlers for Short, Medium and Long request/reply round trips between
//! ranks 0 and 1 (timed in `latency`), and Medium and Long bandwidth (a window of requests
//! streamed to rank 1, then one ack).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use amnet::{Category, Endpoint, HandlerTable, Token};

use crate::floor::CopyFloor;
use crate::measure::Samples;
use crate::report::Row;
use crate::{BenchError, Plan};

/// Short request: rank 1 replies with a Short to [`H_SHORT_REP`].
pub(crate) const H_SHORT_REQ: u8 = 200;
/// Short reply: counts a reply.
pub(crate) const H_SHORT_REP: u8 = 201;
/// Medium request: rank 1 echoes the payload in a Medium reply to [`H_MEDIUM_REP`].
pub(crate) const H_MEDIUM_REQ: u8 = 202;
/// Medium reply: counts a reply.
pub(crate) const H_MEDIUM_REP: u8 = 203;
/// Long request: rank 1 echoes the payload in a Long reply to [`H_LONG_REP`], at offset 0
/// of rank 0's segment.
pub(crate) const H_LONG_REQ: u8 = 204;
/// Long reply: counts a reply.
pub(crate) const H_LONG_REP: u8 = 205;
/// Bandwidth sink (Medium or Long request): counts a message, no reply.
pub(crate) const H_SINK: u8 = 206;
/// Window acknowledgement (a Short request from rank 1 to rank 0): counts an ack.
pub(crate) const H_ACK: u8 = 207;
/// End of a block of puts or gets (a Short request from rank 0 to rank 1): counts a mark.
pub(crate) const H_MARK: u8 = 208;

/// Counters the handlers bump; the benchmark loops wait on them.
#[derive(Debug, Default)]
pub(crate) struct AmState {
    /// Replies received (rank 0).
    pub(crate) replies: AtomicU64,
    /// Requests answered (rank 1).
    pub(crate) served: AtomicU64,
    /// Sink messages received (rank 1).
    sunk: AtomicU64,
    /// Window acks received (rank 0).
    acks: AtomicU64,
    /// Block marks received (rank 1).
    pub(crate) marks: AtomicU64,
}

/// A handler failed to reply: nothing can complete any more, so end the job.
fn reply_failed(tok: &Token<'_>, e: &amnet::Error) -> ! {
    eprintln!(
        "amnet-bench: reply from handler {} failed: {e}",
        tok.handler()
    );
    tok.endpoint().exit(3)
}

/// Register the suite's handlers in `t`.
pub(crate) fn register(t: &mut HandlerTable, st: &Arc<AmState>) -> amnet::Result<()> {
    let s = st.clone();
    t.register(H_SHORT_REQ, move |tok, args, _| {
        if let Err(e) = tok.reply_short(H_SHORT_REP, args) {
            reply_failed(tok, &e);
        }
        s.served.fetch_add(1, Ordering::Relaxed);
    })?;
    let s = st.clone();
    t.register(H_MEDIUM_REQ, move |tok, args, payload| {
        if let Err(e) = tok.reply_medium(H_MEDIUM_REP, args, payload) {
            reply_failed(tok, &e);
        }
        s.served.fetch_add(1, Ordering::Relaxed);
    })?;
    let s = st.clone();
    t.register(H_LONG_REQ, move |tok, args, payload| {
        if let Err(e) = tok.reply_long(H_LONG_REP, args, payload, 0) {
            reply_failed(tok, &e);
        }
        s.served.fetch_add(1, Ordering::Relaxed);
    })?;
    for h in [H_SHORT_REP, H_MEDIUM_REP, H_LONG_REP] {
        let s = st.clone();
        t.register(h, move |_, _, _| {
            s.replies.fetch_add(1, Ordering::Release);
        })?;
    }
    let s = st.clone();
    t.register(H_SINK, move |_, _, _| {
        s.sunk.fetch_add(1, Ordering::Release);
    })?;
    let s = st.clone();
    t.register(H_ACK, move |_, _, _| {
        s.acks.fetch_add(1, Ordering::Release);
    })?;
    let s = st.clone();
    t.register(H_MARK, move |_, _, _| {
        s.marks.fetch_add(1, Ordering::Release);
    })?;
    Ok(())
}

/// Send one request of `cat` with `payload` to rank 1 (Long: at offset 0 of its segment).
#[inline]
pub(crate) fn send(
    ep: &Endpoint,
    cat: Category,
    h: u8,
    args: &[u32],
    payload: &[u8],
) -> amnet::Result<()> {
    match cat {
        Category::Short => ep.request_short(1, h, args),
        Category::Medium => ep.request_medium(1, h, args, payload),
        Category::Long => ep.request_long(1, h, args, payload, 0),
    }
}

/// The request handler and payload size of the round trip of `cat`.
pub(crate) fn rtt_request(cat: Category) -> (u8, usize) {
    match cat {
        Category::Short => (H_SHORT_REQ, 0),
        Category::Medium => (H_MEDIUM_REQ, 8),
        Category::Long => (H_LONG_REQ, 8),
    }
}

/// Collective: bandwidth of `cat` requests carrying `payload`: rank 0 streams a window of
/// requests, rank 1 acks the window once it has run all their handlers. One sample is one
/// window, divided by its size.
fn bandwidth(
    ep: &Endpoint,
    st: &AmState,
    plan: &Plan,
    cat: Category,
    payload: &[u8],
    (op, lc): (&'static str, bool),
) -> Result<Option<Row>, BenchError> {
    let bytes = payload.len();
    let window = plan.window(bytes);
    let iters = plan.window_iters(bytes, window);
    let warmup = plan.warmup(iters);
    let acks0 = st.acks.load(Ordering::Acquire);
    let sunk0 = st.sunk.load(Ordering::Acquire);
    ep.barrier()?;
    let mut row = None;
    match ep.rank() {
        0 => {
            // Each timed window is followed (untimed by the window's clock) by a local
            // memcpy of the same bytes: the floor sample that pairs with it.
            let mut floor = CopyFloor::new(bytes);
            let mut win_ns = Vec::with_capacity(iters);
            let mut floor_ns = Vec::with_capacity(iters);
            for i in 0..warmup + iters {
                let t = Instant::now();
                if lc {
                    send_window_lc(ep, cat, payload, window)?;
                } else {
                    for _ in 0..window {
                        send(ep, cat, H_SINK, &[], payload)?;
                    }
                }
                let want = acks0 + i as u64 + 1;
                ep.wait_until(|| st.acks.load(Ordering::Acquire) >= want)?;
                let w = t.elapsed();
                let t = Instant::now();
                for _ in 0..window {
                    floor.copy_in(payload);
                }
                let f = t.elapsed();
                if i >= warmup {
                    win_ns.push(w.as_nanos() as f64 / window as f64);
                    floor_ns.push(f.as_nanos() as f64 / window as f64);
                }
            }
            let per_msg = Samples::from_ns(win_ns);
            let floor = Samples::from_ns(floor_ns);
            row = Some(Row::bandwidth("am", op, bytes, &per_msg, window).with_floor(&floor));
        }
        1 => {
            for i in 0..(warmup + iters) as u64 {
                let want = sunk0 + (i + 1) * window as u64;
                ep.wait_until(|| st.sunk.load(Ordering::Acquire) >= want)?;
                ep.request_short(0, H_ACK, &[])?;
            }
        }
        _ => {}
    }
    ep.barrier()?;
    Ok(row)
}

/// A window of `cat` requests carrying `payload` with local completion (`request_long_nb`,
/// `request_medium_nb`: udp sends large payloads from where they lie), synced at its end.
fn send_window_lc(
    ep: &Endpoint,
    cat: Category,
    payload: &[u8],
    window: usize,
) -> Result<(), BenchError> {
    let mut hs = Vec::with_capacity(window);
    for _ in 0..window {
        // SAFETY: `payload` is borrowed, unchanged, for the whole call, and every handle is
        // synced before it returns (on an error, the handles' drops end the holds).
        let h = unsafe {
            if cat == Category::Long {
                ep.request_long_nb(1, H_SINK, &[], payload, 0)
            } else {
                ep.request_medium_nb(1, H_SINK, &[], payload)
            }
        };
        hs.push(h?);
    }
    ep.wait_sync_all(&mut hs)?;
    Ok(())
}

/// Collective: the bandwidth half of the suite (the round trips are measured interleaved
/// with the floor, in `latency`), with payloads taken from `local` (at least
/// `plan.max_bytes` long). Returns the rows on rank 0.
pub(crate) fn run(
    ep: &Endpoint,
    st: &AmState,
    plan: &Plan,
    local: &[u8],
) -> Result<Vec<Row>, BenchError> {
    let mut rows = Vec::new();
    let max_medium = ep.max_medium().min(plan.max_bytes);
    for n in plan.sizes(max_medium) {
        let p = &local[..n];
        rows.extend(bandwidth(
            ep,
            st,
            plan,
            Category::Medium,
            p,
            ("medium_bw", false),
        )?);
    }
    for n in plan.sizes(plan.max_bytes) {
        let p = &local[..n];
        rows.extend(bandwidth(
            ep,
            st,
            plan,
            Category::Long,
            p,
            ("long_bw", false),
        )?);
        // With local completion: where the conduit sends from the caller's buffer (udp,
        // 16 KiB and more), no copy into the conduit.
        rows.extend(bandwidth(
            ep,
            st,
            plan,
            Category::Long,
            p,
            ("long_lc_bw", true),
        )?);
    }
    Ok(rows)
}
