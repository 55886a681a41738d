//! The host-local bypass (spec/core.md §7e): in a job of a network conduit, the ranks that
//! share a host ([`amnet_core::host`]) exchange active messages through the smp conduit's
//! rings and reach one another's segments and host scratch through shared memory; only the
//! traffic between hosts goes through the network.
//!
//! [`wrap`] runs at start-up, before attach, on every rank. It exchanges the host keys over the
//! network conduit, and where some host runs several ranks, each host's lowest rank creates
//! the control block of an smp "host group" named after its process and a nonce, the job
//! meets once more over the network, and the host's ranks join the group
//! ([`SmpConduit::join_group`]). The returned [`Bypass`] routes each message by its
//! destination: a rank of this host through the group's rings (addressed by its index on the
//! host), any other through the network conduit. Its segment is the group's shared-memory
//! segment, which the network conduit serves to remote ranks
//! ([`Conduit::attach_segment_in`]).
//!
//! Exit, failure and the job-wide exchange stay the network conduit's: an exit request
//! reaches every rank over the network, and the group's shared-memory objects lose their
//! names as soon as every member has mapped them, so none outlives the job.

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use amnet_core::config::{vars, Source};
use amnet_core::host::{host_key, HostMap, HOST_KEY_BYTES};
use amnet_core::{
    Conduit, Error, InMsg, LocalSegment, NativeRma, OutMsg, PreparedSlot, Rank, Result,
};
use amnet_smp::SmpConduit;

/// Marks a rank of another host in [`Bypass::local_of`].
const REMOTE: u32 = u32::MAX;

/// Polls of the group's rings without a message after which every poll reads the network
/// too: while messages come through the rings, the network (a system call per look on udp)
/// is read only at every [`NET_EVERY`]-th poll.
const LOCAL_QUIET: u32 = 16;

/// The most polls in a row that leave the network unread.
const NET_EVERY: u32 = 256;

/// Bytes of the start-up blob: the bypass flag, the host key, the process id and a nonce.
const BLOB: usize = 1 + HOST_KEY_BYTES + 4 + 8;

/// A network conduit with the ranks of this host reached through shared memory.
pub struct Bypass {
    /// The network conduit (declared first: it may hold the segment, which `group` maps, and
    /// is dropped first).
    net: Box<dyn Conduit>,
    /// The ranks of this host, as an smp job whose rank `i` is `peers[i]`.
    group: SmpConduit,
    /// Job rank of every member of the group, in the group's order.
    peers: Vec<Rank>,
    /// Every job rank's index in the group, [`REMOTE`] for ranks of other hosts.
    local_of: Vec<u32>,
    /// Polls since the group's rings last delivered a message.
    since_local: AtomicU32,
    /// Polls since the network was last read.
    since_net: AtomicU32,
}

impl std::fmt::Debug for Bypass {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bypass")
            .field("net", &self.net.name())
            .field("host_peers", &self.peers)
            .finish_non_exhaustive()
    }
}

