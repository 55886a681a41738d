//! Criterion benchmark of the udp conduit's protocol alone (`amnet_udp::Proto`, no sockets):
//! two protocol states in one thread exchange a Short request and its Short reply through
//! the direct paths the conduit uses on a round trip (`send_now` on the sender,
//! `on_datagram_direct` on the receiver). This is the protocol's share of a Short round trip
//! over UDP with warm caches; the kernel's share is the raw ping-pong of `amnet-bench`.

use amnet_core::{Category, OutMsg};
use amnet_udp::{Proto, ProtoConfig, Sent};
use criterion::Criterion;

/// A Short message to `handler` with no arguments, a request or a reply.
fn short(handler: u8, is_reply: bool) -> OutMsg<'static> {
    OutMsg {
        handler,
        category: Category::Short,
        is_reply,
        args: &[],
        payload: &[],
        long_offset: 0,
    }
}

fn main() {
    let mut ps: Vec<Proto> = (0..2u32)
        .map(|r| Proto::new(ProtoConfig::default(), r, 2, 0x5eed, 0).expect("default config"))
        .collect();
    let (req, rep) = (short(200, false), short(201, true));
    let mut wire = Vec::with_capacity(2048);
    let mut now = 1u64;
    let mut rounds = 0u64;
    let mut c = Criterion::default().configure_from_args();
    c.bench_function("udp_proto/short_round_trip", |b| {
        b.iter(|| {
            for (from, to, msg) in [(0usize, 1u32, &req), (1, 0, &rep)] {
                let sent = ps[from].send_now(
                    to,
                    msg,
                    |d| {
                        wire.clear();
                        wire.extend_from_slice(d.bytes);
                        true
                    },
                    || now,
                );
                // Anything but the direct path would leave `wire` holding an older datagram.
                assert!(
                    matches!(sent, Ok(Sent::Wire(_))),
                    "send_now did not transmit: {sent:?}"
                );
                let mut taken = false;
                let got = ps[to as usize].on_datagram_direct(now, &wire, &mut |_, _, _| {
                    taken = true;
                    true
                });
                assert!(
                    got.is_ok() && taken,
                    "the message did not reach its handler: {got:?}"
                );
            }
            // The clock moves on now and then, as it does between polls.
            rounds += 1;
            if rounds % 128 == 0 {
                now += 1;
            }
        });
    });
    c.final_summary();
}
