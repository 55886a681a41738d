#![allow(clippy::cast_possible_truncation)] // test data patterns
//! Smoke tests of the collectives in thread mode (the conduit test suite has the full
//! property tests as multi-process jobs).

use amnet_coll::raw::Collectives;
use amnet_coll::{flags, Addr, Coll, Layout, RedOp};
use amnet_core::{Endpoint, HandlerTable};

const SEG: usize = 1 << 20;

fn job(ranks: u32, f: impl Fn(&Endpoint, &Coll) + Sync) {
    let out = amnet_smp::run_threads(ranks, |c| {
        let ep = Endpoint::new(Box::new(c)).expect("endpoint");
        ep.attach(HandlerTable::new(), SEG).expect("attach");
        let coll = Coll::init(&ep, None, 0, &[]).expect("coll init");
        f(&ep, &coll);
        ep.barrier().expect("final barrier");
    })
    .expect("job");
    for o in out {
        assert!(matches!(o, amnet_smp::RankOutcome::Returned(_)), "{o:?}");
    }
}

const MODES: [u32; 4] = [
    flags::ALLSYNC,
    flags::NOSYNC,
    flags::MYSYNC,
    flags::IN_NOSYNC | flags::OUT_ALLSYNC,
];

#[test]
fn data_movement_every_mode() {
    for ranks in [1u32, 2, 3, 4] {
        job(ranks, |ep, coll| {
            let me = ep.rank() as usize;
            let p = ranks as usize;
            for (m, &mode) in MODES.iter().enumerate() {
                let f = mode | flags::SINGLE;
                // OUT_NOSYNC data is in place after a barrier, not at the return.
                let settle = || {
                    if mode & flags::OUT_NOSYNC != 0 {
                        ep.barrier().unwrap();
                    }
                };
                let nb = 100 + m;
                let src: Vec<u8> = (0..nb * p).map(|i| (i * 7 + me * 13 + m) as u8).collect();
                ep.write_local(0, &src).unwrap();
                // broadcast from the last rank
                let root = (p - 1) as u32;
                // SAFETY: segment offsets (and InPlace) only: no pointer address to keep valid.
                unsafe {
                    coll.broadcast(coll.world(), Addr::seg(65536), root, Addr::seg(0), nb, f)
                }
                .unwrap();
                settle();
                let mut got = vec![0u8; nb];
                ep.read_local(65536, &mut got).unwrap();
                let want: Vec<u8> = (0..nb).map(|i| (i * 7 + (p - 1) * 13 + m) as u8).collect();
                assert_eq!(got, want, "broadcast rank {me} mode {m}");
                ep.barrier().unwrap();
                // gather_all: block i from rank i (its first nb bytes)
                // SAFETY: segment offsets (and InPlace) only: no pointer address to keep valid.
                unsafe { coll.gather_all(coll.world(), Addr::seg(131072), Addr::seg(0), nb, f) }
                    .unwrap();
                settle();
                let mut got = vec![0u8; nb * p];
                ep.read_local(131072, &mut got).unwrap();
                for r in 0..p {
                    let want: Vec<u8> = (0..nb).map(|i| (i * 7 + r * 13 + m) as u8).collect();
                    assert_eq!(
                        &got[r * nb..(r + 1) * nb],
                        &want[..],
                        "gather_all block {r}"
                    );
                }
                ep.barrier().unwrap();
                // exchange: block j of rank i -> block i of rank j
                // SAFETY: segment offsets (and InPlace) only: no pointer address to keep valid.
                unsafe { coll.exchange(coll.world(), Addr::seg(262144), Addr::seg(0), nb, f) }
                    .unwrap();
                settle();
                let mut got = vec![0u8; nb * p];
                ep.read_local(262144, &mut got).unwrap();
                for r in 0..p {
                    let want: Vec<u8> = (me * nb..(me + 1) * nb)
                        .map(|i| (i * 7 + r * 13 + m) as u8)
                        .collect();
                    assert_eq!(&got[r * nb..(r + 1) * nb], &want[..], "exchange block {r}");
                }
                ep.barrier().unwrap();
            }
        });
    }
}

#[test]
fn typed_reductions() {
    job(3, |ep, coll| {
        let me = ep.rank();
        let s = coll
            .reduce_to_all_typed(RedOp::Sum, u64::from(me) + 1, flags::ALLSYNC)
            .unwrap();
        assert_eq!(s, 6);
        let pre = coll
            .prefix_reduce_typed(RedOp::Sum, i64::from(me) + 1, false, flags::MYSYNC)
            .unwrap();
        assert_eq!(pre, [1, 3, 6][me as usize]);
        let ex = coll
            .prefix_reduce_typed(RedOp::Prod, f64::from(me) + 2.0, true, flags::MYSYNC)
            .unwrap();
        assert_eq!(ex, [2.0, 2.0, 6.0][me as usize]);
        let mx = coll
            .reduce_to_all_loc(RedOp::MaxLoc, (me % 2) as i32, u64::from(me), flags::NOSYNC)
            .unwrap();
        assert_eq!((mx.value, mx.loc), (1, 1));
        let r = coll
            .reduce_typed(0, RedOp::Max, me * 10, flags::ALLSYNC)
            .unwrap();
        assert_eq!(r, (me == 0).then_some(20));
    });
}

