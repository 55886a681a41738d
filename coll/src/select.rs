//! Algorithm selection by bit masks (the PAMI scheme): a team's static characteristics are
//! computed once as bits when it is made, each call ORs in its own, and every algorithm
//! registers the bits it requires and forbids and the size range it is made for. Among the
//! admissible algorithms the choice is: a forced choice of `AMNET_COLL_TUNE` > the measured
//! tuning table > the cost model among those whose size range holds the call's size. Every
//! input is the same on every rank of the team, so every rank picks the same algorithm (checked
//! mode compares the choice too).
//!
//! `AMNET_COLL_TUNE` is a list of `OP:SIZES:ALGORITHM[:PARAM=VALUE,...]` separated by `;`,
//! where `SIZES` is `A-B`, `A-` or `-B` in bytes with `K`/`M`/`G` suffixes (both ends
//! included): `broadcast:0-4K:binomial;reduce_to_all:4K-:flat`. A forced algorithm that is not
//! admissible for a call is an error naming what it requires or forbids; `ALGORITHM?` only
//! prefers it: calls it does not admit are selected as usual.

use amnet_core::config::vars;
use amnet_core::{Error, Result};

use crate::plan::Kind;

/// The bits of a call's characteristics.
pub(crate) mod bits {
    /// The team has one rank.
    pub(crate) const ONE_RANK: u64 = 1 << 0;
    /// The team's size is a power of two.
    pub(crate) const POW2: u64 = 1 << 1;
    /// Every rank of the team hosts the same number of images.
    pub(crate) const UNIFORM_IMAGES: u64 = 1 << 2;
    /// Some rank of the team hosts several images.
    pub(crate) const MULTI_IMAGE: u64 = 1 << 3;
    /// The conduit maps every peer's segment (shared memory).
    pub(crate) const DIRECT_SEGMENTS: u64 = 1 << 4;
    /// One host: every member maps every other member's host scratch, and the team has its
    /// smp-native state (`shm`).
    pub(crate) const HOST_SHM: u64 = 1 << 5;
    /// Checked mode (`AMNET_COLL_CHECK`): the calls' arguments are compared before data moves.
    pub(crate) const CHECKED: u64 = 1 << 6;
    /// The call's participants are images (an `m` form or `ALL_THREADS`).
    pub(crate) const IMAGE_SPACE: u64 = 1 << 8;
    /// A variable-size (`v`) form.
    pub(crate) const V_FORM: u64 = 1 << 9;
    /// An in-place form.
    pub(crate) const IN_PLACE: u64 = 1 << 10;
    /// The reduction function is commutative (no `NONCOMM`).
    pub(crate) const COMMUTATIVE: u64 = 1 << 11;
    /// The reduction function is a built-in.
    pub(crate) const BUILTIN_FN: u64 = 1 << 12;
    /// An aggregate member.
    pub(crate) const AGGREGATED: u64 = 1 << 13;
    /// IN_ALLSYNC.
    pub(crate) const IN_ALL: u64 = 1 << 14;
    /// OUT_ALLSYNC.
    pub(crate) const OUT_ALL: u64 = 1 << 15;
    /// Reductions: every participant holds at least one element.
    pub(crate) const ALL_CONTRIBUTE: u64 = 1 << 16;
    /// Reductions: partials of consecutive participants may be combined in participant order
    /// (the function is commutative, or each participant's elements are one run of the
    /// array, in participant order).
    pub(crate) const ORDER_SAFE: u64 = 1 << 17;
    /// Reductions: each participant's source elements are one run of the array and the runs
    /// are in participant order (whatever the function; participants may hold none).
    pub(crate) const RUNS_IN_ORDER: u64 = 1 << 18;
    /// Reductions: the destination layout places every element where the source layout does.
    pub(crate) const SAME_LAYOUT: u64 = 1 << 19;
    /// `SINGLE` addressing (else `LOCAL`).
    pub(crate) const SINGLE_ADDR: u64 = 1 << 20;
    /// The caller promised every source is in the segment (`SRC_IN_SEGMENT`).
    pub(crate) const SRC_IN_SEG: u64 = 1 << 21;
    /// The caller promised every destination is in the segment (`DST_IN_SEGMENT`).
    pub(crate) const DST_IN_SEG: u64 = 1 << 22;
    /// A non-blocking call (`_nb`, or a typed request).
    pub(crate) const NONBLOCKING: u64 = 1 << 23;
    /// On a `HOST_SHM` team: each member's contribution fits a host-scratch slot, or it is
    /// data that lies in the segment (a segment address under `SINGLE`, or
    /// `SRC_IN_SEGMENT`) and is read in place (`shm::fits`).
    pub(crate) const SHM_FITS: u64 = 1 << 24;
    /// `ALL_THREADS`: every image thread calls (with `IMAGE_SPACE`).
    pub(crate) const ALL_THREADS: u64 = 1 << 25;
    /// Several hosts, several members on some host, every host's ranks sharing memory: the
    /// team has a hierarchy (`hier`).
    pub(crate) const HIER: u64 = 1 << 26;
    /// A team of a hierarchy (a host's or the leaders'): its calls are the phases of
    /// hierarchical calls, which `AMNET_COLL_TUNE`'s forced choices do not apply to.
    pub(crate) const PHASE: u64 = 1 << 27;
    /// The names, for errors and traces.
    pub(crate) const NAMES: [(u64, &str); 27] = [
        (ONE_RANK, "one rank"),
        (POW2, "a power-of-two team"),
        (UNIFORM_IMAGES, "uniform images"),
        (MULTI_IMAGE, "several images on a rank"),
        (DIRECT_SEGMENTS, "directly mapped segments"),
        (HOST_SHM, "one host with mapped host scratch"),
        (CHECKED, "checked mode"),
        (IMAGE_SPACE, "image participants (m form or ALL_THREADS)"),
        (V_FORM, "a v form"),
        (IN_PLACE, "an in-place form"),
        (COMMUTATIVE, "a commutative function"),
        (BUILTIN_FN, "a built-in function"),
        (AGGREGATED, "aggregation"),
        (IN_ALL, "IN_ALLSYNC"),
        (OUT_ALL, "OUT_ALLSYNC"),
        (ALL_CONTRIBUTE, "elements on every participant"),
        (ORDER_SAFE, "partials combinable in participant order"),
        (
            RUNS_IN_ORDER,
            "one run per participant, in participant order",
        ),
        (SAME_LAYOUT, "equal source and destination layouts"),
        (SINGLE_ADDR, "SINGLE addressing"),
        (SRC_IN_SEG, "SRC_IN_SEGMENT"),
        (DST_IN_SEG, "DST_IN_SEGMENT"),
        (NONBLOCKING, "a non-blocking call"),
        (
            SHM_FITS,
            "contributions that fit the host scratch or lie in the segment",
        ),
        (ALL_THREADS, "ALL_THREADS"),
        (
            HIER,
            "several hosts, several ranks on a host, sharing memory",
        ),
        (PHASE, "a phase of a hierarchical call"),
    ];

    /// The names of the bits set in `m`.
    pub(crate) fn names(m: u64) -> String {
        let v: Vec<&str> = NAMES
            .iter()
            .filter(|(b, _)| m & b != 0)
            .map(|(_, n)| *n)
            .collect();
        v.join(", ")
    }
}

/// How an algorithm runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Imp {
    /// The flat engine: every participant sends its blocks straight to their owners.
    Flat,
    /// A schedule from a generator (`algs/`).
    Sched,
    /// A signal scheme (`barrier`): the entry and exit signals of every collective on a team
    /// and the team barrier run it.
    Signal,
    /// The smp-native algorithms (`shm`): flags and copies in shared memory, no messages.
    Shm,
    /// The hierarchical algorithms (`hier`): host-local phases around a leaders' phase, each
    /// a collective of its own.
    Hier,
}

