//! The `Conduit` implementation over any [`Verbs`] device.
//!
//! One RC queue pair connects each pair of ranks; every queue pair takes its receives from
//! one shared receive queue, and every completion comes to one completion queue, which a poll
//! drains up to [`BATCH`] entries at a time. An active message is one SEND
//! ([`crate::wire`]): inline when it fits the device's inline limit, otherwise from a
//! registered send buffer. A Long of more than [`EAGER_MAX`] bytes is RDMA-written into the
//! target's segment first (from registered bounce buffers), then announced by a SEND that
//! carries no payload: RC order places the data before the announcement. The segment is
//! registered once, whole, and every rank learns every other's base, length and key at attach;
//! put and get are RDMA writes and reads into it (`crate::rma`).
//!
//! Flow control is by credits (`amnet_core::credits`): a request takes one of the peer's,
//! which it returns in a later message's header or a credit message once the handler ran, and
//! the shared receive queue holds a buffer for every request, reply and credit message that
//! may be on its way, so the fabric's receiver-not-ready retry is only a backstop. A
//! try-send that finds no room leaves arrived messages in their buffers (backpressure); a
//! reply and the conduit's own waits (a Long's later chunks, no free send buffer, an RMA in
//! flight) copy them out and post the buffers again, so that two ranks that wait on each
//! other never both hold their receive queues empty.
//!
//! Every error completion ends the conduit: the operation, the peer and the status are
//! named, and every later call returns that error.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use amnet_core::config::{vars, Source};
use amnet_core::mem::HeapSegment;
use amnet_core::{
    Backoff, Category, Conduit, Error, InMsg, LocalSegment, NativeRma, OutMsg, Rank, Result,
    MAX_ARGS,
};
use amnet_udp::boot::JobLink;

use crate::rma::{IbvRma, Ops};
use crate::verbs::{
    Access, ConnectAttr, MemoryRegion, QpInit, QueuePair, RecvWr, SendOp, SendWr, Sge, Verbs, Wc,
    WcStatus,
};
use crate::wire::{self, HDR};

/// Largest Medium payload.
pub const MAX_MEDIUM: usize = 16_384;
/// Largest Long payload that travels inside its message (copied into the segment on
/// arrival); larger ones are RDMA-written ahead of it.
pub const EAGER_MAX: usize = 8192;
/// Bytes of one receive buffer: a header, every argument and a Medium.
pub(crate) const RECV_BUF: usize = HDR + 4 * MAX_ARGS + MAX_MEDIUM;
/// Bytes of one send buffer: a message, or a chunk of a written Long, a put or a get.
pub(crate) const BUF: usize = 65_536;
/// Registered send (and bounce) buffers.
const SENDS: usize = 32;
/// Requests a rank may have on their way to one peer before that peer returns credits, unless
/// `AMNET_IBV_AM_CREDITS` says otherwise or the device's shared receive queue is too short.
const CREDITS: u32 = 32;
/// Send queue depth per queue pair, at most.
const SQ_DEPTH: u32 = 64;
/// Completions read per poll of the completion queue.
pub(crate) const BATCH: usize = 32;
/// Messages built on the stack and sent inline when the device takes that many bytes.
const INLINE_STACK: usize = 512;

/// Kinds of work request, in the top four bits of a `wr_id`.
pub(crate) const K_RECV: u64 = 1;
pub(crate) const K_SEND: u64 = 2;
pub(crate) const K_RMA: u64 = 3;
/// No send buffer (an inline send, a write from the segment).
pub(crate) const NO_BUF: u32 = u32::MAX;

/// A `wr_id`: kind, peer rank (24 bits), index (a buffer or an RMA chunk).
pub(crate) fn wr_id(kind: u64, peer: Rank, index: u32) -> u64 {
    kind << 60 | (u64::from(peer) & 0xff_ffff) << 32 | u64::from(index)
}

fn wr_kind(w: u64) -> u64 {
    w >> 60
}

fn wr_peer(w: u64) -> Rank {
    ((w >> 32) & 0xff_ffff) as u32
}

fn wr_index(w: u64) -> u32 {
    (w & 0xffff_ffff) as u32
}

/// A length that fits 32 bits (buffers, messages), as a work request's.
pub(crate) fn len32(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

pub(crate) fn cerr(msg: impl Into<String>) -> Error {
    Error::conduit("ibv", msg.into())
}

pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A peer's registered segment.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RemoteSeg {
    pub(crate) base: u64,
    pub(crate) rkey: u32,
    pub(crate) len: u64,
}

/// The registered local segment.
pub(crate) struct Seg<V: Verbs> {
    /// Dropped before the memory.
    pub(crate) mr: Option<V::Mr>,
    pub(crate) mem: HeapSegment,
}

/// A message to deliver later: copied out of its receive buffer, or still in it.
struct Ready {
    src: Rank,
    body: Body,
}

enum Body {
    Copied(Vec<u8>),
    /// `len` bytes in receive buffer `buf`, posted again once delivered (or copied out).
    Held {
        buf: u32,
        len: usize,
    },
}

/// What [`Engine::progress`] does with an arrived message.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Arrived {
    /// Copy it out and post its buffer again: in the conduit's own blocking waits, so that
    /// two ranks that wait on each other never both hold their receive queues empty.
    Copy,
    /// Keep it in its buffer until a poll delivers it: in a try-send, so that a rank that
    /// sends without polling lets its receive queue run dry and its senders feel it.
    Hold,
}

/// Registered memory cut into buffers of `size` bytes.
pub(crate) struct Buffers<V: Verbs> {
    /// Dropped before the memory.
    pub(crate) mr: V::Mr,
    pub(crate) mem: HeapSegment,
    size: usize,
}

impl<V: Verbs> Buffers<V> {
    fn new(dev: &V, count: usize, size: usize, access: Access) -> Result<Buffers<V>> {
        let mem = HeapSegment::new("ibv", count * size)?;
        // SAFETY: the memory lives as long as the registration (the field order drops the
        // region first), and the device writes it only where `access` allows.
        let mr = unsafe { dev.reg_mr(mem.ptr(), mem.len(), access)? };
        Ok(Buffers { mr, mem, size })
    }

