//! The smp conduit: per-pair rings in shared memory (or heap, in thread mode).
//!
//! Every rank owns one queue area holding, for each source rank, four rings: requests and
//! replies, each in a small-slot ring (Short, Long headers, small Medium) and a large-slot ring
//! (Medium up to 64 KiB). Senders write into the destination's area; the destination polls its
//! own. Replies travel on rings of their own, so a handler waiting to reply only needs to drain
//! replies, which never send: no deadlock however full the request rings get.
//!
//! The area starts with one cache line holding a counter that senders bump after each push
//! into a large-slot ring. A poll checks the small-slot rings of every peer and this one word;
//! only when the word moved does it visit the large-slot rings. An idle poll thus reads two
//! lines per peer plus one, and the small-message round trip pays nothing for the large rings.
//! The next cache line is the rank's doorbell ([`bell`](crate::bell)): its progress thread
//! sleeps on it, and a sender that pushed into one of the rank's rings wakes it.
//!
//! Long payloads and put/get go straight into the peer's segment, which every rank maps.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use amnet_core::config::{vars, Source};
use amnet_core::{
    Category, Conduit, Error, InMsg, LocalSegment, OutMsg, PreparedSlot, Rank, Result,
};

use crate::bell::Doorbell;
use crate::ctl::{Boot, Ctl, LAUNCHER};
use crate::ring::Ring;
use crate::shm::{unlink, Region};
use crate::wire;

/// Largest Medium payload.
pub const MAX_MEDIUM: usize = 65536;
const SMALL_CAP: usize = 128;
const SMALL_DATA: usize = 248;
const LARGE_CAP: usize = 8;
const LARGE_DATA: usize = wire::HDR + 64 + MAX_MEDIUM;
const RINGS_PER_SRC: usize = 4;
/// Messages taken from one ring per poll before moving on (fairness).
const POLL_BUDGET: usize = 32;

// Every Short fits a small slot (the Short fast path of `try_send` relies on it).
const _: () = assert!(wire::HDR + wire::args_bytes(amnet_core::MAX_ARGS) <= SMALL_DATA);

const REQ_SMALL: usize = 0;
const REP_SMALL: usize = 2;
/// Each class's large-slot ring follows its small-slot one.
const REQ_LARGE: usize = REQ_SMALL + 1;
const REP_LARGE: usize = REP_SMALL + 1;

thread_local! {
    /// Ring slots this thread claimed for prepared Mediums and has not published yet:
    /// (the claiming conduit, destination, ring class, position).
    static CLAIMS: std::cell::RefCell<Vec<(usize, Rank, usize, u64)>> =
        const { std::cell::RefCell::new(Vec::new()) };
}

fn ring_geometry(class: usize) -> (usize, usize) {
    if class % 2 == 0 {
        (SMALL_CAP, SMALL_DATA)
    } else {
        (LARGE_CAP, LARGE_DATA)
    }
}

/// Bytes before the first ring of a queue area: the large-ring counter's cache line, then
/// the doorbell's.
const QUEUE_HDR: usize = 128;
/// Where the doorbell lies in a queue area.
const BELL_OFF: usize = 64;

fn per_src_bytes() -> usize {
    (0..RINGS_PER_SRC)
        .map(|c| {
            let (cap, data) = ring_geometry(c);
            Ring::bytes(cap, data)
        })
        .sum()
}

/// Bytes of one rank's queue area in a job of `size` ranks.
pub(crate) fn queue_bytes(size: u32) -> usize {
    QUEUE_HDR + size as usize * per_src_bytes()
}

/// Where a rank's host scratch starts in its queue object: after the queue area, on a page.
pub(crate) fn scratch_offset(size: u32) -> usize {
    queue_bytes(size).next_multiple_of(4096)
}

/// Bytes of one rank's queue object: its queue area, then its host scratch
/// (`Conduit::host_scratch`), reserved in /dev/shm together.
pub(crate) fn object_bytes(size: u32) -> usize {
    scratch_offset(size) + amnet_core::HOST_SCRATCH_BYTES
}

/// The host scratch in the queue object mapped at `base` (of `object_bytes(size)` bytes).
fn scratch_at(base: *mut u8, size: u32) -> Result<std::ptr::NonNull<u8>> {
    // `wrapping_add` computes the address without a claim on it; the object holds
    // `object_bytes(size)` bytes, so it lies inside.
    std::ptr::NonNull::new(base.wrapping_add(scratch_offset(size)))
        .ok_or_else(|| Error::conduit("smp", "queue object mapped at a null address"))
}

/// The large-ring counter at the start of a queue area.
///
/// # Safety
/// - `base` is the start of a queue area (64-byte aligned, zero-filled when created) that
///   stays mapped while the returned pointer is used.
unsafe fn large_counter(base: *mut u8) -> *const AtomicU64 {
    base.cast::<AtomicU64>().cast_const()
}

/// The doorbell of the queue area whose large-ring counter is at `large`.
///
/// # Safety
/// - `large` came from [`large_counter`], for an area that stays mapped while the returned
///   pointer is used.
unsafe fn doorbell(large: *const AtomicU64) -> *const Doorbell {
    // SAFETY: the doorbell's line follows the counter's inside the area's header
    // (`QUEUE_HDR`), 64-byte aligned; zero-filled, it is a doorbell at rest.
    unsafe { large.cast::<u8>().add(BELL_OFF).cast::<Doorbell>() }
}

