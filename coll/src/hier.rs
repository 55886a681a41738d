//! Hierarchical collectives (spec/coll.md §3d): on a team whose members run on several hosts,
//! with several members on some host, and whose hosts' ranks share memory (the smp conduit's
//! rings and host scratch through the host-local bypass), a collective runs as a host-local
//! phase among the members of each host, a phase among one leader per host (its first member
//! in team order) over the network, and a host-local phase again.
//!
//! Each phase is a blocking collective of its own on one of two teams that every such team
//! makes with it, without any exchange (the host map is the same on every rank): the team of
//! this rank's host, which takes an area of the host scratch and so the smp-native algorithms
//! (§3c), and the leaders' team, whose algorithms are the network's. Every phase runs with
//! `IN_MYSYNC|OUT_MYSYNC`, which gives the parent call's `MYSYNC` and `NOSYNC` modes; an
//! `IN_ALLSYNC` call first runs the hierarchical barrier, an `OUT_ALLSYNC` call last.

use amnet_core::{Endpoint, Error, Rank, Result};
use amnet_sync_modes::flags::{IN_MYSYNC, LOCAL, OUT_MYSYNC};
use amnet_sync_modes::{InSync, Mode, OutSync};

use crate::api::{call, one, red_call, vred, Coll, Counts};
use crate::engine::Area;
use crate::plan::{Kind, Spec};
use crate::team::{child_id, Geo, Team};
use crate::types::Addr;

/// The creation ordinal of the two teams a hierarchical team makes (never a creation call's:
/// those count from 0).
const HIER_ORDINAL: u64 = u64::MAX;

/// The flags of every phase.
const PHASE: u32 = IN_MYSYNC | OUT_MYSYNC | LOCAL;

/// A team's hierarchy as this rank sees it.
#[derive(Debug)]
pub(crate) struct Hier {
    /// Team rank of each host's leader, hosts numbered in team order of their first member.
    leader: Vec<u32>,
    /// Host of every team rank.
    host_of: Vec<u32>,
    /// Members of every host.
    sizes: Vec<usize>,
    /// This rank's host.
    my_host: u32,
    /// The team of this rank's host's members (in team order), when it has several.
    local: Option<Team>,
    /// The leaders' team (hosts in order), when this rank leads its host.
    leaders: Option<Team>,
}

impl Hier {
    /// The hierarchy of the team `geo`, when its members run on several hosts, some host runs
    /// several of them and every host's ranks share memory. The team of this rank's host takes
    /// area `area` of the host scratch (with its epoch base), which this rank owns for it.
    pub(crate) fn new(
        ep: &Endpoint,
        geo: &Geo,
        job_images: &[u32],
        area: (usize, u64),
    ) -> Option<Hier> {
        let map = ep.host_map().ok()?;
        if !map.all_share_memory() || job_images.iter().any(|&n| n != 1) {
            return None;
        }
        let mut hosts: Vec<u32> = Vec::new();
        let mut leader = Vec::new();
        let mut sizes = Vec::new();
        let mut host_of = Vec::with_capacity(geo.members.len());
        for (t, &r) in geo.members.iter().enumerate() {
            let h = map.host_of(r).ok()?;
            let i = if let Some(i) = hosts.iter().position(|&x| x == h) {
                i
            } else {
                hosts.push(h);
                leader.push(u32::try_from(t).ok()?);
                sizes.push(0);
                hosts.len() - 1
            };
            sizes[i] += 1;
            host_of.push(u32::try_from(i).ok()?);
        }
        if hosts.len() < 2 || hosts.len() == geo.members.len() {
            return None;
        }
        let me = geo.members[geo.me as usize];
        let my_host = host_of[geo.me as usize];
        let local_members: Vec<Rank> = geo
            .members
            .iter()
            .zip(&host_of)
            .filter(|(_, &h)| h == my_host)
            .map(|(&r, _)| r)
            .collect();
        let local = (local_members.len() > 1).then(|| {
            let id = child_id(geo.id, HIER_ORDINAL, 1 + u64::from(my_host));
            let mut g = Geo::new(id, local_members.clone(), me, job_images);
            g.phase = true;
            if let Some(t) = crate::shm::ShmTeam::new(ep, local_members, me, area.0, area.1) {
                t.start();
                // A fresh Geo: the cell is empty.
                let _ = g.shm.set(t);
            }
            Team::new(g)
        });
        let leaders = (leader[my_host as usize] == geo.me).then(|| {
            let members = leader.iter().map(|&t| geo.members[t as usize]).collect();
            let mut g = Geo::new(child_id(geo.id, HIER_ORDINAL, 0), members, me, job_images);
            g.phase = true;
            Team::new(g)
        });
        Some(Hier {
            leader,
            host_of,
            sizes,
            my_host,
            local,
            leaders,
        })
    }

