//! The built-in reduction operators: nine operators ([`RedOp`]) over six element types
//! ([`ElemType`]), which make up the first [`N_BUILTIN`] entries of every function table
//! (entry [`builtin_index`]`(op, ty)`; client entries start at [`N_BUILTIN`]).
//!
//! Every entry follows the [`ReduceFn`](crate::types::ReduceFn) contract: the operands are
//! packed arrays of native-endian elements of `elem_size` bytes, with no alignment
//! requirement (they are read and written through byte copies). `right` holds
//! `result_count` elements and `left` holds `left_count` elements (possibly none); result
//! `i`, written at `results[i * elem_size..]`, is
//! `left[0] op ... op left[left_count - 1] op right[0] op ... op right[i]`, folded strictly
//! from left to right. When a slice is shorter than its count implies, when `elem_size` is
//! not the entry's element size ([`builtin_elem_size`]), or when the combination is not
//! supported ([`builtin_supported`]: bitwise operators on floats), the entry writes nothing.
//! The `flags` and `arg` arguments are ignored.
//!
//! Semantics:
//! - `Sum` and `Prod` wrap around for integers and are IEEE operations for floats (so a float
//!   sum or product depends on the order of the operands).
//! - `Min` and `Max` use the usual order for integers and [`f64::total_cmp`] (resp.
//!   [`f32::total_cmp`]) for floats, which is deterministic: a NaN counts as larger than every
//!   number (as larger than `+inf`) when its sign bit is clear, which is the case of the NaNs
//!   that arithmetic and `f64::NAN` produce; a NaN with its sign bit set counts as smaller
//!   than `-inf`. `-0.0` counts as smaller than `+0.0`.
//! - `And`, `Or` and `Xor` are bitwise, on integers only.
//! - `MinLoc` and `MaxLoc` combine [`Loc`] elements: the smaller (`MinLoc`) or larger
//!   (`MaxLoc`) value wins, in the order of `Min`/`Max`; between equal values the smaller
//!   `loc` wins, which makes both operators commutative and associative.
//!
//! Every entry is registered with [`fn_flags::AMSAFE`] and without
//! [`fn_flags::NONCOMM`]: every operator is commutative.

use std::cmp::Ordering;
use std::mem::{offset_of, size_of};

use std::sync::Arc;

use crate::types::{fn_flags, FnEntry};

/// Built-in reduction operators.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RedOp {
    /// Sum: wrapping for integers, IEEE addition for floats.
    Sum = 0,
    /// Product: wrapping for integers, IEEE multiplication for floats.
    Prod = 1,
    /// Minimum (floats ordered by `total_cmp`).
    Min = 2,
    /// Maximum (floats ordered by `total_cmp`).
    Max = 3,
    /// Bitwise and (integers only).
    And = 4,
    /// Bitwise or (integers only).
    Or = 5,
    /// Bitwise exclusive or (integers only).
    Xor = 6,
    /// Minimum of [`Loc`] elements; the smaller `loc` wins between equal values.
    MinLoc = 7,
    /// Maximum of [`Loc`] elements; the smaller `loc` wins between equal values.
    MaxLoc = 8,
}

impl RedOp {
    /// Every operator, in discriminant order.
    const ALL: [RedOp; 9] = [
        RedOp::Sum,
        RedOp::Prod,
        RedOp::Min,
        RedOp::Max,
        RedOp::And,
        RedOp::Or,
        RedOp::Xor,
        RedOp::MinLoc,
        RedOp::MaxLoc,
    ];

    fn name(self) -> &'static str {
        match self {
            RedOp::Sum => "sum",
            RedOp::Prod => "prod",
            RedOp::Min => "min",
            RedOp::Max => "max",
            RedOp::And => "and",
            RedOp::Or => "or",
            RedOp::Xor => "xor",
            RedOp::MinLoc => "minloc",
            RedOp::MaxLoc => "maxloc",
        }
    }

    fn is_bitwise(self) -> bool {
        matches!(self, RedOp::And | RedOp::Or | RedOp::Xor)
    }

    fn is_loc(self) -> bool {
        matches!(self, RedOp::MinLoc | RedOp::MaxLoc)
    }
}

/// Element types of the built-ins.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ElemType {
    /// `i32`.
    I32 = 0,
    /// `i64`.
    I64 = 1,
    /// `u32`.
    U32 = 2,
    /// `u64`.
    U64 = 3,
    /// `f32`.
    F32 = 4,
    /// `f64`.
    F64 = 5,
}

impl ElemType {
    /// Every element type, in discriminant order.
    const ALL: [ElemType; 6] = [
        ElemType::I32,
        ElemType::I64,
        ElemType::U32,
        ElemType::U64,
        ElemType::F32,
        ElemType::F64,
    ];

    fn name(self) -> &'static str {
        match self {
            ElemType::I32 => "i32",
            ElemType::I64 => "i64",
            ElemType::U32 => "u32",
            ElemType::U64 => "u64",
            ElemType::F32 => "f32",
            ElemType::F64 => "f64",
        }
    }

    fn is_float(self) -> bool {
        matches!(self, ElemType::F32 | ElemType::F64)
    }
}

mod sealed {
    /// Seals [`Elem`](super::Elem): only this module implements it.
    pub trait Sealed {}