    pub(crate) fn ptr(&self, i: u32) -> *mut u8 {
        // SAFETY: callers pass indices below the buffer count; the offset stays inside the
        // allocation.
        unsafe { self.mem.ptr().add(i as usize * self.size) }
    }
}

/// The state of one rank's conduit, shared with its native RMA (`crate::rma`).
pub(crate) struct Engine<V: Verbs> {
    pub(crate) rank: Rank,
    pub(crate) size: u32,
    /// One queue pair per rank; this rank's own is connected to itself and carries only
    /// atomics (its messages stay in the process).
    qps: Vec<Option<V::Qp>>,
    /// The peer of each queue pair number.
    qp_peer: HashMap<u32, Rank>,
    recv: Buffers<V>,
    pub(crate) send: Buffers<V>,
    pub(crate) seg: OnceLock<Seg<V>>,
    pub(crate) remote: OnceLock<Vec<RemoteSeg>>,
    srq: V::Srq,
    cq: V::Cq,
    pub(crate) dev: V,
    job: JobLink,
    /// Send buffers not in use.
    send_free: Mutex<Vec<u32>>,
    /// Requests in each queue pair's send queue whose completion has not been read.
    sq_used: Vec<AtomicU32>,
    sq_depth: u32,
    max_inline: usize,
    /// Held while a thread reads the completion queue (never while a handler runs).
    cq_lock: Mutex<()>,
    /// Messages copied out of their receive buffers, in arrival order.
    ready: Mutex<VecDeque<Ready>>,
    ready_len: AtomicUsize,
    /// How many of them are held in their receive buffers.
    held: AtomicUsize,
    /// Requests towards each rank, and credits owed to each.
    credits: amnet_core::credits::Credits,
    /// Vectors for copied messages.
    spare_vecs: Mutex<Vec<Vec<u8>>>,
    /// RMA operations and their chunks in flight.
    pub(crate) ops: Mutex<Ops>,
    /// The first error completion, as the error every later call returns.
    failed: OnceLock<String>,
    pub(crate) oversubscribed: bool,
    pub(crate) spin: u32,
}

impl<V: Verbs> std::fmt::Debug for Engine<V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "IbvConduit(rank {} of {}, device {})",
            self.rank,
            self.size,
            self.dev.name()
        )
    }
}

/// Parse one rank's blob of queue pair addresses: for each rank, a 2-byte length and the
/// address of its queue pair towards that rank.
fn address_for(blob: &[u8], me: Rank) -> Option<&[u8]> {
    let mut at = 0usize;
    let mut r = 0u32;
    loop {
        let len = usize::from(u16::from_le_bytes([*blob.get(at)?, *blob.get(at + 1)?]));
        let a = blob.get(at + 2..at + 2 + len)?;
        if r == me {
            return Some(a);
        }
        at += 2 + len;
        r += 1;
    }
}

impl<V: Verbs> Engine<V> {
    /// Connect a queue pair to every other rank of the job `job` links to, on `dev`.
    fn new(dev: V, rank: Rank, size: u32, job: JobLink, src: &Source) -> Result<Engine<V>> {
        let caps = dev.caps();
        let peers = size.saturating_sub(1);
        // Every peer may have `credits` requests and as many replies on their way here, and
        // two credit messages: the shared receive queue holds a buffer for each.
        let srq_max = caps.max_srq_wr.min(8192);
        let fit = (srq_max / peers.max(1)).saturating_sub(2) / 2;
        let credits = src
            .count_u32(&vars::IBV_AM_CREDITS)?
            .unwrap_or(CREDITS)
            .min(fit);
        if credits < 2 && peers > 0 {
            return Err(cerr(format!(
                "device {}: a shared receive queue of at most {} entries cannot hold two \
                 requests and their replies from each of {peers} peers",
                dev.name(),
                caps.max_srq_wr
            )));
        }
        let recvs = ((2 * credits as usize + 2) * peers as usize).max(16);
        let mut sq_depth = SQ_DEPTH.min(caps.max_qp_wr);
        // Every queue pair's send queue (this rank's own too) and every receive buffer.
        let need = |sq: u32| recvs as u64 + u64::from(size) * u64::from(sq) + BATCH as u64;
        if need(sq_depth) > u64::from(caps.max_cqe) {
            let room = u64::from(caps.max_cqe).saturating_sub(recvs as u64 + BATCH as u64);
            sq_depth = u32::try_from(room / u64::from(size))
                .unwrap_or(0)
                .min(sq_depth);
        }
        if sq_depth < 4 {
            return Err(cerr(format!(
                "device {}: a completion queue of at most {} entries cannot serve {size} ranks",
                dev.name(),
                caps.max_cqe
            )));
        }
        let cq_depth = u32::try_from(need(sq_depth)).unwrap_or(u32::MAX);
        let cq = dev.create_cq(cq_depth)?;
        let srq = dev.create_srq(u32::try_from(recvs).unwrap_or(u32::MAX))?;
        let max_inline = (caps.max_inline as usize).min(INLINE_STACK);
        let init = QpInit {
            max_send_wr: sq_depth,
            max_recv_wr: 0,
            max_inline: u32::try_from(max_inline).unwrap_or(0),
        };
        let mut qps = Vec::with_capacity(size as usize);
        let mut blob = Vec::new();
        for p in 0..size {
            let qp = dev.create_qp(&cq, &cq, Some(&srq), &init)?;
            if p == rank {
                // Connected to itself, for the atomics this rank runs on its own segment
                // through the device (`crate::rma`); messages to this rank never use it.
                dev.to_init(&qp)?;
                let a = dev.address(&qp);
                let attr = ConnectAttr::default();
                dev.to_rtr(&qp, &a, &attr)
                    .and_then(|()| dev.to_rts(&qp, &attr))
                    .map_err(|e| cerr(format!("connecting rank {rank}'s own queue pair: {e}")))?;
                qps.push(Some(qp));
                blob.extend_from_slice(&0u16.to_le_bytes());
                continue;
            }
            dev.to_init(&qp)?;
            let a = dev.address(&qp);
            blob.extend_from_slice(&u16::try_from(a.len()).unwrap_or(0).to_le_bytes());
            blob.extend_from_slice(&a);
            qps.push(Some(qp));
        }
        let recv = Buffers::new(&dev, recvs, RECV_BUF, Access::LOCAL_WRITE)?;
        let send = Buffers::new(&dev, SENDS, BUF, Access::LOCAL_WRITE)?;
        for i in 0..recvs {
            let i = u32::try_from(i).unwrap_or(0);
            let wr = RecvWr {
                wr_id: wr_id(K_RECV, 0, i),
                sge: Sge {
                    addr: recv.ptr(i) as u64,
                    len: len32(RECV_BUF),
                    lkey: recv.mr.lkey(),
                },
            };
            // SAFETY: the buffer is the conduit's, registered, and not posted elsewhere; it
            // lives as long as the conduit.
            unsafe { dev.post_srq_recv(&srq, &[wr])? };
        }
        let all = job.exchange(&blob, &|c| std::process::exit(c))?;
        let attr = ConnectAttr::default();
        let mut qp_peer = HashMap::new();
        for (p, qp) in qps.iter().enumerate() {
            let Some(qp) = qp else { continue };
            let p = u32::try_from(p).unwrap_or(u32::MAX);
            if p == rank {
                continue;
            }
            let theirs = all
                .get(p as usize)
                .and_then(|b| address_for(b, rank))
                .ok_or_else(|| {
                    cerr(format!(
                        "rank {p} sent no queue pair address for rank {rank}"
                    ))
                })?;
            dev.to_rtr(qp, theirs, &attr)
                .map_err(|e| cerr(format!("connecting to rank {p}: {e}")))?;
            dev.to_rts(qp, &attr)
                .map_err(|e| cerr(format!("connecting to rank {p}: {e}")))?;
            qp_peer.insert(qp.num(), p);
        }
        // Every queue pair is ready to send before any rank sends.
        job.exchange(&[], &|c| std::process::exit(c))?;
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let oversubscribed = size as usize > cores;
        let spin = amnet_core::EndpointConfig::resolve(src, oversubscribed)?.spin;
        Ok(Engine {
            rank,
            size,
            qps,
            qp_peer,
            recv,
            send,
            seg: OnceLock::new(),
            remote: OnceLock::new(),
            srq,
            cq,
            dev,
            job,
            send_free: Mutex::new((0..len32(SENDS)).rev().collect()),
            sq_used: (0..size).map(|_| AtomicU32::new(0)).collect(),
            sq_depth,
            max_inline,
            cq_lock: Mutex::new(()),
            ready: Mutex::new(VecDeque::new()),
            ready_len: AtomicUsize::new(0),
            held: AtomicUsize::new(0),
            credits: amnet_core::credits::Credits::new(size, credits),
            spare_vecs: Mutex::new(Vec::new()),
            ops: Mutex::new(Ops::default()),
            failed: OnceLock::new(),
            oversubscribed,
            spin,
        })
    }

