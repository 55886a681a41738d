//! The collective engine: per-rank state of every collective in flight, the handlers that
//! receive data and signals, and the progress function that moves each collective along.
//!
//! See `README.md` next to this file for the protocol. In short: every collective has a
//! sequence number (all ranks initiate in the same order, so numbers agree); data travels
//! as Medium requests tagged with it and is written into a destination only once its
//! participant has entered and issued its own sends; earlier data waits in a buffer. The
//! IN_ALLSYNC and OUT_ALLSYNC signals run once per aggregate ("group"), in the team's signal
//! scheme (dissemination rounds or a binomial tree, the `barrier` algorithm selected for it).
//! Handlers only record what arrived: every send, every reduction callback and every copy out
//! of a source runs in [`Shared::advance`], on an application thread.

use crate::fasthash::{FastMap, FastSet};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use amnet_core::{Endpoint, Error, Layer, Rank, Result, Token};
use amnet_sync_modes::{InSync, Merged, Mode, OutSync, Signal, SignalAlg, TREE_DOWN};

use crate::plan::{Kind, Spec};
use crate::sched::{Buf, Mem, Range, Sched};
use crate::team::Geo;
use crate::types::FnEntry;

// The layer's handlers, at the indices the core's table gives the collectives.
use amnet_core::handlers::{
    COLL_CHECK as H_CHECK, COLL_DATA as H_DATA, COLL_SCHED as H_SCHED, COLL_SIG as H_SIG,
    COLL_STAGE as H_STAGE,
};
/// `H_CHECK` kind: the payload is the sender's signature.
const CHECK_SIGNATURE: u32 = 0;
/// `H_CHECK` kind: the payload describes a disagreement between the sender's own images.
const CHECK_MISMATCH: u32 = 1;

const SIG_ENTRY: u32 = 0;
const SIG_EXIT: u32 = 1;
/// `H_SIG` kind of the early-data flow control (`Flow`): the sender asks to hear once this
/// rank has numbered collective `seq` of team `team` (the group words carry the sequence).
const SIG_ASK: u32 = 2;
/// What the early-data flow control counts for a collective's record on a peer, besides its
/// bytes: so the records that data makes for collectives not entered are bounded too.
const FLOW_RECORD: usize = 256;

/// Records a sender keeps per peer and team before it asks the peer how far it got, whatever
/// their bytes: a peer that never sends back (a gather's root) would otherwise leave the
/// sender a record per collective until half the share is counted, tens of thousands of them.
const FLOW_ASK_RECORDS: usize = 64;
/// `H_SIG` kind: the answer to `SIG_ASK`: the highest sequence this rank has numbered on the
/// team.
const SIG_TOLD: u32 = 3;
/// `H_SIG` kind of direct puts under `IN_MYSYNC` (`Shared::direct_puts`): the sender's
/// destination for the collective named by the key is open, so its peers may put into it.
const SIG_OPEN: u32 = 4;
/// `H_SIG` kind of direct puts under `OUT_MYSYNC`: every block the sender puts into this
/// rank's destination for the collective named by the key is in place.
const SIG_LANDED: u32 = 5;
/// The smallest block (bytes) for which a collective under `IN_MYSYNC`, `IN_ALLSYNC` or
/// `OUT_MYSYNC` moves its data with direct puts (`Shared::direct_puts`): where the notices
/// those modes need (one per peer and direction) cost less than copying the block through
/// Medium messages and early buffers.
pub(crate) const DIRECT_MIN_BYTES: usize = 32 * 1024;

fn lo(v: u64) -> u32 {
    (v & 0xffff_ffff) as u32
}
fn hi(v: u64) -> u32 {
    (v >> 32) as u32
}
fn join(l: u32, h: u32) -> u64 {
    u64::from(l) | (u64::from(h) << 32)
}

/// A collective's name on every member: its team's id and its number among that team's
/// collectives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) struct Key {
    pub(crate) team: u64,
    pub(crate) seq: u64,
}

/// A resolved local area: a pointer into this process and its length.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Area {
    pub(crate) ptr: usize,
    pub(crate) len: usize,
}

/// One local participant of a collective.
#[derive(Debug, Default)]
pub(crate) struct Part {
    pub(crate) entered: bool,
    pub(crate) src: Area,
    pub(crate) dst: Area,
    /// Its sends are issued (its source was read).
    pushed: bool,
    /// A thread is issuing its sends.
    pub(crate) pushing: bool,
    /// Its destination may be written.
    open: bool,
    /// Its destination is empty or lies in this rank's segment, which stays valid after a
    /// sync: only then may an `OUT_NOSYNC` sync return before the data is in place.
    dst_seg: bool,
    got: usize,
    want: usize,
}

/// One collective in flight on this rank.
pub(crate) struct Op {
    pub(crate) key: Key,
    /// Its team, once entered here (a message may arrive first).
    pub(crate) geo: Option<Arc<Geo>>,
    /// The group (aggregate) it belongs to, once entered here.
    group: Option<Key>,
    pub(crate) spec: Option<Arc<Spec>>,
    pub(crate) mode: Option<Mode>,
    /// The first participant this rank hosts, and the local participants.
    pub(crate) first: usize,
    /// Participants are images (else ranks).
    pub(crate) image_space: bool,
    pub(crate) parts: Vec<Part>,
    /// Data that arrived for a participant whose destination is not open yet.
    early: Vec<(usize, usize, Vec<u8>)>,
    /// Blocks for other ranks are written straight into their segments with the core's put
    /// (`direct_puts`); this rank's participants expect only their blocks from themselves.
    pub(crate) direct: bool,
    /// Under `direct`: the segment offset of the destination, the same on every rank.
    direct_off: u64,
    /// Under `direct` and `IN_MYSYNC`: the ranks this rank puts into, whose `SIG_OPEN` it
    /// waits for, and how many came; whether this rank sent its own `SIG_OPEN`s.
    open_want: u32,
    open_got: u32,
    open_sent: bool,
    /// Under `direct` and `OUT_MYSYNC`: the ranks that put into this rank's destination, and
    /// how many of their `SIG_LANDED` came.
    landed_want: u32,
    landed_got: u32,
    /// Bytes that arrived for it before it was entered here (counted in `Flow::early_now`).
    pre_bytes: usize,
    /// The early-data flow control admitted its sends (`Shared::flow_admit`).
    flow_ok: bool,
    /// Reductions: phase -> source team rank -> packed stream.
    pub(crate) stage: [Vec<Vec<u8>>; 2],
    pub(crate) stage_got: [usize; 2],
    /// Reductions: 0 = operands not sent, 1 = phase-0 sent, 2 = phase-1 sent, 3 = done.
    pub(crate) rphase: u8,
    /// Prefix reductions: the operands of this rank's destination runs, kept between steps.
    pub(crate) xs: Vec<Vec<u8>>,
    /// A thread runs a reduction or schedule step of it (outside the lock).
    pub(crate) working: bool,
    /// Checked mode: signatures per team rank.
    sigs: Vec<Option<Vec<u8>>>,
    /// Checked mode: the image whose call gave this rank's signature.
    sig_image: u32,
    pub(crate) checked_ok: bool,
    pub(crate) local_done: bool,
    pub(crate) error: Option<Error>,
    /// A scheduled algorithm's state (None: the flat algorithm).
    pub(crate) sched: Option<SchedState>,
    /// Messages of a scheduled algorithm by (sender's team rank, tag): (bytes, bytes arrived).
    /// They may come before this rank entered, or before the round that takes them.
    sched_in: FastMap<(u32, u32), (Vec<u8>, usize)>,
    /// Library copies that stand in for client areas it was detached from (`detach.rs`).
    pub(crate) kept: Vec<Vec<u8>>,
}

/// Where a scheduled collective stands on this rank.
pub(crate) struct SchedState {
    pub(crate) sched: Arc<Sched>,
    /// The round running (== rounds.len(): the final steps are next).
    round: usize,
    /// The round's local steps and sends are done; it waits for its receives.
    started: bool,
    done: bool,
    tmp: Vec<u8>,
    /// The last round whose local steps or sends read the source or send anything (None:
    /// none does), and whether the final steps read the source.
    last_own: Option<usize>,
    post_reads_src: bool,
}

fn reads_src(l: &crate::sched::Local) -> bool {
    use crate::sched::Local;
    match *l {
        Local::Copy { from, .. } | Local::Fold { from, .. } => from.buf == Buf::Src,
        Local::Scan { carry, from, .. } => {
            from.buf == Buf::Src || carry.is_some_and(|c| c.buf == Buf::Src)
        }
    }
}

/// Under `OUT_NOSYNC`, whose sync needs only this rank's sends and source reads: a schedule
/// whose final steps read the source (a prefix scheme's local prefixes) copies what they
/// read into scratch space at the start of its first round and reads it there, so that the
/// source is done once the last send is out rather than once every message arrived.
pub(crate) fn read_src_early(sched: &mut Sched) {
    use crate::sched::Local;
    if sched.rounds.is_empty() || !sched.post.iter().any(reads_src) {
        return;
    }
    let src_end = |r: &Range| (r.buf == Buf::Src).then_some(r.off + r.len);
    let end = sched
        .post
        .iter()
        .filter_map(|l| match l {
            Local::Copy { from, .. } | Local::Fold { from, .. } => src_end(from),
            Local::Scan { carry, from, .. } => src_end(from).max(carry.as_ref().and_then(src_end)),
        })
        .max()
        .unwrap_or(0);
    let base = sched.tmp;
    sched.tmp += end;
    let moved = |r: &mut Range| {
        if r.buf == Buf::Src {
            *r = Range::new(Buf::Tmp, base + r.off, r.len);
        }
    };
    for l in &mut sched.post {
        match l {
            Local::Copy { from, .. } | Local::Fold { from, .. } => moved(from),
            Local::Scan { carry, from, .. } => {
                moved(from);
                if let Some(c) = carry.as_mut() {
                    moved(c);
                }
            }
        }
    }
    sched.rounds[0].pre.insert(
        0,
        Local::Copy {
            from: Range::new(Buf::Src, 0, end),
            to: Range::new(Buf::Tmp, base, end),
        },
    );
}

impl SchedState {
    pub(crate) fn new(sched: Sched) -> SchedState {
        let tmp = vec![0u8; sched.tmp];
        let last_own = sched
            .rounds
            .iter()
            .rposition(|r| !r.sends.is_empty() || r.pre.iter().any(reads_src));
        let post_reads_src = sched.post.iter().any(reads_src);
        SchedState {
            sched: Arc::new(sched),
            round: 0,
            started: false,
            done: false,
            tmp,
            last_own,
            post_reads_src,
        }
    }

    /// Every send of the schedule was issued and nothing left reads the source.
    fn sent_all(&self) -> bool {
        self.done
            || (!self.post_reads_src
                && self
                    .last_own
                    .is_none_or(|l| self.round > l || (self.round == l && self.started)))
    }
}

impl Op {
    fn new(key: Key) -> Op {
        Op {
            key,
            geo: None,
            group: None,
            spec: None,
            mode: None,
            first: 0,
            image_space: false,
            parts: Vec::new(),
            early: Vec::new(),
            direct: false,
            direct_off: 0,
            open_want: 0,
            open_got: 0,
            open_sent: false,
            landed_want: 0,
            landed_got: 0,
            pre_bytes: 0,
            flow_ok: false,
            stage: [Vec::new(), Vec::new()],
            stage_got: [0, 0],
            rphase: 0,
            xs: Vec::new(),
            working: false,
            sigs: Vec::new(),
            sig_image: 0,
            checked_ok: false,
            local_done: false,
            error: None,
            sched: None,
            sched_in: FastMap::default(),
            kept: Vec::new(),
        }
    }

    /// A scheduled op can take its next step now: start a round, apply a round's receives
    /// (all arrived), or run the final steps.
    fn sched_ready(&self) -> bool {
        let Some(ss) = &self.sched else {
            return false;
        };
        if ss.done {
            return false;
        }
        let Some(r) = ss.sched.rounds.get(ss.round) else {
            return true;
        };
        !ss.started
            || r.recvs.iter().all(|rv| {
                self.sched_in
                    .get(&(rv.from, rv.tag))
                    .is_some_and(|(_, got)| *got >= rv.into.len)
            })
    }

    fn all_entered(&self) -> bool {
        self.spec.is_some() && self.parts.iter().all(|p| p.entered)
    }

