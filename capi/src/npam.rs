//! Negotiated-payload requests (`spec/core.md` §3a): a Medium or Long request whose payload
//! is built in a buffer amnet hands out (in place in the ring where the conduit can), then
//! committed with its arguments and final length, or cancelled.
//!
//! The prepared message belongs to the thread that prepared it (the Rust `Prepared` is not
//! `Send`), so a thread holds at most one, in thread-local storage, until it commits or
//! cancels it. A thread that ends holding one (the process exiting from inside the build of a
//! payload, say) leaves it unsent and leaked, as a `mem::forget` of a `Prepared` would: its
//! drop would cancel it through thread-locals of the core that may be gone by then.

use std::cell::RefCell;
use std::ffi::{c_int, c_uint, c_void};
use std::mem::ManuallyDrop;

use amnet::Prepared;

use crate::am::{args_slice, handler_index, with_frame, AmToken};
use crate::status::{guard, CError, ERR_STATE, OK};
use crate::{ep, required};

thread_local! {
    /// The message this thread prepared and has not committed or cancelled.
    /// (Never dropped by the thread's teardown: see the module's note.)
    static PREPARED: RefCell<Option<ManuallyDrop<Prepared<'static>>>> =
        const { RefCell::new(None) };
}

fn held() -> CError {
    CError::new(
        ERR_STATE,
        "this thread holds a prepared request already; commit or cancel it first",
    )
}

fn none_held() -> CError {
    CError::new(
        ERR_STATE,
        "this thread holds no prepared request (prepare one with amnet_prepare_request_medium \
         or amnet_prepare_request_long)",
    )
}

/// Keep `p` as this thread's prepared message and give its buffer's address.
///
/// # Safety
/// - `buf` is valid for a write of a pointer (checked non-null by the caller).
unsafe fn hold(mut p: Prepared<'static>, buf: *mut *mut c_void) -> Result<c_int, CError> {
    let addr = p.as_mut_ptr();
    PREPARED.with(|slot| {
        let mut slot = slot.borrow_mut();
        if slot.is_some() {
            // `p` is dropped here, on a live thread: cancelled.
            return Err(held());
        }
        *slot = Some(ManuallyDrop::new(p));
        Ok(())
    })?;
    // SAFETY: the caller's contract.
    unsafe { buf.write(addr.cast()) };
    Ok(OK)
}

/// Take this thread's prepared message back into Rust's hands (dropped normally from then on).
fn take() -> Result<Prepared<'static>, CError> {
    PREPARED
        .with(|slot| slot.borrow_mut().take())
        .map(ManuallyDrop::into_inner)
        .ok_or_else(none_held)
}

fn check_free() -> Result<(), CError> {
    if PREPARED.with(|slot| slot.borrow().is_some()) {
        return Err(held());
    }
    Ok(())
}

/// Prepare a Medium request to handler `handler` of `rank` with a payload of at most
/// `max_len` bytes (at most `amnet_max_medium`): `*buf` receives the buffer to build the
/// payload in (its initial contents are unspecified), sent by `amnet_commit_request`. The
/// checks of `amnet_request_medium` apply. Until it commits or cancels, this thread may not
/// wait (waits fail with the usage code) nor prepare another request.
///
/// # Safety
/// - `buf` is valid for a write of a pointer.
#[no_mangle]
pub unsafe extern "C" fn amnet_prepare_request_medium(
    rank: u32,
    handler: c_uint,
    max_len: usize,
    buf: *mut *mut c_void,
) -> c_int {
    guard("amnet_prepare_request_medium", || {
        required(buf, "buf")?;
        let h = handler_index(handler)?;
        check_free()?;
        let p = ep()?.prepare_request_medium(rank, h, max_len)?;
        // SAFETY: checked non-null; the caller's contract.
        unsafe { hold(p, buf) }
    })
}

