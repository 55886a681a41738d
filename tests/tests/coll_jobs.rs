//! The collectives tests of the suite (`coll` filter) as real multi-process jobs at 1, 2, 3,
//! 4 and 7 ranks (odd sizes exercise the dissemination rounds and block-cyclic layouts that
//! do not divide evenly).

mod common;

/// Run the `coll` tests as an `n`-rank job; returns (passed, failed, skipped).
fn job(n: u32) -> (u32, u32, u32) {
    let r = common::job(n, Some("coll"));
    assert!(r.0 >= 10, "the {n}-rank coll job ran only {} tests", r.0);
    r
}

#[test]
fn coll_1_rank() {
    job(1);
}

#[test]
fn coll_2_ranks() {
    job(2);
}

#[test]
fn coll_3_ranks() {
    job(3);
}

#[test]
fn coll_4_ranks() {
    job(4);
}

#[test]
fn coll_7_ranks() {
    job(7);
}
