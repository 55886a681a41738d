//! Whether a host is oversubscribed follows the CPUs its ranks may run on together (the union
//! of their affinity masks), not one rank's mask: two ranks bound to a core each, as mpirun
//! binds them, are not oversubscribed and their waits spin; two ranks bound to the same core
//! are, and their waits yield. On smp, and on udp through the host-local bypass's group.
//!
//! The test runs itself again as the launcher of a 2-rank smp job (the mode in the
//! environment, which the ranks inherit); each rank binds itself before it starts its
//! endpoint and checks what the back-off decided.

use std::process::{Command, Stdio};
use std::time::Duration;

use amnet_launch::LaunchOptions;

/// How the ranks bind themselves: `own` (rank r to the r-th allowed CPU) or `one` (both to the
/// first).
const MODE: &str = "AFFINITY_TEST_MODE";
const NAME: &str = "bound_ranks_count_the_cpus_of_all_of_them";

/// The CPUs this process may run on.
fn allowed() -> Vec<usize> {
    // SAFETY: cpu_set_t is plain bits, valid zeroed; the call writes at most its size.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        assert_eq!(
            libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set),
            0,
            "sched_getaffinity"
        );
        (0..libc::CPU_SETSIZE as usize)
            .filter(|&c| libc::CPU_ISSET(c, &set))
            .collect()
    }
}

/// Bind this process to `cpu`.
fn bind(cpu: usize) {
    // SAFETY: as above; the set names one CPU this process may run on.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        assert_eq!(
            libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set),
            0,
            "sched_setaffinity({cpu})"
        );
    }
}

/// One rank: bind, start the endpoint, check the back-off's verdict.
fn rank(mode: &str) {
    let me: usize = std::env::var("AMNET_RANK")
        .expect("AMNET_RANK")
        .parse()
        .expect("a rank number");
    let cpus = allowed();
    let cpu = if mode == "own" {
        cpus[me % cpus.len()]
    } else {
        cpus[0]
    };
    bind(cpu);
    let ep = amnet::init().expect("init");
    let yields = ep.backoff().yields();
    assert_eq!(
        yields,
        mode == "one",
        "rank {me} bound to CPU {cpu} ({mode}): the back-off yields: {yields}"
    );
}

fn job(mode: &str, conduit: &str) {
    let out = Command::new(std::env::current_exe().expect("current_exe"))
        .args([NAME, "--exact", "--nocapture"])
        .env(MODE, mode)
        .env("AMNET_CONDUIT", conduit)
        .env("AMNET_HOST_BYPASS", "1")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .expect("run the launcher");
    assert!(
        out.status.success(),
        "the {mode} job on {conduit} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn bound_ranks_count_the_cpus_of_all_of_them() {
    if let Ok(mode) = std::env::var(MODE) {
        if std::env::var_os("AMNET_RANK").is_some() {
            rank(&mode);
            return;
        }
        let mut opts = LaunchOptions::new(
            2,
            std::env::current_exe()
                .expect("current_exe")
                .to_string_lossy(),
        );
        opts.args = vec![NAME.into(), "--exact".into()];
        opts.conduit = amnet::selected_conduit().expect("AMNET_CONDUIT");
        opts.timeout = Some(Duration::from_secs(60));
        let code = amnet_launch::launch_job(&opts).expect("launch");
        std::process::exit(code);
    }
    // udp with the host-local bypass (on by default): its smp group answers for the host.
    for conduit in ["smp", "udp"] {
        job("one", conduit);
        if allowed().len() < 2 {
            eprintln!("one CPU: the ranks cannot be bound to a core each; `own` not run");
            continue;
        }
        job("own", conduit);
    }
}
