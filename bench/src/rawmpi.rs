//! The raw MPI floors of the mpi conduit (cargo feature `mpi`), measured in the same run by
//! the same two processes with plain MPI calls on a duplicate of `MPI_COMM_WORLD`, so that no
//! amnet message can match them:
//!
//! - `raw_mpi_rtt`: an 8-byte `MPI_Send`/`MPI_Recv` ping-pong between ranks 0 and 1;
//! - `raw_mpi_put_lat`: `MPI_Put` of 8 bytes to rank 1 plus `MPI_Win_flush`, in a
//!   passive-target epoch (`MPI_Win_lock_all`) on a window of the benchmark's own;
//! - `raw_mpi_bw`: rank 0 sends messages of each sweep size to rank 1, which acknowledges each
//!   with one byte (the same one-transfer-per-sample shape as amnet's blocking put/Long);
//! - `raw_mpi_barrier`: `MPI_Barrier` over every rank.
//!
//! Every rank takes part in the collectives; ranks other than 0 and 1 only wait.

use std::ffi::c_void;
use std::time::Instant;

use amnet::Endpoint;
use amnet_mpi::mpi::ffi;
use amnet_mpi::mpi::topology::SimpleCommunicator;
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
