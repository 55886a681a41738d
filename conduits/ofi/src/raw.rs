//! One open libfabric endpoint, with the few operations the conduit and the benchmark's raw
//! floor use: its address, the peers' addresses in a table address vector, tagged sends and
//! receives, and completion-queue reads with error completions turned into errors.
//!
//! Receives and sends that complete through the queue carry a context: a [`FiContext`] that
//! the provider owns until the operation's completion is read (libfabric's `FI_CONTEXT`
//! mode). The caller keeps it alive and in place until then, which is why those calls are
//! `unsafe`.

use std::ffi::{c_char, c_int, c_void, CStr, CString};

use amnet_core::{Error, Result};

pub use crate::ffi::FiContext;
use crate::ffi::{self, CqEntry, FiAddr, FidMr, RawEp};
use crate::provider::{self, Selected};
use crate::tag::{Layout, TagCaps, TagMode};

/// The prefix of shm's endpoint names (its addresses); the region in /dev/shm is the rest.
const SHM_PREFIX: &str = "fi_shm://";

/// A region name no other endpoint on the host has: the job's bootstrap port (0 outside a
/// launched job; the launcher removes `amnet-ofi-<port>-*` when the job ends, so that the
/// regions of ranks killed by a signal go too), the process id, the time and a count.
fn shm_region_name() -> String {
    let port = amnet_core::config::Source::env()
        .socket_addr(&amnet_core::config::vars::UDP_BOOT)
        .ok()
        .flatten()
        .map_or(0, |a| a.port());
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("amnet-ofi-{port}-{}-{t:x}-{n}", std::process::id())
}

fn err(msg: impl Into<String>) -> Error {
    Error::conduit("ofi", msg.into())
}

fn call_err(what: &str, rc: i64) -> Error {
    err(format!("{what}: {} ({rc})", ffi::strerror(rc)))
}

/// How to choose the provider of an [`OfiEndpoint`].
#[derive(Debug, Default, Clone)]
pub struct Choice {
    /// Providers to choose from, as `AMNET_OFI_PROVIDER_INCLUDE` names them (empty: all).
    pub include: Vec<String>,
    /// Providers never chosen (`AMNET_OFI_PROVIDER_EXCLUDE`).
    pub exclude: Vec<String>,
    /// The source address the endpoint binds to (`127.0.0.1` keeps tcp and udp on loopback);
    /// `None`: the provider's default interface.
    pub node: Option<String>,
}

impl Choice {
    /// A choice from comma lists (the environment variables' form).
    pub fn from_lists(include: &str, exclude: &str, node: Option<&str>) -> Choice {
        Choice {
            include: provider::parse_list(include),
            exclude: provider::parse_list(exclude),
            node: node.map(str::to_owned),
        }
    }
}

/// Memory registered for RMA by [`OfiEndpoint::register`]: what a peer needs to reach it
/// (`remote_base` and `key`, sent to it by the caller) and its length.
#[derive(Debug)]
pub struct Region {
    mr: *mut FidMr,
    /// The key peers name the region with.
    pub key: u64,
    /// The address peers add offsets to: the region's virtual address where the provider
    /// addresses regions that way (`FI_MR_VIRT_ADDR`), 0 where it takes offsets.
    pub remote_base: u64,
    /// Its length in bytes.
    pub len: usize,
}

// SAFETY: a registration handle of a thread-safe domain.
unsafe impl Send for Region {}
// SAFETY: as above.
unsafe impl Sync for Region {}

/// A completion read from the queue.
#[derive(Debug, Clone, Copy)]
pub struct Completion {
    /// The context the operation was started with.
    pub context: *mut FiContext,
    /// Bytes received (receives).
    pub len: usize,
    /// The message's tag (receives).
    pub tag: u64,
    /// Remote CQ data (receives of messages sent with data).
    pub data: u64,
    /// libfabric's completion flags.
    pub flags: u64,
}

impl Completion {
    /// A zeroed completion, for arrays that [`OfiEndpoint::read_cq`] fills.
    pub const EMPTY: Completion = Completion {
        context: std::ptr::null_mut(),
        len: 0,
        tag: 0,
        data: 0,
        flags: 0,
    };
}

// SAFETY: a completion is plain data; its context pointer is the operation's identity, used
// by whoever posted the operation.
unsafe impl Send for Completion {}

