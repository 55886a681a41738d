//! The udp conduit's wire format, defined once and versioned.
//!
//! Every datagram starts with the same 52-byte header. All integers are little-endian; nothing
//! is aligned (fields are read and written byte-wise).
//!
//! ```text
//! off len  field
//!   0   4  magic  "AMNU"
//!   4   1  version (VERSION)
//!   5   1  kind    1 DATA, 2 ACK, 3 HEARTBEAT
//!   6   2  reserved, zero
//!   8   8  job key: datagrams of another job are dropped (and counted) by the receiver
//!  16   4  source rank
//!  20   4  destination rank
//!  24   8  sequence number (DATA: per ordered pair of ranks, from 0; ACK/HEARTBEAT: zero)
//!  32   8  cumulative ack: the sender of this datagram has received every DATA seq < ack
//!  40   8  selective ack: bit i set = DATA seq ack+1+i has been received as well
//!  48   4  window (credits): the sender of this datagram accepts DATA seq < ack + window
//! ```
//!
//! Every kind carries the ack fields, so acks ride on DATA for free; ACK and HEARTBEAT are the
//! header alone. A DATA datagram then carries one fragment of one active message:
//!
//! ```text
//!   0   8  message id (per ordered pair of ranks, from 0)
//!   8   4  fragment index
//!  12   4  fragment count (>= 1; index < count)
//!  16   8  total payload length of the message
//!  24   4  chunk length: payload bytes in this datagram
//!  28      fragment 0 only, the AM header:
//!            0   1  handler (non-zero)
//!            1   1  flags: bits 0-1 category (0 Short, 1 Medium, 2 Long), bit 2 reply
//!            2   1  nargs (<= 16)
//!            3   1  reserved, zero
//!            4   8  long offset (Long only; zero otherwise)
//!           12      nargs x u32 arguments
//!          then the chunk; the datagram ends exactly there
//! ```
//!
//! The decoder ([`decode`]) checks every field it can check without protocol state and never
//! panics: each defect has its own [`WireError`] variant. The format is canonical: a datagram
//! that decodes re-encodes to the same bytes, which the property tests check. The protocol
//! state machine (sequence windows, reassembly, message-size limits) is [`crate::proto`]'s.

use amnet_core::{Category, MAX_ARGS};

/// The four bytes every datagram starts with.
pub const MAGIC: [u8; 4] = *b"AMNU";
/// The wire-format version this code speaks; datagrams of any other version are rejected.
pub const VERSION: u8 = 1;
/// Bytes of the common header.
pub const HEADER_LEN: usize = 52;
/// Bytes of a DATA datagram's fragment fields, after the header.
pub const FRAG_LEN: usize = 28;
/// Bytes of the AM header without its arguments.
pub const AM_FIXED_LEN: usize = 12;
/// The largest AM header (16 arguments).
pub const MAX_AM_LEN: usize = AM_FIXED_LEN + 4 * MAX_ARGS;
/// Bytes before the chunk in the largest first fragment.
pub const MAX_PREFIX_LEN: usize = HEADER_LEN + FRAG_LEN + MAX_AM_LEN;
/// Sequence numbers the selective-ack bitmap covers beyond the cumulative ack.
pub const SACK_BITS: u64 = 64;
/// The largest UDP payload over IPv4 (65,535 less the IP and UDP headers).
pub const MAX_DATAGRAM: usize = 65_507;

const OFF_ACK: usize = 32;
const OFF_SACK: usize = 40;
const OFF_WINDOW: usize = 48;

const FLAG_CATEGORY: u8 = 0b011;
const FLAG_REPLY: u8 = 0b100;

/// Why a datagram was rejected (or could not be encoded). Each defect has its own variant.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// The datagram ends before a field it must contain.
    #[error("truncated datagram: {needed} bytes needed, {got} present")]
    Truncated {
        /// Bytes the datagram needs up to the end of the field that is cut off.
        needed: usize,
        /// Bytes present.
        got: usize,
    },
    /// The first four bytes are not [`MAGIC`].
    #[error("bad magic {0:#010x}: not an amnet udp datagram")]
    BadMagic(u32),
    /// A wire-format version this code does not speak.
    #[error("wire-format version {0} is not supported (this build speaks {VERSION})")]
    BadVersion(u8),
    /// An unknown packet kind.
    #[error("unknown packet kind {0}")]
    BadKind(u8),
    /// A field that must be zero is not.
    #[error("field {0} must be zero")]
    NonZero(&'static str),
    /// Bytes after the end of the packet.
    #[error("{0} bytes after the end of the packet")]
    TrailingBytes(usize),
    /// The chunk length field says more bytes than the datagram holds.
    #[error("chunk of {chunk} bytes but only {left} bytes left in the datagram")]
    ChunkOverrun {
        /// The chunk length field.
        chunk: u32,
        /// Bytes left after the fragment and AM headers.
        left: usize,
    },
    /// Fragment count zero, or index not below the count.
    #[error("fragment {index} of {count}")]
    BadFragment {
        /// Fragment index.
        index: u32,
        /// Fragment count.
        count: u32,
    },
    /// Fragment lengths that no sender produces: an empty chunk in a non-empty message, a chunk
    /// longer than the message, a single fragment that is not the whole message, or more
    /// fragments than payload bytes.
    #[error("inconsistent lengths: chunk {chunk}, fragment count {count}, message {total} bytes")]
    BadLengths {
        /// The chunk length.
        chunk: u32,
        /// Fragment count.
        count: u32,
        /// The message's total payload length.
        total: u64,
    },
    /// Unknown category or flag bits in the AM header.
    #[error("bad AM flags {0:#04x}")]
    BadFlags(u8),
    /// Handler index 0.
    #[error("handler index 0 is invalid")]
    HandlerZero,
    /// More than [`MAX_ARGS`] arguments.
    #[error("{0} arguments (at most {MAX_ARGS})")]
    TooManyArgs(usize),
    /// A payload that its category forbids: any for Short.
    #[error("a Short message carries no payload ({0} bytes given)")]
    ShortPayload(u64),
    /// A non-zero long offset on a Short or Medium message, or a Long range past `u64::MAX`.
    #[error("bad long offset {offset} for a {category} message of {total} bytes")]
    BadLongOffset {
        /// The offset.
        offset: u64,
        /// The category's name.
        category: &'static str,
        /// The payload length.
        total: u64,
    },
    /// A DATA packet without fragment fields, or an ACK/HEARTBEAT with them (encoder only).
    #[error("a {0:?} packet with the wrong body")]
    BodyMismatch(Kind),
    /// The output buffer is too small (encoder only).
    #[error("output buffer of {got} bytes, {needed} needed")]
    BufferTooSmall {
        /// Bytes needed.
        needed: usize,
        /// Bytes available.
        got: usize,
    },
}

