//! The smp-native collectives with image participants (spec/coll.md §3c). An `m`-form call,
//! in which one thread of each member enters every image the member hosts with a list of
//! addresses, runs one epoch for the member; an `ALL_THREADS` call, in which every image
//! thread calls with its own areas, first meets the member's other image threads in the
//! team's [`Join`], and the last to arrive runs the epoch for all of them. Images are numbered
//! member-major (member `q` hosts images `first[q]..first[q + 1]`), so a member's images are
//! one run of the participant order, and a member publishes what all of them contribute at
//! once:
//! - broadcast and scatter: the member that hosts the root image publishes the root's source;
//! - gather and gather_all: every member its images' blocks, one after the other (image
//!   order), so its run of the destination is one copy;
//! - exchange: every member its images' rows of blocks, one after the other;
//! - reductions and scans: every member the fold of its images' operands (vectors
//!   elementwise in image order, an array's elements in element order).
//!
//! A member's contribution is always copied into its scratch (the header line or the data
//! slot), never read in place from its segment: the readers then wait for nothing at the end
//! but what the sync mode asks, and an in-place source (a block of the image's own
//! destination) is read from the copy while the destination is written. The reads are those of
//! the rank participants' algorithm (`epoch_call`), once per local image.

use amnet_core::sync::{AtomicU64, Ordering};
#[cfg(loom)]
use loom::sync::Mutex;
#[cfg(not(loom))]
use std::sync::Mutex;

use amnet_core::{Error, Result};
use amnet_sync_modes::{InSync, Mode, OutSync};

use super::chan::{INLINE, LOC_FAILED, LOC_INLINE, LOC_SLOT, SLOT_BYTES};
use super::{internal, run, Fold, Mine, Reader, ShmTeam, Waiter};
use crate::engine::{Area as Mem, Shared};
use crate::plan::{Kind, Spec};

/// Bytes the member hosting `k` of the team's `ni` images publishes for a data movement call
/// of `kind` with `n`-byte blocks (the broadcast's and scatter's root member; every member for
/// the others).
pub(crate) fn published_bytes(kind: Kind, n: usize, ni: usize, k: usize) -> usize {
    match kind {
        Kind::Broadcast => n,
        Kind::Scatter => n.saturating_mul(ni),
        Kind::Gather | Kind::GatherAll => n.saturating_mul(k),
        Kind::Exchange => n.saturating_mul(ni).saturating_mul(k),
        _ => usize::MAX,
    }
}

/// Whether a call of `kind` with image participants fits the smp-native algorithm: what the
/// member with the most images (`kmax`) publishes fits a data slot (a data movement call with
/// `n`-byte blocks over `ni` images), or the partial a member publishes does (a vector
/// reduction's or scan's `count` elements of `es` bytes, an array reduction's or scan's one
/// element); a barrier publishes nothing.
pub(crate) fn fits(kind: Kind, n: usize, ni: usize, kmax: usize, es: usize, count: usize) -> bool {
    match kind {
        Kind::Barrier => true,
        k if k.is_vector() => es.saturating_mul(count) <= SLOT_BYTES,
        k if k.is_reduction() => es <= SLOT_BYTES,
        _ => published_bytes(kind, n, ni, kmax) <= SLOT_BYTES,
    }
}

/// One member's images in an `m`-form call: the first image of every member (`first`, one
/// entry per member and one past the last, as `Geo::img_first`) and this member's areas, one
/// per local image in image order.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Images<'a> {
    pub(crate) first: &'a [u32],
    pub(crate) mine: &'a [Mine],
}

impl Images<'_> {
    fn first(&self, q: usize) -> usize {
        self.first[q] as usize
    }

    fn count(&self, q: usize) -> usize {
        (self.first[q + 1] - self.first[q]) as usize
    }

    /// The member that hosts image `img`.
    fn host(&self, img: usize) -> usize {
        // `first` is sorted; the host is the last member whose first image is at most `img`.
        self.first[1..].partition_point(|&f| f as usize <= img)
    }
}

