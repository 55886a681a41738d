//! The libibverbs device (cargo feature `ibv`): [`RdmaDevice`] implements [`Verbs`] over
//! rdma-core, for InfiniBand and RoCE HCAs.
//!
//! Every libibverbs call goes through `shim.c` (bound in `ffi.rs`), which build.rs compiles
//! against the installed headers: the data-path calls of libibverbs are static inline
//! functions, and its structs are not mirrored in Rust; the shim translates small structs of
//! its own, whose layout a test checks, into `ibv_send_wr` chains and out of `ibv_wc` arrays.
//!
//! Opening ([`RdmaDevice::open`]) takes the first port that is active, in the order of an
//! `AMNET_IBV_PORTS` list (GASNet's `GASNET_IBV_PORTS` syntax, see `ports.rs`) or of the
//! devices and their ports. One protection domain serves every object of the device. A
//! queue pair's [address](Verbs::address) carries the port's LID and GID (index 0), the
//! queue pair's number and first PSN, the port's active MTU and its responder resources
//! (`addr.rs`); [`Verbs::to_rtr`] addresses the peer by GID (with a global route header)
//! on RoCE or when the peer has no LID, by LID otherwise.
//!
//! Handles own their libibverbs objects and destroy them when dropped. Each holds what it
//! depends on (a queue pair its completion queues and shared receive queue, everything the
//! device's context and protection domain), so the objects are destroyed in an order
//! libibverbs accepts whatever order the handles are dropped in.
//!
//! What the verbs interface leaves to the device here: [`DeviceCaps::max_inline`] comes from
//! creating a probe queue pair at open (libibverbs reports no inline limit), a send request
//! takes at most [`DeviceCaps::max_sge`] elements (at most 4 through the shim), and an error
//! completion's opcode is whatever the device reported (libibverbs defines only `wr_id`,
//! `status` and `qp_num` for those), [`WcOpcode::Send`] when it reported none.

mod addr;
mod ffi;
mod ports;
#[cfg(test)]
mod tests;

use std::ffi::{c_int, CStr};
use std::hash::{BuildHasher, Hasher};
use std::io;
use std::mem::MaybeUninit;
use std::ptr::{self, NonNull};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

use amnet_core::{Error, Result};

use crate::verbs::{
    Access, ConnectAttr, DeviceCaps, MemoryRegion, QpInit, QpState, QueuePair, RecvWr, SendOp,
    SendWr, Verbs, Wc, WcOpcode, WcStatus,
};
use addr::QpAddr;

/// The GID table entry a port is addressed by (RoCE and global routes).
const GID_INDEX: u8 = 0;
/// The hop limit of a global route header.
const HOP_LIMIT: u8 = 64;
/// Inline sizes tried, largest first, when probing the device's inline limit.
const INLINE_PROBE: [u32; 7] = [1024, 512, 256, 128, 64, 32, 0];

/// An [`Error::Os`] for libibverbs call `what` failing with errno value `rc`.
fn os_err(what: impl Into<String>, rc: c_int) -> Error {
    Error::os(
        "ibv",
        what,
        io::Error::from_raw_os_error(rc.checked_abs().unwrap_or(libc::EINVAL)),
    )
}

fn conduit_err(what: impl Into<String>) -> Error {
    Error::conduit("ibv", what)
}

/// `n` as a C count, saturated (every count here is small).
fn c_count(n: usize) -> c_int {
    c_int::try_from(n).unwrap_or(c_int::MAX)
}