/// A call as the selector and the cost model see it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CallInfo {
    pub(crate) kind: Kind,
    /// Characteristic bits (team and call).
    pub(crate) mask: u64,
    /// Bytes per participant's block (the whole payload of a broadcast).
    pub(crate) bytes: usize,
    /// Ranks of the team.
    pub(crate) ranks: u32,
}

/// The cost model's constants: α seconds per message, β seconds per byte.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Model {
    pub(crate) alpha: f64,
    pub(crate) beta: f64,
}

impl Model {
    /// Constants for the conduit named `conduit` (shared memory is cheap per message).
    pub(crate) fn for_conduit(conduit: &str) -> Model {
        match conduit {
            "smp" => Model {
                alpha: 0.3e-6,
                beta: 0.1e-9,
            },
            "mpi" => Model {
                alpha: 0.6e-6,
                beta: 0.2e-9,
            },
            _ => Model {
                alpha: 6e-6,
                beta: 0.5e-9,
            },
        }
    }
}

/// A registered algorithm.
#[derive(Debug)]
pub(crate) struct Alg {
    pub(crate) name: &'static str,
    pub(crate) kind: Kind,
    pub(crate) imp: Imp,
    /// Bits a call must have.
    pub(crate) requires: u64,
    /// Bits a call must not have.
    pub(crate) forbids: u64,
    /// The bytes per block (both ends included) where the cost model may choose it: the size
    /// range it is made for. `AMNET_COLL_TUNE` and a tuning table may choose it at any size.
    pub(crate) sizes: (usize, usize),
    /// Estimated seconds for a call.
    pub(crate) cost: fn(&Model, &CallInfo) -> f64,
}

/// Every size.
const ANY: (usize, usize) = (0, usize::MAX);

fn log2_ceil(n: u32) -> f64 {
    f64::from(32 - n.saturating_sub(1).leading_zeros())
}

#[allow(clippy::cast_precision_loss)] // byte counts far below 2^52
fn bytes(c: &CallInfo) -> f64 {
    c.bytes as f64
}

/// Recursive halving and its reverse (Rabenseifner's allreduce, and the reduce-scatter with
/// a gather): 2 log2 p rounds, about twice the vector sent, and a pairing before and after
/// where p is not a power of two.
fn halving_cost(m: &Model, c: &CallInfo) -> f64 {
    let extra = if c.ranks.is_power_of_two() { 0.0 } else { 2.0 };
    (2.0 * log2_ceil(c.ranks) + extra) * m.alpha + (2.0 + extra) * m.beta * bytes(c)
}

