//! Unit tests of the state machine on a lossless wire and against hand-made hostile datagrams.
//! The lossy, reordering network simulation is in `tests/sim.rs`.

use super::*;
use crate::wire::{self, Fragment, Header, Kind, Packet, WireError};
use amnet_core::Category;

const KEY: u64 = 0xfeed_f00d;

fn cfg() -> ProtoConfig {
    ProtoConfig {
        mtu: 1400,
        ..ProtoConfig::default()
    }
}

fn medium<'a>(args: &'a [u32], payload: &'a [u8]) -> OutMsg<'a> {
    OutMsg {
        handler: 200,
        category: if payload.is_empty() {
            Category::Short
        } else {
            Category::Medium
        },
        is_reply: false,
        args,
        payload,
        long_offset: 0,
    }
}

fn drain(p: &mut Proto, now: u64) -> Vec<(Rank, Vec<u8>)> {
    let mut v = Vec::new();
    p.poll_transmit(now, |batch| {
        v.extend(batch.iter().map(|d| (d.dest, d.to_vec())));
        batch.len()
    });
    v
}

/// Moves datagrams between `ps` without loss at a fixed time until none is produced.
fn pump(ps: &mut [Proto], now: u64) {
    loop {
        let mut any = false;
        for i in 0..ps.len() {
            for (d, b) in drain(&mut ps[i], now) {
                any = true;
                ps[d as usize].on_datagram(now, &b).unwrap();
            }
        }
        if !any {
            break;
        }
    }
}

fn pair(cfg: ProtoConfig) -> Vec<Proto> {
    (0..2)
        .map(|r| Proto::new(cfg.clone(), r, 2, KEY, 0).unwrap())
        .collect()
}

/// A DATA datagram from rank 1 to rank 0.
fn data(seq: u64, msg_id: u64, index: u32, count: u32, total: u64, chunk: &[u8]) -> Vec<u8> {
    let am = AmHeader::new(200, Category::Medium, false, &[1], 0).unwrap();
    let pkt = Packet {
        header: Header {
            kind: Kind::Data,
            job_key: KEY,
            src: 1,
            dst: 0,
            seq,
            ack: 0,
            sack: 0,
            window: 64,
        },
        frag: Some(Fragment {
            msg_id,
            index,
            count,
            total_len: total,
            am: (index == 0).then_some(am),
            chunk,
        }),
    };
    let mut v = Vec::new();
    wire::encode_to_vec(&pkt, &mut v).unwrap();
    v
}

#[test]
fn config_is_validated() {
    assert!(ProtoConfig::default().validate().is_ok());
    let bad = |c: ProtoConfig| c.validate().unwrap_err().field;
    assert_eq!(bad(ProtoConfig { mtu: 100, ..cfg() }), "mtu");
    assert_eq!(
        bad(ProtoConfig {
            mtu: 70_000,
            ..cfg()
        }),
        "mtu"
    );
    assert_eq!(
        bad(ProtoConfig {
            recv_window: 0,
            ..cfg()
        }),
        "recv_window"
    );
    assert_eq!(
        bad(ProtoConfig {
            send_window: 0,
            ..cfg()
        }),
        "send_window"
    );
    assert_eq!(
        bad(ProtoConfig {
            rto_min: 0,
            ..cfg()
        }),
        "rto_initial"
    );
    assert_eq!(
        bad(ProtoConfig {
            rto_max: 5,
            ..cfg()
        }),
        "rto_initial"
    );
    assert_eq!(
        bad(ProtoConfig {
            delayed_ack: 1_000,
            ..cfg()
        }),
        "delayed_ack"
    );
    assert_eq!(
        bad(ProtoConfig {
            peer_timeout: 1_000_000,
            ..cfg()
        }),
        "peer_timeout"
    );
    assert_eq!(Proto::new(cfg(), 2, 2, KEY, 0).unwrap_err().field, "rank");
}

#[test]
fn send_rejects_bad_messages_before_queueing() {
    let mut p = Proto::new(
        ProtoConfig {
            max_message: 1000,
            ..cfg()
        },
        0,
        2,
        KEY,
        0,
    )
    .unwrap();
    assert_eq!(
        p.send(2, &medium(&[], b"x")),
        Err(SendError::BadRank { rank: 2, size: 2 })
    );
    assert_eq!(
        p.send(1, &medium(&[0; 17], b"x")),
        Err(SendError::Malformed(WireError::TooManyArgs(17)))
    );
    let mut m = medium(&[], b"");
    m.handler = 0;
    assert_eq!(
        p.send(1, &m),
        Err(SendError::Malformed(WireError::HandlerZero))
    );
    let mut m = medium(&[], b"abc");
    m.category = Category::Short;
    assert_eq!(
        p.send(1, &m),
        Err(SendError::Malformed(WireError::ShortPayload(3)))
    );
    assert_eq!(
        p.send(1, &medium(&[], &[0; 1001])),
        Err(SendError::TooLarge {
            len: 1001,
            max: 1000
        })
    );
    assert_eq!(p.unacked(), 0);
    assert_eq!(p.counters().messages_sent, 0);
}

#[test]
fn messages_to_self_skip_the_wire() {
    let mut p = Proto::new(
        ProtoConfig {
            send_queue: 3,
            ..cfg()
        },
        0,
        1,
        KEY,
        0,
    )
    .unwrap();
    let mut buf = vec![7u8; 5000];
    p.send(0, &medium(&[1, 2], &buf)).unwrap();
    buf.fill(0); // the payload was copied
    p.send(0, &medium(&[3], b"")).unwrap();
    p.send(0, &medium(&[4], b"z")).unwrap();
    assert_eq!(
        p.send(0, &medium(&[5], b"")),
        Err(SendError::Backpressure(0))
    );
    assert_eq!(drain(&mut p, 0).len(), 0);
    assert_eq!(p.next_timeout(), None);
    let d = p.pop(false).unwrap();
    assert_eq!(
        (d.src, d.am.args(), d.payload.len()),
        (0, &[1, 2][..], 5000)
    );
    assert!(d.payload.iter().all(|&b| b == 7));
    p.recycle(d);
    assert_eq!(p.pop(false).unwrap().am.args(), &[3]);
    assert_eq!(p.pop(false).unwrap().am.args(), &[4]);
    assert!(p.pop(false).is_none());
}

