//! The raw libfabric floor of the ofi conduit (cargo feature `ofi`), measured in the same run
//! by the same two processes through the conduit's own bindings (`amnet_ofi::raw`), on an
//! endpoint of their own of the provider the conduit chooses (`AMNET_OFI_PROVIDER_INCLUDE` /
//! `_EXCLUDE`), bound to loopback:
//!
//! - `raw_ofi_rtt`: an 8-byte tagged ping-pong between ranks 0 and 1 (each side posts its
//!   receive, injects the message, and reads its completion queue until the receive
//!   completes).
//!
//! - `raw_ofi_write`: blocking `fi_write`s from rank 0 into memory rank 1 registered (each
//!   asks for `FI_DELIVERY_COMPLETE` and waits for its completion, as the conduit's blocking
//!   put does), at 64 KiB and 1 MiB where the plan reaches them, timed alternately with
//!   amnet's blocking puts of the same size (`rma put_bw_paired`), while rank 1 reads its
//!   raw completion queue and polls amnet until rank 0's closing message arrives. The floor
//!   of the put bandwidth target.
//!
//! - `raw_ofi_read`: blocking `fi_read`s by rank 0 out of the same region, at the same sizes,
//!   timed alternately with amnet's blocking gets (`rma get_bw_paired`) in the same way.
//!
//! The two endpoints' addresses (and rank 1's region) travel through the ranks' segments
//! (written locally, read with a get after a barrier). Ranks other than 0 and 1 only take part
//! in the barriers.

use std::time::Instant;

use amnet::Endpoint;
use amnet_ofi::raw::{Choice, Completion, FiContext, OfiEndpoint};

use crate::measure::{time_paired, Samples, Side};
use crate::report::Row;
use crate::{BenchError, Plan};

/// Where each rank's endpoint address lies in its segment: a `u16` length, then the address.
const ADDR_OFF: u64 = 0;
/// Room for it.
const ADDR_ROOM: usize = 1024;
/// The ping-pong's tag.
const TAG: u64 = 0x0f1;
/// The tag of rank 0's message that ends the write floor.
const TAG_DONE: u64 = 0x0f2;
/// Where rank 1's region (base, key, u64 LE each) lies in its segment.
const REGION_OFF: u64 = ADDR_ROOM as u64;
/// Sizes of the write floor (those up to the plan's largest).
const WRITE_SIZES: [usize; 2] = [1 << 16, 1 << 20];

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

/// Start an operation with `post`, retried while the provider has no room (reading the queue
/// meanwhile), then wait for the completion of `ctx`, the context `post` gave it.
fn post_and_wait(
    ep: &OfiEndpoint,
    ctx: *mut FiContext,
    mut post: impl FnMut() -> amnet::Result<bool>,
) -> Result<(), BenchError> {
    while !post().map_err(ofi)? {
        let mut cq = [Completion::EMPTY; 4];
        let _ = ep.read_cq(&mut cq).map_err(ofi)?;
    }
    wait_recv(ep, ctx)
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
        // Rank 1's target memory for the write floor, registered where the provider offers
        // RMA.
        let mut target = Vec::new();
        let mut region = None;
        if me == 1 && raw.has_rma() {
            target = vec![0u8; WRITE_SIZES[1].min(plan.max_bytes).max(8)];
            // SAFETY: `target` outlives the region, closed before it is dropped.
            let r = unsafe { raw.register(target.as_mut_ptr(), target.len(), 11) }.map_err(ofi)?;
            let mut w = r.remote_base.to_le_bytes().to_vec();
            w.extend_from_slice(&r.key.to_le_bytes());
            ep.write_local(REGION_OFF, &w)?;
            region = Some(r);
        }
        Some((raw, addr, target, region))
    } else {
        None
    };
    ep.barrier()?;
    // Ranks 0 and 1 read each other's address (through amnet, which needs both polling), then
    // everyone waits for that before the ping-pong leaves amnet unpolled.
    let raw = match raw {
        Some((raw, addr, target, region)) => {
            let peer_rank = 1 - me;
            let mut b = vec![0u8; ADDR_ROOM];
            ep.get(peer_rank, ADDR_OFF, &mut b)?;
            let len = usize::from(u16::from_le_bytes([b[0], b[1]]));
            let peer_addr = b[2..2 + len.min(ADDR_ROOM - 2)].to_vec();
            let mut both = vec![Vec::new(), Vec::new()];
            both[me as usize] = addr;
            both[peer_rank as usize] = peer_addr;
            let at = raw.insert(&both).map_err(ofi)?;
            let mut rb = [0u8; 16];
            if me == 0 && raw.has_rma() {
                ep.get(1, REGION_OFF, &mut rb)?;
            }
            let word = |i: usize| {
                let mut w = [0u8; 8];
                w.copy_from_slice(&rb[8 * i..8 * i + 8]);
                u64::from_le_bytes(w)
            };
            let far = (word(0), word(1));
            Some((raw, at[peer_rank as usize], target, region, far))
        }
        None => None,
    };
    ep.barrier()?;
    if let Some((raw, peer, target, region, far)) = raw {
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
        if raw.has_rma() {
            rows.extend(write_floor(ep, &raw, peer, plan, (me == 0).then_some(far))?);
        }
        // Both sides are done with the endpoints before either closes its own.
        ep.barrier()?;
        if let Some(r) = region {
            raw.close_region(r);
        }
        drop(target);
        drop(raw);
    } else {
        ep.barrier()?;
    }
    Ok(rows)
}

