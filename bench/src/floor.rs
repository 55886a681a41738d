//! The floors the library is judged against, measured in the same run:
//!
//! - `cacheline_rtt`: ranks 0 and 1 ping-pong one 64-byte-aligned cache line through a
//!   POSIX shared-memory object of the benchmark's own (no amnet code in the loop): the
//!   fastest round trip two processes can make through shared memory. It is timed in
//!   blocks interleaved with the AM round trips (see `latency`).
//! - `memcpy_bw`: plain `memcpy` between two local buffers on rank 0, at every size the
//!   bandwidth sweeps use.

use std::hint::black_box;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};

use amnet::Endpoint;
use amnet_smp::{unlink_shared, SharedRegion};

use crate::measure::time_batched;
use crate::report::Row;
use crate::{BenchError, Plan};

/// Bytes of the shared object holding the line (one page).
const LINE_OBJ_BYTES: usize = 4096;

/// Spins on the line before each `yield_now`, so that a waiter never starves its peer when
/// the ranks share a core; on an oversubscribed host (where ranks 0 and 1 may share one) the
/// waiter yields after [`SPINS_OVERSUBSCRIBED`] instead (a PAUSE costs about 25 ns on the
/// 2-core VM: 4096 of them hold the core 100 µs).
const SPINS_BEFORE_YIELD: u32 = 1 << 12;
/// Spins before each yield on an oversubscribed host.
const SPINS_OVERSUBSCRIBED: u32 = 16;

/// A mapping of the shared object that holds the ping-pong line.
struct SharedLine {
    region: SharedRegion,
}

impl SharedLine {
    /// Create (`create`) or open the object `name` and map it.
    fn map(name: &str, create: bool) -> io::Result<SharedLine> {
        let r = if create {
            SharedRegion::create(name, LINE_OBJ_BYTES)
        } else {
            SharedRegion::open(name, LINE_OBJ_BYTES)
        };
        r.map(|region| SharedLine { region })
            .map_err(|e| io::Error::other(e.to_string()))
    }

    /// The word both ranks spin on: the first 8 bytes of the page-aligned (hence 64-byte
    /// aligned) mapping; nothing else lives in its cache line.
    fn word(&self) -> &AtomicU64 {
        // SAFETY: the mapping is page aligned, LINE_OBJ_BYTES long, zero-filled when created,
        // and lives as long as `self`; AtomicU64 has the layout of u64.
        unsafe { &*self.region.ptr().cast::<AtomicU64>() }
    }
}

fn unlink(name: &str) {
    unlink_shared(name);
}

/// Name of the line's object: under the job's name when `amrun` gave one (its clean-up
/// removes everything named `/{job}-*`), else under the launcher's pid.
fn line_name() -> String {
    match amnet::Source::env().text(&amnet::config::vars::SMP_JOB) {
        Some(job) => format!("/{job}-bench-line"),
        // SAFETY: getppid has no preconditions.
        None => format!("/amnet-bench-{}-line", unsafe { libc::getppid() }),
    }
}

/// Spin `limit` times (then yield between checks) until `w` holds `v`.
#[inline]
fn wait_for(w: &AtomicU64, v: u64, limit: u32) {
    let mut spins = 0u32;
    while w.load(Ordering::Acquire) != v {
        if spins < limit {
            spins += 1;
            std::hint::spin_loop();
        } else {
            std::thread::yield_now();
        }
    }
}

/// The cache line ranks 0 and 1 ping-pong: rank 0 writes an odd value and waits for the
/// next even one, which rank 1 writes once it has seen the odd one.
pub(crate) struct PingLine {
    /// The mapping, on ranks 0 and 1 only.
    line: Option<SharedLine>,
    /// The last value written to the line.
    last: u64,
    /// Spins before each yield of a wait.
    spins: u32,
}

