//! Bulk copies whose speed does not depend on the two addresses' relative alignment.
//!
//! On x86-64, glibc copies from a few KiB up to about the L2 size with `rep movsb`, whose
//! microcode slows down by an order of magnitude when the destination lies 1-63 bytes past the
//! source modulo 4 KiB (measured on the 2-core AMD EPYC VM: a 124 KiB copy at 2-3 GB/s against
//! 40-47 GB/s with the two addresses 0 or 64 bytes apart). A segment at 8 bytes past a page
//! (what `MPI_Win_allocate` returns) and a page-aligned scratch area, or a heap vector (16
//! bytes past a page) and a page-aligned segment, are that far apart. [`copy`] cuts such a
//! copy into pieces below the threshold of that path; every other copy is one `memmove`.
//!
//! Also the heap segment of conduits without shared memory ([`HeapSegment`]).

/// Memory this host can still give (MemAvailable + SwapFree from /proc/meminfo), in bytes;
/// `None` where that file cannot be read.
pub fn mem_available() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let field = |name: &str| -> Option<u64> {
        let line = text.lines().find(|l| l.starts_with(name))?;
        let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
        Some(kb * 1024)
    };
    Some(field("MemAvailable:")? + field("SwapFree:").unwrap_or(0))
}

/// A segment in the heap, for conduits that reach peers' segments through messages or their
/// transport's RMA rather than shared memory: zeroed, page-aligned memory at a stable address
/// until the value is dropped, written through raw pointers (by Long deliveries and put/get).
#[derive(Debug)]
pub struct HeapSegment {
    ptr: *mut u8,
    len: usize,
    layout: Option<std::alloc::Layout>,
}

// SAFETY: plain memory; who accesses which bytes when is the core's contract with its clients.
unsafe impl Send for HeapSegment {}
// SAFETY: as above.
unsafe impl Sync for HeapSegment {}

impl HeapSegment {
    /// `len` zeroed bytes, page-aligned, for `conduit` (named in errors). More than the host's
    /// available memory ([`mem_available`]) is a configuration error saying so.
    pub fn new(conduit: &'static str, len: usize) -> crate::Result<HeapSegment> {
        if len == 0 {
            return Ok(HeapSegment {
                ptr: std::ptr::NonNull::<u8>::dangling().as_ptr(),
                len: 0,
                layout: None,
            });
        }
        if let Some(avail) = mem_available() {
            if len as u64 > avail {
                return Err(crate::Error::Config(format!(
                    "the segment asks for {len} bytes but this host has {avail} bytes of memory \
                     available (MemAvailable + SwapFree): ask for a smaller segment"
                )));
            }
        }
        let layout = std::alloc::Layout::from_size_align(len, 4096).map_err(|_| {
            crate::Error::conduit(conduit, format!("a segment of {len} bytes is too large"))
        })?;
        // SAFETY: the layout has a non-zero size.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        if ptr.is_null() {
            return Err(crate::Error::conduit(
                conduit,
                format!("cannot allocate a segment of {len} bytes"),
            ));
        }
        Ok(HeapSegment {
            ptr,
            len,
            layout: Some(layout),
        })
    }

    /// The segment in `seg`, memory that its owner provides (the host-local bypass's shared
    /// memory, [`Conduit::attach_segment_in`]) and that this value never frees.
    ///
    /// # Safety
    /// - `seg.base` is valid for reads and writes of `seg.len` bytes for as long as the
    ///   returned value lives, and page-aligned unless `seg.len` is 0.
    ///
    /// [`Conduit::attach_segment_in`]: crate::Conduit::attach_segment_in
    pub unsafe fn borrowed(seg: crate::LocalSegment) -> HeapSegment {
        HeapSegment {
            ptr: seg.base,
            len: seg.len,
            layout: None,
        }
    }

    /// The first byte.
    pub fn ptr(&self) -> *mut u8 {
        self.ptr
    }

    /// Its length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for a segment of no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// True when `[offset, offset + len)` lies inside the segment.
    pub fn fits(&self, offset: u64, len: usize) -> bool {
        matches!(offset.checked_add(len as u64), Some(end) if end <= self.len as u64)
    }
}

impl Drop for HeapSegment {
    fn drop(&mut self) {
        if let Some(l) = self.layout {
            // SAFETY: allocated in `new` with this layout and not freed before.
            unsafe { std::alloc::dealloc(self.ptr, l) };
        }
    }
}

/// A piece of a cut copy: below glibc's `rep movsb` threshold on every x86-64 vector width
/// (2 KiB at SSE2, 4 KiB at AVX2, 8 KiB at AVX-512), so each piece is a vector loop.
const PIECE: usize = 2 << 10;

