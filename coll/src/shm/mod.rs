//! The smp-native collectives (spec/coll.md §3c): for a team whose members share memory
//! (every member maps every other member's host scratch), blocking collectives that send no
//! active message. Each member publishes its contribution in its own scratch area and reads
//! what it needs from its peers' areas (or, for sources in the segment, straight from their
//! segments), with the flag protocol of [`chan`].
//!
//! A member writes only its own destination, so the input modes need nothing beyond the
//! publication itself, except `IN_ALLSYNC`, which waits for every member's entry (the barrier
//! words; a broadcast's or scatter's root alone waits, for the others' entry words);
//! `OUT_ALLSYNC` waits for every member's `done` (not for a broadcast's or scatter's root
//! that marked itself done before it published), `OUT_MYSYNC` for the readers
//! of a contribution read in place from the segment, `OUT_NOSYNC` for nothing. Every
//! wait first checks its flag, then polls the endpoint and advances the engine with the
//! core's back-off, and fails with `Error::Hang` under `AMNET_HANG_TIMEOUT`.

pub(crate) mod chan;
pub(crate) mod images;

use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use amnet_core::{Endpoint, Error, Layer, Rank, Result};
use amnet_sync_modes::{InSync, Mode, OutSync};

use crate::engine::{Area as Mem, Shared};
use crate::plan::{runs_iter, Kind, Spec};
use chan::{Area, Published, INLINE, LOC_INLINE, LOC_SEG, LOC_SLOT, SLOT_BYTES};

/// Checks of a flag before a wait starts polling the endpoint, each after a spin-loop hint
/// (a PAUSE costs about 25 ns on the 2-core VM's EPYC); none on an oversubscribed host, where
/// the peer that sets the flag may need this rank's core.
const SPIN_CHECKS: u32 = 64;

/// Checks of a flag without the hint before the `SPIN_CHECKS` (a flag that its peer sets
/// within a few hundred nanoseconds is seen within a few of them, not up to a PAUSE late).
const FAST_CHECKS: u32 = 256;

/// On an oversubscribed host a wait polls the endpoint and advances the engine only at every
/// `OVERSUBSCRIBED_POLL`-th round, with the back-off after an idle poll, and at the others
/// checks its flag and yields the core: a conduit's poll can cost as much as the wait (Open
/// MPI's progress yields the core itself there), and the back-off's spin before its yields
/// only delays the rank that sets the flag.
const OVERSUBSCRIBED_POLL: u32 = 8;

/// The smallest vector of a vector reduction or scan that its readers fetch from a segment
/// they do not map (through the conduit's get) instead of the scratch: a get and the member's
/// wait for its readers cost more than the copy below it (mpi conduit, 2 ranks: 4 KiB in
/// place 0.71 us against 0.40 staged; 32 KiB 2.6 against 4.4).
const FETCH_MIN_BYTES: usize = 16 << 10;

/// The largest contribution in the segment that is staged through the scratch where the
/// readers would get it through the conduit (`ShmTeam::direct` false): below it the get's
/// fixed cost (about 1 us through an MPI window) is more than a copy in and out of the
/// scratch; above it the copy of lines just written by another core costs more.
const STAGE_MAX_BYTES: usize = 2 << 10;

/// The smallest gather block that the members put into the root's segment destination
/// themselves (in parallel) rather than the root copying every block.
const PUSH_MIN_BYTES: usize = 16 << 10;

/// The smp-native state of one team on this rank.
pub(crate) struct ShmTeam {
    /// Every member's area, in team order.
    areas: Vec<NonNull<Area>>,
    /// Job rank of every member.
    ranks: Vec<Rank>,
    me: usize,
    /// Every member's segment is mapped here (`RmaPath::Direct`): a contribution read in
    /// place is a copy. Otherwise a get through the conduit, and contributions that fit a
    /// slot are staged there instead.
    direct: bool,
    /// Every member's segment base and length where `direct` (the vector reductions fold
    /// contributions in place from them).
    segs: Vec<(NonNull<u8>, usize)>,
    /// Which area of every member's host scratch the team uses (`chan::NAREAS`).
    index: usize,
    /// The last epoch used.
    epoch: AtomicU64,
    /// Every member's `done` was last seen at least this.
    floor_seen: AtomicU64,
    /// A call is running (representative calls on a team are serialized by the client; this
    /// turns a violation into an error instead of two writers of one slot).
    busy: AtomicBool,
    /// Where a vector reduction folds a peer's vector from, fetched through the conduit
    /// where the segments are not mapped (at most a slot's bytes: larger vectors run in
    /// chunks).
    fetched: std::sync::Mutex<Vec<u8>>,
    /// Where this rank's image threads meet in an `ALL_THREADS` call.
    pub(crate) join: images::Join,
}

// SAFETY: the areas are host scratch that the conduit keeps mapped for the endpoint's life,
// and `Shared` (which owns the ShmTeam) holds the endpoint. They are accessed only through
// atomics and the flag protocol of `chan`.
unsafe impl Send for ShmTeam {}
// SAFETY: as above; the call-serialization flag keeps the owner-side writes to one thread.
unsafe impl Sync for ShmTeam {}

impl std::fmt::Debug for ShmTeam {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShmTeam")
            .field("members", &self.ranks.len())
            .field("me", &self.me)
            .field("epoch", &self.epoch.load(Ordering::Relaxed))
            .finish()
    }
}

/// Releases the call-serialization flag.
struct Busy<'a>(&'a AtomicBool);

impl Drop for Busy<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

impl ShmTeam {
    /// The world team's state (area 0, epochs from 0), when every rank maps every other
    /// rank's host scratch.
    pub(crate) fn world(ep: &Endpoint) -> Option<ShmTeam> {
        let ranks: Vec<Rank> = (0..ep.size()).collect();
        ShmTeam::new(ep, ranks, ep.rank(), 0, 0)
    }

    /// The state of the team of job ranks `ranks` (in team order, `me` among them) on area
    /// `area` of every member's host scratch, its epochs counted from `base` (see
    /// [`chan`]), when every member maps every other member's host scratch. The caller owns
    /// the area on this rank (no other team of this rank uses it) and calls
    /// [`ShmTeam::start`] before the team's first call.
    pub(crate) fn new(
        ep: &Endpoint,
        ranks: Vec<Rank>,
        me: Rank,
        area: usize,
        base: u64,
    ) -> Option<ShmTeam> {
        if area >= chan::NAREAS {
            return None;
        }
        let hooks = ep.layer(Layer::Coll);
        let areas = ranks
            .iter()
            .map(|&r| {
                let p = hooks.host_scratch(r)?;
                // Inside the layers' scratch: `area * AREA_BYTES + size_of::<Area>()` is at
                // most LAYER_SCRATCH_BYTES (NAREAS areas of AREA_BYTES, an Area fits one).
                Some(p.as_ptr().wrapping_add(area * chan::AREA_BYTES))
            })
            .collect::<Option<Vec<_>>>()?;
        // Contributions read in place lie in this rank's segment (`Shared::seg`).
        ep.segment_ptr().ok()?;
        // Every member's segment mapped here (`peer_segment`: `RmaPath::Direct`), or none.
        let segs: Vec<(NonNull<u8>, usize)> = ranks
            .iter()
            .map(|&r| Some((hooks.peer_segment(r)?, ep.segment_len_of(r).ok()?)))
            .collect::<Option<_>>()
            .unwrap_or_default();
        let direct = segs.len() == ranks.len();
        let me = ranks.iter().position(|&r| r == me)?;
        Some(ShmTeam {
            // SAFETY (of the later dereferences, `area`): the conduit's host scratch is
            // page-aligned, zero-filled at start-up, LAYER_SCRATCH_BYTES long (NAREAS areas of
            // AREA_BYTES, page multiples, each holding an `Area`: checked at compile time),
            // used only by this layer, and mapped for the endpoint's life.
            areas: areas
                .into_iter()
                .map(|p| NonNull::new(p.cast::<Area>()))
                .collect::<Option<Vec<_>>>()?,
            me,
            ranks,
            direct,
            segs,
            index: area,
            epoch: AtomicU64::new(base),
            floor_seen: AtomicU64::new(base),
            fetched: std::sync::Mutex::new(Vec::new()),
            join: images::Join::default(),
            busy: AtomicBool::new(false),
        })
    }

    /// Take this rank's area over for the team: its `done` says every epoch up to the base
    /// is read (no earlier team's epoch is waited for). Before the team's first call.
    pub(crate) fn start(&self) {
        self.area(self.me)
            .start_at(self.epoch.load(Ordering::Relaxed));
    }

    /// Which area of the host scratch the team uses.
    pub(crate) fn index(&self) -> usize {
        self.index
    }

    /// The largest epoch this rank's area holds (for the next team that takes it over),
    /// once no member reads or writes it any more (the team was destroyed).
    pub(crate) fn high_water(&self) -> u64 {
        self.area(self.me)
            .high_water()
            .max(self.epoch.load(Ordering::Relaxed))
    }