    pub(crate) fn check(&self) -> Result<()> {
        match self.failed.get() {
            Some(e) => Err(cerr(e.clone())),
            None => Ok(()),
        }
    }

    fn fail(&self, msg: String) -> Error {
        let _ = self.failed.set(msg);
        cerr(self.failed.get().cloned().unwrap_or_default())
    }

    pub(crate) fn qp(&self, peer: Rank) -> Result<&V::Qp> {
        self.qps
            .get(peer as usize)
            .and_then(Option::as_ref)
            .ok_or_else(|| {
                cerr(format!(
                    "no queue pair towards rank {peer} (job of {})",
                    self.size
                ))
            })
    }

    /// Return by credit messages the credits owed to ranks that are due half of theirs or
    /// more; what finds no room now stays due for the next poll.
    fn return_credits(&self) -> Result<()> {
        for dest in self.credits.due() {
            if dest == self.rank {
                continue;
            }
            let sent = self.send_bytes(dest, true, HDR, |b: &mut [u8]| {
                b.fill(0);
                b[1] = wire::F_CREDIT;
                b[16..20].copy_from_slice(&self.rank.to_le_bytes());
            })?;
            if !sent {
                self.credits.still_due();
            }
        }
        Ok(())
    }

    /// The credits the message `body` from `src` returns are taken; true when it is a credit
    /// message (nothing to deliver).
    fn control(&self, src: Rank, body: &[u8]) -> bool {
        if body.len() < HDR {
            return false;
        }
        self.credits.give_back(src, u32::from(body[3]));
        body[1] & wire::F_CREDIT != 0
    }

    /// Take a slot of `peer`'s send queue.
    pub(crate) fn take_sq(&self, peer: Rank) -> bool {
        let c = &self.sq_used[peer as usize];
        if c.fetch_add(1, Ordering::AcqRel) >= self.sq_depth {
            c.fetch_sub(1, Ordering::AcqRel);
            return false;
        }
        true
    }

    pub(crate) fn give_sq(&self, peer: Rank) {
        if let Some(c) = self.sq_used.get(peer as usize) {
            c.fetch_sub(1, Ordering::AcqRel);
        }
    }

    pub(crate) fn take_buf(&self) -> Option<u32> {
        lock(&self.send_free).pop()
    }

    pub(crate) fn give_buf(&self, b: u32) {
        if b != NO_BUF {
            lock(&self.send_free).push(b);
        }
    }

    /// Wait for a send queue slot towards `peer` (completions come without the peer's help).
    pub(crate) fn wait_sq(&self, peer: Rank) -> Result<()> {
        let mut bo = Backoff::new(self.spin, !self.oversubscribed);
        while !self.take_sq(peer) {
            self.waiting(&mut bo)?;
        }
        Ok(())
    }

    /// Wait for a send buffer.
    pub(crate) fn wait_buf(&self) -> Result<u32> {
        let mut bo = Backoff::new(self.spin, !self.oversubscribed);
        loop {
            if let Some(b) = self.take_buf() {
                return Ok(b);
            }
            self.waiting(&mut bo)?;
        }
    }

    /// One round of a wait of the conduit's own: drain the completion queue (copying
    /// messages out, held ones too), and end the process if the job is ending.
    pub(crate) fn waiting(&self, bo: &mut Backoff) -> Result<()> {
        self.release_held()?;
        if self.progress(Arrived::Copy)? > 0 {
            bo.reset();
        } else {
            if let Some(code) = self.job.exit_requested() {
                self.terminate(code);
            }
            bo.snooze(|| false);
        }
        Ok(())
    }

