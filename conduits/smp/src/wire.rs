//! The layout of one message inside a ring slot, defined once.
//!
//! ```text
//!  0      1      2       3     4            8              16
//!  [handler][kind][nargs][ 0 ][payload_len u32][long_offset u64]
//!  16: args, nargs * u32, padded to 8 bytes
//!  then: the payload, for Medium and small Long (larger Long payloads go straight to the
//!  target segment)
//! ```
//! kind: bits 0-1 the category (0 Short, 1 Medium, 2 Long), bit 2 set for replies, bit 3 set
//! for a Long whose (small) payload travels inline: the receiver copies it into its own
//! segment before the handler runs, which saves a cache-line transfer into the peer's segment.
//! With up to 10 arguments a Short message fits in the slot's first cache line.
//!
//! Two rarer kinds: bit 4 ([`FIXED_PAYLOAD`]) marks a Medium whose payload starts at
//! [`FIXED_AT`] whatever the number of arguments (a negotiated-payload message, built in the
//! slot before its arguments were known), and [`VOID`] a slot that carries nothing (a
//! negotiated-payload message cancelled after its slot was claimed); the receiver skips it.

use amnet_core::{Category, OutMsg, MAX_ARGS};

/// Header bytes before the arguments.
pub(crate) const HDR: usize = 16;
/// Kind bit: the Medium payload starts at [`FIXED_AT`].
pub(crate) const FIXED_PAYLOAD: u8 = 16;
/// The kind of a slot that carries nothing.
pub(crate) const VOID: u8 = 32;
/// Where a [`FIXED_PAYLOAD`] message's payload starts: after room for every argument.
pub(crate) const FIXED_AT: usize = HDR + args_bytes(MAX_ARGS);

/// Bytes the arguments occupy (padded to 8).
#[inline(always)]
pub(crate) const fn args_bytes(nargs: usize) -> usize {
    (nargs * 4 + 7) & !7
}

/// Slot bytes a message needs, with its payload inline when `inline` (Medium always; Long
/// when it fits a small slot).
#[inline(always)]
pub(crate) fn encoded_len(msg: &OutMsg<'_>, inline: bool) -> usize {
    HDR + args_bytes(msg.args.len()) + if inline { msg.payload.len() } else { 0 }
}

/// Copy `len` bytes, without a call for the small sizes inline payloads usually have: two
/// overlapping loads and stores of the widest word that fits.
///
/// # Safety
/// - `src` is valid for `len` bytes of reads, `dst` for `len` bytes of writes, and the two
///   ranges do not overlap.
#[inline(always)]
pub(crate) unsafe fn copy_small(src: *const u8, dst: *mut u8, len: usize) {
    // SAFETY: in every arm, every access lies within `[0, len)` of its range, per the contract.
    unsafe {
        match len {
            0 => {}
            1..=3 => {
                *dst = *src;
                *dst.add(len / 2) = *src.add(len / 2);
                *dst.add(len - 1) = *src.add(len - 1);
            }
            4..=7 => {
                let a = src.cast::<u32>().read_unaligned();
                let b = src.add(len - 4).cast::<u32>().read_unaligned();
                dst.cast::<u32>().write_unaligned(a);
                dst.add(len - 4).cast::<u32>().write_unaligned(b);
            }
            8..=16 => {
                let a = src.cast::<u64>().read_unaligned();
                let b = src.add(len - 8).cast::<u64>().read_unaligned();
                dst.cast::<u64>().write_unaligned(a);
                dst.add(len - 8).cast::<u64>().write_unaligned(b);
            }
            17..=32 => {
                let a = src.cast::<u128>().read_unaligned();
                let b = src.add(len - 16).cast::<u128>().read_unaligned();
                dst.cast::<u128>().write_unaligned(a);
                dst.add(len - 16).cast::<u128>().write_unaligned(b);
            }
            _ => amnet_core::mem::copy(src, dst, len),
        }
    }
}

/// The header's first 8 bytes as one word: `[handler, kind, nargs, 0]` then the payload
/// length, laid out in memory as the module notes show.
#[inline(always)]
fn pack_header(handler: u8, kind: u8, nargs: u8, plen: u32) -> u64 {
    let l = plen.to_ne_bytes();
    u64::from_ne_bytes([handler, kind, nargs, 0, l[0], l[1], l[2], l[3]])
}

