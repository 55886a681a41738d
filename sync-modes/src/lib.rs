//! UPC-style synchronization modes for amnet collectives: the flags a collective call takes,
//! their validation, what each of the nine IN x OUT modes requires, and the signalling state
//! machine that enforces the two ALLSYNC modes. Pure logic, no communication: `amnet-coll`
//! drives it with active messages.
//!
//! # What the modes mean in amnet
//!
//! Collectives move data by *push with buffering*: a participant reads its source blocks when
//! its data movement may begin and sends them to the owners of the destinations; a
//! destination block is written only once its own participant has entered the collective (and
//! issued its own sends, so in-place forms read before they are overwritten). Data that
//! arrives earlier waits in a library buffer of the receiving rank. Hence:
//!
//! | mode | data movement may begin | what a successful sync promises | signals |
//! |---|---|---|---|
//! | `IN_NOSYNC` | as soon as the source participant entered | | none |
//! | `IN_MYSYNC` | source entered; written when the destination entered | | none |
//! | `IN_ALLSYNC` | after every participant entered | | one entry round (dissemination) |
//! | `OUT_NOSYNC` | | this rank's areas are done; the last rank to sync implies all are | none |
//! | `OUT_MYSYNC` | | every area of this rank's participants is done | none |
//! | `OUT_ALLSYNC` | | every area of every participant is done | one exit round (dissemination) |
//!
//! IN_NOSYNC and IN_MYSYNC cost the same here (buffering gives MYSYNC's guarantee for free);
//! OUT_NOSYNC gives OUT_MYSYNC's guarantee, which is stronger than it needs. Only the ALLSYNC
//! modes send extra messages: `ceil(log2 P)` per rank each. An aggregate pays for one entry
//! and one exit round however many members need them ([`Merged`]).

use std::fmt;

/// Flag bits of a collective call. Exactly one of each of the three categories
/// (IN, OUT, SINGLE/LOCAL) must be present.
pub mod flags {
    /// Data movement may begin as soon as any participant entered.
    pub const IN_NOSYNC: u32 = 1 << 0;
    /// A block moves once both its source and destination participants entered.
    pub const IN_MYSYNC: u32 = 1 << 1;
    /// Data movement begins only after every participant entered.
    pub const IN_ALLSYNC: u32 = 1 << 2;
    /// A sync may succeed early, as long as the last sync implies completion.
    pub const OUT_NOSYNC: u32 = 1 << 3;
    /// A sync succeeds once the caller's own areas are done.
    pub const OUT_MYSYNC: u32 = 1 << 4;
    /// A sync succeeds once every area of every participant is done.
    pub const OUT_ALLSYNC: u32 = 1 << 5;
    /// Every caller passes the same (single-valued) address arguments.
    pub const SINGLE: u32 = 1 << 6;
    /// Each caller passes only its own addresses.
    pub const LOCAL: u32 = 1 << 7;
    /// This non-blocking call is a member of an aggregate closed by the next call without it.
    pub const AGGREGATE: u32 = 1 << 8;
    /// Every image's thread calls (else one representative thread per rank).
    pub const ALL_THREADS: u32 = 1 << 9;
    /// The caller asserts the source areas lie in the segment.
    pub const SRC_IN_SEGMENT: u32 = 1 << 10;
    /// The caller asserts the destination areas lie in the segment.
    pub const DST_IN_SEGMENT: u32 = 1 << 11;
    /// Every defined bit.
    pub const ALL: u32 = (1 << 12) - 1;
    /// IN_ALLSYNC | OUT_ALLSYNC.
    pub const ALLSYNC: u32 = IN_ALLSYNC | OUT_ALLSYNC;
    /// IN_NOSYNC | OUT_NOSYNC.
    pub const NOSYNC: u32 = IN_NOSYNC | OUT_NOSYNC;
    /// IN_MYSYNC | OUT_MYSYNC.
    pub const MYSYNC: u32 = IN_MYSYNC | OUT_MYSYNC;
}

/// The input synchronization of a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum InSync {
    /// `IN_NOSYNC`.
    No,
    /// `IN_MYSYNC`.
    My,
    /// `IN_ALLSYNC`.
    All,
}