    /// Read up to [`BATCH`] completions and handle each, keeping arrived messages for a poll
    /// as `arrived` says. Returns how many were read (0 when another thread reads).
    pub(crate) fn progress(&self, arrived: Arrived) -> Result<usize> {
        self.check()?;
        let mut wcs = [Wc::EMPTY; BATCH];
        let n = {
            let Ok(_g) = self.cq_lock.try_lock() else {
                return Ok(0);
            };
            self.dev.poll_cq(&self.cq, &mut wcs).map_err(|e| {
                self.fail(format!(
                    "rank {}: reading the completion queue: {e}",
                    self.rank
                ))
            })?
        };
        let mut res = Ok(());
        for wc in &wcs[..n] {
            if let Err(e) = self.on_completion(wc, arrived) {
                if res.is_ok() {
                    res = Err(e);
                }
            }
        }
        res.map(|()| n)
    }

    /// What a failed work request was, for its error.
    fn describe(&self, wc: &Wc) -> String {
        let peer = wr_peer(wc.wr_id);
        let what = match wr_kind(wc.wr_id) {
            K_RECV => format!(
                "a receive on the queue pair from rank {}",
                self.qp_peer
                    .get(&wc.qp_num)
                    .map_or_else(|| "?".to_string(), |p| p.to_string())
            ),
            K_SEND => format!("an active message (or a Long's data) to rank {peer}"),
            K_RMA => format!("a put, get or atomic with rank {peer}"),
            _ => format!("work request {:#x}", wc.wr_id),
        };
        format!(
            "rank {}: {what} failed: {} ({:?}, status {})",
            self.rank,
            wc.status.describe(),
            wc.status,
            wc.status.raw()
        )
    }

    /// Handle one completion outside a poll's delivery: sends and RMA chunks retire, an
    /// arrived message waits for a poll (copied out, its buffer posted again, or held, as
    /// `arrived` says).
    fn on_completion(&self, wc: &Wc, arrived: Arrived) -> Result<()> {
        if wc.status != WcStatus::Success {
            return Err(self.fail(self.describe(wc)));
        }
        match wr_kind(wc.wr_id) {
            K_RECV => {
                let src = self.source(wc)?;
                if self.control(src, self.recv_body(wc)) {
                    return self.repost(wr_index(wc.wr_id));
                }
                let body = if arrived == Arrived::Hold {
                    self.held.fetch_add(1, Ordering::AcqRel);
                    Body::Held {
                        buf: wr_index(wc.wr_id),
                        len: self.recv_body(wc).len(),
                    }
                } else {
                    let v = self.copy_out(self.recv_body(wc));
                    self.repost(wr_index(wc.wr_id))?;
                    Body::Copied(v)
                };
                let mut r = lock(&self.ready);
                r.push_back(Ready { src, body });
                self.ready_len.store(r.len(), Ordering::Release);
            }
            K_SEND => {
                self.give_sq(wr_peer(wc.wr_id));
                self.give_buf(wr_index(wc.wr_id));
            }
            K_RMA => {
                self.give_sq(wr_peer(wc.wr_id));
                crate::rma::chunk_done(self, wr_index(wc.wr_id));
            }
            k => {
                return Err(self.fail(format!(
                    "rank {}: a completion of unknown kind {k}",
                    self.rank
                )))
            }
        }
        Ok(())
    }

    /// The bytes of a message waiting for delivery.
    fn bytes<'a>(&'a self, b: &'a Body) -> &'a [u8] {
        match b {
            Body::Copied(v) => v,
            // SAFETY: a held buffer is the conduit's until posted again, which happens only
            // once its message left the ready queue; `len` is what its completion delivered.
            Body::Held { buf, len } => unsafe {
                std::slice::from_raw_parts(self.recv.ptr(*buf), *len)
            },
        }
    }

    /// `body` in a vector of the pool.
    fn copy_out(&self, body: &[u8]) -> Vec<u8> {
        let mut v = lock(&self.spare_vecs).pop().unwrap_or_default();
        v.clear();
        v.extend_from_slice(body);
        v
    }

    /// Copy every held message out of its receive buffer and post the buffers again.
    fn release_held(&self) -> Result<()> {
        if self.held.load(Ordering::Acquire) == 0 {
            return Ok(());
        }
        let mut r = lock(&self.ready);
        for m in r.iter_mut() {
            if let Body::Held { buf, len } = m.body {
                // SAFETY: a held buffer is the conduit's until posted again; `len` is what
                // its completion delivered.
                let v =
                    self.copy_out(unsafe { std::slice::from_raw_parts(self.recv.ptr(buf), len) });
                m.body = Body::Copied(v);
                self.held.fetch_sub(1, Ordering::AcqRel);
                self.repost(buf)?;
            }
        }
        Ok(())
    }

    fn source(&self, wc: &Wc) -> Result<Rank> {
        self.qp_peer.get(&wc.qp_num).copied().ok_or_else(|| {
            self.fail(format!(
                "rank {}: a message on queue pair {:#x}, which connects no rank",
                self.rank, wc.qp_num
            ))
        })
    }

    /// The bytes a receive completion delivered.
    fn recv_body(&self, wc: &Wc) -> &[u8] {
        let len = (wc.byte_len as usize).min(RECV_BUF);
        // SAFETY: the buffer was filled by the device and is this conduit's until posted
        // again; `len` is within it.
        unsafe { std::slice::from_raw_parts(self.recv.ptr(wr_index(wc.wr_id)), len) }
    }

    fn repost(&self, i: u32) -> Result<()> {
        let wr = RecvWr {
            wr_id: wr_id(K_RECV, 0, i),
            sge: Sge {
                addr: self.recv.ptr(i) as u64,
                len: len32(RECV_BUF),
                lkey: self.recv.mr.lkey(),
            },
        };
        // SAFETY: as when first posted: a registered buffer of the conduit, not posted now.
        unsafe { self.dev.post_srq_recv(&self.srq, &[wr]) }
            .map_err(|e| self.fail(format!("rank {}: posting a receive again: {e}", self.rank)))
    }

