//! The flag protocol of the smp-native collectives, over each rank's host scratch
//! ([`amnet_core::LayerHooks::host_scratch`]): [`NAREAS`] [`Area`]s per rank, one per team
//! with smp-native state (area 0 the world team's), each owned (written) by that rank except
//! for its barrier word on a team of two, which the partner writes.
//!
//! Every collective of a team is numbered by an *epoch* (base + 1, base + 2, ...: the world's
//! base is 0, another team's see below; every member counts the same calls) and uses slot
//! `epoch % NHEADERS` of each member's area: its header line, and the slot's data, data slot
//! `epoch % NSLOTS` (fewer: the data slots take the area's bytes, the header lines a page):
//! - **publish**: at entry a member writes what it contributes (inline in the slot's header
//!   line, in the slot's data, or only where it lies in its segment), then the header's epoch
//!   with Release. The header's epoch doubles as the member's entry signal.
//! - **read**: a member that needs a peer's contribution waits (Acquire) until that peer's
//!   header holds the epoch, then copies or folds from where the header says.
//! - **done**: a member stores the epoch in its `done` word (Release) once it read everything
//!   it needed from its peers.
//! - **reuse**: a member writes slot `s` for epoch `e` only when every member's `done` is at
//!   least `e - NHEADERS` (nobody still reads what the header held), and `e - NSLOTS` where
//!   its contribution goes to the data slot (nobody still reads what the data slot held): a
//!   run of small calls looks at its peers' `done` lines once every `NHEADERS` calls.
//!
//! The barrier (and the entry signal of `IN_ALLSYNC`) runs on each area's `bar` word: of two
//! members each stores the epoch into the other's word and waits until its own holds at least
//! the epoch (one round of a dissemination barrier); of more, each stores the epoch into its
//! own word and waits until every member's holds it (a flat barrier). Epochs only grow, so no
//! word is ever reset (the counter is the sense). The loom models at the end check the
//! publish/read/done/reuse cycle, the barrier, the takeover of areas by a new team (below),
//! and the entry words of a broadcast under `IN_ALLSYNC` with its root's early `done`.
//!
//! An area passes from a destroyed team to a new one without being cleared: the new team
//! counts its epochs from a **base** at least the [`Area::high_water`] of every member's area
//! (agreed when the team is made), and every member first stores the base into its own `done`
//! ([`Area::start_at`]). Every word of the area then holds at most the base, below the new
//! team's first epoch, so no old header or barrier word passes for a new one.
//!
//! Nothing here waits: the waits (with the core's back-off and progress) are the caller's.

use amnet_core::sync::{AtomicU64, Ordering, UnsafeCell};

/// Spacing of the words that different ranks write (two cache lines: the adjacent-line
/// prefetcher of x86 cores pairs lines).
pub(crate) const LINE: usize = 128;
/// Data slots per area: a member may run this many collectives with data in the slot ahead
/// of the slowest reader.
#[cfg(not(loom))]
pub(crate) const NSLOTS: usize = 4;
#[cfg(loom)]
pub(crate) const NSLOTS: usize = 2;
/// Header lines per area (a multiple of `NSLOTS`): a member may run this many collectives
/// whose contributions fit the header line ahead of the slowest reader.
#[cfg(not(loom))]
pub(crate) const NHEADERS: usize = 16;
#[cfg(loom)]
pub(crate) const NHEADERS: usize = 4;
/// Bytes of a header line that carry data.
pub(crate) const INLINE: usize = LINE - 24;
/// Bytes of one slot's data.
#[cfg(not(loom))]
pub(crate) const SLOT_BYTES: usize = 124 << 10;
#[cfg(loom)]
pub(crate) const SLOT_BYTES: usize = 64;