/// Every algorithm, by operation; the first of each operation is its fallback (the flat
/// engine admits every call).
pub(crate) static ALGS: &[Alg] = &[
    Alg {
        name: "flat",
        kind: Kind::Broadcast,
        imp: Imp::Flat,
        requires: 0,
        forbids: 0,
        sizes: ANY,
        // The root sends every copy itself.
        cost: |m, c| f64::from(c.ranks.saturating_sub(1)) * (m.alpha + m.beta * bytes(c)),
    },
    Alg {
        name: "binomial",
        kind: Kind::Broadcast,
        imp: Imp::Sched,
        requires: 0,
        forbids: bits::IMAGE_SPACE | bits::V_FORM,
        sizes: ANY,
        cost: |m, c| log2_ceil(c.ranks) * (m.alpha + m.beta * bytes(c)),
    },
    Alg {
        name: "knomial",
        kind: Kind::Broadcast,
        imp: Imp::Sched,
        requires: 0,
        forbids: bits::IMAGE_SPACE | bits::V_FORM,
        sizes: ANY,
        // Radix 4 (the default): up to 3 sends one after the other per level, ⌈log4 np⌉
        // levels. Where a transport overlaps a rank's sends this underestimates the tree; the
        // tuning table then says so.
        cost: |m, c| (log2_ceil(c.ranks) / 2.0).ceil() * 3.0 * (m.alpha + m.beta * bytes(c)),
    },
    Alg {
        name: "flat",
        kind: Kind::ReduceAll,
        imp: Imp::Flat,
        requires: 0,
        forbids: 0,
        sizes: ANY,
        // Every rank sends its partials to every rank, and combines all of them.
        cost: |m, c| f64::from(c.ranks.saturating_sub(1)) * m.alpha + m.beta * bytes(c),
    },
    Alg {
        name: "recursive_doubling",
        kind: Kind::ReduceAll,
        imp: Imp::Sched,
        requires: bits::ALL_CONTRIBUTE | bits::ORDER_SAFE,
        forbids: bits::IMAGE_SPACE,
        sizes: ANY,
        cost: |m, c| (log2_ceil(c.ranks) + 1.0) * m.alpha + m.beta * bytes(c),
    },
    // ----- data movement (generators in algs/data.rs and the modules it names) -----
    Alg {
        name: "scatter_allgather",
        kind: Kind::Broadcast,
        imp: Imp::Sched,
        requires: 0,
        forbids: bits::IMAGE_SPACE | bits::V_FORM,
        sizes: (8 << 10, usize::MAX),
        // A binomial scatter of np pieces, then recursive doubling (a power of two) or a ring.
        cost: |m, c| {
            let p = f64::from(c.ranks);
            let l = log2_ceil(c.ranks);
            let steps = if c.ranks.is_power_of_two() {
                2.0 * l
            } else {
                l + p - 1.0
            };
            steps * m.alpha + 2.0 * (p - 1.0) / p * m.beta * bytes(c)
        },
    },
    Alg {
        name: "pipeline",
        kind: Kind::Broadcast,
        imp: Imp::Sched,
        requires: 0,
        forbids: bits::IMAGE_SPACE | bits::V_FORM,
        sizes: (32 << 10, usize::MAX),
        // A chain in chunks of 64 KiB (the default): np − 2 + ⌈n / chunk⌉ chunk steps.
        cost: |m, c| {
            let chunk = bytes(c).min(64.0 * 1024.0);
            let k = (bytes(c) / 64.0 / 1024.0).ceil().max(1.0);
            (f64::from(c.ranks.saturating_sub(1)) + k - 1.0) * (m.alpha + m.beta * chunk)
        },
    },
    Alg {
        name: "flat",
        kind: Kind::Scatter,
        imp: Imp::Flat,
        requires: 0,
        forbids: 0,
        sizes: ANY,
        // The root sends every block itself.
        cost: |m, c| f64::from(c.ranks.saturating_sub(1)) * (m.alpha + m.beta * bytes(c)),
    },
    Alg {
        name: "binomial",
        kind: Kind::Scatter,
        imp: Imp::Sched,
        requires: 0,
        forbids: bits::IMAGE_SPACE,
        sizes: ANY,
        // The root's ⌈log₂ np⌉ messages carry np − 1 blocks in all.
        cost: |m, c| {
            log2_ceil(c.ranks) * m.alpha + f64::from(c.ranks.saturating_sub(1)) * m.beta * bytes(c)
        },
    },
    Alg {
        name: "flat",
        kind: Kind::Gather,
        imp: Imp::Flat,
        requires: 0,
        forbids: 0,
        sizes: ANY,
        // The root receives every block.
        cost: |m, c| f64::from(c.ranks.saturating_sub(1)) * (m.alpha + m.beta * bytes(c)),
    },
    Alg {
        name: "binomial",
        kind: Kind::Gather,
        imp: Imp::Sched,
        requires: 0,
        forbids: bits::IMAGE_SPACE,
        sizes: ANY,
        cost: |m, c| {
            log2_ceil(c.ranks) * m.alpha + f64::from(c.ranks.saturating_sub(1)) * m.beta * bytes(c)
        },
    },
    Alg {
        name: "flat",
        kind: Kind::GatherAll,
        imp: Imp::Flat,
        requires: 0,
        forbids: 0,
        sizes: ANY,
        // Every rank sends its block to every other rank.
        cost: |m, c| f64::from(c.ranks.saturating_sub(1)) * (m.alpha + m.beta * bytes(c)),
    },
    Alg {
        name: "ring",
        kind: Kind::GatherAll,
        imp: Imp::Sched,
        requires: 0,
        forbids: bits::IMAGE_SPACE,
        sizes: ANY,
        cost: |m, c| f64::from(c.ranks.saturating_sub(1)) * (m.alpha + m.beta * bytes(c)),
    },
    Alg {
        name: "recursive_doubling",
        kind: Kind::GatherAll,
        imp: Imp::Sched,
        requires: 0,
        forbids: bits::IMAGE_SPACE,
        sizes: ANY,
        // Other sizes add the pairing round and the two messages back, which carry nearly all.
        cost: |m, c| {
            let l = log2_ceil(c.ranks);
            let rest = f64::from(c.ranks.saturating_sub(1)) * m.beta * bytes(c);
            if c.ranks.is_power_of_two() {
                l * m.alpha + rest
            } else {
                (l + 2.0) * m.alpha + 2.0 * rest
            }
        },
    },
    Alg {
        name: "bruck",
        kind: Kind::GatherAll,
        imp: Imp::Sched,
        requires: 0,
        forbids: bits::IMAGE_SPACE,
        sizes: ANY,
        cost: |m, c| {
            log2_ceil(c.ranks) * m.alpha + f64::from(c.ranks.saturating_sub(1)) * m.beta * bytes(c)
        },
    },
    Alg {
        name: "gather_broadcast",
        kind: Kind::GatherAll,
        imp: Imp::Sched,
        requires: 0,
        forbids: bits::IMAGE_SPACE,
        sizes: ANY,
        // A binomial gather, then ⌈log₂ np⌉ steps of the whole destination.
        cost: |m, c| {
            let l = log2_ceil(c.ranks);
            let all = f64::from(c.ranks) * bytes(c);
            2.0 * l * m.alpha + (all - bytes(c) + l * all) * m.beta
        },
    },
    Alg {
        name: "flat",
        kind: Kind::Exchange,
        imp: Imp::Flat,
        requires: 0,
        forbids: 0,
        sizes: ANY,
        // Every rank sends np − 1 blocks.
        cost: |m, c| f64::from(c.ranks.saturating_sub(1)) * (m.alpha + m.beta * bytes(c)),
    },
    Alg {
        name: "pairwise",
        kind: Kind::Exchange,
        imp: Imp::Sched,
        requires: 0,
        forbids: bits::IMAGE_SPACE,
        sizes: ANY,
        cost: |m, c| f64::from(c.ranks.saturating_sub(1)) * (m.alpha + m.beta * bytes(c)),
    },
    Alg {
        name: "bruck",
        kind: Kind::Exchange,
        imp: Imp::Sched,
        requires: 0,
        forbids: bits::IMAGE_SPACE | bits::V_FORM,
        sizes: (0, 2 << 10),
        // ⌈log₂ np⌉ messages of about np / 2 blocks each.
        cost: |m, c| {
            let l = log2_ceil(c.ranks);
            l * m.alpha + l * f64::from(c.ranks.div_ceil(2)) * m.beta * bytes(c)
        },
    },
    // The array reductions' trees and prefix schemes (algs/tree.rs, algs/prefix.rs): each
    // rank folds its own elements; the messages carry one element.
    Alg {
        name: "flat",
        kind: Kind::Reduce,
        imp: Imp::Flat,
        requires: 0,
        forbids: 0,
        sizes: ANY,
        // Every rank sends its partials to the root, which combines all of them.
        cost: |m, c| f64::from(c.ranks.saturating_sub(1)) * m.alpha + m.beta * bytes(c),
    },
    Alg {
        name: "binomial",
        kind: Kind::Reduce,
        imp: Imp::Sched,
        requires: bits::ALL_CONTRIBUTE | bits::ORDER_SAFE,
        forbids: bits::IMAGE_SPACE,
        sizes: ANY,
        cost: |m, c| (log2_ceil(c.ranks) + 1.0) * m.alpha + m.beta * bytes(c),
    },
    Alg {
        name: "knomial",
        kind: Kind::Reduce,
        imp: Imp::Sched,
        requires: bits::ALL_CONTRIBUTE | bits::ORDER_SAFE,
        forbids: bits::IMAGE_SPACE,
        sizes: ANY,
        // Radix 4: up to 3 receives per level, ⌈log4 np⌉ levels, and the hand-over of the
        // ranks before the root.
        cost: |m, c| ((log2_ceil(c.ranks) / 2.0).ceil() * 3.0 + 1.0) * m.alpha + m.beta * bytes(c),
    },
    Alg {
        name: "reduce_broadcast",
        kind: Kind::ReduceAll,
        imp: Imp::Sched,
        requires: bits::ALL_CONTRIBUTE | bits::ORDER_SAFE,
        forbids: bits::IMAGE_SPACE,
        sizes: ANY,
        // Half the messages of recursive doubling, twice the rounds.
        cost: |m, c| 2.0 * log2_ceil(c.ranks) * m.alpha + m.beta * bytes(c),
    },
    Alg {
        name: "flat",
        kind: Kind::Prefix,
        imp: Imp::Flat,
        requires: 0,
        forbids: 0,
        sizes: ANY,
        // Two exchanges: the operands to the ranks that own their results, then every rank's
        // runs' partials to every rank.
        cost: |m, c| 2.0 * (f64::from(c.ranks.saturating_sub(1)) * m.alpha + m.beta * bytes(c)),
    },
    Alg {
        name: "dissemination",
        kind: Kind::Prefix,
        imp: Imp::Sched,
        requires: bits::RUNS_IN_ORDER | bits::SAME_LAYOUT,
        forbids: bits::IMAGE_SPACE,
        sizes: ANY,
        cost: |m, c| log2_ceil(c.ranks) * m.alpha + m.beta * bytes(c),
    },
    Alg {
        name: "chain",
        kind: Kind::Prefix,
        imp: Imp::Sched,
        requires: bits::RUNS_IN_ORDER | bits::SAME_LAYOUT,
        forbids: bits::IMAGE_SPACE,
        sizes: ANY,
        // np − 1 hops; one message per rank.
        cost: |m, c| f64::from(c.ranks.saturating_sub(1)) * m.alpha + m.beta * bytes(c),
    },
    Alg {
        name: "flat",
        kind: Kind::ExclusivePrefix,
        imp: Imp::Flat,
        requires: 0,
        forbids: 0,
        sizes: ANY,
        // As the inclusive one.
        cost: |m, c| 2.0 * (f64::from(c.ranks.saturating_sub(1)) * m.alpha + m.beta * bytes(c)),
    },
    Alg {
        name: "dissemination",
        kind: Kind::ExclusivePrefix,
        imp: Imp::Sched,
        requires: bits::RUNS_IN_ORDER | bits::SAME_LAYOUT,
        forbids: bits::IMAGE_SPACE,
        sizes: ANY,
        cost: |m, c| log2_ceil(c.ranks) * m.alpha + m.beta * bytes(c),
    },
    Alg {
        name: "chain",
        kind: Kind::ExclusivePrefix,
        imp: Imp::Sched,
        requires: bits::RUNS_IN_ORDER | bits::SAME_LAYOUT,
        forbids: bits::IMAGE_SPACE,
        sizes: ANY,
        cost: |m, c| f64::from(c.ranks.saturating_sub(1)) * m.alpha + m.beta * bytes(c),
    },
    // The vector reductions (algs/vector.rs): every message carries vector bytes.
    Alg {
        name: "flat",
        kind: Kind::ReduceElems,
        imp: Imp::Flat,
        requires: 0,
        forbids: 0,
        sizes: ANY,
        // The root's rank takes in every rank's vector.
        cost: |m, c| f64::from(c.ranks.saturating_sub(1)) * (m.alpha + m.beta * bytes(c)),
    },
    Alg {
        name: "binomial",
        kind: Kind::ReduceElems,
        imp: Imp::Sched,
        requires: 0,
        forbids: bits::IMAGE_SPACE,
        sizes: ANY,
        cost: |m, c| (log2_ceil(c.ranks) + 1.0) * (m.alpha + m.beta * bytes(c)),
    },
    Alg {
        name: "reduce_scatter_gather",
        kind: Kind::ReduceElems,
        imp: Imp::Sched,
        requires: 0,
        forbids: bits::IMAGE_SPACE,
        sizes: (8 << 10, usize::MAX),
        // The reduce-scatter sends (p − 1)/p of the vector from a rank, the gather half a
        // vector per step into the root's side: priced as Rabenseifner's allreduce.
        cost: halving_cost,
    },
    Alg {
        name: "flat",
        kind: Kind::ReduceElemsAll,
        imp: Imp::Flat,
        requires: 0,
        forbids: 0,
        sizes: ANY,
        // Every rank sends its vector to every rank.
        cost: |m, c| f64::from(c.ranks.saturating_sub(1)) * (m.alpha + m.beta * bytes(c)),
    },
    Alg {
        name: "recursive_doubling",
        kind: Kind::ReduceElemsAll,
        imp: Imp::Sched,
        requires: 0,
        forbids: bits::IMAGE_SPACE,
        sizes: ANY,
        // Sizes that are not a power of two pair up before and after.
        cost: |m, c| {
            let extra = if c.ranks.is_power_of_two() { 0.0 } else { 2.0 };
            (log2_ceil(c.ranks) + extra) * (m.alpha + m.beta * bytes(c))
        },
    },
    Alg {
        name: "rabenseifner",
        kind: Kind::ReduceElemsAll,
        imp: Imp::Sched,
        requires: 0,
        forbids: bits::IMAGE_SPACE,
        sizes: (8 << 10, usize::MAX),
        cost: halving_cost,
    },
    Alg {
        name: "ring",
        kind: Kind::ReduceElemsAll,
        imp: Imp::Sched,
        // A segment is combined in a rotation of rank order.
        requires: bits::COMMUTATIVE,
        forbids: bits::IMAGE_SPACE,
        sizes: (32 << 10, usize::MAX),
        cost: |m, c| {
            let p = f64::from(c.ranks.max(1));
            2.0 * (p - 1.0) * m.alpha + 2.0 * (p - 1.0) / p * m.beta * bytes(c)
        },
    },
    Alg {
        name: "flat",
        kind: Kind::ScanElems,
        imp: Imp::Flat,
        requires: 0,
        forbids: 0,
        sizes: ANY,
        // The last rank takes in every earlier rank's vector.
        cost: |m, c| f64::from(c.ranks.saturating_sub(1)) * (m.alpha + m.beta * bytes(c)),
    },
    Alg {
        name: "dissemination",
        kind: Kind::ScanElems,
        imp: Imp::Sched,
        requires: 0,
        forbids: bits::IMAGE_SPACE,
        sizes: ANY,
        cost: |m, c| log2_ceil(c.ranks) * (m.alpha + m.beta * bytes(c)),
    },
    Alg {
        name: "flat",
        kind: Kind::ExclusiveScanElems,
        imp: Imp::Flat,
        requires: 0,
        forbids: 0,
        sizes: ANY,
        cost: |m, c| f64::from(c.ranks.saturating_sub(1)) * (m.alpha + m.beta * bytes(c)),
    },
    Alg {
        name: "dissemination",
        kind: Kind::ExclusiveScanElems,
        imp: Imp::Sched,
        requires: 0,
        forbids: bits::IMAGE_SPACE,
        sizes: ANY,
        // The shift, then the scan over the other ranks.
        cost: |m, c| (1.0 + log2_ceil(c.ranks.saturating_sub(1))) * (m.alpha + m.beta * bytes(c)),
    },
    // The signal schemes (`amnet_sync_modes::Signal`): the team barrier, and the entry and exit
    // signals of IN_ALLSYNC and OUT_ALLSYNC, chosen per team with 0 bytes.
    Alg {
        name: "dissemination",
        kind: Kind::Barrier,
        imp: Imp::Signal,
        requires: 0,
        forbids: 0,
        sizes: ANY,
        // ⌈log₂ np⌉ rounds of one message per rank.
        cost: |m, c| log2_ceil(c.ranks) * m.alpha,
    },
    Alg {
        name: "tree",
        kind: Kind::Barrier,
        imp: Imp::Signal,
        requires: 0,
        forbids: 0,
        sizes: ANY,
        // Up and down a binomial tree: twice the steps, 2(np − 1) messages in all instead of
        // np·⌈log₂ np⌉. The model counts steps only, so it never prefers the tree;
        // AMNET_COLL_TUNE or a tuning table selects it.
        cost: |m, c| 2.0 * log2_ceil(c.ranks) * m.alpha,
    },
    // ----- smp-native (shm/): one host, blocking calls of rank participants -----
    shm_alg(Kind::Broadcast, 0),
    shm_alg(Kind::Scatter, 0),
    shm_alg(Kind::Gather, 0),
    shm_alg(Kind::GatherAll, 0),
    shm_alg(Kind::Exchange, 0),
    shm_alg(Kind::Reduce, bits::ORDER_SAFE),
    shm_alg(Kind::ReduceAll, bits::ORDER_SAFE),
    shm_alg(Kind::ReduceElems, 0),
    shm_alg(Kind::ReduceElemsAll, 0),
    shm_alg(Kind::ScanElems, 0),
    shm_alg(Kind::ExclusiveScanElems, 0),
    // The array scans: a member's prefixes need only the fold of the earlier members' runs.
    shm_alg(Kind::Prefix, bits::RUNS_IN_ORDER | bits::SAME_LAYOUT),
    shm_alg(
        Kind::ExclusivePrefix,
        bits::RUNS_IN_ORDER | bits::SAME_LAYOUT,
    ),
    // The team barrier: flags, then it completes this rank's detached collectives.
    shm_alg(Kind::Barrier, 0),
    // ----- hierarchical (hier.rs): several hosts, blocking calls of rank participants -----
    hier_alg(Kind::Barrier, 0),
    hier_alg(Kind::Broadcast, 0),
    hier_alg(Kind::GatherAll, 0),
    hier_alg(Kind::Reduce, bits::COMMUTATIVE),
    hier_alg(Kind::ReduceAll, bits::COMMUTATIVE),
    hier_alg(Kind::ReduceElems, bits::COMMUTATIVE),
    hier_alg(Kind::ReduceElemsAll, bits::COMMUTATIVE),
];