    /// Post one send work request towards `peer`, which holds a send queue slot for it.
    ///
    /// # Safety
    /// - Non-inline elements of `sg` stay valid until the request's completion.
    pub(crate) unsafe fn post(&self, peer: Rank, wr: &SendWr<'_>) -> Result<()> {
        let qp = self.qp(peer)?;
        // SAFETY: the caller's contract.
        unsafe { self.dev.post_send(qp, std::slice::from_ref(wr)) }
            .map_err(|e| self.fail(format!("rank {}: posting to rank {peer}: {e}", self.rank)))
    }

    /// Send `total` bytes that `fill` writes, as one SEND to `peer`. `Ok(false)`: no send
    /// queue slot or buffer now.
    fn send_bytes(
        &self,
        peer: Rank,
        is_reply: bool,
        total: usize,
        fill: impl FnOnce(&mut [u8]),
    ) -> Result<bool> {
        // A request that finds no room leaves what arrived in its buffers (the peers then
        // find this rank's receive queue empty: backpressure); a reply, which a handler sends
        // and which must not wait on this rank's own polls, frees them.
        let arrived = if is_reply {
            Arrived::Copy
        } else {
            Arrived::Hold
        };
        if !self.take_sq(peer) {
            if is_reply {
                self.release_held()?;
            }
            self.progress(arrived)?;
            if !self.take_sq(peer) {
                return Ok(false);
            }
        }
        if total <= self.max_inline {
            let mut stack = [0u8; INLINE_STACK];
            fill(&mut stack[..total]);
            stack[3] = self.credits.take_owed(peer);
            let sg = [Sge {
                addr: stack.as_ptr() as u64,
                len: len32(total),
                lkey: 0,
            }];
            let wr = SendWr {
                wr_id: wr_id(K_SEND, peer, NO_BUF),
                op: SendOp::Send,
                sg: &sg,
                signaled: true,
                inline: true,
                fence: false,
            };
            // SAFETY: an inline payload is copied by the post.
            return unsafe { self.post(peer, &wr) }.map(|()| true);
        }
        let b = match self.take_buf() {
            Some(b) => b,
            None => {
                self.progress(arrived)?;
                match self.take_buf() {
                    Some(b) => b,
                    None => {
                        self.give_sq(peer);
                        return Ok(false);
                    }
                }
            }
        };
        // SAFETY: buffer `b` is this sender's until its completion; `total <= BUF`.
        let bytes = unsafe { std::slice::from_raw_parts_mut(self.send.ptr(b), total) };
        fill(bytes);
        bytes[3] = self.credits.take_owed(peer);
        let sg = [Sge {
            addr: self.send.ptr(b) as u64,
            len: len32(total),
            lkey: self.send.mr.lkey(),
        }];
        let wr = SendWr {
            wr_id: wr_id(K_SEND, peer, b),
            op: SendOp::Send,
            sg: &sg,
            signaled: true,
            inline: false,
            fence: false,
        };
        // SAFETY: the buffer stays the request's until its completion returns it.
        unsafe { self.post(peer, &wr) }.map(|()| true)
    }

    /// A Long of more than [`EAGER_MAX`] bytes: its payload RDMA-written into `peer`'s
    /// segment through send buffers, then the header.
    fn send_long_written(&self, peer: Rank, msg: &OutMsg<'_>) -> Result<bool> {
        let r = *self
            .remote
            .get()
            .and_then(|r| r.get(peer as usize))
            .ok_or_else(|| cerr("a Long before attach"))?;
        let len = msg.payload.len();
        if msg
            .long_offset
            .checked_add(len as u64)
            .is_none_or(|end| end > r.len)
        {
            return Err(cerr(format!(
                "a Long of {len} bytes at offset {} to rank {peer} lies beyond its segment \
                 ({} bytes)",
                msg.long_offset, r.len
            )));
        }
        // A try-send answers `Ok(false)` while the first chunk finds no room; once the data
        // is on its way, the rest waits only for this rank's own completions (writes into a
        // registered segment need nothing of the peer's).
        let first = match self.take_buf() {
            Some(b) if self.take_sq(peer) => b,
            Some(b) => {
                self.give_buf(b);
                self.progress(Arrived::Hold)?;
                return Ok(false);
            }
            None => {
                self.progress(Arrived::Hold)?;
                return Ok(false);
            }
        };
        for (k, chunk) in msg.payload.chunks(BUF).enumerate() {
            let b = if k == 0 {
                first
            } else {
                let b = self.wait_buf()?;
                if let Err(e) = self.wait_sq(peer) {
                    self.give_buf(b);
                    return Err(e);
                }
                b
            };
            // SAFETY: buffer `b` is ours until its completion; the chunk fits it.
            unsafe { amnet_core::mem::copy(chunk.as_ptr(), self.send.ptr(b), chunk.len()) };
            let sg = [Sge {
                addr: self.send.ptr(b) as u64,
                len: len32(chunk.len()),
                lkey: self.send.mr.lkey(),
            }];
            let wr = SendWr {
                wr_id: wr_id(K_SEND, peer, b),
                op: SendOp::RdmaWrite {
                    remote_addr: r.base + msg.long_offset + (k * BUF) as u64,
                    rkey: r.rkey,
                },
                sg: &sg,
                signaled: true,
                inline: false,
                fence: false,
            };
            // SAFETY: as in `send_bytes`.
            unsafe { self.post(peer, &wr)? };
        }
        let total = HDR + 4 * msg.args.len();
        let mut bo = Backoff::new(self.spin, !self.oversubscribed);
        loop {
            let sent = self.send_bytes(peer, msg.is_reply, total, |b| {
                wire::put_header(b, msg, self.rank, true, len);
            })?;
            if sent {
                return Ok(true);
            }
            self.waiting(&mut bo)?;
        }
    }

    /// A message to this rank: copied, to be delivered by a poll.
    fn send_self(&self, msg: &OutMsg<'_>) -> Result<bool> {
        let plen = if msg.category == Category::Short {
            0
        } else {
            msg.payload.len()
        };
        let mut v = lock(&self.spare_vecs).pop().unwrap_or_default();
        v.clear();
        v.resize(HDR + 4 * msg.args.len(), 0);
        wire::put_header(&mut v, msg, self.rank, false, plen);
        v.extend_from_slice(&msg.payload[..plen]);
        let mut r = lock(&self.ready);
        r.push_back(Ready {
            src: self.rank,
            body: Body::Copied(v),
        });
        self.ready_len.store(r.len(), Ordering::Release);
        Ok(true)
    }

