//! Remote atomics: one counter hammered from every rank and thread (exact totals, every fetched
//! value handed out once), every operation of every element type against a local model, the
//! non-blocking forms, and the errors.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use amnet::{AtomicDomain, AtomicElem, AtomicOp, AtomicOps, Error, Rank, RmaPath};

use crate::state::{H_SEG_XOR, SEG_WORDS_OFF};

use crate::{ck, ensure, test, Ctx, Test, Verdict};

/// Where the atomics tests keep their elements (8-aligned).
pub const ATOM_OFF: u64 = (9 << 20) + (512 << 10);
/// Counter of `fetch_add`s (u64, rank 0).
const A_OFF: u64 = ATOM_OFF;
/// Counter of compare-swap increments (u64, every rank, by the previous rank's threads).
const B_OFF: u64 = ATOM_OFF + 8;
/// Counter of implicit-handle adds of 2 (u64, every rank, by the previous rank).
const C_OFF: u64 = ATOM_OFF + 16;
/// f64 sum of halves (rank 0).
const F_OFF: u64 = ATOM_OFF + 24;
/// i32 minimum (rank 0).
const MIN_OFF: u64 = ATOM_OFF + 32;
/// u32 maximum (rank 0).
const MAX_OFF: u64 = ATOM_OFF + 36;
/// Bitmap of the fetched counter values (rank 0), one bit per value.
const MAP_OFF: u64 = ATOM_OFF + 4096;
/// Per-source-rank areas of the model test (512 bytes each).
const MODEL_OFF: u64 = ATOM_OFF + (64 << 10);

const THREADS: u64 = 3;
const PER_THREAD: u64 = 300;

/// The tests of this module.
pub fn tests() -> Vec<Test> {
    vec![
        test("atomic_hammer", hammer),
        test("atomic_operations", operations),
        test("atomic_offloaded", offloaded),
        test("atomic_errors", errors),
        test("segment_atomic_view", segment_view),
    ]
}

fn zero(c: &Ctx<'_>, off: u64, len: usize) -> Verdict {
    ck("write_local", c.ep.write_local(off, &vec![0u8; len]))
}

/// What one hammering thread does: `fetch_add(1)` on rank 0's counter, a compare-swap
/// increment of the next rank's counter, an implicit-handle add of 2 to the next rank's
/// other counter, a half added to rank 0's f64. Returns the values its fetch_adds read.
fn hammer_thread(
    ad: &AtomicDomain<u64>,
    fd: &AtomicDomain<f64>,
    next: Rank,
    t: u64,
) -> Result<Vec<u64>, String> {
    let ep = ad.endpoint();
    let mut got = Vec::new();
    for i in 0..PER_THREAD {
        if t == 0 && i % 4 == 0 {
            // Non-blocking form, waited at once and later.
            let mut h = ck("fetch_nb", ad.fetch_nb(0, A_OFF, AtomicOp::Add, 1, 0))?;
            loop {
                if let Some(v) = ck("try_wait", ad.try_wait(&mut h))? {
                    got.push(v);
                    break;
                }
                std::thread::yield_now();
            }
        } else {
            got.push(ck("fetch_add", ad.fetch_add(0, A_OFF, 1))?);
        }
        let mut cur = ck("get", ad.get(next, B_OFF))?;
        loop {
            let seen = ck("compare_swap", ad.compare_swap(next, B_OFF, cur, cur + 1))?;
            if seen == cur {
                break;
            }
            cur = seen;
        }
        ck("apply_nbi", ad.apply_nbi(next, C_OFF, AtomicOp::Add, 2, 0))?;
        ck("f64 add", fd.apply(0, F_OFF, AtomicOp::Add, 0.5, 0.0))?;
    }
    ck("wait_sync_nbi", ep.wait_sync_nbi())?;
    Ok(got)
}

