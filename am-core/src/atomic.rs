//! Remote atomic operations (spec/core.md §7a): atomic domains of one element type and a set of
//! operations, created collectively, whose operations on segment elements are atomic with
//! respect to each other on every conduit.
//!
//! Every path ends in the processor's atomic instructions on the element itself: a rank whose
//! segment is mapped here (smp) or this rank's own segment is operated on directly; any other
//! rank receives a Short request (library handler [`ATOMIC`](crate::handlers::ATOMIC)) that its
//! handler performs on its own segment, and answers with the value read. Since the instructions
//! are the same on every path, operations that reach one element by different paths are still
//! atomic with respect to each other. A request names its pending operation by a
//! generation-checked id, never by an address, and a reply that names no live operation is
//! dropped and counted.

use std::fmt;
use std::future::Future;
use std::marker::PhantomData;
use std::pin::Pin;
use std::sync::atomic::Ordering::SeqCst;
use std::sync::atomic::{AtomicI32, AtomicI64, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use crate::conduit::{Category, OutMsg};
use crate::endpoint::{join64, seg_off, split64, Attached, Endpoint};
use crate::handler::{HandlerTable, Token};
use crate::handlers::{ATOMIC, ATOMIC_REPLY};
use crate::rma::{stray, Handle, OpState, ReplyKind, Waiting};
use crate::{Error, Rank, Result};

/// The element type of an atomic domain.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AtomicType {
    /// `i32`.
    I32,
    /// `u32`.
    U32,
    /// `i64`.
    I64,
    /// `u64`.
    U64,
    /// `f32`.
    F32,
    /// `f64`.
    F64,
}

impl AtomicType {
    /// Every element type, in code order.
    pub const ALL: [AtomicType; 6] = [
        AtomicType::I32,
        AtomicType::U32,
        AtomicType::I64,
        AtomicType::U64,
        AtomicType::F32,
        AtomicType::F64,
    ];

    /// Bytes per element (also the alignment an element's offset needs).
    pub const fn size(self) -> usize {
        match self {
            AtomicType::I32 | AtomicType::U32 | AtomicType::F32 => 4,
            AtomicType::I64 | AtomicType::U64 | AtomicType::F64 => 8,
        }
    }

    /// The Rust name of the type.
    pub const fn name(self) -> &'static str {
        match self {
            AtomicType::I32 => "i32",
            AtomicType::U32 => "u32",
            AtomicType::I64 => "i64",
            AtomicType::U64 => "u64",
            AtomicType::F32 => "f32",
            AtomicType::F64 => "f64",
        }
    }

    /// True for the floating-point types (which have no bitwise operations).
    pub const fn is_float(self) -> bool {
        matches!(self, AtomicType::F32 | AtomicType::F64)
    }

    const fn code(self) -> u32 {
        self as u32
    }

    fn from_code(c: u32) -> Option<AtomicType> {
        AtomicType::ALL.get(c as usize).copied()
    }
}

mod sealed {
    pub trait Sealed {}
}

/// An element type of atomic domains: `i32`, `u32`, `i64`, `u64`, `f32` or `f64`.
pub trait AtomicElem:
    sealed::Sealed + Copy + PartialEq + fmt::Debug + Send + Sync + 'static
{
    /// The type's code.
    const TYPE: AtomicType;
    /// The value's bits, zero-extended to 64.
    fn to_bits(self) -> u64;
    /// The value whose bits are the low bits of `bits`.
    fn from_bits(bits: u64) -> Self;
}

macro_rules! elem {
    ($t:ty, $ty:ident, |$v:ident| $to:expr, |$b:ident| $from:expr) => {
        impl sealed::Sealed for $t {}
        impl AtomicElem for $t {
            const TYPE: AtomicType = AtomicType::$ty;
            #[inline]
            fn to_bits(self) -> u64 {
                let $v = self;
                $to
            }
            #[inline]
            #[allow(clippy::cast_possible_truncation, clippy::cast_possible_wrap)]
            fn from_bits($b: u64) -> Self {
                $from
            }
        }
    };
}

elem!(i32, I32, |v| u64::from(v as u32), |b| b as u32 as i32);
elem!(u32, U32, |v| u64::from(v), |b| b as u32);
elem!(i64, I64, |v| v as u64, |b| b as i64);
elem!(u64, U64, |v| v, |b| b);
elem!(f32, F32, |v| u64::from(v.to_bits()), |b| f32::from_bits(
    b as u32
));
elem!(f64, F64, |v| v.to_bits(), |b| f64::from_bits(b));

