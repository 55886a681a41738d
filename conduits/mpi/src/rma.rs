//! Native put/get with MPI one-sided communication: one window over every rank's segment
//! (`MPI_Win_allocate`, so the segment is the window's memory), a passive-target epoch towards
//! every rank for the life of the job (`MPI_Win_lock_all` with `MPI_MODE_NOCHECK`), and
//! `MPI_Put`/`MPI_Get` completed by `MPI_Win_flush`.
//!
//! [`open`] creates the window at attach and probes it; every rank agrees on the verdict, and
//! when any rank finds the window unusable every rank falls back to the core's AM path over a
//! segment of its own.
//!
//! Completion bookkeeping is per target rank: `issued[r]` numbers the non-blocking operations
//! started towards `r` (after the MPI call returned), and `flushed[r]` is the highest number
//! known complete. Completing a ticket whose number is above `flushed[r]` reads `issued[r]`,
//! flushes `r` (which completes every operation this process started towards `r` before the
//! flush, from any thread) and raises `flushed[r]` to what it read. MPI has no non-blocking
//! test of remote completion, so `test` flushes as `wait` does: a flush needs no handler to
//! run anywhere and ends in bounded time.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{OnceLock, RwLock};
use std::time::{Duration, Instant};

use amnet_core::{now_ns, Error, NativeRma, Rank, Result, RmaTicket};

use crate::raw::{self, Comm, Win};
use crate::segment::Segment;

/// Scratch bytes after the segment in every rank's window, for the probe at attach (so that a
/// rank with an empty segment can be probed too). Clients never address them: the core checks
/// every range against the segment length.
const PROBE_BYTES: usize = 64;
/// Where in the scratch area the probe writes (unaligned on purpose), and how many bytes.
const PROBE_AT: usize = 3;
const PROBE_LEN: usize = 16;
/// Page size the segment is aligned to in the window's memory, and its offset bits.
const PAGE: usize = 4096;
const PAGE_BITS: i32 = 4095;

/// The progress probe: rank 1 makes no MPI call for this long while rank 0 puts to it and
/// flushes; a flush that lasts half of it waited for rank 1's progress.
const QUIET: Duration = Duration::from_millis(10);
/// Rank 0 starts its probe put this long after the agreement, when rank 1 has left it.
const QUIET_LEAD: Duration = Duration::from_millis(1);
/// A rank whose operations need the target's progress nudges each target at most this often
/// while it operates on it (the target stays awake for `AwakeWindow::SPAN_NS` after a nudge).
const NUDGE_EVERY_NS: u64 = 200_000;
/// ... and reads the clock for that every this many operations, or at every operation of at
/// least `NUDGE_CHECK_BYTES`.
const NUDGE_CHECK_EVERY: u32 = 4;
const NUDGE_CHECK_BYTES: usize = 4096;

/// Sends a nudge to a rank; false when it could not (the nudge is then tried again later).
pub(crate) type Nudger = Box<dyn Fn(u32) -> bool + Send + Sync>;

/// Why the native path is not in use (bits, or-ed over every rank).
const WHY_DISABLED: i32 = 1;
const WHY_OLD_MPI: i32 = 2;
const WHY_CREATE: i32 = 4;
const WHY_MODEL: i32 = 8;
const WHY_LOCK: i32 = 16;
const WHY_SELF: i32 = 32;
const WHY_PEER: i32 = 64;
const WHY_MEMORY: i32 = 128;
/// The segment is memory the layer above provides (the host-local bypass's shared memory);
/// set by the ranks that attach that way, and every rank then takes the AM path.
const WHY_PROVIDED: i32 = 256;