    /// This thread's call on the team, until the guard is dropped: `Usage` where another
    /// thread of the rank is in one (the client serializes calls on a team; this turns a
    /// violation into an error instead of two writers of one slot).
    fn serialize(&self, op: &'static str) -> Result<Busy<'_>> {
        if self.busy.swap(true, Ordering::Acquire) {
            return Err(Error::Usage {
                op,
                detail: "another thread of this rank is in a collective on this team; calls on \
                         one team are serialized"
                    .into(),
            });
        }
        Ok(Busy(&self.busy))
    }

    /// Member `i`'s area.
    fn area(&self, i: usize) -> &Area {
        // SAFETY: see `new`: each pointer is an `Area` in memory mapped while `self` lives.
        unsafe { self.areas[i].as_ref() }
    }

    /// Members of the team.
    pub(crate) fn n(&self) -> usize {
        self.areas.len()
    }
}

/// Which areas of this rank's host scratch teams other than the world hold (area 0 is the
/// world team's), and the high water each free one was left at: a team creation on a parent
/// with smp-native state gathers every member's [`AreaBook::report`] and takes the first areas
/// free on all of them ([`agree`]).
#[derive(Debug, Default)]
pub(crate) struct AreaBook {
    held: [bool; chan::NAREAS],
    water: [u64; chan::NAREAS],
    /// Creations of this rank between their report and their claims.
    creating: usize,
}

/// Words of a rank's report: one per area but the world's.
pub(crate) const REPORT_WORDS: usize = chan::NAREAS - 1;

impl AreaBook {
    /// This rank's report for a team creation, per area 1..NAREAS: `u64::MAX` where a team
    /// holds it, else its high water. While another creation of this rank is between its
    /// report and its claims, every area reads as held (two creations at once must not both
    /// take one area); [`AreaBook::end_creation`] ends the creation.
    pub(crate) fn report(&mut self) -> [u64; REPORT_WORDS] {
        let busy = self.creating > 0;
        self.creating += 1;
        std::array::from_fn(|i| {
            if busy || self.held[i + 1] {
                u64::MAX
            } else {
                self.water[i + 1]
            }
        })
    }

    /// A creation that reported is over (its claims made, or failed).
    pub(crate) fn end_creation(&mut self) {
        self.creating = self.creating.saturating_sub(1);
    }

    /// A new team of this rank holds `area`.
    pub(crate) fn claim(&mut self, area: usize) {
        self.held[area] = true;
    }

    /// The team that held `area` was destroyed; its words reach at most `water`.
    pub(crate) fn release(&mut self, area: usize, water: u64) {
        self.held[area] = false;
        self.water[area] = self.water[area].max(water);
    }
}

/// From every member's report (gathered, `REPORT_WORDS` words each), the first `want` areas
/// free on every member, each with the base its team counts epochs from (the largest high
/// water reported for it).
pub(crate) fn agree(reports: &[[u64; REPORT_WORDS]], want: usize) -> Vec<(usize, u64)> {
    (0..REPORT_WORDS)
        .filter_map(|i| {
            let top = reports.iter().map(|r| r[i]).max().unwrap_or(0);
            (top != u64::MAX).then_some((i + 1, top))
        })
        .take(want)
        .collect()
}

/// A blocking wait on flags, for hang reports and the back-off.
struct Waiter<'a> {
    sh: &'a Shared,
    op: &'static str,
    e: u64,
}

impl Waiter<'_> {
    /// Wait until `ok()`: checks first, then polls the endpoint and advances the engine with
    /// the core's back-off (other collectives and active messages go on meanwhile).
    fn wait(&self, mut ok: impl FnMut() -> bool, why: impl Fn() -> String) -> Result<()> {
        if ok() {
            return Ok(());
        }
        let every = if self.sh.ep.backoff().yields() {
            OVERSUBSCRIBED_POLL
        } else {
            for _ in 0..FAST_CHECKS {
                if ok() {
                    return Ok(());
                }
            }
            for _ in 0..SPIN_CHECKS {
                std::hint::spin_loop();
                if ok() {
                    return Ok(());
                }
            }
            1
        };
        self.sh.wait_loop_every(
            every,
            || Ok(ok()),
            || {
                format!(
                    "rank {}: {} (smp-native, epoch {}) waits for {}",
                    self.sh.rank,
                    self.op,
                    self.e,
                    why()
                )
            },
        )
    }
}

/// The reduction function of a call.
struct Fold<'a> {
    f: &'a crate::types::ReduceFn,
    flags: u32,
    es: usize,
    arg: u32,
    /// A built-in's elementwise kernel (one call per vector instead of one per element).
    kernel: Option<&'a crate::builtin::Kernel>,
}

impl<'a> Fold<'a> {
    /// The function of the reduction `spec` (its built-in's kernel where it has one).
    fn of(sh: &'a Shared, spec: &'a Spec, op: &'static str) -> Result<Fold<'a>> {
        let e = spec.function(&sh.fns).ok_or_else(|| Error::Usage {
            op,
            detail: format!("reduction function {} is not in the table", spec.func),
        })?;
        Ok(Fold {
            f: &*e.f,
            flags: e.flags & crate::types::fn_flags::NONCOMM,
            es: spec.es.max(1),
            arg: spec.arg,
            kernel: if spec.call_fn.is_none() {
                sh.kernels.get(spec.func).and_then(Option::as_ref)
            } else {
                None
            },
        })
    }

    /// `out = out ∘ x` elementwise over `count` elements (`tmp`: one element's scratch).
    fn fold_into(&self, out: &mut [u8], x: &[u8], count: usize, tmp: &mut [u8]) {
        if let Some(k) = self.kernel {
            k(out, x);
            return;
        }
        let es = self.es;
        for i in 0..count {
            let r = i * es..(i + 1) * es;
            self.combine(tmp, &out[r.clone()], &x[r.clone()]);
            out[r].copy_from_slice(tmp);
        }
    }

    /// `out = left ∘ right` (one element each).
    fn combine(&self, out: &mut [u8], left: &[u8], right: &[u8]) {
        (self.f)(out, 1, left, 1, right, self.es, self.flags, self.arg);
    }

    /// `out[i]` = `carry ∘ xs[0] ∘ ... ∘ xs[i]` for every element of `xs` (one call).
    fn scan(&self, out: &mut [u8], carry: Option<&[u8]>, xs: &[u8]) {
        let m = xs.len() / self.es;
        if m == 0 {
            return;
        }
        let (left, lc) = carry.map_or((&[][..], 0), |c| (c, 1));
        (self.f)(out, m, left, lc, xs, self.es, self.flags, self.arg);
    }

    /// `out` = the fold of the elements of `xs` in order (at least one).
    fn fold(&self, out: &mut [u8], xs: &[u8]) {
        let m = xs.len() / self.es;
        if m <= 1 {
            out.copy_from_slice(&xs[..self.es]);
            return;
        }
        let (left, right) = xs.split_at((m - 1) * self.es);
        (self.f)(out, 1, left, m - 1, right, self.es, self.flags, self.arg);
    }
}

/// `out` = the fold, in order, of the elements `xs` (at least one) with the reduction
/// function of `spec` (the hierarchical reductions' own contribution, `hier`).
pub(crate) fn fold_elements(
    sh: &Shared,
    spec: &Spec,
    op: &'static str,
    out: &mut [u8],
    xs: &[u8],
) -> Result<()> {
    let f = Fold::of(sh, spec, op)?;
    if xs.len() < f.es || out.len() != f.es {
        return Err(Error::Usage {
            op,
            detail: format!(
                "{} bytes of elements of {} bytes to fold into {} bytes",
                xs.len(),
                f.es,
                out.len()
            ),
        });
    }
    f.fold(out, xs);
    Ok(())
}

/// Bytes a member publishes for a call of `kind` (uniform counts; `n` bytes per block, `np`
/// members, `es`-byte elements, `count` elements of a vector reduction).
pub(crate) fn published_bytes(kind: Kind, n: usize, np: usize, es: usize, count: usize) -> usize {
    match kind {
        Kind::Broadcast | Kind::Gather | Kind::GatherAll => n,
        Kind::Scatter | Kind::Exchange => n.saturating_mul(np),
        Kind::Reduce | Kind::ReduceAll | Kind::Prefix | Kind::ExclusivePrefix => es,
        k if k.is_vector() => es.saturating_mul(count),
        _ => 0,
    }
}

/// Whether a call's contribution fits a slot, or (data movement, not an in-place exchange)
/// lies in the segment and is read in place, or (a vector reduction of `es`-byte elements
/// that fit a slot) runs in slot-sized chunks: what the selector's `SHM_FITS` bit says.
pub(crate) fn fits(kind: Kind, bytes: usize, es: usize, src_in_seg: bool, in_place: bool) -> bool {
    let data = matches!(
        kind,
        Kind::Broadcast | Kind::Scatter | Kind::Gather | Kind::GatherAll | Kind::Exchange
    );
    let vector = kind.is_vector();
    bytes <= SLOT_BYTES
        || (vector && es <= SLOT_BYTES)
        || (data && src_in_seg && !(in_place && kind == Kind::Exchange))
}

/// This rank's areas in a call.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Mine {
    /// The source and destination, resolved by the initiation.
    pub(crate) src: Mem,
    pub(crate) dst: Mem,
    /// The destination's segment offset when it is the same on every rank (`SINGLE`).
    pub(crate) dst_seg: Option<u64>,
    /// The source's segment offset when it is the same on every rank (`SINGLE`).
    pub(crate) src_seg: Option<u64>,
}