/// Where a header's data lies: in the header line.
pub(crate) const LOC_INLINE: u64 = 0;
/// In the slot's data.
pub(crate) const LOC_SLOT: u64 = 1;
/// No contribution: the owner's call failed before it could make one (its local images
/// disagreed on the call); its readers fail too.
pub(crate) const LOC_FAILED: u64 = 2;
/// In the owner's segment, at the offset in the low 62 bits.
pub(crate) const LOC_SEG: u64 = 1 << 63;

/// One word on a line of its own.
#[repr(C, align(128))]
pub(crate) struct Word {
    v: AtomicU64,
}

/// The owner's `done` word and its entry word, on one line: a member that finishes a call and
/// enters the next one at once writes both, and a root waiting for both fetches the line once.
#[repr(C, align(128))]
pub(crate) struct DoneLine {
    done: AtomicU64,
    entry: AtomicU64,
}

/// A slot's header line.
#[repr(C, align(128))]
pub(crate) struct Header {
    /// The epoch whose contribution the slot holds (0: none yet); stored last, Release.
    epoch: AtomicU64,
    /// Where the data lies: `LOC_INLINE`, `LOC_SLOT`, or `LOC_SEG | offset`; `LOC_FAILED`
    /// where the owner made none.
    loc: AtomicU64,
    /// Bytes contributed.
    len: AtomicU64,
    inline: UnsafeCell<[u8; INLINE]>,
}

/// Bytes of host scratch per area (an [`Area`] fits, checked at compile time; eight fit the
/// layers' part of the scratch).
pub(crate) const AREA_BYTES: usize = 508 << 10;
/// Areas in a rank's host scratch: the world team's and those of up to `NAREAS - 1` other
/// teams alive at once.
pub(crate) const NAREAS: usize = amnet_core::LAYER_SCRATCH_BYTES / AREA_BYTES;

/// Bytes of an area's control part (done, barrier words, headers), padded to a page.
const CONTROL: usize = 4096;
const CONTROL_USED: usize = LINE * (2 + NHEADERS);
const PAD: usize = CONTROL - CONTROL_USED;

/// One rank's area.
#[repr(C)]
pub(crate) struct Area {
    done: DoneLine,
    bar: Word,
    hdr: [Header; NHEADERS],
    _pad: [u8; PAD],
    data: [UnsafeCell<[u8; SLOT_BYTES]>; NSLOTS],
}

#[cfg(not(loom))]
const _: () = {
    assert!(std::mem::size_of::<Header>() == LINE);
    assert!(std::mem::size_of::<Word>() == LINE);
    assert!(std::mem::size_of::<DoneLine>() == LINE);
    assert!(std::mem::size_of::<Area>() <= AREA_BYTES);
    assert!(AREA_BYTES % 4096 == 0 && NAREAS >= 8);
    assert!(CONTROL_USED <= CONTROL && NHEADERS % NSLOTS == 0);
    assert!(std::mem::align_of::<Area>() <= 4096);
};

/// What a header says once it holds the epoch asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Published {
    pub(crate) loc: u64,
    pub(crate) len: usize,
}

impl Area {
    /// A fresh area on the heap (loom: its atomics must be loom's own objects).
    #[cfg(all(test, loom))]
    pub(crate) fn boxed() -> Box<Area> {
        let word = || Word {
            v: AtomicU64::new(0),
        };
        let header = || Header {
            epoch: AtomicU64::new(0),
            loc: AtomicU64::new(0),
            len: AtomicU64::new(0),
            inline: UnsafeCell::new([0; INLINE]),
        };
        Box::new(Area {
            done: DoneLine {
                done: AtomicU64::new(0),
                entry: AtomicU64::new(0),
            },
            bar: word(),
            hdr: std::array::from_fn(|_| header()),
            _pad: [0; PAD],
            data: std::array::from_fn(|_| UnsafeCell::new([0; SLOT_BYTES])),
        })
    }

    /// The epoch up to which the owner read everything it needed (Acquire).
    #[inline]
    pub(crate) fn done(&self) -> u64 {
        self.done.done.load(Ordering::Acquire)
    }

