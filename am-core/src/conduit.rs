//! The narrow seam between the AM core and a transport.
//!
//! A conduit moves whole active messages between ranks and knows nothing of handlers, tokens,
//! barriers, collectives or sync modes: those live in the core and above. Everything a
//! conduit must provide is on [`Conduit`]; the optional native paths (direct access to a peer's
//! segment, or the transport's own one-sided operations through [`NativeRma`]) have defaults
//! that make the core fall back to its AM-based reference code.

use std::sync::Arc;

use crate::{AtomicOp, AtomicOps, AtomicType, Rank, Result};

/// The most arguments an active message carries.
pub const MAX_ARGS: usize = 16;

/// Bytes of one rank's host scratch ([`Conduit::host_scratch`]): shared memory that the ranks
/// of a host map from one another for flags and staging buffers. The library layers get the
/// first [`LAYER_SCRATCH_BYTES`] (the collectives divide it into one area per team); the core
/// keeps the last page for its barrier's flags (spec/core.md §8).
pub const HOST_SCRATCH_BYTES: usize = 4 << 20;

/// The core's part of a rank's host scratch: its last page.
pub(crate) const CORE_SCRATCH_BYTES: usize = 4096;

/// The library layers' part of a rank's host scratch ([`LayerHooks::host_scratch`]), from its
/// start: all of it but the core's last page.
///
/// [`LayerHooks::host_scratch`]: crate::LayerHooks::host_scratch
pub const LAYER_SCRATCH_BYTES: usize = HOST_SCRATCH_BYTES - CORE_SCRATCH_BYTES;

/// The three active-message categories.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Category {
    /// Arguments only.
    Short,
    /// Arguments plus a payload delivered in a library buffer.
    Medium,
    /// Arguments plus a payload written into the target's segment before the handler runs.
    Long,
}

impl Category {
    /// The category's code in the conduits' message headers: 0 Short, 1 Medium, 2 Long.
    #[inline(always)]
    pub const fn code(self) -> u8 {
        match self {
            Category::Short => 0,
            Category::Medium => 1,
            Category::Long => 2,
        }
    }

    /// The category whose [`code`](Category::code) is the low two bits of `bits`; `None`
    /// for 3.
    #[inline(always)]
    pub const fn from_code(bits: u8) -> Option<Category> {
        match bits & 3 {
            0 => Some(Category::Short),
            1 => Some(Category::Medium),
            2 => Some(Category::Long),
            _ => None,
        }
    }

    /// The name used in errors and statistics.
    pub fn name(self) -> &'static str {
        match self {
            Category::Short => "Short",
            Category::Medium => "Medium",
            Category::Long => "Long",
        }
    }
}

/// One message handed to [`Conduit::try_send`].
#[derive(Debug, Clone, Copy)]
pub struct OutMsg<'a> {
    /// Handler index at the target (never 0).
    pub handler: u8,
    /// Message category.
    pub category: Category,
    /// True for replies (sent from a request handler through its token).
    pub is_reply: bool,
    /// At most [`MAX_ARGS`] arguments.
    pub args: &'a [u32],
    /// Payload (empty for Short).
    pub payload: &'a [u8],
    /// For Long: where the payload goes in the target's segment. Zero otherwise.
    pub long_offset: u64,
}

/// One message delivered by [`Conduit::poll`].
#[derive(Debug, Clone, Copy)]
pub struct InMsg<'a> {
    /// The rank that sent it.
    pub src: Rank,
    /// Handler index.
    pub handler: u8,
    /// Message category.
    pub category: Category,
    /// True for replies.
    pub is_reply: bool,
    /// The arguments.
    pub args: &'a [u32],
    /// Medium: the payload in a library buffer valid during the callback. Long: the payload's
    /// bytes in the local segment, already written. Short: empty.
    pub payload: &'a [u8],
    /// For Long: the offset in the local segment where the payload was written.
    pub long_offset: u64,
}

/// The local segment as mapped by the conduit at attach.
#[derive(Debug, Clone, Copy)]
pub struct LocalSegment {
    /// Base address of the local segment (valid for the life of the conduit).
    pub base: *mut u8,
    /// Length in bytes.
    pub len: usize,
}

