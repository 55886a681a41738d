//! One-sided put/get with explicit and implicit handles, on one of three paths per target rank,
//! in this order of preference: a direct copy into the peer's segment mapped here
//! (`Conduit::peer_segment`), the conduit's native one-sided operations
//! (`Conduit::native_rma`), or the AM-based reference path any conduit gets for free.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};

use crate::conduit::{Category, Conduit, NativeRma, OutMsg, RmaTicket};
use crate::endpoint::{join64, not_in_handler, seg_off, split64, Attached, Endpoint};
use crate::handler::{HandlerTable, Token};
use crate::stats::Ctr;
use crate::{Error, Rank, Result};

use crate::handlers::PUT_ACK as LIB_ACK;
use crate::handlers::{GET as LIB_GET, GET_REPLY as LIB_GET_REPLY, PUT as LIB_PUT};

/// How put/get reach a rank's segment (see [`Endpoint::rma_path`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RmaPath {
    /// Copies into or out of the rank's segment mapped in this process
    /// (`Conduit::peer_segment`; smp). Complete on return.
    Direct,
    /// The conduit's native one-sided operations (`Conduit::native_rma`; mpi).
    Native,
    /// The AM-based reference path (library handlers 1–4 at the target).
    Am,
}

/// Completion counter of one operation or of an implicit-handle aggregate.
#[derive(Debug)]
pub(crate) struct OpState {
    /// Outstanding pieces: AM chunks awaiting their reply, plus the native tickets below.
    pub(crate) remaining: AtomicUsize,
    pub(crate) ep_id: u64,
    /// The value a fetching atomic operation read at its target (its bits), written before
    /// `remaining` drops to zero.
    pub(crate) result: AtomicU64,
    /// Native operations not yet seen complete (each also counted in `remaining`).
    native: Mutex<Vec<RmaTicket>>,
    /// Why the operation failed at its target, if it did.
    failure: Mutex<Option<String>>,
    /// The task awaiting the operation ([`SyncFuture`]), woken when `remaining` reaches 0.
    waker: Mutex<Option<Waker>>,
    /// A payload the conduit may still read (a request sent with local completion,
    /// `request_long_nb`), counted in `remaining` while it is; `has_held` tells without the
    /// lock.
    held: Mutex<Option<Held>>,
    has_held: AtomicBool,
}

/// A client payload that a conduit sends from where it lies ([`Conduit::try_send_held`]).
#[derive(Debug)]
pub(crate) struct Held {
    /// The endpoint whose conduit holds it: a handle dropped before completion ends the hold
    /// through it (nothing to end once the endpoint, and so the conduit, is gone).
    ep: std::sync::Weak<crate::endpoint::Inner>,
    dest: Rank,
    ptr: *const u8,
    len: usize,
}

// SAFETY: `ptr` addresses the client's payload, which the client keeps valid and unchanged
// until the hold ends (the contract of `request_long_nb`); it is only read, by the conduit.
unsafe impl Send for Held {}
// SAFETY: as above.
unsafe impl Sync for Held {}

impl Held {
    fn bytes(&self) -> &[u8] {
        // SAFETY: valid and unchanged while the hold lasts (see the `Send` impl).
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

impl Drop for OpState {
    fn drop(&mut self) {
        // A handle dropped before its local completion: the conduit copies what it still
        // needs of the payload before the client may reuse it.
        let held = self
            .held
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(h) = held {
            if let Some(inner) = h.ep.upgrade() {
                inner.conduit.release_held(h.dest, h.bytes());
            }
        }
    }
}

impl OpState {
    pub(crate) fn new(ep_id: u64) -> Self {
        OpState {
            remaining: AtomicUsize::new(0),
            ep_id,
            result: AtomicU64::new(0),
            native: Mutex::new(Vec::new()),
            failure: Mutex::new(None),
            waker: Mutex::new(None),
            held: Mutex::new(None),
            has_held: AtomicBool::new(false),
        }
    }
    /// Tracks a payload the conduit holds until it no longer reads it.
    pub(crate) fn add_held(
        &self,
        ep: std::sync::Weak<crate::endpoint::Inner>,
        dest: Rank,
        payload: &[u8],
    ) {
        let mut h = self.held.lock().unwrap_or_else(|e| e.into_inner());
        self.remaining.fetch_add(1, Ordering::Relaxed);
        *h = Some(Held {
            ep,
            dest,
            ptr: payload.as_ptr(),
            len: payload.len(),
        });
        self.has_held.store(true, Ordering::Release);
    }
    /// Ends the hold once the conduit no longer reads the payload (its datagrams were all
    /// acknowledged): the operation's local completion.
    fn settle_held(&self, conduit: &dyn crate::Conduit) {
        if !self.has_held.load(Ordering::Acquire) {
            return;
        }
        let mut h = self.held.lock().unwrap_or_else(|e| e.into_inner());
        let free = h
            .as_ref()
            .is_some_and(|x| !conduit.held_pending(x.dest, x.bytes()));
        if free {
            if let Some(x) = h.take() {
                conduit.release_held(x.dest, x.bytes());
            }
            self.has_held.store(false, Ordering::Release);
            drop(h);
            self.complete_one();
        }
    }
    pub(crate) fn done(&self) -> bool {
        self.remaining.load(Ordering::Acquire) == 0
    }
    /// One outstanding AM-path piece completed (its reply arrived): wakes the awaiting task
    /// when it was the last.
    pub(crate) fn complete_one(&self) {
        if self.remaining.fetch_sub(1, Ordering::Release) == 1 {
            self.wake();
        }
    }
    /// Wakes the task awaiting the operation, if any.
    fn wake(&self) {
        let w = self.waker.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(w) = w {
            w.wake();
        }
    }
    /// Registers the task to wake on completion (replacing an earlier one).
    pub(crate) fn set_waker(&self, w: &Waker) {
        let mut slot = self.waker.lock().unwrap_or_else(|e| e.into_inner());
        match slot.as_ref() {
            Some(old) if old.will_wake(w) => {}
            _ => *slot = Some(w.clone()),
        }
    }
    /// Count one more outstanding native operation.
    pub(crate) fn add_native(&self, t: RmaTicket) {
        let mut v = self.native.lock().unwrap_or_else(|e| e.into_inner());
        self.remaining.fetch_add(1, Ordering::Relaxed);
        v.push(t);
    }
    /// Retire the native operations that are complete (`block`: wait for every one). Returns
    /// true when there were native operations outstanding.
    pub(crate) fn settle_native(&self, rma: &dyn NativeRma, block: bool) -> Result<bool> {
        let mut v = self.native.lock().unwrap_or_else(|e| e.into_inner());
        if v.is_empty() {
            return Ok(false);
        }
        let before = v.len();
        let mut err = None;
        v.retain(|&t| {
            if err.is_some() {
                return true;
            }
            let r = if block {
                rma.wait(t).map(|()| true)
            } else {
                rma.test(t)
            };
            match r {
                Ok(complete) => !complete,
                Err(e) => {
                    err = Some(e);
                    true
                }
            }
        });
        let retired = before - v.len();
        drop(v);
        if retired > 0 && self.remaining.fetch_sub(retired, Ordering::Release) == retired {
            self.wake();
        }
        err.map_or(Ok(true), Err)
    }
    /// The operation failed at its target (a get whose reply did not carry the bytes asked
    /// for, an atomic the target refused); its sync reports it.
    pub(crate) fn fail(&self, why: String) {
        let mut f = self.failure.lock().unwrap_or_else(|e| e.into_inner());
        f.get_or_insert(why);
    }
    /// Why the operation failed, if it did (reported once).
    fn take_failure(&self) -> Option<String> {
        self.failure
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
    }
}

/// What an outstanding AM-path message of a put, get or atomic is waiting for.
#[derive(Debug)]
pub(crate) enum Waiting {
    /// The acknowledgement of a put chunk.
    PutAck,
    /// The bytes of a get chunk, `len` of them, to be written at `dst` (a local address, never
    /// sent: the reply names the chunk by its id).
    GetReply { dst: usize, len: usize },
    /// The reply of an atomic operation (its status and the value read, kept in the
    /// operation's state).
    Atomic,
    /// The acknowledgement of a packed vector/indexed/strided put message (with a status).
    VisAck,
}

impl Waiting {
    /// The kind of reply that completes it.
    pub(crate) fn kind(&self) -> ReplyKind {
        match self {
            Waiting::PutAck => ReplyKind::PutAck,
            Waiting::GetReply { .. } => ReplyKind::GetReply,
            Waiting::Atomic => ReplyKind::Atomic,
            Waiting::VisAck => ReplyKind::VisAck,
        }
    }
}

/// The kinds of reply an AM-path message waits for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ReplyKind {
    PutAck,
    GetReply,
    Atomic,
    VisAck,
}

#[derive(Debug)]
pub(crate) struct Chunk {
    pub(crate) op: Arc<OpState>,
    /// The rank the request went to: only its reply completes the chunk.
    rank: Rank,
    waiting: Waiting,
}

#[derive(Debug)]
struct Slot {
    /// Bumped each time the slot is freed, so that an id names one use of the slot only.
    gen: u32,
    chunk: Option<Chunk>,
}

/// The AM-path messages of puts and gets awaiting their replies, by id. A request carries the
/// id (slot index, generation) in two arguments and its reply returns them; a reply whose id
/// names no live chunk, or a chunk that was sent to another rank or expects another kind of
/// reply, is dropped and counted (`Stats::stray_rma_replies`), so a duplicated, corrupted or
/// forged reply cannot write memory or complete the wrong operation.
#[derive(Debug, Default)]
pub(crate) struct Pending {
    inner: Mutex<PendingSlots>,
}

#[derive(Debug, Default)]
struct PendingSlots {
    slots: Vec<Slot>,
    free: Vec<u32>,
}

impl Pending {
    /// Count one more outstanding message of `op` to `rank` and return the id its reply
    /// names.
    pub(crate) fn arm(&self, op: &Arc<OpState>, rank: Rank, waiting: Waiting) -> [u32; 2] {
        op.remaining.fetch_add(1, Ordering::Relaxed);
        let chunk = Chunk {
            op: op.clone(),
            rank,
            waiting,
        };
        let mut p = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let idx = match p.free.pop() {
            Some(i) => i,
            None => {
                p.slots.push(Slot {
                    gen: 1,
                    chunk: None,
                });
                u32::try_from(p.slots.len() - 1).unwrap_or(u32::MAX)
            }
        };
        let slot = &mut p.slots[idx as usize];
        slot.chunk = Some(chunk);
        [idx, slot.gen]
    }