    /// The owner: everything of epochs up to `e` is read (Release).
    #[inline]
    pub(crate) fn set_done(&self, e: u64) {
        self.done.done.store(e, Ordering::Release);
    }

    /// The largest epoch any word of the area holds (its `done`, barrier words and headers):
    /// what a team that takes the area over must count past.
    pub(crate) fn high_water(&self) -> u64 {
        self.hdr
            .iter()
            .map(|h| h.epoch.load(Ordering::Acquire))
            .fold(self.done().max(self.entered()).max(self.bar()), u64::max)
    }

    /// The owner, taking the area over for a team whose epochs start after `base` (at least
    /// the `high_water` of every member's area): nothing of the earlier epochs is read any
    /// more, so the new team's first slot reuse does not wait for them.
    pub(crate) fn start_at(&self, base: u64) {
        self.set_done(base);
    }

    /// The last epoch the owner entered where it signals entry alone (an `IN_ALLSYNC` call
    /// with one publisher), Acquire.
    #[inline]
    pub(crate) fn entered(&self) -> u64 {
        self.done.entry.load(Ordering::Acquire)
    }

    /// The owner entered epoch `e` (Release): whatever it did before may be read now.
    #[inline]
    pub(crate) fn set_entered(&self, e: u64) {
        self.done.entry.store(e, Ordering::Release);
    }

    /// The barrier word (Acquire).
    #[inline]
    pub(crate) fn bar(&self) -> u64 {
        self.bar.v.load(Ordering::Acquire)
    }

    /// Store `e` into the barrier word (Release): with two members the partner does, to say
    /// the owner may pass epoch `e`'s entry; with more the owner does, to say it entered.
    #[inline]
    pub(crate) fn signal_bar(&self, e: u64) {
        self.bar.v.store(e, Ordering::Release);
    }

    /// Slot `s`'s header once it holds epoch `e` (Acquire), else None.
    #[inline]
    pub(crate) fn published(&self, s: usize, e: u64) -> Option<Published> {
        let h = &self.hdr[s];
        if h.epoch.load(Ordering::Acquire) != e {
            return None;
        }
        Some(Published {
            loc: h.loc.load(Ordering::Relaxed),
            len: usize::try_from(h.len.load(Ordering::Relaxed)).unwrap_or(usize::MAX),
        })
    }

    /// The owner publishes `len` bytes for epoch `e` in slot `s`: `fill` writes them where
    /// `loc` says (given a pointer into the header line for `LOC_INLINE`, into the slot's
    /// data for `LOC_SLOT`, nothing for `LOC_SEG`), then the header's epoch is stored with
    /// Release. `len` 0 publishes only the entry.
    ///
    /// # Safety
    /// - Only the owner calls it, from one thread at a time, and only once every member's
    ///   `done` is at least `reuse_floor(e, loc == LOC_SLOT)` (nobody reads the header's, or
    ///   the data slot's, previous contents).
    /// - `len` fits where `loc` says (`INLINE` or `SLOT_BYTES`), and `fill` writes at most
    ///   `len` bytes through the pointer it gets.
    pub(crate) unsafe fn publish(
        &self,
        s: usize,
        e: u64,
        loc: u64,
        len: usize,
        fill: impl FnOnce(*mut u8),
    ) {
        let h = &self.hdr[s];
        match loc {
            LOC_INLINE => h.inline.with_mut(|p| fill(p.cast::<u8>())),
            LOC_SLOT => self.data[s % NSLOTS].with_mut(|p| fill(p.cast::<u8>())),
            _ => {}
        }
        h.loc.store(loc, Ordering::Relaxed);
        h.len.store(len as u64, Ordering::Relaxed);
        h.epoch.store(e, Ordering::Release);
    }

