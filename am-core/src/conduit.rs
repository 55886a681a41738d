//! The narrow seam between the AM core and a transport.
//!
//! A conduit moves whole active messages between ranks and knows nothing of handlers, tokens,
//! put/get, barriers, collectives or sync modes: those live in the core and above. Everything a
//! conduit must provide is on [`Conduit`]; the optional native paths (direct access to a peer's
//! segment) have defaults that make the core fall back to its AM-based reference code.

use crate::{Rank, Result};

/// The most arguments an active message carries.
pub const MAX_ARGS: usize = 16;

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
    /// True when more ranks run on this host than it has cores: waits then yield sooner.
    fn oversubscribed(&self) -> bool {
        false
    }
    /// Collective, blocking: every rank contributes a small blob and receives all blobs in rank
    /// order. Used by attach to agree on segment sizes and handler tables.
    fn exchange(&self, blob: &[u8]) -> Result<Vec<Vec<u8>>>;
    /// Collective, blocking: create this rank's segment of `len` bytes and make every rank's
    /// segment reachable (`lens` holds every rank's length, agreed by `exchange`).
    fn attach_segment(&self, len: usize, lens: &[usize]) -> Result<LocalSegment>;
    /// Try to send one message. `Ok(false)` means no buffer space right now: the core polls and
    /// retries. The payload is consumed (copied or written to the target) before this returns.
    fn try_send(&self, dest: Rank, msg: &OutMsg<'_>) -> Result<bool>;
    /// Deliver arrived messages to `sink`, replies only when `replies_only`. `sink` returns
    /// false to end the call early (a waiter whose condition now holds): the conduit then
    /// delivers nothing more in this call. Returns how many were delivered.
    fn poll(&self, replies_only: bool, sink: &mut dyn FnMut(&InMsg<'_>) -> bool) -> Result<usize>;
    /// Native one-sided access: the base address of `rank`'s segment mapped into this process,
    /// when the conduit can do that (shared memory). `None` selects the AM-based reference path.
    fn peer_segment(&self, _rank: Rank) -> Option<*mut u8> {
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
    /// True when ranks are OS processes (the core then installs its exit hooks).
    fn is_process_mode(&self) -> bool;
}
