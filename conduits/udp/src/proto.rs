//! The reliability layer: a pure state machine with no sockets and no clock of its own.
//!
//! [`Proto`] turns the unreliable datagrams of UDP into exactly-once, per-sender-ordered
//! delivery of whole active messages. The caller owns the socket and the clock: it hands in
//! each received datagram ([`Proto::on_datagram`]), asks for the datagrams to put on the wire
//! ([`Proto::poll_transmit`]), takes completed messages out ([`Proto::pop`]) and calls back no
//! later than [`Proto::next_timeout`]. Every time is a `u64` count of microseconds on the
//! caller's monotonic clock, passed in as `now`; nothing here reads a clock, so the simulator in
//! `tests/sim.rs` drives the same code through loss, duplication, reordering and delay.
//!
//! # Protocol
//!
//! Each ordered pair of ranks is an independent stream of DATA datagrams numbered 0, 1, 2, ...
//! (64-bit sequence numbers never wrap).
//!
//! **Messages and fragments.** [`Proto::send`] copies a message into one or more datagrams of
//! at most [`Config::mtu`] bytes, each carrying one fragment; the first also carries the AM
//! header. Fragments take consecutive sequence numbers, so the receiver, which releases data
//! strictly in sequence order, sees a message's fragments back to back and reassembles one
//! message per peer at a time. A message to oneself never touches the wire: it is copied
//! straight to the delivery queue.
//!
//! **Receiving.** The receiver keeps `rcv_next`, the lowest sequence number not yet received,
//! and a reorder buffer for what arrived beyond it. An in-order datagram is consumed at once
//! (no copy beyond the payload's); an out-of-order one is copied into the reorder buffer until
//! the gap fills; one below `rcv_next` or already buffered is a duplicate and is dropped.
//! Completed messages go to the delivery queue and leave through [`Proto::pop`], each exactly
//! once, in per-sender order (requests and replies share one arrival order; `pop(true)` takes
//! replies only). A caller may instead take a message straight off the wire
//! ([`Proto::on_datagram_direct`]) when the datagram completes it alone and nothing waits in
//! the queue, so the order is the same either way. The ack fields of such a datagram are checked
//! at once but applied later ([`Proto::settle`]): by the next call that changes the state, or
//! right after the datagrams of [`Proto::send_now`] (the handler's reply) have left.
//!
//! **Acks.** Every datagram carries the cumulative ack (`rcv_next`), a 64-bit selective-ack
//! bitmap of the sequence numbers after it that sit in the reorder buffer, and the window. Acks
//! ride on DATA when there is DATA to send. Otherwise an ACK datagram goes out once
//! [`Config::delayed_ack`] has passed since the ack became owed, or at once after an
//! out-of-order datagram, a duplicate, a gap being filled, [`Config::ack_every`] unacked
//! datagrams, or a reopened window.
//!
//! **Credits.** The window a receiver advertises is [`Config::recv_window`] datagrams from
//! `rcv_next`, less the datagrams of completed messages the application has not taken yet and
//! the fragments of the message in reassembly, but never less than the fragments that message
//! still lacks (at most `recv_window`), so that a message longer than the window completes; it
//! drops DATA beyond it. Counting the reassembly keeps the credit edge (`rcv_next + window`)
//! from moving back when a message completes, so no datagram sent on credit granted earlier is
//! dropped. The sender transmits sequence numbers below
//! `min(snd_una + send_window, ack + window)`. A receiver whose application stops taking
//! messages thus stops its senders, and both the reorder buffer and the delivery queue stay
//! bounded. When taking messages reopens the window past half, an ACK says so at once;
//! heartbeats repeat it, so a lost window update only costs a heartbeat interval.
//!
//! **Retransmission.** Each peer has an adaptive retransmission timeout (Jacobson/Karels:
//! `rto = srtt + 4 rttvar`, clamped to `[rto_min, rto_max]`). RTT samples come only from
//! datagrams transmitted once (Karn's rule). An in-flight datagram unacked for `rto`, counted
//! from its transmission or from the last time the cumulative ack moved forward, whichever is
//! later, is retransmitted and the timeout doubles (exponential backoff, capped at `rto_max`)
//! until a new sample arrives. (The timer restarts on progress, as TCP's does: a window of
//! large datagrams takes longer to drain at the receiver than the round trip of a small
//! message, and while acks keep coming nothing is lost. Counted from transmission alone, a
//! 4 MiB window on loopback outlived the 1 ms floor of the timeout and was sent twice.)
//! Selective acks trigger faster recovery: a datagram is deemed lost, and retransmitted at
//! once, when three datagrams transmitted after it have been acked.
//!
//! **Liveness.** A peer nothing was sent to for [`Config::heartbeat_interval`] gets a
//! HEARTBEAT (which carries acks and the window like any datagram). A peer heard from by no
//! valid datagram for [`Config::peer_timeout`] is failed for good: its queues are freed,
//! sends to it fail, and [`Proto::failed_peers`] reports it.
//!
//! # What it does not do
//!
//! - Congestion control: the windows are flow control between two ranks, sized for a
//!   dedicated cluster network or loopback, not for sharing a congested path fairly.
//! - Restarts: a rank's state lives for the whole job. The job key, unique per launch, keeps
//!   datagrams of an earlier job out.
//! - Orderly departure: there is no goodbye datagram; ending the job is the conduit's protocol
//!   (an active message), and a rank that stops polling for the peer timeout is failed.
//! - Placement of anything but Long payloads. A Long payload goes straight to its place in the
//!   receiver's segment, fragment by fragment, once the caller has installed a [`LongSink`]
//!   (the conduit does at attach); without one, or when its range does not fit, it is
//!   reassembled in a buffer like a Medium one.
//!
//! # Bounds on what a peer can make us hold
//!
//! Per peer: the reorder buffer holds at most `recv_window` datagrams; the message being
//! reassembled is at most [`Config::max_message`] bytes (its buffer grows with the bytes that
//! actually arrive); undelivered complete messages exceed `recv_window` datagrams by at most
//! one message. A malformed or inconsistent datagram is dropped and counted, never trusted:
//! see [`Counters`].

use std::collections::VecDeque;

use amnet_core::{Category, OutMsg, Rank};

use crate::wire::{
    self, AmHeader, Fragment, Header, Kind, Packet, WireError, FRAG_LEN, HEADER_LEN, MAX_AM_LEN,
    MAX_DATAGRAM, SACK_BITS,
};

/// The most datagrams [`Proto::poll_transmit`] hands to its callback at once.
pub const BATCH: usize = 64;
/// The smallest [`Config::mtu`].
pub const MIN_MTU: usize = 512;
/// The largest [`Config::recv_window`].
pub const MAX_RECV_WINDOW: u32 = 1 << 16;
const _: () = assert!(MIN_MTU > HEADER_LEN + FRAG_LEN + MAX_AM_LEN);
/// Datagrams acked after a datagram that make it count as lost.
const DUP_THRESH: usize = 3;
/// The most doublings of the retransmission timeout.
const MAX_BACKOFF: u32 = 16;
/// The most bytes reserved up front for a message in reassembly; beyond, the buffer grows as
/// fragments arrive, so a peer's claimed length alone cannot make us allocate.
const PREALLOC_MAX: u64 = 1 << 22;

/// Protocol parameters. Every rank of a job must use the same values. Times in microseconds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
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

