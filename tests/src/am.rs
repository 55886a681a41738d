//! Active messages: every category with 0..=16 arguments and payloads of 0, 1, 7, 8, 4095
//! bytes and the maximum, replies of every category, request/reply chains, several threads.

use std::sync::atomic::Ordering;
use std::time::Duration;

use amnet::MAX_ARGS;

use crate::state::{lock, Expect, H_CHAIN, H_CHECK, H_COUNT, H_ECHO};
use crate::{ck, ensure, pattern, test, Ctx, Test, Verdict};

/// Where Long payloads land: a slot per sending rank.
pub const LONG_BASE: u64 = 10 << 20;
/// Bytes per sending rank in the Long area.
pub const LONG_SLOT: u64 = 72 << 10;
/// Largest Long used by the per-rank slots (the maximum is tested separately).
pub const LONG_BIG: usize = 65536;

/// The tests of this module.
pub fn tests() -> Vec<Test> {
    vec![
        test("am_short_args", short_args),
        test("am_medium_payloads", medium_payloads),
        test("am_long_payloads", long_payloads),
        test("am_reply_categories", reply_categories),
        Test {
            min_ranks: 2,
            ..test("am_long_max", long_max)
        },
        test("am_long_burst", long_burst),
        test("am_long_window", long_window),
        test("am_request_reply_chain", chain),
        test("stats_counters", stats_counters),
        Test {
            timeout: Duration::from_secs(120),
            ..test("am_concurrent_threads", concurrent_threads)
        },
        test("am_register_after_attach", register_after_attach),
        test("am_negotiated_payload", negotiated_payload),
        test("am_local_completion", local_completion),
        Test {
            min_ranks: 2,
            ..test("am_prepared_holds_its_place", prepared_holds_its_place)
        },
        test("am_prepared_reply", prepared_reply),
        test("am_immediate", immediate),
    ]
}

/// Prepared (negotiated-payload) Medium and Long requests to every rank, built in the
/// library's buffer and committed shorter than prepared; a cancelled one sends nothing; the
/// errors.
fn negotiated_payload(c: &Ctx<'_>) -> Verdict {
    let before = c.st.acks.load(Ordering::SeqCst);
    let me = c.rank();
    let max = c.ep.max_medium();
    let mut sent = 0u64;
    for d in 0..c.size() {
        let seed = me.wrapping_mul(1000).wrapping_add(d);
        let args = pattern::args(seed, 3);
        let mut m = ck(
            "prepare_request_medium",
            c.ep.prepare_request_medium(d, H_CHECK, max),
        )?;
        ensure(m.len() == max, || {
            format!("a Medium buffer of {} bytes, {max} prepared", m.len())
        })?;
        m[..1000].copy_from_slice(&pattern::bytes(seed, 1000));
        ck("commit medium", m.commit(&args, 1000))?;
        let mut l = ck(
            "prepare_request_long",
            c.ep.prepare_request_long(d, H_CHECK, 5000, long_slot(me)),
        )?;
        l[..4096].copy_from_slice(&pattern::bytes(seed, 4096));
        ck("commit long", l.commit(&args, 4096))?;
        sent += 2;
        // Cancelled: nothing travels.
        let mut x = ck("prepare", c.ep.prepare_request_medium(d, H_CHECK, 8))?;
        x[0] = 1;
        x.cancel();
        drop(ck("prepare", c.ep.prepare_request_medium(d, H_CHECK, 8))?);
        // Longer than prepared: refused, nothing sent.
        let y = ck("prepare", c.ep.prepare_request_medium(d, H_CHECK, 8))?;
        let r = y.commit(&args, 9);
        ensure(matches!(r, Err(amnet::Error::Usage { .. })), || {
            format!("commit of 9 bytes into 8 prepared: {r:?}")
        })?;
    }
    let r = c.ep.prepare_request_medium(0, H_CHECK, max + 1).map(|_| ());
    ensure(
        matches!(r, Err(amnet::Error::PayloadTooLarge { .. })),
        || format!("a Medium prepared beyond max_medium: {r:?}"),
    )?;
    let seg = ck("segment_len_of", c.ep.segment_len_of(0))? as u64;
    let r =
        c.ep.prepare_request_long(0, H_CHECK, 16, seg - 8)
            .map(|_| ());
    ensure(matches!(r, Err(amnet::Error::OutOfSegment { .. })), || {
        format!("a Long prepared past the segment: {r:?}")
    })?;
    ck(
        "wait for acks",
        c.ep.wait_until(|| c.st.acks.load(Ordering::SeqCst) >= before + sent),
    )?;
    finish(c, 2)
}

