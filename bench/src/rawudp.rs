//! The udp conduit's floors, measured between ranks 0 and 1 of the same job with UDP
//! sockets of the benchmark's own (no amnet code in the loop):
//!
//! - `raw_udp_rtt`: an 8-byte datagram ping-pong. Both sides spin on non-blocking `recv`
//!   (yielding the core after [`SPINS_BEFORE_YIELD`] empty polls, as amnet's waits do), and
//!   answer with `send`. Each socket is connected to the other, the fastest path a raw
//!   ping-pong has: the kernel keeps a connected socket's route instead of looking it up per
//!   datagram, and demultiplexes datagrams to a connected socket early. (amnet gets the first
//!   half: it sends lone datagrams on sockets connected to their destination; it receives
//!   every peer's datagrams on one unconnected socket.) The pings are timed in blocks
//!   interleaved with the amnet round trips they are compared with (see `latency`).
//! - `raw_udp_stream_bw`: rank 0 sends a transfer of N bytes as back-to-back datagrams of
//!   up to 64 KiB ([`CHUNK`] bytes of data plus a 16-byte header: the largest UDP payload
//!   over IPv4 is 65,507 bytes); rank 1 receives them with non-blocking `recv` and sends an
//!   8-byte acknowledgement once all N bytes have arrived. One sample is one transfer and
//!   its acknowledgement, as for a blocking put.
//!
//! The sockets are bound like the conduit's (`AMNET_UDP_BIND`, else 127.0.0.1), with the
//! conduit's 8 MiB socket buffers, so both take the same path through the kernel. Their
//! addresses are exchanged through amnet: each rank writes its own at offset 0 of its
//! segment, and after a barrier gets its peer's.
//!
//! # Lost datagrams
//!
//! Loopback does not lose datagrams unless a socket buffer overflows, but a floor must not
//! hang if one is lost. Every datagram carries a sequence number that both ranks derive
//! from the plan (each block of pings and each sweep point has a fixed range), so stale
//! datagrams from an earlier block are recognized and dropped. When rank 0 waits
//! [`REPLY_TIMEOUT`] for a pong or an acknowledgement, the datagram (or its answer) counts
//! as lost: the sample is not recorded and the rest of the block or point is skipped. Rank
//! 1 leaves a block or point when it has answered its last sequence number, or after
//! [`IDLE_TIMEOUT`] without a datagram of it (rank 0 gave up). Both then go on in step,
//! since what follows synchronizes through amnet. Rank 0 reports how many were lost.

use std::io::{self, ErrorKind};
use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use amnet::Endpoint;

use crate::measure::Samples;
use crate::report::Row;
use crate::{BenchError, Plan};

/// Data bytes per streaming datagram: 64 KiB less what the header and IPv4 take.
pub(crate) const CHUNK: usize = 65_507 - HDR;
/// Header of a streaming datagram: transfer id (with [`STREAM_TAG`]) and transfer length.
const HDR: usize = 16;
/// Set in the ids of streaming datagrams and their acks, so that no stale one can be taken
/// for a pong.
const STREAM_TAG: u64 = 1 << 63;
/// How long rank 0 waits for a pong or an acknowledgement before it counts a loss.
pub(crate) const REPLY_TIMEOUT: Duration = Duration::from_millis(50);
/// How long rank 1 waits without a datagram of the current block before it leaves it.
pub(crate) const IDLE_TIMEOUT: Duration = Duration::from_millis(250);
/// Empty polls before a waiter starts yielding its core (amnet's default `AMNET_SPIN`).
const SPINS_BEFORE_YIELD: u32 = 2000;
/// Bytes of the address record each rank writes at offset 0 of its segment.
const ADDR_REC: usize = 64;
/// Socket buffer sizes (those of the udp conduit).
const SOCK_BUF: libc::c_int = 8 << 20;

/// Polls a non-blocking socket: spins, then yields, and tells when a deadline has passed.
struct Waiter {
    idle: u32,
    since: Instant,
    limit: Duration,
}

impl Waiter {
    fn new(limit: Duration) -> Waiter {
        Waiter {
            idle: 0,
            since: Instant::now(),
            limit,
        }
    }

    /// Something arrived: the deadline counts from now.
    fn reset(&mut self) {
        self.idle = 0;
        self.since = Instant::now();
    }

    /// Nothing arrived: back off a little. False once the deadline has passed.
    fn snooze(&mut self) -> bool {
        self.idle = self.idle.saturating_add(1);
        if self.idle > SPINS_BEFORE_YIELD {
            std::thread::yield_now();
        }
        // Reading the clock costs as much as a few spins: look every 64 empty polls.
        self.idle % 64 != 0 || self.since.elapsed() < self.limit
    }
}

fn set_buf(fd: i32, opt: libc::c_int) {
    let v = SOCK_BUF;
    let len = libc::socklen_t::try_from(std::mem::size_of::<libc::c_int>()).unwrap_or(4);
    // SAFETY: setsockopt reads `len` bytes from a live local of that size; a failure only
    // leaves the default buffer size.
    unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            opt,
            std::ptr::from_ref(&v).cast(),
            len,
        );
    }
}

