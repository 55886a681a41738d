//! The send side: per-peer credits ([`Peer`]), the outstanding sends and their buffers
//! ([`Tx`]), the send path of an active message (`Engine::send`, `Engine::send_small`),
//! control messages, and the return of credits for consumed messages (`Engine::consumed`).

use std::cell::Cell;
use std::os::raw::c_int;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::Arc;

use amnet_core::{Category, NativeRma, OutMsg, Result};

use super::{
    lock, long_tag, Engine, LARGE_BYTES, LONG_CHUNK, REP, REQ, SMALL_BYTES, TAG_CREDIT, TAG_MSG,
};
use crate::raw::{self, Comm, Completions, Request};
use crate::wire::{self, Data};

/// `try_send` reaps completed sends once this many are outstanding (and then once twice as
/// many as remained are), so that many slow sends do not make every send scan them all.
pub(super) const REAP_AT: usize = 64;
/// Free send buffers kept per size class.
const KEEP_SMALL: usize = 256;
const KEEP_LARGE: usize = 16;

thread_local! {
    /// This thread's buffer for small messages (see `Engine::send_small`).
    static SEND_BUF: Cell<Vec<u8>> = const { Cell::new(Vec::new()) };
}

/// Flow-control state for one peer.
#[derive(Debug)]
pub(super) struct Peer {
    /// Messages of each class this rank may still send to the peer.
    credits: [AtomicU32; 2],
    /// Messages of each class from the peer consumed here and not yet returned.
    owed: [AtomicU32; 2],
    /// Next data tag index for a separate Long to the peer.
    long_seq: AtomicU32,
}

impl Peer {
    pub(super) fn new(credits: u32) -> Peer {
        Peer {
            credits: [AtomicU32::new(credits), AtomicU32::new(credits)],
            owed: [AtomicU32::new(0), AtomicU32::new(0)],
            long_seq: AtomicU32::new(0),
        }
    }

    #[inline]
    pub(super) fn take_credit(&self, class: usize) -> bool {
        self.credits[class]
            .fetch_update(Ordering::Acquire, Ordering::Relaxed, |c| c.checked_sub(1))
            .is_ok()
    }

    #[inline]
    pub(super) fn give(&self, class: usize, n: u16) {
        if n > 0 {
            self.credits[class].fetch_add(u32::from(n), Ordering::Release);
        }
    }

    /// Take what is owed for `class`, at most what a header field carries.
    #[inline]
    fn take_owed(&self, class: usize) -> u16 {
        if self.owed[class].load(Ordering::Relaxed) == 0 {
            return 0;
        }
        let v = self.owed[class].swap(0, Ordering::AcqRel);
        match u16::try_from(v) {
            Ok(n) => n,
            Err(_) => {
                self.owed[class].fetch_add(v - u32::from(u16::MAX), Ordering::AcqRel);
                u16::MAX
            }
        }
    }
}

/// Outstanding sends and their buffers.
pub(super) struct Tx {
    pub(super) reqs: Vec<Request>,
    pub(super) bufs: Vec<Vec<u8>>,
    pub(super) small: Vec<Vec<u8>>,
    pub(super) large: Vec<Vec<u8>>,
    pub(super) done: Completions,
    pub(super) scratch: Vec<usize>,
    /// Outstanding sends at which `try_send` reaps next.
    pub(super) reap_at: usize,
    /// `reqs.len()`, readable without the lock (so that an idle poll need not take it).
    pub(super) pending: Arc<AtomicUsize>,
}

// SAFETY: the request handles are process-wide MPI names usable from any thread (calls are
// serialized by `raw::locked` below MPI_THREAD_MULTIPLE); the buffers are owned heap memory.
// The whole structure is only reached through its mutex.
unsafe impl Send for Tx {}

impl Tx {
    fn buffer(&mut self, need: usize) -> Vec<u8> {
        let b = if need <= SMALL_BYTES {
            self.small.pop()
        } else if need <= LARGE_BYTES {
            self.large.pop()
        } else {
            None
        };
        match b {
            Some(mut b) => {
                b.clear();
                b
            }
            None => Vec::with_capacity(if need <= SMALL_BYTES {
                SMALL_BYTES
            } else {
                need.max(LARGE_BYTES)
            }),
        }
    }

