//! The bytes amnet puts inside MPI messages, defined once.
//!
//! Every message on the private communicator is one of three kinds, told apart by its MPI tag
//! (see `conduit/mod.rs`): an active message, a credit return, or an exit notice. A separate Long
//! payload travels as raw bytes under a tag of its own and has no header.
//!
//! Active message, little-endian:
//!
//! ```text
//!  0        1       2         3       4               6               8
//!  [version][flags][handler][nargs][req credits u16][rep credits u16]
//!  8  [long offset u64]   16 [payload length u64]
//!  24 [data tag index u32] 28 [reserved u32, zero]
//!  32 args: nargs x u32
//!  32 + 4 nargs: the payload, for Medium and for a Long sent inline
//! ```
//!
//! flags: bits 0-1 the category (0 Short, 1 Medium, 2 Long), bit 2 set for a reply, bit 3 set
//! for a Long whose payload follows as a separate message under data tag `TAG_LONG + index`,
//! bit 4 set for a Long whose payload the sender already put into the target segment (MPI
//! one-sided, completed before the message was sent), bit 5 set when the receiver must call
//! `MPI_Win_sync` before the handler runs (the sender has used one-sided communication, or
//! heard from a rank that did; see `conduit/send.rs` and `conduit/progress.rs`). The credit
//! fields return flow-control credits to the receiver (see `conduit/send.rs`).
//!
//! Control messages are 8 bytes: `[version][kind][0][0]` then a 4-byte body: two u16 credit
//! counts (kind 1, credit return) or the i32 exit code (kind 2, exit notice).
//!
//! [`decode`] checks every field against the message length and the conduit's limits, and
//! rejects anything malformed with a [`WireError`]; it never panics.

use std::fmt;

use amnet_core::{Category, OutMsg, MAX_ARGS};

/// Version byte at the start of every header.
pub(crate) const VERSION: u8 = 1;
/// Bytes of the active-message header before the arguments.
pub(crate) const HDR: usize = 32;
/// Bytes of a control message.
pub(crate) const CTRL_LEN: usize = 8;
/// Largest Medium payload, and largest Long payload sent inline.
pub(crate) const MAX_INLINE: usize = 65536;
/// Number of distinct data tags a separate Long payload may use.
pub(crate) const LONG_TAGS: u32 = 16384;

const FLAG_REPLY: u8 = 4;
const FLAG_SEPARATE: u8 = 8;
const FLAG_PLACED: u8 = 16;
const FLAG_SYNC: u8 = 32;
const CTRL_CREDIT: u8 = 1;
const CTRL_EXIT: u8 = 2;
const CTRL_NUDGE: u8 = 3;

/// Bytes an active message with `nargs` arguments and `inline` payload bytes occupies.
#[inline]
pub(crate) const fn encoded_len(nargs: usize, inline: usize) -> usize {
    HDR + 4 * nargs + inline
}

/// Credits returned to the receiver of a message: `[requests, replies]`.
pub(crate) type Credits = [u16; 2];

/// How the payload of a message travels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Data {
    /// Inside the message (every Medium; a Long up to [`MAX_INLINE`] bytes). A Short has none.
    Inline,
    /// Long only: as a separate message under this data tag index.
    Separate(u32),
    /// Long only: already in the target segment, put there (and completed) by the sender
    /// before it sent the message.
    Placed,
}

