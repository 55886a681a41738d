//! Team creation and destruction: `split`, `split_strided`, `split_2d`, `create`, `destroy`,
//! and the team barrier.
//!
//! Every creation call is collective over the parent team: every rank of the parent makes it
//! (one thread per rank; in an image job the client serializes it like any representative
//! call), in the same order as its other creation calls and collectives on the parent. `split`
//! gathers every member's color and key; the others compute the new team from their
//! single-valued arguments. Where the ranks share memory (the world team has smp-native
//! state), every creation also gathers which areas of the host scratch each rank has free, and
//! the new teams of more than one member take the first areas free on every rank of the
//! parent (`shm::AreaBook`). A new team is usable at once: a member may send to it before
//! another has finished creating it, and the message waits under the team's id.

use std::collections::HashSet;

use amnet_core::{Error, Result};
use amnet_sync_modes::flags::{ALL_THREADS, IN_ALLSYNC, IN_MYSYNC, LOCAL, OUT_MYSYNC, SINGLE};

use crate::api::{call, one, usage, Coll, Counts, InFlight};
use crate::plan::Kind;
use crate::team::{child_id, grid, strided, Geo, Team};
use crate::types::Addr;

/// Ends a creation's hold on the area book (`AreaBook::end_creation`) however it ends.
struct Creating<'a>(&'a Coll);

impl Drop for Creating<'_> {
    fn drop(&mut self) {
        self.0.sh.area_book().end_creation();
    }
}

/// The host-scratch areas a creation call got for its new teams (`Coll::creation_gather`), each
/// with its epoch base; held while the call makes its teams.
struct Areas<'a> {
    list: Vec<(usize, u64)>,
    _creating: Option<Creating<'a>>,
}

impl Areas<'_> {
    /// The area for the new teams of kind `i` (0, or 1 for `split_2d`'s columns).
    fn get(&self, i: usize) -> Option<(usize, u64)> {
        self.list.get(i).copied()
    }
}

impl Coll {
    /// A new team from the parent's ranks `parent_ranks` (in new-team order), or `None` when
    /// this rank is not among them. `area`: the host-scratch area (and epoch base) the parent's
    /// ranks agreed on for it, which it takes when it has more than one member and every
    /// member maps every other member's scratch (the same answer on every member).
    fn child(
        &self,
        parent: &Team,
        id: u64,
        parent_ranks: &[u32],
        area: Option<(usize, u64)>,
    ) -> Option<Team> {
        let pg = parent.geo();
        if !parent_ranks.contains(&pg.me) {
            return None;
        }
        let members: Vec<_> = parent_ranks.iter().map(|&p| pg.world(p)).collect();
        let geo = Geo::new(id, members.clone(), self.sh.rank, &self.sh.images);
        if let Some((k, base)) = area.filter(|_| members.len() > 1) {
            if let Some(t) = crate::shm::ShmTeam::new(&self.sh.ep, members, self.sh.rank, k, base) {
                self.sh.area_book().claim(k);
                t.start();
                // A fresh Geo: the cell is empty.
                let _ = geo.shm.set(t);
            } else if let Some(h) =
                crate::hier::Hier::new(&self.sh.ep, &geo, &self.sh.images, (k, base))
            {
                // Members on several hosts: this rank's host team takes the area.
                if h.area().is_some() {
                    self.sh.area_book().claim(k);
                }
                let _ = geo.hier.set(h);
            }
        }
        let team = Team::new(geo);
        self.trace_team(&team);
        Some(team)
    }

