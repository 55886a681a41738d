//! The `Conduit` implementation: active messages over libfabric's tagged interface.
//!
//! Every message is one tagged send whose tag carries the job and its class. Requests,
//! replies and the conduit's own messages share one class and one set of pre-posted receive
//! buffers (the header tells them apart): libfabric's shm matches a message by walking its
//! posted receives from the oldest, and with a class per kind every message walked past the
//! buffers of the other. The message body is a 20-byte header (with the sender's rank), the
//! arguments and the payload. The tag's source field stays 0 in these messages
//! (under `ofi_tag_full` the source goes in the CQ data as well): their receives match any
//! source, and libfabric 1.17's shm and udp;ofi_rxd providers never match a message that
//! arrived before its receive was posted to a receive whose ignore mask covers bits where the
//! message's tag differs from it (`raw`'s `unexpected_messages_match_later_receives` test tells
//! it), so a source in the tag would strand messages. Exact receives (a split Long's data)
//! name the source in the tag. Long
//! payloads up to [`EAGER_MAX`] travel in the message and are copied into the segment on
//! arrival; larger ones follow their header as a second tagged message of a class of their
//! own (one per sender, destination and sequence number), which the target receives straight
//! into its segment before the handler runs.
//!
//! A receive that completes is posted again at once (its message, if small, copied out) or
//! replaced by a spare, so that the provider never runs out of buffers to receive into while
//! the poller runs a handler (spec/ofi.md §4). The exception is the poller's own read: a small
//! message that completes there while no other waits is delivered from its buffer, which is
//! posted again once the handler has run.
//!
//! Progress is the MTL's: a poll reads up to `AMNET_OFI_PROGRESS_EVENT_CNT` completions per
//! `fi_cq_read` until the queue is drained, and maps each to its operation through the
//! operation's context. A send that finds no room drives the queue once itself (its
//! completions wait in `ready` for the next poll), so that a handler's reply that meets a full
//! queue cannot wait forever.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use amnet_core::config::{vars, Source};
use amnet_core::mem::HeapSegment;
use amnet_core::{
    AwakeWindow, Category, Conduit, Error, InMsg, LocalSegment, NativeRma, OutMsg, Rank, Result,
    MAX_ARGS,
};
use amnet_udp::boot::JobLink;

use crate::raw::{Choice, Completion, FiContext, OfiEndpoint};
use crate::rma::{OfiRma, Remote, Slots};
use crate::tag::{Layout, TagMode};

/// Largest Medium payload.
pub const MAX_MEDIUM: usize = 65_536;
/// Largest Long payload that travels inside its message; larger ones follow as a second one.
pub const EAGER_MAX: usize = MAX_MEDIUM;
/// Header bytes: handler, flags, argument count, 0, payload length (u32 LE), Long offset (u64
/// LE), source rank (u32 LE).
const HDR: usize = 20;
/// Room of one receive buffer.
const RECV_BYTES: usize = HDR + 4 * MAX_ARGS + EAGER_MAX;
/// Receive buffers kept posted for header messages (requests, replies and the conduit's own).
const RECVS: usize = 64;
/// Messages built on the stack and injected when the provider allows that many bytes.
const INJECT_STACK: usize = 256;

/// Class of header messages: requests, replies, nudges and credit messages alike (the header
/// tells them apart), so that every posted receive matches the first message that comes: a
/// provider that matches by walking its posted receives (libfabric's shm does) then finds a
/// match at the head of the list.
const CLASS_AM: u32 = 0;
/// First class of Long data messages: `CLASS_LONG + seq`.
const CLASS_LONG: u32 = 1;
/// Long sequence numbers run modulo this (every class fits 20 bits, the narrowest layout).
const LONG_SEQS: u32 = (1 << 20) - CLASS_LONG;
/// The job id in every tag: a job's endpoints are its own, so one value serves.
const JOB: u64 = 1;

/// Flag bits of the header's second byte.
const F_REPLY: u8 = 0x04;
const F_SPLIT: u8 = 0x08;
/// A nudge: no handler runs; the receiver keeps its idle waits awake a while (`crate::rma`).
const F_NUDGE: u8 = 0x10;
/// A credit message: no handler runs; it only returns credits (the header's fourth byte).
const F_CREDIT: u8 = 0x20;
/// A split Long whose data comes as an RMA write with remote CQ data, not as a message.
const F_WRITTEN: u8 = 0x40;
/// Bits of a written Long's remote CQ data that hold its sequence number (the sender's rank
/// is above them).
const SEQ_BITS: u32 = 32;

fn cerr(msg: impl Into<String>) -> Error {
    Error::conduit("ofi", msg.into())
}

/// A decoded header.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Header {
    handler: u8,
    category: Category,
    is_reply: bool,
    split: bool,
    nudge: bool,
    credit: bool,
    written: bool,
    /// Credits returned to the receiver (the fourth byte).
    returned: u8,
    nargs: usize,
    len: usize,
    long_offset: u64,
    src: u32,
}

/// Write the header and arguments of `m` (payload length `len`) into `out`; returns the bytes
/// written.
#[inline]
fn put_header(out: &mut [u8], m: &OutMsg<'_>, src: Rank, split: bool, len: usize) -> usize {
    let nargs = m.args.len();
    out[0] = m.handler;
    out[1] =
        m.category.code() | if m.is_reply { F_REPLY } else { 0 } | if split { F_SPLIT } else { 0 };
    out[2] = u8::try_from(nargs).unwrap_or(u8::MAX);
    out[3] = 0;
    out[4..8].copy_from_slice(&u32::try_from(len).unwrap_or(u32::MAX).to_le_bytes());
    out[8..16].copy_from_slice(&m.long_offset.to_le_bytes());
    out[16..20].copy_from_slice(&src.to_le_bytes());
    for (i, a) in m.args.iter().enumerate() {
        out[HDR + 4 * i..HDR + 4 * i + 4].copy_from_slice(&a.to_le_bytes());
    }
    HDR + 4 * nargs
}

#[inline(always)]
fn parse_header(b: &[u8]) -> std::result::Result<Header, String> {
    if b.len() < HDR || usize::from(b[2]) > MAX_ARGS {
        return Err(header_error(b));
    }
    let Some(category) = Category::from_code(b[1]) else {
        return Err(header_error(b));
    };
    let nargs = usize::from(b[2]);
    let len = u32::from_le_bytes([b[4], b[5], b[6], b[7]]) as usize;
    let mut off = [0u8; 8];
    off.copy_from_slice(&b[8..16]);
    let src = u32::from_le_bytes([b[16], b[17], b[18], b[19]]);
    Ok(Header {
        handler: b[0],
        category,
        is_reply: b[1] & F_REPLY != 0,
        split: b[1] & F_SPLIT != 0,
        nudge: b[1] & F_NUDGE != 0,
        credit: b[1] & F_CREDIT != 0,
        written: b[1] & F_WRITTEN != 0,
        returned: b[3],
        nargs,
        len,
        long_offset: u64::from_le_bytes(off),
        src,
    })
}