/// Run the blocking collective `spec` with `mode` on `t`'s team, with this rank's areas
/// `mine`.
pub(crate) fn run(
    sh: &Shared,
    t: &ShmTeam,
    op: &'static str,
    spec: &Spec,
    mode: &Mode,
    mine: Mine,
) -> Result<()> {
    if let Some(k) = Small::of(spec, mode, t) {
        return run_small(sh, t, op, (spec, k), mine.src, mine.dst);
    }
    let _busy = t.serialize(op)?;
    // A vector reduction larger than a slot runs as one epoch per slot-sized chunk (every
    // member cuts it alike).
    let per = vector_chunk(spec);
    // A vector reduction's or scan's sources in the segment are read in place: from the
    // mapped segment where every member maps it, beyond `STAGE_MAX_BYTES`, else through the
    // conduit's get, beyond `FETCH_MIN_BYTES` (a smaller copy costs less than holding the
    // member until its readers are done, or than the get). A rooted reduction under
    // OUT_MYSYNC too: its members then wait for the root's fold, but a copy into the slot,
    // whose lines the root's cache holds from its last read of them, runs at a fraction of a
    // copy's speed (every line taken back from the other core).
    let in_place_min = if t.direct {
        STAGE_MAX_BYTES
    } else {
        FETCH_MIN_BYTES
    };
    let vec_in_place = spec.kind.is_vector() && spec.n.saturating_mul(spec.es) > in_place_min;
    let chunks = per.map_or(1, |per| spec.n.div_ceil(per).max(1));
    let first = t.epoch.load(Ordering::Relaxed) + 1;
    let last = first + chunks as u64 - 1;
    t.epoch.store(last, Ordering::Relaxed);
    let r = if spec.kind == Kind::Barrier {
        barrier(sh, t, &Waiter { sh, op, e: first }, first)
    } else {
        (0..chunks).try_for_each(|c| {
            let w = Waiter {
                sh,
                op,
                e: first + c as u64,
            };
            // `per` is only there for a vector of more than one chunk.
            let Some(per) = per else {
                return epoch_call(sh, t, &w, spec, mode, mine, vec_in_place);
            };
            let a = c * per;
            let m = per.min(spec.n - a);
            let sub = Spec {
                n: m,
                counts: Vec::new(),
                params: Vec::new(),
                call_fn: spec.call_fn.clone(),
                ..*spec
            };
            // The entry sync before the first chunk, the exit sync after the last: a source
            // read in place stays valid until the call returns, and the last chunk's wait for
            // its readers covers the earlier chunks (every member marks them done first).
            let md = Mode {
                input: if c == 0 { mode.input } else { InSync::My },
                output: if c + 1 == chunks {
                    mode.output
                } else {
                    OutSync::No
                },
                ..*mode
            };
            let part = |x: Mem| {
                if x.len == 0 {
                    x
                } else {
                    Mem {
                        ptr: x.ptr + a * spec.es,
                        len: m * spec.es,
                    }
                }
            };
            let sub_mine = Mine {
                src: part(mine.src),
                dst: part(mine.dst),
                dst_seg: None,
                src_seg: None,
            };
            epoch_call(sh, t, &w, &sub, &md, sub_mine, vec_in_place)
        })
    };
    if r.is_err() {
        // This rank reads nothing more of the call's epochs: its later calls must not wait
        // for it.
        t.area(t.me).set_done(last);
    }
    r
}

/// A blocking broadcast, scatter, gather, gather_all or exchange of uniform blocks, or vector
/// reduction or scan, whose every contribution fits the header line, but for the push under
/// `ALLSYNC` ([`push_all_at`]'s calls): the latency-bound calls, which [`run_small`] runs on a
/// path of their own (what `epoch_call` works out for every call is known here: no data slot
/// is written, nothing is read in place, and `OUT_MYSYNC` waits for nothing).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Small {
    kind: Kind,
    /// Bytes per block (0 for a vector reduction).
    n: usize,
    root: usize,
    /// `IN_ALLSYNC`, `OUT_ALLSYNC`.
    in_all: bool,
    out_all: bool,
}

impl Small {
    /// The small form of `spec` under `mode` on `t`'s team, if it has one.
    pub(crate) fn of(spec: &Spec, mode: &Mode, t: &ShmTeam) -> Option<Small> {
        let np = t.n();
        let data = matches!(
            spec.kind,
            Kind::Broadcast | Kind::Scatter | Kind::Gather | Kind::GatherAll | Kind::Exchange
        );
        let n = if data { spec.uniform? } else { 0 };
        let (in_all, out_all) = (mode.input == InSync::All, mode.output == OutSync::All);
        // Where the push may run (it depends on the call's segment offsets): the full path.
        let push = data && in_all && out_all && t.direct;
        ((data || spec.kind.is_vector())
            && !push
            && spec.np == np
            && published_bytes(spec.kind, n, np, spec.es, spec.n) <= INLINE)
            .then_some(Small {
                kind: spec.kind,
                n,
                root: spec.root,
                in_all,
                out_all,
            })
    }
}

/// Run the small call `k` (see [`Small`]; `spec` the call it came from) on `t`'s team, with
/// this rank's resolved areas `src` and `dst`: the same epochs, slots, publications and reads
/// as `epoch_call`.
pub(crate) fn run_small(
    sh: &Shared,
    t: &ShmTeam,
    op: &'static str,
    (spec, k): (&Spec, Small),
    src: Mem,
    dst: Mem,
) -> Result<()> {
    let _busy = t.serialize(op)?;
    let e = t.epoch.load(Ordering::Relaxed) + 1;
    t.epoch.store(e, Ordering::Relaxed);
    let w = Waiter { sh, op, e };
    let r = if k.kind.is_vector() {
        small_vector(sh, t, &w, (spec, k), src, dst)
    } else {
        small_epoch(sh, t, &w, k, src, dst)
    };
    if r.is_err() {
        // This rank reads nothing more of the epoch: its later calls must not wait for it.
        t.area(t.me).set_done(e);
    }
    r
}

/// Epoch `w.e` of the small call `k`.
fn small_epoch(
    sh: &Shared,
    t: &ShmTeam,
    w: &Waiter<'_>,
    k: Small,
    src: Mem,
    dst: Mem,
) -> Result<()> {
    let (e, me, n, root) = (w.e, t.me, k.n, k.root);
    let s = chan::slot(e);
    let rooted = matches!(k.kind, Kind::Broadcast | Kind::Scatter);
    enter(t, w, false, k.in_all, rooted.then_some(me == root))?;
    // A broadcast's or scatter's root makes its own copy and marks the epoch done, under
    // `OUT_ALLSYNC` before it publishes (its readers, which wait for every member's `done`,
    // need not wait for its), otherwise after (its readers wait for nothing of it but the
    // publication); the others publish only their entry. The other operations publish every
    // member's source.
    let bytes: &[u8] = if rooted && me != root {
        &[]
    } else {
        // SAFETY: the initiation resolved `src` as this rank's source, valid for reads of its
        // length until the call returns (the raw API's contract, or a borrow).
        unsafe { bytes_of(src) }
    };
    fits_inline(w.op, bytes)?;
    let own = || {
        let at = if k.kind == Kind::Scatter { me * n } else { 0 };
        local_copy(src, at, dst, 0, n);
        t.area(me).set_done(e);
    };
    if rooted && me == root && k.out_all {
        own();
    }
    // SAFETY: this rank owns its area and is its only writer now (`busy`); every member's
    // `done` reached the header line's reuse floor; `bytes` fits the header line (`fits_inline`).
    unsafe {
        t.area(me).publish(s, e, LOC_INLINE, bytes.len(), |p| {
            amnet_core::mem::copy(bytes.as_ptr(), p, bytes.len());
        });
    }
    if rooted && me == root {
        if !k.out_all {
            own();
        }
        return exit(t, w, k, root);
    }
    let rd = Reader {
        sh,
        t,
        w,
        s,
        e,
        op: w.op,
        own: &[],
        after: if k.in_all && rooted {
            " (published once every member's entry signal is in: IN_ALLSYNC)"
        } else {
            ""
        },
    };
    // An in-place exchange (the source is the destination) published its source: its own
    // block is where it goes.
    read_blocks(&rd, k.kind, (n, root), src, dst, src.ptr == dst.ptr)?;
    t.area(me).set_done(e);
    exit(t, w, k, root)
}

