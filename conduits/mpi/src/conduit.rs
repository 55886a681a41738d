//! The mpi conduit: active messages over non-blocking MPI point-to-point messages on a
//! private communicator.
//!
//! Design (the details are in `README.md` beside this file):
//!
//! - **Private communicators.** `MPI_COMM_WORLD` is duplicated at start-up: one duplicate per
//!   pre-posted receive class (`Engine::lanes`), one for everything else, and one that carries
//!   only the barrier of the job-wide exit. No client receive on the world communicator can
//!   match amnet's traffic.
//! - **Tags.** Requests and replies travel under different tags, each in a small and a large
//!   size class; credit returns, exit notices and separate Long payloads have tags of their own.
//! - **Pre-posted receives.** A bounded pool of `MPI_ANY_SOURCE` receives per tag. A completed
//!   receive holds its buffer (arguments, inline payload) until the handler has run, then is
//!   posted again at the start of the next progress.
//! - **Credits.** A rank may have at most `credits` unconsumed requests, and as many replies,
//!   outstanding at each peer. The receiver returns credits piggy-backed on its own messages
//!   (request credits on anything, reply credits on replies only) or, once half the window is
//!   owed, in a credit message that is always received. Replies have their own credits, tags
//!   and receives, so a handler that waits to reply only needs replies to drain.
//! - **Long.** When put/get run natively, a payload of at least `AMNET_MPI_LONG_PUT` bytes is
//!   put into the target segment (`MPI_Put`, `MPI_Win_flush`) before the header is sent.
//!   Otherwise a payload of up to 64 KiB travels inline and is copied into the segment before
//!   the handler runs, and a larger one follows as a separate message under a per-transfer data
//!   tag and is received straight into the segment at the given offset.
//! - **Put visibility.** Once a rank has started an `MPI_Put` (or received a message flagged
//!   so), every message it sends carries the `sync` flag; a poll that received a flagged
//!   message calls `MPI_Win_sync` before running handlers (see `rma.rs`).
//! - **Exit.** An exit notice goes to every rank; then every rank meets in a barrier on the exit
//!   communicator and finalizes MPI, or, when some rank does not arrive within the grace
//!   period, one calls `MPI_Abort` with the code.

use std::cell::Cell;
use std::collections::VecDeque;
use std::os::raw::c_int;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use amnet_core::{
    Category, Conduit, Error, InMsg, LocalSegment, NativeRma, OutMsg, Rank, Result, MAX_ARGS,
};
use mpi::Threading;

use crate::raw::{self, Comm, Completions, Request, Status};
use crate::rma::Window;
use crate::segment::{self, Segment};
use crate::wire::{self, Data, Header};

/// Largest Medium payload (and largest Long payload sent inline).
pub const MAX_MEDIUM: usize = wire::MAX_INLINE;

const TAG_EXIT: c_int = 1;
const TAG_CREDIT: c_int = 2;
/// Message tags by `[class][size]`: class 0 requests, 1 replies; size 0 small, 1 large.
const TAG_MSG: [[c_int; 2]; 2] = [[5, 6], [3, 4]];
/// Separate Long payloads use `TAG_LONG + index`, index < `wire::LONG_TAGS` (the standard
/// guarantees tags up to 32767).
const TAG_LONG: c_int = 64;
/// Tags that have a communicator of their own (`Engine::lanes`): `TAG_EXIT..=LANE_TAGS`.
const LANE_TAGS: c_int = 6;
const _: () = assert!(TAG_EXIT == 1 && TAG_CREDIT == 2 && TAG_MSG[0][1] == LANE_TAGS);
const _: () = assert!(TAG_MSG[1][0] == 3 && TAG_MSG[1][1] == 4 && TAG_MSG[0][0] == 5);

/// Receive buffer of the small classes: a Short message with 16 arguments, or a Medium or Long
/// with up to 928 payload bytes.
const SMALL_BYTES: usize = 1024;
/// Calls the first look of a poll makes at most while they find nothing (`MPI_Testsome` over
/// every tested receive, or `MPI_Test` on the one that completed last; see
/// `Engine::progress`). With two `MPI_Testsome` calls, a message that the second call's
/// progress matched waited for the whole round of the wait loop (the core's checks, the
/// receive lock, the reposting) before a call reported it; with four, the 2-rank Short round
/// trip took 0.51-0.52 µs instead of 0.54-0.55 µs on the machine of bench/RESULTS.md (raw
/// MPI: 0.37-0.38 µs). An idle poll costs up to eight calls (two when the host is
/// oversubscribed).
const FIRST_LOOK_CALLS: u32 = 8;
/// In the first look of a poll, every this many calls is an `MPI_Testsome` over every tested
/// receive; the others are an `MPI_Test` of the receive that completed last. A message for
/// another receive waits for at most this many calls less one.
const TESTSOME_EVERY: u32 = 4;
/// Receive buffer of the large classes: the largest message.
const LARGE_BYTES: usize = wire::encoded_len(MAX_ARGS, MAX_MEDIUM);
/// A separate Long payload is sent in messages of at most this many bytes (MPI counts are
/// `int`).
const LONG_CHUNK: usize = 1 << 30;
/// Messages delivered per poll at most.
const POLL_BUDGET: usize = 64;
/// `try_send` reaps completed sends once this many are outstanding (and then once twice as
/// many as remained are), so that many slow sends do not make every send scan them all.
const REAP_AT: usize = 64;
/// Free send buffers kept per size class.
const KEEP_SMALL: usize = 256;
const KEEP_LARGE: usize = 16;

const REQ: usize = 0;
const REP: usize = 1;

/// How long a collective of attach may still complete after a job-wide exit was seen.
const COLLECTIVE_GRACE: Duration = Duration::from_millis(500);

const DEFAULT_CREDITS: u32 = 32;
/// Default of `AMNET_MPI_LONG_PUT`: Long payloads of at least this many bytes are put into the
/// target segment when put/get run natively; smaller ones travel inline with the header.
const DEFAULT_LONG_PUT: usize = 256;
/// Largest `AMNET_MPI_LONG_PUT`: every payload too large to travel inline is put.
const MAX_LONG_PUT: usize = wire::MAX_INLINE + 1;
/// At most this many credits per peer and class: every outstanding separate Long holds a
/// credit, so the data tag index cannot wrap onto a transfer still in flight.
const MAX_CREDITS: u32 = 1024;
const _: () = assert!(2 * MAX_CREDITS < wire::LONG_TAGS);
const _: () = assert!((TAG_LONG as u32) + wire::LONG_TAGS <= 32767);

const RUNNING: u8 = 0;
const LEAVING: u8 = 1;
const FINALIZED: u8 = 2;

/// Settings read from the environment.
#[derive(Debug, Clone)]
struct Settings {
    credits: u32,
    grace: Duration,
    boot_timeout: Duration,
    verbose: bool,
    /// File where the rank that ends the job with a non-zero code records `rank code`, for the
    /// launcher's report (`AMNET_MPI_REPORT`, set by the spawner).
    report: Option<std::path::PathBuf>,
    /// The spawner's socket that every rank keeps a connection to, so that the spawner can
    /// name a rank that died (`AMNET_MPI_LIFELINE`, set by the spawner for Hydra, which names
    /// none).
    lifeline: Option<std::path::PathBuf>,
    /// Bytes per `MPI_Put`/`MPI_Get` of the native put/get path (`AMNET_MPI_RMA_CHUNK`, at
    /// most and by default [`raw::RMA_CHUNK`]); larger transfers are split.
    rma_chunk: usize,
    /// A Long payload of at least this many bytes is put into the target segment when
    /// put/get run natively (`AMNET_MPI_LONG_PUT`, 1..=[`MAX_LONG_PUT`], default
    /// [`DEFAULT_LONG_PUT`]).
    long_put: usize,
}