/// `n` as a 32-bit count, saturated.
fn u32_count(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// The names of the RDMA devices of this host, as `ibv_devices` lists them; empty where
/// there are none (including where the kernel has no RDMA support).
pub fn devices() -> Result<Vec<String>> {
    Ok(DeviceList::get()?.names())
}

/// `ibv_get_device_list`'s answer, freed when dropped.
struct DeviceList {
    list: *mut *mut ffi::IbvDevice,
    n: c_int,
}

impl DeviceList {
    fn get() -> Result<DeviceList> {
        let mut list = ptr::null_mut();
        let mut n: c_int = 0;
        // SAFETY: both out-pointers are valid for writes.
        let rc = unsafe { ffi::amnet_ibv_get_devices(&mut list, &mut n) };
        if rc != 0 {
            return Err(os_err("ibv_get_device_list", rc));
        }
        Ok(DeviceList {
            list,
            n: if list.is_null() { 0 } else { n.max(0) },
        })
    }

    fn name(&self, i: c_int) -> String {
        debug_assert!((0..self.n).contains(&i));
        // SAFETY: `i` indexes the list, which lives until `self` is dropped; libibverbs
        // returns a NUL-terminated name owned by the device, or null.
        unsafe {
            let p = ffi::amnet_ibv_device_name(self.list, i);
            if p.is_null() {
                format!("device{i}")
            } else {
                CStr::from_ptr(p).to_string_lossy().into_owned()
            }
        }
    }

    fn names(&self) -> Vec<String> {
        (0..self.n).map(|i| self.name(i)).collect()
    }

    /// Open device `i` of the list.
    fn open(&self, i: c_int) -> Result<Context> {
        debug_assert!((0..self.n).contains(&i));
        let mut ctx = ptr::null_mut();
        // SAFETY: `i` indexes the list, which is alive; the out-pointer is valid.
        let rc = unsafe { ffi::amnet_ibv_open(self.list, i, &mut ctx) };
        match NonNull::new(ctx) {
            Some(ctx) if rc == 0 => Ok(Context(ctx)),
            _ => Err(os_err(format!("ibv_open_device {}", self.name(i)), rc)),
        }
    }
}

impl Drop for DeviceList {
    fn drop(&mut self) {
        // SAFETY: the list came from ibv_get_device_list (or is null, which the shim skips)
        // and is freed once; opened contexts do not depend on it.
        unsafe { ffi::amnet_ibv_free_devices(self.list) };
    }
}

/// An open device context, closed when dropped.
#[derive(Debug)]
struct Context(NonNull<ffi::IbvContext>);

impl Context {
    fn query_device(&self, name: &str) -> Result<ffi::DeviceInfo> {
        let mut info = ffi::DeviceInfo::default();
        // SAFETY: the context is open; `info` is valid for writes.
        let rc = unsafe { ffi::amnet_ibv_query_device(self.0.as_ptr(), &mut info) };
        if rc != 0 {
            return Err(os_err(format!("ibv_query_device {name}"), rc));
        }
        Ok(info)
    }

    fn query_port(&self, name: &str, port: u8) -> Result<ffi::PortInfo> {
        let mut info = ffi::PortInfo::default();
        // SAFETY: the context is open; `info` is valid for writes.
        let rc = unsafe { ffi::amnet_ibv_query_port(self.0.as_ptr(), port, &mut info) };
        if rc != 0 {
            return Err(os_err(format!("ibv_query_port {name} port {port}"), rc));
        }
        Ok(info)
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        // SAFETY: the context is open and closed once, after every object made from it was
        // destroyed (they hold the `Ctx` that holds this). A failure leaves nothing to do.
        unsafe { ffi::amnet_ibv_close(self.0.as_ptr()) };
    }
}

/// A device context with its protection domain: what every object of the device is made
/// from, kept alive by each of them.
#[derive(Debug)]
struct Ctx {
    pd: NonNull<ffi::IbvPd>,
    context: Context,
}

impl Ctx {
    fn raw(&self) -> *mut ffi::IbvContext {
        self.context.0.as_ptr()
    }
}

impl Drop for Ctx {
    fn drop(&mut self) {
        // SAFETY: the protection domain was allocated from this context and is deallocated
        // once, after every region and queue made in it (they hold this `Ctx`); the context
        // itself closes after this, when the field drops.
        unsafe { ffi::amnet_ibv_dealloc_pd(self.pd.as_ptr()) };
    }
}

// SAFETY: libibverbs' objects may be used from any thread: its calls on one object take the
// provider's locks where they need them (libibverbs documents its API as thread-safe), and
// this type hands out no interior reference to them.
unsafe impl Send for Ctx {}
// SAFETY: as for `Send`: every use through `&Ctx` is a libibverbs call, which is thread-safe.
unsafe impl Sync for Ctx {}

/// An opened HCA port with one protection domain: the libibverbs implementation of
/// [`Verbs`].
#[derive(Debug)]
pub struct RdmaDevice {
    ctx: Arc<Ctx>,
    name: String,
    port: u8,
    lid: u16,
    gid: [u8; 16],
    /// The port's active MTU (`ibv_mtu`).
    mtu: u8,
    /// RoCE: peers are addressed by GID.
    ethernet: bool,
    /// Responder resources given to each queue pair (`max_qp_rd_atom`).
    rd_atom: u8,
    /// Initiator depth limit (`max_qp_init_rd_atom`).
    init_rd_atom: u8,
    caps: DeviceCaps,
}

impl RdmaDevice {
    /// Open the first active port that `ports` names, in GASNet's `GASNET_IBV_PORTS` syntax
    /// (`mlx5_0`, `mlx5_0:1`, `mlx5_0:1+mlx4_0`; `AMNET_IBV_PORTS`), or without `ports` the
    /// first active port of the first device that has one.
    ///
    /// The error of a failed open lists the devices found and why each named port was
    /// passed over (no such device or port, not active, could not be opened).
    pub fn open(ports: Option<&str>) -> Result<RdmaDevice> {
        let spec = match ports {
            Some(s) => ports::parse(s)?,
            None => Vec::new(),
        };
        let list = DeviceList::get()?;
        let names = list.names();
        if names.is_empty() {
            return Err(conduit_err(
                "no RDMA device: ibv_get_device_list found none (is the HCA's kernel driver \
                 loaded, and /dev/infiniband readable?); AMNET_IBV_DEVICE=emu selects the \
                 emulated test device",
            ));
        }
        let mut passed = Vec::new();
        let mut candidates: Vec<(c_int, &[u8])> = Vec::new();
        if spec.is_empty() {
            candidates.extend((0..list.n).map(|i| (i, &[][..])));
        } else {
            for e in &spec {
                match names.iter().position(|n| *n == e.hca) {
                    Some(i) => candidates.push((c_count(i), &e.ports[..])),
                    None => passed.push(format!("{}: no such device", e.hca)),
                }
            }
        }
        for (i, ports) in candidates {
            if let Some(dev) = Self::try_device(&list, i, ports, &mut passed)? {
                return Ok(dev);
            }
        }
        let wanted = match ports {
            Some(p) if !spec.is_empty() => format!("among AMNET_IBV_PORTS={p}"),
            _ => "on any device".to_string(),
        };
        Err(conduit_err(format!(
            "no active port {wanted} ({}); devices found: {} (ibv_devinfo shows their \
             ports; AMNET_IBV_DEVICE=emu selects the emulated test device)",
            passed.join("; "),
            names.join(", ")
        )))
    }

    /// Device `i` of `list` on the first active port of `ports` (empty: any), or `None`
    /// with the reasons added to `passed`.
    fn try_device(
        list: &DeviceList,
        i: c_int,
        ports: &[u8],
        passed: &mut Vec<String>,
    ) -> Result<Option<RdmaDevice>> {
        let name = list.name(i);
        let context = match list.open(i) {
            Ok(c) => c,
            Err(e) => {
                passed.push(format!("{name}: {e}"));
                return Ok(None);
            }
        };
        let info = match context.query_device(&name) {
            Ok(info) => info,
            Err(e) => {
                passed.push(format!("{name}: {e}"));
                return Ok(None);
            }
        };
        let count = u8::try_from(info.phys_port_cnt).unwrap_or(u8::MAX);
        let all: Vec<u8> = (1..=count).collect();
        let ports = if ports.is_empty() { &all[..] } else { ports };
        for &port in ports {
            if port > count {
                passed.push(format!("{name} port {port}: no such port ({count} ports)"));
                continue;
            }
            let pinfo = match context.query_port(&name, port) {
                Ok(p) => p,
                Err(e) => {
                    passed.push(format!("{name} port {port}: {e}"));
                    continue;
                }
            };
            if pinfo.state != ffi::PORT_ACTIVE {
                passed.push(format!(
                    "{name} port {port}: {}",
                    port_state_name(pinfo.state)
                ));
                continue;
            }
            return Self::finish(context, name, port, &info, &pinfo).map(Some);
        }
        Ok(None)
    }

    /// The device on active `port` of `context`.
    fn finish(
        context: Context,
        name: String,
        port: u8,
        info: &ffi::DeviceInfo,
        pinfo: &ffi::PortInfo,
    ) -> Result<RdmaDevice> {
        let mut pd = ptr::null_mut();
        // SAFETY: the context is open; the out-pointer is valid.
        let rc = unsafe { ffi::amnet_ibv_alloc_pd(context.0.as_ptr(), &mut pd) };
        let pd = match NonNull::new(pd) {
            Some(pd) if rc == 0 => pd,
            _ => return Err(os_err(format!("ibv_alloc_pd {name}"), rc)),
        };
        let ctx = Arc::new(Ctx { pd, context });
        let mut gid = [0u8; 16];
        // SAFETY: the context is open; `gid` is 16 writable bytes.
        let rc =
            unsafe { ffi::amnet_ibv_query_gid(ctx.raw(), port, c_int::from(GID_INDEX), &mut gid) };
        if rc != 0 {
            return Err(os_err(
                format!("ibv_query_gid {name} port {port} index {GID_INDEX}"),
                rc,
            ));
        }
        let mut caps = DeviceCaps {
            max_inline: 0,
            max_qp_wr: info.max_qp_wr,
            max_cqe: info.max_cqe,
            max_srq_wr: info.max_srq_wr,
            max_sge: info.max_sge.min(u32_count(ffi::MAX_SGE)),
            max_msg: pinfo.max_msg_sz,
            atomics: info.atomic_cap != ffi::ATOMIC_NONE,
        };
        caps.max_inline = probe_inline(&ctx, &name, caps.max_sge)?;
        Ok(RdmaDevice {
            ctx,
            name,
            port,
            lid: pinfo.lid,
            gid,
            mtu: u8::try_from(pinfo.active_mtu.clamp(1, 5)).unwrap_or(1),
            ethernet: pinfo.link_layer == ffi::LINK_LAYER_ETHERNET,
            rd_atom: u8::try_from(info.max_qp_rd_atom).unwrap_or(u8::MAX),
            init_rd_atom: u8::try_from(info.max_qp_init_rd_atom).unwrap_or(u8::MAX),
            caps,
        })
    }

    /// The port in use.
    pub fn port(&self) -> u8 {
        self.port
    }

    /// The port's LID (0 on RoCE).
    pub fn lid(&self) -> u16 {
        self.lid
    }

    /// The port's GID at index 0.
    pub fn gid(&self) -> [u8; 16] {
        self.gid
    }

    /// True for a RoCE port (Ethernet link layer), whose peers are addressed by GID.
    pub fn is_roce(&self) -> bool {
        self.ethernet
    }

    fn same_device(&self, other: &Arc<Ctx>, what: &str) -> Result<()> {
        if Arc::ptr_eq(&self.ctx, other) {
            Ok(())
        } else {
            Err(conduit_err(format!(
                "create_qp on {}: the {what} belongs to another device",
                self.name
            )))
        }
    }
}

fn port_state_name(state: u32) -> &'static str {
    match state {
        0 => "state NOP",
        1 => "DOWN",
        2 => "INIT (no subnet manager yet?)",
        3 => "ARMED",
        4 => "ACTIVE",
        5 => "ACTIVE_DEFER",
        _ => "in an unknown state",
    }
}

