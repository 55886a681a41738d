//! The mpi spawner: runs a job through `mpirun` (or `$AMNET_MPIRUN`), which starts the ranks;
//! the conduit takes the rank and size from MPI. It makes no MPI call itself, so `amrun` starts
//! mpi jobs whether or not it was built with the mpi conduit (the ranks must be).
//!
//! The launcher is Open MPI's `mpirun` unless `AMNET_MPIRUN` names another command (with
//! arguments, split at white space: `AMNET_MPIRUN="mpirun --mca btl self,tcp"`). Its flavour
//! is read from `--version`: for Open MPI the job gets `--oversubscribe`, `--allow-run-as-root`
//! when run by root, and `-x NAME` for every `AMNET_*` variable; for MPICH's Hydra `-genv NAME
//! VALUE`; any other launcher only `-n N`, with the variables in its environment.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use amnet_core::config::{vars, Source};
use amnet_core::{Error, Result};

use crate::{signal_name, LaunchOptions};

/// The launcher command: `$AMNET_MPIRUN` split at white space, or `mpirun`.
fn launcher() -> Vec<String> {
    match Source::env().text(&vars::MPIRUN) {
        Some(v) if !v.trim().is_empty() => v.split_whitespace().map(str::to_string).collect(),
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

/// Variables that belong to the job a process runs in, never to a job it starts: they are
/// removed from the launcher's environment and never passed to the ranks.
const OWN_JOB_VARIABLES: [&str; 4] = [
    "AMNET_RANK",
    "AMNET_SIZE",
    "AMNET_SMP_JOB",
    "AMNET_MPI_LIFELINE",
];

/// The `AMNET_*` variables every rank gets: the launcher's own (tuning, fault injection), the
/// conduit's, the exit grace, the report file and (under Hydra) the lifeline socket; never the
/// variables of other conduits' jobs.
fn amnet_env(opts: &LaunchOptions, flavour: Flavour, report: &Path) -> BTreeMap<String, String> {
    let mut env: BTreeMap<String, String> = std::env::vars()
        .filter(|(k, _)| k.starts_with("AMNET_"))
        .filter(|(k, _)| !OWN_JOB_VARIABLES.contains(&k.as_str()))
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
    if flavour == Flavour::Hydra {
        env.insert(
            "AMNET_MPI_LIFELINE".into(),
            lifeline_path(report).to_string_lossy().into_owned(),
        );
    }
    env
}

/// The path of the job's lifeline socket (Hydra jobs): next to the report file.
fn lifeline_path(report: &Path) -> PathBuf {
    report.with_extension("life")
}

/// The spawner's end of the lifelines: every rank connects at start-up, says `rank R`, says
/// `leaving` when it starts to leave the job, and its connection closes when its process ends.
/// Hydra reports a rank killed by a signal with no rank (and the PID of another process), so
/// the first rank whose connection closed before it said `leaving` is the one that died.
struct Lifelines {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<Option<u32>>>,
}

impl Lifelines {
    /// Listen at `path`; `None` when the socket cannot be made (the report then names no rank).
    fn listen(path: &Path) -> Option<Lifelines> {
        let listener = std::os::unix::net::UnixListener::bind(path).ok()?;
        listener.set_nonblocking(true).ok()?;
        let stop = Arc::new(AtomicBool::new(false));
        let flag = Arc::clone(&stop);
        let thread = std::thread::Builder::new()
            .name("amnet-mpirun-lifelines".into())
            .spawn(move || watch_lifelines(&listener, &flag))
            .ok()?;
        Some(Lifelines {
            stop,
            thread: Some(thread),
        })
    }

    /// Stop listening; the rank that died first without leaving, if any did.
    fn first_death(mut self) -> Option<u32> {
        self.stop.store(true, Ordering::Release);
        self.thread.take()?.join().ok().flatten()
    }
}

impl Drop for Lifelines {
    fn drop(&mut self) {
        // A job ended by a timeout or a signal: the thread ends within one wait.
        self.stop.store(true, Ordering::Release);
    }
}

/// One rank's lifeline, as the spawner sees it.
struct Lifeline {
    stream: std::os::unix::net::UnixStream,
    rank: Option<u32>,
    leaving: bool,
    said: Vec<u8>,
}

impl Lifeline {
    /// Read what the rank said; false once its end closed.
    fn read(&mut self) -> bool {
        let mut buf = [0u8; 256];
        let open = loop {
            match self.stream.read(&mut buf) {
                Ok(0) => break false,
                Ok(n) => self.said.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break true,
                Err(_) => break false,
            }
        };
        while let Some(i) = self.said.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = self.said.drain(..=i).collect();
            let line = String::from_utf8_lossy(&line);
            if let Some(r) = line.trim().strip_prefix("rank ") {
                self.rank = r.parse().ok();
            } else if line.trim() == "leaving" {
                self.leaving = true;
            }
        }
        // A line longer than any the conduit sends is not one of its own: drop it.
        if self.said.len() > 256 {
            self.said.clear();
        }
        open
    }
}

/// The lifelines' thread: accept ranks and wait for their connections to close, until `stop`.
fn watch_lifelines(listener: &std::os::unix::net::UnixListener, stop: &AtomicBool) -> Option<u32> {
    use std::os::fd::AsRawFd;
    let mut lines: Vec<Lifeline> = Vec::new();
    let mut first = None;
    loop {
        // After `stop`, one more pass without waiting: the launcher has ended, every rank with
        // it, and their closed connections are all there to be read.
        let last = stop.load(Ordering::Acquire);
        let mut fds: Vec<libc::pollfd> = std::iter::once(listener.as_raw_fd())
            .chain(lines.iter().map(|l| l.stream.as_raw_fd()))
            .map(|fd| libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            })
            .collect();
        let nfds = libc::nfds_t::try_from(fds.len()).unwrap_or(libc::nfds_t::MAX);
        // SAFETY: `fds` is a valid array of `nfds` pollfd entries for the duration of the call.
        let ready = unsafe { libc::poll(fds.as_mut_ptr(), nfds, if last { 0 } else { 50 }) };
        if ready > 0 {
            // Closed connections first, in the order of the list (ranks that died in the same
            // wake-up cannot be told apart; the lowest-listed one is named).
            let mut closed = Vec::new();
            for (i, l) in lines.iter_mut().enumerate() {
                if fds[i + 1].revents != 0 && !l.read() {
                    closed.push(i);
                }
            }
            for &i in closed.iter().rev() {
                let l = lines.remove(i);
                if first.is_none() && !l.leaving {
                    first = l.rank;
                }
            }
            if fds[0].revents != 0 {
                while let Ok((stream, _)) = listener.accept() {
                    if stream.set_nonblocking(true).is_ok() {
                        lines.push(Lifeline {
                            stream,
                            rank: None,
                            leaving: false,
                            said: Vec::new(),
                        });
                    }
                }
            }
        }
        if last {
            return first;
        }
    }
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

/// What the launcher says about ranks that died: Open MPI's `mpirun` on stderr, MPICH's Hydra
/// on stdout.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
struct LauncherNotes {
    /// The first rank killed by a signal, and the signal.
    signal: Option<(u32, i32)>,
    /// The first rank that exited with a non-zero code, and the code.
    exit: Option<(u32, i32)>,
    pending_rank: Option<u32>,
    /// Hydra: the signal that killed the first process reported dead (Hydra names the PID of
    /// another process of the job, not the rank).
    killed: Option<i32>,
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
        // Hydra: "YOUR APPLICATION TERMINATED WITH THE EXIT STRING: Killed (signal 9)".
        if let (Some(a), Some(b)) = (l.find("EXIT STRING:"), l.rfind("(signal ")) {
            if a < b && self.killed.is_none() {
                self.killed = leading_number(&l[b + "(signal ".len()..]);
            }
        }
    }

    /// These notes with what `other` says where these say nothing.
    fn merge(mut self, other: LauncherNotes) -> LauncherNotes {
        self.signal = self.signal.or(other.signal);
        self.exit = self.exit.or(other.exit);
        self.killed = self.killed.or(other.killed);
        self
    }

    /// Name the rank Hydra reported killed: `first_death`, the first rank whose lifeline
    /// closed before it started leaving.
    fn name_killed(&mut self, first_death: Option<u32>) {
        if let (None, Some(s), Some(r)) = (self.signal, self.killed, first_death) {
            self.signal = Some((r, s));
        }
    }
}