/// Views of the four rings for each source rank in a queue area at `base`.
///
/// # Safety
/// - `base` holds a queue area for `size` ranks; with `init` it is fresh and unshared,
///   otherwise it was initialized and that happened-before this call.
unsafe fn rings(base: *mut u8, size: u32, init: bool) -> Vec<[Ring; 4]> {
    let mut out = Vec::with_capacity(size as usize);
    let mut off = QUEUE_HDR;
    for _ in 0..size {
        let r: [Ring; 4] = std::array::from_fn(|c| {
            let (cap, data) = ring_geometry(c);
            // SAFETY: `off` stays inside the area computed by `queue_bytes`; every ring size is a
            // multiple of 64, so each ring is 64-byte aligned.
            let ring = unsafe {
                let p = base.add(off);
                if init {
                    Ring::init(p, cap, data)
                } else {
                    Ring::view(p, cap, data)
                }
            };
            off += Ring::bytes(cap, data);
            ring
        });
        out.push(r);
    }
    out
}

/// What [`SmpConduit::inbound`] found.
enum Inbound3 {
    Ready,
    Claimed,
    Empty,
}

/// The longest idle wait while a ring into the rank holds a claimed, unpublished slot.
const CLAIMED_WAIT: std::time::Duration = std::time::Duration::from_micros(50);

/// One ring a poll visits.
#[derive(Clone, Copy)]
struct Inbound {
    /// The rank whose messages the ring carries.
    src: u32,
    ring: Ring,
    /// For a request ring: the small-slot reply ring back to `src`, whose next slot a poll
    /// asks for (see [`SmpConduit::drain`]) as soon as a request is seen.
    reply: Option<Ring>,
}

/// Poll order of the small-slot (`large` false) or large-slot rings from every other rank:
/// replies before requests, so a rank that waits for replies sees them first. `out` holds,
/// per destination, the rings this rank sends on.
fn poll_order(
    inb: &[[Ring; 4]],
    out: &[[Ring; 4]],
    me: u32,
    replies_only: bool,
    large: bool,
) -> Vec<Inbound> {
    let classes: &[usize] = match (replies_only, large) {
        (true, false) => &[REP_SMALL],
        (true, true) => &[REP_LARGE],
        (false, false) => &[REP_SMALL, REQ_SMALL],
        (false, true) => &[REP_LARGE, REQ_LARGE],
    };
    let mut v = Vec::new();
    for (src, rings) in inb.iter().enumerate() {
        #[allow(clippy::cast_possible_truncation)] // src < size <= MAX_RANKS
        let src = src as u32;
        if src != me {
            v.extend(classes.iter().map(|&c| Inbound {
                src,
                ring: rings[c],
                reply: matches!(c, REQ_SMALL | REQ_LARGE).then(|| out[src as usize][REP_SMALL]),
            }));
        }
    }
    v
}

/// This rank's rings from itself, replies first. None asks for a reply line ahead: that
/// prefetch is for lines another rank polls.
fn own_order(inb: &[[Ring; 4]], me: u32) -> [Inbound; 4] {
    let r = &inb[me as usize];
    [REP_SMALL, REP_LARGE, REQ_SMALL, REQ_LARGE].map(|c| Inbound {
        src: me,
        ring: r[c],
        reply: None,
    })
}

/// State shared by the ranks of a thread-mode job.
#[derive(Debug)]
pub struct ThreadShared {
    /// Owns the control block's memory (`ctl` points into it).
    _ctl_region: Region,
    pub(crate) ctl: Ctl,
    pub(crate) size: u32,
    pub(crate) queues: Vec<Region>,
    pub(crate) segs: Mutex<Vec<Option<Arc<Region>>>>,
}

impl ThreadShared {
    /// Build the control block and every rank's queue area for an `size`-rank thread job.
    pub fn new(size: u32) -> Result<Arc<ThreadShared>> {
        check_size(size)?;
        let ctl_region = Region::heap(Ctl::bytes(size))?;
        // SAFETY: fresh zeroed heap region of the right size.
        let ctl = unsafe { Ctl::init(ctl_region.ptr(), size) };
        let mut queues = Vec::with_capacity(size as usize);
        for _ in 0..size {
            let q = Region::heap(object_bytes(size))?;
            // SAFETY: fresh region of queue_bytes(size); shared only after the threads start.
            unsafe { rings(q.ptr(), size, true) };
            queues.push(q);
        }
        Ok(Arc::new(ThreadShared {
            _ctl_region: ctl_region,
            ctl,
            size,
            queues,
            segs: Mutex::new((0..size).map(|_| None).collect()),
        }))
    }

    /// Publish a job-wide exit on behalf of `rank` (used when a rank thread panics).
    pub fn request_exit(&self, rank: u32, code: i32) -> i32 {
        self.ctl.request_exit(rank, code)
    }
}

/// Unwind payload that ends a thread-mode rank with an exit code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ThreadExit(pub i32);

enum Mode {
    Process {
        job: String,
        _ctl_region: Region,
        _queues: Vec<Region>,
    },
    Threads(Arc<ThreadShared>),
}

struct Segs {
    bases: Vec<*mut u8>,
    lens: Vec<usize>,
    _maps: Vec<Region>,
    _shared: Vec<Arc<Region>>,
}

// SAFETY: addresses of mapped segments, shared on purpose.
unsafe impl Send for Segs {}
// SAFETY: as above.
unsafe impl Sync for Segs {}