/// The address the conduit binds (`AMNET_UDP_BIND`, else loopback).
fn bind_ip() -> IpAddr {
    amnet::Source::env()
        .ip(&amnet::config::vars::UDP_BIND)
        .ok()
        .flatten()
        .unwrap_or(IpAddr::V4(Ipv4Addr::LOCALHOST))
}

fn os(what: &'static str) -> impl FnOnce(io::Error) -> BenchError {
    move |e| BenchError::Os(what, e)
}

/// One end of the raw UDP floors (rank 0 or 1; other ranks hold none).
pub(crate) struct RawUdp {
    /// Connected to the peer's socket.
    sock: UdpSocket,
    /// Last ping sequence number of the blocks so far (the same on both ranks).
    seq: u64,
    /// Last transfer id of the points so far (the same on both ranks).
    xfer: u64,
    /// Receive buffer, room for any datagram.
    rx: Vec<u8>,
    /// Send buffer of streaming datagrams.
    tx: Vec<u8>,
    /// Blocks and points cut short by a loss (rank 0).
    losses: u64,
}

impl RawUdp {
    /// Collective: ranks 0 and 1 open their sockets and exchange addresses through their
    /// segments (offset 0, [`ADDR_REC`] bytes, which must be free until the next barrier
    /// after this returns). Returns the socket end on ranks 0 and 1, `None` elsewhere.
    pub(crate) fn setup(ep: &Endpoint) -> Result<Option<RawUdp>, BenchError> {
        let me = ep.rank();
        let mut sock = None;
        if me <= 1 {
            let s = UdpSocket::bind(SocketAddr::new(bind_ip(), 0)).map_err(os("bind raw UDP"))?;
            s.set_nonblocking(true).map_err(os("set_nonblocking"))?;
            let fd = s.as_raw_fd();
            for opt in [
                libc::SO_RCVBUF,
                libc::SO_SNDBUF,
                libc::SO_RCVBUFFORCE,
                libc::SO_SNDBUFFORCE,
            ] {
                set_buf(fd, opt);
            }
            let mut local = s.local_addr().map_err(os("local_addr"))?;
            if local.ip().is_unspecified() {
                local.set_ip(IpAddr::V4(Ipv4Addr::LOCALHOST));
            }
            let mut rec = [0u8; ADDR_REC];
            let text = local.to_string();
            let n = text.len().min(ADDR_REC - 1);
            rec[0] = u8::try_from(n).unwrap_or(0);
            rec[1..=n].copy_from_slice(&text.as_bytes()[..n]);
            ep.write_local(0, &rec)?;
            sock = Some(s);
        }
        ep.barrier()?;
        let mut out = None;
        if let Some(sock) = sock {
            let mut rec = [0u8; ADDR_REC];
            ep.get(1 - me, 0, &mut rec)?;
            let n = usize::from(rec[0]).min(ADDR_REC - 1);
            let text = String::from_utf8_lossy(&rec[1..=n]).into_owned();
            let peer: SocketAddr = text.parse().map_err(|_| {
                BenchError::Usage(format!("rank {} published a bad address {text:?}", 1 - me))
            })?;
            sock.connect(peer).map_err(os("connect raw UDP"))?;
            out = Some(RawUdp {
                sock,
                seq: 0,
                xfer: 0,
                rx: vec![0u8; 65_536],
                tx: vec![0u8; HDR + CHUNK],
                losses: 0,
            });
        }
        ep.barrier()?;
        Ok(out)
    }

    /// Blocks and sweep points cut short by a lost datagram (rank 0).
    pub(crate) fn losses(&self) -> u64 {
        self.losses
    }

