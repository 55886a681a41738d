//! The mpi spawner: runs a job through `mpirun` (or `$AMNET_MPIRUN`), which starts the ranks;
//! the conduit takes the rank and size from MPI.
//!
//! The launcher is Open MPI's `mpirun` unless `AMNET_MPIRUN` names another command (with
//! arguments, split at white space: `AMNET_MPIRUN="mpirun --mca btl self,tcp"`). Its flavour
//! is read from `--version`: for Open MPI the job gets `--oversubscribe`, `--allow-run-as-root`
//! when run by root, and `-x NAME` for every `AMNET_*` variable; for MPICH's Hydra `-genv NAME
//! VALUE`; any other launcher only `-n N`, with the variables in its environment.

use std::collections::BTreeMap;
use std::io::{BufRead, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use amnet_core::launch::{signal_name, LaunchOptions};
use amnet_core::{Error, Result};

/// The launcher command: `$AMNET_MPIRUN` split at white space, or `mpirun`.
fn launcher() -> Vec<String> {
    match std::env::var("AMNET_MPIRUN") {
        Ok(v) if !v.trim().is_empty() => v.split_whitespace().map(str::to_string).collect(),
        _ => vec!["mpirun".to_string()],
    }
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Where `name` runs from: itself when it names a path, else the first match on `PATH`.
fn find_program(name: &str) -> Option<PathBuf> {
    if name.contains('/') {
        let p = PathBuf::from(name);
        return is_executable(&p).then_some(p);
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| is_executable(p))
}

/// True when the MPI launcher (`$AMNET_MPIRUN` or `mpirun`) can be found.
pub fn mpirun_available() -> bool {
    launcher().first().and_then(|l| find_program(l)).is_some()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Flavour {
    OpenMpi,
    Hydra,
    Other,
}

fn flavour(launcher: &[String]) -> Result<Flavour> {
    let out = Command::new(&launcher[0])
        .args(&launcher[1..])
        .arg("--version")
        .stdin(Stdio::null())
        .output()
        .map_err(|e| {
            Error::Config(format!(
                "cannot run the MPI launcher {:?}: {e}; install MPI (ci/install-mpi.sh) or set \
                 AMNET_MPIRUN",
                launcher.join(" ")
            ))
        })?;
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(if text.contains("Open MPI") || text.contains("OpenRTE") {
        Flavour::OpenMpi
    } else if text.contains("HYDRA") || text.contains("MPICH") || text.contains("Intel(R) MPI") {
        Flavour::Hydra
    } else {
        Flavour::Other
    })
}

/// Variables the MPI runtime sets in a rank's environment. A job started from inside a rank
/// (a test that launches a nested job) must not inherit them, or the nested `mpirun` would
/// take itself for part of the outer job.
fn runtime_variable(name: &str) -> bool {
    const PREFIXES: &[&str] = &[
        "PMIX_",
        "PMI_",
        "HYDI_",
        "HYDRA_",
        "MPI_LOCALNRANKS",
        "MPI_LOCALRANKID",
        "OMPI_COMM_WORLD_",
        "OMPI_UNIVERSE_SIZE",
        "OMPI_FILE_LOCATION",
        "OMPI_NUM_APP_CTX",
        "OMPI_FIRST_RANKS",
        "OMPI_APP_CTX_NUM_PROCS",
        "OMPI_ARGV",
        "OMPI_COMMAND",
        "OMPI_MCA_orte_",
        "OMPI_MCA_ess",
        "OMPI_MCA_pmix",
        "OMPI_MCA_initial_wdir",
        "OMPI_MCA_shmem_RUNTIME_QUERY_hint",
        "OMPI_MCA_mpi_oversubscribe",
    ];
    PREFIXES.iter().any(|p| name.starts_with(p))
}

/// The `AMNET_*` variables every rank gets: the launcher's own (tuning, fault injection), the
/// conduit's, the exit grace and the report file; never the variables of other conduits' jobs.
fn amnet_env(opts: &LaunchOptions, report: &Path) -> BTreeMap<String, String> {
    let mut env: BTreeMap<String, String> = std::env::vars()
        .filter(|(k, _)| k.starts_with("AMNET_"))
        .filter(|(k, _)| !matches!(k.as_str(), "AMNET_RANK" | "AMNET_SIZE" | "AMNET_SMP_JOB"))
        .collect();
    env.insert("AMNET_CONDUIT".into(), "mpi".into());
    env.insert(
        "AMNET_MPI_EXIT_GRACE".into(),
        format!("{}", opts.grace.as_secs_f64().max(0.001)),
    );
    env.insert(
        "AMNET_MPI_REPORT".into(),
        report.to_string_lossy().into_owned(),
    );
    env
}

/// A fresh path for the job's report file.
fn report_path() -> PathBuf {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    std::env::temp_dir().join(format!("amnet-mpi-{}-{nanos:x}.exit", std::process::id()))
}

/// What the job's report file says: the rank that ended the job with a non-zero code, and the
/// code.
fn read_report(path: &Path) -> Option<(u32, i32)> {
    let text = std::fs::read_to_string(path).ok()?;
    let mut words = text.lines().next()?.split_whitespace();
    Some((words.next()?.parse().ok()?, words.next()?.parse().ok()?))
}

/// What Open MPI's `mpirun` says on stderr about ranks that died.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
struct LauncherNotes {
    /// The first rank killed by a signal, and the signal.
    signal: Option<(u32, i32)>,
    /// The first rank that exited with a non-zero code, and the code.
    exit: Option<(u32, i32)>,
    pending_rank: Option<u32>,
}

fn leading_number<T: std::str::FromStr>(s: &str) -> Option<T> {
    let end = s
        .char_indices()
        .find(|&(i, c)| !(c.is_ascii_digit() || (i == 0 && c == '-')))
        .map_or(s.len(), |(i, _)| i);
    s[..end].parse().ok()
}

impl LauncherNotes {
    fn line(&mut self, l: &str) {
        // "mpirun noticed that process rank 1 with PID 0 on node n exited on signal 9 (Killed)."
        if let (Some(a), Some(b)) = (l.find("process rank "), l.find("exited on signal ")) {
            let rank = leading_number(&l[a + "process rank ".len()..]);
            let sig = leading_number(&l[b + "exited on signal ".len()..]);
            if let (Some(r), Some(s), None) = (rank, sig, self.signal) {
                self.signal = Some((r, s));
            }
        }
        // "  Process name: [[24443,1],0]" followed by "  Exit code:    17"
        if let Some(a) = l.find("Process name: [[") {
            let rest = &l[a..];
            self.pending_rank = rest.find("],").and_then(|b| leading_number(&rest[b + 2..]));
        }
        if let Some(rest) = l.trim_start().strip_prefix("Exit code:") {
            if let (Some(r), Some(c)) = (self.pending_rank.take(), leading_number(rest.trim())) {
                self.exit.get_or_insert((r, c));
            }
        }
    }
}

/// The launcher's one-line account of a job that ended with `code`, in the words of `amrun`.
fn account(code: i32, origin: Option<(u32, i32)>, notes: &LauncherNotes) -> Option<String> {
    if code == 0 {
        return None;
    }
    if let Some((r, c)) = origin {
        return Some(format!("rank {r} ended the job with code {c}"));
    }
    if let Some((r, s)) = notes.signal {
        return Some(format!(
            "rank {r} was killed by signal {s} ({}); ending the job",
            signal_name(s)
        ));
    }
    notes
        .exit
        .map(|(r, c)| format!("rank {r} exited with code {c} without ending the job; ending it"))
}

/// The command that starts the job.
fn command(launcher: &[String], flavour: Flavour, opts: &LaunchOptions, report: &Path) -> Command {
    let mut cmd = Command::new(&launcher[0]);
    cmd.args(&launcher[1..]);
    let inside_a_rank = ["OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK"]
        .iter()
        .any(|v| std::env::var_os(v).is_some());
    if inside_a_rank {
        for (k, _) in std::env::vars_os() {
            if runtime_variable(&k.to_string_lossy()) {
                cmd.env_remove(&k);
            }
        }
    }
    for k in ["AMNET_RANK", "AMNET_SIZE", "AMNET_SMP_JOB"] {
        cmd.env_remove(k);
    }
    let env = amnet_env(opts, report);
    for (k, v) in &env {
        cmd.env(k, v);
    }
    cmd.arg("-n").arg(opts.ranks.to_string());
    match flavour {
        Flavour::OpenMpi => {
            cmd.arg("--oversubscribe");
            // SAFETY: geteuid has no preconditions.
            if unsafe { libc::geteuid() } == 0 {
                cmd.arg("--allow-run-as-root");
                cmd.env("OMPI_ALLOW_RUN_AS_ROOT", "1");
                cmd.env("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1");
            }
            for k in env.keys() {
                cmd.arg("-x").arg(k);
            }
        }
        Flavour::Hydra => {
            for (k, v) in &env {
                cmd.arg("-genv").arg(k).arg(v);
            }
        }
        Flavour::Other => {}
    }
    cmd.arg(&opts.program).args(&opts.args);
    cmd
}

static SIGNALLED: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_signal(sig: libc::c_int) {
    SIGNALLED.store(sig, Ordering::Relaxed);
}

const SIGS: [libc::c_int; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

/// Parent pid of `pid`, from `/proc`.
fn parent_of(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces and parentheses: the fields follow the last ')'.
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(1)?.parse().ok()
}

/// Every process descended from `root` (its ranks, and their children).
fn descendants(root: i32) -> Vec<i32> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    let procs: Vec<(i32, i32)> = dir
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(|p| Some((p, parent_of(p)?)))
        .collect();
    let mut out = Vec::new();
    let mut frontier = vec![root];
    while let Some(p) = frontier.pop() {
        for &(c, _) in procs.iter().filter(|(_, pp)| *pp == p) {
            out.push(c);
            frontier.push(c);
        }
    }
    out
}

/// The MPI ranks among the launcher's descendants, from the rank variable in their environment.
fn running_ranks(root: i32) -> Vec<u32> {
    let mut ranks: Vec<u32> = descendants(root)
        .into_iter()
        .filter_map(|p| {
            let env = std::fs::read(format!("/proc/{p}/environ")).ok()?;
            env.split(|&b| b == 0).find_map(|kv| {
                let kv = std::str::from_utf8(kv).ok()?;
                let (k, v) = kv.split_once('=')?;
                matches!(k, "OMPI_COMM_WORLD_RANK" | "PMIX_RANK" | "PMI_RANK")
                    .then(|| v.parse().ok())
                    .flatten()
            })
        })
        .collect();
    ranks.sort_unstable();
    ranks.dedup();
    ranks
}

/// End the launcher: SIGTERM (it then ends its ranks), and after `patience` SIGKILL for it and
/// everything it started.
fn stop(child: &mut Child, patience: Duration) {
    let Ok(pid) = i32::try_from(child.id()) else {
        let _ = child.kill();
        let _ = child.wait();
        return;
    };
    // SAFETY: signalling our own child, not yet reaped (so its pid is not reused).
    unsafe { libc::kill(pid, libc::SIGTERM) };
    let until = Instant::now() + patience;
    while Instant::now() < until {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    for p in descendants(pid) {
        // SAFETY: sending SIGKILL to a process this launcher's job started.
        unsafe { libc::kill(p, libc::SIGKILL) };
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// Run `opts` as an MPI job: start `mpirun` (or `$AMNET_MPIRUN`) with `opts.ranks` ranks of
/// `opts.program`, wait for it and return the job's exit code.
///
/// The code is the launcher's: for Open MPI the code a rank passed to `exit` (or returned from
/// `main` with), 128 + S for a rank killed by signal S. Other outcomes: 124 when
/// `opts.timeout` expires (the job is ended, the ranks still running are named in `log`), 127
/// when the program cannot be started, 128 + S when this process receives SIGINT, SIGTERM or
/// SIGHUP (the job is ended). An `Err` when the launcher cannot be run at all.
pub fn run(opts: &LaunchOptions, log: &mut dyn FnMut(&str)) -> Result<i32> {
    let launcher = launcher();
    if find_program(&launcher[0]).is_none() {
        return Err(Error::Config(format!(
            "the MPI launcher {:?} was not found; install MPI (ci/install-mpi.sh) or set \
             AMNET_MPIRUN",
            launcher[0]
        )));
    }
    if opts.ranks == 0 {
        return Err(Error::Config("an MPI job needs at least one rank".into()));
    }
    if find_program(&opts.program).is_none() {
        log(&format!(
            "cannot start {} for rank 0: no executable file of that name",
            opts.program
        ));
        return Ok(127);
    }
    let flavour = flavour(&launcher)?;
    let report = report_path();
    let mut cmd = command(&launcher, flavour, opts, &report);
    cmd.stderr(Stdio::piped());
    if std::env::var("AMNET_VERBOSE").is_ok_and(|v| v == "1" || v == "yes" || v == "true") {
        log(&format!("running {cmd:?}"));
    }
    // SAFETY: prctl is async-signal-safe and the closure allocates nothing: the launcher gets
    // SIGTERM (and so ends the job) if this process dies.
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM, 0, 0, 0);
            Ok(())
        });
    }
    SIGNALLED.store(0, Ordering::Relaxed);
    let previous: Vec<libc::sighandler_t> = SIGS
        .iter()
        .map(|&s| {
            // SAFETY: installing an async-signal-safe handler that only stores an atomic; the
            // previous handler is restored before returning.
            unsafe { libc::signal(s, on_signal as *const () as libc::sighandler_t) }
        })
        .collect();
    let r = watch(cmd, opts, log, &report);
    for (&s, &h) in SIGS.iter().zip(&previous) {
        // SAFETY: restoring the handler that was installed before.
        unsafe { libc::signal(s, h) };
    }
    let _ = std::fs::remove_file(&report);
    r
}

/// Copy the launcher's stderr to ours, line by line, noting what it says about dead ranks.
/// The receiver gets the notes once the launcher's stderr closes.
fn relay_stderr(child: &mut Child) -> std::sync::mpsc::Receiver<LauncherNotes> {
    let (tx, rx) = std::sync::mpsc::channel();
    let Some(err) = child.stderr.take() else {
        let _ = tx.send(LauncherNotes::default());
        return rx;
    };
    let notes = Arc::new(Mutex::new(LauncherNotes::default()));
    let _ = std::thread::Builder::new()
        .name("amnet-mpirun-stderr".into())
        .spawn(move || {
            let mut r = std::io::BufReader::new(err);
            let mut line = Vec::new();
            loop {
                line.clear();
                match r.read_until(b'\n', &mut line) {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {
                        let _ = std::io::stderr().write_all(&line);
                        notes
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .line(&String::from_utf8_lossy(&line));
                    }
                }
            }
            let n = notes.lock().unwrap_or_else(|e| e.into_inner()).clone();
            let _ = tx.send(n);
        });
    rx
}

fn watch(
    mut cmd: Command,
    opts: &LaunchOptions,
    log: &mut dyn FnMut(&str),
    report: &Path,
) -> Result<i32> {
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            log(&format!("cannot start the MPI launcher: {e}"));
            return Ok(127);
        }
    };
    let notes = relay_stderr(&mut child);
    let pid = i32::try_from(child.id()).unwrap_or(-1);
    let start = Instant::now();
    let patience = opts.grace.max(Duration::from_secs(2));
    loop {
        match child.try_wait() {
            Ok(Some(st)) => {
                let code = st.code().unwrap_or_else(|| 128 + st.signal().unwrap_or(0));
                // A rank that outlived the launcher could hold its stderr open: wait a little.
                let notes = notes
                    .recv_timeout(Duration::from_secs(2))
                    .unwrap_or_default();
                if let Some(m) = account(code, read_report(report), &notes) {
                    log(&m);
                }
                return Ok(code);
            }
            Ok(None) => {}
            Err(e) => {
                return Err(Error::conduit("mpi", format!("waiting for mpirun: {e}")));
            }
        }
        if let Some(limit) = opts.timeout {
            if start.elapsed() > limit {
                let ranks = running_ranks(pid);
                let running = if ranks.is_empty() {
                    "unknown".to_string()
                } else {
                    format!("{ranks:?}")
                };
                log(&format!(
                    "timeout after {} s; ranks still running: {running}; ending the job",
                    limit.as_secs_f64()
                ));
                stop(&mut child, patience);
                return Ok(124);
            }
        }
        let sig = SIGNALLED.load(Ordering::Relaxed);
        if sig != 0 {
            log(&format!("received {}; ending the job", signal_name(sig)));
            stop(&mut child, patience);
            return Ok(128 + sig);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(ranks: u32) -> LaunchOptions {
        LaunchOptions {
            ranks,
            program: "/bin/true".into(),
            args: vec!["a b".into()],
            timeout: None,
            conduit: "mpi".into(),
            grace: Duration::from_millis(1500),
        }
    }

    fn argv(cmd: &Command) -> Vec<String> {
        std::iter::once(cmd.get_program())
            .chain(cmd.get_args())
            .map(|a| a.to_string_lossy().into_owned())
            .collect()
    }

    #[test]
    fn open_mpi_command_line() {
        let cmd = command(
            &["mpirun".into()],
            Flavour::OpenMpi,
            &opts(3),
            Path::new("/tmp/r"),
        );
        let a = argv(&cmd);
        assert_eq!(&a[..4], ["mpirun", "-n", "3", "--oversubscribe"]);
        let x: Vec<&str> = a
            .windows(2)
            .filter(|w| w[0] == "-x")
            .map(|w| w[1].as_str())
            .collect();
        for v in ["AMNET_CONDUIT", "AMNET_MPI_EXIT_GRACE", "AMNET_MPI_REPORT"] {
            assert!(x.contains(&v), "{v} not passed: {a:?}");
        }
        assert_eq!(&a[a.len() - 2..], ["/bin/true", "a b"]);
        let env: Vec<(String, Option<String>)> = cmd
            .get_envs()
            .map(|(k, v)| {
                (
                    k.to_string_lossy().into_owned(),
                    v.map(|v| v.to_string_lossy().into_owned()),
                )
            })
            .collect();
        assert!(env.contains(&("AMNET_CONDUIT".into(), Some("mpi".into()))));
        assert!(env.contains(&("AMNET_MPI_EXIT_GRACE".into(), Some("1.5".into()))));
        assert!(env.contains(&("AMNET_RANK".into(), None)));
    }

    #[test]
    fn hydra_command_line() {
        let a = argv(&command(
            &["mpiexec".into(), "-v".into()],
            Flavour::Hydra,
            &opts(2),
            Path::new("/tmp/r"),
        ));
        assert_eq!(&a[..4], ["mpiexec", "-v", "-n", "2"]);
        let i = a.iter().position(|w| w == "AMNET_CONDUIT").unwrap();
        assert_eq!((a[i - 1].as_str(), a[i + 1].as_str()), ("-genv", "mpi"));
    }

    #[test]
    fn runtime_variables_are_recognized() {
        assert!(runtime_variable("PMIX_RANK"));
        assert!(runtime_variable("OMPI_COMM_WORLD_SIZE"));
        assert!(runtime_variable("OMPI_MCA_orte_hnp_uri"));
        assert!(!runtime_variable("OMPI_MCA_btl"));
        assert!(!runtime_variable("OMPI_ALLOW_RUN_AS_ROOT"));
        assert!(!runtime_variable("AMNET_CONDUIT"));
    }

    #[test]
    fn finds_programs() {
        assert!(find_program("sh").is_some());
        assert!(find_program("/bin/sh").is_some());
        assert!(find_program("/nonexistent/amnet-program").is_none());
        assert!(
            find_program("/etc/hostname").is_none() || is_executable(Path::new("/etc/hostname"))
        );
    }

    #[test]
    fn missing_program_is_127() {
        if !mpirun_available() {
            eprintln!("skipped: mpirun is not installed");
            return;
        }
        let mut o = opts(1);
        o.program = "/nonexistent/amnet-program".into();
        let mut lines = Vec::new();
        let code = run(&o, &mut |m: &str| lines.push(m.to_string())).unwrap();
        assert_eq!(code, 127);
        assert!(
            lines[0].contains("cannot start /nonexistent/amnet-program"),
            "{lines:?}"
        );
    }

    #[test]
    fn reads_what_mpirun_says() {
        let mut n = LauncherNotes::default();
        for l in [
            "Primary job  terminated normally, but 1 process returned",
            "  Process name: [[24443,1],2]",
            "  Exit code:    17",
            "mpirun noticed that process rank 1 with PID 0 on node vm exited on signal 9 (Killed).",
            "  Process name: [[24443,1],0]",
            "  Exit code:    3",
        ] {
            n.line(l);
        }
        assert_eq!(n.exit, Some((2, 17)));
        assert_eq!(n.signal, Some((1, 9)));
        assert_eq!(
            account(137, None, &n).unwrap(),
            "rank 1 was killed by signal 9 (SIGKILL); ending the job"
        );
        assert_eq!(
            account(7, Some((1, 7)), &n).unwrap(),
            "rank 1 ended the job with code 7"
        );
        let only_exit = LauncherNotes {
            signal: None,
            ..n.clone()
        };
        assert_eq!(
            account(17, None, &only_exit).unwrap(),
            "rank 2 exited with code 17 without ending the job; ending it"
        );
        assert_eq!(account(0, Some((1, 7)), &n), None);
    }

    #[test]
    fn report_file() {
        let p = report_path();
        assert_eq!(read_report(&p), None);
        std::fs::write(&p, "2 101\n0 101\n").unwrap();
        assert_eq!(read_report(&p), Some((2, 101)));
        std::fs::remove_file(&p).unwrap();
    }

    #[test]
    fn parent_of_self() {
        let me = i32::try_from(std::process::id()).unwrap();
        // SAFETY: getppid has no preconditions.
        let pp = unsafe { libc::getppid() };
        assert_eq!(parent_of(me), Some(pp));
    }
}
