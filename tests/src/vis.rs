//! Vector, indexed and strided put/get: every form to the next rank and back, pieces that
//! cross the Medium size, gaps left untouched, the non-blocking puts and gets, and the
//! errors.
// Offsets and sizes here are small test constants: the casts between them do not truncate.
#![allow(clippy::cast_possible_truncation)]

use amnet::Rank;

use crate::atomic::expect_usage;
use crate::{ck, ensure, pattern, test, Ctx, Test, Verdict};

/// The area the tests write in every rank's segment.
const VIS_OFF: u64 = 16 << 20;
/// Its length.
const VIS_LEN: usize = 1 << 20;

/// The tests of this module.
pub fn tests() -> Vec<Test> {
    vec![
        test("vis_strided", strided),
        test("vis_vector_indexed", vector_indexed),
        test("vis_nb_gets", nb_gets),
        test("vis_errors", errors),
    ]
}

fn seed(rank: Rank, what: u32) -> u32 {
    rank.wrapping_mul(7919).wrapping_add(what)
}

/// Zeroes this rank's area, then barrier.
fn clear(c: &Ctx<'_>) -> Verdict {
    ck(
        "write_local",
        c.ep.write_local(VIS_OFF, &vec![0u8; VIS_LEN]),
    )?;
    ck("barrier", c.ep.barrier())
}

/// This rank's area as it is now.
fn area(c: &Ctx<'_>) -> Result<Vec<u8>, String> {
    let mut v = vec![0u8; VIS_LEN];
    ck("read_local", c.ep.read_local(VIS_OFF, &mut v))?;
    Ok(v)
}

/// The chunk starts of a strided region (lowest level fastest).
fn chunks(strides: &[usize], count: &[usize]) -> Vec<usize> {
    // Multi-indices, the level added last (higher) outermost.
    let mut idx: Vec<Vec<usize>> = vec![vec![]];
    for &n in &count[1..] {
        idx = (0..n)
            .flat_map(|i| idx.iter().map(move |p| [p.clone(), vec![i]].concat()))
            .collect();
    }
    idx.iter()
        .map(|ix| ix.iter().zip(strides).map(|(&i, &s)| i * s).sum())
        .collect()
}

/// A strided put of `src` (strides `ss`) to the next rank at `off` (strides `ds`), checked
/// byte for byte there (the gaps stay zero), and a strided get back into another layout.
fn strided_case(
    c: &Ctx<'_>,
    off: u64,
    ds: &[usize],
    ss: &[usize],
    count: &[usize],
    nb: bool,
) -> Verdict {
    let next = (c.rank() + 1) % c.size();
    let prev = (c.rank() + c.size() - 1) % c.size();
    let src_len = chunks(ss, count).iter().max().map_or(0, |m| m + count[0]);
    let src = pattern::bytes(seed(c.rank(), count[0] as u32), src_len);
    clear(c)?;
    let ds64: Vec<u64> = ds.iter().map(|&s| s as u64).collect();
    if nb {
        let mut h = ck(
            "put_strided_nb",
            c.ep.put_strided_nb(next, VIS_OFF + off, &ds64, &src, ss, count),
        )?;
        ck("wait_sync", c.ep.wait_sync(&mut h))?;
    } else {
        ck(
            "put_strided",
            c.ep.put_strided(next, VIS_OFF + off, &ds64, &src, ss, count),
        )?;
    }
    ck("barrier", c.ep.barrier())?;
    // Expected: the previous rank's chunks at the strided places, zeros elsewhere.
    let from = pattern::bytes(seed(prev, count[0] as u32), src_len);
    let mut want = vec![0u8; VIS_LEN];
    for (d, s) in chunks(ds, count).into_iter().zip(chunks(ss, count)) {
        let d = off as usize + d;
        want[d..d + count[0]].copy_from_slice(&from[s..s + count[0]]);
    }
    let got = area(c)?;
    if let Some(k) = (0..VIS_LEN).find(|&k| got[k] != want[k]) {
        return Err(format!(
            "strided put {count:?} (dst strides {ds:?}, src strides {ss:?}): byte {k} of the area is {}, expected {}",
            got[k], want[k]
        ));
    }
    // Back: the next rank holds this rank's chunks; get them into a packed layout.
    let packed: Vec<usize> = {
        let mut v = Vec::new();
        let mut s = count[0];
        for &n in &count[1..] {
            v.push(s);
            s *= n;
        }
        v
    };
    let total: usize = count.iter().product();
    let mut back = vec![0u8; total];
    ck(
        "get_strided",
        c.ep.get_strided(next, VIS_OFF + off, &ds64, &mut back, &packed, count),
    )?;
    let mut mine = Vec::with_capacity(total);
    for s in chunks(ss, count) {
        mine.extend_from_slice(&src[s..s + count[0]]);
    }
    ensure(back == mine, || {
        format!("strided get {count:?}: the bytes differ from those put")
    })?;
    ck("barrier", c.ep.barrier())
}