/// The hierarchical algorithm of `kind`: it requires a team with a hierarchy (`HIER`) plus
/// `also`, and takes rank participants in a job of one image per rank, blocking calls with
/// uniform counts (in place too: whether a participant is, is not the same on every rank),
/// not aggregated and not in checked mode. Its cost: two
/// host-local phases (as `shm`'s) around a binomial tree among about half the ranks (a host
/// runs two ranks or more).
const fn hier_alg(kind: Kind, also: u64) -> Alg {
    Alg {
        name: "hier",
        kind,
        imp: Imp::Hier,
        requires: bits::HIER | also,
        forbids: bits::V_FORM
            | bits::AGGREGATED
            | bits::NONBLOCKING
            | bits::CHECKED
            | bits::IMAGE_SPACE
            | bits::ALL_THREADS
            | bits::MULTI_IMAGE,
        sizes: ANY,
        cost: |m, c| {
            let local = 0.2 * m.alpha + 2.0 * m.beta * bytes(c);
            local + log2_ceil(c.ranks.div_ceil(2).max(2)) * (m.alpha + m.beta * bytes(c))
        },
    }
}

/// The smp-native algorithm of `kind`: it requires a team on one host with its smp-native
/// state and contributions that fit (`SHM_FITS`) plus `also`, and takes no `v` forms,
/// aggregation, non-blocking calls or checked mode; rank participants (a rank's
/// representative call in a job of several images per rank among them) and image
/// participants (`m` forms, `ALL_THREADS`) alike. Its cost is one flag's latency plus a
/// single copy, below every algorithm that sends messages.
const fn shm_alg(kind: Kind, also: u64) -> Alg {
    Alg {
        name: "shm",
        kind,
        imp: Imp::Shm,
        requires: bits::HOST_SHM | bits::SHM_FITS | also,
        forbids: bits::V_FORM | bits::AGGREGATED | bits::NONBLOCKING | bits::CHECKED,
        sizes: ANY,
        cost: |m, c| 0.1 * m.alpha + m.beta * bytes(c),
    }
}

