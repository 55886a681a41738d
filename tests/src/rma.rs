//! put/get of every size from 1 byte to 4 MiB at unaligned offsets: blocking, explicit
//! handles and implicit handles with access regions.

use amnet::Handle;

use crate::{ck, ensure, pattern, test, Ctx, Test, Verdict};

/// Unaligned offset where puts land.
pub const PUT_OFF: u64 = 3;
/// Unaligned offset in the local segment where gets land.
pub const GET_OFF: u64 = (5 << 20) + 5;

/// The tests of this module.
pub fn tests() -> Vec<Test> {
    vec![
        test("rma_blocking", blocking),
        test("rma_explicit_handles", explicit),
        test("rma_implicit_handles", implicit),
        test("rma_own_segment", own_segment),
        Test {
            min_ranks: 2,
            timeout: std::time::Duration::from_secs(20),
            ..test("rma_try_sync_polls", try_sync_polls)
        },
    ]
}

/// Every size tested: small ones, powers of two and their neighbours, up to 4 MiB.
pub fn sizes() -> Vec<usize> {
    let mut v: Vec<usize> = (1..=9).collect();
    let mut p = 16;
    while p <= 4 << 20 {
        for s in [p - 1, p, p + 1] {
            if s <= 4 << 20 && !v.contains(&s) {
                v.push(s);
            }
        }
        p *= 4;
    }
    v.push(4 << 20);
    v.sort_unstable();
    v.dedup();
    v
}

#[allow(clippy::cast_possible_truncation)]
fn seed(rank: u32, size: usize) -> u32 {
    rank.wrapping_mul(1_000_003).wrapping_add(size as u32)
}

/// Check that this rank's segment holds what the previous rank put, at `off`.
fn check_landed(c: &Ctx<'_>, off: u64, size: usize, what: &str) -> Verdict {
    let prev = (c.rank() + c.size() - 1) % c.size();
    let mut got = vec![0u8; size];
    ck("read_local", c.ep.read_local(off, &mut got))?;
    match pattern::first_bad(seed(prev, size), &got) {
        None => Ok(()),
        Some(j) => Err(format!(
            "{what} of {size} B from rank {prev}: byte {j} is wrong"
        )),
    }
}

fn check_own(got: &[u8], rank: u32, what: &str) -> Verdict {
    match pattern::first_bad(seed(rank, got.len()), got) {
        None => Ok(()),
        Some(j) => Err(format!("{what} of {} B: byte {j} is wrong", got.len())),
    }
}

fn blocking(c: &Ctx<'_>) -> Verdict {
    let next = (c.rank() + 1) % c.size();
    for size in sizes() {
        let data = pattern::bytes(seed(c.rank(), size), size);
        ck("put", c.ep.put(next, PUT_OFF, &data))?;
        ck("barrier", c.ep.barrier())?;
        check_landed(c, PUT_OFF, size, "put")?;
        let mut back = vec![0u8; size];
        ck("get", c.ep.get(next, PUT_OFF, &mut back))?;
        check_own(&back, c.rank(), "get")?;
        ck("barrier", c.ep.barrier())?;
    }
    Ok(())
}

fn explicit(c: &Ctx<'_>) -> Verdict {
    let next = (c.rank() + 1) % c.size();
    for (i, size) in sizes().into_iter().enumerate() {
        let data = pattern::bytes(seed(c.rank(), size), size);
        let mut h = ck("put_nb", c.ep.put_nb(next, PUT_OFF, &data))?;
        if i % 2 == 0 {
            ck("wait_sync", c.ep.wait_sync(&mut h))?;
        } else {
            while !ck("try_sync", c.ep.try_sync(&mut h))? {
                std::thread::yield_now();
            }
        }
        ensure(h.is_invalid(), || "handle still valid after sync".into())?;
        ck("barrier", c.ep.barrier())?;
        check_landed(c, PUT_OFF, size, "put_nb")?;
        // Into the local segment, synced with wait_sync_all.
        let h1 = ck(
            "get_nb_local",
            c.ep.get_nb_local(next, PUT_OFF, GET_OFF, size),
        )?;
        let mut hs = [h1, Handle::INVALID];
        ck("wait_sync_all", c.ep.wait_sync_all(&mut hs))?;
        let mut got = vec![0u8; size];
        ck("read_local", c.ep.read_local(GET_OFF, &mut got))?;
        check_own(&got, c.rank(), "get_nb_local")?;
        // Into arbitrary memory, synced with wait_sync_some then try_sync_all.
        let mut buf = vec![0u8; size];
        // SAFETY: `buf` lives until the handle is synced below and is not touched meanwhile.
        let h2 = ck("get_nb", unsafe {
            c.ep.get_nb(next, PUT_OFF, buf.as_mut_ptr(), size)
        })?;
        let mut hs = [h2];
        ck("wait_sync_some", c.ep.wait_sync_some(&mut hs))?;
        while !ck("try_sync_all", c.ep.try_sync_all(&mut hs))? {
            std::thread::yield_now();
        }
        check_own(&buf, c.rank(), "get_nb")?;
        ck("barrier", c.ep.barrier())?;
    }
    Ok(())
}

