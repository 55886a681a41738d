//! The raw MPI floors of the mpi conduit (cargo feature `mpi`), measured in the same run by
//! the same two processes with plain MPI calls on a duplicate of `MPI_COMM_WORLD`, so that no
//! amnet message can match them:
//!
//! - `raw_mpi_rtt`: an 8-byte `MPI_Send`/`MPI_Recv` ping-pong between ranks 0 and 1;
//! - `raw_mpi_am_rtt`: the MPI calls of the conduit's Short round trip without amnet
//!   ([`am_pattern_rtt`]), reported with its ratio to `raw_mpi_rtt`;
//! - `raw_mpi_put_lat`: `MPI_Put` of 8 bytes to rank 1 plus `MPI_Win_flush`, in a
//!   passive-target epoch (`MPI_Win_lock_all`) on a window of the benchmark's own;
//! - `raw_mpi_bw`: rank 0 sends messages of each sweep size to rank 1, which acknowledges each
//!   with one byte (the same one-transfer-per-sample shape as amnet's blocking put/Long);
//! - `raw_mpi_barrier`: `MPI_Barrier` over every rank;
//! - `raw_mpi_fetch_add_lat`, `raw_mpi_cas_lat` ([`atomics`]): `MPI_Fetch_and_op` (`MPI_SUM`)
//!   and `MPI_Compare_and_swap` on a `u64` of rank 1's part of a shared-memory window plus
//!   `MPI_Win_flush`, in a passive-target epoch, rank 1 idle (the counterpart of amnet's
//!   atomic round trips on the mpi conduit).
//!
//! Every rank takes part in the collectives; ranks other than 0 and 1 only wait.
//!
//! [`MpiColl`] is the `coll` suite's peer: MPI's collectives on a communicator of their own,
//! timed call by call against amnet's (see `coll`).

use std::ffi::c_void;
use std::time::Instant;

use amnet::Endpoint;
use amnet_mpi::mpi::ffi;
use amnet_mpi::mpi::topology::{Color, SimpleCommunicator};
use amnet_mpi::mpi::traits::{AsRaw, Communicator, CommunicatorCollectives, Destination, Source};

use crate::measure::Samples;
use crate::report::Row;
use crate::{BenchError, Plan};

fn mpi_err(what: &'static str, rc: i32) -> Result<(), BenchError> {
    if rc == 0 {
        Ok(())
    } else {
        Err(BenchError::Usage(format!(
            "{what} failed with MPI error {rc}"
        )))
    }
}

/// Times `n` calls of `f` after `warmup` untimed ones; one sample per call.
fn each(warmup: usize, n: usize, mut f: impl FnMut()) -> Samples {
    for _ in 0..warmup {
        f();
    }
    let mut ns = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        f();
        ns.push(t.elapsed().as_nanos() as f64);
    }
    Samples::from_ns(ns)
}

