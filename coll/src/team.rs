//! Teams: ordered subsets of the job's ranks, each with the images its ranks host.
//!
//! A team is the one place where team-relative numbers (team ranks, team images) and the job's
//! ranks are translated. The engine keys every collective by (team id, sequence number) and
//! computes owners, peers and streams in team ranks; only the sends turn a team rank into the
//! job rank ([`Geo::world`]).
//!
//! Team ids have the same bits on every member and differ among the teams a process belongs
//! to: the world team is 0, and a child's id mixes its parent's id, the ordinal of the creation
//! call among the parent's creations (every member makes them in the same order) and the
//! child's index among the siblings that call creates (its color for `split`, its row or column
//! for `split_2d`).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use amnet_core::Rank;

/// The shape of one team as this rank sees it: who is in it, in order, and which images each
/// member hosts.
#[derive(Debug)]
pub(crate) struct Geo {
    /// Same bits on every member.
    pub(crate) id: u64,
    /// Team rank -> job rank.
    pub(crate) members: Vec<Rank>,
    /// This rank's team rank.
    pub(crate) me: u32,
    /// Images of each team rank.
    pub(crate) images: Vec<u32>,
    /// The first team image of each team rank (len size + 1).
    pub(crate) img_first: Vec<u32>,
    /// Job rank -> team rank, `u32::MAX` for ranks outside the team (len = job size).
    pub(crate) index: Vec<u32>,
    /// The team's characteristic bits for the selector (`select::team_bits`), computed at
    /// the first call.
    pub(crate) sel_bits: std::sync::OnceLock<u64>,
    /// The team's smp-native state (teams other than the world; the world's is in `Shared`),
    /// set when the team is made.
    pub(crate) shm: std::sync::OnceLock<crate::shm::ShmTeam>,
    /// The team's hierarchy (`hier`), set when the team is made, where it has one.
    pub(crate) hier: std::sync::OnceLock<crate::hier::Hier>,
    /// A team of a hierarchy (a host's or the leaders'), whose calls are phases.
    pub(crate) phase: bool,
}

impl Geo {
    /// The team of `members` (job ranks, in team order; `me` among them) in a job whose ranks
    /// host `job_images` images each.
    pub(crate) fn new(id: u64, members: Vec<Rank>, me: Rank, job_images: &[u32]) -> Geo {
        let mut index = vec![u32::MAX; job_images.len()];
        let mut images = Vec::with_capacity(members.len());
        let mut img_first = Vec::with_capacity(members.len() + 1);
        img_first.push(0u32);
        for (t, &r) in members.iter().enumerate() {
            let n = job_images[r as usize];
            images.push(n);
            img_first.push(img_first[t].saturating_add(n));
            index[r as usize] = u32::try_from(t).unwrap_or(u32::MAX);
        }
        let my = index[me as usize];
        Geo {
            id,
            members,
            me: my,
            images,
            img_first,
            index,
            sel_bits: std::sync::OnceLock::new(),
            shm: std::sync::OnceLock::new(),
            hier: std::sync::OnceLock::new(),
            phase: false,
        }
    }

    /// Members.
    pub(crate) fn size(&self) -> u32 {
        u32::try_from(self.members.len()).unwrap_or(u32::MAX)
    }

    /// Images of the whole team.
    pub(crate) fn nimages(&self) -> u32 {
        self.img_first[self.members.len()]
    }

    /// The team rank hosting team image `image`.
    pub(crate) fn image_trank(&self, image: u32) -> u32 {
        // img_first is increasing; the last team rank whose first image <= image.
        let t = self.img_first.partition_point(|&f| f <= image);
        u32::try_from(t.saturating_sub(1)).unwrap_or(0)
    }

    /// The team rank owning participant `p` (a team rank, or a team image in image space).
    pub(crate) fn owner(&self, image_space: bool, p: usize) -> u32 {
        let p = u32::try_from(p).unwrap_or(u32::MAX);
        if image_space {
            self.image_trank(p)
        } else {
            p
        }
    }

    /// The job rank of team rank `t`.
    pub(crate) fn world(&self, t: u32) -> Rank {
        self.members[t as usize]
    }

    /// The team rank of job rank `r`, if it is a member.
    pub(crate) fn trank(&self, r: Rank) -> Option<u32> {
        self.index
            .get(r as usize)
            .copied()
            .filter(|&t| t != u32::MAX)
    }

    /// "team rank T (rank R)" for messages, or "rank R" on the world team.
    pub(crate) fn name(&self, t: u32) -> String {
        if self.id == 0 {
            format!("rank {t}")
        } else {
            format!("team rank {t} (rank {})", self.world(t))
        }
    }
}