fn strided(c: &Ctx<'_>) -> Verdict {
    // A 2-D tile: 64 rows of 48 bytes out of rows of 100, into rows of 256 (unaligned).
    strided_case(c, 7, &[256], &[100], &[48, 64], false)?;
    // Rows that are contiguous at the target (merged into one range).
    strided_case(c, 0, &[48], &[100], &[48, 64], true)?;
    // Three levels, odd sizes.
    strided_case(c, 3, &[5, 64], &[3, 12], &[3, 4, 5], false)?;
    // Rows longer than a Medium message.
    strided_case(c, 1, &[100_000], &[70_001], &[70_001, 3], true)?;
    // A contiguous region (no stride level) and an empty one.
    strided_case(c, 11, &[], &[], &[1000], false)?;
    let next = (c.rank() + 1) % c.size();
    ck(
        "empty put_strided",
        c.ep.put_strided(next, VIS_OFF, &[16], &[], &[16], &[4, 0]),
    )
}

fn vector_indexed(c: &Ctx<'_>) -> Verdict {
    let next = (c.rank() + 1) % c.size();
    let prev = (c.rank() + c.size() - 1) % c.size();
    // Target pieces of varied lengths in a scattered order; local pieces cut elsewhere.
    let dst: Vec<(u64, usize)> = vec![
        (VIS_OFF + 500_000, 1),
        (VIS_OFF + 3, 7),
        (VIS_OFF + 100, 300),
        (VIS_OFF + 1000, 70_000),
        (VIS_OFF + 90_000, 0),
        (VIS_OFF + 200_000, 4096),
    ];
    let total: usize = dst.iter().map(|d| d.1).sum();
    let data = |r: Rank| pattern::bytes(seed(r, 99), total);
    let mine = data(c.rank());
    let cuts = [0usize, 5, 5, 2000, 60_000, total];
    let src: Vec<&[u8]> = cuts.windows(2).map(|w| &mine[w[0]..w[1]]).collect();
    clear(c)?;
    let mut h = ck("put_vector_nb", c.ep.put_vector_nb(next, &dst, &src))?;
    ck("wait_sync", c.ep.wait_sync(&mut h))?;
    ck("barrier", c.ep.barrier())?;
    let got = area(c)?;
    let theirs = data(prev);
    let mut at = 0;
    for (i, &(o, n)) in dst.iter().enumerate() {
        let o = (o - VIS_OFF) as usize;
        ensure(got[o..o + n] == theirs[at..at + n], || {
            format!("put_vector: piece {i} (offset {o}, {n} bytes) differs")
        })?;
        at += n;
    }
    ensure(
        got[..3].iter().all(|&b| b == 0) && got[10..100].iter().all(|&b| b == 0),
        || "put_vector wrote between its pieces".into(),
    )?;
    // Back, into pieces cut differently.
    let mut back = vec![0u8; total];
    {
        let (a, rest) = back.split_at_mut(10);
        let (b, d) = rest.split_at_mut(50_000);
        let mut pieces: Vec<&mut [u8]> = vec![a, b, d];
        ck("get_vector", c.ep.get_vector(next, &dst, &mut pieces))?;
    }
    ensure(back == mine, || {
        "get_vector: the bytes differ from those put".into()
    })?;
    ck("barrier", c.ep.barrier())?;

    // Indexed: 100 pieces of 24 bytes in reverse order, from 3 local pieces.
    let offs: Vec<u64> = (0..100u64)
        .rev()
        .map(|i| VIS_OFF + 300_000 + i * 40)
        .collect();
    let idata = |r: Rank| pattern::bytes(seed(r, 7), 2400);
    let mine = idata(c.rank());
    let src: Vec<&[u8]> = mine.chunks(800).collect();
    clear(c)?;
    ck("put_indexed", c.ep.put_indexed(next, &offs, 24, &src))?;
    let mut h = ck(
        "put_indexed_nb",
        c.ep.put_indexed_nb(next, &offs[..1], 24, &[&mine[..24]]),
    )?;
    ck("wait_sync", c.ep.wait_sync(&mut h))?;
    ck("barrier", c.ep.barrier())?;
    let got = area(c)?;
    let theirs = idata(prev);
    for (k, &o) in offs.iter().enumerate() {
        let o = (o - VIS_OFF) as usize;
        ensure(got[o..o + 24] == theirs[24 * k..24 * k + 24], || {
            format!("put_indexed: piece {k} differs")
        })?;
        ensure(got[o + 24..o + 40].iter().all(|&b| b == 0), || {
            format!("put_indexed wrote after piece {k}")
        })?;
    }
    let mut back = vec![0u8; 2400];
    {
        let mut pieces: Vec<&mut [u8]> = back.chunks_mut(1000).collect();
        ck(
            "get_indexed",
            c.ep.get_indexed(next, &offs, 24, &mut pieces),
        )?;
    }
    ensure(back == mine, || {
        "get_indexed: the bytes differ from those put".into()
    })?;
    ck("barrier", c.ep.barrier())
}