/// Medium and Long requests with local completion (`request_medium_nb`, `request_long_nb`)
/// to every rank, large enough for udp to send them from the caller's buffers: once the
/// handles completed (first round) or were dropped (second round), the buffers are
/// overwritten at once, and the targets' handlers must still see the original bytes (under
/// injected loss, a datagram retransmitted from a reused buffer would carry the new ones).
fn local_completion(c: &Ctx<'_>) -> Verdict {
    let me = c.rank();
    let medium = c.ep.max_medium().min(20_000);
    let mut sent = 0u64;
    for round in 0..2u32 {
        let before = c.st.acks.load(Ordering::SeqCst);
        let mut bufs: Vec<(Vec<u32>, Vec<u8>)> = Vec::new();
        for d in 0..c.size() {
            let seed = me.wrapping_mul(1000).wrapping_add(d) + 100_000 * (round + 1);
            bufs.push((pattern::args(seed, 2), pattern::bytes(seed, 40_000)));
            let seed = seed + 50_000;
            bufs.push((pattern::args(seed, 3), pattern::bytes(seed, medium)));
        }
        let mut hs = Vec::new();
        for (i, (args, bytes)) in bufs.iter().enumerate() {
            let d = u32::try_from(i / 2).map_err(|e| e.to_string())?;
            // `bytes` lives in `bufs` and is left alone until the handle completed (the wait
            // below) or was dropped (second round).
            let h = if i % 2 == 0 {
                // SAFETY: as above.
                unsafe { c.ep.request_long_nb(d, H_CHECK, args, bytes, long_slot(me)) }
            } else {
                // SAFETY: as above.
                unsafe { c.ep.request_medium_nb(d, H_CHECK, args, bytes) }
            };
            let h = ck("request_nb", h)?;
            if round == 0 {
                hs.push(h);
            } else {
                drop(h);
            }
            sent += 1;
        }
        ck("wait_sync_all", c.ep.wait_sync_all(&mut hs))?;
        for (_, bytes) in &mut bufs {
            bytes.fill(0xee);
        }
        ck(
            "wait for acks",
            c.ep.wait_until(|| {
                c.st.acks.load(Ordering::SeqCst) >= before + 2 * u64::from(c.size())
            }),
        )?;
    }
    ensure(sent == 4 * u64::from(c.size()), || {
        format!("{sent} requests sent")
    })?;
    finish(c, 4)
}

/// A client handler index registered after attach by the suite.
const H_LATE: u8 = 201;
/// Where each rank leaves the count of immediate sends its predecessor made to it.
const IMM_COUNT_OFF: u64 = (9 << 20) + (384 << 10);

fn register_after_attach(c: &Ctx<'_>) -> Verdict {
    let st = c.st.clone();
    match c.ep.register_handler(H_LATE, move |tok, args, _p| {
        if args == [tok.src(), 77] {
            st.hits.fetch_add(1, Ordering::SeqCst);
        } else {
            st.error(format!("H_LATE from {} with {args:?}", tok.src()));
        }
    }) {
        // A suite run twice on one endpoint registered it the first time.
        Ok(()) | Err(amnet::Error::DuplicateHandler { .. }) => {}
        Err(e) => return Err(format!("register_handler after attach: {e}")),
    }
    let dup = c.ep.register_handler(H_LATE, |_, _, _| {});
    ensure(
        matches!(dup, Err(amnet::Error::DuplicateHandler { index: H_LATE })),
        || format!("registering H_LATE twice: {dup:?}"),
    )?;
    let again = c.ep.register_handler(H_CHECK, |_, _, _| {});
    ensure(
        matches!(again, Err(amnet::Error::DuplicateHandler { .. })),
        || format!("replacing a handler registered at attach: {again:?}"),
    )?;
    let lib = c.ep.register_handler(5, |_, _, _| {});
    ensure(
        matches!(lib, Err(amnet::Error::ReservedHandler { index: 5 })),
        || format!("registering a library index: {lib:?}"),
    )?;
    let zero = c.ep.register_handler(0, |_, _, _| {});
    ensure(matches!(zero, Err(amnet::Error::HandlerZero)), || {
        format!("registering index 0: {zero:?}")
    })?;
    // Every rank registered it before the barrier; then every rank uses it.
    ck("barrier", c.ep.barrier())?;
    let next = (c.rank() + 1) % c.size();
    ck(
        "request_short",
        c.ep.request_short(next, H_LATE, &[c.rank(), 77]),
    )?;
    ck(
        "wait for H_LATE",
        c.ep.wait_until(|| c.st.hits.load(Ordering::SeqCst) >= 1),
    )?;
    ck("barrier", c.ep.barrier())?;
    c.st.handler_verdict()?;
    let hits = c.st.hits.load(Ordering::SeqCst);
    ensure(hits == 1, || format!("H_LATE ran {hits} times, expected 1"))
}