/// The packet kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Kind {
    /// One fragment of an active message, plus piggy-backed ack fields.
    Data = 1,
    /// Ack fields only: sent when an ack is owed and no DATA went out to carry it.
    Ack = 2,
    /// Ack fields only: sent to a peer nothing else was sent to for a heartbeat interval.
    Heartbeat = 3,
}

impl Kind {
    fn from_u8(v: u8) -> Result<Self, WireError> {
        match v {
            1 => Ok(Kind::Data),
            2 => Ok(Kind::Ack),
            3 => Ok(Kind::Heartbeat),
            _ => Err(WireError::BadKind(v)),
        }
    }
}

/// The common header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Header {
    /// Packet kind.
    pub kind: Kind,
    /// The job key.
    pub job_key: u64,
    /// Sending rank.
    pub src: u32,
    /// Receiving rank.
    pub dst: u32,
    /// DATA sequence number (zero for other kinds).
    pub seq: u64,
    /// Cumulative ack: every DATA seq below has been received.
    pub ack: u64,
    /// Selective ack: bit i set means seq `ack + 1 + i` has been received.
    pub sack: u64,
    /// Credits: DATA seq below `ack + window` is accepted.
    pub window: u32,
}

/// The active-message fields carried by a message's first fragment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AmHeader {
    /// Handler index at the target (non-zero).
    pub handler: u8,
    /// Message category.
    pub category: Category,
    /// True for replies.
    pub is_reply: bool,
    /// For Long: where the payload goes in the target's segment; zero otherwise.
    pub long_offset: u64,
    nargs: u8,
    args: [u32; MAX_ARGS],
}

impl AmHeader {
    /// An AM header; fails on handler 0 or more than [`MAX_ARGS`] arguments.
    // Inlined into the sender: returned through memory, the header was copied with wide
    // loads right after its narrow fields were stored (a likely store-forward stall; the
    // profile put the time on those loads), and the protocol's round trip was 5% slower.
    #[inline(always)]
    pub fn new(
        handler: u8,
        category: Category,
        is_reply: bool,
        args: &[u32],
        long_offset: u64,
    ) -> Result<Self, WireError> {
        if handler == 0 {
            return Err(WireError::HandlerZero);
        }
        let nargs = u8::try_from(args.len())
            .ok()
            .filter(|&n| usize::from(n) <= MAX_ARGS)
            .ok_or(WireError::TooManyArgs(args.len()))?;
        let mut a = [0u32; MAX_ARGS];
        a[..args.len()].copy_from_slice(args);
        Ok(AmHeader {
            handler,
            category,
            is_reply,
            long_offset,
            nargs,
            args: a,
        })
    }

    /// The arguments.
    pub fn args(&self) -> &[u32] {
        &self.args[..usize::from(self.nargs)]
    }

    /// Encoded bytes of this AM header.
    pub fn encoded_len(&self) -> usize {
        AM_FIXED_LEN + 4 * usize::from(self.nargs)
    }

    /// Checks that a payload of `total` bytes fits this header's category: none for Short, a
    /// zero long offset unless Long, and a Long range that does not pass `u64::MAX`.
    #[inline(always)]
    pub fn check_payload(&self, total: u64) -> Result<(), WireError> {
        let bad_offset = || WireError::BadLongOffset {
            offset: self.long_offset,
            category: self.category.name(),
            total,
        };
        match self.category {
            Category::Short if total != 0 => Err(WireError::ShortPayload(total)),
            Category::Short | Category::Medium if self.long_offset != 0 => Err(bad_offset()),
            Category::Long if self.long_offset.checked_add(total).is_none() => Err(bad_offset()),
            _ => Ok(()),
        }
    }

    fn flags(&self) -> u8 {
        self.category.code() | if self.is_reply { FLAG_REPLY } else { 0 }
    }
}