    /// The chunk `id` names, taken out of the table, when it is live, was sent to `from` and
    /// waits for a reply of this kind; None otherwise (the table is unchanged).
    pub(crate) fn take(&self, id: [u32; 2], from: Rank, kind: ReplyKind) -> Option<Chunk> {
        self.take_with(id, from, kind, |_| ()).map(|(c, ())| c)
    }

    /// [`take`](Self::take), running `f` on the chunk while the table is still locked, so
    /// that a [`cancel`](Self::cancel) either happens before (and `f` does not run) or waits
    /// until `f` is done (a get reply's copy into memory the canceller is about to free).
    pub(crate) fn take_with<R>(
        &self,
        id: [u32; 2],
        from: Rank,
        kind: ReplyKind,
        f: impl FnOnce(&Chunk) -> R,
    ) -> Option<(Chunk, R)> {
        let mut p = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let slot = p.slots.get_mut(id[0] as usize)?;
        let matches = slot.gen == id[1]
            && slot
                .chunk
                .as_ref()
                .is_some_and(|c| c.rank == from && c.waiting.kind() == kind);
        if !matches {
            return None;
        }
        let r = f(slot.chunk.as_ref()?);
        let chunk = slot.chunk.take()?;
        slot.gen = slot.gen.wrapping_add(1).max(1);
        p.free.push(id[0]);
        Some((chunk, r))
    }

    /// Takes back the chunk `id` of `op` that was armed for a message the conduit did not
    /// accept (nothing will answer it), so that the operation does not wait for it.
    pub(crate) fn disarm(&self, id: [u32; 2], to: Rank, kind: ReplyKind) {
        if let Some(c) = self.take(id, to, kind) {
            c.op.complete_one();
        }
    }

    /// Removes every chunk of `op` still waiting (a blocking call that gives up on an error
    /// before its replies came): their late replies are then strays and write nothing into
    /// memory the call no longer owns. Returns how many there were.
    pub(crate) fn cancel(&self, op: &Arc<OpState>) -> usize {
        let mut p = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let mut freed = Vec::new();
        for (i, slot) in p.slots.iter_mut().enumerate() {
            if slot.chunk.as_ref().is_some_and(|c| Arc::ptr_eq(&c.op, op)) {
                slot.chunk = None;
                slot.gen = slot.gen.wrapping_add(1).max(1);
                freed.push(u32::try_from(i).unwrap_or(u32::MAX));
            }
        }
        let n = freed.len();
        p.free.extend(freed);
        n
    }

    /// Chunks outstanding (tests).
    #[cfg(test)]
    fn live(&self) -> usize {
        let p = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        p.slots.iter().filter(|s| s.chunk.is_some()).count()
    }
}

/// A reply that named no live chunk: counted and dropped.
pub(crate) fn stray(tok: &Token<'_>, what: &str) {
    let ep = tok.endpoint();
    ep.stats_block().add(Ctr::StrayRmaReplies, 1);
    crate::diag!(
        "amnet rank {}: dropped a {what} from rank {} that names no operation waiting for it",
        ep.rank(),
        tok.src()
    );
}

/// The library's put request carrying `piece` to `at` in the target's segment; `op` is the
/// id of the armed chunk ([`Pending::arm`]) its reply completes.
fn put_msg<'a>(op: &'a [u32; 2], piece: &'a [u8], at: u64) -> OutMsg<'a> {
    OutMsg {
        handler: LIB_PUT,
        category: Category::Long,
        is_reply: false,
        args: op,
        payload: piece,
        long_offset: at,
    }
}

/// An explicit handle for a non-blocking put or get. An invalid handle (the operation completed
/// before the call returned) syncs at once.
#[derive(Debug, Default)]
#[must_use = "a handle must be synced to know the operation completed"]
pub struct Handle {
    pub(crate) op: Option<Arc<OpState>>,
}

impl Handle {
    /// The invalid handle: nothing to wait for.
    pub const INVALID: Handle = Handle { op: None };