/// Immediate sends to the next rank while no rank polls, until the conduit has no room:
/// every one that returned Ok arrives exactly once; a full conduit answers `WouldBlock`
/// (smp's ring, udp's send window, ofi's credits and ibv's receive buffers and send queue are
/// bounded) and sends nothing.
fn immediate(c: &Ctx<'_>) -> Verdict {
    const CAP: u64 = 200_000;
    let next = (c.rank() + 1) % c.size();
    let mut sent = 0u64;
    let mut blocked = false;
    ck("barrier", c.ep.barrier())?;
    // The verdict, returned after the count's exchange and its barriers (a failure must not
    // leave the ranks at different barriers).
    let mut verdict: Verdict = Ok(());
    while sent < CAP {
        match c.ep.try_request_short(next, H_COUNT, &[1, 2]) {
            Ok(()) => sent += 1,
            Err(amnet::Error::WouldBlock { op, dest }) => {
                if op != "try_request_short" || dest != next {
                    verdict = Err(format!("WouldBlock names {op} to rank {dest}"));
                }
                blocked = true;
                break;
            }
            Err(e) => {
                verdict = Err(format!("try_request_short: {e}"));
                break;
            }
        }
    }
    let p = [0u8; 1];
    for _ in 0..3 {
        match c.ep.try_request_medium(next, H_COUNT, &[], &p) {
            Ok(()) => sent += 1,
            Err(amnet::Error::WouldBlock { .. }) => blocked = true,
            Err(e) => verdict = verdict.and(Err(format!("try_request_medium: {e}"))),
        }
        match c
            .ep
            .try_request_long(next, H_COUNT, &[], &p, IMM_COUNT_OFF + 64)
        {
            Ok(()) => sent += 1,
            Err(amnet::Error::WouldBlock { .. }) => blocked = true,
            Err(e) => verdict = verdict.and(Err(format!("try_request_long: {e}"))),
        }
    }
    if matches!(c.ep.conduit_name(), "smp" | "udp" | "ofi" | "ibv") && c.size() > 1 && !blocked {
        verdict = verdict.and(Err(format!(
            "{CAP} immediate sends and none found the conduit full"
        )));
    }
    // ofi's credits (AMNET_OFI_AM_CREDITS, at most 255) bound the requests on their way to
    // a rank that does not poll (through the network: the bypass's rings hold more). (ibv's
    // credits bound them as well, but its messages are fast enough that the next rank, still
    // polling on its way out of the barrier above, returns credits for many of them.)
    if c.ep.conduit_name() == "ofi" && c.size() > 1 && !crate::rings_to(c, next) && sent > 255 + 6 {
        verdict = verdict.and(Err(format!(
            "{sent} immediate requests left towards a rank that does not poll"
        )));
    }
    arrived_as_sent(c, next, sent, "immediate sends")?;
    verdict
}

/// Tells `next` how many `H_COUNT` requests this rank sent it (`sent`), and checks that
/// exactly as many as its predecessor sent here arrived.
fn arrived_as_sent(c: &Ctx<'_>, next: u32, sent: u64, what: &str) -> Verdict {
    ck(
        "put count",
        c.ep.put(next, IMM_COUNT_OFF, &sent.to_le_bytes()),
    )?;
    ck("barrier", c.ep.barrier())?;
    let mut b = [0u8; 8];
    ck("read_local", c.ep.read_local(IMM_COUNT_OFF, &mut b))?;
    let want = u64::from_le_bytes(b);
    ck(
        &format!("wait for the {what}"),
        c.ep.wait_until(|| c.st.hits.load(Ordering::SeqCst) >= want),
    )?;
    ck("barrier", c.ep.barrier())?;
    let hits = c.st.hits.load(Ordering::SeqCst);
    ensure(hits == want, || {
        format!("{hits} {what} arrived, {want} were sent")
    })
}

