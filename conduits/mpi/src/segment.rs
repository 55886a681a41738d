//! The local segment: zero-filled memory of this process, either the memory of the RMA window
//! (`MPI_Win_allocate`, when put/get run natively, from its first page boundary) or an anonymous
//! page-aligned mapping.

use amnet_core::{Error, Result};

/// One rank's segment, mapped for the life of the conduit.
#[derive(Debug)]
pub(crate) struct Segment {
    base: *mut u8,
    len: usize,
    /// The memory belongs to an MPI window (freed with it) or to the layer above
    /// (`Conduit::attach_segment_in`), not to a mapping of ours.
    foreign: bool,
}

// SAFETY: the segment is plain memory owned by this process. Who writes which bytes when is the
// client's protocol (as for every conduit); the conduit itself writes only Long payloads, each
// into the range its header names, before the handler that owns the range runs.
unsafe impl Send for Segment {}
// SAFETY: as above.
unsafe impl Sync for Segment {}

/// Bytes of physical memory on this host, when the system says.
fn host_memory() -> Option<u64> {
    // SAFETY: sysconf has no preconditions.
    let pages = unsafe { libc::sysconf(libc::_SC_PHYS_PAGES) };
    // SAFETY: as above.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    let pages = u64::try_from(pages).ok()?;
    let page = u64::try_from(page).ok()?;
    pages.checked_mul(page)
}

/// Refuse segment lengths no host of the job can back. Every rank checks every rank's length
/// (all ranks see the same list), so on a uniform cluster all reach the same verdict.
pub(crate) fn check_lengths(lens: &[usize]) -> Result<()> {
    let Some(mem) = host_memory() else {
        return Ok(());
    };
    for (r, &l) in lens.iter().enumerate() {
        if l as u64 > mem {
            return Err(Error::Config(format!(
                "rank {r} asked for a segment of {l} bytes, more than the {mem} bytes of memory \
                 of this host: ask for a smaller segment"
            )));
        }
    }
    Ok(())
}

impl Segment {
    /// Map `len` zeroed bytes (page-aligned). A zero-length segment maps nothing.
    pub(crate) fn new(len: usize) -> Result<Segment> {
        if len == 0 {
            return Ok(Segment {
                base: std::ptr::NonNull::<u8>::dangling().as_ptr(),
                len: 0,
                foreign: false,
            });
        }
        // SAFETY: an anonymous private mapping at an address of the kernel's choosing touches no
        // existing memory; the result is checked below.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(Error::os(
                "mpi",
                format!("mmap of a segment of {len} bytes (this host's memory cannot back it)"),
                std::io::Error::last_os_error(),
            ));
        }
        Ok(Segment {
            base: p.cast::<u8>(),
            len,
            foreign: false,
        })
    }

    /// The first `len` bytes of an RMA window's memory at `base`. The window owns the memory;
    /// it stays valid until the window is freed, when the process leaves.
    ///
    /// # Safety
    /// - `base` is valid for `len` bytes of reads and writes until the window is freed, and
    ///   the caller zero-filled them (MPI does not promise zeroed memory).
    pub(crate) unsafe fn in_window(base: *mut u8, len: usize) -> Segment {
        Segment {
            base: if len == 0 {
                std::ptr::NonNull::<u8>::dangling().as_ptr()
            } else {
                base
            },
            len,
            foreign: true,
        }
    }

    /// `len` bytes at `base` that the layer above provides (the host-local bypass's shared
    /// memory) and keeps mapped for the conduit's life.
    ///
    /// # Safety
    /// - `base` is valid for `len` bytes of reads and writes for the conduit's whole life.
    pub(crate) unsafe fn provided(base: *mut u8, len: usize) -> Segment {
        // SAFETY: forwarded contract (the memory outlives the segment, and is not ours to
        // unmap: `foreign`).
        unsafe { Segment::in_window(base, len) }
    }

    /// Base address.
    #[inline]
    pub(crate) fn base(&self) -> *mut u8 {
        self.base
    }

    /// Length in bytes.
    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The address of `[offset, offset + len)`, when that range lies inside the segment.
    #[inline]
    pub(crate) fn range(&self, offset: u64, len: u64) -> Option<*mut u8> {
        let end = offset.checked_add(len)?;
        if end > self.len as u64 {
            return None;
        }
        let off = usize::try_from(offset).ok()?;
        // SAFETY: `off + len <= self.len`, so the pointer stays inside the mapping (or is the
        // dangling base with offset 0 for an empty segment).
        Some(unsafe { self.base.add(off) })
    }
}

impl Drop for Segment {
    fn drop(&mut self) {
        if self.len > 0 && !self.foreign {
            // SAFETY: the mapping was created in `new` with this length and is unmapped once.
            unsafe { libc::munmap(self.base.cast(), self.len) };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zeroed_aligned_and_bounded() {
        let s = Segment::new(3 * 4096 + 5).unwrap();
        assert_eq!(s.base() as usize % 4096, 0);
        // SAFETY: the mapping is 3 * 4096 + 5 bytes long.
        let bytes = unsafe { std::slice::from_raw_parts(s.base(), s.len()) };
        assert!(bytes.iter().all(|&b| b == 0));
        assert!(s.range(0, s.len() as u64).is_some());
        assert!(s.range(1, s.len() as u64).is_none());
        assert!(s.range(u64::MAX, 2).is_none());
        let empty = Segment::new(0).unwrap();
        assert!(empty.range(0, 0).is_some());
        assert!(empty.range(0, 1).is_none());
    }

    #[test]
    fn refuses_more_than_memory() {
        let e = check_lengths(&[4096, 1 << 60]).unwrap_err();
        assert!(e.to_string().contains("rank 1"), "{e}");
        assert!(e.to_string().contains("memory"), "{e}");
        check_lengths(&[0, 4096]).unwrap();
    }
}