fn hammer(c: &Ctx<'_>) -> Verdict {
    let n = u64::from(c.size());
    let total = n * THREADS * PER_THREAD;
    let map_bytes = usize::try_from(total.div_ceil(64) * 8).unwrap_or(usize::MAX);
    zero(c, ATOM_OFF, 64)?;
    zero(c, MAP_OFF, map_bytes)?;
    let ad = ck(
        "atomic_domain u64",
        c.ep.atomic_domain::<u64>(AtomicOps::ALL),
    )?;
    let fd = ck(
        "atomic_domain f64",
        c.ep.atomic_domain::<f64>(AtomicOps::ARITHMETIC),
    )?;
    let id = ck(
        "atomic_domain i32",
        c.ep.atomic_domain::<i32>(AtomicOps::of(&[AtomicOp::Min, AtomicOp::Get])),
    )?;
    let ud = ck(
        "atomic_domain u32",
        c.ep.atomic_domain::<u32>(AtomicOps::from(AtomicOp::Max) | AtomicOp::Get),
    )?;
    ck("barrier", c.ep.barrier())?;
    let next = (c.rank() + 1) % c.size();
    let r: Result<Vec<Vec<u64>>, String> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..THREADS)
            .map(|t| {
                let (ad, fd) = (ad.clone(), fd.clone());
                s.spawn(move || hammer_thread(&ad, &fd, next, t))
            })
            .collect();
        hs.into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err("hammer thread panicked".into()))
            })
            .collect()
    });
    let mut got: Vec<u64> = r?.concat();
    let rank = i32::try_from(c.rank()).unwrap_or(i32::MAX);
    ck("min", id.apply(0, MIN_OFF, AtomicOp::Min, -rank - 1, 0))?;
    ck(
        "max",
        ud.apply(0, MAX_OFF, AtomicOp::Max, c.rank() * 3 + 1, 0),
    )?;
    // Every value this rank fetched is new here...
    got.sort_unstable();
    ensure(got.windows(2).all(|w| w[0] != w[1]), || {
        "fetch_add handed the same value out twice on this rank".into()
    })?;
    ensure(got.iter().all(|&v| v < total), || {
        format!("fetch_add returned a value beyond the {total} increments made")
    })?;
    // ... and nowhere else: its bits go into rank 0's map with fetching ors.
    let mut words = std::collections::BTreeMap::<u64, u64>::new();
    for &v in &got {
        *words.entry(v / 64).or_default() |= 1 << (v % 64);
    }
    for (&w, &bits) in &words {
        let old = ck(
            "fetch or",
            ad.fetch(0, MAP_OFF + 8 * w, AtomicOp::Or, bits, 0),
        )?;
        ensure(old & bits == 0, || {
            format!(
                "fetch_add values {:#x} of word {w} were also fetched by another rank",
                old & bits
            )
        })?;
    }
    ck("barrier", c.ep.barrier())?;
    let mine = |what: &str, off: u64, want: u64| -> Verdict {
        let v = ck("get", ad.get(c.rank(), off))?;
        ensure(v == want, || format!("{what}: {v}, expected {want}"))
    };
    mine("compare-swap counter", B_OFF, THREADS * PER_THREAD)?;
    mine(
        "implicit-handle add counter",
        C_OFF,
        2 * THREADS * PER_THREAD,
    )?;
    if c.rank() == 0 {
        mine("fetch_add counter", A_OFF, total)?;
        let mut full = 0u64;
        for w in 0..total.div_ceil(64) {
            let v = ck("get", ad.get(0, MAP_OFF + 8 * w))?;
            full += u64::from(v.count_ones());
        }
        ensure(full == total, || {
            format!("{full} distinct values fetched of the {total} increments")
        })?;
        let f = ck("f64 get", fd.get(0, F_OFF))?;
        #[allow(clippy::cast_precision_loss)]
        let want = total as f64 / 2.0;
        ensure(f.to_bits() == want.to_bits(), || {
            format!("f64 sum of halves {f}, expected {want}")
        })?;
        let m = ck("i32 get", id.get(0, MIN_OFF))?;
        let want = -i32::try_from(n).unwrap_or(i32::MAX);
        ensure(m == want, || format!("i32 min {m}, expected {want}"))?;
        let m = ck("u32 get", ud.get(0, MAX_OFF))?;
        let want = (c.size() - 1) * 3 + 1;
        ensure(m == want, || format!("u32 max {m}, expected {want}"))?;
    }
    ck("barrier", c.ep.barrier())
}

