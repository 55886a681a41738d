//! `AMNET_STATS=1`: the reports of ranks that end together reach the launcher's stderr whole,
//! each line in one piece (a report leaves in one write).
//!
//! The test runs itself again as the launcher of an 8-rank udp job with its stderr piped (the
//! ranks inherit it), then reads every line.

use std::process::{Command, Stdio};
use std::time::Duration;

use amnet_launch::LaunchOptions;

const CHILD: &str = "STATS_REPORT_LAUNCHER";

#[test]
fn stats_reports_do_not_interleave() {
    if std::env::var_os(CHILD).is_some() {
        let mut opts = LaunchOptions::new(8, env!("CARGO_BIN_EXE_amnet-testsuite"));
        opts.args = vec!["am_short_args".into()];
        // udp: its report has the conduit's own line too.
        opts.conduit = amnet::ConduitKind::Udp;
        opts.timeout = Some(Duration::from_secs(120));
        let code = amnet_launch::launch_job(&opts).expect("launch");
        std::process::exit(code);
    }
    let out = Command::new(std::env::current_exe().expect("current_exe"))
        .args(["stats_reports_do_not_interleave", "--exact", "--nocapture"])
        .env(CHILD, "1")
        .env("AMNET_STATS", "1")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .expect("run the launcher");
    assert!(out.status.success(), "the job failed: {out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    let mut reports = 0;
    for line in err.lines().filter(|l| l.contains("amnet stats")) {
        let rest = line
            .strip_prefix("amnet stats rank ")
            .unwrap_or_else(|| panic!("a line with a report inside: {line:?}\n{err}"));
        let (rank, body) = rest
            .split_once(": ")
            .unwrap_or_else(|| panic!("a report line cut short: {line:?}"));
        assert!(rank.parse::<u32>().is_ok_and(|r| r < 8), "{line:?}");
        assert!(!body.contains("amnet"), "two reports in one line: {line:?}");
        reports += 1;
    }
    // Six lines per rank: four message groups, the totals and the conduit's counters.
    assert_eq!(reports, 8 * 6, "{err}");
}
