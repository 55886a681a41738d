//! The collectives: init with images and a table of C reduction functions, teams, every
//! operation of the `raw` form (single-address, `m` and `v` forms; blocking when the handle
//! pointer is null, non-blocking otherwise), the syncs, and the team barriers.
//!
//! The calling thread's collectives context is the one its `amnet_coll_init` made: one per
//! process when the call gave no images (any thread may use it then), one per image thread
//! otherwise. A team is a small id into a process-wide table (the world is 1, no team 0); a
//! collective handle is the Rust handle's bits, checked by the syncs.

use std::cell::OnceCell;
use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::{OnceLock, RwLock};

use amnet::coll::raw::{Addr, CollHandle, Collectives, FnEntry, Layout};
use amnet::coll::{Coll, ElemType, RedOp, Team};

use crate::status::{guard, CError, ERR_STATE, NOT_READY, OK};
use crate::{array, ep, required, store};

/// The handle of a non-blocking collective: 0 (the invalid handle) when the call completed
/// before returning. It belongs to the thread that started the collective.
pub type CollHandleId = u64;

/// The collective handle that names no operation: complete from the start.
pub const COLL_HANDLE_INVALID: CollHandleId = 0;

/// A team: an id valid in this process (every rank numbers its teams itself).
pub type TeamId = u32;

/// No team (what a creation call returns to a rank that is not in the new team).
pub const TEAM_NULL: TeamId = 0;
/// The team of every rank of the job.
pub const TEAM_WORLD: TeamId = 1;
/// The color of a rank that joins no team in `amnet_team_split`.
pub const TEAM_NO_COLOR: u32 = u32::MAX;

/// Sync flag: data movement may start before other participants enter.
pub const COLL_IN_NOSYNC: u32 = 1 << 0;
/// Sync flag: data moves in or out of a participant's memory once it entered.
pub const COLL_IN_MYSYNC: u32 = 1 << 1;
/// Sync flag: data moves once every participant entered.
pub const COLL_IN_ALLSYNC: u32 = 1 << 2;
/// Sync flag: a sync may succeed before the data is in place anywhere.
pub const COLL_OUT_NOSYNC: u32 = 1 << 3;
/// Sync flag: a sync succeeds once this participant's part is done.
pub const COLL_OUT_MYSYNC: u32 = 1 << 4;
/// Sync flag: a sync succeeds once every participant's part is done.
pub const COLL_OUT_ALLSYNC: u32 = 1 << 5;
/// Addressing: the same arguments on every participant (UPC single-valued).
pub const COLL_SINGLE: u32 = 1 << 6;
/// Addressing: each participant passes its own addresses.
pub const COLL_LOCAL: u32 = 1 << 7;
/// Aggregate with the following collective on the team (non-blocking calls only).
pub const COLL_AGGREGATE: u32 = 1 << 8;
/// Every image thread calls (images in the participant space).
pub const COLL_ALL_THREADS: u32 = 1 << 9;
/// Asserts that every source lies in the segment.
pub const COLL_SRC_IN_SEGMENT: u32 = 1 << 10;
/// Asserts that every destination lies in the segment.
pub const COLL_DST_IN_SEGMENT: u32 = 1 << 11;

/// Function-table flag: the function may run from any amnet call that polls.
pub const COLL_AMSAFE: u32 = 1;
/// Function-table flag: the function is not commutative (operands combine in order).
pub const COLL_NONCOMM: u32 = 2;

/// The number of built-in reduction functions, which come first in every function table:
/// entry `i` of the table given to `amnet_coll_init` has index `AMNET_COLL_N_BUILTIN + i`.
pub const COLL_N_BUILTIN: u32 = 48;

/// Built-in operator: sum (wrapping for integers).
pub const RED_SUM: c_int = 0;
/// Built-in operator: product (wrapping for integers).
pub const RED_PROD: c_int = 1;
/// Built-in operator: minimum.
pub const RED_MIN: c_int = 2;
/// Built-in operator: maximum.
pub const RED_MAX: c_int = 3;
/// Built-in operator: bitwise and (integers).
pub const RED_AND: c_int = 4;
/// Built-in operator: bitwise or (integers).
pub const RED_OR: c_int = 5;
/// Built-in operator: bitwise exclusive or (integers).
pub const RED_XOR: c_int = 6;
/// Built-in operator: minimum of (value, location) pairs, 16 bytes each (value at byte 0,
/// a `uint64_t` location at byte 8); the smaller location wins between equal values.
pub const RED_MINLOC: c_int = 7;
/// Built-in operator: maximum of (value, location) pairs, laid out as for `RED_MINLOC`.
pub const RED_MAXLOC: c_int = 8;

const _: () = assert!(COLL_N_BUILTIN as usize == amnet::coll::builtin::N_BUILTIN);
const _: () = {
    use amnet::sync_modes::flags as f;
    assert!(COLL_IN_NOSYNC == f::IN_NOSYNC && COLL_IN_MYSYNC == f::IN_MYSYNC);
    assert!(COLL_IN_ALLSYNC == f::IN_ALLSYNC && COLL_OUT_NOSYNC == f::OUT_NOSYNC);
    assert!(COLL_OUT_MYSYNC == f::OUT_MYSYNC && COLL_OUT_ALLSYNC == f::OUT_ALLSYNC);
    assert!(COLL_SINGLE == f::SINGLE && COLL_LOCAL == f::LOCAL);
    assert!(COLL_AGGREGATE == f::AGGREGATE && COLL_ALL_THREADS == f::ALL_THREADS);
    assert!(COLL_SRC_IN_SEGMENT == f::SRC_IN_SEGMENT);
    assert!(COLL_DST_IN_SEGMENT == f::DST_IN_SEGMENT);
    assert!(COLL_AMSAFE == amnet::coll::fn_flags::AMSAFE);
    assert!(COLL_NONCOMM == amnet::coll::fn_flags::NONCOMM);
};

/// The address value that names a participant's own destination as its source (the
/// in-place forms); the header spells it `AMNET_COLL_IN_PLACE`.
const IN_PLACE: usize = 1;

/// A reduction function, with the arguments of the GASNet collectives: write `result_count`
/// results of `elem_size` bytes at `results`, result `i` being the combination, in order, of
/// the `left_count` operands at `left_operands` and of right operands `0..=i` at
/// `right_operands`. `flags` holds `AMNET_COLL_NONCOMM` when the entry was registered with
/// it; `arg` is the call's function argument. It must not call amnet or unwind.
pub type CollFn = Option<
    unsafe extern "C" fn(
        results: *mut c_void,
        result_count: usize,
        left_operands: *const c_void,
        left_count: usize,
        right_operands: *const c_void,
        elem_size: usize,
        flags: c_int,
        arg: c_int,
    ),
>;

/// One entry of the function table given to `amnet_coll_init`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct CollFnEntry {
    /// The function; not null.
    pub fnptr: CollFn,
    /// `AMNET_COLL_AMSAFE` and `AMNET_COLL_NONCOMM` bits.
    pub flags: u32,
}

/// A thread's collectives context.
struct Ctx {
    coll: Coll,
    /// This rank's segment: base address and length.
    base: usize,
    len: usize,
}

impl Ctx {
    /// The address a C pointer names: its offset where it lies in this rank's segment (so
    /// that algorithms that write peers' segments may be chosen), the in-place marker, or the
    /// pointer itself.
    fn addr(&self, p: *const c_void) -> Addr {
        let a = p as usize;
        if a == IN_PLACE {
            Addr::InPlace
        } else if a >= self.base && a - self.base < self.len {
            Addr::seg((a - self.base) as u64)
        } else {
            // SAFETY: every entry point that takes addresses states the contract of
            // `Addr::ptr` (valid and untouched until the collective is synced) as its own
            // `# Safety`; the library checks null and the segment assertions itself.
            unsafe { Addr::ptr(p.cast_mut().cast()) }
        }
    }

    /// The `n` addresses of a C list.
    ///
    /// # Safety
    /// - `list` is null with `n` 0, or valid for reads of `n` pointers.
    unsafe fn list(
        &self,
        list: *const *mut c_void,
        n: usize,
        what: &str,
    ) -> Result<Vec<Addr>, CError> {
        // SAFETY: readable for `n` pointers (the caller's contract).
        let s = unsafe { array(list, n, what) }?;
        Ok(s.iter().map(|&p| self.addr(p)).collect())
    }
}

/// The context of a job initialized without images (any thread uses it).
static PROCESS: OnceLock<Ctx> = OnceLock::new();

thread_local! {
    /// The context of an image thread (initialized with images).
    static MINE: OnceCell<Ctx> = const { OnceCell::new() };
}

/// Teams other than the world, by id - 2; `None` once destroyed.
static TEAMS: RwLock<Vec<Option<Team>>> = RwLock::new(Vec::new());

