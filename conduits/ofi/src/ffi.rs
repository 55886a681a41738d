//! The conduit's bindings to libfabric, through `shim.c` (which build.rs compiles against the
//! installed headers): the wrappers of libfabric's inline calls and the constants, read from
//! the C side so that no value is written twice. `tests::layouts_match_the_header` checks the
//! one struct Rust lays out itself.

use std::ffi::{c_char, c_int, c_void, CStr};

/// libfabric's `fi_addr_t`.
pub(crate) type FiAddr = u64;

/// Opaque `struct fi_info`.
#[repr(C)]
pub(crate) struct FiInfo {
    _private: [u8; 0],
}

/// Opaque `struct fid_mr`.
#[repr(C)]
pub(crate) struct FidMr {
    _private: [u8; 0],
}

/// `struct amnet_ofi_ep` of shim.c: the open objects of one endpoint (fabric, domain, address
/// vector, completion queue, endpoint).
#[repr(C)]
#[derive(Debug)]
pub(crate) struct RawEp {
    fabric: *mut c_void,
    domain: *mut c_void,
    av: *mut c_void,
    cq: *mut c_void,
    ep: *mut c_void,
}

impl RawEp {
    /// All null: nothing open yet.
    pub(crate) const fn empty() -> RawEp {
        RawEp {
            fabric: std::ptr::null_mut(),
            domain: std::ptr::null_mut(),
            av: std::ptr::null_mut(),
            cq: std::ptr::null_mut(),
            ep: std::ptr::null_mut(),
        }
    }
}

/// `struct amnet_ofi_desc` of shim.c: what the conduit reads of one `fi_info` answer.
#[repr(C)]
#[derive(Clone)]
pub(crate) struct Desc {
    pub(crate) caps: u64,
    pub(crate) mode: u64,
    pub(crate) mem_tag_format: u64,
    pub(crate) mr_mode: u64,
    pub(crate) max_msg_size: u64,
    pub(crate) inject_size: u64,
    pub(crate) cq_data_size: u64,
    pub(crate) max_order_raw_size: u64,
    /// 1 when the provider's addresses are socket addresses (tcp, udp, sockets).
    pub(crate) sockaddr: u64,
    prov_name: [c_char; 64],
    fabric_name: [c_char; 64],
    domain_name: [c_char; 64],
}

fn name_of(b: &[c_char; 64]) -> String {
    let bytes: Vec<u8> = b
        .iter()
        .take_while(|&&c| c != 0)
        .map(|&c| c.to_ne_bytes()[0])
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

impl Desc {
    /// All zero, for `amnet_ofi_describe` to fill.
    pub(crate) const fn zeroed() -> Desc {
        Desc {
            caps: 0,
            mode: 0,
            mem_tag_format: 0,
            mr_mode: 0,
            max_msg_size: 0,
            inject_size: 0,
            cq_data_size: 0,
            max_order_raw_size: 0,
            sockaddr: 0,
            prov_name: [0; 64],
            fabric_name: [0; 64],
            domain_name: [0; 64],
        }
    }
    /// The provider's name ("tcp;ofi_rxm", "shm", ...).
    pub(crate) fn prov_name(&self) -> String {
        name_of(&self.prov_name)
    }
    /// The fabric's name.
    pub(crate) fn fabric_name(&self) -> String {
        name_of(&self.fabric_name)
    }
    /// The domain's name.
    pub(crate) fn domain_name(&self) -> String {
        name_of(&self.domain_name)
    }
}

/// `struct fi_cq_tagged_entry`: one completion as `fi_cq_read` writes it.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub(crate) struct CqEntry {
    pub(crate) op_context: *mut c_void,
    pub(crate) flags: u64,
    pub(crate) len: usize,
    pub(crate) buf: *mut c_void,
    pub(crate) data: u64,
    pub(crate) tag: u64,
}

/// `struct fi_context`: four pointers the provider owns while an operation is in flight.
#[repr(C)]
#[derive(Debug)]
pub struct FiContext {
    _internal: [*mut c_void; 4],
}

impl Default for FiContext {
    fn default() -> Self {
        FiContext::new()
    }
}

impl FiContext {
    /// Zeroed.
    pub const fn new() -> FiContext {
        FiContext {
            _internal: [std::ptr::null_mut(); 4],
        }
    }
}