    /// This rank did its part of the collective: every local participant entered, and every
    /// message this rank sends for it (forwarding included) was issued, so every source of
    /// this rank was read. What an `OUT_NOSYNC` sync waits for; data for this rank may still
    /// be on its way, so only where every local destination lies in the segment (a `Ptr`
    /// destination elsewhere must be done by the sync, as under `OUT_MYSYNC`).
    fn sent_all(&self) -> bool {
        if self.error.is_some() {
            return self.local_done;
        }
        let Some(spec) = &self.spec else {
            return false;
        };
        if !self.all_entered()
            || !self.checked_ok
            || self.working
            || !self.parts.iter().all(|p| p.dst_seg)
        {
            return false;
        }
        if let Some(ss) = &self.sched {
            return ss.sent_all();
        }
        match spec.kind {
            // The prefix reductions send operands (step 0), then partials (step 1).
            Kind::Prefix | Kind::ExclusivePrefix => self.rphase >= 2,
            k if k.is_reduction() => self.rphase >= 1,
            _ => self.parts.iter().all(|p| p.pushed),
        }
    }
}

/// An aggregate (a single collective is a group of one).
pub(crate) struct Group {
    /// Its team, once a member entered here (a signal may arrive first).
    pub(crate) geo: Option<Arc<Geo>>,
    pub(crate) members: Vec<u64>,
    pub(crate) closed: bool,
    merged: Merged,
    entry: Signal,
    exit: Signal,
    /// Everything is done here (data in place, signals over): the state may go once every
    /// handle of the group was synced.
    pub(crate) complete: bool,
    /// A sync of the group's handle may succeed: complete, or (members that are all
    /// `OUT_NOSYNC` or done) every member's own part done (`Op::sent_all`).
    pub(crate) syncable: bool,
    /// Some member is not `OUT_NOSYNC`: its sync promises data, so it waits for the rank's
    /// earlier collectives that were synced before they were complete.
    pub(crate) promises: bool,
    /// Its handles were synced before it was complete: it stays (in `State::detached`) until
    /// it is.
    pub(crate) detached: bool,
    /// Its place among this rank's groups, in the order they were first entered here.
    pub(crate) ord: u64,
    pub(crate) handles: usize,
    pub(crate) started: Instant,
    /// Signals (which, round) that arrived before the team was known here.
    early: Vec<(u32, u32)>,
}

impl Group {
    fn new() -> Group {
        Group {
            geo: None,
            members: Vec::new(),
            closed: false,
            merged: Merged::default(),
            entry: Signal::new(SignalAlg::Dissemination, 0, 1),
            exit: Signal::new(SignalAlg::Dissemination, 0, 1),
            complete: false,
            syncable: false,
            promises: false,
            detached: false,
            ord: 0,
            handles: 0,
            started: Instant::now(),
            early: Vec::new(),
        }
    }

    /// The group's team is known: shape the signals (scheme `alg`, the team's) and replay what
    /// arrived before.
    fn set_geo(&mut self, geo: &Arc<Geo>, alg: impl FnOnce() -> SignalAlg) {
        if self.geo.is_some() {
            return;
        }
        let alg = alg();
        self.entry = Signal::new(alg, geo.me, geo.size());
        self.exit = Signal::new(alg, geo.me, geo.size());
        self.geo = Some(geo.clone());
        for (which, round) in std::mem::take(&mut self.early) {
            self.arrive(which, round);
        }
    }

    fn arrive(&mut self, which: u32, round: u32) {
        if self.geo.is_none() && self.early.len() < 2 * 64 {
            self.early.push((which, round));
        } else if which == SIG_ENTRY {
            self.entry.arrive(round);
        } else {
            self.exit.arrive(round);
        }
    }
}

/// A live handle.
pub(crate) struct HandleRec {
    pub(crate) group: Key,
    pub(crate) thread: std::thread::ThreadId,
}

/// The numbering of one team's collectives on this rank.
#[derive(Default)]
pub(crate) struct TeamSeq {
    /// Open aggregate per caller (image index, or u32::MAX for a representative thread).
    pub(crate) agg_open: FastMap<u32, u64>,
    /// The next sequence number this rank hands out on the team: every collective, whoever
    /// initiates it, takes the next one when its first caller on this rank arrives.
    pub(crate) next_seq: u64,
    /// `ALL_THREADS` calls made so far, per local image.
    pub(crate) at_calls: Vec<u64>,
    /// `ALL_THREADS` collectives some local image initiated and not every one yet: (sequence
    /// number, images that joined), the first being the `at_base`-th such collective.
    pub(crate) at_open: std::collections::VecDeque<(u64, u32)>,
    /// Ordinal of `at_open[0]` among this rank's `ALL_THREADS` collectives on the team.
    pub(crate) at_base: u64,
    /// Collectives started and not yet synced on the team here.
    pub(crate) unsynced: usize,
    /// The team (checked mode reads its members).
    pub(crate) geo: Option<Arc<Geo>>,
}

/// Everything that changes, under one lock.
#[derive(Default)]
pub(crate) struct State {
    pub(crate) ops: FastMap<Key, Op>,
    pub(crate) groups: FastMap<Key, Group>,
    pub(crate) handles: FastMap<u64, HandleRec>,
    pub(crate) next_handle: u64,
    /// Per team id: the numbering of its collectives.
    pub(crate) teams: FastMap<u64, TeamSeq>,
    /// Collectives started and not yet synced on this rank, on any team (barrier rule).
    pub(crate) unsynced: usize,
    /// The groups not complete yet: the only ones `collect` visits, so that its cost follows
    /// the work in flight rather than every handle not yet synced.
    pub(crate) pending: FastSet<Key>,
    /// The pending groups something happened to since `collect` last looked (an entry, data,
    /// a signal, a finished push or reduction step): the only ones it visits, so that a poll
    /// costs what changed, not what is in flight (65,535 collectives may be).
    pub(crate) dirty: Dirty,
    /// Collectives that failed and are gone: a message for one that arrives late (a peer's
    /// signature or data sent before it learnt of the failure) is dropped, not kept forever.
    pub(crate) failed: FastSet<Key>,
    /// The last `Group::ord` given (numbers start at 1).
    pub(crate) next_ord: u64,
    /// Groups whose every handle was synced before they were complete (`OUT_NOSYNC`), by
    /// `Group::ord`: later syncs that promise data, and barriers, wait for them.
    pub(crate) detached: std::collections::BTreeMap<u64, Key>,
    /// Errors of detached groups, found after their sync succeeded: the next barrier on the
    /// rank reports them.
    pub(crate) late_errors: Vec<String>,
    /// The early-data flow control.
    pub(crate) flow: Flow,
}

/// Flow control of early data: data that arrives for a collective its receiver has not
/// entered waits in the receiver's memory. A sender counts, per peer rank, the bytes it sent
/// for collectives that peer was not known to have numbered; a collective whose sends would
/// take that count past the peer's share of the budget (`AMNET_COLL_EARLY_BYTES` over the
/// other ranks) waits, unless the count is zero (so one collective always moves), and the
/// sender asks the peer (`SIG_ASK`) to tell it (`SIG_TOLD`) once it has numbered the oldest
/// collective counted. Only what the peer has numbered is forgotten, so the early bytes a
/// rank holds from one sender stay below that sender's largest of its share and one
/// collective's bytes. A waiting collective needs only its peers to enter it, never to
/// complete anything, so (collectives being entered in one order everywhere) it cannot wait
/// in a cycle.
/// The groups something happened to since `collect` last looked, in any order and possibly
/// repeated (`collect` sorts them and drops repeats); its buffer is kept between visits, so
/// marking a group allocates nothing.
#[derive(Default)]
pub(crate) struct Dirty {
    v: Vec<Key>,
}

impl Dirty {
    pub(crate) fn insert(&mut self, k: Key) {
        if self.v.last() != Some(&k) {
            self.v.push(k);
        }
    }
}

#[derive(Default)]
pub(crate) struct Flow {
    /// Per peer job rank: what this rank sent ahead of it.
    ahead: FastMap<Rank, Ahead>,
    /// Peers' asks: (peer, team) -> the sequence they wait for this rank to number.
    watch: FastMap<(Rank, u64), u64>,
    /// Groups with a collective waiting for the flow control: visited again on an answer.
    blocked: FastSet<Key>,
    /// Bytes held here for collectives not entered here yet, now and at most so far.
    pub(crate) early_now: usize,
    pub(crate) early_peak: usize,
    /// Times a collective's sends were held back, and asks sent.
    pub(crate) deferrals: u64,
    pub(crate) asks: u64,
    /// A buffer for one collective's charges, kept between uses.
    charges: Vec<(Rank, usize)>,
}

/// What this rank sent ahead of one peer.
#[derive(Default)]
struct Ahead {
    /// Per team: the highest sequence the peer told it has numbered.
    told: FastMap<u64, u64>,
    /// Per team: bytes per collective (seq, bytes) not known to be numbered there, in
    /// sequence order, and the sum over every team.
    sent: FastMap<u64, std::collections::VecDeque<(u64, usize)>>,
    total: usize,
    /// Teams with an ask outstanding.
    asked: FastSet<u64>,
}

impl Flow {
    /// Rank `from` sent something for collective `key` (data or a signal), so it has numbered
    /// it and every earlier one of its team: forget what was counted for them, as a `SIG_TOLD`
    /// would. Returns whether that may let a waiting collective move.
    fn heard(&mut self, from: Rank, key: Key) -> bool {
        let Some(a) = self.ahead.get_mut(&from) else {
            return false;
        };
        let t = a.told.entry(key.team).or_default();
        if *t >= key.seq {
            return false;
        }
        *t = key.seq;
        let Some(q) = a.sent.get_mut(&key.team) else {
            return false;
        };
        let mut gone = false;
        while let Some(&(seq, n)) = q.front() {
            if seq > key.seq {
                break;
            }
            q.pop_front();
            a.total -= n;
            gone = true;
        }
        gone && !self.blocked.is_empty()
    }

    /// Team `team` was destroyed here, after a barrier on it: every member has numbered every
    /// collective of it, so nothing counted for it stays, and peers' asks about it need no
    /// answer. Returns whether that may let a waiting collective move.
    pub(crate) fn forget_team(&mut self, team: u64) -> bool {
        let mut gone = false;
        for a in self.ahead.values_mut() {
            a.told.remove(&team);
            a.asked.remove(&team);
            if let Some(q) = a.sent.remove(&team) {
                let n: usize = q.iter().map(|e| e.1).sum();
                a.total -= n;
                gone |= n > 0;
            }
        }
        self.watch.retain(|&(_, t), _| t != team);
        gone && !self.blocked.is_empty()
    }

    /// Wake the collectives waiting for the flow control.
    pub(crate) fn unblock(&mut self, dirty: &mut Dirty) {
        dirty.v.extend(self.blocked.drain());
    }

    /// Bytes arrived for a collective not entered here.
    fn hold(&mut self, op: &mut Op, n: usize) {
        if op.spec.is_none() {
            op.pre_bytes += n;
            self.early_now += n;
            self.early_peak = self.early_peak.max(self.early_now);
        }
    }
}

/// Whether collective `key` may send `charges` (bytes per peer) now (see `Flow`); if so they
/// are counted, and a peer whose count passes half its share is asked ahead of need.
fn flow_admit(
    flow: &mut Flow,
    budget: usize,
    size: u32,
    key: Key,
    charges: &[(Rank, usize)],
    outs: &mut Vec<Out>,
) -> bool {
    let share = (budget / (size as usize).saturating_sub(1).max(1)).max(1);
    let known = |a: &Ahead| a.told.get(&key.team).is_some_and(|&s| s >= key.seq);
    let mut ok = true;
    for &(to, n) in charges {
        let a = flow.ahead.entry(to).or_default();
        if known(a) || a.total == 0 || a.total + n <= share {
            continue;
        }
        ok = false;
        flow_ask(flow, to, Some(key), outs);
    }
    if !ok {
        flow.deferrals += 1;
        return false;
    }
    for &(to, n) in charges {
        let a = flow.ahead.entry(to).or_default();
        if known(a) {
            continue;
        }
        // Collectives of a team are mostly admitted in sequence order: appended at the back.
        let q = a.sent.entry(key.team).or_default();
        match q.back_mut() {
            Some(b) if b.0 == key.seq => b.1 += n,
            Some(b) if b.0 > key.seq => {
                let at = q.partition_point(|e| e.0 < key.seq);
                match q.get_mut(at) {
                    Some(e) if e.0 == key.seq => e.1 += n,
                    _ => q.insert(at, (key.seq, n)),
                }
            }
            _ => q.push_back((key.seq, n)),
        }
        a.total += n;
        if a.total > share / 2 || q.len() > FLOW_ASK_RECORDS {
            flow_ask(flow, to, None, outs);
        }
    }
    true
}

