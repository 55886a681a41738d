//! Acks: the fields every datagram carries out (cumulative ack, selective-ack bitmap, window),
//! and those that come in: what they free, the RTT sample they give, the send credit they
//! grant, and the datagrams they show lost (three sent later have arrived: fast
//! retransmission). The ack of a message taken straight off the wire waits as a
//! [`PendingAck`] until [`Proto::settle`](super::Proto::settle).

use amnet_core::Rank;

use crate::wire::SACK_BITS;

use super::{give_buf, ix, to_usize, Peer, Proto, RxError};

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

impl Peer {
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

    /// Processes the ack fields of a datagram from `src`.
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
}