/// Run the blocking data movement collective `spec` (image participants, uniform blocks) with
/// `mode` on `t`'s team, for this member's images `imgs`.
pub(crate) fn run_images(
    sh: &Shared,
    t: &ShmTeam,
    op: &'static str,
    spec: &Spec,
    mode: &Mode,
    imgs: Images<'_>,
) -> Result<()> {
    let np = t.n();
    if imgs.first.len() != np + 1 || imgs.first[np] as usize != spec.np {
        return Err(internal(op, "the image geometry does not match the team"));
    }
    if imgs.mine.len() != imgs.count(t.me) {
        return Err(internal(op, "an area list that is not one per local image"));
    }
    if spec.np == np {
        // One image per member: the images are the members.
        let mine = imgs.mine[0];
        return run(sh, t, op, spec, mode, mine);
    }
    let _busy = t.serialize(op)?;
    let e = t.epoch.load(Ordering::Relaxed) + 1;
    t.epoch.store(e, Ordering::Relaxed);
    let w = Waiter { sh, op, e };
    let r = match spec.kind {
        Kind::Barrier => super::barrier(sh, t, &w, e),
        k if k.is_reduction() => epoch_reduce(sh, t, &w, spec, mode, imgs),
        _ => epoch_images(sh, t, &w, spec, mode, imgs),
    };
    if r.is_err() {
        // This rank reads nothing more of the epoch: its later calls must not wait for it.
        t.area(t.me).set_done(e);
    }
    r
}

/// The epoch of a call whose local images disagree (`detail` says how): this member takes
/// the epoch as every member does, signals its entry, publishes the failure in its header
/// (its readers fail with `Usage` instead of waiting for a contribution that never comes)
/// and marks the epoch done; returns `Usage` with `detail`.
pub(crate) fn fail_images(
    sh: &Shared,
    t: &ShmTeam,
    op: &'static str,
    detail: String,
) -> Result<()> {
    let Ok(_busy) = t.serialize(op) else {
        return Err(Error::Usage { op, detail });
    };
    let e = t.epoch.load(Ordering::Relaxed) + 1;
    t.epoch.store(e, Ordering::Relaxed);
    let w = Waiter { sh, op, e };
    let (me, np) = (t.me, t.n());
    // The header line's reuse only: no wait for the others' entry.
    let r = super::enter(t, &w, false, false, None);
    t.area(me).set_entered(e);
    if np == 2 {
        t.area(1 - me).signal_bar(e);
    } else {
        t.area(me).signal_bar(e);
    }
    if r.is_ok() {
        // SAFETY: this rank owns its area and is its only writer now (`busy`); every member's
        // `done` reached the header line's reuse floor (`enter`); nothing is written but the
        // header's words.
        unsafe {
            t.area(me)
                .publish(super::chan::slot(e), e, LOC_FAILED, 0, |_| {})
        };
    }
    t.area(me).set_done(e);
    r?;
    Err(Error::Usage { op, detail })
}

/// Copy `len` bytes from `src + so` to `dst + dof`, both checked against their areas, unless
/// they are the same place.
fn copy_in(op: &'static str, src: Mem, so: usize, dst: Mem, dof: usize, len: usize) -> Result<()> {
    if so.checked_add(len).is_none_or(|end| end > src.len)
        || dof.checked_add(len).is_none_or(|end| end > dst.len)
    {
        return Err(internal(op, "a block beyond its area"));
    }
    super::local_copy(src, so, dst, dof, len);
    Ok(())
}

/// The bytes of `a`, checked to hold `len`.
fn bytes<'a>(op: &'static str, a: Mem, len: usize) -> Result<&'a [u8]> {
    if a.len < len {
        return Err(internal(op, "an area shorter than its operands"));
    }
    // SAFETY: the initiation resolved `a` as this rank's area (a source, or an image's
    // destination), valid for reads of its length until the call returns; the slice is used
    // only within the call.
    Ok(unsafe { super::bytes_of(Mem { ptr: a.ptr, len }) })
}

