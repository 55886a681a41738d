//! The suite with put/get forced onto the core's AM-based reference path (`AMNET_RMA=am`),
//! which conduits without shared memory use.

use std::time::Duration;

use amnet_launch::LaunchOptions;

#[test]
fn suite_4_ranks_am_rma() {
    let summary = std::env::temp_dir().join(format!("amnet-suite-ref-{}", std::process::id()));
    std::env::set_var("AMNET_RMA", "am");
    let opts = LaunchOptions {
        ranks: 4,
        program: env!("CARGO_BIN_EXE_amnet-testsuite").into(),
        args: vec!["--summary".into(), summary.to_string_lossy().into_owned()],
        timeout: Some(Duration::from_secs(600)),
        conduit: amnet::selected_conduit().expect("AMNET_CONDUIT"),
        grace: Duration::from_secs(2),
    };
    let code = amnet_launch::launch_job(&opts).expect("launch");
    let text = std::fs::read_to_string(&summary).unwrap_or_default();
    let _ = std::fs::remove_file(&summary);
    assert_eq!(code, 0, "suite exited with {code}: {text:?}");
    let v: Vec<u32> = text
        .split_whitespace()
        .filter_map(|x| x.parse().ok())
        .collect();
    assert!(v.len() == 3 && v[0] > 0 && v[1] == 0, "summary {text:?}");
}