    impl Sealed for i32 {}
    impl Sealed for i64 {}
    impl Sealed for u32 {}
    impl Sealed for u64 {}
    impl Sealed for f32 {}
    impl Sealed for f64 {}
}

/// A type the built-ins support (sealed): i32, i64, u32, u64, f32, f64.
pub trait Elem:
    Copy + Send + Sync + PartialEq + std::fmt::Debug + 'static + sealed::Sealed
{
    /// The tag of this type.
    const TYPE: ElemType;
}

impl Elem for i32 {
    const TYPE: ElemType = ElemType::I32;
}
impl Elem for i64 {
    const TYPE: ElemType = ElemType::I64;
}
impl Elem for u32 {
    const TYPE: ElemType = ElemType::U32;
}
impl Elem for u64 {
    const TYPE: ElemType = ElemType::U64;
}
impl Elem for f32 {
    const TYPE: ElemType = ElemType::F32;
}
impl Elem for f64 {
    const TYPE: ElemType = ElemType::F64;
}

/// Element of MINLOC/MAXLOC: a value and its location (e.g. an image or element index).
///
/// As packed operand bytes (the in-memory layout of this `repr(C)` struct), on every target
/// where `u64` is 8-byte aligned (every 64-bit target): 16 bytes for every supported `T`, the
/// value at byte 0 and `loc` at byte 8; for a 4-byte `T`, bytes 4..8 are padding, ignored on
/// input and written as zeros on output.
#[derive(Debug, Clone, Copy, PartialEq)]
#[repr(C)]
pub struct Loc<T> {
    /// The value compared.
    pub value: T,
    /// Its location; the smaller one wins between equal values.
    pub loc: u64,
}

/// The number of built-in entries: the 9 operators on the 6 types, less the bitwise operators
/// on floats (which do not exist), 48: table indices `0..N_BUILTIN`; client entries start at
/// `N_BUILTIN`.
pub const N_BUILTIN: usize = RedOp::ALL.len() * ElemType::ALL.len() - 3 * 2;

/// Every built-in (operator, type), in table order: operators in [`RedOp::ALL`] order, then
/// types in [`ElemType::ALL`] order, the unsupported combinations left out.
fn builtins() -> impl Iterator<Item = (RedOp, ElemType)> {
    RedOp::ALL
        .into_iter()
        .flat_map(|op| ElemType::ALL.into_iter().map(move |ty| (op, ty)))
        .filter(|&(op, ty)| builtin_supported(op, ty))
}

/// The function-table index of the built-in `op` on `ty`, or `None` for the combinations that
/// do not exist (the bitwise operators on floats).
pub fn builtin_index(op: RedOp, ty: ElemType) -> Option<usize> {
    builtins().position(|e| e == (op, ty))
}

/// Whether the built-in `op` on `ty` exists: false only for the bitwise operators
/// (`And`, `Or`, `Xor`) on `F32`/`F64`, whose entries write nothing.
pub fn builtin_supported(op: RedOp, ty: ElemType) -> bool {
    !(op.is_bitwise() && ty.is_float())
}

/// The element size (`elem_size`) of the built-in `op` on `ty`: the size of the type (4 or
/// 8), or for `MinLoc`/`MaxLoc` the size of [`Loc<T>`] (16 for every `T`).
pub fn builtin_elem_size(op: RedOp, ty: ElemType) -> usize {
    if op.is_loc() {
        match ty {
            ElemType::I32 => size_of::<Loc<i32>>(),
            ElemType::I64 => size_of::<Loc<i64>>(),
            ElemType::U32 => size_of::<Loc<u32>>(),
            ElemType::U64 => size_of::<Loc<u64>>(),
            ElemType::F32 => size_of::<Loc<f32>>(),
            ElemType::F64 => size_of::<Loc<f64>>(),
        }
    } else {
        match ty {
            ElemType::I32 => size_of::<i32>(),
            ElemType::I64 => size_of::<i64>(),
            ElemType::U32 => size_of::<u32>(),
            ElemType::U64 => size_of::<u64>(),
            ElemType::F32 => size_of::<f32>(),
            ElemType::F64 => size_of::<f64>(),
        }
    }
}

/// The operator and type of built-in entry `index` (`index < N_BUILTIN`).
pub(crate) fn decode(index: usize) -> (RedOp, ElemType) {
    builtins().nth(index).unwrap_or((RedOp::Sum, ElemType::I32))
}

/// The name of built-in entry `index`, as `"op:type"` (e.g. `"sum:f64"`, `"minloc:i32"`);
/// `None` for `index >= N_BUILTIN`.
pub fn describe(index: usize) -> Option<String> {
    builtins()
        .nth(index)
        .map(|(op, ty)| format!("{}:{}", op.name(), ty.name()))
}

/// The built-in entries, `N_BUILTIN` of them in index order, all flagged `AMSAFE`
/// (commutative).
pub(crate) fn builtin_table() -> Vec<FnEntry> {
    builtins().map(|(op, ty)| make_entry(op, ty)).collect()
}

fn make_entry(op: RedOp, ty: ElemType) -> FnEntry {
    match ty {
        ElemType::I32 => typed_entry::<i32>(op),
        ElemType::I64 => typed_entry::<i64>(op),
        ElemType::U32 => typed_entry::<u32>(op),
        ElemType::U64 => typed_entry::<u64>(op),
        ElemType::F32 => typed_entry::<f32>(op),
        ElemType::F64 => typed_entry::<f64>(op),
    }
}