    /// One gather over `parent` of every rank's `mine` (the same length on every rank) and,
    /// where the ranks share memory, of its `AreaBook::report`: every rank's `mine`, in parent
    /// order, and the host-scratch areas for up to `want` new teams made from `parent` (the
    /// first free on every rank of the parent, each with the epoch base its team counts from).
    /// No areas where the ranks do not share memory (the world team has no smp-native state:
    /// the same on every rank), and no gather at all then if `mine` is empty. While the areas
    /// live, this rank's other creations do not take them (the claims are made).
    fn creation_gather(
        &self,
        op: &'static str,
        parent: &Team,
        mine: &[u8],
        want: usize,
    ) -> Result<(Vec<u8>, Areas<'_>)> {
        use crate::shm::REPORT_WORDS;
        // Where the ranks share memory, on one host or (the world team has a hierarchy) on
        // each of several.
        let shm = self.sh.shm_world.is_some() || self.sh.world.geo().hier.get().is_some();
        if !shm && mine.is_empty() {
            let none = Areas {
                list: Vec::new(),
                _creating: None,
            };
            return Ok((Vec::new(), none));
        }
        let report = shm.then(|| self.sh.area_book().report());
        let guard = shm.then(|| Creating(self));
        let n = parent.size() as usize;
        let m = mine.len();
        let w = m + if shm { 8 * REPORT_WORDS } else { 0 };
        // [this rank's part | every rank's], on the heap for the whole collective.
        let mut bufs = InFlight::new(vec![0u8; w * (n + 1)]);
        let v = bufs.get_mut();
        v[..m].copy_from_slice(mine);
        for (i, x) in report.iter().flatten().enumerate() {
            v[m + 8 * i..m + 8 * i + 8].copy_from_slice(&x.to_le_bytes());
        }
        let (me, every) = (v.as_mut_ptr(), v[w..].as_mut_ptr());
        // SAFETY: both ranges lie in `bufs`, which is freed only after the blocking call
        // returned Ok (the gather completed here) and leaked when it failed.
        let (src, dst) = unsafe { (Addr::ptr(me), Addr::ptr(every)) };
        let c = call(
            op,
            Kind::GatherAll,
            None,
            Counts::Uniform(w),
            one(src, dst),
            IN_MYSYNC | OUT_MYSYNC | SINGLE,
        );
        let r = self.run(parent, c, true);
        let v = bufs.finish(r)?;
        let parts = v[w..].chunks_exact(w);
        let all: Vec<u8> = parts.clone().flat_map(|p| &p[..m]).copied().collect();
        let list = if shm {
            let reports: Vec<[u64; REPORT_WORDS]> = parts
                .map(|p| {
                    std::array::from_fn(|i| {
                        let at = m + 8 * i;
                        u64::from_le_bytes(p[at..at + 8].try_into().unwrap_or([0xff; 8]))
                    })
                })
                .collect();
            crate::shm::agree(&reports, want)
        } else {
            Vec::new()
        };
        Ok((
            all,
            Areas {
                list,
                _creating: guard,
            },
        ))
    }

    /// The rules of a creation call, which is a collective on the parent (it may gather
    /// there): outside handlers, on a live team of this rank, not between `barrier_notify`
    /// and the end of that barrier, and with no aggregate open on the parent (its gather
    /// would close it). The same answer on every rank of a correct program.
    fn creation_rules(&self, op: &'static str, parent: &Team) -> Result<u64> {
        if let Some(h) = self.sh.ep.current_handler() {
            return Err(Error::InHandler { op, handler: h });
        }
        self.check_team(op, parent)?;
        self.no_barrier_pending(op)?;
        let open = self
            .sh
            .lock()
            .teams
            .get(&parent.id())
            .is_some_and(|t| !t.agg_open.is_empty());
        if open {
            return Err(usage(
                op,
                format!(
                    "an aggregate is open on team {:#x}; close it (a call without \
                     AGGREGATE) before making a team from it",
                    parent.id()
                ),
            ));
        }
        Ok(parent.next_creation())
    }

