//! Start-up: MPI initialization (or joining the client's), the communicators, the receive
//! pool and the engine (`MpiConduit::from_env`).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use amnet_core::config::Source;
use amnet_core::{AwakeWindow, Error, Result};
use mpi::Threading;

use super::exit::{lifeline_connect, RUNNING};
use super::receive::{Buffers, Rx, Slot, SlotKind, NO_SLOT};
use super::send::{Peer, Tx, REAP_AT};
use super::settings::Settings;
use super::Scratch;
use super::{
    lock, Engine, MpiConduit, LANE_TAGS, LARGE_BYTES, REP, REQ, SMALL_BYTES, TAG_CREDIT, TAG_EXIT,
    TAG_MSG,
};
use crate::raw::{self, Completions};
use crate::wire;

static UNIVERSE: OnceLock<mpi::environment::Universe> = OnceLock::new();

/// Start MPI (or join the client's initialization) and return the thread level granted.
fn init_mpi() -> Result<Threading> {
    if raw::finalized() {
        return Err(Error::Config(
            "MPI was already finalized in this process; the mpi conduit needs it running".into(),
        ));
    }
    match mpi::initialize_with_threading(Threading::Multiple) {
        Some((universe, level)) => {
            // Kept for the life of the process and never dropped: dropping the universe would
            // finalize MPI, which the conduit does itself at exit.
            let _ = UNIVERSE.set(universe);
            Ok(level)
        }
        // The client initialized MPI itself.
        None => Ok(mpi::environment::threading_support()),
    }
}

impl MpiConduit {
    /// Join the MPI job this process belongs to (started by `mpirun`, or a singleton).
    ///
    /// Initializes MPI requesting `MPI_THREAD_MULTIPLE`, unless the client initialized it
    /// already (then its level is used and the client's initialization is shared). Below
    /// `MPI_THREAD_MULTIPLE` every MPI call of the conduit is serialized behind one lock (see
    /// [`with_mpi_lock`](crate::with_mpi_lock)). The rank and size are those of
    /// `MPI_COMM_WORLD`; amnet's traffic uses a private duplicate of it.
    ///
    /// Collective: every rank of the job calls it once. A second call in the same process is a
    /// configuration error. Environment: `AMNET_MPI_CREDITS` (messages in flight per peer and
    /// class, default 32), `AMNET_MPI_EXIT_GRACE` (seconds, default 2), `AMNET_BOOT_TIMEOUT`,
    /// `AMNET_VERBOSE` (rank 0 prints the MPI library and the thread level in use, and at
    /// attach which put/get path is in use), `AMNET_RMA` (`am`: no RMA window, put/get on the
    /// AM path), `AMNET_MPI_RMA_CHUNK` (bytes per `MPI_Put`/`MPI_Get`, default and at most
    /// 1 GiB), `AMNET_MPI_LONG_PUT` (Long payloads of at least this many bytes, default 256,
    /// are put into the target segment when put/get run natively).
    pub fn from_env() -> Result<MpiConduit> {
        Self::new(&Source::env())
    }