fn reasons(bits: i32) -> Vec<&'static str> {
    [
        (WHY_DISABLED, "AMNET_RMA=am"),
        (WHY_OLD_MPI, "the MPI library predates MPI-3"),
        (WHY_CREATE, "MPI_Win_allocate failed"),
        (WHY_MODEL, "the window's memory model is MPI_WIN_SEPARATE"),
        (WHY_LOCK, "MPI_Win_lock_all failed"),
        (WHY_SELF, "the test put/get to the rank itself failed"),
        (WHY_PEER, "the test get from the next rank failed"),
        (WHY_MEMORY, "the window's memory cannot be backed"),
        (
            WHY_PROVIDED,
            "the segments are the host-local bypass's shared memory",
        ),
    ]
    .into_iter()
    .filter(|&(b, _)| bits & b != 0)
    .map(|(_, s)| s)
    .collect()
}

/// The probe's bytes for `rank`.
fn probe_pattern(rank: u32) -> [u8; PROBE_LEN] {
    let mut p = [0u8; PROBE_LEN];
    let mut x = u64::from(rank).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0xA5A5_5A5A_0F0F_F0F0;
    for b in &mut p {
        x = x.rotate_left(13).wrapping_mul(0x2545_F491_4F6C_DD1D);
        *b = x.to_le_bytes()[7];
    }
    p
}

/// The window over every rank's segment, open for native put/get.
pub(crate) struct Window {
    win: Win,
    rank: u32,
    /// Local segment (the window's memory), for operations on this rank itself.
    base: *mut u8,
    len: usize,
    /// The segment's displacement in every rank's window (the same on all).
    skip: u64,
    /// Bytes per MPI call; larger transfers are split (MPI counts are `int`).
    chunk: usize,
    /// Per target rank: non-blocking operations started.
    issued: Box<[AtomicU64]>,
    /// Per target rank: every operation numbered up to this is complete.
    flushed: Box<[AtomicU64]>,
    /// True while the window is open. Operations hold it shared; leaving takes it exclusively
    /// before freeing the window, so no operation runs on a freed window.
    open: RwLock<bool>,
    /// Set once this rank has started an `MPI_Put` (or received a message from a rank that had
    /// this set): from then on every message it sends asks its receiver for `MPI_Win_sync`.
    touched: AtomicBool,
    /// The progress probe found that an operation completes only once its target calls MPI
    /// (MPICH's windows, for one): a target whose idle wait sleeps then delays every operation
    /// by a sleep, so operations nudge their target, which then stays awake.
    needs_target: bool,
    /// Sends a nudge (set by the conduit when `needs_target`).
    nudger: OnceLock<Nudger>,
    /// Operations started, for reading the clock every `NUDGE_CHECK_EVERY`.
    ops: AtomicU32,
    /// Per target rank: when (`now_ns`) it was last nudged.
    nudged: Box<[AtomicU64]>,
}

// SAFETY: `win` is a process-wide MPI handle (calls serialized by `raw::locked` below
// MPI_THREAD_MULTIPLE); `base..base + len` is the local segment, whose accesses follow the
// client's protocol as for every conduit; the counters are atomics.
unsafe impl Send for Window {}
// SAFETY: as above.
unsafe impl Sync for Window {}

/// What [`open`] produced.
pub(crate) struct Opened {
    /// The local segment: the window's memory, or a mapping of its own on the AM path.
    pub(crate) seg: Segment,
    /// The window, when put/get run natively.
    pub(crate) window: Option<Window>,
    /// One line for `AMNET_VERBOSE`: which path, and why.
    pub(crate) summary: String,
}

