//! The collectives tests of the suite (`coll` filter) as real multi-process jobs at 1, 2, 3,
//! 4 and 7 ranks (odd sizes exercise the dissemination rounds and block-cyclic layouts that
//! do not divide evenly).

use std::time::Duration;

use amnet::launch::LaunchOptions;

fn conduit() -> String {
    std::env::var("AMNET_CONDUIT")
        .ok()
        .filter(|c| !c.is_empty())
        .unwrap_or_else(|| "smp".into())
}

/// Run the `coll` tests as an `n`-rank job; returns (passed, failed, skipped).
fn job(n: u32) -> (u32, u32, u32) {
    let dir = std::env::temp_dir().join(format!("amnet-coll-{}-{n}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let summary = dir.join("summary");
    let _ = std::fs::remove_file(&summary);
    let opts = LaunchOptions {
        ranks: n,
        program: env!("CARGO_BIN_EXE_amnet-testsuite").into(),
        args: vec![
            "--summary".to_string(),
            summary.to_string_lossy().into_owned(),
            "coll".to_string(),
        ],
        // The watchdog inside the suite fires first; this bounds a hang of the launcher itself.
        timeout: Some(Duration::from_secs(600)),
        conduit: conduit(),
        grace: Duration::from_secs(2),
    };
    let code = amnet::launch_job(&opts).expect("launch");
    let text = std::fs::read_to_string(&summary).unwrap_or_default();
    let v: Vec<u32> = text
        .split_whitespace()
        .filter_map(|x| x.parse().ok())
        .collect();
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(
        code, 0,
        "the {n}-rank coll job exited with {code} (summary {text:?})"
    );
    assert_eq!(v.len(), 3, "no summary from the {n}-rank coll job");
    assert_eq!(v[1], 0, "{} coll tests failed in the {n}-rank job", v[1]);
    assert!(v[0] >= 10, "the {n}-rank coll job ran only {} tests", v[0]);
    (v[0], v[1], v[2])
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
