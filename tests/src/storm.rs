//! A storm: every rank sends `AMNET_STORM` (default 100,000) Short AMs to every rank at once.
//! With 8 ranks on 2 cores it must still finish in bounded time: rings fill, senders poll,
//! idle waiters yield.

use std::sync::atomic::Ordering;
use std::time::Duration;

use crate::state::H_STORM;
use crate::{ck, test, Ctx, Test, Verdict};

/// The tests of this module.
pub fn tests() -> Vec<Test> {
    vec![Test {
        timeout: Duration::from_secs(300),
        ..test("am_storm", storm)
    }]
}

/// Messages each rank sends to each rank (`AMNET_STORM`; a value that is not a count is
/// reported and the default used).
pub fn per_pair() -> u64 {
    match amnet::Source::env().count(&amnet::config::vars::STORM) {
        Ok(n) => n.unwrap_or(100_000),
        Err(e) => {
            say!("amnet-testsuite: {e}; sending 100000 per pair");
            100_000
        }
    }
}

fn storm(c: &Ctx<'_>) -> Verdict {
    let per = per_pair();
    let n = c.size();
    let me = c.rank();
    for i in 0..per {
        for k in 0..n {
            // Start at a different destination on every rank so that no rank is hit by all.
            let d = (me + k + 1) % n;
            let _ = i;
            ck("storm send", c.ep.request_short(d, H_STORM, &[me]))?;
        }
    }
    let want = per * u64::from(n);
    ck(
        "storm drain",
        c.ep.wait_until(|| c.st.storm.load(Ordering::Relaxed) >= want),
    )?;
    ck("barrier", c.ep.barrier())?;
    c.st.handler_verdict()?;
    let got = c.st.storm.load(Ordering::Relaxed);
    if got != want {
        return Err(format!("{got} storm messages arrived, expected {want}"));
    }
    Ok(())
}