fn typed_entry<T: Prim>(op: RedOp) -> FnEntry {
    match op {
        RedOp::Sum => entry::<T, _>(T::sum),
        RedOp::Prod => entry::<T, _>(T::prod),
        RedOp::Min => entry::<T, _>(min::<T>),
        RedOp::Max => entry::<T, _>(max::<T>),
        RedOp::And | RedOp::Or | RedOp::Xor => match T::bitwise(op) {
            Some(f) => entry::<T, _>(f),
            None => FnEntry::new(fn_flags::AMSAFE, |_, _, _, _, _, _, _, _| {}),
        },
        RedOp::MinLoc => entry::<Loc<T>, _>(minloc::<T>),
        RedOp::MaxLoc => entry::<Loc<T>, _>(maxloc::<T>),
    }
}

/// An elementwise kernel of a built-in entry: `acc[i] = acc[i] ∘ x[i]` over whole vectors of
/// its element (what the vector reductions need, in one call instead of one per element).
pub(crate) type Kernel = Arc<dyn Fn(&mut [u8], &[u8]) + Send + Sync>;

/// The kernels of the built-in entries, in index order (`None` where the entry does nothing).
pub(crate) fn builtin_kernels() -> Vec<Option<Kernel>> {
    builtins()
        .map(|(op, ty)| match ty {
            ElemType::I32 => typed_kernel::<i32>(op),
            ElemType::I64 => typed_kernel::<i64>(op),
            ElemType::U32 => typed_kernel::<u32>(op),
            ElemType::U64 => typed_kernel::<u64>(op),
            ElemType::F32 => typed_kernel::<f32>(op),
            ElemType::F64 => typed_kernel::<f64>(op),
        })
        .collect()
}

fn typed_kernel<T: Prim>(op: RedOp) -> Option<Kernel> {
    Some(match op {
        RedOp::Sum => kernel::<T, _>(T::sum),
        RedOp::Prod => kernel::<T, _>(T::prod),
        RedOp::Min => kernel::<T, _>(min::<T>),
        RedOp::Max => kernel::<T, _>(max::<T>),
        RedOp::And | RedOp::Or | RedOp::Xor => kernel::<T, _>(T::bitwise(op)?),
        RedOp::MinLoc => kernel::<Loc<T>, _>(minloc::<T>),
        RedOp::MaxLoc => kernel::<Loc<T>, _>(maxloc::<T>),
    })
}

fn kernel<E: Operand, F: Fn(E, E) -> E + Copy + Send + Sync + 'static>(op: F) -> Kernel {
    Arc::new(move |acc: &mut [u8], x: &[u8]| {
        for (a, b) in acc.chunks_exact_mut(E::SIZE).zip(x.chunks_exact(E::SIZE)) {
            if let (Some(l), Some(r)) = (E::read(a), E::read(b)) {
                op(l, r).write(a);
            }
        }
    })
}

fn entry<E: Operand, F: Fn(E, E) -> E + Copy + Send + Sync + 'static>(op: F) -> FnEntry {
    FnEntry::new(
        fn_flags::AMSAFE,
        move |results, result_count, left, left_count, right, elem_size, _flags, _arg| {
            scan(
                results,
                result_count,
                left,
                left_count,
                right,
                elem_size,
                op,
            )
        },
    )
}

/// An operand as packed bytes.
trait Operand: Copy + Send + Sync + 'static {
    /// Its size in the packed arrays.
    const SIZE: usize;
    /// Reads one from `b` (at least `SIZE` bytes, any alignment).
    fn read(b: &[u8]) -> Option<Self>;
    /// Writes it to the first `SIZE` bytes of `out` (nothing if `out` is shorter).
    fn write(self, out: &mut [u8]);
}

/// A supported element type, with its arithmetic.
trait Prim: Operand {
    fn sum(self, other: Self) -> Self;
    fn prod(self, other: Self) -> Self;
    /// The order of `Min`/`Max`: `Ord` for integers, `total_cmp` for floats.
    fn order(self, other: Self) -> Ordering;
    /// The bitwise operator `op` (`None` for floats or a non-bitwise `op`).
    fn bitwise(op: RedOp) -> Option<fn(Self, Self) -> Self>;
}

macro_rules! operand_prim {
    ($t:ty) => {
        impl Operand for $t {
            const SIZE: usize = size_of::<$t>();

            fn read(b: &[u8]) -> Option<Self> {
                Some(<$t>::from_ne_bytes(b.get(..Self::SIZE)?.try_into().ok()?))
            }

            fn write(self, out: &mut [u8]) {
                if let Some(o) = out.get_mut(..Self::SIZE) {
                    o.copy_from_slice(&self.to_ne_bytes());
                }
            }
        }
    };
}

macro_rules! prim_int {
    ($($t:ty),*) => {$(
        operand_prim!($t);

        impl Prim for $t {
            fn sum(self, other: Self) -> Self {
                self.wrapping_add(other)
            }

            fn prod(self, other: Self) -> Self {
                self.wrapping_mul(other)
            }

            fn order(self, other: Self) -> Ordering {
                self.cmp(&other)
            }

            fn bitwise(op: RedOp) -> Option<fn(Self, Self) -> Self> {
                match op {
                    RedOp::And => Some(|a, b| a & b),
                    RedOp::Or => Some(|a, b| a | b),
                    RedOp::Xor => Some(|a, b| a ^ b),
                    _ => None,
                }
            }
        }
    )*};
}

