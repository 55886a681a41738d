//! What the protocol reports about itself: event counts ([`Counters`]) and a snapshot of the
//! state towards one peer ([`PeerStatus`]).

/// Event counts since creation. The counts every round trip moves share the first cache line.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[repr(C)]
pub struct Counters {
    /// Datagrams handed to the transmit callback and accepted by it.
    pub tx_datagrams: u64,
    /// Their bytes.
    pub tx_bytes: u64,
    /// Datagrams given to [`Proto::on_datagram`].
    ///
    /// [`Proto::on_datagram`]: super::Proto::on_datagram
    pub rx_datagrams: u64,
    /// Their bytes.
    pub rx_bytes: u64,
    /// DATA datagrams transmitted for the first time.
    pub data_sent: u64,
    /// Messages accepted by [`Proto::send`].
    ///
    /// [`Proto::send`]: super::Proto::send
    pub messages_sent: u64,
    /// Messages completed and queued for delivery.
    pub messages_received: u64,
    /// Peers failed by the liveness check.
    pub peers_failed: u64,
    /// DATA datagrams transmitted again.
    pub retransmits: u64,
    /// Datagrams deemed lost from acks of datagrams transmitted after them (before any
    /// timeout).
    pub fast_retransmits: u64,
    /// Retransmission timer expiries, each sending a probe and, unless the path has been
    /// sampled and the peer keeps talking, lengthening that peer's timeout.
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
    ///
    /// [`RxError::Protocol`]: super::RxError::Protocol
    pub protocol_errors: u64,
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
    /// Backoff steps applied to the timeout: since the last RTT sample, or, once the path has
    /// been sampled, since an ack last acknowledged anything new. Each doubles the timeout
    /// before the first sample and adds half to it after.
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
