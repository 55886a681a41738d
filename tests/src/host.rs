//! The host map (spec/core.md §7d): every rank builds the same one, this rank is on its own
//! host, and a rank whose segment this rank maps shares its host.

use amnet::host::host_key;
use amnet::RmaPath;

use crate::{ck, ensure, test, Ctx, Test, Verdict};

/// Where each rank publishes its view of the map (one `u32` per rank: its host index).
const HOST_OFF: u64 = (9 << 20) + (768 << 10);

/// The tests of this module.
pub fn tests() -> Vec<Test> {
    vec![test("host_map", host_map)]
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