#[test]
fn lossless_exchange_with_fragments_and_delayed_ack() {
    let mut ps = pair(cfg());
    let sizes = [0usize, 10, 1300, 1301, 5000, 100_000];
    let byte = |i: usize, j: usize| (j * 7 + i).to_le_bytes()[0];
    for (i, &n) in (0u32..).zip(&sizes) {
        let payload: Vec<u8> = (0..n).map(|j| byte(i as usize, j)).collect();
        ps[0].send(1, &medium(&[i], &payload)).unwrap();
    }
    pump(&mut ps, 10);
    for (i, &n) in (0u32..).zip(&sizes) {
        let d = ps[1].pop(false).expect("delivered");
        assert_eq!((d.src, d.am.args()), (0, &[i][..]));
        assert_eq!(d.payload.len(), n);
        assert!(d
            .payload
            .iter()
            .enumerate()
            .all(|(j, &b)| b == byte(i as usize, j)));
    }
    assert!(!ps[1].has_ready());
    // 84 datagrams: ack_every made every ack go at once.
    assert_eq!(ps[0].unacked(), 0);
    assert_eq!(ps[0].counters().data_sent, 84);
    // One more datagram: its ack waits for the delayed-ack timer.
    ps[0].send(1, &medium(&[9], b"tail")).unwrap();
    pump(&mut ps, 20);
    assert_eq!(ps[0].unacked(), 1);
    let owed_at = ps[1].next_timeout().unwrap();
    assert_eq!(owed_at, 20 + cfg().delayed_ack);
    let acks = ps[1].counters().acks_sent;
    pump(&mut ps, owed_at);
    assert_eq!(ps[0].unacked(), 0);
    assert_eq!(ps[1].counters().acks_sent, acks + 1);
    assert_eq!(ps[0].counters().retransmits, 0);
    assert_eq!(ps[1].counters().duplicates, 0);
}

#[test]
fn acks_ride_on_data() {
    let mut ps = pair(cfg());
    ps[0].send(1, &medium(&[1], b"ping")).unwrap();
    let out = drain(&mut ps[0], 0);
    assert_eq!(out.len(), 1);
    ps[1].on_datagram(5, &out[0].1).unwrap();
    assert_eq!(ps[1].pop(false).unwrap().payload, b"ping");
    ps[1].send(0, &medium(&[2], b"pong")).unwrap();
    let back = drain(&mut ps[1], 6);
    assert_eq!(back.len(), 1, "the reply carries the ack; no separate ACK");
    ps[0].on_datagram(9, &back[0].1).unwrap();
    assert_eq!(ps[0].unacked(), 0);
    assert_eq!(ps[1].counters().acks_sent, 0);
    let st = ps[0].peer_status(1).unwrap();
    assert_eq!(st.srtt, Some(9));
}

#[test]
fn duplicates_and_reordering_deliver_once_in_order() {
    let mut p = Proto::new(cfg(), 0, 2, KEY, 0).unwrap();
    let d0 = data(0, 0, 0, 1, 1, b"a");
    let d1 = data(1, 1, 0, 2, 3, b"bc");
    let d2 = data(2, 1, 1, 2, 3, b"d");
    for d in [&d2, &d2, &d1, &d0, &d0, &d1] {
        p.on_datagram(1, d).unwrap();
    }
    assert_eq!(p.counters().duplicates, 3);
    assert_eq!(p.pop(false).unwrap().payload, b"a");
    assert_eq!(p.pop(false).unwrap().payload, b"bcd");
    assert!(p.pop(false).is_none());
    // Out-of-order arrivals ask for an immediate ack.
    assert_eq!(p.next_timeout(), Some(0));
    let acks = drain(&mut p, 1);
    assert_eq!(acks.len(), 1);
    let h = wire::decode(&acks[0].1).unwrap().header;
    assert_eq!((h.kind, h.ack, h.sack), (Kind::Ack, 3, 0));
}

#[test]
fn selective_acks_describe_the_reorder_buffer() {
    let mut p = Proto::new(cfg(), 0, 2, KEY, 0).unwrap();
    for seq in [2u64, 4, 5] {
        p.on_datagram(1, &data(seq, seq, 0, 1, 1, b"x")).unwrap();
    }
    let out = drain(&mut p, 1);
    let h = wire::decode(&out[0].1).unwrap().header;
    // Bit i is seq ack + 1 + i: 2 -> bit 1, 4 -> bit 3, 5 -> bit 4.
    assert_eq!((h.ack, h.sack), (0, 0b11010));
    assert_eq!(p.peer_status(1).unwrap().reorder_buffered, 3);
}

#[test]
fn hostile_datagrams_are_counted_and_bounded() {
    let c = ProtoConfig {
        recv_window: 16,
        max_message: 10_000,
        ..cfg()
    };
    let mut p = Proto::new(c, 0, 3, KEY, 0).unwrap();
    assert!(matches!(
        p.on_datagram(0, b"garbage"),
        Err(RxError::Decode(_))
    ));
    let mut foreign = data(0, 0, 0, 1, 1, b"a");
    foreign[8] ^= 1;
    assert!(matches!(
        p.on_datagram(0, &foreign),
        Err(RxError::ForeignJob(_))
    ));
    for (src, dst) in [(0u32, 0u32), (1, 2), (7, 0)] {
        let mut d = data(0, 0, 0, 1, 1, b"a");
        d[16..20].copy_from_slice(&src.to_le_bytes());
        d[20..24].copy_from_slice(&dst.to_le_bytes());
        assert_eq!(
            p.on_datagram(0, &d),
            Err(RxError::Misaddressed { src, dst })
        );
    }
    // A flood far ahead of the cumulative ack: only the window is buffered.
    for seq in 1..1000 {
        p.on_datagram(0, &data(seq, seq, 0, 1, 1, b"a")).unwrap();
    }
    p.on_datagram(0, &data(u64::MAX, 0, 0, 1, 1, b"a")).unwrap();
    let st = p.peer_status(1).unwrap();
    assert_eq!(st.reorder_buffered, 15);
    let c = *p.counters();
    assert_eq!(
        (
            c.decode_errors,
            c.foreign_key,
            c.misaddressed,
            c.out_of_window
        ),
        (1, 1, 3, 1000 - 16 + 1)
    );
    // A message above the limit, then a fragment of nothing, then an ack of unsent data.
    let mut q = Proto::new(
        ProtoConfig {
            max_message: 10_000,
            ..cfg()
        },
        0,
        2,
        KEY,
        0,
    )
    .unwrap();
    assert!(matches!(
        q.on_datagram(0, &data(0, 0, 0, 2, u64::MAX / 2, b"ab")),
        Err(RxError::Protocol { src: 1, .. })
    ));
    assert!(matches!(
        q.on_datagram(0, &data(1, 0, 1, 2, u64::MAX / 2, b"c")),
        Err(RxError::Protocol { src: 1, .. })
    ));
    let mut ack = data(2, 1, 0, 1, 1, b"d");
    ack[32..40].copy_from_slice(&5u64.to_le_bytes());
    assert!(matches!(
        q.on_datagram(0, &ack),
        Err(RxError::Protocol {
            what: "acked data that was never sent",
            ..
        })
    ));
    assert_eq!(q.counters().protocol_errors, 3);
    // The well-formed message inside the last datagram was still delivered.
    assert_eq!(q.pop(false).unwrap().payload, b"d");
}