/// Where the non-blocking gets read (the next rank's first half of the area) and write (this
/// rank's second half).
const NB_SRC: u64 = VIS_OFF;
const NB_DST: u64 = VIS_OFF + (VIS_LEN / 2) as u64;

/// The non-blocking gets into this rank's own segment, all outstanding at once: a vector
/// get whose destination has contiguous and separate pieces, an indexed get of 100 small
/// pieces into one contiguous run, and two strided gets (a tile between row strides, and
/// rows longer than a Medium message); each destination's gaps stay untouched.
fn nb_gets(c: &Ctx<'_>) -> Verdict {
    let next = (c.rank() + 1) % c.size();
    let half = VIS_LEN / 2;
    let theirs = pattern::bytes(seed(next, 5), half);
    clear(c)?;
    ck(
        "write_local",
        c.ep.write_local(NB_SRC, &pattern::bytes(seed(c.rank(), 5), half)),
    )?;
    ck("barrier", c.ep.barrier())?;
    let d = |o: usize| NB_DST + o as u64;
    let s = |o: usize| NB_SRC + o as u64;
    // (destination offset, source offset, bytes) that each get must have copied.
    let mut want: Vec<(usize, usize, usize)> = Vec::new();
    let mut hs = Vec::new();

    // Vector: remote pieces out of order; local pieces 0 and 1 adjacent, then apart.
    let src = [(s(200_000), 70_000), (s(3), 10), (s(100), 300)];
    let dst = [(d(0), 60_000), (d(60_000), 10_005), (d(80_000), 305)];
    hs.push(ck(
        "get_vector_nb_local",
        c.ep.get_vector_nb_local(next, &src, &dst),
    )?);
    // The byte stream (70,000 + 10 + 300) fills local pieces of 60,000 + 10,005 (adjacent)
    // and 305.
    want.extend([
        (0, 200_000, 70_000),
        (70_000, 3, 5),
        (80_000, 8, 5),
        (80_005, 100, 300),
    ]);

    // Indexed: 100 pieces of 24 bytes, every 40 bytes in reverse order, into one run.
    let offs: Vec<u64> = (0..100u64).rev().map(|i| s(300_000) + i * 40).collect();
    let local: Vec<u64> = (0..100u64).map(|i| d(100_000) + i * 24).collect();
    hs.push(ck(
        "get_indexed_nb_local",
        c.ep.get_indexed_nb_local(next, &offs, 24, &local, 24),
    )?);
    for (k, &o) in offs.iter().enumerate() {
        want.push((100_000 + 24 * k, (o - NB_SRC) as usize, 24));
    }

    // Strided: a tile of 20 rows of 48 bytes (stride 100) into rows of 64.
    hs.push(ck(
        "get_strided_nb_local",
        c.ep.get_strided_nb_local(next, s(5_000), &[100], d(110_000), &[64], &[48, 20]),
    )?);
    for r in 0..20 {
        want.push((110_000 + 64 * r, 5_000 + 100 * r, 48));
    }
    // Rows longer than a Medium message, 3 of them, packed at the destination.
    hs.push(ck(
        "get_strided_nb_local",
        c.ep.get_strided_nb_local(next, s(0), &[70_001], d(120_000), &[70_001], &[70_001, 3]),
    )?);
    for r in 0..3 {
        want.push((120_000 + 70_001 * r, 70_001 * r, 70_001));
    }
    ck("wait_sync_all", c.ep.wait_sync_all(&mut hs))?;

    let mut got = vec![0u8; half];
    ck("read_local", c.ep.read_local(NB_DST, &mut got))?;
    let mut expect = vec![0u8; half];
    for &(dof, sof, n) in &want {
        expect[dof..dof + n].copy_from_slice(&theirs[sof..sof + n]);
    }
    if let Some(k) = (0..half).find(|&k| got[k] != expect[k]) {
        return Err(format!(
            "non-blocking gets: byte {k} of the destination is {}, expected {}",
            got[k], expect[k]
        ));
    }
    expect_usage(
        "local piece outside",
        c.ep.get_vector_nb_local(next, &[(s(0), 8)], &[(d(0), 4), (u64::MAX - 2, 4)]),
        "local side: piece 1 of 2",
    )?;
    ck("barrier", c.ep.barrier())
}

