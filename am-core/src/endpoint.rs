//! The endpoint: one rank's view of the job, and the client-facing AM API.

use std::cell::{Cell, RefCell};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use crate::backoff::Backoff;
use crate::barrier::BarrierState;
use crate::conduit::{Category, Conduit, InMsg, LocalSegment, NativeRma, OutMsg, MAX_ARGS};
use crate::config::{vars, Source};
use crate::handler::{HandlerFn, HandlerTable, Token, FIRST_CLIENT_HANDLER};
use crate::rma::OpState;
use crate::stats::{Ctr, StatBlock, Stats};
use crate::{Error, Rank, Result};

/// The core's settings in force for one endpoint, resolved from its [`Source`] (values set in
/// code, then the environment, then the defaults) when the endpoint is created.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct EndpointConfig {
    /// Use the conduit's native put/get when it has one (`AMNET_RMA=native`, the default) or
    /// always the AM-based reference path (`AMNET_RMA=am`).
    pub rma_native: bool,
    /// Print statistics at exit (`AMNET_STATS=1`).
    pub stats_at_exit: bool,
    /// Print the configuration at attach on rank 0 (`AMNET_VERBOSE=1`).
    pub verbose: bool,
    /// Idle polls a wait spins before it starts yielding (`AMNET_SPIN`, default 2000, or 16
    /// when the host is oversubscribed).
    pub spin: u32,
    /// `AMNET_SPIN` was given (in code or the environment): the spin stays as given when the
    /// rank declares more polling threads (`Endpoint::declare_threads`).
    pub spin_given: bool,
    /// More ranks run on this host than it has cores (`Conduit::oversubscribed`).
    pub oversubscribed: bool,
    /// Start a progress thread at attach (`AMNET_PROGRESS_THREAD=1`).
    pub progress_thread: bool,
    /// Run the endpoint barrier on flags in the host scratch where every rank shares this
    /// host (`AMNET_BARRIER=flags`, the default), or always over active messages (`am`).
    pub barrier_flags: bool,
}

impl EndpointConfig {
    /// Resolve the core's settings from `src`; `oversubscribed` as the conduit reports it.
    pub fn resolve(src: &Source, oversubscribed: bool) -> Result<Self> {
        let rma_native = src.choice(&vars::RMA)? != Some("am");
        let given = src.count_u32(&vars::SPIN)?;
        let spin = given.unwrap_or(if oversubscribed { 16 } else { 2000 });
        Ok(EndpointConfig {
            rma_native,
            stats_at_exit: src.flag(&vars::STATS)?.unwrap_or(false),
            verbose: src.flag(&vars::VERBOSE)?.unwrap_or(false),
            spin,
            spin_given: given.is_some(),
            oversubscribed,
            progress_thread: src.flag(&vars::PROGRESS_THREAD)?.unwrap_or(false),
            barrier_flags: src.choice(&vars::BARRIER)? != Some("am"),
        })
    }
}

#[derive(Clone, Copy)]
pub(crate) struct SendPtr(pub(crate) *mut u8);
// SAFETY: a segment base address; the memory it names is shared by design and accessed only
// through bounds-checked copies and atomic operations.
unsafe impl Send for SendPtr {}
// SAFETY: as above.
unsafe impl Sync for SendPtr {}

pub(crate) struct Attached {
    /// Every index's handler: set at attach, or later, once, by `register_handler`.
    handlers: Vec<OnceLock<Box<HandlerFn>>>,
    pub(crate) seg: LocalSegment,
    pub(crate) seg_lens: Vec<usize>,
    pub(crate) peers: Vec<Option<SendPtr>>,
    /// The conduit's native put/get, for the ranks `peers` does not map.
    pub(crate) native: Option<Arc<dyn NativeRma>>,
    /// The conduit's native atomics, under the same conditions as `native`.
    pub(crate) native_atomics: Option<Arc<dyn crate::NativeAtomics>>,
    pub(crate) max_medium: usize,
    /// Bytes per Long request of an AM-path put ([`Conduit::put_chunk`]).
    pub(crate) put_chunk: usize,
    /// The AM-path put and get messages awaiting their replies.
    pub(crate) pending: crate::rma::Pending,
    /// Which ranks share a host (from the attach exchange).
    hosts: crate::host::HostMap,
    size: u32,
}

impl Attached {
    #[inline]
    pub(crate) fn check_client_handler(&self, index: u8) -> Result<()> {
        if index == 0 {
            return Err(Error::HandlerZero);
        }
        if index < FIRST_CLIENT_HANDLER {
            return Err(Error::ReservedHandler { index });
        }
        if self.handlers[usize::from(index)].get().is_none() {
            return Err(Error::UnregisteredHandler { index });
        }
        Ok(())
    }

    #[inline]
    pub(crate) fn check_rank(&self, rank: Rank) -> Result<()> {
        if rank >= self.size {
            return Err(Error::BadRank {
                rank,
                size: self.size,
            });
        }
        Ok(())
    }

    #[inline]
    pub(crate) fn check_range(&self, rank: Rank, offset: u64, len: usize) -> Result<()> {
        self.check_rank(rank)?;
        let seg_len = self.seg_lens[rank as usize];
        let end = offset.checked_add(len as u64);
        match end {
            Some(end) if end <= seg_len as u64 => Ok(()),
            _ => Err(Error::OutOfSegment {
                rank,
                offset,
                len,
                seg_len,
            }),
        }
    }