/// The smp conduit.
pub struct SmpConduit {
    rank: Rank,
    size: u32,
    ctl: Ctl,
    /// Rings in each destination's area that carry messages from this rank.
    out: Vec<[Ring; 4]>,
    /// Each destination's large-ring counter (see the module notes).
    out_large: Vec<*const AtomicU64>,
    /// Each destination's doorbell (this rank's own included).
    out_bell: Vec<*const Doorbell>,
    /// Every other rank's small-slot rings into this rank, replies first, as polled.
    peer_all: Vec<Inbound>,
    /// The small-slot reply rings alone (what a handler waiting to reply polls).
    peer_rep: Vec<Inbound>,
    /// Every other rank's large-slot rings into this rank, replies first.
    large_all: Vec<Inbound>,
    /// The large-slot reply rings alone.
    large_rep: Vec<Inbound>,
    /// This rank's large-ring counter.
    in_large: *const AtomicU64,
    /// The counter's value when the large-slot rings were last seen all empty.
    large_seen: AtomicU64,
    /// This rank's rings from itself, in poll order (replies first).
    own: [Inbound; 4],
    /// Messages this rank sent to itself and has not consumed: its own rings are polled only
    /// while this is non-zero.
    self_pending: AtomicU64,
    boot: Boot,
    /// The CPUs the ranks may run on together: the union of their affinity masks (process
    /// mode), this process's affinity (thread mode).
    cores: u32,
    /// Every rank's host scratch, in its queue object (mapped for the conduit's life).
    scratch: Vec<std::ptr::NonNull<u8>>,
    segs: OnceLock<Segs>,
    mode: Mode,
}

// SAFETY: the raw pointers address the large-ring counters inside queue areas that the
// conduit keeps mapped (`Mode`) for its whole life; they are only used for atomic operations,
// which are safe from any thread and process. The host scratch pointers address the same
// objects and are only handed out (`host_scratch`), never dereferenced here.
unsafe impl Send for SmpConduit {}
// SAFETY: as above.
unsafe impl Sync for SmpConduit {}

impl std::fmt::Debug for SmpConduit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SmpConduit")
            .field("rank", &self.rank)
            .field("size", &self.size)
            .field("process", &matches!(self.mode, Mode::Process { .. }))
            .finish()
    }
}

fn check_size(size: u32) -> Result<()> {
    if size == 0 || size > crate::ctl::MAX_RANKS {
        return Err(Error::Config(format!(
            "the smp conduit runs 1..={} ranks, not {size}",
            crate::ctl::MAX_RANKS
        )));
    }
    Ok(())
}

fn cores() -> u32 {
    std::thread::available_parallelism()
        .map(|n| u32::try_from(n.get()).unwrap_or(u32::MAX))
        .unwrap_or(1)
}

/// Name of rank `rank`'s queue object in job `job`.
fn queue_name(job: &str, rank: u32) -> String {
    format!("/{job}-q{rank}")
}

fn seg_name(job: &str, rank: u32) -> String {
    format!("/{job}-s{rank}")
}

/// Name of a job's control object.
pub(crate) fn ctl_name(job: &str) -> String {
    format!("/{job}-ctl")
}

/// Create a fresh, unique job name.
pub(crate) fn new_job_name() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    format!("amnet-{}-{:x}", std::process::id(), nanos)
}

/// Create and initialize a job's control object; the caller unlinks it when the job ends.
pub(crate) fn create_ctl(job: &str, size: u32) -> Result<Region> {
    check_size(size)?;
    let r = Region::create(&ctl_name(job), Ctl::bytes(size))?;
    // SAFETY: freshly created (zero-filled by ftruncate) and not yet shared.
    unsafe { Ctl::init(r.ptr(), size) };
    Ok(r)
}

/// Read the exit code and its originating rank from a control region made by `create_ctl`.
pub(crate) fn ctl_exit(r: &Region, size: u32) -> Option<(i32, Option<u32>)> {
    // SAFETY: the region was created by `create_ctl` with this size.
    unsafe { Ctl::view(r.ptr(), r.len(), size) }
        .ok()
        .and_then(|c| c.exit_origin())
        .map(|(code, origin)| (code, (origin != LAUNCHER).then_some(origin)))
}

/// Publish an exit code from the launcher through a control region made by `create_ctl`.
pub(crate) fn ctl_request_exit(r: &Region, size: u32, code: i32) {
    // SAFETY: as in `ctl_exit`.
    if let Ok(c) = unsafe { Ctl::view(r.ptr(), r.len(), size) } {
        c.request_exit(LAUNCHER, code);
    }
}

/// An offset already checked against a segment length (a `usize`), so the cast is exact.
#[inline(always)]
#[allow(clippy::cast_possible_truncation)]
fn seg_off(o: u64) -> usize {
    o as usize
}

/// Whether segments of `lens` bytes fit in the `free` bytes of /dev/shm (when known): the sum
/// is an `Error::Config` naming both figures when it does not fit, or when it overflows.
fn check_shm_space(lens: &[usize], free: Option<u64>) -> Result<()> {
    let total = lens
        .iter()
        .try_fold(0u64, |t, &l| t.checked_add(l as u64))
        .ok_or_else(|| {
            Error::Config(format!(
                "the segments of the {} ranks ask for more than 2^64 bytes in all ({lens:?})",
                lens.len()
            ))
        })?;
    match free {
        Some(free) if total > free => Err(Error::Config(format!(
            "the segments ask for {total} bytes in all but /dev/shm has {free} bytes free: ask \
             for smaller segments or enlarge /dev/shm"
        ))),
        _ => Ok(()),
    }
}

fn process_exit(code: i32) -> ! {
    use std::io::Write;
    let _ = std::io::stdout().flush();
    std::process::exit(code)
}

impl SmpConduit {
    /// Join the process-mode job described by the environment (`AMNET_RANK`, `AMNET_SIZE`,
    /// `AMNET_SMP_JOB`, set by `amrun`). Without them the process is a job of one rank.
    pub fn from_env() -> Result<SmpConduit> {
        Self::new(&Source::env())
    }