/// Ask `to` about the oldest collective counted for it on each team (and on `key`'s team, up to
/// `key`), where no ask is outstanding.
fn flow_ask(flow: &mut Flow, to: Rank, key: Option<Key>, outs: &mut Vec<Out>) {
    let Some(a) = flow.ahead.get_mut(&to) else {
        return;
    };
    // The oldest collective counted on each team (in team order, so that the asks go out in
    // the same order whatever the map's).
    let mut want: Vec<(u64, u64)> = a
        .sent
        .iter()
        .filter(|(team, _)| !a.asked.contains(team))
        .filter_map(|(&team, q)| q.front().map(|&(seq, _)| (team, seq)))
        .collect();
    want.sort_unstable();
    if let Some(k) = key {
        if !want.iter().any(|w| w.0 == k.team) {
            want.push((k.team, k.seq));
        }
    }
    for (team, seq) in want {
        if a.asked.insert(team) {
            flow.asks += 1;
            outs.push(Out::Sig {
                to,
                group: Key { team, seq },
                which: SIG_ASK,
                round: 0,
            });
        }
    }
}

impl State {
    /// Note that `key`'s group has something new to look at.
    fn touch(&mut self, key: Key) {
        if let Some(g) = self.ops.get(&key).and_then(|o| o.group) {
            self.dirty.insert(g);
        }
    }

    /// Whether some caller left an aggregate open on some team.
    pub(crate) fn aggregate_open(&self) -> bool {
        self.teams.values().any(|t| !t.agg_open.is_empty())
    }

    /// Checked mode: how many collectives this rank has numbered on each team but `team`, as
    /// (team id, count) pairs of little-endian u64 (the order part of a signature).
    pub(crate) fn order_vector(&self, team: u64) -> Vec<u8> {
        let mut ids: Vec<(&u64, &TeamSeq)> =
            self.teams.iter().filter(|(id, _)| **id != team).collect();
        ids.sort_by_key(|(id, _)| **id);
        let mut v = Vec::with_capacity(16 * ids.len());
        for (id, t) in ids {
            v.extend_from_slice(&id.to_le_bytes());
            v.extend_from_slice(&t.next_seq.saturating_sub(1).to_le_bytes());
        }
        v
    }
}

/// Per-rank collective state, shared by every image thread of the rank.
pub(crate) struct Shared {
    /// Unique in the process (a counter): what a per-thread memo of a call names its
    /// collectives state by.
    pub(crate) id: u64,
    pub(crate) ep: Endpoint,
    /// This rank's segment: base address and length (attached before `init`, for good).
    pub(crate) seg: (usize, usize),
    pub(crate) rank: Rank,
    pub(crate) size: u32,
    /// Images per rank, and the first image of each rank (len size + 1).
    pub(crate) images: Vec<u32>,
    pub(crate) img_first: Vec<u32>,
    /// The team of every rank.
    pub(crate) world: crate::team::Team,
    pub(crate) fns: Vec<FnEntry>,
    pub(crate) check: bool,
    pub(crate) hang: Option<Duration>,
    /// `AMNET_COLL_TRACE`: print each team's selection table when it is made.
    pub(crate) trace: bool,
    pub(crate) selector: crate::select::Selector,
    pub(crate) st: Mutex<State>,
    /// A message arrived since the progress function last looked: the core's progress hook
    /// runs `advance` only then.
    pub(crate) work: std::sync::atomic::AtomicBool,
    /// `AMNET_COLL_EARLY_BYTES` (or `Coll::set_early_budget`): the early data a rank may hold
    /// from all the others together (`Flow`).
    pub(crate) early_budget: std::sync::atomic::AtomicUsize,
    /// The world team's smp-native state, when every rank maps every other rank's host
    /// scratch (`shm`).
    pub(crate) shm_world: Option<crate::shm::ShmTeam>,
    /// Which areas of this rank's host scratch other teams hold (`shm::AreaBook`).
    pub(crate) shm_areas: Mutex<crate::shm::AreaBook>,
    /// Teams on which some caller left an aggregate open (`TeamSeq::agg_open` not empty).
    pub(crate) agg_teams: std::sync::atomic::AtomicUsize,
    /// The built-in entries' elementwise kernels, by function index.
    pub(crate) kernels: Vec<Option<crate::builtin::Kernel>>,
}

/// A message to send once the lock is released. Destinations are job ranks; `from` is this
/// rank's team rank.
enum Out {
    Stage {
        to: Rank,
        from: u32,
        key: Key,
        phase: u32,
        bytes: Arc<Vec<u8>>,
    },
    Sig {
        to: Rank,
        group: Key,
        which: u32,
        round: u32,
    },
}

/// Work that needs the lock released.
enum Job {
    Push { key: Key, idx: usize },
    Reduce { key: Key },
    Sched { key: Key },
}

impl Shared {
    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        self.st.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// This rank's book of host-scratch areas.
    pub(crate) fn area_book(&self) -> MutexGuard<'_, crate::shm::AreaBook> {
        self.shm_areas.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn nimages(&self) -> u32 {
        self.img_first[self.size as usize]
    }

    pub(crate) fn image_rank(&self, image: u32) -> Rank {
        // img_first is increasing; find the last rank whose first image <= image.
        let r = self.img_first.partition_point(|&f| f <= image);
        #[allow(clippy::cast_possible_truncation)] // r <= size, a u32
        {
            (r - 1) as Rank
        }
    }

    pub(crate) fn install(self: &Arc<Self>) -> Result<()> {
        for (h, f) in [
            (
                H_DATA,
                on_data as fn(&Shared, &mut Token<'_>, &[u32], &[u8]),
            ),
            (H_STAGE, on_stage),
            (H_SIG, on_sig),
            (H_CHECK, on_check),
            (H_SCHED, on_sched),
        ] {
            let me = Arc::downgrade(self);
            self.ep
                .layer(Layer::Coll)
                .install_handler(h, move |tok, args, payload| {
                    if let Some(s) = me.upgrade() {
                        f(&s, tok, args, payload);
                    }
                })?;
        }
        let me = Arc::downgrade(self);
        self.ep
            .layer(Layer::Coll)
            .set_barrier_guard(Box::new(move || {
                let s = me.upgrade()?;
                let st = s.lock();
                if st.unsynced > 0 || st.aggregate_open() {
                    Some(format!(
                        "{} collective(s) are in flight on rank {} (initiated and not synced{}); \
                     sync every collective before a barrier",
                        st.unsynced,
                        s.rank,
                        if !st.aggregate_open() {
                            ""
                        } else {
                            ", or an aggregate left open"
                        }
                    ))
                } else if st.detached.is_empty() && st.late_errors.is_empty() {
                    // Nothing to settle (the barrier's common case: one lock, no clock).
                    None
                } else {
                    drop(st);
                    s.settle_detached()
                }
            }))?;
        // Collectives move along inside any amnet call that polls, not only inside coll calls.
        let me = Arc::downgrade(self);
        self.ep.layer(Layer::Coll).set_progress(Box::new(move || {
            if let Some(s) = me.upgrade() {
                if s.work.swap(false, std::sync::atomic::Ordering::AcqRel) {
                    // An error stays with its collective and surfaces at its sync.
                    let _ = s.advance_anywhere_safe();
                }
            }
        }))
    }

    /// Record an entry (see `api`) by the thread of `image`: creates the op and its group on
    /// first sight. In checked mode, returns what a later local image's call disagrees on
    /// with the first one's (the op then fails).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn enter(
        &self,
        st: &mut State,
        geo: &Arc<Geo>,
        key: Key,
        group: Key,
        spec: &Arc<Spec>,
        mode: Mode,
        image_space: bool,
        image: u32,
        entries: &[(usize, crate::engine::Area, crate::engine::Area)],
        sched: Option<Sched>,
        sig: Option<Vec<u8>>,
        seg_dst: Option<u64>,
    ) -> Option<String> {
        let mut mismatch = None;
        let seq = key.seq;
        let me = geo.me as usize;
        let op = st.ops.entry(key).or_insert_with(|| Op::new(key));
        op.group = Some(group);
        if op.spec.is_none() {
            st.flow.early_now -= std::mem::take(&mut op.pre_bytes);
            op.spec = Some(spec.clone());
            op.mode = Some(mode);
            op.geo = Some(geo.clone());
            op.direct = !image_space
                && seg_dst.is_some()
                && sched.is_none()
                && self.direct_puts(spec, &mode);
            op.direct_off = seg_dst.unwrap_or(0);
            if op.direct && !image_space {
                // Rank participants: participant numbers are team ranks.
                let me = geo.me as usize;
                if mode.input == InSync::My {
                    op.open_want = u32::try_from(put_targets(spec, me).len()).unwrap_or(u32::MAX);
                }
                if mode.output == OutSync::My {
                    op.landed_want = u32::try_from(put_sources(spec, me).len()).unwrap_or(u32::MAX);
                }
            }
            op.sched = sched.map(|mut s| {
                if mode.output == OutSync::No {
                    read_src_early(&mut s);
                }
                SchedState::new(s)
            });
            let n = geo.members.len();
            if spec.kind.is_reduction() && op.sched.is_none() {
                // The flat reductions' streams, one per team rank.
                for ph in &mut op.stage {
                    ph.resize(n.max(ph.len()), Vec::new());
                }
            }
            if self.check {
                op.sigs.resize(n.max(op.sigs.len()), None);
            }
            let (first, count) = if image_space {
                (geo.img_first[me] as usize, geo.images[me] as usize)
            } else {
                (me, 1)
            };
            op.first = first;
            op.image_space = image_space;
            let direct = op.direct;
            op.parts = (0..count)
                .map(|i| Part {
                    want: if direct {
                        // Only its own block comes by a local copy; the rest is put.
                        spec.transfers_from(first + i)
                            .iter()
                            .filter(|t| t.to == first + i)
                            .map(|t| t.len)
                            .sum()
                    } else {
                        spec.incoming(first + i)
                    },
                    ..Part::default()
                })
                .collect();
            if self.check {
                op.sigs[me] = sig;
                op.sig_image = image;
            } else {
                op.checked_ok = true;
            }
        } else if self.check && op.error.is_none() {
            // Another image of this rank joins (ALL_THREADS): its arguments must agree with
            // the first caller's, which stand for the rank.
            let sig = signature(spec, &mode);
            let base = op.sigs[me].as_deref().unwrap_or(&[]);
            if let Some(d) = first_diff(fixed(base), &sig) {
                let detail = format!(
                    "collective #{seq}: image {image} passed {} = {} but image {} (rank {}) \
                     passed {}",
                    d.0, d.2, op.sig_image, self.rank, d.1
                );
                op.error = Some(Error::Mismatch {
                    what: "collective arguments (AMNET_COLL_CHECK)",
                    detail: detail.clone(),
                });
                mismatch = Some(detail);
            }
        }
        for &(p, src, dst) in entries {
            let i = p - op.first;
            let part = &mut op.parts[i];
            part.entered = true;
            part.src = src;
            part.dst = dst;
            part.dst_seg = dst.len == 0 || self.in_segment(dst);
        }
        if !st.groups.contains_key(&group) {
            st.pending.insert(group);
        }
        st.dirty.insert(group);
        // Numbers start at 1: 0 marks a group not entered here yet.
        let ord = st.next_ord + 1;
        let g = st.groups.entry(group).or_insert_with(Group::new);
        g.set_geo(geo, || self.selector.signal(geo, self.ep.conduit_name()));
        if g.ord == 0 {
            g.ord = ord;
            st.next_ord = ord;
        }
        if !g.members.contains(&seq) {
            g.members.push(seq);
            g.merged.add(&mode);
            g.promises |= mode.output != OutSync::No;
        }
        if !mode.aggregate {
            g.closed = true;
        }
        mismatch
    }

    /// Whether a collective whose every destination is the same segment offset on its rank
    /// (`SINGLE`, `Addr::Seg`, rank participants, the flat algorithm) writes its blocks for other
    /// ranks with the core's put, straight into their segments, instead of Medium messages and
    /// early buffers. For the data-movement operations (broadcast, scatter, gather, gather_all
    /// and exchange, their `_v` forms included), not in checked mode (no data moves before the
    /// signatures agree), and:
    /// - under `IN_NOSYNC` with `OUT_NOSYNC` or `OUT_ALLSYNC`, at every size: a destination may
    ///   be written before its owner entered, and no receiver needs to know when its data is
    ///   in place (the exit signal or a later barrier says it);
    /// - otherwise where some block has at least `DIRECT_MIN_BYTES`: under `IN_MYSYNC` a
    ///   receiver tells the ranks that put into it that its destination is open (`SIG_OPEN`)
    ///   and they put after that (under `IN_ALLSYNC` the entry signal says it); under
    ///   `OUT_MYSYNC` a sender tells each rank it put into that its blocks are in place
    ///   (`SIG_LANDED`), once its puts completed.
    ///
    /// A sender without a destination of its own (a gather's non-root) takes the offset from
    /// its `SINGLE` destination argument. The initiation refuses the in-place addresses that
    /// cannot go with the first case (`api::direct_in_place`) and does not use direct puts
    /// with an in-place address in the second. Every rank decides the same from the agreed
    /// arguments.
    pub(crate) fn direct_puts(&self, spec: &Spec, mode: &Mode) -> bool {
        !self.check
            && matches!(
                spec.kind,
                Kind::Broadcast | Kind::Scatter | Kind::Gather | Kind::GatherAll | Kind::Exchange
            )
            && self.ep.segment_ptr().is_ok()
            && (direct_any_size(mode) || spec.counts.iter().any(|&c| c >= DIRECT_MIN_BYTES))
    }

