//! The MPI calls the conduit makes, each wrapped once: argument conversion, the error check,
//! and the lock that serializes calls when the library did not grant `MPI_THREAD_MULTIPLE`.
//!
//! The conduit talks to the C interface (`mpi::ffi`) directly: its receive pool, its send queue
//! and `MPI_Testsome` over both need requests that outlive any Rust scope, which rsmpi's safe
//! request types do not offer. rsmpi still initializes MPI, so that a client using rsmpi on the
//! world communicator shares the same library state.

use std::os::raw::{c_char, c_int, c_void};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use amnet_core::{Error, Result};
use mpi::ffi;

pub(crate) type Request = ffi::MPI_Request;
pub(crate) type Status = ffi::MPI_Status;

/// `MPI_SUCCESS`, which the standard fixes at 0.
const SUCCESS: c_int = 0;

/// True when the library granted less than `MPI_THREAD_MULTIPLE`: every call then takes
/// [`LOCK`].
static SERIAL: AtomicBool = AtomicBool::new(false);
static LOCK: Mutex<()> = Mutex::new(());

/// Serialize every later MPI call of this crate (and of [`locked`] callers) behind one lock.
pub(crate) fn set_serialized(on: bool) {
    SERIAL.store(on, Ordering::Release);
}

/// Run `f` holding the MPI lock when calls must be serialized; directly otherwise.
#[inline]
pub(crate) fn locked<R>(f: impl FnOnce() -> R) -> R {
    if SERIAL.load(Ordering::Acquire) {
        let _g = LOCK.lock().unwrap_or_else(|e| e.into_inner());
        f()
    } else {
        f()
    }
}

/// A communicator handle. MPI handles are process-wide names, valid on every thread.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Comm(pub(crate) ffi::MPI_Comm);

// SAFETY: a communicator handle is an opaque process-wide identifier; MPI (at the thread level
// in force, with `locked` serializing calls below MPI_THREAD_MULTIPLE) lets any thread use it.
unsafe impl Send for Comm {}
// SAFETY: as above.
unsafe impl Sync for Comm {}

/// `MPI_COMM_WORLD`.
pub(crate) fn world() -> Comm {
    // SAFETY: reading an immutable handle exported by the rsmpi shim.
    Comm(unsafe { ffi::RSMPI_COMM_WORLD })
}

/// `MPI_REQUEST_NULL`.
#[inline]
pub(crate) fn null_request() -> Request {
    // SAFETY: reading an immutable handle exported by the rsmpi shim.
    unsafe { ffi::RSMPI_REQUEST_NULL }
}

/// An empty status to pass to MPI for filling.
#[inline]
pub(crate) fn empty_status() -> Status {
    // SAFETY: MPI_Status is a plain C struct of integers, for which all-zero bytes are valid.
    unsafe { std::mem::zeroed() }
}

/// The text MPI gives for an error code.
pub(crate) fn error_string(rc: c_int) -> String {
    let mut buf = [0 as c_char; 512];
    let mut len: c_int = 0;
    // SAFETY: the buffer holds more than MPI_MAX_ERROR_STRING (256) characters, as required;
    // MPI_Error_string may be called at any time.
    let ok = unsafe { ffi::MPI_Error_string(rc, buf.as_mut_ptr(), &mut len) };
    if ok != SUCCESS {
        return format!("MPI error {rc}");
    }
    let len = usize::try_from(len).unwrap_or(0).min(buf.len());
    let bytes: Vec<u8> = buf[..len].iter().map(|&c| c.to_ne_bytes()[0]).collect();
    format!("{} (MPI error {rc})", String::from_utf8_lossy(&bytes))
}

/// Turn an MPI return code into a conduit error naming the call.
#[inline]
pub(crate) fn check(rc: c_int, what: &str) -> Result<()> {
    if rc == SUCCESS {
        Ok(())
    } else {
        Err(failed(rc, what))
    }
}

/// The error of a failed MPI call (kept out of line: the calls above are on hot paths).
#[cold]
#[inline(never)]
fn failed(rc: c_int, what: &str) -> Error {
    Error::conduit("mpi", format!("{what}: {}", error_string(rc)))
}