/// The bits of a team's own characteristics, the same on every member.
pub(crate) fn team_bits(geo: &crate::team::Geo, conduit: &str) -> u64 {
    use bits::*;
    let mut m = 0;
    let size = geo.size();
    if size == 1 {
        m |= ONE_RANK;
    }
    if size.is_power_of_two() {
        m |= POW2;
    }
    if geo.images.windows(2).all(|w| w[0] == w[1]) {
        m |= UNIFORM_IMAGES;
    }
    if geo.images.iter().any(|&n| n > 1) {
        m |= MULTI_IMAGE;
    }
    if conduit == "smp" {
        m |= DIRECT_SEGMENTS;
    }
    m
}

/// The flat algorithm of every other operation.
static FLAT: Alg = Alg {
    name: "flat",
    kind: Kind::Broadcast,
    imp: Imp::Flat,
    requires: 0,
    forbids: 0,
    sizes: ANY,
    cost: |_, _| 0.0,
};

/// The algorithms of each operation (indexed by `Kind as usize`), fallback first; built once.
fn by_kind() -> &'static [Vec<&'static Alg>] {
    static LISTS: std::sync::OnceLock<Vec<Vec<&'static Alg>>> = std::sync::OnceLock::new();
    LISTS.get_or_init(|| {
        let n = Kind::ALL.iter().map(|&k| k as usize + 1).max().unwrap_or(0);
        let mut v: Vec<Vec<&'static Alg>> = vec![Vec::new(); n];
        for k in Kind::ALL {
            let own: Vec<&'static Alg> = ALGS.iter().filter(|a| a.kind == k).collect();
            if own.is_empty() {
                v[k as usize].push(&FLAT);
            }
            v[k as usize].extend(own);
        }
        v
    })
}

/// The algorithms of `kind`, fallback first.
fn of(kind: Kind) -> impl Iterator<Item = &'static Alg> {
    by_kind()
        .get(kind as usize)
        .map_or(&[][..], Vec::as_slice)
        .iter()
        .copied()
}

/// Why `a` does not admit a call with `mask`, if it does not.
fn inadmissible(a: &Alg, mask: u64) -> Option<String> {
    let missing = a.requires & !mask;
    let forbidden = a.forbids & mask;
    if missing != 0 {
        Some(format!("it requires {}", bits::names(missing)))
    } else if forbidden != 0 {
        Some(format!("it does not take {}", bits::names(forbidden)))
    } else {
        None
    }
}

/// One forced choice of `AMNET_COLL_TUNE`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Forced {
    pub(crate) kind: Kind,
    pub(crate) min: usize,
    pub(crate) max: usize,
    pub(crate) alg: &'static str,
    /// `ALGORITHM?`: used where it is admissible, else ignored.
    pub(crate) prefer: bool,
    pub(crate) params: Vec<(String, u64)>,
}

fn size(v: &str) -> Option<usize> {
    let v = v.trim();
    let (num, mul) = match v.char_indices().last()? {
        (i, 'K' | 'k') => (&v[..i], 1usize << 10),
        (i, 'M' | 'm') => (&v[..i], 1 << 20),
        (i, 'G' | 'g') => (&v[..i], 1 << 30),
        _ => (v, 1),
    };
    num.parse::<usize>().ok()?.checked_mul(mul)
}

fn kind_named(name: &str) -> Option<Kind> {
    Kind::ALL.into_iter().find(|k| k.name() == name)
}

/// Parse `AMNET_COLL_TUNE`'s value.
pub(crate) fn parse_tune(text: &str) -> std::result::Result<Vec<Forced>, String> {
    let mut out = Vec::new();
    for item in text.split(';').map(str::trim).filter(|s| !s.is_empty()) {
        let fields: Vec<&str> = item.split(':').map(str::trim).collect();
        if fields.len() < 3 || fields.len() > 4 {
            return Err(format!(
                "{item:?}: expected OP:SIZES:ALGORITHM[:PARAM=VALUE,...]"
            ));
        }
        let kind = kind_named(fields[0])
            .ok_or_else(|| format!("{item:?}: no operation {:?}", fields[0]))?;
        let (lo, hi) = fields[1]
            .split_once('-')
            .ok_or_else(|| format!("{item:?}: sizes {:?} are not A-B", fields[1]))?;
        let min = if lo.is_empty() { Some(0) } else { size(lo) };
        let max = if hi.is_empty() {
            Some(usize::MAX)
        } else {
            size(hi)
        };
        let (Some(min), Some(max)) = (min, max) else {
            return Err(format!(
                "{item:?}: sizes {:?} are not byte counts",
                fields[1]
            ));
        };
        let (name, prefer) = match fields[2].strip_suffix('?') {
            Some(n) => (n, true),
            None => (fields[2], false),
        };
        let alg = of(kind)
            .find(|a| a.name == name)
            .map(|a| a.name)
            .ok_or_else(|| {
                let names: Vec<&str> = of(kind).map(|a| a.name).collect();
                format!(
                    "{item:?}: {} has no algorithm {name:?} (it has {})",
                    kind.name(),
                    names.join(", ")
                )
            })?;
        let mut params = Vec::new();
        if let Some(p) = fields.get(3) {
            for kv in p.split(',').filter(|s| !s.is_empty()) {
                let (k, v) = kv
                    .split_once('=')
                    .ok_or_else(|| format!("{item:?}: parameter {kv:?} is not NAME=VALUE"))?;
                let v = v
                    .trim()
                    .parse::<u64>()
                    .map_err(|_| format!("{item:?}: parameter {kv:?} is not a whole number"))?;
                params.push((k.trim().to_string(), v));
            }
        }
        out.push(Forced {
            kind,
            min,
            max,
            alg,
            prefer,
            params,
        });
    }
    Ok(out)
}

/// One line of a tuning table: for `kind` on teams of `ranks` and calls of `bytes`, the
/// measured best algorithm.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Tuned {
    pub(crate) kind: Kind,
    pub(crate) ranks: (u32, u32),
    pub(crate) bytes: (usize, usize),
    pub(crate) alg: &'static str,
}

