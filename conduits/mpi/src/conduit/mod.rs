//! The mpi conduit: active messages over non-blocking MPI point-to-point messages on a
//! private communicator.
//!
//! Design (the details are in `src/README.md`):
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
//!
//! This module holds the engine (the process-wide state), the constants shared by its parts,
//! [`MpiConduit`] and its `Conduit` implementation (`try_send` and `poll` run here). The rest is
//! in submodules:
//!
//! - `settings`: the environment variables read at start-up;
//! - `start`: MPI initialization, the communicators, the receive pool and the engine
//!   (`MpiConduit::from_env`);
//! - `attach`: the attach exchange and agreement, and `attach_segment`;
//! - `send`: credits, the send path and the send buffers;
//! - `receive`: the pre-posted receives, their buffers and the receive state;
//! - `progress`: testing the receives, what a completed one becomes, delivery;
//! - `exit`: the job-wide exit, exit notices, the lifeline, the process-exit hook.

use std::os::raw::c_int;
use std::sync::atomic::{AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use amnet_core::{
    AwakeWindow, Conduit, Error, InMsg, LocalSegment, NativeRma, OutMsg, Rank, Result, MAX_ARGS,
};
use mpi::Threading;

use crate::raw::Comm;
use crate::rma::Window;
use crate::segment::Segment;
use crate::wire;

mod attach;
mod exit;
mod progress;
mod receive;
mod send;
mod settings;
mod start;

use receive::{Buffers, Rx};
use send::{Peer, Tx};
use settings::Settings;

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
const _: () = assert!((TAG_LONG as u32) + wire::LONG_TAGS <= 32767);

/// Receive buffer of the small classes: a Short message with 16 arguments, or a Medium or Long
/// with up to 928 payload bytes.
const SMALL_BYTES: usize = 1024;
/// Receive buffer of the large classes: the largest message.
const LARGE_BYTES: usize = wire::encoded_len(MAX_ARGS, MAX_MEDIUM);
/// A separate Long payload is sent in messages of at most this many bytes (MPI counts are
/// `int`).
const LONG_CHUNK: usize = 1 << 30;
/// Messages delivered per poll at most.
const POLL_BUDGET: usize = 64;

const REQ: usize = 0;
const REP: usize = 1;

/// Every rank's host scratch in the node's shared window (`raw::node_scratch`).
struct Scratch(Vec<std::ptr::NonNull<u8>>);

// SAFETY: addresses of shared memory that stays mapped until the process ends; the conduit
// only hands them out (`host_scratch`).
unsafe impl Send for Scratch {}
// SAFETY: as above.
unsafe impl Sync for Scratch {}

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
    /// The node's online cores.
    cores: u32,
    /// Ranks of the job on this node.
    pub(super) local_ranks: u32,
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
    /// Every rank's host scratch (`Conduit::host_scratch`), when all ranks share this node.
    scratch: Option<Scratch>,
    /// The RMA window over every rank's segment, when put/get run natively.
    rma: OnceLock<Arc<Window>>,
    /// 0, or `1 << 63 | origin << 32 | code` once a job-wide exit is known here.
    exit: AtomicU64,
    state: AtomicU8,
    /// Open while a peer's nudge keeps idle waits awake (see `Window::nudge_target`).
    awake: AwakeWindow,
}

#[inline]
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn long_tag(index: u32) -> c_int {
    TAG_LONG + c_int::try_from(index % wire::LONG_TAGS).unwrap_or(0)
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
    /// The thread level MPI granted. Below `Multiple`, the conduit serializes its MPI calls.
    pub fn thread_level(&self) -> Threading {
        self.eng.level
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

    fn local_ranks(&self) -> u32 {
        self.eng.local_ranks
    }

    fn host_cores(&self) -> u32 {
        self.eng.cores
    }

    fn keep_awake(&self) -> bool {
        self.eng.awake.open()
    }

    fn exchange(&self, blob: &[u8]) -> Result<Vec<Vec<u8>>> {
        self.eng.exchange(blob)
    }

    fn attach_segment(&self, len: usize, lens: &[usize]) -> Result<LocalSegment> {
        // SAFETY: no provided memory.
        unsafe { self.eng.attach_segment(len, lens, None) }
    }

    unsafe fn attach_segment_in(&self, seg: LocalSegment, lens: &[usize]) -> Result<()> {
        // SAFETY: forwarded contract.
        unsafe { self.eng.attach_segment(seg.len, lens, Some(seg)) }.map(|_| ())
    }

    fn host_scratch(&self, rank: Rank) -> Option<std::ptr::NonNull<u8>> {
        self.eng.scratch.as_ref()?.0.get(rank as usize).copied()
    }

    fn native_rma(&self) -> Option<Arc<dyn NativeRma>> {
        let w: Arc<dyn NativeRma> = self.eng.rma.get()?.clone();
        Some(w)
    }

    fn try_send(&self, dest: Rank, msg: &OutMsg<'_>) -> Result<bool> {
        let eng = &*self.eng;
        let Some(peer) = eng.peers.get(dest as usize) else {
            return Err(Error::BadRank {
                rank: dest,
                size: eng.size,
            });
        };
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
                    eng.progress(&mut rx, first)?;
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

    fn at_process_exit(&self, status: i32) {
        self.eng.at_process_exit(status)
    }
}