#[inline]
fn count(len: usize, what: &str) -> Result<c_int> {
    c_int::try_from(len).map_err(|_| too_large(len, what))
}

#[cold]
#[inline(never)]
fn too_large(len: usize, what: &str) -> Error {
    Error::conduit(
        "mpi",
        format!("{what}: {len} bytes exceed one MPI message's count"),
    )
}

#[inline]
fn peer(rank: u32) -> Result<c_int> {
    c_int::try_from(rank).map_err(|_| bad_rank(rank))
}

#[cold]
#[inline(never)]
fn bad_rank(rank: u32) -> Error {
    Error::conduit("mpi", format!("rank {rank} out of range"))
}

/// Start sending `len` bytes at `buf` to `dest` with `tag` on `comm`.
///
/// # Safety
/// - `buf` is valid for `len` bytes of reads and stays valid and unmodified until the returned
///   request completes.
#[inline]
pub(crate) unsafe fn isend(
    buf: *const u8,
    len: usize,
    dest: u32,
    tag: c_int,
    comm: Comm,
) -> Result<Request> {
    let n = count(len, "MPI_Isend")?;
    let dest = peer(dest)?;
    let mut req = null_request();
    // SAFETY: per the contract the buffer outlives the request; the datatype handle is an
    // immutable export of the rsmpi shim.
    let rc = locked(|| unsafe {
        ffi::MPI_Isend(
            buf.cast::<c_void>(),
            n,
            ffi::RSMPI_UINT8_T,
            dest,
            tag,
            comm.0,
            &mut req,
        )
    });
    check(rc, "MPI_Isend")?;
    Ok(req)
}

/// Start receiving up to `len` bytes into `buf` from `src` (any source when `None`) with `tag`.
///
/// # Safety
/// - `buf` is valid for `len` bytes of writes, and nothing else reads or writes it until the
///   returned request completes or is cancelled.
#[inline]
pub(crate) unsafe fn irecv(
    buf: *mut u8,
    len: usize,
    src: Option<u32>,
    tag: c_int,
    comm: Comm,
) -> Result<Request> {
    let n = count(len, "MPI_Irecv")?;
    let src = match src {
        Some(r) => peer(r)?,
        // SAFETY: reading an immutable constant exported by the rsmpi shim.
        None => unsafe { ffi::RSMPI_ANY_SOURCE },
    };
    let mut req = null_request();
    // SAFETY: per the contract the buffer is ours to fill until the request completes.
    let rc = locked(|| unsafe {
        ffi::MPI_Irecv(
            buf.cast::<c_void>(),
            n,
            ffi::RSMPI_UINT8_T,
            src,
            tag,
            comm.0,
            &mut req,
        )
    });
    check(rc, "MPI_Irecv")?;
    Ok(req)
}

/// Scratch arrays for [`testsome`].
#[derive(Default)]
pub(crate) struct Completions {
    idx: Vec<c_int>,
    st: Vec<Status>,
    n: usize,
}

impl Completions {
    /// The completed requests of the last call, as (index, status) pairs.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (usize, &Status)> + '_ {
        self.idx[..self.n]
            .iter()
            .zip(&self.st[..self.n])
            .map(|(&i, s)| (usize::try_from(i).unwrap_or(usize::MAX), s))
    }
}