macro_rules! prim_float {
    ($($t:ty),*) => {$(
        operand_prim!($t);

        impl Prim for $t {
            fn sum(self, other: Self) -> Self {
                self + other
            }

            fn prod(self, other: Self) -> Self {
                self * other
            }

            fn order(self, other: Self) -> Ordering {
                self.total_cmp(&other)
            }

            fn bitwise(_op: RedOp) -> Option<fn(Self, Self) -> Self> {
                None
            }
        }
    )*};
}

prim_int!(i32, i64, u32, u64);
prim_float!(f32, f64);

impl<T: Prim> Operand for Loc<T> {
    const SIZE: usize = size_of::<Loc<T>>();

    fn read(b: &[u8]) -> Option<Self> {
        let b = b.get(..Self::SIZE)?;
        let value = T::read(b)?;
        let loc_bytes = b.get(offset_of!(Loc<T>, loc)..)?.get(..size_of::<u64>())?;
        let loc = u64::from_ne_bytes(loc_bytes.try_into().ok()?);
        Some(Loc { value, loc })
    }

    fn write(self, out: &mut [u8]) {
        if let Some(o) = out.get_mut(..Self::SIZE) {
            o.fill(0);
            self.value.write(o);
            if let Some(l) = o.get_mut(offset_of!(Loc<T>, loc)..) {
                self.loc.write(l);
            }
        }
    }
}

fn min<T: Prim>(a: T, b: T) -> T {
    if a.order(b) == Ordering::Greater {
        b
    } else {
        a
    }
}

fn max<T: Prim>(a: T, b: T) -> T {
    if a.order(b) == Ordering::Less {
        b
    } else {
        a
    }
}

fn minloc<T: Prim>(a: Loc<T>, b: Loc<T>) -> Loc<T> {
    // The smaller (value, loc) wins.
    match a.value.order(b.value).then(a.loc.cmp(&b.loc)) {
        Ordering::Greater => b,
        Ordering::Less | Ordering::Equal => a,
    }
}

fn maxloc<T: Prim>(a: Loc<T>, b: Loc<T>) -> Loc<T> {
    // The larger value wins, then the smaller loc.
    match b.value.order(a.value).then(a.loc.cmp(&b.loc)) {
        Ordering::Greater => b,
        Ordering::Less | Ordering::Equal => a,
    }
}

/// The inclusive prefix fold of the `ReduceFn` contract, for operands of type `E`.
fn scan<E: Operand>(
    results: &mut [u8],
    result_count: usize,
    left: &[u8],
    left_count: usize,
    right: &[u8],
    elem_size: usize,
    op: impl Fn(E, E) -> E,
) {
    if elem_size != E::SIZE || elem_size == 0 || result_count == 0 {
        return;
    }
    let (Some(out_len), Some(left_len)) = (
        result_count.checked_mul(elem_size),
        left_count.checked_mul(elem_size),
    ) else {
        return;
    };
    let (Some(out), Some(left), Some(right)) = (
        results.get_mut(..out_len),
        left.get(..left_len),
        right.get(..out_len),
    ) else {
        return;
    };

    let mut acc: Option<E> = None;
    for chunk in left.chunks_exact(elem_size) {
        let Some(v) = E::read(chunk) else { return };
        acc = Some(match acc {
            Some(a) => op(a, v),
            None => v,
        });
    }
    for (o, chunk) in out
        .chunks_exact_mut(elem_size)
        .zip(right.chunks_exact(elem_size))
    {
        // Cannot fail: every chunk holds exactly `E::SIZE` bytes.
        let Some(v) = E::read(chunk) else { return };
        let r = match acc {
            Some(a) => op(a, v),
            None => v,
        };
        r.write(o);
        acc = Some(r);
    }
}

#[cfg(test)]
mod tests {
    /// The index of a built-in that exists.
    fn index_of(op: RedOp, ty: ElemType) -> usize {
        builtin_index(op, ty).expect("the built-in exists")
    }

    use super::*;

    /// A tiny xorshift64 generator.
    struct Rng(u64);

    impl Rng {
        fn next(&mut self) -> u64 {
            let mut x = self.0;
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            self.0 = x;
            x
        }

        fn below(&mut self, n: usize) -> usize {
            usize::try_from(self.next() % u64::try_from(n).unwrap()).unwrap()
        }
    }

    /// A test element type: an independent reference of the operators.
    trait TElem: Elem {
        const SZ: usize;
        fn from_b(b: &[u8]) -> Self;
        fn to_b(self) -> Vec<u8>;
        /// Anything (floats: mixed with NaNs, infinities and zeros).
        fn gen(rng: &mut Rng) -> Self;
        /// From a small set, to make ties likely.
        fn gen_small(rng: &mut Rng) -> Self;
        fn reference(op: RedOp, a: Self, b: Self) -> Self;
        fn cmp_ref(a: Self, b: Self) -> Ordering;
        fn same(a: Self, b: Self) -> bool;
    }