/// True when the message `body` (as received) is a reply: the header's reply flag.
fn is_reply_body(body: &[u8]) -> bool {
    body.get(1).is_some_and(|f| f & F_REPLY != 0)
}

/// Why `parse_header` refused `b`.
#[cold]
fn header_error(b: &[u8]) -> String {
    if b.len() < HDR {
        format!("a message of {} bytes is shorter than a header", b.len())
    } else if Category::from_code(b[1]).is_none() {
        format!("category bits {:#x}", b[1])
    } else {
        format!("{} arguments", b[2])
    }
}

/// What an operation in flight is.
pub(crate) enum OpKind {
    /// A posted receive of header messages.
    Recv,
    /// A send whose buffer returns to the pool.
    Send,
    /// A send whose buffer is dropped (a split Long's data).
    SendOnce,
    /// The data of a split Long, received into the segment: its sender, data class, header
    /// and arguments.
    LongData {
        src: Rank,
        class: u32,
        hdr: Header,
        args: [u32; MAX_ARGS],
    },
    /// A native RMA operation of the slot with this index (`crate::rma`).
    Rma(u32),
}

/// One operation in flight: its context first, so that the completion's context pointer is
/// the operation's address.
#[repr(C)]
pub(crate) struct Op {
    pub(crate) ctx: FiContext,
    pub(crate) kind: OpKind,
    pub(crate) buf: Vec<u8>,
}

impl Op {
    pub(crate) fn boxed(kind: OpKind, cap: usize) -> Box<Op> {
        Box::new(Op {
            ctx: FiContext::new(),
            kind,
            buf: vec![0; cap],
        })
    }
}

/// Operation pointers held across threads (each owned by whoever holds the pointer).
struct OpPtr(*mut Op);
// SAFETY: an `Op` is plain data owned by the holder of its pointer.
unsafe impl Send for OpPtr {}

/// Poll state: one poller at a time.
struct PollState;

/// A received message waiting for delivery.
enum Ready {
    /// A small message copied out of its receive buffer (posted again at once), with its
    /// completion.
    Copied(Vec<u8>, Completion),
    /// A larger message still in its receive buffer (a spare buffer was posted in its
    /// place), or a split Long's data in the segment.
    Held(OpPtr, Completion),
    /// A written Long (header and data both in): its sender, header and arguments.
    Written(Rank, Header, [u32; MAX_ARGS]),
}

/// The poller's delivery straight from its completion reads (`Engine::progress`).
struct Direct<'a> {
    /// Only replies may be delivered (`Conduit::poll`'s `replies_only`).
    replies_only: bool,
    sink: &'a mut dyn FnMut(&InMsg<'_>) -> bool,
    /// Messages delivered so far.
    delivered: usize,
    /// False once the sink asked to stop (or a delivery failed): the rest wait in `ready`.
    more: bool,
}

/// Half of a written Long that came before the other half.
enum HalfLong {
    /// The header and arguments (the data is not written yet).
    Header(Header, [u32; MAX_ARGS]),
    /// The data's completion (the header is not delivered yet).
    Data,
}

/// Messages up to this many bytes are copied out of their receive buffer when they complete,
/// so that the buffer is posted again at once: requests that wait for a poller busy in a
/// handler then never keep the provider's queue full, which would keep out the replies that
/// the handler waits for.
const COPY_MAX: usize = 1024;

/// The ofi conduit of one rank.
pub struct OfiConduit {
    eng: Arc<Engine>,
    /// Native put and get, where the provider offers RMA and every rank registered its
    /// segment.
    rma: OnceLock<Arc<OfiRma>>,
    /// Whether a Long over `EAGER_MAX` may travel as one write (`AMNET_OFI_LONG_WRITE`).
    long_write: bool,
}

impl std::fmt::Debug for OfiConduit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.eng.fmt(f)
    }
}

impl OfiConduit {
    /// Take `seg` as the segment, register it for RMA where the provider offers it, and
    /// learn every rank's registration (`Conduit::attach_segment`, `attach_segment_in`).
    fn attach_with(&self, seg: HeapSegment) -> Result<LocalSegment> {
        self.eng.seg.set(seg).map_err(|_| Error::AlreadyAttached)?;
        let s = self.eng.seg.get().ok_or(Error::AlreadyAttached)?;
        // Register the segment for RMA where the provider offers it; every rank learns every
        // other's base and key (a rank that could not register sends an empty blob, and then
        // no rank uses RMA). The exchange also has everyone hold its segment before anyone
        // sends a Long into it.
        let region = if self.eng.ep.has_rma() && !s.is_empty() {
            // SAFETY: the segment lives as long as the conduit; the region is never closed
            // while the process runs (`OfiRma` keeps it).
            match unsafe {
                self.eng
                    .ep
                    .register(s.ptr(), s.len(), u64::from(self.eng.rank) + 1)
            } {
                Ok(r) => Some(r),
                Err(e) => {
                    amnet_core::diag!(
                        "amnet ofi rank {}: no native RMA: {e}; put and get travel as active \
                         messages",
                        self.eng.rank
                    );
                    None
                }
            }
        } else {
            None
        };
        let blob: Vec<u8> = region.as_ref().map_or_else(Vec::new, |r| {
            [r.remote_base, r.key, r.len as u64]
                .iter()
                .flat_map(|w| w.to_le_bytes())
                .collect()
        });
        let all = self.exchange(&blob)?;
        let peers: Option<Vec<Remote>> = all
            .iter()
            .map(|b| {
                (b.len() == 24).then(|| {
                    let w = |i: usize| {
                        let mut x = [0u8; 8];
                        x.copy_from_slice(&b[8 * i..8 * i + 8]);
                        u64::from_le_bytes(x)
                    };
                    Remote {
                        base: w(0),
                        key: w(1),
                        len: w(2),
                    }
                })
            })
            .collect();
        match (region, peers) {
            (Some(region), Some(peers)) => {
                let _ = self.rma.set(Arc::new(OfiRma::new(
                    self.eng.clone(),
                    region,
                    peers,
                    s.ptr(),
                    s.len(),
                )));
            }
            (Some(region), None) => self.eng.ep.close_region(region),
            (None, _) => {}
        }
        Ok(LocalSegment {
            base: s.ptr(),
            len: s.len(),
        })
    }

    /// Join the job `src` describes (`AMNET_RANK`, `AMNET_SIZE` and the launcher's bootstrap
    /// service, `AMNET_UDP_BOOT`, as `amrun --conduit ofi` sets them; none of them: a job of
    /// one rank), on the provider the `AMNET_OFI_*` variables choose.
    pub fn new(src: &Source) -> Result<OfiConduit> {
        let long_write = src.flag(&vars::OFI_LONG_WRITE)?.unwrap_or(true);
        Ok(OfiConduit {
            eng: Arc::new(Engine::new(src)?),
            rma: OnceLock::new(),
            long_write,
        })
    }