/// An open reliable-datagram endpoint of the chosen provider, with its completion queue and
/// address vector. Every method may be called from several threads at once (the domain is
/// opened `FI_THREAD_SAFE`).
pub struct OfiEndpoint {
    sel: Selected,
    ep: Box<RawEp>,
}

// SAFETY: the objects behind `ep` belong to a thread-safe domain; `sel` is read-only.
unsafe impl Send for OfiEndpoint {}
// SAFETY: as above.
unsafe impl Sync for OfiEndpoint {}

impl std::fmt::Debug for OfiEndpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.describe())
    }
}

impl Drop for OfiEndpoint {
    fn drop(&mut self) {
        // SAFETY: the objects were opened by amnet_ofi_open and are closed once.
        unsafe { ffi::amnet_ofi_close(&mut *self.ep) };
    }
}

impl OfiEndpoint {
    /// Choose a provider as `choice` says and open an endpoint on it.
    pub fn open(choice: &Choice) -> Result<OfiEndpoint> {
        let sel = provider::select(choice)?;
        let mut ep = Box::new(RawEp::empty());
        let mut step: *const c_char = std::ptr::null();
        // shm names each endpoint's region after the process id, and finds the region of a
        // process killed earlier with the same id in its way (`fi_enable` fails with EBUSY):
        // its endpoints get names of their own instead, unlinked when the process exits.
        let region = (sel.desc.prov_name() == "shm").then(shm_region_name);
        let name = region
            .as_ref()
            .map(|r| CString::new(format!("{SHM_PREFIX}{r}")))
            .transpose()
            .map_err(|_| err("an shm endpoint name with a NUL byte"))?;
        let name_ptr = name.as_ref().map_or(std::ptr::null(), |n| n.as_ptr());
        // SAFETY: `sel.info()` is a live fi_info; `name_ptr` is NULL or a NUL-terminated
        // string that outlives the call; `ep` and `step` are written by the call.
        let rc = unsafe { ffi::amnet_ofi_open(sel.info(), &mut *ep, name_ptr, &mut step) };
        if rc != 0 {
            let name = if step.is_null() {
                "open".into()
            } else {
                // SAFETY: shim.c points `step` at a static NUL-terminated string.
                unsafe { CStr::from_ptr(step) }
                    .to_string_lossy()
                    .into_owned()
            };
            return Err(call_err(
                &format!("{name} on provider {}", sel.desc.prov_name()),
                i64::from(rc),
            ));
        }
        if let Some(r) = region {
            let r = CString::new(r).map_err(|_| err("an shm region name with a NUL byte"))?;
            // SAFETY: `r` is a NUL-terminated string; the shim copies it.
            if unsafe { ffi::amnet_ofi_unlink_at_exit(r.as_ptr()) } != 0 {
                amnet_core::diag!(
                    "amnet ofi: the shm region {} stays in /dev/shm after this process exits",
                    r.to_string_lossy()
                );
            }
        }
        Ok(OfiEndpoint { sel, ep })
    }

    /// The provider's name ("tcp;ofi_rxm", "shm", ...).
    pub fn provider(&self) -> String {
        self.sel.desc.prov_name()
    }

    /// True when the provider offers RMA (`fi_write`/`fi_read`) on this endpoint.
    pub fn has_rma(&self) -> bool {
        self.sel.rma
    }

    /// True when RMA writes may carry 8 bytes of remote CQ data, which the target's queue
    /// reports (a completion with `FI_REMOTE_CQ_DATA` and no context).
    pub fn has_write_data(&self) -> bool {
        self.sel.rma_data
    }

    /// The largest message or RMA transfer the provider takes in one operation.
    pub fn max_msg_size(&self) -> usize {
        usize::try_from(self.sel.desc.max_msg_size).unwrap_or(usize::MAX)
    }

    /// True when the provider offers remote CQ data (at least 4 bytes) and directed receive.
    pub fn has_full_tags(&self) -> bool {
        self.sel.full_tags
    }

    /// The endpoint's `mem_tag_format`.
    pub fn mem_tag_format(&self) -> u64 {
        self.sel.desc.mem_tag_format
    }

    /// Bytes that a send may inject (complete at once, no completion).
    pub fn inject_size(&self) -> usize {
        usize::try_from(self.sel.desc.inject_size).unwrap_or(usize::MAX)
    }

