//! Attach with a table of C handlers, tokens, and Short/Medium/Long requests and replies.
//!
//! A C handler is registered in the Rust [`amnet::HandlerTable`] wrapped in a closure, so it
//! runs under the core's rules like any Rust handler: the core marks the thread as in handler
//! context (requests, polls, waits and barriers from it fail with `ERR_IN_HANDLER`) and the
//! token refuses a second reply or a reply from a reply handler. The closure also records
//! the token as the one of the handler running on this thread, so that a token kept past its
//! handler, or passed to another thread, is refused with `ERR_BAD_TOKEN` instead of being
//! used.

use std::cell::Cell;
use std::ffi::{c_int, c_uint, c_void};

use crate::status::{guard, CError, ERR_BAD_HANDLER, ERR_BAD_TOKEN, OK};
use crate::{ep, required, MAX_ARGS};

/// What a handler receives to identify its message: pass it to `amnet_reply_*` and
/// `amnet_token_source`. Valid only inside the handler it was given to, on that thread.
pub struct AmToken {
    _opaque: [u8; 0],
}

/// A handler: called with its message's token, the `nargs` 32-bit arguments at `args`, and
/// the payload (`payload`, `nbytes`): nothing for Short; for Medium a library buffer valid
/// until the handler returns; for Long the bytes in this rank's segment where the payload
/// landed. The payload must not be written through `payload` for Medium. A request handler
/// may reply once; no handler may send a request, poll, wait or enter a barrier.
pub type Handler = Option<
    unsafe extern "C" fn(
        token: *mut AmToken,
        args: *const u32,
        nargs: usize,
        payload: *const c_void,
        nbytes: usize,
    ),
>;

/// One entry of the handler table given to `amnet_attach`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct HandlerEntry {
    /// The handler's index, 128..=255; each index at most once per table.
    pub index: c_uint,
    /// The function that runs when a message names `index`; not null.
    pub handler: Handler,
}

thread_local! {
    /// The token of the C handler running on this thread (null: none).
    static CURRENT: Cell<*mut AmToken> = const { Cell::new(std::ptr::null_mut()) };
}

/// A handler index as the core takes it, or `ERR_BAD_HANDLER` for one above 255 (0 and the
/// library's indices are the core's to refuse, with its message).
pub(crate) fn handler_index(index: c_uint) -> Result<u8, CError> {
    u8::try_from(index).map_err(|_| {
        CError::new(
            ERR_BAD_HANDLER,
            format!("handler index {index} is out of range (clients use 128..=255)"),
        )
    })
}

/// The `nargs` arguments at `args` as a slice, or the error for more than 16, a null or a
/// misaligned array.
///
/// # Safety
/// - When `nargs` is 1..=16, `args` is null or valid for reads of `nargs` `uint32_t` for `'a`.
#[inline(always)]
pub(crate) unsafe fn args_slice<'a>(args: *const u32, nargs: usize) -> Result<&'a [u32], CError> {
    if nargs == 0 {
        return Ok(&[]);
    }
    if nargs > MAX_ARGS || args.is_null() || !args.is_aligned() {
        return Err(bad_args(args, nargs));
    }
    // SAFETY: non-null, aligned, and readable for `nargs` elements (the caller's contract).
    Ok(unsafe { std::slice::from_raw_parts(args, nargs) })
}

#[cold]
fn bad_args(args: *const u32, nargs: usize) -> CError {
    if nargs > MAX_ARGS {
        return amnet::Error::TooManyArgs {
            given: nargs,
            max: MAX_ARGS,
        }
        .into();
    }
    if args.is_null() {
        return CError::bad_arg(format!("args is null but nargs is {nargs}"));
    }
    CError::bad_arg(format!("args {args:p} is not aligned to 4 bytes"))
}