/// The reads of a broadcast, scatter, gather, gather_all or exchange of `n`-byte blocks rooted
/// at `root` into this member's destination `dst` (the root of a broadcast or scatter makes
/// its own copy beforehand): a reader the root's block, a gather's root and every gather_all
/// member every member's block, an exchange member block `me` of every member's; a member's
/// own block from its source, but for an exchange whose source was published (`staged`).
fn read_blocks(
    rd: &Reader<'_>,
    kind: Kind,
    (n, root): (usize, usize),
    src: Mem,
    dst: Mem,
    staged: bool,
) -> Result<()> {
    let (me, np) = (rd.t.me, rd.t.n());
    match kind {
        Kind::Broadcast | Kind::Scatter if me != root => {
            let (want, at) = if kind == Kind::Scatter {
                (n * np, me * n)
            } else {
                (n, 0)
            };
            let p = rd.exact(root, want)?;
            rd.fetch_from(root, p, at, n, dst.ptr)?;
        }
        Kind::Gather | Kind::GatherAll if kind == Kind::GatherAll || me == root => {
            for q in 0..np {
                if q == me {
                    local_copy(src, 0, dst, q * n, n);
                } else {
                    rd.fetch(q, 0, n, dst.ptr + q * n)?;
                }
            }
        }
        Kind::Exchange => {
            for q in 0..np {
                if q == me {
                    if !staged {
                        local_copy(src, me * n, dst, me * n, n);
                    }
                } else {
                    rd.fetch(q, me * n, n, dst.ptr + q * n)?;
                }
            }
        }
        _ => {}
    }
    Ok(())
}

/// A small call's contribution fits the header line (`Small` says so of the call's sizes,
/// and the initiation resolves the source at exactly the size the call publishes; this keeps
/// the header's next line intact if the two ever disagree).
#[inline]
fn fits_inline(op: &'static str, bytes: &[u8]) -> Result<()> {
    if bytes.len() <= INLINE {
        return Ok(());
    }
    Err(internal(
        op,
        "a small call's contribution beyond the header line",
    ))
}

/// The end of a small call's epoch on a member that marked it done: under `OUT_ALLSYNC` the
/// wait for every member's `done` but those [`settled`] for it.
#[inline(always)]
fn exit(t: &ShmTeam, w: &Waiter<'_>, k: Small, root: usize) -> Result<()> {
    if !k.out_all {
        return Ok(());
    }
    exit_all(t, w, k.kind, root)
}

/// [`exit`]'s wait, out of the path of the calls that have none.
#[inline(never)]
fn exit_all(t: &ShmTeam, w: &Waiter<'_>, kind: Kind, root: usize) -> Result<()> {
    let me = t.me;
    all_done(t, w, |i| settled(kind, me, root, i))
}

/// Whether member `i`'s publication, which member `me` read in a small call of `kind` rooted
/// at `root` under `OUT_ALLSYNC`, shows `i`'s part of the call complete, so that `me` need not
/// wait for `i`'s `done`: `i` reads no other member's contribution and wrote its destination,
/// if it has one, before it published (a broadcast's or scatter's root, a gather's or
/// reduce_elems' other members, a scan's member 0).
fn settled(kind: Kind, me: usize, root: usize, i: usize) -> bool {
    match kind {
        Kind::Broadcast | Kind::Scatter => i == root && me != root,
        Kind::Gather | Kind::ReduceElems => i != root && me == root,
        Kind::ScanElems | Kind::ExclusiveScanElems => i == 0 && me > 0,
        _ => false,
    }
}

/// Epoch `w.e` of a small vector reduction or scan (`spec`): every member's vector staged in
/// its header line, but one that no other member reads (a reduce_elems root's, a scan's last
/// member's) and that its destination does not overlap, which its fold reads from the source.
fn small_vector(
    sh: &Shared,
    t: &ShmTeam,
    w: &Waiter<'_>,
    (spec, k): (&Spec, Small),
    src: Mem,
    dst: Mem,
) -> Result<()> {
    let (e, me, np, root) = (w.e, t.me, t.n(), spec.root);
    let s = chan::slot(e);
    enter(t, w, false, k.in_all, None)?;
    // SAFETY: the initiation resolved `src` as this rank's source, valid for reads of its
    // length until the call returns (the raw API's contract, or a borrow).
    let bytes = unsafe { bytes_of(src) };
    fits_inline(w.op, bytes)?;
    let private = !read_by_others(spec.kind, me, root, np) && !overlaps(bytes, dst);
    // Member 0 of an inclusive scan copies its result (its own vector) without a fold: under
    // `OUT_ALLSYNC` before it publishes, from the staged copy (the source may overlap the
    // destination), so that its readers need not wait for its `done` (`settled`); otherwise
    // after, from its source, so that its readers need not wait for the copy.
    // (A destination shorter than the vector, which the initiation's sizes rule out, takes
    // the fold, which reports it after the publication that the other members wait for.)
    let first = spec.kind == Kind::ScanElems && me == 0 && !private && dst.len >= bytes.len();
    // SAFETY: this rank owns its area and is its only writer now (`busy`); every member's
    // `done` reached the header line's reuse floor; `bytes` fits the header line (`fits_inline`);
    // with `first`, `dst` is this rank's destination, valid for writes of `bytes.len()` bytes
    // (`first` checks its length) and apart from the header line.
    unsafe {
        t.area(me).publish(s, e, LOC_INLINE, bytes.len(), |p| {
            if !private {
                amnet_core::mem::copy(bytes.as_ptr(), p, bytes.len());
            }
            if first && k.out_all {
                amnet_core::mem::copy(p, dst.ptr as *mut u8, bytes.len());
            }
        });
    }
    if first && !k.out_all {
        let len = bytes.len();
        // SAFETY: `src` is readable and `dst` writable for `len` bytes (as above; `bytes` is
        // `src`'s, not used past this point); `mem::copy` tolerates their overlap.
        unsafe { amnet_core::mem::copy(src.ptr as *const u8, dst.ptr as *mut u8, len) };
    }
    // Member `me` of a scan folds the vectors of members 0..=me (exclusive: 0..me).
    let upto = match spec.kind {
        Kind::ReduceElems if me != root => 0,
        Kind::ReduceElems | Kind::ReduceElemsAll => np,
        Kind::ScanElems if first => 0,
        Kind::ScanElems => me + 1,
        _ => me,
    };
    if upto > 0 {
        // After the publication, which the other members wait for.
        let fold = Fold::of(sh, spec, w.op)?;
        let rd = Reader {
            sh,
            t,
            w,
            s,
            e,
            op: w.op,
            own: bytes,
            after: "",
        };
        rd.reduce_elems(&fold, spec.n, upto, dst)?;
    }
    t.area(me).set_done(e);
    exit(t, w, k, root)
}

/// Elements per chunk of a vector reduction whose vector is larger than a slot (None: one
/// epoch takes the call).
fn vector_chunk(spec: &Spec) -> Option<usize> {
    vector_chunk_of(spec.kind, spec.es, spec.n)
}

/// `vector_chunk` of a call of `kind` over `n` elements of `es` bytes.
fn vector_chunk_of(kind: Kind, es: usize, n: usize) -> Option<usize> {
    let vector = kind.is_vector();
    (vector && es > 0 && es <= SLOT_BYTES && n.saturating_mul(es) > SLOT_BYTES)
        .then(|| SLOT_BYTES / es)
}

