//! Property tests of the collectives against the sequential oracle ([`crate::coll_oracle`]).
//!
//! Every caller derives the same call sequence from a seed; each fills its own sources and
//! destinations deterministically from (seed, call, participant), runs the call (blocking,
//! non-blocking with syncs in random order, or aggregated), then checks its own destinations
//! (and guard bytes after them) against the oracle. The same generator drives the one-image
//! suite tests and the multi-image nested jobs ([`crate::coll_images`]).

use amnet::coll::raw::Collectives;
use amnet::coll::{
    builtin, fn_flags, Addr, Coll, CollHandle, ElemType, FnEntry, Layout, RedOp, Team,
};
use amnet::sync_modes::flags as f;
use amnet::{Endpoint, Error};

use crate::coll_oracle::{diff, ODesc, OFn, OKind, OLay};

/// Bytes after each destination area that must stay untouched.
pub const GUARD: usize = 16;
/// Operations in flight at once, each in its own slot of the segment.
pub const SLOTS: usize = 4;
/// Segment bytes per slot (sources in the first half, destinations in the second).
pub const SLOT: usize = 5 << 20;

/// A deterministic PRNG (splitmix64).
#[derive(Debug, Clone)]
pub struct Rng(pub u64);

impl Rng {
    /// Next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// Uniform in `0..n` (n > 0).
    #[allow(clippy::cast_possible_truncation)] // reduced modulo n
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
    /// True with probability `p` percent.
    pub fn pct(&mut self, p: usize) -> bool {
        self.below(100) < p
    }
    /// One of `v`.
    pub fn pick<T: Copy>(&mut self, v: &[T]) -> T {
        v[self.below(v.len())]
    }
}

/// `len` pattern bytes for (seed, call, participant, which).
pub fn pattern(seed: u64, call: usize, p: usize, which: u64, len: usize) -> Vec<u8> {
    let mut r = Rng(seed ^ ((call as u64) << 20) ^ ((p as u64) << 44) ^ (which << 60));
    let mut v = Vec::with_capacity(len + 8);
    while v.len() < len {
        v.extend_from_slice(&r.next_u64().to_ne_bytes());
    }
    v.truncate(len);
    v
}

/// The client function table of every collective test: entry 0 is the affine composition.
pub fn fn_table() -> Vec<FnEntry> {
    vec![FnEntry::new(
        fn_flags::NONCOMM,
        |res: &mut [u8],
         rc: usize,
         left: &[u8],
         lc: usize,
         right: &[u8],
         es: usize,
         _fl: u32,
         _arg: u32| {
            if es != 16 {
                return;
            }
            let mut acc: Option<[u8; 16]> = None;
            for i in 0..lc {
                let x = &left[i * 16..i * 16 + 16];
                acc = Some(match acc {
                    None => x.try_into().unwrap_or([0; 16]),
                    Some(a) => crate::coll_oracle::affine(&a, x),
                });
            }
            for i in 0..rc {
                let x = &right[i * 16..i * 16 + 16];
                let a = match acc {
                    None => x.try_into().unwrap_or([0; 16]),
                    Some(a) => crate::coll_oracle::affine(&a, x),
                };
                res[i * 16..i * 16 + 16].copy_from_slice(&a);
                acc = Some(a);
            }
        },
    )]
}

/// The function-table index of `f`.
pub fn fn_index(f: OFn) -> usize {
    match f {
        OFn::SumU64 => builtin::builtin_index(RedOp::Sum, ElemType::U64).unwrap_or(0),
        OFn::Affine => builtin::N_BUILTIN,
    }
}

/// The job's image layout.
#[derive(Debug, Clone)]
pub struct World {
    /// Images per rank.
    pub images: Vec<u32>,
    /// First image of each rank (len ranks + 1).
    pub first: Vec<usize>,
}

impl World {
    /// From images per rank.
    pub fn new(images: Vec<u32>) -> World {
        let mut first = vec![0usize];
        for &n in &images {
            first.push(first.last().copied().unwrap_or(0) + n as usize);
        }
        World { images, first }
    }
    /// Ranks.
    pub fn ranks(&self) -> usize {
        self.images.len()
    }
    /// Images.
    pub fn nimages(&self) -> usize {
        self.first[self.ranks()]
    }
    /// Whether some rank hosts several images.
    pub fn multi(&self) -> bool {
        self.images.iter().any(|&n| n > 1)
    }
    /// Rank of image `i`.
    pub fn rank_of(&self, i: usize) -> usize {
        self.first.partition_point(|&x| x <= i) - 1
    }
    /// Index of image `i` among its rank's images.
    pub fn local(&self, i: usize) -> usize {
        i - self.first[self.rank_of(i)]
    }
    /// Bytes between the areas of a rank's images inside a slot half.
    pub fn stride(&self) -> usize {
        let m = self.images.iter().copied().max().unwrap_or(1) as usize;
        SLOT / 2 / m
    }
}

