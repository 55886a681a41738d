//! The raw libfabric floor of the ofi conduit (cargo feature `ofi`), measured in the same run
//! by the same two processes through the conduit's own bindings (`amnet_ofi::raw`), on an
//! endpoint of their own of the provider the conduit chooses (`AMNET_OFI_PROVIDER_INCLUDE` /
//! `_EXCLUDE`), bound to loopback:
//!
//! - `raw_ofi_rtt`: an 8-byte tagged ping-pong between ranks 0 and 1 (each side posts its
//!   receive, injects the message, and reads its completion queue until the receive
//!   completes).
//!
//! The two endpoints' addresses travel through the ranks' segments (written locally, read with
//! a get after a barrier). Ranks other than 0 and 1 only take part in the barriers.

use std::time::Instant;

use amnet::Endpoint;
use amnet_ofi::raw::{Choice, Completion, FiContext, OfiEndpoint};

use crate::measure::Samples;
use crate::report::Row;
use crate::{BenchError, Plan};

/// Where each rank's endpoint address lies in its segment: a `u16` length, then the address.
const ADDR_OFF: u64 = 0;
/// Room for it.
const ADDR_ROOM: usize = 1024;
/// The ping-pong's tag.
const TAG: u64 = 0x0f1;

fn ofi(e: amnet::Error) -> BenchError {
    BenchError::Amnet(e)
}

/// Read the queue until the receive with context `ctx` completes.
fn wait_recv(ep: &OfiEndpoint, ctx: *mut FiContext) -> Result<(), BenchError> {
    let mut c = [Completion::EMPTY; 8];
    let t0 = Instant::now();
    loop {
        let n = ep.read_cq(&mut c).map_err(ofi)?;
        if c[..n].iter().any(|x| x.context == ctx) {
            return Ok(());
        }
        if t0.elapsed().as_secs() > 30 {
            return Err(BenchError::Usage(
                "raw ofi ping-pong: no message for 30 s".into(),
            ));
        }
    }
}

/// One round of the ping-pong from this side: post the receive, send (first when `first`),
/// wait for the peer's message (and send after it when not `first`).
fn round(
    ep: &OfiEndpoint,
    peer: u64,
    first: bool,
    buf: &mut [u8; 8],
    ctx: &mut FiContext,
) -> Result<(), BenchError> {
    let c: *mut FiContext = ctx;
    let p = buf.as_mut_ptr();
    // SAFETY: `buf` and `ctx` stay in place until `wait_recv` has read this receive's
    // completion.
    while !unsafe { ep.recv(None, TAG, 0, p, 8, c) }.map_err(ofi)? {}
    let send = |ep: &OfiEndpoint| -> Result<(), BenchError> {
        while !ep.inject(peer, TAG, None, &[7u8; 8]).map_err(ofi)? {
            // Drive the provider (connection set-up). Nothing this side waits for can
            // complete meanwhile: the peer answers only after this message.
            let mut c = [Completion::EMPTY; 4];
            let _ = ep.read_cq(&mut c).map_err(ofi)?;
        }
        Ok(())
    };
    if first {
        send(ep)?;
        wait_recv(ep, c)
    } else {
        wait_recv(ep, c)?;
        send(ep)
    }
}

/// Collective: the raw ofi floor. Returns the rows on rank 0.
pub(crate) fn run(ep: &Endpoint, plan: &Plan) -> Result<Vec<Row>, BenchError> {
    let me = ep.rank();
    let mut rows = Vec::new();
    let env = |name: &str| std::env::var(name).unwrap_or_default();
    let raw = if me < 2 {
        let choice = Choice::from_lists(
            &env("AMNET_OFI_PROVIDER_INCLUDE"),
            &env("AMNET_OFI_PROVIDER_EXCLUDE"),
            Some("127.0.0.1"),
        );
        let raw = OfiEndpoint::open(&choice).map_err(ofi)?;
        let addr = raw.address().map_err(ofi)?;
        if addr.len() + 2 > ADDR_ROOM {
            return Err(BenchError::Usage(format!(
                "raw ofi: an address of {} bytes",
                addr.len()
            )));
        }
        let mut b = u16::try_from(addr.len())
            .unwrap_or(0)
            .to_le_bytes()
            .to_vec();
        b.extend_from_slice(&addr);
        ep.write_local(ADDR_OFF, &b)?;
        Some((raw, addr))
    } else {
        None
    };
    ep.barrier()?;
    // Ranks 0 and 1 read each other's address (through amnet, which needs both polling), then
    // everyone waits for that before the ping-pong leaves amnet unpolled.
    let raw = match raw {
        Some((raw, addr)) => {
            let peer_rank = 1 - me;
            let mut b = vec![0u8; ADDR_ROOM];
            ep.get(peer_rank, ADDR_OFF, &mut b)?;
            let len = usize::from(u16::from_le_bytes([b[0], b[1]]));
            let peer_addr = b[2..2 + len.min(ADDR_ROOM - 2)].to_vec();
            let mut both = vec![Vec::new(), Vec::new()];
            both[me as usize] = addr;
            both[peer_rank as usize] = peer_addr;
            let at = raw.insert(&both).map_err(ofi)?;
            Some((raw, at[peer_rank as usize]))
        }
        None => None,
    };
    ep.barrier()?;
    if let Some((raw, peer)) = raw {
        let mut buf = [0u8; 8];
        let mut ctx = FiContext::new();
        let warm = plan.warmup(plan.iters);
        let n = plan.iters;
        if me == 0 {
            for _ in 0..warm {
                round(&raw, peer, true, &mut buf, &mut ctx)?;
            }
            let mut ns = Vec::with_capacity(n);
            for _ in 0..n {
                let t = Instant::now();
                round(&raw, peer, true, &mut buf, &mut ctx)?;
                ns.push(t.elapsed().as_nanos() as f64);
            }
            rows.push(Row::latency(
                "floor",
                "raw_ofi_rtt",
                8,
                &Samples::from_ns(ns),
                1,
            ));
        } else {
            for _ in 0..warm + n {
                round(&raw, peer, false, &mut buf, &mut ctx)?;
            }
        }
        // Both sides are done with the endpoints before either closes its own.
        ep.barrier()?;
        drop(raw);
    } else {
        ep.barrier()?;
    }
    Ok(rows)
}
