//! Idle back-off for blocking waits.
//!
//! A wait polls; while nothing arrives it first spins (cheap, lowest latency), then yields the
//! core, then sleeps for growing intervals. Tests run 8 processes on 2 cores, where a waiter
//! that never gives up its core starves the very peer it waits for.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// Nanoseconds since the first call in this process: a monotonic clock that fits an atomic
/// (the conduits' nudge and keep-awake times).
pub fn now_ns() -> u64 {
    static START: OnceLock<Instant> = OnceLock::new();
    u64::try_from(START.get_or_init(Instant::now).elapsed().as_nanos()).unwrap_or(u64::MAX)
}

/// The window a peer's nudge opens, during which [`Conduit::keep_awake`](crate::Conduit::keep_awake)
/// says true: for transports whose one-sided operations progress only inside the target's
/// polls (mpi under MPICH, ofi over tcp), the origin nudges the target and the target's idle
/// waits keep polling for [`AwakeWindow::SPAN_NS`] instead of sleeping.
#[derive(Debug, Default)]
pub struct AwakeWindow {
    /// Until when (`now_ns`) the window lasts; 0: never opened.
    until: AtomicU64,
}

impl AwakeWindow {
    /// How long one nudge keeps the waits awake.
    pub const SPAN_NS: u64 = 2_000_000;

    /// A closed window.
    pub const fn new() -> Self {
        AwakeWindow {
            until: AtomicU64::new(0),
        }
    }

    /// A nudge arrived: stay awake for [`SPAN_NS`](Self::SPAN_NS) from now.
    pub fn nudged(&self) {
        self.until
            .store(now_ns().saturating_add(Self::SPAN_NS), Ordering::Relaxed);
    }

    /// True while the last nudge's window lasts.
    pub fn open(&self) -> bool {
        let until = self.until.load(Ordering::Relaxed);
        until != 0 && now_ns() < until
    }
}

/// Idle-wait state for one blocking call: [`Endpoint::backoff`](crate::Endpoint::backoff)
/// makes one with the endpoint's settings, for layers with wait loops of their own.
#[derive(Debug)]
pub struct Backoff {
    idle: u32,
    spin: u32,
    /// While the conduit asks to be kept awake: spin again (a host with a core per rank), or
    /// only yield instead of sleeping (an oversubscribed host, where a spinning rank would hold
    /// the core its peer needs).
    respin: bool,
}

const YIELDS: u32 = 200;

impl Backoff {
    /// A wait that spins `spin` idle polls; `respin` as in the field's doc (true unless the
    /// host is oversubscribed).
    pub fn new(spin: u32, respin: bool) -> Self {
        Backoff {
            idle: 0,
            spin,
            respin,
        }
    }

    /// True when the wait yields its core once its spin is over instead of spinning again
    /// (the host is oversubscribed): a caller's own spin before the wait then only delays the
    /// peer that the wait waits for.
    #[inline]
    pub fn yields(&self) -> bool {
        !self.respin
    }

    /// Something happened: start over at spinning.
    #[inline]
    pub fn reset(&mut self) {
        self.idle = 0;
    }

    /// Nothing happened: wait a little, longer each time. `awake` is asked when the spin is
    /// over (with `respin`) or before a sleep (without): while it says true, the wait spins
    /// again, or yields instead of sleeping (see
    /// [`Conduit::keep_awake`](crate::Conduit::keep_awake)).
    #[inline]
    pub fn snooze(&mut self, awake: impl FnOnce() -> bool) {
        self.idle = self.idle.saturating_add(1);
        if self.idle <= self.spin {
            // The first idle polls re-check at once: a PAUSE costs tens of cycles on some cores,
            // which is latency added to every message that arrives during the spin.
            if self.idle > 64 {
                std::hint::spin_loop();
            }
            return;
        }
        let yielding = self.idle <= self.spin + YIELDS;
        if (self.respin || !yielding) && awake() {
            if self.respin {
                self.idle = 0;
            } else {
                // Held at the last yield: the sleeps start once `awake` says false.
                self.idle = self.spin + YIELDS;
                std::thread::yield_now();
            }
        } else if yielding {
            std::thread::yield_now();
        } else {
            let steps = (self.idle - self.spin - YIELDS) / 8;
            let us = 1u64 << steps.min(8);
            std::thread::sleep(Duration::from_micros(us));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn awake_restarts_the_spin_on_a_host_with_a_core_per_rank() {
        let mut b = Backoff::new(3, true);
        for _ in 0..3 {
            b.snooze(|| panic!("asked while spinning"));
        }
        let mut asked = 0;
        b.snooze(|| {
            asked += 1;
            true
        });
        assert_eq!(
            (asked, b.idle),
            (1, 0),
            "a true answer starts the spin over"
        );
        for _ in 0..3 {
            b.snooze(|| panic!("asked while spinning again"));
        }
        b.snooze(|| false);
        assert_eq!(b.idle, 4, "a false answer lets the wait go on to yielding");
    }

    #[test]
    fn yields_says_whether_the_host_is_oversubscribed() {
        assert!(Backoff::new(16, false).yields());
        assert!(!Backoff::new(2000, true).yields());
    }

    #[test]
    fn awake_only_holds_an_oversubscribed_wait_at_yielding() {
        let mut b = Backoff::new(3, false);
        for _ in 0..3 + YIELDS {
            b.snooze(|| panic!("asked while spinning or yielding"));
        }
        let mut asked = 0;
        for _ in 0..5 {
            b.snooze(|| {
                asked += 1;
                true
            });
        }
        assert_eq!(asked, 5, "asked before every would-be sleep");
        assert_eq!(
            b.idle,
            3 + YIELDS,
            "a true answer holds the wait at yielding"
        );
        b.snooze(|| false);
        assert_eq!(
            b.idle,
            3 + YIELDS + 1,
            "a false answer lets the wait go on to sleep"
        );
        b.reset();
        b.snooze(|| panic!("asked while spinning after a reset"));
        assert_eq!(b.idle, 1);
    }
}
