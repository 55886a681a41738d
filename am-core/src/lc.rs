//! Medium and Long requests with local completion reported through a handle (spec/core.md
//! §3b), as GASNet-EX's `lc_opt` event: the conduit may send the payload from where it lies,
//! and the handle completes once it no longer reads it, so that the source may be reused.

use std::sync::Arc;

use crate::conduit::{Category, OutMsg};
use crate::endpoint::Endpoint;
use crate::rma::{Handle, OpState};
use crate::{Rank, Result};

impl Endpoint {
    /// [`request_medium`](Self::request_medium) with local completion reported through the
    /// returned handle instead of reached before the call returns: where the conduit sends the
    /// payload from the caller's memory (udp, payloads of 16 KiB and more), the handle
    /// completes once every datagram that carries it was acknowledged; where the conduit
    /// copies the payload (smp, mpi, smaller payloads), it is complete on return. Sync it
    /// with [`try_sync`](Self::try_sync), [`wait_sync`](Self::wait_sync) (and the `_all`,
    /// `_some` forms) or await it ([`sync_future`](Self::sync_future)). Errors as for
    /// `request_medium`.
    ///
    /// # Safety
    /// - `payload` stays valid and unchanged until the handle has completed (a sync returned)
    ///   or has been dropped: dropping it before completion makes the conduit copy what it
    ///   still needs of the payload before the drop returns.
    pub unsafe fn request_medium_nb(
        &self,
        dest: Rank,
        handler: u8,
        args: &[u32],
        payload: &[u8],
    ) -> Result<Handle> {
        let msg = self.checked_request(
            "request_medium_nb",
            dest,
            handler,
            (Category::Medium, 0),
            args,
            payload,
        )?;
        // SAFETY: forwarded contract.
        unsafe { self.send_lc(dest, &msg) }
    }

    /// [`request_long`](Self::request_long) with local completion reported through the
    /// returned handle, as for [`request_medium_nb`](Self::request_medium_nb): where the
    /// conduit sends the payload from the caller's memory (udp), the handle completes once the
    /// target acknowledged every datagram of it. Errors as for `request_long`.
    ///
    /// # Safety
    /// - As for [`request_medium_nb`](Self::request_medium_nb).
    pub unsafe fn request_long_nb(
        &self,
        dest: Rank,
        handler: u8,
        args: &[u32],
        payload: &[u8],
        dest_offset: u64,
    ) -> Result<Handle> {
        let msg = self.checked_request(
            "request_long_nb",
            dest,
            handler,
            (Category::Long, dest_offset),
            args,
            payload,
        )?;
        // SAFETY: forwarded contract.
        unsafe { self.send_lc(dest, &msg) }
    }

    /// Sends `msg` through the conduit's held path and tracks the hold, if it took one.
    ///
    /// # Safety
    /// - As for [`request_medium_nb`](Self::request_medium_nb), for `msg.payload`.
    unsafe fn send_lc(&self, dest: Rank, msg: &OutMsg<'_>) -> Result<Handle> {
        // SAFETY: the hold ends through the returned handle (its completion, or its drop),
        // before which the caller keeps the payload valid and unchanged; a send that failed
        // left no hold.
        unsafe { self.lib_request_held(dest, msg)? };
        let conduit = &*self.inner.conduit;
        if !conduit.held_pending(dest, msg.payload) {
            // Copied, or already acknowledged: nothing reads it any more.
            conduit.release_held(dest, msg.payload);
            return Ok(Handle::INVALID);
        }
        let st = Arc::new(OpState::new(self.inner.id));
        st.add_held(Arc::downgrade(&self.inner), dest, msg.payload);
        Ok(Handle { op: Some(st) })
    }
}