/// An element type with the reference semantics of every operation.
trait Model: AtomicElem {
    /// The element after `op` with operands `a`, `b` on `cur`.
    fn after(op: AtomicOp, cur: Self, a: Self, b: Self) -> Self;
    /// Operand values to try (small, large, negative where there are).
    fn samples() -> [Self; 4];
}

macro_rules! int_model {
    ($t:ty, $samples:expr) => {
        impl Model for $t {
            fn after(op: AtomicOp, cur: $t, a: $t, b: $t) -> $t {
                match op {
                    AtomicOp::Get => cur,
                    AtomicOp::Set | AtomicOp::Swap => a,
                    AtomicOp::CompareSwap => {
                        if cur == a {
                            b
                        } else {
                            cur
                        }
                    }
                    AtomicOp::Add => cur.wrapping_add(a),
                    AtomicOp::Sub => cur.wrapping_sub(a),
                    AtomicOp::Inc => cur.wrapping_add(1),
                    AtomicOp::Dec => cur.wrapping_sub(1),
                    AtomicOp::And => cur & a,
                    AtomicOp::Or => cur | a,
                    AtomicOp::Xor => cur ^ a,
                    AtomicOp::Min => cur.min(a),
                    AtomicOp::Max => cur.max(a),
                }
            }
            fn samples() -> [$t; 4] {
                $samples
            }
        }
    };
}

int_model!(i32, [7, i32::MAX, -5, i32::MIN]);
int_model!(u32, [7, u32::MAX, 0x8000_0001, 3]);
int_model!(i64, [7, i64::MAX, -5, i64::MIN]);
int_model!(u64, [7, u64::MAX, 1 << 63, 3]);

macro_rules! float_model {
    ($t:ty) => {
        impl Model for $t {
            fn after(op: AtomicOp, cur: $t, a: $t, b: $t) -> $t {
                match op {
                    AtomicOp::Get | AtomicOp::And | AtomicOp::Or | AtomicOp::Xor => cur,
                    AtomicOp::Set | AtomicOp::Swap => a,
                    AtomicOp::CompareSwap => {
                        if cur.to_bits() == a.to_bits() {
                            b
                        } else {
                            cur
                        }
                    }
                    AtomicOp::Add => cur + a,
                    AtomicOp::Sub => cur - a,
                    AtomicOp::Inc => cur + 1.0,
                    AtomicOp::Dec => cur - 1.0,
                    AtomicOp::Min => cur.min(a),
                    AtomicOp::Max => cur.max(a),
                }
            }
            fn samples() -> [$t; 4] {
                [1.5, -0.0, 1e30, -2.25]
            }
        }
    };
}

float_model!(f32);
float_model!(f64);