#[test]
fn undelivered_messages_close_the_window_and_taking_them_reopens_it() {
    let c = ProtoConfig {
        recv_window: 4,
        ..cfg()
    };
    let mut ps = pair(c);
    for i in 0..10u32 {
        ps[0].send(1, &medium(&[i], b"m")).unwrap();
    }
    pump(&mut ps, 0);
    pump(&mut ps, 1000); // the delayed ack, advertising a closed window
    let st = ps[1].peer_status(0).unwrap();
    assert_eq!((st.undelivered, st.advertised), (4, 0));
    assert_eq!(ps[0].peer_status(1).unwrap().send_credit, 0);
    assert_eq!(ps[0].peer_status(1).unwrap().unsent, 6);
    let mut got = Vec::new();
    for round in 1..10 {
        while let Some(d) = ps[1].pop(false) {
            got.push(d.am.args()[0]);
            ps[1].recycle(d);
        }
        // Reopening the window sends an ACK at once: no timer needed.
        pump(&mut ps, 1000 + round);
    }
    assert_eq!(got, (0..10).collect::<Vec<_>>());
    assert_eq!(ps[0].counters().retransmits, 0);
}

#[test]
fn reassembly_counts_against_the_window_and_credit_never_moves_back() {
    let c = ProtoConfig {
        recv_window: 4,
        ..cfg()
    };
    let mut p = Proto::new(c, 0, 2, KEY, 0).unwrap();
    let edge = |p: &Proto| {
        let st = p.peer_status(1).unwrap();
        (st.credit_edge, st.advertised)
    };
    assert_eq!(edge(&p), (4, 4));
    // A lone message waiting to be taken holds one datagram: the edge stays at 4.
    p.on_datagram(1, &data(0, 0, 0, 1, 1, b"a")).unwrap();
    assert_eq!(edge(&p), (4, 3));
    // A message of two fragments: each held fragment takes room, and its completion takes
    // none back.
    p.on_datagram(1, &data(1, 1, 0, 2, 2, b"b")).unwrap();
    assert_eq!(edge(&p), (4, 2));
    p.on_datagram(1, &data(2, 1, 1, 2, 2, b"c")).unwrap();
    assert_eq!(edge(&p), (4, 1));
    // The last granted sequence number is still taken in.
    p.on_datagram(1, &data(3, 2, 0, 1, 1, b"d")).unwrap();
    assert_eq!(edge(&p), (4, 0));
    assert_eq!(p.counters().out_of_window, 0);
    for want in [&b"a"[..], b"bc", b"d"] {
        let d = p.pop(false).unwrap();
        assert_eq!(d.payload, want);
        p.recycle(d);
    }
    assert_eq!(edge(&p), (8, 4));
    // A message longer than the window: the window never closes on the fragments it lacks,
    // so it completes, and the edge never moves back on the way.
    let mut last = edge(&p).0;
    for i in 0..10u32 {
        let seq = 4 + u64::from(i);
        p.on_datagram(1, &data(seq, 3, i, 10, 10, b"x")).unwrap();
        let (e, w) = edge(&p);
        assert!(e >= last && e > seq, "fragment {i}: edge {e} window {w}");
        last = e;
    }
    assert_eq!(p.counters().out_of_window, 0);
    assert_eq!(p.pop(false).unwrap().payload, b"xxxxxxxxxx");
    assert_eq!(p.counters().protocol_errors, 0);
}

#[test]
fn replies_can_be_taken_first() {
    let mut p = Proto::new(cfg(), 0, 1, KEY, 0).unwrap();
    let mut m = medium(&[1], b"");
    p.send(0, &m).unwrap();
    m.is_reply = true;
    m.args = &[2];
    p.send(0, &m).unwrap();
    assert_eq!(p.pop(true).unwrap().am.args(), &[2]);
    assert!(p.pop(true).is_none());
    assert_eq!(p.pop(false).unwrap().am.args(), &[1]);
    let mut seen = 0;
    p.send(0, &m).unwrap();
    p.send(0, &m).unwrap();
    assert_eq!(
        p.deliver(false, |_| {
            seen += 1;
            false
        }),
        1
    );
    assert_eq!(seen, 1);
    assert!(p.has_ready());
}

#[test]
fn a_short_write_is_offered_again() {
    let mut ps = pair(cfg());
    for i in 0..3u32 {
        ps[0].send(1, &medium(&[i], b"x")).unwrap();
    }
    let mut offered = 0;
    assert_eq!(
        ps[0].poll_transmit(0, |b| {
            offered = b.len();
            1 // the socket took only the first
        }),
        1
    );
    assert_eq!(offered, 3);
    assert_eq!(ps[0].peer_status(1).unwrap().in_flight, 1);
    assert_eq!(ps[0].next_timeout(), Some(0));
    let rest = drain(&mut ps[0], 1);
    assert_eq!(rest.len(), 2);
    let seqs: Vec<u64> = rest
        .iter()
        .map(|(_, b)| wire::decode(b).unwrap().header.seq)
        .collect();
    assert_eq!(seqs, [1, 2]);
    assert_eq!(ps[0].counters().retransmits, 0);
}

/// `send_now` into a vector: every datagram the callback took (all of them when `take`, none
/// otherwise), and what it returned.
fn send_now_all(
    p: &mut Proto,
    dest: Rank,
    msg: &OutMsg<'_>,
    take: bool,
    now: u64,
) -> (Sent, Vec<Vec<u8>>) {
    let mut out = Vec::new();
    let sent = p
        .send_now(
            dest,
            msg,
            |d| {
                assert_eq!(d.dest, dest);
                if take {
                    out.push(d.to_vec());
                }
                take
            },
            || now,
        )
        .unwrap();
    (sent, out)
}

