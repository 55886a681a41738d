//! Status codes, the calling thread's last error message, and the guard every entry point
//! runs in (no Rust panic crosses the boundary).

use std::cell::RefCell;
use std::ffi::{c_char, c_int, CStr, CString};
use std::panic::{catch_unwind, AssertUnwindSafe};

use amnet::Error;

/// Success.
pub const OK: c_int = 0;
/// Not an error: a `try` call found the operation, the barrier or the handles not complete
/// yet. Poll and try again.
pub const NOT_READY: c_int = 1;

/// `amnet_init` has not been called (or failed) in this process.
pub const ERR_NOT_INIT: c_int = -1;
/// The call needs an attached endpoint: call `amnet_attach` first.
pub const ERR_NOT_ATTACHED: c_int = -2;
/// A call at the wrong time: `amnet_init` or `amnet_attach` a second time, a barrier wait
/// without its notify or a second notify, an access region begun twice or ended without one.
pub const ERR_STATE: c_int = -3;
/// An invalid argument: a null pointer where one is required, unknown flags, an unknown
/// comparison, a misaligned word.
pub const ERR_BAD_ARG: c_int = -4;
/// A rank outside `0..size`.
pub const ERR_BAD_RANK: c_int = -5;
/// A handler index that is 0, reserved for the library (1..=127), above 255, registered twice
/// in the table, or not registered.
pub const ERR_BAD_HANDLER: c_int = -6;
/// More than 16 arguments.
pub const ERR_TOO_MANY_ARGS: c_int = -7;
/// A Medium payload above `amnet_max_medium`, or a Long payload above the target's segment.
pub const ERR_TOO_LARGE: c_int = -8;
/// A range outside the segment of the rank it addresses.
pub const ERR_OUT_OF_SEGMENT: c_int = -9;
/// A reply from a reply handler, or a second reply from a request handler.
pub const ERR_REPLY: c_int = -10;
/// A request, poll, wait, put/get, sync, barrier or attach called from a handler.
pub const ERR_IN_HANDLER: c_int = -11;
/// Ranks registered different handler indices at attach (returned on every rank).
pub const ERR_MISMATCH: c_int = -12;
/// A named barrier whose ids differ across ranks, or a rank passed the mismatch flag
/// (returned on every rank); also a wait whose id or flags differ from its notify's.
pub const ERR_BARRIER_MISMATCH: c_int = -13;
/// A handle that names no operation outstanding (already synced, never made, or being
/// synced by another thread at the same moment).
pub const ERR_BAD_HANDLE: c_int = -14;
/// A token used outside the handler it was given to, on another thread, or null.
pub const ERR_BAD_TOKEN: c_int = -15;
/// A configuration variable or start-up setting is wrong (the message names it).
pub const ERR_CONFIG: c_int = -16;
/// A peer rank failed: it died, went silent, or left without ending the job.
pub const ERR_PEER_FAILED: c_int = -17;
/// An operating-system call failed (shared memory, sockets, memory maps, threads).
pub const ERR_OS: c_int = -18;
/// The transport failed in a way no other code describes.
pub const ERR_CONDUIT: c_int = -19;
/// A call used in a way its rules forbid; the message says which argument and why.
pub const ERR_USAGE: c_int = -20;
/// An immediate send found no room; nothing was sent.
pub const ERR_WOULD_BLOCK: c_int = -21;
/// A watchdog found a wait that made no progress for too long.
pub const ERR_HANG: c_int = -22;
/// A wait (start-up, attach) exceeded its time limit.
pub const ERR_TIMEOUT: c_int = -23;
/// amnet failed internally (a bug); the message says where.
pub const ERR_INTERNAL: c_int = -24;

/// A failed call's code and message.
#[derive(Debug)]
pub(crate) struct CError {
    pub(crate) code: c_int,
    pub(crate) msg: String,
}

impl CError {
    pub(crate) fn new(code: c_int, msg: impl Into<String>) -> Self {
        CError {
            code,
            msg: msg.into(),
        }
    }

    pub(crate) fn bad_arg(msg: impl Into<String>) -> Self {
        CError::new(ERR_BAD_ARG, msg)
    }
}

/// The code of each error of the Rust API.
pub(crate) fn code_of(e: &Error) -> c_int {
    match e {
        Error::NotAttached { .. } => ERR_NOT_ATTACHED,
        Error::ReservedHandler { .. }
        | Error::HandlerZero
        | Error::UnregisteredHandler { .. }
        | Error::DuplicateHandler { .. } => ERR_BAD_HANDLER,
        Error::TooManyArgs { .. } => ERR_TOO_MANY_ARGS,
        Error::PayloadTooLarge { .. } => ERR_TOO_LARGE,
        Error::BadRank { .. } => ERR_BAD_RANK,
        Error::OutOfSegment { .. } => ERR_OUT_OF_SEGMENT,
        Error::ReplyFromReply { .. } | Error::SecondReply { .. } => ERR_REPLY,
        Error::InHandler { .. } => ERR_IN_HANDLER,
        Error::AlreadyAttached | Error::BarrierState(_) => ERR_STATE,
        Error::Mismatch { .. } => ERR_MISMATCH,
        Error::BarrierMismatch { .. } => ERR_BARRIER_MISMATCH,
        Error::BadHandle(_) => ERR_BAD_HANDLE,
        Error::Config(_) => ERR_CONFIG,
        Error::PeerFailed { .. } => ERR_PEER_FAILED,
        Error::Os { .. } => ERR_OS,
        Error::Conduit { .. } => ERR_CONDUIT,
        Error::Usage { .. } => ERR_USAGE,
        Error::WouldBlock { .. } => ERR_WOULD_BLOCK,
        Error::Hang { .. } => ERR_HANG,
        Error::Timeout { .. } => ERR_TIMEOUT,
        _ => ERR_INTERNAL,
    }
}

