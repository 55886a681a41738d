//! A launcher killed with SIGKILL in the middle of an smp job leaves nothing in /dev/shm: the
//! ranks die with it (PR_SET_PDEATHSIG), and no object of the job outlives the ranks (they
//! unlink the control block's name once every rank has opened it; the next launcher sweeps
//! what a job whose owner is gone left).

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use amnet_launch::LaunchOptions;

const CHILD: &str = "LAUNCHER_KILLED_CHILD";

/// The objects of jobs launched by process `pid`.
fn objects_of(pid: u32) -> Vec<String> {
    let prefix = format!("amnet-{pid}-");
    std::fs::read_dir("/dev/shm")
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with(&prefix))
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn a_killed_launcher_leaves_nothing_in_dev_shm() {
    if std::env::var_os(CHILD).is_some() {
        // The launcher: a storm long enough to be killed in the middle of.
        let mut opts = LaunchOptions::new(4, env!("CARGO_BIN_EXE_amnet-testsuite"));
        opts.args = vec!["am_storm".into()];
        opts.conduit = amnet::ConduitKind::Smp;
        opts.timeout = Some(Duration::from_secs(120));
        let code = amnet_launch::launch_job(&opts).expect("launch");
        std::process::exit(code);
    }
    let mut child = Command::new(std::env::current_exe().expect("current_exe"))
        .args(["a_killed_launcher_leaves_nothing_in_dev_shm", "--exact"])
        .env(CHILD, "1")
        .env("AMNET_STORM", "20000000")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the launcher");
    let pid = child.id();
    // Wait until the job exists, then until its ranks are in the storm.
    let t0 = Instant::now();
    while objects_of(pid).is_empty() {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "the job never started"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    std::thread::sleep(Duration::from_secs(3));
    child.kill().expect("SIGKILL the launcher");
    child.wait().expect("reap the launcher");
    let t1 = Instant::now();
    loop {
        let left = objects_of(pid);
        if left.is_empty() {
            break;
        }
        assert!(
            t1.elapsed() < Duration::from_secs(20),
            "the killed launcher's job left {left:?} in /dev/shm"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(!Path::new("/dev/shm")
        .join(format!("amnet-{pid}-x"))
        .exists());
}
