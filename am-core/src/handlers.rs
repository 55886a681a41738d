//! Every handler index amnet itself uses, in one table.
//!
//! Index 0 is never valid. 1..=127 belong to the library: the core's own handlers below, and
//! the ranges of the library layers above the core ([`Layer`]), which the core reserves at
//! attach and hands to a layer only through [`Endpoint::layer`](crate::Endpoint::layer).
//! 128..=255 belong to clients ([`FIRST_CLIENT`]); registering any other index in a
//! [`HandlerTable`](crate::HandlerTable) is [`Error::ReservedHandler`](crate::Error).

use std::ops::RangeInclusive;

/// The AM reference path's put: a chunk of data for the target's segment.
pub const PUT: u8 = 1;
/// The reply to [`PUT`]: the chunk is in place.
pub const PUT_ACK: u8 = 2;
/// The AM reference path's get: a request for a range of the target's segment.
pub const GET: u8 = 3;
/// The reply to [`GET`]: the bytes.
pub const GET_REPLY: u8 = 4;
/// A split-phase barrier's notification.
pub const BARRIER: u8 = 5;
/// An atomic operation for the target's segment (AM path of atomic domains).
pub const ATOMIC: u8 = 6;
/// The reply to [`ATOMIC`]: the status and the value read.
pub const ATOMIC_REPLY: u8 = 7;
/// A vector/indexed/strided put's packed ranges and bytes (AM path).
pub const VIS_PUT: u8 = 8;
/// The reply to [`VIS_PUT`]: a status.
pub const VIS_ACK: u8 = 9;
/// A vector/indexed/strided get's packed ranges (AM path; answered with [`GET_REPLY`]).
pub const VIS_GET: u8 = 10;

/// The collectives' data for a participant's destination.
pub const COLL_DATA: u8 = 40;
/// The collectives' packed stream of reduction operands or partial results.
pub const COLL_STAGE: u8 = 41;
/// The collectives' entry or exit signal of a group.
pub const COLL_SIG: u8 = 42;
/// The collectives' call signature (checked mode).
pub const COLL_CHECK: u8 = 43;
/// The collectives' message of a scheduled algorithm.
pub const COLL_SCHED: u8 = 44;

/// The first index clients may use.
pub const FIRST_CLIENT: u8 = 128;

/// A library layer above the core, and the handler indices it owns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Layer {
    /// The collectives (`amnet-coll`).
    Coll,
}

impl Layer {
    /// Every layer.
    pub const ALL: [Layer; 1] = [Layer::Coll];

    /// The handler indices the layer owns.
    pub const fn indices(self) -> RangeInclusive<u8> {
        match self {
            Layer::Coll => COLL_DATA..=COLL_SCHED,
        }
    }

    /// The layer's name, for messages.
    pub const fn name(self) -> &'static str {
        match self {
            Layer::Coll => "coll",
        }
    }

    /// The layer's position in per-layer tables.
    pub(crate) const fn slot(self) -> usize {
        match self {
            Layer::Coll => 0,
        }
    }

    /// The layer that owns `index`, if any.
    pub fn owning(index: u8) -> Option<Layer> {
        Layer::ALL
            .into_iter()
            .find(|l| l.indices().contains(&index))
    }
}

/// Every library index with what it is for, in index order.
pub const LIBRARY: &[(u8, &str)] = &[
    (PUT, "put (AM path)"),
    (PUT_ACK, "put acknowledgement (AM path)"),
    (GET, "get (AM path)"),
    (GET_REPLY, "get reply (AM path)"),
    (BARRIER, "barrier notification"),
    (ATOMIC, "atomic operation (AM path)"),
    (ATOMIC_REPLY, "atomic operation reply (AM path)"),
    (VIS_PUT, "vector/indexed/strided put (AM path)"),
    (
        VIS_ACK,
        "vector/indexed/strided put acknowledgement (AM path)",
    ),
    (VIS_GET, "vector/indexed/strided get (AM path)"),
    (COLL_DATA, "collectives: data"),
    (COLL_STAGE, "collectives: reduction stream"),
    (COLL_SIG, "collectives: entry/exit signal"),
    (COLL_CHECK, "collectives: checked-mode signature"),
    (COLL_SCHED, "collectives: message of a scheduled algorithm"),
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_is_ordered_unique_and_below_the_clients() {
        for w in LIBRARY.windows(2) {
            assert!(w[0].0 < w[1].0, "{w:?}");
        }
        for &(i, what) in LIBRARY {
            assert!(i != 0 && i < FIRST_CLIENT, "{i} {what}");
        }
        for l in Layer::ALL {
            for i in l.indices() {
                assert!(LIBRARY.iter().any(|&(j, _)| j == i), "{i} of {l:?}");
                assert_eq!(Layer::owning(i), Some(l));
            }
        }
        assert_eq!(Layer::owning(PUT), None);
    }
}