/// The largest inline payload a queue pair of this device accepts with `max_sge` send
/// elements: libibverbs reports no limit, so probe queue pairs are created with sizes from
/// [`INLINE_PROBE`] until one is accepted.
fn probe_inline(ctx: &Arc<Ctx>, name: &str, max_sge: u32) -> Result<u32> {
    let cq = CqInner::create(ctx, name, 4)?;
    let mut last = 0;
    for want in INLINE_PROBE {
        let mut caps = ffi::QpCaps {
            max_send_wr: 1,
            max_recv_wr: 1,
            max_send_sge: max_sge.max(1),
            max_recv_sge: 1,
            max_inline_data: want,
        };
        let mut qp = ptr::null_mut();
        let mut num = 0u32;
        // SAFETY: the protection domain and the completion queue are alive; the
        // out-pointers are valid.
        let rc = unsafe {
            ffi::amnet_ibv_create_rc_qp(
                ctx.pd.as_ptr(),
                cq.cq.as_ptr(),
                cq.cq.as_ptr(),
                ptr::null_mut(),
                &mut caps,
                &mut qp,
                &mut num,
            )
        };
        if rc == 0 && !qp.is_null() {
            // SAFETY: the probe queue pair was just created and is used by nothing.
            unsafe { ffi::amnet_ibv_destroy_qp(qp) };
            return Ok(caps.max_inline_data.max(want));
        }
        last = if rc != 0 { rc } else { libc::EINVAL };
    }
    Err(os_err(
        format!("ibv_create_qp (RC, one request, no inline data) on {name}"),
        last,
    ))
}

