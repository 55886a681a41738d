//! Progress and delivery: a look at the pre-posted receives (`Engine::progress`), what a
//! completed receive becomes (a credit, a nudge, an active message ready for delivery, the
//! start of a separate Long payload), and the delivery of a ready message to the core's sink
//! (`Engine::deliver`).

use amnet_core::{Category, InMsg, Result, MAX_ARGS};

use super::receive::{PendingLong, Ready, Rx, SlotKind, NO_SLOT};
use super::{long_tag, Engine, LONG_CHUNK, REP, REQ};
use crate::raw::{self, Status};
use crate::wire::{self, Data, Header};

/// Calls the first look of a poll makes at most while they find nothing (`MPI_Testsome` over
/// every tested receive, or `MPI_Test` on the one that completed last; see
/// `Engine::progress`). A message that a call's progress matched is reported by the next
/// call; a look that ended first would leave it for a whole round of the wait loop (the
/// core's checks, the receive lock, the reposting). With eight calls, one `MPI_Testsome` in
/// four (`TESTSOME_EVERY`), the 2-rank Short round trip measured 1.287 times raw MPI in a
/// 2-core VM's fast state, against 1.354 with up to four `MPI_Testsome` calls
/// (bench/RESULTS.md, run M3 in "mpi: where the time goes"). An idle poll costs up to eight
/// calls (two when the host is oversubscribed).
const FIRST_LOOK_CALLS: u32 = 8;
/// In the first look of a poll, every this many calls is an `MPI_Testsome` over every tested
/// receive; the others are an `MPI_Test` of the receive that completed last. A message for
/// another receive waits for at most this many calls less one.
const TESTSOME_EVERY: u32 = 4;

impl Engine {
    /// Move completed receives to the ready queues. Every receive is tested, also when only
    /// replies may run (a thread waiting to reply): the requests it completes wait in their
    /// queue, and the reply credits they carry count at once (`Engine::accept`). `first`: the
    /// first look of a poll, which makes up to [`FIRST_LOOK_CALLS`] calls while they find
    /// nothing.
    pub(super) fn progress(&self, rx: &mut Rx, first: bool) -> Result<()> {
        self.repost(rx)?;
        let mut n = raw::testsome(&mut rx.test, &mut rx.done)?;
        if first {
            // MPI_Testsome looks at the requests before it makes progress: what that progress
            // completed shows only on the next call. The first look of a poll calls again
            // while nothing shows, so that a waiting rank spends most of its time in MPI's
            // progress, where an arriving message is matched, rather than in the loop
            // around it (see FIRST_LOOK_CALLS). Most of those calls are an MPI_Test of the
            // receive that completed last (the one a ping-pong or a stream waits on), which
            // looks again after its progress, so the message shows in the call that matched
            // it, at less than half the cost of an MPI_Testsome over every receive; one call in
            // TESTSOME_EVERY looks at them all. Oversubscribed, two calls: the caller's wait
            // then yields the core to the ranks it waits for sooner.
            let max = if self.oversubscribed {
                2
            } else {
                FIRST_LOOK_CALLS
            };
            let mut calls = 1;
            while n == 0 && calls < max {
                // MPI_Test of a null request reports an empty completion: only a posted one.
                let hot = rx.test_slot.get(rx.hot).is_some_and(|&s| s != NO_SLOT);
                if hot && calls % TESTSOME_EVERY != 0 {
                    if let Some(st) = raw::test(&mut rx.test[rx.hot])? {
                        // The receive a ping-pong or a stream waits on: handled alone,
                        // without the bookkeeping of several completions.
                        if let Some(i) = rx.retire(rx.hot) {
                            if self.completed(rx, i, &st)? {
                                self.sync_after_puts();
                            }
                        }
                        return self.progress_longs(rx);
                    }
                } else {
                    n = raw::testsome(&mut rx.test, &mut rx.done)?;
                }
                calls += 1;
            }
        }
        if n > 0 {
            if let Some((k, _)) = rx.done.iter().next() {
                rx.hot = k;
            }
            // Taken out for the loop, which needs the rest of `rx`; put back for reuse.
            let done = std::mem::take(&mut rx.done);
            // Every completed entry is retired before any is handled, so that an error while
            // handling one leaves no handle of a freed request behind.
            let mut slots = std::mem::take(&mut rx.scratch);
            slots.clear();
            slots.extend(done.iter().map(|(k, _)| rx.retire(k).unwrap_or(NO_SLOT)));
            let mut sync = false;
            for (&i, (_, st)) in slots.iter().zip(done.iter()) {
                if i != NO_SLOT {
                    sync |= self.completed(rx, i, st)?;
                }
            }
            rx.scratch = slots;
            rx.done = done;
            if sync {
                self.sync_after_puts();
            }
        }
        self.progress_longs(rx)
    }