#[allow(non_upper_case_globals)]
extern "C" {
    static amnet_ofi_FI_RMA: u64;
    static amnet_ofi_FI_TAGGED: u64;
    static amnet_ofi_FI_READ: u64;
    static amnet_ofi_FI_WRITE: u64;
    static amnet_ofi_FI_REMOTE_READ: u64;
    static amnet_ofi_FI_REMOTE_WRITE: u64;
    static amnet_ofi_FI_REMOTE_CQ_DATA: u64;
    static amnet_ofi_FI_DIRECTED_RECV: u64;
    static amnet_ofi_FI_MR_VIRT_ADDR: u64;
    static amnet_ofi_FI_DELIVERY_COMPLETE: u64;
    static amnet_ofi_FI_EAGAIN: c_int;
    static amnet_ofi_FI_EAVAIL: c_int;
    static amnet_ofi_FI_ENODATA: c_int;

    pub(crate) fn amnet_ofi_getinfo(
        caps: u64,
        prov_name: *const c_char,
        node: *const c_char,
        service: *const c_char,
        out: *mut *mut FiInfo,
    ) -> c_int;
    pub(crate) fn amnet_ofi_freeinfo(info: *mut FiInfo);
    pub(crate) fn amnet_ofi_info_next(info: *const FiInfo) -> *mut FiInfo;
    pub(crate) fn amnet_ofi_describe(info: *const FiInfo, d: *mut Desc);
    pub(crate) fn amnet_ofi_open(
        info: *mut FiInfo,
        e: *mut RawEp,
        name: *const c_char,
        step: *mut *const c_char,
    ) -> c_int;
    pub(crate) fn amnet_ofi_unlink_at_exit(name: *const c_char) -> c_int;
    pub(crate) fn amnet_ofi_close(e: *mut RawEp);
    pub(crate) fn amnet_ofi_getname(e: *mut RawEp, addr: *mut c_void, len: *mut usize) -> c_int;
    pub(crate) fn amnet_ofi_av_insert(
        e: *mut RawEp,
        addrs: *const c_void,
        count: usize,
        out: *mut FiAddr,
    ) -> c_int;
    pub(crate) fn amnet_ofi_tsend(
        e: *mut RawEp,
        buf: *const c_void,
        len: usize,
        desc: *mut c_void,
        dest: FiAddr,
        tag: u64,
        ctx: *mut c_void,
    ) -> isize;
    pub(crate) fn amnet_ofi_tsenddata(
        e: *mut RawEp,
        buf: *const c_void,
        len: usize,
        desc: *mut c_void,
        data: u64,
        dest: FiAddr,
        tag: u64,
        ctx: *mut c_void,
    ) -> isize;
    pub(crate) fn amnet_ofi_tinject(
        e: *mut RawEp,
        buf: *const c_void,
        len: usize,
        dest: FiAddr,
        tag: u64,
    ) -> isize;
    pub(crate) fn amnet_ofi_tinjectdata(
        e: *mut RawEp,
        buf: *const c_void,
        len: usize,
        data: u64,
        dest: FiAddr,
        tag: u64,
    ) -> isize;
    pub(crate) fn amnet_ofi_trecv(
        e: *mut RawEp,
        buf: *mut c_void,
        len: usize,
        desc: *mut c_void,
        src: FiAddr,
        tag: u64,
        ignore: u64,
        ctx: *mut c_void,
    ) -> isize;
    pub(crate) fn amnet_ofi_cq_read(e: *mut RawEp, entries: *mut CqEntry, count: usize) -> isize;
    pub(crate) fn amnet_ofi_cq_readerr(
        e: *mut RawEp,
        ctx: *mut *mut c_void,
        err: *mut c_int,
        msg: *mut c_char,
        msg_len: usize,
    ) -> c_int;
    pub(crate) fn amnet_ofi_mr_reg(
        e: *mut RawEp,
        buf: *mut c_void,
        len: usize,
        key: u64,
        mr: *mut *mut FidMr,
        mr_mode: u64,
    ) -> c_int;
    pub(crate) fn amnet_ofi_mr_key(mr: *mut FidMr) -> u64;
    pub(crate) fn amnet_ofi_mr_close(mr: *mut FidMr);
    pub(crate) fn amnet_ofi_write(
        e: *mut RawEp,
        buf: *const c_void,
        len: usize,
        dest: FiAddr,
        addr: u64,
        key: u64,
        ctx: *mut c_void,
        data: u64,
        flags: u64,
    ) -> isize;
    pub(crate) fn amnet_ofi_read(
        e: *mut RawEp,
        buf: *mut c_void,
        len: usize,
        desc: *mut c_void,
        src: FiAddr,
        addr: u64,
        key: u64,
        ctx: *mut c_void,
    ) -> isize;
    fn amnet_ofi_strerror(err: c_int) -> *const c_char;
}

