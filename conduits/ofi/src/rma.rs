//! Native put and get over libfabric RMA (spec/ofi.md §5): `fi_write` and `fi_read` straight
//! into and out of the peers' registered segments, where the provider offers `FI_RMA`.
//!
//! Every operation in flight owns one of [`SLOTS`] slots: a context that the completion
//! queue hands back (an [`Op`] whose kind names the slot) and a state word, `gen << 2 |
//! phase`. Whoever reads the completion (any thread's poll) sets the phase to done; the
//! operation's owner sees it, and frees the slot by advancing its generation, so that a
//! ticket of a freed slot is told apart from the slot's next operation. Writes ask for
//! `FI_DELIVERY_COMPLETE`: their completion means the bytes are visible in the target's
//! segment, which is the core's meaning of a complete put.
//!
//! Providers with manual progress (tcp, udp;ofi_rxd) apply a peer's RMA only while the target
//! reads its completion queue: a rank that starts operations towards a peer it has not
//! nudged in the last [`NUDGE_EVERY_NS`] sends it a nudge (a header-only message), and the
//! peer's idle waits then keep polling for `AwakeWindow::SPAN_NS` instead of sleeping
//! (`Conduit::keep_awake`).

use std::sync::Arc;

use amnet_core::sync::{AtomicU64, Ordering};
use amnet_core::{Backoff, Error, NativeRma, Rank, Result, RmaTicket};

use crate::conduit::{Engine, Op, OpKind};
use crate::raw::Region;

#[cfg(loom)]
use loom::sync::Mutex;
#[cfg(not(loom))]
use std::sync::Mutex;

/// Operations in flight at once (a put or get that finds none free waits for one, or, for a
/// non-blocking one, completes before it returns).
pub(crate) const SLOTS: u32 = 256;
/// Slots only blocking operations take (see `Slots::take`).
const RESERVED: usize = 16;
/// A target is nudged at most this often.
pub(crate) const NUDGE_EVERY_NS: u64 = 200_000;
/// Non-blocking puts of at most this many bytes are copied into their slot and return at
/// once; larger ones complete before `put_nb` returns.
const BOUNCE_MAX: usize = 16 * 1024;
/// Largest transfer in one operation (larger ones are split).
const CHUNK_MAX: usize = 1 << 30;

const FREE: u64 = 0;
const BUSY: u64 = 1;
const DONE: u64 = 3;
const PHASE: u64 = 3;

/// A slot's operation pointer (owned by the slot table for the life of the process).
struct SlotOp(*mut Op);
// SAFETY: the operation is plain data; who may touch it is governed by the slot's state.
unsafe impl Send for SlotOp {}
// SAFETY: as above.
unsafe impl Sync for SlotOp {}

/// The table of RMA operations in flight: each slot's operation and state.
pub(crate) struct Slots {
    ops: Box<[SlotOp]>,
    pub(crate) st: SlotStates,
}

/// One taken slot: its index and generation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Taken {
    idx: u32,
    gen: u64,
}

impl Taken {
    fn ticket(self, rank: Rank) -> RmaTicket {
        RmaTicket {
            rank,
            id: (self.gen << 32) | u64::from(self.idx),
        }
    }

    fn of(t: RmaTicket) -> Taken {
        Taken {
            idx: u32::try_from(t.id & 0xffff_ffff).unwrap_or(u32::MAX),
            gen: t.id >> 32,
        }
    }
}

/// Generations run modulo 2^30 (a ticket holds one in its upper 32 bits).
const GEN_MASK: u64 = (1 << 30) - 1;

/// The slots' state words and free list: the flag protocol between an operation's owner
/// (take, is_done, release) and whichever thread reads its completion (complete). Its loom
/// model is `tests::loom_slot_handoff`.
pub(crate) struct SlotStates {
    state: Box<[AtomicU64]>,
    free: Mutex<Vec<u32>>,
    reserved: usize,
}

impl SlotStates {
    /// `n` free slots, of which non-blocking takes leave `reserved`.
    pub(crate) fn new(n: u32, reserved: usize) -> SlotStates {
        SlotStates {
            state: (0..n).map(|_| AtomicU64::new(FREE)).collect(),
            free: Mutex::new((0..n).rev().collect()),
            reserved,
        }
    }