/// Every operation of the domain's type on one element of `target`, fetching and not, with
/// every sample operand, against the model; then the non-blocking forms on eight elements.
fn model_one<T: Model>(c: &Ctx<'_>, target: Rank, off: u64) -> Verdict {
    let ops = if T::TYPE.is_float() {
        AtomicOps::ARITHMETIC
    } else {
        AtomicOps::ALL
    };
    let d = ck("atomic_domain", c.ep.atomic_domain::<T>(ops))?;
    let ty = T::TYPE.name();
    let s = T::samples();
    let mut model = s[0];
    ck("set", d.set(target, off, model))?;
    for op in ops.iter() {
        for (i, &a) in s.iter().enumerate() {
            // Compare-swap alternately with the current value (it swaps) and another.
            let a = if op == AtomicOp::CompareSwap && i % 2 == 0 {
                model
            } else {
                a
            };
            let b = s[(i + 1) % 4];
            let want = T::after(op, model, a, b);
            if op == AtomicOp::Get || i % 2 == 0 {
                let old = ck("fetch", d.fetch(target, off, op, a, b))?;
                ensure(old.to_bits() == model.to_bits(), || {
                    format!(
                        "{ty} {} ({a:?}, {b:?}) fetched {old:?}, expected {model:?}",
                        op.name()
                    )
                })?;
            } else {
                ck("apply", d.apply(target, off, op, a, b))?;
            }
            model = want;
            let now = ck("get", d.get(target, off))?;
            ensure(now.to_bits() == model.to_bits(), || {
                format!(
                    "{ty} after {} ({a:?}, {b:?}): {now:?}, expected {model:?}",
                    op.name()
                )
            })?;
        }
    }
    // Eight elements in flight at once, fetched through handles.
    let size = T::TYPE.size() as u64;
    let base = off + 64;
    for k in 0..8u64 {
        ck("set", d.set(target, base + k * size, s[(k % 4) as usize]))?;
    }
    let hs = (0..8u64)
        .map(|k| {
            ck(
                "fetch_nb",
                d.fetch_nb(target, base + k * size, AtomicOp::Inc, s[0], s[0]),
            )
        })
        .collect::<Result<Vec<_>, _>>()?;
    for (k, h) in hs.into_iter().enumerate() {
        let old = ck("wait", d.wait(h))?;
        let want = s[k % 4];
        ensure(old.to_bits() == want.to_bits(), || {
            format!("{ty} fetch_nb inc of element {k} fetched {old:?}, expected {want:?}")
        })?;
        let now = ck("get", d.get(target, base + k as u64 * size))?;
        let want = T::after(AtomicOp::Inc, want, s[0], s[0]);
        ensure(now.to_bits() == want.to_bits(), || {
            format!("{ty} element {k} after fetch_nb inc: {now:?}, expected {want:?}")
        })?;
    }
    let mut h = ck(
        "apply_nb",
        d.apply_nb(target, base, AtomicOp::Set, s[3], s[3]),
    )?;
    ck("wait_sync", c.ep.wait_sync(&mut h))?;
    let now = ck("get", d.get(target, base))?;
    ensure(now.to_bits() == s[3].to_bits(), || {
        format!("{ty} after apply_nb set: {now:?}, expected {:?}", s[3])
    })
}

fn operations(c: &Ctx<'_>) -> Verdict {
    // Each rank works on the next rank's element (its own with one rank), in an area of its
    // own there; and on its own segment, the direct path every conduit has.
    let next = (c.rank() + 1) % c.size();
    let area = MODEL_OFF + u64::from(c.rank()) * 512;
    for target in [next, c.rank()] {
        let at = area + if target == c.rank() { 256 } else { 0 };
        model_one::<i32>(c, target, at)?;
        model_one::<u32>(c, target, at)?;
        model_one::<i64>(c, target, at)?;
        model_one::<u64>(c, target, at)?;
        model_one::<f32>(c, target, at)?;
        model_one::<f64>(c, target, at)?;
    }
    ck("barrier", c.ep.barrier())
}

/// `r` is an `Error::Usage` whose detail contains `words`.
pub fn expect_usage<T: std::fmt::Debug>(what: &str, r: amnet::Result<T>, words: &str) -> Verdict {
    match r {
        Err(Error::Usage { detail, .. }) if detail.contains(words) => Ok(()),
        other => Err(format!(
            "{what}: expected a usage error naming `{words}`, got {other:?}"
        )),
    }
}

/// Counters of the offload test (u64 each): fetch-adds on rank 0, compare-swap increments on
/// every rank, and an i64 decremented on every rank.
const O_ADD: u64 = ATOM_OFF + 128;
const O_CAS: u64 = ATOM_OFF + 136;
const O_DEC: u64 = ATOM_OFF + 144;