    /// The bytes each peer rank may receive from this rank for `op` (at most; peers that get
    /// nothing left out): its planned blocks (none by direct puts, which land in the segment),
    /// a schedule's messages, or for a flat reduction twice its element bytes per peer (its
    /// operand or partial streams), each plus `FLOW_RECORD` for the peer's record of it.
    fn flow_charges(&self, op: &Op, spec: &Spec, v: &mut Vec<(Rank, usize)>) {
        v.clear();
        let Some(geo) = op.geo.as_ref() else {
            return;
        };
        let mut add = |to: Rank, n: usize| {
            if to != self.rank && n > 0 {
                v.push((to, n));
            }
        };
        if let Some(ss) = &op.sched {
            for r in &ss.sched.rounds {
                for snd in &r.sends {
                    add(geo.world(snd.to), snd.from.len);
                }
            }
        } else if spec.kind.is_reduction() {
            for t in 0..geo.size() {
                add(geo.world(t), 2 * spec.n * spec.es);
            }
        } else if !op.direct {
            for p in op.first..op.first + op.parts.len() {
                spec.each_transfer_from(p, |t| {
                    add(geo.world(geo.owner(op.image_space, t.to)), t.len);
                });
            }
        }
        // One entry per peer, in rank order.
        v.sort_unstable_by_key(|e| e.0);
        v.dedup_by(|later, kept| {
            let same = later.0 == kept.0;
            if same {
                kept.1 += later.1;
            }
            same
        });
        for e in v.iter_mut() {
            e.1 += FLOW_RECORD;
        }
    }

    /// Answer the asks of peers about teams on which this rank has numbered what they wait for.
    fn flow_answer(&self, st: &mut State, outs: &mut Vec<Out>) {
        let teams = &st.teams;
        st.flow.watch.retain(|&(to, team), seq| {
            let numbered = teams.get(&team).map_or(0, |t| t.next_seq.saturating_sub(1));
            if numbered < *seq {
                return true;
            }
            outs.push(Out::Sig {
                to,
                group: Key {
                    team,
                    seq: numbered,
                },
                which: SIG_TOLD,
                round: 0,
            });
            false
        });
    }

    /// A flow-control message from rank `from` (handler context: records only).
    fn flow_arrived(&self, from: Rank, which: u32, k: Key) {
        if from >= self.size || from == self.rank {
            return;
        }
        let mut guard = self.lock();
        let st = &mut *guard;
        if which == SIG_ASK {
            let w = st.flow.watch.entry((from, k.team)).or_insert(k.seq);
            *w = (*w).min(k.seq);
        } else {
            st.flow.heard(from, k);
            if let Some(a) = st.flow.ahead.get_mut(&from) {
                a.asked.remove(&k.team);
            }
            st.flow.unblock(&mut st.dirty);
        }
        self.work.store(true, std::sync::atomic::Ordering::Release);
    }

    /// A direct-put notice (`SIG_OPEN` or `SIG_LANDED`) for collective `k`: each peer sends
    /// at most one of each kind per collective, so counting them tells when all came.
    fn note_arrived(&self, which: u32, k: Key) {
        let mut guard = self.lock();
        let st = &mut *guard;
        if st.failed.contains(&k) {
            return;
        }
        let op = st.ops.entry(k).or_insert_with(|| Op::new(k));
        if which == SIG_OPEN {
            op.open_got += 1;
        } else {
            op.landed_got += 1;
        }
        st.touch(k);
        self.work.store(true, std::sync::atomic::Ordering::Release);
    }

    /// The collective's reduction function may run outside coll calls: it has none (data
    /// movement) or was registered `AMSAFE` (every built-in is). A closure of the typed API
    /// or a client function without `AMSAFE` runs only inside coll calls.
    fn fn_amsafe(&self, spec: &Spec) -> bool {
        !spec.kind.is_reduction()
            || spec
                .function(&self.fns)
                .is_some_and(|e| e.flags & crate::types::fn_flags::AMSAFE != 0)
    }

    /// Area `a` lies inside this rank's segment.
    fn in_segment(&self, a: Area) -> bool {
        self.seg_offset(a).is_some()
    }

    /// Where area `a` lies in this rank's segment, if it does.
    pub(crate) fn seg_offset(&self, a: Area) -> Option<u64> {
        let (base, len) = self.seg;
        (a.ptr >= base && a.ptr.checked_add(a.len)? <= base + len).then(|| (a.ptr - base) as u64)
    }

    /// Poll and advance until `done()`, with the core's idle policy (spec/core.md §5) while
    /// nothing moves; after `AMNET_HANG_TIMEOUT` without progress, `Error::Hang` with
    /// `report()` (also printed).
    pub(crate) fn wait_loop(
        &self,
        done: impl FnMut() -> Result<bool>,
        report: impl Fn() -> String,
    ) -> Result<()> {
        self.wait_loop_every(1, done, report)
    }

    /// `wait_loop` that polls and advances only at every `every`-th round (at least 1), each
    /// idle poll followed by the back-off, and at the others checks `done()` and yields the
    /// core (for waits on an oversubscribed host, whose flag is set by a rank that may need
    /// this core).
    pub(crate) fn wait_loop_every(
        &self,
        every: u32,
        mut done: impl FnMut() -> Result<bool>,
        report: impl Fn() -> String,
    ) -> Result<()> {
        let ep = &self.ep;
        let mut idle = ep.backoff();
        // Since when nothing happened: read from the clock at the first idle poll after
        // something did, not on every poll that moved something.
        let mut quiet: Option<Instant> = None;
        let mut first = true;
        let mut round = 0u32;
        loop {
            if done()? {
                return Ok(());
            }
            if first {
                ep.check_may_wait("collective wait")?;
                first = false;
            }
            round = round.wrapping_add(1);
            if round % every.max(1) != 0 {
                std::thread::yield_now();
                continue;
            }
            let n = ep.poll()?;
            let moved = self.advance()?;
            if n > 0 || moved {
                idle.reset();
                quiet = None;
                continue;
            }
            if let Some(t) = self.hang {
                if quiet.get_or_insert_with(Instant::now).elapsed() >= t {
                    let report = report();
                    amnet_core::diag!("amnet watchdog (AMNET_HANG_TIMEOUT): {report}");
                    return Err(Error::Hang {
                        millis: u64::try_from(t.as_millis()).unwrap_or(u64::MAX),
                        detail: report,
                    });
                }
            }
            idle.snooze(|| ep.keep_awake());
        }
    }

    /// Move every collective along as far as it can go without waiting. Returns whether
    /// anything happened.
    pub(crate) fn advance(&self) -> Result<bool> {
        self.advance_in(true)
    }

    /// `advance` from the layer's progress function, inside any amnet call that polls: runs
    /// no reduction step whose function is not `AMSAFE` (`collect`).
    pub(crate) fn advance_anywhere_safe(&self) -> Result<bool> {
        self.advance_in(false)
    }

    fn advance_in(&self, anywhere: bool) -> Result<bool> {
        let mut any = false;
        loop {
            let (outs, jobs) = {
                let mut st = self.lock();
                self.collect(&mut st, anywhere)
            };
            if outs.is_empty() && jobs.is_empty() {
                return Ok(any);
            }
            any = true;
            let mut jobs = jobs.into_iter();
            let r = self.send_all(outs).and_then(|()| {
                for j in jobs.by_ref() {
                    match j {
                        Job::Push { key, idx } => self.push(key, idx)?,
                        Job::Reduce { key } => self.reduce_step(key)?,
                        Job::Sched { key } => self.sched_run(key)?,
                    }
                }
                Ok(())
            });
            if let Err(e) = r {
                // The jobs not run give back their marks (`pushing`, `working`), which
                // `collect` set: nothing runs them now, and a later pass (or a detach,
                // which waits for the marks to clear) must not wait for them.
                let mut st = self.lock();
                for j in jobs {
                    let (Job::Push { key, .. } | Job::Reduce { key } | Job::Sched { key }) = j;
                    let Some(op) = st.ops.get_mut(&key) else {
                        continue;
                    };
                    match j {
                        Job::Push { idx, .. } => {
                            if let Some(p) = op.parts.get_mut(idx) {
                                p.pushing = false;
                            }
                        }
                        Job::Reduce { .. } | Job::Sched { .. } => op.working = false,
                    }
                }
                return Err(e);
            }
        }
    }

    fn send_all(&self, outs: Vec<Out>) -> Result<()> {
        for o in outs {
            match o {
                Out::Sig {
                    to,
                    group,
                    which,
                    round,
                } => {
                    let args = [
                        lo(group.seq),
                        hi(group.seq),
                        which,
                        round,
                        lo(group.team),
                        hi(group.team),
                    ];
                    // Direct-put notices never go to this rank (`put_targets` and
                    // `put_sources` leave it out).
                    if to == self.rank {
                        self.sig_arrived(group, which, round);
                    } else {
                        self.ep.layer(Layer::Coll).request(to, H_SIG, &args, &[])?;
                    }
                }
                Out::Stage {
                    to,
                    from,
                    key,
                    phase,
                    bytes,
                } => self.send_stage(to, from, key, phase, &bytes)?,
            }
        }
        Ok(())
    }

    fn chunk(&self) -> usize {
        self.ep.max_medium().max(64)
    }

    /// Send `bytes` to `dest` as requests of handler `h` carrying at most `chunk()` bytes each
    /// (at least one request, empty when `bytes` is); `args(done)` gives the arguments of the
    /// piece that starts `done` bytes in.
    fn send_pieces<const N: usize>(
        &self,
        dest: Rank,
        h: u8,
        bytes: &[u8],
        args: impl Fn(usize) -> [u32; N],
    ) -> Result<()> {
        let chunk = self.chunk();
        let mut done = 0;
        loop {
            let n = chunk.min(bytes.len() - done);
            self.ep
                .layer(Layer::Coll)
                .request(dest, h, &args(done), &bytes[done..done + n])?;
            done += n;
            if done >= bytes.len() {
                return Ok(());
            }
        }
    }

    fn send_data(
        &self,
        to: Rank,
        key: Key,
        part: usize,
        off: usize,
        src: usize,
        len: usize,
    ) -> Result<()> {
        // SAFETY: `src` was resolved from the caller's address for this participant and
        // checked to hold the source area (see `api::resolve`); the bulk contract keeps it
        // valid and untouched until the collective is synced, which cannot happen before
        // this send returns.
        let bytes = unsafe { std::slice::from_raw_parts(src as *const u8, len) };
        if to == self.rank {
            self.deliver(self.rank, key, part, off, bytes);
            return Ok(());
        }
        #[allow(clippy::cast_possible_truncation)] // participants fit in u32
        self.send_pieces(to, H_DATA, bytes, |done| {
            let o = (off + done) as u64;
            [
                lo(key.seq),
                hi(key.seq),
                part as u32,
                lo(o),
                hi(o),
                lo(key.team),
                hi(key.team),
            ]
        })
    }

    /// A block for rank `to` under `direct_puts`: written with the core's put at segment
    /// offset `dst` (the destination's, the same on every rank) plus `off`.
    fn put_data(
        &self,
        to: Rank,
        dst: u64,
        off: usize,
        src: usize,
        len: usize,
    ) -> Result<amnet_core::Handle> {
        let at = dst + off as u64;
        // SAFETY: as in `send_data`: the source area was resolved and checked at entry and
        // stays valid and untouched until the collective is synced, after this put's handle.
        let bytes = unsafe { std::slice::from_raw_parts(src as *const u8, len) };
        self.ep.put_nb(to, at, bytes)
    }

    fn send_stage(&self, to: Rank, from: u32, key: Key, phase: u32, bytes: &[u8]) -> Result<()> {
        if bytes.is_empty() {
            // Receivers count bytes, and know how many each rank sends.
            return Ok(());
        }
        if to == self.rank {
            self.stage_arrived(self.rank, from, key, phase, 0, bytes);
            return Ok(());
        }
        self.send_pieces(to, H_STAGE, bytes, |done| {
            let o = done as u64;
            [
                lo(key.seq),
                hi(key.seq),
                phase,
                lo(o),
                hi(o),
                lo(key.team),
                hi(key.team),
                from,
            ]
        })
    }