/// Whether a copy of `len` bytes from `src` to `dst` (not overlapping) takes the slow string
/// copy in one call.
#[inline(always)]
fn cut(src: usize, dst: usize, len: usize) -> bool {
    let apart = dst.wrapping_sub(src) & 4095;
    cfg!(target_arch = "x86_64") && len > PIECE && apart != 0 && apart < 64
}

/// Copy `len` bytes from `src` to `dst`; the two ranges may overlap (as [`std::ptr::copy`]).
///
/// # Safety
/// - `src` is valid for reads of `len` bytes and `dst` for writes of `len` bytes (both may be
///   unaligned).
#[inline]
pub unsafe fn copy(src: *const u8, dst: *mut u8, len: usize) {
    let (s, d) = (src as usize, dst as usize);
    // The length first: most copies (AM payloads) are short and end here.
    if cut(s, d, len) && (d >= s.wrapping_add(len) || s >= d.wrapping_add(len)) {
        let mut at = 0;
        while at < len {
            let n = PIECE.min(len - at);
            // SAFETY: `at + n <= len`, within both ranges (the caller's contract), which do
            // not overlap (checked above).
            unsafe { std::ptr::copy_nonoverlapping(src.add(at), dst.add(at), n) };
            at += n;
        }
        return;
    }
    if (8..=16).contains(&len) {
        // A word or two (a scalar's payload, a small collective's block): both loads before
        // both stores, so overlapping ranges copy as `ptr::copy` does, without a call.
        // SAFETY: `len >= 8`, so both words lie within both ranges (the caller's contract);
        // unaligned accesses.
        unsafe {
            let a = std::ptr::read_unaligned(src.cast::<u64>());
            let b = std::ptr::read_unaligned(src.add(len - 8).cast::<u64>());
            std::ptr::write_unaligned(dst.cast::<u64>(), a);
            std::ptr::write_unaligned(dst.add(len - 8).cast::<u64>(), b);
        }
        return;
    }
    // SAFETY: the caller's contract; `ptr::copy` tolerates overlap.
    unsafe { std::ptr::copy(src, dst, len) };
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every length around the piece size and every distance that cuts the copy gives the
    /// same bytes as a plain copy, overlapping ranges included.
    #[test]
    fn copies_like_memmove() {
        let mut src = vec![0u8; 5 * PIECE + 4096 + 128];
        for (i, b) in src.iter_mut().enumerate() {
            *b = u8::try_from((i * 7 + 3) % 251).unwrap_or(0);
        }
        for len in [
            0,
            1,
            7,
            8,
            9,
            15,
            16,
            17,
            PIECE - 1,
            PIECE,
            PIECE + 1,
            3 * PIECE + 17,
            5 * PIECE,
        ] {
            for apart in [0, 1, 8, 16, 63, 64, 4095] {
                let mut dst = vec![0u8; len + 4096 + 64];
                // SAFETY: both ranges lie in their vectors.
                unsafe { copy(src.as_ptr().add(5), dst.as_mut_ptr().add(5 + apart), len) };
                assert_eq!(
                    &dst[5 + apart..5 + apart + len],
                    &src[5..5 + len],
                    "{len} {apart}"
                );
            }
        }
        // Overlapping, forwards and backwards.
        for (len, shift) in [
            (3 * PIECE, 1usize),
            (3 * PIECE, 8),
            (3 * PIECE, 40),
            (8, 3),
            (12, 5),
            (16, 1),
        ] {
            let mut a = src.clone();
            let p = a.as_mut_ptr();
            // SAFETY: both ranges lie in `a`.
            unsafe { copy(p, p.add(shift), len) };
            assert_eq!(&a[shift..shift + len], &src[..len]);
            let mut b = src.clone();
            let p = b.as_mut_ptr();
            // SAFETY: as above.
            unsafe { copy(p.add(shift), p, len) };
            assert_eq!(&b[..len], &src[shift..shift + len]);
        }
    }

    #[test]
    fn cuts_only_the_slow_distances() {
        assert!(!cut(0, 0, 1 << 20));
        assert!(!cut(0, 8, PIECE));
        assert_eq!(cut(0, 8, PIECE + 1), cfg!(target_arch = "x86_64"));
        assert_eq!(cut(4096, 16 + 8192, 1 << 17), cfg!(target_arch = "x86_64"));
        assert!(!cut(16, 0, 1 << 17));
        assert!(!cut(0, 64, 1 << 17));
    }
}
