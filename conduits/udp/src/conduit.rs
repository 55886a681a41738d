//! The [`Conduit`] implementation over [`Proto`]: a rank of a udp job, its clock, and when it
//! looks at the socket and runs the protocol's transmit planner.
//!
//! Everything protocol-related lives in [`Proto`]; the conduit only moves datagrams between it
//! and the kernel, through edges of its own in sibling modules: the system calls and socket
//! setup (`socket`), fault injection on outgoing datagrams (`faults`), the local segment
//! (`segment`) and what the environment asks for (`settings`). The protocol state is behind
//! one mutex: UDP costs a system call per batch anyway, and the lock is never held while a
//! handler runs (handlers may reply, which sends).
//!
//! The round-trip path is kept to one system call per datagram on each side: a lone datagram
//! goes out with `send` on a socket connected to its destination, which spares the kernel a
//! route lookup per datagram (`sendto` on the main socket where there is none; `sendmsg` with
//! two iovecs for a datagram whose payload chunk stays in the caller's memory; a batch with
//! `sendmmsg`), an idle poll looks with `recv` (up to three times back to back, so that a
//! datagram arriving between polls waits less; once when the host is oversubscribed), once two
//! looks in a row found a datagram the polls use `recvmmsg`, so that a stream is taken in
//! batches while a lone answer keeps the cheaper `recv`, and the protocol's transmit planner
//! runs only when something changed or a timer is due ([`Proto::next_timeout`]), not on every
//! poll. The single-datagram calls are plain system calls, without glibc's cancellation-point
//! wrappers (module `socket`).
//!
//! Nothing between a message and its system call waits on the clock or the planner: a send
//! when nothing else was due takes the protocol's direct path ([`Proto::send_now`]), which
//! hands each datagram of the message to the socket as soon as it is encoded and reads the
//! clock afterwards; a poll reads the clock once, before it looks at the socket, to stamp what
//! arrives; and a message that a lone datagram completes goes from the receive buffer to its
//! handler without a queue ([`Proto::on_datagram_direct`]).
//!
//! With `AMNET_UDP_AUTH=1` the socket edge tags what the protocol sends and checks what it
//! receives before the protocol sees it (`crate::auth`); the protocol never knows.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::Instant;

use amnet_core::config::Source;
use amnet_core::{Category, Conduit, Error, InMsg, LocalSegment, OutMsg, Rank, Result};

use crate::auth::{Mac, Secret};
use crate::boot::{BootClient, JobLink};
use crate::faults::Injector;
use crate::proto::{Datagram, Delivery, Proto, SendError, Sent};
use crate::segment::SegSink;
use crate::settings::Settings;
use crate::socket::{self, EdgeCounters, RxRing, Socket};
use crate::wire::AmHeader;
use amnet_core::mem::HeapSegment;

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
/// Lone receives in a row that must find a datagram before the receives take batches.
const RX_STREAK: u8 = 2;
/// Deliveries handed to the core per poll at most.
const DELIVER_BUDGET: usize = 64;
/// The largest payload a poll hands to its handler straight from the datagram, without a
/// queued delivery (copied once, to the stack).
const INLINE_MAX: usize = 256;
/// Looks at an idle socket per poll.
const IDLE_LOOKS: usize = 3;

/// A conduit error of this conduit.
pub(crate) fn cerr(msg: impl Into<String>) -> Error {
    Error::conduit("udp", msg.into())
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
    /// Fault injection on every datagram sent.
    inject: Injector,
    edge: EdgeCounters,
    failure_reported: bool,
}

