//! Fault injection for tests: loss, duplication and reordering of outgoing datagrams, with
//! the probabilities that `AMNET_UDP_LOSS`, `AMNET_UDP_DUP` and `AMNET_UDP_REORDER` give, and
//! forged datagrams (`AMNET_UDP_FORGE`).
//!
//! Every datagram the conduit sends passes through [`Injector::put_on_wire`]; with all four
//! probabilities zero (the default) it goes straight to the socket. Otherwise each datagram
//! is dropped, held back to leave after the next one, or sent (and possibly sent twice), by
//! a cheap random draw; what was injected is counted in the socket edge's counters, and the
//! protocol above recovers from it like from the network's own faults. A forgery is what a
//! host on the path could send: a copy of a DATA datagram with a payload, sent just ahead of
//! it, with the real job key and a valid header but the payload's last byte changed, and the
//! tag of the unchanged datagram or no tag. Without `AMNET_UDP_AUTH` the receiver takes the
//! forgery and drops the genuine datagram as a duplicate; with it, the forgery fails its tag.

use amnet_core::Rank;

use crate::auth::Mac;
use crate::proto::Datagram;
use crate::socket::{EdgeCounters, Socket};
use crate::wire;

/// Loss, duplication and reordering applied to outgoing datagrams (`AMNET_UDP_LOSS`,
/// `AMNET_UDP_DUP`, `AMNET_UDP_REORDER`), for tests.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Faults {
    /// The probability that a datagram is dropped.
    pub(crate) loss: f64,
    /// The probability that a datagram is sent twice.
    pub(crate) dup: f64,
    /// The probability that a datagram is held back to leave after the next one (one at a
    /// time).
    pub(crate) reorder: f64,
    /// The probability that a forged copy of a DATA datagram with a payload leaves ahead of
    /// it.
    pub(crate) forge: f64,
}

impl Faults {
    fn any(&self) -> bool {
        self.loss > 0.0 || self.dup > 0.0 || self.reorder > 0.0 || self.forge > 0.0
    }
}

/// A forged copy of `d`: its header as it is (the real job key, a valid sequence number), the
/// last byte of its payload changed, and with `mac` the tag of the unchanged datagram when
/// `nth` is even, none when odd. `None` for a datagram without payload (ACK, HEARTBEAT, a
/// Short message).
fn forgery(d: &Datagram<'_>, mac: Option<&Mac>, nth: u64) -> Option<Vec<u8>> {
    let mut v = d.to_vec();
    let has_payload = wire::decode(&v)
        .ok()?
        .frag
        .is_some_and(|f| !f.chunk.is_empty());
    if !has_payload {
        return None;
    }
    *v.last_mut()? ^= 0x5a;
    if let Some(mac) = mac {
        if nth % 2 == 0 {
            v.extend_from_slice(&mac.tag(&[d.bytes, d.tail]));
        }
    }
    Some(v)
}

/// xorshift64*: cheap, and enough for fault injection.
#[derive(Debug)]
struct Rng(u64);

impl Rng {
    fn unit(&mut self) -> f64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        let v = self.0.wrapping_mul(0x2545_f491_4f6c_dd1d);
        #[allow(clippy::cast_precision_loss)] // 53 bits are plenty
        let x = (v >> 11) as f64 / (1u64 << 53) as f64;
        x
    }
}

/// The injector: the probabilities, the random numbers that draw against them, and the
/// datagram held back for reordering.
#[derive(Debug)]
pub(crate) struct Injector {
    faults: Faults,
    rng: Rng,
    /// A datagram held back to be sent after the next one (reorder injection).
    late: Option<(Rank, Vec<u8>)>,
}

impl Injector {
    /// An injector of `faults` whose random numbers start from `seed` (not zero).
    pub(crate) fn new(faults: Faults, seed: u64) -> Injector {
        Injector {
            faults,
            rng: Rng(seed),
            late: None,
        }
    }

    /// Put `dgrams` on the wire through fault injection, when it is on. Returns how many count
    /// as sent: those the kernel took, and with injection all of them (what was dropped is the
    /// injected loss). A datagram held back for reordering leaves after the next one, or at
    /// the latest with [`Injector::flush_late`].
    pub(crate) fn put_on_wire(
        &mut self,
        sock: &Socket,
        dgrams: &[Datagram<'_>],
        edge: &mut EdgeCounters,
    ) -> usize {
        let Injector { faults, rng, late } = self;
        if !faults.any() {
            return sock.send_batch(dgrams, edge);
        }
        let mut out: Vec<Datagram<'_>> = Vec::with_capacity(dgrams.len() * 2);
        let mut release = None;
        for d in dgrams {
            if faults.forge > 0.0 && rng.unit() < faults.forge {
                if let Some(f) = forgery(d, sock.mac(), edge.injected_forged) {
                    sock.send_raw(d.dest, &f);
                    edge.injected_forged += 1;
                }
            }
            if rng.unit() < faults.loss {
                edge.injected_loss += 1;
                continue;
            }
            if rng.unit() < faults.reorder && late.is_none() {
                edge.injected_reorder += 1;
                *late = Some((d.dest, d.to_vec()));
                continue;
            }
            out.push(*d);
            if rng.unit() < faults.dup {
                edge.injected_dup += 1;
                out.push(*d);
            }
            if release.is_none() {
                release = late.take();
            }
        }
        sock.send_batch(&out, edge);
        if let Some((dest, bytes)) = release {
            sock.send_one(Datagram::whole(dest, &bytes), edge);
        }
        dgrams.len()
    }

    /// Send the datagram held back for reordering, if any: it never waits longer than one
    /// transmit round.
    pub(crate) fn flush_late(&mut self, sock: &Socket, edge: &mut EdgeCounters) {
        if let Some((dest, bytes)) = self.late.take() {
            sock.send_one(Datagram::whole(dest, &bytes), edge);
        }
    }
}
