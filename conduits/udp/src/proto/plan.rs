//! Transmit planning: what goes out next. Per peer, round-robin from a rotating start: datagrams
//! whose retransmission timeout expired or that acks showed lost, then new DATA as far as the
//! credits allow (the peer's credit edge, within the send window of the oldest unacked
//! datagram), then an ACK or a HEARTBEAT when one is due; a peer silent past the peer timeout
//! is failed instead. Also the windows themselves (the send edge, and the window and credit
//! edge this rank advertises) and the bookkeeping of each datagram that went out.

use amnet_core::Rank;

use crate::wire::{self, Header, Kind, Packet, HEADER_LEN};

use super::{give_buf, ix, len_u64, to_usize, Datagram, Peer, Proto, BATCH};

/// A datagram chosen by the planner: a DATA datagram (`Seg`), the same once more as part of its
/// first transmission (`Twin`, right after its `Seg`; see [`Peer::twins`]), or an ACK or a
/// HEARTBEAT (`Ctl`).
#[derive(Debug, Clone, Copy)]
pub(super) enum Item {
    Seg { peer: Rank, idx: usize },
    Twin { peer: Rank, idx: usize },
    Ctl { peer: Rank, kind: Kind },
}

impl Peer {
    /// The end of what may be transmitted: the peer's credit edge, within `send_window` of the
    /// oldest unacked datagram.
    #[inline]
    pub(super) fn send_edge(&self, send_window: u32) -> u64 {
        self.peer_edge
            .min(self.snd_una.saturating_add(u64::from(send_window)))
    }

    /// True when a queued datagram that was never transmitted may go now.
    #[inline]
    pub(super) fn can_send_new(&self, send_window: u32) -> bool {
        self.snd_tx < self.snd_una + len_u64(self.segs.len())
            && self.snd_tx < self.send_edge(send_window)
    }

    /// The credit edge this rank grants the peer: `rcv_next` plus the advertised window.
    #[inline]
    pub(super) fn credit_edge(&self, recv_window: u32) -> u64 {
        self.rcv_next + u64::from(self.advertised(recv_window))
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
    pub(super) fn advertised(&self, recv_window: u32) -> u32 {
        match &self.partial {
            None => recv_window.saturating_sub(self.ready_dgrams),
            Some(p) => {
                let held = self.ready_dgrams.saturating_add(p.next_index);
                let lacking = p.count.saturating_sub(p.next_index).min(recv_window);
                recv_window.saturating_sub(held).max(lacking)
            }
        }
    }

    /// True when each new DATA datagram goes out twice in a row: while the path has no RTT
    /// sample and its timer has expired. Only a datagram acked on its first transmission gives
    /// a sample, and until one does the timeout stays backed off (RFC 6298), so that a lossy
    /// start makes every exchange wait long; two copies sent together make a first-transmission
    /// ack likelier (either copy, and either ack, will do), and an ack of either is no less
    /// clear than that of one.
    #[inline]
    pub(super) fn twins(&self) -> bool {
        self.srtt.is_none() && self.backoff > 0
    }
}

impl Proto {
    /// The datagram the planner chose as `item`, as it lies in the peer's state.
    pub(super) fn datagram(&self, item: Item) -> Datagram<'_> {
        match item {
            Item::Seg { peer, idx } | Item::Twin { peer, idx } => {
                match self.peers[ix(peer)].segs.get(idx) {
                    Some(s) => Datagram {
                        dest: peer,
                        bytes: &s.buf,
                        tail: s.tail(),
                    },
                    None => Datagram::whole(peer, &[]),
                }
            }
            Item::Ctl { peer, .. } => Datagram::whole(peer, &self.peers[ix(peer)].ctl),
        }
    }

    /// Chooses up to [`BATCH`] datagrams, visiting peers round-robin from a rotating start.
    pub(super) fn plan_batch(&mut self, now: u64, items: &mut Vec<Item>) {
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

    /// Adds what is due to `r` at `now` to `items` (up to [`BATCH`] in all), or fails `r` when it
    /// has been silent past the peer timeout.
    fn plan_peer(&mut self, r: Rank, now: u64, items: &mut Vec<Item>) {
        let cfg = &self.cfg;
        let peer = &mut self.peers[ix(r)];
        if now.saturating_sub(peer.last_heard) > cfg.peer_timeout {
            self.fail_peer(r);
            return;
        }
        let in_flight = peer.in_flight();
        if in_flight > 0 {
            self.counters.fast_retransmits += peer.detect_losses(now, cfg);
            if peer.timer_expired(now, cfg) {
                self.counters.timeouts += 1;
            }
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
        let twins = peer.twins();
        while seq < end && seq < edge && items.len() < BATCH {
            let idx = to_usize(seq - peer.snd_una);
            if let Some(seg) = peer.segs.get_mut(idx) {
                let _ = wire::patch_ack(&mut seg.buf, ack, sack, window);
            }
            items.push(Item::Seg { peer: r, idx });
            if twins && items.len() < BATCH {
                items.push(Item::Twin { peer: r, idx });
            }
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
    pub(super) fn commit(&mut self, now: u64, item: Item) {
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
                peer.last_data_tx = now;
                (r, len)
            }
            Item::Twin { peer: r, idx } => {
                let len = self.peers[ix(r)]
                    .segs
                    .get(idx)
                    .map_or(0, |seg| seg.buf.len() + seg.tail().len());
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

    /// Fails `r` for good: acks owed to it are forgotten, and its queues, reorder buffer and
    /// message in reassembly are dropped (their buffers go back to the pool).
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
}
