//! The socket edge: one non-blocking UDP socket per rank, batched `sendmmsg`/`recvmmsg`, the
//! clock, fault injection, and the [`Conduit`] implementation over [`Proto`].
//!
//! Everything protocol-related lives in [`Proto`]; this file only moves datagrams between it
//! and the kernel. The protocol state is behind one mutex: UDP costs a system call per batch
//! anyway, and the lock is never held while a handler runs (handlers may reply, which sends).
//!
//! The round-trip path is kept to one system call per datagram on each side: a lone datagram
//! goes out with `send` on a socket connected to its destination, which spares the kernel a
//! route lookup per datagram (`sendto` on the main socket where there is none; `sendmsg` with
//! two iovecs for a datagram whose payload chunk stays in the caller's memory; a batch with
//! `sendmmsg`), an idle poll looks with `recv` (up to three times back to back, so that a
//! datagram arriving between polls waits less; once when the host is oversubscribed), once two
//! looks in a row found a datagram the polls use `recvmmsg`, so that a stream is taken in
//! batches while a lone answer keeps the cheaper `recv`, and the protocol's transmit planner runs only when something changed or a timer is due
//! ([`Proto::next_timeout`]), not on every poll. The single-datagram calls are plain system
//! calls, without glibc's cancellation-point wrappers (module `sys`).
//!
//! Nothing between a message and its system call waits on the clock or the planner: a send
//! when nothing else was due takes the protocol's direct path ([`Proto::send_now`]), which
//! hands each datagram of the message to the socket as soon as it is encoded and reads the
//! clock afterwards; a poll reads the clock once, before it looks at the socket, to stamp what
//! arrives; and a message that a lone datagram completes goes from the receive buffer to its
//! handler without a queue ([`Proto::on_datagram_direct`]).

use std::collections::VecDeque;
use std::mem::MaybeUninit;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::Instant;

use amnet_core::{Category, Conduit, Error, InMsg, LocalSegment, OutMsg, Rank, Result};

use crate::boot::BootClient;
use crate::proto::{Config, Datagram, Delivery, LongSink, Proto, SendError, Sent, BATCH};
use crate::wire::AmHeader;

/// Largest Medium payload (the same as the smp conduit's).
pub const MAX_MEDIUM: usize = 65536;
/// Bytes per Long request of a put on the AM path: the protocol fragments a Long itself and
/// lands its fragments in the segment as they arrive, so a larger chunk costs only fewer
/// acks (a 64 KiB chunk would also take two datagrams, its headers pushing it past one).
/// Bounded so that one chunk stays well inside the send queue.
pub const PUT_CHUNK: usize = 1 << 20;
/// Smallest payload that a blocking put sends from the caller's memory instead of a copy
/// ([`Conduit::try_send_held`]); a shorter one costs less to copy.
const HOLD_MIN: usize = 16 << 10;
/// Datagrams taken from the socket per `recvmmsg` call.
const RX_BATCH: usize = 32;
/// `recvmmsg` calls per poll at most (fairness with the caller's own work).
const RX_ROUNDS: usize = 8;
/// Lone receives in a row that must find a datagram before the receives take batches.
const RX_STREAK: u8 = 2;
/// Room for any datagram.
const RX_BUF: usize = 65536;
/// Deliveries handed to the core per poll at most.
const DELIVER_BUDGET: usize = 64;
/// The largest payload a poll hands to its handler straight from the datagram, without a
/// queued delivery (copied once, to the stack).
const INLINE_MAX: usize = 256;
/// Looks at an idle socket per poll.
const IDLE_LOOKS: usize = 3;
/// The most peers that get a connected socket of their own for lone datagrams (beyond, every
/// datagram leaves through the main socket with `sendto`).
const CONNECTED_MAX: u32 = 64;
const NO_EXIT: i64 = i64::MIN;

fn cerr(msg: impl Into<String>) -> Error {
    Error::conduit("udp", msg.into())
}

fn env_prob(name: &str) -> Result<f64> {
    match std::env::var(name) {
        Ok(v) if !v.is_empty() => match v.parse::<f64>() {
            Ok(p) if (0.0..=1.0).contains(&p) => Ok(p),
            _ => Err(Error::Config(format!(
                "{name}={v:?}: expected a probability between 0 and 1"
            ))),
        },
        _ => Ok(0.0),
    }
}

fn env_secs(name: &str) -> Result<Option<f64>> {
    match std::env::var(name) {
        Ok(v) if !v.is_empty() => match v.parse::<f64>() {
            Ok(s) if s.is_finite() && s > 0.0 => Ok(Some(s)),
            _ => Err(Error::Config(format!(
                "{name}={v:?}: expected a positive number of seconds"
            ))),
        },
        _ => Ok(None),
    }
}

/// Loss, duplication and reordering applied to outgoing datagrams (`AMNET_UDP_LOSS`,
/// `AMNET_UDP_DUP`, `AMNET_UDP_REORDER`), for tests.
#[derive(Debug, Clone, Copy, Default)]
struct Faults {
    loss: f64,
    dup: f64,
    reorder: f64,
}

impl Faults {
    fn any(&self) -> bool {
        self.loss > 0.0 || self.dup > 0.0 || self.reorder > 0.0
    }
}

/// xorshift64*: cheap, and enough for fault injection.
#[derive(Debug)]
struct Rng(u64);

impl Rng {
    fn unit(&mut self) -> f64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        let v = self.0.wrapping_mul(0x2545_f491_4f6c_dd1d);
        #[allow(clippy::cast_precision_loss)] // 53 bits are plenty
        let x = (v >> 11) as f64 / (1u64 << 53) as f64;
        x
    }
}

/// Counts of the socket edge (the protocol keeps its own).
#[derive(Debug, Default, Clone, Copy)]
struct EdgeCounters {
    send_errors: u64,
    injected_loss: u64,
    injected_dup: u64,
    injected_reorder: u64,
    rx_errors: u64,
}

/// The receive buffers and the `recvmmsg` headers that point into them, built once.
struct RxRing {
    bufs: Vec<Vec<u8>>,
    /// The iovecs `msgs` point at (only read through those pointers).
    _iovs: Vec<libc::iovec>,
    msgs: Vec<libc::mmsghdr>,
}

// SAFETY: the raw pointers in `iovs` and `msgs` point into the heap blocks of `bufs` and
// `iovs`, which this struct owns and never reallocates; they move with it.
unsafe impl Send for RxRing {}

impl RxRing {
    /// The first `len` bytes of the first buffer (where `recv` puts a lone datagram).
    fn first(&self, len: usize) -> &[u8] {
        self.bufs[0].get(..len).unwrap_or_default()
    }

