//! A rank's doorbell: how a sender wakes the rank's progress thread when it sleeps in the
//! conduit's idle wait, without a system call or a fence on the send path while nobody sleeps.
//!
//! The protocol is Dekker's, split between the ring and one word per rank:
//!
//! ```text
//!  sleeper (idle wait)                      sender (after a push)
//!  word.store(1)            SeqCst          enq CAS (the ring's claim)   SeqCst
//!  every inbound ring's enq == deq?  SeqCst word.load() != 0 ?          SeqCst
//!    no:  word = 0, return                    yes: word.swap(0), futex wake
//!    yes: futex wait while word == 1
//! ```
//!
//! All four accesses are sequentially consistent, so they fall in one total order: either
//! the sender's claim comes first, and the sleeper's check sees the claimed position and does
//! not sleep, or the sleeper's store comes first, and the sender's load sees it and wakes it.
//! A message is never left unseen by a sleeper for longer than its wait's timeout, and not
//! even that: the timeout only bounds how late the thread notices what is not a message (the
//! job ending, a request to stop). On x86 the sender pays nothing: its claim already is a
//! locked instruction and a sequentially consistent load is a plain load, of a line that
//! stays in its cache while the receiver does not sleep.
//!
//! loom treats sequentially consistent loads and stores as acquire/release only; under
//! `cfg(loom)` each side adds the `fence(SeqCst)` that its two accesses imply, which is what
//! `tests/loom.rs` checks.

use std::time::Duration;

use amnet_core::sync::{AtomicU32, Ordering};

/// One rank's doorbell word, on a cache line of its own: 0 while the rank's progress thread
/// does not sleep, 1 while it is about to or does. Zero-filled memory is a doorbell at rest.
#[repr(C, align(64))]
#[derive(Debug)]
pub struct Doorbell {
    word: AtomicU32,
}

impl Default for Doorbell {
    fn default() -> Self {
        Self::new()
    }
}

impl Doorbell {
    /// A doorbell at rest (zero-filled shared memory is one too).
    pub fn new() -> Self {
        Doorbell {
            word: AtomicU32::new(0),
        }
    }

    /// Sleeper: announce the sleep. The caller then checks every ring it could be woken for
    /// ([`Ring::claimed`](crate::ring::Ring::claimed)) and either [`rest`](Self::rest)s at
    /// once, when one holds a message, or [`wait`](Self::wait)s.
    #[inline]
    pub fn arm(&self) {
        self.word.store(1, Ordering::SeqCst);
        #[cfg(loom)]
        amnet_core::sync::fence(Ordering::SeqCst);
    }

    /// Sleeper: the sleep is over (woken, timed out, or not started).
    #[inline]
    pub fn rest(&self) {
        self.word.store(0, Ordering::Relaxed);
    }

    /// Sleeper: block while the word is still 1, at most `max` (a futex wait; it returns at
    /// once when a sender already rang).
    pub fn wait(&self, max: Duration) {
        #[cfg(not(loom))]
        futex_wait(&self.word, 1, max);
        #[cfg(loom)]
        let _ = max;
    }

    /// Sender, after a push into one of the owner's rings: wake the owner's progress thread if
    /// it sleeps or is about to. Returns whether it rang.
    #[inline(always)]
    pub fn ring(&self) -> bool {
        #[cfg(loom)]
        amnet_core::sync::fence(Ordering::SeqCst);
        if self.word.load(Ordering::SeqCst) == 0 {
            return false;
        }
        self.ring_slow()
    }

    #[cold]
    #[inline(never)]
    fn ring_slow(&self) -> bool {
        // Of several senders that see the sleeper, one makes the system call.
        if self.word.swap(0, Ordering::Relaxed) == 0 {
            return false;
        }
        #[cfg(not(loom))]
        futex_wake(&self.word);
        true
    }

    /// True while the owner sleeps or is about to (for tests).
    pub fn armed(&self) -> bool {
        self.word.load(Ordering::SeqCst) != 0
    }
}

/// `futex(FUTEX_WAIT)` on a word that may be shared between processes (no private flag).
#[cfg(not(loom))]
fn futex_wait(word: &AtomicU32, expect: u32, max: Duration) {
    #[allow(clippy::cast_possible_wrap, clippy::cast_lossless)] // below 10^9 fits any c_long
    let ts = libc::timespec {
        tv_sec: libc::time_t::try_from(max.as_secs()).unwrap_or(libc::time_t::MAX),
        tv_nsec: max.subsec_nanos() as libc::c_long,
    };
    // SAFETY: `word` is a valid, aligned u32 for the duration of the call; the kernel only
    // compares it with `expect` and sleeps; `ts` is a valid relative timeout. An error (EAGAIN
    // when the word already changed, EINTR, ETIMEDOUT) means the wait is over, which is all
    // the caller needs.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT,
            expect,
            &ts as *const libc::timespec,
            std::ptr::null::<u32>(),
            0u32,
        );
    }
}

/// `futex(FUTEX_WAKE)` of one waiter.
#[cfg(not(loom))]
fn futex_wake(word: &AtomicU32) {
    // SAFETY: `word` is a valid, aligned u32; waking has no effect on memory.
    unsafe {
        libc::syscall(libc::SYS_futex, word.as_ptr(), libc::FUTEX_WAKE, 1i32);
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Instant;

    #[test]
    fn a_ring_wakes_a_waiter_long_before_its_timeout() {
        let b = Arc::new(Doorbell::new());
        assert!(!b.ring(), "a doorbell at rest rang");
        let w = {
            let b = b.clone();
            std::thread::spawn(move || {
                b.arm();
                let t = Instant::now();
                b.wait(Duration::from_secs(20));
                b.rest();
                t.elapsed()
            })
        };
        while !b.armed() {
            std::thread::yield_now();
        }
        std::thread::sleep(Duration::from_millis(20));
        assert!(b.ring(), "an armed doorbell did not ring");
        let waited = w.join().unwrap();
        assert!(waited < Duration::from_secs(10), "woken after {waited:?}");
        assert!(!b.armed());
    }

    #[test]
    fn a_wait_ends_at_its_timeout() {
        let b = Doorbell::new();
        b.arm();
        let t = Instant::now();
        b.wait(Duration::from_millis(5));
        b.rest();
        assert!(t.elapsed() >= Duration::from_millis(4));
    }
}