    /// True when the handle refers to nothing outstanding (completed or never started).
    pub fn is_invalid(&self) -> bool {
        self.op.is_none()
    }
}

/// A future that completes with the operation behind a [`Handle`] ([`Endpoint::sync_future`]).
/// Each poll syncs the handle once (`try_sync`, which polls the endpoint once). While it
/// waits it registers its task with the operation, whose last reply wakes it on whichever
/// thread runs that reply's handler (the progress thread, or any thread's poll); without a
/// progress thread, or while native operations are outstanding (which only a sync
/// retires), it asks to be polled again at once.
#[derive(Debug)]
#[must_use = "futures do nothing unless awaited"]
pub struct SyncFuture {
    ep: Endpoint,
    h: Handle,
}

impl Future for SyncFuture {
    type Output = Result<()>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<()>> {
        let this = self.get_mut();
        if let Some(op) = &this.h.op {
            // Registered before the check, so that a completion between the two wakes us.
            op.set_waker(cx.waker());
        }
        match this.ep.try_sync(&mut this.h) {
            Ok(true) => Poll::Ready(Ok(())),
            Err(e) => Poll::Ready(Err(e)),
            Ok(false) => {
                // Native operations and held payloads complete in no handler: look again.
                let native = this.h.op.as_ref().is_some_and(|op| {
                    op.has_held.load(Ordering::Acquire)
                        || !op
                            .native
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .is_empty()
                });
                if native || !this.ep.progress_thread_running() {
                    cx.waker().wake_by_ref();
                }
                Poll::Pending
            }
        }
    }
}

pub(crate) fn register_handlers(t: &mut HandlerTable) -> Result<()> {
    t.insert(LIB_PUT, Box::new(put_handler))?;
    t.insert(LIB_ACK, Box::new(ack_handler))?;
    t.insert(LIB_GET, Box::new(get_handler))?;
    t.insert(LIB_GET_REPLY, Box::new(get_reply_handler))?;
    Ok(())
}

fn put_handler(tok: &mut Token<'_>, args: &[u32], _payload: &[u8]) {
    // The payload is already in the segment: acknowledge.
    if let Err(e) = tok.reply(LIB_ACK, Category::Short, args, &[], 0, true) {
        crate::diag!("amnet: put acknowledgement failed: {e}");
    }
}

fn ack_handler(tok: &mut Token<'_>, args: &[u32], _payload: &[u8]) {
    let chunk = match (args, tok.endpoint().attached_for("put")) {
        (&[lo, hi, ..], Ok(att)) => att.pending.take([lo, hi], tok.src(), ReplyKind::PutAck),
        _ => None,
    };
    match chunk {
        Some(c) => {
            c.op.complete_one();
        }
        None => stray(tok, "put acknowledgement"),
    }
}

fn get_handler(tok: &mut Token<'_>, args: &[u32], _payload: &[u8]) {
    let [off_lo, off_hi, len, id_lo, id_hi] = *args else {
        return;
    };
    let ep = tok.endpoint();
    let Ok(att) = ep.attached_for("get") else {
        return;
    };
    let off = join64(off_lo, off_hi);
    let len = len as usize;
    let payload: &[u8] = if att.check_range(ep.rank(), off, len).is_ok() {
        // SAFETY: range checked against our own mapped segment; the requester's contract is
        // that nobody writes these bytes while the get is outstanding.
        unsafe { std::slice::from_raw_parts(att.seg.base.add(seg_off(off)), len) }
    } else {
        &[]
    };
    let rargs = [id_lo, id_hi];
    if let Err(e) = tok.reply(LIB_GET_REPLY, Category::Medium, &rargs, payload, 0, true) {
        crate::diag!("amnet: get reply failed: {e}");
    }
}

fn get_reply_handler(tok: &mut Token<'_>, args: &[u32], payload: &[u8]) {
    let src = tok.src();
    // The copy runs with the table locked: a blocking get that gives up removes its chunks
    // under the same lock before it lets go of the destination.
    let copy = |c: &Chunk| -> bool {
        let Waiting::GetReply { dst, len } = c.waiting else {
            return false;
        };
        if payload.len() != len {
            return false;
        }
        // SAFETY: `dst` is the destination the requester keeps valid (safe API: its own
        // segment, or a buffer whose call removes its chunks under this lock before it
        // returns; unsafe API: the caller's contract) for `len` bytes while the chunk is in
        // the table, which it is until this closure returns.
        unsafe { crate::mem::copy(payload.as_ptr(), dst as *mut u8, len) };
        true
    };
    let taken = match (args, tok.endpoint().attached_for("get")) {
        (&[lo, hi, ..], Ok(att)) => att
            .pending
            .take_with([lo, hi], src, ReplyKind::GetReply, copy),
        _ => None,
    };
    let Some((c, copied)) = taken else {
        return stray(tok, "get reply");
    };
    if !copied {
        let len = match c.waiting {
            Waiting::GetReply { len, .. } => len,
            _ => 0,
        };
        c.op.fail(format!(
            "get from rank {src}: the reply carried {} bytes of the {len} asked for (the target \
             refused the range)",
            payload.len()
        ));
    }
    c.op.complete_one();
}

/// Ends a blocking get's claim on its destination however the call ends: unless the get
/// completed, the operation's pending chunks are removed (late replies then write nothing)
/// and its native operations are waited for, before the destination's borrow ends.
pub(crate) struct GetClaim<'a> {
    ep: &'a Endpoint,
    op: &'a std::cell::OnceCell<Arc<OpState>>,
    /// The get completed: nothing to undo.
    pub(crate) done: bool,
}

impl<'a> GetClaim<'a> {
    pub(crate) fn new(ep: &'a Endpoint, op: &'a std::cell::OnceCell<Arc<OpState>>) -> Self {
        GetClaim {
            ep,
            op,
            done: false,
        }
    }
}

impl Drop for GetClaim<'_> {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        let (Some(st), Ok(att)) = (self.op.get(), self.ep.attached_for("get")) else {
            return;
        };
        att.pending.cancel(st);
        if let Some(rma) = &att.native {
            let _ = st.settle_native(&**rma, true);
        }
    }
}

impl Endpoint {
    #[inline]
    pub(crate) fn rma_check(
        &self,
        op: &'static str,
        rank: Rank,
        offset: u64,
        len: usize,
    ) -> Result<&Attached> {
        let att = self.attached_for(op)?;
        not_in_handler(op)?;
        att.check_range(rank, offset, len)?;
        Ok(att)
    }

    /// Start a put; returns None when it completed already (direct path, a blocking native
    /// put, or nothing to move). `blocking` asks the native path for a blocking put.
    fn put_start(
        &self,
        op: &'static str,
        dest: Rank,
        offset: u64,
        src: &[u8],
        blocking: bool,
        track: impl FnOnce() -> Arc<OpState>,
    ) -> Result<Option<Arc<OpState>>> {
        let att = self.rma_check(op, dest, offset, src.len())?;
        let b = self.stats_block();
        b.add(Ctr::Puts, 1);
        b.add(Ctr::PutBytes, src.len() as u64);
        if let Some(base) = att.peers[dest as usize] {
            // SAFETY: the range was checked against `dest`'s segment, mapped at `base` for the
            // life of the endpoint; `ptr::copy` tolerates a source that aliases the segment.
            unsafe { crate::mem::copy(src.as_ptr(), base.0.add(seg_off(offset)), src.len()) };
            return Ok(None);
        }
        self.put_remote(att, dest, offset, src, blocking, track)
    }

    /// A put on the native or the AM path (kept out of line: the direct path above is the hot
    /// one where peers are mapped).
    #[inline(never)]
    fn put_remote(
        &self,
        att: &Attached,
        dest: Rank,
        offset: u64,
        src: &[u8],
        blocking: bool,
        track: impl FnOnce() -> Arc<OpState>,
    ) -> Result<Option<Arc<OpState>>> {
        if src.is_empty() {
            return Ok(None);
        }
        if let Some(rma) = &att.native {
            return Self::native_put(&**rma, dest, offset, src, blocking, track);
        }
        let st = track();
        let chunk = att.put_chunk;
        if blocking {
            return self
                .put_held(att, dest, offset, src, chunk, &st)
                .map(|()| None);
        }
        for (i, piece) in src.chunks(chunk).enumerate() {
            let args = att.pending.arm(&st, dest, Waiting::PutAck);
            let sent = self.lib_request(dest, &put_msg(&args, piece, offset + (i * chunk) as u64));
            if let Err(e) = sent {
                att.pending.disarm(args, dest, ReplyKind::PutAck);
                return Err(e);
            }
        }
        Ok(Some(st))
    }