fn env_flag(name: &str) -> Result<bool> {
    match std::env::var(name) {
        Err(_) => Ok(false),
        Ok(v) => match v.as_str() {
            "" | "0" | "no" | "false" => Ok(false),
            "1" | "yes" | "true" => Ok(true),
            other => Err(Error::Config(format!("{name}={other:?}: expected 0 or 1"))),
        },
    }
}

impl Settings {
    fn from_env() -> Result<Settings> {
        let credits = match std::env::var("AMNET_MPI_CREDITS") {
            Err(_) => DEFAULT_CREDITS,
            Ok(v) => match v.parse::<u32>() {
                Ok(c) if (2..=MAX_CREDITS).contains(&c) => c,
                _ => {
                    return Err(Error::Config(format!(
                        "AMNET_MPI_CREDITS={v:?}: expected a whole number in 2..={MAX_CREDITS}"
                    )))
                }
            },
        };
        let grace = match std::env::var("AMNET_MPI_EXIT_GRACE") {
            Err(_) => Duration::from_secs(2),
            Ok(v) => match v.parse::<f64>() {
                Ok(s) if s.is_finite() && s > 0.0 && s < 1e6 => Duration::from_secs_f64(s),
                _ => {
                    return Err(Error::Config(format!(
                        "AMNET_MPI_EXIT_GRACE={v:?}: expected a positive number of seconds"
                    )))
                }
            },
        };
        let boot_timeout = amnet_core::conduit::boot_timeout()?;
        let rma_chunk = match std::env::var("AMNET_MPI_RMA_CHUNK") {
            Err(_) => raw::RMA_CHUNK,
            Ok(v) => match v.parse::<usize>() {
                Ok(c) if (1..=raw::RMA_CHUNK).contains(&c) => c,
                _ => {
                    return Err(Error::Config(format!(
                        "AMNET_MPI_RMA_CHUNK={v:?}: expected a whole number of bytes in 1..={}",
                        raw::RMA_CHUNK
                    )))
                }
            },
        };
        let long_put = match std::env::var("AMNET_MPI_LONG_PUT") {
            Err(_) => DEFAULT_LONG_PUT,
            Ok(v) => match v.parse::<usize>() {
                Ok(c) if (1..=MAX_LONG_PUT).contains(&c) => c,
                _ => {
                    return Err(Error::Config(format!(
                        "AMNET_MPI_LONG_PUT={v:?}: expected a whole number of bytes in \
                         1..={MAX_LONG_PUT}"
                    )))
                }
            },
        };
        Ok(Settings {
            rma_chunk,
            long_put,
            credits,
            grace,
            boot_timeout,
            verbose: env_flag("AMNET_VERBOSE")?,
            report: std::env::var_os("AMNET_MPI_REPORT")
                .filter(|p| !p.is_empty())
                .map(Into::into),
            lifeline: std::env::var_os("AMNET_MPI_LIFELINE")
                .filter(|p| !p.is_empty())
                .map(Into::into),
        })
    }
}

/// Flow-control state for one peer.
#[derive(Debug)]
struct Peer {
    /// Messages of each class this rank may still send to the peer.
    credits: [AtomicU32; 2],
    /// Messages of each class from the peer consumed here and not yet returned.
    owed: [AtomicU32; 2],
    /// Next data tag index for a separate Long to the peer.
    long_seq: AtomicU32,
}

impl Peer {
    fn new(credits: u32) -> Peer {
        Peer {
            credits: [AtomicU32::new(credits), AtomicU32::new(credits)],
            owed: [AtomicU32::new(0), AtomicU32::new(0)],
            long_seq: AtomicU32::new(0),
        }
    }

    #[inline]
    fn take_credit(&self, class: usize) -> bool {
        self.credits[class]
            .fetch_update(Ordering::Acquire, Ordering::Relaxed, |c| c.checked_sub(1))
            .is_ok()
    }

    #[inline]
    fn give(&self, class: usize, n: u16) {
        if n > 0 {
            self.credits[class].fetch_add(u32::from(n), Ordering::Release);
        }
    }

    /// Take what is owed for `class`, at most what a header field carries.
    #[inline]
    fn take_owed(&self, class: usize) -> u16 {
        if self.owed[class].load(Ordering::Relaxed) == 0 {
            return 0;
        }
        let v = self.owed[class].swap(0, Ordering::AcqRel);
        match u16::try_from(v) {
            Ok(n) => n,
            Err(_) => {
                self.owed[class].fetch_add(v - u32::from(u16::MAX), Ordering::AcqRel);
                u16::MAX
            }
        }
    }
}

/// Outstanding sends and their buffers.
struct Tx {
    reqs: Vec<Request>,
    bufs: Vec<Vec<u8>>,
    small: Vec<Vec<u8>>,
    large: Vec<Vec<u8>>,
    done: Completions,
    scratch: Vec<usize>,
    /// Outstanding sends at which `try_send` reaps next.
    reap_at: usize,
    /// `reqs.len()`, readable without the lock (so that an idle poll need not take it).
    pending: Arc<AtomicUsize>,
}

// SAFETY: the request handles are process-wide MPI names usable from any thread (calls are
// serialized by `raw::locked` below MPI_THREAD_MULTIPLE); the buffers are owned heap memory.
// The whole structure is only reached through its mutex.
unsafe impl Send for Tx {}

impl Tx {
    fn buffer(&mut self, need: usize) -> Vec<u8> {
        let b = if need <= SMALL_BYTES {
            self.small.pop()
        } else if need <= LARGE_BYTES {
            self.large.pop()
        } else {
            None
        };
        match b {
            Some(mut b) => {
                b.clear();
                b
            }
            None => Vec::with_capacity(if need <= SMALL_BYTES {
                SMALL_BYTES
            } else {
                need.max(LARGE_BYTES)
            }),
        }
    }

    fn push(&mut self, comm: Comm, dest: u32, tag: c_int, buf: Vec<u8>) -> Result<()> {
        // SAFETY: the buffer's heap memory stays in `self.bufs`, unread and unmodified, until
        // `reap` sees the request complete (moving the Vec does not move its contents), or is
        // recycled below once the request is complete.
        let mut req = unsafe { raw::isend(buf.as_ptr(), buf.len(), dest, tag, comm)? };
        // A small send usually completes inside MPI_Isend (copied out eagerly): test it at
        // once, so that it needs no bookkeeping and its buffer is reused for the next message.
        if buf.len() <= SMALL_BYTES && raw::test_done(&mut req)? {
            self.keep(buf);
            return Ok(());
        }
        self.outstanding(req, buf)
    }

    /// Keep `buf` until `req`, the send from it, completes; retire completed sends once
    /// enough are kept.
    fn outstanding(&mut self, req: Request, buf: Vec<u8>) -> Result<()> {
        self.reqs.push(req);
        self.bufs.push(buf);
        self.pending.store(self.reqs.len(), Ordering::Relaxed);
        if self.reqs.len() >= self.reap_at {
            self.reap()?;
        }
        Ok(())
    }

    /// Keep a send buffer whose send completed, for reuse.
    #[inline]
    fn keep(&mut self, b: Vec<u8>) {
        let cap = b.capacity();
        if (SMALL_BYTES..LARGE_BYTES).contains(&cap) && self.small.len() < KEEP_SMALL {
            self.small.push(b);
        } else if (LARGE_BYTES..2 * LARGE_BYTES).contains(&cap) && self.large.len() < KEEP_LARGE {
            self.large.push(b);
        }
    }