/// `MPI_Testsome` over `reqs`: completed requests become `MPI_REQUEST_NULL` and are listed in
/// `out`. Inactive (null) requests are skipped, as MPI specifies.
#[inline]
pub(crate) fn testsome(reqs: &mut [Request], out: &mut Completions) -> Result<usize> {
    out.n = 0;
    if reqs.is_empty() {
        return Ok(0);
    }
    if out.idx.len() < reqs.len() {
        out.idx.resize(reqs.len(), 0);
        out.st.resize_with(reqs.len(), empty_status);
    }
    let incount = count(reqs.len(), "MPI_Testsome")?;
    let mut outcount: c_int = 0;
    // SAFETY: the request array holds `incount` handles and the index and status arrays at
    // least as many entries, as MPI_Testsome requires.
    let rc = locked(|| unsafe {
        ffi::MPI_Testsome(
            incount,
            reqs.as_mut_ptr(),
            &mut outcount,
            out.idx.as_mut_ptr(),
            out.st.as_mut_ptr(),
        )
    });
    if rc != SUCCESS {
        // With MPI_ERR_IN_STATUS the failing request's status carries the real code.
        let n = usize::try_from(outcount).unwrap_or(0).min(reqs.len());
        let inner = out.st[..n]
            .iter()
            .map(|s| s.MPI_ERROR)
            .find(|&e| e != SUCCESS)
            .unwrap_or(rc);
        check(inner, "MPI_Testsome")?;
        check(rc, "MPI_Testsome")?;
    }
    // SAFETY: reading an immutable constant exported by the rsmpi shim.
    let undefined = unsafe { ffi::RSMPI_UNDEFINED };
    out.n = if outcount == undefined {
        0
    } else {
        usize::try_from(outcount).unwrap_or(0).min(reqs.len())
    };
    Ok(out.n)
}

/// `MPI_Test` on one request: its status once complete (the request is then null). Unlike
/// `MPI_Testsome`, which looks at the requests before it makes progress, `MPI_Test` looks
/// again after the progress it makes, so a message that progress delivers shows at once.
#[inline]
pub(crate) fn test(req: &mut Request) -> Result<Option<Status>> {
    let mut flag: c_int = 0;
    let mut st = empty_status();
    // SAFETY: `req` is a valid (possibly null) request handle, `flag` and `st` are writable.
    let rc = locked(|| unsafe { ffi::MPI_Test(req, &mut flag, &mut st) });
    check(rc, "MPI_Test")?;
    Ok((flag != 0).then_some(st))
}

/// `MPI_Test` on one request, without its status: true once complete (the request is then
/// null).
#[inline]
pub(crate) fn test_done(req: &mut Request) -> Result<bool> {
    let mut flag: c_int = 0;
    // SAFETY: `req` is a valid (possibly null) request handle and `flag` is writable;
    // MPI_STATUS_IGNORE is an immutable export of the rsmpi shim.
    let rc = locked(|| unsafe { ffi::MPI_Test(req, &mut flag, ffi::RSMPI_STATUS_IGNORE) });
    check(rc, "MPI_Test")?;
    Ok(flag != 0)
}

/// Cancel a pending receive and complete it, so that its buffer may be released.
pub(crate) fn cancel(req: &mut Request) {
    if *req == null_request() {
        return;
    }
    // SAFETY: `req` is an active request of this process; MPI_Cancel followed by MPI_Wait is
    // the standard way to retire it, and MPI_Wait returns once the cancellation is done.
    locked(|| unsafe {
        ffi::MPI_Cancel(req);
        ffi::MPI_Wait(req, ffi::RSMPI_STATUS_IGNORE);
    });
}

/// Bytes a completed receive got.
pub(crate) fn received_len(st: &Status) -> Result<usize> {
    let mut n: c_int = 0;
    // SAFETY: `st` is the status of a completed byte receive; `n` is writable.
    let rc = locked(|| unsafe { ffi::MPI_Get_count(st, ffi::RSMPI_UINT8_T, &mut n) });
    check(rc, "MPI_Get_count")?;
    usize::try_from(n).map_err(|_| Error::conduit("mpi", "MPI_Get_count: undefined count"))
}

/// Source rank of a completed receive.
pub(crate) fn source(st: &Status) -> Result<u32> {
    u32::try_from(st.MPI_SOURCE)
        .map_err(|_| Error::conduit("mpi", format!("receive from rank {}", st.MPI_SOURCE)))
}

/// A duplicate of `comm` that returns errors instead of aborting.
pub(crate) fn dup(comm: Comm) -> Result<Comm> {
    // SAFETY: reading an immutable handle exported by the rsmpi shim.
    let mut new = Comm(unsafe { ffi::RSMPI_COMM_NULL });
    // SAFETY: collective over `comm`, called by every rank during start-up.
    let rc = locked(|| unsafe { ffi::MPI_Comm_dup(comm.0, &mut new.0) });
    check(rc, "MPI_Comm_dup")?;
    // SAFETY: `new` is the communicator just created; the error handler is a predefined one.
    let rc = locked(|| unsafe { ffi::MPI_Comm_set_errhandler(new.0, ffi::RSMPI_ERRORS_RETURN) });
    check(rc, "MPI_Comm_set_errhandler")?;
    Ok(new)
}

