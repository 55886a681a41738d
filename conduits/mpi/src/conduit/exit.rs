//! Leaving the job: the job-wide exit code and its notices (`Engine::request_exit`, the exit
//! receive), the exit barrier and finalization or abort (`Engine::leave`), the report of the
//! rank that ended the job, the lifeline to the spawner that names a rank that died, and what
//! the process does when it exits (`Engine::at_process_exit`, called from the core's one
//! process-exit hook through `Conduit::at_process_exit`).

use std::cell::Cell;
use std::sync::atomic::Ordering;
use std::sync::OnceLock;
use std::time::Instant;

use amnet_core::Result;

use super::receive::NO_SLOT;
use super::{lock, snooze, Engine, TAG_EXIT};
use crate::raw::{self, Request, Status};
use crate::wire;

pub(super) const RUNNING: u8 = 0;
const LEAVING: u8 = 1;
const FINALIZED: u8 = 2;

thread_local! {
    /// Set on the thread that is ending the process through the conduit.
    static LEAVING_HERE: Cell<bool> = const { Cell::new(false) };
}

fn pack_exit(origin: u32, code: i32) -> u64 {
    (1u64 << 63) | (u64::from(origin & 0x7fff_ffff) << 32) | u64::from(code as u32)
}

/// The exit barrier's key of an exit slot (or of `pack_exit`): the smallest key is the job's
/// code, a non-zero code before a zero one (a rank's return from `main` does not mask another's
/// error), then the lowest asking rank.
fn agreement_key(v: u64) -> u64 {
    let origin = (v >> 32) & 0x7fff_ffff;
    (u64::from(unpack_code(v) == 0) << 63) | (origin << 32) | (v & 0xffff_ffff)
}

/// The asking rank and the code of an agreement key.
fn unpack_key(k: u64) -> (u32, i32) {
    (
        u32::try_from((k >> 32) & 0x7fff_ffff).unwrap_or(u32::MAX),
        unpack_code(k),
    )
}

fn unpack_code(v: u64) -> i32 {
    #[allow(clippy::cast_possible_truncation)] // the low half holds the code's bits
    let c = v as u32 as i32;
    c
}

impl Engine {
    fn note_exit(&self, origin: u32, code: i32) {
        let _ = self.exit.compare_exchange(
            0,
            pack_exit(origin, code),
            Ordering::AcqRel,
            Ordering::Acquire,
        );
    }

    pub(super) fn exit_code(&self) -> Option<i32> {
        let v = self.exit.load(Ordering::Acquire);
        (v != 0).then(|| unpack_code(v))
    }

    pub(super) fn request_exit(&self, code: i32) -> i32 {
        match self.exit.compare_exchange(
            0,
            pack_exit(self.rank, code),
            Ordering::AcqRel,
            Ordering::Acquire,
        ) {
            Ok(_) => {
                if self.state.load(Ordering::Acquire) == RUNNING && !raw::finalized() {
                    let notice = wire::encode_exit(code);
                    for r in (0..self.size).filter(|&r| r != self.rank) {
                        if let Err(e) = self.send_control(r, TAG_EXIT, notice) {
                            amnet_core::diag!(
                                "amnet mpi rank {}: cannot send the exit notice to rank {r}: {e}",
                                self.rank
                            );
                        }
                    }
                }
                code
            }
            Err(cur) => unpack_code(cur),
        }
    }

    /// Test the exit slot alone (used while blocked in a collective).
    pub(super) fn test_exit_notice(&self) -> Result<()> {
        let mut rx = lock(&self.rx);
        let entry = rx.slots[0].entry;
        if rx.test_slot[entry] == NO_SLOT {
            // Already received (MPI_Test of a null request would report an empty status).
            return Ok(());
        }
        if let Some(st) = raw::test(&mut rx.test[entry])? {
            rx.retire(entry);
            self.on_exit_notice(&st)?;
        }
        Ok(())
    }

    pub(super) fn on_exit_notice(&self, st: &Status) -> Result<()> {
        let src = raw::source(st)?;
        let len = raw::received_len(st)?;
        // SAFETY: the exit receive completed and is never posted again.
        let buf = unsafe { self.bufs.read(0, len) };
        match wire::decode_exit(buf) {
            Ok(code) => self.note_exit(src, code),
            Err(e) => amnet_core::diag!(
                "amnet mpi rank {}: malformed exit notice from rank {src}: {e}; ending the job \
                 with code 1",
                self.rank
            ),
        }
        // The exit slot is not posted again: one notice ends the job. A malformed one ends it
        // too, since a peer that sent it is in an unknown state.
        if self.exit_code().is_none() {
            self.note_exit(src, 1);
        }
        Ok(())
    }

    /// Wait for `req` until `deadline`, sleeping between tests. True when it completed.
    fn wait_until(req: &mut Request, deadline: Instant) -> bool {
        let mut idle = 0u32;
        loop {
            match raw::test(req) {
                Ok(Some(_)) => return true,
                Ok(None) => {}
                Err(_) => return false,
            }
            if Instant::now() >= deadline {
                return false;
            }
            idle = idle.saturating_add(1);
            snooze(idle);
        }
    }