    /// Retire completed sends and keep their buffers for reuse.
    fn reap(&mut self) -> Result<()> {
        let n = raw::testsome(&mut self.reqs, &mut self.done)?;
        if n == 0 {
            self.reap_at = (2 * self.reqs.len()).max(REAP_AT);
            return Ok(());
        }
        let mut idx = std::mem::take(&mut self.scratch);
        idx.clear();
        idx.extend(self.done.iter().map(|(i, _)| i));
        // Highest index first, so swap_remove moves only entries already visited.
        idx.sort_unstable_by(|a, b| b.cmp(a));
        for &i in &idx {
            if i >= self.reqs.len() {
                continue;
            }
            self.reqs.swap_remove(i);
            let b = self.bufs.swap_remove(i);
            self.keep(b);
        }
        self.scratch = idx;
        self.pending.store(self.reqs.len(), Ordering::Relaxed);
        self.reap_at = (2 * self.reqs.len()).max(REAP_AT);
        Ok(())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum SlotKind {
    Exit,
    Credit,
    /// Active messages of a class (REQ or REP).
    Msg(usize),
}

/// One pre-posted receive (its buffer is in [`Buffers`]).
struct Slot {
    kind: SlotKind,
    tag: c_int,
    /// Its entry in the array of tested receives (`Rx::test`).
    entry: usize,
    /// The queue of posted receives it joins when its tag's messages complete receives in the
    /// order they were posted (`Rx::fifo`); `None`: tested on its own.
    fifo: Option<usize>,
}

/// `Rx::test_slot` of an entry with no posted receive.
const NO_SLOT: usize = usize::MAX;

/// The receive buffers, one per slot: allocated at start-up, never moved, and kept for the
/// life of the process (the engine is never dropped).
///
/// Who may touch buffer `i`: MPI while slot `i`'s receive is posted; once it completed, the
/// thread that took the completion (under the `rx` lock), then the thread that delivers its
/// message, until that thread gives the slot back (`Engine::give_back`); the receive is posted
/// again only after that. So one party at a time uses a buffer, and no lock is needed to read
/// a delivered message or to give its slot back.
struct Buffers {
    bufs: Box<[(*mut u8, usize)]>,
}

// SAFETY: the addresses of heap memory this structure owns for the life of the process; the
// protocol above decides who reads or writes them at any time.
unsafe impl Send for Buffers {}
// SAFETY: as above.
unsafe impl Sync for Buffers {}

impl Buffers {
    fn new(sizes: impl Iterator<Item = usize>) -> Buffers {
        let bufs = sizes
            .map(|n| {
                let b: *mut [u8] = Box::into_raw(vec![0u8; n].into_boxed_slice());
                (b.cast::<u8>(), n)
            })
            .collect();
        Buffers { bufs }
    }

    /// Address and length of slot `i`'s buffer.
    #[inline]
    fn raw(&self, i: usize) -> (*mut u8, usize) {
        self.bufs
            .get(i)
            .copied()
            .unwrap_or((std::ptr::null_mut(), 0))
    }

    /// The first `len` bytes of slot `i`'s buffer (fewer if it is shorter).
    ///
    /// # Safety
    /// - The caller holds slot `i` by the protocol above: its receive completed, and the slot
    ///   has not been given back since.
    #[inline]
    unsafe fn read(&self, i: usize, len: usize) -> &[u8] {
        let (p, n) = self.raw(i);
        if p.is_null() {
            return &[];
        }
        // SAFETY: `p` is valid for `n` bytes for the life of the process; per the contract
        // nobody writes them meanwhile.
        unsafe { std::slice::from_raw_parts(p, len.min(n)) }
    }
}

/// A separate Long payload being received into the segment.
struct PendingLong {
    src: u32,
    hdr: Header,
    /// The receive slot whose buffer holds the header and arguments.
    slot: usize,
    chunks_left: usize,
}

/// A received message waiting for delivery.
struct Ready {
    src: u32,
    hdr: Header,
    /// The receive slot whose buffer holds the message (arguments, an inline payload) until the
    /// handler has run; then the slot is given back and its receive posted again.
    slot: usize,
    /// Bytes received.
    len: usize,
}

/// Receive state.
///
/// Every receive is posted with `MPI_ANY_SOURCE` and the tag of its slot, so receives of one
/// tag match messages in the order they were posted (MPI's non-overtaking rule). A message
/// that fits the small buffers arrives in one piece and completes its receive when it
/// matches; so within such a tag the oldest posted receive always completes first, and only
/// it needs testing. Those slots wait in a queue per tag (`fifo`) whose head alone is in the
/// tested array (`test`); large messages, which may complete out of match order, are tested
/// slot by slot. A poll's `MPI_Testsome` therefore looks at a handful of requests whatever
/// the number of ranks (8 instead of 23 at 2 ranks, 20 instead of 161 at 16).
struct Rx {
    /// The request of every slot (`MPI_REQUEST_NULL` when not posted): the exit slot, the
    /// credit slots, the reply slots, then the request slots. It owns the handles; `test`
    /// holds copies.
    reqs: Vec<Request>,
    slots: Vec<Slot>,
    /// The requests `MPI_Testsome` looks at: the exit slot, the oldest posted credit receive,
    /// the oldest posted small reply receive and every large reply slot (the prefix
    /// `..reply_end`, tested when only replies may run), then the same for requests. A
    /// completed entry is replaced by the next receive of its queue, or left null.
    test: Vec<Request>,
    /// The slot whose request each entry of `test` holds, or [`NO_SLOT`].
    test_slot: Vec<usize>,
    reply_end: usize,
    /// The entry of `test` that completed last: the first look of a poll tests it alone in
    /// three calls of four (see `Engine::progress`).
    hot: usize,
    /// The posted slots of each in-order tag (credits, small replies, small requests), oldest
    /// first.
    fifo: [VecDeque<usize>; 3],
    long_reqs: Vec<Request>,
    long_owner: Vec<usize>,
    longs: Vec<Option<PendingLong>>,
    free_longs: Vec<usize>,
    /// Received messages not yet delivered, by class.
    ready: [VecDeque<Ready>; 2],
    done: Completions,
    long_done: Completions,
    scratch: Vec<usize>,
}

// SAFETY: as for `Tx`: MPI handles and owned vectors, reached only through the mutex.
unsafe impl Send for Rx {}

impl Rx {
    /// True when a message waits in the ready queues that `pop` would return.
    #[inline]
    fn has_ready(&self, replies_only: bool) -> bool {
        !self.ready[REP].is_empty() || !replies_only && !self.ready[REQ].is_empty()
    }

    fn pop(&mut self, replies_only: bool) -> Option<Ready> {
        self.ready[REP].pop_front().or_else(|| {
            if replies_only {
                None
            } else {
                self.ready[REQ].pop_front()
            }
        })
    }

    /// Entry `k` of `test` completed (MPI set it to `MPI_REQUEST_NULL` and freed the request):
    /// clear its slot's handle, put the next receive of its queue in its place, and return the
    /// slot (`None` when the entry held none).
    fn retire(&mut self, k: usize) -> Option<usize> {
        let i = std::mem::replace(self.test_slot.get_mut(k)?, NO_SLOT);
        if i == NO_SLOT {
            return None;
        }
        self.reqs[i] = raw::null_request();
        self.test[k] = raw::null_request();
        if let Some(f) = self.slots[i].fifo {
            let q = &mut self.fifo[f];
            // The head of the queue is the receive that was tested.
            debug_assert_eq!(q.front(), Some(&i));
            q.pop_front();
            if let Some(&next) = q.front() {
                self.test[k] = self.reqs[next];
                self.test_slot[k] = next;
            }
        }
        Some(i)
    }

    fn add_long(&mut self, p: PendingLong) -> usize {
        match self.free_longs.pop() {
            Some(i) => {
                self.longs[i] = Some(p);
                i
            }
            None => {
                self.longs.push(Some(p));
                self.longs.len() - 1
            }
        }
    }
}

/// The process-wide state of the conduit.
struct Engine {
    rank: u32,
    size: u32,
    /// Separate Long payloads and the attach collectives.
    comm: Comm,
    /// One communicator per pre-posted receive class (the exit notice, credit returns, small
    /// and large replies, small and large requests), indexed by `tag - 1`. An MPI library
    /// matches an incoming message against the receives posted on its communicator in posting
    /// order (Open MPI's ob1 walks a list of them); with every class on one communicator,
    /// each message was compared with the long-lived receives of the other classes and the
    /// small ones reposted ahead of its own. Alone on its communicator, a small message
    /// matches the first receive it meets.
    lanes: [Comm; LANE_TAGS as usize],
    exit_comm: Comm,
    level: Threading,
    oversubscribed: bool,
    settings: Settings,
    threshold: u32,
    peers: Box<[Peer]>,
    tx: Mutex<Tx>,
    /// Outstanding sends (`Tx::pending`).
    tx_pending: Arc<AtomicUsize>,
    rx: Mutex<Rx>,
    /// The receive buffers, one per slot of `rx`.
    bufs: Buffers,
    /// Slots given back (bit `i % 64` of word `i / 64`) and not posted again yet: the next
    /// progress posts them, so that no delivery waits for `MPI_Irecv` and giving a slot back
    /// takes no lock.
    returned: Box<[AtomicU64]>,
    seg: OnceLock<Segment>,
    /// The RMA window over every rank's segment, when put/get run natively.
    rma: OnceLock<Arc<Window>>,
    /// 0, or `1 << 63 | origin << 32 | code` once a job-wide exit is known here.
    exit: AtomicU64,
    state: AtomicU8,
    /// Until when (`now_ns`) idle waits stay awake: a peer nudged this rank (see
    /// `Window::nudge_target`).
    awake_until: AtomicU64,
}

/// How long a nudge keeps this rank's idle waits awake.
const AWAKE_NS: u64 = 2_000_000;

/// Nanoseconds since the first call in this process: a monotonic clock that fits an atomic.
pub(crate) fn now_ns() -> u64 {
    static START: OnceLock<Instant> = OnceLock::new();
    u64::try_from(START.get_or_init(Instant::now).elapsed().as_nanos()).unwrap_or(u64::MAX)
}

fn pack_exit(origin: u32, code: i32) -> u64 {
    (1u64 << 63) | (u64::from(origin & 0x7fff_ffff) << 32) | u64::from(code as u32)
}

fn unpack_code(v: u64) -> i32 {
    #[allow(clippy::cast_possible_truncation)] // the low half holds the code's bits
    let c = v as u32 as i32;
    c
}

#[inline]
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn long_tag(index: u32) -> c_int {
    TAG_LONG + c_int::try_from(index % wire::LONG_TAGS).unwrap_or(0)
}

thread_local! {
    /// Set on the thread that is ending the process through the conduit.
    static LEAVING_HERE: Cell<bool> = const { Cell::new(false) };
    /// This thread's buffer for small messages (see `Engine::send_small`).
    static SEND_BUF: Cell<Vec<u8>> = const { Cell::new(Vec::new()) };
}

impl Engine {
    /// The communicator that carries messages with `tag` (see `lanes`).
    #[inline]
    fn comm_for(&self, tag: c_int) -> Comm {
        match usize::try_from(tag - 1) {
            Ok(i) if i < self.lanes.len() => self.lanes[i],
            _ => self.comm,
        }
    }

    #[inline]
    fn class_of(is_reply: bool) -> usize {
        if is_reply {
            REP
        } else {
            REQ
        }
    }

    fn send_control(&self, dest: u32, tag: c_int, body: [u8; wire::CTRL_LEN]) -> Result<()> {
        self.push_control(&mut lock(&self.tx), dest, tag, body)
    }

    fn push_control(
        &self,
        tx: &mut Tx,
        dest: u32,
        tag: c_int,
        body: [u8; wire::CTRL_LEN],
    ) -> Result<()> {
        let mut b = tx.buffer(body.len());
        b.extend_from_slice(&body);
        tx.push(self.comm_for(tag), dest, tag, b)
    }

    /// Send `msg` to `dest`, a credit of `class` taken.
    fn send(&self, peer: &Peer, dest: u32, class: usize, msg: &OutMsg<'_>) -> Result<()> {
        let len = msg.payload.len();
        let data = match msg.category {
            Category::Long => match self.rma.get().filter(|_| len >= self.settings.long_put) {
                Some(w) => {
                    // The payload goes straight into the target segment, complete there
                    // (MPI_Win_flush) before the header leaves: the target's MPI_Win_sync
                    // after receiving the header orders its handler's reads after it.
                    w.put(dest, msg.long_offset, msg.payload)?;
                    Data::Placed
                }
                None if len > wire::MAX_INLINE => {
                    Data::Separate(peer.long_seq.fetch_add(1, Ordering::Relaxed) % wire::LONG_TAGS)
                }
                None => Data::Inline,
            },
            _ => Data::Inline,
        };
        let inline = match (msg.category, data) {
            (Category::Short, _) | (_, Data::Separate(_) | Data::Placed) => 0,
            _ => len,
        };
        let need = wire::encoded_len(msg.args.len(), inline);
        let tag = TAG_MSG[class][usize::from(need > SMALL_BYTES)];
        // Reply credits travel on replies only: a rank waiting to reply polls replies alone.
        let credits = [
            peer.take_owed(REQ),
            if msg.is_reply { peer.take_owed(REP) } else { 0 },
        ];
        // After any put of this rank (this Long's included), or a message from a rank that had
        // put, the receiver must order its handler's reads after what was put.
        let sync = self.rma.get().is_some_and(|w| w.touched());
        if need <= SMALL_BYTES && !matches!(data, Data::Separate(_)) {
            return self.send_small(dest, tag, msg, credits, data, sync);
        }
        let mut tx = lock(&self.tx);
        let mut buf = tx.buffer(need);
        wire::encode(&mut buf, msg, credits, data, sync);
        if let Data::Separate(t) = data {
            for chunk in msg.payload.chunks(LONG_CHUNK) {
                tx.push(self.comm, dest, long_tag(t), chunk.to_vec())?;
            }
        }
        tx.push(self.comm_for(tag), dest, tag, buf)
    }

    /// Send a message of at most [`SMALL_BYTES`] from this thread's send buffer: encode,
    /// `MPI_Isend`, `MPI_Test`. Small sends usually complete inside `MPI_Isend`, and then
    /// neither the send lock nor any bookkeeping is needed; one that did not complete hands its
    /// buffer to the outstanding sends.
    fn send_small(
        &self,
        dest: u32,
        tag: c_int,
        msg: &OutMsg<'_>,
        credits: wire::Credits,
        data: Data,
        sync: bool,
    ) -> Result<()> {
        let comm = self.comm_for(tag);
        SEND_BUF.with(|cell| {
            let mut buf = cell.take();
            buf.clear();
            buf.reserve(SMALL_BYTES);
            wire::encode(&mut buf, msg, credits, data, sync);
            // SAFETY: the buffer's heap memory is neither read nor modified by Rust code until
            // the request completes: it goes back to the thread's cell only once MPI_Test saw
            // the send complete, and otherwise to the outstanding sends, which keep it until
            // `reap` sees it complete (moving the Vec does not move its contents).
            let mut req = match unsafe { raw::isend(buf.as_ptr(), buf.len(), dest, tag, comm) } {
                Ok(r) => r,
                Err(e) => {
                    cell.replace(buf);
                    return Err(e);
                }
            };
            let done = raw::test_done(&mut req);
            if let Ok(true) = done {
                cell.replace(buf);
                return Ok(());
            }
            let mut tx = lock(&self.tx);
            tx.outstanding(req, buf)?;
            done.map(|_| ())
        })
    }

    /// A message of `class` from `src` has been consumed: owe a credit, and return what is
    /// owed in a credit message once half the window is.
    fn consumed(&self, src: u32, class: usize) {
        let Some(p) = self.peers.get(src as usize) else {
            return;
        };
        let owed = p.owed[class].fetch_add(1, Ordering::AcqRel) + 1;
        if owed >= self.threshold {
            let c = [p.take_owed(REQ), p.take_owed(REP)];
            if c != [0, 0] {
                if let Err(e) = self.send_control(src, TAG_CREDIT, wire::encode_credit(c)) {
                    eprintln!("amnet mpi rank {}: cannot return credits: {e}", self.rank);
                }
            }
        }
    }

    fn note_exit(&self, origin: u32, code: i32) {
        let _ = self.exit.compare_exchange(
            0,
            pack_exit(origin, code),
            Ordering::AcqRel,
            Ordering::Acquire,
        );
    }

    fn exit_code(&self) -> Option<i32> {
        let v = self.exit.load(Ordering::Acquire);
        (v != 0).then(|| unpack_code(v))
    }

    fn request_exit(&self, code: i32) -> i32 {
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
                            eprintln!(
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
    fn test_exit_notice(&self) -> Result<()> {
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

    fn on_exit_notice(&self, st: &Status) -> Result<()> {
        let src = raw::source(st)?;
        let len = raw::received_len(st)?;
        // SAFETY: the exit receive completed and is never posted again.
        let buf = unsafe { self.bufs.read(0, len) };
        match wire::decode_exit(buf) {
            Ok(code) => self.note_exit(src, code),
            Err(e) => eprintln!(
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

    /// Move completed receives to the ready queues (all classes, or only what a thread waiting
    /// to reply may use: exit, credits, replies, and separate Long payloads). `first`: the
    /// first look of a poll, which makes up to [`FIRST_LOOK_CALLS`] calls while they find
    /// nothing.
    fn progress(&self, rx: &mut Rx, replies_only: bool, first: bool) -> Result<()> {
        self.repost(rx)?;
        let end = if replies_only {
            rx.reply_end
        } else {
            rx.test.len()
        };
        let mut n = raw::testsome(&mut rx.test[..end], &mut rx.done)?;
        if first {
            // MPI_Testsome looks at the requests before it makes progress: what that progress
            // completed shows only on the next call. The first look of a poll calls again
            // while nothing shows, so that a waiting rank spends most of its time in MPI's
            // progress, where an arriving message is matched, rather than in the loop
            // around it (see FIRST_LOOK_CALLS). Most of those calls are an MPI_Test of the
            // receive that completed last (the one a ping-pong or a stream waits on), which
            // looks again after its progress, so the message shows in the call that matched
            // it, at less than half the cost of an MPI_Testsome over every receive; one call in
            // TESTSOME_EVERY looks at them all. Oversubscribed, two calls: the caller's wait
            // then yields the core to the ranks it waits for sooner.
            let max = if self.oversubscribed {
                2
            } else {
                FIRST_LOOK_CALLS
            };
            let mut calls = 1;
            while n == 0 && calls < max {
                // MPI_Test of a null request reports an empty completion: only a posted one.
                let hot = rx.hot < end && rx.test_slot[rx.hot] != NO_SLOT;
                n = if hot && calls % TESTSOME_EVERY != 0 {
                    raw::test_one(&mut rx.test, rx.hot, &mut rx.done)?
                } else {
                    raw::testsome(&mut rx.test[..end], &mut rx.done)?
                };
                calls += 1;
            }
        }
        if n > 0 {
            if let Some((k, _)) = rx.done.iter().next() {
                rx.hot = k;
            }
            // Taken out for the loop, which needs the rest of `rx`; put back for reuse.
            let done = std::mem::take(&mut rx.done);
            // Every completed entry is retired before any is handled, so that an error while
            // handling one leaves no handle of a freed request behind.
            let mut slots = std::mem::take(&mut rx.scratch);
            slots.clear();
            slots.extend(done.iter().map(|(k, _)| rx.retire(k).unwrap_or(NO_SLOT)));
            let mut sync = false;
            for (&i, (_, st)) in slots.iter().zip(done.iter()) {
                if i != NO_SLOT {
                    sync |= self.completed(rx, i, st)?;
                }
            }
            rx.scratch = slots;
            rx.done = done;
            if sync {
                // What the senders put before sending these messages must be visible to the
                // handlers about to run (and to barriers): order our reads of the segment
                // after it. What this rank sends from now on may follow those puts.
                if let Some(w) = self.rma.get() {
                    w.sync();
                    w.touch();
                }
            }
        }
        if !rx.long_reqs.is_empty() && raw::testsome(&mut rx.long_reqs, &mut rx.long_done)? > 0 {
            let mut idx = std::mem::take(&mut rx.scratch);
            idx.clear();
            idx.extend(rx.long_done.iter().map(|(i, _)| i));
            // Remove from the highest index down, so swap_remove moves only entries already
            // visited.
            idx.sort_unstable_by(|a, b| b.cmp(a));
            for &i in &idx {
                if i >= rx.long_reqs.len() {
                    continue;
                }
                rx.long_reqs.swap_remove(i);
                let owner = rx.long_owner.swap_remove(i);
                let finished = match rx.longs.get_mut(owner).and_then(Option::as_mut) {
                    Some(p) => {
                        p.chunks_left = p.chunks_left.saturating_sub(1);
                        p.chunks_left == 0
                    }
                    None => false,
                };
                if finished {
                    if let Some(p) = rx.longs[owner].take() {
                        rx.free_longs.push(owner);
                        let class = Self::class_of(p.hdr.is_reply);
                        rx.ready[class].push_back(Ready {
                            src: p.src,
                            hdr: p.hdr,
                            slot: p.slot,
                            len: p.hdr.payload_at,
                        });
                    }
                }
            }
            rx.scratch = idx;
        }
        Ok(())
    }

    /// Handle the completed receive of slot `i`. True when it is an active message whose
    /// sender asks for `MPI_Win_sync` before its handler runs.
    fn completed(&self, rx: &mut Rx, i: usize, st: &Status) -> Result<bool> {
        match rx.slots[i].kind {
            SlotKind::Exit => self.on_exit_notice(st).map(|()| false),
            SlotKind::Credit => {
                let src = raw::source(st)?;
                let len = raw::received_len(st)?;
                // SAFETY: the receive of slot `i` completed; the slot is given back below.
                let buf = unsafe { self.bufs.read(i, len) };
                match wire::decode_notice(buf) {
                    Ok(wire::Notice::Credit([req, rep])) => {
                        if let Some(p) = self.peers.get(src as usize) {
                            p.give(REQ, req);
                            p.give(REP, rep);
                        }
                    }
                    Ok(wire::Notice::Nudge) => self
                        .awake_until
                        .store(now_ns().saturating_add(AWAKE_NS), Ordering::Relaxed),
                    Err(e) => eprintln!(
                        "amnet mpi rank {}: dropped a malformed control message from rank {src}: \
                         {e}",
                        self.rank
                    ),
                }
                self.give_back(i);
                Ok(false)
            }
            SlotKind::Msg(class) => {
                let src = raw::source(st)?;
                let len = raw::received_len(st)?;
                // The slot stays with the message until its handler has run (its buffer holds
                // the arguments); the receive is posted again after that.
                // SAFETY: the receive of slot `i` completed; the slot goes with the message.
                let msg = unsafe { self.bufs.read(i, len) };
                match self.accept(src, class, msg) {
                    Some(hdr) => {
                        let sync = hdr.sync;
                        if let Data::Separate(tag) = hdr.data {
                            self.receive_separate(rx, src, hdr, tag, i)?;
                        } else {
                            rx.ready[class].push_back(Ready {
                                src,
                                hdr,
                                slot: i,
                                len,
                            });
                        }
                        Ok(sync)
                    }
                    None => {
                        self.give_back(i);
                        self.consumed(src, class);
                        Ok(false)
                    }
                }
            }
        }
    }

    /// Decode and check an active message of `class` from `src` and take the credits it
    /// returns. `None`: malformed, dropped with a line on stderr.
    fn accept(&self, src: u32, class: usize, msg: &[u8]) -> Option<Header> {
        let drop_msg = |why: &dyn std::fmt::Display| {
            eprintln!(
                "amnet mpi rank {}: dropped a malformed message from rank {src}: {why}",
                self.rank
            );
        };
        let hdr = match wire::decode(msg) {
            Ok(h) => h,
            Err(e) => {
                drop_msg(&e);
                return None;
            }
        };
        if Self::class_of(hdr.is_reply) != class {
            drop_msg(&"request/reply flag does not match its tag");
            return None;
        }
        if let Some(p) = self.peers.get(src as usize) {
            p.give(REQ, hdr.credits[0]);
            p.give(REP, hdr.credits[1]);
        }
        if hdr.category == Category::Long && self.long_range(&hdr).is_none() {
            drop_msg(&format_args!(
                "Long range {}+{} is outside the local segment",
                hdr.long_offset, hdr.payload_len
            ));
            return None;
        }
        Some(hdr)
    }

    /// Where a Long's payload goes in the local segment (`None` when outside it).
    #[inline]
    fn long_range(&self, hdr: &Header) -> Option<*mut u8> {
        self.seg
            .get()
            .and_then(|s| s.range(hdr.long_offset, hdr.payload_len))
    }

    /// Post the receives of a separate Long's payload straight into the segment; the message
    /// is delivered once they all completed.
    fn receive_separate(
        &self,
        rx: &mut Rx,
        src: u32,
        hdr: Header,
        tag: u32,
        slot: usize,
    ) -> Result<()> {
        // Checked by `accept`.
        let Some(dst) = self.long_range(&hdr) else {
            return Ok(());
        };
        // In range of a usize-sized segment, so the length fits a usize.
        let len = usize::try_from(hdr.payload_len).unwrap_or(0);
        let owner = rx.add_long(PendingLong {
            src,
            hdr,
            slot,
            chunks_left: len.div_ceil(LONG_CHUNK),
        });
        let mut off = 0;
        while off < len {
            let n = (len - off).min(LONG_CHUNK);
            // SAFETY: `dst..dst + len` lies in the local segment (checked by `range`); the
            // client's protocol gives this range to the Long until its handler runs, and the
            // handler runs only after every chunk has arrived.
            let req = unsafe { raw::irecv(dst.add(off), n, Some(src), long_tag(tag), self.comm)? };
            rx.long_reqs.push(req);
            rx.long_owner.push(owner);
            off += n;
        }
        Ok(())
    }

    /// Post the receive of slot `i` (its buffer is not in use: a fresh slot, or one given back).
    fn post(&self, rx: &mut Rx, i: usize) -> Result<()> {
        let (p, n) = self.bufs.raw(i);
        let Some(slot) = rx.slots.get(i) else {
            return Ok(());
        };
        let (tag, entry, fifo) = (slot.tag, slot.entry, slot.fifo);
        // SAFETY: nobody touches the buffer until MPI_Testsome reports the receive complete or
        // it is cancelled at exit (the protocol of `Buffers`).
        let req = unsafe { raw::irecv(p, n, None, tag, self.comm_for(tag))? };
        rx.reqs[i] = req;
        if let Some(f) = fifo {
            rx.fifo[f].push_back(i);
            if rx.test_slot[entry] != NO_SLOT {
                // An older receive of this tag is tested; this one follows it.
                return Ok(());
            }
        }
        rx.test[entry] = req;
        rx.test_slot[entry] = i;
        Ok(())
    }

    /// Give slot `i` back: its message has been handled; the next progress posts it again.
    #[inline]
    fn give_back(&self, i: usize) {
        if let Some(w) = self.returned.get(i / 64) {
            w.fetch_or(1 << (i % 64), Ordering::Release);
        }
    }

    /// Post the receives of every slot given back.
    fn repost(&self, rx: &mut Rx) -> Result<()> {
        for (k, w) in self.returned.iter().enumerate() {
            if w.load(Ordering::Relaxed) == 0 {
                continue;
            }
            let mut bits = w.swap(0, Ordering::Acquire);
            while bits != 0 {
                let b = bits.trailing_zeros() as usize;
                if let Err(e) = self.post(rx, k * 64 + b) {
                    // Not posted: keep them for the next progress.
                    w.fetch_or(bits, Ordering::Release);
                    return Err(e);
                }
                bits &= bits - 1;
            }
        }
        Ok(())
    }

    /// A delivered message's handler has run: give its slot back and account for the credit.
    fn finish(&self, src: u32, class: usize, slot: usize) {
        self.give_back(slot);
        self.consumed(src, class);
    }

    /// Hand one ready message to `sink`; returns what the sink returned.
    fn deliver(&self, r: Ready, sink: &mut dyn FnMut(&InMsg<'_>) -> bool) -> bool {
        /// Gives the receive back and returns the credit even if the handler unwinds.
        struct Done<'a> {
            eng: &'a Engine,
            src: u32,
            class: usize,
            slot: usize,
        }
        impl Drop for Done<'_> {
            fn drop(&mut self) {
                self.eng.finish(self.src, self.class, self.slot);
            }
        }
        let hdr = r.hdr;
        let _done = Done {
            eng: self,
            src: r.src,
            class: Self::class_of(hdr.is_reply),
            slot: r.slot,
        };
        // SAFETY: this thread holds the slot until `_done` gives it back, after the handler.
        let buf: &[u8] = unsafe { self.bufs.read(r.slot, r.len) };
        let mut args = [0u32; MAX_ARGS];
        let args = hdr.read_args(buf, &mut args);
        let plen = usize::try_from(hdr.payload_len).unwrap_or(usize::MAX);
        let inline = buf
            .get(hdr.payload_at..)
            .and_then(|b| b.get(..plen))
            .unwrap_or(&[]);
        let payload: &[u8] = match hdr.category {
            Category::Short => &[],
            Category::Medium => inline,
            Category::Long => {
                let Some(dst) = self.long_range(&hdr) else {
                    return true;
                };
                if hdr.has_inline_payload() {
                    // SAFETY: `dst` has room for the payload (checked by `range`), which came in
                    // full (checked by the decoder); the receive buffer and the segment are
                    // distinct memory.
                    unsafe { std::ptr::copy_nonoverlapping(inline.as_ptr(), dst, inline.len()) };
                }
                // SAFETY: the range lies in the local segment, mapped for the life of the
                // process, and holds the payload now.
                unsafe { std::slice::from_raw_parts(dst, plen) }
            }
        };
        sink(&InMsg {
            src: r.src,
            handler: hdr.handler,
            category: hdr.category,
            is_reply: hdr.is_reply,
            args,
            payload,
            long_offset: hdr.long_offset,
        })
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

    /// Leave the job with `code`: every rank meets in the exit barrier and finalizes MPI; if
    /// some rank does not arrive within the grace period, abort the job with the code. Returns
    /// once MPI is finalized (or was finalized by the client); does not return otherwise.
    fn leave(&self, code: i32) {
        if raw::finalized() {
            return;
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
        self.report_origin(code);
        lifeline_say(b"leaving\n");
        let deadline = Instant::now() + self.settings.grace;
        let all_left = match raw::ibarrier(self.exit_comm) {
            Ok(mut req) => Self::wait_until(&mut req, deadline),
            Err(_) => false,
        };
        if !all_left {
            eprintln!(
                "amnet mpi rank {}: not every rank left within {:.1} s of the job-wide exit; \
                 aborting the job with code {code}",
                self.rank,
                self.settings.grace.as_secs_f64()
            );
            raw::abort(code);
        }
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
            eprintln!("amnet mpi rank {}: {e}; aborting", self.rank);
            raw::abort(code);
        }
        self.state.store(FINALIZED, Ordering::Release);
        std::mem::forget(tx);
        std::mem::forget(rx);
    }

    /// When this rank ended the job with a non-zero code, tell the launcher (which cannot see
    /// which rank it was: every rank leaves with the same code).
    fn report_origin(&self, code: i32) {
        let v = self.exit.load(Ordering::Acquire);
        let origin = u32::try_from((v >> 32) & 0x7fff_ffff).unwrap_or(u32::MAX);
        let Some(path) = &self.settings.report else {
            return;
        };
        if v == 0 || code == 0 || origin != self.rank {
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

    fn exchange(&self, blob: &[u8]) -> Result<Vec<Vec<u8>>> {
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

    fn terminate(&self, code: i32) -> ! {
        self.leave(code);
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
fn lifeline_connect(path: &std::path::Path, rank: u32) {
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

/// Idle wait in blocking loops: yield first, then sleep for growing intervals up to 1 ms.
fn snooze(idle: u32) {
    if idle < 64 {
        std::thread::yield_now();
    } else {
        let us = 16u64 << ((idle - 64) / 16).min(6);
        std::thread::sleep(Duration::from_micros(us));
    }
}

fn flush_std() {
    use std::io::Write;
    let _ = std::io::stdout().flush();
    let _ = std::io::stderr().flush();
}

static UNIVERSE: OnceLock<mpi::environment::Universe> = OnceLock::new();
static ENGINE: OnceLock<Arc<Engine>> = OnceLock::new();

/// Start MPI (or join the client's initialization) and return the thread level granted.
fn init_mpi() -> Result<Threading> {
    if raw::finalized() {
        return Err(Error::Config(
            "MPI was already finalized in this process; the mpi conduit needs it running".into(),
        ));
    }
    match mpi::initialize_with_threading(Threading::Multiple) {
        Some((universe, level)) => {
            // Kept for the life of the process and never dropped: dropping the universe would
            // finalize MPI, which the conduit does itself at exit.
            let _ = UNIVERSE.set(universe);
            Ok(level)
        }
        // The client initialized MPI itself.
        None => Ok(mpi::environment::threading_support()),
    }
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
extern "C" {
    fn on_exit(
        func: extern "C" fn(libc::c_int, *mut libc::c_void),
        arg: *mut libc::c_void,
    ) -> libc::c_int;
}

/// Runs when the process exits (a return from `main`, `std::process::exit`): the job-wide exit
/// code is published, then the rank leaves MPI like `terminate` does.
fn at_process_exit(status: i32) {
    let Some(eng) = ENGINE.get() else {
        return;
    };
    if eng.state.load(Ordering::Acquire) != RUNNING {
        if LEAVING_HERE.with(|l| l.get()) {
            return;
        }
        // Another thread is ending the process; let it.
        loop {
            std::thread::park();
        }
    }
    let code = eng.request_exit(status);
    eng.leave(code);
    if code != status {
        flush_std();
        // SAFETY: _exit ends the process at once with the job's code; MPI is finalized.
        unsafe { libc::_exit(code) }
    }
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
extern "C" fn exit_hook(status: libc::c_int, _arg: *mut libc::c_void) {
    at_process_exit(status);
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
extern "C" fn exit_hook_plain() {
    at_process_exit(0);
}

fn install_exit_hook() {
    // The core installs its own hook after the conduit exists; hooks run in reverse order, so
    // the core publishes the status first and this one then leaves MPI.
    // SAFETY: registering a process-exit callback that only touches the engine kept alive by
    // the ENGINE static.
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    unsafe {
        on_exit(exit_hook, std::ptr::null_mut());
    }
    // SAFETY: as above.
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    unsafe {
        libc::atexit(exit_hook_plain);
    }
}

/// The mpi conduit: this process is one rank of an MPI job.
///
/// Create it with [`MpiConduit::from_env`] and wrap it in an `amnet_core::Endpoint`.
pub struct MpiConduit {
    eng: Arc<Engine>,
}

impl std::fmt::Debug for MpiConduit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MpiConduit")
            .field("rank", &self.eng.rank)
            .field("size", &self.eng.size)
            .field("thread_level", &self.eng.level)
            .field("credits", &self.eng.settings.credits)
            .finish()
    }
}

impl MpiConduit {
    /// Join the MPI job this process belongs to (started by `mpirun`, or a singleton).
    ///
    /// Initializes MPI requesting `MPI_THREAD_MULTIPLE`, unless the client initialized it
    /// already (then its level is used and the client's initialization is shared). Below
    /// `MPI_THREAD_MULTIPLE` every MPI call of the conduit is serialized behind one lock (see
    /// [`with_mpi_lock`](crate::with_mpi_lock)). The rank and size are those of
    /// `MPI_COMM_WORLD`; amnet's traffic uses a private duplicate of it.
    ///
    /// Collective: every rank of the job calls it once. A second call in the same process is a
    /// configuration error. Environment: `AMNET_MPI_CREDITS` (messages in flight per peer and
    /// class, default 32), `AMNET_MPI_EXIT_GRACE` (seconds, default 2), `AMNET_BOOT_TIMEOUT`,
    /// `AMNET_VERBOSE` (rank 0 prints the MPI library and the thread level in use, and at
    /// attach which put/get path is in use), `AMNET_RMA` (`am`: no RMA window, put/get on the
    /// AM path), `AMNET_MPI_RMA_CHUNK` (bytes per `MPI_Put`/`MPI_Get`, default and at most
    /// 1 GiB), `AMNET_MPI_LONG_PUT` (Long payloads of at least this many bytes, default 256,
    /// are put into the target segment when put/get run natively).
    pub fn from_env() -> Result<MpiConduit> {
        static CREATED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
        if CREATED.swap(true, Ordering::AcqRel) {
            return Err(Error::Config(
                "amnet::init called twice in one process (the mpi conduit exists already): a \
                 process is one rank; clone the Endpoint to use it from several threads"
                    .into(),
            ));
        }
        let settings = Settings::from_env()?;
        let level = init_mpi()?;
        raw::set_serialized(level != Threading::Multiple);
        let world = raw::world();
        let comm = raw::dup(world)?;
        let exit_comm = raw::dup(world)?;
        let mut lanes = [comm; LANE_TAGS as usize];
        for l in &mut lanes {
            *l = raw::dup(world)?;
        }
        let (rank, size) = raw::rank_size(comm)?;
        if let Some(path) = &settings.lifeline {
            lifeline_connect(path, rank);
        }
        let local = raw::ranks_on_this_node(comm)?;
        // The node's cores, not this process's affinity: mpirun binds each rank to a core of
        // its own, which is not oversubscription.
        // SAFETY: sysconf has no preconditions.
        let cores = u32::try_from(unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) })
            .unwrap_or(1)
            .max(1);

        let small = size.saturating_mul(4).clamp(8, 128) as usize;
        let large = size.clamp(2, 8) as usize;
        let credit_slots = size.clamp(2, 16) as usize;
        // Test entries: the exit slot, one per in-order queue, one per large slot.
        let mut entries = 1;
        let mut slots = vec![Slot {
            kind: SlotKind::Exit,
            tag: TAG_EXIT,
            entry: 0,
            fifo: None,
        }];
        let mut sizes = vec![wire::CTRL_LEN];
        for _ in 0..credit_slots {
            slots.push(Slot {
                kind: SlotKind::Credit,
                tag: TAG_CREDIT,
                entry: entries,
                fifo: Some(0),
            });
            sizes.push(wire::CTRL_LEN);
        }
        entries += 1;
        let mut reply_end = 0;
        for (class, fifo) in [(REP, 1), (REQ, 2)] {
            for _ in 0..small {
                slots.push(Slot {
                    kind: SlotKind::Msg(class),
                    tag: TAG_MSG[class][0],
                    entry: entries,
                    fifo: Some(fifo),
                });
                sizes.push(SMALL_BYTES);
            }
            entries += 1;
            for _ in 0..large {
                slots.push(Slot {
                    kind: SlotKind::Msg(class),
                    tag: TAG_MSG[class][1],
                    entry: entries,
                    fifo: None,
                });
                sizes.push(LARGE_BYTES);
                entries += 1;
            }
            if class == REP {
                reply_end = entries;
            }
        }
        let nslots = slots.len();
        let rx = Rx {
            reqs: vec![raw::null_request(); slots.len()],
            slots,
            test: vec![raw::null_request(); entries],
            test_slot: vec![NO_SLOT; entries],
            fifo: [VecDeque::new(), VecDeque::new(), VecDeque::new()],
            reply_end,
            hot: 0,
            long_reqs: Vec::new(),
            long_owner: Vec::new(),
            longs: Vec::new(),
            free_longs: Vec::new(),
            ready: [VecDeque::new(), VecDeque::new()],
            done: Completions::default(),
            long_done: Completions::default(),
            scratch: Vec::new(),
        };
        let credits = settings.credits;
        let tx_pending = Arc::new(AtomicUsize::new(0));
        let eng = Arc::new(Engine {
            rank,
            size,
            comm,
            lanes,
            exit_comm,
            level,
            oversubscribed: local > cores,
            threshold: (credits / 2).max(1),
            peers: (0..size).map(|_| Peer::new(credits)).collect(),
            tx: Mutex::new(Tx {
                reqs: Vec::new(),
                bufs: Vec::new(),
                small: Vec::new(),
                large: Vec::new(),
                done: Completions::default(),
                scratch: Vec::new(),
                reap_at: REAP_AT,
                pending: tx_pending.clone(),
            }),
            tx_pending,
            rx: Mutex::new(rx),
            bufs: Buffers::new(sizes.into_iter()),
            returned: (0..nslots.div_ceil(64))
                .map(|_| AtomicU64::new(0))
                .collect(),
            seg: OnceLock::new(),
            rma: OnceLock::new(),
            exit: AtomicU64::new(0),
            awake_until: AtomicU64::new(0),
            state: AtomicU8::new(RUNNING),
            settings,
        });
        {
            let mut rx = lock(&eng.rx);
            for i in 0..nslots {
                eng.post(&mut rx, i)?;
            }
        }
        if ENGINE.set(eng.clone()).is_ok() {
            install_exit_hook();
        }
        if eng.settings.verbose && rank == 0 {
            let lib = mpi::environment::library_version().unwrap_or_default();
            let lib = lib
                .split([',', '\n'])
                .next()
                .unwrap_or("unknown MPI library")
                .trim();
            let serial = if level == Threading::Multiple {
                String::new()
            } else {
                "; the library does not grant MPI_THREAD_MULTIPLE, so every MPI call is \
                 serialized behind one lock"
                    .to_string()
            };
            eprintln!(
                "amnet mpi: {lib}; thread level {} (requested MPI_THREAD_MULTIPLE){serial}; \
                 {size} ranks, {local} on this node, {cores} cores; {credits} credits per peer \
                 and class; receives posted per class: {small} small ({SMALL_BYTES} B), \
                 {large} large ({LARGE_BYTES} B)",
                level_name(level)
            );
        }
        Ok(MpiConduit { eng })
    }

    /// The thread level MPI granted. Below `Multiple`, the conduit serializes its MPI calls.
    pub fn thread_level(&self) -> Threading {
        self.eng.level
    }
}

/// The MPI name of a thread level.
fn level_name(level: Threading) -> &'static str {
    match level {
        Threading::Single => "MPI_THREAD_SINGLE",
        Threading::Funneled => "MPI_THREAD_FUNNELED",
        Threading::Serialized => "MPI_THREAD_SERIALIZED",
        Threading::Multiple => "MPI_THREAD_MULTIPLE",
    }
}

impl Conduit for MpiConduit {
    fn name(&self) -> &'static str {
        "mpi"
    }
    fn rank(&self) -> Rank {
        self.eng.rank
    }
    fn size(&self) -> u32 {
        self.eng.size
    }
    fn max_medium(&self) -> usize {
        MAX_MEDIUM
    }
    fn oversubscribed(&self) -> bool {
        self.eng.oversubscribed
    }

    fn keep_awake(&self) -> bool {
        let until = self.eng.awake_until.load(Ordering::Relaxed);
        until != 0 && now_ns() < until
    }

    fn exchange(&self, blob: &[u8]) -> Result<Vec<Vec<u8>>> {
        self.eng.exchange(blob)
    }

    fn attach_segment(&self, len: usize, lens: &[usize]) -> Result<LocalSegment> {
        let eng = &*self.eng;
        segment::check_lengths(lens)?;
        if eng.seg.get().is_some() {
            return Err(Error::AlreadyAttached);
        }
        let opened = crate::rma::open(
            eng.comm,
            eng.rank,
            len,
            lens,
            eng.settings.rma_chunk,
            &|bits| eng.agree(bits),
        )?;
        if eng.settings.verbose && eng.rank == 0 {
            eprintln!("amnet mpi: {}", opened.summary);
            let max = wire::MAX_INLINE;
            if opened.window.is_some() {
                eprintln!(
                    "amnet mpi: Long payloads of {} B or more: MPI_Put into the target segment \
                     and MPI_Win_flush before the header is sent; smaller ones inline",
                    eng.settings.long_put
                );
            } else {
                eprintln!(
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
                let weak = Arc::downgrade(&self.eng);
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

    fn native_rma(&self) -> Option<Arc<dyn NativeRma>> {
        let w: Arc<dyn NativeRma> = self.eng.rma.get()?.clone();
        Some(w)
    }

    fn try_send(&self, dest: Rank, msg: &OutMsg<'_>) -> Result<bool> {
        let eng = &*self.eng;
        let peer = eng.peers.get(dest as usize).ok_or(Error::BadRank {
            rank: dest,
            size: eng.size,
        })?;
        let class = Engine::class_of(msg.is_reply);
        if !peer.take_credit(class) {
            return Ok(false);
        }
        if let Err(e) = eng.send(peer, dest, class, msg) {
            peer.give(class, 1);
            return Err(e);
        }
        Ok(true)
    }

    fn poll(&self, replies_only: bool, sink: &mut dyn FnMut(&InMsg<'_>) -> bool) -> Result<usize> {
        let eng = &*self.eng;
        if eng.tx_pending.load(Ordering::Relaxed) > 0 {
            if let Ok(mut tx) = eng.tx.try_lock() {
                if !tx.reqs.is_empty() {
                    tx.reap()?;
                }
            }
        }
        let mut n = 0;
        // A look that finds a receive may leave the next one of its queue completed but
        // untested, so the poll looks again whenever its ready queue runs dry; a look that
        // leaves nothing to deliver ends the poll.
        let mut first = true;
        while n < POLL_BUDGET {
            let next = {
                let mut rx = lock(&eng.rx);
                if !rx.has_ready(replies_only) {
                    eng.progress(&mut rx, replies_only, first)?;
                    first = false;
                }
                rx.pop(replies_only)
            };
            let Some(r) = next else { break };
            n += 1;
            if !eng.deliver(r, sink) {
                break;
            }
        }
        Ok(n)
    }

    fn exit_word(&self) -> Option<&AtomicU64> {
        Some(&self.eng.exit)
    }

    fn exit_requested(&self) -> Option<i32> {
        self.eng.exit_code()
    }

    fn request_exit(&self, code: i32) -> i32 {
        self.eng.request_exit(code)
    }

    fn terminate(&self, code: i32) -> ! {
        self.eng.terminate(code)
    }

    fn is_process_mode(&self) -> bool {
        true
    }
}
