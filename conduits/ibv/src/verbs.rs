//! The verbs the ibv conduit's protocol uses, as a trait with two implementations: libibverbs
//! (cargo feature `ibv`) and the emulated device ([`crate::emu`]).
//!
//! The trait follows libibverbs' objects and names: a device context with one protection
//! domain, memory regions with local and remote keys, completion queues, shared receive
//! queues and reliable-connected (RC) queue pairs with their state machine
//! (RESET → INIT → RTR → RTS, and ERR). Work requests carry the opcodes of `ibv_post_send`
//! and completions the statuses of `ibv_wc`, with the same numeric values, so that a trace of
//! either implementation reads the same.
//!
//! The calling contract, as for libibverbs: buffers named by a work request stay valid and
//! registered until its completion has been polled (an inline send's payload only until
//! `post_send` returns); a queue pair posts sends only in RTS; a completion queue is polled by
//! its owner and must be deep enough for every work request that may complete into it.

use amnet_core::Result;

/// Memory-region access flags, with `ibv_access_flags`' values.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Access(pub u32);

impl Access {
    /// The device may write this region for local work requests (receive buffers, RDMA read
    /// and atomic result buffers).
    pub const LOCAL_WRITE: Access = Access(1);
    /// Peers may RDMA-write this region.
    pub const REMOTE_WRITE: Access = Access(2);
    /// Peers may RDMA-read this region.
    pub const REMOTE_READ: Access = Access(4);
    /// Peers may run atomics on this region.
    pub const REMOTE_ATOMIC: Access = Access(8);

    /// True when every flag of `other` is set here.
    pub fn contains(self, other: Access) -> bool {
        self.0 & other.0 == other.0
    }
}

impl std::ops::BitOr for Access {
    type Output = Access;
    fn bitor(self, rhs: Access) -> Access {
        Access(self.0 | rhs.0)
    }
}

/// One scatter/gather element: `len` bytes at `addr`, inside a region registered with `lkey`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sge {
    /// Start address in this process.
    pub addr: u64,
    /// Length in bytes.
    pub len: u32,
    /// Local key of the region that holds the bytes (ignored for inline sends).
    pub lkey: u32,
}

/// The operation of a send work request, with what it needs at the remote side.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SendOp {
    /// `IBV_WR_SEND`: the gathered bytes land in the peer's next receive buffer.
    Send,
    /// `IBV_WR_SEND_WITH_IMM`: as `Send`, and the peer's completion carries `imm`.
    SendWithImm {
        /// Immediate data (host order here; the wire order is the device's business).
        imm: u32,
    },
    /// `IBV_WR_RDMA_WRITE`: the gathered bytes are written at `remote_addr` in the peer's
    /// region `rkey`; the peer sees no completion.
    RdmaWrite {
        /// Target address in the peer's address space.
        remote_addr: u64,
        /// Remote key of the peer's region.
        rkey: u32,
    },
    /// `IBV_WR_RDMA_WRITE_WITH_IMM`: as `RdmaWrite`, then consumes one receive of the peer,
    /// whose completion carries `imm` and the written length.
    RdmaWriteWithImm {
        /// Target address in the peer's address space.
        remote_addr: u64,
        /// Remote key of the peer's region.
        rkey: u32,
        /// Immediate data.
        imm: u32,
    },
    /// `IBV_WR_RDMA_READ`: the scatter list is filled from `remote_addr` in region `rkey`.
    RdmaRead {
        /// Source address in the peer's address space.
        remote_addr: u64,
        /// Remote key of the peer's region.
        rkey: u32,
    },
    /// `IBV_WR_ATOMIC_FETCH_AND_ADD` on the 8-byte word at `remote_addr`; the old value lands
    /// in the (8-byte) scatter list.
    FetchAdd {
        /// Target word (8-byte aligned) in the peer's address space.
        remote_addr: u64,
        /// Remote key of the peer's region.
        rkey: u32,
        /// Value added.
        add: u64,
    },
    /// `IBV_WR_ATOMIC_CMP_AND_SWP` on the 8-byte word at `remote_addr`: `swap` is written
    /// when the word equals `compare`; the old value lands in the scatter list.
    CompareSwap {
        /// Target word (8-byte aligned) in the peer's address space.
        remote_addr: u64,
        /// Remote key of the peer's region.
        rkey: u32,
        /// Expected value.
        compare: u64,
        /// Value written when the word holds `compare`.
        swap: u64,
    },
}

impl SendOp {
    /// The opcode the send side's completion reports for this operation.
    pub fn completion_opcode(&self) -> WcOpcode {
        match self {
            SendOp::Send | SendOp::SendWithImm { .. } => WcOpcode::Send,
            SendOp::RdmaWrite { .. } | SendOp::RdmaWriteWithImm { .. } => WcOpcode::RdmaWrite,
            SendOp::RdmaRead { .. } => WcOpcode::RdmaRead,
            SendOp::FetchAdd { .. } => WcOpcode::FetchAdd,
            SendOp::CompareSwap { .. } => WcOpcode::CompareSwap,
        }
    }
}