    /// Read the contribution `p` that slot `s` holds: `f` gets a pointer to its first byte
    /// (the header line's or the slot's data; not called for `LOC_SEG`).
    ///
    /// # Safety
    /// - `p` came from [`Area::published`] for slot `s` of this area, and the reader has not
    ///   yet stored an epoch at or past the published one into its own `done` (the owner does
    ///   not overwrite the slot before that); `f` reads at most `p.len` bytes.
    pub(crate) unsafe fn read<R>(
        &self,
        s: usize,
        p: Published,
        f: impl FnOnce(*const u8) -> R,
    ) -> Option<R> {
        match p.loc {
            LOC_INLINE => Some(self.hdr[s].inline.with(|q| f(q.cast::<u8>()))),
            LOC_SLOT => Some(self.data[s % NSLOTS].with(|q| f(q.cast::<u8>()))),
            _ => None,
        }
    }
}

/// Slot (header line) of epoch `e`; its data slot is `slot(e) % NSLOTS`.
#[inline]
pub(crate) fn slot(e: u64) -> usize {
    #[allow(clippy::cast_possible_truncation)] // below NHEADERS
    let s = (e % NHEADERS as u64) as usize;
    s
}

/// The epoch every member's `done` must reach before slot `slot(e)` is written for `e`:
/// its header line, and with `data` its data slot too.
#[inline]
pub(crate) fn reuse_floor(e: u64, data: bool) -> u64 {
    e.saturating_sub(if data { NSLOTS } else { NHEADERS } as u64)
}

#[cfg(all(test, loom))]
mod loom_models {
    //! Run with `RUSTFLAGS="--cfg loom" cargo test -p amnet-coll --lib --release loom_`.
    use super::*;
    use loom::sync::Arc;
    use loom::thread;

    fn spin(mut ok: impl FnMut() -> bool) {
        while !ok() {
            thread::yield_now();
        }
    }

    /// One broadcast of epoch `e` between two members: the root publishes `v` in its slot,
    /// the other reads it; both then mark the epoch done. Returns the value this member holds.
    fn bcast(me: usize, areas: &[Box<Area>; 2], e: u64, root: usize, v: u64) -> u64 {
        let s = slot(e);
        // The root's value goes to the data slot, the other's entry only to the header line.
        spin(|| areas.iter().all(|a| a.done() >= reuse_floor(e, me == root)));
        let got = if me == root {
            // SAFETY: the owner, after the reuse floor; 8 bytes fit the slot.
            unsafe {
                areas[me].publish(s, e, LOC_SLOT, 8, |p| {
                    p.cast::<u64>().write_unaligned(v);
                });
            }
            v
        } else {
            // SAFETY: the owner, after the reuse floor; an entry only.
            unsafe { areas[me].publish(s, e, LOC_INLINE, 0, |_| {}) };
            let mut got = None;
            spin(|| {
                got = areas[root].published(s, e);
                got.is_some()
            });
            // SAFETY: published for slot s, not yet marked done.
            unsafe { areas[root].read(s, got.unwrap(), |q| q.cast::<u64>().read_unaligned()) }
                .unwrap()
        };
        areas[me].set_done(e);
        got
    }

    /// Two members broadcast in turn (root `e % 2`) for more epochs than there are slots:
    /// each value arrives intact, and loom finds no write to a slot a reader still reads.
    #[test]
    fn loom_broadcast_slots_reused() {
        let mut b = loom::model::Builder::new();
        b.preemption_bound = Some(2);
        b.check(|| {
            let areas: Arc<[Box<Area>; 2]> = Arc::new([Area::boxed(), Area::boxed()]);
            // Each member's values from the other's epochs (the root's value is e * 10 + root).
            let member = |me: usize, areas: Arc<[Box<Area>; 2]>| {
                (1..=NHEADERS as u64 + 1)
                    .filter_map(|e| {
                        let root = (e % 2) as usize;
                        let got = bcast(me, &areas, e, root, e * 10 + root as u64);
                        (me != root).then_some(got)
                    })
                    .collect::<Vec<u64>>()
            };
            let a1 = areas.clone();
            let t = thread::spawn(move || member(1, a1));
            let got0 = member(0, areas.clone());
            let got1 = t.join().unwrap();
            // Member 0 reads the odd epochs' values from 1, member 1 the even ones from 0.
            let want0: Vec<u64> = (1..=NHEADERS as u64 + 1)
                .filter(|e| e % 2 == 1)
                .map(|e| e * 10 + 1)
                .collect();
            let want1: Vec<u64> = (1..=NHEADERS as u64 + 1)
                .filter(|e| e % 2 == 0)
                .map(|e| e * 10)
                .collect();
            assert_eq!(got0, want0);
            assert_eq!(got1, want1);
        });
    }