/// A prepared Medium holds its place in the conduit's order until it is committed: on smp,
/// where it is built in a slot of the ring to its destination, nothing sent after it on that
/// ring is delivered before it, so once the ring is full behind it a send from the same
/// thread fails with `Usage` instead of waiting forever; elsewhere the send goes through. On
/// every conduit a wait by a thread that holds a prepared message fails with `Usage`. Every
/// message arrives once the prepared one is committed.
fn prepared_holds_its_place(c: &Ctx<'_>) -> Verdict {
    const CAP: u64 = 100_000;
    let next = (c.rank() + 1) % c.size();
    ck("barrier", c.ep.barrier())?;
    let mut m = ck(
        "prepare_request_medium",
        c.ep.prepare_request_medium(next, H_COUNT, 8),
    )?;
    m[..8].copy_from_slice(b"prepared");
    let mut sent = 0u64;
    // The verdict, returned after the commit and the closing barriers (a failure must not
    // leave the ranks at different barriers).
    let mut verdict: Verdict = Ok(());
    if crate::rings_to(c, next) {
        // Messages queued before the slot still drain; those after it fill the ring.
        let mut refused = false;
        while sent < 4096 {
            match c.ep.request_short(next, H_COUNT, &[1, 2]) {
                Ok(()) => sent += 1,
                Err(amnet::Error::Usage { detail, .. }) if detail.contains("prepared") => {
                    refused = true;
                    break;
                }
                Err(e) => {
                    verdict = Err(format!("request_short behind a prepared message: {e}"));
                    break;
                }
            }
        }
        if !refused && verdict.is_ok() {
            verdict = Err(format!(
                "{sent} blocking sends behind this thread's own prepared message, none refused"
            ));
        }
    } else {
        while sent < CAP {
            match c.ep.try_request_short(next, H_COUNT, &[1, 2]) {
                Ok(()) => sent += 1,
                Err(amnet::Error::WouldBlock { .. }) => break,
                Err(e) => return Err(format!("try_request_short: {e}")),
            }
        }
        ck("request_short", c.ep.request_short(next, H_COUNT, &[1, 2]))?;
        sent += 1;
    }
    let w = c.ep.wait_until(|| false);
    let refused = matches!(&w, Err(amnet::Error::Usage { detail, .. }) if detail.contains("prepared message"));
    if !refused && verdict.is_ok() {
        verdict = Err(format!("a wait while holding a prepared message: {w:?}"));
    }
    ck("commit", m.commit(&[3], 8))?;
    sent += 1;
    arrived_as_sent(c, next, sent, "messages")?;
    verdict
}

/// Request `[seed, len, mode]` (registered after attach): mode 0 replies `H_PREP_REP` with
/// `len` pattern bytes built in a prepared reply; mode 1 prepares one, cancels it, and then
/// replies with a Short `[seed, 0]` (a cancelled reply is no reply); both check that a second
/// reply is refused.
const H_PREP_REQ: u8 = 204;
/// Request or reply `[seed, len]`: checks the payload against the pattern and its length,
/// and counts in `hits`.
const H_PREP_REP: u8 = 205;