/// The body of [`run_images`] for a reduction or scan of epoch `w.e`: every member publishes
/// the fold of its images' operands (a vector's elementwise, in image order; an array's
/// elements in element order), copied into its scratch, and the readers fold the members'
/// partials in member order (spec/coll.md §3c, image participants).
fn epoch_reduce(
    sh: &Shared,
    t: &ShmTeam,
    w: &Waiter<'_>,
    spec: &Spec,
    mode: &Mode,
    imgs: Images<'_>,
) -> Result<()> {
    let (e, op) = (w.e, w.op);
    let s = super::chan::slot(e);
    let me = t.me;
    let (fme, kme) = (imgs.first(me), imgs.count(me));
    let fold = Fold::of(sh, spec, op)?;
    let es = fold.es;
    let vector = spec.kind.is_vector();
    let count = if vector { spec.n } else { 1 };
    let len = count * es;
    let mut tmp = vec![0u8; es];
    // An array reduction's or scan's partial: the fold of this member's images' runs, in
    // element order.
    let mut partial = Vec::new();
    // Each local image's first run (the array scans take one run per image).
    let mut runs: Vec<Option<crate::plan::Run>> = vec![None; kme];
    if !vector {
        for r in crate::plan::runs_iter(spec.src_lay, spec.n, spec.np)
            .filter(|r| (fme..fme + kme).contains(&r.part))
        {
            let li = r.part - fme;
            runs[li].get_or_insert(r);
            let xs = bytes(op, imgs.mine[li].src, (r.local + r.len) * es)?;
            let run = &xs[r.local * es..(r.local + r.len) * es];
            if partial.is_empty() {
                partial.resize(es, 0);
                fold.fold(&mut partial, run);
            } else {
                let mut t2 = vec![0u8; es];
                fold.fold(&mut t2, run);
                fold.fold_into(&mut partial, &t2, 1, &mut tmp);
            }
        }
    }
    let published = if vector { len } else { partial.len() };
    if published > SLOT_BYTES {
        return Err(internal(op, "a vector beyond the host scratch slot"));
    }
    super::enter(t, w, published > INLINE, mode.input == InSync::All, None)?;
    let sources: Vec<&[u8]> = if vector {
        imgs.mine
            .iter()
            .map(|m| bytes(op, m.src, len))
            .collect::<Result<_>>()?
    } else {
        Vec::new()
    };
    let loc = if published <= INLINE {
        LOC_INLINE
    } else {
        LOC_SLOT
    };
    // SAFETY: this rank owns its area and is its only writer now (`busy`); every member's
    // `done` reached the reuse floor (`enter`, of the data slot where `loc` is
    // `LOC_SLOT`); `published` bytes fit where `loc` says (checked above), and the fill
    // writes exactly that many through the pointer.
    unsafe {
        t.area(me).publish(s, e, loc, published, |p| {
            let out = std::slice::from_raw_parts_mut(p, published);
            if vector {
                out.copy_from_slice(sources[0]);
                let mut tmp = vec![0u8; es];
                for x in &sources[1..] {
                    fold.fold_into(out, x, count, &mut tmp);
                }
            } else {
                out.copy_from_slice(&partial);
            }
        });
    }
    let rd = Reader {
        sh,
        t,
        w,
        s,
        e,
        op,
        own: &[],
        after: "",
    };
    let np = t.n();
    let root = imgs.host(spec.root);
    // The fold of members `0..upto`'s partials into `out` (an image's destination or a
    // buffer of `len` bytes): whether any had one.
    let members = |upto: usize, out: Mem| rd.fold_members(&fold, count, upto, out);
    let buf_mem = |b: &mut Vec<u8>| Mem {
        ptr: b.as_mut_ptr() as usize,
        len: b.len(),
    };
    match spec.kind {
        Kind::ReduceAll | Kind::ReduceElemsAll => {
            let (head, rest) = imgs
                .mine
                .split_first()
                .ok_or_else(|| internal(op, "a member without images"))?;
            if !members(np, head.dst)? {
                return Err(Error::Usage {
                    op,
                    detail: "no participant holds an element".into(),
                });
            }
            for m in rest {
                copy_in(op, head.dst, 0, m.dst, 0, len)?;
            }
        }
        Kind::Reduce | Kind::ReduceElems => {
            if root == me {
                let dst = imgs.mine[spec.root - fme].dst;
                if !members(np, dst)? {
                    return Err(Error::Usage {
                        op,
                        detail: "no participant holds an element".into(),
                    });
                }
            }
        }
        Kind::ScanElems | Kind::ExclusiveScanElems => {
            // The carry of the members before this one, then each local image in order: an
            // inclusive scan's image gets carry ∘ its vector, an exclusive scan's the carry
            // (image 0 of the job keeps its destination).
            let mut acc = vec![0u8; len];
            let mut has = members(me, buf_mem(&mut acc))?;
            let exclusive = spec.kind == Kind::ExclusiveScanElems;
            let mut cur = vec![0u8; len];
            for (li, m) in imgs.mine.iter().enumerate() {
                // The image's vector, read before its destination (maybe the same place) is
                // written.
                cur.copy_from_slice(sources[li]);
                if exclusive && has {
                    copy_in(op, buf_mem(&mut acc), 0, m.dst, 0, len)?;
                }
                if has {
                    fold.fold_into(&mut acc, &cur, count, &mut tmp);
                } else {
                    acc.copy_from_slice(&cur);
                    has = true;
                }
                if !exclusive {
                    copy_in(op, buf_mem(&mut acc), 0, m.dst, 0, len)?;
                }
            }
        }
        Kind::Prefix | Kind::ExclusivePrefix => {
            // One run per image, in image order, the same layout at the destination: the
            // carry of the members before this one, then each local image's run after it.
            let mut carry = vec![0u8; es];
            let mut has = members(me, buf_mem(&mut carry))?;
            let exclusive = spec.kind == Kind::ExclusivePrefix;
            for (li, m) in imgs.mine.iter().enumerate() {
                let Some(r) = runs[li] else { continue };
                let xs = bytes(op, m.src, (r.local + r.len) * es)?;
                let mut total = vec![0u8; es];
                fold.fold(&mut total, &xs[r.local * es..(r.local + r.len) * es]);
                super::prefix_run(
                    op,
                    &fold,
                    exclusive,
                    has.then_some(&carry[..]),
                    m.src,
                    m.dst,
                    r.local,
                    r.len,
                )?;
                if has {
                    fold.fold_into(&mut carry, &total, 1, &mut tmp);
                } else {
                    carry.copy_from_slice(&total);
                    has = true;
                }
            }
        }
        _ => return Err(internal(op, "no image form of this operation")),
    }
    t.area(me).set_done(e);
    if mode.output == OutSync::All {
        super::all_done(t, w, |_| false)?;
    }
    Ok(())
}

