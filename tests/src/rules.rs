//! Every rule of the AM API produces its error at the caller.

use std::sync::atomic::Ordering;

use amnet::{Error, Token};

use crate::state::{lock, State, H_ACK, H_CHECK, H_RULES, H_RULES_REPLY, H_UNREGISTERED};
use crate::{ck, ensure, test, Ctx, Test, Verdict};

/// The tests of this module.
pub fn tests() -> Vec<Test> {
    vec![
        test("rules_caller_errors", caller_errors),
        test("rules_handler_context", handler_context),
    ]
}

fn expect(what: &str, r: Result<(), Error>, ok: impl Fn(&Error) -> bool) -> Verdict {
    match r {
        Err(e) if ok(&e) => Ok(()),
        Err(e) => Err(format!("{what}: wrong error: {e}")),
        Ok(()) => Err(format!("{what}: succeeded but must fail")),
    }
}

fn caller_errors(c: &Ctx<'_>) -> Verdict {
    let ep = c.ep;
    let d = (c.rank() + 1) % c.size();
    let seg = ck("segment_len_of", ep.segment_len_of(d))?;
    let seg64 = seg as u64;
    expect(
        "unregistered handler",
        ep.request_short(d, H_UNREGISTERED, &[]),
        |e| matches!(e, Error::UnregisteredHandler { index: 250 }),
    )?;
    expect("reserved handler", ep.request_short(d, 5, &[]), |e| {
        matches!(e, Error::ReservedHandler { index: 5 })
    })?;
    expect("handler 0", ep.request_short(d, 0, &[]), |e| {
        matches!(e, Error::HandlerZero)
    })?;
    expect(
        "17 arguments",
        ep.request_short(d, H_CHECK, &[0; 17]),
        |e| matches!(e, Error::TooManyArgs { given: 17, max: 16 }),
    )?;
    expect("bad rank", ep.request_short(c.size(), H_CHECK, &[]), |e| {
        matches!(e, Error::BadRank { .. })
    })?;
    let big = vec![0u8; ep.max_medium() + 1];
    expect(
        "Medium over max",
        ep.request_medium(d, H_CHECK, &[], &big),
        |e| {
            matches!(
                e,
                Error::PayloadTooLarge {
                    category: "Medium",
                    ..
                }
            )
        },
    )?;
    expect(
        "Long past the segment end",
        ep.request_long(d, H_CHECK, &[], &[0; 16], seg64 - 8),
        |e| matches!(e, Error::OutOfSegment { .. }),
    )?;
    expect(
        "Long offset overflow",
        ep.request_long(d, H_CHECK, &[], &[0; 16], u64::MAX - 4),
        |e| matches!(e, Error::OutOfSegment { .. }),
    )?;
    let huge = vec![0u8; seg + 1];
    expect(
        "Long over the segment",
        ep.request_long(d, H_CHECK, &[], &huge, 0),
        |e| {
            matches!(
                e,
                Error::PayloadTooLarge {
                    category: "Long",
                    ..
                }
            )
        },
    )?;
    expect("put past the end", ep.put(d, seg64 - 3, &[0; 8]), |e| {
        matches!(e, Error::OutOfSegment { .. })
    })?;
    let mut b = [0u8; 8];
    expect("get past the end", ep.get(d, seg64 - 3, &mut b), |e| {
        matches!(e, Error::OutOfSegment { .. })
    })?;
    expect("put to a bad rank", ep.put(c.size() + 7, 0, &[0; 8]), |e| {
        matches!(e, Error::BadRank { .. })
    })?;
    expect(
        "attach twice",
        ep.attach(amnet::HandlerTable::new(), 0),
        |e| matches!(e, Error::AlreadyAttached),
    )?;
    expect("barrier_wait without notify", ep.barrier_wait(0, 1), |e| {
        matches!(e, Error::BarrierState(_))
    })?;
    expect(
        "end_nbi_region without begin",
        ep.end_nbi_region().map(|_| ()),
        |e| matches!(e, Error::BadHandle(_)),
    )?;
    let mut t = amnet::HandlerTable::new();
    expect(
        "register a reserved index",
        t.register(100, |_: &mut Token<'_>, _: &[u32], _: &[u8]| {})
            .map(|_| ()),
        |e| matches!(e, Error::ReservedHandler { index: 100 }),
    )?;
    t.register(200, |_: &mut Token<'_>, _: &[u32], _: &[u8]| {})
        .map_err(|e| e.to_string())?;
    expect(
        "register twice",
        t.register(200, |_: &mut Token<'_>, _: &[u32], _: &[u8]| {})
            .map(|_| ()),
        |e| matches!(e, Error::DuplicateHandler { index: 200 }),
    )?;
    // Errors say what was wrong.
    let msg = ep
        .request_short(d, H_UNREGISTERED, &[])
        .unwrap_err()
        .to_string();
    ensure(msg.contains("250"), || {
        format!("error does not name the handler: {msg}")
    })?;
    let msg = ep.put(d, seg64, &[1]).unwrap_err().to_string();
    ensure(msg.contains(&format!("rank {d}")), || {
        format!("error does not name the rank: {msg}")
    })
}

fn record(st: &State, what: &str, r: Result<(), Error>, ok: impl Fn(&Error) -> bool) {
    let line = match expect(what, r, ok) {
        Ok(()) => "ok".to_string(),
        Err(e) => e,
    };
    lock(&st.rules).push(line);
}

/// Body of H_RULES (a request handler).
pub fn in_request_handler(st: &State, tok: &mut Token<'_>) {
    let ep = tok.endpoint();
    let src = tok.src();
    let in_h = |e: &Error| matches!(e, Error::InHandler { .. });
    record(
        st,
        "request from a handler",
        ep.request_short(src, H_CHECK, &[]),
        in_h,
    );
    record(st, "poll from a handler", ep.poll().map(|_| ()), in_h);
    record(st, "barrier from a handler", ep.barrier(), in_h);
    record(st, "put from a handler", ep.put(src, 0, &[1]), in_h);
    record(
        st,
        "wait_until from a handler",
        ep.wait_until(|| true),
        in_h,
    );
    record(
        st,
        "reply to a reserved index",
        tok.reply_short(5, &[]),
        |e| matches!(e, Error::ReservedHandler { index: 5 }),
    );
    record(
        st,
        "reply with 17 arguments",
        tok.reply_short(H_RULES_REPLY, &[0; 17]),
        |e| matches!(e, Error::TooManyArgs { .. }),
    );
    let big = vec![0u8; ep.max_medium() + 1];
    record(
        st,
        "reply Medium over max",
        tok.reply_medium(H_RULES_REPLY, &[], &big),
        |e| matches!(e, Error::PayloadTooLarge { .. }),
    );
    let first = tok.reply_short(H_RULES_REPLY, &[]);
    lock(&st.rules).push(match first {
        Ok(()) => "ok".into(),
        Err(e) => format!("first reply failed: {e}"),
    });
    record(
        st,
        "second reply",
        tok.reply_short(H_RULES_REPLY, &[]),
        |e| matches!(e, Error::SecondReply { .. }),
    );
    st.rules_done.fetch_add(1, Ordering::SeqCst);
}

/// Body of H_RULES_REPLY (a reply handler).
pub fn in_reply_handler(st: &State, tok: &mut Token<'_>) {
    record(
        st,
        "reply from a reply handler",
        tok.reply_short(H_ACK, &[]),
        |e| matches!(e, Error::ReplyFromReply { .. }),
    );
    st.rules_done.fetch_add(1, Ordering::SeqCst);
    st.acks.fetch_add(1, Ordering::SeqCst);
}

fn handler_context(c: &Ctx<'_>) -> Verdict {
    let d = (c.rank() + 1) % c.size();
    ck("request", c.ep.request_short(d, H_RULES, &[]))?;
    ck(
        "wait",
        c.ep.wait_until(|| c.st.acks.load(Ordering::SeqCst) >= 1),
    )?;
    ck("barrier", c.ep.barrier())?;
    let rules = lock(&c.st.rules).clone();
    let bad: Vec<&String> = rules.iter().filter(|l| *l != "ok").collect();
    ensure(bad.is_empty(), || format!("{bad:?}"))?;
    ensure(rules.len() == 11, || {
        format!("{} rule checks ran, expected 11", rules.len())
    })
}
