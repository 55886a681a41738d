//! Remote atomics: atomic domains of one element type and a set of operations, and the
//! blocking, explicit-handle and implicit-handle operations on them (`spec/core.md` §7a).
//!
//! A C domain is an id into a table of the Rust [`amnet::AtomicDomain`]s this process made,
//! one per element type; operands and results travel in a union of the six types.

use std::ffi::c_int;
use std::sync::{Arc, Mutex, RwLock};

use amnet::{AtomicDomain, AtomicHandle, AtomicOp, AtomicOps};

use crate::rma::{make_handle, HandleId};
use crate::slots::{lock, Slots, FETCH_KIND};
use crate::status::{guard, CError, OK};
use crate::{ep, required};

/// Element type `int32_t`.
pub const TYPE_I32: c_int = 0;
/// Element type `uint32_t`.
pub const TYPE_U32: c_int = 1;
/// Element type `int64_t`.
pub const TYPE_I64: c_int = 2;
/// Element type `uint64_t`.
pub const TYPE_U64: c_int = 3;
/// Element type `float`.
pub const TYPE_F32: c_int = 4;
/// Element type `double`.
pub const TYPE_F64: c_int = 5;

/// Read the element (fetching only).
pub const AOP_GET: c_int = 0;
/// Write `a`.
pub const AOP_SET: c_int = 1;
/// Write `a` (fetching: the value it replaced).
pub const AOP_SWAP: c_int = 2;
/// Write `b` if the element equals `a` (bit patterns compared, floats too).
pub const AOP_COMPARE_SWAP: c_int = 3;
/// Add `a` (integers wrap around).
pub const AOP_ADD: c_int = 4;
/// Subtract `a` (integers wrap around).
pub const AOP_SUB: c_int = 5;
/// Add one.
pub const AOP_INC: c_int = 6;
/// Subtract one.
pub const AOP_DEC: c_int = 7;
/// Bitwise and with `a` (integer types).
pub const AOP_AND: c_int = 8;
/// Bitwise or with `a` (integer types).
pub const AOP_OR: c_int = 9;
/// Bitwise exclusive or with `a` (integer types).
pub const AOP_XOR: c_int = 10;
/// Keep the smaller of the element and `a` (floats: a NaN operand loses).
pub const AOP_MIN: c_int = 11;
/// Keep the larger of the element and `a` (floats: a NaN operand loses).
pub const AOP_MAX: c_int = 12;
/// Every operation, as a set for `amnet_ad_create` (bit `1 << op` per operation).
pub const AOPS_ALL: u32 = (1 << 13) - 1;
/// Every operation but the bitwise ones: what a floating-point domain may have.
pub const AOPS_ARITHMETIC: u32 = AOPS_ALL & !(1 << AOP_AND | 1 << AOP_OR | 1 << AOP_XOR);

const _: () = assert!(AtomicOp::ALL.len() == 13);

/// An operand or a result: the member of the domain's element type is the one used.
#[repr(C)]
#[derive(Clone, Copy)]
pub union AtomicValue {
    /// For `int32_t` domains.
    pub i32: i32,
    /// For `uint32_t` domains.
    pub u32: u32,
    /// For `int64_t` domains.
    pub i64: i64,
    /// For `uint64_t` domains.
    pub u64: u64,
    /// For `float` domains.
    pub f32: f32,
    /// For `double` domains.
    pub f64: f64,
}

/// The id of an atomic domain (0 names none).
pub type DomainId = u32;

enum AnyDomain {
    I32(AtomicDomain<i32>),
    U32(AtomicDomain<u32>),
    I64(AtomicDomain<i64>),
    U64(AtomicDomain<u64>),
    F32(AtomicDomain<f32>),
    F64(AtomicDomain<f64>),
}