    /// [`SmpConduit::from_env`] with the settings of `src` (values set in code win over the
    /// environment).
    pub fn new(src: &Source) -> Result<SmpConduit> {
        static JOINED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
        if JOINED.swap(true, Ordering::AcqRel) {
            return Err(Error::Config(
                "amnet::init called twice in one process: a process is one rank; clone the \
                 Endpoint to use it from several threads"
                    .into(),
            ));
        }
        let rank = src.count_u32(&vars::RANK)?;
        let size = src.count_u32(&vars::SIZE)?;
        let job = src.text(&vars::SMP_JOB);
        let boot_timeout = src.boot_timeout()?;
        match (rank, size, job) {
            (None, None, None) => {
                let job = new_job_name();
                let ctl = create_ctl(&job, 1)?;
                unlink(&ctl_name(&job));
                Self::process(job, 0, 1, ctl, boot_timeout)
            }
            (Some(rank), Some(size), Some(job)) => {
                check_size(size)?;
                if rank >= size {
                    return Err(Error::Config(format!(
                        "AMNET_RANK={rank} is not below AMNET_SIZE={size}"
                    )));
                }
                let ctl = Region::open(&ctl_name(&job), 0).map_err(|e| {
                    Error::Config(format!(
                        "cannot open the job's control block ({e}); start the job with amrun"
                    ))
                })?;
                Self::process(job, rank, size, ctl, boot_timeout)
            }
            _ => Err(Error::Config(
                "AMNET_RANK, AMNET_SIZE and AMNET_SMP_JOB must be set together (use amrun)".into(),
            )),
        }
    }

    /// Create the control block of a host group of `size` ranks named `group` (an
    /// `amnet-PID-...` job name whose PID is the creator's): the first step of
    /// [`join_group`](SmpConduit::join_group) on the group's rank 0, which must finish before
    /// any other member joins (the caller orders the two through its own transport). The name
    /// is removed once every member has joined.
    pub fn create_group(group: &str, size: u32) -> Result<Region> {
        create_ctl(group, size)
    }

    /// Join the host group `group` as its rank `rank` of `size`: the ranks of one host in a
    /// job of a network conduit, which send one another active messages through this
    /// conduit's rings and map one another's segments and host scratch (the host-local
    /// bypass, spec/core.md §7e). Rank 0 passes the control block it made with
    /// [`create_group`](SmpConduit::create_group); the others open it by name. The members
    /// meet at start-up barriers that wait at most `boot_timeout`.
    pub fn join_group(
        group: &str,
        rank: u32,
        size: u32,
        created: Option<Region>,
        boot_timeout: std::time::Duration,
    ) -> Result<SmpConduit> {
        check_size(size)?;
        if rank >= size {
            return Err(Error::BadRank { rank, size });
        }
        let ctl = match created {
            Some(r) => r,
            None => Region::open(&ctl_name(group), 0).map_err(|e| {
                Error::Config(format!(
                    "cannot open the host group's control block {} ({e})",
                    ctl_name(group)
                ))
            })?,
        };
        Self::process(group.to_string(), rank, size, ctl, boot_timeout)
    }

    fn process(
        job: String,
        rank: u32,
        size: u32,
        ctl_region: Region,
        boot_timeout: std::time::Duration,
    ) -> Result<SmpConduit> {
        // SAFETY: the region stays mapped in `Mode::Process` for the conduit's life.
        let ctl = unsafe { Ctl::view(ctl_region.ptr(), ctl_region.len(), size)? };
        let boot = Boot::new(boot_timeout);
        let own_name = queue_name(&job, rank);
        let own = Region::create(&own_name, object_bytes(size))?;
        // SAFETY: freshly created and not yet visible to peers (they wait at the barrier).
        let inb = unsafe { rings(own.ptr(), size, true) };
        let on_exit = |c: i32| process_exit(c);
        ctl.add_affinity();
        if let Err(e) = ctl.boot_barrier(size, &boot, "start-up", &on_exit) {
            unlink(&own_name);
            return Err(e);
        }
        // The CPUs the group's ranks may run on together (mpirun, say, binds each rank to a
        // core of its own: that is one core per rank, not oversubscription).
        let cores = ctl.affinity_cpus();
        let mut queues = Vec::with_capacity(size as usize);
        let mut out = Vec::with_capacity(size as usize);
        let mut out_large = Vec::with_capacity(size as usize);
        let mut scratch = Vec::with_capacity(size as usize);
        for r in 0..size {
            let q = if r == rank {
                None
            } else {
                Some(Region::open(&queue_name(&job, r), object_bytes(size))?)
            };
            let base = q.as_ref().map_or(own.ptr(), |q| q.ptr());
            scratch.push(scratch_at(base, size)?);
            // SAFETY: rank r initialized its area before the start-up barrier.
            let all = unsafe { rings(base, size, false) };
            out.push(all[rank as usize]);
            // SAFETY: `base` starts a queue area kept mapped in `Mode::Process`.
            out_large.push(unsafe { large_counter(base) });
            if let Some(q) = q {
                queues.push(q);
            }
        }
        // SAFETY: as above, for this rank's own area.
        let in_large = unsafe { large_counter(own.ptr()) };
        queues.push(own);
        ctl.boot_barrier(size, &boot, "start-up", &on_exit)?;
        unlink(&own_name);
        // Every rank has opened the control block: its name can go, so that nothing of the
        // job stays in /dev/shm if the launcher is killed (the launcher keeps its mapping).
        unlink(&ctl_name(&job));
        Ok(Self::assemble(
            (rank, size, ctl, cores),
            (out, out_large),
            (&inb, in_large),
            scratch,
            boot,
            Mode::Process {
                job,
                _ctl_region: ctl_region,
                _queues: queues,
            },
        ))
    }

