//! The emulated device's objects and the work it does for them (see the module's notes).

use std::collections::VecDeque;
use std::sync::atomic::{fence, AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

use amnet_core::{Error, Result};
use amnet_smp::SharedRegion;

use super::ring::{self, Ring};
use crate::verbs::{
    Access, ConnectAttr, DeviceCaps, MemoryRegion, QpInit, QpState, QueuePair, RecvWr, SendOp,
    SendWr, Sge, Verbs, Wc, WcOpcode, WcStatus,
};

const MAGIC: u64 = 0x616d_6e65_7469_6276; // "amnetibv"
/// Scatter/gather elements per send request.
const MAX_SGE: u32 = 4;
/// Largest message.
const MAX_MSG: u32 = 1 << 30;

// Header words.
const H_MAGIC: usize = 0;
const H_PID: usize = 1;
const H_ERR_PENDING: usize = 2;
const H_ATOMIC_LOCK: usize = 3;
const H_PROBE: usize = 4;
const H_LIMITS: usize = 5; // 8 words of limits
const HDR_WORDS: usize = 16;

// MR entry words: a seqlock word, then key, access, addr, len.
const MR_WORDS: usize = 5;
// QP entry words.
const Q_STATE: usize = 0;
const Q_RECV_CQ: usize = 1;
const Q_SRQ: usize = 2; // index + 1, 0 for none
const Q_RNR_TIMER: usize = 3;
const Q_NUM: usize = 4;
const Q_RETIRED: usize = 5;
const Q_MAX_RECV: usize = 6;
const QP_WORDS: usize = 8;

/// A word read by a probe through `process_vm_readv`, to check at connection time that the
/// peer's memory can be reached.
static PROBE: AtomicU64 = AtomicU64::new(MAGIC);
/// Numbers the devices a process opens.
static OPENED: AtomicU32 = AtomicU32::new(0);

/// The sizes of an emulated device's tables and queues, fixed when it is opened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EmuLimits {
    /// Memory regions registered at once.
    pub max_mr: u32,
    /// Queue pairs at once.
    pub max_qp: u32,
    /// Completion queues at once.
    pub max_cq: u32,
    /// Shared receive queues at once.
    pub max_srq: u32,
    /// Deepest send or receive queue (a power of two).
    pub qp_depth: u32,
    /// Deepest completion queue (a power of two).
    pub cq_depth: u32,
    /// Deepest shared receive queue (a power of two).
    pub srq_depth: u32,
    /// Largest inline payload.
    pub max_inline: u32,
}

impl Default for EmuLimits {
    fn default() -> Self {
        EmuLimits {
            max_mr: 64,
            max_qp: 256,
            max_cq: 8,
            max_srq: 4,
            qp_depth: 256,
            cq_depth: 8192,
            srq_depth: 4096,
            max_inline: 256,
        }
    }
}

impl EmuLimits {
    fn to_words(self) -> [u64; 8] {
        [
            self.max_mr.into(),
            self.max_qp.into(),
            self.max_cq.into(),
            self.max_srq.into(),
            self.qp_depth.into(),
            self.cq_depth.into(),
            self.srq_depth.into(),
            self.max_inline.into(),
        ]
    }

    fn from_words(w: [u64; 8]) -> Option<EmuLimits> {
        let v = |i: usize| u32::try_from(w[i]).ok();
        Some(EmuLimits {
            max_mr: v(0)?,
            max_qp: v(1)?,
            max_cq: v(2)?,
            max_srq: v(3)?,
            qp_depth: v(4)?,
            cq_depth: v(5)?,
            srq_depth: v(6)?,
            max_inline: v(7)?,
        })
    }
}

/// Where each table starts, in words.
#[derive(Clone, Copy, Debug)]
struct Layout {
    lim: EmuLimits,
    mr: usize,
    qp: usize,
    rq: usize,
    rq_words: usize,
    cq: usize,
    cq_words: usize,
    srq: usize,
    srq_words: usize,
    total: usize,
}

impl Layout {
    fn new(lim: EmuLimits) -> Result<Layout> {
        for (what, v) in [
            ("qp_depth", lim.qp_depth),
            ("cq_depth", lim.cq_depth),
            ("srq_depth", lim.srq_depth),
        ] {
            if !v.is_power_of_two() {
                return Err(Error::conduit(
                    "ibv",
                    format!("emulated device: {what} {v} is not a power of two"),
                ));
            }
        }
        if lim.max_qp == 0 || lim.max_qp > 0xffff || lim.max_mr == 0 || lim.max_mr > 0x00ff_ffff {
            return Err(Error::conduit(
                "ibv",
                format!(
                    "emulated device: max_qp {} (1..=65535) or max_mr {} (1..=16777215) out of range",
                    lim.max_qp, lim.max_mr
                ),
            ));
        }
        let n = |v: u32| v as usize;
        let mr = HDR_WORDS;
        let qp = mr + n(lim.max_mr) * MR_WORDS;
        let rq = qp + n(lim.max_qp) * QP_WORDS;
        let rq_words = ring::words(n(lim.qp_depth));
        let cq = rq + n(lim.max_qp) * rq_words;
        let cq_words = ring::words(n(lim.cq_depth));
        let srq = cq + n(lim.max_cq) * cq_words;
        let srq_words = ring::words(n(lim.srq_depth));
        let total = srq + n(lim.max_srq) * srq_words;
        Ok(Layout {
            lim,
            mr,
            qp,
            rq,
            rq_words,
            cq,
            cq_words,
            srq,
            srq_words,
            total,
        })
    }
}

/// One device's shared memory, mapped by its owner or by a peer.
struct Shm {
    region: SharedRegion,
    lay: Layout,
    pid: i32,
    name: String,
}

impl Shm {
    fn words(&self, at: usize, n: usize) -> &[AtomicU64] {
        assert!(
            at + n <= self.lay.total,
            "emulated device: word {at}+{n} out of range"
        );
        // SAFETY: the region is mapped for as long as `self` lives, page-aligned, and at
        // least `lay.total` words long (checked when it was created or opened); every access
        // to it, from any process, is through these atomics.
        unsafe { std::slice::from_raw_parts(self.region.ptr().cast::<AtomicU64>().add(at), n) }
    }

    fn w(&self, at: usize) -> &AtomicU64 {
        &self.words(at, 1)[0]
    }

    fn qp(&self, index: u32, word: usize) -> &AtomicU64 {
        self.w(self.lay.qp + index as usize * QP_WORDS + word)
    }

