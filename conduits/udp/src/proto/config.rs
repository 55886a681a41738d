//! The protocol's parameters: [`ProtoConfig`], the ranges they must keep, and the check of them
//! ([`ProtoConfig::validate`], which [`Proto::new`](super::Proto::new) runs).

use crate::wire::{FRAG_LEN, HEADER_LEN, MAX_AM_LEN, MAX_DATAGRAM};

/// The smallest [`ProtoConfig::mtu`].
pub const MIN_MTU: usize = 512;
/// The largest [`ProtoConfig::recv_window`].
pub const MAX_RECV_WINDOW: u32 = 1 << 16;
const _: () = assert!(MIN_MTU > HEADER_LEN + FRAG_LEN + MAX_AM_LEN);

/// Protocol parameters. Every rank of a job must use the same values. Times in microseconds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProtoConfig {
    /// The largest datagram, headers included: 512 to 65,507 bytes. The default suits loopback
    /// and jumbo-frame networks; use about 1,400 on a standard Ethernet MTU.
    pub mtu: usize,
    /// The most datagrams in flight to one peer.
    pub send_window: u32,
    /// The receive window advertised to each peer, in datagrams (at most [`MAX_RECV_WINDOW`]).
    pub recv_window: u32,
    /// The most datagrams queued (unsent or unacked) to one peer before [`Proto::send`] answers
    /// [`SendError::Backpressure`]. A message larger than this is still accepted when the queue
    /// is empty.
    ///
    /// [`Proto::send`]: super::Proto::send
    /// [`SendError::Backpressure`]: super::SendError::Backpressure
    pub send_queue: usize,
    /// The largest message payload sent or accepted.
    pub max_message: u64,
    /// The retransmission timeout before the first RTT sample.
    pub rto_initial: u64,
    /// The least retransmission timeout.
    pub rto_min: u64,
    /// The greatest retransmission timeout, backoff included.
    pub rto_max: u64,
    /// How long an ack may wait for DATA to ride on (below `rto_min`).
    pub delayed_ack: u64,
    /// Datagrams received in order that make an ack due at once.
    pub ack_every: u32,
    /// Silence towards a peer after which a HEARTBEAT goes out.
    pub heartbeat_interval: u64,
    /// Silence from a peer after which it is failed (above `heartbeat_interval`).
    pub peer_timeout: u64,
    /// Spare datagram buffers kept for reuse.
    pub buffer_pool: usize,
}

impl Default for ProtoConfig {
    fn default() -> Self {
        ProtoConfig {
            mtu: 65_000,
            send_window: 64,
            recv_window: 64,
            send_queue: 256,
            max_message: 1 << 30,
            rto_initial: 10_000,
            rto_min: 1_000,
            rto_max: 1_000_000,
            delayed_ack: 200,
            ack_every: 8,
            heartbeat_interval: 1_000_000,
            peer_timeout: 30_000_000,
            buffer_pool: 256,
        }
    }
}

/// An invalid [`ProtoConfig`] or job shape.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("udp protocol configuration: {field} {reason}")]
pub struct ProtoConfigError {
    /// The offending field.
    pub field: &'static str,
    /// What is wrong with it.
    pub reason: String,
}

impl ProtoConfig {
    /// Checks every parameter against its documented range.
    pub fn validate(&self) -> Result<(), ProtoConfigError> {
        let bad = |field, reason: String| Err(ProtoConfigError { field, reason });
        if !(MIN_MTU..=MAX_DATAGRAM).contains(&self.mtu) {
            return bad(
                "mtu",
                format!("{} is outside {MIN_MTU}..={MAX_DATAGRAM}", self.mtu),
            );
        }
        if self.send_window == 0 {
            return bad("send_window", "must be at least 1".into());
        }
        if !(1..=MAX_RECV_WINDOW).contains(&self.recv_window) {
            return bad(
                "recv_window",
                format!("{} is outside 1..={MAX_RECV_WINDOW}", self.recv_window),
            );
        }
        if self.send_queue == 0 {
            return bad("send_queue", "must be at least 1".into());
        }
        if self.rto_min == 0 || self.rto_min > self.rto_initial || self.rto_initial > self.rto_max {
            return bad(
                "rto_initial",
                format!(
                    "needs 0 < rto_min <= rto_initial <= rto_max (got {}, {}, {})",
                    self.rto_min, self.rto_initial, self.rto_max
                ),
            );
        }
        if self.delayed_ack >= self.rto_min {
            return bad(
                "delayed_ack",
                format!(
                    "{} must be below rto_min ({})",
                    self.delayed_ack, self.rto_min
                ),
            );
        }
        if self.ack_every == 0 {
            return bad("ack_every", "must be at least 1".into());
        }
        if self.heartbeat_interval == 0 || self.peer_timeout <= self.heartbeat_interval {
            return bad(
                "peer_timeout",
                format!(
                    "needs 0 < heartbeat_interval < peer_timeout (got {}, {})",
                    self.heartbeat_interval, self.peer_timeout
                ),
            );
        }
        Ok(())
    }
}