#[cold]
fn no_ctx() -> CError {
    CError::new(
        ERR_STATE,
        "the collectives are not initialized for this thread: call amnet_coll_init (on every \
         image thread when it is given images)",
    )
}

/// Run `f` with the calling thread's context.
#[inline]
fn with_ctx<R>(f: impl FnOnce(&Ctx) -> Result<R, CError>) -> Result<R, CError> {
    if let Some(cx) = PROCESS.get() {
        return f(cx);
    }
    MINE.try_with(|m| match m.get() {
        Some(cx) => f(cx),
        None => Err(no_ctx()),
    })
    .unwrap_or_else(|_| Err(no_ctx()))
}

/// A clone of team `id` (teams are cheap handles; the table's lock is not held while a
/// collective runs).
fn team(cx: &Ctx, id: TeamId) -> Result<Team, CError> {
    if id == TEAM_WORLD {
        return Ok(cx.coll.world().clone());
    }
    let teams = TEAMS.read().unwrap_or_else(|e| e.into_inner());
    id.checked_sub(2)
        .and_then(|i| teams.get(i as usize))
        .and_then(|t| t.clone())
        .ok_or_else(|| {
            CError::bad_arg(format!(
                "team {id} names no team of this process (never made, destroyed, or the null \
                 team)"
            ))
        })
}

/// An id for a new team (`TEAM_NULL` for none).
fn register(t: Option<Team>) -> Result<TeamId, CError> {
    let Some(t) = t else { return Ok(TEAM_NULL) };
    let mut teams = TEAMS.write().unwrap_or_else(|e| e.into_inner());
    let id = u32::try_from(teams.len() + 2)
        .ok()
        .filter(|&i| i != u32::MAX)
        .ok_or_else(|| CError::new(ERR_STATE, "this process made 2^32 teams; no id is left"))?;
    teams.push(Some(t));
    Ok(id)
}

/// Start a collective on `team`: blocking when `handle` is null, otherwise non-blocking with
/// its handle written there.
#[inline]
fn run(
    op: &'static str,
    team_id: TeamId,
    handle: *mut CollHandleId,
    body: impl FnOnce(&Ctx, &Team, bool) -> Result<CollHandle, CError>,
) -> c_int {
    guard(op, || {
        with_ctx(|cx| {
            let t = team(cx, team_id)?;
            let h = body(cx, &t, handle.is_null())?;
            if !handle.is_null() {
                // SAFETY: non-null; the caller's contract makes it writable.
                unsafe { handle.write(h.to_bits()) };
            }
            Ok(OK)
        })
    })
}

/// The blocking or the non-blocking method of the same operation, as a handle.
macro_rules! call {
    ($blocking:expr, $c:expr, $blk:ident, $nb:ident, ($($a:expr),* $(,)?)) => {
        if $blocking {
            $c.$blk($($a),*).map(|()| CollHandle::INVALID)
        } else {
            $c.$nb($($a),*)
        }
    };
}

/// Initialize the collectives: collective over the job, once per process (`images` null),
/// or once on every image thread (`images` given), after `amnet_attach`.
///
/// `images`: null for one image per rank, or `nranks` (the job's size) counts of images per
/// rank, none zero, the same on every rank; the calling thread is then image `my_image`
/// (images are numbered rank by rank) and only it may use this context. `fns`: the client's
/// `nfns` reduction functions, registered after the built-ins (entry `i` has function index
/// `AMNET_COLL_N_BUILTIN + i`); the table's size and flags must agree on every rank (the
/// functions themselves may differ). A second call on the same thread (or in the process,
/// without images) fails with the state code.
///
/// # Safety
/// - `images` is null or valid for reads of `nranks` `uint32_t`s; `fns` is null with `nfns`
///   0 or valid for reads of `nfns` entries, whose functions stay callable for the process's
///   life.
#[no_mangle]
pub unsafe extern "C" fn amnet_coll_init(
    images: *const u32,
    nranks: usize,
    my_image: u32,
    fns: *const CollFnEntry,
    nfns: usize,
) -> c_int {
    guard("amnet_coll_init", || {
        let ep = ep()?;
        let imgs: Option<&[u32]> = if images.is_null() {
            None
        } else {
            // SAFETY: readable for `nranks` entries (the caller's contract).
            Some(unsafe { array(images, nranks, "images") }?)
        };
        // SAFETY: readable for `nfns` entries (the caller's contract).
        let list = unsafe { array(fns, nfns, "fns") }?;
        let mut table = Vec::with_capacity(list.len());
        for (i, e) in list.iter().enumerate() {
            let Some(f) = e.fnptr else {
                return Err(CError::bad_arg(format!("fns[{i}] has a null function")));
            };
            if e.flags & !(COLL_AMSAFE | COLL_NONCOMM) != 0 {
                return Err(CError::bad_arg(format!(
                    "fns[{i}] has unknown flags {:#x} (AMSAFE = 1, NONCOMM = 2)",
                    e.flags
                )));
            }
            table.push(FnEntry::new(
                e.flags,
                move |res: &mut [u8], rc, left: &[u8], lc, right: &[u8], es, fl, arg| {
                    let holds = |s: usize, n: usize| n.checked_mul(es).is_some_and(|b| b <= s);
                    if !(holds(res.len(), rc) && holds(right.len(), rc) && holds(left.len(), lc)) {
                        // Never from the library (it passes whole elements); the C function
                        // would read or write past a slice.
                        debug_assert!(false, "operand counts larger than their slices");
                        return;
                    }
                    // SAFETY: each slice holds the elements its count names (checked above);
                    // the function is the client's, callable for the process's life (init's
                    // contract).
                    unsafe {
                        f(
                            res.as_mut_ptr().cast(),
                            rc,
                            left.as_ptr().cast(),
                            lc,
                            right.as_ptr().cast(),
                            es,
                            fl as c_int,
                            arg as c_int,
                        )
                    }
                },
            ));
        }
        if PROCESS.get().is_some() {
            return Err(CError::new(
                ERR_STATE,
                "the collectives are already initialized in this process (without images: \
                 one context that every thread uses)",
            ));
        }
        if MINE.try_with(|m| m.get().is_some()).unwrap_or(true) {
            return Err(CError::new(
                ERR_STATE,
                "the collectives are already initialized for this image thread",
            ));
        }
        let coll = Coll::init(ep, imgs, my_image, &table)?;
        let base = ep.segment_ptr()? as usize;
        let len = ep.segment_len()?;
        let cx = Ctx { coll, base, len };
        if imgs.is_none() {
            PROCESS
                .set(cx)
                .map_err(|_| CError::new(ERR_STATE, "the collectives were initialized twice"))?;
        } else {
            MINE.try_with(|m| m.set(cx))
                .ok()
                .and_then(Result::ok)
                .ok_or_else(|| CError::new(ERR_STATE, "this thread is ending"))?;
        }
        Ok(OK)
    })
}

/// The calling thread's image in `*my_image`, the job's images in `*total` and this rank's
/// in `*local` (each may be null).
///
/// # Safety
/// - Each pointer is null or valid for a write of a `uint32_t`.
#[no_mangle]
pub unsafe extern "C" fn amnet_coll_images(
    my_image: *mut u32,
    total: *mut u32,
    local: *mut u32,
) -> c_int {
    guard("amnet_coll_images", || {
        with_ctx(|cx| {
            let c = &cx.coll;
            let rank = c.endpoint().rank() as usize;
            // SAFETY: the caller's contract for each pointer.
            unsafe {
                store(my_image, c.my_image());
                store(total, c.images());
                store(local, c.images_per_rank()[rank]);
            }
            Ok(OK)
        })
    })
}

/// The function index of the built-in `op` (`AMNET_RED_*`) on elements of `type`
/// (`AMNET_TYPE_*`), in `*index`. The bitwise operators have no float forms.
///
/// # Safety
/// - `index` is valid for a write of a `uint32_t`.
#[no_mangle]
pub unsafe extern "C" fn amnet_coll_builtin(op: c_int, elem_type: c_int, index: *mut u32) -> c_int {
    guard("amnet_coll_builtin", || {
        required(index, "index")?;
        let r = match op {
            RED_SUM => RedOp::Sum,
            RED_PROD => RedOp::Prod,
            RED_MIN => RedOp::Min,
            RED_MAX => RedOp::Max,
            RED_AND => RedOp::And,
            RED_OR => RedOp::Or,
            RED_XOR => RedOp::Xor,
            RED_MINLOC => RedOp::MinLoc,
            RED_MAXLOC => RedOp::MaxLoc,
            _ => {
                return Err(CError::bad_arg(format!(
                    "unknown operator {op} (AMNET_RED_SUM..AMNET_RED_MAXLOC)"
                )))
            }
        };
        let t = match elem_type {
            crate::TYPE_I32 => ElemType::I32,
            crate::TYPE_U32 => ElemType::U32,
            crate::TYPE_I64 => ElemType::I64,
            crate::TYPE_U64 => ElemType::U64,
            crate::TYPE_F32 => ElemType::F32,
            crate::TYPE_F64 => ElemType::F64,
            _ => {
                return Err(CError::bad_arg(format!(
                    "unknown element type {elem_type} (AMNET_TYPE_*)"
                )))
            }
        };
        let i = amnet::coll::builtin::builtin_index(r, t)
            .ok_or_else(|| CError::bad_arg(format!("{r:?} has no form for {t:?} elements")))?;
        // SAFETY: checked non-null; the caller's contract makes it writable.
        unsafe { index.write(u32::try_from(i).unwrap_or(u32::MAX)) };
        Ok(OK)
    })
}

