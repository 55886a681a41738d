//! Why the protocol refused a message ([`SendError`]) or dropped a datagram ([`RxError`]).

use amnet_core::Rank;

use crate::wire::WireError;

/// Why [`Proto::send`] did not take a message. Nothing was queued.
///
/// [`Proto::send`]: super::Proto::send
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SendError {
    /// The queue to this rank is full: transmit, take in acks and deliver, then retry.
    #[error("the send queue to rank {0} is full; make progress and retry")]
    Backpressure(Rank),
    /// No such rank.
    #[error("rank {rank} does not exist in a job of {size} ranks")]
    BadRank {
        /// The destination given.
        rank: Rank,
        /// Ranks in the job.
        size: u32,
    },
    /// The destination has been failed by the liveness check.
    #[error("rank {0} has failed (silent past the peer timeout)")]
    PeerFailed(Rank),
    /// The payload is above [`ProtoConfig::max_message`].
    ///
    /// [`ProtoConfig::max_message`]: super::ProtoConfig::max_message
    #[error("a message of {len} bytes is above the limit of {max} bytes")]
    TooLarge {
        /// Payload bytes.
        len: u64,
        /// The limit.
        max: u64,
    },
    /// The message breaks a wire rule (handler 0, too many arguments, a Short payload, a bad
    /// long offset).
    #[error(transparent)]
    Malformed(#[from] WireError),
}

/// Why [`Proto::on_datagram`] dropped a datagram, or part of what it carried. Every case is
/// also counted in [`Counters`].
///
/// [`Counters`]: super::Counters
/// [`Proto::on_datagram`]: super::Proto::on_datagram
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RxError {
    /// The bytes are not a valid datagram.
    #[error("undecodable datagram: {0}")]
    Decode(#[from] WireError),
    /// A datagram of another job.
    #[error("datagram of another job (key {0:#018x})")]
    ForeignJob(u64),
    /// A source or destination rank that does not fit this rank.
    #[error("misaddressed datagram: from rank {src} to rank {dst}")]
    Misaddressed {
        /// Source rank field.
        src: u32,
        /// Destination rank field.
        dst: u32,
    },
    /// A datagram from a failed peer.
    #[error("datagram from failed rank {0}")]
    FailedPeer(Rank),
    /// A well-formed datagram that breaks the protocol (an inconsistent fragment, an ack of
    /// data never sent, a message above the size limit).
    #[error("protocol violation by rank {src}: {what}")]
    Protocol {
        /// The peer.
        src: Rank,
        /// What it did.
        what: &'static str,
    },
}