/// The body of [`run`] for a data or reduction call of epoch `w.e` (`vec_in_place`: a vector
/// reduction's or scan's source in the segment is published by offset, see `run`).
fn epoch_call(
    sh: &Shared,
    t: &ShmTeam,
    w: &Waiter<'_>,
    spec: &Spec,
    mode: &Mode,
    mine: Mine,
    vec_in_place: bool,
) -> Result<()> {
    let Mine {
        src,
        dst,
        dst_seg,
        src_seg,
    } = mine;
    let (e, op) = (w.e, w.op);
    let s = chan::slot(e);
    let me = t.me;
    let np = t.n();
    if spec.np != np {
        return Err(Error::Usage {
            op,
            detail: format!(
                "smp-native collectives take rank participants ({np}), not {}",
                spec.np
            ),
        });
    }
    if let Some(at) = push_all_at(t, spec, mode, dst_seg, src_seg) {
        return push_all(t, w, spec, src, dst, at);
    }
    // Reuse: every member is done with what slot `s` held (its header line; its data slot
    // too where a contribution of the call may go there).
    let data = published_bytes(spec.kind, spec.uniform.unwrap_or(0), np, spec.es, spec.n) > INLINE;
    let one_root = matches!(spec.kind, Kind::Broadcast | Kind::Scatter).then_some(me == spec.root);
    // Under IN_ALLSYNC an array scan's member that holds no element reads and writes no data:
    // it only signals its entry, and under OUT_ALLSYNC no member waits for its `done` (the
    // others saw its entry; it waits for the members that hold elements, whose `done`
    // follows every entry).
    let in_all = mode.input == InSync::All;
    let idle = |i: usize| {
        in_all
            && matches!(spec.kind, Kind::Prefix | Kind::ExclusivePrefix)
            && !crate::plan::holds(spec.src_lay, spec.n, np, i)
    };
    if idle(me) {
        reuse(t, w, chan::reuse_floor(e, data))?;
        signal_entry(t, e);
    } else {
        enter(t, w, data, in_all, one_root)?;
    }
    // Publish this rank's contribution (or only its entry).
    let fold = if spec.kind.is_reduction() {
        Some(Fold::of(sh, spec, op)?)
    } else {
        None
    };
    let mut partial = [0u8; INLINE];
    // This rank's first run of an array reduction's or scan's elements (the layout's
    // divisions done once per call).
    let mut first_run = None;
    let mut partial_vec = Vec::new();
    let n = spec.uniform.unwrap_or(0);
    let root = spec.root;
    // A large gather into a segment destination (the same offset on every rank): the members
    // put their blocks into the root's segment themselves, in parallel, instead of the root
    // copying every block.
    let push = spec.kind == Kind::Gather && n >= PUSH_MIN_BYTES && dst_seg.is_some();
    let (bytes, stage): (&[u8], bool) = match spec.kind {
        Kind::Broadcast | Kind::Scatter if me != spec.root => (&[], false),
        Kind::Gather if push => (&[], false),
        Kind::Broadcast | Kind::Scatter | Kind::Gather | Kind::GatherAll => {
            // SAFETY: the initiation resolved `src` as this rank's source, valid for reads
            // of its length until the call returns (the raw API's contract, or a borrow).
            (unsafe { bytes_of(src) }, false)
        }
        Kind::Exchange => {
            // SAFETY: as above.
            (unsafe { bytes_of(src) }, src.ptr == dst.ptr)
        }
        Kind::Reduce | Kind::ReduceAll | Kind::Prefix | Kind::ExclusivePrefix => {
            let fold = fold.as_ref().ok_or_else(|| internal(op, "no function"))?;
            let es = fold.es;
            // SAFETY: as above.
            let xs = unsafe { bytes_of(src) };
            let out: &mut [u8] = if es <= INLINE {
                &mut partial[..es]
            } else {
                partial_vec.resize(es, 0);
                &mut partial_vec
            };
            // This rank's runs of the array, in element order, folded into one partial.
            let mut have = false;
            let mut run_acc = Vec::new();
            for r in runs_iter(spec.src_lay, spec.n, spec.np).filter(|r| r.part == me) {
                first_run.get_or_insert(r);
                let run = xs
                    .get(r.local * es..(r.local + r.len) * es)
                    .ok_or_else(|| internal(op, "a run beyond the source area"))?;
                if have {
                    run_acc.resize(es, 0);
                    fold.fold(&mut run_acc, run);
                    let prev = out.to_vec();
                    fold.combine(out, &prev, &run_acc);
                } else {
                    fold.fold(out, run);
                    have = true;
                }
            }
            if have {
                (&*out, true)
            } else {
                (&[], false)
            }
        }
        k if k.is_vector() => {
            // SAFETY: as above.
            let b = unsafe { bytes_of(src) };
            // Read in place (`vec_in_place`) unless the destination overlaps the source (it
            // is written while the readers may still read); otherwise staged, and the
            // readers fold from the scratch.
            (b, !vec_in_place || overlaps(b, dst))
        }
        _ => return Err(internal(op, "operation without an smp-native algorithm")),
    };
    // In place where the readers copy it themselves, or where a get through the conduit
    // costs less than a copy through the scratch (beyond `STAGE_MAX_BYTES`).
    let in_place = !stage && (t.direct || bytes.len() > STAGE_MAX_BYTES);
    let loc = if bytes.len() <= INLINE {
        LOC_INLINE
    } else if let Some(off) = in_place.then(|| sh.seg_offset(src)).flatten() {
        LOC_SEG | off
    } else if bytes.len() <= SLOT_BYTES {
        LOC_SLOT
    } else {
        return Err(Error::Usage {
            op,
            detail: format!(
                "{} bytes to contribute are more than the host scratch slot holds ({SLOT_BYTES}) \
                 and not in the segment",
                bytes.len()
            ),
        });
    };
    // A vector that no other member reads (a rooted reduction's root, a scan's last member)
    // and that the destination does not overlap is folded from the source: only its length
    // is published.
    let private =
        spec.kind.is_vector() && !read_by_others(spec.kind, me, root, np) && !overlaps(bytes, dst);
    // A broadcast's or scatter's root reads nothing from its peers: where its contribution
    // fits the header line (the same answer on every member), it makes its own copy first and
    // marks the epoch done before it publishes, so that a reader that saw its publication
    // knows it finished (an `OUT_ALLSYNC` reader does not wait for its `done`).
    let root_early = matches!(spec.kind, Kind::Broadcast | Kind::Scatter)
        && published_bytes(spec.kind, n, np, 0, 0) <= INLINE;
    if root_early && me == root {
        let at = if spec.kind == Kind::Scatter {
            me * n
        } else {
            0
        };
        local_copy(src, at, dst, 0, n);
        t.area(me).set_done(e);
    }
    // Only a contribution beyond the header line goes to the data slot (`data` above).
    debug_assert!(
        loc != LOC_SLOT || data,
        "a data slot written past its reuse floor"
    );
    // SAFETY: this rank owns its area and is its only writer now (`busy`); every member's
    // `done` reached the reuse floor (of the data slot where `loc` is `LOC_SLOT`); `bytes`
    // fits where `loc` says.
    unsafe {
        t.area(me).publish(s, e, loc, bytes.len(), |p| {
            if !private {
                amnet_core::mem::copy(bytes.as_ptr(), p, bytes.len());
            }
        });
    }
    // The fold reads this rank's own vector from its source.
    let own = if spec.kind.is_vector() { bytes } else { &[] };
    let rd = Reader {
        sh,
        t,
        w,
        s,
        e,
        op,
        own,
        after: if mode.input == InSync::All && matches!(spec.kind, Kind::Broadcast | Kind::Scatter)
        {
            " (published once every member's entry signal is in: IN_ALLSYNC)"
        } else {
            ""
        },
    };
    match spec.kind {
        Kind::Gather if push => {
            if me == root {
                local_copy(src, 0, dst, me * n, n);
                if mode.output != OutSync::No {
                    // The members' blocks are in place once each is done.
                    w.wait(
                        || (0..np).all(|q| q == me || t.area(q).done() >= e),
                        || "the members' blocks (a gather's puts)".to_string(),
                    )?;
                }
            } else {
                // Into the root's destination once the root entered (IN_MYSYNC; the header's
                // epoch is its entry).
                rd.published(root)?;
                let at = dst_seg.unwrap_or(0) + (me * n) as u64;
                // SAFETY: as above: this rank's source, readable until the call returns.
                sh.ep.put(t.ranks[root], at, unsafe { bytes_of(src) })?;
            }
        }
        // (A root that made its copy early reads nothing below.)
        Kind::Broadcast | Kind::Scatter if me == root && !root_early => {
            let at = if spec.kind == Kind::Scatter {
                me * n
            } else {
                0
            };
            local_copy(src, at, dst, 0, n);
        }
        Kind::Broadcast | Kind::Scatter | Kind::Gather | Kind::GatherAll | Kind::Exchange => {
            read_blocks(&rd, spec.kind, (n, root), src, dst, stage)?;
        }
        Kind::Reduce | Kind::ReduceAll if spec.kind == Kind::ReduceAll || me == root => {
            let fold = fold.as_ref().ok_or_else(|| internal(op, "no function"))?;
            rd.reduce_elems(fold, 1, np, dst)?;
        }
        // The array scans (one run per member, in member order, the same layout at the
        // destination, `RUNS_IN_ORDER | SAME_LAYOUT`): a member's carry is the fold of the
        // partials of the members before it, then its run's prefixes after the carry.
        Kind::Prefix | Kind::ExclusivePrefix => {
            let fold = fold.as_ref().ok_or_else(|| internal(op, "no function"))?;
            // The array scans take one run per member (`RUNS_IN_ORDER`): its first.
            if let Some(run) = first_run {
                let es = fold.es;
                let mut small = [0u8; INLINE];
                let mut big = Vec::new();
                let carry: &mut [u8] = if es <= INLINE {
                    &mut small[..es]
                } else {
                    big.resize(es, 0);
                    &mut big
                };
                let at = Mem {
                    ptr: carry.as_mut_ptr() as usize,
                    len: es,
                };
                let has = rd.fold_members(fold, 1, me, at)?;
                let exclusive = spec.kind == Kind::ExclusivePrefix;
                prefix_run(
                    op,
                    fold,
                    exclusive,
                    has.then_some(&*carry),
                    src,
                    dst,
                    run.local,
                    run.len,
                )?;
            }
        }
        Kind::ReduceElems | Kind::ReduceElemsAll
            if spec.kind == Kind::ReduceElemsAll || me == root =>
        {
            let fold = fold.as_ref().ok_or_else(|| internal(op, "no function"))?;
            rd.reduce_elems(fold, spec.n, np, dst)?;
        }
        // Member `me` of a scan folds the vectors of members 0..=me (exclusive: 0..me; member
        // 0's destination stays as it was).
        Kind::ScanElems => {
            let fold = fold.as_ref().ok_or_else(|| internal(op, "no function"))?;
            rd.reduce_elems(fold, spec.n, me + 1, dst)?;
        }
        Kind::ExclusiveScanElems if me > 0 => {
            let fold = fold.as_ref().ok_or_else(|| internal(op, "no function"))?;
            rd.reduce_elems(fold, spec.n, me, dst)?;
        }
        _ => {}
    }
    if !(root_early && me == root) {
        t.area(me).set_done(e);
    }
    let in_place_read = loc & LOC_SEG != 0;
    match mode.output {
        // Not a member settled when it published: a broadcast's or scatter's root that made
        // its copy first, a rooted array reduction's other members (read by the root; they
        // write nothing), an idle member of an array scan.
        OutSync::All => all_done(t, w, |i| {
            (root_early && i == root)
                || (spec.kind == Kind::Reduce && me == root && i != root)
                || idle(i)
        })?,
        OutSync::My if in_place_read => {
            // The source stays in use until its readers finished: a gather's or
            // reduce_elems' root, or every member.
            let rooted = matches!(spec.kind, Kind::Gather | Kind::ReduceElems);
            w.wait(
                || {
                    if rooted {
                        t.area(root).done() >= e
                    } else {
                        (0..np).all(|i| t.area(i).done() >= e)
                    }
                },
                || "the readers of this rank's source (OUT_MYSYNC)".to_string(),
            )?;
        }
        _ => {}
    }
    Ok(())
}