    /// The host scratch area this rank's host team holds, if it holds one.
    pub(crate) fn area(&self) -> Option<(usize, u64)> {
        let t = self.local.as_ref()?.geo().shm.get()?;
        Some((t.index(), t.high_water()))
    }

    /// The ids of the two teams (for the engine's per-team state).
    pub(crate) fn team_ids(&self) -> Vec<u64> {
        self.local
            .iter()
            .chain(self.leaders.iter())
            .map(Team::id)
            .collect()
    }

    /// Mark both teams destroyed.
    pub(crate) fn retire(&self) {
        for t in self.local.iter().chain(self.leaders.iter()) {
            t.0.alive.store(false, std::sync::atomic::Ordering::Release);
        }
    }

    /// Team rank `t`'s number in its host's team.
    fn local_index(&self, t: u32) -> u32 {
        let h = self.host_of[t as usize];
        let before = self.host_of[..t as usize]
            .iter()
            .filter(|&&x| x == h)
            .count();
        u32::try_from(before).unwrap_or(u32::MAX)
    }

    fn leads(&self) -> bool {
        self.leaders.is_some()
    }
}

/// A pointer address of `len` bytes at `p` (the areas of the parent call, resolved).
fn at(p: usize) -> Addr {
    // SAFETY: every address made here is one of the parent call's resolved areas (valid for
    // its length until the blocking call returns) or a buffer of this module that outlives the
    // blocking phase it is passed to.
    unsafe { Addr::ptr(p as *mut u8) }
}

fn buf_addr(v: &mut [u8]) -> Addr {
    at(v.as_mut_ptr() as usize)
}

impl Coll {
    /// Run the blocking call `spec` (rank participants, uniform counts) on
    /// `team` hierarchically, this rank's areas being `src` and `dst`.
    pub(crate) fn hier_run(
        &self,
        team: &Team,
        op: &'static str,
        spec: &Spec,
        mode: &Mode,
        src: Area,
        dst: Area,
    ) -> Result<()> {
        let h = team.geo().hier.get().ok_or_else(|| Error::Usage {
            op,
            detail: "the hierarchical algorithm on a team without a hierarchy".into(),
        })?;
        // A phase's hang report names the call it is a phase of.
        self.hier_phases(h, op, spec, mode, team.rank() as usize, src, dst)
            .map_err(|e| match e {
                Error::Hang { millis, detail } => Error::Hang {
                    millis,
                    detail: format!("{op} (hierarchical) on team {:#x}: {detail}", team.id()),
                },
                e => e,
            })
    }

    #[allow(clippy::too_many_arguments)]
    fn hier_phases(
        &self,
        h: &Hier,
        op: &'static str,
        spec: &Spec,
        mode: &Mode,
        me: usize,
        src: Area,
        dst: Area,
    ) -> Result<()> {
        if spec.kind == Kind::Barrier {
            return self.hier_barrier(h);
        }
        if mode.input == InSync::All {
            self.hier_barrier(h)?;
        }
        match spec.kind {
            Kind::Broadcast => self.hier_broadcast(h, op, spec, src, dst)?,
            Kind::GatherAll => self.hier_gather_all(h, op, spec, src, dst)?,
            Kind::Reduce | Kind::ReduceAll => self.hier_reduce_array(h, op, spec, me, src, dst)?,
            Kind::ReduceElems | Kind::ReduceElemsAll => self.hier_reduce(h, op, spec, src, dst)?,
            k => {
                return Err(Error::Usage {
                    op,
                    detail: format!("no hierarchical algorithm for {}", k.name()),
                })
            }
        }
        if mode.output == OutSync::All {
            self.hier_barrier(h)?;
        }
        Ok(())
    }