/// The fragment fields of a DATA packet, with its chunk of the payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fragment<'a> {
    /// Message id, per ordered pair of ranks.
    pub msg_id: u64,
    /// Index of this fragment.
    pub index: u32,
    /// Fragments in the message.
    pub count: u32,
    /// Total payload bytes of the message.
    pub total_len: u64,
    /// The AM header: present exactly on fragment 0.
    pub am: Option<AmHeader>,
    /// This fragment's payload bytes.
    pub chunk: &'a [u8],
}

impl Fragment<'_> {
    /// Checks the rules that tie the fields together (see [`WireError::BadFragment`],
    /// [`WireError::BadLengths`] and [`AmHeader::check_payload`]).
    pub fn check(&self) -> Result<(), WireError> {
        let (index, count, total) = (self.index, self.count, self.total_len);
        if count == 0 || index >= count {
            return Err(WireError::BadFragment { index, count });
        }
        let chunk = u32::try_from(self.chunk.len()).unwrap_or(u32::MAX);
        let chunk64 = u64::from(chunk);
        let inconsistent = chunk64 > total
            || (total > 0 && chunk == 0)
            || (count == 1 && chunk64 != total)
            || u64::from(count) > total.max(1);
        if inconsistent || self.chunk.len() > MAX_DATAGRAM {
            return Err(WireError::BadLengths {
                chunk,
                count,
                total,
            });
        }
        match (&self.am, index) {
            (Some(am), 0) => am.check_payload(total),
            (None, 0) => Err(WireError::BodyMismatch(Kind::Data)),
            (Some(_), _) => Err(WireError::BodyMismatch(Kind::Data)),
            (None, _) => Ok(()),
        }
    }

    fn prefix_len(&self) -> usize {
        FRAG_LEN + self.am.as_ref().map_or(0, AmHeader::encoded_len)
    }
}

/// One decoded datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Packet<'a> {
    /// The common header.
    pub header: Header,
    /// The fragment: present exactly for [`Kind::Data`].
    pub frag: Option<Fragment<'a>>,
}

impl Packet<'_> {
    /// Bytes this packet encodes to.
    pub fn encoded_len(&self) -> usize {
        HEADER_LEN
            + self
                .frag
                .as_ref()
                .map_or(0, |f| f.prefix_len() + f.chunk.len())
    }

    /// Checks every rule the decoder checks.
    pub fn check(&self) -> Result<(), WireError> {
        match (self.header.kind, &self.frag) {
            (Kind::Data, Some(f)) => f.check(),
            (Kind::Data, None) => Err(WireError::BodyMismatch(Kind::Data)),
            (k, Some(_)) => Err(WireError::BodyMismatch(k)),
            (_, None) if self.header.seq != 0 => Err(WireError::NonZero("seq")),
            (_, None) => Ok(()),
        }
    }

    /// Bytes before the chunk.
    fn prefix_len(&self) -> usize {
        HEADER_LEN + self.frag.as_ref().map_or(0, Fragment::prefix_len)
    }

    /// Writes everything before the chunk to `w`.
    #[inline]
    fn encode_prefix(&self, w: &mut impl Put) {
        let h = &self.header;
        w.bytes(&MAGIC);
        w.bytes(&[VERSION, h.kind as u8, 0, 0]);
        w.bytes(&h.job_key.to_le_bytes());
        w.bytes(&h.src.to_le_bytes());
        w.bytes(&h.dst.to_le_bytes());
        w.bytes(&h.seq.to_le_bytes());
        w.bytes(&h.ack.to_le_bytes());
        w.bytes(&h.sack.to_le_bytes());
        w.bytes(&h.window.to_le_bytes());
        if let Some(f) = &self.frag {
            // The chunk length fits: `check` bounds it by MAX_DATAGRAM.
            let chunk = u32::try_from(f.chunk.len()).unwrap_or(u32::MAX);
            w.bytes(&f.msg_id.to_le_bytes());
            w.bytes(&f.index.to_le_bytes());
            w.bytes(&f.count.to_le_bytes());
            w.bytes(&f.total_len.to_le_bytes());
            w.bytes(&chunk.to_le_bytes());
            if let Some(am) = &f.am {
                w.bytes(&[am.handler, am.flags(), am.nargs, 0]);
                w.bytes(&am.long_offset.to_le_bytes());
                for a in am.args() {
                    w.bytes(&a.to_le_bytes());
                }
            }
        }
    }
}

/// Where [`Packet::encode_prefix`] writes: each field lands in place in the output (a copy
/// through a staging buffer would read back, in wide loads, what was just stored field by
/// field).
trait Put {
    fn bytes(&mut self, b: &[u8]);
}

/// Appending to a vector whose capacity was reserved beforehand.
impl Put for Vec<u8> {
    #[inline(always)]
    fn bytes(&mut self, b: &[u8]) {
        self.extend_from_slice(b);
    }
}

/// A cursor over an output slice sized by [`Packet::prefix_len`], so the bounds checks below
/// never fail; they only keep the code free of panicking paths.
struct Writer<'a> {
    buf: &'a mut [u8],
    pos: usize,
}

impl Put for Writer<'_> {
    #[inline(always)]
    fn bytes(&mut self, b: &[u8]) {
        if let Some(dst) = self.buf.get_mut(self.pos..self.pos + b.len()) {
            dst.copy_from_slice(b);
        }
        self.pos += b.len();
    }
}