    /// One root (member 1) broadcasts over more epochs than there are header lines: it runs
    /// ahead of the reader as far as the reuse floors let it, its data slots (fewer than its
    /// header lines) are each written again while the reader may still be behind, and every
    /// value arrives intact (loom finds no write to a data slot the reader still reads).
    #[test]
    fn loom_one_root_runs_ahead() {
        let mut b = loom::model::Builder::new();
        b.preemption_bound = Some(2);
        b.check(|| {
            let areas: Arc<[Box<Area>; 2]> = Arc::new([Area::boxed(), Area::boxed()]);
            let epochs = 1..=NHEADERS as u64 + 1;
            let a1 = areas.clone();
            let e1 = epochs.clone();
            let t = thread::spawn(move || {
                for e in e1 {
                    assert_eq!(bcast(1, &a1, e, 1, e * 10), e * 10);
                }
            });
            let got: Vec<u64> = epochs.clone().map(|e| bcast(0, &areas, e, 1, 0)).collect();
            t.join().unwrap();
            assert_eq!(got, epochs.map(|e| e * 10).collect::<Vec<u64>>());
        });
    }

    /// Two members use their areas for one team (a broadcast, then the destroying barrier),
    /// agree on the base (the larger high water, as the creation's gather does), take the
    /// areas over for a new team and broadcast over more epochs than there are slots: every
    /// value of the new team arrives intact, none of the old team's passes for it.
    #[test]
    fn loom_area_taken_over() {
        let mut b = loom::model::Builder::new();
        b.preemption_bound = Some(2);
        b.check(|| {
            let areas: Arc<[Box<Area>; 2]> = Arc::new([Area::boxed(), Area::boxed()]);
            let water: Arc<[AtomicU64; 2]> = Arc::new([AtomicU64::new(0), AtomicU64::new(0)]);
            let member =
                move |me: usize, areas: Arc<[Box<Area>; 2]>, water: Arc<[AtomicU64; 2]>| {
                    // The old team: a broadcast from member 1, then its destroying barrier.
                    assert_eq!(bcast(me, &areas, 1, 1, 111), 111);
                    areas[1 - me].signal_bar(2);
                    spin(|| areas[me].bar() >= 2);
                    areas[me].set_done(2);
                    // The creation's gather of high waters.
                    water[me].store(areas[me].high_water(), Ordering::SeqCst);
                    spin(|| water[1 - me].load(Ordering::SeqCst) != 0);
                    let base = water
                        .iter()
                        .map(|w| w.load(Ordering::SeqCst))
                        .max()
                        .unwrap();
                    areas[me].start_at(base);
                    // The new team, numbered from the base, its roots alternating.
                    for e in base + 1..=base + NHEADERS as u64 + 1 {
                        let root = (e % 2) as usize;
                        let v = e * 10 + root as u64;
                        assert_eq!(bcast(me, &areas, e, root, v), v);
                    }
                };
            let (a1, w1) = (areas.clone(), water.clone());
            let t = thread::spawn(move || member(1, a1, w1));
            member(0, areas.clone(), water.clone());
            t.join().unwrap();
        });
    }