    /// The host's barrier, the leaders', and the host's again (its release).
    fn hier_barrier(&self, h: &Hier) -> Result<()> {
        if let Some(l) = &h.local {
            self.barrier(l)?;
        }
        if let Some(t) = &h.leaders {
            self.barrier(t)?;
        }
        if let Some(l) = &h.local {
            self.barrier(l)?;
        }
        Ok(())
    }

    /// A broadcast of `n` bytes on `team` from its member `root` (a team rank), `src` at the
    /// root (`None`: in place in `dst`).
    fn phase_broadcast(
        &self,
        team: &Team,
        op: &'static str,
        root: u32,
        src: Option<Addr>,
        dst: Addr,
        n: usize,
    ) -> Result<()> {
        let c = call(
            op,
            Kind::Broadcast,
            Some(root),
            Counts::Uniform(n),
            one(src.unwrap_or(Addr::InPlace), dst),
            PHASE,
        );
        self.run(team, c, true).map(|_| ())
    }

    fn hier_broadcast(
        &self,
        h: &Hier,
        op: &'static str,
        spec: &Spec,
        src: Area,
        dst: Area,
    ) -> Result<()> {
        let n = dst.len;
        let root = u32::try_from(spec.root).unwrap_or(u32::MAX);
        let root_host = h.host_of[root as usize];
        let root_leads = h.leader[root_host as usize] == root;
        let mine = h.my_host == root_host;
        let me_root = src.len > 0;
        // The root's source, `None` where it is in place (its destination).
        let root_src = (src.ptr != dst.ptr).then(|| at(src.ptr));
        // The root's host first, where the root does not lead it.
        if mine && !root_leads {
            if let Some(l) = &h.local {
                let s = if me_root { root_src } else { None };
                self.phase_broadcast(l, op, h.local_index(root), s, at(dst.ptr), n)?;
            }
        }
        if let Some(t) = &h.leaders {
            // The root's host's leader holds the data: in its source if it is the root, else
            // in its destination.
            let s = if mine && me_root { root_src } else { None };
            self.phase_broadcast(t, op, root_host, s, at(dst.ptr), n)?;
        }
        if !mine || root_leads {
            if let Some(l) = &h.local {
                // The root itself where it leads the root's host; elsewhere the leader's
                // destination (in place).
                let s = if mine && me_root { root_src } else { None };
                self.phase_broadcast(l, op, 0, s, at(dst.ptr), n)?;
            }
        }
        Ok(())
    }

    fn hier_gather_all(
        &self,
        h: &Hier,
        op: &'static str,
        spec: &Spec,
        src: Area,
        dst: Area,
    ) -> Result<()> {
        let n = spec.uniform.unwrap_or(src.len);
        let np = h.host_of.len();
        let mine = h.sizes[h.my_host as usize];
        // The host's blocks at its leader, in team order.
        let mut host_blocks = if h.leads() {
            vec![0u8; mine * n]
        } else {
            Vec::new()
        };
        if let Some(l) = &h.local {
            let d = if h.leads() {
                buf_addr(&mut host_blocks)
            } else {
                at(dst.ptr)
            };
            let c = call(
                op,
                Kind::Gather,
                Some(0),
                Counts::Uniform(n),
                one(at(src.ptr), d),
                PHASE,
            );
            self.run(l, c, true)?;
        } else if h.leads() {
            // SAFETY: `src` is the parent call's resolved source of `n` bytes.
            let s = unsafe { std::slice::from_raw_parts(src.ptr as *const u8, n) };
            host_blocks.copy_from_slice(s);
        }
        if let Some(t) = &h.leaders {
            let counts: Vec<usize> = h.sizes.iter().map(|&k| k * n).collect();
            let mut by_host = vec![0u8; np * n];
            let c = call(
                op,
                Kind::GatherAll,
                None,
                Counts::PerPart(&counts),
                one(buf_addr(&mut host_blocks), buf_addr(&mut by_host)),
                PHASE,
            );
            self.run(t, c, true)?;
            // Host order to team order.
            let mut at_host: Vec<usize> = Vec::with_capacity(h.sizes.len());
            let mut off = 0;
            for &k in &h.sizes {
                at_host.push(off);
                off += k * n;
            }
            // SAFETY: `dst` is the parent call's resolved destination of `np * n` bytes.
            let d = unsafe { std::slice::from_raw_parts_mut(dst.ptr as *mut u8, np * n) };
            for (t, &host) in h.host_of.iter().enumerate() {
                let o = &mut at_host[host as usize];
                d[t * n..(t + 1) * n].copy_from_slice(&by_host[*o..*o + n]);
                *o += n;
            }
        }
        if let Some(l) = &h.local {
            self.phase_broadcast(l, op, 0, None, at(dst.ptr), np * n)?;
        }
        Ok(())
    }

