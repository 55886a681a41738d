//! Split-phase barriers with named/anonymous ids and mismatch detection.
//!
//! The reference barrier is a dissemination barrier over Short AMs: in round `r` rank `i` sends
//! its accumulated value to `i + 2^r` and waits for the one from `i - 2^r`. After
//! `ceil(log2 N)` rounds every rank has merged the values of all ranks, so every rank reaches
//! the same verdict on ids. A value is "anonymous", "named id (by rank)" or "mismatch": two
//! different named ids merge into a mismatch that remembers both ranks.
//!
//! A peer can be at most one barrier ahead (it cannot finish barrier `e+1` before this rank
//! notified it), so arrivals are kept by barrier parity.
//!
//! Where every rank shares this host (the conduit maps every rank's host scratch) the barrier
//! sends no message: each rank stores its value and the barrier's number into a line of its
//! own and waits until every rank's line holds the number (`shmbar`), then merges the values
//! in rank order. In a job over several hosts where some host's ranks share memory (the
//! host-local bypass), the barrier is hierarchical: each such host's ranks arrive on those
//! flags, its lowest rank (the leader) runs the dissemination with the other hosts' leaders
//! (and with the ranks of hosts that share no memory), and then releases its host through a
//! flag of its own. `AMNET_BARRIER=am` keeps the messages everywhere.

use std::sync::atomic::Ordering;

use crate::conduit::{Category, OutMsg};
use crate::endpoint::{not_in_handler, Endpoint};
use crate::handler::{HandlerTable, Token};
use crate::shmbar::ShmBarrier;
use crate::stats::Ctr;
use crate::Rank;
use crate::{Error, Result};

use crate::handlers::BARRIER as LIB_BARRIER;

/// Barrier flags.
pub mod flags {
    /// The barrier matches any id (the id argument is ignored).
    pub const ANONYMOUS: u32 = 1;
    /// Force a mismatch on every rank (a client detected an inconsistency).
    pub const MISMATCH: u32 = 2;
}

const MAX_ROUNDS: usize = 32;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Val {
    Anon,
    Named { id: u32, rank: u32 },
    Differ { a: (u32, u32), b: (u32, u32) },
    Flagged { rank: u32 },
}

impl Val {
    fn merge(self, o: Val) -> Val {
        use Val::*;
        match (self, o) {
            (Flagged { .. }, _) | (Differ { .. }, _) => self,
            (_, Flagged { .. }) | (_, Differ { .. }) => o,
            (Anon, x) | (x, Anon) => x,
            (Named { id: a, rank: ra }, Named { id: b, rank: rb }) => {
                if a == b {
                    Named {
                        id: a,
                        rank: ra.min(rb),
                    }
                } else {
                    Differ {
                        a: (ra, a),
                        b: (rb, b),
                    }
                }
            }
        }
    }

    fn encode(self) -> [u32; 5] {
        match self {
            Val::Anon => [0, 0, 0, 0, 0],
            Val::Named { id, rank } => [1, id, rank, 0, 0],
            Val::Differ { a, b } => [2, a.0, a.1, b.0, b.1],
            Val::Flagged { rank } => [3, rank, 0, 0, 0],
        }
    }

    fn decode(a: &[u32]) -> Val {
        match a {
            [1, id, rank, ..] => Val::Named {
                id: *id,
                rank: *rank,
            },
            [2, ra, ia, rb, ib] => Val::Differ {
                a: (*ra, *ia),
                b: (*rb, *ib),
            },
            [3, rank, ..] => Val::Flagged { rank: *rank },
            _ => Val::Anon,
        }
    }
}

#[derive(Debug)]
enum Phase {
    Idle,
    Notified {
        id: u32,
        flags: u32,
        value: Val,
        round: usize,
        sent: bool,
        /// Hierarchical: this rank's host has arrived and `value` merges its ranks' values
        /// (true from the start on the other algorithms and for a rank alone on its host).
        local: bool,
    },
}