    /// The provider chosen.
    pub fn provider(&self) -> String {
        self.eng.ep.provider()
    }
}

/// The state of one rank's conduit, shared with its native RMA (`crate::rma`).
pub(crate) struct Engine {
    pub(crate) rank: Rank,
    pub(crate) size: u32,
    pub(crate) ep: OfiEndpoint,
    layout: Layout,
    /// The tag of every header message (sent and received alike), and the CQ data this rank
    /// sends with one (`ofi_tag_full`: its rank).
    am_tag: u64,
    am_data: Option<u64>,
    /// Every rank's address in the address vector, by rank.
    addrs: Vec<u64>,
    /// The bootstrap connection (exit, agreement), or a job of one rank's own exit word.
    job: JobLink,
    event_cnt: usize,
    pub(crate) oversubscribed: bool,
    /// Idle polls an RMA wait spins before it yields (`AMNET_SPIN`, as the core resolves it).
    pub(crate) spin: u32,
    /// Send operations with buffers of `RECV_BYTES`, ready for reuse.
    pool: Mutex<Vec<OpPtr>>,
    /// Received messages not delivered yet, in arrival order.
    ready: Mutex<VecDeque<Ready>>,
    /// How many there are (read without the lock: the poller delivers a message straight
    /// from its completion only while none waits).
    ready_len: AtomicUsize,
    /// Receives whose posting found no room, to post again.
    repost: Mutex<Vec<OpPtr>>,
    /// How many there are (the poller takes the lock only when some wait).
    repost_len: AtomicUsize,
    /// Receive buffers not posted (taken when a large message's buffer is held).
    spares: Mutex<Vec<OpPtr>>,
    /// Vectors for copied small messages.
    smalls: Mutex<Vec<Vec<u8>>>,
    poll_state: Mutex<PollState>,
    /// Next Long sequence number towards each rank.
    long_seq: Vec<AtomicU32>,
    /// Written Longs of which one half came, by sender and sequence number.
    halves: Mutex<std::collections::HashMap<(Rank, u32), HalfLong>>,
    seg: OnceLock<HeapSegment>,
    /// Native RMA operations in flight.
    pub(crate) slots: Slots,
    /// Open while a peer's nudge keeps this rank's idle waits awake.
    awake: AwakeWindow,
    /// When each peer was last nudged (ns of `now_ns`, 0: never).
    nudged: Vec<AtomicU64>,
    /// Requests towards each rank (`AMNET_OFI_AM_CREDITS` each), and credits owed to each.
    credits: amnet_core::credits::Credits,
    /// The first error the completion queue reported, for RMA waiters that did not read it.
    failed: OnceLock<String>,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "OfiConduit(rank {} of {}, {})",
            self.rank,
            self.size,
            self.ep.provider()
        )
    }
}

impl Engine {
    fn new(src: &Source) -> Result<Engine> {
        let include = src.text(&vars::OFI_PROVIDER_INCLUDE).unwrap_or_default();
        let exclude = src.text(&vars::OFI_PROVIDER_EXCLUDE).unwrap_or_default();
        let mode = match src.text(&vars::OFI_TAG_MODE) {
            Some(m) if !m.is_empty() => TagMode::parse(&m).map_err(Error::Config)?,
            _ => TagMode::Auto,
        };
        let event_cnt = src
            .count_usize(&vars::OFI_PROGRESS_EVENT_CNT)?
            .unwrap_or(100);
        let credits = src.count_u32(&vars::OFI_AM_CREDITS)?;
        let amnet_udp::boot::Joined {
            rank, size, boot, ..
        } = amnet_udp::boot::join_job(src, "ofi")?;
        // tcp and udp bind where the launcher is reached from (loopback for a job on one
        // host).
        let node = boot.as_ref().map(|b| b.local_ip.to_string());
        let ep = OfiEndpoint::open(&Choice::from_lists(&include, &exclude, node.as_deref()))?;
        let layout = ep.tag_layout(mode, size, JOB, CLASS_LONG + LONG_SEQS - 1)?;
        // The tag's source field stays 0 for header messages, which are received from any
        // source (see the module documentation); under `ofi_tag_full` the source is the CQ
        // data.
        let tag_src = if layout.src_in_cq_data() { rank } else { 0 };
        let (am_tag, am_data) = layout.encode(0, JOB, tag_src, CLASS_AM);
        let me = ep.address()?;
        let job = JobLink::new(boot);
        let all = job.exchange(&me, &|c| std::process::exit(c))?;
        let addrs = ep.insert(&all)?;
        // udp;ofi_rxd keeps at most 128 packets unacknowledged towards a peer: more requests
        // in flight than that window holds (a 4 KiB Medium takes four packets) stall it under
        // floods that also carry RMA.
        let credit_max = credits.unwrap_or(if ep.provider().contains("ofi_rxd") {
            16
        } else {
            64
        });
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let oversubscribed = size as usize > cores;
        let spin = amnet_core::EndpointConfig::resolve(src, oversubscribed)?.spin;
        let c = Engine {
            rank,
            size,
            ep,
            layout,
            am_tag,
            am_data,
            addrs,
            job,
            event_cnt,
            oversubscribed,
            spin,
            pool: Mutex::new(Vec::new()),
            ready: Mutex::new(VecDeque::new()),
            ready_len: AtomicUsize::new(0),
            repost: Mutex::new(Vec::new()),
            repost_len: AtomicUsize::new(0),
            spares: Mutex::new(Vec::new()),
            smalls: Mutex::new(Vec::new()),
            poll_state: Mutex::new(PollState),
            long_seq: (0..size).map(|_| AtomicU32::new(0)).collect(),
            halves: Mutex::new(std::collections::HashMap::new()),
            seg: OnceLock::new(),
            slots: Slots::new(),
            awake: AwakeWindow::new(),
            nudged: (0..size).map(|_| AtomicU64::new(0)).collect(),
            credits: amnet_core::credits::Credits::new(size, credit_max),
            failed: OnceLock::new(),
        };
        for _ in 0..RECVS {
            // Owned by the conduit from here on: posted, delivered, posted again; freed never
            // (the provider may write a posted receive until its endpoint closes, and a
            // conduit lives until its process ends).
            let op = Box::into_raw(Op::boxed(OpKind::Recv, RECV_BYTES));
            c.post_or_queue(op)?;
        }
        if src.flag(&vars::VERBOSE)?.unwrap_or(false) && rank == 0 {
            let (p, j, s, cl, r) = c.layout.widths();
            amnet_core::diag!(
                "amnet ofi: {}; tag layout {} (protocol {p}, job {j}, source {s}, class {cl} \
                 bits; {r} reserved)",
                c.ep.describe(),
                c.layout.mode().name()
            );
        }
        Ok(c)
    }