    /// Run the handler of the message `body` from `src`. Returns (delivered, go on).
    fn deliver(
        &self,
        src: Rank,
        body: &[u8],
        sink: &mut dyn FnMut(&InMsg<'_>) -> bool,
    ) -> Result<(bool, bool)> {
        let h = wire::parse_header(body).map_err(|e| {
            self.fail(format!(
                "rank {}: a message from rank {src}: {e}",
                self.rank
            ))
        })?;
        if h.src != src {
            return Err(self.fail(format!(
                "rank {}: a message on the queue pair from rank {src} names rank {} as its \
                 sender",
                self.rank, h.src
            )));
        }
        if !h.is_reply && src != self.rank {
            self.credits.owe(src);
        }
        let args_end = HDR + 4 * h.nargs;
        let Some(arg_bytes) = body.get(HDR..args_end) else {
            return Err(self.fail(format!(
                "rank {}: rank {src} sent a truncated message",
                self.rank
            )));
        };
        let mut args = [0u32; MAX_ARGS];
        for (a, w) in args.iter_mut().zip(arg_bytes.chunks_exact(4)) {
            *a = u32::from_le_bytes([w[0], w[1], w[2], w[3]]);
        }
        let payload: &[u8] = match h.category {
            Category::Short => &[],
            Category::Medium => body.get(args_end..args_end + h.len).ok_or_else(|| {
                self.fail(format!(
                    "rank {}: rank {src} sent a Medium shorter than its payload",
                    self.rank
                ))
            })?,
            Category::Long => {
                let seg = &self
                    .seg
                    .get()
                    .ok_or_else(|| self.fail(format!("rank {}: a Long before attach", self.rank)))?
                    .mem;
                if !seg.fits(h.long_offset, h.len) {
                    return Err(self.fail(format!(
                        "rank {}: rank {src} sent a Long of {} bytes at offset {} beyond the \
                         segment ({} bytes)",
                        self.rank,
                        h.len,
                        h.long_offset,
                        seg.len()
                    )));
                }
                let off = usize::try_from(h.long_offset).unwrap_or(usize::MAX);
                if !h.written {
                    let data = body.get(args_end..args_end + h.len).ok_or_else(|| {
                        self.fail(format!(
                            "rank {}: rank {src} sent a Long shorter than its payload",
                            self.rank
                        ))
                    })?;
                    // SAFETY: the range lies inside the segment (checked); the core's
                    // contract gives it to this Long, and the message is elsewhere.
                    unsafe { amnet_core::mem::copy(data.as_ptr(), seg.ptr().add(off), h.len) };
                }
                // SAFETY: as above; the bytes are in place (copied now, or written before
                // this message by RC order).
                unsafe { std::slice::from_raw_parts(seg.ptr().add(off), h.len) }
            }
        };
        let m = InMsg {
            src,
            handler: h.handler,
            category: h.category,
            is_reply: h.is_reply,
            args: &args[..h.nargs],
            payload,
            long_offset: if h.category == Category::Long {
                h.long_offset
            } else {
                0
            },
        };
        Ok((true, sink(&m)))
    }

    /// Deliver copied messages (replies only, when asked). Returns (delivered, go on).
    fn deliver_ready(
        &self,
        replies_only: bool,
        sink: &mut dyn FnMut(&InMsg<'_>) -> bool,
    ) -> Result<(usize, bool)> {
        let mut delivered = 0;
        while self.ready_len.load(Ordering::Acquire) > 0 {
            let next = {
                let mut r = lock(&self.ready);
                let i = if replies_only {
                    r.iter().position(|m| wire::is_reply(self.bytes(&m.body)))
                } else if r.is_empty() {
                    None
                } else {
                    Some(0)
                };
                let next = i.and_then(|i| r.remove(i));
                self.ready_len.store(r.len(), Ordering::Release);
                next
            };
            let Some(m) = next else { break };
            let res = self.deliver(m.src, self.bytes(&m.body), sink);
            match m.body {
                Body::Copied(v) => lock(&self.spare_vecs).push(v),
                Body::Held { buf, .. } => {
                    self.held.fetch_sub(1, Ordering::AcqRel);
                    self.repost(buf)?;
                }
            }
            let (d, more) = res?;
            delivered += usize::from(d);
            if !more {
                return Ok((delivered, false));
            }
        }
        Ok((delivered, true))
    }

    /// `Conduit::poll`: copied messages first, then a batch of completions, whose messages
    /// are delivered from their receive buffers while nothing older waits.
    fn poll(&self, replies_only: bool, sink: &mut dyn FnMut(&InMsg<'_>) -> bool) -> Result<usize> {
        self.check()?;
        let (mut delivered, more) = self.deliver_ready(replies_only, sink)?;
        if !more {
            return Ok(delivered);
        }
        let mut wcs = [Wc::EMPTY; BATCH];
        let n = {
            let Ok(_g) = self.cq_lock.try_lock() else {
                return Ok(delivered);
            };
            self.dev.poll_cq(&self.cq, &mut wcs).map_err(|e| {
                self.fail(format!(
                    "rank {}: reading the completion queue: {e}",
                    self.rank
                ))
            })?
        };
        let mut more = true;
        let mut res = Ok(());
        let arrival = |wc: &Wc| wc.status == WcStatus::Success && wr_kind(wc.wr_id) == K_RECV;
        // Sends, RMA chunks and errors first: a handler run below may need the send buffers
        // and send queue slots their completions return.
        for wc in wcs[..n].iter().filter(|w| !arrival(w)) {
            if let Err(e) = self.on_completion(wc, Arrived::Copy) {
                if res.is_ok() {
                    res = Err(e);
                }
            }
        }
        for wc in wcs[..n].iter().filter(|w| arrival(w)) {
            let direct = more
                && res.is_ok()
                && self.ready_len.load(Ordering::Acquire) == 0
                && (!replies_only || wire::is_reply(self.recv_body(wc)));
            if !direct {
                if let Err(e) = self.on_completion(wc, Arrived::Copy) {
                    if res.is_ok() {
                        res = Err(e);
                    }
                }
                continue;
            }
            let r = self.source(wc).and_then(|src| {
                if self.control(src, self.recv_body(wc)) {
                    Ok((false, true))
                } else {
                    self.deliver(src, self.recv_body(wc), sink)
                }
            });
            let again = self.repost(wr_index(wc.wr_id));
            match r.and_then(|x| again.map(|()| x)) {
                Ok((d, m)) => {
                    delivered += usize::from(d);
                    more = m;
                }
                Err(e) => {
                    res = Err(e);
                }
            }
        }
        res?;
        if more && n > 0 {
            // Messages that a handler's own progress copied meanwhile.
            let (d, _) = self.deliver_ready(replies_only, sink)?;
            delivered += d;
        }
        Ok(delivered)
    }

    /// End this process with `code` (`Conduit::terminate`).
    pub(crate) fn terminate(&self, code: i32) -> ! {
        // Best effort: drive the queue briefly so that sends just made leave.
        let t0 = std::time::Instant::now();
        while t0.elapsed() < Duration::from_millis(20) {
            if self.progress(Arrived::Copy).unwrap_or(0) == 0 {
                break;
            }
        }
        use std::io::Write;
        let _ = std::io::stdout().flush();
        std::process::exit(code)
    }

    /// Take `seg` as the segment, register it for RDMA, and learn every rank's.
    fn attach_with(&self, seg: HeapSegment) -> Result<LocalSegment> {
        let mr = if seg.is_empty() {
            None
        } else {
            let access = Access::LOCAL_WRITE
                | Access::REMOTE_WRITE
                | Access::REMOTE_READ
                | Access::REMOTE_ATOMIC;
            // SAFETY: the segment lives as long as the conduit (kept in `seg` below, whose
            // field order drops the registration first).
            Some(unsafe { self.dev.reg_mr(seg.ptr(), seg.len(), access)? })
        };
        let (base, rkey, len) = mr.as_ref().map_or((0, 0, 0), |m| {
            (m.addr(), u64::from(m.rkey()), m.len() as u64)
        });
        let blob: Vec<u8> = [base, rkey, len]
            .iter()
            .flat_map(|w| w.to_le_bytes())
            .collect();
        let local = LocalSegment {
            base: seg.ptr(),
            len: seg.len(),
        };
        self.seg
            .set(Seg { mr, mem: seg })
            .map_err(|_| Error::AlreadyAttached)?;
        let all = self.job.exchange(&blob, &|c| self.terminate(c))?;
        let remote = all
            .iter()
            .enumerate()
            .map(|(r, b)| {
                if b.len() != 24 {
                    return Err(cerr(format!(
                        "rank {r} sent a segment description of {} bytes",
                        b.len()
                    )));
                }
                let w = |i: usize| {
                    let mut x = [0u8; 8];
                    x.copy_from_slice(&b[8 * i..8 * i + 8]);
                    u64::from_le_bytes(x)
                };
                Ok(RemoteSeg {
                    base: w(0),
                    rkey: u32::try_from(w(1)).unwrap_or(0),
                    len: w(2),
                })
            })
            .collect::<Result<Vec<_>>>()?;
        let _ = self.remote.set(remote);
        Ok(local)
    }
}

/// The ibv conduit over the verbs device `V`.
pub struct IbvConduit<V: Verbs> {
    eng: Arc<Engine<V>>,
    rma: OnceLock<Arc<IbvRma<V>>>,
}

impl<V: Verbs> std::fmt::Debug for IbvConduit<V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.eng.fmt(f)
    }
}

/// `AMNET_IBV_EMU_FAULT` (`RANK:N:STATUS`), checked.
fn emu_fault(src: &Source) -> Result<Option<(Rank, u64, WcStatus)>> {
    let Some(v) = src.text(&vars::IBV_EMU_FAULT).filter(|v| !v.is_empty()) else {
        return Ok(None);
    };
    let bad = || {
        Error::Config(format!(
            "AMNET_IBV_EMU_FAULT={v:?}: expected RANK:N:STATUS, STATUS one of loc_len, \
             loc_qp_op, loc_prot, flush, rem_inv_req, rem_access, rem_op, retry, rnr_retry"
        ))
    };
    let mut it = v.split(':');
    let (Some(r), Some(n), Some(st), None) = (it.next(), it.next(), it.next(), it.next()) else {
        return Err(bad());
    };
    let r = r.parse::<Rank>().map_err(|_| bad())?;
    let n = n.parse::<u64>().map_err(|_| bad())?;
    let st = WcStatus::from_name(st).ok_or_else(bad)?;
    Ok(Some((r, n, st)))
}

/// The prefix of the emulated device's shared-memory objects in a job whose bootstrap
/// service listens on `port` (the launcher removes what is left under it).
pub fn emu_prefix(port: u16) -> String {
    format!("amnet-ibv-{port}-")
}

/// Join the job `src` describes (`AMNET_RANK`, `AMNET_SIZE` and the launcher's bootstrap
/// service `AMNET_UDP_BOOT`, as `amrun --conduit ibv` sets them; none of them: a job of one
/// rank) on the device `AMNET_IBV_DEVICE` selects: `emu`, the emulated device, or `hca`
/// (the default), the first active port of `AMNET_IBV_PORTS` through libibverbs, which needs
/// the cargo feature `ibv`.
pub fn open(src: &Source) -> Result<Box<dyn Conduit>> {
    let device = src.text(&vars::IBV_DEVICE).unwrap_or_default();
    let emu = match device.as_str() {
        "emu" => true,
        "" | "hca" => false,
        other => {
            return Err(amnet_core::config::invalid(&vars::IBV_DEVICE, other));
        }
    };
    let j = amnet_udp::boot::join_job(src, "ibv")?;
    let (rank, size, job, port) = (
        j.rank,
        j.size,
        JobLink::new(j.boot),
        j.server.map(|s| s.port()),
    );
    if emu {
        let prefix = match port {
            Some(port) => emu_prefix(port),
            None => format!("amnet-ibv-solo-{}-", std::process::id()),
        };
        let dev = crate::emu::EmuDevice::open(&prefix)?;
        if let Some((r, skip, status)) = emu_fault(src)? {
            if r == rank {
                dev.fail_after(skip, status);
            }
        }
        let c = IbvConduit::with_device(dev, rank, size, job, src)?;
        // Every peer mapped the device's memory while connecting: its name can go.
        c.eng.dev.unlink();
        return Ok(Box::new(c));
    }
    #[cfg(feature = "ibv")]
    {
        let ports = src.text(&vars::IBV_PORTS);
        let dev = crate::rdma::RdmaDevice::open(ports.as_deref().filter(|p| !p.is_empty()))?;
        Ok(Box::new(IbvConduit::with_device(
            dev, rank, size, job, src,
        )?))
    }
    #[cfg(not(feature = "ibv"))]
    {
        let _ = (rank, size, job, port);
        Err(Error::Config(
            "the ibv conduit of this build has no libibverbs support (cargo feature \
             amnet/ibv): AMNET_IBV_DEVICE=emu selects the emulated test device"
                .into(),
        ))
    }
}

impl<V: Verbs> IbvConduit<V> {
    /// The conduit of rank `rank` of `size` on `dev`, connected through `job`.
    fn with_device(dev: V, rank: Rank, size: u32, job: JobLink, src: &Source) -> Result<Self> {
        Ok(IbvConduit {
            eng: Arc::new(Engine::new(dev, rank, size, job, src)?),
            rma: OnceLock::new(),
        })
    }

