//! The public collective API: `Coll::init`, the operations in every form, and the syncs.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use amnet_core::config::vars;
use amnet_core::{Endpoint, Error, Layer, Rank, Result};
use amnet_sync_modes::{CallShape, Mode};

use crate::builtin::{self, Elem, Loc, RedOp, N_BUILTIN};
use crate::engine::{Area, HandleRec, Key, Shared, State, TeamSeq};
use crate::plan::{area_elems, CallFn, Kind, Spec};
use crate::select::{CallInfo, Imp};
use crate::team::{Geo, Team};
use crate::types::{Addr, CollHandle, FnEntry, Layout};

/// A rank's (or, with images, an image thread's) handle on the collectives. Cheap to clone;
/// clones share the rank's state and the calling image.
#[derive(Clone)]
pub struct Coll {
    pub(crate) sh: Arc<Shared>,
    pub(crate) image: u32,
}

impl std::fmt::Debug for Coll {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Coll")
            .field("rank", &self.sh.rank)
            .field("image", &self.image)
            .finish()
    }
}

/// Which local images joined `init`, and the rank's agreement outcome once known.
type Joined = (Vec<bool>, Option<std::result::Result<(), Error>>);

/// What the layer's state slot holds while and after `init` runs.
struct InitSlot {
    sh: Mutex<Option<Arc<Shared>>>,
    /// Images that called init, and the outcome once the rank's agreement check ran.
    joined: Mutex<Joined>,
}

pub(crate) fn usage(op: &'static str, detail: impl Into<String>) -> Error {
    Error::Usage {
        op,
        detail: detail.into(),
    }
}

fn init_hash(images: &[u32], fns: &[FnEntry]) -> u32 {
    // FNV-1a over the images and the table's size and flags.
    let mut h: u32 = 0x811c_9dc5;
    let mut eat = |x: u32| {
        for b in x.to_le_bytes() {
            h ^= u32::from(b);
            h = h.wrapping_mul(0x0100_0193);
        }
    };
    for &i in images {
        eat(i);
    }
    #[allow(clippy::cast_possible_truncation)] // table sizes are small
    eat(fns.len() as u32);
    for f in fns {
        eat(f.flags);
    }
    h
}

/// Buffers a blocking collective reads and writes, for the library's own calls: freed once the
/// call succeeded (the collective completed on this rank), leaked when it failed, since a
/// collective whose wait failed (a hang reported by the watchdog, a failed peer) may still be
/// in flight and write them later.
pub(crate) struct InFlight<T>(Option<Vec<T>>);

impl<T> InFlight<T> {
    pub(crate) fn new(v: Vec<T>) -> Self {
        InFlight(Some(v))
    }

    pub(crate) fn get_mut(&mut self) -> &mut Vec<T> {
        self.0.get_or_insert_with(Vec::new)
    }

    /// The buffers back when `r` is Ok; leaked, and `r`'s error returned, otherwise.
    pub(crate) fn finish<R>(mut self, r: Result<R>) -> Result<Vec<T>> {
        let v = self.0.take().unwrap_or_default();
        match r {
            Ok(_) => Ok(v),
            Err(e) => {
                std::mem::forget(v);
                Err(e)
            }
        }
    }
}

/// An address's kind in a `ShmKey` (`Seg`, `Ptr`, `InPlace`: 0, 1, 2).
#[inline]
fn addr_tag(a: Addr) -> u8 {
    match a {
        Addr::Seg(_) => 0,
        Addr::Ptr(_) => 1,
        Addr::InPlace => 2,
    }
}

/// A call that may repeat an smp-native call: blocking, one address each, uniform counts (or
/// none), a table function; its source and destination addresses and bytes (`Counts::None`:
/// 0).
#[inline]
fn repeat_shape(c: &Call<'_>) -> Option<(Addr, Addr, usize)> {
    if !c.blocking || c.call_fn.is_some() {
        return None;
    }
    let Addrs::One { src, dst } = c.addrs else {
        return None;
    };
    let n = match c.counts {
        Counts::Uniform(n) => n,
        Counts::None => 0,
        _ => return None,
    };
    Some((src, dst, n))
}

/// One participant's addresses as passed.
#[derive(Clone, Copy)]
struct Entry {
    p: usize,
    src: Addr,
    dst: Addr,
}

/// What identifies a blocking call for the repeat of an smp-native one (`Coll::shm_repeat`):
/// everything the mode, the selection bits and the selector's choice depend on, given the
/// collectives state `shared` with its forced choices at `generation`.
#[derive(Clone, Copy, PartialEq, Eq)]
struct ShmKey {
    shared: u64,
    /// The team's id.
    team: u64,
    generation: u64,
    image: u32,
    kind: Kind,
    flags: u32,
    /// `Counts::Uniform`'s bytes (0: `Counts::None`).
    n: usize,
    /// The address kinds (`Seg`, `Ptr`, `InPlace`: 0, 1, 2).
    src: u8,
    dst: u8,
    root: Option<u32>,
    red: Option<Red>,
}

/// The last blocking call of a thread that ran an smp-native algorithm: its key and what the
/// initiation worked out for it.
struct ShmMemo {
    key: ShmKey,
    mode: Mode,
    /// The call as the algorithm takes it (every field follows from the key).
    spec: Spec,
    /// This rank's participant.
    p: usize,
    /// The source's and destination's lengths, where both are plain areas (neither an
    /// in-place source nor an in-place scatter destination): `resolve` reduced to the two
    /// bounds checks.
    lens: Option<(usize, usize)>,
    /// The call's small form, where it has one and `lens` is known (`shm::Small`).
    small: Option<crate::shm::Small>,
}

thread_local! {
    /// This thread's `ShmMemo` (borrowed for the length of a repeated call).
    static SHM_MEMO: std::cell::RefCell<Option<ShmMemo>> = const { std::cell::RefCell::new(None) };
}

/// A call's local participants: one (no allocation), or a list.
enum Entries {
    One([Entry; 1]),
    Many(Vec<Entry>),
}

impl std::ops::Deref for Entries {
    type Target = [Entry];
    fn deref(&self) -> &[Entry] {
        match self {
            Entries::One(e) => e,
            Entries::Many(v) => v,
        }
    }
}

/// Why an in-place address cannot go with direct puts (`Shared::direct_puts`), if one is
/// given: an exchange reads its in-place source from the destination that the other ranks'
/// puts may already be writing, and an in-place scatter root does not know the segment offset
/// its blocks go to.
fn direct_in_place(spec: &Spec, entries: &[Entry]) -> Option<String> {
    const MODES: &str = "IN_NOSYNC with OUT_NOSYNC or OUT_ALLSYNC on SINGLE addresses";
    entries.iter().find_map(|e| match spec.kind {
        Kind::Exchange if e.src == Addr::InPlace && matches!(e.dst, Addr::Seg(_)) => Some(format!(
            "an in-place exchange source under {MODES}: the other ranks put their blocks into \
             participant {}'s segment destination before it reads its source there; use \
             IN_MYSYNC or a separate source",
            e.p
        )),
        Kind::Scatter if e.dst == Addr::InPlace => Some(format!(
            "an in-place scatter root under {MODES}: the root puts every block straight into \
             the segment offset of the others' destinations, which it takes from its own; \
             use IN_MYSYNC or pass the root's Addr::Seg destination",
        )),
        _ => None,
    })
}

/// The addresses of one call.
pub(crate) enum Addrs<'a> {
    One {
        src: Addr,
        dst: Addr,
    },
    Many {
        src: AddrList<'a>,
        dst: AddrList<'a>,
    },
}

#[derive(Clone, Copy)]
pub(crate) enum AddrList<'a> {
    One(Addr),
    List(&'a [Addr]),
}

pub(crate) struct Call<'a> {
    op: &'static str,
    kind: Kind,
    root_image: Option<u32>,
    counts: Counts<'a>,
    red: Option<Red>,
    addrs: Addrs<'a>,
    flags: u32,
    /// Done on return (no handle to sync): the blocking forms, raw and typed.
    pub(crate) blocking: bool,
    /// A reduction function passed with the call, instead of a table entry.
    pub(crate) call_fn: Option<CallFn>,
}

#[derive(Clone, Copy)]
pub(crate) enum Counts<'a> {
    Uniform(usize),
    PerPart(&'a [usize]),
    Matrix(&'a [usize]),
    None,
}

#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) struct Red {
    es: usize,
    n: usize,
    src_lay: Layout,
    dst_lay: Layout,
    func: usize,
    arg: u32,
}

impl Red {
    /// No reduction (the fields of a data movement call's `Spec`).
    const NONE: Red = Red {
        es: 0,
        n: 0,
        src_lay: Layout::indefinite(0),
        dst_lay: Layout::indefinite(0),
        func: 0,
        arg: 0,
    };
}

/// `AMNET_COLL_EARLY_BYTES` when unset: 16 MiB.
const DEFAULT_EARLY_BYTES: usize = 16 << 20;

/// The early-data flow control of one rank (`Coll::flow_stats`, spec/coll.md §6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct FlowStats {
    /// The budget: bytes this rank may hold for collectives it has not entered, from all
    /// other ranks together (each sender keeps to its share, budget / (ranks − 1)).
    pub budget: usize,
    /// Bytes held now for collectives not entered here.
    pub early_bytes: usize,
    /// The most such bytes held at once so far.
    pub early_peak: usize,
    /// Times a collective's sends on this rank waited for a peer to catch up.
    pub deferrals: u64,
    /// Flow-control asks this rank sent (each answered by one message).
    pub asks: u64,
}