/// Append the active message `msg` to `out` (which should be empty).
///
/// The payload travels as `data` says: inline, or (for a Long) sent separately by the caller
/// under a data tag index, or already put into the target segment by the caller. `sync` asks
/// the receiver for `MPI_Win_sync` before the handler runs. The caller guarantees what the
/// core checks: at most [`MAX_ARGS`] arguments, and an inline payload of at most
/// [`MAX_INLINE`] bytes.
pub(crate) fn encode(
    out: &mut Vec<u8>,
    msg: &OutMsg<'_>,
    credits: Credits,
    data: Data,
    sync: bool,
) {
    debug_assert!(msg.args.len() <= MAX_ARGS);
    let category = msg.category.code();
    let (kind, tag) = match data {
        Data::Inline => (0, 0),
        Data::Separate(t) => (FLAG_SEPARATE, t),
        Data::Placed => (FLAG_PLACED, 0),
    };
    let flags = category
        | if msg.is_reply { FLAG_REPLY } else { 0 }
        | if sync { FLAG_SYNC } else { 0 }
        | kind;
    let inline: &[u8] = match (msg.category, data) {
        (Category::Short, _) | (Category::Long, Data::Separate(_) | Data::Placed) => &[],
        _ => msg.payload,
    };
    let args = &msg.args[..msg.args.len().min(MAX_ARGS)];
    let nargs = u8::try_from(args.len()).unwrap_or(u8::MAX);
    let offset = if msg.category == Category::Long {
        msg.long_offset
    } else {
        0
    };
    let plen = if msg.category == Category::Short {
        0
    } else {
        msg.payload.len() as u64
    };
    let [c0, c1] = credits[0].to_le_bytes();
    let [c2, c3] = credits[1].to_le_bytes();
    // The header as four words, appended at once; the arguments follow one by one (a Short
    // usually has one or two), then the inline payload.
    let mut h = [0u8; HDR];
    h[..8].copy_from_slice(&[VERSION, flags, msg.handler, nargs, c0, c1, c2, c3]);
    h[8..16].copy_from_slice(&offset.to_le_bytes());
    h[16..24].copy_from_slice(&plen.to_le_bytes());
    h[24..32].copy_from_slice(&u64::from(tag).to_le_bytes());
    out.reserve(encoded_len(args.len(), inline.len()));
    out.extend_from_slice(&h);
    for a in args {
        out.extend_from_slice(&a.to_le_bytes());
    }
    if !inline.is_empty() {
        out.extend_from_slice(inline);
    }
}

/// A decoded active-message header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Header {
    pub(crate) handler: u8,
    pub(crate) category: Category,
    pub(crate) is_reply: bool,
    /// How the payload travels (always `Inline` for Short and Medium).
    pub(crate) data: Data,
    /// The receiver calls `MPI_Win_sync` before the handler runs.
    pub(crate) sync: bool,
    /// Number of arguments; [`Header::read_args`] reads them from the message.
    pub(crate) nargs: u8,
    pub(crate) long_offset: u64,
    pub(crate) payload_len: u64,
    /// Where the inline payload starts in the message (Medium, inline Long).
    pub(crate) payload_at: usize,
    pub(crate) credits: Credits,
}

impl Header {
    /// True when the payload travels inside the message (Medium, and Long sent inline).
    #[inline]
    pub(crate) fn has_inline_payload(&self) -> bool {
        self.category != Category::Short && self.data == Data::Inline
    }

    /// The arguments of `msg`, the message this header was decoded from, copied into `out`.
    #[inline]
    pub(crate) fn read_args<'a>(&self, msg: &[u8], out: &'a mut [u32; MAX_ARGS]) -> &'a [u32] {
        let n = usize::from(self.nargs).min(MAX_ARGS);
        let raw = msg.get(HDR..HDR + 4 * n).unwrap_or(&[]);
        for (a, b) in out.iter_mut().zip(raw.chunks_exact(4)) {
            *a = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        }
        &out[..raw.len() / 4]
    }
}