/// Prepared (negotiated-payload) Medium replies from every rank, of sizes up to
/// `max_medium`, committed shorter than prepared; a cancelled one leaves the reply to make.
/// Prepared requests of the same sizes to the same checking handler.
// Sizes up to max_medium and small indices: the casts to u32 do not truncate.
#[allow(clippy::cast_possible_truncation)]
fn prepared_reply(c: &Ctx<'_>) -> Verdict {
    let (st, st2) = (c.st.clone(), c.st.clone());
    let registered =
        c.ep.register_handler(H_PREP_REQ, move |tok, args, _p| {
            let &[seed, len, mode] = args else {
                return st.error(format!("H_PREP_REQ with {args:?}"));
            };
            let len = len as usize;
            let max = tok.endpoint().max_medium().min(len + 64);
            if mode == 1 {
                match tok.prepare_reply_medium(H_PREP_REP, max) {
                    Ok(p) => p.cancel(),
                    Err(e) => return st.error(format!("prepare_reply_medium: {e}")),
                }
                if let Err(e) = tok.reply_short(H_PREP_REP, &[seed, 0]) {
                    st.error(format!("reply after a cancelled prepared reply: {e}"));
                }
            } else {
                let mut p = match tok.prepare_reply_medium(H_PREP_REP, max) {
                    Ok(p) => p,
                    Err(e) => return st.error(format!("prepare_reply_medium: {e}")),
                };
                if p.len() != max {
                    st.error(format!(
                        "a prepared reply of {} bytes, {max} asked",
                        p.len()
                    ));
                }
                p[..len].copy_from_slice(&pattern::bytes(seed, len));
                if let Err(e) = p.commit(&[seed, len as u32], len) {
                    st.error(format!("commit of a prepared reply: {e}"));
                }
            }
            let again = tok.reply_short(H_PREP_REP, &[seed]);
            if !matches!(again, Err(amnet::Error::SecondReply { .. })) {
                st.error(format!("a second reply: {again:?}"));
            }
        })
        .and_then(|()| {
            c.ep.register_handler(H_PREP_REP, move |_tok, args, payload| {
                let &[seed, len] = args else {
                    return st2.error(format!("H_PREP_REP with {args:?}"));
                };
                if payload.len() != len as usize || pattern::first_bad(seed, payload).is_some() {
                    st2.error(format!(
                        "a prepared message of {} bytes ({len} sent) differs",
                        payload.len()
                    ));
                } else {
                    st2.hits.fetch_add(1, Ordering::SeqCst);
                }
            })
        });
    match registered {
        Ok(()) | Err(amnet::Error::DuplicateHandler { .. }) => {}
        Err(e) => return Err(format!("register_handler: {e}")),
    }
    ck("barrier", c.ep.barrier())?;
    let lens = [0usize, 100, 168, 169, 4000, c.ep.max_medium()];
    for d in 0..c.size() {
        for (i, &len) in lens.iter().enumerate() {
            let seed = c.rank() * 1000 + d * 10 + i as u32;
            ck(
                "request",
                c.ep.request_short(d, H_PREP_REQ, &[seed, len as u32, 0]),
            )?;
        }
        ck("request", c.ep.request_short(d, H_PREP_REQ, &[7, 0, 1]))?;
        // Prepared requests, checked by the same handler (length included).
        for (i, &len) in lens.iter().enumerate() {
            let seed = c.rank() * 1000 + d * 10 + i as u32 + 500;
            let max = c.ep.max_medium().min(len + 64);
            let mut m = ck(
                "prepare_request_medium",
                c.ep.prepare_request_medium(d, H_PREP_REP, max),
            )?;
            m[..len].copy_from_slice(&pattern::bytes(seed, len));
            ck("commit", m.commit(&[seed, len as u32], len))?;
        }
    }
    // Here: a reply to each request this rank made, and every rank's prepared requests.
    let n = lens.len() as u64;
    let want = u64::from(c.size()) * ((n + 1) + n);
    ck(
        "wait for the prepared messages",
        c.ep.wait_until(|| {
            c.st.hits.load(Ordering::SeqCst) >= want || !lock(&c.st.errors).is_empty()
        }),
    )?;
    ck("barrier", c.ep.barrier())?;
    c.st.handler_verdict()?;
    let got = c.st.hits.load(Ordering::SeqCst);
    ensure(got == want, || {
        format!("{got} prepared messages arrived, {want} expected")
    })
}

/// Offset of `src`'s slot in the Long area, at an unaligned start.
pub fn long_slot(src: u32) -> u64 {
    LONG_BASE + u64::from(src) * LONG_SLOT + 3
}

fn payload_sizes(c: &Ctx<'_>) -> Vec<usize> {
    vec![0, 1, 7, 8, 4095, c.ep.max_medium()]
}

/// Send one request of `cat` to every rank, wait for all acknowledgements.
fn round(c: &Ctx<'_>, cat: u32, nargs: usize, plen: usize) -> Verdict {
    let seed = crate::next_seed();
    let args = pattern::args(seed, nargs);
    let p = pattern::bytes(if nargs == 0 { 0 } else { seed }, plen);
    let before = c.st.acks.load(Ordering::SeqCst);
    for d in 0..c.size() {
        let what = format!("category {cat} to rank {d}, {nargs} args, {plen} B");
        match cat {
            0 => ck(&what, c.ep.request_short(d, H_CHECK, &args))?,
            1 => ck(&what, c.ep.request_medium(d, H_CHECK, &args, &p))?,
            _ => ck(
                &what,
                c.ep.request_long(d, H_CHECK, &args, &p, long_slot(c.rank())),
            )?,
        }
    }
    let want = before + u64::from(c.size());
    ck(
        "wait for acks",
        c.ep.wait_until(|| c.st.acks.load(Ordering::SeqCst) >= want),
    )
}