    fn rq(&self, index: u32) -> Ring<'_> {
        let at = self.lay.rq + index as usize * self.lay.rq_words;
        Ring::new(
            self.words(at, self.lay.rq_words),
            self.lay.lim.qp_depth as usize,
        )
    }

    fn cq(&self, index: u32) -> Ring<'_> {
        let at = self.lay.cq + index as usize * self.lay.cq_words;
        Ring::new(
            self.words(at, self.lay.cq_words),
            self.lay.lim.cq_depth as usize,
        )
    }

    fn srq(&self, index: u32) -> Ring<'_> {
        let at = self.lay.srq + index as usize * self.lay.srq_words;
        Ring::new(
            self.words(at, self.lay.srq_words),
            self.lay.lim.srq_depth as usize,
        )
    }

    fn qp_state(&self, index: u32) -> QpState {
        state_from(self.qp(index, Q_STATE).load(Ordering::Acquire))
    }

    /// Put queue pair `index` in ERR and tell its owner to flush it.
    fn set_err(&self, index: u32) {
        self.qp(index, Q_STATE)
            .store(state_code(QpState::Err), Ordering::Release);
        self.w(H_ERR_PENDING).store(1, Ordering::Release);
    }

    /// True when `key` names a registered region of this device that holds
    /// `addr..addr + len` and grants `need`.
    fn check_key(&self, key: u32, addr: u64, len: u64, need: Access) -> bool {
        let idx = (key >> 8) as usize;
        if idx == 0 || idx > self.lay.lim.max_mr as usize {
            return false;
        }
        let e = self.words(self.lay.mr + (idx - 1) * MR_WORDS, MR_WORDS);
        for _ in 0..64 {
            let s1 = e[0].load(Ordering::Acquire);
            if s1 & 1 == 1 {
                std::hint::spin_loop();
                continue;
            }
            let k = e[1].load(Ordering::Relaxed);
            let acc = e[2].load(Ordering::Relaxed);
            let a = e[3].load(Ordering::Relaxed);
            let l = e[4].load(Ordering::Relaxed);
            fence(Ordering::Acquire);
            if e[0].load(Ordering::Relaxed) != s1 {
                continue;
            }
            let Ok(acc) = u32::try_from(acc) else {
                return false;
            };
            return k == u64::from(key)
                && Access(acc).contains(need)
                && addr >= a
                && addr
                    .checked_add(len)
                    .is_some_and(|end| end <= a.saturating_add(l));
        }
        false
    }

    fn push_cqe(&self, cq: u32, e: [u64; 4]) {
        let r = self.cq(cq);
        // The depth the queue was created with, as a device enforces it.
        let depth = r.hdr(ring::HDR_DEPTH).load(Ordering::Acquire);
        if r.len() >= depth || !r.push(e) {
            r.hdr(ring::HDR_OVERRUN).store(1, Ordering::Release);
        }
    }

    fn lock_atomics(&self) -> AtomicGuard<'_> {
        let l = self.w(H_ATOMIC_LOCK);
        let mut spins = 0u32;
        while l
            .compare_exchange_weak(0, 1, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            spins += 1;
            if spins < 64 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
        AtomicGuard(l)
    }
}

struct AtomicGuard<'a>(&'a AtomicU64);

impl Drop for AtomicGuard<'_> {
    fn drop(&mut self) {
        self.0.store(0, Ordering::Release);
    }
}

fn state_code(s: QpState) -> u64 {
    match s {
        QpState::Reset => 0,
        QpState::Init => 1,
        QpState::Rtr => 2,
        QpState::Rts => 3,
        QpState::Err => 4,
    }
}

fn state_from(v: u64) -> QpState {
    match v {
        1 => QpState::Init,
        2 => QpState::Rtr,
        3 => QpState::Rts,
        4 => QpState::Err,
        _ => QpState::Reset,
    }
}

/// A completion as four ring words: wr_id; status | opcode << 8 | has_imm << 16 | qp_num <<
/// 32; byte_len | imm << 32; the send queue position it retires (send side).
fn cqe(wc: &Wc, sq_pos: u64) -> [u64; 4] {
    let opcode = wc.opcode as u64;
    [
        wc.wr_id,
        u64::from(wc.status.raw() & 0xff)
            | opcode << 8
            | u64::from(wc.imm.is_some()) << 16
            | u64::from(wc.qp_num) << 32,
        u64::from(wc.byte_len) | u64::from(wc.imm.unwrap_or(0)) << 32,
        sq_pos,
    ]
}

fn decode(e: [u64; 4]) -> Wc {
    let lo = |v: u64| (v & 0xffff_ffff) as u32;
    let hi = |v: u64| (v >> 32) as u32;
    Wc {
        wr_id: e[0],
        status: WcStatus::from_raw(lo(e[1]) & 0xff),
        opcode: WcOpcode::from_raw((lo(e[1]) >> 8) & 0xff).unwrap_or(WcOpcode::Send),
        byte_len: lo(e[2]),
        imm: (e[1] >> 16 & 1 == 1).then_some(hi(e[2])),
        qp_num: hi(e[1]),
    }
}

/// Receive-not-ready delay of the IB table's index `t` (0 is the longest, 655.36 ms).
fn rnr_delay(t: u64) -> Duration {
    const US: [u32; 32] = [
        655_360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1280, 1920, 2560, 3840,
        5120, 7680, 10_240, 15_360, 20_480, 30_720, 40_960, 61_440, 81_920, 122_880, 163_840,
        245_760, 327_680, 491_520,
    ];
    Duration::from_micros(US[(t & 31) as usize].into())
}

/// How long transport retries take before `RETRY_EXC_ERR`.
fn transport_timeout(attr: &ConnectAttr) -> Duration {
    let per = Duration::from_nanos(4096u64 << attr.timeout.min(31));
    per * (u32::from(attr.retry_cnt) + 1)
}

/// An opened emulated device: a protection domain and the tables of its objects.
pub struct EmuDevice {
    dev: Arc<Dev>,
}

struct Dev {
    shm: Shm,
    peers: Mutex<Vec<Arc<Shm>>>,
    qps: Mutex<Vec<Weak<QpInner>>>,
    /// Queue pairs with requests waiting (RNR, remote not ready).
    waiting: AtomicUsize,
    free: Mutex<Free>,
    /// An armed fault ([`EmuDevice::fail_after`]): requests still to run before it, and its
    /// status.
    fault: Mutex<Option<(u64, WcStatus)>>,
    /// True while a fault is armed (read without the lock on every request).
    armed: std::sync::atomic::AtomicBool,
}