/// A random first packet sequence number (24 bits).
fn random_psn() -> u32 {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    u32::try_from(h.finish() & 0xff_ffff).unwrap_or(0)
}

/// A registered memory region, deregistered when dropped.
#[derive(Debug)]
pub struct RdmaMr {
    mr: NonNull<ffi::IbvMr>,
    lkey: u32,
    rkey: u32,
    addr: u64,
    len: usize,
    _ctx: Arc<Ctx>,
}

impl MemoryRegion for RdmaMr {
    fn lkey(&self) -> u32 {
        self.lkey
    }
    fn rkey(&self) -> u32 {
        self.rkey
    }
    fn addr(&self) -> u64 {
        self.addr
    }
    fn len(&self) -> usize {
        self.len
    }
}

impl Drop for RdmaMr {
    fn drop(&mut self) {
        // SAFETY: the region was registered in the protection domain `_ctx` keeps alive and
        // is deregistered once. A failure (a memory window still bound) leaves nothing to do.
        unsafe { ffi::amnet_ibv_dereg_mr(self.mr.as_ptr()) };
    }
}

// SAFETY: see `Ctx`: libibverbs objects are thread-safe, and the region's fields are plain
// values read through `&self`.
unsafe impl Send for RdmaMr {}
// SAFETY: as for `Send`.
unsafe impl Sync for RdmaMr {}

/// A completion queue's object.
#[derive(Debug)]
struct CqInner {
    cq: NonNull<ffi::IbvCq>,
    depth: u32,
    ctx: Arc<Ctx>,
}

impl CqInner {
    fn create(ctx: &Arc<Ctx>, name: &str, depth: u32) -> Result<CqInner> {
        let mut cq = ptr::null_mut();
        let mut got: c_int = 0;
        let cqe = c_int::try_from(depth).unwrap_or(c_int::MAX);
        // SAFETY: the context is open; the out-pointers are valid.
        let rc = unsafe { ffi::amnet_ibv_create_cq(ctx.raw(), cqe, &mut cq, &mut got) };
        match NonNull::new(cq) {
            Some(cq) if rc == 0 => Ok(CqInner {
                cq,
                depth: u32::try_from(got).unwrap_or(depth).max(depth),
                ctx: Arc::clone(ctx),
            }),
            _ => Err(os_err(
                format!("ibv_create_cq of {depth} entries on {name}"),
                rc,
            )),
        }
    }
}

impl Drop for CqInner {
    fn drop(&mut self) {
        // SAFETY: the queue was created from the context `ctx` keeps alive and is destroyed
        // once, after every queue pair using it (they hold this `CqInner`).
        unsafe { ffi::amnet_ibv_destroy_cq(self.cq.as_ptr()) };
    }
}

// SAFETY: see `Ctx`; polling one completion queue from several threads is serialized by
// the provider.
unsafe impl Send for CqInner {}
// SAFETY: as for `Send`.
unsafe impl Sync for CqInner {}

/// A completion queue, destroyed when it and every queue pair using it are dropped.
#[derive(Debug)]
pub struct RdmaCq(Arc<CqInner>);

impl RdmaCq {
    /// The entries the device granted (at least those asked for).
    pub fn depth(&self) -> u32 {
        self.0.depth
    }
}

/// A shared receive queue's object.
#[derive(Debug)]
struct SrqInner {
    srq: NonNull<ffi::IbvSrq>,
    depth: u32,
    ctx: Arc<Ctx>,
}

impl Drop for SrqInner {
    fn drop(&mut self) {
        // SAFETY: the queue was created in the protection domain `ctx` keeps alive and is
        // destroyed once, after every queue pair using it (they hold this `SrqInner`).
        unsafe { ffi::amnet_ibv_destroy_srq(self.srq.as_ptr()) };
    }
}

// SAFETY: see `Ctx`.
unsafe impl Send for SrqInner {}
// SAFETY: as for `Send`.
unsafe impl Sync for SrqInner {}

/// A shared receive queue, destroyed when it and every queue pair using it are dropped.
#[derive(Debug)]
pub struct RdmaSrq(Arc<SrqInner>);

impl RdmaSrq {
    /// The depth asked for.
    pub fn depth(&self) -> u32 {
        self.0.depth
    }
}