    /// Post the receive `op`, or keep it for the next poll when the provider has no room.
    fn post_or_queue(&self, op: *mut Op) -> Result<()> {
        // SAFETY: callers pass a live receive operation this conduit owns and has not posted.
        if !unsafe { self.post_recv(op) }? {
            let mut q = self.repost.lock().unwrap_or_else(|e| e.into_inner());
            q.push(OpPtr(op));
            self.repost_len.store(q.len(), Ordering::Release);
        }
        Ok(())
    }

    /// Post the receive `op` (a `Recv` or `LongData` operation). `Ok(false)`: no room now.
    ///
    /// # Safety
    /// - `op` is a live operation this conduit owns, not posted already; a `LongData` one's
    ///   buffer is unused (it receives into the segment range its header names, checked).
    unsafe fn post_recv(&self, op: *mut Op) -> Result<bool> {
        // SAFETY: the caller's contract.
        let o = unsafe { &mut *op };
        let ctx = std::ptr::addr_of_mut!(o.ctx);
        match &o.kind {
            OpKind::Recv => {
                let (tag, ignore) = self.layout.recv_any(JOB, CLASS_AM);
                // SAFETY: `o.buf` and the context live until the completion (the conduit
                // owns the operation until then).
                unsafe {
                    self.ep
                        .recv(None, tag, ignore, o.buf.as_mut_ptr(), o.buf.len(), ctx)
                }
            }
            OpKind::LongData {
                src, class, hdr, ..
            } => {
                let seg = self.seg.get().ok_or_else(|| cerr("a Long before attach"))?;
                let off = usize::try_from(hdr.long_offset).unwrap_or(usize::MAX);
                if !seg.fits(hdr.long_offset, hdr.len) {
                    return Err(cerr(format!(
                        "rank {src} sent a Long of {} bytes at offset {} beyond the segment \
                         ({} bytes)",
                        hdr.len,
                        hdr.long_offset,
                        seg.len()
                    )));
                }
                let (tag, ignore) = self.layout.recv_exact(0, JOB, *src, *class);
                let from = self
                    .layout
                    .src_in_cq_data()
                    .then(|| self.addrs[*src as usize]);
                // SAFETY: the range lies inside the segment (checked), which outlives the
                // conduit's operations; the core's contract leaves it to this Long.
                unsafe {
                    self.ep
                        .recv(from, tag, ignore, seg.ptr().add(off), hdr.len, ctx)
                }
            }
            OpKind::Send | OpKind::SendOnce | OpKind::Rma(_) => {
                Err(cerr("posting a send as a receive"))
            }
        }
    }

    pub(crate) fn dest_addr(&self, dest: Rank) -> Result<u64> {
        self.addrs
            .get(dest as usize)
            .copied()
            .ok_or_else(|| cerr(format!("rank {dest} is not in the job of {}", self.size)))
    }

    fn take_send_op(&self) -> *mut Op {
        let mut p = self.pool.lock().unwrap_or_else(|e| e.into_inner());
        match p.pop() {
            Some(OpPtr(op)) => op,
            None => Box::into_raw(Op::boxed(OpKind::Send, RECV_BYTES)),
        }
    }

    fn give_send_op(&self, op: *mut Op) {
        self.pool
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(OpPtr(op));
    }

    /// Read completions once (up to `event_cnt`): finished sends are recycled, receives wait
    /// in `ready`, RMA slots are marked done. Returns how many were read. An error is kept
    /// for the RMA waiters that did not read it (`rma_check`).
    pub(crate) fn progress_once(&self) -> Result<usize> {
        self.progress(None)
    }

    /// `progress_once`, where the poller passes `direct`: then a small header message that
    /// completes while nothing waits in `ready` is delivered from its receive buffer at once.
    fn progress(&self, mut direct: Option<&mut Direct<'_>>) -> Result<usize> {
        let mut first_err = None;
        let n = self.ep.read_cq_each(self.event_cnt, |c| {
            if first_err.is_none() {
                first_err = self.on_completion(c, direct.as_deref_mut()).err();
            }
        });
        let n = match n {
            Ok(n) => n,
            Err(e) => {
                let _ = self.failed.set(e.to_string());
                return Err(e);
            }
        };
        match first_err {
            Some(e) => Err(e),
            None => Ok(n),
        }
    }

    /// One completion read by `progress`.
    fn on_completion(&self, c: &Completion, direct: Option<&mut Direct<'_>>) -> Result<()> {
        // A peer's write into the segment: told by its flags, never by its context (libfabric
        // 1.17's shm may leave one there that is not this rank's).
        if c.flags & crate::ffi::FI_REMOTE_WRITE() != 0 {
            if c.flags & crate::ffi::FI_REMOTE_CQ_DATA() != 0 {
                return self.long_written(c.data);
            }
            return Ok(());
        }
        let op = c.context.cast::<Op>();
        if op.is_null() {
            return Ok(());
        }
        // SAFETY: every context this conduit posts is the first field of a live `Op`
        // (`repr(C)`), owned by the operation until this completion.
        match unsafe { &(*op).kind } {
            OpKind::Send => self.give_send_op(op),
            // SAFETY: a one-shot send, boxed by `send_split`, completes once.
            OpKind::SendOnce => drop(unsafe { Box::from_raw(op) }),
            OpKind::Recv => {
                // SAFETY: the completed receive is this reader's until posted again.
                let o = unsafe { &mut *op };
                let len = c.len.min(o.buf.len());
                if let Some(d) = direct {
                    if d.more
                        && len <= COPY_MAX
                        && self.ready_len.load(Ordering::Acquire) == 0
                        && (!d.replies_only || is_reply_body(&o.buf))
                    {
                        // The poller delivers it from the buffer, which is posted again once
                        // the handler has run (no completion can name it meanwhile).
                        let res = self.deliver_msg(&o.buf[..len], c, d.sink, false);
                        self.post_or_queue(op)?;
                        let (delivered, more) = res.inspect_err(|_| d.more = false)?;
                        d.delivered += usize::from(delivered);
                        d.more = more;
                        return Ok(());
                    }
                }
                if self.take_control(&o.buf[..len], c) {
                    return self.post_or_queue(op);
                }
                if len <= COPY_MAX {
                    let mut v = self
                        .smalls
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .pop()
                        .unwrap_or_else(|| Vec::with_capacity(COPY_MAX));
                    v.clear();
                    v.extend_from_slice(&o.buf[..len]);
                    self.push_ready(Ready::Copied(v, *c));
                    self.post_or_queue(op)?;
                } else {
                    self.push_ready(Ready::Held(OpPtr(op), *c));
                    let spare = self
                        .spares
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .pop()
                        .map_or_else(
                            || Box::into_raw(Op::boxed(OpKind::Recv, RECV_BYTES)),
                            |OpPtr(p)| p,
                        );
                    // SAFETY: a spare is a receive operation owned by the conduit and
                    // not posted.
                    unsafe { (*spare).kind = OpKind::Recv };
                    self.post_or_queue(spare)?;
                }
            }
            OpKind::LongData { .. } => self.push_ready(Ready::Held(OpPtr(op), *c)),
            OpKind::Rma(i) => self.slots.st.complete(*i),
        }
        Ok(())
    }

