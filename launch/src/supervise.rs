//! Local job supervision shared by the smp and udp spawners.
//!
//! A conduit describes its job through [`JobBackend`] (per-rank environment, where the
//! job-wide exit code is published, how to clean up); [`supervise`] starts the ranks as child
//! processes, watches them and ends the job:
//!
//! - a rank that calls `exit(code)` (or returns from `main`, which amnet turns into a job-wide
//!   exit with that status) publishes the code; the others leave at their next poll and any
//!   straggler is killed after a grace period; the job's code is the published one;
//! - a rank that dies (a signal, or a non-zero status without publishing) ends the job: the
//!   supervisor names it and how it died, publishes the code and kills the rest;
//! - on timeout every rank is killed, the ranks still running are named and the code is 124.
//!
//! Children get `PR_SET_PDEATHSIG` so that they die with the launcher.

use std::io::Write;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::{Duration, Instant};

use amnet_core::config::lookup;
use amnet_core::job::JobBackend;
use amnet_core::{ConduitKind, Result};

/// The shell script that reads the secrets `names` from standard input, one a line, into
/// its environment and then runs its arguments: what a remote rank is started through, so
/// that no secret is ever on a command line (visible in `ps` on either host).
fn secret_reader(names: &[&str]) -> String {
    let mut script = String::new();
    for n in names {
        script += &format!("read -r {n} && export {n} && ");
    }
    script + "exec \"$@\""
}

/// The command that starts `rank`: here, or through the backend's remote prefix; with the
/// bytes to write to its standard input (the secrets of a remote rank), if any.
fn rank_command(
    backend: &dyn JobBackend,
    opts: &LaunchOptions,
    r: u32,
) -> (Command, Option<Vec<u8>>) {
    let mut env: Vec<(String, String)> = vec![
        ("AMNET_RANK".into(), r.to_string()),
        ("AMNET_SIZE".into(), opts.ranks.to_string()),
        ("AMNET_CONDUIT".into(), opts.conduit.name().into()),
    ];
    env.extend(backend.rank_env(r));
    // Only names the configuration table lists as secrets, which are plain words.
    let secrets: Vec<(String, String)> = backend
        .rank_secrets(r)
        .into_iter()
        .filter(|(k, _)| lookup(k).is_some_and(|v| v.kind.is_secret()))
        .collect();
    match backend.remote_prefix(r).filter(|p| !p.is_empty()) {
        None => {
            let mut cmd = Command::new(&opts.program);
            cmd.args(&opts.args);
            for (k, v) in env.into_iter().chain(secrets) {
                cmd.env(k, v);
            }
            (cmd, None)
        }
        Some(prefix) => {
            let mut words = Vec::new();
            let mut input = None;
            if !secrets.is_empty() {
                let names: Vec<&str> = secrets.iter().map(|(k, _)| k.as_str()).collect();
                words.extend(["sh".into(), "-c".into(), secret_reader(&names)]);
                words.push("amnet-rank".into());
                input = Some(
                    secrets
                        .iter()
                        .flat_map(|(_, v)| format!("{v}\n").into_bytes())
                        .collect(),
                );
            }
            words.push("env".to_string());
            // The launcher's own AMNET_* settings (fault injection, tuning) travel along, but
            // no secret; the rank's variables come last and win.
            for (k, v) in std::env::vars() {
                let secret = lookup(&k).is_some_and(|var| var.kind.is_secret());
                if k.starts_with("AMNET_") && !secret && !env.iter().any(|(e, _)| *e == k) {
                    words.push(format!("{k}={v}"));
                }
            }
            for (k, v) in env {
                words.push(format!("{k}={v}"));
            }
            words.push(opts.program.clone());
            words.extend(opts.args.iter().cloned());
            // ssh hands its arguments to a remote shell: quote them.
            let shell = std::path::Path::new(&prefix[0])
                .file_name()
                .is_some_and(|n| n.to_string_lossy().contains("ssh"));
            let mut cmd = Command::new(&prefix[0]);
            cmd.args(&prefix[1..]);
            for w in words {
                if shell {
                    cmd.arg(format!("'{}'", w.replace('\'', "'\\''")));
                } else {
                    cmd.arg(w);
                }
            }
            if input.is_some() {
                cmd.stdin(Stdio::piped());
            }
            (cmd, input)
        }
    }
}