/// How the endpoint barrier runs in this job, chosen at the first barrier (the same on every
/// rank: it follows from the host map and `AMNET_BARRIER`).
pub(crate) enum Mode {
    /// Dissemination over Short AMs among all ranks.
    Am,
    /// Flags in the host scratch: every rank shares this host.
    Flags(ShmBarrier),
    /// Flags within each host whose ranks share memory, dissemination among their leaders.
    Hier(Hier),
}

/// This rank's part in the hierarchical barrier.
pub(crate) struct Hier {
    /// The flags of this rank's host (`None`: a rank alone in its group).
    local: Option<ShmBarrier>,
    /// Whether this rank leads its group (the group's lowest rank; a rank alone leads).
    lead: bool,
    /// Every group's leader, ascending: the ranks of the dissemination.
    leaders: Vec<Rank>,
    /// This rank's index in `leaders` (leaders only).
    index: usize,
}

/// Checks of the flags without the spin-loop hint before a wait on them starts polling (with a
/// core per rank): a peer that arrives within a few hundred nanoseconds is seen at once.
const FLAG_CHECKS: u32 = 256;

/// Idle rounds in which the hierarchical barrier's wait on its host's flags yields its core
/// instead of backing off to sleeps (a few milliseconds on a busy host).
const FLAG_YIELDS: u32 = 4096;

/// On an oversubscribed host a wait on the flags polls the endpoint only every
/// `OVERSUBSCRIBED_POLL`-th round and yields the core at the others (the rank it waits for may
/// need this core; a conduit's poll can cost more than the flag's check).
const OVERSUBSCRIBED_POLL: u32 = 8;

/// Per-endpoint barrier state, behind a mutex (handlers record arrivals).
#[derive(Debug)]
pub(crate) struct BarrierState {
    phase: Phase,
    epoch: u32,
    /// Barriers completed (the flags' barrier number).
    count: u64,
    /// The verdict of the last client barrier that completed: `None` when every rank notified
    /// anonymously, else the named id they matched on (`None` after a mismatch).
    last: Option<u32>,
    arrived: [[Option<Val>; MAX_ROUNDS]; 2],
}

impl BarrierState {
    pub(crate) fn new() -> Self {
        BarrierState {
            phase: Phase::Idle,
            epoch: 0,
            count: 0,
            last: None,
            arrived: [[None; MAX_ROUNDS]; 2],
        }
    }
}

pub(crate) fn register_handlers(t: &mut HandlerTable) -> Result<()> {
    t.insert(LIB_BARRIER, Box::new(barrier_handler))
}

fn barrier_handler(tok: &mut Token<'_>, args: &[u32], _payload: &[u8]) {
    let [epoch, round, ref val @ ..] = *args else {
        return;
    };
    let v = Val::decode(val);
    let mut st = tok.endpoint().barrier_lock();
    let slot = &mut st.arrived[(epoch & 1) as usize][(round as usize) % MAX_ROUNDS];
    *slot = Some(slot.map_or(v, |old| old.merge(v)));
}

fn rounds(size: u32) -> usize {
    let mut r = 0;
    while (1u64 << r) < u64::from(size) {
        r += 1;
    }
    r
}

impl Endpoint {
    pub(crate) fn barrier_is_pending(&self) -> bool {
        self.inner.barrier_busy.load(Ordering::Acquire)
    }

    pub(crate) fn barrier_lock(&self) -> std::sync::MutexGuard<'_, BarrierState> {
        self.inner.barrier.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The barrier's flags, where every rank shares this host and `AMNET_BARRIER` is not
    /// `am` (the same answer on every rank: each maps every rank's scratch, or none does).
    fn shm_barrier(&self) -> Option<&ShmBarrier> {
        match self.barrier_mode() {
            Mode::Flags(b) => Some(b),
            _ => None,
        }
    }

    /// The barrier's algorithm (spec/core.md §8), chosen at the first barrier.
    fn barrier_mode(&self) -> &Mode {
        self.inner.barrier_mode.get_or_init(|| {
            if !self.inner.cfg.barrier_flags {
                return Mode::Am;
            }
            let conduit = &self.inner.conduit;
            if let Some(b) = ShmBarrier::new(self.size(), self.rank(), |r| conduit.host_scratch(r))
            {
                return Mode::Flags(b);
            }
            self.hier_barrier().map_or(Mode::Am, Mode::Hier)
        })
    }

