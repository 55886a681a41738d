//! The job control block: one small region every rank maps (shared memory in process mode,
//! heap in thread mode). It carries the job-wide exit code, the boot barrier and the slots of
//! the attach-time exchange. Only start-up, attach and exit touch it, plus one relaxed load of
//! the exit word when a poll finds nothing.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use amnet_core::{Error, Result};

const MAGIC: u64 = 0x616d_6e65_7443_544c; // "amnetCTL"

/// One rank's side of the job's start-up barriers: how many it has entered, and how long each
/// may wait for the others (`AMNET_BOOT_TIMEOUT`).
#[derive(Debug)]
pub(crate) struct Boot {
    /// Barriers this rank has entered.
    pub(crate) count: AtomicU64,
    /// The longest a barrier waits.
    pub(crate) limit: Duration,
}

impl Boot {
    pub(crate) fn new(limit: Duration) -> Self {
        Boot {
            count: AtomicU64::new(0),
            limit,
        }
    }
}

/// Bytes of one rank's exchange slot.
pub(crate) const SLOT_BYTES: usize = 256;
const HEADER: usize = 4096;
/// The most ranks the smp conduit runs. Ring memory is committed only as it is used, but the
/// queue areas are sized for every ordered pair: `size^2` rings of each kind.
pub const MAX_RANKS: u32 = 256;
/// Origin recorded when the launcher, not a rank, ends the job.
pub(crate) const LAUNCHER: u32 = 0x7fff_ffff;

#[repr(C)]
struct Header {
    magic: AtomicU64,
    size: AtomicU32,
    _pad: AtomicU32,
    /// 0: no exit requested; otherwise (1 << 63) | (origin << 32) | code as u32, where origin
    /// is the rank that asked (LAUNCHER when the launcher did).
    exit: AtomicU64,
    /// Boot-barrier arrivals, monotonically increasing.
    arrivals: AtomicU64,
    /// The union of the ranks' CPU affinity masks (bit `i`: CPU `i` may run one of them),
    /// each rank's ORed in before the start-up barrier.
    cpus: [AtomicU64; CPU_WORDS],
}

/// Words of the affinity union: CPUs 0..1024 (glibc's `cpu_set_t`).
const CPU_WORDS: usize = 16;
const _: () = assert!(std::mem::size_of::<Header>() <= HEADER);

#[repr(C)]
struct Slot {
    len: AtomicU32,
    data: [u8; SLOT_BYTES - 4],
}

/// A view of a control block.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Ctl {
    base: *mut u8,
}

// SAFETY: all shared fields are atomics; slot data is written before a Release barrier arrival
// and read after the Acquire wait that follows it.
unsafe impl Send for Ctl {}
// SAFETY: as above.
unsafe impl Sync for Ctl {}

impl Ctl {
    /// Bytes a control block for `size` ranks needs.
    pub(crate) fn bytes(size: u32) -> usize {
        HEADER + size as usize * SLOT_BYTES
    }

    /// Initialize a zeroed region as a control block.
    ///
    /// # Safety
    /// - `base` is page-aligned, zeroed, valid for `Ctl::bytes(size)` bytes, and not yet shared.
    pub(crate) unsafe fn init(base: *mut u8, size: u32) -> Ctl {
        let c = Ctl { base };
        c.hdr().size.store(size, Ordering::Relaxed);
        c.hdr().magic.store(MAGIC, Ordering::Release);
        c
    }

    /// View an existing control block, checking its magic and size.
    ///
    /// # Safety
    /// - `base` is valid for `len` bytes for as long as the view is used.
    pub(crate) unsafe fn view(base: *mut u8, len: usize, size: u32) -> Result<Ctl> {
        let c = Ctl { base };
        if len < Ctl::bytes(size) {
            return Err(Error::conduit(
                "smp",
                "control block is too small for the job size",
            ));
        }
        if c.hdr().magic.load(Ordering::Acquire) != MAGIC {
            return Err(Error::conduit(
                "smp",
                "control block has a bad magic number",
            ));
        }
        let s = c.hdr().size.load(Ordering::Relaxed);
        if s != size {
            return Err(Error::Config(format!(
                "AMNET_SIZE={size} but the job's control block was made for {s} ranks"
            )));
        }
        Ok(c)
    }

    fn hdr(&self) -> &Header {
        // SAFETY: `base` holds a Header for the life of the view.
        unsafe { &*self.base.cast::<Header>() }
    }

    fn slot(&self, rank: u32) -> *mut Slot {
        // SAFETY: rank < size, so the slot lies inside the block.
        unsafe { self.base.add(HEADER + rank as usize * SLOT_BYTES).cast() }
    }

    /// OR this process's CPU affinity into the block's union (before the start-up barrier).
    pub(crate) fn add_affinity(&self) {
        for (w, bits) in self.hdr().cpus.iter().zip(affinity_words()) {
            if bits != 0 {
                w.fetch_or(bits, Ordering::Relaxed);
            }
        }
    }

    /// The CPUs that may run at least one of the ranks, once every rank added its affinity
    /// (after the start-up barrier, whose arrivals order the ORs before this read); at least 1.
    pub(crate) fn affinity_cpus(&self) -> u32 {
        let n: u32 = self
            .hdr()
            .cpus
            .iter()
            .map(|w| w.load(Ordering::Relaxed).count_ones())
            .sum();
        n.max(1)
    }