/// Collective: every raw MPI floor. Returns the rows on rank 0.
pub(crate) fn run(ep: &Endpoint, plan: &Plan, sizes: &[usize]) -> Result<Vec<Row>, BenchError> {
    let me = ep.rank();
    let comm = SimpleCommunicator::world().duplicate();
    let mut rows = Vec::new();
    let warm = plan.warmup(plan.iters);
    // Ping-pong.
    let mut b = [0u8; 8];
    let n = plan.iters;
    if me == 0 {
        let peer = comm.process_at_rank(1);
        let s = each(warm, n, || {
            peer.send(&b[..]);
            peer.receive_into(&mut b[..]);
        });
        rows.push(Row::latency("floor", "raw_mpi_rtt", 8, &s, 1));
    } else if me == 1 {
        let peer = comm.process_at_rank(0);
        for _ in 0..warm + n {
            peer.receive_into(&mut b[..]);
            peer.send(&b[..]);
        }
    }
    comm.barrier();
    if let Some(s) = am_pattern_rtt(me, warm, n)? {
        rows.push(Row::latency(
            "floor",
            "raw_mpi_am_rtt",
            AM_PATTERN_BYTES,
            &s,
            1,
        ));
    }

    // MPI_Put + flush on a window of our own.
    let mut base: *mut u8 = std::ptr::null_mut();
    // SAFETY: reading an immutable handle exported by the rsmpi shim.
    let mut win = unsafe { ffi::RSMPI_WIN_NULL };
    // SAFETY: collective over `comm` on every rank; `base` receives the address of the memory
    // MPI allocates (MPI_Win_allocate takes a pointer to the pointer); `win` is writable.
    let rc = unsafe {
        ffi::MPI_Win_allocate(
            64,
            1,
            ffi::RSMPI_INFO_NULL,
            comm.as_raw(),
            (&mut base as *mut *mut u8).cast::<c_void>(),
            &mut win,
        )
    };
    mpi_err("MPI_Win_allocate", rc)?;
    let nocheck = i32::try_from(ffi::MPI_MODE_NOCHECK).unwrap_or(0);
    // SAFETY: `win` was just created; no epoch is open on it.
    mpi_err("MPI_Win_lock_all", unsafe {
        ffi::MPI_Win_lock_all(nocheck, win)
    })?;
    if me == 0 {
        let src = [7u8; 8];
        let mut fail = 0;
        let s = each(warm, n, || {
            // SAFETY: `src` lives across the call and the flush completes the put before
            // `src` could change; rank 1's window holds 64 bytes and we write 8 at 0.
            let rc = unsafe {
                ffi::MPI_Put(
                    src.as_ptr().cast::<c_void>(),
                    8,
                    ffi::RSMPI_UINT8_T,
                    1,
                    0,
                    8,
                    ffi::RSMPI_UINT8_T,
                    win,
                )
            };
            // SAFETY: `win` is in a lock_all epoch from this rank.
            let rf = unsafe { ffi::MPI_Win_flush(1, win) };
            if rc != 0 || rf != 0 {
                fail += 1;
            }
        });
        if fail > 0 {
            return Err(BenchError::Usage(format!(
                "raw MPI_Put/MPI_Win_flush failed {fail} times"
            )));
        }
        rows.push(Row::latency("floor", "raw_mpi_put_lat", 8, &s, 1));
    }
    // SAFETY: this rank holds a lock_all epoch on `win`.
    mpi_err("MPI_Win_unlock_all", unsafe {
        ffi::MPI_Win_unlock_all(win)
    })?;
    // SAFETY: collective; no epoch is open on `win` any more and nothing uses `base`.
    mpi_err("MPI_Win_free", unsafe { ffi::MPI_Win_free(&mut win) })?;

    // Bandwidth: one message per sample, acknowledged with one byte.
    let max = sizes.iter().copied().max().unwrap_or(0);
    let mut buf = crate::pattern(max.max(1));
    let mut ack = [0u8; 1];
    for &sz in sizes {
        let (samples, _) = plan.rma_shape(sz);
        let warm = plan.warmup(samples);
        if me == 0 {
            let peer = comm.process_at_rank(1);
            let s = each(warm, samples, || {
                peer.send(&buf[..sz]);
                peer.receive_into(&mut ack[..]);
            });
            rows.push(Row::bandwidth("floor", "raw_mpi_bw", sz, &s, 1));
        } else if me == 1 {
            let peer = comm.process_at_rank(0);
            for _ in 0..warm + samples {
                peer.receive_into(&mut buf[..sz]);
                peer.send(&ack[..]);
            }
        }
    }
    comm.barrier();

    // Barrier.
    let s = each(warm, n, || comm.barrier());
    if me == 0 {
        rows.push(Row::latency("floor", "raw_mpi_barrier", 0, &s, 1));
    }
    Ok(rows)
}

/// Bytes of each message of `raw_mpi_am_rtt`: a Short header with one argument.
const AM_PATTERN_BYTES: usize = 16;
/// Receive classes of the `raw_mpi_am_rtt` pattern, each on a communicator of its own, as
/// the mpi conduit's lanes (exit, credits, small and large replies, small and large
/// requests).
const AM_PATTERN_LANES: usize = 6;
/// Lanes of the pattern's requests and replies (the conduit's small request and reply
/// lanes).
const AM_PATTERN_REQ: usize = 4;
const AM_PATTERN_REP: usize = 2;

