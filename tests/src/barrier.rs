//! Barriers: anonymous, named (with their results), split-phase, mismatched, misused; and
//! that a barrier orders puts made before it.

use amnet::barrier_flags::{ANONYMOUS, MISMATCH};
use amnet::Error;

use crate::{ck, ensure, test, Ctx, Test, Verdict};

const BAR_OFF: u64 = 9 << 20;

/// The tests of this module.
pub fn tests() -> Vec<Test> {
    vec![
        test("barrier_anonymous", anonymous),
        test("barrier_named", named),
        test("barrier_split_phase_orders_puts", split_phase),
        Test {
            min_ranks: 2,
            ..test("barrier_mismatch", mismatch)
        },
        test("barrier_misuse", misuse),
    ]
}

fn anonymous(c: &Ctx<'_>) -> Verdict {
    for _ in 0..200 {
        ck("barrier", c.ep.barrier())?;
    }
    Ok(())
}

fn named(c: &Ctx<'_>) -> Verdict {
    for i in 0..100u32 {
        let id = i.wrapping_mul(7919);
        ck("notify", c.ep.barrier_notify(id, 0))?;
        ck("wait", c.ep.barrier_wait(id, 0))?;
        let r = ck("barrier_result", c.ep.barrier_result())?;
        ensure(r == Some(id), || {
            format!("barrier_result after named {id}: {r:?}")
        })?;
    }
    ck("barrier", c.ep.barrier())?;
    let r = ck("barrier_result", c.ep.barrier_result())?;
    ensure(r.is_none(), || {
        format!("barrier_result after an anonymous one: {r:?}")
    })?;
    // Anonymous and named ranks mix: the named id wins, no mismatch (with a single rank the
    // barrier is anonymous).
    let anon = c.rank() % 2 == 0;
    let f = if anon { ANONYMOUS } else { 0 };
    ck("notify mixed", c.ep.barrier_notify(77, f))?;
    ck("wait mixed", c.ep.barrier_wait(77, f))?;
    let r = ck("barrier_result", c.ep.barrier_result())?;
    let want = (c.size() > 1).then_some(77);
    ensure(r == want, || {
        format!("barrier_result after mixed: {r:?}, wanted {want:?}")
    })
}

fn split_phase(c: &Ctx<'_>) -> Verdict {
    let next = (c.rank() + 1) % c.size();
    let prev = (c.rank() + c.size() - 1) % c.size();
    for epoch in 1..=50u32 {
        ck("put", c.ep.put(next, BAR_OFF, &epoch.to_le_bytes()))?;
        ck("notify", c.ep.barrier_notify(epoch, 0))?;
        let mut tries = 0u64;
        while !ck("try", c.ep.barrier_try(epoch, 0))? {
            tries += 1;
            if tries > 1000 {
                std::thread::yield_now();
            }
        }
        let mut b = [0u8; 4];
        ck("read_local", c.ep.read_local(BAR_OFF, &mut b))?;
        let got = u32::from_le_bytes(b);
        ensure(got == epoch, || {
            format!("after barrier {epoch} the value put by rank {prev} before it reads {got}")
        })?;
        ck("barrier", c.ep.barrier())?;
    }
    Ok(())
}

fn mismatch_expected(what: &str, r: Result<(), Error>) -> Verdict {
    match r {
        Err(Error::BarrierMismatch { .. }) => Ok(()),
        Err(e) => Err(format!("{what}: wrong error {e}")),
        Ok(()) => Err(format!("{what}: no mismatch reported")),
    }
}

fn mismatch(c: &Ctx<'_>) -> Verdict {
    // Rank 0 names id 1, every other rank id 2: every rank must see the mismatch.
    let id = if c.rank() == 0 { 1 } else { 2 };
    ck("notify", c.ep.barrier_notify(id, 0))?;
    let r = c.ep.barrier_wait(id, 0);
    if let Err(Error::BarrierMismatch { detail }) = &r {
        ensure(detail.contains("rank 0"), || {
            format!("mismatch does not name rank 0: {detail}")
        })?;
    }
    mismatch_expected("different ids", r)?;
    // One rank raises the MISMATCH flag.
    let last = c.size() - 1;
    let f = ANONYMOUS | if c.rank() == last { MISMATCH } else { 0 };
    ck("notify", c.ep.barrier_notify(0, f))?;
    let r = c.ep.barrier_wait(0, f);
    if let Err(Error::BarrierMismatch { detail }) = &r {
        ensure(detail.contains(&format!("rank {last}")), || {
            format!("mismatch does not name rank {last}: {detail}")
        })?;
    }
    mismatch_expected("MISMATCH flag", r)?;
    let r = ck("barrier_result", c.ep.barrier_result())?;
    ensure(r.is_none(), || {
        format!("barrier_result after a mismatch: {r:?}")
    })?;
    // Afterwards barriers work again.
    ck("barrier after mismatch", c.ep.barrier())?;
    ck("named after mismatch", c.ep.barrier_notify(5, 0))?;
    ck("named after mismatch", c.ep.barrier_wait(5, 0))
}

fn misuse(c: &Ctx<'_>) -> Verdict {
    match c.ep.barrier_wait(0, ANONYMOUS) {
        Err(Error::BarrierState(_)) => {}
        other => return Err(format!("wait without notify: {other:?}")),
    }
    ck("notify", c.ep.barrier_notify(3, 0))?;
    match c.ep.barrier_result() {
        Err(Error::BarrierState(_)) => {}
        other => return Err(format!("barrier_result between notify and wait: {other:?}")),
    }
    match c.ep.barrier_notify(3, 0) {
        Err(Error::BarrierState(_)) => {}
        other => return Err(format!("notify twice: {other:?}")),
    }
    // Rank 0 waits with an id other than the one it notified: only rank 0 sees an error.
    let wid = if c.rank() == 0 { 4 } else { 3 };
    let r = c.ep.barrier_wait(wid, 0);
    if c.rank() == 0 {
        mismatch_expected("wait id differs from notify id", r)?;
    } else {
        ck("wait", r)?;
    }
    ck("barrier", c.ep.barrier())
}