/// The job's exit code from the launcher's: Hydra ends a job whose rank was killed by signal S
/// with code S, `amrun` with 128 + S as for every conduit.
fn job_code(code: i32, notes: &LauncherNotes) -> i32 {
    match notes.killed {
        Some(s) if code == s && (1..128).contains(&s) => 128 + s,
        _ => code,
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
    if let Some(s) = notes.killed {
        return Some(format!(
            "a rank was killed by signal {s} ({}); ending the job",
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
    for k in OWN_JOB_VARIABLES {
        cmd.env_remove(k);
    }
    let env = amnet_env(opts, flavour, report);
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
    if flavour == Flavour::Hydra {
        cmd.stdout(Stdio::piped());
    }
    if Source::env().flag(&vars::VERBOSE)?.unwrap_or(false) {
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
    let r = watch(cmd, flavour, opts, log, &report);
    for (&s, &h) in SIGS.iter().zip(&previous) {
        // SAFETY: restoring the handler that was installed before.
        unsafe { libc::signal(s, h) };
    }
    let _ = std::fs::remove_file(&report);
    let _ = std::fs::remove_file(lifeline_path(&report));
    r
}

/// Copy one of the launcher's output streams to ours as it comes, noting what its lines say
/// about dead ranks. The receiver gets the notes once the stream closes.
fn relay<R, W>(from: Option<R>, to: fn() -> W) -> std::sync::mpsc::Receiver<LauncherNotes>
where
    R: Read + Send + 'static,
    W: Write + 'static,
{
    let (tx, rx) = std::sync::mpsc::channel();
    let Some(mut from) = from else {
        let _ = tx.send(LauncherNotes::default());
        return rx;
    };
    // A relay that cannot start drops its sender: the receiver then reports no notes.
    let _ = std::thread::Builder::new()
        .name("amnet-mpirun-relay".into())
        .spawn(move || {
            let mut notes = LauncherNotes::default();
            let mut buf = vec![0u8; 64 << 10];
            let mut line = Vec::new();
            loop {
                let n = match from.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => n,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(_) => break,
                };
                let mut out = to();
                let _ = out.write_all(&buf[..n]).and_then(|()| out.flush());
                for &b in &buf[..n] {
                    if b == b'\n' {
                        notes.line(&String::from_utf8_lossy(&line));
                        line.clear();
                    } else if line.len() < 4096 {
                        line.push(b);
                    }
                }
            }
            if !line.is_empty() {
                notes.line(&String::from_utf8_lossy(&line));
            }
            let _ = tx.send(notes);
        });
    rx
}

fn watch(
    mut cmd: Command,
    flavour: Flavour,
    opts: &LaunchOptions,
    log: &mut dyn FnMut(&str),
    report: &Path,
) -> Result<i32> {
    let mut lifelines = if flavour == Flavour::Hydra {
        Lifelines::listen(&lifeline_path(report))
    } else {
        None
    };
    let mut child = match cmd.spawn() {
        Ok(c) => c,
        Err(e) => {
            log(&format!("cannot start the MPI launcher: {e}"));
            return Ok(127);
        }
    };
    let err_notes = relay(child.stderr.take(), std::io::stderr);
    let out_notes = relay(child.stdout.take(), std::io::stdout);
    let pid = i32::try_from(child.id()).unwrap_or(-1);
    let start = Instant::now();
    let patience = opts.grace.max(Duration::from_secs(2));
    loop {
        match child.try_wait() {
            Ok(Some(st)) => {
                let code = st.code().unwrap_or_else(|| 128 + st.signal().unwrap_or(0));
                // A rank that outlived the launcher could hold a stream open: wait a little.
                let until = Instant::now() + Duration::from_secs(2);
                let mut notes = LauncherNotes::default();
                for rx in [&err_notes, &out_notes] {
                    let left = until.saturating_duration_since(Instant::now());
                    notes = notes.merge(rx.recv_timeout(left).unwrap_or_default());
                }
                notes.name_killed(lifelines.take().and_then(Lifelines::first_death));
                let code = job_code(code, &notes);
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
            conduit: amnet_core::ConduitKind::Mpi,
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
        assert!(
            !a.iter().any(|w| w == "AMNET_MPI_LIFELINE"),
            "only Hydra jobs have lifelines"
        );
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
        let i = a.iter().position(|w| w == "AMNET_MPI_LIFELINE").unwrap();
        assert_eq!(a[i + 1], "/tmp/r.life");
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

    /// The notes a launcher's `lines` make.
    fn notes_of(lines: &[&str]) -> LauncherNotes {
        let mut n = LauncherNotes::default();
        for l in lines {
            n.line(l);
        }
        n
    }

    #[test]
    fn reads_what_mpirun_says() {
        let n = notes_of(&[
            "Primary job  terminated normally, but 1 process returned",
            "  Process name: [[24443,1],2]",
            "  Exit code:    17",
            "mpirun noticed that process rank 1 with PID 0 on node vm exited on signal 9 (Killed).",
            "  Process name: [[24443,1],0]",
            "  Exit code:    3",
        ]);
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
    fn reads_what_hydra_says() {
        let n = notes_of(&[
            "",
            "===================================================================================",
            "=   BAD TERMINATION OF ONE OF YOUR APPLICATION PROCESSES",
            "=   PID 12977 RUNNING AT vm",
            "=   EXIT CODE: 9",
            "=   CLEANING UP REMAINING PROCESSES",
            "=   YOU CAN IGNORE THE BELOW CLEANUP MESSAGES",
            "===================================================================================",
            "YOUR APPLICATION TERMINATED WITH THE EXIT STRING: Killed (signal 9)",
        ]);
        assert_eq!(n.killed, Some(9));
        assert_eq!(n.signal, None);
        assert_eq!(job_code(9, &n), 137);
        assert_eq!(job_code(3, &n), 3);
        assert_eq!(job_code(9, &LauncherNotes::default()), 9);
        assert_eq!(
            account(137, None, &n).unwrap(),
            "a rank was killed by signal 9 (SIGKILL); ending the job"
        );
        let mut named = n.clone();
        named.name_killed(Some(1));
        assert_eq!(named.signal, Some((1, 9)));
        assert_eq!(
            account(137, None, &named).unwrap(),
            "rank 1 was killed by signal 9 (SIGKILL); ending the job"
        );
        // Stderr's notes come first; stdout's fill the gaps.
        let merged = LauncherNotes::default().merge(n.clone());
        assert_eq!(merged.killed, Some(9));
    }

    #[test]
    fn lifelines_name_the_rank_that_died_first() {
        use std::io::Write;
        use std::os::unix::net::UnixStream;
        let path = lifeline_path(&report_path());
        let lines = Lifelines::listen(&path).unwrap();
        let mut socks: Vec<UnixStream> = (0..4)
            .map(|r| {
                let mut s = UnixStream::connect(&path).unwrap();
                s.write_all(format!("rank {r}\n").as_bytes()).unwrap();
                s
            })
            .collect();
        std::thread::sleep(Duration::from_millis(100));
        // Rank 3 leaves cleanly and closes first; then rank 2 dies; then the rest are ended.
        socks[3].write_all(b"leaving\n").unwrap();
        drop(socks.pop());
        std::thread::sleep(Duration::from_millis(100));
        drop(socks.pop());
        std::thread::sleep(Duration::from_millis(100));
        socks.clear();
        assert_eq!(lines.first_death(), Some(2));
        // Nobody died without leaving.
        let lines = {
            std::fs::remove_file(&path).unwrap();
            Lifelines::listen(&path).unwrap()
        };
        let mut s = UnixStream::connect(&path).unwrap();
        s.write_all(b"rank 0\nleaving\n").unwrap();
        drop(s);
        std::thread::sleep(Duration::from_millis(100));
        assert_eq!(lines.first_death(), None);
        std::fs::remove_file(&path).unwrap();
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