impl PingLine {
    /// Collective: rank 0 creates the line's object, rank 1 maps it, rank 0 removes its
    /// name once both have it mapped.
    pub(crate) fn setup(ep: &Endpoint) -> Result<PingLine, BenchError> {
        /// Rank 0's name for the object, removed however setup ends (an error or a panic
        /// between creating and sharing it must not leave it in /dev/shm).
        struct Name(Option<String>);
        impl Drop for Name {
            fn drop(&mut self) {
                if let Some(n) = &self.0 {
                    unlink(n);
                }
            }
        }
        let me = ep.rank();
        let name = line_name();
        let mut line = None;
        let mut owned = Name(None);
        if me == 0 {
            line = Some(
                SharedLine::map(&name, true).map_err(|e| BenchError::Os("shm_open(create)", e))?,
            );
            owned.0 = Some(name.clone());
        }
        ep.barrier()?;
        if me == 1 {
            line = Some(SharedLine::map(&name, false).map_err(|e| BenchError::Os("shm_open", e))?);
        }
        ep.barrier()?;
        drop(owned);
        let spins = if ep.config().oversubscribed {
            SPINS_OVERSUBSCRIBED
        } else {
            SPINS_BEFORE_YIELD
        };
        Ok(PingLine {
            line,
            last: 0,
            spins,
        })
    }

    /// Rank 0: one round trip.
    #[inline]
    pub(crate) fn ping(&mut self) {
        if let Some(l) = &self.line {
            let w = l.word();
            w.store(self.last + 1, Ordering::Release);
            wait_for(w, self.last + 2, self.spins);
            self.last += 2;
        }
    }

    /// Rank 1: answer one round trip.
    #[inline]
    pub(crate) fn pong(&mut self) {
        if let Some(l) = &self.line {
            let w = l.word();
            wait_for(w, self.last + 1, self.spins);
            w.store(self.last + 2, Ordering::Release);
            self.last += 2;
        }
    }
}

/// Rank 0 only: memcpy bandwidth from `src` to `dst` (two local buffers of at least the
/// largest size) at each of `sizes`.
pub(crate) fn memcpy_bw(plan: &Plan, sizes: &[usize], src: &[u8], dst: &mut [u8]) -> Vec<Row> {
    let room = src.len().min(dst.len());
    let mut rows = Vec::new();
    for &n in sizes.iter().filter(|&&n| n <= room) {
        let (samples, batch) = plan.rma_shape(n);
        let s = time_batched::<()>(plan.warmup(samples), samples, batch, || {
            // SAFETY: both buffers hold at least `n` bytes (filtered above) and are distinct
            // allocations; black_box keeps the compiler from eliding or merging the copies.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    black_box(src.as_ptr()),
                    black_box(dst.as_mut_ptr()),
                    n,
                );
            }
            Ok(())
        })
        .unwrap_or_else(|()| unreachable!());
        black_box(&mut *dst);
        rows.push(Row::bandwidth("floor", "memcpy_bw", n, &s, batch));
    }
    rows
}

/// The memcpy floor paired with a transfer: local copies of the same size into or out of a
/// scratch buffer, timed interleaved with the transfer (see `measure::time_paired`).
#[derive(Debug)]
pub(crate) struct CopyFloor {
    scratch: Vec<u8>,
}

impl CopyFloor {
    /// A floor for copies of up to `max` bytes.
    pub(crate) fn new(max: usize) -> CopyFloor {
        CopyFloor {
            scratch: crate::pattern(max),
        }
    }

    /// Copy `src` into the scratch buffer (the floor of a put or a Long payload).
    #[inline]
    pub(crate) fn copy_in(&mut self, src: &[u8]) {
        let n = src.len().min(self.scratch.len());
        // SAFETY: both ranges hold `n` bytes and belong to distinct allocations.
        unsafe {
            std::ptr::copy_nonoverlapping(
                black_box(src.as_ptr()),
                black_box(self.scratch.as_mut_ptr()),
                n,
            );
        }
    }

    /// Copy from the scratch buffer into `dst` (the floor of a get).
    #[inline]
    pub(crate) fn copy_out(&self, dst: &mut [u8]) {
        let n = dst.len().min(self.scratch.len());
        // SAFETY: both ranges hold `n` bytes and belong to distinct allocations.
        unsafe {
            std::ptr::copy_nonoverlapping(
                black_box(self.scratch.as_ptr()),
                black_box(dst.as_mut_ptr()),
                n,
            );
        }
    }
}