    /// End this process with `code` once the job is ending (`Conduit::terminate`).
    pub(crate) fn terminate(&self, code: i32) -> ! {
        // Best effort: drive the queue briefly so that sends just made leave.
        let t0 = std::time::Instant::now();
        while t0.elapsed() < Duration::from_millis(20) {
            if self.progress_once().unwrap_or(0) == 0 {
                break;
            }
        }
        use std::io::Write;
        let _ = std::io::stdout().flush();
        std::process::exit(code)
    }

    /// Between polls of an RMA wait: the queue's error, or the job's end (this process then
    /// ends with the job's code, as the core's waits do).
    pub(crate) fn rma_check(&self) -> Result<()> {
        if let Some(code) = self.job.exit_requested() {
            self.terminate(code);
        }
        match self.failed.get() {
            Some(e) => Err(cerr(format!("the completion queue failed: {e}"))),
            None => Ok(()),
        }
    }

    /// Keep `dest` polling while this rank waits on it (RMA towards it, credits from it):
    /// a nudge unless it had one in the last `NUDGE_EVERY_NS` (see `crate::rma`).
    pub(crate) fn nudge(&self, dest: Rank) {
        let Some(last) = self.nudged.get(dest as usize) else {
            return;
        };
        let now = amnet_core::now_ns().max(1);
        let then = last.load(Ordering::Relaxed);
        if then != 0 && now.saturating_sub(then) < crate::rma::NUDGE_EVERY_NS {
            return;
        }
        if self.send_nudge(dest) {
            last.store(now, Ordering::Relaxed);
        }
    }

    /// Send `dest` a nudge (best effort: false when the provider has no room now).
    fn send_nudge(&self, dest: Rank) -> bool {
        self.send_bytes(dest, HDR, |b: &mut [u8]| {
            b.fill(0);
            b[1] = F_NUDGE;
            b[16..20].copy_from_slice(&self.rank.to_le_bytes());
        })
        .unwrap_or(false)
    }

    /// Take what a received message carries for the conduit itself before its delivery: the
    /// credits it returns, and the whole of a nudge or a credit message (true: nothing is left
    /// to deliver). A message whose header does not check out is left to its delivery, which
    /// reports it.
    fn take_control(&self, body: &[u8], c: &Completion) -> bool {
        if body.len() < HDR || (body[1] & (F_NUDGE | F_CREDIT) == 0 && body[3] == 0) {
            return false;
        }
        let Ok(h) = parse_header(body) else {
            return false;
        };
        let Ok(src) = self.source_of(c, &h) else {
            return false;
        };
        self.apply_control(&h, src)
    }

    /// Take the credits a checked header from `src` returns, and its nudge; true when the
    /// message is only a nudge or a credit message (nothing to deliver).
    fn apply_control(&self, h: &Header, src: Rank) -> bool {
        if h.returned > 0 {
            self.credits.give_back(src, u32::from(h.returned));
        }
        if h.nudge {
            self.awake.nudged();
        }
        h.nudge || h.credit
    }

    /// A request from `src` was delivered: its credit is owed back (at once, to this rank).
    fn owe(&self, src: Rank) {
        if src == self.rank {
            self.credits.give_back(src, 1);
        } else {
            self.credits.owe(src);
        }
    }

    /// Return by credit messages the credits owed to ranks that are due half of theirs or
    /// more (`owe`); what finds no room now stays due for the next poll.
    fn return_credits(&self) -> Result<()> {
        for dest in self.credits.due() {
            let sent = self.send_bytes(dest, HDR, |b: &mut [u8]| {
                b.fill(0);
                b[1] = F_CREDIT;
                b[16..20].copy_from_slice(&self.rank.to_le_bytes());
            })?;
            if !sent {
                self.credits.still_due();
            }
        }
        Ok(())
    }

    /// The data of the written Long that `data` (remote CQ data) names is in the segment.
    fn long_written(&self, data: u64) -> Result<()> {
        let src = Rank::try_from(data >> SEQ_BITS).unwrap_or(Rank::MAX);
        let seq = u32::try_from(data & ((1 << SEQ_BITS) - 1)).unwrap_or(u32::MAX);
        if src >= self.size || seq >= LONG_SEQS {
            return Err(cerr(format!(
                "an RMA write with remote CQ data {data:#x}: no rank and Long of this job"
            )));
        }
        let mut h = self.halves.lock().unwrap_or_else(|e| e.into_inner());
        match h.remove(&(src, seq)) {
            Some(HalfLong::Header(hdr, args)) => {
                drop(h);
                self.push_ready(Ready::Written(src, hdr, args));
            }
            Some(HalfLong::Data) => {
                return Err(cerr(format!(
                    "rank {src} wrote the data of its Long {seq} twice"
                )))
            }
            None => {
                h.insert((src, seq), HalfLong::Data);
            }
        }
        Ok(())
    }

    fn push_ready(&self, r: Ready) {
        let mut q = self.ready.lock().unwrap_or_else(|e| e.into_inner());
        q.push_back(r);
        self.ready_len.store(q.len(), Ordering::Release);
    }

    /// Check a received header message's tag (job and class) and its sender (from the
    /// header; under `ofi_tag_full` also the CQ data, which must agree).
    #[inline(always)]
    fn source_of(&self, c: &Completion, h: &Header) -> std::result::Result<u32, String> {
        // What every well-formed one looks like; `source_error` names what is wrong with the
        // others.
        if c.tag == self.am_tag
            && (self.am_data.is_none() || c.data == u64::from(h.src))
            && h.src < self.size
        {
            return Ok(h.src);
        }
        Err(self.source_error(c, h))
    }

    /// Why `source_of` refused a message.
    #[cold]
    fn source_error(&self, c: &Completion, h: &Header) -> String {
        let (_, job, tag_src, class) = match self.layout.decode(c.tag, c.data) {
            Ok(d) => d,
            Err(e) => return e,
        };
        if job != JOB || class != CLASS_AM {
            return format!("a message of job {job}, class {class}");
        }
        if self.layout.src_in_cq_data() && tag_src != h.src {
            return format!(
                "a message whose header names rank {} and whose CQ data names rank {tag_src}",
                h.src
            );
        }
        if h.src >= self.size {
            return format!(
                "a message from rank {}, beyond the job's {}",
                h.src, self.size
            );
        }
        format!(
            "a message with tag {:#018x}, where this job's messages have {:#018x}",
            c.tag, self.am_tag
        )
    }