/// `len` bytes at `p` as a slice, or the error for a null pointer with a length or a length
/// beyond `isize::MAX`.
///
/// # Safety
/// - When `len > 0`, `p` is null or valid for reads of `len` bytes for `'a`, and nothing
///   writes them meanwhile.
#[inline(always)]
pub(crate) unsafe fn bytes<'a>(
    p: *const c_void,
    len: usize,
    what: &str,
) -> Result<&'a [u8], CError> {
    if len == 0 {
        return Ok(&[]);
    }
    if p.is_null() || len > isize::MAX as usize {
        return Err(bad_bytes(p, len, what));
    }
    // SAFETY: non-null and readable for `len` bytes (the caller's contract); `len` fits isize.
    Ok(unsafe { std::slice::from_raw_parts(p.cast::<u8>(), len) })
}

#[cold]
pub(crate) fn bad_bytes(p: *const c_void, len: usize, what: &str) -> CError {
    if p.is_null() {
        CError::bad_arg(format!("{what} is null but its length is {len} bytes"))
    } else {
        CError::bad_arg(format!(
            "{what} has a length of {len} bytes, more than a buffer can have"
        ))
    }
}

/// Collective: register the `count` handlers of `table` and a segment of `segment_size` bytes
/// on every rank (sizes may differ between ranks, 0 included). Every rank must register the
/// same indices, or every rank fails with the mismatch code. Call once, after `amnet_init`.
/// The table is copied: it may be freed on return.
///
/// # Safety
/// - `table` is null with `count` 0, or valid for reads of `count` entries.
/// - Each entry's handler is a function with the `amnet_handler_fn` signature that stays
///   callable until the process ends.
#[no_mangle]
pub unsafe extern "C" fn amnet_attach(
    table: *const HandlerEntry,
    count: usize,
    segment_size: usize,
) -> c_int {
    guard("amnet_attach", || {
        let ep = ep()?;
        let entries: &[HandlerEntry] = if count == 0 {
            &[]
        } else {
            required(table, "table")?;
            if !table.is_aligned() || count > isize::MAX as usize / size_of::<HandlerEntry>() {
                return Err(CError::bad_arg(format!(
                    "table {table:p} with {count} entries is misaligned or too long"
                )));
            }
            // SAFETY: non-null, aligned, readable for `count` entries (the caller's contract).
            unsafe { std::slice::from_raw_parts(table, count) }
        };
        let mut t = amnet::HandlerTable::new();
        for (i, e) in entries.iter().enumerate() {
            let index = handler_index(e.index)
                .map_err(|err| CError::new(err.code, format!("table[{i}]: {}", err.msg)))?;
            let Some(f) = e.handler else {
                return Err(CError::bad_arg(format!(
                    "table[{i}]: the function of handler {index} is null"
                )));
            };
            t.register(index, move |tok, args, payload| {
                run_c_handler(f, tok, args, payload)
            })
            .map_err(|err| {
                let err = CError::from(err);
                CError::new(err.code, format!("table[{i}]: {}", err.msg))
            })?;
        }
        ep.attach(t, segment_size)?;
        Ok(OK)
    })
}

/// What a C handler's token points at: the core's token for the message, and the handler's
/// prepared reply, if it holds one, with what the token told about the message before the
/// reply borrowed it. It lives on the stack of [`run_c_handler`] for the handler's run.
pub(crate) struct Frame<'t, 'a> {
    /// The core's token. Reborrowed for each call; not used while `prepared` holds the
    /// borrow.
    tok: *mut amnet::Token<'a>,
    /// A Medium reply prepared and neither committed nor cancelled (it borrows the token),
    /// and the message's description.
    pub(crate) prepared: Option<(TokenInfo, amnet::PreparedReply<'t, 'a>)>,
}

impl<'t, 'a> Frame<'t, 'a> {
    /// What the token tells about the message.
    pub(crate) fn info(&mut self) -> TokenInfo {
        if let Some((info, _)) = &self.prepared {
            return *info;
        }
        // SAFETY: as in `token`: no prepared reply borrows the token now.
        let t = unsafe { &*self.tok };
        TokenInfo {
            source: t.src(),
            handler: u32::from(t.handler()),
            category: match t.category() {
                amnet::Category::Short => CATEGORY_SHORT,
                amnet::Category::Medium => CATEGORY_MEDIUM,
                amnet::Category::Long => CATEGORY_LONG,
            },
            is_request: c_int::from(t.is_request()),
        }
    }