fn finish(c: &Ctx<'_>, rounds: u64) -> Verdict {
    ck("barrier", c.ep.barrier())?;
    c.st.handler_verdict()?;
    let hits = c.st.hits.load(Ordering::SeqCst);
    let want = rounds * u64::from(c.size());
    ensure(hits == want, || {
        format!("{hits} requests arrived, expected {want}")
    })
}

fn short_args(c: &Ctx<'_>) -> Verdict {
    for n in 0..=MAX_ARGS {
        round(c, 0, n, 0)?;
    }
    finish(c, MAX_ARGS as u64 + 1)
}

fn medium_payloads(c: &Ctx<'_>) -> Verdict {
    let mut rounds = 0;
    for n in 0..=MAX_ARGS {
        round(c, 1, n, 8)?;
        rounds += 1;
    }
    for plen in payload_sizes(c) {
        for n in [0, 1, MAX_ARGS] {
            round(c, 1, n, plen)?;
            rounds += 1;
        }
    }
    finish(c, rounds)
}

fn long_payloads(c: &Ctx<'_>) -> Verdict {
    let mut rounds = 0;
    for n in 0..=MAX_ARGS {
        round(c, 2, n, 8)?;
        rounds += 1;
    }
    for plen in [0, 1, 7, 8, 4095, LONG_BIG] {
        for n in [0, 1, MAX_ARGS] {
            round(c, 2, n, plen)?;
            rounds += 1;
        }
    }
    finish(c, rounds)
}

fn reply_categories(c: &Ctx<'_>) -> Verdict {
    let mut combos = Vec::new();
    for n in 0..=MAX_ARGS {
        combos.push((0u32, n, 0usize));
        combos.push((1, n, 8));
        combos.push((2, n, 8));
    }
    for plen in payload_sizes(c) {
        combos.push((1, 1, plen));
        combos.push((2, 1, plen.min(LONG_BIG)));
    }
    for (cat, nargs, plen) in combos {
        let before = c.st.echoes.load(Ordering::SeqCst);
        for d in 0..c.size() {
            let seed = crate::next_seed();
            lock(&c.st.expect)[d as usize] = Some(Expect {
                category: cat,
                nargs,
                plen,
                seed,
            });
            // The reply's Long payload lands in this rank's segment, in the responder's slot.
            let off = u32::try_from(long_slot(d)).map_err(|_| "offset".to_string())?;
            #[allow(clippy::cast_possible_truncation)]
            let req = [cat, nargs as u32, plen as u32, seed, off];
            ck("echo request", c.ep.request_short(d, H_ECHO, &req))?;
        }
        let want = before + u64::from(c.size());
        ck(
            "wait for echoes",
            c.ep.wait_until(|| c.st.echoes.load(Ordering::SeqCst) >= want),
        )?;
    }
    ck("barrier", c.ep.barrier())?;
    c.st.handler_verdict()
}

fn long_max(c: &Ctx<'_>) -> Verdict {
    if c.rank() == 0 {
        let len = ck("segment_len_of", c.ep.segment_len_of(1))?;
        ensure(ck("max_long", c.ep.max_long(1))? == len, || {
            "max_long != segment length".into()
        })?;
        let seed = crate::next_seed();
        let p = pattern::bytes(seed, len);
        ck(
            "request_long of the whole segment",
            c.ep.request_long(1, H_CHECK, &[seed], &p, 0),
        )?;
        ck(
            "ack",
            c.ep.wait_until(|| c.st.acks.load(Ordering::SeqCst) >= 1),
        )?;
    }
    ck("barrier", c.ep.barrier())?;
    c.st.handler_verdict()?;
    let hits = c.st.hits.load(Ordering::SeqCst);
    let want = u64::from(c.rank() == 1);
    ensure(hits == want, || {
        format!("{hits} requests arrived, expected {want}")
    })
}