    /// The tag layout `mode` resolves to on this endpoint's provider, with its limits checked
    /// against a job of `nranks` ranks, job ids up to `max_job` and message classes up to
    /// `max_class` (see [`Layout::choose`]).
    pub fn tag_layout(
        &self,
        mode: TagMode,
        nranks: u32,
        max_job: u64,
        max_class: u32,
    ) -> Result<Layout> {
        let d = &self.sel.desc;
        let caps = TagCaps {
            remote_cq_data: self.sel.full_tags,
            cq_data_size: usize::try_from(d.cq_data_size).unwrap_or(usize::MAX),
            directed_recv: self.sel.full_tags,
            mem_tag_format: d.mem_tag_format,
        };
        Layout::choose(mode, &caps, nranks, max_job, max_class).map_err(err)
    }

    /// Provider, fabric, domain and capabilities, for `AMNET_VERBOSE=1`.
    pub fn describe(&self) -> String {
        let d = &self.sel.desc;
        format!(
            "provider {} (fabric {}, domain {}), offered [{}]; RMA {}, remote CQ data and \
             directed receive {}, RMA with remote CQ data {}, inject {} B, mem_tag_format \
             {:#x}",
            d.prov_name(),
            d.fabric_name(),
            d.domain_name(),
            self.sel.offered.join(", "),
            if self.sel.rma { "yes" } else { "no" },
            if self.sel.full_tags { "yes" } else { "no" },
            if self.sel.rma_data { "yes" } else { "no" },
            d.inject_size,
            d.mem_tag_format
        )
    }

    fn raw(&self) -> *mut RawEp {
        std::ptr::from_ref::<RawEp>(&self.ep).cast_mut()
    }

    /// The endpoint's address, as peers insert it.
    pub fn address(&self) -> Result<Vec<u8>> {
        let mut buf = vec![0u8; 256];
        loop {
            let mut len = buf.len();
            // SAFETY: `buf` is writable for `len` bytes; `len` is written by the call.
            let rc =
                unsafe { ffi::amnet_ofi_getname(self.raw(), buf.as_mut_ptr().cast(), &mut len) };
            if rc == 0 {
                buf.truncate(len);
                return Ok(buf);
            }
            if len > buf.len() && len <= 1 << 16 {
                buf.resize(len, 0);
                continue;
            }
            return Err(call_err("fi_getname", i64::from(rc)));
        }
    }

    /// Insert every peer's address; returns their `fi_addr_t`s in the same order. Each is
    /// inserted on its own from a zero-padded buffer: some providers' addresses vary in length
    /// (shm's are names) while the provider reads a fixed number of bytes per address.
    pub fn insert(&self, addrs: &[Vec<u8>]) -> Result<Vec<u64>> {
        const PAD: usize = 4096;
        let mut out = vec![0 as FiAddr; addrs.len()];
        let mut buf = vec![0u8; PAD];
        for (i, a) in addrs.iter().enumerate() {
            if a.len() > PAD {
                return Err(err(format!(
                    "address {i} has {} bytes, more than any provider's",
                    a.len()
                )));
            }
            buf.fill(0);
            buf[..a.len()].copy_from_slice(a);
            // SAFETY: `buf` holds one address padded with zeros to PAD bytes; `out[i]` has
            // room for one fi_addr_t.
            let rc = unsafe {
                ffi::amnet_ofi_av_insert(self.raw(), buf.as_ptr().cast(), 1, &mut out[i])
            };
            if rc != 1 {
                return Err(call_err(
                    &format!("fi_av_insert of address {i}"),
                    i64::from(rc.min(0)),
                ));
            }
        }
        Ok(out)
    }

    /// Send `buf` with `tag` (and remote CQ data `data`, where given) to `dest` without a
    /// completion: the buffer is free again on return. `Ok(false)`: no room now (poll the
    /// queue and retry). At most [`inject_size`](Self::inject_size) bytes.
    pub fn inject(&self, dest: u64, tag: u64, data: Option<u64>, buf: &[u8]) -> Result<bool> {
        if buf.len() > self.inject_size() {
            return Err(err(format!(
                "inject of {} bytes: provider {} injects at most {}",
                buf.len(),
                self.provider(),
                self.inject_size()
            )));
        }
        // SAFETY: `buf` is readable for its length during the call, which copies it.
        let rc = unsafe {
            match data {
                Some(d) => ffi::amnet_ofi_tinjectdata(
                    self.raw(),
                    buf.as_ptr().cast(),
                    buf.len(),
                    d,
                    dest,
                    tag,
                ),
                None => {
                    ffi::amnet_ofi_tinject(self.raw(), buf.as_ptr().cast(), buf.len(), dest, tag)
                }
            }
        };
        self.posted("fi_tinject", rc)
    }

