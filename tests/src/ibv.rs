//! Properties of the ibv conduit's protocol under injected error completions, on its emulated
//! device: for seeds drawn from `AMNET_TEST_SEED`, a nested 3-rank job runs a mixed workload
//! (requests with and without replies, Mediums, Longs, puts, gets, offloaded atomics,
//! barriers) while the device completes one work request of one rank, chosen by the seed,
//! with an error status chosen by the seed (`AMNET_IBV_EMU_FAULT`). The property: the rank
//! that fails gets an error from its next call that names itself, the peer, the failed
//! operation and the status, and the job ends in bounded time with nothing left in /dev/shm.

use std::time::Duration;

use amnet::{AtomicOp, AtomicOps, Endpoint};

use crate::coll_prop::seed;
use crate::state::{H_COUNT, H_ECHO};
use crate::{Ctx, Test, Verdict};

/// Error statuses the device can be made to report, with their `ibv_wc_status` values.
const STATUSES: [(&str, u32); 9] = [
    ("loc_len", 1),
    ("loc_qp_op", 2),
    ("loc_prot", 4),
    ("flush", 5),
    ("rem_inv_req", 9),
    ("rem_access", 10),
    ("rem_op", 11),
    ("retry", 12),
    ("rnr_retry", 13),
];
/// Ranks of each nested job.
const RANKS: u32 = 3;
/// Nested jobs per run of the test.
const JOBS: u64 = 8;
/// The code a rank ends the job with once its error said everything it should.
const NAMED: i32 = 31;
/// Rounds of the workload (each rank runs at least one work request per round).
const ROUNDS: u32 = 400;

/// The suite's entries.
pub fn tests() -> Vec<Test> {
    vec![Test {
        name: "ibv_fault_properties",
        min_ranks: 1,
        process_only: true,
        timeout: Duration::from_secs(120),
        only_conduit: Some("ibv"),
        run,
    }]
}

/// The fault of job `s`: which rank, after how many work requests, which status.
fn fault(s: u64) -> (u32, u64, usize) {
    let mut x = s.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ 0x1b0f_a017;
    let mut next = || {
        x ^= x >> 29;
        x = x.wrapping_mul(0xbf58_476d_1ce4_e5b9);
        x ^= x >> 32;
        x
    };
    let rank = u32::try_from(next() % u64::from(RANKS)).unwrap_or(0);
    let after = next() % 150;
    let status = usize::try_from(next() % STATUSES.len() as u64).unwrap_or(0);
    (rank, after, status)
}

fn run(c: &Ctx<'_>) -> Verdict {
    if c.rank() != 0 {
        return Ok(());
    }
    let base = seed(0x1b7);
    for k in 0..JOBS {
        let s = base.wrapping_add(k);
        let (rank, after, status) = fault(s);
        let name = format!(
            "ibv fault job (seed {s}: rank {rank}, after {after} requests, {})",
            STATUSES[status].0
        );
        crate::scenarios::launch_nested(
            &name,
            RANKS,
            vec!["--ibv-fault".into(), s.to_string()],
            Duration::from_secs(30),
            c.ep.conduit_name(),
            &[NAMED],
            Duration::ZERO,
            None,
        )?;
    }
    Ok(())
}

/// Entry point of `--ibv-fault SEED`: one rank of a nested job. Returns the exit code.
pub fn main_fault(s: u64) -> i32 {
    let (rank, after, status) = fault(s);
    // Still one thread: nothing else reads the environment yet.
    std::env::set_var("AMNET_IBV_DEVICE", "emu");
    std::env::set_var("AMNET_HOST_BYPASS", "0");
    std::env::set_var(
        "AMNET_IBV_EMU_FAULT",
        format!("{rank}:{after}:{}", STATUSES[status].0),
    );
    let ep = match amnet::init() {
        Ok(ep) => ep,
        Err(e) => {
            say!("amnet-testsuite: init: {e}");
            return 2;
        }
    };
    match workload(&ep) {
        Ok(()) => {
            say!(
                "amnet-testsuite: ibv fault seed {s}: rank {} ran its workload without an error",
                ep.rank()
            );
            1
        }
        Err(msg) => {
            let me = ep.rank();
            let raw = STATUSES[status].1;
            let names_peer = [" to rank ", " with rank ", " from rank "]
                .iter()
                .any(|w| msg.contains(w));
            let named = msg.contains(&format!("rank {me}: ")) && names_peer;
            // The faulted rank's error names the injected status; another rank's (a peer
            // that ended meanwhile) names the status it met.
            let status_named = if me == rank {
                msg.contains(&format!("status {raw})"))
            } else {
                msg.contains("status ")
            };
            if named && status_named {
                ep.exit(NAMED)
            }
            say!(
                "amnet-testsuite: ibv fault seed {s}: rank {me}'s error does not name itself, \
                 the peer and {}: {msg}",
                if me == rank {
                    format!("status {raw}")
                } else {
                    "a status".to_string()
                }
            );
            1
        }
    }
}

/// Every rank: rounds of traffic towards the other ranks, until an error.
fn workload(ep: &Endpoint) -> Result<(), String> {
    fn e(w: &'static str) -> impl Fn(amnet::Error) -> String {
        move |x| format!("{w}: {x}")
    }
    crate::scenarios::attach(ep)?;
    let ad = ep
        .atomic_domain::<u64>(AtomicOps::of(&[AtomicOp::Get, AtomicOp::Add]))
        .map_err(e("atomic_domain"))?;
    ep.barrier().map_err(e("barrier"))?;
    let me = ep.rank();
    let n = ep.size();
    let data = vec![7u8; 12_000];
    let mut back = vec![0u8; 12_000];
    for i in 0..ROUNDS {
        let peer = (me + 1 + i % (n - 1).max(1)) % n;
        let off = u64::from(me) * 16_384;
        match i % 7 {
            0 => ep
                .request_short(peer, H_COUNT, &[i])
                .map_err(e("request_short"))?,
            1 => ep
                .request_medium(peer, H_COUNT, &[i], &data[..700])
                .map_err(e("request_medium"))?,
            2 => ep
                .request_long(peer, H_COUNT, &[i], &data, off)
                .map_err(e("request_long"))?,
            3 => ep.put(peer, off, &data[..3000]).map_err(e("put"))?,
            4 => ep.get(peer, off, &mut back[..5000]).map_err(e("get"))?,
            5 => {
                ad.fetch_add(peer, 512 * 1024 + 8 * u64::from(me), 1)
                    .map_err(e("fetch_add"))?;
            }
            _ => ep
                .request_short(peer, H_ECHO, &[0, 2, 0, i, 0])
                .map_err(e("request_short echo"))?,
        }
        if i % 50 == 49 {
            ep.barrier().map_err(e("barrier"))?;
        }
    }
    ep.barrier().map_err(e("barrier"))
}
