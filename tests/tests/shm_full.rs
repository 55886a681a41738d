//! A full /dev/shm is an error naming the object and its size, at start-up, never a SIGBUS:
//! in the launcher (the job's control block) and in the ranks (their queues). Each case runs
//! in a private mount namespace with a 4 MiB /dev/shm; where namespaces cannot be made the
//! test says so and passes.

use std::process::Command;
use std::time::Duration;

use amnet_launch::LaunchOptions;

const CHILD: &str = "SHM_FULL_LAUNCHER";

/// Inside the namespace: launch a 2-rank smp job of the suite and exit with its code (2 with
/// the error when the launch itself fails).
fn launcher() -> ! {
    let mut opts = LaunchOptions::new(2, env!("CARGO_BIN_EXE_amnet-testsuite"));
    opts.args = vec!["am_short_args".into()];
    opts.conduit = amnet::ConduitKind::Smp;
    opts.timeout = Some(Duration::from_secs(60));
    match amnet_launch::launch_job(&opts) {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            eprintln!("launch: {e}");
            std::process::exit(2)
        }
    }
}

#[test]
fn a_full_dev_shm_is_an_error_not_a_signal() {
    if std::env::var_os(CHILD).is_some() {
        launcher();
    }
    let probe = Command::new("unshare")
        .args(["-m", "--propagation", "private", "true"])
        .output();
    if !probe.as_ref().is_ok_and(|o| o.status.success()) {
        eprintln!("skipped: cannot make a private mount namespace (unshare -m): {probe:?}");
        return;
    }
    let exe = std::env::current_exe().expect("current_exe");
    // (MiB of filler in the 4 MiB /dev/shm, where the error comes from): all of it leaves no
    // room for the control block; 3 MiB leaves room for it but not for a rank's queues.
    for (filler, expect) in [
        (8, "launch: smp conduit: reserving"),
        (3, "smp conduit: reserving"),
    ] {
        let script = format!(
            "mount -t tmpfs -o size=4M tmpfs /dev/shm || exit 97; \
             dd if=/dev/zero of=/dev/shm/filler bs=1M count={filler} 2>/dev/null; \
             \"$0\" \"$@\"; rc=$?; rm -f /dev/shm/filler; echo \"left: $(ls /dev/shm)\" >&2; \
             exit $rc"
        );
        let out = Command::new("unshare")
            .args(["-m", "--propagation", "private", "sh", "-c", &script])
            .arg(&exe)
            .args([
                "a_full_dev_shm_is_an_error_not_a_signal",
                "--exact",
                "--nocapture",
            ])
            .env(CHILD, "1")
            .output()
            .expect("run unshare");
        let code = out.status.code().unwrap_or(-1);
        let err = String::from_utf8_lossy(&out.stderr);
        if code == 97 {
            eprintln!("skipped: cannot mount a tmpfs in the namespace: {err}");
            return;
        }
        assert_ne!(
            code, 0,
            "the job ran with {filler} MiB of /dev/shm taken: {err}"
        );
        assert_ne!(
            code,
            128 + libc::SIGBUS,
            "SIGBUS with {filler} MiB taken: {err}"
        );
        assert!(
            err.contains(expect) && err.contains("/amnet-") && err.contains("No space left"),
            "{filler} MiB taken: the error should name the object, its size and the cause \
             ({expect:?}): {err}"
        );
        assert!(err.contains("left: \n"), "objects left in /dev/shm: {err}");
    }
}