/// Run handlers and move this thread's collectives in flight along.
#[no_mangle]
pub extern "C" fn amnet_coll_poll() -> c_int {
    guard("amnet_coll_poll", || {
        with_ctx(|cx| Ok(cx.coll.poll().map(|()| OK)?))
    })
}

// ----- teams --------------------------------------------------------------------------------

/// Split `parent` MPI-style: the ranks passing the same `color` form a team, numbered by
/// `key` (ties by parent rank); `*out` gets the new team, or `AMNET_TEAM_NULL` for a rank
/// that passed `AMNET_TEAM_NO_COLOR`. Collective over `parent` (one thread per rank).
///
/// # Safety
/// - `out` is valid for a write of an `amnet_team_t`.
#[no_mangle]
pub unsafe extern "C" fn amnet_team_split(
    parent: TeamId,
    color: u32,
    key: i32,
    out: *mut TeamId,
) -> c_int {
    guard("amnet_team_split", || {
        required(out, "out")?;
        with_ctx(|cx| {
            let p = team(cx, parent)?;
            let color = (color != TEAM_NO_COLOR).then_some(color);
            let id = register(cx.coll.split(&p, color, key)?)?;
            // SAFETY: checked non-null; the caller's contract makes it writable.
            unsafe { out.write(id) };
            Ok(OK)
        })
    })
}

/// The team of `parent`'s ranks `start + stride * i` for `i` in `0..size` (OpenSHMEM's
/// strided split); `*out` gets `AMNET_TEAM_NULL` on ranks outside it. Collective over
/// `parent`.
///
/// # Safety
/// - `out` is valid for a write of an `amnet_team_t`.
#[no_mangle]
pub unsafe extern "C" fn amnet_team_split_strided(
    parent: TeamId,
    start: i64,
    stride: i64,
    size: i64,
    out: *mut TeamId,
) -> c_int {
    guard("amnet_team_split_strided", || {
        required(out, "out")?;
        with_ctx(|cx| {
            let p = team(cx, parent)?;
            let id = register(cx.coll.split_strided(&p, start, stride, size)?)?;
            // SAFETY: checked non-null; the caller's contract makes it writable.
            unsafe { out.write(id) };
            Ok(OK)
        })
    })
}

/// Split `parent` into the rows (`*row`) and columns (`*col`) of a grid `xrange` wide.
/// Collective over `parent`.
///
/// # Safety
/// - `row` and `col` are valid for writes of an `amnet_team_t`.
#[no_mangle]
pub unsafe extern "C" fn amnet_team_split_2d(
    parent: TeamId,
    xrange: u32,
    row: *mut TeamId,
    col: *mut TeamId,
) -> c_int {
    guard("amnet_team_split_2d", || {
        required(row, "row")?;
        required(col, "col")?;
        with_ctx(|cx| {
            let p = team(cx, parent)?;
            let (r, c) = cx.coll.split_2d(&p, xrange)?;
            let (r, c) = (register(Some(r))?, register(Some(c))?);
            // SAFETY: checked non-null; the caller's contract makes them writable.
            unsafe {
                row.write(r);
                col.write(c);
            }
            Ok(OK)
        })
    })
}

/// The team of the `n` parent ranks at `members`, in that order (the same list on every rank
/// of `parent`); `*out` gets `AMNET_TEAM_NULL` on ranks not listed. Collective over `parent`.
///
/// # Safety
/// - `members` is valid for reads of `n` `uint32_t`s; `out` for a write of an `amnet_team_t`.
#[no_mangle]
pub unsafe extern "C" fn amnet_team_create(
    parent: TeamId,
    members: *const u32,
    n: usize,
    out: *mut TeamId,
) -> c_int {
    guard("amnet_team_create", || {
        required(out, "out")?;
        required(members, "members")?;
        // SAFETY: readable for `n` entries (the caller's contract).
        let list = unsafe { array(members, n, "members") }?;
        with_ctx(|cx| {
            let p = team(cx, parent)?;
            let id = register(cx.coll.create(&p, list)?)?;
            // SAFETY: checked non-null; the caller's contract makes it writable.
            unsafe { out.write(id) };
            Ok(OK)
        })
    })
}

/// Destroy `team` (a barrier over it); its id names no team afterwards. Every collective
/// started on it must be synced first. The world cannot be destroyed.
#[no_mangle]
pub extern "C" fn amnet_team_destroy(team_id: TeamId) -> c_int {
    guard("amnet_team_destroy", || {
        with_ctx(|cx| {
            if team_id == TEAM_WORLD {
                return Err(CError::bad_arg("the world team cannot be destroyed"));
            }
            let t = team(cx, team_id)?;
            cx.coll.destroy(&t)?;
            let mut teams = TEAMS.write().unwrap_or_else(|e| e.into_inner());
            if let Some(slot) = teams.get_mut(team_id as usize - 2) {
                *slot = None;
            }
            Ok(OK)
        })
    })
}

/// This rank's number in `team` (`*rank`), the team's ranks (`*size`) and its images
/// (`*images`); each pointer may be null.
///
/// # Safety
/// - Each pointer is null or valid for a write of a `uint32_t`.
#[no_mangle]
pub unsafe extern "C" fn amnet_team_info(
    team_id: TeamId,
    rank: *mut u32,
    size: *mut u32,
    images: *mut u32,
) -> c_int {
    guard("amnet_team_info", || {
        with_ctx(|cx| {
            let t = team(cx, team_id)?;
            // SAFETY: the caller's contract for each pointer.
            unsafe {
                store(rank, t.rank());
                store(size, t.size());
                store(images, t.images());
            }
            Ok(OK)
        })
    })
}

/// The job rank of `team`'s rank `rank`, in `*out`.
///
/// # Safety
/// - `out` is valid for a write of a `uint32_t`.
#[no_mangle]
pub unsafe extern "C" fn amnet_team_world_rank(team_id: TeamId, rank: u32, out: *mut u32) -> c_int {
    guard("amnet_team_world_rank", || {
        required(out, "out")?;
        with_ctx(|cx| {
            let t = team(cx, team_id)?;
            let r = t.world_rank(rank).ok_or_else(|| {
                CError::new(
                    crate::ERR_BAD_RANK,
                    format!(
                        "team rank {rank} does not exist: the team has {} ranks",
                        t.size()
                    ),
                )
            })?;
            // SAFETY: checked non-null; the caller's contract makes it writable.
            unsafe { out.write(r) };
            Ok(OK)
        })
    })
}

/// Wait until every rank of `team` called it: a collective of the team (one thread per rank),
/// ordered with its other collectives.
#[no_mangle]
pub extern "C" fn amnet_coll_barrier(team_id: TeamId) -> c_int {
    guard("amnet_coll_barrier", || {
        with_ctx(|cx| Ok(cx.coll.barrier(&team(cx, team_id)?).map(|()| OK)?))
    })
}

/// Wait until every image thread of every rank of `team` called it (UPC's barrier with
/// images); with one image per rank the same as `amnet_coll_barrier`.
#[no_mangle]
pub extern "C" fn amnet_coll_barrier_images(team_id: TeamId) -> c_int {
    guard("amnet_coll_barrier_images", || {
        with_ctx(|cx| Ok(cx.coll.barrier_images(&team(cx, team_id)?).map(|()| OK)?))
    })
}

/// Set this rank's forced algorithm choices, in the grammar of the tuning variable (an
/// empty string clears them). Every rank makes the same call at the same point of its
/// sequence of collectives.
///
/// # Safety
/// - `text` is a valid NUL-terminated string.
#[no_mangle]
pub unsafe extern "C" fn amnet_coll_tune(text: *const c_char) -> c_int {
    guard("amnet_coll_tune", || {
        required(text, "text")?;
        // SAFETY: non-null and NUL-terminated (the caller's contract).
        let s = unsafe { CStr::from_ptr(text) };
        let s = s
            .to_str()
            .map_err(|_| CError::bad_arg("text is not UTF-8"))?;
        with_ctx(|cx| Ok(cx.coll.tune(s).map(|()| OK)?))
    })
}

// ----- syncs --------------------------------------------------------------------------------