/// The body of [`run_images`] for epoch `w.e`.
fn epoch_images(
    sh: &Shared,
    t: &ShmTeam,
    w: &Waiter<'_>,
    spec: &Spec,
    mode: &Mode,
    imgs: Images<'_>,
) -> Result<()> {
    let (e, op) = (w.e, w.op);
    let s = super::chan::slot(e);
    let (me, np, ni) = (t.me, t.n(), spec.np);
    let n = spec
        .uniform
        .ok_or_else(|| internal(op, "blocks of different sizes"))?;
    let (fme, kme) = (imgs.first(me), imgs.count(me));
    let root_img = spec.root;
    let root = imgs.host(root_img);
    let rooted = matches!(spec.kind, Kind::Broadcast | Kind::Scatter);
    let hosts_root = root == me;
    // What this member publishes: the root's source, or its images' blocks or rows.
    let publishes = !rooted || hosts_root;
    let len = if publishes {
        published_bytes(spec.kind, n, ni, kme)
    } else {
        0
    };
    if len > SLOT_BYTES {
        return Err(Error::Usage {
            op,
            detail: format!(
                "{len} bytes to contribute are more than the host scratch slot holds \
                 ({SLOT_BYTES})"
            ),
        });
    }
    // Reuse of this member's slot (its data slot too where its contribution goes there),
    // then the entry: as for rank participants.
    super::enter(
        t,
        w,
        len > INLINE,
        mode.input == InSync::All,
        rooted.then_some(hosts_root),
    )?;
    // The pieces this member publishes, in order.
    let root_src = || -> Result<Mem> {
        let m = imgs
            .mine
            .get(root_img - fme)
            .ok_or_else(|| internal(op, "the root image is not on this rank"))?;
        Ok(m.src)
    };
    let src_root = if rooted && hosts_root {
        Some(root_src()?)
    } else {
        None
    };
    let per = match spec.kind {
        Kind::Gather | Kind::GatherAll => n,
        Kind::Exchange => n.saturating_mul(ni),
        _ => 0,
    };
    if !rooted {
        for m in imgs.mine {
            if m.src.len < per {
                return Err(internal(op, "a source shorter than its blocks"));
            }
        }
    }
    if let Some(src) = src_root {
        if src.len < len {
            return Err(internal(op, "a root source shorter than its blocks"));
        }
    }
    // A root member whose contribution fits the header line copies into its own images'
    // destinations and marks the epoch done before it publishes (as `epoch_call`'s
    // `root_early`), so an `OUT_ALLSYNC` reader does not wait for its `done`.
    let root_early = rooted && published_bytes(spec.kind, n, ni, 1) <= INLINE;
    let root_copies = |src: Mem| -> Result<()> {
        for (i, m) in imgs.mine.iter().enumerate() {
            let at = if spec.kind == Kind::Scatter {
                (fme + i) * n
            } else {
                0
            };
            copy_in(op, src, at, m.dst, 0, n)?;
        }
        Ok(())
    };
    if root_early {
        if let Some(src) = src_root {
            root_copies(src)?;
            t.area(me).set_done(e);
        }
    }
    let loc = if len <= INLINE { LOC_INLINE } else { LOC_SLOT };
    // SAFETY: this rank owns its area and is its only writer now (`busy`); every member's
    // `done` reached the reuse floor (of the data slot where `loc` is `LOC_SLOT`); `len` fits
    // where `loc` says (checked against `SLOT_BYTES` above), and the pieces copied add up to
    // `len` bytes read from areas checked to hold them.
    unsafe {
        t.area(me).publish(s, e, loc, len, |p| {
            if let Some(src) = src_root {
                amnet_core::mem::copy(src.ptr as *const u8, p, len);
            } else if publishes {
                for (i, m) in imgs.mine.iter().enumerate() {
                    amnet_core::mem::copy(m.src.ptr as *const u8, p.add(i * per), per);
                }
            }
        });
    }
    let rd = Reader {
        sh,
        t,
        w,
        s,
        e,
        op,
        own: &[],
        after: if mode.input == InSync::All && rooted {
            " (published once every member's entry signal is in: IN_ALLSYNC)"
        } else {
            ""
        },
    };
    // Copy `len` bytes at `off` of member `q`'s contribution to `dst + at`, checked.
    let fetch = |q: usize, off: usize, len: usize, dst: Mem, at: usize| -> Result<()> {
        if at.checked_add(len).is_none_or(|end| end > dst.len) {
            return Err(internal(op, "a block beyond its destination"));
        }
        rd.fetch(q, off, len, dst.ptr + at)
    };
    match spec.kind {
        Kind::Broadcast | Kind::Scatter => {
            if let Some(src) = src_root {
                if !root_early {
                    root_copies(src)?;
                }
            } else {
                let want = published_bytes(spec.kind, n, ni, 1);
                rd.exact(root, want)?;
                for (i, m) in imgs.mine.iter().enumerate() {
                    let off = if spec.kind == Kind::Scatter {
                        (fme + i) * n
                    } else {
                        0
                    };
                    fetch(root, off, n, m.dst, 0)?;
                }
            }
        }
        Kind::Gather | Kind::GatherAll => {
            // Every member's run of blocks lands at its first image's block.
            let gather_into = |dst: Mem| -> Result<()> {
                for q in 0..np {
                    fetch(q, 0, imgs.count(q) * n, dst, imgs.first(q) * n)?;
                }
                Ok(())
            };
            if spec.kind == Kind::GatherAll {
                let (head, rest) = imgs
                    .mine
                    .split_first()
                    .ok_or_else(|| internal(op, "a member without images"))?;
                gather_into(head.dst)?;
                for m in rest {
                    copy_in(op, head.dst, 0, m.dst, 0, ni * n)?;
                }
            } else if (fme..fme + kme).contains(&root_img) {
                gather_into(imgs.mine[root_img - fme].dst)?;
            }
        }
        Kind::Exchange => {
            // Destination image j's block i is source image i's block j, from the member
            // hosting i: its row `i - first` of blocks.
            for (j, m) in imgs.mine.iter().enumerate() {
                let pj = fme + j;
                for q in 0..np {
                    let fq = imgs.first(q);
                    for i in fq..fq + imgs.count(q) {
                        fetch(q, (i - fq) * per + pj * n, n, m.dst, i * n)?;
                    }
                }
            }
        }
        _ => return Err(internal(op, "no image form of this operation")),
    }
    if !(root_early && hosts_root) {
        t.area(me).set_done(e);
    }
    if mode.output == OutSync::All {
        super::all_done(t, w, |i| root_early && i == root)?;
    }
    Ok(())
}

