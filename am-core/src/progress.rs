//! The optional progress thread (spec/core.md §5a): a thread of the rank that polls the
//! endpoint while the client's threads do not, so that active messages, AM-path gets and
//! atomics, and the collectives' steps are served while the client computes; handlers then
//! run on it. When nothing arrives it backs off and then waits in the conduit's idle wait
//! ([`Conduit::idle_wait`](crate::Conduit::idle_wait): the doorbell futex on smp, the socket
//! on udp, a short sleep elsewhere) instead of spinning; while a client thread polls, it stays
//! out of the way.

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use crate::endpoint::{Endpoint, Inner};
use crate::Result;

/// How long after its last message the thread spins before it starts yielding.
const SPIN_FOR: Duration = Duration::from_micros(20);
/// How long after its last message the thread polls (spinning, then yielding) before it
/// waits in the conduit. Counted in time, not in polls: a peer in a request/reply exchange
/// that took a wake-up to answer has often gone to sleep in its own wait, and comes back
/// with the next request tens of microseconds later; a thread that gave up after a few
/// polls would be asleep again by then, and every exchange would pay two wake-ups.
const POLL_FOR: Duration = Duration::from_micros(300);
/// The first idle wait; each further idle wait doubles it up to [`MAX_WAIT`].
const FIRST_WAIT: Duration = Duration::from_micros(20);
/// The longest idle wait: the bound on how late the thread notices a message where the
/// conduit's wait cannot wake early.
const MAX_WAIT: Duration = Duration::from_micros(500);
/// How long the thread waits when it saw a client thread poll since its last look.
const CLIENT_ACTIVE_WAIT: Duration = Duration::from_micros(200);

thread_local! {
    /// True on progress threads (their polls are not the client's).
    static ON_PROGRESS_THREAD: Cell<bool> = const { Cell::new(false) };
}

/// The progress thread's state in an endpoint.
#[derive(Debug, Default)]
pub(crate) struct Progress {
    /// A progress thread runs (client polls are counted only then).
    pub(crate) on: AtomicBool,
    /// Polls by client threads, while `on`.
    client_polls: AtomicU64,
    /// Asks the thread to end.
    stop: AtomicBool,
    /// The thread holds a strong reference to the endpoint (during a poll or an idle wait).
    holding: AtomicBool,
    /// The thread, to join when the endpoint goes.
    handle: Mutex<Option<std::thread::JoinHandle<()>>>,
}

/// True on a progress thread.
pub(crate) fn on_progress_thread() -> bool {
    ON_PROGRESS_THREAD.with(Cell::get)
}

impl Progress {
    /// Called when a client's `Endpoint` goes: when the only other reference is the one the
    /// thread holds for its current poll, this was the client's last, so the thread is told
    /// to end and joined here (the endpoint then ends on this thread, not on the progress
    /// thread after the client thought it gone).
    pub(crate) fn client_dropping(&self, strong: usize) {
        if strong == 2
            && self.on.load(Ordering::Acquire)
            && self.holding.load(Ordering::Acquire)
            && !on_progress_thread()
        {
            self.shut_down();
        }
    }