/// An atomic operation. Each may be issued in fetching form (the call returns the element's
/// value before the operation) or not, except [`AtomicOp::Get`], which is fetching only.
/// The operands `a` and `b` of a call are used as each variant says and ignored otherwise.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AtomicOp {
    /// Read the element.
    Get,
    /// Write `a`.
    Set,
    /// Write `a` (fetching: the value it replaced).
    Swap,
    /// Write `b` if the element equals `a` (bit patterns compared, also for floats).
    CompareSwap,
    /// Add `a` (integers wrap around).
    Add,
    /// Subtract `a` (integers wrap around).
    Sub,
    /// Add one.
    Inc,
    /// Subtract one.
    Dec,
    /// Bitwise and with `a` (integer types).
    And,
    /// Bitwise or with `a` (integer types).
    Or,
    /// Bitwise exclusive or with `a` (integer types).
    Xor,
    /// Keep the smaller of the element and `a` (floats: as `f64::min`, a NaN loses).
    Min,
    /// Keep the larger of the element and `a` (floats: as `f64::max`, a NaN loses).
    Max,
}

impl AtomicOp {
    /// Every operation, in code order.
    pub const ALL: [AtomicOp; 13] = [
        AtomicOp::Get,
        AtomicOp::Set,
        AtomicOp::Swap,
        AtomicOp::CompareSwap,
        AtomicOp::Add,
        AtomicOp::Sub,
        AtomicOp::Inc,
        AtomicOp::Dec,
        AtomicOp::And,
        AtomicOp::Or,
        AtomicOp::Xor,
        AtomicOp::Min,
        AtomicOp::Max,
    ];

    /// The operation's name, for messages.
    pub const fn name(self) -> &'static str {
        match self {
            AtomicOp::Get => "get",
            AtomicOp::Set => "set",
            AtomicOp::Swap => "swap",
            AtomicOp::CompareSwap => "compare_swap",
            AtomicOp::Add => "add",
            AtomicOp::Sub => "sub",
            AtomicOp::Inc => "inc",
            AtomicOp::Dec => "dec",
            AtomicOp::And => "and",
            AtomicOp::Or => "or",
            AtomicOp::Xor => "xor",
            AtomicOp::Min => "min",
            AtomicOp::Max => "max",
        }
    }

    /// True for the bitwise operations, which floating-point domains do not have.
    pub const fn is_bitwise(self) -> bool {
        matches!(self, AtomicOp::And | AtomicOp::Or | AtomicOp::Xor)
    }

    const fn code(self) -> u32 {
        self as u32
    }

    fn from_code(c: u32) -> Option<AtomicOp> {
        AtomicOp::ALL.get(c as usize).copied()
    }
}

/// A set of [`AtomicOp`]s: the operations an atomic domain allows.
#[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct AtomicOps(u32);

impl AtomicOps {
    /// No operation.
    pub const NONE: AtomicOps = AtomicOps(0);
    /// Every operation (the bitwise ones are refused for floating-point domains).
    pub const ALL: AtomicOps = AtomicOps((1 << AtomicOp::ALL.len()) - 1);
    /// Every operation but the bitwise ones (what a floating-point domain may have).
    pub const ARITHMETIC: AtomicOps = AtomicOps(
        AtomicOps::ALL.0
            & !(1 << AtomicOp::And.code() | 1 << AtomicOp::Or.code() | 1 << AtomicOp::Xor.code()),
    );

    /// The set of the operations listed.
    pub fn of(ops: &[AtomicOp]) -> AtomicOps {
        ops.iter().fold(AtomicOps::NONE, |s, &o| s.with(o))
    }

    /// This set and `op`.
    pub const fn with(self, op: AtomicOp) -> AtomicOps {
        AtomicOps(self.0 | 1 << op.code())
    }

    /// True when `op` is in the set.
    pub const fn contains(self, op: AtomicOp) -> bool {
        self.0 & (1 << op.code()) != 0
    }

    /// The operations of the set, in code order.
    pub fn iter(self) -> impl Iterator<Item = AtomicOp> {
        AtomicOp::ALL.into_iter().filter(move |&o| self.contains(o))
    }
}

impl fmt::Debug for AtomicOps {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_set()
            .entries(self.iter().map(AtomicOp::name))
            .finish()
    }
}

impl From<AtomicOp> for AtomicOps {
    fn from(op: AtomicOp) -> AtomicOps {
        AtomicOps::NONE.with(op)
    }
}

impl std::ops::BitOr for AtomicOps {
    type Output = AtomicOps;
    fn bitor(self, o: AtomicOps) -> AtomicOps {
        AtomicOps(self.0 | o.0)
    }
}