/// What the image threads of a member agree on in one `ALL_THREADS` call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct JoinKey {
    pub(crate) kind: Kind,
    pub(crate) flags: u32,
    /// The block size of a data movement call.
    pub(crate) n: Option<usize>,
    pub(crate) root: usize,
    /// A reduction's element size, element count and function.
    pub(crate) es: usize,
    pub(crate) count: usize,
    pub(crate) func: usize,
}

/// The meeting point of a member's image threads in an `ALL_THREADS` call on one team: each
/// leaves its areas, and the last to arrive runs the call for all of them (one epoch, as an
/// `m` form) while the others wait for its outcome. No message and no other thread is
/// involved: the member's images join the algorithm through its memory. The protocol
/// (`arrive`, `finish`, `outcome`, `withdraw`) has a loom model below.
#[derive(Debug)]
pub(crate) struct Join {
    st: Mutex<JoinState>,
    /// Calls completed: the outcome of call `g` is in `JoinState::outcome` once this passed
    /// `g` (stored with Release after the outcome, under the lock).
    done: AtomicU64,
}

#[derive(Debug, Default)]
struct JoinState {
    /// Each local image's areas, once it arrived for the current call.
    slots: Vec<Option<Mine>>,
    arrived: usize,
    key: Option<JoinKey>,
    /// A disagreement between the local images' calls, reported to all of them.
    bad: Option<String>,
    /// Calls begun: the current call's number.
    gen: u64,
    /// The last completed call's number and outcome.
    outcome: Option<(u64, Result<()>)>,
}

