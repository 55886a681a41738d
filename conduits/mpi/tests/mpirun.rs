//! The mpi conduit as real MPI jobs: the `mpi_check` example run through the spawner
//! (`amnet_launch::mpi::run`) at 2 and 3 ranks, the exit scenarios and their codes, the launcher
//! timeout, a plain `mpirun` without the spawner, and the `rma_check` example (put/get of
//! 1 B to 4 MiB on the native path, which `AMNET_VERBOSE=1` must report, and on the AM path
//! with `AMNET_RMA=am`).
//!
//! Every job runs under a watchdog (the spawner's timeout, or a kill after a deadline for the
//! plain `mpirun`). Without an MPI launcher each test prints why it is skipped and passes.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use amnet_launch::LaunchOptions;

/// Jobs run one at a time: the machine may be small, and the spawner installs process-wide
/// signal handlers while a job runs.
static ONE_JOB: Mutex<()> = Mutex::new(());

/// Watchdog of every job.
const LIMIT: Duration = Duration::from_secs(180);

fn skip_without_mpirun(test: &str) -> bool {
    if amnet_launch::mpi::mpirun_available() {
        return false;
    }
    eprintln!(
        "skipped {test}: no MPI launcher (mpirun, or $AMNET_MPIRUN) is installed; \
         ci/install-mpi.sh installs Open MPI"
    );
    true
}

/// The `mpi_check` example binary.
fn example() -> PathBuf {
    example_named("mpi_check")
}

/// An example binary, built next to this test. `cargo test` builds examples only when it
/// builds every target, so a run that selected this test alone would find a stale binary (or
/// none): the example is always (re)built here, which costs nothing when it is fresh.
fn example_named(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    let profile_dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target directory");
    let path = profile_dir.join("examples").join(name);
    static BUILT: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
    let mut built = BUILT
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if !built.iter().any(|b| b == name) {
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let mut cmd = Command::new(cargo);
        cmd.args(["build", "-p", "amnet-mpi", "--example", name]);
        if profile_dir.file_name().is_some_and(|n| n == "release") {
            cmd.arg("--release");
        }
        let status = cmd.status().expect("run cargo to build the example");
        assert!(status.success(), "building the {name} example failed");
        built.push(name.to_string());
    }
    assert!(path.is_file(), "{} is missing", path.display());
    path
}

/// Run the example as a job of `ranks` ranks; returns the code, the launcher's log and the
/// time it took.
fn job(
    ranks: u32,
    args: &[&str],
    timeout: Duration,
    grace: Duration,
) -> (i32, Vec<String>, Duration) {
    let _one = ONE_JOB.lock().unwrap_or_else(|e| e.into_inner());
    let opts = LaunchOptions {
        ranks,
        program: example().to_string_lossy().into_owned(),
        args: args.iter().map(|a| a.to_string()).collect(),
        timeout: Some(timeout),
        conduit: amnet_core::ConduitKind::Mpi,
        grace,
    };
    let mut log = Vec::new();
    let start = Instant::now();
    let code = amnet_launch::mpi::run(&opts, &mut |m: &str| {
        eprintln!("launcher: {m}");
        log.push(m.to_string());
    })
    .expect("the spawner runs");
    (code, log, start.elapsed())
}

#[test]
fn all_checks_pass_with_2_ranks() {
    if skip_without_mpirun("all_checks_pass_with_2_ranks") {
        return;
    }
    let (code, log, _) = job(2, &[], LIMIT, Duration::from_secs(2));
    assert_eq!(code, 0, "launcher said {log:?}");
}

#[test]
fn all_checks_pass_with_3_ranks() {
    if skip_without_mpirun("all_checks_pass_with_3_ranks") {
        return;
    }
    let (code, log, _) = job(3, &[], LIMIT, Duration::from_secs(2));
    assert_eq!(code, 0, "launcher said {log:?}");
}

#[test]
fn serialized_mode_when_the_client_initializes_mpi() {
    if skip_without_mpirun("serialized_mode_when_the_client_initializes_mpi") {
        return;
    }
    let (code, log, _) = job(2, &["serialized"], LIMIT, Duration::from_secs(2));
    assert_eq!(code, 0, "launcher said {log:?}");
}

#[test]
fn exit_codes_reach_the_launcher() {
    if skip_without_mpirun("exit_codes_reach_the_launcher") {
        return;
    }
    let grace = Duration::from_secs(1);
    for (scenario, want, says) in [
        ("exit", 7, Some("rank 1 ended the job with code 7")),
        (
            "exit-in-handler",
            9,
            Some("rank 1 ended the job with code 9"),
        ),
        ("error", 1, Some("rank 1 ended the job with code 1")),
        (
            "exit-before-attach",
            17,
            Some("rank 1 ended the job with code 17"),
        ),
        ("panic", 101, Some("rank 2 ended the job with code 101")),
        ("straggler", 0, None),
    ] {
        let (code, log, took) = job(3, &[scenario], Duration::from_secs(60), grace);
        assert_eq!(code, want, "scenario {scenario}: launcher said {log:?}");
        if let Some(says) = says {
            assert!(
                log.iter().any(|l| l == says),
                "scenario {scenario}: launcher said {log:?}, not {says:?}"
            );
        }
        assert!(
            took < Duration::from_secs(20),
            "scenario {scenario} took {took:?}"
        );
    }
}