    macro_rules! telem_int {
        ($($t:ty),*) => {$(
            impl TElem for $t {
                const SZ: usize = size_of::<$t>();
                fn from_b(b: &[u8]) -> Self {
                    <$t>::from_ne_bytes(b[..Self::SZ].try_into().unwrap())
                }
                fn to_b(self) -> Vec<u8> {
                    self.to_ne_bytes().to_vec()
                }
                fn gen(rng: &mut Rng) -> Self {
                    // Small values now and then, so that products do not always vanish.
                    if rng.below(4) == 0 {
                        Self::gen_small(rng)
                    } else {
                        Self::from_b(&rng.next().to_ne_bytes())
                    }
                }
                fn gen_small(rng: &mut Rng) -> Self {
                    Self::from_b(&(rng.next() % 4).to_ne_bytes())
                }
                fn reference(op: RedOp, a: Self, b: Self) -> Self {
                    match op {
                        RedOp::Sum => a.wrapping_add(b),
                        RedOp::Prod => a.wrapping_mul(b),
                        RedOp::Min => std::cmp::min(a, b),
                        RedOp::Max => std::cmp::max(a, b),
                        RedOp::And => a & b,
                        RedOp::Or => a | b,
                        RedOp::Xor => a ^ b,
                        RedOp::MinLoc | RedOp::MaxLoc => unreachable!(),
                    }
                }
                fn cmp_ref(a: Self, b: Self) -> Ordering {
                    a.cmp(&b)
                }
                fn same(a: Self, b: Self) -> bool {
                    a == b
                }
            }
        )*};
    }

    macro_rules! telem_float {
        ($($t:ident),*) => {$(
            impl TElem for $t {
                const SZ: usize = size_of::<$t>();
                fn from_b(b: &[u8]) -> Self {
                    <$t>::from_ne_bytes(b[..Self::SZ].try_into().unwrap())
                }
                fn to_b(self) -> Vec<u8> {
                    self.to_ne_bytes().to_vec()
                }
                fn gen(rng: &mut Rng) -> Self {
                    match rng.below(24) {
                        0 => $t::NAN,
                        1 => -$t::NAN,
                        2 => $t::INFINITY,
                        3 => $t::NEG_INFINITY,
                        4 => 0.0,
                        5 => -0.0,
                        6 => $t::MAX,
                        7 => $t::MIN_POSITIVE,
                        _ => {
                            let i = i16::try_from(rng.below(2001)).unwrap() - 1000;
                            <$t>::from(i) / 8.0
                        }
                    }
                }
                fn gen_small(rng: &mut Rng) -> Self {
                    [1.0, 2.0, -0.0, 0.0, $t::NAN, -$t::NAN, $t::NEG_INFINITY][rng.below(7)]
                }
                fn reference(op: RedOp, a: Self, b: Self) -> Self {
                    match op {
                        RedOp::Sum => a + b,
                        RedOp::Prod => a * b,
                        RedOp::Min => if b.total_cmp(&a).is_lt() { b } else { a },
                        RedOp::Max => if b.total_cmp(&a).is_gt() { b } else { a },
                        _ => unreachable!(),
                    }
                }
                fn cmp_ref(a: Self, b: Self) -> Ordering {
                    a.total_cmp(&b)
                }
                fn same(a: Self, b: Self) -> bool {
                    a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
                }
            }
        )*};
    }

    telem_int!(i32, i64, u32, u64);
    telem_float!(f32, f64);

    /// (left_count, result_count) splits.
    const SPLITS: &[(usize, usize)] = &[
        (0, 1),
        (0, 2),
        (0, 9),
        (1, 1),
        (1, 3),
        (2, 1),
        (5, 5),
        (7, 1),
        (0, 33),
        (16, 17),
    ];

    /// `bytes` copied into a fresh buffer at offset `off` (so 1 gives unaligned data).
    fn at(off: usize, bytes: &[u8]) -> Vec<u8> {
        let mut v = vec![0x5a; off];
        v.extend_from_slice(bytes);
        v
    }

    /// Runs entry `index` on the packed `left` and `right` (at offset `off`), returning the
    /// result bytes (checking that nothing past them was written).
    fn run(index: usize, es: usize, left: &[u8], right: &[u8], off: usize) -> Vec<u8> {
        let table = builtin_table();
        let lc = left.len() / es;
        let rc = right.len() / es;
        let lbuf = at(off, left);
        let rbuf = at(off, right);
        let mut out = vec![0xa5u8; off + rc * es + 7];
        (table[index].f)(
            &mut out[off..],
            rc,
            &lbuf[off..],
            lc,
            &rbuf[off..],
            es,
            0,
            0,
        );
        assert!(
            out[..off].iter().all(|&b| b == 0xa5),
            "wrote before results"
        );
        assert!(
            out[off + rc * es..].iter().all(|&b| b == 0xa5),
            "wrote past results"
        );
        out[off..off + rc * es].to_vec()
    }

    fn check_plain<T: TElem>(op: RedOp, seed: u64) {
        let mut rng = Rng(seed);
        let index = index_of(op, T::TYPE);
        let es = builtin_elem_size(op, T::TYPE);
        assert_eq!(es, T::SZ);
        for &(lc, rc) in SPLITS {
            for off in [0, 1, 3] {
                let left: Vec<T> = (0..lc).map(|_| T::gen(&mut rng)).collect();
                let right: Vec<T> = (0..rc).map(|_| T::gen(&mut rng)).collect();
                let lb: Vec<u8> = left.iter().flat_map(|v| v.to_b()).collect();
                let rb: Vec<u8> = right.iter().flat_map(|v| v.to_b()).collect();
                let out = run(index, es, &lb, &rb, off);
                for i in 0..rc {
                    let mut seq = left.iter().chain(&right[..=i]).copied();
                    let first = seq.next().unwrap();
                    let want = seq.fold(first, |a, b| T::reference(op, a, b));
                    let got = T::from_b(&out[i * es..]);
                    assert!(
                        T::same(got, want),
                        "{:?}/{:?} lc={lc} rc={rc} i={i}: got {got:?}, want {want:?}",
                        op,
                        T::TYPE
                    );
                }
            }
        }
    }