    fn push(&mut self, comm: Comm, dest: u32, tag: c_int, buf: Vec<u8>) -> Result<()> {
        // SAFETY: the buffer's heap memory stays in `self.bufs`, unread and unmodified, until
        // `reap` sees the request complete (moving the Vec does not move its contents), or is
        // recycled below once the request is complete.
        let mut req = unsafe { raw::isend(buf.as_ptr(), buf.len(), dest, tag, comm)? };
        // A small send usually completes inside MPI_Isend (copied out eagerly): test it at
        // once, so that it needs no bookkeeping and its buffer is reused for the next message.
        if buf.len() <= SMALL_BYTES && raw::test_done(&mut req)? {
            self.keep(buf);
            return Ok(());
        }
        self.outstanding(req, buf)
    }

    /// Keep `buf` until `req`, the send from it, completes; retire completed sends once
    /// enough are kept.
    fn outstanding(&mut self, req: Request, buf: Vec<u8>) -> Result<()> {
        self.reqs.push(req);
        self.bufs.push(buf);
        self.pending.store(self.reqs.len(), Ordering::Relaxed);
        if self.reqs.len() >= self.reap_at {
            self.reap()?;
        }
        Ok(())
    }

    /// Keep a send buffer whose send completed, for reuse.
    #[inline]
    fn keep(&mut self, b: Vec<u8>) {
        let cap = b.capacity();
        if (SMALL_BYTES..LARGE_BYTES).contains(&cap) && self.small.len() < KEEP_SMALL {
            self.small.push(b);
        } else if (LARGE_BYTES..2 * LARGE_BYTES).contains(&cap) && self.large.len() < KEEP_LARGE {
            self.large.push(b);
        }
    }

    /// Retire completed sends and keep their buffers for reuse.
    pub(super) fn reap(&mut self) -> Result<()> {
        let n = raw::testsome(&mut self.reqs, &mut self.done)?;
        if n == 0 {
            self.reap_at = (2 * self.reqs.len()).max(REAP_AT);
            return Ok(());
        }
        let mut idx = std::mem::take(&mut self.scratch);
        idx.clear();
        idx.extend(self.done.iter().map(|(i, _)| i));
        // Highest index first, so swap_remove moves only entries already visited.
        idx.sort_unstable_by(|a, b| b.cmp(a));
        for &i in &idx {
            if i >= self.reqs.len() {
                continue;
            }
            self.reqs.swap_remove(i);
            let b = self.bufs.swap_remove(i);
            self.keep(b);
        }
        self.scratch = idx;
        self.pending.store(self.reqs.len(), Ordering::Relaxed);
        self.reap_at = (2 * self.reqs.len()).max(REAP_AT);
        Ok(())
    }
}

impl Engine {
    pub(super) fn send_control(
        &self,
        dest: u32,
        tag: c_int,
        body: [u8; wire::CTRL_LEN],
    ) -> Result<()> {
        self.push_control(&mut lock(&self.tx), dest, tag, body)
    }

    pub(super) fn push_control(
        &self,
        tx: &mut Tx,
        dest: u32,
        tag: c_int,
        body: [u8; wire::CTRL_LEN],
    ) -> Result<()> {
        let mut b = tx.buffer(body.len());
        b.extend_from_slice(&body);
        tx.push(self.comm_for(tag), dest, tag, b)
    }