/// Parse a tuning table (what `amnet-tune` writes, `AMNET_COLL_TUNING` names): one entry per
/// line, `OP RANKS BYTES ALGORITHM`, with `RANKS` and `BYTES` as `A-B` ranges (open ends
/// allowed, `K`/`M`/`G` suffixes for bytes); `#` starts a comment.
pub(crate) fn parse_table(text: &str) -> std::result::Result<Vec<Tuned>, String> {
    let mut out = Vec::new();
    for (no, line) in text.lines().enumerate() {
        let line = line.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let w: Vec<&str> = line.split_whitespace().collect();
        let at = |what: &str| format!("line {}: {what} in {line:?}", no + 1);
        if w.len() != 4 {
            return Err(at("expected OP RANKS BYTES ALGORITHM"));
        }
        let kind = kind_named(w[0]).ok_or_else(|| at("an unknown operation"))?;
        let range = |v: &str, f: &dyn Fn(&str) -> Option<usize>| -> Option<(usize, usize)> {
            let (a, b) = v.split_once('-')?;
            let a = if a.is_empty() { Some(0) } else { f(a) }?;
            let b = if b.is_empty() { Some(usize::MAX) } else { f(b) }?;
            Some((a, b))
        };
        let ranks = range(w[1], &|x| x.parse().ok()).ok_or_else(|| at("bad ranks"))?;
        let bytes = range(w[2], &size).ok_or_else(|| at("bad bytes"))?;
        let alg = of(kind)
            .find(|a| a.name == w[3])
            .map(|a| a.name)
            .ok_or_else(|| at("an unknown algorithm"))?;
        let narrow = |x: usize| u32::try_from(x).unwrap_or(u32::MAX);
        out.push(Tuned {
            kind,
            ranks: (narrow(ranks.0), narrow(ranks.1)),
            bytes,
            alg,
        });
    }
    Ok(out)
}

/// The selector of one rank: the forced choices, the tuning table and the cost model.
#[derive(Debug)]
pub(crate) struct Selector {
    /// `AMNET_COLL_TUNE`, or what `Coll::tune` set since.
    pub(crate) forced: std::sync::RwLock<Vec<Forced>>,
    /// `forced` is not empty (read without the lock on every call).
    pub(crate) any_forced: std::sync::atomic::AtomicBool,
    /// `AMNET_COLL_TUNING`'s table.
    pub(crate) table: Vec<Tuned>,
    pub(crate) model: Model,
    /// The unforced choices made so far, by (operation code, mask, bytes, ranks): the table
    /// and the model never change, so a call like an earlier one gets the same algorithm
    /// without evaluating the cost functions again. Emptied when it reaches `CACHE_MAX`.
    cache: std::sync::Mutex<ChoiceCache>,
    /// Bumped by every change of `forced`: a choice remembered outside the selector (the
    /// initiation's repeat of an smp-native call) holds only while this is unchanged.
    generation: std::sync::atomic::AtomicU64,
}

/// `Selector::cache`: (operation code, mask, bytes, ranks) to the algorithm chosen.
type ChoiceCache = crate::fasthash::FastMap<(u32, u64, usize, u32), &'static Alg>;

/// The most unforced choices `Selector::cache` keeps.
const CACHE_MAX: usize = 4096;

impl Selector {
    /// From the endpoint's configuration (`AMNET_COLL_TUNE`, `AMNET_COLL_TUNING`) and
    /// conduit.
    pub(crate) fn new(src: &amnet_core::Source, conduit: &str) -> Result<Selector> {
        let forced = match src.text(&vars::COLL_TUNE) {
            None => Vec::new(),
            Some(t) => {
                parse_tune(&t).map_err(|e| Error::Config(format!("AMNET_COLL_TUNE={t:?}: {e}")))?
            }
        };
        let table = match src.text(&vars::COLL_TUNING) {
            None => Vec::new(),
            Some(path) => {
                let text = std::fs::read_to_string(&path).map_err(|e| {
                    Error::Config(format!("AMNET_COLL_TUNING={path:?}: cannot read it: {e}"))
                })?;
                parse_table(&text)
                    .map_err(|e| Error::Config(format!("AMNET_COLL_TUNING={path:?}: {e}")))?
            }
        };
        Ok(Selector::from_parts(
            forced,
            table,
            Model::for_conduit(conduit),
        ))
    }