    /// Two members over `areas` and, for each, a source and a destination cell (plain data of
    /// the client, `cells[member][0]` and `[1]`), under loom with a preemption bound of 2:
    /// `member(me, ..)` runs on a thread of its own for member 1 and on this one for member 0.
    fn two_members<F>(member: F)
    where
        F: Fn(usize, &[Box<Area>; 2], &[[AtomicU64; 2]; 2]) + Clone + Send + Sync + 'static,
    {
        let mut b = loom::model::Builder::new();
        b.preemption_bound = Some(2);
        b.check(move || {
            let areas: Arc<[Box<Area>; 2]> = Arc::new([Area::boxed(), Area::boxed()]);
            let cells: Arc<[[AtomicU64; 2]; 2]> = Arc::new(std::array::from_fn(|_| {
                [AtomicU64::new(0), AtomicU64::new(0)]
            }));
            let (a1, c1, m1) = (areas.clone(), cells.clone(), member.clone());
            let t = thread::spawn(move || m1(1, &a1, &c1));
            member(0, &areas, &cells);
            t.join().unwrap();
        });
    }

    /// `IN_ALLSYNC|OUT_ALLSYNC` broadcasts with one publisher over more epochs than there are
    /// slots, roots alternating: before it enters, each member writes the next root's source
    /// cell; the root waits for the other's entry word, copies its source into its own
    /// destination, marks the epoch done and then publishes. The root reads the value written
    /// before the other entered, and a reader that saw the publication finds the root's
    /// destination written without waiting for its `done`.
    #[test]
    fn loom_entry_word_and_early_done() {
        two_members(|me, areas, cells| {
            for e in 1..=NHEADERS as u64 + 2 {
                let root = (e % 2) as usize;
                let s = slot(e);
                if me != root {
                    // Writes into the root's source before entering (a put).
                    cells[root][0].store(e * 7, Ordering::Relaxed);
                }
                spin(|| areas.iter().all(|a| a.done() >= reuse_floor(e, false)));
                if me == root {
                    spin(|| areas[1 - me].entered() >= e);
                    let v = cells[me][0].load(Ordering::Relaxed);
                    assert_eq!(
                        v,
                        e * 7,
                        "the root read its source before the other entered"
                    );
                    cells[me][1].store(v, Ordering::Relaxed);
                    areas[me].set_done(e);
                    // SAFETY: the owner, after the reuse floor; 8 bytes fit the line.
                    unsafe {
                        areas[me].publish(s, e, LOC_INLINE, 8, |p| {
                            p.cast::<u64>().write_unaligned(v);
                        });
                    }
                    spin(|| areas[1 - me].done() >= e);
                    assert_eq!(cells[1 - me][1].load(Ordering::Relaxed), e * 7);
                } else {
                    areas[me].set_entered(e);
                    // SAFETY: the owner, after the reuse floor; an entry only.
                    unsafe { areas[me].publish(s, e, LOC_INLINE, 0, |_| {}) };
                    let mut got = None;
                    spin(|| {
                        got = areas[root].published(s, e);
                        got.is_some()
                    });
                    // SAFETY: published for slot s, not yet marked done.
                    let v = unsafe {
                        areas[root].read(s, got.unwrap(), |q| q.cast::<u64>().read_unaligned())
                    }
                    .unwrap();
                    cells[me][1].store(v, Ordering::Relaxed);
                    areas[me].set_done(e);
                    // OUT_ALLSYNC: the root's own copy is in place without its `done`.
                    assert_eq!(cells[root][1].load(Ordering::Relaxed), e * 7);
                }
            }
        });
    }