    /// The completion of slot `idx`'s operation was read.
    pub(crate) fn complete(&self, idx: u32) {
        if let Some(s) = self.state.get(idx as usize) {
            s.fetch_or(DONE, Ordering::AcqRel);
        }
    }

    /// A free slot, if any. A non-blocking operation (`nb`) leaves the last `reserved` to
    /// blocking ones: its slot is freed only when its owner syncs it, and a blocking
    /// operation that found none would wait for ever.
    pub(crate) fn take(&self, nb: bool) -> Option<Taken> {
        let idx = {
            let mut f = self.free.lock().unwrap_or_else(|e| e.into_inner());
            if nb && f.len() <= self.reserved {
                return None;
            }
            f.pop()?
        };
        let s = &self.state[idx as usize];
        let gen = s.load(Ordering::Acquire) >> 2;
        s.store(gen << 2 | BUSY, Ordering::Release);
        Some(Taken { idx, gen })
    }

    /// Give back a slot whose operation never reached the provider, or completed.
    pub(crate) fn release(&self, t: Taken) {
        let next = (t.gen + 1) & GEN_MASK;
        self.state[t.idx as usize].store(next << 2 | FREE, Ordering::Release);
        self.free
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(t.idx);
    }

    /// `Some(true)`: done; `Some(false)`: in flight; `None`: not this ticket's slot any more.
    pub(crate) fn is_done(&self, t: Taken) -> Option<bool> {
        let st = self.state.get(t.idx as usize)?.load(Ordering::Acquire);
        if st >> 2 != t.gen || st & PHASE == FREE {
            return None;
        }
        Some(st & PHASE == DONE)
    }
}

impl Slots {
    pub(crate) fn new() -> Slots {
        let ops = (0..SLOTS)
            .map(|i| {
                // Owned by the table for the life of the process: a posted operation's
                // context must stay valid until its completion, which may come at any time.
                SlotOp(Box::into_raw(Op::boxed(OpKind::Rma(i), 0)))
            })
            .collect();
        Slots {
            ops,
            st: SlotStates::new(SLOTS, RESERVED),
        }
    }

    fn op(&self, t: Taken) -> *mut Op {
        self.ops[t.idx as usize].0
    }
}

/// Where a peer's segment lies for RMA.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Remote {
    pub(crate) base: u64,
    pub(crate) key: u64,
    pub(crate) len: u64,
}

/// The native RMA of one rank: its registered segment and every peer's.
pub(crate) struct OfiRma {
    eng: Arc<Engine>,
    /// This rank's registration, kept open for the life of the process.
    _region: Region,
    peers: Vec<Remote>,
    seg_base: *mut u8,
    seg_len: usize,
}

// SAFETY: the segment pointer names memory that lives as long as the conduit; every other
// field is thread-safe.
unsafe impl Send for OfiRma {}
// SAFETY: as above.
unsafe impl Sync for OfiRma {}

/// Which transfer.
#[derive(Clone, Copy)]
enum Dir {
    Write,
    Read,
    /// A write with remote CQ data that completes once its source may be reused (a Long's
    /// payload; the target learns of it from its own completion).
    WriteData(u64),
}

impl OfiRma {
    pub(crate) fn new(
        eng: Arc<Engine>,
        region: Region,
        peers: Vec<Remote>,
        seg_base: *mut u8,
        seg_len: usize,
    ) -> OfiRma {
        OfiRma {
            eng,
            _region: region,
            peers,
            seg_base,
            seg_len,
        }
    }

    fn peer(&self, r: Rank, offset: u64, len: usize) -> Result<Remote> {
        let p = *self.peers.get(r as usize).ok_or(Error::BadRank {
            rank: r,
            size: self.eng.size,
        })?;
        if offset.checked_add(len as u64).is_none_or(|e| e > p.len) {
            return Err(Error::conduit(
                "ofi",
                format!(
                    "{len} bytes at offset {offset} lie beyond rank {r}'s segment ({} bytes)",
                    p.len
                ),
            ));
        }
        Ok(p)
    }