    /// Data from job rank `from` for local participant `part` at `off` of its destination.
    pub(crate) fn deliver(&self, from: Rank, key: Key, part: usize, off: usize, bytes: &[u8]) {
        let mut guard = self.lock();
        let st = &mut *guard;
        if st.failed.contains(&key) {
            return;
        }
        if st.flow.heard(from, key) {
            st.flow.unblock(&mut st.dirty);
        }
        let op = st.ops.entry(key).or_insert_with(|| Op::new(key));
        let idx = part.checked_sub(op.first);
        let open = op.spec.is_some() && idx.is_some_and(|i| i < op.parts.len() && op.parts[i].open);
        if !open {
            st.flow.hold(op, bytes.len());
            op.early.push((part, off, bytes.to_vec()));
            return;
        }
        let i = idx.unwrap_or(0);
        write_into(op, i, off, bytes);
        st.touch(key);
        self.work.store(true, std::sync::atomic::Ordering::Release);
    }

    /// Part of the stream that team rank `src` sends in `phase` of reduction `key`.
    fn stage_arrived(&self, from: Rank, src: u32, key: Key, phase: u32, off: usize, bytes: &[u8]) {
        let mut guard = self.lock();
        let st = &mut *guard;
        if st.failed.contains(&key) {
            return;
        }
        if st.flow.heard(from, key) {
            st.flow.unblock(&mut st.dirty);
        }
        let op = st.ops.entry(key).or_insert_with(|| Op::new(key));
        let ph = (phase & 1) as usize;
        let src = src as usize;
        // A team has at most as many ranks as the job: anything else is a corrupt message.
        if src >= self.size as usize {
            return;
        }
        st.flow.hold(op, bytes.len());
        if op.stage[ph].len() <= src {
            op.stage[ph].resize(src + 1, Vec::new());
        }
        let buf = &mut op.stage[ph][src];
        if buf.len() < off + bytes.len() {
            buf.resize(off + bytes.len(), 0);
        }
        buf[off..off + bytes.len()].copy_from_slice(bytes);
        op.stage_got[ph] += bytes.len();
        st.touch(key);
        self.work.store(true, std::sync::atomic::Ordering::Release);
    }

    fn sig_arrived(&self, group: Key, which: u32, round: u32) {
        let mut st = self.lock();
        if !st.groups.contains_key(&group) {
            st.pending.insert(group);
        }
        st.dirty.insert(group);
        st.groups
            .entry(group)
            .or_insert_with(Group::new)
            .arrive(which, round);
        self.work.store(true, std::sync::atomic::Ordering::Release);
    }

    /// Under the lock: what can happen now.
    ///
    /// `anywhere`: the caller is a coll call (or a core barrier settling detached groups), where
    /// every reduction step may run; otherwise (the progress function, inside any amnet call
    /// that polls) only the steps of collectives without a function or with an `AMSAFE` one,
    /// and the groups with a step left for later stay marked.
    fn collect(&self, st: &mut State, anywhere: bool) -> (Vec<Out>, Vec<Job>) {
        let mut outs = Vec::new();
        let mut jobs = Vec::new();
        if self.check {
            self.check_signatures(st);
        }
        if !st.flow.watch.is_empty() {
            self.flow_answer(st, &mut outs);
        }
        let mut dirty = std::mem::take(&mut st.dirty.v);
        // In key order (older groups first), each once.
        dirty.sort_unstable();
        dirty.dedup();
        for gid in dirty.drain(..) {
            if !st.pending.contains(&gid) {
                continue;
            }
            let Some(g) = st.groups.get(&gid) else {
                st.pending.remove(&gid);
                continue;
            };
            if g.complete || g.members.is_empty() {
                continue;
            }
            let Some(geo) = g.geo.clone() else {
                continue;
            };
            let members: Vec<Key> = g
                .members
                .iter()
                .map(|&seq| Key {
                    team: gid.team,
                    seq,
                })
                .collect();
            let closed = g.closed;
            let merged = g.merged;
            // Entry signal: once the group is closed and every member fully entered.
            let all_entered = members
                .iter()
                .all(|k| st.ops.get(k).is_some_and(Op::all_entered));
            let checked = members.iter().all(|k| {
                st.ops
                    .get(k)
                    .is_some_and(|o| o.checked_ok || o.error.is_some())
            });
            let g = st.groups.get_mut(&gid).expect("group present");
            if merged.entry && closed && all_entered && checked && !g.entry.started() {
                g.entry.start();
            }
            signal_sends(&mut g.entry, &geo, gid, SIG_ENTRY, &mut outs);
            let entry_done = !merged.entry || g.entry.done();
            // Members: pushes, opening, reductions.
            let mut all_local = true;
            // Every member done here, or (OUT_NOSYNC) its own part done.
            let mut all_own = true;
            // A reduction step left for a coll call (`anywhere` false, no AMSAFE function).
            let mut deferred = false;
            for &key in &members {
                let Some(op) = st.ops.get_mut(&key) else {
                    all_local = false;
                    all_own = false;
                    continue;
                };
                let Some(mode) = op.mode else {
                    all_local = false;
                    all_own = false;
                    continue;
                };
                if op.error.is_some() {
                    // A failed collective still ends together: every local image has entered
                    // (so every handle exists, and a late image cannot start the same number
                    // afresh), the entry round is over (no signal arrives after the group is
                    // gone) and no push or reduction step still reads a client's buffer.
                    op.local_done = op.all_entered()
                        && entry_done
                        && !op.working
                        && op.parts.iter().all(|p| !p.pushing);
                    all_local &= op.local_done;
                    all_own &= op.local_done;
                    continue;
                }
                let may_move = op.checked_ok && (!mode.needs_entry_signal() || entry_done);
                let spec = op.spec.clone().expect("entered op has a spec");
                // Outside checked mode and IN_ALLSYNC (where every rank entered before data
                // moves), sends wait for the early-data flow control.
                let may_move = may_move
                    && (op.flow_ok || self.check || mode.needs_entry_signal() || {
                        let mut charges = std::mem::take(&mut st.flow.charges);
                        self.flow_charges(op, &spec, &mut charges);
                        let budget = self.early_budget.load(std::sync::atomic::Ordering::Relaxed);
                        let ok =
                            flow_admit(&mut st.flow, budget, self.size, key, &charges, &mut outs);
                        st.flow.charges = charges;
                        if !ok {
                            st.flow.blocked.insert(gid);
                        }
                        ok
                    });
                let Some(op) = st.ops.get_mut(&key) else {
                    continue;
                };
                op.flow_ok |= may_move;
                if op.sched.is_some() {
                    if may_move && op.all_entered() && !op.working && op.sched_ready() {
                        if anywhere || self.fn_amsafe(&spec) {
                            op.working = true;
                            jobs.push(Job::Sched { key });
                        } else {
                            deferred = true;
                        }
                    }
                    op.local_done = op.sched.as_ref().is_some_and(|ss| ss.done);
                    all_local &= op.local_done;
                    all_own &= op.local_done || (mode.output == OutSync::No && op.sent_all());
                    continue;
                }
                if op.direct && mode.input == InSync::My && !op.open_sent && op.all_entered() {
                    // Direct puts under IN_MYSYNC: this rank's destination is open to the
                    // ranks that put into it.
                    op.open_sent = true;
                    if let Some(geo) = op.geo.as_ref() {
                        for q in put_sources(&spec, geo.me as usize) {
                            #[allow(clippy::cast_possible_truncation)] // team ranks fit in u32
                            outs.push(Out::Sig {
                                to: geo.world(q as u32),
                                group: key,
                                which: SIG_OPEN,
                                round: 0,
                            });
                        }
                    }
                }
                // Direct puts under IN_MYSYNC: the sends wait until every destination is open.
                let may_move = may_move && op.open_got >= op.open_want;
                if may_move {
                    for (i, p) in op.parts.iter_mut().enumerate() {
                        if p.entered && !p.pushed && !p.pushing {
                            p.pushing = true;
                            if spec.kind.is_reduction() {
                                // Reductions read sources in `reduce_step`; the part only
                                // counts as pushed then.
                                p.pushing = false;
                                p.pushed = true;
                                p.open = true;
                            } else {
                                jobs.push(Job::Push { key, idx: i });
                            }
                        }
                    }
                    if spec.kind.is_reduction()
                        && !op.working
                        && op.all_entered()
                        && op.rphase < 3
                        && reduction_ready(op, &spec)
                    {
                        if anywhere || self.fn_amsafe(&spec) {
                            op.working = true;
                            jobs.push(Job::Reduce { key });
                        } else {
                            deferred = true;
                        }
                    }
                }
                if !op.local_done {
                    let done = if spec.kind.is_reduction() {
                        op.rphase == 3
                    } else {
                        op.all_entered()
                            && op.landed_got >= op.landed_want
                            && op
                                .parts
                                .iter()
                                .all(|p| p.pushed && p.open && p.got >= p.want)
                    };
                    op.local_done = done;
                }
                all_local &= op.local_done;
                all_own &= op.local_done || (mode.output == OutSync::No && op.sent_all());
            }
            if deferred {
                st.dirty.insert(gid);
            }
            let g = st.groups.get_mut(&gid).expect("group present");
            if closed && entry_done && all_own && !merged.exit {
                // OUT_NOSYNC members need no more than their own part: the handle may go.
                g.syncable = true;
            }
            if all_local && closed {
                if merged.exit && !g.exit.started() {
                    g.exit.start();
                }
                signal_sends(&mut g.exit, &geo, gid, SIG_EXIT, &mut outs);
                if !merged.exit || g.exit.done() {
                    g.complete = true;
                    g.syncable = true;
                    st.pending.remove(&gid);
                    if g.detached {
                        self.free_group(st, gid);
                    }
                }
            }
        }
        // Keep the buffer for the next visit.
        if st.dirty.v.is_empty() {
            st.dirty.v = dirty;
        }
        (outs, jobs)
    }

    /// Forget group `gid` and its members (every handle was synced and it is complete). A
    /// member that failed leaves its key in `failed`; one that failed after its handle was
    /// synced (a detached group) leaves its error for the next barrier.
    fn free_group(&self, st: &mut State, gid: Key) {
        let Some(g) = st.groups.remove(&gid) else {
            return;
        };
        if g.detached {
            st.detached.remove(&g.ord);
        }
        for seq in g.members {
            let k = Key {
                team: gid.team,
                seq,
            };
            if let Some(op) = st.ops.remove(&k) {
                if let Some(e) = op.error {
                    st.failed.insert(k);
                    if g.detached {
                        let text = format!("{} (synced early, OUT_NOSYNC): {e}", describe(k));
                        amnet_core::diag!("amnet coll: rank {}: {text}", self.rank);
                        st.late_errors.push(text);
                    }
                }
            }
        }
    }

    /// Complete handle `h` if its group may be synced: Ok(true) when it was (the handle is dead
    /// then). A group that promises data waits for every earlier detached group; the last
    /// handle of a group that is not complete yet leaves it detached.
    pub(crate) fn finish_handle(&self, h: u64) -> Result<bool> {
        let mut st = self.lock();
        let Some(rec) = st.handles.get(&h) else {
            return Err(Error::BadHandle(
                "unknown collective handle (already synced, or from another rank)",
            ));
        };
        if rec.thread != std::thread::current().id() {
            return Err(Error::BadHandle(
                "a collective handle must be synced by the thread that started it",
            ));
        }
        let gid = rec.group;
        let Some(g) = st.groups.get(&gid) else {
            return Err(Error::BadHandle("collective handle without a group"));
        };
        if !g.syncable || (g.promises && st.detached.range(..g.ord).next().is_some()) {
            return Ok(false);
        }
        st.handles.remove(&h);
        st.unsynced = st.unsynced.saturating_sub(1);
        if let Some(ts) = st.teams.get_mut(&gid.team) {
            ts.unsynced = ts.unsynced.saturating_sub(1);
        }
        let g = st.groups.get_mut(&gid).expect("checked above");
        g.handles = g.handles.saturating_sub(1);
        let last = g.handles == 0;
        let complete = g.complete;
        let members = g.members.clone();
        let err = members.iter().find_map(|&seq| {
            st.ops
                .get(&Key {
                    team: gid.team,
                    seq,
                })
                .and_then(|o| o.error.clone())
        });
        if last {
            if complete {
                self.free_group(&mut st, gid);
            } else {
                let g = st.groups.get_mut(&gid).expect("checked above");
                g.detached = true;
                let ord = g.ord;
                st.detached.insert(ord, gid);
                st.dirty.insert(gid);
            }
        }
        match err {
            Some(e) => Err(e),
            None => Ok(true),
        }
    }

    /// Every detached group of this rank is complete here.
    pub(crate) fn no_detached(&self) -> bool {
        self.lock().detached.is_empty()
    }