/// [`send_now_all`] for a message of one datagram: the datagram the callback took, if any.
fn send_now(
    p: &mut Proto,
    dest: Rank,
    msg: &OutMsg<'_>,
    take: bool,
    now: u64,
) -> (Sent, Option<Vec<u8>>) {
    let (sent, mut out) = send_now_all(p, dest, msg, take, now);
    assert!(out.len() <= 1, "a lone datagram");
    (sent, out.pop())
}

#[test]
fn the_direct_path_sends_a_lone_datagram_like_the_planner() {
    let mut ps = pair(cfg());
    // A request, its reply: each leaves at once and carries the current acks.
    let (sent, out) = send_now(&mut ps[0], 1, &medium(&[1], b"ping"), true, 10);
    assert_eq!(sent, Sent::Wire(10));
    let b = out.unwrap();
    ps[1].on_datagram(15, &b).unwrap();
    assert_eq!(ps[1].pop(false).unwrap().payload, b"ping");
    let (sent, out) = send_now(&mut ps[1], 0, &medium(&[2], b"pong"), true, 16);
    assert_eq!(sent, Sent::Wire(16));
    let h = wire::decode(out.as_ref().unwrap()).unwrap().header;
    assert_eq!((h.kind, h.seq, h.ack, h.window), (Kind::Data, 0, 1, 64));
    ps[0].on_datagram(21, &out.unwrap()).unwrap();
    // The reply acked the request (an RTT sample of 11 µs), and owed no separate ACK.
    assert_eq!(ps[0].unacked(), 0);
    assert_eq!(ps[0].peer_status(1).unwrap().srtt, Some(11));
    assert!(drain(&mut ps[1], 16).is_empty());
    for p in &ps {
        let c = p.counters();
        assert_eq!((c.data_sent, c.tx_datagrams, c.acks_sent), (1, 1, 0));
    }
    // In flight and unacked: retransmitted by the planner on its timeout like any datagram.
    let (sent, _) = send_now(&mut ps[0], 1, &medium(&[3], b"lost"), true, 30);
    assert_eq!(sent, Sent::Wire(30));
    let rto = ps[0].peer_status(1).unwrap().rto;
    assert_eq!(ps[0].next_timeout(), Some(30 + rto));
    let again = drain(&mut ps[0], 30 + rto);
    assert_eq!(again.len(), 1);
    assert_eq!(wire::decode(&again[0].1).unwrap().header.seq, 1);
    assert_eq!(ps[0].counters().retransmits, 1);
}

#[test]
fn the_direct_path_leaves_what_it_cannot_send_to_the_planner() {
    let c = ProtoConfig {
        recv_window: 2,
        ..cfg()
    };
    let mut ps = pair(c);
    // Refused by the callback (a full socket buffer): queued, offered by the planner.
    let (sent, out) = send_now(&mut ps[0], 1, &medium(&[0], b"a"), false, 0);
    assert_eq!((sent, out), (Sent::Queued, None));
    assert_eq!(ps[0].next_timeout(), Some(0));
    // Behind a queued datagram: queued too, so that the order holds.
    let (sent, _) = send_now(&mut ps[0], 1, &medium(&[1], b"b"), true, 0);
    assert_eq!(sent, Sent::Queued);
    let out = drain(&mut ps[0], 0);
    let seqs: Vec<u64> = out
        .iter()
        .map(|(_, b)| wire::decode(b).unwrap().header.seq)
        .collect();
    assert_eq!(seqs, [0, 1]);
    for (_, b) in &out {
        ps[1].on_datagram(1, b).unwrap();
    }
    // The peer's window (2 datagrams) is used up: queued until it reopens.
    let (sent, _) = send_now(&mut ps[0], 1, &medium(&[2], b"c"), true, 1);
    assert_eq!(sent, Sent::Queued);
    assert_eq!(ps[0].peer_status(1).unwrap().unsent, 1);
    // Several fragments: each leaves as soon as it is encoded while the window (2) admits
    // it, and the rest waits for the planner.
    let big = vec![9u8; 3000];
    let (sent, out) = send_now_all(&mut ps[1], 0, &medium(&[3], &big), true, 1);
    assert_eq!(sent, Sent::Queued);
    let seqs: Vec<u64> = out
        .iter()
        .map(|b| wire::decode(b).unwrap().header.seq)
        .collect();
    assert_eq!(seqs, [0, 1]);
    assert_eq!(ps[1].peer_status(0).unwrap().unsent, 1);
    for b in &out {
        ps[0].on_datagram(1, b).unwrap();
    }
    // To itself: never on the wire.
    let (sent, _) = send_now(&mut ps[1], 1, &medium(&[4], b"me"), true, 1);
    assert_eq!(sent, Sent::Queued);
    let got: Vec<(Rank, u32)> = std::iter::from_fn(|| ps[1].pop(false))
        .map(|d| (d.src, d.am.args()[0]))
        .collect();
    assert_eq!(got, [(0, 0), (0, 1), (1, 4)]);
    // Taking the messages reopened the window: the queued datagrams follow.
    pump(&mut ps, 2);
    assert_eq!(ps[1].pop(false).unwrap().am.args(), &[2]);
    assert_eq!(ps[0].pop(false).unwrap().payload, big);
    for p in &ps {
        assert_eq!(p.counters().retransmits, 0);
    }
}