struct Free {
    mr: Vec<u32>,
    mr_gen: Vec<u8>,
    qp: Vec<u32>,
    qp_gen: Vec<u16>,
    cq: Vec<u32>,
    srq: Vec<u32>,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl EmuDevice {
    /// Open a device with the default limits; its shared memory is named
    /// `/dev/shm/{prefix}{pid}-{n}` and removed when the device is dropped.
    pub fn open(prefix: &str) -> Result<EmuDevice> {
        Self::open_with(prefix, EmuLimits::default())
    }

    /// Open a device with the given limits.
    pub fn open_with(prefix: &str, lim: EmuLimits) -> Result<EmuDevice> {
        let lay = Layout::new(lim)?;
        let pid = std::process::id();
        let n = OPENED.fetch_add(1, Ordering::Relaxed);
        let name = format!("/{prefix}{pid}-{n}");
        let region = SharedRegion::create(&name, lay.total * 8)?;
        let shm = Shm {
            region,
            lay,
            pid: i32::try_from(pid).unwrap_or(i32::MAX),
            name,
        };
        for i in 0..lim.max_qp {
            shm.rq(i).init();
        }
        for i in 0..lim.max_cq {
            shm.cq(i).init();
        }
        for i in 0..lim.max_srq {
            shm.srq(i).init();
        }
        for (i, v) in lim.to_words().into_iter().enumerate() {
            shm.w(H_LIMITS + i).store(v, Ordering::Relaxed);
        }
        shm.w(H_PID).store(pid.into(), Ordering::Relaxed);
        shm.w(H_PROBE)
            .store(std::ptr::addr_of!(PROBE) as u64, Ordering::Relaxed);
        shm.w(H_MAGIC).store(MAGIC, Ordering::Release);
        let free = Free {
            mr: (0..lim.max_mr).rev().collect(),
            mr_gen: vec![0; lim.max_mr as usize],
            qp: (0..lim.max_qp).rev().collect(),
            qp_gen: vec![0; lim.max_qp as usize],
            cq: (0..lim.max_cq).rev().collect(),
            srq: (0..lim.max_srq).rev().collect(),
        };
        Ok(EmuDevice {
            dev: Arc::new(Dev {
                shm,
                peers: Mutex::new(Vec::new()),
                qps: Mutex::new(Vec::new()),
                waiting: AtomicUsize::new(0),
                free: Mutex::new(free),
                fault: Mutex::new(None),
                armed: std::sync::atomic::AtomicBool::new(false),
            }),
        })
    }

    /// The name of the device's shared-memory object.
    pub fn shm_name(&self) -> &str {
        &self.dev.shm.name
    }

    /// Remove the device's shared-memory object now (its owner and the peers that mapped it
    /// keep their mappings): once every peer has connected, nothing needs the name, and a
    /// process that dies then leaves nothing behind.
    pub fn unlink(&self) {
        amnet_smp::unlink_shared(&self.dev.shm.name);
    }

    /// Make the send request that runs after `skip` others on this device (on any queue
    /// pair) complete with `status`, as [`fail_next`](EmuDevice::fail_next) does for one
    /// queue pair. For tests of a protocol's error handling (`AMNET_IBV_EMU_FAULT`).
    pub fn fail_after(&self, skip: u64, status: WcStatus) {
        *lock(&self.dev.fault) = Some((skip, status));
        self.dev.armed.store(true, Ordering::Release);
    }

    /// Make the next send request that runs on `qp` complete with `status` (an error), as if
    /// the device had found that error: the queue pair enters ERR and what follows flushes.
    /// For tests of a protocol's error handling.
    pub fn fail_next(&self, qp: &EmuQp, status: WcStatus) {
        lock(&qp.inner.st).inject = Some(status);
    }
}

impl Drop for Dev {
    fn drop(&mut self) {
        amnet_smp::unlink_shared(&self.shm.name);
    }
}

impl Dev {
    /// The armed fault's status when the request about to run is the one it is for.
    fn take_fault(&self) -> Option<WcStatus> {
        if !self.armed.load(Ordering::Acquire) {
            return None;
        }
        let mut f = lock(&self.fault);
        match f.as_mut() {
            Some((0, status)) => {
                let s = *status;
                *f = None;
                self.armed.store(false, Ordering::Release);
                Some(s)
            }
            Some((n, _)) => {
                *n -= 1;
                None
            }
            None => None,
        }
    }

    /// The peer device named `name`, mapped once.
    fn peer(&self, name: &str) -> Result<Arc<Shm>> {
        let mut peers = lock(&self.peers);
        if let Some(p) = peers.iter().find(|p| p.name == name) {
            return Ok(p.clone());
        }
        let region = SharedRegion::open(name, 0).map_err(|e| {
            Error::conduit(
                "ibv",
                format!("emulated device: cannot open peer device {name}: {e}"),
            )
        })?;
        let len = region.len();
        let hdr = |i: usize| {
            // SAFETY: the region is mapped, page-aligned and at least a page long; the header
            // words are read atomically.
            unsafe { &*region.ptr().cast::<AtomicU64>().add(i) }.load(Ordering::Acquire)
        };
        if len < HDR_WORDS * 8 || hdr(H_MAGIC) != MAGIC {
            return Err(Error::conduit(
                "ibv",
                format!("emulated device: {name} is not an emulated device"),
            ));
        }
        let mut w = [0u64; 8];
        for (i, v) in w.iter_mut().enumerate() {
            *v = hdr(H_LIMITS + i);
        }
        let lay = EmuLimits::from_words(w)
            .ok_or_else(|| Error::conduit("ibv", format!("emulated device {name}: bad limits")))
            .and_then(Layout::new)?;
        if lay.total * 8 > len {
            return Err(Error::conduit(
                "ibv",
                format!(
                    "emulated device {name}: {len} bytes, its tables need {}",
                    lay.total * 8
                ),
            ));
        }
        let pid = i32::try_from(hdr(H_PID)).unwrap_or(0);
        let probe = hdr(H_PROBE);
        let shm = Arc::new(Shm {
            region,
            lay,
            pid,
            name: name.to_string(),
        });
        // The device moves bytes with process_vm_readv/writev: check now that it may.
        let mut got = 0u64;
        let local = [libc::iovec {
            iov_base: std::ptr::addr_of_mut!(got).cast(),
            iov_len: 8,
        }];
        if let Err(e) = vm_read(pid, &local, probe, 8) {
            return Err(Error::conduit(
                "ibv",
                format!(
                    "emulated device: cannot read process {pid}'s memory ({e}); it needs \
                     process_vm_readv/writev between the job's processes (same user, and \
                     /proc/sys/kernel/yama/ptrace_scope 0 or CAP_SYS_PTRACE)"
                ),
            ));
        }
        if got != MAGIC {
            return Err(Error::conduit(
                "ibv",
                format!("emulated device: process {pid} is not the owner of {name}"),
            ));
        }
        peers.push(shm.clone());
        Ok(shm)
    }