    /// [`MpiConduit::from_env`] with the settings of `src` (values set in code win over the
    /// environment; see `amnet_core::config`).
    pub fn new(src: &Source) -> Result<MpiConduit> {
        static CREATED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
        if CREATED.swap(true, Ordering::AcqRel) {
            return Err(Error::Config(
                "amnet::init called twice in one process (the mpi conduit exists already): a \
                 process is one rank; clone the Endpoint to use it from several threads"
                    .into(),
            ));
        }
        let settings = Settings::resolve(src)?;
        let level = init_mpi()?;
        raw::set_serialized(level != Threading::Multiple);
        let world = raw::world();
        let comm = raw::dup(world)?;
        let exit_comm = raw::dup(world)?;
        let mut lanes = [comm; LANE_TAGS as usize];
        for l in &mut lanes {
            *l = raw::dup(world)?;
        }
        let (rank, size) = raw::rank_size(comm)?;
        if let Some(path) = &settings.lifeline {
            lifeline_connect(path, rank);
        }
        let local = raw::ranks_on_this_node(comm)?;
        // The collectives' host scratch, where the whole job shares one node.
        let scratch = raw::node_scratch(comm, amnet_core::HOST_SCRATCH_BYTES)?.map(Scratch);
        // The node's cores, not this process's affinity: mpirun binds each rank to a core of
        // its own, which is not oversubscription.
        // SAFETY: sysconf has no preconditions.
        let cores = u32::try_from(unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) })
            .unwrap_or(1)
            .max(1);

        let small = size.saturating_mul(4).clamp(8, 128) as usize;
        let large = size.clamp(2, 8) as usize;
        let credit_slots = size.clamp(2, 16) as usize;
        // Test entries: the exit slot, one per in-order queue, one per large slot.
        let mut entries = 1;
        let mut slots = vec![Slot {
            kind: SlotKind::Exit,
            tag: TAG_EXIT,
            entry: 0,
            fifo: None,
        }];
        let mut sizes = vec![wire::CTRL_LEN];
        for _ in 0..credit_slots {
            slots.push(Slot {
                kind: SlotKind::Credit,
                tag: TAG_CREDIT,
                entry: entries,
                fifo: Some(0),
            });
            sizes.push(wire::CTRL_LEN);
        }
        entries += 1;
        for (class, fifo) in [(REP, 1), (REQ, 2)] {
            for _ in 0..small {
                slots.push(Slot {
                    kind: SlotKind::Msg(class),
                    tag: TAG_MSG[class][0],
                    entry: entries,
                    fifo: Some(fifo),
                });
                sizes.push(SMALL_BYTES);
            }
            entries += 1;
            for _ in 0..large {
                slots.push(Slot {
                    kind: SlotKind::Msg(class),
                    tag: TAG_MSG[class][1],
                    entry: entries,
                    fifo: None,
                });
                sizes.push(LARGE_BYTES);
                entries += 1;
            }
        }
        let nslots = slots.len();
        let rx = Rx {
            reqs: vec![raw::null_request(); slots.len()],
            slots,
            test: vec![raw::null_request(); entries],
            test_slot: vec![NO_SLOT; entries],
            fifo: [VecDeque::new(), VecDeque::new(), VecDeque::new()],
            hot: 0,
            long_reqs: Vec::new(),
            long_owner: Vec::new(),
            longs: Vec::new(),
            free_longs: Vec::new(),
            ready: [VecDeque::new(), VecDeque::new()],
            done: Completions::default(),
            long_done: Completions::default(),
            scratch: Vec::new(),
        };
        let credits = settings.credits;
        let tx_pending = Arc::new(AtomicUsize::new(0));
        let eng = Arc::new(Engine {
            rank,
            size,
            comm,
            lanes,
            exit_comm,
            level,
            oversubscribed: local > cores,
            cores,
            local_ranks: local,
            threshold: (credits / 2).max(1),
            peers: (0..size).map(|_| Peer::new(credits)).collect(),
            tx: Mutex::new(Tx {
                reqs: Vec::new(),
                bufs: Vec::new(),
                small: Vec::new(),
                large: Vec::new(),
                done: Completions::default(),
                scratch: Vec::new(),
                reap_at: REAP_AT,
                pending: tx_pending.clone(),
            }),
            tx_pending,
            rx: Mutex::new(rx),
            bufs: Buffers::new(sizes.into_iter()),
            returned: (0..nslots.div_ceil(64))
                .map(|_| AtomicU64::new(0))
                .collect(),
            seg: OnceLock::new(),
            scratch,
            rma: OnceLock::new(),
            exit: AtomicU64::new(0),
            awake: AwakeWindow::new(),
            state: AtomicU8::new(RUNNING),
            settings,
        });
        {
            let mut rx = lock(&eng.rx);
            for i in 0..nslots {
                eng.post(&mut rx, i)?;
            }
        }
        if eng.settings.verbose && rank == 0 {
            let lib = mpi::environment::library_version().unwrap_or_default();
            let lib = lib
                .split([',', '\n'])
                .next()
                .unwrap_or("unknown MPI library")
                .trim();
            let serial = if level == Threading::Multiple {
                String::new()
            } else {
                "; the library does not grant MPI_THREAD_MULTIPLE, so every MPI call is \
                 serialized behind one lock"
                    .to_string()
            };
            amnet_core::diag!(
                "amnet mpi: {lib}; thread level {} (requested MPI_THREAD_MULTIPLE){serial}; \
                 {size} ranks, {local} on this node, {cores} cores; {credits} credits per peer \
                 and class; receives posted per class: {small} small ({SMALL_BYTES} B), \
                 {large} large ({LARGE_BYTES} B)",
                level_name(level)
            );
        }
        Ok(MpiConduit { eng })
    }
}

/// The MPI name of a thread level.
fn level_name(level: Threading) -> &'static str {
    match level {
        Threading::Single => "MPI_THREAD_SINGLE",
        Threading::Funneled => "MPI_THREAD_FUNNELED",
        Threading::Serialized => "MPI_THREAD_SERIALIZED",
        Threading::Multiple => "MPI_THREAD_MULTIPLE",
    }
}