    /// Leave the job with `code`: every rank meets in the exit barrier, which agrees on the
    /// job's code, and finalizes MPI; if some rank does not arrive within the grace period,
    /// abort the job with `code`. Returns the job's code once MPI is finalized (or `code`, MPI
    /// finalized by the client); does not return otherwise.
    fn leave(&self, code: i32) -> i32 {
        if raw::finalized() {
            return code;
        }
        if self
            .state
            .compare_exchange(RUNNING, LEAVING, Ordering::AcqRel, Ordering::Acquire)
            .is_err()
        {
            // Another thread is ending the process; it will exit for this one too.
            loop {
                std::thread::park();
            }
        }
        LEAVING_HERE.with(|l| l.set(true));
        lifeline_say(b"leaving\n");
        let deadline = Instant::now() + self.settings.grace;
        // The exit barrier agrees on the job's code: ranks that asked for an exit at once each
        // recorded their own first, and on every rank the lowest asking rank's non-zero code
        // wins (`agreement_key`; no exit slot: this rank asks).
        let mine = agreement_key(match self.exit.load(Ordering::Acquire) {
            0 => pack_exit(self.rank, code),
            v => v,
        });
        // Leaked: MPI may still write the result should the wait give up (the job then aborts).
        let bufs: &'static mut [u64; 2] = Box::leak(Box::new([mine, u64::MAX]));
        let (v, out) = bufs.split_at_mut(1);
        // SAFETY: both words live for the rest of the process.
        let agreed = match unsafe { raw::iallreduce_min_u64(self.exit_comm, &v[0], &mut out[0]) } {
            // Read once the request completed (MPI no longer writes it).
            Ok(mut req) => Self::wait_until(&mut req, deadline).then(|| out[0]),
            Err(_) => None,
        };
        let Some(agreed) = agreed else {
            let (origin, mine_code) = unpack_key(mine);
            self.report_origin(origin, mine_code);
            amnet_core::diag!(
                "amnet mpi rank {}: not every rank left within {:.1} s of the job-wide exit; \
                 aborting the job with code {code}",
                self.rank,
                self.settings.grace.as_secs_f64()
            );
            raw::abort(code);
        };
        let (origin, code) = unpack_key(agreed);
        self.report_origin(origin, code);
        // Every rank is leaving: retire the receives and finalize. The locks stay held, so no
        // other thread of this process reaches MPI again.
        let mut rx = lock(&self.rx);
        let tx = lock(&self.tx);
        let rxm = &mut *rx;
        for r in rxm.reqs.iter_mut().chain(rxm.long_reqs.iter_mut()) {
            raw::cancel(r);
        }
        let grace = self.settings.grace;
        let _ = std::thread::Builder::new()
            .name("amnet-mpi-exit".into())
            .spawn(move || {
                std::thread::sleep(grace);
                raw::abort(code)
            });
        // Every rank passed the exit barrier, so every rank frees the window (collective);
        // should one not, the thread above aborts the job.
        if let Some(w) = self.rma.get() {
            w.close();
        }
        if let Err(e) = raw::finalize() {
            amnet_core::diag!("amnet mpi rank {}: {e}; aborting", self.rank);
            raw::abort(code);
        }
        self.state.store(FINALIZED, Ordering::Release);
        std::mem::forget(tx);
        std::mem::forget(rx);
        code
    }

    /// When this rank (`origin`) ended the job with a non-zero `code`, tell the launcher
    /// (which cannot see which rank it was: every rank leaves with the same code).
    fn report_origin(&self, origin: u32, code: i32) {
        let Some(path) = &self.settings.report else {
            return;
        };
        if code == 0 || origin != self.rank {
            return;
        }
        use std::io::Write;
        let line = format!("{} {code}\n", self.rank);
        let _ = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .and_then(|mut f| f.write_all(line.as_bytes()));
    }

    pub(super) fn terminate(&self, code: i32) -> ! {
        let code = self.leave(code);
        flush_std();
        // SAFETY: _exit ends the process at once; MPI is finalized and the output flushed.
        unsafe { libc::_exit(code) }
    }
}

/// This rank's connection to the spawner's lifeline socket, when it has one.
static LIFELINE: OnceLock<std::os::unix::net::UnixStream> = OnceLock::new();

/// Connect to the spawner's lifeline socket at `path` and say which rank this process is. The
/// connection stays open for the life of the process: the spawner sees it close when the
/// process ends, however it ends. A rank that cannot connect (another host) goes on without.
pub(super) fn lifeline_connect(path: &std::path::Path, rank: u32) {
    if let Ok(s) = std::os::unix::net::UnixStream::connect(path) {
        if LIFELINE.set(s).is_ok() {
            lifeline_say(format!("rank {rank}\n").as_bytes());
        }
    }
}

/// Tell the spawner `msg` over the lifeline, if there is one; never blocks for long and never
/// raises SIGPIPE (the spawner may be gone).
fn lifeline_say(msg: &[u8]) {
    use std::os::fd::AsRawFd;
    if let Some(s) = LIFELINE.get() {
        // SAFETY: the socket is open for the life of the process and `msg` is a valid buffer
        // of `msg.len()` bytes.
        let _ = unsafe {
            libc::send(
                s.as_raw_fd(),
                msg.as_ptr().cast(),
                msg.len(),
                libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT,
            )
        };
    }
}

fn flush_std() {
    use std::io::Write;
    let _ = std::io::stdout().flush();
    let _ = std::io::stderr().flush();
}

impl Engine {
    /// What the process does when it exits (a return from `main`, `std::process::exit`), after
    /// the core's exit hook published the job-wide exit request: the rank leaves MPI like
    /// `terminate` does, and ends the process at once with the job's code when that is not
    /// `status`.
    pub(super) fn at_process_exit(&self, status: i32) {
        if self.state.load(Ordering::Acquire) != RUNNING {
            if LEAVING_HERE.with(|l| l.get()) {
                return;
            }
            // Another thread is ending the process; let it.
            loop {
                std::thread::park();
            }
        }
        let code = self.request_exit(status);
        let code = self.leave(code);
        if code != status {
            flush_std();
            // SAFETY: _exit ends the process at once with the job's code; MPI is finalized.
            unsafe { libc::_exit(code) }
        }
    }
}