/// Prepare a Long request whose payload (at most `max_len` bytes) lands at `dest_offset` in
/// `rank`'s segment: as `amnet_prepare_request_medium`, with the checks of
/// `amnet_request_long`.
///
/// # Safety
/// - `buf` is valid for a write of a pointer.
#[no_mangle]
pub unsafe extern "C" fn amnet_prepare_request_long(
    rank: u32,
    handler: c_uint,
    max_len: usize,
    dest_offset: u64,
    buf: *mut *mut c_void,
) -> c_int {
    guard("amnet_prepare_request_long", || {
        required(buf, "buf")?;
        let h = handler_index(handler)?;
        check_free()?;
        let p = ep()?.prepare_request_long(rank, h, max_len, dest_offset)?;
        // SAFETY: checked non-null; the caller's contract.
        unsafe { hold(p, buf) }
    })
}

/// Send this thread's prepared request with the `nargs` arguments at `args` and the first
/// `len` bytes of its buffer (at most the prepared `max_len`: the usage code beyond, and
/// nothing is sent). The buffer is gone afterwards, whatever the result.
///
/// # Safety
/// - `args` is null or valid for reads of `nargs` `uint32_t`.
#[no_mangle]
pub unsafe extern "C" fn amnet_commit_request(args: *const u32, nargs: usize, len: usize) -> c_int {
    guard("amnet_commit_request", || {
        // SAFETY: the caller's contract.
        let a = unsafe { args_slice(args, nargs)? };
        take()?.commit(a, len)?;
        Ok(OK)
    })
}

/// Drop this thread's prepared request: nothing is sent, and the buffer is gone.
#[no_mangle]
pub extern "C" fn amnet_cancel_request() -> c_int {
    guard("amnet_cancel_request", || {
        take()?.cancel();
        Ok(OK)
    })
}

/// In a request handler: prepare the handler's reply, a Medium message to the requester's
/// `handler` with a payload of at most `max_len` bytes; `*buf` receives the buffer to build it
/// in (on smp, in place in the reply ring). The checks of `amnet_reply_medium` apply. Send it
/// with `amnet_commit_reply`, which is the handler's one reply, or drop it with
/// `amnet_cancel_reply` (the handler may then reply otherwise); one the handler leaves behind
/// is cancelled when it returns. While it is held, the token's other reply calls fail with
/// the state code.
///
/// # Safety
/// - `buf` is valid for a write of a pointer.
#[no_mangle]
pub unsafe extern "C" fn amnet_prepare_reply_medium(
    token: *mut AmToken,
    handler: c_uint,
    max_len: usize,
    buf: *mut *mut c_void,
) -> c_int {
    guard("amnet_prepare_reply_medium", || {
        required(buf, "buf")?;
        let h = handler_index(handler)?;
        let addr = with_frame(token, |f| {
            let info = f.info();
            let mut p = f.token()?.prepare_reply_medium(h, max_len)?;
            let addr = p.as_mut_ptr();
            f.prepared = Some((info, p));
            Ok(addr)
        })?;
        // SAFETY: checked non-null; the caller's contract.
        unsafe { buf.write(addr.cast()) };
        Ok(OK)
    })
}

fn no_reply_held() -> CError {
    CError::new(
        ERR_STATE,
        "the handler holds no prepared reply (prepare one with amnet_prepare_reply_medium)",
    )
}

/// Send the handler's prepared reply with the `nargs` arguments at `args` and the first `len`
/// bytes of its buffer (at most the prepared `max_len`: the usage code beyond, nothing is
/// sent, and the handler may still reply). The buffer is gone afterwards.
///
/// # Safety
/// - `args` is null or valid for reads of `nargs` `uint32_t`.
#[no_mangle]
pub unsafe extern "C" fn amnet_commit_reply(
    token: *mut AmToken,
    args: *const u32,
    nargs: usize,
    len: usize,
) -> c_int {
    guard("amnet_commit_reply", || {
        // SAFETY: the caller's contract.
        let a = unsafe { args_slice(args, nargs)? };
        with_frame(token, |f| {
            let (_, p) = f.prepared.take().ok_or_else(no_reply_held)?;
            Ok(p.commit(a, len)?)
        })?;
        Ok(OK)
    })
}

/// Drop the handler's prepared reply: nothing is sent, and the handler may reply otherwise.
#[no_mangle]
pub extern "C" fn amnet_cancel_reply(token: *mut AmToken) -> c_int {
    guard("amnet_cancel_reply", || {
        with_frame(token, |f| {
            f.prepared.take().ok_or_else(no_reply_held)?.1.cancel();
            Ok(())
        })?;
        Ok(OK)
    })
}