/// The output synchronization of a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum OutSync {
    /// `OUT_NOSYNC`.
    No,
    /// `OUT_MYSYNC`.
    My,
    /// `OUT_ALLSYNC`.
    All,
}

/// How address arguments are given.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Addressing {
    /// Single-valued: every caller passes every participant's addresses.
    Single,
    /// Each caller passes only its own.
    Local,
}

/// The shape of the call being checked, for the rules that depend on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CallShape {
    /// A blocking call (AGGREGATE is illegal).
    pub blocking: bool,
    /// A multiple-address ("m") call.
    pub multi_address: bool,
    /// Some rank hosts more than one image.
    pub multi_image: bool,
}

/// A validated flag word.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Mode {
    /// Input synchronization.
    pub input: InSync,
    /// Output synchronization.
    pub output: OutSync,
    /// Address scope.
    pub addressing: Addressing,
    /// Member of an aggregate that a later call closes.
    pub aggregate: bool,
    /// Called by every image's thread.
    pub all_threads: bool,
    /// Sources asserted to lie in the segment.
    pub src_in_segment: bool,
    /// Destinations asserted to lie in the segment.
    pub dst_in_segment: bool,
    /// The flag word it came from.
    pub bits: u32,
}

/// Why a flag word was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FlagError {
    /// Bits that no flag defines.
    UnknownBits(u32),
    /// No flag of a category.
    Missing(&'static str),
    /// Two or more flags of one category.
    Doubled(&'static str, u32),
    /// AGGREGATE on a blocking call.
    AggregateBlocking,
    /// LOCAL on a single-address call while some rank hosts several images, without
    /// ALL_THREADS: the other images' addresses cannot be known.
    LocalSingleAddressMultiImage,
    /// LOCAL with ALL_THREADS on a multiple-address call: one address per caller, use the
    /// single-address call.
    LocalMultiAddressAllThreads,
}

impl fmt::Display for FlagError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FlagError::UnknownBits(b) => write!(f, "flags {b:#x} are not defined"),
            FlagError::Missing(c) => write!(f, "no {c} flag given; pass exactly one"),
            FlagError::Doubled(c, b) => {
                write!(f, "{} given together; pass exactly one {c} flag", names(*b))
            }
            FlagError::AggregateBlocking => write!(
                f,
                "AGGREGATE on a blocking call; only non-blocking calls can be aggregated"
            ),
            FlagError::LocalSingleAddressMultiImage => write!(
                f,
                "LOCAL on a single-address call without ALL_THREADS while a rank hosts several \
                 images: the other images' addresses cannot be known; use the multiple-address \
                 call or ALL_THREADS"
            ),
            FlagError::LocalMultiAddressAllThreads => write!(
                f,
                "LOCAL with ALL_THREADS on a multiple-address call: each caller has one address; \
                 use the single-address call"
            ),
        }
    }
}

impl std::error::Error for FlagError {}

/// The names of the flags set in `bits`, joined by `|`.
pub fn names(bits: u32) -> String {
    const NAMES: [&str; 12] = [
        "IN_NOSYNC",
        "IN_MYSYNC",
        "IN_ALLSYNC",
        "OUT_NOSYNC",
        "OUT_MYSYNC",
        "OUT_ALLSYNC",
        "SINGLE",
        "LOCAL",
        "AGGREGATE",
        "ALL_THREADS",
        "SRC_IN_SEGMENT",
        "DST_IN_SEGMENT",
    ];
    let mut v: Vec<String> = (0..12)
        .filter(|i| bits & (1 << i) != 0)
        .map(|i| NAMES[i].to_string())
        .collect();
    if bits & !flags::ALL != 0 {
        v.push(format!("{:#x}", bits & !flags::ALL));
    }
    if v.is_empty() {
        "0".into()
    } else {
        v.join("|")
    }
}

fn one<T: Copy>(bits: u32, cat: &'static str, opts: [(u32, T); 3]) -> Result<T, FlagError> {
    let mut found = None;
    let mut set = 0;
    for (b, t) in opts {
        if bits & b != 0 {
            set |= b;
            found.get_or_insert(t);
        }
    }
    match found {
        None => Err(FlagError::Missing(cat)),
        Some(t) if set.count_ones() == 1 => Ok(t),
        Some(_) => Err(FlagError::Doubled(cat, set)),
    }
}