    /// A selector with these forced choices, tuning table and cost model.
    pub(crate) fn from_parts(forced: Vec<Forced>, table: Vec<Tuned>, model: Model) -> Selector {
        Selector {
            any_forced: (!forced.is_empty()).into(),
            forced: std::sync::RwLock::new(forced),
            table,
            model,
            cache: std::sync::Mutex::default(),
            generation: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// The count of changes of the forced choices so far (see the field).
    pub(crate) fn generation(&self) -> u64 {
        self.generation.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Replace the forced choices (the grammar of `AMNET_COLL_TUNE`; empty clears them).
    pub(crate) fn set_forced(&self, text: &str) -> std::result::Result<(), String> {
        let v = parse_tune(text)?;
        let mut f = self.forced.write().unwrap_or_else(|e| e.into_inner());
        self.any_forced
            .store(!v.is_empty(), std::sync::atomic::Ordering::Relaxed);
        *f = v;
        self.generation
            .fetch_add(1, std::sync::atomic::Ordering::Release);
        Ok(())
    }

    /// The algorithm for `c` and its parameters: a forced one with the parameters given (an
    /// error names why it does not apply), else the tuning table's (where it admits the
    /// call), else the cheapest admissible by the cost model (ties go to the earlier
    /// registered) with its default parameters.
    pub(crate) fn choose(&self, c: &CallInfo) -> Result<Choice> {
        if self.any_forced.load(std::sync::atomic::Ordering::Relaxed) && c.mask & bits::PHASE == 0 {
            if let Some(ch) = self.forced_choice(c)? {
                return Ok(ch);
            }
        }
        self.unforced(c)
    }

    /// The forced choice for `c`, if one applies (`Ok(None)`: none does, or a preferred one
    /// does not admit the call).
    fn forced_choice(&self, c: &CallInfo) -> Result<Option<Choice>> {
        let forced = self.forced.read().unwrap_or_else(|e| e.into_inner());
        if let Some(f) = forced
            .iter()
            .find(|f| f.kind == c.kind && (f.min..=f.max).contains(&c.bytes))
        {
            let a = of(c.kind)
                .find(|a| a.name == f.alg)
                .ok_or_else(|| Error::Config(format!("no algorithm {}", f.alg)))?;
            match inadmissible(a, c.mask) {
                None => {
                    return Ok(Some(Choice {
                        alg: a,
                        params: f.params.clone(),
                    }))
                }
                Some(_) if f.prefer => {}
                Some(why) => {
                    return Err(Error::Usage {
                        op: c.kind.name(),
                        detail: format!(
                            "AMNET_COLL_TUNE forces {} for {} bytes, but {why} and this call has \
                             {}",
                            a.name,
                            c.bytes,
                            bits::names(c.mask)
                        ),
                    })
                }
            }
        }
        Ok(None)
    }

    /// The tuning table's choice where it admits `c`, else the cost model's (remembered).
    fn unforced(&self, c: &CallInfo) -> Result<Choice> {
        let key = (c.kind.code(), c.mask, c.bytes, c.ranks);
        let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(&alg) = cache.get(&key) {
            return Ok(Choice {
                alg,
                params: Vec::new(),
            });
        }
        let alg = self.unforced_alg(c);
        if cache.len() >= CACHE_MAX {
            cache.clear();
        }
        cache.insert(key, alg);
        Ok(Choice {
            alg,
            params: Vec::new(),
        })
    }

    fn unforced_alg(&self, c: &CallInfo) -> &'static Alg {
        let tuned = self.table.iter().find_map(|t| {
            let fits = t.kind == c.kind
                && (t.ranks.0..=t.ranks.1).contains(&c.ranks)
                && (t.bytes.0..=t.bytes.1).contains(&c.bytes);
            of(c.kind).find(|a| fits && a.name == t.alg && inadmissible(a, c.mask).is_none())
        });
        if let Some(a) = tuned {
            return a;
        }
        let mut best: Option<(&'static Alg, f64)> = None;
        for a in of(c.kind) {
            if inadmissible(a, c.mask).is_some() || !(a.sizes.0..=a.sizes.1).contains(&c.bytes) {
                continue;
            }
            let cost = (a.cost)(&self.model, c);
            if best.is_none_or(|(_, b)| cost < b) {
                best = Some((a, cost));
            }
        }
        best.map_or(&FLAT, |(a, _)| a)
    }
}

/// The names of the algorithms of the operation named `op` (fallback first), or `None` for
/// an unknown operation.
pub(crate) fn algorithms(op: &str) -> Option<Vec<&'static str>> {
    kind_named(op).map(|k| of(k).map(|a| a.name).collect())
}

/// The selector's answer for one call.
#[derive(Debug, Clone)]
pub(crate) struct Choice {
    pub(crate) alg: &'static Alg,
    /// Parameters given by `AMNET_COLL_TUNE` (generators take their defaults for the rest).
    pub(crate) params: Vec<(String, u64)>,
}

impl Selector {
    /// The signal scheme of `geo`'s team: the `barrier` algorithm selected for it (0 bytes,
    /// the team's bits), the same on every member.
    pub(crate) fn signal(
        &self,
        geo: &crate::team::Geo,
        conduit: &str,
    ) -> amnet_sync_modes::SignalAlg {
        let c = CallInfo {
            kind: Kind::Barrier,
            mask: team_bits(geo, conduit),
            bytes: 0,
            ranks: geo.size(),
        };
        match self.choose(&c) {
            Ok(ch) if ch.alg.name == "tree" => amnet_sync_modes::SignalAlg::Tree,
            _ => amnet_sync_modes::SignalAlg::Dissemination,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tune_grammar() {
        let v = parse_tune("broadcast:0-4K:binomial; broadcast:4K-:flat?:radix=4").unwrap();
        assert_eq!(v.len(), 2);
        assert!(!v[0].prefer && v[1].prefer);
        assert_eq!((v[0].min, v[0].max, v[0].alg), (0, 4096, "binomial"));
        assert_eq!((v[1].min, v[1].max), (4096, usize::MAX));
        assert_eq!(v[1].params, vec![("radix".to_string(), 4)]);
        for bad in [
            "broadcast:0-4K",
            "broadcats:0-4K:flat",
            "broadcast:4K:flat",
            "broadcast:0-4Q:flat",
            "broadcast:0-:nosuch",
            "broadcast:0-:flat:radix",
        ] {
            assert!(parse_tune(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn every_rank_makes_the_same_choice_for_random_masks() {
        let sel = Selector::from_parts(Vec::new(), Vec::new(), Model::for_conduit("smp"));
        let mut x = 0x1234_5678_9abc_def0u64;
        for _ in 0..2000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            #[allow(clippy::cast_possible_truncation)] // small ranges
            let c = CallInfo {
                kind: Kind::ALL[(x % Kind::ALL.len() as u64) as usize],
                mask: x >> 8,
                bytes: (x >> 20) as usize % (1 << 22),
                ranks: (x >> 40) as u32 % 64 + 1,
            };
            // Two selectors (two ranks) agree, and the choice admits the call.
            let a = sel.choose(&c).unwrap().alg;
            let b = Selector::from_parts(Vec::new(), Vec::new(), Model::for_conduit("smp"))
                .choose(&c)
                .unwrap()
                .alg;
            assert_eq!(a.name, b.name);
            assert!(inadmissible(a, c.mask).is_none(), "{} for {c:?}", a.name);
            // The same call again comes from the cache, with the same answer.
            assert_eq!(sel.choose(&c).unwrap().alg.name, a.name);
        }
        assert!(!sel.cache.lock().unwrap().is_empty());
    }

    #[test]
    fn tuning_tables() {
        let t = parse_table(
            "# measured\nbroadcast 2-4 0-4K binomial\nbroadcast 5- 64K- knomial # big\n",
        )
        .unwrap();
        assert_eq!(t.len(), 2);
        assert_eq!((t[1].ranks, t[1].bytes.0), ((5, u32::MAX), 65536));
        let sel = Selector::from_parts(Vec::new(), t, Model::for_conduit("udp"));
        let c = CallInfo {
            kind: Kind::Broadcast,
            mask: 0,
            bytes: 100_000,
            ranks: 8,
        };
        assert_eq!(sel.choose(&c).unwrap().alg.name, "knomial");
        // Where the table's algorithm does not admit the call, the model chooses.
        let imgs = CallInfo {
            mask: bits::IMAGE_SPACE,
            ..c
        };
        assert_eq!(sel.choose(&imgs).unwrap().alg.name, "flat");
        for bad in [
            "broadcast 2-4 0-4K",
            "bcast 1- 0- flat",
            "broadcast x- 0- flat",
        ] {
            assert!(parse_table(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_forced_choice_that_does_not_apply_is_an_error_saying_why() {
        let sel = Selector::from_parts(
            parse_tune("broadcast:-:binomial").unwrap(),
            Vec::new(),
            Model::for_conduit("smp"),
        );
        let c = CallInfo {
            kind: Kind::Broadcast,
            mask: bits::IMAGE_SPACE,
            bytes: 8,
            ranks: 4,
        };
        let e = sel.choose(&c).unwrap_err().to_string();
        assert!(
            e.contains("binomial") && e.contains("image participants"),
            "{e}"
        );
        let soft = Selector::from_parts(
            parse_tune("broadcast:-:binomial?").unwrap(),
            Vec::new(),
            Model::for_conduit("smp"),
        );
        assert_eq!(soft.choose(&c).unwrap().alg.name, "flat");
        let plain = CallInfo { mask: 0, ..c };
        assert_eq!(soft.choose(&plain).unwrap().alg.name, "binomial");
    }

    #[test]
    fn hier_takes_blocking_rank_calls_on_a_team_with_a_hierarchy() {
        use bits::*;
        let sel = Selector::from_parts(Vec::new(), Vec::new(), Model::for_conduit("udp"));
        let base = HIER | UNIFORM_IMAGES | SINGLE_ADDR | IN_ALL | OUT_ALL;
        let red = COMMUTATIVE | ALL_CONTRIBUTE | ORDER_SAFE | BUILTIN_FN;
        // Forced choices do not apply to the phases.
        sel.set_forced("broadcast:-:flat").unwrap();
        let phase = CallInfo {
            kind: Kind::Broadcast,
            mask: PHASE | HOST_SHM | SHM_FITS | UNIFORM_IMAGES,
            bytes: 8,
            ranks: 2,
        };
        assert_eq!(sel.choose(&phase).unwrap().alg.name, "shm");
        sel.set_forced("").unwrap();
        for (kind, extra) in [
            (Kind::Barrier, 0),
            (Kind::Broadcast, 0),
            (Kind::GatherAll, 0),
            (Kind::Reduce, red),
            (Kind::ReduceAll, red),
            (Kind::ReduceElemsAll, red),
        ] {
            let c = CallInfo {
                kind,
                mask: base | extra,
                bytes: 8,
                ranks: 4,
            };
            assert_eq!(sel.choose(&c).unwrap().alg.name, "hier", "{kind:?}");
            // Not without the hierarchy, nor for a non-blocking or image call.
            for (on, off) in [(0, HIER), (NONBLOCKING, 0), (IMAGE_SPACE, 0), (CHECKED, 0)] {
                let m = CallInfo {
                    mask: (c.mask | on) & !off,
                    ..c
                };
                assert_ne!(sel.choose(&m).unwrap().alg.name, "hier", "{kind:?} {on:#x}");
            }
        }
        // A non-commutative reduction combines in participant order: not by host.
        let nc = CallInfo {
            kind: Kind::ReduceAll,
            mask: base | ALL_CONTRIBUTE | ORDER_SAFE | RUNS_IN_ORDER,
            bytes: 8,
            ranks: 4,
        };
        assert_ne!(sel.choose(&nc).unwrap().alg.name, "hier");
        // Participants without elements: the array reductions' records say so.
        let sparse = CallInfo {
            kind: Kind::ReduceAll,
            mask: base | COMMUTATIVE | ORDER_SAFE | BUILTIN_FN,
            bytes: 8,
            ranks: 4,
        };
        assert_eq!(sel.choose(&sparse).unwrap().alg.name, "hier");
        // Forced where it is not admissible: an error naming what it requires.
        sel.set_forced("reduce_to_all:-:hier").unwrap();
        let e = sel.choose(&nc).unwrap_err().to_string();
        assert!(e.contains("a commutative function"), "{e}");
    }

    #[test]
    fn the_signal_schemes_are_barrier_algorithms() {
        assert_eq!(
            algorithms("barrier"),
            Some(vec!["dissemination", "tree", "shm", "hier"])
        );
        let geo = crate::team::Geo::new(0, (0..6).collect(), 2, &[1; 6]);
        let sel = Selector::from_parts(Vec::new(), Vec::new(), Model::for_conduit("udp"));
        use amnet_sync_modes::SignalAlg;
        assert_eq!(sel.signal(&geo, "udp"), SignalAlg::Dissemination);
        sel.set_forced("barrier:-:tree").unwrap();
        assert_eq!(sel.signal(&geo, "udp"), SignalAlg::Tree);
        sel.set_forced("barrier:-:dissemination").unwrap();
        assert_eq!(sel.signal(&geo, "smp"), SignalAlg::Dissemination);
        assert!(parse_tune("barrier:-:ring").is_err());
        // The smp-native barrier is no signal scheme: forcing it leaves the signals on
        // dissemination.
        sel.set_forced("barrier:-:shm").unwrap();
        assert_eq!(sel.signal(&geo, "smp"), SignalAlg::Dissemination);
    }

    #[test]
    fn smp_native_algorithms_take_blocking_rank_calls_that_fit() {
        use bits::*;
        let sel = Selector::from_parts(Vec::new(), Vec::new(), Model::for_conduit("smp"));
        let base = HOST_SHM | SHM_FITS | DIRECT_SEGMENTS | UNIFORM_IMAGES | SINGLE_ADDR;
        let red =
            COMMUTATIVE | BUILTIN_FN | ALL_CONTRIBUTE | ORDER_SAFE | RUNS_IN_ORDER | SAME_LAYOUT;
        let scans = [Kind::Prefix, Kind::ExclusivePrefix];
        for kind in Kind::ALL {
            for ranks in [2, 3, 8, 16] {
                for bytes in [0, 8, 4096, 1 << 20] {
                    if kind == Kind::Barrier && bytes > 0 {
                        continue;
                    }
                    let pick = |mask: u64| {
                        sel.choose(&CallInfo {
                            kind,
                            mask: mask | if kind.is_reduction() { red } else { 0 },
                            bytes,
                            ranks,
                        })
                        .unwrap()
                        .alg
                        .name
                    };
                    assert_eq!(pick(base), "shm", "{kind:?} {ranks} ranks {bytes} B");
                    for off in [HOST_SHM, SHM_FITS] {
                        assert_ne!(pick(base & !off), "shm", "{kind:?} without {off:#x}");
                    }
                    for on in [NONBLOCKING, AGGREGATED, V_FORM, CHECKED] {
                        assert_ne!(pick(base | on), "shm", "{kind:?} with {on:#x}");
                    }
                    // Image participants (`m` forms, `ALL_THREADS`).
                    for images in [IMAGE_SPACE, IMAGE_SPACE | ALL_THREADS] {
                        assert_eq!(
                            pick(base | images | MULTI_IMAGE),
                            "shm",
                            "{kind:?} with image participants ({images:#x})"
                        );
                    }
                }
            }
        }
        // The array scans need one run per participant, in order, in the same layout.
        for kind in scans {
            for off in [RUNS_IN_ORDER, SAME_LAYOUT] {
                let c = CallInfo {
                    kind,
                    mask: (base | red) & !off,
                    bytes: 8,
                    ranks: 4,
                };
                assert_ne!(
                    sel.choose(&c).unwrap().alg.name,
                    "shm",
                    "{kind:?} without {off:#x}"
                );
            }
        }
    }

    #[test]
    fn vector_allreduce_goes_by_size_and_ring_takes_commutative_functions_only() {
        let sel = Selector::from_parts(Vec::new(), Vec::new(), Model::for_conduit("smp"));
        let pick = |mask: u64, bytes: usize| {
            sel.choose(&CallInfo {
                kind: Kind::ReduceElemsAll,
                mask,
                bytes,
                ranks: 8,
            })
            .unwrap()
            .alg
            .name
        };
        let comm = bits::COMMUTATIVE | bits::POW2;
        assert_eq!(pick(comm, 8), "recursive_doubling");
        assert_eq!(pick(comm, 64 << 10), "rabenseifner");
        assert_eq!(pick(comm, 16 << 20), "ring");
        assert_eq!(pick(bits::POW2, 16 << 20), "rabenseifner");
        assert_eq!(pick(comm | bits::IMAGE_SPACE, 8), "flat");
    }

    #[test]
    fn the_cost_model_keeps_to_each_algorithms_size_range_and_forcing_does_not() {
        let sel = Selector::from_parts(Vec::new(), Vec::new(), Model::for_conduit("smp"));
        let sizes = [
            0usize,
            1,
            2 << 10,
            (2 << 10) + 1,
            8 << 10,
            32 << 10,
            1 << 20,
            16 << 20,
        ];
        for k in Kind::ALL {
            for ranks in 1..=17u32 {
                for &bytes in &sizes {
                    for mask in [0, bits::COMMUTATIVE | bits::BUILTIN_FN] {
                        let mask = mask
                            | if ranks.is_power_of_two() {
                                bits::POW2
                            } else {
                                0
                            };
                        let c = CallInfo {
                            kind: k,
                            mask,
                            bytes,
                            ranks,
                        };
                        let a = sel.choose(&c).unwrap().alg;
                        assert!(
                            (a.sizes.0..=a.sizes.1).contains(&bytes),
                            "{} chose {} at {bytes} B",
                            k.name(),
                            a.name
                        );
                    }
                }
            }
        }
        let forced = Selector::from_parts(
            parse_tune("exchange:-:bruck").unwrap(),
            Vec::new(),
            Model::for_conduit("smp"),
        );
        let c = CallInfo {
            kind: Kind::Exchange,
            mask: bits::POW2,
            bytes: 1 << 20,
            ranks: 8,
        };
        assert_eq!(sel.choose(&c).unwrap().alg.name, "flat");
        assert_eq!(forced.choose(&c).unwrap().alg.name, "bruck");
    }

    #[test]
    fn vector_reduce_goes_by_size() {
        let sel = Selector::from_parts(Vec::new(), Vec::new(), Model::for_conduit("smp"));
        let pick = |bytes: usize, ranks: u32| {
            sel.choose(&CallInfo {
                kind: Kind::ReduceElems,
                mask: if ranks.is_power_of_two() {
                    bits::POW2
                } else {
                    0
                },
                bytes,
                ranks,
            })
            .unwrap()
            .alg
            .name
        };
        for ranks in [4, 8, 9, 16] {
            // Small: the tree (or, where their costs tie, the flat fallback).
            assert_ne!(pick(8, ranks), "reduce_scatter_gather", "{ranks} ranks");
            assert_eq!(
                pick(4 << 20, ranks),
                "reduce_scatter_gather",
                "{ranks} ranks"
            );
        }
    }
}