/// This process's rank and the size of `comm`.
pub(crate) fn rank_size(comm: Comm) -> Result<(u32, u32)> {
    let (mut r, mut s): (c_int, c_int) = (0, 0);
    // SAFETY: `comm` is a valid communicator; the outputs are writable.
    let rc = locked(|| unsafe { ffi::MPI_Comm_rank(comm.0, &mut r) });
    check(rc, "MPI_Comm_rank")?;
    // SAFETY: as above.
    let rc = locked(|| unsafe { ffi::MPI_Comm_size(comm.0, &mut s) });
    check(rc, "MPI_Comm_size")?;
    let r = u32::try_from(r).map_err(|_| Error::conduit("mpi", "negative rank"))?;
    let s = u32::try_from(s).map_err(|_| Error::conduit("mpi", "negative size"))?;
    Ok((r, s))
}

/// Collective over `comm`: the communicator of its ranks that share this node's memory, in
/// `comm`'s rank order (key 0).
fn node_comm(comm: Comm) -> Result<Comm> {
    // SAFETY: reading an immutable handle exported by the rsmpi shim.
    let mut local = Comm(unsafe { ffi::RSMPI_COMM_NULL });
    // SAFETY: collective over `comm`, called by every rank during start-up; the constants are
    // immutable exports of the rsmpi shim.
    let rc = locked(|| unsafe {
        ffi::MPI_Comm_split_type(
            comm.0,
            ffi::RSMPI_COMM_TYPE_SHARED,
            0,
            ffi::RSMPI_INFO_NULL,
            &mut local.0,
        )
    });
    check(rc, "MPI_Comm_split_type")?;
    Ok(local)
}

/// Free a communicator this module made and no longer uses.
fn free(mut c: Comm) -> Result<()> {
    // SAFETY: `c` was created by this module and is used no more.
    let rc = locked(|| unsafe { ffi::MPI_Comm_free(&mut c.0) });
    check(rc, "MPI_Comm_free")
}

/// Collective over `comm`: how many of its ranks share this node's memory.
pub(crate) fn ranks_on_this_node(comm: Comm) -> Result<u32> {
    let local = node_comm(comm)?;
    let (_, n) = rank_size(local)?;
    free(local)?;
    Ok(n)
}

/// Collective over `comm`: when every rank of `comm` shares this node's memory, `bytes` of
/// shared memory per rank (an `MPI_Win_allocate_shared` window on the node), zero-filled, with
/// every rank's part mapped here, page-aligned, in `comm`'s rank order; `None` when the ranks
/// span several nodes. The window stays allocated until the process ends.
pub(crate) fn node_scratch(comm: Comm, bytes: usize) -> Result<Option<Vec<std::ptr::NonNull<u8>>>> {
    const PAGE: usize = 4096;
    let (_, n) = rank_size(comm)?;
    let local = node_comm(comm)?;
    let (me, ln) = rank_size(local)?;
    if ln != n {
        free(local)?;
        return Ok(None);
    }
    let part = bytes + PAGE;
    let size = ffi::MPI_Aint::try_from(part)
        .map_err(|_| Error::conduit("mpi", "host scratch size beyond MPI_Aint"))?;
    let mut base: *mut u8 = std::ptr::null_mut();
    // SAFETY: reading an immutable handle exported by the rsmpi shim.
    let mut win = unsafe { ffi::RSMPI_WIN_NULL };
    // SAFETY: collective over `local` (every rank of the job, at start-up); `base` and `win`
    // are writable outputs.
    let rc = locked(|| unsafe {
        ffi::MPI_Win_allocate_shared(
            size,
            1,
            ffi::RSMPI_INFO_NULL,
            local.0,
            (&raw mut base).cast::<c_void>(),
            &mut win,
        )
    });
    check(rc, "MPI_Win_allocate_shared")?;
    let mut parts = Vec::with_capacity(n as usize);
    for r in 0..n {
        let (mut sz, mut du): (ffi::MPI_Aint, c_int) = (0, 0);
        let mut p: *mut u8 = std::ptr::null_mut();
        let rank = c_int::try_from(r).map_err(|_| Error::conduit("mpi", "rank beyond int"))?;
        // SAFETY: `win` is the window just allocated; the outputs are writable.
        let rc = locked(|| unsafe {
            ffi::MPI_Win_shared_query(win, rank, &mut sz, &mut du, (&raw mut p).cast::<c_void>())
        });
        check(rc, "MPI_Win_shared_query")?;
        if usize::try_from(sz).unwrap_or(0) < part {
            return Err(Error::conduit(
                "mpi",
                format!("rank {r}'s shared window holds {sz} bytes, not {part}"),
            ));
        }
        // Page-aligned inside the part (the part has a page to spare).
        let skip = p.align_offset(PAGE);
        let q = std::ptr::NonNull::new(p.wrapping_add(skip))
            .ok_or_else(|| Error::conduit("mpi", "a shared window part at a null address"))?;
        parts.push(q);
    }
    // SAFETY: this rank's part, `bytes` writable bytes from its aligned start, not yet shared
    // (the other ranks touch it only after the barrier below).
    unsafe { std::ptr::write_bytes(parts[me as usize].as_ptr(), 0, bytes) };
    // SAFETY: collective over `local`.
    let rc = locked(|| unsafe { ffi::MPI_Barrier(local.0) });
    check(rc, "MPI_Barrier")?;
    Ok(Some(parts))
}