    /// Split `parent` MPI-style: the ranks that pass the same `color` form a team, numbered by
    /// `key` (ties by their parent rank); a rank passing `None` joins no team and gets `None`.
    /// Collective over `parent`: one gather of every rank's color and key.
    pub fn split(&self, parent: &Team, color: Option<u32>, key: i32) -> Result<Option<Team>> {
        const OP: &str = "team split";
        let ordinal = self.creation_rules(OP, parent)?;
        if color == Some(u32::MAX) {
            return Err(usage(
                OP,
                "color u32::MAX is reserved (pass None for no team)",
            ));
        }
        let n = parent.size() as usize;
        let mut mine = [0u8; 8];
        mine[..4].copy_from_slice(&color.unwrap_or(u32::MAX).to_le_bytes());
        mine[4..].copy_from_slice(&key.to_le_bytes());
        // Every color's team takes the same area: they have no member in common.
        let (all, areas) = self.creation_gather(OP, parent, &mine, 1)?;
        let Some(color) = color else {
            return Ok(None);
        };
        let mut same: Vec<(i32, u32)> = (0..n)
            .filter_map(|p| {
                let e = &all[8 * p..8 * p + 8];
                let c = u32::from_le_bytes(e[..4].try_into().unwrap_or([0xff; 4]));
                let k = i32::from_le_bytes(e[4..].try_into().unwrap_or([0; 4]));
                #[allow(clippy::cast_possible_truncation)] // p < parent size, a u32
                (c == color).then_some((k, p as u32))
            })
            .collect();
        same.sort_unstable();
        let ranks: Vec<u32> = same.into_iter().map(|(_, p)| p).collect();
        Ok(self.child(
            parent,
            child_id(parent.id(), ordinal, u64::from(color)),
            &ranks,
            areas.get(0),
        ))
    }

    /// The team of parent ranks `start + stride * i` for `i` in `0..size` (OpenSHMEM's
    /// `team_split_strided`): a negative stride reverses the order, stride 0 needs size 1. An
    /// invalid triplet is the same [`Error::Usage`] on every rank of the parent; a rank that
    /// is not in the new team gets `None`. Collective over `parent`: no communication beyond the
    /// gather of free host-scratch areas where the ranks share memory.
    pub fn split_strided(
        &self,
        parent: &Team,
        start: i64,
        stride: i64,
        size: i64,
    ) -> Result<Option<Team>> {
        const OP: &str = "team split_strided";
        let ordinal = self.creation_rules(OP, parent)?;
        let ranks = strided(parent.size(), start, stride, size).map_err(|e| usage(OP, e))?;
        let (_, areas) = self.creation_gather(OP, parent, &[], 1)?;
        Ok(self.child(
            parent,
            child_id(parent.id(), ordinal, 0),
            &ranks,
            areas.get(0),
        ))
    }

    /// Split `parent` into the rows and columns of a grid `xrange` wide (OpenSHMEM's
    /// `team_split_2d`): parent rank `p` is at `(p % xrange, p / xrange)`; returns this rank's
    /// row (its number there is its x) and column (its number there is its y). The last row may
    /// be incomplete; an `xrange` larger than the parent acts as the parent's size. Collective
    /// over `parent`: no communication beyond the gather of free host-scratch areas where the
    /// ranks share memory.
    pub fn split_2d(&self, parent: &Team, xrange: u32) -> Result<(Team, Team)> {
        const OP: &str = "team split_2d";
        let ordinal = self.creation_rules(OP, parent)?;
        if xrange == 0 {
            return Err(usage(OP, "xrange is 0; it must be positive"));
        }
        let (_, (y, row), (x, col)) = grid(parent.size(), xrange, parent.rank());
        // The rows take one area and the columns another (rows have no member in common, nor
        // have columns).
        let (_, areas) = self.creation_gather(OP, parent, &[], 2)?;
        let row_team = self.child(
            parent,
            child_id(parent.id(), ordinal, 2 * u64::from(y)),
            &row,
            areas.get(0),
        );
        let col_team = self.child(
            parent,
            child_id(parent.id(), ordinal, 2 * u64::from(x) + 1),
            &col,
            areas.get(1),
        );
        match (row_team, col_team) {
            (Some(r), Some(c)) => Ok((r, c)),
            _ => Err(usage(OP, "this rank is missing from its own row or column")),
        }
    }