    /// The groups of the hierarchical barrier: the ranks of each host that shares memory
    /// (`HostMap::shares_memory`, the same on every rank), every other rank alone. `None`
    /// where every group is one rank.
    fn hier_barrier(&self) -> Option<Hier> {
        let map = self.host_map().ok()?;
        let me = self.rank();
        let mut leaders = Vec::new();
        let mut mine = None;
        for h in 0..map.hosts() {
            let ranks = map.ranks_on(h).ok()?;
            if ranks.len() > 1 && map.shares_memory(h).ok()? {
                leaders.push(ranks[0]);
                if let Some(i) = ranks.iter().position(|&r| r == me) {
                    mine = Some((ranks, i));
                }
            } else {
                leaders.extend_from_slice(ranks);
            }
        }
        if leaders.len() == self.size() as usize {
            return None;
        }
        leaders.sort_unstable();
        let conduit = &self.inner.conduit;
        let local = match mine {
            // The host shares memory: every rank of it maps the others' scratch, so the
            // flags exist on every rank of it or (a conduit breaking that promise) on none,
            // and the job then keeps the messages everywhere.
            Some((ranks, i)) => Some(ShmBarrier::of(ranks, i, |r| conduit.host_scratch(r))?),
            None => None,
        };
        let lead = mine.is_none_or(|(_, i)| i == 0);
        let index = leaders.iter().position(|&r| r == me).unwrap_or(0);
        Some(Hier {
            local,
            lead,
            leaders,
            index,
        })
    }

    /// Start a barrier. `flags` may hold [`flags::ANONYMOUS`] (id ignored) and
    /// [`flags::MISMATCH`]. Must be followed by `barrier_wait` or a successful `barrier_try`.
    pub fn barrier_notify(&self, id: u32, flags: u32) -> Result<()> {
        self.attached_for("barrier_notify")?;
        not_in_handler("barrier_notify")?;
        if let Some(why) = self.inner.layer.barrier_objection() {
            return Err(Error::Usage {
                op: "barrier_notify",
                detail: why,
            });
        }
        let rank = self.rank();
        {
            let mut st = self.barrier_lock();
            if !matches!(st.phase, Phase::Idle) {
                return Err(Error::BarrierState(
                    "barrier_notify called twice without barrier_wait or a successful barrier_try",
                ));
            }
            let value = if flags & flags::MISMATCH != 0 {
                Val::Flagged { rank }
            } else if flags & flags::ANONYMOUS != 0 {
                Val::Anon
            } else {
                Val::Named { id, rank }
            };
            let mut local = true;
            match self.barrier_mode() {
                Mode::Flags(b) => b.arrive(st.count, value.encode()),
                Mode::Hier(Hier { local: Some(b), .. }) => {
                    b.arrive(st.count, value.encode());
                    local = false;
                }
                _ => {}
            }
            st.phase = Phase::Notified {
                id,
                flags,
                value,
                round: 0,
                sent: false,
                local,
            };
            self.inner.barrier_busy.store(true, Ordering::Release);
        }
        if self.shm_barrier().is_none() {
            self.barrier_advance("barrier_notify")?;
        }
        Ok(())
    }

    /// Every rank's value at barrier `c` of the flags (all arrived), merged in rank order.
    fn flags_verdict(b: &ShmBarrier, c: u64) -> Val {
        (0..b.ranks()).fold(Val::Anon, |v, r| v.merge(Val::decode(&b.value(c, r))))
    }

