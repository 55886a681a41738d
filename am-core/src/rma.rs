//! One-sided put/get: the native path (the conduit maps peers' segments) and the AM-based
//! reference path any conduit gets for free, with explicit and implicit handles.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use crate::conduit::{Category, OutMsg};
use crate::endpoint::{addr, join64, not_in_handler, seg_off, split64, Attached, Endpoint};
use crate::handler::{HandlerTable, Token};
use crate::stats::Ctr;
use crate::{Error, Rank, Result};

pub(crate) const LIB_PUT: u8 = 1;
pub(crate) const LIB_ACK: u8 = 2;
pub(crate) const LIB_GET: u8 = 3;
pub(crate) const LIB_GET_REPLY: u8 = 4;

/// Completion counter of one operation or of an implicit-handle aggregate.
#[derive(Debug)]
pub(crate) struct OpState {
    remaining: AtomicUsize,
    ep_id: u64,
}

impl OpState {
    pub(crate) fn new(ep_id: u64) -> Self {
        OpState {
            remaining: AtomicUsize::new(0),
            ep_id,
        }
    }
    fn done(&self) -> bool {
        self.remaining.load(Ordering::Acquire) == 0
    }
    /// Count one more outstanding message and return the raw reference its ack will release.
    fn arm(self: &Arc<Self>) -> (u32, u32) {
        self.remaining.fetch_add(1, Ordering::Relaxed);
        split64(Arc::into_raw(self.clone()) as u64)
    }
}

/// Release one reference created by [`OpState::arm`].
///
/// # Safety
/// - `(lo, hi)` must come from `OpState::arm` in this process, and each pair is released once.
unsafe fn release(lo: u32, hi: u32) {
    let p = addr(join64(lo, hi)) as *const OpState;
    // SAFETY: per the contract, `p` came from Arc::into_raw in `arm` and is released once.
    let op = unsafe { Arc::from_raw(p) };
    op.remaining.fetch_sub(1, Ordering::Release);
}

/// An explicit handle for a non-blocking put or get. An invalid handle (the operation completed
/// before the call returned) syncs at once.
#[derive(Debug, Default)]
#[must_use = "a handle must be synced to know the operation completed"]
pub struct Handle {
    op: Option<Arc<OpState>>,
}

impl Handle {
    /// The invalid handle: nothing to wait for.
    pub const INVALID: Handle = Handle { op: None };

    /// True when the handle refers to nothing outstanding (completed or never started).
    pub fn is_invalid(&self) -> bool {
        self.op.is_none()
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
        eprintln!("amnet: put acknowledgement failed: {e}");
    }
}

fn ack_handler(_tok: &mut Token<'_>, args: &[u32], _payload: &[u8]) {
    if let [lo, hi, ..] = *args {
        // SAFETY: the requester armed this pair in `OpState::arm`; each ack arrives once.
        unsafe { release(lo, hi) };
    }
}

