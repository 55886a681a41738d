//! Native put and get: RDMA writes and reads into the peers' registered segments.
//!
//! An operation is cut into chunks of at most one buffer ([`BUF`] bytes). A chunk moves
//! straight between the peer's segment and the local one when its local bytes lie in the
//! segment (registered) and the operation may keep using them until it completes (every get,
//! a blocking put); otherwise through a registered send buffer: a put's bytes are copied in
//! before the write is posted, a get's copied out when the read completes. An operation is
//! complete when all its chunks' completions were read. Tickets name operations by slot and
//! generation, so a stale ticket is an error, never another operation.
//!
//! Atomics ([`NativeAtomics`]) are the device's 8-byte fetch-and-add and compare-and-swap,
//! for domains of `u64` or `i64` whose operations are among get, add, sub, inc, dec and
//! compare-swap; every operation of such a domain goes through the device, this rank's own
//! through its queue pair connected to itself, since the device's atomics are atomic only
//! with respect to one another. The old value lands in a send buffer and is moved into the
//! operation's slot when the completion is read.

use std::sync::Arc;

use amnet_core::{
    AtomicOp, AtomicOps, AtomicType, Backoff, NativeAtomics, NativeRma, Rank, Result, RmaTicket,
};

use crate::conduit::{cerr, len32, lock, wr_id, Engine, BUF, K_RMA, NO_BUF};
use crate::verbs::{MemoryRegion, SendOp, SendWr, Sge, Verbs};

/// One operation's state.
#[derive(Default)]
struct OpSlot {
    generation: u32,
    /// Chunks posted and not completed.
    pending: u32,
    live: bool,
    /// Its caller returned (an error) before it completed: its chunks copy nowhere, and the
    /// last one frees the slot.
    abandoned: bool,
    /// An atomic's fetched value, once its completion is read.
    result: u64,
}

/// One chunk in flight.
#[derive(Clone, Copy)]
struct Chunk {
    op: u32,
    /// The send buffer it goes through, or `NO_BUF`.
    buf: u32,
    /// A get through a buffer: where its bytes go when it completes (0: nowhere).
    copy_to: usize,
    len: usize,
    /// An atomic: its old value lands in the buffer's first 8 bytes, for the slot's `result`.
    atomic: bool,
}

/// The operations and chunks in flight.
#[derive(Default)]
pub(crate) struct Ops {
    slots: Vec<OpSlot>,
    free: Vec<u32>,
    chunks: Vec<Chunk>,
    free_chunks: Vec<u32>,
}

impl Ops {
    fn start(&mut self) -> (u32, u32) {
        let i = self.free.pop().unwrap_or_else(|| {
            self.slots.push(OpSlot::default());
            u32::try_from(self.slots.len() - 1).unwrap_or(u32::MAX)
        });
        let s = &mut self.slots[i as usize];
        s.generation = s.generation.wrapping_add(1);
        s.pending = 0;
        s.live = true;
        s.abandoned = false;
        s.result = 0;
        (i, s.generation)
    }

    /// The caller of operation `op` returns before it completed: nothing of it may be
    /// written to the caller's memory any more, and its slot is freed once its chunks are
    /// done (at once when none is left).
    fn abandon(&mut self, op: u32) {
        let Some(s) = self.slots.get_mut(op as usize) else {
            return;
        };
        if !s.live {
            return;
        }
        if s.pending == 0 {
            s.live = false;
            self.free.push(op);
        } else {
            s.abandoned = true;
        }
    }

    fn add_chunk(&mut self, c: Chunk) -> u32 {
        self.slots[c.op as usize].pending += 1;
        match self.free_chunks.pop() {
            Some(i) => {
                self.chunks[i as usize] = c;
                i
            }
            None => {
                self.chunks.push(c);
                u32::try_from(self.chunks.len() - 1).unwrap_or(u32::MAX)
            }
        }
    }
}

/// A chunk's completion was read: copy a get's bytes out of its buffer, free the buffer.
pub(crate) fn chunk_done<V: Verbs>(eng: &Engine<V>, index: u32) {
    let mut ops = lock(&eng.ops);
    let Some(c) = ops.chunks.get(index as usize).copied() else {
        return;
    };
    let abandoned = ops.slots.get(c.op as usize).is_some_and(|s| s.abandoned);
    if c.copy_to != 0 && !abandoned {
        // SAFETY: the read filled `len` bytes of buffer `c.buf`; `copy_to` is the get's
        // destination, valid until its ticket completes (`NativeRma::get_nb`'s contract),
        // which happens only after this, or its caller returns, which abandons the
        // operation first (under this lock).
        unsafe { amnet_core::mem::copy(eng.send.ptr(c.buf), c.copy_to as *mut u8, c.len) };
    }
    let result = if c.atomic {
        // SAFETY: the atomic wrote its 8-byte old value at the start of buffer `c.buf`,
        // which is ours until it is given back below.
        unsafe { std::ptr::read_unaligned(eng.send.ptr(c.buf).cast::<u64>()) }
    } else {
        0
    };
    eng.give_buf(c.buf);
    ops.free_chunks.push(index);
    let mut free = false;
    if let Some(s) = ops.slots.get_mut(c.op as usize) {
        s.pending = s.pending.saturating_sub(1);
        if c.atomic {
            s.result = result;
        }
        if s.abandoned && s.pending == 0 {
            s.abandoned = false;
            s.live = false;
            free = true;
        }
    }
    if free {
        ops.free.push(c.op);
    }
}