/// Encodes `pkt` into `out`; returns the bytes written. Fails on a packet that
/// [`Packet::check`] rejects or a buffer that is too small.
pub fn encode(pkt: &Packet<'_>, out: &mut [u8]) -> Result<usize, WireError> {
    pkt.check()?;
    let need = pkt.encoded_len();
    if out.len() < need {
        return Err(WireError::BufferTooSmall {
            needed: need,
            got: out.len(),
        });
    }
    let n = pkt.prefix_len();
    let (prefix, rest) = out.split_at_mut(n);
    pkt.encode_prefix(&mut Writer {
        buf: prefix,
        pos: 0,
    });
    if let Some(f) = &pkt.frag {
        rest[..need - n].copy_from_slice(f.chunk);
    }
    Ok(need)
}

/// Appends the encoding of `pkt` to `out` (no zero-fill of the payload area); returns the bytes
/// appended. Fails, appending nothing, on a packet that [`Packet::check`] rejects.
pub fn encode_to_vec(pkt: &Packet<'_>, out: &mut Vec<u8>) -> Result<usize, WireError> {
    pkt.check()?;
    Ok(append(pkt, out, true))
}

/// [`encode_to_vec`] for a packet that its builder made by the rules [`Packet::check`] checks:
/// the protocol's sender, which checks a message's AM header and payload when it takes the
/// message and cuts the fragments itself. The rules are checked again in debug builds only.
/// Without `with_chunk`, the fragment's chunk is left out (only what precedes it on the wire
/// is appended), for a sender that sends the chunk from where it lies as a second buffer of
/// the same datagram.
pub fn encode_built(pkt: &Packet<'_>, out: &mut Vec<u8>, with_chunk: bool) -> usize {
    debug_assert_eq!(pkt.check(), Ok(()), "a packet built against the rules");
    append(pkt, out, with_chunk)
}

fn append(pkt: &Packet<'_>, out: &mut Vec<u8>, with_chunk: bool) -> usize {
    let need = if with_chunk {
        pkt.encoded_len()
    } else {
        pkt.prefix_len()
    };
    out.reserve(need);
    pkt.encode_prefix(out);
    if let Some(f) = pkt.frag.as_ref().filter(|_| with_chunk) {
        out.extend_from_slice(f.chunk);
    }
    need
}

/// Rewrites the ack fields of an encoded datagram in place (a retransmission carries the
/// current acks). Fails when `buf` is shorter than a header.
pub fn patch_ack(buf: &mut [u8], ack: u64, sack: u64, window: u32) -> Result<(), WireError> {
    let hdr = buf.get_mut(..HEADER_LEN).ok_or(WireError::BufferTooSmall {
        needed: HEADER_LEN,
        got: 0,
    })?;
    hdr[OFF_ACK..OFF_ACK + 8].copy_from_slice(&ack.to_le_bytes());
    hdr[OFF_SACK..OFF_SACK + 8].copy_from_slice(&sack.to_le_bytes());
    hdr[OFF_WINDOW..OFF_WINDOW + 4].copy_from_slice(&window.to_le_bytes());
    Ok(())
}

/// Little-endian `N` bytes of `b` at `at`; zeros past its end. Called on fixed-size arrays at
/// constant offsets, where the check folds away.
#[inline(always)]
fn le<const N: usize>(b: &[u8], at: usize) -> [u8; N] {
    let mut a = [0u8; N];
    if let Some(s) = b.get(at..at + N) {
        a.copy_from_slice(s);
    }
    a
}

/// The error for a datagram of `got` bytes that ends inside a run of fields: `ends` are the
/// offsets where those fields end, in order; the first field cut off is the one reported.
#[cold]
fn truncated(got: usize, ends: &[usize]) -> WireError {
    let needed = ends.iter().copied().find(|&e| e > got).unwrap_or(got + 1);
    WireError::Truncated { needed, got }
}

/// Where the fragment fields end: message id, index, count, total length, chunk length.
const FRAG_ENDS: [usize; 5] = [
    HEADER_LEN + 8,
    HEADER_LEN + 12,
    HEADER_LEN + 16,
    HEADER_LEN + 24,
    HEADER_LEN + FRAG_LEN,
];
/// Where the fixed AM fields end: handler, flags, argument count, reserved, long offset.
const AM_ENDS: [usize; 5] = [
    HEADER_LEN + FRAG_LEN + 1,
    HEADER_LEN + FRAG_LEN + 2,
    HEADER_LEN + FRAG_LEN + 3,
    HEADER_LEN + FRAG_LEN + 4,
    HEADER_LEN + FRAG_LEN + AM_FIXED_LEN,
];