    /// Send a header message of `total` bytes built by `fill` to `dest`; `Ok(false)`: no
    /// room now.
    #[inline]
    fn send_bytes(&self, dest: Rank, total: usize, fill: impl Fn(&mut [u8])) -> Result<bool> {
        let to = self.dest_addr(dest)?;
        let (tag, data) = (self.am_tag, self.am_data);
        // Credits owed to `dest` ride in the fourth byte, and are owed again if the message
        // does not leave.
        let give = self.credits.take_owed(dest);
        let unsent = |e: Option<Error>| {
            if give > 0 {
                self.credits.owe_n(dest, u32::from(give));
            }
            match e {
                Some(e) => Err(e),
                None => {
                    self.progress_once()?;
                    Ok(false)
                }
            }
        };
        if total <= INJECT_STACK && total <= self.ep.inject_size() {
            let mut b = [0u8; INJECT_STACK];
            fill(&mut b[..total]);
            b[3] = give;
            return match self.ep.inject(to, tag, data, &b[..total]) {
                Ok(true) => Ok(true),
                Ok(false) => unsent(None),
                Err(e) => unsent(Some(e)),
            };
        }
        let op = self.take_send_op();
        // SAFETY: `op` came from the pool or was just made; this thread owns it.
        let o = unsafe { &mut *op };
        if o.buf.len() < total {
            o.buf.resize(total, 0);
        }
        fill(&mut o.buf[..total]);
        o.buf[3] = give;
        let ctx = std::ptr::addr_of_mut!(o.ctx);
        // SAFETY: the buffer and context live in the operation until its completion, which
        // returns it to the pool.
        let sent = unsafe { self.ep.send(to, tag, data, o.buf.as_ptr(), total, ctx) };
        match sent {
            Ok(true) => Ok(true),
            Ok(false) => {
                self.give_send_op(op);
                unsent(None)
            }
            Err(e) => {
                self.give_send_op(op);
                unsent(Some(e))
            }
        }
    }

    /// The header of a split Long (flagged split and `flag`, with a fresh sequence number
    /// towards `dest` as its only payload word); `Ok(None)`: no room now.
    fn send_split_header(&self, dest: Rank, msg: &OutMsg<'_>, flag: u8) -> Result<Option<u32>> {
        // Taken atomically, so that threads sending split Longs to the same rank at once never
        // share a number (a number whose header finds no room is skipped: the target takes
        // each from its header).
        let seq = self.long_seq[dest as usize].fetch_add(1, Ordering::Relaxed) % LONG_SEQS;
        let hlen = HDR + 4 * msg.args.len();
        let ok = self.send_bytes(dest, hlen + 4, |b: &mut [u8]| {
            let n = put_header(b, msg, self.rank, true, msg.payload.len());
            b[1] |= flag;
            b[n..n + 4].copy_from_slice(&seq.to_le_bytes());
        })?;
        Ok(ok.then_some(seq))
    }

    /// A Long too large for one message: its header (flagged split, with the sequence number
    /// as the only payload word), then its data as a message of class `CLASS_LONG + seq`.
    fn send_split(&self, dest: Rank, msg: &OutMsg<'_>) -> Result<bool> {
        let Some(seq) = self.send_split_header(dest, msg, 0)? else {
            return Ok(false);
        };
        let to = self.dest_addr(dest)?;
        let (tag, data) = self.layout.encode(0, JOB, self.rank, CLASS_LONG + seq);
        let mut op = Op::boxed(OpKind::SendOnce, 0);
        op.buf = msg.payload.to_vec();
        let op = Box::into_raw(op);
        // SAFETY: `op` is ours until its completion frees it.
        let o = unsafe { &mut *op };
        let ctx = std::ptr::addr_of_mut!(o.ctx);
        loop {
            // SAFETY: the copy and the context live in the boxed operation until its
            // completion.
            match unsafe {
                self.ep
                    .send(to, tag, data, o.buf.as_ptr(), o.buf.len(), ctx)
            } {
                Ok(true) => return Ok(true),
                Ok(false) => {
                    self.progress_once()?;
                    std::thread::yield_now();
                }
                Err(e) => {
                    // SAFETY: not posted, so still ours.
                    drop(unsafe { Box::from_raw(op) });
                    return Err(e);
                }
            }
        }
    }

    /// A Long too large for one message, where the provider writes with remote CQ data: its
    /// header (flagged split and written, with the sequence number as the only payload word),
    /// then its payload as an RMA write into `dest`'s segment whose remote CQ data names this
    /// rank and the sequence number. Returns once the payload may be reused.
    fn send_written(&self, rma: &OfiRma, dest: Rank, msg: &OutMsg<'_>) -> Result<bool> {
        let Some(seq) = self.send_split_header(dest, msg, F_WRITTEN)? else {
            return Ok(false);
        };
        let data = (u64::from(self.rank) << SEQ_BITS) | u64::from(seq);
        rma.write_long(dest, msg.long_offset, msg.payload, data)?;
        Ok(true)
    }