fn get_handler(tok: &mut Token<'_>, args: &[u32], _payload: &[u8]) {
    let [off_lo, off_hi, len, op_lo, op_hi, dst_lo, dst_hi] = *args else {
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
    let rargs = [op_lo, op_hi, dst_lo, dst_hi];
    if let Err(e) = tok.reply(LIB_GET_REPLY, Category::Medium, &rargs, payload, 0, true) {
        eprintln!("amnet: get reply failed: {e}");
    }
}

fn get_reply_handler(_tok: &mut Token<'_>, args: &[u32], payload: &[u8]) {
    let [op_lo, op_hi, dst_lo, dst_hi] = *args else {
        return;
    };
    let dst = addr(join64(dst_lo, dst_hi)) as *mut u8;
    // SAFETY: `dst` is the destination the requester promised valid (safe API: its own
    // segment; unsafe API: the caller's contract) for this chunk's length until completion.
    unsafe { std::ptr::copy_nonoverlapping(payload.as_ptr(), dst, payload.len()) };
    // SAFETY: armed by the requester; each reply arrives once.
    unsafe { release(op_lo, op_hi) };
}

impl Endpoint {
    #[inline]
    fn rma_check(
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

    /// Start a put; returns None when it completed already (native path).
    fn put_start(
        &self,
        op: &'static str,
        dest: Rank,
        offset: u64,
        src: &[u8],
        track: impl FnOnce() -> Arc<OpState>,
    ) -> Result<Option<Arc<OpState>>> {
        let att = self.rma_check(op, dest, offset, src.len())?;
        let b = self.stats_block();
        b.add(Ctr::Puts, 1);
        b.add(Ctr::PutBytes, src.len() as u64);
        if let Some(base) = att.peers[dest as usize] {
            // SAFETY: the range was checked against `dest`'s segment, mapped at `base` for the
            // life of the endpoint; `ptr::copy` tolerates a source that aliases the segment.
            unsafe { std::ptr::copy(src.as_ptr(), base.0.add(seg_off(offset)), src.len()) };
            return Ok(None);
        }
        if src.is_empty() {
            return Ok(None);
        }
        let st = track();
        let chunk = att.max_medium.max(1);
        for (i, piece) in src.chunks(chunk).enumerate() {
            let (lo, hi) = st.arm();
            self.lib_request(
                dest,
                &OutMsg {
                    handler: LIB_PUT,
                    category: Category::Long,
                    is_reply: false,
                    args: &[lo, hi],
                    payload: piece,
                    long_offset: offset + (i * chunk) as u64,
                },
            )?;
        }
        Ok(Some(st))
    }

    /// Start a get into `dst`; None when it completed already.
    ///
    /// # Safety
    /// - `dst` must be valid for `len` bytes of writes until the operation completes.
    unsafe fn get_start(
        &self,
        op: &'static str,
        src_rank: Rank,
        offset: u64,
        dst: *mut u8,
        len: usize,
        track: impl FnOnce() -> Arc<OpState>,
    ) -> Result<Option<Arc<OpState>>> {
        let att = self.rma_check(op, src_rank, offset, len)?;
        let b = self.stats_block();
        b.add(Ctr::Gets, 1);
        b.add(Ctr::GetBytes, len as u64);
        if let Some(base) = att.peers[src_rank as usize] {
            // SAFETY: range checked against the source segment; `dst` valid per contract;
            // `ptr::copy` tolerates overlap (a get from this rank into its own segment).
            unsafe { std::ptr::copy(base.0.add(seg_off(offset)), dst, len) };
            return Ok(None);
        }
        if len == 0 {
            return Ok(None);
        }
        let st = track();
        let chunk = att.max_medium.max(1);
        let mut done = 0usize;
        while done < len {
            let n = chunk.min(len - done);
            let (op_lo, op_hi) = st.arm();
            let (off_lo, off_hi) = split64(offset + done as u64);
            let (dst_lo, dst_hi) = split64(dst as usize as u64 + done as u64);
            let n32 = u32::try_from(n)
                .map_err(|_| Error::conduit(self.conduit_name(), "max_medium exceeds 4 GiB"))?;
            self.lib_request(
                src_rank,
                &OutMsg {
                    handler: LIB_GET,
                    category: Category::Short,
                    is_reply: false,
                    args: &[off_lo, off_hi, n32, op_lo, op_hi, dst_lo, dst_hi],
                    payload: &[],
                    long_offset: 0,
                },
            )?;
            done += n;
        }
        Ok(Some(st))
    }

    fn new_op(&self) -> Arc<OpState> {
        Arc::new(OpState::new(self.inner.id))
    }

    fn wait_op(&self, st: &OpState) -> Result<()> {
        self.wait_inner(&mut || st.done())
    }

    /// Blocking put: copy `src` to `dest`'s segment at `offset`; complete on return.
    pub fn put(&self, dest: Rank, offset: u64, src: &[u8]) -> Result<()> {
        match self.put_start("put", dest, offset, src, || self.new_op())? {
            None => Ok(()),
            Some(st) => self.wait_op(&st),
        }
    }

    /// Blocking get: copy from `src_rank`'s segment at `offset` into `dst`.
    pub fn get(&self, src_rank: Rank, offset: u64, dst: &mut [u8]) -> Result<()> {
        // SAFETY: `dst` is borrowed mutably for the whole call and the call waits for completion.
        let st = unsafe {
            self.get_start("get", src_rank, offset, dst.as_mut_ptr(), dst.len(), || {
                self.new_op()
            })?
        };
        match st {
            None => Ok(()),
            Some(st) => self.wait_op(&st),
        }
    }

    /// Non-blocking put with an explicit handle. `src` is consumed before the call returns (it
    /// may be reused at once); the handle completes when the data is in the target segment.
    pub fn put_nb(&self, dest: Rank, offset: u64, src: &[u8]) -> Result<Handle> {
        let op = self.put_start("put_nb", dest, offset, src, || self.new_op())?;
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
        let op = unsafe { self.get_start("get_nb", src_rank, offset, dst, len, || self.new_op())? };
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

    fn nbi_target(&self) -> Arc<OpState> {
        self.with_thread_state(|ts| ts.region.as_ref().unwrap_or(ts.nbi).clone())
    }

    /// Non-blocking put with an implicit handle (synced by `wait_sync_nbi` or an access region).
    pub fn put_nbi(&self, dest: Rank, offset: u64, src: &[u8]) -> Result<()> {
        self.put_start("put_nbi", dest, offset, src, || self.nbi_target())?;
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
        unsafe { self.get_start("get_nbi", src_rank, offset, dst, len, || self.nbi_target())? };
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
        if st.done() {
            return Ok(true);
        }
        self.poll_inner(false)?;
        Ok(st.done())
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

    fn check_handle(&self, h: &Handle) -> Result<()> {
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
        if !op.done() {
            self.poll_inner(false)?;
        }
        if op.done() {
            h.op = None;
            return Ok(true);
        }
        Ok(false)
    }

    /// Wait until the operation behind `h` completes; `h` becomes invalid.
    pub fn wait_sync(&self, h: &mut Handle) -> Result<()> {
        not_in_handler("wait_sync")?;
        self.check_handle(h)?;
        if let Some(op) = h.op.take() {
            self.wait_op(&op)?;
        }
        Ok(())
    }

    fn sweep(hs: &mut [Handle]) -> (usize, usize) {
        let mut completed = 0;
        let mut pending = 0;
        for h in hs.iter_mut() {
            match &h.op {
                Some(op) if op.done() => {
                    h.op = None;
                    completed += 1;
                }
                Some(_) => pending += 1,
                None => {}
            }
        }
        (completed, pending)
    }

    /// True when every handle completed (completed ones become invalid). Polls once.
    pub fn try_sync_all(&self, hs: &mut [Handle]) -> Result<bool> {
        not_in_handler("try_sync_all")?;
        hs.iter().try_for_each(|h| self.check_handle(h))?;
        if Self::sweep(hs).1 == 0 {
            return Ok(true);
        }
        self.poll_inner(false)?;
        Ok(Self::sweep(hs).1 == 0)
    }

    /// Wait until every handle completed.
    pub fn wait_sync_all(&self, hs: &mut [Handle]) -> Result<()> {
        not_in_handler("wait_sync_all")?;
        hs.iter().try_for_each(|h| self.check_handle(h))?;
        self.wait_inner(&mut || Self::sweep(hs).1 == 0)
    }

    /// True when at least one handle completed or none is outstanding (completed ones become
    /// invalid). Polls once.
    pub fn try_sync_some(&self, hs: &mut [Handle]) -> Result<bool> {
        not_in_handler("try_sync_some")?;
        hs.iter().try_for_each(|h| self.check_handle(h))?;
        let (c, p) = Self::sweep(hs);
        if c > 0 || p == 0 {
            return Ok(true);
        }
        self.poll_inner(false)?;
        let (c, p) = Self::sweep(hs);
        Ok(c > 0 || p == 0)
    }

    /// Wait until at least one handle completed or none is outstanding.
    pub fn wait_sync_some(&self, hs: &mut [Handle]) -> Result<()> {
        not_in_handler("wait_sync_some")?;
        hs.iter().try_for_each(|h| self.check_handle(h))?;
        let mut any = false;
        self.wait_inner(&mut || {
            let (c, p) = Self::sweep(hs);
            any |= c > 0;
            any || p == 0
        })
    }
}