/// A send work request (`ibv_send_wr` with its flags).
#[derive(Clone, Copy, Debug)]
pub struct SendWr<'a> {
    /// Returned in the completion.
    pub wr_id: u64,
    /// What to do.
    pub op: SendOp,
    /// Gather list (scatter list for reads and atomics).
    pub sg: &'a [Sge],
    /// `IBV_SEND_SIGNALED`: a successful completion is generated (errors always are).
    pub signaled: bool,
    /// `IBV_SEND_INLINE`: the payload is copied at post time (at most
    /// [`DeviceCaps::max_inline`] bytes; no key needed).
    pub inline: bool,
    /// `IBV_SEND_FENCE`: wait for earlier RDMA reads and atomics of this queue pair first.
    pub fence: bool,
}

/// A receive work request with one scatter element.
#[derive(Clone, Copy, Debug)]
pub struct RecvWr {
    /// Returned in the completion.
    pub wr_id: u64,
    /// Where an arriving send's bytes go.
    pub sge: Sge,
}

/// The opcode of a completion (`ibv_wc_opcode`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum WcOpcode {
    /// A send, with or without immediate data.
    Send = 0,
    /// An RDMA write, with or without immediate data.
    RdmaWrite = 1,
    /// An RDMA read.
    RdmaRead = 2,
    /// A compare-and-swap.
    CompareSwap = 3,
    /// A fetch-and-add.
    FetchAdd = 4,
    /// A receive consumed by a send.
    Recv = 128,
    /// A receive consumed by an RDMA write with immediate data.
    RecvRdmaWithImm = 129,
}

impl WcOpcode {
    /// The opcode with this `ibv_wc_opcode` value.
    pub fn from_raw(v: u32) -> Option<WcOpcode> {
        Some(match v {
            0 => WcOpcode::Send,
            1 => WcOpcode::RdmaWrite,
            2 => WcOpcode::RdmaRead,
            3 => WcOpcode::CompareSwap,
            4 => WcOpcode::FetchAdd,
            128 => WcOpcode::Recv,
            129 => WcOpcode::RecvRdmaWithImm,
            _ => return None,
        })
    }
}

/// The status of a completion (`ibv_wc_status`, same values).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WcStatus {
    /// The work request completed.
    Success,
    /// `IBV_WC_LOC_LEN_ERR`: a receive buffer too small for the arriving send, or a gather
    /// list longer than the device's message limit.
    LocLenErr,
    /// `IBV_WC_LOC_QP_OP_ERR`: an operation the queue pair cannot run.
    LocQpOpErr,
    /// `IBV_WC_LOC_PROT_ERR`: a local key that names no region, or a range or access
    /// outside it.
    LocProtErr,
    /// `IBV_WC_WR_FLUSH_ERR`: the queue pair entered the error state before this request ran.
    WrFlushErr,
    /// `IBV_WC_REM_INV_REQ_ERR`: the peer refused the request (its receive buffer too small,
    /// an atomic not 8-byte aligned).
    RemInvReqErr,
    /// `IBV_WC_REM_ACCESS_ERR`: the remote key names no region of the peer, or the range or
    /// the access is outside what it grants.
    RemAccessErr,
    /// `IBV_WC_REM_OP_ERR`: the peer could not complete the operation.
    RemOpErr,
    /// `IBV_WC_RETRY_EXC_ERR`: the peer did not answer within the transport retries (its
    /// queue pair is gone or not connected).
    RetryExcErr,
    /// `IBV_WC_RNR_RETRY_EXC_ERR`: the peer had no receive posted through every
    /// receiver-not-ready retry.
    RnrRetryExcErr,
    /// Another `ibv_wc_status` value.
    Other(u32),
}

impl WcStatus {
    /// The `ibv_wc_status` value.
    pub fn raw(self) -> u32 {
        match self {
            WcStatus::Success => 0,
            WcStatus::LocLenErr => 1,
            WcStatus::LocQpOpErr => 2,
            WcStatus::LocProtErr => 4,
            WcStatus::WrFlushErr => 5,
            WcStatus::RemInvReqErr => 9,
            WcStatus::RemAccessErr => 10,
            WcStatus::RemOpErr => 11,
            WcStatus::RetryExcErr => 12,
            WcStatus::RnrRetryExcErr => 13,
            WcStatus::Other(v) => v,
        }
    }

