//! Acks: the fields every datagram carries out (cumulative ack, selective-ack bitmap, window),
//! and those that come in: what they free, the RTT sample they give, the send credit they
//! grant, the backoff they end, and the datagrams they show lost (three sent later have
//! arrived, or one has and the reordering allowance has passed: fast retransmission). The ack
//! of a message taken straight off the wire waits as a [`PendingAck`] until
//! [`Proto::settle`](super::Proto::settle).

use amnet_core::Rank;

use crate::wire::SACK_BITS;

use super::send::Seg;
use super::{give_buf, ix, to_usize, Peer, Proto, ProtoConfig, RxError};

/// Datagrams acked after a datagram that make it count as lost.
pub(super) const DUP_THRESH: usize = 3;

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
pub(super) struct PendingAck {
    pub(super) src: Rank,
    pub(super) now: u64,
    pub(super) ack: u64,
    pub(super) sack: u64,
    pub(super) window: u32,
}

/// The newest datagram an ack acknowledges for the first time: its transmission stamp, the time
/// of its last transmission, and whether that was its only one.
#[derive(Clone, Copy)]
struct Newest {
    stamp: u64,
    sent_at: u64,
    once: bool,
}

/// What the datagrams an ack acknowledges for the first time tell: the newest of them, which
/// alone may give an RTT sample, and one past the largest transmission stamp known to have
/// arrived.
#[derive(Default)]
struct Newly {
    newest: Option<Newest>,
    acked_stamp: u64,
}

impl Newly {
    /// Takes note of `seg`, acked (cumulatively or selectively) at `now` for the first time.
    ///
    /// The sample comes from the newest datagram the ack acknowledges, and only from that one:
    /// older ones may have arrived long ago with their acks lost, so that only the answer to a
    /// later transmission acknowledges them. A datagram transmitted once gives its RTT; a
    /// retransmitted one is ambiguous and gives none (Karn). Its stamp is that of its last
    /// transmission, unless the ack came sooner after it than any round trip seen (`min_rtt`):
    /// then it acknowledges an earlier transmission, whose stamp is gone.
    fn add(&mut self, seg: &Seg, now: u64, min_rtt: Option<u64>) {
        if self.newest.is_none_or(|n| seg.stamp > n.stamp) {
            self.newest = Some(Newest {
                stamp: seg.stamp,
                sent_at: seg.sent_at,
                once: seg.tx_count == 1,
            });
        }
        let early = min_rtt.is_some_and(|m| now.saturating_sub(seg.sent_at) < m);
        if seg.tx_count == 1 || !early {
            self.acked_stamp = self.acked_stamp.max(seg.stamp.saturating_add(1));
        }
    }
}

impl Peer {
    /// Marks lost each datagram in flight, not acked, that was transmitted before one that has
    /// been acked and has been out for the reordering allowance ([`Peer::reorder_window`]);
    /// returns how many it marked. One later datagram acked is enough here, where the count of
    /// three (in `on_ack`) needs three: so a hole near the end of a burst, a lost
    /// retransmission followed by a message or two, and whatever a probe's answer shows
    /// missing go at once, without waiting for the timer.
    pub(super) fn detect_losses(&mut self, now: u64, cfg: &ProtoConfig) -> u64 {
        let acked = self.acked_stamp;
        let in_flight = self.in_flight();
        if acked == 0 || in_flight == 0 {
            return 0;
        }
        let window = self.reorder_window(cfg);
        let mut n = 0;
        for seg in self.segs.iter_mut().take(in_flight) {
            if !seg.sacked
                && !seg.lost
                && seg.stamp < acked
                && now.saturating_sub(seg.sent_at) >= window
            {
                seg.lost = true;
                n += 1;
            }
        }
        n
    }

    /// Cumulative ack, selective-ack bitmap and window, as of now.
    pub(super) fn ack_fields(&self, recv_window: u32) -> (u64, u64, u32) {
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
}

impl Proto {
    /// Whether a cumulative `ack` from `src` moves or confirms its send edge (false: an older
    /// ack, overtaken, with nothing new in it); an ack of data never sent is a protocol error.
    pub(super) fn ack_is_news(&mut self, src: Rank, ack: u64) -> Result<bool, RxError> {
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

    /// Processes the ack fields of a datagram from `src`: frees what they acknowledge, takes
    /// an RTT sample where one is unambiguous, restarts the retransmission timer on news (and,
    /// once the path has been sampled, ends the backoff), and marks lost what was transmitted
    /// before datagrams that have now been acked.
    pub(super) fn on_ack(
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
        let min_rtt = peer.min_rtt();
        let mut top = Top3::default();
        let mut newly = Newly::default();
        for _ in peer.snd_una..ack {
            let Some(seg) = peer.segs.pop_front() else {
                break;
            };
            if !seg.sacked {
                newly.add(&seg, now, min_rtt);
            }
            top.push(seg.stamp);
            give_buf(pool, cfg.buffer_pool, seg.buf);
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
                    newly.add(seg, now, min_rtt);
                }
            }
        }
        for seg in peer.segs.iter().take(in_flight) {
            if seg.sacked {
                top.push(seg.stamp);
            }
        }
        if let Some(newest) = newly.newest {
            if newest.once {
                peer.rtt_sample(now.saturating_sub(newest.sent_at).max(1), cfg);
            } else if peer.srtt.is_some() {
                // The path has been sampled and delivers: what the timer backed off for was
                // loss, not a round trip longer than sampled.
                peer.backoff = 0;
            }
            peer.acked_stamp = peer.acked_stamp.max(newly.acked_stamp);
            peer.progress_at = now;
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
        self.counters.fast_retransmits += peer.detect_losses(now, cfg);
        Ok(())
    }
}