    #[inline]
    pub(crate) fn check_payload(
        &self,
        dest: Rank,
        category: Category,
        len: usize,
        long_offset: u64,
    ) -> Result<()> {
        match category {
            Category::Short => Ok(()),
            Category::Medium if len > self.max_medium => Err(Error::PayloadTooLarge {
                category: "Medium",
                len,
                max: self.max_medium,
            }),
            Category::Medium => Ok(()),
            Category::Long => {
                self.check_rank(dest)?;
                let max = self.seg_lens[dest as usize];
                if len > max {
                    return Err(Error::PayloadTooLarge {
                        category: "Long",
                        len,
                        max,
                    });
                }
                self.check_range(dest, long_offset, len)
            }
        }
    }
}

pub(crate) struct Inner {
    pub(crate) id: u64,
    pub(crate) conduit: Box<dyn Conduit>,
    pub(crate) rank: Rank,
    pub(crate) size: u32,
    pub(crate) cfg: EndpointConfig,
    /// Where this endpoint's settings come from (layers read theirs here too).
    pub(crate) source: Source,
    attached: OnceLock<Attached>,
    attach_started: AtomicBool,
    pub(crate) barrier: Mutex<BarrierState>,
    /// Whether `barrier`'s phase is not idle (written under its lock, read without it).
    pub(crate) barrier_busy: AtomicBool,
    /// The barrier's algorithm: flags in the host scratch where every rank shares this host,
    /// hierarchical where some hosts' ranks do, else messages (chosen at the first barrier).
    pub(crate) barrier_mode: OnceLock<crate::barrier::Mode>,
    stat_blocks: Mutex<Vec<Arc<StatBlock>>>,
    stats_printed: AtomicBool,
    pub(crate) layer: crate::layer::LayerSlots,
    /// The conduit's exit word ([`Conduit::exit_word`]), or null.
    exit_word: ExitWord,
    /// Polling threads per rank, as declared (`declare_threads`).
    threads: std::sync::atomic::AtomicU32,
    /// The cores this host's ranks may run on together (`Conduit::host_cores`).
    cores: u32,
    /// The progress thread, when one runs.
    pub(crate) progress: crate::progress::Progress,
}

impl Drop for Inner {
    fn drop(&mut self) {
        // Before the conduit goes: the thread polls it.
        self.progress.shut_down();
    }
}

/// The address of a conduit's exit word, read after every poll.
struct ExitWord(*const AtomicU64);

// SAFETY: the pointer addresses an atomic inside the conduit that `Inner` owns (or null); it
// is only read atomically, which any thread may do, and `Inner` drops the conduit last.
unsafe impl Send for ExitWord {}
// SAFETY: as above.
unsafe impl Sync for ExitWord {}

/// One rank's endpoint: the whole AM API. Cheap to clone; clones share the rank, so a rank may
/// be driven from several threads at once (see the spec for what is thread-safe).
#[derive(Clone)]
pub struct Endpoint {
    pub(crate) inner: Arc<Inner>,
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        // The last client reference while the progress thread holds the other: stop and join
        // the thread here (cheap otherwise: one count and, with a thread, two loads).
        let strong = Arc::strong_count(&self.inner);
        if strong == 2 {
            self.inner.progress.client_dropping(strong);
        }
    }
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint")
            .field("conduit", &self.inner.conduit.name())
            .field("rank", &self.inner.rank)
            .field("size", &self.inner.size)
            .field("attached", &self.inner.attached.get().is_some())
            .finish()
    }
}

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// Per-thread state for one endpoint.
struct ThreadState {
    ep_id: u64,
    stats: Arc<StatBlock>,
    nbi: Arc<OpState>,
    region: Option<Arc<OpState>>,
}

thread_local! {
    /// Index of the handler running on this thread (0: none).
    static HANDLER: Cell<u8> = const { Cell::new(0) };
    /// The last (endpoint id, stat block) this thread used: the fast path of `stats_block`.
    static LAST_BLOCK: Cell<(u64, *const StatBlock)> = const { Cell::new((0, std::ptr::null())) };
    static THREAD_STATE: RefCell<Vec<ThreadState>> = const { RefCell::new(Vec::new()) };
}

/// The handler index running on this thread, or 0.
#[inline]
pub(crate) fn current_handler() -> u8 {
    HANDLER.with(|h| h.get())
}

#[inline]
pub(crate) fn not_in_handler(op: &'static str) -> Result<()> {
    let h = current_handler();
    if h != 0 {
        return Err(Error::InHandler { op, handler: h });
    }
    Ok(())
}

static PROCESS_ENDPOINT: OnceLock<Arc<Inner>> = OnceLock::new();

#[cfg(all(target_os = "linux", target_env = "gnu"))]
extern "C" {
    fn on_exit(
        func: extern "C" fn(libc::c_int, *mut libc::c_void),
        arg: *mut libc::c_void,
    ) -> libc::c_int;
}