/// Start an all-gather of one i32 per rank into `recv` (one slot per rank).
///
/// # Safety
/// - `send` and `recv` stay valid, and `recv` untouched, until the request completes.
pub(crate) unsafe fn iallgather_i32(
    send: *const i32,
    recv: &mut [i32],
    comm: Comm,
) -> Result<Request> {
    let mut req = null_request();
    // SAFETY: per the contract the buffers outlive the request; `recv` holds one i32 per rank.
    let rc = locked(|| unsafe {
        ffi::MPI_Iallgather(
            send.cast::<c_void>(),
            1,
            ffi::RSMPI_INT32_T,
            recv.as_mut_ptr().cast::<c_void>(),
            1,
            ffi::RSMPI_INT32_T,
            comm.0,
            &mut req,
        )
    });
    check(rc, "MPI_Iallgather")?;
    Ok(req)
}

/// Start an all-gather of byte strings of different lengths.
///
/// # Safety
/// - `send`, `recv`, `counts` and `displs` stay valid, and `recv` untouched, until the request
///   completes; `counts` and `displs` describe disjoint ranges of `recv`, one per rank.
pub(crate) unsafe fn iallgatherv(
    send: &[u8],
    recv: &mut [u8],
    counts: &[i32],
    displs: &[i32],
    comm: Comm,
) -> Result<Request> {
    let n = count(send.len(), "MPI_Iallgatherv")?;
    let mut req = null_request();
    // SAFETY: per the contract every buffer outlives the request and the ranges fit `recv`.
    let rc = locked(|| unsafe {
        ffi::MPI_Iallgatherv(
            send.as_ptr().cast::<c_void>(),
            n,
            ffi::RSMPI_UINT8_T,
            recv.as_mut_ptr().cast::<c_void>(),
            counts.as_ptr(),
            displs.as_ptr(),
            ffi::RSMPI_UINT8_T,
            comm.0,
            &mut req,
        )
    });
    check(rc, "MPI_Iallgatherv")?;
    Ok(req)
}

/// Start the minimum over `comm` of every rank's `*v` into `*out` (`MPI_Iallreduce`, u64,
/// `MPI_MIN`).
///
/// # Safety
/// - `v` and `out` stay valid (and `out` unread) until the request completes.
pub(crate) unsafe fn iallreduce_min_u64(
    comm: Comm,
    v: *const u64,
    out: *mut u64,
) -> Result<Request> {
    let mut req = null_request();
    // SAFETY: `comm` is a valid communicator, `req` writable; `v` and `out` hold one u64 each
    // until the request completes (the caller's contract).
    let rc = locked(|| unsafe {
        ffi::MPI_Iallreduce(
            v.cast(),
            out.cast(),
            1,
            ffi::RSMPI_UINT64_T,
            ffi::RSMPI_MIN,
            comm.0,
            &mut req,
        )
    });
    check(rc, "MPI_Iallreduce")?;
    Ok(req)
}