impl std::ops::BitOr<AtomicOp> for AtomicOps {
    type Output = AtomicOps;
    fn bitor(self, o: AtomicOp) -> AtomicOps {
        self.with(o)
    }
}

/// Integer operations on the element at `p` (type `$t`, atomic type `$at`).
macro_rules! int_apply {
    ($at:ty, $t:ty, $p:expr, $op:expr, $a:expr, $b:expr) => {{
        // SAFETY: the caller of `apply_at` passes an element valid and aligned for `$t` that
        // is accessed only atomically while this runs.
        let x = unsafe { <$at>::from_ptr($p.cast::<$t>()) };
        let a = <$t as AtomicElem>::from_bits($a);
        let b = <$t as AtomicElem>::from_bits($b);
        let old: $t = match $op {
            AtomicOp::Get => x.load(SeqCst),
            AtomicOp::Set | AtomicOp::Swap => x.swap(a, SeqCst),
            AtomicOp::CompareSwap => match x.compare_exchange(a, b, SeqCst, SeqCst) {
                Ok(v) | Err(v) => v,
            },
            AtomicOp::Add => x.fetch_add(a, SeqCst),
            AtomicOp::Sub => x.fetch_sub(a, SeqCst),
            AtomicOp::Inc => x.fetch_add(1, SeqCst),
            AtomicOp::Dec => x.fetch_sub(1, SeqCst),
            AtomicOp::And => x.fetch_and(a, SeqCst),
            AtomicOp::Or => x.fetch_or(a, SeqCst),
            AtomicOp::Xor => x.fetch_xor(a, SeqCst),
            AtomicOp::Min => x.fetch_min(a, SeqCst),
            AtomicOp::Max => x.fetch_max(a, SeqCst),
        };
        old.to_bits()
    }};
}

/// Floating-point operations on the element at `p` (float `$f`, bits `$u` in atomic `$at`).
macro_rules! float_apply {
    ($at:ty, $u:ty, $f:ty, $p:expr, $op:expr, $a:expr, $b:expr) => {{
        // SAFETY: as in `int_apply`.
        let x = unsafe { <$at>::from_ptr($p.cast::<$u>()) };
        let a = <$f as AtomicElem>::from_bits($a);
        let (abits, bbits) = (a.to_bits(), <$f as AtomicElem>::from_bits($b).to_bits());
        let new = |cur: $u| -> $u {
            let c = <$f>::from_bits(cur);
            match $op {
                AtomicOp::Add => c + a,
                AtomicOp::Sub => c - a,
                AtomicOp::Inc => c + 1.0,
                AtomicOp::Dec => c - 1.0,
                AtomicOp::Min => c.min(a),
                AtomicOp::Max => c.max(a),
                // Bitwise operations are refused for floating-point domains; no change.
                _ => c,
            }
            .to_bits()
        };
        let old: $u = match $op {
            AtomicOp::Get => x.load(SeqCst),
            AtomicOp::Set | AtomicOp::Swap => x.swap(abits, SeqCst),
            AtomicOp::CompareSwap => match x.compare_exchange(abits, bbits, SeqCst, SeqCst) {
                Ok(v) | Err(v) => v,
            },
            _ => match x.fetch_update(SeqCst, SeqCst, |c| Some(new(c))) {
                Ok(v) | Err(v) => v,
            },
        };
        u64::from(old)
    }};
}

/// Performs `op` on the element of type `ty` at `p` with operands `a`, `b` (bits); returns the
/// bits of the element's value before the operation.
///
/// # Safety
/// `p` must be valid for reads and writes of `ty.size()` bytes, aligned to `ty.size()`, and
/// every access to the element while this runs must be atomic.
unsafe fn apply_at(p: *mut u8, ty: AtomicType, op: AtomicOp, a: u64, b: u64) -> u64 {
    match ty {
        AtomicType::I32 => int_apply!(AtomicI32, i32, p, op, a, b),
        AtomicType::U32 => int_apply!(AtomicU32, u32, p, op, a, b),
        AtomicType::I64 => int_apply!(AtomicI64, i64, p, op, a, b),
        AtomicType::U64 => int_apply!(AtomicU64, u64, p, op, a, b),
        AtomicType::F32 => float_apply!(AtomicU32, u32, f32, p, op, a, b),
        AtomicType::F64 => float_apply!(AtomicU64, u64, f64, p, op, a, b),
    }
}

/// Why a target refused an atomic request (the status word of the reply).
const ST_OK: u32 = 0;
const ST_RANGE: u32 = 1;
const ST_ALIGN: u32 = 2;
const ST_CODE: u32 = 3;