/// Write `msg` at `p`, with the payload inline when `inline`.
///
/// # Safety
/// - `p` is 8-byte aligned and valid for `encoded_len(msg, inline)` bytes of writes.
/// - `msg.args.len() <= MAX_ARGS` and the payload length fits in u32.
/// - `inline` is true for Medium and false for Short.
#[inline(always)]
pub(crate) unsafe fn encode(p: *mut u8, msg: &OutMsg<'_>, inline: bool) {
    let kind = msg.category.code()
        | if msg.is_reply { 4 } else { 0 }
        | if inline && msg.category == Category::Long {
            8
        } else {
            0
        };
    #[allow(clippy::cast_possible_truncation)] // checked by the caller: nargs <= 16
    let nargs = msg.args.len() as u8;
    #[allow(clippy::cast_possible_truncation)] // checked by the caller: payload <= u32::MAX
    let plen = msg.payload.len() as u32;
    // SAFETY: per the contract, p is aligned and the region is large enough.
    unsafe {
        // The first 8 bytes in one store (native byte order: both ends are this host).
        p.cast::<u64>()
            .write(pack_header(msg.handler, kind, nargs, plen));
        p.add(8).cast::<u64>().write(msg.long_offset);
        // At most 16 words: a short loop beats a call to memcpy.
        let dst = p.add(HDR).cast::<u32>();
        for (i, &a) in msg.args.iter().enumerate() {
            dst.add(i).write(a);
        }
        if inline {
            copy_small(
                msg.payload.as_ptr(),
                p.add(HDR + args_bytes(msg.args.len())),
                msg.payload.len(),
            );
        }
    }
}

/// A decoded slot.
pub(crate) struct Decoded<'a> {
    pub(crate) handler: u8,
    pub(crate) category: Category,
    pub(crate) is_reply: bool,
    pub(crate) args: &'a [u32],
    pub(crate) payload_len: usize,
    pub(crate) long_offset: u64,
    /// The inline payload (Medium, small Long) or empty.
    pub(crate) inline: &'a [u8],
}

/// Why a slot was rejected (or, `Void`, skipped).
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum DecodeError {
    /// A cancelled negotiated-payload slot: nothing to deliver, nothing wrong.
    Void,
    BadKind(u8),
    TooManyArgs(u8),
    PayloadOverflow(usize),
}

/// A kind with bits above the category, reply and inline-Long bits: a fixed-payload Medium
/// (returned as its plain kind, and true), a void slot, or garbage.
#[cold]
fn rare_kind(kind: u8) -> Result<(u8, bool), DecodeError> {
    if kind == VOID {
        return Err(DecodeError::Void);
    }
    let plain = kind & !FIXED_PAYLOAD;
    if kind & FIXED_PAYLOAD != 0 && plain & !4 == 1 {
        return Ok((plain, true));
    }
    Err(DecodeError::BadKind(kind))
}

/// Write the header and arguments of a Medium whose `len` payload bytes already lie at
/// [`FIXED_AT`] (a negotiated-payload commit).
///
/// # Safety
/// - `p` is 8-byte aligned and valid for `FIXED_AT` bytes of writes.
/// - `args.len() <= MAX_ARGS`; `len` fits in u32.
pub(crate) unsafe fn encode_fixed(
    p: *mut u8,
    handler: u8,
    is_reply: bool,
    args: &[u32],
    len: usize,
) {
    let kind = 1 | FIXED_PAYLOAD | if is_reply { 4 } else { 0 };
    #[allow(clippy::cast_possible_truncation)] // checked by the caller: nargs <= 16
    let nargs = args.len() as u8;
    #[allow(clippy::cast_possible_truncation)] // checked by the caller: len <= u32::MAX
    let plen = len as u32;
    // SAFETY: per the contract, p is aligned and the header and argument area are writable.
    unsafe {
        p.cast::<u64>()
            .write(pack_header(handler, kind, nargs, plen));
        p.add(8).cast::<u64>().write(0);
        let dst = p.add(HDR).cast::<u32>();
        for (i, &a) in args.iter().enumerate() {
            dst.add(i).write(a);
        }
    }
}

/// Mark the slot at `p` void: the receiver skips it.
///
/// # Safety
/// - `p` is 8-byte aligned and valid for 8 bytes of writes.
pub(crate) unsafe fn encode_void(p: *mut u8) {
    // SAFETY: per the contract.
    unsafe { p.cast::<u64>().write(pack_header(0, VOID, 0, 0)) };
}