    /// A message whose sender had put asks for `MPI_Win_sync` before its handler runs.
    fn sync_after_puts(&self) {
        // What the senders put before sending these messages must be visible to the handlers
        // about to run (and to barriers): order our reads of the segment after it. What this
        // rank sends from now on may follow those puts.
        if let Some(w) = self.rma.get() {
            w.sync();
            w.touch();
        }
    }

    /// Move the messages whose separate Long payloads all arrived to the ready queues.
    fn progress_longs(&self, rx: &mut Rx) -> Result<()> {
        if !rx.long_reqs.is_empty() && raw::testsome(&mut rx.long_reqs, &mut rx.long_done)? > 0 {
            let mut idx = std::mem::take(&mut rx.scratch);
            idx.clear();
            idx.extend(rx.long_done.iter().map(|(i, _)| i));
            // Remove from the highest index down, so swap_remove moves only entries already
            // visited.
            idx.sort_unstable_by(|a, b| b.cmp(a));
            for &i in &idx {
                if i >= rx.long_reqs.len() {
                    continue;
                }
                rx.long_reqs.swap_remove(i);
                let owner = rx.long_owner.swap_remove(i);
                let finished = match rx.longs.get_mut(owner).and_then(Option::as_mut) {
                    Some(p) => {
                        p.chunks_left = p.chunks_left.saturating_sub(1);
                        p.chunks_left == 0
                    }
                    None => false,
                };
                if finished {
                    if let Some(p) = rx.longs[owner].take() {
                        rx.free_longs.push(owner);
                        let class = Self::class_of(p.hdr.is_reply);
                        rx.ready[class].push_back(Ready {
                            src: p.src,
                            hdr: p.hdr,
                            slot: p.slot,
                            len: p.hdr.payload_at,
                        });
                    }
                }
            }
            rx.scratch = idx;
        }
        Ok(())
    }

    /// Handle the completed receive of slot `i`. True when it is an active message whose
    /// sender asks for `MPI_Win_sync` before its handler runs.
    fn completed(&self, rx: &mut Rx, i: usize, st: &Status) -> Result<bool> {
        match rx.slots[i].kind {
            SlotKind::Exit => self.on_exit_notice(st).map(|()| false),
            SlotKind::Credit => {
                let src = raw::source(st)?;
                let len = raw::received_len(st)?;
                // SAFETY: the receive of slot `i` completed; the slot is given back below.
                let buf = unsafe { self.bufs.read(i, len) };
                match wire::decode_notice(buf) {
                    Ok(wire::Notice::Credit([req, rep])) => {
                        if let Some(p) = self.peers.get(src as usize) {
                            p.give(REQ, req);
                            p.give(REP, rep);
                        }
                    }
                    Ok(wire::Notice::Nudge) => self.awake.nudged(),
                    Err(e) => amnet_core::diag!(
                        "amnet mpi rank {}: dropped a malformed control message from rank {src}: \
                         {e}",
                        self.rank
                    ),
                }
                self.give_back(i);
                Ok(false)
            }
            SlotKind::Msg(class) => {
                let src = raw::source(st)?;
                let len = raw::received_len(st)?;
                // The slot stays with the message until its handler has run (its buffer holds
                // the arguments); the receive is posted again after that.
                // SAFETY: the receive of slot `i` completed; the slot goes with the message.
                let msg = unsafe { self.bufs.read(i, len) };
                match self.accept(src, class, msg) {
                    Some(hdr) => {
                        let sync = hdr.sync;
                        if let Data::Separate(tag) = hdr.data {
                            self.receive_separate(rx, src, hdr, tag, i)?;
                        } else {
                            rx.ready[class].push_back(Ready {
                                src,
                                hdr,
                                slot: i,
                                len,
                            });
                        }
                        Ok(sync)
                    }
                    None => {
                        self.give_back(i);
                        self.consumed(src, class);
                        Ok(false)
                    }
                }
            }
        }
    }

