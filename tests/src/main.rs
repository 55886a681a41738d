//! `amrun -n N amnet-testsuite [FILTER]`: run the conduit test suite as a job.
//! `amnet-testsuite --scenario NAME`: one rank of a nested exit scenario (used by the suite).
//! `amnet-testsuite --coll-images SEED`: one rank of the multi-image collectives job.
//! `amnet-testsuite --ibv-fault SEED`: one rank of a nested ibv job with an injected error.
//! `amnet-testsuite --list`: print the test names.
//! `--summary PATH` (before FILTER): rank 0 also writes `passed failed skipped` to PATH.

use amnet_testsuite::say;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("--scenario") => {
            let name = args.get(1).map(String::as_str).unwrap_or("");
            std::process::exit(amnet_testsuite::scenarios::main_scenario(name));
        }
        Some("--ibv-fault") => {
            let seed = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(1);
            std::process::exit(amnet_testsuite::ibv::main_fault(seed));
        }
        Some("--coll-images") => {
            let seed = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(1);
            std::process::exit(amnet_testsuite::coll_images::main_images(seed));
        }
        Some("--list") => {
            for t in amnet_testsuite::all_tests() {
                println!("{}", t.name);
            }
            return;
        }
        Some("-h") | Some("--help") => {
            println!(
                "usage: amrun -n N amnet-testsuite [--summary PATH] [FILTER]\n       amnet-testsuite --list"
            );
            return;
        }
        _ => {}
    }
    let mut args = args.into_iter();
    let mut summary = None;
    let mut filter = None;
    while let Some(a) = args.next() {
        if a == "--summary" {
            summary = args.next();
        } else {
            filter = Some(a);
        }
    }
    // The suite's own settings are checked before the job starts: a bad value is a start-up
    // failure (2), not a default used in silence.
    if let Err(e) = amnet_testsuite::check_settings() {
        say!("amnet-testsuite: {e}");
        std::process::exit(2);
    }
    let ep = match amnet::init() {
        Ok(ep) => ep,
        Err(e) => {
            say!("amnet-testsuite: {e}");
            std::process::exit(2);
        }
    };
    let st = std::sync::Arc::new(amnet_testsuite::State::new(ep.size()));
    let attached =
        amnet_testsuite::handler_table(&st).and_then(|t| ep.attach(t, amnet_testsuite::SEG_LEN));
    if let Err(e) = attached {
        say!("amnet-testsuite: rank {}: attach: {e}", ep.rank());
        ep.exit(2);
    }
    match amnet_testsuite::run_attached(&ep, &st, filter.as_deref(), true, summary.as_deref()) {
        // Rank 0 holds the verdict and ends the job with it. The others wait for that: a rank
        // returning from main first would publish 0 for the whole job.
        Ok(s) if ep.rank() == 0 => ep.exit(i32::from(s.failed > 0)),
        Ok(_) => {
            let r = ep.wait_until(|| false);
            say!(
                "amnet-testsuite: rank {}: waiting for rank 0's verdict: {r:?}",
                ep.rank()
            );
            ep.exit(1);
        }
        // The suite could not finish (a rank failed mid-run): a failure of the run, not of its
        // start.
        Err(e) => {
            say!(
                "amnet-testsuite: rank {}: the suite could not finish: {e}",
                ep.rank()
            );
            ep.exit(1);
        }
    }
}