    /// Before a barrier: complete every detached group here (their data may still be on its
    /// way), so that what the barrier separates is in place. Returns why the barrier may not
    /// start, if something keeps them from completing (a hang with `AMNET_HANG_TIMEOUT`), or
    /// an error that a detached collective met after its sync.
    fn settle_detached(&self) -> Option<String> {
        let mut idle = self.ep.backoff();
        let mut last = Instant::now();
        loop {
            {
                let mut st = self.lock();
                if st.detached.is_empty() {
                    return (!st.late_errors.is_empty())
                        .then(|| std::mem::take(&mut st.late_errors).join("; "));
                }
            }
            let n = match self.ep.poll() {
                Ok(n) => n,
                Err(e) => return Some(format!("collectives synced early could not complete: {e}")),
            };
            let moved = match self.advance() {
                Ok(m) => m,
                Err(e) => return Some(format!("collectives synced early could not complete: {e}")),
            };
            if n > 0 || moved {
                idle.reset();
                last = Instant::now();
                continue;
            }
            if self.hang.is_some_and(|t| last.elapsed() >= t) {
                return Some(format!(
                    "collectives synced early (OUT_NOSYNC) are not complete: {}",
                    self.report()
                ));
            }
            idle.snooze(|| self.ep.keep_awake());
        }
    }

    /// Issue the sends of local participant `idx` of `key` and open its destination: before
    /// the sends where its source and destination are apart (data from peers then lands in
    /// place instead of in early buffers while this participant is still sending), after them
    /// where they overlap (in place: nothing may be written before the source was read).
    fn push(&self, key: Key, idx: usize) -> Result<()> {
        let (spec, src, dst, first, image_space, geo, direct, landed) = {
            let st = self.lock();
            let Some(op) = st.ops.get(&key) else {
                return Ok(());
            };
            let (Some(spec), Some(geo)) = (op.spec.clone(), op.geo.clone()) else {
                return Ok(());
            };
            let (src, dst) = (op.parts[idx].src, op.parts[idx].dst);
            let direct = op.direct.then_some(op.direct_off);
            let landed = op.direct && op.mode.is_some_and(|m| m.output == OutSync::My);
            (
                spec,
                src,
                dst,
                op.first,
                op.image_space,
                geo,
                direct,
                landed,
            )
        };
        let p = first + idx;
        let apart = src.ptr.saturating_add(src.len) <= dst.ptr
            || dst.ptr.saturating_add(dst.len) <= src.ptr;
        let transfers = spec.transfers_from(p);
        if apart {
            // The participant's blocks to itself go straight from its source to its
            // destination, instead of through an early-data copy: nothing written into the
            // destination meanwhile can change the source.
            let mut st = self.lock();
            if let Some(op) = st.ops.get_mut(&key) {
                open_part(op, idx, p, src, transfers.iter().filter(|t| t.to == p));
            }
            st.touch(key);
        }
        let mut puts = Vec::new();
        let sent = transfers.iter().try_for_each(|t| {
            let to = geo.world(geo.owner(image_space, t.to));
            if apart && t.to == p {
                Ok(())
            } else if let Some(dst) = direct.filter(|_| to != self.rank) {
                puts.push(self.put_data(to, dst, t.dst_off, src.ptr + t.src_off, t.len)?);
                Ok(())
            } else {
                self.send_data(to, key, t.to, t.dst_off, src.ptr + t.src_off, t.len)
            }
        });
        // The participant has pushed once its puts are in place at their targets: a barrier
        // after its sync then separates them from what follows everywhere.
        let sent = sent.and_then(|()| puts.iter_mut().try_for_each(|h| self.ep.wait_sync(h)));
        // Under OUT_MYSYNC, each rank put into learns that its blocks are in place.
        let sent = sent.and_then(|()| {
            if !landed {
                return Ok(());
            }
            #[allow(clippy::cast_possible_truncation)] // team ranks fit in u32
            let outs = put_targets(&spec, p)
                .into_iter()
                .map(|q| Out::Sig {
                    to: geo.world(q as u32),
                    group: key,
                    which: SIG_LANDED,
                    round: 0,
                })
                .collect();
            self.send_all(outs)
        });
        if let Err(e) = sent {
            // Some sends may be out: the part is not pushed again, and the collective fails.
            let mut st = self.lock();
            if let Some(op) = st.ops.get_mut(&key) {
                op.parts[idx].pushing = false;
                op.parts[idx].pushed = true;
                op.error.get_or_insert_with(|| e.clone());
            }
            return Err(e);
        }
        let mut st = self.lock();
        if let Some(op) = st.ops.get_mut(&key) {
            let part = &mut op.parts[idx];
            part.pushing = false;
            part.pushed = true;
            if !part.open {
                open_part(op, idx, p, src, std::iter::empty());
            }
        }
        st.touch(key);
        Ok(())
    }

    /// Run a scheduled collective as far as it can go now (outside the lock; one job per op at
    /// a time, which `working` ensures). Sends and local steps run without the lock; received
    /// messages are taken out under it.
    fn sched_run(&self, key: Key) -> Result<()> {
        loop {
            let step = {
                let mut st = self.lock();
                let Some(op) = st.ops.get_mut(&key) else {
                    return Ok(());
                };
                let fe = op.spec.as_ref().and_then(|s| {
                    s.function(&self.fns)
                        .map(|e| (e.f.clone(), e.flags, s.es, s.arg))
                });
                let kernel = op
                    .spec
                    .as_ref()
                    .filter(|s| s.call_fn.is_none())
                    .and_then(|s| self.kernels.get(s.func).cloned().flatten());
                let (Some(geo), Some(part)) = (op.geo.clone(), op.parts.first()) else {
                    op.working = false;
                    return Ok(());
                };
                let (src, dst) = (part.src, part.dst);
                let ready = op.sched_ready();
                let Some(ss) = op.sched.as_mut() else {
                    op.working = false;
                    return Ok(());
                };
                if ss.done || !ready {
                    op.working = false;
                    st.touch(key);
                    return Ok(());
                }
                let sched = ss.sched.clone();
                let tmp = std::mem::take(&mut ss.tmp);
                let what = if ss.round == sched.rounds.len() {
                    SchedStep::Finish
                } else if !ss.started {
                    SchedStep::Start(ss.round)
                } else {
                    let r = ss.round;
                    let inputs: Vec<Vec<u8>> = sched.rounds[r]
                        .recvs
                        .iter()
                        .map(|rv| {
                            op.sched_in
                                .remove(&(rv.from, rv.tag))
                                .map(|(b, _)| b)
                                .unwrap_or_default()
                        })
                        .collect();
                    SchedStep::Apply(r, inputs)
                };
                (sched, tmp, what, geo, src, dst, (fe, kernel))
            };
            let (sched, tmp, what, geo, src, dst, (fe, kernel)) = step;
            let mut mem = RawMem { src, dst, tmp };
            let combine = FnCombine(fe, kernel);
            let r: Result<()> = (|| {
                match &what {
                    SchedStep::Finish => {
                        for l in &sched.post {
                            crate::sched::local(&mut mem, l, &combine).map_err(sched_err)?;
                        }
                    }
                    SchedStep::Start(r) => {
                        let round = &sched.rounds[*r];
                        for l in &round.pre {
                            crate::sched::local(&mut mem, l, &combine).map_err(sched_err)?;
                        }
                        for snd in &round.sends {
                            let bytes = mem.read(snd.from).map_err(sched_err)?;
                            self.send_sched(&geo, key, snd.to, snd.tag, &bytes)?;
                        }
                    }
                    SchedStep::Apply(r, inputs) => {
                        for (rv, m) in sched.rounds[*r].recvs.iter().zip(inputs) {
                            crate::sched::apply(&mut mem, rv, m, &combine).map_err(sched_err)?;
                        }
                    }
                }
                Ok(())
            })();
            let mut st = self.lock();
            st.touch(key);
            let Some(op) = st.ops.get_mut(&key) else {
                return Ok(());
            };
            if let Some(ss) = op.sched.as_mut() {
                ss.tmp = mem.tmp;
                match what {
                    SchedStep::Finish => ss.done = true,
                    SchedStep::Start(_) => ss.started = true,
                    SchedStep::Apply(..) => {
                        ss.round += 1;
                        ss.started = false;
                    }
                }
                if let Err(e) = r {
                    ss.done = true;
                    op.working = false;
                    if op.error.is_none() {
                        op.error = Some(e);
                    }
                    return Ok(());
                }
            }
        }
    }

    /// A scheduled algorithm's message to team rank `to`, in chunks of at most `max_medium`.
    fn send_sched(&self, geo: &Geo, key: Key, to: u32, tag: u32, bytes: &[u8]) -> Result<()> {
        let total = u32::try_from(bytes.len()).map_err(|_| Error::Usage {
            op: "collective",
            detail: format!("a scheduled message of {} bytes exceeds 4 GiB", bytes.len()),
        })?;
        if to == geo.me {
            self.sched_arrived(self.rank, key, geo.me, tag, 0, bytes.len(), bytes);
            return Ok(());
        }
        self.send_pieces(geo.world(to), H_SCHED, bytes, |done| {
            let o = done as u64;
            [
                lo(key.seq),
                hi(key.seq),
                tag,
                lo(o),
                hi(o),
                lo(key.team),
                hi(key.team),
                geo.me,
                total,
            ]
        })
    }

    /// Part of a scheduled message from team rank `from`: `bytes` at `off` of `total`.
    #[allow(clippy::too_many_arguments)]
    fn sched_arrived(
        &self,
        sender: Rank,
        key: Key,
        from: u32,
        tag: u32,
        off: usize,
        total: usize,
        bytes: &[u8],
    ) {
        let mut guard = self.lock();
        let st = &mut *guard;
        if st.failed.contains(&key) || from >= self.size {
            return;
        }
        if st.flow.heard(sender, key) {
            st.flow.unblock(&mut st.dirty);
        }
        let op = st.ops.entry(key).or_insert_with(|| Op::new(key));
        let e = op
            .sched_in
            .entry((from, tag))
            .or_insert_with(|| (vec![0u8; total], 0));
        if e.0.len() < total {
            e.0.resize(total, 0);
        }
        let mut held = 0;
        if let Some(d) = off
            .checked_add(bytes.len())
            .and_then(|end| e.0.get_mut(off..end))
        {
            d.copy_from_slice(bytes);
            e.1 += bytes.len();
            held = bytes.len();
        }
        st.flow.hold(op, held);
        st.touch(key);
        self.work.store(true, std::sync::atomic::Ordering::Release);
    }

    /// Run the next step of a reduction (outside the lock).
    fn reduce_step(&self, key: Key) -> Result<()> {
        let r = crate::reduce::step(self, key);
        let mut st = self.lock();
        st.touch(key);
        let Some(op) = st.ops.get_mut(&key) else {
            return Ok(());
        };
        let geo = op.geo.clone();
        match (r, geo) {
            (Ok(outs), Some(geo)) => {
                // The op stays `working` until its streams are out: `sent_all` needs them.
                drop(st);
                let sent = self.send_all(
                    outs.into_iter()
                        .map(|(to, phase, bytes)| Out::Stage {
                            to: geo.world(to),
                            from: geo.me,
                            key,
                            phase,
                            bytes,
                        })
                        .collect(),
                );
                let mut st = self.lock();
                st.touch(key);
                if let Some(op) = st.ops.get_mut(&key) {
                    op.working = false;
                }
                sent?;
            }
            (Ok(_), None) => op.working = false,
            (Err(e), _) => {
                op.working = false;
                op.error = Some(e);
                op.rphase = 3;
            }
        }
        Ok(())
    }

    /// Checked mode: team rank `src`'s signature arrived.
    fn check_arrived(&self, src: u32, key: Key, sig: &[u8]) {
        let mut st = self.lock();
        if st.failed.contains(&key) || src >= self.size {
            return;
        }
        let op = st.ops.entry(key).or_insert_with(|| Op::new(key));
        let src = src as usize;
        if op.sigs.len() <= src {
            op.sigs.resize(src + 1, None);
        }
        op.sigs[src] = Some(sig.to_vec());
        st.touch(key);
        self.work.store(true, std::sync::atomic::Ordering::Release);
    }

    /// Checked mode: a rank found that two of its images disagree (`detail`); the
    /// collective fails everywhere.
    fn mismatch_arrived(&self, key: Key, detail: &[u8]) {
        let mut st = self.lock();
        if st.failed.contains(&key) {
            return;
        }
        let op = st.ops.entry(key).or_insert_with(|| Op::new(key));
        if op.error.is_none() {
            op.error = Some(Error::Mismatch {
                what: "collective arguments (AMNET_COLL_CHECK)",
                detail: String::from_utf8_lossy(detail).into_owned(),
            });
        }
        st.touch(key);
        self.work.store(true, std::sync::atomic::Ordering::Release);
    }