    /// `barrier_wait` on the flags until every rank arrived at the barrier under way, whose
    /// number it returns: checks first (with a core per rank), then polls the endpoint with the
    /// back-off (on an oversubscribed host: yields, polling every few rounds).
    fn flags_wait(&self, b: &ShmBarrier) -> Result<u64> {
        let c = self.flags_under_way("barrier_wait")?;
        let mut from = 0;
        let arrived = |from: &mut usize| match b.first_missing(c, *from) {
            Some(r) => {
                *from = r;
                false
            }
            None => true,
        };
        let mut idle = self.backoff();
        let over = idle.yields();
        let mut done = arrived(&mut from);
        if !done && !over {
            for _ in 0..FLAG_CHECKS {
                if arrived(&mut from) {
                    done = true;
                    break;
                }
            }
        }
        if !done {
            crate::npam::check_may_wait("barrier_wait")?;
            let mut round = 0u32;
            while !arrived(&mut from) {
                round = round.wrapping_add(1);
                if over && round % OVERSUBSCRIBED_POLL != 0 {
                    std::thread::yield_now();
                    continue;
                }
                if self.poll_inner(false)? > 0 {
                    idle.reset();
                } else {
                    idle.snooze(|| self.inner.conduit.keep_awake());
                }
            }
        }
        Ok(c)
    }

    /// The number of the barrier on the flags that this rank notified and has not completed.
    fn flags_under_way(&self, op: &'static str) -> Result<u64> {
        let st = self.barrier_lock();
        match st.phase {
            Phase::Notified { .. } => Ok(st.count),
            Phase::Idle => Err(Error::BarrierState(if op == "barrier_try" {
                "barrier_try without barrier_notify"
            } else {
                "barrier_wait without barrier_notify"
            })),
        }
    }

    /// Send and merge as far as arrivals allow. Returns true when all rounds are done.
    /// Hierarchical: a leader first waits for its host's arrivals and, once the leaders'
    /// rounds are done, releases its host; another rank of the host waits for that release.
    fn barrier_advance(&self, op: &'static str) -> Result<bool> {
        let hier = match self.barrier_mode() {
            Mode::Hier(h) => Some(h),
            _ => None,
        };
        let (total, ranks) = match hier {
            Some(h) => {
                let n = u32::try_from(h.leaders.len()).unwrap_or(u32::MAX);
                (rounds(n), u64::from(n))
            }
            None => (rounds(self.size()), u64::from(self.size())),
        };
        let index = hier.map_or(u64::from(self.rank()), |h| h.index as u64);
        loop {
            let mut st = self.barrier_lock();
            let epoch = st.epoch;
            let count = st.count;
            let parity = (epoch & 1) as usize;
            let (send, done) = match &mut st.phase {
                Phase::Idle => {
                    return Err(Error::BarrierState(if op == "barrier_try" {
                        "barrier_try without barrier_notify"
                    } else {
                        "barrier_wait without barrier_notify"
                    }))
                }
                Phase::Notified {
                    value,
                    round,
                    sent,
                    local,
                    ..
                } => {
                    if let (Some(h), false) = (hier, *local) {
                        let Some(b) = &h.local else {
                            return Ok(false);
                        };
                        if !h.lead {
                            // The host's verdict, once its leader released it.
                            let Some(v) = b.released(count) else {
                                return Ok(false);
                            };
                            *value = Val::decode(&v);
                            *local = true;
                            *round = total;
                        } else {
                            if b.first_missing(count, 0).is_some() {
                                return Ok(false);
                            }
                            *value = Self::flags_verdict(b, count);
                            *local = true;
                        }
                    }
                    if *round >= total {
                        if let Some(Hier {
                            local: Some(b),
                            lead: true,
                            ..
                        }) = hier
                        {
                            b.release(count, value.encode());
                        }
                        (None, true)
                    } else if !*sent {
                        *sent = true;
                        (Some((*round, *value)), false)
                    } else {
                        let r = *round;
                        match st_arrival(&mut st.arrived, parity, r) {
                            Some(v) => {
                                if let Phase::Notified {
                                    value, round, sent, ..
                                } = &mut st.phase
                                {
                                    *value = value.merge(v);
                                    *round += 1;
                                    *sent = false;
                                }
                                continue;
                            }
                            None => return Ok(false),
                        }
                    }
                }
            };
            drop(st);
            if done {
                return Ok(true);
            }
            if let Some((round, value)) = send {
                let to = (index + (1u64 << round)) % ranks;
                let dest = match hier {
                    Some(h) => h.leaders[usize::try_from(to).unwrap_or(0)],
                    None => u32::try_from(to).unwrap_or(0),
                };
                let v = value.encode();
                let r32 = u32::try_from(round).unwrap_or(u32::MAX);
                let args = [epoch, r32, v[0], v[1], v[2], v[3], v[4]];
                self.lib_request(
                    dest,
                    &OutMsg {
                        handler: LIB_BARRIER,
                        category: Category::Short,
                        is_reply: false,
                        args: &args,
                        payload: &[],
                        long_offset: 0,
                    },
                )?;
            }
        }
    }