/// Wait until the collective of `*handle` completed as its OUT mode promises; `*handle`
/// becomes `AMNET_COLL_HANDLE_INVALID`. On an error the handle keeps its value (the
/// collective may still be in flight: its memory stays in use; a later sync completes it or
/// reports the bad-handle code once the error ended it).
///
/// # Safety
/// - `handle` is valid for reads and writes of an `amnet_coll_handle_t`.
#[no_mangle]
pub unsafe extern "C" fn amnet_coll_wait_sync(handle: *mut CollHandleId) -> c_int {
    guard("amnet_coll_wait_sync", || {
        required(handle, "handle")?;
        // SAFETY: checked non-null; the caller's contract.
        let h = unsafe { handle.read() };
        with_ctx(|cx| {
            cx.coll.wait_sync(CollHandle::from_bits(h))?;
            // SAFETY: as above.
            unsafe { handle.write(COLL_HANDLE_INVALID) };
            Ok(OK)
        })
    })
}

/// `AMNET_OK` (and `*handle` invalid) when the collective of `*handle` completed as its OUT
/// mode promises, `AMNET_NOT_READY` when not yet; never blocks.
///
/// # Safety
/// - `handle` is valid for reads and writes of an `amnet_coll_handle_t`.
#[no_mangle]
pub unsafe extern "C" fn amnet_coll_try_sync(handle: *mut CollHandleId) -> c_int {
    guard("amnet_coll_try_sync", || {
        required(handle, "handle")?;
        // SAFETY: checked non-null; the caller's contract.
        let h = unsafe { handle.read() };
        with_ctx(|cx| {
            if !cx.coll.try_sync(CollHandle::from_bits(h))? {
                return Ok(NOT_READY);
            }
            // SAFETY: as above.
            unsafe { handle.write(COLL_HANDLE_INVALID) };
            Ok(OK)
        })
    })
}

/// Sync the `n` handles at `handles` with `f`, writing back which completed (invalid).
///
/// # Safety
/// - `handles` is null with `n` 0, or valid for reads and writes of `n` handles.
unsafe fn sync_many(
    op: &'static str,
    handles: *mut CollHandleId,
    n: usize,
    f: impl FnOnce(&Coll, &mut [CollHandle]) -> amnet::Result<bool>,
) -> c_int {
    guard(op, || {
        // Copied in and written back through the pointer: no reference to the client's array
        // lives while the sync runs (its reduction functions may read the array).
        // SAFETY: readable for `n` handles (the caller's contract).
        let ids = unsafe { array(handles.cast_const(), n, "handles") }?;
        let mut hs: Vec<CollHandle> = ids.iter().map(|&b| CollHandle::from_bits(b)).collect();
        with_ctx(|cx| {
            let r = f(&cx.coll, &mut hs);
            for (i, h) in hs.iter().enumerate() {
                // SAFETY: `array` checked the pointer (non-null and aligned when n > 0); the
                // caller's contract makes it writable for `n` handles.
                unsafe { handles.add(i).write(h.to_bits()) };
            }
            Ok(if r? { OK } else { NOT_READY })
        })
    })
}

/// Wait until every collective of the `n` handles completed; each becomes invalid.
///
/// # Safety
/// - `handles` is null with `n` 0, or valid for reads and writes of `n` handles.
#[no_mangle]
pub unsafe extern "C" fn amnet_coll_wait_sync_all(handles: *mut CollHandleId, n: usize) -> c_int {
    // SAFETY: the caller's contract is sync_many's.
    unsafe {
        sync_many("amnet_coll_wait_sync_all", handles, n, |c, hs| {
            c.wait_sync_all(hs).map(|()| true)
        })
    }
}

/// `AMNET_OK` when every collective of the `n` handles completed, `AMNET_NOT_READY` when not
/// yet; the completed ones become invalid either way. Never blocks.
///
/// # Safety
/// - `handles` is null with `n` 0, or valid for reads and writes of `n` handles.
#[no_mangle]
pub unsafe extern "C" fn amnet_coll_try_sync_all(handles: *mut CollHandleId, n: usize) -> c_int {
    // SAFETY: the caller's contract is sync_many's.
    unsafe {
        sync_many("amnet_coll_try_sync_all", handles, n, |c, hs| {
            c.try_sync_all(hs)
        })
    }
}

/// Wait until at least one collective of the `n` handles completed (at once when none is
/// live); the completed ones become invalid.
///
/// # Safety
/// - `handles` is null with `n` 0, or valid for reads and writes of `n` handles.
#[no_mangle]
pub unsafe extern "C" fn amnet_coll_wait_sync_some(handles: *mut CollHandleId, n: usize) -> c_int {
    // SAFETY: the caller's contract is sync_many's.
    unsafe {
        sync_many("amnet_coll_wait_sync_some", handles, n, |c, hs| {
            c.wait_sync_some(hs).map(|()| true)
        })
    }
}

/// `AMNET_OK` when at least one collective of the `n` handles completed (or none is live),
/// `AMNET_NOT_READY` otherwise; the completed ones become invalid. Never blocks.
///
/// # Safety
/// - `handles` is null with `n` 0, or valid for reads and writes of `n` handles.
#[no_mangle]
pub unsafe extern "C" fn amnet_coll_try_sync_some(handles: *mut CollHandleId, n: usize) -> c_int {
    // SAFETY: the caller's contract is sync_many's.
    unsafe {
        sync_many("amnet_coll_try_sync_some", handles, n, |c, hs| {
            c.try_sync_some(hs)
        })
    }
}

// ----- data movement ------------------------------------------------------------------------
//
// Every operation below: collective over `team` (spec/coll.md for its participants, modes and
// checks); blocking when `handle` is null, otherwise started with its handle written to
// `*handle` (`AMNET_COLL_HANDLE_INVALID` when it completed at once). Addresses are pointers
// into the calling process: one in this rank's segment is passed as its segment offset, any
// other as a pointer, `AMNET_COLL_IN_PLACE` where the operation has an in-place form.

/// Broadcast `nbytes` from the root image's `src` to every participant's `dst`.
///
/// # Safety
/// - Every address and list entry the call reads or writes through is valid for the bytes the
///   operation addresses there, and not otherwise accessed, from the call until the collective
///   is synced on this rank (for good when no sync succeeds); lists and counts are readable for
///   their lengths during the call; `handle` is null or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn amnet_coll_broadcast(
    team: TeamId,
    dst: *mut c_void,
    root: u32,
    src: *const c_void,
    nbytes: usize,
    flags: u32,
    handle: *mut CollHandleId,
) -> c_int {
    run("amnet_coll_broadcast", team, handle, |cx, t, b| {
        // SAFETY: the addresses meet `raw::Collectives`' contract (this function's).
        Ok(unsafe {
            call!(
                b,
                cx.coll,
                broadcast,
                broadcast_nb,
                (t, cx.addr(dst), root, cx.addr(src), nbytes, flags)
            )
        }?)
    })
}

/// Broadcast to a list of `ndst` destinations (one per image: every image of the team under
/// `AMNET_COLL_SINGLE`, this rank's under `AMNET_COLL_LOCAL`).
///
/// # Safety
/// - Every address and list entry the call reads or writes through is valid for the bytes the
///   operation addresses there, and not otherwise accessed, from the call until the collective
///   is synced on this rank (for good when no sync succeeds); lists and counts are readable for
///   their lengths during the call; `handle` is null or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn amnet_coll_broadcastm(
    team: TeamId,
    dstlist: *const *mut c_void,
    ndst: usize,
    root: u32,
    src: *const c_void,
    nbytes: usize,
    flags: u32,
    handle: *mut CollHandleId,
) -> c_int {
    run("amnet_coll_broadcastm", team, handle, |cx, t, b| {
        // SAFETY: the list is readable for its length (this function's contract).
        let d = unsafe { cx.list(dstlist, ndst, "dstlist") }?;
        // SAFETY: the addresses meet `raw::Collectives`' contract (this function's).
        Ok(unsafe {
            call!(
                b,
                cx.coll,
                broadcastm,
                broadcastm_nb,
                (t, &d, root, cx.addr(src), nbytes, flags)
            )
        }?)
    })
}

/// Scatter: block `i` (of `nbytes`) of the root image's `src` to participant `i`'s `dst`.
///
/// # Safety
/// - Every address and list entry the call reads or writes through is valid for the bytes the
///   operation addresses there, and not otherwise accessed, from the call until the collective
///   is synced on this rank (for good when no sync succeeds); lists and counts are readable for
///   their lengths during the call; `handle` is null or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn amnet_coll_scatter(
    team: TeamId,
    dst: *mut c_void,
    root: u32,
    src: *const c_void,
    nbytes: usize,
    flags: u32,
    handle: *mut CollHandleId,
) -> c_int {
    run("amnet_coll_scatter", team, handle, |cx, t, b| {
        // SAFETY: the addresses meet `raw::Collectives`' contract (this function's).
        Ok(unsafe {
            call!(
                b,
                cx.coll,
                scatter,
                scatter_nb,
                (t, cx.addr(dst), root, cx.addr(src), nbytes, flags)
            )
        }?)
    })
}