    /// This rank's own segment at `offset`, checked.
    fn local(&self, offset: u64, len: usize) -> Result<*mut u8> {
        if offset
            .checked_add(len as u64)
            .is_none_or(|e| e > self.seg_len as u64)
        {
            return Err(Error::conduit(
                "ofi",
                format!("{len} bytes at offset {offset} lie beyond this rank's segment"),
            ));
        }
        // SAFETY: in bounds (checked).
        Ok(unsafe {
            self.seg_base
                .add(usize::try_from(offset).unwrap_or(usize::MAX))
        })
    }

    fn backoff(&self) -> Backoff {
        Backoff::new(self.eng.spin, !self.eng.oversubscribed)
    }

    /// Take a slot, driving the queue while none is free (operations of this or other
    /// threads complete meanwhile).
    fn take_wait(&self) -> Result<Taken> {
        let mut b = self.backoff();
        loop {
            if let Some(t) = self.eng.slots.st.take(false) {
                return Ok(t);
            }
            self.eng.rma_check()?;
            self.eng.progress_once()?;
            b.snooze(|| true);
        }
    }

    /// Post one transfer on slot `t`, retrying while the provider has no room.
    ///
    /// # Safety
    /// - `local` is valid for `len` bytes (reads for a write, writes for a read) and left
    ///   alone by everything else until the slot's completion was read.
    unsafe fn post(
        &self,
        t: Taken,
        dir: Dir,
        (rank, p): (Rank, Remote),
        offset: u64,
        local: *mut u8,
        len: usize,
    ) -> Result<()> {
        let to = self.eng.dest_addr(rank)?;
        let op = self.eng.slots.op(t);
        // SAFETY: the slot's operation lives for the process; its context is ours while the
        // slot is taken.
        let ctx = unsafe { std::ptr::addr_of_mut!((*op).ctx) };
        let mut b = self.backoff();
        loop {
            // SAFETY: the caller's contract for `local`; the context stays in place (above);
            // the range lies in the peer's segment (checked by `peer`).
            let posted = unsafe {
                match dir {
                    Dir::Write => self
                        .eng
                        .ep
                        .write(to, p.base, p.key, offset, local, len, None, true, ctx),
                    Dir::Read => self.eng.ep.read(to, p.base, p.key, offset, local, len, ctx),
                    Dir::WriteData(d) => self.eng.ep.write(
                        to,
                        p.base,
                        p.key,
                        offset,
                        local,
                        len,
                        Some(d),
                        false,
                        ctx,
                    ),
                }
            };
            match posted {
                Ok(true) => return Ok(()),
                Ok(false) => {
                    self.eng.progress_once()?;
                    b.snooze(|| true);
                }
                Err(e) => {
                    self.eng.slots.st.release(t);
                    return Err(Error::conduit(
                        "ofi",
                        format!("RMA towards rank {rank}: {e}"),
                    ));
                }
            }
        }
    }

    /// Wait until slot `t`'s operation completed, and free the slot.
    fn wait_slot(&self, t: Taken, rank: Rank) -> Result<()> {
        let mut b = self.backoff();
        loop {
            match self.eng.slots.st.is_done(t) {
                Some(true) => {
                    self.eng.slots.st.release(t);
                    return Ok(());
                }
                Some(false) => {}
                None => {
                    return Err(Error::conduit(
                        "ofi",
                        format!("an RMA ticket towards rank {rank} that is not in flight"),
                    ))
                }
            }
            self.eng.rma_check()?;
            if self.eng.progress_once()? == 0 {
                b.snooze(|| true);
            } else {
                b.reset();
            }
        }
    }