/// Which call shape.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Form {
    /// Single-address, one participant per rank.
    Single,
    /// Multiple-address (`m`), one participant per image, called by one thread per rank.
    Multi,
    /// Single-address with ALL_THREADS: every image's thread calls.
    AllThreads,
}

/// One generated call.
#[derive(Debug, Clone)]
pub struct GCall {
    /// Index in the sequence.
    pub idx: usize,
    /// Oracle description (in the call's participant space).
    pub desc: ODesc,
    /// Shape.
    pub form: Form,
    /// Variable-count form.
    pub vform: bool,
    /// LOCAL (else SINGLE) addressing.
    pub local: bool,
    /// Local Vec buffers instead of segment addresses (LOCAL only).
    pub ptr: bool,
    /// IN and OUT flags.
    pub sync: u32,
    /// Add SRC/DST_IN_SEGMENT.
    pub seg_assert: bool,
    /// The root image as passed to the API.
    pub root_image: u32,
    /// Segment slot.
    pub slot: usize,
    /// Blocking call.
    pub blocking: bool,
    /// AGGREGATE member.
    pub aggregate: bool,
}

/// A unit of work: calls issued together, then synced and checked.
#[derive(Debug, Clone)]
pub struct Unit {
    /// The calls, in issue order.
    pub calls: Vec<GCall>,
    /// Every call is ALL_THREADS (else none is).
    pub all_threads: bool,
}

const IN: [u32; 3] = [f::IN_NOSYNC, f::IN_MYSYNC, f::IN_ALLSYNC];
const OUT: [u32; 3] = [f::OUT_NOSYNC, f::OUT_MYSYNC, f::OUT_ALLSYNC];

fn gen_size(g: &mut Rng) -> usize {
    match g.below(100) {
        0..=59 => 1 + g.below(256),
        60..=87 => 1 + g.below(4096),
        88..=98 => 1 + g.below(64 << 10),
        _ => 1 + g.below(1 << 20),
    }
}

fn gen_lay(g: &mut Rng, np: usize) -> OLay {
    let blk = g.below(5);
    if blk == 0 {
        OLay {
            blk: 0,
            off: g.below(np),
        }
    } else {
        OLay {
            blk,
            off: g.below(3 * np * blk + 1),
        }
    }
}

