//! The local segment: zeroed heap memory at a stable address, which Long deliveries and the
//! core's put/get write through raw pointers, and the protocol's [`LongSink`] over it.

use amnet_core::Result;

use crate::conduit::cerr;
use crate::proto::LongSink;

/// The local segment: zeroed heap memory at a stable address, written through raw pointers
/// (by Long deliveries and by the core's put/get).
pub(crate) struct Segment {
    /// The first byte.
    pub(crate) ptr: *mut u8,
    /// Its length in bytes.
    pub(crate) len: usize,
    layout: Option<std::alloc::Layout>,
}

// SAFETY: the segment is plain memory; who may access which bytes when is the core's contract.
unsafe impl Send for Segment {}
// SAFETY: as above.
unsafe impl Sync for Segment {}

impl Segment {
    /// A zeroed segment of `len` bytes, aligned to a page.
    pub(crate) fn new(len: usize) -> Result<Segment> {
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
pub(crate) struct SegSink {
    /// The segment's first byte.
    pub(crate) ptr: *mut u8,
    /// The segment's length in bytes.
    pub(crate) len: u64,
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

/// Memory this host can still give (MemAvailable + SwapFree from /proc/meminfo), in bytes.
pub(crate) fn mem_available() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let field = |name: &str| -> Option<u64> {
        let line = text.lines().find(|l| l.starts_with(name))?;
        let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
        Some(kb * 1024)
    };
    Some(field("MemAvailable:")? + field("SwapFree:").unwrap_or(0))
}