/// Scatter to a list of `ndst` destinations.
///
/// # Safety
/// - Every address and list entry the call reads or writes through is valid for the bytes the
///   operation addresses there, and not otherwise accessed, from the call until the collective
///   is synced on this rank (for good when no sync succeeds); lists and counts are readable for
///   their lengths during the call; `handle` is null or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn amnet_coll_scatterm(
    team: TeamId,
    dstlist: *const *mut c_void,
    ndst: usize,
    root: u32,
    src: *const c_void,
    nbytes: usize,
    flags: u32,
    handle: *mut CollHandleId,
) -> c_int {
    run("amnet_coll_scatterm", team, handle, |cx, t, b| {
        // SAFETY: the list is readable for its length (this function's contract).
        let d = unsafe { cx.list(dstlist, ndst, "dstlist") }?;
        // SAFETY: the addresses meet `raw::Collectives`' contract (this function's).
        Ok(unsafe {
            call!(
                b,
                cx.coll,
                scatterm,
                scatterm_nb,
                (t, &d, root, cx.addr(src), nbytes, flags)
            )
        }?)
    })
}

/// Gather: participant `i`'s `nbytes` at `src` to block `i` of the root image's `dst`.
///
/// # Safety
/// - Every address and list entry the call reads or writes through is valid for the bytes the
///   operation addresses there, and not otherwise accessed, from the call until the collective
///   is synced on this rank (for good when no sync succeeds); lists and counts are readable for
///   their lengths during the call; `handle` is null or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn amnet_coll_gather(
    team: TeamId,
    root: u32,
    dst: *mut c_void,
    src: *const c_void,
    nbytes: usize,
    flags: u32,
    handle: *mut CollHandleId,
) -> c_int {
    run("amnet_coll_gather", team, handle, |cx, t, b| {
        // SAFETY: the addresses meet `raw::Collectives`' contract (this function's).
        Ok(unsafe {
            call!(
                b,
                cx.coll,
                gather,
                gather_nb,
                (t, root, cx.addr(dst), cx.addr(src), nbytes, flags)
            )
        }?)
    })
}

/// Gather from a list of `nsrc` sources.
///
/// # Safety
/// - Every address and list entry the call reads or writes through is valid for the bytes the
///   operation addresses there, and not otherwise accessed, from the call until the collective
///   is synced on this rank (for good when no sync succeeds); lists and counts are readable for
///   their lengths during the call; `handle` is null or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn amnet_coll_gatherm(
    team: TeamId,
    root: u32,
    dst: *mut c_void,
    srclist: *const *mut c_void,
    nsrc: usize,
    nbytes: usize,
    flags: u32,
    handle: *mut CollHandleId,
) -> c_int {
    run("amnet_coll_gatherm", team, handle, |cx, t, b| {
        // SAFETY: the list is readable for its length (this function's contract).
        let s = unsafe { cx.list(srclist, nsrc, "srclist") }?;
        // SAFETY: the addresses meet `raw::Collectives`' contract (this function's).
        Ok(unsafe {
            call!(
                b,
                cx.coll,
                gatherm,
                gatherm_nb,
                (t, root, cx.addr(dst), &s, nbytes, flags)
            )
        }?)
    })
}

/// Gather to every participant: participant `i`'s `nbytes` to block `i` of every `dst`.
///
/// # Safety
/// - Every address and list entry the call reads or writes through is valid for the bytes the
///   operation addresses there, and not otherwise accessed, from the call until the collective
///   is synced on this rank (for good when no sync succeeds); lists and counts are readable for
///   their lengths during the call; `handle` is null or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn amnet_coll_gather_all(
    team: TeamId,
    dst: *mut c_void,
    src: *const c_void,
    nbytes: usize,
    flags: u32,
    handle: *mut CollHandleId,
) -> c_int {
    run("amnet_coll_gather_all", team, handle, |cx, t, b| {
        // SAFETY: the addresses meet `raw::Collectives`' contract (this function's).
        Ok(unsafe {
            call!(
                b,
                cx.coll,
                gather_all,
                gather_all_nb,
                (t, cx.addr(dst), cx.addr(src), nbytes, flags)
            )
        }?)
    })
}

/// gather_all with lists of `ndst` destinations and `nsrc` sources.
///
/// # Safety
/// - Every address and list entry the call reads or writes through is valid for the bytes the
///   operation addresses there, and not otherwise accessed, from the call until the collective
///   is synced on this rank (for good when no sync succeeds); lists and counts are readable for
///   their lengths during the call; `handle` is null or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn amnet_coll_gather_allm(
    team: TeamId,
    dstlist: *const *mut c_void,
    ndst: usize,
    srclist: *const *mut c_void,
    nsrc: usize,
    nbytes: usize,
    flags: u32,
    handle: *mut CollHandleId,
) -> c_int {
    run("amnet_coll_gather_allm", team, handle, |cx, t, b| {
        // SAFETY: the list is readable for its length (this function's contract).
        let d = unsafe { cx.list(dstlist, ndst, "dstlist") }?;
        // SAFETY: the list is readable for its length (this function's contract).
        let s = unsafe { cx.list(srclist, nsrc, "srclist") }?;
        // SAFETY: the addresses meet `raw::Collectives`' contract (this function's).
        Ok(unsafe {
            call!(
                b,
                cx.coll,
                gather_allm,
                gather_allm_nb,
                (t, &d, &s, nbytes, flags)
            )
        }?)
    })
}

/// All-to-all: block `j` of participant `i`'s `src` to block `i` of participant `j`'s `dst`.
///
/// # Safety
/// - Every address and list entry the call reads or writes through is valid for the bytes the
///   operation addresses there, and not otherwise accessed, from the call until the collective
///   is synced on this rank (for good when no sync succeeds); lists and counts are readable for
///   their lengths during the call; `handle` is null or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn amnet_coll_exchange(
    team: TeamId,
    dst: *mut c_void,
    src: *const c_void,
    nbytes: usize,
    flags: u32,
    handle: *mut CollHandleId,
) -> c_int {
    run("amnet_coll_exchange", team, handle, |cx, t, b| {
        // SAFETY: the addresses meet `raw::Collectives`' contract (this function's).
        Ok(unsafe {
            call!(
                b,
                cx.coll,
                exchange,
                exchange_nb,
                (t, cx.addr(dst), cx.addr(src), nbytes, flags)
            )
        }?)
    })
}

/// exchange with lists of `ndst` destinations and `nsrc` sources.
///
/// # Safety
/// - Every address and list entry the call reads or writes through is valid for the bytes the
///   operation addresses there, and not otherwise accessed, from the call until the collective
///   is synced on this rank (for good when no sync succeeds); lists and counts are readable for
///   their lengths during the call; `handle` is null or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn amnet_coll_exchangem(
    team: TeamId,
    dstlist: *const *mut c_void,
    ndst: usize,
    srclist: *const *mut c_void,
    nsrc: usize,
    nbytes: usize,
    flags: u32,
    handle: *mut CollHandleId,
) -> c_int {
    run("amnet_coll_exchangem", team, handle, |cx, t, b| {
        // SAFETY: the list is readable for its length (this function's contract).
        let d = unsafe { cx.list(dstlist, ndst, "dstlist") }?;
        // SAFETY: the list is readable for its length (this function's contract).
        let s = unsafe { cx.list(srclist, nsrc, "srclist") }?;
        // SAFETY: the addresses meet `raw::Collectives`' contract (this function's).
        Ok(unsafe {
            call!(
                b,
                cx.coll,
                exchangem,
                exchangem_nb,
                (t, &d, &s, nbytes, flags)
            )
        }?)
    })
}

/// Scatter with `counts[i]` bytes for participant `i` (`ncounts` entries, one per participant;
/// blocks packed in order in `src`).
///
/// # Safety
/// - Every address and list entry the call reads or writes through is valid for the bytes the
///   operation addresses there, and not otherwise accessed, from the call until the collective
///   is synced on this rank (for good when no sync succeeds); lists and counts are readable for
///   their lengths during the call; `handle` is null or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn amnet_coll_scatter_v(
    team: TeamId,
    dst: *mut c_void,
    root: u32,
    src: *const c_void,
    counts: *const usize,
    ncounts: usize,
    flags: u32,
    handle: *mut CollHandleId,
) -> c_int {
    run("amnet_coll_scatter_v", team, handle, |cx, t, b| {
        // SAFETY: the counts are readable for their length (this function's contract).
        let n = unsafe { array(counts, ncounts, "counts") }?;
        // SAFETY: the addresses meet `raw::Collectives`' contract (this function's).
        Ok(unsafe {
            call!(
                b,
                cx.coll,
                scatter_v,
                scatter_v_nb,
                (t, cx.addr(dst), root, cx.addr(src), n, flags)
            )
        }?)
    })
}