impl Default for Config {
    fn default() -> Self {
        Config {
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

/// An invalid [`Config`] or job shape.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("udp protocol configuration: {field} {reason}")]
pub struct ConfigError {
    /// The offending field.
    pub field: &'static str,
    /// What is wrong with it.
    pub reason: String,
}

impl Config {
    /// Checks every parameter against its documented range.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let bad = |field, reason: String| Err(ConfigError { field, reason });
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

/// Why [`Proto::send`] did not take a message. Nothing was queued.
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
    /// The payload is above [`Config::max_message`].
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

/// Event counts since creation. The counts every round trip moves share the first cache line.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[repr(C)]
pub struct Counters {
    /// Datagrams handed to the transmit callback and accepted by it.
    pub tx_datagrams: u64,
    /// Their bytes.
    pub tx_bytes: u64,
    /// Datagrams given to [`Proto::on_datagram`].
    pub rx_datagrams: u64,
    /// Their bytes.
    pub rx_bytes: u64,
    /// DATA datagrams transmitted for the first time.
    pub data_sent: u64,
    /// Messages accepted by [`Proto::send`].
    pub messages_sent: u64,
    /// Messages completed and queued for delivery.
    pub messages_received: u64,
    /// Peers failed by the liveness check.
    pub peers_failed: u64,
    /// DATA datagrams transmitted again.
    pub retransmits: u64,
    /// Datagrams deemed lost from selective acks (before their timeout).
    pub fast_retransmits: u64,
    /// Retransmission timer expiries (each doubles that peer's timeout).
    pub timeouts: u64,
    /// ACK datagrams sent.
    pub acks_sent: u64,
    /// HEARTBEAT datagrams sent.
    pub heartbeats_sent: u64,
    /// Duplicate DATA datagrams dropped.
    pub duplicates: u64,
    /// DATA datagrams dropped beyond the receive window.
    pub out_of_window: u64,
    /// Datagrams that did not decode.
    pub decode_errors: u64,
    /// Datagrams of another job.
    pub foreign_key: u64,
    /// Datagrams with a source or destination that does not fit.
    pub misaddressed: u64,
    /// Datagrams from failed peers.
    pub from_failed: u64,
    /// Protocol violations ([`RxError::Protocol`]).
    pub protocol_errors: u64,
}

/// One datagram to put on the wire: `bytes` followed by `tail`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Datagram<'a> {
    /// Destination rank.
    pub dest: Rank,
    /// The bytes (for a held payload, the headers only).
    pub bytes: &'a [u8],
    /// The payload chunk of a fragment sent from its sender's own memory
    /// ([`Proto::send_now_held`]); empty otherwise.
    pub tail: &'a [u8],
}

impl Datagram<'_> {
    /// A datagram whose bytes are all in `bytes`.
    pub fn whole(dest: Rank, bytes: &[u8]) -> Datagram<'_> {
        Datagram {
            dest,
            bytes,
            tail: &[],
        }
    }

    /// Its length on the wire.
    pub fn len(&self) -> usize {
        self.bytes.len() + self.tail.len()
    }

    /// True when it has no bytes at all.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Its bytes on the wire, in one buffer.
    pub fn to_vec(&self) -> Vec<u8> {
        let mut v = Vec::with_capacity(self.len());
        v.extend_from_slice(self.bytes);
        v.extend_from_slice(self.tail);
        v
    }
}

/// What [`Proto::send_now`] did with a message it accepted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sent {
    /// Its datagrams went straight to the transmit callback, which took them all; the value
    /// is the time the clock read right after the last, which stamps its transmission.
    Wire(u64),
    /// Queued: [`Proto::poll_transmit`] sends it, or the part of it that the direct path could
    /// not send (or, for a message to this rank, it waits for [`Proto::pop`]).
    Queued,
}

/// The receiver's segment, as the protocol writes Long payloads into it: each fragment's
/// chunk goes to its place as it is taken in, so a Long is never reassembled in a buffer and
/// copied again. Installed with [`Proto::set_long_sink`].
pub trait LongSink: Send {
    /// Whether `len` bytes at `offset` lie inside the segment. Asked once per Long message,
    /// at its first fragment; a message that does not fit is reassembled in a buffer and
    /// delivered as usual (the caller then reports it).
    fn fits(&self, offset: u64, len: u64) -> bool;
    /// Copies `chunk` to `offset`. Only called for ranges inside one that [`LongSink::fits`]
    /// accepted.
    fn write(&mut self, offset: u64, chunk: &[u8]);
}

/// A complete message, taken out by [`Proto::pop`].
#[derive(Debug)]
pub struct Delivery {
    /// The sending rank.
    pub src: Rank,
    /// Handler, category, reply flag, arguments and long offset.
    pub am: AmHeader,
    /// The payload (empty when `placed`). Hand the delivery back with [`Proto::recycle`] to
    /// reuse this buffer.
    pub payload: Vec<u8>,
    /// For a Long payload the [`LongSink`] took: its length; the bytes are already at
    /// `am.long_offset`. `None`: the payload is `payload`.
    pub placed: Option<u64>,
    /// Datagrams it took, for credit accounting.
    dgrams: u32,
    /// Position in arrival order.
    order: u64,
}

/// A snapshot of the protocol state towards one peer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerStatus {
    /// Failed by the liveness check.
    pub failed: bool,
    /// Smoothed RTT, once sampled (µs).
    pub srtt: Option<u64>,
    /// RTT variation (µs).
    pub rttvar: u64,
    /// The retransmission timeout in force, backoff included (µs).
    pub rto: u64,
    /// Doublings applied to the timeout since the last RTT sample.
    pub backoff: u32,
    /// DATA datagrams transmitted and not cumulatively acked.
    pub in_flight: u64,
    /// DATA datagrams queued and not transmitted yet.
    pub unsent: u64,
    /// Credits the peer last granted, counted from the oldest unacked datagram.
    pub send_credit: u64,
    /// The window we advertise to the peer now.
    pub advertised: u32,
    /// The credit edge we grant the peer now (the lowest sequence number not received plus
    /// `advertised`): DATA below it is taken in. It never moves back while the peer keeps the
    /// protocol, so nothing sent on credit granted earlier is dropped.
    pub credit_edge: u64,
    /// Datagrams from the peer held in the reorder buffer.
    pub reorder_buffered: usize,
    /// Complete messages from the peer not taken yet, in datagrams.
    pub undelivered: u32,
    /// When we last heard from the peer (µs).
    pub last_heard: u64,
}

/// One queued DATA datagram on the send side.
#[derive(Debug)]
struct Seg {
    /// The encoded datagram; ack fields are patched at each transmission. For a held payload,
    /// its headers only: `held` is the rest.
    buf: Vec<u8>,
    /// The payload chunk, still in the sender's memory ([`Proto::send_now_held`]).
    held: Option<Held>,
    /// Last transmission time.
    sent_at: u64,
    /// Per-peer transmission stamp of the last transmission (orders transmissions).
    stamp: u64,
    /// Transmissions so far (0: not yet sent).
    tx_count: u32,
    /// Selectively acked.
    sacked: bool,
    /// Deemed lost: retransmit at the next opportunity.
    lost: bool,
}

/// A payload chunk that a datagram sends from its sender's memory instead of a copy: valid
/// until [`Proto::release_held`] turns it into a copy, by the contract of
/// [`Proto::send_now_held`].
#[derive(Debug, Clone, Copy)]
struct Held {
    ptr: std::ptr::NonNull<u8>,
    len: usize,
}

// SAFETY: a `Held` is a read-only view of memory that the holder's caller keeps valid and
// unchanged until it is released; which thread reads it through the protocol (always under
// the conduit's lock) does not matter.
unsafe impl Send for Held {}