    /// reduce_elems and reduce_elems_to_all.
    fn hier_reduce(
        &self,
        h: &Hier,
        op: &'static str,
        spec: &Spec,
        src: Area,
        dst: Area,
    ) -> Result<()> {
        let es = spec.es.max(1);
        let to_all = spec.kind == Kind::ReduceElemsAll;
        let count = spec.n;
        let vb = es * count;
        let mine = src.ptr;
        let root = u32::try_from(spec.root).unwrap_or(0);
        let root_host = h.host_of[root as usize];
        let red_of = |kind: Kind, root: Option<u32>, s: Addr, d: Addr| {
            let mut c = red_call(
                op,
                kind,
                root,
                one(s, d),
                vred(es, count, spec.func, spec.arg),
                PHASE,
            );
            c.call_fn = spec.call_fn.clone();
            c
        };
        // The host's fold at its leader.
        let mut acc = if h.leads() { vec![0u8; vb] } else { Vec::new() };
        if let Some(l) = &h.local {
            // A member other than the leader has no destination in this phase.
            let d = if h.leads() {
                buf_addr(&mut acc)
            } else {
                at(dst.ptr)
            };
            self.run(l, red_of(Kind::ReduceElems, Some(0), at(mine), d), true)?;
        } else if h.leads() {
            // SAFETY: `mine` is this rank's contribution of `vb` bytes (the folded element or
            // the parent call's source).
            acc.copy_from_slice(unsafe { std::slice::from_raw_parts(mine as *const u8, vb) });
        }
        // The job's fold at every leader, or at the root's host's.
        let mut res = Vec::new();
        let root_is_me = !to_all && dst.len > 0;
        if let Some(t) = &h.leaders {
            let d = if to_all || root_is_me {
                at(dst.ptr)
            } else {
                res = vec![0u8; vb];
                buf_addr(&mut res)
            };
            let c = if to_all {
                red_of(Kind::ReduceElemsAll, None, buf_addr(&mut acc), d)
            } else {
                red_of(Kind::ReduceElems, Some(root_host), buf_addr(&mut acc), d)
            };
            self.run(t, c, true)?;
        }
        // From the leader to the host (every member), or to the root.
        if let Some(l) = &h.local {
            if to_all {
                self.phase_broadcast(l, op, 0, None, at(dst.ptr), vb)?;
            } else if h.my_host == root_host && h.leader[root_host as usize] != root {
                let mut scratch = Vec::new();
                let d = if root_is_me {
                    at(dst.ptr)
                } else {
                    scratch = vec![0u8; vb];
                    buf_addr(&mut scratch)
                };
                let s = h.leads().then(|| buf_addr(&mut res));
                self.phase_broadcast(l, op, 0, s, d, vb)?;
                drop(scratch);
            }
        }
        Ok(())
    }