/// scatter_v with a list of `ndst` destinations.
///
/// # Safety
/// - Every address and list entry the call reads or writes through is valid for the bytes the
///   operation addresses there, and not otherwise accessed, from the call until the collective
///   is synced on this rank (for good when no sync succeeds); lists and counts are readable for
///   their lengths during the call; `handle` is null or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn amnet_coll_scatter_vm(
    team: TeamId,
    dstlist: *const *mut c_void,
    ndst: usize,
    root: u32,
    src: *const c_void,
    counts: *const usize,
    ncounts: usize,
    flags: u32,
    handle: *mut CollHandleId,
) -> c_int {
    run("amnet_coll_scatter_vm", team, handle, |cx, t, b| {
        // SAFETY: the list is readable for its length (this function's contract).
        let d = unsafe { cx.list(dstlist, ndst, "dstlist") }?;
        // SAFETY: the counts are readable for their length (this function's contract).
        let n = unsafe { array(counts, ncounts, "counts") }?;
        // SAFETY: the addresses meet `raw::Collectives`' contract (this function's).
        Ok(unsafe {
            call!(
                b,
                cx.coll,
                scatter_vm,
                scatter_vm_nb,
                (t, &d, root, cx.addr(src), n, flags)
            )
        }?)
    })
}

/// Gather `counts[i]` bytes from participant `i` (packed in order in the root image's `dst`).
///
/// # Safety
/// - Every address and list entry the call reads or writes through is valid for the bytes the
///   operation addresses there, and not otherwise accessed, from the call until the collective
///   is synced on this rank (for good when no sync succeeds); lists and counts are readable for
///   their lengths during the call; `handle` is null or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn amnet_coll_gather_v(
    team: TeamId,
    root: u32,
    dst: *mut c_void,
    src: *const c_void,
    counts: *const usize,
    ncounts: usize,
    flags: u32,
    handle: *mut CollHandleId,
) -> c_int {
    run("amnet_coll_gather_v", team, handle, |cx, t, b| {
        // SAFETY: the counts are readable for their length (this function's contract).
        let n = unsafe { array(counts, ncounts, "counts") }?;
        // SAFETY: the addresses meet `raw::Collectives`' contract (this function's).
        Ok(unsafe {
            call!(
                b,
                cx.coll,
                gather_v,
                gather_v_nb,
                (t, root, cx.addr(dst), cx.addr(src), n, flags)
            )
        }?)
    })
}

/// gather_v with a list of `nsrc` sources.
///
/// # Safety
/// - Every address and list entry the call reads or writes through is valid for the bytes the
///   operation addresses there, and not otherwise accessed, from the call until the collective
///   is synced on this rank (for good when no sync succeeds); lists and counts are readable for
///   their lengths during the call; `handle` is null or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn amnet_coll_gather_vm(
    team: TeamId,
    root: u32,
    dst: *mut c_void,
    srclist: *const *mut c_void,
    nsrc: usize,
    counts: *const usize,
    ncounts: usize,
    flags: u32,
    handle: *mut CollHandleId,
) -> c_int {
    run("amnet_coll_gather_vm", team, handle, |cx, t, b| {
        // SAFETY: the list is readable for its length (this function's contract).
        let s = unsafe { cx.list(srclist, nsrc, "srclist") }?;
        // SAFETY: the counts are readable for their length (this function's contract).
        let n = unsafe { array(counts, ncounts, "counts") }?;
        // SAFETY: the addresses meet `raw::Collectives`' contract (this function's).
        Ok(unsafe {
            call!(
                b,
                cx.coll,
                gather_vm,
                gather_vm_nb,
                (t, root, cx.addr(dst), &s, n, flags)
            )
        }?)
    })
}

/// gather_all with `counts[i]` bytes from participant `i`.
///
/// # Safety
/// - Every address and list entry the call reads or writes through is valid for the bytes the
///   operation addresses there, and not otherwise accessed, from the call until the collective
///   is synced on this rank (for good when no sync succeeds); lists and counts are readable for
///   their lengths during the call; `handle` is null or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn amnet_coll_gather_all_v(
    team: TeamId,
    dst: *mut c_void,
    src: *const c_void,
    counts: *const usize,
    ncounts: usize,
    flags: u32,
    handle: *mut CollHandleId,
) -> c_int {
    run("amnet_coll_gather_all_v", team, handle, |cx, t, b| {
        // SAFETY: the counts are readable for their length (this function's contract).
        let n = unsafe { array(counts, ncounts, "counts") }?;
        // SAFETY: the addresses meet `raw::Collectives`' contract (this function's).
        Ok(unsafe {
            call!(
                b,
                cx.coll,
                gather_all_v,
                gather_all_v_nb,
                (t, cx.addr(dst), cx.addr(src), n, flags)
            )
        }?)
    })
}

/// gather_all_v with lists of `ndst` destinations and `nsrc` sources.
///
/// # Safety
/// - Every address and list entry the call reads or writes through is valid for the bytes the
///   operation addresses there, and not otherwise accessed, from the call until the collective
///   is synced on this rank (for good when no sync succeeds); lists and counts are readable for
///   their lengths during the call; `handle` is null or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn amnet_coll_gather_all_vm(
    team: TeamId,
    dstlist: *const *mut c_void,
    ndst: usize,
    srclist: *const *mut c_void,
    nsrc: usize,
    counts: *const usize,
    ncounts: usize,
    flags: u32,
    handle: *mut CollHandleId,
) -> c_int {
    run("amnet_coll_gather_all_vm", team, handle, |cx, t, b| {
        // SAFETY: the list is readable for its length (this function's contract).
        let d = unsafe { cx.list(dstlist, ndst, "dstlist") }?;
        // SAFETY: the list is readable for its length (this function's contract).
        let s = unsafe { cx.list(srclist, nsrc, "srclist") }?;
        // SAFETY: the counts are readable for their length (this function's contract).
        let n = unsafe { array(counts, ncounts, "counts") }?;
        // SAFETY: the addresses meet `raw::Collectives`' contract (this function's).
        Ok(unsafe {
            call!(
                b,
                cx.coll,
                gather_all_vm,
                gather_all_vm_nb,
                (t, &d, &s, n, flags)
            )
        }?)
    })
}

/// All-to-all with `counts[i * P + j]` bytes from participant `i` to `j` (`ncounts` = P x P;
/// each source packs its blocks in destination order, each destination in source order).
///
/// # Safety
/// - Every address and list entry the call reads or writes through is valid for the bytes the
///   operation addresses there, and not otherwise accessed, from the call until the collective
///   is synced on this rank (for good when no sync succeeds); lists and counts are readable for
///   their lengths during the call; `handle` is null or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn amnet_coll_exchange_v(
    team: TeamId,
    dst: *mut c_void,
    src: *const c_void,
    counts: *const usize,
    ncounts: usize,
    flags: u32,
    handle: *mut CollHandleId,
) -> c_int {
    run("amnet_coll_exchange_v", team, handle, |cx, t, b| {
        // SAFETY: the counts are readable for their length (this function's contract).
        let n = unsafe { array(counts, ncounts, "counts") }?;
        // SAFETY: the addresses meet `raw::Collectives`' contract (this function's).
        Ok(unsafe {
            call!(
                b,
                cx.coll,
                exchange_v,
                exchange_v_nb,
                (t, cx.addr(dst), cx.addr(src), n, flags)
            )
        }?)
    })
}

/// exchange_v with lists of `ndst` destinations and `nsrc` sources.
///
/// # Safety
/// - Every address and list entry the call reads or writes through is valid for the bytes the
///   operation addresses there, and not otherwise accessed, from the call until the collective
///   is synced on this rank (for good when no sync succeeds); lists and counts are readable for
///   their lengths during the call; `handle` is null or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn amnet_coll_exchange_vm(
    team: TeamId,
    dstlist: *const *mut c_void,
    ndst: usize,
    srclist: *const *mut c_void,
    nsrc: usize,
    counts: *const usize,
    ncounts: usize,
    flags: u32,
    handle: *mut CollHandleId,
) -> c_int {
    run("amnet_coll_exchange_vm", team, handle, |cx, t, b| {
        // SAFETY: the list is readable for its length (this function's contract).
        let d = unsafe { cx.list(dstlist, ndst, "dstlist") }?;
        // SAFETY: the list is readable for its length (this function's contract).
        let s = unsafe { cx.list(srclist, nsrc, "srclist") }?;
        // SAFETY: the counts are readable for their length (this function's contract).
        let n = unsafe { array(counts, ncounts, "counts") }?;
        // SAFETY: the addresses meet `raw::Collectives`' contract (this function's).
        Ok(unsafe {
            call!(
                b,
                cx.coll,
                exchange_vm,
                exchange_vm_nb,
                (t, &d, &s, n, flags)
            )
        }?)
    })
}