/// An RC queue pair, destroyed when dropped.
#[derive(Debug)]
pub struct RdmaQp {
    qp: NonNull<ffi::IbvQp>,
    num: u32,
    /// Its first send PSN, sent to the peer in its address.
    psn: u32,
    /// Scatter/gather elements per send request.
    max_sge: u32,
    /// The peer's responder resources, from its address at `to_rtr`.
    peer_rd_atom: AtomicU8,
    _send_cq: Arc<CqInner>,
    _recv_cq: Arc<CqInner>,
    srq: Option<Arc<SrqInner>>,
}

impl QueuePair for RdmaQp {
    fn num(&self) -> u32 {
        self.num
    }
}

impl Drop for RdmaQp {
    fn drop(&mut self) {
        // SAFETY: the queue pair is destroyed once, before the queues it uses, which its
        // fields keep alive until after this.
        unsafe { ffi::amnet_ibv_destroy_qp(self.qp.as_ptr()) };
    }
}

// SAFETY: see `Ctx`; posting to one queue pair from several threads is serialized by the
// provider.
unsafe impl Send for RdmaQp {}
// SAFETY: as for `Send`.
unsafe impl Sync for RdmaQp {}

/// The shim's form of send request `wr`, or why it has none.
fn send_wr(wr: &SendWr<'_>, max_sge: u32) -> std::result::Result<ffi::SendWr, String> {
    if wr.sg.len() > max_sge as usize {
        return Err(format!(
            "{} scatter/gather elements; the queue pair takes at most {max_sge}",
            wr.sg.len()
        ));
    }
    let mut w = ffi::SendWr {
        wr_id: wr.wr_id,
        num_sge: u32_count(wr.sg.len()),
        ..ffi::SendWr::default()
    };
    for (d, s) in w.sg.iter_mut().zip(wr.sg) {
        *d = ffi::Sge {
            addr: s.addr,
            length: s.len,
            lkey: s.lkey,
        };
    }
    if wr.signaled {
        w.send_flags |= ffi::SEND_SIGNALED;
    }
    if wr.inline {
        w.send_flags |= ffi::SEND_INLINE;
    }
    if wr.fence {
        w.send_flags |= ffi::SEND_FENCE;
    }
    match wr.op {
        SendOp::Send => w.opcode = ffi::WR_SEND,
        SendOp::SendWithImm { imm } => {
            w.opcode = ffi::WR_SEND_WITH_IMM;
            w.imm_data = imm.to_be();
        }
        SendOp::RdmaWrite { remote_addr, rkey } => {
            w.opcode = ffi::WR_RDMA_WRITE;
            w.remote_addr = remote_addr;
            w.rkey = rkey;
        }
        SendOp::RdmaWriteWithImm {
            remote_addr,
            rkey,
            imm,
        } => {
            w.opcode = ffi::WR_RDMA_WRITE_WITH_IMM;
            w.remote_addr = remote_addr;
            w.rkey = rkey;
            w.imm_data = imm.to_be();
        }
        SendOp::RdmaRead { remote_addr, rkey } => {
            w.opcode = ffi::WR_RDMA_READ;
            w.remote_addr = remote_addr;
            w.rkey = rkey;
        }
        SendOp::FetchAdd {
            remote_addr,
            rkey,
            add,
        } => {
            w.opcode = ffi::WR_ATOMIC_FETCH_AND_ADD;
            w.remote_addr = remote_addr;
            w.rkey = rkey;
            w.compare_add = add;
        }
        SendOp::CompareSwap {
            remote_addr,
            rkey,
            compare,
            swap,
        } => {
            w.opcode = ffi::WR_ATOMIC_CMP_AND_SWP;
            w.remote_addr = remote_addr;
            w.rkey = rkey;
            w.compare_add = compare;
            w.swap = swap;
        }
    }
    Ok(w)
}

/// The trait's form of completion `w`.
fn completion(w: &ffi::Wc) -> Result<Wc> {
    let status = WcStatus::from_raw(w.status);
    let opcode = match WcOpcode::from_raw(w.opcode) {
        Some(op) => op,
        // An error completion's opcode is undefined.
        None if status != WcStatus::Success => WcOpcode::Send,
        None => {
            return Err(conduit_err(format!(
                "ibv_poll_cq: completion of work request {:#x} on queue pair {:#x} has \
                 opcode {}, which no request posted through this device produces",
                w.wr_id, w.qp_num, w.opcode
            )))
        }
    };
    Ok(Wc {
        wr_id: w.wr_id,
        status,
        opcode,
        byte_len: w.byte_len,
        imm: (w.wc_flags & ffi::WC_WITH_IMM != 0).then(|| u32::from_be(w.imm_data)),
        qp_num: w.qp_num,
    })
}

/// The error of a post call that stopped at request `at` of `n`.
fn post_err(call: &str, object: String, at: usize, n: usize, wr_id: u64, rc: c_int) -> Error {
    let full = if rc == libc::ENOMEM {
        " (the queue is full)"
    } else {
        ""
    };
    os_err(
        format!("{call} on {object}: request {at} of {n} (wr_id {wr_id:#x}) not posted{full}"),
        rc,
    )
}

