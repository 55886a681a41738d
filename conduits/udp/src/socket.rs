//! The socket edge's system calls, kept apart from the conduit as quinn-udp keeps them apart
//! from quinn: socket setup (the main socket, its buffers, and one socket per peer connected
//! to it), the single-datagram calls made as plain system calls (module `sys`), batching with
//! `sendmmsg` and `recvmmsg`, and what their results mean. [`Socket`] only moves bytes: when
//! to look at the socket and what to do with what arrives is the conduit's business.
//!
//! A lone datagram goes out with `send` on a socket connected to its destination, which spares
//! the kernel a route lookup per datagram (`sendto` on the main socket where there is none;
//! `sendmsg` with two iovecs for a datagram whose payload chunk stays in the caller's memory);
//! several go out with one `sendmmsg` on the main socket. A look at the socket is one `recv`
//! ([`Socket::recv_one`]) or rounds of `recvmmsg` into a ring of buffers built once
//! ([`Socket::recv_batch`]).
//!
//! With `AMNET_UDP_AUTH=1` the socket edge tags every datagram it sends and checks the tag of
//! every datagram it receives (`crate::auth`): a datagram leaves as its bytes, its payload
//! chunk where it lies and its tag, gathered by `sendmsg`/`sendmmsg` (one system call as
//! without), and a received datagram whose tag does not verify is dropped and counted
//! (`auth_failures`) before anything decodes it. Without, each of these is one test of a
//! setting on the path.

use std::mem::MaybeUninit;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;

use amnet_core::{Rank, Result};

use crate::auth::{Mac, TAG_LEN};
use crate::proto::{Datagram, BATCH};
use amnet_core::Error;

/// Datagrams taken from the socket per `recvmmsg` call.
const RX_BATCH: usize = 32;
/// `recvmmsg` calls per poll at most (fairness with the caller's own work).
const RX_ROUNDS: usize = 8;
/// With a MAC, datagrams taken per poll at most: checking a tag costs several times the
/// datagram's copy, and the acks of what a poll took leave only once it is all taken in, so a
/// poll takes fewer, lest a sender's retransmission timeout run out first.
const RX_AUTH_BATCH: usize = 8;
/// Room for any datagram.
const RX_BUF: usize = 65536;
/// The most peers that get a connected socket of their own for lone datagrams (beyond, every
/// datagram leaves through the main socket with `sendto`).
const CONNECTED_MAX: u32 = 64;

/// Counts of the socket edge (the protocol keeps its own).
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct EdgeCounters {
    pub(crate) send_errors: u64,
    pub(crate) injected_loss: u64,
    pub(crate) injected_dup: u64,
    pub(crate) injected_reorder: u64,
    pub(crate) injected_forged: u64,
    pub(crate) rx_errors: u64,
    /// Datagrams dropped because their tag did not verify (`AMNET_UDP_AUTH=1`).
    pub(crate) auth_failures: u64,
}

/// The receive buffers and the `recvmmsg` headers that point into them, built once.
pub(crate) struct RxRing {
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
    pub(crate) fn first(&self, len: usize) -> &[u8] {
        self.bufs[0].get(..len).unwrap_or_default()
    }