/// Collective, at attach: create the window with a segment of `len` bytes, probe it, and agree
/// with every rank. `agree` or-s a value over every rank (waiting as the conduit's collectives
/// do). Falls back to a segment of its own, with no window, when any rank's probe fails,
/// `disabled` (`AMNET_RMA=am`) holds on any rank or some rank's segment is `provided` (the
/// caller then replaces the segment by the provided memory).
pub(crate) fn open(
    comm: Comm,
    (rank, len, lens): (u32, usize, &[usize]),
    chunk: usize,
    (disabled, provided): (bool, bool),
    agree: &dyn Fn(i32) -> Result<i32>,
) -> Result<Opened> {
    let size = u32::try_from(lens.len())
        .map_err(|_| Error::conduit("mpi", "more ranks than a u32 counts"))?;
    let mut why = 0;
    if disabled {
        why |= WHY_DISABLED;
    }
    if provided {
        why |= WHY_PROVIDED;
    }
    let (version, subversion) = raw::version();
    if version < 3 {
        why |= WHY_OLD_MPI;
    }
    let why = agree(why)?;
    if why != 0 {
        return fallback(len, why, None);
    }

    let mut why = 0;
    let mut detail: Option<String> = None;
    let mut note = |bit: i32, e: &Error, why: &mut i32| {
        *why |= bit;
        detail.get_or_insert_with(|| e.to_string());
    };
    // A page to spare: the segment starts at the first page boundary of the window's memory
    // (MPI_Win_allocate returns it 8 bytes past one under Open MPI, which slows every bulk
    // copy between the segment and page-aligned memory; see `amnet_core::mem`).
    let total = len.saturating_add(PROBE_BYTES + PAGE);
    let mut created = None;
    let mut locked = false;
    let allocated = raw::win_allocate(total, comm);
    // Every rank displaces its accesses by the same `skip`: each rank's own, when they all
    // agree, else none (the segment then starts where MPI put it).
    let own = allocated
        .as_ref()
        .map_or(0, |&(_, base)| base.align_offset(PAGE).min(PAGE - 1));
    let own_bits = i32::try_from(own).unwrap_or(0);
    let any = agree(own_bits)?;
    let anti = agree(!own_bits & PAGE_BITS)?;
    let skip = if any & anti == 0 { own } else { 0 };
    match allocated {
        Err(e) => note(WHY_CREATE, &e, &mut why),
        Ok((win, base)) => {
            // SAFETY: `skip < PAGE`, within the `total` bytes at `base`.
            let base = unsafe { base.add(skip) };
            created = Some((win, base));
            match raw::win_unified(win) {
                Ok(true) => {}
                Ok(false) => why |= WHY_MODEL,
                Err(e) => note(WHY_MODEL, &e, &mut why),
            }
            match raw::win_lock_all(win) {
                Ok(()) => locked = true,
                Err(e) => note(WHY_LOCK, &e, &mut why),
            }
            // The segment starts zero-filled. No rank accesses this memory before the
            // agreement below, which every rank reaches only after this; zeroing later could
            // erase a peer's first put.
            // SAFETY: the window's memory is `total` bytes at `base - skip`, ours alone until
            // then.
            let zeroed = unsafe { commit_zeroed(base, total - skip) };
            if let Err(e) = zeroed {
                note(WHY_MEMORY, &e, &mut why);
            } else if locked {
                if let Err(e) = probe_self(win, rank, base, len, skip as u64) {
                    note(WHY_SELF, &e, &mut why);
                }
            }
        }
    }
    // Every rank's self-probe is complete once this returns: the peer probe may read it.
    let mut why = agree(why)?;
    if why == 0 {
        if let Some((win, _)) = created {
            let next = (rank + 1) % size;
            let mine = match probe_peer(win, next, lens[next as usize], skip as u64) {
                Ok(()) => 0,
                Err(e) => {
                    detail.get_or_insert_with(|| e.to_string());
                    WHY_PEER
                }
            };
            why = agree(mine)?;
        }
    }
    let mut needs_target = false;
    if why == 0 && size >= 2 {
        if let Some((win, _)) = created {
            let slow = probe_progress(win, rank, lens[1], skip as u64);
            needs_target = agree(i32::from(slow))? != 0;
        }
    }
    let Some((win, base)) = created else {
        return fallback(len, why, detail);
    };
    if why != 0 {
        if locked {
            let _ = raw::win_unlock_all(win);
        }
        if why & WHY_CREATE == 0 {
            // Every rank has the window: free it together.
            raw::win_free(win)?;
        }
        // Otherwise some rank has none, and freeing (collective) would wait for it forever: the
        // window is left as it is until the process ends.
        return fallback(len, why, detail);
    }
    // SAFETY: the window's memory is `total - skip >= len` bytes at `base`, zero-filled above
    // and valid until the window is freed when the process leaves.
    let seg = unsafe { Segment::in_window(base, len) };
    let window = Window {
        win,
        rank,
        base,
        len,
        skip: skip as u64,
        chunk: chunk.clamp(1, raw::RMA_CHUNK),
        issued: (0..size).map(|_| AtomicU64::new(0)).collect(),
        flushed: (0..size).map(|_| AtomicU64::new(0)).collect(),
        open: RwLock::new(true),
        touched: AtomicBool::new(false),
        needs_target,
        nudger: OnceLock::new(),
        ops: AtomicU32::new(0),
        nudged: (0..size).map(|_| AtomicU64::new(0)).collect(),
    };
    let progress = if needs_target {
        "operations complete only in the target's MPI calls: they nudge the target, whose idle \
         waits then stay awake"
    } else {
        "operations complete without the target's MPI calls"
    };
    let summary = format!(
        "put/get native: {} (MPI {version}.{subversion}: MPI_Win_allocate over each segment, \
         MPI_Win_lock_all epoch, MPI_Put/MPI_Get + MPI_Win_flush; probe passed on every rank; \
         {progress})",
        window.describe()
    );
    Ok(Opened {
        seg,
        window: Some(window),
        summary,
    })
}