    /// `IN_ALLSYNC|OUT_ALLSYNC` array scans of two members over three epochs where one member
    /// holds no element (`idle`, alternating): before it enters, the idle member writes the
    /// holder's source cell (a put); it then only signals its entry into the holder's barrier
    /// word, publishes its entry, marks the epoch done and waits for the holder's `done`. The
    /// holder signals the idle member's word, waits for its own, reads its source, writes its
    /// destination, publishes, marks done and waits for nobody. The holder reads the value put
    /// before the other entered; the idle member returns with the holder's destination
    /// written; the barrier words, which the idle member's waits skip, stay in order.
    #[test]
    fn loom_idle_member_skips_the_entry_wait() {
        two_members(|me, areas, cells| {
            for e in 1..=3u64 {
                let holder = (e % 2) as usize;
                let other = 1 - me;
                let s = slot(e);
                if me != holder {
                    cells[holder][0].store(e * 7, Ordering::Relaxed);
                }
                spin(|| areas.iter().all(|a| a.done() >= reuse_floor(e, false)));
                areas[other].signal_bar(e);
                if me == holder {
                    spin(|| areas[me].bar() >= e);
                    let v = cells[me][0].load(Ordering::Relaxed);
                    assert_eq!(
                        v,
                        e * 7,
                        "the holder read its source before the other entered"
                    );
                    cells[me][1].store(v, Ordering::Relaxed);
                }
                // SAFETY: the owner, after the reuse floor; an entry only.
                unsafe { areas[me].publish(s, e, LOC_INLINE, 0, |_| {}) };
                areas[me].set_done(e);
                if me != holder {
                    spin(|| areas[holder].done() >= e);
                    assert_eq!(cells[holder][1].load(Ordering::Relaxed), e * 7);
                }
            }
        });
    }

    /// Small inclusive scans of two members under `OUT_ALLSYNC` over three epochs: member 0 writes its destination inside its publication (before the epoch's
    /// Release store), member 1 reads the publication, folds into its own destination, marks
    /// done and returns without waiting for member 0's `done`, finding member 0's destination
    /// written; member 0 waits for member 1's `done`.
    #[test]
    fn loom_scan_member_zero_settled_at_publication() {
        two_members(|me, areas, cells| {
            for e in 1..=3u64 {
                let s = slot(e);
                let x = e * 10 + me as u64;
                spin(|| areas.iter().all(|a| a.done() >= reuse_floor(e, false)));
                if me == 0 {
                    // SAFETY: the owner, after the reuse floor; 8 bytes fit the line.
                    unsafe {
                        areas[0].publish(s, e, LOC_INLINE, 8, |p| {
                            p.cast::<u64>().write_unaligned(x);
                            cells[0][1].store(x, Ordering::Relaxed);
                        });
                    }
                    areas[0].set_done(e);
                    spin(|| areas[1].done() >= e);
                    assert_eq!(cells[1][1].load(Ordering::Relaxed), e * 10 + x + 1);
                } else {
                    // SAFETY: the owner, after the reuse floor; its length alone.
                    unsafe { areas[1].publish(s, e, LOC_INLINE, 0, |_| {}) };
                    let mut got = None;
                    spin(|| {
                        got = areas[0].published(s, e);
                        got.is_some()
                    });
                    // SAFETY: published for slot s, not yet marked done.
                    let v = unsafe {
                        areas[0].read(s, got.unwrap(), |q| q.cast::<u64>().read_unaligned())
                    }
                    .unwrap();
                    cells[1][1].store(v + x, Ordering::Relaxed);
                    areas[1].set_done(e);
                    // OUT_ALLSYNC without member 0's `done`.
                    assert!(cells[0][1].load(Ordering::Relaxed) >= e * 10);
                }
            }
        });
    }

