//! amnet's C ABI: `libamnet.so`, `libamnet.a` and the header `include/amnet.h`, generated from
//! this crate by cbindgen (`tests/header.rs` checks that the committed header is current).
//!
//! Every entry point is a thin wrapper of the Rust API of the `amnet` crate: one endpoint per
//! process (made by `amnet_init`), the same handler rules, the same checks, the same errors,
//! reported as status codes with the message in `amnet_last_error`. Each runs inside
//! `catch_unwind`, so no Rust panic crosses into C. See `spec/capi.md` for the contract.

// Unsafe code is this crate's purpose: every `unsafe extern "C"` function states its
// contract under `# Safety`, and every unsafe block says why it holds.

mod am;
mod atomic;
mod barrier;
mod coll;
mod npam;
mod rma;
mod slots;
mod status;
mod vis;

use std::ffi::c_int;
use std::sync::{Mutex, OnceLock};

use amnet::Endpoint;

pub use am::*;
pub use atomic::*;
pub use barrier::*;
pub use coll::*;
pub use npam::*;
pub use rma::*;
pub use status::*;
pub use vis::*;

use status::{guard, CError};

/// The most arguments an active message carries.
pub const MAX_ARGS: usize = 16;
/// The first handler index a client may register; indices 1..=127 belong to amnet.
pub const FIRST_CLIENT_HANDLER: u32 = 128;
/// The last handler index a client may register (255).
pub const LAST_CLIENT_HANDLER: u32 = 255;

// The header takes literal values (cbindgen does not evaluate paths): they must be the core's.
const _: () = assert!(MAX_ARGS == amnet::MAX_ARGS);
const _: () = assert!(FIRST_CLIENT_HANDLER == amnet::FIRST_CLIENT_HANDLER as u32);
const _: () = assert!(BARRIER_ANONYMOUS == amnet::barrier_flags::ANONYMOUS);
const _: () = assert!(BARRIER_MISMATCH == amnet::barrier_flags::MISMATCH);

/// This process's endpoint, made once by `amnet_init`.
static EP: OnceLock<Endpoint> = OnceLock::new();
/// Serializes `amnet_init` so that two threads cannot both join the job.
static INIT: Mutex<()> = Mutex::new(());

/// The endpoint, or `ERR_NOT_INIT` naming nothing more (the guard adds the entry point).
#[inline(always)]
pub(crate) fn ep() -> Result<&'static Endpoint, CError> {
    match EP.get() {
        Some(ep) => Ok(ep),
        None => Err(not_init()),
    }
}

#[cold]
fn not_init() -> CError {
    CError::new(
        ERR_NOT_INIT,
        "amnet is not initialized in this process; call amnet_init first",
    )
}

/// Write `v` through `out` when `out` is not null.
///
/// # Safety
/// - `out` is null or valid for a write of a `T`.
unsafe fn store<T>(out: *mut T, v: T) {
    if !out.is_null() {
        // SAFETY: the caller's contract: non-null `out` is valid for writes.
        unsafe { out.write(v) }
    }
}

/// The `n` elements at `p` as a slice, or the error naming `what` for a null or misaligned
/// array or one too long to exist.
///
/// # Safety
/// - When `n > 0`, `p` is null or valid for reads of `n` elements for `'a`.
pub(crate) unsafe fn array<'a, T>(p: *const T, n: usize, what: &str) -> Result<&'a [T], CError> {
    if n == 0 {
        return Ok(&[]);
    }
    if p.is_null() || !p.is_aligned() || n > isize::MAX as usize / size_of::<T>().max(1) {
        return Err(CError::bad_arg(format!(
            "{what} ({p:p}, {n} entries) is null, misaligned or too long"
        )));
    }
    // SAFETY: non-null, aligned, readable for `n` elements (the caller's contract).
    Ok(unsafe { std::slice::from_raw_parts(p, n) })
}

/// Check that an output pointer is not null.
fn required<T>(p: *const T, what: &str) -> Result<(), CError> {
    if p.is_null() {
        return Err(CError::bad_arg(format!("{what} is null")));
    }
    Ok(())
}