    fn new() -> RxRing {
        let mut bufs: Vec<Vec<u8>> = (0..RX_BATCH).map(|_| vec![0u8; RX_BUF]).collect();
        let mut iovs: Vec<libc::iovec> = bufs
            .iter_mut()
            .map(|b| libc::iovec {
                iov_base: b.as_mut_ptr().cast(),
                iov_len: b.len(),
            })
            .collect();
        let msgs = iovs
            .iter_mut()
            .map(|iov| {
                // SAFETY: mmsghdr is plain old data; all-zero is a valid value.
                let mut m: libc::mmsghdr = unsafe { std::mem::zeroed() };
                m.msg_hdr.msg_iov = std::ptr::from_mut(iov);
                m.msg_hdr.msg_iovlen = 1;
                m
            })
            .collect();
        RxRing {
            bufs,
            _iovs: iovs,
            msgs,
        }
    }
}

struct Inner {
    proto: Proto,
    /// Deliveries taken from the protocol that the core has not seen yet (a waiter stopped
    /// the previous poll early).
    held: VecDeque<Delivery>,
    /// The deliveries of the poll in progress (kept for its capacity).
    batch: Vec<Delivery>,
    rx: RxRing,
    /// Lone `recv`s in a row that found a datagram, up to [`RX_STREAK`]; there, data is
    /// streaming in and the receives take batches with `recvmmsg` until one finds nothing (a
    /// single answer, as in a ping-pong, does not start a streak).
    rx_hits: u8,
    /// When the transmit planner must run next (µs; 0: at the next chance): the protocol's
    /// [`Proto::next_timeout`] after the last run, or 0 once its state changed since.
    tx_due: u64,
    /// A message taken straight off the wire may have set a later timer (a delayed ack, a
    /// retransmission timeout) than `tx_due` knows of, though nothing due at once, and the
    /// protocol may hold its ack fields unapplied ([`Proto::settle`]): the next poll settles
    /// and brings `tx_due` up to date, unless a send has done both first.
    tx_stale: bool,
    /// The latest clock reading taken under the lock (µs).
    clock: u64,
    faults: Faults,
    rng: Rng,
    /// A datagram held back to be sent after the next one (reorder injection).
    late: Option<(Rank, Vec<u8>)>,
    edge: EdgeCounters,
    failure_reported: bool,
}

/// The local segment: zeroed heap memory at a stable address, written through raw pointers
/// (by Long deliveries here and by the core's put/get).
struct Segment {
    ptr: *mut u8,
    len: usize,
    layout: Option<std::alloc::Layout>,
}

// SAFETY: the segment is plain memory; who may access which bytes when is the core's contract.
unsafe impl Send for Segment {}
// SAFETY: as above.
unsafe impl Sync for Segment {}

impl Segment {
    fn new(len: usize) -> Result<Segment> {
        if len == 0 {
            return Ok(Segment {
                ptr: std::ptr::NonNull::<u8>::dangling().as_ptr(),
                len: 0,
                layout: None,
            });
        }
        let layout = std::alloc::Layout::from_size_align(len, 4096)
            .map_err(|_| cerr(format!("a segment of {len} bytes is too large")))?;
        // SAFETY: the layout has a non-zero size.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        if ptr.is_null() {
            return Err(cerr(format!("cannot allocate a segment of {len} bytes")));
        }
        Ok(Segment {
            ptr,
            len,
            layout: Some(layout),
        })
    }
}

/// The segment as the protocol's [`LongSink`]: Long fragments land in place as they arrive.
struct SegSink {
    ptr: *mut u8,
    len: u64,
}

// SAFETY: the pointer names the conduit's segment, which outlives the protocol that holds the
// sink (both belong to the conduit, and the segment is never freed before it).
unsafe impl Send for SegSink {}

impl LongSink for SegSink {
    fn fits(&self, offset: u64, len: u64) -> bool {
        matches!(offset.checked_add(len), Some(end) if end <= self.len)
    }

    fn write(&mut self, offset: u64, chunk: &[u8]) {
        let (true, Ok(at)) = (
            self.fits(offset, chunk.len() as u64),
            usize::try_from(offset),
        ) else {
            return; // not reached: the protocol writes only inside a range `fits` accepted
        };
        // SAFETY: the range lies inside the segment (checked just above), which stays
        // allocated; who touches which bytes when is the core's contract with its clients.
        unsafe {
            std::ptr::copy_nonoverlapping(chunk.as_ptr(), self.ptr.add(at), chunk.len());
        }
    }
}

impl Drop for Segment {
    fn drop(&mut self) {
        if let Some(l) = self.layout {
            // SAFETY: allocated in `new` with this layout and not freed before.
            unsafe { std::alloc::dealloc(self.ptr, l) };
        }
    }
}

/// A rank of a udp job.
pub struct UdpConduit {
    rank: Rank,
    size: u32,
    sock: UdpSocket,
    /// Every rank's socket address, encoded once for `sendto`/`sendmmsg`.
    addrs: Vec<(libc::sockaddr_storage, libc::socklen_t)>,
    /// Per rank, a socket connected to its main socket, through which lone datagrams to it
    /// leave with `send` (the kernel keeps the route of a connected socket instead of looking
    /// it up on every `sendto`); `None` for this rank, in jobs of more than
    /// [`CONNECTED_MAX`] peers, and where it could not be set up.
    conn: Vec<Option<UdpSocket>>,
    boot: Option<BootClient>,
    inner: Mutex<Inner>,
    seg: OnceLock<Segment>,
    epoch: Instant,
    /// Exit for a job without a launcher (one rank).
    solo_exit: AtomicI64,
    oversubscribed: bool,
}

impl std::fmt::Debug for UdpConduit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UdpConduit")
            .field("rank", &self.rank)
            .field("size", &self.size)
            .field("local", &self.sock.local_addr().ok())
            .finish()
    }
}

fn env_u32(name: &str) -> Result<Option<u32>> {
    match std::env::var(name) {
        Ok(v) if !v.is_empty() => v
            .parse()
            .map(Some)
            .map_err(|_| Error::Config(format!("{name}={v:?}: expected a whole number"))),
        _ => Ok(None),
    }
}

/// `size_of::<T>()` as a socket length (every socket structure is far below 4 GiB).
fn socklen<T>() -> libc::socklen_t {
    libc::socklen_t::try_from(std::mem::size_of::<T>()).unwrap_or(libc::socklen_t::MAX)
}

fn set_buf(fd: i32, opt: libc::c_int, bytes: libc::c_int) {
    let v = bytes;
    // SAFETY: setsockopt reads `size_of::<c_int>()` bytes from a live local; failures are
    // harmless (the default buffer size stays).
    unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            opt,
            std::ptr::from_ref(&v).cast(),
            socklen::<libc::c_int>(),
        );
    }
}

/// The two buffers of `d` on the wire: its bytes, then its tail (empty but for a datagram
/// whose payload chunk stays in the sender's memory).
fn iovecs(d: &Datagram<'_>) -> [libc::iovec; 2] {
    [
        libc::iovec {
            iov_base: d.bytes.as_ptr().cast_mut().cast(),
            iov_len: d.bytes.len(),
        },
        libc::iovec {
            iov_base: d.tail.as_ptr().cast_mut().cast(),
            iov_len: d.tail.len(),
        },
    ]
}