fn gen_call(g: &mut Rng, w: &World, idx: usize, form: Form, slot: usize) -> Option<GCall> {
    let kinds: &[OKind] = &[
        OKind::Broadcast,
        OKind::Scatter,
        OKind::Gather,
        OKind::GatherAll,
        OKind::Exchange,
        OKind::Reduce,
        OKind::ReduceAll,
        OKind::Prefix,
        OKind::ExPrefix,
        // The vector reductions have no m forms: the last four.
        OKind::ReduceElems,
        OKind::ReduceElemsAll,
        OKind::ScanElems,
        OKind::ExScanElems,
    ];
    let kind = if form == Form::Multi {
        g.pick(&kinds[..kinds.len() - 4])
    } else {
        g.pick(kinds)
    };
    let image_space = form != Form::Single;
    let np = if image_space { w.nimages() } else { w.ranks() };
    let root_image = g.below(w.nimages());
    let root = if image_space {
        root_image
    } else {
        w.rank_of(root_image)
    };
    let vform = !kind.is_red() && kind != OKind::Broadcast && g.pct(35);
    let in_place_form = matches!(
        kind,
        OKind::Broadcast
            | OKind::Gather
            | OKind::GatherAll
            | OKind::Exchange
            | OKind::Prefix
            | OKind::ExPrefix
    );
    let mut in_place = ((g.pct(20) && in_place_form) || (kind.is_vec() && g.pct(25)))
        && !(kind == OKind::Exchange && vform);
    // LOCAL single-address calls need one image per rank or ALL_THREADS; several images per
    // rank with ALL_THREADS must be LOCAL (a single-valued address would be shared).
    let local = match form {
        Form::Single => !w.multi() && g.pct(50),
        Form::Multi => g.pct(50),
        Form::AllThreads => w.multi() || g.pct(50),
    };
    if in_place && matches!(kind, OKind::Gather | OKind::ReduceElems) && !local {
        in_place = false;
    }
    let ptr = local && form != Form::Multi && g.pct(50);
    let ptr = ptr || (local && form == Form::Multi && g.pct(30));
    let func = if g.pct(50) { OFn::SumU64 } else { OFn::Affine };
    let stride = w.stride();
    let cap = stride - GUARD - 64;
    let mut counts = Vec::new();
    let (mut n, mut src_lay, mut dst_lay) = (0, OLay { blk: 1, off: 0 }, OLay { blk: 1, off: 0 });
    if kind.is_vec() {
        // Elements per participant; now and then more than a medium message holds.
        n = 1 + match g.below(100) {
            0..=59 => g.below(24),
            60..=89 => g.below(300),
            _ => g.below(6000),
        };
    } else if kind.is_red() {
        n = 1 + if g.pct(80) { g.below(24) } else { g.below(300) };
        src_lay = gen_lay(g, np);
        dst_lay = if matches!(kind, OKind::Prefix | OKind::ExPrefix) && !in_place {
            gen_lay(g, np)
        } else {
            src_lay
        };
    } else {
        let mut nb = gen_size(g);
        let per = match kind {
            OKind::Broadcast => 1,
            _ => np,
        };
        nb = nb.min(cap / per).max(1);
        counts = match (kind, vform) {
            (OKind::Broadcast, _) => vec![nb],
            (OKind::Exchange, false) => vec![nb; np * np],
            (OKind::Exchange, true) => (0..np * np)
                .map(|_| if g.pct(20) { 0 } else { g.below(nb + 1) })
                .collect(),
            (_, false) => vec![nb; np],
            (_, true) => (0..np)
                .map(|_| if g.pct(20) { 0 } else { g.below(nb + 1) })
                .collect(),
        };
        if counts.iter().all(|&c| c == 0) && g.pct(50) {
            counts[0] = 1;
        }
    }
    let desc = ODesc {
        kind,
        np,
        root,
        counts,
        func,
        n,
        src_lay,
        dst_lay,
        in_place,
    };
    if (0..np).any(|p| desc.src_len(p).max(desc.dst_len(p)) > cap) {
        return None;
    }
    let sync = g.pick(&IN) | g.pick(&OUT);
    // An in-place exchange source cannot go with direct puts (IN_NOSYNC, OUT_NOSYNC or
    // OUT_ALLSYNC, SINGLE segment destinations): the initiation refuses it.
    let mut desc = desc;
    if desc.in_place
        && kind == OKind::Exchange
        && sync & f::IN_NOSYNC != 0
        && sync & f::OUT_MYSYNC == 0
        && form == Form::Single
        && !local
        && !ptr
    {
        desc.in_place = false;
    }
    Some(GCall {
        idx,
        desc,
        form,
        vform,
        local,
        ptr,
        sync,
        seg_assert: !ptr && g.pct(20),
        #[allow(clippy::cast_possible_truncation)] // images fit in u32
        root_image: root_image as u32,
        slot,
        blocking: false,
        aggregate: false,
    })
}

/// The sequence of units for `seed`: about `ncalls` calls. `forms` lists the shapes to use.
pub fn gen_units(seed: u64, w: &World, ncalls: usize, forms: &[Form]) -> Vec<Unit> {
    let mut g = Rng(seed);
    let mut units = Vec::new();
    let mut idx = 0;
    while idx < ncalls {
        let form = g.pick(forms);
        let all_threads = form == Form::AllThreads;
        let shape = g.below(10);
        let mut calls = Vec::new();
        let count = match shape {
            0..=3 => 1,
            4..=7 => 1 + g.below(SLOTS),
            _ => 2 + g.below(SLOTS - 1),
        };
        for slot in 0..count {
            // Within a unit, calls share the all-threads class; ALL_THREADS units keep their form,
            // the others mix single- and multiple-address calls.
            let fm = if all_threads {
                Form::AllThreads
            } else if forms.contains(&Form::Multi) && forms.contains(&Form::Single) {
                g.pick(&[Form::Single, Form::Multi])
            } else {
                form
            };
            let mut c = loop {
                if let Some(c) = gen_call(&mut g, w, idx, fm, slot) {
                    break c;
                }
            };
            idx += 1;
            match shape {
                0..=3 => c.blocking = true,
                4..=7 => {}
                _ => {
                    // An aggregate: every call but the last is a member; the last closes it.
                    if slot + 1 < count {
                        c.aggregate = true;
                    } else {
                        c.blocking = g.pct(50);
                    }
                }
            }
            calls.push(c);
        }
        // A blocking call made again, like it but for its data (the repeat of an smp-native
        // call takes a path of its own, spec/coll.md §3c).
        let again = (shape <= 3 && g.pct(40)).then(|| {
            let mut c = calls[0].clone();
            c.idx = idx;
            c
        });
        units.push(Unit { calls, all_threads });
        if let Some(c) = again {
            idx += 1;
            units.push(Unit {
                calls: vec![c],
                all_threads,
            });
        }
    }
    units
}