    fn loc_bytes<T: TElem>(l: Loc<T>, pad: u8) -> Vec<u8> {
        let mut b = vec![pad; 16];
        b[..T::SZ].copy_from_slice(&l.value.to_b());
        b[8..].copy_from_slice(&l.loc.to_ne_bytes());
        b
    }

    fn loc_from<T: TElem>(b: &[u8]) -> Loc<T> {
        assert!(b[T::SZ..8].iter().all(|&x| x == 0), "padding not zeroed");
        Loc {
            value: T::from_b(&b[..T::SZ]),
            loc: u64::from_ne_bytes(b[8..16].try_into().unwrap()),
        }
    }

    fn loc_ref<T: TElem>(op: RedOp, a: Loc<T>, b: Loc<T>) -> Loc<T> {
        let b_wins = match (op, T::cmp_ref(b.value, a.value)) {
            (_, Ordering::Equal) => b.loc < a.loc,
            (RedOp::MinLoc, o) => o == Ordering::Less,
            (RedOp::MaxLoc, o) => o == Ordering::Greater,
            _ => unreachable!(),
        };
        if b_wins {
            b
        } else {
            a
        }
    }

    fn same_loc<T: TElem>(a: Loc<T>, b: Loc<T>) -> bool {
        a.loc == b.loc && T::same(a.value, b.value)
    }

    fn check_loc<T: TElem>(op: RedOp, seed: u64) {
        let mut rng = Rng(seed);
        let index = index_of(op, T::TYPE);
        let es = builtin_elem_size(op, T::TYPE);
        assert_eq!(es, 16);
        for &(lc, rc) in SPLITS {
            for off in [0, 1, 5] {
                let gen = |rng: &mut Rng| Loc {
                    value: if rng.below(2) == 0 {
                        T::gen_small(rng)
                    } else {
                        T::gen(rng)
                    },
                    loc: rng.next() % 6,
                };
                let left: Vec<Loc<T>> = (0..lc).map(|_| gen(&mut rng)).collect();
                let right: Vec<Loc<T>> = (0..rc).map(|_| gen(&mut rng)).collect();
                let lb: Vec<u8> = left.iter().flat_map(|&v| loc_bytes(v, 0xee)).collect();
                let rb: Vec<u8> = right.iter().flat_map(|&v| loc_bytes(v, 0x77)).collect();
                let out = run(index, es, &lb, &rb, off);
                for i in 0..rc {
                    let mut seq = left.iter().chain(&right[..=i]).copied();
                    let first = seq.next().unwrap();
                    let want = seq.fold(first, |a, b| loc_ref(op, a, b));
                    let got = loc_from::<T>(&out[i * es..]);
                    assert!(
                        same_loc(got, want),
                        "{:?}/{:?} lc={lc} rc={rc} i={i}: got {got:?}, want {want:?}",
                        op,
                        T::TYPE
                    );
                }
            }
        }
    }

    fn check_type<T: TElem>(seed: u64) {
        for (k, op) in RedOp::ALL.into_iter().enumerate() {
            let seed = seed
                .wrapping_mul(31)
                .wrapping_add(u64::try_from(k).unwrap() + 1);
            if !builtin_supported(op, T::TYPE) {
                continue;
            }
            if op.is_loc() {
                check_loc::<T>(op, seed);
            } else {
                check_plain::<T>(op, seed);
            }
        }
    }

    #[test]
    fn every_supported_op_matches_reference() {
        check_type::<i32>(0x9e37_79b9_7f4a_7c15);
        check_type::<i64>(0xdead_beef_1234_5678);
        check_type::<u32>(0x0123_4567_89ab_cdef);
        check_type::<u64>(0x1357_9bdf_2468_ace0);
        check_type::<f32>(0x0f0f_0f0f_1234_4321);
        check_type::<f64>(0x7777_1111_3333_5555);
    }

    #[test]
    fn kernels_match_the_entries_elementwise() {
        let table = builtin_table();
        let kernels = builtin_kernels();
        assert_eq!(kernels.len(), table.len());
        for (i, k) in kernels.iter().enumerate() {
            let Some(k) = k else { continue };
            let (op, ty) = decode(i);
            let es = builtin_elem_size(op, ty);
            let n = 9;
            let a: Vec<u8> = (0..es * n)
                .map(|j| (j * 37 + i * 11).to_le_bytes()[0])
                .collect();
            let b: Vec<u8> = (0..es * n)
                .map(|j| (j * 53 + i * 7 + 3).to_le_bytes()[0])
                .collect();
            let mut acc = a.clone();
            k(&mut acc, &b);
            for e in 0..n {
                let r = e * es..(e + 1) * es;
                let mut want = vec![0u8; es];
                (table[i].f)(&mut want, 1, &a[r.clone()], 1, &b[r.clone()], es, 0, 0);
                assert_eq!(&acc[r], &want[..], "{op:?} {ty:?} element {e}");
            }
        }
    }

