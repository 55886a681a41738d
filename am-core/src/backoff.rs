//! Idle back-off for blocking waits.
//!
//! A wait polls; while nothing arrives it first spins (cheap, lowest latency), then yields the
//! core, then sleeps for growing intervals. Tests run 8 processes on 2 cores, where a waiter
//! that never gives up its core starves the very peer it waits for.

use std::time::Duration;

/// Idle-wait state for one blocking call.
#[derive(Debug)]
pub(crate) struct Backoff {
    idle: u32,
    spin: u32,
}

const YIELDS: u32 = 200;

impl Backoff {
    pub(crate) fn new(spin: u32) -> Self {
        Backoff { idle: 0, spin }
    }

    /// Something happened: start over at spinning.
    #[inline]
    pub(crate) fn reset(&mut self) {
        self.idle = 0;
    }

    /// Nothing happened: wait a little, longer each time. `awake` is asked before every yield
    /// and sleep (never while spinning): while it says true, the wait starts over at spinning
    /// (see [`Conduit::keep_awake`](crate::Conduit::keep_awake)).
    #[inline]
    pub(crate) fn snooze(&mut self, awake: impl FnOnce() -> bool) {
        self.idle = self.idle.saturating_add(1);
        if self.idle > self.spin && awake() {
            self.idle = 0;
            return;
        }
        if self.idle <= self.spin {
            // The first idle polls re-check at once: a PAUSE costs tens of cycles on some cores,
            // which is latency added to every message that arrives during the spin.
            if self.idle > 64 {
                std::hint::spin_loop();
            }
        } else if self.idle <= self.spin + YIELDS {
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
    fn awake_is_asked_only_after_the_spin_and_restarts_it() {
        let mut b = Backoff::new(3);
        for _ in 0..3 {
            b.snooze(|| panic!("asked while spinning"));
        }
        assert_eq!(b.idle, 3);
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
        b.snooze(|| false);
        assert_eq!(b.idle, 5);
    }
}