/// Reads one of shim.c's constants.
macro_rules! consts {
    ($($(#[$doc:meta])* $name:ident: $t:ty = $sym:ident;)*) => {
        $(
            $(#[$doc])*
            #[inline]
            #[allow(non_snake_case)]
            pub(crate) fn $name() -> $t {
                // SAFETY: a `const` object of shim.c, initialized before main and never
                // written.
                unsafe { $sym }
            }
        )*
    };
}

consts! {
    /// `FI_RMA`.
    FI_RMA: u64 = amnet_ofi_FI_RMA;
    /// `FI_TAGGED`.
    FI_TAGGED: u64 = amnet_ofi_FI_TAGGED;
    /// `FI_READ`.
    FI_READ: u64 = amnet_ofi_FI_READ;
    /// `FI_WRITE`.
    FI_WRITE: u64 = amnet_ofi_FI_WRITE;
    /// `FI_REMOTE_READ`.
    FI_REMOTE_READ: u64 = amnet_ofi_FI_REMOTE_READ;
    /// `FI_REMOTE_WRITE`.
    FI_REMOTE_WRITE: u64 = amnet_ofi_FI_REMOTE_WRITE;
    /// `FI_REMOTE_CQ_DATA`.
    FI_REMOTE_CQ_DATA: u64 = amnet_ofi_FI_REMOTE_CQ_DATA;
    /// `FI_DIRECTED_RECV`.
    FI_DIRECTED_RECV: u64 = amnet_ofi_FI_DIRECTED_RECV;
    /// `FI_MR_VIRT_ADDR`.
    FI_MR_VIRT_ADDR: u64 = amnet_ofi_FI_MR_VIRT_ADDR;
    /// `FI_DELIVERY_COMPLETE`.
    FI_DELIVERY_COMPLETE: u64 = amnet_ofi_FI_DELIVERY_COMPLETE;
    /// `FI_EAGAIN` (calls return its negation).
    FI_EAGAIN: c_int = amnet_ofi_FI_EAGAIN;
    /// `FI_EAVAIL`.
    FI_EAVAIL: c_int = amnet_ofi_FI_EAVAIL;
    /// `FI_ENODATA`.
    FI_ENODATA: c_int = amnet_ofi_FI_ENODATA;
}

/// libfabric's description of the error code `err` (positive or negative).
pub(crate) fn strerror(err: i64) -> String {
    let code = c_int::try_from(err.unsigned_abs()).unwrap_or(c_int::MAX);
    // SAFETY: fi_strerror returns a pointer to a static NUL-terminated string for any code.
    let s = unsafe { amnet_ofi_strerror(code) };
    if s.is_null() {
        return format!("error {code}");
    }
    // SAFETY: non-null, NUL-terminated and static (above).
    unsafe { CStr::from_ptr(s) }.to_string_lossy().into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    extern "C" {
        static amnet_ofi_cq_entry_size: usize;
        static amnet_ofi_cq_entry_data_offset: usize;
        static amnet_ofi_cq_entry_tag_offset: usize;
        static amnet_ofi_context_size: usize;
    }

    #[test]
    fn layouts_match_the_header() {
        // SAFETY: constants of shim.c (see `consts!`).
        let (size, data, tag, ctx) = unsafe {
            (
                amnet_ofi_cq_entry_size,
                amnet_ofi_cq_entry_data_offset,
                amnet_ofi_cq_entry_tag_offset,
                amnet_ofi_context_size,
            )
        };
        assert_eq!(size, std::mem::size_of::<CqEntry>());
        assert_eq!(data, std::mem::offset_of!(CqEntry, data));
        assert_eq!(tag, std::mem::offset_of!(CqEntry, tag));
        assert_eq!(ctx, std::mem::size_of::<FiContext>());
    }

    #[test]
    fn constants_are_the_headers() {
        assert_eq!(FI_TAGGED(), 1 << 3);
        assert_eq!(FI_RMA(), 1 << 2);
        assert_eq!(FI_REMOTE_CQ_DATA(), 1 << 17);
        assert_eq!(FI_DIRECTED_RECV(), 1 << 59);
        assert!(FI_EAGAIN() > 0 && FI_EAVAIL() > 0);
        let s = strerror(-i64::from(FI_EAGAIN()));
        assert!(!s.is_empty() && !s.starts_with("error "), "{s}");
    }
}