/// Decodes one datagram. Never panics; every defect is a distinct [`WireError`], checked in
/// the order of the fields (a datagram that ends inside a field reports that field, before
/// any check of a later one).
///
/// The fixed parts (the header, the fragment fields, the AM header without its arguments) are
/// each taken as one array and read at constant offsets.
#[inline]
pub fn decode(buf: &[u8]) -> Result<Packet<'_>, WireError> {
    let Some((h, body)) = buf.split_first_chunk::<HEADER_LEN>() else {
        return Err(WireError::Truncated {
            needed: HEADER_LEN,
            got: buf.len(),
        });
    };
    let magic = le::<4>(h, 0);
    if magic != MAGIC {
        return Err(WireError::BadMagic(u32::from_le_bytes(magic)));
    }
    if h[4] != VERSION {
        return Err(WireError::BadVersion(h[4]));
    }
    let kind = Kind::from_u8(h[5])?;
    if h[6] != 0 || h[7] != 0 {
        return Err(WireError::NonZero("header reserved"));
    }
    let header = Header {
        kind,
        job_key: u64::from_le_bytes(le(h, 8)),
        src: u32::from_le_bytes(le(h, 16)),
        dst: u32::from_le_bytes(le(h, 20)),
        seq: u64::from_le_bytes(le(h, 24)),
        ack: u64::from_le_bytes(le(h, OFF_ACK)),
        sack: u64::from_le_bytes(le(h, OFF_SACK)),
        window: u32::from_le_bytes(le(h, OFF_WINDOW)),
    };
    if kind != Kind::Data {
        if header.seq != 0 {
            return Err(WireError::NonZero("seq"));
        }
        return match body.len() {
            0 => Ok(Packet { header, frag: None }),
            n => Err(WireError::TrailingBytes(n)),
        };
    }
    let Some((f, mut rest)) = body.split_first_chunk::<FRAG_LEN>() else {
        return Err(truncated(buf.len(), &FRAG_ENDS));
    };
    let msg_id = u64::from_le_bytes(le(f, 0));
    let index = u32::from_le_bytes(le(f, 8));
    let count = u32::from_le_bytes(le(f, 12));
    let total_len = u64::from_le_bytes(le(f, 16));
    let chunk_len = u32::from_le_bytes(le(f, 24));
    let am = if index == 0 {
        let Some((a, after)) = rest.split_first_chunk::<AM_FIXED_LEN>() else {
            return Err(truncated(buf.len(), &AM_ENDS));
        };
        let [handler, flags, nargs, reserved] = le::<4>(a, 0);
        let long_offset = u64::from_le_bytes(le(a, 4));
        if handler == 0 {
            return Err(WireError::HandlerZero);
        }
        let Some(category) = Category::from_code(flags & FLAG_CATEGORY) else {
            return Err(WireError::BadFlags(flags));
        };
        if flags & !(FLAG_CATEGORY | FLAG_REPLY) != 0 {
            return Err(WireError::BadFlags(flags));
        }
        let n = usize::from(nargs);
        if n > MAX_ARGS {
            return Err(WireError::TooManyArgs(n));
        }
        if reserved != 0 {
            return Err(WireError::NonZero("AM reserved"));
        }
        let Some((raw, after)) = after.split_at_checked(4 * n) else {
            // The first argument cut off.
            let start = buf.len() - after.len();
            let needed = start + 4 * (after.len() / 4 + 1);
            return Err(WireError::Truncated {
                needed,
                got: buf.len(),
            });
        };
        let mut args = [0u32; MAX_ARGS];
        for (a, b) in args.iter_mut().zip(raw.chunks_exact(4)) {
            *a = u32::from_le_bytes(le(b, 0));
        }
        rest = after;
        Some(AmHeader {
            handler,
            category,
            is_reply: flags & FLAG_REPLY != 0,
            long_offset,
            nargs,
            args,
        })
    } else {
        None
    };
    let left = rest.len();
    let chunk_usize = usize::try_from(chunk_len).unwrap_or(usize::MAX);
    if chunk_usize > left {
        return Err(WireError::ChunkOverrun {
            chunk: chunk_len,
            left,
        });
    }
    if chunk_usize < left {
        return Err(WireError::TrailingBytes(left - chunk_usize));
    }
    let frag = Fragment {
        msg_id,
        index,
        count,
        total_len,
        am,
        chunk: rest,
    };
    frag.check()?;
    Ok(Packet {
        header,
        frag: Some(frag),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A bounds-checked little-endian reader.
    struct Reader<'a> {
        buf: &'a [u8],
        pos: usize,
    }

    impl<'a> Reader<'a> {
        #[inline(always)]
        fn take(&mut self, n: usize) -> Result<&'a [u8], WireError> {
            let end = self.pos.saturating_add(n);
            let s = self.buf.get(self.pos..end).ok_or(WireError::Truncated {
                needed: end,
                got: self.buf.len(),
            })?;
            self.pos = end;
            Ok(s)
        }
        #[inline(always)]
        fn array<const N: usize>(&mut self) -> Result<[u8; N], WireError> {
            let mut a = [0u8; N];
            a.copy_from_slice(self.take(N)?);
            Ok(a)
        }
        #[inline(always)]
        fn u8(&mut self) -> Result<u8, WireError> {
            Ok(self.array::<1>()?[0])
        }
        #[inline(always)]
        fn u16(&mut self) -> Result<u16, WireError> {
            Ok(u16::from_le_bytes(self.array()?))
        }
        #[inline(always)]
        fn u32(&mut self) -> Result<u32, WireError> {
            Ok(u32::from_le_bytes(self.array()?))
        }
        #[inline(always)]
        fn u64(&mut self) -> Result<u64, WireError> {
            Ok(u64::from_le_bytes(self.array()?))
        }
        #[inline(always)]
        fn left(&self) -> usize {
            self.buf.len() - self.pos
        }
    }

    /// The field-by-field decoder the fixed-layout one must agree with, error for error.
    fn decode_reference(buf: &[u8]) -> Result<Packet<'_>, WireError> {
        if buf.len() < HEADER_LEN {
            return Err(WireError::Truncated {
                needed: HEADER_LEN,
                got: buf.len(),
            });
        }
        let mut r = Reader { buf, pos: 0 };
        let magic = r.array::<4>()?;
        if magic != MAGIC {
            return Err(WireError::BadMagic(u32::from_le_bytes(magic)));
        }
        let version = r.u8()?;
        if version != VERSION {
            return Err(WireError::BadVersion(version));
        }
        let kind = Kind::from_u8(r.u8()?)?;
        if r.u16()? != 0 {
            return Err(WireError::NonZero("header reserved"));
        }
        let header = Header {
            kind,
            job_key: r.u64()?,
            src: r.u32()?,
            dst: r.u32()?,
            seq: r.u64()?,
            ack: r.u64()?,
            sack: r.u64()?,
            window: r.u32()?,
        };
        if kind != Kind::Data {
            if header.seq != 0 {
                return Err(WireError::NonZero("seq"));
            }
            return match r.left() {
                0 => Ok(Packet { header, frag: None }),
                n => Err(WireError::TrailingBytes(n)),
            };
        }
        let msg_id = r.u64()?;
        let index = r.u32()?;
        let count = r.u32()?;
        let total_len = r.u64()?;
        let chunk_len = r.u32()?;
        let am = if index == 0 {
            let handler = r.u8()?;
            let flags = r.u8()?;
            let nargs = r.u8()?;
            let reserved = r.u8()?;
            let long_offset = r.u64()?;
            if handler == 0 {
                return Err(WireError::HandlerZero);
            }
            let Some(category) = Category::from_code(flags & FLAG_CATEGORY) else {
                return Err(WireError::BadFlags(flags));
            };
            if flags & !(FLAG_CATEGORY | FLAG_REPLY) != 0 {
                return Err(WireError::BadFlags(flags));
            }
            if usize::from(nargs) > MAX_ARGS {
                return Err(WireError::TooManyArgs(usize::from(nargs)));
            }
            if reserved != 0 {
                return Err(WireError::NonZero("AM reserved"));
            }
            let mut args = [0u32; MAX_ARGS];
            for a in args.iter_mut().take(usize::from(nargs)) {
                *a = r.u32()?;
            }
            Some(AmHeader {
                handler,
                category,
                is_reply: flags & FLAG_REPLY != 0,
                long_offset,
                nargs,
                args,
            })
        } else {
            None
        };
        let left = r.left();
        let chunk_usize = usize::try_from(chunk_len).unwrap_or(usize::MAX);
        if chunk_usize > left {
            return Err(WireError::ChunkOverrun {
                chunk: chunk_len,
                left,
            });
        }
        let chunk = r.take(chunk_usize)?;
        if r.left() != 0 {
            return Err(WireError::TrailingBytes(r.left()));
        }
        let frag = Fragment {
            msg_id,
            index,
            count,
            total_len,
            am,
            chunk,
        };
        frag.check()?;
        Ok(Packet {
            header,
            frag: Some(frag),
        })
    }

    fn hdr(kind: Kind) -> Header {
        Header {
            kind,
            job_key: 0x0123_4567_89ab_cdef,
            src: 3,
            dst: 5,
            seq: if kind == Kind::Data { 42 } else { 0 },
            ack: 17,
            sack: 0b1011,
            window: 64,
        }
    }

    fn data<'a>(
        am: Option<AmHeader>,
        index: u32,
        count: u32,
        total: u64,
        chunk: &'a [u8],
    ) -> Packet<'a> {
        Packet {
            header: hdr(Kind::Data),
            frag: Some(Fragment {
                msg_id: 9,
                index,
                count,
                total_len: total,
                am,
                chunk,
            }),
        }
    }

    fn enc(p: &Packet<'_>) -> Vec<u8> {
        let mut v = Vec::new();
        encode_to_vec(p, &mut v).unwrap();
        v
    }

    #[test]
    fn layout_is_fixed() {
        let b = enc(&Packet {
            header: hdr(Kind::Ack),
            frag: None,
        });
        assert_eq!(b.len(), HEADER_LEN);
        assert_eq!(&b[..6], b"AMNU\x01\x02");
        assert_eq!(&b[8..16], &0x0123_4567_89ab_cdefu64.to_le_bytes());
        assert_eq!(&b[32..40], &17u64.to_le_bytes());
        assert_eq!(&b[48..52], &64u32.to_le_bytes());
        let am = AmHeader::new(200, Category::Medium, true, &[1, 2], 0).unwrap();
        let p = data(Some(am), 0, 1, 3, b"xyz");
        let b = enc(&p);
        assert_eq!(b.len(), HEADER_LEN + FRAG_LEN + AM_FIXED_LEN + 8 + 3);
        assert_eq!(
            b[HEADER_LEN + FRAG_LEN..HEADER_LEN + FRAG_LEN + 4],
            [200, 5, 2, 0]
        );
        assert_eq!(&b[b.len() - 3..], b"xyz");
        let mut s = vec![0u8; b.len()];
        assert_eq!(encode(&p, &mut s), Ok(b.len()));
        assert_eq!(s, b);
        assert_eq!(
            encode(&p, &mut s[..10]),
            Err(WireError::BufferTooSmall {
                needed: b.len(),
                got: 10
            })
        );
        assert_eq!(decode(&b), Ok(p));
    }

    #[test]
    fn every_truncation_reports_the_field_it_cuts() {
        let args: Vec<u32> = (1..=16).collect();
        for n in [0usize, 1, 3, 16] {
            let am = AmHeader::new(9, Category::Long, true, &args[..n], 77).unwrap();
            for p in [
                data(Some(am), 0, 2, 10, b"abcd"),
                data(None, 1, 2, 10, b"efghij"),
            ] {
                let b = enc(&p);
                for len in 0..=b.len() {
                    assert_eq!(decode(&b[..len]), decode_reference(&b[..len]), "{n} {len}");
                }
            }
        }
        let b = enc(&Packet {
            header: hdr(Kind::Heartbeat),
            frag: None,
        });
        for len in 0..=b.len() {
            assert_eq!(decode(&b[..len]), decode_reference(&b[..len]));
        }
    }

    #[test]
    fn patch_ack_rewrites_only_the_ack_fields() {
        let am = AmHeader::new(130, Category::Long, false, &[], 4096).unwrap();
        let p = data(Some(am), 0, 2, 10, b"abcd");
        let mut b = enc(&p);
        patch_ack(&mut b, 99, u64::MAX, 7).unwrap();
        let d = decode(&b).unwrap();
        assert_eq!(
            (d.header.ack, d.header.sack, d.header.window),
            (99, u64::MAX, 7)
        );
        assert_eq!(d.frag, p.frag);
        assert!(patch_ack(&mut b[..10], 1, 1, 1).is_err());
    }

    #[test]
    fn each_defect_has_its_error() {
        let am = AmHeader::new(200, Category::Medium, false, &[7], 0).unwrap();
        let good = enc(&data(Some(am), 0, 1, 2, b"hi"));
        let at = |off: usize, v: u8| {
            let mut b = good.clone();
            b[off] = v;
            decode(&b).map(|_| ())
        };
        let am_off = HEADER_LEN + FRAG_LEN;
        assert_eq!(
            decode(&good[..10]),
            Err(WireError::Truncated {
                needed: HEADER_LEN,
                got: 10
            })
        );
        assert!(matches!(
            decode(&good[..HEADER_LEN + 5]),
            Err(WireError::Truncated { .. })
        ));
        assert!(matches!(at(0, b'X'), Err(WireError::BadMagic(_))));
        assert_eq!(at(4, 2), Err(WireError::BadVersion(2)));
        assert_eq!(at(5, 9), Err(WireError::BadKind(9)));
        assert_eq!(at(6, 1), Err(WireError::NonZero("header reserved")));
        assert_eq!(at(am_off, 0), Err(WireError::HandlerZero));
        assert_eq!(at(am_off + 1, 3), Err(WireError::BadFlags(3)));
        assert_eq!(at(am_off + 1, 0x11), Err(WireError::BadFlags(0x11)));
        assert_eq!(at(am_off + 2, 17), Err(WireError::TooManyArgs(17)));
        assert_eq!(at(am_off + 3, 1), Err(WireError::NonZero("AM reserved")));
        assert_eq!(
            at(am_off + 4, 1),
            Err(WireError::BadLongOffset {
                offset: 1,
                category: "Medium",
                total: 2
            })
        );
        // count 0, index >= count
        assert_eq!(
            at(HEADER_LEN + 12, 0),
            Err(WireError::BadFragment { index: 0, count: 0 })
        );
        // chunk length larger than the rest
        assert_eq!(
            at(HEADER_LEN + 24, 9),
            Err(WireError::ChunkOverrun { chunk: 9, left: 2 })
        );
        // chunk shorter than the rest: trailing bytes
        assert_eq!(at(HEADER_LEN + 24, 1), Err(WireError::TrailingBytes(1)));
        // single fragment whose chunk is not the whole message
        assert!(matches!(
            at(HEADER_LEN + 16, 3),
            Err(WireError::BadLengths { .. })
        ));
        let mut long = good.clone();
        long.push(0);
        assert!(matches!(
            decode(&long),
            Err(WireError::ChunkOverrun { .. } | WireError::TrailingBytes(_))
        ));
        let ack = enc(&Packet {
            header: hdr(Kind::Heartbeat),
            frag: None,
        });
        let mut extra = ack.clone();
        extra.extend_from_slice(&[1, 2, 3]);
        assert_eq!(decode(&extra), Err(WireError::TrailingBytes(3)));
        let mut seq = ack.clone();
        seq[24] = 1;
        assert_eq!(decode(&seq), Err(WireError::NonZero("seq")));
        let short = AmHeader::new(200, Category::Short, false, &[], 0).unwrap();
        assert_eq!(
            encode_to_vec(&data(Some(short), 0, 1, 1, b"x"), &mut Vec::new()),
            Err(WireError::ShortPayload(1))
        );
        assert_eq!(
            AmHeader::new(200, Category::Short, false, &[0; 17], 0),
            Err(WireError::TooManyArgs(17))
        );
        let far = AmHeader::new(200, Category::Long, false, &[], u64::MAX).unwrap();
        assert!(far.check_payload(0).is_ok());
        assert!(far.check_payload(1).is_err());
        // AM header on a later fragment, or missing on the first
        assert!(encode_to_vec(&data(Some(am), 1, 2, 4, b"ab"), &mut Vec::new()).is_err());
        assert!(encode_to_vec(&data(None, 0, 2, 4, b"ab"), &mut Vec::new()).is_err());
        // more fragments than bytes; empty chunk in a non-empty message
        assert!(encode_to_vec(&data(None, 1, 5, 4, b"a"), &mut Vec::new()).is_err());
        assert!(encode_to_vec(&data(None, 1, 2, 4, b""), &mut Vec::new()).is_err());
    }

    fn arb_am() -> impl Strategy<Value = AmHeader> {
        (
            1u8..=255,
            0u8..3,
            any::<bool>(),
            proptest::collection::vec(any::<u32>(), 0..=MAX_ARGS),
            any::<u64>(),
        )
            .prop_map(|(h, c, r, args, off)| {
                let cat = [Category::Short, Category::Medium, Category::Long][usize::from(c)];
                let off = if cat == Category::Long { off >> 1 } else { 0 };
                AmHeader::new(h, cat, r, &args, off).unwrap()
            })
    }

    /// A valid packet with its chunk owned.
    #[derive(Debug, Clone)]
    struct Owned {
        header: Header,
        frag: Option<OwnedFrag>,
    }

    #[derive(Debug, Clone)]
    struct OwnedFrag {
        msg_id: u64,
        index: u32,
        count: u32,
        total_len: u64,
        am: Option<AmHeader>,
        chunk: Vec<u8>,
    }

    impl Owned {
        fn packet(&self) -> Packet<'_> {
            Packet {
                header: self.header,
                frag: self.frag.as_ref().map(|f| Fragment {
                    msg_id: f.msg_id,
                    index: f.index,
                    count: f.count,
                    total_len: f.total_len,
                    am: f.am,
                    chunk: &f.chunk,
                }),
            }
        }
    }

    fn arb_packet() -> impl Strategy<Value = Owned> {
        let header = (
            1u8..=3,
            any::<u64>(),
            any::<u32>(),
            any::<u32>(),
            any::<u64>(),
            any::<u64>(),
            any::<u64>(),
            any::<u32>(),
        );
        let frag = (
            any::<u64>(),
            1u32..6,
            any::<u32>(),
            arb_am(),
            proptest::collection::vec(any::<u8>(), 0..300),
            0u64..1_000_000,
        );
        (header, frag).prop_map(|(h, f)| {
            let kind = Kind::from_u8(h.0).unwrap();
            let header = Header {
                kind,
                job_key: h.1,
                src: h.2,
                dst: h.3,
                seq: if kind == Kind::Data { h.4 } else { 0 },
                ack: h.5,
                sack: h.6,
                window: h.7,
            };
            if kind != Kind::Data {
                return Owned { header, frag: None };
            }
            let (id, mut count, idx, am, mut chunk, extra) = f;
            let index = idx % count;
            let mut am = (index == 0).then_some(am);
            if am.is_some_and(|a| a.category == Category::Short) {
                count = 1;
                chunk.clear();
            }
            let index = index.min(count - 1);
            if index == 0 && am.is_none() {
                am = Some(AmHeader::new(1, Category::Medium, false, &[], 0).unwrap());
            }
            if count > 1 && chunk.is_empty() {
                chunk.push(0xA5);
            }
            let total = if count == 1 {
                chunk.len() as u64
            } else {
                chunk.len() as u64 + u64::from(count) + extra
            };
            Owned {
                header,
                frag: Some(OwnedFrag {
                    msg_id: id,
                    index,
                    count,
                    total_len: total,
                    am,
                    chunk,
                }),
            }
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

        #[test]
        fn random_bytes_never_panic(b in proptest::collection::vec(any::<u8>(), 0..400)) {
            prop_assert_eq!(decode(&b), decode_reference(&b));
        }

        /// The decoder agrees with the field-by-field reference on every mutation and
        /// truncation of a valid datagram, down to the error and its values.
        #[test]
        fn decoder_matches_the_reference(
            o in arb_packet(),
            flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 0..4),
            cut in any::<usize>(),
            truncate in any::<bool>(),
        ) {
            let mut b = enc(&o.packet());
            for (at, x) in flips {
                let i = at % b.len();
                b[i] ^= x;
            }
            if truncate {
                b.truncate(cut % (b.len() + 1));
            }
            prop_assert_eq!(decode(&b), decode_reference(&b));
            for len in [HEADER_LEN, HEADER_LEN + FRAG_LEN, MAX_PREFIX_LEN] {
                let c = &b[..len.min(b.len())];
                prop_assert_eq!(decode(c), decode_reference(c));
            }
        }

        #[test]
        fn random_bytes_after_a_valid_header(
            kind in 1u8..=3, tail in proptest::collection::vec(any::<u8>(), 0..200)
        ) {
            let mut b = enc(&Packet { header: hdr(Kind::Ack), frag: None });
            b[5] = kind;
            b[24..32].fill(0);
            b.extend_from_slice(&tail);
            if let Ok(p) = decode(&b) {
                prop_assert_eq!(enc(&p), b);
            }
        }

        #[test]
        fn valid_packets_round_trip(o in arb_packet()) {
            let p = o.packet();
            let b = enc(&p);
            prop_assert_eq!(b.len(), p.encoded_len());
            prop_assert_eq!(decode(&b), Ok(p));
        }

        #[test]
        fn mutations_never_panic_and_stay_canonical(
            o in arb_packet(),
            flips in proptest::collection::vec((any::<usize>(), any::<u8>()), 1..4),
            cut in any::<usize>(),
            truncate in any::<bool>(),
        ) {
            let mut b = enc(&o.packet());
            for (at, x) in flips {
                let i = at % b.len();
                b[i] ^= x.max(1);
            }
            if truncate {
                b.truncate(cut % (b.len() + 1));
            }
            if let Ok(p) = decode(&b) {
                // Whatever decodes re-encodes to exactly the same bytes.
                prop_assert_eq!(enc(&p), b);
            }
        }
    }
}