    /// Work the device does outside the calls that posted it: flush queue pairs that
    /// entered ERR, retry requests that wait on a peer.
    fn progress(&self) {
        let err = self.shm.w(H_ERR_PENDING).swap(0, Ordering::AcqRel) != 0;
        if !err && self.waiting.load(Ordering::Acquire) == 0 {
            return;
        }
        let qps: Vec<Arc<QpInner>> = lock(&self.qps).iter().filter_map(Weak::upgrade).collect();
        for q in qps {
            let mut st = lock(&q.st);
            if self.shm.qp_state(q.index) == QpState::Err {
                if err || !st.waiting.is_empty() {
                    q.flush(self, &mut st);
                }
            } else if !st.waiting.is_empty() {
                q.run_waiting(self, &mut st);
            }
        }
    }
}

/// A registered memory region of the emulated device.
pub struct EmuMr {
    dev: Arc<Dev>,
    index: u32,
    key: u32,
    addr: u64,
    len: usize,
}

impl MemoryRegion for EmuMr {
    fn lkey(&self) -> u32 {
        self.key
    }
    fn rkey(&self) -> u32 {
        self.key
    }
    fn addr(&self) -> u64 {
        self.addr
    }
    fn len(&self) -> usize {
        self.len
    }
}

impl Drop for EmuMr {
    fn drop(&mut self) {
        let e = self.dev.shm.words(
            self.dev.shm.lay.mr + self.index as usize * MR_WORDS,
            MR_WORDS,
        );
        let s = e[0].fetch_add(1, Ordering::AcqRel);
        e[1].store(0, Ordering::Relaxed);
        e[2].store(0, Ordering::Relaxed);
        e[0].store(s + 2, Ordering::Release);
        lock(&self.dev.free).mr.push(self.index);
    }
}

/// A completion queue of the emulated device.
pub struct EmuCq {
    dev: Arc<Dev>,
    index: u32,
}

impl Drop for EmuCq {
    fn drop(&mut self) {
        lock(&self.dev.free).cq.push(self.index);
    }
}

/// A shared receive queue of the emulated device.
pub struct EmuSrq {
    dev: Arc<Dev>,
    index: u32,
}

impl Drop for EmuSrq {
    fn drop(&mut self) {
        lock(&self.dev.free).srq.push(self.index);
    }
}

/// An RC queue pair of the emulated device.
pub struct EmuQp {
    inner: Arc<QpInner>,
}

impl QueuePair for EmuQp {
    fn num(&self) -> u32 {
        self.inner.num
    }
}

impl Drop for EmuQp {
    fn drop(&mut self) {
        let q = &self.inner;
        let shm = &q.dev.shm;
        shm.qp(q.index, Q_STATE).store(0, Ordering::Release);
        shm.qp(q.index, Q_NUM).store(0, Ordering::Release);
        lock(&q.dev.qps).retain(|w| w.strong_count() > 0 && !std::ptr::eq(w.as_ptr(), &**q));
        lock(&q.dev.free).qp.push(q.index);
    }
}

struct QpInner {
    dev: Arc<Dev>,
    index: u32,
    num: u32,
    send_cq: u32,
    init: QpInit,
    st: Mutex<QpLocal>,
}

struct Remote {
    peer: Arc<Shm>,
    index: u32,
    num: u32,
}

struct QpLocal {
    remote: Option<Remote>,
    attr: ConnectAttr,
    /// Send queue positions handed out.
    posted: u64,
    /// Requests that wait for the peer, oldest first; later requests queue behind them.
    waiting: VecDeque<Waiting>,
    /// An error to complete the next request with ([`EmuDevice::fail_next`]).
    inject: Option<WcStatus>,
}

/// A send request kept until it can run.
struct Waiting {
    wr_id: u64,
    op: SendOp,
    sg: Vec<Sge>,
    /// An inline payload's copy (then `sg` points into it).
    _data: Vec<u8>,
    inline: bool,
    signaled: bool,
    pos: u64,
    since: Instant,
}

/// What running a request came to.
enum Step {
    Done,
    /// The peer cannot take it yet: keep it and retry.
    Wait,
}

impl QpInner {
    fn complete(&self, wr_id: u64, op: WcOpcode, status: WcStatus, byte_len: u32, pos: u64) {
        let wc = Wc {
            wr_id,
            status,
            opcode: op,
            byte_len,
            imm: None,
            qp_num: self.num,
        };
        self.dev.shm.push_cqe(self.send_cq, cqe(&wc, pos));
    }

    /// Complete `wr` with error `status` and move the queue pair to ERR.
    fn fail(&self, st: &mut QpLocal, wr_id: u64, op: &SendOp, status: WcStatus, pos: u64) {
        self.complete(wr_id, op.completion_opcode(), status, 0, pos);
        self.dev.shm.set_err(self.index);
        self.flush(&self.dev, st);
    }

    /// Flush what waits on this queue pair, and its own receive queue.
    fn flush(&self, dev: &Dev, st: &mut QpLocal) {
        while let Some(w) = st.waiting.pop_front() {
            dev.waiting.fetch_sub(1, Ordering::AcqRel);
            self.complete(
                w.wr_id,
                w.op.completion_opcode(),
                WcStatus::WrFlushErr,
                0,
                w.pos,
            );
        }
        if dev.shm.qp(self.index, Q_SRQ).load(Ordering::Relaxed) == 0 {
            let rq = dev.shm.rq(self.index);
            let cq = u32::try_from(dev.shm.qp(self.index, Q_RECV_CQ).load(Ordering::Relaxed))
                .unwrap_or(0);
            while let Some(e) = rq.pop() {
                let wc = Wc {
                    wr_id: e[0],
                    status: WcStatus::WrFlushErr,
                    opcode: WcOpcode::Recv,
                    byte_len: 0,
                    imm: None,
                    qp_num: self.num,
                };
                dev.shm.push_cqe(cq, cqe(&wc, 0));
            }
        }
    }

    /// A peer that does not answer (its process ended): the request is tried again until
    /// the transport timeout, then completes `RETRY_EXC_ERR`, as on a fabric.
    fn unanswered(
        &self,
        st: &mut QpLocal,
        wr_id: u64,
        op: &SendOp,
        pos: u64,
        since: Instant,
    ) -> Step {
        if since.elapsed() >= transport_timeout(&st.attr) {
            self.fail(st, wr_id, op, WcStatus::RetryExcErr, pos);
            return Step::Done;
        }
        Step::Wait
    }

    /// Run the waiting requests in order until one must wait again.
    fn run_waiting(&self, dev: &Dev, st: &mut QpLocal) {
        while let Some(w) = st.waiting.pop_front() {
            // While it runs, `w` is out of the queue: a failure flushes only those after it.
            match self.run(
                st, w.wr_id, &w.op, &w.sg, w.inline, w.signaled, w.pos, w.since, false,
            ) {
                Step::Wait => {
                    st.waiting.push_front(w);
                    return;
                }
                Step::Done => {
                    dev.waiting.fetch_sub(1, Ordering::AcqRel);
                    // The next request's retries count from now, when it reaches the head.
                    if let Some(next) = st.waiting.front_mut() {
                        next.since = Instant::now();
                    }
                }
            }
        }
    }