/// The request's operation word: the type's code in the low byte, the operation's above.
fn op_word(ty: AtomicType, op: AtomicOp) -> u32 {
    ty.code() | op.code() << 8
}

/// The element of `ty` at `off` in the segment at `base` (`seg_len` bytes), when it lies
/// inside and is aligned; the status to report otherwise.
fn element(
    base: *mut u8,
    seg_len: usize,
    off: u64,
    ty: AtomicType,
) -> std::result::Result<*mut u8, u32> {
    let size = ty.size();
    match off.checked_add(size as u64) {
        Some(end) if end <= seg_len as u64 => {}
        _ => return Err(ST_RANGE),
    }
    // SAFETY: `off + size <= seg_len`, so the pointer stays inside the segment.
    let p = unsafe { base.add(seg_off(off)) };
    if (p as usize) % size != 0 {
        return Err(ST_ALIGN);
    }
    Ok(p)
}

pub(crate) fn register_handlers(t: &mut HandlerTable) -> Result<()> {
    t.insert(ATOMIC, Box::new(atomic_handler))?;
    t.insert(ATOMIC_REPLY, Box::new(atomic_reply_handler))?;
    Ok(())
}

/// A request: `[id_lo, id_hi, off_lo, off_hi, op word, a_lo, a_hi, b_lo, b_hi]`. Performs the
/// operation on this rank's segment and replies `[id_lo, id_hi, status, old_lo, old_hi]`.
fn atomic_handler(tok: &mut Token<'_>, args: &[u32], _payload: &[u8]) {
    let &[id_lo, id_hi, off_lo, off_hi, word, a_lo, a_hi, b_lo, b_hi] = args else {
        crate::diag!(
            "amnet rank {}: dropped an atomic request from rank {} with {} arguments (9 expected)",
            tok.endpoint().rank(),
            tok.src(),
            args.len()
        );
        return;
    };
    let ep = tok.endpoint();
    let Ok(att) = ep.attached_for("atomic") else {
        return;
    };
    let ty = AtomicType::from_code(word & 0xff);
    let op = AtomicOp::from_code((word >> 8) & 0xff);
    let (status, old) = match (ty, op) {
        (Some(ty), Some(op)) if !(ty.is_float() && op.is_bitwise()) => {
            let seg_len = att.seg_lens[ep.rank() as usize];
            match element(att.seg.base, seg_len, join64(off_lo, off_hi), ty) {
                // SAFETY: the element lies inside this rank's mapped segment and is aligned;
                // every atomic operation on segment elements goes through `apply_at`.
                Ok(p) => (ST_OK, unsafe {
                    apply_at(p, ty, op, join64(a_lo, a_hi), join64(b_lo, b_hi))
                }),
                Err(st) => (st, 0),
            }
        }
        _ => (ST_CODE, 0),
    };
    let (lo, hi) = split64(old);
    if let Err(e) = tok.reply(
        ATOMIC_REPLY,
        Category::Short,
        &[id_lo, id_hi, status, lo, hi],
        &[],
        0,
        true,
    ) {
        crate::diag!("amnet: atomic reply failed: {e}");
    }
}

fn atomic_reply_handler(tok: &mut Token<'_>, args: &[u32], _payload: &[u8]) {
    let chunk = match (args, tok.endpoint().attached_for("atomic")) {
        (&[lo, hi, _, _, _], Ok(att)) => att.pending.take([lo, hi], tok.src(), ReplyKind::Atomic),
        _ => None,
    };
    let Some(c) = chunk else {
        return stray(tok, "atomic reply");
    };
    match args[2] {
        ST_OK => {
            c.op.result
                .store(join64(args[3], args[4]), Ordering::Relaxed)
        }
        st => c.op.fail(format!(
            "atomic operation at rank {}: {}",
            tok.src(),
            match st {
                ST_RANGE => "the element lies outside the target's segment",
                ST_ALIGN => "the target's element is not aligned to its size",
                ST_CODE => "the target does not know the element type or operation",
                _ => "the target refused it",
            }
        )),
    }
    c.op.complete_one();
}

/// An atomic domain: atomic operations on elements of type `T` in any rank's segment, limited
/// to the operations it was created with. Created collectively by
/// [`Endpoint::atomic_domain`]; cheap to clone, and usable from any thread of the rank.
#[derive(Clone)]
pub struct AtomicDomain<T: AtomicElem> {
    ep: Endpoint,
    ops: AtomicOps,
    /// The conduit's native atomics when it offloads this domain: then every operation,
    /// this rank's own included, goes through them.
    native: Option<Arc<dyn crate::NativeAtomics>>,
    _t: PhantomData<fn() -> T>,
}