/// Back `len` bytes at `base` with memory and zero them. A window's memory may be a mapping
/// of a file in a memory file system (Open MPI's shared-memory windows live in `/dev/shm`),
/// where touching a page that the file system cannot back raises SIGBUS: the pages are
/// populated first (`MADV_POPULATE_WRITE`), which reports that as an error instead. Kernels
/// without it (before Linux 5.14) zero the memory directly.
///
/// # Safety
/// - `base` is valid for `len` bytes of writes, and nothing else accesses them meanwhile.
unsafe fn commit_zeroed(base: *mut u8, len: usize) -> Result<()> {
    if len == 0 {
        return Ok(());
    }
    #[cfg(any(target_os = "linux", target_os = "android"))]
    {
        // SAFETY: sysconf has no preconditions.
        let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) })
            .unwrap_or(4096)
            .max(1);
        let start = base as usize & !(page - 1);
        let end = (base as usize).saturating_add(len);
        // SAFETY: the pages from `start` to `end` hold the window's memory (the first and last
        // may be shared with other mapped memory of MPI's); populating them for writing changes
        // no byte of them.
        let rc = unsafe {
            libc::madvise(
                start as *mut libc::c_void,
                end - start,
                libc::MADV_POPULATE_WRITE,
            )
        };
        if rc != 0 {
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EINVAL) {
                return Err(Error::os(
                    "mpi",
                    format!("madvise(MADV_POPULATE_WRITE) of the {len} bytes of the window"),
                    e,
                ));
            }
        }
    }
    // SAFETY: per the contract.
    unsafe { std::ptr::write_bytes(base, 0, len) };
    Ok(())
}

fn fallback(len: usize, why: i32, detail: Option<String>) -> Result<Opened> {
    let mut summary = format!("put/get on the AM path: {}", reasons(why).join("; "));
    if let Some(d) = detail {
        summary.push_str(&format!(" ({d})"));
    }
    Ok(Opened {
        seg: Segment::new(len)?,
        window: None,
        summary,
    })
}

