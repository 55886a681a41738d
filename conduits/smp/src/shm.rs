//! POSIX shared-memory objects and anonymous aligned memory, unmapped on drop.

use std::ffi::CString;

use amnet_core::{Error, Result};

/// The operating system's error of the call that just failed: `what` on `name`.
fn err(what: &str, name: &str) -> Error {
    Error::os(
        "smp",
        format!("{what} {name}"),
        std::io::Error::last_os_error(),
    )
}

/// A mapped region: a POSIX shared-memory object (or, in thread mode, a heap allocation),
/// unmapped when dropped.
#[derive(Debug)]
pub struct Region {
    ptr: *mut u8,
    len: usize,
    heap: bool,
}

// SAFETY: a region is plain memory shared on purpose; access discipline is the ring protocol's
// and the client's.
unsafe impl Send for Region {}
// SAFETY: as above.
unsafe impl Sync for Region {}

impl Region {
    /// Base address (page aligned).
    pub fn ptr(&self) -> *mut u8 {
        self.ptr
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True for a zero-length region.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// A zeroed heap region for thread mode (len may be 0).
    pub(crate) fn heap(len: usize) -> Result<Region> {
        if len == 0 {
            return Ok(Region {
                ptr: std::ptr::NonNull::<u64>::dangling().as_ptr().cast(),
                len: 0,
                heap: true,
            });
        }
        let layout = std::alloc::Layout::from_size_align(len, 4096)
            .map_err(|e| Error::conduit("smp", format!("region of {len} bytes: {e}")))?;
        // SAFETY: non-zero size.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        if ptr.is_null() {
            return Err(Error::conduit(
                "smp",
                format!("out of memory allocating {len} bytes"),
            ));
        }
        Ok(Region {
            ptr,
            len,
            heap: true,
        })
    }

    /// Create a new shared-memory object `name` (a leading `/` and no other) of `len` bytes,
    /// zero-filled, and map it. Fails if the object exists.
    pub fn create(name: &str, len: usize) -> Result<Region> {
        Self::open_impl(name, len, true)
    }

    /// Map an existing shared-memory object; `len` 0 means "its whole size".
    pub fn open(name: &str, len: usize) -> Result<Region> {
        Self::open_impl(name, len, false)
    }

    fn open_impl(name: &str, len: usize, create: bool) -> Result<Region> {
        let c = CString::new(name).map_err(|_| Error::conduit("smp", "NUL in shm name"))?;
        let flags = if create {
            libc::O_CREAT | libc::O_EXCL | libc::O_RDWR
        } else {
            libc::O_RDWR
        };
        // SAFETY: valid C string; the returned descriptor is closed below.
        let fd = unsafe { libc::shm_open(c.as_ptr(), flags, 0o600) };
        if fd < 0 {
            return Err(err(
                if create {
                    "shm_open(create)"
                } else {
                    "shm_open"
                },
                name,
            ));
        }
        let close = |r: Result<Region>| {
            // SAFETY: fd is ours and open.
            unsafe { libc::close(fd) };
            r
        };
        let mut len = len;
        if create {
            let l = libc::off_t::try_from(len)
                .map_err(|_| Error::conduit("smp", format!("{len} bytes is too large")));
            let l = match l {
                Ok(l) => l,
                Err(e) => return close(Err(e)),
            };
            // SAFETY: fd is a shm object we created.
            if unsafe { libc::ftruncate(fd, l) } != 0 {
                let e = err("ftruncate", name);
                unlink(name);
                return close(Err(e));
            }
        } else if len == 0 {
            // SAFETY: zeroed stat buffer filled by fstat.
            let mut st: libc::stat = unsafe { std::mem::zeroed() };
            // SAFETY: fd is open; st is a valid out-pointer.
            if unsafe { libc::fstat(fd, &mut st) } != 0 {
                return close(Err(err("fstat", name)));
            }
            len = usize::try_from(st.st_size).unwrap_or(0);
        }
        if len == 0 {
            return close(Err(Error::conduit("smp", format!("{name} has size 0"))));
        }
        // SAFETY: mapping `len` bytes of an object that has at least that size.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            let e = err("mmap", name);
            if create {
                unlink(name);
            }
            return close(Err(e));
        }
        close(Ok(Region {
            ptr: p.cast(),
            len,
            heap: false,
        }))
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        if self.len == 0 {
            return;
        }
        if self.heap {
            let layout = std::alloc::Layout::from_size_align(self.len, 4096)
                .expect("layout was valid at allocation");
            // SAFETY: allocated in `heap` with this layout.
            unsafe { std::alloc::dealloc(self.ptr, layout) };
        } else {
            // SAFETY: mapped in `open_impl` with this length.
            unsafe { libc::munmap(self.ptr.cast(), self.len) };
        }
    }
}

/// Bytes free in /dev/shm, when the file system says.
pub(crate) fn shm_free_bytes() -> Option<u64> {
    let path = CString::new("/dev/shm").ok()?;
    // SAFETY: zeroed statvfs buffer filled by statvfs.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: valid path and out-pointer.
    if unsafe { libc::statvfs(path.as_ptr(), &mut st) } != 0 {
        return None;
    }
    #[allow(clippy::useless_conversion)] // the field types differ between targets
    Some(u64::from(st.f_bavail).saturating_mul(u64::from(st.f_frsize)))
}

/// Remove the shared-memory object `name` (ignores "does not exist").
pub fn unlink(name: &str) {
    if let Ok(c) = CString::new(name) {
        // SAFETY: valid C string.
        unsafe { libc::shm_unlink(c.as_ptr()) };
    }
}

/// Remove every object in /dev/shm whose name starts with `prefix` (without the leading '/').
/// Returns how many were removed.
pub fn unlink_prefix(prefix: &str) -> usize {
    let mut n = 0;
    if let Ok(rd) = std::fs::read_dir("/dev/shm") {
        for e in rd.flatten() {
            let name = e.file_name();
            let name = name.to_string_lossy();
            if name.starts_with(prefix) {
                unlink(&format!("/{name}"));
                n += 1;
            }
        }
    }
    n
}