#[test]
fn launcher_timeout_ends_the_job_with_124() {
    if skip_without_mpirun("launcher_timeout_ends_the_job_with_124") {
        return;
    }
    let (code, log, took) = job(2, &["hang"], Duration::from_secs(3), Duration::from_secs(1));
    assert_eq!(code, 124);
    assert!(
        log.iter()
            .any(|l| l.contains("timeout after 3 s") && l.contains("ranks still running: [0, 1]")),
        "{log:?}"
    );
    assert!(took < Duration::from_secs(15), "the job took {took:?}");
}

/// Run `program ARGS` under a plain `mpirun -n ranks` with `env` added (and forwarded with
/// `-x`); returns the exit code and everything the job wrote on stderr.
fn plain_mpirun(
    ranks: u32,
    program: &std::path::Path,
    args: &[&str],
    env: &[(&str, &str)],
) -> (Option<i32>, String) {
    let _one = ONE_JOB.lock().unwrap_or_else(|e| e.into_inner());
    let mut cmd = Command::new("mpirun");
    cmd.args(["-n", &ranks.to_string(), "--oversubscribe"]);
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        cmd.arg("--allow-run-as-root");
    }
    for (k, v) in env {
        cmd.args(["-x", k]).env(k, v);
    }
    let err_path = std::env::temp_dir().join(format!(
        "amnet-mpirun-test-{}-{}.err",
        std::process::id(),
        START.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    ));
    let err_file = std::fs::File::create(&err_path).expect("create the stderr file");
    let mut child = cmd
        .arg(program)
        .args(args)
        .env("AMNET_CONDUIT", "mpi")
        .env_remove("AMNET_RANK")
        .env_remove("AMNET_SIZE")
        .stdin(Stdio::null())
        .stderr(err_file)
        .spawn()
        .expect("start mpirun");
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait for mpirun") {
            break s;
        }
        if start.elapsed() > LIMIT {
            let _ = child.kill();
            let _ = child.wait();
            panic!("plain mpirun job still running after {LIMIT:?}; killed");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let err = std::fs::read_to_string(&err_path).unwrap_or_default();
    let _ = std::fs::remove_file(&err_path);
    eprint!("{err}");
    (status.code(), err)
}

/// Numbers the stderr files of plain jobs.
static START: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

#[test]
fn plain_mpirun_without_the_spawner() {
    if skip_without_mpirun("plain_mpirun_without_the_spawner") {
        return;
    }
    let (code, err) = plain_mpirun(2, &example(), &[], &[]);
    assert_eq!(code, Some(0), "{err}");
}

#[test]
fn long_payloads_on_every_path() {
    if skip_without_mpirun("long_payloads_on_every_path") {
        return;
    }
    // Every Long put into the target segment, none put (inline or a separate message), and
    // the AM path, where no window exists.
    for (env, path) in [
        (
            ("AMNET_MPI_LONG_PUT", "1"),
            "Long payloads of 1 B or more: MPI_Put",
        ),
        (
            ("AMNET_MPI_LONG_PUT", "65537"),
            "Long payloads of 65537 B or more: MPI_Put",
        ),
        (("AMNET_RMA", "am"), "Long payloads: inline up to 65536 B"),
    ] {
        let (code, err) = plain_mpirun(2, &example(), &[], &[env, ("AMNET_VERBOSE", "1")]);
        assert_eq!(code, Some(0), "{env:?}: {err}");
        assert!(
            err.contains(path),
            "{env:?}: AMNET_VERBOSE=1 did not say {path:?}: {err}"
        );
    }
}

#[test]
fn native_put_get_round_trip_and_are_reported() {
    if skip_without_mpirun("native_put_get_round_trip_and_are_reported") {
        return;
    }
    // The last run splits every transfer into MPI calls of 1000 bytes (4 MiB: 4,195 calls).
    for (ranks, chunk) in [(2, None), (3, None), (2, Some("1000"))] {
        let mut env = vec![("AMNET_VERBOSE", "1")];
        if let Some(c) = chunk {
            env.push(("AMNET_MPI_RMA_CHUNK", c));
        }
        let (code, err) = plain_mpirun(ranks, &example_named("rma_check"), &["native"], &env);
        assert_eq!(code, Some(0), "{ranks} ranks: {err}");
        assert!(
            err.contains("amnet mpi: put/get native: MPI one-sided")
                && err.contains("probe passed on every rank"),
            "{ranks} ranks: AMNET_VERBOSE=1 did not report the native path: {err}"
        );
        assert!(
            err.contains("rma native (MPI one-sided)"),
            "{ranks} ranks: the core's configuration line does not say native: {err}"
        );
    }
}

#[test]
fn amnet_rma_am_forces_the_am_path() {
    if skip_without_mpirun("amnet_rma_am_forces_the_am_path") {
        return;
    }
    let (code, err) = plain_mpirun(
        2,
        &example_named("rma_check"),
        &["am"],
        &[("AMNET_VERBOSE", "1"), ("AMNET_RMA", "am")],
    );
    assert_eq!(code, Some(0), "{err}");
    assert!(
        err.contains("amnet mpi: put/get on the AM path: AMNET_RMA=am") && err.contains("rma am"),
        "AMNET_VERBOSE=1 did not report the AM path: {err}"
    );
}