#[test]
fn block_cyclic_prefix_with_reblocking() {
    job(3, |ep, coll| {
        let me = ep.rank() as usize;
        let n = 20usize;
        let (sblk, soff, dblk, doff) = (2usize, 1usize, 3usize, 4usize);
        // Source element k lives at global index soff + k.
        let np = 3;
        let mut src = vec![0u64; 64];
        for k in 0..n {
            let g = soff + k;
            let b = g / sblk;
            if b % np == me {
                src[(b / np) * sblk + g % sblk] = k as u64 + 1;
            }
        }
        let bytes: Vec<u8> = src.iter().flat_map(|v| v.to_ne_bytes()).collect();
        ep.write_local(0, &bytes).unwrap();
        ep.write_local(4096, &[0u8; 512]).unwrap();
        let func = amnet_coll::builtin::builtin_index(RedOp::Sum, amnet_coll::ElemType::U64)
            .expect("sum:u64 exists");
        // SAFETY: segment offsets (and InPlace) only: no pointer address to keep valid.
        unsafe {
            coll.prefix_reduce(
                coll.world(),
                Addr::seg(4096),
                Layout::block_cyclic(dblk, doff),
                Addr::seg(0),
                Layout::block_cyclic(sblk, soff),
                8,
                n,
                func,
                0,
                flags::ALLSYNC | flags::SINGLE,
            )
        }
        .unwrap();
        let mut out = vec![0u8; 512];
        ep.read_local(4096, &mut out).unwrap();
        let out: Vec<u64> = out
            .chunks_exact(8)
            .map(|c| u64::from_ne_bytes(c.try_into().unwrap()))
            .collect();
        for k in 0..n {
            let g = doff + k;
            let b = g / dblk;
            if b % np == me {
                let want = ((k + 1) * (k + 2) / 2) as u64;
                assert_eq!(
                    out[(b / np) * dblk + g % dblk],
                    want,
                    "rank {me} element {k}"
                );
            }
        }
    });
}

#[test]
fn vector_reductions_sum() {
    for ranks in [1u32, 2, 3, 4] {
        job(ranks, |ep, coll| {
            let me = ep.rank() as u64;
            let p = u64::from(ranks);
            let n = 100usize;
            let func = amnet_coll::builtin::builtin_index(RedOp::Sum, amnet_coll::ElemType::U64)
                .expect("sum:u64 exists");
            // Rank r's element i is (r + 1) * (i + 1).
            let src: Vec<u8> = (0..n as u64)
                .flat_map(|i| ((me + 1) * (i + 1)).to_ne_bytes())
                .collect();
            let read = |off: u64| -> Vec<u64> {
                let mut b = vec![0u8; n * 8];
                ep.read_local(off, &mut b).unwrap();
                b.chunks_exact(8)
                    .map(|c| u64::from_ne_bytes(c.try_into().unwrap()))
                    .collect()
            };
            // The sum of (r + 1) over ranks 0..k is k (k + 1) / 2.
            let tri = |k: u64| k * (k + 1) / 2;
            let f = flags::MYSYNC | flags::SINGLE;
            ep.write_local(0, &src).unwrap();
            // SAFETY: segment offsets (and InPlace) only: no pointer address to keep valid.
            unsafe {
                coll.reduce_elems_to_all(
                    coll.world(),
                    Addr::seg(4096),
                    Addr::seg(0),
                    8,
                    n,
                    func,
                    0,
                    f,
                )
            }
            .unwrap();
            let got = read(4096);
            assert!(got
                .iter()
                .enumerate()
                .all(|(i, &v)| v == tri(p) * (i as u64 + 1)));
            // In place: the destination holds the source.
            ep.write_local(8192, &src).unwrap();
            // SAFETY: segment offsets (and InPlace) only: no pointer address to keep valid.
            unsafe {
                coll.scan_elems(
                    coll.world(),
                    Addr::seg(8192),
                    Addr::InPlace,
                    8,
                    n,
                    func,
                    0,
                    f,
                )
            }
            .unwrap();
            let got = read(8192);
            assert!(got
                .iter()
                .enumerate()
                .all(|(i, &v)| v == tri(me + 1) * (i as u64 + 1)));
            ep.write_local(12288, &[0xee; 800]).unwrap();
            // SAFETY: segment offsets (and InPlace) only: no pointer address to keep valid.
            unsafe {
                coll.exclusive_scan_elems(
                    coll.world(),
                    Addr::seg(12288),
                    Addr::seg(0),
                    8,
                    n,
                    func,
                    0,
                    f,
                )
            }
            .unwrap();
            let got = read(12288);
            if me == 0 {
                assert!(got.iter().all(|&v| v == u64::from_ne_bytes([0xee; 8])));
            } else {
                assert!(got
                    .iter()
                    .enumerate()
                    .all(|(i, &v)| v == tri(me) * (i as u64 + 1)));
            }
            let root = ranks - 1;
            // SAFETY: segment offsets (and InPlace) only: no pointer address to keep valid.
            unsafe {
                coll.reduce_elems(
                    coll.world(),
                    root,
                    Addr::seg(16384),
                    Addr::seg(0),
                    8,
                    n,
                    func,
                    0,
                    f,
                )
            }
            .unwrap();
            if ep.rank() == root {
                let got = read(16384);
                assert!(got
                    .iter()
                    .enumerate()
                    .all(|(i, &v)| v == tri(p) * (i as u64 + 1)));
            }
        });
    }
}
