//! Put/get: blocking, explicit handle (nb), implicit handle (nbi), access regions, syncs.
//!
//! A C handle is an id, not a pointer (`slots.rs`), looked up in a table of the outstanding
//! operations' [`amnet::Handle`]s. A handle synced to completion, never made, or synced at
//! the same moment by another thread names no entry and is refused with `ERR_BAD_HANDLE`; 0
//! is the invalid handle, complete from the start.

use std::ffi::{c_int, c_void};
use std::sync::Mutex;

use amnet::Handle;

use crate::am::{bad_bytes, bytes};
use crate::slots::{lock, Slots, FETCH_KIND};
use crate::status::{guard, CError, ERR_BAD_HANDLE, NOT_READY, OK};
use crate::{ep, required};

/// The handle of a non-blocking put or get: 0 (the invalid handle) when there is nothing to
/// wait for.
pub type HandleId = u64;

/// The handle that names no operation: complete from the start.
pub const HANDLE_INVALID: HandleId = 0;

static TABLE: Mutex<Slots<Handle>> = Mutex::new(Slots::new(0, "put/get/atomic handles"));

/// An id for `h` (0 when it is already complete).
pub(crate) fn make_handle(h: Handle) -> Result<HandleId, CError> {
    if h.is_invalid() {
        return Ok(HANDLE_INVALID);
    }
    lock(&TABLE).make(h)
}

/// Take the operation of `id` out of the table (its slot stays reserved until `finish`).
fn take(id: HandleId) -> Result<Handle, CError> {
    if id & FETCH_KIND != 0 {
        return Err(CError::new(
            ERR_BAD_HANDLE,
            format!("handle {id:#x} is a fetching atomic's: wait for it with amnet_ad_wait"),
        ));
    }
    lock(&TABLE).take(id)
}

/// Put back the operation of `id` after a sync: still outstanding, it stays; complete, the
/// id is retired and 0 is returned for the caller's copy.
fn finish(id: HandleId, h: Handle) -> HandleId {
    if h.is_invalid() {
        lock(&TABLE).finish(id, None);
        HANDLE_INVALID
    } else {
        lock(&TABLE).finish(id, Some(h));
        id
    }
}

/// `len` bytes at `p` for writing, or the error for a null pointer with a length.
///
/// # Safety
/// - When `len > 0`, `p` is null or valid for writes of `len` bytes for `'a`, and nothing
///   else reads or writes them meanwhile.
unsafe fn bytes_mut<'a>(p: *mut c_void, len: usize, what: &str) -> Result<&'a mut [u8], CError> {
    if len == 0 {
        return Ok(&mut []);
    }
    if p.is_null() || len > isize::MAX as usize {
        return Err(bad_bytes(p, len, what));
    }
    // SAFETY: non-null, writable for `len` bytes and not aliased (the caller's contract).
    Ok(unsafe { std::slice::from_raw_parts_mut(p.cast::<u8>(), len) })
}

/// Check a destination pointer of a non-blocking get (written after the call returns).
fn dst_ok(p: *mut c_void, len: usize) -> Result<(), CError> {
    if len > 0 && (p.is_null() || len > isize::MAX as usize) {
        return Err(bad_bytes(p, len, "dst"));
    }
    Ok(())
}

/// Blocking put: copy the `nbytes` bytes at `src` to `rank`'s segment at `dest_offset`;
/// complete on return.
///
/// # Safety
/// - `src` is null or valid for reads of `nbytes` bytes.
#[no_mangle]
pub unsafe extern "C" fn amnet_put(
    rank: u32,
    dest_offset: u64,
    src: *const c_void,
    nbytes: usize,
) -> c_int {
    guard("amnet_put", || {
        // SAFETY: the caller's contract.
        let s = unsafe { bytes(src, nbytes, "src")? };
        ep()?.put(rank, dest_offset, s)?;
        Ok(OK)
    })
}