/// A team: an ordered subset of the job's ranks, with the images they host. Made by
/// [`Coll::world`](crate::Coll::world) and the creation calls of [`Coll`](crate::Coll) (`split`,
/// `split_strided`, `split_2d`, `create`); every collective takes the team it runs on.
///
/// A `Team` is a cheap handle (clones share it) that any thread of the rank may use. Team
/// numbers run `0..size()` in the order the creation call gives; images are numbered
/// node-major within the team (every image of team rank 0, then of team rank 1, ...).
#[derive(Clone)]
pub struct Team(pub(crate) Arc<TeamInner>);

pub(crate) struct TeamInner {
    pub(crate) geo: Arc<Geo>,
    /// False once destroyed.
    pub(crate) alive: AtomicBool,
    /// Creation calls made on this team as a parent (the ordinal that names children).
    pub(crate) creations: AtomicU64,
}

impl std::fmt::Debug for Team {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Team")
            .field("id", &format_args!("{:#x}", self.0.geo.id))
            .field("rank", &self.0.geo.me)
            .field("size", &self.0.geo.members.len())
            .field("alive", &self.is_alive())
            .finish()
    }
}

impl PartialEq for Team {
    fn eq(&self, other: &Team) -> bool {
        self.0.geo.id == other.0.geo.id && self.0.geo.members == other.0.geo.members
    }
}

impl Eq for Team {}

impl Team {
    pub(crate) fn new(geo: Geo) -> Team {
        Team(Arc::new(TeamInner {
            geo: Arc::new(geo),
            alive: AtomicBool::new(true),
            creations: AtomicU64::new(0),
        }))
    }

    pub(crate) fn geo(&self) -> &Arc<Geo> {
        &self.0.geo
    }

    /// This rank's number in the team, `0..size()`.
    pub fn rank(&self) -> u32 {
        self.0.geo.me
    }

    /// The number of ranks in the team.
    pub fn size(&self) -> u32 {
        self.0.geo.size()
    }

    /// The number of images of the team's ranks.
    pub fn images(&self) -> u32 {
        self.0.geo.nimages()
    }

    /// The team's id: the same on every member, different among the teams this rank belongs
    /// to (0 is the world team).
    pub fn id(&self) -> u64 {
        self.0.geo.id
    }

    /// The job rank of team rank `rank`, if the team has one.
    pub fn world_rank(&self, rank: u32) -> Option<Rank> {
        self.0.geo.members.get(rank as usize).copied()
    }

    /// The team rank of job rank `rank`, if it is a member.
    pub fn team_rank(&self, rank: Rank) -> Option<u32> {
        self.0.geo.trank(rank)
    }

    /// The job ranks of the team, in team order.
    pub fn members(&self) -> &[Rank] {
        &self.0.geo.members
    }

    /// The number in `other` of the rank numbered `rank` in this team: `None` when `rank` is
    /// not a number of this team or that rank is not in `other`.
    pub fn translate(&self, rank: u32, other: &Team) -> Option<u32> {
        self.world_rank(rank).and_then(|r| other.team_rank(r))
    }

    /// False once the team was destroyed.
    pub fn is_alive(&self) -> bool {
        self.0.alive.load(Ordering::Acquire)
    }

    /// The ordinal of the next creation call made on this team as a parent.
    pub(crate) fn next_creation(&self) -> u64 {
        self.0.creations.fetch_add(1, Ordering::AcqRel)
    }
}

/// A child team's id: its parent's id, the creation call's ordinal among the parent's, and the
/// child's index among that call's children, mixed (splitmix64) so that ids of unrelated teams
/// do not collide in practice. Never 0 (the world team's).
pub(crate) fn child_id(parent: u64, ordinal: u64, index: u64) -> u64 {
    let mut x = parent ^ 0x9e37_79b9_7f4a_7c15;
    for v in [ordinal, index] {
        x = x.wrapping_add(v).wrapping_add(0x9e37_79b9_7f4a_7c15);
        x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        x ^= x >> 31;
    }
    x.max(1)
}

