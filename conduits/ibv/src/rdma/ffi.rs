//! The bindings to `shim.c`, which build.rs compiles against the installed libibverbs: opaque
//! handles, the shim's small structs (mirrored here with `#[repr(C)]` and checked against the
//! sizes and offsets the shim exports, in `tests::abi_matches_the_shim`), and libibverbs'
//! numeric values that Rust writes or compares (kernel ABI values, checked against the shim's
//! copies by the same test).

use std::ffi::{c_char, c_int, c_void};

/// Scatter/gather elements one send request may carry through the shim
/// (`IBV_SHIM_MAX_SGE`).
pub(crate) const MAX_SGE: usize = 4;
/// Work requests Rust hands the shim in one call (`IBV_SHIM_POST_MAX`).
pub(crate) const POST_MAX: usize = 16;
/// Completions Rust asks the shim for in one call (`IBV_SHIM_POLL_MAX`).
pub(crate) const POLL_MAX: usize = 32;

/// Opaque `struct ibv_device`.
#[repr(C)]
pub(crate) struct IbvDevice {
    _private: [u8; 0],
}

/// Opaque `struct ibv_context`.
#[repr(C)]
pub(crate) struct IbvContext {
    _private: [u8; 0],
}

/// Opaque `struct ibv_pd`.
#[repr(C)]
pub(crate) struct IbvPd {
    _private: [u8; 0],
}

/// Opaque `struct ibv_mr`.
#[repr(C)]
pub(crate) struct IbvMr {
    _private: [u8; 0],
}

/// Opaque `struct ibv_cq`.
#[repr(C)]
pub(crate) struct IbvCq {
    _private: [u8; 0],
}

/// Opaque `struct ibv_srq`.
#[repr(C)]
pub(crate) struct IbvSrq {
    _private: [u8; 0],
}

/// Opaque `struct ibv_qp`.
#[repr(C)]
pub(crate) struct IbvQp {
    _private: [u8; 0],
}

/// `struct amnet_ibv_sge`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Sge {
    pub(crate) addr: u64,
    pub(crate) length: u32,
    pub(crate) lkey: u32,
}

/// `struct amnet_ibv_swr`: one send work request.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct SendWr {
    pub(crate) wr_id: u64,
    pub(crate) remote_addr: u64,
    pub(crate) compare_add: u64,
    pub(crate) swap: u64,
    pub(crate) rkey: u32,
    /// Network byte order.
    pub(crate) imm_data: u32,
    /// An `IBV_WR_*` value.
    pub(crate) opcode: u32,
    /// `IBV_SEND_*` flags.
    pub(crate) send_flags: u32,
    pub(crate) num_sge: u32,
    pub(crate) reserved: u32,
    pub(crate) sg: [Sge; MAX_SGE],
}

/// `struct amnet_ibv_rwr`: one receive work request.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct RecvWr {
    pub(crate) wr_id: u64,
    pub(crate) sge: Sge,
}

/// `struct amnet_ibv_wc`: one completion.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Wc {
    pub(crate) wr_id: u64,
    pub(crate) status: u32,
    pub(crate) opcode: u32,
    pub(crate) byte_len: u32,
    /// Network byte order; meaningful when `wc_flags` has [`WC_WITH_IMM`].
    pub(crate) imm_data: u32,
    pub(crate) qp_num: u32,
    pub(crate) wc_flags: u32,
    pub(crate) vendor_err: u32,
    pub(crate) reserved: u32,
}

/// `struct amnet_ibv_device_info`: what is read of `ibv_device_attr`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct DeviceInfo {
    pub(crate) max_mr_size: u64,
    pub(crate) max_qp_wr: u32,
    pub(crate) max_sge: u32,
    pub(crate) max_cqe: u32,
    pub(crate) max_srq_wr: u32,
    pub(crate) max_srq_sge: u32,
    pub(crate) atomic_cap: u32,
    pub(crate) max_qp_rd_atom: u32,
    pub(crate) max_qp_init_rd_atom: u32,
    pub(crate) phys_port_cnt: u32,
    pub(crate) reserved: u32,
}

/// `struct amnet_ibv_port_info`: what is read of `ibv_port_attr`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct PortInfo {
    pub(crate) state: u32,
    pub(crate) active_mtu: u32,
    pub(crate) max_msg_sz: u32,
    pub(crate) gid_tbl_len: u32,
    pub(crate) lid: u16,
    pub(crate) link_layer: u8,
    pub(crate) reserved: u8,
}

/// `struct amnet_ibv_qp_caps`: a queue pair's capacities, asked for and granted.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct QpCaps {
    pub(crate) max_send_wr: u32,
    pub(crate) max_recv_wr: u32,
    pub(crate) max_send_sge: u32,
    pub(crate) max_recv_sge: u32,
    pub(crate) max_inline_data: u32,
}