/// Blocking calls whose every contribution fits a header line of the host scratch (104 bytes
/// at most from any participant's source, spec/coll.md §3c), each made three times in a row
/// in one unit, with fresh data in its own slot: the latency-bound calls that the smp-native
/// algorithms run on a path of their own, first through the initiation, then as its repeat
/// (no unit barrier between them). About `ncalls` calls.
pub fn gen_small_repeats(seed: u64, w: &World, ncalls: usize) -> Vec<Unit> {
    let mut g = Rng(seed);
    let mut units = Vec::new();
    let mut idx = 0;
    while idx < ncalls {
        let Some(mut c) = gen_call(&mut g, w, idx, Form::Single, 0) else {
            continue;
        };
        let small = !c.vform && (0..c.desc.np).all(|p| c.desc.src_len(p) <= 104);
        if !small {
            continue;
        }
        c.blocking = true;
        let mut calls = Vec::new();
        for slot in 0..3 {
            c.idx = idx;
            c.slot = slot;
            idx += 1;
            calls.push(c.clone());
        }
        units.push(Unit {
            calls,
            all_threads: false,
        });
    }
    units
}

/// One participant this caller handles.
struct Mine {
    p: usize,
    src_off: u64,
    dst_off: u64,
    src_buf: Option<Vec<u8>>,
    dst_buf: Option<Vec<u8>>,
}

/// A call issued and not yet checked.
pub struct Issued {
    call: GCall,
    mine: Vec<Mine>,
    /// Its handle (INVALID when blocking or aggregated).
    pub handle: CollHandle,
}

/// Who is calling: the endpoint, the Coll of the calling image, and the image (None for the
/// representative of the rank in one-image-per-rank or non-ALL_THREADS calls).
pub struct Caller<'a> {
    /// Endpoint.
    pub ep: &'a Endpoint,
    /// The calling image's Coll.
    pub coll: &'a Coll,
    /// The team the calls run on (`w` describes it: its ranks' images, in team order).
    pub team: &'a Team,
    /// Layout.
    pub w: &'a World,
    /// Seed of the sequence.
    pub seed: u64,
}

fn ctx(c: &GCall, seed: u64) -> String {
    let d = &c.desc;
    format!(
        "seed {seed} call #{} {:?} form {:?}{}{}{} {} np {} root {} counts {:?} n {} func {:?} lay {:?}/{:?} in_place {} flags {} (blocking {}, aggregate {})",
        c.idx,
        d.kind,
        c.form,
        if c.vform { " v" } else { "" },
        if c.local { " LOCAL" } else { " SINGLE" },
        if c.ptr { " ptr" } else { "" },
        "",
        d.np,
        d.root,
        if d.counts.len() > 16 { d.counts[..16].to_vec() } else { d.counts.clone() },
        d.n,
        d.func,
        d.src_lay,
        d.dst_lay,
        d.in_place,
        amnet::sync_modes::names(c.sync),
        c.blocking,
        c.aggregate
    )
}

fn lay(l: OLay) -> Layout {
    Layout {
        blk: l.blk,
        off: l.off,
    }
}