/// Join the job this process belongs to, as started by `amrun` (without it, a job of one
/// rank), on the conduit named by `AMNET_CONDUIT` (default smp), with the settings of the
/// environment (the README lists every variable). Call it once per process, before every
/// other call but `amnet_exit`, `amnet_last_error` and `amnet_error_name`; then call
/// `amnet_attach`. A second call fails with the state code.
#[no_mangle]
pub extern "C" fn amnet_init() -> c_int {
    guard("amnet_init", || join(amnet::Builder::new()))
}

/// One setting for `amnet_init_with`: an environment variable's name and the value to use
/// instead of the environment's.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct Setting {
    /// The variable's name (one of those the README lists), NUL-terminated.
    pub name: *const std::ffi::c_char,
    /// Its value, NUL-terminated; an empty value means the default whatever the environment
    /// says.
    pub value: *const std::ffi::c_char,
}

/// `amnet_init` with the `count` settings at `settings` taking the place of the environment's
/// values for their variables (`amnet::Builder::var`); the others still come from the
/// environment. An unknown name or a value its variable does not accept fails with the
/// configuration code naming it, before anything is joined (a later call may try again).
///
/// # Safety
/// - `settings` is null with `count` 0, or valid for reads of `count` settings, each with
///   two valid NUL-terminated strings.
#[no_mangle]
pub unsafe extern "C" fn amnet_init_with(settings: *const Setting, count: usize) -> c_int {
    guard("amnet_init_with", || {
        let list: &[Setting] = if count == 0 {
            &[]
        } else {
            required(settings, "settings")?;
            if !settings.is_aligned() || count > isize::MAX as usize / size_of::<Setting>() {
                return Err(CError::bad_arg(format!(
                    "settings {settings:p} with {count} entries is misaligned or too long"
                )));
            }
            // SAFETY: non-null, aligned, readable for `count` entries (the caller's contract).
            unsafe { std::slice::from_raw_parts(settings, count) }
        };
        let mut b = amnet::Builder::new();
        for (i, s) in list.iter().enumerate() {
            if s.name.is_null() || s.value.is_null() {
                return Err(CError::bad_arg(format!(
                    "settings[{i}] has a null name or value"
                )));
            }
            // SAFETY: non-null NUL-terminated strings (the caller's contract).
            let (name, value) = unsafe {
                (
                    std::ffi::CStr::from_ptr(s.name),
                    std::ffi::CStr::from_ptr(s.value),
                )
            };
            let (Ok(name), Ok(value)) = (name.to_str(), value.to_str()) else {
                return Err(CError::bad_arg(format!("settings[{i}] is not UTF-8 text")));
            };
            b = b.var(name, value);
        }
        join(b)
    })
}

/// Join the job with `b`'s settings, once per process.
fn join(b: amnet::Builder) -> Result<c_int, CError> {
    let _serial = INIT.lock().unwrap_or_else(|e| e.into_inner());
    if EP.get().is_some() {
        return Err(CError::new(
            ERR_STATE,
            "amnet is already initialized in this process; a process joins the job once",
        ));
    }
    let ep = b.init()?;
    let _ = EP.set(ep);
    Ok(OK)
}

/// This rank's number, `0..size`, in `*rank`.
///
/// # Safety
/// - `rank` is valid for a write of a `uint32_t`.
#[no_mangle]
pub unsafe extern "C" fn amnet_rank(rank: *mut u32) -> c_int {
    guard("amnet_rank", || {
        required(rank, "rank")?;
        let r = ep()?.rank();
        // SAFETY: checked non-null; the caller's contract makes it writable.
        unsafe { rank.write(r) };
        Ok(OK)
    })
}

/// The number of ranks in the job, in `*size`.
///
/// # Safety
/// - `size` is valid for a write of a `uint32_t`.
#[no_mangle]
pub unsafe extern "C" fn amnet_size(size: *mut u32) -> c_int {
    guard("amnet_size", || {
        required(size, "size")?;
        let s = ep()?.size();
        // SAFETY: checked non-null; the caller's contract makes it writable.
        unsafe { size.write(s) };
        Ok(OK)
    })
}