    /// Send `bytes` to the peer, retrying while the socket buffer is full. False when it
    /// stayed full for [`REPLY_TIMEOUT`].
    fn send(&self, bytes: &[u8]) -> bool {
        let mut w = Waiter::new(REPLY_TIMEOUT);
        loop {
            match self.sock.send(bytes) {
                Ok(_) => return true,
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::Interrupted) => {
                    if !w.snooze() {
                        return false;
                    }
                }
                // Anything else (e.g. ECONNREFUSED after an ICMP error): the datagram is lost.
                Err(_) => return false,
            }
        }
    }

    /// Poll for one datagram: its length, or `None` when none is waiting.
    #[inline]
    fn try_recv(&mut self) -> Option<usize> {
        self.sock.recv(&mut self.rx).ok()
    }

    /// Rank 0: `n` pings (the first `warmup` untimed), each timed from `send` to the
    /// matching pong; the others' times are appended to `out` in nanoseconds. A lost ping
    /// or pong ends the block.
    pub(crate) fn ping_block(&mut self, n: usize, warmup: usize, out: &mut Vec<f64>) {
        let base = self.seq;
        self.seq += n as u64;
        for i in 0..n {
            let s = base + 1 + i as u64;
            let t = Instant::now();
            if !self.send(&s.to_ne_bytes()) || !self.wait_pong(s) {
                self.losses += 1;
                return;
            }
            let ns = t.elapsed().as_nanos() as f64;
            if i >= warmup {
                out.push(ns);
            }
        }
    }

    fn wait_pong(&mut self, s: u64) -> bool {
        let mut w = Waiter::new(REPLY_TIMEOUT);
        loop {
            match self.try_recv() {
                Some(8) if self.rx[..8] == s.to_ne_bytes() => return true,
                Some(_) => {} // stale
                None => {
                    if !w.snooze() {
                        return false;
                    }
                }
            }
        }
    }

    /// Rank 1: answer the `n` pings of the matching [`RawUdp::ping_block`].
    pub(crate) fn pong_block(&mut self, n: usize) {
        let base = self.seq;
        let last = base + n as u64;
        self.seq = last;
        let mut w = Waiter::new(IDLE_TIMEOUT);
        loop {
            match self.try_recv() {
                Some(8) => {
                    let mut b = [0u8; 8];
                    b.copy_from_slice(&self.rx[..8]);
                    let s = u64::from_ne_bytes(b);
                    if s <= base || s > last {
                        continue; // stale, or a stream ack's id: not ours
                    }
                    w.reset();
                    if !self.send(&b) || s == last {
                        return;
                    }
                }
                Some(_) => {}
                None => {
                    if !w.snooze() {
                        return;
                    }
                }
            }
        }
    }

    /// Rank 0: `warmup + samples` transfers of `bytes` bytes; returns the times of the last
    /// `samples` (fewer if a datagram was lost).
    fn stream_send(&mut self, bytes: usize, warmup: usize, samples: usize) -> Samples {
        let count = warmup + samples;
        let base = self.xfer;
        self.xfer += count as u64;
        let mut ns = Vec::with_capacity(samples);
        self.tx[8..16].copy_from_slice(&(bytes as u64).to_ne_bytes());
        for i in 0..count {
            let id = (base + 1 + i as u64) | STREAM_TAG;
            self.tx[..8].copy_from_slice(&id.to_ne_bytes());
            let t = Instant::now();
            let mut left = bytes;
            let mut ok = true;
            while left > 0 && ok {
                let n = left.min(CHUNK);
                ok = self.send(&self.tx[..HDR + n]);
                left -= n;
            }
            if !ok || !self.wait_ack(id) {
                self.losses += 1;
                break;
            }
            if i >= warmup {
                ns.push(t.elapsed().as_nanos() as f64);
            }
        }
        Samples::from_ns(ns)
    }

    fn wait_ack(&mut self, id: u64) -> bool {
        let mut w = Waiter::new(REPLY_TIMEOUT);
        loop {
            match self.try_recv() {
                Some(8) if self.rx[..8] == id.to_ne_bytes() => return true,
                Some(_) => {}
                None => {
                    if !w.snooze() {
                        return false;
                    }
                }
            }
        }
    }

    /// Rank 1: receive the transfers of the matching [`RawUdp::stream_send`], acknowledging
    /// each once all its bytes are in.
    fn stream_recv(&mut self, count: usize) {
        let base = self.xfer;
        let last = base + count as u64;
        self.xfer = last;
        let (mut cur, mut got) = (0u64, 0u64);
        let mut w = Waiter::new(IDLE_TIMEOUT);
        loop {
            let Some(len) = self.try_recv() else {
                if !w.snooze() {
                    return;
                }
                continue;
            };
            if len < HDR {
                continue; // a stale ping
            }
            let word = |b: &[u8]| {
                let mut a = [0u8; 8];
                a.copy_from_slice(b);
                u64::from_ne_bytes(a)
            };
            let raw_id = word(&self.rx[..8]);
            let total = word(&self.rx[8..16]);
            let id = raw_id & !STREAM_TAG;
            if raw_id & STREAM_TAG == 0 || id <= base || id > last || id < cur {
                continue; // stale
            }
            w.reset();
            if id > cur {
                (cur, got) = (id, 0);
            }
            got += (len - HDR) as u64;
            if got >= total {
                if !self.send(&raw_id.to_ne_bytes()) || id == last {
                    return;
                }
                got = 0;
                cur = id + 1;
            }
        }
    }
}

/// Collective: raw UDP streaming bandwidth from rank 0 to rank 1 at each of `sizes`, with
/// as many transfers per point as a put of that size gets. Returns the rows on rank 0.
pub(crate) fn stream_bw(
    ep: &Endpoint,
    raw: &mut Option<RawUdp>,
    plan: &Plan,
    sizes: &[usize],
) -> Result<Vec<Row>, BenchError> {
    let mut rows = Vec::new();
    for &n in sizes {
        let (samples, _) = plan.rma_shape(n);
        let warmup = plan.warmup(samples);
        ep.barrier()?;
        if let Some(r) = raw.as_mut() {
            if ep.rank() == 0 {
                let s = r.stream_send(n, warmup, samples);
                rows.push(Row::bandwidth("floor", "raw_udp_stream_bw", n, &s, 1));
            } else {
                r.stream_recv(warmup + samples);
            }
        }
    }
    ep.barrier()?;
    Ok(rows)
}