impl From<Error> for CError {
    fn from(e: Error) -> Self {
        CError {
            code: code_of(&e),
            msg: e.to_string(),
        }
    }
}

/// What an entry point's body returns: a status code (OK or NOT_READY), or the error.
pub(crate) type CResult = Result<c_int, CError>;

thread_local! {
    static LAST_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

fn set_last_error(op: &str, msg: &str) {
    // A NUL inside a message would cut it short in C: show it instead.
    let text = format!("{op}: {msg}").replace('\0', "\\0");
    let c = CString::new(text).unwrap_or_default();
    // During the thread's teardown (a call from a thread-local destructor) the message has
    // nowhere to go; the code still tells what happened. This runs outside `catch_unwind`,
    // so it must not panic.
    let _ = LAST_ERROR.try_with(|l| {
        if let Ok(mut slot) = l.try_borrow_mut() {
            *slot = c;
        }
    });
}

/// Run the body of the entry point `op`: its status code, or the code of its error (whose
/// message becomes the thread's last error), or `ERR_INTERNAL` if it panicked.
#[inline(always)]
pub(crate) fn guard(op: &'static str, body: impl FnOnce() -> CResult) -> c_int {
    match catch_unwind(AssertUnwindSafe(body)) {
        Ok(Ok(code)) => code,
        Ok(Err(e)) => fail(op, e),
        Err(payload) => panicked(op, payload.as_ref()),
    }
}

#[cold]
#[inline(never)]
fn fail(op: &'static str, e: CError) -> c_int {
    set_last_error(op, &e.msg);
    e.code
}

#[cold]
#[inline(never)]
fn panicked(op: &'static str, payload: &(dyn std::any::Any + Send)) -> c_int {
    let what = payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".into());
    set_last_error(op, &format!("internal error (a bug in amnet): {what}"));
    ERR_INTERNAL
}

/// The message of the last call on this thread that failed, naming the function and what was
/// wrong (`amnet_put: rank 7 does not exist: the job has 2 ranks`); an empty string when no
/// call on this thread has failed. The string belongs to amnet and stays valid until this
/// thread's next amnet call; copy it to keep it. Never null.
#[no_mangle]
pub extern "C" fn amnet_last_error() -> *const c_char {
    catch_unwind(|| {
        LAST_ERROR
            .try_with(|l| l.try_borrow().map(|m| m.as_ptr()).unwrap_or(c"".as_ptr()))
            .unwrap_or(c"".as_ptr())
    })
    .unwrap_or(c"".as_ptr())
}

/// The name of a status code as the header spells it (0 gives the name of the OK code), or
/// "unknown status code" for a number that is none of them. The string is static: never
/// freed, never changed.
#[no_mangle]
pub extern "C" fn amnet_error_name(code: c_int) -> *const c_char {
    catch_unwind(|| {
        NAMES
            .iter()
            .find(|(c, _)| *c == code)
            .map_or(c"unknown status code".as_ptr(), |(_, n)| n.as_ptr())
    })
    .unwrap_or(c"unknown status code".as_ptr())
}

/// The header's name of a code, from its Rust name.
macro_rules! name {
    ($code:ident) => {
        (
            $code,
            match CStr::from_bytes_with_nul(concat!("AMNET_", stringify!($code), "\0").as_bytes()) {
                Ok(s) => s,
                Err(_) => panic!("a name with a NUL"),
            },
        )
    };
}

static NAMES: &[(c_int, &CStr)] = &[
    name!(OK),
    name!(NOT_READY),
    name!(ERR_NOT_INIT),
    name!(ERR_NOT_ATTACHED),
    name!(ERR_STATE),
    name!(ERR_BAD_ARG),
    name!(ERR_BAD_RANK),
    name!(ERR_BAD_HANDLER),
    name!(ERR_TOO_MANY_ARGS),
    name!(ERR_TOO_LARGE),
    name!(ERR_OUT_OF_SEGMENT),
    name!(ERR_REPLY),
    name!(ERR_IN_HANDLER),
    name!(ERR_MISMATCH),
    name!(ERR_BARRIER_MISMATCH),
    name!(ERR_BAD_HANDLE),
    name!(ERR_BAD_TOKEN),
    name!(ERR_CONFIG),
    name!(ERR_PEER_FAILED),
    name!(ERR_OS),
    name!(ERR_CONDUIT),
    name!(ERR_USAGE),
    name!(ERR_WOULD_BLOCK),
    name!(ERR_HANG),
    name!(ERR_TIMEOUT),
    name!(ERR_INTERNAL),
];