/// The MPI calls of the `raw_mpi_am_rtt` pattern on one rank.
struct AmPattern {
    lanes: Vec<SimpleCommunicator>,
    bufs: Vec<[u8; 64]>,
    reqs: Vec<ffi::MPI_Request>,
    idx: Vec<i32>,
    st: Vec<ffi::MPI_Status>,
    /// The lane whose receive completed last.
    hot: usize,
    peer: i32,
    null: ffi::MPI_Request,
    /// [`AM_PATTERN_BYTES`] and [`AM_PATTERN_LANES`] as MPI counts.
    msg_len: i32,
    nlanes: i32,
}

impl AmPattern {
    /// Post the receive of lane `k`.
    fn post(&mut self, k: usize) -> Result<(), BenchError> {
        // SAFETY: `bufs[k]` is neither read nor written until the receive completes (the
        // test that reports it) or is cancelled in `Drop`; `reqs[k]` is writable.
        let rc = unsafe {
            ffi::MPI_Irecv(
                self.bufs[k].as_mut_ptr().cast::<c_void>(),
                64,
                ffi::RSMPI_UINT8_T,
                ffi::RSMPI_ANY_SOURCE,
                0,
                self.lanes[k].as_raw(),
                &mut self.reqs[k],
            )
        };
        mpi_err("MPI_Irecv", rc)
    }

    /// Start sending the message on `lane`.
    fn isend(&self, lane: usize) -> Result<ffi::MPI_Request, BenchError> {
        static MSG: [u8; AM_PATTERN_BYTES] = [7; AM_PATTERN_BYTES];
        let mut req = self.null;
        // SAFETY: `MSG` is static; `req` is writable.
        let rc = unsafe {
            ffi::MPI_Isend(
                MSG.as_ptr().cast::<c_void>(),
                self.msg_len,
                ffi::RSMPI_UINT8_T,
                self.peer,
                0,
                self.lanes[lane].as_raw(),
                &mut req,
            )
        };
        mpi_err("MPI_Isend", rc)?;
        Ok(req)
    }

    /// Test a send once: the request, null once complete.
    fn test(&self, mut req: ffi::MPI_Request) -> Result<ffi::MPI_Request, BenchError> {
        let mut flag = 0;
        // SAFETY: `req` is an active send (a completed test nulls it).
        let rc = unsafe { ffi::MPI_Test(&mut req, &mut flag, ffi::RSMPI_STATUS_IGNORE) };
        mpi_err("MPI_Test", rc)?;
        Ok(req)
    }

    /// Test a send until it completes.
    fn complete(&self, mut req: ffi::MPI_Request) -> Result<(), BenchError> {
        while req != self.null {
            let mut flag = 0;
            // SAFETY: `req` is an active send (a completed test nulls it).
            let rc = unsafe { ffi::MPI_Test(&mut req, &mut flag, ffi::RSMPI_STATUS_IGNORE) };
            mpi_err("MPI_Test", rc)?;
        }
        Ok(())
    }

    /// Wait for a message as the conduit's poll does; returns its lane, whose receive the
    /// caller posts again after its next send (where the conduit posts it: at the start of
    /// the next poll).
    fn wait(&mut self) -> Result<usize, BenchError> {
        let mut calls = 0u32;
        let k = loop {
            if calls % 4 == 0 || self.reqs[self.hot] == self.null {
                let mut out = 0i32;
                // SAFETY: `reqs` holds AM_PATTERN_LANES handles, `idx` and `st` as many
                // entries.
                let rc = unsafe {
                    ffi::MPI_Testsome(
                        self.nlanes,
                        self.reqs.as_mut_ptr(),
                        &mut out,
                        self.idx.as_mut_ptr(),
                        self.st.as_mut_ptr(),
                    )
                };
                mpi_err("MPI_Testsome", rc)?;
                // SAFETY: reading an immutable constant exported by the rsmpi shim.
                if out > 0 && out != unsafe { ffi::RSMPI_UNDEFINED } {
                    break usize::try_from(self.idx[0]).unwrap_or(0);
                }
            } else {
                let mut flag = 0;
                // SAFETY: `reqs[hot]` is a posted receive; `st[0]` is writable.
                let rc =
                    unsafe { ffi::MPI_Test(&mut self.reqs[self.hot], &mut flag, &mut self.st[0]) };
                mpi_err("MPI_Test", rc)?;
                if flag != 0 {
                    break self.hot;
                }
            }
            calls += 1;
        };
        self.hot = k;
        Ok(k)
    }
}