    /// The status with this `ibv_wc_status` value.
    pub fn from_raw(v: u32) -> WcStatus {
        match v {
            0 => WcStatus::Success,
            1 => WcStatus::LocLenErr,
            2 => WcStatus::LocQpOpErr,
            4 => WcStatus::LocProtErr,
            5 => WcStatus::WrFlushErr,
            9 => WcStatus::RemInvReqErr,
            10 => WcStatus::RemAccessErr,
            11 => WcStatus::RemOpErr,
            12 => WcStatus::RetryExcErr,
            13 => WcStatus::RnrRetryExcErr,
            v => WcStatus::Other(v),
        }
    }

    /// The error status named `name` as `AMNET_IBV_EMU_FAULT` writes it (`rem_access`,
    /// `rnr_retry`, ...).
    pub fn from_name(name: &str) -> Option<WcStatus> {
        Some(match name {
            "loc_len" => WcStatus::LocLenErr,
            "loc_qp_op" => WcStatus::LocQpOpErr,
            "loc_prot" => WcStatus::LocProtErr,
            "flush" => WcStatus::WrFlushErr,
            "rem_inv_req" => WcStatus::RemInvReqErr,
            "rem_access" => WcStatus::RemAccessErr,
            "rem_op" => WcStatus::RemOpErr,
            "retry" => WcStatus::RetryExcErr,
            "rnr_retry" => WcStatus::RnrRetryExcErr,
            _ => return None,
        })
    }

    /// What the status means, for error messages.
    pub fn describe(self) -> &'static str {
        match self {
            WcStatus::Success => "success",
            WcStatus::LocLenErr => {
                "local length error (receive buffer too small or message too long)"
            }
            WcStatus::LocQpOpErr => "local queue-pair operation error",
            WcStatus::LocProtErr => "local protection error (bad local key, range or access)",
            WcStatus::WrFlushErr => "flushed: the queue pair was in the error state",
            WcStatus::RemInvReqErr => {
                "remote invalid request (peer's receive buffer too small or misaligned atomic)"
            }
            WcStatus::RemAccessErr => "remote access error (bad remote key, range or access)",
            WcStatus::RemOpErr => "remote operation error",
            WcStatus::RetryExcErr => {
                "transport retries exceeded (peer unreachable or not connected)"
            }
            WcStatus::RnrRetryExcErr => {
                "receiver-not-ready retries exceeded (peer posted no receive)"
            }
            WcStatus::Other(_) => "other completion error",
        }
    }
}

/// One completion (`ibv_wc`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Wc {
    /// The work request's id.
    pub wr_id: u64,
    /// How it ended.
    pub status: WcStatus,
    /// What it was: meaningful on success only (libibverbs leaves it undefined in error
    /// completions; tell them apart by `wr_id`).
    pub opcode: WcOpcode,
    /// Bytes received (receives) or read (RDMA reads).
    pub byte_len: u32,
    /// Immediate data of a send or write with immediate.
    pub imm: Option<u32>,
    /// The local queue pair's number.
    pub qp_num: u32,
}

impl Wc {
    /// A blank completion, to fill arrays that [`Verbs::poll_cq`] writes into.
    pub const EMPTY: Wc = Wc {
        wr_id: 0,
        status: WcStatus::Success,
        opcode: WcOpcode::Send,
        byte_len: 0,
        imm: None,
        qp_num: 0,
    };
}

/// What a device offers, as the conduit sizes its queues from it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeviceCaps {
    /// Largest inline send payload.
    pub max_inline: u32,
    /// Deepest send or receive queue of one queue pair.
    pub max_qp_wr: u32,
    /// Deepest completion queue.
    pub max_cqe: u32,
    /// Deepest shared receive queue.
    pub max_srq_wr: u32,
    /// Scatter/gather elements per work request.
    pub max_sge: u32,
    /// Largest message (send or RDMA) in bytes.
    pub max_msg: u32,
    /// True when the device runs 8-byte fetch-add and compare-swap.
    pub atomics: bool,
}

/// The state of a queue pair (`ibv_qp_state`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum QpState {
    /// Just created; nothing can be posted.
    Reset,
    /// Receives can be posted.
    Init,
    /// Ready to receive: connected to a remote queue pair.
    Rtr,
    /// Ready to send.
    Rts,
    /// An error completion moved it here: every outstanding request flushes.
    Err,
}

/// The attributes of the INIT → RTR → RTS transitions of an RC queue pair that the protocol
/// sets (`ibv_qp_attr`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnectAttr {
    /// Receiver-not-ready retries before `RnrRetryExcErr` (7: retry forever).
    pub rnr_retry: u8,
    /// Transport retries before `RetryExcErr`.
    pub retry_cnt: u8,
    /// Local ACK timeout exponent: 4.096 µs · 2^timeout per try.
    pub timeout: u8,
    /// The delay a peer is told to wait after an RNR NAK, as the IB table's index (1-31).
    pub min_rnr_timer: u8,
}

