//! Timers and the round-trip estimate: the retransmission timeout of a peer (Jacobson/Karels
//! from RTT samples, clamped, with exponential backoff), when a datagram's timeout starts, and
//! the delayed-ack timer. [`Proto::next_timeout`](super::Proto::next_timeout) gathers the
//! deadlines these set; the planner (`plan`) acts on those that have passed.

use super::send::Seg;
use super::{Peer, ProtoConfig};

/// The most doublings of the retransmission timeout.
pub(super) const MAX_BACKOFF: u32 = 16;

impl Peer {
    /// When the retransmission timeout of `seg` started: its transmission or the last
    /// advance of the cumulative ack, whichever is later.
    #[inline]
    pub(super) fn rto_start(&self, seg: &Seg) -> u64 {
        seg.sent_at.max(self.progress_at)
    }

    /// The retransmission timeout in force: `rto` doubled for each backoff step, at most
    /// `rto_max`.
    pub(super) fn rto_eff(&self, cfg: &ProtoConfig) -> u64 {
        self.rto
            .saturating_mul(1u64 << self.backoff.min(MAX_BACKOFF))
            .min(cfg.rto_max)
    }

    /// Takes in a round-trip sample of `r` µs: updates `srtt` and `rttvar`, sets
    /// `rto = srtt + 4 rttvar` within `rto_min..=rto_max`, and ends the backoff.
    pub(super) fn rtt_sample(&mut self, r: u64, cfg: &ProtoConfig) {
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

    /// Notes that an ack is owed; the delayed-ack timer runs from the first datagram that owes
    /// one.
    pub(super) fn owe_ack(&mut self, now: u64) {
        if !self.ack_owed {
            self.ack_owed = true;
            self.ack_owed_since = now;
        }
    }
}