    /// Decode and check an active message of `class` from `src` and take the credits it
    /// returns. `None`: malformed, dropped with a line on stderr.
    fn accept(&self, src: u32, class: usize, msg: &[u8]) -> Option<Header> {
        let drop_msg = |why: &dyn std::fmt::Display| {
            amnet_core::diag!(
                "amnet mpi rank {}: dropped a malformed message from rank {src}: {why}",
                self.rank
            );
        };
        let hdr = match wire::decode(msg) {
            Ok(h) => h,
            Err(e) => {
                drop_msg(&e);
                return None;
            }
        };
        if Self::class_of(hdr.is_reply) != class {
            drop_msg(&"request/reply flag does not match its tag");
            return None;
        }
        if let Some(p) = self.peers.get(src as usize) {
            p.give(REQ, hdr.credits[0]);
            p.give(REP, hdr.credits[1]);
        }
        if hdr.category == Category::Long && self.long_range(&hdr).is_none() {
            drop_msg(&format_args!(
                "Long range {}+{} is outside the local segment",
                hdr.long_offset, hdr.payload_len
            ));
            return None;
        }
        Some(hdr)
    }

    /// Where a Long's payload goes in the local segment (`None` when outside it).
    #[inline]
    fn long_range(&self, hdr: &Header) -> Option<*mut u8> {
        self.seg
            .get()
            .and_then(|s| s.range(hdr.long_offset, hdr.payload_len))
    }

    /// Post the receives of a separate Long's payload straight into the segment; the message
    /// is delivered once they all completed.
    fn receive_separate(
        &self,
        rx: &mut Rx,
        src: u32,
        hdr: Header,
        tag: u32,
        slot: usize,
    ) -> Result<()> {
        // Checked by `accept`.
        let Some(dst) = self.long_range(&hdr) else {
            return Ok(());
        };
        // In range of a usize-sized segment, so the length fits a usize.
        let len = usize::try_from(hdr.payload_len).unwrap_or(0);
        let owner = rx.add_long(PendingLong {
            src,
            hdr,
            slot,
            chunks_left: len.div_ceil(LONG_CHUNK),
        });
        let mut off = 0;
        while off < len {
            let n = (len - off).min(LONG_CHUNK);
            // SAFETY: `dst..dst + len` lies in the local segment (checked by `range`); the
            // client's protocol gives this range to the Long until its handler runs, and the
            // handler runs only after every chunk has arrived.
            let req = unsafe { raw::irecv(dst.add(off), n, Some(src), long_tag(tag), self.comm)? };
            rx.long_reqs.push(req);
            rx.long_owner.push(owner);
            off += n;
        }
        Ok(())
    }

    /// A delivered message's handler has run: give its slot back and account for the credit.
    fn finish(&self, src: u32, class: usize, slot: usize) {
        self.give_back(slot);
        self.consumed(src, class);
    }

    /// Hand one ready message to `sink`; returns what the sink returned.
    pub(super) fn deliver(&self, r: Ready, sink: &mut dyn FnMut(&InMsg<'_>) -> bool) -> bool {
        /// Gives the receive back and returns the credit even if the handler unwinds.
        struct Done<'a> {
            eng: &'a Engine,
            src: u32,
            class: usize,
            slot: usize,
        }
        impl Drop for Done<'_> {
            fn drop(&mut self) {
                self.eng.finish(self.src, self.class, self.slot);
            }
        }
        let hdr = r.hdr;
        let _done = Done {
            eng: self,
            src: r.src,
            class: Self::class_of(hdr.is_reply),
            slot: r.slot,
        };
        // SAFETY: this thread holds the slot until `_done` gives it back, after the handler.
        let buf: &[u8] = unsafe { self.bufs.read(r.slot, r.len) };
        let mut args = [0u32; MAX_ARGS];
        let args = hdr.read_args(buf, &mut args);
        let plen = usize::try_from(hdr.payload_len).unwrap_or(usize::MAX);
        let inline = buf
            .get(hdr.payload_at..)
            .and_then(|b| b.get(..plen))
            .unwrap_or(&[]);
        let payload: &[u8] = match hdr.category {
            Category::Short => &[],
            Category::Medium => inline,
            Category::Long => {
                let Some(dst) = self.long_range(&hdr) else {
                    return true;
                };
                if hdr.has_inline_payload() {
                    // SAFETY: `dst` has room for the payload (checked by `range`), which came in
                    // full (checked by the decoder); the receive buffer and the segment are
                    // distinct memory.
                    unsafe { amnet_core::mem::copy(inline.as_ptr(), dst, inline.len()) };
                }
                // SAFETY: the range lies in the local segment, mapped for the life of the
                // process, and holds the payload now.
                unsafe { std::slice::from_raw_parts(dst, plen) }
            }
        };
        sink(&InMsg {
            src: r.src,
            handler: hdr.handler,
            category: hdr.category,
            is_reply: hdr.is_reply,
            args,
            payload,
            long_offset: hdr.long_offset,
        })
    }
}