/// True once MPI has been finalized (by amnet or by the client).
pub(crate) fn finalized() -> bool {
    let mut flag: c_int = 0;
    // SAFETY: MPI_Finalized may be called at any time, even before MPI_Init.
    unsafe { ffi::MPI_Finalized(&mut flag) };
    flag != 0
}

/// `MPI_Finalize`.
pub(crate) fn finalize() -> Result<()> {
    // SAFETY: called once, by the thread that ends the process, after every receive of the
    // conduit was cancelled and while the conduit's locks are held so no other thread of the
    // conduit calls MPI again.
    check(locked(|| unsafe { ffi::MPI_Finalize() }), "MPI_Finalize")
}

/// `MPI_Abort` on the world communicator: ends every process of the job with `code`.
pub(crate) fn abort(code: i32) -> ! {
    // SAFETY: MPI_Abort may be called from any thread at any time after MPI_Init. It does not
    // take the serialization lock: another thread may hold it, and aborting must not wait.
    unsafe { ffi::MPI_Abort(ffi::RSMPI_COMM_WORLD, code & 0xff) };
    // MPI_Abort should not return; if the library does return, end this process at least.
    // SAFETY: _exit ends the process at once; it is async-signal-safe and thread-safe.
    unsafe { libc::_exit(code) }
}

/// The MPI standard version the library implements, as (version, subversion).
pub(crate) fn version() -> (i32, i32) {
    let (mut v, mut s): (c_int, c_int) = (0, 0);
    // SAFETY: MPI_Get_version may be called at any time; the outputs are writable.
    let rc = unsafe { ffi::MPI_Get_version(&mut v, &mut s) };
    if rc != SUCCESS {
        return (0, 0);
    }
    (v, s)
}

/// Start a bitwise-or all-reduce of one i32 per rank.
///
/// # Safety
/// - `send` and `recv` stay valid, and `recv` untouched, until the request completes.
pub(crate) unsafe fn iallreduce_bor(
    send: *const i32,
    recv: *mut i32,
    comm: Comm,
) -> Result<Request> {
    let mut req = null_request();
    // SAFETY: per the contract both buffers outlive the request; the datatype and operation
    // handles are immutable exports of the rsmpi shim.
    let rc = locked(|| unsafe {
        ffi::MPI_Iallreduce(
            send.cast::<c_void>(),
            recv.cast::<c_void>(),
            1,
            ffi::RSMPI_INT32_T,
            ffi::RSMPI_BOR,
            comm.0,
            &mut req,
        )
    });
    check(rc, "MPI_Iallreduce")?;
    Ok(req)
}

/// An RMA window handle. Like communicators, windows are process-wide names.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Win(ffi::MPI_Win);

// SAFETY: a window handle is an opaque process-wide identifier; MPI (at the thread level in
// force, with `locked` serializing calls below MPI_THREAD_MULTIPLE) lets any thread use it.
unsafe impl Send for Win {}
// SAFETY: as above.
unsafe impl Sync for Win {}

/// Largest count of one put or get: MPI counts are `int`.
pub(crate) const RMA_CHUNK: usize = 1 << 30;

#[inline]
fn disp(offset: u64) -> Result<ffi::MPI_Aint> {
    ffi::MPI_Aint::try_from(offset).map_err(|_| bad_offset(offset))
}

#[cold]
#[inline(never)]
fn bad_offset(offset: u64) -> Error {
    Error::conduit("mpi", format!("offset {offset} exceeds MPI_Aint"))
}