/// Put the probe pattern into this rank's scratch bytes through MPI, read it back through MPI,
/// and compare both with the memory itself.
fn probe_self(win: Win, rank: u32, base: *mut u8, len: usize, skip: u64) -> Result<()> {
    let want = probe_pattern(rank);
    let at = skip + (len + PROBE_AT) as u64;
    // SAFETY: `want` lives until the flush below completes the put; the target range lies in
    // the scratch bytes of this rank's window.
    unsafe { raw::put(want.as_ptr(), PROBE_LEN, rank, at, win)? };
    raw::flush(rank, win)?;
    let mut back = [0u8; PROBE_LEN];
    // SAFETY: `back` lives until the flush below completes the get.
    unsafe { raw::get(back.as_mut_ptr(), PROBE_LEN, rank, at, win)? };
    raw::flush(rank, win)?;
    raw::win_sync(win)?;
    let mut direct = [0u8; PROBE_LEN];
    // SAFETY: the scratch bytes lie inside the window's memory at `base`.
    unsafe {
        std::ptr::copy_nonoverlapping(base.add(len + PROBE_AT), direct.as_mut_ptr(), PROBE_LEN);
    }
    if back != want || direct != want {
        return Err(Error::conduit(
            "mpi",
            "the test put/get to this rank's own window read back different bytes",
        ));
    }
    Ok(())
}

/// Read the next rank's probe pattern from its scratch bytes, which follow its segment of
/// `next_len` bytes (at displacement `skip`).
fn probe_peer(win: Win, next: u32, next_len: usize, skip: u64) -> Result<()> {
    let mut got = [0u8; PROBE_LEN];
    let at = skip + (next_len + PROBE_AT) as u64;
    // SAFETY: `got` lives until the flush below completes the get.
    unsafe { raw::get(got.as_mut_ptr(), PROBE_LEN, next, at, win)? };
    raw::flush(next, win)?;
    if got != probe_pattern(next) {
        return Err(Error::conduit(
            "mpi",
            format!("the test get from rank {next}'s window read different bytes"),
        ));
    }
    Ok(())
}

/// The progress probe, between ranks 0 and 1 (the others return at once): rank 1 makes no MPI
/// call for `QUIET` while rank 0 puts 8 bytes into its scratch bytes (after its segment of
/// `len1` bytes, past the probe pattern) and flushes. True on rank 0 when the flush lasted at
/// least half of `QUIET`: it waited for rank 1's progress. A rank 0 held off its core for that
/// long reads the same, which costs only the nudges.
fn probe_progress(win: Win, rank: u32, len1: usize, skip: u64) -> bool {
    match rank {
        0 => {
            std::thread::sleep(QUIET_LEAD);
            let word = [0x5au8; 8];
            let at = skip + (len1 + PROBE_AT + PROBE_LEN) as u64;
            let t = Instant::now();
            // SAFETY: `word` lives until the flush below completes the put; the target range
            // lies in rank 1's scratch bytes, which no probe reads.
            let ok = unsafe { raw::put(word.as_ptr(), word.len(), 1, at, win) }.is_ok()
                && raw::flush(1, win).is_ok();
            ok && t.elapsed() >= QUIET / 2
        }
        1 => {
            std::thread::sleep(QUIET);
            false
        }
        _ => false,
    }
}

impl Window {
    /// True when operations complete only once their target calls MPI (see `needs_target`).
    pub(crate) fn needs_target_progress(&self) -> bool {
        self.needs_target
    }

    /// Give the window the means to nudge a target; once only.
    pub(crate) fn set_nudger(&self, f: Nudger) {
        let _ = self.nudger.set(f);
    }

    /// Before an operation of `len` bytes on `dest`: when operations need the target's
    /// progress, nudge `dest` unless it was nudged in the last `NUDGE_EVERY_NS`.
    #[inline]
    fn nudge_target(&self, dest: u32, len: usize) {
        if self.needs_target {
            self.nudge_slow(dest, len);
        }
    }

    #[inline(never)]
    fn nudge_slow(&self, dest: u32, len: usize) {
        let n = self.ops.fetch_add(1, Ordering::Relaxed);
        if n % NUDGE_CHECK_EVERY != 0 && len < NUDGE_CHECK_BYTES {
            return;
        }
        let Some(last) = self.nudged.get(dest as usize) else {
            return;
        };
        let now = now_ns().max(1);
        let then = last.load(Ordering::Relaxed);
        if then != 0 && now.saturating_sub(then) < NUDGE_EVERY_NS {
            return;
        }
        if self.nudger.get().is_some_and(|f| f(dest)) {
            last.store(now, Ordering::Relaxed);
        }
    }