    /// The core's token, unless a prepared reply holds it.
    pub(crate) fn token(&mut self) -> Result<&'t mut amnet::Token<'a>, CError> {
        if self.prepared.is_some() {
            return Err(CError::new(
                crate::ERR_STATE,
                "the handler holds a prepared reply; commit or cancel it first",
            ));
        }
        // SAFETY: the token outlives the frame (the core's dispatch owns it across the
        // handler's run), and no other borrow of it is live: `prepared` is empty, and the
        // borrows this hands out end with the entry point that took them.
        Ok(unsafe { &mut *self.tok })
    }
}

/// Run a C handler under the token the core made for its message.
#[inline(always)]
fn run_c_handler(
    f: unsafe extern "C" fn(*mut AmToken, *const u32, usize, *const c_void, usize),
    tok: &mut amnet::Token<'_>,
    args: &[u32],
    payload: &[u8],
) {
    /// Restores the outer handler's token (a reply handler may run inside a request
    /// handler's reply, which polls while the conduit is full), also if the handler unwinds.
    struct Restore<'c>(&'c Cell<*mut AmToken>, *mut AmToken);
    impl Drop for Restore<'_> {
        fn drop(&mut self) {
            self.0.set(self.1);
        }
    }
    let mut frame = Frame {
        tok,
        prepared: None,
    };
    let p: *mut AmToken = (&mut frame as *mut Frame<'_, '_>).cast();
    // One look-up of the thread-local (in a shared library each costs a call).
    CURRENT.with(|c| {
        let _restore = Restore(c, c.replace(p));
        // SAFETY: `f` came from the handler table, whose contract makes it a handler; the
        // pointers are valid for the call (args and payload are the message's, the frame
        // lives for the handler's run, and `with_frame` only lets it be used during it).
        unsafe {
            f(
                p,
                args.as_ptr(),
                args.len(),
                payload.as_ptr().cast(),
                payload.len(),
            )
        }
    });
    // A reply prepared and left behind is cancelled while the token still lives.
    if frame.prepared.is_some() {
        drop(frame.prepared.take());
    }
}

/// Run `body` with the frame behind `tok`, if it is the one of the handler running on this
/// thread.
#[inline(always)]
pub(crate) fn with_frame<T>(
    tok: *mut AmToken,
    body: impl FnOnce(&mut Frame<'_, '_>) -> Result<T, CError>,
) -> Result<T, CError> {
    if tok.is_null() || CURRENT.with(|c| c.get()) != tok {
        return Err(bad_token(tok));
    }
    // SAFETY: `tok` is the frame `run_c_handler` published for the handler running on this
    // thread, which lives until that handler returns, after this call; nothing else borrows
    // it meanwhile (the handler's thread is in this call).
    let frame = unsafe { &mut *tok.cast::<Frame<'_, '_>>() };
    body(frame)
}