    /// reduce and reduce_to_all: every participant folds its elements (in order) to a record
    /// (a presence byte and the partial); the host's records are gathered at its leader, which
    /// folds the present ones; the leaders gather the hosts' records (every leader, or the
    /// root's host's) and fold the present ones in host order, so every leader gets the same
    /// bits; the result goes to the host (to all) or to the root.
    fn hier_reduce_array(
        &self,
        h: &Hier,
        op: &'static str,
        spec: &Spec,
        me: usize,
        src: Area,
        dst: Area,
    ) -> Result<()> {
        let es = spec.es.max(1);
        let w = es + 1;
        let to_all = spec.kind == Kind::ReduceAll;
        let root = u32::try_from(spec.root).unwrap_or(0);
        let root_host = h.host_of[root as usize];
        // SAFETY: `src` is the parent call's resolved source: this participant's area under
        // the layout, holding its elements at their runs' places.
        let area = unsafe { std::slice::from_raw_parts(src.ptr as *const u8, src.len) };
        let mut xs = Vec::with_capacity(src.len);
        for r in crate::plan::runs_iter(spec.src_lay, spec.n, spec.np) {
            if r.part == me {
                let run = area
                    .get(r.local * es..(r.local + r.len) * es)
                    .ok_or_else(|| Error::Usage {
                        op,
                        detail: "a source run outside the source area".into(),
                    })?;
                xs.extend_from_slice(run);
            }
        }
        let mut rec = vec![0u8; w];
        if !xs.is_empty() {
            rec[0] = 1;
            crate::shm::fold_elements(&self.sh, spec, op, &mut rec[1..], &xs)?;
        }
        // The present records of `recs`, folded in order, into `out` (a record).
        let fold = |recs: &[u8], out: &mut [u8]| -> Result<()> {
            let xs: Vec<u8> = recs
                .chunks_exact(w)
                .filter(|r| r[0] != 0)
                .flat_map(|r| r[1..].iter().copied())
                .collect();
            out[0] = u8::from(!xs.is_empty());
            if !xs.is_empty() {
                crate::shm::fold_elements(&self.sh, spec, op, &mut out[1..], &xs)?;
            }
            Ok(())
        };
        let gather = |team: &Team, root: Option<u32>, s: &mut [u8], d: &mut [u8]| {
            let kind = if root.is_some() {
                Kind::Gather
            } else {
                Kind::GatherAll
            };
            let c = call(
                op,
                kind,
                root,
                Counts::Uniform(w),
                one(buf_addr(s), buf_addr(d)),
                PHASE,
            );
            self.run(team, c, true).map(|_| ())
        };
        // The host's record at its leader.
        let mut host_rec = vec![0u8; w];
        if let Some(l) = &h.local {
            let k = h.sizes[h.my_host as usize];
            let mut recs = if h.leads() {
                vec![0u8; k * w]
            } else {
                Vec::new()
            };
            gather(l, Some(0), &mut rec, &mut recs)?;
            if h.leads() {
                fold(&recs, &mut host_rec)?;
            }
        } else {
            host_rec.copy_from_slice(&rec);
        }
        // The job's record at every leader, or at the root's host's.
        let mut result = vec![0u8; w];
        if let Some(t) = &h.leaders {
            let nh = h.leader.len();
            let receives = to_all || h.my_host == root_host;
            let mut recs = if receives {
                vec![0u8; nh * w]
            } else {
                Vec::new()
            };
            let r = (!to_all).then_some(root_host);
            gather(t, r, &mut host_rec, &mut recs)?;
            if receives {
                // Some participant holds an element: a call has at least one.
                fold(&recs, &mut result)?;
            }
        }
        let res = at(result.as_mut_ptr() as usize + 1);
        if to_all {
            if let Some(l) = &h.local {
                let s = h.leads().then_some(res);
                self.phase_broadcast(l, op, 0, s, at(dst.ptr), es)?;
            } else {
                // SAFETY: `dst` is the parent call's resolved destination of `es` bytes.
                let d = unsafe { std::slice::from_raw_parts_mut(dst.ptr as *mut u8, es) };
                d.copy_from_slice(&result[1..]);
            }
        } else if h.my_host == root_host {
            if h.leader[root_host as usize] == root {
                if dst.len > 0 {
                    // SAFETY: as above (the root's destination).
                    let d = unsafe { std::slice::from_raw_parts_mut(dst.ptr as *mut u8, es) };
                    d.copy_from_slice(&result[1..]);
                }
            } else if let Some(l) = &h.local {
                let mut scratch = vec![0u8; es];
                let d = if dst.len > 0 {
                    at(dst.ptr)
                } else {
                    buf_addr(&mut scratch)
                };
                let s = h.leads().then_some(res);
                self.phase_broadcast(l, op, 0, s, d, es)?;
            }
        }
        Ok(())
    }
}