/// Rank 0 (`far`: rank 1's region's base and key): time blocking writes into the region,
/// interleaved sample by sample with amnet's blocking puts of the same size into rank 1's
/// segment, then blocking reads out of it against amnet's blocking gets; rank 1 (`None`):
/// read the raw queue and poll amnet (whose puts and gets a provider with manual progress
/// serves only there) until rank 0's closing message. Returns rank 0's rows:
/// `raw_ofi_write` and `put_bw_paired` (with the write as its floor), `raw_ofi_read` and
/// `get_bw_paired` (with the read as its floor).
fn write_floor(
    ep: &Endpoint,
    raw: &OfiEndpoint,
    peer: u64,
    plan: &Plan,
    far: Option<(u64, u64)>,
) -> Result<Vec<Row>, BenchError> {
    let mut rows = Vec::new();
    let mut ctx = FiContext::new();
    let c: *mut FiContext = &mut ctx;
    let Some(far) = far else {
        let mut b = [0u8; 8];
        // SAFETY: `b` and `ctx` stay in place until the loop below read the completion.
        while !unsafe { raw.recv(None, TAG_DONE, 0, b.as_mut_ptr(), 8, c) }.map_err(ofi)? {}
        let mut cq = [Completion::EMPTY; 8];
        let t0 = Instant::now();
        loop {
            let n = raw.read_cq(&mut cq).map_err(ofi)?;
            if cq[..n].iter().any(|x| x.context == c) {
                return Ok(rows);
            }
            ep.poll()?;
            if t0.elapsed().as_secs() > 120 {
                return Err(BenchError::Usage(
                    "raw ofi write floor: no closing message for 120 s".into(),
                ));
            }
        }
    };
    let src = vec![5u8; WRITE_SIZES[1].min(plan.max_bytes).max(8)];
    let mut back = vec![0u8; src.len()];
    let mut land = vec![0u8; src.len()];
    for n in WRITE_SIZES.into_iter().filter(|&n| n <= plan.max_bytes) {
        let shape = plan.rma_shape(n);
        let write = || {
            post_and_wait(raw, c, || {
                // SAFETY: `src` and `ctx` stay in place until `post_and_wait` read the
                // completion; `n` fits rank 1's region (sized to the largest size).
                unsafe { raw.write(peer, far.0, far.1, 0, src.as_ptr(), n, None, true, c) }
            })
        };
        let (put, floor) =
            time_paired(plan.warmup(shape.0), shape.0, shape.1, |side| match side {
                Side::Op => ep.put(1, 0, &src[..n]).map_err(BenchError::Amnet),
                Side::Floor => write(),
            })?;
        rows.push(Row::bandwidth("floor", "raw_ofi_write", n, &floor, shape.1));
        rows.push(Row::bandwidth("rma", "put_bw_paired", n, &put, shape.1).with_floor(&floor));
        let read = |land: &mut [u8]| {
            post_and_wait(raw, c, || {
                // SAFETY: `land` and `ctx` stay in place until `post_and_wait` read the
                // completion; `n` fits rank 1's region and `land`.
                unsafe { raw.read(peer, far.0, far.1, 0, land.as_mut_ptr(), n, c) }
            })
        };
        let (get, floor) =
            time_paired(plan.warmup(shape.0), shape.0, shape.1, |side| match side {
                Side::Op => ep.get(1, 0, &mut back[..n]).map_err(BenchError::Amnet),
                Side::Floor => read(&mut land),
            })?;
        rows.push(Row::bandwidth("floor", "raw_ofi_read", n, &floor, shape.1));
        rows.push(Row::bandwidth("rma", "get_bw_paired", n, &get, shape.1).with_floor(&floor));
    }
    while !raw.inject(peer, TAG_DONE, None, &[0u8; 8]).map_err(ofi)? {
        let mut cq = [Completion::EMPTY; 4];
        let _ = raw.read_cq(&mut cq).map_err(ofi)?;
    }
    Ok(rows)
}