    /// The conduit over its ring views: `out` and `out_large` per destination, `inb` (every
    /// source's rings in this rank's area) and `in_large` (this rank's counter).
    fn assemble(
        (rank, size, ctl, cores): (Rank, u32, Ctl, u32),
        (out, out_large): (Vec<[Ring; 4]>, Vec<*const AtomicU64>),
        (inb, in_large): (&[[Ring; 4]], *const AtomicU64),
        scratch: Vec<std::ptr::NonNull<u8>>,
        boot: Boot,
        mode: Mode,
    ) -> SmpConduit {
        SmpConduit {
            rank,
            size,
            ctl,
            peer_all: poll_order(inb, &out, rank, false, false),
            peer_rep: poll_order(inb, &out, rank, true, false),
            large_all: poll_order(inb, &out, rank, false, true),
            large_rep: poll_order(inb, &out, rank, true, true),
            out,
            // SAFETY: each counter came from `large_counter` for an area the conduit keeps
            // mapped (`mode`).
            out_bell: out_large.iter().map(|&l| unsafe { doorbell(l) }).collect(),
            out_large,
            in_large,
            large_seen: AtomicU64::new(0),
            own: own_order(inb, rank),
            self_pending: AtomicU64::new(0),
            boot,
            cores,
            scratch,
            segs: OnceLock::new(),
            mode,
        }
    }

    /// Rank `rank` of a thread-mode job built by [`ThreadShared::new`].
    pub fn thread(rank: u32, shared: Arc<ThreadShared>) -> Result<SmpConduit> {
        let size = shared.size;
        if rank >= size {
            return Err(Error::BadRank { rank, size });
        }
        // SAFETY: the areas were initialized in ThreadShared::new before any thread started.
        let inb = unsafe { rings(shared.queues[rank as usize].ptr(), size, false) };
        let out = (0..size as usize)
            .map(|d| {
                // SAFETY: as above.
                let all = unsafe { rings(shared.queues[d].ptr(), size, false) };
                all[rank as usize]
            })
            .collect();
        let out_large = (0..size as usize)
            // SAFETY: the areas live in `shared`, which the conduit keeps (`Mode::Threads`).
            .map(|d| unsafe { large_counter(shared.queues[d].ptr()) })
            .collect();
        // SAFETY: as above.
        let in_large = unsafe { large_counter(shared.queues[rank as usize].ptr()) };
        let scratch = shared
            .queues
            .iter()
            .map(|q| scratch_at(q.ptr(), size))
            .collect::<Result<Vec<_>>>()?;
        Ok(Self::assemble(
            (rank, size, shared.ctl, cores()),
            (out, out_large),
            (&inb, in_large),
            scratch,
            Boot::new(Source::env().boot_timeout()?),
            Mode::Threads(shared),
        ))
    }

    /// After a push into `dest`'s rings: wake its progress thread if it sleeps.
    #[inline(always)]
    fn ring_bell(&self, dest: Rank) {
        // SAFETY: the destination's doorbell, mapped for the conduit's life.
        unsafe { &*self.out_bell[dest as usize] }.ring();
    }

    /// A push into `dest`'s ring of `class` found it full: `Error::Usage` when its consumer
    /// waits at a slot this thread claimed for a prepared message (it would never make room
    /// before the commit this thread is not making). Otherwise the caller waits for room.
    #[cold]
    fn check_behind_own_claim(&self, dest: Rank, class: usize) -> Result<()> {
        let me = self as *const Self as usize;
        let ring = &self.out[dest as usize][class];
        let blocked = CLAIMS.with(|c| {
            c.borrow()
                .iter()
                .any(|&(s, d, k, pos)| s == me && d == dest && k == class && ring.head() == pos)
        });
        if blocked {
            return Err(Error::Usage {
                op: "send",
                detail: format!(
                    "the ring to rank {dest} is full behind a prepared message this thread has \
                     not committed (its destination takes nothing after it until then); commit \
                     or cancel it first"
                ),
            });
        }
        Ok(())
    }

    /// Forgets this thread's claim of `pos` on `dest`'s ring of `class` (published now).
    fn unclaim(&self, dest: Rank, class: usize, pos: u64) {
        let me = self as *const Self as usize;
        CLAIMS.with(|c| {
            c.borrow_mut()
                .retain(|&(s, d, k, p)| !(s == me && d == dest && k == class && p == pos));
        });
    }

    /// Publishes the prepared slot at `pos` of `dest`'s ring of `class` (committed or void)
    /// and forgets this thread's claim; a large ring's counter moves, as after any push into
    /// it (see the module notes), and the destination's doorbell rings (its progress thread
    /// may be waiting for this slot, see `idle_wait`).
    ///
    /// # Safety
    /// - `pos` was claimed on that ring by `prepare_medium` and is not published yet.
    unsafe fn publish_prepared(&self, dest: Rank, class: usize, pos: u64) {
        // SAFETY: per the contract.
        unsafe { self.out[dest as usize][class].publish(pos) };
        self.unclaim(dest, class, pos);
        if class & 1 == 1 {
            // SAFETY: the destination's counter, mapped for the conduit's life.
            unsafe { &*self.out_large[dest as usize] }.fetch_add(1, Ordering::Release);
        }
        self.ring_bell(dest);
    }

