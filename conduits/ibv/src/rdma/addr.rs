//! The bytes a peer needs to connect to a queue pair ([`Verbs::address`]), little-endian:
//!
//! ```text
//! 0      2   3     4    5     6      8     12    16    32
//! | "IB" | v | port| mtu | rd  | lid  | qpn | psn | gid |
//! ```
//!
//! `v` is the format's version (1), `mtu` the port's active MTU as an `ibv_mtu` value, `rd`
//! the RDMA reads and atomics the queue pair answers at once (its responder resources, which
//! bound the peer's initiator depth), `lid` the port's LID (0 on RoCE) and `gid` its GID at
//! index 0 (the address on RoCE, unused on InfiniBand within a subnet).
//!
//! [`Verbs::address`]: crate::verbs::Verbs::address

use amnet_core::{Error, Result};

/// The format's length in bytes.
pub(crate) const LEN: usize = 32;
const MAGIC: [u8; 2] = *b"IB";
const VERSION: u8 = 1;

/// A queue pair's address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct QpAddr {
    /// The port's LID.
    pub(crate) lid: u16,
    /// The port's GID at index 0.
    pub(crate) gid: [u8; 16],
    /// The queue pair's number (24 bits).
    pub(crate) qpn: u32,
    /// Its first packet sequence number (24 bits).
    pub(crate) psn: u32,
    /// The port's number.
    pub(crate) port: u8,
    /// The port's active MTU (`ibv_mtu`: 1 for 256 bytes to 5 for 4096).
    pub(crate) mtu: u8,
    /// Its responder resources.
    pub(crate) rd_atom: u8,
}

impl QpAddr {
    /// The address's bytes.
    pub(crate) fn encode(&self) -> Vec<u8> {
        let mut b = Vec::with_capacity(LEN);
        b.extend_from_slice(&MAGIC);
        b.push(VERSION);
        b.push(self.port);
        b.push(self.mtu);
        b.push(self.rd_atom);
        b.extend_from_slice(&self.lid.to_le_bytes());
        b.extend_from_slice(&self.qpn.to_le_bytes());
        b.extend_from_slice(&self.psn.to_le_bytes());
        b.extend_from_slice(&self.gid);
        debug_assert_eq!(b.len(), LEN);
        b
    }

    /// The address `b` holds, or an error that says why it is not one.
    pub(crate) fn decode(b: &[u8]) -> Result<QpAddr> {
        let bad = |why: &str| {
            Error::conduit(
                "ibv",
                format!(
                    "{} bytes are not a libibverbs queue pair's address ({why}); are both \
                     sides on the same device kind (AMNET_IBV_DEVICE)?",
                    b.len()
                ),
            )
        };
        if b.len() != LEN {
            return Err(bad(&format!("expected {LEN} bytes")));
        }
        if b[0..2] != MAGIC || b[2] != VERSION {
            return Err(bad("wrong tag or version"));
        }
        let u32_at = |i: usize| u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
        let mut gid = [0u8; 16];
        gid.copy_from_slice(&b[16..32]);
        let a = QpAddr {
            port: b[3],
            mtu: b[4],
            rd_atom: b[5],
            lid: u16::from_le_bytes([b[6], b[7]]),
            qpn: u32_at(8),
            psn: u32_at(12),
            gid,
        };
        if !(1..=5).contains(&a.mtu) {
            return Err(bad(&format!("MTU code {} is not 1 to 5", a.mtu)));
        }
        if a.qpn > 0xff_ffff || a.psn > 0xff_ffff {
            return Err(bad("queue pair number or PSN wider than 24 bits"));
        }
        if a.port == 0 {
            return Err(bad("port 0"));
        }
        Ok(a)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> QpAddr {
        QpAddr {
            lid: 0x1234,
            gid: [
                0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x02, 0x11, 0x22, 0xff, 0xfe, 0x33, 0x44, 0x55,
            ],
            qpn: 0x00ab_cdef,
            psn: 0x0012_3456,
            port: 2,
            mtu: 5,
            rd_atom: 16,
        }
    }

    #[test]
    fn address_round_trips() {
        let a = sample();
        let b = a.encode();
        assert_eq!(b.len(), LEN);
        assert_eq!(QpAddr::decode(&b).unwrap(), a);
        let roce = QpAddr {
            lid: 0,
            mtu: 3,
            rd_atom: 1,
            ..a
        };
        assert_eq!(QpAddr::decode(&roce.encode()).unwrap(), roce);
    }

    #[test]
    fn rejects_what_is_not_an_address() {
        let good = sample().encode();
        // An emulated device's address: a queue pair number and a shared-memory name.
        let mut emu = 7u32.to_le_bytes().to_vec();
        emu.extend_from_slice(b"amnet-ibv-4000-1234-0");
        for (b, says) in [
            (emu, "expected 32 bytes"),
            (good[..31].to_vec(), "expected 32 bytes"),
            (
                {
                    let mut b = good.clone();
                    b[2] = 9;
                    b
                },
                "wrong tag or version",
            ),
            (
                {
                    let mut b = good.clone();
                    b[4] = 6;
                    b
                },
                "MTU code 6",
            ),
            (
                {
                    let mut b = good.clone();
                    b[11] = 1;
                    b
                },
                "24 bits",
            ),
            (
                {
                    let mut b = good.clone();
                    b[3] = 0;
                    b
                },
                "port 0",
            ),
        ] {
            let e = QpAddr::decode(&b).unwrap_err().to_string();
            assert!(e.contains(says), "{e}");
        }
    }
}
