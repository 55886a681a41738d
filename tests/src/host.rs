//! The host map (spec/core.md §7d): every rank builds the same one, this rank is on its own
//! host, and a rank whose segment this rank maps shares its host. The host-local bypass
//! (§7e): a network conduit's ranks of one host map one another's segments, and their
//! messages to one another leave no datagram.

use amnet::host::host_key;
use amnet::RmaPath;

use crate::state::H_COUNT;
use crate::{bypass_on, ck, ensure, test, Ctx, Test, Verdict};

/// Where each rank publishes its view of the map (one `u32` per rank: its host index).
const HOST_OFF: u64 = (9 << 20) + (768 << 10);

/// The tests of this module.
pub fn tests() -> Vec<Test> {
    vec![
        test("host_map", host_map),
        Test {
            min_ranks: 2,
            ..test("host_bypass", host_bypass)
        },
    ]
}

fn host_map(c: &Ctx<'_>) -> Verdict {
    let ep = c.ep;
    let (me, n) = (c.rank(), c.size());
    let map = ck("host_map", ep.host_map())?;
    let peers = ck("host_peers", ep.host_peers())?;
    let idx = ck("host_rank", ep.host_rank())?;
    let host = ck("host_of", map.host_of(me))?;
    ensure(peers.get(idx as usize) == Some(&me), || {
        format!("host_rank {idx} does not name rank {me} in host_peers {peers:?}")
    })?;
    ensure(peers.windows(2).all(|w| w[0] < w[1]), || {
        format!("host_peers {peers:?} not ascending")
    })?;
    ensure(ck("ranks_on", map.ranks_on(host))? == peers, || {
        "ranks_on(host_of(me)) differs from host_peers".to_string()
    })?;
    let total: usize = (0..map.hosts())
        .map(|h| map.ranks_on(h).map_or(0, <[u32]>::len))
        .sum();
    ensure(total == n as usize, || {
        format!("{} hosts hold {total} ranks, the job has {n}", map.hosts())
    })?;
    ensure(
        map.host_of(n).is_err() && map.ranks_on(map.hosts()).is_err(),
        || "an index past the job or past the hosts was accepted".to_string(),
    )?;
    ensure(host_key() == host_key(), || {
        "the host key changes".to_string()
    })?;
    if ep.conduit_name() == "smp" {
        ensure(map.hosts() == 1, || {
            format!("smp ranks on {} hosts", map.hosts())
        })?;
    }
    for r in 0..n {
        if ck("rma_path", ep.rma_path(r))? == RmaPath::Direct {
            ensure(ck("same_host", map.same_host(me, r))?, || {
                format!("rank {r}'s segment is mapped here but the map puts it on another host")
            })?;
        }
    }
    // Every rank's view equals rank 0's.
    let mine: Vec<u8> = (0..n)
        .flat_map(|r| map.host_of(r).unwrap_or(u32::MAX).to_le_bytes())
        .collect();
    ck("write_local", ep.write_local(HOST_OFF, &mine))?;
    ck("barrier", ep.barrier())?;
    let mut first = vec![0u8; mine.len()];
    ck("get", ep.get(0, HOST_OFF, &mut first))?;
    ck("barrier", ep.barrier())?;
    ensure(first == mine, || {
        format!("rank {me}'s host map differs from rank 0's ({mine:?} against {first:?})")
    })
}

/// Short requests this rank sends to each of its host's other ranks.
const LOCAL_SENDS: u64 = 2000;

fn host_bypass(c: &Ctx<'_>) -> Verdict {
    let ep = c.ep;
    let name = ep.conduit_name();
    let me = c.rank();
    let peers: Vec<u32> = ck("host_peers", ep.host_peers())?
        .iter()
        .copied()
        .filter(|&r| r != me)
        .collect();
    let am_only = ep
        .config_source()
        .text(&amnet::config::vars::RMA)
        .is_some_and(|v| v == "am");
    for r in (0..c.size()).filter(|&r| r != me) {
        let path = ck("rma_path", ep.rma_path(r))?;
        let local = peers.contains(&r);
        let want_direct = (bypass_on(c) || name == "smp") && local && !am_only;
        ensure((path == RmaPath::Direct) == want_direct, || {
            format!(
                "rank {r} ({} host, bypass {}): rma path {path:?}",
                if local { "this" } else { "another" },
                if bypass_on(c) { "on" } else { "off" }
            )
        })?;
    }
    if name != "udp" {
        // No datagrams to count: the rings are checked through the paths above and the tests
        // of prepared messages (`rings_to`).
        return Ok(());
    }
    let sent = |what: &str| -> Result<u64, String> {
        ep.conduit_stats()
            .iter()
            .find(|(k, _)| *k == "datagrams_sent")
            .map(|&(_, v)| v)
            .ok_or_else(|| format!("{what}: no datagrams_sent counter"))
    };
    ck("barrier", ep.barrier())?;
    let before = sent("before")?;
    for _ in 0..LOCAL_SENDS {
        for &p in &peers {
            ck("request_short", ep.request_short(p, H_COUNT, &[1, 2]))?;
        }
    }
    let after = sent("after")?;
    ck("barrier", ep.barrier())?;
    let moved = after - before;
    let msgs = LOCAL_SENDS * peers.len() as u64;
    if bypass_on(c) {
        // Acknowledgements and heartbeats to other hosts may go meanwhile, a few.
        ensure(moved < msgs / 10 + 1, || {
            format!("{msgs} requests to this host's ranks {peers:?} went with {moved} datagrams")
        })
    } else {
        ensure(peers.is_empty() || moved > 0, || {
            format!("{msgs} requests without the bypass went with no datagram")
        })
    }
}