fn errors(c: &Ctx<'_>) -> Verdict {
    let next = (c.rank() + 1) % c.size();
    let seg = ck("segment_len", c.ep.segment_len_of(next))? as u64;
    let b = [0u8; 64];
    let dst = [(0u64, 8usize), (8, 8), (16, 8), (seg - 4, 8), (40, 8)];
    expect_usage(
        "vector piece outside",
        c.ep.put_vector(next, &dst, &[&b[..40]]),
        "piece 3 of 5",
    )?;
    let mut g = [0u8; 40];
    expect_usage(
        "vector get piece outside",
        c.ep.get_vector(next, &dst, &mut [&mut g[..]]),
        "piece 3 of 5",
    )?;
    expect_usage(
        "unequal totals",
        c.ep.put_vector(next, &[(0, 8)], &[&b[..9]]),
        "must be equal",
    )?;
    expect_usage(
        "indexed piece outside",
        c.ep.put_indexed(next, &[0, seg], 1, &[&b[..2]]),
        "piece 1 of 2",
    )?;
    expect_usage(
        "stride levels and counts",
        c.ep.put_strided(next, 0, &[16], &b, &[16], &[4]),
        "1 stride levels need 2 counts",
    )?;
    expect_usage(
        "overlapping target chunks",
        c.ep.put_strided(next, 0, &[2], &b, &[16], &[4, 3]),
        "would overlap",
    )?;
    expect_usage(
        "source beyond its buffer",
        c.ep.put_strided(next, 0, &[16], &b[..40], &[16], &[8, 4]),
        "the buffer holds 40",
    )?;
    expect_usage(
        "strided piece outside",
        c.ep.put_strided(next, seg - 20, &[16], &b, &[16], &[4, 3]),
        "lies outside",
    )?;
    ck("barrier", c.ep.barrier())
}