    /// A blocking put on the AM path: the conduit may send `src` from where it lies
    /// ([`Conduit::try_send_held`]), since the call waits for the target's replies; the hold
    /// ends before it returns, on every path.
    fn put_held(
        &self,
        att: &Attached,
        dest: Rank,
        offset: u64,
        src: &[u8],
        chunk: usize,
        st: &Arc<OpState>,
    ) -> Result<()> {
        /// Ends the hold on the pieces sent so far when the put returns, however it returns.
        struct Release<'a> {
            conduit: &'a dyn Conduit,
            dest: Rank,
            sent: &'a [u8],
        }
        impl Drop for Release<'_> {
            fn drop(&mut self) {
                if !self.sent.is_empty() {
                    self.conduit.release_held(self.dest, self.sent);
                }
            }
        }
        let mut held = Release {
            conduit: &*self.inner.conduit,
            dest,
            sent: &[],
        };
        for (i, piece) in src.chunks(chunk).enumerate() {
            let args = att.pending.arm(st, dest, Waiting::PutAck);
            // The hold covers every piece handed over, before it is handed over.
            held.sent = &src[..i * chunk + piece.len()];
            // SAFETY: `src` is borrowed for the whole call, so it stays valid until `held` is
            // dropped, which calls `release_held` for every piece sent, on every path out of
            // this function (a panic included); a conduit takes no hold on a piece it
            // refused. Nothing changes it meanwhile but a racing write into this rank's own
            // segment by another rank, where the caller gets whatever bytes each datagram
            // read (spec/core.md §7).
            unsafe {
                self.lib_request_held(dest, &put_msg(&args, piece, offset + (i * chunk) as u64))?;
            }
        }
        self.wait_op(st)
    }

    /// The native path of a put (cold for conduits that map their peers).
    #[inline(never)]
    fn native_put(
        rma: &dyn NativeRma,
        dest: Rank,
        offset: u64,
        src: &[u8],
        blocking: bool,
        track: impl FnOnce() -> Arc<OpState>,
    ) -> Result<Option<Arc<OpState>>> {
        if blocking {
            rma.put(dest, offset, src)?;
            return Ok(None);
        }
        Ok(Self::track_ticket(rma.put_nb(dest, offset, src)?, track))
    }

    /// The operation state that waits for a native ticket, or None when the operation
    /// completed at once.
    fn track_ticket(
        t: Option<RmaTicket>,
        track: impl FnOnce() -> Arc<OpState>,
    ) -> Option<Arc<OpState>> {
        t.map(|t| {
            let st = track();
            st.add_native(t);
            st
        })
    }

    /// The native path of a get.
    ///
    /// # Safety
    /// - `dst` must be valid for `len` bytes of writes until the operation completes.
    #[inline(never)]
    unsafe fn native_get(
        rma: &dyn NativeRma,
        src_rank: Rank,
        offset: u64,
        dst: *mut u8,
        len: usize,
        blocking: bool,
        track: impl FnOnce() -> Arc<OpState>,
    ) -> Result<Option<Arc<OpState>>> {
        if blocking {
            // SAFETY: forwarded contract; the call completes the get before returning.
            unsafe { rma.get(src_rank, offset, dst, len)? };
            return Ok(None);
        }
        // SAFETY: forwarded contract: `dst` stays valid until the ticket completes, which the
        // returned operation state (synced by the caller) waits for.
        let t = unsafe { rma.get_nb(src_rank, offset, dst, len)? };
        Ok(Self::track_ticket(t, track))
    }

    /// Start a get into `dst`; None when it completed already. `blocking` asks the native path
    /// for a blocking get.
    ///
    /// # Safety
    /// - `dst` must be valid for `len` bytes of writes until the operation completes.
    #[allow(clippy::too_many_arguments)]
    unsafe fn get_start(
        &self,
        op: &'static str,
        src_rank: Rank,
        offset: u64,
        dst: *mut u8,
        len: usize,
        blocking: bool,
        track: impl FnOnce() -> Arc<OpState>,
    ) -> Result<Option<Arc<OpState>>> {
        let att = self.rma_check(op, src_rank, offset, len)?;
        let b = self.stats_block();
        b.add(Ctr::Gets, 1);
        b.add(Ctr::GetBytes, len as u64);
        if let Some(base) = att.peers[src_rank as usize] {
            // SAFETY: range checked against the source segment; `dst` valid per contract;
            // `ptr::copy` tolerates overlap (a get from this rank into its own segment).
            unsafe { crate::mem::copy(base.0.add(seg_off(offset)), dst, len) };
            return Ok(None);
        }
        // SAFETY: forwarded contract.
        unsafe { self.get_remote(att, src_rank, offset, dst, len, blocking, track) }
    }

    /// A get on the native or the AM path (out of line, as for puts).
    ///
    /// # Safety
    /// - `dst` must be valid for `len` bytes of writes until the operation completes.
    #[inline(never)]
    #[allow(clippy::too_many_arguments)]
    unsafe fn get_remote(
        &self,
        att: &Attached,
        src_rank: Rank,
        offset: u64,
        dst: *mut u8,
        len: usize,
        blocking: bool,
        track: impl FnOnce() -> Arc<OpState>,
    ) -> Result<Option<Arc<OpState>>> {
        if len == 0 {
            return Ok(None);
        }
        if let Some(rma) = &att.native {
            // SAFETY: forwarded contract.
            return unsafe {
                Self::native_get(&**rma, src_rank, offset, dst, len, blocking, track)
            };
        }
        let st = track();
        let chunk = att.max_medium.max(1);
        let mut done = 0usize;
        while done < len {
            let n = chunk.min(len - done);
            let (off_lo, off_hi) = split64(offset + done as u64);
            let n32 = u32::try_from(n)
                .map_err(|_| Error::conduit(self.conduit_name(), "max_medium exceeds 4 GiB"))?;
            let [id_lo, id_hi] = att.pending.arm(
                &st,
                src_rank,
                Waiting::GetReply {
                    dst: dst as usize + done,
                    len: n,
                },
            );
            let sent = self.lib_request(
                src_rank,
                &OutMsg {
                    handler: LIB_GET,
                    category: Category::Short,
                    is_reply: false,
                    args: &[off_lo, off_hi, n32, id_lo, id_hi],
                    payload: &[],
                    long_offset: 0,
                },
            );
            if let Err(e) = sent {
                att.pending
                    .disarm([id_lo, id_hi], src_rank, ReplyKind::GetReply);
                return Err(e);
            }
            done += n;
        }
        Ok(Some(st))
    }

    pub(crate) fn new_op(&self) -> Arc<OpState> {
        Arc::new(OpState::new(self.inner.id))
    }

    /// Retire the native operations of `st` that are complete (all of them when `block`).
    /// Returns true when `st` had native operations outstanding.
    fn settle(&self, st: &OpState, block: bool) -> Result<bool> {
        match &self.attached_for("sync")?.native {
            Some(rma) if !st.done() => st.settle_native(&**rma, block),
            _ => Ok(false),
        }
    }

    pub(crate) fn wait_op(&self, st: &OpState) -> Result<()> {
        self.settle(st, true)?;
        self.wait_inner(&mut || self.op_done(st))?;
        self.outcome(st)
    }

    /// True when `st` completed, its local completion (a held payload) checked first.
    #[inline]
    pub(crate) fn op_done(&self, st: &OpState) -> bool {
        st.settle_held(&*self.inner.conduit);
        st.done()
    }

    /// A complete operation's result: an error where a piece failed at its target.
    pub(crate) fn outcome(&self, st: &OpState) -> Result<()> {
        match st.take_failure() {
            None => Ok(()),
            Some(why) => Err(Error::conduit(self.conduit_name(), why)),
        }
    }

    /// How put/get reach `rank`'s segment from this endpoint, as chosen at attach: a direct
    /// copy, the conduit's native one-sided operations, or the AM reference path.
    pub fn rma_path(&self, rank: Rank) -> Result<RmaPath> {
        let att = self.attached_for("rma_path")?;
        att.check_rank(rank)?;
        Ok(if att.peers[rank as usize].is_some() {
            RmaPath::Direct
        } else if att.native.is_some() {
            RmaPath::Native
        } else {
            RmaPath::Am
        })
    }

    /// Blocking put: copy `src` to `dest`'s segment at `offset`; complete on return.
    pub fn put(&self, dest: Rank, offset: u64, src: &[u8]) -> Result<()> {
        match self.put_start("put", dest, offset, src, true, || self.new_op())? {
            None => Ok(()),
            Some(st) => self.wait_op(&st),
        }
    }

    /// Blocking get: copy from `src_rank`'s segment at `offset` into `dst`.
    pub fn get(&self, src_rank: Rank, offset: u64, dst: &mut [u8]) -> Result<()> {
        let cell = std::cell::OnceCell::new();
        let mut claim = GetClaim::new(self, &cell);
        // SAFETY: `dst` is borrowed mutably for the whole call, and `claim` removes every
        // pending chunk (and waits for native operations) before the call returns, however
        // it returns, unless the get completed.
        let st = unsafe {
            self.get_start(
                "get",
                src_rank,
                offset,
                dst.as_mut_ptr(),
                dst.len(),
                true,
                || cell.get_or_init(|| self.new_op()).clone(),
            )?
        };
        let r = match st {
            None => Ok(()),
            Some(st) => self.wait_op(&st),
        };
        claim.done = r.is_ok();
        r
    }

    /// Non-blocking put with an explicit handle. `src` is consumed before the call returns (it
    /// may be reused at once); the handle completes when the data is in the target segment.
    pub fn put_nb(&self, dest: Rank, offset: u64, src: &[u8]) -> Result<Handle> {
        let op = self.put_start("put_nb", dest, offset, src, false, || self.new_op())?;
        Ok(Handle { op })
    }

    /// Non-blocking get with an explicit handle into arbitrary memory.
    ///
    /// # Safety
    /// - `dst` must be valid for writes of `len` bytes until the handle is synced.
    /// - Nothing else may read or write `dst..dst+len` until then.
    pub unsafe fn get_nb(
        &self,
        src_rank: Rank,
        offset: u64,
        dst: *mut u8,
        len: usize,
    ) -> Result<Handle> {
        // SAFETY: forwarded contract.
        let op = unsafe {
            self.get_start("get_nb", src_rank, offset, dst, len, false, || {
                self.new_op()
            })?
        };
        Ok(Handle { op })
    }

    fn local_dst(&self, op: &'static str, local_offset: u64, len: usize) -> Result<*mut u8> {
        let att = self.attached_for(op)?;
        att.check_range(self.rank(), local_offset, len)?;
        // SAFETY: range checked against the local segment.
        Ok(unsafe { att.seg.base.add(seg_off(local_offset)) })
    }

    /// Non-blocking get with an explicit handle into this rank's own segment at `local_offset`.
    pub fn get_nb_local(
        &self,
        src_rank: Rank,
        src_offset: u64,
        local_offset: u64,
        len: usize,
    ) -> Result<Handle> {
        let dst = self.local_dst("get_nb_local", local_offset, len)?;
        // SAFETY: `dst` is inside the local segment, mapped for the endpoint's life.
        unsafe { self.get_nb(src_rank, src_offset, dst, len) }
    }

    pub(crate) fn nbi_target(&self) -> Arc<OpState> {
        self.with_thread_state(|ts| ts.region.as_ref().unwrap_or(ts.nbi).clone())
    }

    /// Non-blocking put with an implicit handle (synced by `wait_sync_nbi` or an access region).
    pub fn put_nbi(&self, dest: Rank, offset: u64, src: &[u8]) -> Result<()> {
        self.put_start("put_nbi", dest, offset, src, false, || self.nbi_target())?;
        Ok(())
    }

    /// Non-blocking get with an implicit handle.
    ///
    /// # Safety
    /// - `dst` must be valid for writes of `len` bytes until the implicit handle is synced.
    pub unsafe fn get_nbi(
        &self,
        src_rank: Rank,
        offset: u64,
        dst: *mut u8,
        len: usize,
    ) -> Result<()> {
        // SAFETY: forwarded contract.
        unsafe {
            self.get_start("get_nbi", src_rank, offset, dst, len, false, || {
                self.nbi_target()
            })?
        };
        Ok(())
    }

    /// Non-blocking get with an implicit handle into this rank's own segment.
    pub fn get_nbi_local(
        &self,
        src_rank: Rank,
        src_offset: u64,
        local_offset: u64,
        len: usize,
    ) -> Result<()> {
        let dst = self.local_dst("get_nbi_local", local_offset, len)?;
        // SAFETY: `dst` is inside the local segment.
        unsafe { self.get_nbi(src_rank, src_offset, dst, len) }
    }

    /// True when every implicit-handle operation this thread started (outside access regions)
    /// has completed. Polls once.
    pub fn try_sync_nbi(&self) -> Result<bool> {
        self.attached_for("try_sync_nbi")?;
        not_in_handler("try_sync_nbi")?;
        let st = self.with_thread_state(|ts| ts.nbi.clone());
        if !st.done() {
            self.settle(&st, false)?;
        }
        // Always poll, as GASNet's try-syncs do: a client loop that spins on a flag its peer
        // puts and calls this to make progress would otherwise never service the network.
        self.poll_inner(false)?;
        if st.done() {
            self.outcome(&st)?;
            return Ok(true);
        }
        Ok(false)
    }

    /// Wait for every implicit-handle operation this thread started outside access regions.
    pub fn wait_sync_nbi(&self) -> Result<()> {
        self.attached_for("wait_sync_nbi")?;
        not_in_handler("wait_sync_nbi")?;
        let st = self.with_thread_state(|ts| ts.nbi.clone());
        self.wait_op(&st)
    }

    /// Open an access region: implicit-handle operations until `end_nbi_region` are collected
    /// into one explicit handle.
    pub fn begin_nbi_region(&self) -> Result<()> {
        self.attached_for("begin_nbi_region")?;
        not_in_handler("begin_nbi_region")?;
        let id = self.inner.id;
        self.with_thread_state(|ts| {
            if ts.region.is_some() {
                return Err(Error::BadHandle(
                    "begin_nbi_region: an access region is already open on this thread",
                ));
            }
            *ts.region = Some(Arc::new(OpState::new(id)));
            Ok(())
        })
    }

    /// Close the access region and return the handle for everything started in it.
    pub fn end_nbi_region(&self) -> Result<Handle> {
        self.attached_for("end_nbi_region")?;
        not_in_handler("end_nbi_region")?;
        let st = self
            .with_thread_state(|ts| ts.region.take())
            .ok_or(Error::BadHandle(
                "end_nbi_region: no access region is open on this thread",
            ))?;
        Ok(Handle {
            op: if st.done() { None } else { Some(st) },
        })
    }

    pub(crate) fn check_handle(&self, h: &Handle) -> Result<()> {
        self.attached_for("sync")?;
        match &h.op {
            Some(op) if op.ep_id != self.inner.id => {
                Err(Error::BadHandle("the handle belongs to another endpoint"))
            }
            _ => Ok(()),
        }
    }

    /// Non-blocking check: true (and `h` becomes invalid) when the operation completed.
    pub fn try_sync(&self, h: &mut Handle) -> Result<bool> {
        not_in_handler("try_sync")?;
        self.check_handle(h)?;
        let Some(op) = &h.op else { return Ok(true) };
        if !self.op_done(op) {
            self.settle(op, false)?;
        }
        // Polls even when the operation is complete (see `try_sync_nbi`).
        self.poll_inner(false)?;
        if self.op_done(op) {
            let r = self.outcome(op);
            h.op = None;
            return r.map(|()| true);
        }
        Ok(false)
    }

    /// A future that completes when the operation behind `h` does (see [`SyncFuture`]), so
    /// that an async runtime can await put/get and atomics without a busy loop of its own.
    pub fn sync_future(&self, h: Handle) -> SyncFuture {
        SyncFuture {
            ep: self.clone(),
            h,
        }
    }

    /// Wait until the operation behind `h` completes; `h` becomes invalid. When the wait
    /// itself fails (`Error::Hang`, a peer's failure, a wait refused where it may not wait)
    /// before the operation completed, `h` keeps it: the operation may still write its
    /// destination, and a later sync waits for it.
    pub fn wait_sync(&self, h: &mut Handle) -> Result<()> {
        not_in_handler("wait_sync")?;
        self.check_handle(h)?;
        if let Some(op) = h.op.take() {
            if let Err(e) = self.wait_op(&op) {
                if !self.op_done(&op) {
                    h.op = Some(op);
                }
                return Err(e);
            }
        }
        Ok(())
    }

    /// Retire the complete native operations of every handle (all of them when `block`).
    fn settle_all(&self, hs: &[Handle], block: bool) -> Result<()> {
        if self.attached_for("sync")?.native.is_none() {
            return Ok(());
        }
        for op in hs.iter().filter_map(|h| h.op.as_ref()) {
            self.settle(op, block)?;
        }
        Ok(())
    }

    /// Invalidate the handles that completed: (completed, still pending), or the first
    /// failure among the completed ones.
    fn sweep(&self, hs: &mut [Handle]) -> Result<(usize, usize)> {
        let mut completed = 0;
        let mut pending = 0;
        let mut failed = Ok(());
        for h in hs.iter_mut() {
            match &h.op {
                Some(op) if self.op_done(op) => {
                    let r = self.outcome(op);
                    if failed.is_ok() {
                        failed = r;
                    }
                    h.op = None;
                    completed += 1;
                }
                Some(_) => pending += 1,
                None => {}
            }
        }
        failed.map(|()| (completed, pending))
    }

    /// True when every handle completed (completed ones become invalid). Polls once.
    pub fn try_sync_all(&self, hs: &mut [Handle]) -> Result<bool> {
        not_in_handler("try_sync_all")?;
        hs.iter().try_for_each(|h| self.check_handle(h))?;
        self.settle_all(hs, false)?;
        // Polls even when every handle is complete (see `try_sync_nbi`).
        self.poll_inner(false)?;
        Ok(self.sweep(hs)?.1 == 0)
    }

    /// Wait until every handle completed.
    pub fn wait_sync_all(&self, hs: &mut [Handle]) -> Result<()> {
        not_in_handler("wait_sync_all")?;
        hs.iter().try_for_each(|h| self.check_handle(h))?;
        self.settle_all(hs, true)?;
        let mut failed = Ok(());
        self.wait_inner(&mut || match self.sweep(hs) {
            Ok((_, pending)) => pending == 0,
            Err(e) => {
                failed = Err(e);
                true
            }
        })?;
        failed
    }

    /// True when at least one handle completed or none is outstanding (completed ones become
    /// invalid). Polls once.
    pub fn try_sync_some(&self, hs: &mut [Handle]) -> Result<bool> {
        not_in_handler("try_sync_some")?;
        hs.iter().try_for_each(|h| self.check_handle(h))?;
        self.settle_all(hs, false)?;
        // Polls even when a handle is already complete or none is live (see
        // `try_sync_nbi`).
        self.poll_inner(false)?;
        let (c, p) = self.sweep(hs)?;
        Ok(c > 0 || p == 0)
    }

    /// Wait until at least one handle completed or none is outstanding.
    pub fn wait_sync_some(&self, hs: &mut [Handle]) -> Result<()> {
        not_in_handler("wait_sync_some")?;
        hs.iter().try_for_each(|h| self.check_handle(h))?;
        self.settle_all(hs, false)?;
        if self.sweep(hs)?.0 > 0 {
            return Ok(());
        }
        // Nothing completed yet: finish the native operations of one handle, if any has some
        // (they need no handler here, so waiting for them cannot stall the job).
        for op in hs.iter().filter_map(|h| h.op.as_ref()) {
            if self.settle(op, true)? {
                break;
            }
        }
        let mut any = false;
        let mut failed = Ok(());
        self.wait_inner(&mut || match self.sweep(hs) {
            Ok((c, p)) => {
                any |= c > 0;
                any || p == 0
            }
            Err(e) => {
                failed = Err(e);
                true
            }
        })?;
        failed
    }
}

