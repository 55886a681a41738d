//! Plain data: the element types the typed collectives move and combine as bytes.

use crate::builtin::{ElemType, Loc};

/// Which built-in reductions ([`RedOp`](crate::RedOp)) apply to a [`Plain`] type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ElemKind {
    /// None: reductions of this type take a closure ([`Op::custom`](crate::Op::custom)).
    Other,
    /// The value operators (`Sum`, `Prod`, `Min`, `Max`, and for integers `And`, `Or`,
    /// `Xor`) on elements laid out as this [`ElemType`].
    Value(ElemType),
    /// `MinLoc` and `MaxLoc` on [`Loc`] elements whose value is this [`ElemType`].
    Loc(ElemType),
}

/// Plain data: a type whose values the collectives may copy as bytes between processes and
/// rebuild from any bytes a peer sends.
///
/// Implemented for the integer and float primitives, arrays of `Plain` types, and
/// [`Loc<i64>`], [`Loc<u64>`] and [`Loc<f64>`] (a `Loc` of a 4-byte value has 4 bytes of
/// padding and is not `Plain`; reduce a `Loc<i64>` instead, or use
/// [`Coll::reduce_to_all_loc`](crate::Coll::reduce_to_all_loc)). A `#[repr(C)]` struct of
/// `Plain` fields without padding can implement it too:
///
/// ```
/// /// A 3-vector: three f64, no padding.
/// #[derive(Clone, Copy, Debug, PartialEq)]
/// #[repr(C)]
/// struct V3 {
///     x: f64,
///     y: f64,
///     z: f64,
/// }
///
/// // SAFETY: repr(C) with three f64 fields: 24 bytes, no padding, every bit pattern is a
/// // valid V3, no pointers.
/// unsafe impl amnet::coll::Plain for V3 {}
/// ```
///
/// # Safety
///
/// Implementing `Plain` for `T` promises:
/// - every bit pattern of `size_of::<T>()` bytes is a valid `T` (so no `bool`, `char`,
///   enums, references, `NonZero*`, `Box`, ...): a rank builds values from the bytes its
///   peers send, and a peer that disagrees on the type sends any bytes;
/// - `T` has no padding bytes, and no interior mutability: the collectives read every byte
///   of a value through a shared borrow, from any thread of the process.
///
/// [`Plain::KIND`] is not part of the contract: a built-in whose element size differs from
/// `size_of::<T>()` is refused with [`Error::Usage`](amnet_core::Error::Usage) at the call.
pub unsafe trait Plain: Copy + Send + Sync + 'static {
    /// The built-in reductions that apply: [`ElemKind::Other`] unless the type is laid out
    /// as one of the built-in element types (the six primitives, and `Loc` of the 8-byte
    /// ones). A `#[repr(transparent)]` wrapper of such a type may name its type to get the
    /// built-ins.
    const KIND: ElemKind = ElemKind::Other;
}

macro_rules! plain {
    ($($t:ty => $k:expr),* $(,)?) => {$(
        // SAFETY: a primitive integer or float: no padding, every bit pattern valid.
        unsafe impl Plain for $t {
            const KIND: ElemKind = $k;
        }
    )*};
}

plain!(
    u8 => ElemKind::Other,
    u16 => ElemKind::Other,
    u32 => ElemKind::Value(ElemType::U32),
    u64 => ElemKind::Value(ElemType::U64),
    u128 => ElemKind::Other,
    usize => ElemKind::Other,
    i8 => ElemKind::Other,
    i16 => ElemKind::Other,
    i32 => ElemKind::Value(ElemType::I32),
    i64 => ElemKind::Value(ElemType::I64),
    i128 => ElemKind::Other,
    isize => ElemKind::Other,
    f32 => ElemKind::Value(ElemType::F32),
    f64 => ElemKind::Value(ElemType::F64),
);

// SAFETY: an array of Plain elements has no padding between them (a type's size is a
// multiple of its alignment) and is valid for every bit pattern when its elements are.
unsafe impl<T: Plain, const N: usize> Plain for [T; N] {}

// SAFETY: `Loc` is repr(C) { value: T, loc: u64 }; with an 8-byte, 8-aligned T it is 16
// bytes without padding, and both fields are valid for every bit pattern.
unsafe impl Plain for Loc<i64> {
    const KIND: ElemKind = ElemKind::Loc(ElemType::I64);
}
// SAFETY: as for `Loc<i64>`.
unsafe impl Plain for Loc<u64> {
    const KIND: ElemKind = ElemKind::Loc(ElemType::U64);
}
// SAFETY: as for `Loc<i64>`.
unsafe impl Plain for Loc<f64> {
    const KIND: ElemKind = ElemKind::Loc(ElemType::F64);
}

/// The bytes of `v`.
pub(crate) fn bytes<T: Plain>(v: &[T]) -> &[u8] {
    // SAFETY: `T: Plain` has no padding, so every byte of the slice is initialized; the
    // length is the slice's size in bytes; `u8` has alignment 1.
    unsafe { std::slice::from_raw_parts(v.as_ptr().cast::<u8>(), std::mem::size_of_val(v)) }
}

/// The value in the first `size_of::<T>()` bytes of `b` (any alignment), or `None` when `b`
/// is shorter.
pub(crate) fn read<T: Plain>(b: &[u8]) -> Option<T> {
    let b = b.get(..std::mem::size_of::<T>())?;
    // SAFETY: `b` holds size_of::<T>() bytes; `T: Plain` is valid for any bit pattern;
    // `read_unaligned` has no alignment requirement.
    Some(unsafe { std::ptr::read_unaligned(b.as_ptr().cast::<T>()) })
}

/// Writes `v` to the first `size_of::<T>()` bytes of `out` (nothing when it is shorter).
pub(crate) fn write<T: Plain>(out: &mut [u8], v: T) {
    if let Some(o) = out.get_mut(..std::mem::size_of::<T>()) {
        o.copy_from_slice(bytes(std::slice::from_ref(&v)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_round_trip_at_any_alignment() {
        let v = [Loc {
            value: -3.5f64,
            loc: 9,
        }];
        let mut buf = [0u8; 17];
        buf[1..].copy_from_slice(bytes(&v));
        let back: Loc<f64> = read(&buf[1..]).unwrap();
        assert_eq!(back, v[0]);
        assert!(read::<u64>(&buf[..7]).is_none());
        write(&mut buf[3..], 0x0102_0304u32);
        assert_eq!(read::<u32>(&buf[3..]), Some(0x0102_0304));
        assert_eq!(bytes(&[[1u16, 2], [3, 4]]).len(), 8);
    }
}