/// Blocking get: copy `nbytes` bytes from `rank`'s segment at `src_offset` to `dst`.
///
/// # Safety
/// - `dst` is null or valid for writes of `nbytes` bytes, which nothing else touches during
///   the call.
#[no_mangle]
pub unsafe extern "C" fn amnet_get(
    dst: *mut c_void,
    rank: u32,
    src_offset: u64,
    nbytes: usize,
) -> c_int {
    guard("amnet_get", || {
        // SAFETY: the caller's contract.
        let d = unsafe { bytes_mut(dst, nbytes, "dst")? };
        ep()?.get(rank, src_offset, d)?;
        Ok(OK)
    })
}

/// Non-blocking put with an explicit handle, stored in `*handle`. `src` may be reused on
/// return; the handle completes when the data is in the target segment.
///
/// # Safety
/// - `src` is null or valid for reads of `nbytes` bytes.
/// - `handle` is valid for a write of an `amnet_handle_t`.
#[no_mangle]
pub unsafe extern "C" fn amnet_put_nb(
    rank: u32,
    dest_offset: u64,
    src: *const c_void,
    nbytes: usize,
    handle: *mut HandleId,
) -> c_int {
    guard("amnet_put_nb", || {
        required(handle, "handle")?;
        // SAFETY: the caller's contract.
        let s = unsafe { bytes(src, nbytes, "src")? };
        let id = make_handle(ep()?.put_nb(rank, dest_offset, s)?)?;
        // SAFETY: checked non-null; the caller's contract makes it writable.
        unsafe { handle.write(id) };
        Ok(OK)
    })
}

/// Non-blocking get with an explicit handle, stored in `*handle`: `dst` holds the data once
/// the handle is synced.
///
/// # Safety
/// - `dst` is null or valid for writes of `nbytes` bytes until the handle is synced, and
///   nothing else reads or writes them until then.
/// - `handle` is valid for a write of an `amnet_handle_t`.
#[no_mangle]
pub unsafe extern "C" fn amnet_get_nb(
    dst: *mut c_void,
    rank: u32,
    src_offset: u64,
    nbytes: usize,
    handle: *mut HandleId,
) -> c_int {
    guard("amnet_get_nb", || {
        required(handle, "handle")?;
        dst_ok(dst, nbytes)?;
        let ep = ep()?;
        // SAFETY: `dst` is writable and untouched until the handle is synced (the caller's
        // contract).
        let h = unsafe { ep.get_nb(rank, src_offset, dst.cast(), nbytes)? };
        let id = make_handle(h)?;
        // SAFETY: checked non-null; the caller's contract makes it writable.
        unsafe { handle.write(id) };
        Ok(OK)
    })
}

/// Non-blocking put with the calling thread's implicit handle (or its open access region).
/// `src` may be reused on return.
///
/// # Safety
/// - `src` is null or valid for reads of `nbytes` bytes.
#[no_mangle]
pub unsafe extern "C" fn amnet_put_nbi(
    rank: u32,
    dest_offset: u64,
    src: *const c_void,
    nbytes: usize,
) -> c_int {
    guard("amnet_put_nbi", || {
        // SAFETY: the caller's contract.
        let s = unsafe { bytes(src, nbytes, "src")? };
        ep()?.put_nbi(rank, dest_offset, s)?;
        Ok(OK)
    })
}

/// Non-blocking get with the calling thread's implicit handle (or its open access region).
///
/// # Safety
/// - `dst` is null or valid for writes of `nbytes` bytes until the implicit handle (or the
///   region's handle) is synced, and nothing else reads or writes them until then.
#[no_mangle]
pub unsafe extern "C" fn amnet_get_nbi(
    dst: *mut c_void,
    rank: u32,
    src_offset: u64,
    nbytes: usize,
) -> c_int {
    guard("amnet_get_nbi", || {
        dst_ok(dst, nbytes)?;
        let ep = ep()?;
        // SAFETY: the caller's contract, forwarded.
        unsafe { ep.get_nbi(rank, src_offset, dst.cast(), nbytes)? };
        Ok(OK)
    })
}