/// Post receive requests `wrs` through `post` (a closure around the queue pair's or the
/// shared receive queue's shim call), in chunks the shim takes.
fn post_recvs(
    wrs: &[RecvWr],
    call: &str,
    object: impl Fn() -> String,
    post: impl Fn(u32, *const ffi::RecvWr, &mut u32) -> c_int,
) -> Result<()> {
    for (c, chunk) in wrs.chunks(ffi::POST_MAX).enumerate() {
        let mut buf = [ffi::RecvWr::default(); ffi::POST_MAX];
        for (d, w) in buf.iter_mut().zip(chunk) {
            *d = ffi::RecvWr {
                wr_id: w.wr_id,
                sge: ffi::Sge {
                    addr: w.sge.addr,
                    length: w.sge.len,
                    lkey: w.sge.lkey,
                },
            };
        }
        let mut bad = 0u32;
        let rc = post(u32_count(chunk.len()), buf.as_ptr(), &mut bad);
        if rc != 0 {
            let at = c * ffi::POST_MAX + (bad as usize).min(chunk.len() - 1);
            return Err(post_err(call, object(), at, wrs.len(), wrs[at].wr_id, rc));
        }
    }
    Ok(())
}

impl Verbs for RdmaDevice {
    type Mr = RdmaMr;
    type Cq = RdmaCq;
    type Srq = RdmaSrq;
    type Qp = RdmaQp;

    fn name(&self) -> &str {
        &self.name
    }

    fn caps(&self) -> DeviceCaps {
        self.caps
    }

    unsafe fn reg_mr(&self, addr: *mut u8, len: usize, access: Access) -> Result<RdmaMr> {
        let mut mr = ptr::null_mut();
        let (mut lkey, mut rkey) = (0u32, 0u32);
        // SAFETY: the protection domain is alive; the caller keeps `addr..addr + len` valid
        // as long as the region and its requests; the out-pointers are valid.
        let rc = unsafe {
            ffi::amnet_ibv_reg_mr(
                self.ctx.pd.as_ptr(),
                addr.cast(),
                len,
                access.0,
                &mut mr,
                &mut lkey,
                &mut rkey,
            )
        };
        match NonNull::new(mr) {
            Some(mr) if rc == 0 => Ok(RdmaMr {
                mr,
                lkey,
                rkey,
                addr: addr as u64,
                len,
                _ctx: Arc::clone(&self.ctx),
            }),
            _ => Err(os_err(
                format!(
                    "ibv_reg_mr of {len} bytes at {addr:p} with access {:#x} on {}{}",
                    access.0,
                    self.name,
                    if rc == libc::ENOMEM || rc == libc::EFAULT {
                        " (is the locked-memory limit, ulimit -l, large enough?)"
                    } else {
                        ""
                    }
                ),
                rc,
            )),
        }
    }

    fn create_cq(&self, depth: u32) -> Result<RdmaCq> {
        if depth > self.caps.max_cqe {
            return Err(conduit_err(format!(
                "ibv_create_cq on {}: {depth} entries asked, the device offers at most {}",
                self.name, self.caps.max_cqe
            )));
        }
        Ok(RdmaCq(Arc::new(CqInner::create(
            &self.ctx,
            &self.name,
            depth.max(1),
        )?)))
    }

    fn create_srq(&self, depth: u32) -> Result<RdmaSrq> {
        if depth > self.caps.max_srq_wr {
            return Err(conduit_err(format!(
                "ibv_create_srq on {}: {depth} entries asked, the device offers at most {}",
                self.name, self.caps.max_srq_wr
            )));
        }
        let mut srq = ptr::null_mut();
        // SAFETY: the protection domain is alive; the out-pointer is valid.
        let rc =
            unsafe { ffi::amnet_ibv_create_srq(self.ctx.pd.as_ptr(), depth.max(1), 1, &mut srq) };
        match NonNull::new(srq) {
            Some(srq) if rc == 0 => Ok(RdmaSrq(Arc::new(SrqInner {
                srq,
                depth,
                ctx: Arc::clone(&self.ctx),
            }))),
            _ => Err(os_err(
                format!("ibv_create_srq of {depth} entries on {}", self.name),
                rc,
            )),
        }
    }

    fn create_qp(
        &self,
        send_cq: &RdmaCq,
        recv_cq: &RdmaCq,
        srq: Option<&RdmaSrq>,
        init: &QpInit,
    ) -> Result<RdmaQp> {
        self.same_device(&send_cq.0.ctx, "send completion queue")?;
        self.same_device(&recv_cq.0.ctx, "receive completion queue")?;
        if let Some(s) = srq {
            self.same_device(&s.0.ctx, "shared receive queue")?;
        }
        if init.max_inline > self.caps.max_inline {
            return Err(conduit_err(format!(
                "ibv_create_qp on {}: {} inline bytes asked, the device offers at most {}",
                self.name, init.max_inline, self.caps.max_inline
            )));
        }
        let mut caps = ffi::QpCaps {
            max_send_wr: init.max_send_wr,
            max_recv_wr: init.max_recv_wr,
            max_send_sge: self.caps.max_sge.max(1),
            max_recv_sge: 1,
            max_inline_data: init.max_inline,
        };
        let mut qp = ptr::null_mut();
        let mut num = 0u32;
        // SAFETY: the protection domain and the queues are alive (the queues belong to this
        // device, checked above); the out-pointers are valid.
        let rc = unsafe {
            ffi::amnet_ibv_create_rc_qp(
                self.ctx.pd.as_ptr(),
                send_cq.0.cq.as_ptr(),
                recv_cq.0.cq.as_ptr(),
                srq.map_or(ptr::null_mut(), |s| s.0.srq.as_ptr()),
                &mut caps,
                &mut qp,
                &mut num,
            )
        };
        let Some(qp) = NonNull::new(qp).filter(|_| rc == 0) else {
            return Err(os_err(
                format!(
                    "ibv_create_qp (RC, {} send and {} receive requests, {} inline bytes{}) \
                     on {}",
                    init.max_send_wr,
                    init.max_recv_wr,
                    init.max_inline,
                    if srq.is_some() {
                        ", shared receive queue"
                    } else {
                        ""
                    },
                    self.name
                ),
                rc,
            ));
        };
        Ok(RdmaQp {
            qp,
            num,
            psn: random_psn(),
            max_sge: caps.max_send_sge.min(u32_count(ffi::MAX_SGE)),
            peer_rd_atom: AtomicU8::new(0),
            _send_cq: Arc::clone(&send_cq.0),
            _recv_cq: Arc::clone(&recv_cq.0),
            srq: srq.map(|s| Arc::clone(&s.0)),
        })
    }