/// Collective over `comm`: `MPI_Win_allocate` of `len` bytes (displacement unit 1) that
/// returns errors instead of aborting. Returns the window and the local memory's base.
pub(crate) fn win_allocate(len: usize, comm: Comm) -> Result<(Win, *mut u8)> {
    let size = ffi::MPI_Aint::try_from(len)
        .map_err(|_| Error::conduit("mpi", format!("a window of {len} bytes exceeds MPI_Aint")))?;
    // SAFETY: reading an immutable handle exported by the rsmpi shim.
    let mut info = unsafe { ffi::RSMPI_INFO_NULL };
    // SAFETY: `info` is writable; MPI_Info_create has no other precondition.
    let rc = locked(|| unsafe { ffi::MPI_Info_create(&mut info) });
    check(rc, "MPI_Info_create")?;
    // Each rank's memory on its own pages (Open MPI's shared-memory windows otherwise pack the
    // ranks' memory back to back). Implementations ignore keys they do not know.
    let key = c"alloc_shared_noncontig";
    let value = c"true";
    // SAFETY: `info` was just created; key and value are NUL-terminated strings.
    let rc = locked(|| unsafe { ffi::MPI_Info_set(info, key.as_ptr(), value.as_ptr()) });
    check(rc, "MPI_Info_set")?;
    let mut base: *mut u8 = std::ptr::null_mut();
    // SAFETY: reading an immutable handle exported by the rsmpi shim.
    let mut win = Win(unsafe { ffi::RSMPI_WIN_NULL });
    // SAFETY: collective over `comm`, called by every rank at attach; `base` receives the
    // address of the memory MPI allocates (MPI_Win_allocate takes a pointer to the pointer).
    let rc = locked(|| unsafe {
        ffi::MPI_Win_allocate(
            size,
            1,
            info,
            comm.0,
            (&mut base as *mut *mut u8).cast::<c_void>(),
            &mut win.0,
        )
    });
    // SAFETY: `info` was created above and is used no more.
    locked(|| unsafe { ffi::MPI_Info_free(&mut info) });
    check(rc, "MPI_Win_allocate")?;
    // SAFETY: `win` is the window just created; the error handler is a predefined one.
    let rc = locked(|| unsafe { ffi::MPI_Win_set_errhandler(win.0, ffi::RSMPI_ERRORS_RETURN) });
    check(rc, "MPI_Win_set_errhandler")?;
    if base.is_null() && len > 0 {
        return Err(Error::conduit("mpi", "MPI_Win_allocate returned no memory"));
    }
    Ok((win, base))
}

extern "C" {
    /// `MPI_WIN_UNIFIED`, from src/consts.c: its name in the generated bindings differs between
    /// MPI implementations (see build.rs).
    static amnet_mpi_win_unified: c_int;
}

/// True when the window uses the unified memory model (`MPI_WIN_MODEL`), where the memory a
/// rank reads and writes is the memory remote puts and gets access.
pub(crate) fn win_unified(win: Win) -> Result<bool> {
    let key = c_int::try_from(ffi::MPI_WIN_MODEL)
        .map_err(|_| Error::conduit("mpi", "MPI_WIN_MODEL out of range"))?;
    // SAFETY: an immutable constant of src/consts.c, initialized before the program starts.
    let unified = unsafe { amnet_mpi_win_unified };
    let mut value: *mut c_int = std::ptr::null_mut();
    let mut flag: c_int = 0;
    // SAFETY: for a predefined window attribute MPI stores a pointer to the value into
    // `value` (passed as a pointer to it); `flag` is writable.
    let rc = locked(|| unsafe {
        ffi::MPI_Win_get_attr(
            win.0,
            key,
            (&mut value as *mut *mut c_int).cast::<c_void>(),
            &mut flag,
        )
    });
    check(rc, "MPI_Win_get_attr(MPI_WIN_MODEL)")?;
    if flag == 0 || value.is_null() {
        return Ok(false);
    }
    // SAFETY: MPI returned a pointer to the attribute's int, valid while the window lives.
    Ok(unsafe { *value } == unified)
}

/// `MPI_Win_lock_all(MPI_MODE_NOCHECK)`: a passive-target epoch towards every rank.
pub(crate) fn win_lock_all(win: Win) -> Result<()> {
    let assert = c_int::try_from(ffi::MPI_MODE_NOCHECK).unwrap_or(0);
    // SAFETY: `win` is a valid window with no epoch open from this rank.
    check(
        locked(|| unsafe { ffi::MPI_Win_lock_all(assert, win.0) }),
        "MPI_Win_lock_all",
    )
}