    /// The exit word itself: 0 until an exit is requested.
    pub(crate) fn exit_word(&self) -> &AtomicU64 {
        &self.hdr().exit
    }

    /// The job-wide exit code, once requested.
    #[inline]
    pub(crate) fn exit_requested(&self) -> Option<i32> {
        self.exit_origin().map(|(c, _)| c)
    }

    /// The job-wide exit code and the rank that asked for it (`LAUNCHER` for the launcher).
    #[inline]
    pub(crate) fn exit_origin(&self) -> Option<(i32, u32)> {
        let v = self.hdr().exit.load(Ordering::Acquire);
        if v == 0 {
            None
        } else {
            #[allow(clippy::cast_possible_truncation)] // the fields were packed from these types
            Some((v as u32 as i32, ((v >> 32) as u32) & LAUNCHER))
        }
    }

    /// Publish `code` from `origin` unless an exit is already requested; returns the code in
    /// force.
    pub(crate) fn request_exit(&self, origin: u32, code: i32) -> i32 {
        let v = (1u64 << 63) | (u64::from(origin & LAUNCHER) << 32) | u64::from(code as u32);
        match self
            .hdr()
            .exit
            .compare_exchange(0, v, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => code,
            Err(cur) => {
                #[allow(clippy::cast_possible_truncation)] // low half holds the code's bits
                let c = cur as u32 as i32;
                c
            }
        }
    }

    /// Barrier among all `size` ranks, waiting at most `boot.limit`. Returns
    /// `Err(Exit(code))`-style errors through `on_exit` when the job ends meanwhile.
    pub(crate) fn boot_barrier(
        &self,
        size: u32,
        boot: &Boot,
        what: &str,
        on_exit: &dyn Fn(i32),
    ) -> Result<()> {
        let k = boot.count.fetch_add(1, Ordering::Relaxed) + 1;
        let target = k * u64::from(size);
        self.hdr().arrivals.fetch_add(1, Ordering::AcqRel);
        let start = Instant::now();
        let limit = boot.limit;
        let mut idle = 0u32;
        loop {
            let a = self.hdr().arrivals.load(Ordering::Acquire);
            if a >= target {
                return Ok(());
            }
            if let Some(code) = self.exit_requested() {
                on_exit(code);
                return Err(Error::conduit(
                    "smp",
                    format!("{what}: the job is ending with code {code}"),
                ));
            }
            if start.elapsed() > limit {
                return Err(Error::Timeout {
                    what: format!(
                        "{what}: {} of {size} ranks arrived (is every rank of the job running?)",
                        a + u64::from(size) - target
                    ),
                    secs: limit.as_secs(),
                });
            }
            idle += 1;
            if idle < 100 {
                std::thread::yield_now();
            } else {
                std::thread::sleep(Duration::from_micros(200));
            }
        }
    }

    /// All-gather of small blobs (at most `SLOT_BYTES - 4` bytes each).
    pub(crate) fn exchange(
        &self,
        rank: u32,
        size: u32,
        blob: &[u8],
        boot: &Boot,
        on_exit: &dyn Fn(i32),
    ) -> Result<Vec<Vec<u8>>> {
        if blob.len() > SLOT_BYTES - 4 {
            return Err(Error::conduit(
                "smp",
                format!(
                    "exchange blob of {} bytes exceeds {}",
                    blob.len(),
                    SLOT_BYTES - 4
                ),
            ));
        }
        let me = self.slot(rank);
        // SAFETY: this rank's slot is written only by this rank, before the barrier.
        unsafe {
            std::ptr::copy_nonoverlapping(blob.as_ptr(), (*me).data.as_mut_ptr(), blob.len());
            #[allow(clippy::cast_possible_truncation)] // checked above
            (*me).len.store(blob.len() as u32, Ordering::Release);
        }
        self.boot_barrier(size, boot, "attach exchange", on_exit)?;
        let mut out = Vec::with_capacity(size as usize);
        for r in 0..size {
            let s = self.slot(r);
            // SAFETY: the barrier ordered every rank's slot write before these reads.
            unsafe {
                let len = ((*s).len.load(Ordering::Acquire) as usize).min(SLOT_BYTES - 4);
                out.push((&(*s).data)[..len].to_vec());
            }
        }
        // Nobody rewrites a slot until everyone has read: a later exchange starts with a write,
        // so close this one with a second barrier.
        self.boot_barrier(size, boot, "attach exchange", on_exit)?;
        Ok(out)
    }
}

/// This process's CPU affinity mask as `CPU_WORDS` words; where it cannot be read, the first
/// `available_parallelism()` CPUs.
fn affinity_words() -> [u64; CPU_WORDS] {
    let mut words = [0u64; CPU_WORDS];
    // SAFETY: cpu_set_t is plain bits, valid zeroed; sched_getaffinity writes at most the size
    // given into it.
    let got = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) == 0 {
            for (i, w) in words.iter_mut().enumerate() {
                for b in 0..64 {
                    if libc::CPU_ISSET(i * 64 + b, &set) {
                        *w |= 1 << b;
                    }
                }
            }
            true
        } else {
            false
        }
    };
    if !got || words.iter().all(|&w| w == 0) {
        let n = std::thread::available_parallelism().map_or(1, |n| n.get());
        for i in 0..n.min(CPU_WORDS * 64) {
            words[i / 64] |= 1 << (i % 64);
        }
    }
    words
}