    /// Run one request; completes it (success or error) unless it must wait.
    #[allow(clippy::too_many_arguments)]
    fn run(
        &self,
        st: &mut QpLocal,
        wr_id: u64,
        op: &SendOp,
        sg: &[Sge],
        inline: bool,
        signaled: bool,
        pos: u64,
        since: Instant,
        first: bool,
    ) -> Step {
        let dev = &self.dev;
        // An injected fault belongs to a request's first run, not to its retries.
        let injected = if first {
            st.inject.take().or_else(|| dev.take_fault())
        } else {
            None
        };
        if let Some(status) = injected {
            self.fail(st, wr_id, op, status, pos);
            return Step::Done;
        }
        let Some(remote) = st.remote.as_ref() else {
            self.fail(st, wr_id, op, WcStatus::LocQpOpErr, pos);
            return Step::Done;
        };
        let peer = remote.peer.clone();
        let (rindex, rnum) = (remote.index, remote.num);
        let total: u64 = sg.iter().map(|s| u64::from(s.len)).sum();
        if total > u64::from(MAX_MSG) {
            self.fail(st, wr_id, op, WcStatus::LocLenErr, pos);
            return Step::Done;
        }
        let writes_local = matches!(
            op,
            SendOp::RdmaRead { .. } | SendOp::FetchAdd { .. } | SendOp::CompareSwap { .. }
        );
        if !inline {
            let need = if writes_local {
                Access::LOCAL_WRITE
            } else {
                Access(0)
            };
            if !sg
                .iter()
                .all(|s| dev.shm.check_key(s.lkey, s.addr, s.len.into(), need))
            {
                self.fail(st, wr_id, op, WcStatus::LocProtErr, pos);
                return Step::Done;
            }
        }
        // Is the peer's queue pair there, connected, and the one we were connected to?
        let rstate = peer.qp_state(rindex);
        let alive = peer.qp(rindex, Q_NUM).load(Ordering::Acquire) == u64::from(rnum)
            && matches!(rstate, QpState::Rtr | QpState::Rts);
        if !alive {
            if since.elapsed() >= transport_timeout(&st.attr) {
                self.fail(st, wr_id, op, WcStatus::RetryExcErr, pos);
                return Step::Done;
            }
            return Step::Wait;
        }
        let local: Vec<libc::iovec> = sg
            .iter()
            .map(|s| libc::iovec {
                iov_base: s.addr as *mut libc::c_void,
                iov_len: s.len as usize,
            })
            .collect();
        let byte_len = u32::try_from(total).unwrap_or(MAX_MSG);
        match *op {
            SendOp::Send | SendOp::SendWithImm { .. } | SendOp::RdmaWriteWithImm { .. } => {
                let imm = match *op {
                    SendOp::SendWithImm { imm } | SendOp::RdmaWriteWithImm { imm, .. } => Some(imm),
                    _ => None,
                };
                if let SendOp::RdmaWriteWithImm {
                    remote_addr, rkey, ..
                } = *op
                {
                    if !peer.check_key(rkey, remote_addr, total, Access::REMOTE_WRITE) {
                        peer.set_err(rindex);
                        self.fail(st, wr_id, op, WcStatus::RemAccessErr, pos);
                        return Step::Done;
                    }
                }
                let srq = peer.qp(rindex, Q_SRQ).load(Ordering::Acquire);
                let taken = if srq == 0 {
                    peer.rq(rindex).pop()
                } else {
                    peer.srq(u32::try_from(srq - 1).unwrap_or(0)).pop()
                };
                let Some(wqe) = taken else {
                    if !process_alive(peer.pid) {
                        return self.unanswered(st, wr_id, op, pos, since);
                    }
                    let timer = peer.qp(rindex, Q_RNR_TIMER).load(Ordering::Relaxed);
                    let limit = rnr_delay(timer) * (u32::from(st.attr.rnr_retry) + 1);
                    if st.attr.rnr_retry != 7 && since.elapsed() >= limit {
                        self.fail(st, wr_id, op, WcStatus::RnrRetryExcErr, pos);
                        return Step::Done;
                    }
                    return Step::Wait;
                };
                let rcq =
                    u32::try_from(peer.qp(rindex, Q_RECV_CQ).load(Ordering::Relaxed)).unwrap_or(0);
                let recv_wc = |status: WcStatus, opcode: WcOpcode| Wc {
                    wr_id: wqe[0],
                    status,
                    opcode,
                    byte_len,
                    imm,
                    qp_num: rnum,
                };
                let (rlen, rkey) = (wqe[2] & 0xffff_ffff, (wqe[2] >> 32) as u32);
                let result = if let SendOp::RdmaWriteWithImm { remote_addr, .. } = *op {
                    vm_write(peer.pid, &local, remote_addr, total)
                        .map(|()| WcOpcode::RecvRdmaWithImm)
                } else if rlen < total {
                    peer.push_cqe(rcq, cqe(&recv_wc(WcStatus::LocLenErr, WcOpcode::Recv), 0));
                    peer.set_err(rindex);
                    self.fail(st, wr_id, op, WcStatus::RemInvReqErr, pos);
                    return Step::Done;
                } else if !peer.check_key(rkey, wqe[1], total, Access::LOCAL_WRITE) {
                    peer.push_cqe(rcq, cqe(&recv_wc(WcStatus::LocProtErr, WcOpcode::Recv), 0));
                    peer.set_err(rindex);
                    self.fail(st, wr_id, op, WcStatus::RemOpErr, pos);
                    return Step::Done;
                } else {
                    vm_write(peer.pid, &local, wqe[1], total).map(|()| WcOpcode::Recv)
                };
                match result {
                    Ok(opcode) => peer.push_cqe(rcq, cqe(&recv_wc(WcStatus::Success, opcode), 0)),
                    Err(e) if gone(&e) => {
                        return self.unanswered(st, wr_id, op, pos, since);
                    }
                    Err(_) => {
                        peer.push_cqe(rcq, cqe(&recv_wc(WcStatus::LocProtErr, WcOpcode::Recv), 0));
                        peer.set_err(rindex);
                        self.fail(st, wr_id, op, WcStatus::RemOpErr, pos);
                        return Step::Done;
                    }
                }
            }
            SendOp::RdmaWrite { remote_addr, rkey } | SendOp::RdmaRead { remote_addr, rkey } => {
                let write = matches!(op, SendOp::RdmaWrite { .. });
                let need = if write {
                    Access::REMOTE_WRITE
                } else {
                    Access::REMOTE_READ
                };
                let moved = if !peer.check_key(rkey, remote_addr, total, need) {
                    Err(None)
                } else if write {
                    vm_write(peer.pid, &local, remote_addr, total).map_err(Some)
                } else {
                    vm_read(peer.pid, &local, remote_addr, total).map_err(Some)
                };
                match moved {
                    Ok(()) => {}
                    Err(Some(e)) if gone(&e) => {
                        return self.unanswered(st, wr_id, op, pos, since);
                    }
                    Err(_) => {
                        peer.set_err(rindex);
                        self.fail(st, wr_id, op, WcStatus::RemAccessErr, pos);
                        return Step::Done;
                    }
                }
            }
            SendOp::FetchAdd {
                remote_addr, rkey, ..
            }
            | SendOp::CompareSwap {
                remote_addr, rkey, ..
            } => {
                if total != 8 || sg.len() != 1 {
                    self.fail(st, wr_id, op, WcStatus::LocLenErr, pos);
                    return Step::Done;
                }
                if remote_addr % 8 != 0 {
                    peer.set_err(rindex);
                    self.fail(st, wr_id, op, WcStatus::RemInvReqErr, pos);
                    return Step::Done;
                }
                if !peer.check_key(rkey, remote_addr, 8, Access::REMOTE_ATOMIC) {
                    peer.set_err(rindex);
                    self.fail(st, wr_id, op, WcStatus::RemAccessErr, pos);
                    return Step::Done;
                }
                let _g = peer.lock_atomics();
                let mut old = 0u64;
                let word = [libc::iovec {
                    iov_base: std::ptr::addr_of_mut!(old).cast(),
                    iov_len: 8,
                }];
                let new = |old: u64| match *op {
                    SendOp::FetchAdd { add, .. } => Some(old.wrapping_add(add)),
                    SendOp::CompareSwap { compare, swap, .. } => (old == compare).then_some(swap),
                    _ => None,
                };
                let done = vm_read(peer.pid, &word, remote_addr, 8).and_then(|()| {
                    let Some(v) = new(old) else { return Ok(()) };
                    let src = [libc::iovec {
                        iov_base: std::ptr::addr_of!(v) as *mut libc::c_void,
                        iov_len: 8,
                    }];
                    vm_write(peer.pid, &src, remote_addr, 8)
                });
                match done {
                    Ok(()) => {}
                    Err(e) if gone(&e) => {
                        return self.unanswered(st, wr_id, op, pos, since);
                    }
                    Err(_) => {
                        peer.set_err(rindex);
                        self.fail(st, wr_id, op, WcStatus::RemAccessErr, pos);
                        return Step::Done;
                    }
                }
                // SAFETY: the scatter element is 8 bytes of this process registered with
                // LOCAL_WRITE (checked above), valid until this request completes (post_send's
                // contract).
                unsafe { std::ptr::write_unaligned(sg[0].addr as *mut u64, old) };
            }
        }
        if signaled {
            let len = match op {
                SendOp::RdmaRead { .. } => byte_len,
                SendOp::FetchAdd { .. } | SendOp::CompareSwap { .. } => 8,
                _ => 0,
            };
            self.complete(wr_id, op.completion_opcode(), WcStatus::Success, len, pos);
        }
        Step::Done
    }
}

fn vm_io(
    pid: i32,
    local: &[libc::iovec],
    remote: u64,
    len: u64,
    write: bool,
) -> std::io::Result<()> {
    if len == 0 {
        return Ok(());
    }
    let Ok(n) = usize::try_from(len) else {
        return Err(std::io::Error::from_raw_os_error(libc::EINVAL));
    };
    let riov = [libc::iovec {
        iov_base: remote as *mut libc::c_void,
        iov_len: n,
    }];
    let nl = libc::c_ulong::try_from(local.len()).unwrap_or(0);
    // SAFETY: `local` names memory of this process that the caller made valid for the
    // transfer (read for a write, written for a read); the kernel checks `remote` against
    // the target's address space and fails with EFAULT outside it.
    let got = unsafe {
        if write {
            libc::process_vm_writev(pid, local.as_ptr(), nl, riov.as_ptr(), 1, 0)
        } else {
            libc::process_vm_readv(pid, local.as_ptr(), nl, riov.as_ptr(), 1, 0)
        }
    };
    if got < 0 {
        return Err(std::io::Error::last_os_error());
    }
    if usize::try_from(got).ok() != Some(n) {
        return Err(std::io::Error::from_raw_os_error(libc::EFAULT));
    }
    Ok(())
}

/// False once process `pid` has ended: a peer that will never post another receive.
fn process_alive(pid: i32) -> bool {
    // SAFETY: signal 0 only checks that the process exists.
    let rc = unsafe { libc::kill(pid, 0) };
    rc == 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
}

/// True when a transfer failed because the peer's process is gone: on a fabric, a peer that
/// no longer answers (`RETRY_EXC_ERR`).
fn gone(e: &std::io::Error) -> bool {
    e.raw_os_error() == Some(libc::ESRCH)
}

fn vm_write(pid: i32, local: &[libc::iovec], remote: u64, len: u64) -> std::io::Result<()> {
    vm_io(pid, local, remote, len, true)
}

fn vm_read(pid: i32, local: &[libc::iovec], remote: u64, len: u64) -> std::io::Result<()> {
    vm_io(pid, local, remote, len, false)
}

impl Verbs for EmuDevice {
    type Mr = EmuMr;
    type Cq = EmuCq;
    type Srq = EmuSrq;
    type Qp = EmuQp;

