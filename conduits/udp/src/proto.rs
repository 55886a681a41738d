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
//! at most [`ProtoConfig::mtu`] bytes, each carrying one fragment; the first also carries the AM
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
//! [`ProtoConfig::delayed_ack`] has passed since the ack became owed, or at once after an
//! out-of-order datagram, a duplicate, a gap being filled, [`ProtoConfig::ack_every`] unacked
//! datagrams, or a reopened window.
//!
//! **Credits.** The window a receiver advertises is [`ProtoConfig::recv_window`] datagrams from
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
//! **Retransmission timer.** Each peer has one, running while DATA is in flight and not acked,
//! from the later of the last DATA transmission to the peer and the last ack that
//! acknowledged anything new, cumulatively or selectively. (It restarts on progress, as TCP's
//! does: a window of large datagrams takes longer to drain at the receiver than the round trip
//! of a small message, and while acks keep coming nothing is lost. Counted from transmission
//! alone, a 4 MiB window on loopback outlived the 1 ms floor of the timeout and was sent
//! twice.) Before the first RTT sample its length is `rto` (at first
//! [`ProtoConfig::rto_initial`]); after, it is the probe timeout: twice the smoothed RTT plus
//! [`ProtoConfig::delayed_ack`], or `rto = srtt + 4 rttvar` (Jacobson/Karels) when that is
//! shorter, never below [`ProtoConfig::rto_min`]. Twice the mean rather than the variation:
//! an ack that reached us late (the datagram carrying it was lost, and the peer's
//! retransmission brought it) gives a sample that swells the variation far more than the
//! mean, and under heavy loss such samples are common. When the timer expires it sends a
//! probe, the oldest and the newest datagram in flight and not acked: the oldest is what
//! holds up delivery, and the peer's answer to the newest acks the rest or shows it lost.
//!
//! **RTT samples** come only from a datagram acked on its first transmission (Karn's rule),
//! and only from the newest datagram an ack acknowledges for the first time: an older one
//! may have arrived long before, its ack lost, so that only the answer to a later
//! transmission acknowledges it.
//!
//! **Backoff.** Before the first sample each expiry doubles the timeout, and only a sample
//! ends the backoff (RFC 6298): without an estimate, an expiry may just mean that the timer is
//! shorter than the round trip, and the ack of a retransmission does not say which
//! transmission it answers. Meanwhile each new DATA datagram goes out twice in a row, one
//! transmission in two copies, which makes the first-transmission ack that ends this state
//! likelier. Once the path has been sampled, an expiry adds half to the timeout, and only if
//! the peer has been silent since it should have had the last DATA; any ack that acknowledges
//! anything new ends the backoff. Under 30% loss each way a datagram and its ack both get
//! through about half the time, so that a timeout doubled at each expiry and kept until a
//! sample grows faster than the losses that stretch it grow rare: it sat at its cap. A timer
//! that grows by half on silence alone keeps a run of losses cheap, while a peer that has
//! died or cannot be reached still gets fewer and fewer probes.
//!
//! **Loss detection from acks** (fast retransmission). A datagram in flight is deemed lost,
//! and retransmitted at once, when three datagrams transmitted after it have been acked and it
//! has been out for 5/4 of the smoothed RTT, or when one has been acked and it has been out
//! for the reordering allowance: 5/4 of the larger of the smoothed and the latest RTT, at
//! least a quarter of `rto_min` ([`Proto::next_timeout`] includes the end of that wait).
//! Transmissions are ordered by per-peer stamps, so a lost retransmission is found the same
//! way. An ack that comes sooner after a retransmission than any round trip sampled answers
//! an earlier transmission, and shows nothing about those sent in between.
//!
//! **Liveness.** A peer nothing was sent to for [`ProtoConfig::heartbeat_interval`] gets a
//! HEARTBEAT (which carries acks and the window like any datagram). A peer heard from by no
//! valid datagram for [`ProtoConfig::peer_timeout`] is failed for good: its queues are freed,
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
//! reassembled is at most [`ProtoConfig::max_message`] bytes (its buffer grows with the bytes that
//! actually arrive); undelivered complete messages exceed `recv_window` datagrams by at most
//! one message. A malformed or inconsistent datagram is dropped and counted, never trusted:
//! see [`Counters`].
//!
//! # Layout
//!
//! This file holds [`Proto`], its public API and its calling contract (above); the protocol's
//! parts sit in modules of their own under `proto/`:
//!
//! - `config`: [`ProtoConfig`] and its check; `error`: [`SendError`] and [`RxError`]; `stats`:
//!   [`Counters`] and [`PeerStatus`];
//! - `peer`: the state kept towards one peer, laid out for the round trip;
//! - `timer`: the round-trip estimate, the retransmission timeout, its backoff and the probe
//!   it sends, the reordering allowance, and the delayed-ack timer;
//! - `recv`: a datagram in: decoding and checks, sequencing, duplicates, the receive window
//!   and the reorder buffer;
//! - `ack`: acks both ways: the fields every datagram carries out, and what those that come
//!   in do (free what they acknowledge, give RTT samples, end the backoff, show datagrams
//!   lost), with the ack deferred for a message taken straight off the wire;
//! - `assembler`: in-order fragments to whole messages, Long payloads through the
//!   [`LongSink`], the delivery queue;
//! - `send`: messages cut into queued datagrams, payloads held in the sender's memory, and the
//!   direct path of [`Proto::send_now`];
//! - `plan`: what goes out next ([`Proto::poll_transmit`]): credits and windows,
//!   retransmissions, new DATA (twice while the timer backs off unsampled), ACKs and
//!   HEARTBEATs, failing silent peers, and the bookkeeping of each datagram that went out;
//! - `tests`: unit tests (the simulated network is in `tests/sim.rs`).