#[cfg(all(target_os = "linux", target_env = "gnu"))]
extern "C" fn exit_hook(status: libc::c_int, _arg: *mut libc::c_void) {
    at_process_exit(status);
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
extern "C" fn exit_hook_plain() {
    at_process_exit(0);
}

/// The one process-exit hook: publish the job-wide exit with the process's status, print the
/// statistics, then let the conduit leave its transport ([`Conduit::at_process_exit`]).
fn at_process_exit(status: i32) {
    if let Some(inner) = PROCESS_ENDPOINT.get() {
        inner.conduit.request_exit(status);
        inner.print_stats_once();
        inner.conduit.at_process_exit(status);
    }
}

fn install_exit_hook(inner: &Arc<Inner>) {
    if PROCESS_ENDPOINT.set(inner.clone()).is_err() {
        return;
    }
    // SAFETY: registering a process-exit callback; the callback only touches the endpoint kept
    // alive for the life of the process by PROCESS_ENDPOINT.
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    unsafe {
        on_exit(exit_hook, std::ptr::null_mut());
    }
    // SAFETY: as above.
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    unsafe {
        libc::atexit(exit_hook_plain);
    }
}

impl Inner {
    fn print_stats_once(&self) {
        if self.cfg.stats_at_exit && !self.stats_printed.swap(true, Ordering::AcqRel) {
            let s = self.stats_sum();
            let mut text = s.report(self.rank);
            let c = self.conduit.counters();
            if !c.is_empty() {
                let list: Vec<String> = c.iter().map(|(k, v)| format!("{k} {v}")).collect();
                text += &format!(
                    "amnet stats rank {}: {} {}\n",
                    self.rank,
                    self.conduit.name(),
                    list.join(" ")
                );
            }
            // One write: the reports of ranks that exit together do not interleave mid-line.
            crate::diag::emit(&text);
        }
    }

    fn stats_sum(&self) -> Stats {
        let mut s = Stats::default();
        for b in self
            .stat_blocks
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
        {
            s.add_block(b);
        }
        s
    }
}

/// Split a 64-bit value into (low, high) 32-bit halves for AM arguments.
#[inline]
#[allow(clippy::cast_possible_truncation)]
pub(crate) fn split64(v: u64) -> (u32, u32) {
    (v as u32, (v >> 32) as u32)
}

/// An offset already checked against a segment length (a `usize`), so the cast is exact.
#[inline(always)]
#[allow(clippy::cast_possible_truncation)]
pub(crate) fn seg_off(o: u64) -> usize {
    o as usize
}

/// Join (low, high) halves.
#[inline]
pub(crate) fn join64(lo: u32, hi: u32) -> u64 {
    u64::from(lo) | (u64::from(hi) << 32)
}

impl Endpoint {
    /// Wrap a conduit, with the settings of the environment. In process mode this installs the
    /// exit hook that turns a return from `main` into a job-wide exit with that status.
    pub fn new(conduit: Box<dyn Conduit>) -> Result<Self> {
        Self::with_source(conduit, Source::env())
    }

    /// [`Endpoint::new`] with the settings of `source` (values set in code win over the
    /// environment; see [`crate::config`]).
    pub fn with_source(conduit: Box<dyn Conduit>, source: Source) -> Result<Self> {
        let cfg = EndpointConfig::resolve(&source, conduit.oversubscribed())?;
        let conduit_cores = conduit.host_cores().max(1);
        let exit_word = ExitWord(
            conduit
                .exit_word()
                .map_or(std::ptr::null(), std::ptr::from_ref),
        );
        let inner = Arc::new(Inner {
            id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
            rank: conduit.rank(),
            size: conduit.size(),
            conduit,
            cfg,
            source,
            attached: OnceLock::new(),
            attach_started: AtomicBool::new(false),
            barrier: Mutex::new(BarrierState::new()),
            barrier_busy: AtomicBool::new(false),
            barrier_mode: OnceLock::new(),
            stat_blocks: Mutex::new(Vec::new()),
            stats_printed: AtomicBool::new(false),
            layer: crate::layer::LayerSlots::new(),
            exit_word,
            threads: std::sync::atomic::AtomicU32::new(1),
            cores: conduit_cores,
            progress: crate::progress::Progress::default(),
        });
        if inner.conduit.is_process_mode() {
            install_exit_hook(&inner);
        }
        Ok(Endpoint { inner })
    }

    /// This rank's number, `0..size()`.
    #[inline]
    pub fn rank(&self) -> Rank {
        self.inner.rank
    }

    /// Number of ranks in the job.
    #[inline]
    pub fn size(&self) -> u32 {
        self.inner.size
    }

    /// The conduit's name.
    pub fn conduit_name(&self) -> &'static str {
        self.inner.conduit.name()
    }

    /// The core's settings in force.
    pub fn config(&self) -> &EndpointConfig {
        &self.inner.cfg
    }

    /// Where this endpoint's settings come from: layers above the core (the collectives) read
    /// their own variables here, so that values set in code reach them too.
    pub fn config_source(&self) -> &Source {
        &self.inner.source
    }

    /// True while the conduit asks idle waits to stay awake: a peer drives work here that
    /// progresses only inside this rank's polls (see [`Conduit::keep_awake`]); what
    /// [`Backoff::snooze`] asks.
    pub fn keep_awake(&self) -> bool {
        self.inner.conduit.keep_awake()
    }

    /// `Error::Usage` (naming `op`) when the calling thread holds a prepared message it has
    /// not committed or cancelled (spec/core.md §3a): what a wait would wait for may be
    /// queued behind it. The core's waits call it before they start waiting; layers with
    /// wait loops of their own call it too.
    pub fn check_may_wait(&self, op: &'static str) -> Result<()> {
        crate::npam::check_may_wait(op)
    }

    /// A fresh idle back-off with this endpoint's settings (spec/core.md §5), for layers with
    /// wait loops of their own: `reset` after progress, `snooze(|| ep.keep_awake())` after an
    /// idle poll. A host is oversubscribed when its ranks, times the polling threads each
    /// declared ([`Endpoint::declare_threads`]), outnumber its cores.
    pub fn backoff(&self) -> Backoff {
        let cfg = &self.inner.cfg;
        let threads = self.inner.threads.load(Ordering::Relaxed);
        if threads <= 1 {
            return Backoff::new(cfg.spin, !cfg.oversubscribed);
        }
        let over = cfg.oversubscribed
            || u64::from(self.inner.conduit.local_ranks()) * u64::from(threads)
                > u64::from(self.inner.cores);
        let spin = if over && !cfg.spin_given {
            16
        } else {
            cfg.spin
        };
        Backoff::new(spin, !over)
    }

    /// Declare that `threads` threads of this rank wait in amnet calls at once (image threads
    /// of the collectives, say): the idle policy then counts them when it decides whether the
    /// host is oversubscribed (spec/core.md §5). At least 1; the largest declaration wins.
    pub fn declare_threads(&self, threads: u32) {
        self.inner
            .threads
            .fetch_max(threads.max(1), Ordering::Relaxed);
    }

    /// Largest Medium payload.
    pub fn max_medium(&self) -> usize {
        self.inner.conduit.max_medium()
    }

    /// Largest Long payload to `rank`: its whole segment.
    pub fn max_long(&self, rank: Rank) -> Result<usize> {
        let att = self.attached_for("max_long")?;
        att.check_rank(rank)?;
        Ok(att.seg_lens[rank as usize])
    }

    /// True once `attach` has completed.
    pub fn is_attached(&self) -> bool {
        self.inner.attached.get().is_some()
    }

    #[inline]
    pub(crate) fn attached_for(&self, op: &'static str) -> Result<&Attached> {
        // Not `ok_or`: the error would be built and dropped on every call that succeeds.
        match self.inner.attached.get() {
            Some(att) => Ok(att),
            None => Err(Error::NotAttached { op }),
        }
    }

    /// Collective: register `handlers` and a segment of `seg_len` bytes on every rank. All ranks
    /// must register the same handler indices; a rank's segment may have any size (0 included).
    pub fn attach(&self, handlers: HandlerTable, seg_len: usize) -> Result<()> {
        not_in_handler("attach")?;
        if self.inner.attach_started.swap(true, Ordering::AcqRel) {
            return Err(Error::AlreadyAttached);
        }
        let client_mask = handlers.mask();
        let mut table = handlers;
        crate::rma::register_handlers(&mut table)?;
        crate::atomic::register_handlers(&mut table)?;
        crate::vis::register_handlers(&mut table)?;
        crate::barrier::register_handlers(&mut table)?;
        crate::layer::register_handlers(&mut table)?;

        // The segment length, the client handler mask (32 bytes), the host key and whether
        // this rank maps its host peers' host scratch.
        const KEY_END: usize = 40 + crate::host::HOST_KEY_BYTES;
        const BLOB: usize = KEY_END + 1;
        let mut blob = Vec::with_capacity(BLOB);
        blob.extend_from_slice(&(seg_len as u64).to_le_bytes());
        blob.extend_from_slice(&client_mask);
        blob.extend_from_slice(&crate::host::host_key());
        blob.push(u8::from(
            self.inner.conduit.host_scratch(self.rank()).is_some(),
        ));
        let blobs = self.inner.conduit.exchange(&blob)?;
        let mut lens = Vec::with_capacity(blobs.len());
        let mut keys = Vec::with_capacity(blobs.len());
        let mut mapped = Vec::with_capacity(blobs.len());
        let mut diffs = Vec::new();
        for (r, b) in blobs.iter().enumerate() {
            if b.len() != BLOB {
                return Err(Error::conduit(
                    self.inner.conduit.name(),
                    format!(
                        "attach exchange: rank {r} sent {} bytes, expected {BLOB}",
                        b.len()
                    ),
                ));
            }
            let mut key = [0u8; crate::host::HOST_KEY_BYTES];
            key.copy_from_slice(&b[40..KEY_END]);
            keys.push(key);
            mapped.push(b[KEY_END] != 0);
            let mut l = [0u8; 8];
            l.copy_from_slice(&b[..8]);
            let len = usize::try_from(u64::from_le_bytes(l)).map_err(|_| {
                Error::Config(format!("rank {r} asked for a segment larger than memory"))
            })?;
            lens.push(len);
            if b[8..40] != blobs[0][8..40] {
                let idx: Vec<usize> = (0..256)
                    .filter(|&i| (b[8 + i / 8] ^ blobs[0][8 + i / 8]) & (1 << (i % 8)) != 0)
                    .collect();
                diffs.push(format!("rank {r} differs from rank 0 at handlers {idx:?}"));
            }
        }
        if !diffs.is_empty() {
            return Err(Error::Mismatch {
                what: "attach (handler tables)",
                detail: diffs.join("; "),
            });
        }
        let seg = self.inner.conduit.attach_segment(seg_len, &lens)?;
        let peers: Vec<Option<SendPtr>> = (0..self.size())
            .map(|r| {
                if self.inner.cfg.rma_native {
                    self.inner.conduit.peer_segment(r).map(SendPtr)
                } else {
                    None
                }
            })
            .collect();
        let direct = peers.iter().all(Option::is_some);
        let native_rma = if self.inner.cfg.rma_native && !direct {
            self.inner.conduit.native_rma()
        } else {
            None
        };
        let native_atomics = if native_rma.is_some() {
            self.inner.conduit.native_atomics()
        } else {
            None
        };
        // This rank's own segment is always reachable by a copy: where the conduit neither
        // maps it as a peer nor brings native operations (udp), put/get/atomics to oneself
        // become copies instead of active messages to oneself. (With native operations the
        // own segment stays on that path: MPI orders local stores into a window only with
        // its own synchronization.)
        let rma = match (peers.iter().any(Option::is_some), &native_rma) {
            (_, Some(n)) => format!("native ({})", n.describe()),
            (true, None) => "native".to_string(),
            (false, None) => "am".to_string(),
        };
        let mut peers = peers;
        let me = self.rank() as usize;
        if self.inner.cfg.rma_native && native_rma.is_none() && peers[me].is_none() {
            peers[me] = Some(SendPtr(seg.base));
        }
        let hosts = crate::host::HostMap::from_keys(&keys).with_mapped(&mapped);
        let host_lines = if self.inner.cfg.verbose && self.rank() == 0 {
            hosts.describe()
        } else {
            String::new()
        };
        let att = Attached {
            handlers: table
                .entries
                .into_iter()
                .map(|h| {
                    let cell = OnceLock::new();
                    if let Some(h) = h {
                        let _ = cell.set(h);
                    }
                    cell
                })
                .collect(),
            seg,
            seg_lens: lens,
            peers,
            native: native_rma,
            native_atomics,
            max_medium: self.inner.conduit.max_medium(),
            put_chunk: self.inner.conduit.put_chunk().max(1),
            pending: crate::rma::Pending::default(),
            hosts,
            size: self.size(),
        };
        if self.inner.attached.set(att).is_err() {
            return Err(Error::AlreadyAttached);
        }
        if self.inner.cfg.verbose && self.rank() == 0 {
            let mut text = format!(
                "amnet: conduit {} ranks {} segment {} B max medium {} rma {} spin {}\n",
                self.conduit_name(),
                self.size(),
                seg_len,
                self.max_medium(),
                rma,
                self.inner.cfg.spin
            );
            text += &host_lines;
            text += &self.inner.source.dump(
                self.conduit_name(),
                &[(&vars::SPIN, self.inner.cfg.spin.to_string())],
            );
            crate::diag::emit(&text);
        }
        if self.inner.cfg.progress_thread {
            self.start_progress_thread()?;
        }
        Ok(())
    }

    /// Which ranks of the job share a host with which (spec/core.md §7d): known from attach on.
    /// Errors: `NotAttached`.
    pub fn host_map(&self) -> Result<&crate::host::HostMap> {
        Ok(&self.attached_for("host_map")?.hosts)
    }

    /// The ranks on this rank's host, ascending, this rank among them (GASNet-EX's
    /// `gex_System_QueryHostInfo`). Errors: `NotAttached`.
    pub fn host_peers(&self) -> Result<&[Rank]> {
        let hosts = &self.attached_for("host_peers")?.hosts;
        hosts.ranks_on(hosts.host_of(self.rank())?)
    }

    /// This rank's index in [`host_peers`](Endpoint::host_peers). Errors: `NotAttached`.
    pub fn host_rank(&self) -> Result<u32> {
        let peers = self.host_peers()?;
        let me = self.rank();
        peers
            .iter()
            .position(|&r| r == me)
            .and_then(|i| u32::try_from(i).ok())
            .ok_or_else(|| Error::Config(format!("rank {me} is missing from its own host")))
    }

    /// Register client handler `index` (128..=255) after attach, as GASNet-EX's
    /// `gex_EP_RegisterHandlers` allows. Not collective, but every rank must register the same
    /// index before any rank sends to it (register, then barrier): a message that reaches a
    /// rank which has not registered its index yet is dropped with a diagnostic. Errors:
    /// `NotAttached` (before attach, register in the `HandlerTable`), `HandlerZero`,
    /// `ReservedHandler`, `DuplicateHandler` (an index registered already, at attach or
    /// since; a handler is never replaced).
    pub fn register_handler<F>(&self, index: u8, f: F) -> Result<()>
    where
        F: Fn(&mut Token<'_>, &[u32], &[u8]) + Send + Sync + 'static,
    {
        let att = self.attached_for("register_handler")?;
        if index == 0 {
            return Err(Error::HandlerZero);
        }
        if index < FIRST_CLIENT_HANDLER {
            return Err(Error::ReservedHandler { index });
        }
        att.handlers[usize::from(index)]
            .set(Box::new(f))
            .map_err(|_| Error::DuplicateHandler { index })
    }

    // ----- statistics -------------------------------------------------------------------

    /// This thread's counter block for this endpoint.
    #[inline]
    pub(crate) fn stats_block(&self) -> &StatBlock {
        let (id, p) = LAST_BLOCK.with(|c| c.get());
        if id == self.inner.id {
            // SAFETY: the block behind `p` is kept alive by an Arc in this thread's
            // THREAD_STATE (and in the endpoint's registry) for as long as the thread lives.
            return unsafe { &*p };
        }
        self.stats_block_slow()
    }

    #[cold]
    fn stats_block_slow(&self) -> &StatBlock {
        let p = self.with_thread_state(|ts| Arc::as_ptr(ts.stats));
        LAST_BLOCK.with(|c| c.set((self.inner.id, p)));
        // SAFETY: as in `stats_block`: the Arc lives in THREAD_STATE for the thread's life.
        unsafe { &*p }
    }

    pub(crate) fn with_thread_state<R>(&self, f: impl FnOnce(&mut ThreadStateView<'_>) -> R) -> R {
        THREAD_STATE.with(|v| {
            let mut v = v.borrow_mut();
            let i = match v.iter().position(|t| t.ep_id == self.inner.id) {
                Some(i) => i,
                None => {
                    let b = Arc::new(StatBlock::new());
                    self.inner
                        .stat_blocks
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push(b.clone());
                    v.push(ThreadState {
                        ep_id: self.inner.id,
                        stats: b,
                        nbi: Arc::new(OpState::new(self.inner.id)),
                        region: None,
                    });
                    v.len() - 1
                }
            };
            let t = &mut v[i];
            let mut view = ThreadStateView {
                stats: &t.stats,
                nbi: &t.nbi,
                region: &mut t.region,
            };
            f(&mut view)
        })
    }

    /// A snapshot of this rank's counters, summed over every thread that used it.
    pub fn stats(&self) -> Stats {
        self.inner.stats_sum()
    }

    /// A snapshot of the conduit's own counters as (name, value) pairs: on udp the
    /// datagrams sent and received, retransmits, timeouts, duplicates dropped, acks,
    /// heartbeats, decode errors and injected faults (see `spec/udp.md`); empty on conduits
    /// that keep none. The names are stable; they are also printed at exit with
    /// `AMNET_STATS=1`.
    pub fn conduit_stats(&self) -> Vec<(&'static str, u64)> {
        self.inner.conduit.counters()
    }

    #[inline]
    fn count_sent(&self, msg: &OutMsg<'_>) {
        let base = if msg.is_reply {
            Ctr::RepShort
        } else {
            Ctr::ReqShort
        } as usize;
        count(self.stats_block(), base, msg.category, msg.payload.len());
    }

    /// Counts a Medium request (or reply) committed from a conduit's prepared slot (`npam`).
    pub(crate) fn count_prepared_sent(&self, reply: bool, len: usize) {
        let base = if reply { Ctr::RepShort } else { Ctr::ReqShort } as usize;
        count(self.stats_block(), base, Category::Medium, len);
    }

    #[inline]
    fn count_received(&self, b: &StatBlock, msg: &InMsg<'_>) {
        b.add(Ctr::HandlerCalls, 1);
        let base = if msg.is_reply {
            Ctr::RecvRepShort
        } else {
            Ctr::RecvReqShort
        } as usize;
        count(b, base, msg.category, msg.payload.len());
    }

    // ----- sending ------------------------------------------------------------------------

    #[inline]
    pub(crate) fn check_request(
        &self,
        op: &'static str,
        dest: Rank,
        handler: u8,
        args: &[u32],
    ) -> Result<&Attached> {
        let att = self.attached_for(op)?;
        not_in_handler(op)?;
        att.check_client_handler(handler)?;
        if args.len() > MAX_ARGS {
            return Err(Error::TooManyArgs {
                given: args.len(),
                max: MAX_ARGS,
            });
        }
        att.check_rank(dest)?;
        Ok(att)
    }

    /// The checks of a client request of `category` (`check_request`, then the payload
    /// against `max_medium` or the target's segment at `long_offset`) and the message they
    /// clear.
    #[inline]
    pub(crate) fn checked_request<'a>(
        &self,
        op: &'static str,
        dest: Rank,
        handler: u8,
        (category, long_offset): (Category, u64),
        args: &'a [u32],
        payload: &'a [u8],
    ) -> Result<OutMsg<'a>> {
        let att = self.check_request(op, dest, handler, args)?;
        if category != Category::Short {
            att.check_payload(dest, category, payload.len(), long_offset)?;
        }
        Ok(OutMsg {
            handler,
            category,
            is_reply: false,
            args,
            payload,
            long_offset,
        })
    }

    /// Send a Short request: `args` only.
    #[inline]
    pub fn request_short(&self, dest: Rank, handler: u8, args: &[u32]) -> Result<()> {
        self.check_request("request_short", dest, handler, args)?;
        self.send_msg(
            dest,
            &OutMsg {
                handler,
                category: Category::Short,
                is_reply: false,
                args,
                payload: &[],
                long_offset: 0,
            },
            false,
        )
    }

    /// Send a Medium request: `args` plus `payload` (at most [`Endpoint::max_medium`] bytes),
    /// delivered to the handler in a library buffer. `payload` may be reused on return.
    #[inline]
    pub fn request_medium(
        &self,
        dest: Rank,
        handler: u8,
        args: &[u32],
        payload: &[u8],
    ) -> Result<()> {
        let msg = self.checked_request(
            "request_medium",
            dest,
            handler,
            (Category::Medium, 0),
            args,
            payload,
        )?;
        self.send_msg(dest, &msg, false)
    }

    /// Send a Long request: `payload` is written at `dest_offset` in `dest`'s segment before the
    /// handler runs there. `payload` may be reused on return.
    #[inline]
    pub fn request_long(
        &self,
        dest: Rank,
        handler: u8,
        args: &[u32],
        payload: &[u8],
        dest_offset: u64,
    ) -> Result<()> {
        let msg = self.checked_request(
            "request_long",
            dest,
            handler,
            (Category::Long, dest_offset),
            args,
            payload,
        )?;
        self.send_msg(dest, &msg, false)
    }

    /// [`request_short`](Self::request_short) with the immediate flag: when the conduit has
    /// no room for the message now (a full ring or send window), returns
    /// [`Error::WouldBlock`] at once instead of polling until there is (GASNet-EX's
    /// `GEX_FLAG_IMMEDIATE`). Nothing was sent then; poll and retry, or do other work.
    #[inline]
    pub fn try_request_short(&self, dest: Rank, handler: u8, args: &[u32]) -> Result<()> {
        self.check_request("try_request_short", dest, handler, args)?;
        self.send_immediate(
            "try_request_short",
            dest,
            &OutMsg {
                handler,
                category: Category::Short,
                is_reply: false,
                args,
                payload: &[],
                long_offset: 0,
            },
        )
    }

    /// [`request_medium`](Self::request_medium) with the immediate flag (see
    /// [`try_request_short`](Self::try_request_short)).
    #[inline]
    pub fn try_request_medium(
        &self,
        dest: Rank,
        handler: u8,
        args: &[u32],
        payload: &[u8],
    ) -> Result<()> {
        const OP: &str = "try_request_medium";
        let msg = self.checked_request(OP, dest, handler, (Category::Medium, 0), args, payload)?;
        self.send_immediate(OP, dest, &msg)
    }

    /// [`request_long`](Self::request_long) with the immediate flag (see
    /// [`try_request_short`](Self::try_request_short)).
    #[inline]
    pub fn try_request_long(
        &self,
        dest: Rank,
        handler: u8,
        args: &[u32],
        payload: &[u8],
        dest_offset: u64,
    ) -> Result<()> {
        const OP: &str = "try_request_long";
        let msg = self.checked_request(
            OP,
            dest,
            handler,
            (Category::Long, dest_offset),
            args,
            payload,
        )?;
        self.send_immediate(OP, dest, &msg)
    }

    /// One attempt to hand a message to the conduit.
    #[inline]
    fn send_immediate(&self, op: &'static str, dest: Rank, msg: &OutMsg<'_>) -> Result<()> {
        if self.inner.conduit.try_send(dest, msg)? {
            self.count_sent(msg);
            return Ok(());
        }
        Err(Error::WouldBlock { op, dest })
    }

    /// Send a library-internal request (no client handler checks).
    pub(crate) fn lib_request(&self, dest: Rank, msg: &OutMsg<'_>) -> Result<()> {
        self.send_msg(dest, msg, false)
    }

    /// Hand a message to the conduit, polling while it has no room.
    #[inline]
    pub(crate) fn send_msg(&self, dest: Rank, msg: &OutMsg<'_>, in_handler: bool) -> Result<()> {
        if self.inner.conduit.try_send(dest, msg)? {
            self.count_sent(msg);
            return Ok(());
        }
        self.send_slow(dest, msg, in_handler)
    }

    #[cold]
    fn send_slow(&self, dest: Rank, msg: &OutMsg<'_>, in_handler: bool) -> Result<()> {
        self.send_retry(in_handler, || self.inner.conduit.try_send(dest, msg))?;
        self.count_sent(msg);
        Ok(())
    }

    /// Retry `attempt` until the conduit takes the message, polling meanwhile.
    fn send_retry(&self, in_handler: bool, attempt: impl Fn() -> Result<bool>) -> Result<()> {
        let mut b = self.backoff();
        loop {
            self.stats_block().add(Ctr::SendStalls, 1);
            // A handler may only reply, and reply handlers never send: polling replies alone
            // from handler context cannot recurse further, and always frees room eventually.
            if self.poll_inner(in_handler)? > 0 {
                b.reset();
            }
            if attempt()? {
                return Ok(());
            }
            b.snooze(|| self.inner.conduit.keep_awake());
        }
    }

    /// [`Endpoint::lib_request`] through [`Conduit::try_send_held`]: the conduit may keep
    /// reading `msg.payload` after this returns.
    ///
    /// # Safety
    /// - The contract of [`Conduit::try_send_held`]: `msg.payload` stays valid and unchanged
    ///   until [`Conduit::release_held`] has been called for it, on every path once this
    ///   returned `Ok`.
    pub(crate) unsafe fn lib_request_held(&self, dest: Rank, msg: &OutMsg<'_>) -> Result<()> {
        // SAFETY: forwarded contract.
        let attempt = || unsafe { self.inner.conduit.try_send_held(dest, msg) };
        if !attempt()? {
            self.send_retry(false, attempt)?;
        }
        self.count_sent(msg);
        Ok(())
    }

    // ----- progress -----------------------------------------------------------------------

    /// Run the handlers of every message that has arrived. Returns how many ran.
    #[inline]
    pub fn poll(&self) -> Result<usize> {
        self.attached_for("poll")?;
        not_in_handler("poll")?;
        self.poll_inner(false)
    }

    pub(crate) fn poll_inner(&self, replies_only: bool) -> Result<usize> {
        self.poll_until(replies_only, None).map(|(n, _)| n)
    }

    /// Poll once. With `cond`, stop delivering as soon as it holds after a handler ran (a
    /// waiter has what it waits for); returns whether it did.
    fn poll_until(
        &self,
        replies_only: bool,
        mut cond: Option<&mut dyn FnMut() -> bool>,
    ) -> Result<(usize, bool)> {
        let inner = &*self.inner;
        let Some(att) = inner.attached.get() else {
            return Err(Error::NotAttached { op: "poll" });
        };
        let block = self.stats_block();
        block.add(Ctr::Polls, 1);
        inner.progress.note_poll();
        let mut met = false;
        let n = inner.conduit.poll(replies_only, &mut |m: &InMsg<'_>| {
            self.count_received(block, m);
            self.dispatch(att, m);
            match cond.as_mut() {
                Some(c) => {
                    met = c();
                    !met
                }
                None => true,
            }
        })?;
        let w = inner.exit_word.0;
        // SAFETY: a non-null exit word lives inside the conduit, which `inner` owns.
        if w.is_null() || unsafe { (*w).load(Ordering::Relaxed) } != 0 {
            // The progress thread leaves the process to the client's threads: it notices the
            // request itself and ends.
            if let Some(code) = inner.conduit.exit_requested() {
                if !crate::progress::on_progress_thread() {
                    self.finish(code);
                }
            }
        }
        if n > 0 && inner.layer.has_progress() {
            inner.layer.run_progress();
        }
        Ok((n, met))
    }

    #[inline]
    fn dispatch(&self, att: &Attached, m: &InMsg<'_>) {
        let Some(h) = att.handlers[usize::from(m.handler)].get() else {
            // Callers check handler indices against their own table. Attach proved the tables
            // equal; a handler registered after attach may have reached the sender's table
            // before this one (the client's rule: register everywhere, then synchronize).
            crate::diag!(
                "amnet rank {}: dropped a message from rank {} for handler {}, which this rank \
                 has not registered (register it on every rank, then barrier, before use)",
                self.rank(),
                m.src,
                m.handler
            );
            return;
        };
        /// Restores the previous handler context even when a handler unwinds (thread-mode
        /// exit, a panic caught by the client).
        struct Restore(u8);
        impl Drop for Restore {
            fn drop(&mut self) {
                HANDLER.with(|c| c.set(self.0));
            }
        }
        let _restore = Restore(HANDLER.with(|c| c.replace(m.handler)));
        let mut tok = Token {
            ep: self,
            att,
            src: m.src,
            handler: m.handler,
            category: m.category,
            is_request: !m.is_reply,
            replied: false,
        };
        h(&mut tok, m.args, m.payload);
    }

    /// Poll until `cond()` holds, backing off while idle (spin, then yield, then sleep).
    ///
    /// `cond` is checked before each poll and after every handler the poll runs, so the wait
    /// ends the moment a handler makes it true. It must be a cheap check of state that handlers
    /// update, and must not call amnet itself (it may run while a message is being delivered).
    pub fn wait_until(&self, mut cond: impl FnMut() -> bool) -> Result<()> {
        self.attached_for("wait_until")?;
        not_in_handler("wait_until")?;
        self.wait_inner(&mut cond)
    }

    pub(crate) fn wait_inner(&self, cond: &mut dyn FnMut() -> bool) -> Result<()> {
        let mut b = self.backoff();
        if cond() {
            return Ok(());
        }
        crate::npam::check_may_wait("wait")?;
        loop {
            if cond() {
                return Ok(());
            }
            match self.poll_until(false, Some(&mut *cond))? {
                (_, true) => return Ok(()),
                (0, _) => b.snooze(|| self.inner.conduit.keep_awake()),
                _ => b.reset(),
            }
        }
    }

    // ----- exit ---------------------------------------------------------------------------

    /// End the whole job with `code`: every rank stops promptly and the launcher exits with the
    /// first code any rank passed to `exit`. Callable from anywhere, handlers included. As with
    /// `std::process::exit`, the operating system keeps only the low 8 bits of the code.
    pub fn exit(&self, code: i32) -> ! {
        let code = self.inner.conduit.request_exit(code);
        self.finish(code)
    }

    fn finish(&self, code: i32) -> ! {
        self.inner.print_stats_once();
        self.inner.conduit.terminate(code)
    }

    /// The job-wide exit code, if some rank has asked the job to end.
    pub fn exit_requested(&self) -> Option<i32> {
        self.inner.conduit.exit_requested()
    }

    // ----- local segment ------------------------------------------------------------------

    /// Length of this rank's segment.
    pub fn segment_len(&self) -> Result<usize> {
        Ok(self.attached_for("segment_len")?.seg.len)
    }

    /// Length of `rank`'s segment.
    pub fn segment_len_of(&self, rank: Rank) -> Result<usize> {
        let att = self.attached_for("segment_len_of")?;
        att.check_rank(rank)?;
        Ok(att.seg_lens[rank as usize])
    }

    /// Base address of this rank's segment. Other ranks may write it at any time (Long
    /// payloads, puts); the client decides who owns which bytes when.
    pub fn segment_ptr(&self) -> Result<*mut u8> {
        Ok(self.attached_for("segment_ptr")?.seg.base)
    }

    /// Copy `buf.len()` bytes from this rank's segment at `offset`.
    pub fn read_local(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        let att = self.attached_for("read_local")?;
        att.check_range(self.rank(), offset, buf.len())?;
        // SAFETY: the range was checked against the segment, which stays mapped for the life
        // of the endpoint; `buf` is a distinct Rust allocation.
        unsafe {
            crate::mem::copy(
                att.seg.base.add(seg_off(offset)),
                buf.as_mut_ptr(),
                buf.len(),
            );
        }
        Ok(())
    }

    /// Copy `data` into this rank's segment at `offset`.
    pub fn write_local(&self, offset: u64, data: &[u8]) -> Result<()> {
        let att = self.attached_for("write_local")?;
        att.check_range(self.rank(), offset, data.len())?;
        // SAFETY: as in `read_local`.
        unsafe {
            crate::mem::copy(data.as_ptr(), att.seg.base.add(seg_off(offset)), data.len());
        }
        Ok(())
    }
}

/// Count one message in the group of five counters at `base` (short, medium, long, medium
/// bytes, long bytes; see `Ctr`).
#[inline(always)]
fn count(b: &StatBlock, base: usize, category: Category, len: usize) {
    let c = usize::from(category.code());
    b.add_at(base + c, 1);
    if c != 0 {
        b.add_at(base + 2 + c, len as u64);
    }
}

/// Borrowed view of this thread's state for one endpoint.
pub(crate) struct ThreadStateView<'a> {
    pub(crate) stats: &'a Arc<StatBlock>,
    pub(crate) nbi: &'a Arc<OpState>,
    pub(crate) region: &'a mut Option<Arc<OpState>>,
}