impl<T: AtomicElem> fmt::Debug for AtomicDomain<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AtomicDomain")
            .field("type", &T::TYPE.name())
            .field("ops", &self.ops)
            .field("offloaded", &self.native.is_some())
            .finish()
    }
}

/// An outstanding fetching atomic operation: [`AtomicDomain::wait`] or
/// [`AtomicDomain::try_wait`] give the value it fetched.
#[derive(Debug)]
#[must_use = "a fetching operation's handle must be waited on to get its value"]
pub struct AtomicHandle<T: AtomicElem> {
    /// The operation still in flight, or None when `value` holds the result.
    op: Option<Arc<OpState>>,
    value: u64,
    _t: PhantomData<fn() -> T>,
}

/// A future that completes with a fetching operation's value
/// ([`AtomicDomain::fetch_future`]; woken as [`SyncFuture`](crate::SyncFuture) is).
#[derive(Debug)]
#[must_use = "futures do nothing unless awaited"]
pub struct AtomicFuture<T: AtomicElem> {
    ad: AtomicDomain<T>,
    h: AtomicHandle<T>,
}

impl<T: AtomicElem> Future for AtomicFuture<T> {
    type Output = Result<T>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<T>> {
        let this = self.get_mut();
        if let Some(op) = &this.h.op {
            op.set_waker(cx.waker());
        }
        match this.ad.try_wait(&mut this.h) {
            Ok(Some(v)) => Poll::Ready(Ok(v)),
            Err(e) => Poll::Ready(Err(e)),
            Ok(None) => {
                if !this.ad.ep.progress_thread_running() {
                    cx.waker().wake_by_ref();
                }
                Poll::Pending
            }
        }
    }
}

/// What starting an operation produced.
enum Started {
    /// Complete, with the bits of the value read.
    Done(u64),
    /// In flight (an AM round trip).
    Pending(Arc<OpState>),
}

impl Endpoint {
    /// Collective: an atomic domain for elements of type `T` allowing `ops`. Every rank must
    /// create its domains in the same order with the same `T` and `ops`; ranks that disagree
    /// all get [`Error::Mismatch`]. The bitwise operations are refused for `f32` and `f64`
    /// (`Error::Usage`, after the collective part).
    pub fn atomic_domain<T: AtomicElem>(&self, ops: AtomicOps) -> Result<AtomicDomain<T>> {
        self.attached_for("atomic_domain")?;
        crate::endpoint::not_in_handler("atomic_domain")?;
        // A floating-point domain with a bitwise operation is refused, after the collective
        // part (so that ranks passing it do not leave the others waiting), under a barrier
        // name of its own.
        let refused = if T::TYPE.is_float() {
            ops.iter().find(|o| o.is_bitwise())
        } else {
            None
        };
        // A domain the conduit's native atomics run whole goes through them (spec/core.md
        // §7a).
        let native = self
            .attached_for("atomic_domain")?
            .native_atomics
            .clone()
            .filter(|n| refused.is_none() && n.offloads(T::TYPE, ops));
        // The barrier's name carries the type, the operations and whether the conduit
        // offloads them: ranks that disagree mismatch.
        let sig = T::TYPE.code() << 16
            | ops.0
            | u32::from(native.is_some()) << 30
            | u32::from(refused.is_some()) << 31;
        let agreed = self.barrier_agree(sig);
        if let (Some(op), Ok(())) = (refused, &agreed) {
            return Err(Error::Usage {
                op: "atomic_domain",
                detail: format!(
                    "{} has no bitwise operations: `{}` is not allowed in an {} domain \
                     (AtomicOps::ARITHMETIC is every operation it may have)",
                    T::TYPE.name(),
                    op.name(),
                    T::TYPE.name()
                ),
            });
        }
        match agreed {
            Ok(()) => Ok(AtomicDomain {
                ep: self.clone(),
                ops,
                native,
                _t: PhantomData,
            }),
            Err(Error::BarrierMismatch { detail }) => Err(Error::Mismatch {
                what: "atomic_domain (element type and operations)",
                detail: format!(
                    "this rank asked for {} {:?}{}; the ranks' barrier names differ ({detail})",
                    T::TYPE.name(),
                    ops,
                    if native.is_some() {
                        ", which its conduit offloads"
                    } else {
                        ""
                    }
                ),
            }),
            Err(e) => Err(e),
        }
    }
}

impl<T: AtomicElem> AtomicDomain<T> {
    /// The operations this domain allows.
    pub fn ops(&self) -> AtomicOps {
        self.ops
    }