impl Drop for AmPattern {
    fn drop(&mut self) {
        for r in self.reqs.iter_mut().filter(|r| **r != self.null) {
            // SAFETY: `r` is a posted receive that no message will match any more (both ranks
            // passed the closing barrier); cancelling it and waiting for the cancellation
            // frees it before `bufs` goes.
            unsafe {
                ffi::MPI_Cancel(r);
                ffi::MPI_Wait(r, ffi::RSMPI_STATUS_IGNORE);
            }
        }
    }
}

/// Collective: `raw_mpi_am_rtt`, the round trip of the MPI calls the mpi conduit makes for a
/// Short request and its reply, without amnet around them (the floor of its design on this
/// MPI). Both ranks keep one `MPI_ANY_SOURCE` receive posted on each of
/// [`AM_PATTERN_LANES`] duplicates of `MPI_COMM_WORLD`; rank 0 sends the request with
/// `MPI_Isend` on the request lane, rank 1 answers on the reply lane, and each tests its send
/// once at once. A rank waits as the conduit's poll does (an `MPI_Testsome` over every lane in
/// four calls, an `MPI_Test` of the receive that completed last in the others) and posts the
/// completed receive again after its next send, off the round trip's path as in the conduit.
/// Returns the samples on rank 0.
fn am_pattern_rtt(me: u32, warm: usize, n: usize) -> Result<Option<Samples>, BenchError> {
    let world = SimpleCommunicator::world();
    let lanes: Vec<SimpleCommunicator> = (0..AM_PATTERN_LANES).map(|_| world.duplicate()).collect();
    if me > 1 {
        // The barriers of ranks 0 and 1, before and after their round trips.
        world.barrier();
        world.barrier();
        return Ok(None);
    }
    // SAFETY: reading an immutable constant exported by the rsmpi shim.
    let null = unsafe { ffi::RSMPI_REQUEST_NULL };
    let mut p = AmPattern {
        lanes,
        bufs: vec![[0u8; 64]; AM_PATTERN_LANES],
        reqs: vec![null; AM_PATTERN_LANES],
        idx: vec![0; AM_PATTERN_LANES],
        // SAFETY: an all-zero MPI_Status is a valid value of the plain C struct.
        st: (0..AM_PATTERN_LANES)
            .map(|_| unsafe { std::mem::zeroed() })
            .collect(),
        hot: if me == 0 {
            AM_PATTERN_REP
        } else {
            AM_PATTERN_REQ
        },
        peer: i32::from(me == 0),
        msg_len: count(AM_PATTERN_BYTES)?,
        nlanes: count(AM_PATTERN_LANES)?,
        null,
    };
    for k in 0..AM_PATTERN_LANES {
        p.post(k)?;
    }
    world.barrier();
    let mut out = None;
    // The conduit tests a small send once right after MPI_Isend (it usually completes
    // there); one that did not is tested again by later polls.
    if me == 0 {
        let mut ns = Vec::with_capacity(n);
        let mut done = None;
        for i in 0..warm + n {
            let t = Instant::now();
            let req = p.isend(AM_PATTERN_REQ)?;
            let req = p.test(req)?;
            if let Some(k) = done.take() {
                p.post(k)?;
            }
            done = Some(p.wait()?);
            p.complete(req)?;
            if i >= warm {
                ns.push(t.elapsed().as_nanos() as f64);
            }
        }
        if let Some(k) = done {
            p.post(k)?;
        }
        out = Some(Samples::from_ns(ns));
    } else {
        for _ in 0..warm + n {
            let k = p.wait()?;
            let req = p.isend(AM_PATTERN_REP)?;
            let req = p.test(req)?;
            p.post(k)?;
            p.complete(req)?;
        }
    }
    world.barrier();
    Ok(out)
}