#[test]
fn a_lone_complete_message_can_be_taken_straight_off_the_wire() {
    let mut ps = pair(cfg());
    let window = cfg().recv_window;
    for i in 0..3u32 {
        ps[0].send(1, &medium(&[i], b"m")).unwrap();
    }
    let out = drain(&mut ps[0], 0);
    let mut offered = Vec::new();
    let mut offer = |p: &mut Proto, b: &[u8], accept: bool| {
        p.on_datagram_direct(1, b, &mut |src, am, payload| {
            offered.push((src, am.args()[0], payload.to_vec()));
            accept
        })
        .unwrap();
    };
    // Taken: counted as received, never queued, the window stays open.
    offer(&mut ps[1], &out[0].1, true);
    assert!(!ps[1].has_ready());
    assert_eq!(ps[1].peer_status(0).unwrap().advertised, window);
    assert_eq!(ps[1].counters().messages_received, 1);
    // Refused: queued as usual.
    offer(&mut ps[1], &out[1].1, false);
    assert_eq!(ps[1].peer_status(0).unwrap().advertised, window - 1);
    // Something waits to be taken: not offered, so that the order holds.
    offer(&mut ps[1], &out[2].1, true);
    assert_eq!(offered, [(0, 0, b"m".to_vec()), (0, 1, b"m".to_vec())]);
    let got: Vec<u32> = std::iter::from_fn(|| ps[1].pop(false))
        .map(|d| d.am.args()[0])
        .collect();
    assert_eq!(got, [1, 2]);
    // Out of order: the second arrives first and is buffered; the first fills the gap and
    // alone is offered, and the one behind it is queued.
    ps[0].send(1, &medium(&[5], b"x")).unwrap();
    ps[0].send(1, &medium(&[6], b"y")).unwrap();
    let out = drain(&mut ps[0], 4);
    let mut offered = take_direct(&mut ps[1], 5, &out[1].1);
    offered.extend(take_direct(&mut ps[1], 5, &out[0].1));
    assert_eq!(offered, [5]);
    assert_eq!(ps[1].pop(false).unwrap().am.args(), &[6]);
    // Several fragments: reassembled and queued, never offered.
    ps[0].send(1, &medium(&[7], &[5u8; 3000])).unwrap();
    for (_, b) in drain(&mut ps[0], 6) {
        ps[1]
            .on_datagram_direct(7, &b, &mut |_, _, _| panic!("offered a fragment"))
            .unwrap();
    }
    assert_eq!(ps[1].pop(false).unwrap().payload.len(), 3000);
    pump(&mut ps, 8);
    assert_eq!(ps[0].unacked(), 0);
    assert_eq!(ps[0].counters().retransmits, 0);
}

/// Takes whatever `bytes` completes straight off the wire; returns what was taken.
fn take_direct(p: &mut Proto, now: u64, bytes: &[u8]) -> Vec<u32> {
    let mut got = Vec::new();
    p.on_datagram_direct(now, bytes, &mut |_, am, _| {
        got.push(am.args()[0]);
        true
    })
    .unwrap();
    got
}

#[test]
fn the_ack_of_a_message_taken_off_the_wire_is_settled_after_the_reply() {
    let mut ps = pair(cfg());
    // A request from 1 to 0 and its reply: the reply's datagram acks the request.
    let (_, out) = send_now(&mut ps[1], 0, &medium(&[1], b"req"), true, 10);
    assert_eq!(take_direct(&mut ps[0], 12, &out.unwrap()), [1]);
    let (_, out) = send_now(&mut ps[0], 1, &medium(&[2], b"rep"), true, 13);
    let reply = out.unwrap();
    // Rank 1 takes the reply: its ack is deferred, but counted in where it is asked for.
    assert_eq!(take_direct(&mut ps[1], 20, &reply), [2]);
    assert_eq!(ps[1].unacked(), 0);
    assert_eq!(ps[1].next_timeout(), Some(0));
    assert!(!ps[1].due_now(0));
    assert_eq!(ps[1].peer_status(0).unwrap().in_flight, 1);
    // The next request leaves first, with the current acks; then the ack is applied, with the
    // RTT sample of the arrival time (20 - 10), not of the send.
    let (sent, out) = send_now(&mut ps[1], 0, &medium(&[3], b"req"), true, 25);
    assert_eq!(sent, Sent::Wire(25));
    let h = wire::decode(out.as_ref().unwrap()).unwrap().header;
    assert_eq!((h.seq, h.ack), (1, 1));
    let st = ps[1].peer_status(0).unwrap();
    assert_eq!((st.in_flight, st.srtt), (1, Some(10)));
    assert_eq!(ps[1].unacked(), 1);
    assert!(ps[1].next_timeout().unwrap() > 25);
    // Without a reply to carry it, settle applies it (the conduit's next poll).
    assert_eq!(take_direct(&mut ps[0], 30, &out.unwrap()), [3]);
    assert_eq!(ps[0].unacked(), 0);
    ps[0].settle();
    assert_eq!(ps[0].peer_status(1).unwrap().in_flight, 0);
    assert_eq!(ps[0].peer_status(1).unwrap().srtt, Some(17));
    // Anything that changes the state applies it first: a plain send, a datagram, the planner.
    let (_, out) = send_now(&mut ps[0], 1, &medium(&[4], b"rep"), true, 31);
    assert_eq!(take_direct(&mut ps[1], 33, &out.unwrap()), [4]);
    ps[1].send(0, &medium(&[5], b"q")).unwrap();
    assert_eq!(ps[1].peer_status(0).unwrap().in_flight, 0);
    for p in &ps {
        assert_eq!(p.counters().protocol_errors, 0);
    }
}

#[test]
fn a_deferred_ack_is_checked_at_once_and_can_make_data_due() {
    // An ack of data never sent is refused at once, on the direct path too.
    let mut p = Proto::new(cfg(), 0, 2, KEY, 0).unwrap();
    let mut bogus = data(0, 0, 0, 1, 1, b"a");
    wire::patch_ack(&mut bogus, 5, 0, 64).unwrap();
    let r = p.on_datagram_direct(1, &bogus, &mut |_, _, _| true);
    assert!(matches!(r, Err(RxError::Protocol { src: 1, .. })), "{r:?}");
    assert_eq!(
        (p.unacked(), p.next_timeout().is_some_and(|t| t > 0)),
        (0, true)
    );
    // Rank 0 fills rank 1's window of 2; a third message waits for credit.
    let mut ps = pair(ProtoConfig {
        recv_window: 2,
        ..cfg()
    });
    for i in 0..3u32 {
        ps[0].send(1, &medium(&[i], b"m")).unwrap();
    }
    let out = drain(&mut ps[0], 0);
    assert_eq!(out.len(), 2);
    for (_, b) in &out {
        ps[1].on_datagram(1, b).unwrap();
    }
    while let Some(d) = ps[1].pop(false) {
        ps[1].recycle(d);
    }
    // Rank 1 sends a message that carries the ack and the reopened window; rank 0 takes it
    // straight off the wire. The deferred ack lets the third message go: due at once.
    let (_, reply) = send_now(&mut ps[1], 0, &medium(&[9], b"r"), true, 2);
    assert_eq!(take_direct(&mut ps[0], 3, &reply.unwrap()), [9]);
    assert!(ps[0].due_now(1));
    let out = drain(&mut ps[0], 3);
    assert_eq!(out.len(), 1);
    assert_eq!(wire::decode(&out[0].1).unwrap().header.seq, 2);
    assert_eq!(ps[0].counters().retransmits, 0);
}