/// What the result `r` of a one-datagram `send`, `sendto` or `sendmsg` means: `Some(true)`
/// the kernel took it, or refused it for good (e.g. an unreachable peer: counted and
/// dropped, the protocol retransmits or fails the peer); `Some(false)` the socket buffer is
/// full (offer it again later); `None` interrupted (call again).
fn send_outcome(r: isize, edge: &mut EdgeCounters) -> Option<bool> {
    if r >= 0 {
        return Some(true);
    }
    match errno() {
        libc::EINTR => None,
        libc::EAGAIN | libc::ENOBUFS => Some(false),
        _ => {
            edge.send_errors += 1;
            Some(true)
        }
    }
}

/// The socket calls of the round-trip path, made as plain system calls. glibc's `recv`,
/// `send`, `sendto` and `sendmsg` are thread cancellation points: in a process with more than
/// one thread each wraps its system call in two atomic updates of the thread's cancellation
/// state, on the path of every datagram. Nothing in a Rust process cancels threads, so the
/// conduit skips them. Each returns what the system call returns (-1 with `errno` set on
/// failure), as the glibc functions do.
mod sys {
    use std::ffi::c_void;

    /// A system call's result as the glibc wrappers return it (`c_long` is as wide as `isize`
    /// on Linux, so nothing is lost).
    #[inline(always)]
    fn ret(r: libc::c_long) -> isize {
        isize::try_from(r).unwrap_or(-1)
    }

    /// `recvfrom(fd, buf, len, flags, NULL, NULL)`.
    ///
    /// # Safety
    /// - `buf` must be valid for writes of `len` bytes.
    #[inline]
    pub(super) unsafe fn recv(
        fd: libc::c_int,
        buf: *mut c_void,
        len: usize,
        flags: libc::c_int,
    ) -> isize {
        let null = std::ptr::null_mut::<libc::sockaddr>();
        let nolen = std::ptr::null_mut::<libc::socklen_t>();
        // SAFETY: the caller's contract covers `buf`; the null address arguments ask for no
        // source address.
        ret(unsafe { libc::syscall(libc::SYS_recvfrom, fd, buf, len, flags, null, nolen) })
    }

    /// `sendto(fd, buf, len, flags, addr, addr_len)`; `send` is this with a null address.
    ///
    /// # Safety
    /// - `buf` must be valid for reads of `len` bytes, and `addr` (unless null) for reads of
    ///   `addr_len` bytes.
    #[inline]
    pub(super) unsafe fn sendto(
        fd: libc::c_int,
        buf: *const c_void,
        len: usize,
        flags: libc::c_int,
        addr: *const libc::sockaddr,
        addr_len: libc::socklen_t,
    ) -> isize {
        // SAFETY: the caller's contract covers `buf` and `addr`.
        ret(unsafe { libc::syscall(libc::SYS_sendto, fd, buf, len, flags, addr, addr_len) })
    }

    /// `sendmsg(fd, msg, flags)`.
    ///
    /// # Safety
    /// - `msg` must point at a valid `msghdr` whose buffers are valid for reads.
    #[inline]
    pub(super) unsafe fn sendmsg(
        fd: libc::c_int,
        msg: *const libc::msghdr,
        flags: libc::c_int,
    ) -> isize {
        // SAFETY: the caller's contract covers `msg` and what it points at.
        ret(unsafe { libc::syscall(libc::SYS_sendmsg, fd, msg, flags) })
    }
}

/// The `errno` of the last failed system call on this thread.
fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

fn cores() -> u32 {
    std::thread::available_parallelism()
        .map(|n| u32::try_from(n.get()).unwrap_or(u32::MAX))
        .unwrap_or(1)
}