/// `struct amnet_ibv_rtr`: the INIT → RTR attributes.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Rtr {
    pub(crate) dgid: [u8; 16],
    pub(crate) dest_qpn: u32,
    pub(crate) rq_psn: u32,
    pub(crate) dlid: u16,
    pub(crate) port: u8,
    pub(crate) path_mtu: u8,
    pub(crate) is_global: u8,
    pub(crate) sgid_index: u8,
    pub(crate) hop_limit: u8,
    pub(crate) max_dest_rd_atomic: u8,
    pub(crate) min_rnr_timer: u8,
    pub(crate) reserved: [u8; 3],
}

// `enum ibv_wr_opcode`.
pub(crate) const WR_RDMA_WRITE: u32 = 0;
pub(crate) const WR_RDMA_WRITE_WITH_IMM: u32 = 1;
pub(crate) const WR_SEND: u32 = 2;
pub(crate) const WR_SEND_WITH_IMM: u32 = 3;
pub(crate) const WR_RDMA_READ: u32 = 4;
pub(crate) const WR_ATOMIC_CMP_AND_SWP: u32 = 5;
pub(crate) const WR_ATOMIC_FETCH_AND_ADD: u32 = 6;
// `enum ibv_send_flags`.
pub(crate) const SEND_FENCE: u32 = 1;
pub(crate) const SEND_SIGNALED: u32 = 2;
pub(crate) const SEND_INLINE: u32 = 8;
/// `IBV_WC_WITH_IMM` of `enum ibv_wc_flags`.
pub(crate) const WC_WITH_IMM: u32 = 2;
// `enum ibv_qp_state`.
pub(crate) const QPS_RESET: u32 = 0;
pub(crate) const QPS_INIT: u32 = 1;
pub(crate) const QPS_RTR: u32 = 2;
pub(crate) const QPS_RTS: u32 = 3;
pub(crate) const QPS_SQD: u32 = 4;
pub(crate) const QPS_SQE: u32 = 5;
pub(crate) const QPS_ERR: u32 = 6;
/// `IBV_PORT_ACTIVE`.
pub(crate) const PORT_ACTIVE: u32 = 4;
/// `IBV_LINK_LAYER_ETHERNET` (RoCE).
pub(crate) const LINK_LAYER_ETHERNET: u8 = 2;
/// `IBV_ATOMIC_NONE`.
pub(crate) const ATOMIC_NONE: u32 = 0;

