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

    /// Nothing happened: wait a little, longer each time.
    #[inline]
    pub(crate) fn snooze(&mut self) {
        self.idle = self.idle.saturating_add(1);
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
