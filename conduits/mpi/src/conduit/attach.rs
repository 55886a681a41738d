//! Attach: the exchange of blobs and the agreement on put/get (collectives on `comm` that
//! watch for a job-wide exit meanwhile), and `attach_segment`, which sets up native put/get or
//! the AM path and the local segment.

use std::sync::Arc;
use std::time::{Duration, Instant};

use amnet_core::{Error, LocalSegment, Result};

use super::{snooze, Engine, TAG_CREDIT};
use crate::raw::{self, Request};
use crate::segment;
use crate::wire;

/// How long a collective of attach may still complete after a job-wide exit was seen.
const COLLECTIVE_GRACE: Duration = Duration::from_millis(500);

impl Engine {
    pub(super) fn exchange(&self, blob: &[u8]) -> Result<Vec<Vec<u8>>> {
        let n = self.size as usize;
        let mine = Box::new(
            i32::try_from(blob.len())
                .map_err(|_| Error::conduit("mpi", "attach exchange: blob too large"))?,
        );
        let mut lens = vec![0i32; n];
        // SAFETY: both buffers are heap memory that lives until the request completes, or is
        // leaked when the wait gives up with the request still active.
        let mut req = unsafe { raw::iallgather_i32(&*mine, &mut lens, self.comm)? };
        if let Err(e) = self.wait_collective(&mut req, "the attach exchange") {
            std::mem::forget(mine);
            std::mem::forget(lens);
            return Err(e);
        }
        let mut displs = Vec::with_capacity(n);
        let mut total = 0i32;
        for &l in &lens {
            displs.push(total);
            total = total
                .checked_add(l)
                .ok_or_else(|| Error::conduit("mpi", "attach exchange: blobs too large"))?;
        }
        let mut all = vec![0u8; usize::try_from(total).unwrap_or(0)];
        let send = blob.to_vec();
        // SAFETY: as above, for every buffer; `lens` and `displs` describe disjoint ranges that
        // tile `all`.
        let mut req = unsafe { raw::iallgatherv(&send, &mut all, &lens, &displs, self.comm)? };
        if let Err(e) = self.wait_collective(&mut req, "the attach exchange") {
            std::mem::forget(send);
            std::mem::forget(all);
            std::mem::forget(lens);
            std::mem::forget(displs);
            return Err(e);
        }
        let mut out = Vec::with_capacity(n);
        for (&d, &l) in displs.iter().zip(&lens) {
            let d = usize::try_from(d).unwrap_or(0);
            let l = usize::try_from(l).unwrap_or(0);
            out.push(all.get(d..d + l).unwrap_or(&[]).to_vec());
        }
        Ok(out)
    }

    /// Collective: the bitwise or of every rank's `bits` (waited on like the attach exchange).
    fn agree(&self, bits: i32) -> Result<i32> {
        let mine = Box::new(bits);
        let mut all = Box::new(0i32);
        // SAFETY: both are heap cells that live until the request completes, or are leaked
        // when the wait gives up with the request still active.
        let mut req = unsafe { raw::iallreduce_bor(&*mine, &mut *all, self.comm)? };
        if let Err(e) = self.wait_collective(&mut req, "the attach agreement on put/get") {
            std::mem::forget(mine);
            std::mem::forget(all);
            return Err(e);
        }
        Ok(*all)
    }

    /// Wait for a collective, noticing a job-wide exit meanwhile; bounded by
    /// `AMNET_BOOT_TIMEOUT`.
    ///
    /// A job-wide exit seen meanwhile ends this rank, unless the collective completes within
    /// [`COLLECTIVE_GRACE`] of it: a rank that finished the collective first may have ended
    /// the job right after (returning from `main` after attach), and the ranks that left keep
    /// MPI progressing in the exit barrier. Attach then returns, and the client meets the exit
    /// at its next poll, as it would have had the collective completed a moment earlier here.
    fn wait_collective(&self, req: &mut Request, what: &str) -> Result<()> {
        let start = Instant::now();
        let mut idle = 0u32;
        let mut exit_seen: Option<Instant> = None;
        loop {
            if raw::test(req)?.is_some() {
                return Ok(());
            }
            self.test_exit_notice()?;
            if let Some(code) = self.exit_code() {
                let since = *exit_seen.get_or_insert_with(Instant::now);
                if since.elapsed() > COLLECTIVE_GRACE {
                    self.terminate(code);
                }
            }
            if start.elapsed() > self.settings.boot_timeout {
                return Err(Error::Timeout {
                    what: format!("every rank to join {what}"),
                    secs: self.settings.boot_timeout.as_secs(),
                });
            }
            idle = idle.saturating_add(1);
            snooze(idle);
        }
    }

    /// Attach the local segment (`Conduit::attach_segment`), or take `provided` memory as it
    /// (`Conduit::attach_segment_in`: put/get then take the AM path on every rank).
    ///
    /// # Safety
    /// - `provided`, if some, is valid for reads and writes of its length, page-aligned, for
    ///   the conduit's whole life.
    pub(super) unsafe fn attach_segment(
        self: &Arc<Self>,
        len: usize,
        lens: &[usize],
        provided: Option<LocalSegment>,
    ) -> Result<LocalSegment> {
        let eng = &**self;
        segment::check_lengths(lens)?;
        if eng.seg.get().is_some() {
            return Err(Error::AlreadyAttached);
        }
        let len = provided.map_or(len, |p| p.len);
        let mut opened = crate::rma::open(
            eng.comm,
            (eng.rank, len, lens),
            eng.settings.rma_chunk,
            (eng.settings.rma_am, provided.is_some()),
            &|bits| eng.agree(bits),
        )?;
        if let Some(p) = provided {
            // Every rank took the AM path (the provided bit is or-ed over the job): the
            // segment is no window's.
            // SAFETY: forwarded contract.
            opened.seg = unsafe { segment::Segment::provided(p.base, p.len) };
        }
        if eng.settings.verbose && eng.rank == 0 {
            amnet_core::diag!("amnet mpi: {}", opened.summary);
            let max = wire::MAX_INLINE;
            if opened.window.is_some() {
                amnet_core::diag!(
                    "amnet mpi: Long payloads of {} B or more: MPI_Put into the target segment \
                     and MPI_Win_flush before the header is sent; smaller ones inline",
                    eng.settings.long_put
                );
            } else {
                amnet_core::diag!(
                    "amnet mpi: Long payloads: inline up to {max} B, larger ones as a separate \
                     message received into the target segment"
                );
            }
        }
        let seg = opened.seg;
        let local = LocalSegment {
            base: seg.base(),
            len: seg.len(),
        };
        eng.seg.set(seg).map_err(|_| Error::AlreadyAttached)?;
        if let Some(w) = opened.window {
            if w.needs_target_progress() {
                let weak = Arc::downgrade(self);
                w.set_nudger(Box::new(move |dest| {
                    let Some(eng) = weak.upgrade() else {
                        return false;
                    };
                    // Best effort, and never waiting: a put made while this thread holds the
                    // send lock (none does today) must not deadlock on it.
                    let Ok(mut tx) = eng.tx.try_lock() else {
                        return false;
                    };
                    eng.push_control(&mut tx, dest, TAG_CREDIT, wire::encode_nudge())
                        .is_ok()
                }));
            }
            let _ = eng.rma.set(Arc::new(w));
        }
        Ok(local)
    }
}