    fn attach(&self, seg: HeapSegment) -> Result<LocalSegment> {
        let l = self.eng.attach_with(seg)?;
        let _ = self.rma.set(Arc::new(IbvRma::new(self.eng.clone())));
        Ok(l)
    }
}

impl<V: Verbs> Conduit for IbvConduit<V> {
    fn name(&self) -> &'static str {
        "ibv"
    }
    fn rank(&self) -> Rank {
        self.eng.rank
    }
    fn size(&self) -> u32 {
        self.eng.size
    }
    fn max_medium(&self) -> usize {
        MAX_MEDIUM
    }
    fn oversubscribed(&self) -> bool {
        self.eng.oversubscribed
    }

    fn exchange(&self, blob: &[u8]) -> Result<Vec<Vec<u8>>> {
        self.eng.job.exchange(blob, &|c| self.terminate(c))
    }

    fn attach_segment(&self, len: usize, _lens: &[usize]) -> Result<LocalSegment> {
        self.attach(HeapSegment::new("ibv", len)?)
    }

    unsafe fn attach_segment_in(&self, seg: LocalSegment, _lens: &[usize]) -> Result<()> {
        // SAFETY: forwarded contract: the memory outlives the conduit.
        self.attach(unsafe { HeapSegment::borrowed(seg) })
            .map(|_| ())
    }