/// What an operation moves.
enum Dir<'a> {
    Put(&'a [u8]),
    Get(*mut u8, usize),
}

/// The conduit's [`NativeRma`].
pub(crate) struct IbvRma<V: Verbs> {
    eng: Arc<Engine<V>>,
}

impl<V: Verbs> IbvRma<V> {
    pub(crate) fn new(eng: Arc<Engine<V>>) -> Self {
        IbvRma { eng }
    }

    /// Post every chunk of one operation; returns its ticket, or `None` when it is done
    /// already (this rank's own segment).
    ///
    /// # Safety
    /// - For a get, the destination is valid for writes until the ticket completes.
    unsafe fn start(
        &self,
        peer: Rank,
        offset: u64,
        dir: Dir<'_>,
        direct: bool,
    ) -> Result<Option<RmaTicket>> {
        let e = &self.eng;
        e.check()?;
        let seg = &e
            .seg
            .get()
            .ok_or_else(|| cerr("put or get before attach"))?
            .mem;
        let len = match dir {
            Dir::Put(s) => s.len(),
            Dir::Get(_, n) => n,
        };
        if peer == e.rank {
            if !seg.fits(offset, len) {
                return Err(cerr(format!(
                    "{len} bytes at offset {offset} lie beyond this rank's segment ({} bytes)",
                    seg.len()
                )));
            }
            let at = usize::try_from(offset).unwrap_or(usize::MAX);
            // SAFETY: the range is inside the segment (checked); the other side is the
            // caller's buffer (a get's valid for `len` writes by the contract).
            unsafe {
                match dir {
                    Dir::Put(s) => amnet_core::mem::copy(s.as_ptr(), seg.ptr().add(at), len),
                    Dir::Get(d, _) => amnet_core::mem::copy(seg.ptr().add(at), d, len),
                }
            }
            return Ok(None);
        }
        let r = *e
            .remote
            .get()
            .and_then(|r| r.get(peer as usize))
            .ok_or_else(|| cerr(format!("no segment of rank {peer}")))?;
        if offset.checked_add(len as u64).is_none_or(|end| end > r.len) {
            return Err(cerr(format!(
                "{len} bytes at offset {offset} lie beyond rank {peer}'s segment ({} bytes)",
                r.len
            )));
        }
        let (op, generation) = lock(&e.ops).start();
        // SAFETY: forwarded contract.
        let posted = unsafe { self.post_chunks(peer, offset, &dir, direct, op, r, len) };
        if let Err(err) = posted {
            lock(&e.ops).abandon(op);
            return Err(err);
        }
        Ok(Some(RmaTicket {
            rank: peer,
            id: u64::from(generation) << 32 | u64::from(op),
        }))
    }