#[test]
fn the_retransmission_timer_restarts_while_the_cumulative_ack_moves() {
    let mut ps = pair(cfg());
    // A small exchange gives an RTT sample of 10 us, so the timeout is its floor, 1 ms.
    ps[0].send(1, &medium(&[0], b"x")).unwrap();
    pump(&mut ps, 0);
    pump(&mut ps, 10);
    pump(&mut ps, 10 + cfg().delayed_ack);
    assert_eq!(ps[0].unacked(), 0);
    assert_eq!(ps[0].peer_status(1).unwrap().rto, cfg().rto_min);
    // 40 datagrams leave at once; the receiver takes 8 of them every 600 us, so the last ones
    // wait 3 ms for their ack, three times the timeout, while acks keep coming.
    let t0 = 1_000;
    ps[0]
        .send(1, &medium(&[1], &vec![7u8; 40 * 1_300]))
        .unwrap();
    let burst = drain(&mut ps[0], t0);
    assert_eq!(burst.len(), 40);
    for (k, group) in burst.chunks(8).enumerate() {
        let now = t0 + 600 * (k as u64 + 1);
        // Nothing is due again before the next group's ack: every datagram still out was sent
        // less than a timeout after the last move of the cumulative ack (but up to 1.2 ms
        // before now).
        assert!(
            drain(&mut ps[0], now).is_empty(),
            "retransmitted at {now} us"
        );
        for (_, b) in group {
            ps[1].on_datagram(now, b).unwrap();
        }
        for (_, ack) in drain(&mut ps[1], now) {
            ps[0].on_datagram(now, &ack).unwrap();
        }
    }
    assert_eq!(ps[0].unacked(), 0);
    assert_eq!(ps[0].counters().timeouts, 0);
    assert_eq!(ps[0].counters().retransmits, 0);
    assert_eq!(ps[1].counters().duplicates, 0);
}

#[test]
fn a_held_payload_is_sent_from_where_it_lies_and_copied_when_released() {
    let mut ps = pair(cfg());
    let mut src: Vec<u8> = (0..3000u32).map(|i| (i % 251) as u8).collect();
    let want = src.clone();
    let mut out = Vec::new();
    // SAFETY: `src` outlives the hold, which `release_held` below ends before `src` changes.
    let sent = unsafe {
        ps[0].send_now_held(
            1,
            &medium(&[7], &src),
            |d| {
                // Headers in the datagram's buffer, the chunk straight from `src`.
                assert!(d.bytes.len() < 100 && !d.tail.is_empty());
                assert!(src.as_ptr_range().contains(&d.tail.as_ptr()));
                out.push(d.to_vec());
                true
            },
            || 0,
        )
    }
    .unwrap();
    assert_eq!((sent, out.len()), (Sent::Wire(0), 3));
    assert_eq!(
        ps[0].counters().tx_bytes,
        out.iter().map(|b| b.len() as u64).sum()
    );
    // The middle fragment is lost; the others arrive and are acked selectively.
    ps[1].on_datagram(1, &out[0]).unwrap();
    ps[1].on_datagram(1, &out[2]).unwrap();
    pump(&mut ps, 1);
    assert_eq!(ps[0].unacked(), 2);
    // Released: the unacked datagrams take copies, and the caller may change its buffer.
    ps[0].release_held(1, &src);
    src.fill(0xee);
    let rto = ps[0].peer_status(1).unwrap().rto;
    let mut again = Vec::new();
    ps[0].poll_transmit(1 + rto, |batch| {
        for d in batch {
            assert!(
                d.tail.is_empty(),
                "a released datagram still refers to the payload"
            );
            again.push(d.to_vec());
        }
        batch.len()
    });
    assert_eq!(again.len(), 1);
    assert_eq!(ps[0].counters().retransmits, 1);
    ps[1].on_datagram(2 + rto, &again[0]).unwrap();
    pump(&mut ps, 2 + rto);
    let d = ps[1].pop(false).unwrap();
    assert_eq!((d.am.args(), &d.payload[..]), (&[7][..], &want[..]));
    assert_eq!(ps[0].unacked(), 0);
    // Held and acked before the release: nothing is left to copy.
    let (sent, out) = {
        let mut out = Vec::new();
        // SAFETY: `want` is neither changed nor freed before the release below.
        let sent = unsafe {
            ps[0].send_now_held(
                1,
                &medium(&[8], &want),
                |d| {
                    out.push(d.to_vec());
                    true
                },
                || 3 + rto,
            )
        }
        .unwrap();
        (sent, out)
    };
    assert_eq!((sent, out.len()), (Sent::Wire(3 + rto), 3));
    for b in &out {
        ps[1].on_datagram(4 + rto, b).unwrap();
    }
    // The delayed ack comes due.
    pump(&mut ps, 4 + rto + cfg().delayed_ack);
    assert_eq!(ps[0].unacked(), 0);
    ps[0].release_held(1, &want);
    assert_eq!(ps[1].pop(false).unwrap().payload, want);
}

/// A pair whose rank 0 has one RTT sample of 10 µs towards rank 1 (so its timeout is the floor,
/// `rto_min`), with nothing in flight, at time `cfg().delayed_ack + 10`.
fn sampled_pair() -> Vec<Proto> {
    let mut ps = pair(cfg());
    ps[0].send(1, &medium(&[0], b"x")).unwrap();
    let out = drain(&mut ps[0], 0);
    ps[1].on_datagram(5, &out[0].1).unwrap();
    ps[1].send(0, &medium(&[0], b"y")).unwrap();
    let back = drain(&mut ps[1], 5);
    ps[0].on_datagram(10, &back[0].1).unwrap();
    pump(&mut ps, 10 + cfg().delayed_ack);
    assert_eq!((ps[0].unacked(), ps[1].unacked()), (0, 0));
    for p in &mut ps {
        while let Some(d) = p.pop(false) {
            p.recycle(d);
        }
    }
    let st = ps[0].peer_status(1).unwrap();
    assert_eq!((st.srtt, st.rto), (Some(10), cfg().rto_min));
    ps
}