    /// True when the conduit's transport runs this domain's operations (spec/core.md §7a:
    /// ibv's HCA atomics for 64-bit integer domains of fetch-and-add and compare-and-swap
    /// kinds).
    pub fn offloaded(&self) -> bool {
        self.native.is_some()
    }

    /// The endpoint the domain belongs to.
    pub fn endpoint(&self) -> &Endpoint {
        &self.ep
    }

    /// Checks a call and returns the attachment.
    fn check(
        &self,
        call: &'static str,
        rank: Rank,
        offset: u64,
        op: AtomicOp,
        fetching: bool,
    ) -> Result<&Attached> {
        let ty = T::TYPE;
        let att = self.ep.rma_check(call, rank, offset, ty.size())?;
        let usage = |detail: String| Err(Error::Usage { op: call, detail });
        if !self.ops.contains(op) {
            return usage(format!(
                "`{}` is not one of this {} domain's operations {:?}",
                op.name(),
                ty.name(),
                self.ops
            ));
        }
        if !fetching && op == AtomicOp::Get {
            return usage("`get` only fetches: use a fetching call".to_string());
        }
        if offset % ty.size() as u64 != 0 {
            return usage(format!(
                "offset {offset} at rank {rank} is not a multiple of {} (an {} element's size \
                 and alignment)",
                ty.size(),
                ty.name()
            ));
        }
        Ok(att)
    }

    /// Starts `op`; `track` gives the operation state an AM round trip counts in.
    #[allow(clippy::too_many_arguments)]
    fn start(
        &self,
        call: &'static str,
        rank: Rank,
        offset: u64,
        op: AtomicOp,
        operands: (T, T),
        fetching: bool,
        track: impl FnOnce() -> Arc<OpState>,
    ) -> Result<Started> {
        let att = self.check(call, rank, offset, op, fetching)?;
        let ty = T::TYPE;
        let (a, b) = (operands.0.to_bits(), operands.1.to_bits());
        if let Some(n) = &self.native {
            return Ok(Started::Done(n.fetch(rank, offset, ty, op, a, b)?));
        }
        let me = self.ep.rank();
        let base = match att.peers[rank as usize] {
            Some(p) => Some(p.0),
            None if rank == me => Some(att.seg.base),
            None => None,
        };
        if let Some(base) = base {
            let p = element(base, att.seg_lens[rank as usize], offset, ty).map_err(|_| {
                Error::Usage {
                    op: call,
                    detail: format!(
                        "rank {rank}'s segment is mapped at an address that leaves offset \
                         {offset} unaligned for an {} element",
                        ty.name()
                    ),
                }
            })?;
            // SAFETY: `element` checked that the element lies inside `rank`'s segment, mapped
            // here for the endpoint's life, and is aligned; atomic operations on segment
            // elements all go through `apply_at` (spec/core.md §7a: plain put/get racing with
            // them get no atomicity).
            return Ok(Started::Done(unsafe { apply_at(p, ty, op, a, b) }));
        }
        let st = track();
        let id = att.pending.arm(&st, rank, Waiting::Atomic);
        let (off_lo, off_hi) = split64(offset);
        let (a_lo, a_hi) = split64(a);
        let (b_lo, b_hi) = split64(b);
        let args = [
            id[0],
            id[1],
            off_lo,
            off_hi,
            op_word(ty, op),
            a_lo,
            a_hi,
            b_lo,
            b_hi,
        ];
        let msg = OutMsg {
            handler: ATOMIC,
            category: Category::Short,
            is_reply: false,
            args: &args,
            payload: &[],
            long_offset: 0,
        };
        if let Err(e) = self.ep.lib_request(rank, &msg) {
            // Not sent: nothing will answer it.
            if att.pending.take(id, rank, ReplyKind::Atomic).is_some() {
                st.remaining.fetch_sub(1, Ordering::Release);
            }
            return Err(e);
        }
        Ok(Started::Pending(st))
    }

    /// Blocking fetching operation: performs `op` on the element at `offset` in `rank`'s
    /// segment and returns its value before the operation. Operands as [`AtomicOp`] says.
    pub fn fetch(&self, rank: Rank, offset: u64, op: AtomicOp, a: T, b: T) -> Result<T> {
        match self.start("atomic fetch", rank, offset, op, (a, b), true, || {
            self.ep.new_op()
        })? {
            Started::Done(v) => Ok(T::from_bits(v)),
            Started::Pending(st) => {
                self.ep.wait_op(&st)?;
                Ok(T::from_bits(st.result.load(Ordering::Relaxed)))
            }
        }
    }