    /// Start a tagged send of `len` bytes at `buf` to `dest`; its completion carries `ctx`.
    /// `Ok(false)`: no room now.
    ///
    /// # Safety
    /// - `buf` stays readable and unchanged, and `ctx` valid and in place, until the
    ///   completion carrying `ctx` was read (or the endpoint is dropped).
    pub unsafe fn send(
        &self,
        dest: u64,
        tag: u64,
        data: Option<u64>,
        buf: *const u8,
        len: usize,
        ctx: *mut FiContext,
    ) -> Result<bool> {
        // SAFETY: the caller's contract, forwarded.
        let rc = unsafe {
            match data {
                Some(d) => ffi::amnet_ofi_tsenddata(
                    self.raw(),
                    buf.cast(),
                    len,
                    std::ptr::null_mut(),
                    d,
                    dest,
                    tag,
                    ctx.cast(),
                ),
                None => ffi::amnet_ofi_tsend(
                    self.raw(),
                    buf.cast(),
                    len,
                    std::ptr::null_mut(),
                    dest,
                    tag,
                    ctx.cast(),
                ),
            }
        };
        self.posted("fi_tsend", rc)
    }

    /// Post a receive of at most `len` bytes into `buf` for messages whose tag matches `tag`
    /// outside the bits of `ignore`, from `src` (`None`: any source); its completion carries
    /// `ctx`. `Ok(false)`: no room now.
    ///
    /// # Safety
    /// - `buf` stays writable and untouched by anything else, and `ctx` valid and in place,
    ///   until the completion carrying `ctx` was read (or the endpoint is dropped).
    pub unsafe fn recv(
        &self,
        src: Option<u64>,
        tag: u64,
        ignore: u64,
        buf: *mut u8,
        len: usize,
        ctx: *mut FiContext,
    ) -> Result<bool> {
        // FI_ADDR_UNSPEC is all ones.
        let src = src.unwrap_or(u64::MAX);
        // SAFETY: the caller's contract, forwarded.
        let rc = unsafe {
            ffi::amnet_ofi_trecv(
                self.raw(),
                buf.cast(),
                len,
                std::ptr::null_mut(),
                src,
                tag,
                ignore,
                ctx.cast(),
            )
        };
        self.posted("fi_trecv", rc)
    }

    /// Register `len` bytes at `base` for remote reads and writes by peers (RMA), under
    /// `key` where the provider lets the caller choose keys.
    ///
    /// # Safety
    /// - The memory stays valid (mapped, not freed) until the region is closed with
    ///   [`close_region`](Self::close_region), which happens before the endpoint is dropped;
    ///   peers may write it at any time until then.
    pub unsafe fn register(&self, base: *mut u8, len: usize, key: u64) -> Result<Region> {
        if !self.sel.rma {
            return Err(err(format!(
                "provider {} offers no RMA on this endpoint",
                self.provider()
            )));
        }
        let mut mr: *mut FidMr = std::ptr::null_mut();
        let mr_mode = self.sel.desc.mr_mode;
        // SAFETY: the caller keeps the memory valid while registered; `mr` is written.
        let rc =
            unsafe { ffi::amnet_ofi_mr_reg(self.raw(), base.cast(), len, key, &mut mr, mr_mode) };
        if rc != 0 || mr.is_null() {
            return Err(call_err(
                &format!("fi_mr_reg of {len} bytes"),
                i64::from(rc.min(-1)),
            ));
        }
        // SAFETY: `mr` is the live registration just made.
        let key = unsafe { ffi::amnet_ofi_mr_key(mr) };
        let remote_base = if mr_mode & ffi::FI_MR_VIRT_ADDR() != 0 {
            base as u64
        } else {
            0
        };
        Ok(Region {
            mr,
            key,
            remote_base,
            len,
        })
    }

    /// Close a region made by [`register`](Self::register) on this endpoint.
    pub fn close_region(&self, r: Region) {
        // SAFETY: `r.mr` is a live registration of this endpoint's domain, closed once (the
        // region is consumed).
        unsafe { ffi::amnet_ofi_mr_close(r.mr) };
    }