// SAFETY: LocalSegment is a plain address range; access discipline is the owner's concern
// and documented on the endpoint's segment accessors.
unsafe impl Send for LocalSegment {}
// SAFETY: as above.
unsafe impl Sync for LocalSegment {}

/// Names one outstanding native operation started by [`NativeRma::put_nb`] or
/// [`NativeRma::get_nb`], for [`NativeRma::test`] and [`NativeRma::wait`]. What `id` means is
/// the conduit's business: the core only keeps the ticket and hands it back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RmaTicket {
    /// The rank whose segment the operation reads or writes.
    pub rank: Rank,
    /// Conduit-defined identifier of the operation.
    pub id: u64,
}

/// A conduit's native one-sided put/get, for transports that reach peers' segments through
/// their own remote memory access rather than through mapped memory
/// ([`Conduit::peer_segment`]).
///
/// The core calls these only after its own checks (§4 of `spec/core.md`): the rank is valid,
/// `[offset, offset + len)` lies inside that rank's segment, the length is not zero, and the
/// caller is not in a handler. Every method may be called from several threads at once.
///
/// Completion has the core's meaning: a put is complete when its bytes are in the target
/// segment such that an active message the caller sends afterwards, and every barrier the
/// caller enters afterwards, finds them there when the target's handler (or the barrier)
/// runs; a get is complete when the bytes are in the destination.
pub trait NativeRma: Send + Sync + 'static {
    /// A short description of the mechanism, printed with `AMNET_VERBOSE=1`.
    fn describe(&self) -> String;
    /// Blocking put: `src` to `dest`'s segment at `offset`, complete on return.
    fn put(&self, dest: Rank, offset: u64, src: &[u8]) -> Result<()>;
    /// Blocking get: `len` bytes of `src_rank`'s segment at `offset` into `dst`, complete on
    /// return.
    ///
    /// # Safety
    /// - `dst` is valid for `len` bytes of writes, and nothing else reads or writes them
    ///   during the call.
    unsafe fn get(&self, src_rank: Rank, offset: u64, dst: *mut u8, len: usize) -> Result<()>;
    /// Start a put. `src` is consumed before the call returns (the caller may reuse it at
    /// once). `None`: the put is complete already; otherwise the ticket to complete it with.
    fn put_nb(&self, dest: Rank, offset: u64, src: &[u8]) -> Result<Option<RmaTicket>>;
    /// Start a get into `dst`. `None`: complete already; otherwise the ticket.
    ///
    /// # Safety
    /// - `dst` is valid for `len` bytes of writes until the ticket completes (`test` returned
    ///   true or `wait` returned), and nothing else reads or writes them until then.
    unsafe fn get_nb(
        &self,
        src_rank: Rank,
        offset: u64,
        dst: *mut u8,
        len: usize,
    ) -> Result<Option<RmaTicket>>;
    /// True once the operation behind `t` is complete (then `t` is never used again). Should
    /// not wait for long; it may wait briefly when the transport has no non-blocking test.
    fn test(&self, t: RmaTicket) -> Result<bool>;
    /// Wait until the operation behind `t` is complete. Must not depend on this rank running
    /// handlers (the core does not poll meanwhile).
    fn wait(&self, t: RmaTicket) -> Result<()>;
}

/// A conduit's native remote atomics: operations on segment elements that its transport runs
/// itself (ibv: the HCA's fetch-and-add and compare-and-swap), used for the atomic domains
/// whose every operation it runs (spec/core.md §7a).
///
/// Such operations are atomic with respect to one another only, not to the processor's atomic
/// instructions on the same element, so a domain the conduit offloads sends every operation
/// through it, those on this rank's own segment included. Every method may be called from
/// several threads at once; the core has checked the rank, the offset's range and alignment,
/// and the operation against the domain.
pub trait NativeAtomics: Send + Sync + 'static {
    /// True when the transport runs every operation of `ops` on elements of type `ty`; the
    /// answer must be the same on every rank for the same arguments.
    fn offloads(&self, ty: AtomicType, ops: AtomicOps) -> bool;
    /// Blocking: perform `op` with operands `a` and `b` (as [`AtomicOp`] says, as bit
    /// patterns) on the element of type `ty` at `offset` in `rank`'s segment, and return its
    /// value before the operation.
    fn fetch(
        &self,
        rank: Rank,
        offset: u64,
        ty: AtomicType,
        op: AtomicOp,
        a: u64,
        b: u64,
    ) -> Result<u64>;
}