/// Run `body` with the core's token behind `tok` (see [`with_frame`]).
#[inline(always)]
fn with_token<T>(
    tok: *mut AmToken,
    body: impl FnOnce(&mut amnet::Token<'_>) -> Result<T, CError>,
) -> Result<T, CError> {
    with_frame(tok, |f| body(f.token()?))
}

#[cold]
fn bad_token(tok: *mut AmToken) -> CError {
    let what = if tok.is_null() {
        "the token is null".to_string()
    } else {
        format!(
            "token {tok:p} is not the one of the handler running on this thread; a token is \
             valid only inside its handler, on the thread that runs it"
        )
    };
    CError::new(ERR_BAD_TOKEN, what)
}

/// The rank that sent the message of `token`, in `*rank`.
///
/// # Safety
/// - `rank` is valid for a write of a `uint32_t`.
#[no_mangle]
pub unsafe extern "C" fn amnet_token_source(token: *mut AmToken, rank: *mut u32) -> c_int {
    guard("amnet_token_source", || {
        required(rank, "rank")?;
        let src = with_frame(token, |f| Ok(f.info().source))?;
        // SAFETY: checked non-null; the caller's contract makes it writable.
        unsafe { rank.write(src) };
        Ok(OK)
    })
}

/// A Short message (arguments only).
pub const CATEGORY_SHORT: c_int = 0;
/// A Medium message (arguments and a payload in a library buffer).
pub const CATEGORY_MEDIUM: c_int = 1;
/// A Long message (arguments and a payload written into the segment).
pub const CATEGORY_LONG: c_int = 2;

/// What a token tells about its message (`amnet_token_info`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct TokenInfo {
    /// The rank that sent the message.
    pub source: u32,
    /// The index of the running handler.
    pub handler: u32,
    /// The message's category: one of the `AMNET_CATEGORY_*` constants.
    pub category: c_int,
    /// 1 in a request handler, 0 in a reply handler.
    pub is_request: c_int,
}

/// What `token` tells about its message, in `*info`: the source, the handler's index, the
/// category, and whether it is a request. For layers that register one function for every
/// index and category and dispatch themselves.
///
/// # Safety
/// - `info` is valid for a write of an `amnet_token_info_t`.
#[no_mangle]
pub unsafe extern "C" fn amnet_token_info(token: *mut AmToken, info: *mut TokenInfo) -> c_int {
    guard("amnet_token_info", || {
        required(info, "info")?;
        let i = with_frame(token, |f| Ok(f.info()))?;
        // SAFETY: checked non-null; the caller's contract makes it writable.
        unsafe { info.write(i) };
        Ok(OK)
    })
}

/// The largest Medium payload, in `*nbytes` (64 KiB on smp). Works before attach too.
///
/// # Safety
/// - `nbytes` is valid for a write of a `size_t`.
#[no_mangle]
pub unsafe extern "C" fn amnet_max_medium(nbytes: *mut usize) -> c_int {
    guard("amnet_max_medium", || {
        required(nbytes, "nbytes")?;
        let n = ep()?.max_medium();
        // SAFETY: checked non-null; the caller's contract makes it writable.
        unsafe { nbytes.write(n) };
        Ok(OK)
    })
}

/// The largest Long payload to `rank` (its whole segment), in `*nbytes`. Needs attach.
///
/// # Safety
/// - `nbytes` is valid for a write of a `size_t`.
#[no_mangle]
pub unsafe extern "C" fn amnet_max_long(rank: u32, nbytes: *mut usize) -> c_int {
    guard("amnet_max_long", || {
        required(nbytes, "nbytes")?;
        let n = ep()?.max_long(rank)?;
        // SAFETY: checked non-null; the caller's contract makes it writable.
        unsafe { nbytes.write(n) };
        Ok(OK)
    })
}

/// Send a Short request to handler `handler` of `rank` with the `nargs` (0 to 16) arguments
/// at `args` (null when `nargs` is 0). May poll while the conduit has no room.
///
/// # Safety
/// - `args` is null or valid for reads of `nargs` `uint32_t`.
#[no_mangle]
pub unsafe extern "C" fn amnet_request_short(
    rank: u32,
    handler: c_uint,
    args: *const u32,
    nargs: usize,
) -> c_int {
    guard("amnet_request_short", || {
        let h = handler_index(handler)?;
        // SAFETY: the caller's contract.
        let a = unsafe { args_slice(args, nargs)? };
        ep()?.request_short(rank, h, a)?;
        Ok(OK)
    })
}