    fn name(&self) -> &str {
        "emu"
    }

    fn caps(&self) -> DeviceCaps {
        let l = self.dev.shm.lay.lim;
        DeviceCaps {
            max_inline: l.max_inline,
            max_qp_wr: l.qp_depth,
            max_cqe: l.cq_depth,
            max_srq_wr: l.srq_depth,
            max_sge: MAX_SGE,
            max_msg: MAX_MSG,
            atomics: true,
        }
    }

    unsafe fn reg_mr(&self, addr: *mut u8, len: usize, access: Access) -> Result<EmuMr> {
        let remote_writes = Access(Access::REMOTE_WRITE.0 | Access::REMOTE_ATOMIC.0);
        if access.0 & remote_writes.0 != 0 && !access.contains(Access::LOCAL_WRITE) {
            return Err(Error::conduit(
                "ibv",
                "reg_mr: remote write or atomic access needs LOCAL_WRITE as well (EINVAL)",
            ));
        }
        let (index, gen) = {
            let mut f = lock(&self.dev.free);
            let Some(i) = f.mr.pop() else {
                return Err(Error::conduit(
                    "ibv",
                    format!(
                        "reg_mr: the emulated device's {} memory regions are all in use",
                        self.dev.shm.lay.lim.max_mr
                    ),
                ));
            };
            let g = &mut f.mr_gen[i as usize];
            *g = g.wrapping_add(1);
            (i, *g)
        };
        let key = (index + 1) << 8 | u32::from(gen);
        let shm = &self.dev.shm;
        let e = shm.words(shm.lay.mr + index as usize * MR_WORDS, MR_WORDS);
        let s = e[0].fetch_add(1, Ordering::AcqRel);
        e[1].store(key.into(), Ordering::Relaxed);
        e[2].store(access.0.into(), Ordering::Relaxed);
        e[3].store(addr as u64, Ordering::Relaxed);
        e[4].store(len as u64, Ordering::Relaxed);
        e[0].store(s + 2, Ordering::Release);
        Ok(EmuMr {
            dev: self.dev.clone(),
            index,
            key,
            addr: addr as u64,
            len,
        })
    }

    fn create_cq(&self, depth: u32) -> Result<EmuCq> {
        let lim = self.dev.shm.lay.lim;
        if depth == 0 || depth > lim.cq_depth {
            return Err(Error::conduit(
                "ibv",
                format!("create_cq: depth {depth} outside 1..={}", lim.cq_depth),
            ));
        }
        let index = lock(&self.dev.free).cq.pop().ok_or_else(|| {
            Error::conduit(
                "ibv",
                format!("create_cq: all {} completion queues in use", lim.max_cq),
            )
        })?;
        let r = self.dev.shm.cq(index);
        r.init();
        r.hdr(ring::HDR_DEPTH)
            .store(depth.into(), Ordering::Release);
        Ok(EmuCq {
            dev: self.dev.clone(),
            index,
        })
    }