    /// Leave: end the epoch and free the window (collective: every rank is leaving). Waits for
    /// operations running on other threads; later ones fail.
    pub(crate) fn close(&self) {
        let mut open = self.open.write().unwrap_or_else(|e| e.into_inner());
        if !*open {
            return;
        }
        *open = false;
        let _ = raw::win_unlock_all(self.win);
        let _ = raw::win_free(self.win);
    }

    /// True once this rank has written into a window with `MPI_Put`, or received a message that
    /// asked for `MPI_Win_sync` (see [`Window::touch`]).
    #[inline]
    pub(crate) fn touched(&self) -> bool {
        self.touched.load(Ordering::Acquire)
    }

    /// Note that this rank's messages must ask their receivers for `MPI_Win_sync` from now on:
    /// it is about to put, or it has received a message whose sender had put (or heard from a
    /// rank that had), so what it sends from now on may follow such a put.
    #[inline]
    pub(crate) fn touch(&self) {
        if !self.touched.load(Ordering::Relaxed) {
            self.touched.store(true, Ordering::Release);
        }
    }

    /// Order this rank's reads of its segment after the puts that completed before a message
    /// it just received was sent (`MPI_Win_sync`).
    #[inline]
    pub(crate) fn sync(&self) {
        let open = self.open.read().unwrap_or_else(|e| e.into_inner());
        if *open {
            let _ = raw::win_sync(self.win);
        }
    }

    fn gate(&self) -> Result<std::sync::RwLockReadGuard<'_, bool>> {
        let open = self.open.read().unwrap_or_else(|e| e.into_inner());
        if *open {
            Ok(open)
        } else {
            Err(Error::conduit(
                "mpi",
                "the job is ending: the RMA window is closed",
            ))
        }
    }

    /// The address of `[offset, offset + len)` in the local segment (the core checked it).
    fn local(&self, offset: u64, len: usize) -> Result<*mut u8> {
        let off = usize::try_from(offset)
            .ok()
            .filter(|&o| o.checked_add(len).is_some_and(|end| end <= self.len));
        let off = off.ok_or_else(|| {
            Error::conduit(
                "mpi",
                format!("range {offset}+{len} outside the local segment"),
            )
        })?;
        // SAFETY: `off + len <= self.len`, inside the segment.
        Ok(unsafe { self.base.add(off) })
    }

    /// Start puts of `src` at `offset` on `dest`, in pieces MPI's `int` counts can carry.
    #[inline]
    fn start_put(&self, dest: u32, offset: u64, src: &[u8]) -> Result<()> {
        let offset = offset + self.skip;
        if src.len() <= self.chunk {
            // SAFETY: `src` outlives the flush every caller makes before returning.
            return unsafe { raw::put(src.as_ptr(), src.len(), dest, offset, self.win) };
        }
        for (i, piece) in src.chunks(self.chunk).enumerate() {
            let at = offset + (i * self.chunk) as u64;
            // SAFETY: `src` outlives the flush every caller makes before returning.
            unsafe { raw::put(piece.as_ptr(), piece.len(), dest, at, self.win)? };
        }
        Ok(())
    }

    /// Start gets of `len` bytes into `dst`.
    ///
    /// # Safety
    /// - `dst` is valid for `len` bytes of writes until the operation completes.
    unsafe fn start_get(&self, src: u32, offset: u64, dst: *mut u8, len: usize) -> Result<()> {
        let offset = offset + self.skip;
        let mut done = 0;
        while done < len {
            let n = (len - done).min(self.chunk);
            // SAFETY: `dst + done .. + n` lies inside the destination, valid per the contract.
            unsafe { raw::get(dst.add(done), n, src, offset + done as u64, self.win)? };
            done += n;
        }
        Ok(())
    }

    /// Complete every operation started towards `r` so far.
    fn flush_to(&self, r: u32) -> Result<()> {
        let i = r as usize;
        let mark = self.issued[i].load(Ordering::Acquire);
        raw::flush(r, self.win)?;
        // Usually nothing new is covered (blocking operations take no ticket): skip the write.
        if self.flushed[i].load(Ordering::Relaxed) < mark {
            self.flushed[i].fetch_max(mark, Ordering::AcqRel);
        }
        Ok(())
    }

    fn ticket(&self, r: u32) -> RmaTicket {
        let id = self.issued[r as usize].fetch_add(1, Ordering::AcqRel) + 1;
        RmaTicket { rank: r, id }
    }

    fn complete(&self, t: RmaTicket) -> Result<()> {
        let i = t.rank as usize;
        if i >= self.flushed.len() || self.flushed[i].load(Ordering::Acquire) >= t.id {
            return Ok(());
        }
        let _open = self.gate()?;
        self.flush_to(t.rank)
    }
}

