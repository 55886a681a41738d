//! Errors returned by the AM core.
//!
//! Every error is reported at the caller, names what was wrong (the rank, the handler index,
//! the sizes or the argument) and says how to fix it.

use std::sync::Arc;

use crate::Rank;

/// Result alias used throughout amnet.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in an amnet call.
///
/// Match on the variants rather than on messages: a failed peer is [`Error::PeerFailed`] with
/// its rank, a failed operating-system call is [`Error::Os`] with the `io::Error` as its
/// source ([`Error::io_error`]), a bad setting is [`Error::Config`].
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An operation that needs an attached endpoint ran before `attach` completed.
    #[error("{op}: the endpoint is not attached yet; call Endpoint::attach first")]
    NotAttached {
        /// The operation that was attempted.
        op: &'static str,
    },
    /// A handler index outside the range the caller may use.
    #[error("handler index {index} is reserved for the library (clients use 128..=255)")]
    ReservedHandler {
        /// The offending index.
        index: u8,
    },
    /// Handler index 0 is never valid.
    #[error("handler index 0 is invalid (clients use 128..=255)")]
    HandlerZero,
    /// A message named a handler index that no rank registered.
    #[error(
        "handler {index} is not registered; register it in the HandlerTable before attach or \
         with Endpoint::register_handler after"
    )]
    UnregisteredHandler {
        /// The offending index.
        index: u8,
    },
    /// The same handler index was registered twice.
    #[error("handler {index} is registered twice")]
    DuplicateHandler {
        /// The offending index.
        index: u8,
    },
    /// More than 16 arguments.
    #[error("{given} arguments given; an active message carries at most {max}")]
    TooManyArgs {
        /// How many were given.
        given: usize,
        /// The maximum (16).
        max: usize,
    },
    /// A payload larger than the conduit allows for this category.
    #[error(
        "{category} payload of {len} bytes exceeds the maximum of {max} bytes; split it or use put"
    )]
    PayloadTooLarge {
        /// "Medium" or "Long".
        category: &'static str,
        /// The payload length.
        len: usize,
        /// The conduit's maximum.
        max: usize,
    },
    /// A rank number outside `0..size`.
    #[error("rank {rank} does not exist: the job has {size} ranks")]
    BadRank {
        /// The offending rank.
        rank: Rank,
        /// The job size.
        size: u32,
    },
    /// A (rank, offset, length) range outside that rank's segment.
    #[error(
        "range {offset}..{end} is outside the segment of rank {rank} ({seg_len} bytes)",
        end = *offset as u128 + *len as u128
    )]
    OutOfSegment {
        /// The target rank.
        rank: Rank,
        /// Start offset.
        offset: u64,
        /// Length in bytes.
        len: usize,
        /// The size of that rank's segment.
        seg_len: usize,
    },
    /// A reply was attempted from a reply handler.
    #[error("reply from a reply handler (handler {handler}); only request handlers may reply")]
    ReplyFromReply {
        /// The handler that tried to reply.
        handler: u8,
    },
    /// A second reply from the same request handler.
    #[error("second reply from request handler {handler}; a request handler replies at most once")]
    SecondReply {
        /// The handler that tried to reply twice.
        handler: u8,
    },
    /// A request, blocking call or barrier was attempted from inside a handler.
    #[error("{op} called from handler context (handler {handler}); handlers may only reply")]
    InHandler {
        /// The operation attempted.
        op: &'static str,
        /// The handler running on this thread.
        handler: u8,
    },
    /// `attach` was called twice.
    #[error("attach called twice; a job attaches once")]
    AlreadyAttached,
    /// Ranks disagree on something that must be identical (handler tables at attach).
    #[error("ranks disagree at {what}: {detail}")]
    Mismatch {
        /// What was compared.
        what: &'static str,
        /// Which ranks differ and how.
        detail: String,
    },
    /// A named barrier saw different ids, or a rank passed the MISMATCH flag.
    #[error("barrier mismatch: {detail}")]
    BarrierMismatch {
        /// The ids involved.
        detail: String,
    },
    /// `barrier_wait` / `barrier_try` without a matching `barrier_notify`, or notify twice.
    #[error("barrier misuse: {0}")]
    BarrierState(&'static str),
    /// A handle from a different endpoint, or access-region misuse (begin twice, end without
    /// begin).
    #[error("invalid handle: {0}")]
    BadHandle(&'static str),
    /// Environment or start-up configuration is wrong.
    #[error("configuration error: {0}")]
    Config(String),
    /// A peer rank failed: it died, went silent past the conduit's timeout, or left without
    /// ending the job. Operations that need it fail with this error from then on.
    #[error("{conduit} conduit: rank {rank} has failed ({detail})")]
    PeerFailed {
        /// The conduit that found out.
        conduit: &'static str,
        /// The rank that failed.
        rank: Rank,
        /// How it was found out (a timeout, a lost connection, ...).
        detail: String,
    },
    /// An operating-system call failed; `source` is its error.
    #[error("{conduit} conduit: {op}: {source}")]
    Os {
        /// The conduit (or "core", "launcher") that made the call.
        conduit: &'static str,
        /// What was attempted, with its arguments (`shm_open /amnet-1-q0`, `bind 127.0.0.1:0`).
        op: String,
        /// The operating system's error.
        #[source]
        source: Arc<std::io::Error>,
    },
    /// The conduit failed (shared memory, sockets, MPI...) in a way no other variant
    /// describes.
    #[error("{conduit} conduit: {detail}")]
    Conduit {
        /// Which conduit.
        conduit: &'static str,
        /// What failed.
        detail: String,
    },
    /// A library call was used in a way its rules forbid (an invalid argument or flag
    /// combination, a call at the wrong time); `detail` says which argument and why.
    #[error("{op}: {detail}")]
    Usage {
        /// The call.
        op: &'static str,
        /// What was wrong and how to fix it.
        detail: String,
    },
    /// An immediate send found no room for the message in the conduit (a full ring or send
    /// window) and returned instead of polling; nothing was sent.
    #[error("{op}: no room to send to rank {dest} now (immediate); poll and retry")]
    WouldBlock {
        /// The call.
        op: &'static str,
        /// The destination rank.
        dest: Rank,
    },
    /// A watchdog found a wait that made no progress for too long; `detail` lists what was
    /// in flight and what each operation waited for.
    #[error("no progress for {millis} ms: {detail}")]
    Hang {
        /// Milliseconds without progress.
        millis: u64,
        /// What was in flight.
        detail: String,
    },
    /// A wait exceeded its time limit.
    #[error("timed out after {secs} s waiting for {what}")]
    Timeout {
        /// What was waited for.
        what: String,
        /// Seconds waited.
        secs: u64,
    },
}

impl Error {
    /// An [`Error::Os`] for `op` failing with `source`.
    pub fn os(conduit: &'static str, op: impl Into<String>, source: std::io::Error) -> Self {
        Error::Os {
            conduit,
            op: op.into(),
            source: Arc::new(source),
        }
    }

    /// The operating system's error behind an [`Error::Os`].
    pub fn io_error(&self) -> Option<&std::io::Error> {
        match self {
            Error::Os { source, .. } => Some(source),
            _ => None,
        }
    }

    /// The failed rank behind an [`Error::PeerFailed`].
    pub fn failed_rank(&self) -> Option<Rank> {
        match self {
            Error::PeerFailed { rank, .. } => Some(*rank),
            _ => None,
        }
    }

    /// Convenience constructor for conduit errors.
    pub fn conduit(conduit: &'static str, detail: impl Into<String>) -> Self {
        Error::Conduit {
            conduit,
            detail: detail.into(),
        }
    }
}