impl Mode {
    /// Validate `bits` for a call of shape `shape`.
    pub fn parse(bits: u32, shape: CallShape) -> Result<Mode, FlagError> {
        use flags::*;
        if bits & !ALL != 0 {
            return Err(FlagError::UnknownBits(bits & !ALL));
        }
        let input = one(
            bits,
            "IN",
            [
                (IN_NOSYNC, InSync::No),
                (IN_MYSYNC, InSync::My),
                (IN_ALLSYNC, InSync::All),
            ],
        )?;
        let output = one(
            bits,
            "OUT",
            [
                (OUT_NOSYNC, OutSync::No),
                (OUT_MYSYNC, OutSync::My),
                (OUT_ALLSYNC, OutSync::All),
            ],
        )?;
        let addressing = match (bits & SINGLE != 0, bits & LOCAL != 0) {
            (true, false) => Addressing::Single,
            (false, true) => Addressing::Local,
            (false, false) => return Err(FlagError::Missing("SINGLE/LOCAL")),
            (true, true) => return Err(FlagError::Doubled("SINGLE/LOCAL", SINGLE | LOCAL)),
        };
        let aggregate = bits & AGGREGATE != 0;
        let all_threads = bits & ALL_THREADS != 0;
        if aggregate && shape.blocking {
            return Err(FlagError::AggregateBlocking);
        }
        if addressing == Addressing::Local {
            if !shape.multi_address && shape.multi_image && !all_threads {
                return Err(FlagError::LocalSingleAddressMultiImage);
            }
            if shape.multi_address && all_threads {
                return Err(FlagError::LocalMultiAddressAllThreads);
            }
        }
        Ok(Mode {
            input,
            output,
            addressing,
            aggregate,
            all_threads,
            src_in_segment: bits & SRC_IN_SEGMENT != 0,
            dst_in_segment: bits & DST_IN_SEGMENT != 0,
            bits,
        })
    }

    /// Whether data movement must wait for the entry signal (IN_ALLSYNC).
    pub fn needs_entry_signal(&self) -> bool {
        self.input == InSync::All
    }

    /// Whether a sync must wait for the exit signal (OUT_ALLSYNC).
    pub fn needs_exit_signal(&self) -> bool {
        self.output == OutSync::All
    }

    /// The flag word without the bits that may legally differ between callers' views of
    /// the same call (none today; kept for the agreement check).
    pub fn agreement_bits(&self) -> u32 {
        self.bits
    }
}

/// The synchronization an aggregate pays: one entry signal if any member needs it, one exit
/// signal if any member needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Merged {
    /// An entry signal round is needed before the IN_ALLSYNC members move data.
    pub entry: bool,
    /// An exit signal round is needed before the aggregate's handle may succeed.
    pub exit: bool,
}

impl Merged {
    /// Merge the modes of an aggregate's members.
    pub fn of<'a>(modes: impl IntoIterator<Item = &'a Mode>) -> Merged {
        let mut m = Merged::default();
        modes.into_iter().for_each(|x| m.add(x));
        m
    }

    /// Add one more member's mode.
    pub fn add(&mut self, mode: &Mode) {
        self.entry |= mode.needs_entry_signal();
        self.exit |= mode.needs_exit_signal();
    }
}

/// The dissemination signal among `size` ranks (Hensgen, Finkel and Manber): in round `k`
/// rank `r` signals `(r + 2^k) mod size` and waits for `(r - 2^k) mod size`; after
/// `ceil(log2 size)` rounds every rank knows that every rank started. A pure state machine:
/// feed it arrivals and send what [`Dissemination::sends`] returns.
#[derive(Debug, Clone)]
pub struct Dissemination {
    rank: u32,
    size: u32,
    rounds: u32,
    /// Rounds whose signal this rank has sent.
    sent: u32,
    /// Bit k: the signal of round k has arrived.
    arrived: u64,
    started: bool,
}

