//! Credit-based flow control for the conduits whose receivers keep a fixed number of
//! buffers per peer (ofi, ibv): a rank may have `max` requests on their way to each peer; a
//! request takes a credit, the peer owes it back once the request's handler has run, and
//! returns it in the fourth header byte of a later message, or in a credit message once half
//! of them are due. Replies take no credit: each answers a request that held one.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use crate::Rank;

/// Every peer's credits, and what this rank owes each.
#[derive(Debug)]
pub struct Credits {
    max: u32,
    /// Requests this rank may still send to each rank before that rank returns credits.
    avail: Vec<AtomicU32>,
    /// Credits this rank owes each rank: its requests delivered here and not returned yet.
    owed: Vec<AtomicU32>,
    /// Set when some rank is owed at least half its credits.
    due: AtomicBool,
}

impl Credits {
    /// `max` credits towards each of `ranks` ranks, nothing owed.
    pub fn new(ranks: u32, max: u32) -> Credits {
        Credits {
            max,
            avail: (0..ranks).map(|_| AtomicU32::new(max)).collect(),
            owed: (0..ranks).map(|_| AtomicU32::new(0)).collect(),
            due: AtomicBool::new(false),
        }
    }

    /// Credits each rank starts with.
    pub fn max(&self) -> u32 {
        self.max
    }

    /// Take one credit towards `dest` for a request; false: none left until `dest` returns
    /// some (or `dest` is not a rank of the job).
    #[inline]
    pub fn take(&self, dest: Rank) -> bool {
        self.avail.get(dest as usize).is_some_and(|c| {
            c.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1))
                .is_ok()
        })
    }

    /// `n` credits towards `src` come back (a header's fourth byte), or one taken for a
    /// request that was not sent.
    #[inline]
    pub fn give_back(&self, src: Rank, n: u32) {
        if n > 0 {
            if let Some(c) = self.avail.get(src as usize) {
                c.fetch_add(n, Ordering::AcqRel);
            }
        }
    }

    /// A request from `src` was delivered: its credit is owed back.
    #[inline]
    pub fn owe(&self, src: Rank) {
        self.owe_n(src, 1);
    }

    /// `n` credits are owed to `src` (again: a message that was to carry them did not leave).
    #[inline]
    pub fn owe_n(&self, src: Rank, n: u32) {
        let Some(o) = self.owed.get(src as usize) else {
            return;
        };
        if n == 0 {
            return;
        }
        let now = o.fetch_add(n, Ordering::AcqRel) + n;
        if now >= self.half() {
            self.due.store(true, Ordering::Release);
        }
    }

    /// Take up to 255 of the credits owed to `dest`, for a message's fourth byte.
    #[inline]
    pub fn take_owed(&self, dest: Rank) -> u8 {
        let Some(o) = self.owed.get(dest as usize) else {
            return 0;
        };
        if o.load(Ordering::Relaxed) == 0 {
            return 0;
        }
        let prev = o
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                Some(n.saturating_sub(255))
            })
            .unwrap_or(0);
        u8::try_from(prev.min(255)).unwrap_or(u8::MAX)
    }

    /// The ranks owed half their credits or more, once since the last call that found any
    /// (empty most of the time, and then without a write). A caller that cannot return them
    /// all now calls [`still_due`](Credits::still_due).
    pub fn due(&self) -> Vec<Rank> {
        if !self.due.load(Ordering::Relaxed) || !self.due.swap(false, Ordering::AcqRel) {
            return Vec::new();
        }
        let half = self.half();
        self.owed
            .iter()
            .enumerate()
            .filter(|(_, o)| o.load(Ordering::Acquire) >= half)
            .filter_map(|(r, _)| Rank::try_from(r).ok())
            .collect()
    }

    /// Some credits [`due`](Credits::due) named could not be returned: ask again next time.
    pub fn still_due(&self) {
        self.due.store(true, Ordering::Release);
    }

    fn half(&self) -> u32 {
        (self.max / 2).max(1)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn credits_run_out_come_back_and_fall_due_at_half() {
        let c = Credits::new(3, 4);
        assert!((0..4).all(|_| c.take(1)));
        assert!(!c.take(1), "the fifth request waits");
        assert!(!c.take(7), "no rank 7");
        c.give_back(1, 2);
        assert!(c.take(1) && c.take(1) && !c.take(1));
        c.owe(2);
        assert!(c.due().is_empty(), "one of four is not half");
        c.owe(2);
        assert_eq!(c.due(), vec![2]);
        assert!(c.due().is_empty(), "named once");
        assert_eq!(c.take_owed(2), 2);
        assert_eq!(c.take_owed(2), 0);
        c.owe_n(0, 300);
        assert_eq!(c.take_owed(0), 255);
        assert_eq!(c.take_owed(0), 45);
        c.still_due();
        assert!(c.due().is_empty(), "nothing is owed any more");
    }
}