/// The sequence number of a DATA datagram.
fn seq_of(b: &[u8]) -> u64 {
    wire::decode(b).unwrap().header.seq
}

#[test]
fn a_lost_tail_is_probed_and_the_answer_shows_the_rest() {
    let mut ps = sampled_pair();
    // A burst of eight datagrams (sequence numbers 1 to 8) whose last three are lost: no
    // datagram after them is acked, so nothing shows them missing but the timer.
    let t0 = 1_000;
    ps[0].send(1, &medium(&[1], &[7u8; 8 * 1_300])).unwrap();
    let burst = drain(&mut ps[0], t0);
    assert_eq!(
        burst.iter().map(|(_, b)| seq_of(b)).collect::<Vec<_>>(),
        [1, 2, 3, 4, 5, 6, 7, 8]
    );
    for (_, b) in &burst[..5] {
        ps[1].on_datagram(t0 + 5, b).unwrap();
    }
    let t1 = t0 + 5 + cfg().delayed_ack;
    for (_, ack) in drain(&mut ps[1], t1) {
        ps[0].on_datagram(t1 + 5, &ack).unwrap();
    }
    assert_eq!(ps[0].peer_status(1).unwrap().in_flight, 3);
    // The timer runs from that ack, the last news: nothing is due before it expires.
    let expiry = t1 + 5 + cfg().rto_min;
    assert_eq!(ps[0].next_timeout(), Some(expiry));
    assert!(drain(&mut ps[0], expiry - 1).is_empty());
    // The probe: the oldest and the newest datagram not acked, not the whole tail.
    let probe = drain(&mut ps[0], expiry);
    assert_eq!(
        probe.iter().map(|(_, b)| seq_of(b)).collect::<Vec<_>>(),
        [6, 8]
    );
    assert_eq!(ps[0].counters().timeouts, 1);
    // The answer acks 6 and shows 8 arrived after it: 7, sent before 8 and out for longer than
    // any reordering, is lost and goes at once.
    for (_, b) in &probe {
        ps[1].on_datagram(expiry + 5, b).unwrap();
    }
    let answer = drain(&mut ps[1], expiry + 5);
    let h = wire::decode(&answer[0].1).unwrap().header;
    assert_eq!((h.ack, h.sack), (7, 0b1));
    ps[0].on_datagram(expiry + 10, &answer[0].1).unwrap();
    let again = drain(&mut ps[0], expiry + 10);
    assert_eq!(
        again.iter().map(|(_, b)| seq_of(b)).collect::<Vec<_>>(),
        [7]
    );
    ps[1].on_datagram(expiry + 15, &again[0].1).unwrap();
    pump(&mut ps, expiry + 15);
    assert_eq!(ps[0].unacked(), 0);
    assert_eq!(ps[1].pop(false).unwrap().payload, [7u8; 8 * 1_300]);
    let c = ps[0].counters();
    assert_eq!((c.retransmits, c.fast_retransmits, c.timeouts), (3, 1, 1));
}

#[test]
fn a_lost_retransmission_is_found_by_the_ack_of_one_later_datagram() {
    let mut ps = sampled_pair();
    // Five datagrams, 1 to 5; the first is lost, the other four arrive and are acked
    // selectively: three acked after it make it lost, and it goes again at once.
    let t0 = 1_000;
    ps[0].send(1, &medium(&[1], &[1u8; 5 * 1_300])).unwrap();
    let burst = drain(&mut ps[0], t0);
    assert_eq!(burst.len(), 5);
    for (_, b) in &burst[1..] {
        ps[1].on_datagram(t0 + 5, b).unwrap();
    }
    for (_, ack) in drain(&mut ps[1], t0 + 5) {
        ps[0].on_datagram(t0 + 20, &ack).unwrap();
    }
    let again = drain(&mut ps[0], t0 + 20);
    assert_eq!(
        again.iter().map(|(_, b)| seq_of(b)).collect::<Vec<_>>(),
        [1]
    );
    assert_eq!(ps[0].counters().fast_retransmits, 1);
    // The retransmission is lost as well. One more message (datagram 6) goes out after it and
    // is acked: once the retransmission has been out for longer than any reordering, the ack
    // of that single later datagram shows it lost; the timer is not needed.
    let t1 = t0 + 100;
    ps[0].send(1, &medium(&[2], b"later")).unwrap();
    let later = drain(&mut ps[0], t1);
    assert_eq!(
        later.iter().map(|(_, b)| seq_of(b)).collect::<Vec<_>>(),
        [6]
    );
    ps[1].on_datagram(t1 + 5, &later[0].1).unwrap();
    for (_, ack) in drain(&mut ps[1], t1 + 5) {
        ps[0].on_datagram(t1 + 10, &ack).unwrap();
    }
    assert!(drain(&mut ps[0], t1 + 10).is_empty());
    // The reordering allowance: 5/4 of the RTT, at least a quarter of rto_min.
    let due = t0 + 20 + cfg().rto_min / 4;
    assert_eq!(ps[0].next_timeout(), Some(due));
    let again = drain(&mut ps[0], due);
    assert_eq!(
        again.iter().map(|(_, b)| seq_of(b)).collect::<Vec<_>>(),
        [1]
    );
    ps[1].on_datagram(due + 5, &again[0].1).unwrap();
    pump(&mut ps, due + 5);
    assert_eq!(ps[0].unacked(), 0);
    assert_eq!(ps[1].pop(false).unwrap().payload, [1u8; 5 * 1_300]);
    assert_eq!(ps[1].pop(false).unwrap().payload, b"later");
    let c = ps[0].counters();
    assert_eq!((c.retransmits, c.fast_retransmits, c.timeouts), (2, 2, 0));
}