    /// Blocking non-fetching operation: complete at the target on return.
    pub fn apply(&self, rank: Rank, offset: u64, op: AtomicOp, a: T, b: T) -> Result<()> {
        match self.start("atomic apply", rank, offset, op, (a, b), false, || {
            self.ep.new_op()
        })? {
            Started::Done(_) => Ok(()),
            Started::Pending(st) => self.ep.wait_op(&st),
        }
    }

    /// Non-blocking fetching operation; the handle gives the value.
    pub fn fetch_nb(
        &self,
        rank: Rank,
        offset: u64,
        op: AtomicOp,
        a: T,
        b: T,
    ) -> Result<AtomicHandle<T>> {
        let s = self.start("atomic fetch_nb", rank, offset, op, (a, b), true, || {
            self.ep.new_op()
        })?;
        Ok(match s {
            Started::Done(v) => AtomicHandle {
                op: None,
                value: v,
                _t: PhantomData,
            },
            Started::Pending(st) => AtomicHandle {
                op: Some(st),
                value: 0,
                _t: PhantomData,
            },
        })
    }

    /// Non-blocking non-fetching operation with an explicit handle (synced with
    /// [`Endpoint::wait_sync`] and the other handle calls, like a put's).
    pub fn apply_nb(&self, rank: Rank, offset: u64, op: AtomicOp, a: T, b: T) -> Result<Handle> {
        let s = self.start("atomic apply_nb", rank, offset, op, (a, b), false, || {
            self.ep.new_op()
        })?;
        Ok(match s {
            Started::Done(_) => Handle::INVALID,
            Started::Pending(st) => Handle { op: Some(st) },
        })
    }

    /// Non-blocking non-fetching operation with an implicit handle (synced with
    /// [`Endpoint::wait_sync_nbi`] or an access region, like `put_nbi`).
    pub fn apply_nbi(&self, rank: Rank, offset: u64, op: AtomicOp, a: T, b: T) -> Result<()> {
        self.start("atomic apply_nbi", rank, offset, op, (a, b), false, || {
            self.ep.nbi_target()
        })?;
        Ok(())
    }

    fn check_handle(&self, h: &AtomicHandle<T>) -> Result<()> {
        match &h.op {
            Some(op) if op.ep_id != self.ep.inner.id => Err(Error::BadHandle(
                "the atomic handle belongs to another endpoint",
            )),
            _ => Ok(()),
        }
    }

    /// Non-blocking check of a fetching operation: its value once complete (polls once).
    pub fn try_wait(&self, h: &mut AtomicHandle<T>) -> Result<Option<T>> {
        crate::endpoint::not_in_handler("atomic try_wait")?;
        self.check_handle(h)?;
        let Some(op) = &h.op else {
            return Ok(Some(T::from_bits(h.value)));
        };
        // Polls even when the operation is complete, as every try-sync does.
        self.ep.poll_inner(false)?;
        if !op.done() {
            return Ok(None);
        }
        let r = self.ep.outcome(op);
        h.value = op.result.load(Ordering::Relaxed);
        h.op = None;
        r.map(|()| Some(T::from_bits(h.value)))
    }

    /// Wait for a fetching operation and return the value it fetched.
    pub fn wait(&self, mut h: AtomicHandle<T>) -> Result<T> {
        crate::endpoint::not_in_handler("atomic wait")?;
        self.check_handle(&h)?;
        if let Some(op) = h.op.take() {
            self.ep.wait_op(&op)?;
            h.value = op.result.load(Ordering::Relaxed);
        }
        Ok(T::from_bits(h.value))
    }

    /// A future that completes with the value `h` fetches (see [`AtomicFuture`]).
    pub fn fetch_future(&self, h: AtomicHandle<T>) -> AtomicFuture<T> {
        AtomicFuture {
            ad: self.clone(),
            h,
        }
    }

    /// The element's value (a fetching [`AtomicOp::Get`]).
    pub fn get(&self, rank: Rank, offset: u64) -> Result<T> {
        let z = T::from_bits(0);
        self.fetch(rank, offset, AtomicOp::Get, z, z)
    }

    /// Write `v` atomically (a non-fetching [`AtomicOp::Set`]).
    pub fn set(&self, rank: Rank, offset: u64, v: T) -> Result<()> {
        self.apply(rank, offset, AtomicOp::Set, v, v)
    }

    /// Add `v` and return the value before (a fetching [`AtomicOp::Add`]).
    pub fn fetch_add(&self, rank: Rank, offset: u64, v: T) -> Result<T> {
        self.fetch(rank, offset, AtomicOp::Add, v, v)
    }

