//! The state kept towards one peer ([`Peer`]): both directions' sequence numbers and queues,
//! the reorder buffer and the message in reassembly, the round-trip estimate, liveness and
//! the owed ack, laid out so that a round trip touches as few cache lines as it can. Its
//! methods live with what they serve: the windows in `plan`, the timers in `timer`, the ack
//! fields in `ack`.

use std::collections::VecDeque;

use crate::wire::HEADER_LEN;

use super::assembler::Partial;
use super::send::Seg;
use super::{to_usize, ProtoConfig};

/// Per-peer state. The fields a round trip touches come first, packed into four cache lines
/// from a line boundary; the control datagram's buffer, used only for ACKs and HEARTBEATs,
/// comes last, and a message in reassembly lives out of line.
#[derive(Debug)]
#[repr(C, align(64))]
pub(super) struct Peer {
    // Send side.
    /// Oldest unacked sequence number.
    pub(super) snd_una: u64,
    /// Next sequence number to transmit for the first time.
    pub(super) snd_tx: u64,
    /// The peer's credit limit: sequence numbers below are accepted.
    pub(super) peer_edge: u64,
    /// Next message id.
    pub(super) msg_next: u64,
    /// Next transmission stamp.
    pub(super) next_stamp: u64,
    /// When an ack last acknowledged something new, cumulatively or selectively (or the peer
    /// was set up): the retransmission timer runs from no earlier.
    pub(super) progress_at: u64,
    /// When DATA was last transmitted to this peer: the retransmission timer runs from no
    /// earlier.
    pub(super) last_data_tx: u64,
    /// One past the largest transmission stamp known to have been acked (0: none): datagrams
    /// transmitted before it and not acked are candidates for loss.
    pub(super) acked_stamp: u64,
    // Receive side.
    /// Lowest sequence number not yet received.
    pub(super) rcv_next: u64,
    pub(super) rcv_msg_next: u64,
    /// The credit edge (ack + window) in the last datagram sent to this peer.
    pub(super) last_edge: u64,
    /// Queued datagrams from `snd_una` on: `[snd_una, snd_tx)` transmitted, the rest not yet.
    pub(super) segs: VecDeque<Seg>,
    /// Out-of-order datagrams: index i holds sequence number `rcv_next + i` (index 0 is always
    /// empty).
    pub(super) ooo: VecDeque<Option<Vec<u8>>>,
    pub(super) ack_owed_since: u64,
    // Liveness.
    pub(super) last_heard: u64,
    pub(super) last_tx: u64,
    // Round-trip estimate.
    pub(super) rttvar: u64,
    pub(super) rto: u64,
    pub(super) srtt: Option<u64>,
    /// The latest RTT sample and the least (meaningful once `srtt` is set).
    pub(super) latest_rtt: u64,
    pub(super) min_rtt: u64,
    pub(super) backoff: u32,
    /// Datagrams of complete messages from this peer not yet taken (for self: messages).
    pub(super) ready_dgrams: u32,
    pub(super) unacked_rx: u32,
    pub(super) ack_owed: bool,
    pub(super) ack_now: bool,
    pub(super) failed: bool,
    pub(super) partial: Option<Box<Partial>>,
    /// The ACK/HEARTBEAT datagram being sent.
    pub(super) ctl: [u8; HEADER_LEN],
}

impl Peer {
    /// The state towards a peer at time `now`: nothing sent or received yet, the initial
    /// retransmission timeout, and a whole receive window granted each way.
    pub(super) fn new(cfg: &ProtoConfig, now: u64) -> Self {
        Peer {
            segs: VecDeque::new(),
            snd_una: 0,
            snd_tx: 0,
            peer_edge: u64::from(cfg.recv_window),
            msg_next: 0,
            next_stamp: 0,
            progress_at: now,
            last_data_tx: now,
            acked_stamp: 0,
            srtt: None,
            rttvar: 0,
            latest_rtt: 0,
            min_rtt: 0,
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

    /// DATA datagrams transmitted and not cumulatively acked.
    pub(super) fn in_flight(&self) -> usize {
        to_usize(self.snd_tx - self.snd_una)
    }
}