/// How to run a job.
#[derive(Debug, Clone)]
pub struct LaunchOptions {
    /// Number of ranks.
    pub ranks: u32,
    /// The program to run on every rank.
    pub program: String,
    /// Its arguments.
    pub args: Vec<String>,
    /// Kill the job after this long (exit code 124).
    pub timeout: Option<Duration>,
    /// The conduit, passed to the ranks in `AMNET_CONDUIT`.
    pub conduit: ConduitKind,
    /// How long ranks may take to leave after a job-wide exit before they are killed.
    pub grace: Duration,
}

impl LaunchOptions {
    /// `ranks` ranks of `program` without arguments, on the conduit `AMNET_CONDUIT` names (smp
    /// when it is unset or names none), with no timeout and a grace of 2 s.
    pub fn new(ranks: u32, program: impl Into<String>) -> Self {
        LaunchOptions {
            ranks,
            program: program.into(),
            args: Vec::new(),
            timeout: None,
            conduit: amnet_core::Source::env()
                .conduit()
                .unwrap_or(ConduitKind::Smp),
            grace: Duration::from_secs(2),
        }
    }
}

static SIGNALLED: AtomicI32 = AtomicI32::new(0);

extern "C" fn on_signal(sig: libc::c_int) {
    SIGNALLED.store(sig, Ordering::Relaxed);
}

/// A human name for a signal number.
pub fn signal_name(sig: i32) -> &'static str {
    match sig {
        libc::SIGHUP => "SIGHUP",
        libc::SIGINT => "SIGINT",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGILL => "SIGILL",
        libc::SIGTRAP => "SIGTRAP",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGALRM => "SIGALRM",
        libc::SIGTERM => "SIGTERM",
        _ => "signal",
    }
}

struct Rank {
    child: Option<Child>,
    pid: i32,
}

fn kill_all(ranks: &mut [Rank], sig: i32) {
    for r in ranks.iter() {
        if r.child.is_some() {
            // SAFETY: sending a signal to our own child's pid (not yet reaped, so not reused).
            unsafe { libc::kill(r.pid, sig) };
        }
    }
}

/// Run a job to completion and return its exit code.
pub fn supervise(backend: &mut dyn JobBackend, opts: &LaunchOptions) -> Result<i32> {
    supervise_with_log(backend, opts, &mut |m: &str| {
        amnet_core::diag!("amrun: {m}")
    })
}

/// [`supervise`], handing each message about the job (a rank that died, a timeout) to `log`
/// instead of printing it.
pub fn supervise_with_log(
    backend: &mut dyn JobBackend,
    opts: &LaunchOptions,
    log: &mut dyn FnMut(&str),
) -> Result<i32> {
    SIGNALLED.store(0, Ordering::Relaxed);
    const SIGS: [libc::c_int; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];
    let previous: Vec<libc::sighandler_t> = SIGS
        .iter()
        .map(|&s| {
            // SAFETY: installing an async-signal-safe handler that only stores an atomic; the
            // previous handler is kept and restored before returning.
            unsafe { libc::signal(s, on_signal as *const () as libc::sighandler_t) }
        })
        .collect();
    let r = supervise_inner(backend, opts, log);
    for (&s, &h) in SIGS.iter().zip(&previous) {
        // SAFETY: restoring the handler that was installed before.
        unsafe { libc::signal(s, h) };
    }
    r
}