impl NativeRma for Window {
    fn describe(&self) -> String {
        "MPI one-sided".into()
    }

    fn put(&self, dest: Rank, offset: u64, src: &[u8]) -> Result<()> {
        if dest == self.rank {
            let dst = self.local(offset, src.len())?;
            // SAFETY: the range lies in the local segment; `ptr::copy` tolerates a source
            // inside the segment.
            unsafe { amnet_core::mem::copy(src.as_ptr(), dst, src.len()) };
            return Ok(());
        }
        let _open = self.gate()?;
        self.touch();
        self.nudge_target(dest, src.len());
        self.start_put(dest, offset, src)?;
        self.flush_to(dest)
    }

    unsafe fn get(&self, src_rank: Rank, offset: u64, dst: *mut u8, len: usize) -> Result<()> {
        if src_rank == self.rank {
            let src = self.local(offset, len)?;
            // SAFETY: `dst` is valid for `len` bytes per the contract; `ptr::copy` tolerates
            // a destination inside the segment.
            unsafe { amnet_core::mem::copy(src, dst, len) };
            return Ok(());
        }
        let _open = self.gate()?;
        self.nudge_target(src_rank, len);
        // SAFETY: forwarded contract; the flush below completes the gets.
        unsafe { self.start_get(src_rank, offset, dst, len)? };
        raw::flush_local(src_rank, self.win)
    }

    fn put_nb(&self, dest: Rank, offset: u64, src: &[u8]) -> Result<Option<RmaTicket>> {
        if dest == self.rank {
            self.put(dest, offset, src)?;
            return Ok(None);
        }
        let _open = self.gate()?;
        self.touch();
        self.nudge_target(dest, src.len());
        self.start_put(dest, offset, src)?;
        // `src` must be consumed before returning: complete the put at the origin now, and at
        // the target when the ticket is synced.
        raw::flush_local(dest, self.win)?;
        Ok(Some(self.ticket(dest)))
    }

    unsafe fn get_nb(
        &self,
        src_rank: Rank,
        offset: u64,
        dst: *mut u8,
        len: usize,
    ) -> Result<Option<RmaTicket>> {
        if src_rank == self.rank {
            // SAFETY: forwarded contract.
            unsafe { self.get(src_rank, offset, dst, len)? };
            return Ok(None);
        }
        let _open = self.gate()?;
        self.nudge_target(src_rank, len);
        // SAFETY: forwarded contract: `dst` stays valid until the ticket completes.
        unsafe { self.start_get(src_rank, offset, dst, len)? };
        Ok(Some(self.ticket(src_rank)))
    }

    fn test(&self, t: RmaTicket) -> Result<bool> {
        self.complete(t).map(|()| true)
    }

    fn wait(&self, t: RmaTicket) -> Result<()> {
        self.complete(t)
    }
}