/// This rank's segment: its base address in `*base` and its length in bytes in `*size`
/// (either may be null). Needs attach. Other ranks may write it at any time (Long payloads,
/// puts); the program decides who owns which bytes when. It stays mapped until the process
/// ends.
///
/// # Safety
/// - `base` is null or valid for a write of a pointer; `size` is null or valid for a write
///   of a `size_t`.
#[no_mangle]
pub unsafe extern "C" fn amnet_segment(
    base: *mut *mut std::ffi::c_void,
    size: *mut usize,
) -> c_int {
    guard("amnet_segment", || {
        let ep = ep()?;
        let p = ep.segment_ptr()?;
        let len = ep.segment_len()?;
        // SAFETY: the caller's contract for both pointers.
        unsafe {
            store(base, p.cast());
            store(size, len);
        }
        Ok(OK)
    })
}

/// The length in bytes of `rank`'s segment, in `*size`. Needs attach. Other ranks' segments
/// are addressed by (rank, offset): put/get and Long messages take offsets, not addresses.
///
/// # Safety
/// - `size` is valid for a write of a `size_t`.
#[no_mangle]
pub unsafe extern "C" fn amnet_segment_size_of(rank: u32, size: *mut usize) -> c_int {
    guard("amnet_segment_size_of", || {
        required(size, "size")?;
        let len = ep()?.segment_len_of(rank)?;
        // SAFETY: checked non-null; the caller's contract makes it writable.
        unsafe { size.write(len) };
        Ok(OK)
    })
}

/// The ranks on this rank's host (spec/core.md §7d), as GASNet-EX's
/// `gex_System_QueryHostInfo`: `*host_peers` points at their numbers, ascending (valid until
/// the process ends), `*host_count` is how many, `*host_rank` this rank's index among them.
/// Each pointer may be null. Needs attach.
///
/// # Safety
/// - `host_peers` is null or valid for a write of a pointer; `host_count` and `host_rank` are
///   null or valid for a write of a `uint32_t`.
#[no_mangle]
pub unsafe extern "C" fn amnet_host_info(
    host_peers: *mut *const u32,
    host_count: *mut u32,
    host_rank: *mut u32,
) -> c_int {
    guard("amnet_host_info", || {
        let ep = ep()?;
        let peers = ep.host_peers()?;
        let idx = ep.host_rank()?;
        let count = u32::try_from(peers.len()).unwrap_or(u32::MAX);
        // SAFETY: the caller's contract for the three pointers; `peers` lives in the
        // endpoint, which lives until the process ends.
        unsafe {
            store(host_peers, peers.as_ptr());
            store(host_count, count);
            store(host_rank, idx);
        }
        Ok(OK)
    })
}

/// How many hosts the job runs on (`*hosts`, may be null) and the host index of `rank`
/// (`*host`, may be null; hosts are numbered in the order of their lowest rank). Needs
/// attach; `AMNET_ERR_BAD_RANK` for a rank outside the job.
///
/// # Safety
/// - `hosts` and `host` are null or valid for a write of a `uint32_t`.
#[no_mangle]
pub unsafe extern "C" fn amnet_host_of(rank: u32, hosts: *mut u32, host: *mut u32) -> c_int {
    guard("amnet_host_of", || {
        let map = ep()?.host_map()?;
        let h = map.host_of(rank)?;
        // SAFETY: the caller's contract for both pointers.
        unsafe {
            store(hosts, map.hosts());
            store(host, h);
        }
        Ok(OK)
    })
}

/// Run the handlers of every message that has arrived; how many ran goes to `*ran` (which
/// may be null). Handlers run only inside amnet calls that poll, on the calling thread.
///
/// # Safety
/// - `ran` is null or valid for a write of a `size_t`.
#[no_mangle]
pub unsafe extern "C" fn amnet_poll(ran: *mut usize) -> c_int {
    guard("amnet_poll", || {
        let n = ep()?.poll()?;
        // SAFETY: the caller's contract.
        unsafe { store(ran, n) };
        Ok(OK)
    })
}

/// Start this rank's progress thread, which polls while the program's threads compute, so
/// that the rank answers active messages, AM-path put/get and atomics without calls of its
/// own (handlers then also run on that thread). Needs attach; starting it twice is harmless.
/// `AMNET_PROGRESS_THREAD=1` starts it at attach.
#[no_mangle]
pub extern "C" fn amnet_progress_thread_start() -> c_int {
    guard("amnet_progress_thread_start", || {
        ep()?.start_progress_thread()?;
        Ok(OK)
    })
}