/// Run `$body` with `$d` the typed domain, `$get` reading a union's member of its type and
/// `$put` making a union of a value of its type.
///
/// `$get` may only read an operand the caller set (see [`uses`]).
macro_rules! typed {
    ($any:expr, |$d:ident, $get:ident, $put:ident| $body:expr) => {
        match $any {
            AnyDomain::I32($d) => {
                // SAFETY: every member is plain data; the callers read only the operands the
                // operation uses, whose member of the domain's type the C caller set (the
                // entry points' contract).
                let $get = |v: AtomicValue| unsafe { v.i32 };
                let $put = |x: i32| AtomicValue { i32: x };
                $body
            }
            AnyDomain::U32($d) => {
                // SAFETY: as above.
                let $get = |v: AtomicValue| unsafe { v.u32 };
                let $put = |x: u32| AtomicValue { u32: x };
                $body
            }
            AnyDomain::I64($d) => {
                // SAFETY: as above.
                let $get = |v: AtomicValue| unsafe { v.i64 };
                let $put = |x: i64| AtomicValue { i64: x };
                $body
            }
            AnyDomain::U64($d) => {
                // SAFETY: as above.
                let $get = |v: AtomicValue| unsafe { v.u64 };
                let $put = |x: u64| AtomicValue { u64: x };
                $body
            }
            AnyDomain::F32($d) => {
                // SAFETY: as above.
                let $get = |v: AtomicValue| unsafe { v.f32 };
                let $put = |x: f32| AtomicValue { f32: x };
                $body
            }
            AnyDomain::F64($d) => {
                // SAFETY: as above.
                let $get = |v: AtomicValue| unsafe { v.f64 };
                let $put = |x: f64| AtomicValue { f64: x };
                $body
            }
        }
    };
}

static DOMAINS: RwLock<Vec<Arc<AnyDomain>>> = RwLock::new(Vec::new());

fn domain(ad: DomainId) -> Result<Arc<AnyDomain>, CError> {
    let t = DOMAINS.read().unwrap_or_else(|e| e.into_inner());
    let i = (ad as usize).wrapping_sub(1);
    t.get(i).cloned().ok_or_else(|| {
        CError::new(
            crate::ERR_BAD_HANDLE,
            format!(
                "atomic domain {ad} does not exist ({} made by amnet_ad_create)",
                t.len()
            ),
        )
    })
}

/// Which operands `op` uses: (`a`, `b`).
fn uses(op: AtomicOp) -> (bool, bool) {
    match op {
        AtomicOp::Get | AtomicOp::Inc | AtomicOp::Dec => (false, false),
        AtomicOp::CompareSwap => (true, true),
        _ => (true, false),
    }
}

/// The operands `op` uses, read with `get`; the default value for the others.
fn operands<T: Default>(
    op: AtomicOp,
    a: AtomicValue,
    b: AtomicValue,
    get: impl Fn(AtomicValue) -> T,
) -> (T, T) {
    let (ua, ub) = uses(op);
    let a = if ua { get(a) } else { T::default() };
    let b = if ub { get(b) } else { T::default() };
    (a, b)
}

fn op_of(op: c_int) -> Result<AtomicOp, CError> {
    usize::try_from(op)
        .ok()
        .and_then(|i| AtomicOp::ALL.get(i).copied())
        .ok_or_else(|| {
            CError::bad_arg(format!(
                "op {op} is none of the atomic operations (0 to 12: GET, SET, SWAP, \
                 COMPARE_SWAP, ADD, SUB, INC, DEC, AND, OR, XOR, MIN, MAX)"
            ))
        })
}