    /// Post the chunks of operation `op` (see `start`).
    ///
    /// # Safety
    /// - As for `start`.
    #[allow(clippy::too_many_arguments)]
    unsafe fn post_chunks(
        &self,
        peer: Rank,
        offset: u64,
        dir: &Dir<'_>,
        direct: bool,
        op: u32,
        r: crate::conduit::RemoteSeg,
        len: usize,
    ) -> Result<()> {
        let e = &self.eng;
        let seg = &e
            .seg
            .get()
            .ok_or_else(|| cerr("put or get before attach"))?
            .mem;
        let seg_lkey = e.seg.get().and_then(|s| s.mr.as_ref()).map(|m| m.lkey());
        let in_seg = |p: usize, n: usize| {
            let base = seg.ptr() as usize;
            p >= base && p.checked_add(n).is_some_and(|end| end <= base + seg.len())
        };
        let local = match dir {
            Dir::Put(s) => s.as_ptr() as usize,
            Dir::Get(d, _) => *d as usize,
        };
        let mut at = 0usize;
        while at < len {
            let n = (len - at).min(BUF);
            let p = local + at;
            let straight = match seg_lkey {
                Some(k) if direct && in_seg(p, n) => Some(k),
                _ => None,
            };
            let (buf, addr, lkey) = match straight {
                Some(k) => (NO_BUF, p, k),
                None => {
                    let b = e.wait_buf()?;
                    if let Dir::Put(_) = dir {
                        // SAFETY: `p..p + n` is inside the caller's source; the buffer is ours.
                        unsafe { amnet_core::mem::copy(p as *const u8, e.send.ptr(b), n) };
                    }
                    (b, e.send.ptr(b) as usize, e.send.mr.lkey())
                }
            };
            if let Err(err) = e.wait_sq(peer) {
                e.give_buf(buf);
                return Err(err);
            }
            let copy_to = match (dir_is_get(dir), buf) {
                (true, b) if b != NO_BUF => p,
                _ => 0,
            };
            let chunk = lock(&e.ops).add_chunk(Chunk {
                op,
                buf,
                copy_to,
                len: n,
                atomic: false,
            });
            let remote_addr = r.base + offset + at as u64;
            let sg = [Sge {
                addr: addr as u64,
                len: len32(n),
                lkey,
            }];
            let wr = SendWr {
                wr_id: wr_id(K_RMA, peer, chunk),
                op: match dir {
                    Dir::Put(_) => SendOp::RdmaWrite {
                        remote_addr,
                        rkey: r.rkey,
                    },
                    Dir::Get(..) => SendOp::RdmaRead {
                        remote_addr,
                        rkey: r.rkey,
                    },
                },
                sg: &sg,
                signaled: true,
                inline: false,
                fence: false,
            };
            // SAFETY: the local bytes are a send buffer held until the chunk completes, or
            // the segment, which the operation's caller keeps for it (`direct`).
            unsafe { e.post(peer, &wr)? };
            at += n;
        }
        Ok(())
    }

    /// The operation's result (an atomic's fetched value, else 0) once the operation behind
    /// `t` completed (its slot is freed then).
    fn done(&self, t: RmaTicket) -> Result<Option<u64>> {
        let op = (t.id & 0xffff_ffff) as usize;
        let generation = (t.id >> 32) as u32;
        let mut ops = lock(&self.eng.ops);
        let result = match ops.slots.get_mut(op) {
            Some(s) if s.live && !s.abandoned && s.generation == generation => {
                if s.pending > 0 {
                    return Ok(None);
                }
                s.live = false;
                Some(s.result)
            }
            _ => None,
        };
        let Some(result) = result else {
            return Err(cerr(format!(
                "RMA ticket {:#x} towards rank {} names no operation in flight",
                t.id, t.rank
            )));
        };
        ops.free.push(u32::try_from(op).unwrap_or(u32::MAX));
        Ok(Some(result))
    }

    /// Give up on `t`: its caller returns with an error.
    fn abandon(&self, t: RmaTicket) {
        lock(&self.eng.ops).abandon((t.id & 0xffff_ffff) as u32);
    }

    /// Wait until `t` completes; returns its result (see `done`).
    fn finish(&self, t: Option<RmaTicket>) -> Result<u64> {
        let Some(t) = t else { return Ok(0) };
        let mut bo = Backoff::new(self.eng.spin, !self.eng.oversubscribed);
        loop {
            if let Some(v) = self.done(t)? {
                return Ok(v);
            }
            if let Err(e) = self.eng.waiting(&mut bo) {
                self.abandon(t);
                return Err(e);
            }
        }
    }
}

fn dir_is_get(d: &Dir<'_>) -> bool {
    matches!(d, Dir::Get(..))
}

impl<V: Verbs> NativeRma for IbvRma<V> {
    fn describe(&self) -> String {
        format!(
            "RDMA write and read into registered segments on device {}",
            self.eng.dev.name()
        )
    }

    fn put(&self, dest: Rank, offset: u64, src: &[u8]) -> Result<()> {
        // SAFETY: a put has no destination of ours; the source outlives this blocking call.
        let t = unsafe { self.start(dest, offset, Dir::Put(src), true)? };
        self.finish(t).map(|_| ())
    }

    unsafe fn get(&self, src_rank: Rank, offset: u64, dst: *mut u8, len: usize) -> Result<()> {
        // SAFETY: `dst` is valid for `len` writes for this blocking call (the caller's
        // contract).
        let t = unsafe { self.start(src_rank, offset, Dir::Get(dst, len), true)? };
        self.finish(t).map(|_| ())
    }

    fn put_nb(&self, dest: Rank, offset: u64, src: &[u8]) -> Result<Option<RmaTicket>> {
        // SAFETY: no destination of ours; `direct: false` copies the source before return.
        let Some(t) = (unsafe { self.start(dest, offset, Dir::Put(src), false)? }) else {
            return Ok(None);
        };
        if let Err(e) = self.eng.progress(crate::conduit::Arrived::Copy) {
            self.abandon(t);
            return Err(e);
        }
        Ok(match self.done(t)? {
            Some(_) => None,
            None => Some(t),
        })
    }