    /// What the rings into this rank hold, for the progress thread's check before it sleeps
    /// (after arming its doorbell): a published message (`Ready`), only claimed slots whose
    /// messages are not published yet (`Claimed`: a push in progress, or a prepared message
    /// that its sender has not committed), or nothing (`Empty`).
    fn inbound(&self) -> Inbound3 {
        let mut claimed = false;
        for inb in self.peer_all.iter().chain(&self.large_all).chain(&self.own) {
            if inb.ring.claimed() {
                if inb.ring.maybe_ready() {
                    return Inbound3::Ready;
                }
                claimed = true;
            }
        }
        if claimed {
            Inbound3::Claimed
        } else {
            Inbound3::Empty
        }
    }

    fn on_exit(&self) -> impl Fn(i32) + '_ {
        move |c| self.terminate(c)
    }

    /// Deliver up to `POLL_BUDGET` messages from one ring. Returns how many, and false when
    /// the sink asked to stop.
    ///
    /// On a request ring, each message first asks for the line of the next slot of the reply
    /// ring back to its sender. A request handler usually replies, and that line sits in the
    /// sender's cache, which polls it: fetched now, the transfer overlaps decoding and
    /// dispatch instead of stalling the reply's push. (On the 2-core VM the 2-rank Short round
    /// trip takes 0.15 µs with it against 0.17 µs without in the VM's fast state, and 0.46
    /// against 0.60 µs in its slow state; bench/RESULTS.md, "smp: where the time goes".)
    #[inline(always)]
    fn drain(&self, inb: &Inbound, sink: &mut dyn FnMut(&InMsg<'_>) -> bool) -> (usize, bool) {
        let ring = &inb.ring;
        let mut n = 0;
        // `maybe_ready` is a two-load check the compiler inlines: an empty ring, the common
        // case for all but one ring per poll, costs no call into the claim loop.
        while n < POLL_BUDGET && ring.maybe_ready() {
            if let Some(reply) = &inb.reply {
                reply.prefetch_next_push();
            }
            let (src, cap) = (inb.src, ring.data_cap());
            match ring.try_pop(|p| self.deliver(src, p, cap, sink)) {
                None => break,
                Some(more) => {
                    n += 1;
                    if !more {
                        return (n, false);
                    }
                }
            }
        }
        (n, true)
    }

    #[inline(always)]
    fn deliver(
        &self,
        src: u32,
        p: *const u8,
        cap: usize,
        sink: &mut dyn FnMut(&InMsg<'_>) -> bool,
    ) -> bool {
        // SAFETY: `p` is the data area of a slot this thread claimed; it holds `cap` bytes and
        // stays untouched until try_pop frees the slot after this returns.
        let d = match unsafe { wire::decode(p, cap) } {
            Ok(d) => d,
            // A cancelled negotiated-payload slot.
            Err(wire::DecodeError::Void) => return true,
            Err(e) => {
                amnet_core::diag!(
                    "amnet smp rank {}: dropped a malformed message from rank {src}: {e:?}",
                    self.rank
                );
                return true;
            }
        };
        let payload: &[u8] = match d.category {
            Category::Long => {
                let Some(segs) = self.segs.get() else {
                    return true;
                };
                let len = segs.lens[self.rank as usize];
                let end = d.long_offset.checked_add(d.payload_len as u64);
                if !matches!(end, Some(e) if e <= len as u64) {
                    amnet_core::diag!(
                        "amnet smp rank {}: dropped a Long from rank {src} outside the segment",
                        self.rank
                    );
                    return true;
                }
                // SAFETY: range checked against the local segment, mapped for the conduit's life.
                let dst = unsafe { segs.bases[self.rank as usize].add(seg_off(d.long_offset)) };
                if !d.inline.is_empty() {
                    // SAFETY: the inline bytes sit in the claimed slot; `dst` has room for them
                    // (checked above) and does not overlap the ring.
                    unsafe { wire::copy_small(d.inline.as_ptr(), dst, d.inline.len()) };
                }
                // SAFETY: as above.
                unsafe { std::slice::from_raw_parts(dst, d.payload_len) }
            }
            _ => d.inline,
        };
        sink(&InMsg {
            src,
            handler: d.handler,
            category: d.category,
            is_reply: d.is_reply,
            args: d.args,
            payload,
            long_offset: d.long_offset,
        })
    }
}

impl Conduit for SmpConduit {
    fn name(&self) -> &'static str {
        "smp"
    }
    fn rank(&self) -> Rank {
        self.rank
    }
    fn size(&self) -> u32 {
        self.size
    }
    fn max_medium(&self) -> usize {
        MAX_MEDIUM
    }
    fn oversubscribed(&self) -> bool {
        self.size > self.cores
    }

    fn host_cores(&self) -> u32 {
        self.cores
    }

    fn exchange(&self, blob: &[u8]) -> Result<Vec<Vec<u8>>> {
        let on_exit = self.on_exit();
        self.ctl
            .exchange(self.rank, self.size, blob, &self.boot, &on_exit)
    }

    fn attach_segment(&self, len: usize, lens: &[usize]) -> Result<LocalSegment> {
        let on_exit = self.on_exit();
        let me = self.rank as usize;
        let mut bases = vec![std::ptr::null_mut(); self.size as usize];
        let mut maps = Vec::new();
        let mut shared = Vec::new();
        match &self.mode {
            Mode::Process { job, .. } => {
                // Every rank sees the same lengths here, so every rank reaches the same verdict
                // before any creates its segment (each reserves its own at creation, which
                // catches what another job takes meanwhile).
                check_shm_space(lens, crate::shm::shm_free_bytes())?;
                let own_name = seg_name(job, self.rank);
                let own = if len > 0 {
                    Some(Region::create(&own_name, len)?)
                } else {
                    None
                };
                self.ctl
                    .boot_barrier(self.size, &self.boot, "attach", &on_exit)?;
                for (r, &l) in lens.iter().enumerate() {
                    if r == me || l == 0 {
                        continue;
                    }
                    #[allow(clippy::cast_possible_truncation)] // r < size <= MAX_RANKS
                    let m = Region::open(&seg_name(job, r as u32), l)?;
                    bases[r] = m.ptr();
                    maps.push(m);
                }
                if let Some(o) = own {
                    bases[me] = o.ptr();
                    maps.push(o);
                }
                self.ctl
                    .boot_barrier(self.size, &self.boot, "attach", &on_exit)?;
                if len > 0 {
                    unlink(&own_name);
                }
            }
            Mode::Threads(sh) => {
                let own = Arc::new(Region::heap(len)?);
                sh.segs.lock().unwrap_or_else(|e| e.into_inner())[me] = Some(own);
                self.ctl
                    .boot_barrier(self.size, &self.boot, "attach", &on_exit)?;
                let segs = sh.segs.lock().unwrap_or_else(|e| e.into_inner());
                for (r, s) in segs.iter().enumerate() {
                    let s = s.as_ref().ok_or_else(|| {
                        Error::conduit("smp", format!("rank {r} has no segment after attach"))
                    })?;
                    bases[r] = s.ptr();
                    shared.push(s.clone());
                }
            }
        }
        let local = LocalSegment {
            base: bases[me],
            len,
        };
        self.segs
            .set(Segs {
                bases,
                lens: lens.to_vec(),
                _maps: maps,
                _shared: shared,
            })
            .map_err(|_| Error::AlreadyAttached)?;
        Ok(local)
    }

    #[inline]
    fn try_send(&self, dest: Rank, msg: &OutMsg<'_>) -> Result<bool> {
        // The whole message, payload included, fits one small slot.
        let fits = wire::encoded_len(msg, true) <= SMALL_DATA;
        if dest != self.rank && fits {
            // The round-trip path: a message that fits a small slot whole (every Short; a
            // Medium or Long whose payload travels inline) goes straight into it.
            let ring = &self.out[dest as usize][if msg.is_reply { REP_SMALL } else { REQ_SMALL }];
            let inline = msg.category != Category::Short;
            // SAFETY: the slot holds SMALL_DATA >= encoded_len bytes (checked just above); the
            // core checked the argument count and payload size.
            let sent = ring.try_push(|p| unsafe { wire::encode(p, msg, inline) });
            if sent {
                self.ring_bell(dest);
            } else {
                self.check_behind_own_claim(
                    dest,
                    if msg.is_reply { REP_SMALL } else { REQ_SMALL },
                )?;
            }
            return Ok(sent);
        }
        let inline = match msg.category {
            Category::Short => false,
            Category::Medium => true,
            Category::Long => fits,
        };
        let need = wire::encoded_len(msg, inline);
        let class =
            if msg.is_reply { REP_SMALL } else { REQ_SMALL } + usize::from(need > SMALL_DATA);
        let ring = &self.out[dest as usize][class];
        let seg = if msg.category == Category::Long && !inline {
            let segs = self
                .segs
                .get()
                .ok_or(Error::NotAttached { op: "request_long" })?;
            Some(segs.bases[dest as usize])
        } else {
            None
        };
        let to_self = dest == self.rank;
        if to_self {
            self.self_pending.fetch_add(1, Ordering::Relaxed);
        }
        let sent = ring.try_push(|p| {
            // SAFETY: the slot holds `data_cap >= need` bytes (the class was chosen by size);
            // the core checked the argument count, payload size and the Long range against the
            // destination's segment, which is mapped at `seg`.
            unsafe {
                if let Some(base) = seg {
                    amnet_core::mem::copy(
                        msg.payload.as_ptr(),
                        base.add(seg_off(msg.long_offset)),
                        msg.payload.len(),
                    );
                }
                wire::encode(p, msg, inline);
            }
        });
        if to_self && !sent {
            self.self_pending.fetch_sub(1, Ordering::Relaxed);
        }
        if sent && class & 1 == 1 && !to_self {
            // SAFETY: the destination's counter, mapped for the conduit's life.
            // Release: a poll that reads the new value finds the message in its ring.
            unsafe { &*self.out_large[dest as usize] }.fetch_add(1, Ordering::Release);
        }
        if sent {
            self.ring_bell(dest);
        } else {
            self.check_behind_own_claim(dest, class)?;
        }
        Ok(sent)
    }

    #[inline]
    fn poll(&self, replies_only: bool, sink: &mut dyn FnMut(&InMsg<'_>) -> bool) -> Result<usize> {
        let rings = if replies_only {
            &self.peer_rep
        } else {
            &self.peer_all
        };
        let mut total = 0;
        for inb in rings.iter() {
            let (n, more) = self.drain(inb, sink);
            total += n;
            if !more {
                return Ok(total);
            }
        }
        // SAFETY: this rank's counter, mapped for the conduit's life.
        let large = unsafe { &*self.in_large }.load(Ordering::Acquire);
        if large != self.large_seen.load(Ordering::Relaxed) {
            let (rings, all) = if replies_only {
                (&self.large_rep, false)
            } else {
                (&self.large_all, true)
            };
            // Every message counted up to `large` was pushed before the count: once every
            // large ring was drained empty after reading it, `large` is seen. A poll that
            // stopped early, or saw only the reply rings, leaves the mark where it was.
            let mut empty = all;
            for inb in rings.iter() {
                let (n, more) = self.drain(inb, sink);
                total += n;
                if !more {
                    return Ok(total);
                }
                empty &= n < POLL_BUDGET;
            }
            if empty {
                self.large_seen.store(large, Ordering::Relaxed);
            }
        }
        if self.self_pending.load(Ordering::Relaxed) != 0 {
            let own = if replies_only {
                &self.own[..2]
            } else {
                &self.own[..]
            };
            for inb in own {
                let (n, more) = self.drain(inb, sink);
                if n > 0 {
                    self.self_pending.fetch_sub(n as u64, Ordering::Relaxed);
                    total += n;
                }
                if !more {
                    break;
                }
            }
        }
        Ok(total)
    }

    fn host_scratch(&self, rank: Rank) -> Option<std::ptr::NonNull<u8>> {
        self.scratch.get(rank as usize).copied()
    }

    fn peer_segment(&self, rank: Rank) -> Option<*mut u8> {
        let segs = self.segs.get()?;
        if segs.lens[rank as usize] == 0 {
            // A zero-length segment: any in-range access has length 0, so any address works.
            return Some(std::ptr::NonNull::<u8>::dangling().as_ptr());
        }
        Some(segs.bases[rank as usize])
    }

    fn prepare_medium(&self, dest: Rank, is_reply: bool, max_len: usize) -> Option<PreparedSlot> {
        // Messages to this rank itself keep their counted path (`self_pending`).
        if dest == self.rank {
            return None;
        }
        let need = wire::FIXED_AT.checked_add(max_len)?;
        let class = if is_reply { REP_SMALL } else { REQ_SMALL }
            + match need {
                n if n <= SMALL_DATA => 0,
                n if n <= LARGE_DATA => 1,
                _ => return None,
            };
        let ring = &self.out[dest as usize][class];
        let pos = ring.try_claim()?;
        // SAFETY: the slot's data area holds `data_cap() >= need` bytes, claimed by this
        // thread until the commit or cancel publishes it.
        let Some(buf) = std::ptr::NonNull::new(unsafe { ring.slot_data(pos).add(wire::FIXED_AT) })
        else {
            // Not a mapped address: give the slot back, void.
            // SAFETY: the slot was just claimed and is not published.
            unsafe {
                wire::encode_void(ring.slot_data(pos));
                self.publish_prepared(dest, class, pos);
            }
            return None;
        };
        let me = self as *const Self as usize;
        CLAIMS.with(|c| c.borrow_mut().push((me, dest, class, pos)));
        Some(PreparedSlot {
            buf,
            len: max_len,
            token: [pos, class as u64],
        })
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
        #[allow(clippy::cast_possible_truncation)] // a ring class, 0..4
        let class = slot.token[1] as usize;
        let ring = &self.out[dest as usize][class];
        let pos = slot.token[0];
        // SAFETY: the slot was claimed by `prepare_medium` (the caller's contract) and is not
        // published yet; its data area holds `FIXED_AT + slot.len` bytes, the payload
        // already in place behind the header's room.
        unsafe {
            wire::encode_fixed(ring.slot_data(pos), handler, is_reply, args, len);
            self.publish_prepared(dest, class, pos);
        }
    }

    unsafe fn cancel_medium(&self, dest: Rank, slot: &PreparedSlot) {
        #[allow(clippy::cast_possible_truncation)] // a ring class, 0..4
        let class = slot.token[1] as usize;
        let ring = &self.out[dest as usize][class];
        let pos = slot.token[0];
        // SAFETY: as in `commit_medium`: a claimed slot not yet published.
        unsafe {
            wire::encode_void(ring.slot_data(pos));
            self.publish_prepared(dest, class, pos);
        }
    }

    fn idle_wait(&self, max: std::time::Duration) {
        // SAFETY: this rank's doorbell, mapped for the conduit's life.
        let bell = unsafe { &*self.out_bell[self.rank as usize] };
        bell.arm();
        match self.inbound() {
            Inbound3::Ready => {}
            // A claim without its message yet: a push about to publish, or a prepared message
            // held by its sender, whose commit or cancel rings. A short wait, not a spin.
            Inbound3::Claimed => bell.wait(max.min(CLAIMED_WAIT)),
            Inbound3::Empty => bell.wait(max),
        }
        bell.rest();
    }

    fn exit_word(&self) -> Option<&AtomicU64> {
        Some(self.ctl.exit_word())
    }

    fn exit_requested(&self) -> Option<i32> {
        self.ctl.exit_requested()
    }

    fn request_exit(&self, code: i32) -> i32 {
        self.ctl.request_exit(self.rank, code)
    }

    fn terminate(&self, code: i32) -> ! {
        match self.mode {
            Mode::Process { .. } => process_exit(code),
            Mode::Threads(_) => std::panic::resume_unwind(Box::new(ThreadExit(code))),
        }
    }

    fn is_process_mode(&self) -> bool {
        matches!(self.mode, Mode::Process { .. })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_space_check_refuses_what_does_not_fit_and_sums_that_overflow() {
        let gib = 1usize << 30;
        assert!(check_shm_space(&[gib, gib], Some(3 << 30)).is_ok());
        assert!(check_shm_space(&[gib, gib], None).is_ok());
        let e = check_shm_space(&[gib, gib], Some(1 << 30)).unwrap_err();
        assert!(matches!(e, Error::Config(_)), "{e}");
        // Four ranks of 2^62 bytes each add up to 2^64: the sum overflows, and is refused
        // whatever /dev/shm says.
        let huge = [1usize << 62; 4];
        for free in [None, Some(u64::MAX)] {
            let e = check_shm_space(&huge, free).unwrap_err();
            assert!(e.to_string().contains("2^64"), "{e}");
        }
    }
}