    /// Complete the barrier under way; `flags_val`: on the flags, the barrier's number and the
    /// verdict merged from every rank's value (the messages' path merged it in the phase).
    fn barrier_finish(&self, id: u32, flags: u32, flags_val: Option<(u64, Val)>) -> Result<()> {
        let mut st = self.barrier_lock();
        if flags_val.is_some_and(|(c, _)| c != st.count) {
            // Another thread's wait or try completed it (and a notify started the next).
            return Err(Error::BarrierState(
                "barrier_wait: another thread completed the barrier during this wait",
            ));
        }
        // Idle: nothing to complete (the replace left it as it was).
        let Phase::Notified {
            id: nid,
            flags: nflags,
            value,
            ..
        } = std::mem::replace(&mut st.phase, Phase::Idle)
        else {
            return Err(Error::BarrierState("barrier_wait without barrier_notify"));
        };
        self.inner.barrier_busy.store(false, Ordering::Release);
        st.epoch = st.epoch.wrapping_add(1);
        st.count += 1;
        let value = flags_val.map_or(value, |(_, v)| v);
        let anon = flags & flags::ANONYMOUS != 0;
        let nanon = nflags & flags::ANONYMOUS != 0;
        let repeats = anon == nanon && (anon || id == nid);
        st.last = match value {
            Val::Named { id, .. } if repeats => Some(id),
            _ => None,
        };
        drop(st);
        self.stats_block().add(Ctr::Barriers, 1);
        match value {
            Val::Differ { a, b } => {
                return Err(Error::BarrierMismatch {
                    detail: format!(
                        "rank {} notified id {} but rank {} notified id {}",
                        a.0, a.1, b.0, b.1
                    ),
                })
            }
            Val::Flagged { rank } => {
                return Err(Error::BarrierMismatch {
                    detail: format!("rank {rank} passed the MISMATCH flag"),
                })
            }
            _ => {}
        }
        if !repeats {
            return Err(Error::BarrierMismatch {
                detail: format!(
                    "rank {} waited with id {id} flags {flags:#x} after notifying id {nid} flags {nflags:#x}",
                    self.rank()
                ),
            });
        }
        Ok(())
    }

    /// Complete the barrier started by `barrier_notify`, polling until every rank notified.
    /// `id` and `flags` must repeat the notify's. Errors with `BarrierMismatch` on every rank
    /// when named ids differ or a rank passed [`flags::MISMATCH`].
    pub fn barrier_wait(&self, id: u32, flags: u32) -> Result<()> {
        self.attached_for("barrier_wait")?;
        not_in_handler("barrier_wait")?;
        if let Some(bar) = self.shm_barrier() {
            let c = self.flags_wait(bar)?;
            return self.barrier_finish(id, flags, Some((c, Self::flags_verdict(bar, c))));
        }
        let mut b = self.backoff();
        let mut first = true;
        let mut stage = self.barrier_stage();
        let mut yields = 0u32;
        loop {
            if self.barrier_advance("barrier_wait")? {
                return self.barrier_finish(id, flags, None);
            }
            if first {
                crate::npam::check_may_wait("barrier_wait")?;
                first = false;
            }
            let now = self.barrier_stage();
            if self.poll_inner(false)? > 0 || now != stage {
                // A message, or the barrier moved on (a round, or the host's flags).
                b.reset();
                stage = now;
                yields = 0;
            } else if !now.1 && yields < FLAG_YIELDS {
                // Hierarchical, on the host's flags (a leader's arrivals, or its release, which
                // follows the other hosts by a network round trip): yield rather than sleep.
                yields += 1;
                std::thread::yield_now();
            } else {
                b.snooze(|| self.inner.conduit.keep_awake());
            }
        }
    }