/// What an image that arrived does next.
#[derive(Debug)]
enum Arrival {
    /// The last to arrive: run call `gen` with every image's areas (image order), unless the
    /// images disagree (`bad`), then `finish` it.
    Run {
        list: Vec<Mine>,
        gen: u64,
        bad: Option<String>,
    },
    /// Wait for the outcome of call `gen`.
    Wait { gen: u64 },
}

impl Default for Join {
    fn default() -> Join {
        Join {
            st: Mutex::new(JoinState::default()),
            done: AtomicU64::new(0),
        }
    }
}

impl Join {
    fn lock(&self) -> impl std::ops::DerefMut<Target = JoinState> + '_ {
        self.st
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Local image `li` of `k` arrives with its areas `mine` for a call that `key` describes.
    fn arrive(
        &self,
        op: &'static str,
        (li, k): (usize, usize),
        mine: Mine,
        key: JoinKey,
    ) -> Result<Arrival> {
        let mut st = self.lock();
        if st.arrived == 0 {
            st.slots.clear();
            st.slots.resize(k, None);
            st.key = Some(key);
            st.bad = None;
        }
        if li >= st.slots.len() || st.slots[li].is_some() {
            return Err(Error::Usage {
                op,
                detail: format!(
                    "local image {li} entered an ALL_THREADS call on this team twice, or the \
                     rank's images changed (expected {k})"
                ),
            });
        }
        if st.key != Some(key) && st.bad.is_none() {
            st.bad = Some(format!(
                "the image threads of this rank disagree on an ALL_THREADS call: local image \
                 {li} calls {key:?}, an earlier one {:?}",
                st.key
            ));
        }
        st.slots[li] = Some(mine);
        st.arrived += 1;
        let gen = st.gen;
        if st.arrived < st.slots.len() {
            return Ok(Arrival::Wait { gen });
        }
        let list: Vec<Mine> = st.slots.iter_mut().filter_map(Option::take).collect();
        st.arrived = 0;
        st.gen += 1;
        let bad = st.bad.take();
        Ok(Arrival::Run { list, gen, bad })
    }