use std::collections::VecDeque;

use amnet_core::{OutMsg, Rank};

use crate::wire::{AmHeader, MAX_DATAGRAM};

mod ack;
mod assembler;
mod config;
mod error;
mod peer;
mod plan;
mod recv;
mod send;
mod stats;
mod timer;

pub use assembler::LongSink;
pub use config::{ProtoConfig, ProtoConfigError, MAX_RECV_WINDOW, MIN_MTU};
pub use error::{RxError, SendError};
pub use send::{Datagram, Sent};
pub use stats::{Counters, PeerStatus};

use ack::{PendingAck, DUP_THRESH};
use peer::Peer;
use plan::Item;
use recv::Take;

/// The most datagrams [`Proto::poll_transmit`] hands to its callback at once.
pub const BATCH: usize = 64;

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

/// The index of rank `r` in the per-rank tables.
fn ix(r: Rank) -> usize {
    r as usize
}

/// `x` as a `usize`, saturating.
fn to_usize(x: u64) -> usize {
    usize::try_from(x).unwrap_or(usize::MAX)
}

/// `n` as a `u64`, saturating.
fn len_u64(n: usize) -> u64 {
    u64::try_from(n).unwrap_or(u64::MAX)
}

/// A spare buffer from `pool`, or a new empty one.
fn take_buf(pool: &mut Vec<Vec<u8>>) -> Vec<u8> {
    pool.pop().unwrap_or_default()
}

/// Keeps `b` in `pool` for reuse, emptied, unless the pool holds `cap` buffers already or `b`
/// has no capacity or more than any datagram needs.
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
    cfg: ProtoConfig,
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
        cfg: ProtoConfig,
        me: Rank,
        nranks: u32,
        job_key: u64,
        now: u64,
    ) -> Result<Self, ProtoConfigError> {
        cfg.validate()?;
        if me >= nranks {
            return Err(ProtoConfigError {
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
    pub fn config(&self) -> &ProtoConfig {
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

    /// True while a datagram to `dest` not yet acknowledged still refers to a chunk of
    /// `payload` where it lies (a hold of [`Proto::send_held`] or [`Proto::send_now_held`]).
    pub fn held_pending(&mut self, dest: Rank, payload: &[u8]) -> bool {
        self.settle();
        let Some(peer) = self.peers.get(ix(dest)) else {
            return false;
        };
        let range = payload.as_ptr_range();
        peer.segs.iter().any(|seg| {
            seg.held
                .is_some_and(|h| range.contains(&h.ptr.as_ptr().cast_const()))
        })
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
            let in_flight = peer.in_flight();
            if in_flight > 0 {
                let window = peer.reorder_window(cfg);
                let mut waiting = false;
                for seg in peer.segs.iter().take(in_flight) {
                    if seg.sacked {
                        continue;
                    }
                    if seg.lost {
                        return Some(0);
                    }
                    waiting = true;
                    if seg.stamp < peer.acked_stamp {
                        t = t.min(seg.sent_at.saturating_add(window));
                    }
                }
                if waiting {
                    t = t.min(peer.timer_start().saturating_add(peer.rto_eff(cfg)));
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