    unsafe fn get_nb(
        &self,
        src_rank: Rank,
        offset: u64,
        dst: *mut u8,
        len: usize,
    ) -> Result<Option<RmaTicket>> {
        // SAFETY: `dst` stays valid until the ticket completes (the caller's contract).
        unsafe { self.start(src_rank, offset, Dir::Get(dst, len), true) }
    }

    fn test(&self, t: RmaTicket) -> Result<bool> {
        if let Err(e) = self.eng.progress(crate::conduit::Arrived::Copy) {
            self.abandon(t);
            return Err(e);
        }
        self.done(t).map(|r| r.is_some())
    }

    fn wait(&self, t: RmaTicket) -> Result<()> {
        self.finish(Some(t)).map(|_| ())
    }
}

/// The operations the device's atomics run.
const OFFLOADED: [AtomicOp; 6] = [
    AtomicOp::Get,
    AtomicOp::Add,
    AtomicOp::Sub,
    AtomicOp::Inc,
    AtomicOp::Dec,
    AtomicOp::CompareSwap,
];

impl<V: Verbs> NativeAtomics for IbvRma<V> {
    fn offloads(&self, ty: AtomicType, ops: AtomicOps) -> bool {
        matches!(ty, AtomicType::U64 | AtomicType::I64)
            && ops.iter().all(|o| OFFLOADED.contains(&o))
            && self.eng.dev.caps().atomics
    }

    fn fetch(
        &self,
        rank: Rank,
        offset: u64,
        ty: AtomicType,
        op: AtomicOp,
        a: u64,
        b: u64,
    ) -> Result<u64> {
        let e = &self.eng;
        e.check()?;
        if ty.size() != 8 || offset % 8 != 0 {
            return Err(cerr(format!(
                "a device atomic on a {} element at offset {offset}: only aligned 8-byte \
                 elements",
                ty.name()
            )));
        }
        let r = *e
            .remote
            .get()
            .and_then(|r| r.get(rank as usize))
            .ok_or_else(|| cerr(format!("no segment of rank {rank}")))?;
        if offset.checked_add(8).is_none_or(|end| end > r.len) {
            return Err(cerr(format!(
                "an atomic at offset {offset} lies beyond rank {rank}'s segment ({} bytes)",
                r.len
            )));
        }
        let remote_addr = r.base + offset;
        let sop = match op {
            AtomicOp::Get => SendOp::FetchAdd {
                remote_addr,
                rkey: r.rkey,
                add: 0,
            },
            AtomicOp::Add => SendOp::FetchAdd {
                remote_addr,
                rkey: r.rkey,
                add: a,
            },
            AtomicOp::Sub => SendOp::FetchAdd {
                remote_addr,
                rkey: r.rkey,
                add: a.wrapping_neg(),
            },
            AtomicOp::Inc => SendOp::FetchAdd {
                remote_addr,
                rkey: r.rkey,
                add: 1,
            },
            AtomicOp::Dec => SendOp::FetchAdd {
                remote_addr,
                rkey: r.rkey,
                add: u64::MAX,
            },
            AtomicOp::CompareSwap => SendOp::CompareSwap {
                remote_addr,
                rkey: r.rkey,
                compare: a,
                swap: b,
            },
            other => {
                return Err(cerr(format!(
                    "`{}` is not an operation the device's atomics run",
                    other.name()
                )))
            }
        };
        let (op_slot, generation) = lock(&e.ops).start();
        let t = RmaTicket {
            rank,
            id: u64::from(generation) << 32 | u64::from(op_slot),
        };
        let b = match e.wait_buf() {
            Ok(b) => b,
            Err(err) => {
                self.abandon(t);
                return Err(err);
            }
        };
        if let Err(err) = e.wait_sq(rank) {
            e.give_buf(b);
            self.abandon(t);
            return Err(err);
        }
        let chunk = lock(&e.ops).add_chunk(Chunk {
            op: op_slot,
            buf: b,
            copy_to: 0,
            len: 8,
            atomic: true,
        });
        let sg = [Sge {
            addr: e.send.ptr(b) as u64,
            len: 8,
            lkey: e.send.mr.lkey(),
        }];
        let wr = SendWr {
            wr_id: wr_id(K_RMA, rank, chunk),
            op: sop,
            sg: &sg,
            signaled: true,
            inline: false,
            fence: false,
        };
        // SAFETY: the result goes to send buffer `b`, held until the completion, which moves
        // it into the operation's slot.
        if let Err(err) = unsafe { e.post(rank, &wr) } {
            self.abandon(t);
            return Err(err);
        }
        self.finish(Some(t))
    }
}