fn implicit(c: &Ctx<'_>) -> Verdict {
    let next = (c.rank() + 1) % c.size();
    let all = sizes();
    // Several puts in flight at once, to disjoint offsets, synced together.
    let small: Vec<usize> = all.iter().copied().filter(|&s| s <= 4097).collect();
    let mut off = PUT_OFF;
    let mut offs = Vec::new();
    for &size in &small {
        let data = pattern::bytes(seed(c.rank(), size), size);
        ck("put_nbi", c.ep.put_nbi(next, off, &data))?;
        offs.push((off, size));
        off += size as u64 + 13;
    }
    ck("wait_sync_nbi", c.ep.wait_sync_nbi())?;
    ensure(ck("try_sync_nbi", c.ep.try_sync_nbi())?, || {
        "try_sync_nbi false after wait_sync_nbi".into()
    })?;
    ck("barrier", c.ep.barrier())?;
    for &(o, size) in &offs {
        check_landed(c, o, size, "put_nbi")?;
    }
    // An access region collects gets into one handle.
    ck("begin_nbi_region", c.ep.begin_nbi_region())?;
    let mut local = GET_OFF;
    let mut locs = Vec::new();
    for &(o, size) in &offs {
        ck("get_nbi_local", c.ep.get_nbi_local(next, o, local, size))?;
        locs.push((local, size));
        local += size as u64 + 7;
    }
    let mut h = ck("end_nbi_region", c.ep.end_nbi_region())?;
    ck("wait_sync", c.ep.wait_sync(&mut h))?;
    for &(l, size) in &locs {
        let mut got = vec![0u8; size];
        ck("read_local", c.ep.read_local(l, &mut got))?;
        check_own(&got, c.rank(), "get_nbi_local")?;
    }
    ck("barrier", c.ep.barrier())?;
    // Large sizes one at a time through the implicit path.
    for &size in all.iter().filter(|&&s| s > 4097) {
        let data = pattern::bytes(seed(c.rank(), size), size);
        ck("put_nbi", c.ep.put_nbi(next, PUT_OFF, &data))?;
        while !ck("try_sync_nbi", c.ep.try_sync_nbi())? {
            std::thread::yield_now();
        }
        ck("barrier", c.ep.barrier())?;
        check_landed(c, PUT_OFF, size, "put_nbi")?;
        let mut buf = vec![0u8; size];
        // SAFETY: `buf` outlives the wait_sync_nbi below and is untouched until then.
        ck("get_nbi", unsafe {
            c.ep.get_nbi(next, PUT_OFF, buf.as_mut_ptr(), size)
        })?;
        ck("wait_sync_nbi", c.ep.wait_sync_nbi())?;
        check_own(&buf, c.rank(), "get_nbi")?;
        ck("barrier", c.ep.barrier())?;
    }
    Ok(())
}

/// Where `try_sync_polls` puts its flags.
const FLAG_OFF: u64 = 64;

/// Every try-sync polls, even with no live handle: rank 1 waits for flags that rank 0 puts
/// into its segment while calling only a try-sync with nothing outstanding (one form per
/// round), as GASNet clients spin. Where puts need the target to poll (udp), a try-sync that
/// skipped its poll would leave the flag and rank 0's blocking put waiting forever.
fn try_sync_polls(c: &Ctx<'_>) -> Verdict {
    const ROUNDS: [(&str, u8); 3] = [
        ("try_sync_some", 0xA1),
        ("try_sync_all", 0xA2),
        ("try_sync_nbi", 0xA3),
    ];
    for (form, val) in ROUNDS {
        if c.rank() == 1 {
            ck("put", c.ep.put(1, FLAG_OFF, &[0]))?;
        }
        ck("barrier", c.ep.barrier())?;
        match c.rank() {
            0 => {
                // Let rank 1 reach its loop first, so that only its try-syncs can poll.
                std::thread::sleep(std::time::Duration::from_millis(20));
                ck("put", c.ep.put(1, FLAG_OFF, &[val]))?;
            }
            1 => loop {
                let mut flag = [0u8];
                ck("read_local", c.ep.read_local(FLAG_OFF, &mut flag))?;
                if flag[0] == val {
                    break;
                }
                ensure(flag[0] == 0, || {
                    format!("{form}: flag holds {:#x}, not 0 or {val:#x}", flag[0])
                })?;
                let mut none = [Handle::INVALID, Handle::INVALID];
                let done = match form {
                    "try_sync_some" => ck(form, c.ep.try_sync_some(&mut none))?,
                    "try_sync_all" => ck(form, c.ep.try_sync_all(&mut none))?,
                    _ => ck(form, c.ep.try_sync_nbi())?,
                };
                ensure(done, || {
                    format!("{form} with nothing outstanding said not ready")
                })?;
                std::thread::yield_now();
            },
            _ => {}
        }
        ck("barrier", c.ep.barrier())?;
    }
    Ok(())
}

/// Put and get to this rank's own segment, in every form: a copy (never an active message to
/// oneself) unless `AMNET_RMA=am` asks for the reference path.
fn own_segment(c: &Ctx<'_>) -> Verdict {
    let me = c.rank();
    let path = ck("rma_path", c.ep.rma_path(me))?;
    ensure(
        !c.ep.config().rma_native || path != amnet::RmaPath::Am,
        || format!("put/get to this rank's own segment take the {path:?} path"),
    )?;
    for size in [1usize, 8, 4095, 70_000] {
        let data = pattern::bytes(seed(me, size), size);
        ck("put", c.ep.put(me, PUT_OFF, &data))?;
        let mut back = vec![0u8; size];
        ck("get", c.ep.get(me, PUT_OFF, &mut back))?;
        check_own(&back, me, "get from own segment")?;
        let mut h = ck("put_nb", c.ep.put_nb(me, PUT_OFF + 1, &data))?;
        ck("wait_sync", c.ep.wait_sync(&mut h))?;
        let mut h = ck(
            "get_nb_local",
            c.ep.get_nb_local(me, PUT_OFF + 1, GET_OFF, size),
        )?;
        ck("wait_sync", c.ep.wait_sync(&mut h))?;
        ck("read_local", c.ep.read_local(GET_OFF, &mut back))?;
        check_own(&back, me, "get_nb_local from own segment")?;
    }
    ck("barrier", c.ep.barrier())
}