/// Domains of the operations a conduit's transport may run itself (ibv: the HCA's fetch-add
/// and compare-swap on 64-bit integers): offloaded exactly where the conduit offers native
/// atomics and reaches some rank natively (every operation then goes through the transport,
/// this rank's own included), and right on every conduit: exact totals under fetch-add,
/// compare-swap and decrement from every rank and two threads each, and every fetched value
/// handed out once.
fn offloaded(c: &Ctx<'_>) -> Verdict {
    const PER: u64 = 200;
    const T: u64 = 2;
    zero(c, O_ADD, 24)?;
    let ops = AtomicOps::of(&[
        AtomicOp::Get,
        AtomicOp::Add,
        AtomicOp::Inc,
        AtomicOp::CompareSwap,
    ]);
    let ud = ck("atomic_domain u64", c.ep.atomic_domain::<u64>(ops))?;
    let id = ck(
        "atomic_domain i64",
        c.ep.atomic_domain::<i64>(AtomicOps::of(&[
            AtomicOp::Sub,
            AtomicOp::Dec,
            AtomicOp::Get,
        ])),
    )?;
    // A domain with an operation the device lacks stays on the processor's atomics.
    let md = ck(
        "atomic_domain u64 with max",
        c.ep.atomic_domain::<u64>(ops | AtomicOp::Max),
    )?;
    let next = (c.rank() + 1) % c.size();
    let native = c.size() > 1
        && ck("rma_path", c.ep.rma_path(next))? == RmaPath::Native
        && c.ep.conduit_name() == "ibv";
    ensure(ud.offloaded() == native && id.offloaded() == native, || {
        format!(
            "u64 and i64 domains offloaded: {}, {}; expected {native} on {}",
            ud.offloaded(),
            id.offloaded(),
            c.ep.conduit_name()
        )
    })?;
    ensure(!md.offloaded(), || "a domain with max offloaded".into())?;
    ck("barrier", c.ep.barrier())?;
    let r: Result<Vec<Vec<u64>>, String> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..T)
            .map(|_| {
                let (ud, id) = (ud.clone(), id.clone());
                s.spawn(move || -> Result<Vec<u64>, String> {
                    let mut got = Vec::new();
                    for i in 0..PER {
                        let v = if i % 2 == 0 {
                            ck("fetch_add", ud.fetch_add(0, O_ADD, 1))?
                        } else {
                            ck("fetch inc", ud.fetch(0, O_ADD, AtomicOp::Inc, 0, 0))?
                        };
                        got.push(v);
                        let mut seen = ck("get", ud.fetch(next, O_CAS, AtomicOp::Get, 0, 0))?;
                        loop {
                            let old =
                                ck("compare_swap", ud.compare_swap(next, O_CAS, seen, seen + 1))?;
                            if old == seen {
                                break;
                            }
                            seen = old;
                        }
                        if i % 2 == 0 {
                            ck("dec", id.apply(next, O_DEC, AtomicOp::Dec, 0, 0))?;
                        } else {
                            ck("sub", id.apply(next, O_DEC, AtomicOp::Sub, 1, 0))?;
                        }
                    }
                    Ok(got)
                })
            })
            .collect();
        hs.into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err("offload thread panicked".into()))
            })
            .collect()
    });
    let mut got = r?.concat();
    got.sort_unstable();
    let total = u64::from(c.size()) * T * PER;
    ensure(
        got.windows(2).all(|w| w[0] != w[1]) && got.iter().all(|&v| v < total),
        || "fetch-add handed a value out twice or beyond the increments made".into(),
    )?;
    ck("barrier", c.ep.barrier())?;
    let cas = ck("get", ud.fetch(c.rank(), O_CAS, AtomicOp::Get, 0, 0))?;
    let dec = ck("get", id.fetch(c.rank(), O_DEC, AtomicOp::Get, 0, 0))?;
    ensure(cas == T * PER, || {
        format!("compare-swap counter {cas}, expected {}", T * PER)
    })?;
    ensure(dec == -i64::try_from(T * PER).unwrap_or(0), || {
        format!("decremented counter {dec}, expected -{}", T * PER)
    })?;
    if c.rank() == 0 {
        let add = ck("get", ud.fetch(0, O_ADD, AtomicOp::Get, 0, 0))?;
        ensure(add == total, || {
            format!("fetch-add counter {add}, expected {total}")
        })?;
    }
    ck("barrier", c.ep.barrier())
}