/// Read the message at `p`.
///
/// # Safety
/// - `p` is 8-byte aligned, valid for `cap` bytes of reads, and stays valid and unmodified for
///   the lifetime `'a`.
#[inline(always)]
pub(crate) unsafe fn decode<'a>(p: *const u8, cap: usize) -> Result<Decoded<'a>, DecodeError> {
    // SAFETY: per the contract, the header bytes are readable and 8-byte aligned.
    let hdr = unsafe { p.cast::<u64>().read() };
    let [handler, kind, nargs, _, l0, l1, l2, l3] = hdr.to_ne_bytes();
    let payload_len = u32::from_ne_bytes([l0, l1, l2, l3]) as usize;
    // SAFETY: as above.
    let long_offset = unsafe { p.add(8).cast::<u64>().read() };
    let (kind, fixed) = if kind & !15 == 0 {
        (kind, false)
    } else {
        rare_kind(kind)?
    };
    let Some(category) = Category::from_code(kind) else {
        return Err(DecodeError::BadKind(kind));
    };
    if usize::from(nargs) > MAX_ARGS {
        return Err(DecodeError::TooManyArgs(nargs));
    }
    let ab = if fixed {
        FIXED_AT - HDR
    } else {
        args_bytes(usize::from(nargs))
    };
    // SAFETY: args lie inside the slot (HDR + 64 <= cap for every ring), aligned to 4.
    let args = unsafe { std::slice::from_raw_parts(p.add(HDR).cast::<u32>(), usize::from(nargs)) };
    let has_inline = category == Category::Medium || (category == Category::Long && kind & 8 != 0);
    let inline: &[u8] = if has_inline {
        if HDR + ab + payload_len > cap {
            return Err(DecodeError::PayloadOverflow(payload_len));
        }
        // SAFETY: bounds checked against the slot's capacity just above.
        unsafe { std::slice::from_raw_parts(p.add(HDR + ab), payload_len) }
    } else {
        &[]
    };
    Ok(Decoded {
        handler,
        category,
        is_reply: kind & 4 != 0,
        args,
        payload_len,
        long_offset,
        inline,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copy_small_every_length() {
        let src: Vec<u8> = (0..200u8).collect();
        for len in 0..200 {
            let mut dst = vec![0xAAu8; len + 8];
            // SAFETY: both buffers hold at least `len` bytes and are distinct.
            unsafe { copy_small(src.as_ptr(), dst.as_mut_ptr(), len) };
            assert_eq!(&dst[..len], &src[..len], "length {len}");
            assert!(dst[len..].iter().all(|&b| b == 0xAA), "wrote past {len}");
        }
    }

    #[test]
    fn roundtrip_and_rejects() {
        let mut buf = vec![0u64; 64];
        let p = buf.as_mut_ptr().cast::<u8>();
        let payload = [1u8, 2, 3, 4, 5];
        let msg = OutMsg {
            handler: 200,
            category: Category::Medium,
            is_reply: true,
            args: &[7, 8, 9],
            payload: &payload,
            long_offset: 0,
        };
        // SAFETY: buffer of 512 aligned bytes.
        unsafe { encode(p, &msg, true) };
        // SAFETY: as above.
        let d = unsafe { decode(p, 512) }.unwrap();
        assert_eq!(
            (d.handler, d.category, d.is_reply),
            (200, Category::Medium, true)
        );
        assert_eq!(d.args, &[7, 8, 9]);
        assert_eq!(d.inline, &payload);
        // SAFETY: as above.
        let short_cap = unsafe { decode(p, 20) };
        assert!(matches!(short_cap, Err(DecodeError::PayloadOverflow(5))));
        // SAFETY: writing inside the buffer.
        unsafe { *p.add(1) = 3 };
        // SAFETY: as above.
        let bad_kind = unsafe { decode(p, 512) };
        assert!(matches!(bad_kind, Err(DecodeError::BadKind(3))));
        // SAFETY: as above.
        unsafe {
            *p.add(1) = 0;
            *p.add(2) = 17
        };
        // SAFETY: as above.
        let many_args = unsafe { decode(p, 512) };
        assert!(matches!(many_args, Err(DecodeError::TooManyArgs(17))));
    }

    #[test]
    fn fixed_payload_and_void() {
        let mut buf = vec![0u64; 64];
        let p = buf.as_mut_ptr().cast::<u8>();
        let payload = [9u8, 8, 7];
        // SAFETY: buffer of 512 aligned bytes; the payload goes where a commit finds it.
        unsafe {
            std::ptr::copy_nonoverlapping(payload.as_ptr(), p.add(FIXED_AT), 3);
            encode_fixed(p, 201, false, &[5, 6], 3);
        }
        // SAFETY: as above.
        let d = unsafe { decode(p, 512) }.unwrap();
        assert_eq!(
            (d.handler, d.category, d.is_reply),
            (201, Category::Medium, false)
        );
        assert_eq!(d.args, &[5, 6]);
        assert_eq!(d.inline, &payload);
        // SAFETY: as above.
        let short_cap = unsafe { decode(p, FIXED_AT + 2) };
        assert!(matches!(short_cap, Err(DecodeError::PayloadOverflow(3))));
        // A fixed payload on anything but a Medium is garbage.
        // SAFETY: writing inside the buffer.
        unsafe { *p.add(1) = FIXED_PAYLOAD | 2 };
        // SAFETY: as above.
        let bad = unsafe { decode(p, 512) };
        assert!(matches!(bad, Err(DecodeError::BadKind(18))));
        // SAFETY: as above.
        unsafe { encode_void(p) };
        // SAFETY: as above.
        let void = unsafe { decode(p, 512) };
        assert!(matches!(void, Err(DecodeError::Void)));
    }
}