/// Collective: make an atomic domain for elements of `type` (one of the `AMNET_TYPE_*`
/// constants) allowing the operations of `ops` (bit `1 << op` for each `AMNET_AOP_*`
/// operation; the header defines the sets of all operations and of the arithmetic ones), and
/// store its id in `*ad`. Every rank creates its domains in the same order with the same type
/// and operations; ranks that disagree all get the mismatch code. Floating-point domains
/// refuse the bitwise operations (the usage code, on every rank that asked for them).
///
/// # Safety
/// - `ad` is valid for a write of an `amnet_ad_t`.
#[no_mangle]
pub unsafe extern "C" fn amnet_ad_create(r#type: c_int, ops: u32, ad: *mut DomainId) -> c_int {
    guard("amnet_ad_create", || {
        required(ad, "ad")?;
        if ops & !AOPS_ALL != 0 {
            return Err(CError::bad_arg(format!(
                "ops {ops:#x} hold bits {:#x} that name no operation (the set is bits 0 to 12)",
                ops & !AOPS_ALL
            )));
        }
        let set = AtomicOps::of(
            &AtomicOp::ALL
                .iter()
                .enumerate()
                .filter(|(i, _)| ops & (1 << i) != 0)
                .map(|(_, &o)| o)
                .collect::<Vec<_>>(),
        );
        let ep = ep()?;
        let d = match r#type {
            TYPE_I32 => AnyDomain::I32(ep.atomic_domain(set)?),
            TYPE_U32 => AnyDomain::U32(ep.atomic_domain(set)?),
            TYPE_I64 => AnyDomain::I64(ep.atomic_domain(set)?),
            TYPE_U64 => AnyDomain::U64(ep.atomic_domain(set)?),
            TYPE_F32 => AnyDomain::F32(ep.atomic_domain(set)?),
            TYPE_F64 => AnyDomain::F64(ep.atomic_domain(set)?),
            other => {
                return Err(CError::bad_arg(format!(
                    "type {other} is none of the element types (0 to 5: I32, U32, I64, U64, \
                     F32, F64)"
                )))
            }
        };
        let mut t = DOMAINS.write().unwrap_or_else(|e| e.into_inner());
        t.push(Arc::new(d));
        let id = DomainId::try_from(t.len()).map_err(|_| {
            CError::new(
                crate::ERR_INTERNAL,
                "more than 2^32 atomic domains".to_string(),
            )
        })?;
        // SAFETY: checked non-null; the caller's contract makes it writable.
        unsafe { ad.write(id) };
        Ok(OK)
    })
}

/// Blocking fetching operation: perform `op` with operands `a` and `b` (used as the operation
/// says) on the element at `offset` in `rank`'s segment, and store its value before the
/// operation in `*result`. The offset is a multiple of the element's size.
///
/// # Safety
/// - The operands the operation uses (`a` for all but GET, INC and DEC; `b` for
///   COMPARE_SWAP) hold a value in the member of the domain's element type.
/// - `result` is valid for a write of an `amnet_atomic_value_t`.
#[no_mangle]
pub unsafe extern "C" fn amnet_ad_fetch(
    ad: DomainId,
    rank: u32,
    offset: u64,
    op: c_int,
    a: AtomicValue,
    b: AtomicValue,
    result: *mut AtomicValue,
) -> c_int {
    guard("amnet_ad_fetch", || {
        required(result, "result")?;
        let op = op_of(op)?;
        let d = domain(ad)?;
        let v = typed!(&*d, |d, get, put| {
            let (a, b) = operands(op, a, b, get);
            put(d.fetch(rank, offset, op, a, b)?)
        });
        // SAFETY: checked non-null; the caller's contract makes it writable.
        unsafe { result.write(v) };
        Ok(OK)
    })
}

/// Blocking non-fetching operation: complete at the target on return.
///
/// # Safety
/// - The operands the operation uses hold a value in the member of the domain's element
///   type (as for `amnet_ad_fetch`).
#[no_mangle]
pub unsafe extern "C" fn amnet_ad_apply(
    ad: DomainId,
    rank: u32,
    offset: u64,
    op: c_int,
    a: AtomicValue,
    b: AtomicValue,
) -> c_int {
    guard("amnet_ad_apply", || {
        let op = op_of(op)?;
        let d = domain(ad)?;
        typed!(&*d, |d, get, _put| {
            let (a, b) = operands(op, a, b, get);
            d.apply(rank, offset, op, a, b)?
        });
        Ok(OK)
    })
}