    /// Write a Long's `payload` into `dest`'s segment at `offset` as one `fi_write` carrying
    /// the remote CQ data `data`, and wait until `payload` may be reused. The caller checked
    /// that the provider takes `payload.len()` bytes in one operation.
    pub(crate) fn write_long(
        &self,
        dest: Rank,
        offset: u64,
        payload: &[u8],
        data: u64,
    ) -> Result<()> {
        let p = self.peer(dest, offset, payload.len())?;
        self.eng.nudge(dest);
        let t = self.take_wait()?;
        let local = payload.as_ptr().cast_mut();
        // SAFETY: `payload` is borrowed for the call, which waits for the completion; a
        // write only reads it.
        unsafe {
            self.post(
                t,
                Dir::WriteData(data),
                (dest, p),
                offset,
                local,
                payload.len(),
            )?
        };
        self.wait_slot(t, dest)
    }

    /// A blocking transfer, split into chunks that are all in flight at once.
    ///
    /// # Safety
    /// - `local` is valid for `len` bytes (reads for a write, writes for a read) and left
    ///   alone by everything else during the call.
    unsafe fn blocking(
        &self,
        dir: Dir,
        rank: Rank,
        offset: u64,
        local: *mut u8,
        len: usize,
    ) -> Result<()> {
        let p = self.peer(rank, offset, len)?;
        if len == 0 {
            return Ok(());
        }
        self.eng.nudge(rank);
        let chunk = self.eng.ep.max_msg_size().clamp(1, CHUNK_MAX);
        let mut inflight: [Option<Taken>; 8] = [None; 8];
        let mut done = 0usize;
        let mut k = 0usize;
        let mut res = Ok(());
        while done < len {
            let n = chunk.min(len - done);
            if let Some(old) = inflight[k % inflight.len()].take() {
                res = self.wait_slot(old, rank);
                if res.is_err() {
                    break;
                }
            }
            let t = match self.take_wait() {
                Ok(t) => t,
                Err(e) => {
                    res = Err(e);
                    break;
                }
            };
            // SAFETY: the caller's contract, for the chunk; waited for below.
            let at = unsafe { local.add(done) };
            // SAFETY: as above.
            if let Err(e) = unsafe { self.post(t, dir, (rank, p), offset + done as u64, at, n) } {
                res = Err(e);
                break;
            }
            inflight[k % inflight.len()] = Some(t);
            k += 1;
            done += n;
        }
        // Every posted chunk is waited for, errors or not: the caller's memory must be left
        // alone when this returns.
        for t in inflight.iter_mut().filter_map(Option::take) {
            let r = self.wait_slot(t, rank);
            if res.is_ok() {
                res = r;
            }
        }
        res
    }
}

impl NativeRma for OfiRma {
    fn describe(&self) -> String {
        format!("libfabric RMA on {}", self.eng.ep.provider())
    }

    fn put(&self, dest: Rank, offset: u64, src: &[u8]) -> Result<()> {
        if dest == self.eng.rank {
            let dst = self.local(offset, src.len())?;
            // SAFETY: the range lies in the local segment; `copy` tolerates overlap.
            unsafe { amnet_core::mem::copy(src.as_ptr(), dst, src.len()) };
            return Ok(());
        }
        // SAFETY: `src` is borrowed for the call, which waits for every chunk; a write only
        // reads it.
        unsafe { self.blocking(Dir::Write, dest, offset, src.as_ptr().cast_mut(), src.len()) }
    }

    unsafe fn get(&self, src_rank: Rank, offset: u64, dst: *mut u8, len: usize) -> Result<()> {
        if src_rank == self.eng.rank {
            let src = self.local(offset, len)?;
            // SAFETY: `dst` is valid for `len` bytes (the caller's contract).
            unsafe { amnet_core::mem::copy(src, dst, len) };
            return Ok(());
        }
        // SAFETY: forwarded contract; the call waits for every chunk.
        unsafe { self.blocking(Dir::Read, src_rank, offset, dst, len) }
    }

