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
            // Reserve the memory now: a full /dev/shm is then this error, naming the object and
            // its size, and never a SIGBUS when a page is first touched.
            // SAFETY: fd is a shm object we created, `l` bytes long.
            let rc = unsafe { libc::posix_fallocate(fd, 0, l) };
            if rc != 0 {
                let e = Error::os(
                    "smp",
                    format!("reserving {len} bytes of /dev/shm for {name}"),
                    std::io::Error::from_raw_os_error(rc),
                );
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

/// The process that made the job whose objects are named `/dev/shm/{name}`: job names are
/// `amnet-PID-HEX` (`amnet-bench-PID-...` for the benchmark's own objects).
fn owner_pid(name: &str) -> Option<i32> {
    let rest = name.strip_prefix("amnet-")?;
    let rest = rest.strip_prefix("bench-").unwrap_or(rest);
    rest.split('-').next()?.parse().ok().filter(|&p| p > 0)
}

/// Remove every amnet object in /dev/shm whose owner process is gone: the objects of a job
/// whose launcher was killed before it could clean up (SIGKILL leaves no time for it). A
/// launcher calls this before it starts a job (and after a udp job, for the host-local
/// bypass's groups). Returns how many were removed.
pub fn sweep_stale() -> usize {
    let mut n = 0;
    if let Ok(rd) = std::fs::read_dir("/dev/shm") {
        for e in rd.flatten() {
            let name = e.file_name();
            let name = name.to_string_lossy();
            let Some(pid) = owner_pid(&name) else {
                continue;
            };
            // SAFETY: signal 0 sends nothing; it only asks whether the process exists.
            let gone = unsafe { libc::kill(pid, 0) } != 0
                && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH);
            if gone {
                unlink(&format!("/{name}"));
                n += 1;
            }
        }
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owner_pids_are_read_from_job_names() {
        assert_eq!(owner_pid("amnet-1234-5f3a-ctl"), Some(1234));
        assert_eq!(owner_pid("amnet-77-ab-q3"), Some(77));
        assert_eq!(owner_pid("amnet-bench-99-line"), Some(99));
        assert_eq!(owner_pid("amnet-x-ctl"), None);
        assert_eq!(owner_pid("other-12-ctl"), None);
    }

    #[test]
    fn the_sweep_removes_objects_of_dead_owners_only() {
        // A process that has ended: its pid names no process (until the kernel reuses it,
        // which takes a full turn of the pid space).
        let mut child = std::process::Command::new("true")
            .spawn()
            .expect("run true");
        let dead = child.id();
        child.wait().expect("wait");
        let stale = format!("/amnet-{dead}-5eed-ctl");
        let live = format!("/amnet-{}-5eed-ctl", std::process::id());
        let a = Region::create(&stale, 4096).expect("create the stale object");
        let b = Region::create(&live, 4096).expect("create the live object");
        drop((a, b));
        sweep_stale();
        let exists = |n: &str| std::path::Path::new("/dev/shm").join(&n[1..]).exists();
        assert!(!exists(&stale), "{stale} survived the sweep");
        assert!(exists(&live), "{live} of a live process was swept");
        unlink(&live);
    }
}