/// `MPI_Win_unlock_all`: ends the epoch, completing every operation.
pub(crate) fn win_unlock_all(win: Win) -> Result<()> {
    // SAFETY: `win` is a valid window on which this rank holds a lock_all epoch.
    check(
        locked(|| unsafe { ffi::MPI_Win_unlock_all(win.0) }),
        "MPI_Win_unlock_all",
    )
}

/// Collective: `MPI_Win_free` (its memory too, for an allocated window).
pub(crate) fn win_free(mut win: Win) -> Result<()> {
    // SAFETY: collective over the window's communicator, called by every rank with no epoch
    // open; nothing uses the window or its memory afterwards.
    check(
        locked(|| unsafe { ffi::MPI_Win_free(&mut win.0) }),
        "MPI_Win_free",
    )
}

/// `MPI_Put` of `len` bytes (at most [`RMA_CHUNK`]) to `rank`'s window at `offset`.
///
/// # Safety
/// - `src` is valid for `len` bytes of reads and stays unmodified until the operation
///   completes locally (a flush).
#[inline]
pub(crate) unsafe fn put(
    src: *const u8,
    len: usize,
    rank: u32,
    offset: u64,
    win: Win,
) -> Result<()> {
    let n = count(len, "MPI_Put")?;
    let r = peer(rank)?;
    let d = disp(offset)?;
    // SAFETY: per the contract the origin buffer outlives the operation; the datatype handles
    // are immutable exports of the rsmpi shim; the caller checked the target range.
    let rc = locked(|| unsafe {
        ffi::MPI_Put(
            src.cast::<c_void>(),
            n,
            ffi::RSMPI_UINT8_T,
            r,
            d,
            n,
            ffi::RSMPI_UINT8_T,
            win.0,
        )
    });
    check(rc, "MPI_Put")
}

/// `MPI_Get` of `len` bytes (at most [`RMA_CHUNK`]) from `rank`'s window at `offset`.
///
/// # Safety
/// - `dst` is valid for `len` bytes of writes, and nothing else reads or writes them, until
///   the operation completes (a flush).
#[inline]
pub(crate) unsafe fn get(dst: *mut u8, len: usize, rank: u32, offset: u64, win: Win) -> Result<()> {
    let n = count(len, "MPI_Get")?;
    let r = peer(rank)?;
    let d = disp(offset)?;
    // SAFETY: per the contract the destination is ours until the operation completes.
    let rc = locked(|| unsafe {
        ffi::MPI_Get(
            dst.cast::<c_void>(),
            n,
            ffi::RSMPI_UINT8_T,
            r,
            d,
            n,
            ffi::RSMPI_UINT8_T,
            win.0,
        )
    });
    check(rc, "MPI_Get")
}

/// `MPI_Win_flush`: every operation this process started towards `rank` is complete, at the
/// origin and at the target.
#[inline]
pub(crate) fn flush(rank: u32, win: Win) -> Result<()> {
    let r = peer(rank)?;
    // SAFETY: `win` is a valid window inside this rank's lock_all epoch.
    check(
        locked(|| unsafe { ffi::MPI_Win_flush(r, win.0) }),
        "MPI_Win_flush",
    )
}

/// `MPI_Win_flush_local`: every operation this process started towards `rank` is complete at
/// the origin (put sources reusable, get data arrived).
#[inline]
pub(crate) fn flush_local(rank: u32, win: Win) -> Result<()> {
    let r = peer(rank)?;
    // SAFETY: `win` is a valid window inside this rank's lock_all epoch.
    check(
        locked(|| unsafe { ffi::MPI_Win_flush_local(r, win.0) }),
        "MPI_Win_flush_local",
    )
}

/// `MPI_Win_sync`: orders this process's accesses to its window memory with the RMA
/// operations of other ranks (a memory barrier in the unified model).
#[inline]
pub(crate) fn win_sync(win: Win) -> Result<()> {
    // SAFETY: `win` is a valid window inside this rank's lock_all epoch.
    check(
        locked(|| unsafe { ffi::MPI_Win_sync(win.0) }),
        "MPI_Win_sync",
    )
}