/// Non-blocking non-fetching operation with an explicit handle, stored in `*handle` and
/// synced as a put's (`amnet_sync` and the others).
///
/// # Safety
/// - The operands the operation uses hold a value in the member of the domain's element
///   type (as for `amnet_ad_fetch`).
/// - `handle` is valid for a write of an `amnet_handle_t`.
#[no_mangle]
pub unsafe extern "C" fn amnet_ad_apply_nb(
    ad: DomainId,
    rank: u32,
    offset: u64,
    op: c_int,
    a: AtomicValue,
    b: AtomicValue,
    handle: *mut HandleId,
) -> c_int {
    guard("amnet_ad_apply_nb", || {
        required(handle, "handle")?;
        let op = op_of(op)?;
        let d = domain(ad)?;
        let h = typed!(&*d, |d, get, _put| {
            let (a, b) = operands(op, a, b, get);
            d.apply_nb(rank, offset, op, a, b)?
        });
        let id = make_handle(h)?;
        // SAFETY: checked non-null; the caller's contract makes it writable.
        unsafe { handle.write(id) };
        Ok(OK)
    })
}

/// Non-blocking non-fetching operation with the calling thread's implicit handle (or its
/// open access region), synced by `amnet_sync_nbi` like `amnet_put_nbi`.
///
/// # Safety
/// - The operands the operation uses hold a value in the member of the domain's element
///   type (as for `amnet_ad_fetch`).
#[no_mangle]
pub unsafe extern "C" fn amnet_ad_apply_nbi(
    ad: DomainId,
    rank: u32,
    offset: u64,
    op: c_int,
    a: AtomicValue,
    b: AtomicValue,
) -> c_int {
    guard("amnet_ad_apply_nbi", || {
        let op = op_of(op)?;
        let d = domain(ad)?;
        typed!(&*d, |d, get, _put| {
            let (a, b) = operands(op, a, b, get);
            d.apply_nbi(rank, offset, op, a, b)?
        });
        Ok(OK)
    })
}

/// An outstanding fetching operation, with its domain.
enum AnyFetch {
    I32(AtomicDomain<i32>, AtomicHandle<i32>),
    U32(AtomicDomain<u32>, AtomicHandle<u32>),
    I64(AtomicDomain<i64>, AtomicHandle<i64>),
    U64(AtomicDomain<u64>, AtomicHandle<u64>),
    F32(AtomicDomain<f32>, AtomicHandle<f32>),
    F64(AtomicDomain<f64>, AtomicHandle<f64>),
}

/// A domain of each element type wraps its fetching handles in [`AnyFetch`].
trait IntoFetch<T: amnet::AtomicElem> {
    fn into_fetch(self, h: AtomicHandle<T>) -> AnyFetch;
}

macro_rules! into_fetch {
    ($($t:ty => $v:ident),*) => {$(
        impl IntoFetch<$t> for AtomicDomain<$t> {
            fn into_fetch(self, h: AtomicHandle<$t>) -> AnyFetch {
                AnyFetch::$v(self, h)
            }
        }
    )*};
}

into_fetch!(i32 => I32, u32 => U32, i64 => I64, u64 => U64, f32 => F32, f64 => F64);

static FETCHES: Mutex<Slots<AnyFetch>> = Mutex::new(Slots::new(FETCH_KIND, "fetching atomics"));

/// Non-blocking fetching operation: as `amnet_ad_fetch`, with a handle in `*handle` for
/// `amnet_ad_wait` or `amnet_ad_try_wait`, which give the value (the put/get syncs refuse it).
///
/// # Safety
/// - The operands the operation uses hold a value in the member of the domain's element
///   type (as for `amnet_ad_fetch`).
/// - `handle` is valid for a write of an `amnet_handle_t`.
#[no_mangle]
pub unsafe extern "C" fn amnet_ad_fetch_nb(
    ad: DomainId,
    rank: u32,
    offset: u64,
    op: c_int,
    a: AtomicValue,
    b: AtomicValue,
    handle: *mut HandleId,
) -> c_int {
    guard("amnet_ad_fetch_nb", || {
        required(handle, "handle")?;
        let op = op_of(op)?;
        let d = domain(ad)?;
        let f = typed!(&*d, |d, get, _put| {
            let (a, b) = operands(op, a, b, get);
            d.clone().into_fetch(d.fetch_nb(rank, offset, op, a, b)?)
        });
        let id = lock(&FETCHES).make(f)?;
        // SAFETY: checked non-null; the caller's contract makes it writable.
        unsafe { handle.write(id) };
        Ok(OK)
    })
}