    fn create_srq(&self, depth: u32) -> Result<EmuSrq> {
        let lim = self.dev.shm.lay.lim;
        if depth == 0 || depth > lim.srq_depth {
            return Err(Error::conduit(
                "ibv",
                format!("create_srq: depth {depth} outside 1..={}", lim.srq_depth),
            ));
        }
        let index = lock(&self.dev.free).srq.pop().ok_or_else(|| {
            Error::conduit(
                "ibv",
                format!(
                    "create_srq: all {} shared receive queues in use",
                    lim.max_srq
                ),
            )
        })?;
        self.dev.shm.srq(index).init();
        Ok(EmuSrq {
            dev: self.dev.clone(),
            index,
        })
    }

    fn create_qp(
        &self,
        send_cq: &EmuCq,
        recv_cq: &EmuCq,
        srq: Option<&EmuSrq>,
        init: &QpInit,
    ) -> Result<EmuQp> {
        let lim = self.dev.shm.lay.lim;
        if init.max_send_wr == 0
            || init.max_send_wr > lim.qp_depth
            || init.max_recv_wr > lim.qp_depth
            || init.max_inline > lim.max_inline
        {
            return Err(Error::conduit(
                "ibv",
                format!(
                    "create_qp: {init:?} beyond the emulated device's limits (queues 1..={}, \
                     inline {})",
                    lim.qp_depth, lim.max_inline
                ),
            ));
        }
        let foreign = |d: &Arc<Dev>| !Arc::ptr_eq(d, &self.dev);
        if foreign(&send_cq.dev) || foreign(&recv_cq.dev) || srq.is_some_and(|s| foreign(&s.dev)) {
            return Err(Error::conduit(
                "ibv",
                "create_qp: a queue of another device",
            ));
        }
        let (index, gen) = {
            let mut f = lock(&self.dev.free);
            let i = f.qp.pop().ok_or_else(|| {
                Error::conduit(
                    "ibv",
                    format!("create_qp: all {} queue pairs in use", lim.max_qp),
                )
            })?;
            let g = &mut f.qp_gen[i as usize];
            *g = g.wrapping_add(1).max(1);
            (i, *g)
        };
        let num = u32::from(gen) << 16 | index;
        let shm = &self.dev.shm;
        shm.rq(index).init();
        shm.qp(index, Q_RECV_CQ)
            .store(recv_cq.index.into(), Ordering::Relaxed);
        shm.qp(index, Q_SRQ)
            .store(srq.map_or(0, |s| u64::from(s.index) + 1), Ordering::Relaxed);
        shm.qp(index, Q_RNR_TIMER).store(
            ConnectAttr::default().min_rnr_timer.into(),
            Ordering::Relaxed,
        );
        shm.qp(index, Q_RETIRED).store(0, Ordering::Relaxed);
        shm.qp(index, Q_MAX_RECV)
            .store(init.max_recv_wr.into(), Ordering::Relaxed);
        shm.qp(index, Q_STATE).store(0, Ordering::Relaxed);
        shm.qp(index, Q_NUM).store(num.into(), Ordering::Release);
        let inner = Arc::new(QpInner {
            dev: self.dev.clone(),
            index,
            num,
            send_cq: send_cq.index,
            init: *init,
            st: Mutex::new(QpLocal {
                remote: None,
                attr: ConnectAttr::default(),
                posted: 0,
                waiting: VecDeque::new(),
                inject: None,
            }),
        });
        lock(&self.dev.qps).push(Arc::downgrade(&inner));
        Ok(EmuQp { inner })
    }

    fn address(&self, qp: &EmuQp) -> Vec<u8> {
        let mut a = qp.inner.num.to_le_bytes().to_vec();
        a.extend_from_slice(self.dev.shm.name.as_bytes());
        a
    }

    fn to_init(&self, qp: &EmuQp) -> Result<()> {
        self.transition(qp, QpState::Reset, QpState::Init)
    }

    fn to_rtr(&self, qp: &EmuQp, remote: &[u8], attr: &ConnectAttr) -> Result<()> {
        let bad = || {
            Error::conduit(
                "ibv",
                format!(
                    "to_rtr: {} bytes are not an emulated device's address",
                    remote.len()
                ),
            )
        };
        if remote.len() < 5 {
            return Err(bad());
        }
        let num = u32::from_le_bytes([remote[0], remote[1], remote[2], remote[3]]);
        let name = std::str::from_utf8(&remote[4..]).map_err(|_| bad())?;
        let peer = self.dev.peer(name)?;
        let index = num & 0xffff;
        if index >= peer.lay.lim.max_qp
            || peer.qp(index, Q_NUM).load(Ordering::Acquire) != u64::from(num)
        {
            return Err(Error::conduit(
                "ibv",
                format!("to_rtr: {name} has no queue pair {num:#x}"),
            ));
        }
        let shm = &self.dev.shm;
        shm.qp(qp.inner.index, Q_RNR_TIMER)
            .store(attr.min_rnr_timer.into(), Ordering::Relaxed);
        let mut st = lock(&qp.inner.st);
        self.transition(qp, QpState::Init, QpState::Rtr)?;
        st.remote = Some(Remote { peer, index, num });
        st.attr = *attr;
        Ok(())
    }

    fn to_rts(&self, qp: &EmuQp, attr: &ConnectAttr) -> Result<()> {
        let mut st = lock(&qp.inner.st);
        self.transition(qp, QpState::Rtr, QpState::Rts)?;
        st.attr.rnr_retry = attr.rnr_retry;
        st.attr.retry_cnt = attr.retry_cnt;
        st.attr.timeout = attr.timeout;
        Ok(())
    }

    fn to_err(&self, qp: &EmuQp) -> Result<()> {
        self.dev.shm.set_err(qp.inner.index);
        let mut st = lock(&qp.inner.st);
        qp.inner.flush(&self.dev, &mut st);
        Ok(())
    }

    fn state(&self, qp: &EmuQp) -> QpState {
        self.dev.shm.qp_state(qp.inner.index)
    }