impl Dissemination {
    /// A signal not started yet (arrivals may already be recorded).
    pub fn new(rank: u32, size: u32) -> Self {
        let mut rounds = 0;
        while (1u64 << rounds) < u64::from(size) {
            rounds += 1;
        }
        Dissemination {
            rank,
            size,
            rounds,
            sent: 0,
            arrived: 0,
            started: false,
        }
    }

    /// Rounds in all.
    pub fn rounds(&self) -> u32 {
        self.rounds
    }

    /// Record that the signal of `round` arrived. Out-of-range rounds are ignored and
    /// reported as false.
    pub fn arrive(&mut self, round: u32) -> bool {
        if round >= self.rounds {
            return false;
        }
        self.arrived |= 1 << round;
        true
    }

    /// This rank is ready: its round-0 signal may go.
    pub fn start(&mut self) {
        self.started = true;
    }

    /// Whether [`Dissemination::start`] was called.
    pub fn started(&self) -> bool {
        self.started
    }

    /// The signals to send now, as (peer, round); each is returned once.
    pub fn sends(&mut self) -> Vec<(u32, u32)> {
        let mut out = Vec::new();
        if !self.started {
            return out;
        }
        // Round k may be sent once rounds 0..k have arrived.
        while self.sent < self.rounds {
            let k = self.sent;
            let before = (1u64 << k) - 1;
            if self.arrived & before != before {
                break;
            }
            #[allow(clippy::cast_possible_truncation)] // reduced modulo size, a u32
            let peer = ((u64::from(self.rank) + (1u64 << k)) % u64::from(self.size)) as u32;
            out.push((peer, k));
            self.sent += 1;
        }
        out
    }

    /// Every round was sent and every round's signal arrived.
    pub fn done(&self) -> bool {
        let all = (1u64 << self.rounds) - 1;
        self.started && self.sent == self.rounds && self.arrived & all == all
    }

    /// The first round still missing, and the rank it comes from (for hang reports).
    pub fn waiting_for(&self) -> Option<(u32, u32)> {
        if !self.started {
            return None;
        }
        (0..self.rounds)
            .find(|&k| self.arrived & (1 << k) == 0)
            .map(|k| {
                let from = (u64::from(self.rank) + u64::from(self.size)
                    - (1u64 << k) % u64::from(self.size))
                    % u64::from(self.size);
                #[allow(clippy::cast_possible_truncation)] // reduced modulo size, a u32
                (k, from as u32)
            })
    }
}

/// The round number a [`Tree`] gives its release ("down") message; an "up" message from the
/// child `parent + 2^k` carries round `k`.
pub const TREE_DOWN: u32 = 32;

/// The binomial-tree signal among `size` ranks, rooted at rank 0: gather, then release. Rank
/// `r`'s children are `r + 2^k` for every `2^k` below the lowest set bit of `r` (every `2^k`
/// for rank 0) that is a rank; its parent is `r` minus its lowest set bit. A rank sends "up"
/// to its parent once it started and every child's "up" arrived; the root then sends "down"
/// to its children, and every other rank forwards "down" once it arrives. `2(size - 1)`
/// messages in all (a rank sends one per child and one up), `2 ceil(log2 size)` steps on the
/// longest path; no rank is released before every rank started. The same interface as
/// [`Dissemination`].
#[derive(Debug, Clone)]
pub struct Tree {
    rank: u32,
    size: u32,
    /// Bit k: the "up" of child `rank + 2^k` arrived.
    up: u64,
    /// Bit k: `rank + 2^k` is a child.
    children: u64,
    down: bool,
    sent_up: bool,
    sent_down: bool,
    started: bool,
}

impl Tree {
    /// A signal not started yet (arrivals may already be recorded).
    pub fn new(rank: u32, size: u32) -> Self {
        let limit = if rank == 0 {
            u64::MAX
        } else {
            u64::from(rank & rank.wrapping_neg())
        };
        let mut children = 0u64;
        let mut k = 0;
        while k < 32 && (1u64 << k) < limit && u64::from(rank) + (1u64 << k) < u64::from(size) {
            children |= 1 << k;
            k += 1;
        }
        Tree {
            rank,
            size,
            up: 0,
            children,
            down: false,
            sent_up: false,
            sent_down: false,
            started: false,
        }
    }

