//! Barriers: anonymous and named, blocking and split-phase, with mismatch detection.

use std::ffi::c_int;

use crate::ep;
use crate::status::{guard, CError, NOT_READY, OK};

/// Barrier flag: the barrier matches any id (the id argument is ignored).
pub const BARRIER_ANONYMOUS: u32 = 1;
/// Barrier flag: force a mismatch on every rank (this rank found an inconsistency).
pub const BARRIER_MISMATCH: u32 = 2;

fn check_flags(flags: u32) -> Result<(), CError> {
    let unknown = flags & !(BARRIER_ANONYMOUS | BARRIER_MISMATCH);
    if unknown != 0 {
        return Err(CError::bad_arg(format!(
            "flags {flags:#x} hold unknown bits {unknown:#x} (the barrier flags are ANONYMOUS = \
             {BARRIER_ANONYMOUS:#x} and MISMATCH = {BARRIER_MISMATCH:#x})"
        )));
    }
    Ok(())
}

/// Anonymous blocking barrier: returns once every rank entered it. Needs attach.
#[no_mangle]
pub extern "C" fn amnet_barrier() -> c_int {
    guard("amnet_barrier", || {
        ep()?.barrier()?;
        Ok(OK)
    })
}

/// Start a barrier with `id`, or anonymous with the ANONYMOUS flag; the MISMATCH flag makes
/// it fail on every rank. Complete it with `amnet_barrier_wait`, or with
/// `amnet_barrier_try` until that returns other than NOT_READY; work may run in between.
#[no_mangle]
pub extern "C" fn amnet_barrier_notify(id: u32, flags: u32) -> c_int {
    guard("amnet_barrier_notify", || {
        check_flags(flags)?;
        ep()?.barrier_notify(id, flags)?;
        Ok(OK)
    })
}

/// Complete the barrier started by `amnet_barrier_notify`, polling until every rank
/// notified; `id` and `flags` repeat the notify's. Returns the barrier-mismatch code on
/// every rank when named ids differ or a rank passed MISMATCH (the barrier is complete all
/// the same).
#[no_mangle]
pub extern "C" fn amnet_barrier_wait(id: u32, flags: u32) -> c_int {
    guard("amnet_barrier_wait", || {
        check_flags(flags)?;
        ep()?.barrier_wait(id, flags)?;
        Ok(OK)
    })
}

/// The non-blocking form of `amnet_barrier_wait`: NOT_READY while some rank has not
/// notified (polls once), otherwise what `amnet_barrier_wait` returns.
#[no_mangle]
pub extern "C" fn amnet_barrier_try(id: u32, flags: u32) -> c_int {
    guard("amnet_barrier_try", || {
        check_flags(flags)?;
        Ok(if ep()?.barrier_try(id, flags)? {
            OK
        } else {
            NOT_READY
        })
    })
}

/// The outcome of the last barrier this rank completed (GASNet's `gasnet_barrier_result`):
/// `*flags` gets `AMNET_BARRIER_ANONYMOUS` when every rank notified it anonymously and 0
/// otherwise, `*id` the named id the ranks matched on (0 for an anonymous one). Before the
/// first barrier, and after one that failed with a mismatch, the outcome is anonymous.
/// Between a notify and its wait the call fails with the state code.
///
/// # Safety
/// - `flags` and `id` are each null or valid for a write of a `uint32_t`.
#[no_mangle]
pub unsafe extern "C" fn amnet_barrier_result(flags: *mut u32, id: *mut u32) -> c_int {
    guard("amnet_barrier_result", || {
        let r = ep()?.barrier_result()?;
        // SAFETY: the caller's contract for both pointers.
        unsafe {
            crate::store(flags, if r.is_some() { 0 } else { BARRIER_ANONYMOUS });
            crate::store(id, r.unwrap_or(0));
        }
        Ok(OK)
    })
}