impl Default for ConnectAttr {
    fn default() -> Self {
        ConnectAttr {
            rnr_retry: 7,
            retry_cnt: 7,
            timeout: 14,
            min_rnr_timer: 12,
        }
    }
}

/// How a queue pair is created (`ibv_qp_init_attr` for RC).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct QpInit {
    /// Send queue depth.
    pub max_send_wr: u32,
    /// Receive queue depth (ignored with a shared receive queue).
    pub max_recv_wr: u32,
    /// Inline payload the queue pair must accept.
    pub max_inline: u32,
}

/// A registered memory region's keys and extent.
pub trait MemoryRegion: Send + Sync {
    /// The key local work requests name it by.
    fn lkey(&self) -> u32;
    /// The key peers name it by.
    fn rkey(&self) -> u32;
    /// First address.
    fn addr(&self) -> u64;
    /// Length in bytes.
    fn len(&self) -> usize;
    /// True for an empty region.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A queue pair's identity.
pub trait QueuePair: Send + Sync {
    /// Its number, as completions report it.
    fn num(&self) -> u32;
}

/// The verbs of one opened device and port, with one protection domain.
///
/// Handles are owned values, destroyed when dropped (a queue pair before the queues it uses).
/// The methods that take addresses are `unsafe`: the device reads and writes them after the
/// call returns.
pub trait Verbs: Send + Sync + 'static {
    /// A registered memory region.
    type Mr: MemoryRegion;
    /// A completion queue.
    type Cq: Send + Sync;
    /// A shared receive queue.
    type Srq: Send + Sync;
    /// An RC queue pair.
    type Qp: QueuePair;

    /// The device's name (`mlx5_0`, `emu`).
    fn name(&self) -> &str;
    /// What the device offers.
    fn caps(&self) -> DeviceCaps;
    /// Register `len` bytes at `addr` with `access`.
    ///
    /// # Safety
    /// - `addr..addr + len` is memory of this process, valid for reads (and for writes where
    ///   `access` lets the device write) until the region is dropped and every request that
    ///   names it has completed.
    unsafe fn reg_mr(&self, addr: *mut u8, len: usize, access: Access) -> Result<Self::Mr>;
    /// A completion queue of at least `depth` entries.
    fn create_cq(&self, depth: u32) -> Result<Self::Cq>;
    /// A shared receive queue of at least `depth` entries.
    fn create_srq(&self, depth: u32) -> Result<Self::Srq>;
    /// An RC queue pair in RESET whose completions go to `send_cq` and `recv_cq` and whose
    /// receives come from `srq` when given.
    fn create_qp(
        &self,
        send_cq: &Self::Cq,
        recv_cq: &Self::Cq,
        srq: Option<&Self::Srq>,
        init: &QpInit,
    ) -> Result<Self::Qp>;
    /// The bytes a peer needs to connect to `qp` (exchanged through the job's bootstrap).
    fn address(&self, qp: &Self::Qp) -> Vec<u8>;
    /// RESET → INIT.
    fn to_init(&self, qp: &Self::Qp) -> Result<()>;
    /// INIT → RTR, connected to the queue pair at `remote` (bytes from its owner's
    /// [`address`](Verbs::address)).
    fn to_rtr(&self, qp: &Self::Qp, remote: &[u8], attr: &ConnectAttr) -> Result<()>;
    /// RTR → RTS.
    fn to_rts(&self, qp: &Self::Qp, attr: &ConnectAttr) -> Result<()>;
    /// Any state → ERR: outstanding requests flush.
    fn to_err(&self, qp: &Self::Qp) -> Result<()>;
    /// The queue pair's current state.
    fn state(&self, qp: &Self::Qp) -> QpState;
    /// Post send work requests, in order. An error names the first request that could not be
    /// posted; those before it were.
    ///
    /// # Safety
    /// - Every non-inline gather or scatter element stays valid (and registered) until the
    ///   request's completion has been polled, or the queue pair was destroyed.
    unsafe fn post_send(&self, qp: &Self::Qp, wrs: &[SendWr<'_>]) -> Result<()>;
    /// Post receive work requests to a queue pair without a shared receive queue.
    ///
    /// # Safety
    /// - Each buffer stays valid for writes until its completion has been polled.
    unsafe fn post_recv(&self, qp: &Self::Qp, wrs: &[RecvWr]) -> Result<()>;
    /// Post receive work requests to a shared receive queue.
    ///
    /// # Safety
    /// - As for [`post_recv`](Verbs::post_recv).
    unsafe fn post_srq_recv(&self, srq: &Self::Srq, wrs: &[RecvWr]) -> Result<()>;
    /// Move up to `out.len()` completions of `cq` into `out`; returns how many.
    fn poll_cq(&self, cq: &Self::Cq, out: &mut [Wc]) -> Result<usize>;
}