/// Collective: the raw MPI atomic round trips (`raw_mpi_fetch_add_lat`, `raw_mpi_cas_lat`) on
/// a window of `MPI_Win_allocate_shared` over the job's ranks (Open MPI's osc/sm: its atomics
/// are the processor's on the shared memory, the fastest MPI offers on one host). Returns the
/// rows on rank 0; none when the ranks span several hosts.
///
/// A window of `MPI_Win_allocate` would get Open MPI 4.1's osc/rdma here, whose atomics over
/// btl/vader crashed rank 1 (SIGSEGV in `mca_btl_vader_poll_handle_frag`, seen in a core dump)
/// in this process though not in a C program doing the same calls.
pub(crate) fn atomics(ep: &Endpoint, plan: &Plan) -> Result<Vec<Row>, BenchError> {
    let me = ep.rank();
    let world = SimpleCommunicator::world();
    let comm = world.split_shared(0);
    let mut rows = Vec::new();
    if comm.size() != world.size() {
        return Ok(rows);
    }
    let warm = plan.warmup(plan.iters);
    let n = plan.iters;
    let mut base: *mut u8 = std::ptr::null_mut();
    // SAFETY: reading an immutable handle exported by the rsmpi shim.
    let mut win = unsafe { ffi::RSMPI_WIN_NULL };
    // SAFETY: collective over `comm` on every rank; `base` receives the address of this
    // rank's part of the shared memory; `win` is writable.
    let rc = unsafe {
        ffi::MPI_Win_allocate_shared(
            64,
            1,
            ffi::RSMPI_INFO_NULL,
            comm.as_raw(),
            (&mut base as *mut *mut u8).cast::<c_void>(),
            &mut win,
        )
    };
    mpi_err("MPI_Win_allocate_shared", rc)?;
    if !base.is_null() {
        // SAFETY: this rank's 64 bytes of the window, not yet exposed to any access epoch.
        unsafe { std::ptr::write_bytes(base, 0, 64) };
    }
    comm.barrier();
    let nocheck = i32::try_from(ffi::MPI_MODE_NOCHECK).unwrap_or(0);
    // SAFETY: `win` was just created; no epoch is open on it.
    mpi_err("MPI_Win_lock_all", unsafe {
        ffi::MPI_Win_lock_all(nocheck, win)
    })?;
    if me == 0 {
        let one = 1u64;
        let mut old = 0u64;
        let mut fail = 0;
        let s = each(warm, n, || {
            // SAFETY: `one` and `old` live across the call and the flush completes it; rank
            // 1's window holds 64 bytes and the element is at displacement 0.
            let rc = unsafe {
                ffi::MPI_Fetch_and_op(
                    (&one as *const u64).cast::<c_void>(),
                    (&mut old as *mut u64).cast::<c_void>(),
                    ffi::RSMPI_UINT64_T,
                    1,
                    0,
                    ffi::RSMPI_SUM,
                    win,
                )
            };
            // SAFETY: `win` is in a lock_all epoch from this rank.
            let rf = unsafe { ffi::MPI_Win_flush(1, win) };
            if rc != 0 || rf != 0 {
                fail += 1;
            }
        });
        rows.push(Row::latency("floor", "raw_mpi_fetch_add_lat", 8, &s, 1));
        let mut cur = old + 1;
        let s = each(warm, n, || {
            let new = cur + 1;
            // SAFETY: as above; `cur`, `new` and `old` live across the call and the flush.
            let rc = unsafe {
                ffi::MPI_Compare_and_swap(
                    (&new as *const u64).cast::<c_void>(),
                    (&cur as *const u64).cast::<c_void>(),
                    (&mut old as *mut u64).cast::<c_void>(),
                    ffi::RSMPI_UINT64_T,
                    1,
                    0,
                    win,
                )
            };
            // SAFETY: `win` is in a lock_all epoch from this rank.
            let rf = unsafe { ffi::MPI_Win_flush(1, win) };
            if rc != 0 || rf != 0 || old != cur {
                fail += 1;
            }
            cur = new;
        });
        if fail > 0 {
            return Err(BenchError::Usage(format!(
                "raw MPI_Fetch_and_op/MPI_Compare_and_swap failed (or swapped nothing) {fail} \
                 times"
            )));
        }
        rows.push(Row::latency("floor", "raw_mpi_cas_lat", 8, &s, 1));
    }
    comm.barrier();
    // SAFETY: this rank holds a lock_all epoch on `win`.
    mpi_err("MPI_Win_unlock_all", unsafe {
        ffi::MPI_Win_unlock_all(win)
    })?;
    // SAFETY: collective; no epoch is open on `win` any more and nothing uses `base`.
    mpi_err("MPI_Win_free", unsafe { ffi::MPI_Win_free(&mut win) })?;
    Ok(rows)
}