    #[test]
    fn table_shape() {
        let table = builtin_table();
        assert_eq!(N_BUILTIN, 48);
        assert_eq!(table.len(), N_BUILTIN);
        assert!(table.iter().all(|e| e.flags == fn_flags::AMSAFE));
        let mut seen = [false; N_BUILTIN];
        for op in RedOp::ALL {
            for ty in ElemType::ALL {
                let bitwise_float =
                    matches!(op, RedOp::And | RedOp::Or | RedOp::Xor) && ty.is_float();
                assert_eq!(builtin_supported(op, ty), !bitwise_float);
                match builtin_index(op, ty) {
                    None => assert!(bitwise_float, "{op:?} {ty:?}"),
                    Some(i) => {
                        assert!(!seen[i]);
                        seen[i] = true;
                        assert_eq!(decode(i), (op, ty));
                    }
                }
            }
        }
        assert!(seen.iter().all(|&s| s));
        assert_eq!(builtin_index(RedOp::Sum, ElemType::I32), Some(0));
        assert_eq!(builtin_index(RedOp::MaxLoc, ElemType::F64), Some(47));
        assert_eq!(describe(47).as_deref(), Some("maxloc:f64"));
        assert_eq!(
            RedOp::ALL
                .iter()
                .flat_map(|&op| ElemType::ALL.map(|ty| builtin_supported(op, ty)))
                .filter(|&s| s)
                .count(),
            48
        );
    }

    #[test]
    fn elem_sizes_and_loc_layout() {
        assert_eq!(builtin_elem_size(RedOp::Sum, ElemType::I32), 4);
        assert_eq!(builtin_elem_size(RedOp::Max, ElemType::U32), 4);
        assert_eq!(builtin_elem_size(RedOp::Min, ElemType::F32), 4);
        assert_eq!(builtin_elem_size(RedOp::Prod, ElemType::I64), 8);
        assert_eq!(builtin_elem_size(RedOp::Xor, ElemType::U64), 8);
        assert_eq!(builtin_elem_size(RedOp::Sum, ElemType::F64), 8);
        for ty in ElemType::ALL {
            assert_eq!(builtin_elem_size(RedOp::MinLoc, ty), 16);
            assert_eq!(builtin_elem_size(RedOp::MaxLoc, ty), 16);
        }
        assert_eq!(offset_of!(Loc<i32>, loc), 8);
        assert_eq!(offset_of!(Loc<f32>, loc), 8);
        assert_eq!(offset_of!(Loc<u64>, loc), 8);
        assert_eq!(offset_of!(Loc<f64>, value), 0);
        assert_eq!(<Loc<u32> as Operand>::SIZE, 16);
    }

    #[test]
    fn elem_types() {
        assert_eq!(<i32 as Elem>::TYPE, ElemType::I32);
        assert_eq!(<i64 as Elem>::TYPE, ElemType::I64);
        assert_eq!(<u32 as Elem>::TYPE, ElemType::U32);
        assert_eq!(<u64 as Elem>::TYPE, ElemType::U64);
        assert_eq!(<f32 as Elem>::TYPE, ElemType::F32);
        assert_eq!(<f64 as Elem>::TYPE, ElemType::F64);
        assert_eq!(RedOp::MaxLoc as usize, 8);
        assert_eq!(ElemType::F64 as usize, 5);
    }