/// Wait until the operation of `*handle` completes; `*handle` becomes 0. A 0 handle returns
/// at once. When the operation completed with a failure, the error is returned and the handle
/// is spent all the same; when the wait itself fails before the operation completed
/// (a hang, a peer's failure, a wait refused), `*handle` stays outstanding: the
/// operation may still write its destination, and a later sync waits for it.
///
/// # Safety
/// - `handle` is valid for reads and writes of an `amnet_handle_t`.
#[no_mangle]
pub unsafe extern "C" fn amnet_sync(handle: *mut HandleId) -> c_int {
    guard("amnet_sync", || {
        required(handle, "handle")?;
        // SAFETY: checked non-null; the caller's contract makes it readable and writable.
        let id = unsafe { handle.read() };
        if id == HANDLE_INVALID {
            return Ok(OK);
        }
        let mut h = take(id)?;
        let r = ep().map(|ep| ep.wait_sync(&mut h));
        let r = match r {
            Ok(r) => r,
            Err(e) => {
                finish(id, h);
                return Err(e);
            }
        };
        // `wait_sync` takes the operation once it completed, and keeps it when the wait
        // failed first.
        let left = finish(id, h);
        // SAFETY: as above.
        unsafe { handle.write(left) };
        r?;
        Ok(OK)
    })
}

/// OK (and `*handle` becomes 0) when the operation of `*handle` completed, NOT_READY when
/// not yet (polls once).
///
/// # Safety
/// - `handle` is valid for reads and writes of an `amnet_handle_t`.
#[no_mangle]
pub unsafe extern "C" fn amnet_try_sync(handle: *mut HandleId) -> c_int {
    guard("amnet_try_sync", || {
        required(handle, "handle")?;
        // SAFETY: checked non-null; the caller's contract makes it readable and writable.
        let id = unsafe { handle.read() };
        if id == HANDLE_INVALID {
            return Ok(OK);
        }
        let mut h = take(id)?;
        let r = ep().and_then(|ep| Ok(ep.try_sync(&mut h)?));
        let left = finish(id, h);
        // SAFETY: as above.
        unsafe { handle.write(left) };
        Ok(if r? { OK } else { NOT_READY })
    })
}

/// Run `sync` on the operations of the `count` handles at `handles`, and write back each
/// handle: 0 for those that completed.
///
/// # Safety
/// - `handles` is null with `count` 0, or valid for reads and writes of `count` handles.
unsafe fn sync_many(
    handles: *mut HandleId,
    count: usize,
    sync: impl FnOnce(&amnet::Endpoint, &mut [Handle]) -> amnet::Result<bool>,
) -> Result<c_int, CError> {
    let ids: &mut [HandleId] = if count == 0 {
        &mut []
    } else {
        required(handles, "handles")?;
        if !handles.is_aligned() || count > isize::MAX as usize / size_of::<HandleId>() {
            return Err(CError::bad_arg(format!(
                "handles {handles:p} with {count} entries is misaligned or too long"
            )));
        }
        // SAFETY: non-null, aligned, readable and writable for `count` handles (the caller's
        // contract).
        unsafe { std::slice::from_raw_parts_mut(handles, count) }
    };
    let ep = ep()?;
    let mut taken: Vec<(usize, HandleId)> = Vec::with_capacity(ids.len());
    let mut hs: Vec<Handle> = Vec::with_capacity(ids.len());
    for (i, &id) in ids.iter().enumerate() {
        if id == HANDLE_INVALID {
            continue;
        }
        match take(id) {
            Ok(h) => {
                taken.push((i, id));
                hs.push(h);
            }
            Err(e) => {
                for ((_, id), h) in taken.into_iter().zip(hs) {
                    finish(id, h);
                }
                return Err(CError::new(e.code, format!("handles[{i}]: {}", e.msg)));
            }
        }
    }
    let r = sync(ep, &mut hs);
    for ((i, id), h) in taken.into_iter().zip(hs) {
        ids[i] = finish(id, h);
    }
    Ok(if r? { OK } else { NOT_READY })
}

