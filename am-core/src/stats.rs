//! Per-rank statistics.
//!
//! Counting must cost almost nothing on the AM fast path, yet a rank may be used from several
//! threads at once. Each thread therefore owns one [`StatBlock`] per endpoint that only it
//! writes (a relaxed load and store, no read-modify-write); [`Stats`] is the sum of all blocks.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Indices into a [`StatBlock`]. The four AM groups each list short, medium, long, medium
/// bytes, long bytes in that order: counting relies on it.
#[derive(Copy, Clone, Debug)]
#[repr(usize)]
pub(crate) enum Ctr {
    ReqShort,
    ReqMedium,
    ReqLong,
    ReqMediumBytes,
    ReqLongBytes,
    RepShort,
    RepMedium,
    RepLong,
    RepMediumBytes,
    RepLongBytes,
    RecvReqShort,
    RecvReqMedium,
    RecvReqLong,
    RecvReqMediumBytes,
    RecvReqLongBytes,
    RecvRepShort,
    RecvRepMedium,
    RecvRepLong,
    RecvRepMediumBytes,
    RecvRepLongBytes,
    Puts,
    PutBytes,
    Gets,
    GetBytes,
    Barriers,
    Polls,
    HandlerCalls,
    SendStalls,
    StrayRmaReplies,
    Count,
}

/// One thread's counters for one endpoint. Written by its owning thread only.
#[derive(Debug)]
pub(crate) struct StatBlock {
    c: [AtomicU64; Ctr::Count as usize],
}

impl StatBlock {
    pub(crate) fn new() -> Self {
        StatBlock {
            c: std::array::from_fn(|_| AtomicU64::new(0)),
        }
    }

    /// Add `n` to counter `i`. Only the owning thread calls this, so a plain load and store
    /// cannot lose updates.
    #[inline(always)]
    pub(crate) fn add(&self, i: Ctr, n: u64) {
        let c = &self.c[i as usize];
        c.store(c.load(Relaxed).wrapping_add(n), Relaxed);
    }

    /// Add `n` to the counter at index `i` (an index into the `Ctr` order).
    #[inline(always)]
    pub(crate) fn add_at(&self, i: usize, n: u64) {
        let c = &self.c[i];
        c.store(c.load(Relaxed).wrapping_add(n), Relaxed);
    }

    pub(crate) fn get(&self, i: Ctr) -> u64 {
        self.c[i as usize].load(Relaxed)
    }
}

/// Message and byte counts for one direction and kind (requests or replies).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct AmCounts {
    /// Short messages.
    pub short: u64,
    /// Medium messages.
    pub medium: u64,
    /// Long messages.
    pub long: u64,
    /// Payload bytes carried by Medium messages.
    pub medium_bytes: u64,
    /// Payload bytes carried by Long messages.
    pub long_bytes: u64,
}

impl AmCounts {
    /// All messages of every category.
    pub fn messages(&self) -> u64 {
        self.short + self.medium + self.long
    }
    /// All payload bytes.
    pub fn bytes(&self) -> u64 {
        self.medium_bytes + self.long_bytes
    }
}

/// A snapshot of one rank's counters, summed over all threads that used it.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Stats {
    /// Requests this rank sent (library traffic for put/get/barrier included).
    pub requests_sent: AmCounts,
    /// Replies this rank sent.
    pub replies_sent: AmCounts,
    /// Requests whose handlers ran on this rank.
    pub requests_received: AmCounts,
    /// Replies whose handlers ran on this rank.
    pub replies_received: AmCounts,
    /// put operations started (any form).
    pub puts: u64,
    /// Bytes written by put.
    pub put_bytes: u64,
    /// get operations started (any form).
    pub gets: u64,
    /// Bytes read by get.
    pub get_bytes: u64,
    /// Barriers completed.
    pub barriers: u64,
    /// Calls into the conduit's poll.
    pub polls: u64,
    /// Handlers run.
    pub handler_calls: u64,
    /// Times a send found no buffer space and had to poll before retrying.
    pub send_stalls: u64,
    /// Put acknowledgements and get replies that named no operation waiting for them (from
    /// the wrong rank, duplicated, or forged), dropped.
    pub stray_rma_replies: u64,
}

impl Stats {
    pub(crate) fn add_block(&mut self, b: &StatBlock) {
        use Ctr::*;
        let am = |s: Ctr, m: Ctr, l: Ctr, mb: Ctr, lb: Ctr| AmCounts {
            short: b.get(s),
            medium: b.get(m),
            long: b.get(l),
            medium_bytes: b.get(mb),
            long_bytes: b.get(lb),
        };
        let add = |x: &mut AmCounts, y: AmCounts| {
            x.short += y.short;
            x.medium += y.medium;
            x.long += y.long;
            x.medium_bytes += y.medium_bytes;
            x.long_bytes += y.long_bytes;
        };
        add(
            &mut self.requests_sent,
            am(ReqShort, ReqMedium, ReqLong, ReqMediumBytes, ReqLongBytes),
        );
        add(
            &mut self.replies_sent,
            am(RepShort, RepMedium, RepLong, RepMediumBytes, RepLongBytes),
        );
        add(
            &mut self.requests_received,
            am(
                RecvReqShort,
                RecvReqMedium,
                RecvReqLong,
                RecvReqMediumBytes,
                RecvReqLongBytes,
            ),
        );
        add(
            &mut self.replies_received,
            am(
                RecvRepShort,
                RecvRepMedium,
                RecvRepLong,
                RecvRepMediumBytes,
                RecvRepLongBytes,
            ),
        );
        self.puts += b.get(Puts);
        self.put_bytes += b.get(PutBytes);
        self.gets += b.get(Gets);
        self.get_bytes += b.get(GetBytes);
        self.barriers += b.get(Barriers);
        self.polls += b.get(Polls);
        self.handler_calls += b.get(HandlerCalls);
        self.send_stalls += b.get(SendStalls);
        self.stray_rma_replies += b.get(StrayRmaReplies);
    }

    /// One line per counter group, as printed at exit with `AMNET_STATS=1`.
    pub fn report(&self, rank: u32) -> String {
        let line = |name: &str, c: &AmCounts| {
            format!(
                "amnet stats rank {rank}: {name:<17} short {} medium {} ({} B) long {} ({} B)\n",
                c.short, c.medium, c.medium_bytes, c.long, c.long_bytes
            )
        };
        let mut s = String::new();
        s += &line("requests sent", &self.requests_sent);
        s += &line("replies sent", &self.replies_sent);
        s += &line("requests received", &self.requests_received);
        s += &line("replies received", &self.replies_received);
        s += &format!(
            "amnet stats rank {rank}: put {} ({} B) get {} ({} B) barriers {} polls {} handlers {} send stalls {} stray rma replies {}\n",
            self.puts, self.put_bytes, self.gets, self.get_bytes, self.barriers, self.polls,
            self.handler_calls, self.send_stalls, self.stray_rma_replies
        );
        s
    }
}