/// Room in a conduit's own send memory for a negotiated-payload Medium (spec/core.md §3a),
/// from [`Conduit::prepare_medium`]: `len` bytes at `buf` that the client writes its payload
/// into, and the conduit's note of where they are.
#[derive(Debug)]
pub struct PreparedSlot {
    /// The payload's bytes, writable by the holder until it commits or cancels.
    pub buf: std::ptr::NonNull<u8>,
    /// How many (the `max_len` asked for).
    pub len: usize,
    /// The conduit's own note (smp: the ring and the claimed position).
    pub token: [u64; 2],
}

/// A transport that moves active messages between the ranks of one job.
///
/// Conduits must be usable from several threads at once: `try_send` and `poll` may run
/// concurrently on different threads of the same rank.
pub trait Conduit: Send + Sync + 'static {
    /// Short name ("smp", "udp", ...), as used by `AMNET_CONDUIT`.
    fn name(&self) -> &'static str;
    /// This process's rank.
    fn rank(&self) -> Rank;
    /// Number of ranks in the job.
    fn size(&self) -> u32;
    /// Largest Medium payload this conduit carries in one message.
    fn max_medium(&self) -> usize;
    /// Bytes per Long request when the AM reference path splits a put (at least 1). The
    /// default, [`max_medium`](Conduit::max_medium), suits conduits whose Longs travel as
    /// one message; one that fragments Longs itself may ask for larger chunks, each of which
    /// then costs one ack instead of one per Medium-sized piece.
    fn put_chunk(&self) -> usize {
        self.max_medium()
    }
    /// True when more ranks run on this host than it has cores: waits then yield sooner.
    fn oversubscribed(&self) -> bool {
        false
    }
    /// The cores this host's ranks of the job may run on together (for the idle policy when
    /// each rank runs several polling threads; see `Endpoint::declare_threads`). The default
    /// is this process's affinity (`std::thread::available_parallelism`); a conduit that
    /// knows better (the union of its ranks' masks, the node's cores) says so.
    fn host_cores(&self) -> u32 {
        std::thread::available_parallelism()
            .map_or(1, |n| u32::try_from(n.get()).unwrap_or(u32::MAX))
    }
    /// Ranks of the job on this host (for the idle policy when each rank runs several
    /// polling threads; see `Endpoint::declare_threads`). The default is the job size.
    fn local_ranks(&self) -> u32 {
        self.size()
    }
    /// True while a peer drives work on this rank that completes only inside this rank's polls
    /// and runs no handler here (one-sided operations that the transport progresses at the
    /// target). While this holds, an idle wait spins again when its spin is over, as after a
    /// handler; on an oversubscribed host it only yields instead of sleeping, so that it holds
    /// no core another rank needs. The default: false.
    fn keep_awake(&self) -> bool {
        false
    }
    /// Wait at most `max` for something to arrive, without polling (the progress thread's idle
    /// wait, spec/core.md §5a): a conduit with a waitable endpoint returns as soon as a
    /// message may be there (smp: a futex that senders ring; udp: `poll(2)` on its socket).
    /// The default sleeps `max`.
    fn idle_wait(&self, max: std::time::Duration) {
        std::thread::sleep(max);
    }
    /// Collective, blocking: every rank contributes a small blob and receives all blobs in rank
    /// order. Used by attach to agree on segment sizes and handler tables.
    fn exchange(&self, blob: &[u8]) -> Result<Vec<Vec<u8>>>;
    /// Collective, blocking: create this rank's segment of `len` bytes and make every rank's
    /// segment reachable (`lens` holds every rank's length, agreed by `exchange`).
    fn attach_segment(&self, len: usize, lens: &[usize]) -> Result<LocalSegment>;
    /// [`attach_segment`](Conduit::attach_segment) over memory that the layer above provides:
    /// the host-local bypass (spec/core.md §7e) places the segment in shared memory that the
    /// ranks of a host map from one another, and the conduit serves its remote peers from
    /// there. Collective, like `attach_segment`. The default refuses: a conduit that cannot
    /// use memory it did not allocate says so, and the bypass stays off.
    ///
    /// # Safety
    /// - `seg.base` is valid for reads and writes of `seg.len` bytes, page-aligned unless
    ///   `seg.len` is 0, and stays so for the conduit's whole life.
    unsafe fn attach_segment_in(&self, seg: LocalSegment, lens: &[usize]) -> Result<()> {
        let _ = (seg, lens);
        Err(crate::Error::conduit(
            self.name(),
            "this conduit cannot serve a segment it did not allocate",
        ))
    }
    /// Try to send one message. `Ok(false)` means no buffer space right now: the core polls and
    /// retries. The payload is consumed (copied or written to the target) before this returns.
    fn try_send(&self, dest: Rank, msg: &OutMsg<'_>) -> Result<bool>;
    /// [`try_send`](Conduit::try_send) for a sender that waits anyway until the message is in
    /// the target's hands (the core's blocking put on the AM path): the conduit may go on
    /// reading `msg.payload` after this returns, and send it from where it lies instead of a
    /// copy, until [`release_held`](Conduit::release_held) is called for it. The default
    /// copies, like `try_send`.
    ///
    /// # Safety
    /// - `msg.payload` stays valid and unchanged until `release_held` has returned for `dest`
    ///   and a range that contains it; the caller makes that call on every path once the
    ///   message was accepted (`Ok(true)`), errors included, before the memory is reused or
    ///   freed. An implementation takes no hold when it answers `Ok(false)` or an error.
    unsafe fn try_send_held(&self, dest: Rank, msg: &OutMsg<'_>) -> Result<bool> {
        self.try_send(dest, msg)
    }
    /// Ends the holds that [`try_send_held`](Conduit::try_send_held) took on payloads sent to
    /// `dest` that lie within `payload`: what the conduit still needs of them (data not
    /// acknowledged yet) is copied before this returns. The default does nothing.
    fn release_held(&self, _dest: Rank, _payload: &[u8]) {}
    /// True while the conduit still reads payloads it holds ([`try_send_held`]) that lie
    /// within `payload`, sent to `dest` (for udp: datagrams not acknowledged yet). False once
    /// [`release_held`](Conduit::release_held) would copy nothing: the payload's local
    /// completion. The default, for conduits that copy: false.
    ///
    /// [`try_send_held`]: Conduit::try_send_held
    fn held_pending(&self, _dest: Rank, _payload: &[u8]) -> bool {
        false
    }
    /// Room for a Medium request (or reply, `is_reply`) to `dest` whose payload of at most
    /// `max_len` bytes the client builds in place, with no copy at commit (spec/core.md
    /// §3a). `None`: the conduit has no such room now, or none at all (the default); the
    /// core then builds the payload in a buffer of its own. Until the slot is committed or
    /// cancelled, the conduit may deliver nothing sent to `dest` after it on the same path.
    fn prepare_medium(
        &self,
        _dest: Rank,
        _is_reply: bool,
        _max_len: usize,
    ) -> Option<PreparedSlot> {
        None
    }
    /// Send the Medium prepared in `slot`: `handler`, `args` and the first `len` bytes of the
    /// slot's buffer.
    ///
    /// # Safety
    /// - `slot` came from [`prepare_medium`](Conduit::prepare_medium) on this conduit with
    ///   the same `dest` and `is_reply`, and is committed or cancelled once.
    /// - `len <= slot.len`, `args.len() <= MAX_ARGS`, and `handler` passed the core's checks.
    unsafe fn commit_medium(
        &self,
        _dest: Rank,
        _slot: &PreparedSlot,
        _is_reply: bool,
        _handler: u8,
        _args: &[u32],
        _len: usize,
    ) {
    }
    /// Send nothing for `slot` (it frees whatever the conduit holds for it).
    ///
    /// # Safety
    /// - As for [`commit_medium`](Conduit::commit_medium), which it replaces.
    unsafe fn cancel_medium(&self, _dest: Rank, _slot: &PreparedSlot) {}
    /// Deliver arrived messages to `sink`, replies only when `replies_only`. `sink` returns
    /// false to end the call early (a waiter whose condition now holds): the conduit then
    /// delivers nothing more in this call. Returns how many were delivered.
    fn poll(&self, replies_only: bool, sink: &mut dyn FnMut(&InMsg<'_>) -> bool) -> Result<usize>;
    /// Native one-sided access: the base address of `rank`'s segment mapped into this process,
    /// when the conduit can do that (shared memory). `None` selects the AM-based reference path.
    fn peer_segment(&self, _rank: Rank) -> Option<*mut u8> {
        None
    }
    /// The library's host scratch of `rank` ([`HOST_SCRATCH_BYTES`] bytes), mapped into this
    /// process, when `rank` shares memory with this one; `None` otherwise (the default).
    ///
    /// A conduit that returns an address keeps it valid and mapped for its whole life,
    /// page-aligned, zero-filled when the job starts, outside every segment and written by
    /// nothing but the library layers above the core ([`LayerHooks::host_scratch`]); the
    /// answer for a rank does not change. Ranks call it before attach too.
    ///
    /// [`LayerHooks::host_scratch`]: crate::LayerHooks::host_scratch
    fn host_scratch(&self, _rank: Rank) -> Option<std::ptr::NonNull<u8>> {
        None
    }
    /// Native one-sided put/get through the transport ([`NativeRma`]), used for every rank
    /// that [`peer_segment`](Conduit::peer_segment) does not map. Called once by attach, after
    /// [`attach_segment`](Conduit::attach_segment), unless `AMNET_RMA=am`; it must give the
    /// same answer (present or not) on every rank. `None` (the default) selects the AM-based
    /// reference path.
    fn native_rma(&self) -> Option<Arc<dyn NativeRma>> {
        None
    }
    /// Native remote atomics through the transport ([`NativeAtomics`]), for the atomic
    /// domains it offloads, where some rank is reached through [`native_rma`]
    /// (Conduit::native_rma). Called once by attach under the same conditions as
    /// `native_rma`; it must give the same answer on every rank. `None` (the default): every
    /// atomic operation is the processor's, on a mapped element or by an active message.
    fn native_atomics(&self) -> Option<Arc<dyn NativeAtomics>> {
        None
    }
    /// This conduit's own counters as (name, value) pairs, in a fixed order (for udp:
    /// datagrams, retransmits, timeouts, duplicates dropped, ...). Empty by default. Read by
    /// [`Endpoint::conduit_stats`](crate::Endpoint::conduit_stats).
    fn counters(&self) -> Vec<(&'static str, u64)> {
        Vec::new()
    }
    /// A word that is 0 until some rank asks the job to end, and non-zero from then on, for
    /// conduits that keep one in memory (smp: the control block's exit word). The core then
    /// reads it inline after every poll and calls [`exit_requested`](Conduit::exit_requested)
    /// only once it is non-zero. The word must stay valid as long as the conduit. `None` (the
    /// default) makes the core call `exit_requested` after every poll.
    fn exit_word(&self) -> Option<&std::sync::atomic::AtomicU64> {
        None
    }
    /// The job-wide exit code, once any rank asked the job to end.
    fn exit_requested(&self) -> Option<i32>;
    /// Publish a job-wide exit request with `code` (the first request wins). Returns the code
    /// that is in force.
    fn request_exit(&self, code: i32) -> i32;
    /// End this rank with `code` (process conduits exit the process; thread mode unwinds the
    /// rank's thread).
    fn terminate(&self, code: i32) -> !;
    /// True when ranks are OS processes (the core then installs its process-exit hook).
    fn is_process_mode(&self) -> bool;
    /// Called once from the core's process-exit hook (a return from `main`,
    /// `std::process::exit`), after the core published the job-wide exit request with the
    /// process's `status` and printed its statistics: a conduit that must leave its transport
    /// cleanly (mpi: the exit barrier and `MPI_Finalize`) does it here, and may end the process
    /// itself with the job's code. The default does nothing.
    fn at_process_exit(&self, _status: i32) {}
}