fn errors(c: &Ctx<'_>) -> Verdict {
    let next = (c.rank() + 1) % c.size();
    let seg = ck("segment_len", c.ep.segment_len())? as u64;
    let d = ck(
        "atomic_domain",
        c.ep.atomic_domain::<u64>(AtomicOps::of(&[AtomicOp::Add, AtomicOp::Get])),
    )?;
    match d.fetch_add(next, seg - 4, 1) {
        Err(Error::OutOfSegment { rank, offset, .. }) if rank == next && offset == seg - 4 => {}
        other => return Err(format!("element past the segment's end: {other:?}")),
    }
    match d.get(c.size(), 0) {
        Err(Error::BadRank { .. }) => {}
        other => return Err(format!("rank beyond the job: {other:?}")),
    }
    expect_usage(
        "misaligned",
        d.fetch_add(next, ATOM_OFF + 4, 1),
        "not a multiple of 8",
    )?;
    expect_usage(
        "operation outside the domain",
        d.fetch(next, ATOM_OFF, AtomicOp::Xor, 1, 0),
        "`xor` is not one of",
    )?;
    expect_usage(
        "non-fetching get",
        d.apply(next, ATOM_OFF, AtomicOp::Get, 0, 0),
        "only fetches",
    )?;
    expect_usage(
        "bitwise float domain",
        c.ep.atomic_domain::<f32>(AtomicOps::from(AtomicOp::Or)),
        "no bitwise operations",
    )?;
    if c.size() > 1 {
        let ops = if c.rank() == 0 {
            AtomicOps::ALL
        } else {
            AtomicOps::ARITHMETIC
        };
        match c.ep.atomic_domain::<u64>(ops) {
            Err(Error::Mismatch { what, .. }) if what.starts_with("atomic_domain") => {}
            other => return Err(format!("domains that differ across ranks: {other:?}")),
        }
        // Different types mismatch too; and the ranks go on together afterwards.
        let r = if c.rank() == 0 {
            c.ep.atomic_domain::<u64>(AtomicOps::ALL).map(|_| ())
        } else {
            c.ep.atomic_domain::<i64>(AtomicOps::ALL).map(|_| ())
        };
        ensure(matches!(r, Err(Error::Mismatch { .. })), || {
            format!("u64 and i64 domains across ranks: {r:?}")
        })?;
    }
    ck("barrier", c.ep.barrier())?;
    // The domain still works after the errors.
    zero(c, ATOM_OFF, 8)?;
    ck("barrier", c.ep.barrier())?;
    ck("fetch_add", d.fetch_add(next, ATOM_OFF, 5))?;
    ck("barrier", c.ep.barrier())?;
    let v = ck("get", d.get(c.rank(), ATOM_OFF))?;
    ensure(v == 5, || {
        format!("counter after the errors: {v}, expected 5")
    })?;
    ck("barrier", c.ep.barrier())
}

/// Words of the segment view test.
const VIEW_WORDS: usize = 64;
/// Updates each rank sends to each rank.
const VIEW_UPDATES: u64 = 500;

/// The value update `i` from `src` to `dst` xors into word `i % VIEW_WORDS`.
fn view_value(src: Rank, dst: Rank, i: u64) -> u64 {
    (u64::from(src) << 48 | u64::from(dst) << 32 | i).wrapping_mul(0x9e37_79b9_7f4a_7c15)
}

/// What `dst`'s words hold once every rank's updates arrived.
fn view_expected(n: Rank, dst: Rank) -> Vec<u64> {
    let mut w = vec![0u64; VIEW_WORDS];
    for src in 0..n {
        for (i, k) in (0..VIEW_UPDATES).zip((0..VIEW_WORDS).cycle()) {
            w[k] ^= view_value(src, dst, i);
        }
    }
    w
}