/// The largest block that [`push_all`] writes into a peer's destination: beyond it every line
/// written there is fetched from the peer's cache and fetched back by the peer, where a
/// reader that copies the block moves each line once.
const PUSH_ALL_MAX_BYTES: usize = 2 << 10;

/// Where [`push_all`] runs the call (the destinations' segment offset): an
/// `IN_ALLSYNC|OUT_ALLSYNC` broadcast, scatter, gather, gather_all or exchange of uniform
/// blocks up to [`PUSH_ALL_MAX_BYTES`], whose sources and destinations lie at the same segment
/// offsets on every member (`SINGLE`), apart, and whose members' segments are all mapped
/// here. Every input of the answer is the same on every member (the lengths come from the
/// call, not from this rank's areas), so they all take the same path.
fn push_all_at(
    t: &ShmTeam,
    spec: &Spec,
    mode: &Mode,
    dst_seg: Option<u64>,
    src_seg: Option<u64>,
) -> Option<u64> {
    if mode.input != InSync::All || mode.output != OutSync::All || !t.direct {
        return None;
    }
    let n = spec.uniform.filter(|&n| n > 0 && n <= PUSH_ALL_MAX_BYTES)?;
    let np = t.n();
    let (src_len, dst_len) = match spec.kind {
        Kind::Broadcast => (n, n),
        Kind::Scatter => (n * np, n),
        Kind::Gather | Kind::GatherAll => (n, n * np),
        Kind::Exchange => (n * np, n * np),
        _ => return None,
    };
    let (d, s) = (dst_seg?, src_seg?);
    let apart = d.checked_add(dst_len as u64).is_some_and(|e| e <= s)
        || s.checked_add(src_len as u64).is_some_and(|e| e <= d);
    apart.then_some(d)
}

/// `IN_ALLSYNC|OUT_ALLSYNC` calls where [`push_all_at`] says (the destinations at segment
/// offset `at`): after the entry barrier every member writes its blocks straight into the
/// mapped destinations they belong to (a broadcast's root its source into every member's, a
/// scatter's root block q into member q's, a gather's members theirs into block `me` of the
/// root's, gather_all and exchange every member into block `me` of every member's), marks the
/// epoch done, and waits until every member's `done` holds it. A member's `done` says that it
/// finished every write of the call, so once all are set every destination is complete: two
/// line flights (entry, done) instead of the three of a publication between them. Nothing is
/// published, and no slot is written.
fn push_all(t: &ShmTeam, w: &Waiter<'_>, spec: &Spec, src: Mem, dst: Mem, at: u64) -> Result<()> {
    let (e, me, np) = (w.e, t.me, t.n());
    let (n, root) = (spec.uniform.unwrap_or(0), spec.root);
    all_entered(t, w, e, "the entry signal (IN_ALLSYNC)")?;
    // What this member writes into member q's destination: (offset in its source, offset in
    // q's destination).
    let part = |q: usize| match spec.kind {
        Kind::Broadcast => (me == root).then_some((0, 0)),
        Kind::Scatter => (me == root).then_some((q * n, 0)),
        Kind::Gather => (q == root).then_some((0, me * n)),
        Kind::GatherAll => Some((0, me * n)),
        _ => Some((q * n, me * n)),
    };
    for q in (0..np).map(|i| (me + i) % np) {
        let Some((from, to)) = part(q) else { continue };
        if q == me {
            local_copy(src, from, dst, to, n);
            continue;
        }
        let &(base, seg_len) = t
            .segs
            .get(q)
            .ok_or_else(|| internal(w.op, "a destination in an unmapped segment"))?;
        let off = usize::try_from(at)
            .ok()
            .and_then(|a| a.checked_add(to))
            .filter(|&o| o.checked_add(n).is_some_and(|end| end <= seg_len))
            .ok_or_else(|| internal(w.op, "a destination beyond its segment"))?;
        if from + n > src.len {
            return Err(internal(w.op, "a block beyond the source area"));
        }
        // SAFETY: member q's segment is mapped here for the endpoint's life (`direct`) and
        // `off + n` lies within it (checked); it entered the call (the barrier above), so
        // under IN_ALLSYNC its destination may be written, and only this member writes this
        // block of it; the source, resolved by the initiation, is readable for its length
        // (checked) until the call returns and lies apart from every destination
        // (`push_all_at`).
        unsafe {
            amnet_core::mem::copy((src.ptr + from) as *const u8, base.as_ptr().add(off), n);
        }
    }
    t.area(me).set_done(e);
    all_done(t, w, |_| false)
}

/// A member's entry into epoch `w.e`: slot reuse before it writes its slot (every member's
/// `done` at the reuse floor, of the data slot too with `data`), then with `in_all` (`IN_ALLSYNC`)
/// every member's entry. `one_root` is `Some(this member is the root)` for a call whose one
/// root publishes (broadcast, scatter): the others signal their entry, the root waits for
/// every entry before it publishes, and the others' reads, which wait for the root's
/// publication, come after it; otherwise the flag barrier.
#[inline]
fn enter(
    t: &ShmTeam,
    w: &Waiter<'_>,
    data: bool,
    in_all: bool,
    one_root: Option<bool>,
) -> Result<()> {
    reuse(t, w, chan::reuse_floor(w.e, data))?;
    if !in_all {
        return Ok(());
    }
    all_entry(t, w, one_root)
}

/// [`enter`]'s `IN_ALLSYNC` part, out of its path: no data moves, no source is read, before
/// every member entered.
#[inline(never)]
fn all_entry(t: &ShmTeam, w: &Waiter<'_>, one_root: Option<bool>) -> Result<()> {
    let (e, me, np) = (w.e, t.me, t.n());
    match one_root {
        Some(true) => w.wait(
            || (0..np).all(|i| i == me || t.area(i).entered() >= e),
            || {
                let late: Vec<usize> = (0..np)
                    .filter(|&i| i != me && t.area(i).entered() < e)
                    .collect();
                format!("the entry signal of team ranks {late:?} (IN_ALLSYNC)")
            },
        ),
        Some(false) => {
            t.area(me).set_entered(e);
            Ok(())
        }
        None => all_entered(t, w, e, "the entry signal (IN_ALLSYNC)"),
    }
}

/// Slot reuse: return once every member's `done` is at least `floor` (seen at once while the
/// members were last seen there).
#[inline]
fn reuse(t: &ShmTeam, w: &Waiter<'_>, floor: u64) -> Result<()> {
    if t.floor_seen.load(Ordering::Relaxed) >= floor {
        return Ok(());
    }
    reuse_wait(t, w, floor)
}

/// [`reuse`]'s wait, out of its path.
#[inline(never)]
fn reuse_wait(t: &ShmTeam, w: &Waiter<'_>, floor: u64) -> Result<()> {
    let np = t.n();
    w.wait(
        || (0..np).all(|i| t.area(i).done() >= floor),
        || {
            let late: Vec<usize> = (0..np).filter(|&i| t.area(i).done() < floor).collect();
            format!("team ranks {late:?} to finish epoch {floor} (slot reuse)")
        },
    )?;
    let low = (0..np).map(|i| t.area(i).done()).min().unwrap_or(floor);
    t.floor_seen.store(low, Ordering::Relaxed);
    Ok(())
}

/// `OUT_ALLSYNC`: wait until every member's `done` holds epoch `w.e`, but those `skip` names
/// (members settled when they published: a root that marked itself done before it published,
/// members that wrote nothing and whose publication this one read, an idle member).
fn all_done(t: &ShmTeam, w: &Waiter<'_>, skip: impl Fn(usize) -> bool) -> Result<()> {
    let (e, np) = (w.e, t.n());
    w.wait(
        || (0..np).all(|i| skip(i) || t.area(i).done() >= e),
        || {
            let late: Vec<usize> = (0..np)
                .filter(|&i| !skip(i) && t.area(i).done() < e)
                .collect();
            format!("team ranks {late:?} to finish (OUT_ALLSYNC)")
        },
    )
}

