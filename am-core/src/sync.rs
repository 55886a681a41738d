//! Atomics and cells that are loom's under `cfg(loom)` and std's otherwise, so lock-free code
//! in the conduits can be model-checked unchanged.

#[cfg(loom)]
pub use loom::sync::atomic::{fence, AtomicU32, AtomicU64, AtomicUsize, Ordering};

#[cfg(not(loom))]
pub use std::sync::atomic::{fence, AtomicU32, AtomicU64, AtomicUsize, Ordering};

/// An `UnsafeCell` with loom's closure API; under loom every access is checked for races.
#[cfg(loom)]
#[derive(Debug)]
pub struct UnsafeCell<T>(loom::cell::UnsafeCell<T>);

/// An `UnsafeCell` with loom's closure API; under loom every access is checked for races.
#[cfg(not(loom))]
#[derive(Debug)]
pub struct UnsafeCell<T>(std::cell::UnsafeCell<T>);

impl<T> UnsafeCell<T> {
    /// Wrap a value.
    pub fn new(v: T) -> Self {
        #[cfg(loom)]
        {
            UnsafeCell(loom::cell::UnsafeCell::new(v))
        }
        #[cfg(not(loom))]
        {
            UnsafeCell(std::cell::UnsafeCell::new(v))
        }
    }

    /// Run `f` with a mutable pointer to the contents (a write access under loom).
    #[inline(always)]
    pub fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
        #[cfg(loom)]
        {
            self.0.with_mut(f)
        }
        #[cfg(not(loom))]
        {
            f(self.0.get())
        }
    }

    /// Run `f` with a const pointer to the contents (a read access under loom).
    #[inline(always)]
    pub fn with<R>(&self, f: impl FnOnce(*const T) -> R) -> R {
        #[cfg(loom)]
        {
            self.0.with(f)
        }
        #[cfg(not(loom))]
        {
            f(self.0.get())
        }
    }
}