/// Reduce the `elem_count` elements of `elem_size` bytes of the distributed array at `src`
/// (block-cyclic: `src_blksz` elements per block, starting at element `src_offset`; `src_blksz`
/// 0: every element on participant `src_offset`) with function `func` (argument `func_arg`) to
/// one element at the root image's `dst`.
///
/// # Safety
/// - Every address and list entry the call reads or writes through is valid for the bytes the
///   operation addresses there, and not otherwise accessed, from the call until the collective
///   is synced on this rank (for good when no sync succeeds); lists and counts are readable for
///   their lengths during the call; `handle` is null or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn amnet_coll_reduce(
    team: TeamId,
    root: u32,
    dst: *mut c_void,
    src: *const c_void,
    src_blksz: usize,
    src_offset: usize,
    elem_size: usize,
    elem_count: usize,
    func: u32,
    func_arg: c_int,
    flags: u32,
    handle: *mut CollHandleId,
) -> c_int {
    run("amnet_coll_reduce", team, handle, |cx, t, b| {
        // SAFETY: the addresses meet `raw::Collectives`' contract (this function's).
        Ok(unsafe {
            call!(
                b,
                cx.coll,
                reduce,
                reduce_nb,
                (
                    t,
                    root,
                    cx.addr(dst),
                    cx.addr(src),
                    Layout::block_cyclic(src_blksz, src_offset),
                    elem_size,
                    elem_count,
                    func as usize,
                    func_arg as u32,
                    flags
                )
            )
        }?)
    })
}

/// reduce with a list of `nsrc` sources.
///
/// # Safety
/// - Every address and list entry the call reads or writes through is valid for the bytes the
///   operation addresses there, and not otherwise accessed, from the call until the collective
///   is synced on this rank (for good when no sync succeeds); lists and counts are readable for
///   their lengths during the call; `handle` is null or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn amnet_coll_reducem(
    team: TeamId,
    root: u32,
    dst: *mut c_void,
    srclist: *const *mut c_void,
    nsrc: usize,
    src_blksz: usize,
    src_offset: usize,
    elem_size: usize,
    elem_count: usize,
    func: u32,
    func_arg: c_int,
    flags: u32,
    handle: *mut CollHandleId,
) -> c_int {
    run("amnet_coll_reducem", team, handle, |cx, t, b| {
        // SAFETY: the list is readable for its length (this function's contract).
        let s = unsafe { cx.list(srclist, nsrc, "srclist") }?;
        // SAFETY: the addresses meet `raw::Collectives`' contract (this function's).
        Ok(unsafe {
            call!(
                b,
                cx.coll,
                reducem,
                reducem_nb,
                (
                    t,
                    root,
                    cx.addr(dst),
                    &s,
                    Layout::block_cyclic(src_blksz, src_offset),
                    elem_size,
                    elem_count,
                    func as usize,
                    func_arg as u32,
                    flags
                )
            )
        }?)
    })
}

/// reduce, with the result at every participant's `dst`.
///
/// # Safety
/// - Every address and list entry the call reads or writes through is valid for the bytes the
///   operation addresses there, and not otherwise accessed, from the call until the collective
///   is synced on this rank (for good when no sync succeeds); lists and counts are readable for
///   their lengths during the call; `handle` is null or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn amnet_coll_reduce_to_all(
    team: TeamId,
    dst: *mut c_void,
    src: *const c_void,
    src_blksz: usize,
    src_offset: usize,
    elem_size: usize,
    elem_count: usize,
    func: u32,
    func_arg: c_int,
    flags: u32,
    handle: *mut CollHandleId,
) -> c_int {
    run("amnet_coll_reduce_to_all", team, handle, |cx, t, b| {
        // SAFETY: the addresses meet `raw::Collectives`' contract (this function's).
        Ok(unsafe {
            call!(
                b,
                cx.coll,
                reduce_to_all,
                reduce_to_all_nb,
                (
                    t,
                    cx.addr(dst),
                    cx.addr(src),
                    Layout::block_cyclic(src_blksz, src_offset),
                    elem_size,
                    elem_count,
                    func as usize,
                    func_arg as u32,
                    flags
                )
            )
        }?)
    })
}

/// reduce_to_all with lists of `ndst` destinations and `nsrc` sources.
///
/// # Safety
/// - Every address and list entry the call reads or writes through is valid for the bytes the
///   operation addresses there, and not otherwise accessed, from the call until the collective
///   is synced on this rank (for good when no sync succeeds); lists and counts are readable for
///   their lengths during the call; `handle` is null or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn amnet_coll_reduce_to_allm(
    team: TeamId,
    dstlist: *const *mut c_void,
    ndst: usize,
    srclist: *const *mut c_void,
    nsrc: usize,
    src_blksz: usize,
    src_offset: usize,
    elem_size: usize,
    elem_count: usize,
    func: u32,
    func_arg: c_int,
    flags: u32,
    handle: *mut CollHandleId,
) -> c_int {
    run("amnet_coll_reduce_to_allm", team, handle, |cx, t, b| {
        // SAFETY: the list is readable for its length (this function's contract).
        let d = unsafe { cx.list(dstlist, ndst, "dstlist") }?;
        // SAFETY: the list is readable for its length (this function's contract).
        let s = unsafe { cx.list(srclist, nsrc, "srclist") }?;
        // SAFETY: the addresses meet `raw::Collectives`' contract (this function's).
        Ok(unsafe {
            call!(
                b,
                cx.coll,
                reduce_to_allm,
                reduce_to_allm_nb,
                (
                    t,
                    &d,
                    &s,
                    Layout::block_cyclic(src_blksz, src_offset),
                    elem_size,
                    elem_count,
                    func as usize,
                    func_arg as u32,
                    flags
                )
            )
        }?)
    })
}

/// Inclusive prefix reduction: element `k` of the distributed destination array (`dst`,
/// `dst_blksz`, `dst_offset`) gets the combination of source elements `0..=k` (`src`,
/// `src_blksz`, `src_offset`).
///
/// # Safety
/// - Every address and list entry the call reads or writes through is valid for the bytes the
///   operation addresses there, and not otherwise accessed, from the call until the collective
///   is synced on this rank (for good when no sync succeeds); lists and counts are readable for
///   their lengths during the call; `handle` is null or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn amnet_coll_prefix_reduce(
    team: TeamId,
    dst: *mut c_void,
    dst_blksz: usize,
    dst_offset: usize,
    src: *const c_void,
    src_blksz: usize,
    src_offset: usize,
    elem_size: usize,
    elem_count: usize,
    func: u32,
    func_arg: c_int,
    flags: u32,
    handle: *mut CollHandleId,
) -> c_int {
    run("amnet_coll_prefix_reduce", team, handle, |cx, t, b| {
        // SAFETY: the addresses meet `raw::Collectives`' contract (this function's).
        Ok(unsafe {
            call!(
                b,
                cx.coll,
                prefix_reduce,
                prefix_reduce_nb,
                (
                    t,
                    cx.addr(dst),
                    Layout::block_cyclic(dst_blksz, dst_offset),
                    cx.addr(src),
                    Layout::block_cyclic(src_blksz, src_offset),
                    elem_size,
                    elem_count,
                    func as usize,
                    func_arg as u32,
                    flags
                )
            )
        }?)
    })
}

/// prefix_reduce with lists of `ndst` destinations and `nsrc` sources.
///
/// # Safety
/// - Every address and list entry the call reads or writes through is valid for the bytes the
///   operation addresses there, and not otherwise accessed, from the call until the collective
///   is synced on this rank (for good when no sync succeeds); lists and counts are readable for
///   their lengths during the call; `handle` is null or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn amnet_coll_prefix_reducem(
    team: TeamId,
    dstlist: *const *mut c_void,
    ndst: usize,
    dst_blksz: usize,
    dst_offset: usize,
    srclist: *const *mut c_void,
    nsrc: usize,
    src_blksz: usize,
    src_offset: usize,
    elem_size: usize,
    elem_count: usize,
    func: u32,
    func_arg: c_int,
    flags: u32,
    handle: *mut CollHandleId,
) -> c_int {
    run("amnet_coll_prefix_reducem", team, handle, |cx, t, b| {
        // SAFETY: the list is readable for its length (this function's contract).
        let d = unsafe { cx.list(dstlist, ndst, "dstlist") }?;
        // SAFETY: the list is readable for its length (this function's contract).
        let s = unsafe { cx.list(srclist, nsrc, "srclist") }?;
        // SAFETY: the addresses meet `raw::Collectives`' contract (this function's).
        Ok(unsafe {
            call!(
                b,
                cx.coll,
                prefix_reducem,
                prefix_reducem_nb,
                (
                    t,
                    &d,
                    Layout::block_cyclic(dst_blksz, dst_offset),
                    &s,
                    Layout::block_cyclic(src_blksz, src_offset),
                    elem_size,
                    elem_count,
                    func as usize,
                    func_arg as u32,
                    flags
                )
            )
        }?)
    })
}