    /// Checked mode: tell every other member that two images of this rank disagree on `key`.
    pub(crate) fn send_mismatch(&self, geo: &Geo, key: Key, detail: &str) -> Result<()> {
        let text = detail.as_bytes();
        let text = &text[..text.len().min(self.ep.max_medium())];
        for t in 0..geo.size() {
            if t != geo.me {
                self.ep.layer(Layer::Coll).request(
                    geo.world(t),
                    H_CHECK,
                    &[
                        lo(key.seq),
                        hi(key.seq),
                        CHECK_MISMATCH,
                        lo(key.team),
                        hi(key.team),
                        geo.me,
                    ],
                    text,
                )?;
            }
        }
        Ok(())
    }

    /// Checked mode: compare the signatures once all arrived.
    pub(crate) fn check_signatures(&self, st: &mut State) {
        // Only members of groups something happened to: a signature arriving or an entry
        // marks its group.
        let mut keys: Vec<Key> = st
            .dirty
            .v
            .iter()
            .filter_map(|g| st.groups.get(g).map(|gr| (g.team, gr)))
            .flat_map(|(team, g)| g.members.iter().map(move |&seq| Key { team, seq }))
            .collect();
        keys.sort_unstable();
        keys.dedup();
        for key in keys {
            let Some(op) = st.ops.get_mut(&key) else {
                continue;
            };
            if op.checked_ok || op.error.is_some() || op.spec.is_none() {
                continue;
            }
            let Some(geo) = op.geo.clone() else {
                continue;
            };
            if op.sigs.len() < geo.members.len() || op.sigs.iter().any(Option::is_none) {
                continue;
            }
            let order = order_violation(&op.sigs, &geo, &st.teams, key);
            let Some(op) = st.ops.get_mut(&key) else {
                continue;
            };
            match (compare_signatures(&op.sigs, &geo), order) {
                (None, None) => op.checked_ok = true,
                (Some(detail), _) => {
                    op.error = Some(Error::Mismatch {
                        what: "collective arguments (AMNET_COLL_CHECK)",
                        detail: format!("{}: {detail}", describe(key)),
                    })
                }
                (None, Some(detail)) => {
                    op.error = Some(Error::Mismatch {
                        what: "the order of collectives on teams (AMNET_COLL_CHECK)",
                        detail: format!("{}: {detail}", describe(key)),
                    })
                }
            }
        }
    }

    /// Checked mode: the signature of a newly entered op goes to every other member.
    pub(crate) fn send_signature(&self, geo: &Geo, key: Key, sig: &[u8]) -> Result<()> {
        for t in 0..geo.size() {
            if t != geo.me {
                self.ep.layer(Layer::Coll).request(
                    geo.world(t),
                    H_CHECK,
                    &[
                        lo(key.seq),
                        hi(key.seq),
                        CHECK_SIGNATURE,
                        lo(key.team),
                        hi(key.team),
                        geo.me,
                    ],
                    sig,
                )?;
            }
        }
        Ok(())
    }

    /// A report of everything in flight, for the watchdog.
    pub(crate) fn report(&self) -> String {
        let st = self.lock();
        let mut lines = Vec::new();
        let mut gids: Vec<&Key> = st.groups.keys().collect();
        gids.sort();
        for gid in gids {
            let g = &st.groups[gid];
            if g.complete {
                continue;
            }
            let who = |t: u32| {
                g.geo
                    .as_ref()
                    .map_or(format!("rank {t}"), |geo| geo.name(t))
            };
            let mut what = Vec::new();
            if g.merged.entry && !g.entry.done() {
                match g.entry.waiting_for() {
                    Some((k, from)) => what.push(wait_text(&g.entry, "entry", k, &who(from))),
                    None => what.push("every local participant to enter (entry signal)".into()),
                }
            }
            for s in &g.members {
                let Some(op) = st.ops.get(&Key {
                    team: gid.team,
                    seq: *s,
                }) else {
                    continue;
                };
                let name = op.spec.as_ref().map_or("?", |s| s.kind.name());
                if !op.checked_ok && op.error.is_none() {
                    let missing: Vec<usize> = op
                        .sigs
                        .iter()
                        .enumerate()
                        .filter(|(_, s)| s.is_none())
                        .map(|(r, _)| r)
                        .collect();
                    what.push(format!("{name} #{s}: signatures of team ranks {missing:?}"));
                }
                for (i, p) in op.parts.iter().enumerate() {
                    let pi = op.first + i;
                    if !p.entered {
                        what.push(format!("{name} #{s}: participant {pi} to enter"));
                    } else if p.got < p.want {
                        what.push(format!(
                            "{name} #{s}: {} more bytes for participant {pi}",
                            p.want - p.got
                        ));
                    }
                }
                if op.spec.as_ref().is_some_and(|s| s.kind.is_reduction()) && op.rphase < 3 {
                    what.push(format!(
                        "{name} #{s}: reduction step {} (operands received: {:?} bytes)",
                        op.rphase, op.stage_got
                    ));
                }
            }
            if g.merged.exit && g.exit.started() && !g.exit.done() {
                if let Some((k, from)) = g.exit.waiting_for() {
                    what.push(wait_text(&g.exit, "exit", k, &who(from)));
                }
            }
            lines.push(format!(
                "  {} group #{}{} ({} member(s), {:.1} s old) waits for: {}",
                team_name(gid.team),
                gid.seq,
                if g.detached { " (synced early)" } else { "" },
                g.members.len(),
                g.started.elapsed().as_secs_f64(),
                if what.is_empty() {
                    "nothing (ready to complete)".to_string()
                } else {
                    what.join("; ")
                }
            ));
        }
        if lines.is_empty() {
            format!("rank {}: no collectives in flight", self.rank)
        } else {
            format!(
                "rank {}: collectives in flight:\n{}",
                self.rank,
                lines.join("\n")
            )
        }
    }
}

/// Queue the signals `d` may send now for `group` (peers are team ranks of `geo`).
fn signal_sends(d: &mut Signal, geo: &Geo, group: Key, which: u32, outs: &mut Vec<Out>) {
    outs.extend(d.sends().into_iter().map(|(to, round)| Out::Sig {
        to: geo.world(to),
        group,
        which,
        round,
    }));
}

/// What a signal waits for, for hang reports: "entry signal round K from rank F" (dissemination),
/// "entry signal (tree) from child rank F" or "... release from rank F" (tree).
fn wait_text(sig: &Signal, which: &str, round: u32, who: &str) -> String {
    match sig.alg() {
        SignalAlg::Dissemination => format!("{which} signal round {round} from {who}"),
        SignalAlg::Tree if round == TREE_DOWN => {
            format!("{which} signal (tree) release from {who}")
        }
        SignalAlg::Tree => format!("{which} signal (tree) from child {who}"),
    }
}

/// "team 0x.." for messages, "world" for the world team.
pub(crate) fn team_name(team: u64) -> String {
    if team == 0 {
        "world".into()
    } else {
        format!("team {team:#x}")
    }
}

/// "collective #N" on the world team, "collective #N of team 0x.." otherwise.
pub(crate) fn describe(key: Key) -> String {
    if key.team == 0 {
        format!("collective #{}", key.seq)
    } else {
        format!("collective #{} of {}", key.seq, team_name(key.team))
    }
}

/// Open local participant `idx` (participant `p`) of `op`: apply what arrived early for it,
/// then its blocks to itself in `own`, copied from its source area `src`.
fn open_part<'a>(
    op: &mut Op,
    idx: usize,
    p: usize,
    src: Area,
    own: impl Iterator<Item = &'a crate::plan::Transfer>,
) {
    op.parts[idx].open = true;
    let early = std::mem::take(&mut op.early);
    for (q, off, bytes) in early {
        if q == p {
            write_into(op, idx, off, &bytes);
        } else {
            op.early.push((q, off, bytes));
        }
    }
    for t in own {
        // SAFETY: as in `send_data`: the source area was resolved and checked at entry to
        // hold this block, and the bulk contract keeps it valid and untouched until the
        // collective is synced; the caller passes own blocks only where the source does not
        // overlap the destination.
        let bytes =
            unsafe { std::slice::from_raw_parts((src.ptr + t.src_off) as *const u8, t.len) };
        write_into(op, idx, t.dst_off, bytes);
    }
}

fn write_into(op: &mut Op, i: usize, off: usize, bytes: &[u8]) {
    let part = &mut op.parts[i];
    let end = off.checked_add(bytes.len());
    if !matches!(end, Some(e) if e <= part.dst.len) {
        op.error = Some(Error::Usage {
            op: "collective",
            detail: format!(
                "{}: a peer sent {} bytes at offset {off} for participant {}, whose \
                 destination holds {} bytes: the ranks disagree on the sizes (run with \
                 AMNET_COLL_CHECK=1 to find which)",
                describe(op.key),
                bytes.len(),
                op.first + i,
                part.dst.len
            ),
        });
        return;
    }
    let to = (part.dst.ptr + off) as *mut u8;
    if !std::ptr::eq(bytes.as_ptr(), to) {
        // SAFETY: the destination area was resolved and bounds-checked at entry and stays
        // valid and unaccessed by the client until the collective is synced (bulk contract);
        // the range was checked just above. The bytes come from a message buffer or, for a
        // participant's block to itself, from its source, which may overlap the destination
        // in place: `copy` allows that (and identical ranges are skipped above).
        unsafe {
            std::ptr::copy(bytes.as_ptr(), to, bytes.len());
        }
    }
    part.got += bytes.len();
}

/// Direct puts at every block size (`Shared::direct_puts`): under `IN_NOSYNC` with
/// `OUT_NOSYNC` or `OUT_ALLSYNC`, where they need no notices.
pub(crate) fn direct_any_size(mode: &Mode) -> bool {
    mode.input == InSync::No && mode.output != OutSync::My
}

/// Under direct puts (rank participants): the participants that participant `me` puts blocks
/// into, in order.
fn put_targets(spec: &Spec, me: usize) -> Vec<usize> {
    let mut v: Vec<usize> = spec
        .transfers_from(me)
        .into_iter()
        .map(|t| t.to)
        .filter(|&q| q != me)
        .collect();
    v.sort_unstable();
    v.dedup();
    v
}

/// Under direct puts (rank participants): the participants that put blocks into participant
/// `me`, in order.
fn put_sources(spec: &Spec, me: usize) -> Vec<usize> {
    (0..spec.np)
        .filter(|&q| q != me && spec.transfers_from(q).iter().any(|t| t.to == me))
        .collect()
}

fn reduction_ready(op: &Op, spec: &Spec) -> bool {
    crate::reduce::ready(op, spec)
}

// ----- handlers ------------------------------------------------------------------------

fn key(sl: u32, sh: u32, tl: u32, th: u32) -> Key {
    Key {
        team: join(tl, th),
        seq: join(sl, sh),
    }
}

fn on_data(s: &Shared, tok: &mut Token<'_>, args: &[u32], payload: &[u8]) {
    let [sl, sh, part, ol, oh, tl, th, ..] = *args else {
        return;
    };
    s.deliver(
        tok.src(),
        key(sl, sh, tl, th),
        part as usize,
        addr(join(ol, oh)),
        payload,
    );
}

fn on_stage(s: &Shared, tok: &mut Token<'_>, args: &[u32], payload: &[u8]) {
    let [sl, sh, phase, ol, oh, tl, th, from, ..] = *args else {
        return;
    };
    s.stage_arrived(
        tok.src(),
        from,
        key(sl, sh, tl, th),
        phase,
        addr(join(ol, oh)),
        payload,
    );
}

fn on_sig(s: &Shared, tok: &mut Token<'_>, args: &[u32], _payload: &[u8]) {
    let [gl, gh, which, round, tl, th, ..] = *args else {
        return;
    };
    if which == SIG_ASK || which == SIG_TOLD {
        s.flow_arrived(tok.src(), which, key(gl, gh, tl, th));
    } else if which == SIG_OPEN || which == SIG_LANDED {
        s.note_arrived(which, key(gl, gh, tl, th));
    } else {
        s.sig_arrived(key(gl, gh, tl, th), which, round);
    }
}

fn on_check(s: &Shared, _tok: &mut Token<'_>, args: &[u32], payload: &[u8]) {
    let [sl, sh, kind, tl, th, from, ..] = *args else {
        return;
    };
    if kind == CHECK_MISMATCH {
        s.mismatch_arrived(key(sl, sh, tl, th), payload);
    } else {
        s.check_arrived(from, key(sl, sh, tl, th), payload);
    }
}

