//! The protocol's [`LongSink`] over the local segment (an `amnet_core::mem::HeapSegment`):
//! Long fragments land in place as they arrive.

use crate::proto::LongSink;

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