    fn address(&self, qp: &RdmaQp) -> Vec<u8> {
        QpAddr {
            lid: self.lid,
            gid: self.gid,
            qpn: qp.num,
            psn: qp.psn,
            port: self.port,
            mtu: self.mtu,
            rd_atom: self.rd_atom,
        }
        .encode()
    }

    fn to_init(&self, qp: &RdmaQp) -> Result<()> {
        let mut access = Access::REMOTE_WRITE | Access::REMOTE_READ;
        if self.caps.atomics {
            access = access | Access::REMOTE_ATOMIC;
        }
        // SAFETY: the queue pair is alive.
        let rc = unsafe { ffi::amnet_ibv_qp_to_init(qp.qp.as_ptr(), self.port, access.0) };
        if rc != 0 {
            return Err(os_err(
                format!(
                    "ibv_modify_qp to INIT: queue pair {:#x} on {} port {}",
                    qp.num, self.name, self.port
                ),
                rc,
            ));
        }
        Ok(())
    }

    fn to_rtr(&self, qp: &RdmaQp, remote: &[u8], attr: &ConnectAttr) -> Result<()> {
        let peer = QpAddr::decode(remote)
            .map_err(|e| conduit_err(format!("to_rtr of queue pair {:#x}: {e}", qp.num)))?;
        if attr.min_rnr_timer > 31 {
            return Err(conduit_err(format!(
                "to_rtr of queue pair {:#x}: min_rnr_timer {} is not 0 to 31",
                qp.num, attr.min_rnr_timer
            )));
        }
        let global = self.ethernet || peer.lid == 0;
        let rtr = ffi::Rtr {
            dgid: peer.gid,
            dest_qpn: peer.qpn,
            rq_psn: peer.psn,
            dlid: peer.lid,
            port: self.port,
            path_mtu: self.mtu.min(peer.mtu),
            is_global: u8::from(global),
            sgid_index: GID_INDEX,
            hop_limit: HOP_LIMIT,
            max_dest_rd_atomic: self.rd_atom,
            min_rnr_timer: attr.min_rnr_timer,
            reserved: [0; 3],
        };
        // SAFETY: the queue pair is alive; `rtr` is a valid struct for the call.
        let rc = unsafe { ffi::amnet_ibv_qp_to_rtr(qp.qp.as_ptr(), &rtr) };
        if rc != 0 {
            return Err(os_err(
                format!(
                    "ibv_modify_qp to RTR: queue pair {:#x} on {} port {} to queue pair {:#x} \
                     at {} (MTU code {})",
                    qp.num,
                    self.name,
                    self.port,
                    peer.qpn,
                    if global {
                        format!("GID {}", gid_text(&peer.gid))
                    } else {
                        format!("LID {:#x}", peer.lid)
                    },
                    rtr.path_mtu
                ),
                rc,
            ));
        }
        qp.peer_rd_atom.store(peer.rd_atom, Ordering::Release);
        Ok(())
    }

    fn to_rts(&self, qp: &RdmaQp, attr: &ConnectAttr) -> Result<()> {
        if attr.rnr_retry > 7 || attr.retry_cnt > 7 || attr.timeout > 31 {
            return Err(conduit_err(format!(
                "to_rts of queue pair {:#x}: rnr_retry {} and retry_cnt {} must be 0 to 7, \
                 timeout {} 0 to 31",
                qp.num, attr.rnr_retry, attr.retry_cnt, attr.timeout
            )));
        }
        let rd = self
            .init_rd_atom
            .min(qp.peer_rd_atom.load(Ordering::Acquire));
        // SAFETY: the queue pair is alive.
        let rc = unsafe {
            ffi::amnet_ibv_qp_to_rts(
                qp.qp.as_ptr(),
                qp.psn,
                attr.timeout,
                attr.retry_cnt,
                attr.rnr_retry,
                rd,
            )
        };
        if rc != 0 {
            return Err(os_err(
                format!(
                    "ibv_modify_qp to RTS: queue pair {:#x} on {}",
                    qp.num, self.name
                ),
                rc,
            ));
        }
        Ok(())
    }

    fn to_err(&self, qp: &RdmaQp) -> Result<()> {
        // SAFETY: the queue pair is alive.
        let rc = unsafe { ffi::amnet_ibv_qp_to_err(qp.qp.as_ptr()) };
        if rc != 0 {
            return Err(os_err(
                format!(
                    "ibv_modify_qp to ERR: queue pair {:#x} on {}",
                    qp.num, self.name
                ),
                rc,
            ));
        }
        Ok(())
    }