/// Why a message was rejected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum WireError {
    /// Fewer bytes than the header (or control message) needs.
    Truncated { len: usize, need: usize },
    /// An unknown version byte.
    Version(u8),
    /// Unknown flag bits or an impossible combination.
    Flags(u8),
    /// Handler index 0.
    HandlerZero,
    /// More than 16 arguments.
    TooManyArgs(u8),
    /// The message length disagrees with the header.
    Length { len: usize, expected: u64 },
    /// A payload larger than the conduit sends.
    PayloadTooLarge(u64),
    /// A Short message with a payload, or a Medium/Short with a Long offset.
    StrayField(&'static str),
    /// A Long range that overflows 64 bits.
    OffsetOverflow,
    /// A data tag index outside `0..LONG_TAGS`.
    DataTag(u32),
    /// A separate Long payload small enough to travel inline (senders never split those).
    SeparateTooSmall(u64),
    /// A placed Long payload with no bytes (senders put only non-empty payloads).
    PlacedEmpty,
    /// A reserved field that is not zero.
    Reserved,
    /// An unknown control-message kind.
    ControlKind(u8),
}

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WireError::Truncated { len, need } => {
                write!(f, "truncated: {len} bytes, at least {need} needed")
            }
            WireError::Version(v) => write!(f, "unknown wire version {v} (expected {VERSION})"),
            WireError::Flags(b) => write!(f, "invalid flags {b:#04x}"),
            WireError::HandlerZero => write!(f, "handler index 0"),
            WireError::TooManyArgs(n) => write!(f, "{n} arguments (at most {MAX_ARGS})"),
            WireError::Length { len, expected } => {
                write!(f, "{len} bytes but the header describes {expected}")
            }
            WireError::PayloadTooLarge(n) => write!(f, "payload of {n} bytes is too large"),
            WireError::StrayField(what) => write!(f, "unexpected {what}"),
            WireError::OffsetOverflow => write!(f, "Long offset + length overflows"),
            WireError::DataTag(t) => write!(f, "data tag index {t} (at most {})", LONG_TAGS - 1),
            WireError::SeparateTooSmall(n) => {
                write!(f, "separate Long payload of only {n} bytes")
            }
            WireError::PlacedEmpty => write!(f, "empty Long payload marked as put"),
            WireError::Reserved => write!(f, "reserved field is not zero"),
            WireError::ControlKind(k) => write!(f, "unknown control message kind {k}"),
        }
    }
}