    fn native_rma(&self) -> Option<Arc<dyn NativeRma>> {
        let r: Arc<dyn NativeRma> = self.rma.get()?.clone();
        Some(r)
    }

    fn native_atomics(&self) -> Option<Arc<dyn amnet_core::NativeAtomics>> {
        if !self.eng.dev.caps().atomics {
            return None;
        }
        let r: Arc<dyn amnet_core::NativeAtomics> = self.rma.get()?.clone();
        Some(r)
    }

    fn try_send(&self, dest: Rank, msg: &OutMsg<'_>) -> Result<bool> {
        let e = &self.eng;
        e.check()?;
        if dest >= e.size {
            return Err(cerr(format!("no rank {dest} in a job of {}", e.size)));
        }
        if dest == e.rank {
            return e.send_self(msg);
        }
        let plen = if msg.category == Category::Short {
            0
        } else {
            msg.payload.len()
        };
        if plen > u32::MAX as usize {
            return Err(cerr(format!(
                "a {} of {plen} bytes to rank {dest}: at most {} bytes per message",
                msg.category.name(),
                u32::MAX
            )));
        }
        // A request needs a credit towards `dest`; a reply never does (it answers a request
        // that held one, and its buffer there is kept for it).
        if !msg.is_reply && !e.credits.take(dest) {
            e.progress(Arrived::Hold)?;
            if !e.credits.take(dest) {
                return Ok(false);
            }
        }
        let sent = if msg.category == Category::Long && plen > EAGER_MAX {
            e.send_long_written(dest, msg)
        } else {
            let total = HDR + 4 * msg.args.len() + plen;
            e.send_bytes(dest, msg.is_reply, total, |b: &mut [u8]| {
                let n = wire::put_header(b, msg, e.rank, false, plen);
                b[n..n + plen].copy_from_slice(&msg.payload[..plen]);
            })
        };
        if !msg.is_reply && !matches!(sent, Ok(true)) {
            e.credits.give_back(dest, 1);
        }
        sent
    }

    fn poll(&self, replies_only: bool, sink: &mut dyn FnMut(&InMsg<'_>) -> bool) -> Result<usize> {
        let n = self.eng.poll(replies_only, sink)?;
        self.eng.return_credits()?;
        Ok(n)
    }

    fn exit_word(&self) -> Option<&std::sync::atomic::AtomicU64> {
        Some(self.eng.job.exit_word())
    }

    fn exit_requested(&self) -> Option<i32> {
        self.eng.job.exit_requested()
    }

    fn request_exit(&self, code: i32) -> i32 {
        self.eng.job.request_exit(code)
    }

    fn terminate(&self, code: i32) -> ! {
        self.eng.terminate(code)
    }

    fn is_process_mode(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn work_request_ids_carry_kind_peer_and_index() {
        let w = wr_id(K_RMA, 0x12_3456, 0xdead_beef);
        assert_eq!(
            (wr_kind(w), wr_peer(w), wr_index(w)),
            (K_RMA, 0x12_3456, 0xdead_beef)
        );
        let w = wr_id(K_SEND, 3, NO_BUF);
        assert_eq!((wr_kind(w), wr_peer(w), wr_index(w)), (K_SEND, 3, NO_BUF));
    }

    #[test]
    fn each_rank_finds_its_address_in_a_peers_blob() {
        let mut blob = Vec::new();
        for a in [&b"zero"[..], b"", b"two!!"] {
            blob.extend_from_slice(&u16::try_from(a.len()).unwrap().to_le_bytes());
            blob.extend_from_slice(a);
        }
        assert_eq!(address_for(&blob, 0), Some(&b"zero"[..]));
        assert_eq!(address_for(&blob, 1), Some(&b""[..]));
        assert_eq!(address_for(&blob, 2), Some(&b"two!!"[..]));
        assert_eq!(address_for(&blob, 3), None);
        assert_eq!(address_for(&blob[..5], 1), None);
    }
}