    fn parent(&self) -> Option<u32> {
        (self.rank != 0).then(|| self.rank - (self.rank & self.rank.wrapping_neg()))
    }

    fn child_ups_in(&self) -> bool {
        self.up & self.children == self.children
    }

    /// Messages a rank receives in all: one per child and, but on the root, one from its
    /// parent.
    pub fn rounds(&self) -> u32 {
        self.children.count_ones() + u32::from(self.rank != 0)
    }

    /// Record a message: round `k < 32` is the "up" of child `rank + 2^k`, [`TREE_DOWN`] the
    /// release from the parent. Messages no rank of this shape sends are ignored and reported
    /// as false.
    pub fn arrive(&mut self, round: u32) -> bool {
        if round == TREE_DOWN && self.rank != 0 {
            self.down = true;
            true
        } else if round < 32 && self.children & (1 << round) != 0 {
            self.up |= 1 << round;
            true
        } else {
            false
        }
    }

    /// This rank is ready.
    pub fn start(&mut self) {
        self.started = true;
    }

    /// Whether [`Tree::start`] was called.
    pub fn started(&self) -> bool {
        self.started
    }

    /// The messages to send now, as (peer, round); each is returned once.
    pub fn sends(&mut self) -> Vec<(u32, u32)> {
        let mut out = Vec::new();
        if !self.started || !self.child_ups_in() {
            return out;
        }
        if let Some(p) = self.parent() {
            if !self.sent_up {
                self.sent_up = true;
                out.push((p, self.rank.trailing_zeros()));
            }
        }
        let release = self.parent().is_none() || self.down;
        if release && !self.sent_down {
            self.sent_down = true;
            out.extend(
                (0..32)
                    .filter(|k| self.children & (1 << k) != 0)
                    .map(|k| (self.rank + (1 << k), TREE_DOWN)),
            );
        }
        out
    }

    /// This rank is released and forwarded the release to its children.
    pub fn done(&self) -> bool {
        self.started && self.child_ups_in() && self.sent_down && (self.rank == 0 || self.down)
    }

    /// The first message still missing, as (round, rank it comes from), for hang reports.
    pub fn waiting_for(&self) -> Option<(u32, u32)> {
        if !self.started {
            return None;
        }
        if let Some(k) = (0..32).find(|&k| self.children & !self.up & (1 << k) != 0) {
            return Some((k, self.rank + (1 << k)));
        }
        match self.parent() {
            Some(p) if !self.down => Some((TREE_DOWN, p)),
            _ => None,
        }
    }

    /// The number of ranks.
    pub fn size(&self) -> u32 {
        self.size
    }
}

/// Which scheme an entry or exit signal (and a barrier) runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SignalAlg {
    /// [`Dissemination`]: `ceil(log2 P)` rounds, `ceil(log2 P)` messages per rank.
    Dissemination,
    /// [`Tree`]: gather to rank 0, then release; `2(P - 1)` messages in all.
    Tree,
}

/// An entry or exit signal of one of the [`SignalAlg`] schemes.
#[derive(Debug, Clone)]
pub enum Signal {
    /// Dissemination rounds.
    Dissemination(Dissemination),
    /// A binomial tree.
    Tree(Tree),
}

impl Signal {
    /// A signal of scheme `alg` not started yet.
    pub fn new(alg: SignalAlg, rank: u32, size: u32) -> Signal {
        match alg {
            SignalAlg::Dissemination => Signal::Dissemination(Dissemination::new(rank, size)),
            SignalAlg::Tree => Signal::Tree(Tree::new(rank, size)),
        }
    }

    /// Its scheme.
    pub fn alg(&self) -> SignalAlg {
        match self {
            Signal::Dissemination(_) => SignalAlg::Dissemination,
            Signal::Tree(_) => SignalAlg::Tree,
        }
    }

    /// Record an arrival (see the scheme's `arrive`).
    pub fn arrive(&mut self, round: u32) -> bool {
        match self {
            Signal::Dissemination(d) => d.arrive(round),
            Signal::Tree(t) => t.arrive(round),
        }
    }

