//! The receive pool: the pre-posted receives ([`Slot`]) and their buffers ([`Buffers`]), the
//! receive state ([`Rx`]: tested requests, in-order queues, pending separate Long payloads,
//! ready messages), and the posting of receives, again once their slots are given back.

use std::collections::VecDeque;
use std::os::raw::c_int;
use std::sync::atomic::Ordering;

use amnet_core::Result;

use super::{Engine, REP, REQ};
use crate::raw::{self, Completions, Request};
use crate::wire::Header;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum SlotKind {
    Exit,
    Credit,
    /// Active messages of a class (REQ or REP).
    Msg(usize),
}

/// One pre-posted receive (its buffer is in [`Buffers`]).
pub(super) struct Slot {
    pub(super) kind: SlotKind,
    pub(super) tag: c_int,
    /// Its entry in the array of tested receives (`Rx::test`).
    pub(super) entry: usize,
    /// The queue of posted receives it joins when its tag's messages complete receives in the
    /// order they were posted (`Rx::fifo`); `None`: tested on its own.
    pub(super) fifo: Option<usize>,
}

/// `Rx::test_slot` of an entry with no posted receive.
pub(super) const NO_SLOT: usize = usize::MAX;

/// The receive buffers, one per slot: allocated at start-up, never moved, and kept for the
/// life of the process (the engine is never dropped).
///
/// Who may touch buffer `i`: MPI while slot `i`'s receive is posted; once it completed, the
/// thread that took the completion (under the `rx` lock), then the thread that delivers its
/// message, until that thread gives the slot back (`Engine::give_back`); the receive is posted
/// again only after that. So one party at a time uses a buffer, and no lock is needed to read
/// a delivered message or to give its slot back.
pub(super) struct Buffers {
    bufs: Box<[(*mut u8, usize)]>,
}

// SAFETY: the addresses of heap memory this structure owns for the life of the process; the
// protocol above decides who reads or writes them at any time.
unsafe impl Send for Buffers {}
// SAFETY: as above.
unsafe impl Sync for Buffers {}

impl Buffers {
    pub(super) fn new(sizes: impl Iterator<Item = usize>) -> Buffers {
        let bufs = sizes
            .map(|n| {
                let b: *mut [u8] = Box::into_raw(vec![0u8; n].into_boxed_slice());
                (b.cast::<u8>(), n)
            })
            .collect();
        Buffers { bufs }
    }

    /// Address and length of slot `i`'s buffer.
    #[inline]
    fn raw(&self, i: usize) -> (*mut u8, usize) {
        self.bufs
            .get(i)
            .copied()
            .unwrap_or((std::ptr::null_mut(), 0))
    }

    /// The first `len` bytes of slot `i`'s buffer (fewer if it is shorter).
    ///
    /// # Safety
    /// - The caller holds slot `i` by the protocol above: its receive completed, and the slot
    ///   has not been given back since.
    #[inline]
    pub(super) unsafe fn read(&self, i: usize, len: usize) -> &[u8] {
        let (p, n) = self.raw(i);
        if p.is_null() {
            return &[];
        }
        // SAFETY: `p` is valid for `n` bytes for the life of the process; per the contract
        // nobody writes them meanwhile.
        unsafe { std::slice::from_raw_parts(p, len.min(n)) }
    }
}

/// A separate Long payload being received into the segment.
pub(super) struct PendingLong {
    pub(super) src: u32,
    pub(super) hdr: Header,
    /// The receive slot whose buffer holds the header and arguments.
    pub(super) slot: usize,
    pub(super) chunks_left: usize,
}

/// A received message waiting for delivery.
pub(super) struct Ready {
    pub(super) src: u32,
    pub(super) hdr: Header,
    /// The receive slot whose buffer holds the message (arguments, an inline payload) until the
    /// handler has run; then the slot is given back and its receive posted again.
    pub(super) slot: usize,
    /// Bytes received.
    pub(super) len: usize,
}