/// The network conduit `net`, with the bypass where `AMNET_HOST_BYPASS` (in `src`) allows it
/// and some host runs several ranks of the job. Collective: every rank calls it once, before
/// attach. A rank alone on its host gets `net` itself.
pub fn wrap(net: Box<dyn Conduit>, src: &Source) -> Result<Box<dyn Conduit>> {
    let on = src.flag(&vars::HOST_BYPASS)?.unwrap_or(true);
    let boot_timeout = src.boot_timeout()?;
    let nonce = amnet_core::now_ns() ^ (u64::from(std::process::id()) << 40);
    let mut blob = Vec::with_capacity(BLOB);
    blob.push(u8::from(on));
    blob.extend_from_slice(&host_key());
    blob.extend_from_slice(&std::process::id().to_le_bytes());
    blob.extend_from_slice(&nonce.to_le_bytes());
    let blobs = net.exchange(&blob)?;
    let name = net.name();
    let mut keys = Vec::with_capacity(blobs.len());
    let mut off = Vec::new();
    for (r, b) in blobs.iter().enumerate() {
        if b.len() != BLOB {
            return Err(Error::conduit(
                name,
                format!(
                    "host bypass start-up: rank {r} sent {} bytes, expected {BLOB}",
                    b.len()
                ),
            ));
        }
        if b[0] == 0 {
            off.push(r);
        }
        let mut k = [0u8; HOST_KEY_BYTES];
        k.copy_from_slice(&b[1..=HOST_KEY_BYTES]);
        keys.push(k);
    }
    if !off.is_empty() && off.len() != blobs.len() {
        return Err(Error::Mismatch {
            what: "AMNET_HOST_BYPASS",
            detail: format!("ranks {off:?} set it to 0, the others not"),
        });
    }
    let hosts = HostMap::from_keys(&keys);
    let shared = (0..hosts.hosts()).any(|h| hosts.ranks_on(h).map_or(0, <[Rank]>::len) > 1);
    if !on || !shared {
        return Ok(net);
    }
    let me = net.rank();
    let peers = hosts.ranks_on(hosts.host_of(me)?)?.to_vec();
    let first = peers[0];
    let fb = &blobs[first as usize];
    let pid = u32::from_le_bytes(
        fb[1 + HOST_KEY_BYTES..5 + HOST_KEY_BYTES]
            .try_into()
            .map_err(|_| Error::conduit(name, "host bypass start-up: a short blob"))?,
    );
    let their_nonce = u64::from_le_bytes(
        fb[5 + HOST_KEY_BYTES..]
            .try_into()
            .map_err(|_| Error::conduit(name, "host bypass start-up: a short blob"))?,
    );
    let group = format!("amnet-{pid}-{their_nonce:x}-h{}", hosts.host_of(me)?);
    let lsize = u32::try_from(peers.len()).unwrap_or(u32::MAX);
    // The host's first rank makes the group's control block; the job meets over the network
    // before anyone opens it. A failure to make it travels in that meeting, so that every
    // rank returns an error instead of waiting for a block that never comes.
    let created = if me == first && lsize > 1 {
        Some(SmpConduit::create_group(&group, lsize))
    } else {
        None
    };
    let failed = matches!(created, Some(Err(_)));
    let verdicts = net.exchange(&[u8::from(failed)])?;
    let created = created.transpose()?;
    if let Some(r) = verdicts.iter().position(|v| v.first() != Some(&0)) {
        return Err(Error::conduit(
            name,
            format!("host bypass: rank {r} could not create its host's shared-memory group"),
        ));
    }
    if lsize == 1 {
        return Ok(net);
    }
    let mine = peers
        .iter()
        .position(|&r| r == me)
        .ok_or_else(|| Error::conduit(name, "host bypass: this rank is not on its own host"))?;
    let group = SmpConduit::join_group(
        &group,
        u32::try_from(mine).unwrap_or(u32::MAX),
        lsize,
        created,
        boot_timeout,
    )?;
    let mut local_of = vec![REMOTE; net.size() as usize];
    for (i, &r) in peers.iter().enumerate() {
        local_of[r as usize] = u32::try_from(i).unwrap_or(REMOTE);
    }
    Ok(Box::new(Bypass {
        net,
        group,
        peers,
        local_of,
        since_local: AtomicU32::new(0),
        since_net: AtomicU32::new(0),
    }))
}

impl Bypass {
    /// `rank`'s index in this host's group, when it is on this host.
    #[inline(always)]
    fn local(&self, rank: Rank) -> Option<Rank> {
        match self.local_of.get(rank as usize) {
            Some(&l) if l != REMOTE => Some(l),
            _ => None,
        }
    }
}