fn on_sched(s: &Shared, tok: &mut Token<'_>, args: &[u32], payload: &[u8]) {
    let [sl, sh, tag, ol, oh, tl, th, from, total, ..] = *args else {
        return;
    };
    s.sched_arrived(
        tok.src(),
        key(sl, sh, tl, th),
        from,
        tag,
        addr(join(ol, oh)),
        total as usize,
        payload,
    );
}

/// A table function as a schedule's combination: elementwise calls with one left and one right
/// operand, or one call that folds a run of elements or computes a run's prefixes after a
/// carry (as the flat reductions do).
/// A built-in's elementwise kernel, where the call's function is one, does `combine` in one
/// call.
struct FnCombine(
    Option<(Arc<crate::types::ReduceFn>, u32, usize, u32)>,
    Option<crate::builtin::Kernel>,
);

impl crate::sched::Combine for FnCombine {
    fn combine(&self, out: &mut [u8], a: &[u8], b: &[u8]) {
        if let Some(k) = &self.1 {
            if out.len() == a.len() && a.len() == b.len() {
                out.copy_from_slice(a);
                k(out, b);
                return;
            }
        }
        let Some((f, flags, es, arg)) = &self.0 else {
            return;
        };
        let es = (*es).max(1);
        let fl = flags & crate::types::fn_flags::NONCOMM;
        for i in 0..out.len() / es {
            let r = i * es..(i + 1) * es;
            f(
                &mut out[r.clone()],
                1,
                &a[r.clone()],
                1,
                &b[r],
                es,
                fl,
                *arg,
            );
        }
    }

    fn fold(&self, out: &mut [u8], xs: &[u8]) {
        let Some((f, flags, es, arg)) = &self.0 else {
            return;
        };
        let es = (*es).max(1);
        let m = xs.len() / es;
        if m <= 1 {
            let n = out.len().min(xs.len());
            out[..n].copy_from_slice(&xs[..n]);
            return;
        }
        let fl = flags & crate::types::fn_flags::NONCOMM;
        f(
            out,
            1,
            &xs[..(m - 1) * es],
            m - 1,
            &xs[(m - 1) * es..m * es],
            es,
            fl,
            *arg,
        );
    }

    fn scan(&self, out: &mut [u8], carry: Option<&[u8]>, xs: &[u8]) {
        let Some((f, flags, es, arg)) = &self.0 else {
            return;
        };
        let es = (*es).max(1);
        let m = xs.len() / es;
        if m == 0 {
            return;
        }
        let (left, lc) = carry.map_or((&[][..], 0), |c| (c, 1));
        let fl = flags & crate::types::fn_flags::NONCOMM;
        f(out, m, left, lc, xs, es, fl, *arg);
    }
}

/// What one pass of [`Shared::sched_run`] does.
enum SchedStep {
    Start(usize),
    Apply(usize, Vec<Vec<u8>>),
    Finish,
}

fn sched_err(detail: String) -> Error {
    Error::Usage {
        op: "collective",
        detail: format!("scheduled algorithm: {detail}"),
    }
}

/// A scheduled collective's areas: the participant's source and destination (client memory,
/// resolved at entry) and the schedule's scratch buffer.
struct RawMem {
    src: Area,
    dst: Area,
    tmp: Vec<u8>,
}

impl RawMem {
    /// The address of client range `r` (source or destination), checked against its area.
    fn client(&self, r: Range) -> Result<usize, String> {
        let a = if r.buf == Buf::Src {
            self.src
        } else {
            self.dst
        };
        match r.off.checked_add(r.len) {
            Some(end) if end <= a.len => Ok(a.ptr + r.off),
            _ => Err(format!("{r:?} is outside its area of {} bytes", a.len)),
        }
    }
}

impl Mem for RawMem {
    fn read(&self, r: Range) -> Result<Vec<u8>, String> {
        if r.buf == Buf::Tmp {
            return r
                .off
                .checked_add(r.len)
                .and_then(|e| self.tmp.get(r.off..e))
                .map(<[u8]>::to_vec)
                .ok_or_else(|| format!("{r:?} is outside the {} scratch bytes", self.tmp.len()));
        }
        let p = self.client(r)?;
        let mut v = vec![0u8; r.len];
        // SAFETY: `client` checked the range against the participant's source or destination,
        // resolved and bounds-checked at entry and kept valid and untouched by the client
        // until the collective is synced (bulk contract); `v` is a fresh allocation.
        unsafe { amnet_core::mem::copy(p as *const u8, v.as_mut_ptr(), r.len) };
        Ok(v)
    }

    fn write(&mut self, r: Range, bytes: &[u8]) -> Result<(), String> {
        if bytes.len() != r.len {
            return Err(format!("{} bytes for {r:?}", bytes.len()));
        }
        if r.buf == Buf::Tmp {
            let n = self.tmp.len();
            r.off
                .checked_add(r.len)
                .and_then(|e| self.tmp.get_mut(r.off..e))
                .ok_or_else(|| format!("{r:?} is outside the {n} scratch bytes"))?
                .copy_from_slice(bytes);
            return Ok(());
        }
        let p = self.client(r)?;
        // SAFETY: as in `read`, for writes: a destination is writable by the collective, and a
        // source a schedule writes is an in-place source inside the destination; `bytes` is a
        // separate buffer (a message, or a copy made by `read`).
        unsafe { amnet_core::mem::copy(bytes.as_ptr(), p as *mut u8, r.len) };
        Ok(())
    }
}

fn addr(v: u64) -> usize {
    usize::try_from(v).unwrap_or(usize::MAX)
}

// ----- checked mode ------------------------------------------------------------------------

/// The agreed arguments of a call, encoded field by field.
pub(crate) fn signature(spec: &Spec, mode: &Mode) -> Vec<u8> {
    let mut v = Vec::new();
    let mut put = |x: u64| v.extend_from_slice(&x.to_le_bytes());
    put(u64::from(spec.kind.code()));
    put(spec.root as u64);
    put(spec.np as u64);
    put(u64::from(mode.agreement_bits()));
    put(spec.es as u64);
    put(spec.n as u64);
    put(spec.src_lay.blk as u64);
    put(spec.src_lay.off as u64);
    put(spec.dst_lay.blk as u64);
    put(spec.dst_lay.off as u64);
    put(spec.func as u64);
    put(u64::from(spec.arg));
    // The sizes go as their number and a hash, so that the signature is the same small
    // message at any scale (exchange_v has np^2 of them).
    let mut h = Fnv::new();
    for &c in &spec.counts {
        h.add(c as u64);
    }
    put(spec.counts.iter().map(|&c| c as u64).sum());
    put(spec.counts.len() as u64);
    put(h.0);
    // The algorithm the selector chose: every rank must run the same one.
    let mut h = Fnv::new();
    for b in spec.alg.bytes() {
        h.add(u64::from(b));
    }
    for (k, v) in &spec.params {
        for b in k.bytes() {
            h.add(u64::from(b));
        }
        h.add(*v);
    }
    put(h.0);
    v
}

/// FNV-1a over 64-bit words.
struct Fnv(u64);

impl Fnv {
    fn new() -> Fnv {
        Fnv(0xcbf2_9ce4_8422_2325)
    }
    fn add(&mut self, x: u64) {
        for b in x.to_le_bytes() {
            self.0 ^= u64::from(b);
            self.0 = self.0.wrapping_mul(0x0100_0000_01b3);
        }
    }
}

const FIELDS: [&str; 16] = [
    "operation",
    "root",
    "participants",
    "flags",
    "element size",
    "element count",
    "source block size",
    "source offset",
    "destination block size",
    "destination offset",
    "function",
    "function argument",
    "bytes in all",
    "number of sizes",
    "sizes (hash)",
    "algorithm and parameters (hash)",
];

fn field(sig: &[u8], i: usize) -> Option<u64> {
    sig.get(i * 8..i * 8 + 8)
        .map(|b| u64::from_le_bytes(b.try_into().unwrap_or([0; 8])))
}

fn show(i: usize, v: u64) -> String {
    match i {
        0 => crate::plan::Kind::ALL
            .get(addr(v))
            .map_or(v.to_string(), |k| k.name().to_string()),
        #[allow(clippy::cast_possible_truncation)] // flag words are u32
        3 => amnet_sync_modes::names(v as u32),
        _ => v.to_string(),
    }
}

/// The first field in which two signatures differ: (field name, value in `a`, value in `b`).
fn first_diff(a: &[u8], b: &[u8]) -> Option<(&'static str, String, String)> {
    if a == b {
        return None;
    }
    let n = a.len().max(b.len()) / 8;
    for (i, name) in FIELDS.iter().enumerate().take(n) {
        let (x, y) = (field(a, i), field(b, i));
        if x != y {
            let fmt = |v: Option<u64>| v.map_or("-".into(), |v| show(i, v));
            return Some((name, fmt(x), fmt(y)));
        }
    }
    Some(("signature length", a.len().to_string(), b.len().to_string()))
}

/// The agreed arguments of a signature (without its order part).
fn fixed(sig: &[u8]) -> &[u8] {
    &sig[..sig.len().min(FIELDS.len() * 8)]
}

/// The order part of a signature: (team id, collectives numbered on it) pairs.
fn order_part(sig: &[u8]) -> Vec<(u64, u64)> {
    sig.get(FIELDS.len() * 8..)
        .unwrap_or(&[])
        .chunks_exact(16)
        .map(|c| {
            let w = |i: usize| u64::from_le_bytes(c[i..i + 8].try_into().unwrap_or([0; 8]));
            (w(0), w(8))
        })
        .collect()
}

/// Checked mode: two members of this collective's team that share another team this rank
/// knows, and numbered a different count of that team's collectives before this one, broke
/// the ordering rule (spec/coll.md §3a). Names them and the teams.
fn order_violation(
    sigs: &[Option<Vec<u8>>],
    geo: &Geo,
    teams: &FastMap<u64, TeamSeq>,
    key: Key,
) -> Option<String> {
    let mine = order_part(sigs.get(geo.me as usize)?.as_deref()?);
    for (t, s) in sigs.iter().enumerate() {
        let theirs = order_part(s.as_deref().unwrap_or(&[]));
        #[allow(clippy::cast_possible_truncation)] // team ranks fit in u32
        let r = geo.world(t as u32);
        for &(id, count) in &mine {
            let Some(other) = teams.get(&id).and_then(|ts| ts.geo.as_ref()) else {
                continue;
            };
            if other.trank(r).is_none() {
                continue;
            }
            let their = theirs.iter().find(|(i, _)| *i == id).map_or(0, |p| p.1);
            if their != count {
                return Some(format!(
                    "rank {} and rank {r} start the collectives of {} and {} in different \
                     orders: before this one, rank {} had started {count} on {} and rank {r} \
                     {their} (ranks in two teams must start those teams' collectives in the \
                     same order)",
                    geo.world(geo.me),
                    team_name(key.team),
                    team_name(id),
                    geo.world(geo.me),
                    team_name(id)
                ));
            }
        }
    }
    None
}

/// None when every member's signature equals team rank 0's; else which members differ in what.
fn compare_signatures(sigs: &[Option<Vec<u8>>], geo: &Geo) -> Option<String> {
    let base = fixed(sigs[0].as_deref().unwrap_or(&[]));
    let diffs: Vec<String> = sigs
        .iter()
        .enumerate()
        .skip(1)
        .filter_map(|(r, s)| {
            first_diff(base, fixed(s.as_deref().unwrap_or(&[]))).map(|(name, a, b)| {
                #[allow(clippy::cast_possible_truncation)] // team ranks fit in u32
                let who = geo.name(r as u32);
                format!("{who} passed {name} = {b} but {} passed {a}", geo.name(0))
            })
        })
        .collect();
    if diffs.is_empty() {
        None
    } else {
        Some(diffs.join("; "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_destroyed_team_leaves_no_flow_records() {
        let mut flow = Flow::default();
        let mut outs = Vec::new();
        let (a, b) = (Key { team: 7, seq: 1 }, Key { team: 0, seq: 1 });
        assert!(flow_admit(
            &mut flow,
            1 << 20,
            3,
            a,
            &[(1, 300), (2, 500)],
            &mut outs
        ));
        assert!(flow_admit(&mut flow, 1 << 20, 3, b, &[(1, 40)], &mut outs));
        flow.watch.insert((2, 7), 4);
        flow.watch.insert((2, 0), 4);
        assert_eq!(flow.ahead[&1].total, 340);
        flow.forget_team(7);
        assert_eq!(flow.ahead[&1].total, 40);
        assert_eq!(flow.ahead[&2].total, 0);
        assert!(flow.ahead.values().all(|x| !x.sent.contains_key(&7)));
        assert!(flow.ahead.values().all(|x| !x.told.contains_key(&7)));
        assert_eq!(flow.watch.len(), 1);
        assert!(flow.watch.contains_key(&(2, 0)));
    }
}
