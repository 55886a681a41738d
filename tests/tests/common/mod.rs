//! Running the conduit test suite as a real job, shared by the integration tests.

use std::time::Duration;

use amnet::ConduitKind;
use amnet_launch::LaunchOptions;

/// The conduit the jobs run on: `AMNET_CONDUIT`, smp by default.
pub(crate) fn conduit() -> ConduitKind {
    amnet::selected_conduit().expect("AMNET_CONDUIT")
}

/// Run the suite (only the tests matching `filter`, if given) as an `n`-rank job; asserts
/// that it exited with 0 and failed nothing, and returns (passed, failed, skipped).
pub(crate) fn job(n: u32, filter: Option<&str>) -> (u32, u32, u32) {
    let dir = std::env::temp_dir().join(format!(
        "amnet-suite-{}-{n}-{}",
        std::process::id(),
        filter.unwrap_or("all")
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let summary = dir.join(format!("summary-{}", filter.unwrap_or("all")));
    let _ = std::fs::remove_file(&summary);
    let opts = LaunchOptions {
        ranks: n,
        program: env!("CARGO_BIN_EXE_amnet-testsuite").into(),
        args: [
            "--summary".to_string(),
            summary.to_string_lossy().into_owned(),
        ]
        .into_iter()
        .chain(filter.map(str::to_string))
        .collect(),
        // The watchdog inside the suite fires first; this bounds a hang of the launcher itself.
        timeout: Some(Duration::from_secs(600)),
        conduit: conduit(),
        grace: Duration::from_secs(2),
    };
    let code = amnet_launch::launch_job(&opts).expect("launch");
    let text = std::fs::read_to_string(&summary).unwrap_or_default();
    let v: Vec<u32> = text
        .split_whitespace()
        .filter_map(|x| x.parse().ok())
        .collect();
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(
        code, 0,
        "the {n}-rank suite job exited with {code} (summary {text:?})"
    );
    assert_eq!(v.len(), 3, "no summary from the {n}-rank job");
    assert_eq!(v[1], 0, "{} tests failed in the {n}-rank job", v[1]);
    assert!(v[0] > 0, "the {n}-rank job ran no test");
    (v[0], v[1], v[2])
}