extern "C" {
    pub(crate) fn amnet_ibv_get_devices(list: *mut *mut *mut IbvDevice, num: *mut c_int) -> c_int;
    pub(crate) fn amnet_ibv_device_name(list: *const *mut IbvDevice, i: c_int) -> *const c_char;
    pub(crate) fn amnet_ibv_free_devices(list: *mut *mut IbvDevice);
    pub(crate) fn amnet_ibv_open(
        list: *const *mut IbvDevice,
        i: c_int,
        ctx: *mut *mut IbvContext,
    ) -> c_int;
    pub(crate) fn amnet_ibv_close(ctx: *mut IbvContext) -> c_int;
    pub(crate) fn amnet_ibv_query_device(ctx: *mut IbvContext, out: *mut DeviceInfo) -> c_int;
    pub(crate) fn amnet_ibv_query_port(ctx: *mut IbvContext, port: u8, out: *mut PortInfo)
        -> c_int;
    pub(crate) fn amnet_ibv_query_gid(
        ctx: *mut IbvContext,
        port: u8,
        index: c_int,
        gid: *mut [u8; 16],
    ) -> c_int;
    pub(crate) fn amnet_ibv_alloc_pd(ctx: *mut IbvContext, pd: *mut *mut IbvPd) -> c_int;
    pub(crate) fn amnet_ibv_dealloc_pd(pd: *mut IbvPd) -> c_int;
    pub(crate) fn amnet_ibv_reg_mr(
        pd: *mut IbvPd,
        addr: *mut c_void,
        len: usize,
        access: u32,
        mr: *mut *mut IbvMr,
        lkey: *mut u32,
        rkey: *mut u32,
    ) -> c_int;
    pub(crate) fn amnet_ibv_dereg_mr(mr: *mut IbvMr) -> c_int;
    pub(crate) fn amnet_ibv_create_cq(
        ctx: *mut IbvContext,
        cqe: c_int,
        cq: *mut *mut IbvCq,
        got: *mut c_int,
    ) -> c_int;
    pub(crate) fn amnet_ibv_destroy_cq(cq: *mut IbvCq) -> c_int;
    pub(crate) fn amnet_ibv_create_srq(
        pd: *mut IbvPd,
        max_wr: u32,
        max_sge: u32,
        srq: *mut *mut IbvSrq,
    ) -> c_int;
    pub(crate) fn amnet_ibv_destroy_srq(srq: *mut IbvSrq) -> c_int;
    pub(crate) fn amnet_ibv_create_rc_qp(
        pd: *mut IbvPd,
        send_cq: *mut IbvCq,
        recv_cq: *mut IbvCq,
        srq: *mut IbvSrq,
        caps: *mut QpCaps,
        qp: *mut *mut IbvQp,
        qp_num: *mut u32,
    ) -> c_int;
    pub(crate) fn amnet_ibv_destroy_qp(qp: *mut IbvQp) -> c_int;
    pub(crate) fn amnet_ibv_qp_to_init(qp: *mut IbvQp, port: u8, access: u32) -> c_int;
    pub(crate) fn amnet_ibv_qp_to_rtr(qp: *mut IbvQp, rtr: *const Rtr) -> c_int;
    pub(crate) fn amnet_ibv_qp_to_rts(
        qp: *mut IbvQp,
        sq_psn: u32,
        timeout: u8,
        retry_cnt: u8,
        rnr_retry: u8,
        max_rd_atomic: u8,
    ) -> c_int;
    pub(crate) fn amnet_ibv_qp_to_err(qp: *mut IbvQp) -> c_int;
    pub(crate) fn amnet_ibv_qp_state(qp: *mut IbvQp, state: *mut u32) -> c_int;
    pub(crate) fn amnet_ibv_post_send(
        qp: *mut IbvQp,
        n: u32,
        wrs: *const SendWr,
        bad: *mut u32,
    ) -> c_int;
    pub(crate) fn amnet_ibv_post_recv(
        qp: *mut IbvQp,
        n: u32,
        wrs: *const RecvWr,
        bad: *mut u32,
    ) -> c_int;
    pub(crate) fn amnet_ibv_post_srq_recv(
        srq: *mut IbvSrq,
        n: u32,
        wrs: *const RecvWr,
        bad: *mut u32,
    ) -> c_int;
    pub(crate) fn amnet_ibv_poll_cq(cq: *mut IbvCq, n: c_int, out: *mut Wc) -> c_int;
}

/// The layout and values the shim was compiled with, for the test that checks this file.
#[cfg(test)]
pub(crate) mod abi {
    extern "C" {
        pub(crate) static amnet_ibv_sizeof_sge: usize;
        pub(crate) static amnet_ibv_sizeof_swr: usize;
        pub(crate) static amnet_ibv_offsetof_swr_rkey: usize;
        pub(crate) static amnet_ibv_offsetof_swr_num_sge: usize;
        pub(crate) static amnet_ibv_offsetof_swr_sg: usize;
        pub(crate) static amnet_ibv_sizeof_rwr: usize;
        pub(crate) static amnet_ibv_sizeof_wc: usize;
        pub(crate) static amnet_ibv_offsetof_wc_imm_data: usize;
        pub(crate) static amnet_ibv_offsetof_wc_vendor_err: usize;
        pub(crate) static amnet_ibv_sizeof_device_info: usize;
        pub(crate) static amnet_ibv_offsetof_device_info_phys_port_cnt: usize;
        pub(crate) static amnet_ibv_sizeof_port_info: usize;
        pub(crate) static amnet_ibv_offsetof_port_info_lid: usize;
        pub(crate) static amnet_ibv_sizeof_qp_caps: usize;
        pub(crate) static amnet_ibv_sizeof_rtr: usize;
        pub(crate) static amnet_ibv_offsetof_rtr_dlid: usize;
        pub(crate) static amnet_ibv_offsetof_rtr_min_rnr_timer: usize;
        pub(crate) static amnet_ibv_max_sge: u32;
        pub(crate) static amnet_ibv_post_max: u32;
        pub(crate) static amnet_ibv_poll_max: u32;
        pub(crate) static amnet_ibv_wr_values: [u32; 7];
        pub(crate) static amnet_ibv_send_flag_values: [u32; 3];
        pub(crate) static amnet_ibv_access_values: [u32; 4];
        pub(crate) static amnet_ibv_wc_with_imm: u32;
        pub(crate) static amnet_ibv_wc_opcode_values: [u32; 7];
        pub(crate) static amnet_ibv_wc_status_values: [u32; 10];
        pub(crate) static amnet_ibv_qp_state_values: [u32; 7];
        pub(crate) static amnet_ibv_port_active: u32;
        pub(crate) static amnet_ibv_link_layer_ethernet: u32;
        pub(crate) static amnet_ibv_atomic_none: u32;
    }
}