/// Wait until every one of the `count` handles at `handles` completed; each becomes 0
/// (0 handles are skipped).
///
/// # Safety
/// - `handles` is null with `count` 0, or valid for reads and writes of `count` handles.
#[no_mangle]
pub unsafe extern "C" fn amnet_sync_all(handles: *mut HandleId, count: usize) -> c_int {
    guard("amnet_sync_all", || {
        // SAFETY: the caller's contract, forwarded.
        unsafe { sync_many(handles, count, |ep, hs| ep.wait_sync_all(hs).map(|()| true)) }
    })
}

/// OK when every one of the handles completed, NOT_READY otherwise (polls once); those that
/// completed become 0.
///
/// # Safety
/// - `handles` is null with `count` 0, or valid for reads and writes of `count` handles.
#[no_mangle]
pub unsafe extern "C" fn amnet_try_sync_all(handles: *mut HandleId, count: usize) -> c_int {
    guard("amnet_try_sync_all", || {
        // SAFETY: the caller's contract, forwarded.
        unsafe { sync_many(handles, count, |ep, hs| ep.try_sync_all(hs)) }
    })
}

/// Wait until at least one of the handles completed or none is outstanding; those that
/// completed become 0.
///
/// # Safety
/// - `handles` is null with `count` 0, or valid for reads and writes of `count` handles.
#[no_mangle]
pub unsafe extern "C" fn amnet_sync_some(handles: *mut HandleId, count: usize) -> c_int {
    guard("amnet_sync_some", || {
        // SAFETY: the caller's contract, forwarded.
        unsafe {
            sync_many(handles, count, |ep, hs| {
                ep.wait_sync_some(hs).map(|()| true)
            })
        }
    })
}

/// OK when at least one of the handles completed or none is outstanding, NOT_READY
/// otherwise (polls once); those that completed become 0.
///
/// # Safety
/// - `handles` is null with `count` 0, or valid for reads and writes of `count` handles.
#[no_mangle]
pub unsafe extern "C" fn amnet_try_sync_some(handles: *mut HandleId, count: usize) -> c_int {
    guard("amnet_try_sync_some", || {
        // SAFETY: the caller's contract, forwarded.
        unsafe { sync_many(handles, count, |ep, hs| ep.try_sync_some(hs)) }
    })
}

/// Wait for every implicit-handle operation this thread started outside access regions.
#[no_mangle]
pub extern "C" fn amnet_sync_nbi() -> c_int {
    guard("amnet_sync_nbi", || {
        ep()?.wait_sync_nbi()?;
        Ok(OK)
    })
}

/// OK when every implicit-handle operation this thread started outside access regions
/// completed, NOT_READY otherwise (polls once).
#[no_mangle]
pub extern "C" fn amnet_try_sync_nbi() -> c_int {
    guard("amnet_try_sync_nbi", || {
        Ok(if ep()?.try_sync_nbi()? { OK } else { NOT_READY })
    })
}

/// Open an access region on this thread: the implicit-handle operations it starts until
/// `amnet_end_nbi_region` are collected into one explicit handle.
#[no_mangle]
pub extern "C" fn amnet_begin_nbi_region() -> c_int {
    guard("amnet_begin_nbi_region", || {
        ep()?.begin_nbi_region()?;
        Ok(OK)
    })
}

/// Close this thread's access region; the handle of everything started in it goes to
/// `*handle` (0 when all of it already completed).
///
/// # Safety
/// - `handle` is valid for a write of an `amnet_handle_t`.
#[no_mangle]
pub unsafe extern "C" fn amnet_end_nbi_region(handle: *mut HandleId) -> c_int {
    guard("amnet_end_nbi_region", || {
        required(handle, "handle")?;
        let id = make_handle(ep()?.end_nbi_region()?)?;
        // SAFETY: checked non-null; the caller's contract makes it writable.
        unsafe { handle.write(id) };
        Ok(OK)
    })
}