    /// The state `ibv_query_qp` reports; `Err` also where the query fails. SQD (draining)
    /// reads as `Rts`, SQE as `Err`.
    fn state(&self, qp: &RdmaQp) -> QpState {
        let mut s = u32::MAX;
        // SAFETY: the queue pair is alive; `s` is valid for writes.
        let rc = unsafe { ffi::amnet_ibv_qp_state(qp.qp.as_ptr(), &mut s) };
        if rc != 0 {
            return QpState::Err;
        }
        match s {
            ffi::QPS_RESET => QpState::Reset,
            ffi::QPS_INIT => QpState::Init,
            ffi::QPS_RTR => QpState::Rtr,
            ffi::QPS_RTS | ffi::QPS_SQD => QpState::Rts,
            ffi::QPS_SQE | ffi::QPS_ERR => QpState::Err,
            _ => QpState::Err,
        }
    }

    unsafe fn post_send(&self, qp: &RdmaQp, wrs: &[SendWr<'_>]) -> Result<()> {
        let mut done = 0;
        while done < wrs.len() {
            let mut buf = [const { MaybeUninit::<ffi::SendWr>::uninit() }; ffi::POST_MAX];
            let mut n = 0;
            let mut invalid = None;
            for wr in &wrs[done..] {
                if n == ffi::POST_MAX {
                    break;
                }
                match send_wr(wr, qp.max_sge) {
                    Ok(w) => {
                        buf[n].write(w);
                        n += 1;
                    }
                    Err(why) => {
                        invalid = Some(why);
                        break;
                    }
                }
            }
            if n > 0 {
                let mut bad = 0u32;
                // SAFETY: the queue pair is alive; the first `n` entries of `buf` are
                // written; the caller keeps every non-inline element's memory valid until
                // its completion.
                let rc = unsafe {
                    ffi::amnet_ibv_post_send(
                        qp.qp.as_ptr(),
                        u32_count(n),
                        buf.as_ptr().cast::<ffi::SendWr>(),
                        &mut bad,
                    )
                };
                if rc != 0 {
                    let at = done + (bad as usize).min(n - 1);
                    return Err(post_err(
                        "ibv_post_send",
                        format!("queue pair {:#x}", qp.num),
                        at,
                        wrs.len(),
                        wrs[at].wr_id,
                        rc,
                    ));
                }
            }
            done += n;
            if let Some(why) = invalid {
                return Err(conduit_err(format!(
                    "ibv_post_send on queue pair {:#x}: request {done} of {} (wr_id {:#x}) not \
                     posted: {why}",
                    qp.num,
                    wrs.len(),
                    wrs[done].wr_id
                )));
            }
        }
        Ok(())
    }

    unsafe fn post_recv(&self, qp: &RdmaQp, wrs: &[RecvWr]) -> Result<()> {
        if qp.srq.is_some() {
            return Err(conduit_err(format!(
                "ibv_post_recv on queue pair {:#x}: it takes its receives from a shared \
                 receive queue (post_srq_recv)",
                qp.num
            )));
        }
        post_recvs(
            wrs,
            "ibv_post_recv",
            || format!("queue pair {:#x}", qp.num),
            |n, p, bad| {
                // SAFETY: the queue pair is alive; `p` points to `n` written requests; the
                // caller of `post_recv` keeps each buffer valid until its completion.
                unsafe { ffi::amnet_ibv_post_recv(qp.qp.as_ptr(), n, p, bad) }
            },
        )
    }

    unsafe fn post_srq_recv(&self, srq: &RdmaSrq, wrs: &[RecvWr]) -> Result<()> {
        post_recvs(
            wrs,
            "ibv_post_srq_recv",
            || format!("the shared receive queue of {}", self.name),
            |n, p, bad| {
                // SAFETY: the queue is alive; `p` points to `n` written requests; the caller
                // of `post_srq_recv` keeps each buffer valid until its completion.
                unsafe { ffi::amnet_ibv_post_srq_recv(srq.0.srq.as_ptr(), n, p, bad) }
            },
        )
    }

    fn poll_cq(&self, cq: &RdmaCq, out: &mut [Wc]) -> Result<usize> {
        let mut filled = 0;
        while filled < out.len() {
            let want = (out.len() - filled).min(ffi::POLL_MAX);
            let mut buf = [const { MaybeUninit::<ffi::Wc>::uninit() }; ffi::POLL_MAX];
            // SAFETY: the completion queue is alive; `buf` has room for `want` entries.
            let r = unsafe {
                ffi::amnet_ibv_poll_cq(
                    cq.0.cq.as_ptr(),
                    c_count(want),
                    buf.as_mut_ptr().cast::<ffi::Wc>(),
                )
            };
            if r < 0 {
                if filled > 0 {
                    break;
                }
                return Err(conduit_err(format!(
                    "ibv_poll_cq on the completion queue of {} failed ({r})",
                    self.name
                )));
            }
            let got = usize::try_from(r).unwrap_or(0).min(want);
            for (o, b) in out[filled..].iter_mut().zip(&buf[..got]) {
                // SAFETY: the shim wrote the first `got` entries.
                *o = completion(unsafe { b.assume_init_ref() })?;
            }
            filled += got;
            if got < want {
                break;
            }
        }
        Ok(filled)
    }
}

/// A GID as IPv6-style text.
fn gid_text(gid: &[u8; 16]) -> String {
    gid.chunks(2)
        .map(|c| format!("{:02x}{:02x}", c[0], c[1]))
        .collect::<Vec<_>>()
        .join(":")
}