    /// This rank is ready.
    pub fn start(&mut self) {
        match self {
            Signal::Dissemination(d) => d.start(),
            Signal::Tree(t) => t.start(),
        }
    }

    /// Whether it was started.
    pub fn started(&self) -> bool {
        match self {
            Signal::Dissemination(d) => d.started(),
            Signal::Tree(t) => t.started(),
        }
    }

    /// The messages to send now, as (peer, round).
    pub fn sends(&mut self) -> Vec<(u32, u32)> {
        match self {
            Signal::Dissemination(d) => d.sends(),
            Signal::Tree(t) => t.sends(),
        }
    }

    /// Every rank started and this rank sent all it has to send.
    pub fn done(&self) -> bool {
        match self {
            Signal::Dissemination(d) => d.done(),
            Signal::Tree(t) => t.done(),
        }
    }

    /// The first message still missing: (round, rank it comes from).
    pub fn waiting_for(&self) -> Option<(u32, u32)> {
        match self {
            Signal::Dissemination(d) => d.waiting_for(),
            Signal::Tree(t) => t.waiting_for(),
        }
    }
}

#[cfg(test)]
#[allow(clippy::cast_possible_truncation)] // random indices reduced modulo small lengths
mod tests {
    use super::flags::*;
    use super::*;

    const NB: CallShape = CallShape {
        blocking: false,
        multi_address: false,
        multi_image: false,
    };

    #[test]
    fn parse_categories() {
        let m = Mode::parse(IN_MYSYNC | OUT_ALLSYNC | SINGLE, NB).unwrap();
        assert_eq!((m.input, m.output), (InSync::My, OutSync::All));
        assert_eq!(
            Mode::parse(OUT_ALLSYNC | SINGLE, NB),
            Err(FlagError::Missing("IN"))
        );
        assert!(matches!(
            Mode::parse(IN_NOSYNC | IN_ALLSYNC | OUT_ALLSYNC | SINGLE, NB),
            Err(FlagError::Doubled("IN", _))
        ));
        assert_eq!(
            Mode::parse(IN_NOSYNC | OUT_NOSYNC, NB),
            Err(FlagError::Missing("SINGLE/LOCAL"))
        );
        assert_eq!(
            Mode::parse(NOSYNC | SINGLE | 1 << 20, NB),
            Err(FlagError::UnknownBits(1 << 20))
        );
        let blocking = CallShape {
            blocking: true,
            ..NB
        };
        assert_eq!(
            Mode::parse(NOSYNC | SINGLE | AGGREGATE, blocking),
            Err(FlagError::AggregateBlocking)
        );
        let multi = CallShape {
            multi_image: true,
            ..NB
        };
        assert_eq!(
            Mode::parse(NOSYNC | LOCAL, multi),
            Err(FlagError::LocalSingleAddressMultiImage)
        );
        assert!(Mode::parse(NOSYNC | LOCAL | ALL_THREADS, multi).is_ok());
        let m_addr = CallShape {
            multi_address: true,
            ..NB
        };
        assert_eq!(
            Mode::parse(NOSYNC | LOCAL | ALL_THREADS, m_addr),
            Err(FlagError::LocalMultiAddressAllThreads)
        );
        assert!(FlagError::Doubled("IN", IN_NOSYNC | IN_ALLSYNC)
            .to_string()
            .contains("IN_NOSYNC|IN_ALLSYNC"));
    }

    #[test]
    fn merged_pays_once() {
        let a = Mode::parse(ALLSYNC | SINGLE, NB).unwrap();
        let b = Mode::parse(NOSYNC | SINGLE, NB).unwrap();
        assert_eq!(
            Merged::of([&a, &b, &a]),
            Merged {
                entry: true,
                exit: true
            }
        );
        assert_eq!(Merged::of([&b]), Merged::default());
    }

