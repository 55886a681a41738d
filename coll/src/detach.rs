//! Detaching a collective from the client memory it was lent: what the typed API does when
//! a wait ends, so that returning from it leaves the client's buffers free to reuse.
//!
//! A collective reads and writes its participants' areas from whichever thread runs its
//! progress: handlers copy arriving data into an open destination under the state lock; a
//! push reads a source outside it while its part is `pushing`; reduction and schedule steps
//! read and write both outside it while their op is `working`. [`Shared::detach`] takes the
//! lock at a moment when no thread is in such a step, and then points the areas that overlap
//! the lent memory elsewhere, so that every later access misses the client:
//!
//! ```text
//!   in flight (the wait failed)      areas -> library copies of their current bytes;
//!                                     the collective goes on (peers still get this rank's
//!                                     data) and what arrives later lands in the copies,
//!                                     freed when the collective ends
//!   complete (a sync succeeded)      areas -> empty; a message that still arrives for them
//!                                     (only a peer that disagrees on the arguments sends
//!                                     one) fails the collective instead of writing
//! ```
//!
//! A handle that is still live is retired: it no longer counts as unsynced (barriers and
//! `destroy` are allowed again), and the collective, once complete, is dropped by the next
//! retirement.

use crate::engine::{Area, Key, Op, Shared, State};

/// Whether `a` shares a byte with one of the `lent` ranges `(address, length)`.
fn overlaps(a: Area, lent: &[(usize, usize)]) -> bool {
    a.len > 0
        && lent
            .iter()
            .any(|&(p, n)| n > 0 && a.ptr < p.saturating_add(n) && p < a.ptr.saturating_add(a.len))
}

/// Whether two areas share a byte.
fn meet(a: Area, b: Area) -> bool {
    a.len > 0 && b.len > 0 && a.ptr < b.ptr + b.len && b.ptr < a.ptr + a.len
}

/// A library copy of client bytes `ptr..ptr + len`, kept by `op`; its address.
///
/// # Safety
/// - `ptr..ptr + len` is valid for reads and no thread writes it during the call.
unsafe fn keep_copy(op: &mut Op, ptr: usize, len: usize) -> usize {
    // SAFETY: the caller guarantees the range is readable and not written meanwhile.
    let v = unsafe { std::slice::from_raw_parts(ptr as *const u8, len) }.to_vec();
    let at = v.as_ptr() as usize;
    // Moving the Vec into `kept` keeps its heap buffer (and `at`) where it is.
    op.kept.push(v);
    at
}

/// Point `op`'s areas that overlap `lent` away from the client: to empty areas when the
/// collective is complete, else to library copies (an in-place pair to one copy, keeping
/// their offsets).
///
/// # Safety
/// - No thread runs a step of `op` or pushes one of its parts (the state lock is held and
///   `op.working` and every part's `pushing` are false).
/// - Every area of `op` that overlaps `lent` is valid for reads.
unsafe fn detach_op(op: &mut Op, lent: &[(usize, usize)], complete: bool) {
    for i in 0..op.parts.len() {
        let (src, dst) = (op.parts[i].src, op.parts[i].dst);
        let (hs, hd) = (overlaps(src, lent), overlaps(dst, lent));
        if !hs && !hd {
            continue;
        }
        let (src, dst) = if complete {
            (
                if hs { Area::default() } else { src },
                if hd { Area::default() } else { dst },
            )
        } else if hs && hd && meet(src, dst) {
            let lo = src.ptr.min(dst.ptr);
            let hi = (src.ptr + src.len).max(dst.ptr + dst.len);
            // SAFETY: both areas are valid for reads (the caller's contract) and overlap, so
            // their hull is one client range; nothing writes it now (no step runs, and
            // handlers write only under the state lock, which is held).
            let at = unsafe { keep_copy(op, lo, hi - lo) };
            (
                Area {
                    ptr: at + (src.ptr - lo),
                    len: src.len,
                },
                Area {
                    ptr: at + (dst.ptr - lo),
                    len: dst.len,
                },
            )
        } else {
            let mut moved = |a: Area, hit: bool| {
                if hit {
                    // SAFETY: as above, for one area.
                    let at = unsafe { keep_copy(op, a.ptr, a.len) };
                    Area {
                        ptr: at,
                        len: a.len,
                    }
                } else {
                    a
                }
            };
            (moved(src, hs), moved(dst, hd))
        };
        op.parts[i].src = src;
        op.parts[i].dst = dst;
    }
}

/// Retire live handle `h`, then drop every complete group whose handles are all gone (the
/// groups of retired handles).
fn retire(st: &mut State, h: u64) {
    let Some(rec) = st.handles.remove(&h) else {
        return;
    };
    st.unsynced = st.unsynced.saturating_sub(1);
    if let Some(ts) = st.teams.get_mut(&rec.group.team) {
        ts.unsynced = ts.unsynced.saturating_sub(1);
    }
    if let Some(g) = st.groups.get_mut(&rec.group) {
        g.handles = g.handles.saturating_sub(1);
    }
    let done: Vec<Key> = st
        .groups
        .iter()
        .filter(|(_, g)| g.complete && g.handles == 0)
        .map(|(k, _)| *k)
        .collect();
    for gid in done {
        let Some(g) = st.groups.remove(&gid) else {
            continue;
        };
        for seq in g.members {
            let k = Key {
                team: gid.team,
                seq,
            };
            if st.ops.remove(&k).is_some_and(|o| o.error.is_some()) {
                st.failed.insert(k);
            }
        }
    }
}

impl Shared {
    /// Make collective group `group` stop touching the client memory `lent` (ranges
    /// `(address, length)` of this process) and retire `handle` if it is still live. Returns
    /// once no thread is in a step of the group's collectives; afterwards no access of theirs
    /// reaches `lent` (see the module's table). A group this rank no longer holds is left
    /// alone.
    ///
    /// # Safety
    /// - Every area of the group's collectives that overlaps `lent` is valid for reads
    ///   during the call (the caller still holds the memory it lent them).
    pub(crate) unsafe fn detach(&self, group: Key, handle: Option<u64>, lent: &[(usize, usize)]) {
        let mut spins = 0u32;
        loop {
            let mut st = self.lock();
            let members: Vec<Key> = match st.groups.get(&group) {
                Some(g) => g
                    .members
                    .iter()
                    .map(|&seq| Key {
                        team: group.team,
                        seq,
                    })
                    .collect(),
                None => vec![group],
            };
            let busy = members.iter().any(|k| {
                st.ops
                    .get(k)
                    .is_some_and(|o| o.working || o.parts.iter().any(|p| p.pushing))
            });
            if busy {
                // A step runs on another thread, without waiting for any rank; it ends soon.
                drop(st);
                spins += 1;
                if spins < 64 {
                    std::thread::yield_now();
                } else {
                    std::thread::sleep(std::time::Duration::from_micros(50));
                }
                continue;
            }
            let complete = st.groups.get(&group).is_none_or(|g| g.complete);
            for k in &members {
                if let Some(op) = st.ops.get_mut(k) {
                    // SAFETY: no step runs and no part pushes (checked above, under the lock
                    // held since); the areas overlapping `lent` are readable (our contract).
                    unsafe { detach_op(op, lent, complete) };
                }
            }
            if let Some(h) = handle {
                retire(&mut st, h);
            }
            return;
        }
    }
}