#[inline]
fn u16_at<const N: usize>(b: &[u8; N], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

#[inline]
fn u32_at<const N: usize>(b: &[u8; N], at: usize) -> u32 {
    u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

#[inline]
fn u64_at<const N: usize>(b: &[u8; N], at: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&b[at..at + 8]);
    u64::from_le_bytes(w)
}

/// Decode an active message occupying exactly `msg`.
#[inline]
pub(crate) fn decode(msg: &[u8]) -> Result<Header, WireError> {
    match msg.first_chunk::<HDR>().and_then(|h| decode_plain(msg, h)) {
        Some(hdr) => Ok(hdr),
        None => decode_full(msg),
    }
}

/// The common message, checked in a few comparisons: a Short, or a Medium with its payload
/// inline, every field in range. `None` for anything else, valid or not: [`decode_full`]
/// decides (and names what is wrong). Where this returns a header, `decode_full` returns the
/// same one.
#[inline(always)]
fn decode_plain(msg: &[u8], h: &[u8; HDR]) -> Option<Header> {
    let (flags, handler, nargs) = (h[1], h[2], h[3]);
    // Category bits 0 (Short) or 1 (Medium); no flag but reply and sync.
    if h[0] != VERSION || flags & !(1 | FLAG_REPLY | FLAG_SYNC) != 0 || handler == 0 {
        return None;
    }
    if usize::from(nargs) > MAX_ARGS {
        return None;
    }
    let payload_len = u64_at(h, 16);
    // No Long offset, no data tag, the reserved word zero.
    if u64_at(h, 8) != 0 || u64_at(h, 24) != 0 {
        return None;
    }
    let medium = flags & 1 != 0;
    if !medium && payload_len != 0 || payload_len > MAX_INLINE as u64 {
        return None;
    }
    let payload_at = encoded_len(usize::from(nargs), 0);
    if msg.len() as u64 != payload_at as u64 + payload_len {
        return None;
    }
    Some(Header {
        handler,
        category: if medium {
            Category::Medium
        } else {
            Category::Short
        },
        is_reply: flags & FLAG_REPLY != 0,
        data: Data::Inline,
        sync: flags & FLAG_SYNC != 0,
        nargs,
        long_offset: 0,
        payload_len,
        payload_at,
        credits: [u16_at(h, 4), u16_at(h, 6)],
    })
}

/// [`decode`] with every check in turn.
#[cold]
fn decode_full(msg: &[u8]) -> Result<Header, WireError> {
    let Some(h) = msg.first_chunk::<HDR>() else {
        return Err(WireError::Truncated {
            len: msg.len(),
            need: HDR,
        });
    };
    if h[0] != VERSION {
        return Err(WireError::Version(h[0]));
    }
    let flags = h[1];
    if flags & !(3 | FLAG_REPLY | FLAG_SEPARATE | FLAG_PLACED | FLAG_SYNC) != 0 {
        return Err(WireError::Flags(flags));
    }
    let Some(category) = Category::from_code(flags) else {
        return Err(WireError::Flags(flags));
    };
    let separate = flags & FLAG_SEPARATE != 0;
    let placed = flags & FLAG_PLACED != 0;
    if (separate || placed) && category != Category::Long || separate && placed {
        return Err(WireError::Flags(flags));
    }
    let handler = h[2];
    if handler == 0 {
        return Err(WireError::HandlerZero);
    }
    let nargs = h[3];
    if usize::from(nargs) > MAX_ARGS {
        return Err(WireError::TooManyArgs(nargs));
    }
    let credits = [u16_at(h, 4), u16_at(h, 6)];
    let long_offset = u64_at(h, 8);
    let payload_len = u64_at(h, 16);
    let tag = u32_at(h, 24);
    if u32_at(h, 28) != 0 {
        return Err(WireError::Reserved);
    }
    let payload_at = encoded_len(usize::from(nargs), 0);
    let inline = match category {
        Category::Short => {
            if payload_len != 0 {
                return Err(WireError::StrayField("payload on a Short message"));
            }
            0
        }
        Category::Medium | Category::Long if !separate && !placed => {
            if payload_len > MAX_INLINE as u64 {
                return Err(WireError::PayloadTooLarge(payload_len));
            }
            payload_len
        }
        _ => 0,
    };
    if category != Category::Long && long_offset != 0 {
        return Err(WireError::StrayField(
            "Long offset on a Short or Medium message",
        ));
    }
    if !separate && tag != 0 {
        return Err(WireError::StrayField(
            "data tag on a message without separate data",
        ));
    }
    if separate && tag >= LONG_TAGS {
        return Err(WireError::DataTag(tag));
    }
    if separate && payload_len <= MAX_INLINE as u64 {
        return Err(WireError::SeparateTooSmall(payload_len));
    }
    if placed && payload_len == 0 {
        return Err(WireError::PlacedEmpty);
    }
    if category == Category::Long && long_offset.checked_add(payload_len).is_none() {
        return Err(WireError::OffsetOverflow);
    }
    let expected = payload_at as u64 + inline;
    if msg.len() as u64 != expected {
        return Err(WireError::Length {
            len: msg.len(),
            expected,
        });
    }
    let data = if separate {
        Data::Separate(tag)
    } else if placed {
        Data::Placed
    } else {
        Data::Inline
    };
    Ok(Header {
        handler,
        category,
        is_reply: flags & FLAG_REPLY != 0,
        data,
        sync: flags & FLAG_SYNC != 0,
        nargs,
        long_offset,
        payload_len,
        payload_at,
        credits,
    })
}

/// A credit return: `credits` = `[requests, replies]` the sender may send again.
pub(crate) fn encode_credit(credits: Credits) -> [u8; CTRL_LEN] {
    let [a, b] = credits[0].to_le_bytes();
    let [c, d] = credits[1].to_le_bytes();
    [VERSION, CTRL_CREDIT, 0, 0, a, b, c, d]
}

/// An exit notice carrying the job-wide exit code.
pub(crate) fn encode_exit(code: i32) -> [u8; CTRL_LEN] {
    let [a, b, c, d] = code.to_le_bytes();
    [VERSION, CTRL_EXIT, 0, 0, a, b, c, d]
}

fn control(msg: &[u8], kind: u8) -> Result<[u8; 4], WireError> {
    if msg.len() != CTRL_LEN {
        return Err(if msg.len() < CTRL_LEN {
            WireError::Truncated {
                len: msg.len(),
                need: CTRL_LEN,
            }
        } else {
            WireError::Length {
                len: msg.len(),
                expected: CTRL_LEN as u64,
            }
        });
    }
    if msg[0] != VERSION {
        return Err(WireError::Version(msg[0]));
    }
    if msg[1] != kind {
        return Err(WireError::ControlKind(msg[1]));
    }
    if msg[2] != 0 || msg[3] != 0 {
        return Err(WireError::Reserved);
    }
    Ok([msg[4], msg[5], msg[6], msg[7]])
}

/// A nudge, sent on the credit tag: the sender is doing one-sided operations on the receiver's
/// window, which the receiver's MPI library completes only inside its polls.
pub(crate) fn encode_nudge() -> [u8; CTRL_LEN] {
    [VERSION, CTRL_NUDGE, 0, 0, 0, 0, 0, 0]
}

/// What a message on the credit tag says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Notice {
    /// Credits returned: `[requests, replies]`.
    Credit(Credits),
    /// See [`encode_nudge`].
    Nudge,
}