#[test]
fn once_sampled_the_timer_backs_off_on_silence_only_and_ends_the_backoff_on_news() {
    let mut ps = sampled_pair();
    let rto_min = cfg().rto_min;
    // A datagram into a black hole: each expiry finds the peer silent and adds half to the
    // timeout.
    let t0 = 1_000;
    ps[0].send(1, &medium(&[1], b"lost")).unwrap();
    assert_eq!(drain(&mut ps[0], t0).len(), 1);
    let mut at = t0;
    for (k, gap) in (1u32..).zip([rto_min, rto_min * 3 / 2, rto_min * 9 / 4]) {
        assert_eq!(ps[0].next_timeout(), Some(at + gap), "expiry {k}");
        at += gap;
        assert_eq!(drain(&mut ps[0], at).len(), 1);
        assert_eq!(ps[0].peer_status(1).unwrap().backoff, k);
    }
    // The peer talks (a message of its own, whose ack fields show it lacks ours): it is
    // reachable, so the next expiry keeps the timeout as it is.
    let gap = rto_min * 27 / 8;
    ps[1].send(0, &medium(&[9], b"chatter")).unwrap();
    for (_, b) in drain(&mut ps[1], at + 100) {
        ps[0].on_datagram(at + 105, &b).unwrap();
    }
    // (The ack owed for it leaves alone; only DATA starts the timer over.)
    let ack = drain(&mut ps[0], at + 105 + cfg().delayed_ack);
    assert_eq!(wire::decode(&ack[0].1).unwrap().header.kind, Kind::Ack);
    assert_eq!(ps[0].next_timeout(), Some(at + gap));
    at += gap;
    let probe = drain(&mut ps[0], at);
    assert_eq!(
        probe.iter().map(|(_, b)| seq_of(b)).collect::<Vec<_>>(),
        [1]
    );
    let st = ps[0].peer_status(1).unwrap();
    assert_eq!((st.backoff, st.rto), (3, gap));
    // This transmission gets through. Its ack is ambiguous (Karn: no sample), but it is news
    // on a path already sampled: the backoff ends.
    ps[1].on_datagram(at + 5, &probe[0].1).unwrap();
    pump(&mut ps, at + 5);
    pump(&mut ps, at + 5 + cfg().delayed_ack);
    assert_eq!(ps[0].unacked(), 0);
    let st = ps[0].peer_status(1).unwrap();
    assert_eq!((st.srtt, st.backoff, st.rto), (Some(10), 0, rto_min));
    assert_eq!(ps[0].counters().timeouts, 4);
}

#[test]
fn an_outlier_rtt_sample_moves_the_timeout_by_the_mean_not_the_variation() {
    let mut ps = sampled_pair();
    let (rto_min, delayed_ack) = (cfg().rto_min, cfg().delayed_ack);
    // A request, answered `rtt` after it left by a reply that carries its ack.
    let round = |ps: &mut Vec<Proto>, now: u64, rtt: u64| {
        ps[0].send(1, &medium(&[1], b"q")).unwrap();
        let out = drain(&mut ps[0], now);
        ps[1].on_datagram(now + 1, &out[0].1).unwrap();
        assert_eq!(ps[1].pop(false).unwrap().payload, b"q");
        ps[1].send(0, &medium(&[2], b"r")).unwrap();
        for (_, b) in drain(&mut ps[1], now + rtt) {
            ps[0].on_datagram(now + rtt, &b).unwrap();
        }
        assert_eq!(ps[0].pop(false).unwrap().payload, b"r");
        pump(ps, now + rtt + delayed_ack);
        assert_eq!((ps[0].unacked(), ps[1].unacked()), (0, 0));
    };
    // One round trip takes 50 ms (say, the answer carrying its ack was lost, and the peer's
    // retransmission brought it): the variation swells to over 12 ms, the mean to over 6 ms.
    // The timeout follows twice the mean, not the mean plus four times the variation.
    round(&mut ps, 1_000, 50_000);
    let st = ps[0].peer_status(1).unwrap();
    let srtt = st.srtt.unwrap();
    assert!(srtt > 6_000 && st.rttvar > 12_000, "{st:?}");
    assert_eq!(st.rto, 2 * srtt + delayed_ack);
    assert!(st.rto < srtt + 4 * st.rttvar, "{st:?}");
    // Round trips as fast as before bring it back down to its floor.
    for k in 0..25 {
        round(&mut ps, 100_000 * (k + 1), 10);
    }
    let st = ps[0].peer_status(1).unwrap();
    assert_eq!((st.rto, st.backoff), (rto_min, 0), "{st:?}");
}

#[test]
fn before_any_sample_a_timeout_makes_new_data_go_out_twice_until_one_is_sampled() {
    let mut ps = pair(cfg());
    let (rto_initial, delayed_ack) = (cfg().rto_initial, cfg().delayed_ack);
    // The first datagram is lost; the initial timeout brings it again. Its ack is ambiguous
    // (Karn): no sample, and the timeout stays doubled.
    ps[0].send(1, &medium(&[0], b"a")).unwrap();
    assert_eq!(drain(&mut ps[0], 0).len(), 1);
    let again = drain(&mut ps[0], rto_initial);
    assert_eq!(again.len(), 1);
    ps[1].on_datagram(rto_initial + 5, &again[0].1).unwrap();
    pump(&mut ps, rto_initial + 5 + delayed_ack);
    assert_eq!(ps[0].unacked(), 0);
    let st = ps[0].peer_status(1).unwrap();
    assert_eq!((st.srtt, st.backoff, st.rto), (None, 1, 2 * rto_initial));
    // New data now goes out twice in a row, one transmission in two copies, by the planner
    // and by the direct path alike. Here the first copy is lost, the second arrives: its ack
    // is that of a first transmission, and gives the sample that ends the backoff.
    let t = 30_000;
    ps[0].send(1, &medium(&[1], b"b")).unwrap();
    let out = drain(&mut ps[0], t);
    assert_eq!(out.len(), 2);
    assert_eq!(out[0].1, out[1].1);
    let (sent, twins) = send_now_all(&mut ps[0], 1, &medium(&[2], b"c"), true, t);
    assert_eq!((sent, twins.len()), (Sent::Wire(t), 2));
    assert_eq!(twins[0], twins[1]);
    ps[1].on_datagram(t + 5, &out[1].1).unwrap();
    ps[1].on_datagram(t + 5, &twins[0]).unwrap();
    pump(&mut ps, t + 5 + delayed_ack);
    assert_eq!(ps[0].unacked(), 0);
    let st = ps[0].peer_status(1).unwrap();
    assert_eq!((st.srtt, st.backoff), (Some(5 + delayed_ack), 0));
    // Sampled: one copy again.
    ps[0].send(1, &medium(&[3], b"d")).unwrap();
    assert_eq!(drain(&mut ps[0], t + 1_000).len(), 1);
    let c = ps[0].counters();
    assert_eq!((c.data_sent, c.retransmits, c.timeouts), (4, 1, 1));
    assert_eq!(c.tx_datagrams, 7);
    for m in [&b"a"[..], b"b", b"c"] {
        assert_eq!(ps[1].pop(false).unwrap().payload, m);
    }
}