    /// Simulate every size up to 40 with random start and delivery orders, for both schemes:
    /// every rank finishes, no rank finishes before every rank started, and the tree sends
    /// 2(size - 1) messages in all.
    #[test]
    fn signals_complete_only_after_all_start() {
        let mut seed = 99u64;
        let mut rnd = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for alg in [SignalAlg::Dissemination, SignalAlg::Tree] {
            for size in 1..=40u32 {
                let mut st: Vec<Signal> = (0..size).map(|r| Signal::new(alg, r, size)).collect();
                let mut inflight: Vec<(u32, u32)> = Vec::new();
                let mut order: Vec<u32> = (0..size).collect();
                for i in (1..order.len()).rev() {
                    order.swap(i, (rnd() % (i as u64 + 1)) as usize);
                }
                let (mut started, mut sent) = (0, 0);
                loop {
                    if started < size && (inflight.is_empty() || rnd() % 3 == 0) {
                        let r = order[started as usize];
                        st[r as usize].start();
                        started += 1;
                        let out = st[r as usize].sends();
                        sent += out.len();
                        inflight.extend(out);
                    } else if !inflight.is_empty() {
                        let i = (rnd() % inflight.len() as u64) as usize;
                        let (to, k) = inflight.swap_remove(i);
                        assert!(
                            st[to as usize].arrive(k),
                            "{alg:?} size {size}: {k} at {to}"
                        );
                        let out = st[to as usize].sends();
                        sent += out.len();
                        inflight.extend(out);
                    } else {
                        break;
                    }
                    if started < size && size > 1 {
                        assert!(
                            st.iter().all(|s| !s.done()),
                            "{alg:?} size {size}: done before all started"
                        );
                    }
                }
                assert!(st.iter().all(Signal::done), "{alg:?} size {size}");
                assert!(
                    st.iter().all(|s| s.waiting_for().is_none()),
                    "{alg:?} {size}"
                );
                if alg == SignalAlg::Tree {
                    assert_eq!(sent, 2 * (size as usize - 1), "size {size}");
                }
            }
        }
    }

    #[test]
    fn tree_shape() {
        // Rank 0 of 6: children 1, 2, 4; rank 4: child 5; rank 2: child 3; rank 5: none.
        let t = Tree::new(0, 6);
        assert_eq!(t.children, 0b111);
        assert_eq!(Tree::new(4, 6).children, 0b1);
        assert_eq!(Tree::new(2, 6).children, 0b1);
        assert_eq!(Tree::new(5, 6).children, 0);
        assert_eq!(Tree::new(4, 6).parent(), Some(0));
        assert_eq!(Tree::new(6, 8).parent(), Some(4));
        let mut leaf = Tree::new(5, 6);
        leaf.start();
        assert_eq!(leaf.sends(), vec![(4, 0)]);
        assert_eq!(leaf.waiting_for(), Some((TREE_DOWN, 4)));
        assert!(!leaf.arrive(3));
        assert!(leaf.arrive(TREE_DOWN));
        assert!(leaf.sends().is_empty() && leaf.done());
    }

    /// Simulate every size up to 40 with random delivery order: every rank finishes, and no
    /// rank finishes before every rank started.
    #[test]
    fn dissemination_completes_only_after_all_start() {
        let mut seed = 12345u64;
        let mut rnd = move || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        for size in 1..=40u32 {
            let mut st: Vec<Dissemination> =
                (0..size).map(|r| Dissemination::new(r, size)).collect();
            let mut inflight: Vec<(u32, u32)> = Vec::new();
            let mut order: Vec<u32> = (0..size).collect();
            for i in (1..order.len()).rev() {
                order.swap(i, (rnd() % (i as u64 + 1)) as usize);
            }
            let mut started = 0;
            loop {
                // Randomly start the next rank or deliver a message.
                if started < size && (inflight.is_empty() || rnd() % 3 == 0) {
                    let r = order[started as usize];
                    st[r as usize].start();
                    started += 1;
                    inflight.extend(st[r as usize].sends());
                } else if !inflight.is_empty() {
                    let i = (rnd() % inflight.len() as u64) as usize;
                    let (to, k) = inflight.swap_remove(i);
                    assert!(st[to as usize].arrive(k));
                    inflight.extend(st[to as usize].sends());
                } else {
                    break;
                }
                if started < size {
                    for s in &st {
                        assert!(
                            !s.done() || size == 1,
                            "size {size}: done before all started"
                        );
                    }
                }
            }
            assert!(st.iter().all(Dissemination::done), "size {size}");
        }
    }
}