/// Exclusive prefix reduction: element `k > 0` gets source elements `0..k`; element 0 is left
/// unchanged.
///
/// # Safety
/// - Every address and list entry the call reads or writes through is valid for the bytes the
///   operation addresses there, and not otherwise accessed, from the call until the collective
///   is synced on this rank (for good when no sync succeeds); lists and counts are readable for
///   their lengths during the call; `handle` is null or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn amnet_coll_exclusive_prefix_reduce(
    team: TeamId,
    dst: *mut c_void,
    dst_blksz: usize,
    dst_offset: usize,
    src: *const c_void,
    src_blksz: usize,
    src_offset: usize,
    elem_size: usize,
    elem_count: usize,
    func: u32,
    func_arg: c_int,
    flags: u32,
    handle: *mut CollHandleId,
) -> c_int {
    run(
        "amnet_coll_exclusive_prefix_reduce",
        team,
        handle,
        |cx, t, b| {
            // SAFETY: the addresses meet `raw::Collectives`' contract (this function's).
            Ok(unsafe {
                call!(
                    b,
                    cx.coll,
                    exclusive_prefix_reduce,
                    exclusive_prefix_reduce_nb,
                    (
                        t,
                        cx.addr(dst),
                        Layout::block_cyclic(dst_blksz, dst_offset),
                        cx.addr(src),
                        Layout::block_cyclic(src_blksz, src_offset),
                        elem_size,
                        elem_count,
                        func as usize,
                        func_arg as u32,
                        flags
                    )
                )
            }?)
        },
    )
}

/// exclusive_prefix_reduce with lists of `ndst` destinations and `nsrc` sources.
///
/// # Safety
/// - Every address and list entry the call reads or writes through is valid for the bytes the
///   operation addresses there, and not otherwise accessed, from the call until the collective
///   is synced on this rank (for good when no sync succeeds); lists and counts are readable for
///   their lengths during the call; `handle` is null or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn amnet_coll_exclusive_prefix_reducem(
    team: TeamId,
    dstlist: *const *mut c_void,
    ndst: usize,
    dst_blksz: usize,
    dst_offset: usize,
    srclist: *const *mut c_void,
    nsrc: usize,
    src_blksz: usize,
    src_offset: usize,
    elem_size: usize,
    elem_count: usize,
    func: u32,
    func_arg: c_int,
    flags: u32,
    handle: *mut CollHandleId,
) -> c_int {
    run(
        "amnet_coll_exclusive_prefix_reducem",
        team,
        handle,
        |cx, t, b| {
            // SAFETY: the list is readable for its length (this function's contract).
            let d = unsafe { cx.list(dstlist, ndst, "dstlist") }?;
            // SAFETY: the list is readable for its length (this function's contract).
            let s = unsafe { cx.list(srclist, nsrc, "srclist") }?;
            // SAFETY: the addresses meet `raw::Collectives`' contract (this function's).
            Ok(unsafe {
                call!(
                    b,
                    cx.coll,
                    exclusive_prefix_reducem,
                    exclusive_prefix_reducem_nb,
                    (
                        t,
                        &d,
                        Layout::block_cyclic(dst_blksz, dst_offset),
                        &s,
                        Layout::block_cyclic(src_blksz, src_offset),
                        elem_size,
                        elem_count,
                        func as usize,
                        func_arg as u32,
                        flags
                    )
                )
            }?)
        },
    )
}

/// Vector reduction (MPI's reduce): element `i` of the root image's `dst` gets `src_0[i] op
/// src_1[i] op ...` over the `count` elements of `elem_size` bytes at every participant's
/// `src`, in participant order. `AMNET_COLL_IN_PLACE` as the root's `src` takes its operands
/// from its `dst`.
///
/// # Safety
/// - Every address and list entry the call reads or writes through is valid for the bytes the
///   operation addresses there, and not otherwise accessed, from the call until the collective
///   is synced on this rank (for good when no sync succeeds); lists and counts are readable for
///   their lengths during the call; `handle` is null or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn amnet_coll_reduce_elems(
    team: TeamId,
    root: u32,
    dst: *mut c_void,
    src: *const c_void,
    elem_size: usize,
    count: usize,
    func: u32,
    func_arg: c_int,
    flags: u32,
    handle: *mut CollHandleId,
) -> c_int {
    run("amnet_coll_reduce_elems", team, handle, |cx, t, b| {
        // SAFETY: the addresses meet `raw::Collectives`' contract (this function's).
        Ok(unsafe {
            call!(
                b,
                cx.coll,
                reduce_elems,
                reduce_elems_nb,
                (
                    t,
                    root,
                    cx.addr(dst),
                    cx.addr(src),
                    elem_size,
                    count,
                    func as usize,
                    func_arg as u32,
                    flags
                )
            )
        }?)
    })
}

/// Vector reduction to every participant (MPI's allreduce); `AMNET_COLL_IN_PLACE` as `src`
/// takes a participant's operands from its `dst`.
///
/// # Safety
/// - Every address and list entry the call reads or writes through is valid for the bytes the
///   operation addresses there, and not otherwise accessed, from the call until the collective
///   is synced on this rank (for good when no sync succeeds); lists and counts are readable for
///   their lengths during the call; `handle` is null or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn amnet_coll_reduce_elems_to_all(
    team: TeamId,
    dst: *mut c_void,
    src: *const c_void,
    elem_size: usize,
    count: usize,
    func: u32,
    func_arg: c_int,
    flags: u32,
    handle: *mut CollHandleId,
) -> c_int {
    run(
        "amnet_coll_reduce_elems_to_all",
        team,
        handle,
        |cx, t, b| {
            // SAFETY: the addresses meet `raw::Collectives`' contract (this function's).
            Ok(unsafe {
                call!(
                    b,
                    cx.coll,
                    reduce_elems_to_all,
                    reduce_elems_to_all_nb,
                    (
                        t,
                        cx.addr(dst),
                        cx.addr(src),
                        elem_size,
                        count,
                        func as usize,
                        func_arg as u32,
                        flags
                    )
                )
            }?)
        },
    )
}

/// Inclusive vector scan (MPI's scan): element `i` of participant `p`'s `dst` gets `src_0[i] op
/// ... op src_p[i]`.
///
/// # Safety
/// - Every address and list entry the call reads or writes through is valid for the bytes the
///   operation addresses there, and not otherwise accessed, from the call until the collective
///   is synced on this rank (for good when no sync succeeds); lists and counts are readable for
///   their lengths during the call; `handle` is null or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn amnet_coll_scan_elems(
    team: TeamId,
    dst: *mut c_void,
    src: *const c_void,
    elem_size: usize,
    count: usize,
    func: u32,
    func_arg: c_int,
    flags: u32,
    handle: *mut CollHandleId,
) -> c_int {
    run("amnet_coll_scan_elems", team, handle, |cx, t, b| {
        // SAFETY: the addresses meet `raw::Collectives`' contract (this function's).
        Ok(unsafe {
            call!(
                b,
                cx.coll,
                scan_elems,
                scan_elems_nb,
                (
                    t,
                    cx.addr(dst),
                    cx.addr(src),
                    elem_size,
                    count,
                    func as usize,
                    func_arg as u32,
                    flags
                )
            )
        }?)
    })
}

/// Exclusive vector scan (MPI's exscan): participant `p > 0` gets `src_0[i] op ... op
/// src_{p-1}[i]`; participant 0's `dst` is left unchanged.
///
/// # Safety
/// - Every address and list entry the call reads or writes through is valid for the bytes the
///   operation addresses there, and not otherwise accessed, from the call until the collective
///   is synced on this rank (for good when no sync succeeds); lists and counts are readable for
///   their lengths during the call; `handle` is null or valid for a write.
#[no_mangle]
pub unsafe extern "C" fn amnet_coll_exclusive_scan_elems(
    team: TeamId,
    dst: *mut c_void,
    src: *const c_void,
    elem_size: usize,
    count: usize,
    func: u32,
    func_arg: c_int,
    flags: u32,
    handle: *mut CollHandleId,
) -> c_int {
    run(
        "amnet_coll_exclusive_scan_elems",
        team,
        handle,
        |cx, t, b| {
            // SAFETY: the addresses meet `raw::Collectives`' contract (this function's).
            Ok(unsafe {
                call!(
                    b,
                    cx.coll,
                    exclusive_scan_elems,
                    exclusive_scan_elems_nb,
                    (
                        t,
                        cx.addr(dst),
                        cx.addr(src),
                        elem_size,
                        count,
                        func as usize,
                        func_arg as u32,
                        flags
                    )
                )
            }?)
        },
    )
}