    /// The team of the parent ranks listed in `members`, in that order. Every rank of the
    /// parent passes the same list (ranks not in it get `None`); a rank out of range or listed
    /// twice is an [`Error::Usage`] on every rank. Collective over `parent`, with no
    /// communication beyond the gather of free host-scratch areas where the ranks share memory.
    pub fn create(&self, parent: &Team, members: &[u32]) -> Result<Option<Team>> {
        const OP: &str = "team create";
        let ordinal = self.creation_rules(OP, parent)?;
        if members.is_empty() {
            return Err(usage(
                OP,
                "members is empty; a team has at least one member",
            ));
        }
        let mut seen = HashSet::new();
        for &m in members {
            if m >= parent.size() {
                return Err(usage(
                    OP,
                    format!(
                        "member {m} is not a rank of the parent (0..{})",
                        parent.size()
                    ),
                ));
            }
            if !seen.insert(m) {
                return Err(usage(OP, format!("member {m} is listed twice")));
            }
        }
        let (_, areas) = self.creation_gather(OP, parent, &[], 1)?;
        Ok(self.child(
            parent,
            child_id(parent.id(), ordinal, 0),
            members,
            areas.get(0),
        ))
    }

    /// Wait until every member of `team` has called `barrier` on it. Collective over `team`
    /// (one thread per rank), matched in order with its other collectives: a collective of
    /// its own (operation `barrier`) that moves no data, only the team's entry signal, whose
    /// scheme (`dissemination` or `tree`, or `shm` where the members share memory) is selected
    /// like any algorithm. When it returns, the data of every `OUT_NOSYNC` collective this
    /// rank started before it is in place here (data written by direct puts, spec/coll.md §6:
    /// where the senders synced before the barrier).
    pub fn barrier(&self, team: &Team) -> Result<()> {
        const OP: &str = "team barrier";
        self.check_team(OP, team)?;
        let c = call(
            OP,
            Kind::Barrier,
            None,
            Counts::None,
            one(Addr::InPlace, Addr::InPlace),
            IN_ALLSYNC | OUT_MYSYNC | SINGLE,
        );
        self.run(team, c, true).map(|_| ())
    }

    /// Wait until every image thread of every member of `team` has called `barrier_images`
    /// on it: the barrier of a job whose ranks host several images (a UPC `upc_barrier`).
    /// Every image thread of every member calls it, matched in order with its other
    /// `ALL_THREADS` collectives on the team; with one image per rank it is [`Coll::barrier`].
    pub fn barrier_images(&self, team: &Team) -> Result<()> {
        const OP: &str = "team barrier_images";
        if self.sh.images.iter().all(|&n| n == 1) {
            return self.barrier(team);
        }
        self.check_team(OP, team)?;
        let c = call(
            OP,
            Kind::Barrier,
            None,
            Counts::None,
            one(Addr::InPlace, Addr::InPlace),
            IN_ALLSYNC | OUT_MYSYNC | LOCAL | ALL_THREADS,
        );
        self.run(team, c, true).map(|_| ())
    }

    /// Destroy `team`: collective over its members (a barrier on it), after which every use of
    /// it is an error. Every collective this rank started on it must be synced first. The world
    /// team cannot be destroyed.
    pub fn destroy(&self, team: &Team) -> Result<()> {
        const OP: &str = "team destroy";
        if team.id() == 0 {
            return Err(usage(OP, "the world team cannot be destroyed"));
        }
        self.check_team(OP, team)?;
        {
            let st = self.sh.lock();
            let ts = st.teams.get(&team.id());
            if ts.is_some_and(|t| t.unsynced > 0 || !t.agg_open.is_empty()) {
                return Err(usage(
                    OP,
                    format!(
                        "{} collective(s) on team {:#x} are not synced here; sync them first",
                        ts.map_or(0, |t| t.unsynced),
                        team.id()
                    ),
                ));
            }
        }
        self.barrier(team)?;
        team.0
            .alive
            .store(false, std::sync::atomic::Ordering::Release);
        // Every member passed the barrier, so none reads or writes this rank's area of the
        // team any more: the next team may take it over.
        if let Some(t) = team.geo().shm.get() {
            self.sh.area_book().release(t.index(), t.high_water());
        }
        let mut ids = vec![team.id()];
        if let Some(h) = team.geo().hier.get() {
            if let Some((k, water)) = h.area() {
                self.sh.area_book().release(k, water);
            }
            h.retire();
            ids.extend(h.team_ids());
        }
        let mut guard = self.sh.lock();
        let st = &mut *guard;
        for id in ids {
            st.teams.remove(&id);
            if st.flow.forget_team(id) {
                st.flow.unblock(&mut st.dirty);
            }
        }
        Ok(())
    }
}