    /// Where the barrier under way stands (its round, and whether its host's flags are
    /// done), for the wait's back-off.
    fn barrier_stage(&self) -> (usize, bool) {
        match self.barrier_lock().phase {
            Phase::Notified { round, local, .. } => (round, local),
            Phase::Idle => (0, false),
        }
    }

    /// Non-blocking form of `barrier_wait`: `Ok(false)` while other ranks have not notified.
    pub fn barrier_try(&self, id: u32, flags: u32) -> Result<bool> {
        self.attached_for("barrier_try")?;
        not_in_handler("barrier_try")?;
        if let Some(bar) = self.shm_barrier() {
            let c = self.flags_under_way("barrier_try")?;
            if bar.first_missing(c, 0).is_some() {
                self.poll_inner(false)?;
                if bar.first_missing(c, 0).is_some() {
                    return Ok(false);
                }
            }
            let v = Self::flags_verdict(bar, c);
            return self.barrier_finish(id, flags, Some((c, v))).map(|()| true);
        }
        if !self.barrier_advance("barrier_try")? {
            self.poll_inner(false)?;
            if !self.barrier_advance("barrier_try")? {
                return Ok(false);
            }
        }
        self.barrier_finish(id, flags, None).map(|()| true)
    }

    /// The outcome of the last barrier this rank completed (GASNet's
    /// `gasnet_barrier_result`): `None` when every rank notified it anonymously, otherwise
    /// the named id the ranks matched on. `None` before the first barrier and after one that
    /// failed with a mismatch. Errors with `BarrierState` between a notify and its wait.
    pub fn barrier_result(&self) -> Result<Option<u32>> {
        let st = self.barrier_lock();
        if matches!(st.phase, Phase::Notified { .. }) {
            return Err(Error::BarrierState(
                "barrier_result between barrier_notify and its wait",
            ));
        }
        Ok(st.last)
    }

    /// A named barrier on `sig` that leaves [`Endpoint::barrier_result`] as it was: the
    /// library's own agreement checks (every rank must pass the same `sig`; otherwise
    /// `BarrierMismatch` on every rank), which a client's barrier results do not see.
    pub fn barrier_agree(&self, sig: u32) -> Result<()> {
        let keep = self.barrier_lock().last;
        let r = self
            .barrier_notify(sig, 0)
            .and_then(|()| self.barrier_wait(sig, 0));
        self.barrier_lock().last = keep;
        r
    }

    /// Anonymous blocking barrier.
    pub fn barrier(&self) -> Result<()> {
        // Refused before the notify, so that the barrier's state stays as it was.
        crate::npam::check_may_wait("barrier")?;
        self.barrier_notify(0, flags::ANONYMOUS)?;
        self.barrier_wait(0, flags::ANONYMOUS)
    }
}

fn st_arrival(
    arrived: &mut [[Option<Val>; MAX_ROUNDS]; 2],
    parity: usize,
    round: usize,
) -> Option<Val> {
    arrived[parity][round % MAX_ROUNDS].take()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merge_rules() {
        let n = |id, rank| Val::Named { id, rank };
        assert_eq!(Val::Anon.merge(n(3, 1)), n(3, 1));
        assert_eq!(n(3, 2).merge(n(3, 1)), n(3, 1));
        assert!(matches!(n(3, 0).merge(n(4, 1)), Val::Differ { .. }));
        assert!(matches!(
            Val::Flagged { rank: 2 }.merge(n(1, 1)),
            Val::Flagged { rank: 2 }
        ));
        for v in [
            Val::Anon,
            n(7, 9),
            Val::Flagged { rank: 4 },
            n(1, 0).merge(n(2, 5)),
        ] {
            assert_eq!(Val::decode(&v.encode()), v);
        }
    }

    #[test]
    fn round_counts() {
        assert_eq!(rounds(1), 0);
        assert_eq!(rounds(2), 1);
        assert_eq!(rounds(3), 2);
        assert_eq!(rounds(4), 2);
        assert_eq!(rounds(5), 3);
    }
}