/// Collective: `MPI_Barrier` over every rank on a duplicate of `MPI_COMM_WORLD` of its own
/// (the `barrier` suite's floor, timed in its blocks).
pub(crate) fn world_barrier() -> impl FnMut() {
    let comm = SimpleCommunicator::world().duplicate();
    move || comm.barrier()
}

/// MPI's collectives over a duplicate of `MPI_COMM_WORLD` (or its even or odd half), with
/// buffers for the largest size the `coll` suite measures.
pub(crate) struct MpiColl {
    comm: SimpleCommunicator,
    ranks: usize,
    rank: usize,
    src: Vec<u8>,
    dst: Vec<u8>,
    /// The rank's elements of the array reductions and its scan results.
    elems: Vec<u64>,
    scan: Vec<u64>,
}

/// Converts a byte or element count to MPI's `int`.
fn count(n: usize) -> Result<i32, BenchError> {
    i32::try_from(n).map_err(|_| BenchError::Usage(format!("{n} exceeds MPI's int count")))
}

impl MpiColl {
    /// Collective over the job: the peer for a `coll` run on the whole job, or with `split2`
    /// on the half (even or odd ranks) this rank belongs to; `max` is the largest size.
    pub(crate) fn new(ep: &Endpoint, split2: bool, max: usize) -> Result<MpiColl, BenchError> {
        let world = SimpleCommunicator::world();
        let me = ep.rank();
        let comm = if split2 {
            let key = i32::try_from(me).unwrap_or(0);
            world
                .split_by_color_with_key(Color::with_value(i32::from(me % 2 == 1)), key)
                .ok_or(BenchError::Usage("MPI_Comm_split gave no half".into()))?
        } else {
            world.duplicate()
        };
        let ranks = usize::try_from(comm.size()).unwrap_or(1);
        let rank = usize::try_from(comm.rank()).unwrap_or(0);
        let src = crate::pattern(max * ranks);
        let dst = vec![0u8; max * ranks];
        Ok(MpiColl {
            comm,
            ranks,
            rank,
            src,
            dst,
            elems: Vec::new(),
            scan: Vec::new(),
        })
    }

    /// This rank's elements of a `count`-element u64 array in the suite's block-cyclic
    /// layout with one block per rank: small values, as on the amnet side.
    fn my_elems(&mut self, count: usize) {
        let b = count.div_ceil(self.ranks).max(1);
        let lo = (self.rank * b).min(count);
        let hi = ((self.rank + 1) * b).min(count);
        if self.elems.len() != hi - lo || self.elems.first() != Some(&(lo as u64 % 251 + 1)) {
            self.elems = (lo..hi).map(|i| i as u64 % 251 + 1).collect();
            self.scan = vec![0; hi - lo];
        }
    }
}