    /// Write `new` if the element equals `expected`; returns the value before (the swap
    /// happened when it equals `expected`).
    pub fn compare_swap(&self, rank: Rank, offset: u64, expected: T, new: T) -> Result<T> {
        self.fetch(rank, offset, AtomicOp::CompareSwap, expected, new)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run<T: AtomicElem>(init: T, op: AtomicOp, a: T, b: T) -> (T, T) {
        let mut cell = 0u64;
        let p = std::ptr::addr_of_mut!(cell).cast::<u8>();
        // SAFETY: `cell` is 8 bytes, 8-aligned, accessed only here.
        unsafe {
            apply_at(p, T::TYPE, AtomicOp::Set, init.to_bits(), 0);
            let old = apply_at(p, T::TYPE, op, a.to_bits(), b.to_bits());
            let now = apply_at(p, T::TYPE, AtomicOp::Get, 0, 0);
            (T::from_bits(old), T::from_bits(now))
        }
    }

    #[test]
    fn integer_operations() {
        assert_eq!(run(5i32, AtomicOp::Add, -7, 0), (5, -2));
        assert_eq!(run(i32::MAX, AtomicOp::Inc, 0, 0), (i32::MAX, i32::MIN));
        assert_eq!(run(0u32, AtomicOp::Dec, 0, 0), (0, u32::MAX));
        assert_eq!(run(-3i64, AtomicOp::Min, -9, 0), (-3, -9));
        assert_eq!(run(3u64, AtomicOp::Max, u64::MAX, 0), (3, u64::MAX));
        assert_eq!(run(0b1100u32, AtomicOp::Xor, 0b1010, 0), (0b1100, 0b0110));
        assert_eq!(run(7i64, AtomicOp::CompareSwap, 7, 9), (7, 9));
        assert_eq!(run(7i64, AtomicOp::CompareSwap, 8, 9), (7, 7));
        assert_eq!(run(1u64, AtomicOp::Swap, 4, 0), (1, 4));
        assert_eq!(run(-1i32, AtomicOp::Sub, 1, 0), (-1, -2));
    }

    #[test]
    fn float_operations() {
        assert_eq!(run(1.5f64, AtomicOp::Add, 2.25, 0.0), (1.5, 3.75));
        assert_eq!(run(1.5f32, AtomicOp::Dec, 0.0, 0.0), (1.5, 0.5));
        assert_eq!(run(1.0f64, AtomicOp::Min, f64::NAN, 0.0), (1.0, 1.0));
        assert_eq!(run(-2.0f32, AtomicOp::Max, 3.0, 0.0), (-2.0, 3.0));
        // Bit patterns compared: -0.0 is not 0.0.
        assert_eq!(
            run(-0.0f64, AtomicOp::CompareSwap, 0.0, 5.0).1.to_bits(),
            (-0.0f64).to_bits()
        );
        assert_eq!(run(2.0f64, AtomicOp::CompareSwap, 2.0, 5.0), (2.0, 5.0));
    }

    #[test]
    fn codes_round_trip_and_sets() {
        for ty in AtomicType::ALL {
            for op in AtomicOp::ALL {
                let w = op_word(ty, op);
                assert_eq!(AtomicType::from_code(w & 0xff), Some(ty));
                assert_eq!(AtomicOp::from_code((w >> 8) & 0xff), Some(op));
            }
        }
        assert!(AtomicOps::ALL.iter().eq(AtomicOp::ALL));
        assert!(!AtomicOps::ARITHMETIC.iter().any(AtomicOp::is_bitwise));
        assert_eq!(AtomicOps::ARITHMETIC.iter().count(), 10);
        let s = AtomicOps::of(&[AtomicOp::Add, AtomicOp::Get]);
        assert!(
            s.contains(AtomicOp::Add) && s.contains(AtomicOp::Get) && !s.contains(AtomicOp::Set)
        );
        assert_eq!(format!("{s:?}"), r#"{"get", "add"}"#);
    }

    #[test]
    fn elements_outside_or_unaligned_are_refused() {
        let mut buf = [0u64; 4];
        let base = buf.as_mut_ptr().cast::<u8>();
        assert!(element(base, 32, 24, AtomicType::U64).is_ok());
        assert_eq!(element(base, 32, 28, AtomicType::U64), Err(ST_RANGE));
        assert_eq!(
            element(base, 32, u64::MAX - 2, AtomicType::U32),
            Err(ST_RANGE)
        );
        assert_eq!(element(base, 32, 4, AtomicType::U64), Err(ST_ALIGN));
        assert!(element(base, 32, 4, AtomicType::F32).is_ok());
    }
}