    /// Start an RMA write of `len` bytes at `src` into `dest`'s region described by
    /// `(remote_base, key)` at `offset`, with remote CQ data `data` where given (the target
    /// then gets a completion carrying it); this endpoint's completion carries `ctx`. With
    /// `delivered` the completion is asked for only once the bytes are visible in the
    /// target's memory (`FI_DELIVERY_COMPLETE`), not merely sent. `Ok(false)`: no room now.
    ///
    /// # Safety
    /// - `src` stays readable and unchanged, and `ctx` valid and in place, until the
    ///   completion carrying `ctx` was read (or the endpoint is dropped).
    /// - `offset + len` lies within the remote region (the provider may not check).
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn write(
        &self,
        dest: u64,
        remote_base: u64,
        key: u64,
        offset: u64,
        src: *const u8,
        len: usize,
        data: Option<u64>,
        delivered: bool,
        ctx: *mut FiContext,
    ) -> Result<bool> {
        let addr = remote_base.wrapping_add(offset);
        let mut flags = if delivered {
            ffi::FI_DELIVERY_COMPLETE()
        } else {
            0
        };
        if data.is_some() {
            flags |= ffi::FI_REMOTE_CQ_DATA();
        }
        // SAFETY: the caller's contract, forwarded.
        let rc = unsafe {
            ffi::amnet_ofi_write(
                self.raw(),
                src.cast(),
                len,
                dest,
                addr,
                key,
                ctx.cast(),
                data.unwrap_or(0),
                flags,
            )
        };
        self.posted("fi_writemsg", rc)
    }

    /// Start an RMA read of `len` bytes of `src`'s region `(remote_base, key)` at `offset`
    /// into `dst`; the completion carries `ctx`. `Ok(false)`: no room now.
    ///
    /// # Safety
    /// - `dst` stays writable and untouched by anything else, and `ctx` valid and in place,
    ///   until the completion carrying `ctx` was read (or the endpoint is dropped).
    /// - `offset + len` lies within the remote region.
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn read(
        &self,
        src: u64,
        remote_base: u64,
        key: u64,
        offset: u64,
        dst: *mut u8,
        len: usize,
        ctx: *mut FiContext,
    ) -> Result<bool> {
        let addr = remote_base.wrapping_add(offset);
        // SAFETY: the caller's contract, forwarded.
        let rc = unsafe {
            ffi::amnet_ofi_read(
                self.raw(),
                dst.cast(),
                len,
                std::ptr::null_mut(),
                src,
                addr,
                key,
                ctx.cast(),
            )
        };
        self.posted("fi_read", rc)
    }

    fn posted(&self, what: &str, rc: isize) -> Result<bool> {
        if rc == 0 {
            return Ok(true);
        }
        let rc = i64::try_from(rc).unwrap_or(i64::MIN);
        if rc == -i64::from(ffi::FI_EAGAIN()) {
            return Ok(false);
        }
        Err(call_err(what, rc))
    }

    /// Read up to `out.len()` completions; returns how many. An error completion is returned
    /// as an error that names the operation's context and the provider's reason.
    pub fn read_cq(&self, out: &mut [Completion]) -> Result<usize> {
        let mut i = 0;
        self.read_cq_each(out.len(), |c| {
            out[i] = *c;
            i += 1;
        })
    }