    /// Called at every poll: counts the polls of client threads while a progress thread runs.
    #[inline]
    pub(crate) fn note_poll(&self) {
        if self.on.load(Ordering::Relaxed) && !ON_PROGRESS_THREAD.with(Cell::get) {
            self.client_polls.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Ends the thread (when the endpoint goes) and waits for it, unless called on it.
    pub(crate) fn shut_down(&self) {
        self.stop.store(true, Ordering::Release);
        let h = self.handle.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(h) = h {
            if h.thread().id() != std::thread::current().id() {
                let _ = h.join();
            }
        }
    }
}

/// The thread's loop; ends when the endpoint is gone, `stop` is set, the job is ending, or
/// a poll fails (the client's own calls report the failure).
fn run(weak: &Weak<Inner>) {
    /// Marks the thread ended, however it ends (`progress_thread_running` turns false, and
    /// futures go back to re-polling themselves).
    struct Ended(Weak<Inner>);
    impl Drop for Ended {
        fn drop(&mut self) {
            if let Some(inner) = self.0.upgrade() {
                inner.progress.on.store(false, Ordering::Release);
                inner.progress.holding.store(false, Ordering::Release);
            }
        }
    }
    let _ended = Ended(weak.clone());
    ON_PROGRESS_THREAD.with(|c| c.set(true));
    let mut last_work = Instant::now();
    let mut wait = FIRST_WAIT;
    let mut seen_client = 0u64;
    loop {
        let Some(inner) = weak.upgrade() else { return };
        let p = &inner.progress;
        p.holding.store(true, Ordering::Release);
        if p.stop.load(Ordering::Acquire) {
            p.holding.store(false, Ordering::Release);
            return;
        }
        let ep = Endpoint { inner };
        let clients = ep.inner.progress.client_polls.load(Ordering::Relaxed);
        let mut pause = None;
        let mut idle = Duration::ZERO;
        if clients != seen_client {
            // A client thread polls: it runs the handlers; look again a little later.
            seen_client = clients;
            last_work = Instant::now();
            wait = FIRST_WAIT;
            pause = Some(CLIENT_ACTIVE_WAIT);
        } else if ep.exit_requested().is_some() {
            ep.inner.progress.holding.store(false, Ordering::Release);
            return;
        } else {
            match ep.poll_inner(false) {
                Ok(0) => idle = last_work.elapsed(),
                Ok(_) => {
                    last_work = Instant::now();
                    wait = FIRST_WAIT;
                }
                Err(e) => {
                    crate::diag!("amnet rank {}: the progress thread stops: {e}", ep.rank());
                    ep.inner.progress.holding.store(false, Ordering::Release);
                    return;
                }
            }
            if idle >= POLL_FOR {
                ep.inner.conduit.idle_wait(wait);
                wait = (wait * 2).min(MAX_WAIT);
            }
        }
        ep.inner.progress.holding.store(false, Ordering::Release);
        drop(ep);
        match pause {
            Some(d) => std::thread::sleep(d),
            None if idle.is_zero() => {}
            None if idle < SPIN_FOR => std::hint::spin_loop(),
            None if idle < POLL_FOR => std::thread::yield_now(),
            None => {}
        }
    }
}

impl Endpoint {
    /// Start this rank's progress thread (also done at attach with
    /// `AMNET_PROGRESS_THREAD=1` or `Builder::progress_thread(true)`): from then on a thread
    /// of the library polls the endpoint whenever the client's threads do not, so that
    /// active messages, AM-path put/get and atomics aimed at this rank, and its collectives
    /// advance while the client computes; handlers may then run on that thread. Idle, it
    /// waits in the conduit (the doorbell futex on smp, the socket on udp, sleeps of at most
    /// 0.5 ms elsewhere) instead of spinning. Idempotent; ends with the endpoint. Errors: `NotAttached`.
    pub fn start_progress_thread(&self) -> Result<()> {
        self.attached_for("start_progress_thread")?;
        let p = &self.inner.progress;
        let mut h = p.handle.lock().unwrap_or_else(|e| e.into_inner());
        match h.take() {
            // Ended (the job ending, a failed poll): start another.
            Some(t) if t.is_finished() => {
                let _ = t.join();
            }
            Some(t) => {
                *h = Some(t);
                return Ok(());
            }
            None => {}
        }
        p.stop.store(false, Ordering::Release);
        let weak = Arc::downgrade(&self.inner);
        let t = std::thread::Builder::new()
            .name(format!("amnet-progress-{}", self.rank()))
            .spawn(move || run(&weak))
            .map_err(|e| crate::Error::Os {
                conduit: "core",
                op: "spawn the progress thread".to_string(),
                source: Arc::new(e),
            })?;
        *h = Some(t);
        p.on.store(true, Ordering::Release);
        Ok(())
    }

    /// Stop this rank's progress thread, if one runs, and wait for it to end (its current
    /// poll or idle wait, at most about a millisecond). `Error::Usage` from a handler running
    /// on the progress thread itself. A later `start_progress_thread` starts a new one.
    pub fn stop_progress_thread(&self) -> Result<()> {
        if on_progress_thread() {
            return Err(crate::Error::Usage {
                op: "stop_progress_thread",
                detail: "called on the progress thread itself (from a handler it runs)".into(),
            });
        }
        self.inner.progress.shut_down();
        self.inner.progress.on.store(false, Ordering::Release);
        Ok(())
    }

    /// True when this rank's progress thread runs.
    pub fn progress_thread_running(&self) -> bool {
        self.inner.progress.on.load(Ordering::Acquire)
    }
}