/// The barrier of epoch `e` ([`all_entered`]); afterwards the collectives of this rank that were
/// synced before they were complete here (detached, `OUT_NOSYNC`) are complete: their data,
/// which travels in messages the members sent before they entered, is in place.
fn barrier(sh: &Shared, t: &ShmTeam, w: &Waiter<'_>, e: u64) -> Result<()> {
    all_entered(t, w, e, "the barrier")?;
    t.area(t.me).set_done(e);
    if !sh.no_detached() {
        // On smp the messages are in this rank's rings already; elsewhere they may still be
        // on their way, and the wait takes them in as they come.
        sh.wait_loop(
            || Ok(sh.no_detached()),
            || {
                format!(
                    "rank {}: the team barrier (smp-native, epoch {e}) completes the collectives \
                     synced before it (OUT_NOSYNC): {}",
                    sh.rank,
                    sh.report()
                )
            },
        )?;
    }
    Ok(())
}

/// This member's signal of epoch `e` in [`all_entered`]'s words: at 2 members into the other's
/// word, else into its own.
fn signal_entry(t: &ShmTeam, e: u64) {
    let (np, me) = (t.n(), t.me);
    match np {
        0 | 1 => {}
        2 => t.area(1 - me).signal_bar(e),
        _ => t.area(me).signal_bar(e),
    }
}

/// The entry signal of epoch `e` (`what` for hang reports): return once every member has
/// started it. Two members store the epoch into each other's barrier word and wait for their
/// own (the one round of a dissemination barrier: each polls a line of its own area). More
/// members store it into their own word and wait until every member's holds it (a flat
/// barrier): one line flight after the last arrival instead of ⌈log₂ n⌉ rounds, and on an
/// oversubscribed host one wake-up per waiter where each round may cost a context switch
/// (8 ranks on 2 cores: 7.0-9.0 µs against 13.3-13.5 for the rounds).
fn all_entered(t: &ShmTeam, w: &Waiter<'_>, e: u64, what: &str) -> Result<()> {
    let (np, me) = (t.n(), t.me);
    if np < 2 {
        return Ok(());
    }
    signal_entry(t, e);
    if np == 2 {
        let other = 1 - me;
        return w.wait(
            || t.area(me).bar() >= e,
            || format!("{what}: the signal of team rank {other}"),
        );
    }
    // Words only grow: a member seen at `e` stays there.
    let mut next = 0;
    w.wait(
        || {
            while next < np && t.area(next).bar() >= e {
                next += 1;
            }
            next == np
        },
        || {
            let late: Vec<usize> = (0..np).filter(|&i| t.area(i).bar() < e).collect();
            format!("{what}: the entry of team ranks {late:?}")
        },
    )
}

/// Whether a member other than `me` reads member `me`'s vector in a vector reduction or scan
/// of `kind` rooted at `root` over `np` members.
fn read_by_others(kind: Kind, me: usize, root: usize, np: usize) -> bool {
    match kind {
        Kind::ReduceElems => me != root,
        Kind::ScanElems | Kind::ExclusiveScanElems => me + 1 < np,
        _ => np > 1,
    }
}

/// What a member reads from its peers in one call.
struct Reader<'a> {
    sh: &'a Shared,
    t: &'a ShmTeam,
    w: &'a Waiter<'a>,
    s: usize,
    e: u64,
    op: &'static str,
    /// This rank's own vector (a vector reduction's source), which its fold reads in place of
    /// the staged copy.
    own: &'a [u8],
    /// What a hang report adds to a wait for a contribution.
    after: &'static str,
}

impl Reader<'_> {
    /// Member `q`'s header for this call, once published.
    fn published(&self, q: usize) -> Result<Published> {
        let a = self.t.area(q);
        let mut got = None;
        self.w.wait(
            || {
                got = a.published(self.s, self.e);
                got.is_some()
            },
            || format!("team rank {q}'s contribution{}", self.after),
        )?;
        let p = got.ok_or_else(|| internal(self.op, "published header vanished"))?;
        if p.loc == chan::LOC_FAILED {
            return Err(Error::Usage {
                op: self.op,
                detail: format!(
                    "team rank {q}'s image threads disagree on this call (see its error); the \
                     call failed there"
                ),
            });
        }
        Ok(p)
    }

    /// Copy `len` bytes at `off` of member `q`'s contribution to `to` in this process: this
    /// rank's destination, or the team's fetch buffer (held by the caller), either valid for
    /// writes of `len` bytes until the call returns.
    fn fetch(&self, q: usize, off: usize, len: usize, to: usize) -> Result<()> {
        if len == 0 {
            return Ok(());
        }
        let p = self.published(q)?;
        self.fetch_from(q, p, off, len, to)
    }

    /// [`fetch`](Self::fetch) from member `q`'s header `p`, read already.
    fn fetch_from(&self, q: usize, p: Published, off: usize, len: usize, to: usize) -> Result<()> {
        if len == 0 {
            return Ok(());
        }
        self.check_len(q, p, off + len)?;
        let to = to as *mut u8;
        if p.loc & LOC_SEG != 0 {
            let seg_off = (p.loc & !LOC_SEG) + off as u64;
            let ep = &self.sh.ep;
            // SAFETY: `to` is valid for writes of `len` bytes until the call returns (this
            // rank's destination, resolved by the initiation, or the held fetch buffer).
            let mut h = unsafe { ep.get_nb(self.t.ranks[q], seg_off, to, len)? };
            return ep.wait_sync(&mut h);
        }
        // SAFETY: published for this slot and epoch, and this rank has not marked the epoch
        // done; `off + len` is within what was published (checked); `to` as above.
        unsafe {
            self.t.area(q).read(self.s, p, |b| {
                amnet_core::mem::copy(b.add(off), to, len);
            });
        }
        Ok(())
    }

    /// Member `q` (a broadcast's or scatter's root) contributed exactly `want` bytes: its
    /// size decides, as this rank's does, whether its readers wait for its `done`
    /// (`root_early`), so sizes that differ must not pass unnoticed. Returns its header.
    fn exact(&self, q: usize, want: usize) -> Result<Published> {
        let p = self.published(q)?;
        if p.len == want {
            return Ok(p);
        }
        Err(self.sizes_differ(q, p, want))
    }

    /// Member `q`'s contribution `p` holds at least `want` bytes.
    fn check_len(&self, q: usize, p: Published, want: usize) -> Result<()> {
        if p.len >= want {
            return Ok(());
        }
        Err(self.sizes_differ(q, p, want))
    }

    fn sizes_differ(&self, q: usize, p: Published, want: usize) -> Error {
        Error::Usage {
            op: self.op,
            detail: format!(
                "team rank {q} contributed {} bytes where this rank needs {want}; the ranks \
                 passed different sizes",
                p.len
            ),
        }
    }

    /// `dst` = the elementwise fold of the `count`-element vectors of members `0..upto`, in
    /// member order (`fold_members`); `Usage` when none of them holds an element.
    fn reduce_elems(&self, fold: &Fold<'_>, count: usize, upto: usize, dst: Mem) -> Result<()> {
        if !self.fold_members(fold, count, upto, dst)? {
            return Err(Error::Usage {
                op: self.op,
                detail: "no participant holds an element".into(),
            });
        }
        Ok(())
    }

    /// Fold the `count`-element contributions of members `0..upto` that have one, in team
    /// order, into `dst`: whether any had (`dst` untouched if none).
    fn fold_members(&self, fold: &Fold<'_>, count: usize, upto: usize, dst: Mem) -> Result<bool> {
        let es = fold.es;
        let len = count * es;
        if dst.len < len {
            return Err(internal(self.op, "destination shorter than the result"));
        }
        // SAFETY: this rank's destination, resolved by the initiation, valid for writes of
        // its length until the call returns; no other reference to it exists meanwhile.
        let out = unsafe { std::slice::from_raw_parts_mut(dst.ptr as *mut u8, len) };
        let mut tmp_small = [0u8; 64];
        let mut tmp_big = Vec::new();
        let tmp: &mut [u8] = if es <= 64 {
            &mut tmp_small[..es]
        } else {
            tmp_big.resize(es, 0);
            &mut tmp_big
        };
        let mut have = false;
        for q in 0..upto.min(self.t.n()) {
            let p = self.published(q)?;
            if p.len == 0 {
                continue;
            }
            self.check_len(q, p, len)?;
            let mut take = |x: &[u8]| {
                if have {
                    fold.fold_into(out, x, count, tmp);
                } else {
                    // SAFETY: `x` and `out` are `len` bytes each (above), and distinct: an
                    // in-place destination is staged, and read from the slot.
                    unsafe { amnet_core::mem::copy(x.as_ptr(), out.as_mut_ptr(), len) };
                }
            };
            if q == self.t.me && self.own.len() >= len && !overlaps(self.own, dst) {
                take(&self.own[..len]);
                have = true;
                continue;
            }
            if p.loc & LOC_SEG != 0 && !self.t.direct {
                // In member q's segment, not mapped here: fetched through the conduit's get,
                // into the destination for the first operand, else into the team's buffer
                // and folded.
                if !have {
                    self.fetch(q, 0, len, out.as_mut_ptr() as usize)?;
                } else {
                    let mut buf = self
                        .t
                        .fetched
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner);
                    if buf.len() < len {
                        buf.resize(len, 0);
                    }
                    // Nothing else uses the buffer while the team's call runs (`busy`) and
                    // this guard is held.
                    self.fetch(q, 0, len, buf.as_mut_ptr() as usize)?;
                    take(&buf[..len]);
                }
                have = true;
                continue;
            }
            if p.loc & LOC_SEG != 0 {
                // In place in member q's segment, mapped here (`direct`).
                let off = usize::try_from(p.loc & !LOC_SEG).unwrap_or(usize::MAX);
                let &(base, seg_len) = self
                    .t
                    .segs
                    .get(q)
                    .ok_or_else(|| internal(self.op, "an operand in an unmapped segment"))?;
                if off.checked_add(len).is_none_or(|end| end > seg_len) {
                    return Err(internal(self.op, "an operand beyond its segment"));
                }
                // SAFETY: member q published this range of its segment (mapped here for the
                // endpoint's life, `off + len` within it, checked) as its source for this
                // epoch; it does not write it before this rank marks the epoch done (its
                // OUT_MYSYNC or OUT_ALLSYNC wait), or the client keeps it unwritten
                // (OUT_NOSYNC).
                take(unsafe { std::slice::from_raw_parts(base.as_ptr().add(off), len) });
                have = true;
                continue;
            }
            // SAFETY: published for this slot and epoch (never in the segment for a
            // reduction), not yet marked done; `len` bytes checked.
            let r = unsafe {
                self.t
                    .area(q)
                    .read(self.s, p, |b| take(std::slice::from_raw_parts(b, len)))
            };
            if r.is_none() {
                return Err(internal(self.op, "a reduction operand in the segment"));
            }
            have = true;
        }
        Ok(have)
    }
}