/// Receive state.
///
/// Every receive is posted with `MPI_ANY_SOURCE` and the tag of its slot, so receives of one
/// tag match messages in the order they were posted (MPI's non-overtaking rule). A message
/// that fits the small buffers arrives in one piece and completes its receive when it
/// matches; so within such a tag the oldest posted receive always completes first, and only
/// it needs testing. Those slots wait in a queue per tag (`fifo`) whose head alone is in the
/// tested array (`test`); large messages, which may complete out of match order, are tested
/// slot by slot. A poll's `MPI_Testsome` therefore looks at a handful of requests whatever
/// the number of ranks (8 instead of 23 at 2 ranks, 20 instead of 161 at 16).
pub(super) struct Rx {
    /// The request of every slot (`MPI_REQUEST_NULL` when not posted): the exit slot, the
    /// credit slots, the reply slots, then the request slots. It owns the handles; `test`
    /// holds copies.
    pub(super) reqs: Vec<Request>,
    pub(super) slots: Vec<Slot>,
    /// The requests `MPI_Testsome` looks at: the exit slot, the oldest posted credit receive,
    /// the oldest posted small reply receive and every large reply slot, then the same for
    /// requests. A completed entry is replaced by the next receive of its queue, or left
    /// null.
    pub(super) test: Vec<Request>,
    /// The slot whose request each entry of `test` holds, or [`NO_SLOT`].
    pub(super) test_slot: Vec<usize>,
    /// The entry of `test` that completed last: the first look of a poll tests it alone in
    /// three calls of four (see `Engine::progress`).
    pub(super) hot: usize,
    /// The posted slots of each in-order tag (credits, small replies, small requests), oldest
    /// first.
    pub(super) fifo: [VecDeque<usize>; 3],
    pub(super) long_reqs: Vec<Request>,
    pub(super) long_owner: Vec<usize>,
    pub(super) longs: Vec<Option<PendingLong>>,
    pub(super) free_longs: Vec<usize>,
    /// Received messages not yet delivered, by class.
    pub(super) ready: [VecDeque<Ready>; 2],
    pub(super) done: Completions,
    pub(super) long_done: Completions,
    pub(super) scratch: Vec<usize>,
}

// SAFETY: as for `Tx` (`send.rs`): MPI handles and owned vectors, reached only through the
// mutex.
unsafe impl Send for Rx {}

impl Rx {
    /// True when a message waits in the ready queues that `pop` would return.
    #[inline]
    pub(super) fn has_ready(&self, replies_only: bool) -> bool {
        !self.ready[REP].is_empty() || !replies_only && !self.ready[REQ].is_empty()
    }

    pub(super) fn pop(&mut self, replies_only: bool) -> Option<Ready> {
        self.ready[REP].pop_front().or_else(|| {
            if replies_only {
                None
            } else {
                self.ready[REQ].pop_front()
            }
        })
    }

    /// Entry `k` of `test` completed (MPI set it to `MPI_REQUEST_NULL` and freed the request):
    /// clear its slot's handle, put the next receive of its queue in its place, and return the
    /// slot (`None` when the entry held none).
    pub(super) fn retire(&mut self, k: usize) -> Option<usize> {
        let i = std::mem::replace(self.test_slot.get_mut(k)?, NO_SLOT);
        if i == NO_SLOT {
            return None;
        }
        self.reqs[i] = raw::null_request();
        self.test[k] = raw::null_request();
        if let Some(f) = self.slots[i].fifo {
            let q = &mut self.fifo[f];
            // The head of the queue is the receive that was tested.
            debug_assert_eq!(q.front(), Some(&i));
            q.pop_front();
            if let Some(&next) = q.front() {
                self.test[k] = self.reqs[next];
                self.test_slot[k] = next;
            }
        }
        Some(i)
    }

    pub(super) fn add_long(&mut self, p: PendingLong) -> usize {
        match self.free_longs.pop() {
            Some(i) => {
                self.longs[i] = Some(p);
                i
            }
            None => {
                self.longs.push(Some(p));
                self.longs.len() - 1
            }
        }
    }
}

impl Engine {
    /// Post the receive of slot `i` (its buffer is not in use: a fresh slot, or one given back).
    pub(super) fn post(&self, rx: &mut Rx, i: usize) -> Result<()> {
        let (p, n) = self.bufs.raw(i);
        let Some(slot) = rx.slots.get(i) else {
            return Ok(());
        };
        let (tag, entry, fifo) = (slot.tag, slot.entry, slot.fifo);
        // SAFETY: nobody touches the buffer until MPI_Testsome reports the receive complete or
        // it is cancelled at exit (the protocol of `Buffers`).
        let req = unsafe { raw::irecv(p, n, None, tag, self.comm_for(tag))? };
        rx.reqs[i] = req;
        if let Some(f) = fifo {
            rx.fifo[f].push_back(i);
            if rx.test_slot[entry] != NO_SLOT {
                // An older receive of this tag is tested; this one follows it.
                return Ok(());
            }
        }
        rx.test[entry] = req;
        rx.test_slot[entry] = i;
        Ok(())
    }

    /// Give slot `i` back: its message has been handled; the next progress posts it again.
    #[inline]
    pub(super) fn give_back(&self, i: usize) {
        if let Some(w) = self.returned.get(i / 64) {
            w.fetch_or(1 << (i % 64), Ordering::Release);
        }
    }

    /// Post the receives of every slot given back.
    pub(super) fn repost(&self, rx: &mut Rx) -> Result<()> {
        for (k, w) in self.returned.iter().enumerate() {
            if w.load(Ordering::Relaxed) == 0 {
                continue;
            }
            let mut bits = w.swap(0, Ordering::Acquire);
            while bits != 0 {
                let b = bits.trailing_zeros() as usize;
                if let Err(e) = self.post(rx, k * 64 + b) {
                    // Not posted: keep them for the next progress.
                    w.fetch_or(bits, Ordering::Release);
                    return Err(e);
                }
                bits &= bits - 1;
            }
        }
        Ok(())
    }
}