/// Stop this rank's progress thread and wait for it to end (refused from a handler running
/// on that thread).
#[no_mangle]
pub extern "C" fn amnet_progress_thread_stop() -> c_int {
    guard("amnet_progress_thread_stop", || {
        ep()?.stop_progress_thread()?;
        Ok(OK)
    })
}

/// Whether this rank's progress thread runs, in `*running` (1 or 0).
///
/// # Safety
/// - `running` is valid for a write of an `int`.
#[no_mangle]
pub unsafe extern "C" fn amnet_progress_thread_running(running: *mut c_int) -> c_int {
    guard("amnet_progress_thread_running", || {
        required(running, "running")?;
        let r = c_int::from(ep()?.progress_thread_running());
        // SAFETY: checked non-null; the caller's contract makes it writable.
        unsafe { running.write(r) };
        Ok(OK)
    })
}

/// A condition for `amnet_wait_until`: non-zero when the wait is over.
pub type WaitCond = Option<unsafe extern "C" fn(arg: *mut std::ffi::c_void) -> c_int>;

/// Poll until `cond(arg)` returns non-zero, backing off while idle (spin, then yield, then
/// sleep). `cond` is checked before each poll and after every handler a poll runs, so the
/// wait ends the moment a handler makes it true. It must be a cheap check of state that
/// handlers update, and must not call amnet.
///
/// # Safety
/// - `cond` is a function that may be called with `arg` any number of times during the call,
///   and calls no amnet function.
#[no_mangle]
pub unsafe extern "C" fn amnet_wait_until(cond: WaitCond, arg: *mut std::ffi::c_void) -> c_int {
    guard("amnet_wait_until", || {
        let Some(f) = cond else {
            return Err(CError::bad_arg("cond is null"));
        };
        // SAFETY: the caller's contract: `f` may be called with `arg`.
        ep()?.wait_until(|| unsafe { f(arg) } != 0)?;
        Ok(OK)
    })
}

/// `*word == value` (for `amnet_wait_word`).
pub const CMP_EQ: c_int = 0;
/// `*word != value`.
pub const CMP_NE: c_int = 1;
/// `*word >= value` (unsigned).
pub const CMP_GE: c_int = 2;
/// `*word > value` (unsigned).
pub const CMP_GT: c_int = 3;
/// `*word <= value` (unsigned).
pub const CMP_LE: c_int = 4;
/// `*word < value` (unsigned).
pub const CMP_LT: c_int = 5;

/// Poll until the 32-bit `*word` compares to `value` as `cmp` says (one of the
/// `AMNET_CMP_*` constants), as `amnet_wait_until` does. `*word` is read with atomic loads
/// (acquire): handlers that run on the waiting thread (inside its polls) set it with plain
/// stores; other threads, the progress thread's handlers among them, with atomic stores.
///
/// # Safety
/// - `word` is valid for reads of a 4-byte-aligned `uint32_t` for the whole call, written
///   only by handlers running on the calling thread or by atomic stores.
#[no_mangle]
pub unsafe extern "C" fn amnet_wait_word(word: *const u32, cmp: c_int, value: u32) -> c_int {
    guard("amnet_wait_word", || {
        required(word, "word")?;
        if !word.cast::<std::sync::atomic::AtomicU32>().is_aligned() {
            return Err(CError::bad_arg(format!(
                "word {word:p} is not aligned to 4 bytes"
            )));
        }
        // SAFETY: non-null and aligned (checked), readable for the call and written only
        // atomically (the caller's contract).
        let w = unsafe { std::sync::atomic::AtomicU32::from_ptr(word.cast_mut()) };
        let load = || w.load(std::sync::atomic::Ordering::Acquire);
        let ep = ep()?;
        match cmp {
            CMP_EQ => ep.wait_until(|| load() == value)?,
            CMP_NE => ep.wait_until(|| load() != value)?,
            CMP_GE => ep.wait_until(|| load() >= value)?,
            CMP_GT => ep.wait_until(|| load() > value)?,
            CMP_LE => ep.wait_until(|| load() <= value)?,
            CMP_LT => ep.wait_until(|| load() < value)?,
            other => {
                return Err(CError::bad_arg(format!(
                    "cmp {other} is none of the comparisons (0 to 5: EQ, NE, GE, GT, LE, LT)"
                )))
            }
        }
        Ok(OK)
    })
}