#[cfg(test)]
mod tests {
    //! The native seam with a one-rank mock conduit whose non-blocking operations complete
    //! only when synced, and whose `test` says "not yet" once per ticket before completing it.

    use super::*;
    use crate::conduit::{Conduit, InMsg, LocalSegment};
    use std::collections::HashMap;

    struct Seg(*mut u8);
    // SAFETY: test-only heap memory, leaked for the life of the test process.
    unsafe impl Send for Seg {}
    // SAFETY: as above.
    unsafe impl Sync for Seg {}

    /// A deferred operation: the copy it will make when it completes.
    struct Pending {
        from: usize,
        to: usize,
        len: usize,
        tested: bool,
    }

    #[derive(Default)]
    struct MockRma {
        seg: Mutex<Option<Seg>>,
        pending: Mutex<HashMap<u64, Pending>>,
        next: AtomicUsize,
        calls: Mutex<Vec<&'static str>>,
        /// Bytes staged by `put_nb` (the source is consumed on return).
        staged: Mutex<Vec<Box<[u8]>>>,
    }

    impl MockRma {
        fn base(&self) -> *mut u8 {
            self.seg.lock().unwrap().as_ref().unwrap().0
        }
        fn note(&self, c: &'static str) {
            self.calls.lock().unwrap().push(c);
        }
        fn defer(&self, from: usize, to: usize, len: usize) -> RmaTicket {
            let id = self.next.fetch_add(1, Ordering::Relaxed) as u64;
            self.pending.lock().unwrap().insert(
                id,
                Pending {
                    from,
                    to,
                    len,
                    tested: false,
                },
            );
            RmaTicket { rank: 0, id }
        }
        fn finish(&self, p: &Pending) {
            // SAFETY: `from`/`to` are addresses the core vouched for (segment ranges it
            // checked, or destinations valid until completion) or staged copies kept alive.
            unsafe { std::ptr::copy(p.from as *const u8, p.to as *mut u8, p.len) };
        }
    }