impl Caller<'_> {
    fn rank(&self) -> usize {
        self.team.rank() as usize
    }

    /// Participants this caller enters for `c`.
    fn parts(&self, c: &GCall) -> Vec<usize> {
        match c.form {
            Form::Single => vec![self.rank()],
            Form::Multi => (self.w.first[self.rank()]..self.w.first[self.rank() + 1]).collect(),
            Form::AllThreads => vec![self.coll.my_image() as usize],
        }
    }

    fn li(&self, c: &GCall, p: usize) -> usize {
        if c.form == Form::Single {
            0
        } else {
            self.w.local(p)
        }
    }

    fn offs(&self, c: &GCall, li: usize) -> (u64, u64) {
        let base = c.slot * SLOT + li * self.w.stride();
        (base as u64, (base + SLOT / 2) as u64)
    }

    /// Fill this caller's areas for `c`.
    fn fill(&self, c: &GCall) -> Result<Vec<Mine>, String> {
        let d = &c.desc;
        let mut mine = Vec::new();
        for p in self.parts(c) {
            let (so, dof) = self.offs(c, self.li(c, p));
            let src = pattern(self.seed, c.idx, p, 0, d.src_len(p));
            let dst = pattern(self.seed, c.idx, p, 1, d.dst_len(p) + GUARD);
            let (src_buf, dst_buf) = if c.ptr {
                (Some(src), Some(dst))
            } else {
                self.ep
                    .write_local(so, &src)
                    .and_then(|()| self.ep.write_local(dof, &dst))
                    .map_err(|e| format!("write_local: {e}"))?;
                (None, None)
            };
            mine.push(Mine {
                p,
                src_off: so,
                dst_off: dof,
                src_buf,
                dst_buf,
            });
        }
        Ok(mine)
    }

    /// Fill this caller's areas and issue `c`.
    pub fn issue(&self, c: &GCall) -> Result<Issued, String> {
        let mine = self.fill(c)?;
        self.start(c, mine)
    }

    /// Issue `c` on areas `fill` prepared.
    fn start(&self, c: &GCall, mut mine: Vec<Mine>) -> Result<Issued, String> {
        let d = &c.desc;
        let mut flags = c.sync | if c.local { f::LOCAL } else { f::SINGLE };
        if c.form == Form::AllThreads {
            flags |= f::ALL_THREADS;
        }
        if c.aggregate {
            flags |= f::AGGREGATE;
        }
        if c.seg_assert {
            flags |= f::SRC_IN_SEGMENT | f::DST_IN_SEGMENT;
        }
        // Rooted operations with one destination read in place only at the root.
        let in_place_for = |p: usize| {
            d.in_place
                && !(matches!(d.kind, OKind::Gather | OKind::Reduce | OKind::ReduceElems)
                    && p != d.root)
        };
        // Addresses of my participants.
        let src_of = |m: &mut Mine| -> Addr {
            if in_place_for(m.p) {
                return Addr::InPlace;
            }
            match &mut m.src_buf {
                // SAFETY: the Vec lives in `Issued` until the call is synced and checked, and
                // nothing touches it in between.
                Some(b) => unsafe {
                    Addr::ptr(if b.is_empty() {
                        std::ptr::NonNull::dangling().as_ptr()
                    } else {
                        b.as_mut_ptr()
                    })
                },
                None => Addr::Seg(m.src_off),
            }
        };
        let dst_of = |m: &mut Mine| -> Addr {
            match &mut m.dst_buf {
                // SAFETY: as for the sources.
                Some(b) => unsafe { Addr::ptr(b.as_mut_ptr()) },
                None => Addr::Seg(m.dst_off),
            }
        };
        let mut srcs: Vec<Addr> = mine.iter_mut().map(src_of).collect();
        let mut dsts: Vec<Addr> = mine.iter_mut().map(dst_of).collect();
        if c.form == Form::Multi && !c.local {
            // SINGLE lists: every image's segment address, the same on every rank.
            srcs = (0..d.np)
                .map(|i| {
                    if in_place_for(i) {
                        Addr::InPlace
                    } else {
                        Addr::Seg(self.offs(c, self.w.local(i)).0)
                    }
                })
                .collect();
            dsts = (0..d.np)
                .map(|i| Addr::Seg(self.offs(c, self.w.local(i)).1))
                .collect();
        }
        // The root's address for `m` calls that take one (src of broadcastm/scatterm, dst of
        // gatherm/reducem).
        let root_src;
        let root_dst;
        if c.form == Form::Multi {
            let r = d.root;
            let li = self.w.local(r);
            if c.local {
                let pos = mine.iter().position(|m| m.p == r);
                root_src = pos.map_or(Addr::Seg(0), |i| srcs[i]);
                root_dst = pos.map_or(Addr::Seg(0), |i| dsts[i]);
            } else {
                root_src = if in_place_for(r) {
                    Addr::InPlace
                } else {
                    Addr::Seg(self.offs(c, li).0)
                };
                root_dst = Addr::Seg(self.offs(c, li).1);
            }
        } else {
            root_src = srcs[0];
            root_dst = dsts[0];
        }
        let co = self.coll;
        let t = self.team;
        let nb = d.counts.first().copied().unwrap_or(0);
        let es = d.func.es();
        let fi = fn_index(d.func);
        let (sl, dl) = (lay(d.src_lay), lay(d.dst_lay));
        let root = c.root_image;
        macro_rules! go {
            ($nb:ident, $b:ident, $($a:expr),*) => {
                if c.blocking {
                    // SAFETY: pointer addresses point into `mine`'s Vecs, which the `Issued`
                    // of the call keeps, untouched, until it is synced and checked (they are
                    // leaked when the call or its sync fails); the rest are segment offsets.
                    unsafe { co.$b(t, $($a),*) }.map(|()| CollHandle::INVALID)
                } else {
                    // SAFETY: as for the blocking form.
                    unsafe { co.$nb(t, $($a),*) }
                }
            };
        }
        let multi = c.form == Form::Multi;
        let r: Result<CollHandle, Error> = match (d.kind, multi, c.vform) {
            (OKind::Broadcast, false, _) => {
                go!(broadcast_nb, broadcast, dsts[0], root, srcs[0], nb, flags)
            }
            (OKind::Broadcast, true, _) => {
                go!(broadcastm_nb, broadcastm, &dsts, root, root_src, nb, flags)
            }
            (OKind::Scatter, false, false) => {
                go!(scatter_nb, scatter, dsts[0], root, srcs[0], nb, flags)
            }
            (OKind::Scatter, true, false) => {
                go!(scatterm_nb, scatterm, &dsts, root, root_src, nb, flags)
            }
            (OKind::Scatter, false, true) => go!(
                scatter_v_nb,
                scatter_v,
                dsts[0],
                root,
                srcs[0],
                &d.counts,
                flags
            ),
            (OKind::Scatter, true, true) => go!(
                scatter_vm_nb,
                scatter_vm,
                &dsts,
                root,
                root_src,
                &d.counts,
                flags
            ),
            (OKind::Gather, false, false) => {
                go!(gather_nb, gather, root, dsts[0], srcs[0], nb, flags)
            }
            (OKind::Gather, true, false) => {
                go!(gatherm_nb, gatherm, root, root_dst, &srcs, nb, flags)
            }
            (OKind::Gather, false, true) => go!(
                gather_v_nb,
                gather_v,
                root,
                dsts[0],
                srcs[0],
                &d.counts,
                flags
            ),
            (OKind::Gather, true, true) => go!(
                gather_vm_nb,
                gather_vm,
                root,
                root_dst,
                &srcs,
                &d.counts,
                flags
            ),
            (OKind::GatherAll, false, false) => {
                go!(gather_all_nb, gather_all, dsts[0], srcs[0], nb, flags)
            }
            (OKind::GatherAll, true, false) => {
                go!(gather_allm_nb, gather_allm, &dsts, &srcs, nb, flags)
            }
            (OKind::GatherAll, false, true) => go!(
                gather_all_v_nb,
                gather_all_v,
                dsts[0],
                srcs[0],
                &d.counts,
                flags
            ),
            (OKind::GatherAll, true, true) => go!(
                gather_all_vm_nb,
                gather_all_vm,
                &dsts,
                &srcs,
                &d.counts,
                flags
            ),
            (OKind::Exchange, false, false) => {
                go!(exchange_nb, exchange, dsts[0], srcs[0], nb, flags)
            }
            (OKind::Exchange, true, false) => go!(exchangem_nb, exchangem, &dsts, &srcs, nb, flags),
            (OKind::Exchange, false, true) => go!(
                exchange_v_nb,
                exchange_v,
                dsts[0],
                srcs[0],
                &d.counts,
                flags
            ),
            (OKind::Exchange, true, true) => {
                go!(exchange_vm_nb, exchange_vm, &dsts, &srcs, &d.counts, flags)
            }
            (OKind::Reduce, false, _) => {
                go!(reduce_nb, reduce, root, dsts[0], srcs[0], sl, es, d.n, fi, 0, flags)
            }
            (OKind::Reduce, true, _) => {
                go!(reducem_nb, reducem, root, root_dst, &srcs, sl, es, d.n, fi, 0, flags)
            }
            (OKind::ReduceAll, false, _) => go!(
                reduce_to_all_nb,
                reduce_to_all,
                dsts[0],
                srcs[0],
                sl,
                es,
                d.n,
                fi,
                0,
                flags
            ),
            (OKind::ReduceAll, true, _) => go!(
                reduce_to_allm_nb,
                reduce_to_allm,
                &dsts,
                &srcs,
                sl,
                es,
                d.n,
                fi,
                0,
                flags
            ),
            (OKind::Prefix, false, _) => go!(
                prefix_reduce_nb,
                prefix_reduce,
                dsts[0],
                dl,
                srcs[0],
                sl,
                es,
                d.n,
                fi,
                0,
                flags
            ),
            (OKind::Prefix, true, _) => go!(
                prefix_reducem_nb,
                prefix_reducem,
                &dsts,
                dl,
                &srcs,
                sl,
                es,
                d.n,
                fi,
                0,
                flags
            ),
            (OKind::ExPrefix, false, _) => go!(
                exclusive_prefix_reduce_nb,
                exclusive_prefix_reduce,
                dsts[0],
                dl,
                srcs[0],
                sl,
                es,
                d.n,
                fi,
                0,
                flags
            ),
            (OKind::ExPrefix, true, _) => go!(
                exclusive_prefix_reducem_nb,
                exclusive_prefix_reducem,
                &dsts,
                dl,
                &srcs,
                sl,
                es,
                d.n,
                fi,
                0,
                flags
            ),
            (OKind::ReduceElems, false, _) => go!(
                reduce_elems_nb,
                reduce_elems,
                root,
                dsts[0],
                srcs[0],
                es,
                d.n,
                fi,
                0,
                flags
            ),
            (OKind::ReduceElemsAll, false, _) => go!(
                reduce_elems_to_all_nb,
                reduce_elems_to_all,
                dsts[0],
                srcs[0],
                es,
                d.n,
                fi,
                0,
                flags
            ),
            (OKind::ScanElems, false, _) => {
                go!(
                    scan_elems_nb,
                    scan_elems,
                    dsts[0],
                    srcs[0],
                    es,
                    d.n,
                    fi,
                    0,
                    flags
                )
            }
            (OKind::ExScanElems, false, _) => go!(
                exclusive_scan_elems_nb,
                exclusive_scan_elems,
                dsts[0],
                srcs[0],
                es,
                d.n,
                fi,
                0,
                flags
            ),
            (k, true, _) => {
                return Err(format!(
                    "{}: {k:?} has no multiple-address form",
                    ctx(c, self.seed)
                ))
            }
        };
        let handle = match r {
            Ok(h) => h,
            Err(e) => {
                // The collective may be in flight with these buffers: keep them for good.
                std::mem::forget(mine);
                return Err(format!("{}: issue failed: {e}", ctx(c, self.seed)));
            }
        };
        if (c.blocking || c.aggregate) && !handle.is_invalid() {
            return Err(format!(
                "{}: a blocking or aggregated call returned a live handle",
                ctx(c, self.seed)
            ));
        }
        Ok(Issued {
            call: c.clone(),
            mine,
            handle,
        })
    }

    /// Check this caller's destinations of a synced call against the oracle.
    pub fn check(&self, is: &Issued) -> Result<(), String> {
        let c = &is.call;
        let d = &c.desc;
        let srcs: Vec<Vec<u8>> = (0..d.np)
            .map(|p| pattern(self.seed, c.idx, p, 0, d.src_len(p)))
            .collect();
        let init: Vec<Vec<u8>> = (0..d.np)
            .map(|p| pattern(self.seed, c.idx, p, 1, d.dst_len(p) + GUARD))
            .collect();
        let want = d.expect(&srcs, &init);
        for m in &is.mine {
            let len = d.dst_len(m.p) + GUARD;
            let got = match &m.dst_buf {
                Some(b) => b.clone(),
                None => {
                    let mut b = vec![0u8; len];
                    self.ep
                        .read_local(m.dst_off, &mut b)
                        .map_err(|e| format!("read_local: {e}"))?;
                    b
                }
            };
            diff(
                &format!(
                    "{}: rank {} participant {} destination ({} bytes + {GUARD} guard)",
                    ctx(c, self.seed),
                    self.rank(),
                    m.p,
                    d.dst_len(m.p)
                ),
                &got,
                &want[m.p],
            )?;
            if let Some(s) = &m.src_buf {
                if !d.in_place {
                    diff(
                        &format!(
                            "{}: source of participant {} was modified",
                            ctx(c, self.seed),
                            m.p
                        ),
                        s,
                        &srcs[m.p],
                    )?;
                }
            }
        }
        Ok(())
    }

    /// Sync `handles` in an order and with the calls chosen by `r`.
    pub fn sync(&self, r: &mut Rng, handles: &mut [CollHandle]) -> Result<(), String> {
        let co = self.coll;
        let e = |what: &str, x: Error| format!("seed {}: {what}: {x}", self.seed);
        let mut order: Vec<usize> = (0..handles.len()).collect();
        for i in (1..order.len()).rev() {
            order.swap(i, r.below(i + 1));
        }
        let mut spins = 0u32;
        let mut backoff = || {
            spins += 1;
            if spins < 50 {
                std::thread::yield_now();
            } else {
                std::thread::sleep(std::time::Duration::from_micros(50));
            }
        };
        match r.below(6) {
            0 => {
                for &i in &order {
                    co.wait_sync(handles[i]).map_err(|x| e("wait_sync", x))?;
                    handles[i] = CollHandle::INVALID;
                }
            }
            1 => {
                for &i in &order {
                    while !co.try_sync(handles[i]).map_err(|x| e("try_sync", x))? {
                        backoff();
                    }
                    handles[i] = CollHandle::INVALID;
                }
            }
            2 => co
                .wait_sync_all(handles)
                .map_err(|x| e("wait_sync_all", x))?,
            3 => {
                while !co.try_sync_all(handles).map_err(|x| e("try_sync_all", x))? {
                    backoff();
                }
            }
            4 => {
                while handles.iter().any(|h| !h.is_invalid()) {
                    co.wait_sync_some(handles)
                        .map_err(|x| e("wait_sync_some", x))?;
                }
            }
            _ => {
                while handles.iter().any(|h| !h.is_invalid()) {
                    if !co
                        .try_sync_some(handles)
                        .map_err(|x| e("try_sync_some", x))?
                    {
                        backoff();
                    }
                }
            }
        }
        if let Some(h) = handles.iter().find(|h| !h.is_invalid()) {
            return Err(format!(
                "seed {}: handle {h:?} still live after sync",
                self.seed
            ));
        }
        Ok(())
    }

    /// A barrier of the unit's callers on the team: every image thread for an `ALL_THREADS`
    /// unit, one thread per rank otherwise.
    fn unit_barrier(&self, u: &Unit) -> Result<(), String> {
        let r = if u.all_threads {
            self.coll.barrier_images(self.team)
        } else {
            self.coll.barrier(self.team)
        };
        r.map_err(|e| format!("seed {}: team barrier: {e}", self.seed))
    }

    /// Issue, sync and check one unit. A unit with an `IN_NOSYNC` call fills every caller's
    /// areas and meets in a barrier before any call: `IN_NOSYNC` promises that every area is
    /// ready when the first participant enters, and data may land in a destination before its
    /// owner enters. A unit with an `OUT_NOSYNC` call meets in a barrier after the syncs: its
    /// data is in place only then.
    pub fn run_unit(&self, u: &Unit, r: &mut Rng) -> Result<(), String> {
        let in_nosync = u.calls.iter().any(|c| c.sync & f::IN_NOSYNC != 0);
        let out_nosync = u.calls.iter().any(|c| c.sync & f::OUT_NOSYNC != 0);
        let mut filled = Vec::new();
        if in_nosync {
            for c in &u.calls {
                filled.push(self.fill(c)?);
            }
            self.unit_barrier(u)?;
        }
        let mut filled = filled.into_iter();
        let mut issued = Vec::new();
        for c in &u.calls {
            let started = match filled.next() {
                Some(mine) => self.start(c, mine),
                None => self.issue(c),
            };
            match started {
                Ok(i) => issued.push(i),
                Err(e) => {
                    // Sync what was started, so that this failure does not also fail every
                    // later test of the job (a barrier refuses collectives in flight).
                    let mut hs: Vec<CollHandle> = issued
                        .iter()
                        .map(|i| i.handle)
                        .filter(|h| !h.is_invalid())
                        .collect();
                    if self.coll.wait_sync_all(&mut hs).is_err() {
                        // Some may still be in flight with their buffers: keep them for good.
                        std::mem::forget(issued);
                    }
                    return Err(e);
                }
            }
        }
        let mut hs: Vec<CollHandle> = issued
            .iter()
            .map(|i| i.handle)
            .filter(|h| !h.is_invalid())
            .collect();
        if let Err(e) = self.sync(r, &mut hs) {
            // Some may still be in flight with their buffers: keep them for good.
            std::mem::forget(issued);
            return Err(e);
        }
        if out_nosync {
            self.unit_barrier(u)?;
        }
        for i in &issued {
            self.check(i)?;
        }
        Ok(())
    }
}

/// The seed of a property test: `AMNET_TEST_SEED` when set, else `default`. A value that is not
/// a seed is reported and ignored (the suite runs with the default seed).
pub fn seed(default: u64) -> u64 {
    match amnet::Source::env().count(&amnet::config::vars::TEST_SEED) {
        Ok(s) => s.unwrap_or(default),
        Err(e) => {
            say!("amnet-testsuite: {e}; using seed {default}");
            default
        }
    }
}

/// Run `units` as the one caller of this rank (one image per rank).
pub fn run_units(c: &Caller<'_>, units: &[Unit]) -> Result<(), String> {
    let mut r = Rng(c.seed ^ (u64::from(c.ep.rank()) << 32) ^ 0x5eed);
    for u in units {
        c.run_unit(u, &mut r)?;
    }
    Ok(())
}