/// Wait for, or with `block` false try once, the fetching operation `f`: its value, or None
/// (and `f` back) while it is in flight.
fn settle(f: AnyFetch, block: bool) -> amnet::Result<Result<AtomicValue, AnyFetch>> {
    macro_rules! arm {
        ($v:ident, $d:ident, $h:ident, $field:ident) => {
            if block {
                Ok(Ok(AtomicValue {
                    $field: $d.wait($h)?,
                }))
            } else {
                let mut h = $h;
                match $d.try_wait(&mut h)? {
                    Some(x) => Ok(Ok(AtomicValue { $field: x })),
                    None => Ok(Err(AnyFetch::$v($d, h))),
                }
            }
        };
    }
    match f {
        AnyFetch::I32(d, h) => arm!(I32, d, h, i32),
        AnyFetch::U32(d, h) => arm!(U32, d, h, u32),
        AnyFetch::I64(d, h) => arm!(I64, d, h, i64),
        AnyFetch::U64(d, h) => arm!(U64, d, h, u64),
        AnyFetch::F32(d, h) => arm!(F32, d, h, f32),
        AnyFetch::F64(d, h) => arm!(F64, d, h, f64),
    }
}

/// The body of `amnet_ad_wait` and `amnet_ad_try_wait`.
///
/// # Safety
/// - `handle` is valid for reads and writes of an `amnet_handle_t`, `result` for a write of
///   an `amnet_atomic_value_t`.
unsafe fn wait_fetch(
    handle: *mut HandleId,
    result: *mut AtomicValue,
    block: bool,
) -> Result<c_int, CError> {
    required(handle, "handle")?;
    required(result, "result")?;
    // SAFETY: checked non-null; the caller's contract makes it readable.
    let id = unsafe { handle.read() };
    if id & FETCH_KIND == 0 {
        return Err(CError::new(
            crate::ERR_BAD_HANDLE,
            format!(
                "handle {id:#x} is not a fetching atomic's (amnet_ad_fetch_nb makes those; \
                 others are synced with amnet_sync)"
            ),
        ));
    }
    let f = lock(&FETCHES).take(id)?;
    match settle(f, block) {
        Ok(Ok(v)) => {
            lock(&FETCHES).finish(id, None);
            // SAFETY: checked non-null; the caller's contract makes both writable.
            unsafe {
                result.write(v);
                handle.write(crate::HANDLE_INVALID);
            }
            Ok(OK)
        }
        Ok(Err(f)) => {
            lock(&FETCHES).finish(id, Some(f));
            Ok(crate::NOT_READY)
        }
        Err(e) => {
            // The operation failed: its handle is spent.
            lock(&FETCHES).finish(id, None);
            // SAFETY: as above.
            unsafe { handle.write(crate::HANDLE_INVALID) };
            Err(e.into())
        }
    }
}

/// Wait for the fetching operation of `*handle` and store the value it fetched in
/// `*result`; `*handle` becomes 0. On an error the handle is spent all the same.
///
/// # Safety
/// - `handle` is valid for reads and writes of an `amnet_handle_t`, `result` for a write of
///   an `amnet_atomic_value_t`.
#[no_mangle]
pub unsafe extern "C" fn amnet_ad_wait(handle: *mut HandleId, result: *mut AtomicValue) -> c_int {
    // SAFETY: the caller's contract, forwarded.
    guard("amnet_ad_wait", || unsafe {
        wait_fetch(handle, result, true)
    })
}

/// OK (with the value in `*result`, and `*handle` 0) when the fetching operation of
/// `*handle` completed, NOT_READY when not yet (polls once).
///
/// # Safety
/// - `handle` is valid for reads and writes of an `amnet_handle_t`, `result` for a write of
///   an `amnet_atomic_value_t`.
#[no_mangle]
pub unsafe extern "C" fn amnet_ad_try_wait(
    handle: *mut HandleId,
    result: *mut AtomicValue,
) -> c_int {
    // SAFETY: the caller's contract, forwarded.
    guard("amnet_ad_try_wait", || unsafe {
        wait_fetch(handle, result, false)
    })
}