/// Send a Medium request: arguments as for Short, plus the `nbytes` bytes at `payload` (at
/// most `amnet_max_medium`), delivered to the handler in a library buffer. The payload may be
/// reused on return.
///
/// # Safety
/// - `args` is null or valid for reads of `nargs` `uint32_t`.
/// - `payload` is null or valid for reads of `nbytes` bytes.
#[no_mangle]
pub unsafe extern "C" fn amnet_request_medium(
    rank: u32,
    handler: c_uint,
    args: *const u32,
    nargs: usize,
    payload: *const c_void,
    nbytes: usize,
) -> c_int {
    guard("amnet_request_medium", || {
        let h = handler_index(handler)?;
        // SAFETY: the caller's contract for both arrays.
        let (a, p) = unsafe { (args_slice(args, nargs)?, bytes(payload, nbytes, "payload")?) };
        ep()?.request_medium(rank, h, a, p)?;
        Ok(OK)
    })
}

/// Send a Long request: the `nbytes` bytes at `payload` are written at `dest_offset` in
/// `rank`'s segment before its handler runs (and the handler gets their address there). The
/// payload may be reused on return.
///
/// # Safety
/// - `args` is null or valid for reads of `nargs` `uint32_t`.
/// - `payload` is null or valid for reads of `nbytes` bytes.
#[no_mangle]
pub unsafe extern "C" fn amnet_request_long(
    rank: u32,
    handler: c_uint,
    args: *const u32,
    nargs: usize,
    payload: *const c_void,
    nbytes: usize,
    dest_offset: u64,
) -> c_int {
    guard("amnet_request_long", || {
        let h = handler_index(handler)?;
        // SAFETY: the caller's contract for both arrays.
        let (a, p) = unsafe { (args_slice(args, nargs)?, bytes(payload, nbytes, "payload")?) };
        ep()?.request_long(rank, h, a, p, dest_offset)?;
        Ok(OK)
    })
}

/// Reply to the message of `token` with a Short message. Only from a request handler, at
/// most once.
///
/// # Safety
/// - `args` is null or valid for reads of `nargs` `uint32_t`.
#[no_mangle]
pub unsafe extern "C" fn amnet_reply_short(
    token: *mut AmToken,
    handler: c_uint,
    args: *const u32,
    nargs: usize,
) -> c_int {
    guard("amnet_reply_short", || {
        let h = handler_index(handler)?;
        // SAFETY: the caller's contract.
        let a = unsafe { args_slice(args, nargs)? };
        with_token(token, |t| Ok(t.reply_short(h, a)?))?;
        Ok(OK)
    })
}

/// Reply with a Medium message (see `amnet_request_medium`).
///
/// # Safety
/// - `args` is null or valid for reads of `nargs` `uint32_t`.
/// - `payload` is null or valid for reads of `nbytes` bytes.
#[no_mangle]
pub unsafe extern "C" fn amnet_reply_medium(
    token: *mut AmToken,
    handler: c_uint,
    args: *const u32,
    nargs: usize,
    payload: *const c_void,
    nbytes: usize,
) -> c_int {
    guard("amnet_reply_medium", || {
        let h = handler_index(handler)?;
        // SAFETY: the caller's contract for both arrays.
        let (a, p) = unsafe { (args_slice(args, nargs)?, bytes(payload, nbytes, "payload")?) };
        with_token(token, |t| Ok(t.reply_medium(h, a, p)?))?;
        Ok(OK)
    })
}

/// Reply with a Long message whose payload lands at `dest_offset` in the requester's segment.
///
/// # Safety
/// - `args` is null or valid for reads of `nargs` `uint32_t`.
/// - `payload` is null or valid for reads of `nbytes` bytes.
#[no_mangle]
pub unsafe extern "C" fn amnet_reply_long(
    token: *mut AmToken,
    handler: c_uint,
    args: *const u32,
    nargs: usize,
    payload: *const c_void,
    nbytes: usize,
    dest_offset: u64,
) -> c_int {
    guard("amnet_reply_long", || {
        let h = handler_index(handler)?;
        // SAFETY: the caller's contract for both arrays.
        let (a, p) = unsafe { (args_slice(args, nargs)?, bytes(payload, nbytes, "payload")?) };
        with_token(token, |t| Ok(t.reply_long(h, a, p, dest_offset)?))?;
        Ok(OK)
    })
}