    unsafe fn post_send(&self, qp: &EmuQp, wrs: &[SendWr<'_>]) -> Result<()> {
        self.dev.progress();
        let q = &qp.inner;
        let mut st = lock(&q.st);
        for (i, wr) in wrs.iter().enumerate() {
            let state = self.dev.shm.qp_state(q.index);
            let refuse = |why: String| {
                Err(Error::conduit(
                    "ibv",
                    format!("post_send on queue pair {:#x}, request {i}: {why}", q.num),
                ))
            };
            if !matches!(state, QpState::Rts | QpState::Err) {
                return refuse(format!("the queue pair is in {state:?}, not RTS"));
            }
            if wr.sg.len() > MAX_SGE as usize {
                return refuse(format!(
                    "{} gather elements, at most {MAX_SGE}",
                    wr.sg.len()
                ));
            }
            let total: u64 = wr.sg.iter().map(|s| u64::from(s.len)).sum();
            if wr.inline && total > u64::from(q.init.max_inline) {
                return refuse(format!(
                    "an inline payload of {total} bytes, at most {}",
                    q.init.max_inline
                ));
            }
            let retired = self.dev.shm.qp(q.index, Q_RETIRED).load(Ordering::Acquire);
            if st.posted.saturating_sub(retired) >= u64::from(q.init.max_send_wr) {
                return refuse(format!(
                    "the send queue is full ({} requests not retired by a polled signaled \
                     completion)",
                    q.init.max_send_wr
                ));
            }
            let pos = st.posted;
            st.posted += 1;
            if state == QpState::Err {
                // Older requests flush first: a send queue completes in order.
                if !st.waiting.is_empty() {
                    q.flush(&self.dev, &mut st);
                }
                q.complete(
                    wr.wr_id,
                    wr.op.completion_opcode(),
                    WcStatus::WrFlushErr,
                    0,
                    pos,
                );
                continue;
            }
            let now = Instant::now();
            if st.waiting.is_empty() {
                if let Step::Done = q.run(
                    &mut st,
                    wr.wr_id,
                    &wr.op,
                    wr.sg,
                    wr.inline,
                    wr.signaled,
                    pos,
                    now,
                    true,
                ) {
                    continue;
                }
            }
            // Keep it: an inline payload is copied now, as the caller may reuse its buffer.
            let (data, sg) = if wr.inline {
                let mut data = Vec::with_capacity(usize::try_from(total).unwrap_or(0));
                for s in wr.sg {
                    // SAFETY: an inline element is `len` readable bytes at `addr` for the
                    // duration of post_send (its contract).
                    data.extend_from_slice(unsafe {
                        std::slice::from_raw_parts(s.addr as *const u8, s.len as usize)
                    });
                }
                let sg = vec![Sge {
                    addr: data.as_ptr() as u64,
                    len: u32::try_from(data.len()).unwrap_or(0),
                    lkey: 0,
                }];
                (data, sg)
            } else {
                (Vec::new(), wr.sg.to_vec())
            };
            st.waiting.push_back(Waiting {
                wr_id: wr.wr_id,
                op: wr.op,
                sg,
                _data: data,
                inline: wr.inline,
                signaled: wr.signaled,
                pos,
                since: now,
            });
            self.dev.waiting.fetch_add(1, Ordering::AcqRel);
        }
        Ok(())
    }

    unsafe fn post_recv(&self, qp: &EmuQp, wrs: &[RecvWr]) -> Result<()> {
        let q = &qp.inner;
        let shm = &self.dev.shm;
        if shm.qp(q.index, Q_SRQ).load(Ordering::Relaxed) != 0 {
            return Err(Error::conduit(
                "ibv",
                format!(
                    "post_recv: queue pair {:#x} takes its receives from a shared receive queue",
                    q.num
                ),
            ));
        }
        let cq = u32::try_from(shm.qp(q.index, Q_RECV_CQ).load(Ordering::Relaxed)).unwrap_or(0);
        let rq = shm.rq(q.index);
        for (i, wr) in wrs.iter().enumerate() {
            match shm.qp_state(q.index) {
                QpState::Reset => {
                    return Err(Error::conduit(
                        "ibv",
                        format!(
                        "post_recv on queue pair {:#x}, request {i}: the queue pair is in RESET",
                        q.num
                    ),
                    ))
                }
                QpState::Err => {
                    let wc = Wc {
                        wr_id: wr.wr_id,
                        status: WcStatus::WrFlushErr,
                        opcode: WcOpcode::Recv,
                        byte_len: 0,
                        imm: None,
                        qp_num: q.num,
                    };
                    shm.push_cqe(cq, cqe(&wc, 0));
                    continue;
                }
                _ => {}
            }
            if rq.len() >= u64::from(q.init.max_recv_wr) || !rq.push(recv_entry(wr)) {
                return Err(Error::conduit(
                    "ibv",
                    format!(
                        "post_recv on queue pair {:#x}, request {i}: the receive queue is full ({})",
                        q.num, q.init.max_recv_wr
                    ),
                ));
            }
        }
        Ok(())
    }

    unsafe fn post_srq_recv(&self, srq: &EmuSrq, wrs: &[RecvWr]) -> Result<()> {
        let r = self.dev.shm.srq(srq.index);
        for (i, wr) in wrs.iter().enumerate() {
            if !r.push(recv_entry(wr)) {
                return Err(Error::conduit(
                    "ibv",
                    format!(
                        "post_srq_recv, request {i}: the shared receive queue is full ({})",
                        self.dev.shm.lay.lim.srq_depth
                    ),
                ));
            }
        }
        Ok(())
    }

    fn poll_cq(&self, cq: &EmuCq, out: &mut [Wc]) -> Result<usize> {
        self.dev.progress();
        let shm = &self.dev.shm;
        let r = shm.cq(cq.index);
        if r.hdr(ring::HDR_OVERRUN).load(Ordering::Acquire) != 0 {
            return Err(Error::conduit(
                "ibv",
                format!(
                    "completion queue {} overran (depth {}): completions were lost",
                    cq.index,
                    r.hdr(ring::HDR_DEPTH).load(Ordering::Acquire)
                ),
            ));
        }
        let mut n = 0;
        while n < out.len() {
            let Some(e) = r.pop() else { break };
            let wc = decode(e);
            if (wc.opcode as u8) < 128 {
                // A send-side completion retires its position and every one before it.
                let index = wc.qp_num & 0xffff;
                if index < shm.lay.lim.max_qp
                    && shm.qp(index, Q_NUM).load(Ordering::Acquire) == u64::from(wc.qp_num)
                {
                    shm.qp(index, Q_RETIRED)
                        .fetch_max(e[3] + 1, Ordering::AcqRel);
                }
            }
            out[n] = wc;
            n += 1;
        }
        Ok(n)
    }
}

impl EmuDevice {
    fn transition(&self, qp: &EmuQp, from: QpState, to: QpState) -> Result<()> {
        let w = self.dev.shm.qp(qp.inner.index, Q_STATE);
        w.compare_exchange(
            state_code(from),
            state_code(to),
            Ordering::AcqRel,
            Ordering::Acquire,
        )
        .map(|_| ())
        .map_err(|now| {
            Error::conduit(
                "ibv",
                format!(
                    "queue pair {:#x}: {from:?} -> {to:?} from state {:?}",
                    qp.inner.num,
                    state_from(now)
                ),
            )
        })
    }
}

fn recv_entry(wr: &RecvWr) -> [u64; 4] {
    [
        wr.wr_id,
        wr.sge.addr,
        u64::from(wr.sge.len) | u64::from(wr.sge.lkey) << 32,
        0,
    ]
}

#[cfg(test)]
mod tests;