    /// Send `msg` to `dest`, a credit of `class` taken.
    pub(super) fn send(
        &self,
        peer: &Peer,
        dest: u32,
        class: usize,
        msg: &OutMsg<'_>,
    ) -> Result<()> {
        let len = msg.payload.len();
        let data = match msg.category {
            Category::Long => match self.rma.get().filter(|_| len >= self.settings.long_put) {
                Some(w) => {
                    // The payload goes straight into the target segment, complete there
                    // (MPI_Win_flush) before the header leaves: the target's MPI_Win_sync
                    // after receiving the header orders its handler's reads after it.
                    w.put(dest, msg.long_offset, msg.payload)?;
                    Data::Placed
                }
                None if len > wire::MAX_INLINE => {
                    Data::Separate(peer.long_seq.fetch_add(1, Ordering::Relaxed) % wire::LONG_TAGS)
                }
                None => Data::Inline,
            },
            _ => Data::Inline,
        };
        let inline = match (msg.category, data) {
            (Category::Short, _) | (_, Data::Separate(_) | Data::Placed) => 0,
            _ => len,
        };
        let need = wire::encoded_len(msg.args.len(), inline);
        let tag = TAG_MSG[class][usize::from(need > SMALL_BYTES)];
        // Both classes' credits travel on every message: a rank waiting to reply, which runs
        // no request handler, still receives the requests and takes their credits.
        let credits = [peer.take_owed(REQ), peer.take_owed(REP)];
        // After any put of this rank (this Long's included), or a message from a rank that had
        // put, the receiver must order its handler's reads after what was put.
        let sync = self.rma.get().is_some_and(|w| w.touched());
        if need <= SMALL_BYTES && !matches!(data, Data::Separate(_)) {
            return self.send_small(dest, tag, msg, credits, data, sync);
        }
        let mut tx = lock(&self.tx);
        let mut buf = tx.buffer(need);
        wire::encode(&mut buf, msg, credits, data, sync);
        if let Data::Separate(t) = data {
            for chunk in msg.payload.chunks(LONG_CHUNK) {
                tx.push(self.comm, dest, long_tag(t), chunk.to_vec())?;
            }
        }
        tx.push(self.comm_for(tag), dest, tag, buf)
    }

    /// Send a message of at most [`SMALL_BYTES`] from this thread's send buffer: encode,
    /// `MPI_Isend`, `MPI_Test`. Small sends usually complete inside `MPI_Isend`, and then
    /// neither the send lock nor any bookkeeping is needed; one that did not complete hands its
    /// buffer to the outstanding sends.
    fn send_small(
        &self,
        dest: u32,
        tag: c_int,
        msg: &OutMsg<'_>,
        credits: wire::Credits,
        data: Data,
        sync: bool,
    ) -> Result<()> {
        let comm = self.comm_for(tag);
        SEND_BUF.with(|cell| {
            let mut buf = cell.take();
            buf.clear();
            buf.reserve(SMALL_BYTES);
            wire::encode(&mut buf, msg, credits, data, sync);
            // SAFETY: the buffer's heap memory is neither read nor modified by Rust code until
            // the request completes: it goes back to the thread's cell only once MPI_Test saw
            // the send complete, and otherwise to the outstanding sends, which keep it until
            // `reap` sees it complete (moving the Vec does not move its contents).
            let mut req = match unsafe { raw::isend(buf.as_ptr(), buf.len(), dest, tag, comm) } {
                Ok(r) => r,
                Err(e) => {
                    cell.replace(buf);
                    return Err(e);
                }
            };
            let done = raw::test_done(&mut req);
            if let Ok(true) = done {
                cell.replace(buf);
                return Ok(());
            }
            let mut tx = lock(&self.tx);
            tx.outstanding(req, buf)?;
            done.map(|_| ())
        })
    }

    /// A message of `class` from `src` has been consumed: owe a credit, and return what is
    /// owed in a credit message once half the window is.
    pub(super) fn consumed(&self, src: u32, class: usize) {
        let Some(p) = self.peers.get(src as usize) else {
            return;
        };
        let owed = p.owed[class].fetch_add(1, Ordering::AcqRel) + 1;
        if owed >= self.threshold {
            let c = [p.take_owed(REQ), p.take_owed(REP)];
            if c != [0, 0] {
                if let Err(e) = self.send_control(src, TAG_CREDIT, wire::encode_credit(c)) {
                    amnet_core::diag!("amnet mpi rank {}: cannot return credits: {e}", self.rank);
                }
            }
        }
    }
}