impl Held {
    fn bytes(&self) -> &[u8] {
        // SAFETY: by the contract of `Proto::send_now_held`, the chunk stays valid and unchanged
        // until `Proto::release_held` replaces this view with a copy.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }
}

impl Seg {
    /// The payload chunk held in the sender's memory, if any.
    fn tail(&self) -> &[u8] {
        self.held.as_ref().map_or(&[], Held::bytes)
    }
}

/// A message in reassembly.
#[derive(Debug)]
struct Partial {
    msg_id: u64,
    next_index: u32,
    count: u32,
    total: u64,
    am: AmHeader,
    /// Bytes taken in so far.
    got: u64,
    /// The payload goes through the [`LongSink`], not into `buf`.
    placed: bool,
    buf: Vec<u8>,
}

/// Per-peer state. The fields a round trip touches come first, packed into four cache lines
/// from a line boundary; the control datagram's buffer, used only for ACKs and HEARTBEATs,
/// comes last, and a message in reassembly lives out of line.
#[derive(Debug)]
#[repr(C, align(64))]
struct Peer {
    // Send side.
    /// Oldest unacked sequence number.
    snd_una: u64,
    /// Next sequence number to transmit for the first time.
    snd_tx: u64,
    /// The peer's credit limit: sequence numbers below are accepted.
    peer_edge: u64,
    /// Next message id.
    msg_next: u64,
    /// Next transmission stamp.
    next_stamp: u64,
    /// When the cumulative ack last moved forward (or the peer was set up): no datagram's
    /// retransmission timeout runs from before it.
    progress_at: u64,
    // Receive side.
    /// Lowest sequence number not yet received.
    rcv_next: u64,
    rcv_msg_next: u64,
    /// The credit edge (ack + window) in the last datagram sent to this peer.
    last_edge: u64,
    /// Queued datagrams from `snd_una` on: `[snd_una, snd_tx)` transmitted, the rest not yet.
    segs: VecDeque<Seg>,
    /// Out-of-order datagrams: index i holds sequence number `rcv_next + i` (index 0 is always
    /// empty).
    ooo: VecDeque<Option<Vec<u8>>>,
    ack_owed_since: u64,
    // Liveness.
    last_heard: u64,
    last_tx: u64,
    // Round-trip estimate.
    rttvar: u64,
    rto: u64,
    srtt: Option<u64>,
    backoff: u32,
    /// Datagrams of complete messages from this peer not yet taken (for self: messages).
    ready_dgrams: u32,
    unacked_rx: u32,
    ack_owed: bool,
    ack_now: bool,
    failed: bool,
    partial: Option<Box<Partial>>,
    /// The ACK/HEARTBEAT datagram being sent.
    ctl: [u8; HEADER_LEN],
}

impl Peer {
    fn new(cfg: &Config, now: u64) -> Self {
        Peer {
            segs: VecDeque::new(),
            snd_una: 0,
            snd_tx: 0,
            peer_edge: u64::from(cfg.recv_window),
            msg_next: 0,
            next_stamp: 0,
            progress_at: now,
            srtt: None,
            rttvar: 0,
            rto: cfg.rto_initial,
            backoff: 0,
            rcv_next: 0,
            ooo: VecDeque::new(),
            partial: None,
            rcv_msg_next: 0,
            ready_dgrams: 0,
            ack_owed: false,
            ack_owed_since: 0,
            ack_now: false,
            unacked_rx: 0,
            last_edge: u64::from(cfg.recv_window),
            last_heard: now,
            last_tx: now,
            failed: false,
            ctl: [0; HEADER_LEN],
        }
    }

    fn in_flight(&self) -> usize {
        to_usize(self.snd_tx - self.snd_una)
    }

    /// The window to advertise: `recv_window` less what this peer's data holds here, the
    /// complete messages not taken yet and the fragments of the message in reassembly, yet
    /// never less than the fragments that message still lacks (up to `recv_window`), so that a
    /// message longer than the window can complete.
    ///
    /// The credit edge `rcv_next + advertised` never moves back: an in-order datagram that
    /// completes a lone message or joins the reassembly adds one to `rcv_next` and one to what
    /// is held; the last fragment turns the fragments held into a complete message of the
    /// same count plus one; the floor only covers sequence numbers the message itself takes.
    /// So a datagram sent on any credit granted earlier is never dropped as out of window.
    /// The end of what may be transmitted: the peer's credit edge, within `send_window` of the
    /// oldest unacked datagram.
    #[inline]
    fn send_edge(&self, send_window: u32) -> u64 {
        self.peer_edge
            .min(self.snd_una.saturating_add(u64::from(send_window)))
    }

    /// True when a queued datagram that was never transmitted may go now.
    #[inline]
    fn can_send_new(&self, send_window: u32) -> bool {
        self.snd_tx < self.snd_una + len_u64(self.segs.len())
            && self.snd_tx < self.send_edge(send_window)
    }

    /// The credit edge this rank grants the peer: `rcv_next` plus the advertised window.
    #[inline]
    fn credit_edge(&self, recv_window: u32) -> u64 {
        self.rcv_next + u64::from(self.advertised(recv_window))
    }

    /// When the retransmission timeout of `seg` started: its transmission or the last
    /// advance of the cumulative ack, whichever is later.
    #[inline]
    fn rto_start(&self, seg: &Seg) -> u64 {
        seg.sent_at.max(self.progress_at)
    }

    fn advertised(&self, recv_window: u32) -> u32 {
        match &self.partial {
            None => recv_window.saturating_sub(self.ready_dgrams),
            Some(p) => {
                let held = self.ready_dgrams.saturating_add(p.next_index);
                let lacking = p.count.saturating_sub(p.next_index).min(recv_window);
                recv_window.saturating_sub(held).max(lacking)
            }
        }
    }

    /// Cumulative ack, selective-ack bitmap and window, as of now.
    fn ack_fields(&self, recv_window: u32) -> (u64, u64, u32) {
        let mut sack = 0u64;
        // Index 0 is always empty: nothing to scan unless something sits beyond it.
        if self.ooo.len() > 1 {
            for (i, slot) in self.ooo.iter().skip(1).take(64).enumerate() {
                if slot.is_some() {
                    sack |= 1 << i;
                }
            }
        }
        (self.rcv_next, sack, self.advertised(recv_window))
    }

    fn rto_eff(&self, cfg: &Config) -> u64 {
        self.rto
            .saturating_mul(1u64 << self.backoff.min(MAX_BACKOFF))
            .min(cfg.rto_max)
    }

    fn rtt_sample(&mut self, r: u64, cfg: &Config) {
        let srtt = match self.srtt {
            None => {
                self.rttvar = r / 2;
                r
            }
            Some(s) => {
                self.rttvar = self.rttvar.saturating_mul(3).saturating_add(s.abs_diff(r)) / 4;
                s.saturating_mul(7).saturating_add(r) / 8
            }
        };
        self.srtt = Some(srtt);
        self.rto = srtt
            .saturating_add(self.rttvar.saturating_mul(4).max(1))
            .clamp(cfg.rto_min, cfg.rto_max);
        self.backoff = 0;
    }

    fn owe_ack(&mut self, now: u64) {
        if !self.ack_owed {
            self.ack_owed = true;
            self.ack_owed_since = now;
        }
    }
}

/// The three largest transmission stamps seen.
#[derive(Default)]
struct Top3 {
    v: [u64; DUP_THRESH],
    n: usize,
}

impl Top3 {
    fn push(&mut self, x: u64) {
        if self.n < DUP_THRESH {
            self.v[self.n] = x;
            self.n += 1;
        } else if let Some(min) = self.v.iter_mut().min() {
            if x > *min {
                *min = x;
            }
        }
    }
    /// The smallest of the three, once there are three.
    fn third(&self) -> Option<u64> {
        (self.n == DUP_THRESH).then(|| self.v.iter().copied().min().unwrap_or(0))
    }
}

/// Ack fields received from `src` at `now` and not applied yet.
#[derive(Debug, Clone, Copy)]
struct PendingAck {
    src: Rank,
    now: u64,
    ack: u64,
    sack: u64,
    window: u32,
}

/// The callback of [`Proto::on_datagram_direct`].
type Take<'t> = &'t mut dyn FnMut(Rank, &AmHeader, &[u8]) -> bool;

/// A datagram chosen by the planner.
#[derive(Debug, Clone, Copy)]
enum Item {
    Seg { peer: Rank, idx: usize },
    Ctl { peer: Rank, kind: Kind },
}

fn ix(r: Rank) -> usize {
    r as usize
}

fn to_usize(x: u64) -> usize {
    usize::try_from(x).unwrap_or(usize::MAX)
}

fn len_u64(n: usize) -> u64 {
    u64::try_from(n).unwrap_or(u64::MAX)
}

fn take_buf(pool: &mut Vec<Vec<u8>>) -> Vec<u8> {
    pool.pop().unwrap_or_default()
}

/// Writes `chunk` at `offset` through the Long sink, when one is installed (a free function
/// so that it borrows only the sink while a peer's reassembly state is borrowed too).
fn write_placed(sink: &mut Option<Box<dyn LongSink>>, offset: u64, chunk: &[u8]) {
    if let Some(sink) = sink.as_mut() {
        sink.write(offset, chunk);
    }
}

fn give_buf(pool: &mut Vec<Vec<u8>>, cap: usize, mut b: Vec<u8>) {
    if pool.len() < cap && b.capacity() <= MAX_DATAGRAM && b.capacity() > 0 {
        b.clear();
        pool.push(b);
    }
}

/// The protocol state of one rank towards every other rank of the job. What a round trip
/// touches comes first (in field order: `repr(C)`), the planner's scratch space last.
#[repr(C)]
pub struct Proto {
    peers: Vec<Peer>,
    pool: Vec<Vec<u8>>,
    key: u64,
    me: Rank,
    nranks: u32,
    /// The ack fields of the last message taken straight off the wire, not applied yet (see
    /// [`Proto::settle`]).
    pending: Option<PendingAck>,
    /// Set by `accept` when the direct-take callback took the message.
    taken: bool,
    /// Complete messages: requests, replies.
    ready: [VecDeque<Delivery>; 2],
    cfg: Config,
    ready_order: u64,
    cursor: usize,
    counters: Counters,
    plan: Vec<Item>,
    /// Where Long payloads go as they arrive, once installed.
    long_sink: Option<Box<dyn LongSink>>,
}

impl std::fmt::Debug for Proto {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Proto")
            .field("rank", &self.me)
            .field("nranks", &self.nranks)
            .field("unacked", &self.unacked())
            .field("ready", &(self.ready[0].len() + self.ready[1].len()))
            .field("counters", &self.counters)
            .finish_non_exhaustive()
    }
}