    fn put_nb(&self, dest: Rank, offset: u64, src: &[u8]) -> Result<Option<RmaTicket>> {
        if dest == self.eng.rank || src.is_empty() || src.len() > BOUNCE_MAX {
            return self.put(dest, offset, src).map(|()| None);
        }
        let p = self.peer(dest, offset, src.len())?;
        let Some(t) = self.eng.slots.st.take(true) else {
            return self.put(dest, offset, src).map(|()| None);
        };
        self.eng.nudge(dest);
        let op = self.eng.slots.op(t);
        // SAFETY: the slot is taken: its operation's buffer is this thread's until the
        // operation is posted, and unchanged until its completion.
        let buf = unsafe { &mut (*op).buf };
        buf.clear();
        buf.extend_from_slice(src);
        let ptr = buf.as_mut_ptr();
        // SAFETY: the copy lives in the slot's operation until the slot is released, which
        // happens only after the completion.
        unsafe { self.post(t, Dir::Write, (dest, p), offset, ptr, src.len())? };
        Ok(Some(t.ticket(dest)))
    }

    unsafe fn get_nb(
        &self,
        src_rank: Rank,
        offset: u64,
        dst: *mut u8,
        len: usize,
    ) -> Result<Option<RmaTicket>> {
        let chunk = self.eng.ep.max_msg_size().clamp(1, CHUNK_MAX);
        if src_rank == self.eng.rank || len == 0 || len > chunk {
            // SAFETY: forwarded contract.
            return unsafe { self.get(src_rank, offset, dst, len) }.map(|()| None);
        }
        let p = self.peer(src_rank, offset, len)?;
        let Some(t) = self.eng.slots.st.take(true) else {
            // SAFETY: forwarded contract.
            return unsafe { self.get(src_rank, offset, dst, len) }.map(|()| None);
        };
        self.eng.nudge(src_rank);
        // SAFETY: the caller keeps `dst` valid and to itself until the ticket completes,
        // which is after the read's completion.
        unsafe { self.post(t, Dir::Read, (src_rank, p), offset, dst, len)? };
        Ok(Some(t.ticket(src_rank)))
    }

    fn test(&self, t: RmaTicket) -> Result<bool> {
        let k = Taken::of(t);
        for _ in 0..2 {
            match self.eng.slots.st.is_done(k) {
                Some(true) => {
                    self.eng.slots.st.release(k);
                    return Ok(true);
                }
                Some(false) => {}
                None => {
                    return Err(Error::conduit(
                        "ofi",
                        format!(
                            "an RMA ticket towards rank {} that is not in flight",
                            t.rank
                        ),
                    ))
                }
            }
            self.eng.rma_check()?;
            self.eng.progress_once()?;
        }
        Ok(false)
    }

    fn wait(&self, t: RmaTicket) -> Result<()> {
        self.wait_slot(Taken::of(t), t.rank)
    }
}

#[cfg(all(test, loom))]
mod tests {
    use super::*;
    use amnet_core::sync::UnsafeCell;
    use loom::sync::Arc;

    /// An owner copies bytes into its slot's buffer and "posts" the operation; another thread
    /// reads the buffer (the provider) and marks the completion (a poller). The owner sees it
    /// done, releases the slot and takes it again for the next operation, writing the buffer
    /// anew: that write must come after the reader's read (loom reports a race otherwise),
    /// and the first ticket must no longer be in flight.
    #[test]
    fn loom_slot_handoff() {
        loom::model(|| {
            let st = Arc::new(SlotStates::new(1, 0));
            let buf = Arc::new(UnsafeCell::new(0u64));
            let t = st.take(true).expect("a free slot");
            // SAFETY: the slot is the owner's until posted.
            buf.with_mut(|p| unsafe { *p = 7 });
            let (st2, buf2) = (st.clone(), buf.clone());
            let poller = loom::thread::spawn(move || {
                // SAFETY: posted: the provider reads the buffer before the completion.
                let v = buf2.with(|p| unsafe { *p });
                assert_eq!(v, 7);
                st2.complete(t.idx);
            });
            loop {
                match st.is_done(t) {
                    Some(true) => break,
                    Some(false) => loom::thread::yield_now(),
                    None => panic!("the owner's ticket left flight before its release"),
                }
            }
            st.release(t);
            assert_eq!(st.is_done(t), None, "a released ticket is not in flight");
            let t2 = st.take(false).expect("the slot again");
            assert_ne!(t2, t);
            // SAFETY: the slot is the owner's again; the poller's read came before.
            buf.with_mut(|p| unsafe { *p = 8 });
            poller.join().expect("poller");
        });
    }
}