/// Longs larger than an eager message (64 KiB; ofi writes them into the target's segment),
/// sent back to back to the next rank at distinct offsets: each arrives whole and runs its
/// handler once.
fn long_burst(c: &Ctx<'_>) -> Verdict {
    const N: u64 = 16;
    const LEN: usize = 256 << 10;
    const OFF: u64 = 12 << 20;
    let next = (c.rank() + 1) % c.size();
    let room = ck("segment_len_of", c.ep.segment_len_of(next))?;
    ensure(room as u64 >= OFF + N * LEN as u64, || {
        format!("the next rank's segment has {room} bytes")
    })?;
    for i in 0..N {
        let seed = crate::next_seed();
        let p = pattern::bytes(seed, LEN);
        ck(
            "request_long",
            c.ep.request_long(next, H_CHECK, &[seed], &p, OFF + i * LEN as u64),
        )?;
    }
    ck(
        "acks",
        c.ep.wait_until(|| c.st.acks.load(Ordering::SeqCst) >= N),
    )?;
    ck("barrier", c.ep.barrier())?;
    c.st.handler_verdict()?;
    let hits = c.st.hits.load(Ordering::SeqCst);
    ensure(hits == N, || format!("{hits} Longs arrived, expected {N}"))
}

/// A window of 96 Longs of 128 KiB to the next rank whose handler does not reply, sent
/// back to back by every rank at once (each rank's sends wait on credits or room while its
/// predecessor's Longs arrive): every one arrives once, and the put and barriers after them
/// complete.
fn long_window(c: &Ctx<'_>) -> Verdict {
    const N: u64 = 96;
    const LEN: usize = 128 << 10;
    const SLOTS: u64 = 16;
    const OFF: u64 = 12 << 20;
    let next = (c.rank() + 1) % c.size();
    let room = ck("segment_len_of", c.ep.segment_len_of(next))?;
    ensure(room as u64 >= OFF + SLOTS * LEN as u64, || {
        format!("the next rank's segment has {room} bytes")
    })?;
    for i in 0..N {
        let p = pattern::bytes(crate::next_seed(), LEN);
        let off = OFF + (i % SLOTS) * LEN as u64;
        ck(
            "request_long",
            c.ep.request_long(next, H_COUNT, &[], &p, off),
        )?;
    }
    arrived_as_sent(c, next, N, "window Longs")
}

fn chain(c: &Ctx<'_>) -> Verdict {
    let n = c.size();
    let total = 4 * n;
    let mut sent = 0u64;
    if c.rank() == 0 {
        ck("start chain", c.ep.request_short(1 % n, H_CHAIN, &[1]))?;
        sent += 1;
    }
    let mut h = c.rank() + if c.rank() == 0 { n } else { 0 };
    while h <= total {
        let want = h;
        ck(
            "wait for hop",
            c.ep.wait_until(|| *lock(&c.st.chain_hop) == Some(want)),
        )?;
        if h < total {
            ck(
                "forward hop",
                c.ep.request_short((c.rank() + 1) % n, H_CHAIN, &[h + 1]),
            )?;
            sent += 1;
        }
        h += n;
    }
    ck(
        "acks",
        c.ep.wait_until(|| c.st.acks.load(Ordering::SeqCst) >= sent),
    )?;
    ck("barrier", c.ep.barrier())?;
    c.st.handler_verdict()
}

