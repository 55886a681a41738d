//! Which ranks of a job share a host (spec/core.md §7d).
//!
//! A host is one kernel instance seen through one network namespace and one `/dev/shm`: two
//! processes on it can map the same shared memory and reach the same loopback. Each rank
//! derives its host's key from the kernel's boot id, the inode of its network namespace and
//! the device of its `/dev/shm` (no host name and no name lookup), the keys travel in the
//! attach exchange, and ranks with equal keys form one host. Hosts are numbered in the order
//! of their lowest rank, and a host's ranks are listed in rank order, so every rank builds the
//! same map.

use std::os::unix::fs::MetadataExt;

use crate::{Error, Rank, Result};

/// Bytes of a host key.
pub const HOST_KEY_BYTES: usize = 16;

/// This process's host key: two 64-bit FNV-1a hashes, with different offsets, of the boot
/// id, the network namespace's inode and `/dev/shm`'s device. A component that cannot be read
/// (no `/proc`, no `/dev/shm`) is left out, so processes of one machine without `/proc` still
/// agree with one another.
pub fn host_key() -> [u8; HOST_KEY_BYTES] {
    let mut material = Vec::with_capacity(64);
    if let Ok(id) = std::fs::read("/proc/sys/kernel/random/boot_id") {
        material.extend_from_slice(id.trim_ascii());
    }
    material.push(0);
    if let Ok(m) = std::fs::metadata("/proc/self/ns/net") {
        material.extend_from_slice(&m.dev().to_le_bytes());
        material.extend_from_slice(&m.ino().to_le_bytes());
    }
    material.push(0);
    if let Ok(m) = std::fs::metadata("/dev/shm") {
        material.extend_from_slice(&m.dev().to_le_bytes());
    }
    let mut key = [0u8; HOST_KEY_BYTES];
    key[..8].copy_from_slice(&fnv1a(0xcbf2_9ce4_8422_2325, &material).to_le_bytes());
    key[8..].copy_from_slice(&fnv1a(0x6c62_272e_07bb_0142, &material).to_le_bytes());
    key
}