impl Conduit for Bypass {
    fn name(&self) -> &'static str {
        self.net.name()
    }
    fn rank(&self) -> Rank {
        self.net.rank()
    }
    fn size(&self) -> u32 {
        self.net.size()
    }
    fn max_medium(&self) -> usize {
        self.net.max_medium().min(self.group.max_medium())
    }
    fn put_chunk(&self) -> usize {
        self.net.put_chunk()
    }
    // The group holds every rank of this host and counts the CPUs they share (the union of
    // their affinity masks), which the network conduit, judging from one rank, cannot.
    fn oversubscribed(&self) -> bool {
        self.group.oversubscribed()
    }
    fn local_ranks(&self) -> u32 {
        self.group.size()
    }
    fn host_cores(&self) -> u32 {
        self.group.host_cores()
    }
    fn keep_awake(&self) -> bool {
        self.net.keep_awake() || self.group.keep_awake()
    }
    fn idle_wait(&self, max: Duration) {
        // A message through the rings does not wake a wait on the network: the wait is short,
        // and the caller's next poll reads the rings.
        self.net.idle_wait(max.min(Duration::from_micros(200)));
    }
    fn exchange(&self, blob: &[u8]) -> Result<Vec<Vec<u8>>> {
        self.net.exchange(blob)
    }
    fn attach_segment(&self, len: usize, lens: &[usize]) -> Result<LocalSegment> {
        let local: Vec<usize> = self.peers.iter().map(|&r| lens[r as usize]).collect();
        let seg = self.group.attach_segment(len, &local)?;
        // SAFETY: the group keeps the segment mapped for its life, which is longer than the
        // network conduit's (`net` is dropped first), page-aligned (a shared-memory object).
        unsafe { self.net.attach_segment_in(seg, lens)? };
        Ok(seg)
    }
    #[inline]
    fn try_send(&self, dest: Rank, msg: &OutMsg<'_>) -> Result<bool> {
        match self.local(dest) {
            Some(l) => self.group.try_send(l, msg),
            None => self.net.try_send(dest, msg),
        }
    }
    unsafe fn try_send_held(&self, dest: Rank, msg: &OutMsg<'_>) -> Result<bool> {
        match self.local(dest) {
            // SAFETY: forwarded contract.
            Some(l) => unsafe { self.group.try_send_held(l, msg) },
            // SAFETY: forwarded contract.
            None => unsafe { self.net.try_send_held(dest, msg) },
        }
    }
    fn release_held(&self, dest: Rank, payload: &[u8]) {
        match self.local(dest) {
            Some(l) => self.group.release_held(l, payload),
            None => self.net.release_held(dest, payload),
        }
    }
    fn held_pending(&self, dest: Rank, payload: &[u8]) -> bool {
        match self.local(dest) {
            Some(l) => self.group.held_pending(l, payload),
            None => self.net.held_pending(dest, payload),
        }
    }
    fn prepare_medium(&self, dest: Rank, is_reply: bool, max_len: usize) -> Option<PreparedSlot> {
        match self.local(dest) {
            Some(l) => self.group.prepare_medium(l, is_reply, max_len),
            None => self.net.prepare_medium(dest, is_reply, max_len),
        }
    }
    unsafe fn commit_medium(
        &self,
        dest: Rank,
        slot: &PreparedSlot,
        is_reply: bool,
        handler: u8,
        args: &[u32],
        len: usize,
    ) {
        match self.local(dest) {
            // SAFETY: forwarded contract (the slot came from the same conduit: routing by
            // `dest` is the same for both calls).
            Some(l) => unsafe {
                self.group
                    .commit_medium(l, slot, is_reply, handler, args, len);
            },
            // SAFETY: as above.
            None => unsafe {
                self.net
                    .commit_medium(dest, slot, is_reply, handler, args, len);
            },
        }
    }
    unsafe fn cancel_medium(&self, dest: Rank, slot: &PreparedSlot) {
        match self.local(dest) {
            // SAFETY: forwarded contract, routed as `prepare_medium` was.
            Some(l) => unsafe { self.group.cancel_medium(l, slot) },
            // SAFETY: as above.
            None => unsafe { self.net.cancel_medium(dest, slot) },
        }
    }
    fn poll(&self, replies_only: bool, sink: &mut dyn FnMut(&InMsg<'_>) -> bool) -> Result<usize> {
        let mut go_on = true;
        let peers = &self.peers;
        let n = self.group.poll(replies_only, &mut |m| {
            let m = InMsg {
                src: peers[m.src as usize],
                ..*m
            };
            go_on = sink(&m);
            go_on
        })?;
        let quiet = if n > 0 {
            0
        } else {
            self.since_local.load(Ordering::Relaxed).saturating_add(1)
        };
        self.since_local.store(quiet, Ordering::Relaxed);
        if !go_on {
            return Ok(n);
        }
        let skipped = self.since_net.load(Ordering::Relaxed);
        if quiet <= LOCAL_QUIET && skipped < NET_EVERY {
            self.since_net.store(skipped + 1, Ordering::Relaxed);
            return Ok(n);
        }
        self.since_net.store(0, Ordering::Relaxed);
        Ok(n + self.net.poll(replies_only, sink)?)
    }
    fn peer_segment(&self, rank: Rank) -> Option<*mut u8> {
        self.group.peer_segment(self.local(rank)?)
    }
    fn host_scratch(&self, rank: Rank) -> Option<std::ptr::NonNull<u8>> {
        self.group.host_scratch(self.local(rank)?)
    }
    fn native_rma(&self) -> Option<Arc<dyn NativeRma>> {
        self.net.native_rma()
    }
    fn native_atomics(&self) -> Option<Arc<dyn amnet_core::NativeAtomics>> {
        self.net.native_atomics()
    }
    fn counters(&self) -> Vec<(&'static str, u64)> {
        self.net.counters()
    }
    fn exit_word(&self) -> Option<&std::sync::atomic::AtomicU64> {
        self.net.exit_word()
    }
    fn exit_requested(&self) -> Option<i32> {
        self.net.exit_requested()
    }
    fn request_exit(&self, code: i32) -> i32 {
        self.net.request_exit(code)
    }
    fn terminate(&self, code: i32) -> ! {
        self.net.terminate(code)
    }
    fn is_process_mode(&self) -> bool {
        self.net.is_process_mode()
    }
    fn at_process_exit(&self, status: i32) {
        self.net.at_process_exit(status);
    }
}