impl UdpConduit {
    /// Join the job described by the environment (`AMNET_RANK`, `AMNET_SIZE`,
    /// `AMNET_UDP_BOOT`, set by `amrun --conduit udp`). Without them the
    /// process is a job of one rank.
    pub fn from_env() -> Result<UdpConduit> {
        static JOINED: AtomicBool = AtomicBool::new(false);
        if JOINED.swap(true, Ordering::AcqRel) {
            return Err(Error::Config(
                "amnet::init called twice in one process: a process is one rank; clone the \
                 Endpoint to use it from several threads"
                    .into(),
            ));
        }
        let rank = env_u32("AMNET_RANK")?;
        let size = env_u32("AMNET_SIZE")?;
        let boot = std::env::var("AMNET_UDP_BOOT")
            .ok()
            .filter(|s| !s.is_empty());
        let faults = Faults {
            loss: env_prob("AMNET_UDP_LOSS")?,
            dup: env_prob("AMNET_UDP_DUP")?,
            reorder: env_prob("AMNET_UDP_REORDER")?,
        };
        let mut cfg = Config::default();
        if let Some(t) = env_secs("AMNET_UDP_PEER_TIMEOUT")? {
            #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)] // positive, finite
            let us = (t * 1e6) as u64;
            cfg.peer_timeout = us.max(2);
            cfg.heartbeat_interval = (cfg.peer_timeout / 4).clamp(1, 1_000_000);
        }
        if let Some(m) = env_u32("AMNET_UDP_MTU")? {
            cfg.mtu = m as usize;
        }
        let bind_ip: IpAddr = match std::env::var("AMNET_UDP_BIND") {
            Ok(v) if !v.is_empty() => v
                .parse()
                .map_err(|_| Error::Config(format!("AMNET_UDP_BIND={v:?}: expected an IP")))?,
            _ => IpAddr::V4(Ipv4Addr::LOCALHOST),
        };
        let sock = UdpSocket::bind(SocketAddr::new(bind_ip, 0))
            .map_err(|e| cerr(format!("cannot bind a UDP socket on {bind_ip}: {e}")))?;
        sock.set_nonblocking(true)
            .map_err(|e| cerr(format!("set_nonblocking: {e}")))?;
        let fd = sock.as_raw_fd();
        set_buf(fd, libc::SO_RCVBUF, 8 << 20);
        set_buf(fd, libc::SO_SNDBUF, 8 << 20);
        // As root the caps of net.core.[rw]mem_max do not apply.
        set_buf(fd, libc::SO_RCVBUFFORCE, 8 << 20);
        set_buf(fd, libc::SO_SNDBUFFORCE, 8 << 20);
        let port = sock
            .local_addr()
            .map_err(|e| cerr(format!("local_addr: {e}")))?
            .port();
        let (rank, size, boot, peers, key) = match (rank, size, boot) {
            (None, None, None) => {
                let me = sock
                    .local_addr()
                    .map_err(|e| cerr(format!("local_addr: {e}")))?;
                (0, 1, None, vec![me], 1u64)
            }
            (Some(rank), Some(size), Some(b)) => {
                if rank >= size {
                    return Err(Error::Config(format!(
                        "AMNET_RANK={rank} is not below AMNET_SIZE={size}"
                    )));
                }
                let server: SocketAddr = b.parse().map_err(|_| {
                    Error::Config(format!("AMNET_UDP_BOOT={b:?}: expected HOST:PORT"))
                })?;
                let c = BootClient::join(server, rank, port, amnet_core::conduit::boot_timeout()?)?;
                if c.table.len() != size as usize {
                    return Err(cerr(format!(
                        "the launcher knows {} ranks but AMNET_SIZE is {size}",
                        c.table.len()
                    )));
                }
                let peers = c.table.clone();
                let key = c.job_key;
                (rank, size, Some(c), peers, key)
            }
            _ => {
                return Err(Error::Config(
                    "AMNET_RANK, AMNET_SIZE and AMNET_UDP_BOOT must be set together (start \
                     the job with amrun --conduit udp)"
                        .into(),
                ))
            }
        };
        let addrs = peers
            .iter()
            .map(|&a| {
                // SAFETY: sockaddr_storage is plain old data; all-zero is a valid value.
                let mut st: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
                let len = sockaddr(a, &mut st);
                (st, len)
            })
            .collect();
        let conn = if size - 1 <= CONNECTED_MAX {
            peers
                .iter()
                .enumerate()
                .map(|(r, &a)| {
                    (r != rank as usize)
                        .then(|| connected(bind_ip, a))
                        .flatten()
                })
                .collect()
        } else {
            Vec::new()
        };
        let epoch = Instant::now();
        let proto =
            Proto::new(cfg, rank, size, key, 0).map_err(|e| Error::Config(format!("udp: {e}")))?;
        Ok(UdpConduit {
            rank,
            size,
            sock,
            addrs,
            conn,
            boot,
            inner: Mutex::new(Inner {
                proto,
                held: VecDeque::new(),
                batch: Vec::new(),
                rx: RxRing::new(),
                rx_hits: 0,
                tx_due: 0,
                tx_stale: false,
                clock: 0,
                faults,
                rng: Rng(0x9e37_79b9_7f4a_7c15 ^ (u64::from(rank) << 17) ^ u64::from(port) | 1),
                late: None,
                edge: EdgeCounters::default(),
                failure_reported: false,
            }),
            seg: OnceLock::new(),
            epoch,
            solo_exit: AtomicI64::new(NO_EXIT),
            oversubscribed: size > cores(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn now(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_micros()).unwrap_or(u64::MAX)
    }

    /// Send one datagram: with `send` (`sendmsg` when it has a tail) on the destination's
    /// connected socket, else with `sendto` (`sendmmsg` when it has a tail) on the main
    /// socket. False when the socket buffer is full (offer it again later); a datagram the
    /// kernel refuses is counted and dropped.
    fn send_one(&self, d: Datagram<'_>, edge: &mut EdgeCounters) -> bool {
        let conn = self.conn.get(d.dest as usize).and_then(Option::as_ref);
        if !d.tail.is_empty() {
            return match conn {
                Some(c) => self.send_gathered(c.as_raw_fd(), d, edge),
                None => self.send_batch_now(&[d], edge) == 1,
            };
        }
        let (addr, len) = &self.addrs[d.dest as usize];
        loop {
            let r = match conn {
                // SAFETY: `d.bytes` is live for the call and the kernel only reads it.
                Some(c) => unsafe {
                    sys::sendto(
                        c.as_raw_fd(),
                        d.bytes.as_ptr().cast(),
                        d.bytes.len(),
                        libc::MSG_DONTWAIT,
                        std::ptr::null(),
                        0,
                    )
                },
                // SAFETY: `d.bytes` and `addr` are live for the call and the kernel only reads
                // them; `len` is the length `sockaddr` wrote.
                None => unsafe {
                    sys::sendto(
                        self.sock.as_raw_fd(),
                        d.bytes.as_ptr().cast(),
                        d.bytes.len(),
                        0,
                        std::ptr::from_ref(addr).cast(),
                        *len,
                    )
                },
            };
            if let Some(taken) = send_outcome(r, edge) {
                return taken;
            }
        }
    }

    /// `sendmsg` of `d`'s bytes and tail on `fd`, a socket connected to `d.dest`; the answer
    /// as for [`UdpConduit::send_one`].
    fn send_gathered(&self, fd: libc::c_int, d: Datagram<'_>, edge: &mut EdgeCounters) -> bool {
        let mut iov = iovecs(&d);
        // SAFETY: msghdr is plain old data; all-zero is a valid value (no name: the socket is
        // connected).
        let mut m: libc::msghdr = unsafe { std::mem::zeroed() };
        m.msg_iov = iov.as_mut_ptr();
        m.msg_iovlen = iov.len();
        loop {
            // SAFETY: `m` points at `iov`, whose buffers (`d`'s bytes and tail) are live for
            // the call; the kernel only reads them.
            let r = unsafe { sys::sendmsg(fd, &m, libc::MSG_DONTWAIT) };
            if let Some(taken) = send_outcome(r, edge) {
                return taken;
            }
        }
    }

    /// Send a batch: one datagram with [`UdpConduit::send_one`], more with one `sendmmsg`.
    /// Returns how many the kernel took (the rest are offered again later). A full socket
    /// buffer is not an error.
    fn send_batch(&self, batch: &[Datagram<'_>], edge: &mut EdgeCounters) -> usize {
        match batch {
            [] => return 0,
            [d] => return usize::from(self.send_one(*d, edge)),
            _ => {}
        }
        self.send_batch_now(batch, edge)
    }

    /// [`UdpConduit::send_batch`] with one `sendmmsg`, whatever the batch's length: each
    /// datagram is gathered from its bytes and its tail (a payload chunk sent from where it
    /// lies).
    fn send_batch_now(&self, batch: &[Datagram<'_>], edge: &mut EdgeCounters) -> usize {
        let n = batch.len().min(BATCH);
        let mut iovs = [const { MaybeUninit::<[libc::iovec; 2]>::uninit() }; BATCH];
        let mut msgs = [const { MaybeUninit::<libc::mmsghdr>::uninit() }; BATCH];
        for (i, d) in batch.iter().take(n).enumerate() {
            let (addr, len) = &self.addrs[d.dest as usize];
            let iov = iovs[i].write(iovecs(d));
            // SAFETY: mmsghdr is plain old data; all-zero is a valid value.
            let mut m: libc::mmsghdr = unsafe { std::mem::zeroed() };
            m.msg_hdr.msg_name = std::ptr::from_ref(addr).cast_mut().cast();
            m.msg_hdr.msg_namelen = *len;
            m.msg_hdr.msg_iov = iov.as_mut_ptr();
            m.msg_hdr.msg_iovlen = if d.tail.is_empty() { 1 } else { 2 };
            msgs[i].write(m);
        }
        let msgs = msgs.as_mut_ptr().cast::<libc::mmsghdr>();
        let mut done = 0usize;
        while done < n {
            // SAFETY: `msgs[..n]` were initialized above and point at addresses of `self.addrs`
            // and iovecs of this frame, whose buffers (`batch`) outlive the call; the kernel
            // only reads them (and writes `msg_len`).
            let r = unsafe {
                libc::sendmmsg(
                    self.sock.as_raw_fd(),
                    msgs.add(done),
                    u32::try_from(n - done).unwrap_or(1),
                    0,
                )
            };
            if r > 0 {
                done += usize::try_from(r).unwrap_or(0);
                continue;
            }
            let e = std::io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EINTR) => continue,
                Some(libc::EAGAIN) | Some(libc::ENOBUFS) => break,
                _ => {
                    // A datagram the kernel refuses (e.g. an unreachable peer) is dropped: the
                    // protocol retransmits or fails the peer.
                    edge.send_errors += 1;
                    done += 1;
                }
            }
        }
        done
    }

    /// Put `dgrams` on the wire through fault injection, when it is on. Returns how many count
    /// as sent: those the kernel took, and with injection all of them (what was dropped is the
    /// injected loss). A datagram held back for reordering leaves after the next one, or at
    /// the latest with [`UdpConduit::flush_late`].
    fn put_on_wire(
        &self,
        dgrams: &[Datagram<'_>],
        faults: Faults,
        rng: &mut Rng,
        late: &mut Option<(Rank, Vec<u8>)>,
        edge: &mut EdgeCounters,
    ) -> usize {
        if !faults.any() {
            return self.send_batch(dgrams, edge);
        }
        let mut out: Vec<Datagram<'_>> = Vec::with_capacity(dgrams.len() * 2);
        let mut release = None;
        for d in dgrams {
            if rng.unit() < faults.loss {
                edge.injected_loss += 1;
                continue;
            }
            if rng.unit() < faults.reorder && late.is_none() {
                edge.injected_reorder += 1;
                *late = Some((d.dest, d.to_vec()));
                continue;
            }
            out.push(*d);
            if rng.unit() < faults.dup {
                edge.injected_dup += 1;
                out.push(*d);
            }
            if release.is_none() {
                release = late.take();
            }
        }
        self.send_batch(&out, edge);
        if let Some((dest, bytes)) = release {
            self.send_one(Datagram::whole(dest, &bytes), edge);
        }
        dgrams.len()
    }

    /// Send the datagram held back for reordering, if any: it never waits longer than one
    /// transmit round.
    fn flush_late(&self, late: &mut Option<(Rank, Vec<u8>)>, edge: &mut EdgeCounters) {
        if let Some((dest, bytes)) = late.take() {
            self.send_one(Datagram::whole(dest, &bytes), edge);
        }
    }

    /// Take one message for `dest`: straight to the wire when nothing else is due, else into
    /// the queue for the transmit planner. With `hold`, its payload is sent from where it lies.
    ///
    /// # Safety
    /// - With `hold`, the contract of [`Conduit::try_send_held`]; without, none.
    unsafe fn send_msg(&self, dest: Rank, msg: &OutMsg<'_>, hold: bool) -> Result<bool> {
        let mut guard = self.lock();
        let inner = &mut *guard;
        self.check_failed(inner)?;
        let sent = if inner.clock < inner.tx_due {
            // Nothing was due at the last clock reading: the message's datagrams leave at once
            // as they are encoded, ahead of the planner, and the clock is read once each is on
            // its way. (With `tx_stale`, a later timer may have come due unseen; the exact
            // `tx_due` taken after the send puts it on the wire right behind.)
            let Inner {
                proto,
                faults,
                rng,
                late,
                edge,
                ..
            } = inner;
            let faults = *faults;
            let tx = |d: Datagram<'_>| self.put_on_wire(&[d], faults, rng, late, edge) == 1;
            let sent = if hold {
                // SAFETY: this function's contract with `hold`: the payload stays valid and
                // unchanged until `release_held`, which ends the hold.
                unsafe { proto.send_now_held(dest, msg, tx, || self.now()) }
            } else {
                proto.send_now(dest, msg, tx, || self.now())
            };
            self.flush_late(late, edge);
            sent
        } else {
            let queued = if hold {
                // SAFETY: as above.
                unsafe { inner.proto.send_held(dest, msg) }
            } else {
                inner.proto.send(dest, msg)
            };
            queued.map(|()| Sent::Queued)
        };
        match sent {
            Ok(Sent::Wire(now)) => {
                inner.clock = now;
                // Exact for the new state; whatever else came due meanwhile goes out now.
                inner.tx_due = inner.proto.next_timeout().unwrap_or(u64::MAX);
                inner.tx_stale = false;
                self.transmit_if_due(inner, now);
                Ok(true)
            }
            Ok(Sent::Queued) => {
                let now = self.now();
                inner.clock = now;
                self.transmit(inner, now);
                Ok(true)
            }
            Err(SendError::Backpressure(_)) => {
                // Take in acks and push out what is due; the core polls and retries.
                let now = self.now();
                inner.clock = now;
                let _ = self.receive(inner, now);
                self.transmit(inner, now);
                Ok(false)
            }
            Err(SendError::PeerFailed(r)) => Err(cerr(format!(
                "rank {r} has failed (silent past AMNET_UDP_PEER_TIMEOUT)"
            ))),
            Err(e) => Err(cerr(format!("cannot send to rank {dest}: {e}"))),
        }
    }

    /// Hand the protocol's due datagrams to the socket (through fault injection).
    fn transmit(&self, inner: &mut Inner, now: u64) {
        let Inner {
            proto,
            faults,
            rng,
            late,
            edge,
            ..
        } = inner;
        let faults = *faults;
        proto.poll_transmit(now, |dgrams: &[Datagram<'_>]| {
            self.put_on_wire(dgrams, faults, rng, late, edge)
        });
        self.flush_late(late, edge);
        inner.tx_due = inner.proto.next_timeout().unwrap_or(u64::MAX);
        inner.tx_stale = false;
    }

    /// Bring `tx_due` forward to what the protocol's state now asks for.
    fn refresh_due(&self, inner: &mut Inner) {
        inner.tx_due = inner
            .tx_due
            .min(inner.proto.next_timeout().unwrap_or(u64::MAX));
        inner.tx_stale = false;
    }

    /// Run the transmit planner if something changed since its last run or a timer is due.
    #[inline]
    fn transmit_if_due(&self, inner: &mut Inner, now: u64) {
        if now >= inner.tx_due {
            self.transmit(inner, now);
        }
    }

    /// Take what the socket holds into the protocol, stamped with `now` (the poll's clock
    /// reading, taken just before). Returns whether it took any datagram; the caller then
    /// refreshes `tx_due`.
    fn receive(&self, inner: &mut Inner, now: u64) -> bool {
        if inner.rx_hits < RX_STREAK {
            let Some(len) = self.recv_one(inner) else {
                return false;
            };
            let Inner { proto, rx, .. } = inner;
            // Drops are counted by the protocol (foreign job, malformed, duplicate).
            let _ = proto.on_datagram(now, rx.first(len));
            return true;
        }
        self.recv_batch(inner, now)
    }

    /// No streak: one `recv` into the first receive buffer, the cheapest look at an empty
    /// socket (an empty `recvmmsg` costs half as much again). Returns the length of the
    /// datagram it found, which the caller takes in. [`RX_STREAK`] found in a row start a
    /// streak: the receives after them take batches.
    fn recv_one(&self, inner: &mut Inner) -> Option<usize> {
        let buf = &mut inner.rx.bufs[0];
        // SAFETY: `buf` is a live buffer of `buf.len()` bytes, which the kernel fills.
        let r = unsafe {
            sys::recv(
                self.sock.as_raw_fd(),
                buf.as_mut_ptr().cast(),
                buf.len(),
                libc::MSG_DONTWAIT,
            )
        };
        let Ok(len) = usize::try_from(r) else {
            if !matches!(errno(), libc::EAGAIN | libc::EINTR) {
                inner.edge.rx_errors += 1;
            }
            inner.rx_hits = 0;
            return None;
        };
        inner.rx_hits = (inner.rx_hits + 1).min(RX_STREAK);
        Some(len.min(RX_BUF))
    }

    /// A streak: take batches with `recvmmsg` until the socket is empty (at most
    /// [`RX_ROUNDS`]); finding nothing ends the streak. Returns whether it took any datagram.
    fn recv_batch(&self, inner: &mut Inner, now: u64) -> bool {
        let fd = self.sock.as_raw_fd();
        let Inner {
            proto,
            rx,
            rx_hits,
            edge,
            ..
        } = inner;
        let mut total = 0;
        for _ in 0..RX_ROUNDS {
            // SAFETY: every header of `rx.msgs` points at an iovec of `rx._iovs` and through it
            // at a live buffer of `rx.bufs` of the stated length, which the kernel fills.
            let r = unsafe {
                libc::recvmmsg(
                    fd,
                    rx.msgs.as_mut_ptr(),
                    u32::try_from(RX_BATCH).unwrap_or(1),
                    libc::MSG_DONTWAIT,
                    std::ptr::null_mut(),
                )
            };
            if r <= 0 {
                if r < 0 && !matches!(errno(), libc::EAGAIN | libc::EINTR) {
                    edge.rx_errors += 1;
                }
                break;
            }
            let got = usize::try_from(r).unwrap_or(0);
            for (m, buf) in rx.msgs.iter().zip(&rx.bufs).take(got) {
                let len = (m.msg_len as usize).min(RX_BUF);
                let _ = proto.on_datagram(now, &buf[..len]);
            }
            total += got;
            if got < RX_BATCH {
                break;
            }
        }
        if total == 0 {
            *rx_hits = 0;
        }
        total > 0
    }

    fn check_failed(&self, inner: &mut Inner) -> Result<()> {
        if inner.proto.counters().peers_failed == 0 {
            return Ok(());
        }
        let Some(r) = inner.proto.failed_peers().next() else {
            return Ok(());
        };
        let secs = inner.proto.config().peer_timeout as f64 / 1e6;
        let msg = format!(
            "rank {r} has not been heard from for {secs} s (AMNET_UDP_PEER_TIMEOUT); the job \
             cannot go on"
        );
        if !inner.failure_reported {
            inner.failure_reported = true;
            eprintln!("amnet udp rank {}: {msg}", self.rank);
        }
        Err(cerr(msg))
    }

    /// The rest of a poll, once the socket has been read (`received`: it held datagrams):
    /// take complete messages from the protocol (after those held back earlier), run their
    /// handlers without the lock, and settle what the handlers left.
    fn deliver(
        &self,
        mut inner: MutexGuard<'_, Inner>,
        now: u64,
        received: bool,
        replies_only: bool,
        sink: &mut dyn FnMut(&InMsg<'_>) -> bool,
    ) -> Result<usize> {
        let mut changed = received;
        let mut batch = std::mem::take(&mut inner.batch);
        // Earlier leftovers first (in order), then fresh ones.
        if !inner.held.is_empty() {
            let mut keep = VecDeque::new();
            while let Some(d) = inner.held.pop_front() {
                if batch.len() < DELIVER_BUDGET && (!replies_only || d.am.is_reply) {
                    batch.push(d);
                } else {
                    keep.push_back(d);
                }
            }
            inner.held = keep;
        }
        while batch.len() < DELIVER_BUDGET {
            match inner.proto.pop(replies_only) {
                Some(d) => {
                    batch.push(d);
                    changed = true;
                }
                None => break,
            }
        }
        if replies_only {
            // A handler waiting to send its reply polls replies only. Requests left in the
            // protocol would hold the peer's receive window shut, and with it the replies
            // that travel in the same window: take them out (they run at the next full
            // poll, in order) so the window reopens.
            while let Some(d) = inner.proto.pop(false) {
                inner.held.push_back(d);
                changed = true;
            }
        }
        if changed {
            // What arrived may call for an ack or open the send window, and taking messages
            // may reopen the receive window, which is worth an ack at once.
            self.refresh_due(&mut inner);
        }
        if batch.is_empty() {
            inner.batch = batch;
            self.transmit_if_due(&mut inner, now);
            self.check_failed(&mut inner)?;
            return Ok(0);
        }
        if received {
            // Before the handlers, which may take long (a Long handler copies its payload
            // first): a peer waiting on this ack or window must not wait for them.
            self.transmit_if_due(&mut inner, now);
        }
        drop(inner);
        // Handlers run without the lock: they may reply, which sends.
        let mut n = 0;
        for d in &batch {
            n += 1;
            if !self.hand_up(d.src, &d.am, &d.payload, d.placed, sink) {
                break;
            }
        }
        let mut inner = self.lock();
        // What the waiter did not take stays first in line, in order.
        for d in batch.drain(n..).rev() {
            inner.held.push_front(d);
        }
        for d in batch.drain(..) {
            inner.proto.recycle(d);
        }
        inner.batch = batch;
        // Whatever the handlers' sends left due (a full socket buffer), at the latest clock
        // reading (the handlers' sends may have taken one).
        let now = inner.clock;
        self.transmit_if_due(&mut inner, now);
        Ok(n)
    }

    /// Deliver one message to the core: Long payloads go into the segment first, unless the
    /// protocol `placed` them there already (their length).
    fn hand_up(
        &self,
        src: Rank,
        am: &AmHeader,
        payload: &[u8],
        placed: Option<u64>,
        sink: &mut dyn FnMut(&InMsg<'_>) -> bool,
    ) -> bool {
        let payload: &[u8] = match am.category {
            Category::Long => {
                let Some(seg) = self.seg.get() else {
                    eprintln!(
                        "amnet udp rank {}: dropped a Long from rank {} before attach",
                        self.rank, src
                    );
                    return true;
                };
                let off = am.long_offset;
                let len = placed.unwrap_or(payload.len() as u64);
                let end = off.checked_add(len);
                if !matches!(end, Some(e) if e <= seg.len as u64) {
                    eprintln!(
                        "amnet udp rank {}: dropped a Long from rank {} outside the segment",
                        self.rank, src
                    );
                    return true;
                }
                let at = usize::try_from(off).unwrap_or(0);
                let len = usize::try_from(len).unwrap_or(0);
                let dst = seg.ptr;
                // SAFETY: the range was checked against the segment just above; the segment
                // stays allocated for the conduit's life; clients that touch the same bytes
                // concurrently break the core's contract, not memory safety of this copy.
                unsafe {
                    if placed.is_none() {
                        std::ptr::copy_nonoverlapping(payload.as_ptr(), dst.add(at), len);
                    }
                    std::slice::from_raw_parts(dst.add(at), len)
                }
            }
            _ => payload,
        };
        sink(&InMsg {
            src,
            handler: am.handler,
            category: am.category,
            is_reply: am.is_reply,
            args: am.args(),
            payload,
            long_offset: am.long_offset,
        })
    }
}

/// A non-blocking UDP socket on `ip` (any port) connected to `peer`, with the main socket's
/// send buffer, for lone datagrams to that peer; `None` when any step fails (its datagrams
/// then leave through the main socket). The receiver tells senders apart by the rank in the
/// header, not by the source address, so the source port does not matter; nothing is ever
/// sent to this socket.
fn connected(ip: IpAddr, peer: SocketAddr) -> Option<UdpSocket> {
    let ip = match (ip, peer) {
        (IpAddr::V4(_), SocketAddr::V6(_)) | (IpAddr::V6(_), SocketAddr::V4(_)) => return None,
        _ => ip,
    };
    let s = UdpSocket::bind(SocketAddr::new(ip, 0)).ok()?;
    s.connect(peer).ok()?;
    s.set_nonblocking(true).ok()?;
    let fd = s.as_raw_fd();
    set_buf(fd, libc::SO_SNDBUF, 8 << 20);
    set_buf(fd, libc::SO_SNDBUFFORCE, 8 << 20);
    Some(s)
}

/// Memory this host can still give (MemAvailable + SwapFree from /proc/meminfo), in bytes.
fn mem_available() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let field = |name: &str| -> Option<u64> {
        let line = text.lines().find(|l| l.starts_with(name))?;
        let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
        Some(kb * 1024)
    };
    Some(field("MemAvailable:")? + field("SwapFree:").unwrap_or(0))
}

fn sockaddr(a: SocketAddr, out: &mut libc::sockaddr_storage) -> libc::socklen_t {
    match a {
        SocketAddr::V4(v4) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::sa_family_t::try_from(libc::AF_INET).unwrap_or(2),
                sin_port: v4.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(v4.ip().octets()),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_storage is large enough and suitably aligned for sockaddr_in.
            unsafe { std::ptr::write(std::ptr::from_mut(out).cast::<libc::sockaddr_in>(), sin) };
            socklen::<libc::sockaddr_in>()
        }
        SocketAddr::V6(v6) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::sa_family_t::try_from(libc::AF_INET6).unwrap_or(10),
                sin6_port: v6.port().to_be(),
                sin6_flowinfo: v6.flowinfo(),
                sin6_addr: libc::in6_addr {
                    s6_addr: v6.ip().octets(),
                },
                sin6_scope_id: v6.scope_id(),
            };
            // SAFETY: sockaddr_storage is large enough and suitably aligned for sockaddr_in6.
            unsafe { std::ptr::write(std::ptr::from_mut(out).cast::<libc::sockaddr_in6>(), sin6) };
            socklen::<libc::sockaddr_in6>()
        }
    }
}

impl Conduit for UdpConduit {
    fn name(&self) -> &'static str {
        "udp"
    }
    fn rank(&self) -> Rank {
        self.rank
    }
    fn size(&self) -> u32 {
        self.size
    }
    fn max_medium(&self) -> usize {
        MAX_MEDIUM
    }
    fn put_chunk(&self) -> usize {
        PUT_CHUNK
    }
    fn oversubscribed(&self) -> bool {
        self.oversubscribed
    }

    fn exchange(&self, blob: &[u8]) -> Result<Vec<Vec<u8>>> {
        match &self.boot {
            None => Ok(vec![blob.to_vec()]),
            Some(b) => b.exchange(blob, &|c| self.terminate(c)),
        }
    }

    fn attach_segment(&self, len: usize, _lens: &[usize]) -> Result<LocalSegment> {
        if let Some(avail) = mem_available() {
            if len as u64 > avail {
                return Err(Error::Config(format!(
                    "the segment asks for {len} bytes but this host has {avail} bytes of memory \
                     available (MemAvailable + SwapFree): ask for a smaller segment"
                )));
            }
        }
        self.seg
            .set(Segment::new(len)?)
            .map_err(|_| Error::AlreadyAttached)?;
        let s = self.seg.get().ok_or(Error::AlreadyAttached)?;
        self.lock().proto.set_long_sink(Box::new(SegSink {
            ptr: s.ptr,
            len: s.len as u64,
        }));
        // Everyone has its segment before anyone sends into it.
        self.exchange(&[])?;
        Ok(LocalSegment {
            base: s.ptr,
            len: s.len,
        })
    }

    fn try_send(&self, dest: Rank, msg: &OutMsg<'_>) -> Result<bool> {
        // SAFETY: without `hold`, `send_msg` has no contract: the payload is copied.
        unsafe { self.send_msg(dest, msg, false) }
    }

    unsafe fn try_send_held(&self, dest: Rank, msg: &OutMsg<'_>) -> Result<bool> {
        // A short payload costs less to copy than to hold.
        let hold = msg.payload.len() >= HOLD_MIN;
        // SAFETY: forwarded contract: `Conduit::release_held` ends the hold.
        unsafe { self.send_msg(dest, msg, hold) }
    }

    fn release_held(&self, dest: Rank, payload: &[u8]) {
        self.lock().proto.release_held(dest, payload);
    }

    fn poll(&self, replies_only: bool, sink: &mut dyn FnMut(&InMsg<'_>) -> bool) -> Result<usize> {
        // One clock reading per poll, taken before the socket is read: it stamps what arrives
        // and checks the timers, so none is taken between a datagram's arrival and its handler.
        let now = self.now();
        let mut inner = self.lock();
        // Another thread's reading may be later: times never go back.
        let now = now.max(inner.clock);
        inner.clock = now;
        if inner.tx_stale {
            // The last message taken off the wire had no reply to carry its ack's bookkeeping.
            inner.proto.settle();
            self.refresh_due(&mut inner);
        }
        if inner.rx_hits >= RX_STREAK {
            let received = self.recv_batch(&mut inner, now);
            return self.deliver(inner, now, received, replies_only, sink);
        }
        // A few looks at the socket per poll, back to back: a datagram that arrives while the
        // caller's wait loop runs between polls waits for the next look. Oversubscribed, a
        // poll returns after one look so that the caller's wait yields the core sooner.
        let looks = if self.oversubscribed { 1 } else { IDLE_LOOKS };
        let mut found = None;
        for _ in 0..looks {
            found = self.recv_one(&mut inner);
            if found.is_some() {
                break;
            }
        }
        let Some(len) = found else {
            if inner.held.is_empty() && !inner.proto.has_ready() {
                // Idle: only the timers to look at.
                self.transmit_if_due(&mut inner, now);
                self.check_failed(&mut inner)?;
                return Ok(0);
            }
            return self.deliver(inner, now, false, replies_only, sink);
        };
        // A message this datagram completes, with nothing waiting before it, goes straight to
        // its handler: no payload buffer, no queue, and no second lock after the handler.
        let mut payload = [0u8; INLINE_MAX];
        let mut msg = None;
        let may = inner.held.is_empty();
        let Inner { proto, rx, .. } = &mut *inner;
        let mut take = |src: Rank, am: &AmHeader, p: &[u8]| {
            let fits = may && (!replies_only || am.is_reply);
            match payload.get_mut(..p.len()) {
                Some(dst) if fits => {
                    dst.copy_from_slice(p);
                    msg = Some((src, *am, p.len()));
                    true
                }
                _ => false,
            }
        };
        // Drops are counted by the protocol (foreign job, malformed, duplicate).
        let _ = proto.on_datagram_direct(now, rx.first(len), &mut take);
        let Some((src, am, len)) = msg else {
            return self.deliver(inner, now, true, replies_only, sink);
        };
        if inner.proto.due_now(src) {
            // An ack that must not wait, or DATA the ack let go: before the handler (then the
            // protocol's next timeout is due at once, so the planner runs unconditionally).
            self.transmit(&mut inner, now);
        } else {
            // At most a later timer (a delayed ack, a retransmission timeout) changed: the
            // handler's reply, if it sends one, recomputes `tx_due` anyway; else the next poll.
            inner.tx_stale = true;
        }
        drop(inner);
        self.hand_up(src, &am, payload.get(..len).unwrap_or_default(), None, sink);
        Ok(1)
    }

    /// The protocol's and the socket edge's counters, named as `spec/udp.md` lists them.
    /// Empty when the state stays locked for 100 ms: the exit report may ask from a thread
    /// that ends the process while another one holds the lock, and must not hang.
    fn counters(&self) -> Vec<(&'static str, u64)> {
        let t0 = Instant::now();
        let inner = loop {
            match self.inner.try_lock() {
                Ok(g) => break g,
                Err(std::sync::TryLockError::Poisoned(p)) => break p.into_inner(),
                Err(std::sync::TryLockError::WouldBlock) => {
                    if t0.elapsed() > std::time::Duration::from_millis(100) {
                        return Vec::new();
                    }
                    std::thread::yield_now();
                }
            }
        };
        let c = inner.proto.counters();
        let e = inner.edge;
        vec![
            ("datagrams_sent", c.tx_datagrams),
            ("datagrams_received", c.rx_datagrams),
            ("retransmits", c.retransmits),
            ("fast_retransmits", c.fast_retransmits),
            ("timeouts", c.timeouts),
            ("duplicates_dropped", c.duplicates),
            ("acks_sent", c.acks_sent),
            ("heartbeats_sent", c.heartbeats_sent),
            ("decode_errors", c.decode_errors),
            ("foreign_datagrams", c.foreign_key),
            ("injected_loss", e.injected_loss),
            ("injected_dup", e.injected_dup),
            ("injected_reorder", e.injected_reorder),
            ("send_errors", e.send_errors),
        ]
    }

    fn exit_requested(&self) -> Option<i32> {
        match &self.boot {
            Some(b) => b.exit_requested(),
            None => {
                let v = self.solo_exit.load(Ordering::Acquire);
                (v != NO_EXIT).then(|| i32::try_from(v).unwrap_or(1))
            }
        }
    }

    fn request_exit(&self, code: i32) -> i32 {
        match &self.boot {
            Some(b) => b.request_exit(code),
            None => {
                let _ = self.solo_exit.compare_exchange(
                    NO_EXIT,
                    i64::from(code),
                    Ordering::AcqRel,
                    Ordering::Acquire,
                );
                self.exit_requested().unwrap_or(code)
            }
        }
    }

    fn terminate(&self, code: i32) -> ! {
        // Best effort: what is queued (a last reply, acks) goes out before we leave.
        if let Ok(mut inner) = self.inner.try_lock() {
            let now = self.now();
            self.transmit(&mut inner, now);
        }
        use std::io::Write;
        let _ = std::io::stdout().flush();
        std::process::exit(code)
    }

    fn is_process_mode(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The plain system calls answer as glibc's wrappers do: the byte count, or -1 with
    /// `errno` set (EAGAIN on an empty non-blocking socket).
    #[test]
    fn plain_system_calls_answer_like_glibc() {
        let a = UdpSocket::bind("127.0.0.1:0").unwrap();
        let b = UdpSocket::bind("127.0.0.1:0").unwrap();
        a.connect(b.local_addr().unwrap()).unwrap();
        let mut buf = [0u8; 64];
        // SAFETY: `buf` is a live local buffer of the stated length.
        let r = unsafe {
            sys::recv(
                b.as_raw_fd(),
                buf.as_mut_ptr().cast(),
                buf.len(),
                libc::MSG_DONTWAIT,
            )
        };
        assert_eq!(r, -1);
        assert_eq!(errno(), libc::EAGAIN);
        let msg = b"plain";
        // SAFETY: `msg` is live for the call; no address on a connected socket.
        let r = unsafe {
            sys::sendto(
                a.as_raw_fd(),
                msg.as_ptr().cast(),
                msg.len(),
                0,
                std::ptr::null(),
                0,
            )
        };
        assert_eq!(r, 5);
        let mut got = -1;
        for _ in 0..1000 {
            // SAFETY: as above.
            got = unsafe {
                sys::recv(
                    b.as_raw_fd(),
                    buf.as_mut_ptr().cast(),
                    buf.len(),
                    libc::MSG_DONTWAIT,
                )
            };
            if got >= 0 {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        assert_eq!(got, 5);
        assert_eq!(&buf[..5], msg);
        let (c, d) = (a.as_raw_fd(), Datagram::whole(0, b"gathered"));
        let mut iov = iovecs(&d);
        // SAFETY: msghdr is plain old data; all-zero is a valid value.
        let mut m: libc::msghdr = unsafe { std::mem::zeroed() };
        m.msg_iov = iov.as_mut_ptr();
        m.msg_iovlen = 1;
        // SAFETY: `m` points at `iov`, whose buffer is live for the call.
        assert_eq!(unsafe { sys::sendmsg(c, &m, 0) }, 8);
        // A bad descriptor: -1 and EBADF, as from glibc.
        // SAFETY: the kernel rejects the descriptor before it touches the buffer.
        let r = unsafe { sys::sendto(-1, msg.as_ptr().cast(), msg.len(), 0, std::ptr::null(), 0) };
        assert_eq!(r, -1);
        assert_eq!(errno(), libc::EBADF);
    }
}