/// The prefixes of this member's run of `len` elements at element `at` of its source into the
/// same place of its destination, after `carry` (the fold of the earlier members' runs; none
/// for the first member with elements). Exclusive: element i gets the prefix through i - 1,
/// the array's first element stays as it is.
#[allow(clippy::too_many_arguments)]
fn prefix_run(
    op: &'static str,
    fold: &Fold<'_>,
    exclusive: bool,
    carry: Option<&[u8]>,
    src: Mem,
    dst: Mem,
    at: usize,
    len: usize,
) -> Result<()> {
    let es = fold.es;
    let (off, bytes) = (at * es, len * es);
    if off + bytes > src.len || off + bytes > dst.len {
        return Err(internal(op, "a run beyond its source or destination area"));
    }
    // SAFETY: this rank's source and destination, resolved by the initiation (valid for
    // reads, and writes, of their lengths until the call returns); the run lies inside both
    // (checked). An in-place source is copied out before the destination is written.
    let xs_at = unsafe { std::slice::from_raw_parts((src.ptr + off) as *const u8, bytes) };
    let out = (dst.ptr + off) as *mut u8;
    let copy;
    let xs: &[u8] = if overlaps(xs_at, dst) {
        copy = xs_at.to_vec();
        &copy
    } else {
        xs_at
    };
    // SAFETY: as above; `xs` no longer aliases the destination.
    let out = unsafe { std::slice::from_raw_parts_mut(out, bytes) };
    if !exclusive {
        fold.scan(out, carry, xs);
        return Ok(());
    }
    if len > 1 {
        fold.scan(&mut out[es..], carry, &xs[..bytes - es]);
    }
    if let Some(c) = carry {
        out[..es].copy_from_slice(c);
    }
    Ok(())
}

/// Whether `a` and the area `b` share a byte.
fn overlaps(a: &[u8], b: Mem) -> bool {
    let a0 = a.as_ptr() as usize;
    a0 < b.ptr + b.len && b.ptr < a0 + a.len()
}

/// The bytes of a resolved area.
///
/// # Safety
/// - `a` is valid for reads of `a.len` bytes while the result is used, and not written
///   meanwhile.
unsafe fn bytes_of<'a>(a: Mem) -> &'a [u8] {
    if a.len == 0 {
        return &[];
    }
    // SAFETY: the caller's contract.
    unsafe { std::slice::from_raw_parts(a.ptr as *const u8, a.len) }
}

/// Copy `len` bytes from `src + so` to `dst + dof` unless they are the same place.
fn local_copy(src: Mem, so: usize, dst: Mem, dof: usize, len: usize) {
    let (from, to) = (src.ptr + so, dst.ptr + dof);
    if len == 0 || from == to {
        return;
    }
    // SAFETY: both areas were resolved by the initiation for this rank's participant
    // (source readable, destination writable, `so + len` and `dof + len` within them by the
    // operation's sizes) and do not overlap except in the in-place case, where the blocks are
    // the same place (skipped above).
    unsafe { amnet_core::mem::copy(from as *const u8, to as *mut u8, len) };
}

fn internal(op: &'static str, what: &str) -> Error {
    Error::Usage {
        op,
        detail: format!("smp-native collective: {what}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn area_book_reports_and_agreement() {
        let mut b = AreaBook::default();
        let r = b.report();
        assert_eq!(r, [0; REPORT_WORDS], "a fresh book: every area free, at 0");
        // A second creation before the first ends sees every area held.
        assert_eq!(b.report(), [u64::MAX; REPORT_WORDS]);
        b.end_creation();
        b.claim(1);
        b.claim(3);
        b.end_creation();
        let r = b.report();
        assert_eq!((r[0], r[1], r[2]), (u64::MAX, 0, u64::MAX));
        b.end_creation();
        b.release(1, 40);
        b.release(3, 7);
        // The high water never goes down.
        b.claim(3);
        b.release(3, 5);
        let mine = b.report();
        b.end_creation();
        assert_eq!((mine[0], mine[2]), (40, 7));
        // Another rank holds area 2 and left area 1 at 90: the first two areas free on both
        // are 1 (base 90) and 3 (base 7).
        let mut other = [0u64; REPORT_WORDS];
        other[0] = 90;
        other[1] = u64::MAX;
        assert_eq!(agree(&[mine, other], 2), vec![(1, 90), (3, 7)]);
        assert_eq!(agree(&[mine, other], 1), vec![(1, 90)]);
        // None free on some rank: no area.
        assert_eq!(agree(&[mine, [u64::MAX; REPORT_WORDS]], 2), vec![]);
    }

    #[test]
    fn what_fits_the_host_scratch() {
        // Small contributions fit whatever their place.
        for kind in [
            Kind::Broadcast,
            Kind::Exchange,
            Kind::ReduceAll,
            Kind::ReduceElemsAll,
        ] {
            assert!(fits(kind, SLOT_BYTES, 8, false, false), "{kind:?}");
            assert!(fits(kind, SLOT_BYTES, 8, false, true), "{kind:?}");
        }
        // Larger data is read in place from the segment, except an in-place exchange
        // (its source is its destination, written while the peers read).
        for kind in [
            Kind::Broadcast,
            Kind::Scatter,
            Kind::Gather,
            Kind::GatherAll,
        ] {
            assert!(!fits(kind, SLOT_BYTES + 1, 0, false, false), "{kind:?}");
            assert!(fits(kind, SLOT_BYTES + 1, 0, true, false), "{kind:?}");
        }
        assert!(fits(Kind::Exchange, SLOT_BYTES + 1, 0, true, false));
        assert!(!fits(Kind::Exchange, SLOT_BYTES + 1, 0, true, true));
        // Reduction operands are always staged: a vector larger than a slot in chunks, of
        // whole elements.
        assert!(fits(Kind::ReduceElemsAll, SLOT_BYTES + 1, 8, true, false));
        assert!(fits(Kind::ReduceElems, 64 * SLOT_BYTES, 8, false, false));
        assert!(!fits(
            Kind::ReduceElemsAll,
            2 * SLOT_BYTES,
            SLOT_BYTES + 8,
            true,
            false
        ));
        assert_eq!(
            vector_chunk_of(Kind::ReduceElemsAll, 8, SLOT_BYTES / 8),
            None
        );
        assert_eq!(
            vector_chunk_of(Kind::ReduceElemsAll, 8, SLOT_BYTES / 8 + 1),
            Some(SLOT_BYTES / 8)
        );
        assert_eq!(vector_chunk_of(Kind::ReduceAll, 8, SLOT_BYTES), None);
        // What a member publishes.
        assert_eq!(published_bytes(Kind::Broadcast, 10, 4, 0, 0), 10);
        assert_eq!(published_bytes(Kind::Scatter, 10, 4, 0, 0), 40);
        assert_eq!(published_bytes(Kind::Exchange, 10, 4, 0, 0), 40);
        assert_eq!(published_bytes(Kind::ReduceAll, 0, 4, 16, 100), 16);
        assert_eq!(published_bytes(Kind::ReduceElems, 0, 4, 8, 100), 800);
        assert_eq!(published_bytes(Kind::Barrier, 0, 4, 0, 0), 0);
    }
}