/// The members (parent team ranks, in new-team order) of `split_strided(start, stride, size)`
/// on a parent of `n` ranks, or why the triplet is invalid. The same on every rank.
pub(crate) fn strided(n: u32, start: i64, stride: i64, size: i64) -> Result<Vec<u32>, String> {
    if size < 1 {
        return Err(format!("size {size}: a team has at least one member"));
    }
    if stride == 0 && size != 1 {
        return Err(format!("stride 0 needs size 1, not {size}"));
    }
    let mut v = Vec::with_capacity(usize::try_from(size).unwrap_or(0));
    for i in 0..size {
        let p = stride
            .checked_mul(i)
            .and_then(|o| start.checked_add(o))
            .filter(|&p| p >= 0 && p < i64::from(n));
        match p {
            Some(p) => v.push(u32::try_from(p).unwrap_or(u32::MAX)),
            None => {
                return Err(format!(
                    "member {i} would be parent rank {} (start {start} + stride {stride} x {i}), \
                     outside the parent's 0..{n}",
                    i128::from(start) + i128::from(stride) * i128::from(i)
                ))
            }
        }
    }
    Ok(v)
}

/// A line of the `split_2d` grid: its number (y for a row, x for a column) and its members
/// (parent ranks, in team order).
pub(crate) type Line = (u32, Vec<u32>);

/// `split_2d(xrange)` on a parent of `n` ranks: the effective x range (at most `n`), then for
/// parent rank `p` its row (x team: ranks with the same y) and column (y team: same x).
pub(crate) fn grid(n: u32, xrange: u32, p: u32) -> (u32, Line, Line) {
    let x = xrange.min(n).max(1);
    let (px, py) = (p % x, p / x);
    let row: Vec<u32> = (py * x..((py + 1) * x).min(n)).collect();
    let col: Vec<u32> = (0..).map(|j| px + j * x).take_while(|&q| q < n).collect();
    (x, (py, row), (px, col))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strided_triplets() {
        assert_eq!(strided(8, 1, 2, 3).unwrap(), vec![1, 3, 5]);
        assert_eq!(strided(8, 6, -2, 4).unwrap(), vec![6, 4, 2, 0]);
        assert_eq!(strided(8, 5, 0, 1).unwrap(), vec![5]);
        assert!(strided(8, 5, 0, 2).unwrap_err().contains("stride 0"));
        assert!(strided(8, 0, 3, 4).unwrap_err().contains("outside"));
        assert!(strided(8, 1, -1, 3).unwrap_err().contains("outside"));
        assert!(strided(8, 0, 1, 0).unwrap_err().contains("at least one"));
        assert!(strided(8, i64::MAX, i64::MAX, 2).is_err());
    }

    #[test]
    fn the_shmem_grid_of_ten_ranks_with_xrange_three() {
        // Rows (x teams) and columns (y teams) of the seed's example.
        let rows: Vec<Vec<u32>> = (0..10).map(|p| grid(10, 3, p).1 .1).collect();
        let cols: Vec<Vec<u32>> = (0..10).map(|p| grid(10, 3, p).2 .1).collect();
        assert_eq!(rows[4], vec![3, 4, 5]);
        assert_eq!(rows[9], vec![9]);
        assert_eq!(cols[0], vec![0, 3, 6, 9]);
        assert_eq!(cols[5], vec![2, 5, 8]);
        // A rank's number in its row is its x, in its column its y.
        for p in 0..10u32 {
            let (_, (y, row), (x, col)) = grid(10, 3, p);
            assert_eq!(row.iter().position(|&q| q == p), Some(x as usize));
            assert_eq!(col.iter().position(|&q| q == p), Some(y as usize));
        }
        // An xrange larger than the team behaves as the team's size.
        let (x, (_, row), (_, col)) = grid(4, 9, 2);
        assert_eq!((x, row, col), (4, vec![0, 1, 2, 3], vec![2]));
    }

    #[test]
    fn geometry_and_translation() {
        let g = Geo::new(7, vec![3, 1], 1, &[1, 2, 1, 3]);
        assert_eq!((g.me, g.size(), g.nimages()), (1, 2, 5));
        assert_eq!(g.img_first, vec![0, 3, 5]);
        assert_eq!((g.image_trank(2), g.image_trank(3)), (0, 1));
        assert_eq!((g.world(0), g.trank(1), g.trank(0)), (3, Some(1), None));
        let world = Team::new(Geo::new(0, vec![0, 1, 2, 3], 1, &[1, 2, 1, 3]));
        let t = Team::new(g);
        assert_eq!(t.translate(0, &world), Some(3));
        assert_eq!(world.translate(2, &t), None);
        assert_eq!(t.translate(5, &world), None);
    }

    #[test]
    fn child_ids_differ_and_are_never_the_world_id() {
        let mut seen = std::collections::HashSet::new();
        for ord in 0..50 {
            for idx in 0..50 {
                let id = child_id(0, ord, idx);
                assert_ne!(id, 0);
                assert!(seen.insert(id), "collision at {ord} {idx}");
            }
        }
    }
}