    /// Deliver one received message to `sink`; returns (delivered, keep going).
    fn deliver(&self, r: &Ready, sink: &mut dyn FnMut(&InMsg<'_>) -> bool) -> Result<(bool, bool)> {
        match r {
            Ready::Copied(body, c) => self.deliver_msg(body, c, sink, true),
            Ready::Written(src, hdr, args) => self.deliver_written(*src, hdr, args, sink),
            Ready::Held(OpPtr(op), c) => {
                // SAFETY: a completed receive held for delivery: the poller's.
                let o = unsafe { &**op };
                match &o.kind {
                    OpKind::Recv => {
                        self.deliver_msg(&o.buf[..c.len.min(o.buf.len())], c, sink, true)
                    }
                    OpKind::LongData { src, hdr, args, .. } => {
                        if c.len != hdr.len {
                            return Err(cerr(format!(
                                "rank {src}'s Long data has {} bytes, its header said {}",
                                c.len, hdr.len
                            )));
                        }
                        // The range was checked when the receive was posted.
                        self.deliver_written(*src, hdr, args, sink)
                    }
                    OpKind::Send | OpKind::SendOnce | OpKind::Rma(_) => Ok((false, true)),
                }
            }
        }
    }

    /// Deliver a header message (`body` as received) to `sink`; returns (delivered, keep
    /// going). A split Long's header posts the receive of its data instead. `taken`: its
    /// credits and nudge were taken when it completed (`take_control`).
    fn deliver_msg(
        &self,
        body: &[u8],
        c: &Completion,
        sink: &mut dyn FnMut(&InMsg<'_>) -> bool,
        taken: bool,
    ) -> Result<(bool, bool)> {
        let h = parse_header(body).map_err(|e| cerr(format!("a message: {e}")))?;
        let src = self.source_of(c, &h).map_err(cerr)?;
        let control_only = if taken {
            h.nudge || h.credit
        } else {
            self.apply_control(&h, src)
        };
        if control_only {
            return Ok((false, true));
        }
        if !h.is_reply {
            self.owe(src);
        }
        let args_end = HDR + 4 * h.nargs;
        let mut args = [0u32; MAX_ARGS];
        if body.len() < args_end {
            return Err(cerr(format!("rank {src} sent a truncated message")));
        }
        for (i, a) in args.iter_mut().take(h.nargs).enumerate() {
            let mut w = [0u8; 4];
            w.copy_from_slice(&body[HDR + 4 * i..HDR + 4 * i + 4]);
            *a = u32::from_le_bytes(w);
        }
        if h.split {
            let mut w = [0u8; 4];
            w.copy_from_slice(body.get(args_end..args_end + 4).ok_or_else(|| {
                cerr(format!("rank {src} sent a split Long without its sequence"))
            })?);
            let seq = u32::from_le_bytes(w);
            if h.written {
                return self.long_header(src, seq, h, args, sink);
            }
            let class = CLASS_LONG + seq % LONG_SEQS;
            let d = Op::boxed(
                OpKind::LongData {
                    src,
                    class,
                    hdr: h,
                    args,
                },
                0,
            );
            // A fresh operation, owned by the conduit until its completion.
            self.post_or_queue(Box::into_raw(d))?;
            return Ok((false, true));
        }
        let payload = body.get(args_end..args_end + h.len).ok_or_else(|| {
            cerr(format!(
                "rank {src} sent a message shorter than its payload"
            ))
        })?;
        if h.category == Category::Long {
            let seg = self.seg.get().ok_or_else(|| cerr("a Long before attach"))?;
            let off = usize::try_from(h.long_offset).unwrap_or(usize::MAX);
            if !seg.fits(h.long_offset, h.len) {
                return Err(cerr(format!(
                    "rank {src} sent a Long of {} bytes at offset {} beyond the \
                     segment ({} bytes)",
                    h.len,
                    h.long_offset,
                    seg.len()
                )));
            }
            // SAFETY: the range lies inside the segment (checked); the core's
            // contract gives it to this Long, and the receive buffer is separate.
            unsafe { amnet_core::mem::copy(payload.as_ptr(), seg.ptr().add(off), h.len) };
            // SAFETY: as above; the bytes were just written.
            let land = unsafe { std::slice::from_raw_parts(seg.ptr().add(off), h.len) };
            let m = InMsg {
                src,
                handler: h.handler,
                category: h.category,
                is_reply: h.is_reply,
                args: &args[..h.nargs],
                payload: land,
                long_offset: h.long_offset,
            };
            return Ok((true, sink(&m)));
        }
        let m = InMsg {
            src,
            handler: h.handler,
            category: h.category,
            is_reply: h.is_reply,
            args: &args[..h.nargs],
            payload: if h.category == Category::Short {
                &[]
            } else {
                payload
            },
            long_offset: 0,
        };
        Ok((true, sink(&m)))
    }

    /// Run the handler of a split Long whose header and data are both in (its range was
    /// checked when the header arrived).
    fn deliver_written(
        &self,
        src: Rank,
        hdr: &Header,
        args: &[u32; MAX_ARGS],
        sink: &mut dyn FnMut(&InMsg<'_>) -> bool,
    ) -> Result<(bool, bool)> {
        let seg = self.seg.get().ok_or_else(|| cerr("a Long before attach"))?;
        let off = usize::try_from(hdr.long_offset).unwrap_or(usize::MAX);
        // SAFETY: the range lies in the segment (checked when the header arrived); the data
        // landed in it (the sender's write or the receive completed).
        let land = unsafe { std::slice::from_raw_parts(seg.ptr().add(off), hdr.len) };
        let m = InMsg {
            src,
            handler: hdr.handler,
            category: Category::Long,
            is_reply: hdr.is_reply,
            args: &args[..hdr.nargs],
            payload: land,
            long_offset: hdr.long_offset,
        };
        Ok((true, sink(&m)))
    }

    /// The header of a written Long: its handler runs now if the data is in, else when it
    /// comes (`long_written`).
    fn long_header(
        &self,
        src: Rank,
        seq: u32,
        h: Header,
        args: [u32; MAX_ARGS],
        sink: &mut dyn FnMut(&InMsg<'_>) -> bool,
    ) -> Result<(bool, bool)> {
        let seg = self.seg.get().ok_or_else(|| cerr("a Long before attach"))?;
        if !seg.fits(h.long_offset, h.len) || seq >= LONG_SEQS {
            return Err(cerr(format!(
                "rank {src} sent a Long of {} bytes at offset {} beyond the segment ({} \
                 bytes), or of sequence {seq}",
                h.len,
                h.long_offset,
                seg.len()
            )));
        }
        let mut halves = self.halves.lock().unwrap_or_else(|e| e.into_inner());
        match halves.remove(&(src, seq)) {
            Some(HalfLong::Data) => {
                drop(halves);
                self.deliver_written(src, &h, &args, sink)
            }
            Some(HalfLong::Header(..)) => Err(cerr(format!(
                "rank {src} sent the header of its Long {seq} twice"
            ))),
            None => {
                halves.insert((src, seq), HalfLong::Header(h, args));
                Ok((false, true))
            }
        }
    }

    /// True when `r` carries a reply (or a reply's Long data).
    fn is_reply(r: &Ready) -> bool {
        match r {
            Ready::Written(_, hdr, _) => hdr.is_reply,
            Ready::Copied(body, _) => is_reply_body(body),
            Ready::Held(OpPtr(op), _) => {
                // SAFETY: a completed operation held for delivery: the poller's.
                let o = unsafe { &**op };
                match &o.kind {
                    OpKind::Recv => is_reply_body(&o.buf),
                    OpKind::LongData { hdr, .. } => hdr.is_reply,
                    _ => false,
                }
            }
        }
    }

    /// After delivery: a copied message's vector and a held buffer go back to their pools; a
    /// split Long's data operation is freed.
    fn recycle(&self, r: Ready) {
        match r {
            Ready::Copied(v, _) => self
                .smalls
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(v),
            Ready::Written(..) => {}
            Ready::Held(OpPtr(op), _) => {
                // SAFETY: a completed operation, the poller's.
                if let OpKind::LongData { .. } = unsafe { &(*op).kind } {
                    // SAFETY: boxed in `deliver_msg`, completed once, no longer posted.
                    drop(unsafe { Box::from_raw(op) });
                } else {
                    self.spares
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .push(OpPtr(op));
                }
            }
        }
    }
}

impl OfiConduit {
    /// One poll (`Conduit::poll`) without the credit returns that follow it.
    fn poll_inner(
        &self,
        replies_only: bool,
        sink: &mut dyn FnMut(&InMsg<'_>) -> bool,
    ) -> Result<usize> {
        let Ok(_st) = self.eng.poll_state.try_lock() else {
            // Another thread polls (or a handler of this thread's poll sends): drive the
            // queue only.
            self.eng.progress_once()?;
            return Ok(0);
        };
        if self.eng.repost_len.load(Ordering::Acquire) > 0 {
            let queued = {
                let mut q = self.eng.repost.lock().unwrap_or_else(|e| e.into_inner());
                self.eng.repost_len.store(0, Ordering::Release);
                std::mem::take(&mut *q)
            };
            for OpPtr(op) in queued {
                self.eng.post_or_queue(op)?;
            }
        }
        let mut d = Direct {
            replies_only,
            sink,
            delivered: 0,
            more: true,
        };
        loop {
            let read = self.eng.progress(Some(&mut d))?;
            if !d.more {
                return Ok(d.delivered);
            }
            while self.eng.ready_len.load(Ordering::Acquire) > 0 {
                let next = {
                    let mut r = self.eng.ready.lock().unwrap_or_else(|e| e.into_inner());
                    let i = if replies_only {
                        r.iter().position(Engine::is_reply)
                    } else if r.is_empty() {
                        None
                    } else {
                        Some(0)
                    };
                    let next = i.and_then(|i| r.remove(i));
                    self.eng.ready_len.store(r.len(), Ordering::Release);
                    next
                };
                let Some(r) = next else { break };
                let res = self.eng.deliver(&r, d.sink);
                self.eng.recycle(r);
                let (delivered, more) = res?;
                d.delivered += usize::from(delivered);
                if !more {
                    return Ok(d.delivered);
                }
            }
            if read < self.eng.event_cnt.min(256) {
                return Ok(d.delivered);
            }
        }
    }
}

impl Conduit for OfiConduit {
    fn name(&self) -> &'static str {
        "ofi"
    }
    fn rank(&self) -> Rank {
        self.eng.rank
    }
    fn size(&self) -> u32 {
        self.eng.size
    }
    fn max_medium(&self) -> usize {
        MAX_MEDIUM
    }
    fn oversubscribed(&self) -> bool {
        self.eng.oversubscribed
    }

    fn exchange(&self, blob: &[u8]) -> Result<Vec<Vec<u8>>> {
        self.eng.job.exchange(blob, &|c| self.terminate(c))
    }

    fn attach_segment(&self, len: usize, _lens: &[usize]) -> Result<LocalSegment> {
        self.attach_with(HeapSegment::new("ofi", len)?)
    }

    unsafe fn attach_segment_in(&self, seg: LocalSegment, _lens: &[usize]) -> Result<()> {
        // SAFETY: forwarded contract: the memory outlives the conduit.
        self.attach_with(unsafe { HeapSegment::borrowed(seg) })
            .map(|_| ())
    }

    fn native_rma(&self) -> Option<Arc<dyn NativeRma>> {
        let r: Arc<dyn NativeRma> = self.rma.get()?.clone();
        Some(r)
    }

    fn keep_awake(&self) -> bool {
        self.eng.awake.open()
    }

    fn try_send(&self, dest: Rank, msg: &OutMsg<'_>) -> Result<bool> {
        let plen = if msg.category == Category::Short {
            0
        } else {
            msg.payload.len()
        };
        // A request needs a credit towards `dest`; a reply never does (it answers a
        // request that held one).
        if dest >= self.eng.size {
            return Err(cerr(format!(
                "rank {dest} is not in the job of {}",
                self.eng.size
            )));
        }
        if !msg.is_reply && !self.eng.credits.take(dest) {
            // Credits come back within a round trip if `dest` polls: it is nudged so that its
            // idle waits do not sleep meanwhile, and the core's wait here polls without
            // sleeping.
            self.eng.nudge(dest);
            self.eng.awake.nudged();
            self.eng.progress_once()?;
            return Ok(false);
        }
        let sent = if msg.category == Category::Long && plen > EAGER_MAX {
            match self.rma.get() {
                Some(rma)
                    if self.long_write
                        && dest != self.eng.rank
                        && self.eng.ep.has_write_data()
                        && plen <= self.eng.ep.max_msg_size() =>
                {
                    self.eng.send_written(rma, dest, msg)
                }
                _ => self.eng.send_split(dest, msg),
            }
        } else {
            let total = HDR + 4 * msg.args.len() + plen;
            self.eng.send_bytes(dest, total, |b: &mut [u8]| {
                let n = put_header(b, msg, self.eng.rank, false, plen);
                if plen > 0 {
                    b[n..n + plen].copy_from_slice(&msg.payload[..plen]);
                }
            })
        };
        if !msg.is_reply && !matches!(sent, Ok(true)) {
            self.eng.credits.give_back(dest, 1);
        }
        sent
    }

    fn poll(&self, replies_only: bool, sink: &mut dyn FnMut(&InMsg<'_>) -> bool) -> Result<usize> {
        let n = self.poll_inner(replies_only, sink)?;
        self.eng.return_credits()?;
        Ok(n)
    }

    fn exit_word(&self) -> Option<&std::sync::atomic::AtomicU64> {
        Some(self.eng.job.exit_word())
    }

    fn exit_requested(&self) -> Option<i32> {
        self.eng.job.exit_requested()
    }

    fn request_exit(&self, code: i32) -> i32 {
        self.eng.job.request_exit(code)
    }

    fn terminate(&self, code: i32) -> ! {
        self.eng.terminate(code)
    }

    fn is_process_mode(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_header_reads_back_as_written() {
        let args = [7u32, 0xdead_beef, 3];
        let m = OutMsg {
            handler: 42,
            category: Category::Long,
            is_reply: true,
            args: &args,
            payload: &[],
            long_offset: 0x1234_5678_9abc,
        };
        let mut b = [0u8; HDR + 12];
        let n = put_header(&mut b, &m, 5, true, 70_000);
        assert_eq!(n, HDR + 12);
        b[3] = 9;
        let h = parse_header(&b).expect("a well-formed header");
        assert_eq!(
            (h.handler, h.category, h.is_reply, h.split, h.nudge, h.credit, h.written),
            (42, Category::Long, true, true, false, false, false)
        );
        assert_eq!(
            (h.returned, h.nargs, h.len, h.long_offset, h.src),
            (9, 3, 70_000, 0x1234_5678_9abc, 5)
        );
    }

    #[test]
    fn a_bad_header_is_refused_with_its_fault_named() {
        let short = parse_header(&[0u8; HDR - 1]).expect_err("too short");
        assert!(short.contains("shorter than a header"), "{short}");
        let mut b = [0u8; HDR];
        b[1] = 3;
        let cat = parse_header(&b).expect_err("category 3");
        assert!(cat.contains("category bits 0x3"), "{cat}");
        b[1] = 0;
        b[2] = u8::try_from(MAX_ARGS + 1).unwrap_or(u8::MAX);
        let args = parse_header(&b).expect_err("too many arguments");
        assert!(
            args.contains(&format!("{} arguments", MAX_ARGS + 1)),
            "{args}"
        );
    }
}