/// Register the handler `entry` after attach (not collective): every rank must register the
/// same index before any rank sends to it (register, then barrier); a message that reaches a
/// rank which has not registered its index yet is dropped with a diagnostic. An index in use
/// already fails with the bad-handler code; a handler is never replaced.
///
/// # Safety
/// - `entry` is valid for reads of one `amnet_handler_entry_t`, whose handler is a function
///   with the `amnet_handler_fn` signature that stays callable until the process ends.
#[no_mangle]
pub unsafe extern "C" fn amnet_register_handler(entry: *const HandlerEntry) -> c_int {
    guard("amnet_register_handler", || {
        required(entry, "entry")?;
        if !entry.is_aligned() {
            return Err(CError::bad_arg(format!("entry {entry:p} is misaligned")));
        }
        // SAFETY: non-null, aligned, readable (the caller's contract).
        let e = unsafe { entry.read() };
        let index = handler_index(e.index)?;
        let Some(f) = e.handler else {
            return Err(CError::bad_arg(format!(
                "the function of handler {index} is null"
            )));
        };
        ep()?.register_handler(index, move |tok, args, payload| {
            run_c_handler(f, tok, args, payload)
        })?;
        Ok(OK)
    })
}

/// `amnet_request_short` with the immediate flag: when the conduit has no room for the
/// message now (a full ring or send window), returns the would-block code at once instead of
/// polling until there is. Nothing was sent then; poll and retry, or do other work.
///
/// # Safety
/// - `args` is null or valid for reads of `nargs` `uint32_t`.
#[no_mangle]
pub unsafe extern "C" fn amnet_try_request_short(
    rank: u32,
    handler: c_uint,
    args: *const u32,
    nargs: usize,
) -> c_int {
    guard("amnet_try_request_short", || {
        let h = handler_index(handler)?;
        // SAFETY: the caller's contract.
        let a = unsafe { args_slice(args, nargs)? };
        ep()?.try_request_short(rank, h, a)?;
        Ok(OK)
    })
}

/// `amnet_request_medium` with the immediate flag (see `amnet_try_request_short`).
///
/// # Safety
/// - `args` is null or valid for reads of `nargs` `uint32_t`.
/// - `payload` is null or valid for reads of `nbytes` bytes.
#[no_mangle]
pub unsafe extern "C" fn amnet_try_request_medium(
    rank: u32,
    handler: c_uint,
    args: *const u32,
    nargs: usize,
    payload: *const c_void,
    nbytes: usize,
) -> c_int {
    guard("amnet_try_request_medium", || {
        let h = handler_index(handler)?;
        // SAFETY: the caller's contract for both arrays.
        let (a, p) = unsafe { (args_slice(args, nargs)?, bytes(payload, nbytes, "payload")?) };
        ep()?.try_request_medium(rank, h, a, p)?;
        Ok(OK)
    })
}

/// `amnet_request_long` with the immediate flag (see `amnet_try_request_short`).
///
/// # Safety
/// - `args` is null or valid for reads of `nargs` `uint32_t`.
/// - `payload` is null or valid for reads of `nbytes` bytes.
#[no_mangle]
pub unsafe extern "C" fn amnet_try_request_long(
    rank: u32,
    handler: c_uint,
    args: *const u32,
    nargs: usize,
    payload: *const c_void,
    nbytes: usize,
    dest_offset: u64,
) -> c_int {
    guard("amnet_try_request_long", || {
        let h = handler_index(handler)?;
        // SAFETY: the caller's contract for both arrays.
        let (a, p) = unsafe { (args_slice(args, nargs)?, bytes(payload, nbytes, "payload")?) };
        ep()?.try_request_long(rank, h, a, p, dest_offset)?;
        Ok(OK)
    })
}
