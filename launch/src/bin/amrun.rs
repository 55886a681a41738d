//! `amrun -n N [--conduit NAME] [--timeout SECS] PROGRAM [ARGS...]`: start an N-rank amnet job
//! and exit with its code.

use std::time::Duration;

use amnet_core::config::Source;
use amnet_core::ConduitKind;
use amnet_launch::LaunchOptions;

const USAGE: &str =
    "usage: amrun -n N [--conduit smp|udp|mpi|ofi|ibv] [--hosts H1,H2,...] [--timeout SECS] PROGRAM [ARGS...]

Starts an N-rank amnet job and exits with the job's code: the code a rank passed to exit
(returning from main counts as exit with main's status), else the first non-zero code of a
rank that died (128+signal for a signal). On timeout every rank is killed, the ranks still
running are named, and the code is 124.

  -n, --ranks N       number of ranks (processes)
  --conduit NAME      conduit (default: $AMNET_CONDUIT or smp)
  --hosts H1,H2,...   udp, ofi, ibv (on an HCA): spread the ranks over these hosts in contiguous
                      blocks, started through $AMNET_SSH (default \"ssh -o BatchMode=yes\");
                      same as $AMNET_UDP_HOSTS
  --timeout SECS      kill the job after SECS seconds (fractions allowed)
  --grace SECS        time ranks get to leave after a job-wide exit (default 2)
  -h, --help          this text";

fn fail(msg: &str) -> ! {
    eprintln!("amrun: {msg}\n{USAGE}");
    std::process::exit(2)
}

fn parse_secs(flag: &str, v: Option<String>) -> Duration {
    let v = v.unwrap_or_else(|| fail(&format!("{flag} needs a value")));
    // `try_from_secs_f64` refuses what a Duration cannot hold (1e300) instead of panicking.
    match v.parse::<f64>().map(Duration::try_from_secs_f64) {
        Ok(Ok(d)) if !d.is_zero() => d,
        _ => fail(&format!(
            "{flag} {v:?}: expected a positive number of seconds (at most {})",
            Duration::MAX.as_secs()
        )),
    }
}

/// A bare program name that sits next to amrun (e.g. target/release) runs from there.
fn resolve(program: String) -> String {
    if program.contains('/') {
        return program;
    }
    if let Ok(me) = std::env::current_exe() {
        if let Some(dir) = me.parent() {
            let cand = dir.join(&program);
            if cand.is_file() {
                return cand.to_string_lossy().into_owned();
            }
        }
    }
    program
}

fn main() {
    let mut args = std::env::args().skip(1);
    let mut ranks: Option<u32> = None;
    let mut conduit = Source::env()
        .conduit()
        .unwrap_or_else(|e| fail(&e.to_string()));
    let mut timeout = None;
    let mut grace = Duration::from_secs(2);
    let mut hosts: Option<String> = None;
    let program = loop {
        let Some(a) = args.next() else {
            fail("no program given")
        };
        match a.as_str() {
            "-h" | "--help" => {
                println!("{USAGE}");
                return;
            }
            "-n" | "--ranks" | "-np" => {
                let v = args.next().unwrap_or_else(|| fail("-n needs a number"));
                match v.parse::<u32>() {
                    Ok(n) if n >= 1 => ranks = Some(n),
                    _ => fail(&format!("-n {v:?}: expected a whole number of ranks >= 1")),
                }
            }
            "--conduit" => {
                let name = args
                    .next()
                    .unwrap_or_else(|| fail("--conduit needs a name"));
                conduit = name.parse::<ConduitKind>().unwrap_or_else(|_| {
                    fail(&format!(
                        "--conduit {name:?}: expected smp, udp, mpi, ofi or ibv"
                    ))
                });
            }
            "--timeout" => timeout = Some(parse_secs("--timeout", args.next())),
            "--hosts" => {
                let h = args.next().unwrap_or_else(|| fail("--hosts needs a list"));
                if h.split(',').all(|x| x.trim().is_empty()) {
                    fail(&format!(
                        "--hosts {h:?}: expected host names separated by commas"
                    ));
                }
                hosts = Some(h);
            }
            "--grace" => grace = parse_secs("--grace", args.next()),
            s if s.starts_with('-') => fail(&format!("unknown option {s}")),
            _ => break a,
        }
    };
    let ranks = ranks.unwrap_or_else(|| fail("-n N is required"));
    if let Some(h) = hosts {
        if !matches!(conduit, ConduitKind::Udp | ConduitKind::Ofi) {
            fail(&format!(
                "--hosts applies to the udp and ofi conduits (--conduit udp|ofi), not to \
                 {conduit}"
            ));
        }
        // Set before any thread starts; the job (udp's, which ofi shares) reads it.
        std::env::set_var("AMNET_UDP_HOSTS", h);
    }
    let opts = LaunchOptions {
        ranks,
        program: resolve(program),
        args: args.collect(),
        timeout,
        conduit,
        grace,
    };
    match amnet_launch::launch_job(&opts) {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            eprintln!("amrun: {e}");
            std::process::exit(2)
        }
    }
}