/// Decode a message of the credit tag: a credit return or a nudge.
pub(crate) fn decode_notice(msg: &[u8]) -> Result<Notice, WireError> {
    if msg.get(1) == Some(&CTRL_NUDGE) {
        return control(msg, CTRL_NUDGE).map(|_| Notice::Nudge);
    }
    decode_credit(msg).map(Notice::Credit)
}

/// Decode a credit return.
pub(crate) fn decode_credit(msg: &[u8]) -> Result<Credits, WireError> {
    let [a, b, c, d] = control(msg, CTRL_CREDIT)?;
    Ok([u16::from_le_bytes([a, b]), u16::from_le_bytes([c, d])])
}

/// Decode an exit notice.
pub(crate) fn decode_exit(msg: &[u8]) -> Result<i32, WireError> {
    control(msg, CTRL_EXIT).map(i32::from_le_bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn msg<'a>(
        category: Category,
        is_reply: bool,
        args: &'a [u32],
        payload: &'a [u8],
        long_offset: u64,
    ) -> OutMsg<'a> {
        OutMsg {
            handler: 200,
            category,
            is_reply,
            args,
            payload,
            long_offset,
        }
    }

    #[test]
    fn roundtrip_every_category() {
        let payload: Vec<u8> = (0..300u32).map(|i| (i % 251) as u8).collect();
        let big = vec![7u8; MAX_INLINE + 1];
        let args: Vec<u32> = (0..16).map(|i| i * 0x0101_0101).collect();
        for nargs in [0usize, 1, 7, 16] {
            for (cat, off, data) in [
                (Category::Short, 0, Data::Inline),
                (Category::Medium, 0, Data::Inline),
                (Category::Long, 12345, Data::Inline),
                (Category::Long, 1 << 40, Data::Separate(LONG_TAGS - 1)),
                (Category::Long, 77, Data::Placed),
            ] {
                for reply in [false, true] {
                    let body: &[u8] = match data {
                        Data::Separate(_) => &big,
                        _ => &payload,
                    };
                    let m = msg(cat, reply, &args[..nargs], body, off);
                    let mut out = Vec::new();
                    encode(&mut out, &m, [3, 65535], data, reply);
                    let inline = match (cat, data) {
                        (Category::Short, _) | (_, Data::Separate(_) | Data::Placed) => 0,
                        _ => payload.len(),
                    };
                    assert_eq!(out.len(), encoded_len(nargs, inline));
                    let h = decode(&out).unwrap();
                    assert_eq!(h.handler, 200);
                    assert_eq!(h.category, cat);
                    assert_eq!(h.is_reply, reply);
                    assert_eq!(h.sync, reply);
                    let mut a = [0u32; MAX_ARGS];
                    assert_eq!(h.read_args(&out, &mut a), &args[..nargs]);
                    assert_eq!(h.credits, [3, 65535]);
                    assert_eq!(h.data, data);
                    assert_eq!(h.has_inline_payload(), inline > 0);
                    assert_eq!(h.long_offset, off);
                    let plen = if cat == Category::Short {
                        0
                    } else {
                        body.len()
                    };
                    assert_eq!(h.payload_len, plen as u64);
                    assert_eq!(&out[h.payload_at..], &body[..inline]);
                }
            }
        }
    }

    #[test]
    fn rejects_malformed_headers() {
        let mut good = Vec::new();
        encode(
            &mut good,
            &msg(Category::Medium, false, &[1, 2], b"abc", 0),
            [0, 0],
            Data::Inline,
            false,
        );
        assert!(decode(&good).is_ok());
        let with = |at: usize, v: u8| {
            let mut b = good.clone();
            b[at] = v;
            decode(&b)
        };
        assert!(matches!(
            decode(&good[..10]),
            Err(WireError::Truncated { .. })
        ));
        assert_eq!(with(0, 9), Err(WireError::Version(9)));
        assert_eq!(with(1, 0x13), Err(WireError::Flags(0x13)));
        assert_eq!(with(1, 3), Err(WireError::Flags(3)));
        assert_eq!(with(1, 1 | FLAG_SEPARATE), Err(WireError::Flags(9)));
        assert_eq!(with(1, 1 | FLAG_PLACED), Err(WireError::Flags(17)));
        assert_eq!(with(1, 0x40), Err(WireError::Flags(0x40)));
        assert_eq!(with(1, 1 | FLAG_SYNC).map(|h| h.sync), Ok(true));
        assert_eq!(with(2, 0), Err(WireError::HandlerZero));
        assert_eq!(with(3, 17), Err(WireError::TooManyArgs(17)));
        assert!(matches!(with(3, 3), Err(WireError::Length { .. })));
        assert!(matches!(with(16, 200), Err(WireError::Length { .. })));
        assert_eq!(with(18, 1), Err(WireError::PayloadTooLarge(3 + (1 << 16))));
        assert_eq!(with(28, 1), Err(WireError::Reserved));
        assert!(matches!(with(8, 1), Err(WireError::StrayField(_))));
        assert!(matches!(with(24, 1), Err(WireError::StrayField(_))));
        let mut long = Vec::new();
        let big = vec![0u8; MAX_INLINE + 1];
        encode(
            &mut long,
            &msg(Category::Long, false, &[], &big, u64::MAX - 3),
            [0, 0],
            Data::Separate(1),
            false,
        );
        assert_eq!(decode(&long), Err(WireError::OffsetOverflow));
        long[8..16].copy_from_slice(&0u64.to_le_bytes());
        assert!(decode(&long).is_ok());
        long[16..24].copy_from_slice(&10u64.to_le_bytes());
        assert_eq!(decode(&long), Err(WireError::SeparateTooSmall(10)));
        long[16..24].copy_from_slice(&(1u64 << 20).to_le_bytes());
        long[24..28].copy_from_slice(&LONG_TAGS.to_le_bytes());
        assert_eq!(decode(&long), Err(WireError::DataTag(LONG_TAGS)));

        let mut placed = Vec::new();
        encode(
            &mut placed,
            &msg(Category::Long, true, &[5], b"xyz", 40),
            [0, 0],
            Data::Placed,
            false,
        );
        assert_eq!(placed.len(), encoded_len(1, 0));
        assert_eq!(decode(&placed).map(|h| h.data), Ok(Data::Placed));
        let mut both = placed.clone();
        both[1] |= FLAG_SEPARATE;
        assert!(matches!(decode(&both), Err(WireError::Flags(_))));
        let mut tagged = placed.clone();
        tagged[24] = 1;
        assert!(matches!(decode(&tagged), Err(WireError::StrayField(_))));
        placed[16..24].copy_from_slice(&0u64.to_le_bytes());
        assert_eq!(decode(&placed), Err(WireError::PlacedEmpty));
        placed[8..16].copy_from_slice(&u64::MAX.to_le_bytes());
        placed[16..24].copy_from_slice(&1u64.to_le_bytes());
        assert_eq!(decode(&placed), Err(WireError::OffsetOverflow));
        let mut short_placed = Vec::new();
        encode(
            &mut short_placed,
            &msg(Category::Short, false, &[], &[], 0),
            [0, 0],
            Data::Inline,
            false,
        );
        short_placed[1] |= FLAG_PLACED;
        assert!(matches!(decode(&short_placed), Err(WireError::Flags(_))));
    }

    #[test]
    fn control_messages() {
        assert_eq!(decode_credit(&encode_credit([7, 9])), Ok([7, 9]));
        assert_eq!(
            decode_notice(&encode_credit([7, 9])),
            Ok(Notice::Credit([7, 9]))
        );
        assert_eq!(decode_notice(&encode_nudge()), Ok(Notice::Nudge));
        let mut odd = encode_nudge();
        odd[2] = 1;
        assert_eq!(decode_notice(&odd), Err(WireError::Reserved));
        assert!(matches!(
            decode_notice(&encode_nudge()[..5]),
            Err(WireError::Truncated { .. })
        ));
        assert_eq!(
            decode_notice(&encode_exit(1)),
            Err(WireError::ControlKind(CTRL_EXIT))
        );
        assert_eq!(decode_exit(&encode_exit(-3)), Ok(-3));
        assert_eq!(
            decode_exit(&encode_credit([1, 1])),
            Err(WireError::ControlKind(CTRL_CREDIT))
        );
        assert!(matches!(
            decode_credit(&[VERSION, CTRL_CREDIT]),
            Err(WireError::Truncated { .. })
        ));
        assert!(matches!(
            decode_credit(&[0; 9]),
            Err(WireError::Length { .. })
        ));
        let mut bad = encode_exit(1);
        bad[2] = 1;
        assert_eq!(decode_exit(&bad), Err(WireError::Reserved));
        bad = encode_exit(1);
        bad[0] = 0;
        assert_eq!(decode_exit(&bad), Err(WireError::Version(0)));
    }

    proptest! {
        #[test]
        fn decoders_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
            let _ = decode(&bytes);
            let _ = decode_credit(&bytes);
            let _ = decode_exit(&bytes);
        }

        #[test]
        fn decoded_headers_are_consistent(mut bytes in proptest::collection::vec(any::<u8>(), 32..200)) {
            // Bias towards plausible headers so that the checks past the first ones run.
            bytes[0] = VERSION;
            bytes[3] %= 20;
            bytes[28..32].fill(0);
            if let Ok(h) = decode(&bytes) {
                prop_assert!(usize::from(h.nargs) <= MAX_ARGS);
                prop_assert!(h.payload_at <= bytes.len());
                prop_assert!(h.handler != 0);
                if h.category == Category::Medium {
                    prop_assert_eq!(h.payload_at as u64 + h.payload_len, bytes.len() as u64);
                }
            }
        }

        #[test]
        fn the_quick_decoder_agrees_with_the_full_one(
            flags in 0u8..64,
            handler in 0u8..3,
            nargs in 0u8..20,
            plen in 0u64..40,
            offset in prop_oneof![Just(0u64), any::<u64>()],
            tail in prop_oneof![Just(0u64), any::<u64>()],
            extra in -2i64..3,
            credits in any::<[u8; 4]>(),
        ) {
            // Messages close to a plain Short or Medium, each field sometimes off.
            let mut bytes = vec![VERSION, flags, handler, nargs];
            bytes.extend_from_slice(&credits);
            bytes.extend_from_slice(&offset.to_le_bytes());
            bytes.extend_from_slice(&plen.to_le_bytes());
            bytes.extend_from_slice(&tail.to_le_bytes());
            let len = (HDR as i64 + 4 * i64::from(nargs) + plen as i64 + extra).max(HDR as i64);
            bytes.resize(usize::try_from(len).unwrap_or(HDR), 7);
            let h: &[u8; HDR] = bytes.first_chunk().unwrap();
            if let Some(quick) = decode_plain(&bytes, h) {
                prop_assert_eq!(Ok(quick), decode_full(&bytes));
            } else if flags & !(1 | FLAG_REPLY | FLAG_SYNC) == 0
                && handler != 0
                && usize::from(nargs) <= MAX_ARGS
                && offset == 0
                && tail == 0
                && extra == 0
                && (flags & 1 == 1 || plen == 0)
            {
                prop_assert!(false, "a plain message left to the full decoder");
            }
        }
    }
}
