//! Timers and the round-trip estimate: RTT samples (smoothed RTT and variation, the latest and
//! the least sample), the retransmission timeout of a peer and its backoff, when that timer
//! starts and the probe its expiry sends, the reordering allowance of time-based loss
//! detection, and the delayed-ack timer.
//! [`Proto::next_timeout`](super::Proto::next_timeout) gathers the deadlines these set; the
//! planner (`plan`) acts on those that have passed.

use super::{Peer, ProtoConfig};

/// The most backoff steps of the retransmission timeout.
pub(super) const MAX_BACKOFF: u32 = 32;

impl Peer {
    /// When the retransmission timer started: the last transmission of DATA to this peer or
    /// the last ack from it that acknowledged something new, whichever is later.
    #[inline]
    pub(super) fn timer_start(&self) -> u64 {
        self.last_data_tx.max(self.progress_at)
    }

    /// The retransmission timeout before backoff. Without an RTT sample, `rto` (at first
    /// `rto_initial`). With one, the probe timeout: twice the smoothed RTT plus the delayed-ack
    /// allowance, or `rto` (`srtt + 4 rttvar`) when that is shorter, and never below `rto_min`.
    /// Twice the mean rather than the variation-padded `rto` alone: a sample taken from an ack
    /// that reached us late (the datagram that carried it was lost, and the peer's
    /// retransmission brought it) swells the variation by far more than the mean, and under
    /// heavy loss such samples are common.
    pub(super) fn rto_base(&self, cfg: &ProtoConfig) -> u64 {
        let Some(srtt) = self.srtt else {
            return self.rto;
        };
        let probe = srtt.saturating_mul(2).saturating_add(cfg.delayed_ack);
        self.rto.min(probe).clamp(cfg.rto_min, cfg.rto_max)
    }

    /// The retransmission timeout in force: [`Peer::rto_base`] lengthened by each backoff step,
    /// at most `rto_max`. Before the first RTT sample each step doubles it (RFC 6298: the
    /// timer may simply be shorter than the round trip); once the path has been sampled each
    /// step adds half, so that a run of losses, each as likely as not at 30 to 50% loss both
    /// ways, does not stretch the wait faster than it grows less likely.
    pub(super) fn rto_eff(&self, cfg: &ProtoConfig) -> u64 {
        let base = self.rto_base(cfg);
        let steps = self.backoff.min(MAX_BACKOFF);
        if self.srtt.is_none() {
            return base.saturating_mul(1u64 << steps).min(cfg.rto_max);
        }
        let mut t = base;
        for _ in 0..steps {
            if t >= cfg.rto_max {
                break;
            }
            t = t.saturating_add(t / 2);
        }
        t.min(cfg.rto_max)
    }

    /// How long a datagram transmitted before one that has been acked may still be on its way
    /// (reordered) rather than lost: 5/4 of the larger of the smoothed and the latest RTT, and
    /// at least a quarter of `rto_min`.
    pub(super) fn reorder_window(&self, cfg: &ProtoConfig) -> u64 {
        let rtt = self.srtt.unwrap_or(0).max(self.latest_rtt);
        rtt.saturating_add(rtt / 4).max(cfg.rto_min / 4)
    }

    /// The least RTT sampled, once there is one.
    #[inline]
    pub(super) fn min_rtt(&self) -> Option<u64> {
        self.srtt.map(|_| self.min_rtt)
    }

    /// Takes in a round-trip sample of `r` µs: updates `srtt` and `rttvar`, the latest and the
    /// least sample, sets `rto = srtt + 4 rttvar` within `rto_min..=rto_max`, and ends the
    /// backoff.
    pub(super) fn rtt_sample(&mut self, r: u64, cfg: &ProtoConfig) {
        let srtt = match self.srtt {
            None => {
                self.rttvar = r / 2;
                self.min_rtt = r;
                r
            }
            Some(s) => {
                self.rttvar = self.rttvar.saturating_mul(3).saturating_add(s.abs_diff(r)) / 4;
                self.min_rtt = self.min_rtt.min(r);
                s.saturating_mul(7).saturating_add(r) / 8
            }
        };
        self.srtt = Some(srtt);
        self.latest_rtt = r;
        self.rto = srtt
            .saturating_add(self.rttvar.saturating_mul(4).max(1))
            .clamp(cfg.rto_min, cfg.rto_max);
        self.backoff = 0;
    }

    /// The retransmission timer: when it has expired at `now` (DATA in flight and not acked,
    /// none of it marked lost, nothing new acked and nothing transmitted for [`Peer::rto_eff`]),
    /// marks the oldest and the newest of the datagrams in flight and not acked for
    /// retransmission (a probe: the peer's answer to it acks or shows lost the rest) and
    /// returns true.
    ///
    /// Each expiry takes a backoff step ([`Peer::rto_eff`]), kept until an RTT sample, or,
    /// once the path has been sampled, until an ack acknowledges anything new. Once sampled,
    /// an expiry after the peer has been heard from since it should have had the last DATA
    /// (one least RTT after the timer started) takes none: a peer that keeps talking is
    /// reachable, and what it does not acknowledge was lost, not slow. Silence backs off.
    pub(super) fn timer_expired(&mut self, now: u64, cfg: &ProtoConfig) -> bool {
        let start = self.timer_start();
        if now < start.saturating_add(self.rto_eff(cfg)) {
            return false;
        }
        let mut oldest = None;
        let mut newest = None;
        for (i, seg) in self.segs.iter().enumerate().take(self.in_flight()) {
            if seg.sacked {
                continue;
            }
            if seg.lost {
                return false;
            }
            oldest.get_or_insert(i);
            newest = Some(i);
        }
        let (Some(oldest), Some(newest)) = (oldest, newest) else {
            return false;
        };
        let heard = self
            .min_rtt()
            .is_some_and(|m| self.last_heard >= start.saturating_add(m));
        if !heard {
            self.backoff = (self.backoff + 1).min(MAX_BACKOFF);
        }
        for i in [oldest, newest] {
            if let Some(seg) = self.segs.get_mut(i) {
                seg.lost = true;
            }
        }
        true
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