    #[test]
    fn describe_names() {
        assert_eq!(describe(0).as_deref(), Some("sum:i32"));
        assert_eq!(
            describe(index_of(RedOp::Sum, ElemType::F64)).as_deref(),
            Some("sum:f64")
        );
        assert_eq!(
            describe(index_of(RedOp::MinLoc, ElemType::I32)).as_deref(),
            Some("minloc:i32")
        );
        assert_eq!(
            describe(index_of(RedOp::Xor, ElemType::U64)).as_deref(),
            Some("xor:u64")
        );
        assert_eq!(describe(47).as_deref(), Some("maxloc:f64"));
        assert_eq!(describe(N_BUILTIN), None);
        assert_eq!(describe(usize::MAX), None);
        let mut names: Vec<String> = (0..N_BUILTIN).map(|i| describe(i).unwrap()).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), N_BUILTIN);
    }

    #[test]
    fn loc_ties_take_smaller_loc() {
        let l = |value: i32, loc: u64| Loc { value, loc };
        for op in [RedOp::MinLoc, RedOp::MaxLoc] {
            let idx = index_of(op, ElemType::I32);
            for (a, b) in [(l(5, 3), l(5, 1)), (l(5, 1), l(5, 3))] {
                let out = run(idx, 16, &loc_bytes(a, 0xff), &loc_bytes(b, 0xff), 1);
                assert_eq!(loc_from::<i32>(&out), l(5, 1), "{op:?}");
            }
        }
        // Value first, then loc.
        let idx = index_of(RedOp::MinLoc, ElemType::I32);
        let out = run(idx, 16, &loc_bytes(l(4, 9), 0), &loc_bytes(l(5, 0), 0), 0);
        assert_eq!(loc_from::<i32>(&out), l(4, 9));
        let idx = index_of(RedOp::MaxLoc, ElemType::I32);
        let out = run(idx, 16, &loc_bytes(l(4, 0), 0), &loc_bytes(l(5, 9), 0), 0);
        assert_eq!(loc_from::<i32>(&out), l(5, 9));

        // Floats: total order, then loc.
        let f = |value: f64, loc: u64| Loc { value, loc };
        let idx = index_of(RedOp::MaxLoc, ElemType::F64);
        let lb: Vec<u8> = [f(1.5, 7), f(f64::NAN, 4), f(2.0, 0)]
            .into_iter()
            .flat_map(|v| loc_bytes(v, 0))
            .collect();
        let rb = loc_bytes(f(f64::NAN, 2), 0);
        let got = loc_from::<f64>(&run(idx, 16, &lb, &rb, 1));
        assert!(got.value.is_nan() && got.loc == 2);
        let idx = index_of(RedOp::MinLoc, ElemType::F64);
        let lb = loc_bytes(f(0.0, 1), 0);
        let rb = loc_bytes(f(-0.0, 5), 0);
        let got = loc_from::<f64>(&run(idx, 16, &lb, &rb, 0));
        assert_eq!(got.value.to_bits(), (-0.0f64).to_bits());
        assert_eq!(got.loc, 5);
    }

    #[test]
    fn loc_ops_commute_and_associate() {
        let mut rng = Rng(0xabcd_ef01_2345_6789);
        for _ in 0..2000 {
            let mut g = || Loc {
                value: f32::gen_small(&mut rng),
                loc: rng.next() % 3,
            };
            let (a, b, c) = (g(), g(), g());
            for f in [minloc::<f32>, maxloc::<f32>] {
                assert!(same_loc(f(a, b), f(b, a)));
                assert!(same_loc(f(f(a, b), c), f(a, f(b, c))));
            }
        }
    }

    #[test]
    fn float_nan_order() {
        let min = index_of(RedOp::Min, ElemType::F64);
        let max = index_of(RedOp::Max, ElemType::F64);
        let b = |v: &[f64]| -> Vec<u8> { v.iter().flat_map(|x| x.to_ne_bytes()).collect() };
        let l = b(&[1.0, f64::NAN]);
        let r = b(&[f64::INFINITY]);
        assert!(f64::from_b(&run(max, 8, &l, &r, 1)).is_nan());
        assert_eq!(f64::from_b(&run(min, 8, &l, &r, 1)), 1.0);
        let l = b(&[0.0]);
        let r = b(&[-0.0]);
        assert!(f64::from_b(&run(min, 8, &l, &r, 0)).is_sign_negative());
        assert!(f64::from_b(&run(max, 8, &l, &r, 0)).is_sign_positive());
    }

    #[test]
    fn prefix_results_and_empty_left() {
        let idx = index_of(RedOp::Sum, ElemType::I64);
        let r: Vec<u8> = [1i64, 2, 3, 4]
            .iter()
            .flat_map(|x| x.to_ne_bytes())
            .collect();
        let l: Vec<u8> = [10i64, 20].iter().flat_map(|x| x.to_ne_bytes()).collect();
        let out = run(idx, 8, &[], &r, 1);
        let got: Vec<i64> = out.chunks(8).map(i64::from_b).collect();
        assert_eq!(got, [1, 3, 6, 10]);
        let out = run(idx, 8, &l, &r, 1);
        let got: Vec<i64> = out.chunks(8).map(i64::from_b).collect();
        assert_eq!(got, [31, 33, 36, 40]);
    }

    #[test]
    fn bad_arguments_write_nothing() {
        let table = builtin_table();
        let call = |index: usize,
                    out_len: usize,
                    rc: usize,
                    left: &[u8],
                    lc: usize,
                    right: &[u8],
                    es: usize| {
            let mut out = vec![0xc3u8; out_len];
            (table[index].f)(&mut out, rc, left, lc, right, es, 0, 0);
            out.iter().all(|&b| b == 0xc3)
        };
        let data = vec![1u8; 64];
        let sum32 = index_of(RedOp::Sum, ElemType::I32);
        // Sanity: a good call writes.
        assert!(!call(sum32, 16, 4, &data, 2, &data, 4));
        // Wrong element size.
        assert!(call(sum32, 16, 2, &data, 2, &data, 8));
        assert!(call(sum32, 16, 4, &data, 2, &data, 0));
        // Short results, left, right.
        assert!(call(sum32, 15, 4, &data, 2, &data, 4));
        assert!(call(sum32, 16, 4, &data[..7], 2, &data, 4));
        assert!(call(sum32, 16, 4, &data, 2, &data[..15], 4));
        // No results.
        assert!(call(sum32, 16, 0, &data, 2, &data, 4));
        // Overflowing counts.
        assert!(call(sum32, 16, usize::MAX, &data, 2, &data, 4));
        assert!(call(sum32, 16, 1, &data, usize::MAX / 2, &data, 4));
        // Loc entries: size 16 only.
        let minloc32 = index_of(RedOp::MinLoc, ElemType::I32);
        assert!(call(minloc32, 64, 2, &data, 1, &data, 12));
        assert!(call(minloc32, 64, 2, &data, 1, &data, 4));
        assert!(!call(minloc32, 64, 2, &data, 1, &data, 16));
        // Bitwise operators on floats have no entry.
        for op in [RedOp::And, RedOp::Or, RedOp::Xor] {
            for ty in [ElemType::F32, ElemType::F64] {
                assert_eq!(builtin_index(op, ty), None);
            }
        }
    }
}