    impl NativeRma for MockRma {
        fn describe(&self) -> String {
            "mock".into()
        }
        fn put(&self, _dest: Rank, offset: u64, src: &[u8]) -> Result<()> {
            self.note("put");
            // SAFETY: the core checked the range against the segment.
            unsafe { std::ptr::copy(src.as_ptr(), self.base().add(seg_off(offset)), src.len()) };
            Ok(())
        }
        unsafe fn get(&self, _src: Rank, offset: u64, dst: *mut u8, len: usize) -> Result<()> {
            self.note("get");
            // SAFETY: range checked by the core; `dst` valid per the contract.
            unsafe { std::ptr::copy(self.base().add(seg_off(offset)), dst, len) };
            Ok(())
        }
        fn put_nb(&self, _dest: Rank, offset: u64, src: &[u8]) -> Result<Option<RmaTicket>> {
            self.note("put_nb");
            let copy: Box<[u8]> = src.into();
            let from = copy.as_ptr() as usize;
            self.staged.lock().unwrap().push(copy);
            let to = self.base() as usize + seg_off(offset);
            Ok(Some(self.defer(from, to, src.len())))
        }
        unsafe fn get_nb(
            &self,
            _src: Rank,
            offset: u64,
            dst: *mut u8,
            len: usize,
        ) -> Result<Option<RmaTicket>> {
            self.note("get_nb");
            let from = self.base() as usize + seg_off(offset);
            Ok(Some(self.defer(from, dst as usize, len)))
        }
        fn test(&self, t: RmaTicket) -> Result<bool> {
            let mut p = self.pending.lock().unwrap();
            let Some(op) = p.get_mut(&t.id) else {
                return Err(Error::conduit("mock", "unknown ticket"));
            };
            if !op.tested {
                op.tested = true;
                return Ok(false);
            }
            let op = p.remove(&t.id).unwrap();
            self.finish(&op);
            Ok(true)
        }
        fn wait(&self, t: RmaTicket) -> Result<()> {
            let op = self.pending.lock().unwrap().remove(&t.id);
            let op = op.ok_or(Error::conduit("mock", "unknown ticket"))?;
            self.finish(&op);
            Ok(())
        }
    }