    /// The outcome of call `gen`, which its runner hands to the images waiting for it.
    fn finish(&self, gen: u64, r: Result<()>) {
        let mut st = self.lock();
        st.outcome = Some((gen, r));
        self.done.store(gen + 1, Ordering::Release);
    }

    /// Whether call `gen` has finished (Acquire).
    fn finished(&self, gen: u64) -> bool {
        self.done.load(Ordering::Acquire) > gen
    }

    /// The outcome of call `gen`, once finished (the image waiting for it has not yet arrived
    /// for a later call, so the outcome is still `gen`'s).
    fn outcome(&self, op: &'static str, gen: u64) -> Option<Result<()>> {
        if !self.finished(gen) {
            return None;
        }
        Some(match &self.lock().outcome {
            Some((g, out)) if *g == gen => out.clone(),
            _ => Err(internal(op, "an ALL_THREADS call's outcome went missing")),
        })
    }

    /// Local image `li` withdraws from call `gen` if the call has not started (its areas are
    /// no longer to be used): whether it did.
    fn withdraw(&self, li: usize, gen: u64) -> bool {
        let mut st = self.lock();
        if st.gen == gen && st.slots.get(li).is_some_and(Option::is_some) {
            st.slots[li] = None;
            st.arrived -= 1;
            return true;
        }
        false
    }

    /// Local image `li` of `k` takes part with its areas `mine` in a call that `key`
    /// describes: the last to arrive runs `run` with every image's areas in image order (or,
    /// where the images disagree on the call, with what differs); every image returns the
    /// call's outcome. The others wait, polling and advancing with the
    /// core's back-off; a wait that fails (`Error::Hang` under `AMNET_HANG_TIMEOUT` while
    /// some local image has not arrived) withdraws the image if the call has not started,
    /// else waits for the call to end, which its own waits bound.
    pub(crate) fn meet(
        &self,
        sh: &Shared,
        op: &'static str,
        (li, k): (usize, usize),
        mine: Mine,
        key: JoinKey,
        run: impl FnOnce(std::result::Result<&[Mine], String>) -> Result<()>,
    ) -> Result<()> {
        let gen = match self.arrive(op, (li, k), mine, key)? {
            Arrival::Run { list, gen, bad } => {
                let r = match bad {
                    Some(detail) => run(Err(detail)),
                    None => run(Ok(&list)),
                };
                self.finish(gen, r.clone());
                return r;
            }
            Arrival::Wait { gen } => gen,
        };
        let every = if sh.ep.backoff().yields() {
            super::OVERSUBSCRIBED_POLL
        } else {
            1
        };
        loop {
            let r = sh.wait_loop_every(
                every,
                || Ok(self.finished(gen)),
                || {
                    format!(
                        "rank {}: {op} (smp-native, ALL_THREADS) local image {li} waits for the \
                         other {} image thread(s) of this rank to call it",
                        sh.rank,
                        k - 1
                    )
                },
            );
            if let Some(out) = self.outcome(op, gen) {
                return out;
            }
            if r.is_err() && self.withdraw(li, gen) {
                return r;
            }
        }
    }
}