impl Coll {
    /// Initialize the collectives: collective, once per image thread, after attach and
    /// before any other collective.
    ///
    /// `images`: images per rank (len = ranks, none zero), node-major numbering; `None` for
    /// one image per rank (then `my_image` is 0 or the rank's own image). With images, every image's thread
    /// calls `init` with its own `my_image`. `fns`: the client's function table; it follows
    /// the [`builtin`] entries, so client function `i` has index `builtin::N_BUILTIN + i`. The
    /// images and the table's size and flags must agree on every rank.
    pub fn init(
        ep: &Endpoint,
        images: Option<&[u32]>,
        my_image: u32,
        fns: &[FnEntry],
    ) -> Result<Coll> {
        const OP: &str = "coll_init";
        if let Some(h) = ep.current_handler() {
            return Err(Error::InHandler { op: OP, handler: h });
        }
        if !ep.is_attached() {
            return Err(Error::NotAttached { op: OP });
        }
        let size = ep.size();
        let images: Vec<u32> = match images {
            None => vec![1; size as usize],
            Some(v) => v.to_vec(),
        };
        if images.len() != size as usize {
            return Err(usage(
                OP,
                format!(
                    "images has {} entries; the job has {size} ranks",
                    images.len()
                ),
            ));
        }
        if let Some(r) = images.iter().position(|&n| n == 0) {
            return Err(usage(
                OP,
                format!("images[{r}] is 0; every rank hosts at least one image"),
            ));
        }
        let mut img_first = vec![0u32; size as usize + 1];
        for r in 0..size as usize {
            img_first[r + 1] = img_first[r]
                .checked_add(images[r])
                .ok_or_else(|| usage(OP, "the total number of images overflows u32"))?;
        }
        let me = ep.rank() as usize;
        let my_image = if images.iter().all(|&n| n == 1)
            && images.len() == size as usize
            && my_image == 0
            && me != 0
        {
            // `None` (or one image per rank): the image is the rank.
            img_first[me]
        } else {
            my_image
        };
        if my_image < img_first[me] || my_image >= img_first[me + 1] {
            return Err(usage(
                OP,
                format!(
                    "my_image {my_image} is not an image of rank {me} (its images are {}..{})",
                    img_first[me],
                    img_first[me + 1]
                ),
            ));
        }
        // Every image thread of the rank polls: the idle policy counts them.
        ep.declare_threads(images[me]);
        let mut table = builtin::builtin_table();
        table.extend(fns.iter().cloned());
        let slot_any = ep
            .layer(Layer::Coll)
            .state()
            .get_or_init(|| {
                Arc::new(InitSlot {
                    sh: Mutex::new(None),
                    joined: Mutex::new((vec![false; images[me] as usize], None)),
                })
            })
            .clone();
        let slot = slot_any
            .downcast::<InitSlot>()
            .map_err(|_| usage(OP, "another library layer already uses this endpoint"))?;
        let local = (my_image - img_first[me]) as usize;
        let sh = {
            let mut g = slot.sh.lock().unwrap_or_else(|e| e.into_inner());
            match &*g {
                Some(sh) => {
                    if sh.images != images || sh.fns.len() != table.len() {
                        return Err(Error::Mismatch {
                            what: "coll_init (images or function table)",
                            detail: format!(
                                "image {my_image} passed a different images array or function \
                                 table than another image of rank {me}"
                            ),
                        });
                    }
                    sh.clone()
                }
                None => {
                    let world = Team::new(Geo::new(0, (0..size).collect(), ep.rank(), &images));
                    static IDS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
                    let sh = Arc::new(Shared {
                        id: IDS.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
                        ep: ep.clone(),
                        seg: (
                            ep.segment_ptr().map_or(0, |p| p as usize),
                            ep.segment_len().unwrap_or(0),
                        ),
                        rank: ep.rank(),
                        size,
                        images: images.clone(),
                        img_first: img_first.clone(),
                        world,
                        fns: table.clone(),
                        check: ep.config_source().flag(&vars::COLL_CHECK)?.unwrap_or(false),
                        selector: crate::select::Selector::new(
                            ep.config_source(),
                            ep.conduit_name(),
                        )?,
                        hang: ep.config_source().seconds(&vars::HANG_TIMEOUT)?,
                        trace: ep.config_source().flag(&vars::COLL_TRACE)?.unwrap_or(false),
                        st: Mutex::new(State {
                            next_handle: 1,
                            ..State::default()
                        }),
                        work: std::sync::atomic::AtomicBool::new(false),
                        early_budget: std::sync::atomic::AtomicUsize::new(
                            ep.config_source()
                                .count_usize(&vars::COLL_EARLY_BYTES)?
                                .unwrap_or(DEFAULT_EARLY_BYTES),
                        ),
                        shm_world: crate::shm::ShmTeam::world(ep),
                        shm_areas: Mutex::new(crate::shm::AreaBook::default()),
                        agg_teams: std::sync::atomic::AtomicUsize::new(0),
                        kernels: builtin::builtin_kernels(),
                    });
                    if sh.shm_world.is_none() {
                        // Area 0 of the host scratch is the world team's; without smp-native
                        // state of its own, the world's host teams take it.
                        if let Some(h) = crate::hier::Hier::new(ep, sh.world.geo(), &images, (0, 0))
                        {
                            let _ = sh.world.geo().hier.set(h);
                        }
                    }
                    sh.install()?;
                    *g = Some(sh.clone());
                    sh
                }
            }
        };
        // Join; the last local image runs the rank's agreement check, the others wait for it.
        let last = {
            let mut j = slot.joined.lock().unwrap_or_else(|e| e.into_inner());
            if j.0.get(local).copied().unwrap_or(true) {
                return Err(usage(
                    OP,
                    format!("called twice for image {my_image}; initialize the collectives once"),
                ));
            }
            j.0[local] = true;
            j.0.iter().all(|&b| b)
        };
        if last {
            let h = init_hash(&images, &table);
            let r = ep.barrier_agree(h).map_err(|e| match e {
                Error::BarrierMismatch { detail } => Error::Mismatch {
                    what: "coll_init (images or function table size and flags)",
                    detail,
                },
                e => e,
            });
            slot.joined.lock().unwrap_or_else(|e| e.into_inner()).1 = Some(r);
        }
        loop {
            if let Some(r) = &slot.joined.lock().unwrap_or_else(|e| e.into_inner()).1 {
                r.clone()?;
                break;
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        let coll = Coll {
            sh,
            image: my_image,
        };
        if local == 0 {
            coll.trace_team(coll.world());
        }
        Ok(coll)
    }

    /// The calling image.
    pub fn my_image(&self) -> u32 {
        self.image
    }

    /// Images in the job.
    pub fn images(&self) -> u32 {
        self.sh.nimages()
    }

    /// Images of each rank.
    pub fn images_per_rank(&self) -> &[u32] {
        &self.sh.images
    }

    /// The rank hosting `image`.
    pub fn image_rank(&self, image: u32) -> Result<Rank> {
        if image >= self.sh.nimages() {
            return Err(usage(
                "image_rank",
                format!(
                    "image {image} does not exist ({} images)",
                    self.sh.nimages()
                ),
            ));
        }
        Ok(self.sh.image_rank(image))
    }

    /// The endpoint.
    pub fn endpoint(&self) -> &Endpoint {
        &self.sh.ep
    }

    /// The team of every rank of the job (id 0).
    pub fn world(&self) -> &Team {
        &self.sh.world
    }

    /// The algorithms of the operation named `op` (`"broadcast"`, `"reduce_to_all"`, ...), the
    /// fallback (`flat`) first; `None` for an unknown operation.
    pub fn algorithms(op: &str) -> Option<Vec<&'static str>> {
        crate::select::algorithms(op)
    }

    /// Replace this rank's forced algorithm choices, in the grammar of `AMNET_COLL_TUNE` (an
    /// empty text clears them). Every rank must make the same call at the same point of its
    /// sequence of collectives (between two collectives on every team), or ranks would choose
    /// differently; checked mode (`AMNET_COLL_CHECK=1`) reports a disagreement.
    pub fn tune(&self, text: &str) -> Result<()> {
        self.sh
            .selector
            .set_forced(text)
            .map_err(|e| usage("tune", e))
    }

    /// This rank's early-data flow control: its budget and counters.
    pub fn flow_stats(&self) -> FlowStats {
        let st = self.sh.lock();
        FlowStats {
            budget: self
                .sh
                .early_budget
                .load(std::sync::atomic::Ordering::Relaxed),
            early_bytes: st.flow.early_now,
            early_peak: st.flow.early_peak,
            deferrals: st.flow.deferrals,
            asks: st.flow.asks,
        }
    }

    /// Replace this rank's early-data budget (`AMNET_COLL_EARLY_BYTES`, at least 1 byte) and
    /// restart the peak count. Every rank should use the same value: a sender keeps to its
    /// share of its own budget. Not collective; collectives already admitted are not recounted.
    pub fn set_early_budget(&self, bytes: usize) {
        self.sh
            .early_budget
            .store(bytes.max(1), std::sync::atomic::Ordering::Relaxed);
        let mut st = self.sh.lock();
        st.flow.early_peak = st.flow.early_now;
    }

    /// The algorithm a blocking single-address call of operation `op` with `bytes` per block,
    /// segment addresses and the sync flags `flags` would get on `team` (for a reduction: a
    /// commutative built-in of 8-byte elements; an
    /// array reduction with one run of elements per participant, in participant order, in
    /// the same layout at source and destination).
    pub fn selected(&self, team: &Team, op: &str, bytes: usize, flags: u32) -> Result<String> {
        let kind = Kind::ALL
            .into_iter()
            .find(|k| k.name() == op)
            .ok_or_else(|| usage("selected", format!("no operation {op:?}")))?;
        let mode = Mode::parse(
            flags | amnet_sync_modes::flags::SINGLE,
            CallShape {
                blocking: true,
                multi_address: false,
                multi_image: self.multi_image(),
            },
        )
        .map_err(|e| usage("selected", e.to_string()))?;
        let mut mask = self.team_bits(team.geo());
        if kind.is_reduction() {
            use crate::select::bits::*;
            mask |= COMMUTATIVE | BUILTIN_FN | ALL_CONTRIBUTE | ORDER_SAFE;
            if !kind.is_vector() {
                mask |= RUNS_IN_ORDER | SAME_LAYOUT;
            }
        }
        if mode.input == amnet_sync_modes::InSync::All {
            mask |= crate::select::bits::IN_ALL;
        }
        if mode.output == amnet_sync_modes::OutSync::All {
            mask |= crate::select::bits::OUT_ALL;
        }
        mask |= crate::select::bits::SINGLE_ADDR;
        if mask & crate::select::bits::HOST_SHM != 0 {
            // Segment addresses: the sources are in the segment.
            let np = team.size() as usize;
            let (n, es, count) = if kind.is_reduction() {
                (0, 8, bytes / 8)
            } else {
                (bytes, 0, 0)
            };
            let b = crate::shm::published_bytes(kind, n, np, es, count);
            if crate::shm::fits(kind, b, es, true, false) {
                mask |= crate::select::bits::SHM_FITS;
            }
        }
        let info = CallInfo {
            kind,
            mask,
            bytes,
            ranks: team.size(),
        };
        Ok(self.sh.selector.choose(&info)?.alg.name.to_string())
    }

    /// With `AMNET_COLL_TRACE=1`, team rank 0 prints `team`'s selection table: the algorithm
    /// a plain `ALLSYNC` call of each operation gets at a few sizes.
    pub(crate) fn trace_team(&self, team: &Team) {
        if !self.sh.trace || team.rank() != 0 {
            return;
        }
        let sizes = [8usize, 4 << 10, 64 << 10, 1 << 20];
        let mut text = format!(
            "amnet coll: team {:#x} ({} ranks, {} images) selects:\n",
            team.id(),
            team.size(),
            team.images()
        );
        for k in Kind::ALL {
            let picks: Vec<String> = sizes
                .iter()
                .map(|&b| {
                    let a = self
                        .selected(team, k.name(), b, amnet_sync_modes::flags::ALLSYNC)
                        .unwrap_or_else(|e| format!("({e})"));
                    format!("{b} B: {a}")
                })
                .collect();
            text += &format!("amnet coll:   {:<24} {}\n", k.name(), picks.join(", "));
        }
        amnet_core::diag::emit(&text);
    }

    /// Run handlers and move collectives in flight along.
    pub fn poll(&self) -> Result<()> {
        self.sh.ep.poll()?;
        self.sh.advance()?;
        Ok(())
    }

    /// A description of every collective in flight on this rank and what each waits for.
    pub fn in_flight_report(&self) -> String {
        self.sh.report()
    }

    // ----- initiation ------------------------------------------------------------------

    pub(crate) fn multi_image(&self) -> bool {
        self.sh.images.iter().any(|&n| n > 1)
    }

    /// The bits of a team's own characteristics (see `select`).
    fn team_bits(&self, geo: &Geo) -> u64 {
        *geo.sel_bits.get_or_init(|| {
            let mut m = crate::select::team_bits(geo, self.sh.ep.conduit_name());
            if self.shm_team(geo).is_some() {
                m |= crate::select::bits::HOST_SHM;
            }
            if geo.hier.get().is_some() {
                m |= crate::select::bits::HIER;
            }
            if geo.phase {
                m |= crate::select::bits::PHASE;
            }
            if self.sh.check {
                m |= crate::select::bits::CHECKED;
            }
            m
        })
    }

    /// The smp-native state of `geo`'s team, if it has one: where every member maps every
    /// other member's host scratch, the world team's, and another team's where it got an area
    /// of the scratch when it was made (`Coll::creation_gather`).
    pub(crate) fn shm_team<'a>(&'a self, geo: &'a Geo) -> Option<&'a crate::shm::ShmTeam> {
        if geo.id == 0 {
            self.sh.shm_world.as_ref()
        } else {
            geo.shm.get()
        }
    }

    /// The characteristic bits of a call (the team's and the call's; see `select`).
    fn call_mask(
        &self,
        geo: &Geo,
        c: &Call<'_>,
        mode: &Mode,
        image_space: bool,
        red: &Red,
        entries: &[Entry],
    ) -> u64 {
        use crate::select::bits::*;
        let mut m = self.team_bits(geo);
        if image_space {
            m |= IMAGE_SPACE;
        }
        if mode.all_threads {
            m |= ALL_THREADS;
        }
        if matches!(c.counts, Counts::PerPart(_) | Counts::Matrix(_)) {
            m |= V_FORM;
        }
        if entries
            .iter()
            .any(|e| e.src == Addr::InPlace || e.dst == Addr::InPlace)
        {
            m |= IN_PLACE;
        }
        if c.red.is_some() {
            let flags = match &c.call_fn {
                Some(f) => f.0.flags,
                None => self.sh.fns.get(red.func).map_or(0, |f| f.flags),
            };
            if flags & crate::types::fn_flags::NONCOMM == 0 {
                m |= COMMUTATIVE;
            }
            if red.func < N_BUILTIN {
                m |= BUILTIN_FN;
            }
        }
        if c.red.is_some() && !c.kind.is_vector() {
            // The array reductions' layouts.
            let np = if image_space {
                geo.nimages()
            } else {
                geo.size()
            } as usize;
            // One pass over the source runs, against the destination's, without allocating
            // (up to 64 participants; a vector beyond).
            let mut small = 0u64;
            let mut big = if np > 64 { vec![false; np] } else { Vec::new() };
            let mut in_order = true;
            let mut same = true;
            let mut prev: Option<usize> = None;
            let mut dst = crate::plan::runs_iter(red.dst_lay, red.n, np);
            for r in crate::plan::runs_iter(red.src_lay, red.n, np) {
                if r.part < np {
                    if np > 64 {
                        big[r.part] = true;
                    } else {
                        small |= 1 << r.part;
                    }
                }
                if prev.is_some_and(|p| p >= r.part) {
                    in_order = false;
                }
                prev = Some(r.part);
                if same && dst.next() != Some(r) {
                    same = false;
                }
            }
            if same && dst.next().is_some() {
                same = false;
            }
            let all = if np > 64 {
                big.iter().all(|&h| h)
            } else {
                small.count_ones() as usize == np
            };
            if all {
                m |= ALL_CONTRIBUTE;
            }
            if m & COMMUTATIVE != 0 || in_order {
                m |= ORDER_SAFE;
            }
            if in_order {
                m |= RUNS_IN_ORDER;
            }
            if same {
                m |= SAME_LAYOUT;
            }
        }
        if mode.aggregate {
            m |= AGGREGATED;
        } else if m & (HOST_SHM | HIER) != 0
            && self.sh.agg_teams.load(std::sync::atomic::Ordering::Relaxed) > 0
        {
            // The call that closes an open aggregate belongs to it (the smp-native and
            // hierarchical algorithms take no aggregation). Every rank has the same aggregate open, and
            // under `ALL_THREADS` every image its own (keyed by the image).
            let caller = if mode.all_threads {
                self.image
            } else {
                u32::MAX
            };
            let st = self.sh.lock();
            if st
                .teams
                .get(&geo.id)
                .is_some_and(|t| t.agg_open.contains_key(&caller))
            {
                m |= AGGREGATED;
            }
        }
        if !c.blocking {
            m |= NONBLOCKING;
        }
        let single = mode.addressing == amnet_sync_modes::Addressing::Single;
        if single {
            m |= SINGLE_ADDR;
        }
        if m & HOST_SHM != 0 {
            // Under SINGLE a segment address is the same on every rank, so every rank knows
            // that every source is in the segment.
            let src_in_seg = mode.src_in_segment
                || (single
                    && matches!(
                        c.addrs,
                        Addrs::One {
                            src: Addr::Seg(_),
                            ..
                        } | Addrs::One {
                            src: Addr::InPlace,
                            dst: Addr::Seg(_)
                        }
                    ));
            let n = match c.counts {
                Counts::Uniform(n) => n,
                _ => usize::MAX,
            };
            let np = if image_space {
                geo.nimages()
            } else {
                geo.size()
            } as usize;
            let fits = if image_space {
                // Data movement only (the selector's bits): every member's images' blocks
                // staged in its scratch.
                let kmax = geo.images.iter().copied().max().unwrap_or(1) as usize;
                crate::shm::images::fits(c.kind, n, np, kmax, red.es, red.n)
            } else {
                let bytes = crate::shm::published_bytes(c.kind, n, np, red.es, red.n);
                crate::shm::fits(c.kind, bytes, red.es, src_in_seg, m & IN_PLACE != 0)
            };
            if fits {
                m |= SHM_FITS;
            }
        }
        if mode.src_in_segment {
            m |= SRC_IN_SEG;
        }
        if mode.dst_in_segment {
            m |= DST_IN_SEG;
        }
        if mode.input == amnet_sync_modes::InSync::All {
            m |= IN_ALL;
        }
        if mode.output == amnet_sync_modes::OutSync::All {
            m |= OUT_ALL;
        }
        m
    }

    /// The calling image's number in `geo`'s team (node-major within the team).
    pub(crate) fn team_image(&self, geo: &Geo) -> u32 {
        let local = self.image - self.sh.img_first[self.sh.rank as usize];
        geo.img_first[geo.me as usize] + local
    }

    /// A collective may run on `team`: it is alive and this rank belongs to it.
    pub(crate) fn check_team(&self, op: &'static str, team: &Team) -> Result<()> {
        if !team.is_alive() {
            return Err(usage(
                op,
                format!(
                    "team {:#x} was destroyed; it cannot be used any more",
                    team.id()
                ),
            ));
        }
        if team.geo().index.len() != self.sh.size as usize
            || team.geo().members.get(team.rank() as usize) != Some(&self.sh.rank)
        {
            return Err(usage(
                op,
                format!("team {:#x} belongs to another job or rank", team.id()),
            ));
        }
        Ok(())
    }

    /// No barrier of the endpoint is between its notify and its end.
    pub(crate) fn no_barrier_pending(&self, op: &'static str) -> Result<()> {
        if self.sh.ep.barrier_pending() {
            return Err(usage(
                op,
                "initiated between barrier_notify and the end of that barrier; collectives and \
                 barriers may not overlap",
            ));
        }
        Ok(())
    }

    /// The key of `c` for the repeat of an smp-native call, when it may have one: blocking,
    /// one address each, uniform counts, a table function, a team with smp-native state.
    fn shm_key(&self, team: &Team, c: &Call<'_>) -> Option<ShmKey> {
        self.shm_team(team.geo())?;
        let (src, dst, n) = repeat_shape(c)?;
        Some(ShmKey {
            shared: self.sh.id,
            team: team.geo().id,
            generation: self.sh.selector.generation(),
            image: self.image,
            kind: c.kind,
            flags: c.flags,
            n,
            src: addr_tag(src),
            dst: addr_tag(dst),
            root: c.root_image,
            red: c.red,
        })
    }

    /// Run `c` again as the thread's memo of an earlier call with the same key ran it (the
    /// same mode, participants and algorithm, this call's addresses checked and resolved), if
    /// the thread has one and it applies now (no aggregate is open on any team: the call could
    /// close it). None: the call takes the full initiation.
    fn shm_repeat(&self, team: &Team, c: &Call<'_>) -> Option<Result<()>> {
        let (src, dst, n) = repeat_shape(c)?;
        if self.sh.agg_teams.load(std::sync::atomic::Ordering::Relaxed) != 0 {
            return None;
        }
        SHM_MEMO.with(|cell| {
            // The memo stays borrowed while the repeated call runs: a call made from inside it
            // (a reduction function's, say) reads it too, and an initiation there leaves it
            // as it is (its `try_borrow_mut` fails).
            let memo = cell.try_borrow().ok()?;
            let m = memo.as_ref()?;
            // `shm_key`'s fields, compared where they are.
            let k = &m.key;
            let same = k.kind == c.kind
                && k.n == n
                && k.flags == c.flags
                && k.root == c.root_image
                && k.src == addr_tag(src)
                && k.dst == addr_tag(dst)
                && k.team == team.geo().id
                && k.shared == self.sh.id
                && k.image == self.image
                && k.red == c.red
                && k.generation == self.sh.selector.generation()
                && self.shm_team(team.geo()).is_some();
            same.then(|| self.shm_repeat_with(team, c, m))
        })
    }

    /// `shm_repeat` with the memo `m` that matches `c`.
    fn shm_repeat_with(&self, team: &Team, c: &Call<'_>, m: &ShmMemo) -> Result<()> {
        self.check_team(c.op, team)?;
        self.no_barrier_pending(c.op)?;
        let t = self
            .shm_team(team.geo())
            .ok_or_else(|| usage(c.op, "the smp-native algorithm on a team without one"))?;
        let Addrs::One { src, dst } = c.addrs else {
            return Err(usage(c.op, "a repeated call changed its address form"));
        };
        let e = Entry { p: m.p, src, dst };
        if let (Some(k), Some((src_len, dst_len))) = (m.small, m.lens) {
            let src = self.area(c.op, "source", src, src_len, m.mode.src_in_segment)?;
            let dst = self.area(c.op, "destination", dst, dst_len, m.mode.dst_in_segment)?;
            return crate::shm::run_small(&self.sh, t, c.op, (&m.spec, k), src, dst);
        }
        let (src, dst) = match m.lens {
            Some((src_len, dst_len)) => (
                self.area(c.op, "source", src, src_len, m.mode.src_in_segment)?,
                self.area(c.op, "destination", dst, dst_len, m.mode.dst_in_segment)?,
            ),
            None => {
                let (_, src, dst) = self.resolve(c.op, &m.spec, &m.mode, e)?;
                (src, dst)
            }
        };
        self.shm_run(t, c.op, &m.spec, &m.mode, e, src, dst)
    }

    /// Run `spec` with the smp-native algorithms on `t`'s team, for this rank's participant
    /// `e`, whose areas `src` and `dst` are resolved.
    #[allow(clippy::too_many_arguments)]
    fn shm_run(
        &self,
        t: &crate::shm::ShmTeam,
        op: &'static str,
        spec: &Spec,
        mode: &Mode,
        e: Entry,
        src: Area,
        dst: Area,
    ) -> Result<()> {
        // Under SINGLE a segment address is the same offset on every rank.
        let single = mode.addressing == amnet_sync_modes::Addressing::Single;
        let seg = |a: Addr| match a {
            Addr::Seg(off) if single => Some(off),
            _ => None,
        };
        let mine = crate::shm::Mine {
            src,
            dst,
            dst_seg: seg(e.dst),
            src_seg: seg(e.src),
        };
        crate::shm::run(&self.sh, t, op, spec, mode, mine)
    }

    fn start(&self, team: &Team, c: Call<'_>) -> Result<CollHandle> {
        self.start_keyed(team, c, &mut None).map(|(h, _)| h)
    }

    /// Initiate `c` on `team`: its handle, and the key of the group (aggregate) it closes.
    /// `entered` is set once the collective holds the call's areas (to its handle, if it got
    /// one, and its group): an error after that point leaves it in flight.
    pub(crate) fn start_keyed(
        &self,
        team: &Team,
        c: Call<'_>,
        entered: &mut Option<(Option<u64>, Key)>,
    ) -> Result<(CollHandle, Key)> {
        self.rules(c.op)?;
        if let Some(r) = self.shm_repeat(team, &c) {
            r?;
            return Ok((CollHandle::INVALID, Key { team: 0, seq: 0 }));
        }
        let sh = &self.sh;
        // Read before the selector chooses: a memo made from this choice is stale once the
        // forced choices change.
        let shm_key = self.shm_key(team, &c);
        self.check_team(c.op, team)?;
        let geo = team.geo();
        self.no_barrier_pending(c.op)?;
        let multi_address = matches!(c.addrs, Addrs::Many { .. });
        let mode = Mode::parse(
            c.flags,
            CallShape {
                blocking: c.blocking,
                multi_address,
                multi_image: self.multi_image(),
            },
        )
        .map_err(|e| usage(c.op, e.to_string()))?;
        let image_space = multi_address || mode.all_threads;
        let np = if image_space {
            geo.nimages() as usize
        } else {
            geo.size() as usize
        };
        let root = match c.root_image {
            None => 0,
            Some(r) if r >= geo.nimages() => {
                return Err(usage(
                    c.op,
                    format!(
                        "root image {r} does not exist (the team has {} images)",
                        geo.nimages()
                    ),
                ))
            }
            Some(r) if image_space => r as usize,
            Some(r) => geo.image_trank(r) as usize,
        };
        // Uniform blocks stay one number until a schedule needs the list (`Spec::uniform`).
        let (counts, uniform) = match c.counts {
            Counts::Uniform(0) => {
                return Err(usage(
                    c.op,
                    "nbytes is 0; a collective moves at least one byte",
                ))
            }
            Counts::Uniform(n) => (Vec::new(), Some(n)),
            Counts::PerPart(v) => {
                if v.len() != np {
                    return Err(usage(
                        c.op,
                        format!(
                            "counts has {} entries; the call has {np} participants",
                            v.len()
                        ),
                    ));
                }
                (v.to_vec(), None)
            }
            Counts::Matrix(v) => {
                if v.len() != np * np {
                    return Err(usage(
                        c.op,
                        format!(
                            "counts has {} entries; exchange_v takes {np} x {np} = {} (row = source)",
                            v.len(),
                            np * np
                        ),
                    ));
                }
                (v.to_vec(), None)
            }
            Counts::None => (Vec::new(), None),
        };
        let red = c.red.unwrap_or(Red::NONE);
        if c.red.is_some() {
            self.check_red(c.op, c.kind, &red, np, c.call_fn.as_ref())?;
        }
        let entries = self.entries(geo, c.op, &c.addrs, &mode, image_space, np)?;
        let info = CallInfo {
            kind: c.kind,
            mask: self.call_mask(geo, &c, &mode, image_space, &red, &entries),
            bytes: match c.kind {
                Kind::Broadcast
                | Kind::Scatter
                | Kind::Gather
                | Kind::GatherAll
                | Kind::Exchange => {
                    uniform.unwrap_or_else(|| counts.iter().copied().max().unwrap_or(0))
                }
                _ => red.es.saturating_mul(red.n),
            },
            ranks: geo.size(),
        };
        let choice = sh.selector.choose(&info)?;
        let alg = choice.alg;
        let spec = Spec {
            kind: c.kind,
            np,
            root,
            counts,
            uniform,
            es: red.es,
            n: red.n,
            src_lay: red.src_lay,
            dst_lay: red.dst_lay,
            func: red.func,
            arg: red.arg,
            alg: alg.name,
            params: choice.params,
            call_fn: c.call_fn.clone(),
        };
        if alg.imp == Imp::Hier {
            // Blocking, one rank participant (the algorithm's bits): done on return.
            let e = entries
                .first()
                .copied()
                .ok_or_else(|| usage(c.op, "a call without a participant on this rank"))?;
            let (_, src, dst) = self.resolve(c.op, &spec, &mode, e)?;
            self.hier_run(team, c.op, &spec, &mode, src, dst)?;
            return Ok((
                CollHandle::INVALID,
                Key {
                    team: geo.id,
                    seq: 0,
                },
            ));
        }
        if alg.imp == Imp::Shm {
            // Blocking, one rank participant or an `m` form's local images (the algorithm's
            // bits): done on return.
            let t = self
                .shm_team(geo)
                .ok_or_else(|| usage(c.op, "the smp-native algorithm on a team without one"))?;
            if image_space {
                let mut mine = Vec::with_capacity(entries.len());
                for e in entries.iter() {
                    let (_, src, dst) = self.resolve(c.op, &spec, &mode, *e)?;
                    mine.push(crate::shm::Mine {
                        src,
                        dst,
                        dst_seg: None,
                        src_seg: None,
                    });
                }
                let run = |mine: &[crate::shm::Mine]| {
                    let imgs = crate::shm::images::Images {
                        first: &geo.img_first,
                        mine,
                    };
                    crate::shm::images::run_images(&self.sh, t, c.op, &spec, &mode, imgs)
                };
                if mode.all_threads {
                    // Every image thread calls with its own areas: the rank's last to arrive
                    // runs the call for all of them.
                    let one = match mine.as_slice() {
                        [one] => *one,
                        _ => return Err(usage(c.op, "an ALL_THREADS call with several areas")),
                    };
                    let li = (self.image - sh.img_first[sh.rank as usize]) as usize;
                    let k = geo.images[geo.me as usize] as usize;
                    let key = crate::shm::images::JoinKey {
                        kind: spec.kind,
                        flags: c.flags,
                        n: spec.uniform,
                        root: spec.root,
                        es: spec.es,
                        count: spec.n,
                        func: spec.func,
                    };
                    t.join
                        .meet(&self.sh, c.op, (li, k), one, key, |call| match call {
                            Ok(mine) => run(mine),
                            Err(detail) => {
                                crate::shm::images::fail_images(&self.sh, t, c.op, detail)
                            }
                        })?;
                } else {
                    run(&mine)?;
                }
                return Ok((
                    CollHandle::INVALID,
                    Key {
                        team: geo.id,
                        seq: 0,
                    },
                ));
            }
            let e = entries
                .first()
                .copied()
                .ok_or_else(|| usage(c.op, "a call without a participant on this rank"))?;
            let (_, src, dst) = self.resolve(c.op, &spec, &mode, e)?;
            self.shm_run(t, c.op, &spec, &mode, e, src, dst)?;
            if let Some(key) = shm_key {
                let (src_len, dst_len) = self.lens(&spec, e.p);
                let in_place_src = e.src == Addr::InPlace && src_len > 0;
                let in_place_scatter =
                    spec.kind == Kind::Scatter && e.dst == Addr::InPlace && dst_len > 0;
                let plain = !(in_place_src || in_place_scatter);
                SHM_MEMO.with(|m| {
                    // Borrowed by a repeated call further up this thread's stack: no memo.
                    if let Ok(mut m) = m.try_borrow_mut() {
                        let small = crate::shm::Small::of(&spec, &mode, t).filter(|_| plain);
                        *m = Some(ShmMemo {
                            key,
                            mode,
                            spec,
                            p: e.p,
                            lens: plain.then_some((src_len, dst_len)),
                            small,
                        });
                    }
                });
            }
            return Ok((
                CollHandle::INVALID,
                Key {
                    team: geo.id,
                    seq: 0,
                },
            ));
        }
        let mut spec = spec;
        if let Some(n) = spec.uniform.take() {
            spec.counts = match c.kind {
                Kind::Exchange => vec![n; np * np],
                Kind::Broadcast => vec![n],
                _ => vec![n; np],
            };
        }
        let spec = Arc::new(spec);
        let mut areas = Vec::with_capacity(entries.len());
        for e in entries.iter() {
            areas.push(self.resolve(c.op, &spec, &mode, *e)?);
        }
        // Direct puts (`Shared::direct_puts`): the segment offset of this rank's destination,
        // the same on every rank under SINGLE; blocks for other ranks are put there.
        let single = mode.addressing == amnet_sync_modes::Addressing::Single;
        let mut direct_kind =
            single && !image_space && alg.imp == Imp::Flat && sh.direct_puts(&spec, &mode);
        if direct_kind && crate::engine::direct_any_size(&mode) {
            if let Some(why) = direct_in_place(&spec, &entries) {
                return Err(usage(c.op, why));
            }
        } else if direct_kind {
            // Large blocks under the other modes: an in-place address (the same on every rank
            // under SINGLE) keeps the data in Medium messages instead.
            direct_kind = !matches!(
                c.addrs,
                Addrs::One { src, dst } if src == Addr::InPlace || dst == Addr::InPlace
            );
        }
        let seg_dst = match c.addrs {
            Addrs::One {
                dst: Addr::Seg(off),
                ..
            } if direct_kind => Some(off),
            _ => None,
        };
        let sched = match alg.imp {
            Imp::Flat | Imp::Signal | Imp::Shm | Imp::Hier => None,
            Imp::Sched => Some(crate::algs::generate(alg, &spec, geo.me, &areas)?),
        };
        // Sequence number, group, entry.
        let mut st = sh.lock();
        let local_img = (self.image - sh.img_first[sh.rank as usize]) as usize;
        let local_images = sh.images[sh.rank as usize];
        let ts = st.teams.entry(geo.id).or_insert_with(|| TeamSeq {
            next_seq: 1,
            at_calls: vec![0; local_images as usize],
            geo: Some(geo.clone()),
            ..TeamSeq::default()
        });
        let seq = if mode.all_threads {
            // The k-th ALL_THREADS call of every local image on the team is the same
            // collective: the first image to make it numbers it, the others join that number.
            let k = ts.at_calls[local_img];
            ts.at_calls[local_img] += 1;
            let idx = usize::try_from(k - ts.at_base).unwrap_or(usize::MAX);
            let s = if let Some(e) = ts.at_open.get_mut(idx) {
                e.1 += 1;
                e.0
            } else {
                let s = ts.next_seq;
                ts.next_seq += 1;
                ts.at_open.push_back((s, 1));
                s
            };
            while ts.at_open.front().is_some_and(|e| e.1 >= local_images) {
                ts.at_open.pop_front();
                ts.at_base += 1;
            }
            s
        } else {
            // A representative call stands for every local image (the client serializes it
            // against every other initiation on the team).
            let s = ts.next_seq;
            ts.next_seq += 1;
            s
        };
        let caller = if mode.all_threads {
            self.image
        } else {
            u32::MAX
        };
        let group_seq = *ts.agg_open.get(&caller).unwrap_or(&seq);
        let was_open = !ts.agg_open.is_empty();
        if mode.aggregate {
            ts.agg_open.insert(caller, group_seq);
        } else {
            ts.agg_open.remove(&caller);
        }
        match (was_open, ts.agg_open.is_empty()) {
            (false, false) => {
                sh.agg_teams
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            (true, true) => {
                sh.agg_teams
                    .fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
            }
            _ => {}
        }
        if !mode.aggregate {
            ts.unsynced += 1;
        }
        let key = Key { team: geo.id, seq };
        let group = Key {
            team: geo.id,
            seq: group_seq,
        };
        let first_on_rank = st.ops.get(&key).is_none_or(|o| o.spec.is_none());
        let team_image = self.team_image(geo);
        // Checked mode: the agreed arguments, then how many collectives this rank numbered on
        // each of its other teams (the ordering rule).
        let sig = (sh.check && first_on_rank).then(|| {
            let mut v = crate::engine::signature(&spec, &mode);
            v.extend(st.order_vector(geo.id));
            v
        });
        let local_mismatch = sh.enter(
            &mut st,
            geo,
            key,
            group,
            &spec,
            mode,
            image_space,
            team_image,
            &areas,
            sched,
            sig.clone(),
            seg_dst,
        );
        let handle = if mode.aggregate {
            None
        } else {
            let h = st.next_handle;
            st.next_handle += 1;
            st.handles.insert(
                h,
                HandleRec {
                    group,
                    thread: std::thread::current().id(),
                },
            );
            if let Some(g) = st.groups.get_mut(&group) {
                g.handles += 1;
            }
            st.unsynced += 1;
            Some(h)
        };
        *entered = Some((handle, group));
        drop(st);
        if let Some(sig) = sig {
            sh.send_signature(geo, key, &sig)?;
        }
        if let Some(detail) = local_mismatch {
            sh.send_mismatch(geo, key, &detail)?;
        }
        // Poll too: a rank that initiates many collectives without syncing must still take
        // in its peers' data, or every one of them stays in flight (and `advance` revisits
        // them all on each initiation). A small call's own sends leave before the poll (they
        // are its latency); a large one takes in what already arrived first, so that its
        // sends do not fill the rings while the peers' data waits in them (2 ranks: 8 B
        // reduce_to_all 2.2 µs against 3.0 poll-first, 1 MiB 194 against 245 advance-first).
        if info.bytes < crate::engine::DIRECT_MIN_BYTES {
            sh.advance()?;
            if sh.ep.poll()? > 0 {
                sh.advance()?;
            }
        } else {
            sh.ep.poll()?;
            sh.advance()?;
        }
        match handle {
            None => Ok((CollHandle::INVALID, group)),
            Some(h) => {
                if self.try_finish(h)? {
                    Ok((CollHandle::INVALID, group))
                } else {
                    Ok((CollHandle(h), group))
                }
            }
        }
    }

    fn check_red(
        &self,
        op: &'static str,
        kind: Kind,
        r: &Red,
        np: usize,
        call_fn: Option<&CallFn>,
    ) -> Result<()> {
        if r.es == 0 {
            return Err(usage(op, "elem_size is 0"));
        }
        if r.n == 0 {
            return Err(usage(
                op,
                if kind.is_vector() {
                    "count is 0; a vector reduction combines at least one element"
                } else {
                    "elem_count is 0; a reduction needs at least one element"
                },
            ));
        }
        let known = match call_fn {
            Some(f) => f.index() == r.func,
            None => r.func < self.sh.fns.len(),
        };
        if !known {
            return Err(usage(
                op,
                format!(
                    "function {} is not in the table ({} entries: {} built-in, then the client's)",
                    r.func,
                    self.sh.fns.len(),
                    N_BUILTIN
                ),
            ));
        }
        if r.func < N_BUILTIN {
            let (o, t) = builtin::decode(r.func);
            let want = builtin::builtin_elem_size(o, t);
            if r.es != want {
                return Err(usage(
                    op,
                    format!(
                        "built-in function {} works on {want}-byte elements; elem_size is {}",
                        builtin::describe(r.func).unwrap_or_default(),
                        r.es
                    ),
                ));
            }
        }
        for (what, l) in [("source", r.src_lay), ("destination", r.dst_lay)] {
            if l.blk == 0 && l.off >= np {
                return Err(usage(
                    op,
                    format!(
                        "{what} layout is indefinite on participant {} but the call has {np}",
                        l.off
                    ),
                ));
            }
        }
        Ok(())
    }

    /// The participants this call enters, with their addresses.
    fn entries(
        &self,
        geo: &Geo,
        op: &'static str,
        addrs: &Addrs<'_>,
        mode: &Mode,
        image_space: bool,
        np: usize,
    ) -> Result<Entries> {
        let me = geo.me as usize;
        let first = geo.img_first[me] as usize;
        let count = geo.images[me] as usize;
        let my_image = self.team_image(geo) as usize;
        let single = mode.addressing == amnet_sync_modes::Addressing::Single;
        let pick = |l: AddrList<'_>, p: usize, local: usize, what: &str| -> Result<Addr> {
            match l {
                AddrList::One(a) => Ok(a),
                AddrList::List(v) => {
                    let (want, i) = if single { (np, p) } else { (count, local) };
                    if v.len() != want {
                        return Err(usage(
                            op,
                            format!(
                                "{what} list has {} addresses; {} needs {want} ({})",
                                v.len(),
                                if single { "SINGLE" } else { "LOCAL" },
                                if single {
                                    "one per image"
                                } else {
                                    "one per image of this rank"
                                }
                            ),
                        ));
                    }
                    Ok(v[i])
                }
            }
        };
        match addrs {
            Addrs::One { src, dst } => {
                let p = if image_space { my_image } else { me };
                Ok(Entries::One([Entry {
                    p,
                    src: *src,
                    dst: *dst,
                }]))
            }
            Addrs::Many { src, dst } => {
                let ps: Vec<usize> = if mode.all_threads {
                    vec![my_image]
                } else {
                    (first..first + count).collect()
                };
                ps.into_iter()
                    .map(|p| {
                        Ok(Entry {
                            p,
                            src: pick(*src, p, p - first, "source")?,
                            dst: pick(*dst, p, p - first, "destination")?,
                        })
                    })
                    .collect::<Result<Vec<_>>>()
                    .map(Entries::Many)
            }
        }
    }

    /// The lengths of participant `p`'s source and destination in a call of `spec`.
    fn lens(&self, spec: &Spec, p: usize) -> (usize, usize) {
        match spec.kind {
            Kind::Reduce | Kind::ReduceAll => (
                area_elems(spec.src_lay, spec.n, spec.np, p) * spec.es,
                if spec.has_dst(p) || spec.kind == Kind::ReduceAll {
                    spec.es
                } else {
                    0
                },
            ),
            Kind::Prefix | Kind::ExclusivePrefix => (
                area_elems(spec.src_lay, spec.n, spec.np, p) * spec.es,
                area_elems(spec.dst_lay, spec.n, spec.np, p) * spec.es,
            ),
            k if k.is_vector() => {
                let len = spec.n * spec.es;
                (len, if spec.has_dst(p) { len } else { 0 })
            }
            _ => (spec.src_len(p), spec.dst_len(p)),
        }
    }

    fn resolve(
        &self,
        op: &'static str,
        spec: &Spec,
        mode: &Mode,
        e: Entry,
    ) -> Result<(usize, Area, Area)> {
        let (src_len, dst_len) = self.lens(spec, e.p);
        if spec.kind == Kind::Scatter && e.dst == Addr::InPlace && dst_len > 0 {
            // In-place scatter: the root's own block stays where it is in the source.
            if e.p != spec.root {
                return Err(usage(
                    op,
                    format!(
                        "an in-place destination is only for the scatter root ({}), not \
                         participant {}",
                        spec.root, e.p
                    ),
                ));
            }
            let src = self.area(op, "source", e.src, src_len, mode.src_in_segment)?;
            let off = spec.scatter_block_offset(e.p);
            return Ok((
                e.p,
                src,
                Area {
                    ptr: src.ptr + off,
                    len: dst_len,
                },
            ));
        }
        let dst = self.area(op, "destination", e.dst, dst_len, mode.dst_in_segment)?;
        let src = if src_len > 0 && e.src == Addr::InPlace {
            let off = spec
                .in_place_offset(e.p)
                .filter(|_| dst_len > 0)
                .ok_or_else(|| {
                    usage(
                        op,
                        format!(
                            "an in-place source for participant {} has no destination to come from",
                            e.p
                        ),
                    )
                })?;
            if off.checked_add(src_len).is_none_or(|end| end > dst_len) {
                return Err(usage(
                    op,
                    format!(
                        "an in-place source needs {src_len} bytes from offset {off} but the \
                         destination of participant {} holds {dst_len}",
                        e.p
                    ),
                ));
            }
            Area {
                ptr: dst.ptr + off,
                len: src_len,
            }
        } else {
            self.area(op, "source", e.src, src_len, mode.src_in_segment)?
        };
        Ok((e.p, src, dst))
    }

    /// The area of `len` bytes at `a`, checked; the empty area where `len` is 0 (the address
    /// is not looked at).
    #[inline]
    fn area(
        &self,
        op: &'static str,
        what: &str,
        a: Addr,
        len: usize,
        in_seg: bool,
    ) -> Result<Area> {
        if len == 0 {
            return Ok(Area::default());
        }
        let (base, seg_len) = self.sh.seg;
        match a {
            Addr::Seg(off) => match off.checked_add(len as u64) {
                Some(end) if end <= seg_len as u64 => Ok(Area {
                    ptr: base + usize::try_from(off).unwrap_or(usize::MAX),
                    len,
                }),
                _ => Err(self.area_error(op, what, a, len, in_seg)),
            },
            Addr::Ptr(p)
                if p.addr() != 0
                    && (!in_seg
                        || (p.addr() >= base
                            && p.addr()
                                .checked_add(len)
                                .is_some_and(|e| e <= base + seg_len))) =>
            {
                Ok(Area { ptr: p.addr(), len })
            }
            _ => Err(self.area_error(op, what, a, len, in_seg)),
        }
    }

    /// Why `area` refused `a` (kept out of its path).
    #[cold]
    #[inline(never)]
    fn area_error(&self, op: &'static str, what: &str, a: Addr, len: usize, in_seg: bool) -> Error {
        let (_, seg_len) = self.sh.seg;
        match a {
            Addr::Seg(off) => Error::OutOfSegment {
                rank: self.sh.rank,
                offset: off,
                len,
                seg_len,
            },
            Addr::Ptr(p) if p.addr() == 0 => usage(op, format!("the {what} address is null")),
            Addr::Ptr(p) => {
                debug_assert!(in_seg);
                usage(
                    op,
                    format!(
                        "{what} {len} bytes at {:#x} are not inside the segment, but the flags \
                         assert {}_IN_SEGMENT",
                        p.addr(),
                        if what == "source" { "SRC" } else { "DST" }
                    ),
                )
            }
            Addr::InPlace => usage(op, format!("InPlace is not a valid {what} address here")),
        }
    }

    // ----- syncs -----------------------------------------------------------------------

    /// Complete `h` if its group is done: Ok(true) when it was (and the handle is now dead).
    fn try_finish(&self, h: u64) -> Result<bool> {
        self.sh.finish_handle(h)
    }

    fn rules(&self, op: &'static str) -> Result<()> {
        if let Some(h) = self.sh.ep.current_handler() {
            return Err(Error::InHandler { op, handler: h });
        }
        Ok(())
    }

    /// Non-blocking sync: Ok(true) once the collective completed to the extent its OUT mode
    /// promises (the handle is dead then). The invalid handle syncs at once.
    pub fn try_sync(&self, h: CollHandle) -> Result<bool> {
        self.rules("try_sync")?;
        if h.is_invalid() {
            return Ok(true);
        }
        self.sh.ep.poll()?;
        self.sh.advance()?;
        self.try_finish(h.0)
    }

    fn wait(&self, op: &'static str, done: impl FnMut() -> Result<bool>) -> Result<()> {
        self.rules(op)?;
        self.sh.wait_loop(done, || self.sh.report())
    }

    /// Blocking sync.
    pub fn wait_sync(&self, h: CollHandle) -> Result<()> {
        if h.is_invalid() {
            return self.rules("wait_sync");
        }
        self.wait("wait_sync", || self.try_finish(h.0))
    }

    /// Non-blocking sync of every handle: completed ones become invalid; Ok(true) when all
    /// are.
    pub fn try_sync_all(&self, hs: &mut [CollHandle]) -> Result<bool> {
        self.rules("try_sync_all")?;
        self.sh.ep.poll()?;
        self.sh.advance()?;
        self.finish_all(hs)
    }

    fn finish_all(&self, hs: &mut [CollHandle]) -> Result<bool> {
        let mut all = true;
        for h in hs.iter_mut() {
            if h.is_invalid() {
                continue;
            }
            match self.try_finish(h.0) {
                Ok(true) => *h = CollHandle::INVALID,
                Ok(false) => all = false,
                Err(e) => {
                    // The handle is dead either way.
                    *h = CollHandle::INVALID;
                    return Err(e);
                }
            }
        }
        Ok(all)
    }

    /// Blocking sync of every handle (all become invalid).
    pub fn wait_sync_all(&self, hs: &mut [CollHandle]) -> Result<()> {
        // Each round stops at the first handle still in flight: it has to complete anyway, and
        // a full scan per poll would cost handles x polls with 65,535 outstanding. `next`
        // skips the completed prefix.
        let mut next = 0;
        self.wait("wait_sync_all", || {
            while next < hs.len() {
                let h = hs[next];
                if !h.is_invalid() {
                    match self.try_finish(h.0) {
                        Ok(true) => {}
                        Ok(false) => return Ok(false),
                        Err(e) => {
                            // The handle is dead either way.
                            hs[next] = CollHandle::INVALID;
                            return Err(e);
                        }
                    }
                    hs[next] = CollHandle::INVALID;
                }
                next += 1;
            }
            Ok(true)
        })
    }

    fn finish_some(&self, hs: &mut [CollHandle]) -> Result<bool> {
        let mut any = false;
        let mut live = false;
        for h in hs.iter_mut() {
            if h.is_invalid() {
                continue;
            }
            live = true;
            match self.try_finish(h.0) {
                Ok(true) => {
                    *h = CollHandle::INVALID;
                    any = true;
                }
                Ok(false) => {}
                Err(e) => {
                    *h = CollHandle::INVALID;
                    return Err(e);
                }
            }
        }
        Ok(any || !live)
    }

    /// Non-blocking sync of at least one handle: completed ones become invalid; Ok(true) when
    /// one completed (or none was live).
    pub fn try_sync_some(&self, hs: &mut [CollHandle]) -> Result<bool> {
        self.rules("try_sync_some")?;
        self.sh.ep.poll()?;
        self.sh.advance()?;
        self.finish_some(hs)
    }

    /// Blocking sync of at least one handle.
    pub fn wait_sync_some(&self, hs: &mut [CollHandle]) -> Result<()> {
        self.wait("wait_sync_some", || self.finish_some(hs))
    }

    pub(crate) fn run(&self, team: &Team, mut c: Call<'_>, blocking: bool) -> Result<CollHandle> {
        c.blocking = blocking;
        let h = self.start(team, c)?;
        // The invalid handle (a call done on return, the repeat of an smp-native one among
        // them) has nothing to sync: `start` checked the handler rule.
        if blocking && !h.is_invalid() {
            self.wait_sync(h)?;
            return Ok(CollHandle::INVALID);
        }
        Ok(h)
    }
}

/// The UPC/GASNet-shaped operations: every `both!(doc, nb, blocking, (args), call)` entry is
/// a non-blocking and a blocking method of [`Collectives`], implemented for [`Coll`].
macro_rules! raw_collectives {
    ($(both!($(#[$doc:meta])* $nb:ident, $blk:ident, ($($a:ident : $t:ty),*), $call:expr);)*) => {
        /// The collectives in the UPC/GASNet shape, implemented for [`Coll`]: raw [`Addr`]esses
        /// (segment offsets, or pointers that only the unsafe [`Addr::ptr`] makes), byte
        /// counts, `u32` flag words (`flags`), and a [`CollHandle`] to sync with
        /// [`Coll::try_sync`], [`Coll::wait_sync`] and their `_all`/`_some` forms. Bring it
        /// into scope with `use amnet::coll::raw::Collectives;`.
        ///
        /// Every method takes addresses and is `unsafe`: the library writes through them from
        /// any thread of the process until the collective is synced, and nothing ties that
        /// to a borrow. The safe form is the typed API ([`Comm`](crate::Comm)).
        ///
        /// # Safety
        ///
        /// For every method, with addresses `a` among its arguments (single or in lists):
        /// - an `Addr::Ptr` address is valid for reads (a source) or writes (a destination)
        ///   of every byte the call addresses through it, from the call until a sync of the
        ///   collective succeeds on this rank (the blocking form: until it returns `Ok`), and
        ///   the caller does not otherwise access those bytes in between; when no sync
        ///   succeeds (an error, `Error::Hang`), the memory stays valid and untouched for the
        ///   rest of the process (leak it);
        /// - `Addr::Seg` addresses have no requirement beyond the call's own checks: the
        ///   library checks them against the segment, and the segment is shared memory that
        ///   remote puts write too.
        ///
        /// The trait is sealed: [`Coll`] is its only implementation.
        #[allow(clippy::too_many_arguments)]
        pub trait Collectives: sealed::Sealed {
            $(
                $(#[$doc])*
                /// Non-blocking: returns a handle to sync.
                ///
                /// # Safety
                /// See the trait's: every `Addr::Ptr` address stays valid and untouched until
                /// the handle's sync succeeds.
                unsafe fn $nb(&self, team: &Team, $($a: $t),*) -> Result<CollHandle>;
                $(#[$doc])*
                /// Blocking.
                ///
                /// # Safety
                /// See the trait's: every `Addr::Ptr` address stays valid and untouched until
                /// the call returns `Ok` (for good when it fails).
                unsafe fn $blk(&self, team: &Team, $($a: $t),*) -> Result<()>;
            )*
        }

        #[allow(clippy::too_many_arguments)]
        impl Collectives for Coll {
            $(
                unsafe fn $nb(&self, team: &Team, $($a: $t),*) -> Result<CollHandle> {
                    let c: Call<'_> = $call;
                    self.run(team, c, false)
                }
                unsafe fn $blk(&self, team: &Team, $($a: $t),*) -> Result<()> {
                    let c: Call<'_> = $call;
                    self.run(team, c, true).map(|_| ())
                }
            )*
        }
    };
}

mod sealed {
    /// Seals [`Collectives`](super::Collectives): only [`Coll`](super::Coll) implements it.
    pub trait Sealed {}

    impl Sealed for super::Coll {}
}

pub(crate) fn call<'a>(
    op: &'static str,
    kind: Kind,
    root: Option<u32>,
    counts: Counts<'a>,
    addrs: Addrs<'a>,
    flags: u32,
) -> Call<'a> {
    Call {
        op,
        kind,
        root_image: root,
        counts,
        red: None,
        addrs,
        flags,
        blocking: false,
        call_fn: None,
    }
}

pub(crate) fn one<'a>(src: Addr, dst: Addr) -> Addrs<'a> {
    Addrs::One { src, dst }
}

fn many<'a>(src: AddrList<'a>, dst: AddrList<'a>) -> Addrs<'a> {
    Addrs::Many { src, dst }
}

pub(crate) fn red_call<'a>(
    op: &'static str,
    kind: Kind,
    root: Option<u32>,
    addrs: Addrs<'a>,
    r: Red,
    flags: u32,
) -> Call<'a> {
    Call {
        op,
        kind,
        root_image: root,
        counts: Counts::None,
        red: Some(r),
        addrs,
        flags,
        blocking: false,
        call_fn: None,
    }
}

fn red(es: usize, n: usize, src_lay: Layout, dst_lay: Layout, func: usize, arg: u32) -> Red {
    Red {
        es,
        n,
        src_lay,
        dst_lay,
        func,
        arg,
    }
}

/// A vector reduction's arguments: `count` elements per participant, no layout.
pub(crate) fn vred(es: usize, count: usize, func: usize, arg: u32) -> Red {
    let lay = Layout::indefinite(0);
    red(es, count, lay, lay, func, arg)
}

raw_collectives! {
both!(
    /// Broadcast `nbytes` from the root image's `src` to every participant's `dst`.
    broadcast_nb, broadcast, (dst: Addr, root: u32, src: Addr, nbytes: usize, flags: u32),
    call("broadcast", Kind::Broadcast, Some(root), Counts::Uniform(nbytes), one(src, dst), flags)
);
both!(
    /// Broadcast to a list of destinations (one per image).
    broadcastm_nb, broadcastm, (dst: &[Addr], root: u32, src: Addr, nbytes: usize, flags: u32),
    call("broadcastm", Kind::Broadcast, Some(root), Counts::Uniform(nbytes), many(AddrList::One(src), AddrList::List(dst)), flags)
);
both!(
    /// Scatter: block `i` (of `nbytes`) of the root's `src` to participant `i`'s `dst`.
    scatter_nb, scatter, (dst: Addr, root: u32, src: Addr, nbytes: usize, flags: u32),
    call("scatter", Kind::Scatter, Some(root), Counts::Uniform(nbytes), one(src, dst), flags)
);
both!(
    /// Scatter to a list of destinations.
    scatterm_nb, scatterm, (dst: &[Addr], root: u32, src: Addr, nbytes: usize, flags: u32),
    call("scatterm", Kind::Scatter, Some(root), Counts::Uniform(nbytes), many(AddrList::One(src), AddrList::List(dst)), flags)
);
both!(
    /// Gather: participant `i`'s `nbytes` to block `i` of the root's `dst`.
    gather_nb, gather, (root: u32, dst: Addr, src: Addr, nbytes: usize, flags: u32),
    call("gather", Kind::Gather, Some(root), Counts::Uniform(nbytes), one(src, dst), flags)
);
both!(
    /// Gather from a list of sources.
    gatherm_nb, gatherm, (root: u32, dst: Addr, src: &[Addr], nbytes: usize, flags: u32),
    call("gatherm", Kind::Gather, Some(root), Counts::Uniform(nbytes), many(AddrList::List(src), AddrList::One(dst)), flags)
);
both!(
    /// Gather to every participant.
    gather_all_nb, gather_all, (dst: Addr, src: Addr, nbytes: usize, flags: u32),
    call("gather_all", Kind::GatherAll, None, Counts::Uniform(nbytes), one(src, dst), flags)
);
both!(
    /// Gather to every participant, with address lists.
    gather_allm_nb, gather_allm, (dst: &[Addr], src: &[Addr], nbytes: usize, flags: u32),
    call("gather_allm", Kind::GatherAll, None, Counts::Uniform(nbytes), many(AddrList::List(src), AddrList::List(dst)), flags)
);
both!(
    /// All-to-all: block `j` of participant `i`'s `src` to block `i` of participant `j`'s `dst`.
    exchange_nb, exchange, (dst: Addr, src: Addr, nbytes: usize, flags: u32),
    call("exchange", Kind::Exchange, None, Counts::Uniform(nbytes), one(src, dst), flags)
);
both!(
    /// All-to-all with address lists.
    exchangem_nb, exchangem, (dst: &[Addr], src: &[Addr], nbytes: usize, flags: u32),
    call("exchangem", Kind::Exchange, None, Counts::Uniform(nbytes), many(AddrList::List(src), AddrList::List(dst)), flags)
);
both!(
    /// Scatter with `counts[i]` bytes for participant `i` (blocks packed in order in `src`).
    scatter_v_nb, scatter_v, (dst: Addr, root: u32, src: Addr, counts: &[usize], flags: u32),
    call("scatter_v", Kind::Scatter, Some(root), Counts::PerPart(counts), one(src, dst), flags)
);
both!(
    /// scatter_v with address lists.
    scatter_vm_nb, scatter_vm, (dst: &[Addr], root: u32, src: Addr, counts: &[usize], flags: u32),
    call("scatter_vm", Kind::Scatter, Some(root), Counts::PerPart(counts), many(AddrList::One(src), AddrList::List(dst)), flags)
);
both!(
    /// Gather `counts[i]` bytes from participant `i` (packed in order in the root's `dst`).
    gather_v_nb, gather_v, (root: u32, dst: Addr, src: Addr, counts: &[usize], flags: u32),
    call("gather_v", Kind::Gather, Some(root), Counts::PerPart(counts), one(src, dst), flags)
);
both!(
    /// gather_v with address lists.
    gather_vm_nb, gather_vm, (root: u32, dst: Addr, src: &[Addr], counts: &[usize], flags: u32),
    call("gather_vm", Kind::Gather, Some(root), Counts::PerPart(counts), many(AddrList::List(src), AddrList::One(dst)), flags)
);
both!(
    /// gather_all with `counts[i]` bytes from participant `i`.
    gather_all_v_nb, gather_all_v, (dst: Addr, src: Addr, counts: &[usize], flags: u32),
    call("gather_all_v", Kind::GatherAll, None, Counts::PerPart(counts), one(src, dst), flags)
);
both!(
    /// gather_all_v with address lists.
    gather_all_vm_nb, gather_all_vm, (dst: &[Addr], src: &[Addr], counts: &[usize], flags: u32),
    call("gather_all_vm", Kind::GatherAll, None, Counts::PerPart(counts), many(AddrList::List(src), AddrList::List(dst)), flags)
);
both!(
    /// All-to-all with `counts[i * P + j]` bytes from participant `i` to `j` (P participants;
    /// each source packs its blocks in destination order, each destination in source order).
    exchange_v_nb, exchange_v, (dst: Addr, src: Addr, counts: &[usize], flags: u32),
    call("exchange_v", Kind::Exchange, None, Counts::Matrix(counts), one(src, dst), flags)
);
both!(
    /// exchange_v with address lists.
    exchange_vm_nb, exchange_vm, (dst: &[Addr], src: &[Addr], counts: &[usize], flags: u32),
    call("exchange_vm", Kind::Exchange, None, Counts::Matrix(counts), many(AddrList::List(src), AddrList::List(dst)), flags)
);



both!(
    /// Reduce the `elem_count` elements of the distributed array (`src`, `src_lay`) with
    /// function `func` to one element at the root image's `dst`.
    reduce_nb, reduce, (root: u32, dst: Addr, src: Addr, src_lay: Layout, elem_size: usize, elem_count: usize, func: usize, arg: u32, flags: u32),
    red_call("reduce", Kind::Reduce, Some(root), one(src, dst), red(elem_size, elem_count, src_lay, src_lay, func, arg), flags)
);
both!(
    /// reduce with a list of sources.
    reducem_nb, reducem, (root: u32, dst: Addr, src: &[Addr], src_lay: Layout, elem_size: usize, elem_count: usize, func: usize, arg: u32, flags: u32),
    red_call("reducem", Kind::Reduce, Some(root), many(AddrList::List(src), AddrList::One(dst)), red(elem_size, elem_count, src_lay, src_lay, func, arg), flags)
);
both!(
    /// Reduce to one element at every participant's `dst`.
    reduce_to_all_nb, reduce_to_all, (dst: Addr, src: Addr, src_lay: Layout, elem_size: usize, elem_count: usize, func: usize, arg: u32, flags: u32),
    red_call("reduce_to_all", Kind::ReduceAll, None, one(src, dst), red(elem_size, elem_count, src_lay, src_lay, func, arg), flags)
);
both!(
    /// reduce_to_all with address lists.
    reduce_to_allm_nb, reduce_to_allm, (dst: &[Addr], src: &[Addr], src_lay: Layout, elem_size: usize, elem_count: usize, func: usize, arg: u32, flags: u32),
    red_call("reduce_to_allm", Kind::ReduceAll, None, many(AddrList::List(src), AddrList::List(dst)), red(elem_size, elem_count, src_lay, src_lay, func, arg), flags)
);
both!(
    /// Inclusive prefix reduction: element `k` of the destination array (`dst`, `dst_lay`)
    /// gets the combination of source elements `0..=k` (`src`, `src_lay`; the layouts may
    /// differ).
    prefix_reduce_nb, prefix_reduce, (dst: Addr, dst_lay: Layout, src: Addr, src_lay: Layout, elem_size: usize, elem_count: usize, func: usize, arg: u32, flags: u32),
    red_call("prefix_reduce", Kind::Prefix, None, one(src, dst), red(elem_size, elem_count, src_lay, dst_lay, func, arg), flags)
);
both!(
    /// prefix_reduce with address lists.
    prefix_reducem_nb, prefix_reducem, (dst: &[Addr], dst_lay: Layout, src: &[Addr], src_lay: Layout, elem_size: usize, elem_count: usize, func: usize, arg: u32, flags: u32),
    red_call("prefix_reducem", Kind::Prefix, None, many(AddrList::List(src), AddrList::List(dst)), red(elem_size, elem_count, src_lay, dst_lay, func, arg), flags)
);
both!(
    /// Exclusive prefix reduction: element `k > 0` gets source elements `0..k`; element 0 is
    /// left unchanged.
    exclusive_prefix_reduce_nb, exclusive_prefix_reduce, (dst: Addr, dst_lay: Layout, src: Addr, src_lay: Layout, elem_size: usize, elem_count: usize, func: usize, arg: u32, flags: u32),
    red_call("exclusive_prefix_reduce", Kind::ExclusivePrefix, None, one(src, dst), red(elem_size, elem_count, src_lay, dst_lay, func, arg), flags)
);
both!(
    /// exclusive_prefix_reduce with address lists.
    exclusive_prefix_reducem_nb, exclusive_prefix_reducem, (dst: &[Addr], dst_lay: Layout, src: &[Addr], src_lay: Layout, elem_size: usize, elem_count: usize, func: usize, arg: u32, flags: u32),
    red_call("exclusive_prefix_reducem", Kind::ExclusivePrefix, None, many(AddrList::List(src), AddrList::List(dst)), red(elem_size, elem_count, src_lay, dst_lay, func, arg), flags)
);


both!(
    /// Vector reduction (MPI's reduce): every participant's `src` holds `count` elements of
    /// `elem_size` bytes; element `i` of the root image's `dst` gets `src_0[i] ∘ src_1[i] ∘ …`,
    /// combined in participant order with function `func`. `src = Addr::InPlace` at the root
    /// takes its operands from its `dst`; other participants have no destination.
    reduce_elems_nb, reduce_elems, (root: u32, dst: Addr, src: Addr, elem_size: usize, count: usize, func: usize, arg: u32, flags: u32),
    red_call("reduce_elems", Kind::ReduceElems, Some(root), one(src, dst), vred(elem_size, count, func, arg), flags)
);
both!(
    /// Vector reduction to every participant (MPI's allreduce): element `i` of every
    /// participant's `dst` gets `src_0[i] ∘ src_1[i] ∘ …` in participant order.
    /// `src = Addr::InPlace` takes a participant's operands from its `dst`.
    reduce_elems_to_all_nb, reduce_elems_to_all, (dst: Addr, src: Addr, elem_size: usize, count: usize, func: usize, arg: u32, flags: u32),
    red_call("reduce_elems_to_all", Kind::ReduceElemsAll, None, one(src, dst), vred(elem_size, count, func, arg), flags)
);
both!(
    /// Inclusive vector scan (MPI's scan): element `i` of participant `p`'s `dst` gets
    /// `src_0[i] ∘ … ∘ src_p[i]`. `src = Addr::InPlace` takes the operands from `dst`.
    scan_elems_nb, scan_elems, (dst: Addr, src: Addr, elem_size: usize, count: usize, func: usize, arg: u32, flags: u32),
    red_call("scan_elems", Kind::ScanElems, None, one(src, dst), vred(elem_size, count, func, arg), flags)
);
both!(
    /// Exclusive vector scan (MPI's exscan): element `i` of participant `p > 0`'s `dst` gets
    /// `src_0[i] ∘ … ∘ src_{p-1}[i]`; participant 0's `dst` is left unchanged.
    /// `src = Addr::InPlace` takes the operands from `dst`.
    exclusive_scan_elems_nb, exclusive_scan_elems, (dst: Addr, src: Addr, elem_size: usize, count: usize, func: usize, arg: u32, flags: u32),
    red_call("exclusive_scan_elems", Kind::ExclusiveScanElems, None, one(src, dst), vred(elem_size, count, func, arg), flags)
);
}

// ----- typed API ---------------------------------------------------------------------------

impl Coll {
    /// Flags for the typed calls: the caller's IN/OUT bits, LOCAL addressing, and
    /// ALL_THREADS when ranks host several images (then every image's thread calls).
    fn typed_flags(&self, sync: u32) -> u32 {
        use amnet_sync_modes::flags::*;
        // The call returns this rank's result: OUT_NOSYNC would let it return before the
        // result is there, so it gives OUT_MYSYNC's guarantee.
        let sync = if sync & (OUT_NOSYNC | OUT_MYSYNC | OUT_ALLSYNC) == OUT_NOSYNC {
            sync & !OUT_NOSYNC | OUT_MYSYNC
        } else {
            sync
        };
        let mut f = sync | LOCAL;
        if self.multi_image() {
            f |= ALL_THREADS;
        }
        f
    }

    fn typed<T: Copy>(
        &self,
        kind: Kind,
        op: RedOp,
        ty: crate::builtin::ElemType,
        root: Option<u32>,
        value: T,
        sync: u32,
    ) -> Result<T> {
        let func = builtin::builtin_index(op, ty).ok_or_else(|| {
            usage(
                "typed reduction",
                format!("{op:?} is not defined for {ty:?}"),
            )
        })?;
        let es = std::mem::size_of::<T>();
        let flags = self.typed_flags(sync);
        let np = if self.multi_image() {
            self.sh.nimages() as usize
        } else {
            self.sh.size as usize
        };
        let mut bufs = InFlight::new(vec![value, value]);
        let (s, d) = {
            let v = bufs.get_mut();
            (v.as_mut_ptr(), v[1..].as_mut_ptr())
        };
        // SAFETY: both elements live on the heap in `bufs`, which outlives the collective:
        // freed once the blocking call returned Ok (the collective completed here, nothing
        // writes them later), leaked when it failed (it may still be in flight).
        let (s, d) = unsafe { (Addr::ptr(s.cast()), Addr::ptr(d.cast())) };
        let lay = Layout::block_cyclic(1, 0);
        let r = red(es, np, lay, lay, func, 0);
        let c = red_call(kind.name(), kind, root, one(s, d), r, flags);
        let r = self.run(&self.sh.world.clone(), c, true);
        Ok(bufs.finish(r)?[1])
    }

    /// Every participant contributes `value`; every participant gets the reduction (in
    /// participant order).
    ///
    /// Participants are ranks, or, when some rank hosts several images, images: then every
    /// image thread of every rank must call (`ALL_THREADS`), and a call by one representative
    /// thread waits for the others (until the watchdog's `Error::Hang`, if set). For one call
    /// per rank in such a job, use the ranks view:
    /// `coll.team(coll.world()).reduce_to_all(&[value], &mut out, op)` ([`Comm`](crate::Comm)).
    /// The same holds for [`Coll::reduce_typed`], [`Coll::prefix_reduce_typed`] and
    /// [`Coll::reduce_to_all_loc`].
    pub fn reduce_to_all_typed<T: Elem>(&self, op: RedOp, value: T, sync: u32) -> Result<T> {
        self.check_typed::<T>(op)?;
        self.typed(Kind::ReduceAll, op, T::TYPE, None, value, sync)
    }

    /// Every participant contributes `value`; the root image gets the reduction (`Some` on
    /// the root's caller only). Participants as in [`Coll::reduce_to_all_typed`].
    pub fn reduce_typed<T: Elem>(
        &self,
        root: u32,
        op: RedOp,
        value: T,
        sync: u32,
    ) -> Result<Option<T>> {
        self.check_typed::<T>(op)?;
        let v = self.typed(Kind::Reduce, op, T::TYPE, Some(root), value, sync)?;
        let mine = if self.multi_image() {
            root == self.image
        } else {
            self.image_rank(root)? == self.sh.rank
        };
        Ok(mine.then_some(v))
    }

    /// Inclusive (or exclusive) scan of one value per participant; the exclusive scan gives
    /// participant 0 its own value back. Participants as in [`Coll::reduce_to_all_typed`].
    pub fn prefix_reduce_typed<T: Elem>(
        &self,
        op: RedOp,
        value: T,
        exclusive: bool,
        sync: u32,
    ) -> Result<T> {
        self.check_typed::<T>(op)?;
        let k = if exclusive {
            Kind::ExclusivePrefix
        } else {
            Kind::Prefix
        };
        self.typed(k, op, T::TYPE, None, value, sync)
    }

    /// MINLOC/MAXLOC to every participant: the extreme value and, on ties, the smallest
    /// `loc`. Participants as in [`Coll::reduce_to_all_typed`].
    pub fn reduce_to_all_loc<T: Elem>(
        &self,
        op: RedOp,
        value: T,
        loc: u64,
        sync: u32,
    ) -> Result<Loc<T>> {
        if !matches!(op, RedOp::MinLoc | RedOp::MaxLoc) {
            return Err(usage(
                "reduce_to_all_loc",
                format!("{op:?} is not MinLoc or MaxLoc"),
            ));
        }
        self.typed(Kind::ReduceAll, op, T::TYPE, None, Loc { value, loc }, sync)
    }

    fn check_typed<T: Elem>(&self, op: RedOp) -> Result<()> {
        if matches!(op, RedOp::MinLoc | RedOp::MaxLoc) {
            return Err(usage(
                "typed reduction",
                "use reduce_to_all_loc for MinLoc and MaxLoc",
            ));
        }
        if !builtin::builtin_supported(op, T::TYPE) {
            return Err(usage(
                "typed reduction",
                format!("{op:?} is not defined for {:?}", T::TYPE),
            ));
        }
        Ok(())
    }
}
