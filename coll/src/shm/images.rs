//! The smp-native data movement collectives with image participants (spec/coll.md §3c): an
//! `m`-form call, in which one thread of each member enters every image the member hosts with
//! a list of addresses, runs one epoch for the member. Images are numbered member-major
//! (member `q` hosts images `first[q]..first[q + 1]`), so a member's images are one run of
//! the participant order, and a member publishes what all of them contribute at once:
//! - broadcast and scatter: the member that hosts the root image publishes the root's source;
//! - gather and gather_all: every member its images' blocks, one after the other (image
//!   order), so its run of the destination is one copy;
//! - exchange: every member its images' rows of blocks, one after the other.
//!
//! A member's contribution is always copied into its scratch (the header line or the data
//! slot), never read in place from its segment: the readers then wait for nothing at the end
//! but what the sync mode asks, and an in-place source (a block of the image's own
//! destination) is read from the copy while the destination is written. The reads are those of
//! the rank participants' algorithm (`epoch_call`), once per local image.

use std::sync::atomic::Ordering;

use amnet_core::{Error, Result};
use amnet_sync_modes::{InSync, Mode, OutSync};

use super::chan::{INLINE, LOC_INLINE, LOC_SLOT, SLOT_BYTES};
use super::{all_entered, internal, run, Busy, Mine, Reader, ShmTeam, Waiter};
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

/// Whether a data movement call of `kind` with image participants fits the smp-native
/// algorithm: what the member with the most images (`kmax`) publishes fits a data slot.
pub(crate) fn fits(kind: Kind, n: usize, ni: usize, kmax: usize) -> bool {
    published_bytes(kind, n, ni, kmax) <= SLOT_BYTES
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
    if t.busy.swap(true, Ordering::Acquire) {
        return Err(Error::Usage {
            op,
            detail: "another thread of this rank is in a collective on this team; calls on one \
                     team are serialized"
                .into(),
        });
    }
    let _busy = Busy(&t.busy);
    let e = t.epoch.load(Ordering::Relaxed) + 1;
    t.epoch.store(e, Ordering::Relaxed);
    let w = Waiter { sh, op, e };
    let r = epoch_images(sh, t, &w, spec, mode, imgs);
    if r.is_err() {
        // This rank reads nothing more of the epoch: its later calls must not wait for it.
        t.area(t.me).set_done(e);
    }
    r
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
    // Reuse: every member is done with what slot `s` held (its data slot too where this
    // member's contribution goes there).
    let floor = super::chan::reuse_floor(e, len > INLINE);
    if t.floor_seen.load(Ordering::Relaxed) < floor {
        w.wait(
            || (0..np).all(|i| t.area(i).done() >= floor),
            || {
                let late: Vec<usize> = (0..np).filter(|&i| t.area(i).done() < floor).collect();
                format!("team ranks {late:?} to finish epoch {floor} (slot reuse)")
            },
        )?;
        let low = (0..np).map(|i| t.area(i).done()).min().unwrap_or(floor);
        t.floor_seen.store(low, Ordering::Relaxed);
    }
    if mode.input == InSync::All {
        // As for rank participants: a rooted call's root member waits for the others' entry
        // words; the others need every member's entry.
        if rooted {
            if hosts_root {
                w.wait(
                    || (0..np).all(|i| i == me || t.area(i).entered() >= e),
                    || {
                        let late: Vec<usize> = (0..np)
                            .filter(|&i| i != me && t.area(i).entered() < e)
                            .collect();
                        format!("the entry signal of team ranks {late:?} (IN_ALLSYNC)")
                    },
                )?;
            } else {
                t.area(me).set_entered(e);
            }
        } else {
            all_entered(t, w, e, "the entry signal (IN_ALLSYNC)")?;
        }
    }
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
        w.wait(
            || (0..np).all(|i| (root_early && i == root) || t.area(i).done() >= e),
            || {
                let late: Vec<usize> = (0..np)
                    .filter(|&i| !(root_early && i == root) && t.area(i).done() < e)
                    .collect();
                format!("team ranks {late:?} to finish (OUT_ALLSYNC)")
            },
        )?;
    }
    Ok(())
}