impl Proto {
    /// The protocol state of rank `me` in a job of `nranks` ranks whose datagrams carry
    /// `job_key`, at time `now` (µs; peers count as heard from at this time).
    pub fn new(
        cfg: Config,
        me: Rank,
        nranks: u32,
        job_key: u64,
        now: u64,
    ) -> Result<Self, ConfigError> {
        cfg.validate()?;
        if me >= nranks {
            return Err(ConfigError {
                field: "rank",
                reason: format!("{me} is not below the job size {nranks}"),
            });
        }
        let peers = (0..nranks).map(|_| Peer::new(&cfg, now)).collect();
        Ok(Proto {
            cfg,
            me,
            nranks,
            key: job_key,
            peers,
            pending: None,
            taken: false,
            ready: [VecDeque::new(), VecDeque::new()],
            ready_order: 0,
            pool: Vec::new(),
            plan: Vec::with_capacity(BATCH),
            cursor: 0,
            counters: Counters::default(),
            long_sink: None,
        })
    }

    /// Installs where Long payloads go from now on: each fragment is written to its place as
    /// it is taken in, and the message's [`Delivery::placed`] says so.
    pub fn set_long_sink(&mut self, sink: Box<dyn LongSink>) {
        self.long_sink = Some(sink);
    }

    /// This rank.
    pub fn rank(&self) -> Rank {
        self.me
    }

    /// Ranks in the job.
    pub fn nranks(&self) -> u32 {
        self.nranks
    }

    /// The parameters.
    pub fn config(&self) -> &Config {
        &self.cfg
    }

    /// Event counts.
    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// Queues `msg` for `dest`, copying its arguments and payload (the caller may reuse its
    /// buffers at once). A message to this rank itself is queued for delivery directly.
    pub fn send(&mut self, dest: Rank, msg: &OutMsg<'_>) -> Result<(), SendError> {
        self.settle();
        self.enqueue(dest, msg)
    }

    /// [`Proto::send`] without settling a deferred ack first (a queue that the ack would have
    /// shortened may answer back-pressure).
    fn enqueue(&mut self, dest: Rank, msg: &OutMsg<'_>) -> Result<(), SendError> {
        self.enqueue_with(dest, msg, false, |_| {})
    }

    /// [`Proto::enqueue`], calling `pushed` after each of the message's datagrams is queued
    /// (not for a message to this rank itself), so that a caller may transmit a long message's
    /// first fragments while the later ones are still being encoded. With `hold`, each
    /// fragment's chunk is not copied: the datagram refers to it in `msg.payload` (the contract
    /// of [`Proto::send_now_held`] applies).
    fn enqueue_with(
        &mut self,
        dest: Rank,
        msg: &OutMsg<'_>,
        hold: bool,
        mut pushed: impl FnMut(&mut Self),
    ) -> Result<(), SendError> {
        if dest >= self.nranks {
            return Err(SendError::BadRank {
                rank: dest,
                size: self.nranks,
            });
        }
        let am = AmHeader::new(
            msg.handler,
            msg.category,
            msg.is_reply,
            msg.args,
            msg.long_offset,
        )?;
        let len = msg.payload.len();
        let total = len_u64(len);
        am.check_payload(total)?;
        if total > self.cfg.max_message {
            return Err(SendError::TooLarge {
                len: total,
                max: self.cfg.max_message,
            });
        }
        if dest == self.me {
            return self.send_local(am, msg.payload);
        }
        let peer = &mut self.peers[ix(dest)];
        if peer.failed {
            return Err(SendError::PeerFailed(dest));
        }
        // mtu >= MIN_MTU > HEADER_LEN + FRAG_LEN + MAX_AM_LEN, so both are positive.
        let rest_cap = self.cfg.mtu - HEADER_LEN - FRAG_LEN;
        let first_cap = rest_cap - am.encoded_len();
        let nfrags = if len <= first_cap {
            1
        } else {
            1 + (len - first_cap).div_ceil(rest_cap)
        };
        let count = u32::try_from(nfrags).map_err(|_| SendError::TooLarge {
            len: total,
            max: self.cfg.max_message,
        })?;
        if !peer.segs.is_empty() && peer.segs.len() + nfrags > self.cfg.send_queue {
            return Err(SendError::Backpressure(dest));
        }
        let msg_id = peer.msg_next;
        peer.msg_next += 1;
        let mut off = 0;
        for index in 0..count {
            let peer = &mut self.peers[ix(dest)];
            let cap = if index == 0 { first_cap } else { rest_cap };
            let end = (off + cap).min(len);
            let chunk = &msg.payload[off..end];
            let pkt = Packet {
                header: Header {
                    kind: Kind::Data,
                    job_key: self.key,
                    src: self.me,
                    dst: dest,
                    seq: peer.snd_una + len_u64(peer.segs.len()),
                    ack: 0,
                    sack: 0,
                    window: 0,
                },
                frag: Some(Fragment {
                    msg_id,
                    index,
                    count,
                    total_len: total,
                    am: (index == 0).then_some(am),
                    chunk,
                }),
            };
            let mut buf = take_buf(&mut self.pool);
            // The AM header and payload were checked above and the fragment is cut by the
            // rules: nothing to check again.
            let held = (hold && !chunk.is_empty()).then(|| Held {
                ptr: std::ptr::NonNull::from(chunk).cast(),
                len: chunk.len(),
            });
            wire::encode_built(&pkt, &mut buf, held.is_none());
            peer.segs.push_back(Seg {
                buf,
                held,
                sent_at: 0,
                stamp: 0,
                tx_count: 0,
                sacked: false,
                lost: false,
            });
            off = end;
            pushed(self);
        }
        self.counters.messages_sent += 1;
        Ok(())
    }