fn supervise_inner(
    backend: &mut dyn JobBackend,
    opts: &LaunchOptions,
    log: &mut dyn FnMut(&str),
) -> Result<i32> {
    let mut ranks: Vec<Rank> = Vec::with_capacity(opts.ranks as usize);
    for r in 0..opts.ranks {
        let (mut cmd, input) = rank_command(backend, opts, r);
        use std::os::unix::process::CommandExt;
        // SAFETY: prctl is async-signal-safe; the closure allocates nothing.
        unsafe {
            cmd.pre_exec(|| {
                libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0);
                Ok(())
            });
        }
        match cmd.spawn() {
            Ok(mut c) => {
                if let (Some(bytes), Some(mut stdin)) = (input, c.stdin.take()) {
                    // A few dozen bytes: the pipe takes them without blocking. A rank that
                    // is already gone is reported by the loop below; closing the pipe ends
                    // the rank's standard input.
                    let _ = stdin.write_all(&bytes);
                }
                let pid = i32::try_from(c.id()).unwrap_or(-1);
                ranks.push(Rank {
                    child: Some(c),
                    pid,
                })
            }
            Err(e) => {
                log(&format!("cannot start {} for rank {r}: {e}", opts.program));
                kill_all(&mut ranks, libc::SIGKILL);
                for x in ranks.iter_mut() {
                    if let Some(mut c) = x.child.take() {
                        let _ = c.wait();
                    }
                }
                backend.cleanup();
                return Ok(127);
            }
        }
    }

    let start = Instant::now();
    let mut first_failure: Option<i32> = None;
    let mut ending_since: Option<Instant> = None;
    let mut killed = false;
    let mut timed_out = false;
    let mut alive = ranks.len();
    let mut origin_reported = false;
    while alive > 0 {
        let mut progressed = false;
        for (i, r) in ranks.iter_mut().enumerate() {
            let Some(c) = r.child.as_mut() else { continue };
            let status = match c.try_wait() {
                Ok(Some(s)) => s,
                Ok(None) => continue,
                Err(_) => continue,
            };
            r.child = None;
            alive -= 1;
            progressed = true;
            use std::os::unix::process::ExitStatusExt;
            if killed {
                continue;
            }
            if let Some(sig) = status.signal() {
                log(&format!(
                    "rank {i} was killed by signal {sig} ({}); ending the job",
                    signal_name(sig)
                ));
                let code = 128 + sig;
                first_failure.get_or_insert(code);
                backend.publish_exit(code);
            } else if let Some(code) = status.code() {
                if code != 0 {
                    if backend.exit_flag().is_none() {
                        log(&format!(
                            "rank {i} exited with code {code} without ending the job; ending it"
                        ));
                        backend.publish_exit(code);
                    }
                    first_failure.get_or_insert(code);
                }
            }
        }
        if !origin_reported {
            if let Some((code, Some(r))) = backend.exit_flag() {
                origin_reported = true;
                if code != 0 && !killed {
                    log(&format!("rank {r} ended the job with code {code}"));
                }
            }
        }
        if alive == 0 {
            break;
        }
        if ending_since.is_none() && (backend.exit_flag().is_some() || first_failure.is_some()) {
            ending_since = Some(Instant::now());
        }
        if let Some(t) = ending_since {
            if !killed && t.elapsed() > opts.grace {
                kill_all(&mut ranks, libc::SIGKILL);
                killed = true;
            }
        }
        let sig = SIGNALLED.load(Ordering::Relaxed);
        if sig != 0 && !killed {
            log(&format!("received {}; ending the job", signal_name(sig)));
            backend.publish_exit(128 + sig);
            first_failure.get_or_insert(128 + sig);
            kill_all(&mut ranks, libc::SIGKILL);
            killed = true;
        }
        if let Some(limit) = opts.timeout {
            if !killed && start.elapsed() > limit {
                let running: Vec<usize> = ranks
                    .iter()
                    .enumerate()
                    .filter(|(_, r)| r.child.is_some())
                    .map(|(i, _)| i)
                    .collect();
                log(&format!(
                    "timeout after {} s; ranks still running: {running:?}; ending the job",
                    limit.as_secs_f64()
                ));
                backend.publish_exit(124);
                kill_all(&mut ranks, libc::SIGKILL);
                killed = true;
                timed_out = true;
            }
        }
        if !progressed {
            std::thread::sleep(Duration::from_millis(2));
        }
    }
    let flag = backend.exit_flag();
    backend.cleanup();
    if timed_out {
        return Ok(124);
    }
    let sig = SIGNALLED.load(Ordering::Relaxed);
    if sig != 0 {
        return Ok(128 + sig);
    }
    // A rank's own exit code stands, unless it was 0 and a rank died afterwards.
    let flag = flag.map(|(c, _)| c);
    Ok(flag
        .filter(|&c| c != 0)
        .or(first_failure)
        .or(flag)
        .unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECRET: &str = "0123456789abcdef0123456789abcdef";

    struct Fake {
        remote: bool,
    }

    impl JobBackend for Fake {
        fn rank_env(&self, _rank: u32) -> Vec<(String, String)> {
            vec![("AMNET_UDP_BOOT".into(), "192.0.2.1:7".into())]
        }
        fn rank_secrets(&self, _rank: u32) -> Vec<(String, String)> {
            vec![("AMNET_UDP_SECRET".into(), SECRET.into())]
        }
        fn exit_flag(&self) -> Option<(i32, Option<u32>)> {
            None
        }
        fn publish_exit(&self, _code: i32) {}
        fn cleanup(&mut self) {}
        fn remote_prefix(&self, _rank: u32) -> Option<Vec<String>> {
            self.remote.then(|| {
                vec![
                    "/usr/bin/ssh".into(),
                    "-o".into(),
                    "x=y".into(),
                    "h1".into(),
                ]
            })
        }
    }

    fn opts() -> LaunchOptions {
        LaunchOptions {
            conduit: ConduitKind::Udp,
            args: vec!["--flag".into()],
            ..LaunchOptions::new(2, "/opt/prog")
        }
    }

    /// A remote rank's command line (what `ps` shows on either host) holds no secret: the
    /// secret goes to the command's standard input, which a wrapper reads into its
    /// environment; the rest of the rank's variables are on the command line as before.
    #[test]
    fn the_remote_command_line_carries_no_secret() {
        let (cmd, input) = rank_command(&Fake { remote: true }, &opts(), 1);
        let line: Vec<String> = std::iter::once(cmd.get_program())
            .chain(cmd.get_args())
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        let all = line.join(" ");
        assert!(!all.contains(SECRET), "{all}");
        assert_eq!(input.as_deref(), Some(format!("{SECRET}\n").as_bytes()));
        assert_eq!(line[..4], ["/usr/bin/ssh", "-o", "x=y", "h1"]);
        assert_eq!(
            line[4..8],
            [
                "'sh'",
                "'-c'",
                "'read -r AMNET_UDP_SECRET && export AMNET_UDP_SECRET && exec \"$@\"'",
                "'amnet-rank'"
            ]
        );
        assert_eq!(line[8], "'env'");
        for want in [
            "'AMNET_RANK=1'",
            "'AMNET_UDP_BOOT=192.0.2.1:7'",
            "'/opt/prog'",
            "'--flag'",
        ] {
            assert!(line.contains(&want.to_string()), "{want} in {all}");
        }
        assert!(cmd.get_envs().all(|(k, _)| k != "AMNET_UDP_SECRET"));
    }

    /// A local rank gets the secret in its environment, and nothing on its standard input.
    #[test]
    fn a_local_rank_gets_the_secret_in_its_environment() {
        let (cmd, input) = rank_command(&Fake { remote: false }, &opts(), 0);
        assert!(input.is_none());
        let all: Vec<String> = cmd
            .get_args()
            .map(|a| a.to_string_lossy().into_owned())
            .collect();
        assert_eq!(all, ["--flag"]);
        let env: Vec<(String, String)> = cmd
            .get_envs()
            .filter_map(|(k, v)| Some((k.to_str()?.into(), v?.to_str()?.into())))
            .collect();
        assert!(env.contains(&("AMNET_UDP_SECRET".into(), SECRET.into())));
        assert!(env.contains(&("AMNET_RANK".into(), "0".into())));
    }

    #[test]
    fn the_secret_reader_reads_each_name() {
        assert_eq!(
            secret_reader(&["A", "B"]),
            "read -r A && export A && read -r B && export B && exec \"$@\""
        );
    }
}