    /// One rank with the native path (`MockRma`); or, with `hold`, two ranks on the AM path
    /// whose only sends are held ones (`HoldMock`).
    struct Mock {
        rma: Arc<MockRma>,
        hold: Option<Arc<HoldMock>>,
    }

    impl Conduit for Mock {
        fn name(&self) -> &'static str {
            "mock"
        }
        fn rank(&self) -> Rank {
            0
        }
        fn size(&self) -> u32 {
            if self.hold.is_some() {
                2
            } else {
                1
            }
        }
        fn max_medium(&self) -> usize {
            1024
        }
        fn exchange(&self, blob: &[u8]) -> Result<Vec<Vec<u8>>> {
            Ok(vec![blob.to_vec(); self.size() as usize])
        }
        fn attach_segment(&self, len: usize, _lens: &[usize]) -> Result<LocalSegment> {
            let base = Box::leak(vec![0u8; len].into_boxed_slice()).as_mut_ptr();
            *self.rma.seg.lock().unwrap() = Some(Seg(base));
            Ok(LocalSegment { base, len })
        }
        fn try_send(&self, _dest: Rank, _msg: &OutMsg<'_>) -> Result<bool> {
            Err(Error::conduit("mock", "no active messages expected"))
        }
        unsafe fn try_send_held(&self, dest: Rank, msg: &OutMsg<'_>) -> Result<bool> {
            let Some(h) = &self.hold else {
                return self.try_send(dest, msg);
            };
            let left = h.accept.load(Ordering::Relaxed);
            if left == 0 {
                return Err(Error::conduit("mock", "the link went down"));
            }
            h.accept.store(left - 1, Ordering::Relaxed);
            h.held.lock().unwrap().push(span(msg.payload));
            Ok(true)
        }
        fn release_held(&self, _dest: Rank, payload: &[u8]) {
            if let Some(h) = &self.hold {
                h.released.lock().unwrap().push(span(payload));
            }
        }
        fn poll(&self, _r: bool, _sink: &mut dyn FnMut(&InMsg<'_>) -> bool) -> Result<usize> {
            Ok(0)
        }
        fn native_rma(&self) -> Option<Arc<dyn NativeRma>> {
            if self.hold.is_some() {
                return None;
            }
            let r: Arc<dyn NativeRma> = self.rma.clone();
            Some(r)
        }
        fn exit_requested(&self) -> Option<i32> {
            None
        }
        fn request_exit(&self, code: i32) -> i32 {
            code
        }
        fn terminate(&self, code: i32) -> ! {
            panic!("mock rank ended with {code}")
        }
        fn is_process_mode(&self) -> bool {
            false
        }
    }

    fn endpoint() -> (Endpoint, Arc<MockRma>) {
        let rma = Arc::new(MockRma::default());
        let ep = Endpoint::new(Box::new(Mock {
            rma: rma.clone(),
            hold: None,
        }))
        .unwrap();
        ep.attach(HandlerTable::new(), 4096).unwrap();
        (ep, rma)
    }

    fn read(ep: &Endpoint, off: u64, len: usize) -> Vec<u8> {
        let mut v = vec![0u8; len];
        ep.read_local(off, &mut v).unwrap();
        v
    }

    #[test]
    fn blocking_forms_use_the_native_calls() {
        let (ep, rma) = endpoint();
        if !ep.config().rma_native {
            return; // AMNET_RMA=am in this test's environment
        }
        assert_eq!(ep.rma_path(0).unwrap(), RmaPath::Native);
        assert!(matches!(ep.rma_path(1), Err(Error::BadRank { .. })));
        ep.put(0, 3, b"hello").unwrap();
        assert_eq!(read(&ep, 3, 5), b"hello");
        let mut b = [0u8; 5];
        ep.get(0, 3, &mut b).unwrap();
        assert_eq!(&b, b"hello");
        // Zero bytes and range errors never reach the conduit.
        assert!(ep.put_nb(0, 0, &[]).unwrap().is_invalid());
        assert!(matches!(
            ep.put(0, 4095, b"xy"),
            Err(Error::OutOfSegment { .. })
        ));
        assert_eq!(*rma.calls.lock().unwrap(), ["put", "get"]);
        let s = ep.stats();
        assert_eq!((s.puts, s.gets, s.requests_sent.messages()), (2, 1, 0));
    }

    #[test]
    fn explicit_handles_complete_when_synced() {
        let (ep, _rma) = endpoint();
        if !ep.config().rma_native {
            return;
        }
        let mut h = ep.put_nb(0, 10, b"abc").unwrap();
        assert!(!h.is_invalid());
        assert_eq!(read(&ep, 10, 3), [0, 0, 0], "completes only when synced");
        assert!(
            !ep.try_sync(&mut h).unwrap(),
            "the mock's first test says not yet"
        );
        assert!(ep.try_sync(&mut h).unwrap());
        assert!(h.is_invalid());
        assert_eq!(read(&ep, 10, 3), b"abc");

        let mut buf = [0u8; 3];
        // SAFETY: `buf` outlives the wait below.
        let mut h = unsafe { ep.get_nb(0, 10, buf.as_mut_ptr(), 3) }.unwrap();
        ep.wait_sync(&mut h).unwrap();
        assert_eq!(&buf, b"abc");

        let h1 = ep.get_nb_local(0, 10, 100, 3).unwrap();
        let h2 = ep.put_nb(0, 200, b"xyz").unwrap();
        let mut hs = [h1, h2, Handle::INVALID];
        assert!(!ep.try_sync_all(&mut hs).unwrap());
        ep.wait_sync_some(&mut hs).unwrap();
        assert!(hs.iter().any(Handle::is_invalid));
        ep.wait_sync_all(&mut hs).unwrap();
        assert!(hs.iter().all(Handle::is_invalid));
        assert_eq!(read(&ep, 100, 3), b"abc");
        assert_eq!(read(&ep, 200, 3), b"xyz");
    }