    /// [`Proto::send`], then the direct transmit path: each of the message's datagrams, as
    /// soon as it is encoded, goes straight to `tx` (with the current ack fields) instead of
    /// waiting for [`Proto::poll_transmit`], as long as everything queued to `dest` before it
    /// has been transmitted and both windows admit it. So a long message's first fragments
    /// are on the wire while the later ones are still being copied. `clock` is read once `tx`
    /// has taken each datagram, and its time is recorded as the transmission's; from then on
    /// the datagram is in flight like any other: piggy-backed acks are settled, and it is
    /// acked, timed, retransmitted and counted as if the planner had sent it.
    ///
    /// The planner's scans are skipped, and with them its other work: retransmissions, acks
    /// and heartbeats that are due, to `dest` or any other peer, still wait for
    /// `poll_transmit`, which the caller runs by [`Proto::next_timeout`] as always (so the
    /// direct path suits a caller that knows nothing else was due). Once a datagram cannot go
    /// (`tx` refuses it, or a window is full), it and the rest of the message stay queued for
    /// `poll_transmit`, and the answer is [`Sent::Queued`]; [`Sent::Wire`] means every datagram
    /// of the message left.
    ///
    /// The ack deferred by [`Proto::on_datagram_direct`], if any, is applied once `tx` has
    /// returned, so the reply to a message taken straight off the wire leaves before the
    /// bookkeeping of the ack that the message carried.
    pub fn send_now(
        &mut self,
        dest: Rank,
        msg: &OutMsg<'_>,
        tx: impl FnMut(Datagram<'_>) -> bool,
        clock: impl FnMut() -> u64,
    ) -> Result<Sent, SendError> {
        let sent = self.send_direct(dest, msg, false, tx, clock);
        self.settle();
        sent
    }

    /// [`Proto::send_now`] without copying the payload: each fragment's datagram refers to its
    /// chunk where it lies in `msg.payload`, and is transmitted (and retransmitted) from there
    /// as a second buffer ([`Datagram::tail`]). For a sender that waits anyway until the
    /// message is in the target's hands, such as a blocking put.
    ///
    /// # Safety
    /// - When this returns `Ok`, `msg.payload` must stay valid and unchanged until
    ///   [`Proto::release_held`] has been called with `dest` and a range that contains it,
    ///   which must happen before the payload's memory is reused or freed, on every path
    ///   (errors included). An `Err` (back-pressure included) leaves no hold.
    pub unsafe fn send_now_held(
        &mut self,
        dest: Rank,
        msg: &OutMsg<'_>,
        tx: impl FnMut(Datagram<'_>) -> bool,
        clock: impl FnMut() -> u64,
    ) -> Result<Sent, SendError> {
        let sent = self.send_direct(dest, msg, true, tx, clock);
        self.settle();
        sent
    }

    /// [`Proto::send`] without copying the payload, like [`Proto::send_now_held`].
    ///
    /// # Safety
    /// - As for [`Proto::send_now_held`].
    pub unsafe fn send_held(&mut self, dest: Rank, msg: &OutMsg<'_>) -> Result<(), SendError> {
        self.settle();
        self.enqueue_with(dest, msg, true, |_| {})
    }

    /// Ends the hold of [`Proto::send_now_held`] or [`Proto::send_held`] on `payload`: each
    /// datagram to `dest` that still refers to it (not acked yet) takes a copy of its chunk,
    /// so that the caller may reuse the memory. After a round trip that the message's target
    /// answered, usually none does (the answer acked them).
    pub fn release_held(&mut self, dest: Rank, payload: &[u8]) {
        self.settle();
        let Some(peer) = self.peers.get_mut(ix(dest)) else {
            return;
        };
        let range = payload.as_ptr_range();
        for seg in &mut peer.segs {
            if let Some(h) = seg
                .held
                .filter(|h| range.contains(&h.ptr.as_ptr().cast_const()))
            {
                seg.buf.extend_from_slice(h.bytes());
                seg.held = None;
            }
        }
    }

    fn send_direct(
        &mut self,
        dest: Rank,
        msg: &OutMsg<'_>,
        hold: bool,
        mut tx: impl FnMut(Datagram<'_>) -> bool,
        mut clock: impl FnMut() -> u64,
    ) -> Result<Sent, SendError> {
        // Each datagram leaves as soon as it is encoded, while the path stays open: the
        // receiver takes in a long message's first fragments while the sender copies the rest.
        let mut open = true;
        let mut last = None;
        let mut direct = |p: &mut Self| {
            if open {
                last = p.transmit_newest(dest, &mut tx, &mut clock);
                open = last.is_some();
            }
        };
        match self.enqueue_with(dest, msg, hold, &mut direct) {
            Err(SendError::Backpressure(_)) if self.pending.is_some() => {
                // Back-pressure is answered before anything is queued.
                self.settle();
                self.enqueue_with(dest, msg, hold, &mut direct)?;
            }
            r => r?,
        }
        Ok(match last {
            Some(now) if open => Sent::Wire(now),
            _ => Sent::Queued,
        })
    }

    /// Transmits the datagram just queued to `dest` when everything queued before it has been
    /// transmitted and both windows admit it. Returns the time of the transmission, or `None`
    /// when it stays queued for [`Proto::poll_transmit`].
    fn transmit_newest(
        &mut self,
        dest: Rank,
        tx: &mut impl FnMut(Datagram<'_>) -> bool,
        clock: &mut impl FnMut() -> u64,
    ) -> Option<u64> {
        let (recv_window, send_window) = (self.cfg.recv_window, self.cfg.send_window);
        let peer = &mut self.peers[ix(dest)];
        let idx = peer.in_flight();
        if idx + 1 != peer.segs.len() || peer.snd_tx >= peer.send_edge(send_window) {
            return None;
        }
        let (ack, sack, window) = peer.ack_fields(recv_window);
        let seg = peer.segs.get_mut(idx)?;
        // Cannot fail: segment buffers hold at least a header.
        let _ = wire::patch_ack(&mut seg.buf, ack, sack, window);
        if !tx(Datagram {
            dest,
            bytes: &seg.buf,
            tail: seg.tail(),
        }) {
            return None;
        }
        let now = clock();
        self.commit(now, Item::Seg { peer: dest, idx });
        Some(now)
    }

    fn send_local(&mut self, am: AmHeader, payload: &[u8]) -> Result<(), SendError> {
        let queued = self.peers[ix(self.me)].ready_dgrams;
        if queued > 0 && to_usize(u64::from(queued)) >= self.cfg.send_queue {
            return Err(SendError::Backpressure(self.me));
        }
        let mut buf = take_buf(&mut self.pool);
        buf.extend_from_slice(payload);
        self.counters.messages_sent += 1;
        self.push_ready(self.me, am, buf, None, 1);
        Ok(())
    }

    fn push_ready(
        &mut self,
        src: Rank,
        am: AmHeader,
        payload: Vec<u8>,
        placed: Option<u64>,
        dgrams: u32,
    ) {
        let peer = &mut self.peers[ix(src)];
        peer.ready_dgrams = peer.ready_dgrams.saturating_add(dgrams);
        self.counters.messages_received += 1;
        let order = self.ready_order;
        self.ready_order += 1;
        self.ready[usize::from(am.is_reply)].push_back(Delivery {
            src,
            am,
            payload,
            placed,
            dgrams,
            order,
        });
    }

    /// True when something towards `rank` is due at once: an ack that must not wait, or DATA
    /// the windows admit that is unsent or deemed lost. [`Proto::next_timeout`] then answers a
    /// time at or before any `now`; this looks at that one peer only, for a caller that
    /// received from it and wants to know whether the transmit planner must run before anything
    /// else (a later timer, such as a delayed ack, can wait for its next full look).
    pub fn due_now(&self, rank: Rank) -> bool {
        let Some(peer) = self.peers.get(ix(rank)) else {
            return false;
        };
        if rank == self.me || peer.failed {
            return false;
        }
        if peer.ack_now {
            return true;
        }
        let send_window = u64::from(self.cfg.send_window);
        let end = peer.snd_una + len_u64(peer.segs.len());
        let mut edge = peer.send_edge(self.cfg.send_window);
        if let Some(p) = self
            .pending
            .filter(|p| p.src == rank && p.ack >= peer.snd_una)
        {
            // The deferred ack may open the window, or deem datagrams lost once three sent
            // after them are acked (counted generously: any three acked or selectively acked).
            edge = edge.max(
                p.ack
                    .saturating_add(u64::from(p.window))
                    .min(p.ack.saturating_add(send_window)),
            );
            let acked = (p.ack - peer.snd_una).saturating_add(u64::from(p.sack.count_ones()));
            if acked >= len_u64(DUP_THRESH) && p.ack < peer.snd_tx {
                return true;
            }
        }
        if peer.snd_tx < end && peer.snd_tx < edge {
            return true;
        }
        peer.segs
            .iter()
            .take(peer.in_flight())
            .any(|seg| seg.lost && !seg.sacked)
    }

    /// True when complete messages wait to be taken.
    pub fn has_ready(&self) -> bool {
        !self.ready[0].is_empty() || !self.ready[1].is_empty()
    }

    /// Takes the next complete message in arrival order (replies only when `replies_only`).
    /// Messages from one sender come out in the order it sent them, each exactly once.
    pub fn pop(&mut self, replies_only: bool) -> Option<Delivery> {
        let which = if replies_only {
            1
        } else {
            match (self.ready[0].front(), self.ready[1].front()) {
                (Some(a), Some(b)) => usize::from(b.order < a.order),
                (Some(_), None) => 0,
                (None, _) => 1,
            }
        };
        let d = self.ready[which].pop_front()?;
        let recv_window = self.cfg.recv_window;
        let peer = &mut self.peers[ix(d.src)];
        peer.ready_dgrams = peer.ready_dgrams.saturating_sub(d.dgrams);
        let half = recv_window.div_ceil(2);
        if d.src != self.me
            && !peer.failed
            && peer.last_edge.saturating_sub(peer.rcv_next) < u64::from(half)
            && peer.advertised(recv_window) >= half
        {
            // The sender sees less than half a window, and there is more now: tell it at once
            // rather than at the next timer.
            peer.ack_now = true;
        }
        Some(d)
    }

    /// Gives a delivered message's buffer back for reuse.
    pub fn recycle(&mut self, d: Delivery) {
        give_buf(&mut self.pool, self.cfg.buffer_pool, d.payload);
    }

    /// Takes complete messages (replies only when `replies_only`) and hands each to `f`, until
    /// none is left or `f` returns false; recycles their buffers. Returns how many `f` saw.
    pub fn deliver(&mut self, replies_only: bool, mut f: impl FnMut(&Delivery) -> bool) -> usize {
        let mut n = 0;
        while let Some(d) = self.pop(replies_only) {
            n += 1;
            let more = f(&d);
            self.recycle(d);
            if !more {
                break;
            }
        }
        n
    }

    /// Ingests one received datagram at time `now`. An `Err` says what was dropped; the
    /// protocol state stays consistent either way.
    pub fn on_datagram(&mut self, now: u64, bytes: &[u8]) -> Result<(), RxError> {
        self.settle();
        self.ingest(now, bytes, None)
    }

    /// [`Proto::on_datagram`], offering a message to `take` before queueing it: a message that
    /// this datagram completes by itself, next in sequence from its sender, when no complete
    /// message waits to be taken (so delivery order holds). `take` gets the sender, the AM
    /// header and the payload, and returns true when it has taken the message, which then
    /// counts as received and taken at once (it never occupies the receive window); when it
    /// returns false, the message is queued for [`Proto::pop`] as usual.
    ///
    /// When `take` took the message, the datagram's ack fields (checked at once) are applied
    /// later, by [`Proto::settle`]: by the next call that changes the protocol state, or by
    /// [`Proto::send_now`] once its datagram is on its way, so that a reply sent from the
    /// message's handler leaves first. Until then [`Proto::next_timeout`] answers "at once",
    /// [`Proto::due_now`] and [`Proto::unacked`] count the ack in, and [`Proto::peer_status`]
    /// shows the send side without it.
    pub fn on_datagram_direct(
        &mut self,
        now: u64,
        bytes: &[u8],
        take: &mut dyn FnMut(Rank, &AmHeader, &[u8]) -> bool,
    ) -> Result<(), RxError> {
        self.settle();
        self.ingest(now, bytes, Some(take))
    }

    /// Applies the ack fields that [`Proto::on_datagram_direct`] deferred, if any. Every call
    /// that changes the protocol state does it first (`send_now` last); call it before reading
    /// [`Proto::peer_status`] or [`Proto::next_timeout`] for the settled state.
    pub fn settle(&mut self) {
        if let Some(p) = self.pending.take() {
            // Checked when it arrived; nothing left to report.
            let _ = self.on_ack(p.src, p.now, p.ack, p.sack, p.window);
        }
    }

    fn ingest(&mut self, now: u64, bytes: &[u8], take: Option<Take<'_>>) -> Result<(), RxError> {
        self.counters.rx_datagrams += 1;
        self.counters.rx_bytes += len_u64(bytes.len());
        // Borrowed where the decoder left it: moving a packet just assembled field by field
        // would read it back in wide loads before its narrow stores have landed.
        let decoded = wire::decode(bytes);
        let pkt = match &decoded {
            Ok(pkt) => pkt,
            Err(e) => {
                self.counters.decode_errors += 1;
                return Err((*e).into());
            }
        };
        let h = &pkt.header;
        if h.job_key != self.key {
            self.counters.foreign_key += 1;
            return Err(RxError::ForeignJob(h.job_key));
        }
        if h.dst != self.me || h.src >= self.nranks || h.src == self.me {
            self.counters.misaddressed += 1;
            return Err(RxError::Misaddressed {
                src: h.src,
                dst: h.dst,
            });
        }
        let peer = &mut self.peers[ix(h.src)];
        if peer.failed {
            self.counters.from_failed += 1;
            return Err(RxError::FailedPeer(h.src));
        }
        peer.last_heard = peer.last_heard.max(now);
        let (Some(f), Some(take)) = (&pkt.frag, take) else {
            let acked = self.on_ack(h.src, now, h.ack, h.sack, h.window);
            let data = match &pkt.frag {
                Some(f) => self.on_data(h.src, now, h.seq, f, bytes, None),
                None => Ok(()),
            };
            return acked.and(data);
        };
        // The data first: a message taken straight off the wire goes to its handler (and its
        // reply to the wire) before its ack fields are applied.
        self.taken = false;
        let data = self.on_data(h.src, now, h.seq, f, bytes, Some(take));
        if !self.taken {
            return self.on_ack(h.src, now, h.ack, h.sack, h.window).and(data);
        }
        if self.ack_is_news(h.src, h.ack)? {
            self.pending = Some(PendingAck {
                src: h.src,
                now,
                ack: h.ack,
                sack: h.sack,
                window: h.window,
            });
        }
        data
    }

    /// Whether a cumulative `ack` from `src` moves or confirms its send edge (false: an older
    /// ack, overtaken, with nothing new in it); an ack of data never sent is a protocol error.
    fn ack_is_news(&mut self, src: Rank, ack: u64) -> Result<bool, RxError> {
        let peer = &self.peers[ix(src)];
        if ack < peer.snd_una {
            return Ok(false);
        }
        if ack > peer.snd_tx {
            self.counters.protocol_errors += 1;
            return Err(RxError::Protocol {
                src,
                what: "acked data that was never sent",
            });
        }
        Ok(true)
    }

    /// Processes the ack fields of a datagram from `src`.
    fn on_ack(
        &mut self,
        src: Rank,
        now: u64,
        ack: u64,
        sack: u64,
        window: u32,
    ) -> Result<(), RxError> {
        if !self.ack_is_news(src, ack)? {
            return Ok(());
        }
        let cfg = &self.cfg;
        let pool = &mut self.pool;
        let peer = &mut self.peers[ix(src)];
        let mut top = Top3::default();
        let mut sample: Option<u64> = None;
        for _ in peer.snd_una..ack {
            let Some(seg) = peer.segs.pop_front() else {
                break;
            };
            if !seg.sacked && seg.tx_count == 1 {
                sample = sample.max(Some(seg.sent_at));
            }
            top.push(seg.stamp);
            give_buf(pool, cfg.buffer_pool, seg.buf);
        }
        if ack > peer.snd_una {
            peer.progress_at = now;
        }
        peer.snd_una = ack;
        peer.peer_edge = ack.saturating_add(u64::from(window));
        let in_flight = peer.in_flight();
        let sack_span = to_usize(SACK_BITS).min(in_flight.saturating_sub(1));
        for i in 0..sack_span {
            if sack >> i & 1 == 0 {
                continue;
            }
            if let Some(seg) = peer.segs.get_mut(i + 1) {
                if !seg.sacked {
                    seg.sacked = true;
                    seg.lost = false;
                    if seg.tx_count == 1 {
                        sample = sample.max(Some(seg.sent_at));
                    }
                }
            }
        }
        for seg in peer.segs.iter().take(in_flight) {
            if seg.sacked {
                top.push(seg.stamp);
            }
        }
        if let Some(sent) = sample {
            peer.rtt_sample(now.saturating_sub(sent).max(1), cfg);
        }
        if let Some(third) = top.third() {
            // Three datagrams transmitted after these have arrived, and these have been out
            // for over 5/4 of the smoothed RTT: they are lost, not merely overtaken.
            let reorder = peer.srtt.map_or(0, |s| s + s / 4);
            for seg in peer.segs.iter_mut().take(in_flight) {
                if !seg.sacked
                    && !seg.lost
                    && seg.stamp < third
                    && now.saturating_sub(seg.sent_at) >= reorder
                {
                    seg.lost = true;
                    self.counters.fast_retransmits += 1;
                }
            }
        }
        Ok(())
    }

    /// Processes a DATA datagram's sequence number and fragment.
    fn on_data(
        &mut self,
        src: Rank,
        now: u64,
        seq: u64,
        frag: &Fragment<'_>,
        raw: &[u8],
        take: Option<Take<'_>>,
    ) -> Result<(), RxError> {
        let recv_window = self.cfg.recv_window;
        let peer = &mut self.peers[ix(src)];
        peer.owe_ack(now);
        if seq < peer.rcv_next {
            self.counters.duplicates += 1;
            peer.ack_now = true; // our ack was probably lost
            return Ok(());
        }
        let off = seq - peer.rcv_next;
        if off >= u64::from(peer.advertised(recv_window)) {
            self.counters.out_of_window += 1;
            peer.ack_now = true;
            return Ok(());
        }
        let off = to_usize(off); // below MAX_RECV_WINDOW
        if off > 0 {
            if peer.ooo.len() <= off {
                peer.ooo.resize_with(off + 1, || None);
            }
            if peer.ooo[off].is_some() {
                self.counters.duplicates += 1;
            } else {
                let mut buf = take_buf(&mut self.pool);
                buf.extend_from_slice(raw);
                peer.ooo[off] = Some(buf);
            }
            peer.ack_now = true;
            return Ok(());
        }
        let mut result = self.accept(src, frag, take);
        let peer = &mut self.peers[ix(src)];
        peer.rcv_next += 1;
        peer.unacked_rx += 1;
        peer.ooo.pop_front();
        let mut filled = false;
        loop {
            let peer = &mut self.peers[ix(src)];
            let Some(Some(buf)) = peer.ooo.front_mut().map(Option::take) else {
                break;
            };
            peer.ooo.pop_front();
            peer.rcv_next += 1;
            peer.unacked_rx += 1;
            filled = true;
            let r = match wire::decode(&buf) {
                Ok(Packet { frag: Some(f), .. }) => self.accept(src, &f, None),
                _ => Err(RxError::Protocol {
                    src,
                    what: "buffered datagram no longer decodes",
                }),
            };
            result = result.and(r);
            give_buf(&mut self.pool, self.cfg.buffer_pool, buf);
        }
        let peer = &mut self.peers[ix(src)];
        if filled || peer.unacked_rx >= self.cfg.ack_every {
            peer.ack_now = true;
        }
        if result.is_err() {
            self.counters.protocol_errors += 1;
        }
        result
    }

    /// Takes one in-order fragment from `src` into reassembly; a message it completes by
    /// itself is offered to `take` first (see [`Proto::on_datagram_direct`]).
    fn accept(
        &mut self,
        src: Rank,
        f: &Fragment<'_>,
        take: Option<Take<'_>>,
    ) -> Result<(), RxError> {
        let err = |what| Err(RxError::Protocol { src, what });
        let peer = &mut self.peers[ix(src)];
        if f.index == 0 {
            let Some(am) = &f.am else {
                return err("first fragment without an AM header");
            };
            let mut result = Ok(());
            if peer.partial.take().is_some() {
                result = err("a message began before the previous one was complete");
            }
            if f.msg_id != peer.rcv_msg_next {
                result = err("message id out of sequence");
            }
            peer.rcv_msg_next = f.msg_id.wrapping_add(1);
            if f.total_len > self.cfg.max_message {
                return err("message above max_message");
            }
            if f.count == 1 {
                if let Some(take) = take {
                    if !self.has_ready() && take(src, am, f.chunk) {
                        self.counters.messages_received += 1;
                        self.taken = true;
                        return result;
                    }
                }
                if self.place(am, f.total_len) {
                    write_placed(&mut self.long_sink, am.long_offset, f.chunk);
                    self.push_ready(src, *am, Vec::new(), Some(f.total_len), 1);
                } else {
                    let mut buf = take_buf(&mut self.pool);
                    buf.extend_from_slice(f.chunk);
                    self.push_ready(src, *am, buf, None, 1);
                }
            } else {
                let placed = self.place(am, f.total_len);
                let buf = if placed {
                    write_placed(&mut self.long_sink, am.long_offset, f.chunk);
                    Vec::new()
                } else {
                    let mut buf = Vec::with_capacity(to_usize(f.total_len.min(PREALLOC_MAX)));
                    buf.extend_from_slice(f.chunk);
                    buf
                };
                self.peers[ix(src)].partial = Some(Box::new(Partial {
                    msg_id: f.msg_id,
                    next_index: 1,
                    count: f.count,
                    total: f.total_len,
                    am: *am,
                    got: len_u64(f.chunk.len()),
                    placed,
                    buf,
                }));
            }
            return result;
        }
        let Some(part) = peer.partial.as_mut() else {
            return err("fragment of no message in progress");
        };
        if (part.msg_id, part.next_index, part.count, part.total)
            != (f.msg_id, f.index, f.count, f.total_len)
        {
            peer.partial = None;
            return err("fragment does not continue the message in progress");
        }
        let got = part.got + len_u64(f.chunk.len());
        if got > part.total {
            peer.partial = None;
            return err("fragments longer than the message");
        }
        if part.placed {
            write_placed(&mut self.long_sink, part.am.long_offset + part.got, f.chunk);
        } else {
            part.buf.extend_from_slice(f.chunk);
        }
        part.got = got;
        part.next_index += 1;
        if part.next_index < part.count {
            return Ok(());
        }
        let Some(done) = peer.partial.take() else {
            return Ok(());
        };
        if done.got != done.total {
            return err("fragments shorter than the message");
        }
        let Partial {
            am,
            buf,
            count,
            placed,
            total,
            ..
        } = *done;
        self.push_ready(src, am, buf, placed.then_some(total), count);
        Ok(())
    }

    /// Whether a message with header `am` and payload length `len` goes through the
    /// [`LongSink`]: a Long, with a sink installed, whose range fits. (A Long that starts
    /// inside the range but whose end the sender misstated is caught by the length checks of
    /// reassembly, which drop the message before its last fragment: the sink never writes
    /// beyond `len`.)
    fn place(&self, am: &AmHeader, len: u64) -> bool {
        am.category == Category::Long
            && self
                .long_sink
                .as_ref()
                .is_some_and(|s| s.fits(am.long_offset, len))
    }

    /// Produces the datagrams due at `now`: retransmissions, new DATA within the windows, ACKs
    /// and HEARTBEATs; also fails silent peers. Hands them to `tx` in batches of at most
    /// [`BATCH`] (ready for `sendmmsg`); `tx` returns how many of the batch it sent, and the rest
    /// are offered again at the next call. Returns the number sent.
    pub fn poll_transmit(
        &mut self,
        now: u64,
        mut tx: impl FnMut(&[Datagram<'_>]) -> usize,
    ) -> usize {
        self.settle();
        let mut items = std::mem::take(&mut self.plan);
        let mut sent = 0;
        loop {
            items.clear();
            self.plan_batch(now, &mut items);
            if items.is_empty() {
                break;
            }
            let n = if let [item] = items[..] {
                // The common case on a round trip: one datagram, no batch to fill.
                tx(&[self.datagram(item)]).min(1)
            } else {
                let mut batch = [Datagram::whole(0, &[]); BATCH];
                for (slot, item) in batch.iter_mut().zip(&items) {
                    *slot = self.datagram(*item);
                }
                tx(&batch[..items.len()]).min(items.len())
            };
            for &item in &items[..n] {
                self.commit(now, item);
            }
            sent += n;
            // A short batch means every peer was planned in full: committing it makes nothing
            // new due at this `now`, so planning again would find nothing.
            if n < items.len() || items.len() < BATCH {
                break;
            }
        }
        self.plan = items;
        sent
    }

    fn datagram(&self, item: Item) -> Datagram<'_> {
        match item {
            Item::Seg { peer, idx } => match self.peers[ix(peer)].segs.get(idx) {
                Some(s) => Datagram {
                    dest: peer,
                    bytes: &s.buf,
                    tail: s.tail(),
                },
                None => Datagram::whole(peer, &[]),
            },
            Item::Ctl { peer, .. } => Datagram::whole(peer, &self.peers[ix(peer)].ctl),
        }
    }

    /// Chooses up to [`BATCH`] datagrams, visiting peers round-robin from a rotating start.
    fn plan_batch(&mut self, now: u64, items: &mut Vec<Item>) {
        let n = self.peers.len();
        let start = self.cursor;
        // `start < n`: wrap by subtraction rather than a division (this runs on every send).
        self.cursor = if start + 1 >= n { 0 } else { start + 1 };
        for k in 0..n {
            if items.len() >= BATCH {
                break;
            }
            let p = if start + k >= n {
                start + k - n
            } else {
                start + k
            };
            if p != ix(self.me) && !self.peers[p].failed {
                // p < nranks, a u32.
                let r = Rank::try_from(p).unwrap_or(Rank::MAX);
                self.plan_peer(r, now, items);
            }
        }
    }

    fn plan_peer(&mut self, r: Rank, now: u64, items: &mut Vec<Item>) {
        let cfg = &self.cfg;
        let peer = &mut self.peers[ix(r)];
        if now.saturating_sub(peer.last_heard) > cfg.peer_timeout {
            self.fail_peer(r);
            return;
        }
        let in_flight = peer.in_flight();
        let rto = peer.rto_eff(cfg);
        let progress = peer.progress_at;
        let mut expired = false;
        for seg in peer.segs.iter_mut().take(in_flight) {
            if !seg.sacked && !seg.lost && now.saturating_sub(seg.sent_at.max(progress)) >= rto {
                seg.lost = true;
                expired = true;
            }
        }
        if expired {
            peer.backoff = (peer.backoff + 1).min(MAX_BACKOFF);
            self.counters.timeouts += 1;
        }
        let (ack, sack, window) = peer.ack_fields(cfg.recv_window);
        let before = items.len();
        for (idx, seg) in peer.segs.iter_mut().enumerate().take(in_flight) {
            if items.len() >= BATCH {
                return;
            }
            if seg.lost && !seg.sacked {
                // Cannot fail: segment buffers hold at least a header.
                let _ = wire::patch_ack(&mut seg.buf, ack, sack, window);
                items.push(Item::Seg { peer: r, idx });
            }
        }
        let edge = peer.send_edge(cfg.send_window);
        let end = peer.snd_una + len_u64(peer.segs.len());
        let mut seq = peer.snd_tx;
        while seq < end && seq < edge && items.len() < BATCH {
            let idx = to_usize(seq - peer.snd_una);
            if let Some(seg) = peer.segs.get_mut(idx) {
                let _ = wire::patch_ack(&mut seg.buf, ack, sack, window);
            }
            items.push(Item::Seg { peer: r, idx });
            seq += 1;
        }
        if items.len() > before || items.len() >= BATCH {
            return;
        }
        let kind = if peer.ack_now
            || (peer.ack_owed && now >= peer.ack_owed_since.saturating_add(cfg.delayed_ack))
        {
            Kind::Ack
        } else if now.saturating_sub(peer.last_tx) >= cfg.heartbeat_interval {
            Kind::Heartbeat
        } else {
            return;
        };
        let pkt = Packet {
            header: Header {
                kind,
                job_key: self.key,
                src: self.me,
                dst: r,
                seq: 0,
                ack,
                sack,
                window,
            },
            frag: None,
        };
        // Cannot fail: a valid header-only packet into a header-sized buffer.
        let _ = wire::encode(&pkt, &mut peer.ctl);
        items.push(Item::Ctl { peer: r, kind });
    }

    /// Records that `item` went out at `now`.
    fn commit(&mut self, now: u64, item: Item) {
        let (r, len) = match item {
            Item::Seg { peer: r, idx } => {
                let peer = &mut self.peers[ix(r)];
                let stamp = peer.next_stamp;
                peer.next_stamp += 1;
                let mut len = 0;
                if let Some(seg) = peer.segs.get_mut(idx) {
                    if seg.tx_count == 0 {
                        self.counters.data_sent += 1;
                    } else {
                        self.counters.retransmits += 1;
                    }
                    seg.tx_count = seg.tx_count.saturating_add(1);
                    seg.sent_at = now;
                    seg.stamp = stamp;
                    seg.lost = false;
                    len = seg.buf.len() + seg.tail().len();
                }
                if peer.snd_una + len_u64(idx) == peer.snd_tx {
                    peer.snd_tx += 1;
                }
                (r, len)
            }
            Item::Ctl { peer: r, kind } => {
                if kind == Kind::Heartbeat {
                    self.counters.heartbeats_sent += 1;
                } else {
                    self.counters.acks_sent += 1;
                }
                (r, HEADER_LEN)
            }
        };
        let recv_window = self.cfg.recv_window;
        let peer = &mut self.peers[ix(r)];
        peer.last_tx = now;
        peer.ack_owed = false;
        peer.ack_now = false;
        peer.unacked_rx = 0;
        peer.last_edge = peer.credit_edge(recv_window);
        self.counters.tx_datagrams += 1;
        self.counters.tx_bytes += len_u64(len);
    }

    fn fail_peer(&mut self, r: Rank) {
        let cap = self.cfg.buffer_pool;
        let peer = &mut self.peers[ix(r)];
        peer.failed = true;
        peer.ack_owed = false;
        peer.ack_now = false;
        peer.partial = None;
        for seg in peer.segs.drain(..) {
            give_buf(&mut self.pool, cap, seg.buf);
        }
        for buf in peer.ooo.drain(..).flatten() {
            give_buf(&mut self.pool, cap, buf);
        }
        self.counters.peers_failed += 1;
    }

    /// The time by which [`Proto::poll_transmit`] must run again (a retransmission, a delayed
    /// ack, a heartbeat or a liveness deadline); a time at or before `now` means at once. `None`
    /// when there is no live peer. Arriving datagrams and new sends can make it earlier. At
    /// once while an ack deferred by [`Proto::on_datagram_direct`] waits ([`Proto::settle`] or
    /// `poll_transmit` applies it).
    pub fn next_timeout(&self) -> Option<u64> {
        if self.pending.is_some() {
            return Some(0);
        }
        let cfg = &self.cfg;
        let mut t = u64::MAX;
        for (p, peer) in self.peers.iter().enumerate() {
            if p == ix(self.me) || peer.failed {
                continue;
            }
            t = t.min(
                peer.last_heard
                    .saturating_add(cfg.peer_timeout)
                    .saturating_add(1),
            );
            t = t.min(peer.last_tx.saturating_add(cfg.heartbeat_interval));
            if peer.ack_now {
                return Some(0);
            }
            if peer.ack_owed {
                t = t.min(peer.ack_owed_since.saturating_add(cfg.delayed_ack));
            }
            let rto = peer.rto_eff(cfg);
            for seg in peer.segs.iter().take(peer.in_flight()) {
                if seg.lost && !seg.sacked {
                    return Some(0);
                }
                if !seg.sacked {
                    t = t.min(peer.rto_start(seg).saturating_add(rto));
                }
            }
            if peer.can_send_new(cfg.send_window) {
                return Some(0);
            }
        }
        (t != u64::MAX).then_some(t)
    }

    /// True when `rank` has been failed by the liveness check.
    pub fn is_failed(&self, rank: Rank) -> bool {
        self.peers.get(ix(rank)).is_some_and(|p| p.failed)
    }

    /// The failed ranks, in rank order.
    pub fn failed_peers(&self) -> impl Iterator<Item = Rank> + '_ {
        (0..self.nranks).filter(|&r| self.peers[ix(r)].failed)
    }

    /// DATA datagrams queued or in flight to all peers (zero once everything sent was acked).
    pub fn unacked(&self) -> usize {
        let settled = self.pending.map_or(0, |p| {
            to_usize(p.ack.saturating_sub(self.peers[ix(p.src)].snd_una))
        });
        self.peers
            .iter()
            .map(|p| p.segs.len())
            .sum::<usize>()
            .saturating_sub(settled)
    }

    /// The protocol state towards `rank` (`None` for an unknown rank).
    pub fn peer_status(&self, rank: Rank) -> Option<PeerStatus> {
        let p = self.peers.get(ix(rank))?;
        let in_flight = p.snd_tx - p.snd_una;
        Some(PeerStatus {
            failed: p.failed,
            srtt: p.srtt,
            rttvar: p.rttvar,
            rto: p.rto_eff(&self.cfg),
            backoff: p.backoff,
            in_flight,
            unsent: len_u64(p.segs.len()) - in_flight,
            send_credit: p.peer_edge.saturating_sub(p.snd_una),
            advertised: p.advertised(self.cfg.recv_window),
            credit_edge: p.credit_edge(self.cfg.recv_window),
            reorder_buffered: p.ooo.iter().filter(|s| s.is_some()).count(),
            undelivered: p.ready_dgrams,
            last_heard: p.last_heard,
        })
    }
}

#[cfg(test)]
mod tests;