/// 64-bit FNV-1a of `bytes` from `offset`.
fn fnv1a(offset: u64, bytes: &[u8]) -> u64 {
    bytes.iter().fold(offset, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// The hosts of a job and the ranks on each ([`Endpoint::host_map`]).
///
/// [`Endpoint::host_map`]: crate::Endpoint::host_map
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostMap {
    /// Host index of every rank.
    host_of: Vec<u32>,
    /// Every host's ranks, ascending.
    ranks: Vec<Vec<Rank>>,
    /// Every host's ranks reach one another through shared memory (host scratch and rings).
    shared: Vec<bool>,
}

impl HostMap {
    /// The map of a job whose rank `r` has host key `keys[r]`.
    pub fn from_keys(keys: &[[u8; HOST_KEY_BYTES]]) -> HostMap {
        let mut firsts: Vec<&[u8; HOST_KEY_BYTES]> = Vec::new();
        let mut host_of = Vec::with_capacity(keys.len());
        let mut ranks: Vec<Vec<Rank>> = Vec::new();
        for (r, k) in keys.iter().enumerate() {
            let h = match firsts.iter().position(|f| *f == k) {
                Some(h) => h,
                None => {
                    firsts.push(k);
                    ranks.push(Vec::new());
                    firsts.len() - 1
                }
            };
            host_of.push(u32::try_from(h).unwrap_or(u32::MAX));
            ranks[h].push(Rank::try_from(r).unwrap_or(Rank::MAX));
        }
        let shared = vec![true; ranks.len()];
        HostMap {
            host_of,
            ranks,
            shared,
        }
    }

    /// The map with, for every rank `r`, whether `r` maps its host peers' host scratch
    /// (`mapped[r]`): a host's ranks share memory when every one of them does, and a host of
    /// one rank always does. `mapped` shorter than the job counts as false for the rest.
    pub fn with_mapped(mut self, mapped: &[bool]) -> HostMap {
        for (h, rs) in self.ranks.iter().enumerate() {
            self.shared[h] =
                rs.len() == 1 || rs.iter().all(|&r| mapped.get(r as usize) == Some(&true));
        }
        self
    }

    /// The map of a job of `size` ranks on one host.
    pub fn single(size: u32) -> HostMap {
        HostMap {
            host_of: vec![0; size as usize],
            ranks: vec![(0..size).collect()],
            shared: vec![true],
        }
    }

    /// How many hosts the job runs on.
    pub fn hosts(&self) -> u32 {
        u32::try_from(self.ranks.len()).unwrap_or(u32::MAX)
    }

    /// The host index of `rank`.
    pub fn host_of(&self, rank: Rank) -> Result<u32> {
        self.host_of
            .get(rank as usize)
            .copied()
            .ok_or(Error::BadRank {
                rank,
                size: u32::try_from(self.host_of.len()).unwrap_or(u32::MAX),
            })
    }

    /// The ranks on host `host`, ascending.
    pub fn ranks_on(&self, host: u32) -> Result<&[Rank]> {
        self.ranks
            .get(host as usize)
            .map(Vec::as_slice)
            .ok_or_else(|| {
                Error::Config(format!(
                    "host index {host} is out of range: the job runs on {} hosts",
                    self.ranks.len()
                ))
            })
    }

    /// Whether ranks `a` and `b` share a host.
    pub fn same_host(&self, a: Rank, b: Rank) -> Result<bool> {
        Ok(self.host_of(a)? == self.host_of(b)?)
    }

    /// Whether the ranks of host `host` reach one another through shared memory (each maps
    /// the others' segments and host scratch, as the smp conduit's ranks and the host groups
    /// of the host-local bypass do): always for a host of one rank; not for a network
    /// conduit's ranks without the bypass. Collectives use it for their host-local phase.
    pub fn shares_memory(&self, host: u32) -> Result<bool> {
        self.ranks_on(host)?;
        Ok(self.shared[host as usize])
    }

    /// Whether every host's ranks share memory ([`shares_memory`](Self::shares_memory)).
    pub fn all_share_memory(&self) -> bool {
        self.shared.iter().all(|&b| b)
    }

    /// One line per host, `host H: ranks [..]`, for `AMNET_VERBOSE=1`; a host of several
    /// ranks that do not share memory says so (` no shared memory`).
    pub fn describe(&self) -> String {
        let mut s = String::new();
        for (h, rs) in self.ranks.iter().enumerate() {
            let note = if self.shared[h] {
                ""
            } else {
                " no shared memory"
            };
            s += &format!("amnet: host {h}: ranks {rs:?}{note}\n");
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_host_shares_memory_when_every_rank_of_it_maps_its_peers() {
        let (a, b, c) = (
            [1u8; HOST_KEY_BYTES],
            [2u8; HOST_KEY_BYTES],
            [3u8; HOST_KEY_BYTES],
        );
        let keys = [a, b, a, c, b];
        let m = HostMap::from_keys(&keys).with_mapped(&[true, true, true, false, false]);
        assert!(m.shares_memory(0).unwrap());
        assert!(!m.shares_memory(1).unwrap(), "rank 4 does not map its peer");
        assert!(m.shares_memory(2).unwrap(), "one rank alone");
        assert!(!m.all_share_memory());
        assert!(m.shares_memory(3).is_err());
        assert!(m
            .describe()
            .contains("host 1: ranks [1, 4] no shared memory"));
        let all = HostMap::from_keys(&keys).with_mapped(&[true; 5]);
        assert!(all.all_share_memory());
        assert!(HostMap::single(4).all_share_memory());
    }

    #[test]
    fn keys_group_ranks_by_host_in_order_of_their_lowest_rank() {
        let a = [1u8; HOST_KEY_BYTES];
        let b = [2u8; HOST_KEY_BYTES];
        let m = HostMap::from_keys(&[b, a, b, a, a]);
        assert_eq!(m.hosts(), 2);
        assert_eq!(m.ranks_on(0).unwrap(), &[0, 2]);
        assert_eq!(m.ranks_on(1).unwrap(), &[1, 3, 4]);
        assert_eq!(m.host_of(3).unwrap(), 1);
        assert!(m.same_host(1, 4).unwrap());
        assert!(!m.same_host(0, 1).unwrap());
        assert!(matches!(
            m.host_of(5),
            Err(Error::BadRank { rank: 5, size: 5 })
        ));
        let e = m.ranks_on(2).unwrap_err().to_string();
        assert!(e.contains("host index 2") && e.contains("2 hosts"), "{e}");
        assert_eq!(
            m.describe(),
            "amnet: host 0: ranks [0, 2]\namnet: host 1: ranks [1, 3, 4]\n"
        );
    }

    #[test]
    fn one_host_and_a_stable_key() {
        assert_eq!(HostMap::single(3), HostMap::from_keys(&[[7; 16]; 3]));
        assert_eq!(host_key(), host_key());
        assert_ne!(fnv1a(1, b"a"), fnv1a(1, b"b"));
    }
}