#[cfg(all(test, loom))]
mod loom_models {
    //! Run with `RUSTFLAGS="--cfg loom" cargo test -p amnet-coll --lib --release loom_`.
    use super::*;
    use loom::sync::atomic::AtomicUsize;
    use loom::sync::Arc;
    use loom::thread;

    const KEY: JoinKey = JoinKey {
        kind: Kind::Broadcast,
        flags: 0,
        n: Some(8),
        root: 0,
        es: 0,
        count: 0,
        func: 0,
    };

    fn mine(li: usize) -> Mine {
        Mine {
            src: Mem { ptr: li, len: 1 },
            dst: Mem { ptr: li, len: 1 },
            dst_seg: None,
            src_seg: None,
        }
    }

    /// Image `li` of `k` in one call: the runner checks that it got every image's areas in
    /// image order and counts the run; every image gets the runner's outcome (`Ok` for even
    /// calls, an error naming the call for odd ones).
    fn call(j: &Join, runs: &AtomicUsize, li: usize, k: usize, call_no: u64) -> Result<()> {
        let gen = match j.arrive("test", (li, k), mine(li), KEY).unwrap() {
            Arrival::Run { list, gen, bad } => {
                assert!(bad.is_none());
                let ptrs: Vec<usize> = list.iter().map(|m| m.src.ptr).collect();
                assert_eq!(ptrs, (0..k).collect::<Vec<_>>());
                runs.fetch_add(1, Ordering::Relaxed);
                let r = if call_no % 2 == 0 {
                    Ok(())
                } else {
                    Err(internal("test", &format!("call {call_no}")))
                };
                j.finish(gen, r.clone());
                return r;
            }
            Arrival::Wait { gen } => gen,
        };
        loop {
            if let Some(out) = j.outcome("test", gen) {
                return out;
            }
            thread::yield_now();
        }
    }

    /// Two images meet for two calls in a row: each call runs once, with both images' areas,
    /// and each image gets that call's outcome, although the runner of the first call
    /// arrives for the second while the other may not yet have read the first's.
    #[test]
    fn loom_images_meet_twice() {
        let mut b = loom::model::Builder::new();
        b.preemption_bound = Some(2);
        b.check(|| {
            let j = Arc::new(Join::default());
            let runs = Arc::new(AtomicUsize::new(0));
            let image = |li: usize, j: Arc<Join>, runs: Arc<AtomicUsize>| {
                move || {
                    for c in 0..2u64 {
                        let r = call(&j, &runs, li, 2, c);
                        assert_eq!(r.is_ok(), c % 2 == 0, "image {li} call {c}: {r:?}");
                    }
                }
            };
            let t1 = thread::spawn(image(1, j.clone(), runs.clone()));
            image(0, j.clone(), runs.clone())();
            t1.join().unwrap();
            assert_eq!(runs.load(Ordering::Relaxed), 2);
        });
    }

    /// An image that withdraws before the call starts leaves it to the others: the call runs
    /// once, with the areas of the images that stayed and of the one that came back.
    #[test]
    fn loom_image_withdraws_before_the_call() {
        loom::model(|| {
            let j = Arc::new(Join::default());
            let runs = Arc::new(AtomicUsize::new(0));
            let (j1, r1) = (j.clone(), runs.clone());
            let t = thread::spawn(move || call(&j1, &r1, 1, 2, 0));
            // Image 0 arrives, withdraws if the call has not started, and comes back.
            match j.arrive("test", (0, 2), mine(0), KEY).unwrap() {
                Arrival::Run { gen, .. } => j.finish(gen, Ok(())),
                Arrival::Wait { gen } => {
                    if j.withdraw(0, gen) {
                        call(&j, &runs, 0, 2, 0).unwrap();
                    } else {
                        while j.outcome("test", gen).is_none() {
                            thread::yield_now();
                        }
                    }
                }
            }
            t.join().unwrap().unwrap();
        });
    }
}
