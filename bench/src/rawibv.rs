//! The raw verbs floor of the ibv conduit on its emulated device (`AMNET_IBV_DEVICE=emu`),
//! measured in the same run by the same two processes through the conduit's own [`Verbs`]
//! trait, on devices, queues and queue pairs of their own:
//!
//! - `raw_ibv_rtt`: an 8-byte ping-pong between ranks 0 and 1: each side posts a receive,
//!   sends its 8 bytes inline and signaled (as the conduit sends a Short), and polls its
//!   completion queue until the peer's message arrived, reading its send's completion on the
//!   way. The floor of the Short round-trip target.
//!
//! The two queue pairs' addresses travel through the ranks' segments (written locally, read
//! with a get after a barrier). Ranks other than 0 and 1 only take part in the barriers. On a
//! real HCA the floor to compare with is `ib_send_lat` / `ib_write_lat` of perftest, run
//! apart (spec/ibv.md).

use std::time::Instant;

use amnet::Endpoint;
use amnet_ibv::emu::{EmuDevice, EmuQp};
use amnet_ibv::verbs::{
    Access, ConnectAttr, MemoryRegion, QpInit, RecvWr, SendOp, SendWr, Sge, Verbs, Wc, WcStatus,
};

use crate::measure::Samples;
use crate::report::Row;
use crate::{BenchError, Plan};

/// Where each rank's queue pair address lies in its segment: a `u16` length, then the address.
const ADDR_OFF: u64 = 0;
/// Room for it.
const ADDR_ROOM: usize = 1024;

fn ibv(e: amnet::Error) -> BenchError {
    BenchError::Amnet(e)
}

/// The objects of one side of the ping-pong.
struct Side {
    dev: EmuDevice,
    cq: <EmuDevice as Verbs>::Cq,
    qp: EmuQp,
    mr: <EmuDevice as Verbs>::Mr,
    buf: Box<[u8; 8]>,
}

/// One round from this side: post the receive, send (first when `first`), wait for the
/// peer's message (and send after it when not `first`), reading the send's completion too.
fn round(s: &mut Side, first: bool) -> Result<(), BenchError> {
    let wr = RecvWr {
        wr_id: 1,
        sge: Sge {
            addr: s.buf.as_mut_ptr() as u64,
            len: 8,
            lkey: s.mr.lkey(),
        },
    };
    // SAFETY: `buf` stays in place until this round has read the receive's completion.
    unsafe { s.dev.post_recv(&s.qp, &[wr]) }.map_err(ibv)?;
    let send = |s: &Side| -> Result<(), BenchError> {
        let msg = [7u8; 8];
        let sg = [Sge {
            addr: msg.as_ptr() as u64,
            len: 8,
            lkey: 0,
        }];
        let wr = SendWr {
            wr_id: 2,
            op: SendOp::Send,
            sg: &sg,
            signaled: true,
            inline: true,
            fence: false,
        };
        // SAFETY: an inline payload is copied by the post.
        unsafe { s.dev.post_send(&s.qp, &[wr]) }.map_err(ibv)
    };
    if first {
        send(s)?;
    }
    let (mut got_recv, mut got_send) = (false, !first);
    let mut wcs = [Wc::EMPTY; 4];
    let t0 = Instant::now();
    while !(got_recv && got_send) {
        let n = s.dev.poll_cq(&s.cq, &mut wcs).map_err(ibv)?;
        for w in &wcs[..n] {
            if w.status != WcStatus::Success {
                return Err(BenchError::Usage(format!(
                    "raw ibv ping-pong: {}",
                    w.status.describe()
                )));
            }
            match w.wr_id {
                1 => {
                    got_recv = true;
                    if !first {
                        send(s)?;
                        got_send = false;
                    }
                }
                _ => got_send = true,
            }
        }
        if t0.elapsed().as_secs() > 30 {
            return Err(BenchError::Usage(
                "raw ibv ping-pong: no message for 30 s".into(),
            ));
        }
    }
    Ok(())
}

/// Open this rank's side and publish its address in the segment.
fn open(ep: &Endpoint) -> Result<Side, BenchError> {
    let dev = EmuDevice::open(&format!("amnet-bench-ibv-{}-", std::process::id())).map_err(ibv)?;
    let cq = dev.create_cq(64).map_err(ibv)?;
    let init = QpInit {
        max_send_wr: 16,
        max_recv_wr: 16,
        max_inline: 64,
    };
    let qp = dev.create_qp(&cq, &cq, None, &init).map_err(ibv)?;
    dev.to_init(&qp).map_err(ibv)?;
    let mut buf = Box::new([0u8; 8]);
    // SAFETY: `buf` is boxed in the side, which drops the region first (field order).
    let mr = unsafe { dev.reg_mr(buf.as_mut_ptr(), 8, Access::LOCAL_WRITE) }.map_err(ibv)?;
    let addr = dev.address(&qp);
    if addr.len() + 2 > ADDR_ROOM {
        return Err(BenchError::Usage(format!(
            "raw ibv: an address of {} bytes",
            addr.len()
        )));
    }
    let mut b = u16::try_from(addr.len())
        .unwrap_or(0)
        .to_le_bytes()
        .to_vec();
    b.extend_from_slice(&addr);
    ep.write_local(ADDR_OFF, &b)?;
    Ok(Side {
        dev,
        cq,
        qp,
        mr,
        buf,
    })
}

/// Collective: the raw verbs floor. Returns the rows on rank 0.
pub(crate) fn run(ep: &Endpoint, plan: &Plan) -> Result<Vec<Row>, BenchError> {
    let me = ep.rank();
    let mut rows = Vec::new();
    let emu = std::env::var("AMNET_IBV_DEVICE").is_ok_and(|d| d == "emu");
    let mine = if me < 2 && emu { Some(open(ep)?) } else { None };
    ep.barrier()?;
    if let Some(s) = &mine {
        let mut b = vec![0u8; ADDR_ROOM];
        ep.get(1 - me, ADDR_OFF, &mut b)?;
        let len = usize::from(u16::from_le_bytes([b[0], b[1]])).min(ADDR_ROOM - 2);
        let attr = ConnectAttr::default();
        s.dev.to_rtr(&s.qp, &b[2..2 + len], &attr).map_err(ibv)?;
        s.dev.to_rts(&s.qp, &attr).map_err(ibv)?;
    }
    ep.barrier()?;
    if let Some(mut s) = mine {
        let warm = plan.warmup(plan.iters);
        let n = plan.iters;
        if me == 0 {
            for _ in 0..warm {
                round(&mut s, true)?;
            }
            let mut ns = Vec::with_capacity(n);
            for _ in 0..n {
                let t = Instant::now();
                round(&mut s, true)?;
                ns.push(t.elapsed().as_nanos() as f64);
            }
            rows.push(Row::latency(
                "floor",
                "raw_ibv_rtt",
                8,
                &Samples::from_ns(ns),
                1,
            ));
        } else {
            for _ in 0..warm + n {
                round(&mut s, false)?;
            }
        }
        // Both sides are done before either closes its device.
        ep.barrier()?;
    } else {
        ep.barrier()?;
    }
    Ok(rows)
}