    /// [`read_cq`](Self::read_cq) without an array to fill: `f` sees each of the (at most
    /// `max`, at most 256) completions read, in order. Returns how many.
    pub fn read_cq_each(&self, max: usize, mut f: impl FnMut(&Completion)) -> Result<usize> {
        const BATCH: usize = 256;
        // Not initialized: the provider writes the first `rc` entries, and only those are
        // read.
        let mut raw = [const { std::mem::MaybeUninit::<CqEntry>::uninit() }; BATCH];
        let want = max.min(BATCH);
        // SAFETY: `raw` has room for `want` entries.
        let rc = unsafe { ffi::amnet_ofi_cq_read(self.raw(), raw.as_mut_ptr().cast(), want) };
        if rc > 0 {
            let n = usize::try_from(rc).unwrap_or(0).min(want);
            for e in &raw[..n] {
                // SAFETY: fi_cq_read wrote the first `rc` entries.
                let e = unsafe { e.assume_init_ref() };
                f(&Completion {
                    context: e.op_context.cast(),
                    len: e.len,
                    tag: e.tag,
                    data: e.data,
                    flags: e.flags,
                });
            }
            return Ok(n);
        }
        let rc = i64::try_from(rc).unwrap_or(i64::MIN);
        if rc == -i64::from(ffi::FI_EAGAIN()) {
            return Ok(0);
        }
        if rc == -i64::from(ffi::FI_EAVAIL()) {
            let mut ctx: *mut c_void = std::ptr::null_mut();
            let mut code: c_int = 0;
            let mut msg = [0 as c_char; 256];
            // SAFETY: every out-pointer is writable; `msg` has room for its length.
            let got = unsafe {
                ffi::amnet_ofi_cq_readerr(
                    self.raw(),
                    &mut ctx,
                    &mut code,
                    msg.as_mut_ptr(),
                    msg.len(),
                )
            };
            if got == 1 {
                // SAFETY: shim.c NUL-terminates `msg` within its length.
                let text = unsafe { CStr::from_ptr(msg.as_ptr()) }.to_string_lossy();
                return Err(err(format!("operation {ctx:p} failed: {text}")));
            }
            return Err(call_err("fi_cq_readerr", i64::from(got.min(0))));
        }
        Err(call_err("fi_cq_read", rc))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TAG: u64 = 0x1234;

    /// Poll every endpoint until a completion with `ctx` was read; completions of other
    /// operations read meanwhile are kept in `seen`.
    fn wait(eps: &[&OfiEndpoint], seen: &mut Vec<Completion>, ctx: *mut FiContext) -> Completion {
        let t0 = std::time::Instant::now();
        loop {
            if let Some(i) = seen.iter().position(|x| x.context == ctx) {
                return seen.swap_remove(i);
            }
            drive(eps, seen);
            assert!(t0.elapsed().as_secs() < 20, "no completion in 20 s");
            std::thread::yield_now();
        }
    }

    /// Read every endpoint's queue once, keeping the completions in `seen`.
    fn drive(eps: &[&OfiEndpoint], seen: &mut Vec<Completion>) {
        for ep in eps {
            let mut c = [Completion::EMPTY; 4];
            let n = ep.read_cq(&mut c).unwrap_or_else(|e| panic!("{e}"));
            seen.extend_from_slice(&c[..n]);
        }
    }

    /// shm endpoints carry names of their own (`amnet-ofi-<pid>-...`), one region each,
    /// which a closed endpoint removes.
    #[test]
    fn shm_endpoints_have_names_of_their_own() {
        let choice = Choice::from_lists("shm", "", None);
        let a = OfiEndpoint::open(&choice).expect("a");
        let b = OfiEndpoint::open(&choice).expect("b");
        let region = |ep: &OfiEndpoint| {
            let addr = ep.address().expect("address");
            let addr = String::from_utf8_lossy(&addr)
                .trim_end_matches('\0')
                .to_string();
            let name = addr
                .strip_prefix(SHM_PREFIX)
                .unwrap_or_else(|| panic!("shm address {addr}"))
                .to_string();
            let own = format!("-{}-", std::process::id());
            assert!(name.starts_with("amnet-ofi-"), "shm region {name}");
            assert!(name.contains(&own), "shm region {name}");
            name
        };
        let (ra, rb) = (region(&a), region(&b));
        assert_ne!(ra, rb);
        let path = std::path::Path::new("/dev/shm").join(&ra);
        assert!(path.exists(), "{} is not there", path.display());
        drop(a);
        assert!(!path.exists(), "{} outlived its endpoint", path.display());
        drop(b);
    }

    /// Two endpoints of one process exchange tagged messages on each provider, both ways,
    /// with a directed receive and a wildcard one.
    #[test]
    fn tagged_messages_between_two_endpoints() {
        for prov in ["tcp", "udp", "shm"] {
            let choice = Choice::from_lists(prov, "", (prov != "shm").then_some("127.0.0.1"));
            let a = OfiEndpoint::open(&choice).unwrap_or_else(|e| panic!("{prov}: {e}"));
            let b = OfiEndpoint::open(&choice).unwrap_or_else(|e| panic!("{prov}: {e}"));
            let addrs = vec![a.address().expect("a"), b.address().expect("b")];
            let at_a = a.insert(&addrs).expect("insert at a");
            let at_b = b.insert(&addrs).expect("insert at b");
            let mut buf = vec![0u8; 4096];
            let mut ctx = FiContext::new();
            // Wildcard receive at b: any source, tag 0x1234 with its low byte ignored.
            // SAFETY: `buf` and `ctx` live until the completion is read below.
            let ok = unsafe { b.recv(None, TAG, 0xff, buf.as_mut_ptr(), buf.len(), &mut ctx) };
            assert!(ok.expect("recv"));
            let msg: Vec<u8> = (0..100u8).collect();
            let data = a.has_full_tags().then_some(42);
            let mut seen = Vec::new();
            while !a
                .inject(at_a[1], TAG | 7, data, &msg[..a.inject_size().min(64)])
                .expect("inject")
            {
                // Connection set-up (tcp) needs both ends to make progress.
                drive(&[&a, &b], &mut seen);
            }
            let c = wait(&[&a, &b], &mut seen, &mut ctx);
            if data.is_some() {
                assert_eq!(c.data, 42, "{prov}");
            }
            assert_eq!(c.tag, TAG | 7, "{prov}");
            assert_eq!(c.len, a.inject_size().min(64), "{prov}");
            assert_eq!(&buf[..c.len], &msg[..c.len], "{prov}");
            // A larger message back, through a send with a completion, into a directed receive.
            let big: Vec<u8> = (0..3000u32)
                .map(|i| u8::try_from(i % 251).unwrap_or(0))
                .collect();
            let mut rctx = FiContext::new();
            let mut sctx = FiContext::new();
            // SAFETY: as above; `big` and `sctx` live until the send's completion is read.
            unsafe {
                assert!(a
                    .recv(
                        Some(at_a[1]),
                        TAG + 1,
                        0,
                        buf.as_mut_ptr(),
                        buf.len(),
                        &mut rctx
                    )
                    .expect("recv"));
                assert!(b
                    .send(at_b[0], TAG + 1, None, big.as_ptr(), big.len(), &mut sctx)
                    .expect("send"));
            }
            let _ = wait(&[&a, &b], &mut seen, &mut sctx);
            let c = wait(&[&a, &b], &mut seen, &mut rctx);
            assert_eq!((c.tag, c.len), (TAG + 1, big.len()), "{prov}");
            assert_eq!(&buf[..big.len()], &big[..], "{prov}");
            // A message to the endpoint itself.
            let mut sctx2 = FiContext::new();
            let mut rctx2 = FiContext::new();
            // SAFETY: as above.
            unsafe {
                assert!(a
                    .recv(None, TAG + 2, 0, buf.as_mut_ptr(), buf.len(), &mut rctx2)
                    .expect("recv"));
                while !a
                    .send(at_a[0], TAG + 2, None, big.as_ptr(), 100, &mut sctx2)
                    .expect("send")
                {
                    drive(&[&a, &b], &mut seen);
                }
            }
            let _ = wait(&[&a, &b], &mut seen, &mut sctx2);
            let c = wait(&[&a, &b], &mut seen, &mut rctx2);
            assert_eq!((c.tag, c.len), (TAG + 2, 100), "{prov}");
            // libfabric 1.17's tcp;ofi_rxm, udp;ofi_rxd and shm all offer RMA, with remote CQ
            // data.
            assert!(a.has_rma(), "{prov}: {a:?}");
            assert!(a.has_write_data(), "{prov}: {a:?}");
            // RMA: b writes into a's registered memory and reads it back.
            let mut seg = vec![0u8; 1 << 16];
            // SAFETY: `seg` outlives the region, closed below.
            let r = unsafe { a.register(seg.as_mut_ptr(), seg.len(), 7) }.expect("register");
            let mut wctx = FiContext::new();
            // SAFETY: `big` and `wctx` live until the write's completion is read.
            let ok = unsafe {
                b.write(
                    at_b[0],
                    r.remote_base,
                    r.key,
                    100,
                    big.as_ptr(),
                    big.len(),
                    None,
                    true,
                    &mut wctx,
                )
            };
            assert!(ok.expect("write"), "{prov}");
            let _ = wait(&[&a, &b], &mut seen, &mut wctx);
            assert_eq!(&seg[100..100 + big.len()], &big[..], "{prov}: fi_write");
            // A write with remote CQ data: a's queue gets a completion carrying it.
            let mut wdctx = FiContext::new();
            // SAFETY: as above.
            let ok = unsafe {
                b.write(
                    at_b[0],
                    r.remote_base,
                    r.key,
                    5000,
                    big.as_ptr(),
                    big.len(),
                    Some(0xDA7A),
                    true,
                    &mut wdctx,
                )
            };
            assert!(ok.expect("write with data"), "{prov}");
            let _ = wait(&[&a, &b], &mut seen, &mut wdctx);
            let t0 = std::time::Instant::now();
            let c = loop {
                let flag = ffi::FI_REMOTE_CQ_DATA();
                if let Some(i) = seen.iter().position(|x| x.flags & flag != 0) {
                    break seen.swap_remove(i);
                }
                drive(&[&a, &b], &mut seen);
                assert!(
                    t0.elapsed().as_secs() < 20,
                    "{prov}: no remote CQ data in 20 s"
                );
                std::thread::yield_now();
            };
            assert_eq!(c.data, 0xDA7A, "{prov}: remote CQ data");
            assert!(
                c.context.is_null(),
                "{prov}: a remote write's completion has a context"
            );
            assert_eq!(
                &seg[5000..5000 + big.len()],
                &big[..],
                "{prov}: fi_write with data"
            );
            let mut back = vec![0u8; 1000];
            let mut rdctx = FiContext::new();
            // SAFETY: `back` and `rdctx` live until the read's completion is read.
            let ok = unsafe {
                b.read(
                    at_b[0],
                    r.remote_base,
                    r.key,
                    150,
                    back.as_mut_ptr(),
                    back.len(),
                    &mut rdctx,
                )
            };
            assert!(ok.expect("read"), "{prov}");
            let _ = wait(&[&a, &b], &mut seen, &mut rdctx);
            assert_eq!(&back[..], &big[50..1050], "{prov}: fi_read");
            a.close_region(r);
        }
    }

    /// What the conduit relies on: messages that arrive before a receive is posted (more of
    /// them than receives) all match receives posted later, on every provider, when their tags
    /// equal the receives' outside the ignore mask and inside it. (libfabric 1.17's shm and
    /// udp;ofi_rxd strand such messages when their tags differ from the receive's in ignored
    /// bits, which is why the conduit keeps the source out of its any-source tags.)
    #[test]
    fn unexpected_messages_match_later_receives() {
        const POSTED: usize = 32;
        const SENT: usize = 200;
        const TAG5: u64 = 0x500;
        for prov in ["tcp", "udp", "shm"] {
            let choice = Choice::from_lists(prov, "", Some("127.0.0.1"));
            let a = OfiEndpoint::open(&choice).unwrap_or_else(|e| panic!("{prov}: {e}"));
            let b = OfiEndpoint::open(&choice).unwrap_or_else(|e| panic!("{prov}: {e}"));
            let addrs = vec![a.address().expect("a"), b.address().expect("b")];
            let at_a = a.insert(&addrs).expect("insert at a");
            let _ = b.insert(&addrs).expect("insert at b");
            let mut slots: Vec<Box<(FiContext, [u8; 64])>> = (0..POSTED)
                .map(|_| Box::new((FiContext::new(), [0u8; 64])))
                .collect();
            let post = |p: *mut (FiContext, [u8; 64])| {
                // SAFETY: every slot is boxed and outlives the endpoints' use of it (the
                // endpoints are dropped at the end of the iteration, before the slots).
                let ok = unsafe {
                    b.recv(
                        None,
                        TAG5,
                        0xff,
                        (*p).1.as_mut_ptr(),
                        64,
                        std::ptr::addr_of_mut!((*p).0),
                    )
                };
                assert!(ok.expect("recv"), "{prov}");
            };
            for s in &mut slots {
                post(&mut **s);
            }
            // Send everything first (half from a, half from b to itself), reading completions
            // without posting receives again, so that most messages arrive unexpected.
            let (mut sent, mut got) = (0, 0);
            let mut done = Vec::new();
            let t0 = std::time::Instant::now();
            while sent < SENT {
                assert!(
                    t0.elapsed().as_secs() < 20,
                    "{prov}: sends stalled at {sent}"
                );
                let from = if sent % 2 == 0 { &a } else { &b };
                if from
                    .inject(at_a[1], TAG5, None, &[1u8; 20])
                    .expect("inject")
                {
                    sent += 1;
                    continue;
                }
                let mut c = [Completion::EMPTY; 8];
                let _ = a.read_cq(&mut c).expect("cq a");
                let n = b.read_cq(&mut c).expect("cq b");
                got += n;
                done.extend(c[..n].iter().map(|x| x.context));
            }
            for p in done.drain(..) {
                post(p.cast());
            }
            while got < SENT {
                assert!(
                    t0.elapsed().as_secs() < 20,
                    "{prov}: {got} of {SENT} messages matched"
                );
                let mut c = [Completion::EMPTY; 8];
                let _ = a.read_cq(&mut c).expect("cq a");
                let n = b.read_cq(&mut c).expect("cq b");
                got += n;
                for x in &c[..n] {
                    post(x.context.cast());
                }
                std::thread::yield_now();
            }
            drop((a, b));
        }
    }
}