    /// The ring: [`RX_BATCH`] buffers of [`RX_BUF`] bytes, with their headers.
    pub(crate) fn new() -> RxRing {
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

/// The rank's sockets: the main one, which receives everything and sends batches, and one per
/// peer connected to it for lone datagrams.
pub(crate) struct Socket {
    sock: UdpSocket,
    /// Every rank's socket address, encoded once for `sendto`/`sendmmsg`.
    addrs: Vec<(libc::sockaddr_storage, libc::socklen_t)>,
    /// Per rank, a socket connected to its main socket, through which lone datagrams to it
    /// leave with `send` (the kernel keeps the route of a connected socket instead of looking
    /// it up on every `sendto`); `None` for this rank, in jobs of more than
    /// [`CONNECTED_MAX`] peers, and where it could not be set up.
    conn: Vec<Option<UdpSocket>>,
    /// With `AMNET_UDP_AUTH=1`, the datagram MAC: every datagram sent carries its tag, and
    /// every datagram received must.
    mac: Option<Mac>,
}

/// The main socket of a rank: a non-blocking UDP socket on `ip` (any port), with send and
/// receive buffers of 8 MiB.
pub(crate) fn bind(ip: IpAddr) -> Result<UdpSocket> {
    let sock = UdpSocket::bind(SocketAddr::new(ip, 0))
        .map_err(|e| Error::os("udp", format!("bind a UDP socket on {ip}"), e))?;
    sock.set_nonblocking(true)
        .map_err(|e| Error::os("udp", "set_nonblocking", e))?;
    let fd = sock.as_raw_fd();
    set_buf(fd, libc::SO_RCVBUF, 8 << 20);
    set_buf(fd, libc::SO_SNDBUF, 8 << 20);
    // As root the caps of net.core.[rw]mem_max do not apply.
    set_buf(fd, libc::SO_RCVBUFFORCE, 8 << 20);
    set_buf(fd, libc::SO_SNDBUFFORCE, 8 << 20);
    Ok(sock)
}

impl Socket {
    /// Wait at most `max` until the main socket has a datagram to read (`ppoll(2)`); returns
    /// early on a signal or an error, which the next receive reports.
    pub(crate) fn wait_readable(&self, max: std::time::Duration) {
        let mut pfd = libc::pollfd {
            fd: self.sock.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let ts = libc::timespec {
            tv_sec: libc::time_t::try_from(max.as_secs()).unwrap_or(libc::time_t::MAX),
            tv_nsec: libc::c_long::from(max.subsec_nanos()),
        };
        // SAFETY: `pfd` is one valid pollfd and `ts` a valid timespec for the call (no signal
        // mask); the socket stays open meanwhile.
        unsafe { libc::ppoll(&mut pfd, 1, &ts, std::ptr::null()) };
    }

    /// The sockets of rank `rank` in a job of `size` ranks whose main sockets are at `peers`:
    /// `sock`, this rank's main socket from [`bind`] on `ip`, and a connected socket per peer
    /// where there are few enough peers and it can be set up; with `mac`, datagrams are tagged
    /// and checked.
    pub(crate) fn new(
        sock: UdpSocket,
        peers: &[SocketAddr],
        rank: Rank,
        size: u32,
        ip: IpAddr,
        mac: Option<Mac>,
    ) -> Socket {
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
                .map(|(r, &a)| (r != rank as usize).then(|| connected(ip, a)).flatten())
                .collect()
        } else {
            Vec::new()
        };
        Socket {
            sock,
            addrs,
            conn,
            mac,
        }
    }

    /// The datagram MAC in force, if any.
    pub(crate) fn mac(&self) -> Option<&Mac> {
        self.mac.as_ref()
    }

    /// The address of the main socket.
    pub(crate) fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.sock.local_addr()
    }

    /// Send one datagram: with `send` (`sendmsg` when it has a tail) on the destination's
    /// connected socket, else with `sendto` (`sendmmsg` when it has a tail) on the main
    /// socket; with a MAC, with `sendmsg` of the datagram and its tag ([`Socket::send_tagged`]).
    /// False when the socket buffer is full (offer it again later); a datagram the kernel
    /// refuses is counted and dropped.
    pub(crate) fn send_one(&self, d: Datagram<'_>, edge: &mut EdgeCounters) -> bool {
        if let Some(mac) = &self.mac {
            return self.send_tagged(d, mac, edge);
        }
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
    /// as for [`Socket::send_one`].
    fn send_gathered(&self, fd: libc::c_int, d: Datagram<'_>, edge: &mut EdgeCounters) -> bool {
        let (mut iov, n) = iovecs(&d, None);
        // SAFETY: msghdr is plain old data; all-zero is a valid value (no name: the socket is
        // connected).
        let mut m: libc::msghdr = unsafe { std::mem::zeroed() };
        m.msg_iov = iov.as_mut_ptr();
        m.msg_iovlen = n;
        loop {
            // SAFETY: `m` points at `iov`, whose buffers (`d`'s bytes and tail) are live for
            // the call; the kernel only reads them.
            let r = unsafe { sys::sendmsg(fd, &m, libc::MSG_DONTWAIT) };
            if let Some(taken) = send_outcome(r, edge) {
                return taken;
            }
        }
    }

    /// [`Socket::send_one`] with a MAC: one `sendmsg` of `d`'s bytes, its tail and its tag,
    /// on the destination's connected socket, else on the main socket addressed to it. The
    /// tag is computed over the bytes and the tail where they lie.
    #[inline(never)]
    fn send_tagged(&self, d: Datagram<'_>, mac: &Mac, edge: &mut EdgeCounters) -> bool {
        let tag = mac.tag(&[d.bytes, d.tail]);
        let (mut iov, n) = iovecs(&d, Some(&tag));
        // SAFETY: msghdr is plain old data; all-zero is a valid value.
        let mut m: libc::msghdr = unsafe { std::mem::zeroed() };
        m.msg_iov = iov.as_mut_ptr();
        m.msg_iovlen = n;
        let fd = match self.conn.get(d.dest as usize).and_then(Option::as_ref) {
            Some(c) => c.as_raw_fd(),
            None => {
                let (addr, len) = &self.addrs[d.dest as usize];
                m.msg_name = std::ptr::from_ref(addr).cast_mut().cast();
                m.msg_namelen = *len;
                self.sock.as_raw_fd()
            }
        };
        loop {
            // SAFETY: `m` points at `iov`, whose buffers (`d`'s bytes and tail, `tag`) are live
            // for the call, and at an address of `self.addrs` or none; the kernel only reads
            // them.
            let r = unsafe { sys::sendmsg(fd, &m, libc::MSG_DONTWAIT) };
            if let Some(taken) = send_outcome(r, edge) {
                return taken;
            }
        }
    }

    /// Send `bytes` to `dest` as they are, untagged, on the main socket: the forgeries of
    /// fault injection (`AMNET_UDP_FORGE`). What the kernel says is not counted.
    pub(crate) fn send_raw(&self, dest: Rank, bytes: &[u8]) {
        let (addr, len) = &self.addrs[dest as usize];
        // SAFETY: `bytes` and `addr` are live for the call and the kernel only reads them;
        // `len` is the length `sockaddr` wrote.
        unsafe {
            sys::sendto(
                self.sock.as_raw_fd(),
                bytes.as_ptr().cast(),
                bytes.len(),
                0,
                std::ptr::from_ref(addr).cast(),
                *len,
            )
        };
    }

    /// Send a batch: one datagram with [`Socket::send_one`], more with one `sendmmsg`.
    /// Returns how many the kernel took (the rest are offered again later). A full socket
    /// buffer is not an error.
    pub(crate) fn send_batch(&self, batch: &[Datagram<'_>], edge: &mut EdgeCounters) -> usize {
        match batch {
            [] => return 0,
            [d] => return usize::from(self.send_one(*d, edge)),
            _ => {}
        }
        self.send_batch_now(batch, edge)
    }

    /// [`Socket::send_batch`] with one `sendmmsg`, whatever the batch's length: each
    /// datagram is gathered from its bytes, its tail (a payload chunk sent from where it
    /// lies) and, with a MAC, its tag.
    fn send_batch_now(&self, batch: &[Datagram<'_>], edge: &mut EdgeCounters) -> usize {
        let n = batch.len().min(BATCH);
        let mut iovs = [const { MaybeUninit::<[libc::iovec; 3]>::uninit() }; BATCH];
        let mut msgs = [const { MaybeUninit::<libc::mmsghdr>::uninit() }; BATCH];
        let mut tags = [const { MaybeUninit::<[u8; TAG_LEN]>::uninit() }; BATCH];
        for (i, d) in batch.iter().take(n).enumerate() {
            let (addr, len) = &self.addrs[d.dest as usize];
            let tag = self
                .mac
                .as_ref()
                .map(|mac| &*tags[i].write(mac.tag(&[d.bytes, d.tail])));
            let (v, used) = iovecs(d, tag);
            let iov = iovs[i].write(v);
            // SAFETY: mmsghdr is plain old data; all-zero is a valid value.
            let mut m: libc::mmsghdr = unsafe { std::mem::zeroed() };
            m.msg_hdr.msg_name = std::ptr::from_ref(addr).cast_mut().cast();
            m.msg_hdr.msg_namelen = *len;
            m.msg_hdr.msg_iov = iov.as_mut_ptr();
            m.msg_hdr.msg_iovlen = used;
            msgs[i].write(m);
        }
        let msgs = msgs.as_mut_ptr().cast::<libc::mmsghdr>();
        let mut done = 0usize;
        while done < n {
            // SAFETY: `msgs[..n]` were initialized above and point at addresses of `self.addrs`
            // and iovecs of this frame, whose buffers (`batch`, the tags of this frame)
            // outlive the call; the kernel only reads them (and writes `msg_len`).
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

    /// One `recv` into the first buffer of `rx` ([`RxRing::first`]), the cheapest look at an
    /// empty socket (an empty `recvmmsg` costs half as much again). Returns the length of the
    /// datagram it found (with a MAC, less its tag, which verified); `None` when there was none,
    /// the call failed (counted in `rx_errors`, unless it found the socket empty or was
    /// interrupted) or the datagram's tag did not verify (counted in `auth_failures`).
    pub(crate) fn recv_one(&self, rx: &mut RxRing, edge: &mut EdgeCounters) -> Option<usize> {
        let buf = &mut rx.bufs[0];
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
                edge.rx_errors += 1;
            }
            return None;
        };
        let len = len.min(RX_BUF);
        match &self.mac {
            None => Some(len),
            Some(mac) => open(mac, &rx.bufs[0][..len], edge).map(<[u8]>::len),
        }
    }

    /// Batches of up to [`RX_BATCH`] datagrams with `recvmmsg` into `rx`, until the socket is
    /// empty (at most [`RX_ROUNDS`] calls; with a MAC, one call of [`RX_AUTH_BATCH`]), each
    /// datagram handed to `take` as it lies in its buffer (with a MAC, without its tag, once
    /// the tag verified; a datagram whose tag does not is counted in `auth_failures` and
    /// dropped). Returns how many it took.
    pub(crate) fn recv_batch(
        &self,
        rx: &mut RxRing,
        edge: &mut EdgeCounters,
        mut take: impl FnMut(&[u8]),
    ) -> usize {
        let fd = self.sock.as_raw_fd();
        let (batch, rounds) = match self.mac {
            None => (RX_BATCH, RX_ROUNDS),
            Some(_) => (RX_AUTH_BATCH, 1),
        };
        let mut total = 0;
        for _ in 0..rounds {
            // SAFETY: every header of `rx.msgs` points at an iovec of `rx._iovs` and through it
            // at a live buffer of `rx.bufs` of the stated length, which the kernel fills.
            let r = unsafe {
                libc::recvmmsg(
                    fd,
                    rx.msgs.as_mut_ptr(),
                    u32::try_from(batch).unwrap_or(1),
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
                match &self.mac {
                    None => take(&buf[..len]),
                    Some(mac) => match open(mac, &buf[..len], edge) {
                        Some(body) => take(body),
                        None => continue,
                    },
                }
                total += 1;
            }
            if got < batch {
                break;
            }
        }
        total
    }
}

/// `size_of::<T>()` as a socket length (every socket structure is far below 4 GiB).
fn socklen<T>() -> libc::socklen_t {
    libc::socklen_t::try_from(std::mem::size_of::<T>()).unwrap_or(libc::socklen_t::MAX)
}

/// Sets the socket option `opt` (a buffer size) of `fd` to `bytes`, where the kernel allows.
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

/// A received datagram without its tag when the tag verifies; else `None`, counted in
/// `auth_failures`.
#[inline]
fn open<'a>(mac: &Mac, datagram: &'a [u8], edge: &mut EdgeCounters) -> Option<&'a [u8]> {
    let body = mac.open(datagram);
    if body.is_none() {
        edge.auth_failures += 1;
    }
    body
}

/// An iovec of `b` (which the kernel only reads).
fn iov(b: &[u8]) -> libc::iovec {
    libc::iovec {
        iov_base: b.as_ptr().cast_mut().cast(),
        iov_len: b.len(),
    }
}

/// The buffers of `d` on the wire and how many there are: its bytes, then its tail (empty and
/// left out but for a datagram whose payload chunk stays in the sender's memory), then its
/// `tag`, if any.
fn iovecs(d: &Datagram<'_>, tag: Option<&[u8; TAG_LEN]>) -> ([libc::iovec; 3], usize) {
    match tag {
        None => {
            let used = if d.tail.is_empty() { 1 } else { 2 };
            ([iov(d.bytes), iov(d.tail), iov(&[])], used)
        }
        Some(t) if d.tail.is_empty() => ([iov(d.bytes), iov(t), iov(&[])], 2),
        Some(t) => ([iov(d.bytes), iov(d.tail), iov(t)], 3),
    }
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

/// Writes `a` into `out` as the kernel's socket address; returns its length.
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::Secret;

    /// With a MAC, every way a datagram leaves (a lone one on a connected socket or on the
    /// main socket, with a held tail or without, a batch) carries a tag that the receiver
    /// checks and takes off, with `recv` and with `recvmmsg`; untagged and wrongly tagged
    /// datagrams are dropped and counted in `auth_failures`.
    #[test]
    fn tagged_datagrams_pass_and_forged_ones_are_counted() {
        let ip = IpAddr::V4(std::net::Ipv4Addr::LOCALHOST);
        let mac = Mac::datagrams(&Secret([0x42; 16]));
        let (a, b) = (bind(ip).unwrap(), bind(ip).unwrap());
        let peers = [a.local_addr().unwrap(), b.local_addr().unwrap()];
        let a2 = bind(ip).unwrap();
        // A peer socket per destination, and (a job too large for them) none.
        let tx = Socket::new(a, &peers, 0, 2, ip, Some(mac));
        let tx_main = Socket::new(a2, &peers, 0, 100, ip, Some(mac));
        assert!(tx.conn[1].is_some() && tx_main.conn.is_empty());
        let rx_sock = Socket::new(b, &peers, 1, 2, ip, Some(mac));
        let held = |bytes: &'static [u8], tail: &'static [u8]| Datagram {
            dest: 1,
            bytes,
            tail,
        };
        let mut edge = EdgeCounters::default();
        let mut rx = RxRing::new();
        let mut rx_edge = EdgeCounters::default();
        let wait = || std::thread::sleep(std::time::Duration::from_millis(30));
        for round in 0..2 {
            assert!(tx.send_one(Datagram::whole(1, b"lone"), &mut edge));
            assert!(tx.send_one(held(b"head+", b"held tail"), &mut edge));
            assert!(tx_main.send_one(Datagram::whole(1, b"main"), &mut edge));
            assert!(tx_main.send_one(held(b"main+", b"tail"), &mut edge));
            tx.send_raw(1, b"no tag at all, but long enough for one");
            let mut wrong = b"a tag of other bytes".to_vec();
            wrong.extend_from_slice(&mac.tag(&[b"other bytes"]));
            tx.send_raw(1, &wrong);
            let batch = [
                Datagram::whole(1, b"one"),
                held(b"two+", b"tail"),
                Datagram::whole(1, b"three"),
            ];
            assert_eq!(tx.send_batch(&batch, &mut edge), 3);
            wait();
            let mut got: Vec<Vec<u8>> = Vec::new();
            if round == 0 {
                // Lone receives: a forged datagram is no datagram.
                for _ in 0..9 {
                    if let Some(len) = rx_sock.recv_one(&mut rx, &mut rx_edge) {
                        got.push(rx.first(len).to_vec());
                    }
                }
            } else {
                // Batches of at most RX_AUTH_BATCH: more than one call for the nine.
                let mut n = 0;
                for _ in 0..3 {
                    n += rx_sock.recv_batch(&mut rx, &mut rx_edge, |d| got.push(d.to_vec()));
                }
                assert_eq!(n, 7);
            }
            let want: [&[u8]; 7] = [
                b"lone",
                b"head+held tail",
                b"main",
                b"main+tail",
                b"one",
                b"two+tail",
                b"three",
            ];
            assert_eq!(got, want, "round {round}");
            assert_eq!(rx_edge.auth_failures, 2 * (round + 1));
        }
        assert_eq!(edge.send_errors, 0);
        // A receiver without the MAC sees the tags as bytes of the datagram.
        let plain = Socket::new(bind(ip).unwrap(), &peers, 1, 2, ip, None);
        let to_plain = [peers[0], plain.local_addr().unwrap()];
        let tx = Socket::new(bind(ip).unwrap(), &to_plain, 0, 2, ip, Some(mac));
        assert!(tx.send_one(Datagram::whole(1, b"lone"), &mut edge));
        wait();
        let len = plain.recv_one(&mut rx, &mut rx_edge).unwrap();
        assert_eq!(len, 4 + TAG_LEN);
        assert_eq!(mac.open(rx.first(len)), Some(&b"lone"[..]));
    }

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
        let (mut iov, _) = iovecs(&d, None);
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
