//! The conduit test suite as real multi-process jobs on the selected conduit (default smp),
//! at several job sizes, plus the AM-based put/get path.

mod common;

use common::job;

// The tests of this file run in parallel: nothing here may change the process environment
// (the AM put/get path, which needs AMNET_RMA=am, is tested from its own binary).

#[test]
fn suite_1_rank() {
    job(1, None);
}

#[test]
fn suite_2_ranks() {
    let (passed, _, skipped) = job(2, None);
    // Only the tests about another conduit's own behaviour, and those that need more ranks,
    // may be skipped.
    let conduit = common::conduit().name();
    let other = amnet_testsuite::all_tests()
        .iter()
        .filter(|t| t.only_conduit.is_some_and(|c| c != conduit) || t.min_ranks > 2)
        .count();
    assert_eq!(
        skipped as usize, other,
        "at 2 ranks only the {other} tests of other conduits or for more ranks may be skipped"
    );
    assert!(passed >= 30);
}

#[test]
fn suite_3_ranks() {
    job(3, None);
}

#[test]
fn suite_4_ranks() {
    job(4, None);
}

#[test]
fn suite_8_ranks_on_2_cores() {
    job(8, None);
}