impl crate::coll::Peer for MpiColl {
    fn counterpart(&self, op: &str) -> Option<&'static str> {
        Some(match op {
            "broadcast" => "MPI_Bcast",
            "scatter" => "MPI_Scatter",
            "gather" => "MPI_Gather",
            "gather_all" => "MPI_Allgather",
            "exchange" => "MPI_Alltoall",
            "reduce_to_all" => "local+MPI_Allreduce",
            "prefix_reduce" => "local+MPI_Exscan",
            "reduce_elems_to_all" => "MPI_Allreduce",
            "scan_elems" => "MPI_Scan",
            "reduce_elems" => "MPI_Reduce",
            _ => return None,
        })
    }

    fn barrier(&mut self) -> Result<(), BenchError> {
        self.comm.barrier();
        Ok(())
    }

    fn call(&mut self, op: &str, n: usize) -> Result<(), BenchError> {
        let c = self.comm.as_raw();
        let byte = || {
            // SAFETY: reading an immutable handle exported by the rsmpi shim.
            unsafe { ffi::RSMPI_UINT8_T }
        };
        let cnt = count(n)?;
        if self.src.len() < n * self.ranks {
            return Err(BenchError::Usage(format!(
                "{n} bytes exceeds the MPI buffers"
            )));
        }
        let (src, dst) = (
            self.src.as_ptr().cast::<c_void>(),
            self.dst.as_mut_ptr().cast::<c_void>(),
        );
        let b = byte();
        // SAFETY: the buffers hold `n * ranks` bytes (checked above), the counts describe at
        // most that many, and each call completes before the buffers change.
        let data = |f: &str| unsafe {
            match f {
                "broadcast" => Some(ffi::MPI_Bcast(dst, cnt, b, 0, c)),
                "scatter" => Some(ffi::MPI_Scatter(src, cnt, b, dst, cnt, b, 0, c)),
                "gather" => Some(ffi::MPI_Gather(src, cnt, b, dst, cnt, b, 0, c)),
                "gather_all" => Some(ffi::MPI_Allgather(src, cnt, b, dst, cnt, b, c)),
                "exchange" => Some(ffi::MPI_Alltoall(src, cnt, b, dst, cnt, b, c)),
                _ => None,
            }
        };
        let rc = match op {
            "broadcast" | "scatter" | "gather" | "gather_all" | "exchange" => data(op).unwrap_or(0),
            "reduce_elems_to_all" | "scan_elems" | "reduce_elems" => {
                let (u64t, op_sum) = {
                    // SAFETY: reading immutable handles exported by the rsmpi shim.
                    unsafe { (ffi::RSMPI_UINT64_T, ffi::RSMPI_SUM) }
                };
                let k = count(n / 8)?;
                // SAFETY: `src` and `dst` hold `n * ranks >= n` bytes, `k` u64 elements each
                // way; the call completes before either changes.
                unsafe {
                    if op == "scan_elems" {
                        ffi::MPI_Scan(src, dst, k, u64t, op_sum, c)
                    } else if op == "reduce_elems" {
                        ffi::MPI_Reduce(src, dst, k, u64t, op_sum, 0, c)
                    } else {
                        ffi::MPI_Allreduce(src, dst, k, u64t, op_sum, c)
                    }
                }
            }
            "reduce_to_all" | "prefix_reduce" => {
                self.my_elems(n / 8);
                let mine = self.elems.iter().fold(0u64, |a, &v| a.wrapping_add(v));
                let mut total = 0u64;
                let sum = std::hint::black_box(mine);
                let (u64t, op_sum) = {
                    // SAFETY: reading immutable handles exported by the rsmpi shim.
                    unsafe { (ffi::RSMPI_UINT64_T, ffi::RSMPI_SUM) }
                };
                let tp = (&mut total as *mut u64).cast::<c_void>();
                let sp = (&sum as *const u64).cast::<c_void>();
                if op == "reduce_to_all" {
                    // SAFETY: one u64 in, one out, both live across the call.
                    unsafe { ffi::MPI_Allreduce(sp, tp, 1, u64t, op_sum, c) }
                } else {
                    // SAFETY: as above; MPI_Exscan leaves rank 0's `total` alone (it stays 0).
                    let rc = unsafe { ffi::MPI_Exscan(sp, tp, 1, u64t, op_sum, c) };
                    let mut carry = if self.rank == 0 { 0 } else { total };
                    for (d, &v) in self.scan.iter_mut().zip(&self.elems) {
                        carry = carry.wrapping_add(v);
                        *d = carry;
                    }
                    std::hint::black_box(&self.scan);
                    rc
                }
            }
            _ => return Err(BenchError::Usage(format!("no MPI counterpart of {op}"))),
        };
        mpi_err("MPI collective", rc)
    }
}