    #[test]
    fn implicit_handles_and_regions() {
        let (ep, _rma) = endpoint();
        if !ep.config().rma_native {
            return;
        }
        for i in 0..5u8 {
            ep.put_nbi(0, 300 + u64::from(i), &[i + 1]).unwrap();
        }
        assert!(!ep.try_sync_nbi().unwrap());
        ep.wait_sync_nbi().unwrap();
        assert!(ep.try_sync_nbi().unwrap());
        assert_eq!(read(&ep, 300, 5), [1, 2, 3, 4, 5]);

        ep.begin_nbi_region().unwrap();
        ep.get_nbi_local(0, 300, 400, 5).unwrap();
        let mut buf = [0u8; 2];
        // SAFETY: `buf` outlives the region's wait below.
        unsafe { ep.get_nbi(0, 302, buf.as_mut_ptr(), 2) }.unwrap();
        let mut h = ep.end_nbi_region().unwrap();
        assert!(!h.is_invalid());
        assert!(
            ep.try_sync_nbi().unwrap(),
            "region operations are not implicit ones"
        );
        ep.wait_sync(&mut h).unwrap();
        assert_eq!(read(&ep, 400, 5), [1, 2, 3, 4, 5]);
        assert_eq!(buf, [3, 4]);
    }

    /// The held sends of a two-rank [`Mock`] on the AM path: `try_send_held` takes the first
    /// `accept` messages, recording the payloads it holds, and fails the next one.
    #[derive(Default)]
    struct HoldMock {
        accept: AtomicUsize,
        held: Mutex<Vec<std::ops::Range<usize>>>,
        released: Mutex<Vec<std::ops::Range<usize>>>,
    }

    fn span(b: &[u8]) -> std::ops::Range<usize> {
        let r = b.as_ptr_range();
        r.start as usize..r.end as usize
    }

    #[test]
    fn a_blocking_put_ends_its_holds_when_a_chunk_fails() {
        let mock = Arc::new(HoldMock::default());
        mock.accept.store(2, Ordering::Relaxed);
        let ep = Endpoint::new(Box::new(Mock {
            rma: Arc::default(),
            hold: Some(mock.clone()),
        }))
        .unwrap();
        ep.attach(HandlerTable::new(), 8192).unwrap();
        assert_eq!(ep.rma_path(1).unwrap(), RmaPath::Am);
        let src = vec![7u8; 3000];
        let e = ep.put(1, 0, &src).unwrap_err();
        assert!(e.to_string().contains("the link went down"), "{e}");
        // Two 1024-byte chunks were held; one release covers both, before `put` returned.
        let held = mock.held.lock().unwrap().clone();
        let base = src.as_ptr() as usize;
        assert_eq!(held, [base..base + 1024, base + 1024..base + 2048]);
        let released = mock.released.lock().unwrap().clone();
        assert_eq!(released.len(), 1);
        assert!(held
            .iter()
            .all(|h| released[0].start <= h.start && h.end <= released[0].end));
        // Refused at once: no hold is taken. (The guard covers each piece before handing it
        // over, so it may release a range the conduit never held, which ends nothing.)
        assert!(ep.put(1, 0, &src).is_err());
        assert_eq!(mock.held.lock().unwrap().len(), 2);
    }
}

#[cfg(test)]
mod pending_tests {
    //! The table of AM-path chunks awaiting replies: only the id, the rank and the kind of
    //! reply a chunk was armed with take it out, once.

    use super::*;

    fn op() -> Arc<OpState> {
        Arc::new(OpState::new(1))
    }

    /// Counts its wake-ups.
    struct Count(AtomicUsize);
    impl std::task::Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn the_last_reply_wakes_the_registered_task_once() {
        let t = Pending::default();
        let a = op();
        let ids = [t.arm(&a, 1, Waiting::PutAck), t.arm(&a, 1, Waiting::PutAck)];
        let count = Arc::new(Count(AtomicUsize::new(0)));
        let w = Waker::from(count.clone());
        a.set_waker(&w);
        a.set_waker(&w);
        t.take(ids[0], 1, ReplyKind::PutAck)
            .unwrap()
            .op
            .complete_one();
        assert_eq!(
            count.0.load(Ordering::SeqCst),
            0,
            "one piece still outstanding"
        );
        t.take(ids[1], 1, ReplyKind::PutAck)
            .unwrap()
            .op
            .complete_one();
        assert!(a.done());
        assert_eq!(count.0.load(Ordering::SeqCst), 1);
        // The waker was taken: a later completion of a reused state wakes nobody.
        a.remaining.fetch_add(1, Ordering::SeqCst);
        a.complete_one();
        assert_eq!(count.0.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn a_reply_takes_its_chunk_once_and_only_with_the_right_id_rank_and_kind() {
        let t = Pending::default();
        let a = op();
        let put = t.arm(&a, 3, Waiting::PutAck);
        let get = t.arm(
            &a,
            5,
            Waiting::GetReply {
                dst: 0x1000,
                len: 8,
            },
        );
        assert_ne!(put, get);
        assert_eq!(a.remaining.load(Ordering::Relaxed), 2);
        // Wrong generation, wrong rank, wrong kind, out of range: nothing taken.
        assert!(t.take([put[0], put[1] + 1], 3, ReplyKind::PutAck).is_none());
        assert!(t.take(put, 4, ReplyKind::PutAck).is_none());
        assert!(t.take(put, 3, ReplyKind::GetReply).is_none());
        assert!(t.take(get, 5, ReplyKind::PutAck).is_none());
        assert!(t.take([99, 1], 3, ReplyKind::PutAck).is_none());
        assert!(t.take(put, 3, ReplyKind::Atomic).is_none());
        assert_eq!(t.live(), 2);
        // The right reply takes it; a duplicate finds nothing.
        let c = t.take(put, 3, ReplyKind::PutAck).unwrap();
        assert!(Arc::ptr_eq(&c.op, &a));
        assert!(t.take(put, 3, ReplyKind::PutAck).is_none());
        let g = t.take(get, 5, ReplyKind::GetReply).unwrap();
        assert!(matches!(
            g.waiting,
            Waiting::GetReply {
                dst: 0x1000,
                len: 8
            }
        ));
        assert_eq!(t.live(), 0);
    }

    #[test]
    fn a_reused_slot_does_not_answer_to_its_old_id() {
        let t = Pending::default();
        let a = op();
        let first = t.arm(&a, 1, Waiting::PutAck);
        assert!(t.take(first, 1, ReplyKind::PutAck).is_some());
        let second = t.arm(&a, 1, Waiting::PutAck);
        assert_eq!(first[0], second[0], "the slot is reused");
        assert_ne!(first[1], second[1]);
        assert!(
            t.take(first, 1, ReplyKind::PutAck).is_none(),
            "a late duplicate of the first"
        );
        assert!(t.take(second, 1, ReplyKind::PutAck).is_some());
    }

    #[test]
    fn generations_skip_zero() {
        let t = Pending::default();
        let a = op();
        let id = t.arm(&a, 0, Waiting::PutAck);
        t.inner.lock().unwrap().slots[id[0] as usize].gen = u32::MAX;
        let id = [id[0], u32::MAX];
        assert!(t.take(id, 0, ReplyKind::PutAck).is_some());
        let next = t.arm(&a, 0, Waiting::PutAck);
        assert_eq!(next[1], 1);
        assert!(t.take([next[0], 0], 0, ReplyKind::PutAck).is_none());
    }
}