/// GUPS-style updates applied by a handler through the safe atomic view of its own segment;
/// every rank's words read back through the view (own segment, and every mapped peer's), and
/// its errors.
fn segment_view(c: &Ctx<'_>) -> Verdict {
    let n = c.size();
    let me = c.rank();
    zero(c, SEG_WORDS_OFF, VIEW_WORDS * 8)?;
    ck("barrier", c.ep.barrier())?;
    for i in 0..VIEW_UPDATES {
        for d in 0..n {
            let v = view_value(me, d, i);
            #[allow(clippy::cast_possible_truncation)]
            let args = [(i % VIEW_WORDS as u64) as u32, v as u32, (v >> 32) as u32];
            ck("request_short", c.ep.request_short(d, H_SEG_XOR, &args))?;
        }
    }
    let want_hits = VIEW_UPDATES * u64::from(n);
    ck(
        "wait for the updates",
        c.ep.wait_until(|| c.st.hits.load(Ordering::SeqCst) >= want_hits),
    )?;
    ck("barrier", c.ep.barrier())?;
    c.st.handler_verdict()?;
    let count = VIEW_WORDS;
    for r in 0..n {
        let mapped = r == me || ck("rma_path", c.ep.rma_path(r))? == RmaPath::Direct;
        let view = c.ep.segment_atomics::<AtomicU64>(r, SEG_WORDS_OFF, count);
        if !mapped {
            match view {
                Err(Error::Usage { detail, .. }) if detail.contains("not mapped") => continue,
                other => {
                    return Err(format!(
                        "view of unmapped rank {r}'s segment: {:?}",
                        other.map(<[AtomicU64]>::len)
                    ))
                }
            }
        }
        let view = ck("segment_atomics", view)?;
        let got: Vec<u64> = view.iter().map(|w| w.load(Ordering::Relaxed)).collect();
        let want = view_expected(n, r);
        if let Some(k) = (0..count).find(|&k| got[k] != want[k]) {
            return Err(format!(
                "rank {r}'s word {k} through the view: {:#x}, expected {:#x}",
                got[k], want[k]
            ));
        }
        if r == me {
            // The same bytes through a copy, and as u32 halves.
            let mut bytes = vec![0u8; count * 8];
            ck("read_local", c.ep.read_local(SEG_WORDS_OFF, &mut bytes))?;
            let halves = ck(
                "segment_atomics u32",
                c.ep.segment_atomics::<AtomicU32>(me, SEG_WORDS_OFF, 2 * count),
            )?;
            for k in 0..count {
                let w = u64::from_le_bytes(bytes[8 * k..8 * k + 8].try_into().unwrap_or_default());
                let lo = u64::from(halves[2 * k].load(Ordering::Relaxed));
                let hi = u64::from(halves[2 * k + 1].load(Ordering::Relaxed));
                ensure(w == want[k] && (lo | hi << 32) == want[k], || {
                    format!(
                        "own word {k}: copy {w:#x}, halves {:#x}, expected {:#x}",
                        lo | hi << 32,
                        want[k]
                    )
                })?;
            }
        }
    }
    // Errors.
    let seg = ck("segment_len", c.ep.segment_len())? as u64;
    match c.ep.segment_atomics::<AtomicU64>(me, SEG_WORDS_OFF + 4, 1) {
        Err(Error::Usage { detail, .. }) if detail.contains("not aligned") => {}
        other => {
            return Err(format!(
                "misaligned view: {:?}",
                other.map(<[AtomicU64]>::len)
            ))
        }
    }
    match c.ep.segment_atomics::<AtomicU64>(me, seg - 8, 2) {
        Err(Error::OutOfSegment { .. }) => {}
        other => {
            return Err(format!(
                "view past the end: {:?}",
                other.map(<[AtomicU64]>::len)
            ))
        }
    }
    match c.ep.segment_atomics::<AtomicU64>(n, 0, 1) {
        Err(Error::BadRank { .. }) => {}
        other => {
            return Err(format!(
                "view of a rank beyond the job: {:?}",
                other.map(<[AtomicU64]>::len)
            ))
        }
    }
    ensure(
        ck("empty view", c.ep.segment_atomics::<AtomicU64>(me, seg, 0))?.is_empty(),
        || "an empty view has elements".into(),
    )?;
    ck("barrier", c.ep.barrier())
}