/// A rank of a udp job.
pub struct UdpConduit {
    rank: Rank,
    size: u32,
    sock: Socket,
    /// The bootstrap connection (exit, agreement), or a job of one rank's own exit word.
    job: JobLink,
    inner: Mutex<Inner>,
    seg: OnceLock<HeapSegment>,
    epoch: Instant,
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
        Self::new(&Source::env())
    }

    /// [`UdpConduit::from_env`] with the settings of `src` (values set in code win over the
    /// environment; see `amnet_core::config`).
    pub fn new(src: &Source) -> Result<UdpConduit> {
        static JOINED: AtomicBool = AtomicBool::new(false);
        if JOINED.swap(true, Ordering::AcqRel) {
            return Err(Error::Config(
                "amnet::init called twice in one process: a process is one rank; clone the \
                 Endpoint to use it from several threads"
                    .into(),
            ));
        }
        let Settings {
            rank,
            size,
            boot,
            faults,
            cfg,
            bind_ip,
            boot_timeout,
            auth,
            secret,
        } = Settings::resolve(src)?;
        let sock = socket::bind(bind_ip)?;
        let port = sock
            .local_addr()
            .map_err(|e| Error::os("udp", "getsockname", e))?
            .port();
        let (rank, size, boot, peers, key) = match (rank, size, boot) {
            (None, None, None) => {
                let me = sock
                    .local_addr()
                    .map_err(|e| Error::os("udp", "getsockname", e))?;
                (0, 1, None, vec![me], 1u64)
            }
            (Some(rank), Some(size), Some(server)) => {
                if rank >= size {
                    return Err(Error::Config(format!(
                        "AMNET_RANK={rank} is not below AMNET_SIZE={size}"
                    )));
                }
                if auth && secret.is_none() {
                    return Err(Error::Config(
                        "AMNET_UDP_AUTH=1 needs the job's secret, AMNET_UDP_SECRET, which amrun \
                         sets (start the job with amrun --conduit udp)"
                            .into(),
                    ));
                }
                let c = BootClient::join(server, rank, port, boot_timeout, secret.as_ref(), auth)?;
                if c.table.len() != size as usize {
                    return Err(cerr(format!(
                        "the launcher knows {} ranks but AMNET_SIZE is {size}",
                        c.table.len()
                    )));
                }
                if let Some(other) = c.auth.iter().position(|&a| a != auth) {
                    let on = |a: bool| if a { "1" } else { "0" };
                    return Err(Error::Config(format!(
                        "rank {other} runs with AMNET_UDP_AUTH={} and rank {rank} with \
                         AMNET_UDP_AUTH={}: every rank of a job must agree",
                        on(!auth),
                        on(auth)
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
        let mac = match (auth, secret) {
            (false, _) => None,
            (true, Some(s)) => Some(Mac::datagrams(&s)),
            // A job of one rank sends no datagram; a key of its own keeps the rule simple.
            (true, None) => Some(Mac::datagrams(
                &Secret::random().map_err(|e| Error::os("udp", "getrandom", e))?,
            )),
        };
        let sock = Socket::new(sock, &peers, rank, size, bind_ip, mac);
        let epoch = Instant::now();
        let proto =
            Proto::new(cfg, rank, size, key, 0).map_err(|e| Error::Config(format!("udp: {e}")))?;
        Ok(UdpConduit {
            rank,
            size,
            sock,
            job: JobLink::new(boot),
            inner: Mutex::new(Inner {
                proto,
                held: VecDeque::new(),
                batch: Vec::new(),
                rx: RxRing::new(),
                rx_hits: 0,
                tx_due: 0,
                tx_stale: false,
                clock: 0,
                inject: Injector::new(
                    faults,
                    0x9e37_79b9_7f4a_7c15 ^ (u64::from(rank) << 17) ^ u64::from(port) | 1,
                ),
                edge: EdgeCounters::default(),
                failure_reported: false,
            }),
            seg: OnceLock::new(),
            epoch,
            oversubscribed: size > cores(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn now(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_micros()).unwrap_or(u64::MAX)
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
                inject,
                edge,
                ..
            } = inner;
            let tx = |d: Datagram<'_>| inject.put_on_wire(&self.sock, &[d], edge) == 1;
            let sent = if hold {
                // SAFETY: this function's contract with `hold`: the payload stays valid and
                // unchanged until `release_held`, which ends the hold.
                unsafe { proto.send_now_held(dest, msg, tx, || self.now()) }
            } else {
                proto.send_now(dest, msg, tx, || self.now())
            };
            inject.flush_late(&self.sock, edge);
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
            Err(SendError::PeerFailed(rank)) => Err(Error::PeerFailed {
                conduit: "udp",
                rank,
                detail: "silent past AMNET_UDP_PEER_TIMEOUT".into(),
            }),
            Err(e) => Err(cerr(format!("cannot send to rank {dest}: {e}"))),
        }
    }

    /// Hand the protocol's due datagrams to the socket (through fault injection).
    fn transmit(&self, inner: &mut Inner, now: u64) {
        let Inner {
            proto,
            inject,
            edge,
            ..
        } = inner;
        proto.poll_transmit(now, |dgrams: &[Datagram<'_>]| {
            inject.put_on_wire(&self.sock, dgrams, edge)
        });
        inject.flush_late(&self.sock, edge);
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
        let found = self.sock.recv_one(&mut inner.rx, &mut inner.edge);
        inner.rx_hits = match found {
            Some(_) => (inner.rx_hits + 1).min(RX_STREAK),
            None => 0,
        };
        found
    }

    /// A streak: take batches with `recvmmsg` until the socket is empty (a bounded number of
    /// them, [`Socket::recv_batch`]); finding nothing ends the streak. Returns whether it took
    /// any datagram.
    fn recv_batch(&self, inner: &mut Inner, now: u64) -> bool {
        let Inner {
            proto,
            rx,
            rx_hits,
            edge,
            ..
        } = inner;
        let total = self.sock.recv_batch(rx, edge, |bytes| {
            // Drops are counted by the protocol (foreign job, malformed, duplicate).
            let _ = proto.on_datagram(now, bytes);
        });
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
        let detail =
            format!("not heard from for {secs} s, AMNET_UDP_PEER_TIMEOUT; the job cannot go on");
        if !inner.failure_reported {
            inner.failure_reported = true;
            amnet_core::diag!(
                "amnet udp rank {}: rank {r} has failed ({detail})",
                self.rank
            );
        }
        Err(Error::PeerFailed {
            conduit: "udp",
            rank: r,
            detail,
        })
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

    /// Take `seg` as the segment: Long payloads and puts land in it from then on, once every
    /// rank has its own (the exchange).
    fn attach_with(&self, seg: HeapSegment) -> Result<LocalSegment> {
        self.seg.set(seg).map_err(|_| Error::AlreadyAttached)?;
        let s = self.seg.get().ok_or(Error::AlreadyAttached)?;
        self.lock().proto.set_long_sink(Box::new(SegSink {
            ptr: s.ptr(),
            len: s.len() as u64,
        }));
        // Everyone has its segment before anyone sends into it.
        self.exchange(&[])?;
        Ok(LocalSegment {
            base: s.ptr(),
            len: s.len(),
        })
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
                    amnet_core::diag!(
                        "amnet udp rank {}: dropped a Long from rank {} before attach",
                        self.rank,
                        src
                    );
                    return true;
                };
                let off = am.long_offset;
                let len = placed.unwrap_or(payload.len() as u64);
                let end = off.checked_add(len);
                if !matches!(end, Some(e) if e <= seg.len() as u64) {
                    amnet_core::diag!(
                        "amnet udp rank {}: dropped a Long from rank {} outside the segment",
                        self.rank,
                        src
                    );
                    return true;
                }
                let at = usize::try_from(off).unwrap_or(0);
                let len = usize::try_from(len).unwrap_or(0);
                let dst = seg.ptr();
                // SAFETY: the range was checked against the segment just above; the segment
                // stays allocated for the conduit's life; clients that touch the same bytes
                // concurrently break the core's contract, not memory safety of this copy.
                unsafe {
                    if placed.is_none() {
                        amnet_core::mem::copy(payload.as_ptr(), dst.add(at), len);
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

impl Conduit for UdpConduit {
    fn name(&self) -> &'static str {
        "udp"
    }
    fn idle_wait(&self, max: std::time::Duration) {
        self.sock.wait_readable(max);
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
        self.job.exchange(blob, &|c| self.terminate(c))
    }

    fn attach_segment(&self, len: usize, _lens: &[usize]) -> Result<LocalSegment> {
        self.attach_with(HeapSegment::new("udp", len)?)
    }

    unsafe fn attach_segment_in(&self, seg: LocalSegment, _lens: &[usize]) -> Result<()> {
        // SAFETY: forwarded contract: the memory outlives the conduit.
        self.attach_with(unsafe { HeapSegment::borrowed(seg) })
            .map(|_| ())
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

    fn held_pending(&self, dest: Rank, payload: &[u8]) -> bool {
        self.lock().proto.held_pending(dest, payload)
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
            ("auth_failures", e.auth_failures),
            ("injected_loss", e.injected_loss),
            ("injected_dup", e.injected_dup),
            ("injected_reorder", e.injected_reorder),
            ("injected_forged", e.injected_forged),
            ("send_errors", e.send_errors),
        ]
    }

    fn exit_word(&self) -> Option<&std::sync::atomic::AtomicU64> {
        Some(self.job.exit_word())
    }

    fn exit_requested(&self) -> Option<i32> {
        self.job.exit_requested()
    }

    fn request_exit(&self, code: i32) -> i32 {
        self.job.request_exit(code)
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