/// Whether some rank has asked the job to end: `*requested` becomes 1 and `*code` the
/// job-wide exit code if so, 0 otherwise (`*code` is then left alone). Callable from handlers.
///
/// # Safety
/// - `requested` is valid for a write of an `int`; `code` is null or valid for a write of an
///   `int`.
#[no_mangle]
pub unsafe extern "C" fn amnet_exit_requested(requested: *mut c_int, code: *mut c_int) -> c_int {
    guard("amnet_exit_requested", || {
        required(requested, "requested")?;
        let r = ep()?.exit_requested();
        // SAFETY: checked non-null / the caller's contract.
        unsafe {
            requested.write(c_int::from(r.is_some()));
            if let Some(c) = r {
                store(code, c);
            }
        }
        Ok(OK)
    })
}

/// End the whole job with `code`: every rank stops promptly and `amrun` exits with the first
/// code any rank passed. Callable from anywhere: any thread, a handler, before `amnet_init`
/// (then only this process ends). Never returns. Returning from `main` also ends the job
/// with `main`'s status, so programs end with a barrier first.
#[no_mangle]
pub extern "C" fn amnet_exit(code: c_int) -> ! {
    let r = std::panic::catch_unwind(|| match EP.get() {
        Some(ep) => ep.exit(code),
        None => std::process::exit(code),
    });
    // Only a bug reaches this point: leave with the code all the same.
    let _ = r;
    std::process::exit(code)
}

/// Message and byte counts for one direction and kind of active message.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct AmCounts {
    /// Short messages.
    pub short_msgs: u64,
    /// Medium messages.
    pub medium_msgs: u64,
    /// Long messages.
    pub long_msgs: u64,
    /// Payload bytes carried by Medium messages.
    pub medium_bytes: u64,
    /// Payload bytes carried by Long messages.
    pub long_bytes: u64,
}

impl From<amnet::AmCounts> for AmCounts {
    fn from(c: amnet::AmCounts) -> Self {
        AmCounts {
            short_msgs: c.short,
            medium_msgs: c.medium,
            long_msgs: c.long,
            medium_bytes: c.medium_bytes,
            long_bytes: c.long_bytes,
        }
    }
}

/// A snapshot of this rank's counters, summed over every thread that used it (as printed at
/// exit with `AMNET_STATS=1`).
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct Stats {
    /// Requests this rank sent (amnet's own traffic for put/get and barriers included).
    pub requests_sent: AmCounts,
    /// Replies this rank sent.
    pub replies_sent: AmCounts,
    /// Requests whose handlers ran on this rank.
    pub requests_received: AmCounts,
    /// Replies whose handlers ran on this rank.
    pub replies_received: AmCounts,
    /// Put operations started (any form).
    pub puts: u64,
    /// Bytes written by put.
    pub put_bytes: u64,
    /// Get operations started (any form).
    pub gets: u64,
    /// Bytes read by get.
    pub get_bytes: u64,
    /// Barriers completed.
    pub barriers: u64,
    /// Calls into the conduit's poll.
    pub polls: u64,
    /// Handlers run.
    pub handler_calls: u64,
    /// Times a send found no room and polled before retrying.
    pub send_stalls: u64,
    /// Put acknowledgements and get replies that named no operation waiting for them,
    /// dropped.
    pub stray_rma_replies: u64,
}

/// This rank's counters, in `*stats`. Works before attach too.
///
/// # Safety
/// - `stats` is valid for a write of an `amnet_stats_t`.
#[no_mangle]
pub unsafe extern "C" fn amnet_stats(stats: *mut Stats) -> c_int {
    guard("amnet_stats", || {
        required(stats, "stats")?;
        let s = ep()?.stats();
        let out = Stats {
            requests_sent: s.requests_sent.into(),
            replies_sent: s.replies_sent.into(),
            requests_received: s.requests_received.into(),
            replies_received: s.replies_received.into(),
            puts: s.puts,
            put_bytes: s.put_bytes,
            gets: s.gets,
            get_bytes: s.get_bytes,
            barriers: s.barriers,
            polls: s.polls,
            handler_calls: s.handler_calls,
            send_stalls: s.send_stalls,
            stray_rma_replies: s.stray_rma_replies,
        };
        // SAFETY: checked non-null; the caller's contract makes it writable.
        unsafe { stats.write(out) };
        Ok(OK)
    })
}

#[cfg(test)]
mod tests;