/// The counters move by what a test did: `N` Short requests to every rank (itself included)
/// and one Medium of 100 bytes to the next rank show in `stats()` here and at the receivers,
/// and the conduit's own counters are well-formed (on udp: the protocol's, with datagrams
/// both ways).
fn stats_counters(c: &Ctx<'_>) -> Verdict {
    const N: u64 = 50;
    let n = c.size();
    let before = c.ep.stats();
    ck("opening barrier", c.ep.barrier())?;
    for i in 0..N {
        for d in 0..n {
            #[allow(clippy::cast_possible_truncation)] // i < N
            ck("count request", c.ep.request_short(d, H_COUNT, &[i as u32]))?;
        }
    }
    ck(
        "medium",
        c.ep.request_medium((c.rank() + 1) % n, H_COUNT, &[], &[7u8; 100]),
    )?;
    let want_hits = N * u64::from(n) + 1;
    ck(
        "counted",
        c.ep.wait_until(|| c.st.hits.load(Ordering::SeqCst) >= want_hits),
    )?;
    let after = c.ep.stats();
    let d = |a: u64, b: u64| a.wrapping_sub(b);
    let sent_short = d(after.requests_sent.short, before.requests_sent.short);
    let recv_short = d(
        after.requests_received.short,
        before.requests_received.short,
    );
    // Barriers travel as Short requests too: at least what the test sent, never less.
    ensure(sent_short >= N * u64::from(n), || {
        format!(
            "requests_sent.short moved by {sent_short}, expected at least {}",
            N * u64::from(n)
        )
    })?;
    ensure(recv_short >= N * u64::from(n), || {
        format!(
            "requests_received.short moved by {recv_short}, expected at least {}",
            N * u64::from(n)
        )
    })?;
    ensure(
        d(after.requests_sent.medium, before.requests_sent.medium) == 1
            && d(
                after.requests_sent.medium_bytes,
                before.requests_sent.medium_bytes,
            ) == 100,
        || {
            format!(
                "one 100-byte Medium sent, but the counters moved by {} messages and {} bytes",
                d(after.requests_sent.medium, before.requests_sent.medium),
                d(
                    after.requests_sent.medium_bytes,
                    before.requests_sent.medium_bytes
                )
            )
        },
    )?;
    ensure(
        d(after.handler_calls, before.handler_calls) > N * u64::from(n),
        || "handler_calls moved by less than the handlers this test ran".to_string(),
    )?;
    ensure(after.polls > before.polls, || {
        "polls did not move across a wait".to_string()
    })?;
    let cs = c.ep.conduit_stats();
    let mut names: Vec<&str> = cs.iter().map(|(k, _)| *k).collect();
    names.sort_unstable();
    names.dedup();
    ensure(names.len() == cs.len(), || {
        format!("conduit_stats repeats a name: {cs:?}")
    })?;
    let get = |k: &str| cs.iter().find(|(n, _)| *n == k).map(|&(_, v)| v);
    match c.ep.conduit_name() {
        "udp" => {
            for k in [
                "retransmits",
                "timeouts",
                "duplicates_dropped",
                "decode_errors",
            ] {
                ensure(get(k).is_some(), || {
                    format!("udp conduit_stats lacks {k}: {cs:?}")
                })?;
            }
            // With the host-local bypass, a job on one host sends no datagram at all.
            let one_host = ck("host_map", c.ep.host_map())?.hosts() == 1;
            if crate::bypass_on(c) && one_host {
                ensure(
                    get("datagrams_sent") == Some(0) && get("datagrams_received") == Some(0),
                    || format!("a job on one host sent datagrams past the bypass: {cs:?}"),
                )?;
            } else if n > 1 {
                ensure(
                    get("datagrams_sent").unwrap_or(0) > 0
                        && get("datagrams_received").unwrap_or(0) > 0,
                    || format!("udp sent and received datagrams, but conduit_stats says {cs:?}"),
                )?;
            }
        }
        "smp" => ensure(cs.is_empty(), || {
            format!("smp keeps no counters of its own: {cs:?}")
        })?,
        _ => {}
    }
    ck("closing barrier", c.ep.barrier())?;
    c.st.handler_verdict()
}

fn concurrent_threads(c: &Ctx<'_>) -> Verdict {
    const THREADS: u64 = 3;
    const PER_DEST: u64 = 300;
    let n = u64::from(c.size());
    let total = THREADS * PER_DEST * n;
    let r: Result<Vec<()>, String> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..THREADS)
            .map(|t| {
                let ep = c.ep.clone();
                let st = c.st.clone();
                s.spawn(move || -> Verdict {
                    for i in 0..PER_DEST {
                        for d in 0..ep.size() {
                            #[allow(clippy::cast_possible_truncation)]
                            let seed = ((t << 24) | i) as u32;
                            let a = pattern::args(seed, 3);
                            let p = pattern::bytes(seed, 64);
                            if i % 2 == 0 {
                                ck("short", ep.request_short(d, H_CHECK, &a))?;
                            } else {
                                ck("medium", ep.request_medium(d, H_CHECK, &a, &p))?;
                            }
                        }
                    }
                    ck(
                        "acks",
                        ep.wait_until(|| st.acks.load(Ordering::SeqCst) >= total),
                    )
                })
            })
            .collect();
        hs.into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err("sender thread panicked".into()))
            })
            .collect()
    });
    r?;
    finish(c, THREADS * PER_DEST)
}
