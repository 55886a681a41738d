//! The ibv conduit's message header, defined once here.
//!
//! Every active message is one SEND into a receive buffer of the target's shared receive
//! queue: a 20-byte header, the arguments (4 bytes each, little-endian) and, unless the
//! payload was RDMA-written ahead of it ([`F_WRITTEN`]), the payload.
//!
//! ```text
//! byte 0     handler
//! byte 1     category (bits 0-1) | F_REPLY | F_WRITTEN | F_CREDIT
//! byte 2     argument count
//! byte 3     credits returned to the receiver (requests of its that the sender delivered)
//! bytes 4-7  payload length (u32 LE)
//! bytes 8-15 Long offset in the target's segment (u64 LE)
//! bytes 16-19 source rank (u32 LE), checked against the queue pair it arrived on
//! ```

use amnet_core::{Category, OutMsg, Rank, MAX_ARGS};

/// Header bytes.
pub(crate) const HDR: usize = 20;
/// The message answers a request.
pub(crate) const F_REPLY: u8 = 0x04;
/// A Long whose payload was RDMA-written into the target's segment before this message (RC
/// order places it first); the message carries no payload.
pub(crate) const F_WRITTEN: u8 = 0x08;
/// A credit message: a header whose only content is byte 3; no handler runs.
pub(crate) const F_CREDIT: u8 = 0x10;

/// A decoded header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Header {
    pub(crate) handler: u8,
    pub(crate) category: Category,
    pub(crate) is_reply: bool,
    pub(crate) written: bool,
    pub(crate) nargs: usize,
    pub(crate) len: usize,
    pub(crate) long_offset: u64,
    pub(crate) src: Rank,
}

/// Write the header and arguments of `m` (payload length `len`) into `out`, which holds at
/// least `HDR + 4 * m.args.len()` bytes; returns the bytes written.
#[inline]
pub(crate) fn put_header(
    out: &mut [u8],
    m: &OutMsg<'_>,
    src: Rank,
    written: bool,
    len: usize,
) -> usize {
    let nargs = m.args.len();
    out[0] = m.handler;
    out[1] = m.category.code()
        | if m.is_reply { F_REPLY } else { 0 }
        | if written { F_WRITTEN } else { 0 };
    out[2] = u8::try_from(nargs).unwrap_or(u8::MAX);
    out[3] = 0;
    out[4..8].copy_from_slice(&u32::try_from(len).unwrap_or(u32::MAX).to_le_bytes());
    out[8..16].copy_from_slice(&m.long_offset.to_le_bytes());
    out[16..20].copy_from_slice(&src.to_le_bytes());
    for (i, a) in m.args.iter().enumerate() {
        out[HDR + 4 * i..HDR + 4 * i + 4].copy_from_slice(&a.to_le_bytes());
    }
    HDR + 4 * nargs
}

/// Decode the header at the start of `b`, or say what is wrong with it.
#[inline]
pub(crate) fn parse_header(b: &[u8]) -> Result<Header, String> {
    if b.len() < HDR {
        return Err(format!(
            "a message of {} bytes is shorter than a header",
            b.len()
        ));
    }
    let Some(category) = Category::from_code(b[1]) else {
        return Err(format!("category bits {:#x}", b[1]));
    };
    let nargs = usize::from(b[2]);
    if nargs > MAX_ARGS {
        return Err(format!("{nargs} arguments (at most {MAX_ARGS})"));
    }
    let mut off = [0u8; 8];
    off.copy_from_slice(&b[8..16]);
    Ok(Header {
        handler: b[0],
        category,
        is_reply: b[1] & F_REPLY != 0,
        written: b[1] & F_WRITTEN != 0,
        nargs,
        len: u32::from_le_bytes([b[4], b[5], b[6], b[7]]) as usize,
        long_offset: u64::from_le_bytes(off),
        src: u32::from_le_bytes([b[16], b[17], b[18], b[19]]),
    })
}

/// True when the message `body` is a reply.
#[inline]
pub(crate) fn is_reply(body: &[u8]) -> bool {
    body.get(1).is_some_and(|f| f & F_REPLY != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_header_reads_back_as_written() {
        let args = [1u32, 0xdead_beef, 7];
        let m = OutMsg {
            handler: 200,
            category: Category::Long,
            is_reply: true,
            args: &args,
            payload: &[],
            long_offset: 0x1_0000_0010,
        };
        let mut b = [0u8; HDR + 12];
        assert_eq!(put_header(&mut b, &m, 9, true, 4096), HDR + 12);
        let h = parse_header(&b).unwrap();
        assert_eq!(
            h,
            Header {
                handler: 200,
                category: Category::Long,
                is_reply: true,
                written: true,
                nargs: 3,
                len: 4096,
                long_offset: 0x1_0000_0010,
                src: 9,
            }
        );
        assert!(is_reply(&b));
        assert_eq!(b[HDR + 4..HDR + 8], 0xdead_beefu32.to_le_bytes());
    }

    #[test]
    fn a_bad_header_is_refused_with_its_fault_named() {
        assert!(parse_header(&[0; 5])
            .unwrap_err()
            .contains("shorter than a header"));
        let mut b = [0u8; HDR];
        b[1] = 3;
        assert!(parse_header(&b).unwrap_err().contains("category bits 0x3"));
        b[1] = 0;
        b[2] = 17;
        assert!(parse_header(&b).unwrap_err().contains("17 arguments"));
    }
}