    /// `push_all` (the `IN_ALLSYNC|OUT_ALLSYNC` gather_all and exchange of small blocks) of
    /// two members over three epochs: after the entry barrier each writes its block straight
    /// into the other's destination (plain memory), marks the epoch done and waits for the
    /// other's `done`; it then finds its destination complete, and no write of the next epoch
    /// races with its read (loom's cells report a data race).
    #[test]
    fn loom_push_all_two_members() {
        let mut b = loom::model::Builder::new();
        b.preemption_bound = Some(2);
        b.check(|| {
            let areas: Arc<[Box<Area>; 2]> = Arc::new([Area::boxed(), Area::boxed()]);
            let dst: Arc<[loom::cell::UnsafeCell<u64>; 2]> = Arc::new([
                loom::cell::UnsafeCell::new(0),
                loom::cell::UnsafeCell::new(0),
            ]);
            let member = |me: usize,
                          areas: Arc<[Box<Area>; 2]>,
                          dst: Arc<[loom::cell::UnsafeCell<u64>; 2]>| {
                let other = 1 - me;
                for e in 1..=3u64 {
                    areas[other].signal_bar(e);
                    spin(|| areas[me].bar() >= e);
                    // SAFETY (model): only this member writes the other's destination, after
                    // the other entered epoch `e`.
                    dst[other].with_mut(|p| unsafe { *p = e * 10 + me as u64 });
                    areas[me].set_done(e);
                    spin(|| areas[other].done() >= e);
                    // SAFETY (model): the writer marked `e` done after its write.
                    let got = dst[me].with(|p| unsafe { *p });
                    assert_eq!(got, e * 10 + other as u64, "epoch {e}: a block missing");
                }
            };
            let (a1, d1) = (areas.clone(), dst.clone());
            let t = thread::spawn(move || member(1, a1, d1));
            member(0, areas.clone(), dst.clone());
            t.join().unwrap();
        });
    }

    /// Run `member(me, areas, entered)` for `P` members (member 0 on this thread) over fresh
    /// areas and entry records, and join them.
    fn run_members<const P: usize, F>(member: F)
    where
        F: Fn(usize, &[Box<Area>], &[AtomicU64; P]) + Clone + Send + 'static,
    {
        let areas: Arc<Vec<Box<Area>>> = Arc::new((0..P).map(|_| Area::boxed()).collect());
        let entered: Arc<[AtomicU64; P]> = Arc::new(std::array::from_fn(|_| AtomicU64::new(0)));
        let ts: Vec<_> = (1..P)
            .map(|me| {
                let (a, n, m) = (areas.clone(), entered.clone(), member.clone());
                thread::spawn(move || m(me, &a, &n))
            })
            .collect();
        member(0, &areas, &entered);
        for t in ts {
            t.join().unwrap();
        }
    }

    /// `P` members pass `epochs` barriers as `all_entered` runs them with two members (each
    /// signals the other's word): no member leaves a barrier before every member entered it.
    fn barrier_model<const P: usize>(epochs: u64, preemptions: usize) {
        let mut b = loom::model::Builder::new();
        b.preemption_bound = Some(preemptions);
        b.check(move || {
            run_members::<P, _>(move |me, areas, entered| {
                for e in 1..=epochs {
                    entered[me].store(e, Ordering::SeqCst);
                    areas[(me + 1) % P].signal_bar(e);
                    spin(|| areas[me].bar() >= e);
                    for x in entered.iter() {
                        assert!(x.load(Ordering::SeqCst) >= e, "left barrier {e} early");
                    }
                }
            });
        });
    }

    /// Two members, three barriers in a row: the words are reused by epoch, never reset.
    #[test]
    fn loom_barrier_epochs_reused() {
        barrier_model::<2>(3, 2);
    }

    /// The flat barrier of three members (each stores the epoch into its own word, then reads
    /// every member's): a member that sees every word at the epoch finds every member entered.
    /// Spinning three members is beyond loom's search in reasonable time, so each member reads
    /// the words once and checks what it may conclude; the words only grow, so a wait that
    /// reads them again reaches the same conclusion later.
    #[test]
    fn loom_flat_barrier_three_members() {
        loom::model(|| {
            run_members::<3, _>(|me, areas, entered| {
                for e in 1..=2 {
                    entered[me].store(e, Ordering::Relaxed);
                    areas[me].signal_bar(e);
                    if !areas.iter().all(|a| a.bar() >= e) {
                        return;
                    }
                    for x in entered.iter() {
                        assert!(x.load(Ordering::Relaxed) >= e, "left barrier {e} early");
                    }
                }
            });
        });
    }
}
